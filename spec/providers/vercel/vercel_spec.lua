-- The Vercel adapter (lua/providers/vercel.lua):
--   * lifecycles and faults against the stateful fake (spec/providers/vercel/fake.lua), whose sandboxes
--     really run commands (bubblewrap) and whose command API streams NDJSON;
--   * the runner end to end on the fake (`cseng run --provider vercel`), a missing credential,
--     and no token in the results files.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local vercel = require('providers.vercel')
local vercel_wire = require('providers.shared.vercel_wire')

local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('vercel')
local labels, tar_of = vendor.labeller('cseng@spec'), vendor.tar_of

describe('vercel lifecycle (stateful fake)', function()
  local f
  before_each(function() f = fake.start {} end)
  after_each(function() f.close() end)

  it('creates, runs real commands, moves files and destroys', function()
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, { labels = labels('life'), env = { GREETING = 'hello world' },
                                              workdir = '/workspace', cpus = 1.5, ttl_seconds = 1900 }))
    assert.matches('^sess_', sb.id) -- the session: what commands and stop take
    assert.matches('^sbx_', sb.name)
    assert.is_number(sb.http_timings.ttfb)
    local body = f.stats().last_create
    assert.equal('v2', f.stats().last_create_version) -- a runtime: POST /v2/sandboxes, as the SDK does
    local tags = body.tags
    body.tags = nil
    assert.same({ projectId = f.project_id, runtime = 'python3.13', resources = { vcpus = 2 }, timeout = 1900000,
                  persistent = false, ports = {} }, body)
    assert.equal('life', tags['cseng.run'])
    assert.equal('cseng@spec', tags['cseng.launcher'])

    local r = assert(vercel.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.equal(7, r.code)
    assert.equal('out\n', r.stdout)
    assert.equal('err\n', r.stderr)
    assert.is_false(r.timed_out)
    assert.is_string(r.cmd_id)
    local e = f.stats().last_exec
    assert.equal('bash', e.command)
    assert.equal('-c', e.args[1])
    assert.is_true(e.sudo)
    assert.is_true(e.wait)
    assert.is_true(e.logs) -- output comes on the same stream
    assert.equal((600 + 30) * 1000, e.timeout) -- the server-side backstop, past the wrapper's own
    assert.equal('/workspace', e.cwd)
    assert.equal('hello world', e.env.GREETING)

    r = assert(vercel.exec(client, sb, [[printf '%s|' "a'b" 'c"d' "$GREETING" "$EXTRA"; pwd]],
      { env = { EXTRA = 'x y' }, cwd = '/tmp' }))
    assert.equal([[a'b|c"d|hello world|x y|/tmp]] .. '\n', r.stdout)
    r = assert(vercel.exec(client, sb, 'cat; exit 3', { stdin = 'piped\n' }))
    assert.equal(3, r.code)
    assert.equal('piped\n', r.stdout)

    -- state persists; put (tar and tar.gz, binary, several chunks) and get
    assert(vercel.put(client, sb, '/tests', tar_of({ ['test.sh'] = 'echo tested; exit 0\n' }, 'tar')))
    local bin = crypto.random_bytes(90000) .. '\0\255'
    assert(vercel.put(client, sb, '/data', tar_of { ['blob.bin'] = bin }))
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(vercel.get(client, sb, '/data/blob.bin'))))
    r = assert(vercel.exec(client, sb, 'bash /tests/test.sh', { cwd = '/' }))
    assert.equal('tested\n', r.stdout)
    local none, msg, code = vercel.get(client, sb, '/no/such/file')
    assert.is_nil(none)
    assert.equal('ENOENT', code)
    assert.matches('/no/such/file', msg)
    assert.equal('', assert(vercel.get(client, sb, '/dev/null'))) -- empty is not missing

    -- large output is kept as a tail
    r = assert(vercel.exec(client, sb, 'head -c 300000 /dev/zero | tr "\\0" x; echo END', { tail_bytes = 1000 }))
    assert.equal(1000, #r.stdout)
    assert.matches('END\n$', r.stdout)
    assert.equal(300004 - 1000, r.stdout_dropped)

    assert.is_true(vercel.destroy(client, sb))
    local s = f.stats()
    assert.equal(1, s.creates)
    assert.equal(1, s.deletes)
    assert.equal(0, s.live)
    assert.equal(0, s.logs) -- logs:true puts the output on the command stream: no logs call
    assert.is_true(s.writes >= 3) -- stdin, and each put, went through fs/write
    assert.is_true(s.reads >= 2)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    -- the stop answer's usage is kept on sb
    assert.is_number(sb.usage.active_cpu_ms)
  end)

  it('fails with EPROTO on an error line in the command stream, and with HTTP_<status> on a refused command', function()
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, {}))
    f.set { stream_error = { code = 'sandbox_error', message = 'the VM went away' } }
    local r, msg, code = vercel.exec(client, sb, 'echo hi')
    assert.is_nil(r)
    assert.equal('EPROTO', code)
    assert.matches('sandbox_error: the VM went away', msg, 1, true)
    f.set { stream_error = false, exec_status = 503 }
    r, msg, code = vercel.exec(client, sb, 'true')
    assert.is_nil(r)
    assert.equal('HTTP_503', code)
    assert.matches('forced failure 503', msg)
    f.set { exec_status = false }
    assert(vercel.destroy(client, sb))
  end)

  it('kills a command at its timeout and reports timed_out', function()
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, {}))
    local r = assert(vercel.exec(client, sb, 'echo started; sleep 30; echo never', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.equal(124, r.code)
    assert.equal('started\n', r.stdout)
    assert.is_true(r.elapsed >= 1 and r.elapsed < 10, tostring(r.elapsed))
    assert.matches('^exec timeout %-s KILL 1 bash %-c ', f.stats().last_exec.args[2])
    -- a command that exits 137 on its own before the deadline is not a timeout
    r = assert(vercel.exec(client, sb, 'exit 137', { timeout = 30 }))
    assert.is_false(r.timed_out)
    assert.equal(137, r.code)
    assert(vercel.destroy(client, sb))
  end)

  it('fails with the transport code when the command stream outlives the request', function()
    local client = vercel.connect(f.config { stream_grace = 0.5 })
    local sb = assert(vercel.create(client, {}))
    f.set { stall = 5 }
    local r, msg, code = vercel.exec(client, sb, 'true', { timeout = 1 })
    assert.is_nil(r)
    assert.equal('ETIMEDOUT', code, tostring(msg))
    f.set { stall = false }
    assert(vercel.destroy(client, sb))
  end)

  it("records the create call's HTTP timings (a slow create)", function()
    local client, sb = vendor.slow_create(vercel, f)
    assert(vercel.destroy(client, sb))
  end)

  it('maps 401 on create to HTTP_401 without leaking the token', function()
    local _, msg = vendor.refused_create(vercel, f, f.token, { token = 'wrong-token-123456' })
    assert.matches('HTTP 401: Not authorized', msg)
    local other = vercel.connect(f.config { team_id = 'team_other' })
    local _, _, code3 = vercel.create(other, {})
    assert.equal('HTTP_403', code3)
    assert.equal(0, f.stats().created)
  end)

  it('reports a failing stop (500) and treats a stopped or unknown sandbox as destroyed', function()
    vendor.check_destroy(vercel, f)
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, {}))
    assert(vercel.destroy(client, sb))
    local r, _, code = vercel.exec(client, sb, 'true')
    assert.is_nil(r)
    assert.equal('HTTP_410', code) -- commands on a stopped session
  end)

  it("lists the project's running sandboxes by tag across pages (the filter sent as tags=key:value)", function()
    vendor.check_list_pages(vercel, f, labels, 'run-A', 'last_list_filter')
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, { labels = labels('run-C', 't1') }))
    local found = assert(vercel.list(client, { labels = { ['cseng.run'] = 'run-C' } }))
    assert.equal(1, #found)
    assert.equal(sb.id, found[1].id) -- the current session: what destroy takes
    assert.equal('run-C', found[1].labels['cseng.run'])
    assert.is_number(found[1].created)
    -- a second label is checked on the answer's tags
    assert.same({}, assert(vercel.list(client, { labels = { ['cseng.run'] = 'run-C', ['cseng.task'] = 'other' } })))
    assert(vercel.destroy(client, sb))
    assert.same({}, assert(vercel.list(client, { labels = { ['cseng.run'] = 'run-C' } }))) -- stopped: not listed
  end)

  it('snapshots a prepared sandbox and creates from the snapshot (warm)', function()
    local client = vercel.connect(f.config())
    local sb = assert(vercel.create(client, {}))
    assert.equal(0, assert(vercel.exec(client, sb, 'mkdir -p /workspace && echo warm > /workspace/state')).code)
    local snap = assert(vercel.snapshot(client, sb, 'key-1'))
    assert.matches('^snap_', snap)
    assert.equal(0, f.stats().live) -- the snapshot stopped it
    assert.is_true(vercel.destroy(client, sb))
    local sb2 = assert(vercel.create(client, { warm_artifact = snap }))
    assert.same({ type = 'snapshot', snapshotId = snap }, f.stats().last_create.source)
    assert.equal('v3', f.stats().last_create_version) -- a snapshot source takes no runtime: /v3, as the SDK does
    assert.is_nil(f.stats().last_create.runtime)
    assert.equal('warm\n', assert(vercel.get(client, sb2, '/workspace/state')))
    assert(vercel.destroy(client, sb2))
    assert.equal('created', assert(vercel_wire.get_snapshot(client, snap)).status)
    assert.is_true(vercel.delete_artifact(client, snap))
    assert.is_true(vercel.delete_artifact(client, snap)) -- already gone
    assert.is_nil(f.snapshots()[snap])
    local _, _, code = vercel.create(client, { warm_artifact = snap })
    assert.equal('HTTP_404', code)
  end)

  it('names every missing credential in one line', function()
    local ok, e = pcall(vercel.connect, { getenv = function() return nil end })
    assert.is_false(ok)
    for _, v in ipairs({ 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN',
                         'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID' }) do
      assert.matches(v, e, 1, true)
    end
    assert.not_matches('\n', e)
    -- any one of the token variables will do
    local env = { VERCEL_OIDC_TOKEN = 'oidc-x', VERCEL_TEAM_ID = 't', VERCEL_PROJECT_ID = 'p' }
    local c = vercel.connect { getenv = function(k) return env[k] end }
    assert.equal('oidc-x', c.token)
    env.VERCEL_API_KEY = 'key-x'
    assert.equal('key-x', vercel.connect({ getenv = function(k) return env[k] end }).token)
  end)
