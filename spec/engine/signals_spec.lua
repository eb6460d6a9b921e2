-- Signals reach every task and every coroutine: an interrupt cancels each
-- task that runs after it, a spin is interrupted in whichever coroutine it runs, a solver
-- cannot swallow the cancellation (task.guard), and an interrupted process exits 128 + the
-- signal after its cleanup. Verdicts are states and counts; a generous watchdog (15 s) that
-- expires counts as a failure. The seconds each exit took are printed, never asserted.
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local clock = require('cseng.clock')
local results = require('cseng.results.log')

local H = require('spec.helpers.common')
local ROOT, CSENG = H.ROOT, H.CSENG
local FIXTURES = ROOT .. '/spec/fixtures/signals'
local WATCHDOG = 15 -- seconds

local lizard_fake = require('spec.fakes').module('lizard')

local tmp = H.tempdir('cseng-signals')
teardown(H.remove_tempdirs)

local function wait_for(path)
  for _ = 1, WATCHDOG * 20 do
    if fs.exists(path) then return true end
    task.sleep(0.05)
  end
  return false
end

-- Spawn argv, wait for `marker`, send sig, wait for the exit: the result (nil when the watchdog
-- expired, after a KILL) and the seconds from the signal to the exit.
local function interrupt(argv, env_add, marker, sig, dir)
  local p = assert(proc.spawn { argv = argv, cwd = ROOT, env_add = env_add, stdout = dir .. '/stdout',
    stderr = dir .. '/stderr' })
  if not wait_for(marker) then
    p:kill('KILL'); p:wait()
    return nil, nil, 'never reached ' .. marker .. ': ' .. tostring(fs.read(dir .. '/stderr'))
  end
  local t = clock.now()
  assert(p:kill(sig))
  local r = p:wait(WATCHDOG)
  local secs = (clock.now() - t) / 1e9
  if not r then p:kill('KILL'); p:wait() end
  return r, secs, fs.read(dir .. '/stderr')
end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[(#s + 1) // 2] or 0, s[#s] or 0
end

describe('an interrupt in the engine', function()
  -- Run a `cseng lua` script (its arg[1] is its folder) and interrupt it with sig once `marker`
  -- exists in that folder: its exit status (an expired watchdog fails the test) and the folder.
  local function interrupt_script(name, body, marker, sig)
    local dir = tmp .. '/' .. name
    assert(fs.mkdir_p(dir))
    assert(fs.write(dir .. '/s.lua', body))
    local r, _, err = interrupt({ CSENG, 'lua', dir .. '/s.lua', dir }, nil, dir .. '/' .. marker, sig, dir)
    assert.is_table(r, 'exited after SIG' .. sig .. ': ' .. tostring(err))
    return r.code, dir
  end

  it('reaches a second task made ready in the same pass as the one that was spinning', function()
    local code, dir = interrupt_script('same_pass', [[
local task = require('cseng.task')
local fs = require('cseng.fs')
local out = arg[1]
local done = 0
local function spinner(i)
  return task.spawn(function()
    local _ <close> = setmetatable({}, { __close = function() done = done + 1 end })
    task.sleep(0.2) -- both timers fire in one loop turn: both are ready in one pass
    fs.write(out .. '/spinning.' .. i, 'x')
    local x = 0
    while true do x = x + 1 end
  end)
end
local a, b = spinner(1), spinner(2)
pcall(a.join, a)
pcall(b.join, b)
fs.write(out .. '/closed', tostring(done))
]], 'spinning.1', 'INT')
    assert.equal(130, code)
    assert.equal('2', fs.read(dir .. '/closed'))
  end)

  it('reaches the next task of the pass when the task the signal hit yields before its hook fires', function()
    local code, dir = interrupt_script('same_pass_yield', [[
local task = require('cseng.task')
local fs = require('cseng.fs')
local out = arg[1]
local a = task.spawn(function()
  task.sleep(0.2)
  fs.write(out .. '/waiting', 'x')
  io.popen('sleep 1'):read('a') -- blocks in C: the signal lands here
  task.yield() -- and the task yields before 10000 more instructions
end)
local b = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() fs.write(out .. '/closed', 'ran') end })
  task.sleep(0.2) -- its timer fires with a's: b runs right after a, in the same pass
  local x = 0
  while true do x = x + 1 end
end)
pcall(a.join, a)
pcall(b.join, b)
]], 'waiting', 'INT')
    assert.equal(130, code)
    assert.equal('ran', fs.read(dir .. '/closed'))
  end)

  it('interrupts a spin inside a coroutine the task resumed, with wrap and with resume', function()
    local code, dir = interrupt_script('nested', [[
local task = require('cseng.task')
local fs = require('cseng.fs')
local out = arg[1]
local function spin() local x = 0; while true do x = x + 1 end end
local w = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() fs.write(out .. '/closed.wrap', 'ran') end })
  fs.write(out .. '/spinning', 'x')
  coroutine.wrap(function() coroutine.wrap(spin)() end)()
end)
local r = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() fs.write(out .. '/closed.resume', 'ran') end })
  local ok, err = coroutine.resume(coroutine.create(spin))
  fs.write(out .. '/resume', tostring(ok) .. ' ' .. tostring(type(err) == 'table' and err.code))
