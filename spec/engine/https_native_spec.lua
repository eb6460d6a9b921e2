-- cseng.http's native path over TLS (engine/h1.c on engine/tls.c: OpenSSL over the same libuv
-- stream) against its libcurl path, in one process. First every case of the plain spec
-- (spec/helpers/native_h1.lua) over TLS, against the same scripted server speaking TLS (node's
-- `tls`, a CA and certificates made for this run by bench/lib.lua's make_certs, the CA trusted
-- with ca_file, HTTP/1.1 asked for). Then what only TLS has, each case both ways with the same
-- outcome required (the same error code where it fails) and the native run required to have gone
-- through h1.c: certificate verification (the system store by default, ca_file, the host name,
-- an expired, a self-signed and a wrong-host certificate, another CA's, a CA file that does not
-- exist, a leaf trusted as a partial chain, `insecure` only when asked and never sharing a
-- connection with verified requests), a server that is not TLS, one that closes or stays silent
-- during the handshake, SNI and ALPN as sent, the handshake's timings, and sessions resumed
-- across a pool's connections. Verdicts are values and orderings, never durations.
local http = require('cseng.http')
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local cjson = require('cjson')

local ROOT = sys.root()
local N = require('spec.helpers.native_h1')
local blib = require('bench.lib')
local node_server = require('spec.fakes.node_server')
local run, norm = N.run, N.norm

local tmp, certs
local function ensure_certs()
  if certs then return certs end
  tmp = assert(fs.tempdir('cseng-https-native-'))
  certs = blib.make_certs(fs.join(tmp, 'certs'), true)
  return certs
end
teardown(function() if tmp then fs.remove_tree(tmp) end end)

N.cases({
  title = 'cseng.http native HTTPS/1.1 path against libcurl (the plain cases over TLS)',
  scheme = 'https',
  setup = ensure_certs,
  server_args = function() return { '--tls', certs.cert, certs.key } end,
  extra = function() return { http_version = '1.1', ca_file = certs.ca } end,
}, _ENV)

-- the same with http_version unset: HTTP/2 and HTTP/1.1 offered by ALPN, the server settles on
-- HTTP/1.1 (calls made meanwhile wait for that first connection's answer, then take their own)
N.cases({
  title = 'cseng.http native HTTPS path against libcurl, ALPN offering h2 (the plain cases over TLS)',
  scheme = 'https',
  setup = ensure_certs,
  server_args = function() return { '--tls', certs.cert, certs.key } end,
  extra = function() return { ca_file = certs.ca } end,
}, _ENV)

-- A raw TLS server with the given certificate (and ALPN list); returns it and its base URL.
local function tls_server(cert, alpn)
  local c = ensure_certs()
  local srv = assert(node_server.start(ROOT .. '/spec/fakes/h1_raw_server.mjs',
    { '--tls', cert and cert.cert or c.cert, cert and cert.key or c.key, alpn }))
  return srv, 'https://127.0.0.1:' .. srv.ports.port
end

-- A TCP server in python3 that accepts and then (mode) closes after reading the ClientHello,
-- or keeps silent; returns the process and its base URL.
local function tcp_server(mode)
  local dir = assert(fs.tempdir('cseng-tcp-'))
  local port_file = fs.join(dir, 'port')
  local script = [[
import os, socket, sys, time
port_file, mode = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)
open(port_file + '.tmp', 'w').write(str(s.getsockname()[1])); os.rename(port_file + '.tmp', port_file)
held = []
while True:
    c, _ = s.accept()
    if mode == 'close':
        c.recv(4096); c.close()
    else:
        held.append(c)
]]
  local p = assert(proc.spawn { argv = { 'python3', '-c', script, port_file, mode }, stdout = fs.join(dir, 'log'),
    stderr = fs.join(dir, 'log') })
  for _ = 1, 400 do
    local t = fs.read(port_file)
    if t and t:match('^%d+$') then
      return { close = function() p:close(); fs.remove_tree(dir) end }, 'https://127.0.0.1:' .. t
    end
    task.sleep(0.025)
  end
  p:close()
  error('the python server did not start: ' .. tostring(fs.read(fs.join(dir, 'log'))))
end

