--- Run results: results/<run-id>.jsonl is the source of truth (append-only events, one per
--- line); results/<run-id>.json is the summary in the seed harness's shape.
---
--- Events: run_started, run_resumed, allocated (fsynced before the sandbox is used),
--- destroyed, cleanup_failed, trial, prewarmed, run_finished. Every string written passes
--- through util.redact, so secret values never reach a results file.
local jsonl = require 'cseng.lib.jsonl'
local fs = require 'cseng.fs'
local clock = require 'cseng.clock'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'

local results = {}

--- Strict codes: a trial record (trial, trial_attempt, startup_trial) that failed must carry a registered
--- error_code, or writing it raises EINTERNAL. On under `cseng test` (in process) and with
--- CSENG_STRICT_CODES=1 (tools/check.sh exports it for the runs specs start).
results.strict_codes = os.getenv('CSENG_STRICT_CODES') == '1'

-- The unregistered error_code of a failed trial record, if any (nil when all is well).
local function bad_code(kind, rec)
  if kind ~= 'trial' and kind ~= 'trial_attempt' and kind ~= 'startup_trial' then return nil end
  if rec.outcome ~= 'error' and rec.ok ~= false then return nil end
  if errors.registered(rec.error_code) then return nil end
  return tostring(rec.error_code)
end

local Writer = {}
Writer.__index = Writer

--- Open (create or continue) a run's event log.
function results.open(path, run_id)
  local ok, err, code = fs.mkdir_p(util.dirname(path))
  if not ok then errors.raise(code or errors.EIO, 'cannot create the directory of ' .. path .. ': ' .. tostring(err)) end
  return setmetatable({ path = path, run_id = run_id }, Writer)
end

--- Append one event. sync=true for records that cleanup depends on.
function Writer:event(kind, fields, sync)
  local rec = util.redact_all(fields or {})
  rec.event = kind
  rec.run_id = self.run_id
  rec.time = clock.wall()
  local bad = results.strict_codes and bad_code(kind, rec)
  if bad then
    errors.raise(errors.EINTERNAL, string.format('%s record of %s has error_code %s, not a registered code (%s)',
      kind, tostring(rec.task_id or rec.provider), bad, tostring(rec.error)))
  end
  local ok, err, code = jsonl.append(self.path, rec, { sync = sync and true or false })
  if not ok then errors.raise(code or errors.EIO, 'cannot write ' .. self.path .. ': ' .. tostring(err)) end
  return rec
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

--- Read every event of a run log. A torn final line (a crash mid-write) is ignored. A log that
--- cannot be read is a one-line error naming it.
---@param path string
---@return table[]
function results.read(path)
  local iter, err, code = jsonl.read(path)
  if not iter then
    err = tostring(err)
    if err:sub(1, #tostring(path)) ~= tostring(path) then err = tostring(path) .. ': ' .. err end
    errors.raise(code or errors.EIO, 'cannot read the run log ' .. err)
  end
  local events = {}
  for rec in iter do events[#events + 1] = rec end
  return events
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
  for _, entry in ipairs(transcript or {}) do out[#out + 1] = jsonl.encode(util.redact_all(entry)) .. '\n' end
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
  -- agent evals: pass@1..K per solver/model/provider/mode, and the run's cost ledger
  s.pass_at_k = jsonl.array(require('cseng.agent.passk').summary(trials))
  s.cost = require('cseng.agent.ledger').run(trials)
  -- why the run stopped early (a string: max_cost, dead_endpoint, ...) and its details
  if finished and finished.stop_reason ~= nil then s.stop_reason, s.stop_detail = finished.stop_reason, finished.stop_detail end
  return s
end

--- Write the summary JSON beside the log (atomically).
function results.write_summary(events, path)
  local ok, err, code = fs.write(path, jsonl.encode(results.summary(events)) .. '\n')
  if not ok then errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err)) end
  return path
end

return results
