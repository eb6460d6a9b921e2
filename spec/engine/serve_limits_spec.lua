-- cseng.serve's limits: a connection cap, an idle timeout and a request
-- size limit, each with a default; a run with a status endpoint and nofile=256 goes on while
-- 400 idle connections are held open against that endpoint. Clients are python3 scripts run
-- as child processes, so the server answers from this loop while the spec waits.
local serve = require('cseng.serve')
local proc = require('cseng.proc')
local task = require('cseng.task')
local fs = require('cseng.fs')
local http = require('cseng.http')
local json = require('cjson')
local results = require('cseng.results.log')
local util = require('cseng.lib.util')

local H = require('spec.helpers.runlog')
local ROOT, CSENG = H.ROOT, H.CSENG
local lizard_fake = require('spec.fakes').module('lizard')

local tmp = H.tempdir('cseng-serve-limits')
teardown(H.remove_tempdirs)

-- a python3 client script run with the server's port as argv[1]: its JSON output
local py = require('spec.helpers.common').python_client

local PRELUDE = [[
import json, socket, sys, time
port = int(sys.argv[1])
def out(v): print(json.dumps(v))
def ask(s, req):
    s.sendall(req)
    data = b''
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
        if b'\r\n\r\n' in data and (b'Connection: close' in data or data.endswith(b'\n')): break
    return data.decode(errors='replace')
]]

local until_true = H.until_true

local free_port = H.free_port

