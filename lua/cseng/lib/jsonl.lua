--- jsonl: JSON Lines files, the append-only results format (results/<run>.jsonl).
---
--- Writing: one record is one line, written by one fs.append (one write(2) on an O_APPEND
--- descriptor), so concurrent writers never interleave and a crash leaves at most a torn last line.
--- Reading: a malformed complete line raises "<path>:<line>: malformed JSON: ..."; a final line
--- without its newline (a write torn by a crash) is never yielded, and is reported in the status
--- table that jsonl.read returns as its second value.
---
--- Numbers are exact. Debian's lua-cjson (2.1.0) caps encode_number_precision at 14 digits and
--- writes integers as doubles (clock.now() = 1.2345678901235e+18), so records are encoded here:
--- integers with %d, floats with the shortest of %.15g/%.16g/%.17g that reads back identically,
--- NaN and infinities as null. Decoding uses cjson (strict: no NaN/hex numbers), then integral
--- values come back as Lua integers, including ones beyond 2^53 (recovered from the text).
---
--- Synchronous: reading and writing block the loop (fast local-disk operations).
local fs = require('cseng.fs')
local cjson = require('cjson')
local errors = require('cseng.lib.errors')

local jsonl = {}

local decoder = cjson.new()
decoder.decode_invalid_numbers(false)

--- The value JSON null decodes to inside arrays (in objects a null member is simply absent).
jsonl.null = cjson.null

--- Metatable marking a table to be encoded as a JSON array even when empty; see jsonl.array.
jsonl.array_mt = { __name = 'jsonl.array' }

--- Mark t (default: a new table) to be encoded as a JSON array, so an empty one is `[]`, not `{}`.
---@param t? table
---@return table
function jsonl.array(t)
  return setmetatable(t or {}, jsonl.array_mt)
end

-- ---- encoding -------------------------------------------------------------

local escapes = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n',
  ['\r'] = '\\r', ['\t'] = '\\t' }
for c = 0, 31 do
  local ch = string.char(c)
  escapes[ch] = escapes[ch] or string.format('\\u%04x', c)
end
escapes['\127'] = '\\u007f'

