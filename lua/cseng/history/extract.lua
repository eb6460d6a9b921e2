--- One run log read for the history store: what the store indexes of it, every value validated.
---
--- A log is hostile input (it may come from another machine, be cut short, or be written to
--- mislead): it is read line by line in blocks (a line over MAX_LINE is refused unread), each
--- line decoded by cjson with a depth limit and without NaN or Infinity, and only values that
--- pass their check are kept: names (providers, codes, modes, solvers, plans) by a pattern and a
--- length, times as ISO-8601 UTC, numbers finite and in range, free text (task ids, error heads)
--- bounded and with its control characters escaped. A record that fails a check is not indexed
--- and is counted (`rejected`, the first one's file:line and reason kept); nothing a log holds
--- ever reaches SQL but as a bound value (lua/cseng/history/store.lua).
---
--- What it gives (extract.read): the run (id, kind, plan, label, mode, solver, model, dataset,
--- providers, times, status), its trials as index rows (a rerun replacing the earlier record of
--- its task and attempt, as results.trials does), per provider, phase and primitive the latency
--- samples and their statistics (median and p95 with bootstrap CIs, block-level CIs for a run
--- of repeated blocks), and per provider the reliability counts (trials, errors, lost
--- sandboxes, leaked sandboxes, error codes).
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local stats = require('cseng.lib.stats')
local util = require('cseng.lib.util')
local console = require('cseng.lib.console')

local extract = {}

extract.MAX_LINE = 16 * 1024 * 1024 -- a longer line is refused without being read whole
extract.MAX_TEXT = 512              -- task ids and labels, at most (bytes)
extract.MAX_ERROR = 300             -- an error's head, as the viewer keeps it
extract.MAX_MS = 1e8                -- a latency over ~28 hours is not a measurement
extract.MAX_SECONDS = 1e7
extract.REPS = 1000                 -- bootstrap replicates of a run's CIs
extract.HEAD_BYTES = 1024           -- the bytes whose digest tells a replaced file

--- The phases of a task trial, and the sandbox primitive each one stands for.
extract.PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }
extract.PRIMITIVE = { build = 'build', start = 'create', upload = 'put', prepare = 'exec', instruction_write = 'put',
  solve = 'solve', verify = 'verify', stop = 'destroy' }
--- The arena's measured primitives (a startup run's phase is `measured`; warmups are left out).
extract.ARENA = { 'create', 'first_exec', 'ready', 'destroy' }
--- Primitives made of others (ready = create + first_exec): stored and shown, not judged apart
--- (a change in create would be called twice).
extract.DERIVED = { ready = true }
--- Error codes that mean the sandbox vanished under the workload.
extract.LOST_CODES = { ENOSANDBOX = true, ESANDBOX = true, EGONE = true }

local cj = require('cjson').new()
cj.decode_invalid_numbers(false)
cj.decode_max_depth(64)

-- ---- checks ---------------------------------------------------------------------------------

local function finite(v, lo, hi)
  return type(v) == 'number' and v == v and v >= lo and v <= hi
end

--- A name (provider, code, mode, solver, plan, kind): the pattern and at most max bytes, else nil.
function extract.name(v, max)
  if type(v) ~= 'string' or #v == 0 or #v > (max or 64) then return nil end
  if not v:match('^[%w][%w_.:@/+-]*$') then return nil end
  return v
end

--- An error code: upper-case letters, digits and underscores.
function extract.code(v)
  if type(v) ~= 'string' or #v > 64 or not v:match('^[A-Z][A-Z0-9_]*$') then return nil end
  return v
end

--- Free text: a string (a number is written as one), at most max bytes (cut at a UTF-8 boundary),
--- control characters escaped; nil for anything else or invalid UTF-8.
function extract.text(v, max)
  if math.type(v) == 'integer' then v = tostring(v) end
  if type(v) ~= 'string' then return nil end
  if #v > (max or extract.MAX_TEXT) then v = util.head(v, max or extract.MAX_TEXT) end
  if not utf8.len(v) then return nil end
  return console.escape(v, true)
end

