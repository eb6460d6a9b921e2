--- The tasks kind: trials of tasks on one provider (plans/cold-gold.lua, warm-gold, solve,
--- solve-llm; a matrix is one such run per provider x mode; `--resume` continues one).
---
--- A trial is: [build] -> start (create) -> upload -> prepare -> instruction_write -> solve ->
--- verify -> stop. Each phase is timed with the monotonic clock. The allocation record is
--- appended and fsynced the moment create returns an id, before anything else touches the
--- sandbox. stop runs on every path (error, timeout, Ctrl-C) with retries; a cleanup failure
--- stops new allocations. Outcomes: "passed"/"failed" (the verifier ran) or "error" (an
--- infrastructure failure, with error_stage naming the phase).
---
--- What every kind shares (the session and its sandbox ledger, the worker loop, the trial's
--- watchdog and retries, halting, the end) is the frame's (lua/cseng/run/frame.lua); this file
--- supplies what differs: how the run opens (its log, --resume), what it records first, its
--- trials, and its end.
local task = require('cseng.task')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local sys = require('cseng.sys')
local archive = require('cseng.archive')
local dataset = require('cseng.workload.dataset')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')
local session = require('cseng.run.session')
local staging = require('cseng.workload.staging')
local recipe = require('cseng.workload.recipe')
local util = require('cseng.lib.util')
local shard = require('cseng.run.shard')
local frame = require('cseng.run.frame')
local records = require('cseng.run.records')
local environment = require('cseng.run.environment')
local admission = require('cseng.run.admission')
local evals = require('cseng.evals.hooks') -- agent evals: attempts, ATIF, probe, ledger, ceiling
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')

local K = { name = 'tasks', event = 'trial', retries = true }

K.PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }

--- Load a solver by name (lua/solvers/<name>.lua). Only a missing solver module is "unknown
--- solver": a solver whose own require fails is reported with that error.
---@param name string
---@return table
function K.solver(name) return session.plugin('solvers', 'solver', name, 'solve') end

local function ns_to_s(ns) return ns / 1e9 end

--- The run id's name part: the plan's name, with a "gold" in it naming the solver the run
--- really uses (`cold-gold --solver nop` is a cold-nop run).
function K.id_name(opts)
  local name = opts.name or 'run'
  if opts.solver and opts.solver ~= 'gold' then name = name:gsub('%f[%w]gold%f[%W]', (opts.solver:gsub('%%', ''))) end
  return name
end

local function cost_of(run, t, lifetime_s)
  local rates = run.p.rates or run.provider.rates or {}
  local cpus = t.config.cpus or 1
  local gib = (t.config.memory_mb or 1024) / 1024
  return lifetime_s * (cpus * (rates.vcpu_s or 0) + gib * (rates.gib_s or 0)) + (rates.per_create or 0)
end

--- What a trial works with (a Run record, lua/cseng/run/records.lua): the session, its provider
--- connection and the solver, the run's warm cache, the evals layer's state. Its console note
--- (a real model key placed in sandboxes) is said through the frame.
---@return table run, string|nil note
function K.run_of(s, p, solver, F)
  local run = records.run {
    session = s, id = s.id, opts = s.opts, provider = p.adapter, client = p.client, solver = solver, p = p,
    writer = s.writer, getenv = s.getenv, warm_cache = {}, launcher = s.launcher, frame = F,
  }
  local st, note = evals.init(run) -- the spend ceiling (--max-cost-usd), the model proxy of installed agents
  run.evals = st
  run.admission = admission.endpoint(s) -- the model endpoints' admission (ctx.admission), nil when off
  return run, note
end

-- ---- one trial ---------------------------------------------------------------------------

