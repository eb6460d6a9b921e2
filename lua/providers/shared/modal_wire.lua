--- Modal's wire (for lua/providers/modal.lua and its specs): Modal's gRPC API over HTTP/2,
--- spoken by cseng's engine (lua/cseng/lib/grpc.lua over cseng.http; protobuf schemas in
--- providers/shared/modal_schema.lua): one RPC with the JS SDK's retries and headers, the auth
--- token, the App, the SandboxCreate request, a sandbox's task and command router, and a command
--- run on the router (TaskExecStart, TaskExecStdioRead streams, TaskExecWait).
local crypto = require('cseng.crypto')
local clock = require('cseng.clock')
local task = require('cseng.task')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local adapter = require('providers.shared.adapter')
local S = require('providers.shared.modal_schema')

local wire = {}

--- Settings (provider_config keys; the variable in brackets when there is one) and their defaults.
wire.DEFAULTS = {
  server_url = 'https://api.modal.com', -- [MODAL_SERVER_URL]
  environment = '',                     -- [MODAL_ENVIRONMENT]; '' = the workspace's default
  app = 'cseng',                        -- [MODAL_APP_NAME] the App sandboxes belong to
  create_app = true,                    -- false: look the App up only (NOT_FOUND is an error)
  image = 'python:3.12-slim',           -- [MODAL_IMAGE] registry tag (the seed's debian_slim 3.12)
  cpus = 2, memory_mb = 2048,           -- the seed arena's cpu=(2,2), memory=(2048,2048)
  region = 'us-east',                   -- [MODAL_REGION] scheduler placement; '' = anywhere
  timeout_secs = 300,                   -- sandbox lifetime (Modal terminates it after)
  client_type = 7,                      -- x-modal-client-type: CLIENT_TYPE_LIBMODAL (assumed accepted)
  client_version = '1.0.0',             -- x-modal-client-version, as the JS SDK sends
  builder_version = nil,                -- [MODAL_IMAGE_BUILDER_VERSION]; default: the environment's
  build = nil,                          -- [MODAL_BUILD] 'replay': no image builds, the recipe is replayed
  call_timeout = 60,                    -- seconds for one unary RPC
  retries = 3,                          -- more attempts of a unary RPC after a transient failure
  stream_grace = 5,                     -- seconds a stdio stream may outlast its command's end
  task_wait = 300,                      -- seconds to wait for a sandbox's task (scheduling)
}

-- gRPC status numbers -> names (the engine's codes are GRPC_<NAME>, except the two that stop a
-- run, which read as the HTTP codes every adapter returns for them).
local STATUS = { [0] = 'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE',
  'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED' }

--- The engine error code of a gRPC status (a number or a name).
---@param status integer|string
---@return string
function wire.status_code(status)
  local name = type(status) == 'number' and STATUS[status] or tostring(status)
  if name == 'UNAUTHENTICATED' then return 'HTTP_401' end
  if name == 'PERMISSION_DENIED' then return 'HTTP_403' end
  return 'GRPC_' .. name
end

--- Whether a URL's host is this machine (a loopback fake): its router is dialled in plaintext.
function wire.is_loopback(host)
  return host == 'localhost' or host == '127.0.0.1' or host == '::1' or host == '[::1]' or host == '172.21.0.1'
    or host:match('^127%.') ~= nil
end

--- scheme, host, port of an http(s) URL, or nil.
function wire.parse_url(url)
  local scheme, rest = tostring(url):match('^(https?)://([^/]+)/?$')
  if not scheme then return nil end
  local host, port = rest:match('^(%[[^%]]+%]):?(%d*)$')
  if not host then host, port = rest:match('^([^:]+):?(%d*)$') end
  if not host then return nil end
  return scheme, host, tonumber(port) or (scheme == 'https' and 443 or 80)
end
local parse_url = wire.parse_url

-- ---- the gRPC calls ------------------------------------------------------------------------

--- A random UUID (v4): idempotency keys, exec ids.
function wire.uuid()
  local h = crypto.hex(crypto.random_bytes(16))
  return string.format('%s-%s-4%s-%s-%s', h:sub(1, 8), h:sub(9, 12), h:sub(14, 16), h:sub(17, 20), h:sub(21, 32))
end

-- What the SDK retries (src/client.ts, retryableGrpcStatusCodes; its transport failures surface
-- as UNAVAILABLE). A deadline is not retried here: cseng's call timeouts are long on purpose.
wire.RETRIED = { GRPC_UNAVAILABLE = true, GRPC_INTERNAL = true, GRPC_UNKNOWN = true, GRPC_CANCELLED = true,
  ECONNRESET = true, EHTTP2 = true }
local RETRIED = wire.RETRIED

-- Transport failures of an HTTP/2 call that an HTTP/1.1-only server (or proxy) causes.
local H2_SUSPECT = { EHTTP2 = true, ECONNRESET = true, ECURL = true, EPROTO = true }

--- When an HTTP/2 call failed at the transport: ask base once more over HTTP/1.1; if that gets
--- an HTTP/1.1 answer, say so (gRPC needs HTTP/2). Returns text to append ('' if it tells nothing).
function wire.http1_diagnosis(base)
  local res = require('cseng.http').request { url = base .. '/', http_version = '1.1', timeout = 10 }
  if res and res.http_version ~= '2' then
    return string.format('; %s answers HTTP/%s only (GET / -> %d), and gRPC needs HTTP/2: is it a Modal gRPC '
      .. 'endpoint (MODAL_SERVER_URL), or is an HTTP/1.1 proxy in the way?', base, res.http_version, res.status)
  end
  return ''
end

local grpc -- lua/cseng/lib/grpc.lua, loaded on first use (the engine's gRPC client over HTTP/2)

--- One RPC. target: client.cp or a router {base, headers}. o: {timeout, on_message (server
--- streams: called with each decoded message; return false to stop)}. Returns the response
--- message (unary; {} for a stream) and the transport's info {timings, http_version}, or nil,
--- "modal: <Method>: <status>: <message>", CODE.
function wire.call(client, target, method, message, o)
  o = o or {}
  local m = assert(S.methods[method], method)
  grpc = grpc or require 'cseng.lib.grpc'
  local headers = util.copy(target.headers)
  if target == client.cp then
    if not m.stream then -- as the SDK's retry middleware sends them on unary calls (cseng does not retry)
      headers['x-idempotency-key'] = wire.uuid()
      headers['x-retry-attempt'] = '0'
    end
    if method ~= 'AuthTokenGet' then
      local token, err, code = wire.auth_token(client)
      if not token then return nil, err, code end
      headers['x-modal-auth-token'] = token
    end
  end
  local args = {
    url = target.base, service = m[1], method = method, request = message, request_schema = m[2],
    response_schema = m[3], metadata = headers, timeout = o.timeout or client.call_timeout,
    max_message = 64 << 20,
  }
  local res, err, code, info
  if m.stream then
    args.on_message = o.on_message
    res, err, code, info = grpc.server_stream(args)
    if res then return {}, res end
  else
    -- unary calls are retried on transient failures as the SDK's retry middleware does (3 more
    -- attempts, 100 ms doubling to 1 s; the same x-idempotency-key, x-retry-attempt counting)
    local delay = 0.1
    for attempt = 0, client.retries do
      if attempt > 0 then
        task.sleep(delay)
        delay = math.min(delay * 2, 1)
        if headers['x-retry-attempt'] then headers['x-retry-attempt'] = tostring(attempt) end
      end
      res, err, code, info = grpc.unary(args)
      if res then return res, err end
      if not RETRIED[code] then break end
    end
  end
  if info and info.status and info.status ~= 0 then
    code = wire.status_code(info.status)
    err = string.format('%s: %s', STATUS[info.status] or tostring(info.status), info.message or '')
  elseif H2_SUSPECT[code] then
    local why = wire.http1_diagnosis(target.base)
    if why ~= '' then err, code = tostring(err) .. why, 'EHTTP2' end
  end
  return nil, secrets.redact(string.format('modal: %s: %s', method, tostring(err))), code or 'EGRPC', info
end

--- The x-modal-auth-token (AuthTokenGet once per client; again when it is about to expire).
function wire.auth_token(client)
  local a = client.auth
  if a.token and a.expires > os.time() + 60 then return a.token end
  if a.pending then -- another task is fetching it
    while a.pending do task.sleep(0.01) end
    if a.token then return a.token end
  end
  a.pending = true
  local r, err, code = wire.call(client, client.cp, 'AuthTokenGet', {})
  a.pending = false
  if not r then
    if code == 'HTTP_401' or code == 'HTTP_403' then
      err = err .. ' (check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET)'
    end
    return nil, err, code
  end
  if not r.token or r.token == '' then return nil, 'modal: AuthTokenGet: the server returned no token', 'EPROTO' end
  secrets.add(r.token)
  a.token = r.token
  local payload = r.token:match('^[^.]+%.([^.]+)%.')
  local claims = payload and crypto.unbase64((payload:gsub('-', '+'):gsub('_', '/')) ..
    string.rep('=', (4 - #payload % 4) % 4))
  local ok, decoded = pcall(require('cjson').decode, claims or '')
  a.expires = ok and type(decoded) == 'table' and tonumber(decoded.exp) or (os.time() + 20 * 60)
  return a.token
end
local call = wire.call

-- ---- the App -------------------------------------------------------------------------------

--- fn() once per key for the client's life: concurrent callers of the same key wait for the
--- first one's answer (a failure is not cached: the next caller tries again).
function wire.once(client, key, fn)
  local c = client.once
  local e = c[key]
  if e and e.done then return e.value end
  if e then
    while not e.done and not e.failed do task.sleep(0.005) end
    if e.done then return e.value end
  end
  e = {}
  c[key] = e
  local v, err, code = fn()
  if v == nil then
    e.failed = true
    c[key] = nil
    return nil, err, code
  end
  e.value, e.done = v, true
  return v
end

--- The App's id (AppGetOrCreate; CREATE_IF_MISSING unless create_app = false), cached.
function wire.app_id(client)
  return wire.once(client, 'app', function() return wire.lookup_app(client) end)
end

--- AppGetOrCreate for the client's App.
function wire.lookup_app(client)
  local r, err, code = call(client, client.cp, 'AppGetOrCreate', {
    app_name = client.app, environment_name = client.environment,
    object_creation_type = client.create_app and 'OBJECT_CREATION_TYPE_CREATE_IF_MISSING' or 'OBJECT_CREATION_TYPE_UNSPECIFIED',
  })
  if not r then
    if code == 'GRPC_NOT_FOUND' then
      return nil, string.format('modal: app %q not found in environment %q (%s)', client.app,
        client.environment == '' and 'default' or client.environment, err), code
    end
    return nil, err, code
  end
  return r.app_id
end

-- ---- sandboxes ---------------------------------------------------------------------------

--- The tags of labels ({tag_name, tag_value}, sorted).
function wire.tags_of(labels)
  local tags = {}
  for k, v in pairs(labels or {}) do tags[#tags + 1] = { tag_name = k, tag_value = tostring(v) } end
  table.sort(tags, function(a, b) return a.tag_name < b.tag_name end)
  return tags
end

--- The SandboxCreate request for a spec.
function wire.create_request(client, app, image, spec)
  local env = spec.env and next(spec.env) and { contents = spec.env } or nil
  return {
    app_id = app, tags = wire.tags_of(spec.labels),
    definition = {
      image_id = image, timeout_secs = math.floor(tonumber(spec.ttl_seconds) or client.timeout_secs),
      workdir = spec.workdir,
      resources = { milli_cpu = math.floor((tonumber(spec.cpus) or client.cpus) * 1000),
                    memory_mb = math.floor(tonumber(spec.memory_mb) or client.memory_mb) },
      scheduler_placement = client.region ~= '' and { regions = { client.region } } or nil,
      network_access = { network_access_type = spec.network and 'OPEN' or 'BLOCKED' },
      environment_variables = env,
    },
  }
end

--- The sandbox's task id: SandboxGetTaskId polled (long polls of up to 10 s) until it has one; a
--- sandbox that ended first is an error naming its result.
function wire.task_id(client, sb)
  if sb.task_id then return sb.task_id end
  local deadline = clock.now() + client.task_wait * 1e9
  while true do
    local r, err, code = call(client, client.cp, 'SandboxGetTaskId', { sandbox_id = sb.id, timeout = 10 },
      { timeout = 40 })
    if not r then return nil, err, code end
    if r.task_id and r.task_id ~= '' then sb.task_id = r.task_id; return r.task_id end
    if r.task_result then
      return nil, string.format('modal: sandbox %s ended before it started: %s', sb.id,
        tostring(r.task_result.exception or r.task_result.status)), 'EGONE'
    end
    if clock.now() > deadline then
      return nil, 'modal: sandbox ' .. sb.id .. ' has no task after ' .. client.task_wait .. ' s', 'ETIMEDOUT'
    end
    task.sleep(0.1)
  end
end

--- The task's command router {base, headers} (TaskGetCommandRouterAccess), cached per sandbox.
--- Its URL is https; against a plaintext loopback server URL it is dialled in plaintext, as the SDK
--- does (a loopback server over TLS: over TLS too).
function wire.router(client, sb)
  local ro = client.routers[sb.id] or sb.router
  if ro then return ro end
  local tid, err, code = wire.task_id(client, sb)
  if not tid then return nil, err, code end
  local r
  r, err, code = call(client, client.cp, 'TaskGetCommandRouterAccess', { task_id = tid })
  if not r then return nil, err, code end
  local scheme, host, port = parse_url(r.url)
  if scheme ~= 'https' then return nil, 'modal: the task router URL must be https, got ' .. tostring(r.url), 'EPROTO' end
  secrets.add(r.jwt)
  local plain = client.loopback and client.server_url:match('^http://') ~= nil
  ro = { base = (plain and 'http://' or 'https://') .. host .. ':' .. port, task_id = tid,
         headers = { authorization = 'Bearer ' .. r.jwt } }
  client.routers[sb.id] = ro
  sb.router = ro
  return ro
end

--- Run `bash -c cmd` in the sandbox. opts: {cwd, env, timeout, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, signal, http_timings} or nil, message, CODE.
function wire.exec(client, sb, cmd, opts)
  opts = opts or {}
  local ro, err, code = wire.router(client, sb)
  if not ro then return nil, err, code end
  local t0 = clock.now()
  local exec_id = wire.uuid()
  local timeout = opts.timeout and math.max(1, math.ceil(opts.timeout)) or nil
  local _, info
  _, info, code = call(client, ro, 'TaskExecStart', {
    task_id = ro.task_id, exec_id = exec_id, command_args = { '/bin/bash', '-c', cmd },
    stdout_config = 'TASK_EXEC_STDOUT_CONFIG_PIPE', stderr_config = 'TASK_EXEC_STDERR_CONFIG_PIPE',
    timeout_secs = timeout, workdir = opts.cwd, env = opts.env and next(opts.env) and opts.env or nil,
  })
  if not _ then return nil, info, code end
  local ids = { task_id = ro.task_id, exec_id = exec_id }
  if opts.stdin then
    local data, off, chunk = opts.stdin, 0, 1 << 20
    repeat
      local piece = data:sub(off + 1, off + chunk)
      local ok, serr, scode = call(client, ro, 'TaskExecStdinWrite', { task_id = ids.task_id, exec_id = exec_id,
        offset = off, data = piece, eof = off + #piece >= #data })
      if not ok then return nil, serr, scode end
      off = off + #piece
    until off >= #data
  end
  local cap = opts.tail_bytes or (1 << 20)
  local bufs = { adapter.tail_buffer(cap), adapter.tail_buffer(cap) }
  local rpc_timeout = (timeout or 3600) + 60
  -- one stdio stream, read from st.got on; a stream that fails transiently is read again from
  -- the offset reached, as the SDK does. st.live = false makes a superseded stream drop data.
  local function read_stream(fd, st)
    local r, rerr, rcode
    for attempt = 0, client.retries do
      if attempt > 0 then task.sleep(0.1 * attempt) end
      r, rerr, rcode = call(client, ro, 'TaskExecStdioRead', { task_id = ids.task_id, exec_id = exec_id,
        offset = st.got, file_descriptor = fd == 1 and 'TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT'
          or 'TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR' },
        { timeout = rpc_timeout, on_message = function(m)
          if st.live and m.data then bufs[fd].add(m.data); st.got = st.got + #m.data end
        end })
      if r or not RETRIED[rcode] then break end
    end
    return r ~= nil, rerr, rcode
  end
  local streams = {}
  for fd = 1, 2 do
    local st = { got = 0, live = true }
    st.task = task.spawn(function()
      local ok, e, c = read_stream(fd, st)
      st.done, st.ok, st.err, st.code = true, ok, e, c
    end)
    streams[fd] = st
  end
  local w, werr, wcode
  repeat -- TaskExecWait answers DEADLINE_EXCEEDED after a while when the command still runs
    w, werr, wcode = call(client, ro, 'TaskExecWait', ids, { timeout = rpc_timeout })
  until w or wcode ~= 'GRPC_DEADLINE_EXCEEDED'
  -- The command has ended, so its streams end too. Debian's libcurl (7.88) now and then never
  -- reports the end of an HTTP/2 stream that has delivered everything: after a grace period the
  -- rest is read by a new stream from the offset reached (the old one is left to its deadline
  -- and its data dropped), which Modal's router serves as it serves the SDK's resumed reads.
  local grace = clock.now() + client.stream_grace * 1e9
  for fd = 1, 2 do
    local st = streams[fd]
    while w and not st.done and clock.now() < grace do task.sleep(0.01) end
    if not st.done then
      st.live = false
      local again = { got = st.got, live = true }
      st.ok, st.err, st.code = read_stream(fd, again)
      st.done, st.resumed = true, true
    end
  end
  local ook, oerr, ocode = streams[1].ok, streams[1].err, streams[1].code
  local eok, eerr, ecode = streams[2].ok, streams[2].err, streams[2].code
  if not w then return nil, werr, wcode end
  if not ook then return nil, oerr, ocode end
  if not eok then return nil, eerr, ecode end
  local elapsed = (clock.now() - t0) / 1e9
  local signal = w.signal
  local rc = w.code or (signal and 128 + signal) or 0
  return {
    code = rc, signal = signal, stdout = bufs[1].get(), stderr = bufs[2].get(), elapsed = elapsed,
    timed_out = timeout ~= nil and (signal ~= nil or rc == 137 or rc == -1) and elapsed >= timeout - 0.5,
    stdout_dropped = bufs[1].dropped(), stderr_dropped = bufs[2].dropped(), http_timings = info and info.timings,
  }
end

return wire
