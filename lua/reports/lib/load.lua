--- Reports' input: run logs (.jsonl) and summaries (.json, cseng's or the seed harness's) read
--- into one data table (load.load) that templates receive, grouped by provider, mode and task.
--- computesdk's result files (their benchmark's latest.json) are read too, as startup runs.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local results = require('cseng.results.log')
local computesdk = require('cseng.results.computesdk')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')

local load = {}

-- ---- loading ----------------------------------------------------------------------------

---@class report.run
---@field id string
---@field path string
---@field kind string 'startup' | 'tasks' | '?'
---@field source string 'log' (a .jsonl), 'summary' (cseng's .json), 'seed summary' (the seed harness's .json) or
--- 'computesdk' (their result file: a startup run whose samples are its iterations)
---@field computesdk table|nil the file as cseng.results.computesdk.read read it (source 'computesdk')
---@field date_source? string where a summary's date came from when it has none: 'file name' | 'file modification time'
---@field started table|nil the run_started event (for a summary: built from its top-level fields)
---@field finished table|nil the run_finished event
---@field events table[] every event of the run, in order
---@field trials table[] 'trial' events (task runs)
---@field startup_trials table[] 'startup_trial' events (the startup arena)
---@field environments table[] 'environment' events
---@field rounds table[] 'round' events
---@field allocated table[]
---@field destroyed table[]
---@field cleanup_failed table[]
---@field live table[] allocated and never destroyed (what `cseng cleanup` would destroy)

---@class report.data
---@field inputs string[] the files read
---@field runs report.run[] in order of their start time
---@field events table[] every event
---@field trials table[] every 'trial' event, across runs (in run order), and the trial records of summaries
---@field startup_trials table[] every 'startup_trial' event, across runs
---@field by_provider table groups of trials (load.group)
---@field by_mode table
---@field by_task table
---@field warnings string[] files skipped while loading a directory
---@field skipped {path: string, why: string}[] .json files of a directory left out without a warning: a summary
--- whose run log was read (cseng writes both), JSON that is not a summary (prewarm artifacts)

