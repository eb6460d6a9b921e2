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
local sys = require 'cseng.sys'
local archive = require 'cseng.archive'
local dataset = require 'cseng.task.dataset'
local errors = require 'cseng.lib.errors'
local results = require 'cseng.results.log'
local session = require 'cseng.run.session'
local stats = require 'cseng.lib.stats'
local staging = require 'cseng.task.staging'
local recipe = require 'cseng.task.recipe'
local replay = require 'cseng.task.replay'
local util = require 'cseng.lib.util'
local shard = require 'cseng.run.shard'
local adapter = require 'providers.shared.adapter'

local runner = {}

local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }
runner.PHASES = PHASES

--- Load a provider adapter by name (lua/providers/<name>.lua): session.adapter.
runner.provider = session.adapter

--- Load a solver by name (lua/solvers/<name>.lua). Only a missing solver module is "unknown
--- solver": a solver whose own require fails is reported with that error.
---@param name string
---@return table
function runner.solver(name)
  local mod_name = 'solvers.' .. tostring(name):gsub('%-', '_')
  local ok, mod = pcall(require, mod_name)
  if not ok then
    if tostring(mod):find("module '" .. mod_name .. "' not found", 1, true) then
      error(string.format("unknown solver '%s'", name), 0)
    end
    -- the first line says what failed (the rest is require's search path)
    error(string.format("solver '%s' failed to load: %s", name, (errors.line(mod):gsub(':?\n.*$', ''))), 0)
  end
  return mod
end

local function ns_to_s(ns) return ns / 1e9 end

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

--- Write a solver's transcript beside the run log: results/<run-id>/transcripts/<task>.jsonl.
function runner.save_transcript(run, t, transcript)
  local path = run.writer.path:gsub('%.jsonl$', '') .. '/transcripts/' .. t.id:gsub('[^%w%._-]', '_') .. '.jsonl'
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
    if run.progress then run.progress:phase(t.id, name) end
    local s = clock.now()
    local ok, err = pcall(fn)
    phases[name .. '_seconds'] = ns_to_s(clock.now() - s)
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
    local ss = run.status_state
    if ss then ss.started = ss.started + 1 end
    state.lease = run.session:sandbox(spec, { task_id = t.id }, { times = state.times })
    rec.sandbox_id = state.lease.id
    if ss then ss.allocated, ss.live[state.lease.id] = ss.allocated + 1, true end
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
    local ok, r = pcall(run.solver.solve, ctx)
    if not ok then
      -- keep what a failed solver spent (tokens, the transcript so far), then fail the phase
      if type(r) == 'table' then
        rec.solver_usage = r.usage
        if r.transcript then rec.solver_transcript_path = runner.save_transcript(run, t, r.transcript) end
      end
      error(r, 0)
    end
    r = r or {}
    rec.solve_elapsed_seconds = ns_to_s(clock.now() - s)
    rec.solve_return_code = r.return_code
    rec.solve_stdout_tail = r.stdout and util.tail(r.stdout, run.opts.tail_chars or 4000) or nil
    rec.solve_stderr_tail = r.stderr and util.tail(r.stderr, run.opts.tail_chars or 4000) or nil
    rec.solve_timed_out = r.timed_out or nil
    rec.solve_note = r.note
    rec.solver_usage = r.usage
    if r.transcript then rec.solver_transcript_path = runner.save_transcript(run, t, r.transcript) end
  end)
  phase('verify', function() verify(run, ctx, rec) end)
end

--- Run one trial to completion (never raises): phases, then stop on every path.
function runner.trial(run, t)
  local rec = {
    task_id = t.id, provider = run.provider.name, mode = run.opts.mode, solver = run.solver.name,
    phases = {}, started_at = clock.wall(), task_sha256 = t.sha256,
  }
  local state = {}
  local t0 = clock.now()
  local me = task.current()
  local watchdog
  if run.opts.timeout_seconds then
    watchdog = task.spawn(function()
      task.sleep(run.opts.timeout_seconds)
      state.timed_out = true
      me:cancel()
    end)
  end
  local ok, err = pcall(trial_body, run, t, rec, state)
  if watchdog then watchdog:cancel() end
  if not ok then
    local msg, code = errors.describe(err)
    rec.error_stage = (type(err) == 'table' and err.stage) or state.stage
    rec.error_code = code
    if state.timed_out then
      rec.error = string.format('trial timed out after %s s (in %s)', run.opts.timeout_seconds, rec.error_stage)
      rec.error_code = errors.ETIMEDOUT
    elseif code == errors.ECANCELED then
      rec.error = 'interrupted'
      state.interrupted = true
    else
      rec.error = msg
    end
  end
  -- stop, on every path
  local lease = state.lease
  if lease then
    local r = lease:close()
    local ss = run.status_state
    if ss and r.ok then ss.destroyed, ss.live[lease.id] = ss.destroyed + 1, nil end
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
  return rec, state.interrupted
