--- A task's environment on a provider: built (a provider that builds images or layers),
--- replayed in the sandbox (one without builds), or prepared once as a warm artifact that later
--- trials start from. What the tasks kind and the prewarm kind share (lua/cseng/run/kinds/).
local task = require('cseng.task')
local clock = require('cseng.clock')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local staging = require('cseng.workload.staging')
local recipe = require('cseng.workload.recipe')
local replay = require('cseng.workload.replay')
local evals = require('cseng.evals.hooks')

local environment = {}

--- Build the task's image or layer (a provider with `build`): the build's answer, or a raised
--- build error whose log_tail is the build's output.
---@param run table Run
---@param t Task
---@param stage string|nil the error's stage
function environment.build(run, t, stage)
  local b, err, code = run.provider.build(run.client, staging.build_request(run, t))
  if not b then
    local e = errors.returned(err, code, { stage = stage, default_code = errors.EBUILD })
    e.log_tail = type(err) == 'table' and util.tail(err.log, 4000) or nil
    e.log = nil
    error(e, 0)
  end
  return b
end

--- Replay a recipe in a sandbox (lua/cseng/workload/replay.lua): {steps, runs, ...}, or a raised
--- build error whose log is the failing step's output (err.log).
function environment.replay(run, t, rcp, sb)
  local info, err, code = replay.run(run.provider, run.client, sb, rcp,
    { timeout = t.config.build_timeout, network = run.opts.build_network ~= 'off' })
  if not info then
    local e = errors.returned(err, code, { stage = 'build', default_code = errors.EBUILD })
    e.log = type(err) == 'table' and err.log or nil
    error(e, 0)
  end
  return info
end

--- Seconds since an artifact was made: from a prewarm file's created_at (ISO-8601 UTC), else
--- the mtime of an artifact that is a path on this machine (the local provider's roots); nil
--- when neither says.
---@return number|nil
function environment.artifact_age(artifact, created_at)
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

--- Create a sandbox, stage the environment, snapshot it, destroy it (the ledger's close: a
--- failed cleanup here stops the run's allocations like any other). key: the artifact's name.
function environment.prepare_artifact(run, t, key)
  local provider, client = run.provider, run.client
  local spec = staging.sandbox_spec(run, t)
  local rcp = recipe.for_run(run, t)
  spec.recipe = rcp
  local mode = staging.env_mode(run)
  if mode == 'native' then
    local b = environment.build(run, t, nil)
    spec.image, spec.layer = b.image, b.layer
  end
  local replay_now = mode == 'replay' and staging.needs_replay(rcp)
  local artifact
  do
    local sb <close> = run.session:sandbox(spec, { task_id = t.id, purpose = 'prewarm' }, { prefix = 'prewarm create: ' })
    local ctx = staging.context(run, t, sb.sb)
    if replay_now then environment.replay(run, t, rcp, sb.sb) else staging.upload_environment(ctx, {}) end
    staging.prepare(ctx)
    evals.prepare_artifact(run, ctx) -- an installed agent's CLI goes into the artifact
    artifact = errors.check({ prefix = 'snapshot: ' }, provider.snapshot(client, sb.sb, key))
  end
  run.writer:event('prewarmed', { task_id = t.id, artifact = artifact, provider = provider.name })
  return artifact
end

--- The warm artifact of a task: prepared once per run (or given by the user / a prewarm file),
--- named by the recipe's content key. Returns the artifact and whether it existed already.
--- Trials that need an artifact another trial is preparing wait on it (woken when it is done,
--- or failed: then one of them prepares it again).
function environment.warm_artifact(run, t)
  local given = run.opts.warm_artifacts and (run.opts.warm_artifacts[t.id] or run.opts.warm_artifacts['*'])
  if given then
    if not run.warm_cache['given:' .. given] then -- once per artifact: where it came from and its age
      run.warm_cache['given:' .. given] = true
      run.writer:event('prewarmed', { task_id = t.id, artifact = given, provider = run.provider.name, reused = true,
        source = run.opts.prewarm_file and 'prewarm-file' or 'warm-artifact', prewarm_file = run.opts.prewarm_file,
        age_s = environment.artifact_age(given, run.opts.warm_artifacts_created_at) })
    end
    return given, true
  end
  local cache = run.warm_cache
  local key = evals.artifact_key(run, recipe.for_run(run, t).key:sub(1, 24)) -- the solver's install tag
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
        source = 'provider', age_s = environment.artifact_age(found) })
      return found, true
    end
  end
  local ok, artifact = pcall(environment.prepare_artifact, run, t, key)
  if not ok then settle(nil); error(artifact, 0) end
  settle(artifact)
  return artifact, false
end

return environment
