--- The Docker Engine API's wire, for the docker provider (lua/providers/docker.lua) and its
--- images (providers/shared/docker_build.lua, `cseng images`): one request to dockerd (v1.41, on
--- its unix socket or a tcp:// DOCKER_HOST), and the formats, pure functions over bytes that
--- spec/providers/docker/docker_spec.lua checks without a dockerd: the attach stream's frames, the first file of
--- a GET archive tar, the JSON-lines progress of POST /build, and the repository names cseng
--- gives task images.
local http = require('cseng.http')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')

local wire = {}

--- The Engine API version every path is under.
wire.API = 'v1.41'

-- ---- the request ---------------------------------------------------------------------------

local urlencode = adapter.urlencode

--- A query string ("?a=1&b=x", '' for none) of params: sorted, true as 1, false and nil left out.
function wire.query(params)
  local keys = util.keys(params)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = params[k]
    if v ~= nil and v ~= false then parts[#parts + 1] = urlencode(k) .. '=' .. urlencode(v == true and '1' or v) end
  end
  return #parts > 0 and ('?' .. table.concat(parts, '&')) or ''
end

-- The message of an error response ({"message": "..."}), else the body's start.
local function api_message(res)
  local ok, j = pcall(cjson.decode, res.body or '')
  if ok and type(j) == 'table' and type(j.message) == 'string' then return j.message end
  return util.trim((res.body or ''):sub(1, 300))
end

--- One request to dockerd. o: {query, json, body, headers, timeout, stream, ok={statuses}}.
--- Returns the response (status in o.ok, default 2xx) or nil, message, CODE (transport codes
--- from cseng.http, or "HTTP_<status>").
function wire.api(client, method, path, o)
  o = o or {}
  local headers, body = adapter.body(o)
  local res, err, code = http.request {
    method = method, url = client.base .. path .. wire.query(o.query or {}), unix_socket = client.socket,
    headers = headers, body = body, timeout = o.timeout or 60, stream = o.stream,
  }
  if not res then return nil, string.format('docker %s %s: %s', method, path, tostring(err)), code end
  local good
  if o.ok then
    for _, s in ipairs(o.ok) do if res.status == s then good = true end end
  else
    good = res.status >= 200 and res.status < 300
  end
  if not good then
    local msg = string.format('docker %s %s: HTTP %d: %s', method, path, res.status, api_message(res))
    return nil, msg, 'HTTP_' .. res.status, res
  end
  return res
end

--- A response's JSON body as a table ({} when it is none).
function wire.decode(res)
  local ok, j = pcall(cjson.decode, res.body)
  if ok and type(j) == 'table' then return j end
  return {}
end

--- v if a table, else {} (cjson decodes JSON null as a light userdata: treat it as absent).
function wire.tbl(v) return type(v) == 'table' and v or {} end

--- The integer of a JSON number (cjson decodes every number as a float; exit codes and times
--- are integers).
function wire.int(v)
  local n = tonumber(v)
  return n and (math.tointeger(n) or math.floor(n)) or nil
end

-- ---- formats -------------------------------------------------------------------------------

--- Demultiplexer of docker's attach stream: frames of an 8-byte header [stream (1 stdout,
--- 2 stderr), 0, 0, 0, payload size uint32 big-endian] and the payload. feed() takes chunks cut
--- anywhere; only tails (cap bytes per stream) are kept.
function wire.demuxer(cap)
  local d = { out = adapter.tail_buffer(cap), err = adapter.tail_buffer(cap), head = '', remaining = 0, target = nil, frames = 0 }
  function d.feed(chunk)
    local pos, n = 1, #chunk
    while pos <= n do
      if d.remaining == 0 then
        local need = 8 - #d.head
        d.head = d.head .. chunk:sub(pos, pos + need - 1)
        pos = pos + need
        if #d.head == 8 then
          local kind, size = string.unpack('>B xxx I4', d.head)
          d.head = ''
          d.target = kind == 2 and d.err or d.out
          d.remaining = size
          d.frames = d.frames + 1
        end
      else
        local take = math.min(d.remaining, n - pos + 1)
        d.target.add(chunk:sub(pos, pos + take - 1))
        pos = pos + take
        d.remaining = d.remaining - take
      end
    end
  end
  --- true when the stream ended on a frame boundary
  function d.complete() return d.remaining == 0 and d.head == '' end
  return d
