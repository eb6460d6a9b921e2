--- The runner: trials of tasks on a provider.
---
--- A trial is: [build] -> start (create) -> upload -> prepare -> instruction_write -> solve ->
--- verify -> stop. Each phase is timed with the monotonic clock. The allocation record is
--- appended and fsynced the moment create returns an id, before anything else touches the
--- sandbox. stop runs on every path (error, timeout, Ctrl-C) with retries; a cleanup failure
--- stops new allocations. Outcomes: "passed"/"failed" (the verifier ran) or "error" (an
--- infrastructure failure, with error_stage naming the phase).
local task = require 'cseng.task'
local clock = require 'cseng.clock'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local archive = require 'cseng.archive'
local cjson = require 'cjson'
local dataset = require 'dataset'
local results = require 'results'
local stats = require 'stats'
local staging = require 'staging'
local util = require 'util'
local shard = require 'shard'

local runner = {}

local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }
runner.PHASES = PHASES

--- Load a provider adapter by name (lua/providers/<name>.lua).
function runner.provider(name)
  local mod_name = 'providers.' .. tostring(name):gsub('%-', '_')
  local ok, mod = pcall(require, mod_name)
  if not ok then
    if tostring(mod):find("module '" .. mod_name .. "' not found", 1, true) then
      error(string.format("unknown provider '%s' (see cseng providers)", name), 0)
    end
    error(mod, 0)
  end
  mod.name = mod.name or name
  return mod
end

function runner.solver(name)
  local ok, mod = pcall(require, 'solvers.' .. tostring(name):gsub('%-', '_'))
  if not ok then
    if tostring(mod):find('not found', 1, true) then error(string.format("unknown solver '%s'", name), 0) end
    error(mod, 0)
  end
  return mod
end

local function ns_to_s(ns) return ns / 1e9 end

local function getenv_fn(opts)
  return function(name)
    local v = opts.env and opts.env[name]
    if v ~= nil then return v end
    return os.getenv(name)
  end
end

--- Errors raised inside a phase: tables {stage, message, code} or plain values.
local function describe_error(e)
  if type(e) == 'table' then
    if e.code == 'ECANCELED' then return 'cancelled', 'ECANCELED' end
    return tostring(e.message or e[1] or cjson.encode(e)), e.code
  end
  return tostring(e), nil
end

--- Destroy with retries and back-off; returns true or nil, err.
local function destroy_with_retries(run, sb)
  local last
  for attempt = 1, 3 do
    local ok, res, err = pcall(run.provider.destroy, run.client, sb)
    if ok and res then return true end
    last = ok and err or res
    if attempt < 3 then pcall(task.sleep, 0.5 * 2 ^ (attempt - 1)) end
  end
  return nil, describe_error(last)
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
  local res, err, code = ctx:exec(staging.VERIFY_RESET, { timeout = 120, cwd = '/' })
  if not res then error({ stage = 'verify', message = 'resetting /tests and /logs/verifier: ' .. tostring(err), code = code }) end
  if res.code ~= 0 then
    error({ stage = 'verify', message = 'resetting /tests and /logs/verifier failed: ' .. util.trim(res.stderr), code = 'EVERIFY' })
  end
  local ok, perr, pcode = ctx:put('/tests', archive.pack_dir(t.dir .. '/tests', {}))
  if not ok then error({ stage = 'verify', message = 'uploading tests/: ' .. tostring(perr), code = pcode }) end
  local user = (run.opts.verifier_user ~= 'root' and (run.provider.capabilities or {}).non_root) and 'verifier' or 'root'
  rec.verifier_user = user
  local timeout = run.opts.verify_timeout_seconds or t.config.verifier_timeout
  local vr, verr, vcode = ctx:exec('bash /tests/test.sh', {
    user = user, timeout = timeout, env = util.merge({ TEST_DIR = '/tests' }, t.config.verifier_env),
  })
  if not vr then error({ stage = 'verify', message = tostring(verr), code = vcode }) end
  rec.return_code = vr.code
  rec.stdout_tail = util.tail(vr.stdout, run.opts.tail_chars or 4000)
  rec.stderr_tail = util.tail(vr.stderr, run.opts.tail_chars or 4000)
  rec.verify_timed_out = vr.timed_out or nil
  if vr.timed_out then
    error({ stage = 'verify', message = string.format('verifier timed out after %s s', timeout), code = 'ETIMEDOUT' })
  end
  local rr, rerr, rcode = ctx:exec(staging.READ_REWARD, { timeout = 60, cwd = '/' })
  if not rr then error({ stage = 'verify', message = 'reading the reward: ' .. tostring(rerr), code = rcode }) end
  local reward, rule = staging.parse_reward(rr.stdout, vr.code)
  rec.reward, rec.reward_rule = reward, rule
  rec.passed = reward ~= nil and reward >= 1 - 1e-9
