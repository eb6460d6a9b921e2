--- What the task-run report templates share (lua/reports/cross_vendor.lua, per_task.lua,
--- per_provider.lua, failure_modes.lua): the evidence rule, provider/mode columns, the phases,
--- the runs table and cell formats. Templates `require 'reports.lib.task_runs'`; see docs/REPORTS.md.
---
--- Every function takes `data` (lua/reports/lib/load.lua's result) or trial records; nothing here
--- writes files.
local stats = require('cseng.lib.stats')
local passk = require('cseng.evals.passk')
local results = require('cseng.results.log')

local M = {}

--- The phases of a trial, in order (`phases.<name>_seconds` in the trial record).
M.PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }

--- The evidence rule, as the reports state it.
M.RULE = 'for each provider/mode and task, the newest passing trial among the runs read; if none passed, ' ..
  'the newest trial of any outcome. "Newest" is by the trial\'s finish time (a seed summary has none: its ' ..
  'run\'s date, from the file name), ties going to the run listed later.'

local DASH = '–'

--- The column a trial belongs to: "provider/mode" (mode 'unknown' when the record has none;
--- "provider/mode [label]" for a run with --label).
---@param t table a trial record
---@return string
function M.column(t)
  return tostring(t.provider or 'unknown') .. '/' .. M.mode_of(t)
end

--- A trial's mode as columns show it: the mode, the run's --label when it has one
--- ("cold [nightly]"), so two labelled runs of one provider and mode are two columns, and the
--- agent (solver:model) of a solver that has a model ("cold · openrouter:deepseek/deepseek-chat"),
--- so two models are two contestants; gold, nop and command trials keep the provider/mode column.
function M.mode_of(t)
  local m = tostring(t.mode or 'unknown')
  if t.run_label ~= nil then m = m .. ' [' .. tostring(t.run_label) .. ']' end
  local agent = M.agent_of(t)
  if agent then m = m .. ' · ' .. agent end
  return m
end

--- "solver:model" for a trial whose solver reported a model, else nil.
function M.agent_of(t)
  local model = passk.model_of(t)
  return model and (tostring(t.solver or '?') .. ':' .. model) or nil
end

--- Whether pass@k says more than the pass rate: some trial is a repeated attempt or has a model.
function M.has_agent_trials(data)
  for _, t in ipairs(data.trials) do
    if (math.tointeger(t.attempt) or 1) > 1 or passk.model_of(t) then return true end
  end
  return false
end

