--- AWS Lambda MicroVMs' wire (for lua/providers/aws_microvm.lua and its specs): the REST-JSON
--- control plane (API version 2025-09-09, SigV4 signing name "lambda"; S3 for the prewarm's code
--- artifact) with its retries, error types and the RunMicrovm body, the wait until a microVM
--- runs and its agent answers, and cseng's exec agent at the microVM's endpoint (its protocol:
--- docs/providers/aws_microvm.md).
---
--- A clientToken is made per create and every retry of that RunMicrovm sends it again, so a
--- create whose response was lost (a reset connection, a timeout) returns the microVM it made
--- instead of a second one. Throttling (429) and 5xx are retried with exponential back-off that
--- honours Retry-After.
local http = require('cseng.http')
local clock = require('cseng.clock')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local sigv4 = require('cseng.lib.aws.sigv4')

local wire = {}

--- The control plane's API version path.
wire.API = '/2025-09-09'
local API = wire.API

--- The settings' defaults.
wire.DEFAULTS = {
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

-- ---- the control plane ---------------------------------------------------------------------

--- The error type and message of a REST-JSON error response: the x-amzn-errortype header (its
--- part before ':'), else the body's __type or code (after a '#'), and the body's message.
function wire.error_of(res)
  local t = res.headers and res.headers['x-amzn-errortype']
  local ok, j = pcall(cjson.decode, res.body or '')
  if not ok or type(j) ~= 'table' then j = {} end
  t = t or str(j.__type) or str(j.code) or str(j.Code)
  if t then t = t:gsub(':.*$', ''):gsub('^.*#', '') end
  local msg = str(j.message) or str(j.Message) or adapter.snippet(res.body)
  return t or ('HTTP ' .. res.status), msg
end

wire.RETRY_TRANSPORT = { ECONNRESET = true, ETIMEDOUT = true, ECONNREFUSED = true, ECURL = true }

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
function wire.call(client, method, path, o)
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
      if not wire.RETRY_TRANSPORT[code] or attempt >= client.o.max_attempts then
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
      local etype, msg = wire.error_of(res)
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
local call = wire.call

--- /2025-09-09/microvms/{id}[rest].
function wire.microvm_path(id, rest) return API .. '/microvms/' .. urlencode(id) .. (rest or '') end
local microvm_path = wire.microvm_path

--- The ARN a microVM is tagged under: the microvm_arn format with the partition and account of
--- the image's ARN (arn:aws:lambda:us-east-1:123456789012:microvm-image:name).
function wire.microvm_arn(client, image_arn, id)
  local parts = {}
  for p in (tostring(image_arn) .. ':'):gmatch('([^:]*):') do parts[#parts + 1] = p end
  local vals = { partition = parts[2] or 'aws', region = parts[4] ~= '' and parts[4] or client.region,
                 account = parts[5] or '', id = id }
  return (client.microvm_arn:gsub('{(%w+)}', function(k) return vals[k] or ('{' .. k .. '}') end))
end

-- ---- create ------------------------------------------------------------------------------

--- The RunMicrovm body for a spec. spec.client_token and
--- spec.agent_token are made here when absent.
function wire.run_body(client, spec)
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

--- States a microVM never leaves for RUNNING.
wire.TERMINAL = { TERMINATING = true, TERMINATED = true }
local TERMINAL = wire.TERMINAL

-- Ready = GetMicrovm says RUNNING, an auth token is issued, and the agent answers through the
-- endpoint (the state is eventually consistent: the endpoint answering is what counts).
local ensure_token, agent_request -- forward

--- Wait until sb is RUNNING, has an auth token and its agent answers /health. Returns nil when
--- ready, else message, CODE.
function wire.wait_ready(client, sb, t0)
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
    local transient = (res and (res.status == 502 or res.status == 503 or res.status == 504)) or wire.RETRY_TRANSPORT[acode]
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
wire.agent = agent

--- The agent unpacks plain tar only: a gzip-compressed tar is unpacked here (cseng.archive's
--- hardened extraction) and packed again as a plain tar with the same modes and links.
function wire.plain_tar(bytes)
  if bytes:sub(1, 2) ~= '\31\139' then return bytes end
  local fs = require('cseng.fs')
  local archive = require('cseng.archive')
  local tmp = errors.check(nil, fs.tempdir('cseng-aws-put-'))
  local ok, err, code = archive.extract(bytes, tmp, { from = 'bytes' })
  local tar
  if ok then tar, err, code = archive.pack_dir(tmp, { format = 'tar' }) end
  fs.remove_tree(tmp)
  if not tar then return nil, 'aws-microvm: put: ' .. tostring(err), code or 'EARCHIVE' end
  return tar
end

return wire
