-- The run frame (lua/cseng/run/frame.lua): rules that hold for every run kind, checked for
-- each kind as a user starts it (./cseng run / prewarm, against the fault-injecting Lizard fake):
-- lost create answers leave nothing live without `cseng cleanup` (tasks, arena, prewarm); an
-- authentication failure stops prewarm as it stops a task run; a planted key never reaches the
-- task run's status document; --resume restores the run's identity (a nop run resumes as nop,
-- a contradicting --solver is refused in one line); one exit-status rule; a dead endpoint stops
-- the run; every error trial has a registered code.
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local http = require('cseng.http')
local results = require('cseng.results.log')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local H = require('spec.helpers.runlog')
local ROOT = H.ROOT
local fakes = require('spec.fakes')
local lizard_fake, daytona_fake = fakes.module('lizard'), fakes.module('daytona')

local tmp = H.tempdir('cseng-frame')
teardown(H.remove_tempdirs)

local function write(name, text) return H.write(tmp, name, text) end
local free_port = H.free_port

local n_plans = 0
-- A plan file against the fake: kind 'tasks' or 'startup'.
local function plan_file(f, kind, extra)
  n_plans = n_plans + 1
  local cfg = string.format('{ api_url = %q, project_id = %q, request_timeout = 3 }', f.url, f.project_id)
  if kind == 'tasks' then
    return write('plan' .. n_plans .. '.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = 'frame', provider = 'lizard', dataset = %q, solver = 'gold', concurrency = 2,
  cleanup_backoff = { 0, 0 }, provider_config = %s %s }
]], ROOT .. '/data/smoke.jsonl', cfg, extra or ''))
  end
  return write('plan' .. n_plans .. '.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.startup { name = 'frame', providers = { 'lizard' }, samples = 10, warmups = 0, seed = 1,
  command = "echo ok-marker", expect = 'ok-marker', cleanup_backoff = { 0, 0 }, provider_config = { lizard = %s } %s }
]], cfg, extra or ''))
end

-- prewarm needs a provider with snapshots: Daytona's fake (its commands run for real)
local function daytona_plan(d)
  n_plans = n_plans + 1
  return write('dplan' .. n_plans .. '.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = 'frame', provider = 'daytona', dataset = %q, solver = 'gold', concurrency = 2,
  cleanup_backoff = { 0, 0 }, provider_config = { api_url = %q, api_key = %q,
  poll = { first = 0.01, factor = 1.1, max = 0.05 } } }
]], ROOT .. '/data/smoke.jsonl', d.url, d.api_key))
end

local function with_daytona(switches, fn)
  local d = daytona_fake.start(switches)
  local ok, err = pcall(fn, d)
  d.close()
  if not ok then error(err, 0) end
end

local function env_file(key)
  return write('k' .. crypto.hex(crypto.random_bytes(4)) .. '.env', 'LIZARD_API_KEY=' .. (key or 'test-key') .. '\n')
end

