--- Run results: results/<run-id>.jsonl is the source of truth (append-only events, one per
--- line); results/<run-id>.json is the summary in the seed harness's shape.
---
--- Events: run_started, run_resumed, allocated (fsynced before the sandbox is used),
--- destroyed, cleanup_failed, trial, prewarmed, run_finished. Every string written passes
--- through secrets.redact, so secret values never reach a results file.
local jsonl = require('cseng.lib.jsonl')
local fs = require('cseng.fs')
local clock = require('cseng.clock')
local task = require('cseng.task')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')

local results = {}

--- Strict codes: a trial record (trial, trial_try, startup_trial) that failed must carry a registered
--- error_code, or writing it raises EINTERNAL. On under `cseng test` (in process) and with
--- CSENG_STRICT_CODES=1 (tools/check.sh exports it for the runs specs start).
results.strict_codes = os.getenv('CSENG_STRICT_CODES') == '1'

-- The unregistered error_code of a failed trial record, if any (nil when all is well).
local function bad_code(kind, rec)
  if kind ~= 'trial' and kind ~= 'trial_try' and kind ~= 'trial_attempt' and kind ~= 'startup_trial' then return nil end
  if rec.outcome ~= 'error' and rec.ok ~= false then return nil end
  if errors.registered(rec.error_code) then return nil end
  return tostring(rec.error_code)
end

local Writer = {}
Writer.__index = Writer

-- One exclusive lock per log per process: writers of one process share it (a resume reopens
-- the log it read), another process is refused.
local locks = {}
local failed_logs = {} -- the logs a write failed on, in this process

-- The byte length of path up to its last newline, and its size (a torn tail lies between).
local function whole_length(path)
  local f = io.open(path, 'rb')
  if not f then return 0, 0 end
  local size = f:seek('end')
  local at = size
  while at > 0 do
    local from = math.max(0, at - 65536)
    f:seek('set', from)
    local chunk = f:read(at - from) or ''
    local i = #chunk
    while i > 0 and chunk:byte(i) ~= 10 do i = i - 1 end
    if i > 0 then f:close(); return from + i, size end
    at = from
  end
  f:close()
  return 0, size
end

-- Cut a torn tail (a write a crash or a full disk left without its newline): the file goes
-- back to its last whole record. Returns the bytes cut and the length kept.
local function cut_torn_tail(path)
  local keep, size = whole_length(path)
  if keep == size then return 0, size end
  local ok, err = fs.truncate(path, keep)
  if not ok then errors.raise(errors.EIO, 'cannot repair ' .. path .. ': ' .. tostring(err)) end
  return size - keep, keep
end

--- Open (create or continue) a run's event log: one run per log (an exclusive lock, held
--- until the process ends or writer:close(); a log another process holds is a one-line
--- refusal), and a torn last record is cut off (a `log_repaired` event says how many bytes).
--- o.shared (cleanup): a log a live run holds is appended to all the same, and not repaired.
---@param path string
---@param run_id string
---@param o table|nil {shared=}
function results.open(path, run_id, o)
  local ok, err, mcode = fs.mkdir_p(util.dirname(path))
  if not ok then errors.raise(mcode or errors.EIO, 'cannot create the directory of the run log ' .. path .. ': ' .. tostring(err)) end
  local w = setmetatable({ path = path, run_id = run_id }, Writer)
  local held = locks[path]
  if not held then
    local lock, lerr, code = fs.lock(path)
    if lock then
      held = { lock = lock, n = 0 }
      locks[path] = held
    elseif code ~= 'EAGAIN' then
      errors.raise(code or errors.EIO, 'cannot open the run log ' .. tostring(lerr))
    elseif not (o and o.shared) then
      errors.raise(errors.EBUSY, path .. ' is the log of another cseng run that is still going (one run per log: ' ..
        'give this one another --output)')
    end
  end
  if held then
    held.n = held.n + 1
    w.lock = held
    local cut, kept = cut_torn_tail(path)
    if cut > 0 then w:event('log_repaired', { torn_bytes = cut, offset = kept }, true) end
  end
  return w
end

--- Release this writer's share of the log's lock (the last one unlocks it). Idempotent.
function Writer:close()
  local held = self.lock
  if not held then return end
  self.lock = nil
  held.n = held.n - 1
  if held.n <= 0 then
    held.lock:close()
    if locks[self.path] == held then locks[self.path] = nil end
  end
end

