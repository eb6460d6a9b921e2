--- The E2B provider: sandboxes from E2B's control-plane API, commands and files through the
--- sandbox's envd daemon (docs/providers/e2b.md; specs: shared/specs/e2b-openapi.yml,
--- e2b-envd.yaml, e2b-process.proto).
---
---   base    E2B_API_URL (default https://api.e2b.app), header X-API-Key: E2B_API_KEY
---   create  POST   /v2/sandboxes {templateID, timeout (s), metadata, envVars, allow_internet_access}
---                  -> 201 {sandboxID, envdAccessToken, domain, ...} (running on return; v2 secures
---                  every sandbox, so there is no "secure" key: what the official SDK, e2b 2.51, sends)
---   exec    POST   {envd}/process.Process/Start  (Connect server stream, JSON codec; below)
---   put     POST   {envd}/files?path=/tmp/...&username=root (multipart "file"), then tar -xf by exec
---   get     GET    {envd}/files?path=...&username=root
---                  (the user is the username parameter, as the SDK sends it: no Authorization header)
---   destroy DELETE /sandboxes/{id}  (204; 404 = already gone)
---   list    GET    /v2/sandboxes?metadata=<urlencoded k=v&...>&state=running (X-Next-Token pages)
---   snapshot GET   /snapshots?name=<name> (reuse one that exists), else POST /sandboxes/{id}/snapshots
---                  {name} -> 201 {snapshotID, names} (warm mode; the artifact is the snapshotID, created
---                  from with POST /v2/sandboxes {templateID = snapshotID})
---
--- {envd} comes from E2B_ENVD_URL_TEMPLATE (default "https://{port}-{sandbox}.{domain}", port
--- 49983, domain from the create response or E2B_DOMAIN, default e2b.app). Every envd request
--- also carries E2b-Sandbox-Id and E2b-Sandbox-Port headers, so a template without
--- {sandbox} (a loopback fake, a proxy) can still route by sandbox.
---
--- exec speaks Connect's streaming protocol over HTTP/1.1: the request body is one envelope
--- (cseng.connect: flag byte, 4-byte big-endian length, JSON StartRequest); the response is a
--- stream of envelopes, decoded as the bytes arrive (http.request's stream callback):
--- {"event":{"start":{"pid"}}}, {"event":{"data":{"stdout"|"stderr":"<base64>"}}},
--- {"event":{"keepalive":{}}}, {"event":{"end":{"exitCode","exited","status","error"}}} (a
--- missing exitCode is 0: proto3 omits defaults), then the end-of-stream envelope (flag 0x02)
--- holding {} or {"error":{"code","message"}}. The command's deadline goes in Connect-Timeout-Ms;
--- a deadline_exceeded error (or our own HTTP timeout) is a timeout: the process is then killed
--- with Process.SendSignal (best effort) and the result has timed_out = true, code 124.
---
--- Expected failures return nil, message, CODE: HTTP statuses become "HTTP_<status>" (also
--- Connect's unauthenticated/permission_denied: HTTP_401/HTTP_403), a broken stream
--- "ECONNECT", other Connect errors "ECONNECT" with the Connect code in the message.
local http = require 'cseng.http'
local connect = require 'cseng.connect'
local clock = require 'cseng.clock'
local task = require 'cseng.task'
local fs = require 'cseng.fs'
local archive = require 'cseng.archive'
local jsonl = require 'cseng.lib.jsonl'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'

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
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true },
  -- sandboxID: lower-case letters and digits (older SDKs appended -<clientID>)
  id_format = { pattern = '^[%w][%w-]*$', example = 'i6sbq7qk1r2gqbm8q9fd1', max = 128 },
  -- what one envd upload may carry (cseng's default; E2B_MAX_UPLOAD_BYTES overrides it): bigger
  -- files (an installed agent's archive) go in parts under it (lua/solvers/shared/installed.lua)
  limits = { max_upload_bytes = 100 << 20 },
}

local DEFAULTS = {
  api_url = 'https://api.e2b.app',
  domain = 'e2b.app',
  envd_url_template = 'https://{port}-{sandbox}.{domain}',
  envd_port = 49983,
  template = 'base',
  user = 'root',              -- envd user for commands and files
  verifier_user = 'user',     -- the non-root account of E2B's templates
  max_timeout = 3600,         -- sandbox lifetime cap (seconds; E2B's plan limits, hobby = 1 h)
  default_timeout = 900,
  snapshot_timeout = 900,     -- POST /sandboxes/{id}/snapshots (answers when the snapshot exists)
  snapshot_prefix = 'cseng-',
  request_timeout = 60,
  exec_timeout = 600,
  max_frame = 16 << 20,
  tail_bytes = 1 << 20,
}

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

-- E2B_TEMPLATE: "base", or "glob=template,glob=template,default" (first match wins; an entry
-- without "=" is the default for images that match nothing).
local function parse_templates(s)
  local t = { default = DEFAULTS.template, map = {} }
  for entry in tostring(s or ''):gmatch('[^,]+') do
    entry = util.trim(entry)
    local pat, tpl = entry:match('^(.-)=(.+)$')
    if pat then t.map[#t.map + 1] = { util.trim(pat), util.trim(tpl) }
    elseif entry ~= '' then t.default = entry end
  end
  return t
end

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
    templates = parse_templates(setting('template', 'E2B_TEMPLATE')),
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

-- ---- HTTP ----------------------------------------------------------------------------------

local urlencode, str = adapter.urlencode, adapter.str

-- The text of an error body: the API's {"code", "message"}, Connect's {"code", "message"}.
local function error_text(body)
  local ok, j = pcall(cjson.decode, body or '')
  if ok and type(j) == 'table' and type(j.message) == 'string' and j.message ~= '' then
    return (type(j.code) == 'string' and (j.code .. ': ') or '') .. j.message
  end
  return adapter.snippet(body)
end

-- One request. o: {json, body, timeout, raw}. Returns data (decoded JSON, true for an empty
-- body, the raw body with o.raw) and the response, or nil, msg, CODE, res.
local function request(method, url, headers, o)
  o = o or {}
  return adapter.request('e2b', method, url, { headers = headers, json = o.json, body = o.body, raw = o.raw,
    timeout = o.timeout or DEFAULTS.request_timeout, message = error_text, omit_headers = o.omit_headers })
end

local function api(client, method, path, o)
  o = o or {}
  local headers = { ['X-API-Key'] = client.key, Accept = 'application/json' }
  return request(method, client.base .. path, headers, { json = o.json, timeout = o.timeout or client.request_timeout })
end

--- The envd base URL of a sandbox (exposed for the specs).
function M.envd_url(client, sb)
  local vars = { port = tostring(client.envd_port), sandbox = sb.id, domain = sb.domain or client.domain }
  return (client.envd_url_template:gsub('{(%a+)}', function(k) return vars[k] end):gsub('/+$', ''))
end

local function basic(user) return 'Basic ' .. crypto.base64(user .. ':') end

-- user: the Basic user of Process calls; false for /files, whose user is the username parameter.
local function envd_headers(client, sb, user, extra)
  local h = {
    ['E2b-Sandbox-Id'] = sb.id,
    ['E2b-Sandbox-Port'] = tostring(client.envd_port),
  }
  if user ~= false then h.Authorization = basic(user or client.user) end
  if sb.token then h['X-Access-Token'] = sb.token end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

-- ---- create --------------------------------------------------------------------------------

local function glob(p)
  return '^' .. p:gsub('[%^%$%(%)%%%.%[%]%+%-%?]', '%%%0'):gsub('%*', '.*') .. '$'
end

-- ---- native builds (the task's recipe as a template) --------------------------------------

--- How the environment is made: a native template build from the recipe's steps, unless
--- E2B_TEMPLATE pins every sandbox's template or E2B_BUILD=replay.
function M.env_mode(client)
  if client.template_pinned or client.build_mode == 'replay' then return 'replay' end
  return 'native'
end

--- The template alias a recipe builds to: cseng-<the content key's first 16 hex digits>.
function M.build_name(rcp) return 'cseng-' .. rcp.key:sub(1, 16) end

-- The sources of one COPY source (globs expanded), relative to the context.
local function copy_sources(rcp, src)
  return require('cseng.workload.recipe').copy_sources({ context_dir = rcp.context_dir,
    steps = { { op = 'COPY', copy = { src = { src } } } } })
end

-- st_mode's file type bits, which the SDK's hash includes (node's stats.mode; fs gives 07777).
local S_IFMT = { file = 0x8000, dir = 0x4000, link = 0xA000 }

-- The files of one COPY step's source as the SDK's calculateFilesHash covers them: sha256 of
-- "COPY src dest", then per path (the source itself, and a directory's whole tree; sorted by
-- path) its path relative to the context, its st_mode and size in decimal, then a file's bytes
-- or a symlink's target. Also their tar.gz (entries under their paths in the context, as the
-- SDK's spoolTarArchive). A symlink named as the source itself is followed (docker's COPY), and
-- hashed as the SDK's resolveSymlinks option hashes it; links inside a directory stay links.
local function copy_files(rcp, src, dest)
  local list = {}
  for _, c in ipairs(copy_sources(rcp, src)) do
    local st = fs.stat(c.source)
    if not st then return nil, 'COPY source ' .. src .. ' is not in environment/', 'EBUILD' end
    local top = c.archive_path == '.' and '' or c.archive_path
    list[#list + 1] = { rel = top, type = st.type, mode = st.mode, size = st.size, path = c.source }
    if st.type == 'dir' then
      for _, e in ipairs(fs.walk(c.source)) do
        list[#list + 1] = { rel = top == '' and e.path or (top .. '/' .. e.path), type = e.type, mode = e.mode, size = e.size,
                            path = c.source .. '/' .. e.path }
      end
    end
  end
  table.sort(list, function(a, b) return a.rel < b.rel end)
  local h, entries = { 'COPY ' .. src .. ' ' .. dest }, {}
  for _, f in ipairs(list) do
    h[#h + 1] = f.rel .. tostring((S_IFMT[f.type] or 0) | f.mode) .. tostring(f.size)
    if f.type == 'dir' then
      if f.rel ~= '' then entries[#entries + 1] = { path = f.rel, type = 'dir', mode = f.mode } end
    elseif f.type == 'link' then
      local target = fs.readlink(f.path)
      entries[#entries + 1] = { path = f.rel, type = 'symlink', target = target }
      h[#h + 1] = tostring(target)
    else
      local data = fs.read(f.path)
      entries[#entries + 1] = { path = f.rel, data = data, mode = f.mode }
      h[#h + 1] = data
    end
  end
  if #entries == 0 then return nil, 'no files found for COPY ' .. src, 'EBUILD' end
  return crypto.sha256_hex(table.concat(h)), archive.pack(entries, { format = 'tar.gz' })
end

--- The template's steps for a recipe (exposed for the specs): {type, args, force[, filesHash]}
--- in the recipe's order after a USER root (docker's RUN runs as root until a USER step); ARG
--- values are exported in front of the RUN steps they are in effect for; each COPY source is a
--- COPY step [src, dest, chown, chmod]. Returns the steps and the uploads {hash, tar}.
function M.template_steps(rcp)
  local steps, uploads = { { type = 'USER', args = { 'root' }, force = false } }, {}
  for _, s in ipairs(rcp.steps or {}) do
    if s.op == 'ENV' then
      local args = {}
      for _, kv in ipairs(s.vars) do args[#args + 1] = kv[1]; args[#args + 1] = kv[2] end
      steps[#steps + 1] = { type = 'ENV', args = args, force = false }
    elseif s.op == 'WORKDIR' then
      steps[#steps + 1] = { type = 'WORKDIR', args = { s.path }, force = false }
    elseif s.op == 'USER' then
      steps[#steps + 1] = { type = 'USER', args = { s.user }, force = false }
    elseif s.op == 'RUN' then
      local pre = {}
      for _, k in ipairs(util.keys(s.args or {})) do pre[#pre + 1] = 'export ' .. k .. '=' .. util.shell_quote(s.args[k]) .. '; ' end
      steps[#steps + 1] = { type = 'RUN', args = { table.concat(pre) .. s.cmd }, force = false }
    elseif s.op == 'COPY' and not s.copy.from then
      local c = s.copy
      local dest = c.dst
      if #c.src > 1 and dest:sub(-1) ~= '/' then dest = dest .. '/' end
      for _, src in ipairs(c.src) do
        if src:match('^%a+://') then return nil, 'ADD of a URL is not supported by template builds: ' .. src, 'EBUILD' end
        local hash, tar, tcode = copy_files(rcp, src, dest)
        if not hash then return nil, tar, tcode end
        steps[#steps + 1] = { type = 'COPY', args = { src, dest, c.chown or '', c.chmod or '' }, force = false, filesHash = hash }
        uploads[#uploads + 1] = { hash = hash, tar = tar }
      end
    end
  end
  return steps, uploads
end

-- The headers of a COPY files upload: those the upload link asks for (as the SDK sends them,
-- Content-Length aside), and the names not to send: no Content-Type unless the link names one,
-- as the SDK's upload (libcurl would otherwise label the body application/x-www-form-urlencoded).
local function upload_headers(asked)
  local h, typed = {}, false
  for k, v in pairs(type(asked) == 'table' and asked or {}) do
    if type(k) == 'string' and type(v) == 'string' and k:lower() ~= 'content-length' then
      h[k] = v
      if k:lower() == 'content-type' then typed = true end
    end
  end
  return h, not typed and { 'Content-Type' } or nil
end

-- Poll the build's status until ready or error (200 ms); the log lines gathered.
local function await_build(client, tid, bid, timeout)
  local deadline, offset, log = clock.now() + timeout * 1e9, 0, {}
  local path = '/templates/' .. urlencode(tid) .. '/builds/' .. urlencode(bid) .. '/status'
  while true do
    local data, err, code = api(client, 'GET', path .. '?logsOffset=' .. offset)
    if not data then
      if code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then return nil, err, code end
    elseif type(data) == 'table' then
      local entries = type(data.logEntries) == 'table' and data.logEntries or {}
      offset = offset + #entries
      for _, e in ipairs(entries) do if type(e) == 'table' and str(e.message) then log[#log + 1] = e.message end end
      if data.status == 'ready' then return true end
      if data.status == 'error' then
        local reason = type(data.reason) == 'table' and str(data.reason.message) or 'no reason given'
        return nil, errors.new(errors.EBUILD, 'e2b: template build ' .. bid .. ' failed: ' .. reason,
          { log = table.concat(log, '\n') }), errors.EBUILD
      end
    end
    if clock.now() > deadline then
      return nil, errors.new(errors.ETIMEDOUT, 'e2b: template build ' .. bid .. ' not ready after ' .. timeout .. ' s',
        { log = table.concat(log, '\n') }), errors.ETIMEDOUT
    end
    task.sleep(client.build_poll)
  end
end

--- Build the task's recipe as a template aliased cseng-<key16> (the SDK's Template.build):
--- GET /templates/aliases/{alias} (it exists: the cache hit), else POST /v3/templates {name,
--- } -> {templateID, buildID}; per COPY step GET /templates/{id}/files/{hash}
--- -> {present, url, headers} and a PUT of its tar.gz to url (with those headers) when absent; POST
--- /v2/templates/{id}/builds/{buildID} {fromImage (the recipe's base), steps, force}; then
--- GET .../status?logsOffset= until ready. Returns {image, layer (the alias: create's
--- templateID), cache_hit, template_id}.
function M.build(client, req)
  local rcp = req.recipe
  local alias = M.build_name(rcp)
  local timeout = math.max(req.timeout or 0, client.build_timeout)
  local found, ferr, fcode = api(client, 'GET', '/templates/aliases/' .. urlencode(alias))
  if found then
    return { image = rcp.base, layer = alias, cache_hit = true, template_id = type(found) == 'table' and str(found.templateID) or nil }
  elseif fcode ~= 'HTTP_404' then
    return nil, ferr, fcode
  end
  if not rcp.base then return nil, 'e2b: build: the task has no base image (no FROM, no docker_image)', 'EBUILD' end
  local steps, uploads = M.template_steps(rcp)
  if not steps then return nil, 'e2b: build: ' .. uploads, 'EBUILD' end
  -- (cpuCount/memoryMB: the template's defaults; the sandbox's own come with create)
  local created, cerr, ccode = api(client, 'POST', '/v3/templates', { json = { name = alias } })
  if not created then return nil, cerr, ccode end
  local tid, bid = type(created) == 'table' and str(created.templateID), type(created) == 'table' and str(created.buildID)
  if not tid or not bid then return nil, 'e2b: POST /v3/templates: no templateID/buildID', 'EPROTO' end
  for _, u in ipairs(uploads) do
    local link, lerr, lcode = api(client, 'GET', '/templates/' .. urlencode(tid) .. '/files/' .. u.hash)
    if not link then return nil, lerr, lcode end
    if type(link) == 'table' and link.present ~= true and str(link.url) then
      local headers, omit = upload_headers(link.headers)
      local ok, perr, pcode = request('PUT', link.url, headers, { body = u.tar, raw = true, timeout = 300, omit_headers = omit })
      if not ok then return nil, perr, pcode end
    end
  end
  local body = { fromImage = rcp.base, steps = jsonl.array(steps), force = false }
  local ok, berr, bcode = api(client, 'POST', '/v2/templates/' .. urlencode(tid) .. '/builds/' .. urlencode(bid), { json = body })
  if not ok then return nil, berr, bcode end
  local done, werr, wcode = await_build(client, tid, bid, timeout)
  if not done then return nil, werr, wcode end
  return { image = rcp.base, layer = alias, cache_hit = false, template_id = tid }
end

--- The template for a spec: spec.warm_artifact (a snapshot), spec.template, else the first E2B_TEMPLATE pattern matching
--- spec.image, else the default ("base").
function M.template_for(client, spec)
  if spec.warm_artifact then return spec.warm_artifact end -- warm mode: a snapshot's id (M.snapshot)
  if spec.layer then return spec.layer end -- M.build's template alias
  if spec.template then return spec.template end
  if spec.image then
    for _, e in ipairs(client.templates.map) do
      if spec.image:match(glob(e[1])) then return e[2] end
    end
  end
  return client.templates.default
end

--- The POST /v2/sandboxes body for a spec (exposed for the conformance specs).
function M.create_body(client, spec)
  local ttl = math.tointeger(math.ceil(spec.ttl_seconds or DEFAULTS.default_timeout))
  local body = {
    templateID = M.template_for(client, spec),
    timeout = math.max(1, math.min(ttl, client.max_timeout)), -- the sandbox is killed after it
    allow_internet_access = spec.network and true or false,
  }
  if spec.labels and next(spec.labels) then body.metadata = util.copy(spec.labels) end
  if spec.env and next(spec.env) then body.envVars = util.copy(spec.env) end
  return body
end

--- Create a sandbox (running when the call returns). spec: {template, image, labels, env,
--- workdir, network, ttl_seconds}. sb.http_timings holds the create call's timings.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = M.create_body(client, spec)
  local data, res, code = adapter.post_created(api, client, '/v2/sandboxes', { json = body }, 'sandboxID',
    'e2b: POST /v2/sandboxes')
  if not data then return nil, res, code end
  local token = str(data.envdAccessToken)
  if token then secrets.add(token) end
  return {
    id = data.sandboxID,
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

-- ---- exec ----------------------------------------------------------------------------------

local tail_buffer = adapter.tail_buffer

-- What a tail buffer dropped, nil when nothing.
local function dropped(b)
  local n = b.dropped()
  return n > 0 and n or nil
end

local CONNECT_HTTP = { unauthenticated = 'HTTP_401', permission_denied = 'HTTP_403' }

--- The Start request envelope for a command (exposed for the specs).
function M.start_request(cmd, env, cwd)
  local process = { cmd = '/bin/bash', args = { '-l', '-c', cmd } }
  if env and next(env) then process.envs = env end
  if cwd then process.cwd = cwd end
  -- stdin = false: no stdin pipe, so a command that reads stdin sees EOF (as on the local provider)
  return connect.encode(cjson.encode { process = process, stdin = false })
end

-- Best effort: SIGKILL a process by pid (Process.SendSignal, a unary Connect call in JSON).
local function kill(client, sb, base, pid, user)
  if not pid then return end
  request('POST', base .. '/process.Process/SendSignal',
    envd_headers(client, sb, user, { ['Connect-Protocol-Version'] = '1' }),
    { json = { process = { pid = pid }, signal = 'SIGNAL_SIGKILL' }, timeout = 10 })
end

local upload -- forward

--- Run a shell command (bash -l -c). opts: {timeout (s, default 600), cwd, env, user ('root' |
--- 'verifier' | an envd user name), stdin, tail_bytes}. Returns {code, stdout, stderr, elapsed,
--- timed_out, pid, http_timings} or nil, message, CODE.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local user = opts.user == 'verifier' and client.verifier_user or (opts.user and opts.user ~= 'root' and tostring(opts.user))
    or client.user
  if opts.stdin then
    local path = adapter.tmp_path('stdin')
    local ok, err, code = upload(client, sb, path, opts.stdin, user)
    if not ok then return nil, err, code end
    cmd = '{ ' .. cmd .. '\n} < ' .. path .. '; rc=$?; rm -f ' .. path .. '; exit $rc'
  end
  local base = M.envd_url(client, sb)
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  local out, errb = tail_buffer(cap), tail_buffer(cap)
  local dec <close> = connect.decoder(DEFAULTS.max_frame)
  local st = { raw = {}, raw_len = 0 }

  local function on_event(ev)
    if type(ev) ~= 'table' then return 'an event is not an object' end
    if type(ev.start) == 'table' then
      st.pid = adapter.int(ev.start.pid)
    elseif type(ev.data) == 'table' then
      for name, buf in pairs({ stdout = out, stderr = errb, pty = out }) do
        local v = ev.data[name]
        if type(v) == 'string' then
          local bytes = crypto.unbase64(v)
          if not bytes then return 'data.' .. name .. ' is not base64' end
          buf.add(bytes)
        end
      end
    elseif type(ev['end']) == 'table' then
      local e = ev['end']
      st.ended = true
      st.exit_code = adapter.int(e.exitCode or 0) or -1
      st.status = str(e.status)
      st.end_error = str(e.error)
    end
    return nil
  end

  local function on_chunk(chunk)
    if st.raw_len < 65536 then
      st.raw[#st.raw + 1] = chunk:sub(1, 65536 - st.raw_len)
      st.raw_len = st.raw_len + #st.raw[#st.raw]
    end
    if st.failed then return true end
    local frames, msg = dec:feed(chunk)
    if not frames then st.failed = msg; return true end
    for _, fr in ipairs(frames) do
      if fr.compressed then st.failed = 'connect: a compressed frame, but no compression was negotiated'; return true end
      local ok, msgv = pcall(cjson.decode, fr.data)
      if fr.end_stream then
        st.trailer = ok and type(msgv) == 'table' and msgv or {}
        if not ok and fr.data ~= '' then st.failed = 'connect: the end-of-stream message is not JSON' end
      elseif not ok or type(msgv) ~= 'table' then
        st.failed = 'connect: a message is not a JSON object'
      else
        local bad = on_event(msgv.event)
        if bad then st.failed = 'envd: ' .. bad end
      end
      if st.failed then return true end
    end
    return true
  end

  local env = util.merge(sb.env, opts.env)
  local t0 = clock.now()
  local res, err, code = http.request {
    method = 'POST', url = base .. '/process.Process/Start',
    headers = envd_headers(client, sb, user, {
      ['Content-Type'] = 'application/connect+json',
      ['Connect-Protocol-Version'] = '1',
      ['Connect-Timeout-Ms'] = tostring(math.max(1, math.floor(timeout * 1000))),
      ['Keepalive-Ping-Interval'] = '50', -- envd sends keepalive events, so proxies keep the stream
    }),
    body = M.start_request(cmd, env, opts.cwd or sb.workdir),
    timeout = timeout + 10, -- envd reports its own deadline first
    stream = on_chunk,
  }
  local elapsed = (clock.now() - t0) / 1e9
  local function timed_out(why)
    kill(client, sb, base, st.pid, user)
    local e = errb.get()
    if why then e = e .. ((e == '' or e:sub(-1) == '\n') and '' or '\n') .. why end
    return { code = 124, stdout = out.get(), stderr = e, elapsed = elapsed, timed_out = true, pid = st.pid }
  end
  if not res then
    if code == 'ETIMEDOUT' then return timed_out('cseng: no end of the command after ' .. timeout .. ' s') end
    return nil, secrets.redact('e2b: exec: ' .. tostring(err)), code
  end
  if res.status ~= 200 then
    local body = table.concat(st.raw)
    local c = 'HTTP_' .. res.status
    local ok, j = pcall(cjson.decode, body)
    if ok and type(j) == 'table' and CONNECT_HTTP[j.code] then c = CONNECT_HTTP[j.code] end
    return nil, secrets.redact(string.format('e2b: exec: HTTP %d: %s', res.status, error_text(body))), c
  end
  if st.failed then return nil, 'e2b: exec: ' .. st.failed, 'ECONNECT' end
  local fin, ferr = dec:finish()
  if not fin then return nil, 'e2b: exec: ' .. tostring(ferr), 'ECONNECT' end
  if not st.trailer then return nil, 'e2b: exec: the stream ended without an end-of-stream message', 'ECONNECT' end
  local terr = st.trailer.error
  if type(terr) == 'table' then
    local ccode = str(terr.code) or 'unknown'
    if ccode == 'deadline_exceeded' then return timed_out(str(terr.message)) end
    return nil, secrets.redact(string.format('e2b: exec: envd error %s: %s', ccode, str(terr.message) or '')),
      CONNECT_HTTP[ccode] or 'ECONNECT'
  end
  if not st.ended then return nil, 'e2b: exec: the stream ended without the process end event', 'ECONNECT' end
  return {
    code = st.exit_code, stdout = out.get(), stderr = errb.get(), stdout_dropped = dropped(out),
    stderr_dropped = dropped(errb), elapsed = elapsed, timed_out = false, pid = st.pid, status = st.status,
    http_timings = res.timings,
  }
end

-- ---- files ---------------------------------------------------------------------------------

upload = function(client, sb, path, data, user)
  user = user or client.user
  local body, ctype = adapter.multipart(path:match('[^/]*$'), data)
  local url = M.envd_url(client, sb) .. '/files?path=' .. urlencode(path) .. '&username=' .. urlencode(user)
  local ok, err, code = request('POST', url, envd_headers(client, sb, false, { ['Content-Type'] = ctype }),
    { body = body, timeout = 300 })
  if not ok then return nil, err, code end
  return true
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: uploaded to /tmp
--- through envd's file API, extracted by exec, removed.
M.put = adapter.put_via(M, upload)

--- Read a file of the sandbox.
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local url = M.envd_url(client, sb) .. '/files?path=' .. urlencode(path) .. '&username=' .. urlencode(client.user)
  local data, err, code = request('GET', url, envd_headers(client, sb, false, { Accept = 'application/octet-stream' }),
    { raw = true, timeout = 300 })
  if not data then
    if code == 'HTTP_404' then return nil, path .. ': ' .. tostring(err), 'ENOENT' end
    return nil, err, code
  end
  return data
end

-- ---- snapshot (warm mode) ------------------------------------------------------------------

--- The snapshot name for a task content key (exposed for the specs): prefix .. key.
function M.snapshot_name(client, key)
  return ((client.snapshot_prefix or DEFAULTS.snapshot_prefix) .. tostring(key)):gsub('[^%w%-_]', '-')
end

-- Whether a SnapshotInfo is the snapshot named name: its names are "team/name:tag" (or "name:tag").
local function names_snapshot(info, name)
  local function is(n)
    n = tostring(n):gsub(':[^/:]*$', '')
    return n == name or n:sub(-(#name + 1)) == '/' .. name
  end
  if is(info.snapshotID) then return true end
  for _, n in ipairs(type(info.names) == 'table' and info.names or {}) do if is(n) then return true end end
  return false
end

-- The snapshotID of an existing snapshot named name, false when there is none, or nil, err, code.
local function lookup_snapshot(client, name)
  local found, err, code = api(client, 'GET', '/snapshots?name=' .. urlencode(name) .. '&limit=10')
  if not found then return nil, err, code end
  for _, info in ipairs(type(found) == 'table' and found or {}) do
    if type(info) == 'table' and str(info.snapshotID) and names_snapshot(info, name) then return info.snapshotID end
  end
  return false
end

--- A snapshot made earlier for the same content key (the runner then skips preparing).
function M.find_artifact(client, key)
  return lookup_snapshot(client, M.snapshot_name(client, key)) or nil
end

--- Warm mode: turn a prepared sandbox into a snapshot template named after the task's content
--- key, and return its snapshotID (what create sends as templateID for spec.warm_artifact). A
--- snapshot of that name that already exists (GET /snapshots?name=) is reused (same key = same
--- content). The snapshot call answers 201 once the snapshot exists, so there is nothing to poll;
--- its HTTP timeout is E2B_SNAPSHOT_TIMEOUT. Snapshots are not deleted here.
---@return string|nil snapshot_id, string? err, string? code
function M.snapshot(client, sb, key)
  local name = M.snapshot_name(client, key)
  local existing, err, code = lookup_snapshot(client, name)
  if existing == nil then return nil, err, code end
  if existing then return existing end
  local data
  data, err, code = api(client, 'POST', '/sandboxes/' .. urlencode(sb.id) .. '/snapshots',
    { json = { name = name }, timeout = client.snapshot_timeout })
  if not data then return nil, err, code end -- names POST /sandboxes/{id}/snapshots and the status
  local id = type(data) == 'table' and str(data.snapshotID)
  if not id then return nil, 'e2b: POST /sandboxes/' .. sb.id .. '/snapshots: no snapshotID in the response', 'EPROTO' end
  return id
end

-- ---- destroy, list -------------------------------------------------------------------------

--- Kill a sandbox; one that is already gone (404) counts as killed.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  return adapter.deleted(api(client, 'DELETE', '/sandboxes/' .. urlencode(sb.id)))
end

--- The metadata filter of GET /v2/sandboxes: "k=v&k2=v2", keys and values URL-encoded (then
--- the whole is encoded again as the parameter's value).
function M.metadata_query(labels)
  local parts = {}
  for _, k in ipairs(util.keys(labels or {})) do parts[#parts + 1] = urlencode(k) .. '=' .. urlencode(labels[k]) end
  return table.concat(parts, '&')
end

--- Running sandboxes whose metadata includes filter.labels: {{id, labels, created, state}}.
--- Pages (X-Next-Token) are followed, at most 50 of 100.
function M.list(client, filter)
  local labels = filter and filter.labels
  local out, token = {}, nil
  for _ = 1, 50 do
    local q = { 'state=running', 'limit=100' }
    if labels and next(labels) then q[#q + 1] = 'metadata=' .. urlencode(M.metadata_query(labels)) end
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

return M
