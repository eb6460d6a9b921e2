--- E2B's wire (for lua/providers/e2b.lua and its specs): the control plane's requests and error
--- bodies, the sandbox's envd daemon (its URL, headers, file upload) and the Connect server stream
--- of process.Process/Start that exec reads, the create body, the template a spec picks, the
--- warm snapshots' names and the list's metadata filter (specs: shared/specs/e2b-openapi.yml,
--- e2b-envd.yaml, e2b-process.proto).
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
local http = require('cseng.http')
local connect = require('cseng.connect')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local adapter = require('providers.shared.adapter')

local wire = {}

--- The settings' defaults.
wire.DEFAULTS = {
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

local DEFAULTS = wire.DEFAULTS

--- E2B_TEMPLATE as {default, map = {{pattern, template}}}: "base", or
--- "glob=template,glob=template,default" (first match wins; an entry without "=" is the default
--- for images that match nothing).
function wire.templates(s)
  local t = { default = DEFAULTS.template, map = {} }
  for entry in tostring(s or ''):gmatch('[^,]+') do
    entry = util.trim(entry)
    local pat, tpl = entry:match('^(.-)=(.+)$')
    if pat then t.map[#t.map + 1] = { util.trim(pat), util.trim(tpl) }
    elseif entry ~= '' then t.default = entry end
  end
  return t
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

--- One request. o: {json, body, timeout, raw, omit_headers}. Returns data (decoded JSON, true
--- for an empty body, the raw body with o.raw) and the response, or nil, msg, CODE, res.
function wire.request(method, url, headers, o)
  o = o or {}
  return adapter.request('e2b', method, url, { headers = headers, json = o.json, body = o.body, raw = o.raw,
    timeout = o.timeout or DEFAULTS.request_timeout, message = error_text, omit_headers = o.omit_headers })
end

--- One control-plane call (X-API-Key). o: {json, timeout}.
function wire.api(client, method, path, o)
  o = o or {}
  local headers = { ['X-API-Key'] = client.key, Accept = 'application/json' }
  return wire.request(method, client.base .. path, headers, { json = o.json, timeout = o.timeout or client.request_timeout })
end

--- The envd base URL of a sandbox.
function wire.envd_url(client, sb)
  local vars = { port = tostring(client.envd_port), sandbox = sb.id, domain = sb.domain or client.domain }
  return (client.envd_url_template:gsub('{(%a+)}', function(k) return vars[k] end):gsub('/+$', ''))
end

local function basic(user) return 'Basic ' .. crypto.base64(user .. ':') end

--- The headers of an envd request. user: the Basic user of Process calls; false for /files,
--- whose user is the username parameter.
function wire.envd_headers(client, sb, user, extra)
  local h = {
    ['E2b-Sandbox-Id'] = sb.id,
    ['E2b-Sandbox-Port'] = tostring(client.envd_port),
  }
  if user ~= false then h.Authorization = basic(user or client.user) end
  if sb.token then h['X-Access-Token'] = sb.token end
  for k, v in pairs(extra or {}) do h[k] = v end
  return h
end

--- Write bytes to a file of the sandbox: envd's POST /files (multipart "file"), as user.
---@return true|nil ok, string? err, string? code
function wire.upload(client, sb, path, data, user)
  user = user or client.user
  local body, ctype = adapter.multipart(path:match('[^/]*$'), data)
  local url = wire.envd_url(client, sb) .. '/files?path=' .. urlencode(path) .. '&username=' .. urlencode(user)
  local ok, err, code = wire.request('POST', url, wire.envd_headers(client, sb, false, { ['Content-Type'] = ctype }),
    { body = body, timeout = 300 })
  if not ok then return nil, err, code end
  return true
end

--- Write files ({{path, data}}) in one envd POST /files as user: one multipart part named "file"
--- per file, its filename the destination, and no path parameter (what the SDK's files.write of a
--- list sends). envd answers the EntryInfo of every file written; an answer that does not name
--- every path is an error (EPROTO), never a partial success.
---@return true|nil ok, string? err, string? code
function wire.upload_many(client, sb, files, user)
  user = user or client.user
  local parts = {}
  for i, f in ipairs(files) do
    parts[i] = { name = 'file', filename = f.path, content_type = 'application/octet-stream', data = f.data }
  end
  local body, ctype = adapter.form(parts)
  local url = wire.envd_url(client, sb) .. '/files?username=' .. urlencode(user)
  local data, err, code = wire.request('POST', url, wire.envd_headers(client, sb, false, { ['Content-Type'] = ctype }),
    { body = body, timeout = 300 })
  if not data then
    if #files > 1 and tostring(code):match('^HTTP_') then err = err .. ' (a multi-file upload of ' .. #files .. ' files)' end
    return nil, err, code
  end
  local written = {}
  for _, e in ipairs(type(data) == 'table' and data or {}) do
    if type(e) == 'table' and type(e.path) == 'string' then written[e.path] = true end
  end
  local missing = {}
  for _, f in ipairs(files) do
    if not written[f.path] then missing[#missing + 1] = f.path end
  end
  if #missing > 0 then
    return nil, string.format('e2b: POST /files: the answer names %d of %d files written (not: %s%s)', #files - #missing,
      #files, table.concat(missing, ', ', 1, math.min(#missing, 5)), #missing > 5 and ', ...' or ''), 'EPROTO'
  end
  return true
end

-- ---- create --------------------------------------------------------------------------------

local function glob(p)
  return '^' .. p:gsub('[%^%$%(%)%%%.%[%]%+%-%?]', '%%%0'):gsub('%*', '.*') .. '$'
end

--- The template for a spec: spec.warm_artifact (a snapshot), spec.layer (a built template),
--- spec.template, else the first E2B_TEMPLATE pattern matching spec.image, else the default
--- ("base").
function wire.template_for(client, spec)
  if spec.warm_artifact then return spec.warm_artifact end -- warm mode: a snapshot's id
  if spec.layer then return spec.layer end -- the build's template alias
  if spec.template then return spec.template end
  if spec.image then
    for _, e in ipairs(client.templates.map) do
      if spec.image:match(glob(e[1])) then return e[2] end
    end
  end
  return client.templates.default
end

--- The POST /v2/sandboxes body for a spec.
function wire.create_body(client, spec)
  local ttl = math.tointeger(math.ceil(spec.ttl_seconds or DEFAULTS.default_timeout))
  local body = {
    templateID = wire.template_for(client, spec),
    timeout = math.max(1, math.min(ttl, client.max_timeout)), -- the sandbox is killed after it
    allow_internet_access = spec.network and true or false,
  }
  if spec.labels and next(spec.labels) then body.metadata = util.copy(spec.labels) end
  if spec.env and next(spec.env) then body.envVars = util.copy(spec.env) end
  return body
end

-- ---- exec: process.Process/Start -----------------------------------------------------------

local CONNECT_HTTP = { unauthenticated = 'HTTP_401', permission_denied = 'HTTP_403' }

--- The envd user a command runs as: "verifier" is the client's verifier_user, another name is
--- itself, root (or none) the client's user.
function wire.user_of(client, user)
  return user == 'verifier' and client.verifier_user or (user and user ~= 'root' and tostring(user)) or client.user
end

--- The Start request envelope for a command.
function wire.start_request(cmd, env, cwd)
  local process = { cmd = '/bin/bash', args = { '-l', '-c', cmd } }
  if env and next(env) then process.envs = env end
  if cwd then process.cwd = cwd end
  -- stdin = false: no stdin pipe, so a command that reads stdin sees EOF (as on the local provider)
  return connect.encode(cjson.encode { process = process, stdin = false })
end

-- Best effort: SIGKILL a process by pid (Process.SendSignal, a unary Connect call in JSON).
local function kill(client, sb, base, pid, user)
  if not pid then return end
  wire.request('POST', base .. '/process.Process/SendSignal',
    wire.envd_headers(client, sb, user, { ['Connect-Protocol-Version'] = '1' }),
    { json = { process = { pid = pid }, signal = 'SIGNAL_SIGKILL' }, timeout = 10 })
end

-- What a tail buffer dropped, nil when nothing.
local function dropped(b)
  local n = b.dropped()
  return n > 0 and n or nil
end

--- Run cmd through process.Process/Start and read its stream. o: {user (an envd user), timeout
--- (s), env, cwd, tail_bytes}. Returns {code, stdout, stderr, stdout_dropped, stderr_dropped,
--- elapsed, timed_out, pid, status, http_timings} or nil, message, CODE.
---@return table|nil res, string? err, string? code
function wire.start_process(client, sb, cmd, o)
  local timeout, user = o.timeout, o.user
  local base = wire.envd_url(client, sb)
  local cap = o.tail_bytes or DEFAULTS.tail_bytes
  local out, errb = adapter.tail_buffer(cap), adapter.tail_buffer(cap)
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

  local t0 = clock.now()
  local res, err, code = http.request {
    method = 'POST', url = base .. '/process.Process/Start',
    headers = wire.envd_headers(client, sb, user, {
      ['Content-Type'] = 'application/connect+json',
      ['Connect-Protocol-Version'] = '1',
      ['Connect-Timeout-Ms'] = tostring(math.max(1, math.floor(timeout * 1000))),
      ['Keepalive-Ping-Interval'] = '50', -- envd sends keepalive events, so proxies keep the stream
    }),
    body = wire.start_request(cmd, o.env, o.cwd),
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

-- ---- snapshots (warm mode) ------------------------------------------------------------------

--- The snapshot name for a task content key: prefix .. key.
function wire.snapshot_name(client, key)
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

--- The snapshotID of an existing snapshot named name, false when there is none, or nil, err, code.
function wire.lookup_snapshot(client, name)
  local found, err, code = wire.api(client, 'GET', '/snapshots?name=' .. urlencode(name) .. '&limit=10')
  if not found then return nil, err, code end
  for _, info in ipairs(type(found) == 'table' and found or {}) do
    if type(info) == 'table' and str(info.snapshotID) and names_snapshot(info, name) then return info.snapshotID end
  end
  return false
end

-- ---- list ----------------------------------------------------------------------------------

--- The metadata filter of GET /v2/sandboxes: "k=v&k2=v2", keys and values URL-encoded (then
--- the whole is encoded again as the parameter's value).
function wire.metadata_query(labels)
  local parts = {}
  for _, k in ipairs(util.keys(labels or {})) do parts[#parts + 1] = urlencode(k) .. '=' .. urlencode(labels[k]) end
  return table.concat(parts, '&')
end

return wire