end)
pcall(w.join, w)
pcall(r.join, r)
]], 'spinning', 'INT')
    assert.equal(130, code)
    assert.equal('ran', fs.read(dir .. '/closed.wrap'))
    assert.equal('ran', fs.read(dir .. '/closed.resume'))
    -- outside task.guard the cancellation is delivered once: resume returns it
    assert.equal('false ECANCELED', fs.read(dir .. '/resume'))
  end)

  it('inside task.guard a cancellation stays raised: pcall, xpcall and resume retries end', function()
    local code, dir = interrupt_script('guard', [[
local task = require('cseng.task')
local fs = require('cseng.fs')
local out = arg[1]
local function spin() local x = 0; while true do x = x + 1 end end
local kinds = {
  pcall = function() while true do pcall(function() task.sleep(0.01); spin() end) end end,
  xpcall = function() while true do xpcall(spin, function(e) return e end) end end,
  resume = function() while true do coroutine.resume(coroutine.create(spin)) end end,
  sleep = function() while true do pcall(task.sleep, 10) end end,
}
local tasks = {}
for name, fn in pairs(kinds) do
  tasks[#tasks + 1] = task.spawn(function()
    fs.write(out .. '/spinning', name)
    local ok, err = task.guard(fn)
    -- out of the guard: the cancellation was delivered, and this cleanup may yield
    task.sleep(0.01)
    fs.write(out .. '/' .. name, tostring(ok) .. ' ' .. tostring(type(err) == 'table' and err.code))
  end)
end
for _, t in ipairs(tasks) do pcall(t.join, t) end
]], 'spinning', 'TERM')
    assert.equal(143, code)
    for _, name in ipairs({ 'pcall', 'xpcall', 'resume', 'sleep' }) do
      assert.equal('false ECANCELED', fs.read(dir .. '/' .. name), name)
    end
  end)
end)