end

--- Replay a recipe in a sandbox (lua/cseng/task/replay.lua); a failing step raises a build error whose
--- log tail goes to the record (build_log_tail).
function runner.replay(run, t, rcp, sb, rec)
  local info, err, code = replay.run(run.provider, run.client, sb, rcp, { timeout = t.config.build_timeout })
  if not info then
    if rec then rec.build_log_tail = err.log end
    error(errors.returned(err, code, { stage = 'build', default_code = errors.EBUILD }), 0)
  end
  if rec then rec.environment.replayed_steps = info.steps end
  return info
end

--- A trial with --retry-errors N: a trial whose outcome is `error` (an infrastructure failure,
--- never a `failed` verdict) runs again, up to N more times, after retry_delay_seconds (default
--- 1). Every attempt but the last is recorded as a `trial_attempt` event; the last is the trial
--- (its `attempt` numbers it, `attempts` counts them), so summaries count the final outcome.
--- No retry after an interrupt or once the session stopped allocating.
---@return table rec, boolean|nil interrupted
function runner.attempts(run, t, progress)
  local max = math.tointeger(run.opts.retry_errors) or 0
  local attempt = 0
  while true do
    attempt = attempt + 1
    local rec, interrupted = runner.trial(run, t)
    rec.attempt = attempt
    local again = not interrupted and rec.outcome == 'error' and attempt <= max and not run.session.cleanup_failed
      and task.interrupted() == 0 and not task.cancelled()
    if not again then
      if attempt > 1 then rec.attempts = attempt end
      return rec, interrupted
    end
    run.writer:event('trial_attempt', rec)
    if progress then progress:attempt(rec, max + 1) end
    local delay = tonumber(run.opts.retry_delay_seconds) or 1
    if delay > 0 and not pcall(task.sleep, delay) then
      rec.attempts = attempt
      return rec, true
    end
  end
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
  local key = recipe.for_run(run, t).key:sub(1, 24)
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
    artifact = errors.check({ prefix = 'snapshot: ' }, provider.snapshot(client, sb.sb, key))
  end
  run.writer:event('prewarmed', { task_id = t.id, artifact = artifact, provider = provider.name })
  return artifact
end

local Progress = {}
Progress.__index = Progress

