---@meta cseng.parquet
-- LuaLS only: gives `require 'cseng.parquet'` the type defined in lua/meta/cseng.lua. Never loaded
-- at run time (the binary preloads cseng.parquet).

---@type cseng.parquet
local parquet = {}
return parquet