describe('cseng.http native HTTPS/1.1: what only TLS has, against libcurl', function()
  local srv, base
  setup(function()
    ensure_certs()
    srv, base = tls_server()
  end)
  teardown(function()
    http.configure { native = true, pools = 64 }
    if srv then srv.close() end
  end)
  after_each(function() http.configure { native = true } end)

  -- opts on both paths: the same outcome, the native one through h1.c
  local function both(opts)
    local n = run(true, opts)
    local c = run(false, opts)
    http.configure { native = true }
    assert.equal(1, n.native, 'the native run did not go through h1.c')
    assert.equal(0, c.native, 'the curl run went through h1.c')
    assert.same(norm(c), norm(n), 'native (2nd) differs from curl (1st): ' .. tostring(n.msg) .. ' / ' .. tostring(c.msg))
    return n, c
  end
  local function opts(url, extra)
    local o = { url = url, http_version = '1.1', timeout = 20 }
    for k, v in pairs(extra or {}) do o[k] = v end
    return o
  end

  it('verifies against the CA it is given; the system store does not know a private CA', function()
    local n = both(opts(base .. '/cl', { ca_file = certs.ca }))
    assert.equal('hello', n.res.body)
    n = both(opts(base .. '/cl')) -- the built-in bundle (libcurl's): this run's CA is not in it
    assert.equal('ETLS', n.code)
    assert.matches('certificate', n.msg)
    n = both(opts(base .. '/cl', { ca_file = certs.other_ca })) -- another CA's bundle
    assert.equal('ETLS', n.code)
    n = both(opts(base .. '/cl', { ca_file = fs.join(tmp, 'no-such-ca.pem') })) -- a bundle that is not there
    assert.equal('ETLS', n.code)
    n = both(opts(base .. '/cl', { ca_file = certs.cert })) -- the leaf itself: libcurl accepts a partial chain
    assert.equal('hello', n.res.body)
  end)

  it('http.configure{ca_file=} is the default bundle of requests that name none', function()
    http.configure { ca_file = certs.ca }
    local ok, n = pcall(both, opts(base .. '/cl'))
    http.configure { ca_file = false }
    assert(ok, n)
    assert.equal('hello', n.res.body)
    assert.equal('ETLS', both(opts(base .. '/cl')).code) -- false: the built-in bundle again
  end)

  it('checks the host name: the certificate\'s names and addresses pass, others fail', function()
    local port = srv.ports.port
    assert.equal('hello', both(opts('https://localhost:' .. port .. '/cl', { ca_file = certs.ca })).res.body)
    assert.equal('hello', both(opts('https://127.0.0.1:' .. port .. '/cl', { ca_file = certs.ca })).res.body)
    local s2, b2 = tls_server(certs.wronghost) -- signed by the CA, for other.invalid only
    local ok, err = pcall(function()
      local n = both(opts(b2 .. '/cl', { ca_file = certs.ca }))
      assert.equal('ETLS', n.code)
      assert.matches('127.0.0.1', n.msg)
      n = both(opts(b2 .. '/cl', { ca_file = certs.ca, insecure = true })) -- insecure: asked for
      assert.equal('hello', n.res.body)
      -- the insecure connection is not lent to a request that verifies
      n = both(opts(b2 .. '/cl', { ca_file = certs.ca }))
      assert.equal('ETLS', n.code)
    end)
    s2.close()
    assert(ok, err)
  end)

  it('refuses an expired and a self-signed certificate, unless insecure', function()
    for _, which in ipairs { 'expired', 'selfsigned' } do
      local s2, b2 = tls_server(certs[which])
      local ok, err = pcall(function()
        local n = both(opts(b2 .. '/cl', { ca_file = certs.ca }))
        assert.equal('ETLS', n.code, which)
        assert.matches(which == 'expired' and 'expired' or 'self', n.msg)
        n = both(opts(b2 .. '/cl', { insecure = true }))
        assert.equal('hello', n.res.body, which)
      end)
      s2.close()
      assert(ok, err)
    end
  end)

  it('a server that is not TLS, one that closes during the handshake, one that stays silent', function()
    -- the bench's C fake, plain: it answers a ClientHello (not HTTP) with a 400 and closes
    local dir = assert(fs.tempdir('cseng-plain-fake-'))
    local fake, url = blib.start_fake_c(dir, {})
    local ok, err = pcall(function()
      local n = both(opts(url:gsub('^http:', 'https:') .. '/zero', { ca_file = certs.ca }))
      assert.equal('ETLS', n.code)
    end)
    fake:close()
    fs.remove_tree(dir)
    assert(ok, err)
    local s, b = tcp_server('close')
    ok, err = pcall(function()
      local n = both(opts(b .. '/cl', { ca_file = certs.ca }))
      assert.equal('ETLS', n.code)
    end)
    s.close()
    assert(ok, err)
    s, b = tcp_server('silent')
    ok, err = pcall(function()
      local n = both(opts(b .. '/cl', { ca_file = certs.ca, connect_timeout = 0.3 }))
      assert.equal('ETIMEDOUT', n.code)
      n = both(opts(b .. '/cl', { ca_file = certs.ca, timeout = 0.3 }))
      assert.equal('ETIMEDOUT', n.code)
    end)
    s.close()
    assert(ok, err)
  end)

  it('a close without close_notify ends nothing: a failed read, as libcurl says; an idle one is left', function()
    local n = both(opts(base .. '/close-raw', { ca_file = certs.ca }))
    assert.equal('ECONNRESET', n.code) -- on a plain connection the same reply is a body read to the close
    local seq = {}
    for _, native in ipairs { true, false } do
      http.configure { native = native }
      local a = assert(http.request(opts(base .. '/idle-raw-close', { ca_file = certs.ca })))
      task.sleep(0.3)
      local b, msg = http.request(opts(base .. '/cl', { ca_file = certs.ca }))
      seq[#seq + 1] = { a.body, b and b.body or msg }
    end
    http.configure { native = true }
    assert.same({ { 'idle', 'hello' }, { 'idle', 'hello' } }, seq)
  end)

  it('sends SNI for a name, none for an address, and offers HTTP/1.1 by ALPN', function()
    local port = srv.ports.port
    for _, case in ipairs { { '127.0.0.1', false }, { 'localhost', 'localhost' } } do
      for _, native in ipairs { true, false } do -- (whether a session was resumed may differ)
        local r = run(native, opts('https://' .. case[1] .. ':' .. port .. '/tls-info', { ca_file = certs.ca }))
        assert.equal(native and 1 or 0, r.native)
        local info = cjson.decode(assert(r.res, r.msg).body)
        assert.equal(case[2], info.servername, case[1])
        assert.equal('http/1.1', info.alpn)
      end
    end
    http.configure { native = true }
  end)

  it('times the handshake apart: connect, then tls, then the first byte; nothing of it on a reused connection', function()
    for _, native in ipairs { true, false } do
      local s2 = tls_server() -- a new origin: no connection to it yet
      http.configure { native = native }
      local url = 'https://localhost:' .. s2.ports.port .. '/cl'
      local a = assert(http.request(opts(url, { ca_file = certs.ca })))
      local b = assert(http.request(opts(url, { ca_file = certs.ca })))
      local t = a.timings
      assert.is_true(t.connect > 0 and t.tls >= t.connect and t.ttfb >= t.tls and t.total >= t.ttfb,
        string.format('%s: connect %f tls %f ttfb %f total %f', tostring(native), t.connect, t.tls, t.ttfb, t.total))
      assert.is_true(t.answered_at >= t.started_at)
      assert.same({ 0, 0 }, { b.timings.connect, b.timings.tls }, tostring(native))
      assert.is_true(b.timings.ttfb > 0 and b.timings.total >= b.timings.ttfb)
      s2.close()
    end
    http.configure { native = true }
  end)

  it('resumes a session on the next connection of a pool, on both paths', function()
    -- a first call opens a connection and gets the server's session tickets; a slow call keeps
    -- that connection busy, so a third opens a second connection, which resumes the session
    local function scenario(native)
      local s2 = tls_server() -- a new origin: no connection to it yet
      http.configure { native = native, pools = 1 } -- (libcurl keeps sessions per multi handle)
      local url = 'https://localhost:' .. s2.ports.port
      local before = http.stats().native
      assert(http.request(opts(url .. '/cl', { ca_file = certs.ca })))
      local slow = task.spawn(http.request, opts(url .. '/slow?id=resume-' .. tostring(native), { ca_file = certs.ca }))
      task.yield()
      local r = assert(http.request(opts(url .. '/tls-info', { ca_file = certs.ca })))
      local info = cjson.decode(r.body)
      assert(slow:join())
      local after = http.stats().native
      http.configure { native = true, pools = 64 }
      s2.close()
      return info.resumed, after.tls_resumed - before.tls_resumed, after.tls_handshakes - before.tls_handshakes
    end
    assert.same({ true, 1, 2 }, { scenario(true) })
    assert.same({ true, 0, 0 }, { scenario(false) })
  end)
end)
