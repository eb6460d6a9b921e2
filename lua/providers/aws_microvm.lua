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
--- The control plane's calls (a clientToken per create, retries), the wait until ready and the
--- agent's protocol are providers/shared/aws_microvm_wire.lua; the runner image `cseng prewarm`
--- builds is providers/shared/aws_microvm_build.lua.
---
--- Expected failures return nil, message, CODE: "HTTP_<status>" for an API error (the message
--- has the error type, e.g. "ThrottlingException: Rate exceeded"), transport failures keep
--- cseng.http's codes, "ESTATE" for a microVM that ends before RUNNING, "ECONFIG" for a missing
--- image id.
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local awscreds = require('cseng.lib.aws.credentials')
local wire = require('providers.shared.aws_microvm_wire')
local build = require('providers.shared.aws_microvm_build')

local M = {
  name = 'aws-microvm',
  version = '1.0',
  description = 'AWS Lambda MicroVMs (REST-JSON + SigV4; commands through cseng\'s agent at the microVM endpoint)',
  remote = true,
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; FROM/RUN are fidelity gaps
  credentials = { { 'AWS_ACCESS_KEY_ID', 'AWS_PROFILE' }, { 'AWS_REGION', 'AWS_DEFAULT_REGION' }, 'AWS_MICROVM_IMAGE_ID' },
  -- ARM, us-east-1, a third-party figure (docs/providers/aws_microvm.md): settings rate_vcpu_s /
  -- rate_gib_s override
  rates = { vcpu_s = 0.0000276944, gib_s = 0.0000036667, per_create = 0 },
  capabilities = { non_root = false, network_policy = false, run_steps = false, warm = false },
  artifact_env = 'AWS_MICROVM_IMAGE_ID',
  -- microVM ids (microvmId; the ids in its fake: mvm-<hex>): letters, digits and - _ . :
  id_format = { pattern = '^[%w][%w_.:-]*$', example = 'mvm-0123456789abcdef', max = 256 },
  -- `cseng prewarm --provider aws-microvm` builds the runner image (prewarm_image) with these
  prewarm_flags = {
    ['aws-bucket'] = { key = 'bucket', type = 'string', arg = 'BUCKET',
      help = 'the S3 bucket the code artifact is uploaded to' },
    ['aws-build-role-arn'] = { key = 'build_role_arn', type = 'string', arg = 'ARN',
      help = 'the IAM role the image build assumes' },
  },
}

local API, DEFAULTS = wire.API, wire.DEFAULTS
local urlencode, str = adapter.urlencode, adapter.str
local call, microvm_path, agent = wire.call, wire.microvm_path, wire.agent

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
  local body = wire.run_body(client, spec)
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
  sb.arn = wire.microvm_arn(client, sb.image, sb.id)
  -- from here the microVM exists: whatever ends the setup (a failed tag call, a terminal state,
  -- the deadline, the trial's cancellation) terminates it before returning
  local ok, werr, wcode = pcall(function()
    if next(sb.labels) and client.tags then
      local tags = {}
      for k, v in pairs(sb.labels) do tags[k] = tostring(v) end
      local t, terr, tcode = call(client, 'POST', '/2017-03-31/tags/' .. urlencode(sb.arn), { json = { Tags = tags } })
      if not t then return terr, tcode end
    end
    return wire.wait_ready(client, sb, t0)
  end)
  if not ok or werr then
    pcall(M.destroy, client, sb)
    if not ok then error(werr, 0) end
    return nil, werr, wcode
  end
  sb.ready_seconds = (clock.now() - t0) / 1e9
  return sb
end
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
--- Unpack a tar (bytes; gzip-compressed or not) into a directory of the microVM (the agent's
--- PUT /files?dir=, which creates the directory and never writes through a symlink).
---@return true|nil ok, string? err, string? code
function M.put(client, sb, dir, tar_bytes)
  local perr, pcode
  tar_bytes, perr, pcode = wire.plain_tar(tar_bytes)
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
      if id and not wire.TERMINAL[state] then
        local arn = wire.microvm_arn(client, it.imageArn, id)
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
--- What the run records as the runtime.
function M.runtime(client)
  return 'aws lambda microvms (' .. client.region .. ', ' .. client.endpoint .. ', image ' .. tostring(client.image) .. ')'
end

--- `cseng prewarm --provider aws-microvm` (providers/shared/aws_microvm_build.lua): the agent and
--- its Dockerfile zipped as the code artifact, uploaded to S3, CreateMicrovmImage, polled until
--- CREATED. o: {bucket, build_role_arn (prewarm_flags), agent, base_image_arn, base_from, name,
--- timeout, log = fn(line)}. Returns the image ARN (what AWS_MICROVM_IMAGE_ID takes), or nil,
--- message, CODE.
M.prewarm_image = build.image

return M
