--- OpenMetrics: a registry of counters, gauges and histograms and its text exposition (what
--- `/metrics` serves, for Prometheus and anything that reads its format), and a collector that
--- feeds it from run logs read incrementally (each log from the byte where it stopped, a torn
--- last line left until its newline arrives).
---
--- Names and labels follow Prometheus' conventions: a `cseng_` prefix, base units in the name
--- (`_seconds`), counters ending in `_total`, labels naming dimensions with a bounded set of values
--- (providers, phases, primitives, outcomes, error codes, admission keys, watch names). Nothing
--- else from a log becomes a label: no task id, no sandbox id, no URL, no message, so no secret and
--- no unbounded series. Label values passed the checks of lua/cseng/history/extract.lua, and are
--- escaped as the format says.
---
--- The collector's samples are the store's (extract.samples): a histogram of the create latency
--- and the store's median of it count the same trials.
local extract = require('cseng.history.extract')
local errors = require('cseng.lib.errors')

local metrics = {}

metrics.CONTENT_TYPE = 'application/openmetrics-text; version=1.0.0; charset=utf-8'

--- The latency buckets (seconds): a sandbox's create or first command takes from a few
--- milliseconds (a local namespace) to a few seconds (a cold microVM, an image pull); a task's
--- phases, minutes. Fine steps where sandboxes answer (10 ms to 1 s), so a quantile read from the
--- histogram lands within one bucket of the true one.
metrics.BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1,
  0.125, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60,
  90, 120, 180, 300, 600, 1200, 1800, 3600 }

-- ---- the registry ---------------------------------------------------------------------------

local function escape_value(v)
  return (tostring(v):gsub('[\\"\n]', { ['\\'] = '\\\\', ['"'] = '\\"', ['\n'] = '\\n' }))
end

local function number(v)
  if v == math.huge then return '+Inf' end
  if v == -math.huge then return '-Inf' end
  if v ~= v then return 'NaN' end
  if math.type(v) == 'integer' then return tostring(v) end
  if v == math.floor(v) and math.abs(v) < 1e15 then return string.format('%.1f', v) end
  for _, f in ipairs({ '%.15g', '%.16g' }) do -- the shortest that reads back the same
    local t = string.format(f, v)
    if tonumber(t) == v then return t end
  end
  return string.format('%.17g', v)
end

local Family = {}
Family.__index = Family

local function key_of(fam, lv)
  local parts = {}
  for i, l in ipairs(fam.labels) do
    local v = lv[l]
    if v == nil then errors.raise(errors.EINVAL, string.format('metric %s: label %s has no value', fam.name, l)) end
    parts[i] = tostring(v)
  end
  return table.concat(parts, '\0')
end

