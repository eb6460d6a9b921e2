---@meta cseng.proc
-- LuaLS only: gives `require 'cseng.proc'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.proc).

---@type cseng.proc
local proc = {}
return proc
