--- The model proxy of installed agents: an HTTP server of the engine's own (cseng.serve) on
--- 127.0.0.1 (an ephemeral port), started once per run that uses an installed coding agent
--- (lua/solvers/codex.lua, claude_code.lua). The sandbox never holds the model key: each trial is
--- granted a random token (proxy:grant), which the CLI sends where it would send the key
--- (`Authorization: Bearer`, `x-api-key`), and the proxy forwards the CLI's requests to the real
--- base URL with the real key in its place. Streamed answers (server-sent events) stream through
--- as they arrive.
---
--- A token is useless elsewhere: 32 random bytes, known only to this process and the trial's
--- sandbox; it opens only its own grant (one trial's upstream, key, ledger and budget), only
--- while that trial runs (revoked when the trial ends; the proxy closes with the run), and only
--- for the model API's own routes (APIS below): any other path is refused without contacting the
--- upstream. The real key is never sent back: an upstream answer that echoes it (an error message)
--- reaches the sandbox with the key replaced.
---
--- The proxy reads the usage of every answer itself (the `usage` of a JSON answer, of the SSE
--- events that carry one: Responses' response.completed, Chat Completions' last chunk, Messages'
--- message_start and message_delta) and prices it (the provider's `usage.cost` when reported, else
--- lua/cseng/evals/prices.lua), so the trial's tokens and cost no longer depend on what a CLI
--- reports. Under a spend ceiling (`--max-cost-usd`: the trial's budget, lua/cseng/evals/ledger.lua)
--- each answer's cost is spent against it, and before each model request the budget is asked
--- whether one more request costing what the last one did still fits; once it does not, that
--- request and every later one of the grant are answered 402 with an error in the API's shape
--- (never forwarded), and the grant records why (`ceiling`).
local serve = require('cseng.serve')
local http = require('cseng.http')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local prices = require('cseng.evals.prices')

local proxy = {}

--- The prefix of every grant's token (so a token is recognisable in a log, and never taken for a key).
proxy.TOKEN_PREFIX = 'cseng-trial-'

--- What each API may be asked, as "METHOD path" relative to the upstream base URL: `model` routes
--- are the model calls (counted, priced, under the ceiling), `other` ones are forwarded as they
--- are; `models_prefix` is the path under which one model's metadata may be read (`GET`).
proxy.APIS = {
  -- the OpenAI Responses and Chat Completions APIs (codex: CODEX_BASE_URL, usually .../v1)
  openai = { auth = 'bearer', model = { ['POST /responses'] = 'responses', ['POST /chat/completions'] = 'chat' },
    other = { ['GET /models'] = true }, models_prefix = '/models/' },
  -- the Anthropic Messages API (claude_code: ANTHROPIC_BASE_URL, without /v1)
  anthropic = { auth = 'x-api-key', model = { ['POST /v1/messages'] = 'messages' },
    other = { ['POST /v1/messages/count_tokens'] = true, ['GET /v1/models'] = true }, models_prefix = '/v1/models/' },
  -- Google's Gemini API (gemini_cli: GOOGLE_GEMINI_BASE_URL): a model's methods are in its path
  -- (`/v1beta/models/<model>:generateContent`); the key travels in `x-goog-api-key`
  google = { auth = 'x-goog-api-key', model = {},
    model_patterns = { { '^POST /v1beta/models/[%w][%w%._%-]*:generateContent$', 'gemini' },
      { '^POST /v1beta/models/[%w][%w%._%-]*:streamGenerateContent$', 'gemini' } },
    other = { ['GET /v1beta/models'] = true },
    other_patterns = { '^POST /v1beta/models/[%w][%w%._%-]*:countTokens$' }, models_prefix = '/v1beta/models/' },
}

-- request headers never forwarded: hop-by-hop ones, what curl sets itself, the credential (the
-- grant's key replaces it), and accept-encoding (the answer must come as it is, to be read)
local DROP_REQUEST = {
  ['host'] = true, ['content-length'] = true, ['connection'] = true, ['keep-alive'] = true, ['te'] = true,
  ['trailer'] = true, ['transfer-encoding'] = true, ['upgrade'] = true, ['expect'] = true,
  ['proxy-authorization'] = true, ['proxy-connection'] = true, ['authorization'] = true, ['x-api-key'] = true,
  ['x-goog-api-key'] = true, ['accept-encoding'] = true,
}
-- answer headers never passed back: hop-by-hop ones and the length (the answer is re-framed)
local DROP_RESPONSE = {
  ['connection'] = true, ['keep-alive'] = true, ['transfer-encoding'] = true, ['content-length'] = true,
  ['te'] = true, ['trailer'] = true, ['upgrade'] = true, ['proxy-authenticate'] = true, ['set-cookie'] = true,
}

local function int(v) return math.tointeger(v) or 0 end
local function tbl(v) return type(v) == 'table' and v or {} end

-- An error answer both API families read: OpenAI clients take error.message (and code), Anthropic
-- clients error.type and error.message.
local function refuse(status, etype, code, message)
  return status, { ['Content-Type'] = 'application/json' },
    jsonl.encode({ type = 'error', error = { type = etype, code = code, message = message } })
end

-- ---- reading usage from answers -------------------------------------------------------------

-- One answer's usage in the ledger's terms (TokenCounts of prices.lua, input = every input
-- token), plus the provider's own cost when it reported one.
local USAGE = {
  chat = function(u)
    local pd, cd = tbl(u.prompt_tokens_details), tbl(u.completion_tokens_details)
    local creation = int(pd.cache_write_tokens)
    if creation == 0 then creation = int(u.cache_creation_input_tokens) end
    return { input = int(u.prompt_tokens), cached = int(pd.cached_tokens), cache_creation = creation,
      output = int(u.completion_tokens), reasoning = int(cd.reasoning_tokens),
      cost = type(u.cost) == 'number' and u.cost or nil }
  end,
  responses = function(u)
    local id, od = tbl(u.input_tokens_details), tbl(u.output_tokens_details)
    return { input = int(u.input_tokens), cached = int(id.cached_tokens), cache_creation = int(id.cache_write_tokens),
      output = int(u.output_tokens), reasoning = int(od.reasoning_tokens), cost = type(u.cost) == 'number' and u.cost or nil }
  end,
  messages = function(u)
    local cached, creation = int(u.cache_read_input_tokens), int(u.cache_creation_input_tokens)
    return { input = int(u.input_tokens) + cached + creation, cached = cached, cache_creation = creation,
      output = int(u.output_tokens), reasoning = 0 }
  end,
  -- Gemini's usageMetadata: the prompt count includes cached content; thoughts are billed as output
  gemini = function(u)
    local thoughts = int(u.thoughtsTokenCount)
    return { input = int(u.promptTokenCount) + int(u.toolUsePromptTokenCount), cached = int(u.cachedContentTokenCount),
      cache_creation = 0, output = int(u.candidatesTokenCount) + thoughts, reasoning = thoughts }
  end,
}

-- the largest SSE line or JSON answer read for usage (the bytes still stream through beyond it)
local MAX_READ = 32 << 20

--- A reader of one answer's usage: feed(chunk) with the bytes as they arrive, finish() -> the
--- usage records seen ({id, model, input, cached, cache_creation, output, reasoning, cost}, one
--- per model response the answer carried: one, for every API here), or {} when none was.
---@param kind string "responses" | "chat" | "messages" | "gemini"
---@param content_type string|nil the answer's
function proxy.usage_reader(kind, content_type)
  local sse = tostring(content_type or ''):lower():find('text/event-stream', 1, true) ~= nil
  local r = { sse = sse, skipped = false }
  local buf, parts, size = '', {}, 0
  local data = {} -- the current SSE event's data lines
  local seen, order = {}, {}

  local function record(id, model, u)
    id = tostring(id or ('answer' .. (#order + 1)))
    if not seen[id] then seen[id] = { id = id }; order[#order + 1] = seen[id] end
    local rec = seen[id]
    if type(model) == 'string' then rec.model = model end
    for k, v in pairs(u) do rec[k] = v end
  end

  local function event(obj)
    if type(obj) ~= 'table' then return end
    if kind == 'responses' then
      local resp = tbl(obj.response)
      if obj.type == 'response.completed' or obj.type == 'response.incomplete' or obj.type == 'response.failed'
        or obj.type == 'response.done' then
        if type(resp.usage) == 'table' then record(resp.id, resp.model, USAGE.responses(resp.usage)) end
      elseif obj.object == 'response' and type(obj.usage) == 'table' then -- a JSON answer
        record(obj.id, obj.model, USAGE.responses(obj.usage))
      end
    elseif kind == 'chat' then
      if type(obj.usage) == 'table' then record(obj.id, obj.model, USAGE.chat(obj.usage)) end
    elseif kind == 'messages' then
      if obj.type == 'message_start' and type(obj.message) == 'table' then
        local m = obj.message
        r.current = tostring(m.id or ('answer' .. (#order + 1)))
        record(r.current, m.model, USAGE.messages(tbl(m.usage)))
      elseif obj.type == 'message_delta' and type(obj.usage) == 'table' and r.current then
        -- cumulative counts: the output so far, and the input ones when the API repeats them
        local rec, u = seen[r.current], obj.usage
        rec.output = int(u.output_tokens)
        if u.input_tokens ~= nil or u.cache_read_input_tokens ~= nil or u.cache_creation_input_tokens ~= nil then
          local full = USAGE.messages({ input_tokens = u.input_tokens or (rec.input - rec.cached - rec.cache_creation),
            cache_read_input_tokens = u.cache_read_input_tokens or rec.cached,
            cache_creation_input_tokens = u.cache_creation_input_tokens or rec.cache_creation, output_tokens = u.output_tokens })
          rec.input, rec.cached, rec.cache_creation = full.input, full.cached, full.cache_creation
        end
      elseif obj.type == 'message' and type(obj.usage) == 'table' then -- a JSON answer
        record(obj.id, obj.model, USAGE.messages(obj.usage))
      end
    elseif kind == 'gemini' then
      -- each streamed chunk may carry usageMetadata, the last one the answer's totals (counts are
      -- cumulative, not per chunk); a JSON answer carries it once
      if type(obj.usageMetadata) == 'table' then
        record(obj.responseId or 'answer1', obj.modelVersion, USAGE.gemini(obj.usageMetadata))
      end
    end
  end

  local function decode(text)
    local ok, obj = pcall(jsonl.decode, text)
    if ok then event(obj) end
  end

  local function line(l)
    l = l:gsub('\r$', '')
    if l == '' then
      if #data > 0 then
        local text = table.concat(data, '\n')
        data = {}
        if text ~= '[DONE]' then decode(text) end
      end
    elseif l:sub(1, 5) == 'data:' then
      data[#data + 1] = l:sub(6):gsub('^ ', '')
    end
  end

  function r.feed(chunk)
    if r.skipped then return end
    size = size + #chunk
    if not sse then
      if size > MAX_READ then r.skipped, parts = true, {} else parts[#parts + 1] = chunk end
      return
    end
    buf = buf .. chunk
    local from = 1
    while true do
      local nl = buf:find('\n', from, true)
      if not nl then break end
      line(buf:sub(from, nl - 1))
      from = nl + 1
    end
    buf = buf:sub(from)
    if #buf > MAX_READ then r.skipped, buf = true, '' end
  end

  function r.finish()
    if sse then
      if buf ~= '' then line(buf) end
      line('') -- an event the stream ended without its blank line
    elseif not r.skipped and #parts > 0 then
      decode(table.concat(parts))
    end
    return order
  end
  return r
end

-- ---- the key never goes back ---------------------------------------------------------------

-- A filter of the answer's bytes that replaces the key by [redacted], also across chunk
-- boundaries: it holds back the longest tail of what it was given that could begin the key (for
-- SSE, usually nothing: an event ends with a blank line), released with the next chunk or flush().
local function scrubber(key)
  local held = ''
  local mark = '[redacted]'
  local s = {}
  function s.feed(chunk)
    local text = held .. chunk
    held = ''
    text = text:gsub(key:gsub('%p', '%%%0'), mark)
    for n = math.min(#key - 1, #text), 1, -1 do
      if text:sub(-n) == key:sub(1, n) then
        held = text:sub(-n)
        text = text:sub(1, -n - 1)
        break
      end
    end
    return text
  end
  function s.flush() local h = held; held = ''; return h end
  return s
end

-- ---- grants ------------------------------------------------------------------------------------

local Grant = {}
Grant.__index = Grant

local function new_totals()
  return { api_requests = 0, model_requests = 0, responses = 0, responses_without_usage = 0,
    prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, cache_creation_tokens = 0, reasoning_tokens = 0,
    cost_usd = 0, provider_priced = 0, table_priced = 0, unpriced = 0, refused_ceiling = 0, refused_route = 0,
    upstream_errors = 0, statuses = {} }
end

-- Price one response and add it to the grant (and spend it against the trial's budget).
function Grant:account(u)
  local t = self.totals
  t.responses = t.responses + 1
  t.prompt_tokens = t.prompt_tokens + u.input
  t.completion_tokens = t.completion_tokens + u.output
  t.cached_tokens = t.cached_tokens + u.cached
  t.cache_creation_tokens = t.cache_creation_tokens + u.cache_creation
  t.reasoning_tokens = t.reasoning_tokens + (u.reasoning or 0)
  if u.model then t.response_model = u.model end
  local usd
  if u.cost then
    usd = u.cost
    t.provider_priced = t.provider_priced + 1
  else
    local price = (u.model and u.model ~= self.model and prices.lookup(self.options, self.getenv, u.model)) or self.price
    if price then
      usd = prices.cost(u, price)
      t.table_priced = t.table_priced + 1
    else
      t.unpriced = t.unpriced + 1
    end
  end
  if usd then
    t.cost_usd = t.cost_usd + usd
    self.last_usd = usd
    if self.budget then self.budget.spend(usd) end
  end
end

-- May one more model request go? The budget's admit with the last response's cost as the
-- estimate (0 before any, or when nothing could be priced); a refusal is final for the grant.
function Grant:admit()
  if self.ceiling_stop then return false end
  if not self.budget then return true end
  if self.budget.admit(self.last_usd or 0) then return true end
  self.ceiling_stop = true
  return false
end

--- What the grant counted, as solver_usage fields: `requests` (the model requests the CLI made,
--- refused ones included), `api_requests` (the requests forwarded, any route), `responses` (answers
--- that carried usage), `responses_without_usage` (2xx model answers that carried none), tokens
--- from the answers, their cost and its source (provider | prices | mixed | partial | unknown, as
--- the agent loop's), `refused` ({ceiling, route}), `statuses` (the upstream's, by code), and
--- `ceiling_stop` when the spend ceiling refused a request.
function Grant:usage()
  local t = self.totals
  local u = { counted_by = 'proxy', api_requests = t.api_requests, requests = t.model_requests, responses = t.responses,
    responses_without_usage = t.responses_without_usage, prompt_tokens = t.prompt_tokens,
    completion_tokens = t.completion_tokens, total_tokens = t.prompt_tokens + t.completion_tokens,
    cached_tokens = t.cached_tokens, cache_creation_tokens = t.cache_creation_tokens, reasoning_tokens = t.reasoning_tokens,
    response_model = t.response_model, upstream_errors = t.upstream_errors,
    refused = { ceiling = t.refused_ceiling, route = t.refused_route }, statuses = t.statuses }
  local priced = t.provider_priced + t.table_priced
  local unpriced = t.unpriced + t.responses_without_usage
  if priced == 0 then
    u.cost_source = 'unknown'
  else
    u.cost_usd = t.cost_usd
    if unpriced > 0 then u.cost_source = 'partial'
    elseif t.table_priced == 0 then u.cost_source = 'provider'
    elseif t.provider_priced == 0 then u.cost_source = 'prices'
    else u.cost_source = 'mixed' end
  end
  if self.price then
    u.price_in_per_mtok, u.price_out_per_mtok, u.price_source = self.price.input, self.price.output, self.price_source
  end
  if self.ceiling_stop then u.ceiling_stop = true end
  return u
end

-- ---- the server ----------------------------------------------------------------------------

local Proxy = {}
Proxy.__index = Proxy

local live = setmetatable({}, { __mode = 'k' }) -- the proxies of this process that are open

local function credential(h, query)
  local bearer = (h['authorization'] or ''):match('^[Bb]earer%s+(%S+)%s*$')
  if bearer then return bearer, 'bearer' end
  if h['x-api-key'] then return h['x-api-key'], 'x-api-key' end
  if h['x-goog-api-key'] then return h['x-goog-api-key'], 'x-goog-api-key' end
  -- Google's clients may put the key in the query (`?key=`): taken out before forwarding
  local k = ('&' .. tostring(query or '')):match('&key=([^&]*)')
  if k and k ~= '' then return k, 'query' end
  return nil
end

-- The query without its `key` parameter (the token stays here; the grant's key goes in a header).
local function without_key(query)
  local kept = {}
  for part in tostring(query or ''):gmatch('[^&]+') do
    if not part:match('^key=') then kept[#kept + 1] = part end
  end
  return table.concat(kept, '&')
end

-- The route of a request relative to the grant's base path: the model kind ("responses", ...),
-- true for another allowed route, or nil.
local function route(g, method, path)
  local prefix = g.prefix
  if prefix ~= '' then
    if path:sub(1, #prefix) ~= prefix or (path ~= prefix and path:sub(#prefix + 1, #prefix + 1) ~= '/') then return nil end
    path = path:sub(#prefix + 1)
  end
  local api = g.api
  local key = method .. ' ' .. path
  if api.model[key] then return api.model[key], path end
  for _, mp in ipairs(api.model_patterns or {}) do
    if key:match(mp[1]) then return mp[2], path end
  end
  if api.other[key] then return true, path end
  for _, op in ipairs(api.other_patterns or {}) do
    if key:match(op) then return true, path end
  end
  if method == 'GET' and path:sub(1, #api.models_prefix) == api.models_prefix
    and path:sub(#api.models_prefix + 1):match('^[%w][%w%._:-]*$') then return true, path end
  return nil
end

-- Chat Completions streams carry usage only when asked (stream_options.include_usage): a streamed
-- request that does not mention stream_options is asked for it, so its spend can be read.
local function with_usage(kind, body)
  if kind ~= 'chat' or not body:find('"stream"%s*:%s*true') or body:find('"stream_options"', 1, true) then return body end
  return (body:gsub('^(%s*{)', '%1"stream_options":{"include_usage":true},', 1))
end

local function forward(P, g, req, kind, rel, style)
  local t = g.totals
  t.api_requests = t.api_requests + 1
  local headers = {}
  for k, v in pairs(req.headers) do
    if not DROP_REQUEST[k] and not k:match('^proxy%-') then headers[k] = v end
  end
  if style == 'bearer' then headers['Authorization'] = 'Bearer ' .. g.key
  elseif style == 'x-goog-api-key' or style == 'query' then headers['x-goog-api-key'] = g.key
  else headers['x-api-key'] = g.key end
  local query = without_key(req.query)
  local url = g.upstream .. rel .. (query ~= '' and ('?' .. query) or '')
  local body = req.body
  if kind ~= true and body ~= '' then body = with_usage(kind, body) end
  local reader, scrub = nil, scrubber(g.key)
  local began, gone = false, false
  local res, err, code = http.request { url = url, method = req.method, headers = headers,
    body = (body ~= '' or req.method == 'POST') and body or nil, timeout = 0, connect_timeout = 30,
    stream = function(chunk, head)
      if head then
        began = true
        t.statuses[tostring(head.status)] = (t.statuses[tostring(head.status)] or 0) + 1
        if kind ~= true and head.status // 100 == 2 then reader = proxy.usage_reader(kind, head.headers['content-type']) end
        local out = {}
        for k, v in pairs(head.headers) do if not DROP_RESPONSE[k] then out[k] = v end end
        if not req:start(head.status, out) then gone = true end
      end
      if reader then reader.feed(chunk) end
      if not gone then
        local text = scrub.feed(chunk)
        -- a client gone mid-answer: the rest is still read, for its usage
        if text ~= '' and not req:write(text) then gone = true end
      end
    end }
  if began then
    if not gone then
      local rest = scrub.flush()
      if rest ~= '' then req:write(rest) end
    end
    if not res then
      t.upstream_errors = t.upstream_errors + 1
      req:abort() -- the client sees a cut answer, as it would from the upstream
    end
  elseif res then
    t.statuses[tostring(res.status)] = (t.statuses[tostring(res.status)] or 0) + 1
    local out = {}
    for k, v in pairs(res.headers) do if not DROP_RESPONSE[k] then out[k] = v end end
    req:respond(res.status, out, '')
  else
    t.upstream_errors = t.upstream_errors + 1
    P.stats.upstream_errors = P.stats.upstream_errors + 1
    -- a 502 the CLI may retry; the message names the upstream without user info, never the key
    local why = tostring(err)
    if why:sub(1, #url + 2) == url .. ': ' then why = why:sub(#url + 3) end
    why = why:gsub(g.key:gsub('%p', '%%%0'), '[redacted]')
    local s, h, b = refuse(502, 'api_error', 'upstream_unreachable', string.format(
      'cseng model proxy: the model endpoint %s could not be reached: %s (%s)', g.shown, why, tostring(code)))
    req:respond(s, h, b)
  end
  if reader then
    local got = reader.finish()
    if #got == 0 then t.responses_without_usage = t.responses_without_usage + 1 end
    for _, u in ipairs(got) do g:account(u) end
  end
end

local function handle(P, req)
  P.stats.requests = P.stats.requests + 1
  local token, style = credential(req.headers, req.query)
  local g = token and P.grants[crypto.sha256_hex(token)]
  if not g or g.revoked then
    P.stats.unauthorized = P.stats.unauthorized + 1
    return refuse(401, 'authentication_error', 'invalid_api_key',
      'cseng model proxy: this token opens nothing (unknown, or its trial has ended)')
  end
  local kind, rel = route(g, req.method, req.path)
  if not kind then
    g.totals.refused_route = g.totals.refused_route + 1
    P.stats.refused_route = P.stats.refused_route + 1
    return refuse(403, 'permission_error', 'route_not_allowed', string.format(
      'cseng model proxy: %s %s is not a model API route this trial may use', req.method, req.path))
  end
  if kind ~= true then g.totals.model_requests = g.totals.model_requests + 1 end
  if kind ~= true and not g:admit() then
    g.totals.refused_ceiling = g.totals.refused_ceiling + 1
    P.stats.refused_ceiling = P.stats.refused_ceiling + 1
    return refuse(402, 'billing_error', 'max_cost',
      'cseng model proxy: the run\'s spend ceiling (--max-cost-usd) is reached: no further model requests in this trial')
  end
  local me = task.current()
  g.inflight[me] = true
  forward(P, g, req, kind, rel, style)
  g.inflight[me] = nil
end

--- Start a proxy on 127.0.0.1 (an ephemeral port). Returns the proxy: `port`, `url`
--- (`http://127.0.0.1:PORT`), `grant`, `revoke_trial`, `for_trial`, `stats`, `close`.
---@return table
function proxy.start()
  local P = setmetatable({ grants = {}, by_trial = {},
    stats = { requests = 0, unauthorized = 0, refused_route = 0, refused_ceiling = 0, upstream_errors = 0, grants = 0,
      revoked = 0 } }, Proxy)
  -- connections: a few per CLI, many CLIs at once; one kept alive while the CLI runs a long tool
  -- stays open 5 minutes (a close racing the CLI's next request costs it a retry); a handler at
  -- work is never timed out
  local srv, err, code = serve.listen { host = '127.0.0.1', port = 0, max_connections = 4096, idle_timeout = 300,
    handler = function(req) return handle(P, req) end }
  if not srv then errors.raise(code or errors.EIO, 'the model proxy could not listen on 127.0.0.1: ' .. tostring(err)) end
  P.srv, P.port, P.url = srv, srv:port(), srv:url()
  live[P] = true
  return P
end

--- A token for one trial's agent. o: {trial (any key; revoke_trial ends its grants), api
--- ("openai" | "anthropic" | "google"), upstream (the real base URL), api_key, model (its price, looked up
--- now: a bad configured price fails here), budget ({admit, spend}: the trial's, or nil), options,
--- getenv}. Returns {token, base_url (the proxy with the upstream's base path: what the sandbox
--- gets), revoke(), usage()}.
function Proxy:grant(o)
  local api = proxy.APIS[o.api]
  if not api then errors.raise(errors.ECONFIG, 'model proxy: unknown API ' .. tostring(o.api)) end
  local upstream = tostring(o.upstream or ''):gsub('/+$', '')
  local origin, path = upstream:match('^(https?://[^/?#]+)([^?#]*)$')
  if not origin then
    errors.raise(errors.ECONFIG, string.format('model proxy: the model endpoint %s is not an http(s) URL', upstream),
      { stage = 'solve' })
  end
  if type(o.api_key) ~= 'string' or o.api_key == '' then errors.raise(errors.ECONFIG, 'model proxy: no key', { stage = 'solve' }) end
  local price, psrc = prices.lookup(o.options, o.getenv, o.model)
  local token = proxy.TOKEN_PREFIX .. crypto.hex(crypto.random_bytes(32))
  local shown = origin:gsub('//[^/@]*@', '//') .. path -- what error messages may say of it
  local g = setmetatable({ api = api, upstream = upstream, shown = shown, prefix = path, key = o.api_key, model = o.model,
    price = price,
    price_source = psrc, options = o.options, getenv = o.getenv, budget = o.budget, trial = o.trial,
    totals = new_totals(), inflight = {} }, Grant)
  local id = crypto.sha256_hex(token)
  self.grants[id] = g
  self.stats.grants = self.stats.grants + 1
  local trial = o.trial
  if trial ~= nil then
    local list = self.by_trial[trial] or {}
    list[#list + 1] = id
    self.by_trial[trial] = list
  end
  local P = self
  return {
    token = token, base_url = self.url .. path, upstream = upstream,
    revoke = function() P:revoke(id) end,
    usage = function() return g:usage() end,
  }
end

-- Revoke one grant: its token opens nothing from now on, and its requests in flight end.
function Proxy:revoke(id)
  local g = self.grants[id]
  if not g then return end
  self.grants[id] = nil
  g.revoked = true
  self.stats.revoked = self.stats.revoked + 1
  local me = task.current()
  for t in pairs(g.inflight) do if t ~= me then t:cancel() end end
end

--- The trial is over: every token granted for it is revoked.
function Proxy:revoke_trial(trial)
  local list = self.by_trial[trial]
  if not list then return end
  self.by_trial[trial] = nil
  for _, id in ipairs(list) do self:revoke(id) end
end

--- What a solver gets (ctx.model_proxy): the proxy's port and url, and grant(o) for this trial
--- with its budget.
function Proxy:for_trial(trial, budget)
  local P = self
  return { port = self.port, url = self.url,
    grant = function(o)
      local g = {}
      for k, v in pairs(o) do g[k] = v end
      g.trial, g.budget = trial, budget
      return P:grant(g)
    end }
end

--- Stop listening; every grant is revoked.
function Proxy:close()
  if self.closed then return end
  self.closed = true
  for id in pairs(self.grants) do self:revoke(id) end
  self.by_trial = {}
  live[self] = nil
  self.srv:close()
end
Proxy.__close = Proxy.close

--- The ports of the proxies of this process that are open. The bundled fakes of cloud providers
--- (spec/fakes/sandboxes.lua) run their sandboxes on this machine: they give them these ports,
--- as a cloud whose sandboxes reach this machine's loopback would.
---@return integer[]
function proxy.ports()
  local out = {}
  for P in pairs(live) do out[#out + 1] = P.port end
  table.sort(out)
  return out
end

--- Whether a provider's sandboxes can reach a port of this machine's 127.0.0.1: the adapter's own
--- `capabilities.host_ports` when it declares one (it honours the sandbox spec's `host_ports`);
--- else an adapter that is not `remote` runs its sandboxes here (local), and a remote one only
--- when its endpoint is this machine's loopback (the bundled fakes, whose commands run here).
---@param adapter table
---@param endpoint table|nil {loopback} (frame.endpoint)
---@return boolean
function proxy.reaches(adapter, endpoint)
  local caps = type(adapter.capabilities) == 'table' and adapter.capabilities or {}
  if caps.host_ports ~= nil then return caps.host_ports == true end
  if not adapter.remote then return true end
  return type(endpoint) == 'table' and endpoint.loopback == true
end

--- How the run's installed agents reach their model: "proxy" (the sandbox holds a token) or
--- "sandbox" (the real key is placed in the sandbox), from the `model_key` option ("auto", the
--- default: the proxy where the provider's sandboxes can reach it; "proxy": always, else ECONFIG;
--- "sandbox": the key in the sandbox). Returns the mode and, for "sandbox", why.
---@return string mode, string|nil why
function proxy.mode(option, adapter, endpoint)
  option = option or 'auto'
  if option == 'sandbox' then return 'sandbox', 'asked for with --model-key sandbox' end
  if option ~= 'auto' and option ~= 'proxy' then
    errors.raise(errors.EUSAGE, string.format('--model-key must be auto, proxy or sandbox, got %s', tostring(option)))
  end
  if proxy.reaches(adapter, endpoint) then return 'proxy' end
  local name = tostring(adapter.name)
  if option == 'proxy' then
    errors.raise(errors.ECONFIG, string.format('--model-key proxy: %s\'s sandboxes cannot reach the model proxy on this '
      .. 'machine\'s 127.0.0.1 (docs/SOLVERS.md); use --model-key sandbox to place the real key in them', name))
  end
  return 'sandbox', string.format('%s\'s sandboxes cannot reach the model proxy on this machine\'s 127.0.0.1', name)
end

return proxy