end

--- Write a solver's transcript beside the run log: results/<run-id>/transcripts/<task>.jsonl.
function runner.save_transcript(run, t, transcript)
  local path = run.writer.path:gsub('%.jsonl$', '') .. '/transcripts/' .. t.id:gsub('[^%w%._-]', '_') .. '.jsonl'
  local ok = require('solvers.agent').write_transcript(path, transcript)
  return ok and path or nil
end

--- One trial of one task. Returns the trial record.
local function trial_body(run, t, rec, state)
  local provider, client = run.provider, run.client
  local phases = rec.phases
  local function phase(name, fn)
    state.stage = name
    local s = clock.now()
    local ok, err = pcall(fn)
    phases[name .. '_seconds'] = ns_to_s(clock.now() - s)
    -- a cancellation (trial timeout, Ctrl-C) is delivered once: a cleanup's pcall inside the
    -- phase may have swallowed it, so the phase boundary checks the task's own flag
    if ok and task.cancelled() then ok, err = false, task.error('ECANCELED', 'task cancelled') end
    if not ok then
      if type(err) == 'table' and err.code ~= 'ECANCELED' and not err.stage then err.stage = name end
      error(err, 0)
    end
  end
  local spec = staging.sandbox_spec(run, t)
  rec.labels = spec.labels
  if run.opts.mode == 'warm' then
    phase('build', function()
      local artifact = runner.warm_artifact(run, t)
      spec.warm_artifact = artifact
      rec.warm_artifact = artifact
    end)
  elseif provider.build then
    phase('build', function()
      local b, err, code = provider.build(client, staging.build_request(run, t))
      if not b then
        rec.build_log_tail = type(err) == 'table' and util.tail(err.log, 4000) or nil
        error({ stage = 'build', message = type(err) == 'table' and err.message or tostring(err), code = code or 'EBUILD' })
      end
      spec.image = b.image
      rec.image, rec.build_cache_hit, rec.build_log_tail = b.image, b.cache_hit, b.log_tail
    end)
  end
  phase('start', function()
    if run.cleanup_failed then error({ message = 'not allocating: an earlier cleanup failed', code = 'ECLEANUP' }) end
    local start_ns = clock.now()
    local sb, err, code = provider.create(client, spec)
    if not sb then error({ message = tostring(err), code = code or 'ECREATE' }) end
    state.sb, state.created_ns = sb, start_ns
    rec.sandbox_id = sb.id
    run.writer:allocated(provider.name, sb, spec.labels, { task_id = t.id })
    rec.image = rec.image or sb.image
    rec.limits = sb.limits -- the resource limits the provider enforced
  end)
  local ctx = staging.context(run, t, state.sb)
  phase('upload', function()
    if not spec.warm_artifact then staging.upload_environment(ctx, rec) end
  end)
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
    local msg, code = describe_error(err)
    rec.error_stage = (type(err) == 'table' and err.stage) or state.stage
    rec.error_code = code
    if state.timed_out then
      rec.error = string.format('trial timed out after %s s (in %s)', run.opts.timeout_seconds, rec.error_stage)
      rec.error_code = 'ETIMEDOUT'
    elseif code == 'ECANCELED' then
      rec.error = 'interrupted'
      state.interrupted = true
    else
      rec.error = msg
    end
  end
  -- stop, on every path
  if state.sb then
    local s = clock.now()
    local dok, derr = destroy_with_retries(run, state.sb)
    rec.phases.stop_seconds = ns_to_s(clock.now() - s)
    if dok then
      run.writer:destroyed(run.provider.name, state.sb.id, { task_id = t.id })
    else
      run.writer:cleanup_failed(run.provider.name, state.sb.id, derr)
      run.cleanup_failed = run.cleanup_failed or string.format('destroying %s failed: %s', state.sb.id, tostring(derr))
      rec.cleanup_error = tostring(derr)
    end
    rec.sandbox_seconds = ns_to_s(clock.now() - state.created_ns)
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
  rec.fidelity_gaps = rec.fidelity_gaps or staging.fidelity_gaps(run.provider, t)
  if #rec.fidelity_gaps == 0 then rec.fidelity_gaps = nil end
  return rec, state.interrupted
