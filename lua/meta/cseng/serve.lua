---@meta cseng.serve
-- LuaLS only: gives `require 'cseng.serve'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.serve).

---@type cseng.serve
local serve = {}
return serve
