--- Small helpers shared by the Lua layer: paths, quoting, secrets, tables.
local util = {}

--- cseng's cache directory: $CSENG_CACHE, else ~/.cache/cseng (getenv: the run's environment,
--- default os.getenv; an empty value counts as unset).
function util.cache_dir(getenv)
  getenv = getenv or os.getenv
  local base = getenv('CSENG_CACHE')
  if base and base ~= '' then return base end
  local home = getenv('HOME') or os.getenv('HOME')
  return ((home and home ~= '') and home or '/tmp') .. '/.cache/cseng'
end

function util.trim(s) return (tostring(s):gsub('^%s+', ''):gsub('%s+$', '')) end

function util.dirname(p)
  local d = tostring(p):gsub('/+$', ''):match('^(.*)/[^/]*$')
  if d == nil then return '.' end
  if d == '' then return '/' end
  return d
end

function util.basename(p) return (tostring(p):gsub('/+$', ''):match('([^/]*)$')) end

function util.join(...)
  local parts = { ... }
  local out = table.concat(parts, '/'):gsub('//+', '/')
  return out
end

--- Quote for /bin/sh.
function util.shell_quote(s)
  s = tostring(s)
  if s:match('^[%w%._/:=@%-]+$') then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

function util.shell_join(argv)
  local out = {}
  for i, a in ipairs(argv) do out[i] = util.shell_quote(a) end
  return table.concat(out, ' ')
end

--- Keep the last n bytes of s.
function util.tail(s, n)
  s = s or ''
  n = n or 4000
  if #s <= n then return s end
  return s:sub(-n)
end

--- Keep the first n bytes of s (an error line: its head says what failed), "..." in place of the
--- rest; never cut inside a UTF-8 sequence.
function util.head(s, n)
  s = s or ''
  n = n or 4000
  if #s <= n then return s end
  local cut = n
  while cut > 0 and (s:byte(cut + 1) or 0) >= 0x80 and (s:byte(cut + 1) or 0) < 0xC0 do cut = cut - 1 end
  return s:sub(1, cut) .. '...'
end

-- Secret values: environment variables whose names say TOKEN, KEY, SECRET or PASSWORD (a
-- value of 6 or more bytes that is not an absolute path), plus anything registered with
-- util.add_secret (--env-file credentials, tokens a provider returned). Each one is hidden with
-- its encoded forms (util.secret_forms), and the engine's C side (cseng.redact, which C
-- diagnostics go through) is handed every form the moment the set changes.
local secrets = nil  -- list of every whole form to hide
local frags = nil    -- secret fragments of FRAG bytes: fragment -> true
local seen = nil     -- form -> true
local extra_secrets = {}
local FRAG = 8       -- no run of this many bytes of a secret survives util.redact

--- Whether the name of an environment variable says it holds a credential.
---@param name string
function util.secret_name(name)
  local up = tostring(name):upper()
  return (up:find('TOKEN') or up:find('KEY') or up:find('SECRET') or up:find('PASSWORD')) and true or false
end

local function url_safe(b) return (b:gsub('[+/]', { ['+'] = '-', ['/'] = '_' })) end

