-- The benchmark's two fake providers must be the same server: bench/fake_provider.c (what
-- `make bench` and bench/probe.lua measure against) is held to bench/fake_provider.lua (the
-- reference, on cseng.serve). Both are started in their own processes with the same flags, the
-- same script of requests goes to each, and every answer must agree: status, content type, the
-- JSON body (sandbox ids compared by shape), which X-Fake-* headers are present, the held time
-- (never below the nominal latency), the counters in /stats, pipelined requests answered in
-- order, and a malformed request refused. The C fake also serves TLS (HTTP/1.1 and HTTP/2 by
-- ALPN, a CA and certificate made for the run by bench/lib.lua's make_certs): the same script
-- over each must give the same answers as the Lua fake's plain ones, the HTTP/2 streams of one
-- connection held side by side. Verdicts are counts and values, never times.
local http = require('cseng.http')
local clock = require('cseng.clock')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local cjson = require('cjson')

local ROOT = sys.root()
local CSENG = os.getenv('CSENG') or fs.join(ROOT, 'cseng')
if not CSENG:find('/', 1, true) then CSENG = fs.join(ROOT, CSENG) end
local blib = require('bench.lib')
local FLAGS = { '--create-ms', 5, '--exec-ms', 3, '--delete-ms', 2 }
local NOMINAL = { create = 5e6, exec = 3e6, delete = 2e6 }
local KEY = { ['X-API-Key'] = 'bench-key', ['Content-Type'] = 'application/json' }
local STAMPED = { ['X-Fake-Stamp'] = '1' } -- KEY and a request for X-Fake-Hold-From
for k, v in pairs(KEY) do STAMPED[k] = v end
local MARKER = 'arena-startup-ready-20261001'

local tmp, certs, fakes = nil, nil, {}
setup(function()
  tmp = assert(fs.tempdir('cseng-bench-fake'))
  local dl, dc = fs.join(tmp, 'lua'), fs.join(tmp, 'c')
  assert(fs.mkdir_p(dl))
  assert(fs.mkdir_p(dc))
  local p, url = blib.start_fake(CSENG, dl, FLAGS)
  fakes.lua = { proc = p, url = url }
  p, url = blib.start_fake_c(dc, FLAGS)
  fakes.c = { proc = p, url = url }
  certs = blib.make_certs(fs.join(tmp, 'certs'))
  -- one TLS fake per protocol: each one's /stats counts one script, as the plain ones' do
  for _, v in ipairs { '1.1', '2' } do
    local d = fs.join(tmp, 'tls' .. v)
    assert(fs.mkdir_p(d))
    local tflags = { '--tls-cert', certs.cert, '--tls-key', certs.key }
    for _, f in ipairs(FLAGS) do tflags[#tflags + 1] = f end
    p, url = blib.start_fake_c(d, tflags)
    fakes['tls' .. v] = { proc = p, url = url, opts = { http_version = v, ca_file = certs.ca } }
  end
end)
teardown(function()
  for _, f in pairs(fakes) do f.proc:close() end
  fs.remove_tree(tmp)
end)

-- over (optional) the TLS fake's options: its http_version and the run's CA
local over
local function req(url, method, path, body, headers)
  local o = { method = method, url = url .. path, headers = headers or KEY, body = body, timeout = 30 }
  for k, v in pairs(over or {}) do o[k] = v end
  local res, err, code = http.request(o)
  assert(res, ('%s %s: %s (%s)'):format(method, path, tostring(err), tostring(code)))
  if over then assert.are.equal(over.http_version, res.http_version, method .. ' ' .. path) end
  return res
end

-- What must agree, with the fields that legitimately differ taken out (ids by shape, times).
local function norm(res, ids)
  local body = res.body
  if body ~= '' and (res.headers['content-type'] or ''):find('json', 1, true) then
    body = cjson.decode(body)
    if type(body) == 'table' and body.sandboxId then
      ids[#ids + 1] = body.sandboxId
      body.sandboxId = type(body.sandboxId) == 'string' and body.sandboxId:match('^lz%-%d+$') and 'lz-<n>' or body.sandboxId
    end
  end
  return {
    status = res.status, content_type = res.headers['content-type'], body = body,
    held = res.headers['x-fake-held-ns'] ~= nil, wait = res.headers['x-fake-wait-ns'] ~= nil,
    hold_from = res.headers['x-fake-hold-from'] ~= nil,
  }
end

-- The script: one lifecycle, then each refusal the fake has. Returns the normalized answers and
-- the held times per route.
local function script(url)
  local out, ids, held = {}, {}, {}
  local function step(name, route, method, path, body, headers)
    local t0 = clock.now()
    local res = req(url, method, path, body, headers)
    local t1 = clock.now()
    out[#out + 1] = { name = name, answer = norm(res, ids) }
    if route then
      held[#held + 1] = { route = route, name = name, ns = math.tointeger(tonumber(res.headers['x-fake-held-ns'])),
        from = math.tointeger(tonumber(res.headers['x-fake-hold-from'])), t0 = t0, t1 = t1 }
    end
    return res
  end
  req(url, 'GET', '/stats?reset=1')
  step('create', 'create', 'POST', '/api/sandboxes', cjson.encode { projectId = 'bench', template = 'py311', size = 'small' },
    STAMPED)
  local id = ids[1]
  step('exec marker', 'exec', 'POST', '/api/sandboxes/' .. id .. '/exec',
    cjson.encode { cmd = 'python3 -c "print(\'' .. MARKER .. '\')"', timeoutMs = 30000 })
  step('exec other', 'exec', 'POST', '/api/sandboxes/' .. id .. '/exec', cjson.encode { cmd = 'true' })
  step('exec no cmd', nil, 'POST', '/api/sandboxes/' .. id .. '/exec', cjson.encode { timeoutMs = 1 })
  step('delete', 'delete', 'DELETE', '/api/sandboxes/' .. id, nil, STAMPED)
  step('delete again', 'delete', 'DELETE', '/api/sandboxes/' .. id)
  step('exec deleted', 'exec', 'POST', '/api/sandboxes/' .. id .. '/exec', cjson.encode { cmd = 'true' })
  step('create no project', nil, 'POST', '/api/sandboxes', cjson.encode { template = 'base' })
  step('create not json', nil, 'POST', '/api/sandboxes', 'not json')
  step('no key', nil, 'POST', '/api/sandboxes', cjson.encode { projectId = 'bench' }, { ['Content-Type'] = 'application/json' })
  step('zero', nil, 'GET', '/zero')
  step('no route', nil, 'GET', '/api/nothing')
  local stats = cjson.decode(req(url, 'GET', '/stats').body)
  return out, held, stats
end

describe('bench/fake_provider.c against bench/fake_provider.lua', function()
  local got = {}
  setup(function()
    for name, f in pairs(fakes) do
      over = f.opts
      local ok, out, held, stats = pcall(script, f.url)
      over = nil
      assert(ok, out)
      got[name] = { out = out, held = held, stats = stats }
    end
  end)

  it('gives the same answer to every request of the script, plain and over TLS with HTTP/1.1 and HTTP/2', function()
    for _, name in ipairs { 'c', 'tls1.1', 'tls2' } do
      assert.are.equal(#got.lua.out, #got[name].out, name)
      for i, want in ipairs(got.lua.out) do
        assert.are.same(want, got[name].out[i], name .. ' step ' .. i .. ' (' .. want.name .. ')')
      end
    end
    -- and the reference's answers are the ones the bench relies on (both wrong alike still fails)
    local by = {}
    for _, s in ipairs(got.lua.out) do by[s.name] = s.answer end
    assert.are.equal(201, by.create.status)
    assert.are.equal('lz-<n>', by.create.body.sandboxId)
    assert.are.same({ exitCode = 0, stdout = MARKER .. '\n', stderr = '' }, by['exec marker'].body)
    assert.are.same({ exitCode = 0, stdout = '', stderr = '' }, by['exec other'].body)
    assert.are.equal(400, by['exec no cmd'].status)
    assert.are.equal(204, by.delete.status)
    assert.are.equal(404, by['delete again'].status)
    assert.are.equal(404, by['exec deleted'].status)
    assert.are.equal(400, by['create no project'].status)
    assert.are.equal(400, by['create not json'].status)
    assert.are.equal(401, by['no key'].status)
    assert.are.same({ ok = true }, by.zero.body)
    assert.are.equal(404, by['no route'].status)
    assert.is_true(by.create.held and by.create.wait and by.create.hold_from and by.delete.hold_from)
    assert.is_false(by['exec marker'].hold_from) -- X-Fake-Hold-From only when X-Fake-Stamp asks
    assert.is_false(by.zero.held or by.zero.hold_from)
  end)

  it('holds every lifecycle answer at least its nominal latency', function()
    for name, g in pairs(got) do
      assert.are.equal(6, #g.held, name)
      for _, h in ipairs(g.held) do
        assert(h.ns, name .. ' ' .. h.name .. ': no X-Fake-Held-Ns')
        assert(h.ns >= NOMINAL[h.route], ('%s %s: held %d ns < nominal %d'):format(name, h.name, h.ns, NOMINAL[h.route]))
        -- X-Fake-Hold-From is on this process's clock (bench/client.lua splits its error with it):
        -- the hold started after the call and the answer left before the response was in
        assert(h.from or (h.name ~= 'create' and h.name ~= 'delete'), name .. ' ' .. h.name .. ': no X-Fake-Hold-From')
        if h.from then
          assert(h.from >= h.t0 and h.from + h.ns <= h.t1,
            ('%s %s: hold %d..%d outside the call %d..%d'):format(name, h.name, h.from, h.from + h.ns, h.t0, h.t1))
        end
      end
    end
  end)

  it('counts the same in /stats', function()
    local l, c = got.lua.stats, got.c.stats
    for _, name in ipairs { 'c', 'tls1.1', 'tls2' } do
      for _, k in ipairs { 'live', 'created', 'deleted', 'execs', 'zero', 'not_found', 'bad', 'unauthorized' } do
        assert.are.equal(l[k], got[name].stats[k], name .. ' stats.' .. k)
      end
    end
    -- the TLS fakes were spoken to over TLS, the HTTP/2 one over HTTP/2 only
    assert.is_true(got['tls1.1'].stats.tls_handshakes >= 1 and got['tls2'].stats.tls_handshakes >= 1)
    assert.are.same({ 0, 0 }, { got.c.stats.tls_handshakes, got['tls1.1'].stats.h2_connections })
    assert.are.equal(got['tls2'].stats.tls_handshakes, got['tls2'].stats.h2_connections)
    assert.are.same({ live = 0, created = 1, deleted = 1, execs = 2, not_found = 2, bad = 3, unauthorized = 1 },
      { live = l.live, created = l.created, deleted = l.deleted, execs = l.execs, not_found = l.not_found, bad = l.bad,
        unauthorized = l.unauthorized })
    -- every key the bench reads is there, of the same type
    for k, v in pairs(l) do
      assert(c[k] ~= nil, 'the C fake has no stats.' .. k)
      assert.are.equal(type(v), type(c[k]), 'stats.' .. k)
    end
    assert.are.same(l.nominal_ns, c.nominal_ns)
  end)

  -- Raw bytes from python3 (a client that is neither fake's code): pipelined requests are answered
  -- in order (the third has no key: 401), and a request that is not HTTP is refused with a 400 and the connection closed.
  local RAW = [[
import socket, ssl, sys, json, re
port = int(sys.argv[1]); mode = sys.argv[2]
s = socket.create_connection(('127.0.0.1', port)); s.settimeout(20)
if len(sys.argv) > 3:  # over TLS, trusting the run's CA, HTTP/1.1 by ALPN
    ctx = ssl.create_default_context(cafile=sys.argv[3])
    ctx.set_alpn_protocols(['http/1.1'])
    s = ctx.wrap_socket(s, server_hostname='127.0.0.1')
if mode == 'pipeline':
    one = b'POST /api/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n{"projectId":"pp"}\n'
    s.sendall(b'GET /zero HTTP/1.1\r\nHost: x\r\n\r\n' + one + b'GET /api/nothing HTTP/1.1\r\nHost: x\r\n\r\n')
    want = 3
else:
    s.sendall(b'\x16\x03\x01 not http at all\r\n\r\n')
    want = 1
data = b''
while len(re.findall(rb'HTTP/1\.1 \d{3} ', data)) < want or not data.endswith((b'}', b'\n')):
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
statuses = [int(x) for x in re.findall(rb'HTTP/1\.1 (\d{3}) ', data)]
closed = False
if mode != 'pipeline':
    try: closed = s.recv(1) == b''
    except Exception: closed = False
print(json.dumps({'statuses': statuses, 'closed': closed}))
]]
  local function raw(url, mode, ca)
    local port = url:match(':(%d+)$')
    local r = assert(proc.run { argv = { 'python3', '-c', RAW, port, mode, ca }, timeout = 60 })
    assert(r.code == 0, 'python3 client failed: ' .. r.stderr)
    return cjson.decode(r.stdout)
  end

  it('answers pipelined requests in order, and refuses what is not HTTP (plain, and the C fake over TLS)', function()
    for _, name in ipairs { 'lua', 'c', 'tls1.1' } do
      local ca = fakes[name].opts and certs.ca
      local p = raw(fakes[name].url, 'pipeline', ca)
      assert.are.same({ 200, 201, 401 }, p.statuses, name .. ' pipelined')
      local b = raw(fakes[name].url, 'garbage', ca)
      assert.are.same({ statuses = { 400 }, closed = true }, b, name .. ' not HTTP')
    end
  end)

  -- A TLS fake of its own for one test (flags beside the certificate's), spoken to over HTTP/2:
  -- fn(p, url, stop) runs with it; stop(true) stops the fake (SIGSTOP) and stop(false) lets it go
  -- on, and a stopped fake goes on before it is closed, whatever fn did.
  local function with_h2_fake(name, flags, fn)
    local d = fs.join(tmp, name)
    assert(fs.mkdir_p(d))
    local args = { '--tls-cert', certs.cert, '--tls-key', certs.key }
    for _, f in ipairs(flags) do args[#args + 1] = f end
    local p, url = blib.start_fake_c(d, args)
    over = { http_version = '2', ca_file = certs.ca }
    local stopped = false
    local function stop(on)
      assert(p:kill(on and 'STOP' or 'CONT'))
      stopped = on
    end
    local ok, err = pcall(fn, p, url, stop)
    over = nil
    if stopped then p:kill('CONT') end
    p:close()
    assert(ok, err)
  end
  local CREATE = cjson.encode { projectId = 'bench' }
  local function stats(url) return cjson.decode(req(url, 'GET', '/stats').body) end
  -- two creates at once: the connection has carried two streams (it is read a record at a time)
  local function two_streams(url)
    local task = require('cseng.task')
    local a0 = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE)
    local b0 = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE)
    assert(a0:join() and b0:join())
  end

  -- HTTP/2: a connection's streams are held each on its own, not one after another as HTTP/1.1's
  -- requests are. N creates held (for ten minutes: never released here) on one connection, and
  -- the fake's /stats asked on that connection meanwhile: it answers, and counts all N held at
  -- once. (A fake holding streams one at a time would count one, and /stats would wait behind
  -- them.) The wait for the count is bounded (a failure's bound, not a verdict); the creates are
  -- then cancelled.
  it('holds the HTTP/2 streams of one connection side by side', function()
    local task = require('cseng.task')
    local N = 20
    with_h2_fake('tls2-held', { '--create-ms', 600000 }, function(_, url)
      local ts = {}
      local ok, err = pcall(function()
        local s0 = stats(url)
        for i = 1, N do ts[i] = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE) end
        local s1
        for _ = 1, 600 do
          s1 = stats(url)
          if s1.peak_in_flight >= N then break end
          task.sleep(0.1)
        end
        assert.are.equal(N, s1.peak_in_flight, 'not every stream was held at once')
        assert.are.equal(s0.h2_connections, s1.h2_connections, 'the creates opened connections of their own')
        for _, t in ipairs(ts) do assert.are.equal('waiting', t:status()) end
      end)
      for _, t in ipairs(ts) do t:cancel() end
      for _, t in ipairs(ts) do t:join() end
      assert(ok, err)
    end)
  end)

  -- Two requests on one HTTP/2 connection, written apart while the fake cannot read (stopped):
  -- one read of both would start both holds at the second's arrival. A connection that has
  -- carried two streams at once is read a TLS record at a time (its header, then the rest), so
  -- each hold starts at its own record's arrival wherever the kernel kept the segments apart (it
  -- merges a segment that arrives behind an acknowledged, unread one: the stamps are the
  -- kernel's to give, as for the client's reads, spec/engine/http2_native_spec.lua). A connection
  -- that never carried two is read as the buffer holds.
  it('reads an HTTP/2 connection that carries several streams a TLS record at a time', function()
    local task = require('cseng.task')
    with_h2_fake('tls2-apart', { '--create-ms', 100 }, function(_, url, stop)
      local u0 = stats(url).unit_reads
      assert.are.equal('number', type(u0), 'stats.unit_reads')
      req(url, 'POST', '/api/sandboxes', CREATE)
      assert.are.equal(u0, stats(url).unit_reads, 'a connection with one stream at a time was read a record at a time')
      two_streams(url)
      local u1 = stats(url).unit_reads
      stop(true)
      local a = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE, STAMPED)
      task.sleep(0.02) -- a's request written (the loop writes before it sleeps)
      local b = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE, STAMPED)
      task.sleep(0.02)
      stop(false)
      local _, ra = a:join()
      local _, rb = b:join()
      local from_a = math.tointeger(tonumber(ra.headers['x-fake-hold-from']))
      local from_b = math.tointeger(tonumber(rb.headers['x-fake-hold-from']))
      assert.is_true(from_a <= from_b, 'the first request\'s hold started after the second\'s')
      -- the two records waiting together: each its header, then the rest (and the /stats asked)
      local n = stats(url).unit_reads - u1
      assert.is_true(n >= 4, n .. ' reads a record')
    end)
  end)

  -- A write acknowledges every byte received, read or not, and the kernel appends a segment that
  -- arrives behind an acknowledged, unread one to it, with the newer stamp. So before it answers
  -- on such a connection the fake reads what waits there, unless it looked at the socket within
  -- the last 50 us. Here the fake is stopped while a held create comes due and a second request
  -- arrives behind it: the kernel readied the release's timer before the socket, so on resuming
  -- the fake writes the first answer before its loop reads the socket, and reads the second
  -- request first.
  it('reads what waits on an HTTP/2 connection before it writes an answer there', function()
    local task = require('cseng.task')
    with_h2_fake('tls2-drain', { '--create-ms', 200 }, function(_, url, stop)
      two_streams(url)
      local n0 = stats(url).drained
      assert.are.equal('number', type(n0), 'stats.drained')
      local a = task.spawn(req, url, 'POST', '/api/sandboxes', CREATE, STAMPED)
      task.sleep(0.05) -- a read and held
      stop(true)
      task.sleep(0.3) -- a's hold ends while the fake is stopped
      local b = task.spawn(req, url, 'GET', '/zero')
      task.sleep(0.02) -- b's request in the fake's socket, behind the due release
      stop(false)
      local _, ra = a:join()
      local _, rb = b:join()
      assert.are.same({ 201, 200 }, { ra.status, rb.status })
      assert.is_true(stats(url).drained - n0 >= 1, 'the second request was not read before the first answer was written')
    end)
  end)
end)