end)

describe('the runner on the vercel fake', function()
  local runner = vendor.runner(fake, 'vercel', {
    VERCEL_TOKEN = false, VERCEL_ACCESS_TOKEN = false, VERCEL_API_KEY = false, VERCEL_OIDC_TOKEN = false,
    VERCEL_TEAM_ID = false, VERCEL_PROJECT_ID = false, VERCEL_API_URL = false, VERCEL_SNAPSHOT_ID = false,
  })
  setup(runner.start)
  teardown(runner.stop)

  it('passes a bundled task with gold (the fake really runs it) and fails it with nop', function()
    local index = 'bash-template-render'
    runner.check_gold_then_nop(index, function(s, before)
      assert.is_true(s.execs - before.execs >= 4)
      assert.is_true(s.writes - before.writes >= 1)
      assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    end)
  end)

  it('passes a bundled task warm, from a snapshot made once and then reused', function()
    local before = runner.f.stats()
    local out = runner.tmp .. '/warm'
    local r = require('cseng.proc').run { argv = { vendor.ROOT .. '/cseng', 'run', 'plans/warm-gold.lua', '--provider',
      'vercel', '--output', out, '--quiet', '--env-file', runner.env_file(), '--task-limit', '1',
      '--task-index', tostring(vendor.smoke_index('bash-template-render')) },
      cwd = vendor.ROOT, timeout = 600, env_add = { VERCEL_TOKEN = false, VERCEL_SNAPSHOT_ID = false } }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local summary
    for _, name in ipairs(fs.list(out) or {}) do
      if name:match('%.json$') then summary = require('cjson').decode((assert(fs.read(out .. '/' .. name)))) end
    end
    assert.equal(1, summary.passed, require('cseng.lib.jsonl').encode(summary))
    local s = runner.f.stats()
    assert.equal(1, s.snapshots - before.snapshots)
    assert.equal('snapshot', s.last_create.source.type) -- the trial started from it
    assert.equal(0, s.live)
  end)

  it('passes the covering tasks (every kind of environment and file) with gold cold and warm; they score 0 with nop', function()
    runner.check_covering_tasks { 'cold', 'warm' }
    local s = runner.f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)

  it('stops with a clear error naming the token variables when none is set', function()
    runner.check_missing_key('VERCEL_TOKEN', 'VERCEL_API_URL')
  end)

  it('writes no token into the results files', function()
    local out = runner.tmp .. '/tokcheck'
    local r = require('cseng.proc').run { argv = { vendor.ROOT .. '/cseng', 'run', 'plans/cold-gold.lua', '--provider',
      'vercel', '--output', out, '--quiet', '--env-file', runner.env_file(), '--task-limit', '1',
      '--task-index', tostring(vendor.smoke_index('bash-template-render')) },
      cwd = vendor.ROOT, timeout = 600, env_add = { VERCEL_TOKEN = false } }
    assert.equal(0, r.code, r.stderr)
    local n = 0
    for _, name in ipairs(fs.list(out) or {}) do
      local data = fs.read(out .. '/' .. name)
      if data then
        n = n + 1
        assert.is_nil(data:find(runner.f.token, 1, true), name)
      end
    end
    assert.is_true(n >= 1)
  end)
end)
