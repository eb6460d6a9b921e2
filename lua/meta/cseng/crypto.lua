---@meta cseng.crypto
-- LuaLS only: gives `require 'cseng.crypto'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.crypto).

---@type cseng.crypto
local crypto = {}
return crypto
