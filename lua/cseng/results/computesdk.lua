--- computesdk's result files (their benchmark's `results/<mode>_tti/latest.json`), both ways:
--- written from a startup (arena) run log for `cseng export --format computesdk`, and read back
--- for `cseng compare`, so a cseng run and theirs sit side by side.
---
--- Their file (`version` "1.1", described by their results/schema.json): `timestamp`,
--- `environment`, `config`, and per provider (and mode) `iterations` ({ttiMs} or {error}),
--- `summary.ttiMs` {median, p95, p99}, `compositeScore`, `successRate`; a burst adds
--- `mode = "concurrent"`, `concurrency`, `wallClockMs`, `timeToFirstReadyMs`; a staggered run adds
--- `staggerDelayMs` and `rampProfile`. Their statistics are stats.computesdk; their numbers are
--- rounded to two decimals as their writer rounds them (Math.round(x * 100) / 100), and the
--- summary and score are computed from the rounded iteration times, so the file reproduces from
--- itself with their own code.
---
--- Two shapes (computesdk.SHAPES): `v1.1` is their writer's file, one mode per file (what their
--- `<mode>_tti/latest.json` holds); `schema` is the richer file their schema allows: every mode
--- of the input in one file, min/max/avg and createMs/firstExecMs metrics, and per iteration
--- the sandbox's start time, phases, error code and stage. Both keep each iteration's sandbox
--- id (`sandboxId`: their readers ignore a key they do not know, their schema has room for it).
---
--- What cseng adds to their method: samples that a fidelity audit failed (`audit.ok == false` in
--- the log) are never pooled into the statistics; they are iterations with an `error` naming the
--- audit's labels, so they count against the success rate as their own harness counts a reused
--- sandbox. A failed iteration never carries a time (their older files wrote `ttiMs: 0`).
---
--- Reading is for files from anywhere (hostile input): every field is checked and a bad one is a
--- one-line EPARSE naming the file and the field (`latest.json: results[3].iterations[7].ttiMs:
--- expected a number in [0, 604800000], got "fast"`).
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local stats = require('cseng.lib.stats')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')

local computesdk = {}

computesdk.SHAPES = { 'v1.1', 'schema' }
computesdk.VERSION = '1.1'

--- cseng's arena modes -> theirs: lockstep (one sandbox at a time per provider, providers side
--- by side, as their per-provider jobs run) and sequential are their sequential; a burst is
--- their "concurrent".
computesdk.MODE_OF = { lockstep = 'sequential', sequential = 'sequential', burst = 'concurrent', staggered = 'staggered' }
--- Theirs -> cseng's (a file's "burst" is their merge script's name for "concurrent").
computesdk.CSENG_MODE = { sequential = 'sequential', concurrent = 'burst', burst = 'burst', staggered = 'staggered' }
--- The folder their files live in, by their mode.
computesdk.DIR_OF = { sequential = 'sequential_tti', concurrent = 'burst_tti', staggered = 'staggered_tti' }

local MAX_MS = 7 * 86400 * 1000 -- a time past a week is not a sandbox's start
local MAX_TEXT = 500            -- an error message, cut
local MAX_BYTES = 256 * 1024 * 1024

--- Their rounding: Math.round(x * 100) / 100 (half-way cases up).
---@param x number
---@return number
function computesdk.round2(x) return math.floor(x * 100 + 0.5) / 100 end
local round2 = computesdk.round2

-- ---- an ordered JSON document ------------------------------------------------------------

local ORDER = setmetatable({}, { __mode = 'k' })

