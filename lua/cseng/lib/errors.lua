--- One error type for the Lua layer, built on the engine's task.error (module cseng.task):
--- a table {code, message, stage?, traceback?, ...} with the `cseng.error` metatable, whose
--- tostring is "[stage: ]message (code)". Lua code raises it with errors.raise and receives
--- failures as it (errors.from normalises what an adapter returned or anything else raised),
--- and branches on `code`, never on message text. Adapters and engine primitives keep the
--- documented `nil, message, CODE` returns (docs/providers/README.md, docs/ENGINE.md): the
--- callers turn those into errors with errors.check.
---
--- The codes are named here (every code the Lua tree uses), so a typo is a nil index that
--- luacheck and errors.code catch, not a new code.
local task = require 'cseng.task'

local errors = {}

--- Every code in use, by name. Engine codes (cseng.http, cseng.proc, cseng.fs, ...) are the
--- errno-like ones; the rest are the Lua layer's own.
errors.codes = {
  -- engine and transport
  'ECANCELED', 'ETIMEDOUT', 'ECONNREFUSED', 'ECONNRESET', 'ECONNECT', 'ENOENT', 'EISDIR', 'EFBIG',
  'EPROTO', 'EBUSY', 'EARCHIVE', 'EUNSAFE', 'ESYMLINK',
  -- providers
  'ECONFIG', 'EAPI', 'EBADRESPONSE', 'EDOCKER', 'ENOIMAGE', 'ENOSANDBOX', 'ESTATE', 'EPUT', 'ESNAPSHOT',
  'EARTIFACT',
  -- the run
  'EBUILD', 'ECREATE', 'EEXEC', 'ESTAGING', 'EPREPARE', 'EVERIFY', 'ESOLVETIME', 'EREADY', 'ENOWARM',
  'ECLEANUP', 'ELOG', 'EINTERNAL',
}
for _, c in ipairs(errors.codes) do errors[c] = c end

--- The code of an HTTP status outside 2xx: "HTTP_<status>" (adapter.request's convention).
---@param status integer
---@return string
function errors.http(status) return 'HTTP_' .. math.tointeger(status) end

local ERROR_MT = getmetatable(task.error('EINTERNAL'))

--- Whether v is an error object of this type.
function errors.is(v) return type(v) == 'table' and getmetatable(v) == ERROR_MT end

--- A new error: errors.new(code, message [, fields]) (fields: stage, and anything a record
--- should keep, e.g. usage, log).
---@param code string
---@param message? string
---@param fields? table
---@return table
function errors.new(code, message, fields)
  return task.error(code, message or code, fields)
end

--- Raise a new error (level 0: the message is not prefixed with a position).
---@param code string
---@param message? string
---@param fields? table
function errors.raise(code, message, fields)
  error(errors.new(code, message, fields), 0)
end

--- Any error value as an error object: an error object as it is; a table of another shape
--- ({message|[1], code, stage, ...}) with its fields kept; a string (or anything) with
--- `default_code` (EINTERNAL if none). A string's "\nstack traceback:" tail becomes the
--- traceback field.
---@param e any
---@param default_code? string
---@return table
function errors.from(e, default_code)
  if errors.is(e) then
    if e.code == nil then e.code = default_code or errors.EINTERNAL end
    return e
  end
  if type(e) == 'table' then
    local fields = {}
    for k, v in pairs(e) do if type(k) == 'string' then fields[k] = v end end
    local msg = e.message or e[1]
    if type(msg) == 'table' then msg = msg.message end -- {message, log} from a build
    local code = type(e.code) == 'string' and e.code or default_code or errors.EINTERNAL
    return errors.new(code, msg ~= nil and tostring(msg) or code, fields)
  end
  local s = tostring(e)
  local msg, tb = s:match('^(.-)\n(stack traceback:.*)$')
  return errors.new(default_code or errors.EINTERNAL, msg or s, { traceback = tb })
end

--- The error of a `nil, message, CODE[, res]` return: an error object with the stage, and a
--- prefix before the message. A message that is itself a table ({message, log}) keeps `log`.
---@param message any
---@param code? string
---@param fields? table stage, prefix (prepended to the message), default_code
---@return table
function errors.returned(message, code, fields)
  fields = fields or {}
  local msg, extra = message, {}
  if type(message) == 'table' then
    msg = message.message or message[1]
    for k, v in pairs(message) do if type(k) == 'string' and k ~= 'message' and k ~= 'code' then extra[k] = v end end
    code = code or message.code
  end
  for k, v in pairs(fields) do if k ~= 'prefix' and k ~= 'default_code' then extra[k] = v end end
  return errors.new(code or fields.default_code or errors.EINTERNAL, (fields.prefix or '') .. tostring(msg), extra)
end

--- Check a `value, message, CODE` return: the value, or raise errors.returned(...). The
--- fields come first so the call's results can be passed whole:
---   local res = errors.check({ stage = 'verify' }, ctx:exec(cmd, o))
---@param fields table|nil as for errors.returned
---@param value any
---@param message any
---@param code? string
function errors.check(fields, value, message, code, ...)
  if value then return value, message, code, ... end
  error(errors.returned(message, code, fields), 0)
end

--- Whether e is the cancellation (Ctrl-C, a timeout watchdog, a cancelled task).
function errors.is_cancel(e) return type(e) == 'table' and e.code == errors.ECANCELED end

--- message, code of any error value (message without the stage prefix).
---@return string message, string? code
function errors.describe(e)
  if type(e) == 'table' then
    if e.code == errors.ECANCELED then return 'cancelled', errors.ECANCELED end
    local m = e.message or e[1]
    if m == nil then
      local ok, s = pcall(require('cjson').encode, e)
      m = ok and s or tostring(e)
    end
    return tostring(m), e.code
  end
  return tostring(e), nil
end

--- The one line a command prints for an error: the message of a structured error, the
--- string itself otherwise (never a traceback).
function errors.line(e)
  if type(e) == 'table' then return (errors.describe(e)) end
  return (tostring(e):gsub('\nstack traceback:.*$', ''))
end

--- errors.code('EVERIFY') -> 'EVERIFY'; an unknown name raises (a typo is caught at once).
function errors.code(name)
  local c = rawget(errors, name)
  if type(c) ~= 'string' or not (name:match('^E[A-Z0-9_]+$')) then error('unknown error code ' .. tostring(name), 2) end
  return c
end

return errors
