-- fs.append{sync=true} inside a task: write + fsync on libuv's threadpool while the task yields.
local fs = require('cseng.fs')
local task = require('cseng.task')

describe('fs.append with sync inside tasks', function()
  local dir
  before_each(function() dir = assert(fs.tempdir('cseng-append')) end)
  after_each(function() fs.remove_tree(dir) end)

  it('writes every record whole from 100 concurrent tasks', function()
    local path = dir .. '/log'
    local ts = {}
    for i = 1, 100 do
      ts[i] = task.spawn(function()
        return assert(fs.append(path, string.format('%03d %s\n', i, string.rep('x', 5000)), { sync = true }))
      end)
    end
    for i = 1, 100 do assert.is_true((ts[i]:join())) end
    local seen = {}
    for line in assert(fs.read(path)):gmatch('([^\n]*)\n') do
      local n, body = line:match('^(%d+) (x+)$')
      assert.is_not_nil(n, 'a torn or mixed line')
      assert.equal(5000, #body)
      seen[tonumber(n)] = true
    end
    for i = 1, 100 do assert.is_true(seen[i], 'missing record ' .. i) end
  end)

  it('group commit: 100 synced appends made at once share a few fsyncs, every record lands', function()
    local path = dir .. '/log'
    local s0 = fs.commit_stats()
    local ts = {}
    for i = 1, 100 do ts[i] = task.spawn(function() return assert(fs.append(path, i .. '\n', { sync = true })) end) end
    for i = 1, 100 do assert.is_true((ts[i]:join())) end
    local s1 = fs.commit_stats()
    assert.equal(100, s1.records - s0.records)
    -- the first goes alone; the rest, made while its fsync runs, wait for one more
    assert.is_true(s1.fsyncs - s0.fsyncs <= 10, (s1.fsyncs - s0.fsyncs) .. ' fsyncs for 100 records')
    local n = 0
    for _ in assert(fs.read(path)):gmatch('%d+\n') do n = n + 1 end
    assert.equal(100, n)
  end)

  it('lets other tasks run while it waits', function()
    local ticks = 0
    local ticker = task.spawn(function() while true do task.yield(); ticks = ticks + 1 end end)
    for _ = 1, 20 do assert(fs.append(dir .. '/log', 'line\n', { sync = true })) end
    ticker:cancel()
    assert.is_true(ticks > 0, 'no other task ran during 20 synced appends')
  end)

  it('still lands the record when the appending task is cancelled', function()
    local path = dir .. '/log'
    local t = task.spawn(function() return fs.append(path, 'allocated sb-1\n', { sync = true }) end)
    task.yield() -- t runs, queues the write on the threadpool and waits
    assert.equal('waiting', t:status())
    t:cancel()
    t:join()
    -- the write finishes on the threadpool after the cancellation: wait for the whole line (the
    -- file may exist, empty, before the write lands; a loaded machine may take seconds)
    for _ = 1, 3000 do
      if fs.read(path) == 'allocated sb-1\n' then break end
      task.sleep(0.01)
    end
    assert.equal('allocated sb-1\n', fs.read(path))
  end)

  it('reports errors with the path and errno code', function()
    local ok, msg, code = fs.append(dir .. '/missing/dir/log', 'x', { sync = true })
    assert.is_nil(ok)
    assert.equal('ENOENT', code)
    assert.matches('missing/dir/log', msg)
  end)
end)
