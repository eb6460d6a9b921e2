--- The Vercel provider: Vercel Sandbox microVMs through the REST API the @vercel/sandbox SDK
--- speaks (docs/providers/vercel.md; what is unconfirmed against the live service is listed there).
---
---   base    VERCEL_API_URL (default https://vercel.com/api), Authorization: Bearer <token>,
---           ?teamId=VERCEL_TEAM_ID on every call
---   create  POST /v1/sandboxes {projectId, runtime, resources{vcpus}, timeout (ms),
---                source{type:"snapshot", snapshotId}} -> {sandbox{id, status, ...}}
---   exec    POST /v1/sandboxes/{id}/cmd {command:"bash", args:["-c", ...], cwd, env, sudo, wait:true}
---                -> NDJSON: {command{id, ...}} then {command{id, exitCode}}
---           GET  /v1/sandboxes/{id}/cmd/{cmdId}/logs -> NDJSON {stream:"stdout"|"stderr", data}
---   destroy POST /v1/sandboxes/{id}/stop   (404, or an already stopped sandbox, = success)
---   list    GET  /v1/sandboxes?projectId=...   -> {sandboxes, pagination{next}}
---   snapshot POST /v1/sandboxes/{id}/snapshot -> {snapshot{id}} (stops the sandbox)
---
--- The token is the first set of VERCEL_TOKEN, VERCEL_ACCESS_TOKEN, VERCEL_API_KEY and
--- VERCEL_OIDC_TOKEN. Commands are exec'd without a shell by the API, so every command is
---   bash -c 'exec timeout -s KILL <N> bash -c <cmd> [< stdin file]'
--- and a run killed at its deadline (exit 137 after >= N s) is timed_out = true, code 124.
--- Both NDJSON streams are parsed as the bytes arrive (http.request's stream callback); output
--- is kept as tails (adapter.tail_buffer). put and get run base64 through exec, in chunks.
---
--- Expected failures return nil, message, CODE: an HTTP status outside 2xx is "HTTP_<status>",
--- a stream that ends without an exit code "EPROTO"; transport failures keep cseng.http's codes.
local http = require 'cseng.http'
local clock = require 'cseng.clock'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local util = require 'util'
local adapter = require 'adapter'

local M = {
  name = 'vercel',
  version = '1.0',
  description = 'Vercel Sandbox microVMs (REST API of @vercel/sandbox)',
  remote = true,
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; FROM/RUN are fidelity gaps
  credentials = { { 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN' },
                  'VERCEL_TEAM_ID', 'VERCEL_PROJECT_ID' },
  -- PROVIDERS.md: active CPU per vCPU-s, memory per GiB-s, $0.60 per 1M creations
  rates = { vcpu_s = 0.0000356, gib_s = 0.0000059, per_create = 0.0000006 },
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = true },
  artifact_env = 'VERCEL_SNAPSHOT_ID',
}

local DEFAULTS = {
  api_url = 'https://vercel.com/api', runtime = 'python3.13', request_timeout = 60,
  exec_timeout = 600, stream_grace = 60, sandbox_timeout_ms = 45 * 60 * 1000, tail_bytes = 1 << 20,
}

local TOKEN_VARS = { 'VERCEL_TOKEN', 'VERCEL_ACCESS_TOKEN', 'VERCEL_API_KEY', 'VERCEL_OIDC_TOKEN' }

---@class vercel.client
---@field base string
---@field token string
---@field team string
---@field project string
---@field runtime string
---@field vcpus integer|nil
---@field snapshot string|nil VERCEL_SNAPSHOT_ID: every sandbox from this snapshot
---@field request_timeout number
---@field stream_grace number seconds the command call may outlast the command's timeout

--- Read the settings (cfg first, then the environment) and check the credentials. Raises one
--- line naming every missing variable; makes no request.
---@param cfg? table {getenv=fn, api_url, token, team_id, project_id, runtime, vcpus, snapshot_id, request_timeout}
---@return vercel.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local token = setting('token')
  for _, var in ipairs(TOKEN_VARS) do token = token or setting(nil, var) end
  local team, project = setting('team_id', 'VERCEL_TEAM_ID'), setting('project_id', 'VERCEL_PROJECT_ID')
  local missing = {}
  if not token then missing[#missing + 1] = table.concat(TOKEN_VARS, ' or ', 1, 3) .. ' (or VERCEL_OIDC_TOKEN)' end
  if not team then missing[#missing + 1] = 'VERCEL_TEAM_ID' end
  if not project then missing[#missing + 1] = 'VERCEL_PROJECT_ID' end
  if #missing > 0 then
    local many = #missing > 1
    error(string.format('vercel provider: %s %s not set (export %s, or put %s in an --env-file)',
      table.concat(missing, ' and '), many and 'are' or 'is', many and 'them' or 'it', many and 'them' or 'it'), 0)
  end
  util.add_secret(token)
  return {
    base = tostring(setting('api_url', 'VERCEL_API_URL') or DEFAULTS.api_url):gsub('/+$', ''),
    token = token, team = team, project = project,
    runtime = setting('runtime', 'VERCEL_RUNTIME') or DEFAULTS.runtime,
    vcpus = adapter.int(setting('vcpus', 'VERCEL_VCPUS')),
    snapshot = setting('snapshot_id', 'VERCEL_SNAPSHOT_ID'),
    request_timeout = tonumber(setting('request_timeout')) or DEFAULTS.request_timeout,
    stream_grace = tonumber(setting('stream_grace')) or DEFAULTS.stream_grace,
  }
end

-- ---- HTTP ----------------------------------------------------------------------------------

local urlencode, str = adapter.urlencode, adapter.str

-- Vercel answers errors as {"error": {"code", "message"}}.
local function api_message(body)
  local ok, j = pcall(cjson.decode, body or '')
  if ok and type(j) == 'table' then
    local e = j.error
    if type(e) == 'table' and type(e.message) == 'string' then return e.message end
    if type(e) == 'string' then return e end
    if type(j.message) == 'string' then return j.message end
  end
  return adapter.snippet(body)
end
M._api_message = api_message

local function url_for(client, path, query)
  local q = 'teamId=' .. urlencode(client.team)
  for _, kv in ipairs(query or {}) do q = q .. '&' .. kv[1] .. '=' .. urlencode(kv[2]) end
  return client.base .. path .. '?' .. q
end

local function headers(client)
  return { Authorization = 'Bearer ' .. client.token, Accept = 'application/json' }
end

local function call(client, method, path, o)
  o = o or {}
  return adapter.request('vercel', method, url_for(client, path, o.query), {
    headers = headers(client), json = o.json, timeout = o.timeout or client.request_timeout,
    what = method .. ' ' .. path, message = api_message,
  })
end
M._call = call

--- An NDJSON request: on_record(value) for each line as it arrives. Returns the response, or
--- nil, message, CODE (HTTP statuses outside 2xx as HTTP_<status>, with the body's message).
local function ndjson(client, method, path, o, on_record)
  local what = method .. ' ' .. path
  local pending, errbody, bad = '', {}, nil
  local status
  local hdrs, body = adapter.body { headers = headers(client), json = o.json }
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
  if not res then return nil, util.redact('vercel: ' .. what .. ': ' .. tostring(err)), code end
  status = res.status
  if status < 200 or status > 299 then
    return nil, util.redact(string.format('vercel: %s: HTTP %d: %s', what, status, api_message(table.concat(errbody)))),
      'HTTP_' .. status
  end
  if pending:find('%S') then
    local ok, v = pcall(cjson.decode, pending)
    if ok and type(v) == 'table' then on_record(v) else bad = bad or pending end
  end
  if bad then return nil, 'vercel: ' .. what .. ': a stream line is not JSON: ' .. adapter.snippet(bad), 'EPROTO' end
  return res
end

local function sandbox_path(sb, rest) return '/v1/sandboxes/' .. urlencode(sb.id) .. (rest or '') end

-- ---- create --------------------------------------------------------------------------------

--- The POST /v1/sandboxes body for a spec (exposed for the specs).
function M.create_body(client, spec)
  local body = { projectId = client.project, runtime = spec.runtime or client.runtime }
  local vcpus = client.vcpus or (spec.cpus and math.max(1, math.tointeger(math.ceil(spec.cpus))))
  if vcpus then body.resources = { vcpus = vcpus } end
  body.timeout = spec.ttl_seconds and math.tointeger(math.ceil(spec.ttl_seconds)) * 1000 or DEFAULTS.sandbox_timeout_ms
  local snap = spec.warm_artifact or client.snapshot
  if snap then body.source = { type = 'snapshot', snapshotId = snap } end
  return body
end

--- Create a sandbox. spec: {labels, env, workdir, cpus, ttl_seconds, warm_artifact, runtime}.
--- The API has no labels: they are kept on sb only (list cannot filter by them).
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = M.create_body(client, spec)
  local data, res, code = call(client, 'POST', '/v1/sandboxes', { json = body })
  if not data then return nil, res, code end
  local s = type(data) == 'table' and type(data.sandbox) == 'table' and data.sandbox or nil
  if not s or type(s.id) ~= 'string' or s.id == '' then
    return nil, 'vercel: POST /v1/sandboxes: no sandbox.id in the response', 'EPROTO'
  end
  return {
    id = s.id, labels = spec.labels or {}, env = spec.env, workdir = spec.workdir,
    image = body.source and body.source.snapshotId or body.runtime, status = str(s.status),
    allocation = { vcpus = tonumber(s.vcpus) or (body.resources and body.resources.vcpus), memory_mb = tonumber(s.memory), region = str(s.region),
                   runtime = str(s.runtime) or body.runtime },
    http_timings = res.timings,
  }
end

-- ---- exec ----------------------------------------------------------------------------------

local stage_file -- forward

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
  local stdin_path
  if opts.stdin then
    stdin_path = adapter.tmp_path('stdin')
    local ok, err, code = stage_file(client, sb, stdin_path, opts.stdin)
    if not ok then return nil, err, code end
  end
  local body = { command = 'bash', args = { '-c', M.wrap_command(cmd, timeout, stdin_path) }, sudo = true, wait = true }
  local cwd = opts.cwd or sb.workdir
  if cwd then body.cwd = cwd end
  if next(env) then body.env = env end
  local t0 = clock.now()
  local cmd_id, exit_code
  local res, err, code = ndjson(client, 'POST', sandbox_path(sb, '/cmd'), { json = body, timeout = timeout + client.stream_grace },
    function(rec)
      local c = type(rec.command) == 'table' and rec.command or nil
      if not c then return end
      cmd_id = str(c.id) or cmd_id
      if adapter.int(c.exitCode) then exit_code = adapter.int(c.exitCode) end
    end)
  local elapsed = (clock.now() - t0) / 1e9
  if not res then return nil, err, code end
  if not cmd_id then return nil, 'vercel: exec: no command id in the stream', 'EPROTO' end
  if not exit_code then return nil, 'vercel: exec: the stream ended without the exit code', 'EPROTO' end
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  local out, errb = adapter.tail_buffer(cap), adapter.tail_buffer(cap)
  local lres, lerr, lcode = ndjson(client, 'GET', sandbox_path(sb, '/cmd/' .. urlencode(cmd_id) .. '/logs'), {},
    function(rec)
      local data = str(rec.data)
      if not data then return end
      if rec.stream == 'stderr' then errb.add(data) elseif rec.stream == 'stdout' then out.add(data) end
    end)
  if not lres then return nil, lerr, lcode end
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

local CHUNK = 48 * 1024 -- base64 bytes per command

-- Write bytes to a file of the sandbox as base64 appended in chunks (file = path .. '.b64' while
-- being written), then decoded.
local function stage_b64(client, sb, path, data)
  local b64 = crypto.base64(data)
  local q = util.shell_quote(path)
  local r, err, code = M.exec(client, sb, ': > ' .. q, { timeout = 60, cwd = '/' })
  if not r then return nil, err, code end
  for i = 1, #b64, CHUNK do
    r, err, code = M.exec(client, sb, "printf '%s' '" .. b64:sub(i, i + CHUNK - 1) .. "' >> " .. q,
      { timeout = 60, cwd = '/' })
    if not r then return nil, err, code end
    if r.code ~= 0 then return nil, 'vercel: writing ' .. path .. ': ' .. util.trim(r.stderr), 'EIO' end
  end
  return true
end

stage_file = function(client, sb, path, data)
  local ok, err, code = stage_b64(client, sb, path .. '.b64', data)
  if not ok then return nil, err, code end
  local r
  r, err, code = M.exec(client, sb, 'base64 -d ' .. path .. '.b64 > ' .. path .. ' && rm -f ' .. path .. '.b64',
    { timeout = 60, cwd = '/' })
  if not r then return nil, err, code end
  if r.code ~= 0 then return nil, 'vercel: writing ' .. path .. ': ' .. util.trim(r.stderr), 'EIO' end
  return true
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox.
---@return true|nil ok, string? err, string? code
function M.put(client, sb, dir, tar_bytes)
  -- decoded to a file first: tar detects gzip on a file, not on a pipe
  local tmp = adapter.tmp_path('put', '.tar')
  local ok, err, code = stage_file(client, sb, tmp, tar_bytes)
  if not ok then return nil, err, code end
  return adapter.extract_tar_in_sandbox(M, client, sb, tmp, dir)
end

--- Read a file of the sandbox (ENOENT when it is missing).
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local r, err, code = M.exec(client, sb, 'base64 -w0 -- ' .. util.shell_quote(path),
    { timeout = 120, cwd = '/', tail_bytes = 1 << 30 })
  if not r then return nil, err, code end
  if r.code ~= 0 then return nil, path .. ': ' .. util.trim(r.stderr), 'ENOENT' end
  local data = crypto.unbase64(util.trim(r.stdout))
  if not data then return nil, path .. ': bad base64 from the sandbox', 'EPROTO' end
  return data
end

-- ---- destroy, list, snapshot ---------------------------------------------------------------

--- Stop a sandbox; one that is gone (404) or already stopped (409/410) counts as stopped.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  local ok, err, code = call(client, 'POST', sandbox_path(sb, '/stop'))
  if ok or code == 'HTTP_404' or code == 'HTTP_410' or code == 'HTTP_409' then return true end
  return nil, err, code
end

--- The project's sandboxes that are not stopped: {{id, labels = {}, created, status}}. The API
--- has no labels, so a label filter matches nothing (cleanup never stops what it cannot
--- attribute). Pages are followed (pagination.next, a timestamp cursor), at most 50.
function M.list(client, filter)
  if filter and filter.labels and next(filter.labels) then return {} end
  local out, until_ = {}, nil
  for _ = 1, 50 do
    local query = { { 'projectId', client.project }, { 'limit', '100' } }
    if until_ then query[#query + 1] = { 'until', tostring(until_) } end
    local data, err, code = call(client, 'GET', '/v1/sandboxes', { query = query })
    if not data then return nil, err, code end
    local items = type(data) == 'table' and data.sandboxes or {}
    for _, s in ipairs(type(items) == 'table' and items or {}) do
      local status = type(s) == 'table' and str(s.status)
      if type(s) == 'table' and type(s.id) == 'string' and status ~= 'stopped' and status ~= 'failed' then
        local created = tonumber(s.createdAt)
        out[#out + 1] = { id = s.id, labels = {}, created = created and created // 1000 or nil, status = status }
      end
    end
    local p = type(data) == 'table' and type(data.pagination) == 'table' and data.pagination or {}
    until_ = tonumber(p.next)
    if not until_ then break end
  end
  return out
end

--- Snapshot a prepared sandbox (the API stops it): the snapshot id, which create accepts as
--- spec.warm_artifact.
---@return string|nil id, string? err, string? code
function M.snapshot(client, sb, _key)
  local data, err, code = call(client, 'POST', sandbox_path(sb, '/snapshot'), { timeout = 600 })
  if not data then return nil, err, code end
  local s = type(data) == 'table' and type(data.snapshot) == 'table' and data.snapshot or nil
  local id = s and str(s.id)
  if not id then return nil, 'vercel: snapshot: no snapshot.id in the response', 'EPROTO' end
  return id
end

--- What the run records as the runtime.
function M.runtime(client)
  return 'vercel sandbox (' .. client.runtime .. ', ' .. client.base .. ')'
end

return M
