--- One error type for the Lua layer, built on the engine's task.error (module cseng.task):
--- a table {code, message, stage?, traceback?, ...} with the `cseng.error` metatable, whose
--- tostring is "[stage: ]message (code)". Lua code raises it with errors.raise and receives
--- failures as it (errors.from normalises what an adapter returned or anything else raised),
--- and branches on `code`, never on message text. Adapters and engine primitives keep the
--- documented `nil, message, CODE` returns (docs/providers/README.md, docs/ENGINE.md): the
--- callers turn those into errors with errors.check.
---
--- The codes are named here (every code the Lua tree uses), so a typo is a nil index that
--- luacheck and errors.code catch, not a new code. Classification lives here too
--- (errors.is_auth, errors.is_transient, errors.maybe_created), and the one usage error
--- (errors.usage: EUSAGE, exit status 2).
local task = require('cseng.task')

local errors = {}

--- Every code in use, with its one-line meaning (the registry: spec/lib/errors_spec.lua
--- fails on a code literal in lua/ or plans/ that is not here). Engine codes (cseng.http,
--- cseng.proc, cseng.fs, ...) are the errno-like ones; the rest are the Lua layer's own.
--- Two families are registered by pattern (errors.families): HTTP_<status> and GRPC_<NAME>.
errors.registry = {
  -- engine and transport
  { 'ECANCELED', 'the task was cancelled (Ctrl-C, a timeout watchdog, a cancelled task)' },
  { 'ETIMEDOUT', 'an operation or a trial ran past its timeout' },
  { 'ECONNREFUSED', 'the connection was refused (nothing listens there)' },
  { 'ECONNRESET', 'the connection was closed or reset before a whole answer arrived' },
  { 'ECONNECT', 'a Connect-protocol (gRPC-web style) stream frame was malformed' },
  { 'ENOTFOUND', 'a host name did not resolve' },
  { 'EHOSTUNREACH', 'the host or its network is unreachable' },
  { 'EHOST', 'this machine\'s host name could not be read' },
  { 'ETLS', 'the TLS handshake or certificate check failed' },
  { 'EHTTP2', 'HTTP/2 was required and the server did not speak it' },
  { 'EBODY', 'a response body was larger than its cap (CSENG_MAX_RESPONSE_BYTES)' },
  { 'EABORTED', 'a transfer was stopped by its stream callback' },
  { 'EREDIRECT', 'too many redirects' },
  { 'EURL', 'a URL is malformed or of an unsupported scheme' },
  { 'ECURL', 'another libcurl failure (the message names it)' },
  { 'ECLOSED', 'the server (cseng.serve) is closed' },
  { 'EPIPE', 'the peer (a client connection, a pipe) is closed' },
  { 'EOF', 'a stream ended before what was asked of it arrived (a child\'s stdout closed before a whole line)' },
  { 'EADDRINUSE', 'the address to listen on is in use' },
  { 'EPROTO', 'an answer broke its protocol (a 2xx body that is not JSON, a bad frame)' },
  { 'EPROTOBUF', 'a protobuf message or gRPC frame could not be decoded' },
  { 'EGRPC', 'a gRPC call failed without a gRPC status' },
  { 'ENOENT', 'no such file, directory, executable or remote path' },
  { 'ENOTDIR', 'a path component is not a directory' },
  { 'EISDIR', 'a path is a directory where a file was expected' },
  { 'EEXIST', 'a path exists already' },
  { 'EACCES', 'permission denied by the file system' },
  { 'EPERM', 'the operation is not permitted (a signal, a mount)' },
  { 'ESRCH', 'no such process' },
  { 'EIO', 'an input/output failure (writing, copying, extracting files)' },
  { 'ENOSPC', 'no space left on the device' },
  { 'ENOTEMPTY', 'a directory to remove is not empty' },
  { 'EROFS', 'the file system is read-only' },
  { 'ENAMETOOLONG', 'a file name is too long' },
  { 'ELOOP', 'too many symbolic links in a path' },
  { 'EXDEV', 'a rename across file systems' },
  { 'EMFILE', 'too many open files' },
  { 'ENOMEM', 'out of memory' },
  { 'EAGAIN', 'try again: a file changed while it was read' },
  { 'EINVAL', 'an invalid argument or value (misuse of an API, bad encoded input)' },
  { 'ENOTSUP', 'the operation is not supported here' },
  { 'EFBIG', 'a file or output is larger than its limit' },
  { 'ELIMIT', 'an archive is over a limit (entries, uncompressed bytes)' },
  { 'EBUSY', 'a resource is busy (a cgroup, a mount)' },
  { 'EARCHIVE', 'an archive is corrupt or cannot be written' },
  { 'EUNSAFE', 'an archive entry or path would escape its directory, or an id read from a log is not its provider\'s' },
  { 'ESYMLINK', 'a path goes through a symbolic link' },
  { 'EMOUNT', 'a mount (overlayfs) failed' },
  { 'ESTALE', 'a sandbox known only by its id (from a log) cannot run commands: its namespaces belonged to the process that made it' },
  { 'ESQLITE', 'an SQLite statement failed (the message says why: a syntax error, a missing table)' },
  { 'ECORRUPT', 'a database file is corrupt, not a database, or of another schema' },
  { 'ECONSTRAINT', 'a database constraint was violated (a duplicate key)' },
  -- input and the command line
  { 'EUSAGE', 'the command line is wrong (exit status 2)' },
  { 'EDATASET', 'a dataset file, row or field is invalid' },
  { 'EPARSE', 'a file (TOML, JSON, JSON Lines, a template) cannot be parsed' },
  { 'EPLAN', 'a plan or a report template is invalid' },
  { 'ENOTRUN', 'a file is not a cseng run log or summary' },
  -- providers
  { 'ECONFIG', 'a provider or solver setting is missing or invalid' },
  { 'EAUTH', 'authentication failed (a credential was refused)' },
  { 'EAPI', 'a vendor API or model call failed' },
  { 'EBADRESPONSE', 'a vendor answer lacks what it must carry (an id, a field)' },
  { 'EDOCKER', 'dockerd failed an operation' },
  { 'ENOIMAGE', 'the image or template is absent and cannot be fetched' },
  { 'ENOSANDBOX', 'the sandbox is gone' },
  { 'EGONE', 'the sandbox\'s process ended before the call' },
  { 'EBOOT', 'a sandbox did not come up (it was shut down while starting)' },
  { 'ESTATE', 'a sandbox or build is in a state the call cannot use' },
  { 'EPUT', 'uploading files into a sandbox failed' },
  { 'ESNAPSHOT', 'taking or using a snapshot failed' },
  { 'EARTIFACT', 'a warm artifact is missing or unusable' },
  { 'EPROTOC', 'protoc failed to compile a schema' },
  -- the run
  { 'EBUILD', 'building a task\'s environment failed (the message names the Dockerfile line)' },
  { 'ECREATE', 'creating a sandbox failed' },
  { 'EEXEC', 'running a command in a sandbox failed' },
  { 'ESTAGING', 'staging the task\'s files failed' },
  { 'EPREPARE', 'preparing the task (its recipe or artifact) failed' },
  { 'ENONETWORK', 'an installed agent\'s model endpoint cannot be reached from inside the sandbox (no network to it)' },
  { 'EVERIFY', 'the verifier could not be run or read' },
  { 'ESOLVETIME', 'the solver ran past its time budget' },
  { 'EREADY', 'the readiness check did not print its marker' },
  -- the arena's primitives (lua/cseng/run/workloads/)
  { 'EINTACT', 'bytes or files that arrived differ from what was sent or kept (a hash, a count, a restored or resumed state)' },
  { 'EPAUSE', 'pausing or resuming a sandbox failed' },
  { 'EFORK', 'forking a sandbox failed' },
  { 'EEGRESS', 'a fetch from inside the sandbox failed (no connection, or an HTTP status other than 200)' },
  { 'ETOOLS', 'the sandbox lacks a tool a workload needs (git, make, a C compiler; curl or python3)' },
  { 'ENOWARM', 'warm mode without a warm artifact' },
  { 'ECLEANUP', 'destroying a sandbox failed; the session stops allocating' },
  { 'ESANDBOX', 'the sandbox died under the solver (retriable)' },
  { 'ELOG', 'the run log could not be written (a full disk): the session stops allocating' },
  { 'EINTERNAL', 'an error that carried no code (a bug, or a raised string)' },
}

