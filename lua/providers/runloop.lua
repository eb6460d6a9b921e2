--- The Runloop provider: Runloop devboxes through the REST API @runloop/api-client 1.32 speaks
--- (read from its src/resources/devboxes; docs/providers/runloop.md lists what is checked against
--- the SDK and what is still assumed about the live service).
---
---   base    RUNLOOP_BASE_URL (default https://api.runloop.ai), Authorization: Bearer RUNLOOP_API_KEY,
---           x-request-id on every POST (the SDK's idempotency header)
---   create  POST /v1/devboxes {blueprint_id | blueprint_name | snapshot_id, metadata (the labels),
---                environment_variables, launch_parameters{keep_alive_time_seconds,
---                resource_size_request, user_parameters{username, uid}}} -> DevboxView
---           POST /v1/devboxes/{id}/wait_for_status {statuses:[running, failure, shutdown]}
---                (a long poll the server ends with 408: asked again) until it is running
---   exec    POST /v1/devboxes/{id}/execute?last_n= {command, command_id (UUIDv7)} -> the execution,
---                completed or not; then POST .../executions/{eid}/wait_for_status?last_n=
---                {statuses:[completed]} (408: again) -> {exit_status, stdout, stderr};
---                past the deadline POST .../executions/{eid}/kill
---   files   POST /v1/devboxes/{id}/upload_file (multipart: path, file);
---           POST /v1/devboxes/{id}/download_file {path} -> the bytes
---   destroy POST /v1/devboxes/{id}/shutdown (404, or a devbox already shut down, = success)
---   list    GET  /v1/devboxes?limit=&starting_after= -> {devboxes, has_more}; live ones whose
---                metadata has the labels (the API has no metadata filter for devboxes)
---   build   GET  /v1/blueprints?name=cseng-<key16> (built = the cache hit), else POST /v1/objects
---                {name, content_type tar} -> upload_url, PUT the context there, POST .../complete,
---                POST /v1/blueprints {name, dockerfile, build_context{type object, object_id}},
---                GET /v1/blueprints/{id} until build_complete; create then names blueprint_id
---   warm    POST /v1/devboxes/{id}/snapshot_disk_async {name, metadata} -> {id}, then
---           GET /v1/devboxes/disk_snapshots/{id}/status until complete; a snapshot with the
---           same cseng.warm_key metadata is reused (GET /v1/devboxes/disk_snapshots)
---
--- The execute API takes a shell command line and no cwd, env or stdin, so every command is
---   cd <cwd> && exec env K=V... timeout -s KILL <N> bash -c <cmd> [< stdin file]
--- and a run killed at its deadline (exit 137 after >= N s) is timed_out = true, code 124.
--- Devboxes run their commands as root (launch_parameters.user_parameters root/0), so the
--- verifier runs as root too (non_root = false).
---
--- Expected failures return nil, message, CODE: an HTTP status outside 2xx is "HTTP_<status>",
--- a devbox that does not come up "EBOOT" (it is shut down), a snapshot that fails "ESNAPSHOT";
--- transport failures keep cseng.http's codes.
local clock = require 'cseng.clock'
local task = require 'cseng.task'
local crypto = require 'cseng.crypto'
local jsonl = require 'cseng.lib.jsonl'
local util = require 'cseng.lib.util'
local secrets = require 'cseng.lib.secrets'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'

-- third-party transcription of runloop.ai/pricing (per-second compute); settings override them
local RATES = { vcpu_s = 0.00003, gib_s = 0.000007, per_create = 0 }

local M = {
  name = 'runloop',
  version = '1.0',
  description = 'Runloop devboxes (REST API of @runloop/api-client)',
  remote = true,
  applies_dockerfile = true, -- env_mode native: the task's Dockerfile is built as a blueprint (M.build)
  credentials = { 'RUNLOOP_API_KEY' },
  rates = util.copy(RATES),
  capabilities = { non_root = false, network_policy = false, run_steps = true, warm = true },
  artifact_env = 'RUNLOOP_SNAPSHOT_ID',
  -- devbox ids: dbx_ and alphanumerics
  id_format = { pattern = '^dbx_[%w_-]+$', example = 'dbx_31TqkLxd7mR2a9hW3YpZc', max = 128 },
}

local DEFAULTS = {
  base_url = 'https://api.runloop.ai', request_timeout = 60, exec_timeout = 600, grace = 60,
  boot_timeout = 600, snapshot_wait = 900, build_timeout = 1800, keep_alive = 45 * 60, last_n = 10000, tail_bytes = 1 << 20,
}

-- The named sizes (cpu, GiB): the smallest that fits the task is asked for.
local SIZES = { { 'X_SMALL', 0.5, 1 }, { 'SMALL', 1, 2 }, { 'MEDIUM', 2, 4 }, { 'LARGE', 2, 8 },
                { 'X_LARGE', 4, 16 }, { 'XX_LARGE', 8, 32 } }
local BOOTING = { provisioning = true, initializing = true, queued = true, scheduled = true, resuming = true }
local GONE = { shutdown = true, failure = true }

---@class runloop.client
---@field base string
---@field key string
---@field blueprint_id string|nil
---@field blueprint_name string|nil
---@field snapshot string|nil RUNLOOP_SNAPSHOT_ID: every devbox from this disk snapshot
---@field size string|nil resource_size_request for every devbox
---@field user string 'root' (user_parameters root/0) or 'default' (the image's own user)
---@field request_timeout number
---@field boot_timeout number seconds create waits for a devbox to be running

--- Read the settings (cfg first, then the environment) and check the credentials. Raises one
--- line naming the missing variable; makes no request. The rates (vcpu_s, gib_s, per_create;
--- RUNLOOP_VCPU_S, RUNLOOP_GIB_S, RUNLOOP_PER_CREATE) replace M.rates.
---@param cfg? table {getenv=fn, base_url, api_key, blueprint_id, blueprint_name, snapshot_id, resource_size, user, ...}
---@return runloop.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local key = setting('api_key', 'RUNLOOP_API_KEY')
  if not key then
    errors.raise(errors.ECONFIG, 'runloop provider: RUNLOOP_API_KEY is not set (export it, or put it in an --env-file)')
  end
  secrets.add(key)
  local rates = {}
  for name, default in pairs(RATES) do
    local v = setting(name, 'RUNLOOP_' .. name:upper())
    if v ~= nil and not tonumber(v) then errors.raise(errors.ECONFIG, 'runloop provider: ' .. name .. ' must be a number, not ' .. tostring(v)) end
    rates[name] = tonumber(v) or default
  end
  M.rates = rates
  local user = setting('user', 'RUNLOOP_USER') or 'root'
  if user ~= 'root' and user ~= 'default' then errors.raise(errors.ECONFIG, "runloop provider: user must be 'root' or 'default', not " .. user) end
  local size = setting('resource_size', 'RUNLOOP_RESOURCE_SIZE')
  if size then
    local known = false
    for _, s in ipairs(SIZES) do if s[1] == size then known = true end end
    if not known then
      errors.raise(errors.ECONFIG, 'runloop provider: resource_size ' .. size .. ' is not one of X_SMALL, SMALL, MEDIUM, LARGE, X_LARGE, XX_LARGE')
    end
  end
  return {
    base = tostring(setting('base_url', 'RUNLOOP_BASE_URL') or DEFAULTS.base_url):gsub('/+$', ''),
    key = key,
    blueprint_id = setting('blueprint_id', 'RUNLOOP_BLUEPRINT_ID'),
    blueprint_name = setting('blueprint_name', 'RUNLOOP_BLUEPRINT_NAME'),
    snapshot = setting('snapshot_id', 'RUNLOOP_SNAPSHOT_ID'),
    size = size, user = user,
    request_timeout = tonumber(setting('request_timeout')) or DEFAULTS.request_timeout,
    boot_timeout = tonumber(setting('boot_timeout')) or DEFAULTS.boot_timeout,
    snapshot_wait = tonumber(setting('snapshot_wait')) or DEFAULTS.snapshot_wait,
    build_timeout = tonumber(setting('build_timeout', 'RUNLOOP_BUILD_TIMEOUT')) or DEFAULTS.build_timeout,
    build_mode = setting('build', 'RUNLOOP_BUILD'),
    grace = tonumber(setting('grace')) or DEFAULTS.grace,
    last_n = adapter.int(setting('last_n')) or DEFAULTS.last_n,
  }
end

-- ---- HTTP ----------------------------------------------------------------------------------

local urlencode, str = adapter.urlencode, adapter.str

-- Runloop's error bodies: {"message": ...} or {"error": ...}.
local api_message = adapter.message_from { 'message', 'error', 'error.message' }

--- A UUIDv7 (48-bit Unix ms, version 7, variant 10, random rest): the execute call's
--- command_id, as the SDK makes one.
function M.uuidv7()
  local ms = math.floor(clock.epoch() * 1000)
  local r = crypto.random_bytes(10)
  local b = {}
  for i = 6, 1, -1 do b[i] = ms % 256; ms = ms // 256 end
  b[7] = 0x70 | (r:byte(1) & 0x0f)
  b[8] = r:byte(2)
  b[9] = 0x80 | (r:byte(3) & 0x3f)
  for i = 10, 16 do b[i] = r:byte(i - 6) end
  local h = crypto.hex(string.char(table.unpack(b)))
  return string.format('%s-%s-%s-%s-%s', h:sub(1, 8), h:sub(9, 12), h:sub(13, 16), h:sub(17, 20), h:sub(21, 32))
end

local function call(client, method, path, o)
  o = o or {}
  local headers = { Authorization = 'Bearer ' .. client.key, Accept = o.accept or 'application/json' }
  local body = o.body
  -- as the SDK: JSON on every call but GET (a bodiless POST too: curl would say form-urlencoded)
  if o.content_type then headers['Content-Type'] = o.content_type
  elseif method ~= 'GET' then headers['Content-Type'] = 'application/json' end
  if o.json ~= nil then body = jsonl.encode(o.json) end
  if method ~= 'GET' then headers['x-request-id'] = 'cseng-' .. M.uuidv7() end
  local q = {}
  for _, kv in ipairs(o.query or {}) do q[#q + 1] = kv[1] .. '=' .. urlencode(kv[2]) end
  local url = client.base .. path .. (#q > 0 and ('?' .. table.concat(q, '&')) or '')
  return adapter.request('runloop', method, url, {
    headers = headers, body = body, raw = o.raw, timeout = o.timeout or client.request_timeout,
    what = method .. ' ' .. path, message = api_message,
  })
end

local function devbox_path(id, rest) return '/v1/devboxes/' .. urlencode(id) .. (rest or '') end

-- ---- create --------------------------------------------------------------------------------

--- The smallest named size with at least cpus and memory_mb (nil when neither is given).
function M.size_for(cpus, memory_mb)
  if not cpus and not memory_mb then return nil end
  for _, s in ipairs(SIZES) do
    if s[2] >= (cpus or 0) and s[3] * 1024 >= (memory_mb or 0) then return s[1] end
  end
  return SIZES[#SIZES][1]
end

--- The POST /v1/devboxes body for a spec (exposed for the specs).
function M.create_body(client, spec)
  local body = {}
  local snap = spec.warm_artifact or client.snapshot
  if snap then body.snapshot_id = snap
  elseif spec.layer then body.blueprint_id = spec.layer -- M.build's blueprint
  elseif client.blueprint_id then body.blueprint_id = client.blueprint_id
  elseif client.blueprint_name then body.blueprint_name = client.blueprint_name end
  if spec.labels and next(spec.labels) then body.metadata = util.copy(spec.labels) end
  if spec.env and next(spec.env) then body.environment_variables = util.copy(spec.env) end
  local lp = { keep_alive_time_seconds = spec.ttl_seconds and math.tointeger(math.ceil(spec.ttl_seconds)) or DEFAULTS.keep_alive }
  lp.resource_size_request = client.size or M.size_for(spec.cpus, spec.memory_mb) or 'SMALL'
  if client.user == 'root' then lp.user_parameters = { username = 'root', uid = 0 } end
  body.launch_parameters = lp
  return body
end

--- Wait (long polls) until a devbox leaves its booting states; returns its DevboxView.
local function await_running(client, id, deadline)
  while true do
    local data, err, code = call(client, 'POST', devbox_path(id, '/wait_for_status'),
      { json = { statuses = { 'running', 'failure', 'shutdown' } }, timeout = 600 })
    if data then
      if type(data) ~= 'table' or not str(data.status) then return nil, 'runloop: wait_for_status: no status', 'EPROTO' end
      if not BOOTING[data.status] then return data end
    elseif code ~= 'HTTP_408' then
      return nil, err, code
    end
    if clock.now() > deadline then return nil, 'runloop: devbox ' .. id .. ' not running in time', 'ETIMEDOUT' end
  end
end

--- Create a devbox and wait until it is running. spec: {labels (as metadata), env, workdir,
--- cpus, memory_mb, ttl_seconds, warm_artifact}. A devbox that fails to boot is shut down.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = M.create_body(client, spec)
  local data, res, code = adapter.post_created(call, client, '/v1/devboxes', { json = body }, 'id', 'runloop: POST /v1/devboxes')
  if not data then return nil, res, code end
  local id = data.id
  local view = data
  if BOOTING[data.status] or not data.status then
    local err, ecode
    view, err, ecode = await_running(client, id, clock.now() + client.boot_timeout * 1e9)
    if not view then
      M.destroy(client, { id = id })
      return nil, err, ecode
    end
  end
  if view.status ~= 'running' then
    M.destroy(client, { id = id })
    return nil, string.format('runloop: devbox %s is %s (%s)', id, tostring(view.status),
      tostring(view.failure_reason or view.shutdown_reason or 'no reason given')), 'EBOOT'
  end
  local lp = body.launch_parameters
  return {
    id = id, labels = spec.labels or {}, env = spec.env, workdir = spec.workdir, status = view.status,
    image = body.snapshot_id or body.blueprint_id or body.blueprint_name or 'runloop default',
    allocation = { size = lp.resource_size_request }, http_timings = res.timings,
  }
end

-- ---- exec ----------------------------------------------------------------------------------

local upload -- forward

--- The shell command line sent for a command (exposed for the specs).
function M.wrap_command(cmd, o)
  local parts = { 'cd', util.shell_quote(o.cwd or '/'), '&&' }
  local run = {}
  local env = o.env or {}
  local keys = {}
  for k in pairs(env) do keys[#keys + 1] = k end
  table.sort(keys)
  if #keys > 0 then
    run[#run + 1] = 'env'
    for _, k in ipairs(keys) do run[#run + 1] = util.shell_quote(k .. '=' .. tostring(env[k])) end
  end
  run[#run + 1] = 'timeout -s KILL ' .. math.max(1, math.tointeger(math.ceil(o.timeout))) .. ' bash -c ' .. util.shell_quote(cmd)
  if not o.stdin_path then
    parts[#parts + 1] = 'exec ' .. table.concat(run, ' ')
  else
    parts[#parts + 1] = table.concat(run, ' ') .. ' < ' .. o.stdin_path .. '; rc=$?; rm -f ' .. o.stdin_path .. '; exit $rc'
  end
  return table.concat(parts, ' ')
end

--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, execution_id, stdout_truncated, stderr_truncated}
--- or nil, message, CODE. The API returns the last `last_n` lines of each stream.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local stdin_path, serr, scode = adapter.stdin_upload(upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  local line = M.wrap_command(cmd, { cwd = opts.cwd or sb.workdir, env = util.merge(sb.env, opts.env),
                                     timeout = timeout, stdin_path = stdin_path })
  local query = { { 'last_n', tostring(client.last_n) } }
  local t0 = clock.now()
  local deadline = t0 + (timeout + client.grace) * 1e9
  local r, err, code = call(client, 'POST', devbox_path(sb.id, '/execute'),
    { json = { command = line, command_id = M.uuidv7() }, query = query, timeout = client.request_timeout + 30 })
  if not r then return nil, err, code end
  if type(r) ~= 'table' or not str(r.execution_id) then return nil, 'runloop: execute: no execution_id', 'EPROTO' end
  local eid = r.execution_id
  local killed = false
  while r.status ~= 'completed' do
    if clock.now() > deadline then
      call(client, 'POST', devbox_path(sb.id, '/executions/' .. urlencode(eid) .. '/kill'), { json = {} })
      killed = true
      break
    end
    local w
    w, err, code = call(client, 'POST', devbox_path(sb.id, '/executions/' .. urlencode(eid) .. '/wait_for_status'),
      { json = { statuses = { 'completed' } }, query = query, timeout = 600 })
    if w then
      if type(w) ~= 'table' then return nil, 'runloop: wait_for_status: not an execution', 'EPROTO' end
      r = w
    elseif code ~= 'HTTP_408' then
      return nil, err, code
    end
  end
  local elapsed = (clock.now() - t0) / 1e9
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  local function tail(s) s = str(s) or ''; return #s > cap and s:sub(-cap) or s end
  local exit = adapter.int(r.exit_status)
  if not killed and not exit then return nil, 'runloop: execution ' .. eid .. ' completed without an exit status', 'EPROTO' end
  local timed_out = killed or (exit == 137 and elapsed >= timeout)
  return {
    code = timed_out and 124 or exit, stdout = tail(r.stdout), stderr = tail(r.stderr),
    stdout_truncated = r.stdout_truncated == true or nil, stderr_truncated = r.stderr_truncated == true or nil,
    timed_out = timed_out, elapsed = elapsed, execution_id = eid,
  }
end

-- ---- files ---------------------------------------------------------------------------------

-- multipart/form-data with the SDK's two fields: path (text) and file (the bytes).
local function upload_form(path, data)
  local boundary = 'cseng-' .. crypto.hex(crypto.random_bytes(12))
  return table.concat({
    '--', boundary, '\r\nContent-Disposition: form-data; name="path"\r\n\r\n', path, '\r\n',
    '--', boundary, '\r\nContent-Disposition: form-data; name="file"; filename="', util.basename(path), '"\r\n',
    'Content-Type: application/octet-stream\r\n\r\n', data, '\r\n--', boundary, '--\r\n',
  }), 'multipart/form-data; boundary=' .. boundary
end

upload = function(client, sb, path, data)
  local body, ctype = upload_form(path, data)
  local ok, err, code = call(client, 'POST', devbox_path(sb.id, '/upload_file'),
    { body = body, content_type = ctype, timeout = 600 })
  if not ok then return nil, err, code end
  return true
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the devbox: uploaded as one
--- file (upload_file), then extracted by a command (adapter.put_by_upload).
M.put = adapter.put_via(M, upload)

--- Read a file of the devbox (download_file); ENOENT when it is missing (a refused download
--- of a path that `test -e` does not find).
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local data, err, code = call(client, 'POST', devbox_path(sb.id, '/download_file'),
    { json = { path = path }, raw = true, accept = 'application/octet-stream', timeout = 600 })
  if data then return data end
  if code and code:match('^HTTP_4') and code ~= 'HTTP_401' and code ~= 'HTTP_403' then
    local r = M.exec(client, sb, 'test -e ' .. util.shell_quote(path), { timeout = 30, cwd = '/' })
    if r and r.code ~= 0 then return nil, path .. ': no such file in the devbox', 'ENOENT' end
  end
  return nil, err, code
end

-- ---- destroy, list, snapshot ---------------------------------------------------------------

--- Shut a devbox down; one that is gone (404) or already shut down counts as destroyed.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  local ok, err, code = call(client, 'POST', devbox_path(sb.id, '/shutdown'))
  if ok or code == 'HTTP_404' then return true end
  if code and code:match('^HTTP_4') then -- refused: is it shut down already?
    local view = call(client, 'GET', devbox_path(sb.id))
    if type(view) == 'table' and GONE[view.status] then return true end
  end
  return nil, err, code
end

--- The devboxes that are not shut down (or failed) and whose metadata has every label of
--- filter.labels: {{id, labels = metadata, created, status}}. Pages are followed (has_more,
--- starting_after the last id), at most 50.
function M.list(client, filter)
  local want = filter and filter.labels or {}
  local out, after = {}, nil
  for _ = 1, 50 do
    local query = { { 'limit', '100' } }
    if after then query[#query + 1] = { 'starting_after', after } end
    local data, err, code = call(client, 'GET', '/v1/devboxes', { query = query })
    if not data then return nil, err, code end
    local items = type(data) == 'table' and type(data.devboxes) == 'table' and data.devboxes or {}
    for _, d in ipairs(items) do
      if type(d) == 'table' and str(d.id) then
        local meta = type(d.metadata) == 'table' and d.metadata or {}
        local match = not GONE[d.status]
        for k, v in pairs(want) do if meta[k] ~= v then match = false end end
        if match then
          local created = tonumber(d.create_time_ms)
          out[#out + 1] = { id = d.id, labels = meta, created = created and created // 1000 or nil, status = str(d.status) }
        end
        after = d.id
      end
    end
    if not (type(data) == 'table' and data.has_more == true) or #items == 0 then break end
  end
  return out
end

--- The status of a disk snapshot: {status = in_progress|complete|error|deleted, snapshot, error_message}.
function M.snapshot_status(client, id)
  return call(client, 'GET', '/v1/devboxes/disk_snapshots/' .. urlencode(id) .. '/status')
end

--- Delete a disk snapshot (a warm artifact no longer wanted); one already gone counts as deleted.
function M.delete_snapshot(client, id)
  return adapter.deleted(call(client, 'POST', '/v1/devboxes/disk_snapshots/' .. urlencode(id) .. '/delete'))
end

--- Snapshot a prepared devbox's disk (snapshot_disk_async, then its status until complete):
--- the snapshot id, which create accepts as spec.warm_artifact. key goes into the snapshot's
--- name and metadata (cseng.warm_key), where find_artifact looks for it.
---@return string|nil id, string? err, string? code
function M.snapshot(client, sb, key)
  local data, err, code = call(client, 'POST', devbox_path(sb.id, '/snapshot_disk_async'),
    { json = { name = 'cseng-' .. tostring(key), metadata = { ['cseng.warm_key'] = tostring(key) } }, timeout = 120 })
  if not data then return nil, err, code end
  local id = type(data) == 'table' and str(data.id)
  if not id then return nil, 'runloop: snapshot_disk_async: no id in the response', 'EPROTO' end
  local deadline = clock.now() + client.snapshot_wait * 1e9
  while true do
    local s
    s, err, code = M.snapshot_status(client, id)
    if not s then return nil, err, code end
    if s.status == 'complete' then return id end
    if s.status == 'error' or s.status == 'deleted' then
      return nil, 'runloop: snapshot ' .. id .. ' ' .. tostring(s.status) .. ': ' .. tostring(s.error_message), 'ESNAPSHOT'
    end
    if clock.now() > deadline then return nil, 'runloop: snapshot ' .. id .. ' not complete in time', 'ETIMEDOUT' end
    task.sleep(1)
  end
end

--- A complete disk snapshot made earlier for the same content key (metadata cseng.warm_key),
--- or nil. Pages of GET /v1/devboxes/disk_snapshots are followed, at most 20.
function M.find_artifact(client, key, _task)
  local after
  for _ = 1, 20 do
    local query = { { 'limit', '100' } }
    if after then query[#query + 1] = { 'starting_after', after } end
    local data = call(client, 'GET', '/v1/devboxes/disk_snapshots', { query = query })
    if type(data) ~= 'table' then return nil end
    local items = type(data.snapshots) == 'table' and data.snapshots or {}
    for _, s in ipairs(items) do
      if type(s) == 'table' and str(s.id) then
        after = s.id
        if type(s.metadata) == 'table' and s.metadata['cseng.warm_key'] == tostring(key) then
          local st = M.snapshot_status(client, s.id)
          if type(st) == 'table' and st.status == 'complete' then return s.id end
        end
      end
    end
    if data.has_more ~= true or #items == 0 then return nil end
  end
  return nil
end

-- ---- native builds (the task's recipe as a blueprint) -------------------------------------

local BUILDING = { queued = true, provisioning = true, building = true }

--- How the environment is made: a native build (a blueprint from the task's Dockerfile), unless
--- every devbox comes from a configured snapshot or blueprint, or RUNLOOP_BUILD=replay.
function M.env_mode(client)
  if client.snapshot or client.blueprint_id or client.blueprint_name or client.build_mode == 'replay' then return 'replay' end
  return 'native'
end

--- The blueprint a recipe builds to: cseng-<the content key's first 16 hex digits>.
function M.build_name(rcp) return 'cseng-' .. rcp.key:sub(1, 16) end

-- The blueprints named name (GET /v1/blueprints?name=, every page), newest first.
local function blueprints_named(client, name)
  local out, after = {}, nil
  for _ = 1, 20 do
    local q = { { 'name', name }, { 'limit', '100' } }
    if after then q[#q + 1] = { 'starting_after', after } end
    local data, err, code = call(client, 'GET', '/v1/blueprints', { query = q })
    if not data then return nil, err, code end
    local items = type(data) == 'table' and type(data.blueprints) == 'table' and data.blueprints or {}
    for _, b in ipairs(items) do
      if type(b) == 'table' and b.name == name and str(b.id) and b.state ~= 'deleted' then out[#out + 1] = b end
    end
    if not (type(data) == 'table' and data.has_more == true) or #items == 0 then break end
    after = items[#items].id
  end
  table.sort(out, function(a, b) return (tonumber(a.create_time_ms) or 0) > (tonumber(b.create_time_ms) or 0) end)
  return out
end

-- The build log's text (GET /v1/blueprints/{id}/logs), or nil.
local function build_log(client, id)
  local data = call(client, 'GET', '/v1/blueprints/' .. urlencode(id) .. '/logs')
  if type(data) ~= 'table' or type(data.logs) ~= 'table' then return nil end
  local lines = {}
  for _, l in ipairs(data.logs) do if type(l) == 'table' and str(l.message) then lines[#lines + 1] = l.message end end
  return table.concat(lines, '\n')
end

-- Poll GET /v1/blueprints/{id} until it leaves queued/provisioning/building (100 ms, x1.5 to 2 s).
local function await_build(client, bp, timeout)
  local deadline, delay = clock.now() + timeout * 1e9, 0.1
  while BUILDING[bp.status] do
    if clock.now() > deadline then
      return nil, string.format('runloop: blueprint %s (%s) not built after %s s (status %s)', bp.name or '?', bp.id, timeout,
        tostring(bp.status)), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * 1.5, 2)
    local cur, err, code = call(client, 'GET', '/v1/blueprints/' .. urlencode(bp.id))
    if cur then
      if type(cur) ~= 'table' then return nil, 'runloop: GET /v1/blueprints/' .. bp.id .. ': not an object', 'EPROTO' end
      bp = cur
    elseif code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then
      return nil, err, code
    end
  end
  if bp.status ~= 'build_complete' then
    local log = build_log(client, bp.id)
    return nil, errors.new(errors.EBUILD, string.format('runloop: blueprint %s (%s) is %s%s', bp.name or '?', bp.id,
      tostring(bp.status), str(bp.failure_reason) and (': ' .. bp.failure_reason) or ''), { log = log }), errors.EBUILD
  end
  return bp
end

-- The build context as an object: POST /v1/objects {name, content_type tar, ttl_ms} -> upload_url,
-- PUT the bytes there (a presigned URL: no Authorization, no Content-Type), POST /v1/objects/{id}/complete.
local function upload_context(client, name, rcp)
  local obj, err, code = call(client, 'POST', '/v1/objects', { json = { name = 'build-context-' .. name, content_type = 'tar',
    ttl_ms = 3600000, metadata = { ['cseng.content_key'] = rcp.key } } })
  if not obj then return nil, err, code end
  if type(obj) ~= 'table' or not str(obj.id) or not str(obj.upload_url) then
    return nil, 'runloop: POST /v1/objects: no id/upload_url', 'EPROTO'
  end
  -- as the SDK's uploads (a fetch with no headers): no Content-Type at all (curl would add
  -- application/x-www-form-urlencoded to a body; a presigned URL's signature can refuse a
  -- Content-Type it was not signed with).
  local ok, perr, pcode = adapter.request('runloop', 'PUT', obj.upload_url, { body = rcp.context, raw = true, timeout = 300,
    what = 'PUT the build context', omit_headers = { 'Content-Type' } })
  if not ok then return nil, perr, pcode end
  local done, cerr, ccode = call(client, 'POST', '/v1/objects/' .. urlencode(obj.id) .. '/complete', { json = {} })
  if not done then return nil, cerr, ccode end
  return obj.id
end

--- Build the task's recipe as a blueprint named cseng-<key16>: POST /v1/blueprints {name,
--- dockerfile (the task's, FROM set to the recipe's base), build_context {type = object,
--- object_id} (environment/ as the recipe's deterministic tar, uploaded as an object)}, then poll
--- until build_complete. An existing blueprint of that name that is built is the cache hit (one
--- still building is waited for). Returns {image, layer (the blueprint's id, what create takes),
--- blueprint, cache_hit}.
function M.build(client, req)
  local rcp = req.recipe
  local name = M.build_name(rcp)
  local timeout = math.max(req.timeout or 0, client.build_timeout)
  local found, err, code = blueprints_named(client, name)
  if not found then return nil, err, code end
  for _, b in ipairs(found) do
    if b.status == 'build_complete' then return { image = rcp.base, layer = b.id, blueprint = name, cache_hit = true } end
  end
  for _, b in ipairs(found) do
    if BUILDING[b.status] then
      local bp, werr, wcode = await_build(client, b, timeout)
      if bp then return { image = rcp.base, layer = bp.id, blueprint = name, cache_hit = true } end
      if wcode ~= 'EBUILD' then return nil, werr, wcode end
      break -- that build failed: build again
    end
  end
  local dockerfile, derr = require('cseng.workload.recipe').dockerfile(rcp)
  if not dockerfile then return nil, 'runloop: build: ' .. derr, 'EBUILD' end
  local object_id, uerr, ucode = upload_context(client, name, rcp)
  if not object_id then return nil, uerr, ucode end
  local bp, berr, bcode = call(client, 'POST', '/v1/blueprints', { json = { name = name, dockerfile = dockerfile,
    build_context = { type = 'object', object_id = object_id }, metadata = { ['cseng.content_key'] = rcp.key } } })
  if not bp then return nil, berr, bcode end
  if type(bp) ~= 'table' or not str(bp.id) then return nil, 'runloop: POST /v1/blueprints: no id', 'EPROTO' end
  local done, werr, wcode = await_build(client, bp, timeout)
  if not done then return nil, werr, wcode end
  return { image = rcp.base, layer = done.id, blueprint = name, cache_hit = false }
end

--- What the run records as the runtime.
function M.runtime(client)
  return 'runloop devboxes (' .. (client.blueprint_name or client.blueprint_id or 'default image') .. ', ' .. client.base .. ')'
end

return M