describe('cseng.serve limits', function()
  it('answers a connection over max_connections 503 and closes it', function()
    local srv <close> = assert(serve.listen { max_connections = 3, handler = function() return 200, nil, 'ok\n' end })
    local r = py(srv:port(), PRELUDE .. [==[
held = [socket.create_connection(('127.0.0.1', port)) for _ in range(3)]
time.sleep(0.3)
extra = [socket.create_connection(('127.0.0.1', port)) for _ in range(2)]
got = []
for s in extra:
    s.settimeout(30)
    got.append(s.recv(65536).decode())
ok = ask(held[0], b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
out({'extra': [g.split('\r\n')[0] for g in got], 'held': ok.split('\r\n')[0]})
]==])
    assert.same({ 'HTTP/1.1 503 Service Unavailable', 'HTTP/1.1 503 Service Unavailable' }, r.extra)
    assert.equal('HTTP/1.1 200 OK', r.held)
    assert.equal(2, srv:stats().refused)
  end)

  it('closes idle connections after idle_timeout, but never one whose handler is at work', function()
    local release = false
    local srv <close> = assert(serve.listen { idle_timeout = 0.2, handler = function()
      while not release do task.sleep(0.05) end -- longer than the idle timeout, by a condition
      return 200, nil, 'slow ok\n'
    end })
    local p = assert(proc.spawn { argv = { 'python3', '-c', PRELUDE .. [==[
idle = [socket.create_connection(('127.0.0.1', port)) for _ in range(5)]
busy = socket.create_connection(('127.0.0.1', port))
busy.settimeout(60)
r = ask(busy, b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
closed = 0
for s in idle:
    s.settimeout(60)
    if s.recv(1) == b'': closed += 1
out({'busy': r.split('\r\n')[0], 'closed': closed})
]==], tostring(srv:port()) }, stdout = tmp .. '/idle.out' })
    assert.is_true(until_true(function() return srv:stats().timed_out >= 5 end), 'the idle ones were closed')
    assert.equal(1, srv:stats().in_flight, 'the busy one is still being answered')
    release = true
    local res = p:wait(60)
    assert.equal(0, res.code)
    local r = json.decode(fs.read(tmp .. '/idle.out'))
    assert.equal('HTTP/1.1 200 OK', r.busy)
    assert.equal(5, r.closed)
    assert.equal(5, srv:stats().timed_out)
  end)

  it('answers a request line and headers over max_header 431', function()
    local srv <close> = assert(serve.listen { max_header = 1024, handler = function() return 200, nil, 'ok\n' end })
    local r = py(srv:port(), PRELUDE .. [==[
big = ask(socket.create_connection(('127.0.0.1', port)),
          b'GET / HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'a' * 2000 + b'\r\nConnection: close\r\n\r\n')
url = ask(socket.create_connection(('127.0.0.1', port)),
          b'GET /' + b'u' * 2000 + b' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
small = ask(socket.create_connection(('127.0.0.1', port)), b'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
out([big.split('\r\n')[0], url.split('\r\n')[0], small.split('\r\n')[0]])
]==])
    assert.same({ 'HTTP/1.1 431 Request Header Fields Too Large', 'HTTP/1.1 431 Request Header Fields Too Large',
      'HTTP/1.1 200 OK' }, r)
  end)

  it('defaults: a cap of at most a quarter of the descriptor limit, headers of 64 KiB', function()
    local script = [[
local serve = require('cseng.serve')
local srv = assert(serve.listen { handler = function() return 200, nil, 'ok' end })
print(srv:port())
io.stdout:flush()
require('cseng.task').sleep(3600)
]]
    local file = tmp .. '/defaults.lua'
    assert(fs.write(file, script))
    local p = assert(proc.spawn { argv = { 'sh', '-c', 'ulimit -n 256 && exec "$0" lua "$1"', CSENG, file },
      stdout = tmp .. '/defaults.out' })
    assert.is_true(until_true(function() return (fs.read(tmp .. '/defaults.out') or ''):find('\n') ~= nil end))
    local port = tonumber((fs.read(tmp .. '/defaults.out'):match('%d+')))
    local r = py(port, PRELUDE .. [==[
held = [socket.create_connection(('127.0.0.1', port)) for _ in range(64)]
time.sleep(0.3)
s = socket.create_connection(('127.0.0.1', port)); s.settimeout(30)
over = s.recv(65536).decode().split('\r\n')[0]
big = ask(socket.create_connection(('127.0.0.1', port)),
          b'GET / HTTP/1.1\r\nHost: x\r\nX-Big: ' + b'a' * 70000 + b'\r\nConnection: close\r\n\r\n')
out([over, big.split('\r\n')[0]])
]==])
    p:kill('KILL')
    p:wait()
    -- 64 = 256 / 4 are held: the next one is refused; the one after them too (cap reached)
    assert.same({ 'HTTP/1.1 503 Service Unavailable', 'HTTP/1.1 503 Service Unavailable' }, r)
  end)
end)

describe('a run with a status endpoint', function()
  it('goes on at nofile=256 while 400 idle connections are held against its status port', function()
    local release = false
    local f = lizard_fake.start { latency = { create = function(n)
      if n == 1 then while not release do task.sleep(0.05) end end -- the run waits for the flood
      return 0
    end } }
    local ok, err = pcall(function()
      local port = free_port()
      local envf = tmp .. '/flood.env'
      assert(fs.write(envf, 'LIZARD_API_KEY=' .. f.api_key .. '\n'))
      local plan = H.lizard_plan(tmp, 'flood.lua', f, 'concurrency = 2, task_limit = 4')
      local log = tmp .. '/flood/run.jsonl'
      local run = assert(proc.spawn { argv = { 'sh', '-c', 'ulimit -n 256 && exec "$0" "$@"', CSENG, 'run', plan,
        '--output', log, '--quiet', '--env-file', envf, '--status-port', tostring(port) },
        cwd = ROOT, stdout = tmp .. '/flood.stdout', stderr = tmp .. '/flood.stderr' })
      assert.is_true(until_true(function()
        local res = http.request { url = 'http://127.0.0.1:' .. port .. '/status', timeout = 5 }
        return res ~= nil and res.status == 200
      end), 'the status endpoint answers: ' .. tostring(fs.read(tmp .. '/flood.stderr')))
      -- 400 idle connections, held while the run creates, executes, records and destroys
      local flood = assert(proc.spawn { argv = { 'python3', '-c', PRELUDE .. [==[
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
held = []
for _ in range(400):
    try: held.append(socket.create_connection(('127.0.0.1', port), timeout=10))
    except OSError: pass
print(len(held), flush=True)
time.sleep(3600)
]==], tostring(port) }, stdout = tmp .. '/flood.out' })
      assert.is_true(until_true(function() return (fs.read(tmp .. '/flood.out') or ''):find('\n') ~= nil end))
      release = true
      local r = run:wait(240)
      flood:kill('KILL')
      flood:wait()
      assert.is_table(r, 'the run ended')
      assert.equal(0, r.code, fs.read(tmp .. '/flood.stderr'))
      local events = results.read(log)
      assert.equal(4, #results.trials(events))
      assert.same({}, results.live_allocations(events))
      assert.equal(0, f.stats().live)
      assert.equal('400', util.trim(fs.read(tmp .. '/flood.out')), 'the 400 connections were open')
    end)
    release = true
    f.close()
    if not ok then error(err, 0) end
  end)
end)
