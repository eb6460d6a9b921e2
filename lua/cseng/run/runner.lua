--- The runner: trials of tasks on a provider.
---
--- A trial is: [build] -> start (create) -> upload -> prepare -> instruction_write -> solve ->
--- verify -> stop. Each phase is timed with the monotonic clock. The allocation record is
--- appended and fsynced the moment create returns an id, before anything else touches the
--- sandbox. stop runs on every path (error, timeout, Ctrl-C) with retries; a cleanup failure
--- stops new allocations. Outcomes: "passed"/"failed" (the verifier ran) or "error" (an
--- infrastructure failure, with error_stage naming the phase).
---
--- The sandbox ledger (allocation record, destroy with retries, the stop rule), the run id,
--- paths, getenv and the provider client belong to the session (lua/cseng/run/session.lua); a trial's
--- `run` is the session plus the solver and the warm cache.
local task = require 'cseng.task'
local clock = require 'cseng.clock'
local crypto = require 'cseng.crypto'
local sys = require 'cseng.sys'
local archive = require 'cseng.archive'
local dataset = require 'cseng.workload.dataset'
local errors = require 'cseng.lib.errors'
local results = require 'cseng.results.log'
local session = require 'cseng.run.session'
local staging = require 'cseng.workload.staging'
local recipe = require 'cseng.workload.recipe'
local replay = require 'cseng.workload.replay'
local util = require 'cseng.lib.util'
local shard = require 'cseng.run.shard'
local frame = require 'cseng.run.frame'
local agent_hooks = require 'cseng.evals.hooks' -- agent evals: attempts, ATIF, probe, ledger, ceiling
local admission = require 'cseng.run.admission'

local runner = {}

local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }
runner.PHASES = PHASES

--- Load a provider adapter by name (lua/providers/<name>.lua): session.adapter.
runner.provider = session.adapter

--- Load a solver by name (lua/solvers/<name>.lua). Only a missing solver module is "unknown
--- solver": a solver whose own require fails is reported with that error.
---@param name string
---@return table
function runner.solver(name) return session.plugin('solvers', 'solver', name, 'solve') end

local function ns_to_s(ns) return ns / 1e9 end

--- The run id's name part: the plan's name, with a "gold" in it naming the solver the run
--- really uses (`cold-gold --solver nop` is a cold-nop run).
function runner.id_name(opts)
  local name = opts.name or 'run'
  if opts.solver and opts.solver ~= 'gold' then name = name:gsub('%f[%w]gold%f[%W]', (opts.solver:gsub('%%', ''))) end
  return name
end

local function cost_of(run, task_, lifetime_s)
  local rates = run.provider.rates or {}
  local cpus = task_.config.cpus or 1
  local gib = (task_.config.memory_mb or 1024) / 1024
  return lifetime_s * (cpus * (rates.vcpu_s or 0) + gib * (rates.gib_s or 0)) + (rates.per_create or 0)
end

--- Verify: tests copied in fresh, /logs/verifier recreated, test.sh run (non-root where the
--- provider allows), reward read from reward.txt, reward.json, or else the exit code.
local function verify(run, ctx, rec)
  local t = ctx.task
  local V = { stage = 'verify' }
  local res = errors.check({ stage = 'verify', prefix = 'resetting /tests and /logs/verifier: ' }, ctx:exec(staging.VERIFY_RESET, { timeout = 120, cwd = '/' }))
  if res.code ~= 0 then
    errors.raise(errors.EVERIFY, 'resetting /tests and /logs/verifier failed: ' .. util.trim(res.stderr), V)
  end
  errors.check({ stage = 'verify', prefix = 'uploading tests/: ' }, ctx:put('/tests', archive.pack_dir(t.dir .. '/tests', {})))
  local user = (run.opts.verifier_user ~= 'root' and (run.provider.capabilities or {}).non_root) and 'verifier' or 'root'
  rec.verifier_user = user
  local timeout = run.opts.verify_timeout_seconds or t.config.verifier_timeout
  local vr = errors.check(V, ctx:exec('bash /tests/test.sh', {
    user = user, timeout = timeout, env = util.merge({ TEST_DIR = '/tests' }, t.config.verifier_env),
  }))
  rec.return_code = vr.code
  rec.stdout_tail = util.tail(vr.stdout, run.opts.tail_chars or 4000)
  rec.stderr_tail = util.tail(vr.stderr, run.opts.tail_chars or 4000)
  rec.verify_timed_out = vr.timed_out or nil
  if vr.timed_out then
    errors.raise(errors.ETIMEDOUT, string.format('verifier timed out after %s s', timeout), V)
  end
  local rr = errors.check({ stage = 'verify', prefix = 'reading the reward: ' }, ctx:exec(staging.READ_REWARD, { timeout = 60, cwd = '/' }))
  local reward, rule = staging.parse_reward(rr.stdout, vr.code)
  rec.reward, rec.reward_rule = reward, rule
  rec.passed = reward ~= nil and reward >= 1 - 1e-9
