-- clock.answered(): a timing ends when the provider's answer arrived, not when this process's
-- loop got round to it (lclock.c, ltask.c; engine/h1.c stamps a response with the kernel's
-- receive time). The verdicts are orderings of causally related events, never durations: the
-- loop is held busy (a synchronous wait in one task) until a marker file the server writes after
-- it sent its answer exists, so the answer certainly arrived while nothing in this process read
-- it.
local http = require('cseng.http')
local task = require('cseng.task')
local clock = require('cseng.clock')
local proc = require('cseng.proc')
local fs = require('cseng.fs')

-- A server in its own process (python3) that answers each request on one connection at once
-- and, after the second answer is out, creates the marker file; with a certificate and key,
-- over TLS.
local SERVER = [[
import os, socket, ssl, sys
port_file, marker = sys.argv[1], sys.argv[2]
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(4)
open(port_file + '.tmp', 'w').write(str(s.getsockname()[1]))
os.rename(port_file + '.tmp', port_file)
c, _ = s.accept()
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    c = ctx.wrap_socket(c, server_side=True)
buf = b''
for n in (1, 2):
    while b'\r\n\r\n' not in buf:
        d = c.recv(4096)
        if not d:
            sys.exit(1)
        buf += d
    buf = buf.split(b'\r\n\r\n', 1)[1]
    c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')
    if n == 2:
        open(marker, 'w').close()
c.recv(1)
]]

local function start_server(dir, certs)
  local port_file, marker = fs.join(dir, 'port'), fs.join(dir, 'answered')
  local argv = { 'python3', '-c', SERVER, port_file, marker }
  if certs then argv[#argv + 1], argv[#argv + 2] = certs.cert, certs.key end
  local p = assert(proc.spawn { argv = argv, stdout = fs.join(dir, 'server.log'), stderr = fs.join(dir, 'server.log') })
  for _ = 1, 400 do
    local t = fs.read(port_file)
    if t and t:match('^%d+$') then return p, (certs and 'https' or 'http') .. '://127.0.0.1:' .. t, marker end
    task.sleep(0.025)
  end
  p:close()
  error('the server did not start: ' .. tostring(fs.read(fs.join(dir, 'server.log'))))
end

describe('clock.answered', function()
  local dir
  before_each(function() dir = assert(fs.tempdir('cseng-answered-')) end)
  after_each(function() fs.remove_tree(dir) end)

  -- over: nil (plain HTTP/1.1) or the TLS run's request options
  local function arrival(certs, over)
    local server, url, marker = start_server(dir, certs)
    local function o(path)
      local t = { url = url .. path, timeout = 30 }
      for k, v in pairs(over or {}) do t[k] = v end
      return t
    end
    -- the first call opens the connection, so the second is written at once (no connect to wait for)
    local r1 = assert(http.request(o('/one')))
    assert.equal(200, r1.status)
    local out = {}
    local caller = task.spawn(function()
      local t0 = clock.now()
      local res = assert(http.request(o('/two')))
      out.t0, out.res = t0, res
      out.answered, out.resumed = clock.answered(t0), clock.now()
    end)
    task.yield() -- the caller writes its request and waits
    -- the loop is held here (no yield) until the server has sent its answer, and a while longer
    local seen
    local limit = clock.now() + 60e9
    while clock.now() < limit do
      if fs.stat(marker) then
        seen = clock.now()
        break
      end
    end
    assert.is_truthy(seen, 'the server never answered')
    local hold = clock.now() + 20e6
    while clock.now() < hold do end
    local held_until = clock.now()
    assert.is_true((task.join(caller)))
    server:close()

    local tm = out.res.timings
    assert.equal(200, out.res.status)
    assert.is_true(math.type(tm.started_at) == 'integer' and math.type(tm.answered_at) == 'integer')
    assert.is_true(tm.started_at >= out.t0 and tm.answered_at > tm.started_at)
    assert.equal(tm.answered_at, out.answered)
    -- stamped when it arrived, before the marker was seen; read after the loop was let go
    assert.is_true(out.answered <= seen, string.format('answered %d ns after the marker was seen', out.answered - seen))
    assert.is_true(out.resumed >= held_until)
    assert.is_true(math.abs(tm.total * 1e9 - (tm.answered_at - tm.started_at)) < 2e3) -- timings.total: microseconds
  end

  it('ends at the answer\'s arrival on the native path, though the loop read it later', function()
    local before = http.stats().native.requests
    arrival()
    assert.equal(2, http.stats().native.requests - before)
  end)

  it('ends at the arrival of the record that completed the answer over TLS (native HTTPS/1.1)', function()
    local certs = require('bench.lib').make_certs(fs.join(dir, 'certs'))
    local before = http.stats().native
    arrival(certs, { http_version = '1.1', ca_file = certs.ca })
    local after = http.stats().native
    assert.same({ 2, 1 }, { after.requests - before.requests, after.tls_handshakes - before.tls_handshakes })
  end)

  it('is clock.now() once the task has waited for anything else, or for a since after the answer', function()
    local server, url = start_server(dir)
    assert(http.request { url = url .. '/one', timeout = 30 })
    local t0 = clock.now()
    local res = assert(http.request { url = url .. '/two', timeout = 30 })
    local at = res.timings.answered_at
    assert.equal(at, clock.answered(t0))
    assert.equal(at, clock.answered()) -- no since: any answer
    local later = clock.now()
    assert.is_true(clock.answered(later) >= later) -- an answer before `since` does not end it
    task.sleep(0.001)
    local woke = clock.now()
    assert.is_true(clock.answered(t0) >= woke) -- the task waited again: now
    server:close()
  end)

  it('is clock.now() in a task no answer woke', function()
    local t = task.spawn(function()
      local before = clock.now()
      local a = clock.answered()
      return a >= before
    end)
    local ok, fresh = task.join(t)
    assert.is_true(ok)
    assert.is_true(fresh)
  end)
end)
