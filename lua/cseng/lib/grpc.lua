--- gRPC over HTTP/2 on cseng.http and cseng.protobuf: unary and server-streaming calls
--- (github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md). Small on purpose: no client
--- streaming, no compression (no grpc-accept-encoding is sent, so servers do not compress).
---
---   local grpc = require 'cseng.lib.grpc'
---   local res, info = grpc.unary { url = 'http://127.0.0.1:8080', service = 'pkg.Svc', method = 'Get',
---     request = { id = 'x' }, request_schema = S.GetRequest, response_schema = S.GetResponse,
---     metadata = { ['x-token'] = 't' }, timeout = 30 }
---   if not res then -- info.err, info.code: 'GRPC_NOT_FOUND', 'GRPC_UNAUTHENTICATED', 'ECONNREFUSED', ...
---
--- Errors return nil, message, code, info. code is 'GRPC_<STATUS NAME>' for a gRPC status other
--- than OK (grpc.CODES), or cseng.http's code for a transport failure (ECONNREFUSED, ETLS,
--- EHTTP2, ...), except that the call's deadline passing is always 'GRPC_DEADLINE_EXCEEDED'.
--- grpc.is_auth_failure(code) is true for GRPC_UNAUTHENTICATED and GRPC_PERMISSION_DENIED
--- (grpc.HTTP_EQUIVALENT maps them to 'HTTP_401' / 'HTTP_403' for callers that stop on those).
local http = require('cseng.http')
local protobuf = require('cseng.protobuf')
local errors = require('cseng.lib.errors')

local grpc = {}

--- gRPC status numbers -> names (the engine codes are 'GRPC_' .. name).
grpc.STATUS = { [0] = 'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE',
  'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED' }

--- Engine error code of each status: grpc.CODES[16] == 'GRPC_UNAUTHENTICATED'.
grpc.CODES = {}
for n, name in pairs(grpc.STATUS) do grpc.CODES[n] = 'GRPC_' .. name end

--- The HTTP codes callers already stop on for authentication/authorization failures.
grpc.HTTP_EQUIVALENT = { GRPC_UNAUTHENTICATED = 'HTTP_401', GRPC_PERMISSION_DENIED = 'HTTP_403' }

---@param code string?
---@return boolean
function grpc.is_auth_failure(code)
  return code == 'GRPC_UNAUTHENTICATED' or code == 'GRPC_PERMISSION_DENIED'
end

-- HTTP status -> gRPC status when a response carries no grpc-status (PROTOCOL-HTTP2.md,
-- "HTTP to gRPC Status Code Mapping").
local HTTP_TO_GRPC = { [400] = 13, [401] = 16, [403] = 7, [404] = 12, [429] = 14, [502] = 14, [503] = 14, [504] = 14 }