--- Progress of a tasks run: on a terminal, one live line per trial in flight (task, phase, time
--- in phase) under the finished trials' lines, and a status line (done/total, running,
--- pass/fail/error counts, elapsed, ETA); plain lines when stdout is not a terminal.
function runner.progress(total, opts)
  return setmetatable({ total = total, done = 0, passed = 0, failed = 0, errors = 0, retried = 0, t0 = clock.now(),
    tty = not opts.quiet and sys.isatty(1), quiet = opts.quiet, live = {}, order = {}, drawn = 0,
    width = #tostring(total) }, Progress)
end

function Progress:status()
  local el = ns_to_s(clock.now() - self.t0)
  local eta = self.done > 0 and el / self.done * (self.total - self.done) or nil
  return string.format('%d/%d done, %d running, %d passed, %d failed, %d errors%s, %s elapsed%s', self.done,
    self.total, self.running or 0, self.passed, self.failed, self.errors,
    self.retried > 0 and string.format(' (%d retried)', self.retried) or '', util.fmt_seconds(el),
    eta and (', ETA ' .. util.fmt_seconds(eta)) or '')
end

--- A trial entered a phase (called by the trial; the live lines show it).
function Progress:phase(task_id, name)
  local l = self.live[task_id]
  if not l then
    l = {}
    self.live[task_id] = l
    self.order[#self.order + 1] = task_id
  end
  l.phase, l.since = name, clock.now()
end

--- The in-flight trials as {task_id, phase, phase_s}, in start order (the status endpoint too).
function Progress:in_flight()
  local out, keep = {}, {}
  for _, id in ipairs(self.order) do
    local l = self.live[id]
    if l then
      keep[#keep + 1] = id
      out[#out + 1] = { task_id = id, phase = l.phase, phase_s = math.floor(ns_to_s(clock.now() - l.since) * 10 + 0.5) / 10 }
    end
  end
  self.order = keep
  return out
end

-- On a terminal: erase the live block drawn last time (the cursor is below it).
function Progress:erase()
  if self.drawn > 0 then io.stdout:write('\r\27[', self.drawn, 'A\27[J') end
  self.drawn = 0
end

function Progress:draw()
  local lines = {}
  for _, l in ipairs(self:in_flight()) do
    lines[#lines + 1] = string.format('  %-40s %-18s %6.1fs', util.escape(l.task_id, true), l.phase or '?', l.phase_s)
  end
  lines[#lines + 1] = self:status()
  io.stdout:write(table.concat(lines, '\n'), '\n')
  self.drawn = #lines
end

function Progress:line(line)
  if self.quiet then return end
  if self.tty then self:erase(); io.stdout:write(line, '\n'); self:draw() else io.stdout:write(line, '\n') end
  io.stdout:flush()
end

--- An attempt that will be retried (--retry-errors).
function Progress:attempt(rec, of)
  self.retried = self.retried + 1
  self:line(string.format('[%s] %-40s %-6s %6.1fs [%s: %s] attempt %d of %d, retrying',
    string.rep(' ', 2 * self.width + 1), rec.task_id, 'error', rec.elapsed_seconds, rec.error_stage or '?',
    util.tail(rec.error or '', 120), rec.attempt, of))
end

function Progress:trial(rec)
  self.done = self.done + 1
  self.live[rec.task_id] = nil
  if rec.outcome == 'passed' then self.passed = self.passed + 1
  elseif rec.outcome == 'error' then self.errors = self.errors + 1
  else self.failed = self.failed + 1 end
  local detail = rec.outcome == 'error' and string.format(' [%s: %s]', rec.error_stage or '?', util.tail(rec.error or '', 160)) or
    string.format(' reward=%s (%s)', tostring(rec.reward), rec.reward_rule or '-')
  if (rec.attempts or 1) > 1 then detail = detail .. string.format(' (attempt %d)', rec.attempt) end
  -- a task id or an error is data: its control characters are escaped (util.console)
  local line = string.format('[%' .. self.width .. 'd/%d] %-40s %-6s %6.1fs%s', self.done, self.total,
    util.escape(rec.task_id, true), rec.outcome, rec.elapsed_seconds, util.escape(detail, true))
  if not self.tty and not self.quiet then line = line .. '  (' .. self:status() .. ')' end
  self:line(line)
end

--- A trial left without a record (interrupted).
function Progress:gone(task_id) self.live[task_id] = nil end

--- On a terminal, redraw the live lines every second (a task; cancel it at the end).
function Progress:start_ticker()
  if not self.tty then return end
  self.ticker = task.spawn(function()
    while true do
      task.sleep(1)
      self:erase()
      self:draw()
      io.stdout:flush()
    end
  end)
end

function Progress:finish()
  if self.ticker then self.ticker:cancel() end
  if self.tty then self:erase() end
end

--- The status endpoint's document for a tasks run: the arena's shape (run_id, status, phase,
--- elapsed_s, log, providers.<name> with counters and `live`, always a list) plus the trials in
--- flight and the ETA; numbers rounded to 0.1.
function runner.status_doc(run, progress, state)
  local jsonl = require 'cseng.lib.jsonl'
  local function r1(v) return v and math.floor(v * 10 + 0.5) / 10 or nil end
  local el = ns_to_s(clock.now() - progress.t0)
  local live = {}
  for id in pairs(state.live) do live[#live + 1] = id end
  table.sort(live)
  local flying = progress:in_flight()
  return {
    run_id = run.id, kind = 'tasks', status = state.status, phase = state.status == 'running' and 'trials' or state.status,
    label = run.opts.label, elapsed_s = r1(el), log = run.writer.path, total = progress.total, done = progress.done,
    eta_s = progress.done > 0 and r1(el / progress.done * (progress.total - progress.done)) or nil,
    last_error = state.last_error,
    trials = jsonl.array(flying),
    providers = { [run.provider.name] = {
      started = state.started, allocated = state.allocated, destroyed = state.destroyed, running = progress.running or 0,
      passed = progress.passed, failed = progress.failed, errors = progress.errors, retried = progress.retried,
      live = jsonl.array(live),
    } },
  }
end

--- Serve runner.status_doc on 127.0.0.1:port (GET / or /status), as the arena does.
function runner.status_server(run, progress, port)
  local serve = require 'cseng.serve'
  local srv, err, code = serve.listen { host = '127.0.0.1', port = port, handler = function(req)
    if req.method ~= 'GET' and req.method ~= 'HEAD' then
      return 405, { ['Allow'] = 'GET', ['Content-Type'] = 'application/json' }, '{"error":"GET only"}'
    end
    if req.path ~= '/' and req.path ~= '/status' then
      return 404, { ['Content-Type'] = 'application/json' }, '{"error":"try GET / or /status"}'
    end
    return 200, { ['Content-Type'] = 'application/json', ['Cache-Control'] = 'no-store' },
      util.json_sorted(runner.status_doc(run, progress, run.status_state)) .. '\n'
  end }
  if not srv then error(string.format('--status-port %d: %s (%s)', port, tostring(err), tostring(code)), 0) end
  return srv
end

--- The combined summary after a matrix run: one line per provider x mode run, with its counts,
--- status and log. done: {opts, status, info} per run, in the order they ran.
---@param done table[]
---@return string
function runner.matrix_summary(done)
  local lines = { string.format('matrix: %d run(s)', #done),
    string.format('  %-14s %-6s %6s %6s %6s %6s  %-12s %s', 'provider', 'mode', 'tasks', 'passed', 'failed', 'errors',
      'status', 'log') }
  local tot = { 0, 0, 0, 0 }
  for _, d in ipairs(done) do
    local sm = d.info and d.info.summary or {}
    local n = { sm.task_count or 0, sm.passed or 0, sm.failed or 0, sm.errors or 0 }
    for i = 1, 4 do tot[i] = tot[i] + n[i] end
    local word = d.status == 0 and 'ok' or (d.status == 130 and 'interrupted' or 'errors')
    lines[#lines + 1] = string.format('  %-14s %-6s %6d %6d %6d %6d  %-12s %s', tostring(d.opts.provider),
      tostring(d.opts.mode or 'cold'), n[1], n[2], n[3], n[4], word, d.info and d.info.jsonl or '-')
  end
  lines[#lines + 1] = string.format('  %-14s %-6s %6d %6d %6d %6d', 'total', '', tot[1], tot[2], tot[3], tot[4])
  return table.concat(lines, '\n')
end

--- The end-of-run table.
function runner.table(records)
  local passed, failed, n_errors = 0, 0, 0
  local elapsed = {}
  local sums, counts = {}, {}
  for _, r in ipairs(records) do
    if r.outcome == 'passed' then passed = passed + 1 elseif r.outcome == 'error' then n_errors = n_errors + 1 else failed = failed + 1 end
    elapsed[#elapsed + 1] = r.elapsed_seconds
    for _, p in ipairs(PHASES) do
      local v = r.phases and r.phases[p .. '_seconds']
      if v then sums[p] = (sums[p] or 0) + v; counts[p] = (counts[p] or 0) + 1 end
    end
  end
  local lines = {
    string.format('trials %d: %d passed, %d failed, %d errors', #records, passed, failed, n_errors),
    string.format('trial seconds: median %.2f, p95 %.2f', stats.median(elapsed) or 0, stats.quantile(elapsed, 0.95) or 0),
    'phase means (s): ' .. (function()
      local parts = {}
      for _, p in ipairs(PHASES) do
        if counts[p] then parts[#parts + 1] = string.format('%s %.3f', p, sums[p] / counts[p]) end
      end
      return table.concat(parts, ', ')
    end)(),
  }
  return table.concat(lines, '\n')
end

--- What a trial works with: the session, its provider connection and the solver, plus the
--- run's warm cache. (The fields staging and the trial read: id, opts, provider, client,
--- writer, getenv, launcher, solver.)
---@param s Session
---@param p Provider
---@param solver table|nil
---@return table run
function runner.run_of(s, p, solver)
  return {
    session = s, id = s.id, opts = s.opts, provider = p.adapter, client = p.client, solver = solver,
    writer = s.writer, getenv = s.getenv, warm_cache = {}, launcher = s.launcher,
  }
end

--- Run a tasks plan. opts: provider, provider_config, dataset, solver, mode, task_index,
--- task_limit, stop_after_passes, timeout_seconds, solve_timeout_seconds, concurrency, output,
--- resume, env, image_map, skip_bad_rows, name, quiet, verifier_user, warm_artifacts,
--- cleanup_backoff.
--- Returns the exit status (0 when every trial ran, passed or failed; 1 when any trial was an
--- infrastructure error or a cleanup failed; 130 when interrupted) and what the run wrote:
--- {run_id, jsonl, json, records, summary}.
---@return integer status, table info
function runner.run_tasks(opts)
  if opts.rerun_errors and not opts.resume then error('--rerun-errors goes with --resume RUN.jsonl', 0) end
  local solver = runner.solver(opts.solver or 'gold')
  if solver.check then -- a missing credential stops the run before any sandbox exists
    local ok, msg = solver.check(opts, session.getenv(opts.env))
    if not ok then error(msg, 0) end
  end
  local tasks, bad = dataset.load(opts.dataset, { skip_bad_rows = opts.skip_bad_rows, source_root = opts.source_root })
  local selected = dataset.select(tasks, opts.task_index, opts.task_limit, opts.tasks)

  local s, prior, sh
  local getenv = session.getenv(opts.env)
  if opts.resume then
    prior = results.read_run(opts.resume)
    local fixed = prior.started.shard
    if type(fixed) == 'table' then -- a shard resumes as the same shard of the same run
      sh = shard.for_tasks(opts, selected, getenv, util.merge(fixed, { run_id = prior.run_id }))
      selected = sh.selected
    end
    s = session.open { kind = 'resume', opts = opts, jsonl = opts.resume, run_id = prior.run_id }
  else
    sh = shard.for_tasks(opts, selected, getenv)
    if sh then -- a shard's log is named by its job, so every shard of a run agrees
      selected = sh.selected
      s = session.open { kind = 'tasks', opts = opts, run_id = sh.run_id, jsonl = sh.jsonl, json = sh.json }
    else
      s = session.open { kind = 'tasks', opts = opts, id_parts = { opts.name or 'run', opts.provider, opts.mode or 'cold' } }
    end
  end
  local p = s:connect(opts.provider, opts.provider_config)
  local provider, writer = p.adapter, s.writer
  local run = runner.run_of(s, p, solver)

  local done, rerun = {}, {}
  if prior then
    -- --rerun-errors: a task whose last recorded outcome is `error` runs again (its new trial
    -- record says rerun = true and replaces the old one in results.trials)
    for _, e in ipairs(prior.events) do
      if e.event == 'trial' then done[e.task_id] = not (opts.rerun_errors and e.outcome == 'error') end
    end
    for id, d in pairs(done) do if not d then rerun[id] = true; done[id] = nil end end
    -- sandboxes the killed process left behind are destroyed before anything new starts; a
    -- failure there stops the run from allocating (like any failed cleanup)
    s:sweep(prior.events, { reason = 'resume' })
    writer:event('run_resumed', { argv = opts.argv, pid = sys.pid(), rerun_errors = opts.rerun_errors or nil,
      label = opts.label })
  else
    writer:event('run_started', {
      plan = opts.name, plan_file = opts.plan_file, argv = opts.argv, provider = provider.name, mode = opts.mode,
      solver = solver.name, dataset = opts.dataset, task_count = #selected, concurrency = opts.concurrency,
      runtime = provider.runtime and provider.runtime(p.client) or provider.description, versions = sys.versions(),
      host = sys.hostname(), pid = sys.pid(), seed = opts.seed, bad_rows = #bad > 0 and bad or nil,
      provider_config = opts.provider_config, -- so `cseng cleanup RUN.jsonl` reconnects the same way
      shard = sh and sh.record or nil, label = opts.label, retry_errors = opts.retry_errors,
      options = {
        task_index = opts.task_index, task_limit = opts.task_limit, stop_after_passes = opts.stop_after_passes,
        timeout_seconds = opts.timeout_seconds, solve_timeout_seconds = opts.solve_timeout_seconds,
      },
    }, true)
  end
  for _, b in ipairs(bad) do io.stderr:write('cseng: skipped bad row: ', b.error, '\n') end

  local todo = {}
  for _, t in ipairs(selected) do if not done[t.id] then todo[#todo + 1] = t end end
  local progress = runner.progress(#todo, opts)
  if not opts.quiet then
    io.stdout:write(string.format('run %s: %d task(s) on %s (%s, solver %s, concurrency %d)%s\n', s.id, #todo,
      provider.name, opts.mode, solver.name, opts.concurrency, prior and string.format(', resuming: %d already recorded', #selected - #todo) or ''))
    io.stdout:write('log: ', s.jsonl, '\n')
  end

  run.progress = progress
  run.status_state = { status = 'running', live = {}, started = 0, allocated = 0, destroyed = 0 }
  local srv
  if opts.status_port then
    srv = runner.status_server(run, progress, opts.status_port)
    if not opts.quiet then io.stdout:write('status: ', srv:url(), '/\n') end
    if opts.on_start then opts.on_start({ run_id = s.id, jsonl = s.jsonl, status_url = srv:url() .. '/' }) end
  end
  progress:start_ticker()
  local sem = task.semaphore(opts.concurrency or 1)
  local workers, records, passes = {}, {}, 0
  local interrupted = false
  for _, t in ipairs(todo) do
    if s:halted() then break end
    local aok = pcall(sem.acquire, sem)
    if not aok or task.interrupted() > 0 then interrupted = true; if aok then sem:release() end; break end
    if s:halted() then sem:release(); break end
    if opts.stop_after_passes and passes >= opts.stop_after_passes then sem:release(); break end
    workers[#workers + 1] = task.spawn(function()
      progress.running = (progress.running or 0) + 1
      local rec, was_interrupted = runner.attempts(run, t, progress)
      if rerun[t.id] then rec.rerun = true end
      progress.running = progress.running - 1
      sem:release()
      if was_interrupted then
        progress:gone(t.id)
        writer:event('trial_interrupted', { task_id = t.id, sandbox_id = rec.sandbox_id, stage = rec.error_stage })
        return
      end
      -- an authentication failure on any call stops the run from allocating
      if rec.error_code and adapter.is_auth(rec.error_code) then s:stop_auth({ code = rec.error_code, message = rec.error }) end
      writer:event('trial', rec)
      records[#records + 1] = rec
      if rec.outcome == 'passed' then passes = passes + 1 end
      if rec.outcome == 'error' then run.status_state.last_error = t.id .. ': ' .. tostring(rec.error) end
      progress:trial(rec)
    end)
  end
  for _, w in ipairs(workers) do
    while true do
      local jok, wok, werr = pcall(w.join, w)
      if jok then
        if not wok and not errors.is_cancel(werr) then
          io.stderr:write('cseng: trial task failed: ', tostring(werr), '\n')
        end
        break
      end
      interrupted = true -- our join was cancelled by SIGINT: keep waiting for the cleanup
    end
  end
  progress:finish()
  interrupted = interrupted or task.interrupted() > 0
  -- sandboxes of this run the log never learned of (a create whose answer was lost)
  local reclaimed = 0
  if not interrupted then reclaimed = s:reconcile() end
  local status = interrupted and 'interrupted' or (s.auth_failed and 'stopped') or (s.cleanup_failed and 'cleanup_failed') or 'finished'
  run.status_state.status = status
  if srv then srv:close() end
  local all = results.read(s.jsonl)
  local summary = results.summary(all)
  all[#all + 1] = writer:event('run_finished', { -- the log is read once; the record we wrote joins it
    status = status, passed = summary.passed, failed = summary.failed, errors = summary.errors,
    recorded = summary.task_count, selected = #selected, cleanup_error = s.cleanup_failed,
    stop_reason = s.auth_failed, reclaimed = reclaimed > 0 and reclaimed or nil,
  }, true)
  results.write_summary(all, s.json)
  if not opts.quiet then
    io.stdout:write(runner.table(results.trials(all)), '\n')
    io.stdout:write('results: ', s.jsonl, '\n', 'summary: ', s.json, '\n')
  end
  -- printed under --quiet too: the run did not do what was asked, and may have left sandboxes
  if s:halted() then
    io.stderr:write('cseng: stopped allocating: ', s:stop_reason(), '\n')
    if s.cleanup_failed then io.stderr:write('  run `cseng cleanup ', s.jsonl, '` to retry the cleanup\n') end
  end
  local info = { run_id = s.id, jsonl = s.jsonl, json = s.json, records = records, summary = summary }
  if interrupted then return 130, info end
  if s:halted() or summary.errors > 0 then return 1, info end
  return 0, info
end

return runner
