-- The model proxy of installed agents (lua/cseng/evals/proxy.lua) against a loopback upstream that
-- records what reached it: the token is swapped for the real key (in the header style the client
-- used) and never forwarded; answers stream through as they come (the upstream sends its last
-- event only once the client has read the first: a proxy that buffered would never deliver it);
-- usage is read from JSON and SSE answers of the three APIs and priced; an unknown, revoked or
-- other trial's token, and a route outside the model API, never reach the upstream; the key an
-- upstream echoes never reaches the client; the spend ceiling refuses model requests with 402;
-- revoking a grant ends its requests in flight. Plus the choice between the proxy and the key in
-- the sandbox, per provider. Verdicts are contents and counts, never durations.
local serve = require('cseng.serve')
local http = require('cseng.http')
local task = require('cseng.task')
local jsonl = require('cseng.lib.jsonl')
local ledger = require('cseng.evals.ledger')
local proxy = require('cseng.evals.proxy')

local KEY = 'sk-real-0123456789abcdef0123456789abcdef'
local OPTIONS = { llm_price_in = 1, llm_price_out = 2 } -- USD per 1M tokens

local function sse(events)
  local out = {}
  for _, e in ipairs(events) do out[#out + 1] = 'event: ' .. tostring(e.type) .. '\ndata: ' .. jsonl.encode(e) .. '\n\n' end
  return table.concat(out)
end

-- The upstream: every request recorded ({method, path, query, headers, body}); routes below.
local function upstream()
  local U = { seen = {}, gate = task.semaphore(0), hang = task.semaphore(0) }
  U.srv = assert(serve.listen { handler = function(req)
    U.seen[#U.seen + 1] = { method = req.method, path = req.path, query = req.query, headers = req.headers, body = req.body }
    local body = req.body ~= '' and jsonl.decode(req.body) or {}
    if req.path == '/v1/responses' and body.mode == 'echo' then
      -- an error that quotes the key, in pieces that split it
      req:start(401, { ['Content-Type'] = 'application/json' })
      local text = '{"error":{"message":"Incorrect API key provided: ' .. KEY .. '. Check it."}}'
      for i = 1, #text, 7 do req:write(text:sub(i, i + 6)) end
      return
    elseif req.path == '/v1/responses' and body.mode == 'hang' then
      U.hang:acquire() -- never released: only a cancelled handler ends
      return 200, {}, ''
    elseif req.path == '/v1/responses' and body.stream then
      req:start(200, { ['Content-Type'] = 'text/event-stream', ['X-Request-Id'] = 'req_1' })
      req:write(sse { { type = 'response.created', response = { id = 'resp_1', status = 'in_progress' } } })
      U.gate:acquire() -- the client has read the first event
      req:write(sse { { type = 'response.output_text.delta', delta = 'hi' },
        { type = 'response.completed', response = { id = 'resp_1', model = 'm-1', status = 'completed',
          usage = { input_tokens = 100, output_tokens = 10, input_tokens_details = { cached_tokens = 40 },
            output_tokens_details = { reasoning_tokens = 3 } } } } })
      return
    elseif req.path == '/v1/responses' then
      return 200, { ['Content-Type'] = 'application/json' }, jsonl.encode { id = 'resp_j', object = 'response', model = 'm-1',
        usage = { input_tokens = 1000, output_tokens = 100 } }
    elseif req.path == '/v1/chat/completions' then
      local so = type(body.stream_options) == 'table' and body.stream_options or {}
      U.include_usage = so.include_usage
      local chunks = { { id = 'c1', object = 'chat.completion.chunk', choices = { { delta = { content = 'hi' } } } } }
      if so.include_usage then
        chunks[2] = { id = 'c1', object = 'chat.completion.chunk', model = 'm-2', choices = jsonl.array(),
          usage = { prompt_tokens = 500, completion_tokens = 20, prompt_tokens_details = { cached_tokens = 100 }, cost = 0.25 } }
      end
      local out = {}
      for _, c in ipairs(chunks) do out[#out + 1] = 'data: ' .. jsonl.encode(c) .. '\n\n' end
      out[#out + 1] = 'data: [DONE]\n\n'
      return 200, { ['Content-Type'] = 'text/event-stream' }, table.concat(out)
    elseif req.path == '/anth/v1/messages' then
      return 200, { ['Content-Type'] = 'text/event-stream' }, sse {
        { type = 'message_start', message = { id = 'msg_1', model = 'claude-x', usage = { input_tokens = 200,
          cache_read_input_tokens = 50, cache_creation_input_tokens = 25, output_tokens = 1 } } },
        { type = 'content_block_delta', index = 0, delta = { type = 'text_delta', text = 'hi' } },
        { type = 'message_delta', delta = { stop_reason = 'end_turn' }, usage = { output_tokens = 30 } },
        { type = 'message_stop' } }
    elseif req.path == '/v1/models' or req.path == '/anth/v1/models' then
      return 200, { ['Content-Type'] = 'application/json' }, '{"data":[]}'
    end
    return 404, {}, 'no route'
  end })
  U.url = U.srv:url()
  return U
end

local U, P
setup(function()
  U = upstream()
  P = proxy.start()
end)
teardown(function()
  P:close()
  U.srv:close()
end)

local function call(base, path, token, o)
  o = o or {}
  local headers = { ['Content-Type'] = 'application/json' }
  if token then
    if o.style == 'x-api-key' then headers['x-api-key'] = token else headers['Authorization'] = 'Bearer ' .. token end
  end
  local body = o.body
  if body == nil and o.method ~= 'GET' then body = '{}' end
  return http.request { url = base .. path, method = o.method or 'POST', headers = headers, body = body, timeout = 60,
    stream = o.stream }
end

local function grant(o)
  local g = { api = 'openai', upstream = U.url .. '/v1', api_key = KEY, model = 'm-1', options = OPTIONS, trial = 'T' }
  for k, v in pairs(o or {}) do g[k] = v end
  return P:grant(g)
end

describe('the model proxy', function()
  it('swaps the token for the key, streams SSE through as it comes, and counts the answer\'s usage', function()
    local g = grant()
    assert.equal(P.url .. '/v1', g.base_url)
    local n, chunks, head_status = #U.seen, {}, nil
    local res = assert(call(g.base_url, '/responses', g.token, { body = '{"stream":true,"model":"m-1"}',
      stream = function(chunk, head)
        if head then head_status = head.status end
        chunks[#chunks + 1] = chunk
        -- the first event arrived while the upstream waits: only now may it send the rest
        if #chunks == 1 and chunk:find('response.created', 1, true) then U.gate:release() end
      end }))
    assert.equal(200, res.status)
    assert.equal(200, head_status)
    assert.equal('text/event-stream', res.headers['content-type'])
    assert.equal('req_1', res.headers['x-request-id'])
    local body = table.concat(chunks)
    assert.truthy(body:find('response.created', 1, true))
    assert.truthy(body:find('response.completed', 1, true))
    assert.is_true(#chunks >= 2)
    -- what the upstream got: the key, never the token
    assert.equal(n + 1, #U.seen)
    local seen = U.seen[#U.seen]
    assert.equal('/v1/responses', seen.path)
    assert.equal('Bearer ' .. KEY, seen.headers['authorization'])
    assert.is_nil(seen.headers['x-api-key'])
    for k, v in pairs(seen.headers) do assert.falsy(v:find(g.token, 1, true), k) end
    assert.falsy(seen.body:find(g.token, 1, true))
    local u = g.usage()
    assert.equal(1, u.requests)
    assert.equal(1, u.responses)
    assert.equal(100, u.prompt_tokens)
    assert.equal(40, u.cached_tokens)
    assert.equal(10, u.completion_tokens)
    assert.equal(3, u.reasoning_tokens)
    assert.equal('m-1', u.response_model)
    assert.equal('prices', u.cost_source)
    assert.near((60 * 1 + 40 * 1 + 10 * 2) / 1e6, u.cost_usd, 1e-15)
    assert.equal(1, u.statuses['200'])
    g.revoke()
  end)

  it('reads usage from a JSON answer, from Messages (x-api-key, a base path) and from Chat Completions', function()
    local g = grant()
    local res = assert(call(g.base_url, '/responses', g.token, { body = '{"model":"m-1"}' }))
    assert.equal(200, res.status)
    assert.equal('resp_j', jsonl.decode(res.body).id)
    local u = g.usage()
    assert.equal(1000, u.prompt_tokens)
    assert.equal(100, u.completion_tokens)
    assert.near((1000 + 200) / 1e6, u.cost_usd, 1e-15)

    -- Anthropic: the key goes as the client sent the token (x-api-key), under the upstream's base path
    local a = grant { api = 'anthropic', upstream = U.url .. '/anth', model = 'claude-x' }
    assert.equal(P.url .. '/anth', a.base_url)
    res = assert(call(a.base_url, '/v1/messages', a.token, { style = 'x-api-key', body = '{"stream":true}' }))
    assert.equal(200, res.status)
    local seen = U.seen[#U.seen]
    assert.equal('/anth/v1/messages', seen.path)
    assert.equal(KEY, seen.headers['x-api-key'])
    assert.is_nil(seen.headers['authorization'])
    u = a.usage()
    assert.equal(200 + 50 + 25, u.prompt_tokens) -- every input token, cache reads and writes included
    assert.equal(50, u.cached_tokens)
    assert.equal(25, u.cache_creation_tokens)
    assert.equal(30, u.completion_tokens) -- message_delta's cumulative count, not message_start's 1
    assert.near((200 * 1 + 50 * 1 + 25 * 1 + 30 * 2) / 1e6, u.cost_usd, 1e-15)

    -- Chat Completions: a streamed request is asked for its usage; the provider's cost is taken
    local c = grant()
    U.include_usage = nil
    res = assert(call(c.base_url, '/chat/completions', c.token, { body = '{"model":"m-2","stream":true,"messages":[]}' }))
    assert.equal(200, res.status)
    assert.is_true(U.include_usage)
    assert.truthy(res.body:find('[DONE]', 1, true))
    u = c.usage()
    assert.equal(500, u.prompt_tokens)
    assert.equal(100, u.cached_tokens)
    assert.equal(20, u.completion_tokens)
    assert.equal(0.25, u.cost_usd)
    assert.equal('provider', u.cost_source)
    -- a request that says stream_options itself is left as it is
    U.include_usage = nil
    res = assert(call(c.base_url, '/chat/completions', c.token,
      { body = '{"model":"m-2","stream":true,"stream_options":{"include_usage":false},"messages":[]}' }))
    assert.equal(200, res.status)
    assert.is_false(U.include_usage)
    u = c.usage()
    assert.equal(1, u.responses_without_usage)
    assert.equal('partial', u.cost_source)
    g.revoke(); a.revoke(); c.revoke()
  end)

  it('refuses unknown and revoked tokens, other routes, and a revoked trial\'s tokens, without contacting the upstream', function()
    local g1 = grant { trial = 'A' }
    local g2 = grant { trial = 'A' }
    local other = grant { trial = 'B' }
    local n = #U.seen
    local function status(base, path, token, o)
      local res = assert(call(base, path, token, o))
      return res.status, jsonl.decode(res.body)
    end
    -- no credential, a made-up one, the key itself: refused
    assert.equal(401, (status(g1.base_url, '/responses', nil)))
    assert.equal(401, (status(g1.base_url, '/responses', proxy.TOKEN_PREFIX .. string.rep('0', 64))))
    local s, body = status(g1.base_url, '/responses', KEY)
    assert.equal(401, s)
    assert.equal('authentication_error', body.error.type)
    -- routes outside the model API, with a valid token
    assert.equal(403, (status(g1.base_url, '/files', g1.token)))
    assert.equal(403, (status(g1.base_url, '/models/../files', g1.token, { method = 'GET' })))
    assert.equal(403, (status(P.url, '/v2/responses', g1.token)))
    assert.equal(403, (status(P.url, '/v1responses', g1.token)))
    assert.equal(403, (status(g1.base_url, '/responses', g1.token, { method = 'GET' })))
    assert.equal(n, #U.seen)
    -- an allowed metadata route goes through
    assert.equal(200, (status(g1.base_url, '/models', g1.token, { method = 'GET' })))
    assert.equal(n + 1, #U.seen)
    assert.equal(5, g1.usage().refused.route)
    -- trial A ends: both its tokens open nothing; trial B's still works, and A's spend is not B's
    P:revoke_trial('A')
    assert.equal(401, (status(g1.base_url, '/responses', g1.token, { body = '{"model":"m-1"}' })))
    assert.equal(401, (status(g2.base_url, '/models', g2.token, { method = 'GET' })))
    assert.equal(n + 1, #U.seen)
    assert.equal(200, (status(other.base_url, '/responses', other.token, { body = '{"model":"m-1"}' })))
    assert.equal(n + 2, #U.seen)
    assert.equal(1, other.usage().responses)
    assert.equal(0, g1.usage().responses)
    assert.equal(0, g2.usage().responses)
    other.revoke()
    assert.equal(401, (status(other.base_url, '/responses', other.token, { body = '{"model":"m-1"}' })))
    assert.equal(n + 2, #U.seen)
  end)

  it('never sends the key back, even split across chunks', function()
    local g = grant()
    local res = assert(call(g.base_url, '/responses', g.token, { body = '{"mode":"echo"}' }))
    assert.equal(401, res.status)
    assert.falsy(res.body:find(KEY, 1, true), res.body)
    assert.falsy(res.body:find(KEY:sub(1, 12), 1, true), res.body)
    assert.equal('{"error":{"message":"Incorrect API key provided: [redacted]. Check it."}}', res.body)
    g.revoke()
  end)

  it('refuses model requests past the spend ceiling with 402, and keeps refusing; other routes still go', function()
    -- each answer costs (1000 + 100 x 2) / 1e6 = $0.0012: the second fits (0.0012 + 0.0012 <= 0.003), the third
    -- does not (0.0024 + 0.0012 > 0.003)
    local budget = ledger.budget(0.003)
    local g = grant { trial = 'C', budget = budget:for_trial('C') }
    local n = #U.seen
    for _ = 1, 2 do assert.equal(200, assert(call(g.base_url, '/responses', g.token, { body = '{"model":"m-1"}' })).status) end
    for _ = 1, 2 do
      local res = assert(call(g.base_url, '/responses', g.token, { body = '{"model":"m-1"}' }))
      assert.equal(402, res.status)
      local e = jsonl.decode(res.body).error
      assert.equal('billing_error', e.type)
      assert.equal('max_cost', e.code)
      assert.matches('max%-cost%-usd', e.message)
    end
    assert.equal(n + 2, #U.seen)
    assert.equal(200, assert(call(g.base_url, '/models', g.token, { method = 'GET' })).status)
    local u = g.usage()
    assert.equal(4, u.requests)
    assert.equal(2, u.responses)
    assert.equal(2, u.refused.ceiling)
    assert.is_true(u.ceiling_stop)
    assert.near(0.0024, u.cost_usd, 1e-15)
    assert.near(0.0024, budget.inflight.C.spent, 1e-15)
    assert.equal('max_cost', budget.stop.reason)
    assert.equal('the next agent turn', budget.stop.what)
    g.revoke()
  end)

  it('answers 502 when the upstream cannot be reached, naming it and not the key', function()
    local dead = assert(serve.listen {})
    local url = dead:url()
    dead:close()
    local g = grant { upstream = url .. '/v1' }
    local res = assert(call(g.base_url, '/responses', g.token, { body = '{"model":"m-1"}' }))
    assert.equal(502, res.status)
    assert.truthy(res.body:find(url, 1, true), res.body)
    assert.falsy(res.body:find(KEY, 1, true))
    assert.equal(1, g.usage().upstream_errors)
    g.revoke()
  end)

  it('revoking a grant ends its requests in flight', function()
    local g = grant()
    local t = task.spawn(call, g.base_url, '/responses', g.token, { body = '{"mode":"hang"}' })
    while #U.seen == 0 or U.seen[#U.seen].body ~= '{"mode":"hang"}' do task.sleep(0.01) end
    g.revoke()
    -- the answer in flight is cut (ECONNRESET); a client that retries on a cut connection (this one
    -- does, on a reused connection) is then refused: its token opens nothing. Without the revoke,
    -- the request would wait until its timeout (ETIMEDOUT).
    local ok, res, _, code = t:join()
    assert.is_true(ok)
    if res then assert.equal(401, res.status) else assert.equal('ECONNRESET', code) end
  end)
end)

describe('the usage reader and the key filter', function()
  -- a stream fed in pieces of every size gives what it gives whole
  local stream = sse {
    { type = 'response.created', response = { id = 'r9' } },
    { type = 'response.completed', response = { id = 'r9', model = 'm', usage = { input_tokens = 7, output_tokens = 3,
      input_tokens_details = { cached_tokens = 2 } } } } } .. 'data: [DONE]\r\n\r\n'

  local function read(pieces)
    local r = proxy.usage_reader('responses', 'text/event-stream; charset=utf-8')
    for _, p in ipairs(pieces) do r.feed(p) end
    return r.finish()
  end

  it('reads the same usage however the stream is cut', function()
    local whole = read { stream }
    assert.same({ { id = 'r9', model = 'm', input = 7, cached = 2, cache_creation = 0, output = 3, reasoning = 0 } }, whole)
    local rng = 12345
    local function rand(n) rng = (rng * 1103515245 + 12345) % 2147483648; return rng % n + 1 end
    for size = 1, 40 do
      local pieces = {}
      for i = 1, #stream, size do pieces[#pieces + 1] = stream:sub(i, i + size - 1) end
      assert.same(whole, read(pieces), 'pieces of ' .. size)
    end
    for _ = 1, 200 do
      local pieces, i = {}, 1
      while i <= #stream do
        local k = rand(30)
        pieces[#pieces + 1] = stream:sub(i, i + k - 1)
        i = i + k
      end
      assert.same(whole, read(pieces))
    end
    -- a stream cut before its blank line still counts its last event; garbage counts nothing
    local cut = stream:gsub('data: %[DONE%]\r\n\r\n$', ''):gsub('\n\n$', '')
    assert.same(whole, read { cut })
    assert.same({}, read { 'data: {not json\n\ndata: [DONE]\n\n', '\0\1\2' })
  end)
end)

describe('where the key goes, by provider (proxy.mode)', function()
  local loop, remote = { loopback = true }, { loopback = false }
  it('uses the proxy where the sandboxes can reach this machine\'s loopback', function()
    assert.equal('proxy', (proxy.mode(nil, { name = 'local' }, nil)))
    assert.equal('proxy', (proxy.mode('auto', { name = 'e2b', remote = true }, loop))) -- the bundled fake
    assert.equal('proxy', (proxy.mode('proxy', { name = 'x', remote = true, capabilities = { host_ports = true } }, remote)))
  end)
  it('places the key in the sandbox, saying why, where they cannot, or when asked', function()
    local m, why = proxy.mode('auto', { name = 'e2b', remote = true }, remote)
    assert.equal('sandbox', m)
    assert.matches("e2b's sandboxes cannot reach the model proxy", why)
    m, why = proxy.mode(nil, { name = 'docker', capabilities = { host_ports = false } }, loop)
    assert.equal('sandbox', m)
    assert.matches('docker', why)
    assert.equal('sandbox', (proxy.mode('sandbox', { name = 'local' }, nil)))
  end)
  it('refuses --model-key proxy where the proxy cannot be reached', function()
    local ok, err = pcall(proxy.mode, 'proxy', { name = 'modal', remote = true }, remote)
    assert.is_false(ok)
    assert.equal('ECONFIG', err.code)
    assert.matches('model%-key sandbox', err.message)
  end)
end)