local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = (a << 16) | ((b or 0) << 8) | (c or 0)
    local q = { B64:sub((n >> 18) + 1, (n >> 18) + 1), B64:sub(((n >> 12) & 63) + 1, ((n >> 12) & 63) + 1),
      b and B64:sub(((n >> 6) & 63) + 1, ((n >> 6) & 63) + 1) or '=', c and B64:sub((n & 63) + 1, (n & 63) + 1) or '=' }
    out[#out + 1] = table.concat(q)
  end
  return (table.concat(out):gsub('=+$', '')) -- gRPC's -bin values: unpadded base64
end

local function percent_decode(s)
  return (s:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

--- The grpc-timeout header value for a number of seconds (at most 8 digits and a unit).
---@param seconds number
---@return string
function grpc.timeout_header(seconds)
  local ms = math.ceil(seconds * 1000)
  if ms <= 99999999 then return string.format('%dm', ms) end
  return string.format('%dS', math.min(math.ceil(seconds), 99999999))
end

local function headers_of(opts)
  local h = { ['content-type'] = 'application/grpc', te = 'trailers', ['user-agent'] = 'cseng-grpc/1' }
  for k, v in pairs(opts.metadata or {}) do
    local name = tostring(k):lower()
    if name:sub(1, 1) == ':' or name == 'content-type' or name == 'te' or name == 'grpc-timeout' then
      errors.raise(errors.EINVAL, 'grpc: metadata may not set ' .. name)
    end
    v = tostring(v)
    if name:sub(-4) == '-bin' then v = base64(v) end
    h[name] = v
  end
  if opts.timeout and opts.timeout > 0 then h['grpc-timeout'] = grpc.timeout_header(opts.timeout) end
  return h
end

local function check_opts(opts)
  if type(opts) ~= 'table' then errors.raise(errors.EINVAL, 'grpc: opts must be a table') end
  for _, k in ipairs({ 'url', 'service', 'method' }) do
    if type(opts[k]) ~= 'string' then errors.raise(errors.EINVAL, 'grpc: opts.' .. k .. ' must be a string, got ' .. type(opts[k])) end
  end
  for _, k in ipairs({ 'request_schema', 'response_schema' }) do
    if type(opts[k]) ~= 'table' then errors.raise(errors.EINVAL, 'grpc: opts.' .. k .. ' must be a message schema, got ' .. type(opts[k])) end
  end
  if opts.request ~= nil and type(opts.request) ~= 'table' then
    errors.raise(errors.EINVAL, 'grpc: opts.request must be a table, got ' .. type(opts.request))
  end
end

-- The call's status from trailers (or the headers of a trailers-only response), else from HTTP.
local function status_of(res)
  local s = res.trailers['grpc-status'] or res.headers['grpc-status']
  local msg = res.trailers['grpc-message'] or res.headers['grpc-message']
  if s then return tonumber(s) or 2, msg and percent_decode(msg) or '' end
  if res.status ~= 200 then
    return HTTP_TO_GRPC[res.status] or 2, 'HTTP ' .. res.status .. ' without a grpc-status'
  end
  return 13, 'the response ended without a grpc-status'
end

-- One RPC; on_frame(payload) handles each response message (streaming), else frames are kept.
local function call(opts, on_frame)
  check_opts(opts)
  local what = opts.service .. '/' .. opts.method
  local path = opts.url:gsub('/+$', '') .. '/' .. opts.service .. '/' .. opts.method
  local body = protobuf.frame(protobuf.encode(opts.request_schema, opts.request or {}))
  local max = opts.max_message or (4 << 20)
  local info = { messages = 0 }
  local buf, frames, failure = '', {}, nil
  local res, err, code = http.request {
    url = path, method = 'POST', body = body, headers = headers_of(opts),
    http_version = opts.http_version or '2', timeout = opts.timeout or 0, connect_timeout = opts.connect_timeout,
    insecure = opts.insecure, unix_socket = opts.unix_socket,
    stream = function(chunk)
      buf = buf .. chunk
      local list, used_or_err = protobuf.deframe(buf, max)
      if not list then
        failure = { what .. ': ' .. used_or_err, 'GRPC_INTERNAL' }
        return false
      end
      buf = buf:sub(used_or_err + 1)
      for _, payload in ipairs(list) do
        info.messages = info.messages + 1
        if on_frame then
          local ok, e2, c2 = on_frame(payload)
          if ok == false then
            failure = e2 and { what .. ': ' .. e2, c2 or 'GRPC_INTERNAL' } or 'stopped'
            return false
          end
        else
          frames[#frames + 1] = payload
        end
      end
    end }
  if not res then
    if failure == 'stopped' then
      info.stopped = true
      return frames, info
    end
    if failure then
      info.err, info.code = failure[1], failure[2]
      return nil, info.err, info.code, info
    end
    if code == 'ETIMEDOUT' and opts.timeout and opts.timeout > 0 then
      code, err = 'GRPC_DEADLINE_EXCEEDED', err .. ' (the call\'s deadline of ' .. opts.timeout .. ' s)'
    end
    info.err, info.code = what .. ': ' .. err, code
    return nil, info.err, info.code, info
  end
  info.http_status, info.headers, info.trailers = res.status, res.headers, res.trailers
  info.timings, info.http_version = res.timings, res.http_version
  local status, message = status_of(res)
  info.status, info.message = status, message
  if status ~= 0 then
    info.code = grpc.CODES[status] or 'GRPC_UNKNOWN'
    info.err = string.format('%s: %s: %s', what, grpc.STATUS[status] or ('status ' .. status), message)
    return nil, info.err, info.code, info
  end
  if buf ~= '' then
    info.code, info.err = 'GRPC_INTERNAL', what .. ': the response ended inside a message frame'
    return nil, info.err, info.code, info
  end
  local ct = res.headers['content-type'] or ''
  if ct:sub(1, 16) ~= 'application/grpc' then
    info.code, info.err = 'GRPC_UNKNOWN', what .. ': the response is not gRPC (content-type ' .. ct .. ')'
    return nil, info.err, info.code, info
  end
  return frames, info
end

---@class grpc.Info
---@field status integer gRPC status (0 = OK)
---@field message string grpc-message, percent-decoded
---@field http_status integer
---@field http_version string
---@field headers table<string,string> response headers
---@field trailers table<string,string> response trailers
---@field timings {dns:number, connect:number, tls:number, ttfb:number, total:number} cseng.http's
---@field messages integer response messages received
---@field stopped boolean? on_message returned false
---@field err string? the error message, when the call failed
---@field code string? the error code, when the call failed

---@class grpc.Opts
---@field url string base URL: 'http://127.0.0.1:8080' (h2c with prior knowledge) or 'https://host' (ALPN)
---@field service string full service name, e.g. 'modal.client.ModalClient'
---@field method string e.g. 'SandboxCreate'
---@field request? table the request message (default {})
---@field request_schema table cseng.protobuf schema
---@field response_schema table cseng.protobuf schema
---@field metadata? table<string,string|number> extra headers (names lowercased; '-bin' values base64-encoded)
---@field timeout? number seconds: the call's deadline (grpc-timeout and the HTTP timeout); default none
---@field connect_timeout? number
---@field insecure? boolean skip TLS verification
---@field unix_socket? string
---@field http_version? string default '2'
---@field max_message? integer largest response message (default 4 MiB)
---@field defaults? boolean decode with protobuf defaults filled in

--- A unary RPC: the response message, or nil, message, code, info.
---@param opts grpc.Opts
---@return table? response
---@return grpc.Info|string info_or_err
---@return string? code
---@return grpc.Info? info
function grpc.unary(opts)
  local frames, info, code, info2 = call(opts)
  if not frames then return nil, info, code, info2 end
  if #frames ~= 1 then
    info.code = 'GRPC_INTERNAL'
    info.err = string.format('%s/%s: a unary call got %d response messages', opts.service, opts.method, #frames)
    return nil, info.err, info.code, info
  end
  local msg, err = protobuf.decode(opts.response_schema, frames[1], { defaults = opts.defaults })
  if not msg then
    info.code, info.err = 'GRPC_INTERNAL', opts.service .. '/' .. opts.method .. ': bad response message: ' .. err
    return nil, info.err, info.code, info
  end
  return msg, info
end

--- A server-streaming RPC: opts.on_message(msg) is called (in this task; it may yield) for each
--- response message as it arrives; returning false stops the call (info.stopped), returning
--- false, message [, code] fails it. Returns info, or nil, message, code, info.
---@param opts grpc.Opts|{on_message: fun(msg: table): (boolean?, string?, string?)}
---@return grpc.Info|nil info
---@return string? err
---@return string? code
---@return grpc.Info? info
function grpc.server_stream(opts)
  if type(opts) ~= 'table' or type(opts.on_message) ~= 'function' then
    errors.raise(errors.EINVAL, 'grpc.server_stream: opts.on_message must be a function')
  end
  local frames, info, code, info2 = call(opts, function(payload)
    local msg, err = protobuf.decode(opts.response_schema, payload, { defaults = opts.defaults })
    if not msg then return false, 'bad response message: ' .. err, 'GRPC_INTERNAL' end
    return opts.on_message(msg)
  end)
  if not frames then return nil, info, code, info2 end
  return info
end

return grpc
