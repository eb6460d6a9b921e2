-- The run log under a full disk and torn records: the writer cuts a torn
-- tail on open (and records a `log_repaired` event), readers keep every whole record of a log
-- whose torn record a later write landed on, a write failure (ENOSPC) stops new allocations at
-- once with one line and no traceback, and the run's log, on a small tmpfs this spec mounts,
-- then resumes and cleans up with 0 sandboxes live. One run per log: a second run given the
-- same --output is refused in one line.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local results = require('cseng.results.log')

local H = require('spec.helpers.runlog')
local ROOT, CSENG = H.ROOT, H.CSENG
local lizard_fake = require('spec.fakes').module('lizard')

local tmp, mnt, mounted
setup(function() tmp = assert(fs.tempdir('cseng-log-repair')) end)
teardown(function()
  if mounted then proc.run { argv = { 'umount', '-l', mnt }, timeout = 30 } end
  fs.remove_tree(tmp)
end)

local function write(name, text) return H.write(tmp, name, text) end
local count, smoke_count = H.count, H.smoke_count

describe('a torn record', function()
  it('is cut off when the log is opened again, and the cut is recorded', function()
    local whole = '{"event":"run_started","run_id":"r1"}\n{"event":"intent","run_id":"r1"}\n'
    local log = write('torn/a.jsonl', whole .. '{"event":"allocated","run_id":"r1","sandb')
    local w = results.open(log, 'r1')
    local text = fs.read(log)
    assert.equal(whole, text:sub(1, #whole))
    local events = results.read(log)
    assert.equal(3, #events)
    assert.equal('log_repaired', events[3].event)
    assert.equal(#'{"event":"allocated","run_id":"r1","sandb', events[3].torn_bytes)
    assert.equal(#whole, events[3].offset)
    w:event('trial', { task_id = 'x' })
    assert.equal('trial', results.read(log)[4].event)
    w:close()
  end)

  it('a whole log is left as it is (no repair event)', function()
    local whole = '{"event":"run_started","run_id":"r2"}\n'
    local log = write('torn/b.jsonl', whole)
    results.open(log, 'r2'):close()
    assert.equal(whole, fs.read(log))
  end)

  it('on which a later write landed: readers keep every whole record (report, cleanup)', function()
    -- what an older cseng left: a record torn by a full disk, the next one appended on its line
    local log = write('torn/c.jsonl', table.concat({
      '{"event":"run_started","kind":"tasks","provider":"local","run_id":"r3","time":"2026-01-01T00:00:00Z"}',
      '{"event":"trial","outcome":"passed","run_id":"r3","task_id":"t1","elapsed_seconds":1}',
      '{"event":"trial","outcome":"fai{"event":"trial","outcome":"failed","run_id":"r3","task_id":"t2","elapsed_seconds":2}',
      '{"event":"run_finished","run_id":"r3","status":"finished"}', '' }, '\n'))
    local events = results.read(log)
    assert.equal(4, #events)
    assert.equal('t2', events[3].task_id)
    local rep = assert(proc.run { argv = { CSENG, 'report', log, '--template', 'lua/reports/per_task.lua',
      '--output', tmp .. '/torn/c.md' }, cwd = ROOT, timeout = 120 })
    assert.equal(0, rep.code, rep.stderr)
    local cl = assert(proc.run { argv = { CSENG, 'cleanup', log }, cwd = ROOT, timeout = 120 })
    assert.equal(0, cl.code, cl.stderr)
    assert.matches('nothing to clean', cl.stdout)
  end)
end)

describe('one run per log', function()
  it('a second run given the same --output is refused in one line while the first goes on', function()
    local log = tmp .. '/locked/run.jsonl'
    -- the first run: holds its log (a plan whose dataset never finishes loading is not needed:
    -- the lock is taken by the writer, so this process holding a writer is the running run)
    local w = results.open(log, 'first')
    w:event('run_started', { provider = 'local' }, true)
    local r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--task-limit', '1', '--output', log, '--quiet' },
      cwd = ROOT, timeout = 120 })
    assert.equal(1, r.code)
    assert.equal(log .. ' is the log of another cseng run that is still going (one run per log: give this one ' ..
      'another --output)', (r.stderr:gsub('^cseng: ', ''):gsub('\n$', '')))
    assert.equal(1, #results.read(log), 'nothing was written by the refused run')
    r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--resume', log, '--quiet' }, cwd = ROOT, timeout = 120 })
    assert.equal(1, r.code)
    assert.matches('is the log of another cseng run', r.stderr)
    w:close()
    -- released: the next run may continue it
    local w2 = results.open(log, 'first')
    w2:close()
  end)
end)

describe('a bad --output', function()
  it('is one line naming the path, without a source position', function()
    local file = write('notadir', 'x')
    local r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--task-limit', '1', '--output',
      file .. '/run.jsonl', '--quiet' }, cwd = ROOT, timeout = 120 })
    assert.equal(1, r.code)
    assert.equal('cseng: cannot create the directory of the run log ' .. file .. '/run.jsonl: ' .. file ..
      ': File exists\n', r.stderr)
  end)
end)

describe('a full disk', function()
  it('stops allocating at once with one line; the log then resumes and cleans up, 0 live', function()
    mnt = tmp .. '/mnt'
    assert(fs.mkdir_p(mnt))
    local m = assert(proc.run { argv = { 'mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt }, timeout = 30 })
    assert.equal(0, m.code, 'mount a tmpfs (the spec runs as root): ' .. m.stderr)
    mounted = true
    local filled_at
    local function fill()
      -- every free page of the tmpfs: the log's next write fills its last page and is torn
      local ok = fs.append(mnt .. '/filler', string.rep('x', 4 * 1024 * 1024))
      assert(not ok, 'the filler filled the disk')
    end
    local n_tasks = smoke_count()
    assert.is_true(n_tasks >= 8, 'enough tasks to go on creating')
    local f = lizard_fake.start { latency = { create = function(n)
      if n == 3 then fill(); filled_at = n end
      return 0
    end } }
    local ok, err = pcall(function()
      local envf = write('full.env', 'LIZARD_API_KEY=' .. f.api_key .. '\n')
      local plan = H.lizard_plan(tmp, 'full.lua', f, 'concurrency = 2')
      local log = mnt .. '/full.jsonl'
      local r = assert(proc.run { argv = { CSENG, 'run', plan, '--output', log, '--quiet', '--env-file', envf },
        cwd = ROOT, timeout = 300 })
      assert.equal(3, filled_at)
      assert.equal(1, r.code, r.stderr)
      -- one line, no traceback and no source position; it names the log and the cause
      assert.is_nil(r.stderr:find('traceback', 1, true), r.stderr)
      assert.is_nil(r.stderr:find('%.lua:%d+'), r.stderr)
      assert.matches('cseng: stopped allocating: cannot write the run log ' .. log:gsub('%p', '%%%0') ..
        ': No space left on device', r.stderr)
      local st = f.stats()
      -- the log is whole: every torn write was cut back to the last whole record
      local text = assert(fs.read(log))
      assert.equal('\n', text:sub(-1))
      local events = results.read(log)
      assert.is_true(count(events, 'intent') >= 2)
      -- creates stop at once: every create the fake saw was announced by a whole intent record
      -- before it was sent, none after the first write that failed (how many records still fit
      -- in the log's last page once the disk is full depends on their sizes, not on the engine)
      assert.is_true(st.creates <= count(events, 'intent'),
        'creates ' .. st.creates .. ', intents in the log ' .. count(events, 'intent'))
      assert.is_true(st.creates < n_tasks, 'the run stopped creating: ' .. st.creates .. ' of ' .. n_tasks)
      -- space again: cleanup alone finds what the log could not record, by the run's labels
      assert(fs.remove(mnt .. '/filler'))
      local cl = assert(proc.run { argv = { CSENG, 'cleanup', log, '--env-file', envf }, cwd = ROOT, timeout = 120 })
      assert.equal(0, cl.code, cl.stderr)
      assert.equal(0, f.stats().live, cl.stdout .. cl.stderr)
      -- and the run resumes: every task recorded once, nothing left live
      local rr = assert(proc.run { argv = { CSENG, 'run', plan, '--resume', log, '--quiet', '--env-file', envf },
        cwd = ROOT, timeout = 300 })
      assert.equal(0, rr.code, rr.stderr)
      events = results.read(log)
      local per = {}
      for _, t in ipairs(results.trials(events)) do per[t.task_id] = (per[t.task_id] or 0) + 1 end
      local n = 0
      for _, c in pairs(per) do n = n + 1; assert.equal(1, c) end
      assert.equal(n_tasks, n)
      assert.same({}, results.live_allocations(events))
      assert.equal(0, f.stats().live)
    end)
    f.close()
    proc.run { argv = { 'umount', '-l', mnt }, timeout = 30 }
    mounted = false
    if not ok then error(err, 0) end
  end)
end)

describe('dataset lines', function()
  it('a line over the cap is a one-line error naming the file and row, without reading it whole', function()
    local path = write('big/rows.jsonl', '\n{"task_id":"' .. string.rep('b', 4096) .. '"}\n{"task_id":"a"}\n')
    local r = assert(proc.run { argv = { CSENG, 'dataset', 'validate', path }, cwd = ROOT, timeout = 60,
      env_add = { CSENG_MAX_LINE_BYTES = '1024' } })
    assert.equal(1, r.code)
    assert.equal('cseng: ' .. path .. ': row 2: line is over 1024 bytes (CSENG_MAX_LINE_BYTES raises the cap)\n', r.stderr)
    -- the iterator holds at most the cap: a 3 MiB line is refused at 1 MiB, never returned whole
    local jsonl = require('cseng.lib.jsonl')
    local huge = write('big/huge.jsonl', string.rep('x', 3 * 1024 * 1024) .. '\n')
    local iter = assert(jsonl.lines(huge, { max_line = 1024 * 1024 }))
    local lok, lerr = pcall(iter)
    assert.is_false(lok)
    assert.equal(huge .. ': line 1 is over 1048576 bytes', lerr.message)
    assert.equal('ELIMIT', lerr.code)
  end)
end)
