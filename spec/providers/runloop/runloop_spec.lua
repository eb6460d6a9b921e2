-- The Runloop adapter (lua/providers/runloop.lua):
--   * lifecycles and faults against the stateful fake (spec/providers/runloop/fake.lua), whose devboxes
--     really run commands (bubblewrap) and whose long polls end with 408;
--   * the runner end to end on the fake (`cseng run --provider runloop`, cold and warm, every
--     bundled task), a kill -9 mid-run then `cseng cleanup --provider runloop`, and the startup
--     arena on the vercel and runloop fakes together.
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local runloop = require('providers.runloop')
local runloop_wire = require('providers.shared.runloop_wire')

local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('runloop')
local labels, tar_of = vendor.labeller('cseng@spec'), vendor.tar_of

local UNSET = { RUNLOOP_API_KEY = false, RUNLOOP_BASE_URL = false, RUNLOOP_SNAPSHOT_ID = false,
                RUNLOOP_BLUEPRINT_ID = false, RUNLOOP_BLUEPRINT_NAME = false }

describe('runloop lifecycle (stateful fake)', function()
  local f
  before_each(function() f = fake.start {} end)
  after_each(function() f.close() end)

  it('creates a devbox, waits until it runs, runs real commands, moves files and shuts it down', function()
    f.set { boot = 1, long_poll = 0.1 } -- the first waits end with 408: asked again
    local client = runloop.connect(f.config())
    local sb = assert(runloop.create(client, { labels = labels('life'), env = { GREETING = 'hello world' },
                                               workdir = '/workspace', cpus = 2, memory_mb = 4096, ttl_seconds = 1900 }))
    assert.matches('^dbx_', sb.id)
    assert.equal('running', sb.status)
    assert.is_number(sb.http_timings.ttfb)
    local s = f.stats()
    assert.is_true(s.timeouts >= 1, 'a wait_for_status ended with 408 and was asked again')
    local body = s.last_create
    assert.same({ keep_alive_time_seconds = 1900, resource_size_request = 'MEDIUM',
                  user_parameters = { username = 'root', uid = 0 } }, body.launch_parameters)
    assert.equal('life', body.metadata['cseng.run'])
    assert.equal('cseng@spec', body.metadata['cseng.launcher'])
    assert.equal('task-a', body.metadata['cseng.task'])
    assert.same({ GREETING = 'hello world' }, body.environment_variables)
    assert.is_nil(body.snapshot_id)

    local r = assert(runloop.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.equal(7, r.code)
    assert.equal('out\n', r.stdout)
    assert.equal('err\n', r.stderr)
    assert.is_false(r.timed_out)
    assert.matches('^exe_', r.execution_id)
    local e = f.stats().last_exec
    assert.matches('^%x+%-%x+%-7%x+%-[89ab]%x+%-%x+$', e.command_id) -- a UUIDv7, as the SDK makes one
    assert.matches("^cd /workspace && exec env 'GREETING=hello world' timeout %-s KILL 600 bash %-c ", e.command)
    assert.equal(tostring(client.last_n), f.stats().last_exec_query.last_n)
    assert.equal(0, f.stats().no_request_id) -- every POST carried an x-request-id

    r = assert(runloop.exec(client, sb, [[printf '%s|' "a'b" 'c"d' "$GREETING" "$EXTRA"; pwd; id -u]],
      { env = { EXTRA = 'x y' }, cwd = '/tmp' }))
    assert.equal([[a'b|c"d|hello world|x y|/tmp]] .. '\n0\n', r.stdout)
    r = assert(runloop.exec(client, sb, 'cat; exit 3', { stdin = 'piped\n' }))
    assert.equal(3, r.code)
    assert.equal('piped\n', r.stdout)

    -- a command that outlives execute's optimistic wait: wait_for_status until completed
    r = assert(runloop.exec(client, sb, 'sleep 0.5; echo late', { timeout = 30 }))
    assert.equal('late\n', r.stdout)
    assert.equal(0, r.code)

    assert(runloop.put(client, sb, '/tests', tar_of({ ['test.sh'] = 'echo tested; exit 0\n' }, 'tar')))
    local bin = crypto.random_bytes(90000) .. '\0\255'
    assert(runloop.put(client, sb, '/data', tar_of { ['blob.bin'] = bin }))
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(runloop.get(client, sb, '/data/blob.bin'))))
    r = assert(runloop.exec(client, sb, 'bash /tests/test.sh', { cwd = '/' }))
    assert.equal('tested\n', r.stdout)
    local none, msg, code = runloop.get(client, sb, '/no/such/file')
    assert.is_nil(none)
    assert.equal('ENOENT', code)
    assert.matches('/no/such/file', msg)

    -- long output: the API's last_n lines, then our tail
    r = assert(runloop.exec(client, sb, 'for i in $(seq 1 3000); do echo line-$i; done', { tail_bytes = 100 }))
    assert.equal(100, #r.stdout)
    assert.matches('line%-3000\n$', r.stdout)

    assert.is_true(runloop.destroy(client, sb))
    s = f.stats()
    assert.equal(1, s.creates)
    assert.equal(1, s.deletes)
    assert.equal(0, s.live)
    assert.same({}, f.live_devboxes())
    assert.equal('api_shutdown', f.devbox(sb.id).shutdown_reason)
    assert.is_true(s.uploads >= 3 and s.downloads >= 2)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)

  it('kills a command at its timeout (the wrapper), and past the deadline through the kill call', function()
    local client = runloop.connect(f.config())
    local sb = assert(runloop.create(client, {}))
    local r = assert(runloop.exec(client, sb, 'echo started; sleep 30; echo never', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.equal(124, r.code)
    assert.equal('started\n', r.stdout)
    r = assert(runloop.exec(client, sb, 'exit 137', { timeout = 30 }))
    assert.is_false(r.timed_out)
    assert.equal(137, r.code)
    -- the adapter's own deadline before the wrapper's: the execution is killed through the API
    f.set { long_poll = 0.2 }
    local hasty = runloop.connect(f.config { grace = -25 })
    r = assert(runloop.exec(hasty, sb, 'sleep 60', { timeout = 26 }))
    assert.is_true(r.timed_out)
    assert.equal(124, r.code)
    assert.equal(1, f.stats().kills)
    local d = f.devbox(sb.id)
    local killed = d.execs[#d.execs]
    assert.equal('completed', killed.status)
    assert.equal(137, killed.exit)
    assert(runloop.destroy(client, sb))
  end)

  it('shuts down a devbox that fails to boot and reports EBOOT', function()
    f.set { boot_fail = 'execution_failed' }
    local client = runloop.connect(f.config())
    local sb, msg, code = runloop.create(client, { labels = labels('boot') })
    assert.is_nil(sb)
    assert.equal('EBOOT', code)
    assert.matches('failure %(execution_failed%)', msg)
    assert.same({}, f.live_devboxes())
    assert.equal(1, f.stats().deletes) -- the adapter tried to shut it down (400: not running; GET: failure)
  end)

  it("records the create call's HTTP timings (a slow create)", function()
    local client, sb = vendor.slow_create(runloop, f)
    assert(runloop.destroy(client, sb))
  end)

  it('maps 401 to HTTP_401 without leaking the key', function()
    local bad = runloop.connect(f.config { api_key = 'wrong-key-123456' })
    local sb, msg, code = runloop.create(bad, {})
    assert.is_nil(sb)
    assert.equal('HTTP_401', code)
    assert.matches('HTTP 401: Unauthorized', msg)
    assert.is_nil(msg:find('wrong-key-123456', 1, true))
    assert.equal(0, f.stats().created)
  end)

  it('reports a failing shutdown (500) and treats a shut down or unknown devbox as destroyed', function()
    vendor.check_destroy(runloop, f)
    local client = runloop.connect(f.config())
    local sb = assert(runloop.create(client, {}))
    assert(runloop.destroy(client, sb))
    local r, _, code = runloop.exec(client, sb, 'true')
    assert.is_nil(r)
    assert.equal('HTTP_400', code) -- commands on a devbox that is shut down
  end)

  it('lists live devboxes by metadata across pages (filtered here: the API has no metadata filter)', function()
    f.set { page_size = 2 }
    local client = runloop.connect(f.config())
    local mine, theirs = {}, {}
    for i = 1, 3 do mine[i] = assert(runloop.create(client, { labels = labels('run-A', 't' .. i) })) end
    for i = 1, 2 do theirs[i] = assert(runloop.create(client, { labels = labels('run-B', 't' .. i) })) end
    local lists0 = f.stats().lists
    local found = assert(runloop.list(client, { labels = { ['cseng.run'] = 'run-A' } }))
    assert.same(vendor.sorted_ids(mine), vendor.sorted_ids(found))
    assert.equal(3, f.stats().lists - lists0) -- 5 devboxes, pages of 2
    assert.equal('run-A', found[1].labels['cseng.run'])
    assert.is_number(found[1].created)
    assert.equal(5, #assert(runloop.list(client, {})))
    assert(runloop.destroy(client, mine[1]))
    assert.equal(2, #assert(runloop.list(client, { labels = { ['cseng.run'] = 'run-A' } }))) -- shut down: not listed
    for i = 2, 3 do assert(runloop.destroy(client, mine[i])) end
    for _, sb in ipairs(theirs) do assert(runloop.destroy(client, sb)) end
  end)

  it('snapshots a prepared devbox, creates from the snapshot, finds it again by key (warm)', function()
    f.set { snapshot_delay = 1.2 } -- in progress for a while: the status is polled
    local client = runloop.connect(f.config())
    local sb = assert(runloop.create(client, {}))
    assert.equal(0, assert(runloop.exec(client, sb, 'mkdir -p /workspace && echo warm > /workspace/state')).code)
    assert.is_nil(runloop.find_artifact(client, 'key-1'))
    local snap = assert(runloop.snapshot(client, sb, 'key-1'))
    assert.matches('^snp_', snap)
    assert.equal('complete', assert(runloop_wire.snapshot_status(client, snap)).status)
    assert(runloop.destroy(client, sb))
    local sb2 = assert(runloop.create(client, { warm_artifact = snap }))
    assert.equal(snap, f.stats().last_create.snapshot_id)
    assert.equal('warm\n', assert(runloop.get(client, sb2, '/workspace/state')))
    assert(runloop.destroy(client, sb2))
    assert.equal(snap, runloop.find_artifact(client, 'key-1'))
    assert.is_nil(runloop.find_artifact(client, 'key-2'))
    assert.is_true(runloop.delete_artifact(client, snap))
    assert.is_true(runloop.delete_artifact(client, snap)) -- already gone
    assert.is_nil(runloop.find_artifact(client, 'key-1'))
    -- a snapshot that fails
    f.set { snapshot_fail = 'disk full', snapshot_delay = 0.05 }
    local sb3 = assert(runloop.create(client, {}))
    local id, msg, code = runloop.snapshot(client, sb3, 'key-3')
    assert.is_nil(id)
    assert.equal('ESNAPSHOT', code)
    assert.matches('disk full', msg)
    assert(runloop.destroy(client, sb3))
  end)

  it('names the missing key in one line, and reads its rates as settings', function()
    vendor.check_names_credential(runloop, 'RUNLOOP_API_KEY')
    local env = { RUNLOOP_API_KEY = 'k', RUNLOOP_VCPU_S = '0.5' }
    local c = runloop.connect { getenv = function(k) return env[k] end }
    assert.equal('https://api.runloop.ai', c.base) -- the vendor's default base URL
    assert.equal(0.5, runloop.rates.vcpu_s)
    assert.is_number(runloop.rates.gib_s)
    env.RUNLOOP_VCPU_S = 'cheap'
    local ok, e = pcall(runloop.connect, { getenv = function(k) return env[k] end })
    assert.is_false(ok)
    assert.matches('vcpu_s must be a number, not cheap', e)
    env.RUNLOOP_VCPU_S = nil
    runloop.connect { getenv = function(k) return env[k] end }
    assert.equal(0.00003, runloop.rates.vcpu_s)
    ok, e = pcall(runloop.connect, { getenv = function(k) return env[k] end, resource_size = 'HUGE' })
    assert.is_false(ok)
    assert.matches('resource_size HUGE is not one of', e)
  end)
end)

describe('the runner on the runloop fake', function()
  local runner = vendor.runner(fake, 'runloop', UNSET)
  setup(runner.start)
  teardown(runner.stop)

  it('passes a bundled task with gold (the fake really runs it) and fails it with nop', function()
    runner.check_gold_then_nop('bash-template-render', function(s, before)
      assert.is_true(s.execs - before.execs >= 4)
      assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    end)
  end)

  it('passes a bundled task warm from a disk snapshot, reused by a second run', function()
    runner.check_warm('bash-template-render', 'snapshots')
  end)

  it('reports a failing snapshot as a build error, with nothing left live', function()
    runner.check_warm_snapshot_fails('csv-sales-report', 'snapshot_status', 500)
  end)

  it('stops with a clear error naming RUNLOOP_API_KEY when it is missing', function()
    runner.check_missing_key('RUNLOOP_API_KEY', 'RUNLOOP_BASE_URL')
  end)

  it('passes the covering tasks (every kind of environment and file) with gold cold and warm; they score 0 with nop', function()
    runner.check_covering_tasks { 'cold', 'warm' }
    assert.same({}, runner.f.live_devboxes())
  end)

  it('cleanup --provider runloop shuts down what a kill -9 left behind (found by metadata)', function()
    local out = assert(fs.tempdir('cseng-rl-kill-'))
    fs.write(out .. '/solver.sh', 'sleep 120\n')
    local env_file = runner.env_file()
    local p = assert(proc.spawn { argv = { vendor.ROOT .. '/cseng', 'run', 'plans/cold-gold.lua', '--provider', 'runloop',
      '--task-limit', '2', '--concurrency', '2', '--solver', 'command', '--solve-command-file', out .. '/solver.sh',
      '--output', out .. '/run.json', '--quiet', '--env-file', env_file }, cwd = vendor.ROOT, env_add = UNSET })
    finally(function()
      p:close()
      local c = runloop.connect(runner.f.config())
      for _, d in ipairs(runloop.list(c, {}) or {}) do runloop.destroy(c, d) end
      fs.remove_tree(out)
    end)
    -- wait (bounded, not a verdict) for both trials' devboxes to be running the solver
    local run_id
    for _ = 1, 1200 do
      for line in (fs.read(out .. '/run.jsonl') or ''):gmatch('[^\n]+') do
        local e = cjson.decode(line)
        if e.event == 'run_started' then run_id = e.run_id end
      end
      if run_id and #runner.f.live_devboxes() >= 2 then break end
      task.sleep(0.1)
    end
    assert.is_string(run_id)
    assert.equal(2, #runner.f.live_devboxes())
    p:kill('KILL')
    p:wait(10)
    assert.equal(2, #runner.f.live_devboxes()) -- left behind
    local r = assert(proc.run { argv = { vendor.ROOT .. '/cseng', 'cleanup', '--provider', 'runloop', '--run', run_id,
      '--env-file', env_file }, cwd = vendor.ROOT, env_add = UNSET, timeout = 120 })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches('2 destroyed, 0 failed', r.stdout)
    assert.same({}, runner.f.live_devboxes()) -- 0 live devboxes on the fake
    assert.equal(0, runner.f.stats().live)
  end)
end)

describe('the startup arena on the vercel and runloop fakes', function()
  it('runs plans/startup.lua --providers vercel,runloop: every trial ok, every sandbox destroyed', function()
    local vf = require('spec.fakes').module('vercel').start {}
    local rf = fake.start {}
    local out = assert(fs.tempdir('cseng-arena-vr-'))
    finally(function() vf.close(); rf.close(); fs.remove_tree(out) end)
    local lines = {}
    for k, v in pairs(vf.env()) do lines[#lines + 1] = k .. '=' .. v end
    for k, v in pairs(rf.env()) do lines[#lines + 1] = k .. '=' .. v end
    assert(fs.write(out .. '/fakes.env', table.concat(lines, '\n') .. '\n'))
    local unset = { VERCEL_TOKEN = false, VERCEL_ACCESS_TOKEN = false, VERCEL_API_KEY = false, VERCEL_OIDC_TOKEN = false,
                    VERCEL_TEAM_ID = false, VERCEL_PROJECT_ID = false, VERCEL_API_URL = false, VERCEL_SNAPSHOT_ID = false }
    for k, v in pairs(UNSET) do unset[k] = v end
    local r = assert(proc.run { argv = { vendor.ROOT .. '/cseng', 'run', 'plans/startup.lua', '--providers', 'vercel,runloop',
      '--samples', '4', '--warmups', '1', '--env-file', out .. '/fakes.env', '--output', out .. '/arena.jsonl' },
      cwd = vendor.ROOT, env_add = unset, timeout = 600 })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    local trials = {}
    for line in assert(fs.read(out .. '/arena.jsonl')):gmatch('[^\n]+') do
      local e = cjson.decode(line)
      if e.event == 'startup_trial' then trials[#trials + 1] = e end
    end
    assert.equal(2 * (4 + 1), #trials)
    local by = { vercel = 0, runloop = 0 }
    for _, t in ipairs(trials) do
      assert.is_true(t.ok, t.provider .. ': ' .. tostring(t.error))
      assert.is_true(t.cleanup_ok, t.provider)
      by[t.provider] = by[t.provider] + 1
    end
    assert.same({ vercel = 5, runloop = 5 }, by)
    for _, f in ipairs({ vf, rf }) do
      local s = f.stats()
      assert.equal(5, s.creates)
      assert.equal(5, s.destroyed)
      assert.equal(0, s.live)
    end
    assert.same({}, rf.live_devboxes())
  end)
end)
