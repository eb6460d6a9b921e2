--- What a run of tasks calls for agent evals (lua/cseng/run/kinds/tasks.lua): attempts
--- (`--attempts K`), ATIF trajectories, the health probe after a failed solve, the cost ledger and
--- the spend ceiling (`--max-cost-usd`), the model proxy of installed agents. These functions
--- never write into the run or its records: they return what the caller stores (the run's
--- `evals` table, a context's fields, a record's fields).
local atif = require('cseng.evals.atif')
local ledger = require('cseng.evals.ledger')
local probe = require('cseng.evals.probe')
local proxy = require('cseng.evals.proxy')
local errors = require('cseng.lib.errors')

local hooks = {}

--- The run's evals state, made once per run: {budget (when --max-cost-usd is set), and for a
--- solver that calls its model from the sandbox (`solver.model_proxy`: codex, claude_code)
--- model_key ("proxy" or "sandbox": lua/cseng/evals/proxy.lua's mode from --model-key and the
--- provider), model_proxy (the proxy, listening until hooks.finish) or model_endpoint_port (a
--- loopback endpoint the sandbox calls itself)}, and a line for the console when the real key
--- will be placed in the sandboxes.
---@param run table Run (opts, solver, provider, p, getenv)
---@return table state, string|nil note
function hooks.init(run)
  local st = {}
  local max = run.opts.max_cost_usd
  if max ~= nil then st.budget = ledger.budget(tonumber(max)) end
  local solver = run.solver
  if not (solver and solver.model_proxy) then return st, nil end
  local mode, why = proxy.mode(run.opts.model_key, run.provider, run.p and run.p.endpoint)
  st.model_key = mode
  if mode == 'proxy' then
    st.model_proxy = proxy.start()
    return st, nil
  end
  -- the CLI calls its endpoint itself: one on this machine's loopback is a host port the
  -- sandbox must reach (a provider that isolates its network relays it, nothing else)
  local cfg = solver.config and solver.config(run.opts, run.getenv)
  local host, port = tostring(cfg and cfg.base_url or ''):match('^https?://([^/:]+):(%d+)')
  if host == '127.0.0.1' or host == 'localhost' then st.model_endpoint_port = tonumber(port) end
  return st, string.format('cseng: %s: the real model key is placed in every %s sandbox (%s); task code there can read it '
    .. '(docs/SOLVERS.md, "How keys reach the model")', solver.name, tostring(run.provider.name), why)
end

--- The run is over: its model proxy stops (every token it granted is revoked).
function hooks.finish(run)
  if run.evals.model_proxy then run.evals.model_proxy:close() end
end

--- The trials of a run: each task `attempts` times, attempts interleaved across tasks (every
--- task's attempt 1, then every task's attempt 2, ...), so a run cut short (a ceiling, Ctrl-C)
--- still has a balanced sample. `done(task_id, attempt)` says a trial is already recorded (resume).
---@return table[] items {t, attempt, key}
function hooks.expand(tasks, attempts, done)
  local out = {}
  for a = 1, math.max(1, math.tointeger(attempts) or 1) do
    for _, t in ipairs(tasks) do
      if not (done and done(t.id, a)) then out[#out + 1] = { t = t, attempt = a } end
    end
  end
  return out
end

--- The identity of a recorded trial for resume: "task_id" + attempt.
function hooks.trial_id(task_id, attempt) return tostring(task_id) .. '\0' .. tostring(attempt or 1) end

--- The file-name stem of a trial: the task id (made safe), plus ".a<N>" in a run of several attempts.
function hooks.trial_name(run, task_id, attempt)
  local name = tostring(task_id):gsub('[^%w%._-]', '_')
  if (math.tointeger(run.opts.attempts) or 1) > 1 then name = name .. '.a' .. tostring(attempt or 1) end
  return name
end

--- Before the solve, what the solver's context gets: {session_id (the ATIF session_id), budget
--- (this trial's share of the ceiling), model_proxy (grants for this trial, revoked by
--- hooks.after_trial at the latest)}.
---@return table fields
function hooks.context(run, rec, key)
  local st = run.evals
  local f = { session_id = string.format('%s/%s', tostring(run.id), hooks.trial_name(run, rec.task_id, rec.attempt)) }
  if st.budget then f.budget = st.budget:for_trial(key or rec) end
  if st.model_proxy then f.model_proxy = st.model_proxy:for_trial(key or rec, f.budget) end
  return f
