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
--- The gRPC calls, the App, the task and router and a command's run are
--- providers/shared/modal_wire.lua; the image builds providers/shared/modal_build.lua.
local clock = require('cseng.clock')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.modal_wire')
local build = require('providers.shared.modal_build')

local M = {
  name = 'modal',
  description = 'Modal Sandboxes (gRPC over HTTP/2: control plane + task command router)',
  credentials = { 'MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET' },
  -- Modal's published per-second rates (docs/providers/modal.md: sandbox rates reportedly
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

local call = wire.call

---@param cfg table provider_config + getenv
---@return table client
function M.connect(cfg)
  local setting = adapter.settings(cfg)
  local token_id, token_secret = adapter.credentials('modal', setting, {
    { 'token_id', 'MODAL_TOKEN_ID', secret = true }, { 'token_secret', 'MODAL_TOKEN_SECRET', secret = true } })
  local D = wire.DEFAULTS
  local server = setting('server_url', 'MODAL_SERVER_URL') or D.server_url
  local scheme, host = wire.parse_url(server)
  if not scheme then
    errors.raise(errors.ECONFIG, 'modal provider: MODAL_SERVER_URL (or server_url) must be an http(s) URL, got ' .. tostring(server))
  end
  local build_mode = setting('build', 'MODAL_BUILD')
  if build_mode ~= nil and build_mode ~= 'native' and build_mode ~= 'replay' then
    errors.raise(errors.ECONFIG, 'modal provider: MODAL_BUILD (or build) must be native or replay, got ' .. tostring(build_mode))
  end
  local version = 'cseng/' .. M.version
  local client = {
    server_url = server:gsub('/$', ''), loopback = wire.is_loopback(host),
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

--- Create a sandbox: returns as soon as SandboxCreate gave an id ({id, image, http_timings,
--- labels}); the task (SandboxGetTaskId) and the router access are fetched by the first exec.
function M.create(client, spec)
  spec = spec or {}
  local app, err, code = wire.app_id(client)
  if not app then return nil, err, code end
  local image = spec.warm_artifact or spec.layer or spec.image_id
  if not image then
    image, err, code = build.registry_image(client, spec.image or client.image)
    if not image then
      if type(err) == 'table' then return nil, err.message .. (err.log ~= '' and ('\n' .. err.log) or ''), code end
      return nil, err, code
    end
  end
  local r, info
  r, info, code = call(client, client.cp, 'SandboxCreate', wire.create_request(client, app, image, spec))
  if not r then return nil, info, code end
  return { id = r.sandbox_id, image = image, labels = spec.labels, http_timings = info and info.timings,
           created_ns = clock.now() }
end
--- Run `bash -c cmd` in the sandbox (on its task's command router: providers/shared/modal_wire.lua).
--- opts: {cwd, env, timeout, stdin, tail_bytes}. Returns {code, stdout, stderr, timed_out,
--- elapsed, signal, http_timings} or nil, message, CODE.
function M.exec(client, sb, cmd, opts)
  return wire.exec(client, sb, cmd, opts or {})
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
  local tags = wire.tags_of(filter and filter.labels)
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
function M.runtime(client)
  return 'Modal Sandboxes at ' .. client.server_url .. ' (gRPC over HTTP/2, app ' .. client.app .. ')'
end

--- Build the task's recipe as a Modal image (providers/shared/modal_build.lua): the task's
--- Dockerfile as dockerfile_commands over its base, its COPY sources as the context mount. Modal
--- caches images by definition, so an unchanged task is a cache hit. Returns {image, layer (the
--- image id create starts from), cache_hit, image_id}.
M.build = build.build

--- How the environment is made: native (the task's Dockerfile built by ImageGetOrCreate), unless
--- MODAL_BUILD=replay (the runner replays the recipe in each sandbox).
function M.env_mode(client)
  if client.build_mode == 'replay' then return 'replay' end
  return 'native'
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
