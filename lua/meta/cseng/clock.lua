---@meta cseng.clock
-- LuaLS only: gives `require 'cseng.clock'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.clock).

---@type cseng.clock
local clock = {}
return clock