--- Verify: tests copied in fresh, /logs/verifier recreated, test.sh run (non-root where the
--- provider allows), the rewards read (reward.json's keys and reward.txt, as Harbor reads them:
--- staging.read_rewards), the primary metric deciding pass/fail, else the exit code. o (a step of
--- a [[steps]] task): {tests = {host folders copied into /tests, in order}, script = the test
--- script under /tests, env, timeout, into = the record written (default rec)}.
local function verify(run, ctx, rec, o)
  o = o or {}
  local t = ctx.task
  local out = o.into or rec
  local V = { stage = 'verify' }
  local res = errors.check({ stage = 'verify', prefix = 'resetting /tests and /logs/verifier: ' }, ctx:exec(staging.VERIFY_RESET, { timeout = 120, cwd = '/' }))
  if res.code ~= 0 then
    errors.raise(errors.EVERIFY, 'resetting /tests and /logs/verifier failed: ' .. util.trim(res.stderr), V)
  end
  for _, d in ipairs(o.tests or { t.dir .. '/tests' }) do
    errors.check({ stage = 'verify', prefix = 'uploading tests/: ' }, ctx:put('/tests', archive.pack_dir(d, {})))
  end
  local user = (run.opts.verifier_user ~= 'root' and (run.provider.capabilities or {}).non_root) and 'verifier' or 'root'
  rec.verifier_user = user
  local timeout = run.opts.verify_timeout_seconds or o.timeout or t.config.verifier_timeout
  local vr = errors.check(V, ctx:exec('bash ' .. (o.script or '/tests/test.sh'), {
    user = user, timeout = timeout, env = util.merge(util.merge({ TEST_DIR = '/tests' }, t.config.verifier_env), o.env),
  }))
  out.return_code = vr.code
  out.stdout_tail = util.tail(vr.stdout, run.opts.tail_chars or 4000)
  out.stderr_tail = util.tail(vr.stderr, run.opts.tail_chars or 4000)
  out.verify_timed_out = vr.timed_out or nil
  if vr.timed_out then
    errors.raise(errors.ETIMEDOUT, string.format('verifier timed out after %s s', timeout), V)
  end
  local rr = errors.check({ stage = 'verify', prefix = 'reading the reward: ' }, ctx:exec(staging.READ_REWARD, { timeout = 60, cwd = '/' }))
  local primary = run.opts.primary_metric or t.config.primary_metric
  local reward, rule, rewards, key = staging.parse_reward(rr.stdout, vr.code, primary)
  out.reward, out.reward_rule, out.rewards = reward, rule, rewards
  if rewards then rec.primary_metric = key end
  out.passed = reward ~= nil and reward >= 1 - 1e-9
end

--- Write a solver's transcript beside the run log: results/<run-id>/transcripts/<task>[.a<N>].jsonl.
function K.save_transcript(run, t, transcript, attempt)
  local path = run.writer.path:gsub('%.jsonl$', '') .. '/transcripts/' .. evals.trial_name(run, t.id, attempt) .. '.jsonl'
  local ok = results.write_transcript(path, transcript)
  return ok and path or nil
end

local function merge_into(rec, fields)
  for k, v in pairs(fields or {}) do rec[k] = v end
end

--- A new trial record for item ({t, attempt, key}).
function K.record(F, item)
  local run = F.k.run
  return records.trial {
    task_id = item.t.id, provider = run.provider.name, mode = run.opts.mode, solver = run.solver.name,
    phases = {}, started_at = clock.wall(), task_sha256 = item.t.sha256, attempt = item.attempt or 1,
  }
end

function K.start(F, item) F:emit('trial_start', { task_id = item.t.id }) end

