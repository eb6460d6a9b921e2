--- A provider fake behind a link of known latency and bandwidth, for bench/primitives.lua: the
--- bundled loopback fake of a vendor (spec/fakes/init.lua: its sandboxes really run their
--- commands) with every request to its API and to its sandboxes' own endpoint (Daytona's toolbox, E2B's envd)
--- passed through a forwarding listener that answers each request no earlier than
---
---   arrival + L + (request body bytes + response body bytes) / B
---
--- (arrival: the moment the request was complete, cseng.serve's req.received), so a call's time is
--- known from the injection alone: L per call, plus its bytes at B. The fake's own work (a real
--- command, a real file write) runs inside that window and is hidden while it is shorter than the
--- window; a request it outlasts is answered late and logged with how late (`late_ms`), so the
--- bench can tell the link's promise from the fake's cost.
---
---   ./cseng lua bench/link_fake.lua --vendor daytona --latency-ms 50 --mibps 32 --info F.json --log F.jsonl
---
--- --info: written once the fake and the link listen: {config (the adapter's connect config,
--- pointing at the link), env, latency_ms, mibps}. --log: one JSON line per request: {side (api |
--- toolbox | envd), method, path, bytes_in, bytes_out, hold_ms (what the link promised: L + bytes / B), held_ms (from
--- arrival to the answer handed to the listener: hold_ms, or more when the fake outlasted it), late_ms,
--- at_ms and done_ms (that arrival and that answer on the monotonic clock: the span of a figure made of
--- several calls, polls with the client's sleeps between them, is read from them), and command: a
--- command's first 60 characters}.
--- POST /__link/echo?n=N on the API link is answered at once with N bytes, neither held nor logged:
--- the bench's calibration of what moving a body over loopback costs the client by itself.
--- GET /__link/file?n=N on the API link is the link acting as a package mirror: N bytes, held and
--- logged as any call (side "mirror", with the client's user-agent), for the egress workload.
--- Serves until SIGTERM or SIGINT, or --max-seconds.
local serve = require('cseng.serve')
local http = require('cseng.http')
local task = require('cseng.task')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')
local blib = require('bench.lib')

local opts = blib.options('link_fake', arg, { vendor = 'string', ['latency-ms'] = 'number', mibps = 'number',
  info = 'string', log = 'string', ['max-seconds'] = 'number' }, { 'info' })
if not opts then return 2 end
local VENDOR = opts.vendor or 'daytona'
local L_NS = math.floor((opts.latency_ms or 50) * 1e6)
local BPS = (opts.mibps or 32) * 1048576 -- bytes per second
if BPS <= 0 or L_NS < 0 then io.stderr:write('link_fake: --mibps > 0 and --latency-ms >= 0\n'); return 2 end

-- the vendor's endpoints besides its API, each behind a link of its own: Daytona's toolbox (the fake
-- is told its public URL, which the API hands out), E2B's envd (the adapter's envd_url_template)
local SIDE_OF = { daytona = { toolbox = 'toolbox_public_url' }, e2b = { envd = false } }

local upstream = {} -- side -> the fake's own URL

-- The fake's answer to req (on its `side` endpoint), its hop-by-hop headers left out both ways.
local function ask_fake(side, req)
  local headers = {}
  for k, v in pairs(req.headers) do
    if k ~= 'host' and k ~= 'content-length' and k ~= 'connection' and k ~= 'transfer-encoding' then headers[k] = v end
  end
  local res, err = http.request { method = req.method, url = upstream[side] .. req.path ..
    (req.query ~= '' and ('?' .. req.query) or ''), headers = headers,
    body = (req.method ~= 'GET' and req.method ~= 'HEAD') and req.body or nil, timeout = 600, max_body = 1 << 30 }
  if not res then return 502, { ['Content-Type'] = 'text/plain' }, 'link_fake: forwarding: ' .. tostring(err) end
  local rh = {}
  for k, v in pairs(res.headers) do
    if k ~= 'content-length' and k ~= 'connection' and k ~= 'transfer-encoding' and k ~= 'date' then rh[k] = v end
  end
  return res.status, rh, res.body
end

local function forward(side)
  return function(req)
    local t0 = req.received
    local n = tonumber(req.query:match('n=(%d+)')) or 0
    -- the bench's calibration: answered at once with ?n= bytes, never held or logged, so the client
    -- can time what moving those bytes over loopback costs it alone
    if req.path == '/__link/echo' then return 200, { ['Content-Type'] = 'application/octet-stream' }, string.rep('x', n) end
    local status, rh, body
    local logged_side = side
    if req.path == '/__link/file' then
      -- the link as a mirror: a file of ?n= bytes, held and logged like any call (side "mirror")
      logged_side = 'mirror'
      status, rh, body = 200, { ['Content-Type'] = 'application/octet-stream' }, string.rep('m', math.min(n, 1 << 30))
    else
      status, rh, body = ask_fake(side, req)
    end
    local bytes_in, bytes_out = #(req.body or ''), #body
    local deadline = t0 + L_NS + math.floor((bytes_in + bytes_out) / BPS * 1e9)
    local late = clock.now() - deadline
    -- libuv timers tick in whole milliseconds: sleep until the monotonic clock is past the deadline
    while clock.now() < deadline do task.sleep(math.max(0.001, (deadline - clock.now()) / 1e9)) end
    local done = clock.now()
    if opts.log then
      -- a command's first characters, so the bench can tell a workload's commands from its checks
      -- (Daytona's adapter sends it as sh -c 'eval "$(echo BASE64 | base64 -d)"')
      -- (E2B's envd Process.Start as {"process":{"cmd":"/bin/bash","args":["-l","-c","..."]}})
      local sent = bytes_in < 8192 and (req.body or '') or ''
      local cmd = sent:match('"command"%s*:%s*"(.-[^\\])"') or sent:match('"args"%s*:%s*%[%s*"%-l"%s*,%s*"%-c"%s*,%s*"(.-[^\\])"')
      cmd = cmd and cmd:gsub('\\/', '/')
      local b64 = cmd and cmd:match('eval \\?"%$%(echo ([%w%+/=]+) | base64 %-d%)')
      if b64 then cmd = crypto.unbase64(b64) or cmd end
      fs.append(opts.log, jsonl.encode({ side = logged_side, ua = req.headers['user-agent'], method = req.method, path = req.path, status = status,
        command = cmd and cmd:sub(1, 60) or nil,
        bytes_in = bytes_in, bytes_out = bytes_out, hold_ms = (deadline - t0) / 1e6, held_ms = (done - t0) / 1e6,
        late_ms = late > 0 and late / 1e6 or 0, at_ms = t0 / 1e6, done_ms = done / 1e6 }) .. '\n')
    end
    return status, rh, body
  end
end

local links = {}
links.api = assert(serve.listen { host = '127.0.0.1', port = 0, handler = forward('api'), max_body = 1 << 30 })
local switches = {}
for side, switch in pairs(SIDE_OF[VENDOR] or {}) do
  links[side] = assert(serve.listen { host = '127.0.0.1', port = 0, handler = forward(side), max_body = 1 << 30 })
  if switch then switches[switch] = links[side]:url() end
end
require('cseng.cli.commands.test').use_checkout()
local fakes = require('spec.fakes')
local f = assert(fakes.start(VENDOR, switches))
upstream.api = f.url
if VENDOR == 'daytona' then upstream.toolbox = f.toolbox_url end
if VENDOR == 'e2b' then upstream.envd = f.envd_url end -- envd routes by the E2b-Sandbox-Id header
for side in pairs(links) do assert(upstream[side], 'link_fake: no upstream for ' .. side) end

local config = f.config({ api_url = links.api:url(), envd_url_template = links.envd and links.envd:url() or nil })
local env = f.env()
for k, v in pairs(env) do
  if v == f.url then env[k] = links.api:url() end
  if links.envd and v == f.envd_url then env[k] = links.envd:url() end
end
assert(fs.write(opts.info, jsonl.encode({ vendor = VENDOR, config = config, env = env, latency_ms = L_NS / 1e6,
  mibps = BPS / 1048576, pid = sys.pid() }) .. '\n'))

-- SIGTERM or SIGINT cancels this task (as for `cseng fake`): the sleep raises, the fake is closed
local t_end = opts.max_seconds and (clock.now() + opts.max_seconds * 1e9) or nil
pcall(function()
  while not (t_end and clock.now() >= t_end) do task.sleep(0.5) end
end)
for _, l in pairs(links) do l:close() end
pcall(f.close)
return 0
