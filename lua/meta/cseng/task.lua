---@meta cseng.task
-- LuaLS only: gives `require 'cseng.task'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.task).

---@type cseng.task
local task = {}
return task
