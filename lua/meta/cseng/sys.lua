---@meta cseng.sys
-- LuaLS only: gives `require 'cseng.sys'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.sys).

---@type cseng.sys
local sys = {}
return sys
