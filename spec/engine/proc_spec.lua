local proc = require('cseng.proc')
local task = require('cseng.task')
local clock = require('cseng.clock')

-- A marker no other process on the machine carries: sleep accepts fractional seconds.
local function marker()
  return string.format('%d.%06d', 900 + math.random(0, 99), math.random(0, 999999))
end

-- pids of live processes whose command line contains s
local survivors = require('spec.helpers.common').pgrep

-- Killing is asynchronous once the caller has moved on: allow a second to settle.
local function assert_none_survive(s)
  local left
  for _ = 1, 50 do
    left = survivors(s)
    if #left == 0 then return end
    task.sleep(0.02)
  end
  error(string.format('%d process(es) with %q survived: %s', #left, s, table.concat(left, ' ')))
end

describe('cseng.proc', function()
  it('returns the exit code, stdout and stderr, and timings', function()
    local r = assert(proc.run { argv = { 'sh', '-c', 'printf out; printf err >&2; exit 3' } })
    assert.equal(3, r.code)
    assert.is_nil(r.signal)
    assert.equal('out', r.stdout)
    assert.equal('err', r.stderr)
    assert.is_false(r.timed_out)
    assert.equal(0, r.stdout_dropped)
    assert.equal(0, r.stderr_dropped)
    assert.is_true(math.type(r.elapsed_ns) == 'integer' and r.elapsed_ns > 0)
    assert.is_true(r.elapsed > 0 and r.elapsed < 5)
    assert.is_true(r.pid > 0)
  end)

  it('reports a death by signal with its name and the shell-style code', function()
    local r = assert(proc.run { argv = { 'sh', '-c', 'kill -KILL $$' } })
    assert.equal('SIGKILL', r.signal)
    assert.equal(137, r.code)
  end)

  it('round-trips stdin, including an empty one', function()
    local r = assert(proc.run { argv = { 'cat' }, stdin = 'hello\nworld\n' })
    assert.equal('hello\nworld\n', r.stdout)
    r = assert(proc.run { argv = { 'cat' }, stdin = '' })
    assert.equal('', r.stdout)
    assert.equal(0, r.code)
    -- without stdin the child reads /dev/null instead of our terminal
    r = assert(proc.run { argv = { 'cat' }, timeout = 5 })
    assert.equal('', r.stdout)
    assert.is_false(r.timed_out)
  end)

  it('streams 10 MB of stdin through cat while reading its output', function()
    local chunk = string.rep('0123456789abcdef', 64) -- 1 KiB
    local big = string.rep(chunk, 10 * 1024)
    local r = assert(proc.run { argv = { 'cat' }, stdin = big, tail_bytes = 16 * 1024 * 1024, timeout = 30 })
    assert.equal(0, r.code)
    assert.equal(#big, #r.stdout)
    assert.is_true(r.stdout == big, 'output differs from input')
    assert.equal(0, r.stdout_dropped)
  end)

  it('survives a child that exits without reading a large stdin', function()
    local r = assert(proc.run { argv = { 'true' }, stdin = string.rep('x', 4 * 1024 * 1024), timeout = 10 })
    assert.equal(0, r.code)
    assert.is_false(r.timed_out)
  end)

  it('replaces the environment with env and extends it with env_add', function()
    local r = assert(proc.run { argv = { '/usr/bin/env' }, env = { ONLY = 'one' } })
    assert.equal('ONLY=one\n', r.stdout)
    local path = os.getenv('PATH')
    r = assert(proc.run { argv = { 'sh', '-c', 'printf "%s|%s" "$ADDED" "$PATH"' }, env_add = { ADDED = 'two' } })
    assert.equal('two|' .. path, r.stdout)
    r = assert(proc.run { argv = { 'sh', '-c', 'printf "%s" "${HOME-unset}"' }, env_add = { HOME = false } })
    assert.equal('unset', r.stdout)
    r = assert(proc.run { argv = { '/usr/bin/env' }, env = { A = '1' }, env_add = { B = 2 } })
    local lines = {}
    for l in r.stdout:gmatch('[^\n]+') do lines[#lines + 1] = l end
    table.sort(lines)
    assert.same({ 'A=1', 'B=2' }, lines)
  end)

  it('runs in cwd', function()
    local r = assert(proc.run { argv = { 'pwd' }, cwd = '/tmp' })
    assert.equal('/tmp\n', r.stdout)
    local ok, msg, code = proc.run { argv = { 'pwd' }, cwd = '/nonexistent-cseng-dir' }
    assert.is_nil(ok)
    assert.equal('ENOENT', code)
    assert.is_string(msg)
  end)

  it('returns nil, msg, ENOENT for a missing program', function()
    local ok, msg, code = proc.run { argv = { 'cseng-no-such-program-xyz' } }
    assert.is_nil(ok)
    assert.equal('ENOENT', code)
    assert.matches('cseng%-no%-such%-program%-xyz', msg)
  end)

  it('raises on misuse', function()
    assert.has_error(function() proc.run {} end)
    assert.has_error(function() proc.run { argv = {} } end)
    assert.has_error(function() proc.run { argv = { 'true' }, stdin = {} } end)
    assert.has_error(function() proc.run { argv = { 'true' }, timeout = 'soon' } end)
  end)

  it('times out, kills the whole group and leaves no process behind', function()
    local m = marker()
    local t0 = clock.now()
    local r = assert(proc.run { argv = { 'sh', '-c', 'sleep ' .. m .. ' & sleep ' .. m .. '; echo never' }, timeout = 0.3 })
    local secs = (clock.now() - t0) / 1e9
    assert.is_true(r.timed_out)
    assert.equal('SIGTERM', r.signal)
    assert.equal('', r.stdout)
    assert.is_true(secs >= 0.3 and secs < 2, 'took ' .. secs .. ' s')
    assert.same({}, survivors(m)) -- no waiting: the call returns only once the group is gone
  end)

  it('escalates to SIGKILL after the grace when TERM is ignored', function()
    local m = marker()
    local t0 = clock.now()
    local r = assert(proc.run {
      argv = { 'sh', '-c', "trap '' TERM; sleep " .. m .. ' & wait; sleep ' .. m },
      timeout = 0.2, kill_grace = 0.3,
    })
    local secs = (clock.now() - t0) / 1e9
    assert.is_true(r.timed_out)
    assert.equal('SIGKILL', r.signal)
    assert.is_true(secs >= 0.5 and secs < 3, 'took ' .. secs .. ' s')
    assert_none_survive(m)
  end)

  it('kills background children once the leader exits, so they neither hold the call nor survive', function()
    local m = marker()
    local t0 = clock.now()
    local r = assert(proc.run { argv = { 'sh', '-c', 'sleep ' .. m .. ' & echo started' }, timeout = 20 })
    assert.is_true((clock.now() - t0) / 1e9 < 3)
    assert.equal(0, r.code)
    assert.is_false(r.timed_out)
    assert.equal('started\n', r.stdout)
    assert_none_survive(m)
  end)

  it('keeps only the tail of a 5 MB output and counts what it dropped', function()
    local r = assert(proc.run {
      argv = { 'sh', '-c', 'head -c 5000000 /dev/zero | tr "\\0" a; printf END; printf E >&2' },
      tail_bytes = 1000,
    })
    assert.equal(0, r.code)
    assert.equal(1000, #r.stdout)
    assert.equal(string.rep('a', 997) .. 'END', r.stdout)
    assert.equal(5000003 - 1000, r.stdout_dropped)
    assert.equal('E', r.stderr)
    assert.equal(0, r.stderr_dropped)
    -- the default cap is 1 MiB
    r = assert(proc.run { argv = { 'head', '-c', '3000000', '/dev/zero' } })
    assert.equal(1024 * 1024, #r.stdout)
    assert.equal(3000000 - 1024 * 1024, r.stdout_dropped)
    r = assert(proc.run { argv = { 'sh', '-c', 'echo hi; echo there >&2' }, tail_bytes = 0 })
    assert.equal('', r.stdout)
    assert.equal(3, r.stdout_dropped)
    assert.equal(6, r.stderr_dropped)
  end)

  it('runs 50 processes concurrently from 50 tasks', function()
    local t0 = clock.now()
    local ts = {}
    for i = 1, 50 do
      ts[i] = task.spawn(function()
        return assert(proc.run { argv = { 'sh', '-c', 'sleep 0.3; echo ' .. i }, timeout = 20 })
      end)
    end
    for i = 1, 50 do
      local ok, r = ts[i]:join()
      assert.is_true(ok, tostring(r))
      assert.equal(i .. '\n', r.stdout)
      assert.equal(0, r.code)
    end
    local secs = (clock.now() - t0) / 1e9
    assert.is_true(secs < 10, 'ran concurrently (' .. secs .. ' s)')
  end)

  it('kills the child of a cancelled task', function()
    local m = marker()
    local t = task.spawn(function()
      return proc.run { argv = { 'sh', '-c', 'sleep ' .. m .. ' & sleep ' .. m } }
    end)
    for _ = 1, 100 do -- wait until the children exist, so the test can fail
      if #survivors(m) >= 2 then break end
      task.sleep(0.01)
    end
    assert.is_true(#survivors(m) >= 2)
    t:cancel()
    local ok, err = t:join()
    assert.is_false(ok)
    assert.equal('ECANCELED', err.code)
    assert_none_survive(m)
  end)

  it('cancels a task whose run has finished but which has not resumed yet', function()
    -- The scene needs the canceller queued ahead of t's resumption; when the child's exit was
    -- already taken in the same turn that armed the timer (a fast spawn), t finished first and
    -- the cancel found nothing: that attempt proves nothing, so it is set up again.
    local ok, err
    for _ = 1, 10 do
      local t = task.spawn(function() return proc.run { argv = { 'true' } } end)
      local canceller = task.spawn(function()
        task.sleep(0.001)
        t:cancel()
      end)
      task.yield() -- t spawns its child, the canceller arms its timer
      -- Block the loop: the child exits and the timer falls due meanwhile. In the next loop
      -- turn timers run first, so the canceller is queued ahead of t, whose run is complete.
      os.execute('sleep 0.3')
      assert.is_true((canceller:join()))
      ok, err = t:join()
      if not ok then break end
    end
    assert.is_false(ok)
    assert.equal('ECANCELED', err.code)
  end)

  describe('spawn', function()
    it('runs a long-lived child: pid, kill, wait', function()
      local m = marker()
      local p = assert(proc.spawn { argv = { 'sleep', m } })
      assert.is_true(p:pid() > 0)
      assert.equal(1, #survivors(m))
      local r, msg, code = p:wait(0.05)
      assert.is_nil(r)
      assert.equal('ETIMEDOUT', code)
      assert.is_string(msg)
      assert.is_true(p:kill('TERM'))
      r = assert(p:wait(5))
      assert.equal('SIGTERM', r.signal)
      assert.equal(143, r.code)
      -- waiting again returns the same result at once
      assert.equal('SIGTERM', p:wait().signal)
      p:close()
      assert.has_error(function() p:pid() end)
      assert_none_survive(m)
    end)

    it('takes the same signal names as sys.kill: TERM, SIGTERM, SIGSTOP, SIGCONT, numbers', function()
      local sys = require('cseng.sys')
      local m = marker()
      local p = assert(proc.spawn { argv = { 'sleep', m } })
      assert.is_true(sys.kill(p:pid(), 'SIGSTOP'))
      assert.is_true(sys.kill(p:pid(), 'SIGCONT')) -- refused before engine/aux.c: one parser now
      assert.is_true(sys.kill(p:pid(), 'CONT'))
      assert.is_true(p:kill('SIGCONT'))
      assert.is_true(p:kill(0)) -- signal 0: the group exists
      for _, bad in ipairs({ 'SIGNOPE', 'term', '' }) do
        local ok1, e1 = pcall(sys.kill, p:pid(), bad)
        local ok2, e2 = pcall(p.kill, p, bad)
        assert.is_false(ok1)
        assert.is_false(ok2)
        assert.matches("unknown signal '" .. bad .. "'", e1, 1, true)
        assert.matches("unknown signal '" .. bad .. "'", e2, 1, true)
      end
      assert.is_true(p:kill('SIGTERM'))
      assert.equal('SIGTERM', assert(p:wait(5)).signal)
      p:close()
      assert_none_survive(m)
    end)

    it('writes output to files, or discards it', function()
      local out = os.tmpname()
      local p = assert(proc.spawn { argv = { 'sh', '-c', 'echo to-file; echo to-null >&2' }, stdout = out })
      local r = p:wait()
      assert.equal(0, r.code)
      local f = assert(io.open(out))
      assert.equal('to-file\n', f:read('a'))
      f:close()
      os.remove(out)
      local ok, _, code = proc.spawn { argv = { 'true' }, stdout = '/nonexistent-cseng-dir/x' }
      assert.is_nil(ok)
      assert.equal('ENOENT', code)
    end)

    it('kills the group when closed (TERM, then KILL after the grace)', function()
      local m = marker()
      do
        local _ <close> = assert(proc.spawn { argv = { 'sh', '-c', "trap '' TERM; sleep " .. m .. ' & wait' }, kill_grace = 0.2 })
        for _ = 1, 100 do
          if #survivors(m) >= 1 then break end
          task.sleep(0.01)
        end
        assert.is_true(#survivors(m) >= 1)
      end
      assert_none_survive(m)
    end)

    it('kills the group when garbage-collected', function()
      local m = marker()
      local p = assert(proc.spawn { argv = { 'sleep', m } }) -- luacheck: ignore 231 (dropped for the GC)
      for _ = 1, 100 do
        if #survivors(m) >= 1 then break end
        task.sleep(0.01)
      end
      assert.equal(1, #survivors(m))
      p = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      assert_none_survive(m)
    end)

    it('cancels a task waiting on a child without killing it', function()
      local m = marker()
      local p = assert(proc.spawn { argv = { 'sleep', m } })
      local t = task.spawn(function() return p:wait() end)
      task.sleep(0.05)
      t:cancel()
      assert.is_false((t:join()))
      assert.equal(1, #survivors(m))
      p:close()
      assert_none_survive(m)
    end)
  end)

  -- the engine's minor page faults so far (/proc/self/stat, the 10th field)
  local function minflt()
    local f = {}
    for w in assert(io.open('/proc/self/stat')):read('a'):match('%) (.*)'):gmatch('%S+') do f[#f + 1] = w end
    return tonumber(f[8])
  end

  it('starts a child without copying the engine: its own writes after a spawn cost no page faults', function()
    -- fork() write-protects every page of the parent, so each page it writes after the spawn
    -- faults once; a vfork-style spawn (posix_spawn) shares them with the child until its exec
    local t = {}
    for i = 1, 200000 do t[i] = i end -- 3.2 MB of array: 781 pages
    for i = 1, #t do t[i] = i + 1 end -- present and written before the spawn
    local r
    local before = minflt()
    r = assert(proc.run { argv = { '/bin/true' } })
    for i = 1, #t do t[i] = i + 2 end
    local faults = minflt() - before
    assert.equal(0, r.code)
    assert.is_true(faults < 300, faults .. ' page faults writing 781 pages after a spawn')
    -- the same for proc.spawn
    before = minflt()
    local p = assert(proc.spawn { argv = { '/bin/true' } })
    for i = 1, #t do t[i] = i + 3 end
    faults = minflt() - before
    assert.equal(0, assert(p:wait(10)).code)
    p:close()
    assert.is_true(faults < 300, faults .. ' page faults writing 781 pages after a spawn')
  end)

  it('sets a child up as a session leader, every signal at its default and none blocked', function()
    -- the engine ignores SIGPIPE and may block signals; its children must not inherit that
    local r = assert(proc.run { argv = { '/bin/sh', '-c', 'grep -E "^(SigBlk|SigIgn)" /proc/self/status; ps -o sid= -o pid= -p $$' } })
    assert.equal(0, r.code, r.stderr)
    assert.matches('SigBlk:%s+0+\n', r.stdout)
    assert.matches('SigIgn:%s+0+\n', r.stdout)
    local sid, pid = r.stdout:match('\n%s*(%d+)%s+(%d+)%s*$')
    assert.equal(pid, sid)
  end)

  it('looks the program up in the child\'s own PATH, and runs a script without a #! line with sh', function()
    local fs = require('cseng.fs')
    local dir = assert(fs.tempdir('cseng-proc-path-'))
    assert(fs.write(dir .. '/cseng-only-here', 'echo "from the script: $1"\n', { mode = '0755' }))
    local r = assert(proc.run { argv = { 'cseng-only-here', 'x' }, env_add = { PATH = dir .. ':/usr/bin:/bin' } })
    assert.equal('from the script: x\n', r.stdout)
    local ok, msg, code = proc.run { argv = { 'cseng-only-here' } }
    assert.is_nil(ok)
    assert.equal('ENOENT', code, msg)
    assert(fs.chmod(dir .. '/cseng-only-here', '0644'))
    ok, msg, code = proc.run { argv = { dir .. '/cseng-only-here' } }
    assert.is_nil(ok)
    assert.equal('EACCES', code, msg)
    fs.remove_tree(dir)
  end)

  it('a child\'s sys.usage().maxrss_kb is its own peak, not the resident set of the engine that started it', function()
    local sys, fs = require('cseng.sys'), require('cseng.fs')
    local junk = {}
    for i = 1, 600000 do junk[i] = { i } end -- the parent: some 60 MB more
    local parent = sys.usage().maxrss_kb
    local dir = assert(fs.tempdir('cseng-proc-rss-'))
    assert(fs.write(dir .. '/rss.lua', "print(require('cseng.sys').usage().maxrss_kb)"))
    local r = assert(proc.run { argv = { sys.realpath('/proc/self/exe'), 'lua', dir .. '/rss.lua' } })
    fs.remove_tree(dir)
    assert.equal(0, r.code, r.stderr)
    local child = assert(tonumber(r.stdout:match('%d+')), r.stdout)
    assert.is_true(parent > 60000, tostring(parent))
    assert.is_true(child < parent // 2, string.format('child %d KiB, its parent %d KiB', child, parent))
    assert.equal(600000, #junk) -- held to the end
  end)

  it('finds programs on PATH', function()
    assert.matches('/sh$', proc.which('sh'))
    local ok, _, code = proc.which('cseng-no-such-program-xyz')
    assert.is_nil(ok)
    assert.equal('ENOENT', code)
  end)
end)