local function series(fam, lv)
  local k = key_of(fam, lv)
  local s = fam.series[k]
  if not s then
    s = { labels = {} }
    for i, l in ipairs(fam.labels) do s.labels[i] = tostring(lv[l]) end
    if fam.type == 'histogram' then
      s.counts, s.count, s.sum = {}, 0, 0
      for i = 1, #fam.buckets do s.counts[i] = 0 end
    else
      s.value = 0
    end
    fam.series[k] = s
    fam.order[#fam.order + 1] = k
  end
  return s
end

--- Add v (default 1) to a counter's series.
function Family:inc(lv, v)
  local s = series(self, lv or {})
  s.value = s.value + (v or 1)
end

--- Set a gauge's series.
function Family:set(lv, v)
  series(self, lv or {}).value = v
end

--- Observe one value in a histogram's series.
function Family:observe(lv, v)
  local s = series(self, lv or {})
  s.count, s.sum = s.count + 1, s.sum + v
  local b = self.buckets
  for i = 1, #b do
    if v <= b[i] then s.counts[i] = s.counts[i] + 1; break end
  end
end

--- Drop every series (a gauge set afresh from a state).
function Family:clear()
  self.series, self.order = {}, {}
end

local function labels_text(fam, s, extra)
  local parts = {}
  for i, l in ipairs(fam.labels) do parts[#parts + 1] = l .. '="' .. escape_value(s.labels[i]) .. '"' end
  if extra then parts[#parts + 1] = extra end
  if #parts == 0 then return '' end
  return '{' .. table.concat(parts, ',') .. '}'
end

function Family:render(out)
  out[#out + 1] = '# TYPE ' .. self.name .. ' ' .. self.type
  if self.unit then out[#out + 1] = '# UNIT ' .. self.name .. ' ' .. self.unit end
  out[#out + 1] = '# HELP ' .. self.name .. ' ' .. self.help:gsub('\\', '\\\\'):gsub('\n', '\\n')
  local keys = {}
  for i, k in ipairs(self.order) do keys[i] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local s = self.series[k]
    if self.type == 'counter' then
      out[#out + 1] = self.name .. '_total' .. labels_text(self, s) .. ' ' .. number(s.value)
    elseif self.type == 'gauge' then
      out[#out + 1] = self.name .. labels_text(self, s) .. ' ' .. number(s.value)
    else
      local cum = 0
      for i, b in ipairs(self.buckets) do
        cum = cum + s.counts[i]
        out[#out + 1] = self.name .. '_bucket' .. labels_text(self, s, 'le="' .. number(b + 0.0) .. '"') .. ' ' .. cum
      end
      out[#out + 1] = self.name .. '_bucket' .. labels_text(self, s, 'le="+Inf"') .. ' ' .. s.count
      out[#out + 1] = self.name .. '_count' .. labels_text(self, s) .. ' ' .. s.count
      out[#out + 1] = self.name .. '_sum' .. labels_text(self, s) .. ' ' .. number(s.sum + 0.0)
    end
  end
end

local Registry = {}
Registry.__index = Registry

--- A registry of metric families.
function metrics.registry()
  return setmetatable({ families = {}, by_name = {} }, Registry)
end

local function family(R, kind, name, help, labels, o)
  assert(name:match('^[a-zA-Z_:][a-zA-Z0-9_:]*$'), 'metric name ' .. name)
  local f = R.by_name[name]
  if f then return f end
  f = setmetatable({ type = kind, name = name, help = help, labels = labels or {}, series = {}, order = {},
    unit = o and o.unit, buckets = o and o.buckets }, Family)
  R.by_name[name] = f
  R.families[#R.families + 1] = f
  return f
end

--- A counter family (name without `_total`: the samples get it).
function Registry:counter(name, help, labels) return family(self, 'counter', name, help, labels) end
--- A gauge family; unit: the base unit its name ends with ('seconds').
function Registry:gauge(name, help, labels, unit) return family(self, 'gauge', name, help, labels, { unit = unit }) end
--- A histogram family in seconds (buckets default metrics.BUCKETS).
function Registry:histogram(name, help, labels, buckets)
  return family(self, 'histogram', name, help, labels, { unit = 'seconds', buckets = buckets or metrics.BUCKETS })
end

--- The exposition: every family, then `# EOF`.
function Registry:render()
  local out = {}
  for _, f in ipairs(self.families) do f:render(out) end
  out[#out + 1] = '# EOF'
  return table.concat(out, '\n') .. '\n'
end

-- ---- run logs into the registry ---------------------------------------------------------------

local cj = require('cjson').new()
cj.decode_invalid_numbers(false)
cj.decode_max_depth(64)

local Collector = {}
Collector.__index = Collector

--- A collector of run logs into R: trials by outcome and error code, lost sandboxes, latency
--- histograms per provider, phase and primitive, sandboxes created, destroyed and live, cleanup
--- failures, admission limits, runs by status.
function metrics.collector(R)
  local C = setmetatable({ R = R, logs = {} }, Collector)
  C.trials = R:counter('cseng_trials', 'Trials recorded, by provider and outcome (passed, failed, error; an arena ' ..
    'trial that was ready is passed); warmups and interrupted trials are not counted.', { 'provider', 'outcome' })
  C.errors = R:counter('cseng_trial_errors', 'Trials whose outcome is error, by provider and error code ' ..
    '(docs/ERRORS.md).', { 'provider', 'code' })
  C.lost = R:counter('cseng_sandboxes_lost', 'Trials whose sandbox vanished under the workload (ENOSANDBOX, ' ..
    'ESANDBOX, EGONE), by provider.', { 'provider' })
  C.latency = R:histogram('cseng_sandbox_latency_seconds', 'Latency of a sandbox primitive, by provider, phase ' ..
    '(measured for the startup arena; the trial phase for a task run) and primitive (create, first_exec, ready, ' ..
    'destroy; put, exec, solve, verify, build for task phases).', { 'provider', 'phase', 'primitive' })
  C.created = R:counter('cseng_sandboxes_created', 'Sandboxes created (allocation records), by provider.', { 'provider' })
  C.destroyed = R:counter('cseng_sandboxes_destroyed', 'Sandboxes destroyed (destroy records), by provider.', { 'provider' })
  C.cleanup_failed = R:counter('cseng_sandbox_cleanup_failures', 'Destroys that failed after their retries, by ' ..
    'provider.', { 'provider' })
  C.live = R:gauge('cseng_live_sandboxes', 'Sandboxes created and not destroyed, by provider: the ones in use, plus ' ..
    'any a failed cleanup left (cseng cleanup RUN.jsonl destroys those).', { 'provider' })
  C.limit = R:gauge('cseng_admission_limit', 'The adaptive admission limit of creates (or model requests) in flight, ' ..
    'by key (a provider, or model:<host>), as last set.', { 'key' })
  C.decreases = R:counter('cseng_admission_decreases', 'Times the admission limit was halved (429, 503, rising ' ..
    'latency), by key.', { 'key' })
  C.runs = R:counter('cseng_runs', 'Runs that ended, by status (finished, stopped, interrupted, cleanup_failed).',
    { 'status' })
  return C
end

function Collector:event(log, e)
  local kind = e.event
  if kind == 'run_started' then
    log.mode = extract.name(type(e.identity) == 'table' and e.identity.mode or e.mode, 32)
  elseif kind == 'trial' or kind == 'startup_trial' then
    local t = extract.trial_row(e, kind == 'startup_trial', log)
    if not t or t.warmup or t.interrupted then return end
    self.trials:inc({ provider = t.provider, outcome = t.outcome })
    if t.outcome == 'error' then
      local code = t.code or 'EINTERNAL'
      self.errors:inc({ provider = t.provider, code = code })
      if extract.LOST_CODES[code] then self.lost:inc({ provider = t.provider }) end
    end
    extract.samples(t, function(phase, primitive, v)
      self.latency:observe({ provider = t.provider, phase = phase, primitive = primitive }, v / 1000)
    end)
  elseif kind == 'allocated' or kind == 'destroyed' or kind == 'cleanup_failed' then
    local p = extract.name(e.provider)
    if not p or type(e.sandbox_id) ~= 'string' then return end
    local k = p .. '\0' .. e.sandbox_id
    if kind == 'allocated' then
      self.created:inc({ provider = p })
      if not log.live[k] then log.live[k] = p; self:live_add(p, 1) end
    elseif kind == 'destroyed' then
      self.destroyed:inc({ provider = p })
      if log.live[k] then log.live[k] = nil; self:live_add(p, -1) end
    else
      self.cleanup_failed:inc({ provider = p })
    end
  elseif kind == 'admission' then
    local key = extract.name(e.key or e.provider, 128)
    if not key then return end
    local lim = tonumber(e.limit)
    if lim and lim == lim and lim >= 0 and lim < 1e9 then self.limit:set({ key = key }, lim) end
    if e.reason == 'decrease' then self.decreases:inc({ key = key }) end
  elseif kind == 'run_finished' then
    local st = extract.name(e.status, 32)
    if st then self.runs:inc({ status = st }) end
  end
end

function Collector:live_add(p, d)
  self.live_n = self.live_n or {}
  self.live_n[p] = (self.live_n[p] or 0) + d
  self.live:set({ provider = p }, self.live_n[p])
end

--- Read what path gained since the last feed (nothing when it did not change). A line that is not
--- a JSON object, or holds values that fail their checks, is skipped.
---@param path string
function Collector:feed(path)
  local log = self.logs[path]
  if not log then
    log = { offset = 0, live = {} }
    self.logs[path] = log
  end
  local f = io.open(path, 'rb')
  if not f then return end
  local size = f:seek('end')
  if size < log.offset then log.offset = size end -- cut short (a torn tail cut): go on from there
  if size == log.offset then f:close(); return end
  f:seek('set', log.offset)
  local carry = ''
  while true do
    local chunk = f:read(1024 * 1024)
    if not chunk then break end
    local text, pos = carry .. chunk, 1
    while true do
      local nl = text:find('\n', pos, true)
      if not nl then break end
      if nl - pos <= extract.MAX_LINE then
        local ok, e = pcall(cj.decode, text:sub(pos, nl - 1))
        if ok and type(e) == 'table' then self:event(log, e) end
      end
      log.offset = log.offset + (nl - pos + 1)
      pos = nl + 1
    end
    carry = text:sub(pos)
    if #carry > extract.MAX_LINE then log.offset, carry = log.offset + #carry, '' end
  end
  f:close()
end

return metrics