--- The code families registered by pattern, with their meaning.
errors.families = {
  { '^HTTP_%d%d%d$', 'an HTTP status outside 2xx (adapter.request)' },
  { '^GRPC_[A-Z_]+$', 'a gRPC status other than OK (cseng.lib.grpc)' },
}

errors.codes, errors.meaning = {}, {}
for _, c in ipairs(errors.registry) do
  errors.codes[#errors.codes + 1] = c[1]
  errors.meaning[c[1]] = c[2]
  errors[c[1]] = c[1]
end

--- Whether a code is registered (by name or by family).
---@param code any
---@return boolean
function errors.registered(code)
  if type(code) ~= 'string' then return false end
  if errors.meaning[code] then return true end
  for _, f in ipairs(errors.families) do if code:match(f[1]) then return true end end
  return false
end

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

--- The code of an error value, or a code itself: a string is taken as a code (the
--- classifiers below are called with codes and with errors alike).
local function code_of(e)
  if type(e) == 'table' then return type(e.code) == 'string' and e.code or nil end
  return type(e) == 'string' and e or nil
end

--- Whether an error (or a code) is an authentication or permission failure: no retry helps,
--- a run stops allocating on it.
---@param e any an error value or a code
---@return boolean
function errors.is_auth(e)
  local code = code_of(e)
  return code == 'HTTP_401' or code == 'HTTP_403' or code == 'GRPC_UNAUTHENTICATED' or code == 'GRPC_PERMISSION_DENIED'
    or code == errors.EAUTH
end

--- Whether an error (or a code) is transient, so a retry may succeed: 5xx, 429, 408, resets,
--- timeouts, refused or unreachable connections, malformed answers. Not DNS (ENOTFOUND), auth
--- or another 4xx.
---@param e any an error value or a code
---@return boolean
function errors.is_transient(e)
  local code = code_of(e)
  if code == nil then return false end
  local st = tonumber(code:match('^HTTP_(%d+)$'))
  if st then return st >= 500 or st == 429 or st == 408 end
  return code == errors.ECONNRESET or code == errors.ETIMEDOUT or code == errors.ECONNREFUSED
    or code == errors.EHOSTUNREACH or code == 'GRPC_UNAVAILABLE' or code == 'GRPC_DEADLINE_EXCEEDED'
    or code == errors.EBADRESPONSE or code == errors.EPROTO
end

--- Whether a create that failed with this error (or code) may have created a sandbox all the
--- same (its answer was lost: a reset, a timeout, a malformed or id-less body, a 5xx, a
--- cancellation, no code at all): everything but a refusal (4xx, auth, a bad configuration, a
--- missing image, a name that does not resolve, a refused connection).
---@param e any an error value or a code
---@return boolean
function errors.maybe_created(e)
  local code = code_of(e)
  if code == nil then return true end
  if errors.is_auth(code) or code == errors.ECONFIG or code == errors.ENOIMAGE or code == errors.ENOTFOUND
    or code == errors.EURL or code == errors.ECONNREFUSED then return false end
  local st = tonumber(code:match('^HTTP_(%d+)$'))
  if st then return st >= 500 or st == 408 end
  return true
end

--- A usage error (EUSAGE): the one shape of a wrong command line. exit.fail prints it as one
--- line "cseng: message" and the command exits 2.
---@param message string
---@return table
function errors.usage(message) return errors.new(errors.EUSAGE, message) end

--- Whether e is a usage error (EUSAGE).
function errors.is_usage(e) return type(e) == 'table' and e.code == errors.EUSAGE end

--- message, code of any error value (message without the stage prefix). Every error has a
--- registered code: a raised string, or a table without one, is EINTERNAL (so a trial record
--- never carries error_code = nil).
---@return string message, string code
function errors.describe(e)
  if type(e) == 'table' then
    if e.code == errors.ECANCELED then return 'cancelled', errors.ECANCELED end
    local m = e.message or e[1]
    if m == nil then
      local ok, s = pcall(require('cjson').encode, e)
      m = ok and s or tostring(e)
    end
    return tostring(m), code_of(e) or errors.EINTERNAL
  end
  return tostring(e), errors.EINTERNAL
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
  if type(c) ~= 'string' or not (name:match('^E[A-Z0-9_]+$')) then errors.raise(errors.EINVAL, 'unknown error code ' .. tostring(name)) end
  return c
end

return errors
