-- luacheck configuration (Debian package lua-check): `luacheck lua spec plans bench`.
std = 'lua54'
max_line_length = 160 -- flag and column tables read better on one line

-- specs run inside busted (cseng test): describe, it, assert, pending, ...
files['spec/'] = { std = '+busted' }

-- LuaLS definition stubs: empty function bodies, tables that only carry annotations
files['lua/meta/'] = { ignore = { '212', '241' } }

exclude_files = { 'spec/fixtures/', 'spec/tmp/', 'bench/out/' }
