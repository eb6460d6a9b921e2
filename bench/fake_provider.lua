--- The benchmark's fake provider: a loopback server in the Lizard REST shape (the seed arena's
--- provider, and lua/providers/lizard.lua's), with injected latencies, on cseng.serve. It runs in
--- its own process so the measured client never shares its loop:
---
---   ./cseng lua bench/fake_provider.lua [--port 0] [--port-file F] [--create-ms 50] [--exec-ms 20]
---                                       [--delete-ms 10] [--max-seconds 3600] [--hold-from received]
---
---   POST   /api/sandboxes            {projectId, template, ...} -> 201 {sandboxId, cpus, memoryMb, ...}
---   POST   /api/sandboxes/{id}/exec  {cmd, timeoutMs}           -> 200 {exitCode, stdout, stderr}
---   DELETE /api/sandboxes/{id}                                  -> 204 (404 for an unknown id)
---   GET    /zero                     the zero-latency endpoint -> 200 {"ok":true}
---   GET    /stats[?reset=1]          counters, peak in flight (reset), the fake's own CPU time
---
--- Every answer to the three lifecycle calls carries X-Fake-Held-Ns: how long the handler held
--- the request, measured here with clock.now() from the moment the server had the whole request
--- (X-Fake-Wait-Ns: how much of that went by before the handler ran; X-Fake-Hold-From, to a
--- request with X-Fake-Stamp: when the hold began, in clock.now() ns, the client's clock on the
--- same machine). libuv timers tick in whole
--- milliseconds, so a sleep is never started short: the handler sleeps until clock.now() has passed the deadline
--- (held >= nominal, and at most about a millisecond more). Clients subtract either the nominal
--- latency or the held time; docs/PERFORMANCE.md shows both.
---
--- The fake is stateful (a live set: an exec or delete of an unknown id is a 404, so a client that
--- loses track of a sandbox is seen) but keeps nothing per request, so it can run for hours.
--- It stops on SIGTERM/SIGINT, or after --max-seconds.
local serve = require('cseng.serve')
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local cjson = require('cjson')
local flags = require('cseng.lib.flags')

local opts, perr = flags.parse(arg, {
  port = { key = 'port', type = 'int', min = 0 },
  ['port-file'] = { key = 'port_file', type = 'string' },
  ['create-ms'] = { key = 'create_ms', type = 'number' },
  ['exec-ms'] = { key = 'exec_ms', type = 'number' },
  ['delete-ms'] = { key = 'delete_ms', type = 'number' },
  ['max-seconds'] = { key = 'max_seconds', type = 'number' },
  ['hold-from'] = { key = 'hold_from', type = 'string' },
})
if not opts then
  io.stderr:write('fake_provider: ', perr, '\n')
  return 2
end

local NOMINAL = {
  create = math.floor((opts.create_ms or 50) * 1e6),
  exec = math.floor((opts.exec_ms or 20) * 1e6),
  delete = math.floor((opts.delete_ms or 10) * 1e6),
}
-- The hold starts when the server had the whole request (req.received), not when the handler's
-- task first ran: the wait for the dispatcher and the ready queue is the fake's, so it is inside
-- the held time (and the hold absorbs it) instead of counting as the client's error.
-- --hold-from handler restores the old start, to measure what that wait was.
local HOLD_FROM_HANDLER = opts.hold_from == 'handler'
if opts.hold_from and not HOLD_FROM_HANDLER and opts.hold_from ~= 'received' then
  io.stderr:write('fake_provider: --hold-from: received or handler\n')
  return 2
end
local JSON = { ['Content-Type'] = 'application/json' }

local st = { created = 0, deleted = 0, execs = 0, zero = 0, not_found = 0, bad = 0, unauthorized = 0 }
local live, nlive, seq = {}, 0, 0
local in_flight, peak = 0, 0

-- Hold the request for the nominal latency, never less; returns the held nanoseconds.
local function hold(t0, ns)
  local deadline = t0 + ns
  while true do
    local left = deadline - clock.now()
    if left <= 0 then break end
    task.sleep(left / 1e9) -- rounded up to whole milliseconds by the timer
  end
  return clock.now() - t0
end

