-- cseng.http against the engine's own loopback server (cseng.serve).
local http = require('cseng.http')
local serve = require('cseng.serve')
local task = require('cseng.task')
local clock = require('cseng.clock')

describe('cseng.http', function()
  local srv
  setup(function()
    srv = assert(serve.listen { max_connections = 2000, handler = function(req)
      if req.path == '/hold' then task.sleep(0.2); return 200, {}, 'held' end
      if req.path == '/slow' then task.sleep(2); return 200, {}, 'late' end
      if req.path == '/ctype' then
        local ct = req.headers['content-type']
        return 200, {}, ct == nil and '(absent)' or ('[' .. ct .. ']')
      end
      if req.path == '/echo' then
        return 201, { ['X-Method'] = req.method, ['X-Len'] = tostring(#req.body) }, req.body
      end
      if req.path == '/stream' then
        req:start(200, { ['Content-Type'] = 'application/x-ndjson' })
        for i = 1, 3 do
          req:write('{"n":' .. i .. '}\n')
          task.sleep(0.15)
        end
        req:finish()
        return
      end
      return 404, {}, 'no such path'
    end })
  end)
  teardown(function() srv:close() end)

  it('labels a body as curl does, sends an empty header, and omits one when asked', function()
    local function ctype(o)
      o.url, o.method, o.body = srv:url() .. '/ctype', 'PUT', 'bytes'
      return assert(http.request(o)).body
    end
    assert.equal('[application/x-www-form-urlencoded]', ctype {})
    assert.equal('[]', ctype { headers = { ['Content-Type'] = '' } })
    assert.equal('(absent)', ctype { omit_headers = { 'Content-Type' } })
    local ok, err = pcall(http.request, { url = srv:url() .. '/ctype', omit_headers = { 'Content-Type: x' } })
    assert.is_false(ok)
    assert.matches('opts.omit_headers%[1%] must be a header name', err)
  end)

  it('runs 500 requests at once: the server sees at least 400 in flight', function()
    local before = srv:stats().max_in_flight
    local ts = {}
    for i = 1, 500 do ts[i] = task.spawn(http.request, { url = srv:url() .. '/hold', timeout = 30 }) end
    local ok_count = 0
    for i = 1, 500 do
      local ok, res = ts[i]:join()
      if ok and res and res.status == 200 and res.body == 'held' then ok_count = ok_count + 1 end
    end
    assert.equal(500, ok_count)
    local peak = srv:stats().max_in_flight
    assert.is_true(peak >= 400, 'server saw only ' .. peak .. ' requests in flight at once')
    assert.is_true(peak > before or before >= 400)
  end)

  it('returns status, lowercased headers, body and curl timings; sends bodies', function()
    local body = string.rep('x', 300000)
    local res = assert(http.request { method = 'PUT', url = srv:url() .. '/echo', body = body,
      headers = { ['Content-Type'] = 'text/plain' } })
    assert.equal(201, res.status)
    assert.equal('PUT', res.headers['x-method'])
    assert.equal('300000', res.headers['x-len'])
    assert.equal(body, res.body)
    for _, k in ipairs({ 'dns', 'connect', 'tls', 'ttfb', 'total' }) do assert.is_number(res.timings[k], k) end
    assert.is_true(res.timings.ttfb <= res.timings.total)
  end)

  it('works inside pcall inside a task', function()
    local ok, res = pcall(function() return http.request { url = srv:url() .. '/echo', method = 'POST', body = 'hi' } end)
    assert.is_true(ok)
    assert.equal('hi', res.body)
  end)

  it('returns nil, message, ECONNREFUSED for a refused connection', function()
    local probe = assert(serve.listen {})
    local port = probe:port()
    probe:close()
    local res, msg, code = http.request { url = 'http://127.0.0.1:' .. port .. '/' }
    assert.is_nil(res)
    assert.equal('ECONNREFUSED', code)
    assert.matches('127.0.0.1:' .. port, msg)
  end)

  it('returns ETIMEDOUT past its timeout, without waiting for the server', function()
    local t0 = clock.now()
    local res, msg, code = http.request { url = srv:url() .. '/slow', timeout = 0.2 }
    assert.is_nil(res)
    assert.equal('ETIMEDOUT', code)
    assert.is_true((clock.now() - t0) / 1e9 < 1.5, msg)
  end)

  it('streams chunks as they arrive, before the body ends', function()
    local t0 = clock.now()
    local arrivals, chunks = {}, {}
    local res = assert(http.request { url = srv:url() .. '/stream', stream = function(chunk)
      chunks[#chunks + 1] = chunk
      arrivals[#arrivals + 1] = (clock.now() - t0) / 1e9
    end })
    assert.equal(200, res.status)
    assert.equal('{"n":1}\n{"n":2}\n{"n":3}\n', table.concat(chunks))
    assert.is_true(#chunks >= 3)
    local total = (clock.now() - t0) / 1e9
    assert.is_true(arrivals[1] < total - 0.25, 'the first chunk came before the end')
  end)

  it('lets a stream callback stop the transfer, and raise through the request', function()
    local res, _, code = http.request { url = srv:url() .. '/stream', stream = function() return false end }
    assert.is_nil(res)
    assert.equal('EABORTED', code)
    local ok, err = pcall(http.request, { url = srv:url() .. '/stream', stream = function() error('stop here') end })
    assert.is_false(ok)
    assert.matches('stop here', err)
    assert.equal(0, http.stats().in_flight)
  end)

  it('cancels an in-flight request when its task is cancelled', function()
    local t = task.spawn(http.request, { url = srv:url() .. '/slow' })
    task.sleep(0.05)
    t:cancel()
    local ok, err = t:join()
    assert.is_false(ok)
    assert.equal('ECANCELED', err.code)
    assert.equal(0, http.stats().in_flight)
  end)

  it('reuses connections between requests', function()
    local before = srv:stats().connections
    for _ = 1, 20 do assert(http.request { url = srv:url() .. '/echo' }) end
    assert.is_true(srv:stats().connections - before <= 1)
  end)
end)