local function cseng(argv, timeout)
  local full = { H.CSENG }
  for _, a in ipairs(argv) do full[#full + 1] = a end
  local r = assert(proc.run { argv = full, cwd = ROOT, timeout = timeout or 300, env_add = { LIZARD_API_KEY = '' } })
  return r
end

local function only_log(dir)
  for _, name in ipairs(fs.list(dir) or {}) do
    if name:match('%.jsonl$') then return dir .. '/' .. name end
  end
  error('no log in ' .. dir)
end

local function by_event(log)
  local by = setmetatable({}, { __index = function(t, k) local l = {}; rawset(t, k, l); return l end })
  for _, e in ipairs(results.read(log)) do table.insert(by[e.event], e) end
  return by
end

local function with_fake(switches, fn)
  local f = lizard_fake.start(switches)
  local ok, err = pcall(fn, f)
  f.close()
  if not ok then error(err, 0) end
end

-- every 10th create of 3 (30%): the sandbox is made, then the connection is closed unanswered
local function lossy(n) return (n % 10 == 2 or n % 10 == 5 or n % 10 == 8) and 'reset' or nil end

describe('lost create answers (30%, the connection closed after the create)', function()
  it('a task run leaves nothing live without cseng cleanup', function()
    with_fake({ lose_create = lossy }, function(f)
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--env-file', env_file(), '--output', tmp .. '/lost-tasks', '--quiet' })
      local st = f.stats()
      assert.is_true(st.lost >= 3, 'creates were lost: ' .. tostring(st.lost))
      assert.equal(0, st.live, r.stderr)
    end)
  end)

  it('an arena run leaves nothing live without cseng cleanup', function()
    with_fake({ lose_create = lossy }, function(f)
      local r = cseng({ 'run', plan_file(f, 'startup'), '--env-file', env_file(), '--output', tmp .. '/lost-arena', '--quiet' })
      local st = f.stats()
      assert.is_true(st.lost >= 3, 'creates were lost: ' .. tostring(st.lost))
      assert.equal(0, st.live, r.stdout .. r.stderr)
      local by = by_event(only_log(tmp .. '/lost-arena'))
      assert.same({}, results.live_allocations(results.read(only_log(tmp .. '/lost-arena'))))
      assert.equal(1, #by.run_finished)
    end)
  end)

  it('a prewarm run leaves nothing live without cseng cleanup', function()
    with_daytona({ lose_create = lossy }, function(d)
      local r = cseng({ 'prewarm', daytona_plan(d), '--provider', 'daytona', '--output', tmp .. '/lost-prewarm/p.json',
        '--task-limit', '5', '--quiet' })
      local st = d.stats()
      assert.is_true((st.lost or 0) >= 2, 'creates were lost: ' .. tostring(st.lost) .. ' ' .. r.stderr)
      assert.equal(0, st.live, r.stdout .. r.stderr)
    end)
  end)
end)

describe('the arena summary', function()
  it('results/<run-id>.json per provider and mode: n, ok, TTI percentiles with CIs, the computesdk score; compare reads it', function()
    with_fake({}, function(f)
      local plan = plan_file(f, 'startup')
      local jsons = {}
      for i = 1, 2 do
        local dir = tmp .. '/arena-json' .. i
        local r = cseng({ 'run', plan, '--env-file', env_file(), '--output', dir, '--quiet', '--samples', '6' })
        assert.equal(0, r.code, r.stderr)
        local log = only_log(dir)
        jsons[i] = log:gsub('%.jsonl$', '.json')
        local doc = require('cjson').decode((assert(fs.read(jsons[i]))))
        assert.equal('cseng-startup-summary', doc.kind)
        local p = doc.providers[1]
        assert.equal('lizard', p.provider)
        assert.equal('lockstep', p.mode)
        assert.equal(6, p.n)
        assert.equal(6, p.ok)
        assert.is_number(p.ready_ms.p50)
        assert.equal(2, #p.ready_ms.p50_ci)
        assert.is_number(p.computesdk.score)
        assert.is_true(p.endpoint.loopback)
      end
      local r = cseng({ 'compare', jsons[1], jsons[2] })
      assert.equal(0, r.code, r.stderr)
      assert.matches('ready', r.stdout)
      assert.matches('lizard', r.stdout)
    end)
  end)
end)

describe('an authentication failure', function()
  it('stops prewarm from allocating, as it stops a task run', function()
    with_daytona({ auth_fail = 'create' }, function(d)
      local r = cseng({ 'prewarm', daytona_plan(d), '--provider', 'daytona', '--output', tmp .. '/auth-prewarm/p.json',
        '--concurrency', '1', '--task-limit', '6' })
      assert.equal(1, r.code, r.stderr)
      assert.equal(1, d.stats().creates, 'no create after the 401')
      assert.matches('stopped allocating: authentication failed', r.stderr)
    end)
  end)
end)

describe('the task run status document', function()
  it('never carries a planted key (an error body and an exec output echo it)', function()
    local key = 'lzk_' .. crypto.hex(crypto.random_bytes(14))
    local port = free_port()
    local bodies = {}
    with_fake({ api_key = key, echo_key = true, exec_status = function(n) return n % 5 == 2 and 500 or nil end,
      exec = function(_, _, n)
        if n % 6 == 4 then
          local res = http.request { url = 'http://127.0.0.1:' .. port .. '/status', timeout = 10 }
          if res and res.status == 200 then bodies[#bodies + 1] = res.body end
        end
        return 0, 'out ' .. key .. '\n', 'err ' .. key .. '\n'
      end }, function(f)
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--env-file', env_file(key), '--output', tmp .. '/status',
        '--status-port', tostring(port), '--task-limit', '8' })
      assert.is_true(#bodies >= 2, 'the status document was read during the run')
      local seen_error = false
      for _, b in ipairs(bodies) do
        assert.is_nil(b:find(key:sub(5, 12), 1, true), 'a fragment of the key is in /status')
        if b:find('"last_error":"', 1, true) then seen_error = true end
      end
      assert.is_true(seen_error, 'an error reached last_error while the status was read')
      assert.is_nil((r.stdout .. r.stderr):find(key:sub(9, 16), 1, true))
    end)
  end)
end)

describe('--resume restores the run', function()
  local function killed_nop_run(f, dir)
    -- a nop run killed (SIGKILL) after its first trials were recorded
    local argv = { H.CSENG, 'run', plan_file(f, 'tasks'), '--solver', 'nop', '--env-file', env_file(), '--output', dir,
      '--concurrency', '1', '--quiet' }
    local p = assert(proc.spawn { argv = argv, cwd = ROOT, env_add = { LIZARD_API_KEY = '' } })
    local log
    for _ = 1, 600 do
      task.sleep(0.05)
      local ok, l = pcall(only_log, dir)
      if ok and #(by_event(l).trial) >= 2 then log = l break end
    end
    sys.kill(p:pid(), 'KILL')
    p:wait()
    assert(log, 'the run recorded trials before the kill')
    return log
  end

  it('a nop run resumed without --solver resumes as nop: one solver in the log', function()
    with_fake({}, function(f)
      local log = killed_nop_run(f, tmp .. '/resume-nop')
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--resume', log, '--env-file', env_file(), '--quiet' })
      local outcomes = {}
      for _, t in ipairs(by_event(log).trial) do outcomes[#outcomes + 1] = t.outcome .. ':' .. tostring(t.error) end
      assert.equal(0, r.code, r.stderr .. table.concat(outcomes, '\n'))
      local by = by_event(log)
      local solvers = {}
      for _, t in ipairs(by.trial) do solvers[t.solver] = true end
      assert.same({ nop = true }, solvers)
      assert.equal('nop', by.run_started[1].identity.solver)
      assert.equal(0, f.stats().live)
    end)
  end)

  it('refuses, in one line, a --solver that contradicts the run', function()
    with_fake({}, function(f)
      local log = killed_nop_run(f, tmp .. '/resume-refuse')
      local before = #by_event(log).trial
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--resume', log, '--solver', 'gold', '--env-file', env_file(), '--quiet' })
      assert.equal(2, r.code, r.stderr)
      assert.matches('^cseng: %-%-resume: %-%-solver gold contradicts the run being resumed %(%-%-solver nop%)', r.stderr)
      assert.is_nil(util.trim(r.stderr):find('\n'), 'one line')
      assert.equal(before, #by_event(log).trial, 'nothing ran')
    end)
  end)
end)

describe('exit status and stop rules', function()
  it('a dead endpoint stops the run after 5 creates fail with one code, in one line; exit 1', function()
    with_fake({ create_status = 503 }, function(f)
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--env-file', env_file(), '--output', tmp .. '/dead',
        '--concurrency', '1', '--quiet' })
      assert.equal(1, r.code, r.stderr)
      local by = by_event(only_log(tmp .. '/dead'))
      assert.equal(5, #by.trial, 'the run stopped after five failed creates, not thirty')
      assert.equal('dead_endpoint', by.run_finished[1].stop_reason)
      assert.matches('5 creates in a row on lizard failed with HTTP_503', r.stderr)
    end)
  end)

  it('0 when the run finished with some errors, 1 under --fail-on-error; every error has a registered code', function()
    with_fake({ create_status = function(n) return n % 4 == 2 and 400 or nil end }, function(f)
      local plan = plan_file(f, 'tasks')
      local r = cseng({ 'run', plan, '--env-file', env_file(), '--output', tmp .. '/some', '--task-limit', '4',
        '--concurrency', '1', '--quiet' })
      assert.equal(0, r.code, r.stderr)
      local by = by_event(only_log(tmp .. '/some'))
      local errs = 0
      for _, t in ipairs(by.trial) do
        if t.outcome == 'error' then
          errs = errs + 1
          assert.is_string(t.error_code)
          assert.is_truthy(errors[t.error_code] or t.error_code:match('^HTTP_%d+$'), 'registered: ' .. t.error_code)
        end
      end
      assert.equal(1, errs)
      r = cseng({ 'run', plan, '--env-file', env_file(), '--output', tmp .. '/some2', '--task-limit', '4',
        '--concurrency', '1', '--quiet', '--fail-on-error' })
      assert.equal(1, r.code, r.stderr)
    end)
  end)

  it('--retry-errors reruns a timed-out trial (the watchdog cancels the trial body, never the worker)', function()
    with_fake({ latency = { exec = function(n) return n == 1 and 30 or 0 end } }, function(f)
      local r = cseng({ 'run', plan_file(f, 'tasks'), '--env-file', env_file(), '--output', tmp .. '/retry-timeout',
        '--task-limit', '1', '--timeout-seconds', '2', '--retry-errors', '1', '--quiet' })
      local by = by_event(only_log(tmp .. '/retry-timeout'))
      assert.equal(1, #by.trial_try, r.stderr)
      assert.equal('ETIMEDOUT', by.trial_try[1].error_code)
      assert.equal(2, by.trial[1].try)
      assert.equal(0, f.stats().live)
    end)
  end)

  it('an arena run that measured nothing exits 1', function()
    with_fake({ exec_status = 500 }, function(f)
      local r = cseng({ 'run', plan_file(f, 'startup'), '--env-file', env_file(), '--output', tmp .. '/arena-none',
        '--quiet', '--samples', '3' })
      assert.equal(1, r.code, r.stderr)
      assert.equal(0, f.stats().live)
    end)
  end)
end)