end

--- The warm artifact of a task: prepared once per run (or given by the user / a prewarm file).
function runner.warm_artifact(run, t)
  local given = run.opts.warm_artifacts and (run.opts.warm_artifacts[t.id] or run.opts.warm_artifacts['*'])
  if given then return given end
  local cache = run.warm_cache
  local key = t.sha256:sub(1, 24)
  while cache[key] == true do task.sleep(0.05) end -- another trial is preparing it
  if cache[key] then return cache[key] end
  if not run.provider.snapshot then
    error({ message = "provider '" .. run.provider.name .. "' has no warm mode (no snapshot)", code = 'ENOWARM' })
  end
  cache[key] = true
  if run.provider.find_artifact then -- an artifact of the same content made earlier: no preparation
    local fok, found = pcall(run.provider.find_artifact, run.client, key, t)
    if fok and found then
      cache[key] = found
      run.writer:event('prewarmed', { task_id = t.id, artifact = found, provider = run.provider.name, reused = true })
      return found
    end
  end
  local ok, artifact = pcall(runner.prepare_artifact, run, t, key)
  if not ok then cache[key] = nil; error(artifact, 0) end
  cache[key] = artifact
  return artifact
end

--- Create a sandbox, stage the environment, snapshot it, destroy it.
function runner.prepare_artifact(run, t, key)
  local provider, client = run.provider, run.client
  local spec = staging.sandbox_spec(run, t)
  if provider.build then
    local b, err, code = provider.build(client, staging.build_request(run, t))
    if not b then error({ message = type(err) == 'table' and err.message or tostring(err), code = code or 'EBUILD' }) end
    spec.image = b.image
  end
  local sb, err, code = provider.create(client, spec)
  if not sb then error({ message = 'prewarm create: ' .. tostring(err), code = code }) end
  run.writer:allocated(provider.name, sb, spec.labels, { task_id = t.id, purpose = 'prewarm' })
  local ok, perr = pcall(function()
    local ctx = staging.context(run, t, sb)
    staging.upload_environment(ctx, {})
    staging.prepare(ctx)
  end)
  local artifact, serr, scode
  if ok then artifact, serr, scode = provider.snapshot(client, sb, key) end
  local dok, derr = destroy_with_retries(run, sb)
  if dok then run.writer:destroyed(provider.name, sb.id, { purpose = 'prewarm' })
  else run.writer:cleanup_failed(provider.name, sb.id, derr) end
  if not ok then error(perr, 0) end
  if not artifact then error({ message = 'snapshot: ' .. tostring(serr), code = scode }) end
  run.writer:event('prewarmed', { task_id = t.id, artifact = artifact, provider = provider.name })
  return artifact
end

local function run_id_for(opts)
  local stamp = os.date('!%Y%m%d-%H%M%S')
  return string.format('%s-%s-%s-%s-%s', opts.name or 'run', opts.provider, opts.mode or 'cold', stamp,
    crypto.hex(crypto.random_bytes(2)))
end

local function output_paths(opts, run_id)
  local out = opts.output
  if out and out:match('%.json$') then return (out:gsub('%.json$', '.jsonl')), out end
  if out and out:match('%.jsonl$') then return out, (out:gsub('%.jsonl$', '.json')) end
  local dir = out or 'results'
  return dir .. '/' .. run_id .. '.jsonl', dir .. '/' .. run_id .. '.json'
end

local Progress = {}
Progress.__index = Progress

function runner.progress(total, opts)
  return setmetatable({ total = total, done = 0, passed = 0, failed = 0, errors = 0, t0 = clock.now(),
    tty = not opts.quiet and sys.isatty(1), quiet = opts.quiet }, Progress)
end

function Progress:status()
  local el = ns_to_s(clock.now() - self.t0)
  local eta = self.done > 0 and el / self.done * (self.total - self.done) or nil
  return string.format('%d/%d done, %d running, %d passed, %d failed, %d errors, %s elapsed%s', self.done, self.total,
    self.running or 0, self.passed, self.failed, self.errors, util.fmt_seconds(el), eta and (', ETA ' .. util.fmt_seconds(eta)) or '')
end

