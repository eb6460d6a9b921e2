--- The differential-conformance harness: what a loopback fake records of each request, the
--- shape a request is reduced to (operation, method, route, query keys, the headers that matter,
--- the JSON body's keys with their types), the per-operation comparison of what a vendor's own SDK
--- sent with what cseng's adapter sent, and docs/providers/CONFORMANCE.md's per-provider sections.
--- Not a spec (no _spec in the name):
---   local C = require 'spec.helpers.conformance'
---
--- A recorded request (fakes in other languages write the same shape as JSON lines; C.load):
---   { op = 'create', method = 'POST', path = '/v2/sandboxes', route = '/v2/sandboxes',
---     query = { k = v }, headers = { ['content-type'] = ... }, body = <decoded JSON> | nil,
---     client = 'sdk' | 'adapter' }
--- Bodies are decoded by C.decode, an exact JSON reader: arrays carry jsonl.array_mt (so an empty
--- array is told from an empty object), null is jsonl.null, integers stay Lua integers.
---
--- A Lua fake records through spec/fakes/rest.lua: core.record(req, op, route, body?) in its
--- handler; the spec calls f.record('sdk') / f.record('adapter') / f.record(false) and reads
--- f.records(client).
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
-- busted's globals are not visible in a required helper: its checks use luassert (callable as assert)
local assert = require('luassert')

local C = {}

-- The specs' sections go to the tracked docs/providers/CONFORMANCE.md only when
-- CSENG_CONFORMANCE_DOC names it (`make conformance` does: the one command that regenerates the
-- doc); otherwise to a temporary file of the spec process (C.doc), removed by C.remove_doc, so
-- make check writes nothing tracked whatever a verdict says.
C.TRACKED_DOC = sys.root() .. '/docs/providers/CONFORMANCE.md'
local tmp_dir

--- The file the sections are written to: $CSENG_CONFORMANCE_DOC, else a temporary one.
---@return string
function C.doc()
  local p = os.getenv('CSENG_CONFORMANCE_DOC')
  if p and p ~= '' then return p end
  tmp_dir = tmp_dir or assert(fs.tempdir('cseng-conformance-'))
  return tmp_dir .. '/CONFORMANCE.md'
end

--- Remove the temporary doc (a conformance spec's teardown).
function C.remove_doc()
  if tmp_dir then fs.remove_tree(tmp_dir) end
  tmp_dir = nil
end

-- ---- JSON, exactly ----------------------------------------------------------------------------

local ESC = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

--- Decode JSON text: arrays marked with jsonl.array_mt, null = jsonl.null, numbers without a
--- fraction or exponent as integers. Returns the value, or nil, "offset N: why".
---@param text string
---@return any|nil value
---@return string|nil err
function C.decode(text)
  local pos = 1
  local function fail(why) error({ why = string.format('offset %d: %s', pos, why) }, 0) end
  local function ws() pos = text:find('[^ \t\r\n]', pos) or #text + 1 end
  local value
  local function str()
    pos = pos + 1
    local out = {}
    while true do
      local s, e = text:find('["\\%c]', pos)
      if not s then fail('unterminated string') end
      out[#out + 1] = text:sub(pos, s - 1)
      local c = text:sub(s, e)
      if c == '"' then pos = s + 1 return table.concat(out) end
      if c ~= '\\' then fail('control character in a string') end
      local k = text:sub(s + 1, s + 1)
      if ESC[k] then
        out[#out + 1] = ESC[k]
        pos = s + 2
      elseif k == 'u' then
        local hex = text:match('^%x%x%x%x', s + 2)
        if not hex then fail('bad \\u escape') end
        local cp = tonumber(hex, 16)
        pos = s + 6
        if cp >= 0xD800 and cp <= 0xDBFF then
          local lo = text:match('^\\u(%x%x%x%x)', pos)
          lo = lo and tonumber(lo, 16)
          if not lo or lo < 0xDC00 or lo > 0xDFFF then fail('lone surrogate') end
          cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
          pos = pos + 6
        end
        out[#out + 1] = utf8.char(cp)
      else
        fail('bad escape \\' .. k)
      end
    end
  end
  function value()
    ws()
    local c = text:sub(pos, pos)
    if c == '{' then
      local obj = {}
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == '}' then pos = pos + 1 return obj end
      while true do
        ws()
        if text:sub(pos, pos) ~= '"' then fail('object key expected') end
        local k = str()
        ws()
        if text:sub(pos, pos) ~= ':' then fail('":" expected') end
        pos = pos + 1
        obj[k] = value()
        ws()
        c = text:sub(pos, pos)
        pos = pos + 1
        if c == '}' then return obj end
        if c ~= ',' then pos = pos - 1 fail('"," or "}" expected') end
      end
    elseif c == '[' then
      local arr = jsonl.array()
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == ']' then pos = pos + 1 return arr end
      while true do
        arr[#arr + 1] = value()
        ws()
        c = text:sub(pos, pos)
        pos = pos + 1
        if c == ']' then return arr end
        if c ~= ',' then pos = pos - 1 fail('"," or "]" expected') end
      end
    elseif c == '"' then
      return str()
    elseif text:find('^true', pos) then pos = pos + 4 return true
    elseif text:find('^false', pos) then pos = pos + 5 return false
    elseif text:find('^null', pos) then pos = pos + 4 return jsonl.null
    end
    local int = text:match('^-?0', pos) or text:match('^-?[1-9]%d*', pos)
    if not int then fail('value expected') end
    local e = pos + #int
    local frac = text:match('^%.%d+', e) or ''
    if frac == '' and text:sub(e, e) == '.' then fail('digits expected after "."') end
    e = e + #frac
    local exp = text:match('^[eE][-+]?%d+', e) or ''
    if exp == '' and text:find('^[eE]', e) then fail('bad exponent') end
    local num = int .. frac .. exp
    pos = e + #exp
    if frac ~= '' or exp ~= '' then return tonumber(num) + 0.0 end
    return math.tointeger(tonumber(num)) or tonumber(num)
  end
  local ok, v = pcall(function()
    local out = value()
    ws()
    if pos <= #text then fail('trailing bytes') end
    return out
  end)
  if ok then return v end
  if type(v) == 'table' then return nil, v.why end
  error(v, 0)
end

-- ---- recording ---------------------------------------------------------------------------------

local function urldecode(s)
  return (tostring(s):gsub('+', ' '):gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

--- A query string as {k = v} (the first value of a repeated key).
---@param q string|nil
---@return table<string, string>
function C.query(q)
  local out = {}
  for pair in tostring(q or ''):gmatch('[^&]+') do
    local k, v = pair:match('^([^=]*)=?(.*)$')
    k = urldecode(k)
    if out[k] == nil then out[k] = urldecode(v) end
  end
  return out
end

--- One recorded request. req: a cseng.serve request (method, path, query, headers, body);
--- body: a decoded table to record as is, JSON text to decode, or nil to decode req.body when
--- its content type is JSON (a body that does not decode is recorded as body_error).
---@return table
function C.record_of(req, op, route, client, body)
  local headers = {}
  for k, v in pairs(req.headers or {}) do headers[k:lower()] = v end
  local rec = { op = op, method = req.method, path = req.path, route = route or req.path,
                query = C.query(req.query), headers = headers, client = client }
  if body == nil and tostring(headers['content-type'] or ''):lower():match('json') and (req.body or '') ~= '' then
    body = req.body
  end
  if type(body) == 'string' then
    local v, why = C.decode(body)
    if v == nil then rec.body_error = why else rec.body = v end
  else
    rec.body = body
  end
  return rec
end

--- A recorder: r.client (nil = not recording), r:add(req, op, route, body?), r.records.
function C.recorder()
  local r = { records = {} }
  function r.add(self, req, op, route, body)
    if not self.client then return end
    self.records[#self.records + 1] = C.record_of(req, op, route, self.client, body)
  end
  --- The records of client (all with nil), in order.
  function r.of(self, client)
    local out = {}
    for _, rec in ipairs(self.records) do
      if client == nil or rec.client == client then out[#out + 1] = rec end
    end
    return out
  end
  return r
end

--- Records from a JSON-lines file (fakes in other languages), bodies decoded by C.decode.
---@param path string
---@return table[]
function C.load(path)
  local text = assert(fs.read(path))
  local out, n = {}, 0
  for line in text:gmatch('[^\n]+') do
    n = n + 1
    local rec, why = C.decode(line)
    if type(rec) ~= 'table' then error(string.format('%s:%d: %s', path, n, why or 'not an object'), 0) end
    if rec.body == jsonl.null then rec.body = nil end
    out[#out + 1] = rec
  end
  return out
end

-- ---- shapes ------------------------------------------------------------------------------------

--- How the headers that matter are normalized by default: media type only, the auth scheme
--- (with Basic's user name), present or not, or the exact value. opts.headers adds or overrides
--- (a rule of false drops a header).
C.HEADERS = {
  ['content-type'] = 'media', authorization = 'auth', ['x-api-key'] = 'present',
  ['x-access-token'] = 'present', ['connect-protocol-version'] = 'value',
}

local function header_value(rule, v)
  v = tostring(v)
  if rule == 'present' then return 'present' end
  if rule == 'media' then return (v:match('^%s*([^;%s]+)') or ''):lower() end
  if rule == 'auth' then
    local scheme, cred = v:match('^(%S+)%s*(.*)$')
    scheme = (scheme or ''):lower()
    if scheme == 'basic' then
      local dec = crypto.unbase64(cred) or ''
      return 'basic ' .. (dec:match('^([^:]*)') or '?')
    end
    return scheme
  end
  return v
end

local function json_type(v)
  if v == jsonl.null then return 'null' end
  local t = math.type(v) or type(v)
  if t == 'float' then return 'number' end
  if t == 'table' then return getmetatable(v) == jsonl.array_mt and 'array' or 'object' end
  return t
end

local function flatten(v, prefix, out, maps)
  local t = json_type(v)
  local key = prefix == '' and '$' or prefix
  out[key] = out[key] or {}
  out[key][t] = true
  if t == 'array' then
    for _, x in ipairs(v) do flatten(x, prefix .. '[]', out, maps) end
  elseif t == 'object' then
    local as_map = maps[prefix]
    for k, x in pairs(v) do
      local p = prefix == '' and k or (prefix .. '.' .. (as_map and '*' or k))
      flatten(x, p, out, maps)
    end
  end
end

local function types_string(set)
  local l = {}
  for t in pairs(set) do l[#l + 1] = t end
  table.sort(l)
  return table.concat(l, '|')
end

--- A record reduced to what is compared: {op, method, route, query_keys (sorted), headers
--- (normalized, only those with a rule), body_shape ("a.b.c" -> type; "a[]" for elements, "a.*"
--- for the members of a map listed in opts.maps; types: string integer number boolean null
--- object array, several joined by "|")}. opts.maps: body paths whose keys are data (labels,
--- metadata, env), opts.headers: header rules over C.HEADERS.
---@param rec table
---@param opts? {maps?: string[], headers?: table<string, string|false>}
---@return table
function C.shape(rec, opts)
  opts = opts or {}
  local maps = {}
  for _, m in ipairs(opts.maps or {}) do maps[m] = true end
  local rules = {}
  for k, v in pairs(C.HEADERS) do rules[k] = v end
  for k, v in pairs(opts.headers or {}) do rules[k:lower()] = v or nil end
  local qk = {}
  for k in pairs(rec.query or {}) do qk[#qk + 1] = k end
  table.sort(qk)
  local headers = {}
  for k, v in pairs(rec.headers or {}) do
    local rule = rules[k:lower()]
    if rule then headers[k:lower()] = header_value(rule, v) end
  end
  local body_shape = {}
  if rec.body ~= nil then
    local sets = {}
    flatten(rec.body, '', sets, maps)
    for k, set in pairs(sets) do body_shape[k] = types_string(set) end
  end
  return { op = rec.op, method = rec.method, route = rec.route, query_keys = qk, headers = headers,
           body_shape = body_shape }
end

-- ---- comparison --------------------------------------------------------------------------------

local function sorted_keys(t)
  local l = {}
  for k in pairs(t) do l[#l + 1] = k end
  table.sort(l)
  return l
end

local function set_string(set)
  if not set then return nil end
  return table.concat(sorted_keys(set), ', ')
end

-- One side of one operation: the union over its records.
local function side(recs, opts)
  local s = { endpoints = {}, query = {}, headers = {}, body = {}, n = 0 }
  for _, rec in ipairs(recs) do
    if rec.body_error then s.body_error = rec.body_error end
    local sh = C.shape(rec, opts)
    s.n = s.n + 1
    s.endpoints[sh.method .. ' ' .. sh.route] = true
    for _, k in ipairs(sh.query_keys) do s.query[k] = true end
    for k, v in pairs(sh.headers) do
      s.headers[k] = s.headers[k] or {}
      s.headers[k][v] = true
    end
    for k, t in pairs(sh.body_shape) do
      s.body[k] = s.body[k] or {}
      for one in t:gmatch('[^|]+') do s.body[k][one] = true end
    end
  end
  return s
end

--- Compare what the SDK and the adapter sent, per operation. allow: {{op = <op or '*'>, what =
--- 'op' | 'route' | 'query:k' | 'header:h' | 'body:a.b', reason = why}} (a reason is required).
--- Per operation each side is the union over its records: the set of endpoints, the query keys,
--- for each header the set of normalized values, for each body path the set of types; a body
--- that did not decode is the difference 'body:$error'. Returns:
---   diffs: the differences no allow entry covers, {op, what, sdk, adapter, detail};
---   rows: per operation (sorted), {op, sdk = {endpoints...}, adapter = {endpoints...},
---         bodies_agree (no body difference at all), differences = {{what, detail, reason}}};
---   unused: the allow entries that matched nothing (stale reasons).
---@param sdk_recs table[]
---@param adapter_recs table[]
---@param allow? table[]
---@param opts? table  C.shape's opts
---@return table[] diffs, table[] rows, table[] unused
function C.compare(sdk_recs, adapter_recs, allow, opts)
  allow = allow or {}
  for i, a in ipairs(allow) do
    if type(a.reason) ~= 'string' or a.reason == '' then
      error(string.format('allow entry %d (%s %s) has no reason', i, tostring(a.op), tostring(a.what)), 2)
    end
  end
  local used = {}
  local function allowed(op, what)
    for i, a in ipairs(allow) do
      if (a.op == op or a.op == '*') and a.what == what then
        used[i] = true
        return a.reason
      end
    end
    return nil
  end
  local by_op = {}
  local function group(recs, which)
    for _, rec in ipairs(recs) do
      local g = by_op[rec.op] or { sdk = {}, adapter = {} }
      by_op[rec.op] = g
      table.insert(g[which], rec)
    end
  end
  group(sdk_recs, 'sdk')
  group(adapter_recs, 'adapter')

  local diffs, rows = {}, {}
  for _, op in ipairs(sorted_keys(by_op)) do
    local g = by_op[op]
    local s, a = side(g.sdk, opts), side(g.adapter, opts)
    local row = { op = op, sdk = sorted_keys(s.endpoints), adapter = sorted_keys(a.endpoints),
                  bodies_agree = true, differences = {} }
    rows[#rows + 1] = row
    local function differ(what, sv, av, detail)
      local d = { op = op, what = what, sdk = sv, adapter = av, detail = detail }
      local reason = allowed(op, what)
      if what:match('^body:') then row.bodies_agree = false end
      row.differences[#row.differences + 1] = { what = what, detail = detail, reason = reason }
      if not reason then diffs[#diffs + 1] = d end
    end
    if s.n == 0 or a.n == 0 then
      local who = s.n == 0 and 'only the adapter' or 'only the SDK'
      differ('op', s.n, a.n, who .. ' sends it')
    else
      local se, ae = set_string(s.endpoints), set_string(a.endpoints)
      if se ~= ae then differ('route', se, ae, 'SDK ' .. se .. '; adapter ' .. ae) end
      local keys = {}
      for k in pairs(s.query) do keys[k] = true end
      for k in pairs(a.query) do keys[k] = true end
      for _, k in ipairs(sorted_keys(keys)) do
        if not (s.query[k] and a.query[k]) then
          differ('query:' .. k, s.query[k], a.query[k], (s.query[k] and 'only the SDK' or 'only the adapter') .. ' sends ?' .. k)
        end
      end
      keys = {}
      for k in pairs(s.headers) do keys[k] = true end
      for k in pairs(a.headers) do keys[k] = true end
      for _, k in ipairs(sorted_keys(keys)) do
        local sv, av = set_string(s.headers[k]), set_string(a.headers[k])
        if sv ~= av then
          differ('header:' .. k, sv, av, string.format('SDK %s; adapter %s', sv or '(absent)', av or '(absent)'))
        end
      end
      if s.body_error or a.body_error then
        differ('body:$error', s.body_error, a.body_error, string.format('a body that is not JSON: SDK %s; adapter %s',
          s.body_error or 'none', a.body_error or 'none'))
      end
      keys = {}
      for k in pairs(s.body) do keys[k] = true end
      for k in pairs(a.body) do keys[k] = true end
      for _, k in ipairs(sorted_keys(keys)) do
        local sv, av = set_string(s.body[k]), set_string(a.body[k])
        if sv ~= av then
          differ('body:' .. k, sv, av, string.format('SDK %s; adapter %s', sv or '(absent)', av or '(absent)'))
        end
      end
    end
  end
  local unused = {}
  for i, a in ipairs(allow) do
    if not used[i] then unused[#unused + 1] = a end
  end
  return diffs, rows, unused
end

--- Differences as one readable line each (for a spec's failure message).
---@param diffs table[]
---@return string
function C.describe(diffs)
  local out = {}
  for _, d in ipairs(diffs) do out[#out + 1] = string.format('%s %s: %s', d.op, d.what, d.detail) end
  return table.concat(out, '\n')
end

-- ---- docs/providers/CONFORMANCE.md -------------------------------------------------------------

local function cell(s) return (tostring(s):gsub('|', '\\|'):gsub('\n', ' ')) end

--- The markdown of one provider's section from C.compare's rows. info: {title, sdk ("e2b
--- 2.51.0"), intro (text after the heading), notes (text after the table)}.
---@param info table
---@param rows table[]
---@return string
function C.markdown(info, rows)
  local out = { '## ' .. info.title, '' }
  if info.intro then out[#out + 1] = info.intro out[#out + 1] = '' end
  out[#out + 1] = 'Referee: `' .. info.sdk .. '`.'
  out[#out + 1] = ''
  out[#out + 1] = '| operation | SDK sends | cseng sends | bodies agree | listed differences (reason) |'
  out[#out + 1] = '|---|---|---|---|---|'
  for _, r in ipairs(rows) do
    local d = {}
    for _, x in ipairs(r.differences) do
      d[#d + 1] = string.format('`%s`: %s (%s)', x.what, x.detail, x.reason or 'NOT ALLOWED')
    end
    local function eps(l) return #l > 0 and ('`' .. table.concat(l, '`, `') .. '`') or '-' end
    out[#out + 1] = string.format('| %s | %s | %s | %s | %s |', cell(r.op), cell(eps(r.sdk)), cell(eps(r.adapter)),
      r.bodies_agree and 'yes' or 'no', cell(#d > 0 and table.concat(d, '; ') or 'none'))
  end
  if info.notes then out[#out + 1] = '' out[#out + 1] = info.notes end
  return table.concat(out, '\n')
end

C.INTRO = [[
# Conformance with the vendors' own SDKs

Generated by the differential specs (`make conformance`, `spec/providers/<provider>/conformance_spec.lua`;
the harness is `spec/helpers/conformance.lua`). Each runs the same sandbox lifecycle once through the
vendor's official SDK (pinned in `spec/sdk/package.json`) and once through cseng's adapter, against
one stateful loopback fake that records every request, and compares them per operation: method and
path template, query keys, the headers that matter, and the JSON body's keys with their types
("bodies agree": the same keys with the same JSON types; values are not compared, since labels, ids
and commands differ by design). A spec fails on any difference that is not listed below with its
reason. Lizard has no official SDK: its section says what it is checked against instead. Sections
are rewritten by `make conformance` only (make check runs the same specs and writes their sections
to a temporary file); do not edit between the markers by hand.
]]

--- Rewrite only provider's section of docs/providers/CONFORMANCE.md (between
--- <!-- conformance:PROVIDER --> and <!-- /conformance:PROVIDER -->), keeping the others and
--- sorting sections by name; creates the file with C.INTRO. path: default C.doc().
---@param provider string
---@param markdown string
---@param path? string
function C.write_section(provider, markdown, path)
  assert(provider:match('^[%w_.-]+$'), 'provider name: letters, digits, _ . - only')
  path = path or C.doc()
  local text = fs.read(path) or C.INTRO
  local sections = {}
  local first = text:find('<!-- conformance:', 1, true)
  local intro = first and text:sub(1, first - 1) or text
  for name, body in text:gmatch('<!%-%- conformance:([%w_.-]+) %-%->\n(.-)\n?<!%-%- /conformance:%1 %-%->') do
    sections[name] = body
  end
  sections[provider] = markdown:gsub('\n+$', '')
  local out = { (intro:gsub('\n*$', '\n')) }
  for _, name in ipairs(sorted_keys(sections)) do
    out[#out + 1] = string.format('\n<!-- conformance:%s -->\n%s\n<!-- /conformance:%s -->\n', name, sections[name], name)
  end
  assert(fs.write(path, table.concat(out)))
end

-- ---- the per-provider lifecycle -----------------------------------------------------------------
-- What every spec/providers/<provider>/conformance_spec.lua shares: whether the SDK can run here, running
-- its script (spec/sdk/<provider>.mjs) against the recording fake, the adapter's side of the
-- common lifecycle, a mutated copy of the adapter's records (the comparison can fail), and the
-- verdict with the CONFORMANCE.md section.

C.SDK_ROOT = sys.root() .. '/spec/sdk'
C.READY_CMD = [[python3 -c "print('arena-startup-ready-20261001')"]]
C.READY_OUT = 'arena-startup-ready-20261001\n'

--- Why the SDK side cannot run here (node missing, a package of spec/sdk not installed), or nil.
---@param ... string packages under spec/sdk/node_modules ('e2b', '@daytonaio/sdk')
---@return string|nil
function C.sdk_missing(...)
  if not require('cseng.proc').which('node') then return 'node is not installed (make deps-test)' end
  for _, pkg in ipairs({ ... }) do
    if not fs.exists(C.SDK_ROOT .. '/node_modules/' .. pkg .. '/package.json') then
      return pkg .. ' is not installed: make deps-test (npm ci --prefix spec/sdk)'
    end
  end
  return nil
end

--- The version of an installed SDK package.
---@param pkg string
function C.sdk_version(pkg)
  return require('cjson').decode((assert(fs.read(C.SDK_ROOT .. '/node_modules/' .. pkg .. '/package.json')))).version
end

--- Run spec/sdk/<script> (node) with env_add and o.args; the script must exit 0 and print JSON,
--- which is returned decoded. With o.fake, the fake records the run as 'sdk'.
---@param script string e.g. 'e2b.mjs'
---@param env_add table
---@param o? {fake?: table, args?: string[], timeout?: number}
function C.run_sdk(script, env_add, o)
  o = o or {}
  local argv = { 'node', C.SDK_ROOT .. '/' .. script }
  for _, a in ipairs(o.args or {}) do argv[#argv + 1] = a end
  if o.fake then o.fake.record('sdk') end
  local r = assert(require('cseng.proc').run { argv = argv, cwd = sys.root(), timeout = o.timeout or 300, env_add = env_add })
  if o.fake then o.fake.record(false) end
  assert.equal(0, r.code, 'spec/sdk/' .. script .. ' failed:\n' .. r.stderr .. r.stdout)
  local ok, out = pcall(require('cjson').decode, r.stdout)
  assert.is_true(ok, 'spec/sdk/' .. script .. ' printed no JSON:\n' .. r.stdout)
  return out
end

--- The adapter's side of the lifecycle every SDK script starts with: create (o.spec), the
--- arena's python3 command, a command exiting 3 (unless o.exit3 == false; its text read from
--- o.exit3_stream, default stderr), an archive put into o.put_dir and its file read back (a
--- missing file read as ENOENT with o.missing), a second sandbox (o.other, a create spec), and
--- a list by o.list_labels that finds exactly the first sandbox. Returns the sandboxes.
---@param P table the adapter
---@param client any
---@param o table {spec, exec?, exit3?, exit3_stream?, put_dir, file, data, missing?, other?, list_labels}
---@return table sb, table|nil other
function C.lifecycle(P, client, o)
  local sb = assert(P.create(client, o.spec))
  local r = assert(P.exec(client, sb, C.READY_CMD, o.exec or { timeout = 60 }))
  assert.same({ 0, C.READY_OUT }, { r.code, r.stdout })
  if o.exit3 ~= false then
    r = assert(P.exec(client, sb, 'echo to-stderr >&2; exit 3', { timeout = (o.exec or {}).timeout or 60 }))
    assert.same({ 3, 'to-stderr\n' }, { r.code, r[o.exit3_stream or 'stderr'] })
  end
  local entries = { { path = o.file, data = o.data } }
  assert(P.put(client, sb, o.put_dir, assert(require('cseng.archive').pack(entries, { format = 'tar' }))))
  assert.equal(o.data, assert(P.get(client, sb, o.put_dir .. '/' .. o.file)))
  if o.missing then
    local none, _, code = P.get(client, sb, o.put_dir .. '/no-such-file')
    assert.same({ nil, 'ENOENT' }, { none, code })
  end
  local other = o.other and assert(P.create(client, o.other)) or nil
  local found = assert(P.list(client, { labels = o.list_labels }))
  assert.equal(1, #found)
  assert.equal(sb.id, found[1].id)
  return sb, other
end

--- The warm step of the lifecycle: sb prepared (a marker file in o.dir, default /workspace),
--- snapshotted as key, a sandbox created from the snapshot (o.spec plus warm_artifact) that
--- holds the marker. Returns the warm sandbox.
---@return table warm
function C.warm(P, client, sb, key, o)
  local dir = o.dir or '/workspace'
  assert.equal(0, assert(P.exec(client, sb, 'mkdir -p ' .. dir .. ' && echo prepared > ' .. dir .. '/mark')).code)
  local spec = { warm_artifact = assert(P.snapshot(client, sb, key)) }
  for k, v in pairs(o.spec or {}) do spec[k] = v end
  local warm = assert(P.create(client, spec))
  assert.equal('prepared\n', assert(P.exec(client, warm, 'cat ' .. dir .. '/mark')).stdout)
  return warm
end

--- Destroy every sandbox of list, then the first once more: already gone is success (idempotent).
function C.destroy_all(P, client, list)
  for _, sb in ipairs(list) do assert.is_true(P.destroy(client, sb)) end
  assert.is_true(P.destroy(client, list[1]))
end

--- The adapter's records with one body key of operation op renamed (from -> to): what a
--- mutated adapter would send, so a spec shows the comparison can fail.
---@return table[]
function C.renamed(recs, op, from, to)
  local out = {}
  for i, rec in ipairs(recs) do
    out[i] = rec
    if rec.op == op and type(rec.body) == 'table' and rec.body[from] ~= nil then
      local b = {}
      for k, v in pairs(rec.body) do b[k] = v end
      b[to], b[from] = b[from], nil
      out[i] = setmetatable({ body = b }, { __index = rec })
    end
  end
  return out
end

--- The verdict of one provider: compare the SDK's and the adapter's records, write the
--- provider's CONFORMANCE.md section (info: C.markdown's; to C.doc()), and fail on a difference with no
--- reason, on an allow entry that matched nothing, or on an operation of o.ops not compared.
---@param provider string
---@param info table
---@param sdk table[]
---@param ours table[]
---@param o {allow?: table[], opts?: table, ops?: string[]}
---@return table[] rows
function C.verdict(provider, info, sdk, ours, o)
  assert.is_true(#sdk > 0 and #ours > 0, 'both lifecycles ran')
  local diffs, rows, unused = C.compare(sdk, ours, o.allow, o.opts)
  C.write_section(provider, C.markdown(info, rows))
  assert.same({}, unused, 'allow-list entries that matched nothing (stale reasons)')
  assert.equal('', C.describe(diffs), 'differences with no reason in the allow-list')
  local ops = {}
  for _, row in ipairs(rows) do ops[row.op] = true end
  for _, op in ipairs(o.ops or {}) do assert.is_true(ops[op], 'operation not compared: ' .. op) end
  return rows
end

return C
