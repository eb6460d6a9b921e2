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
--- The execute API takes a shell command line and no cwd, env or stdin, so every command is a
--- `cd <cwd> && exec env K=V... timeout -s KILL <N> bash -c <cmd>` line, and a run killed at
--- its deadline is timed_out = true, code 124 (providers/shared/runloop_wire.lua, with the rest
--- of the wire; the native build is providers/shared/runloop_build.lua).
--- Devboxes run their commands as root (launch_parameters.user_parameters root/0), so the
--- verifier runs as root too (non_root = false).
---
--- Expected failures return nil, message, CODE: an HTTP status outside 2xx is "HTTP_<status>",
--- a devbox that does not come up "EBOOT" (it is shut down), a snapshot that fails "ESNAPSHOT";
--- transport failures keep cseng.http's codes.
local clock = require('cseng.clock')
local task = require('cseng.task')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.runloop_wire')
local build = require('providers.shared.runloop_build')

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
  capabilities = { non_root = false, network_policy = false, run_steps = true, warm = true, snapshot = true },
  artifact_env = 'RUNLOOP_SNAPSHOT_ID',
  -- devbox ids: dbx_ and alphanumerics
  id_format = { pattern = '^dbx_[%w_-]+$', example = 'dbx_31TqkLxd7mR2a9hW3YpZc', max = 128 },
}
local DEFAULTS = wire.DEFAULTS
local SIZES, BOOTING, GONE = wire.SIZES, wire.BOOTING, wire.GONE
local urlencode, str = adapter.urlencode, adapter.str
local call, devbox_path = wire.call, wire.devbox_path

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
--- Create a devbox and wait until it is running. spec: {labels (as metadata), env, workdir,
--- cpus, memory_mb, ttl_seconds, warm_artifact}. A devbox that fails to boot is shut down.
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local body = wire.create_body(client, spec)
  local data, res, code = adapter.post_created(call, client, '/v1/devboxes', { json = body }, 'id', 'runloop: POST /v1/devboxes')
  if not data then return nil, res, code end
  local id = data.id
  local view = data
  if BOOTING[data.status] or not data.status then
    local err, ecode
    view, err, ecode = wire.await_running(client, id, clock.now() + client.boot_timeout * 1e9)
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
--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}. Returns
--- {code, stdout, stderr, timed_out, elapsed, execution_id, stdout_truncated, stderr_truncated}
--- or nil, message, CODE. The API returns the last `last_n` lines of each stream.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local stdin_path, serr, scode = adapter.stdin_upload(wire.upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  local line = wire.wrap_command(cmd, { cwd = opts.cwd or sb.workdir, env = util.merge(sb.env, opts.env),
                                        timeout = timeout, stdin_path = stdin_path })
  return wire.execute(client, sb, line, timeout, opts.tail_bytes)
end

--- Unpack a tar (bytes, optionally gzipped) into a directory of the devbox: uploaded as one
--- file (upload_file), then extracted by a command (adapter.put_by_upload).
M.put = adapter.put_via(M, wire.upload)

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
--- What the run records as the runtime.
function M.runtime(client)
  return 'runloop devboxes (' .. (client.blueprint_name or client.blueprint_id or 'default image') .. ', ' .. client.base .. ')'
end

--- Build the task's recipe as a blueprint named cseng-<key16> (providers/shared/runloop_build.lua):
--- the task's Dockerfile and environment/ as an object, polled until build_complete. Returns
--- {image, layer (the blueprint's id, what create takes), blueprint, cache_hit}.
M.build = build.build

--- How the environment is made: a native build (a blueprint from the task's Dockerfile), unless
--- every devbox comes from a configured snapshot or blueprint, or RUNLOOP_BUILD=replay.
function M.env_mode(client)
  if client.snapshot or client.blueprint_id or client.blueprint_name or client.build_mode == 'replay' then return 'replay' end
  return 'native'
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
  -- polled from 50 ms, doubling to 1 s: the arena times snapshots, and a fixed 1 s poll would add
  -- up to a second to each
  local pause = 0.05
  while true do
    local s
    s, err, code = wire.snapshot_status(client, id)
    if not s then return nil, err, code end
    if s.status == 'complete' then return id end
    if s.status == 'error' or s.status == 'deleted' then
      return nil, 'runloop: snapshot ' .. id .. ' ' .. tostring(s.status) .. ': ' .. tostring(s.error_message), 'ESNAPSHOT'
    end
    if clock.now() > deadline then return nil, 'runloop: snapshot ' .. id .. ' not complete in time', 'ETIMEDOUT' end
    task.sleep(pause)
    pause = math.min(pause * 2, 1)
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
          local st = wire.snapshot_status(client, s.id)
          if type(st) == 'table' and st.status == 'complete' then return s.id end
        end
      end
    end
    if data.has_more ~= true or #items == 0 then return nil end
  end
  return nil
end

--- Delete a disk snapshot (a warm artifact no longer wanted: cseng prewarm --prune); one already
--- gone counts as deleted.
function M.delete_artifact(client, id)
  return adapter.deleted(call(client, 'POST', '/v1/devboxes/disk_snapshots/' .. urlencode(id) .. '/delete'))
end

return M