end

--- May another trial be dispatched? False once the ceiling would be passed (hooks.stop_reason says why).
function hooks.admit(run, key)
  if not run.evals.budget then return true end
  return run.evals.budget:admit_trial(key)
end

-- Write a solver's trajectory: results/<run-id>/trajectories/<trial>.trajectory.json; returns
-- the record's trajectory_path, or its trajectory_error.
local function save_trajectory(run, rec, doc)
  local dir = run.writer.path:gsub('%.jsonl$', '') .. '/trajectories/'
  local path = dir .. hooks.trial_name(run, rec.task_id, rec.attempt) .. '.trajectory.json'
  local ok, err = pcall(atif.write, path, doc)
  if ok then return { trajectory_path = path } end
  return { trajectory_error = errors.line(err) }
end

--- After the solver returned (ok, r) or raised (not ok, r): the trajectory is written, and a failed
--- or timed-out solve is followed by the health probe; a dead sandbox turns the outcome into an
--- ESANDBOX error (retriable), keeping what the solver spent. Returns the (possibly new) ok, r,
--- and the record's fields (trajectory_path or trajectory_error, probe).
---@return boolean ok, any r, table fields
function hooks.after_solve(run, ctx, rec, ok, r)
  local doc = type(r) == 'table' and r.trajectory or nil
  local fields = type(doc) == 'table' and save_trajectory(run, rec, doc) or {}
  if not probe.needed(ok, r) then return ok, r, fields end
  local alive, detail = probe.alive(ctx)
  fields.probe = { alive = alive, detail = detail }
  if alive then return ok, r, fields end
  local e = probe.error(detail, not ok and r or nil)
  if type(r) == 'table' then e.usage, e.transcript = r.usage, r.transcript end
  return false, e, fields
end

--- After the trial's sandbox is gone: its model proxy grants revoked, the budget settled, and the
--- record's fields returned: the cost ledger, the model, the retriable flag.
---@return table fields {cost, model, retriable}
function hooks.after_trial(run, rec, key)
  local st = run.evals
  if st.model_proxy then st.model_proxy:revoke_trial(key or rec) end -- its tokens open nothing from now on
  local p = run.p
  local cost = ledger.trial(rec, p and p.rates or run.provider.rates, p and p.rates_source and p.rates_source.from)
  local u = rec.solver_usage
  local f = { cost = cost, model = rec.model or (type(u) == 'table' and type(u.model) == 'string' and u.model or nil),
    retriable = rec.error_code == errors.ESANDBOX or nil }
  if st.budget then st.budget:settle(key or rec, cost.total_usd) end
  return f
end

--- Warm mode: the artifact of a solver that installs something (an installed agent) holds it, so its
--- name carries the solver's tag (an artifact without the CLI is never mistaken for one with it).
function hooks.artifact_key(run, key)
  local tag = run.solver and run.solver.install and run.solver.artifact_tag
  return tag and (key .. '-' .. tag) or key
end

--- Warm mode: before the snapshot, the solver installs into the prepared sandbox (solver.install).
function hooks.prepare_artifact(run, ctx)
  if run.solver and run.solver.install then run.solver.install(ctx) end
end

--- The run's stop reason from the budget, or nil.
function hooks.stop_reason(run)
  return run.evals.budget and run.evals.budget.stop or nil
end

return hooks
