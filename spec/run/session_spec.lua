-- The session (lua/cseng/run/session.lua) and its sandbox ledger, through every run kind: tasks, matrix,
-- startup, prewarm write the same allocation/destroy records; a failed cleanup (in a trial, in
-- warm preparation, in a --resume sweep) stops allocation; max_concurrency queues creates;
-- Retry-After is honoured. Real sandboxes on the local provider (bubblewrap), wrapped so a
-- spec can make destroy fail.
local fs = require('cseng.fs')
local frame = require('cseng.run.frame')
local proc = require('cseng.proc')
local task = require('cseng.task')
local clock = require('cseng.clock')
local results = require('cseng.results.log')
local tasks_kind = require('cseng.run.kinds.tasks')
local session = require('cseng.run.session')
local errors = require('cseng.lib.errors')
local H = require('spec.helpers.common')

local ROOT = H.ROOT
local SMOKE = ROOT .. '/data/smoke.jsonl'

local tmp = H.tempdir('cseng-session-spec')
teardown(H.remove_tempdirs)

-- providers.ledger_local: the local adapter, with switches (fail_destroy(sb) -> true to fail)
-- and a count of sandboxes alive at once.
local sw = {}
local function install(extra)
  local base = require('providers.local')
  local live, max_live = 0, 0
  local mod = setmetatable({
    name = 'ledger_local',
    find_artifact = false, -- always prepare: a warm artifact of an earlier run must not be reused here
    create = function(client, spec)
      local sb, err, code = base.create(client, spec)
      if sb then live = live + 1; max_live = math.max(max_live, live) end
      return sb, err, code
    end,
    destroy = function(client, sb)
      if sw.fail_destroy and sw.fail_destroy(sb) then
        base.destroy(client, sb) -- really gone; the adapter says otherwise
        return nil, 'injected destroy failure', 'EINJECTED'
      end
      local ok, err, code = base.destroy(client, sb)
      if ok then live = live - 1 end
      return ok, err, code
    end,
  }, { __index = base })
  for k, v in pairs(extra or {}) do mod[k] = v end
  package.loaded['providers.ledger_local'] = mod
  return function() return max_live end
end
after_each(function()
  package.loaded['providers.ledger_local'] = nil
  sw = {}
end)

local function by_event(events)
  local by = setmetatable({}, { __index = function(t, k) local l = {}; rawset(t, k, l); return l end })
  for _, e in ipairs(events) do table.insert(by[e.event], e) end
  return by
end

-- The ledger's records, the same for every run kind: each allocation has provider, sandbox id,
-- labels naming the run, the run id and a time, and is followed by exactly one destroyed (or
-- cleanup_failed) record for the same provider and id.
local CORE = { 'event', 'provider', 'run_id', 'sandbox_id', 'time' }
local function assert_ledger(path)
  local events = results.read(path)
  local run_id
  for _, e in ipairs(events) do if e.event == 'run_started' then run_id = e.run_id end end
  assert.is_string(run_id, path)
  local open, n = {}, 0
  for i, e in ipairs(events) do
    if e.event == 'allocated' then
      n = n + 1
      for _, k in ipairs(CORE) do assert.is_not_nil(e[k], k .. ' in ' .. path) end
      assert.equal(run_id, e.run_id)
      assert.equal(run_id, e.labels['cseng.run'], 'the labels name the run')
      assert.is_nil(open[e.provider .. '/' .. e.sandbox_id], 'allocated twice')
      open[e.provider .. '/' .. e.sandbox_id] = i
    elseif e.event == 'destroyed' or e.event == 'cleanup_failed' then
      for _, k in ipairs(CORE) do assert.is_not_nil(e[k], k .. ' in ' .. path) end
      local k = e.provider .. '/' .. e.sandbox_id
      assert(open[k], k .. ' destroyed before (or without) its allocation record')
      open[k] = nil
    end
  end
  assert.same({}, open, 'every allocation is closed')
  assert.is_true(n > 0, 'the run allocated')
  return events, n
end

local function quietly(fn, ...)
  local out = io.stdout
  io.output(tmp .. '/stdout.txt') -- commands print their tables; keep the spec output readable
  local ok, a, b = pcall(fn, ...)
  io.output(out)
  assert(ok, a)
  return a, b
end

