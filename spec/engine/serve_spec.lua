-- cseng.serve against real clients: python3 scripts run through proc.run, so the
-- server answers from the same loop while the spec's task waits on the client.
local serve = require('cseng.serve')
local task = require('cseng.task')
local clock = require('cseng.clock')

-- a python3 client script run with the server's port as argv[1]: its JSON output
local py = require('spec.helpers.common').python_client

local PRELUDE = [[
import http.client, json, socket, sys, threading, time
port = int(sys.argv[1])
def conn(): return http.client.HTTPConnection('127.0.0.1', port, timeout=30)
def out(v): print(json.dumps(v))
def read_all(s):
    data = b''
    while True:
        d = s.recv(65536)
        if not d: return data
        data += d
]]

describe('cseng.serve', function()
  it('round-trips GET and POST: method, path, query, headers, body, remote', function()
    local seen
    local srv <close> = assert(serve.listen { port = 0, handler = function(req)
      seen = { method = req.method, path = req.path, query = req.query, x = req.headers['x-test'],
               body = req.body, remote = req.remote, version = req.version,
               -- stamped in C when the message was complete, on clock.now()'s clock
               received = math.type(req.received) == 'integer' and req.received <= clock.now() }
      return 201, { ['Content-Type'] = 'text/plain', ['X-Reply'] = { 'a', 'b' } }, 'you said ' .. req.body
    end })
    assert.is_true(srv:port() > 0)
    assert.equal('http://127.0.0.1:' .. srv:port(), srv:url())
    local r = py(srv:port(), PRELUDE .. [[
c = conn()
c.request('GET', '/hello/world?x=1&y=%20', headers={'X-Test': 'yes'})
g = c.getresponse(); gb = g.read().decode()
c.request('POST', '/submit', body=b'abc', headers={'Content-Type': 'text/plain'})
p = c.getresponse(); pb = p.read().decode()
out({'get': [g.status, g.getheader('X-Reply'), g.getheader('Content-Type'), gb],
     'post': [p.status, pb]})
]])
    assert.same({ 201, 'a, b', 'text/plain', 'you said ' }, r.get)
    assert.same({ 201, 'you said abc' }, r.post)
    assert.same({ method = 'POST', path = '/submit', query = '', x = nil, body = 'abc',
                  remote = seen.remote, version = '1.1', received = true }, seen)
    assert.matches('^127%.0%.0%.1:%d+$', seen.remote)
  end)

  it('exposes the query raw and joins repeated headers', function()
    local seen
    local srv <close> = assert(serve.listen { handler = function(req)
      seen = req
      return { status = 200, headers = {}, body = req.query }
    end })
    local r = py(srv:port(), PRELUDE .. [[
s = socket.create_connection(('127.0.0.1', port))
s.sendall(b'GET /p?a=1&b=%2F HTTP/1.1\r\nHost: x\r\nX-Dup: 1\r\nX-DUP: 2\r\nConnection: close\r\n\r\n')
data = read_all(s)
out(data.decode())
]])
    assert.matches('^HTTP/1%.1 200 OK\r\n', r)
    assert.matches('Connection: close\r\n', r)
    assert.matches('\r\n\r\na=1&b=%%2F$', r)
    assert.equal('/p', seen.path)
    assert.equal('1, 2', seen.headers['x-dup'])
  end)

  it('serves 100 sequential keep-alive requests over one connection', function()
    local remotes, n = {}, 0
    local srv <close> = assert(serve.listen { handler = function(req)
      n = n + 1
      remotes[req.remote] = true
      return 200, nil, 'n=' .. n
    end })
    local r = py(srv:port(), PRELUDE .. [[
c = conn()
bodies = []
for i in range(100):
    c.request('GET', '/k/%d' % i)
    resp = c.getresponse()
    bodies.append(resp.read().decode())
out(bodies)
]])
    assert.equal(100, #r)
    assert.equal('n=1', r[1])
    assert.equal('n=100', r[100])
    local count = 0
    for _ in pairs(remotes) do count = count + 1 end
    assert.equal(1, count, 'one connection')
    assert.equal(100, srv:stats().requests)
  end)

  it('runs 500 concurrent slow handlers at once', function()
    local srv <close> = assert(serve.listen { max_connections = 2000, handler = function()
      task.sleep(0.2)
      return 200, nil, 'ok'
    end })
    local t0 = os.time()
    local r = py(srv:port(), PRELUDE .. [[
N = 500
res = [None] * N
ready = threading.Barrier(N)  # connect first, then all ask at once
def one(i):
    try:
        c = conn(); c.connect(); ready.wait()
        c.request('GET', '/slow'); rr = c.getresponse(); res[i] = rr.read().decode(); c.close()
    except Exception as e:
        res[i] = repr(e)
ts = [threading.Thread(target=one, args=(i,)) for i in range(N)]
t = time.monotonic()
for th in ts: th.start()
for th in ts: th.join()
out({'ok': sum(1 for x in res if x == 'ok'), 'errors': [x for x in res if x != 'ok'][:3],
     'secs': time.monotonic() - t})
]], 120)
    assert.same({}, r.errors)
    assert.equal(500, r.ok)
    local st = srv:stats()
    assert.equal(500, st.requests)
    assert.is_true(st.max_in_flight >= 400, 'max_in_flight ' .. st.max_in_flight)
    assert.equal(0, st.in_flight)
    assert.is_true(r.secs < 20, 'took ' .. r.secs .. ' s')
    assert.is_true(os.time() - t0 < 60)
  end)

  it('holds 1000 open connections with a request in flight on each', function()
    local srv <close> = assert(serve.listen { max_connections = 2000, handler = function()
      task.sleep(0.3)
      return 200, nil, 'ok'
    end })
    local r = py(srv:port(), PRELUDE .. [[
N = 1000
socks = [socket.create_connection(('127.0.0.1', port)) for i in range(N)]
for s in socks: s.sendall(b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
ok = 0
for s in socks:
    s.settimeout(30)
    data = b''
    while True:
        d = s.recv(4096)
        if not d: break
        data += d
    if data.startswith(b'HTTP/1.1 200') and data.endswith(b'ok'): ok += 1
    s.close()
out(ok)
]], 120)
    assert.equal(1000, r)
    assert.is_true(srv:stats().max_in_flight >= 900, 'max_in_flight ' .. srv:stats().max_in_flight)
  end)

  it('turns a handler error into a 500 with the message, and logs it', function()
    local srv <close> = assert(serve.listen { handler = function(req)
      if req.path == '/boom' then error('kaboom: bad input') end
      if req.path == '/nothing' then return end
      if req.path == '/badheader' then return 200, { ['X-Bad'] = 'a\r\nb' }, '' end
      return 200, nil, 'fine'
    end })
    local r = py(srv:port(), PRELUDE .. [[
c = conn()
res = []
for p in ['/boom', '/nothing', '/badheader', '/ok']:
    c.request('GET', p); rr = c.getresponse(); res.append([rr.status, rr.read().decode()])
out(res)
]])
    assert.equal(500, r[1][1])
    assert.matches('kaboom: bad input', r[1][2])
    assert.not_matches('traceback', r[1][2])
    assert.equal(500, r[2][1])
    assert.matches('no status', r[2][2])
    assert.equal(500, r[3][1])
    assert.matches('line break', r[3][2])
    assert.same({ 200, 'fine' }, r[4]) -- the connection survived the errors
  end)

  it('streams a chunked response that the client sees incrementally', function()
    local srv <close> = assert(serve.listen { handler = function(req)
      assert(req:start(200, { ['Content-Type'] = 'text/plain' }))
      for i = 1, 4 do
        assert(req:write('chunk' .. i .. ';'))
        task.sleep(0.25)
      end
      req:finish()
    end })
    local r = py(srv:port(), PRELUDE .. [[
c = conn()
c.request('GET', '/stream')
resp = c.getresponse()
t0 = time.monotonic()
arrivals = []
while True:
    d = resp.read1(65536)
    if not d: break
    arrivals.append([time.monotonic() - t0, d.decode()])
c.request('GET', '/again'); again = c.getresponse(); again_body = again.read().decode()
out({'te': resp.getheader('Transfer-Encoding'), 'arrivals': arrivals, 'again': again_body})
]])
    assert.equal('chunked', r.te)
    local all, times = {}, {}
    for _, a in ipairs(r.arrivals) do
      all[#all + 1] = a[2]
      times[#times + 1] = a[1]
    end
    assert.equal('chunk1;chunk2;chunk3;chunk4;', table.concat(all))
    assert.is_true(#r.arrivals >= 4, 'arrived in ' .. #r.arrivals .. ' pieces')
    -- the first piece came well before the last: it was not buffered to the end
    assert.is_true(times[#times] - times[1] >= 0.6, 'spread ' .. (times[#times] - times[1]))
    assert.equal('chunk1;chunk2;chunk3;chunk4;', r.again) -- keep-alive after a stream
  end)

  it('reports EPIPE to a streaming handler whose client went away', function()
    local result = task.semaphore(0)
    local got
    local srv <close> = assert(serve.listen { handler = function(req)
      req:start(200, {})
      for _ = 1, 500 do
        local ok, _, code = req:write(string.rep('x', 65536))
        if not ok then
          got = code
          break
        end
        task.sleep(0.01)
      end
      result:release()
    end })
    py(srv:port(), PRELUDE .. [[
s = socket.create_connection(('127.0.0.1', port))
s.sendall(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
s.recv(1000)
s.close()
out(1)
]])
    result:acquire()
    assert.equal('EPIPE', got)
  end)

  it('accepts a 10 MB request body and echoes it back', function()
    local len
    local srv <close> = assert(serve.listen { handler = function(req)
      len = #req.body
      return 200, { ['Content-Type'] = 'application/octet-stream' }, req.body
    end })
    local r = py(srv:port(), PRELUDE .. [[
import hashlib
body = bytes(range(256)) * (10 * 1024 * 1024 // 256)
c = conn()
c.request('POST', '/big', body=body)
resp = c.getresponse(); back = resp.read()
out({'status': resp.status, 'same': back == body, 'len': len(back)})
]])
    assert.equal(10 * 1024 * 1024, len)
    assert.same({ status = 200, same = true, len = 10 * 1024 * 1024 }, r)
  end)

  it('decodes chunked request bodies', function()
    local srv <close> = assert(serve.listen { handler = function(req)
      return 200, nil, req.headers['transfer-encoding'] .. ':' .. #req.body .. ':' .. req.body:sub(1, 5)
    end })
    local r = py(srv:port(), PRELUDE .. [[
c = conn()
def gen():
    for i in range(100): yield b'hello' * 1000
c.request('POST', '/chunked', body=gen(), encode_chunked=True)
resp = c.getresponse()
out([resp.status, resp.read().decode()])
]])
    assert.same({ 200, 'chunked:500000:hello' }, r)
  end)

  it('answers 413 above max_body, for Content-Length and chunked bodies', function()
    local calls = 0
    local srv <close> = assert(serve.listen { max_body = 1000, handler = function(req)
      calls = calls + 1
      return 200, nil, tostring(#req.body)
    end })
    local r = py(srv:port(), PRELUDE .. [[
res = []
c = conn(); c.request('POST', '/', body=b'x' * 1000); rr = c.getresponse(); res.append([rr.status, rr.read().decode()])
c = conn(); c.request('POST', '/', body=b'x' * 5000); rr = c.getresponse(); res.append([rr.status, rr.read().decode()])
c = conn(); c.request('POST', '/', body=iter([b'y' * 600, b'y' * 600]), encode_chunked=True)
rr = c.getresponse(); res.append([rr.status, rr.read().decode()])
out(res)
]])
    assert.same({ 200, '1000' }, r[1])
    assert.same({ 413, 'request body is too large' }, r[2])
    assert.same({ 413, 'request body is too large' }, r[3])
    assert.equal(1, calls)
  end)

  -- A server that answers "path:body" (/slow after `slow` seconds) and a python client that
  -- sends `sends` (a script of s.sendall calls on one socket) then reads until the close: the
  -- bodies of the answers, in order.
  local function pipelined(slow, sends)
    local srv <close> = assert(serve.listen { handler = function(req)
      if req.path == '/slow' then task.sleep(slow) end
      return 200, nil, req.path .. ':' .. req.body
    end })
    local r = py(srv:port(), PRELUDE .. "s = socket.create_connection(('127.0.0.1', port))\n" .. sends .. [[
data = read_all(s)
out(data.decode())
]])
    local bodies = {}
    for body in r:gmatch('\r\n\r\n([^H]*)') do bodies[#bodies + 1] = body end
    return bodies
  end

  it('answers pipelined requests in order without mixing them', function()
    assert.same({ '/slow:', '/b:abc', '/c:' }, pipelined(0.1, [[
s.sendall(b'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n'
          b'POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc'
          b'GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
]]))
  end)

  it('keeps pipelined requests that arrive in pieces while one is answered', function()
    -- reading goes on while a request is active: what arrives meanwhile is appended, in order
    assert.same({ '/slow:', '/b:abc', '/c:' }, pipelined(0.2, [[
s.sendall(b'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n')
time.sleep(0.02)
s.sendall(b'POST /b HTTP/1.1\r\nHost: x\r\nContent-Le')
time.sleep(0.02)
s.sendall(b'ngth: 3\r\n\r\nab')
time.sleep(0.02)
s.sendall(b'cGET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
]]))
  end)

  it('answers every one of more pipelined bytes than it holds (reading pauses, then resumes)', function()
    local srv <close> = assert(serve.listen { handler = function(req)
      if req.path == '/slow' then task.sleep(0.1) end
      return 200, nil, req.path
    end })
    -- 4,000 requests of ~100 bytes: more than the 256 KiB a paused connection holds
    local r = py(srv:port(), PRELUDE .. [[
import threading
s = socket.create_connection(('127.0.0.1', port))
reqs = [b'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n']
reqs += [b'GET /%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n' % (i, b'p' * 60) for i in range(1, 4000)]
reqs.append(b'GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
def send():
    for i in range(0, len(reqs), 500): s.sendall(b''.join(reqs[i:i + 500]))
t = threading.Thread(target=send); t.start()
data = read_all(s)
t.join()
out(data.decode())
]])
    local paths = {}
    for body in r:gmatch('\r\n\r\n([^H]*)') do paths[#paths + 1] = body end
    assert.equal(4001, #paths)
    assert.equal('/slow', paths[1])
    assert.equal('/1', paths[2])
    assert.equal('/3999', paths[4000])
    assert.equal('/last', paths[4001])
    for i = 2, 4000 do
      if paths[i] ~= '/' .. (i - 1) then error('answer ' .. i .. ' is ' .. paths[i]) end
    end
  end)

  it('answers 400 to garbage and keeps serving others', function()
    local srv <close> = assert(serve.listen { handler = function() return 200, nil, 'ok' end })
    local r = py(srv:port(), PRELUDE .. [[
s = socket.create_connection(('127.0.0.1', port))
s.sendall(b'NOT HTTP AT ALL\r\n\r\n')
data = read_all(s)
c = conn(); c.request('GET', '/'); rr = c.getresponse()
out([data.decode().split('\r\n')[0], rr.status])
]])
    assert.same({ 'HTTP/1.1 400 Bad Request', 200 }, r)
  end)

  it('hands requests to srv:accept() when there is no handler', function()
    local srv <close> = assert(serve.listen {})
    local t = task.spawn(function()
      local req = assert(srv:accept())
      assert.equal('pending', req:state())
      req:respond(200, { ['X-Manual'] = '1' }, 'manual ' .. req.path)
      assert.equal('done', req:state())
      assert.has_error(function() req:respond(200, nil, 'twice') end)
    end)
    local r = py(srv:port(), PRELUDE .. [[
c = conn(); c.request('GET', '/m'); rr = c.getresponse()
out([rr.status, rr.getheader('X-Manual'), rr.read().decode()])
]])
    assert.is_true((t:join()))
    assert.same({ 200, '1', 'manual /m' }, r)
  end)

  it('closes idempotently; accept then returns ECLOSED and the port refuses', function()
    local srv = assert(serve.listen {})
    local port = srv:port()
    local waiter = task.spawn(function() return srv:accept() end)
    task.sleep(0.01)
    srv:close()
    srv:close()
    local ok, req, _, code = waiter:join()
    assert.is_true(ok)
    assert.is_nil(req)
    assert.equal('ECLOSED', code)
    assert.has_error(function() srv:port() end)
    assert.equal(0, srv:stats().connections)
    local r = py(port, PRELUDE .. [[
try:
    socket.create_connection(('127.0.0.1', port), timeout=5); out('connected')
except ConnectionRefusedError:
    out('refused')
]])
    assert.equal('refused', r)
  end)

  it('fails to listen on a busy port with EADDRINUSE', function()
    local a <close> = assert(serve.listen {})
    local ok, msg, code = serve.listen { port = a:port() }
    assert.is_nil(ok)
    assert.equal('EADDRINUSE', code)
    assert.is_string(msg)
  end)
end)
