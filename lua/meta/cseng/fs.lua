---@meta cseng.fs
-- LuaLS only: gives `require 'cseng.fs'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.fs).

---@type cseng.fs
local fs = {}
return fs
