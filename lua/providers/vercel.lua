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
--- shell by the API, so every command is
---   bash -c 'exec timeout -s KILL <N> bash -c <cmd> [< stdin file]'
--- and a run killed at its deadline (exit 137 after >= N s) is timed_out = true, code 124; the
--- body's own timeout (N + 30 s) is a backstop. The NDJSON stream is parsed as the bytes arrive
--- (http.request's stream callback); output is kept as tails (adapter.tail_buffer).
---
--- Expected failures return nil, message, CODE: an HTTP status outside 2xx is "HTTP_<status>",
--- a stream that ends without an exit code (or an "error" line) "EPROTO"; transport failures
--- keep cseng.http's codes.
local http = require 'cseng.http'
local clock = require 'cseng.clock'
local task = require 'cseng.task'
local archive = require 'cseng.archive'
local cjson = require 'cjson'
local jsonl = require 'cseng.lib.jsonl'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local adapter = require 'providers.shared.adapter'

local M = {
  name = 'vercel',
  version = '2.0',
  description = 'Vercel Sandbox microVMs (v2/v3 sessions API of @vercel/sandbox 3.x)',
  remote = true,
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; FROM/RUN are fidelity gaps
  credentials = { { 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN' },
                  'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID' },
  -- PROVIDERS.md: active CPU per vCPU-s, memory per GiB-s, $0.60 per 1M creations
  rates = { vcpu_s = 0.0000356, gib_s = 0.0000059, per_create = 0.0000006 },
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = true },
  artifact_env = 'VERCEL_SNAPSHOT_ID',
  -- sb.id is the session id (sess_..., sbx_...): letters, digits, - and _
  id_format = { pattern = '^[%w][%w_-]*$', example = 'sess_0123456789abcdef', max = 256 },
}

local DEFAULTS = {
  api_url = 'https://vercel.com/api', runtime = 'python3.13', request_timeout = 60,
  exec_timeout = 600, stream_grace = 60, backstop = 30, sandbox_timeout_ms = 45 * 60 * 1000,
  tail_bytes = 1 << 20, snapshot_wait = 600,
}

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

-- ---- HTTP ----------------------------------------------------------------------------------

local urlencode, str = adapter.urlencode, adapter.str

-- Vercel answers errors as {"error": {"code", "message"}}.
local api_message = adapter.message_from { 'error.message', 'error', 'message' }

local function url_for(client, path, query)
  local q = 'teamId=' .. urlencode(client.team)
  for _, kv in ipairs(query or {}) do q = q .. '&' .. kv[1] .. '=' .. urlencode(kv[2]) end
  return client.base .. path .. '?' .. q
end

-- What the SDK sends on every call (its user agent aside): the token and a JSON content type.
local function headers(client, extra)
  local h = { Authorization = 'Bearer ' .. client.token, ['Content-Type'] = 'application/json',
              Accept = 'application/json' }
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

local function call(client, method, path, o)
  o = o or {}
  -- jsonl.encode: an empty jsonl.array() is [] (ports), an empty table {} (env)
  return adapter.request('vercel', method, url_for(client, path, o.query), {
    headers = headers(client, o.headers), body = o.json ~= nil and jsonl.encode(o.json) or o.body, raw = o.raw,
    timeout = o.timeout or client.request_timeout, what = method .. ' ' .. path, message = api_message,
  })
end

--- An NDJSON request: on_record(value) for each line as it arrives. Returns the response, or
--- nil, message, CODE (HTTP statuses outside 2xx as HTTP_<status>, with the body's message).
local function ndjson(client, method, path, o, on_record)
  local what = method .. ' ' .. path
  local pending, errbody, bad = '', {}, nil
  local hdrs, body = headers(client), jsonl.encode(o.json)
  hdrs.Accept = 'application/x-ndjson, application/json'
  local res, err, code = http.request { method = method, url = url_for(client, path, o.query), headers = hdrs,
    body = body, timeout = o.timeout or client.request_timeout,
    stream = function(chunk)
      errbody[#errbody + 1] = #errbody < 64 and chunk or nil
      pending = pending .. chunk
      while true do
        local nl = pending:find('\n', 1, true)
        if not nl then break end
        local line = pending:sub(1, nl - 1)
        pending = pending:sub(nl + 1)
        if line:find('%S') then
          local ok, v = pcall(cjson.decode, line)
          if ok and type(v) == 'table' then on_record(v) else bad = bad or line end
        end
      end
      return true
    end }
  if not res then return nil, secrets.redact('vercel: ' .. what .. ': ' .. tostring(err)), code end
  if res.status < 200 or res.status > 299 then
    return nil, secrets.redact(string.format('vercel: %s: HTTP %d: %s', what, res.status, api_message(table.concat(errbody)))),
      'HTTP_' .. res.status
  end
  if pending:find('%S') then
    local ok, v = pcall(cjson.decode, pending)
    if ok and type(v) == 'table' then on_record(v) else bad = bad or pending end
  end
  if bad then return nil, 'vercel: ' .. what .. ': a stream line is not JSON: ' .. adapter.snippet(bad), 'EPROTO' end
  return res
end

local function session_path(sb, rest) return '/v2/sandboxes/sessions/' .. urlencode(sb.id) .. (rest or '') end

-- ---- create --------------------------------------------------------------------------------

--- The create endpoint and body for a spec (exposed for the specs): /v2/sandboxes with a
--- runtime, /v3/sandboxes with an image or a snapshot source (the SDK sends a snapshot source
--- with neither runtime nor image, so to /v3).
---@return string path, table body
function M.create_body(client, spec)
  local body = { projectId = client.project, ports = jsonl.array(), persistent = false }
  local vcpus = client.vcpus or (spec.cpus and math.max(1, math.tointeger(math.ceil(spec.cpus))))
  if vcpus then body.resources = { vcpus = vcpus } end
  body.timeout = spec.ttl_seconds and math.tointeger(math.ceil(spec.ttl_seconds)) * 1000 or DEFAULTS.sandbox_timeout_ms
  if spec.labels and next(spec.labels) then body.tags = util.copy(spec.labels) end
  local snap = spec.warm_artifact or client.snapshot
  if snap then
    body.source = { type = 'snapshot', snapshotId = snap }
    return '/v3/sandboxes', body
  end
  if client.image then
    body.image = client.image
    return '/v3/sandboxes', body
  end
  body.runtime = spec.runtime or client.runtime
  return '/v2/sandboxes', body
end

--- Create a sandbox. spec: {labels (sent as tags), env, workdir, cpus, ttl_seconds,
--- warm_artifact, runtime}. Returns sb = {id = session id, name = sandbox name, ...}.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local path, body = M.create_body(client, spec)
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

-- ---- exec ----------------------------------------------------------------------------------

local upload -- forward

--- The bash -c script sent for a shell command (exposed for the specs).
function M.wrap_command(cmd, timeout, stdin_path)
  local run = 'timeout -s KILL ' .. math.max(1, math.tointeger(math.ceil(timeout))) .. ' bash -c ' .. util.shell_quote(cmd)
  if not stdin_path then return 'exec ' .. run end
  return run .. ' < ' .. stdin_path .. '; rc=$?; rm -f ' .. stdin_path .. '; exit $rc'
end

--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, cmd_id, stdout_dropped, stderr_dropped} or nil,
--- message, CODE. Commands run as root (sudo).
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local env = util.merge(sb.env, opts.env)
  local stdin_path, serr, scode = adapter.stdin_upload(upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  local body = { command = 'bash', args = { '-c', M.wrap_command(cmd, timeout, stdin_path) }, env = env,
                 sudo = true, wait = true, logs = true,
                 timeout = math.tointeger(math.ceil(timeout + DEFAULTS.backstop)) * 1000 }
  local cwd = opts.cwd or sb.workdir
  if cwd then body.cwd = cwd end
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  local out, errb = adapter.tail_buffer(cap), adapter.tail_buffer(cap)
  local t0 = clock.now()
  local cmd_id, exit_code, stream_err
  local res, err, code = ndjson(client, 'POST', session_path(sb, '/cmd'), { json = body, timeout = timeout + client.stream_grace },
    function(rec)
      local c = type(rec.command) == 'table' and rec.command or nil
      if c then
        cmd_id = str(c.id) or cmd_id
        if adapter.int(c.exitCode) then exit_code = adapter.int(c.exitCode) end
        return
      end
      if rec.stream == 'stdout' and str(rec.data) then out.add(rec.data)
      elseif rec.stream == 'stderr' and str(rec.data) then errb.add(rec.data)
      elseif rec.stream == 'error' then
        local d = type(rec.data) == 'table' and rec.data or {}
        stream_err = stream_err or (tostring(d.code) .. ': ' .. tostring(d.message))
      end
    end)
  local elapsed = (clock.now() - t0) / 1e9
  if not res then return nil, err, code end
  if stream_err then return nil, 'vercel: exec: the stream reported an error: ' .. stream_err, 'EPROTO' end
  if not cmd_id then return nil, 'vercel: exec: no command id in the stream', 'EPROTO' end
  if not exit_code then return nil, 'vercel: exec: the stream ended without the exit code', 'EPROTO' end
  local timed_out = exit_code == 137 and elapsed >= timeout
  return {
    code = timed_out and 124 or exit_code,
    stdout = out.get(), stderr = errb.get(),
    stdout_dropped = out.dropped() > 0 and out.dropped() or nil,
    stderr_dropped = errb.dropped() > 0 and errb.dropped() or nil,
    timed_out = timed_out, elapsed = elapsed, cmd_id = cmd_id, http_timings = res.timings,
  }
end

-- ---- files ---------------------------------------------------------------------------------

-- Write bytes to an absolute path of the sandbox: fs/write takes a gzipped tar that the
-- sandbox extracts under x-cwd (the SDK's writeFiles: entries relative to "/", x-cwd "/").
upload = function(client, sb, path, data)
  local tgz, perr = archive.pack({ { path = path:gsub('^/+', ''), data = data, mode = '0644' } }, { format = 'tar.gz' })
  if not tgz then return nil, 'vercel: packing ' .. path .. ': ' .. tostring(perr), 'EIO' end
  local ok, err, code = call(client, 'POST', session_path(sb, '/fs/write'), {
    headers = { ['Content-Type'] = 'application/gzip', ['x-cwd'] = '/' }, body = tgz, timeout = 600 })
  if not ok then return nil, err, code end
  return true
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: uploaded as one
--- file through fs/write, then extracted by a command (adapter.put_by_upload), so a symlink the
--- sandbox planted is never followed by the upload itself.
M.put = adapter.put_via(M, upload)

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

-- ---- destroy, list, snapshot ---------------------------------------------------------------

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

--- A snapshot: {id, status, sizeBytes, ...} (GET /v2/sandboxes/snapshots/{id}).
function M.get_snapshot(client, id)
  local data, err, code = call(client, 'GET', '/v2/sandboxes/snapshots/' .. urlencode(id))
  if not data then return nil, err, code end
  local s = type(data) == 'table' and type(data.snapshot) == 'table' and data.snapshot or nil
  if not s then return nil, 'vercel: snapshot ' .. id .. ': no snapshot in the response', 'EPROTO' end
  return s
end

--- Delete a snapshot (a warm artifact no longer wanted); one already gone counts as deleted.
function M.delete_snapshot(client, id)
  return adapter.deleted(call(client, 'DELETE', '/v2/sandboxes/snapshots/' .. urlencode(id)))
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
    s, err, code = M.get_snapshot(client, id)
    if not s then return nil, err, code end
  end
  return id
end

--- What the run records as the runtime.
function M.runtime(client)
  return 'vercel sandbox (' .. (client.image or client.runtime) .. ', ' .. client.base .. ')'
end

return M