--- The pass@k section (every template renders it when M.has_agent_trials): one row per solver,
--- model, provider and mode over EVERY trial read (not the evidence rule, which would keep the
--- best attempt), pass@1..K with 95% bootstrap intervals over tasks; agent failures and
--- infrastructure errors (ESANDBOX among them: the sandbox died under the agent) counted apart.
---@return string|nil markdown
function M.pass_at_k_section(data, h)
  if not M.has_agent_trials(data) then return nil end
  local rows = passk.table(data.trials)
  local kmax = 0
  for _, r in ipairs(rows) do kmax = math.max(kmax, r.k_max) end
  local sandbox_errors = {}
  for _, t in ipairs(data.trials) do
    if t.error_code == 'ESANDBOX' then
      local key = table.concat({ tostring(t.solver or '-'), passk.model_of(t) or '-', tostring(t.provider or '-'),
        tostring(t.mode or '-') }, '\0')
      sandbox_errors[key] = (sandbox_errors[key] or 0) + 1
    end
  end
  local head = { 'solver', 'model', 'provider', 'mode', 'tasks', 'graded attempts', 'agent failures', 'infra errors',
    'of which ESANDBOX' }
  local align = 'llllrrrrr'
  for k = 1, kmax do head[#head + 1] = 'pass@' .. k; align = align .. 'r' end
  local out = {}
  for _, r in ipairs(rows) do
    local failed = 0
    for _, t in ipairs(data.trials) do
      if t.outcome == 'failed' and tostring(t.solver or '-') == r.solver and (passk.model_of(t) or '-') == r.model
        and tostring(t.provider or '-') == r.provider and tostring(t.mode or '-') == r.mode then failed = failed + 1 end
    end
    local key = table.concat({ r.solver, r.model, r.provider, r.mode }, '\0')
    local row = { r.solver, r.model, r.provider, r.mode, r.tasks, r.attempts, failed, r.errors, sandbox_errors[key] or 0 }
    for k = 1, kmax do
      local p = r.pass_at[k]
      row[#row + 1] = p and string.format('%.1f%% [%.1f, %.1f] (%d)', 100 * p.value, 100 * p.lo, 100 * p.hi, p.tasks) or DASH
    end
    out[#out + 1] = row
  end
  return table.concat({
    '## pass@k by solver, model, provider and mode\n',
    'Over every trial read (each `--attempts` sample counts), the unbiased estimator 1 − C(n−c, k)/C(n, k) per ' ..
      'task (n graded attempts, c passed), averaged over the tasks with n ≥ k; [95% bootstrap interval over tasks] ' ..
      '(tasks). Infrastructure errors are not samples of the solver: they are left out of n and counted apart.\n',
    h.table(head, out, align),
  }, '\n')
end

--- The metrics section: every reward key the verifiers wrote (Harbor's reward.json: each key a
--- metric) per solver, model, provider and mode: trials that have it, mean, min and max; the
--- primary metric (the key that decided pass/fail) marked. Nil when the trials recorded no rewards
--- but the one `reward` (the pass rate says that already).
---@return string|nil markdown
function M.metrics_section(data, h)
  local cells, order, keys, primaries = {}, {}, {}, {}
  local interesting = false
  for _, t in ipairs(data.trials) do
    if type(t.rewards) == 'table' then
      local ck = table.concat({ tostring(t.solver or '-'), passk.model_of(t) or '-', tostring(t.provider or '-'), tostring(t.mode or '-') }, '\0')
      if not cells[ck] then cells[ck] = {}; order[#order + 1] = ck end
      for k, v in pairs(t.rewards) do
        if type(v) == 'number' then
          if k ~= 'reward' then interesting = true end
          keys[k] = true
          local m = cells[ck][k] or { n = 0, sum = 0 }
          m.n, m.sum = m.n + 1, m.sum + v
          m.min, m.max = math.min(m.min or v, v), math.max(m.max or v, v)
          cells[ck][k] = m
        end
      end
      if t.primary_metric then primaries[t.primary_metric] = true end
    end
  end
  if not interesting then return nil end
  local names = {}
  for k in pairs(keys) do names[#names + 1] = k end
  table.sort(names)
  local rows = {}
  for _, ck in ipairs(order) do
    local parts = {}
    for p in (ck .. '\0'):gmatch('([^\0]*)\0') do parts[#parts + 1] = p end
    for _, k in ipairs(names) do
      local m = cells[ck][k]
      if m then
        rows[#rows + 1] = { parts[1], parts[2], parts[3], parts[4], k .. (primaries[k] and ' (primary)' or ''), m.n,
          string.format('%.3f', m.sum / m.n), string.format('%.3f', m.min), string.format('%.3f', m.max) }
      end
    end
  end
  return table.concat({
    '## Metrics (reward keys)\n',
    'Every numeric key of the verifiers\' reward.json (and reward.txt\'s `reward`) is a metric, as Harbor makes it: ' ..
      'its mean, min and max over the trials that recorded it. The primary metric decided pass/fail.\n',
    h.table({ 'solver', 'model', 'provider', 'mode', 'metric', 'trials', 'mean', 'min', 'max' }, rows, 'lllllrrrr'),
  }, '\n')
end

--- The admission section (lua/cseng/run/admission.lua): per run and key (a provider or a model
--- endpoint, model:<host>), the limits it started at, went down to and up to, its changes, the
--- 429/503 answers it saw, its Retry-After pauses and the starts that waited; nil when no run read
--- had admission on. A run from a summary uses the summary's `admission` section.
---@return string|nil
function M.admission_section(data, h)
  local rows = {}
  for _, run in ipairs(data.runs) do
    local a = run.admission or results.admission(run.events or {})
    local keys = {}
    for k in pairs(a or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local x = a[k]
      rows[#rows + 1] = { { raw = h.code(run.id) }, { raw = h.code(k) }, x.start or DASH, x.min or DASH, x.max or DASH,
        x.final or DASH, string.format('%d (%d up, %d down)', x.changes or 0, x.increases or 0, x.decreases or 0),
        x.latency_decreases or 0, x.throttled or DASH, x.pauses or 0, x.waits or DASH,
        x.wait_s and h.num(x.wait_s, 1) or DASH }
    end
  end
  if #rows == 0 then return nil end
  return '## Admission\n\nAdaptive admission (creates per provider, completions per model endpoint): the limit on ' ..
    'what is in flight, its changes (up: healthy, probing; down: a 429/503 or rising create latency), the ' ..
    'throttling answers seen, the Retry-After pauses, and the starts that waited for a place (each change is an ' ..
    '`admission` event in the run log).\n\n' ..
    h.table({ 'run', 'key', 'start', 'min', 'max', 'final', 'changes', 'latency decreases', '429/503',
      'pauses', 'waits', 'wait s' }, rows, 'llrrrrlrrrrr')
end

--- The sandbox rates section: per run and provider, the rates its trials were costed at ($ per
--- vCPU-hour, per GiB-hour, per create) and where they came from (the plan; computesdk's
--- pricing.json given with --pricing: the file, its date, sha256, their id and confidence; the
--- adapter), from run_started.rates (lua/cseng/evals/rates.lua); nil when no run read records them.
---@param heading? string the heading's level ('##' by default)
---@return string|nil
function M.rates_section(data, h, heading)
  local rows = {}
  local function hr(v) return type(v) == 'number' and string.format('%.4g', v * 3600) or DASH end
  for _, run in ipairs(data.runs) do
    local r = type(run.started) == 'table' and type(run.started.rates) == 'table' and run.started.rates or {}
    local names = {}
    for k in pairs(r) do names[#names + 1] = k end
    table.sort(names)
    for _, name in ipairs(names) do
      local x = type(r[name]) == 'table' and r[name] or {}
      local src = type(x.source) == 'table' and x.source or {}
      local from = tostring(src.from or '?')
      if from == 'pricing' then
        from = string.format('computesdk pricing %s (%s, sha256 %s, id %s: $%s for 1 vCPU + 2 GB per hour%s)',
          tostring(src.file), tostring(src.last_updated or 'undated'), tostring(src.sha256 or '?'):sub(1, 12),
          tostring(src.id), tostring(src.total_1vcpu_2gb_hr), src.confidence and (', ' .. tostring(src.confidence)) or '')
      elseif src.note then
        from = from .. ' (' .. tostring(src.note) .. ')'
      end
      rows[#rows + 1] = { { raw = h.code(run.id) }, h.escape(name), hr(x.vcpu_s), hr(x.gib_s),
        type(x.per_create) == 'number' and M.usd(x.per_create) or DASH, h.escape(from) }
    end
  end
  if #rows == 0 then return nil end
  return (heading or '##') .. ' Sandbox rates\n\nThe rates each provider was priced at (a task run\'s `estimated_cost_usd` is its trials\' ' ..
    'lifetimes at these rates) and their source: the plan\'s `rates`, else computesdk\'s pricing.json given with `--pricing` (their normalised ' ..
    '1 vCPU + 2 GB rate split into CPU and memory), else the adapter\'s own.\n\n' ..
    h.table({ 'run', 'provider', '$ / vCPU-hour', '$ / GiB-hour', 'per create', 'source' }, rows, 'llrrrl')
end

--- When a trial ended, for ordering: finished_at, else the record's time (an ISO-8601 string).
function M.time(t) return t.finished_at or t.time or '' end

--- A phase's seconds, or nil when the phase did not run.
---@param t table
---@param phase string one of M.PHASES
---@return number|nil
function M.phase(t, phase)
  local v = type(t.phases) == 'table' and t.phases[phase .. '_seconds'] or nil
  return type(v) == 'number' and v or nil
end

--- The model spend a solver reported (solver_usage.cost_usd), or nil.
function M.solver_cost(t)
  local u = t.solver_usage
  return type(u) == 'table' and type(u.cost_usd) == 'number' and u.cost_usd or nil
end

---@class report_tasks.column
---@field key string "provider/mode"
---@field provider string
---@field mode string
---@field trials table[] the selected trials (one per task), sorted by task id
---@field all table[] every trial of the column
---@field by_task table<string, table> task id -> the selected trial

---@class report_tasks.evidence
---@field selected table[] the selected trials, by column then task
---@field columns report_tasks.column[] sorted by provider, then mode
---@field by_key table<string, report_tasks.column>
---@field tasks string[] every task id, sorted
---@field attempts table<table, {n: integer, passed: integer, failed: integer, errors: integer}> per selected trial: its column and task's trials
---@field superseded integer non-passing trials left out because the same column and task passed

--- Apply the evidence rule (M.RULE) to data.trials.
---@param data table report_helpers.load's result
---@return report_tasks.evidence
function M.evidence(data)
  local pos = {}
  for i, t in ipairs(data.trials) do pos[t] = i end
  local function newer(a, b) -- a is newer than b
    local ta, tb = M.time(a), M.time(b)
    if ta ~= tb then return ta > tb end
    return pos[a] > pos[b]
  end
  local by_key, columns, tasks_seen, tasks = {}, {}, {}, {}
  local best, attempts = {}, {}
  for _, t in ipairs(data.trials) do
    local key, task = M.column(t), tostring(t.task_id)
    local col = by_key[key]
    if not col then
      col = { key = key, provider = tostring(t.provider or 'unknown'), mode = M.mode_of(t), label = t.run_label, trials = {},
        all = {}, by_task = {} }
      by_key[key] = col
      columns[#columns + 1] = col
      best[key], attempts[key] = {}, {}
    end
    col.all[#col.all + 1] = t
    if not tasks_seen[task] then tasks_seen[task] = true; tasks[#tasks + 1] = task end
    local a = attempts[key][task] or { n = 0, passed = 0, failed = 0, errors = 0 }
    attempts[key][task] = a
    a.n = a.n + 1
    if t.outcome == 'passed' then a.passed = a.passed + 1
    elseif t.outcome == 'error' then a.errors = a.errors + 1
    else a.failed = a.failed + 1 end
    local cur = best[key][task]
    local tp, cp = t.outcome == 'passed', cur and cur.outcome == 'passed'
    if not cur or (tp and not cp) or (tp == cp and newer(t, cur)) then best[key][task] = t end
  end
  table.sort(columns, function(a, b)
    if a.provider ~= b.provider then return a.provider < b.provider end
    return a.mode < b.mode
  end)
  table.sort(tasks)
  local ev = { selected = {}, columns = columns, by_key = by_key, tasks = tasks, attempts = {}, superseded = 0 }
  for _, col in ipairs(columns) do
    for _, task in ipairs(tasks) do
      local t = best[col.key][task]
      if t then
        col.trials[#col.trials + 1] = t
        col.by_task[task] = t
        ev.selected[#ev.selected + 1] = t
        local a = attempts[col.key][task]
        ev.attempts[t] = a
        if t.outcome == 'passed' then ev.superseded = ev.superseded + a.failed + a.errors end
      end
    end
  end
  return ev
end

--- Counts of a list of trials by outcome: {n, passed, failed, errors}.
function M.counts(list)
  local c = { n = #list, passed = 0, failed = 0, errors = 0 }
  for _, t in ipairs(list) do
    if t.outcome == 'passed' then c.passed = c.passed + 1
    elseif t.outcome == 'error' then c.errors = c.errors + 1
    else c.failed = c.failed + 1 end
  end
  return c
end

--- The task runs of data (kind 'tasks'), in order of their start.
function M.task_runs(data)
  local out = {}
  for _, run in ipairs(data.runs) do
    if run.kind == 'tasks' or #run.trials > 0 then out[#out + 1] = run end
  end
  return out
end

-- ---- formats ------------------------------------------------------------------------------

--- Seconds with precision that suits their size: 123, 12.3, 1.23, 0.123, 0.0012, <0.0001.
function M.secs(v)
  if v == nil or v ~= v then return DASH end
  local a = math.abs(v)
  if a >= 100 then return string.format('%.0f', v) end
  if a >= 10 then return string.format('%.1f', v) end
  if a >= 1 then return string.format('%.2f', v) end
  if a >= 0.01 or a == 0 then return string.format('%.3f', v) end
  if a < 0.00005 then return v > 0 and '<0.0001' or '>-0.0001' end
  return string.format('%.4f', v)
end

--- Dollars: "$0", "$0.0006", "$1.23"; "<$0.0001" for a positive amount below that.
function M.usd(v)
  if v == nil or v ~= v then return DASH end
  if v == 0 then return '$0' end
  if v > 0 and v < 0.00005 then return '<$0.0001' end
  if math.abs(v) >= 1 then return string.format('$%.2f', v) end
  return string.format('$%.4f', v)
end

--- The outcome of a trial as a cell: ✓ (passed), ✗ (failed; "✗ (no gold solution)" for a gold
--- trial of a task without solution/solve.sh), "error: <stage>", – (no trial).
function M.outcome(t)
  if not t then return DASH end
  if t.outcome == 'passed' then return '✓' end
  if t.outcome == 'error' then return 'error: ' .. tostring(t.error_stage or '?') end
  if t.no_solution then return '✗ (no gold solution)' end -- gold had nothing to apply
  return '✗'
end

--- The median of a list of numbers (nil when empty).
function M.median(vals) return stats.median(vals) end

--- The last `lines` non-blank lines of a text, at most `chars` characters (cut at the front).
---@param s string|nil
---@param lines? integer default 6
---@param chars? integer default 600
---@return string
function M.tail(s, lines, chars)
  s = tostring(s or '')
  local all = {}
  for line in (s .. '\n'):gmatch('([^\n]*)\n') do
    if line:match('%S') then all[#all + 1] = (line:gsub('%s+$', '')) end
  end
  local from = math.max(1, #all - (lines or 6) + 1)
  local out = table.concat(all, '\n', from)
  chars = chars or 600
  if #out > chars then
    local cut = #out - chars + 1
    -- do not start inside a UTF-8 sequence
    while cut <= #out and (out:byte(cut) or 0) >= 0x80 and (out:byte(cut) or 0) < 0xC0 do cut = cut + 1 end
    out = '…' .. out:sub(cut)
  end
  return out
end

--- A fenced code block that holds any text (the fence is longer than any backtick run in it).
function M.fence(text, lang)
  text = tostring(text or '')
  local longest = 0
  for run in text:gmatch('`+') do longest = math.max(longest, #run) end
  local f = string.rep('`', math.max(3, longest + 1))
  return f .. (lang or 'text') .. '\n' .. text .. (text:sub(-1) == '\n' and '' or '\n') .. f .. '\n'
end

--- A run's date for tables: its start time, with where a summary's date came from.
function M.run_date(run)
  local d = run.started and run.started.time or '?'
  if run.date_source then d = d .. ' (' .. run.date_source .. ')' end
  return d
end

--- A run's provider as the report shows it: its name, and the endpoint it talked to when the
--- log records one ("lizard @ 127.0.0.1:8080, loopback: a local fake?"), so a run against a
--- bundled fake never reads like one against the real service.
function M.provider_with_endpoint(st)
  local name = tostring(st.provider or '?')
  local ep = st.endpoint or (type(st.identity) == 'table' and type(st.identity.endpoints) == 'table'
    and st.identity.endpoints[name]) or nil
  if type(ep) ~= 'table' or not ep.host then return name end
  local where = ep.scheme == 'unix' and ep.host or (tostring(ep.host) .. (ep.port and (':' .. ep.port) or ''))
  return name .. ' @ ' .. where .. (ep.loopback and ep.scheme ~= 'unix' and ' (loopback: a local fake?)' or '')
end

--- The table of task runs read: id, source, provider, mode, solver, dataset, date, counts, status.
---@param data table
---@param h table the template's helpers
---@return string markdown
function M.runs_table(data, h)
  local rows = {}
  for _, run in ipairs(M.task_runs(data)) do
    local st, c = run.started or {}, M.counts(run.trials)
    local modes = {}
    for _, t in ipairs(run.trials) do modes[tostring(t.mode or 'unknown')] = true end
    local mode = st.mode or table.concat((function()
      local l = {}
      for k in pairs(modes) do l[#l + 1] = k end
      table.sort(l)
      return l
    end)(), ',')
    rows[#rows + 1] = { { raw = h.code(run.id) }, run.source or 'log', M.provider_with_endpoint(st), mode ~= '' and mode or '?',
      st.solver or (st.solve_enabled == false and 'none (verifier only)' or '?'), st.dataset or '?', M.run_date(run),
      c.n, c.passed, c.failed, c.errors, run.finished and run.finished.status or 'incomplete' }
  end
  if #rows == 0 then return 'No task runs.\n' end
  return h.table({ 'run', 'source', 'provider', 'mode', 'solver', 'dataset', 'date', 'trials', 'passed', 'failed',
    'errors', 'status' }, rows, 'lllllllrrrrl')
end

--- The statement of the evidence rule with its numbers, for the top of a report.
---@param data table
---@param ev report_tasks.evidence
---@return string markdown
function M.evidence_text(data, ev)
  local runs = M.task_runs(data)
  return string.format('**Evidence rule:** %s %d trial(s) read from %d run(s); %d selected (%d provider/mode ' ..
    'column(s) × %d task(s), where run)%s.\n', M.RULE, #data.trials, #runs, #ev.selected, #ev.columns, #ev.tasks,
    ev.superseded > 0 and string.format('; %d non-passing trial(s) superseded by a pass', ev.superseded) or '')
end


--- The sum of get(t) over list, counting only numbers; nil when none is a number.
---@param list table[]
---@param get fun(t:table):any
---@return number|nil
function M.sum(list, get)
  local s, any = 0, false
  for _, t in ipairs(list) do
    local v = get(t)
    if type(v) == 'number' then s = s + v; any = true end
  end
  return any and s or nil
end

--- The start of a task-run report: its lines (the title, then the evidence statement), a function
--- adding a line (nil adds nothing) and the evidence.
---@param data table
---@param title string the first line
---@return string[] out, fun(s:string|nil) add, report_tasks.evidence ev
function M.document(data, title)
  local out, ev = {}, M.evidence(data)
  local function add(s) out[#out + 1] = s end
  add(title)
  add(M.evidence_text(data, ev))
  return out, add, ev
end

--- The whole report when there is nothing to show: out so far, then a line naming the inputs read.
---@param data table
---@param out string[] the lines from M.document
---@return string markdown
function M.no_records(data, out)
  out[#out + 1] = 'No trial records in ' .. table.concat(data.inputs, ', ') .. '.\n'
  return table.concat(out, '\n')
end

return M