end

--- Write a solver's transcript beside the run log: results/<run-id>/transcripts/<task>[.a<N>].jsonl.
function runner.save_transcript(run, t, transcript, attempt)
  local path = run.writer.path:gsub('%.jsonl$', '') .. '/transcripts/' .. agent_hooks.trial_name(run, t.id, attempt) .. '.jsonl'
  local ok = results.write_transcript(path, transcript)
  return ok and path or nil
end

-- A build (providers that build images): the image, or an error with the build log's tail.
local function build(run, t, stage)
  local b, err, code = run.provider.build(run.client, staging.build_request(run, t))
  if not b then
    local e = errors.returned(err, code, { stage = stage, default_code = errors.EBUILD })
    e.log_tail = type(err) == 'table' and util.tail(err.log, 4000) or nil
    e.log = nil
    error(e, 0)
  end
  return b
end

--- One trial of one task. Returns the trial record.
local function trial_body(run, t, rec, state)
  local phases = rec.phases
  local function phase(name, fn)
    state.stage = name
    if run.frame then run.frame:emit('phase', { task_id = t.id, phase = name }) end
    local s = clock.now()
    local ok, err = pcall(fn)
    phases[name .. '_seconds'] = ns_to_s(clock.answered(s) - s)
    -- a cancellation (trial timeout, Ctrl-C) is delivered once: a cleanup's pcall inside the
    -- phase may have swallowed it, so the phase boundary checks the task's own flag
    if ok and task.cancelled() then ok, err = false, errors.new(errors.ECANCELED, 'task cancelled') end
    if not ok then
      if type(err) == 'table' and not errors.is_cancel(err) and not err.stage then err.stage = name end
      error(err, 0)
    end
  end
  local spec = staging.sandbox_spec(run, t)
  rec.labels = spec.labels
  -- the environment: its recipe (content key), and how it is made (record's `environment`)
  local rcp = recipe.for_run(run, t)
  local env_mode = staging.env_mode(run)
  spec.recipe = rcp
  local env = { content_key = rcp.key, mode = env_mode, run_steps = rcp.run_steps }
  rec.environment = env
  local replay_now = false
  if run.opts.mode == 'warm' then
    phase('build', function()
      local artifact, hit = runner.warm_artifact(run, t)
      spec.warm_artifact = artifact
      rec.warm_artifact = artifact
      env.method, env.cache_hit = 'warm_artifact', hit and true or false
    end)
  elseif env_mode == 'native' then
    phase('build', function()
      local ok, b = pcall(build, run, t, 'build')
      if not ok then
        if type(b) == 'table' then rec.build_log_tail = b.log_tail end
        error(b, 0)
      end
      spec.image = b.image
      spec.layer = b.layer
      rec.image, rec.build_cache_hit, rec.build_log_tail = b.image, b.cache_hit, b.log_tail
      env.method, env.cache_hit = b.cache_hit and 'cached_layer' or 'native_build', b.cache_hit and true or false
    end)
  else
    replay_now = env_mode == 'replay' and staging.needs_replay(rcp)
    env.method, env.cache_hit = env_mode == 'host' and 'host' or 'replay', false
  end
  state.times = {}
  phase('start', function()
    local pc = run.p and run.p.counts
    if pc then pc.started = pc.started + 1 end
    state.lease = run.session:sandbox(spec, { task_id = t.id }, { times = state.times, provider = run.p })
    rec.sandbox_id = state.lease.id
    if pc then pc.allocated, run.p.live[state.lease.id] = pc.allocated + 1, true end
    rec.image = rec.image or state.lease.sb.image
    rec.limits = state.lease.sb.limits -- the resource limits the provider enforced
  end)
  local times = state.times
  if times.queued then -- waiting for a place under the adapter's max_concurrency is not start time
    local q = times.create_start - times.queued
    rec.queue_seconds = ns_to_s(q)
    phases.start_seconds = math.max(0, phases.start_seconds - rec.queue_seconds)
  end
  local ctx = staging.context(run, t, state.lease.sb)
  agent_hooks.context(run, ctx, rec, state.key) -- agent hook: ATIF session id, the budget of its turns
  ctx.admission = run.admission
  phase('upload', function()
    if not spec.warm_artifact and not replay_now then staging.upload_environment(ctx, rec) end
  end)
  if replay_now then -- a provider without builds: the recipe's steps, in the sandbox
    phase('build', function() runner.replay(run, t, rcp, state.lease.sb, rec) end)
  end
  phase('prepare', function() staging.prepare(ctx) end)
  phase('instruction_write', function() staging.write_instruction(ctx) end)
  phase('solve', function()
    local s = clock.now()
    -- task.guard: a solver cannot swallow an interrupt (its pcall or resume raises it again)
    local ok, r = task.guard(run.solver.solve, ctx)
    ok, r = agent_hooks.after_solve(run, ctx, rec, ok, r) -- agent hook: trajectory, health probe (ESANDBOX)
    if not ok then
      -- keep what a failed solver spent (tokens, the transcript so far), then fail the phase
      if type(r) == 'table' then
        rec.solver_usage = r.usage
        if r.transcript then rec.solver_transcript_path = runner.save_transcript(run, t, r.transcript, rec.attempt) end
      end
      error(r, 0)
    end
    r = r or {}
    rec.solve_elapsed_seconds = ns_to_s(clock.now() - s)
    rec.solve_return_code = r.return_code
    -- gold on a task without solution/solve.sh: not a real failure (nop skips on purpose)
    if r.skipped and run.solver.name == 'gold' then rec.no_solution = true end
    rec.solve_stdout_tail = r.stdout and util.tail(r.stdout, run.opts.tail_chars or 4000) or nil
    rec.solve_stderr_tail = r.stderr and util.tail(r.stderr, run.opts.tail_chars or 4000) or nil
    rec.solve_timed_out = r.timed_out or nil
    rec.solve_note = r.note
    rec.solver_usage = r.usage
    if r.transcript then rec.solver_transcript_path = runner.save_transcript(run, t, r.transcript, rec.attempt) end
  end)
  phase('verify', function() verify(run, ctx, rec) end)
end

--- Run one trial to completion (never raises): phases under the frame's trial wrapper
--- (watchdog, cancellation, the error mapped with a registered code), then stop on every path.
--- attempt: its number among the task's --attempts (default 1); key: its entry in the run's budget.
function runner.trial(run, t, attempt, key)
  local rec = {
    task_id = t.id, provider = run.provider.name, mode = run.opts.mode, solver = run.solver.name,
    phases = {}, started_at = clock.wall(), task_sha256 = t.sha256, attempt = attempt or 1,
  }
  local t0 = clock.now()
  local state = run.frame:guard(rec, function(r, st) st.key = key; trial_body(run, t, r, st) end,
    { timeout = run.opts.timeout_seconds })
  -- stop, on every path
  local lease = state.lease
  if lease then
    -- the limits the trial ran into (local: OOM kills, forks refused), read before the sandbox goes
    if type(lease.sb) == 'table' and lease.sb.hits_seen and next(lease.sb.hits_seen) then
      rec.limit_hits = util.copy(lease.sb.hits_seen)
    end
    local r = lease:close()
    local p = run.p
    if p and r.ok then p.counts.destroyed, p.live[lease.id] = p.counts.destroyed + 1, nil end
    rec.phases.stop_seconds = ns_to_s(lease:span('destroy_start', 'destroy_end'))
    if not r.ok then rec.cleanup_error = tostring(r.error) end
    rec.sandbox_seconds = ns_to_s(lease.times.destroy_end - lease.times.create_start)
    rec.estimated_cost_usd = cost_of(run, t, rec.sandbox_seconds)
  else
    rec.estimated_cost_usd = 0
  end
  rec.elapsed_seconds = ns_to_s(clock.now() - t0)
  rec.finished_at = clock.wall()
  if rec.error then
    rec.outcome = 'error'
    rec.passed = false
  else
    rec.outcome = rec.passed and 'passed' or 'failed'
  end
  rec.fidelity_gaps = rec.fidelity_gaps or staging.fidelity_gaps(run.provider, t, run)
  if #rec.fidelity_gaps == 0 then rec.fidelity_gaps = nil end
  agent_hooks.after_trial(run, rec, key) -- agent hook: cost ledger, model, budget settled
  return rec, state.interrupted
end

--- Replay a recipe in a sandbox (lua/cseng/workload/replay.lua); a failing step raises a build error whose
--- log tail goes to the record (build_log_tail).
function runner.replay(run, t, rcp, sb, rec)
  local info, err, code = replay.run(run.provider, run.client, sb, rcp,
    { timeout = t.config.build_timeout, network = run.opts.build_network ~= 'off' })
  if not info then
    if rec then rec.build_log_tail = err.log end
    error(errors.returned(err, code, { stage = 'build', default_code = errors.EBUILD }), 0)
  end
  if rec then rec.environment.replayed_steps = info.steps end
  return info
end

--- A trial with --retry-errors N (Frame:attempts): an `error` outcome, a timed-out trial
--- included, runs again up to N more times; the last attempt is the trial.
---@return table rec, boolean|nil interrupted
function runner.attempts(run, t, attempt, key)
  return run.frame:attempts(function() return runner.trial(run, t, attempt, key) end)
end

--- Seconds since an artifact was made: from a prewarm file's created_at (ISO-8601 UTC), else
--- the mtime of an artifact that is a path on this machine (the local provider's roots); nil
--- when neither says.
---@return number|nil
function runner.artifact_age(artifact, created_at)
  local now = clock.epoch()
  if type(created_at) == 'string' then
    local y, mo, d, hh, mi, ss = created_at:match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)')
    if y then
      local t = os.time { year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(hh),
        min = tonumber(mi), sec = tonumber(ss), isdst = false }
      -- os.time reads the fields as local time: correct by the local offset at that moment
      local off = os.time(os.date('*t', t)) - os.time(os.date('!*t', t))
      return math.max(0, math.floor(now - (t + off)))
    end
  end
  if type(artifact) == 'string' and artifact:sub(1, 1) == '/' then
    local st = require('cseng.fs').stat(artifact)
    if st and st.mtime then return math.max(0, math.floor(now - st.mtime)) end
  end
  return nil
end

--- The warm artifact of a task: prepared once per run (or given by the user / a prewarm file),
--- named by the recipe's content key. Returns the artifact and whether it existed already.
--- Trials that need an artifact another trial is preparing wait on it (woken when it is done,
--- or failed: then one of them prepares it again).
function runner.warm_artifact(run, t)
  local given = run.opts.warm_artifacts and (run.opts.warm_artifacts[t.id] or run.opts.warm_artifacts['*'])
  if given then
    if not run.warm_cache['given:' .. given] then -- once per artifact: where it came from and its age
      run.warm_cache['given:' .. given] = true
      run.writer:event('prewarmed', { task_id = t.id, artifact = given, provider = run.provider.name, reused = true,
        source = run.opts.prewarm_file and 'prewarm-file' or 'warm-artifact', prewarm_file = run.opts.prewarm_file,
        age_s = runner.artifact_age(given, run.opts.warm_artifacts_created_at) })
    end
    return given, true
  end
  local cache = run.warm_cache
  local key = agent_hooks.artifact_key(run, recipe.for_run(run, t).key:sub(1, 24)) -- agent hook: the solver's install tag
  -- --fresh-artifacts: a new artifact under a new name, whatever exists for this content
  if run.opts.fresh_artifacts then key = key .. '-fresh' .. (run.session.stamp or ''):gsub('%D', '') end
  while type(cache[key]) == 'table' do -- another trial is preparing it: wait to be woken
    local pending = cache[key]
    pending.waiters = pending.waiters + 1
    pending.done:acquire()
  end
  if cache[key] then return cache[key], true end
  if not run.provider.snapshot then
    errors.raise(errors.ENOWARM, "provider '" .. run.provider.name .. "' has no warm mode (no snapshot)")
  end
  local pending = { waiters = 0, done = task.semaphore(0) }
  cache[key] = pending
  local function settle(value)
    cache[key] = value
    for _ = 1, pending.waiters do pending.done:release() end
  end
  if run.provider.find_artifact and not run.opts.fresh_artifacts then -- made earlier for this content: reuse it
    local fok, found = pcall(run.provider.find_artifact, run.client, key, t)
    if fok and found then
      settle(found)
      run.writer:event('prewarmed', { task_id = t.id, artifact = found, provider = run.provider.name, reused = true,
        source = 'provider', age_s = runner.artifact_age(found) })
      return found, true
    end
  end
  local ok, artifact = pcall(runner.prepare_artifact, run, t, key)
  if not ok then settle(nil); error(artifact, 0) end
  settle(artifact)
  return artifact, false
end

--- Create a sandbox, stage the environment, snapshot it, destroy it (the ledger's close: a
--- failed cleanup here stops the run's allocations like any other).
function runner.prepare_artifact(run, t, key)
  local provider, client = run.provider, run.client
  local spec = staging.sandbox_spec(run, t)
  local rcp = recipe.for_run(run, t)
  spec.recipe = rcp
  local mode = staging.env_mode(run)
  if mode == 'native' then
    local b = build(run, t, nil)
    spec.image, spec.layer = b.image, b.layer
  end
  local replay_now = mode == 'replay' and staging.needs_replay(rcp)
  local artifact
  do
    local sb <close> = run.session:sandbox(spec, { task_id = t.id, purpose = 'prewarm' }, { prefix = 'prewarm create: ' })
    local ctx = staging.context(run, t, sb.sb)
    if replay_now then runner.replay(run, t, rcp, sb.sb) else staging.upload_environment(ctx, {}) end
    staging.prepare(ctx)
    agent_hooks.prepare_artifact(run, ctx) -- agent hook: an installed agent's CLI goes into the artifact
    artifact = errors.check({ prefix = 'snapshot: ' }, provider.snapshot(client, sb.sb, key))
  end
  run.writer:event('prewarmed', { task_id = t.id, artifact = artifact, provider = provider.name })
  return artifact
end

--- What a trial works with: the session, its provider connection and the solver, plus the
--- run's warm cache. (The fields staging and the trial read: id, opts, provider, client,
--- writer, getenv, launcher, solver.)
---@param s Session
---@param p Provider
---@param solver table|nil
---@return table run
function runner.run_of(s, p, solver, F)
  local run = {
    session = s, id = s.id, opts = s.opts, provider = p.adapter, client = p.client, solver = solver, p = p,
    writer = s.writer, getenv = s.getenv, warm_cache = {}, launcher = s.launcher, frame = F,
  }
  -- agent hook: the spend ceiling (--max-cost-usd), the model proxy of installed agents
  local note = agent_hooks.init(run)
  if note and F then F:emit('warning', { text = note }) end
  run.admission = admission.endpoint(s) -- the model endpoints' admission (ctx.admission), nil when off
  return run
end

--- Run a tasks plan (a matrix runs one per provider x mode; --resume continues one) through
--- the run frame. opts: provider, provider_config, dataset, solver, mode, task_index,
--- task_limit, tasks, stop_after_passes, timeout_seconds, solve_timeout_seconds, concurrency,
--- output, resume, env, image_map, skip_bad_rows, name, quiet, verifier_user, warm_artifacts,
--- cleanup_backoff, retry_errors, fail_on_error, observers (presentation: cseng.cli.present).
--- Returns the exit status (frame.exit_status) and what the run wrote:
--- {run_id, jsonl, json, records, summary}.
---@return integer status, table info
function runner.run_tasks(opts)
  if opts.rerun_errors and not opts.resume then errors.raise('EUSAGE', '--rerun-errors goes with --resume RUN.jsonl') end
  local prior
  if opts.resume then -- the run as it was recorded: its identity restored, a contradicting flag refused
    prior = results.read_run(opts.resume)
    opts = frame.restore(opts, prior.started)
  end
  local solver = runner.solver(opts.solver or 'gold')
  if solver.check then -- a missing credential stops the run before any sandbox exists
    local ok, msg = solver.check(opts, session.getenv(opts.env))
    if not ok then error(msg, 0) end
  end
  session.adapter(opts.provider) -- an unknown provider is refused before the run log exists
  local tasks, bad = dataset.load(opts.dataset, { skip_bad_rows = opts.skip_bad_rows, source_root = opts.source_root })
  local selected = dataset.select(tasks, opts.task_index, opts.task_limit, opts.tasks)

  local F, sh
  local getenv = session.getenv(opts.env)
  if prior then
    local fixed = prior.started.shard
    if type(fixed) == 'table' then -- a shard resumes as the same shard of the same run
      sh = shard.for_tasks(opts, selected, getenv, util.merge(fixed, { run_id = prior.run_id }))
      selected = sh.selected
    end
    F = frame.open { kind = 'resume', opts = opts, session = { jsonl = opts.resume, run_id = prior.run_id } }
  else
    sh = shard.for_tasks(opts, selected, getenv)
    if sh then -- a shard's log is named by its job, so every shard of a run agrees
      selected = sh.selected
      F = frame.open { kind = 'tasks', opts = opts, session = { run_id = sh.run_id, jsonl = sh.jsonl, json = sh.json } }
    else
      F = frame.open { kind = 'tasks', opts = opts, session = { id_parts = { runner.id_name(opts), opts.provider,
        opts.mode or 'cold' } } }
    end
  end
  local s = F.session
  local p = F:connect(opts.provider, opts.provider_config)
  local provider, writer = p.adapter, s.writer
  local run = runner.run_of(s, p, solver, F)
  -- agent hook: the model proxy stops with the run, however it ends
  local _ <close> = setmetatable({}, { __close = function() agent_hooks.finish(run) end })

  local done, rerun = {}, {}
  if prior then
    -- --rerun-errors: a task whose last recorded outcome is `error` runs again (its new trial
    -- record says rerun = true and replaces the old one in results.trials)
    for _, e in ipairs(prior.events) do
      if e.event == 'trial' then
        done[agent_hooks.trial_id(e.task_id, e.attempt)] = not (opts.rerun_errors and e.outcome == 'error')
      end
    end
    for id, d in pairs(done) do if not d then rerun[id] = true; done[id] = nil end end
    -- sandboxes the killed process left behind are destroyed before anything new starts; a
    -- failure there stops the run from allocating (like any failed cleanup)
    s:sweep(prior.events, { reason = 'resume' })
    writer:event('run_resumed', { argv = opts.argv, pid = sys.pid(), rerun_errors = opts.rerun_errors or nil,
      label = opts.label, solver = solver.name })
    F.identity = prior.started.identity
    F.state.status, F.state.phase = 'running', 'trials'
  else
    local ids = {}
    for i, t in ipairs(selected) do ids[i] = t.id end
    F:started({
      plan = opts.name, plan_file = opts.plan_file, provider = provider.name, mode = opts.mode,
      solver = solver.name, dataset = opts.dataset, task_count = #selected, concurrency = opts.concurrency,
      runtime = provider.runtime and provider.runtime(p.client) or provider.description, versions = sys.versions(),
      seed = opts.seed, bad_rows = #bad > 0 and bad or nil,
      provider_config = opts.provider_config, -- so `cseng cleanup RUN.jsonl` reconnects the same way
      shard = sh and sh.record or nil, retry_errors = opts.retry_errors, endpoint = p.endpoint,
      options = {
        task_index = opts.task_index, task_limit = opts.task_limit, stop_after_passes = opts.stop_after_passes,
        timeout_seconds = opts.timeout_seconds, solve_timeout_seconds = opts.solve_timeout_seconds,
        attempts = opts.attempts, max_cost_usd = opts.max_cost_usd, model_key = run.model_key,
      },
    }, frame.identity(opts, {
      kind = 'tasks', solver = solver.name, provider = provider.name, providers = { provider.name },
      dataset_sha256 = frame.dataset_digest(tasks),
      selection = { task_index = opts.task_index, task_limit = opts.task_limit, tasks = opts.tasks,
        shard = sh and sh.record or nil, count = #selected, ids_sha256 = crypto.sha256_hex(table.concat(ids, '\n')) },
      endpoints = p.endpoint and { [provider.name] = p.endpoint } or nil,
    }))
  end
  for _, b in ipairs(bad) do F:emit('bad_row', b); io.stderr:write('cseng: skipped bad row: ', b.error, '\n') end

  -- agent hook: each task --attempts times, interleaved; a recorded (task, attempt) is done
  local queue = agent_hooks.expand(selected, opts.attempts, function(id, a) return done[agent_hooks.trial_id(id, a)] end)
  F:emit('serve', nil, true)
  -- gold on tasks without a solution solves nothing: said once, before the first trial
  local unsolvable = 0
  if solver.name == 'gold' then
    for _, t in ipairs(selected) do if not t.has_solution then unsolvable = unsolvable + 1 end end
  end
  F:emit('plan', { run_id = s.id, total = #queue, provider = provider.name, mode = opts.mode, solver = solver.name,
    concurrency = opts.concurrency, log = s.jsonl, status_url = F.status_url,
    resumed = prior and (#selected * math.max(1, math.tointeger(opts.attempts) or 1) - #queue) or nil,
    no_solution = unsolvable > 0 and unsolvable or nil, tasks = #selected })
  if opts.on_start then opts.on_start({ run_id = s.id, jsonl = s.jsonl, status_url = F.status_url }) end

  local records, passes = {}, 0
  F:pool(queue, {
    concurrency = opts.concurrency,
    more = function(item)
      if opts.stop_after_passes and passes >= opts.stop_after_passes then return false end
      if item and not agent_hooks.admit(run, item) then -- agent hook: --max-cost-usd
        local b = agent_hooks.stop_reason(run)
        F:stop('max_cost', b and b.message or 'the spend ceiling (--max-cost-usd) would be passed', nil, b)
        return false
      end
      return true
    end,
    each = function(item)
      local t = item.t
      F:emit('trial_start', { task_id = t.id })
      local rec, was_interrupted = runner.attempts(run, t, item.attempt, item)
      if rerun[agent_hooks.trial_id(t.id, item.attempt)] then rec.rerun = true end
      if was_interrupted then
        F:emit('trial_gone', { task_id = t.id })
        writer:event('trial_interrupted', { task_id = t.id, sandbox_id = rec.sandbox_id, stage = rec.error_stage })
        return
      end
      -- an authentication failure stops allocating; a dead endpoint stops the run
      F:observe(p, rec, { start = true })
      writer:event('trial', rec)
      records[#records + 1] = rec
      if rec.outcome == 'passed' then passes = passes + 1 end
      if rec.outcome == 'error' then
        p.last_error = t.id .. ': ' .. tostring(rec.error)
        F.state.last_error = p.last_error
      end
      F:emit('trial', { rec = rec })
    end,
  })
  -- the ceiling may have stopped an agent's turn in the last trial: the run stopped there too
  local budget_stop = agent_hooks.stop_reason(run)
  if budget_stop then F:stop('max_cost', budget_stop.message or 'the spend ceiling (--max-cost-usd)', nil, budget_stop) end
  -- sandboxes of this run the log never learned of (a create whose answer was lost)
  local reclaimed = F:reclaim()
  admission.finish(s) -- the admission counters, before the log is read for the summary
  local all = results.read(s.jsonl)
  local summary = results.summary(all)
  local status = F:close({
    passed = summary.passed, failed = summary.failed, errors = summary.errors,
    recorded = summary.task_count, selected = #selected, reclaimed = reclaimed > 0 and reclaimed or nil,
  }, { records = results.trials(all) })
  all[#all + 1] = F.finished -- the log is read once; the record we wrote joins it
  results.write_summary(all, s.json)
  local info = { run_id = s.id, jsonl = s.jsonl, json = s.json, records = records, summary = summary, status = status }
  return frame.exit_status(F, summary.task_count, summary.errors), info
end

return runner