end

local function tar_octal(field)
  local digits = field:match('^[%s%z]*([0-7]+)')
  return digits and tonumber(digits, 8) or 0
end

--- The first real entry of a tar (GET /containers/{id}/archive answers
--- with a tar of the path): returns data, or nil, message, CODE ("EISDIR", "ESYMLINK").
function wire.tar_first_file(bytes)
  local pos, pax_size = 1, nil
  while pos + 511 <= #bytes do
    local hdr = bytes:sub(pos, pos + 511)
    if not hdr:find('[^%z]') then break end
    local size = tar_octal(hdr:sub(125, 136))
    local kind = hdr:sub(157, 157)
    local start = pos + 512
    if kind == 'x' then
      local meta = bytes:sub(start, start + size - 1)
      pax_size = tonumber(meta:match('%d+ size=(%d+)\n') or '')
    end
    if kind ~= 'x' and kind ~= 'g' and kind ~= 'L' and kind ~= 'K' then
      if pax_size then size = pax_size end
      if kind == '0' or kind == '\0' or kind == '7' then return bytes:sub(start, start + size - 1) end
      if kind == '5' then return nil, 'is a directory', 'EISDIR' end
      if kind == '2' or kind == '1' then return nil, 'is a link', 'ESYMLINK' end
      return nil, 'not a regular file (tar type ' .. kind .. ')', 'EARCHIVE'
    end
    pos = start + math.ceil(size / 512) * 512
  end
  return nil, 'empty archive', 'EARCHIVE'
end

--- A repository path component from a task id (lowercase letters, digits, '-').
function wire.repo_component(id)
  local s = tostring(id):lower():gsub('[^a-z0-9]+', '-'):gsub('^%-+', ''):gsub('%-+$', '')
  if s == '' then s = 'task' end
  return s:sub(1, 100)
end

--- Parse the JSON-lines progress stream of POST /build as it arrives.
function wire.build_stream()
  local s = { log = adapter.tail_buffer(64 * 1024), pending = '', steps = 0, counted = 0, cached = 0, step = nil }
  local function line(l)
    if not l:find('%S') then return end
    local ok, m = pcall(cjson.decode, l)
    if not ok or type(m) ~= 'table' then s.log.add(l .. '\n'); return end
    if type(m.stream) == 'string' then
      s.log.add((m.stream:gsub('\27%[[%d;]*m', ''))) -- the builder colours RUN steps' stderr
      for text in m.stream:gmatch('[^\n]+') do
        local instr = text:match('^Step %d+/%d+ : (%S+)')
        if instr then
          s.steps = s.steps + 1
          s.step = util.trim(text)
          local up = instr:upper()
          s.last_counts = up == 'RUN' or up == 'COPY' or up == 'ADD'
          if s.last_counts then s.counted = s.counted + 1 end
        elseif text:match('^%s*%-%-%-> Using cache') and s.last_counts then
          s.cached = s.cached + 1
        end
      end
    end
    if type(m.status) == 'string' then s.log.add(m.status .. '\n') end
    if m.error ~= nil and m.error ~= cjson.null then
      local detail = type(m.errorDetail) == 'table' and m.errorDetail.message or nil
      s.error = tostring(detail or m.error)
      s.log.add('ERROR: ' .. s.error .. '\n')
    end
    if type(m.aux) == 'table' and type(m.aux.ID) == 'string' then s.image_id = m.aux.ID end
  end
  function s.feed(chunk)
    s.pending = s.pending .. chunk
    while true do
      local a, b = s.pending:find('\r?\n')
      if not a then break end
      line(s.pending:sub(1, a - 1))
      s.pending = s.pending:sub(b + 1)
    end
  end
  function s.finish() if s.pending ~= '' then line(s.pending); s.pending = '' end end
  return s
end

return wire
