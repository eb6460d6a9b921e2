--- The Modal provider: Modal Sandboxes through Modal's own gRPC API over HTTP/2, spoken by cseng's
--- engine (lua/cseng/lib/grpc.lua over cseng.http, protobuf schemas in lua/providers/shared/modal_schema.lua), no
--- Python or JS SDK at run time (docs/providers/modal.md).
---
--- The call sequence is the official JS SDK's (`modal` 0.11.1, V1 sandboxes): AuthTokenGet once,
--- AppGetOrCreate, ImageGetOrCreate (+ ImageJoinStreaming until the build has a result),
--- SandboxCreate, SandboxGetTaskId (polled), TaskGetCommandRouterAccess -> {url, jwt}; then, on the
--- task's command router (a second HTTP/2 connection, `authorization: Bearer <jwt>`):
--- TaskExecStart, TaskExecStdioRead (server streams, stdout and stderr), TaskExecWait. Files go
--- through exec (tar in, cat out), as the SDK's own filesystem API does; SandboxTerminate ends a
--- sandbox, SandboxList (by tags, paged by before_timestamp) finds what a run left, and warm mode
--- snapshots a prepared sandbox with SandboxSnapshotFs into an image id (MODAL_IMAGE_ID).
local crypto = require 'cseng.crypto'
local clock = require 'cseng.clock'
local task = require 'cseng.task'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'
local S = require 'providers.shared.modal_schema'

local M = {
  name = 'modal',
  description = 'Modal Sandboxes (gRPC over HTTP/2: control plane + task command router)',
  credentials = { 'MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET' },
  -- Modal's published per-second rates (../shared/docs/PROVIDERS.md: sandbox rates reportedly
  -- higher; unconfirmed): a physical core is 2 vCPU, so the vCPU-second is half the core rate.
  rates = { vcpu_s = 0.0000131 / 2, gib_s = 0.00000222, per_create = 0 },
  capabilities = { non_root = false, network_policy = true, run_steps = true, warm = true },
  applies_dockerfile = true, -- env_mode native: the task's Dockerfile is built as a Modal image (M.build)
  artifact_env = 'MODAL_IMAGE_ID',
  -- sandbox ids: sb- and alphanumerics (22 of them today)
  id_format = { pattern = '^sb%-%w+$', example = 'sb-0aB1cD2eF3gH4iJ5kL6mN7', max = 128 },
  remote = true,
  version = '0.1',
}

