-- --attempts K and pass@k (lua/cseng/evals/passk.lua, hooks.expand): each task K times in a fresh
-- sandbox, attempts interleaved across tasks, `attempt` recorded, pass@1..K per solver, model,
-- provider and mode in the summary, with the unbiased estimator's exact values.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local passk = require('cseng.evals.passk')
local atif = require('cseng.evals.atif')

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-attempts-spec') end)
teardown(function() H.close() end)

describe('the pass@k estimator', function()
  it('is 1 - C(n-c, k) / C(n, k)', function()
    assert.near(1 / 3, passk.estimate(3, 1, 1), 1e-12)
    assert.near(2 / 3, passk.estimate(3, 1, 2), 1e-12)
    assert.equal(1, passk.estimate(3, 1, 3))
    assert.equal(0, passk.estimate(3, 0, 2))
    assert.near(0.7, passk.estimate(5, 2, 2), 1e-12)          -- 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert.near(1 - 56 / 120, passk.estimate(10, 2, 3), 1e-12) -- 1 - C(8,3)/C(10,3)
    assert.is_nil(passk.estimate(2, 1, 3))
  end)

  it('groups by solver, model, provider and mode, leaves errors out of n, and gives CIs', function()
    local trials = {}
    local function add(solver, task, outcome, model)
      trials[#trials + 1] = { solver = solver, provider = 'p', mode = 'cold', task_id = task, outcome = outcome,
        solver_usage = model and { model = model } or nil }
    end
    for _, o in ipairs({ 'passed', 'failed', 'failed' }) do add('s', 'a', o, 'm') end
    for _, o in ipairs({ 'passed', 'passed', 'failed', 'error' }) do add('s', 'b', o, 'm') end
    add('gold', 'a', 'passed')
    local rows = passk.table(trials)
    assert.equal(2, #rows)
    local g, s = rows[1], rows[2]
    assert.same({ 'gold', '-', 1 }, { g.solver, g.model, g.k_max })
    assert.same({ 's', 'm', 'p', 'cold', 2, 6, 1, 3 }, { s.solver, s.model, s.provider, s.mode, s.tasks, s.attempts, s.errors, s.k_max })
    assert.near((1 / 3 + 2 / 3) / 2, s.pass_at[1].value, 1e-12)
    assert.near((2 / 3 + 1) / 2, s.pass_at[2].value, 1e-12)
    assert.near(1, s.pass_at[3].value, 1e-12)
    assert.is_true(s.pass_at[1].lo <= s.pass_at[1].value and s.pass_at[1].value <= s.pass_at[1].hi)
    assert.near(1 / 3, s.pass_at[1].lo, 1e-12) -- two tasks: the bootstrap's extremes are the tasks' own values
    assert.near(2 / 3, s.pass_at[1].hi, 1e-12)
  end)
end)

describe('--attempts', function()
  it('runs each task K times, interleaved, and the summary has pass@1..K', function()
    -- the model solves task A on its first attempt only, task B on its first two
    local ids = H.ids(2)
    local starts = {}
    local order = {}
    local f = H.start { script = function(conv)
      local t = H.task_of(conv)
      if conv.turn == 1 then -- a new conversation (this fake never fails a request)
        starts[t.id] = (starts[t.id] or 0) + 1
        order[#order + 1] = t.id
      end
      local solves = starts[t.id] <= (t.id == ids[1] and 1 or 2)
      local cmds = solves and H.gold_commands(conv) or { 'true' }
      local c = cmds[conv.turn]
      if c then return { tool_calls = { { command = c } } } end
      return { content = 'Done.' }
    end }
    local status, s, info = H.run({ tasks = ids, attempts = 3 }, H.openrouter_env(f))
    assert.equal(0, status)
    assert.equal(6, #s.results)
    -- interleaved: every task's attempt 1, then every task's attempt 2, ...
    assert.same({ ids[1], ids[2], ids[1], ids[2], ids[1], ids[2] }, order)
    local seen = {}
    for i, r in ipairs(s.results) do
      assert.equal(math.floor((i - 1) / 2) + 1, r.attempt)
      seen[r.sandbox_id] = true
      local want = (r.task_id == ids[1] and r.attempt == 1) or (r.task_id == ids[2] and r.attempt <= 2)
      assert.equal(want and 'passed' or 'failed', r.outcome, r.task_id .. ' attempt ' .. r.attempt)
      -- one trajectory per trial: <task>.a<N>.trajectory.json
      assert.matches('%.a' .. r.attempt .. '%.trajectory%.json$', r.trajectory_path)
      assert.is_true((atif.validate_text(assert(fs.read(r.trajectory_path)))))
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.equal(6, n) -- a fresh sandbox per attempt
    assert.equal(1, #s.pass_at_k)
    local row = s.pass_at_k[1]
    assert.same({ 'openrouter', H.MODEL, 'local', 'cold', 3 }, { row.solver, row.model, row.provider, row.mode, row.k_max })
    assert.near(0.5, row.pass_at['1'].value, 1e-12)
    assert.near(5 / 6, row.pass_at['2'].value, 1e-12)
    assert.near(1, row.pass_at['3'].value, 1e-12)
    -- every task template shows the same numbers, with solver and model as dimensions
    local report_render = require('reports.lib.render')
    for _, tpl in ipairs({ 'cross_vendor', 'per_task', 'per_provider', 'failure_modes' }) do
      local out = H.tmp .. '/report-' .. tpl .. '.md'
      local md = report_render.render({ inputs = { info.jsonl }, template = tpl, output = out }).markdown
      assert.matches('## pass@k by solver, model, provider and mode', md, 1, true)
      assert.matches('| openrouter | ' .. H.MODEL .. ' | local | cold | 2 | 6 | 3 | 0 | 0 | 50.0% [33.3, 66.7] (2) | '
        .. '83.3% [66.7, 100.0] (2) | 100.0% [100.0, 100.0] (2) |', md, 1, true)
    end
    local md = report_render.render({ inputs = { info.jsonl }, template = 'cross_vendor', output = H.tmp .. '/cv.md' }).markdown
    assert.matches('| local | cold · openrouter:' .. H.MODEL .. ' |', md, 1, true) -- the column names the agent
  end)

  it('resumes by task and attempt: only the missing attempts run', function()
    local f = H.start { script = H.llm.replay(H.gold_commands) }
    local ids = H.ids(1)
    local status, s, info = H.run({ tasks = ids, attempts = 1 }, H.openrouter_env(f))
    assert.equal(0, status)
    assert.equal(1, #s.results)
    local status2, s2 = H.run({ tasks = ids, attempts = 2, resume = info.jsonl, output = nil }, H.openrouter_env(f))
    assert.equal(0, status2)
    assert.equal(2, #s2.results)
    assert.same({ 1, 2 }, { s2.results[1].attempt, s2.results[2].attempt })
    assert.equal(6, f.stats().completions) -- 3 per trial: attempt 1 once, then attempt 2 alone
  end)
end)

describe('the end of an --attempts run on the console', function()
  it('prints pass@1..K per solver, model, provider and mode, as the summary has them', function()
    local proc = require('cseng.proc')
    local out = H.tmp .. '/console'
    local r = assert(proc.run { argv = { sys.root() .. '/cseng', 'run', sys.root() .. '/plans/cold-gold.lua', '--task-limit', '2',
      '--attempts', '2', '--output', out }, cwd = sys.root(), timeout = 300 })
    assert.equal(0, r.code, r.stderr)
    local text = r.stdout .. r.stderr
    assert.matches('gold/- on local/cold, 2 tasks x 2 attempts: pass@1 1.000 [1.000, 1.000], pass@2 1.000 [1.000, 1.000]', text, 1, true)
    -- a run of one attempt has no such line
    r = assert(proc.run { argv = { sys.root() .. '/cseng', 'run', sys.root() .. '/plans/cold-gold.lua', '--task-limit', '1',
      '--output', out .. '1' }, cwd = sys.root(), timeout = 300 })
    assert.equal(0, r.code, r.stderr)
    assert.is_nil((r.stdout .. r.stderr):find('pass@1', 1, true))
  end)
end)
