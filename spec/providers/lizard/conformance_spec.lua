-- Lizard has no official SDK in the npm registry, so nothing referees it as the SDKs referee the
-- other adapters: its fake (spec/providers/lizard/fake.lua) and its adapter (lua/providers/lizard.lua)
-- are checked against the request shapes of ../shared/docs/PROVIDERS.md instead. The spec reads
-- the Lizard section of that document, checks that the fake knows exactly the documented body
-- keys (and refuses others), runs the adapter's lifecycle against the recording fake, checks
-- every request against the document, and writes the lizard section of docs/providers/CONFORMANCE.md.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local http = require('cseng.http')
local cjson = require('cjson')
local lizard = require('providers.lizard')

local ROOT = sys.root()
local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local fake = require('spec.fakes').module('lizard')

local PROVIDERS = ROOT .. '/../shared/docs/PROVIDERS.md'

-- The Lizard section of PROVIDERS.md: {section = text, ops = {op = {method, route, keys = {...}}}}.
-- Endpoints are read from its `METHOD /path {k1, k2 (note), ...}` spans.
local function documented()
  local text = assert(fs.read(PROVIDERS), PROVIDERS .. ' is missing')
  local section = text:match('\n## Lizard\n(.-)\n## ')
  assert(section, PROVIDERS .. ': no "## Lizard" section')
  local flat = section:gsub('\n', ' ')
  local ops = {}
  local function endpoint(op, method, route_pat)
    local span = flat:match('`' .. method .. ' (' .. route_pat .. '[^`]*)`')
    assert(span, PROVIDERS .. ': no `' .. method .. ' ' .. route_pat .. '` in the Lizard section')
    local route, keys_text = span:match('^(%S+)%s+{(.*)}%s*$')
    route = route or span:match('^(%S+)')
    local keys = {}
    for item in tostring(keys_text or ''):gsub('%b()', ''):gmatch('[^,]+') do
      local k = item:match('^%s*([%a_][%w_]*)')
      if k then keys[#keys + 1] = k end
    end
    table.sort(keys)
    ops[op] = { method = method, route = route, keys = keys }
  end
  endpoint('create', 'POST', '/api/sandboxes%s')
  endpoint('exec', 'POST', '/api/sandboxes/{id}/exec')
  endpoint('destroy', 'DELETE', '/api/sandboxes/{id}')
  endpoint('list', 'GET', '/api/sandboxes')
  return { section = section, ops = ops }
end

local function sorted(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  table.sort(out)
  return out
end

describe('lizard against the request shapes of PROVIDERS.md (no official SDK)', function()
  local doc, f

  setup(function()
    doc = documented()
    f = fake.start {}
  end)

  teardown(function()
    if f then f.close() end
  end)

  it('reads the documented endpoints, and the document says there is no official SDK', function()
    assert.truthy(doc.section:find('No official SDK in the npm registry', 1, true))
    assert.same({ 'envs', 'metadata', 'projectId', 'region', 'size', 'template', 'timeoutMs', 'volumeId' }, doc.ops.create.keys)
    assert.equal('/api/sandboxes/{id}/exec', doc.ops.exec.route)
    assert.same({}, doc.ops.destroy.keys)
  end)

  it('the fake knows exactly the documented body keys and refuses any other', function()
    assert.same(doc.ops.create.keys, sorted(fake.CREATE_KEYS))
    assert.same(doc.ops.exec.keys, sorted(fake.EXEC_KEYS))
    local h = { ['X-API-Key'] = f.api_key, ['Content-Type'] = 'application/json' }
    local every = { projectId = f.project_id, template = 'base', size = 'small', region = 'us-east-1', timeoutMs = 60000,
                    metadata = { a = 'b' }, envs = { A = 'b' }, volumeId = 'vol-1' }
    local res = assert(http.request { method = 'POST', url = f.url .. '/api/sandboxes', headers = h, body = cjson.encode(every) })
    assert.equal(201, res.status, res.body)
    local id = cjson.decode(res.body).sandboxId
    res = assert(http.request { method = 'POST', url = f.url .. '/api/sandboxes/' .. id .. '/exec', headers = h,
      body = cjson.encode { cmd = 'echo hi', envs = { A = 'b' }, user = 'root', workdir = '/', timeoutMs = 1000 } })
    assert.equal(200, res.status, res.body)
    every.timeout = 60 -- not in the document
    res = assert(http.request { method = 'POST', url = f.url .. '/api/sandboxes', headers = h, body = cjson.encode(every) })
    assert.equal(400, res.status)
    assert.matches('unknown field timeout', res.body)
    res = assert(http.request { method = 'POST', url = f.url .. '/api/sandboxes/' .. id .. '/exec', headers = h,
      body = cjson.encode { cmd = 'true', cwd = '/' } })
    assert.equal(400, res.status)
    res = assert(http.request { method = 'DELETE', url = f.url .. '/api/sandboxes/' .. id, headers = h })
    assert.equal(204, res.status)
  end)

  it('the adapter sends only documented endpoints and keys, and the section of CONFORMANCE.md says so', function()
    local client = lizard.connect(f.config())
    local before = f.stats()
    f.record('adapter')
    local sb = assert(lizard.create(client, { labels = { ['cseng.run'] = 'conf' }, env = { GREETING = 'hello world' },
                                              ttl_seconds = 900, workdir = '/workspace' }))
    local r = assert(lizard.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 60 }))
    assert.same({ 0, 'arena-startup-ready-20261001\n' }, { r.code, r.stdout })
    assert(lizard.list(client, {}))
    assert.is_true(lizard.destroy(client, sb))
    assert.is_true(lizard.destroy(client, sb)) -- 404: already gone
    f.record(false)
    local s = f.stats()
    assert.equal(before.bad_requests + before.unknown + before.unauthorized, s.bad_requests + s.unknown + s.unauthorized)
    local seen, rows = {}, {}
    for _, rec in ipairs(f.records('adapter')) do
      local want = doc.ops[rec.op]
      assert.is_table(want, 'an operation PROVIDERS.md does not document: ' .. tostring(rec.op))
      assert.equal(want.method .. ' ' .. want.route, rec.method .. ' ' .. rec.route)
      local shape = C.shape(rec, { maps = { 'envs', 'metadata' }, headers = { ['x-api-key'] = 'present' } })
      assert.equal('present', shape.headers['x-api-key'])
      local known = {}
      for _, k in ipairs(want.keys) do known[k] = true end
      seen[rec.op] = seen[rec.op] or {}
      for path in pairs(shape.body_shape) do
        local top = path:match('^[^.%[]+')
        if path ~= '$' then
          assert.is_true(known[top], rec.op .. ' sends ' .. path .. ', which PROVIDERS.md does not list')
          seen[rec.op][top] = shape.body_shape[top]
        end
      end
    end
    for _, op in ipairs({ 'create', 'exec', 'list', 'destroy' }) do
      assert.is_table(seen[op], op .. ' was not sent')
      local want = doc.ops[op]
      local sent = {}
      for k, t in pairs(seen[op]) do sent[#sent + 1] = k .. ' (' .. t .. ')' end
      table.sort(sent)
      rows[#rows + 1] = string.format('| %s | `%s %s` | %s | %s |', op, want.method, want.route,
        #want.keys > 0 and table.concat(want.keys, ', ') or '-', #sent > 0 and table.concat(sent, ', ') or '-')
    end
    assert.is_string(seen.create.projectId)
    assert.is_string(seen.create.template)
    assert.is_string(seen.exec.cmd)
    C.write_section('lizard', table.concat({
      '## Lizard',
      '',
      'Lizard has **no official SDK in the npm registry**, so no vendor client referees it. Its fake '
        .. '(`spec/providers/lizard/fake.lua`) and its adapter are checked against the request shapes of '
        .. '`../shared/docs/PROVIDERS.md` instead (`spec/providers/lizard/conformance_spec.lua`): the fake knows exactly the '
        .. 'documented body keys and answers 400 to any other; every request the adapter sends in its lifecycle '
        .. '(create, exec, list, destroy; files travel through exec) is a documented endpoint with documented keys. '
        .. 'What the document does not give (value types, answers, status codes beyond 404 on delete) is assumed.',
      '',
      '| operation | documented endpoint | documented body keys | keys cseng sends (JSON type) |',
      '|---|---|---|---|',
      table.concat(rows, '\n'),
    }, '\n'))
  end)
end)
