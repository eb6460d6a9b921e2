-- The differential-conformance harness (spec/helpers/conformance.lua) itself: its JSON reader
-- against cjson, shapes, the comparison and its allow-list, the CONFORMANCE.md sections, the
-- recorder of spec/fakes/rest.lua, and a mutated copy of an adapter whose changed body key the
-- comparison reports (the check can fail).
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local http = require('cseng.http')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')

local C = require('spec.helpers.conformance')

local function rec(client, op, method, route, body, extra)
  local r = { client = client, op = op, method = method, route = route, path = route, query = {}, headers = {}, body = body }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

describe('conformance.decode', function()
  it('reads what cjson reads, and keeps what cjson loses', function()
    local texts = {
      '{"a":1,"b":[1,2.5,"x",true,false],"c":{"d":"\\u00e9\\n\\"\\\\\\/"},"e":-0.25e2}',
      '[{"k":"v"},[],[[1]]]', '"\\ud83d\\ude00"', '0', '-12', '1E3', ' {"x" : { } } ',
    }
    for _, t in ipairs(texts) do
      local mine = assert(C.decode(t))
      assert.same(cjson.decode(t), mine, t)
    end
    local v = assert(C.decode('{"e":[],"o":{},"n":null,"i":3,"f":3.0,"big":9007199254740993}'))
    assert.equal(jsonl.array_mt, getmetatable(v.e))
    assert.is_nil(getmetatable(v.o))
    assert.equal(jsonl.null, v.n)
    assert.equal('integer', math.type(v.i))
    assert.equal('float', math.type(v.f))
    assert.equal(9007199254740993, v.big)
    for _, bad in ipairs({ '', '{', '{"a":}', '[1,]', '01', '1.', '.5', '1e', 'nul', '"\\x"', '"a', '{} x',
                           '"\\ud800"', '{a:1}', '"tab\there"' }) do
      local out, why = C.decode(bad)
      assert.is_nil(out, bad)
      assert.truthy(tostring(why):match('^offset %d+: '), bad)
    end
  end)

  it('agrees with cjson on random documents', function()
    local function gen(depth)
      local r = crypto.random_bytes(1):byte() % (depth > 3 and 4 or 7)
      if r == 0 then return crypto.hex(crypto.random_bytes(3)) .. '\t"\\é' end
      if r == 1 then return (crypto.random_bytes(1):byte() - 128) * 7 end
      if r == 2 then return (crypto.random_bytes(1):byte() - 100) / 8 end
      if r == 3 then return crypto.random_bytes(1):byte() % 2 == 0 end
      if r == 4 or r == 5 then
        local t = {}
        for i = 1, 1 + crypto.random_bytes(1):byte() % 4 do t[i] = gen(depth + 1) end
        return t
      end
      local t = {}
      for i = 1, 1 + crypto.random_bytes(1):byte() % 4 do t['k' .. i] = gen(depth + 1) end
      return t
    end
    for _ = 1, 300 do
      local doc = { root = gen(0) }
      local text = jsonl.encode(doc)
      assert.same(cjson.decode(text), assert(C.decode(text)), text)
    end
  end)
end)

