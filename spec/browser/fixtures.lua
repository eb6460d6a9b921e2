--- Run logs for the viewer's specs and bench, written with the runner's own writer
--- (results.open / Writer:event, so the lines are what a run writes): two task runs of one plan
--- where B regresses a task and fixes another and uses another solver, a transcript beside B, a
--- truncated copy, a foreign file, a log that is not a run, and a live log the caller grows.
local results = require('cseng.results.log')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')

local fixtures = {}

-- above any pid_max (2^22): a writer that is not running on this host
local DEAD_PID = 99999999

local PHASES = { 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }

--- A trial record like runner.trial's.
---@param i integer the trial's number (varies the timings)
---@param t table {task_id, outcome, provider?, mode?, solver?, error_code?, error_stage?, error?, extra?}
function fixtures.trial(i, t)
  local phases, total = {}, 0
  for k, ph in ipairs(PHASES) do
    local v = 0.01 * k + (i % 7) * 0.003
    if ph == 'verify' then v = v + 0.2 end
    if t.outcome == 'error' and ph == 'verify' then break end
    phases[ph .. '_seconds'], total = v, total + v
  end
  if t.outcome == 'error' then phases.stop_seconds = 0.004; total = total + 0.004 end
  local rec = {
    task_id = t.task_id, task_sha256 = string.rep('ab', 32), provider = t.provider or 'local', mode = t.mode or 'cold',
    solver = t.solver or 'gold', outcome = t.outcome, passed = t.outcome == 'passed',
    reward = t.outcome ~= 'error' and (t.outcome == 'passed' and 1 or 0) or nil,
    reward_rule = t.outcome ~= 'error' and 'reward.txt' or nil,
    return_code = t.outcome ~= 'error' and (t.outcome == 'passed' and 0 or 1) or nil,
    stdout_tail = t.outcome ~= 'error' and ('collected 3 items\n' .. (t.outcome == 'passed' and '3 passed' or '1 failed, 2 passed') .. ' in 0.04s\n') or nil,
    stderr_tail = '', phases = phases, elapsed_seconds = total, sandbox_seconds = total - 0.001,
    estimated_cost_usd = total * 0.0001, sandbox_id = 'sb-' .. i,
    -- as runner.trial records them: how the environment was made, the limits, the cost ledger
    environment = { method = 'cached_layer', cache_hit = true, mode = 'native', run_steps = 0,
      content_key = string.rep('a0ee3239', 8) },
    limits = { cpus = 1, memory_mb = 1024, pids = 4096, storage_mb = 2048, storage_enforced = true,
      source = { cpus = 'task', memory_mb = 'task', pids = 'default', storage_mb = 'task' } },
    cost = { complete = true, total_usd = total * 0.0001,
      items = jsonl.array({ { item = 'sandbox', seconds = total - 0.001, source = 'rates', usd = total * 0.0001 } }) },
    error = t.error, error_code = t.error_code, error_stage = t.error_stage,
    started_at = '2026-12-01T10:00:00.000000Z', finished_at = '2026-12-01T10:00:01.000000Z',
  }
  for k, v in pairs(t.extra or {}) do rec[k] = v end
  return rec
end

