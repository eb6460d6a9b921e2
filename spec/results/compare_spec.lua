-- `cseng compare A B` by solver, model, provider and mode: two run logs written with the runner's own
-- writer (spec/browser/fixtures.lua), where A has gold and openrouter:fake/model-1 and B has
-- openrouter:fake/model-1 and codex:fake/model-2, two attempts per task for openrouter, a cost ledger
-- on every trial. The command, run as a user runs it, prints one row per cell with the pass rates,
-- the change with its interval, pass@1..2 and the cost per trial and per pass; the cells on one side
-- only say so, the identity warning stays, and the fallen cell counts as a regression.
local fs = require('cseng.fs')

local fixtures = require('spec.browser.fixtures')
local C = require('spec.helpers.common')

local TASKS = { 't1', 't2', 't3', 't4', 't5' }

-- one trial's args: solver, model, attempt, outcome, cost
local function trial(task_id, solver, model, attempt, outcome, usd)
  local extra = { attempt = attempt, cost = { total_usd = usd, complete = true, items = {} } }
  if model then extra.solver_usage = { model = model, turns = 2, cost_usd = usd } end
  return { task_id = task_id, solver = solver, outcome = outcome, extra = extra }
end

describe('cseng compare by solver, model, provider and mode', function()
  local tmp, a, b
  setup(function()
    tmp = assert(fs.tempdir('cseng-compare-cells-'))
    local ta, tb = {}, {}
    for _, id in ipairs(TASKS) do
      ta[#ta + 1] = trial(id, 'gold', nil, 1, 'passed', 0.001)
      for att = 1, 2 do ta[#ta + 1] = trial(id, 'openrouter', 'fake/model-1', att, 'passed', 0.01) end
    end
    -- B: model-1 passes t1 on attempt 1 only and t2 on attempt 2 only, nothing else; one infra error
    for _, id in ipairs(TASKS) do
      for att = 1, 2 do
        local ok = (id == 't1' and att == 1) or (id == 't2' and att == 2)
        tb[#tb + 1] = trial(id, 'openrouter', 'fake/model-1', att, ok and 'passed' or 'failed', 0.02)
      end
      tb[#tb + 1] = trial(id, 'codex', 'fake/model-2', 1, id == 't5' and 'error' or 'passed', 0.05)
    end
    tb[#tb].error_code, tb[#tb].error_stage, tb[#tb].error = 'ESANDBOX', 'solve', 'the sandbox died'
    local _
    _, a = fixtures.task_run(tmp, 'cells-a-local-cold-20261202-100000-aaaa', ta, { solver = 'openrouter' })
    _, b = fixtures.task_run(tmp, 'cells-b-local-cold-20261202-110000-bbbb', tb, { solver = 'codex' })
  end)
  teardown(function() if tmp then fs.remove_tree(tmp) end end)

  it('prints one row per cell: rates, the change and its CI, cost per trial and per pass, one-sided cells', function()
    local r = C.cseng({ 'compare', a, b }, { timeout = 120 })
    assert.equal(0, r.code, r.stderr)
    local md = r.stdout
    assert.matches('## Pass rate by solver, model, provider and mode', md, 1, true)
    -- the identity warning is still there
    assert.matches('the runs differ in solver (A: openrouter, B: codex)', md, 1, true)
    local rows = {}
    for line in md:gmatch('[^\n]+') do
      local solver = line:match('^| (%S+) | fake/model%-%d | local | cold |') or line:match('^| (gold) | %- | local | cold |')
      if solver and not rows[solver] then rows[solver] = line end
    end
    -- openrouter: A 10/10 at $0.01; B 2/10 at $0.02 a trial, so $0.10 a pass; the fall is clear (Wilson
    -- [0.722, 1] and [0.057, 0.510]: Newcombe's interval -0.8 - 0.143, -0.8 + sqrt(0.310² + 0.278²))
    assert.equal('| openrouter | fake/model-1 | local | cold | 100.0% (10/10) | 20.0% (2/10) | -80.0 | [-94.3, -38.4]'
      .. ' | $0.0100 | $0.0200 | $0.0100 | $0.1000 | **lower** |', rows.openrouter)
    assert.equal('| gold | - | local | cold | 100.0% (5/5) | – | – | – | $0.0010 | – | $0.0010 | – | only in A |', rows.gold)
    -- codex: 4 of 4 graded, the ESANDBOX trial counted apart (and not in the pass rate); $0.05 each
    assert.equal('| codex | fake/model-2 | local | cold | – | 100.0% (4/4) +1 error(s) | – | – | – | $0.0500 | – | $0.0625 | only in B |',
      rows.codex)
  end)

  it('gives pass@1..2 per cell on both sides when there are repeated attempts', function()
    local r = C.cseng({ 'compare', a, b }, { timeout = 120 })
    local line = r.stdout:match('\n(| openrouter | fake/model%-1 | local | cold | 100%.0%% %[[^\n]*)')
    assert.is_not_nil(line, r.stdout)
    -- B: t1 and t2 have c = 1 of n = 2 (pass@1 0.5, pass@2 1), t3..t5 none: pass@1 20%, pass@2 40%
    local cells = {}
    for c in line:gmatch('|%s*([^|]-)%s*%f[|]') do cells[#cells + 1] = c end
    assert.equal('100.0% [100.0, 100.0]', cells[5]) -- A pass@1
    assert.matches('^20%.0%% %[', cells[6]) -- B pass@1
    assert.equal('100.0% [100.0, 100.0]', cells[7]) -- A pass@2
    assert.matches('^40%.0%% %[', cells[8]) -- B pass@2
  end)

  it('counts the fallen cell as a regression (--fail-on-regression exits 1), and a run against itself as none', function()
    local r = C.cseng({ 'compare', a, b, '--fail-on-regression' }, { timeout = 120 })
    assert.equal(1, r.code)
    r = C.cseng({ 'compare', a, a, '--fail-on-regression' }, { timeout = 120 })
    assert.equal(0, r.code, r.stdout)
    assert.matches('| openrouter | fake/model-1 | local | cold | 100.0% (10/10) | 100.0% (10/10) | +0.0 |', r.stdout, 1, true)
    assert.matches('No regression.', r.stdout, 1, true)
  end)
end)
