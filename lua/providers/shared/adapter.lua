--- What the provider adapters (lua/providers/*.lua) share: reading their settings, the REST
--- request wrapper with its error mapping, output tails, temporary paths and archive extraction
--- inside a sandbox. It is not a provider itself, so it lives in lua/providers/shared/ beside the
--- vendors' wire and build modules (`cseng providers` lists only the files of lua/providers/).
---
--- Error conventions (the specs assert them): an HTTP status outside 2xx is "HTTP_<status>"
--- with "<provider>: <METHOD> <path>: HTTP <status>: <the body's message>"; a transport failure
--- keeps cseng.http's code with "<provider>: <METHOD> <path>: <error>"; a 2xx body that is not
--- JSON is "EPROTO".
local http = require('cseng.http')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')

local adapter = {}

-- ---- settings ----------------------------------------------------------------------------

--- The settings reader of an adapter's connect: setting(key, var) is cfg[key], else the
--- environment variable var (through cfg.getenv, default os.getenv); '' counts as unset. var may
--- be a list of alternative names ({'A_TOKEN', 'A_API_KEY'}, as an adapter's `credentials` lists
--- them): the first one set wins.
---@param cfg table
---@return fun(key?: string, var?: string|string[]): any
function adapter.settings(cfg)
  local getenv = cfg.getenv or os.getenv
  return function(key, var)
    local v
    if key ~= nil then v = cfg[key] end
    if v == '' then v = nil end
    for _, name in ipairs(type(var) == 'table' and var or { var }) do
      if v ~= nil then break end
      v = getenv(name)
      if v == '' then v = nil end
    end
    return v
  end
end

--- The credentials of an adapter's connect: each {key, var, secret = bool} read with
--- setting(key, var) (var a name, or a list of alternative names); returns their values in
--- order, the secret ones registered with secrets.add. Raises the one-line error naming
--- every missing variable, e.g. "lizard provider: LIZARD_API_KEY is not set (export it, or put
--- it in an --env-file)", alternatives as "A_TOKEN or A_API_KEY"; makes no request.
---@param provider string
---@param setting fun(key?: string, var?: string|string[]): any from adapter.settings
---@param creds table[]
function adapter.credentials(provider, setting, creds)
  local values, missing = {}, {}
  for i, c in ipairs(creds) do
    values[i] = setting(c[1], c[2])
    if not values[i] then
      missing[#missing + 1] = type(c[2]) == 'table' and table.concat(c[2], ' or ') or c[2]
    end
  end
  if #missing > 0 then
    local many = #missing > 1
    errors.raise(errors.ECONFIG, string.format('%s provider: %s %s not set (export %s, or put %s in an --env-file)', provider,
      table.concat(missing, ' and '), many and 'are' or 'is', many and 'them' or 'it', many and 'them' or 'it'))
  end
  for i, c in ipairs(creds) do
    if c.secret then secrets.add(values[i]) end
  end
  return table.unpack(values, 1, #creds)
end

-- ---- HTTP ----------------------------------------------------------------------------------

--- Percent-encode everything but RFC 3986's unreserved characters.
function adapter.urlencode(s)
  return (tostring(s):gsub('[^%w%-%._~]', function(c) return string.format('%%%02X', c:byte()) end))
end

--- A string, else nil (cjson decodes JSON null as a light userdata: treat it as absent).
function adapter.str(v) return type(v) == 'string' and v or nil end

--- The integer a JSON number (or numeric string) stands for, else nil: cjson decodes every
--- number as a float, and a fraction is not an integer.
function adapter.int(v) return math.tointeger(tonumber(v)) end

--- The start of a response body for an error message: redacted first (a secret cut in half
--- is still a secret), trimmed, at most 300 bytes (then "...").
function adapter.snippet(body)
  -- redacting a prefix longer than the cut by more than any secret is as good as the whole
  body = util.trim(secrets.redact(tostring(body or ''):sub(1, 8192)))
  if #body > 300 then body = body:sub(1, 300) .. '...' end
  return body
end

--- The default cap on a response body (bytes): a larger body is refused with EBODY while it
--- arrives (cseng.http's max_body; memory stays small). The setting: o.max_body per call, else
--- adapter.max_body, from CSENG_MAX_RESPONSE_BYTES (default 32 MiB; 0 = no cap).
adapter.MAX_BODY_DEFAULT = 32 * 1024 * 1024
adapter.max_body = math.tointeger(tonumber(os.getenv('CSENG_MAX_RESPONSE_BYTES') or '')) or adapter.MAX_BODY_DEFAULT

--- Whether an error code is an authentication or permission failure: errors.is_auth (the
--- classification lives with the error type).
adapter.is_auth = errors.is_auth

--- Whether an error code is transient (a retry may succeed): errors.is_transient.
adapter.is_transient = errors.is_transient

--- The error text of a service's JSON error bodies: a function(body) giving the first of the
--- fields (dotted paths, e.g. {'error.message', 'error', 'message'}) that holds a non-empty
--- string (a list of strings is joined with '; '), else adapter.snippet(body). For o.message.
---@param fields string[]
---@return fun(body: string?): string
function adapter.message_from(fields)
  return function(body)
    local ok, j = pcall(cjson.decode, body or '')
    if ok and type(j) == 'table' then
      for _, f in ipairs(fields) do
        local v = j
        for k in f:gmatch('[^.]+') do v = type(v) == 'table' and v[k] or nil end
        if type(v) == 'table' then
          local parts = {}
          for _, x in ipairs(v) do if type(x) == 'string' then parts[#parts + 1] = x end end
          v = table.concat(parts, '; ')
        end
        if type(v) == 'string' and v ~= '' then return v end
      end
    end
    return adapter.snippet(body)
  end
end

--- The headers (o.headers, default {}) and body of a request: o.json encoded, with its
--- Content-Type, else o.body.
function adapter.body(o)
  local headers = o.headers or {}
  if o.json == nil then return headers, o.body end
  headers['Content-Type'] = 'application/json'
  return headers, cjson.encode(o.json)
end

--- One REST call. o: {headers, omit_headers (names not sent at all, not even curl's own),
--- json (encoded, with Content-Type), body, raw (do not decode),
--- timeout, what (the call in messages; default "METHOD url-without-query"), message =
--- fn(body) -> the error text of a body (default adapter.snippet)}. Returns data (decoded JSON,
--- true for an empty body, the raw body with o.raw) and the response, or nil, message, CODE
--- (and the response, for an HTTP status or a body that is not JSON). Messages of transport
--- and HTTP errors pass through secrets.redact.
---@return any data, table|string res_or_err, string? code, table? res
function adapter.request(provider, method, url, o)
  local headers, body = adapter.body(o)
  local what = o.what or (method .. ' ' .. url:gsub('%?.*$', ''))
  local message = o.message or adapter.snippet
  local max_body = o.max_body or adapter.max_body
  local res, err, code = http.request { method = method, url = url, headers = headers, body = body,
                                        timeout = o.timeout, max_body = max_body > 0 and max_body or nil,
                                        omit_headers = o.omit_headers }
  if not res then
    if code == 'EBODY' then err = string.format('response body larger than %d bytes (CSENG_MAX_RESPONSE_BYTES)', max_body) end
    return nil, secrets.redact(provider .. ': ' .. what .. ': ' .. tostring(err)), code
  end
  -- a body is redacted before message() cuts it (adapter.snippet redacts what it keeps)
  local function msg_of(b) return message == adapter.snippet and adapter.snippet(b) or message(secrets.redact(b or '')) end
  if res.status < 200 or res.status > 299 then
    return nil, secrets.redact(string.format('%s: %s: HTTP %d: %s', provider, what, res.status, msg_of(res.body))),
      'HTTP_' .. res.status, res
  end
  if o.raw then return res.body, res end
  if res.body == nil or res.body:find('^%s*$') then return true, res end
  local ok, data = pcall(cjson.decode, res.body)
  if not ok then
    return nil, secrets.redact(provider .. ': ' .. what .. ': response is not JSON: ' .. msg_of(res.body)), 'EPROTO', res
  end
  return data, res
end

--- A create call: `call(client, 'POST', url, opts)` (the adapter's request function), and its
--- answer when data[field], the new thing's id, is a non-empty string; nil, "<what>: no <field> in
--- the response", EPROTO when it is not; the call's own nil, err, code, raw when it failed (raw: the
--- response, whose Retry-After admission reads).
---@return table|nil data, any res, string? code, table? raw
function adapter.post_created(call, client, url, opts, field, what)
  local data, res, code, raw = call(client, 'POST', url, opts)
  if not data then return nil, res, code, raw end
  if type(data) ~= 'table' or type(data[field]) ~= 'string' or data[field] == '' then
    return nil, what .. ': no ' .. field .. ' in the response', 'EPROTO'
  end
  return data, res
end

--- A delete's outcome: success, or a 404 (already gone), is true; else nil, message, CODE and
--- the response (so the session's destroy honours its Retry-After).
function adapter.deleted(ok, err, code, res)
  if ok or code == 'HTTP_404' then return true end
  return nil, err, code, res
end

--- multipart/form-data with one part named "file". Returns the body and its Content-Type.
function adapter.multipart(filename, data)
  return adapter.form { { name = 'file', filename = filename, content_type = 'application/octet-stream', data = data } }
end

-- A quoted-string of Content-Disposition, escaped as Go's mime/multipart writes it.
local function quoted(s) return '"' .. tostring(s):gsub('[\\"]', '\\%0') .. '"' end

--- A multipart/form-data body of several parts: {{name, filename?, content_type?, data}} (a
--- part without filename is a plain field). Returns the body and its Content-Type.
---@param parts table[]
---@return string body, string content_type
function adapter.form(parts)
  local boundary = 'cseng-' .. crypto.hex(crypto.random_bytes(12))
  local out = {}
  for _, p in ipairs(parts) do
    out[#out + 1] = '--' .. boundary .. '\r\nContent-Disposition: form-data; name=' .. quoted(p.name)
    if p.filename then out[#out + 1] = '; filename=' .. quoted(p.filename) end
    out[#out + 1] = '\r\n'
    if p.content_type then out[#out + 1] = 'Content-Type: ' .. p.content_type .. '\r\n' end
    out[#out + 1] = '\r\n'
    out[#out + 1] = p.data
    out[#out + 1] = '\r\n'
  end
  out[#out + 1] = '--' .. boundary .. '--\r\n'
  return table.concat(out), 'multipart/form-data; boundary=' .. boundary
end

-- The value of parameter key (a token or a quoted-string with \ escapes) in a header value.
local function header_param(v, key)
  local lower = v:lower()
  local s = 1
  while true do
    local a, b = lower:find('%f[%w]' .. key .. '%s*=%s*', s)
    if not a then return nil end
    if a == 1 or v:sub(1, a - 1):match('[;%s]$') then
      if v:sub(b + 1, b + 1) ~= '"' then return v:match('^[^;%s]*', b + 1) end
      local out, i = {}, b + 2
      while i <= #v do
        local c = v:sub(i, i)
        if c == '\\' then out[#out + 1] = v:sub(i + 1, i + 1); i = i + 2
        elseif c == '"' then return table.concat(out)
        else out[#out + 1] = c; i = i + 1 end
      end
      return nil -- unterminated
    end
    s = b + 1
  end
end

--- The parts of a multipart body (RFC 2046; what Go's mime/multipart writes): {{name, filename,
--- headers (lowercase names), data}}, or nil, why. A preamble, transport padding after a
--- boundary and an epilogue are allowed; anything else out of place is an error.
---@param body string
---@param content_type string
---@return table[]|nil parts, string? err
function adapter.multipart_parts(body, content_type)
  local ct = tostring(content_type or '')
  if not ct:lower():match('^%s*multipart/') then return nil, 'not a multipart body (Content-Type ' .. ct .. ')', 'EPROTO' end
  local boundary = header_param(ct, 'boundary')
  if not boundary or boundary == '' or #boundary > 200 then return nil, 'no usable boundary in ' .. ct, 'EPROTO' end
  local delim = '--' .. boundary
  local pos
  if body:sub(1, #delim) == delim then
    pos = 1
  else
    pos = body:find('\r\n' .. delim, 1, true)
    if not pos then return nil, 'no opening boundary', 'EPROTO' end
    pos = pos + 2
  end
  local parts = {}
  while true do
    pos = pos + #delim
    if body:sub(pos, pos + 1) == '--' then return parts end
    local eol = body:find('\r\n', pos, true)
    if not eol or not body:sub(pos, eol - 1):match('^[ \t]*$') then return nil, 'malformed boundary line in part ' .. (#parts + 1), 'EPROTO' end
    local hend = body:find('\r\n\r\n', eol, true)
    if not hend then return nil, 'part ' .. (#parts + 1) .. ' has no end of headers', 'EPROTO' end
    local headers = {}
    for line in body:sub(eol + 2, hend + 1):gmatch('([^\r\n]*)\r\n') do
      local k, v = line:match('^([^:%s]+)%s*:%s*(.-)%s*$')
      if not k then return nil, 'malformed header line in part ' .. (#parts + 1), 'EPROTO' end
      headers[k:lower()] = v
    end
    local nextb = body:find('\r\n' .. delim, hend + 2, true)
    if not nextb then return nil, 'part ' .. (#parts + 1) .. ' has no closing boundary', 'EPROTO' end
    local disp = headers['content-disposition'] or ''
    parts[#parts + 1] = { name = header_param(disp, 'name'), filename = header_param(disp, 'filename'),
                          headers = headers, data = body:sub(hend + 4, nextb - 1) }
    pos = nextb + 2
  end
end

-- ---- commands and files --------------------------------------------------------------------

--- A tail buffer: keeps the last cap bytes of what it is given (add), counting what it
--- dropped (dropped() is 0 when nothing was).
function adapter.tail_buffer(cap)
  local b = { parts = {}, len = 0, total = 0 }
  function b.add(s)
    if #s == 0 then return end
    b.parts[#b.parts + 1] = s
    b.len = b.len + #s
    b.total = b.total + #s
    if b.len > 2 * cap + 65536 then
      local joined = table.concat(b.parts)
      b.parts = { joined:sub(-cap) }
      b.len = #b.parts[1]
    end
  end
  function b.get()
    local joined = table.concat(b.parts)
    if #joined > cap then joined = joined:sub(-cap) end
    return joined
  end
  function b.dropped() return b.total - math.min(b.total, cap) end
  return b
end

--- A fresh path in the sandbox's /tmp (cseng.lib.util.sandbox_tmp_path).
adapter.tmp_path = util.sandbox_tmp_path

--- put by upload: the archive is uploaded (upload(client, sb, path, bytes) -> true | nil, err,
--- CODE) to a fresh /tmp/cseng-put-*.tar of the sandbox, then extracted into dir as
--- adapter.extract_tar_in_sandbox does (o: its options).
---@return true|nil ok, string? err, string? code
function adapter.put_by_upload(P, upload, client, sb, dir, tar_bytes, o)
  local tmp = adapter.tmp_path('put', '.tar')
  local ok, err, code = upload(client, sb, tmp, tar_bytes)
  if not ok then return nil, err, code end
  return adapter.extract_tar_in_sandbox(P, client, sb, tmp, dir, o)
end

--- A command's stdin for services that take none: the bytes uploaded (upload(client, sb, path,
--- bytes) -> true | nil, err, CODE) to a fresh /tmp/cseng-stdin-* of the sandbox, which the
--- command then reads. Returns the path (nil when there is no stdin), or false, message, CODE.
---@return string|false|nil path, string? err, string? code
function adapter.stdin_upload(upload, client, sb, stdin)
  if not stdin then return nil end
  local path = adapter.tmp_path('stdin')
  local ok, err, code = upload(client, sb, path, stdin)
  if not ok then return false, err, code end
  return path
end

--- The put of an adapter whose service writes one file: adapter.put_by_upload with upload
--- (and o), as a function put(client, sb, dir, tar_bytes).
---@return fun(client: any, sb: table, dir: string, tar_bytes: string): true|nil, string?, string?
function adapter.put_via(P, upload, o)
  return function(client, sb, dir, tar_bytes) return adapter.put_by_upload(P, upload, client, sb, dir, tar_bytes, o) end
end

--- A call's outcome when its data does not matter: true, or nil, message, CODE.
---@return true|nil ok, string? err, string? code
function adapter.done(ok, err, code)
  if not ok then return nil, err, code end
  return true
end

--- After a file API that has no mode (write_files): set the modes files ({{path, data, mode}})
--- ask for, by one chmod per mode in the sandbox (P.exec). Returns true, or nil, message, "EIO"
--- naming the command's output (o.output: 'stderr', or 'stdout' where the provider combines
--- them), or exec's own failure.
---@return true|nil ok, string? err, string? code
function adapter.chmod_files(P, client, sb, files, o)
  local by, order = {}, {}
  for _, f in ipairs(files) do
    if f.mode ~= nil then
      local m = type(f.mode) == 'number' and string.format('%o', f.mode) or tostring(f.mode)
      if not m:match('^[0-7]+$') then return nil, P.name .. ': write_files: mode ' .. m .. ' of ' .. f.path .. ' is not octal', 'EINVAL' end
      if not by[m] then by[m] = {}; order[#order + 1] = m end
      table.insert(by[m], util.shell_quote(f.path))
    end
  end
  if #order == 0 then return true end
  local cmds = {}
  for _, m in ipairs(order) do cmds[#cmds + 1] = 'chmod ' .. m .. ' -- ' .. table.concat(by[m], ' ') end
  local res, err, code = P.exec(client, sb, table.concat(cmds, ' && '), { timeout = 120, cwd = '/' })
  if not res then return nil, err, code end
  if res.code ~= 0 then
    return nil, P.name .. ': write_files: chmod: exit ' .. tostring(res.code) .. ': '
      .. adapter.snippet(res[(o and o.output) or 'stderr']), 'EIO'
  end
  return true
end

--- Unpack an archive already written to tmp (a file of the sandbox) into dir, then remove tmp:
---   mkdir -p DIR && tar -xf TMP -C DIR; rc=$?; rm -f TMP; exit $rc
--- run by P.exec (5 minutes, cwd /). o.base64: tmp holds the archive in base64 (decoded into
--- tar's stdin); o.output: the field of the exec result quoted when extraction fails ('stderr',
--- or 'stdout' where the provider combines them). Returns true, or nil, message, CODE ("EIO"
--- when the command fails, else exec's own failure).
---@param P table the provider module (P.name, P.exec)
---@return true|nil ok, string? err, string? code
function adapter.extract_tar_in_sandbox(P, client, sb, tmp, dir, o)
  o = o or {}
  local q = util.shell_quote(dir)
  -- decode to a file first: GNU tar detects gzip on a file, not on a pipe
  local unpack = o.base64 and ('base64 -d ' .. tmp .. ' > ' .. tmp .. '.tar && tar -xf ' .. tmp .. '.tar -C ' .. q)
    or ('tar -xf ' .. tmp .. ' -C ' .. q)
  local cleanup = o.base64 and (tmp .. ' ' .. tmp .. '.tar') or tmp
  local r, err, code = P.exec(client, sb, 'mkdir -p ' .. q .. ' && ' .. unpack .. '; rc=$?; rm -f ' .. cleanup .. '; exit $rc',
    { timeout = 300, cwd = '/' })
  if not r then return nil, err, code end
  if r.code ~= 0 then
    return nil, P.name .. ': put: extracting into ' .. dir .. ': ' .. util.trim(r[o.output or 'stderr']), 'EIO'
  end
  return true
end

return adapter
