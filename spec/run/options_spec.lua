-- The everyday workflow, part 2: --retry-errors (a provider that fails the first create of every
-- task: each task ends passed, every attempt recorded), --resume --rerun-errors, --label,
-- --status-port on a tasks plan (the arena's JSON shape, `live` always a list), progress lines,
-- and cseng prewarm --list / --prune.
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local dataset = require('cseng.workload.dataset')
local fs = require('cseng.fs')
local http = require('cseng.http')
local task = require('cseng.task')
local proc = require('cseng.proc')
local cjson = require('cjson')
local H = require('spec.helpers.common')

local ROOT, CSENG = H.ROOT, H.CSENG
local DATA = ROOT .. '/data/smoke.jsonl'

local tmp = H.tempdir('cseng-workflow2-spec')
teardown(H.remove_tempdirs)

-- the first two bundled tasks (by id), whatever the dataset holds
local function two_tasks()
  local ids = {}
  for _, t in ipairs(dataset.load(DATA)) do ids[#ids + 1] = t.id end
  table.sort(ids)
  return { ids[1], ids[2] }
end

-- A provider over local whose first create of each task fails (keyed by the task label); with
-- `always`, every create of the tasks in it fails and the others' succeed.
local function flaky(name, always)
  local base = require('providers.local')
  local seen = { creates = 0 }
  package.loaded['providers.' .. name] = setmetatable({
    name = name,
    create = function(client, spec)
      seen.creates = seen.creates + 1
      local id = spec.labels and spec.labels['cseng.task'] or '?'
      if always then
        if always[id] then return nil, 'injected: create refused', 'ECREATE' end
      elseif not seen[id] then seen[id] = true; return nil, 'injected: first create of ' .. id .. ' fails', 'ECREATE' end
      return base.create(client, spec)
    end,
  }, { __index = base })
  return seen
end

local function run(opts)
  opts.dataset = opts.dataset or DATA
  opts.solver = opts.solver or 'gold'
  opts.mode = opts.mode or 'cold'
  opts.concurrency = opts.concurrency or 2
  opts.output = opts.output or (tmp .. '/results')
  opts.quiet = true
  opts.retry_delay_seconds = 0
  return frame.run('tasks', require('cseng.cli.present').attach(opts))
end

local function events_of(info, kind)
  local out = {}
  for _, e in ipairs(results.read(info.jsonl)) do if e.event == kind then out[#out + 1] = e end end
  return out
end

describe('--retry-errors', function()
  it('reruns a trial whose outcome is error: every task ends passed, every attempt recorded', function()
    local names = two_tasks()
    local seen = flaky('flaky_first_create')
    local status, info = run { provider = 'flaky_first_create', tasks = names, retry_errors = 1, label = 'retry-1' }
    package.loaded['providers.flaky_first_create'] = nil
    assert.equal(0, status)
    assert.equal(4, seen.creates)
    local trials = results.trials(results.read(info.jsonl))
    assert.equal(2, #trials)
    for _, t in ipairs(trials) do
      assert.equal('passed', t.outcome, t.task_id .. ': ' .. tostring(t.error))
      assert.equal(2, t.try)
      assert.equal(2, t.tries)
      assert.equal(1, t.attempt)
    end
    local attempts = events_of(info, 'trial_try')
    assert.equal(2, #attempts)
    for _, a in ipairs(attempts) do
      assert.equal(1, a.try)
      assert.equal('error', a.outcome)
      assert.equal('start', a.error_stage)
      assert.truthy(tostring(a.error):find('injected', 1, true))
    end
    local s = results.summary(results.read(info.jsonl))
    assert.equal(2, s.passed)
    assert.equal(0, s.errors)
    assert.equal('retry-1', events_of(info, 'run_started')[1].label)
    assert.same({}, results.live_allocations(results.read(info.jsonl)))
  end)

  it('without it the same provider errors; with N too small the final outcome is the error', function()
    local names = two_tasks()
    flaky('flaky_first_create2')
    local status, info = run { provider = 'flaky_first_create2', tasks = names }
    package.loaded['providers.flaky_first_create2'] = nil
    assert.equal(1, status)
    local s = results.summary(results.read(info.jsonl))
    assert.equal(2, s.errors)
    assert.equal(0, #events_of(info, 'trial_try'))
  end)

  it('never retries a failed verdict', function()
    local names = two_tasks()
    local status, info = run { provider = 'local', tasks = names, solver = 'nop', retry_errors = 2 }
    assert.equal(0, status)
    for _, t in ipairs(results.trials(results.read(info.jsonl))) do
      assert.equal('failed', t.outcome)
      assert.equal(1, t.try)
    end
    assert.equal(0, #events_of(info, 'trial_try'))
  end)

  it('is refused by the arena', function()
    local ok, err = pcall(require('cseng.run.kinds.startup').options, { retry_errors = 1 })
    assert.is_false(ok)
    assert.truthy(tostring(err):find('never retries a measurement', 1, true))
  end)
end)

describe('--resume --rerun-errors', function()
  it('reruns the errored tasks of an earlier run and the summary counts their new outcome', function()
    local names = two_tasks()
    flaky('flaky_always', { [names[1]] = true })
    local status, info = run { provider = 'flaky_always', tasks = names }
    assert.equal(0, status) -- the run finished: one error trial among two is a result (one exit rule)
    local s = results.summary(results.read(info.jsonl))
    assert.equal(1, s.errors)
    assert.equal(1, s.passed)
    package.loaded['providers.flaky_always'] = nil
    -- the same log, now with a provider that works: only the errored task runs again
    local seen = flaky('flaky_always', {})
    local status2 = run { provider = 'flaky_always', tasks = names, resume = info.jsonl, rerun_errors = true }
    package.loaded['providers.flaky_always'] = nil
    assert.equal(0, status2)
    assert.equal(1, seen.creates)
    local events = results.read(info.jsonl)
    local raw = 0
    for _, e in ipairs(events) do if e.event == 'trial' then raw = raw + 1 end end
    assert.equal(3, raw) -- the old error stays in the log
    local s2 = results.summary(events)
    assert.equal(2, s2.passed)
    assert.equal(0, s2.errors)
    assert.equal(2, s2.task_count)
  end)

  it('is refused without --resume', function()
    local ok, err = pcall(frame.run, 'tasks', { rerun_errors = true, dataset = DATA })
    assert.is_false(ok)
    assert.truthy(tostring(err):find('--rerun-errors goes with --resume', 1, true))
  end)
end)

describe('--status-port on a tasks plan', function()
  it('serves the arena\'s shape: providers.<name>.live always a list, rounded numbers', function()
    local names = two_tasks()
    local docs = {}
    local gate = { open = false }
    local base = require('providers.local')
    package.loaded['providers.slow_local'] = setmetatable({ name = 'slow_local',
      create = function(client, spec)
        while not gate.open do task.sleep(0.02) end
        return base.create(client, spec)
      end }, { __index = base })
    local url
    local status = run { provider = 'slow_local', tasks = names, status_port = 0, concurrency = 1,
      on_start = function(i)
        url = i.status_url
        task.spawn(function()
          local r = assert(http.request { url = url })
          docs[#docs + 1] = cjson.decode(r.body)
          docs.raw = r.body
          gate.open = true
        end)
      end }
    package.loaded['providers.slow_local'] = nil
    assert.equal(0, status)
    local d = docs[1]
    assert.truthy(d, 'no status document')
    assert.equal('tasks', d.kind)
    assert.equal('running', d.status)
    assert.equal(2, d.total)
    local p = d.providers.slow_local
    assert.is_table(p.live)
    assert.equal(0, #p.live)
    assert.equal(1, #d.trials)
    assert.equal('start', d.trials[1].phase)
    assert.equal(d.elapsed_s, math.floor(d.elapsed_s * 10 + 0.5) / 10)
    assert.truthy(docs.raw:find('"live":[]', 1, true), 'an empty live list is [] in the JSON')
    local r = http.request { url = url }
    assert.is_nil(r and r.status == 200 and r or nil, 'the server closes when the run ends')
  end)
end)

describe('progress lines (not a terminal)', function()
  it('aligns [n/N] and carries done/total, counts and an ETA', function()
    local names = two_tasks()
    local out = tmp .. '/progress'
    local r = assert(proc.run { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--provider', 'local', '--tasks',
      names[1] .. ',' .. names[2], '--output', out, '--label', 'progress-check' }, cwd = ROOT, timeout = 600 })
    assert.equal(0, r.code, r.stderr)
    local lines = {}
    for l in r.stdout:gmatch('[^\n]+') do if l:match('^%[') then lines[#lines + 1] = l end end
    assert.equal(2, #lines, r.stdout)
    assert.truthy(lines[1]:match('^%[1/2%] '), lines[1])
    assert.truthy(lines[2]:find('2/2 done, 0 running, 2 passed, 0 failed, 0 errors', 1, true), lines[2])
    assert.truthy(lines[1]:find('ETA', 1, true), lines[1])
  end)
end)

describe('--label', function()
  it('keys report columns by run label, so two runs of one provider and mode are not merged', function()
    local dir = tmp .. '/labels'
    assert(fs.mkdir_p(dir))
    for i, label in ipairs({ 'before', 'after' }) do
      local lines = {
        cjson.encode { event = 'run_started', run_id = 'r' .. i, provider = 'local', mode = 'cold', label = label,
          solver = 'gold', time = '2026-12-01T00:00:0' .. i .. 'Z' },
        cjson.encode { event = 'trial', run_id = 'r' .. i, task_id = 't1', provider = 'local', mode = 'cold',
          outcome = i == 1 and 'failed' or 'passed', passed = i == 2, elapsed_seconds = i, phases = { start_seconds = i },
          finished_at = '2026-12-01T00:00:1' .. i .. 'Z' },
        cjson.encode { event = 'run_finished', run_id = 'r' .. i, status = 'finished' },
      }
      assert(fs.write(dir .. '/r' .. i .. '.jsonl', table.concat(lines, '\n') .. '\n'))
    end
    require('reports.lib.render').render { inputs = { dir }, template = 'cross_vendor', output = tmp .. '/labels.md' }
    local md = assert(fs.read(tmp .. '/labels.md'))
    assert.truthy(md:find('| local | cold [before] | 1 | 0 | 1 |', 1, true), md)
    assert.truthy(md:find('| local | cold [after] | 1 | 1 | 0 |', 1, true), md)
  end)
end)

describe('matrix', function()
  it('prints a combined summary of its runs', function()
    local text = require('cseng.cli.present').matrix_summary {
      { opts = { provider = 'local', mode = 'cold' }, status = 0,
        info = { jsonl = 'a.jsonl', summary = { task_count = 3, passed = 3, failed = 0, errors = 0 } } },
      { opts = { provider = 'docker', mode = 'warm' }, status = 1,
        info = { jsonl = 'b.jsonl', summary = { task_count = 3, passed = 1, failed = 1, errors = 1 } } },
    }
    assert.truthy(text:find('matrix: 2 run(s)', 1, true))
    assert.truthy(text:find('local          cold        3      3      0      0  ok           a.jsonl', 1, true), text)
    assert.truthy(text:find('docker         warm        3      1      1      1  errors       b.jsonl', 1, true), text)
    assert.truthy(text:find('total                      6      4      1      1', 1, true), text)
  end)
end)

describe('warm artifacts', function()
  it('reports reuse and age; --fresh-artifacts prepares anew', function()
    local name = two_tasks()[1]
    local function warm(extra)
      local o = { provider = 'local', tasks = { name }, mode = 'warm', output = tmp .. '/warm' }
      for k, v in pairs(extra or {}) do o[k] = v end
      local status, info = run(o)
      assert.equal(0, status)
      return events_of(info, 'prewarmed'), info
    end
    local first = warm()
    assert.equal(1, #first)
    local second, info2 = warm()
    assert.equal(1, #second)
    assert.is_true(second[1].reused)
    assert.equal('provider', second[1].source)
    assert.is_number(second[1].age_s)
    assert.equal(first[1].artifact, second[1].artifact)
    local fresh = warm { fresh_artifacts = true }
    assert.equal(1, #fresh)
    assert.is_nil(fresh[1].reused)
    assert.truthy(fresh[1].artifact:find('-fresh', 1, true))
    assert.are_not.equal(first[1].artifact, fresh[1].artifact)
    fs.remove_tree(fresh[1].artifact)
    require('reports.lib.render').render { inputs = { info2.jsonl }, template = 'per_provider', output = tmp .. '/warm.md' }
    local md = assert(fs.read(tmp .. '/warm.md'))
    assert.truthy(md:find('Warm artifacts: 0 prepared by these runs, 1 reused (age of the reused ones: median', 1, true), md)
  end)
end)

describe('cseng prewarm --list / --prune', function()
  local function prewarm_file(dir, provider, artifacts, created)
    assert(fs.mkdir_p(dir))
    local path = dir .. '/prewarm-' .. provider .. '-20261201-000000.json'
    assert(fs.write(path, cjson.encode { kind = 'cseng-prewarm', provider = provider, created_at = created,
      artifacts = artifacts }))
    return path
  end

  it('lists the prewarm files\' artifacts with their age, and prunes the files', function()
    local dir = tmp .. '/pw'
    local path = prewarm_file(dir, 'local', { ['task-a'] = 'art-a', ['task-b'] = 'art-b' }, '2026-01-01T00:00:00Z')
    local r = assert(proc.run { argv = { CSENG, 'prewarm', '--list', '--output', dir }, cwd = ROOT })
    assert.equal(0, r.code, r.stderr)
    assert.truthy(r.stdout:find('local      task%-a%s+%d+ d%s+art%-a'), r.stdout)
    assert.truthy(r.stdout:find('task-b', 1, true))
    local p = assert(proc.run { argv = { CSENG, 'prewarm', '--prune', '--output', dir }, cwd = ROOT })
    assert.equal(0, p.code, p.stderr)
    assert.truthy(p.stdout:find('pruned: 1 prewarm file(s) removed, 0 artifact(s) deleted at the provider, 2 kept', 1, true),
      p.stdout)
    assert.is_nil(fs.stat(path))
    local again = assert(proc.run { argv = { CSENG, 'prewarm', '--list', '--output', dir }, cwd = ROOT })
    assert.truthy(again.stdout:find('no warm artifacts recorded', 1, true), again.stdout)
  end)

  it('goes through the adapter\'s own listing and delete where it has them', function()
    local deleted = {}
    package.loaded['providers.listing'] = {
      name = 'listing',
      connect = function() return {} end,
      list_artifacts = function() return { { id = 'snap-1', task_id = 'x', created_at = '2026-11-30T00:00:00Z' } } end,
      delete_artifact = function(_, id) deleted[#deleted + 1] = id; return true end,
    }
    local dir = tmp .. '/pw2'
    prewarm_file(dir, 'listing', { x = 'snap-1' }, '2026-11-30T00:00:00Z')
    local sink = { text = '' }
    function sink.write(self, ...) for _, v in ipairs({ ... }) do self.text = self.text .. tostring(v) end return self end
    local real = io.stdout
    io.stdout = sink -- luacheck: ignore 122
    local ok, st = pcall(require('cseng.cli.commands.prewarm').run, { '--prune', '--provider', 'listing', '--output', dir })
    io.stdout = real -- luacheck: ignore 122
    package.loaded['providers.listing'] = nil
    assert.is_true(ok, tostring(st))
    assert.equal(0, st)
    assert.same({ 'snap-1' }, deleted)
    assert.truthy(sink.text:find('listing    x ', 1, true), sink.text)
    assert.truthy(sink.text:find('1 artifact(s) deleted at the provider', 1, true), sink.text)
    assert.same({}, fs.list(dir)) -- the prewarm file pruned, and no run log: listing is not a run
  end)
end)
