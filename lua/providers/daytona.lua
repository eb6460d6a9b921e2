--- The Daytona provider: sandboxes from Daytona's REST API and its in-sandbox toolbox
--- (docs/providers/daytona.md; specs: shared/specs/daytona-openapi.yaml and
--- daytona-toolbox-swagger.yaml).
---
---   base    DAYTONA_API_URL (default https://app.daytona.io/api), Authorization: Bearer DAYTONA_API_KEY
---   create  POST   /sandbox {snapshot | buildInfo{dockerfileContent}, env, labels, target, cpu, memory (GB),
---                  disk (GB), autoStopInterval, autoDeleteInterval, networkBlockAll}
---           then GET /sandbox/{id} until state == "started" (100 ms, x1.1 back-off to 1 s)
---   exec    POST   {toolboxProxyUrl}/{id}/process/execute {command, cwd, envs, timeout} -> {exitCode, result}
---   put     POST   {toolboxProxyUrl}/{id}/files/bulk-upload (multipart: field files[0].path = /tmp/...,
---                  part files[0].file), then tar -xf by exec
---   get     POST   {toolboxProxyUrl}/{id}/files/bulk-download {paths = {path}} -> multipart: a part "file"
---                  (the data) or "error" ({message, statusCode, code}); both as the official SDK
---                  (@daytonaio/sdk 0.218) sends them (docs/providers/CONFORMANCE.md)
---   destroy DELETE /sandbox/{id}   (404 = already gone)
---   list    GET    /sandbox?labels=<json>  -> {items, nextCursor}
---   build   GET    /snapshots/cseng-<key16> (active = the cache hit), else the COPY sources' tars to
---                  the object storage of GET /object-storage/push-access (S3, SigV4), then
---                  POST /snapshots {name, buildInfo{dockerfileContent, contextHashes}} and
---                  GET /snapshots/{name} until active; create then starts from {snapshot = name}
---   snapshot GET   /snapshots/{name} (reuse an active one), else POST /sandbox/{id}/snapshot {name},
---                  then GET /snapshots/{name} until state == "active" (warm mode; the artifact is
---                  the snapshot's name, created from with POST /sandbox {snapshot = name})
---   write_files    POST {toolboxProxyUrl}/{id}/files/bulk-upload: every file in one multipart body
---                  (files[i].path, files[i].file), as the SDK's fs.uploadFiles; a 400 {"errors"} is
---                  an error naming each failed path (capabilities.bulk_upload)
---   fork    POST   /sandbox/{id}/fork {} per child (one child per call, the SDK's sandbox.fork), then
---                  GET /sandbox/{child} until started, the children together; after a call whose
---                  answer was lost, GET /sandbox/{id}/forks finds the children it made (capabilities.fork)
---
--- The toolbox runs a command without a shell, so each is sent as a bash -c line of base64
--- words (providers/shared/daytona_wire.lua, with the rest of the wire; the native build is
--- providers/shared/daytona_build.lua). stdout and stderr come back combined (in stdout); a
--- toolbox timeout is HTTP 408 (timed_out = true, code 124).
---
--- Expected failures return nil, message, CODE: an HTTP error status becomes "HTTP_<status>"
--- (the startup arena stops on HTTP_401/HTTP_403), a sandbox that ends in error/build_failed
--- "ESTATE", one that is not started in time "ETIMEDOUT"; transport failures keep cseng.http's
--- codes. A create that fails after the API allocated a sandbox deletes it before returning.
local clock = require('cseng.clock')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.daytona_wire')
local build = require('providers.shared.daytona_build')

local M = {
  name = 'daytona',
  version = '1.0',
  description = 'Daytona sandboxes (REST API + toolbox)',
  remote = true,
  applies_dockerfile = true, -- env_mode native: the task's Dockerfile is built as a snapshot (M.build)
  credentials = { 'DAYTONA_API_KEY' },
  -- allocated resources, per second (secondary sources: docs/providers/daytona.md)
  rates = { vcpu_s = 0.000014, gib_s = 0.0000045, per_create = 0 },
  -- fork: a copy-on-write clone of the sandbox's disk (the SDK's docs), running processes not carried over
  capabilities = { non_root = false, network_policy = true, run_steps = true, warm = true, snapshot = true, fork = true,
    bulk_upload = true },
  -- sandbox ids (a UUID; the OpenAPI spec's example is sandbox123)
  id_format = { pattern = '^[%w][%w_-]*$', example = '0b5e2f1c-7a3d-4e8b-9c1f-2d6a8e4b7c90', max = 128 },
  -- create rate limit for lua/cseng/run/admission.lua: Daytona documents 300-600 creates/minute
  -- by tier; the lower bound, so a run paces itself instead of collecting 429s
  limits = { creates_per_minute = 300 },
}

local DEFAULTS = wire.DEFAULTS
local urlencode, str = adapter.urlencode, adapter.str
local call, api_url, toolbox = wire.call, wire.api_url, wire.toolbox

---@class daytona.client
---@field base string API base URL without trailing slash
---@field key string
---@field target string|nil DAYTONA_TARGET (us/eu)
---@field snapshot string|nil DAYTONA_SNAPSHOT: every sandbox from this snapshot
---@field user string|nil DAYTONA_USER: the create body's user
---@field toolbox_url string|nil DAYTONA_TOOLBOX_URL: overrides the sandbox's toolboxProxyUrl
---@field organization string|nil DAYTONA_ORGANIZATION_ID (X-Daytona-Organization-ID)
---@field request_timeout number
---@field start_timeout number
---@field build_timeout number
---@field snapshot_timeout number DAYTONA_SNAPSHOT_TIMEOUT: warm snapshot until "active"
---@field snapshot_prefix string DAYTONA_SNAPSHOT_PREFIX: warm snapshot names are prefix .. key
---@field shell string

--- Read the settings (cfg first, then the environment through cfg.getenv) and check the
--- credential. Raises a one-line error naming DAYTONA_API_KEY when it is missing; makes no
--- request.
---@param cfg? table {getenv=fn, api_url, api_key, target, snapshot, user, toolbox_url, organization_id,
---                   request_timeout, start_timeout, build_timeout, shell, poll}
---@return daytona.client
function M.connect(cfg)
  cfg = cfg or {}
  local setting = adapter.settings(cfg)
  local key = adapter.credentials('daytona', setting, { { 'api_key', 'DAYTONA_API_KEY', secret = true } })
  local function num(k, var, def)
    local v = tonumber(setting(k, var))
    return v or def
  end
  return {
    base = tostring(setting('api_url', 'DAYTONA_API_URL') or DEFAULTS.api_url):gsub('/+$', ''),
    key = key,
    target = setting('target', 'DAYTONA_TARGET'),
    snapshot = setting('snapshot', 'DAYTONA_SNAPSHOT'),
    user = setting('user', 'DAYTONA_USER'),
    toolbox_url = setting('toolbox_url', 'DAYTONA_TOOLBOX_URL'),
    organization = setting('organization_id', 'DAYTONA_ORGANIZATION_ID'),
    request_timeout = num('request_timeout', nil, DEFAULTS.request_timeout),
    start_timeout = num('start_timeout', 'DAYTONA_START_TIMEOUT', DEFAULTS.start_timeout),
    build_timeout = num('build_timeout', 'DAYTONA_BUILD_TIMEOUT', DEFAULTS.build_timeout),
    snapshot_timeout = num('snapshot_timeout', 'DAYTONA_SNAPSHOT_TIMEOUT', DEFAULTS.snapshot_timeout),
    snapshot_prefix = setting('snapshot_prefix', 'DAYTONA_SNAPSHOT_PREFIX') or DEFAULTS.snapshot_prefix,
    build_mode = setting('build', 'DAYTONA_BUILD'),
    shell = setting('shell', 'DAYTONA_SHELL') or DEFAULTS.shell,
    poll = cfg.poll or { first = DEFAULTS.poll_first, factor = DEFAULTS.poll_factor, max = DEFAULTS.poll_max },
  }
end

--- Create a sandbox and wait until it is started. spec: {image, snapshot, labels, env, workdir,
--- network, cpus, memory_mb, disk_mb, ttl_seconds}. sb.http_timings holds the create call's
--- timings, sb.ready_seconds the time from the create call to "started".
---@return table|nil sb, string? err, string? code
function M.create(client, spec)
  spec = spec or {}
  local t0 = clock.now()
  local body = wire.create_body(client, spec)
  local data, res, code, raw = adapter.post_created(call, client, api_url(client, '/sandbox'), { json = body }, 'id',
    'daytona: POST /sandbox')
  if not data then return nil, res, code, raw end -- raw: the response (admission reads Retry-After)
  local sb = wire.sandbox_record(data, spec, body, res)
  -- the sandbox exists from here on: whatever ends the wait (a terminal state, the deadline, a
  -- failed poll, or the trial's cancellation raised from inside it) deletes it before returning
  local ok, werr, wcode = pcall(wire.wait_started, client, sb, data, body.buildInfo and client.build_timeout or client.start_timeout, t0)
  if not ok or werr then
    pcall(M.destroy, client, sb)
    if not ok then error(werr, 0) end -- ECANCELED and misuse propagate
    return nil, werr, wcode
  end
  sb.state = 'started'
  sb.code_path = 'POST /sandbox, commands through the toolbox (process/execute)'
  sb.ready_seconds = (clock.now() - t0) / 1e9
  return sb
end
local function ceil_int(x) return math.tointeger(math.ceil(x)) end

--- Run a shell command. opts: {timeout (s, default 600), cwd, env, stdin, tail_bytes}.
--- Returns {code, stdout (stdout and stderr combined), stderr = '', elapsed, timed_out,
--- http_timings} or nil, message, CODE.
---@return table|nil res, string? err, string? code
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local timeout = opts.timeout or DEFAULTS.exec_timeout
  local env = util.merge(sb.env, opts.env)
  local cwd = opts.cwd or sb.workdir
  local stdin_path, serr, scode = adapter.stdin_upload(wire.upload, client, sb, opts.stdin)
  if stdin_path == false then return nil, serr, scode end
  local command = wire.wrap_command(client, cmd, env, cwd, stdin_path)
  local body = { command = command, timeout = math.max(1, ceil_int(timeout)) }
  if cwd then body.cwd = cwd end
  if next(env) then body.envs = env end
  local t0 = clock.now()
  -- the HTTP timeout leaves the toolbox room to report its own timeout (408)
  local data, res, code, failed = call(client, 'POST', toolbox(client, sb, '/process/execute'),
    { json = body, timeout = timeout + 30 })
  local elapsed = (clock.now() - t0) / 1e9
  if not data then
    if code == 'HTTP_408' then -- the toolbox killed the command at its timeout
      return { code = 124, stdout = '', stderr = failed and wire.message(failed.body) or tostring(res),
               elapsed = elapsed, timed_out = true, http_timings = failed and failed.timings }
    end
    return nil, res, code
  end
  if type(data) ~= 'table' then return nil, 'daytona: exec: the response is not an object', 'EPROTO' end
  local out = str(data.result) or ''
  local cap = opts.tail_bytes or DEFAULTS.tail_bytes
  return {
    code = adapter.int(data.exitCode) or -1,
    stdout = #out > cap and out:sub(-cap) or out,
    stderr = '',
    stdout_dropped = #out > cap and (#out - cap) or nil,
    elapsed = elapsed,
    timed_out = false,
    http_timings = res.timings,
  }
end
--- Unpack a tar (bytes, optionally gzipped) into a directory of the sandbox: the archive is
--- uploaded to /tmp, then extracted there by exec and removed.
--- (The toolbox returns stdout and stderr combined, in stdout.)
M.put = adapter.put_via(M, wire.upload, { output = 'stdout' })

--- Read a file of the sandbox.
---@return string|nil data, string? err, string? code
function M.get(client, sb, path)
  local url = toolbox(client, sb, '/files/bulk-download')
  local data, res, code = call(client, 'POST', url,
    { json = { paths = { path } }, raw = true, headers = { Accept = 'multipart/form-data' }, timeout = 300 })
  if not data then
    if code == 'HTTP_404' or code == 'HTTP_400' then return nil, path .. ': ' .. tostring(res), 'ENOENT' end
    return nil, res, code
  end
  local parts, why = adapter.multipart_parts(type(data) == 'string' and data or '', res.headers['content-type'])
  if not parts then return nil, 'daytona: POST ' .. url .. ': ' .. why, 'EPROTO' end
  for _, p in ipairs(parts) do
    if p.name == 'file' and (p.filename == path or #parts == 1) then return p.data end
    if p.name == 'error' then
      local ok, e = pcall(cjson.decode, p.data)
      e = ok and type(e) == 'table' and e or {}
      local status = math.tointeger(e.statusCode)
      local msg = string.format('%s: %s', path, str(e.message) or adapter.snippet(p.data))
      if status == 404 or e.code == 'FILE_NOT_FOUND' or e.code == 'NOT_FOUND' then return nil, msg, 'ENOENT' end
      return nil, 'daytona: ' .. msg, status and ('HTTP_' .. status) or 'EPROTO'
    end
  end
  return nil, 'daytona: POST ' .. url .. ': no part for ' .. path .. ' in the answer', 'EPROTO'
end
--- Delete a sandbox; one that is already gone (404) counts as deleted.
---@return true|nil ok, string? err, string? code
function M.destroy(client, sb)
  return adapter.deleted(call(client, 'DELETE', api_url(client, '/sandbox/' .. urlencode(sb.id))))
end

--- Sandboxes whose labels include filter.labels: {{id, labels, created, state}}. Pages are
--- followed (nextCursor), at most 50 of 100.
function M.list(client, filter)
  local labels = filter and filter.labels
  local out, cursor = {}, nil
  for _ = 1, 50 do
    local q = { 'limit=100' }
    if labels and next(labels) then q[#q + 1] = 'labels=' .. urlencode(jsonl.encode(labels)) end
    if cursor then q[#q + 1] = 'cursor=' .. urlencode(cursor) end
    local data, err, code = call(client, 'GET', api_url(client, '/sandbox?' .. table.concat(q, '&')))
    if not data then return nil, err, code end
    local items = type(data) == 'table' and (data.items or data) or {}
    for _, s in ipairs(type(items) == 'table' and items or {}) do
      if type(s) == 'table' and type(s.id) == 'string' then
        local match = true
        for k, v in pairs(labels or {}) do
          if type(s.labels) ~= 'table' or s.labels[k] ~= v then match = false end
        end
        if match then
          out[#out + 1] = { id = s.id, labels = type(s.labels) == 'table' and s.labels or {},
                            created = str(s.createdAt), state = str(s.state) }
        end
      end
    end
    cursor = type(data) == 'table' and str(data.nextCursor) or nil
    if not cursor or cursor == '' then break end
  end
  return out
end
--- What the run records as the runtime.
function M.runtime(client)
  return 'daytona (' .. client.base .. (client.target and (', target ' .. client.target) or '') .. ')'
end
--- Build the task's recipe as a snapshot named cseng-<key16> (POST /snapshots with buildInfo:
--- the full Dockerfile, FROM set to the recipe's base, and the hashes of its COPY sources
--- uploaded to Daytona's object storage; providers/shared/daytona_build.lua), then wait until it
--- is active. A snapshot of that name that exists is the cache hit. Returns {image, layer (the
--- snapshot's name, what create starts from), cache_hit, snapshot}.
M.build = build.build

--- How the environment is made: a native build (a snapshot from the task's Dockerfile), unless
--- every sandbox comes from a configured snapshot (DAYTONA_SNAPSHOT) or DAYTONA_BUILD=replay.
function M.env_mode(client)
  if client.snapshot or client.build_mode == 'replay' then return 'replay' end
  return 'native'
end
--- Warm mode: turn a prepared (started) sandbox into a snapshot named after the task's content
--- key, and return its name (what create takes as spec.warm_artifact). A snapshot of that name
--- that is already active is reused without snapshotting again (same key = same content); one
--- still being made is waited for. Snapshots count against the organization's quota (about
--- 500) and are not deleted here: `cseng cleanup` does not touch them.
---@return string|nil name, string? err, string? code
function M.snapshot(client, sb, key, opts)
  local name = wire.snapshot_name(client, key)
  local snap, err, code = false, nil, nil
  if opts and opts.fresh then -- a new snapshot of the sandbox as it is now: its name is made unique
    name = name .. '-' .. crypto.hex(crypto.random_bytes(4))
  else
    snap, err, code = wire.get_snapshot(client, name)
  end
  if snap == nil then return nil, err, code end
  if not snap then
    local data
    data, err, code = call(client, 'POST', api_url(client, '/sandbox/' .. urlencode(sb.id) .. '/snapshot'),
      { json = { name = name } })
    if not data then return nil, err, code end -- names POST /sandbox/{id}/snapshot and the status
  end
  local ok, werr, wcode = wire.wait_snapshot(client, name, snap or nil)
  if not ok then return nil, werr, wcode end
  return name
end

--- An active snapshot made earlier for the same content key (the runner then skips preparing).
function M.find_artifact(client, key)
  local name = wire.snapshot_name(client, key)
  local snap = wire.get_snapshot(client, name)
  if snap and str(snap.state) == 'active' then return name end
  return nil
end

--- Remove a snapshot (an artifact: its name): GET /snapshots/{name} for its id, then DELETE
--- /snapshots/{id}. One already gone is success.
---@return true|nil ok, string? err, string? code
function M.delete_artifact(client, id)
  local snap, err, code = wire.get_snapshot(client, id)
  if snap == false then return true end
  if not snap then return nil, err, code end
  local sid = str(snap.id)
  if not sid then return nil, 'daytona: GET /snapshots/' .. id .. ': no id', 'EPROTO' end
  return adapter.deleted(call(client, 'DELETE', api_url(client, '/snapshots/' .. urlencode(sid))))
end

--- Write files ({{path, data, mode}}) in one toolbox bulk upload; modes are set afterwards by one
--- chmod (the upload form has no mode). A 400 answer (some files failed: {"errors": [...]}) is
--- returned as nil, "...: HTTP 400: <path>: <why>; ...", "HTTP_400": never a partial success.
---@return true|nil ok, string? err, string? code
function M.write_files(client, sb, files)
  if #files == 0 then return true end
  local ok, err, code = wire.bulk_upload(client, sb, files)
  if not ok then return nil, err, code end
  return adapter.chmod_files(M, client, sb, files, { output = 'stdout' })
end

--- Fork sb into n sandboxes (Daytona makes one per POST /sandbox/{id}/fork: the calls go one after
--- another, then every child is waited for until started, together, as the SDK's fork waits for
--- its one). Each child holds sb's disk as it was at its call (a copy-on-write clone); processes
--- are not carried over. Returns the n children, or nil, message, CODE and the children that
--- exist (started or not: the caller records and destroys them). After a call that failed without
--- a clear refusal (a lost answer, a 5xx), GET /sandbox/{id}/forks adds the children it made.
---@return table[]|nil kids, string? err, string? code, table[]? made
function M.fork(client, sb, n, spec)
  spec = spec or {}
  local t0 = clock.now()
  local made, failures, tasks = {}, {}, {}
  local function run()
    local unsure = false
    for i = 1, n do
      local data, res, code = wire.fork_one(client, sb)
      if data then
        local child = wire.sandbox_record(data, spec, {}, res)
        child.fork_of = sb.id
        child.code_path = 'POST /sandbox/{id}/fork, commands through the toolbox (process/execute)'
        child.allocation.fork_of = sb.id
        made[#made + 1] = { sb = child, data = data }
        sb.forks = sb.forks or {}
        sb.forks[child.id] = true
      else
        failures[#failures + 1] = string.format('child %d: %s', i, tostring(res))
        failures.code = failures.code or code
        if not tostring(code):match('^HTTP_4') then unsure = true end
      end
    end
    if unsure then -- children whose answer never came: the parent's list of forks names them (those
      -- of earlier forks of sb, which sb.forks remembers, are not this call's)
      sb.forks = sb.forks or {}
      for _, d in ipairs(wire.forks(client, sb) or {}) do
        if type(d) == 'table' and type(d.id) == 'string' and not sb.forks[d.id] and d.state ~= 'destroyed' then
          sb.forks[d.id] = true
          made[#made + 1] = { sb = wire.sandbox_record(d, spec, {}, {}), data = d, lost = true }
        end
      end
    end
    for i, m in ipairs(made) do
      if not m.lost then
        tasks[i] = task.spawn(function() return wire.wait_started(client, m.sb, m.data, client.start_timeout, t0) end)
      end
    end
    for i, m in ipairs(made) do
      if tasks[i] then
        local ok, werr, wcode = tasks[i]:join()
        if not ok then error(werr, 0) end
        if werr then
          failures[#failures + 1] = tostring(werr)
          failures.code = failures.code or wcode
        else
          m.sb.state = 'started'
          m.sb.ready_seconds = (clock.now() - t0) / 1e9
        end
      end
    end
  end
  local ok, e = pcall(run)
  if not ok then -- cancelled or misused: no child outlives the call unrecorded
    for _, t in pairs(tasks) do t:cancel() end
    for _, m in ipairs(made) do pcall(M.destroy, client, m.sb) end
    error(e, 0)
  end
  local kids, started = {}, 0
  for _, m in ipairs(made) do
    kids[#kids + 1] = m.sb
    if m.sb.state == 'started' then started = started + 1 end
  end
  if #failures == 0 then return kids end
  return nil, string.format('daytona: fork of %s: %d of %d children failed: %s', sb.id, n - started, n,
    table.concat(failures, '; ')), started == 0 and failures.code or 'EFORK', kids
end

return M
