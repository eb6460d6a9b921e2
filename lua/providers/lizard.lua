--- The Lizard provider: sandboxes from the Lizard REST API (docs/providers/lizard.md).
---
---   base    LIZARD_API_URL (default https://lizard.build), header X-API-Key: LIZARD_API_KEY
---   create  POST   /api/sandboxes {projectId, template, size, region, timeoutMs, metadata (the labels)}
---                  -> {sandboxId, cpus, memoryMb, region, ...}
---   exec    POST   /api/sandboxes/{id}/exec {cmd, timeoutMs, workdir, envs} -> {exitCode, stdout, stderr}
---   destroy DELETE /api/sandboxes/{id}   (404 = already gone)
---   list    GET    /api/sandboxes   (filtered by metadata here: the API has no label filter)
---
--- Expected failures return nil, message, CODE: an HTTP error status becomes "HTTP_<status>"
--- ("HTTP_401", "HTTP_403", "HTTP_429", ...), so callers branch on codes (the startup arena stops
--- on HTTP_401/HTTP_403); transport failures keep cseng.http's codes (ETIMEDOUT, ECONNREFUSED, ...).
--- create and exec return the HTTP timings of their call (sb.http_timings, res.http_timings:
--- curl's cumulative dns/connect/tls/ttfb/total marks, in seconds).
--- The API has no file transfer: put and get run base64 through exec, in chunks.
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')

local M = {
  name = 'lizard',
  version = '1.0',
  description = 'Lizard sandboxes (lizard.build REST API)',
  remote = true,
  credentials = { 'LIZARD_API_KEY', 'LIZARD_PROJECT_ID' },
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 }, -- no published rates: set them in the plan
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = false },
  -- sandboxId (lz-<digits> from lizard.build)
  id_format = { pattern = '^[%w][%w_-]*$', example = 'lz-00000042', max = 128 },
}

local DEFAULTS = {
  api_url = 'https://lizard.build', template = 'base', size = 'small', region = 'us-east-1',
  timeout_ms = 300000, request_timeout = 90, exec_timeout = 30,
}

---@class lizard.client
---@field base string API base URL without trailing slash
---@field key string
---@field project string
---@field template string
---@field size string
---@field region string
---@field timeout_ms integer sandbox lifetime asked for at create (auto-delete safety net)
---@field request_timeout number seconds for control-plane calls

--- Read the settings (cfg first, then the environment) and check the credentials. Raises a
--- one-line error naming every missing variable; makes no request.
---@param cfg? table {getenv=fn, api_url, api_key, project_id, template, size, region, timeout_ms, request_timeout}
---@return lizard.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local key, project = adapter.credentials('lizard', setting,
    { { 'api_key', 'LIZARD_API_KEY', secret = true }, { 'project_id', 'LIZARD_PROJECT_ID' } })
  local base = tostring(setting('api_url', 'LIZARD_API_URL') or DEFAULTS.api_url):gsub('/+$', '')
  return {
    base = base, key = key, project = project,
    template = setting('template', 'LIZARD_TEMPLATE') or DEFAULTS.template,
    size = setting('size', 'LIZARD_SIZE') or DEFAULTS.size,
    region = setting('region', 'LIZARD_REGION') or DEFAULTS.region,
    timeout_ms = adapter.int(setting('timeout_ms') or DEFAULTS.timeout_ms),
    request_timeout = tonumber(setting('request_timeout') or DEFAULTS.request_timeout),
  }
end

local escape_id = adapter.urlencode

-- One API call: JSON in, JSON out. Returns the decoded body (or true for an empty one) and the
-- response, or nil, message, CODE.
local function call(client, method, path, body, timeout)
  return adapter.request('lizard', method, client.base .. path, {
    headers = { ['X-API-Key'] = client.key, Accept = 'application/json' }, json = body,
    timeout = timeout or client.request_timeout, what = method .. ' ' .. path,
  })
end