--- Settings (provider_config keys; the variable in brackets when there is one) and their defaults.
M.DEFAULTS = {
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
function M.status_code(status)
  local name = type(status) == 'number' and STATUS[status] or tostring(status)
  if name == 'UNAUTHENTICATED' then return 'HTTP_401' end
  if name == 'PERMISSION_DENIED' then return 'HTTP_403' end
  return 'GRPC_' .. name
end

local function is_loopback(host)
  return host == 'localhost' or host == '127.0.0.1' or host == '::1' or host == '[::1]' or host == '172.21.0.1'
    or host:match('^127%.') ~= nil
end

--- scheme, host, port of an http(s) URL, or nil.
local function parse_url(url)
  local scheme, rest = tostring(url):match('^(https?)://([^/]+)/?$')
  if not scheme then return nil end
  local host, port = rest:match('^(%[[^%]]+%]):?(%d*)$')
  if not host then host, port = rest:match('^([^:]+):?(%d*)$') end
  if not host then return nil end
  return scheme, host, tonumber(port) or (scheme == 'https' and 443 or 80)
end

-- ---- the gRPC calls ------------------------------------------------------------------------

local function uuid()
  local h = crypto.hex(crypto.random_bytes(16))
  return string.format('%s-%s-4%s-%s-%s', h:sub(1, 8), h:sub(9, 12), h:sub(14, 16), h:sub(17, 20), h:sub(21, 32))
end

-- What the SDK retries (src/client.ts, retryableGrpcStatusCodes; its transport failures surface
-- as UNAVAILABLE). A deadline is not retried here: cseng's call timeouts are long on purpose.
local RETRIED = { GRPC_UNAVAILABLE = true, GRPC_INTERNAL = true, GRPC_UNKNOWN = true, GRPC_CANCELLED = true,
  ECONNRESET = true, EHTTP2 = true }
M.RETRIED = RETRIED

-- Transport failures of an HTTP/2 call that an HTTP/1.1-only server (or proxy) causes.
local H2_SUSPECT = { EHTTP2 = true, ECONNRESET = true, ECURL = true, EPROTO = true }

--- When an HTTP/2 call failed at the transport: ask base once more over HTTP/1.1; if that gets
--- an HTTP/1.1 answer, say so (gRPC needs HTTP/2). Returns text to append ('' if it tells nothing).
function M.http1_diagnosis(base)
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
local function call(client, target, method, message, o)
  o = o or {}
  local m = assert(S.methods[method], method)
  grpc = grpc or require 'cseng.lib.grpc'
  local headers = util.copy(target.headers)
  if target == client.cp then
    if not m.stream then -- as the SDK's retry middleware sends them on unary calls (cseng does not retry)
      headers['x-idempotency-key'] = uuid()
      headers['x-retry-attempt'] = '0'
    end
    if method ~= 'AuthTokenGet' then
      local token, err, code = M.auth_token(client)
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
    code = M.status_code(info.status)
    err = string.format('%s: %s', STATUS[info.status] or tostring(info.status), info.message or '')
  elseif H2_SUSPECT[code] then
    local why = M.http1_diagnosis(target.base)
    if why ~= '' then err, code = tostring(err) .. why, 'EHTTP2' end
  end
  return nil, secrets.redact(string.format('modal: %s: %s', method, tostring(err))), code or 'EGRPC', info
end

--- The x-modal-auth-token (AuthTokenGet once per client; again when it is about to expire).
function M.auth_token(client)
  local a = client.auth
  if a.token and a.expires > os.time() + 60 then return a.token end
  if a.pending then -- another task is fetching it
    while a.pending do task.sleep(0.01) end
    if a.token then return a.token end
  end
  a.pending = true
  local r, err, code = call(client, client.cp, 'AuthTokenGet', {})
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

-- ---- connect -------------------------------------------------------------------------------

---@param cfg table provider_config + getenv
---@return table client
function M.connect(cfg)
  local setting = adapter.settings(cfg)
  local token_id, token_secret = adapter.credentials('modal', setting, {
    { 'token_id', 'MODAL_TOKEN_ID', secret = true }, { 'token_secret', 'MODAL_TOKEN_SECRET', secret = true } })
  local D = M.DEFAULTS
  local server = setting('server_url', 'MODAL_SERVER_URL') or D.server_url
  local scheme, host = parse_url(server)
  if not scheme then
    errors.raise(errors.ECONFIG, 'modal provider: MODAL_SERVER_URL (or server_url) must be an http(s) URL, got ' .. tostring(server))
  end
  local build_mode = setting('build', 'MODAL_BUILD')
  if build_mode ~= nil and build_mode ~= 'native' and build_mode ~= 'replay' then
    errors.raise(errors.ECONFIG, 'modal provider: MODAL_BUILD (or build) must be native or replay, got ' .. tostring(build_mode))
  end
  local version = 'cseng/' .. M.version
  local client = {
    server_url = server:gsub('/$', ''), loopback = is_loopback(host),
    environment = setting('environment', 'MODAL_ENVIRONMENT') or D.environment,
    app = setting('app', 'MODAL_APP_NAME') or D.app,
    create_app = cfg.create_app ~= false,
    image = setting('image', 'MODAL_IMAGE') or D.image,
    cpus = tonumber(cfg.cpus) or D.cpus, memory_mb = tonumber(cfg.memory_mb) or D.memory_mb,
    region = setting('region', 'MODAL_REGION') or D.region,
    timeout_secs = tonumber(cfg.timeout_secs) or D.timeout_secs,
    builder_version = setting('builder_version', 'MODAL_IMAGE_BUILDER_VERSION'),
    build_mode = build_mode,
    call_timeout = tonumber(cfg.call_timeout) or D.call_timeout,
    retries = tonumber(cfg.retries) or D.retries,
    stream_grace = tonumber(cfg.stream_grace) or D.stream_grace,
    task_wait = tonumber(cfg.task_wait) or D.task_wait,
    run_id = cfg.run_id,
    auth = {}, once = {}, routers = {},
  }
  client.cp = { base = client.server_url, headers = {
    ['x-modal-client-type'] = tostring(cfg.client_type or D.client_type),
    ['x-modal-client-version'] = cfg.client_version or D.client_version,
    ['x-modal-libmodal-version'] = version,
    ['x-modal-token-id'] = token_id, ['x-modal-token-secret'] = token_secret,
    ['x-modal-host'] = host:gsub('^%[', ''):gsub('%]$', ''),
  } }
  return client
end

function M.runtime(client)
  return 'Modal Sandboxes at ' .. client.server_url .. ' (gRPC over HTTP/2, app ' .. client.app .. ')'
end

-- ---- app and image -------------------------------------------------------------------------

--- fn() once per key for the client's life: concurrent callers of the same key wait for the
--- first one's answer (a failure is not cached: the next caller tries again).
local function once(client, key, fn)
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
function M.app_id(client)
  return once(client, 'app', function() return M.lookup_app(client) end)
end

function M.lookup_app(client)
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

--- The image builder version: the setting, else the environment's (EnvironmentGetOrCreate).
local function builder_version(client)
  if client.builder_version then return client.builder_version end
  return once(client, 'builder_version', function()
    local r, err, code = call(client, client.cp, 'EnvironmentGetOrCreate', { deployment_name = client.environment })
    if not r then return nil, err, code end
    return r.metadata and r.metadata.settings and r.metadata.settings.image_builder_version or ''
  end)
end

--- The id of a built image, and whether it was there already (a cache hit: Modal answered
--- ImageGetOrCreate with a finished result, or this client built it before). recipe: {commands =
--- {"FROM tag", ...}, context_files = {{filename, data}}, context_mount_id, base_images}.
--- ImageGetOrCreate, then ImageJoinStreaming until the build has a result; a failed build is
--- "modal: image build <id> failed: <exception>" (EBUILD), with the log's tail.
function M.image_id(client, recipe)
  local key = 'image:' .. crypto.sha256_hex(require('cjson').encode({ recipe.commands, recipe.base_images or {},
    recipe.context_files or {}, recipe.context_mount_id or '' }))
  local waited = client.once[key] ~= nil
  local v, err, code = once(client, key, function()
    local id, hit, c = M.build_image(client, recipe)
    if not id then return nil, hit, c end
    return { id = id, hit = hit }
  end)
  if not v then return nil, err, code end
  return v.id, waited or v.hit
end

local function finished(result)
  return result and result.status and result.status ~= 'GENERIC_STATUS_UNSPECIFIED' and result.status ~= 0
end

function M.build_image(client, recipe)
  local app, aerr, acode = M.app_id(client)
  if not app then return nil, aerr, acode end
  local bv, berr, bcode = builder_version(client)
  if not bv then return nil, berr, bcode end
  local r, err, code = call(client, client.cp, 'ImageGetOrCreate', {
    app_id = app, builder_version = bv,
    image = { dockerfile_commands = recipe.commands, context_files = recipe.context_files, base_images = recipe.base_images,
              context_mount_id = recipe.context_mount_id },
  })
  if not r then return nil, err, code end
  local id, result = r.image_id, r.result
  local hit = finished(result) and true or false
  local log = adapter.tail_buffer(8192)
  local last = ''
  local rounds = 0
  while not finished(result) do
    rounds = rounds + 1
    if rounds > 120 then return nil, 'modal: image build ' .. id .. ' has no result after ' .. rounds .. ' joins', 'ETIMEDOUT' end
    local joined, jerr, jcode = call(client, client.cp, 'ImageJoinStreaming', { image_id = id, timeout = 55, last_entry_id = last },
      { timeout = 90, on_message = function(item)
        if item.entry_id and item.entry_id ~= '' then last = item.entry_id end
        for _, l in ipairs(item.task_logs or {}) do log.add(l.data or '') end
        if finished(item.result) then
          result = item.result
          return false
        end
      end })
    if not joined then return nil, jerr, jcode end
  end
  local status = result.status
  if status ~= 'GENERIC_STATUS_SUCCESS' and status ~= 1 then
    return nil, errors.new(errors.EBUILD, string.format('modal: image build %s (%s) failed: %s', id, recipe.commands[1],
      util.trim(result.exception or tostring(status))), { log = log.get() }), errors.EBUILD
  end
  return id, hit
end

--- A registry tag's image id (`FROM <tag>`).
function M.registry_image(client, tag)
  return M.image_id(client, { commands = { 'FROM ' .. tag } })
end

--- A Dockerfile's text (and its build-context files {path = data}) as an image Modal builds
--- (context files inline, Image.context_files). Exposed for specs and tools; task builds go
--- through M.build (a context mount, as the Python SDK's Image.from_dockerfile).
function M.dockerfile_image(client, dockerfile, context)
  local files = {}
  for name, data in pairs(context or {}) do files[#files + 1] = { filename = name, data = data } end
  table.sort(files, function(a, b) return a.filename < b.filename end)
  return M.image_id(client, { commands = M.dockerfile_commands(dockerfile), context_files = files })
end

--- A Dockerfile's text as Image.dockerfile_commands: one entry per line, as the Python SDK's
--- Image.from_dockerfile reads it (a trailing newline adds no empty command).
function M.dockerfile_commands(text)
  local out = {}
  for line in (text:gsub('\r\n', '\n'):gsub('\n$', '') .. '\n'):gmatch('([^\n]*)\n') do out[#out + 1] = line end
  return out
end

-- ---- native builds (the task's recipe as a Modal image) ---------------------------------------

-- MountPutFile data above this goes through Modal's blob store in the Python SDK
-- (LARGE_FILE_LIMIT), which cseng does not speak: such a build context is refused by name.
M.INLINE_FILE_LIMIT = 4 << 20

--- How the environment is made: native (the task's Dockerfile built by ImageGetOrCreate), unless
--- MODAL_BUILD=replay (the runner replays the recipe in each sandbox).
function M.env_mode(client)
  if client.build_mode == 'replay' then return 'replay' end
  return 'native'
end

--- The files of a recipe's COPY sources as a Modal mount's {filename = "/<path in environment/>",
--- data, mode}, sorted (directories walked; symlinks followed inside the context).
function M.context_files(rcp)
  local fs = require 'cseng.fs'
  local out, seen = {}, {}
  local function add(rel, abs)
    if seen[rel] then return true end
    local st = fs.stat(abs)
    if not st then return nil, 'COPY source ' .. rel .. ' is not in environment/', 'EBUILD' end
    if st.type == 'dir' then
      local list = fs.walk(abs)
      table.sort(list, function(a, b) return a.path < b.path end)
      for _, e in ipairs(list) do
        if e.type ~= 'dir' then
          local ok, err, code = add((rel == '.' and '' or (rel .. '/')) .. e.path, abs .. '/' .. e.path)
          if not ok then return nil, err, code end
        end
      end
      return true
    end
    seen[rel] = true
    local data = fs.read(abs)
    if not data then return nil, 'COPY source ' .. rel .. ' cannot be read', 'EBUILD' end
    if #data > M.INLINE_FILE_LIMIT then
      return nil, string.format('build context file %s is %d bytes: files over %d bytes need Modal\'s blob '
        .. 'uploads, which cseng does not implement (use MODAL_BUILD=replay for this task)', rel, #data, M.INLINE_FILE_LIMIT),
        'EBUILD'
    end
    out[#out + 1] = { filename = '/' .. rel, data = data, mode = (st.mode or 420) & 4095 }
    return true
  end
  for _, c in ipairs(require('cseng.workload.recipe').copy_sources(rcp)) do
    local ok, err, code = add(c.archive_path, c.source)
    if not ok then return nil, err, code end
  end
  table.sort(out, function(a, b) return a.filename < b.filename end)
  return out
end

--- The build context as a mount owned by the App, as the Python SDK loads one: MountPutFile by
--- hash (a file Modal already has is not sent), then MountGetOrCreate with the file list. '' for
--- a recipe without COPY sources.
function M.context_mount(client, app, rcp)
  local files, ferr = M.context_files(rcp)
  if not files then return nil, 'modal: build: ' .. ferr, 'EBUILD' end
  if #files == 0 then return '' end
  local listed, sent = {}, {}
  for i, f in ipairs(files) do
    local sha = crypto.sha256_hex(f.data)
    listed[i] = { filename = f.filename, sha256_hex = sha, size = #f.data, mode = f.mode }
    if not sent[sha] then
      sent[sha] = true
      local r, err, code = call(client, client.cp, 'MountPutFile', { sha256_hex = sha })
      if not r then return nil, err, code end
      if not r.exists then
        r, err, code = call(client, client.cp, 'MountPutFile', { sha256_hex = sha, data = f.data })
        if not r then return nil, err, code end
      end
    end
  end
  local r, err, code = call(client, client.cp, 'MountGetOrCreate', {
    object_creation_type = 'OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP', files = listed, app_id = app,
    environment_name = client.environment })
  if not r then return nil, err, code end
  if not r.mount_id or r.mount_id == '' then return nil, 'modal: MountGetOrCreate: no mount_id', 'EPROTO' end
  return r.mount_id
end

--- The dockerfile_commands of a task's layer. A single-stage Dockerfile is built as the JS SDK
--- builds `images.fromRegistry(base).dockerfileCommands(steps)`: the registry image is its own
--- image (shared by every task on that base), and the task's steps a layer over it, `FROM base`
--- with base_images naming it; returns the commands and true (base_images to fill in). A
--- multi-stage Dockerfile is sent whole (Python's Image.from_dockerfile): commands, nil.
function M.layer_commands(dockerfile, base)
  local lines = M.dockerfile_commands(dockerfile)
  local froms = {}
  for i, l in ipairs(lines) do
    if l:match('^%s*[Ff][Rr][Oo][Mm]%s') then froms[#froms + 1] = i end
  end
  if #froms ~= 1 or not base then return lines, nil end
  local out = { 'FROM base' }
  for i = froms[1] + 1, #lines do out[#out + 1] = lines[i] end
  return out, true
end

--- Build the task's recipe as a Modal image: the task's Dockerfile (its last FROM set to the
--- recipe's base) as dockerfile_commands (M.layer_commands), its COPY sources as the context
--- mount, as the Python SDK's Image.from_dockerfile sends them. Modal caches images by
--- definition, so an unchanged task is a cache hit (ImageGetOrCreate answers with a finished
--- result). Returns {image, layer (the image id create starts from), cache_hit, image_id}.
function M.build(client, req)
  local rcp = req.recipe
  local dockerfile, derr = require('cseng.workload.recipe').dockerfile(rcp)
  if not dockerfile then return nil, 'modal: build: ' .. derr, 'EBUILD' end
  local app, err, code = M.app_id(client)
  if not app then return nil, err, code end
  local mount
  mount, err, code = once(client, 'mount:' .. rcp.key, function() return M.context_mount(client, app, rcp) end)
  if not mount then return nil, err, code end
  local commands, base_images = M.layer_commands(dockerfile, rcp.base)
  if base_images then
    local base_id, berr, bcode = M.registry_image(client, rcp.base)
    if not base_id then return nil, berr, bcode end
    base_images = { { docker_tag = 'base', image_id = base_id } }
  end
  local id, hit
  id, hit, code = M.image_id(client, { commands = commands, base_images = base_images,
    context_mount_id = mount ~= '' and mount or nil })
  if not id then return nil, hit, code end
  return { image = rcp.base, layer = id, image_id = id, cache_hit = hit }
end

-- ---- sandboxes -----------------------------------------------------------------------------

local function tags_of(labels)
  local tags = {}
  for k, v in pairs(labels or {}) do tags[#tags + 1] = { tag_name = k, tag_value = tostring(v) } end
  table.sort(tags, function(a, b) return a.tag_name < b.tag_name end)
  return tags
end

--- The SandboxCreate request for a spec (exposed for the specs).
function M.create_request(client, app, image, spec)
  local env = spec.env and next(spec.env) and { contents = spec.env } or nil
  return {
    app_id = app, tags = tags_of(spec.labels),
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

--- Create a sandbox: returns as soon as SandboxCreate gave an id ({id, image, http_timings,
--- labels}); the task (SandboxGetTaskId) and the router access are fetched by the first exec.
function M.create(client, spec)
  spec = spec or {}
  local app, err, code = M.app_id(client)
  if not app then return nil, err, code end
  local image = spec.warm_artifact or spec.layer or spec.image_id
  if not image then
    image, err, code = M.registry_image(client, spec.image or client.image)
    if not image then
      if type(err) == 'table' then return nil, err.message .. (err.log ~= '' and ('\n' .. err.log) or ''), code end
      return nil, err, code
    end
  end
  local r, info
  r, info, code = call(client, client.cp, 'SandboxCreate', M.create_request(client, app, image, spec))
  if not r then return nil, info, code end
  return { id = r.sandbox_id, image = image, labels = spec.labels, http_timings = info and info.timings,
           created_ns = clock.now() }
end

--- The sandbox's task id: SandboxGetTaskId polled (long polls of up to 10 s) until it has one; a
--- sandbox that ended first is an error naming its result.
function M.task_id(client, sb)
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
function M.router(client, sb)
  local ro = client.routers[sb.id] or sb.router
  if ro then return ro end
  local tid, err, code = M.task_id(client, sb)
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
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local ro, err, code = M.router(client, sb)
  if not ro then return nil, err, code end
  local t0 = clock.now()
  local exec_id = uuid()
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

--- Write bytes to a file of the sandbox (`cat > path`, the bytes on the command's stdin).
local function upload(client, sb, path, data)
  local r, err, code = M.exec(client, sb, 'cat > ' .. util.shell_quote(path), { stdin = data, timeout = 300, cwd = '/' })
  if not r then return nil, err, code end
  if r.code ~= 0 then return nil, 'modal: put: writing ' .. path .. ': ' .. util.trim(r.stderr), 'EIO' end
  return true
end

--- Unpack a tar (or tar.gz) into dir, creating it: uploaded to /tmp, then `tar -xf`.
M.put = adapter.put_via(M, upload)

--- A file's contents (`cat`), ENOENT when it is missing.
function M.get(client, sb, path)
  local limit = 256 << 20
  local r, err, code = M.exec(client, sb, 'cat -- ' .. util.shell_quote(path), { timeout = 300, cwd = '/', tail_bytes = limit })
  if not r then return nil, err, code end
  if r.code ~= 0 then return nil, path .. ': ' .. util.trim(r.stderr), 'ENOENT' end
  if (r.stdout_dropped or 0) > 0 then return nil, path .. ': larger than ' .. limit .. ' bytes', 'EFBIG' end
  return r.stdout
end

--- SandboxTerminate; idempotent (an unknown or finished sandbox is success).
function M.destroy(client, sb)
  client.routers[sb.id] = nil
  local r, err, code = call(client, client.cp, 'SandboxTerminate', { sandbox_id = sb.id })
  if not r and code ~= 'GRPC_NOT_FOUND' then return nil, err, code end
  return true
end

--- Sandboxes that are running, filtered by labels (tags): SandboxList pages newest first, each
--- next page before the last one's created_at, until an empty page.
function M.list(client, filter)
  local tags = tags_of(filter and filter.labels)
  local out, seen, before = {}, {}, 0
  for _ = 1, 10000 do
    local r, err, code = call(client, client.cp, 'SandboxList', { tags = tags, before_timestamp = before,
      environment_name = client.environment, include_finished = false })
    if not r then return nil, err, code end
    local page = r.sandboxes or {}
    if #page == 0 then break end
    for _, s in ipairs(page) do
      if not seen[s.id] then
        seen[s.id] = true
        local labels = {}
        for _, t in ipairs(s.tags or {}) do labels[t.tag_name] = t.tag_value end
        out[#out + 1] = { id = s.id, labels = labels, created = s.created_at and math.floor(s.created_at) }
      end
    end
    local last = page[#page].created_at
    if not last or (before > 0 and last >= before) then break end
    before = last
  end
  return out
end

--- Warm mode: the prepared sandbox's filesystem as an image (SandboxSnapshotFs) that create takes
--- as spec.warm_artifact.
function M.snapshot(client, sb, _key)
  local r, err, code = call(client, client.cp, 'SandboxSnapshotFs', { sandbox_id = sb.id, timeout = 55 }, { timeout = 120 })
  if not r then return nil, 'modal: snapshot of ' .. sb.id .. ': ' .. tostring(err), code end
  local st = r.result and r.result.status
  if st and st ~= 'GENERIC_STATUS_SUCCESS' and st ~= 1 then
    return nil, 'modal: snapshot of ' .. sb.id .. ' failed: ' .. tostring(r.result.exception or st), 'ESNAPSHOT'
  end
  if not r.image_id or r.image_id == '' then return nil, 'modal: snapshot of ' .. sb.id .. ': no image id', 'EPROTO' end
  return r.image_id
end

return M
