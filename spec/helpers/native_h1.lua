--- The cases of cseng.http's native HTTP/1.1 path against its libcurl path (spec/engine/http_native_spec.lua
--- runs them over plain HTTP, spec/engine/https_native_spec.lua over TLS): every case runs with
--- http.configure{native=true} and again with {native=false} against the same scripted raw server
--- (spec/fakes/h1_raw_server.mjs, node's `net` or `tls`: replies byte for byte, including the odd
--- ones), and must (a) give the same result on both paths (status, headers but date and the
--- server's own x-conn, trailers, body, http_version, or the error code; messages may differ),
--- (b) give the expected values (both paths wrong the same way still fails) and (c) have really
--- gone through h1.c (http.stats().native.requests).
---
---   local N = require 'spec.helpers.native_h1'
---   N.cases(T, _ENV)   T = {title, scheme = 'http'|'https', setup = fn (before the server starts),
---                     server_args = fn -> the raw server's arguments after its port file,
---                     extra = fn -> options under every request's own (http_version, ca_file)}
---   N.run(native, opts) -> {res, msg, code, native}   N.norm(r): what the two paths must agree on
local http = require('cseng.http')
local task = require('cseng.task')
local proc = require('cseng.proc')
local crypto = require('cseng.crypto')
local sys = require('cseng.sys')

local node_server = require('spec.fakes.node_server')

local function native_count() return http.stats().native.requests end

-- A long string as its digest, so that a failure does not print megabytes.
local function short(v)
  if type(v) == 'string' and #v > 200 then return ('%d bytes, sha256 %s'):format(#v, crypto.sha256_hex(v)) end
  return v
end

-- What the two paths must agree on.
local function norm(r)
  if not r.res then return { code = r.code } end
  local headers, trailers = {}, {}
  for k, v in pairs(r.res.headers) do
    if k ~= 'date' and k ~= 'x-conn' then headers[k] = short(v) end
  end
  for k, v in pairs(r.res.trailers) do trailers[k] = short(v) end
  return { status = r.res.status, headers = headers, trailers = trailers, body = short(r.res.body),
    http_version = r.res.http_version }
end

-- One request on one path: {res, msg, code, native = requests h1.c took}.
local function run(native, opts)
  http.configure { native = native }
  local before = native_count()
  local res, msg, code = http.request(opts)
  return { res = res, msg = msg, code = code, native = native_count() - before }
end

local free_port = require('spec.helpers.runlog').free_port

local M = { run = run, norm = norm, native_count = native_count }

--- The two-path checks of a native-path spec, for a server at base() whose requests all carry
--- extra()'s options under their own (the TLS runs' http_version and CA file). assert: the calling
--- spec's (busted's); path: the native path's name in messages ('h1.c').
---   C.both(opts) -> n, c   opts (a table, or a function of the path's name, 'native' or 'curl'):
---                          one request on each path, the same result, each on its own path
---   C.each(fn) -> n, took  a scenario of several requests, once per path: fn(name) returns what
---                          it saw, the same both times; took: the native path's request count
---   C.req(o), C.get(path, extra)   a request's options with extra()'s under them
---@param assert table
---@param path string
---@param base fun(): string
---@param extra? fun(): table
---@return table
function M.checks(assert, path, base, extra)
  local C = {}

  function C.both(opts)
    local mk = type(opts) == 'function' and opts or function() return opts end
    local n = run(true, mk('native'))
    local c = run(false, mk('curl'))
    http.configure { native = true }
    assert.equal(1, n.native, 'the native run did not go through ' .. path)
    assert.equal(0, c.native, 'the curl run went through ' .. path)
    assert.same(norm(c), norm(n), 'native (2nd) differs from curl (1st): ' .. tostring(n.msg) .. ' / ' .. tostring(c.msg))
    return n, c
  end

  function C.each(fn)
    http.configure { native = true }
    local before = native_count()
    local n = fn('native')
    local took = native_count() - before
    assert.is_true(took >= 1, 'the native run did not go through ' .. path)
    http.configure { native = false }
    before = native_count()
    local c = fn('curl')
    assert.equal(0, native_count() - before, 'the curl run went through ' .. path)
    http.configure { native = true }
    assert.same(c, n, 'native (2nd) differs from curl (1st)')
    return n, took
  end

  function C.req(o)
    for k, v in pairs(extra and extra() or {}) do
      if o[k] == nil then o[k] = v end
    end
    return o
  end

  function C.get(p, more)
    local o = { url = base() .. p, timeout = 20 }
    for k, v in pairs(more or {}) do o[k] = v end
    return C.req(o)
  end

  return C
end

function M.cases(T, env)
-- busted's functions live in the calling spec's environment (pass its _ENV)
local describe, it, setup, teardown, after_each, assert = env.describe, env.it, env.setup, env.teardown,
  env.after_each, env.assert
describe(T.title, function()
  local srv, base, uniq = nil, nil, 0
  local scheme = T.scheme or 'http'
  setup(function()
    if T.setup then T.setup() end
    srv = assert(node_server.start(sys.root() .. '/spec/fakes/h1_raw_server.mjs', T.server_args and T.server_args()))
    base = scheme .. '://127.0.0.1:' .. srv.ports.port
  end)
  teardown(function()
    http.configure { native = true }
    if srv then srv.close() end
  end)
  after_each(function() http.configure { native = true } end)

  local function id(prefix)
    uniq = uniq + 1
    return prefix .. uniq
  end

  local C = M.checks(assert, 'h1.c', function() return base end, T.extra)
  local both, each, req, get = C.both, C.each, C.req, C.get

  -- the child clients' arguments after their own: the TLS run's http_version and CA file
  local function child_args()
    local e = T.extra and T.extra() or {}
    if not e.ca_file then return {} end
    return { e.http_version or '', e.ca_file }
  end

  it('a Content-Length body', function()
    local n = both(get('/cl'))
    assert.equal(200, n.res.status)
    assert.equal('hello', n.res.body)
    assert.equal('5', n.res.headers['content-length'])
    assert.equal('text/plain', n.res.headers['content-type'])
    assert.equal('1.1', n.res.http_version)
    assert.same({}, n.res.trailers)
    for _, k in ipairs({ 'dns', 'connect', 'tls', 'ttfb', 'total' }) do assert.is_number(n.res.timings[k], k) end
  end)

  it('a chunked body with trailers', function()
    local n = both(get('/chunked'))
    assert.equal('hello, world', n.res.body)
    assert.equal('chunked', n.res.headers['transfer-encoding'])
    assert.same({ ['x-t'] = 'done', ['x-u'] = '42' }, n.res.trailers)
    assert.is_nil(n.res.headers['x-t'])
  end)

  it('a body delimited by the close (HTTP/1.0, no length)', function()
    local n = both(get('/close'))
    assert.equal(200, n.res.status)
    assert.equal('1.0', n.res.http_version)
    assert.equal('all of this until the close', n.res.body)
  end)

  it('an HTTP/1.0 reply without keep-alive: the next request takes a new connection', function()
    local n = each(function()
      local a = assert(http.request(get('/h10')))
      local b = assert(http.request(get('/cl')))
      return { a.status, a.body, a.http_version, b.body, a.headers['x-conn'] ~= b.headers['x-conn'] }
    end)
    assert.same({ 200, 'ok', '1.0', 'hello', true }, n)
  end)

  it('100 Continue before the real response', function()
    local n = both(get('/continue'))
    assert.equal(200, n.res.status)
    assert.equal('done', n.res.body)
    assert.equal('yes', n.res.headers['x-final'])
    assert.is_nil(n.res.headers['x-interim'])
  end)

  it('100 Continue and 103 Early Hints in the same write as the response', function()
    local n = both(get('/continue-1'))
    assert.equal(200, n.res.status)
    assert.equal('done', n.res.body)
    assert.is_nil(n.res.headers['x-interim'])
    assert.is_nil(n.res.headers['link'])
    assert.equal('yes', n.res.headers['x-final'])
  end)

  it('HEAD with a Content-Length and no body; the connection then carries the next request', function()
    local n = both(get('/head', { method = 'HEAD' }))
    assert.equal(200, n.res.status)
    assert.equal('', n.res.body)
    assert.equal('1234', n.res.headers['content-length'])
    local seq = each(function()
      local a = assert(http.request(get('/head', { method = 'HEAD' })))
      local b = assert(http.request(get('/cl')))
      return { a.body, b.status, b.body, a.headers['x-conn'] == b.headers['x-conn'] }
    end)
    assert.same({ '', 200, 'hello', true }, seq)
  end)

  it('204 and 304 without a body', function()
    local n = both(get('/204'))
    assert.equal(204, n.res.status)
    assert.equal('', n.res.body)
    assert.equal('none', n.res.headers['x-kind'])
    n = both(get('/304', { timeout = 5 })) -- a 304's Content-Length announces no body
    assert.equal(304, n.res.status)
    assert.equal('', n.res.body)
    assert.equal('"v1"', n.res.headers['etag'])
    local after = both(get('/cl')) -- the connection was not confused by the 304's length
    assert.equal('hello', after.res.body)
  end)

  it('repeated headers are joined with ", "', function()
    local n = both(get('/cookies'))
    assert.equal('a=1; Path=/, b=2', n.res.headers['set-cookie'])
    assert.equal('ok', n.res.body)
  end)

  it('a header with an empty value', function()
    local n = both(get('/empty-header'))
    assert.equal('', n.res.headers['x-empty'])
    assert.equal('', n.res.headers['x-spaces'])
    assert.equal('ok', n.res.body)
  end)

  it('a 5 MiB chunked body', function()
    local parts = {}
    for i = 0, 79 do parts[#parts + 1] = string.rep(string.char(65 + i % 26), 65536) end
    local want = table.concat(parts)
    local n = both(get('/big', { timeout = 60 }))
    assert.equal(5 * 1024 * 1024, #n.res.body)
    assert.is_true(n.res.body == want, 'the 5 MiB body differs from what was sent')
  end)

  it('a reply dribbled 3 bytes at a time', function()
    local n = both(get('/dribble'))
    assert.equal(200, n.res.status)
    assert.equal('abcdefghijklmnopqrstuvwxyz', n.res.body)
    assert.equal('yes', n.res.headers['x-dribbled'])
  end)

  it('a reply cut inside its body: ECONNRESET', function()
    local n = both(get('/truncated'))
    assert.is_nil(n.res)
    assert.equal('ECONNRESET', n.code)
  end)

  it('a connection closed without a reply: ECONNRESET', function()
    local n = both(get('/noreply'))
    assert.is_nil(n.res)
    assert.equal('ECONNRESET', n.code)
  end)

  it('garbage instead of a status line: the same code on both paths (EURL, as libcurl says)', function()
    -- libcurl reads a reply without "HTTP/" as HTTP/0.9, which it refuses by default
    -- (CURLE_UNSUPPORTED_PROTOCOL: "Received HTTP/0.9 when not allowed"), hence EURL
    local n = both(get('/garbage'))
    assert.is_nil(n.res)
    assert.equal('EURL', n.code)
  end)

  describe('odd replies (spec/fakes/h1_raw_server.mjs /weird): what libcurl 8.14 makes of them', function()
    -- kind -> libcurl's reading: {status, http_version, body, header, value} or an error code;
    -- the native path must read each the same way (these are the libcurl path's answers, not a
    -- judgement of the RFC's: a stricter native reading is still a difference)
    local cases = {
      { 'no-colon', 'EHTTP2' },
      { 'space-before-colon', { 200, '1.1', 'ok', 'x-sp ', 'v' } },
      { 'bad-length', 'EHTTP2' },
      { 'status-2-digits', 'EURL' },
      { 'status-999', { 999, '1.1', 'ok', 'content-length', '2' } },
      { 'bad-chunk', 'ECONNRESET' },
      { 'chunk-ext', { 200, '1.1', 'hello', 'transfer-encoding', 'chunked' } },
      { 'te-gzip-chunked', 'ECURL' },
      { 'te-identity', { 200, '1.1', 'ok', 'transfer-encoding', 'identity' } },
      { 'tab-value', { 200, '1.1', 'ok', 'x-tab', 'v\t' } },
      { 'utf8-value', { 200, '1.1', 'ok', 'x-u', 'caf\u{e9}' } },
      { 'trailer-no-chunk', { 200, '1.1', '', 'transfer-encoding', 'chunked' } },
      { 'interim-then-close', 'ECONNRESET' },
      { 'status-only', { 200, '1.1', '' } },
      { 'reason-missing-space', { 200, '1.1', 'ok', 'content-length', '2' } },
      { 'http10-keepalive', { 200, '1.0', 'ok', 'connection', 'keep-alive' } },
      { '204-with-length', { 204, '1.1', '', 'content-length', '5' } },
      { '304-chunked', { 304, '1.1', '', 'transfer-encoding', 'chunked' } },
      { 'h11-to-close', { 200, '1.1', 'until the close', 'connection', 'close' } },
    }
    for _, case in ipairs(cases) do
      local kind, want = case[1], case[2]
      it(kind, function()
        local n = both(get('/weird?kind=' .. kind, { timeout = 5 }))
        if type(want) == 'string' then
          assert.is_nil(n.res)
          assert.equal(want, n.code)
        else
          assert(n.res, n.msg)
          assert.same({ want[1], want[2], want[3] }, { n.res.status, n.res.http_version, n.res.body })
          if want[4] then assert.equal(want[5], n.res.headers[want[4]]) end
        end
      end)
    end
  end)

  it('a server that closes an idle keep-alive connection: the next request succeeds', function()
    local before = http.stats().native
    local n = each(function()
      local a = assert(http.request(get('/idle-close')))
      task.sleep(0.3)
      local b, msg = http.request(get('/cl'))
      return { a.body, b and b.status, b and b.body or msg }
    end)
    assert.same({ 'idle', 200, 'hello' }, n)
    local after = http.stats().native
    assert.is_true(after.retried > before.retried or after.connects >= before.connects + 2,
      'neither a retry nor a fresh connection for the second request')
  end)

  it('bytes after a reply: the connection is not reused, the next request is right', function()
    local n = each(function()
      local a = assert(http.request(get('/extra')))
      local b = assert(http.request(get('/cl')))
      return { a.status, a.body, b.status, b.body, b.headers['x-unasked'] or false,
        a.headers['x-conn'] ~= b.headers['x-conn'] }
    end)
    assert.same({ 200, 'ok', 200, 'hello', false, true }, n)
  end)

  it('a reused connection the server drops at the next request: sent again on a new one', function()
    local before = http.stats().native
    local n = each(function()
      local a = assert(http.request(get('/keepalive-once')))
      local b, msg = http.request(get('/cl'))
      return { a.body, b and b.body or msg, b and a.headers['x-conn'] ~= b.headers['x-conn'] }
    end)
    assert.same({ 'once', 'hello', true }, n)
    assert.equal(before.retried + 1, http.stats().native.retried)
  end)

  it('HTTP/1.1 with Connection: close: the next request takes a new connection', function()
    local n = each(function()
      local a = assert(http.request(get('/conn-close')))
      local b = assert(http.request(get('/cl')))
      return { a.body, a.headers.connection, b.body, a.headers['x-conn'] ~= b.headers['x-conn'] }
    end)
    assert.same({ 'cc', 'close', 'hello', true }, n)
  end)

  it('a status line without a reason phrase', function()
    local n = both(get('/noreason'))
    assert.equal(200, n.res.status)
    assert.equal('ok', n.res.body)
  end)

  it('lines ended by a bare LF', function()
    local n = both(get('/lf-only'))
    assert.equal(200, n.res.status)
    assert.equal('yes', n.res.headers['x-lf'])
    assert.equal('ok', n.res.body)
  end)

  it('a folded header line (obs-fold) reads the same on both paths: one value, one space', function()
    -- libcurl hands the continuation line on as a line of its own; cseng.http joins it to the
    -- header before it with one space (RFC 9112 5.2), as http_parser does on the native path
    local n = both(get('/fold'))
    assert.equal(200, n.res.status)
    assert.equal('ok', n.res.body)
    assert.equal('first second', n.res.headers['x-fold'])
  end)

  it('90 KiB of response headers (within libcurl\'s limits)', function()
    local n = both(get('/bigheaders'))
    assert.equal(200, n.res.status)
    assert.equal(string.rep('a', 45 * 1024), n.res.headers['x-big-1'])
    assert.equal(string.rep('b', 45 * 1024), n.res.headers['x-big-2'])
  end)

  it('a 1 MiB request body to a server that stops reading for 200 ms (the queued write)', function()
    local body = string.rep('0123456789abcdef', 65536)
    local n = both(get('/slowread', { method = 'POST', body = body, timeout = 30 }))
    assert.equal(200, n.res.status)
    assert.equal(tostring(#body), n.res.headers['x-len'])
    assert.equal(crypto.sha256_hex(body), n.res.headers['x-sum'])
  end)

  it('a reply that comes before the request body was sent (a 413), then more requests', function()
    -- in its own process: a crash fails this case only (spec/fakes/h1_early_client.lua)
    local out = {}
    for _, mode in ipairs({ 'native', 'curl' }) do
      local argv = { sys.root() .. '/cseng', 'lua', sys.root() .. '/spec/fakes/h1_early_client.lua', base, mode }
      for _, a in ipairs(child_args()) do argv[#argv + 1] = a end
      local r = assert(proc.run { argv = argv, timeout = 60 })
      assert.equal(0, r.code, mode .. ' client exited with ' .. tostring(r.code) .. ' (139: SIGSEGV); it printed: ' ..
        r.stdout .. r.stderr)
      local lines = {}
      for line in r.stdout:gmatch('[^\n]+') do
        local f = {}
        for field in line:gmatch('[^\t]+') do f[#f + 1] = field end
        lines[#lines + 1] = f
      end
      out[mode] = lines
    end
    local function seen(lines) -- all but the connection numbers, which differ between runs
      local t = {}
      for i, f in ipairs(lines) do t[i] = f[1] == 'done' and { 'done' } or { f[1], f[2], f[3], f[5] } end
      return t
    end
    assert.same(seen(out.curl), seen(out.native))
    local want = {}
    for _ = 1, 3 do
      want[#want + 1] = { 'early', '413', 'too big!', 'nil' }
      for i = 1, 3 do want[#want + 1] = { 'next' .. i, '200', 'hello', 'nil' } end
    end
    want[#want + 1] = { 'done' }
    assert.same(want, seen(out.native))
    assert.equal('12', out.native[13][2], 'the native client did not go through h1.c')
    assert.equal('0', out.curl[13][2], 'the curl client went through h1.c')
  end)

  -- Where the native path is stricter than libcurl, by design: a response whose length is
  -- ambiguous (RFC 9112 6.3: a Content-Length beside chunking, or lengths that differ or repeat,
  -- "ought to be handled as an error": it is how responses are split and smuggled) is EHTTP2
  -- there, and a status line that is not HTTP/1.x ("HTTP/2 200" on an HTTP/1.1 connection,
  -- lower-case "http/1.1") is EURL, as libcurl's own answer to a reply that is not HTTP at all.
  -- libcurl reads each of them; both readings are pinned, so a change on either path fails.
  describe('stricter than libcurl, by design', function()
    local stricter = {
      { '/cl-and-te', 'EHTTP2', { 200, '1.1', 'hello' } },
      { '/weird?kind=two-lengths', 'EHTTP2', { 200, '1.1', 'ok!' } },
      { '/weird?kind=same-two-lengths', 'EHTTP2', { 200, '1.1', 'ok' } },
      { '/weird?kind=http2-line', 'EURL', { 200, '1.0', 'ok' } },
      { '/weird?kind=http11-lower', 'EURL', { 200, '1.0', 'ok' } },
    }
    for _, case in ipairs(stricter) do
      local path, native_code, curl_reads = case[1], case[2], case[3]
      it(path, function()
        local n = run(true, get(path, { timeout = 5 }))
        local c = run(false, get(path, { timeout = 5 }))
        http.configure { native = true }
        assert.equal(1, n.native, 'the native run did not go through h1.c')
        assert.equal(0, c.native, 'the curl run went through h1.c')
        assert.is_nil(n.res, 'the native path read it')
        assert.equal(native_code, n.code, n.msg)
        assert(c.res, c.msg)
        assert.same(curl_reads, { c.res.status, c.res.http_version, c.res.body })
      end)
    end
  end)

  it('localhost (resolved; ::1 refused, 127.0.0.1 answers) and a URL fragment', function()
    local n = both(req { url = scheme .. '://localhost:' .. srv.ports.port .. '/echo-raw#frag', timeout = 20 })
    assert.equal(200, n.res.status)
    assert.truthy(n.res.body:find('GET /echo-raw HTTP/1.1\r\n', 1, true))
    assert.truthy(n.res.body:find('\r\nHost: localhost:' .. srv.ports.port .. '\r\n', 1, true))
  end)

  -- h1_url_split keeps the last authority it took (host and port split once): URLs of one
  -- origin, one that starts with it (its port and a 0: past 65535, not the native path's),
  -- another name for it, a longer address, a refused port, in turn, twice: each answered as on
  -- libcurl's path (its own Host, or the same error code)
  it('URLs of several authorities in turn read as on libcurl\'s path', function()
    local p = tostring(srv.ports.port)
    local auths = { '127.0.0.1:' .. p, '127.0.0.1:' .. p .. '0', 'localhost:' .. p, '127.0.0.10:' .. p,
      '127.0.0.1:' .. free_port(), '127.0.0.1:' .. p }
    local function read(r) return r.res and r.res.body:match('\r\nHost: ([^\r]*)\r\n') or r.code end
    local took = 0
    for round = 1, 2 do
      for _, auth in ipairs(auths) do
        local opts = req { url = scheme .. '://' .. auth .. '/echo-raw?r=' .. round, timeout = 20 }
        local n = run(true, opts)
        local c = run(false, opts)
        took = took + n.native
        assert.equal(read(c), read(n), auth)
      end
    end
    http.configure { native = true }
    assert.is_true(took >= 10) -- the port past 65535 is not the native path's
  end)

  describe('the request as the server received it', function()
    -- the head as a set of lines (header order is no contract: a user Host takes curl's place
    -- at the top on libcurl's path), and the body
    local function sent(opts)
      local n = run(true, get('/echo-raw', opts))
      local c = run(false, get('/echo-raw', opts))
      http.configure { native = true }
      assert.equal(1, n.native, 'the native run did not go through h1.c')
      assert.equal(0, c.native, 'the curl run went through h1.c')
      assert(n.res, n.msg)
      assert(c.res, c.msg)
      local function set(r)
        local s = {}
        for line in r.res.body:gmatch('(.-)\r\n') do
          if line ~= '' then s[line] = true end
        end
        return s
      end
      assert.same(set(c), set(n))
      assert.equal(c.res.headers['x-body'], n.res.headers['x-body'])
      return set(n), crypto.unhex(n.res.headers['x-body'] or '')
    end
    local function host() return 'Host: 127.0.0.1:' .. srv.ports.port end

    it('a GET: Host and Accept, nothing else', function()
      local s = sent {}
      assert.same({ ['GET /echo-raw HTTP/1.1'] = true, [host()] = true, ['Accept: */*'] = true }, s)
    end)

    it('a POST body: Content-Length and the form Content-Type', function()
      local s, body = sent { method = 'POST', body = 'a=1&b=2' }
      assert.same({ ['POST /echo-raw HTTP/1.1'] = true, [host()] = true, ['Accept: */*'] = true,
        ['Content-Length: 7'] = true, ['Content-Type: application/x-www-form-urlencoded'] = true }, s)
      assert.equal('a=1&b=2', body)
    end)

    it('a POST without a body: Content-Length 0', function()
      local s = sent { method = 'POST' }
      assert.is_true(s['Content-Length: 0'])
      assert.is_true(s['Content-Type: application/x-www-form-urlencoded'])
    end)

    it('a header given "" is sent empty; a number is sent as text', function()
      local s = sent { method = 'PUT', body = 'x', headers = { ['X-Empty'] = '', ['X-Num'] = 42 } }
      assert.is_true(s['X-Empty:'], 'X-Empty: sent empty')
      assert.is_true(s['X-Num: 42'])
      assert.is_true(s['PUT /echo-raw HTTP/1.1'])
    end)

    it('omit_headers removes the Content-Type', function()
      local s = sent { method = 'POST', body = 'x', omit_headers = { 'Content-Type' } }
      assert.same({ ['POST /echo-raw HTTP/1.1'] = true, [host()] = true, ['Accept: */*'] = true,
        ['Content-Length: 1'] = true }, s)
    end)

    it('a user Accept replaces curl\'s; a user Content-Type and Host replace the defaults', function()
      local s = sent { method = 'POST', body = '{}', headers = { Accept = 'application/json',
        ['Content-Type'] = 'application/json', Host = 'example.test' } }
      assert.same({ ['POST /echo-raw HTTP/1.1'] = true, ['Host: example.test'] = true,
        ['Accept: application/json'] = true, ['Content-Type: application/json'] = true,
        ['Content-Length: 2'] = true }, s)
    end)

    it('a DELETE with a body and an OPTIONS without one', function()
      local s, body = sent { method = 'DELETE', body = 'gone' }
      assert.same({ ['DELETE /echo-raw HTTP/1.1'] = true, [host()] = true, ['Accept: */*'] = true,
        ['Content-Length: 4'] = true, ['Content-Type: application/x-www-form-urlencoded'] = true }, s)
      assert.equal('gone', body)
      s = sent { method = 'OPTIONS' }
      assert.same({ ['OPTIONS /echo-raw HTTP/1.1'] = true, [host()] = true, ['Accept: */*'] = true }, s)
    end)

    it('the query string goes as written', function()
      local s = sent { url = base .. '/echo-raw?a=1&b=%20x' }
      assert.is_true(s['GET /echo-raw?a=1&b=%20x HTTP/1.1'])
    end)
  end)

  it('ETIMEDOUT past the timeout, before the server answered', function()
    local ids = {}
    local n = both(function(path)
      ids[path] = id('t')
      return get('/slow?id=' .. ids[path], { timeout = 0.2 })
    end)
    assert.is_nil(n.res)
    assert.equal('ETIMEDOUT', n.code)
    for _, path in ipairs({ 'native', 'curl' }) do
      local st = assert(http.request(get('/slow-state?id=' .. ids[path])))
      assert.equal('pending', st.body, path .. ' returned only once the server had answered')
    end
  end)

  -- h1.c leaves a connection's timer running from one call to the next (arm_timer): a call
  -- with a nearer deadline than the one the timer runs for must start it again, and a firing
  -- meant for an earlier call must not end a later one that has time left.
  it('each call on a reused connection keeps its own timeout', function()
    local n = each(function()
      local seen = {}
      local r1 = assert(http.request(get('/cl', { timeout = 60 })))
      local sid = id('r')
      local r2, _, c2 = http.request(get('/slow?id=' .. sid, { timeout = 0.2 }))
      local st = assert(http.request(get('/slow-state?id=' .. sid)))
      seen[#seen + 1] = { r1.body, r2 == nil, c2, st.body }
      local r3 = assert(http.request(get('/cl', { timeout = 0.1 })))
      local parts = {}
      -- five parts 50 ms apart: past r3's 0.1 s, within its own 5 s
      local r4, m4 = http.request(get('/stream', { timeout = 5, stream = function(c) parts[#parts + 1] = c end }))
      assert(r4, m4)
      seen[#seen + 1] = { r3.body, r4.status, table.concat(parts), r4.headers['x-conn'] == r3.headers['x-conn'] }
      return seen
    end)
    assert.same({ { 'hello', true, 'ETIMEDOUT', 'pending' },
      { 'hello', 200, 'part 1;part 2;part 3;part 4;part 5;', true } }, n)
  end)

  it('a refused port: ECONNREFUSED', function()
    local port = free_port()
    local n = both(req { url = scheme .. '://127.0.0.1:' .. port .. '/', timeout = 20 })
    assert.is_nil(n.res)
    assert.equal('ECONNREFUSED', n.code)
    assert.matches('127.0.0.1', n.msg)
  end)

  it('a name that does not resolve: ENOTFOUND', function()
    local n = both(req { url = scheme .. '://nonexistent.invalid/', timeout = 20 })
    assert.is_nil(n.res)
    assert.equal('ENOTFOUND', n.code)
  end)

  it('a body past max_body: EBODY; one at max_body is fine', function()
    local n = both(get('/big', { max_body = 100000 }))
    assert.is_nil(n.res)
    assert.equal('EBODY', n.code)
    n = both(get('/cl', { max_body = 5 }))
    assert.equal('hello', n.res.body)
  end)

  it('a stream callback gets the chunks; returning false stops with EABORTED', function()
    local got = {}
    local n = both(function(path)
      got[path] = {}
      return get('/stream', { stream = function(chunk) got[path][#got[path] + 1] = chunk end })
    end)
    assert.equal(200, n.res.status)
    assert.equal('', n.res.body)
    assert.equal('part 1;part 2;part 3;part 4;part 5;', table.concat(got.native))
    assert.equal(table.concat(got.curl), table.concat(got.native))
    local calls = {}
    n = both(function(path)
      calls[path] = 0
      return get('/stream', { stream = function()
        calls[path] = calls[path] + 1
        return false
      end })
    end)
    assert.is_nil(n.res)
    assert.equal('EABORTED', n.code)
    assert.same({ native = 1, curl = 1 }, calls)
    assert.equal(0, http.stats().in_flight)
  end)

  it("a stream callback's first call carries the response's status and headers, later calls none", function()
    local function heads(path)
      local seen = {}
      local res = assert(http.request(get(path, { stream = function(_, head)
        local h = head and { status = head.status, conn = head.headers['x-conn'] ~= nil,
          te = head.headers['transfer-encoding'], ct = head.headers['content-type'], fold = head.headers['x-fold'],
          interim = head.headers['x-interim'], final = head.headers['x-final'] }
        seen[#seen + 1] = h or false
      end })))
      local later = 'none'
      if #seen > 1 then later = seen[#seen] end
      return { status = res.status, first = seen[1], later = later }
    end
    local n = each(function() return { heads('/stream'), heads('/continue'), heads('/cl'), heads('/fold') } end)
    assert.same({ status = 200, first = { status = 200, conn = true, te = 'chunked' }, later = false }, n[1])
    assert.same({ status = 200, conn = true, final = 'yes' }, n[2].first) -- the final response's, not the 100's
    assert.same({ status = 200, conn = true, ct = 'text/plain' }, n[3].first)
    assert.same({ status = 200, conn = true, fold = 'first second' }, n[4].first)
  end)

  it('a task cancelled mid-request; a new request to the same origin then works', function()
    local before = native_count()
    local n = each(function()
      local t = task.spawn(http.request, get('/slow?id=' .. id('c')))
      task.sleep(0.05)
      t:cancel()
      local ok, err = t:join()
      local r = http.request(get('/cl'))
      return { ok, type(err) == 'table' and err.code or tostring(err), r and r.body, http.stats().in_flight }
    end)
    assert.same({ false, 'ECANCELED', 'hello', 0 }, n)
    assert.is_true(native_count() - before >= 2)
  end)

  it('500 requests at once through the native path all succeed', function()
    http.configure { native = true }
    local before = native_count()
    local ts = {}
    for i = 1, 500 do ts[i] = task.spawn(http.request, get('/hold', { timeout = 60 })) end
    local good, bad = 0, nil
    for i = 1, 500 do
      local ok, res, msg = ts[i]:join()
      if ok and res and res.status == 200 and res.body == 'held' then good = good + 1
      else bad = bad or tostring(msg or res) end
    end
    assert.equal(500, good, bad)
    assert.equal(500, native_count() - before)
    assert.equal(0, http.stats().in_flight)
  end)

  it('a timeout while the request body is still queued; the origin then works', function()
    local n = both(get('/slowread', { method = 'POST', body = string.rep('q', 4 * 1024 * 1024), timeout = 0.1 }))
    assert.equal('ETIMEDOUT', n.code)
    n = both(get('/cl'))
    assert.equal('hello', n.res.body)
  end)

  it('a connection limit, a proxy variable or CSENG_HTTP=curl send requests through libcurl', function()
    http.configure { max_host_connections = 4 }
    local ok, r = pcall(run, true, get('/cl'))
    http.configure { max_host_connections = 0, native = true }
    assert(ok, r)
    assert.equal('hello', r.res.body)
    assert.equal(0, r.native, 'a limited request went through h1.c')
    assert.equal(1, run(true, get('/cl')).native, 'the limit, lifted, still keeps h1.c out')
    local function child(...)
      local argv = { 'env', ... }
      for _, a in ipairs({ sys.root() .. '/cseng', 'lua', sys.root() .. '/spec/fakes/h1_env_client.lua', base .. '/cl' }) do
        argv[#argv + 1] = a
      end
      for _, a in ipairs(child_args()) do argv[#argv + 1] = a end
      local c = assert(proc.run { argv = argv, timeout = 60 })
      assert.equal(0, c.code, c.stderr)
      local f = {}
      for field in c.stdout:gsub('\n$', ''):gmatch('[^\t]+') do f[#f + 1] = field end
      return f
    end
    assert.same({ 'false', '0', '200', 'hello' }, child('CSENG_HTTP=curl'))
    assert.same({ 'true', '1', '200', 'hello' }, child('CSENG_HTTP=native'))
    -- a proxy that refuses: libcurl's path tries it (and fails), h1.c is not asked
    local f = child('CSENG_HTTP=native', scheme .. '_proxy=http://127.0.0.1:' .. free_port())
    assert.same({ 'true', '0', 'ECONNREFUSED' }, { f[1], f[2], f[3] })
  end)

  it('the native stats are consistent after all this', function()
    local st = http.stats().native
    assert.is_true(st.enabled)
    assert.is_true(st.open >= st.idle and st.idle >= 0)
    assert.is_true(st.connects >= 1 and st.reused >= 1)
  end)
end)
end

return M