describe('conformance.shape and compare', function()
  local opts = { maps = { 'metadata' }, headers = { ['x-extra'] = 'value' } }

  it('reduces a record to route, query keys, normalized headers and typed body paths', function()
    local r = C.record_of({ method = 'POST', path = '/v2/sandboxes/abc', query = 'b=1&a=x%20y',
      headers = { ['Content-Type'] = 'application/json; charset=utf-8', Authorization = 'Basic ' .. crypto.base64('root:'),
                  ['X-API-Key'] = 'secret', ['User-Agent'] = 'ignored', ['X-Extra'] = 'v1' },
      body = '{"templateID":"base","timeout":300,"metadata":{"cseng.run":"r1","x":"y"},"list":[],"args":["a","b"],"cpu":0.5,"n":null}' },
      'create', '/v2/sandboxes/{id}', 'sdk')
    assert.same({ a = 'x y', b = '1' }, r.query)
    local s = C.shape(r, opts)
    assert.equal('create', s.op)
    assert.equal('/v2/sandboxes/{id}', s.route)
    assert.same({ 'a', 'b' }, s.query_keys)
    assert.same({ ['content-type'] = 'application/json', authorization = 'basic root', ['x-api-key'] = 'present',
                  ['x-extra'] = 'v1' }, s.headers)
    assert.same({ ['$'] = 'object', templateID = 'string', timeout = 'integer', metadata = 'object',
                  ['metadata.*'] = 'string', list = 'array', args = 'array', ['args[]'] = 'string', cpu = 'number',
                  n = 'null' }, s.body_shape)
    local bad = C.record_of({ method = 'POST', path = '/x', headers = { ['content-type'] = 'application/json' }, body = '{"a":' },
      'x', '/x', 'sdk')
    assert.is_nil(bad.body)
    assert.matches('offset', bad.body_error)
  end)

  it('finds each kind of difference, honours the allow-list and reports stale entries', function()
    local sdk = {
      rec('sdk', 'create', 'POST', '/v2/sandboxes', { templateID = 'a', timeout = 3, metadata = { a = 'b' } },
        { headers = { ['content-type'] = 'application/json', ['x-api-key'] = 'k' } }),
      rec('sdk', 'list', 'GET', '/v2/sandboxes', nil, { query = { metadata = 'a=b', limit = '10' } }),
      rec('sdk', 'info', 'GET', '/sandboxes/{id}', nil),
    }
    local adapter = {
      rec('adapter', 'create', 'POST', '/sandboxes', { templateID = 'a', timeout = '3', metadata = { other = 'x' }, secure = true },
        { headers = { ['content-type'] = 'application/json' } }),
      rec('adapter', 'list', 'GET', '/v2/sandboxes', nil, { query = { metadata = 'a=b', state = 'running' } }),
    }
    local diffs, rows, unused = C.compare(sdk, adapter, {}, opts)
    local whats = {}
    for _, d in ipairs(diffs) do whats[#whats + 1] = d.op .. ' ' .. d.what end
    table.sort(whats)
    assert.same({ 'create body:secure', 'create body:timeout', 'create header:x-api-key', 'create route',
                  'info op', 'list query:limit', 'list query:state' }, whats)
    assert.same({}, unused)
    assert.equal(3, #rows)
    assert.same({ 'POST /v2/sandboxes' }, rows[1].sdk)
    assert.same({ 'POST /sandboxes' }, rows[1].adapter)
    assert.is_false(rows[1].bodies_agree)
    assert.is_true(rows[3].bodies_agree)
    assert.matches('SDK integer; adapter string', C.describe(diffs))

    local allow = {
      { op = 'create', what = 'route', reason = 'r1' }, { op = 'create', what = 'body:secure', reason = 'r2' },
      { op = 'create', what = 'body:timeout', reason = 'r3' }, { op = '*', what = 'header:x-api-key', reason = 'r4' },
      { op = 'info', what = 'op', reason = 'r5' }, { op = 'list', what = 'query:limit', reason = 'r6' },
      { op = 'list', what = 'query:state', reason = 'r7' }, { op = 'delete', what = 'route', reason = 'stale' },
    }
    diffs, rows, unused = C.compare(sdk, adapter, allow, opts)
    assert.same({}, diffs)
    assert.equal(1, #unused)
    assert.equal('stale', unused[1].reason)
    local reasons = {}
    for _, d in ipairs(rows[1].differences) do reasons[d.what] = d.reason end
    assert.same({ route = 'r1', ['body:secure'] = 'r2', ['body:timeout'] = 'r3', ['header:x-api-key'] = 'r4' }, reasons)
    assert.has_error(function() C.compare(sdk, adapter, { { op = 'x', what = 'op' } }) end,
      'allow entry 1 (x op) has no reason')
    -- identical sides: nothing to report
    diffs = C.compare(sdk, sdk, {}, opts)
    assert.same({}, diffs)
    -- a body that did not decode is reported as such
    diffs = C.compare({ rec('sdk', 'x', 'POST', '/x', { a = 1 }) },
      { rec('adapter', 'x', 'POST', '/x', nil, { body_error = 'offset 3: value expected' }) }, {}, opts)
    assert.matches('x body:%$error: a body that is not JSON: SDK none; adapter offset 3', C.describe(diffs))
  end)

  it('rewrites one provider section of the doc and keeps the others, sorted', function()
    local path = os.tmpname()
    os.remove(path)
    C.write_section('zeta', '## zeta\nZ one', path)
    C.write_section('alpha', '## alpha\nA one\n\n', path)
    C.write_section('zeta', '## zeta\nZ two', path)
    local text = assert(fs.read(path))
    os.remove(path)
    assert.matches('^# Conformance with the vendors', text)
    local a, z = text:find('<!-- conformance:alpha -->', 1, true), text:find('<!-- conformance:zeta -->', 1, true)
    assert.truthy(a and z and a < z)
    assert.is_nil(text:find('Z one', 1, true))
    assert.truthy(text:find('<!-- conformance:zeta -->\n## zeta\nZ two\n<!-- /conformance:zeta -->', 1, true))
    assert.truthy(text:find('<!-- conformance:alpha -->\n## alpha\nA one\n<!-- /conformance:alpha -->', 1, true))
    local md = C.markdown({ title = 'x', sdk = 'x 1.0' }, { { op = 'create', sdk = { 'POST /a' }, adapter = { 'POST /a|b' },
      bodies_agree = false, differences = { { what = 'body:k', detail = 'SDK string; adapter (absent)', reason = 'why' } } } })
    assert.matches('| create | `POST /a` | `POST /a\\|b` | no | `body:k`: SDK string; adapter (absent) (why) |', md, 1, true)
  end)
end)

describe('conformance.load (records written by fakes in other languages)', function()
  it('reads JSON lines with exact bodies, and names the line of a bad one', function()
    local path = os.tmpname()
    assert(fs.write(path, '{"op":"create","method":"POST","route":"/v1/x","path":"/v1/x","query":{},"headers":{},'
      .. '"body":{"a":[],"b":{},"n":1},"client":"sdk"}\n{"op":"list","method":"GET","route":"/v1/x","body":null}\n'))
    local recs = C.load(path)
    assert.equal(2, #recs)
    assert.equal(jsonl.array_mt, getmetatable(recs[1].body.a))
    assert.same({ ['$'] = 'object', a = 'array', b = 'object', n = 'integer' }, C.shape(recs[1]).body_shape)
    assert.is_nil(recs[2].body)
    assert(fs.write(path, '{"op":"x"}\n{"op":\n'))
    local ok, err = pcall(C.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.matches(':2: offset', err)
  end)
end)

describe('the recorder of spec/fakes/rest.lua', function()
  it('records requests of the chosen client only while on', function()
    local common = require('spec.fakes.rest')
    local core = common.fake({}, {}, {})
    local srv = common.listen(function(req)
      core.record(req, req.path == '/a' and 'a' or 'b', req.path == '/a' and '/a' or '/{x}')
      return 204, {}, ''
    end)
    local f = core.finish({}, { srv })
    local url = srv:url()
    assert(http.request { url = url .. '/a' })
    f.record('sdk')
    assert(http.request { method = 'POST', url = url .. '/a?q=1', headers = { ['Content-Type'] = 'application/json' }, body = '{"k":[1]}' })
    f.record('adapter')
    assert(http.request { url = url .. '/zz' })
    f.record(false)
    assert(http.request { url = url .. '/a' })
    f.close()
    local all = f.records()
    assert.equal(2, #all)
    local s = f.records('sdk')[1]
    assert.same({ 'sdk', 'a', 'POST', '/a', { q = '1' } }, { s.client, s.op, s.method, s.route, s.query })
    assert.same({ k = { 1 } }, s.body)
    assert.equal('/{x}', f.records('adapter')[1].route)
    assert.equal('/zz', f.records('adapter')[1].path)
  end)
end)

describe('the differential check can fail', function()
  local proc = require('cseng.proc')
  local e2b = require('providers.e2b')
  local fake = require('spec.fakes').module('e2b')
  local ROOT = sys.root()

  local function sdk_missing()
    if not proc.which('node') then return 'node is not installed (make deps-test)' end
    if not fs.exists(ROOT .. '/spec/sdk/node_modules/e2b/package.json') then
      return 'the e2b SDK is not installed: make deps-test (npm ci --prefix spec/sdk)'
    end
    return nil
  end

  local function only(recs, op)
    local out = {}
    for _, r in ipairs(recs) do if r.op == op then out[#out + 1] = r end end
    return out
  end

  it('reports a body key changed in a copy of the e2b adapter, and nothing for the adapter itself', function()
    local why = sdk_missing()
    if why then pending(why) return end
    -- the copy: create sends allowInternetAccess instead of allow_internet_access (the body is
    -- e2b_wire's; the adapter is loaded again over the mutated wire)
    local src = assert(fs.read(ROOT .. '/lua/providers/shared/e2b_wire.lua'))
    local mutated, n = src:gsub('allow_internet_access = spec%.network', 'allowInternetAccess = spec.network', 1)
    assert.equal(1, n, 'the line to change is in lua/providers/shared/e2b_wire.lua')
    local tmp = assert(fs.tempdir('conformance-selftest-'))
    assert(fs.write(tmp .. '/e2b_wire_mutant.lua', mutated))
    local real_wire = package.loaded['providers.shared.e2b_wire']
    package.loaded['providers.shared.e2b_wire'] = assert(loadfile(tmp .. '/e2b_wire_mutant.lua'))()
    local lok, mutant = pcall(function() return assert(loadfile(ROOT .. '/lua/providers/e2b.lua'))() end)
    package.loaded['providers.shared.e2b_wire'] = real_wire
    assert(lok, mutant)
    local f = fake.start {}
    local ok, err = pcall(function()
      f.record('sdk')
      local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/e2b.mjs' }, cwd = ROOT, timeout = 300,
        env_add = { E2B_API_URL = f.url, E2B_SANDBOX_URL = f.envd_url, E2B_API_KEY = f.api_key,
                    CSENG_CONF_RUN = 'selftest-' .. crypto.hex(crypto.random_bytes(3)), E2B_DEBUG = false } })
      assert.equal(0, r.code, r.stderr)
      local spec = { labels = { ['cseng.run'] = 'selftest' }, env = { A = 'b' }, ttl_seconds = 900, network = false }
      for _, which in ipairs({ { 'adapter', e2b }, { 'mutant', mutant } }) do
        f.record(which[1])
        local client = which[2].connect(f.config())
        local sb = assert(which[2].create(client, spec))
        assert.is_true(which[2].destroy(client, sb))
      end
      f.record(false)
      local opts = { maps = { 'metadata', 'envVars' } }
      local sdk = only(f.records('sdk'), 'create')
      local diffs = C.compare(sdk, only(f.records('adapter'), 'create'), {}, opts)
      assert.equal('', C.describe(diffs))
      diffs = C.compare(sdk, only(f.records('mutant'), 'create'), {}, opts)
      assert.equal('create body:allowInternetAccess: SDK (absent); adapter boolean\n'
        .. 'create body:allow_internet_access: SDK boolean; adapter (absent)', C.describe(diffs))
      -- and an allow-list entry with a reason silences exactly that one
      diffs = C.compare(sdk, only(f.records('mutant'), 'create'),
        { { op = 'create', what = 'body:allowInternetAccess', reason = 'selftest' } }, opts)
      assert.equal('create body:allow_internet_access: SDK boolean; adapter (absent)', C.describe(diffs))
    end)
    f.close()
    fs.remove_tree(tmp)
    assert(ok, err)
  end)
end)
