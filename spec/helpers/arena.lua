--- The arena harness the startup specs share (not a spec: no _spec in the name): the startup run
--- kind in this process with its stderr captured and its log's events grouped by kind, the fakes
--- a spec starts closed at its end, and the accounting every run must balance.
---   local A = require 'spec.helpers.arena'
---   teardown(A.close_fakes)
---   local f = A.started(fake.start { ... })           -- closed by A.close_fakes
---   local status, by, errtext, info, events = A.run({ providers = ..., samples = 6 }, 'arena-modes-')
---   A.assert_accounted(by, 12)                        -- every allocated sandbox destroyed
---   A.measured(by, 'b')                               -- b's startup trials, warmups left out
local results = require('cseng.results.log')
local frame = require('cseng.run.frame')
local present = require('cseng.cli.present')
local H = require('spec.helpers.common')

local A = {}

--- A stand-in for io.stderr that keeps what is written (sink.text).
---@return table
function A.capture()
  local sink = { text = '' }
  function sink:write(...)
    for _, s in ipairs({ ... }) do self.text = self.text .. tostring(s) end
  end
  return sink
end

local started = {}

--- Remember a started fake so A.close_fakes closes it; returns it.
---@generic F
---@param f F
---@return F
function A.started(f)
  started[#started + 1] = f
  return f
end

--- Close every fake A.started was given (for teardown).
function A.close_fakes()
  for i = #started, 1, -1 do
    pcall(started[i].close)
    started[i] = nil
  end
end

--- Run the arena (frame.run('startup', opts)) in this process, quiet, into a temporary folder
--- (unless opts.output names one), with short cleanup backoffs (unless opts.cleanup_backoff),
--- its stderr captured. Returns the status, the log's events by kind (by.allocated, ...; a kind
--- absent is an empty list), the stderr text, what frame.run returned after the status, and
--- the events in log order.
---@param opts table the startup kind's options
---@param prefix? string the temporary folder's prefix (default "arena-")
---@return integer status
---@return table by
---@return string errtext
---@return table info
---@return table[] events
function A.run(opts, prefix)
  opts.output = opts.output or H.tempdir(prefix or 'arena-')
  opts.quiet = true
  opts.cleanup_backoff = opts.cleanup_backoff or { 0.01, 0.02 }
  opts.stderr = A.capture()
  local status, info = frame.run('startup', present.attach(opts, { err = opts.stderr }))
  local events = results.read(info.jsonl)
  local by = setmetatable({}, { __index = function(t, k) local l = {}; rawset(t, k, l); return l end })
  for _, e in ipairs(events) do table.insert(by[e.event], e) end
  return status, by, opts.stderr.text, info, events
end

--- Every sandbox the log says was allocated (once) has a destroyed or a cleanup_failed record,
--- never both, and nothing was closed that was not allocated; keyed by provider and id (two
--- providers may use the same id scheme). With n: exactly n were allocated and every one was
--- destroyed (no cleanup_failed). Returns {["provider/id"] = "destroyed"|"cleanup_failed"}.
---@param by table events by kind (A.run)
---@param n? integer
---@return table<string, string>
function A.assert_accounted(by, n)
  local closed = {}
  for _, e in ipairs(by.destroyed) do closed[e.provider .. '/' .. e.sandbox_id] = 'destroyed' end
  for _, e in ipairs(by.cleanup_failed) do
    local k = e.provider .. '/' .. e.sandbox_id
    assert(not closed[k], k .. ' has both a destroyed and a cleanup_failed record')
    closed[k] = 'cleanup_failed'
  end
  local seen = {}
  for _, a in ipairs(by.allocated) do
    local k = a.provider .. '/' .. a.sandbox_id
    assert(not seen[k], k .. ' allocated twice')
    seen[k] = true
    assert(closed[k], 'allocated sandbox ' .. k .. ' has neither a destroyed nor a cleanup_failed record')
  end
  for k in pairs(closed) do assert(seen[k], k .. ' closed but never allocated') end
  if n then
    assert(#by.allocated == n, string.format('%d sandboxes allocated, expected %d', #by.allocated, n))
    assert(#by.cleanup_failed == 0, string.format('%d cleanup_failed records, expected none', #by.cleanup_failed))
  end
  return closed
end

--- The measured startup trials (warmups left out), of one provider or of all.
---@param by table events by kind (A.run)
---@param provider? string
---@return table[]
function A.measured(by, provider)
  local out = {}
  for _, t in ipairs(by.startup_trial) do
    if not t.warmup and (provider == nil or t.provider == provider) then out[#out + 1] = t end
  end
  return out
end

return A
