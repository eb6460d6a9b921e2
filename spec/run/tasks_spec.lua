-- The main job end to end on the local provider (bubblewrap): datasets, staging, runner,
-- results, resume and signals. These run real sandboxes.
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local H = require('spec.helpers.common')

local ROOT, CSENG = H.ROOT, H.CSENG
local SMOKE16 = ROOT .. '/../shared/data/terminalbench_2026_03_05_smoke16.jsonl'

local tmp = H.tempdir('cseng-runner-spec')
teardown(H.remove_tempdirs)

-- A tar.gz built by python3's tarfile (an independent writer), base64.
local function evil_archive(kind)
  local script = [[
import tarfile, io, sys, base64
kind = sys.argv[1]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w:gz') as t:
    def add(name, data=b'x', **kw):
        ti = tarfile.TarInfo(name); ti.size = len(data)
        for k, v in kw.items(): setattr(ti, k, v)
        t.addfile(ti, io.BytesIO(data))
    add('task.toml', b'version = "1.0"\n'); add('instruction.md', b'do it'); add('tests/test.sh', b'exit 0')
    if kind == 'dotdot': add('../escaped-dotdot.txt')
    if kind == 'absolute': add('/tmp/cseng-escaped-absolute.txt')
    if kind == 'symlink':
        ti = tarfile.TarInfo('link'); ti.type = tarfile.SYMTYPE; ti.linkname = '/tmp'; t.addfile(ti)
        add('link/cseng-escaped-symlink.txt')
    if kind == 'badtoml':
        add('environment/Dockerfile', b'FROM x\n')
sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
]]
  local r = assert(proc.run { argv = { 'python3', '-c', script, kind } })
  assert(r.code == 0, r.stderr)
  return r.stdout
end

local function write_rows(name, rows)
  local lines = {}
  for i, r in ipairs(rows) do lines[i] = type(r) == 'string' and r or cjson.encode(r) end
  local p = tmp .. '/' .. name
  assert(fs.write(p, table.concat(lines, '\n') .. '\n'))
  return p
end

local function load_error(path)
  local ok, err = pcall(dataset.load, path, { cache_dir = tmp .. '/cache' })
  assert.is_false(ok, 'expected a load error')
  assert.is_true(require('cseng.lib.errors').registered(err.code), tostring(err.code))
  return err.message
end