function Progress:trial(rec)
  self.done = self.done + 1
  if rec.outcome == 'passed' then self.passed = self.passed + 1
  elseif rec.outcome == 'error' then self.errors = self.errors + 1
  else self.failed = self.failed + 1 end
  if self.quiet then return end
  local detail = rec.outcome == 'error' and string.format(' [%s: %s]', rec.error_stage or '?', util.tail(rec.error or '', 160)) or
    string.format(' reward=%s (%s)', tostring(rec.reward), rec.reward_rule or '-')
  local line = string.format('[%d/%d] %-40s %-6s %6.1fs%s', self.done, self.total, rec.task_id, rec.outcome,
    rec.elapsed_seconds, detail)
  if self.tty then io.stdout:write('\r\27[K', line, '\n', self:status()) else io.stdout:write(line, '\n') end
  io.stdout:flush()
end

--- On a terminal, refresh the status line every second (a task; cancel it at the end).
function Progress:start_ticker()
  if not self.tty then return end
  self.ticker = task.spawn(function()
    while true do
      task.sleep(1)
      io.stdout:write('\r\27[K', self:status())
      io.stdout:flush()
    end
  end)
end

function Progress:finish()
  if self.ticker then self.ticker:cancel() end
  if self.tty then io.stdout:write('\r\27[K') end
end