--- Text kept as it was written (the viewer's index keeps it so): a string (a number is written as
--- one) of at most max bytes, else nil.
function extract.raw(v, max)
  if math.type(v) == 'integer' then v = tostring(v) end
  if type(v) ~= 'string' or #v > max then return nil end
  return v
end

--- An ISO-8601 UTC time as cseng writes them (2026-12-07T04:32:00.123456Z), else nil.
function extract.time(v)
  if type(v) ~= 'string' or #v > 40 then return nil end
  if not v:match('^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.?%d*Z$') then return nil end
  return v
end

--- Seconds since the epoch of an ISO-8601 UTC time (extract.time's form), or nil.
---@param t string|nil
---@return number|nil
function extract.epoch(t)
  if not extract.time(t) then return nil end
  local y, mo, d, h, mi, s = t:match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):([%d.]+)Z$')
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if not s or mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or s >= 61 then return nil end
  return util.days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s
end

local function ms(v) return finite(v, 0, extract.MAX_MS) and v or nil end
local function seconds(v) return finite(v, 0, extract.MAX_SECONDS) and v or nil end
local function int(v, lo, hi)
  local n = math.tointeger(v)
  return n and n >= (lo or 0) and n <= (hi or 1e12) and n or nil
end

-- the name a field that may be an object ({name=...}) goes by
local function named(v)
  if type(v) == 'table' then v = v.name or v.id or v.path end
  return v
end

-- ---- reading --------------------------------------------------------------------------------