-- An object whose members are written in the order given (key, value, ...); nil values are left out.
local function obj(...)
  local t, order, args = {}, {}, table.pack(...)
  for i = 1, args.n, 2 do
    local k, v = args[i], args[i + 1]
    if v ~= nil then t[k] = v; order[#order + 1] = k end
  end
  ORDER[t] = order
  return t
end

local function encode(v, indent, out)
  if type(v) ~= 'table' then out[#out + 1] = jsonl.encode(v) return end
  local pad, inner = string.rep('  ', indent), string.rep('  ', indent + 1)
  local order = ORDER[v]
  if not order and (getmetatable(v) == jsonl.array_mt or #v > 0) then
    if #v == 0 then out[#out + 1] = '[]' return end
    out[#out + 1] = '[\n'
    for i, x in ipairs(v) do
      out[#out + 1] = inner
      encode(x, indent + 1, out)
      out[#out + 1] = i < #v and ',\n' or '\n'
    end
    out[#out + 1] = pad .. ']'
    return
  end
  if not order then
    order = {}
    for k in pairs(v) do order[#order + 1] = k end
    table.sort(order)
  end
  if #order == 0 then out[#out + 1] = '{}' return end
  out[#out + 1] = '{\n'
  for i, k in ipairs(order) do
    out[#out + 1] = inner .. jsonl.encode(tostring(k)) .. ': '
    encode(v[k], indent + 1, out)
    out[#out + 1] = i < #order and ',\n' or '\n'
  end
  out[#out + 1] = pad .. '}'
end

--- The document as JSON text, two-space indented as their writer's JSON.stringify(x, null, 2),
--- members in their order.
---@param doc table
---@return string
function computesdk.encode(doc)
  local out = {}
  encode(doc, 0, out)
  return table.concat(out) .. '\n'
end

-- ---- writing ----------------------------------------------------------------------------

local function cut(s)
  s = tostring(s)
  if #s > MAX_TEXT then s = s:sub(1, MAX_TEXT) .. '...' end
  return s
end

local function bad_log(rec, path, what)
  errors.raise(errors.EPARSE, string.format('%s: startup_trial: %s', results.where(rec) or path, what))
end

local function num_or_nil(x) return type(x) == 'number' and x == x and x >= 0 and x <= MAX_MS and x or nil end

-- A measured sample: not a warmup, not cut short by an interrupt (the arena's own statistics
-- leave both out).
local function measured(t)
  return t.warmup ~= true and t.phase ~= 'warmup' and t.interrupted ~= true
end

-- The audit's verdict on a sample: nil (no audit), or the list of its labels when it failed.
local function audit_failed(t, path)
  local a = t.audit
  if a == nil then return nil end
  if type(a) ~= 'table' or type(a.ok) ~= 'boolean' then bad_log(t, path, 'audit: expected {ok = true|false, labels = [...]}') end
  if a.ok then return nil end
  local labels = {}
  if a.labels ~= nil and type(a.labels) ~= 'table' then bad_log(t, path, 'audit.labels: expected a list of strings') end
  for i, l in ipairs(a.labels or {}) do
    if type(l) ~= 'string' then bad_log(t, path, string.format('audit.labels[%d]: expected a string', i)) end
    labels[#labels + 1] = l
  end
  if #labels == 0 then labels[1] = 'unlabelled' end
  return labels
end

local function error_text(t)
  local msg = t.error ~= nil and cut(t.error) or 'failed'
  local code, stage = t.error_code, t.error_stage
  if type(code) == 'string' and code ~= '' then
    msg = code .. (type(stage) == 'string' and (' at ' .. stage) or '') .. ': ' .. msg
  end
  return msg
end

-- One sample as an iteration, with what it contributes: {it (the iteration), tti (its rounded
-- time when it is a clean success), excluded (the audit's labels)}.
local function iteration(t, path, shape)
  local labels = audit_failed(t, path)
  local sid = type(t.sandbox_id) == 'string' and t.sandbox_id or nil
  local it, tti
  if labels then
    it = obj('error', 'excluded by cseng\'s fidelity audit: ' .. table.concat(labels, ', '), 'sandboxId', sid)
  elseif t.ok == true then
    local r = num_or_nil(t.ready_ms)
    if not r then bad_log(t, path, string.format('a successful sample without a ready_ms in [0, %d] (sandbox %s)', MAX_MS, tostring(sid))) end
    tti = round2(r)
    it = obj('ttiMs', tti, 'sandboxId', sid)
  else
    it = obj('error', error_text(t), 'sandboxId', sid)
  end
  if shape == 'schema' then
    local o = ORDER[it]
    local function add(k, v) if v ~= nil then it[k] = v; o[#o + 1] = k end end
    add('startedAt', type(t.started_at) == 'string' and t.started_at or nil)
    add('block', math.tointeger(t.block))
    add('round', math.tointeger(t.round))
    if tti then
      add('createMs', num_or_nil(t.create_ms) and round2(t.create_ms))
      add('firstExecMs', num_or_nil(t.first_exec_ms) and round2(t.first_exec_ms))
    end
    if not tti and not labels then
      add('errorCode', type(t.error_code) == 'string' and t.error_code or nil)
      add('errorStage', type(t.error_stage) == 'string' and t.error_stage or nil)
    end
    if labels then add('excluded', true); add('auditLabels', labels) end
  end
  return { it = it, tti = tti, excluded = labels, t = t }
end

-- The summary metric of values their way: trimmed median, nearest-rank p95/p99 (and in the
-- schema shape min, max, mean of the untrimmed values). Zeros when there is none, as their own
-- files write it for a run whose every iteration has an error: never read as a time.
local function metric(values, full)
  if #values == 0 then return obj('median', 0, 'p95', 0, 'p99', 0) end
  local c = stats.computesdk(values, #values)
  if not full then return obj('median', round2(c.median), 'p95', round2(c.p95), 'p99', round2(c.p99)) end
  local s = stats.summary(values)
  return obj('median', round2(c.median), 'p95', round2(c.p95), 'p99', round2(c.p99), 'min', round2(s.min),
    'max', round2(s.max), 'avg', round2(s.mean))
end

-- The mode figures of a provider's batches (one per block): wall clock from the first create to
-- the last ready sandbox, time from the first create to the first ready one (median over
-- blocks), and the ramp (launch offset in the block, when ready, TTI) of the clean successes.
local function profile(items)
  local by_block = {}
  for _, x in ipairs(items) do
    local b = math.tointeger(x.t.block) or 1
    by_block[b] = by_block[b] or {}
    table.insert(by_block[b], x)
  end
  local walls, firsts, ramp = {}, {}, {}
  for _, list in pairs(by_block) do
    local first
    for _, x in ipairs(list) do
      local s = num_or_nil(x.t.start_t_ms)
      if s and (not first or s < first) then first = s end
    end
    local last_ready, first_ready
    for _, x in ipairs(list) do
      local s, r = num_or_nil(x.t.start_t_ms), num_or_nil(x.t.ready_t_ms)
      if x.tti and first and s then
        local launched = s - first
        local ready = r and (r - first) or (launched + x.tti)
        ramp[#ramp + 1] = { launched, ready, x.tti }
        if not last_ready or ready > last_ready then last_ready = ready end
        if not first_ready or ready < first_ready then first_ready = ready end
      end
    end
    if last_ready then walls[#walls + 1] = last_ready; firsts[#firsts + 1] = first_ready end
  end
  if #walls == 0 then return nil end
  table.sort(ramp, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
  local out = jsonl.array()
  for i, p in ipairs(ramp) do out[i] = obj('launchedAt', round2(p[1]), 'readyAt', round2(p[2]), 'ttiMs', p[3]) end
  return { wall = round2(stats.median(walls)), first = round2(stats.median(firsts)), ramp = out }
end

-- The startup runs of the given logs: {path, started, trials}.
local function runs_of(paths)
  local out = {}
  for _, path in ipairs(paths) do
    local by = {}
    for _, e in ipairs(results.read(path)) do
      if type(e) == 'table' and e.event == 'run_started' and not by[e.run_id or path] then
        local run = { path = path, started = e, trials = {} }
        by[e.run_id or path] = run
        out[#out + 1] = run
      elseif type(e) == 'table' and e.event == 'run_finished' and by[e.run_id or path] then
        by[e.run_id or path].finished = e
      elseif type(e) == 'table' and e.event == 'startup_trial' then
        local run = by[e.run_id or path]
        if not run then errors.raise(errors.ENOTRUN, path .. ': a startup_trial before its run_started; not a cseng run log') end
        run.trials[#run.trials + 1] = e
      end
    end
    if next(by) == nil then errors.raise(errors.ENOTRUN, path .. ': no run_started event; not a cseng run log') end
  end
  for _, run in ipairs(out) do
    if run.started.kind ~= 'startup' then
      errors.raise(errors.ENOTRUN, string.format('%s: run %s is a %s run; --format computesdk exports startup (arena) runs',
        run.path, tostring(run.started.run_id), tostring(run.started.kind or 'tasks')))
    end
  end
  return out
end

---@class computesdk.export_opts
---@field shape? string 'v1.1' (default) | 'schema'
---@field mode? string keep only the samples of this cseng mode (lockstep, sequential, burst, staggered)

--- Their result document of the startup run logs at paths (see the header). A provider in one
--- mode in two runs is refused (their file has one entry per provider and mode), and so is a
--- v1.1 file of several modes (name one with opts.mode). Returns the document and a table of
--- counts {results, iterations, excluded}.
---@param paths string[]
---@param opts? computesdk.export_opts
---@return table doc, table counts
function computesdk.export(paths, opts)
  opts = opts or {}
  local shape = opts.shape or 'v1.1'
  if shape ~= 'v1.1' and shape ~= 'schema' then errors.raise(errors.EUSAGE, 'unknown computesdk shape ' .. tostring(shape)) end
  local runs = runs_of(paths)
  local entries, modes_seen = {}, {}
  for _, run in ipairs(runs) do
    local mode = run.started.mode or 'lockstep'
    if not computesdk.MODE_OF[mode] then
      errors.raise(errors.EPARSE, string.format('%s: run %s: mode %q is not an arena mode', run.path, tostring(run.started.run_id), tostring(mode)))
    end
    modes_seen[mode] = true
    if not opts.mode or opts.mode == mode then
      for _, t in ipairs(run.trials) do
        if measured(t) then
          if type(t.provider) ~= 'string' or t.provider == '' then bad_log(t, run.path, 'no provider') end
          local key = t.provider .. '\0' .. computesdk.MODE_OF[mode]
          local e = entries[key]
          if e and e.run ~= run then
            errors.raise(errors.EUSAGE, string.format('provider %s in mode %s is in two runs (%s, %s): export them one at a time',
              t.provider, computesdk.MODE_OF[mode], tostring(e.run.started.run_id), tostring(run.started.run_id)))
          end
          if not e then
            e = { provider = t.provider, mode = mode, run = run, samples = {} }
            entries[key] = e
          end
          e.samples[#e.samples + 1] = t
        end
      end
    end
  end
  if opts.mode and not modes_seen[opts.mode] then
    errors.raise(errors.EUSAGE, string.format('no run of mode %s among the inputs (they hold: %s)', opts.mode,
      table.concat(util.keys(modes_seen), ', ')))
  end
  local keys = util.keys(entries)
  if shape == 'v1.1' then
    local theirs = {}
    for _, k in ipairs(keys) do theirs[computesdk.MODE_OF[entries[k].mode]] = entries[k].mode end
    if #util.keys(theirs) > 1 then
      errors.raise(errors.EUSAGE, string.format('a v1.1 file holds one mode and the inputs hold several (%s): name one with --mode, '
        .. 'or write --shape schema', table.concat(util.keys(modes_seen), ', ')))
    end
  end
  local list = jsonl.array()
  local counts = { results = 0, iterations = 0, excluded = 0 }
  for _, k in ipairs(keys) do
    local e = entries[k]
    local st = e.run.started
    local samples = e.samples
    -- launch order: per block, by when the create left (the log holds them in finishing order)
    local idx = {}
    for i, t in ipairs(samples) do idx[t] = i end
    table.sort(samples, function(a, b)
      local ba, bb = math.tointeger(a.block) or 1, math.tointeger(b.block) or 1
      if ba ~= bb then return ba < bb end
      local sa, sb = num_or_nil(a.start_t_ms), num_or_nil(b.start_t_ms)
      if sa and sb and sa ~= sb then return sa < sb end
      return idx[a] < idx[b]
    end)
    local items, iters, clean, creates, execs, labels = {}, jsonl.array(), {}, {}, {}, {}
    local excluded, failed = 0, 0
    for _, t in ipairs(samples) do
      local x = iteration(t, e.run.path, shape)
      items[#items + 1] = x
      iters[#iters + 1] = x.it
      if x.tti then
        clean[#clean + 1] = x.tti
        if num_or_nil(t.create_ms) then creates[#creates + 1] = round2(t.create_ms) end
        if num_or_nil(t.first_exec_ms) then execs[#execs + 1] = round2(t.first_exec_ms) end
      elseif x.excluded then
        excluded = excluded + 1
        for _, l in ipairs(x.excluded) do labels[l] = (labels[l] or 0) + 1 end
      else
        failed = failed + 1
      end
    end
    local c = stats.computesdk(clean, #iters)
    local theirs = computesdk.MODE_OF[e.mode]
    local prof = (theirs ~= 'sequential') and profile(items) or nil
    local summary
    if shape == 'schema' then
      summary = obj('ttiMs', metric(clean, true), 'createMs', #creates > 0 and metric(creates, true) or nil,
        'firstExecMs', #execs > 0 and metric(execs, true) or nil)
    else
      summary = obj('ttiMs', metric(clean, false))
    end
    -- their legacy writer drops the burst/staggered tag when the profile cannot be rebuilt (no
    -- success): the v1.1 file does the same; the schema shape keeps the mode
    local tag = (theirs == 'sequential' or prof or shape == 'schema') and theirs or nil
    local r = obj('provider', e.provider, 'mode', tag)
    local order = ORDER[r]
    local function add(key, v) if v ~= nil then r[key] = v; order[#order + 1] = key end end
    if prof and theirs == 'concurrent' then
      add('concurrency', math.tointeger(st.burst) or #iters)
      add('wallClockMs', prof.wall)
      add('timeToFirstReadyMs', prof.first)
    elseif prof and theirs == 'staggered' then
      add('concurrency', math.tointeger(st.samples) or #iters)
      add('staggerDelayMs', type(st.stagger_ms) == 'number' and st.stagger_ms or nil)
      add('wallClockMs', prof.wall)
      add('timeToFirstReadyMs', prof.first)
      add('rampProfile', prof.ramp)
    end
    add('iterations', iters)
    add('summary', summary)
    add('compositeScore', round2(c.score))
    add('successRate', round2(c.success_rate))
    if shape == 'schema' then
      add('cseng', obj('runId', st.run_id, 'mode', e.mode, 'attempts', #iters, 'successes', #clean, 'failed', failed,
        'excluded', excluded, 'auditLabels', next(labels) and labels or nil, 'trimmedEachEnd', c.trimmed))
    end
    list[#list + 1] = r
    counts.results, counts.iterations, counts.excluded = counts.results + 1, counts.iterations + #iters, counts.excluded + excluded
  end
  -- when the file was produced: the latest run's end (else its start)
  local stamp, first_run = nil, runs[1]
  for _, run in ipairs(runs) do
    local t = (run.finished and run.finished.time) or run.started.time
    if type(t) == 'string' and (not stamp or t > stamp) then stamp = t end
  end
  local st = first_run.started
  local versions = type(st.versions) == 'table' and st.versions or {}
  local environment = obj('runner', 'cseng', 'cseng', versions.cseng, 'host', type(st.host) == 'string' and st.host or nil,
    'cpuCount', math.tointeger(st.cpu_count))
  local timeout = type(st.timeout_seconds) == 'number' and math.floor(st.timeout_seconds * 1000 + 0.5) or nil
  local config
  if shape == 'schema' then
    local rl = jsonl.array()
    for _, run in ipairs(runs) do
      local s = run.started
      rl[#rl + 1] = obj('runId', s.run_id, 'mode', s.mode, 'samples', s.samples, 'warmups', s.warmups, 'repeats', s.repeats,
        'burst', s.burst, 'staggerMs', s.stagger_ms, 'seed', s.seed, 'command', s.command, 'label', s.label)
    end
    config = obj('iterations', list[1] and #list[1].iterations or 0, 'timeoutMs', timeout, 'source', 'cseng', 'shape', 'schema',
      'auditExcluded', 'samples a fidelity audit failed are iterations with an error, never pooled', 'runs', rl)
  else
    config = obj('iterations', list[1] and #list[1].iterations or 0, 'timeoutMs', timeout)
  end
  local doc = obj('version', computesdk.VERSION, 'timestamp', stamp or '1970-01-01T00:00:00Z', 'environment', environment,
    'config', config, 'results', list)
  return doc, counts
end

-- ---- reading ----------------------------------------------------------------------------

--- Whether a decoded JSON document is one of their result files rather than a cseng summary or
--- the seed's: a `version` and a `results` member, no cseng run id, no task count.
---@param doc any
---@return boolean
function computesdk.detect(doc)
  return type(doc) == 'table' and doc.version ~= nil and doc.results ~= nil and doc.run_id == nil
    and doc.task_count == nil and doc.kind == nil
end

local function describe(v)
  if type(v) == 'string' then return string.format('%q', #v > 60 and (v:sub(1, 60) .. '...') or v) end
  if v == jsonl.null then return 'null' end
  if type(v) == 'table' then return (#v > 0 or getmetatable(v) == jsonl.array_mt) and 'a list' or 'an object' end
  return tostring(v)
end

local function is_list(v) return type(v) == 'table' and (getmetatable(v) == jsonl.array_mt or #v > 0 or next(v) == nil) end
local function is_object(v) return type(v) == 'table' and #v == 0 and getmetatable(v) ~= jsonl.array_mt end

-- a name read from a file: printable, short, no control characters
local function name_ok(s) return type(s) == 'string' and #s >= 1 and #s <= 100 and not s:find('[%c]') and utf8.len(s) ~= nil end

---@class computesdk.iteration
---@field tti_ms number|nil the time of a successful iteration
---@field error string|nil why it failed (a failed iteration has no time, whatever the file said)
---@field sandbox_id string|nil

---@class computesdk.result
---@field provider string
---@field mode string cseng's name of the mode (sequential, burst, staggered)
---@field their_mode string theirs (sequential, concurrent, staggered)
---@field skipped boolean
---@field iterations computesdk.iteration[]
---@field summary table|nil their published summary.ttiMs {median, p95, p99}
---@field composite_score number|nil as published
---@field success_rate number|nil as published
---@field cseng_mode string|nil a file cseng wrote in the schema shape: the arena mode it ran

--- Read one of their result files (hostile input: every field checked). Raises EPARSE naming
--- the file and the field, ENOTRUN for a file that is not theirs or not a sandbox TTI file.
--- A result without a mode takes it from the file's folder (sequential_tti, burst_tti,
--- staggered_tti), else sequential, as their merge script does.
---@param path string
---@param doc? table the decoded document, when the caller has it
---@return {path: string, version: string, timestamp: string, environment: table|nil, results: computesdk.result[]}
function computesdk.read(path, doc)
  local function bad(field, want, v)
    errors.raise(errors.EPARSE, string.format('%s: %s: expected %s, got %s', path, field, want, describe(v)))
  end
  if doc == nil then
    local st = fs.stat(path)
    if st and st.size and st.size > MAX_BYTES then
      errors.raise(errors.EFBIG, string.format('%s: %d bytes, over the %d a result file may have', path, st.size, MAX_BYTES))
    end
    local text, err, code = fs.read(path)
    if not text then errors.raise(code or errors.EIO, tostring(err)) end
    local derr
    doc, derr = jsonl.decode(text)
    if doc == nil then errors.raise(errors.EPARSE, path .. ': not valid JSON: ' .. tostring(derr)) end
  end
  if not is_object(doc) then errors.raise(errors.ENOTRUN, path .. ': not a computesdk result file (not a JSON object)') end
  if type(doc.version) ~= 'string' then bad('version', 'a string', doc.version) end
  if type(doc.timestamp) ~= 'string' or not doc.timestamp:match('^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d') then
    bad('timestamp', 'an ISO 8601 date-time', doc.timestamp)
  end
  if doc.environment ~= nil and not is_object(doc.environment) then bad('environment', 'an object', doc.environment) end
  if doc.config ~= nil and not is_object(doc.config) then bad('config', 'an object', doc.config) end
  if not is_list(doc.results) then bad('results', 'a list', doc.results) end
  local folder = util.basename((path:gsub('/[^/]*$', ''))) or ''
  local dir_mode = ({ sequential_tti = 'sequential', burst_tti = 'concurrent', staggered_tti = 'staggered' })[folder]
  local out = { path = path, version = doc.version, timestamp = doc.timestamp, environment = doc.environment, results = {} }
  local seen = {}
  for i, r in ipairs(doc.results) do
    local at = string.format('results[%d]', i)
    if not is_object(r) then bad(at, 'an object', r) end
    if not name_ok(r.provider) then bad(at .. '.provider', 'a name (1 to 100 printable characters)', r.provider) end
    if r.mode ~= nil and not computesdk.CSENG_MODE[r.mode] then
      bad(at .. '.mode', 'sequential, staggered, concurrent or burst (a sandbox TTI file)', r.mode)
    end
    if r.skipped ~= nil and type(r.skipped) ~= 'boolean' then bad(at .. '.skipped', 'true or false', r.skipped) end
    if r.skipReason ~= nil and type(r.skipReason) ~= 'string' then bad(at .. '.skipReason', 'a string', r.skipReason) end
    local theirs = r.mode or dir_mode or 'sequential'
    if theirs == 'burst' then theirs = 'concurrent' end
    local res = { provider = r.provider, their_mode = theirs, mode = computesdk.CSENG_MODE[theirs], skipped = r.skipped == true,
      iterations = {} }
    local key = r.provider .. '\0' .. theirs
    if seen[key] then bad(at .. '.provider', 'one entry per provider and mode', r.provider .. ' (again, in mode ' .. theirs .. ')') end
    seen[key] = true
    if not is_object(r.summary) then bad(at .. '.summary', 'an object', r.summary) end
    if r.summary.ttiMs == nil then
      errors.raise(errors.ENOTRUN, string.format('%s: %s.summary has no ttiMs: not a sandbox time-to-interactive result '
        .. '(cseng compares startup times)', path, at))
    end
    if not is_object(r.summary.ttiMs) then bad(at .. '.summary.ttiMs', 'an object', r.summary.ttiMs) end
    local sm = {}
    for _, k in ipairs({ 'median', 'p95', 'p99', 'min', 'max', 'avg' }) do
      local v = r.summary.ttiMs[k]
      if v ~= nil and not num_or_nil(v) then bad(at .. '.summary.ttiMs.' .. k, string.format('a number in [0, %d]', MAX_MS), v) end
      sm[k] = v
    end
    if sm.median == nil then bad(at .. '.summary.ttiMs.median', string.format('a number in [0, %d]', MAX_MS), nil) end
    res.summary = sm
    if r.compositeScore ~= nil then
      local v = r.compositeScore
      if type(v) ~= 'number' or v ~= v or v < 0 or v > 100 then bad(at .. '.compositeScore', 'a number in [0, 100]', v) end
      res.composite_score = v
    end
    if r.successRate ~= nil then
      local v = r.successRate
      if type(v) ~= 'number' or v ~= v or v < 0 or v > 1 then bad(at .. '.successRate', 'a number in [0, 1]', v) end
      res.success_rate = v
    end
    if is_object(r.cseng) and computesdk.MODE_OF[r.cseng.mode] and computesdk.MODE_OF[r.cseng.mode] == theirs then
      res.cseng_mode = r.cseng.mode
    end
    if r.iterations == nil then
      if not res.skipped then bad(at .. '.iterations', 'a list', nil) end
    elseif not is_list(r.iterations) then
      bad(at .. '.iterations', 'a list', r.iterations)
    end
    for j, it in ipairs(r.iterations or {}) do
      local ia = string.format('%s.iterations[%d]', at, j)
      if not is_object(it) then bad(ia, 'an object', it) end
      if it.error ~= nil and type(it.error) ~= 'string' then bad(ia .. '.error', 'a string', it.error) end
      if it.sandboxId ~= nil and not name_ok(it.sandboxId) then bad(ia .. '.sandboxId', 'an id (1 to 100 printable characters)', it.sandboxId) end
      local x = { sandbox_id = it.sandboxId }
      if it.error ~= nil then
        -- a failed iteration has no time: their older writer put ttiMs 0 beside the error
        if it.ttiMs ~= nil and not num_or_nil(it.ttiMs) then bad(ia .. '.ttiMs', string.format('a number in [0, %d]', MAX_MS), it.ttiMs) end
        x.error = cut(it.error)
      else
        if not num_or_nil(it.ttiMs) then
          bad(ia .. '.ttiMs', string.format('a number in [0, %d] (an iteration without error needs its time)', MAX_MS), it.ttiMs)
        end
        x.tti_ms = it.ttiMs
      end
      res.iterations[#res.iterations + 1] = x
    end
    out.results[#out.results + 1] = res
  end
  return out
end

--- Their figures recomputed from a read file's iterations (stats.computesdk over the times of
--- the iterations without error): {median, p95, p99, success_rate, score} with score rounded
--- their way; nil for a skipped result.
---@param res computesdk.result
---@return table|nil
function computesdk.recompute(res)
  if res.skipped then return nil end
  local ok = {}
  for _, it in ipairs(res.iterations) do if it.tti_ms then ok[#ok + 1] = it.tti_ms end end
  local c = stats.computesdk(ok, #res.iterations)
  return { median = c.median, p95 = c.p95, p99 = c.p99, success_rate = c.success_rate, score = round2(c.score),
    n = c.n, attempts = c.attempts }
end

return computesdk