--- One trial's body, under the frame's watchdog (Frame:trial): the phases; state.lease is its
--- sandbox (closed by K.settle on every path).
function K.trial(F, item, rec, state)
  local run, t = F.k.run, item.t
  local phases = rec.phases
  local function phase(name, fn)
    state.stage = name
    F:emit('phase', { task_id = t.id, phase = name })
    local s = clock.now()
    local ok, err = pcall(fn)
    -- a [[steps]] task runs its phases once per step: their times add up
    phases[name .. '_seconds'] = (phases[name .. '_seconds'] or 0) + ns_to_s(clock.answered(s) - s)
    -- a cancellation (trial timeout, Ctrl-C) is delivered once: a cleanup's pcall inside the
    -- phase may have swallowed it, so the phase boundary checks the task's own flag
    if ok and task.cancelled() then ok, err = false, errors.new(errors.ECANCELED, 'task cancelled') end
    if not ok then
      if type(err) == 'table' and not errors.is_cancel(err) and not err.stage then err.stage = name end
      error(err, 0)
    end
  end
  local spec = staging.sandbox_spec(run, t)
  state.spec = spec
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
      local artifact, hit = environment.warm_artifact(run, t)
      spec.warm_artifact = artifact
      rec.warm_artifact = artifact
      env.method, env.cache_hit = 'warm_artifact', hit and true or false
    end)
  elseif env_mode == 'native' then
    phase('build', function()
      local ok, b = pcall(environment.build, run, t, 'build')
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
    local pc = run.p.counts
    pc.started = pc.started + 1
    state.lease = run.session:sandbox(spec, { task_id = t.id }, { times = state.times, provider = run.p })
    rec.sandbox_id = state.lease.id
    pc.allocated, run.p.live[state.lease.id] = pc.allocated + 1, true
    rec.image = rec.image or state.lease.sb.image
    rec.limits = state.lease.sb.limits -- the resource limits the provider enforced
  end)
  local times = state.times
  if times.queued then -- waiting for a place under the adapter's max_concurrency is not start time
    local q = times.create_start - times.queued
    rec.queue_seconds = ns_to_s(q)
    phases.start_seconds = math.max(0, phases.start_seconds - rec.queue_seconds)
  end
  local extra = evals.context(run, rec, item) -- the ATIF session id, the budget of its turns, the proxy
  extra.admission = run.admission
  local ctx = staging.context(run, t, state.lease.sb, extra)
  phase('upload', function()
    if not spec.warm_artifact and not replay_now then staging.upload_environment(ctx, rec) end
  end)
  if replay_now then -- a provider without builds: the recipe's steps, in the sandbox
    phase('build', function()
      local ok, info = pcall(environment.replay, run, t, rcp, state.lease.sb)
      if not ok then
        if type(info) == 'table' then rec.build_log_tail = info.log end
        error(info, 0)
      end
      env.replayed_steps = info.steps
    end)
  end
  phase('prepare', function() staging.prepare(ctx) end)
  phase('instruction_write', function() staging.write_instruction(ctx) end)
  local function solve(sctx, into)
    local s = clock.now()
    -- task.guard: a solver cannot swallow an interrupt (its pcall or resume raises it again)
    local ok, r = task.guard(run.solver.solve, sctx)
    local fields
    ok, r, fields = evals.after_solve(run, sctx, rec, ok, r) -- trajectory, health probe (ESANDBOX)
    merge_into(rec, fields)
    if not ok then
      -- keep what a failed solver spent (tokens, the transcript so far), then fail the phase
      if type(r) == 'table' then
        rec.solver_usage = r.usage
        if r.transcript then rec.solver_transcript_path = K.save_transcript(run, t, r.transcript, rec.attempt) end
      end
      error(r, 0)
    end
    r = r or {}
    into.solve_elapsed_seconds = ns_to_s(clock.now() - s)
    into.solve_return_code = r.return_code
    -- gold on a task without solution/solve.sh: not a real failure (nop skips on purpose)
    if r.skipped and run.solver.name == 'gold' then rec.no_solution = true end
    into.solve_stdout_tail = r.stdout and util.tail(r.stdout, run.opts.tail_chars or 4000) or nil
    into.solve_stderr_tail = r.stderr and util.tail(r.stderr, run.opts.tail_chars or 4000) or nil
    into.solve_timed_out = r.timed_out or nil
    into.solve_note = r.note
    rec.solver_usage = K.add_usage(rec.solver_usage, r.usage)
    if r.transcript then rec.solver_transcript_path = K.save_transcript(run, t, r.transcript, rec.attempt) end
  end
  if t.config.steps then
    K.steps(F, run, t, ctx, rec, state, phase, solve, verify)
  else
    K.network(run, state, rec, 'agent', staging.phase_network(run, t, 'agent'))
    phase('solve', function() solve(ctx, rec) end)
    K.network(run, state, rec, 'verifier', staging.phase_network(run, t, 'verifier'))
    phase('verify', function() verify(run, ctx, rec) end)
    K.collect_artifacts(run, t, ctx, rec, t.config.artifacts)
  end
end

--- Two solves' usage (the steps of a [[steps]] task) as one: counts added, the rest the latest's.
function K.add_usage(a, b)
  if not a then return b end
  if not b then return a end
  local out = util.copy(b)
  for k, v in pairs(a) do
    if type(v) == 'number' and type(b[k]) == 'number' and k ~= 'elapsed_seconds' then out[k] = v + b[k]
    elseif out[k] == nil then out[k] = v end
  end
  return out
end

