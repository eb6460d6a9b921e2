-- The scheduler resumes a task made ready by a loop callback at once, even when that callback
-- ran at the top of uv_run (a timer already due when the loop is entered): before the fix in
-- ltask.c, uv_run went on to block in poll until the next timer, so a 1 ms sleep woke after the
-- next far-away timer (found by bench/: HTTP requests that completed inside curl's timer
-- callback stalled every client task for up to the next task.sleep deadline).
local task = require('cseng.task')
local clock = require('cseng.clock')

describe('scheduler wake-ups', function()
  it('a sleep due while other tasks ran wakes its task without waiting for a later timer', function()
    local far = task.spawn(function() task.sleep(2) end)
    local t0 = clock.now()
    local short = task.spawn(function() task.sleep(0.001) end)
    -- runs in the same pass, after `short` started its timer: the timer is due when the
    -- scheduler next enters the loop
    local busy = task.spawn(function()
      local stop = clock.now() + 5e6
      while clock.now() < stop do end
    end)
    assert.is_true((task.join(short)))
    assert.is_true((task.join(busy)))
    local ms = (clock.now() - t0) / 1e6
    assert.is_true(ms < 500, string.format('woke after %.1f ms (the far timer is at 2000 ms)', ms))
    far:cancel()
    task.join(far)
  end)

  it('a task spinning on task.yield still lets timers and I/O run', function()
    local fired = false
    local t = task.spawn(function() task.sleep(0.01); fired = true end)
    local t0, spins = clock.now(), 0
    while not fired and clock.now() - t0 < 2e9 do
      task.yield()
      spins = spins + 1
    end
    assert.is_true(fired, 'the timer fired while another task spun')
    assert.is_true(spins > 1)
    task.join(t)
  end)
end)