--- Create a sandbox. spec: {template, size, region, ttl_seconds, labels}. The sandbox's
--- reported allocation is in sb.allocation, the create call's HTTP timings in sb.http_timings.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = {
    projectId = client.project,
    template = spec.template or spec.image or client.template,
    size = spec.size or client.size,
    region = spec.region or client.region,
    timeoutMs = spec.ttl_seconds and math.floor(spec.ttl_seconds * 1000) or client.timeout_ms,
  }
  if spec.labels and next(spec.labels) then body.metadata = util.copy(spec.labels) end
  local data, res, code, raw = adapter.post_created(call, client, '/api/sandboxes', body, 'sandboxId',
    'lizard: POST /api/sandboxes')
  if not data then return nil, res, code, raw end -- raw: the response (admission reads Retry-After)
  return {
    id = data.sandboxId,
    code_path = 'POST /api/sandboxes, commands by POST /api/sandboxes/{id}/exec',
    labels = spec.labels or {},
    workdir = spec.workdir,
    env = spec.env,
    allocation = {
      cpus = data.cpus, memory_mb = data.memoryMb, region = data.region or body.region,
      template = data.template or body.template, size = data.size or body.size,
    },
    http_timings = res.timings,
  }
end

--- Run a shell command. opts: {timeout (s, default 30), cwd, env}. Returns
--- {code, stdout, stderr, http_timings} or nil, message, CODE. The sandbox user is the API's.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local envs = util.merge(sb.env, opts.env)
  local body = { cmd = cmd, timeoutMs = math.floor(timeout * 1000), workdir = opts.cwd or sb.workdir }
  if next(envs) then body.envs = envs end
  -- the HTTP timeout leaves the API room to report its own command timeout
  local data, res, code = call(client, 'POST', '/api/sandboxes/' .. escape_id(sb.id) .. '/exec', body, timeout + 15)
  if not data then return nil, res, code end
  if type(data) ~= 'table' or math.tointeger(data.exitCode) == nil then
    return nil, 'lizard: exec: no exitCode in the response', 'EPROTO'
  end
  return {
    code = math.tointeger(data.exitCode),
    stdout = type(data.stdout) == 'string' and data.stdout or '',
    stderr = type(data.stderr) == 'string' and data.stderr or '',
    timed_out = data.timedOut == true or nil,
    http_timings = res.timings,
  }
end

-- Files travel as base64 through exec, CHUNK bytes of payload per call.
local CHUNK = 48 * 1024

--- Unpack a tar (bytes) into a directory of the sandbox.
function M.put(client, sb, dir, tar_bytes)
  local tmp = adapter.tmp_path('put', '.b64', 4)
  local b64 = crypto.base64(tar_bytes)
  for i = 1, #b64, CHUNK do
    local part = b64:sub(i, i + CHUNK - 1)
    local r, err, code = M.exec(client, sb, "printf '%s' '" .. part .. "' >> " .. tmp, { timeout = 60, cwd = '/' })
    if not r then return nil, err, code end
    if r.code ~= 0 then return nil, 'lizard: put: writing ' .. tmp .. ': ' .. util.trim(r.stderr), 'EIO' end
  end
  return adapter.extract_tar_in_sandbox(M, client, sb, tmp, dir, { base64 = true })
end

--- Read a file of the sandbox.
function M.get(client, sb, path)
  local r, err, code = M.exec(client, sb, 'base64 -w0 -- ' .. util.shell_quote(path), { timeout = 120, cwd = '/' })
  if not r then return nil, err, code end
  if r.code ~= 0 then return nil, path .. ': ' .. util.trim(r.stderr), 'ENOENT' end
  local data = crypto.unbase64(util.trim(r.stdout))
  if not data then return nil, path .. ': bad base64 from the sandbox', 'EPROTO' end
  return data
end

--- Destroy a sandbox; one that is already gone (404) counts as destroyed.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  return adapter.deleted(call(client, 'DELETE', '/api/sandboxes/' .. escape_id(sb.id), nil))
end

--- Sandboxes the key can see whose metadata has every label of filter.labels: {{id, labels,
--- created}}. The API lists them all; the filter is applied here, on the metadata create sent.
function M.list(client, filter)
  local data, err, code = call(client, 'GET', '/api/sandboxes', nil)
  if not data then return nil, err, code end
  local items = type(data) == 'table' and (data.sandboxes or data.items or data.data or data) or {}
  local out = {}
  local want = filter and filter.labels or {}
  for _, s in ipairs(items) do
    if type(s) == 'table' then
      local meta = type(s.metadata) == 'table' and s.metadata or (type(s.labels) == 'table' and s.labels) or {}
      local match = true
      for k, v in pairs(want) do if meta[k] ~= v then match = false end end
      if match then
        out[#out + 1] = { id = s.sandboxId or s.id, labels = meta, created = s.createdAt, region = s.region }
      end
    end
  end
  return out
end

return M
