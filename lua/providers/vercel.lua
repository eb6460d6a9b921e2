--- The Vercel provider: Vercel Sandbox microVMs through the REST API the @vercel/sandbox SDK
--- 3.5 speaks (read from its dist/api-client; docs/providers/vercel.md lists what is checked
--- against the SDK and what is still assumed about the live service).
---
---   base    VERCEL_API_URL (default https://vercel.com/api), Authorization: Bearer <token>,
---           ?teamId=VERCEL_TEAM_ID on every call, Content-Type: application/json
---   create  POST /v2/sandboxes (a runtime given) or /v3/sandboxes (an image, or a snapshot source)
---                {projectId, ports:[], source{type:"snapshot", snapshotId}, timeout (ms),
---                 resources{vcpus}, runtime | image, persistent:false, tags}
---                -> {sandbox{name, currentSessionId, ...}, session{id, vcpus, memory, ...}, routes}
---   exec    POST /v2/sandboxes/sessions/{sessionId}/cmd {command:"bash", args:["-c", ...], cwd,
---                env, sudo:true, wait:true, logs:true, timeout (ms)} -> NDJSON: {command} first,
---                {stream:"stdout"|"stderr"|"error", data} lines, {command{exitCode}} last
---   files   POST .../sessions/{sessionId}/fs/write (a gzipped tar, Content-Type: application/gzip,
---                x-cwd: /), POST .../fs/read {path} -> the bytes (404: no such file)
---   destroy POST .../sessions/{sessionId}/stop (404/409/410 = already stopped)
---   list    GET  /v2/sandboxes?project=&tags=key:value[&cursor=] -> {sandboxes, pagination{next}}
---   warm    POST .../sessions/{sessionId}/snapshot -> {snapshot{id, status}, session} (stops the
---                session); GET / DELETE /v2/sandboxes/snapshots/{id}
---
--- sb.id is the session id (what commands and stop take), so destroy works from a log record's
--- id alone; sb.name is the sandbox's name. `persistent: false`: a stopped persistent sandbox
--- snapshots itself and bills the storage. The token is the first set of VERCEL_TOKEN,
--- VERCEL_ACCESS_TOKEN, VERCEL_API_KEY and VERCEL_OIDC_TOKEN. Commands are exec'd without a
--- shell by the API, so each is a `timeout -s KILL <N> bash -c <cmd>` script, and its NDJSON
--- stream is parsed as the bytes arrive (providers/shared/vercel_wire.lua, with the rest of the
--- wire).
---
--- Expected failures return nil, message, CODE: an HTTP status outside 2xx is "HTTP_<status>",
--- a stream that ends without an exit code (or an "error" line) "EPROTO"; transport failures
--- keep cseng.http's codes.
local clock = require('cseng.clock')
local task = require('cseng.task')
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.vercel_wire')

local M = {
  name = 'vercel',
  version = '2.0',
  description = 'Vercel Sandbox microVMs (v2/v3 sessions API of @vercel/sandbox 3.x)',
  remote = true,
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; FROM/RUN are fidelity gaps
  credentials = { { 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN' },
                  'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID' },
  -- active CPU per vCPU-s, memory per GiB-s, $0.60 per 1M creations (docs/providers/vercel.md)
  rates = { vcpu_s = 0.0000356, gib_s = 0.0000059, per_create = 0.0000006 },
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = true },
  artifact_env = 'VERCEL_SNAPSHOT_ID',
  -- sb.id is the session id (sess_..., sbx_...): letters, digits, - and _
  id_format = { pattern = '^[%w][%w_-]*$', example = 'sess_0123456789abcdef', max = 256 },
}

local DEFAULTS = wire.DEFAULTS
local urlencode, str = adapter.urlencode, adapter.str
local call, session_path = wire.call, wire.session_path

local TOKEN_VARS = { 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN' }

---@class vercel.client
---@field base string
---@field token string
---@field team string
---@field project string
---@field runtime string|nil a runtime (python3.13): POST /v2/sandboxes
---@field image string|nil an image instead of a runtime: POST /v3/sandboxes
---@field vcpus integer|nil
---@field snapshot string|nil VERCEL_SNAPSHOT_ID: every sandbox from this snapshot
---@field request_timeout number
---@field stream_grace number seconds the command call may outlast the command's timeout

--- Read the settings (cfg first, then the environment) and check the credentials. Raises one
--- line naming every missing variable; makes no request.
---@param cfg? table {getenv=fn, api_url, token, team_id, project_id, runtime, image, vcpus, snapshot_id, request_timeout}
---@return vercel.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local token, team, project = adapter.credentials('vercel', setting, { { 'token', TOKEN_VARS, secret = true },
    { 'team_id', 'VERCEL_TEAM_ID' }, { 'project_id', 'VERCEL_PROJECT_ID' } })
  local image = setting('image', 'VERCEL_IMAGE')
  return {
    base = tostring(setting('api_url', 'VERCEL_API_URL') or DEFAULTS.api_url):gsub('/+$', ''),
    token = token, team = team, project = project,
    image = image,
    runtime = not image and (setting('runtime', 'VERCEL_RUNTIME') or DEFAULTS.runtime) or nil,
    vcpus = adapter.int(setting('vcpus', 'VERCEL_VCPUS')),
    snapshot = setting('snapshot_id', 'VERCEL_SNAPSHOT_ID'),
    request_timeout = tonumber(setting('request_timeout')) or DEFAULTS.request_timeout,
    stream_grace = tonumber(setting('stream_grace')) or DEFAULTS.stream_grace,
    snapshot_wait = tonumber(setting('snapshot_wait')) or DEFAULTS.snapshot_wait,
  }
end
--- Create a sandbox. spec: {labels (sent as tags), env, workdir, cpus, ttl_seconds,
--- warm_artifact, runtime}. Returns sb = {id = session id, name = sandbox name, ...}.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local path, body = wire.create_body(client, spec)
  local data, res, code = call(client, 'POST', path, { json = body })
  if not data then return nil, res, code end
  local s = type(data) == 'table' and type(data.session) == 'table' and data.session or nil
  local box = type(data) == 'table' and type(data.sandbox) == 'table' and data.sandbox or {}
  if not s or type(s.id) ~= 'string' or s.id == '' then
    return nil, 'vercel: POST ' .. path .. ': no session.id in the response', 'EPROTO'
  end
  return {
    id = s.id, name = str(box.name), labels = spec.labels or {}, env = spec.env, workdir = spec.workdir,
    image = body.source and body.source.snapshotId or body.image or body.runtime, status = str(s.status),
    allocation = { vcpus = tonumber(s.vcpus) or (body.resources and body.resources.vcpus), memory_mb = tonumber(s.memory),
                   region = str(s.region), runtime = str(s.runtime) or body.runtime },
    http_timings = res.timings,
  }
end
--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, cmd_id, stdout_dropped, stderr_dropped} or nil,
--- message, CODE. Commands run as root (sudo).
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local stdin_path, serr, scode = adapter.stdin_upload(wire.upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  return wire.command(client, sb, cmd, { timeout = opts.timeout or DEFAULTS.exec_timeout, env = util.merge(sb.env, opts.env),
    cwd = opts.cwd or sb.workdir, stdin_path = stdin_path, tail_bytes = opts.tail_bytes })
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: uploaded as one
--- file through fs/write, then extracted by a command (adapter.put_by_upload), so a symlink the
--- sandbox planted is never followed by the upload itself.
M.put = adapter.put_via(M, wire.upload)

--- Read a file of the sandbox (ENOENT when it is missing): POST fs/read {path}.
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local data, err, code = call(client, 'POST', session_path(sb, '/fs/read'), { json = { path = path }, raw = true,
    headers = { Accept = 'application/octet-stream' }, timeout = 600 })
  if not data then
    if code == 'HTTP_404' then return nil, path .. ': no such file in the sandbox', 'ENOENT' end
    return nil, err, code
  end
  return data
end
--- Stop a sandbox's session; one that is gone (404) or already stopped (409/410) counts as
--- stopped. The stop answer's session.activeCpuDurationMs is kept on sb.usage.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  local data, err, code = call(client, 'POST', session_path(sb, '/stop'))
  if data then
    local s = type(data) == 'table' and type(data.session) == 'table' and data.session or {}
    sb.usage = { active_cpu_ms = tonumber(s.activeCpuDurationMs), duration_ms = tonumber(s.duration) }
    return true
  end
  if code == 'HTTP_404' or code == 'HTTP_410' or code == 'HTTP_409' then return true end
  return nil, err, code
end

--- The project's sandboxes that are not stopped: {{id = current session id, name, labels =
--- tags, created, status}}. The API filters by one tag (`tags=key:value`): the first of
--- cseng.run, cseng.launcher or any other label goes to the server, the rest are checked
--- here. Pages are followed (pagination.next, a cursor), at most 50.
function M.list(client, filter)
  local want = filter and filter.labels or {}
  local key
  for _, k in ipairs({ 'cseng.run', 'cseng.launcher' }) do if want[k] then key = key or k end end
  if not key then key = next(want) end
  local out, cursor = {}, nil
  for _ = 1, 50 do
    local query = { { 'project', client.project } } -- the SDK's query: no limit, the server's page size
    if key then query[#query + 1] = { 'tags', key .. ':' .. tostring(want[key]) } end
    if cursor then query[#query + 1] = { 'cursor', cursor } end
    local data, err, code = call(client, 'GET', '/v2/sandboxes', { query = query })
    if not data then return nil, err, code end
    local items = type(data) == 'table' and data.sandboxes or {}
    for _, s in ipairs(type(items) == 'table' and items or {}) do
      local status = type(s) == 'table' and str(s.status)
      local tags = type(s) == 'table' and type(s.tags) == 'table' and s.tags or {}
      local match = true
      for k, v in pairs(want) do if tags[k] ~= v then match = false end end
      if match and status ~= 'stopped' and status ~= 'failed' and status ~= 'aborted' and str(s.currentSessionId) then
        local created = tonumber(s.createdAt)
        out[#out + 1] = { id = s.currentSessionId, name = str(s.name), labels = tags,
                          created = created and created // 1000 or nil, status = status }
      end
    end
    local p = type(data) == 'table' and type(data.pagination) == 'table' and data.pagination or {}
    cursor = str(p.next)
    if not cursor then break end
  end
  return out
end
--- What the run records as the runtime.
function M.runtime(client)
  return 'vercel sandbox (' .. (client.image or client.runtime) .. ', ' .. client.base .. ')'
end

--- Snapshot a prepared sandbox (the API stops its session): the snapshot id, which create
--- accepts as spec.warm_artifact. A snapshot not yet "created" is polled until it is (or fails).
---@return string|nil id, string? err, string? code
function M.snapshot(client, sb, _key)
  local data, err, code = call(client, 'POST', session_path(sb, '/snapshot'), { timeout = 600 })
  if not data then return nil, err, code end
  local s = type(data) == 'table' and type(data.snapshot) == 'table' and data.snapshot or nil
  local id = s and str(s.id)
  if not id then return nil, 'vercel: snapshot: no snapshot.id in the response', 'EPROTO' end
  local deadline = clock.now() + client.snapshot_wait * 1e9
  while s.status ~= 'created' do
    if s.status == 'failed' or s.status == 'deleted' then
      return nil, 'vercel: snapshot ' .. id .. ' is ' .. tostring(s.status), 'ESNAPSHOT'
    end
    if clock.now() > deadline then return nil, 'vercel: snapshot ' .. id .. ' not created in time', 'ETIMEDOUT' end
    task.sleep(1)
    s, err, code = wire.get_snapshot(client, id)
    if not s then return nil, err, code end
  end
  return id
end
--- Delete a snapshot (a warm artifact no longer wanted: cseng prewarm --prune); one already gone
--- counts as deleted.
function M.delete_artifact(client, id)
  return adapter.deleted(call(client, 'DELETE', '/v2/sandboxes/snapshots/' .. urlencode(id)))
end

return M
