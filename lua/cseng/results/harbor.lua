--- Harbor's job folder, written from a cseng run log and read back (`cseng export --format
--- harbor DIR`, `cseng view` and `cseng compare` on a Harbor job folder).
---
---   DIR/config.json      JobConfig (job_name = DIR's name, jobs_dir = its parent)
---   DIR/result.json      JobResult (stats per agent x model x dataset: rewards, errors, tokens)
---   DIR/lock.json        JobLock (each trial's task with its sha256 digest, agent, environment)
---   DIR/job.log          the run's events, one line each
---   DIR/<task[:32]>__<7 chars>/   one folder per trial, named as Harbor names them
---       config.json, result.json (TrialConfig, TrialResult), trial.log,
---       agent/ (trajectory.json: the ATIF trajectory; solve.txt: the solver's output tail),
---       verifier/ (test-stdout.txt, test-stderr.txt, reward.json),
---       artifacts/ (the collected artifacts and their manifest.json), steps/<name>/ for [[steps]]
--- Every file is checked against Harbor's models (lua/cseng/results/harbor_models.lua) before it
--- is written: an export Harbor could not load is a bug here, and raises.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local clock = require('cseng.clock')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local S = require('cseng.lib.schema')
local HM = require('cseng.results.harbor_models')
local results = require('cseng.results.log')

local harbor = {}

-- ---- time ----------------------------------------------------------------------------------

-- seconds since 1970 of an ISO-8601 UTC text (clock.wall's), or nil
local function epoch(iso)
  local y, mo, d, h, mi, sec = tostring(iso or ''):match('^(%d+)%-(%d+)%-(%d+)T(%d+):(%d+):([%d%.]+)')
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  -- days from the civil date (Howard Hinnant's algorithm)
  y = mo <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (mo + (mo > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
end
harbor.epoch = epoch

-- ---- names ---------------------------------------------------------------------------------

-- shortuuid's default alphabet (Harbor names trials with ShortUUID().random(length=7))
local ALPHABET = '23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'

local function short(seed, n)
  local h = crypto.sha256_hex(seed)
  local out = {}
  for i = 1, n do
    local b = tonumber(h:sub(2 * i - 1, 2 * i), 16)
    local k = b % #ALPHABET + 1
    out[i] = ALPHABET:sub(k, k)
  end
  return table.concat(out)
end

--- A UUID (version 4's layout) derived from seed: the same run exports the same ids.
function harbor.uuid(seed)
  local h = crypto.sha256_hex(seed)
  local v = string.format('%x', (tonumber(h:sub(17, 17), 16) & 3) | 8)
  return string.format('%s-%s-4%s-%s%s-%s', h:sub(1, 8), h:sub(9, 12), h:sub(14, 16), v, h:sub(18, 20), h:sub(21, 32))
end

--- Harbor's trial folder name: the task's name (its last path part) cut to 32 characters, less
--- trailing _ and -, then __ and 7 characters of shortuuid's alphabet.
function harbor.trial_name(task, seed)
  local name = tostring(task):match('([^/]*)$')
  return name:sub(1, 32):gsub('[_%-]+$', '') .. '__' .. short(seed, 7)
end

-- cseng's solvers as Harbor's agents name them (AgentName), the rest as they are
local AGENT = { gold = 'oracle', nop = 'nop', codex = 'codex', claude_code = 'claude-code', opencode = 'opencode',
  gemini_cli = 'gemini-cli' }
harbor.AGENT = AGENT
local SOLVER = {}
for k, v in pairs(AGENT) do SOLVER[v] = k end

local ENV_TYPES = {}
for _, v in ipairs(HM.EnvironmentType.values) do ENV_TYPES[v] = true end

-- the provider as Harbor's EnvironmentConfig: its EnvironmentType when Harbor has one, else
-- cseng's adapter as the import path (Harbor never imports it to load the file)
local function environment(provider)
  local p = tostring(provider or 'local')
  if ENV_TYPES[p] then return { type = p } end
  return { import_path = 'cseng.providers.' .. p:gsub('%-', '_') }
end

local function check(M, doc, what)
  local ok, p = S.check(M, doc)
  if not ok then
    errors.raise(errors.EINVAL, string.format('harbor export: %s would not load in Harbor (%s): %s', what, M.name,
      table.concat(p, '; ', 1, math.min(#p, 5))))
  end
end

local function write_json(path, doc)
  errors.check(nil, fs.mkdir_p(util.dirname(path)))
  local ok, err, code = fs.write(path, jsonl.encode(doc) .. '\n')
  if not ok then errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err)) end
end

local function write_text(path, text)
  if text == nil or text == '' then return end
  errors.check(nil, fs.mkdir_p(util.dirname(path)))
  errors.check(nil, fs.write(path, text))
end

local function copy_tree(src, dst)
  if not src or not fs.exists(src) then return end
  errors.check(nil, fs.mkdir_p(util.dirname(dst)))
  errors.check(nil, fs.copy_tree(src, dst))
end

-- ---- export ----------------------------------------------------------------------------------

local function timing(t0, seconds)
  if not t0 or not seconds then return nil, t0 end
  local t1 = t0 + seconds
  return { started_at = clock.wall(t0), finished_at = clock.wall(t1) }, t1
end

local function agent_context(u)
  if type(u) ~= 'table' then return nil end
  local c = { n_input_tokens = math.tointeger(u.prompt_tokens), n_cache_tokens = math.tointeger(u.cached_tokens),
    n_output_tokens = math.tointeger(u.completion_tokens), cost_usd = type(u.cost_usd) == 'number' and u.cost_usd or nil,
    metadata = { counted_by = u.counted_by, stop_reason = u.stop_reason, turns = u.turns, model = u.model } }
  if next(c.metadata) == nil then c.metadata = nil end
  return c
end

local function rewards_of(r)
  if type(r.rewards) == 'table' and next(r.rewards) then return r.rewards end
  if type(r.reward) == 'number' then return { reward = r.reward } end
  return nil
end

--- Export run logs (paths of .jsonl, or one folder of them) as one Harbor job folder at dir.
--- Returns {dir, trials, job_name}.
function harbor.export(logs, dir)
  if fs.exists(dir .. '/config.json') or fs.exists(dir .. '/result.json') then
    errors.raise(errors.EUSAGE, dir .. ' already holds a job (config.json or result.json): export into a new folder')
  end
  local runs = {}
  for _, path in ipairs(logs) do
    local events = results.read(path)
    local started
    for _, e in ipairs(events) do if e.event == 'run_started' then started = e break end end
    if not started then errors.raise(errors.ENOTRUN, path .. ': no run_started event; not a cseng run log') end
    if started.kind and started.kind ~= 'tasks' then
      errors.raise(errors.EUSAGE, path .. ': a ' .. started.kind .. ' run has no trials of tasks to export to Harbor')
    end
    runs[#runs + 1] = { path = path, events = events, started = started, trials = results.trials(events) }
  end
  if #runs == 0 then errors.raise(errors.EUSAGE, 'harbor export: no run log') end
  -- Harbor's trial_uri is a file:// URI and jobs_dir a path it resolves later: both absolute
  if dir:sub(1, 1) ~= '/' then dir = require('cseng.sys').cwd() .. '/' .. dir:gsub('^%./', '') end
  local job_name = util.basename((dir:gsub('/+$', '')))
  local jobs_dir = util.dirname((dir:gsub('/+$', '')))
  local first = runs[1].started
  local job_id = harbor.uuid('job\0' .. first.run_id)
  local started_at, finished_at
  local agents, seen_agent, trials_lock, evals = {}, {}, {}, {}
  local total, errored, n_in, n_cache, n_out, cost = 0, 0, nil, nil, nil, nil
  local log_lines = {}
  for _, run in ipairs(runs) do
    local st = run.started
    local id = st.identity or {}
    local solver = st.solver or id.solver or 'gold'
    local agent_name = AGENT[solver] or solver
    local model = id.model or st.model
    local env = environment(st.provider or id.provider)
    local reg = type(id.registry) == 'table' and id.registry or nil
    local source = reg and reg.name or (st.dataset and util.basename(tostring(st.dataset))) or 'adhoc'
    local akey = agent_name .. '\0' .. tostring(model)
    if not seen_agent[akey] then
      seen_agent[akey] = true
      agents[#agents + 1] = { name = agent_name, model_name = model }
    end
    local pins = {}
    for _, p in ipairs(reg and reg.tasks or {}) do pins[util.basename(p.path or p.name)] = p end
    for _, e in ipairs(run.events) do log_lines[#log_lines + 1] = jsonl.encode(e) end
    for i, r in ipairs(run.trials) do
      total = total + 1
      local name = harbor.trial_name(r.task_id, run.started.run_id .. '\0' .. i .. '\0' .. tostring(r.attempt))
      local tdir = dir .. '/' .. name
      local pin = pins[r.task_id]
      local task_cfg, task_id
      if pin and pin.git_url then
        task_cfg = { path = pin.path, git_url = pin.git_url, git_commit_id = pin.git_commit_id, source = source }
        task_id = { git_url = pin.git_url, git_commit_id = pin.git_commit_id, path = pin.path }
      else
        task_cfg = { path = 'tasks/' .. r.task_id, source = source }
        task_id = { path = 'tasks/' .. r.task_id }
      end
      local agent_cfg = { name = agent_name, model_name = model }
      local trial_cfg = { task = task_cfg, trial_name = name, trials_dir = jobs_dir .. '/' .. job_name, agent = agent_cfg,
        environment = env, verifier = {}, job_id = job_id }
      check(HM.TrialConfig, trial_cfg, name .. '/config.json')
      -- phases as Harbor's timings, laid end to end from the trial's start
      local t0 = epoch(r.started_at)
      local ph = type(r.phases) == 'table' and r.phases or {}
      local setup_s = (ph.build_seconds or 0) + (ph.start_seconds or 0) + (ph.upload_seconds or 0) + (ph.prepare_seconds or 0)
      local env_setup, t1 = timing(t0, setup_s)
      local agent_setup, t2 = timing(t1, ph.instruction_write_seconds or 0)
      local agent_exec, t3 = timing(t2, ph.solve_seconds)
      local verifier_t = timing(t3 or t2, ph.verify_seconds)
      local rewards = rewards_of(r)
      local exc
      if r.outcome == 'error' then
        errored = errored + 1
        exc = { exception_type = tostring(r.error_code or 'EINTERNAL'), exception_message = tostring(r.error or ''),
          exception_traceback = string.format('cseng: %s in the %s phase (%s)', tostring(r.error_code), tostring(r.error_stage),
            tostring(r.error)), occurred_at = r.finished_at or r.started_at or clock.wall() }
      end
      local ctx = agent_context(r.solver_usage)
      if ctx then
        if ctx.n_input_tokens then n_in = (n_in or 0) + ctx.n_input_tokens end
        if ctx.n_cache_tokens then n_cache = (n_cache or 0) + ctx.n_cache_tokens end
        if ctx.n_output_tokens then n_out = (n_out or 0) + ctx.n_output_tokens end
        if ctx.cost_usd then cost = (cost or 0) + ctx.cost_usd end
      end
      local steps
      if type(r.steps) == 'table' and #r.steps > 0 then
        steps = {}
        for j, sr in ipairs(r.steps) do
          local srw = (type(sr.rewards) == 'table' and next(sr.rewards)) and sr.rewards or (type(sr.reward) == 'number' and { reward = sr.reward } or nil)
          steps[j] = { step_name = sr.name, verifier_result = srw and { rewards = srw } or nil }
          local sdir = tdir .. '/steps/' .. sr.name
          write_text(sdir .. '/verifier/test-stdout.txt', sr.stdout_tail)
          write_text(sdir .. '/verifier/test-stderr.txt', sr.stderr_tail)
          if srw then write_json(sdir .. '/verifier/reward.json', srw) end
          write_text(sdir .. '/agent/solve.txt', sr.solve_stdout_tail)
        end
      end
      local model_info = model and { name = tostring(model):match('/(.+)$') or tostring(model),
        provider = tostring(model):match('^([^/]+)/') } or nil
      local tres = {
        id = harbor.uuid('trial\0' .. name), task_name = r.task_id, trial_name = name, trial_uri = 'file://' .. tdir,
        task_id = task_id, source = source, task_checksum = tostring(r.task_sha256 or ''), config = trial_cfg,
        agent_info = { name = agent_name, version = tostring((r.solver_usage or {}).version or st.versions and st.versions.cseng or 'cseng'),
          model_info = model_info },
        agent_result = ctx, verifier_result = rewards and { rewards = rewards } or nil, exception_info = exc,
        started_at = r.started_at, finished_at = r.finished_at, environment_setup = env_setup, agent_setup = agent_setup,
        agent_execution = agent_exec, verifier = verifier_t, step_results = steps,
      }
      check(HM.TrialResult, tres, name .. '/result.json')
      write_json(tdir .. '/config.json', trial_cfg)
      write_json(tdir .. '/result.json', tres)
      write_text(tdir .. '/trial.log', jsonl.encode(r) .. '\n')
      fs.mkdir_p(tdir .. '/agent')
      fs.mkdir_p(tdir .. '/verifier')
      if r.trajectory_path and fs.exists(r.trajectory_path) then
        errors.check(nil, fs.write(tdir .. '/agent/trajectory.json', assert(fs.read(r.trajectory_path))))
      end
      write_text(tdir .. '/agent/solve.txt', r.solve_stdout_tail)
      write_text(tdir .. '/agent/solve-stderr.txt', r.solve_stderr_tail)
      -- Harbor's verifier always leaves its output files, empty or not
      errors.check(nil, fs.write(tdir .. '/verifier/test-stdout.txt', r.stdout_tail or ''))
      errors.check(nil, fs.write(tdir .. '/verifier/test-stderr.txt', r.stderr_tail or ''))
      if rewards then write_json(tdir .. '/verifier/reward.json', rewards) end
      copy_tree(r.artifacts_dir, tdir .. '/artifacts')
      -- the job's stats, as Harbor's JobStats.increment makes them
      local ekey = model and (agent_name .. '__' .. tostring(model) .. '__' .. source) or (agent_name .. '__' .. source)
      local ev = evals[ekey] or { n_trials = 0, n_errors = 0, metrics = jsonl.array(), pass_at_k = {}, reward_stats = {},
        exception_stats = {}, sums = {}, counts = {} }
      evals[ekey] = ev
      if rewards then
        ev.n_trials = ev.n_trials + 1
        for k, v in pairs(rewards) do
          local byv = ev.reward_stats[k] or {}
          local vk = tostring(v)
          byv[vk] = byv[vk] or jsonl.array()
          byv[vk][#byv[vk] + 1] = name
          ev.reward_stats[k] = byv
          ev.sums[k], ev.counts[k] = (ev.sums[k] or 0) + v, (ev.counts[k] or 0) + 1
        end
      end
      if exc then
        ev.n_errors = ev.n_errors + 1
        ev.exception_stats[exc.exception_type] = ev.exception_stats[exc.exception_type] or jsonl.array()
        table.insert(ev.exception_stats[exc.exception_type], name)
      end
      local lock_task = { name = r.task_id, type = (pin and pin.git_url) and 'git' or 'local',
        digest = 'sha256:' .. (tostring(r.task_sha256 or ''):match('^%x+$') and #r.task_sha256 == 64 and r.task_sha256
          or crypto.sha256_hex(tostring(r.task_sha256))),
        source = source, path = task_cfg.path, git_url = task_cfg.git_url, git_commit_id = task_cfg.git_commit_id }
      trials_lock[#trials_lock + 1] = { task = lock_task, agent = agent_cfg, environment = env, verifier = {} }
      local ts, tf = epoch(r.started_at), epoch(r.finished_at)
      if ts and (not started_at or ts < started_at) then started_at = ts end
      if tf and (not finished_at or tf > finished_at) then finished_at = tf end
    end
  end
  -- Harbor's default metric (mean) per eval, over the primary rewards; its pass@k is left empty
  for _, ev in pairs(evals) do
    local primary = ev.sums.reward and 'reward' or next(ev.sums)
    if primary then ev.metrics[1] = { mean = ev.sums[primary] / ev.counts[primary] } end
    for k, v in pairs(ev.sums) do if k ~= primary then ev.metrics[#ev.metrics + 1] = { mean = v / ev.counts[k], key = k } end end
    ev.sums, ev.counts = nil, nil
  end
  local job_cfg = {
    job_name = job_name, jobs_dir = jobs_dir, n_attempts = math.tointeger((first.options or {}).attempts) or 1,
    n_concurrent_trials = math.tointeger(first.concurrency) or 1, retry = { max_retries = math.tointeger(first.retry_errors) or 0 },
    environment = environment(first.provider), verifier = {}, agents = agents,
    datasets = { (type((first.identity or {}).registry) == 'table')
      and { name = first.identity.registry.name, version = first.identity.registry.version,
        registry_url = tostring(first.identity.registry.registry):match('^https?://') and first.identity.registry.registry or nil }
      or { path = tostring(first.dataset or 'tasks') } },
  }
  check(HM.JobConfig, job_cfg, 'config.json')
  local job_res = {
    id = job_id, started_at = clock.wall(started_at or epoch(first.time) or 0),
    finished_at = finished_at and clock.wall(finished_at) or nil, updated_at = finished_at and clock.wall(finished_at) or nil,
    n_total_trials = total,
    stats = { n_completed_trials = total, n_errored_trials = errored, n_running_trials = 0, n_pending_trials = 0,
      n_cancelled_trials = 0, n_retries = 0, evals = evals, n_input_tokens = n_in, n_cache_tokens = n_cache,
      n_output_tokens = n_out, cost_usd = cost },
  }
  check(HM.JobResult, job_res, 'result.json')
  local lock = { schema_version = 1, created_at = clock.wall(), harbor = { version = 'cseng-export' },
    invocation = first.argv, n_concurrent_trials = job_cfg.n_concurrent_trials, retry = job_cfg.retry, trials = trials_lock }
  check(HM.JobLock, lock, 'lock.json')
  write_json(dir .. '/config.json', job_cfg)
  write_json(dir .. '/result.json', job_res)
  write_json(dir .. '/lock.json', lock)
  write_text(dir .. '/job.log', table.concat(log_lines, '\n') .. '\n')
  return { dir = dir, trials = total, job_name = job_name }
end

-- ---- reading a Harbor job folder ----------------------------------------------------------------

--- Whether dir is a Harbor job folder (config.json and result.json that are JobConfig and JobResult).
function harbor.is_job(dir)
  local st = fs.stat(dir)
  if not st or st.type ~= 'dir' then return false end
  local res = fs.read(dir .. '/result.json')
  local cfg = fs.read(dir .. '/config.json')
  if not res or not cfg then return false end
  local ok, doc = pcall(jsonl.decode, res)
  return ok and type(doc) == 'table' and doc.stats ~= nil and doc.n_total_trials ~= nil
end

--- A Harbor job folder as cseng run-log events (run_started, one trial per trial folder,
--- run_finished), for `cseng view` and `cseng compare`: the trial's outcome (an exception is
--- "error"; else passed when its primary reward is >= 1), its rewards, tokens and cost.
function harbor.read_job(dir)
  local job = jsonl.decode(assert(fs.read(dir .. '/result.json')))
  local cfg = jsonl.decode(fs.read(dir .. '/config.json') or '{}') or {}
  check(HM.JobResult, job, dir .. '/result.json')
  local run_id = 'harbor-' .. util.basename((dir:gsub('/+$', '')))
  local agent = type(cfg.agents) == 'table' and cfg.agents[1] or {}
  local envc = type(cfg.environment) == 'table' and cfg.environment or {}
  local provider = envc.type or (envc.import_path and tostring(envc.import_path):match('([^.]+)$')) or 'docker'
  local ds = type(cfg.datasets) == 'table' and cfg.datasets[1] or {}
  local events = { { event = 'run_started', run_id = run_id, time = job.started_at, kind = 'tasks', provider = provider,
    solver = SOLVER[agent.name] or agent.name, model = agent.model_name, mode = 'cold',
    dataset = ds.name and (ds.name .. (ds.version and ('@' .. ds.version) or '')) or ds.path, harbor_job = dir,
    identity = { kind = 'tasks', solver = SOLVER[agent.name] or agent.name, model = agent.model_name, provider = provider,
      providers = { provider }, dataset = ds.name or ds.path } } }
  local names = fs.list(dir) or {}
  table.sort(names)
  local n = 0
  for _, name in ipairs(names) do
    local rtext = fs.read(dir .. '/' .. name .. '/result.json')
    if rtext then
      local tr = jsonl.decode(rtext)
      if type(tr) == 'table' and tr.trial_name then
        check(HM.TrialResult, tr, dir .. '/' .. name .. '/result.json')
        n = n + 1
        local rewards = type(tr.verifier_result) == 'table' and tr.verifier_result.rewards or nil
        local reward = rewards and (rewards.reward or (function() local only, c = nil, 0
          for _, v in pairs(rewards) do only, c = v, c + 1 end
          return c == 1 and only or nil end)()) or nil
        local exc = tr.exception_info
        local outcome = exc and 'error' or ((reward and reward >= 1 - 1e-9) and 'passed' or 'failed')
        local ar = type(tr.agent_result) == 'table' and tr.agent_result or nil
        local function secs(t) local a, b = epoch(t and t.started_at), epoch(t and t.finished_at); return a and b and (b - a) or nil end
        local phases = { build_seconds = secs(tr.environment_setup), instruction_write_seconds = secs(tr.agent_setup),
          solve_seconds = secs(tr.agent_execution), verify_seconds = secs(tr.verifier) }
        local traj = dir .. '/' .. name .. '/agent/trajectory.json'
        events[#events + 1] = { event = 'trial', run_id = run_id, time = tr.finished_at, task_id = tr.task_name,
          task_sha256 = tr.task_checksum, provider = provider, mode = 'cold', solver = SOLVER[tr.agent_info.name] or tr.agent_info.name,
          model = tr.agent_info.model_info and tr.agent_info.model_info.name or nil, attempt = 1,
          outcome = outcome, passed = outcome == 'passed', reward = reward, rewards = rewards,
          primary_metric = rewards and (rewards.reward and 'reward' or nil) or nil, reward_rule = rewards and 'reward.json' or nil,
          error = exc and (exc.exception_type .. ': ' .. exc.exception_message) or nil, error_code = exc and exc.exception_type or nil,
          error_stage = exc and 'harbor' or nil, started_at = tr.started_at, finished_at = tr.finished_at, phases = phases,
          elapsed_seconds = (epoch(tr.finished_at) or 0) - (epoch(tr.started_at) or 0),
          solver_usage = ar and { prompt_tokens = ar.n_input_tokens, cached_tokens = ar.n_cache_tokens,
            completion_tokens = ar.n_output_tokens, cost_usd = ar.cost_usd } or nil,
          trajectory_path = fs.exists(traj) and traj or nil, harbor_trial = name,
          stdout_tail = fs.read(dir .. '/' .. name .. '/verifier/test-stdout.txt') }
      end
    end
  end
  events[#events + 1] = { event = 'run_finished', run_id = run_id, time = job.finished_at or job.updated_at or job.started_at,
    status = 'finished' }
  return events, n
end

return harbor
