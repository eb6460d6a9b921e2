-- The Daytona adapter (lua/providers/daytona.lua):
--   * conformance: every request shape it sends goes through Prism in front of the stateful
--     fake, validated against Daytona's own specs (shared/specs/daytona-openapi.yaml and
--     daytona-toolbox-swagger.yaml); Prism also validates the fake's answers;
--   * lifecycles and faults against the stateful fake (spec/providers/daytona/fake.lua), whose
--     sandboxes really run commands (bubblewrap);
--   * the runner end to end on the fake (`cseng run --provider daytona`), and a missing key.
local http = require('cseng.http')
local task = require('cseng.task')
local fs = require('cseng.fs')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local daytona = require('providers.daytona')

local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('daytona')
local prism = vendor.prism
local labels, tar_of = vendor.labeller('cseng@spec'), vendor.tar_of

-- A spec that uses every create field the adapter sends.
local function full_spec(run)
  return {
    labels = labels(run), env = { GREETING = 'hello world', QUOTED = [[it's "quoted" $HOME \n]] },
    workdir = '/workspace', network = false, cpus = 1.5, memory_mb = 1536, disk_mb = 3000, ttl_seconds = 1900,
    image = 'ghcr.io/example/ubuntu-24-04:20250101',
  }
end

describe('daytona conformance against the vendor specs (Prism)', function()
  local f, api, tb, why

  setup(function()
    why = prism.missing()
    if why then return end
    f = fake.start {}
    -- the toolbox spec's paths are relative to {toolboxProxyUrl}/{sandboxId}
    local tmp = H.tempdir('daytona-prism-')
    local toolbox_spec = prism.prefix_paths(prism.SPECS .. '/daytona-toolbox-swagger.yaml', 'sandboxId', tmp .. '/toolbox.yaml')
    -- the vendored swagger declares POST /files/bulk-upload as multipart/form-data without its
    -- fields, so Prism would refuse any body: add the two the daemon reads (files[i].path and
    -- files[i].file, what the official SDK and the adapter send), for i = 0 (Prism 5 then
    -- accepts a form, but does not check that required fields are in it)
    local text = assert(fs.read(toolbox_spec))
    local patched, n = text:gsub('(\n  /{sandboxId}/files/bulk%-upload:\n    post:\n      consumes:\n        %- multipart/form%-data\n)',
      '%1      parameters:\n        - in: formData\n          name: files[0].path\n          required: true\n          type: string\n'
      .. '        - in: formData\n          name: files[0].file\n          required: true\n          type: file\n', 1)
    assert(n == 1, 'toolbox swagger: POST /files/bulk-upload not found')
    -- Prism checks a multipart answer against the boundary of the request's Content-Type (its
    -- bug: "Boundary parameter ... is not defined ... in the request header"), so the answer of
    -- POST /files/bulk-download loses its schema (gin.H, an untyped object: nothing is lost); the
    -- request is still validated
    patched, n = patched:gsub('(description: Multipart response with file parts and JSON error parts\n)'
      .. "          schema:\n            %$ref: '#/definitions/gin%.H'\n", '%1', 1)
    assert(n == 1, 'toolbox swagger: the answer of POST /files/bulk-download not found')
    assert(fs.write(toolbox_spec, patched))
    api, tb = vendor.start_prisms({ prism.SPECS .. '/daytona-openapi.yaml', f.url }, { toolbox_spec, f.toolbox_url })
    f.set { toolbox_public_url = tb.url }
  end)

  teardown(function()
    if api then api.close() end
    if tb then tb.close() end
    if f then f.close() end
  end)

  it('rejects requests that violate the spec (so an accepted request means something)', function()
    if why then pending(why) return end
    local before = f.stats()
    local res = assert(http.request { method = 'POST', url = api.url .. '/sandbox',
      headers = { Authorization = 'Bearer ' .. f.api_key, ['Content-Type'] = 'application/json' },
      body = cjson.encode { cpu = 'two', memory = 1.5, autoStopInterval = 'soon' } })
    assert.equal(422, res.status)
    local problem = cjson.decode(res.body)
    local where = {}
    for _, v in ipairs(problem.validation) do where[table.concat(v.location, '.')] = true end
    assert.is_true(where['body.cpu'] and where['body.memory'] and where['body.autoStopInterval'], res.body)
    res = assert(http.request { method = 'DELETE', url = api.url .. '/sandbox/x' })
    assert.equal(401, res.status) -- no credentials: the spec requires bearer or oauth2
    res = assert(http.request { method = 'POST', url = tb.url .. '/some-id/process/execute',
      headers = { ['Content-Type'] = 'application/json' }, body = cjson.encode { command = 'true', timeout = '5' } })
    assert.equal(422, res.status)
    res = assert(http.request { method = 'POST', url = tb.url .. '/some-id/process/execute',
      headers = { ['Content-Type'] = 'application/json' }, body = cjson.encode { cwd = '/' } })
    assert.equal(422, res.status) -- command is required
    -- (Prism checks that an upload is multipart/form-data, not which fields it has: those are
    -- checked by the fake and by the differential spec against the SDK)
    res = assert(http.request { method = 'POST', url = tb.url .. '/some-id/files/bulk-upload',
      headers = { ['Content-Type'] = 'text/plain' }, body = 'not a form' })
    assert.equal(422, res.status)
    res = assert(http.request { method = 'POST', url = tb.url .. '/some-id/files/bulk-download',
      headers = { ['Content-Type'] = 'application/json' }, body = cjson.encode { path = '/x' } })
    assert.equal(422, res.status) -- paths is required
    local after = f.stats()
    assert.equal(before.creates, after.creates) -- nothing reached the fake
    assert.equal(before.execs, after.execs)
    assert.equal(before.deletes, after.deletes)
    assert.equal(before.uploads, after.uploads)
    assert.equal(before.downloads, after.downloads)
  end)

  it('sends create (every field), get, exec, upload, download, list and delete as the spec says', function()
    if why then pending(why) return end
    local client = daytona.connect(f.config { api_url = api.url, target = 'eu', user = 'root' })
    local run = 'conf-' .. crypto.hex(crypto.random_bytes(3))
    local spec = full_spec(run)
    local sb, err, code = daytona.create(client, spec)
    assert(sb, tostring(err) .. ' ' .. tostring(code))
    local s = f.stats()
    local body = s.last_create
    -- every field reached the fake through Prism, as sent
    assert.same(spec.labels, body.labels)
    assert.same(spec.env, body.env)
    assert.equal('eu', body.target)
    assert.equal('root', body.user)
    assert.equal(2, body.cpu)
    assert.equal(2, body.memory)
    assert.equal(3, body.disk)
    assert.equal(32, body.autoStopInterval)
    assert.equal(0, body.autoDeleteInterval)
    assert.is_true(body.networkBlockAll)
    assert.equal('FROM ghcr.io/example/ubuntu-24-04:20250101\n', body.buildInfo.dockerfileContent)
    assert.is_nil(body.snapshot)
    assert.is_true(s.gets >= 1) -- polled GET /sandbox/{id} through Prism until started

    -- exec with env, cwd and stdin; upload + download; list; delete
    local r = assert(daytona.exec(client, sb, 'echo "$GREETING|$EXTRA|$PWD"; cat; exit 4',
      { env = { EXTRA = 'x y' }, cwd = '/tmp', stdin = 'piped\n', timeout = 30 }))
    assert.equal(4, r.code)
    assert.equal('hello world|x y|/tmp\npiped\n', r.stdout)
    -- Prism's proxy forwards bodies as text: bytes >= 0x80 do not survive it, so the archive is
    -- an uncompressed tar of ASCII files here (binary fidelity is checked against the fake alone)
    assert(daytona.put(client, sb, '/workspace/in', tar_of({ ['a.txt'] = 'A\n', ['d/b.txt'] = 'B\0\1\2' }, 'tar')))
    assert.equal('A\n', assert(daytona.get(client, sb, '/workspace/in/a.txt')))
    assert.equal('B\0\1\2', assert(daytona.get(client, sb, '/workspace/in/d/b.txt')))
    local found = assert(daytona.list(client, { labels = { ['cseng.run'] = run } }))
    assert.equal(1, #found)
    assert.equal(sb.id, found[1].id)
    assert.equal(run, found[1].labels['cseng.run'])
    assert(daytona.destroy(client, sb))

    -- the snapshot variant of create, and a spec with nothing optional
    local client2 = daytona.connect(f.config { api_url = api.url, snapshot = 'cseng-snap' })
    local sb2 = assert(daytona.create(client2, { labels = labels(run, 'b') }))
    assert.equal('cseng-snap', f.stats().last_create.snapshot)
    assert.is_nil(f.stats().last_create.buildInfo)
    local sb3 = assert(daytona.create(client, { network = true }))
    assert.is_false(f.stats().last_create.networkBlockAll)
    assert(daytona.destroy(client2, sb2))
    assert(daytona.destroy(client, sb3))
    s = f.stats()
    assert.equal(3, s.creates)
    assert.equal(3, s.deletes)
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)
  it('sends the warm snapshot (POST /sandbox/{id}/snapshot, GET /snapshots/{name}) and a create from it as the spec says', function()
    if why then pending(why) return end
    local client = daytona.connect(f.config { api_url = api.url })
    local sb = assert(daytona.create(client, { labels = labels('conf-warm') }))
    assert.equal(0, assert(daytona.exec(client, sb, 'mkdir -p /workspace && echo prepared > /workspace/mark')).code)
    local key = crypto.hex(crypto.random_bytes(12))
    local name, err, code = daytona.snapshot(client, sb, key)
    assert(name, tostring(err) .. ' ' .. tostring(code))
    assert.equal('cseng-' .. key, name)
    local s = f.stats()
    assert.equal(1, s.snapshots)
    assert.same({ name = name }, s.last_snapshot)
    assert.is_true(s.snapshot_gets >= 2) -- looked it up (404), then polled until active, through Prism
    assert(daytona.destroy(client, sb))
    -- the create body names the snapshot (no buildInfo), and the sandbox has the prepared files
    local sb2 = assert(daytona.create(client, { labels = labels('conf-warm', 'b'), warm_artifact = name,
                                                image = 'ignored:when-warm' }))
    assert.equal(name, f.stats().last_create.snapshot)
    assert.is_nil(f.stats().last_create.buildInfo)
    assert.equal('prepared\n', assert(daytona.exec(client, sb2, 'cat /workspace/mark')).stdout)
    -- the same key again: the active snapshot is found and reused, no second snapshot call
    assert.equal(name, assert(daytona.snapshot(client, sb2, key)))
    assert.equal(1, f.stats().snapshots)
    assert(daytona.destroy(client, sb2))
    s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)

  it('sends fork (POST /sandbox/{id}/fork, GET /sandbox/{id}/forks) and a many-file bulk upload as the specs say', function()
    if why then pending(why) return end
    local before = f.stats()
    local res = assert(http.request { method = 'POST', url = api.url .. '/sandbox/x/fork',
      headers = { Authorization = 'Bearer ' .. f.api_key, ['Content-Type'] = 'application/json' },
      body = cjson.encode { name = 42 } })
    assert.equal(422, res.status) -- ForkSandbox.name is a string
    assert.equal(before.forks, f.stats().forks)
    local client = daytona.connect(f.config { api_url = api.url })
    local sb = assert(daytona.create(client, { labels = labels('conf-fork') }))
    assert.equal(0, assert(daytona.exec(client, sb, 'echo parent > /tmp/state')).code)
    local kids, err, code = daytona.fork(client, sb, 2, { labels = labels('conf-fork', 'kids') })
    assert(kids, tostring(err) .. ' ' .. tostring(code)) -- each answer (a Sandbox) passed Prism's check
    assert.equal('parent\n', assert(daytona.exec(client, kids[2], 'cat /tmp/state')).stdout)
    -- a fork call answered 500 after making its child: GET /sandbox/{id}/forks (through Prism) finds it
    f.set { lose_fork = function(n) return n == 3 and 'error' or nil end }
    local none, ferr, fcode, made = daytona.fork(client, sb, 1, {})
    f.set { lose_fork = false }
    assert.is_nil(none)
    assert.equal('HTTP_500', fcode) -- no child answered: the call's own failure
    assert.matches('1 of 1 children failed', ferr, 1, true)
    assert.equal(1, #made)
    assert.equal(1, f.stats().fork_lists)
    -- Prism forwards bodies as text: ASCII files
    local files = {}
    for i = 1, 6 do files[i] = { path = '/tmp/multi/f' .. i .. '.txt', data = 'file ' .. i .. '\n' } end
    assert(daytona.write_files(client, kids[1], files))
    assert.equal(6, f.stats().last_upload_files)
    assert.equal('file 1\nfile 6\n', assert(daytona.exec(client, kids[1], 'cat /tmp/multi/f1.txt /tmp/multi/f6.txt')).stdout)
    for _, k in ipairs(kids) do assert(daytona.destroy(client, k)) end
    assert(daytona.destroy(client, made[1]))
    assert(daytona.destroy(client, sb))
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)
end)

describe('daytona lifecycle (stateful fake)', function()
  local f
  before_each(function() f = fake.start {} end)
  after_each(function() f.close() end)

  it('creates, runs real commands, moves files, lists and destroys', function()
    local client = daytona.connect(f.config())
    local sb = assert(daytona.create(client, full_spec('life')))
    assert.is_string(sb.id)
    assert.is_table(sb.http_timings)
    assert.is_number(sb.http_timings.ttfb)
    assert.is_number(sb.ready_seconds)
    local r = assert(daytona.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.equal(7, r.code)
    assert.equal('out\nerr\n', r.stdout) -- combined, as the toolbox returns it
    assert.equal('', r.stderr)
    assert.is_false(r.timed_out)
    r = assert(daytona.exec(client, sb, 'pwd; echo "$GREETING"; echo "$QUOTED"'))
    assert.equal('/workspace\nhello world\n' .. [[it's "quoted" $HOME \n]] .. '\n', r.stdout)
    -- state persists between commands; absolute paths are the sandbox's
    assert.equal(0, assert(daytona.exec(client, sb, 'mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt')).code)
    assert.equal('1\n', assert(daytona.get(client, sb, '/logs/verifier/reward.txt')))
    assert(daytona.put(client, sb, '/tests', tar_of { ['test.sh'] = 'echo tested; exit 0\n' }))
    local bin = crypto.random_bytes(70000) .. '\0\255'
    assert(daytona.put(client, sb, '/data', tar_of { ['blob.bin'] = bin }))
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(daytona.get(client, sb, '/data/blob.bin'))))
    r = assert(daytona.exec(client, sb, 'bash /tests/test.sh', { cwd = '/' }))
    assert.equal(0, r.code)
    assert.equal('tested\n', r.stdout)
    local nil_, msg, code = daytona.get(client, sb, '/no/such/file')
    assert.is_nil(nil_)
    assert.equal('ENOENT', code)
    assert.matches('/no/such/file', msg)
    assert.is_true(daytona.destroy(client, sb))
    local s = f.stats()
    assert.same({ creates = 1, execs = 6, uploads = 2, downloads = 3, deletes = 1, live = 0 },
      { creates = s.creates, execs = s.execs, uploads = s.uploads, downloads = s.downloads, deletes = s.deletes, live = s.live })
  end)

  it('passes any command text through the toolbox, which has no shell', function()
    local client = daytona.connect(f.config())
    local sb = assert(daytona.create(client, {}))
    local nasty = [[printf '%s|' "a'b" 'c"d' "$((6*7))" `echo back` "tab	x" 'back\slash'; echo; echo "ünï €"]]
    local r = assert(daytona.exec(client, sb, nasty .. '\n# a comment line\nexit 3'))
    assert.equal(3, r.code)
    assert.equal([[a'b|c"d|42|back|tab	x|back\slash|]] .. '\nünï €\n', r.stdout)
    -- what the toolbox got: one shell, -c, and a script of base64 only
    local argv = fake.parse_command(f.stats().last_exec.command)
    assert.equal(3, #argv)
    assert.equal('bash', argv[1])
    assert.equal('-c', argv[2])
    assert.not_matches("'", argv[3])
    -- envs, cwd and timeout go in the body too
    local body = f.stats().last_exec
    assert.is_number(body.timeout)
    assert(daytona.destroy(client, sb))
  end)

  it("records the create call's HTTP timings (a slow create)", function()
    local client, sb = vendor.slow_create(daytona, f)
    assert.is_true(sb.ready_seconds >= sb.http_timings.total)
    assert(daytona.destroy(client, sb))
  end)

  it('polls until started with back-off, and times the readiness', function()
    f.set { start_reads = 4 } -- four GETs read "creating", the fifth "started"
    local client = daytona.connect(f.config { poll = { first = 0.02, factor = 1.5, max = 0.04 } })
    local gets = f.stats().gets
    local sb = assert(daytona.create(client, {}))
    assert.equal(5, f.stats().gets - gets)
    -- the readiness includes every back-off sleep: 0.02, 0.03, then the 0.04 cap three times
    assert.is_true(sb.ready_seconds >= 0.02 + 0.03 + 0.04 * 3, 'ready after ' .. sb.ready_seconds .. ' s')
    assert(daytona.destroy(client, sb))
  end)

  it('fails with ESTATE on error/build_failed and deletes what was allocated', function()
    for _, state in ipairs({ 'error', 'build_failed' }) do
      f.set { end_state = state, start_reads = 0 }
      local client = daytona.connect(f.config())
      local sb, msg, code = daytona.create(client, {})
      assert.is_nil(sb)
      assert.equal('ESTATE', code)
      assert.matches(state, msg)
      assert.matches('injected by the fake', msg)
    end
    local s = f.stats()
    assert.equal(2, s.creates)
    assert.equal(2, s.deletes)
    assert.equal(0, s.live)
  end)

  it('gives up on a slow start with ETIMEDOUT and deletes the sandbox', function()
    f.set { start_reads = math.huge } -- never started
    local client = daytona.connect(f.config { start_timeout = 0.3 })
    local sb, msg, code = daytona.create(client, {})
    assert.is_nil(sb)
    assert.equal('ETIMEDOUT', code)
    assert.matches('not started after 0.3 s', msg)
    assert.equal(1, f.stats().deletes)
    assert.equal(0, f.stats().live)
  end)

  it('deletes the sandbox when the trial is cancelled while it starts', function()
    f.set { start_reads = math.huge } -- never started
    local client = daytona.connect(f.config())
    local t = task.spawn(function() return daytona.create(client, {}) end)
    while f.stats().gets < 2 do task.sleep(0.01) end
    t:cancel()
    local ok, e = t:join()
    assert.is_false(ok)
    assert.equal('ECANCELED', type(e) == 'table' and e.code or e)
    local s = f.stats()
    assert.equal(1, s.creates)
    assert.equal(1, s.deletes)
    assert.equal(0, s.live)
  end)

  it('reports a command timeout (HTTP 408) as timed_out', function()
    local client = daytona.connect(f.config())
    local sb = assert(daytona.create(client, {}))
    local r = assert(daytona.exec(client, sb, 'sleep 10; echo never', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.equal(124, r.code)
    assert.matches('timed out after 1 seconds', r.stderr)
    assert.is_true(r.elapsed < 8)
    assert.equal(1, f.stats().timeouts)
    f.set { exec_status = function(n) return n == 2 and 408 or nil end }
    r = assert(daytona.exec(client, sb, 'true'))
    assert.is_true(r.timed_out)
    assert(daytona.destroy(client, sb))
  end)

  it('maps 401/403 to HTTP_401/HTTP_403 without leaking the key', function()
    f.set { auth_fail = 'create' }
    local client = daytona.connect(f.config())
    local sb, msg, code = daytona.create(client, {})
    assert.is_nil(sb)
    assert.equal('HTTP_401', code)
    assert.matches('HTTP 401', msg)
    assert.not_matches(f.api_key, msg, 1, true)
    f.set { auth_fail = false, create_status = 403 }
    local _, _, code403 = daytona.create(client, {})
    assert.equal('HTTP_403', code403)
    -- a wrong key: the fake's 401, with the key never echoed
    local bad = daytona.connect(f.config { api_key = 'wrong-key-123456' })
    f.set { create_status = false }
    local sb2, msg2, code2 = daytona.create(bad, {})
    assert.is_nil(sb2)
    assert.equal('HTTP_401', code2)
    assert.is_nil(msg2:find('wrong-key-123456', 1, true))
    assert.equal(0, f.stats().created)
  end)

  it('treats a gone sandbox as destroyed, and reports a failing delete', function()
    vendor.check_destroy(daytona, f)
  end)

  it("lists exactly one run's sandboxes by label, across pages", function()
    vendor.check_list_pages(daytona, f, labels, 'run-A', 'last_list_labels') -- nextCursor followed
  end)

  it('fails a snapshot that ends in error with ESNAPSHOT, and one that is slow with ETIMEDOUT', function()
    local client = daytona.connect(f.config { snapshot_timeout = 0.3 })
    local sb = assert(daytona.create(client, {}))
    f.set { snapshot_end_state = 'error' }
    local ok, msg, code = daytona.snapshot(client, sb, 'k1')
    assert.is_nil(ok)
    assert.equal('ESNAPSHOT', code)
    assert.matches('snapshot cseng%-k1 is error: injected by the fake', msg)
    f.set { snapshot_end_state = false, snapshot_delay = 30 }
    ok, msg, code = daytona.snapshot(client, sb, 'k2')
    assert.is_nil(ok)
    assert.equal('ETIMEDOUT', code)
    assert.matches('not active after 0.3 s %(state pending%)', msg)
    f.set { snapshot_delay = 0.05, snapshot_status = 403 }
    ok, msg, code = daytona.snapshot(client, sb, 'k3')
    assert.is_nil(ok)
    assert.equal('HTTP_403', code)
    assert.truthy(msg:find('POST ' .. f.url .. '/sandbox/' .. sb.id .. '/snapshot: HTTP 403', 1, true), msg)
    assert(daytona.destroy(client, sb))
  end)

  it('names the missing credential', function()
    vendor.check_names_credential(daytona, 'DAYTONA_API_KEY')
  end)
end)

describe('the runner on the daytona fake', function()
  local runner = vendor.runner(fake, 'daytona', { DAYTONA_API_KEY = false, DAYTONA_API_URL = false })
  setup(runner.start)
  teardown(runner.stop)

  it('passes a bundled task with gold (the fake really runs it) and fails it with nop', function()
    local index = 'bash-template-render'
    runner.check_gold_then_nop(index, function(s, before, summary)
      assert.is_true(summary.results[1].passed)
      assert.is_true(s.execs - before.execs >= 4)
      assert.is_true(s.uploads - before.uploads >= 3)
      assert.equal(index, s.last_create.labels['cseng.task'])
      assert.is_string(s.last_create.labels['cseng.run'])
      assert.equal(0, s.last_create.autoDeleteInterval)
    end, function(summary)
      assert.equal('failed', summary.results[1].outcome or (summary.results[1].passed == false and 'failed'))
    end)
  end)

  it('passes a bundled task warm, from a Daytona snapshot made once and then reused', function()
    local name = runner.check_warm('bash-fix-linecount-script', 'snapshots')
    assert.matches('^cseng%-%x+$', name)
    assert.equal(name, runner.f.stats().last_create.snapshot) -- the trial started from it
  end)

  it('reports a failing snapshot as an error of the build stage', function()
    runner.check_warm_snapshot_fails('csv-sales-report', 'snapshot_status', 500)
  end)

  it('stops with a clear error naming DAYTONA_API_KEY when it is missing', function()
    runner.check_missing_key('DAYTONA_API_KEY', 'DAYTONA_API_URL') -- and no request was made
  end)
end)
