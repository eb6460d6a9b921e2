--- Runloop's wire (for lua/providers/runloop.lua and its specs): the REST calls of
--- @runloop/api-client 1.32 (x-request-id, error bodies), the create body and the long polls
--- until a devbox runs, the command line execute takes and the polls until an execution
--- completes, the upload form, and a disk snapshot's status.
---
--- The execute API takes a shell command line and no cwd, env or stdin, so every command is
---   cd <cwd> && exec env K=V... timeout -s KILL <N> bash -c <cmd> [< stdin file]
--- and a run killed at its deadline (exit 137 after >= N s) is timed_out = true, code 124.
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')

local wire = {}

--- The settings' defaults.
wire.DEFAULTS = {
  base_url = 'https://api.runloop.ai', request_timeout = 60, exec_timeout = 600, grace = 60,
  boot_timeout = 600, snapshot_wait = 900, build_timeout = 1800, keep_alive = 45 * 60, last_n = 10000, tail_bytes = 1 << 20,
}

local DEFAULTS = wire.DEFAULTS

-- The named sizes (cpu, GiB): the smallest that fits the task is asked for.
wire.SIZES = { { 'X_SMALL', 0.5, 1 }, { 'SMALL', 1, 2 }, { 'MEDIUM', 2, 4 }, { 'LARGE', 2, 8 },
                { 'X_LARGE', 4, 16 }, { 'XX_LARGE', 8, 32 } }local SIZES = wire.SIZES
-- Devbox states: still booting; gone for good.
wire.BOOTING = { provisioning = true, initializing = true, queued = true, scheduled = true, resuming = true }
wire.GONE = { shutdown = true, failure = true }
local BOOTING = wire.BOOTING

local urlencode, str = adapter.urlencode, adapter.str

-- Runloop's error bodies: {"message": ...} or {"error": ...}.
local api_message = adapter.message_from { 'message', 'error', 'error.message' }

--- A UUIDv7 (48-bit Unix ms, version 7, variant 10, random rest): the execute call's
--- command_id, as the SDK makes one.
function wire.uuidv7()
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

--- One call. o: {json, body, content_type, accept, query = {{k, v}...}, raw, timeout}.
function wire.call(client, method, path, o)
  o = o or {}
  local headers = { Authorization = 'Bearer ' .. client.key, Accept = o.accept or 'application/json' }
  local body = o.body
  -- as the SDK: JSON on every call but GET (a bodiless POST too: curl would say form-urlencoded)
  if o.content_type then headers['Content-Type'] = o.content_type
  elseif method ~= 'GET' then headers['Content-Type'] = 'application/json' end
  if o.json ~= nil then body = jsonl.encode(o.json) end
  if method ~= 'GET' then headers['x-request-id'] = 'cseng-' .. wire.uuidv7() end
  local q = {}
  for _, kv in ipairs(o.query or {}) do q[#q + 1] = kv[1] .. '=' .. urlencode(kv[2]) end
  local url = client.base .. path .. (#q > 0 and ('?' .. table.concat(q, '&')) or '')
  return adapter.request('runloop', method, url, {
    headers = headers, body = body, raw = o.raw, timeout = o.timeout or client.request_timeout,
    what = method .. ' ' .. path, message = api_message,
  })
end

local call = wire.call

--- /v1/devboxes/{id}[rest].
function wire.devbox_path(id, rest) return '/v1/devboxes/' .. urlencode(id) .. (rest or '') end
local devbox_path = wire.devbox_path

-- ---- create --------------------------------------------------------------------------------

--- The smallest named size with at least cpus and memory_mb (nil when neither is given).
function wire.size_for(cpus, memory_mb)
  if not cpus and not memory_mb then return nil end
  for _, s in ipairs(SIZES) do
    if s[2] >= (cpus or 0) and s[3] * 1024 >= (memory_mb or 0) then return s[1] end
  end
  return SIZES[#SIZES][1]
end

--- The POST /v1/devboxes body for a spec.
function wire.create_body(client, spec)
  local body = {}
  local snap = spec.warm_artifact or client.snapshot
  if snap then body.snapshot_id = snap
  elseif spec.layer then body.blueprint_id = spec.layer -- the build's blueprint
  elseif client.blueprint_id then body.blueprint_id = client.blueprint_id
  elseif client.blueprint_name then body.blueprint_name = client.blueprint_name end
  if spec.labels and next(spec.labels) then body.metadata = util.copy(spec.labels) end
  if spec.env and next(spec.env) then body.environment_variables = util.copy(spec.env) end
  local lp = { keep_alive_time_seconds = spec.ttl_seconds and math.tointeger(math.ceil(spec.ttl_seconds)) or DEFAULTS.keep_alive }
  lp.resource_size_request = client.size or wire.size_for(spec.cpus, spec.memory_mb) or 'SMALL'
  if client.user == 'root' then lp.user_parameters = { username = 'root', uid = 0 } end
  body.launch_parameters = lp
  return body
end

--- Wait (long polls) until a devbox leaves its booting states; returns its DevboxView.
function wire.await_running(client, id, deadline)
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

-- ---- exec ----------------------------------------------------------------------------------

--- The shell command line sent for a command. o: {cwd, env, timeout, stdin_path}.
function wire.wrap_command(cmd, o)
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

--- Run a command line (wire.wrap_command's): POST execute (answered completed or not), then
--- POST .../executions/{eid}/wait_for_status (408: asked again) until completed; past timeout +
--- client.grace, POST .../kill. Returns {code, stdout, stderr, timed_out, elapsed, execution_id,
--- stdout_truncated, stderr_truncated} or nil, message, CODE.
function wire.execute(client, sb, line, timeout, tail_bytes)
  local query = { { 'last_n', tostring(client.last_n) } }
  local t0 = clock.now()
  local deadline = t0 + (timeout + client.grace) * 1e9
  local r, err, code = call(client, 'POST', devbox_path(sb.id, '/execute'),
    { json = { command = line, command_id = wire.uuidv7() }, query = query, timeout = client.request_timeout + 30 })
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
  local cap = tail_bytes or DEFAULTS.tail_bytes
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

--- Write bytes to a file of the devbox (upload_file).
function wire.upload(client, sb, path, data)
  local body, ctype = upload_form(path, data)
  local ok, err, code = call(client, 'POST', devbox_path(sb.id, '/upload_file'),
    { body = body, content_type = ctype, timeout = 600 })
  if not ok then return nil, err, code end
  return true
end

-- ---- snapshots -----------------------------------------------------------------------------

--- The status of a disk snapshot: {status = in_progress|complete|error|deleted, snapshot, error_message}.
function wire.snapshot_status(client, id)
  return call(client, 'GET', '/v1/devboxes/disk_snapshots/' .. urlencode(id) .. '/status')
end

return wire