-- Strings are written as valid UTF-8 so strict readers (Python's json) accept every line:
-- bytes that are not UTF-8 (binary output tails) become U+FFFD.
local function valid_utf8(s)
  if utf8.len(s) then return s end
  local out, i = {}, 1
  while true do
    local ok, bad = utf8.len(s, i)
    if ok then
      out[#out + 1] = s:sub(i)
      return table.concat(out)
    end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = '\u{FFFD}'
    i = bad + 1
  end
end

local function encode_string(s)
  return '"' .. (valid_utf8(s):gsub('[%c"\\]', escapes)) .. '"'
end

local function encode_number(v)
  if math.type(v) == 'integer' then return string.format('%d', v) end
  if v ~= v or v == math.huge or v == -math.huge then return 'null' end
  for _, f in ipairs({ '%.15g', '%.16g' }) do
    local s = f:format(v)
    if tonumber(s) == v then return s end
  end
  return string.format('%.17g', v)
end

local encode_value

local function where(key)
  return key == nil and 'the record' or string.format('key %q', tostring(key))
end

local function encode_table(t, out, depth, key)
  if depth > 200 then errors.raise(errors.EINVAL, 'jsonl: cannot encode: nested too deeply (a cycle?) at ' .. where(key)) end
  local n, max, all_int = 0, 0, true
  for k in next, t do
    n = n + 1
    if math.type(k) == 'integer' and k > 0 then
      if k > max then max = k end
    else
      all_int = false
    end
  end
  if getmetatable(t) == jsonl.array_mt or (n > 0 and all_int) then
    if not all_int then errors.raise(errors.EINVAL, 'jsonl: cannot encode: array with non-index keys at ' .. where(key)) end
    if max > 2 * n and max > 10 then
      errors.raise(errors.EINVAL, 'jsonl: cannot encode: excessively sparse array at ' .. where(key))
    end
    out[#out + 1] = '['
    for i = 1, max do
      if i > 1 then out[#out + 1] = ',' end
      encode_value(t[i], out, depth + 1, i)
    end
    out[#out + 1] = ']'
    return
  end
  local keys = {}
  for k in next, t do
    local tk = type(k)
    if tk == 'string' then
      keys[#keys + 1] = k
    elseif tk == 'number' then
      keys[#keys + 1] = encode_number(k)
    else
      errors.raise(errors.EINVAL, 'jsonl: cannot encode: ' .. tk .. ' key in ' .. where(key))
    end
  end
  table.sort(keys) -- deterministic lines: members in byte order
  out[#out + 1] = '{'
  for i, k in ipairs(keys) do
    local v = t[k]
    if v == nil then v = t[math.tointeger(tonumber(k)) or tonumber(k)] end
    if i > 1 then out[#out + 1] = ',' end
    out[#out + 1] = encode_string(k)
    out[#out + 1] = ':'
    encode_value(v, out, depth + 1, k)
  end
  out[#out + 1] = '}'
end

function encode_value(v, out, depth, key)
  local t = type(v)
  if t == 'string' then
    out[#out + 1] = encode_string(v)
  elseif t == 'number' then
    out[#out + 1] = encode_number(v)
  elseif t == 'boolean' then
    out[#out + 1] = v and 'true' or 'false'
  elseif v == nil or v == cjson.null then
    out[#out + 1] = 'null'
  elseif t == 'table' then
    encode_table(v, out, depth, key)
  else
    errors.raise(errors.EINVAL, 'jsonl: cannot encode a ' .. t .. ' value at ' .. where(key))
  end
end

--- Encode one value as a single line of JSON (no newline). Object members are sorted.
--- Raises on values JSON cannot hold (functions, userdata, cycles, sparse arrays).
---@param value any
---@return string
function jsonl.encode(value)
  local out = {}
  encode_value(value, out, 0, nil)
  return table.concat(out)
end

-- ---- decoding ---------------------------------------------------------------

-- Integers of 16+ digits would lose precision as cjson's doubles: before decoding, such
-- literals (outside strings) are rewritten as tagged strings, turned back into integers below.
local BIG = '\1jsonl-int:'
local BIG_JSON = '\\u0001jsonl-int:'

local function protect_big_integers(line)
  local out, i, last, n = {}, 1, 1, #line
  while i <= n do
    local c = line:byte(i)
    if c == 34 then -- a string: skip to its closing quote
      local j = i + 1
      while true do
        local q = line:find('["\\]', j)
        if not q then return line end -- unterminated: cjson reports it
        if line:byte(q) == 92 then
          j = q + 2
        else
          i = q + 1
          break
        end
      end
    elseif c == 45 or (c >= 48 and c <= 57) then
      local s, e = line:find('^%-?%d+', i)
      if not s then
        i = i + 1
      else
        local nextc = line:sub(e + 1, e + 1)
        if e - s >= 15 and nextc ~= '.' and nextc ~= 'e' and nextc ~= 'E' then
          local lit = line:sub(s, e)
          if math.tointeger(tonumber(lit)) then
            out[#out + 1] = line:sub(last, s - 1)
            out[#out + 1] = '"' .. BIG_JSON .. lit .. '"'
            last = e + 1
          end
        end
        i = e + 1
        while i <= n and line:find('^[%d.eE+%-]', i) do i = i + 1 end -- rest of a float literal
      end
    else
      i = i + 1
    end
  end
  if last == 1 then return line end
  out[#out + 1] = line:sub(last)
  return table.concat(out)
end

local normalize

local function normalize_value(v)
  local t = type(v)
  if t == 'number' then
    if v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53 then return math.tointeger(v) end
    return v
  elseif t == 'string' then
    if v:sub(1, #BIG) == BIG then return math.tointeger(tonumber(v:sub(#BIG + 1))) or v end
    return v
  elseif t == 'table' then
    return normalize(v)
  end
  return v
end

function normalize(t)
  local fix = {}
  for k, v in next, t do
    if v == cjson.null then
      if type(k) == 'string' then fix[#fix + 1] = k end
    else
      local nv = normalize_value(v)
      if nv ~= v or math.type(nv) ~= math.type(v) then t[k] = nv end
    end
  end
  for _, k in ipairs(fix) do t[k] = nil end
  return t
end

--- Decode one line. Integral numbers come back as Lua integers; null members of objects are
--- absent; null elements of arrays are jsonl.null.
---@param line string
---@return any|nil value, string? err
function jsonl.decode(line)
  if line:find('%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d') then line = protect_big_integers(line) end
  local ok, v = pcall(decoder.decode, line)
  if not ok then return nil, tostring(v), 'EPARSE' end
  return normalize_value(v)
end

-- ---- files --------------------------------------------------------------------

---@class jsonl.append_opts
---@field sync? boolean fsync before returning (for records that cleanup depends on)

--- Append one record as one line with one write(2). Creates the file (0644) if missing.
---@param path string
---@param record table
---@param opts? jsonl.append_opts
---@return true|nil ok, string? err, string? code
function jsonl.append(path, record, opts)
  if type(record) ~= 'table' then errors.raise(errors.EINVAL, 'jsonl.append: record must be a table, got ' .. type(record)) end
  return fs.append(path, jsonl.encode(record) .. '\n', { sync = opts ~= nil and opts.sync or false })
end

---@class jsonl.torn
---@field line integer the torn line's number
---@field offset integer its byte offset in the file
---@field text string the partial content

---@class jsonl.status
---@field lines integer complete lines seen (blank ones included)
---@field torn? jsonl.torn set when the file ends with a line that has no newline

---@class jsonl.read_opts
---@field strict? boolean raise on a torn final line instead of reporting it in the status
---@field salvage? boolean a malformed line is taken for a torn record the next write landed on:
---   the whole record at its end is kept (status.salvaged lists the line numbers); a malformed
---   last line is taken for a torn one and skipped (status.torn)

--- Iterate over a file's records: `for record, line_number in jsonl.read(path) do`.
--- Returns the iterator and a status table, which is complete once the iterator has ended:
--- `status.torn` describes a final line without newline (never yielded; with opts.strict, an error).
--- Blank lines are skipped. A malformed complete line raises "<path>:<n>: malformed JSON: <why>".
--- The whole file is read when jsonl.read is called. A missing file returns nil, msg, code.
---@param path string
---@param opts? jsonl.read_opts
---@return (fun(): table, integer)|nil iter, jsonl.status|string status_or_err, string? code
function jsonl.read(path, opts)
  local data, err, code = fs.read(path)
  if not data then return nil, err, code end
  local strict = opts ~= nil and opts.strict
  local status = { lines = 0 }
  local pos, lineno, size = 1, 0, #data
  local function iter()
    while pos <= size do
      local nl = data:find('\n', pos, true)
      lineno = lineno + 1
      if not nl then
        local text = data:sub(pos)
        pos = size + 1
        if text:find('^%s*$') then return nil end
        if strict then
          errors.raise(errors.EPARSE, string.format('%s:%d: torn final line (%d bytes without a newline)', path, lineno, #text))
        end
        status.torn = { line = lineno, offset = size - #text, text = text }
        return nil
      end
      local line = data:sub(pos, nl - 1)
      pos = nl + 1
      status.lines = lineno
      if not line:find('^%s*$') then
        local v, why = jsonl.decode(line)
        if v == nil and opts ~= nil and opts.salvage then
          v = jsonl.salvage(line)
          if v ~= nil then
            status.salvaged = status.salvaged or {}
            status.salvaged[#status.salvaged + 1] = lineno
          elseif pos > size or data:find('^%s*$', pos) then
            status.torn = { line = lineno, offset = nl - #line - 1, text = line }
            return nil
          end
        end
        if v == nil then errors.raise(errors.EPARSE, string.format('%s:%d: malformed JSON: %s', path, lineno, why)) end
        return v, lineno
      end
    end
    return nil
  end
  return iter, status
end

--- The whole object at the end of a line whose start is a torn record (a write cut short by a
--- full disk or a crash, then the next record appended after it), or nil.
---@param line string
---@return table|nil
function jsonl.salvage(line)
  local at = 2
  while true do
    local s = line:find('{"', at, true)
    if not s then return nil end
    local v = jsonl.decode(line:sub(s))
    if type(v) == 'table' then return v end
    at = s + 1
  end
end

---@class jsonl.lines_opts
---@field max_line? integer refuse a line longer than this many bytes (before reading all of it)

--- Iterate over a file's lines without holding the file in memory: `for line, n in
--- jsonl.lines(path, {max_line = 1 << 26}) do`. A line over opts.max_line raises
--- "<path>: line <n> is over <max> bytes" as soon as that many bytes are read, so a huge line
--- costs at most max_line bytes of memory. A missing file returns nil, msg, code.
---@param path string
---@param opts? jsonl.lines_opts
---@return (fun(): string, integer)|nil iter, string? err, string? code
function jsonl.lines(path, opts)
  local f, err = io.open(path, 'rb')
  if not f then
    local st = fs.stat(path)
    return nil, tostring(err), st and 'EACCES' or 'ENOENT'
  end
  local max = opts ~= nil and opts.max_line or nil
  local buf, parts, held, n, eof = '', {}, 0, 0, false
  local function shut() if io.type(f) == 'file' then f:close() end end
  return function()
    while true do
      local nl = buf:find('\n', 1, true)
      if nl then
        local line = buf:sub(1, nl - 1)
        buf = buf:sub(nl + 1)
        if #parts > 0 then parts[#parts + 1] = line; line = table.concat(parts); parts, held = {}, 0 end
        n = n + 1
        if max and #line > max then shut(); errors.raise(errors.ELIMIT, string.format('%s: line %d is over %d bytes', path, n, max)) end
        return line, n
      end
      if eof then
        if #parts == 0 and buf == '' then return nil end
        parts[#parts + 1] = buf
        local line = table.concat(parts)
        buf, parts, held = '', {}, 0
        n = n + 1
        if max and #line > max then errors.raise(errors.ELIMIT, string.format('%s: line %d is over %d bytes', path, n, max)) end
        return line, n
      end
      -- no newline in the buffer: keep it aside (a long line) and read on
      if buf ~= '' then
        parts[#parts + 1] = buf
        held = held + #buf
        buf = ''
        if max and held > max then
          shut()
          errors.raise(errors.ELIMIT, string.format('%s: line %d is over %d bytes', path, n + 1, max))
        end
      end
      local chunk = f:read(1 << 16)
      if chunk then buf = chunk else eof = true; shut() end
    end
  end
end

--- All records of a file, in order, plus the status (see jsonl.read).
---@param path string
---@param opts? jsonl.read_opts
---@return table[]|nil records, jsonl.status|string status_or_err, string? code
function jsonl.read_all(path, opts)
  local iter, status, code = jsonl.read(path, opts)
  if not iter then return nil, status, code end
  local out = {}
  for rec in iter do out[#out + 1] = rec end
  return out, status
end

return jsonl
