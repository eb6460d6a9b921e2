--- The AWS Lambda MicroVMs provider (`--provider aws-microvm`): microVMs from an image that runs
--- cseng's exec agent (built and registered once by `cseng prewarm --provider aws-microvm`),
--- through the REST-JSON control plane (API version 2025-09-09, SigV4 signing name "lambda") and
--- the microVM's own HTTPS endpoint (docs/providers/aws_microvm.md; what is confirmed by the
--- official SDK's model and what is assumed is listed there).
---
---   create  POST   /2025-09-09/microvms {imageIdentifier, imageVersion, executionRoleArn,
---                  maximumDurationInSeconds, clientToken, runHookPayload} -> {microvmId, endpoint, ...}
---           POST   /2017-03-31/tags/{arn} {Tags}: the run's labels (RunMicrovm has no tags)
---           GET    /2025-09-09/microvms/{id} until RUNNING
---           POST   /2025-09-09/microvms/{id}/auth-token {expirationInMinutes, allowedPorts}
---                  -> {authToken{X-aws-proxy-auth}}; then the agent's /health answers
---   exec/put/get  the agent at the endpoint, with X-aws-proxy-auth, X-aws-proxy-port (the agent's
---                 port) and the agent's own per-microVM token (given in runHookPayload)
---   destroy DELETE /2025-09-09/microvms/{id}   (idempotent; 404 = gone)
---   list    GET    /2025-09-09/microvms (paged) + GET /2017-03-31/tags/{arn} for each
---
--- A clientToken is made per create and every retry of that RunMicrovm sends it again, so a
--- create whose response was lost (a reset connection, a timeout) returns the microVM it made
--- instead of a second one. Throttling (429) and 5xx are retried with exponential back-off that
--- honours Retry-After. Expected failures return nil, message, CODE: "HTTP_<status>" for an API
--- error (the message has the error type, e.g. "ThrottlingException: Rate exceeded"), transport
--- failures keep cseng.http's codes, "ESTATE" for a microVM that ends before RUNNING, "ECONFIG"
--- for a missing image id.
local http = require 'cseng.http'
local clock = require 'cseng.clock'
local task = require 'cseng.task'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'
local sigv4 = require 'cseng.lib.aws.sigv4'
local awscreds = require 'cseng.lib.aws.credentials'

local M = {
  name = 'aws-microvm',
  version = '1.0',
  description = 'AWS Lambda MicroVMs (REST-JSON + SigV4; commands through cseng\'s agent at the microVM endpoint)',
  remote = true,
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; FROM/RUN are fidelity gaps
  credentials = { { 'AWS_ACCESS_KEY_ID', 'AWS_PROFILE' }, { 'AWS_REGION', 'AWS_DEFAULT_REGION' }, 'AWS_MICROVM_IMAGE_ID' },
  -- PROVIDERS.md (ARM, us-east-1, a third-party figure): settings rate_vcpu_s / rate_gib_s override
  rates = { vcpu_s = 0.0000276944, gib_s = 0.0000036667, per_create = 0 },
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = false },
  artifact_env = 'AWS_MICROVM_IMAGE_ID',
  -- microVM ids (microvmId; the ids in its fake: mvm-<hex>): letters, digits and - _ . :
  id_format = { pattern = '^[%w][%w_.:-]*$', example = 'mvm-0123456789abcdef', max = 256 },
}

local API = '/2025-09-09'
local DEFAULTS = {
  agent_port = 8080,           -- the endpoint's default port (developer guide); the image's hooks port
  port_header = 'X-aws-proxy-port',
  token_header = 'X-Cseng-Agent-Token',
  request_timeout = 60, ready_timeout = 300, exec_grace = 60,
  max_attempts = 8, base_delay = 0.2, max_delay = 20, max_retry_after = 120,
  poll_first = 0.1, poll_factor = 1.5, poll_max = 1,
  token_minutes = 60,          -- the longest an auth token may live
  max_duration = 3600,         -- maximumDurationInSeconds without a ttl (1..28800)
  tail_bytes = 1 << 20,
  microvm_arn = 'arn:{partition}:lambda:{region}:{account}:microvm:{id}',
}

local urlencode, str = adapter.urlencode, adapter.str

---@class aws_microvm.client
---@field endpoint string the control plane, e.g. https://lambda.us-east-1.amazonaws.com
---@field s3_endpoint string path-style S3, e.g. https://s3.us-east-1.amazonaws.com
---@field region string
---@field creds table {access_key_id, secret_access_key, session_token}
---@field image string|nil AWS_MICROVM_IMAGE_ID (an image ARN)
---@field stats table {retries, throttled, server_errors, transport_errors}

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end

