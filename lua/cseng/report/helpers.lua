--- Reports: load run logs, run a template, write the markdown and its charts.
---
--- A template is a Lua file returning `function(data, h) -> markdown string` (lua/reports/*.lua).
--- `data` is what helpers.load returns: every run of the inputs with its events, and the trial
--- records across runs, grouped by provider, mode and task. Inputs are run logs (.jsonl), run
--- summaries (.json: cseng's, or the seed harness's, which have no events), or directories of both.
--- `h` is helpers.context(output): markdown tables, number formatting, statistics (stats.lua),
--- SVG charts, and h.chart, which writes an SVG next to the markdown and returns the image link
--- (a relative path, so the chart renders on GitHub).
local fs = require 'cseng.fs'
local jsonl = require 'cseng.lib.jsonl'
local sys = require 'cseng.sys'
local results = require 'cseng.results.log'
local stats = require 'cseng.lib.stats'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'

local helpers = {}

-- ---- loading ----------------------------------------------------------------------------

---@class report.run
---@field id string
---@field path string
---@field kind string 'startup' | 'tasks' | '?'
---@field source string 'log' (a .jsonl), 'summary' (cseng's .json) or 'seed summary' (the seed harness's .json)
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
---@field by_provider table groups of trials (helpers.group)
---@field by_mode table
---@field by_task table
---@field warnings string[] files skipped while loading a directory
---@field skipped {path: string, why: string}[] .json files of a directory left out without a warning: a summary
--- whose run log was read (cseng writes both), JSON that is not a summary (prewarm artifacts)

-- The files of an input: {path, in_dir}, logs (.jsonl) and summaries (.json) apart.
local function input_files(input, logs, summaries)
  local st, err, code = fs.stat(input)
  if not st then errors.raise(code or errors.ENOENT, tostring(err)) end -- the message names the path
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
    elseif name:match('%.json$') then summaries[#summaries + 1] = { path = fs.join(input, name), in_dir = true } end
  end
end

--- Group a list by a field name or a function: an array of {key=, items=} sorted by key (as
--- strings), plus .by[key] -> items. Items without a key are left out.
---@param list table[]
---@param key string|fun(item: table): any
---@return table
function helpers.group(list, key)
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
helpers.live_allocations = results.live_allocations

local function new_run(id, path)
  return { id = id, path = path, kind = '?', source = 'log', events = {}, trials = {}, startup_trials = {},
           environments = {}, rounds = {}, allocated = {}, destroyed = {}, cleanup_failed = {} }
end

--- Read a summary .json (cseng's or the seed harness's). Valid JSON that is not a summary (no
--- results[] array: a prewarm artifact, say) returns nil and the reason; an unreadable file,
--- invalid JSON or a results[] entry without task_id raises, naming the path.
---@param path string
---@return table|nil summary, string? why
function helpers.read_summary(path)
  local text, err, code = fs.read(path)
  if not text then errors.raise(code or errors.EIO, tostring(err)) end
  local s, derr = jsonl.decode(text)
  if s == nil then errors.raise(errors.EPARSE, path .. ': not valid JSON: ' .. tostring(derr)) end
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
---@param s table helpers.read_summary's result
---@param path string
---@return report.run
function helpers.summary_run(s, path)
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

--- Load results: each input is a run log (.jsonl), a summary (.json, cseng's or the seed's; see
--- helpers.summary_run) or a directory of both (not recursive). Logs are read first; a summary
--- of a run whose log was read is left out (data.skipped), and so is other JSON in a directory.
--- A malformed file named directly raises; inside a directory it is skipped with a warning. A
--- file given twice is read once.
---@param inputs string[]
---@return report.data
function helpers.load(inputs)
  local data = { inputs = {}, runs = {}, events = {}, trials = {}, startup_trials = {}, warnings = {}, skipped = {} }
  local by_id = {}
  local logs, summaries, seen = {}, {}, {}
  for _, input in ipairs(inputs) do input_files(input, logs, summaries) end
  for _, file in ipairs(logs) do
    local path, in_dir = file.path, file.in_dir
    if not seen[path] then
      seen[path] = true
      local ok, events = pcall(results.read, path)
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
      local ok, s, why = pcall(helpers.read_summary, path)
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
        local run = helpers.summary_run(s, path)
        if by_id[run.id] then run.id = run.id .. ' (' .. path .. ')' end
        by_id[run.id] = run
        data.inputs[#data.inputs + 1] = path
        data.runs[#data.runs + 1] = run
      end
    end
  end
  for _, run in ipairs(data.runs) do
    run.live = helpers.live_allocations(run.events)
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
  data.by_provider = helpers.group(data.trials, 'provider')
  data.by_mode = helpers.group(data.trials, 'mode')
  data.by_task = helpers.group(data.trials, 'task_id')
  return data
end

-- ---- formatting ---------------------------------------------------------------------------

local DASH = '–'

--- A number with `digits` decimals ('–' for nil, NaN or infinity).
---@param v number|nil
---@param digits? integer default 2
---@return string
function helpers.num(v, digits)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return DASH end
  return string.format('%.' .. (digits or 2) .. 'f', v)
end

--- Milliseconds with precision that suits their size: 1234, 123.4, 12.34, 1.234.
---@param v number|nil
---@return string
function helpers.ms(v)
  if v == nil or v ~= v then return DASH end
  local a = math.abs(v)
  if a >= 1000 then return string.format('%.0f', v) end
  if a >= 100 then return string.format('%.1f', v) end
  if a >= 10 then return string.format('%.2f', v) end
  return string.format('%.3f', v)
end

--- A fraction as a percentage: 0.9967 -> "99.7%", 1 -> "100%".
---@param f number|nil
---@return string
function helpers.pct(f)
  if f == nil or f ~= f then return DASH end
  if f == 1 then return '100%' end
  if f == 0 then return '0%' end
  return string.format('%.1f%%', f * 100)
end

--- An interval "[lo, hi]" with a formatter (default helpers.ms).
function helpers.ci(lo, hi, fmt)
  if lo == nil or hi == nil then return DASH end
  fmt = fmt or helpers.ms
  return '[' .. fmt(lo) .. ', ' .. fmt(hi) .. ']'
end

--- Bootstrap replicates of the reports' (and the console's) confidence intervals.
helpers.REPS = 2000

--- The ratio of medians slow/fast with its 95% percentile bootstrap CI (stats.ratio_ci,
--- helpers.REPS replicates, `seed`), over sorted copies: the interval does not depend on the
--- order the samples were recorded in, so the console and a report of the same run agree.
---@param slow number[]
---@param fast number[]
---@param seed integer
---@return stats.ratio|nil
function helpers.ratio_of_medians(slow, fast, seed)
  local a, b = util.copy(slow), util.copy(fast)
  table.sort(a)
  table.sort(b)
  return stats.ratio_ci(a, b, { reps = helpers.REPS, seed = seed })
end

--- The answer of a comparison, hyperfine's way: "fast is 1.23 x faster than slow [95% CI
--- 1.10, 1.37]", or "fast and slow are not distinguishable [95% CI 0.86, 1.30]" when the CI of
--- the ratio slow/fast holds 1 (r: helpers.ratio_of_medians).
---@param fast string
---@param slow string
---@param r stats.ratio
---@return string
function helpers.speedup(fast, slow, r)
  local ci = string.format('[95%% CI %s, %s]', helpers.num(r.lo, 2), helpers.num(r.hi, 2))
  if r.lo <= 1 and r.hi >= 1 then return string.format('%s and %s are not distinguishable %s', fast, slow, ci) end
  return string.format('%s is %s x faster than %s %s', fast, helpers.num(r.ratio, 2), slow, ci)
end

--- Escape text for a markdown table cell (pipes, newlines) or inline text. Text from a log is
--- text: no link or image (`](` is escaped, so `[x](javascript:...)` or `![b](https://...)`
--- stays literal) and no HTML tag.
function helpers.escape(s)
  s = tostring(s == nil and '' or s)
  -- "<" only where it could open an HTML tag, so code spans keep most text intact
  return (s:gsub('\r?\n', ' '):gsub('|', '\\|'):gsub('<([%a/!?])', '&lt;%1'):gsub('%]%(', ']\\('))
end

--- Inline code, safe for any content (uses a longer fence when the text holds backticks).
function helpers.code(s)
  s = tostring(s):gsub('\r?\n', ' ')
  local fence = '`'
  while s:find(fence, 1, true) do fence = fence .. '`' end
  local pad = (s:sub(1, 1) == '`' or s:sub(-1) == '`') and ' ' or ''
  return fence .. pad .. s .. pad .. fence
end

--- A markdown table. rows: arrays of cells (strings or numbers, escaped here unless a cell is
--- {raw=string}); align: one letter per column, l/r/c (default: first left, others right).
---@param headers string[]
---@param rows any[][]
---@param align? string
---@return string
function helpers.table(headers, rows, align)
  align = align or ('l' .. string.rep('r', #headers - 1))
  local function cell(v)
    if type(v) == 'table' and v.raw then return v.raw end
    return helpers.escape(v)
  end
  local out = {}
  local hs = {}
  for i, hd in ipairs(headers) do hs[i] = cell(hd) end
  out[1] = '| ' .. table.concat(hs, ' | ') .. ' |'
  local seps = {}
  for i = 1, #headers do
    local a = align:sub(i, i)
    seps[i] = a == 'r' and '---:' or a == 'c' and ':---:' or ':---'
  end
  out[2] = '| ' .. table.concat(seps, ' | ') .. ' |'
  for _, row in ipairs(rows) do
    local cs = {}
    for i = 1, #headers do cs[i] = cell(row[i] == nil and '' or row[i]) end
    out[#out + 1] = '| ' .. table.concat(cs, ' | ') .. ' |'
  end
  return table.concat(out, '\n') .. '\n'
end

--- The numbers of a field (or function) over a list, skipping nil and non-numbers.
---@param list table[]
---@param get string|fun(item: table): number|nil
---@param keep? fun(item: table): boolean
---@return number[]
function helpers.values(list, get, keep)
  local f = type(get) == 'function' and get or function(x) return x[get] end
  local out = {}
  for _, x in ipairs(list or {}) do
    if not keep or keep(x) then
      local v = f(x)
      if type(v) == 'number' and v == v then out[#out + 1] = v end
    end
  end
  return out
end

-- ---- SVG charts ---------------------------------------------------------------------------

local svg = {}
helpers.svg = svg

--- Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
svg.COLORS = { '#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#F0E442' }
local FONT = 'font-family="-apple-system,BlinkMacSystemFont,Segoe UI,Helvetica,Arial,sans-serif"'

local XML_ESCAPES = { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;', ["'"] = '&#39;' }

local function esc(s)
  return (tostring(s):gsub('[&<>"\']', XML_ESCAPES))
end
svg.escape = esc

local function r1(v) return string.format('%.1f', v) end

local function tick_label(v)
  if v == 0 then return '0' end
  local a = math.abs(v)
  if a >= 10000 then return string.format('%.0fk', v / 1000) end
  if a >= 1 then return string.format('%g', tonumber(string.format('%.4g', v))) end
  return string.format('%g', tonumber(string.format('%.2g', v)))
end

-- A scale over [lo, hi] of the data: log10 (1-2-5 ticks) or linear (nice ticks), mapped to [a, b].
local function scale(lo, hi, a, b, log)
  local s = { log = log }
  if log then
    local function nice_floor(v)
      local e = 10 ^ math.floor(math.log(v, 10) + 1e-9)
      for _, m in ipairs({ 5, 2, 1 }) do if m * e <= v * (1 + 1e-9) then return m * e end end
      return e
    end
    local function nice_ceil(v)
      local e = 10 ^ math.floor(math.log(v, 10) - 1e-9)
      for _, m in ipairs({ 1, 2, 5, 10 }) do if m * e >= v * (1 - 1e-9) then return m * e end end
      return 10 * e
    end
    s.lo, s.hi = nice_floor(lo), nice_ceil(hi)
    if s.hi <= s.lo then s.hi = s.lo * 2 end
    local l0, l1 = math.log(s.lo, 10), math.log(s.hi, 10)
    function s.map(v) return a + (math.log(math.max(v, s.lo), 10) - l0) / (l1 - l0) * (b - a) end
    s.ticks = {}
    local e = 10 ^ math.floor(l0 + 1e-9)
    while e <= s.hi * (1 + 1e-9) do
      for _, m in ipairs({ 1, 2, 5 }) do
        local v = m * e
        if v >= s.lo * (1 - 1e-9) and v <= s.hi * (1 + 1e-9) then s.ticks[#s.ticks + 1] = v end
      end
      e = e * 10
    end
    if #s.ticks > 12 then -- a wide range: powers of ten only, so the labels do not collide
      local thin = {}
      for _, v in ipairs(s.ticks) do
        local l = math.log(v, 10)
        if math.abs(l - math.floor(l + 0.5)) < 1e-9 then thin[#thin + 1] = v end
      end
      s.ticks = thin
    end
  else
    if hi <= lo then hi = lo + math.max(1, math.abs(lo) * 0.1) end
    local raw = (hi - lo) / 5
    local e = 10 ^ math.floor(math.log(raw, 10))
    local step = e
    for _, m in ipairs({ 1, 2, 2.5, 5, 10 }) do if m * e >= raw then step = m * e break end end
    s.lo = math.floor(lo / step) * step
    s.hi = math.ceil(hi / step) * step
    if lo >= 0 and s.lo < 0 then s.lo = 0 end
    function s.map(v) return a + (v - s.lo) / (s.hi - s.lo) * (b - a) end
    s.ticks = {}
    local v = s.lo
    while v <= s.hi + step * 1e-9 do s.ticks[#s.ticks + 1] = v; v = v + step end
  end
  return s
end

local function frame(w, h, title)
  return {
    string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s ' ..
      'font-size="12">', w, h, w, h, FONT),
    string.format('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>', w, h),
    title and string.format('<text x="16" y="22" font-size="14" font-weight="bold" fill="#222">%s</text>',
      esc(title)) or '',
  }
end

local function data_range(series)
  local lo, hi, n = math.huge, -math.huge, 0
  for _, s in ipairs(series) do
    for _, v in ipairs(s.values) do
      if v == v then n = n + 1; if v < lo then lo = v end; if v > hi then hi = v end end
    end
  end
  return lo, hi, n
end

local function x_axis(out, sx, x0, x1, y0, y1, label)
  for _, t in ipairs(sx.ticks) do
    local x = r1(sx.map(t))
    out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e5e5"/>', x, r1(y0), x, r1(y1))
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#444">%s</text>', x, r1(y1 + 16),
      tick_label(t))
  end
  out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888"/>', r1(x0), r1(y1), r1(x1), r1(y1))
  out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
    r1(y1 + 36), esc(label .. (sx.log and ' (log scale)' or '')))
end

local function legend(out, series, x, y, sub)
  for i, s in ipairs(series) do
    local yy = y + (i - 1) * 34
    out[#out + 1] = string.format('<rect x="%d" y="%d" width="14" height="14" fill="%s"/>', x, yy, s.color)
    out[#out + 1] = string.format('<text x="%d" y="%d" fill="#222">%s</text>', x + 20, yy + 11, esc(s.name))
    if sub then
      out[#out + 1] = string.format('<text x="%d" y="%d" fill="#666" font-size="11">%s</text>', x + 20, yy + 26,
        esc(sub(s)))
    end
  end
end

local function prepare_series(series)
  local out = {}
  for i, s in ipairs(series) do
    local vals = {}
    for _, v in ipairs(s.values or {}) do if type(v) == 'number' and v == v then vals[#vals + 1] = v end end
    table.sort(vals)
    out[i] = { name = s.name, values = vals, color = s.color or svg.COLORS[(i - 1) % #svg.COLORS + 1] }
  end
  return out
end

local function empty_chart(w, h, title, why)
  local out = frame(w, h, title)
  out[#out + 1] = string.format('<text x="%d" y="%d" text-anchor="middle" fill="#666">%s</text>', w // 2, h // 2,
    esc(why))
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

---@class svg.series
---@field name string
---@field values number[]
---@field color? string

---@class svg.chart_opts
---@field title? string
---@field xlabel? string
---@field width? integer
---@field height? integer
---@field log? boolean log x axis; default: when max/min >= 20

-- The frame and value scale of a chart over series' values in a W x H box with margins L, R,
-- T, B (log when opts.log, or by default when the values span 20x and are positive): returns
-- the SVG lines so far, the scale and the plot area, or the whole "no samples" chart alone.
local function value_axis(series, opts, W, H, L, R, T, B)
  local lo, hi, n = data_range(series)
  if n == 0 then return empty_chart(W, H, opts.title, 'no successful samples') end
  local log = opts.log
  if log == nil then log = lo > 0 and hi / lo >= 20 end
  if lo <= 0 then log = false end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  return frame(W, H, opts.title), scale(lo, hi, x0, x1, log), x0, x1, y0, y1
end

--- Empirical CDFs of several series on one chart (x: value, y: fraction of samples <= x), with
--- each median marked. Returns the SVG text.
---@param series svg.series[]
---@param opts? svg.chart_opts
---@return string
function svg.ecdf(series, opts)
  opts = opts or {}
  local W, H = opts.width or 820, opts.height or 380
  local L, R, T, B = 64, 260, 40, 56
  series = prepare_series(series)
  local out, sx, x0, x1, y0, y1 = value_axis(series, opts, W, H, L, R, T, B)
  if not sx then return out end
  local function sy(p) return y1 - p * (y1 - y0) end
  for _, p in ipairs({ 0, 0.25, 0.5, 0.75, 0.9, 1 }) do
    local y = r1(sy(p))
    out[#out + 1] = string.format('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>', x0, y, x1, y,
      p == 0.5 and '#bbbbbb' or '#eeeeee')
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#444">%d%%</text>', x0 - 6,
      r1(sy(p) + 4), math.floor(p * 100 + 0.5))
  end
  x_axis(out, sx, x0, x1, y0, y1, opts.xlabel or 'value')
  out[#out + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>', x0, y0, x0, y1)
  for _, s in ipairs(series) do
    local m = #s.values
    if m > 0 then
      -- at most ~800 steps per curve: beyond that, evenly spaced ranks (a chart, not the data)
      local stride = math.max(1, math.ceil(m / 800))
      local d = { 'M', r1(sx.map(s.values[1])), r1(sy(0)) }
      local i = 1
      while true do
        d[#d + 1] = 'V' .. r1(sy(i / m))
        if i >= m then break end
        local ni = math.min(m, i + stride)
        d[#d + 1] = 'H' .. r1(sx.map(s.values[ni]))
        if stride > 1 then i = ni else i = i + 1 end
      end
      out[#out + 1] = string.format('<path d="%s" fill="none" stroke="%s" stroke-width="2"/>', table.concat(d, ' '),
        s.color)
      local med = stats.quantile_sorted(s.values, 0.5)
      out[#out + 1] = string.format('<circle cx="%s" cy="%s" r="4" fill="%s" stroke="#fff"/>', r1(sx.map(med)),
        r1(sy(0.5)), s.color)
    end
  end
  legend(out, series, x1 + 20, y0, function(s)
    if #s.values == 0 then return 'no successful samples' end
    return string.format('n=%d, p50 %s ms, p99 %s ms', #s.values, helpers.ms(stats.quantile_sorted(s.values, 0.5)),
      helpers.ms(stats.quantile_sorted(s.values, 0.99)))
  end)
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

--- Horizontal box plots, one row per series: box p25..p75, line at the median, whiskers
--- p5..p95, dots at min and max. Returns the SVG text.
---@param series svg.series[]
---@param opts? svg.chart_opts
---@return string
function svg.box(series, opts)
  opts = opts or {}
  series = prepare_series(series)
  local W = opts.width or 820
  local row = 36
  local longest = 0
  for _, s in ipairs(series) do longest = math.max(longest, utf8.len(tostring(s.name)) or #tostring(s.name)) end
  local L, R, T, B = math.max(140, 16 + 7 * longest), 30, 40, 56
  local H = opts.height or (T + B + row * math.max(1, #series))
  local out, sx, x0, x1, y0, y1 = value_axis(series, opts, W, H, L, R, T, B)
  if not sx then return out end
  x_axis(out, sx, x0, x1, y0, y1, opts.xlabel or 'value')
  for i, s in ipairs(series) do
    local cy = y0 + (i - 0.5) * row
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#222">%s</text>', x0 - 8, r1(cy + 4),
      esc(s.name))
    if #s.values > 0 then
      local q = function(p) return sx.map(stats.quantile_sorted(s.values, p)) end
      out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>', r1(q(0.05)), r1(cy),
        r1(q(0.95)), r1(cy), s.color)
      out[#out + 1] = string.format(
        '<rect x="%s" y="%s" width="%s" height="%d" fill="%s" fill-opacity="0.25" stroke="%s"/>',
        r1(q(0.25)), r1(cy - 10), r1(math.max(1, q(0.75) - q(0.25))), 20, s.color, s.color)
      out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>',
        r1(q(0.5)), r1(cy - 10),
        r1(q(0.5)), r1(cy + 10), s.color)
      for _, v in ipairs({ s.values[1], s.values[#s.values] }) do
        out[#out + 1] = string.format('<circle cx="%s" cy="%s" r="2.5" fill="%s"/>', r1(sx.map(v)), r1(cy), s.color)
      end
    end
  end
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

---@class svg.bars_opts: svg.chart_opts
---@field ylabel? string
---@field unit? string appended to the values in the bars' tooltips

-- The series of a bar chart with their colours, the largest finite value, and whether any is.
local function bar_series(categories, series)
  local ser, hi, any = {}, 0, false
  for i, s in ipairs(series) do
    ser[i] = { name = s.name, values = s.values or {}, color = s.color or svg.COLORS[(i - 1) % #svg.COLORS + 1] }
    for j = 1, #categories do
      local v = ser[i].values[j]
      if type(v) == 'number' and v == v and v ~= math.huge then any = true; hi = math.max(hi, v) end
    end
  end
  return ser, hi, any
end

--- Grouped vertical bars: one group per category along x, one bar per series in each group;
--- series[i].values[j] is series i's value in category j (nil or NaN: no bar). The y axis is
--- linear from 0; each bar carries a tooltip with its exact value. Returns the SVG text.
---@param categories string[]
---@param series svg.series[] values aligned with categories
---@param opts? svg.bars_opts
---@return string
function svg.bars(categories, series, opts)
  opts = opts or {}
  -- many categories, or labels wider than their group: horizontal bars, labels on the left
  local widest = 0
  for _, c in ipairs(categories) do widest = math.max(widest, #tostring(c)) end
  if opts.horizontal or (opts.horizontal == nil and (#categories > 12
      or widest * 7 > ((opts.width or 820) - 324) / math.max(1, #categories) * 2)) then
    return svg.hbars(categories, series, opts)
  end
  local W, H = opts.width or 820, opts.height or 380
  local L, R, T, B = 64, 260, 40, 64
  local ser, hi, any = bar_series(categories, series)
  if not any or #categories == 0 then return empty_chart(W, H, opts.title, 'no data') end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  local sy = scale(0, hi, y1, y0, false)
  local out = frame(W, H, opts.title)
  for _, t in ipairs(sy.ticks) do
    local y = r1(sy.map(t))
    out[#out + 1] = string.format('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>', x0, y, x1, y,
      t == 0 and '#888' or '#eeeeee')
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#444">%s</text>', x0 - 6,
      r1(sy.map(t) + 4), tick_label(t))
  end
  if opts.ylabel then
    out[#out + 1] = string.format('<text x="16" y="%s" text-anchor="middle" fill="#222" transform="rotate(-90 16 %s)">%s</text>',
      r1((y0 + y1) / 2), r1((y0 + y1) / 2), esc(opts.ylabel))
  end
  local gw = (x1 - x0) / #categories
  local bw = gw * 0.8 / math.max(1, #ser)
  local stagger = false -- labels wider than their group alternate between two rows
  for _, c in ipairs(categories) do if #tostring(c) * 7 > gw then stagger = true end end
  for j, c in ipairs(categories) do
    local gx = x0 + (j - 1) * gw
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1(gx + gw / 2),
      r1(y1 + ((stagger and j % 2 == 0) and 30 or 16)), esc(c))
    for i, s in ipairs(ser) do
      local v = s.values[j]
      if type(v) == 'number' and v == v and v ~= math.huge then
        local top = sy.map(math.max(0, v))
        out[#out + 1] = string.format('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>',
          r1(gx + gw * 0.1 + (i - 1) * bw), r1(top), r1(math.max(1, bw - 1)), r1(math.max(0.5, y1 - top)), s.color,
          esc(string.format('%s, %s: %.4g%s', s.name, c, v, opts.unit or '')))
      end
    end
  end
  if opts.xlabel then
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
      r1(y1 + (stagger and 48 or 36)), esc(opts.xlabel))
  end
  legend(out, ser, x1 + 20, y0)
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

--- Grouped horizontal bars: one row group per category down the y axis (its label on the left,
--- in full), one bar per series; the height grows with the categories, so 26 or 500 tasks stay
--- readable. Same arguments as svg.bars (which calls this when categories are many or long).
---@param categories string[]
---@param series svg.series[]
---@param opts? svg.bars_opts
---@return string
function svg.hbars(categories, series, opts)
  opts = opts or {}
  local widest = 0
  for _, c in ipairs(categories) do widest = math.max(widest, #tostring(c)) end
  local ser, hi, any = bar_series(categories, series)
  local bh = 12                               -- one bar's height
  local gh = bh * math.max(1, #ser) + 8       -- a category's group
  local L = math.min(420, 16 + widest * 7)    -- room for the labels
  local W = opts.width or math.max(820, L + 560)
  local R, T, B = 260, 40, 56
  local H = T + B + gh * math.max(1, #categories)
  if not any or #categories == 0 then return empty_chart(W, opts.height or 380, opts.title, 'no data') end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  local sx = scale(0, hi, x0, x1, false)
  local out = frame(W, H, opts.title)
  for _, t in ipairs(sx.ticks) do
    local x = r1(sx.map(t))
    out[#out + 1] = string.format('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>', x, y0, x, y1,
      t == 0 and '#888' or '#eeeeee')
    out[#out + 1] = string.format('<text x="%s" y="%d" text-anchor="middle" fill="#444">%s</text>', x, y1 + 16, tick_label(t))
  end
  for j, c in ipairs(categories) do
    local gy = y0 + (j - 1) * gh
    local label = tostring(c)
    if #label * 7 > L - 12 then label = label:sub(1, (L - 12) // 7 - 1) .. '…' end
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#222">%s<title>%s</title></text>', x0 - 6,
      r1(gy + gh / 2 + 4), esc(label), esc(c))
    for i, sr in ipairs(ser) do
      local v = sr.values[j]
      if type(v) == 'number' and v == v and v ~= math.huge then
        out[#out + 1] = string.format('<rect x="%d" y="%s" width="%s" height="%d" fill="%s"><title>%s</title></rect>',
          x0, r1(gy + 4 + (i - 1) * bh), r1(math.max(0.5, sx.map(math.max(0, v)) - x0)), bh - 1, sr.color,
          esc(string.format('%s, %s: %.4g%s', sr.name, c, v, opts.unit or '')))
      end
    end
  end
  local xl = opts.ylabel or opts.xlabel -- the value axis is x here
  if xl then
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
      r1(y1 + 36), esc(xl))
  end
  legend(out, ser, x1 + 20, y0)
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

-- ---- templates --------------------------------------------------------------------------

--- Where a template lives: a path (relative to the current directory, else to the cseng tree),
--- or a bare name from lua/reports/ ("startup").
---@param name string
---@return string
function helpers.template_path(name)
  if fs.exists(name) then return name end
  local in_tree = fs.join(sys.root(), name)
  if fs.exists(in_tree) then return in_tree end
  local by_name = fs.join(sys.root(), 'lua/reports/' .. name:gsub('%.lua$', '') .. '.lua')
  if not name:find('/') and fs.exists(by_name) then return by_name end
  errors.raise(errors.ENOENT, 'report template not found: ' .. name)
end

--- The helpers a template receives; `output` decides where charts go.
---@param output string the markdown path ("-" for stdout: charts go to the current directory)
---@return table h
function helpers.context(output)
  local h = setmetatable({ files = {}, output = output, stats = stats, util = util }, { __index = helpers })
  local dir = output == '-' and '.' or util.dirname(output)
  local stem = output == '-' and 'report' or util.basename(output):gsub('%.md$', '')
  --- Keep an SVG to write beside the markdown; returns the markdown image link.
  function h.chart(name, svg_text, alt)
    local file = stem .. '.' .. name:gsub('[^%w%-_.]', '-') .. '.svg'
    h.files[#h.files + 1] = { path = fs.join(dir, file), content = svg_text }
    return string.format('![%s](%s)', (alt or name):gsub('[%[%]]', ''), file)
  end
  return h
end

---@class report.render_opts
---@field inputs? string[] run logs (.jsonl files or directories)
---@field data? report.data already loaded
---@field template string a path or a name from lua/reports/
---@field output string markdown path, or "-" for stdout

--- Load, run the template, write the markdown and its charts. Returns {output, files, markdown}.
---@param opts report.render_opts
---@return table
function helpers.render(opts)
  local data = opts.data or helpers.load(opts.inputs)
  local path = helpers.template_path(opts.template)
  local chunk, err = loadfile(path)
  if not chunk then errors.raise(errors.EPLAN, err) end
  local fn = chunk()
  if type(fn) ~= 'function' then errors.raise(errors.EPLAN, path .. ': a report template must return function(data, helpers)') end
  local h = helpers.context(opts.output)
  local md = fn(data, h)
  if type(md) ~= 'string' then errors.raise(errors.EPLAN, path .. ': the template returned ' .. type(md) .. ', not a string') end
  local written = {}
  for _, f in ipairs(h.files) do
    errors.check(nil, fs.mkdir_p(util.dirname(f.path)))
    local ok, werr = fs.write(f.path, f.content)
    if not ok then errors.raise(errors.EIO, 'cannot write ' .. f.path .. ': ' .. tostring(werr)) end
    written[#written + 1] = f.path
  end
  if opts.output == '-' then
    io.stdout:write(md)
  else
    errors.check(nil, fs.mkdir_p(util.dirname(opts.output)))
    local ok, werr = fs.write(opts.output, md)
    if not ok then errors.raise(errors.EIO, 'cannot write ' .. opts.output .. ': ' .. tostring(werr)) end
  end
  return { output = opts.output, files = written, markdown = md, warnings = data.warnings }
end

return helpers