--- Write a task run's log: run_started, per trial allocated/destroyed/trial, run_finished unless
--- opts.unfinished. Returns the writer and the path.
---@param dir string
---@param run_id string
---@param trials table[] fixtures.trial args
---@param opts? {solver?: string, unfinished?: boolean, pid?: integer, host?: string, plan?: string}
function fixtures.task_run(dir, run_id, trials, opts)
  opts = opts or {}
  local path = fs.join(dir, run_id .. '.jsonl')
  local w = results.open(path, run_id)
  w:event('run_started', { plan = opts.plan or 'view-fixture', plan_file = 'plans/view-fixture.lua', provider = 'local',
    mode = 'cold', solver = opts.solver or 'gold', dataset = 'data/smoke.jsonl', task_count = #trials, concurrency = 2,
    host = opts.host or (sys.hostname()), pid = opts.pid or DEAD_PID, argv = jsonl.array({ 'cseng', 'run' }) })
  local n = { passed = 0, failed = 0, error = 0 }
  for i, t in ipairs(trials) do
    t.solver = t.solver or opts.solver
    w:allocated('local', { id = 'sb-' .. i }, { ['cseng.run'] = run_id }, { task_id = t.task_id })
    w:destroyed('local', 'sb-' .. i, { task_id = t.task_id })
    w:event('trial', fixtures.trial(i, t))
    n[t.outcome] = n[t.outcome] + 1
  end
  if not opts.unfinished then
    w:event('run_finished', { status = 'finished', passed = n.passed, failed = n.failed, errors = n.error,
      recorded = #trials, selected = #trials })
  end
  return w, path
end

--- An agent-eval run: two solvers with their models, repeated attempts, an infrastructure error.
--- openrouter (fake/model-1): t1 passes 1 of 2 attempts, t2 2 of 2, t3 0 of 2; codex (fake/model-2):
--- t1 and t2 pass, t3 is an ESANDBOX error. Returns the run id and the path.
function fixtures.agents_run(dir)
  local id = 'view-agents-local-cold-20261201-130000-eeee'
  local trials = {}
  local function add(task_id, solver, model, attempt, outcome)
    local t = { task_id = task_id, solver = solver, outcome = outcome,
      extra = { attempt = attempt, solver_usage = { model = model, turns = 2, prompt_tokens = 900, completion_tokens = 40 } } }
    if outcome == 'error' then t.error_code, t.error_stage, t.error = 'ESANDBOX', 'solve', 'the sandbox died under the agent' end
    trials[#trials + 1] = t
  end
  for att = 1, 2 do
    add('t1', 'openrouter', 'fake/model-1', att, att == 1 and 'passed' or 'failed')
    add('t2', 'openrouter', 'fake/model-1', att, 'passed')
    add('t3', 'openrouter', 'fake/model-1', att, 'failed')
  end
  add('t1', 'codex', 'fake/model-2', 1, 'passed')
  add('t2', 'codex', 'fake/model-2', 1, 'passed')
  add('t3', 'codex', 'fake/model-2', 1, 'error')
  local _, path = fixtures.task_run(dir, id, trials, { solver = 'openrouter', plan = 'view-agents' })
  return id, path
end

--- A results folder as a team's looks after a few weeks (the run list's layout fixture): `n` task
--- runs (default 40) of several plans, providers, solvers and models, with ids as cseng makes them
--- (plan-provider-mode-stamp-hex), a dataset path of 109 characters, labels of 61, three trials
--- each, started hours apart and lasting minutes. The lines are written directly (the writer stamps
--- every event with the current time). Returns the run ids and the dataset path.
---@param dir string
---@param n? integer
function fixtures.many_runs(dir, n)
  local dataset = '/srv/benchmarks/terminal-bench/datasets/terminal-bench-core-0.1.1/tasks-with-build-steps/smoke16-subset.jsonl'
  local plans = { { 'cold-gold', 'gold' }, { 'solve-llm', 'openrouter', 'anthropic/claude-sonnet-4.5' },
    { 'cold-gold', 'nop' }, { 'solve', 'codex', 'gpt-5-codex' }, { 'warm-gold', 'gold' } }
  local providers = { 'local', 'docker', 'daytona', 'modal', 'e2b' }
  local base = os.time { year = 2026, month = 11, day = 1, hour = 0 }
  local function iso(t) return os.date('!%Y-%m-%dT%H:%M:%S', t) .. '.000000Z' end
  local ids = {}
  for k = 1, n or 40 do
    local p = plans[(k - 1) % #plans + 1]
    local provider = providers[(k * 3 - 1) % #providers + 1]
    local mode = p[1] == 'warm-gold' and 'warm' or 'cold'
    local t0 = base + k * 7 * 3600 + (k * 617) % 3600
    local id = string.format('%s-%s-%s-%s-%04x', p[1], provider, mode, os.date('!%Y%m%d-%H%M%S', t0), (k * 40503) % 65536)
    local lines = {}
    local function event(kind, t, fields)
      fields.event, fields.run_id, fields.time = kind, id, iso(t)
      lines[#lines + 1] = jsonl.encode(fields)
    end
    event('run_started', t0, { plan = p[1], plan_file = 'plans/' .. p[1] .. '.lua', provider = provider, mode = mode,
      solver = p[2], model = p[3], dataset = dataset, task_count = 3, concurrency = 4, host = 'ci-runner-07', pid = DEAD_PID,
      label = k % 3 == 0 and ('nightly terminal-bench core, retries on, build network off #' .. k) or nil,
      argv = jsonl.array({ 'cseng', 'run', 'plans/' .. p[1] .. '.lua' }) })
    local n_out = { passed = 0, failed = 0, error = 0 }
    for i = 1, 3 do
      local outcome = (k + i) % 5 == 0 and 'failed' or ((k + i) % 7 == 0 and 'error' or 'passed')
      local t = { task_id = 'task-' .. i, outcome = outcome, provider = provider, mode = mode, solver = p[2] }
      if outcome == 'error' then t.error_code, t.error_stage, t.error = 'ECREATE', 'start', 'create failed: HTTP 503' end
      if p[3] then t.extra = { solver_usage = { model = p[3], turns = 4, prompt_tokens = 5200, completion_tokens = 310 } } end
      event('trial', t0 + 60 * i, fixtures.trial(i, t))
      n_out[outcome] = n_out[outcome] + 1
    end
    event('run_finished', t0 + 200 + 97 * k, { status = 'finished', passed = n_out.passed, failed = n_out.failed,
      errors = n_out.error, recorded = 3, selected = 3 })
    assert(fs.write(fs.join(dir, id .. '.jsonl'), table.concat(lines, '\n') .. '\n'))
    ids[#ids + 1] = id
  end
  return ids, dataset
end

--- A gold run and a nop run of the same 8 tasks (cold-gold with --solver nop): gold passes them
--- all, nop none, and nop's verify phase takes three times as long. Returns the two run ids.
function fixtures.gold_nop(dir)
  local ids = {}
  for _, solver in ipairs({ 'gold', 'nop' }) do
    local trials = {}
    for k = 1, 8 do
      local t = { task_id = string.format('task-%02d', k), outcome = solver == 'gold' and 'passed' or 'failed' }
      trials[k] = t
      if solver == 'nop' then
        local ph = fixtures.trial(k, t).phases
        ph.verify_seconds = ph.verify_seconds * 3
        t.extra = { phases = ph }
      end
    end
    ids[solver] = string.format('cold-%s-local-cold-20261201-14000%d-%s', solver, solver == 'gold' and 0 or 5,
      solver == 'gold' and '90a1' or '90b2')
    fixtures.task_run(dir, ids[solver], trials, { solver = solver, plan = 'cold-gold' })
  end
  return ids.gold, ids.nop
end

--- The fixture folder: returns {dir, a, b, truncated, foreign, notrun, ids = {...}}.
function fixtures.folder(dir)
  local out = { dir = dir, ids = {} }
  local tasks = { 'alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot' }
  local a = {}
  for k, id in ipairs(tasks) do a[k] = { task_id = id, outcome = id == 'foxtrot' and 'failed' or 'passed' } end
  out.ids.a = 'view-fixture-local-cold-20261201-100000-aaaa'
  local _, pa = fixtures.task_run(dir, out.ids.a, a)
  out.a = pa
  -- B: bravo regresses (failed), foxtrot is fixed, delta is an infrastructure error
  local b = {}
  for k, id in ipairs(tasks) do
    local t = { task_id = id, outcome = 'passed' }
    if id == 'bravo' then t.outcome = 'failed' end
    if id == 'delta' then
      t.outcome, t.error_code, t.error_stage = 'error', 'ETIMEDOUT', 'verify'
      t.error = 'trial timed out after 900 s (in verify)'
    end
    if id == 'alpha' then
      t.extra = { solver_transcript_path = 'transcripts/alpha.jsonl',
        solver_usage = { prompt_tokens = 1200, completion_tokens = 80, cost_usd = 0.0021 } }
    end
    b[k] = t
  end
  out.ids.b = 'view-fixture-local-cold-20261201-110000-bbbb'
  local _, pb = fixtures.task_run(dir, out.ids.b, b, { solver = 'agent' })
  out.b = pb
  assert(results.write_transcript(fs.join(dir, out.ids.b, 'transcripts', 'alpha.jsonl'), {
    { role = 'system', content = 'You are in a sandbox.' },
    { role = 'user', content = 'Solve the task in /app.' },
    { role = 'assistant', turn = 1, content = 'Looking around first.',
      tool_calls = jsonl.array({ { id = 'c1', name = 'bash', arguments = '{"command":"ls /app"}' } }),
      usage = { prompt_tokens = 600, completion_tokens = 40 }, cost = 0.001 },
    { role = 'tool', turn = 1, tool_call_id = 'c1', command = 'ls /app', exit_code = 0, seconds = 0.02, output = 'input.txt\nsolve-me.sh\n' },
    { role = 'assistant', turn = 2, content = 'Done.', finish_reason = 'stop', usage = { prompt_tokens = 600, completion_tokens = 40 }, cost = 0.0011 },
  }))
  -- a copy cut in the middle of a line: its writer is gone
  local text = assert(fs.read(pa))
  local cut = text:find('"event":"trial"', 1, true) + 40
  out.truncated = fs.join(dir, 'cut-short.jsonl')
  assert(fs.write(out.truncated, text:sub(1, cut)))
  out.foreign = fs.join(dir, 'notes.jsonl')
  assert(fs.write(out.foreign, 'this is not JSON\n'))
  out.notrun = fs.join(dir, 'other-tool.jsonl')
  assert(fs.write(out.notrun, '{"event":"something_else","x":1}\n'))
  return out
end

return fixtures