--- Append one event. sync=true for records that cleanup depends on. A write that fails (a
--- full disk) does not raise: the torn tail is cut off again, writer.failed keeps the first
--- message, writer.on_failure(message) is called once (the session stops allocating), and
--- this returns nil, message, code; later events are still tried (a destroy record may fit).
---@return table|nil record, string? err, string? code
function Writer:event(kind, fields, sync)
  local rec = secrets.redact_all(fields or {})
  rec.event = kind
  rec.run_id = self.run_id
  rec.time = clock.wall()
  local bad = results.strict_codes and bad_code(kind, rec)
  if bad then
    errors.raise(errors.EINTERNAL, string.format('%s record of %s has error_code %s, not a registered code (%s)',
      kind, tostring(rec.task_id or rec.provider), bad, tostring(rec.error)))
  end
  local ok, err, code = jsonl.append(self.path, rec, { sync = sync and true or false })
  if ok then return rec end
  err = 'cannot write the run log ' .. tostring(err)
  if self.lock then pcall(cut_torn_tail, self.path) end
  failed_logs[self.path] = true
  if not self.failed then
    self.failed, self.failed_code = err, code
    if self.on_failure then self.on_failure(err, code) end
  end
  return nil, err, code
end

--- The intent to create: the labels the create carries, so `cseng cleanup RUN.jsonl` can find a
--- sandbox whose answer never came. Written (one write(2): it survives the process's death)
--- before the create request is sent, and fsynced while the request is in flight, in a task of
--- its own: a blocking fsync here would delay every create by the disk's fsync time and its
--- jitter (a staggered arena's launches came up to 10 ms early against their schedule).
---@return table|nil record, string? err, string? code
function Writer:intent(provider, labels, extra)
  local rec, err, code = self:event('intent', util.merge({ provider = provider, labels = labels }, extra), false)
  if rec then
    local path = self.path
    local function sync() pcall(fs.append, path, '', { sync = true }) end -- fsync(2) flushes the file
    if task.current() then task.spawn(sync) else sync() end
  end
  return rec, err, code
end

function Writer:allocated(provider, sb, labels, extra)
  return self:event('allocated', util.merge({ provider = provider, sandbox_id = sb.id, labels = labels }, extra), true)
end

function Writer:destroyed(provider, sb_id, extra)
  return self:event('destroyed', util.merge({ provider = provider, sandbox_id = sb_id }, extra), true)
end

function Writer:cleanup_failed(provider, sb_id, err)
  return self:event('cleanup_failed', { provider = provider, sandbox_id = sb_id, error = tostring(err) }, true)
end

-- The file and line of each record results.read returned (weak: records are not kept alive by it,
-- and no field is added to them, so a record written back out is the one read).
local origin = setmetatable({}, { __mode = 'k' })

--- Read every event of a run log. A torn final line (a crash mid-write) is ignored, and a torn
--- record a later write landed on gives up only its torn part (jsonl.read's salvage). A log
--- that cannot be read is a one-line error naming it.
---@param path string
---@return table[]
function results.read(path)
  local iter, err, code = jsonl.read(path, { salvage = true })
  if not iter then
    err = tostring(err)
    if err:sub(1, #tostring(path)) ~= tostring(path) then err = tostring(path) .. ': ' .. err end
    errors.raise(code or errors.EIO, 'cannot read the run log ' .. err)
  end
  local events = {}
  for rec, line in iter do
    events[#events + 1] = rec
    if type(rec) == 'table' then origin[rec] = { path = path, line = line } end
  end
  return events
end

--- Where a record read by results.read came from, "<path>:<line>" (nil for a record made in
--- this process): refusals of what a log holds name the file and the line.
---@param rec table
---@return string|nil
function results.where(rec)
  local o = origin[rec]
  return o and string.format('%s:%d', o.path, o.line) or nil
end

--- A run log to continue (--resume): its events and run id; one-line errors for a log that is
--- missing or is not a cseng run log.
---@param path string
---@return table {run_id, events}
function results.read_run(path)
  local events = results.read(path)
  for _, e in ipairs(events) do
    if e.event == 'run_started' then return { run_id = e.run_id, events = events, started = e } end
  end
  errors.raise(errors.ENOTRUN, path .. ': no run_started event; not a cseng run log')
end

--- Write a solver's transcript (a list of JSON-able entries) as JSON Lines, redacted.
---@param path string
---@param transcript table[]
---@return true|nil ok, string? err, string? code
function results.write_transcript(path, transcript)
  local ok, err, code = fs.mkdir_p(util.dirname(path))
  if not ok then return nil, err, code end
  local out = {}
  for _, entry in ipairs(transcript or {}) do out[#out + 1] = jsonl.encode(secrets.redact_all(entry)) .. '\n' end
  return fs.write(path, table.concat(out))
end

--- Sandboxes allocated and not destroyed. Keyed by provider and id: one log may hold several
--- providers (the startup arena), whose ids can collide.
function results.live_allocations(events)
  local live, order = {}, {}
  for _, e in ipairs(events) do
    local key = tostring(e.provider) .. '\0' .. tostring(e.sandbox_id)
    if e.event == 'allocated' then
      if not live[key] then order[#order + 1] = key end
      live[key] = e
    elseif e.event == 'destroyed' then
      live[key] = nil
    end
  end
  local out = {}
  for _, key in ipairs(order) do if live[key] then out[#out + 1] = live[key] end end
  return out
end

--- Where a log's sandboxes live: the run id, the providers it names (a task log's `provider`,
--- an arena log's `providers`, and every allocation's and intent's), each one's adapter and
--- recorded config (secrets are [redacted] there), and the sessions (cseng.session labels)
--- that sent creates.
---@param events table[]
---@return table {run_id, shard, order = {name...}, providers = {[name] = {name, adapter, config}}, sessions = {[nonce]=true}}
function results.run_scope(events)
  local scope = { order = {}, providers = {}, sessions = {} }
  local started
  local function add(name, adapter)
    if type(name) ~= 'string' or name == '' then return end
    local p = scope.providers[name]
    if not p then
      p = { name = name }
      scope.providers[name] = p
      scope.order[#scope.order + 1] = name
    end
    if type(adapter) == 'string' and not p.adapter then p.adapter = adapter end
  end
  for _, e in ipairs(events) do
    if e.event == 'run_started' and not started then
      started = e
      scope.run_id, scope.shard = e.run_id, e.shard
      add(e.provider)
      local adapters = type(e.adapters) == 'table' and e.adapters or {}
      for _, name in ipairs(type(e.providers) == 'table' and e.providers or {}) do
        add(name, type(adapters[name]) == 'table' and adapters[name].adapter or nil)
      end
    elseif e.event == 'allocated' or e.event == 'intent' or e.event == 'lost_create' then
      add(e.provider, e.adapter)
      local l = type(e.labels) == 'table' and e.labels or {}
      if type(l['cseng.session']) == 'string' then scope.sessions[l['cseng.session']] = true end
    end
  end
  local cfg = started and type(started.provider_config) == 'table' and started.provider_config or {}
  for name, p in pairs(scope.providers) do
    -- an arena log keeps one config per provider name (with its adapter); a task log one config
    local c = cfg
    if started and started.kind == 'startup' then c = type(cfg[name]) == 'table' and cfg[name] or {} end
    p.config = {}
    for k, v in pairs(c) do if v ~= '[redacted]' and k ~= 'adapter' and k ~= 'sandbox' then p.config[k] = v end end
    p.adapter = p.adapter or (type(c.adapter) == 'string' and c.adapter) or name
  end
  return scope
end

--- The trial records of a run, in the order they were written.
function results.trials(events)
  local out, at = {}, {}
  for _, e in ipairs(events) do
    if e.event == 'trial' then
      -- a rerun (cseng run --resume --rerun-errors) replaces the earlier record of its task and attempt
      local id = tostring(e.task_id) .. '\0' .. tostring(e.attempt or 1)
      local i = e.rerun and at[id]
      if i then out[i] = e else out[#out + 1] = e; at[id] = #out end
    end
  end
  return out
end

--- The admission of a run (lua/cseng/run/admission.lua's `admission` events), per key (a
--- provider, or model:<host>): {start, min, max, final (limits), changes (increases + decreases),
--- increases, decreases, latency_decreases, pauses, throttled (429/503 answers), retried, waits,
--- wait_s}; nil when the run has none (admission off).
---@return table<string, table>|nil
function results.admission(events)
  local out, any = {}, false
  for _, e in ipairs(events) do
    if e.event == 'admission' and (e.key or e.provider) ~= nil then
      any = true
      local k = tostring(e.key or e.provider)
      local a = out[k]
      if not a then
        a = { increases = 0, decreases = 0, pauses = 0, retried = 0, totals = {} }
        out[k] = a
      end
      local lim = tonumber(e.limit)
      if lim then
        a.start = a.start or lim
        a.min, a.max = math.min(a.min or lim, lim), math.max(a.max or lim, lim)
        a.final = lim
      end
      if e.reason == 'increase' then a.increases = a.increases + 1
      elseif e.reason == 'decrease' then a.decreases = a.decreases + 1
      elseif e.reason == 'pause' then a.pauses = a.pauses + 1
      elseif e.reason == 'retry' then a.retried = a.retried + 1
      elseif e.reason == 'total' then
        a.totals[tostring(e.scope)] = e -- the last total of each controller (a shard's, in a merged log)
      end
    end
  end
  if not any then return nil end
  for _, a in pairs(out) do
    a.changes = a.increases + a.decreases
    for _, t in pairs(a.totals) do
      for _, f in ipairs({ 'throttled', 'waits', 'wait_s', 'latency_decreases' }) do -- (retried: the retry events)
        if type(t[f]) == 'number' then a[f] = (a[f] or 0) + t[f] end
      end
    end
    a.totals = nil
  end
  return out
end

--- The seed harness's summary shape, from the run's events.
function results.summary(events)
  local started, finished
  for _, e in ipairs(events) do
    if e.event == 'run_started' and not started then started = e end
    if e.event == 'run_finished' then finished = e end
  end
  started = started or {}
  local trials = results.trials(events)
  local s = {
    run_id = started.run_id,
    provider = started.provider,
    mode = started.mode,
    runtime = started.runtime,
    dataset = started.dataset,
    solver = started.solver,
    task_count = #trials,
    solve_enabled = started.solver ~= nil and started.solver ~= 'nop',
    passed = 0, failed = 0, errors = 0,
    estimated_cost_usd = 0,
    started_at = started.time,
    finished_at = finished and finished.time or nil,
    status = finished and finished.status or 'incomplete',
    results = {},
  }
  for _, t in ipairs(trials) do
    if t.outcome == 'passed' then s.passed = s.passed + 1
    elseif t.outcome == 'error' then s.errors = s.errors + 1
    else s.failed = s.failed + 1 end
    s.estimated_cost_usd = s.estimated_cost_usd + (t.estimated_cost_usd or 0)
    if type(t.solver_usage) == 'table' and type(t.solver_usage.cost_usd) == 'number' then
      s.solver_cost_usd = (s.solver_cost_usd or 0) + t.solver_usage.cost_usd -- model spend, kept apart
    end
    local r = util.copy(t)
    r.event, r.run_id, r.time = nil, nil, nil
    s.results[#s.results + 1] = r
  end
  s.metrics = results.metrics(trials)
  -- agent evals: pass@1..K per solver/model/provider/mode, and the run's cost ledger
  s.pass_at_k = jsonl.array(require('cseng.evals.passk').summary(trials))
  s.cost = require('cseng.evals.ledger').run(trials)
  s.admission = results.admission(events) -- per key: the limits, changes, 429s, waits (nil when off)
  -- why the run stopped early (a string: max_cost, dead_endpoint, ...) and its details
  if finished and finished.stop_reason ~= nil then s.stop_reason, s.stop_detail = finished.stop_reason, finished.stop_detail end
  return s
end

--- Every reward key of the trials' `rewards` as a metric (Harbor makes each key of reward.json
--- one): {key = {mean, n, min, max}} over the trials that recorded it (errors have none). Nil
--- when no trial recorded rewards.
---@param trials table[]
---@return table|nil
function results.metrics(trials)
  local m
  for _, t in ipairs(trials) do
    if type(t.rewards) == 'table' then
      for k, v in pairs(t.rewards) do
        if type(v) == 'number' then
          m = m or {}
          local x = m[k] or { sum = 0, n = 0 }
          x.sum, x.n = x.sum + v, x.n + 1
          x.min = x.min and math.min(x.min, v) or v
          x.max = x.max and math.max(x.max, v) or v
          m[k] = x
        end
      end
    end
  end
  for _, x in pairs(m or {}) do x.mean = x.sum / x.n; x.sum = nil end
  return m
end

--- Write the summary JSON beside the log (atomically). When the log beside it has failed a
--- write (a full disk: the session stopped allocating and says so) this returns nil, err
--- instead of raising a second error about the same disk.
function results.write_summary(events, path)
  local ok, err, code = fs.write(path, jsonl.encode(results.summary(events)) .. '\n')
  if not ok then
    if failed_logs[(path:gsub('%.json$', '.jsonl'))] then return nil, err end
    errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err))
  end
  return path
end

return results
