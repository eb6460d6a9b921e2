---@meta cseng.archive
-- LuaLS only: gives `require 'cseng.archive'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.archive).

---@type cseng.archive
local archive = {}
return archive
