--- Infra vs agent failure: after a solve that failed (raised, returned non-zero, or timed out), a
--- health probe runs `true` in the sandbox. If the sandbox cannot run it (the exec fails, or it
--- does not exit 0 within the probe timeout) the sandbox died: the trial is an infrastructure
--- error (outcome `error`, code ESANDBOX, `retriable = true`, so --retry-errors reruns it), not an
--- agent failure. Otherwise the agent's failure stands and the verifier decides.
local errors = require('cseng.lib.errors')

local probe = {}

probe.TIMEOUT = 30 -- seconds the probe may take

--- Whether a solve result (or a raised solve error) calls for a probe.
---@param ok boolean did the solver return
---@param r any the result or the error
---@return boolean
function probe.needed(ok, r)
  if not ok then return not errors.is_cancel(r) end
  r = r or {}
  return r.timed_out == true or (r.return_code ~= nil and r.return_code ~= 0 and not r.skipped)
end

--- Run the probe. Returns true when the sandbox answers, else false and what the probe saw.
---@param ctx table the solve context (ctx:exec)
---@return boolean alive, string|nil detail
function probe.alive(ctx)
  local ok, res, err, code = pcall(ctx.exec, ctx, 'true', { timeout = probe.TIMEOUT, cwd = '/' })
  if not ok then
    if errors.is_cancel(res) then error(res, 0) end
    return false, 'the probe raised: ' .. errors.line(res)
  end
  if not res then return false, string.format('the probe could not run: %s (%s)', tostring(err), tostring(code)) end
  if res.timed_out then return false, 'the probe timed out' end
  if res.code ~= 0 then return false, 'the probe exited ' .. tostring(res.code) end
  return true
end

--- The error that replaces a failed solve when the probe says the sandbox died.
---@param detail string
---@param cause? table|string what the solver raised, when it raised
function probe.error(detail, cause)
  local why = cause ~= nil and (' (the solver saw: ' .. errors.line(cause) .. ')') or ''
  return errors.new(errors.ESANDBOX, 'the sandbox died during the solve: ' .. detail .. why,
    { stage = 'solve', retriable = true })
end

return probe
