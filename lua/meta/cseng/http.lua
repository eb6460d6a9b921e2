---@meta cseng.http
-- LuaLS only: gives `require 'cseng.http'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.http).

---@type cseng.http
local http = {}
return http
