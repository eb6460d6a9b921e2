--- Small helpers shared by the Lua layer: paths, quoting, tables, environment files.
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
--- Days since 1970-01-01 of a civil (proleptic Gregorian) date: Howard Hinnant's days_from_civil.
---@param y integer
---@param m integer
---@param d integer
---@return integer
function util.days_from_civil(y, m, d)
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
    local epoch = util.days_from_civil(tonumber(y), MONTHS[mon], tonumber(d)) * 86400
      + tonumber(hh) * 3600 + tonumber(mm) * 60 + tonumber(ss)
    return math.max(0, epoch - require('cseng.clock').epoch())
  end
  return nil
end

--- Ask fn again until it says it is done or o.seconds have passed: fn() -> done, ...; between
--- two asks a task.sleep of o.first seconds, then twice as long each time, at most o.max.
--- Returns what fn said last, without its done.
---@param fn fun(): boolean, ...
---@param o {first: number, max: number, seconds: number}
function util.settle(fn, o)
  local clock, task = require('cseng.clock'), require('cseng.task')
  local pause, deadline = o.first, clock.now() + o.seconds * 1e9
  while true do
    local r = table.pack(fn())
    if r[1] or clock.now() > deadline then return table.unpack(r, 2, r.n) end
    task.sleep(pause)
    pause = math.min(pause * 2, o.max)
  end
end

--- A fresh path in a sandbox's /tmp: /tmp/cseng-<kind>-<hex of nbytes random bytes (6)><ext>
--- (adapters and the recipe replay both stage files there).
function util.sandbox_tmp_path(kind, ext, nbytes)
  local crypto = require('cseng.crypto')
  return '/tmp/cseng-' .. kind .. '-' .. crypto.hex(crypto.random_bytes(nbytes or 6)) .. (ext or '')
end

return util

