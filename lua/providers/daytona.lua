--- The Daytona provider: sandboxes from Daytona's REST API and its in-sandbox toolbox
--- (docs/providers/daytona.md; specs: shared/specs/daytona-openapi.yaml and
--- daytona-toolbox-swagger.yaml).
---
---   base    DAYTONA_API_URL (default https://app.daytona.io/api), Authorization: Bearer DAYTONA_API_KEY
---   create  POST   /sandbox {snapshot | buildInfo{dockerfileContent}, env, labels, target, cpu, memory (GB),
---                  disk (GB), autoStopInterval, autoDeleteInterval, networkBlockAll}
---           then GET /sandbox/{id} until state == "started" (100 ms, x1.1 back-off to 1 s)
---   exec    POST   {toolboxProxyUrl}/{id}/process/execute {command, cwd, envs, timeout} -> {exitCode, result}
---   put     POST   {toolboxProxyUrl}/{id}/files/bulk-upload (multipart: field files[0].path = /tmp/...,
---                  part files[0].file), then tar -xf by exec
---   get     POST   {toolboxProxyUrl}/{id}/files/bulk-download {paths = {path}} -> multipart: a part "file"
---                  (the data) or "error" ({message, statusCode, code}); both as the official SDK
---                  (@daytonaio/sdk 0.218) sends them (docs/providers/CONFORMANCE.md)
---   destroy DELETE /sandbox/{id}   (404 = already gone)
---   list    GET    /sandbox?labels=<json>  -> {items, nextCursor}
---   build   GET    /snapshots/cseng-<key16> (active = the cache hit), else the COPY sources' tars to
---                  the object storage of GET /object-storage/push-access (S3, SigV4), then
---                  POST /snapshots {name, buildInfo{dockerfileContent, contextHashes}} and
---                  GET /snapshots/{name} until active; create then starts from {snapshot = name}
---   snapshot GET   /snapshots/{name} (reuse an active one), else POST /sandbox/{id}/snapshot {name},
---                  then GET /snapshots/{name} until state == "active" (warm mode; the artifact is
---                  the snapshot's name, created from with POST /sandbox {snapshot = name})
---
--- The toolbox runs `command` without a shell: it splits it on spaces, honouring '...' and "..."
--- quotes (no escapes), and execs the words. So every command is sent as
---   bash -c 'export K="$(echo <b64> | base64 -d)"; cd "$(echo <b64> | base64 -d)" && eval "$(echo <b64> | base64 -d)"'
--- where only base64 text sits inside the quotes; the shell and the environment are ours, and
--- the command's stdin is the daemon's (/dev/null), as on the local provider. stdout and stderr
--- come back combined (in stdout); a toolbox timeout is HTTP 408 (timed_out = true, code 124).
---
--- Expected failures return nil, message, CODE: an HTTP error status becomes "HTTP_<status>"
--- (the startup arena stops on HTTP_401/HTTP_403), a sandbox that ends in error/build_failed
--- "ESTATE", one that is not started in time "ETIMEDOUT"; transport failures keep cseng.http's
--- codes. A create that fails after the API allocated a sandbox deletes it before returning.
local task = require 'cseng.task'
local clock = require 'cseng.clock'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local jsonl = require 'cseng.lib.jsonl'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'
local archive = require 'cseng.archive'
local fs = require 'cseng.fs'
local sigv4 = require 'cseng.lib.aws.sigv4'
local recipe = require 'cseng.workload.recipe'

local M = {
  name = 'daytona',
  version = '1.0',
  description = 'Daytona sandboxes (REST API + toolbox)',
  remote = true,
  applies_dockerfile = true, -- env_mode native: the task's Dockerfile is built as a snapshot (M.build)
  credentials = { 'DAYTONA_API_KEY' },
  -- allocated resources, per second (PROVIDERS.md: secondary sources)
  rates = { vcpu_s = 0.000014, gib_s = 0.0000045, per_create = 0 },
  capabilities = { non_root = false, network_policy = true, run_steps = true, warm = true },
  -- sandbox ids (a UUID; the OpenAPI spec's example is sandbox123)
  id_format = { pattern = '^[%w][%w_-]*$', example = '0b5e2f1c-7a3d-4e8b-9c1f-2d6a8e4b7c90', max = 128 },
  -- create rate limit for lua/cseng/run/admission.lua: Daytona documents 300-600 creates/minute
  -- by tier (issue 26); the lower bound, so a run paces itself instead of collecting 429s
  limits = { creates_per_minute = 300 },
}

local DEFAULTS = {
  api_url = 'https://app.daytona.io/api',
  toolbox_url = 'https://proxy.app.daytona.io/toolbox',
  request_timeout = 60,  -- control-plane calls
  start_timeout = 60,    -- create until "started" (the SDK's default)
  build_timeout = 900,   -- the same when Daytona builds an image first (buildInfo)
  exec_timeout = 600,
  snapshot_timeout = 900, -- POST /sandbox/{id}/snapshot until the snapshot is "active"
  snapshot_prefix = 'cseng-',
  auto_stop_min = 15,    -- used when the spec has no ttl_seconds
  poll_first = 0.1, poll_factor = 1.1, poll_max = 1.0,
  shell = 'bash',
  tail_bytes = 1 << 20,
}

-- States after which a sandbox will never start (SDK: error and build_failed are terminal).
local TERMINAL = { error = true, build_failed = true, destroyed = true, destroying = true }

---@class daytona.client
---@field base string API base URL without trailing slash
---@field key string
---@field target string|nil DAYTONA_TARGET (us/eu)
---@field snapshot string|nil DAYTONA_SNAPSHOT: every sandbox from this snapshot
---@field user string|nil DAYTONA_USER: the create body's user
---@field toolbox_url string|nil DAYTONA_TOOLBOX_URL: overrides the sandbox's toolboxProxyUrl
---@field organization string|nil DAYTONA_ORGANIZATION_ID (X-Daytona-Organization-ID)
---@field request_timeout number
---@field start_timeout number
---@field build_timeout number
---@field snapshot_timeout number DAYTONA_SNAPSHOT_TIMEOUT: warm snapshot until "active"
---@field snapshot_prefix string DAYTONA_SNAPSHOT_PREFIX: warm snapshot names are prefix .. key
---@field shell string

--- Read the settings (cfg first, then the environment through cfg.getenv) and check the
--- credential. Raises a one-line error naming DAYTONA_API_KEY when it is missing; makes no
--- request.
---@param cfg? table {getenv=fn, api_url, api_key, target, snapshot, user, toolbox_url, organization_id,
---                   request_timeout, start_timeout, build_timeout, shell, poll}
---@return daytona.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local key = adapter.credentials('daytona', setting, { { 'api_key', 'DAYTONA_API_KEY', secret = true } })
  local function num(k, var, def)
    local v = tonumber(setting(k, var))
    return v or def
  end
  return {
    base = tostring(setting('api_url', 'DAYTONA_API_URL') or DEFAULTS.api_url):gsub('/+$', ''),
    key = key,
    target = setting('target', 'DAYTONA_TARGET'),
    snapshot = setting('snapshot', 'DAYTONA_SNAPSHOT'),
    user = setting('user', 'DAYTONA_USER'),
    toolbox_url = setting('toolbox_url', 'DAYTONA_TOOLBOX_URL'),
    organization = setting('organization_id', 'DAYTONA_ORGANIZATION_ID'),
    request_timeout = num('request_timeout', nil, DEFAULTS.request_timeout),
    start_timeout = num('start_timeout', 'DAYTONA_START_TIMEOUT', DEFAULTS.start_timeout),
    build_timeout = num('build_timeout', 'DAYTONA_BUILD_TIMEOUT', DEFAULTS.build_timeout),
    snapshot_timeout = num('snapshot_timeout', 'DAYTONA_SNAPSHOT_TIMEOUT', DEFAULTS.snapshot_timeout),
    snapshot_prefix = setting('snapshot_prefix', 'DAYTONA_SNAPSHOT_PREFIX') or DEFAULTS.snapshot_prefix,
    build_mode = setting('build', 'DAYTONA_BUILD'),
    shell = setting('shell', 'DAYTONA_SHELL') or DEFAULTS.shell,
    poll = cfg.poll or { first = DEFAULTS.poll_first, factor = DEFAULTS.poll_factor, max = DEFAULTS.poll_max },
  }
end

-- ---- HTTP ----------------------------------------------------------------------------------

local urlencode, str = adapter.urlencode, adapter.str

-- The error text of a response: Daytona answers {"statusCode", "message", "error"}.
local api_message = adapter.message_from { 'message', 'error' }

local function headers_for(client, extra)
  local h = { Authorization = 'Bearer ' .. client.key, Accept = 'application/json',
              ['X-Daytona-Source'] = 'cseng' }
  if client.organization then h['X-Daytona-Organization-ID'] = client.organization end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

-- One call. o: {json, body, headers, timeout, raw (do not decode)}. Returns data (decoded JSON,
-- true for an empty body, the raw body with o.raw) and the response, or nil, message, CODE, res.
local function call(client, method, url, o)
  o = o or {}
  return adapter.request('daytona', method, url, { headers = headers_for(client, o.headers), json = o.json,
    body = o.body, raw = o.raw, timeout = o.timeout or client.request_timeout, message = api_message })
end

local function api_url(client, path) return client.base .. path end

local function toolbox(client, sb, path)
  local base = (client.toolbox_url or sb.toolbox_url or DEFAULTS.toolbox_url):gsub('/+$', '')
  return base .. '/' .. urlencode(sb.id) .. path
end

-- ---- create --------------------------------------------------------------------------------

local function ceil_int(x) return math.tointeger(math.ceil(x)) end

--- The POST /sandbox body for a spec (exposed for the conformance specs).
function M.create_body(client, spec)
  local body = {
    labels = util.copy(spec.labels),
    env = util.copy(spec.env),
    networkBlockAll = not spec.network,
  }
  -- warm mode: the snapshot M.snapshot made (its name) wins over a configured one
  local snapshot = spec.warm_artifact or spec.layer or spec.snapshot or client.snapshot
  if snapshot then
    body.snapshot = snapshot
  elseif spec.image then
    -- there is no image field: an image is a one-line Dockerfile Daytona builds (and caches);
    -- no contextHashes (cjson would send an empty list as {}, which the spec refuses)
    body.buildInfo = { dockerfileContent = 'FROM ' .. spec.image .. '\n' }
  end
  if client.target then body.target = client.target end
  if client.user then body.user = client.user end
  if spec.cpus then body.cpu = math.max(1, ceil_int(spec.cpus)) end
  if spec.memory_mb then body.memory = math.max(1, ceil_int(spec.memory_mb / 1024)) end
  if spec.disk_mb then body.disk = math.max(1, ceil_int(spec.disk_mb / 1024)) end
  -- orphan safety: stop after the trial's whole budget of inactivity, delete on stop
  local ttl_min = spec.ttl_seconds and math.max(1, ceil_int(spec.ttl_seconds / 60)) or DEFAULTS.auto_stop_min
  body.autoStopInterval = ttl_min
  body.autoDeleteInterval = 0
  return body
end

local function sandbox_record(data, spec, body, res)
  return {
    id = data.id,
    name = str(data.name),
    toolbox_url = str(data.toolboxProxyUrl),
    labels = spec.labels or {},
    env = spec.env,
    workdir = spec.workdir,
    image = spec.image,
    snapshot = body.snapshot,
    state = str(data.state),
    allocation = {
      cpus = tonumber(data.cpu), memory_gb = tonumber(data.memory), disk_gb = tonumber(data.disk),
      target = str(data.target) or body.target, snapshot = str(data.snapshot) or body.snapshot,
    },
    http_timings = res.timings,
  }
end

-- Poll GET /sandbox/{id} until "started" (the SDK's 100 ms, x1.1 back-off to 1 s). Returns
-- nil when started, else message, CODE; transient poll failures (timeouts, resets, 5xx) retry.
local function wait_started(client, sb, data, limit, t0)
  local delay = client.poll.first
  local state, reason = sb.state, str(data.errorReason)
  while state ~= 'started' do
    if state and TERMINAL[state] then
      return string.format('daytona: sandbox %s is %s%s', sb.id, state, reason and (': ' .. reason) or ''), 'ESTATE'
    end
    if (clock.now() - t0) / 1e9 > limit then
      return string.format('daytona: sandbox %s not started after %s s (state %s)', sb.id, limit, tostring(state)),
        'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.poll.factor, client.poll.max)
    local cur, err, gcode = call(client, 'GET', api_url(client, '/sandbox/' .. urlencode(sb.id)))
    if not cur then
      if gcode ~= 'ETIMEDOUT' and gcode ~= 'ECONNRESET' and not tostring(gcode):match('^HTTP_5') then
        return err, gcode
      end
    elseif type(cur) == 'table' then
      state, reason = str(cur.state), str(cur.errorReason)
      sb.toolbox_url = str(cur.toolboxProxyUrl) or sb.toolbox_url
    end
  end
  return nil
end

--- Create a sandbox and wait until it is started. spec: {image, snapshot, labels, env, workdir,
--- network, cpus, memory_mb, disk_mb, ttl_seconds}. sb.http_timings holds the create call's
--- timings, sb.ready_seconds the time from the create call to "started".
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local t0 = clock.now()
  local body = M.create_body(client, spec)
  local data, res, code, raw = adapter.post_created(call, client, api_url(client, '/sandbox'), { json = body }, 'id',
    'daytona: POST /sandbox')
  if not data then return nil, res, code, raw end -- raw: the response (admission reads Retry-After)
  local sb = sandbox_record(data, spec, body, res)
  -- the sandbox exists from here on: whatever ends the wait (a terminal state, the deadline, a
  -- failed poll, or the trial's cancellation raised from inside it) deletes it before returning
  local ok, werr, wcode = pcall(wait_started, client, sb, data, body.buildInfo and client.build_timeout or client.start_timeout, t0)
  if not ok or werr then
    pcall(M.destroy, client, sb)
    if not ok then error(werr, 0) end -- ECANCELED and misuse propagate
    return nil, werr, wcode
  end
  sb.state = 'started'
  sb.ready_seconds = (clock.now() - t0) / 1e9
  return sb
end

-- ---- exec ----------------------------------------------------------------------------------

local function b64(s) return crypto.base64(s) end

--- The command string sent to the toolbox for a shell command (exposed for the specs).
--- Only base64 text and fixed words appear inside its single quotes.
function M.wrap_command(client, cmd, env, cwd, stdin_path)
  local parts = {}
  for _, k in ipairs(util.keys(env or {})) do
    if not tostring(k):match('^[%a_][%w_]*$') then
      errors.raise(errors.EINVAL, 'daytona: invalid environment variable name ' .. string.format('%q', tostring(k)))
    end
    parts[#parts + 1] = string.format('export %s="$(echo %s | base64 -d)"', k, b64(tostring(env[k])))
  end
  local run = string.format('eval "$(echo %s | base64 -d)"', b64(cmd))
  if stdin_path then run = run .. ' < ' .. stdin_path end
  if cwd then run = string.format('cd "$(echo %s | base64 -d)" && %s', b64(cwd), run) end
  parts[#parts + 1] = run
  if stdin_path then parts[#parts + 1] = 'rc=$?; rm -f ' .. stdin_path .. '; exit $rc' end
  return (client.shell or DEFAULTS.shell) .. " -c '" .. table.concat(parts, '; ') .. "'"
end

local upload -- forward

--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}.
--- Returns {code, stdout (stdout and stderr combined), stderr = '', elapsed, timed_out,
--- http_timings} or nil, message, CODE.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local env = util.merge(sb.env, opts.env)
  local cwd = opts.cwd or sb.workdir
  local stdin_path, serr, scode = adapter.stdin_upload(upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  local command = M.wrap_command(client, cmd, env, cwd, stdin_path)
  local body = { command = command, timeout = math.max(1, ceil_int(timeout)) }
  if cwd then body.cwd = cwd end
  if next(env) then body.envs = env end
  local t0 = clock.now()
  -- the HTTP timeout leaves the toolbox room to report its own timeout (408)
  local data, res, code, failed = call(client, 'POST', toolbox(client, sb, '/process/execute'),
    { json = body, timeout = timeout + 30 })
  local elapsed = (clock.now() - t0) / 1e9
  if not data then
    if code == 'HTTP_408' then -- the toolbox killed the command at its timeout
      return { code = 124, stdout = '', stderr = failed and api_message(failed.body) or tostring(res),
               elapsed = elapsed, timed_out = true, http_timings = failed and failed.timings }
    end
    return nil, res, code
  end
  if type(data) ~= 'table' then return nil, 'daytona: exec: the response is not an object', 'EPROTO' end
  local out = str(data.result) or ''
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  return {
    code = adapter.int(data.exitCode) or -1,
    stdout = #out > cap and out:sub(-cap) or out,
    stderr = '',
    stdout_dropped = #out > cap and (#out - cap) or nil,
    elapsed = elapsed,
    timed_out = false,
    http_timings = res.timings,
  }
end

-- ---- files ---------------------------------------------------------------------------------

-- The toolbox's UploadFiles form (what the SDK's fs.uploadFile sends): the destination as the
-- field files[0].path, the data as the part files[0].file (filename = the destination).
local function upload_form(path, data)
  return adapter.form {
    { name = 'files[0].path', data = path },
    { name = 'files[0].file', filename = path, content_type = 'application/octet-stream', data = data },
  }
end

upload = function(client, sb, path, data)
  local body, ctype = upload_form(path, data)
  return adapter.done(call(client, 'POST', toolbox(client, sb, '/files/bulk-upload'),
    { body = body, headers = { ['Content-Type'] = ctype }, timeout = 300, raw = true }))
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: the archive is
--- uploaded to /tmp, then extracted there by exec and removed.
--- (The toolbox returns stdout and stderr combined, in stdout.)
M.put = adapter.put_via(M, upload, { output = 'stdout' })

--- Read a file of the sandbox.
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local url = toolbox(client, sb, '/files/bulk-download')
  local data, res, code = call(client, 'POST', url,
    { json = { paths = { path } }, raw = true, headers = { Accept = 'multipart/form-data' }, timeout = 300 })
  if not data then
    if code == 'HTTP_404' or code == 'HTTP_400' then return nil, path .. ': ' .. tostring(res), 'ENOENT' end
    return nil, res, code
  end
  local parts, why = adapter.multipart_parts(type(data) == 'string' and data or '', res.headers['content-type'])
  if not parts then return nil, 'daytona: POST ' .. url .. ': ' .. why, 'EPROTO' end
  for _, p in ipairs(parts) do
    if p.name == 'file' and (p.filename == path or #parts == 1) then return p.data end
    if p.name == 'error' then
      local ok, e = pcall(cjson.decode, p.data)
      e = ok and type(e) == 'table' and e or {}
      local status = math.tointeger(e.statusCode)
      local msg = string.format('%s: %s', path, str(e.message) or adapter.snippet(p.data))
      if status == 404 or e.code == 'FILE_NOT_FOUND' or e.code == 'NOT_FOUND' then return nil, msg, 'ENOENT' end
      return nil, 'daytona: ' .. msg, status and ('HTTP_' .. status) or 'EPROTO'
    end
  end
  return nil, 'daytona: POST ' .. url .. ': no part for ' .. path .. ' in the answer', 'EPROTO'
end

-- ---- snapshot (warm mode) ------------------------------------------------------------------

-- Snapshot states that will never become "active" (SnapshotState in the OpenAPI spec).
local SNAPSHOT_TERMINAL = { error = true, build_failed = true, removing = true, inactive = true }

--- The snapshot name for a task content key (exposed for the specs): prefix .. key, in the
--- characters Daytona accepts in names.
function M.snapshot_name(client, key)
  return ((client.snapshot_prefix or DEFAULTS.snapshot_prefix) .. tostring(key)):gsub('[^%w%-_.]', '-')
end

-- GET /snapshots/{name}: the SnapshotDto, or false when there is none (404), or nil, err, code.
local function get_snapshot(client, name)
  local data, err, code = call(client, 'GET', api_url(client, '/snapshots/' .. urlencode(name)))
  if not data then
    if code == 'HTTP_404' then return false end
    return nil, err, code
  end
  if type(data) ~= 'table' then return nil, 'daytona: GET /snapshots/' .. name .. ': not an object', 'EPROTO' end
  return data
end

-- Poll the snapshot until "active" (the sandbox poll's back-off). Returns true, or nil, err, CODE;
-- transient poll failures retry, as for the sandbox.
local function wait_snapshot(client, name, snap)
  local t0, delay = clock.now(), client.poll.first
  while true do
    local state = snap and str(snap.state)
    if state == 'active' then return true end
    if state and SNAPSHOT_TERMINAL[state] then
      return nil, string.format('daytona: snapshot %s is %s%s', name, state,
        str(snap.errorReason) and (': ' .. snap.errorReason) or ''), 'ESNAPSHOT'
    end
    if (clock.now() - t0) / 1e9 > client.snapshot_timeout then
      return nil, string.format('daytona: snapshot %s not active after %s s (state %s)', name,
        client.snapshot_timeout, tostring(state)), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.poll.factor, client.poll.max)
    local cur, err, code = get_snapshot(client, name)
    if cur == nil then
      if code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then
        return nil, err, code
      end
    else
      snap = cur or nil -- false (404): not visible yet
    end
  end
end

--- Warm mode: turn a prepared (started) sandbox into a snapshot named after the task's content
--- key, and return its name (what create takes as spec.warm_artifact). A snapshot of that name
--- that is already active is reused without snapshotting again (same key = same content); one
--- still being made is waited for. Snapshots count against the organization's quota (about
--- 500) and are not deleted here: `cseng cleanup` does not touch them.
---@return string|nil name, string? err, string? code
function M.snapshot(client, sb, key)
  local name = M.snapshot_name(client, key)
  local snap, err, code = get_snapshot(client, name)
  if snap == nil then return nil, err, code end
  if not snap then
    local data
    data, err, code = call(client, 'POST', api_url(client, '/sandbox/' .. urlencode(sb.id) .. '/snapshot'),
      { json = { name = name } })
    if not data then return nil, err, code end -- names POST /sandbox/{id}/snapshot and the status
  end
  local ok, werr, wcode = wait_snapshot(client, name, snap or nil)
  if not ok then return nil, werr, wcode end
  return name
end

--- An active snapshot made earlier for the same content key (the runner then skips preparing).
function M.find_artifact(client, key)
  local name = M.snapshot_name(client, key)
  local snap = get_snapshot(client, name)
  if snap and str(snap.state) == 'active' then return name end
  return nil
end

-- ---- native builds (the task's recipe as a snapshot) --------------------------------------

--- How the environment is made: a native build (a snapshot from the task's Dockerfile), unless
--- every sandbox comes from a configured snapshot (DAYTONA_SNAPSHOT) or DAYTONA_BUILD=replay.
function M.env_mode(client)
  if client.snapshot or client.build_mode == 'replay' then return 'replay' end
  return 'native'
end

--- The snapshot a recipe builds to: cseng-<the content key's first 16 hex digits>.
function M.build_name(client, rcp)
  return M.snapshot_name(client, rcp.key:sub(1, 16))
end

--- The Dockerfile sent as buildInfo.dockerfileContent (recipe.dockerfile: the task's own, its
--- last FROM set to the recipe's base).
function M.build_dockerfile(rcp) return recipe.dockerfile(rcp) end

--- The build contexts of a recipe, as @daytonaio/sdk's Image.fromDockerfile derives them
--- (recipe.copy_sources: one per COPY/ADD source).
function M.build_contexts(rcp) return recipe.copy_sources(rcp) end

-- A context's tar (entries under its archive path, sorted, as the SDK's tar.create of the path)
-- and its hash: the SDK's computeHashForPathMd5 over the same inputs (the archive path, then
-- each file's path relative to the source and its bytes, an empty directory's path), in sorted
-- order and with SHA-256 (the engine has no MD5), cut to 32 hex digits.
local function context_tar(ctx)
  local st = fs.stat(ctx.source)
  if not st then return nil, 'COPY source ' .. ctx.archive_path .. ' is not in environment/', 'EBUILD' end
  local entries, h = {}, { ctx.archive_path }
  local base = ctx.archive_path == '.' and '' or ctx.archive_path
  if st.type ~= 'dir' then
    local data = fs.read(ctx.source)
    entries[1] = { path = base, data = data, mode = st.mode }
    h[#h + 1] = data
  else
    if base ~= '' then entries[1] = { path = base, type = 'dir' } end
    local list = fs.walk(ctx.source)
    table.sort(list, function(a, b) return a.path < b.path end)
    for _, e in ipairs(list) do
      local path = base == '' and e.path or (base .. '/' .. e.path)
      if e.type == 'dir' then
        entries[#entries + 1] = { path = path, type = 'dir' }
        local empty = #(fs.list(ctx.source .. '/' .. e.path) or {}) == 0
        if empty then h[#h + 1] = e.path end
      elseif e.type == 'link' then
        entries[#entries + 1] = { path = path, type = 'symlink', target = fs.readlink(ctx.source .. '/' .. e.path) }
      else
        local data = fs.read(ctx.source .. '/' .. e.path)
        entries[#entries + 1] = { path = path, data = data, mode = e.mode }
        h[#h + 1] = e.path
        h[#h + 1] = data
      end
    end
  end
  return archive.pack(entries, { format = 'tar' }), crypto.sha256_hex(table.concat(h)):sub(1, 32)
end

-- S3 (the push access GET /object-storage/push-access hands out): path-style URLs, SigV4.
local function s3_call(creds, method, key, query, body)
  local url = creds.storageUrl:gsub('/+$', '') .. '/' .. sigv4.uri_encode(creds.bucket) .. (key and ('/' .. sigv4.uri_encode(key, true)) or '')
    .. (query and ('?' .. query) or '')
  local headers = {}
  if body then headers['Content-Type'] = 'application/octet-stream' end
  local add = sigv4.sign { method = method, url = url, headers = headers, body = body or '', region = creds.region or 'us-east-1',
    service = 's3', access_key_id = creds.accessKey, secret_access_key = creds.secret, session_token = creds.sessionToken }
  for k, v in pairs(add) do headers[k] = v end
  return adapter.request('daytona', method, url, { headers = headers, body = body or (method == 'PUT' and '' or nil), raw = true,
    timeout = 300 })
end

-- Upload each context tar (ListObjectsV2 first: an existing prefix is not uploaded again, as
-- the SDK's ObjectStorage.upload). Returns the list of hashes, or nil, err, code.
local function upload_contexts(client, rcp)
  local contexts = M.build_contexts(rcp)
  if #contexts == 0 then return {} end
  local creds, err, code = call(client, 'GET', api_url(client, '/object-storage/push-access'))
  if not creds then return nil, err, code end
  if type(creds) ~= 'table' or not str(creds.storageUrl) or not str(creds.accessKey) or not str(creds.organizationId) then
    return nil, 'daytona: GET /object-storage/push-access: no storageUrl/accessKey/organizationId', 'EPROTO'
  end
  creds.bucket = str(creds.bucket) or 'daytona-volume-builds'
  secrets.add(creds.secret)
  if str(creds.sessionToken) then secrets.add(creds.sessionToken) end
  local hashes = {}
  for _, ctx in ipairs(contexts) do
    local tar, hash = context_tar(ctx)
    if not tar then return nil, 'daytona: build context: ' .. hash, 'ESTAGING' end
    local prefix = creds.organizationId .. '/' .. hash .. '/'
    local listing, lerr, lcode = s3_call(creds, 'GET', nil,
      'list-type=2&max-keys=1&prefix=' .. sigv4.uri_encode(prefix))
    if not listing then return nil, lerr, lcode end
    if not tostring(listing):find('<Key>', 1, true) then
      -- x-id=PutObject: the operation hint AWS's S3 clients add (the SDK's upload sends it)
      local ok, perr, pcode = s3_call(creds, 'PUT', prefix .. 'context.tar', 'x-id=PutObject', tar)
      if not ok then return nil, perr, pcode end
    end
    hashes[#hashes + 1] = hash
  end
  return hashes
end

--- Build the task's recipe as a snapshot named cseng-<key16> (POST /snapshots with buildInfo:
--- the full Dockerfile, FROM set to the recipe's base, and the hashes of its COPY sources
--- uploaded to Daytona's object storage), then wait until it is active. A snapshot of that
--- name that exists is the cache hit (waited for when still building). Returns {image, layer
--- (the snapshot's name, what create starts from), cache_hit, snapshot, log_tail}.
function M.build(client, req)
  local rcp = req.recipe
  local name = M.build_name(client, rcp)
  local snap, err, code = get_snapshot(client, name)
  if snap == nil then return nil, err, code end
  local hit = snap and true or false
  if not snap then
    local dockerfile, derr = M.build_dockerfile(rcp)
    if not dockerfile then return nil, 'daytona: build: ' .. derr, 'EBUILD' end
    local hashes, uerr, ucode = upload_contexts(client, rcp)
    if not hashes then return nil, uerr, ucode end
    local body = { name = name, buildInfo = { dockerfileContent = dockerfile } }
    if #hashes > 0 then body.buildInfo.contextHashes = hashes end -- cjson would send {} for an empty list
    if client.target then body.regionId = client.target end
    local data
    data, err, code = call(client, 'POST', api_url(client, '/snapshots'), { json = body, timeout = client.request_timeout })
    if not data then
      if code ~= 'HTTP_409' then return nil, err, code end
      hit = true -- another run started the same build: wait for it
    elseif type(data) == 'table' then
      snap = data
    end
  end
  local timeout = client.snapshot_timeout
  client.snapshot_timeout = math.max(timeout, req.timeout or 0, client.build_timeout)
  local ok, werr, wcode = wait_snapshot(client, name, snap or nil)
  client.snapshot_timeout = timeout
  if not ok then
    local bcode = (wcode == 'ESNAPSHOT' or not wcode) and errors.EBUILD or wcode
    return nil, errors.new(bcode, (werr:gsub('^daytona: snapshot', 'daytona: build: snapshot')), { log = werr }), bcode
  end
  return { image = rcp.base, layer = name, snapshot = name, cache_hit = hit }
end

-- ---- destroy, list -------------------------------------------------------------------------

--- Delete a sandbox; one that is already gone (404) counts as deleted.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  return adapter.deleted(call(client, 'DELETE', api_url(client, '/sandbox/' .. urlencode(sb.id))))
end

--- Sandboxes whose labels include filter.labels: {{id, labels, created, state}}. Pages are
--- followed (nextCursor), at most 50 of 100.
function M.list(client, filter)
  local labels = filter and filter.labels
  local out, cursor = {}, nil
  for _ = 1, 50 do
    local q = { 'limit=100' }
    if labels and next(labels) then q[#q + 1] = 'labels=' .. urlencode(jsonl.encode(labels)) end
    if cursor then q[#q + 1] = 'cursor=' .. urlencode(cursor) end
    local data, err, code = call(client, 'GET', api_url(client, '/sandbox?' .. table.concat(q, '&')))
    if not data then return nil, err, code end
    local items = type(data) == 'table' and (data.items or data) or {}
    for _, s in ipairs(type(items) == 'table' and items or {}) do
      if type(s) == 'table' and type(s.id) == 'string' then
        local match = true
        for k, v in pairs(labels or {}) do
          if type(s.labels) ~= 'table' or s.labels[k] ~= v then match = false end
        end
        if match then
          out[#out + 1] = { id = s.id, labels = type(s.labels) == 'table' and s.labels or {},
                            created = str(s.createdAt), state = str(s.state) }
        end
      end
    end
    cursor = type(data) == 'table' and str(data.nextCursor) or nil
    if not cursor or cursor == '' then break end
  end
  return out
end

--- What the run records as the runtime.
function M.runtime(client)
  return 'daytona (' .. client.base .. (client.target and (', target ' .. client.target) or '') .. ')'
end

return M
