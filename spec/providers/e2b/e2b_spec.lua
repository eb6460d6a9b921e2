-- The E2B adapter (lua/providers/e2b.lua):
--   * conformance: control-plane requests through Prism against E2B's own spec
--     (shared/specs/e2b-openapi.yml), envd file requests through Prism against e2b-envd.yaml,
--     Process.Start checked by the fake's independent parser against e2b-process.proto;
--   * lifecycles and faults against the stateful fake (spec/providers/e2b/fake.lua): real commands, the
--     Connect stream cut anywhere, truncated streams, error end-of-stream envelopes, deadlines;
--   * the runner end to end on the fake (`cseng run --provider e2b`), and a missing key.
local http = require('cseng.http')
local serve = require('cseng.serve')
local connect = require('cseng.connect')
local task = require('cseng.task')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local secrets = require('cseng.lib.secrets')
local e2b = require('providers.e2b')
local e2b_wire = require('providers.shared.e2b_wire')

local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('e2b')
local prism = vendor.prism
local labels, tar_of, sorted_ids = vendor.labeller('cseng@spec host'), vendor.tar_of, vendor.sorted_ids

local function full_spec(run)
  return {
    labels = labels(run), env = { GREETING = 'hello world', QUOTED = [[it's "quoted" $HOME]] },
    workdir = '/workspace', network = false, cpus = 2, memory_mb = 2048, ttl_seconds = 1900,
    image = 'ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250101',
  }
end

describe('cseng.connect (the envelope codec binding)', function()
  it('encodes, decodes across any cut, and reports bad streams with ECONNECT', function()
    local stream = connect.encode('{"a":1}') .. connect.encode('') .. connect.encode('{}', connect.FLAG_END_STREAM)
    assert.equal('\0\0\0\0\7{"a":1}', stream:sub(1, 12))
    for cut = 0, #stream do
      local d <close> = connect.decoder()
      local got = {}
      for _, part in ipairs({ stream:sub(1, cut), stream:sub(cut + 1) }) do
        for _, fr in ipairs(assert(d:feed(part))) do got[#got + 1] = fr.flags .. ':' .. fr.data end
      end
      assert.same({ '0:{"a":1}', '0:', '2:{}' }, got)
      assert.is_true(d:ended())
      assert.is_true(d:finish())
    end
    local d = connect.decoder(8)
    local frames, msg, code = d:feed(connect.encode('123456789'))
    assert.is_nil(frames)
    assert.equal('ECONNECT', code)
    assert.matches('declares 9 bytes, over the limit of 8', msg)
    assert.is_nil((d:feed('')))  -- sticky
    d = connect.decoder()
    assert.same({}, assert(d:feed(connect.encode('abc'):sub(1, 6))))
    assert.equal(6, d:buffered())
    local ok, fmsg, fcode = d:finish()
    assert.is_nil(ok)
    assert.equal('ECONNECT', fcode)
    assert.matches('ended inside frame 1', fmsg)
    assert.matches('reserved flag', select(2, connect.decoder():feed(connect.encode('x', 0x40))))
    assert.matches('after the end%-of%-stream', select(2, connect.decoder():feed(connect.encode('', 2) .. 'x')))
    d:close()
    d:close()
    assert.has_error(function() d:feed('x') end, 'attempt to use a closed connect decoder')
    assert.has_error(function() connect.encode('x', 256) end)
  end)
end)

-- The vendored e2b-openapi.yml predates POST /v2/sandboxes, which the official SDK (e2b 2.51)
-- and the adapter create through: a copy of the spec with that operation added, taken from its
-- POST /sandboxes (the SDK's generated types: NewSandboxV2 is NewSandbox without "secure").
local function spec_with_v2_create()
  local text = assert(fs.read(prism.SPECS .. '/e2b-openapi.yml'))
  local post = text:match('\n(    post:\n      summary: Create sandbox\n.-\n)\n  /v2/sandboxes:\n')
  assert(post, 'e2b-openapi.yml: POST /sandboxes not found')
  local out, n = text:gsub('\n  /v2/sandboxes:\n', function()
    return '\n  /v2/sandboxes:\n' .. (post:gsub('summary: Create sandbox', 'summary: Create sandbox (v2)', 1))
  end, 1)
  assert(n == 1)
  local path = sys.root() .. '/spec/tmp/e2b-openapi-v2create-' .. crypto.hex(crypto.random_bytes(4)) .. '.yml'
  fs.mkdir_p(sys.root() .. '/spec/tmp')
  assert(fs.write(path, out))
  return path
end

describe('e2b conformance against the vendor specs (Prism)', function()
  local f, api, envd, why, spec_file

  setup(function()
    why = prism.missing()
    if why then return end
    f = fake.start {}
    spec_file = spec_with_v2_create()
    api, envd = vendor.start_prisms({ spec_file, f.url }, { prism.SPECS .. '/e2b-envd.yaml', f.envd_url })
    f.set { files_via = envd.url } -- envd's /files go through Prism; Process.Start (Connect) does not
  end)

  teardown(function()
    if api then api.close() end
    if envd then envd.close() end
    if f then f.close() end
    if spec_file then os.remove(spec_file) end
  end)

  it('rejects requests that violate the spec (so an accepted request means something)', function()
    if why then pending(why) return end
    local before = f.stats()
    local key = { ['X-API-Key'] = f.api_key, ['Content-Type'] = 'application/json' }
    local res = assert(http.request { method = 'POST', url = api.url .. '/sandboxes', headers = key,
      body = cjson.encode { timeout = -1, metadata = { a = 1 } } })
    assert.equal(422, res.status)
    local where = {}
    for _, v in ipairs(cjson.decode(res.body).validation) do where[table.concat(v.location, '.')] = v.code end
    assert.equal('required', where.body)
    assert.equal('minimum', where['body.timeout'])
    assert.equal('type', where['body.metadata.a'])
    res = assert(http.request { url = api.url .. '/v2/sandboxes?state=sleeping', headers = key })
    assert.equal(422, res.status)
    res = assert(http.request { method = 'DELETE', url = api.url .. '/sandboxes/x' })
    assert.equal(401, res.status)
    res = assert(http.request { url = envd.url .. '/files?path=/x&signature_expiration=soon' })
    assert.equal(422, res.status)
    local after = f.stats()
    assert.equal(before.creates, after.creates)
    assert.equal(before.lists, after.lists)
    assert.equal(before.deletes, after.deletes)
    assert.equal(before.downloads, after.downloads)
    -- and the fake's Start parser refuses what a Connect server would
    local ok_req = connect.encode(cjson.encode { process = { cmd = '/bin/bash', args = { '-c', 'true' } } })
    assert.is_table(fake.parse_start(ok_req))
    assert.is_nil(fake.parse_start(connect.encode('{"process":{"cmd":"x","argv":[]}}')))
    assert.is_nil(fake.parse_start(connect.encode('{"process":{"cmd":"x"}}', 1)))
    assert.is_nil(fake.parse_start(ok_req .. 'x'))
    assert.is_nil(fake.parse_start(connect.encode('{"process":{"cmd":"x","envs":{"A":1}}}')))
  end)

  it('sends create (every field), exec, file upload/download, list and delete as the specs say', function()
    if why then pending(why) return end
    local client = e2b.connect(f.config { api_url = api.url, template = 'ghcr.io/laude-institute/*=tb-ubuntu,base' })
    local run = 'conf-' .. crypto.hex(crypto.random_bytes(3))
    local spec = full_spec(run)
    local sb, err, code = e2b.create(client, spec)
    assert(sb, tostring(err) .. ' ' .. tostring(code))
    local body = f.stats().last_create
    assert.equal('tb-ubuntu', body.templateID)
    assert.equal(1900, body.timeout)
    assert.same(spec.labels, body.metadata)
    assert.same(spec.env, body.envVars)
    assert.is_nil(body.secure) -- POST /v2/sandboxes secures every sandbox
    assert.is_false(body.allow_internet_access)
    assert.is_string(sb.token)

    local r = assert(e2b.exec(client, sb, 'echo "$GREETING|$EXTRA|$PWD"; cat; echo oops >&2; exit 4',
      { env = { EXTRA = 'x y' }, cwd = '/tmp', stdin = 'piped\n', timeout = 30 }))
    assert.equal(4, r.code)
    assert.equal('hello world|x y|/tmp\npiped\n', r.stdout)
    assert.equal('oops\n', r.stderr)
    -- Prism forwards bodies as text: an uncompressed tar of ASCII files here
    assert(e2b.put(client, sb, '/workspace/in', tar_of({ ['a.txt'] = 'A\n', ['d/b.txt'] = 'B\0\1\2' }, 'tar')))
    assert.equal('A\n', assert(e2b.get(client, sb, '/workspace/in/a.txt')))
    assert.equal('B\0\1\2', assert(e2b.get(client, sb, '/workspace/in/d/b.txt')))
    local _, _, gcode = e2b.get(client, sb, '/no/such')
    assert.equal('ENOENT', gcode) -- the documented 404 passed Prism's response check
    local found = assert(e2b.list(client, { labels = { ['cseng.run'] = run, ['cseng.launcher'] = 'cseng@spec host' } }))
    assert.same({ sb.id }, sorted_ids(found))
    assert.same({ ['cseng.run'] = run, ['cseng.launcher'] = 'cseng@spec host' }, f.stats().last_list_metadata)
    assert.is_true(e2b.destroy(client, sb))
    assert.is_true(e2b.destroy(client, sb)) -- 404, documented: already gone

    local sb2 = assert(e2b.create(client, { network = true }))
    body = f.stats().last_create
    assert.equal('base', body.templateID)
    assert.is_true(body.allow_internet_access)
    assert.is_nil(body.metadata)
    assert.is_true(e2b.destroy(client, sb2))
    local s = f.stats()
    assert.equal(2, s.creates)
    assert.equal(3, s.deletes)
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    assert.is_true(s.uploads >= 2 and s.downloads == 3)
  end)
  it('sends the warm snapshot (GET /snapshots?name=, POST /sandboxes/{id}/snapshots) and a create from it as the spec says', function()
    if why then pending(why) return end
    local client = e2b.connect(f.config { api_url = api.url })
    local sb = assert(e2b.create(client, { labels = labels('conf-warm') }))
    assert.equal(0, assert(e2b.exec(client, sb, 'mkdir -p /workspace && echo prepared > /workspace/mark')).code)
    local key = crypto.hex(crypto.random_bytes(12))
    local id, err, code = e2b.snapshot(client, sb, key)
    assert(id, tostring(err) .. ' ' .. tostring(code))
    assert.equal('cseng-fake-team/cseng-' .. key .. ':default', id)
    local s = f.stats()
    assert.equal(1, s.snapshots)
    assert.equal(1, s.snapshot_lists) -- looked up first: none yet
    assert.same({ name = 'cseng-' .. key }, s.last_snapshot)
    assert.is_true(e2b.destroy(client, sb))
    -- the create body's templateID is the snapshot, and the sandbox has the prepared files
    local sb2 = assert(e2b.create(client, { labels = labels('conf-warm', 'b'), warm_artifact = id, image = 'x:y' }))
    assert.equal(id, f.stats().last_create.templateID)
    assert.equal('prepared\n', assert(e2b.exec(client, sb2, 'cat /workspace/mark')).stdout)
    -- the same key again: found by name and reused, no second snapshot call
    assert.equal(id, assert(e2b.snapshot(client, sb2, key)))
    assert.equal(1, f.stats().snapshots)
    -- opts.fresh (the arena's snapshot workload): a new snapshot call, no lookup
    local lists = f.stats().snapshot_lists
    assert.equal(id, assert(e2b.snapshot(client, sb2, key, { fresh = true })))
    assert.equal(2, f.stats().snapshots)
    assert.equal(lists, f.stats().snapshot_lists)
    assert.is_true(e2b.destroy(client, sb2))
    -- deleted as the SDK's deleteSnapshot does (DELETE /templates/{snapshotID}, through Prism);
    -- again: the documented 404 counts as deleted
    assert.is_true(e2b.delete_artifact(client, id))
    assert.is_true(e2b.delete_artifact(client, id))
    assert.equal(2, f.stats().snapshot_deletes)
    s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)

  it('sends fork (POST /sandboxes/{id}/fork) and a multi-file upload (envd POST /files, a part per file) as the specs say', function()
    if why then pending(why) return end
    local key = { ['X-API-Key'] = f.api_key, ['Content-Type'] = 'application/json' }
    local before = f.stats()
    for _, bad in ipairs({ { count = 0 }, { count = 101 }, { count = 2, timeout = -1 } }) do
      local res = assert(http.request { method = 'POST', url = api.url .. '/sandboxes/x/fork', headers = key,
        body = cjson.encode(bad) })
      assert.equal(422, res.status, cjson.encode(bad)) -- SandboxForkRequest: count 1..100, timeout >= 0
    end
    assert.equal(before.forks, f.stats().forks) -- nothing reached the fake
    local client = e2b.connect(f.config { api_url = api.url })
    local sb = assert(e2b.create(client, { labels = labels('conf-fork'), ttl_seconds = 900 }))
    assert.equal(0, assert(e2b.exec(client, sb, 'echo parent > /tmp/state')).code)
    local kids, err, code = e2b.fork(client, sb, 2, { labels = labels('conf-fork', 'kids') })
    assert(kids, tostring(err) .. ' ' .. tostring(code)) -- the 201 list of SandboxForkResult passed Prism's check
    assert.same({ count = 2, timeout = 900 }, f.stats().fork_bodies[#f.stats().fork_bodies])
    assert.equal('parent\n', assert(e2b.exec(client, kids[2], 'cat /tmp/state')).stdout)
    -- Prism forwards bodies as text: ASCII files
    local files = {}
    for i = 1, 5 do files[i] = { path = '/tmp/multi/f' .. i .. '.txt', data = 'file ' .. i .. '\n' } end
    assert(e2b.write_files(client, kids[1], files)) -- the EntryInfo list passed Prism's check
    assert.equal(5, f.stats().last_upload_files)
    assert.equal('file 1\nfile 5\n', assert(e2b.exec(client, kids[1], 'cat /tmp/multi/f1.txt /tmp/multi/f5.txt')).stdout)
    for _, k in ipairs(kids) do assert.is_true(e2b.destroy(client, k)) end
    assert.is_true(e2b.destroy(client, sb))
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)
end)

describe('e2b lifecycle (stateful fake)', function()
  local f
  before_each(function() f = fake.start {} end)
  after_each(function() f.close() end)

  it('creates, runs real commands over the Connect stream, moves files, destroys', function()
    local client = e2b.connect(f.config())
    local sb = assert(e2b.create(client, full_spec('life')))
    assert.is_table(sb.http_timings)
    assert.is_number(sb.http_timings.total)
    local r = assert(e2b.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.same({ 7, 'out\n', 'err\n', false }, { r.code, r.stdout, r.stderr, r.timed_out })
    assert.is_number(r.pid)
    r = assert(e2b.exec(client, sb, 'true'))
    assert.equal(0, r.code) -- the end event had no exitCode (proto3 default)
    r = assert(e2b.exec(client, sb, 'pwd; echo "$GREETING"; echo "$QUOTED"'))
    assert.equal('/workspace\nhello world\n' .. [[it's "quoted" $HOME]] .. '\n', r.stdout)
    -- many data frames: 300 KB of output in 700-byte events
    r = assert(e2b.exec(client, sb, 'head -c 300000 /dev/urandom | base64 -w0 | head -c 300000'))
    assert.equal(300000, #r.stdout)
    -- state persists; absolute paths are the sandbox's
    assert.equal(0, assert(e2b.exec(client, sb, 'mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt')).code)
    assert.equal('1\n', assert(e2b.get(client, sb, '/logs/verifier/reward.txt')))
    local bin = crypto.random_bytes(70000) .. '\0\255'
    assert(e2b.put(client, sb, '/data', tar_of { ['blob.bin'] = bin }))
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(e2b.get(client, sb, '/data/blob.bin'))))
    assert.is_true(e2b.destroy(client, sb))
    local s = f.stats()
    assert.same({ creates = 1, starts = 6, uploads = 1, downloads = 2, deletes = 1, live = 0, bad_requests = 0 },
      { creates = s.creates, starts = s.starts, uploads = s.uploads, downloads = s.downloads, deletes = s.deletes,
        live = s.live, bad_requests = s.bad_requests })
    -- what Start carried
    local start = s.start_requests[1]
    assert.equal('/bin/bash', start.process.cmd)
    assert.same({ '-l', '-c', 'echo out; echo err >&2; exit 7' }, start.process.args)
    assert.equal('/workspace', start.process.cwd)
    assert.is_false(start.stdin)
    local h = s.last_start_headers
    assert.equal('application/connect+json', h['content-type'])
    assert.equal('1', h['connect-protocol-version'])
    assert.equal(sb.token, h['x-access-token'])
    assert.equal('Basic ' .. crypto.base64('root:'), h.authorization)
    assert.equal(sb.id, h['e2b-sandbox-id'])
    assert.equal('300000', h['connect-timeout-ms']) -- the last Start: put's tar -xf, timeout 300 s
  end)

  it("records the create call's HTTP timings (a slow create)", function()
    local client, sb = vendor.slow_create(e2b, f)
    assert.is_true(sb.http_timings.total >= sb.http_timings.ttfb)
    assert.is_true(sb.http_timings.connect <= sb.http_timings.ttfb)
    assert.is_true(e2b.destroy(client, sb))
  end)

  it('runs the verifier as the non-root user', function()
    local client = e2b.connect(f.config())
    local sb = assert(e2b.create(client, {}))
    local r = assert(e2b.exec(client, sb, 'id -u', { user = 'verifier' }))
    assert.equal('1000\n', r.stdout)
    assert.equal('Basic ' .. crypto.base64('user:'), f.stats().last_start_headers.authorization)
    assert.equal('0\n', assert(e2b.exec(client, sb, 'id -u')).stdout)
    assert.is_true(e2b.destroy(client, sb))
  end)

  it('decodes a response stream cut at every kind of boundary', function()
    -- a canned envd answer, written 1 to 7 bytes at a time
    local frames = {
      connect.encode('{"event":{"start":{"pid":77}}}'),
      connect.encode(cjson.encode { event = { data = { stdout = crypto.base64('hello ') } } }),
      connect.encode('{"event":{"keepalive":{}}}'),
      connect.encode(cjson.encode { event = { data = { stderr = crypto.base64('warn\n') } } }),
      connect.encode(cjson.encode { event = { data = { stdout = crypto.base64('world\n') } } }),
      connect.encode('{"event":{"end":{"exitCode":5,"exited":true,"status":"exit status 5"}}}'),
      connect.encode('{}', 2),
    }
    local stream = table.concat(frames)
    local srv <close> = assert(serve.listen { handler = function(req)
      req:start(200, { ['Content-Type'] = 'application/connect+json' })
      local i, step = 1, 1
      while i <= #stream do
        req:write(stream:sub(i, i + step - 1))
        i = i + step
        step = step % 7 + 1
        task.sleep(0.001)
      end
    end })
    local client = e2b.connect { getenv = function() return nil end, api_key = 'k-123456', envd_url_template = srv:url() }
    local r = assert(e2b.exec(client, { id = 'canned' }, 'whatever'))
    assert.same({ 5, 'hello world\n', 'warn\n', 77 }, { r.code, r.stdout, r.stderr, r.pid })
  end)

  it('reports a deadline as a timeout and kills the process', function()
    local client = e2b.connect(f.config())
    local sb = assert(e2b.create(client, {}))
    local r = assert(e2b.exec(client, sb, 'echo started; sleep 10; echo never', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.equal(124, r.code)
    assert.equal('started\n', r.stdout)
    assert.matches('deadline exceeded', r.stderr)
    assert.is_true(r.elapsed < 8)
    local s = f.stats()
    assert.equal(1, s.deadlines)
    assert.equal(1, s.signals)
    assert.same({ process = { pid = r.pid }, signal = 'SIGNAL_SIGKILL' }, s.signal_requests[1])
    assert.is_true(e2b.destroy(client, sb))
  end)

  it('fails cleanly on broken streams and envd errors', function()
    local client = e2b.connect(f.config())
    local sb = assert(e2b.create(client, {}))
    local cases = {
      { 'truncate', 'ECONNECT', 'stream ended inside frame' },
      { 'error_end', 'ECONNECT', 'envd error internal: injected by the fake' },
      { 'no_end_event', 'ECONNECT', 'without the process end event' },
      { 'unauthenticated', 'HTTP_401', 'unauthenticated' },
      { 'http_401', 'HTTP_401', 'HTTP 401' },
    }
    for _, c in ipairs(cases) do
      f.set { envd_fault = c[1] }
      local r, msg, code = e2b.exec(client, sb, 'echo hi')
      assert.is_nil(r, c[1])
      assert.equal(c[2], code, c[1])
      assert.matches(c[3], msg, 1, true)
    end
    f.set { envd_fault = false }
    assert.equal('hi\n', assert(e2b.exec(client, sb, 'echo hi')).stdout) -- the sandbox is fine
    -- a wrong access token: envd's 401
    local r, _, code = e2b.exec(client, { id = sb.id, token = 'not-the-token' }, 'true')
    assert.is_nil(r)
    assert.equal('HTTP_401', code)
    assert.is_true(e2b.destroy(client, sb))
  end)

  it('maps 401 to HTTP_401 without leaking the key, and keeps the envd token secret', function()
    local client = vendor.refused_create(e2b, f, f.api_key, { api_key = 'wrong-key-123456' })
    local good = assert(e2b.create(client, {}))
    assert.equal('token [redacted]', secrets.redact('token ' .. good.token))
    assert.is_true(e2b.destroy(client, good))
  end)

  it('treats a gone sandbox as destroyed, and reports a failing delete', function()
    vendor.check_destroy(e2b, f)
  end)

  it("lists exactly one run's sandboxes by metadata, across pages", function()
    vendor.check_list_pages(e2b, f, labels, 'run-A&B=C', 'last_list_metadata') -- X-Next-Token followed
  end)

  it('builds envd URLs and picks templates from the settings', function()
    local c = e2b.connect { getenv = function() return nil end, api_key = 'k-123456' }
    assert.equal('https://49983-abc.e2b.app', e2b_wire.envd_url(c, { id = 'abc' }))
    assert.equal('https://49983-abc.eu.e2b.dev', e2b_wire.envd_url(c, { id = 'abc', domain = 'eu.e2b.dev' }))
    assert.equal('base', e2b_wire.template_for(c, { image = 'ubuntu:24.04' }))
    local m = e2b.connect { getenv = function(k) return ({ E2B_API_KEY = 'k-123456',
      E2B_TEMPLATE = 'ghcr.io/laude-institute/* = tb-ubuntu, python:* = py, mine' })[k] end }
    assert.equal('tb-ubuntu', e2b_wire.template_for(m, { image = 'ghcr.io/laude-institute/t-bench/ubuntu-24-04:1' }))
    assert.equal('py', e2b_wire.template_for(m, { image = 'python:3.12' }))
    assert.equal('mine', e2b_wire.template_for(m, { image = 'debian:12' }))
    assert.equal('given', e2b_wire.template_for(m, { template = 'given', image = 'python:3' }))
    assert.equal(3600, e2b_wire.create_body(c, { ttl_seconds = 99999 }).timeout) -- capped
  end)

  it('reports a failing snapshot call with its status', function()
    local client = e2b.connect(f.config())
    local sb = assert(e2b.create(client, {}))
    f.set { snapshot_status = 500 }
    local ok, msg, code = e2b.snapshot(client, sb, 'k1')
    assert.is_nil(ok)
    assert.equal('HTTP_500', code)
    assert.truthy(msg:find('POST ' .. f.url .. '/sandboxes/' .. sb.id .. '/snapshots: HTTP 500: forced failure 500', 1, true), msg)
    f.set { snapshot_status = false }
    assert.is_true(e2b.destroy(client, sb))
    local ok2, _, code2 = e2b.snapshot(client, sb, 'k2') -- the sandbox is gone: 404
    assert.is_nil(ok2)
    assert.equal('HTTP_404', code2)
  end)

  it('names the missing credential', function()
    vendor.check_names_credential(e2b, 'E2B_API_KEY')
  end)
end)

describe('the runner on the e2b fake', function()
  local runner = vendor.runner(fake, 'e2b', { E2B_API_KEY = false, E2B_API_URL = false, E2B_ENVD_URL_TEMPLATE = false })
  setup(runner.start)
  teardown(runner.stop)

  it('passes a bundled task with gold (verifier as the non-root user) and fails it with nop', function()
    local id = 'python-fix-roman-numerals'
    runner.check_gold_then_nop(id, function(s, before)
      local users = {}
      for k = #before.users + 1, #s.users do users[s.users[k]] = true end
      assert.is_true(users.user and users.root) -- test.sh ran as "user", staging as root
      assert.equal(id, s.last_create.metadata['cseng.task'])
    end)
  end)

  it('passes a bundled task warm, from an E2B snapshot made once and then reused', function()
    local id = runner.check_warm('bash-fix-linecount-script', 'snapshots')
    assert.matches('^cseng%-fake%-team/cseng%-%x+:default$', id)
    assert.equal(id, runner.f.stats().last_create.templateID) -- the trial started from it
  end)

  it('reports a failing snapshot as an error of the build stage', function()
    runner.check_warm_snapshot_fails('csv-sales-report', 'snapshot_status', 500)
  end)

  it('stops with a clear error naming E2B_API_KEY when it is missing', function()
    runner.check_missing_key('E2B_API_KEY', 'E2B_API_URL')
  end)
end)
