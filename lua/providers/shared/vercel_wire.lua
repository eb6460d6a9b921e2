--- Vercel Sandbox's wire (for lua/providers/vercel.lua and its specs): the REST calls of the
--- @vercel/sandbox 3.5 SDK (teamId on every call, error bodies), the NDJSON stream a command
--- answers with, parsed as the bytes arrive, the create endpoint and body, the bash -c script a
--- command is sent as, file writes (a gzipped tar) and a snapshot's state.
---
--- Commands are exec'd without a shell by the API, so every command is
---   bash -c 'exec timeout -s KILL <N> bash -c <cmd> [< stdin file]'
--- and a run killed at its deadline (exit 137 after >= N s) is timed_out = true, code 124; the
--- body's own timeout (N + 30 s) is a backstop. Output is kept as tails (adapter.tail_buffer).
local http = require('cseng.http')
local clock = require('cseng.clock')
local archive = require('cseng.archive')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local adapter = require('providers.shared.adapter')

local wire = {}

--- The settings' defaults.
wire.DEFAULTS = {
  api_url = 'https://vercel.com/api', runtime = 'python3.13', request_timeout = 60,
  exec_timeout = 600, stream_grace = 60, backstop = 30, sandbox_timeout_ms = 45 * 60 * 1000,
  tail_bytes = 1 << 20, snapshot_wait = 600,
}

local DEFAULTS = wire.DEFAULTS

local urlencode, str = adapter.urlencode, adapter.str

-- Vercel answers errors as {"error": {"code", "message"}}.
local api_message = adapter.message_from { 'error.message', 'error', 'message' }

local function url_for(client, path, query)
  local q = 'teamId=' .. urlencode(client.team)
  for _, kv in ipairs(query or {}) do q = q .. '&' .. kv[1] .. '=' .. urlencode(kv[2]) end
  return client.base .. path .. '?' .. q
end

-- What the SDK sends on every call (its user agent aside): the token and a JSON content type.
local function headers(client, extra)
  local h = { Authorization = 'Bearer ' .. client.token, ['Content-Type'] = 'application/json',
              Accept = 'application/json' }
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

--- One call. o: {json, body, headers, query = {{k, v}...}, raw, timeout}.
function wire.call(client, method, path, o)
  o = o or {}
  -- jsonl.encode: an empty jsonl.array() is [] (ports), an empty table {} (env)
  return adapter.request('vercel', method, url_for(client, path, o.query), {
    headers = headers(client, o.headers), body = o.json ~= nil and jsonl.encode(o.json) or o.body, raw = o.raw,
    timeout = o.timeout or client.request_timeout, what = method .. ' ' .. path, message = api_message,
  })
end

local call = wire.call