describe('every run kind', function()
  it('writes the same allocation and destroy records: tasks, matrix, startup, prewarm', function()
    install()
    -- tasks
    local st, info = frame.run('tasks', { provider = 'ledger_local', dataset = SMOKE, task_limit = 2, concurrency = 2,
      solver = 'gold', mode = 'cold', output = tmp .. '/tasks', quiet = true })
    assert.equal(0, st)
    local _, n = assert_ledger(info.jsonl)
    assert.equal(2, n)
    -- matrix: one log per provider x mode, through the run command
    local plan_file = tmp .. '/matrix.lua'
    assert(fs.write(plan_file, "local plan = require 'cseng.run.plan'\nreturn plan.matrix { name = 'm', providers = { 'ledger_local' }, " ..
      "modes = { 'cold', 'warm' }, dataset = '" .. SMOKE .. "', task_limit = 1 }\n"))
    assert.equal(0, quietly(require('cseng.cli.commands.run').run, { plan_file, '--output', tmp .. '/matrix/m.jsonl', '--quiet' }))
    for _, mode in ipairs({ 'cold', 'warm' }) do
      local _, m = assert_ledger(tmp .. '/matrix/m-ledger_local-' .. mode .. '.jsonl')
      assert.equal(mode == 'warm' and 2 or 1, m, mode) -- warm: the preparation sandbox, then the trial
    end
    -- startup
    local ast, ainfo = frame.run('startup', { providers = { 'ledger_local' }, samples = 2, warmups = 1, seed = 7,
      output = tmp .. '/startup', quiet = true, stderr = { write = function() end } })
    assert.equal(0, ast)
    local _, a = assert_ledger(ainfo.jsonl)
    assert.equal(3, a)
    -- prewarm
    assert.equal(0, quietly(require('cseng.cli.commands.prewarm').run, { '--provider', 'ledger_local', '--task-limit', '2',
      '--output', tmp .. '/prewarm', '--quiet' }))
    local logs = {}
    for _, f in ipairs(fs.list(tmp .. '/prewarm')) do if f:match('%.jsonl$') then logs[#logs + 1] = f end end
    assert.equal(1, #logs)
    local _, pn = assert_ledger(tmp .. '/prewarm/' .. logs[1])
    assert.equal(2, pn)
  end)
end)

describe('a failed cleanup stops allocation', function()
  local function allocations(events)
    local n = 0
    for _, e in ipairs(events) do if e.event == 'allocated' then n = n + 1 end end
    return n
  end

  it('in warm preparation', function()
    install()
    sw.fail_destroy = function() return true end
    local st, info = frame.run('tasks', { provider = 'ledger_local', dataset = SMOKE, task_limit = 3, concurrency = 1,
      solver = 'gold', mode = 'warm', output = tmp .. '/warmfail', quiet = true, cleanup_backoff = { 0.01, 0.01 } })
    assert.equal(1, st)
    local events = results.read(info.jsonl)
    local by = by_event(events)
    assert.equal(1, allocations(events), 'only the preparation sandbox was allocated')
    assert.equal('prewarm', by.allocated[1].purpose)
    assert.equal(1, #by.cleanup_failed)
    assert.equal('cleanup_failed', by.run_finished[1].status)
    assert.matches('destroying .* failed: injected destroy failure', by.run_finished[1].cleanup_error)
  end)

  it('in cseng prewarm', function()
    install()
    sw.fail_destroy = function() return true end
    local st = quietly(require('cseng.cli.commands.prewarm').run, { '--provider', 'ledger_local', '--task-limit', '3',
      '--concurrency', '1', '--output', tmp .. '/prewarmfail', '--quiet' })
    assert.equal(1, st)
    local log
    for _, f in ipairs(fs.list(tmp .. '/prewarmfail')) do if f:match('%.jsonl$') then log = tmp .. '/prewarmfail/' .. f end end
    local events = results.read(log)
    assert.equal(1, allocations(events))
    assert.equal('cleanup_failed', by_event(events).run_finished[1].status)
  end)

  it('in a --resume sweep', function()
    install()
    -- a killed run's log: one sandbox allocated, never destroyed
    local log = tmp .. '/resume/killed.jsonl'
    local w = results.open(log, 'killed-run')
    w:event('run_started', { provider = 'ledger_local', mode = 'cold', solver = 'gold' }, true)
    -- an id of local's format (any other is refused before a destroy is tried)
    w:allocated('ledger_local', { id = 'cseng-0000000a0b0c' }, { ['cseng.run'] = 'killed-run' }, { task_id = 'x' })
    sw.fail_destroy = function(sb) return sb.id == 'cseng-0000000a0b0c' end
    local st = frame.run('tasks', { provider = 'ledger_local', dataset = SMOKE, task_limit = 2, concurrency = 1,
      solver = 'gold', mode = 'cold', resume = log, quiet = true, cleanup_backoff = { 0.01, 0.01 } })
    assert.equal(1, st)
    local events = results.read(log)
    local by = by_event(events)
    assert.equal(1, allocations(events), 'nothing new was allocated')
    assert.equal(1, #by.cleanup_failed)
    assert.equal('cseng-0000000a0b0c', by.cleanup_failed[1].sandbox_id)
    assert.equal(0, #by.trial)
    assert.equal('cleanup_failed', by.run_finished[1].status)
  end)

  it('in a trial (the ledger refuses with ECLEANUP)', function()
    install()
    local s = session.open { kind = 'tasks', opts = { output = tmp .. '/unit', cleanup_backoff = { 0.01 } },
      id_parts = { 'unit' } }
    s:connect('ledger_local', {})
    sw.fail_destroy = function() return true end
    local spec = { labels = { ['cseng.run'] = s.id }, workdir = '/workspace', ttl_seconds = 60 }
    do
      local sb <close> = s:sandbox(spec, { task_id = 'a' })
      assert.is_string(sb.id)
      assert.is_true(sb.times.recorded >= sb.times.create_end)
    end
    assert.matches('injected destroy failure', s.cleanup_failed)
    local ok, err = pcall(s.sandbox, s, spec, { task_id = 'b' })
    assert.is_false(ok)
    assert.equal(errors.ECLEANUP, err.code)
    local by = by_event(results.read(s.jsonl))
    assert.equal(1, #by.allocated)
    assert.equal(1, #by.cleanup_failed)
  end)
end)

describe('the ledger', function()
  local function fake_adapter(o)
    local n, calls = 0, {}
    return {
      name = o.name, max_concurrency = o.max_concurrency,
      connect = function() return {} end,
      create = function() n = n + 1; if o.create_wait then task.sleep(o.create_wait) end; return { id = o.name .. '-' .. n } end,
      destroy = function(_, sb)
        calls[#calls + 1] = clock.now()
        if o.destroy then return o.destroy(sb, #calls) end
        return true
      end,
    }, calls
  end

  it('honours a Retry-After the adapter returns with its error', function()
    local a, calls = fake_adapter { name = 'ra', destroy = function(_, n)
      if n == 1 then return nil, 'slow down', 'HTTP_429', { status = 429, headers = { ['retry-after'] = '0.3' } } end
      return true
    end }
    package.loaded['providers.ledger_ra'] = a
    local s = session.open { kind = 'tasks', opts = { output = tmp .. '/ra', cleanup_backoff = { 0.01, 0.01 } }, id_parts = { 'ra' } }
    s:connect('ledger_ra')
    local lease = s:sandbox({ labels = {} }, {})
    -- the wait the session asks for, not the clock's reading of it (a timer may fire a loop
    -- iteration's cached time early, and a loaded machine late): counted, not timed
    local waits, sleep = {}, task.sleep
    task.sleep = function(sec) waits[#waits + 1] = sec; return sleep(sec) end
    local okc, r = pcall(lease.close, lease)
    task.sleep = sleep
    package.loaded['providers.ledger_ra'] = nil
    assert(okc, r)
    assert.is_true(r.ok)
    assert.equal(2, r.attempts)
    assert.equal(2, #calls)
    assert.same({ 0.3 }, waits, 'waited the Retry-After (0.3 s), not the 0.01 s back-off')
    assert.is_nil(s.cleanup_failed)
  end)

  it('queues creates under an adapter\'s max_concurrency, before its timing starts', function()
    local a = fake_adapter { name = 'mc', max_concurrency = 1, create_wait = 0.02 }
    local live, max_live = 0, 0
    local create = a.create
    a.create = function(...) live = live + 1; max_live = math.max(max_live, live); return create(...) end
    local destroy = a.destroy
    a.destroy = function(...) live = live - 1; return destroy(...) end
    package.loaded['providers.ledger_mc'] = a
    local s = session.open { kind = 'tasks', opts = { output = tmp .. '/mc' }, id_parts = { 'mc' } }
    s:connect('ledger_mc')
    local leases, ts = {}, {}
    for i = 1, 3 do
      ts[i] = task.spawn(function()
        local sb <close> = s:sandbox({ labels = {} }, { i = i })
        leases[i] = sb
        task.sleep(0.01)
      end)
    end
    for i = 1, 3 do assert.is_true((ts[i]:join())) end
    package.loaded['providers.ledger_mc'] = nil
    assert.equal(1, max_live)
    local queued = 0
    for i = 1, 3 do
      local t = leases[i].times
      assert.is_true(t.create_start >= t.queued)
      if t.create_start - t.queued > 0 then queued = queued + 1 end
    end
    assert.is_true(queued >= 2, 'two of the three waited for a place')
  end)

  it('the runner queues trials under max_concurrency (records stay the same)', function()
    local max_live = install { max_concurrency = 1 }
    local st, info = frame.run('tasks', { provider = 'ledger_local', dataset = SMOKE, task_limit = 3, concurrency = 3,
      solver = 'gold', mode = 'cold', output = tmp .. '/mcrun', quiet = true })
    assert.equal(0, st)
    assert_ledger(info.jsonl)
    assert.equal(1, max_live())
    local queued = 0
    for _, r in ipairs(info.records) do if r.queue_seconds then queued = queued + 1 end end
    assert.equal(3, queued)
  end)
end)

describe('the warm cache', function()
  it('prepares a shared artifact once; the trials waiting on it are woken, not polling', function()
    install()
    -- two tasks with the same content (one archive, two ids): one warm artifact
    local row
    for line in io.lines(SMOKE) do
      local r = require('cjson').decode(line)
      if r.task_files then row = r; break end
    end
    local rows = {}
    for i = 1, 3 do
      local r = require('cjson').decode(require('cjson').encode(row))
      r.task_id = row.task_id .. '-copy' .. i
      rows[i] = require('cjson').encode(r)
    end
    local ds = tmp .. '/same3.jsonl'
    assert(fs.write(ds, table.concat(rows, '\n') .. '\n'))
    local sleeps, real_sleep = 0, task.sleep
    task.sleep = function(s) if s == 0.05 then sleeps = sleeps + 1 end; return real_sleep(s) end
    local ok, st, info = pcall(frame.run, 'tasks', { provider = 'ledger_local', dataset = ds, concurrency = 3,
      solver = 'gold', mode = 'warm', output = tmp .. '/samewarm', quiet = true })
    task.sleep = real_sleep
    assert(ok, st)
    assert.equal(0, st)
    local by = by_event(results.read(info.jsonl))
    assert.equal(1, #by.prewarmed, 'one preparation for three trials')
    assert.equal(3, #by.trial)
    for _, t in ipairs(by.trial) do assert.equal('passed', t.outcome) end
    assert.equal(0, sleeps, 'no task.sleep(0.05) polling')
  end)
end)

describe('small fixes', function()
  local CSENG = ROOT .. '/cseng'

  it('enforces the task\'s memory limit on the local provider (docs/providers/local.md)', function()
    local L = require('providers.local')
    local c = L.connect({})
    if not c.cgroup then
      pending('no writable cgroup hierarchy here: limits cannot be enforced (recorded as absent in `limits`)')
      return
    end
    local hog = "python3 -c 'b = bytearray(300*1024*1024); print(len(b))'"
    local function run_in(spec)
      spec.labels, spec.workdir, spec.ttl_seconds = {}, '/workspace', 60
      local sb = assert(L.create(c, spec))
      local r = assert(L.exec(c, sb, hog, { timeout = 60 }))
      assert(L.destroy(c, sb))
      return sb, r
    end
    local sb, r = run_in { memory_mb = 64 }
    assert.equal(64, sb.limits.memory_mb)
    assert.equal(137, r.code, 'the 300 MiB allocation is killed under a 64 MB limit: ' .. tostring(r.stderr))
    local _, free = run_in {}
    assert.equal(0, free.code, free.stderr)
    assert.equal(tostring(300 * 1024 * 1024), (free.stdout:gsub('%s+$', '')))
  end)

  it('a missing --resume log is a one-line error', function()
    local r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--resume', tmp .. '/nope.jsonl' }, cwd = ROOT })
    assert.equal(1, r.code)
    assert.equal('cseng: cannot read the run log ' .. tmp .. '/nope.jsonl: No such file or directory\n', r.stderr)
  end)

  it('cseng run --help lists every option the command accepts', function()
    local options = require('cseng.run.options')
    local r = assert(proc.run { argv = { CSENG, 'run', '--help' }, cwd = ROOT })
    assert.equal(0, r.code)
    local listed = {}
    for name in r.stdout:gmatch('\n  %-%-([%w%-]+)') do listed[name] = true end
    local accepted = {}
    for name in pairs(options.SPEC) do
      accepted[name] = true
      assert.is_true(listed[name] == true, '--' .. name .. ' is accepted but not in cseng run --help')
    end
    for name in pairs(listed) do assert.is_true(accepted[name] == true, '--' .. name .. ' is in the help but not accepted') end
    assert.is_true(listed.model and listed['max-turns'])
  end)

  it('a solver whose own require fails is reported with that error', function()
    package.preload['solvers.broken_dep'] = function() return require 'cseng_no_such_module_xyz' end
    local ok, err = pcall(tasks_kind.solver, 'broken_dep')
    package.preload['solvers.broken_dep'] = nil
    assert.is_false(ok)
    assert.matches("^solver 'broken_dep' failed to load: .*module 'cseng_no_such_module_xyz' not found$", err)
    assert.is_nil(err:find('unknown solver', 1, true))
    local ok2, err2 = pcall(tasks_kind.solver, 'no_such_solver')
    assert.is_false(ok2)
    assert.matches("^unknown solver 'no_such_solver'", tostring(err2))
    assert.matches('gold', tostring(err2)) -- the valid names are listed
  end)
end)