-- The files of an input: {path, in_dir}, logs (.jsonl) and summaries (.json) apart.
local function input_files(input, logs, summaries)
  local st, err, code = fs.stat(input)
  if not st then errors.raise(code or errors.ENOENT, tostring(err)) end -- the message names the path
  local harbor = require('cseng.results.harbor')
  if st.type == 'dir' and harbor.is_job(input) then -- a Harbor job folder is one run
    logs[#logs + 1] = { path = input, in_dir = false, harbor = true }
    return
  end
  if st.type ~= 'dir' then
    local list = input:match('%.json$') and summaries or logs
    -- an arena's summary (results/<run-id>.json) stands for its run: the log beside it is read
    local log = input:gsub('%.json$', '.jsonl')
    if list == summaries and fs.exists(log) and (fs.read(input) or ''):find('"cseng%-startup%-summary"') then
      list, input = logs, log
    end
    list[#list + 1] = { path = input, in_dir = false }
    return
  end
  local names = fs.list(input) or {}
  table.sort(names)
  for _, name in ipairs(names) do
    if name:match('%.jsonl$') then logs[#logs + 1] = { path = fs.join(input, name), in_dir = true }
    elseif name:match('%.json$') then summaries[#summaries + 1] = { path = fs.join(input, name), in_dir = true }
    elseif harbor.is_job(fs.join(input, name)) then logs[#logs + 1] = { path = fs.join(input, name), in_dir = true, harbor = true } end
  end
end

--- Group a list by a field name or a function: an array of {key=, items=} sorted by key (as
--- strings), plus .by[key] -> items. Items without a key are left out.
---@param list table[]
---@param key string|fun(item: table): any
---@return table
function load.group(list, key)
  local get = type(key) == 'function' and key or function(x) return x[key] end
  local by, keys = {}, {}
  for _, item in ipairs(list or {}) do
    local k = get(item)
    if k ~= nil then
      if not by[k] then by[k] = {}; keys[#keys + 1] = k end
      table.insert(by[k], item)
    end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local out = { by = by }
  for i, k in ipairs(keys) do out[i] = { key = k, items = by[k] } end
  return out
end

--- Allocations with no destroyed record, keyed by provider and sandbox id (two providers of
--- one run may hand out the same id); a cleanup_failed record leaves the sandbox live. The run
--- log's own reader (cseng.results.log).
load.live_allocations = results.live_allocations

local function new_run(id, path)
  return { id = id, path = path, kind = '?', source = 'log', events = {}, trials = {}, startup_trials = {},
           environments = {}, rounds = {}, allocated = {}, destroyed = {}, cleanup_failed = {} }
end

--- Read a summary .json (cseng's or the seed harness's), or a computesdk result file (returned
--- as cseng.results.computesdk.read gives it, with kind = 'computesdk'). Valid JSON that is not
--- a summary (no results[] array: a prewarm artifact, say) returns nil and the reason; an
--- unreadable file, invalid JSON, a results[] entry without task_id or a malformed computesdk
--- field raises, naming the path (and the field).
---@param path string
---@return table|nil summary, string? why
function load.read_summary(path)
  local text, err, code = fs.read(path)
  if not text then errors.raise(code or errors.EIO, tostring(err)) end
  local s, derr = jsonl.decode(text)
  if s == nil then errors.raise(errors.EPARSE, path .. ': not valid JSON: ' .. tostring(derr)) end
  if computesdk.detect(s) then
    local c = computesdk.read(path, s)
    c.kind = 'computesdk'
    return c
  end
  if type(s) ~= 'table' or type(s.results) ~= 'table' then return nil, 'not a run summary (no results[] array)', 'ENOTRUN' end
  for i, r in ipairs(s.results) do
    if type(r) ~= 'table' or type(r.task_id) ~= 'string' then
      errors.raise(errors.ENOTRUN, path .. ': results[' .. i .. ']: not a trial record (no task_id)')
    end
  end
  return s
end

--- A run from a summary: cseng's has run_id, mode, status and full trial records; the seed's has
--- {provider, runtime, task_count, solve_enabled, passed, estimated_cost_usd, results[]}, no
--- dates and no mode. Trials get provider, mode ('unknown' when missing), solver and runtime from
--- the top level, an outcome (passed, else failed when the verifier returned a code, else error),
--- and `time` (finished_at, else the run's date). The date of a summary without one is taken
--- from a yyyymmdd in its file name, else from the file's modification time (run.date_source).
---@param s table load.read_summary's result
---@param path string
---@return report.run
function load.summary_run(s, path)
  local base = util.basename(path):gsub('%.json$', '')
  local id = type(s.run_id) == 'string' and s.run_id or base
  local run = new_run(id, path)
  run.kind, run.source = 'tasks', s.run_id and 'summary' or 'seed summary'
  local date = s.started_at or s.finished_at
  if not date then
    local y, m, d = base:match('(20%d%d)(%d%d)(%d%d)')
    if y then date, run.date_source = y .. '-' .. m .. '-' .. d, 'file name'
    else
      local st = fs.stat(path)
      date, run.date_source = os.date('!%Y-%m-%dT%H:%M:%SZ', math.floor(st and st.mtime or 0)), 'file modification time'
    end
  end
  local mode = s.mode or 'unknown'
  run.started = { event = 'run_started', run_id = id, time = date, provider = s.provider, mode = mode,
    solver = s.solver, runtime = s.runtime, dataset = s.dataset, task_count = s.task_count,
    solve_enabled = s.solve_enabled, plan = s.plan }
  run.finished = { event = 'run_finished', run_id = id, time = s.finished_at, status = s.status or 'unknown',
    passed = s.passed, failed = s.failed, errors = s.errors }
  run.admission = type(s.admission) == 'table' and s.admission or nil
  for _, r in ipairs(s.results) do
    local t = util.copy(r)
    t.event, t.run_id = 'trial', id
    t.provider = t.provider or s.provider or 'unknown'
    t.mode = t.mode or mode
    t.solver = t.solver or s.solver
    t.runtime = t.runtime or s.runtime
    if not t.outcome then
      t.outcome = t.passed == true and 'passed' or ((t.return_code ~= nil and not t.error) and 'failed' or 'error')
    end
    t.time = t.time or t.finished_at or date
    run.trials[#run.trials + 1] = t
  end
  return run
end

--- A startup run from one of computesdk's result files (load.read_summary): each iteration a
--- measured sample of its provider in its mode (cseng's name: their concurrent is a burst), in
--- one block, ok when it has no error; a failed iteration has no ready_ms, whatever time the
--- file gave it. The run's mode is the file's when it holds one.
---@param c table
---@param path string
---@return report.run
function load.computesdk_run(c, path)
  local id = 'computesdk:' .. util.basename(path) .. '@' .. c.timestamp
  local run = new_run(id, path)
  run.kind, run.source, run.computesdk = 'startup', 'computesdk', c
  local providers, seen, modes, nmodes = {}, {}, {}, 0
  for _, r in ipairs(c.results) do
    if not seen[r.provider] then seen[r.provider] = true; providers[#providers + 1] = r.provider end
    local mode = r.cseng_mode or r.mode
    if not modes[mode] then modes[mode] = true; nmodes = nmodes + 1 end
    for i, it in ipairs(r.iterations) do
      run.startup_trials[#run.startup_trials + 1] = {
        event = 'startup_trial', run_id = id, time = c.timestamp, provider = r.provider, adapter = r.provider, mode = mode,
        phase = 'measured', warmup = false, round = i, position = 1, block = 1, ok = it.tti_ms ~= nil,
        ready_ms = it.tti_ms, sandbox_id = it.sandbox_id, error = it.error, error_code = it.error and 'computesdk' or nil,
      }
    end
  end
  local one
  for m in pairs(modes) do one = m end
  run.started = { event = 'run_started', run_id = id, time = c.timestamp, kind = 'startup', providers = providers,
    mode = nmodes == 1 and one or nil, plan = 'computesdk ' .. c.version,
    computesdk = { file = path, version = c.version, environment = c.environment } }
  run.finished = { event = 'run_finished', run_id = id, time = c.timestamp, status = 'finished' }
  return run
end

--- Load results: each input is a run log (.jsonl), a summary (.json, cseng's or the seed's; see
--- load.summary_run), one of computesdk's result files (load.computesdk_run) or a directory of
--- them (not recursive). Logs are read first; a summary
--- of a run whose log was read is left out (data.skipped), and so is other JSON in a directory.
--- A Harbor job folder (lua/cseng/results/harbor.lua: config.json and result.json, one folder per
--- trial), named or inside a named directory, is read as one run of tasks.
--- A malformed file named directly raises; inside a directory it is skipped with a warning. A
--- file given twice is read once.
---@param inputs string[]
---@return report.data
function load.load(inputs)
  local data = { inputs = {}, runs = {}, events = {}, trials = {}, startup_trials = {}, warnings = {}, skipped = {} }
  local by_id = {}
  local logs, summaries, seen = {}, {}, {}
  for _, input in ipairs(inputs) do input_files(input, logs, summaries) end
  for _, file in ipairs(logs) do
    local path, in_dir = file.path, file.in_dir
    if not seen[path] then
      seen[path] = true
      local ok, events = pcall(file.harbor and require('cseng.results.harbor').read_job or results.read, path)
      if not ok then
        if not in_dir then error(errors.from(events), 0) end
        data.warnings[#data.warnings + 1] = 'skipped ' .. path .. ': ' .. errors.line(events)
      else
        data.inputs[#data.inputs + 1] = path
        for _, e in ipairs(events) do
          local id = e.run_id or path
          local run = by_id[id]
          if not run then
            run = new_run(id, path)
            by_id[id] = run
            data.runs[#data.runs + 1] = run
          end
          run.events[#run.events + 1] = e
          data.events[#data.events + 1] = e
          local kind = e.event
          if kind == 'run_started' then
            run.started = run.started or e
            run.kind = e.kind or 'tasks'
          elseif kind == 'run_finished' then run.finished = e
          elseif kind == 'trial' then run.trials[#run.trials + 1] = e
          elseif kind == 'startup_trial' then
            run.startup_trials[#run.startup_trials + 1] = e
            data.startup_trials[#data.startup_trials + 1] = e
          elseif kind == 'environment' then run.environments[#run.environments + 1] = e
          elseif kind == 'round' then run.rounds[#run.rounds + 1] = e
          elseif kind == 'allocated' then run.allocated[#run.allocated + 1] = e
          elseif kind == 'destroyed' then run.destroyed[#run.destroyed + 1] = e
          elseif kind == 'cleanup_failed' then run.cleanup_failed[#run.cleanup_failed + 1] = e
          end
        end
      end
    end
  end
  for _, file in ipairs(summaries) do
    local path, in_dir = file.path, file.in_dir
    if not seen[path] then
      seen[path] = true
      local ok, s, why = pcall(load.read_summary, path)
      if not ok then
        if not in_dir then error(errors.from(s), 0) end
        local msg = errors.line(s)
        if msg:sub(1, #path + 2) == path .. ': ' then msg = msg:sub(#path + 3) end
        data.warnings[#data.warnings + 1] = 'skipped ' .. path .. ': ' .. msg
      elseif not s then
        if not in_dir then errors.raise(errors.ENOTRUN, path .. ': ' .. why) end
        data.skipped[#data.skipped + 1] = { path = path, why = why }
      elseif s.run_id and by_id[s.run_id] then
        data.skipped[#data.skipped + 1] = { path = path, why = 'its run log was read' }
      else
        local run = s.kind == 'computesdk' and load.computesdk_run(s, path) or load.summary_run(s, path)
        if by_id[run.id] then run.id = run.id .. ' (' .. path .. ')' end
        by_id[run.id] = run
        data.inputs[#data.inputs + 1] = path
        data.runs[#data.runs + 1] = run
        for _, t in ipairs(run.startup_trials) do data.startup_trials[#data.startup_trials + 1] = t end
      end
    end
  end
  for _, run in ipairs(data.runs) do
    run.live = load.live_allocations(run.events)
    if run.kind == '?' and #run.startup_trials > 0 then run.kind = 'startup' end
    if run.kind == '?' and #run.trials > 0 then run.kind = 'tasks' end
  end
  table.sort(data.runs, function(a, b)
    local ta, tb = a.started and a.started.time or '', b.started and b.started.time or ''
    if ta ~= tb then return ta < tb end
    return a.id < b.id
  end)
  data.trials = {}
  for _, run in ipairs(data.runs) do
    -- a run's --label keys its columns apart from another run of the same provider and mode
    local label = run.started and run.started.label
    for _, t in ipairs(run.trials) do
      if label ~= nil and t.run_label == nil then t.run_label = tostring(label) end
      data.trials[#data.trials + 1] = t
    end
  end
  data.by_provider = load.group(data.trials, 'provider')
  data.by_mode = load.group(data.trials, 'mode')
  data.by_task = load.group(data.trials, 'task_id')
  return data
end


return load
