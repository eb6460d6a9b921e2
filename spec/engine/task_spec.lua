local task = require('cseng.task')
local clock = require('cseng.clock')

describe('cseng.task', function()
  it('spawns and joins, returning results', function()
    local t = task.spawn(function(a, b) return a + b, 'x' end, 2, 3)
    local ok, sum, x = t:join()
    assert.is_true(ok)
    assert.equal(5, sum)
    assert.equal('x', x)
    assert.equal('done', t:status())
  end)

  it('joins a failed task as false plus a traceback', function()
    local t = task.spawn(function() error('boom') end)
    local ok, err = task.join(t)
    assert.is_false(ok)
    assert.matches('boom', err)
    assert.matches('traceback', err)
  end)

  it('sleeps concurrently: 50 sleepers of 100 ms finish in well under 50 x 100 ms', function()
    local t0 = clock.now()
    local ts = {}
    for i = 1, 50 do ts[i] = task.spawn(task.sleep, 0.1) end
    for i = 1, 50 do assert.is_true((ts[i]:join())) end
    local ms = (clock.now() - t0) / 1e6
    assert.is_true(ms >= 100, 'slept at least 100 ms')
    assert.is_true(ms < 2500, 'sleepers overlapped')
  end)

  it('never wakes a sleeper before its time (libuv millisecond timers can fire early)', function()
    local short, spinning = 0, true
    -- a busy neighbour keeps the loop turning, so timers are checked at any instant
    local spinner = task.spawn(function() while spinning do task.sleep(0) end end)
    for i = 1, 200 do
      local d = 0.0005 + (i % 7) * 0.00037 -- fractions of a millisecond, where truncation bites
      local t0 = clock.now()
      task.sleep(d)
      if clock.now() - t0 < d * 1e9 then short = short + 1 end
    end
    spinning = false
    spinner:join()
    assert.equal(0, short)
  end)

  it('yields inside pcall', function()
    local ok, v = pcall(function() task.sleep(0.01); return 42 end)
    assert.is_true(ok)
    assert.equal(42, v)
  end)

  it('limits concurrency with a semaphore, in FIFO order', function()
    local sem = task.semaphore(2)
    local inside, max_inside, order = 0, 0, {}
    local ts = {}
    for i = 1, 6 do
      ts[i] = task.spawn(function()
        local _ <close> = sem:acquire()
        inside = inside + 1
        max_inside = math.max(max_inside, inside)
        order[#order + 1] = i
        task.sleep(0.01)
        inside = inside - 1
      end)
    end
    for i = 1, 6 do assert.is_true((ts[i]:join())) end
    assert.equal(2, max_inside)
    assert.same({ 1, 2, 3, 4, 5, 6 }, order)
    assert.equal(2, sem:count())
  end)

  it('cancels a sleeping task, raising ECANCELED and closing its to-be-closed variables', function()
    local closed = false
    local t = task.spawn(function()
      local _ <close> = setmetatable({}, { __close = function()
        task.sleep(0.001) -- a close handler may itself yield
        closed = true
      end })
      task.sleep(100)
    end)
    task.sleep(0.01)
    t:cancel()
    local ok, err = t:join()
    assert.is_false(ok)
    assert.equal('ECANCELED', err.code)
    assert.is_true(closed)
  end)

  it('cancels a task waiting on a semaphore without losing the permit', function()
    local sem = task.semaphore(0)
    local t = task.spawn(function() sem:acquire() end)
    task.sleep(0.005)
    t:cancel()
    assert.is_false((t:join()))
    sem:release()
    assert.equal(1, sem:count())
  end)

  it('raises a clear error when a primitive runs inside a nested coroutine', function()
    local co = coroutine.create(function() task.sleep(0.01) end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.matches('inside a cseng task', err)
  end)

  it('refuses to yield across a C boundary with a clear error', function()
    local ok, err = pcall(table.sort, { 3, 1, 2 }, function(a, b) task.sleep(0) return a < b end)
    assert.is_false(ok)
    assert.matches('cannot run here', err)
  end)

  it('delivers a cancellation once, so cleanup that yields is not cut short', function()
    local finished = false
    local t = task.spawn(function()
      local ok = pcall(task.sleep, 60)
      assert(not ok)
      task.sleep(0.02) -- cleanup
      finished = true
    end)
    task.sleep(0.01)
    t:cancel()
    task.sleep(0.005)
    t:cancel() -- ignored: the task is already cleaning up
    assert.is_true((t:join()))
    assert.is_true(finished)
  end)

  it('does not let a task.yield() loop starve timers and I/O', function()
    local flag = false
    task.spawn(function() task.sleep(0.05); flag = true end)
    local spins = 0
    while not flag do
      task.yield()
      spins = spins + 1
      assert(spins < 5e6, 'timer never fired: the yield loop starved the event loop')
    end
    assert.is_true(flag)
  end)

  it('reports a table error with its code and a traceback (only the cancellation is quiet)', function()
    local t = task.spawn(function() error({ code = 'EIO', message = 'disk full' }) end)
    local ok, err = t:join()
    assert.is_false(ok)
    assert.equal('EIO', err.code)
    assert.equal('disk full', err.message)
    assert.matches('stack traceback', err.traceback)
    assert.matches('task_spec.lua', err.traceback)
    local c = task.spawn(task.sleep, 60)
    task.yield()
    c:cancel()
    local cok, cerr = c:join()
    assert.is_false(cok)
    assert.equal('ECANCELED', cerr.code)
    assert.is_nil(cerr.traceback)
  end)

  it('task.error carries extra fields and says its stage', function()
    local e = task.error('EVERIFY', 'resetting /tests failed', { stage = 'verify', detail = 3 })
    assert.equal('EVERIFY', e.code)
    assert.equal('verify', e.stage)
    assert.equal(3, e.detail)
    assert.equal('verify: resetting /tests failed (EVERIFY)', tostring(e))
    assert.equal('task cancelled (ECANCELED)', tostring(task.error('ECANCELED', 'task cancelled')))
  end)

  it('prints a never-joined table error with its code and traceback, and not a cancellation', function()
    local proc = require('cseng.proc')
    local fs = require('cseng.fs')
    local sys = require('cseng.sys')
    local dir = assert(fs.tempdir('task-spec-'))
    local script = dir .. '/gc.lua'
    assert(fs.write(script, table.concat({
      "local task = require 'cseng.task'",
      "task.spawn(function() error({ code = 'EIO', message = 'disk full' }) end)",
      "local c = task.spawn(task.sleep, 60)",
      "task.yield(); c:cancel(); task.yield(); task.yield()",
      "collectgarbage(); collectgarbage()",
    }, '\n')))
    local r = assert(proc.run { argv = { sys.root() .. '/cseng', 'lua', script } })
    fs.remove_tree(dir)
    assert.equal(0, r.code, r.stderr)
    assert.matches('task %d+ failed and was never joined: disk full %(EIO%)\nstack traceback', r.stderr)
    assert.matches('gc.lua:2', r.stderr)
    assert.is_nil(r.stderr:find('ECANCELED', 1, true), r.stderr)
  end)
end)
