--- Daytona's wire (for lua/providers/daytona.lua and its specs): the REST API's calls and error
--- bodies, the toolbox's URLs, the create body and the wait until a sandbox is started, the
--- command line the toolbox runs, the upload form, and the snapshots warm mode and builds wait
--- for (specs: shared/specs/daytona-openapi.yaml and daytona-toolbox-swagger.yaml).
---
--- The toolbox runs `command` without a shell: it splits it on spaces, honouring '...' and "..."
--- quotes (no escapes), and execs the words. So every command is sent as
---   bash -c 'export K="$(echo <b64> | base64 -d)"; cd "$(echo <b64> | base64 -d)" && eval "$(echo <b64> | base64 -d)"'
--- where only base64 text sits inside the quotes; the shell and the environment are ours, and
--- the command's stdin is the daemon's (/dev/null), as on the local provider.
local task = require('cseng.task')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')

local wire = {}

--- The settings' defaults.
wire.DEFAULTS = {
  api_url = 'https://app.daytona.io/api',
  toolbox_url = 'https://proxy.app.daytona.io/toolbox',
  request_timeout = 60,  -- control-plane calls
  start_timeout = 60,    -- create until "started" (the SDK's default)
  build_timeout = 900,   -- the same when Daytona builds an image first (buildInfo)
  exec_timeout = 600,
  snapshot_timeout = 900, -- POST /sandbox/{id}/snapshot until the snapshot is "active"
  snapshot_prefix = 'cseng-',
  auto_stop_min = 15,    -- used when the spec has no ttl_seconds
  poll_first = 0.1, poll_factor = 1.1, poll_max = 1.0,
  shell = 'bash',
  tail_bytes = 1 << 20,
}

local DEFAULTS = wire.DEFAULTS

-- States after which a sandbox will never start (SDK: error and build_failed are terminal).
local TERMINAL = { error = true, build_failed = true, destroyed = true, destroying = true }
local urlencode, str = adapter.urlencode, adapter.str

--- The error text of a response: Daytona answers {"statusCode", "message", "error"}; the toolbox's
--- bulk upload {"errors": ["<path>: <why>", ...]} (one per file that failed; the others were written).
wire.message = adapter.message_from { 'message', 'errors', 'error' }

local function headers_for(client, extra)
  local h = { Authorization = 'Bearer ' .. client.key, Accept = 'application/json',
              ['X-Daytona-Source'] = 'cseng' }
  if client.organization then h['X-Daytona-Organization-ID'] = client.organization end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

--- One call. o: {json, body, headers, timeout, raw (do not decode)}. Returns data (decoded JSON,
--- true for an empty body, the raw body with o.raw) and the response, or nil, message, CODE, res.
function wire.call(client, method, url, o)
  o = o or {}
  return adapter.request('daytona', method, url, { headers = headers_for(client, o.headers), json = o.json,
    body = o.body, raw = o.raw, timeout = o.timeout or client.request_timeout, message = wire.message })
end

--- The URL of an API path.
function wire.api_url(client, path) return client.base .. path end

--- The URL of a toolbox path of a sandbox (DAYTONA_TOOLBOX_URL, else the sandbox's toolboxProxyUrl).
function wire.toolbox(client, sb, path)
  local base = (client.toolbox_url or sb.toolbox_url or DEFAULTS.toolbox_url):gsub('/+$', '')
  return base .. '/' .. urlencode(sb.id) .. path
end

local call, api_url = wire.call, wire.api_url

-- ---- create --------------------------------------------------------------------------------

local function ceil_int(x) return math.tointeger(math.ceil(x)) end

--- The POST /sandbox body for a spec.
function wire.create_body(client, spec)
  local body = {
    labels = util.copy(spec.labels),
    env = util.copy(spec.env),
    networkBlockAll = not spec.network,
  }
  -- warm mode: the snapshot the adapter's snapshot made (its name) wins over a configured one
  local snapshot = spec.warm_artifact or spec.layer or spec.snapshot or client.snapshot
  if snapshot then
    body.snapshot = snapshot
  elseif spec.image then
    -- there is no image field: an image is a one-line Dockerfile Daytona builds (and caches);
    -- no contextHashes (cjson would send an empty list as {}, which the spec refuses)
    body.buildInfo = { dockerfileContent = 'FROM ' .. spec.image .. '\n' }
  end
  if client.target then body.target = client.target end
  if client.user then body.user = client.user end
  if spec.cpus then body.cpu = math.max(1, ceil_int(spec.cpus)) end
  if spec.memory_mb then body.memory = math.max(1, ceil_int(spec.memory_mb / 1024)) end
  if spec.disk_mb then body.disk = math.max(1, ceil_int(spec.disk_mb / 1024)) end
  -- orphan safety: stop after the trial's whole budget of inactivity, delete on stop
  local ttl_min = spec.ttl_seconds and math.max(1, ceil_int(spec.ttl_seconds / 60)) or DEFAULTS.auto_stop_min
  body.autoStopInterval = ttl_min
  body.autoDeleteInterval = 0
  return body
end

--- The sandbox of a create's answer.
function wire.sandbox_record(data, spec, body, res)
  return {
    id = data.id,
    name = str(data.name),
    toolbox_url = str(data.toolboxProxyUrl),
    labels = spec.labels or {},
    env = spec.env,
    workdir = spec.workdir,
    image = spec.image,
    snapshot = body.snapshot,
    state = str(data.state),
    allocation = {
      cpus = tonumber(data.cpu), memory_gb = tonumber(data.memory), disk_gb = tonumber(data.disk),
      target = str(data.target) or body.target, snapshot = str(data.snapshot) or body.snapshot,
    },
    http_timings = res.timings,
  }
end

--- Poll GET /sandbox/{id} until "started" (the SDK's 100 ms, x1.1 back-off to 1 s). Returns
--- nil when started, else message, CODE; transient poll failures (timeouts, resets, 5xx) retry.
function wire.wait_started(client, sb, data, limit, t0)
  local delay = client.poll.first
  local state, reason = sb.state, str(data.errorReason)
  while state ~= 'started' do
    if state and TERMINAL[state] then
      return string.format('daytona: sandbox %s is %s%s', sb.id, state, reason and (': ' .. reason) or ''), 'ESTATE'
    end
    if (clock.now() - t0) / 1e9 > limit then
      return string.format('daytona: sandbox %s not started after %s s (state %s)', sb.id, limit, tostring(state)),
        'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.poll.factor, client.poll.max)
    local cur, err, gcode = call(client, 'GET', api_url(client, '/sandbox/' .. urlencode(sb.id)))
    if not cur then
      if gcode ~= 'ETIMEDOUT' and gcode ~= 'ECONNRESET' and not tostring(gcode):match('^HTTP_5') then
        return err, gcode
      end
    elseif type(cur) == 'table' then
      state, reason = str(cur.state), str(cur.errorReason)
      sb.toolbox_url = str(cur.toolboxProxyUrl) or sb.toolbox_url
    end
  end
  return nil
end

-- ---- exec and files ------------------------------------------------------------------------

local function b64(s) return crypto.base64(s) end

--- The command string sent to the toolbox for a shell command.
--- Only base64 text and fixed words appear inside its single quotes.
function wire.wrap_command(client, cmd, env, cwd, stdin_path)
  local parts = {}
  for _, k in ipairs(util.keys(env or {})) do
    if not tostring(k):match('^[%a_][%w_]*$') then
      errors.raise(errors.EINVAL, 'daytona: invalid environment variable name ' .. string.format('%q', tostring(k)))
    end
    parts[#parts + 1] = string.format('export %s="$(echo %s | base64 -d)"', k, b64(tostring(env[k])))
  end
  local run = string.format('eval "$(echo %s | base64 -d)"', b64(cmd))
  if stdin_path then run = run .. ' < ' .. stdin_path end
  if cwd then run = string.format('cd "$(echo %s | base64 -d)" && %s', b64(cwd), run) end
  parts[#parts + 1] = run
  if stdin_path then parts[#parts + 1] = 'rc=$?; rm -f ' .. stdin_path .. '; exit $rc' end
  return (client.shell or DEFAULTS.shell) .. " -c '" .. table.concat(parts, '; ') .. "'"
end

-- The toolbox's UploadFiles form (what the SDK's fs.uploadFiles sends): for each file i (from 0),
-- the destination as the field files[i].path, then the data as the part files[i].file
-- (filename = the destination).
local function upload_form(files)
  local parts = {}
  for i, f in ipairs(files) do
    parts[#parts + 1] = { name = 'files[' .. (i - 1) .. '].path', data = f.path }
    parts[#parts + 1] = { name = 'files[' .. (i - 1) .. '].file', filename = f.path, content_type = 'application/octet-stream',
      data = f.data }
  end
  return adapter.form(parts)
end

--- Write files ({{path, data}}, absolute paths) to the sandbox in one POST /files/bulk-upload.
--- The daemon writes each file it can and answers 400 {"errors": ["<path>: <why>"...]} when any
--- failed: that answer is an error naming the status and every failed path (the files it did
--- write stay), never a success.
---@return true|nil ok, string? err, string? code
function wire.bulk_upload(client, sb, files)
  local body, ctype = upload_form(files)
  local ok, err, code = call(client, 'POST', wire.toolbox(client, sb, '/files/bulk-upload'),
    { body = body, headers = { ['Content-Type'] = ctype }, timeout = 300, raw = true })
  if not ok then
    if #files > 1 and tostring(code):match('^HTTP_') then err = err .. ' (a bulk upload of ' .. #files .. ' files)' end
    return nil, err, code
  end
  return true
end

--- Write bytes to a file of the sandbox (the toolbox's bulk upload of one file).
function wire.upload(client, sb, path, data)
  return wire.bulk_upload(client, sb, { { path = path, data = data } })
end

-- ---- forks -------------------------------------------------------------------------------

--- POST /sandbox/{id}/fork {} (ForkSandbox: only an optional name, which the SDK leaves out): one
--- child, answered as a Sandbox while it is being made. Returns the answer (data, res) or nil,
--- message, CODE.
function wire.fork_one(client, parent)
  return adapter.post_created(call, client, api_url(client, '/sandbox/' .. urlencode(parent.id) .. '/fork'), { json = {} },
    'id', 'daytona: POST /sandbox/' .. parent.id .. '/fork')
end

--- GET /sandbox/{id}/forks: the parent's children (Sandbox objects), or nil, message, CODE.
function wire.forks(client, parent)
  local data, err, code = call(client, 'GET', api_url(client, '/sandbox/' .. urlencode(parent.id) .. '/forks'))
  if not data then return nil, err, code end
  if type(data) ~= 'table' then return nil, 'daytona: GET /sandbox/' .. parent.id .. '/forks: not a list', 'EPROTO' end
  return data
end

-- ---- snapshots ---------------------------------------------------------------------------

-- Snapshot states that will never become "active" (SnapshotState in the OpenAPI spec).
local SNAPSHOT_TERMINAL = { error = true, build_failed = true, removing = true, inactive = true }

--- The snapshot name for a task content key: prefix .. key, in the
--- characters Daytona accepts in names.
function wire.snapshot_name(client, key)
  return ((client.snapshot_prefix or DEFAULTS.snapshot_prefix) .. tostring(key)):gsub('[^%w%-_.]', '-')
end

--- GET /snapshots/{name}: the SnapshotDto, or false when there is none (404), or nil, err, code.
function wire.get_snapshot(client, name)
  local data, err, code = call(client, 'GET', api_url(client, '/snapshots/' .. urlencode(name)))
  if not data then
    if code == 'HTTP_404' then return false end
    return nil, err, code
  end
  if type(data) ~= 'table' then return nil, 'daytona: GET /snapshots/' .. name .. ': not an object', 'EPROTO' end
  return data
end

--- Poll the snapshot until "active" (the sandbox poll's back-off). Returns true, or nil, err, CODE;
--- transient poll failures retry, as for the sandbox.
function wire.wait_snapshot(client, name, snap)
  local t0, delay = clock.now(), client.poll.first
  while true do
    local state = snap and str(snap.state)
    if state == 'active' then return true end
    if state and SNAPSHOT_TERMINAL[state] then
      return nil, string.format('daytona: snapshot %s is %s%s', name, state,
        str(snap.errorReason) and (': ' .. snap.errorReason) or ''), 'ESNAPSHOT'
    end
    if (clock.now() - t0) / 1e9 > client.snapshot_timeout then
      return nil, string.format('daytona: snapshot %s not active after %s s (state %s)', name,
        client.snapshot_timeout, tostring(state)), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.poll.factor, client.poll.max)
    local cur, err, code = wire.get_snapshot(client, name)
    if cur == nil then
      if code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then
        return nil, err, code
      end
    else
      snap = cur or nil -- false (404): not visible yet
    end
  end
end

return wire