--- The strings that hide v when a server echoes it: v itself, then its base64 (standard and
--- URL-safe alphabets, padded; and, for each of the 3 alignments v can have inside a longer
--- encoded string, the characters made of v's bits alone, which also match the unpadded
--- form) and its percent-encodings (upper- and lower-case hex, and a form body's `+` for a
--- space) where they differ from v.
---@param v string
---@return string[]
function util.secret_forms(v)
  local b64 = require('cseng.crypto').base64
  local out, have = {}, {}
  local function put(f)
    if #f > 5 and not have[f] then have[f] = true; out[#out + 1] = f end
  end
  put(v)
  local full = b64(v)
  put(full); put(url_safe(full))
  for a = 0, 2 do
    local enc = b64(string.rep('\0', a) .. v)
    -- character j (from 0) holds bits 6j .. 6j+5 of the encoded bytes; v's are 8a .. 8(a+#v)-1
    local core = enc:sub((8 * a + 5) // 6 + 1, (8 * (a + #v)) // 6)
    put(core); put(url_safe(core))
  end
  local upper = v:gsub('[^%w%-%._~]', function(c) return string.format('%%%02X', c:byte()) end)
  put(upper)
  put((upper:gsub('%%(%x%x)', function(h) return '%' .. h:lower() end)))
  put((v:gsub('[^%w%-%._~ ]', function(c) return string.format('%%%02X', c:byte()) end):gsub(' ', '+')))
  return out
end

local function add(v)
  for _, f in ipairs(util.secret_forms(v)) do
    if not seen[f] then
      seen[f] = true
      secrets[#secrets + 1] = f
      require('cseng.redact').add(f, false)
    end
  end
  require('cseng.redact').add(v, true) -- and its FRAG-byte runs
  for i = 1, #v - FRAG + 1 do frags[v:sub(i, i + FRAG - 1)] = true end
end

local function secret_values()
  if secrets then return secrets end
  secrets, frags, seen = {}, {}, {}
  require('cseng.redact').clear()
  local env = require('cseng.sys').environ()
  for k, v in pairs(env) do
    if util.secret_name(k) and #v > 5 and v:sub(1, 1) ~= '/' then add(v) end
  end
  for _, v in ipairs(extra_secrets) do add(v) end
  return secrets
end

--- Register a secret value (a provider's token, a credential): util.redact hides it, its
--- encoded forms, and every run of 8 or more of its bytes, from then on (the C side too).
---@param v any strings of 6 or more bytes count
function util.add_secret(v)
  if type(v) == 'string' and #v > 5 then
    extra_secrets[#extra_secrets + 1] = v
    if secrets then add(v) else secret_values() end
  end
end

--- Rebuild the secret list (after --env-file loads new variables).
function util.reset_secrets()
  secrets = nil
  secret_values()
end

--- Replace every secret value in s (and its encoded forms, util.secret_forms), and every run of 8
--- or more bytes of one, by [redacted].
--- Call it before cutting a string to a snippet or a tail (a cut secret is still a secret).
--- Cost: one plain search per distinct 8-byte fragment of the secrets (C speed), then one pass
--- to splice the marked ranges.
---@param s any a string (anything else is returned as it is)
---@return any
function util.redact(s)
  if type(s) ~= 'string' or #s < 6 then return s end
  local list = secret_values()
  if #list == 0 then return s end
  local ranges = {}
  for _, v in ipairs(list) do -- whole values (also the short ones, below FRAG bytes)
    local i = 1
    while true do
      local a, b = s:find(v, i, true)
      if not a then break end
      ranges[#ranges + 1] = { a, b }
      i = b + 1
    end
  end
  if #s >= FRAG then
    for f in pairs(frags) do
      local i = 1
      while true do
        local a = s:find(f, i, true)
        if not a then break end
        ranges[#ranges + 1] = { a, a + FRAG - 1 }
        i = a + 1
      end
    end
  end
  if #ranges == 0 then return s end
  table.sort(ranges, function(x, y) return x[1] < y[1] end)
  local out, pos = {}, 1
  local ca, cb = ranges[1][1], ranges[1][2]
  for k = 2, #ranges + 1 do
    local r = ranges[k]
    if r and r[1] <= cb + 1 then
      if r[2] > cb then cb = r[2] end
    else
      out[#out + 1] = s:sub(pos, ca - 1)
      out[#out + 1] = '[redacted]'
      pos = cb + 1
      if r then ca, cb = r[1], r[2] end
    end
  end
  out[#out + 1] = s:sub(pos)
  return table.concat(out)
end

--- Escape control characters for a terminal: every byte below 0x20 but newline and tab, and
--- DEL, becomes \xNN (an escape sequence or a carriage return in a task id, an archive entry
--- name or an error message cannot repaint the screen or forge a line). A newline is escaped
--- too when o.newline is true (a name that must stay on one line).
---@param s any
---@param newline boolean|nil
---@return string
function util.escape(s, newline)
  s = tostring(s)
  local pat = newline and '[%z\1-\31\127]' or '[%z\1-\8\11-\31\127]'
  return (s:gsub(pat, function(c) return string.format('\\x%02x', c:byte()) end))
end

local CTRL = '[%z\1-\8\11-\31\127]'
local EL = '\r\27[K' -- the progress line's "return, erase line"

--- Escape for stdout: as util.escape, but a CRLF line end (CSV) and the progress line's own
--- redraw ("\r\27[K") pass; everything else below 0x20 but newline and tab is escaped.
---@param s string
---@return string
function util.escape_stdout(s)
  if not s:find(CTRL) then return s end
  local out, pos = {}, 1
  while true do
    local a, b = s:find(EL, pos, true)
    local part = s:sub(pos, (a or 0) - 1)
    -- real NULs first, then a NUL marks each CRLF's CR while the rest is escaped
    part = part:gsub('%z', '\\x00'):gsub('\r\n', '\0\n'):gsub(CTRL, function(c)
      if c == '\0' then return '\0' end
      return string.format('\\x%02x', c:byte())
    end)
    out[#out + 1] = (part:gsub('%z\n', '\r\n'))
    if not a then break end
    out[#out + 1] = EL
    pos = b + 1
  end
  return table.concat(out)
end

--- What the console gets: redacted, then control characters escaped (newlines kept).
---@param s any
---@return string
function util.console(s) return util.escape(util.redact(tostring(s))) end

local console_guarded = false
local raw_stdout_write -- the unguarded write, once guard_console has wrapped it

--- The control sequences a terminal may receive from cseng, and only from the progress
--- renderer (cseng.cli.present): carriage return, cursor up N lines, erase to the end of the
--- screen, erase the line. The console guard escapes every other control character on stdout;
--- this is the one way past it, and it refuses anything else.
util.TERMINAL_CONTROLS = { '\r', '\27%[%d+A', '\27%[J', '\27%[K' }

--- Write terminal control sequences (only those of util.TERMINAL_CONTROLS) to stdout.
---@param seq string
function util.terminal(seq)
  local rest = seq
  while #rest > 0 do
    local matched
    for _, pat in ipairs(util.TERMINAL_CONTROLS) do
      local a, b = rest:find('^' .. pat)
      if a then matched = b break end
    end
    if not matched then
      require('cseng.lib.errors').raise('EINVAL', 'util.terminal: not a control sequence the console allows: ' .. util.escape(rest))
    end
    rest = rest:sub(matched + 1)
  end
  if raw_stdout_write then return raw_stdout_write(io.stdout, seq) end
  return io.stdout:write(seq)
end

--- Route everything Lua writes to the console through the redactor: io.write, print, and the
--- write method of io.stdout and io.stderr, which also escape control characters (an escape
--- sequence or a carriage return in a task id, an archive entry name or an error message
--- cannot repaint the terminal or forge a line; stdout keeps CRLF and the progress line's
--- redraw, util.escape_stdout). Idempotent; cli.main calls it first.
function util.guard_console()
  if console_guarded then return end
  console_guarded = true
  secret_values() -- the C side's diagnostics hide the environment's secrets from the start
  local meth = getmetatable(io.stdout).__index
  local raw_write = meth.write
  raw_stdout_write = raw_write
  local out, err = io.stdout, io.stderr
  meth.write = function(f, ...)
    if f ~= out and f ~= err then return raw_write(f, ...) end
    local n = select('#', ...)
    local args = { ... }
    for i = 1, n do
      local a = args[i]
      if type(a) == 'string' then
        a = util.redact(a)
        if f == err then a = util.escape(a) else a = util.escape_stdout(a) end
        args[i] = a
      end
    end
    return raw_write(f, table.unpack(args, 1, n))
  end
  rawset(io, 'write', function(...) return io.output():write(...) end)
  rawset(_G, 'print', function(...)
    local n = select('#', ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    out:write(table.concat(parts, '\t'), '\n')
  end)
end

--- Redact every string inside a table (a copy).
function util.redact_all(v)
  if type(v) == 'string' then return util.redact(v) end
  if type(v) ~= 'table' then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = util.redact_all(x) end
  return setmetatable(out, getmetatable(v))
end

function util.copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

function util.merge(...)
  local out = {}
  for i = 1, select('#', ...) do
    for k, v in pairs(select(i, ...) or {}) do out[k] = v end
  end
  return out
end

function util.keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out, function(a, b) return tostring(a) < tostring(b) end)
  return out
end

--- Parse a .env file: KEY=VALUE lines, optional export, quotes, # comments.
function util.parse_env_file(text, name)
  local out = {}
  local n = 0
  for line in (text .. '\n'):gmatch('(.-)\r?\n') do
    n = n + 1
    if line:match('%S') and not line:match('^%s*#') then
      local k, v = line:match('^%s*export%s+([%a_][%w_]*)%s*=%s*(.-)%s*$')
      if not k then k, v = line:match('^%s*([%a_][%w_]*)%s*=%s*(.-)%s*$') end
      if not k then return nil, string.format('%s:%d: expected KEY=VALUE', name or '.env', n) end
      local q = v:sub(1, 1)
      local quoted = (q == '"' or q == "'") and v:match('^' .. q .. '(.-)' .. q .. '%s*$')
        or (q == '"' or q == "'") and v:match('^' .. q .. '(.-)' .. q .. '%s+#.*$')
      if quoted then
        v = quoted
        if q == '"' then v = v:gsub('\\n', '\n'):gsub('\\"', '"') end
      else
        v = v:gsub('%s+#.*$', '')
      end
      out[k] = v
    end
  end
  return out
end

--- Human-friendly seconds.
function util.fmt_seconds(s)
  if s == nil then return '-' end
  if s < 1 then return string.format('%.0f ms', s * 1000) end
  if s < 120 then return string.format('%.1f s', s) end
  return string.format('%dm%02ds', math.floor(s / 60), math.floor(s % 60))
end

--- JSON with object keys sorted, so a value always encodes to the same bytes (jsonl's encoder).
function util.json_sorted(v) return require('cseng.lib.jsonl').encode(v) end

-- Seconds to wait from a Retry-After header: delta-seconds or an IMF-fixdate.
local MONTHS = {
  Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8, Sep = 9, Oct = 10, Nov = 11, Dec = 12,
}
local function days_from_civil(y, m, d) -- Howard Hinnant's algorithm
  y = m <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m + (m > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

--- Parse a Retry-After value (delta-seconds or an HTTP date) into seconds (>= 0), or nil.
---@param v string|nil
---@return number|nil
function util.retry_after(v)
  if type(v) ~= 'string' then return nil end
  local n = tonumber(v:match('^%s*([%d.]+)%s*$'))
  if n then return n end
  local d, mon, y, hh, mm, ss = v:match('(%d+) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT')
  if d and MONTHS[mon] then
    local epoch = days_from_civil(tonumber(y), MONTHS[mon], tonumber(d)) * 86400
      + tonumber(hh) * 3600 + tonumber(mm) * 60 + tonumber(ss)
    return math.max(0, epoch - require('cseng.clock').epoch())
  end
  return nil
end

--- A fresh path in a sandbox's /tmp: /tmp/cseng-<kind>-<hex of nbytes random bytes (6)><ext>
--- (adapters and the recipe replay both stage files there).
function util.sandbox_tmp_path(kind, ext, nbytes)
  local crypto = require 'cseng.crypto'
  return '/tmp/cseng-' .. kind .. '-' .. crypto.hex(crypto.random_bytes(nbytes or 6)) .. (ext or '')
end

return util