-- X-Fake-Hold-From, to a request with X-Fake-Stamp: the hold's start t0 in clock.now() ns
-- (CLOCK_MONOTONIC: the client's clock on the same machine): the answer is made at Hold-From +
-- Held-Ns
local function answer(status, t0, body, wait, stamp)
  return status, { ['Content-Type'] = 'application/json', ['X-Fake-Held-Ns'] = tostring(clock.now() - t0),
    ['X-Fake-Wait-Ns'] = tostring(wait), ['X-Fake-Hold-From'] = stamp and tostring(t0) or nil }, body
end

local function lifecycle(req, t0, wait)
  local method, path = req.method, req.path
  local stamp = req.headers['x-fake-stamp'] ~= nil
  if req.headers['x-api-key'] == nil then
    st.unauthorized = st.unauthorized + 1
    return 401, JSON, '{"error":"missing X-API-Key"}'
  end
  if method == 'POST' and path == '/api/sandboxes' then
    local ok, body = pcall(cjson.decode, req.body)
    if not ok or type(body) ~= 'table' or type(body.projectId) ~= 'string' then
      st.bad = st.bad + 1
      return 400, JSON, '{"error":"projectId is required"}'
    end
    hold(t0, NOMINAL.create)
    seq = seq + 1
    local id = string.format('lz-%08d', seq)
    live[id] = true
    nlive = nlive + 1
    st.created = st.created + 1
    return answer(201, t0, string.format(
      '{"sandboxId":"%s","cpus":2,"memoryMb":2048,"region":"us-east-1","template":%s,"size":"small","status":"running"}',
      id, cjson.encode(body.template or 'base')), wait, stamp)
  end
  local id, rest = path:match('^/api/sandboxes/([^/]+)(.*)$')
  if id and rest == '/exec' and method == 'POST' then
    local ok, body = pcall(cjson.decode, req.body)
    if not ok or type(body) ~= 'table' or type(body.cmd) ~= 'string' then
      st.bad = st.bad + 1
      return 400, JSON, '{"error":"cmd is required"}'
    end
    hold(t0, NOMINAL.exec)
    if not live[id] then
      st.not_found = st.not_found + 1
      return answer(404, t0, '{"error":"sandbox not found"}', wait, stamp)
    end
    st.execs = st.execs + 1
    -- the seed's readiness command prints its marker; anything else prints nothing
    local printed = body.cmd:match("print%('([^']*)'%)") or body.cmd:match('print%("([^"]*)"%)')
    return answer(200, t0, cjson.encode { exitCode = 0, stdout = printed and (printed .. '\n') or '', stderr = '' }, wait, stamp)
  end
  if id and rest == '' and method == 'DELETE' then
    hold(t0, NOMINAL.delete)
    if not live[id] then
      st.not_found = st.not_found + 1
      return answer(404, t0, '{"error":"sandbox not found"}', wait, stamp)
    end
    live[id] = nil
    nlive = nlive - 1
    st.deleted = st.deleted + 1
    return answer(204, t0, '', wait, stamp)
  end
  return 404, JSON, '{"error":"no route"}'
end

local srv

local function stats(reset)
  local u, s = sys.usage(), srv:stats()
  local out = {
    requests = s.requests, connections = s.connections, peak_in_flight = peak, live = nlive,
    created = st.created, deleted = st.deleted, execs = st.execs, zero = st.zero,
    not_found = st.not_found, bad = st.bad, unauthorized = st.unauthorized,
    user_s = u.user_s, sys_s = u.sys_s, maxrss_kb = u.maxrss_kb, now_ns = clock.now(),
    nominal_ns = NOMINAL, pid = sys.pid(),
  }
  if reset then peak = in_flight end
  return out
end

local function handler(req)
  local now = clock.now()
  local t0 = HOLD_FROM_HANDLER and now or req.received
  local wait = now - req.received
  if req.path == '/zero' then
    st.zero = st.zero + 1
    return 200, JSON, '{"ok":true}'
  end
  if req.path == '/stats' then return 200, JSON, cjson.encode(stats(req.query:find('reset=1', 1, true) ~= nil)) end
  in_flight = in_flight + 1
  if in_flight > peak then peak = in_flight end
  local ok, status, headers, body = pcall(lifecycle, req, t0, wait)
  in_flight = in_flight - 1
  if not ok then error(status, 0) end
  return status, headers, body
end

local err, code
srv, err, code = serve.listen { host = '127.0.0.1', port = opts.port or 0, handler = handler, backlog = 4096,
  max_connections = 8192 }
if not srv then
  io.stderr:write('fake_provider: ', tostring(err), ' (', tostring(code), ')\n')
  return 1
end
if opts.port_file then assert(fs.write(opts.port_file, tostring(srv:port()) .. '\n')) end
io.stdout:write('fake_provider: listening on ', srv:url(), '\n')
io.stdout:flush()
task.sleep(opts.max_seconds or 3600)
srv:close()
return 0
