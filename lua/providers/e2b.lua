--- The E2B provider: sandboxes from E2B's control-plane API, commands and files through the
--- sandbox's envd daemon (docs/providers/e2b.md; specs: shared/specs/e2b-openapi.yml,
--- e2b-envd.yaml, e2b-process.proto). Its wire (envd, the Connect stream exec reads, the bodies)
--- is providers/shared/e2b_wire.lua, its template build providers/shared/e2b_build.lua.
---
---   base    E2B_API_URL (default https://api.e2b.app), header X-API-Key: E2B_API_KEY
---   create  POST   /v2/sandboxes {templateID, timeout (s), metadata, envVars, allow_internet_access}
---                  -> 201 {sandboxID, envdAccessToken, domain, ...} (running on return; v2 secures
---                  every sandbox, so there is no "secure" key: what the official SDK, e2b 2.51, sends)
---   exec    POST   {envd}/process.Process/Start  (Connect server stream, JSON codec)
---   put     POST   {envd}/files?path=/tmp/...&username=root (multipart "file"), then tar -xf by exec
---   get     GET    {envd}/files?path=...&username=root
---                  (the user is the username parameter, as the SDK sends it: no Authorization header)
---   destroy DELETE /sandboxes/{id}  (204; 404 = already gone)
---   list    GET    /v2/sandboxes?metadata=<urlencoded k=v&...>&state=running (X-Next-Token pages)
---   snapshot GET   /snapshots?name=<name> (reuse one that exists), else POST /sandboxes/{id}/snapshots
---                  {name} -> 201 {snapshotID, names} (warm mode; the artifact is the snapshotID, created
---                  from with POST /v2/sandboxes {templateID = snapshotID})
---   write_files    POST {envd}/files?username=root: every file a multipart part "file" whose filename is
---                  its path, in one request (the SDK's files.write of a list), in batches under
---                  max_upload_bytes; the answer must name every file (capabilities.bulk_upload)
---   fork    POST   /sandboxes/{id}/fork {count, timeout} -> 201 [{sandbox} | {error}]: the sandbox is
---                  checkpointed once and count children boot from it, each succeeding or failing on
---                  its own (capabilities.fork)
---
--- {envd} comes from E2B_ENVD_URL_TEMPLATE (default "https://{port}-{sandbox}.{domain}", port
--- 49983, domain from the create response or E2B_DOMAIN, default e2b.app). Every envd request
--- also carries E2b-Sandbox-Id and E2b-Sandbox-Port headers, so a template without
--- {sandbox} (a loopback fake, a proxy) can still route by sandbox.
---
--- Expected failures return nil, message, CODE: HTTP statuses become "HTTP_<status>" (also
--- Connect's unauthenticated/permission_denied: HTTP_401/HTTP_403), a broken stream
--- "ECONNECT", other Connect errors "ECONNECT" with the Connect code in the message.
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.e2b_wire')
local build = require('providers.shared.e2b_build')

local M = {
  name = 'e2b',
  version = '1.0',
  description = 'E2B sandboxes (control-plane API + envd over Connect)',
  remote = true,
  applies_dockerfile = true, -- env_mode native: the recipe is built as a template (M.build)
  credentials = { 'E2B_API_KEY' },
  -- per second; matches E2B's billing example (8 vCPU + 4 GB = $0.468/h)
  rates = { vcpu_s = 0.000014, gib_s = 0.0000045, per_create = 0 },
  -- the verifier runs as envd's "user" account (non-root); network off unless the task allows it
  -- pause keeps the filesystem and the memory, running processes included (E2B's persistence docs)
  -- fork: children boot from a checkpoint of the running sandbox (its memory too, E2B's docs)
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true, pause = true, snapshot = true,
    pause_memory = true, fork = true, bulk_upload = true },
  -- sandboxID: lower-case letters and digits (older SDKs appended -<clientID>)
  id_format = { pattern = '^[%w][%w-]*$', example = 'i6sbq7qk1r2gqbm8q9fd1', max = 128 },
  -- what one envd upload may carry (cseng's default; E2B_MAX_UPLOAD_BYTES overrides it): bigger
  -- files (an installed agent's archive) go in parts under it (lua/solvers/shared/installed.lua)
  limits = { max_upload_bytes = 100 << 20 },
}

local DEFAULTS = wire.DEFAULTS
local urlencode, str = adapter.urlencode, adapter.str
local api = wire.api

---@class e2b.client
---@field base string
---@field key string
---@field domain string
---@field envd_url_template string
---@field envd_port integer
---@field templates table {default=, map={{pattern, template}}}
---@field user string
---@field verifier_user string
---@field max_timeout integer
---@field request_timeout number
---@field snapshot_timeout number E2B_SNAPSHOT_TIMEOUT
---@field snapshot_prefix string E2B_SNAPSHOT_PREFIX: warm snapshot names are prefix .. key
---@field max_upload_bytes integer E2B_MAX_UPLOAD_BYTES: the most one upload carries (default limits.max_upload_bytes)

--- Read the settings (cfg first, then the environment through cfg.getenv) and check the
--- credential. Raises a one-line error naming E2B_API_KEY when it is missing; makes no request.
---@param cfg? table {getenv=fn, api_url, api_key, domain, envd_url_template, envd_port, template, user,
---                   verifier_user, max_timeout, request_timeout, max_upload_bytes}
---@return e2b.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local key = adapter.credentials('e2b', setting, { { 'api_key', 'E2B_API_KEY', secret = true } })
  local raw_max = setting('max_upload_bytes', 'E2B_MAX_UPLOAD_BYTES')
  local max_upload = adapter.int(raw_max)
  if raw_max ~= nil and (not max_upload or max_upload <= 0) then
    errors.raise(errors.ECONFIG, 'e2b provider: E2B_MAX_UPLOAD_BYTES (max_upload_bytes) must be a positive number of bytes, not '
      .. tostring(raw_max))
  end
  return {
    base = tostring(setting('api_url', 'E2B_API_URL') or DEFAULTS.api_url):gsub('/+$', ''),
    key = key,
    domain = setting('domain', 'E2B_DOMAIN') or DEFAULTS.domain,
    envd_url_template = setting('envd_url_template', 'E2B_ENVD_URL_TEMPLATE') or DEFAULTS.envd_url_template,
    envd_port = adapter.int(setting('envd_port', 'E2B_ENVD_PORT')) or DEFAULTS.envd_port,
    templates = wire.templates(setting('template', 'E2B_TEMPLATE')),
    template_pinned = setting('template', 'E2B_TEMPLATE') ~= nil,
    build_mode = setting('build', 'E2B_BUILD'),
    build_timeout = tonumber(setting('build_timeout', 'E2B_BUILD_TIMEOUT')) or 1800,
    build_poll = tonumber(setting('build_poll')) or 0.2,
    user = setting('user', 'E2B_USER') or DEFAULTS.user,
    verifier_user = setting('verifier_user', 'E2B_VERIFIER_USER') or DEFAULTS.verifier_user,
    max_timeout = adapter.int(setting('max_timeout', 'E2B_MAX_TIMEOUT')) or DEFAULTS.max_timeout,
    request_timeout = tonumber(setting('request_timeout')) or DEFAULTS.request_timeout,
    snapshot_timeout = tonumber(setting('snapshot_timeout', 'E2B_SNAPSHOT_TIMEOUT')) or DEFAULTS.snapshot_timeout,
    snapshot_prefix = setting('snapshot_prefix', 'E2B_SNAPSHOT_PREFIX') or DEFAULTS.snapshot_prefix,
    max_upload_bytes = max_upload or M.limits.max_upload_bytes,
  }
end

--- Create a sandbox (running when the call returns). spec: {template, image, labels, env,
--- workdir, network, ttl_seconds, layer, warm_artifact}. sb.http_timings holds the create
--- call's timings.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = wire.create_body(client, spec)
  local data, res, code = adapter.post_created(api, client, '/v2/sandboxes', { json = body }, 'sandboxID',
    'e2b: POST /v2/sandboxes')
  if not data then return nil, res, code end
  local token = str(data.envdAccessToken)
  if token then secrets.add(token) end
  return {
    id = data.sandboxID,
    code_path = 'POST /v2/sandboxes, commands through envd (Connect Process.Start)',
    ttl_seconds = math.tointeger(body.timeout), -- what a resume asks again
    token = token,
    domain = str(data.domain),
    template = str(data.templateID) or body.templateID,
    envd_version = str(data.envdVersion),
    labels = spec.labels or {},
    env = spec.env,
    workdir = spec.workdir,
    image = spec.image,
    allocation = { template = str(data.templateID) or body.templateID, alias = str(data.alias), timeout_s = body.timeout },
    http_timings = res.timings,
  }
end

--- Run a shell command (bash -l -c). opts: {timeout (s, default 600), cwd, env, user ('root' |
--- 'verifier' | an envd user name), stdin, tail_bytes}. Returns {code, stdout, stderr, elapsed,
--- timed_out, pid, http_timings} or nil, message, CODE. stdin is uploaded to a file first (the
--- Start call has none).
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local user = wire.user_of(client, opts.user)
  if opts.stdin then
    local path = adapter.tmp_path('stdin')
    local ok, err, code = wire.upload(client, sb, path, opts.stdin, user)
    if not ok then return nil, err, code end
    cmd = '{ ' .. cmd .. '\n} < ' .. path .. '; rc=$?; rm -f ' .. path .. '; exit $rc'
  end
  return wire.start_process(client, sb, cmd, { user = user, timeout = opts.timeout or DEFAULTS.exec_timeout,
    env = util.merge(sb.env, opts.env), cwd = opts.cwd or sb.workdir, tail_bytes = opts.tail_bytes })
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: uploaded to /tmp
--- through envd's file API, extracted by exec, removed.
M.put = adapter.put_via(M, wire.upload)

--- Read a file of the sandbox.
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local url = wire.envd_url(client, sb) .. '/files?path=' .. urlencode(path) .. '&username=' .. urlencode(client.user)
  local data, err, code = wire.request('GET', url, wire.envd_headers(client, sb, false, { Accept = 'application/octet-stream' }),
    { raw = true, timeout = 300 })
  if not data then
    if code == 'HTTP_404' then return nil, path .. ': ' .. tostring(err), 'ENOENT' end
    return nil, err, code
  end
  return data
end

--- Kill a sandbox; one that is already gone (404) counts as killed.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  return adapter.deleted(api(client, 'DELETE', '/sandboxes/' .. urlencode(sb.id)))
end

--- Running sandboxes whose metadata includes filter.labels: {{id, labels, created, state}}.
--- Pages (X-Next-Token) are followed, at most 50 of 100.
function M.list(client, filter)
  local labels = filter and filter.labels
  local out, token = {}, nil
  for _ = 1, 50 do
    local q = { 'state=running', 'limit=100' }
    if labels and next(labels) then q[#q + 1] = 'metadata=' .. urlencode(wire.metadata_query(labels)) end
    if token then q[#q + 1] = 'nextToken=' .. urlencode(token) end
    local data, res, code = api(client, 'GET', '/v2/sandboxes?' .. table.concat(q, '&'))
    if not data then return nil, res, code end
    for _, s in ipairs(type(data) == 'table' and data or {}) do
      if type(s) == 'table' and type(s.sandboxID) == 'string' then
        local meta = type(s.metadata) == 'table' and s.metadata or {}
        local match = true
        for k, v in pairs(labels or {}) do if meta[k] ~= v then match = false end end
        if match then
          out[#out + 1] = { id = s.sandboxID, labels = meta, created = str(s.startedAt), state = str(s.state) }
        end
      end
    end
    token = res.headers and res.headers['x-next-token']
    if not token or token == '' then break end
  end
  return out
end

function M.runtime(client)
  return 'e2b (' .. client.base .. ', template ' .. client.templates.default .. ')'
end

--- Build the task's recipe as a template aliased cseng-<key16> (the SDK's Template.build:
--- providers/shared/e2b_build.lua). Returns {image, layer (the alias: create's templateID),
--- cache_hit, template_id}.
M.build = build.build

--- How the environment is made: a native template build from the recipe's steps, unless
--- E2B_TEMPLATE pins every sandbox's template or E2B_BUILD=replay.
function M.env_mode(client)
  if client.template_pinned or client.build_mode == 'replay' then return 'replay' end
  return 'native'
end

--- Warm mode: turn a prepared sandbox into a snapshot template named after the task's content
--- key, and return its snapshotID (what create sends as templateID for spec.warm_artifact). A
--- snapshot of that name that already exists (GET /snapshots?name=) is reused (same key = same
--- content), unless opts.fresh (the arena's snapshot workload: always a new one). The snapshot
--- call answers 201 once the snapshot exists, so there is nothing to poll; its HTTP timeout is
--- E2B_SNAPSHOT_TIMEOUT. delete_artifact removes one.
---@return string|nil snapshot_id, string? err, string? code
function M.snapshot(client, sb, key, opts)
  local name = wire.snapshot_name(client, key)
  local data, err, code
  if not (opts and opts.fresh) then
    local existing
    existing, err, code = wire.lookup_snapshot(client, name)
    if existing == nil then return nil, err, code end
    if existing then return existing end
  end
  data, err, code = api(client, 'POST', '/sandboxes/' .. urlencode(sb.id) .. '/snapshots',
    { json = { name = name }, timeout = client.snapshot_timeout })
  if not data then return nil, err, code end -- names POST /sandboxes/{id}/snapshots and the status
  local id = type(data) == 'table' and str(data.snapshotID)
  if not id then return nil, 'e2b: POST /sandboxes/' .. sb.id .. '/snapshots: no snapshotID in the response', 'EPROTO' end
  return id
end

--- A snapshot made earlier for the same content key (the runner then skips preparing).
function M.find_artifact(client, key)
  return wire.lookup_snapshot(client, wire.snapshot_name(client, key)) or nil
end

--- Delete a snapshot: DELETE /templates/{snapshotID} (a snapshot is a template; the SDK's
--- Sandbox.deleteSnapshot). One already gone (404) counts as deleted.
---@return true|nil ok, string? err, string? code
function M.delete_artifact(client, id)
  if type(id) ~= 'string' or id == '' then return nil, 'e2b: delete_artifact: no snapshot id', 'EINVAL' end
  return adapter.deleted(api(client, 'DELETE', '/templates/' .. urlencode(id)))
end

--- Write files ({{path, data, mode}}) through envd's multi-file upload: as many per request as fit
--- under max_upload_bytes (one request for the arena's 1,000 x 4 KiB); modes are set afterwards by
--- one chmod (envd's upload has no mode).
---@return true|nil ok, string? err, string? code
function M.write_files(client, sb, files)
  local batch, bytes = {}, 0
  local function flush()
    if #batch == 0 then return true end
    local ok, err, code = wire.upload_many(client, sb, batch, client.user)
    batch, bytes = {}, 0
    return ok, err, code
  end
  for _, f in ipairs(files) do
    -- a part's own headers and boundary are under 512 bytes
    local size = #f.data + #f.path + 512
    if #batch > 0 and bytes + size > client.max_upload_bytes then
      local ok, err, code = flush()
      if not ok then return nil, err, code end
    end
    batch[#batch + 1] = f
    bytes = bytes + size
  end
  local ok, err, code = flush()
  if not ok then return nil, err, code end
  return adapter.chmod_files(M, client, sb, files)
end

--- Pause a sandbox: POST /sandboxes/{id}/pause -> 204 (E2B keeps its filesystem and memory).
---@return true|nil ok, string? err, string? code
function M.pause(client, sb)
  local data, res, code = api(client, 'POST', '/sandboxes/' .. urlencode(sb.id) .. '/pause')
  if not data then return nil, res, code end
  return true
end

--- Resume a paused sandbox: POST /sandboxes/{id}/connect {timeout (its lifetime from now, s)} ->
--- 201 (resumed) or 200 (it was running) with the sandbox; a new envd access token replaces sb's.
---@return true|nil ok, string? err, string? code
function M.resume(client, sb)
  local data, res, code = api(client, 'POST', '/sandboxes/' .. urlencode(sb.id) .. '/connect',
    { json = { timeout = math.tointeger(sb.ttl_seconds) or 900 } })
  if not data then return nil, res, code end
  local token = type(data) == 'table' and str(data.envdAccessToken) or nil
  if token then secrets.add(token); sb.token = token end
  return true
end

--- Fork sb into n sandboxes: POST /sandboxes/{id}/fork {count = n, timeout = sb's lifetime (the
--- API's default is 15 s)} -> 201, one result per fork: {sandbox} or {error} (each succeeds or
--- fails on its own). The children boot from one checkpoint of sb (files and memory), labelled with
--- what sb's metadata says (the request has no metadata). Returns the n children, or nil, message
--- (every failed fork's code and message), CODE (EFORK when some were made, else the failure's
--- HTTP code) and the children that were made (the caller records and destroys them).
---@return table[]|nil kids, string? err, string? code, table[]? made
function M.fork(client, sb, n, spec)
  spec = spec or {}
  local ttl = math.tointeger(sb.ttl_seconds) or wire.create_body(client, spec).timeout
  local what = 'e2b: POST /sandboxes/' .. sb.id .. '/fork'
  local data, res, code = api(client, 'POST', '/sandboxes/' .. urlencode(sb.id) .. '/fork',
    { json = { count = n, timeout = ttl } })
  if not data then return nil, res, code end
  if type(data) ~= 'table' then return nil, what .. ': the answer is not a list', 'EPROTO' end
  local kids, failed, first = {}, {}, nil
  for i, r in ipairs(data) do
    local s = type(r) == 'table' and type(r.sandbox) == 'table' and r.sandbox or nil
    if s and str(s.sandboxID) and type(r.error) ~= 'table' then
      local token = str(s.envdAccessToken)
      if token then secrets.add(token) end
      kids[#kids + 1] = {
        id = s.sandboxID, fork_of = sb.id, ttl_seconds = ttl, token = token, domain = str(s.domain),
        code_path = 'POST /sandboxes/{id}/fork, commands through envd (Connect Process.Start)',
        template = str(s.templateID) or sb.template, envd_version = str(s.envdVersion),
        labels = spec.labels or {}, env = sb.env, workdir = sb.workdir, image = sb.image,
        allocation = { template = str(s.templateID) or sb.template, fork_of = sb.id, timeout_s = ttl },
        http_timings = res.timings,
      }
    else
      local e = type(r) == 'table' and type(r.error) == 'table' and r.error or {}
      local c = adapter.int(e.code)
      first = first or (c and ('HTTP_' .. c)) or 'EPROTO'
      failed[#failed + 1] = string.format('fork %d: %s%s%s', i, c and tostring(c) or 'no sandbox and no error',
        str(e.error_code) and (' ' .. e.error_code) or '', str(e.message) and (': ' .. e.message) or '')
    end
  end
  if #data ~= n then failed[#failed + 1] = string.format('%d results for %d forks', #data, n) end
  if #failed == 0 then return kids end
  return nil, secrets.redact(string.format('%s: %d of %d forks failed: %s', what, n - #kids, n, table.concat(failed, '; '))),
    #kids > 0 and 'EFORK' or first or 'EFORK', kids
end

return M
