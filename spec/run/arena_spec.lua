-- The startup arena (lua/cseng/run/kinds/startup.lua) against the stateful Lizard fake (spec/providers/lizard/fake.lua):
-- exact call counts at the fake, the records in the log, the stop rules, the status endpoint,
-- Ctrl-C, the report; plus the lizard adapter itself and a short real run on the local provider.
local arena = require('cseng.run.kinds.startup')
local results = require('cseng.results.log')
local stats = require('cseng.lib.stats')
local lizard = require('providers.lizard')
local task = require('cseng.task')
local http = require('cseng.http')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)
local sys = require('cseng.sys')
local cjson = require('cjson')

local fake = require('spec.fakes').module('lizard')

-- ---- helpers --------------------------------------------------------------------------

local function start_fakes(switches)
  local fakes, config = {}, {}
  for name, sw in pairs(switches) do
    fakes[name] = fake.start(sw)
    config[name] = fakes[name].config()
    A.started(fakes[name])
  end
  return fakes, config
end

local function run_arena(opts) return A.run(opts, 'arena-spec-') end
local assert_accounted, measured = A.assert_accounted, A.measured

local function orders(by)
  local out = {}
  for _, r in ipairs(by.round) do out[#out + 1] = r.phase .. ':' .. table.concat(r.order, ',') end
  return out
end

-- Exact counters, tap.lua style: every listed counter must match, and nothing unexpected happened.
local function assert_counts(f, want)
  local s = f.stats()
  for k, v in pairs(want) do
    assert(s[k] == v, string.format('fake counter %s: expected %s, got %s (requests: %s)', k, tostring(v),
      tostring(s[k]), table.concat(s.requests, '; ')))
  end
  assert.equal(0, s.unknown, 'requests to unknown routes')
  assert.equal(0, s.bad_requests, 'malformed requests')
end

teardown(A.close_fakes)

-- ---- the arena against the fake --------------------------------------------------------

describe('arena: a clean run against three fakes', function()
  local fakes, status, by, errtext, last
  local shared = {}
  setup(function()
    local config
    local create = { create = 0.05 }
    fakes, config = start_fakes {
      a = { latency = create, shared = shared }, b = { latency = create, shared = shared },
      c = { latency = create, shared = shared },
    }
    status, by, errtext, last = run_arena { providers = { 'c', 'a', 'b' }, provider_config = config,
      samples = 4, warmups = 2, seed = 11 }
  end)

  it('finishes with status 0 and a run_finished record', function()
    assert.equal(0, status, errtext)
    assert.equal(1, #by.run_finished)
    assert.equal('finished', by.run_finished[1].status)
    assert.same({ warmup = 2, measured = 4 }, by.run_finished[1].rounds_done)
  end)

  it('asks each fake exactly what it should: 6 creates, 6 readiness execs + 6 audits + 1 probe, 6 deletes, 1 sweep', function()
    for _, name in ipairs({ 'a', 'b', 'c' }) do
      -- the list is the run frame's end-of-run sweep for creates whose answer was lost
      assert_counts(fakes[name], { creates = 6, created = 6, execs = 13, deletes = 6, destroyed = 6, live = 0,
        max_live = 1, lists = 1, unauthorized = 0 })
    end
  end)

  it('runs providers in parallel: the three creates of a round are in flight at once', function()
    assert.equal(3, shared.max_in_flight)
    assert.equal(0, shared.in_flight)
  end)

  it('records every trial with its metrics; warmups are marked', function()
    assert.equal(18, #by.startup_trial)
    assert.equal(12, #measured(by))
    local w = 0
    for _, t in ipairs(by.startup_trial) do
      if t.warmup then w = w + 1; assert.equal('warmup', t.phase) end
      assert.is_true(t.ok)
      assert.is_true(t.create_ms >= 50, 'create_ms includes the fake latency')
      assert.is_true(t.first_exec_ms > 0)
      assert.equal(t.create_ms + t.first_exec_ms, t.ready_ms)
      assert.is_true(t.stall_ms >= 0 and t.stall_ms < t.ready_ms)
      assert.is_true(t.cleanup_ms > 0)
      assert.is_true(t.cleanup_ok)
      assert.equal(1, t.cleanup_attempts)
      assert.is_number(t.http.ttfb_ms)
      assert.is_number(t.http.total_ms)
      assert.is_true(t.http.ttfb_ms >= 50)
      assert.equal(t.provider, t.order[t.position])
      assert.matches('^lz%-', t.sandbox_id)
    end
    assert.equal(6, w)
    assert_accounted(by)
  end)

  it('writes allocation records before anything else touches the sandbox', function()
    local seen_alloc = {}
    local events = results.read(last.jsonl)
    for _, e in ipairs(events) do
      if e.event == 'allocated' then seen_alloc[e.sandbox_id] = true end
      if e.event == 'destroyed' or e.event == 'environment' or e.event == 'startup_trial' then
        assert.is_true(seen_alloc[e.sandbox_id] == true, e.event .. ' before allocated for ' .. tostring(e.sandbox_id))
      end
    end
  end)

  it('records the environment and the allocation on the first warmup of each provider', function()
    assert.equal(3, #by.environment)
    for _, e in ipairs(by.environment) do
      assert.equal('warmup', e.phase)
      assert.equal(1, e.round)
      assert.equal('3.12.7', e.environment.python)
      assert.equal(2, e.environment.cpus)
      assert.equal(2147483648, e.environment.memory_bytes)
      assert.equal(2, e.allocation.cpus)
      assert.equal(2048, e.allocation.memory_mb)
    end
  end)

  it('records engine and adapter versions and the seed', function()
    local s = by.run_started[1]
    assert.equal(11, s.seed)
    assert.same({ 'a', 'b', 'c' }, s.providers)
    assert.equal('lizard', s.adapters.a.adapter)
    assert.equal(lizard.version, s.adapters.a.version)
    assert.matches('^%x+$', s.adapters.a.sha256)
    assert.is_string(s.versions.cseng)
    assert.equal(arena.VERSION, s.arena_version)
    assert.equal(arena.DEFAULT_COMMAND, s.command)
  end)

  it('writes the report with its charts', function()
    local md = assert(fs.read(last.report))
    assert.matches('# Sandbox startup: a vs b vs c', md, 1, true)
    assert.matches('## Pairwise: ratio of medians', md, 1, true)
    assert.matches('| a | 4 | 4 | 100%', md, 1, true)
    local svg_name = md:match('%((startup%-[^)]-%.ready%-ecdf%.svg)%)')
    assert.is_string(svg_name)
    local svg = assert(fs.read(fs.join(fs.dirname(last.report), svg_name)))
    assert.matches('^<svg xmlns="http://www.w3.org/2000/svg"', svg)
    local paths = 0
    for _ in svg:gmatch('<path ') do paths = paths + 1 end
    assert.equal(3, paths)
  end)
end)

describe('arena: round orders', function()
  local o1, by1, o2, o3
  setup(function()
    local _, config = start_fakes { a = {}, b = {}, c = {}, d = {} }
    local function run_orders(seed, providers)
      local status, by = run_arena { providers = providers, provider_config = config, samples = 6, warmups = 2,
        seed = seed }
      assert.equal(0, status)
      return orders(by), by
    end
    o1, by1 = run_orders(7, { 'a', 'b', 'c', 'd' })
    o2 = run_orders(7, { 'd', 'b', 'a', 'c' })
    o3 = run_orders(8, { 'a', 'b', 'c', 'd' })
  end)

  it('are identical for the same seed, whatever order the providers are listed in', function()
    assert.equal(8, #o1)
    assert.same(o1, o2)
  end)

  it('differ for another seed', function()
    assert.are_not.same(o1, o3)
  end)

  it('are successive shuffles of the sorted names by stats.rng(seed): warmups, then measured', function()
    local rng = stats.rng(7)
    local want = {}
    for i = 1, 8 do
      want[i] = (i <= 2 and 'warmup:' or 'measured:') .. table.concat(stats.shuffle({ 'a', 'b', 'c', 'd' }, rng), ',')
    end
    assert.same(want, o1)
  end)

  it('are recorded in every trial (round, position)', function()
    for _, t in ipairs(by1.startup_trial) do
      local r
      for _, e in ipairs(by1.round) do if e.phase == t.phase and e.round == t.round then r = e end end
      assert.same(r.order, t.order)
      assert.equal(t.provider, r.order[t.position])
    end
  end)
end)

describe('arena: a failure is a measured outcome', function()
  it('is recorded, not retried, and the run goes on', function()
    local fakes, config = start_fakes { a = {}, b = { create_status = function(n) return n == 3 and 503 end } }
    local dir = H.tempdir('arena-report-')
    local status, by = run_arena { providers = { 'a', 'b' }, provider_config = config,
      samples = 4, warmups = 1, seed = 3, report = dir .. '/custom.md' }
    assert.equal(0, status)
    assert.matches('| b | 4 | 3 | 75.0%', assert(fs.read(dir .. '/custom.md')), 1, true)
    assert.is_true(fs.exists(dir .. '/custom.ready-ecdf.svg'))
    assert_counts(fakes.b, { creates = 5, created = 4, deletes = 4, live = 0 })
    assert_counts(fakes.a, { creates = 5, created = 5, deletes = 5, live = 0 })
    local bad = {}
    for _, t in ipairs(measured(by, 'b')) do if not t.ok then bad[#bad + 1] = t end end
    assert.equal(1, #bad)
    assert.equal('create', bad[1].error_stage)
    assert.equal('HTTP_503', bad[1].error_code)
    assert.equal(2, bad[1].round)
    assert.is_nil(bad[1].sandbox_id)
    assert.is_nil(bad[1].ready_ms)
    assert.equal('finished', by.run_finished[1].status)
    assert_accounted(by)
  end)
end)

describe('arena: stop rules', function()
  it('a cleanup failure stops allocation', function()
    -- b's deletes: 1 (warmup) and 2 (round 1) succeed; round 2's three attempts (3, 4, 5) fail
    local fakes, config = start_fakes { a = {}, b = { delete_status = function(n) return n >= 3 and 500 end }, c = {} }
    local status, by, errtext = run_arena { providers = { 'a', 'b', 'c' }, provider_config = config,
      samples = 10,
      warmups = 1, seed = 5 }
    assert.equal(1, status)
    for _, name in ipairs({ 'a', 'c' }) do assert_counts(fakes[name], { creates = 3, deletes = 3, live = 0 }) end
    assert_counts(fakes.b, { creates = 3, created = 3, deletes = 5, destroyed = 2, live = 1 })
    assert.equal(1, #by.cleanup_failed)
    assert.equal(fakes.b.stats().live_ids[1], by.cleanup_failed[1].sandbox_id)
    local fin = by.run_finished[1]
    assert.equal('stopped', fin.status)
    assert.equal('cleanup', fin.stop_reason)
    assert.same({ warmup = 1, measured = 2 }, fin.rounds_done)
    assert.same({ { provider = 'b', sandbox_id = fakes.b.stats().live_ids[1] } }, fin.live_sandboxes)
    assert.matches('failed after 3 attempts', errtext, 1, true)
    assert.matches('cseng cleanup ', errtext, 1, true)
    local t
    for _, x in ipairs(measured(by, 'b')) do if x.round == 2 then t = x end end
    assert.is_true(t.ok, 'readiness passed; only the cleanup failed')
    assert.is_false(t.cleanup_ok)
    assert.equal(3, t.cleanup_attempts)
    assert.equal('HTTP_500', t.cleanup_error_code)
    local closed = assert_accounted(by)
    assert.equal('cleanup_failed', closed['b/' .. t.sandbox_id])
  end)

  it('leaves a log that `cseng cleanup` completes', function()
    local fakes, config = start_fakes { lizard = { delete_status = 500 } }
    local status, by, _, info = run_arena { providers = { 'lizard' }, provider_config = config, samples = 5,
      warmups = 0, seed = 1 }
    assert.equal(1, status)
    assert.equal(1, #by.cleanup_failed)
    assert_counts(fakes.lizard, { creates = 1, deletes = 3, live = 1 })
    fakes.lizard.set { delete_status = false }
    local dir = H.tempdir('arena-cleanup-')
    local c = config.lizard
    assert(fs.write(dir .. '/env', string.format('LIZARD_API_URL=%s\nLIZARD_API_KEY=%s\nLIZARD_PROJECT_ID=%s\n',
      c.api_url, c.api_key, c.project_id)))
    assert.equal(0, require('cseng.cli.commands.cleanup').run({ info.jsonl, '--env-file', dir .. '/env' }))
    assert_counts(fakes.lizard, { creates = 1, deletes = 4, destroyed = 1, live = 0 })
    assert.same({}, results.live_allocations(results.read(info.jsonl)))
  end)

  it('a 401 stops the run after its round', function()
    local fakes, config = start_fakes { a = {}, b = { create_status = function(n) return n == 2 and 401 end } }
    local status, by, errtext = run_arena { providers = { 'a', 'b' }, provider_config = config,
      samples = 10,
      warmups = 1, seed = 5 }
    assert.equal(1, status)
    assert_counts(fakes.a, { creates = 2, deletes = 2, live = 0 })
    assert_counts(fakes.b, { creates = 2, created = 1, deletes = 1, live = 0 })
    assert.equal('auth', by.run_finished[1].stop_reason)
    assert.equal('HTTP_401', by.run_finished[1].stop_code)
    assert.matches('b answered 401', errtext, 1, true)
    assert.equal(2, #measured(by))
    assert_accounted(by)
  end)

  it('a 403 in warmup stops before anything is measured', function()
    local fakes, config = start_fakes { a = {}, b = { create_status = 403 } }
    local status, by = run_arena { providers = { 'a', 'b' }, provider_config = config,
      samples = 10, warmups = 3, seed = 5 }
    assert.equal(1, status)
    assert_counts(fakes.a, { creates = 1, deletes = 1, live = 0 })
    assert_counts(fakes.b, { creates = 1, created = 0, deletes = 0 })
    assert.equal(0, #measured(by))
    assert.equal('HTTP_403', by.run_finished[1].stop_code)
  end)

  it('a wrong API key (401 from every endpoint) stops the run', function()
    local fakes, config = start_fakes { a = {} }
    config.a.api_key = 'wrong-key'
    local status, by = run_arena { providers = { 'a' }, provider_config = config, samples = 10, warmups = 0,
      seed = 5 }
    assert.equal(1, status)
    assert_counts(fakes.a, { creates = 1, created = 0, unauthorized = 1 })
    assert.equal('auth', by.run_finished[1].stop_reason)
    assert.equal(1, #measured(by))
  end)

  it('a warmup readiness failure stops before measurement', function()
    local fakes, config = start_fakes { a = {}, b = { missing_marker = true } }
    local status, by, errtext = run_arena { providers = { 'a', 'b' }, provider_config = config,
      samples = 10,
      warmups = 3, seed = 5 }
    assert.equal(1, status)
    assert.equal(0, #measured(by))
    assert_counts(fakes.a, { creates = 1, deletes = 1, live = 0, execs = 3 })
    assert_counts(fakes.b, { creates = 1, deletes = 1, live = 0, execs = 3 }) -- readiness + the audit + the environment probe
    local fin = by.run_finished[1]
    assert.equal('readiness', fin.stop_reason)
    assert.matches("inspect the template's command support", fin.stop_message:lower(), 1, true)
    assert.matches("Inspect the template's command support", errtext, 1, true)
    local t
    for _, x in ipairs(by.startup_trial) do if x.provider == 'b' then t = x end end
    assert.equal('first_exec', t.error_stage)
    assert.equal('EREADY', t.error_code)
    assert.equal(127, t.exit_code)
    assert.matches('command not found', t.stderr_tail)
    assert_accounted(by)
  end)

  it('a readiness failure after warmup is measured and the run goes on', function()
    local fakes, config = start_fakes { a = {} }
    local n = 0
    fakes.a.set { exec = function(cmd)
      if cmd:find('--version', 1, true) then return 0, '', '' end
      n = n + 1
      if n == 3 then return 0, 'something else\n', '' end
      return 0, 'noise\narena-startup-ready-20261001\n', ''
    end }
    local status, by = run_arena { providers = { 'a' }, provider_config = config, samples = 4, warmups = 1,
      seed = 1 }
    assert.equal(0, status)
    local bad = {}
    for _, t in ipairs(measured(by)) do if not t.ok then bad[#bad + 1] = t end end
    assert.equal(1, #bad)
    assert.equal('EREADY', bad[1].error_code)
    assert.is_nil(bad[1].ready_ms) -- a failure is never a time: how far it got is in its parts
    assert.is_number(bad[1].first_exec_ms)
    assert.equal('failed', bad[1].audit.labels[1]) -- (and audit_failed: this fake's exec answers no audit)
    assert_counts(fakes.a, { creates = 5, deletes = 5, live = 0 })
  end)

  it('a hung call becomes ETIMEDOUT at the trial timeout, and the sandbox is still destroyed', function()
    -- the fourth exec (the warmup ran its first command, the audit and the environment probe) never
    -- answers (600 s): only the timeout can end it, whatever this machine's speed
    local fakes, config = start_fakes { a = { latency = { exec = function(n) return n == 4 and 600 or 0 end } } }
    local status, by = run_arena { providers = { 'a' }, provider_config = config, samples = 2, warmups = 1, seed = 1,
      timeout_seconds = 5 }
    assert.equal(0, status)
    local t = measured(by)[1]
    assert.is_false(t.ok)
    assert.equal('ETIMEDOUT', t.error_code)
    assert.equal('first_exec', t.error_stage)
    assert.is_true(t.cleanup_ok)
    assert_accounted(by)
    assert.equal(0, fakes.a.stats().live)
  end)
end)

describe('arena: status endpoint', function()
  it('serves the run state as JSON on loopback while running, then closes', function()
    local _, config = start_fakes { a = { latency = { create = 0.03 } }, b = { latency = { create = 0.03 } } }
    local url
    local runner_task = task.spawn(run_arena, { providers = { 'a', 'b' }, provider_config = config, samples = 10,
      warmups = 1, seed = 2, status_port = 0, on_start = function(info) url = info.status_url end })
    local waited = 0
    while not url and waited < 100 do task.sleep(0.01); waited = waited + 1 end
    assert.matches('^http://127%.0%.0%.1:%d+/$', url)
    local doc
    for _ = 1, 50 do
      local r = assert(http.request { url = url .. 'status', timeout = 5 })
      assert.equal(200, r.status)
      assert.equal('application/json', r.headers['content-type'])
      doc = cjson.decode(r.body)
      if doc.phase == 'measured' and doc.providers.a.measured > 0 then break end
      task.sleep(0.02)
    end
    assert.equal('measured', doc.phase)
    assert.equal('running', doc.status)
    assert.is_true(doc.round >= 1)
    assert.equal(10, doc.rounds)
    assert.equal(2, doc.seed)
    assert.is_number(doc.providers.a.allocated)
    assert.is_number(doc.providers.b.ok)
    assert.is_table(doc.order)
    local root = assert(http.request { url = url, timeout = 5 })
    assert.equal(200, root.status)
    assert.equal(404, assert(http.request { url = url .. 'nope', timeout = 5 }).status)
    assert.equal(405, assert(http.request { method = 'POST', url = url, body = 'x', timeout = 5 }).status)
    local ok, status = runner_task:join()
    assert.is_true(ok)
    assert.equal(0, status)
    local r, _, code = http.request { url = url, timeout = 5 }
    assert.is_nil(r)
    assert.equal('ECONNREFUSED', code)
  end)
end)

describe('arena: Ctrl-C', function()
  it('stops allocating, destroys the live sandbox, writes its records, exits 130', function()
    local fakes, config = start_fakes { a = { latency = { exec = 0.2 } } }
    local dir = H.tempdir('arena-int-')
    local c = config.a
    local plan_file = dir .. '/plan.lua'
    assert(fs.write(plan_file, string.format([[
local plan = require('cseng.run.plan')
return plan.startup { name = 'int', providers = { 'a' }, samples = 1000, warmups = 0, seed = 1,
  cleanup_backoff = { 0.01, 0.02 }, output = %q,
  provider_config = { a = { adapter = 'lizard', api_url = %q, api_key = %q, project_id = %q } } }
]], dir, c.api_url, c.api_key, c.project_id)))
    local p = assert(proc.spawn { argv = { sys.root() .. '/cseng', 'run', plan_file, '--quiet' },
      stdout = dir .. '/stdout', stderr = dir .. '/stderr' })
    local waited = 0
    -- the 4th exec is the second sample's first command (the first ran its own, the audit, the probe)
    while fakes.a.stats().execs < 4 and waited < 500 do task.sleep(0.01); waited = waited + 1 end
    task.sleep(0.05) -- inside an exec of the fake (200 ms each)
    p:kill('INT')
    local r = assert(p:wait(30))
    assert.equal(130, r.code, r.stderr)
    local logs = {}
    for _, f in ipairs(fs.list(dir)) do if f:match('%.jsonl$') then logs[#logs + 1] = f end end
    assert.equal(1, #logs)
    local by = {}
    for _, e in ipairs(results.read(dir .. '/' .. logs[1])) do
      by[e.event] = by[e.event] or {}
      table.insert(by[e.event], e)
    end
    assert.equal('interrupted', by.run_finished[1].status)
    local s = fakes.a.stats()
    assert.equal(0, s.live)
    assert.equal(s.creates, s.destroyed)
    assert.equal(s.created, #by.allocated)
    assert.equal(#by.allocated, #by.destroyed)
    local last = by.startup_trial[#by.startup_trial]
    assert.is_true(last.interrupted)
    assert.equal('ECANCELED', last.error_code)
    assert.is_true(last.cleanup_ok)
    assert.is_true(fs.exists(dir .. '/' .. logs[1]:gsub('%.jsonl$', '.md')), 'the report is written after an interrupt')
  end)
end)

describe('arena: options', function()
  it('refuses --provider for a startup plan that lists providers', function()
    assert.has_error(function() arena.options({ provider = 'docker', providers = { 'local' } }) end,
      'startup plans compare providers: use --providers docker (the plan lists local)')
  end)

  it('takes --provider alone, dedupes, and draws and records a seed when none is given', function()
    local o = arena.options({ provider = 'local' })
    assert.same({ 'local' }, o.providers)
    assert.equal(300, o.samples)
    assert.equal(3, o.warmups)
    assert.equal('integer', math.type(o.seed))
    assert.is_false(o.seed_given)
    assert.same({ 'a', 'b' }, arena.options({ providers = { 'b', 'a', 'b' } }).providers)
  end)

  it('charges record writes that overlap a measured call to stall_ms', function()
    local run = { k = { stalls = { { 10, 20 }, { 30, 40 }, { 50, 60 } } } }
    assert.equal(0, arena.stall_within(run, 0, 10))
    assert.equal(5, arena.stall_within(run, 15, 25))
    assert.equal(20, arena.stall_within(run, 15, 55)) -- 5 + 10 + 5
    assert.equal(30, arena.stall_within(run, 0, 100))
    assert.equal(0, arena.stall_within(run, 61, 100))
  end)

  it('parses the environment probe output', function()
    local env = arena.parse_environment(table.concat({
      'python=Python 3.11.2', 'cgroup1.cpu.cfs_quota_us=150000', 'cgroup1.cpu.cfs_period_us=100000',
      'cgroup1.memory.limit_in_bytes=9223372036854771712', 'nproc=4', 'meminfo.MemTotal=2048000', 'kernel=6.1', '' },
      '\n'))
    assert.equal('3.11.2', env.python)
    assert.equal(1.5, env.cpus)
    assert.is_nil(env.memory_bytes, 'the v1 "no limit" value')
    assert.equal(4, env.nproc)
    assert.equal(2048000 * 1024, env.mem_total_bytes)
    local v2 = arena.parse_environment('cgroup2.cpu.max=max 100000\ncgroup2.memory.max=max\n')
    assert.is_nil(v2.cpus)
    assert.is_nil(v2.memory_bytes)
    assert.equal('max 100000', v2.cpu_limit)
  end)
end)

describe('arena: every vendor adapter side by side', function()
  it('runs lizard, daytona and e2b (their fakes) and local in one run', function()
    local lz = fake.start { latency = { create = 0.02 } }
    local dt = require('spec.fakes').module('daytona').start {}
    local e2 = require('spec.fakes').module('e2b').start {}
    for _, f in ipairs({ lz, dt, e2 }) do A.started(f) end
    local status, by, errtext = run_arena { providers = { 'lizard', 'daytona', 'e2b', 'local' }, samples = 3,
      warmups = 1, seed = 4, provider_config = { lizard = lz.config(), daytona = dt.config(), e2b = e2.config() } }
    assert.equal(0, status, errtext)
    for _, f in ipairs({ lz, dt, e2 }) do
      local s = f.stats()
      assert.equal(4, s.creates)
      assert.equal(4, s.deletes)
      assert.equal(0, s.live)
    end
    assert.equal(12, #measured(by))
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.ok, t.provider .. ': ' .. tostring(t.error))
      if t.provider ~= 'local' then assert.is_number(t.http.ttfb_ms, t.provider) end
    end
    assert.equal(4, #by.environment)
    for _, e in ipairs(by.environment) do assert.matches('^%d+%.%d+', e.environment.python, 1) end
    assert_accounted(by)
  end)
end)

-- ---- cseng report ------------------------------------------------------------------------

describe('cseng report', function()
  local last
  local report = require('cseng.cli.commands.report')
  setup(function()
    local _, config = start_fakes { a = {}, b = {} }
    _, _, _, last = run_arena { providers = { 'a', 'b' }, provider_config = config, samples = 5, warmups = 1,
      seed = 9 }
  end)

  it('renders a log through the startup template, the same every time', function()
    local dir = H.tempdir('report-spec-')
    assert.equal(0, report.run({ last.jsonl, '--template', 'lua/reports/startup.lua', '-o', dir .. '/one.md' }))
    assert.equal(0, report.run({ last.jsonl, '--template', 'startup', '-o', dir .. '/two.md' }))
    local one, two = assert(fs.read(dir .. '/one.md')), assert(fs.read(dir .. '/two.md'))
    assert.equal((one:gsub('%(one%.', '(X.')), (two:gsub('%(two%.', '(X.')))
    assert.is_true(fs.exists(dir .. '/one.ready-ecdf.svg'))
    assert.is_true(fs.exists(dir .. '/one.ready-box.svg'))
    for _, metric in ipairs({ 'ready_ms', 'create_ms', 'first_exec_ms', 'cleanup_ms' }) do
      assert.matches('**' .. metric, one, 1, true)
    end
    assert.matches('p50 95% CI', one, 1, true)
    assert.matches('HTTP phases of the create call', one, 1, true)
  end)

  it('loads a directory of logs and exposes runs and groups to templates', function()
    local report_load = require('reports.lib.load')
    local data = report_load.load({ fs.dirname(last.jsonl) })
    assert.equal(1, #data.runs)
    assert.equal('startup', data.runs[1].kind)
    assert.equal(12, #data.startup_trials)
    assert.equal(0, #data.trials)
    assert.is_table(data.by_provider.by)
    local dir = H.tempdir('report-tpl-')
    assert(fs.write(dir .. '/t.lua', [[
return function(data, h)
  return h.table({ 'run', 'trials' }, { { data.runs[1].id, #data.startup_trials } })
    .. h.chart('x', h.svg.ecdf({ { name = 'n', values = { 1, 2, 3 } } }))
end]]))
    assert.equal(0, report.run({ fs.dirname(last.jsonl), '--template', dir .. '/t.lua', '-o', dir .. '/t.md' }))
    local md = assert(fs.read(dir .. '/t.md'))
    assert.matches('| ' .. data.runs[1].id .. ' | 12 |', md, 1, true)
    assert.matches('![x](t.x.svg)', md, 1, true)
    assert.is_true(fs.exists(dir .. '/t.x.svg'))
  end)

  it('fails clearly on a missing template or input', function()
    assert.equal(1, report.run({ last.jsonl, '--template', 'nope', '-o', '/tmp/x.md' }))
    assert.equal(1, report.run({ '/nonexistent/run.jsonl' }))
    assert.equal(2, report.run({}))
  end)
end)

-- ---- the lizard adapter ------------------------------------------------------------------

describe('lizard adapter', function()
  it('names every missing variable, with no stack trace', function()
    local ok, err = pcall(lizard.connect, { getenv = function() return nil end })
    assert.is_false(ok)
    assert.equal('lizard provider: LIZARD_API_KEY and LIZARD_PROJECT_ID are not set ' ..
      '(export them, or put them in an --env-file)', err.message)
    assert.equal('ECONFIG', err.code)
    ok, err = pcall(lizard.connect, { getenv = function(k) return k == 'LIZARD_API_KEY' and 'k' or nil end })
    assert.is_false(ok)
    assert.matches('LIZARD_PROJECT_ID is not set', err, 1, true)
  end)

  it('creates, execs, lists and destroys against the fake, with the documented request bodies', function()
    local f = fake.start {}
    A.started(f)
    local env = { LIZARD_API_URL = f.url .. '/', LIZARD_API_KEY = f.api_key, LIZARD_PROJECT_ID = f.project_id }
    local c = lizard.connect { getenv = function(k) return env[k] end }
    assert.equal(f.url, c.base)
    local sb = assert(lizard.create(c, { labels = { x = 'y' } }))
    assert.same({ projectId = f.project_id, template = 'base', size = 'small', region = 'us-east-1',
      timeoutMs = 300000, metadata = { x = 'y' } },
      f.stats().last_create)
    assert.equal(2, sb.allocation.cpus)
    assert.is_number(sb.http_timings.ttfb)
    local r = assert(lizard.exec(c, sb, "echo hi", { timeout = 5, cwd = '/tmp', env = { A = '1' } }))
    assert.same({ cmd = 'echo hi', timeoutMs = 5000, workdir = '/tmp', envs = { A = '1' } }, f.stats().last_exec)
    assert.equal(0, r.code)
    assert.equal('hi\n', r.stdout)
    local list = assert(lizard.list(c))
    assert.equal(sb.id, list[1].id)
    assert.same({}, assert(lizard.list(c, { labels = { ['cseng.run'] = 'x' } })),
      'a label sweep matches the metadata create sent, nothing else')
    assert.equal(sb.id, assert(lizard.list(c, { labels = { x = 'y' } }))[1].id)
    assert.is_true(lizard.destroy(c, sb))
    assert.is_true(lizard.destroy(c, sb), '404 = already gone')
    local _, err, code = lizard.exec(c, sb, 'true')
    assert.equal('HTTP_404', code)
    assert.matches('HTTP 404', err)
    assert_counts(f, { creates = 1, execs = 2, deletes = 2, destroyed = 1, lists = 3, live = 0 })
  end)

  it('maps HTTP errors to HTTP_<status> and transport errors to cseng.http codes', function()
    local f = fake.start { create_status = 429 }
    A.started(f)
    local c = lizard.connect(f.config())
    local sb, err, code = lizard.create(c, {})
    assert.is_nil(sb)
    assert.equal('HTTP_429', code)
    assert.matches('^lizard: POST /api/sandboxes: HTTP 429', err)
    c.key = 'bad'
    assert.equal('HTTP_401', select(3, lizard.create(c, {})))
    f.close()
    assert.equal('ECONNREFUSED', select(3, lizard.create(c, {})))
  end)

  it('moves files with put and get (base64 through exec)', function()
    -- the fake does not run shells; check the commands it was sent instead
    local cmds = {}
    local f = fake.start { exec = function(cmd) cmds[#cmds + 1] = cmd; return 0, 'aGVsbG8=', '' end }
    A.started(f)
    local c = lizard.connect(f.config())
    local sb = assert(lizard.create(c, {}))
    assert.is_true(lizard.put(c, sb, '/workspace/x', 'TARBYTES'))
    assert.matches("^printf '%%s' 'VEFSQllURVM=' >> /tmp/cseng%-put%-%x+%.b64$", cmds[1])
    -- decoded to a file, then unpacked (GNU tar detects gzip only on files; spec/providers/shared/adapter_spec.lua
    -- runs the same command in a real sandbox)
    assert.matches('base64 %-d /tmp/cseng%-put%-%x+%.b64 > /tmp/cseng%-put%-%x+%.b64%.tar && tar %-xf /tmp/cseng%-put%-%x+%.b64%.tar %-C /workspace/x', cmds[2])
    assert.equal('hello', assert(lizard.get(c, sb, '/etc/hostname')))
  end)
end)

-- ---- a short real run --------------------------------------------------------------------

describe('arena: the local provider', function()
  it('runs 5 samples for real and reports them', function()
    local status, by, errtext, last = run_arena { providers = { 'local' }, samples = 5, warmups = 1,
      seed = 20261001 }
    assert.equal(0, status, errtext)
    local m = measured(by, 'local')
    assert.equal(5, #m)
    for _, t in ipairs(m) do
      assert.is_true(t.ok, tostring(t.error))
      assert.is_true(t.ready_ms > 0)
      assert.is_nil(t.http)
    end
    assert.matches('^Python 3', by.environment[1].environment.python_output)
    assert_accounted(by)
    local md = assert(fs.read(last.report))
    assert.matches('| local | 5 | 5 | 100%', md, 1, true)
    assert.is_true(fs.exists((last.report:gsub('%.md$', '.ready-ecdf.svg'))))
  end)
end)
