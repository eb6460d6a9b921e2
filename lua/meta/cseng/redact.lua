---@meta cseng.redact
-- LuaLS only: gives `require 'cseng.redact'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.redact).

---@type cseng.redact
local redact = {}
return redact
