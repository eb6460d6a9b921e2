-- The task-run report templates (lua/reports/cross_vendor.lua, per_task.lua, per_provider.lua,
-- failure_modes.lua) and the loader behind them (report_helpers.load: run logs, cseng's
-- summaries, the seed harness's summaries), on real runs of the local provider plus the seed's
-- result files. Exact content is asserted where the data determines it; what depends on timing
-- (seconds, the stage a timeout hit) is computed from the records and then asserted.
local fs = require('cseng.fs')
local frame = require('cseng.run.frame')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local report_load = require('reports.lib.load')
local report = require('cseng.cli.commands.report')
local rt = require('reports.lib.task_runs')

local ROOT = sys.root()
local SMOKE = ROOT .. '/data/smoke.jsonl'
local SMOKE16 = ROOT .. '/../shared/data/terminalbench_2026_03_05_smoke16.jsonl'
local SEED = ROOT .. '/../shared/data/seed-results'
local HAVE_SEED = fs.exists(SEED) and fs.exists(SMOKE16)

local tmp, dir
local runs = {} -- name -> what frame.run returned after the status

-- Runs, in this order (so "newest" is known):
--   A smoke, nop, cold    3 failed       B smoke, gold, cold   3 passed
--   C smoke, nop, cold    3 failed (newer than B's passes)
--   D smoke, nop, warm    3 failed (local/warm)
--   F smoke16, nop, cold  3 failed       G smoke16, gold, cold, 0.05 s timeout: 3 errors (newest)
local PLAN = {
  { 'A', SMOKE, 'nop', 'cold' }, { 'B', SMOKE, 'gold', 'cold' }, { 'C', SMOKE, 'nop', 'cold' },
  { 'D', SMOKE, 'nop', 'warm' }, { 'F', SMOKE16, 'nop', 'cold' }, { 'G', SMOKE16, 'gold', 'cold', 0.05 },
}

setup(function()
  tmp = assert(fs.tempdir('cseng-reports-spec'))
  dir = tmp .. '/results'
  if not HAVE_SEED then return end
  for _, p in ipairs(PLAN) do
    -- local's host mode: a FROM gap on every task and the smoke16 tasks' RUN steps (which need
    -- the network) recorded as gaps, the shape the report checks below count on
    local _, info = frame.run('tasks', { name = 'reports-spec', provider = 'local', dataset = p[2], task_limit = 3, solver = p[3],
      mode = p[4], timeout_seconds = p[5], concurrency = 2, quiet = true, output = dir,
      provider_config = { host_root = true } })
    runs[p[1]] = info
  end
end)
teardown(function() fs.remove_tree(tmp) end)

local function need_seed()
  if HAVE_SEED then return true end
  pending('needs ' .. SEED .. ' and ' .. SMOKE16)
  return false
end

local function render(name, inputs)
  local out = tmp .. '/out/' .. name .. '.md'
  local args = {}
  for _, i in ipairs(inputs or { dir, SEED }) do args[#args + 1] = i end
  for _, a in ipairs({ '--template', 'lua/reports/' .. name .. '.lua', '-o', out }) do args[#args + 1] = a end
  assert.equal(0, report.run(args))
  return assert(fs.read(out)), out
end

local function svgs_of(md_path)
  local stem = md_path:match('([^/]+)%.md$')
  local out = {}
  for _, n in ipairs(fs.list(fs.dirname(md_path))) do
    if n:sub(1, #stem + 1) == stem .. '.' and n:match('%.svg$') then out[#out + 1] = fs.dirname(md_path) .. '/' .. n end
  end
  table.sort(out)
  return out
end

local function well_formed(path)
  local r = assert(proc.run { argv = { 'python3', '-c', 'import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])',
    path } })
  assert.equal(0, r.code, path .. ': ' .. tostring(r.stderr))
end

local function has(md, s) assert.is_truthy(md:find(s, 1, true), 'missing: ' .. s) end

local function rec(name, i) return runs[name].records[i] end
local function by_task(name, task)
  for _, r in ipairs(runs[name].records) do if r.task_id == task then return r end end
end

-- ---- the loader --------------------------------------------------------------------------

describe('report loader', function()
  it('maps the seed summaries to trial records (provider from the top level, mode unknown)', function()
    if not need_seed() then return end
    local data = report_load.load({ SEED })
    assert.equal(2, #data.runs)
    assert.equal(17, #data.trials)
    local modal
    for _, run in ipairs(data.runs) do
      assert.equal('seed summary', run.source)
      assert.equal('tasks', run.kind)
      assert.equal('2026-05-28', run.started.time)
      assert.equal('file name', run.date_source)
      if run.started.provider == 'modal' then modal = run end
    end
    assert.equal(16, #modal.trials)
    for _, t in ipairs(modal.trials) do
      assert.equal('modal', t.provider)
      assert.equal('unknown', t.mode)
      assert.equal('failed', t.outcome)
      assert.equal('trial', t.event)
      assert.equal(modal.id, t.run_id)
      assert.equal('python:3.13', t.runtime)
      assert.equal('2026-05-28', t.time)
    end
    assert.equal(2, #data.by_provider)
    assert.equal('unknown', data.by_mode[1].key)
  end)

  it('reads a directory of logs and summaries once per run, and a summary alone like its log', function()
    if not need_seed() then return end
    local data = report_load.load({ dir, SEED, dir })
    assert.equal(8, #data.runs)
    assert.equal(35, #data.trials)
    assert.equal(6, #data.skipped) -- each run's .json beside its .jsonl
    local a_log = report_load.load({ runs.A.jsonl })
    local a_sum = report_load.load({ runs.A.json })
    assert.equal('log', a_log.runs[1].source)
    assert.equal('summary', a_sum.runs[1].source)
    assert.equal(runs.A.run_id, a_sum.runs[1].id)
    assert.equal(a_log.runs[1].started.time, a_sum.runs[1].started.time)
    assert.equal(3, #a_sum.trials)
    for i, t in ipairs(a_sum.trials) do
      local l = a_log.trials[i]
      for _, k in ipairs({ 'task_id', 'provider', 'mode', 'solver', 'outcome', 'elapsed_seconds', 'finished_at', 'run_id' }) do
        assert.equal(l[k], t[k], k)
      end
      assert.same(l.phases, t.phases)
    end
  end)

  it('in a directory, passes over other JSON and warns about broken JSON; named directly, refuses both', function()
    local d = tmp .. '/stray'
    assert(fs.mkdir_p(d))
    assert(fs.write(d .. '/prewarm-local-x.json', '{"provider": "local", "artifact": "x"}\n'))
    assert(fs.write(d .. '/broken.json', '{"results": [\n'))
    local data = report_load.load({ d })
    assert.equal(0, #data.runs)
    assert.equal(1, #data.warnings)
    assert.matches('skipped ' .. d .. '/broken.json: not valid JSON', data.warnings[1], 1, true)
    assert.same({ { path = d .. '/prewarm-local-x.json', why = 'not a run summary (no results[] array)' } }, data.skipped)
    for _, f in ipairs({ 'broken.json: not valid JSON', 'prewarm-local-x.json: not a run summary' }) do
      local ok, err = pcall(report_load.load, { d .. '/' .. f:match('^(%S+):') })
      assert.is_false(ok)
      assert.matches(d .. '/' .. f, err, 1, true)
    end
    assert.equal(1, report.run({ d, '--template', 'per_task', '-o', tmp .. '/stray.md' }))
  end)

  it('applies the evidence rule: newest passing trial, else the newest trial', function()
    if not need_seed() then return end
    local ev = rt.evidence(report_load.load({ dir, SEED }))
    assert.equal(4, #ev.columns)
    assert.same({ 'daytona/unknown', 'local/cold', 'local/warm', 'modal/unknown' },
      { ev.columns[1].key, ev.columns[2].key, ev.columns[3].key, ev.columns[4].key })
    local cold = ev.by_key['local/cold']
    for i = 1, 3 do
      local task = rec('B', i).task_id
      -- C failed it after B passed it: the pass is still the evidence
      assert.equal(rec('B', i).finished_at, cold.by_task[task].finished_at)
      assert.equal('passed', cold.by_task[task].outcome)
      assert.same({ n = 3, passed = 1, failed = 2, errors = 0 }, ev.attempts[cold.by_task[task]])
    end
    for i = 1, 3 do
      local task = rec('G', i).task_id
      -- F failed, G (newer) errored, nothing passed: the newest, G's error
      assert.equal('error', cold.by_task[task].outcome)
      assert.equal(rec('G', i).finished_at, cold.by_task[task].finished_at)
    end
    assert.equal(6, ev.superseded)
    assert.equal(19, #ev.tasks)
    assert.equal(26, #ev.selected)
  end)
end)

-- ---- the templates -----------------------------------------------------------------------

describe('task report templates', function()
  it('cross_vendor: counts, pass rates, the seed rows, phase medians, ratios, runs and a chart', function()
    if not need_seed() then return end
    local md, out = render('cross_vendor')
    has(md, '# Cross-vendor comparison\n')
    has(md, '**Evidence rule:** for each provider/mode and task, the newest passing trial')
    has(md, '35 trial(s) read from 8 run(s); 26 selected (4 provider/mode column(s) × 19 task(s), where run); ' ..
      '6 non-passing trial(s) superseded by a pass.')
    has(md, '| daytona | unknown | 1 | 0 | 1 | 0 | 0% | [0%, 79.3%] | 23.8 | 23.8 | $0.0011 | $0.0011 | – |')
    has(md, '| local | cold | 6 | 3 | 0 | 3 | 50.0% | ')
    has(md, '| local | warm | 3 | 0 | 3 | 0 | 0% | ')
    has(md, '| modal | unknown | 16 | 0 | 16 | 0 | 0% | [0%, 19.4%] | 7.43 | 10.3 | $0.0084 | $0.0005 | – |')
    has(md, 'The columns did not all run the same tasks (0 task(s) were run by every column)')
    has(md, '| provider | mode | n | build | start | upload | prepare | instruction_write | solve | verify | stop |')
    has(md, '| modal | unknown | 16 | – | 0.781 | 1.67 | 2.73 | 1.07 | – | 0.763 | 0.106 |')
    has(md, '| daytona | unknown | 1 | – | – | – | – | – | – | – | – |')
    has(md, '## Start (create) time: pairwise ratios of medians')
    -- local cold/warm and modal have start times (the seed's daytona file has no phases)
    has(md, '| local/cold | modal/unknown | ')
    has(md, '| local/warm | modal/unknown | ')
    -- the runs, with dates
    has(md, '| `ts-modal-warm-verifier-all-20260528` | seed summary | modal | unknown | none (verifier only) | ? | ' ..
      '2026-05-28 (file name) | 16 | 0 | 16 | 0 | unknown |')
    for _, name in ipairs({ 'A', 'B', 'C', 'D', 'F', 'G' }) do
      has(md, '| `' .. runs[name].run_id .. '` | log | local | ')
    end
    has(md, '![grouped bars: median seconds of each phase per provider/mode](cross_vendor.phases.svg)')
    local svgs = svgs_of(out)
    assert.same({ tmp .. '/out/cross_vendor.phases.svg', tmp .. '/out/cross_vendor.trial-seconds.svg' }, svgs)
    for _, f in ipairs(svgs) do well_formed(f) end
    -- the same every time
    local again = render('cross_vendor')
    assert.equal(md, again)
  end)

  it('per_task: a row per task, outcome cells, the tasks that differ, pass nowhere and everywhere', function()
    if not need_seed() then return end
    local md = render('per_task')
    has(md, '| task | daytona/unknown | s | local/cold | s | local/warm | s | modal/unknown | s |')
    has(md, '19 task(s) in all: 6 with an outcome that differs between the columns that ran them, 16 that pass ' ..
      'nowhere, 0 that pass everywhere they ran.')
    -- a seed task run everywhere but local/warm; local/cold's evidence is G's error
    local g = by_task('G', 'R_package_dependency_missing_medium')
    has(md, string.format('| `R_package_dependency_missing_medium` | ✗ | 23.8 | error: %s (0/2 passed) | %s | – |  | ✗ | 9.09 |',
      g.error_stage, rt.secs(g.elapsed_seconds)))
    -- a seed-only task
    has(md, '| `a_star_pathfinding_hard` | – |  | – |  | – |  | ✗ | 6.41 |')
    -- every seed task has a row, in the full table
    local all = md:match('## All tasks\n(.-)\n## ')
    local n = 0
    for _ in all:gmatch('\n| `') do n = n + 1 end
    assert.equal(19, n)
    for _, t in ipairs(report_load.load({ SEED }).trials) do has(all, '| `' .. t.task_id .. '` |') end
    -- a smoke task: passed cold (once in three), failed warm
    local b = by_task('B', rec('B', 1).task_id)
    local d = by_task('D', b.task_id)
    has(md, string.format('| `%s` | – |  | ✓ (1/3 passed) | %s | ✗ | %s | – |  |', b.task_id, rt.secs(b.elapsed_seconds),
      rt.secs(d.elapsed_seconds)))
    local differ = md:match('## Outcome differs between providers/modes\n(.-)\n## ')
    has(differ, '| `' .. b.task_id .. '` |')
    has(differ, '| `R_package_dependency_missing_medium` |')
    assert.is_nil(differ:find('a_star_pathfinding_hard', 1, true))
    has(md, '## Pass everywhere\n\nNo task passed in every column that ran it.')
  end)

  it('per_provider: runs, modes, timings, error histogram, fidelity gaps, cache, cost', function()
    if not need_seed() then return end
    local md, out = render('per_provider')
    has(md, 'Providers: daytona, local, modal.')
    local lsec = md:match('\n## local\n(.-)\n## modal\n')
    has(lsec, '| cold | 5 | 6 | 3 | 0 | 3 | 50.0% | 15 | 20.0% |')
    has(lsec, '| warm | 1 | 3 | 0 | 3 | 0 | 0% | 3 | 0% |')
    local verified = 12 -- A, B, C, F ran the verifier; G's trials did when the timeout hit in verify
    for _, r in ipairs(runs.G.records) do if r.phases.verify_seconds then verified = verified + 1 end end
    has(lsec, '| cold | verify | ' .. verified .. ' | ')
    has(lsec, '| warm | build | 3 | ')
    local stages = {}
    for _, r in ipairs(runs.G.records) do stages[r.error_stage] = (stages[r.error_stage] or 0) + 1 end
    for stage, k in pairs(stages) do has(lsec, string.format('| %s | ETIMEDOUT | %d | ', stage, k)) end
    has(lsec, '3 error(s) in 18 trial(s) (16.7%); 12 failed (the verifier ran).')
    local run_steps, task_rows = 0, {}
    for _, r in ipairs(runs.G.records) do
      local k = 0
      for _, gap in ipairs(r.fidelity_gaps or {}) do if gap.kind == 'RUN' then k = k + 1 end end
      assert.is_true(k > 0, r.task_id .. ' has RUN steps that local does not execute')
      run_steps = run_steps + k
      task_rows[#task_rows + 1] = string.format('| `%s` | %d | FROM |', r.task_id, k)
    end
    has(lsec, string.format('%d RUN step(s) not executed across 3 of 6 task(s).', run_steps))
    for _, row in ipairs(task_rows) do has(lsec, row) end
    has(lsec, 'No trial recorded `build_cache_hit`')
    has(lsec, '| estimated sandbox cost, every trial | $0 |')
    local msec = md:match('\n## modal\n(.*)$')
    has(msec, '| unknown | 1 | 16 | 0 | 16 | 0 | 0% | 16 | 0% |')
    has(msec, '| unknown | start | 16 | 0.781 | ')
    has(msec, '| estimated sandbox cost, every trial | $0.0084 |')
    local svgs = svgs_of(out)
    assert.same({ tmp .. '/out/per_provider.local.phases.svg', tmp .. '/out/per_provider.modal.phases.svg' }, svgs)
    for _, f in ipairs(svgs) do well_formed(f) end
  end)

  it('failure_modes: groups with counts and examples, error rates, what to look at first', function()
    if not need_seed() then return end
    local md = render('failure_modes')
    has(md, '| daytona | 1 | 0 | 1 | 0 | 0% | [0%, 79.3%] | 100% |')
    has(md, '| local | 18 | 3 | 12 | 3 | 16.7% | ')
    has(md, '| modal | 16 | 0 | 16 | 0 | 0% | [0%, 19.4%] | 100% |')
    has(md, '1. **16 × modal: failed (the verifier ran; reward below 1)**: 16 task(s), no solver (expected); e.g. ')
    has(md, '2. **12 × local: failed (the verifier ran; reward below 1)**: 6 task(s), 6 passed elsewhere, ' ..
      'no solver (expected); e.g. ')
    has(md, '| 1 | modal | failed | – | – | 16 | 16 | 0 | 1 ×16 | none ×16 | ')
    has(md, ' | local | failed | – | – | 12 | 6 | 6 | ')
    local stages = {}
    for _, r in ipairs(runs.G.records) do stages[r.error_stage] = (stages[r.error_stage] or 0) + 1 end
    for stage, k in pairs(stages) do
      has(md, string.format(' | local | error | %s | ETIMEDOUT | %d | %d | 0 | – | gold ×%d | ', stage, k, k, k))
      has(md, string.format('local: error in %s (ETIMEDOUT) (%d)\n', stage, k))
    end
    has(md, '- error: `trial timed out after 0.05 s (in ')
    assert.matches('\n### %d+%. daytona: failed %(the verifier ran; reward below 1%) %(1%)\n', md)
    -- the example's stdout tail, fenced
    has(md, '- task `R_package_dependency_missing_medium`, mode unknown, run `ts-daytona-one-20260528`, finished 2026-05-28')
    has(md, '*verifier stdout (tail)*\n\n```text\n')
  end)

  it('renders through the cseng binary too (a seed file and a run log named directly)', function()
    if not need_seed() then return end
    local out = tmp .. '/bin/pt.md'
    local r = assert(proc.run { argv = { ROOT .. '/cseng', 'report', SEED .. '/ts-daytona-one-20260528.json', runs.B.jsonl,
      '--template', 'per_task', '-o', out }, cwd = ROOT })
    assert.equal(0, r.code, r.stderr)
    assert.equal('report: ' .. out .. '\n', r.stdout)
    local md = assert(fs.read(out))
    has(md, '| task | daytona/unknown | s | local/cold | s |')
    has(md, '| `R_package_dependency_missing_medium` | ✗ | 23.8 | – |  |')
    has(md, '4 task(s) in all: 0 with an outcome that differs between the columns that ran them, 1 that pass ' ..
      'nowhere, 3 that pass everywhere they ran.')
    -- no template given: task runs have no default
    r = assert(proc.run { argv = { ROOT .. '/cseng', 'report', runs.B.jsonl }, cwd = ROOT })
    assert.equal(2, r.code)
    assert.matches('cross_vendor, per_task, per_provider, failure_modes', r.stderr, 1, true)
  end)
end)