describe('datasets', function()
  it('names the file, the row and the field of a bad row', function()
    local good = { task_id = 'ok', instruction = 'x', task_files = { encoding = 'tar.gz+base64', content = evil_archive('none') } }
    local p = write_rows('bad.jsonl', { good, { instruction = 'no id', task_files = good.task_files } })
    assert.equal(p .. ': row 2: task_id: missing or not a string', load_error(p))
    p = write_rows('b64.jsonl', { { task_id = 'a', task_files = { encoding = 'tar.gz+base64', content = '!!!notbase64' } } })
    assert.matches('^' .. p:gsub('%p', '%%%0') .. ': row 1: task_files.content: not valid base64', load_error(p))
    p = write_rows('enc.jsonl', { { task_id = 'a', task_files = { encoding = 'zip', content = '' } } })
    assert.matches("row 1: task_files.encoding: expected 'tar.gz%+base64', got zip", load_error(p))
    p = write_rows('broken.jsonl', { { task_id = 'a', task_files = { encoding = 'tar.gz+base64', content = crypto.base64('not a tar archive at all') } } })
    assert.matches('row 1: task_files.content: archive refused', load_error(p))
    p = write_rows('json.jsonl', { '{"task_id": "a", ' })
    assert.matches('row 1: not valid JSON', load_error(p))
  end)

  it('reports a task.toml that does not parse, with its line', function()
    local dir = tmp .. '/tb2/broken-toml'
    assert(fs.mkdir_p(dir .. '/tests'))
    fs.write(dir .. '/task.toml', 'version = "1.0"\n[verifier]\ntimeout_sec = = 3\n')
    fs.write(dir .. '/instruction.md', 'x')
    fs.write(dir .. '/tests/test.sh', 'exit 0')
    local err = load_error(dir)
    assert.matches('broken%-toml: task.toml: task.toml:3: ', err)
    fs.write(dir .. '/task.toml', '[verifier]\ntimeout_sec = "soon"\n')
    assert.matches('task.toml verifier.timeout_sec: expected a number, got string', load_error(dir))
  end)

  it('skips bad rows with --skip-bad-rows and keeps the good ones', function()
    local good = { task_id = 'ok', instruction = 'x', task_files = { encoding = 'tar.gz+base64', content = evil_archive('none') } }
    local p = write_rows('mixed.jsonl', { good, { task_id = 'bad' }, '{oops' })
    local tasks, bad = dataset.load(p, { skip_bad_rows = true, cache_dir = tmp .. '/cache' })
    assert.equal(1, #tasks)
    assert.equal('ok', tasks[1].id)
    assert.equal(2, #bad)
    assert.matches('row 2: task_id: row has neither task_files', bad[1].error)
    assert.matches('row 3: not valid JSON', bad[2].error)
  end)

  for _, kind in ipairs({ 'dotdot', 'absolute', 'symlink' }) do
    it('refuses a hostile task archive (' .. kind .. ') and writes nothing outside', function()
      local parent_before = fs.list(tmp)
      local p = write_rows(kind .. '.jsonl', { { task_id = 'evil', instruction = 'x',
        task_files = { encoding = 'tar.gz+base64', content = evil_archive(kind) } } })
      local err = load_error(p)
      assert.matches('row 1: task_files.content: archive refused', err)
      assert.is_nil(fs.lstat(tmp .. '/escaped-dotdot.txt'))
      assert.is_nil(fs.lstat('/tmp/cseng-escaped-absolute.txt'))
      assert.is_nil(fs.lstat('/tmp/cseng-escaped-symlink.txt'))
      local function without(list, drop)
        local t = {}
        for _, n in ipairs(list) do if not drop[n] then t[#t + 1] = n end end
        return t
      end
      assert.same(without(parent_before, { cache = true }), without(fs.list(tmp), { cache = true, [kind .. '.jsonl'] = true }))
      for _, n in ipairs(fs.list(tmp .. '/cache/tasks') or {}) do
        assert.is_nil(n:find('%.tmp'), 'a refused archive leaves no staging directory: ' .. n)
      end
    end)
  end

  it('reads the smoke16 parquet to the same tasks as the JSONL beside it', function()
    local a = dataset.load(SMOKE16, { cache_dir = tmp .. '/cache' })
    local b = dataset.load(SMOKE16:gsub('%.jsonl$', '.parquet'), { cache_dir = tmp .. '/cache' })
    assert.equal(16, #a)
    assert.equal(#a, #b)
    for i = 1, #a do
      assert.equal(a[i].id, b[i].id)
      assert.equal(a[i].instruction, b[i].instruction)
      assert.equal(a[i].sha256, b[i].sha256, 'task archive bytes differ for ' .. a[i].id)
    end
  end)

  it('keeps data/smoke.jsonl up to date with data/tasks and data/swesmith', function()
    local out = tmp .. '/smoke.jsonl'
    local r = assert(proc.run { argv = { CSENG, 'dataset', 'pack', 'data/tasks', 'data/swesmith/instances.jsonl', '-o', out }, cwd = ROOT })
    assert.equal(0, r.code, r.stderr)
    assert.equal(crypto.sha256_hex(assert(fs.read(ROOT .. '/data/smoke.jsonl'))), crypto.sha256_hex(assert(fs.read(out))),
      'data/smoke.jsonl is stale: run ./cseng dataset pack data/tasks data/swesmith/instances.jsonl -o data/smoke.jsonl')
  end)
end)

local function run(opts)
  opts = opts or {}
  opts.provider = opts.provider or 'local'
  opts.dataset = opts.dataset or (ROOT .. '/data/smoke.jsonl')
  opts.solver = opts.solver or 'gold'
  opts.mode = opts.mode or 'cold'
  opts.concurrency = opts.concurrency or 2
  opts.output = opts.output or (tmp .. '/results')
  opts.quiet = true
  local status, info = frame.run('tasks', opts)
  local s = results.summary(results.read(info.jsonl))
  return status, s, info
end

-- A dataset of n TB2 tasks that cannot finish: the gold solution sleeps far past any trial
-- timeout, so a timeout verdict does not depend on how fast this machine is.
local function endless_tasks(n)
  local root = tmp .. '/endless-' .. n
  for i = 1, n do
    local d = root .. '/endless-' .. i
    assert(fs.mkdir_p(d .. '/environment')); assert(fs.mkdir_p(d .. '/solution')); assert(fs.mkdir_p(d .. '/tests'))
    assert(fs.write(d .. '/task.toml', 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 900.0\n'))
    assert(fs.write(d .. '/instruction.md', 'never finishes ' .. i .. '\n'))
    assert(fs.write(d .. '/environment/Dockerfile', 'FROM debian:bookworm-slim\nWORKDIR /workspace\n'))
    assert(fs.write(d .. '/solution/solve.sh', '#!/bin/bash\nexec sleep 100000\n'))
    assert(fs.write(d .. '/tests/test.sh', '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n'))
  end
  return root
end

local function by_outcome(s)
  local n = { passed = 0, failed = 0, error = 0 }
  for _, r in ipairs(s.results) do n[r.outcome] = n[r.outcome] + 1 end
  return n
end

describe('the local provider', function()
  it('passes every bundled task with gold, cold', function()
    local status, s = run {}
    local n = by_outcome(s)
    for _, r in ipairs(s.results) do
      if r.outcome ~= 'passed' then print(r.task_id, r.outcome, r.error, r.stdout_tail) end
    end
    assert.equal(0, status)
    assert.is_true(#s.results >= 20)
    assert.equal(#s.results, n.passed)
    for _, r in ipairs(s.results) do
      assert.equal(1, r.reward)
      assert.equal('reward.txt', r.reward_rule)
      for _, p in ipairs({ 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }) do
        assert.is_number(r.phases[p .. '_seconds'], p)
      end
      -- built from its recipe on the base root filesystem, RUN steps included (spec/providers/local/env_spec.lua)
      assert.equal('native', r.environment.mode, r.task_id)
      assert.is_number(r.phases.build_seconds, r.task_id)
      for _, g in ipairs(r.fidelity_gaps or {}) do assert.not_equal('RUN', g.kind, r.task_id) end
    end
  end)

  it('scores 0 on every bundled task with nop, with no infrastructure error', function()
    local _, s = run { solver = 'nop' }
    local n = by_outcome(s)
    assert.is_true(#s.results >= 20)
    assert.equal(0, n.error)
    assert.equal(#s.results, n.failed)
  end)

  it('passes every bundled task warm, from prepared roots', function()
    local status, s, last = run { mode = 'warm' }
    assert.equal(0, status)
    assert.equal(#s.results, by_outcome(s).passed)
    local prewarmed = 0
    for _, e in ipairs(results.read(last.jsonl)) do if e.event == 'prewarmed' then prewarmed = prewarmed + 1 end end
    assert.equal(#s.results, prewarmed)
    assert.is_string(s.results[1].warm_artifact)
    for _, r in ipairs(s.results) do
      assert.equal('warm_artifact', r.environment.method, r.task_id)
      for _, g in ipairs(r.fidelity_gaps or {}) do assert.not_equal('RUN', g.kind, r.task_id) end
    end
  end)

  it('runs the verifiers of the 16 real TerminalBench tasks without an infrastructure error', function()
    -- host mode: their RUN steps need the network (apt-get, pip), which these machines lack
    local _, s = run { dataset = SMOKE16, provider_config = { host_root = true } }
    assert.equal(16, #s.results)
    for _, r in ipairs(s.results) do
      assert.equal('failed', r.outcome, r.task_id .. ': ' .. tostring(r.error))
      assert.equal(0, r.reward)
      assert.is_table(r.fidelity_gaps, r.task_id)
      assert.equal('FROM', r.fidelity_gaps[1].kind)
    end
  end)

  it('destroys every sandbox it allocated, allocation first', function()
    local _, _, last = run { task_limit = 3 }
    local events = results.read(last.jsonl)
    local seen = {}
    for _, e in ipairs(events) do
      if e.event == 'allocated' then seen[e.sandbox_id] = 'allocated'
      elseif e.event == 'trial' then assert.is_not_nil(seen[e.sandbox_id], 'allocation recorded before the trial')
      elseif e.event == 'destroyed' then seen[e.sandbox_id] = 'destroyed' end
    end
    assert.same({}, results.live_allocations(events))
    assert.same({}, fs.list('/tmp/cseng-local/sandboxes') and (function()
      local mine = {}
      for _, id in ipairs(fs.list('/tmp/cseng-local/sandboxes')) do if seen[id] then mine[#mine + 1] = id end end
      return mine
    end)() or {})
  end)

  it('records a trial timeout as an error and still destroys the sandbox', function()
    local _, s, last = run { dataset = endless_tasks(1), timeout_seconds = 1 }
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('ETIMEDOUT', r.error_code)
    assert.matches('trial timed out after 1 s', r.error)
    assert.same({}, results.live_allocations(results.read(last.jsonl)))
  end)

  it('bounds a warm trial by its timeout (the warm preparation, or a solve that never ends)', function()
    local _, s, last = run { dataset = endless_tasks(2), mode = 'warm', timeout_seconds = 1 }
    assert.equal(2, #s.results)
    for _, r in ipairs(s.results) do
      assert.equal('error', r.outcome, r.task_id)
      assert.equal('ETIMEDOUT', r.error_code, r.task_id)
    end
    assert.same({}, results.live_allocations(results.read(last.jsonl)))
  end)

  it('stops allocating after a cleanup failure, and says so', function()
    local base = require('providers.local')
    package.loaded['providers.flaky_destroy'] = setmetatable({
      name = 'flaky_destroy',
      destroy = function(client, sb) base.destroy(client, sb); return nil, 'injected destroy failure', 'EINJECTED' end,
    }, { __index = base })
    local status, s, last = run { provider = 'flaky_destroy', concurrency = 1, task_limit = 5 }
    package.loaded['providers.flaky_destroy'] = nil
    assert.equal(1, status)
    assert.equal(1, #s.results)
    local events = results.read(last.jsonl)
    local failed, finished = 0, nil
    for _, e in ipairs(events) do
      if e.event == 'cleanup_failed' then failed = failed + 1 end
      if e.event == 'run_finished' then finished = e end
    end
    assert.equal(1, failed)
    assert.equal('cleanup_failed', finished.status)
  end)
end)

describe('interruptions', function()
  local function wait_for(path, pred, seconds)
    local deadline = require('cseng.clock').now() + seconds * 1e9
    while require('cseng.clock').now() < deadline do
      if fs.exists(path) then
        local ok, events = pcall(results.read, path)
        if ok and pred(events) then return events end
      end
      task.sleep(0.05)
    end
    error('timed out waiting on ' .. path)
  end

  local function count(events, kind)
    local n = 0
    for _, e in ipairs(events) do if e.event == kind then n = n + 1 end end
    return n
  end

  it('completes a run killed with SIGKILL halfway, with --resume, each task recorded once', function()
    local out = tmp .. '/killed.json'
    -- the first 10 tasks (--resume takes the selection from the log); every task's gold run is above
    local LIMIT = 10
    local p = assert(proc.spawn { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--concurrency', '1', '--task-limit', tostring(LIMIT),
      '--output', out, '--quiet' }, cwd = ROOT })
    local jsonl = out:gsub('%.json$', '.jsonl')
    wait_for(jsonl, function(ev) return count(ev, 'trial') >= 4 end, 120)
    p:kill('KILL')
    p:wait()
    local before = results.read(jsonl)
    local r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--resume', jsonl, '--quiet' }, cwd = ROOT, timeout = 600 })
    assert.equal(0, r.code, r.stderr)
    local events = results.read(jsonl)
    local per_task = {}
    for _, e in ipairs(events) do
      if e.event == 'trial' then per_task[e.task_id] = (per_task[e.task_id] or 0) + 1 end
    end
    local tasks = { table.unpack(dataset.load(ROOT .. '/data/smoke.jsonl'), 1, LIMIT) }
    for _, t in ipairs(tasks) do assert.equal(1, per_task[t.id], t.id) end
    local n = 0
    for _ in pairs(per_task) do n = n + 1 end
    assert.equal(#tasks, n) -- no task outside the selection
    assert.is_true(count(before, 'trial') < #tasks)
    assert.same({}, results.live_allocations(events))
    local summary = cjson.decode((assert(fs.read(out))))
    assert.equal(#tasks, summary.task_count)
    assert.equal(#tasks, summary.passed)
  end)

  it('on SIGINT destroys live sandboxes, writes the records and exits 130', function()
    local out = tmp .. '/interrupted.json'
    local p = assert(proc.spawn { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--concurrency', '2', '--output', out, '--quiet' }, cwd = ROOT })
    local jsonl = out:gsub('%.json$', '.jsonl')
    wait_for(jsonl, function(ev) return count(ev, 'trial') >= 1 and #results.live_allocations(ev) >= 1 end, 120)
    p:kill('INT')
    local res = p:wait(60)
    assert.equal(130, res.code)
    local events = results.read(jsonl)
    assert.same({}, results.live_allocations(events))
    local finished
    for _, e in ipairs(events) do if e.event == 'run_finished' then finished = e end end
    assert.equal('interrupted', finished.status)
    assert.is_true(fs.exists(out))
  end)
end)