--- The digest of a file's first bytes (a replaced file of the same size and time tells itself).
---@param path string
---@return string|nil
function extract.head(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local b = f:read(extract.HEAD_BYTES) or ''
  f:close()
  return crypto.sha256_hex(b)
end

-- Each complete line of path: fn(line, offset, length, lineno); a line over MAX_LINE is given as
-- nil with its offset and length (never read whole). Returns the lines seen, the bytes of a torn
-- tail (a last line without its newline), or nil, err.
local function each_line(path, fn)
  local f, err = io.open(path, 'rb')
  if not f then return nil, err end
  -- carry: the start of a line whose newline has not come yet, at file offset `base`; skipping:
  -- the offset of a line over MAX_LINE, whose bytes are dropped until its newline
  local carry, base, lineno, skipping = '', 0, 0, nil
  while true do
    local chunk = f:read(4 * 1024 * 1024)
    if not chunk then break end
    local text, pos = chunk, 1
    if skipping then
      local nl = chunk:find('\n', 1, true)
      if not nl then
        base = base + #chunk
        goto continue
      end
      lineno = lineno + 1
      fn(nil, skipping, base + nl - 1 - skipping, lineno)
      skipping, pos = nil, nl + 1
    else
      text = carry .. chunk
    end
    -- text starts at file offset `base` (carry's start, or this chunk's)
    while true do
      local nl = text:find('\n', pos, true)
      if not nl then break end
      lineno = lineno + 1
      if nl > pos then fn(text:sub(pos, nl - 1), base + pos - 1, nl - pos, lineno) end
      pos = nl + 1
    end
    carry = text:sub(pos)
    base = base + pos - 1
    if #carry > extract.MAX_LINE then skipping, base, carry = base, base + #carry, '' end
    ::continue::
  end
  f:close()
  return lineno, (skipping and 1 or #carry)
end

--- A trial record (a `trial` or `startup_trial` event) as an index row, its values checked; nil
--- and why when it cannot be one. run.mode: the arena's mode (a startup trial may not carry it).
---@return table|nil row, string|nil why
function extract.trial_row(e, startup, run)
  local provider = extract.name(e.provider)
  if not provider then return nil, 'provider is not a provider name' end
  local r = { event = startup and 'startup_trial' or 'trial', provider = provider }
  r.mode = extract.name(e.mode, 32) or (startup and run.mode) or nil
  if startup then
    r.round = int(e.round or e.sample, 0, 1e9)
    r.ok = e.ok == true
    r.outcome = r.ok and 'passed' or 'error'
    r.create_ms, r.first_exec_ms, r.ready_ms, r.cleanup_ms = ms(e.create_ms), ms(e.first_exec_ms), ms(e.ready_ms),
      ms(e.cleanup_ms)
    r.cleanup_ok = e.cleanup_ok == true or nil
    r.elapsed = ms(e.elapsed_ms) and e.elapsed_ms / 1000 or nil
    r.task = 'round ' .. tostring(r.round or '?')
  else
    local task = extract.raw(e.task_id, 4096)
    if not task then return nil, 'task_id is not text of at most 4096 bytes' end
    r.task = task
    local o = e.outcome
    r.outcome = (o == 'passed' or o == 'failed') and o or 'error'
    r.elapsed = seconds(e.elapsed_seconds)
    r.reward = finite(e.reward, -1e9, 1e9) and e.reward or nil
    if type(e.phases) == 'table' then
      for _, ph in ipairs(extract.PHASES) do r['ph_' .. ph] = seconds(e.phases[ph .. '_seconds']) end
    end
  end
  r.solver = extract.name(e.solver)
  if e.solver ~= nil and not r.solver then return nil, 'solver is not a solver name' end
  local usage = type(e.solver_usage) == 'table' and e.solver_usage or {}
  r.model = extract.raw(usage.model, 256)
  if usage.model ~= nil and not r.model then return nil, 'solver_usage.model is not text of at most 256 bytes' end
  r.solver_cost = finite(usage.cost_usd, 0, 1e9) and usage.cost_usd or nil
  r.attempt = int(e.attempt, 1, 1e6)
  r.rerun = e.rerun == true or nil
  local code = e.error_code or (type(e.error) == 'table' and e.error.code) or nil
  r.code = extract.code(code)
  if code ~= nil and not r.code then return nil, 'error_code is not a code' end
  r.stage = extract.name(e.error_stage, 64)
  -- the error's first bytes, as the viewer's index keeps them (never cut further)
  r.error = type(e.error) == 'string' and e.error:sub(1, extract.MAX_ERROR) or nil
  r.sandbox_s = seconds(e.sandbox_seconds)
  r.cost = finite(e.estimated_cost_usd, 0, 1e9) and e.estimated_cost_usd or nil
  r.block = int(e.block, 0, 1e6)
  r.warmup = e.warmup == true or nil
  r.interrupted = e.interrupted == true or nil
  return r
end

--- Read a run log. Returns the run, or nil and a one-line error naming the file (a file that
--- cannot be read, or holds no run_started). o.file: the name it is indexed under (default its
--- base name).
---@param path string
---@param o? {file?: string}
---@return table|nil run, string|nil err
function extract.read(path, o)
  o = o or {}
  local st, serr = fs.stat(path)
  if not st then return nil, tostring(serr) end
  local run = {
    file = o.file or util.basename(path), size = st.size, mtime_ns = st.mtime_ns, head = extract.head(path),
    trials = {}, live = {}, rejected = 0, providers = {},
  }
  local at = {} -- task \0 attempt -> row position (a rerun replaces it)
  local live_order = {}
  local function reject(lineno, why)
    run.rejected = run.rejected + 1
    run.rejected_first = run.rejected_first or string.format('%s:%d: %s', run.file, lineno, why)
  end
  local lines, torn = each_line(path, function(line, off, len, lineno)
    if not line then reject(lineno, string.format('a line of %d bytes (over %d)', len, extract.MAX_LINE)); return end
    local ok, e = pcall(cj.decode, line)
    if not ok or type(e) ~= 'table' then reject(lineno, 'not a JSON object'); return end
    local kind = e.event
    if type(kind) ~= 'string' then reject(lineno, 'no "event" field'); return end
    local t = extract.time(e.time)
    if t then run.last_time = t end
    if kind == 'run_started' then
      if run.started_line then return end -- the first one names the run
      local id = extract.name(e.run_id, 200)
      if not id then reject(lineno, 'run_id is not a run id'); return end
      run.run_id = id
      run.started_line = #line <= 1024 * 1024 and line or nil
      local ident = type(e.identity) == 'table' and e.identity or {}
      run.kind = extract.name(e.kind, 32) or 'tasks'
      run.plan = extract.name(ident.plan or e.plan, 128)
      run.label = extract.text(ident.label or e.label, 200)
      run.mode = extract.name(named(ident.mode or e.mode), 32)
      run.solver = extract.name(named(ident.solver or e.solver))
      run.model = extract.text(named(ident.model or e.model), 200)
      run.dataset = extract.text(named(ident.dataset or e.dataset), 512)
      local digest = ident.dataset_sha256 or ident.dataset_digest
      run.dataset_digest = type(digest) == 'string' and digest:match('^%x+$') and #digest <= 128 and digest or nil
      run.started_at = t
      local provs = ident.providers or e.providers or (e.provider and { e.provider }) or {}
      if type(provs) ~= 'table' then provs = { provs } end
      for i, p in ipairs(provs) do
        if i > 64 then break end
        local n = extract.name(p)
        if n then run.providers[#run.providers + 1] = n end
      end
    elseif not run.run_id then
      reject(lineno, 'an event before run_started')
    elseif kind == 'run_finished' then
      run.finished_line = #line <= 1024 * 1024 and line or nil
      run.status = extract.name(e.status, 32) or 'unknown'
      run.finished_at = t
    elseif kind == 'run_resumed' then
      run.finished_line, run.status, run.finished_at = nil, nil, nil
    elseif kind == 'trial' or kind == 'startup_trial' then
      local r, why = extract.trial_row(e, kind == 'startup_trial', run)
      if not r then reject(lineno, kind .. ': ' .. why); return end
      r.off, r.len = off, len
      local key = r.task .. '\0' .. tostring(r.attempt or 1) .. '\0' .. r.provider .. '\0' .. tostring(r.mode)
      local i = r.rerun and at[key]
      if i then r.seq = i; run.trials[i] = r else r.seq = #run.trials + 1; run.trials[r.seq] = r end
      at[key] = r.seq
    elseif kind == 'allocated' or kind == 'destroyed' then
      local p, id = extract.name(e.provider), e.sandbox_id
      if not p or type(id) ~= 'string' or #id == 0 or #id > 512 or id:find('[%z\1-\31\127]') then
        reject(lineno, kind .. ': provider or sandbox_id invalid'); return
      end
      local k = p .. '\0' .. id
      if kind == 'allocated' then
        if not run.live[k] then live_order[#live_order + 1] = k end
        run.live[k] = { provider = p, sandbox_id = id }
      else
        run.live[k] = nil
      end
    end
  end)
  if not lines then return nil, path .. ': ' .. tostring(torn) end
  run.lines, run.torn = lines, torn > 0 or nil
  if not run.run_id then return nil, path .. ': no run_started event; not a cseng run log' end
  local live = {}
  for _, k in ipairs(live_order) do if run.live[k] then live[#live + 1] = run.live[k] end end
  run.live = live
  run.status = run.status or 'incomplete'
  run.started_s, run.finished_s = extract.epoch(run.started_at), extract.epoch(run.finished_at)
  run.duration_s = run.started_s and run.finished_s and math.max(0, run.finished_s - run.started_s) or nil
  extract.summarize(run)
  return run
end

-- ---- statistics ---------------------------------------------------------------------------

--- The statistics of one series of samples (ms): n, min, max, mean, p50, p95, p99, the
--- bootstrap CIs of p50 and p95, and with two or more blocks their block-level CI of the median.
--- Seeds come from the series' name, so the same samples give the same row on every machine.
---@param key string provider/phase/primitive
---@param xs number[]
---@param blocks table<integer, number[]>|nil
function extract.series_stats(key, xs, blocks)
  local s = stats.summary(xs)
  local seed = stats.hash(key)
  local row = { n = s.n, min = s.min, max = s.max, mean = s.mean, p50 = s.p50, p95 = s.p95, p99 = s.p99 }
  row.p50_lo, row.p50_hi = stats.bootstrap_ci(xs, { seed = seed, reps = extract.REPS })
  row.p95_lo, row.p95_hi = stats.bootstrap_ci(xs, { seed = seed ~ 95, reps = extract.REPS, q = 0.95 })
  if blocks then
    local ids, list = {}, {}
    for b in pairs(blocks) do ids[#ids + 1] = b end
    table.sort(ids)
    for _, b in ipairs(ids) do list[#list + 1] = blocks[b] end
    if #list >= 2 then
      local r = stats.blocks(list, { seed = seed, reps = extract.REPS })
      if r and r.lo then row.n_blocks, row.block_lo, row.block_hi = r.n_blocks, r.lo, r.hi end
    end
  end
  return row
end

--- The latency samples of one trial row: fn(phase, primitive, ms) for each. Warmups and
--- interrupted trials have none; a startup trial gives its create time unless the create failed,
--- first_exec and ready when it was ready, destroy when the cleanup succeeded; a task trial each
--- phase it finished (a phase that failed is not a latency). The same samples feed the store's
--- statistics and the OpenMetrics histograms (lua/cseng/history/metrics.lua).
---@param t table a row of extract.trial_row
---@param fn fun(phase: string, primitive: string, ms: number)
function extract.samples(t, fn)
  if t.warmup or t.interrupted then return end
  if t.event == 'startup_trial' then
    if t.create_ms and (t.stage ~= 'create' or t.ok) then fn('measured', 'create', t.create_ms) end
    if t.ok then
      if t.first_exec_ms then fn('measured', 'first_exec', t.first_exec_ms) end
      if t.ready_ms then fn('measured', 'ready', t.ready_ms) end
    end
    if t.cleanup_ok and t.cleanup_ms then fn('measured', 'destroy', t.cleanup_ms) end
    return
  end
  for _, ph in ipairs(extract.PHASES) do
    local v = t['ph_' .. ph]
    if v and t.stage ~= ph then fn(ph, extract.PRIMITIVE[ph], v * 1000) end
  end
end

--- Fill run.series (per provider, phase and primitive), run.reliability (per provider) and the
--- run's counts from its trial rows.
function extract.summarize(run)
  local samples, order = {}, {}
  local function add(provider, phase, primitive, v, block)
    if not v then return end
    local key = provider .. '/' .. phase .. '/' .. primitive
    local s = samples[key]
    if not s then
      s = { provider = provider, phase = phase, primitive = primitive, xs = {}, blocks = {}, any_block = false }
      samples[key] = s
      order[#order + 1] = key
    end
    s.xs[#s.xs + 1] = v
    if block then
      s.any_block = true
      local b = s.blocks[block] or {}
      s.blocks[block] = b
      b[#b + 1] = v
    end
  end
  local rel, rel_order = {}, {}
  local counts = { trials = 0, passed = 0, failed = 0, errors = 0, lost = 0, cost = 0, solver_cost = 0 }
  for _, t in ipairs(run.trials) do
    local r = rel[t.provider]
    if not r then
      r = { provider = t.provider, trials = 0, errors = 0, lost = 0, leaked = 0, codes = {} }
      rel[t.provider] = r
      rel_order[#rel_order + 1] = t.provider
    end
    counts.cost = counts.cost + (t.cost or 0)
    counts.solver_cost = counts.solver_cost + (t.solver_cost or 0)
    if not t.warmup and not t.interrupted then
      counts.trials = counts.trials + 1
      r.trials = r.trials + 1
      if t.outcome == 'passed' then counts.passed = counts.passed + 1
      elseif t.outcome == 'failed' then counts.failed = counts.failed + 1
      else
        counts.errors = counts.errors + 1
        r.errors = r.errors + 1
        local code = t.code or 'EINTERNAL'
        r.codes[code] = (r.codes[code] or 0) + 1
        if extract.LOST_CODES[code] then r.lost = r.lost + 1; counts.lost = counts.lost + 1 end
      end
      extract.samples(t, function(phase, primitive, v) add(t.provider, phase, primitive, v, t.block) end)
    end
  end
  for _, l in ipairs(run.live) do
    local r = rel[l.provider]
    if r then r.leaked = r.leaked + 1 end
  end
  run.series = {}
  for _, key in ipairs(order) do
    local s = samples[key]
    local row = extract.series_stats(key, s.xs, s.any_block and s.blocks or nil)
    row.provider, row.phase, row.primitive = s.provider, s.phase, s.primitive
    run.series[#run.series + 1] = row
  end
  run.reliability = {}
  for _, p in ipairs(rel_order) do run.reliability[#run.reliability + 1] = rel[p] end
  run.counts = counts
  return run
end

return extract