describe('SIGINT during a task run of spinning solvers', function()
  local KINDS = { 'busy', 'wrap', 'resume', 'retry' }

  local function plan_file(f)
    local p = tmp .. '/spin_plan.lua'
    assert(fs.write(p, string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = 'sigspin', provider = 'lizard', dataset = %q, solver = 'sigspin', mode = 'cold',
  concurrency = 4, cleanup_backoff = { 0, 0 },
  provider_config = { api_url = %q, api_key = %q, project_id = %q } }
]], ROOT .. '/data/smoke.jsonl', f.url, f.api_key, f.project_id)))
    return p
  end

  -- One run: interrupted while its solvers spin; what it left (code, live sandboxes, the log).
  local function one_run(f, plan, i, sig)
    local dir = tmp .. '/run' .. i
    assert(fs.mkdir_p(dir))
    local r, secs, err = interrupt({ CSENG, 'run', plan, '--quiet', '--output', dir .. '/out' },
      { LUA_PATH = FIXTURES .. '/?.lua;;', SIGSPIN_DIR = dir, SIGSPIN_KIND = KINDS[(i - 1) % #KINDS + 1] },
      dir .. '/spinning', sig, dir)
    local out = { code = r and r.code, secs = secs, err = err, live = f.stats().live }
    for _, name in ipairs(fs.list(dir .. '/out') or {}) do
      if name:match('%.jsonl$') then
        local events = results.read(dir .. '/out/' .. name)
        out.open = 0
        for _ in pairs(results.live_allocations(events)) do out.open = out.open + 1 end
        for _, e in ipairs(events) do if e.event == 'run_finished' then out.status = e.status end end
      end
    end
    return out
  end

  it('exits 130 each of 20 times in a row, with its cleanup done and 0 live sandboxes', function()
    local f = lizard_fake.start {}
    local ok, err = pcall(function()
      local plan = plan_file(f)
      local secs, bad = {}, {}
      for i = 1, 20 do
        local o = one_run(f, plan, i, 'INT')
        secs[#secs + 1] = o.secs
        if o.code ~= 130 or o.live ~= 0 or o.open ~= 0 or o.status ~= 'interrupted' then
          bad[#bad + 1] = string.format('run %d (%s first): code %s, live %s, open %s, status %s: %s', i,
            KINDS[(i - 1) % #KINDS + 1], tostring(o.code), tostring(o.live), tostring(o.open), tostring(o.status),
            tostring(o.err):sub(-400))
        end
      end
      local med, max = median(secs)
      io.stderr:write(string.format('\n[signals] 20 SIGINT runs: exit seconds median %.2f, max %.2f\n', med, max))
      assert.same({}, bad)
      assert.is_true(f.stats().creates >= 20, 'the runs created sandboxes')
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('exits 143 on SIGTERM, with 0 live sandboxes', function()
    local f = lizard_fake.start {}
    local ok, err = pcall(function()
      local o = one_run(f, plan_file(f), 21, 'TERM')
      assert.equal(143, o.code, o.err)
      assert.equal(0, o.live)
      assert.equal(0, o.open)
      assert.equal('interrupted', o.status)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)
end)

-- SIGINT/SIGTERM in a script: the engine cancels every task so its cleanup (to-be-closed
-- variables) runs; a second interrupt exits at once.
local function script(body)
  local dir = assert(fs.tempdir('cseng-signal'))
  local path = dir .. '/s.lua'
  assert(fs.write(path, body))
  return dir, path
end

describe('signals', function()
  it('runs a to-be-closed close (which may yield) on Ctrl-C, then exits 130', function()
    local dir, path = script([[
local task = require('cseng.task')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local out = arg[1]
local worker = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function()
    task.sleep(0.05) -- cleanup may do I/O
    fs.write(out, 'closed')
  end })
  task.sleep(60)
end)
task.sleep(0.1)
sys.kill(sys.pid(), 'INT')
worker:join()
task.sleep(60)
]])
    local out = dir .. '/out'
    local r = assert(proc.run { argv = { CSENG, 'lua', path, out }, timeout = 30 })
    assert.equal(130, r.code)
    assert.equal('closed', fs.read(out))
    assert.matches('interrupted', r.stderr)
    fs.remove_tree(dir)
  end)

  it('exits at once with 130 on a second SIGINT', function()
    local dir, path = script([[
local task = require('cseng.task')
local sys = require('cseng.sys')
task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() task.sleep(60) end }) -- a stuck cleanup
  task.sleep(60)
end)
task.sleep(0.1)
sys.kill(sys.pid(), 'INT')
pcall(task.sleep, 0.3) -- the first interrupt cancels this sleep
sys.kill(sys.pid(), 'INT')
task.sleep(60)
]])
    local r = assert(proc.run { argv = { CSENG, 'lua', path }, timeout = 30 })
    assert.equal(130, r.code)
    assert.is_false(r.timed_out)
    assert.is_true(r.elapsed < 10)
    assert.matches('interrupted again', r.stderr)
    fs.remove_tree(dir)
  end)
end)