--- A phase's network on the live sandbox (Harbor 1.3's network_mode / allowed_hosts): the
--- provider's network_policy where it has one (local: an egress filter in the sandbox's own
--- network namespace), else the sandbox as it was made; what could not be held is the phase's
--- `gap` in the trial's `network` record.
function K.network(run, state, rec, key, eff)
  local P, sb = run.provider, state.lease.sb
  local got = { mode = eff.mode, declared = eff.declared, hosts = #eff.hosts > 0 and eff.hosts or nil, withheld = eff.withheld }
  local has = state.spec and state.spec.network
  if P.network_policy then
    local res, err = P.network_policy(run.client, sb, eff)
    if res then
      got.enforced = res.enforced
      got.allowed = res.allowed and #res.allowed > 0 and res.allowed or nil
      if res.unenforced and #res.unenforced > 0 then
        got.unenforced = res.unenforced
        got.gap = 'hosts the filter cannot hold by address were denied'
      end
    else
      got.gap = tostring(err) .. (has and ': this phase had the sandbox\'s network' or '')
    end
  elseif eff.mode == 'no-network' and has then
    got.gap = P.name .. ' cannot take the network away for one phase: this phase had the sandbox\'s network'
  elseif eff.mode == 'allowlist' and has then
    got.gap = P.name .. ' cannot filter egress by host: this phase had the sandbox\'s full network'
  elseif eff.mode ~= 'no-network' and not has then
    got.gap = 'the sandbox was made without the network'
  else
    got.enforced = 'the sandbox as made'
  end
  local n = rec.network or {}
  n[key] = got
  rec.network = n
end

--- The artifacts of a task (task.toml `artifacts`, and Harbor's convention folder /logs/artifacts)
--- copied out of the sandbox after the verifier into results/<run-id>/artifacts/<trial>/ (a
--- source's path below the folder, or its destination), with Harbor's manifest.json; the trial's
--- `artifacts` lists each {source, destination, type, status, bytes}. A missing source is
--- "skipped", an empty folder "empty"; nothing is followed outside the folder (archive.extract).
function K.collect_artifacts(run, t, ctx, rec, list, sub)
  local entries = { { source = '/logs/artifacts', convention = true } }
  for _, a in ipairs(list or {}) do
    if a.source:gsub('/+$', '') == '/logs/artifacts' then entries[1] = a else entries[#entries + 1] = a end
  end
  local base = run.writer.path:gsub('%.jsonl$', '') .. '/artifacts/' .. evals.trial_name(run, t.id, rec.attempt)
    .. (sub and ('/steps/' .. sub) or '')
  local out, manifest = jsonl.array(), jsonl.array()
  for i, a in ipairs(entries) do
    local rel = a.source:gsub('^/+', ''):gsub('/+$', '')
    local dest = a.destination or rel
    local q = util.shell_quote
    local excl = {}
    for _, x in ipairs(a.exclude or {}) do excl[#excl + 1] = '--exclude=' .. q(x) end
    local tmp = '/tmp/cseng-artifact-' .. i .. '.tar'
    local probe = ctx:exec(string.format('if [ -d %s ]; then if [ -z "$(ls -A %s)" ]; then echo empty; else echo dir; '
      .. 'tar -C %s -cf %s %s . ; fi; elif [ -e %s ]; then echo file; tar -C %s -cf %s %s; else echo missing; fi',
      q(a.source), q(a.source), q(a.source), tmp, table.concat(excl, ' '), q(a.source), q(util.dirname(a.source)), tmp,
      q(util.basename(a.source))), { cwd = '/', timeout = 120 })
    local kind = probe and util.trim(probe.stdout or ''):match('%a+$') or 'failed'
    local e = { source = a.source, destination = dest, type = kind == 'file' and 'file' or 'directory', status = 'ok' }
    if kind == 'missing' then e.status = 'skipped'
    elseif kind == 'empty' then e.status = 'empty'
    elseif kind ~= 'dir' and kind ~= 'file' then e.status = 'failed'
    else
      local bytes = ctx:get(tmp)
      ctx:exec('rm -f ' .. tmp, { cwd = '/', timeout = 30 })
      local target = base .. '/' .. (kind == 'file' and util.dirname(dest) or dest)
      local ok = bytes and fs.mkdir_p(target) and archive.extract(bytes, target, { from = 'bytes' })
      if not ok then e.status = 'failed' else e.bytes = #bytes end
      if ok and kind == 'file' and a.destination and util.basename(dest) ~= util.basename(a.source) then
        fs.rename(target .. '/' .. util.basename(a.source), base .. '/' .. dest)
      end
    end
    if not (a.convention and e.status == 'skipped') then
      out[#out + 1] = e
      manifest[#manifest + 1] = { source = e.source, destination = e.destination, type = e.type, status = e.status }
    end
  end
  if #out == 0 then return end
  fs.mkdir_p(base)
  fs.write(base .. '/manifest.json', jsonl.encode(manifest) .. '\n')
  if sub then return out end
  rec.artifacts = out
  rec.artifacts_dir = base
end

--- A [[steps]] task (Harbor 1.3): per step, in order, its workdir/ files copied into the working
--- directory and its setup.sh run, its instruction written and solved (the solver sees the step's
--- instruction and, for gold, its solution/), its verifier (its tests/ over the task's, its
--- test.sh or the task's) and its artifacts; a step whose rewards fall below its `min_reward`
--- (a number gates `reward`, a table each key; a missing key is -inf), or whose solve or
--- verifier failed, stops the trial there (`step_stop`). The trial's rewards are the steps'
--- per-key means (missing keys 0), or the last step's with multi_step_reward_strategy = "final".
function K.steps(F, run, t, ctx, rec, state, phase, solve, verify_fn)
  local steps = t.config.steps
  local list = jsonl.array()
  rec.steps = list
  local q = util.shell_quote
  for i, st in ipairs(steps) do
    local sdir = t.dir .. '/steps/' .. st.name
    local srec = { name = st.name }
    list[i] = srec
    F:emit('phase', { task_id = t.id, phase = 'step ' .. st.name })
    if st.has_workdir then
      errors.check({ stage = 'prepare', prefix = 'step ' .. st.name .. ' workdir/: ' }, ctx:put(ctx.workdir, archive.pack_dir(sdir .. '/workdir', {})))
      if fs.exists(sdir .. '/workdir/setup.sh') then
        local r = ctx:exec('bash ' .. q(ctx.workdir:gsub('/+$', '') .. '/setup.sh'), { timeout = 600 })
        if not r or r.code ~= 0 then
          srec.error = 'setup.sh exited ' .. tostring(r and r.code)
          rec.step_stop = { step = st.name, why = srec.error }
          break
        end
      end
    end
    -- what the solver sees: the step's instruction, timeout and solution
    local view = setmetatable({ instruction = st.instruction, step = st.name,
      solution_dir = st.has_solution and (sdir .. '/solution') or nil,
      has_solution = st.has_solution or t.has_solution,
      config = setmetatable({ agent_timeout = st.agent_timeout or t.config.agent_timeout }, { __index = t.config }) },
      { __index = t })
    local sctx = setmetatable({ task = view, step = st.name, timeout = run.opts.solve_timeout_seconds or view.config.agent_timeout },
      { __index = ctx })
    staging.write_instruction(sctx)
    K.network(run, state, rec, 'agent:' .. st.name, staging.phase_network(run, t, 'agent', st))
    phase('solve', function() solve(sctx, srec) end)
    K.network(run, state, rec, 'verifier:' .. st.name, staging.phase_network(run, t, 'verifier', st))
    local tests = { }
    if fs.exists(t.dir .. '/tests') then tests[#tests + 1] = t.dir .. '/tests' end
    if fs.exists(sdir .. '/tests') then tests[#tests + 1] = sdir .. '/tests' end
    phase('verify', function()
      verify_fn(run, ctx, rec, { tests = tests, into = srec, timeout = st.verifier_timeout,
        env = st.verifier_env, script = '/tests/test.sh' })
    end)
    srec.artifacts = K.collect_artifacts(run, t, ctx, rec, st.artifacts, st.name)
    if st.min_reward then
      for key, threshold in pairs(st.min_reward) do
        local got = srec.rewards and srec.rewards[key]
        if got == nil and key == 'reward' and not srec.rewards then got = srec.reward end
        if got == nil or got < threshold then
          srec.gate = { key = key, min_reward = threshold, got = got }
          rec.step_stop = { step = st.name, why = string.format('%s=%s below min_reward %g', key,
            type(got) == 'number' and string.format('%g', got) or 'missing', threshold) }
          break
        end
      end
      if rec.step_stop then break end
    end
  end
  -- the trial's rewards from its steps' (Harbor's MultiStepTrial: mean per key, or the final step's)
  local done = {}
  for _, sr in ipairs(list) do if sr.rewards or sr.reward ~= nil then done[#done + 1] = sr end end
  local rewards
  if t.config.multi_step_reward_strategy == 'final' then
    local last = list[#list]
    rewards = last and (last.rewards or (last.reward ~= nil and { reward = last.reward })) or nil
  elseif #done > 0 then
    local keys = {}
    for _, sr in ipairs(done) do for k in pairs(sr.rewards or { reward = sr.reward }) do keys[k] = true end end
    rewards = {}
    for k in pairs(keys) do
      local sum = 0
      for _, sr in ipairs(done) do sum = sum + ((sr.rewards or { reward = sr.reward })[k] or 0) end
      rewards[k] = sum / #done
    end
  end
  local primary = run.opts.primary_metric or t.config.primary_metric or 'reward'
  rec.rewards = rewards
  rec.reward = rewards and rewards[primary] or nil
  rec.primary_metric = rewards and primary or nil
  rec.reward_rule = 'steps: ' .. (t.config.multi_step_reward_strategy or 'mean') .. ' of ' .. #done .. ' of ' .. #steps
  -- every step must have run and passed its verifier for the trial to pass
  rec.passed = not rec.step_stop and #list == #steps and rec.reward ~= nil and rec.reward >= 1 - 1e-9
  for _, sr in ipairs(list) do if not sr.passed then rec.passed = false end end
end

--- After the body, on every path: the sandbox destroyed (stop), the outcome, the cost.
function K.settle(F, item, rec, state, t0)
  local run, t = F.k.run, item.t
  local lease = state.lease
  if lease then
    -- the limits the trial ran into (local: OOM kills, forks refused), read before the sandbox goes
    if type(lease.sb) == 'table' and lease.sb.hits_seen and next(lease.sb.hits_seen) then
      rec.limit_hits = util.copy(lease.sb.hits_seen)
    end
    local r = lease:close()
    local p = run.p
    if r.ok then p.counts.destroyed, p.live[lease.id] = p.counts.destroyed + 1, nil end
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
  local gaps = staging.fidelity_gaps(run.provider, t, run)
  rec.fidelity_gaps = #gaps > 0 and gaps or nil
  merge_into(rec, evals.after_trial(run, rec, item)) -- cost ledger, model, budget settled
end

--- A finished trial (after its tries): recorded, counted, watched by the stop rules.
function K.finished(F, item, rec, interrupted)
  local run, k = F.k.run, F.k
  local t = item.t
  if k.rerun[evals.trial_id(t.id, item.attempt)] then rec.rerun = true end
  if interrupted then
    F:emit('trial_gone', { task_id = t.id })
    run.writer:event('trial_interrupted', { task_id = t.id, sandbox_id = rec.sandbox_id, stage = rec.error_stage })
    return
  end
  -- an authentication failure stops allocating; a dead endpoint stops the run
  F:observe(run.p, rec, { start = true })
  run.writer:event('trial', rec)
  k.records[#k.records + 1] = rec
  if rec.outcome == 'passed' then k.passes = k.passes + 1 end
  if rec.outcome == 'error' then
    run.p.last_error = t.id .. ': ' .. tostring(rec.error)
    F.state.last_error = run.p.last_error
  end
  F:emit('trial', { rec = rec })
end

--- Whether another trial may start: --stop-after-passes, the spend ceiling.
function K.more(F, item)
  local run, o = F.k.run, F.opts
  if o.stop_after_passes and F.k.passes >= o.stop_after_passes then return false end
  if item and not evals.admit(run, item) then -- --max-cost-usd
    local b = evals.stop_reason(run)
    F:stop('max_cost', b and b.message or 'the spend ceiling (--max-cost-usd) would be passed', nil, b)
    return false
  end
  return true
end

-- ---- the run -------------------------------------------------------------------------------

--- How the run opens: the options (--resume restores the run's own), what the log is named
--- (a new run, a shard of a job, or the log being resumed), and the kind's state: the solver,
--- the dataset and the selection, loaded before any file is written (a missing credential, an
--- unknown provider or a bad dataset stops us first).
function K.open(opts)
  if opts.rerun_errors and not opts.resume then errors.raise('EUSAGE', '--rerun-errors goes with --resume RUN.jsonl') end
  local prior
  if opts.resume then -- the run as it was recorded: its identity restored, a contradicting flag refused
    prior = results.read_run(opts.resume)
    opts = frame.restore(opts, prior.started)
  end
  local solver = K.solver(opts.solver or 'gold')
  if solver.check then -- a missing credential stops the run before any sandbox exists
    local ok, msg = solver.check(opts, session.getenv(opts.env))
    if not ok then error(msg, 0) end
  end
  -- an unknown provider is refused before the run log exists (a usage error leaves no file)
  session.adapter(opts.provider or 'local')
  local tasks, bad, resolved
  if opts.registry then -- --dataset NAME@VERSION through a Harbor registry: fetched at its pins, digests checked
    tasks, resolved = dataset.load_registry(opts.dataset or '', opts.registry, { getenv = session.getenv(opts.env) })
    bad = {}
  else
    tasks, bad = dataset.load(opts.dataset, { skip_bad_rows = opts.skip_bad_rows, source_root = opts.source_root })
  end
  local selected = dataset.select(tasks, opts.task_index, opts.task_limit, opts.tasks)
  local getenv = session.getenv(opts.env)
  local sh, so
  if prior then
    local fixed = prior.started.shard
    if type(fixed) == 'table' then -- a shard resumes as the same shard of the same run
      sh = shard.for_tasks(opts, selected, getenv, util.merge(fixed, { run_id = prior.run_id }))
      selected = sh.selected
    end
    so = { jsonl = opts.resume, run_id = prior.run_id, resumed = true }
  else
    sh = shard.for_tasks(opts, selected, getenv)
    if sh then -- a shard's log is named by its job, so every shard of a run agrees
      selected = sh.selected
      so = { run_id = sh.run_id, jsonl = sh.jsonl, json = sh.json }
    else
      so = { id_parts = { K.id_name(opts), opts.provider, opts.mode or 'cold' } }
    end
  end
  if prior and resolved and type(prior.started.identity) == 'table' and type(prior.started.identity.registry) == 'table' then
    -- a registry whose dataset moved since the run began: the resumed run would mix two datasets
    local was = prior.started.identity.registry.content_hash
    if was and was ~= resolved.content_hash then
      errors.raise('EUSAGE', string.format('--resume: the registry now resolves %s to content %s, the run began with %s: '
        .. 'resume restores the run as it was', tostring(opts.dataset), resolved.content_hash, was))
    end
  end
  return opts, so, { prior = prior, solver = solver, tasks = tasks, bad = bad, selected = selected, sh = sh,
    records = {}, passes = 0, rerun = {}, done = {}, resolved = resolved }
end

--- The run begins: the provider connected, the log's first record (run_started, or for
--- --resume run_resumed after the killed process's sandboxes are swept), the trials to run.
function K.begin(F)
  local k, opts = F.k, F.opts
  local s = F.session
  local p = F:connect(opts.provider, opts.provider_config)
  local provider, writer = p.adapter, s.writer
  local run, note = K.run_of(s, p, k.solver, F)
  if note then F:emit('warning', { text = note }) end
  k.run = run
  local prior, selected, sh = k.prior, k.selected, k.sh
  local done = k.done
  if prior then
    -- --rerun-errors: a task whose last recorded outcome is `error` runs again (its new trial
    -- record says rerun = true and replaces the old one in results.trials)
    for _, e in ipairs(prior.events) do
      if e.event == 'trial' then
        done[evals.trial_id(e.task_id, e.attempt)] = not (opts.rerun_errors and e.outcome == 'error')
      end
    end
    for id, d in pairs(done) do if not d then k.rerun[id] = true; done[id] = nil end end
    -- sandboxes the killed process left behind are destroyed before anything new starts; a
    -- failure there stops the run from allocating (like any failed cleanup)
    s:sweep(prior.events, { reason = 'resume' })
    writer:event('run_resumed', { argv = opts.argv, pid = sys.pid(), rerun_errors = opts.rerun_errors or nil,
      label = opts.label, solver = k.solver.name })
    F:resumed(prior.started.identity)
  else
    local ids = {}
    for i, t in ipairs(selected) do ids[i] = t.id end
    F:started({
      plan = opts.name, plan_file = opts.plan_file, provider = provider.name, mode = opts.mode,
      solver = k.solver.name, dataset = opts.dataset, task_count = #selected, concurrency = opts.concurrency,
      runtime = provider.runtime and provider.runtime(p.client) or provider.description, versions = sys.versions(),
      seed = opts.seed, bad_rows = #k.bad > 0 and k.bad or nil,
      provider_config = opts.provider_config, -- so `cseng cleanup RUN.jsonl` reconnects the same way
      shard = sh and sh.record or nil, retry_errors = opts.retry_errors, endpoint = p.endpoint,
      options = {
        task_index = opts.task_index, task_limit = opts.task_limit, stop_after_passes = opts.stop_after_passes,
        timeout_seconds = opts.timeout_seconds, solve_timeout_seconds = opts.solve_timeout_seconds,
        attempts = opts.attempts, max_cost_usd = opts.max_cost_usd, model_key = run.evals.model_key,
      },
    }, frame.identity(opts, {
      kind = 'tasks', solver = k.solver.name, provider = provider.name, providers = { provider.name },
      dataset_sha256 = frame.dataset_digest(k.tasks), registry = k.resolved,
      selection = { task_index = opts.task_index, task_limit = opts.task_limit, tasks = opts.tasks,
        shard = sh and sh.record or nil, count = #selected, ids_sha256 = crypto.sha256_hex(table.concat(ids, '\n')) },
      endpoints = p.endpoint and { [provider.name] = p.endpoint } or nil,
    }))
  end
  for _, b in ipairs(k.bad) do F:emit('bad_row', b); io.stderr:write('cseng: skipped bad row: ', b.error, '\n') end

  -- each task --attempts times, interleaved; a recorded (task, attempt) is done
  local queue = evals.expand(selected, opts.attempts, function(id, a) return done[evals.trial_id(id, a)] end)
  F:emit('serve', nil, true)
  -- gold on tasks without a solution solves nothing: said once, before the first trial
  local unsolvable = 0
  if k.solver.name == 'gold' then
    for _, t in ipairs(selected) do if not t.has_solution then unsolvable = unsolvable + 1 end end
  end
  F:emit('plan', { run_id = s.id, total = #queue, provider = provider.name, mode = opts.mode, solver = k.solver.name,
    concurrency = opts.concurrency, log = s.jsonl, status_url = F.status_url,
    resumed = prior and (#selected * math.max(1, math.tointeger(opts.attempts) or 1) - #queue) or nil,
    no_solution = unsolvable > 0 and unsolvable or nil, tasks = #selected })
  if opts.on_start then opts.on_start({ run_id = s.id, jsonl = s.jsonl, status_url = F.status_url }) end
  return queue
end

--- However the run ends (an error too): the model proxy stops.
function K.close(F)
  if F.k.run then evals.finish(F.k.run) end
end

--- The end: the ceiling's stop, the admission counters, the summary (results/<run-id>.json),
--- run_finished. Returns the exit status and {run_id, jsonl, json, records, summary, status}.
function K.finish(F)
  local k, s = F.k, F.session
  local run = k.run
  -- the ceiling may have stopped an agent's turn in the last trial: the run stopped there too
  local budget_stop = evals.stop_reason(run)
  if budget_stop then F:stop('max_cost', budget_stop.message or 'the spend ceiling (--max-cost-usd)', nil, budget_stop) end
  admission.finish(s) -- the admission counters, before the log is read for the summary
  local all = results.read(s.jsonl)
  local summary = results.summary(all)
  local status = F:close({
    passed = summary.passed, failed = summary.failed, errors = summary.errors,
    recorded = summary.task_count, selected = #k.selected, reclaimed = (F.reclaimed or 0) > 0 and F.reclaimed or nil,
  }, { records = results.trials(all) })
  all[#all + 1] = F.finished -- the log is read once; the record we wrote joins it
  results.write_summary(all, s.json)
  local info = { run_id = s.id, jsonl = s.jsonl, json = s.json, records = k.records, summary = summary, status = status }
  return frame.exit_status(F, summary.task_count, summary.errors), info
end

return K