--- Read the settings (cfg first, then the environment) and the AWS credentials (the environment,
--- then the shared files with AWS_PROFILE). Raises one line naming what is missing; makes no
--- request.
---@param cfg? table {getenv=fn, endpoint_url, s3_endpoint_url, image_id, image_version,
---  execution_role_arn, agent_port, port_header, profile, request_timeout, ready_timeout,
---  max_attempts, base_delay, max_delay, max_duration, rate_vcpu_s, rate_gib_s, microvm_arn}
---@return aws_microvm.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local getenv = cfg.getenv or os.getenv
  local c, err = awscreds.resolve { getenv = getenv, profile = setting('profile'), require_region = true }
  if not c then
    errors.raise(errors.ECONFIG, 'aws-microvm provider: ' .. tostring(err) .. ' (export them, or put them in an --env-file)')
  end
  secrets.add(c.secret_access_key)
  if c.session_token then secrets.add(c.session_token) end
  local region = setting('region') or c.region
  local endpoint = setting('endpoint_url', 'AWS_MICROVM_ENDPOINT_URL') or setting(nil, 'AWS_ENDPOINT_URL_LAMBDA')
    or setting(nil, 'AWS_ENDPOINT_URL') or ('https://lambda.' .. region .. '.amazonaws.com')
  local s3 = setting('s3_endpoint_url', 'AWS_ENDPOINT_URL_S3') or setting(nil, 'AWS_ENDPOINT_URL')
    or ('https://s3.' .. region .. '.amazonaws.com')
  local port_header = setting('port_header', 'AWS_MICROVM_PORT_HEADER') or DEFAULTS.port_header
  if port_header == 'none' then port_header = nil end
  M.rates = {
    vcpu_s = num(setting('rate_vcpu_s', 'AWS_MICROVM_RATE_VCPU_S'), M.rates.vcpu_s),
    gib_s = num(setting('rate_gib_s', 'AWS_MICROVM_RATE_GIB_S'), M.rates.gib_s),
    per_create = num(setting('rate_per_create'), M.rates.per_create or 0),
  }
  local o = {}
  for k, v in pairs(DEFAULTS) do o[k] = v end
  for _, k in ipairs({ 'request_timeout', 'ready_timeout', 'exec_grace', 'max_attempts', 'base_delay', 'max_delay',
                       'max_retry_after', 'poll_first', 'poll_factor', 'poll_max', 'token_minutes', 'max_duration',
                       'tail_bytes' }) do
    o[k] = num(setting(k, 'AWS_MICROVM_' .. k:upper()), DEFAULTS[k])
  end
  return {
    endpoint = tostring(endpoint):gsub('/+$', ''), s3_endpoint = tostring(s3):gsub('/+$', ''),
    region = region, creds = c, source = c.source,
    image = setting('image_id', 'AWS_MICROVM_IMAGE_ID'),
    image_version = setting('image_version', 'AWS_MICROVM_IMAGE_VERSION'),
    role = setting('execution_role_arn', 'AWS_MICROVM_EXECUTION_ROLE_ARN'),
    agent_port = math.tointeger(num(setting('agent_port', 'AWS_MICROVM_AGENT_PORT'), DEFAULTS.agent_port)),
    port_header = port_header,
    token_header = setting('token_header') or DEFAULTS.token_header,
    microvm_arn = setting('microvm_arn') or DEFAULTS.microvm_arn,
    tags = setting('tags', 'AWS_MICROVM_TAGS') ~= '0' and setting('tags') ~= false,
    o = o,
    stats = { retries = 0, throttled = 0, server_errors = 0, transport_errors = 0 },
  }
end

-- ---- the control plane ---------------------------------------------------------------------

--- The error type and message of a REST-JSON error response: the x-amzn-errortype header (its
--- part before ':'), else the body's __type or code (after a '#'), and the body's message.
function M.error_of(res)
  local t = res.headers and res.headers['x-amzn-errortype']
  local ok, j = pcall(cjson.decode, res.body or '')
  if not ok or type(j) ~= 'table' then j = {} end
  t = t or str(j.__type) or str(j.code) or str(j.Code)
  if t then t = t:gsub(':.*$', ''):gsub('^.*#', '') end
  local msg = str(j.message) or str(j.Message) or adapter.snippet(res.body)
  return t or ('HTTP ' .. res.status), msg