--- The end-of-run table.
function runner.table(records)
  local passed, failed, errors = 0, 0, 0
  local elapsed = {}
  local sums, counts = {}, {}
  for _, r in ipairs(records) do
    if r.outcome == 'passed' then passed = passed + 1 elseif r.outcome == 'error' then errors = errors + 1 else failed = failed + 1 end
    elapsed[#elapsed + 1] = r.elapsed_seconds
    for _, p in ipairs(PHASES) do
      local v = r.phases and r.phases[p .. '_seconds']
      if v then sums[p] = (sums[p] or 0) + v; counts[p] = (counts[p] or 0) + 1 end
    end
  end
  local lines = {
    string.format('trials %d: %d passed, %d failed, %d errors', #records, passed, failed, errors),
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

--- Run a tasks plan. opts: provider, provider_config, dataset, solver, mode, task_index,
--- task_limit, stop_after_passes, timeout_seconds, solve_timeout_seconds, concurrency, output,
--- resume, env, image_map, skip_bad_rows, name, quiet, verifier_user, warm_artifacts.
--- Returns the exit status: 0 when every trial ran (passed or failed), 1 when any trial was an
--- infrastructure error or a cleanup failed, 130 when interrupted.
function runner.run_tasks(opts)
  local getenv = getenv_fn(opts)
  local provider = runner.provider(opts.provider)
  local solver = runner.solver(opts.solver or 'gold')
  if solver.check then -- a missing credential stops the run before any sandbox exists
    local ok, msg = solver.check(opts, getenv)
    if not ok then error(msg, 0) end
  end
  local tasks, bad = dataset.load(opts.dataset, { skip_bad_rows = opts.skip_bad_rows, source_root = opts.source_root })
  local selected = dataset.select(tasks, opts.task_index, opts.task_limit, opts.tasks)

  local run_id, jsonl_path, json_path, prior, sh
  if opts.resume then
    jsonl_path = opts.resume
    json_path = jsonl_path:gsub('%.jsonl$', '') .. '.json'
    prior = results.read(jsonl_path)
    local fixed
    for _, e in ipairs(prior) do
      if e.event == 'run_started' then run_id, fixed = e.run_id, e.shard break end
    end
    if not run_id then error(jsonl_path .. ': no run_started event; not a cseng run log', 0) end
    if type(fixed) == 'table' then -- a shard resumes as the same shard of the same run
      sh = shard.for_tasks(opts, selected, getenv, util.merge(fixed, { run_id = run_id }))
      selected = sh.selected
    end
  else
    sh = shard.for_tasks(opts, selected, getenv)
    if sh then
      selected = sh.selected
      run_id, jsonl_path, json_path = sh.run_id, sh.jsonl, sh.json
    else
      run_id = run_id_for(opts)
      jsonl_path, json_path = output_paths(opts, run_id)
    end
  end
  local writer = results.open(jsonl_path, run_id)
  local run = {
    id = run_id, opts = opts, provider = provider, solver = solver, writer = writer, getenv = getenv,
    warm_cache = {}, launcher = 'cseng@' .. (sys.hostname() or 'localhost'),
  }
  local ok, client = pcall(provider.connect, util.merge(opts.provider_config, { getenv = getenv, run_id = run_id }))
  if not ok then error(tostring(client), 0) end
  run.client = client

  local done = {}
  if prior then
    for _, e in ipairs(prior) do if e.event == 'trial' then done[e.task_id] = true end end
    -- sandboxes the killed process left behind are destroyed before anything new starts
    for _, a in ipairs(results.live_allocations(prior)) do
      local dok, derr = destroy_with_retries(run, { id = a.sandbox_id, labels = a.labels })
      if dok then writer:destroyed(provider.name, a.sandbox_id, { reason = 'resume' })
      else writer:cleanup_failed(provider.name, a.sandbox_id, derr) end
    end
    writer:event('run_resumed', { argv = opts.argv, pid = sys.pid() })
  else
    writer:event('run_started', {
      plan = opts.name, plan_file = opts.plan_file, argv = opts.argv, provider = provider.name, mode = opts.mode,
      solver = solver.name, dataset = opts.dataset, task_count = #selected, concurrency = opts.concurrency,
      runtime = provider.runtime and provider.runtime(client) or provider.description, versions = sys.versions(),
      host = sys.hostname(), pid = sys.pid(), seed = opts.seed, bad_rows = #bad > 0 and bad or nil,
      provider_config = opts.provider_config, -- so `cseng cleanup RUN.jsonl` reconnects the same way
      shard = sh and sh.record or nil,
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
    io.stdout:write(string.format('run %s: %d task(s) on %s (%s, solver %s, concurrency %d)%s\n', run_id, #todo,
      provider.name, opts.mode, solver.name, opts.concurrency, prior and string.format(', resuming: %d already recorded', #selected - #todo) or ''))
    io.stdout:write('log: ', jsonl_path, '\n')
  end

  progress:start_ticker()
  local sem = task.semaphore(opts.concurrency or 1)
  local workers, records, passes = {}, {}, 0
  local interrupted = false
  for _, t in ipairs(todo) do
    local aok = pcall(sem.acquire, sem)
    if not aok or task.interrupted() > 0 then interrupted = true; if aok then sem:release() end; break end
    if run.cleanup_failed then sem:release(); break end
    if opts.stop_after_passes and passes >= opts.stop_after_passes then sem:release(); break end
    workers[#workers + 1] = task.spawn(function()
      progress.running = (progress.running or 0) + 1
      local rec, was_interrupted = runner.trial(run, t)
      progress.running = progress.running - 1
      sem:release()
      if was_interrupted then
        writer:event('trial_interrupted', { task_id = t.id, sandbox_id = rec.sandbox_id, stage = rec.error_stage })
        return
      end
      writer:event('trial', rec)
      records[#records + 1] = rec
      if rec.outcome == 'passed' then passes = passes + 1 end
      progress:trial(rec)
    end)
  end
  for _, w in ipairs(workers) do
    while true do
      local jok, wok, werr = pcall(w.join, w)
      if jok then
        if not wok and not (type(werr) == 'table' and werr.code == 'ECANCELED') then
          io.stderr:write('cseng: trial task failed: ', tostring(werr), '\n')
        end
        break
      end
      interrupted = true -- our join was cancelled by SIGINT: keep waiting for the cleanup
    end
  end
  progress:finish()
  interrupted = interrupted or task.interrupted() > 0
  local status = interrupted and 'interrupted' or (run.cleanup_failed and 'cleanup_failed') or 'finished'
  local all = results.read(jsonl_path)
  local summary = results.summary(all)
  all[#all + 1] = writer:event('run_finished', { -- the log is read once; the record we wrote joins it
    status = status, passed = summary.passed, failed = summary.failed, errors = summary.errors,
    recorded = summary.task_count, selected = #selected, cleanup_error = run.cleanup_failed,
  }, true)
  results.write_summary(all, json_path)
  if not opts.quiet then
    io.stdout:write(runner.table(results.trials(all)), '\n')
    io.stdout:write('results: ', jsonl_path, '\n', 'summary: ', json_path, '\n')
    if run.cleanup_failed then io.stderr:write('cseng: stopped allocating: ', run.cleanup_failed, '\n',
      '  run `cseng cleanup ', jsonl_path, '` to retry the cleanup\n') end
  end
  run.summary = summary
  runner.last = { run_id = run_id, jsonl = jsonl_path, json = json_path, records = records }
  if interrupted then return 130 end
  if run.cleanup_failed or summary.errors > 0 then return 1 end
  return 0
end

return runner