--- An NDJSON request: on_record(value) for each line as it arrives. Returns the response, or
--- nil, message, CODE (HTTP statuses outside 2xx as HTTP_<status>, with the body's message).
function wire.ndjson(client, method, path, o, on_record)
  local what = method .. ' ' .. path
  local pending, errbody, bad = '', {}, nil
  local hdrs, body = headers(client), jsonl.encode(o.json)
  hdrs.Accept = 'application/x-ndjson, application/json'
  local res, err, code = http.request { method = method, url = url_for(client, path, o.query), headers = hdrs,
    body = body, timeout = o.timeout or client.request_timeout,
    stream = function(chunk)
      errbody[#errbody + 1] = #errbody < 64 and chunk or nil
      pending = pending .. chunk
      while true do
        local nl = pending:find('\n', 1, true)
        if not nl then break end
        local line = pending:sub(1, nl - 1)
        pending = pending:sub(nl + 1)
        if line:find('%S') then
          local ok, v = pcall(cjson.decode, line)
          if ok and type(v) == 'table' then on_record(v) else bad = bad or line end
        end
      end
      return true
    end }
  if not res then return nil, secrets.redact('vercel: ' .. what .. ': ' .. tostring(err)), code end
  if res.status < 200 or res.status > 299 then
    return nil, secrets.redact(string.format('vercel: %s: HTTP %d: %s', what, res.status, api_message(table.concat(errbody)))),
      'HTTP_' .. res.status
  end
  if pending:find('%S') then
    local ok, v = pcall(cjson.decode, pending)
    if ok and type(v) == 'table' then on_record(v) else bad = bad or pending end
  end
  if bad then return nil, 'vercel: ' .. what .. ': a stream line is not JSON: ' .. adapter.snippet(bad), 'EPROTO' end
  return res
end

--- /v2/sandboxes/sessions/{id}[rest]: a sandbox's session (sb.id is the session id).
function wire.session_path(sb, rest) return '/v2/sandboxes/sessions/' .. urlencode(sb.id) .. (rest or '') end
local session_path = wire.session_path

-- ---- create --------------------------------------------------------------------------------

--- The create endpoint and body for a spec: /v2/sandboxes with a
--- runtime, /v3/sandboxes with an image or a snapshot source (the SDK sends a snapshot source
--- with neither runtime nor image, so to /v3).
---@return string path, table body
function wire.create_body(client, spec)
  local body = { projectId = client.project, ports = jsonl.array(), persistent = false }
  local vcpus = client.vcpus or (spec.cpus and math.max(1, math.tointeger(math.ceil(spec.cpus))))
  if vcpus then body.resources = { vcpus = vcpus } end
  body.timeout = spec.ttl_seconds and math.tointeger(math.ceil(spec.ttl_seconds)) * 1000 or DEFAULTS.sandbox_timeout_ms
  if spec.labels and next(spec.labels) then body.tags = util.copy(spec.labels) end
  local snap = spec.warm_artifact or client.snapshot
  if snap then
    body.source = { type = 'snapshot', snapshotId = snap }
    return '/v3/sandboxes', body
  end
  if client.image then
    body.image = client.image
    return '/v3/sandboxes', body
  end
  body.runtime = spec.runtime or client.runtime
  return '/v2/sandboxes', body
end

-- ---- exec ----------------------------------------------------------------------------------

--- The bash -c script sent for a shell command.
function wire.wrap_command(cmd, timeout, stdin_path)
  local run = 'timeout -s KILL ' .. math.max(1, math.tointeger(math.ceil(timeout))) .. ' bash -c ' .. util.shell_quote(cmd)
  if not stdin_path then return 'exec ' .. run end
  return run .. ' < ' .. stdin_path .. '; rc=$?; rm -f ' .. stdin_path .. '; exit $rc'
end

--- Run a command (POST .../cmd, wait and logs on) and read its NDJSON stream. o: {timeout (s),
--- env, cwd, stdin_path, tail_bytes}. Returns {code, stdout, stderr, timed_out, elapsed, cmd_id,
--- stdout_dropped, stderr_dropped, http_timings} or nil, message, CODE. Commands run as root (sudo).
function wire.command(client, sb, cmd, o)
  local timeout = o.timeout
  local body = { command = 'bash', args = { '-c', wire.wrap_command(cmd, timeout, o.stdin_path) }, env = o.env,
                 sudo = true, wait = true, logs = true,
                 timeout = math.tointeger(math.ceil(timeout + DEFAULTS.backstop)) * 1000 }
  if o.cwd then body.cwd = o.cwd end
  local cap = o.tail_bytes or DEFAULTS.tail_bytes
  local out, errb = adapter.tail_buffer(cap), adapter.tail_buffer(cap)
  local t0 = clock.now()
  local cmd_id, exit_code, stream_err
  local res, err, code = wire.ndjson(client, 'POST', session_path(sb, '/cmd'), { json = body, timeout = timeout + client.stream_grace },
    function(rec)
      local c = type(rec.command) == 'table' and rec.command or nil
      if c then
        cmd_id = str(c.id) or cmd_id
        if adapter.int(c.exitCode) then exit_code = adapter.int(c.exitCode) end
        return
      end
      if rec.stream == 'stdout' and str(rec.data) then out.add(rec.data)
      elseif rec.stream == 'stderr' and str(rec.data) then errb.add(rec.data)
      elseif rec.stream == 'error' then
        local d = type(rec.data) == 'table' and rec.data or {}
        stream_err = stream_err or (tostring(d.code) .. ': ' .. tostring(d.message))
      end
    end)
  local elapsed = (clock.now() - t0) / 1e9
  if not res then return nil, err, code end
  if stream_err then return nil, 'vercel: exec: the stream reported an error: ' .. stream_err, 'EPROTO' end
  if not cmd_id then return nil, 'vercel: exec: no command id in the stream', 'EPROTO' end
  if not exit_code then return nil, 'vercel: exec: the stream ended without the exit code', 'EPROTO' end
  local timed_out = exit_code == 137 and elapsed >= timeout
  return {
    code = timed_out and 124 or exit_code,
    stdout = out.get(), stderr = errb.get(),
    stdout_dropped = out.dropped() > 0 and out.dropped() or nil,
    stderr_dropped = errb.dropped() > 0 and errb.dropped() or nil,
    timed_out = timed_out, elapsed = elapsed, cmd_id = cmd_id, http_timings = res.timings,
  }
end

-- ---- files ---------------------------------------------------------------------------------

--- Write bytes to an absolute path of the sandbox: fs/write takes a gzipped tar that the
--- sandbox extracts under x-cwd (the SDK's writeFiles: entries relative to "/", x-cwd "/").
function wire.upload(client, sb, path, data)
  local tgz, perr = archive.pack({ { path = path:gsub('^/+', ''), data = data, mode = '0644' } }, { format = 'tar.gz' })
  if not tgz then return nil, 'vercel: packing ' .. path .. ': ' .. tostring(perr), 'EIO' end
  local ok, err, code = call(client, 'POST', session_path(sb, '/fs/write'), {
    headers = { ['Content-Type'] = 'application/gzip', ['x-cwd'] = '/' }, body = tgz, timeout = 600 })
  if not ok then return nil, err, code end
  return true
end

-- ---- snapshots -----------------------------------------------------------------------------

--- A snapshot: {id, status, sizeBytes, ...} (GET /v2/sandboxes/snapshots/{id}).
function wire.get_snapshot(client, id)
  local data, err, code = call(client, 'GET', '/v2/sandboxes/snapshots/' .. urlencode(id))
  if not data then return nil, err, code end
  local s = type(data) == 'table' and type(data.snapshot) == 'table' and data.snapshot or nil
  if not s then return nil, 'vercel: snapshot ' .. id .. ': no snapshot in the response', 'EPROTO' end
  return s
end

return wire
