-- HTTP/2 in cseng.http (engine/lhttp.c on Debian's libcurl + nghttp2) against node's own http2
-- module (spec/fakes/h2_server.mjs: an independent implementation), cleartext h2 with prior
-- knowledge on loopback: multiplexing (100 requests from 100 tasks open at once on ONE
-- connection, counted by the server), response trailers, binary bodies, a server stream
-- arriving chunk by chunk before its end, an HTTP/1.1-only server refused with one clear error,
-- and option errors raised before anything is allocated.
local http = require('cseng.http')
local task = require('cseng.task')
local cjson = require('cjson')
local sys = require('cseng.sys')

local node_server = require('spec.fakes.node_server')

describe('cseng.http over HTTP/2', function()
  local srv, base, h1
  setup(function()
    srv = assert(node_server.start(sys.root() .. '/spec/fakes/h2_server.mjs'))
    base = 'http://127.0.0.1:' .. srv.ports.h2
    h1 = 'http://127.0.0.1:' .. srv.ports.h1
  end)
  teardown(function() if srv then srv.close() end end)

  local function stats()
    local r = assert(http.request { url = base .. '/stats', http_version = '2', timeout = 30 })
    return cjson.decode(r.body)
  end

  it('100 requests from 100 tasks are open at the same time on ONE connection', function()
    -- libcurl 8.14 multiplexes on a cleartext HTTP/2 connection only once a response came back on
    -- it (url_match_http_multiplex: httpversion_seen), so the first request goes alone; requests
    -- made meanwhile wait for it (engine/lhttp.c h2origin, CURLOPT_PIPEWAIT), not one connection each
    stats()
    local ts = {}
    for i = 1, 100 do
      ts[i] = task.spawn(http.request, { url = base .. '/barrier?n=100', http_version = '2', timeout = 60 })
    end
    local ok = 0
    for i = 1, 100 do
      local _, r, err = ts[i]:join()
      if r and r.status == 200 and r.body == 'released with 100 open' and r.http_version == '2' then ok = ok + 1
      else print('request ' .. i .. ': ' .. tostring(err)) end
    end
    assert.equal(100, ok)
    local after = stats()
    -- the server answers /barrier only once 100 of them are open at once: they were multiplexed
    assert.is_true(after.max_open >= 100, 'max open streams ' .. tostring(after.max_open))
    assert.equal(1, after.sessions, 'one connection in all')
  end)

  it('a POST with a binary body comes back whole, with HTTP/2 and the trailers in res.trailers', function()
    local body = ''
    for i = 0, 255 do body = body .. string.char(i) end
    body = body:rep(300) -- 76800 bytes, every byte value, NULs included
    local r = assert(http.request { url = base .. '/echo', method = 'POST', body = body, http_version = '2',
      headers = { ['content-type'] = 'application/octet-stream' } })
    assert.equal(200, r.status)
    assert.equal('2', r.http_version)
    assert.equal(#body, #r.body)
    assert.equal(body, r.body)
    assert.equal('application/octet-stream', r.headers['content-type'])
    assert.equal('yes', r.trailers['x-trailer'])
    assert.equal('0', r.trailers['grpc-status'])
    assert.equal('all%20good', r.trailers['grpc-message'])
    assert.equal(tostring(#body), r.trailers['x-len'])
    assert.is_nil(r.headers['grpc-status'], 'trailers are not mixed into the headers')
    assert.is_number(r.timings.ttfb)
  end)

  it('sequential requests reuse the connection too (the libcurl 7.88 prior-knowledge reuse bug is avoided)', function()
    local before = stats()
    for _ = 1, 5 do
      local r = assert(http.request { url = base .. '/echo', method = 'POST', body = 'x', http_version = '2-prior-knowledge' })
      assert.equal('x', r.body)
    end
    assert.equal(before.sessions, stats().sessions)
  end)

  it('a server stream arrives in chunks before its end (each chunk is released by the previous one)', function()
    local chunks, got = {}, ''
    local r, err = http.request { url = base .. '/stream?id=s1&n=4', http_version = '2', timeout = 60,
      stream = function(chunk)
        got = got .. chunk
        chunks[#chunks + 1] = chunk
        local k = select(2, got:gsub(';', ';'))
        -- the server sends chunk k+1 only after this release: the stream cannot have ended yet
        if k < 4 then assert(http.request { url = base .. '/release?id=s1', http_version = '2' }) end
      end }
    assert(r, err)
    assert.equal(200, r.status)
    assert.equal('chunk 1;chunk 2;chunk 3;chunk 4;', got)
    assert.equal(4, #chunks)
  end)

  it('an HTTP/1.1-only server: one clear EHTTP2 error with prior knowledge; HTTP/1.1 still works', function()
    for _, v in ipairs({ '2', '2-prior-knowledge' }) do
      local r, err, code = http.request { url = h1 .. '/', http_version = v, timeout = 30 }
      assert.is_nil(r)
      assert.equal('EHTTP2', code)
      assert.truthy(err:find(h1 .. '/: no HTTP/2 response (is the server HTTP/1.1 only?)', 1, true), err)
    end
    local r = assert(http.request { url = h1 .. '/', http_version = '1.1' })
    assert.equal('1.1', r.http_version)
    assert.equal('HTTP/1.1 only', r.body)
    assert.same({}, r.trailers)
  end)
end)

describe('http.request option errors name the option and allocate nothing', function()
  local cases = {
    { { url = 5 }, 'http.request: opts.url must be a string, got number' },
    { { url = 'http://127.0.0.1:1/', body = 5 }, 'http.request: opts.body must be a string, got number' },
    { { url = 'http://127.0.0.1:1/', method = true }, 'http.request: opts.method must be a string, got boolean' },
    { { url = 'http://127.0.0.1:1/', timeout = 'x' }, 'http.request: opts.timeout must be a number, got string' },
    { { url = 'http://127.0.0.1:1/', timeout = -1 }, 'http.request: opts.timeout must be >= 0' },
    { { url = 'http://127.0.0.1:1/', headers = 'x' }, 'http.request: opts.headers must be a table, got string' },
    { { url = 'http://127.0.0.1:1/', headers = { A = {} } }, "http.request: opts.headers['A'] must be a string or a number, got table" },
    { { url = 'http://127.0.0.1:1/', stream = 1 }, 'http.request: opts.stream must be a function, got number' },
    { { url = 'http://127.0.0.1:1/', follow = 1 }, 'http.request: opts.follow must be a boolean, got number' },
    { { url = 'http://127.0.0.1:1/', unix_socket = 1 }, 'http.request: opts.unix_socket must be a string, got number' },
    { { url = 'http://127.0.0.1:1/', http_version = '3' }, "http.request: opts.http_version must be '1.1', '2' or '2-prior-knowledge', got '3'" },
  }
  for _, c in ipairs(cases) do
    it(c[2], function()
      local before = http.stats()
      local ok, err = pcall(http.request, c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
      assert.equal(before.started, http.stats().started)
      assert.equal(before.in_flight, http.stats().in_flight)
    end)
  end
end)