end

local RETRY_TRANSPORT = { ECONNRESET = true, ETIMEDOUT = true, ECONNREFUSED = true, ECURL = true }

local function backoff(client, attempt, retry_after)
  local o = client.o
  local d = math.min(o.max_delay, o.base_delay * 2 ^ (attempt - 1))
  d = d / 2 + d / 2 * (crypto.random_bytes(1):byte() / 255) -- jitter: spread retries of many trials
  if retry_after then d = math.max(d, math.min(retry_after, o.max_retry_after)) end
  return d
end

--- One signed request with retries: 429 and 5xx (after Retry-After when the service gives one)
--- and transport failures, up to max_attempts. Every retry sends the same body, so a RunMicrovm
--- keeps its clientToken. o: {json, body, headers, query (list of {k, v}), service ('lambda'|'s3'),
--- base (default client.endpoint), raw, timeout, expect (statuses besides 2xx that are not errors)}.
--- Returns data (decoded JSON, true for an empty body, the raw body with o.raw) and the response,
--- or nil, message, CODE, response.
local function call(client, method, path, o)
  o = o or {}
  local base = o.base or client.endpoint
  local q = {}
  for _, kv in ipairs(o.query or {}) do q[#q + 1] = urlencode(kv[1]) .. '=' .. urlencode(kv[2]) end
  local url = base .. path .. (#q > 0 and ('?' .. table.concat(q, '&')) or '')
  local body = o.body
  local ctype = o.content_type
  if o.json ~= nil then body, ctype = cjson.encode(o.json), 'application/json' end
  local what = method .. ' ' .. path
  local attempt = 0
  while true do
    attempt = attempt + 1
    local headers = {}
    for k, v in pairs(o.headers or {}) do headers[k] = v end
    if ctype then headers['Content-Type'] = ctype end
    local add = sigv4.sign { method = method, url = url, headers = headers, body = body or '', region = client.region,
      service = o.service or 'lambda', access_key_id = client.creds.access_key_id,
      secret_access_key = client.creds.secret_access_key, session_token = client.creds.session_token,
      content_sha256 = true }
    for k, v in pairs(add) do headers[k] = v end
    local res, err, code = http.request { method = method, url = url, headers = headers, body = body,
                                          timeout = o.timeout or client.o.request_timeout }
    local retry_after
    if not res then
      if not RETRY_TRANSPORT[code] or attempt >= client.o.max_attempts then
        return nil, secrets.redact('aws-microvm: ' .. what .. ': ' .. tostring(err)), code
      end
      client.stats.transport_errors = client.stats.transport_errors + 1
    elseif res.status >= 200 and res.status <= 299 or (o.expect and o.expect[res.status]) then
      if o.raw then return res.body, res end
      if res.body == nil or res.body:find('^%s*$') then return true, res end
      local ok, data = pcall(cjson.decode, res.body)
      if not ok then return nil, 'aws-microvm: ' .. what .. ': response is not JSON: ' .. adapter.snippet(res.body), 'EPROTO', res end
      return data, res
    else
      local etype, msg = M.error_of(res)
      local retryable = res.status == 429 or res.status >= 500
      if not retryable or attempt >= client.o.max_attempts then
        return nil, secrets.redact(string.format('aws-microvm: %s: HTTP %d: %s: %s', what, res.status, etype, msg)),
          'HTTP_' .. res.status, res
      end
      if res.status == 429 then client.stats.throttled = client.stats.throttled + 1
      else client.stats.server_errors = client.stats.server_errors + 1 end
      retry_after = tonumber(res.headers['retry-after'])
    end
    client.stats.retries = client.stats.retries + 1
    task.sleep(backoff(client, attempt, retry_after))
  end
end

local function microvm_path(id, rest) return API .. '/microvms/' .. urlencode(id) .. (rest or '') end

--- The ARN a microVM is tagged under: the microvm_arn format with the partition and account of
--- the image's ARN (arn:aws:lambda:us-east-1:123456789012:microvm-image:name).
function M.microvm_arn(client, image_arn, id)
  local parts = {}
  for p in (tostring(image_arn) .. ':'):gmatch('([^:]*):') do parts[#parts + 1] = p end
  local vals = { partition = parts[2] or 'aws', region = parts[4] ~= '' and parts[4] or client.region,
                 account = parts[5] or '', id = id }
  return (client.microvm_arn:gsub('{(%w+)}', function(k) return vals[k] or ('{' .. k .. '}') end))
end

-- ---- create --------------------------------------------------------------------------------

--- The RunMicrovm body for a spec (exposed for the specs). spec.client_token and
--- spec.agent_token are made here when absent.
function M.run_body(client, spec)
  local ttl = math.tointeger(math.ceil(tonumber(spec.ttl_seconds) or client.o.max_duration))
  local body = {
    imageIdentifier = client.image,
    maximumDurationInSeconds = math.max(1, math.min(28800, ttl)),
    clientToken = spec.client_token,
    runHookPayload = cjson.encode { token = spec.agent_token },
  }
  if client.image_version then body.imageVersion = client.image_version end
  if client.role then body.executionRoleArn = client.role end
  return body
end

local TERMINAL = { TERMINATING = true, TERMINATED = true }

-- Ready = GetMicrovm says RUNNING, an auth token is issued, and the agent answers through the
-- endpoint (the state is eventually consistent: the endpoint answering is what counts).
local ensure_token, agent_request -- forward

local function wait_ready(client, sb, t0)
  local o = client.o
  local delay = o.poll_first
  local state = sb.state
  while state ~= 'RUNNING' do
    if TERMINAL[state] then
      return string.format('aws-microvm: microVM %s is %s%s', sb.id, state, sb.state_reason and (': ' .. sb.state_reason) or ''),
        'ESTATE'
    end
    if (clock.now() - t0) / 1e9 > o.ready_timeout then
      return string.format('aws-microvm: microVM %s not RUNNING after %s s (state %s)', sb.id, o.ready_timeout, tostring(state)),
        'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * o.poll_factor, o.poll_max)
    local cur, err, code = call(client, 'GET', microvm_path(sb.id))
    if not cur then return err, code end
    state, sb.state_reason = str(cur.state), str(cur.stateReason)
    sb.endpoint = str(cur.endpoint) or sb.endpoint
  end
  sb.state = 'RUNNING'
  local ok, err, code = ensure_token(client, sb)
  if not ok then return err, code end
  delay = o.poll_first
  while true do
    local res, aerr, acode = agent_request(client, sb, 'GET', '/health', nil, { timeout = 10 })
    if res and res.status == 200 then return nil end
    -- a 502/503 from the endpoint, or no connection yet: the agent is not reachable yet
    local transient = (res and (res.status == 502 or res.status == 503 or res.status == 504)) or RETRY_TRANSPORT[acode]
    if not transient then
      return aerr or string.format('aws-microvm: the agent of %s answered /health with HTTP %d: %s', sb.id, res.status,
        adapter.snippet(res.body)), acode or ('HTTP_' .. res.status)
    end
    if (clock.now() - t0) / 1e9 > o.ready_timeout then
      return string.format('aws-microvm: the endpoint of %s does not answer after %s s', sb.id, o.ready_timeout), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * o.poll_factor, o.poll_max)
  end
end

--- Create a microVM and wait until its agent answers. spec: {labels, env, workdir, ttl_seconds,
--- client_token, agent_token} (the image is always AWS_MICROVM_IMAGE_ID: a task's FROM is a fidelity gap). sb.http_timings holds RunMicrovm's timings,
--- sb.ready_seconds the time from the call to the agent answering.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = util.copy(spec or {})
  if not client.image then
    return nil, 'aws-microvm: AWS_MICROVM_IMAGE_ID is not set (run cseng prewarm --provider aws-microvm --aws-bucket B '
      .. '--aws-build-role-arn R, then export the id it prints)', 'ECONFIG'
  end
  spec.client_token = spec.client_token or ('cseng-' .. crypto.hex(crypto.random_bytes(16)))
  spec.agent_token = spec.agent_token or crypto.hex(crypto.random_bytes(24))
  secrets.add(spec.agent_token)
  local t0 = clock.now()
  local body = M.run_body(client, spec)
  local data, res, code = call(client, 'POST', API .. '/microvms', { json = body })
  if not data then return nil, res, code end
  if type(data) ~= 'table' or not str(data.microvmId) then
    return nil, 'aws-microvm: RunMicrovm: no microvmId in the response', 'EPROTO'
  end
  local sb = {
    id = data.microvmId, endpoint = str(data.endpoint), state = str(data.state), image = str(data.imageArn) or body.imageIdentifier,
    image_version = str(data.imageVersion), client_token = spec.client_token, agent_token = spec.agent_token,
    labels = spec.labels or {}, env = spec.env, workdir = spec.workdir, http_timings = res.timings,
  }
  sb.arn = M.microvm_arn(client, sb.image, sb.id)
  -- from here the microVM exists: whatever ends the setup (a failed tag call, a terminal state,
  -- the deadline, the trial's cancellation) terminates it before returning
  local ok, werr, wcode = pcall(function()
    if next(sb.labels) and client.tags then
      local tags = {}
      for k, v in pairs(sb.labels) do tags[k] = tostring(v) end
      local t, terr, tcode = call(client, 'POST', '/2017-03-31/tags/' .. urlencode(sb.arn), { json = { Tags = tags } })
      if not t then return terr, tcode end
    end
    return wait_ready(client, sb, t0)
  end)
  if not ok or werr then
    pcall(M.destroy, client, sb)
    if not ok then error(werr, 0) end
    return nil, werr, wcode
  end
  sb.ready_seconds = (clock.now() - t0) / 1e9
  return sb
end

-- ---- the endpoint and the agent ------------------------------------------------------------

--- An auth token for the agent's port (CreateMicrovmAuthToken), renewed two minutes before it
--- expires.
ensure_token = function(client, sb, force)
  local now = clock.now()
  if sb.proxy_auth and not force and now < sb.proxy_auth_until then return true end
  local minutes = math.max(1, math.min(60, math.tointeger(client.o.token_minutes) or 60))
  local data, err, code = call(client, 'POST', microvm_path(sb.id, '/auth-token'),
    { json = { expirationInMinutes = minutes, allowedPorts = { { port = client.agent_port } } } })
  if not data then return nil, err, code end
  local tok = type(data) == 'table' and type(data.authToken) == 'table' and str(data.authToken['X-aws-proxy-auth'])
  if not tok then return nil, 'aws-microvm: CreateMicrovmAuthToken: no X-aws-proxy-auth in authToken', 'EPROTO' end
  secrets.add(tok)
  sb.proxy_auth = tok
  sb.proxy_auth_until = now + math.floor((minutes * 60 - 120) * 1e9)
  return true
end

--- A request to the agent through the endpoint. Returns the response (any status) or nil,
--- message, CODE. o: {body, headers, timeout}.
agent_request = function(client, sb, method, path, body, o)
  o = o or {}
  if not sb.endpoint then return nil, 'aws-microvm: microVM ' .. sb.id .. ' has no endpoint', 'EPROTO' end
  local headers = { ['X-aws-proxy-auth'] = sb.proxy_auth, [client.token_header] = sb.agent_token }
  if client.port_header then headers[client.port_header] = tostring(client.agent_port) end
  for k, v in pairs(o.headers or {}) do headers[k] = v end
  local res, err, code = http.request { method = method, url = sb.endpoint .. path, headers = headers, body = body,
                                        timeout = o.timeout or client.o.request_timeout }
  if not res then return nil, secrets.redact('aws-microvm: ' .. method .. ' ' .. path .. ' at the endpoint: ' .. tostring(err)), code end
  return res
end

--- An agent call that must succeed: a new auth token once on 403 (expired), then any status
--- outside 2xx (and o.ok_statuses) is "HTTP_<status>".
local function agent(client, sb, method, path, body, o)
  o = o or {}
  local ok, err, code = ensure_token(client, sb)
  if not ok then return nil, err, code end
  local res
  res, err, code = agent_request(client, sb, method, path, body, o)
  if res and res.status == 403 then
    ok, err, code = ensure_token(client, sb, true)
    if not ok then return nil, err, code end
    res, err, code = agent_request(client, sb, method, path, body, o)
  end
  if not res then return nil, err, code end
  if (res.status < 200 or res.status > 299) and not (o.ok_statuses and o.ok_statuses[res.status]) then
    local okj, j = pcall(cjson.decode, res.body or '')
    local msg = okj and type(j) == 'table' and (str(j.error) or str(j.message)) or adapter.snippet(res.body)
    return nil, secrets.redact(string.format('aws-microvm: agent %s %s: HTTP %d: %s', method, path, res.status, msg)),
      'HTTP_' .. res.status, res
  end
  return res
end
--- One request to cseng's exec agent in a microVM (its protocol: docs/providers/aws_microvm.md):
--- the endpoint token fetched or refreshed as needed, a non-2xx answer (but o.ok_statuses) a
--- failure. exec, put and get go through it; `GET /health` names the agent's architecture.
---@return table|nil res, string? err, string? code
M.agent = agent

--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, stdout_dropped, stderr_dropped} or nil, message, CODE.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or 600
  local req = { cmd = cmd, cwd = opts.cwd or sb.workdir or '/', env = util.merge(sb.env, opts.env), timeout = timeout,
                tail_bytes = opts.tail_bytes or client.o.tail_bytes, stdin = opts.stdin }
  if next(req.env) == nil then req.env = nil end
  local t0 = clock.now()
  local o = { headers = { ['Content-Type'] = 'application/json' }, timeout = timeout + client.o.exec_grace }
  local res, err, code, eres = agent(client, sb, 'POST', '/exec', cjson.encode(req), o)
  if not res and code == 'HTTP_400' and eres and tostring(eres.body):find('cwd', 1, true) then
    -- the image has no such directory yet (a task's workdir): make it, as a container runtime would
    local mk = agent(client, sb, 'POST', '/exec', cjson.encode { argv = { 'mkdir', '-p', req.cwd }, timeout = 60 }, o)
    if mk then res, err, code = agent(client, sb, 'POST', '/exec', cjson.encode(req), o) end
  end
  if not res then return nil, err, code end
  local ok, r = pcall(cjson.decode, res.body or '')
  if not ok or type(r) ~= 'table' or not adapter.int(r.code) then
    return nil, 'aws-microvm: exec: the agent\'s answer has no exit code: ' .. adapter.snippet(res.body), 'EPROTO'
  end
  local out, errs = str(r.stdout) or '', str(r.stderr) or ''
  return {
    code = adapter.int(r.code), stdout = out, stderr = errs, timed_out = r.timed_out == true,
    elapsed = tonumber(r.elapsed) or (clock.now() - t0) / 1e9,
    stdout_dropped = adapter.int(r.stdout_dropped), stderr_dropped = adapter.int(r.stderr_dropped),
    http_timings = res.timings,
  }
end

-- The agent unpacks plain tar only: a gzip-compressed tar is unpacked here (cseng.archive's
-- hardened extraction) and packed again as a plain tar with the same modes and links.
local function plain_tar(bytes)
  if bytes:sub(1, 2) ~= '\31\139' then return bytes end
  local fs = require 'cseng.fs'
  local archive = require 'cseng.archive'
  local tmp = errors.check(nil, fs.tempdir('cseng-aws-put-'))
  local ok, err, code = archive.extract(bytes, tmp, { from = 'bytes' })
  local tar
  if ok then tar, err, code = archive.pack_dir(tmp, { format = 'tar' }) end
  fs.remove_tree(tmp)
  if not tar then return nil, 'aws-microvm: put: ' .. tostring(err), code or 'EARCHIVE' end
  return tar
end

--- Unpack a tar (bytes; gzip-compressed or not) into a directory of the microVM (the agent's
--- PUT /files?dir=, which creates the directory and never writes through a symlink).
---@return true|nil ok, string? err, string? code
function M.put(client, sb, dir, tar_bytes)
  local perr, pcode
  tar_bytes, perr, pcode = plain_tar(tar_bytes)
  if not tar_bytes then return nil, perr, pcode end
  local res, err, code = agent(client, sb, 'PUT', '/files?dir=' .. urlencode(dir), tar_bytes,
    { headers = { ['Content-Type'] = 'application/x-tar' }, timeout = 600 })
  if not res then return nil, err, code end
  return true
end

--- Read a file of the microVM (ENOENT when it is missing).
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local res, err, code = agent(client, sb, 'GET', '/files?path=' .. urlencode(path), nil,
    { timeout = 600, ok_statuses = { [404] = true } })
  if not res then return nil, err, code end
  if res.status == 404 then return nil, path .. ': no such file in the microVM', 'ENOENT' end
  return res.body
end

-- ---- destroy, list -------------------------------------------------------------------------

--- Terminate a microVM; one that is gone (404) or already terminated counts as terminated.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  local ok, err, code = call(client, 'DELETE', microvm_path(sb.id))
  if ok or code == 'HTTP_404' then return true end
  return nil, err, code
end

--- The microVMs that are not terminated, with their tags: {{id, labels, created, state}},
--- filtered by labels when given. ListMicrovms pages are followed (nextToken).
function M.list(client, filter)
  local want = filter and filter.labels or {}
  local out, token = {}, nil
  for _ = 1, 1000 do
    local query = { { 'maxResults', '100' } }
    if token then query[#query + 1] = { 'nextToken', token } end
    local data, err, code = call(client, 'GET', API .. '/microvms', { query = query })
    if not data then return nil, err, code end
    for _, it in ipairs(type(data) == 'table' and type(data.items) == 'table' and data.items or {}) do
      local id, state = str(it.microvmId), str(it.state)
      if id and not TERMINAL[state] then
        local arn = M.microvm_arn(client, it.imageArn, id)
        local tags, terr, tcode = call(client, 'GET', '/2017-03-31/tags/' .. urlencode(arn))
        if not tags and tcode ~= 'HTTP_404' then return nil, terr, tcode end
        local labels = type(tags) == 'table' and type(tags.Tags) == 'table' and tags.Tags or {}
        local match = true
        for k, v in pairs(want) do if labels[k] ~= v then match = false end end
        if match then
          out[#out + 1] = { id = id, labels = labels, created = tonumber(it.startedAt) and math.floor(tonumber(it.startedAt)),
                            state = state }
        end
      end
    end
    token = type(data) == 'table' and str(data.nextToken) or nil
    if not token then break end
  end
  return out
end

-- ---- prewarm: the image ---------------------------------------------------------------------

local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC_TABLE[i] = c
end

--- CRC-32 (zip's, IEEE 802.3) of a string.
function M.crc32(s)
  local c = 0xFFFFFFFF
  local t = CRC_TABLE
  for i = 1, #s do c = t[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

--- A zip archive (method 0, stored) of {{name, data, mode}} in the order given: the code
--- artifact's format (a zip with the Dockerfile at its root). Times are 1980-01-01 and the
--- entries' Unix modes go in the external attributes, so the same files give the same bytes.
function M.zip(entries)
  local parts, central, offset = {}, {}, 0
  for _, e in ipairs(entries) do
    local crc, n = M.crc32(e.data), #e.data
    local attr = (tonumber(e.mode or '644', 8) | 0x8000) << 16
    local lh = string.pack('<I4I2I2I2I2I2I4I4I4I2I2', 0x04034b50, 20, 0, 0, 0, 0x21, crc, n, n, #e.name, 0) .. e.name
    parts[#parts + 1] = lh
    parts[#parts + 1] = e.data
    central[#central + 1] = string.pack('<I4I2I2I2I2I2I2I4I4I4I2I2I2I2I2I4I4', 0x02014b50, 0x0314, 20, 0, 0, 0, 0x21,
      crc, n, n, #e.name, 0, 0, 0, 0, attr, offset) .. e.name
    offset = offset + #lh + n
  end
  local cd = table.concat(central)
  return table.concat(parts) .. cd .. string.pack('<I4I2I2I2I2I4I4I2', 0x06054b50, 0, 0, #entries, #entries, #cd, offset, 0)
end

--- The Dockerfile of the code artifact: the agent on top of base_from, started on the hooks port.
function M.dockerfile(base_from, port)
  return table.concat({
    '# cseng exec agent (docs/providers/aws_microvm.md): built by cseng prewarm --provider aws-microvm',
    'FROM ' .. base_from,
    'COPY microvm-agent /usr/local/bin/microvm-agent',
    'CMD ["/usr/local/bin/microvm-agent", "--port", "' .. port .. '"]', '' }, '\n')
end

--- `cseng prewarm --provider aws-microvm`: the agent (aarch64 build) and its Dockerfile zipped as
--- the code artifact, uploaded to S3 (path style, SigV4 service s3), CreateMicrovmImage with
--- the hooks, polled with GetMicrovmImage until CREATED. Names are content-addressed (the zip's
--- SHA-256), so a second prewarm of the same agent reuses the image. o: {bucket, build_role_arn,
--- agent (path; default AWS_MICROVM_AGENT_BINARY or build/microvm-agent/microvm-agent-aarch64), base_image_arn,
--- base_from, name, timeout, log = fn(line)}. Returns the image ARN, or nil, message, CODE.
function M.prewarm_image(client, o)
  local fs = require 'cseng.fs'
  local sys = require 'cseng.sys'
  local log = o.log or function() end
  if not o.bucket then return nil, 'aws-microvm prewarm: --aws-bucket BUCKET is required', 'ECONFIG' end
  if not o.build_role_arn then return nil, 'aws-microvm prewarm: --aws-build-role-arn ARN is required', 'ECONFIG' end
  local path = o.agent or os.getenv('AWS_MICROVM_AGENT_BINARY') or (sys.root() .. '/build/microvm-agent/microvm-agent-aarch64')
  local bin = fs.read(path)
  if not bin then
    return nil, 'aws-microvm prewarm: no agent binary at ' .. path .. ' (build it with make agent, or set AWS_MICROVM_AGENT_BINARY)', 'ENOENT'
  end
  if bin:sub(1, 4) ~= '\127ELF' or string.unpack('<I2', bin, 19) ~= 183 then
    return nil, 'aws-microvm prewarm: ' .. path .. ' is not an aarch64 ELF (Lambda MicroVMs run ARM_64 only)', 'EBUILD'
  end
  local base_from = o.base_from or os.getenv('AWS_MICROVM_BASE_FROM') or 'public.ecr.aws/docker/library/python:3.12-slim-bookworm'
  local zip = M.zip { { name = 'Dockerfile', data = M.dockerfile(base_from, client.agent_port) },
                      { name = 'microvm-agent', data = bin, mode = '755' } }
  local sha = crypto.sha256_hex(zip)
  local key = 'cseng/microvm-agent-' .. sha:sub(1, 16) .. '.zip'
  local put, perr, pcode = call(client, 'PUT', '/' .. urlencode(o.bucket) .. '/' .. key,
    { body = zip, content_type = 'application/zip', service = 's3', base = client.s3_endpoint, raw = true, timeout = 600,
      query = { { 'x-id', 'PutObject' } } }) -- the operation hint AWS's S3 clients add
  if not put then return nil, perr, pcode end
  log(string.format('uploaded s3://%s/%s (%d bytes)', o.bucket, key, #zip))
  local base = o.base_image_arn or os.getenv('AWS_MICROVM_BASE_IMAGE_ARN')
  if not base then
    local m, merr, mcode = call(client, 'GET', API .. '/managed-microvm-images')
    if not m then return nil, merr, mcode end
    local first = type(m) == 'table' and type(m.items) == 'table' and m.items[1]
    base = first and str(first.imageArn)
    if not base then return nil, 'aws-microvm prewarm: ListManagedMicrovmImages lists no base image', 'EPROTO' end
  end
  local name = o.name or ('cseng-agent-' .. sha:sub(1, 12))
  local body = {
    name = name, baseImageArn = base, buildRoleArn = o.build_role_arn, codeArtifact = { uri = 's3://' .. o.bucket .. '/' .. key },
    cpuConfigurations = { { architecture = 'ARM_64' } },
    hooks = { port = client.agent_port, microvmHooks = { run = 'ENABLED', terminate = 'ENABLED' },
              microvmImageHooks = { ready = 'ENABLED' } },
    tags = { ['cseng.image'] = 'microvm-agent', ['cseng.agent-sha256'] = sha:sub(1, 32) },
    clientToken = 'cseng-' .. sha:sub(1, 32),
  }
  local img, ierr, icode = call(client, 'POST', API .. '/microvm-images', { json = body })
  local arn
  if img then
    arn = str(img.imageArn)
  elseif icode == 'HTTP_409' then -- the same content was registered before under its name
    log('image ' .. name .. ' exists: reusing it')
  else
    return nil, ierr, icode
  end
  local t0, delay = clock.now(), client.o.poll_first
  local timeout = o.timeout or 3600
  while true do
    local g, gerr, gcode = call(client, 'GET', API .. '/microvm-images/' .. urlencode(arn or name))
    if not g then return nil, gerr, gcode end
    arn = str(g.imageArn) or arn
    local state = str(g.state)
    if state == 'CREATED' or state == 'UPDATED' then return arn end
    if state == 'CREATE_FAILED' or state == 'UPDATE_FAILED' or state == 'DELETED' or state == 'DELETING' then
      local why = ''
      local v = str(g.latestFailedImageVersion)
      if v then
        local gv = call(client, 'GET', API .. '/microvm-images/' .. urlencode(arn) .. '/versions/' .. urlencode(v))
        if type(gv) == 'table' and str(gv.stateReason) then why = ': ' .. gv.stateReason end
      end
      return nil, 'aws-microvm prewarm: image ' .. tostring(arn) .. ' is ' .. state .. why, 'EBUILD'
    end
    if (clock.now() - t0) / 1e9 > timeout then
      return nil, string.format('aws-microvm prewarm: image %s still %s after %d s', tostring(arn), tostring(state), timeout), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.o.poll_factor, 5)
  end
end

--- What the run records as the runtime.
function M.runtime(client)
  return 'aws lambda microvms (' .. client.region .. ', ' .. client.endpoint .. ', image ' .. tostring(client.image) .. ')'
end

return M
