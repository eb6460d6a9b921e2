--- A small TOML 1.0 reader for task.toml files (Debian ships no TOML module for Lua 5.4).
--- Supports tables, dotted keys, arrays of tables, inline tables, arrays, basic and literal
--- strings (single and multi-line), integers (dec/hex/oct/bin, underscores), floats
--- (inf/nan), booleans. Dates and times are returned as their source strings.
--- Errors name the source and line: "task.toml:12: expected '=' after key".
local errors = require('cseng.lib.errors')

local toml = {}

local Parser = {}
Parser.__index = Parser

function Parser:fail(msg)
  errors.raise(errors.EPARSE, string.format('%s:%d: %s', self.name, self.line, msg))
end

function Parser:peek(n) return self.src:sub(self.pos, self.pos + (n or 1) - 1) end

function Parser:advance(n)
  local s = self.src:sub(self.pos, self.pos + n - 1)
  for _ in s:gmatch('\n') do self.line = self.line + 1 end
  self.pos = self.pos + n
end

-- Skip spaces and tabs (and, when nl, newlines and comments).
function Parser:ws(nl)
  while true do
    local c = self:peek()
    if c == ' ' or c == '\t' or c == '\r' then
      self:advance(1)
    elseif c == '#' then
      local e = self.src:find('\n', self.pos, true) or (#self.src + 1)
      self:advance(e - self.pos)
    elseif nl and c == '\n' then
      self:advance(1)
    else
      return
    end
  end
end

function Parser:expect_eol()
  self:ws(false)
  local c = self:peek()
  if c ~= '' and c ~= '\n' then self:fail("unexpected '" .. c .. "' after value") end
end

local escapes = { b = '\b', t = '\t', n = '\n', f = '\f', r = '\r', ['"'] = '"', ['\\'] = '\\' }

function Parser:basic_string(multi)
  local out = {}
  local close = multi and '"""' or '"'
  if multi and self:peek() == '\n' then self:advance(1) end
  while true do
    local c = self:peek()
    if c == '' then self:fail('unterminated string') end
    if self:peek(#close) == close then
      if multi then -- up to two quotes may stand right before the closing delimiter
        while self:peek(4) == '""""' do out[#out + 1] = '"'; self:advance(1) end
      end
      self:advance(#close)
      return table.concat(out)
    end
    if c == '\n' and not multi then self:fail('newline in a single-line string') end
    if c == '\\' then
      local n = self.src:sub(self.pos + 1, self.pos + 1)
      if escapes[n] then
        out[#out + 1] = escapes[n]; self:advance(2)
      elseif n == 'u' or n == 'U' then
        local len = n == 'u' and 4 or 8
        local hex = self.src:sub(self.pos + 2, self.pos + 1 + len)
        if not hex:match('^%x+$') or #hex ~= len then self:fail('bad unicode escape') end
        out[#out + 1] = utf8.char(tonumber(hex, 16)); self:advance(2 + len)
      elseif multi and n:match('[ \t\r\n]') then -- line-ending backslash trims whitespace
        self:advance(1)
        local s, e = self.src:find('^[ \t\r\n]*', self.pos)
        self:advance(e - s + 1)
      else
        self:fail('bad escape \\' .. n)
      end
    else
      out[#out + 1] = c; self:advance(1)
    end
  end
end

function Parser:literal_string(multi)
  local close = multi and "'''" or "'"
  if multi and self:peek() == '\n' then self:advance(1) end
  local e = self.src:find(close, self.pos, true)
  if not e then self:fail('unterminated string') end
  if multi then while self.src:sub(e + 3, e + 3) == "'" do e = e + 1 end end
  local s = self.src:sub(self.pos, e - 1)
  if not multi and s:find('\n') then self:fail('newline in a single-line string') end
  self:advance(e - self.pos + #close)
  return s
end

function Parser:key_part()
  local c = self:peek()
  if c == '"' then self:advance(1); return self:basic_string(false) end
  if c == "'" then self:advance(1); return self:literal_string(false) end
  local s, e = self.src:find('^[%w_%-]+', self.pos)
  if not s then self:fail('expected a key') end
  local k = self.src:sub(s, e)
  self:advance(e - s + 1)
  return k
end

function Parser:key()
  local parts = { self:key_part() }
  self:ws(false)
  while self:peek() == '.' do
    self:advance(1); self:ws(false)
    parts[#parts + 1] = self:key_part()
    self:ws(false)
  end
  return parts
end

function Parser:number_or_date()
  local s, e = self.src:find('^[%w_%.:%+%-]+', self.pos)
  if not s then self:fail('expected a value') end
  local tok = self.src:sub(s, e)
  -- a date-time may have a space between date and time
  if tok:match('^%d%d%d%d%-%d%d%-%d%d$') then
    local s2, e2 = self.src:find('^ %d%d:%d%d:[%d%.:%+%-Z]+', e + 1)
    if s2 then e = e2; tok = self.src:sub(s, e) end
  end
  self:advance(e - s + 1)
  if tok == 'true' then return true end
  if tok == 'false' then return false end
  if tok:match('^%d%d%d%d%-%d%d%-%d%d') or tok:match('^%d%d:%d%d:%d%d') then return tok end
  local t = tok:gsub('_', '')
  if t == 'inf' or t == '+inf' then return math.huge end
  if t == '-inf' then return -math.huge end
  if t == 'nan' or t == '+nan' or t == '-nan' then return 0 / 0 end
  local sign, base, digits = t:match('^([%+%-]?)0([xob])(%w+)$')
  if base then
    local v = tonumber(digits, ({ x = 16, o = 8, b = 2 })[base])
    if not v then self:fail("bad number '" .. tok .. "'") end
    return sign == '-' and -v or v
  end
  if t:match('^[%+%-]?%d+$') then return math.tointeger(tonumber(t)) end
  local v = tonumber(t)
  if v == nil or not t:match('^[%+%-]?%d') then self:fail("bad value '" .. tok .. "'") end
  return v
end

function Parser:value()
  local c = self:peek()
  if self:peek(3) == '"""' then self:advance(3); return self:basic_string(true) end
  if self:peek(3) == "'''" then self:advance(3); return self:literal_string(true) end
  if c == '"' then self:advance(1); return self:basic_string(false) end
  if c == "'" then self:advance(1); return self:literal_string(false) end
  if c == '[' then
    self:advance(1)
    local arr = {}
    while true do
      self:ws(true)
      if self:peek() == ']' then self:advance(1); return arr end
      arr[#arr + 1] = self:value()
      self:ws(true)
      local d = self:peek()
      if d == ',' then self:advance(1)
      elseif d == ']' then self:advance(1); return arr
      else self:fail("expected ',' or ']' in array") end
    end
  end
  if c == '{' then
    self:advance(1)
    local tbl = {}
    self:ws(false)
    if self:peek() == '}' then self:advance(1); return tbl end
    while true do
      self:ws(false)
      local k = self:key()
      self:ws(false)
      if self:peek() ~= '=' then self:fail("expected '=' after key") end
      self:advance(1); self:ws(false)
      self:assign(tbl, k, self:value())
      self:ws(false)
      local d = self:peek()
      if d == ',' then self:advance(1)
      elseif d == '}' then self:advance(1); return tbl
      else self:fail("expected ',' or '}' in inline table") end
    end
  end
  return self:number_or_date()
end

function Parser:descend(tbl, parts, last)
  for i = 1, last do
    local k = parts[i]
    local v = tbl[k]
    if v == nil then
      v = {}; tbl[k] = v
    elseif type(v) ~= 'table' then
      self:fail("key '" .. table.concat(parts, '.', 1, i) .. "' is already a value")
    elseif v[#v] ~= nil and self.aot[v] then
      v = v[#v] -- the newest table of an array of tables
    end
    tbl = v
  end
  return tbl
end

function Parser:assign(tbl, parts, value)
  local t = self:descend(tbl, parts, #parts - 1)
  local k = parts[#parts]
  if t[k] ~= nil then self:fail("duplicate key '" .. table.concat(parts, '.') .. "'") end
  t[k] = value
end

function Parser:parse()
  local root = {}
  local current = root
  while true do
    self:ws(true)
    local c = self:peek()
    if c == '' then return root end
    if self:peek(2) == '[[' then
      self:advance(2); self:ws(false)
      local parts = self:key()
      if self:peek(2) ~= ']]' then self:fail("expected ']]'") end
      self:advance(2)
      local parent = self:descend(root, parts, #parts - 1)
      local k = parts[#parts]
      local arr = parent[k]
      if arr == nil then arr = {}; parent[k] = arr; self.aot[arr] = true end
      if not self.aot[arr] then self:fail("'" .. table.concat(parts, '.') .. "' is not an array of tables") end
      current = {}
      arr[#arr + 1] = current
      self:expect_eol()
    elseif c == '[' then
      self:advance(1); self:ws(false)
      local parts = self:key()
      if self:peek() ~= ']' then self:fail("expected ']'") end
      self:advance(1)
      current = self:descend(root, parts, #parts)
      self:expect_eol()
    else
      local k = self:key()
      self:ws(false)
      if self:peek() ~= '=' then self:fail("expected '=' after key") end
      self:advance(1); self:ws(false)
      self:assign(current, k, self:value())
      self:expect_eol()
    end
  end
end

--- Parse TOML text. Returns the table, or nil, "name:line: message", "EPARSE".
---@param text string
---@param name? string shown in errors (a file name)
---@return table|nil, string|nil, string|nil
function toml.parse(text, name)
  local p = setmetatable({ src = text, pos = 1, line = 1, name = name or 'toml', aot = {} }, Parser)
  local ok, res = pcall(p.parse, p)
  if ok then return res end
  return nil, errors.line(res), errors.is(res) and res.code or errors.EPARSE
end

return toml
