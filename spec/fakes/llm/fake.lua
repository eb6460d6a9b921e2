--- A stateful loopback fake of an OpenAI-compatible chat-completions API (OpenRouter, Vercel AI
--- Gateway), on cseng.serve, for the LLM solvers (lua/solvers/shared/chat_loop.lua).
---
---   local llm = require 'spec.fakes.llm.fake'
---   local f = llm.start { api_key = 'sk-test-1', script = llm.replay(function(conv) return { 'ls', 'make' } end) }
---   -- OPENROUTER_BASE_URL = f.url (…/api/v1), AI_GATEWAY_BASE_URL = f.url_v1 (…/v1)
---   f.stats()  --> { requests=, completions=, unauthorized=, bad_requests=, statuses={[429]=n}, tool_results=, ... }
---   f.close()
---
--- Conversations are told apart by their user message (the task instruction), so trials may run
--- concurrently. The turn of a request is 1 + the assistant messages it carries; a retried request
--- has the same turn and a higher attempt. Switches (all optional except script, changeable by set):
---   api_key ('sk-test-key')    the bearer every request must carry, else 401 (whose error message
---                              echoes the credential it got, as careless APIs do: the solver must redact)
---   model                      when set, a request for another model gets 400
---   script = fn(conv) -> reply   the model. conv: {key, user, turn, attempt, messages, tool_results
---       (contents of the tool messages new in this request), n (global request number)}.
---       reply: {content=, tool_calls={{command=}|{arguments='raw'}|{name=, arguments=}}, finish_reason=}
---   fault = fn(conv) -> status, headers, body | nil    answer instead of the script (429, 500, 401...)
---   usage = table | fn(conv) -> {prompt_tokens, completion_tokens, total_tokens, cost?} | false (no usage)
---   latency = seconds | fn(conv) -> seconds   before answering
---   limit = n                  a hidden limit of n requests answered at once: a valid request that
---                              arrives while n are in the fake gets 429 (counted in rate_limited), with
---                              `Retry-After: retry_after` when that is set; set{limit = false} lifts it
---   hold_first = n             the first request within the limit is held (not answered) until one
---                              conversation has had n requests refused (or hold_max seconds, 120,
---                              passed: liveness only): the limit is reached whatever the machine's
---                              speed, which a rate in requests per second is not (a loaded machine
---                              sends slower than any rate); hold_first = 2 with llm_attempts = 2 and no
---                              admission fails that conversation's trial, since each 429 spends a try
--- Every request is checked (luv's tap.lua style: a wrong call fails the spec through the counters):
--- POST to /v1/chat/completions or /api/v1/chat/completions, the bearer, a JSON body with model,
--- messages starting system then user, the bash tool, and every tool call of an assistant message
--- answered by tool messages with its ids, in order, before anything else. A bad request gets 400
--- and counts in bad_requests (its reason in problems).
local serve = require('cseng.serve')
local task = require('cseng.task')
local jsonl = require('cseng.lib.jsonl')

local fake = {}

local function json(status, value, headers)
  local h = { ['Content-Type'] = 'application/json' }
  for k, v in pairs(headers or {}) do h[k] = v end
  return status, h, jsonl.encode(value)
end

local function pick(v, ...)
  if type(v) == 'function' then return v(...) end
  return v
end

--- A script that issues one bash call per turn from a list of commands, then answers.
---@param commands_for fun(conv: table): string[]  the commands of a conversation
---@param final? string the closing answer (default "Done.")
---@return fun(conv: table): table
function fake.replay(commands_for, final)
  return function(conv)
    local cmds = commands_for(conv)
    local c = cmds[conv.turn]
    if c then return { tool_calls = { { command = c } } } end
    return { content = final or 'Done.' }
  end
end

-- The protocol checks; returns nil or the reason the request is bad.
local function check(body, cfg)
  if type(body) ~= 'table' then return 'body is not a JSON object' end
  if type(body.model) ~= 'string' or body.model == '' then return 'no model' end
  if cfg.model and body.model ~= cfg.model then return 'unexpected model ' .. body.model end
  local ms = body.messages
  if type(ms) ~= 'table' or #ms < 2 then return 'messages: fewer than two' end
  if ms[1].role ~= 'system' or type(ms[1].content) ~= 'string' then return 'messages[1] is not the system prompt' end
  if ms[2].role ~= 'user' or type(ms[2].content) ~= 'string' then return 'messages[2] is not the user message' end
  local tools = body.tools
  local fn = type(tools) == 'table' and type(tools[1]) == 'table' and tools[1]['function']
  if #(tools or {}) ~= 1 or tools[1].type ~= 'function' or type(fn) ~= 'table' or fn.name ~= 'bash'
    or type(fn.parameters) ~= 'table' or fn.parameters.type ~= 'object' then
    return 'tools: expected exactly the bash function'
  end
  local i = 3
  while i <= #ms do
    local m = ms[i]
    if m.role == 'assistant' then
      local calls = m.tool_calls or {}
      for j, tc in ipairs(calls) do
        local r = ms[i + j]
        if type(tc.id) ~= 'string' or tc.type ~= 'function' or type(tc['function']) ~= 'table'
          or type(tc['function'].arguments) ~= 'string' then
          return string.format('messages[%d].tool_calls[%d]: malformed', i, j)
        end
        if not r or r.role ~= 'tool' or r.tool_call_id ~= tc.id or type(r.content) ~= 'string' then
          return string.format('messages[%d].tool_calls[%d] (%s) is not answered by the next tool message', i, j, tc.id)
        end
      end
      if #calls == 0 and type(m.content) ~= 'string' then
        return string.format('messages[%d]: no content, no tool call', i)
      end
      i = i + #calls + 1
    else
      return string.format('messages[%d]: unexpected role %s', i, tostring(m.role))
    end
  end
  if ms[#ms].role == 'assistant' and not ms[#ms].tool_calls then return 'the conversation already ended' end
  return nil
end

local function default_usage(conv)
  local p, c = 1000 * conv.turn + 7, 50 + conv.turn
  return { prompt_tokens = p, completion_tokens = c, total_tokens = p + c }
end

---@class llm_fake
---@field url string base for OpenRouter-style clients (…/api/v1)
---@field url_v1 string base for /v1 clients (AI Gateway)
---@field api_key string
---@field stats fun(): table
---@field set fun(opts: table)
---@field close fun()

--- The fake without a listener: f.handler(req) answers one request (spec/fakes/llm/model.lua
--- serves it beside the other APIs on one port).
---@param opts table switches, see the file header
---@return llm_fake
function fake.new(opts)
  local cfg = {}
  for k, v in pairs(opts or {}) do cfg[k] = v end
  cfg.api_key = cfg.api_key or 'sk-test-key'
  assert(cfg.script, 'llm fake: a script is required')

  local st = {
    requests = 0, completions = 0, unauthorized = 0, bad_requests = 0, not_found = 0, faults = 0,
    statuses = {}, rate_limited = 0, refused_by_conv = {}, held = 0, tool_results = 0, tool_calls_issued = 0,
    conversations = 0, problems = {}, convs = {}, requests_log = {},
  }

  local function count_status(s) st.statuses[s] = (st.statuses[s] or 0) + 1 end

  -- the hidden limit: requests in the fake (past the checks, not yet answered); the first one
  -- held until a conversation was refused hold_first times (the gate's one permit)
  local in_fake, held_once, gate = 0, false, task.semaphore(0)
  local released = false
  local function release()
    if not released then released = true gate:release() end
  end
  local function refuse(key)
    st.rate_limited = st.rate_limited + 1
    local n = (st.refused_by_conv[key] or 0) + 1
    st.refused_by_conv[key] = n
    if cfg.hold_first and n >= cfg.hold_first then release() end
  end
  local function hold()
    if not cfg.hold_first or held_once then return end
    held_once = true
    st.held = st.held + 1
    local timer = task.spawn(function()
      task.sleep(cfg.hold_max or 120)
      release()
    end)
    gate:acquire()
    timer:cancel()
  end

  local function answer(req)
    st.requests = st.requests + 1
    local n = st.requests
    local log = { n = n, path = req.path, x_title = req.headers['x-title'], referer = req.headers['http-referer'] }
    st.requests_log[n] = log
    if req.method ~= 'POST' or (req.path ~= '/v1/chat/completions' and req.path ~= '/api/v1/chat/completions') then
      st.not_found = st.not_found + 1
      return json(404, { error = { message = 'no route ' .. req.method .. ' ' .. req.path, code = 404 } })
    end
    local auth = req.headers['authorization'] or ''
    if auth ~= 'Bearer ' .. cfg.api_key then
      st.unauthorized = st.unauthorized + 1
      return json(401, { error = { message = 'Invalid credentials: ' .. auth, code = 401 } })
    end
    local body = jsonl.decode(req.body)
    local problem = check(body, cfg)
    if problem then
      st.bad_requests = st.bad_requests + 1
      st.problems[#st.problems + 1] = problem
      return json(400, { error = { message = problem, code = 400 } })
    end
    log.model, log.usage_include = body.model, type(body.usage) == 'table' and body.usage.include or nil
    local ms = body.messages
    local key = ms[2].content
    if cfg.limit and in_fake >= cfg.limit then
      refuse(key)
      return json(429, { error = { message = 'Rate limit exceeded: requests in flight', code = 429 } },
        cfg.retry_after and { ['Retry-After'] = tostring(cfg.retry_after) } or nil)
    end
    in_fake = in_fake + 1
    local _ <close> = setmetatable({}, { __close = function() in_fake = in_fake - 1 end })
    hold()
    local c = st.convs[key]
    if not c then
      c = { requests = 0, completions = 0, attempts = {}, tool_results = {}, usage = {} }
      st.convs[key] = c
      st.conversations = st.conversations + 1
    end
    c.requests = c.requests + 1
    local turn, last_assistant = 1, 2
    for i, m in ipairs(ms) do
      if m.role == 'assistant' then turn = turn + 1; last_assistant = i end
    end
    c.attempts[turn] = (c.attempts[turn] or 0) + 1
    local new_results = {}
    for i = last_assistant + 1, #ms do
      if ms[i].role == 'tool' then new_results[#new_results + 1] = ms[i].content end
    end
    local conv = { key = key, user = key, turn = turn, attempt = c.attempts[turn], messages = ms,
      tool_results = new_results, n = n }
    local l = pick(cfg.latency, conv)
    if l and l > 0 then task.sleep(l) end
    if cfg.fault then
      local fs, fh, fb = cfg.fault(conv)
      if fs then
        st.faults = st.faults + 1
        if type(fb) ~= 'string' then
          fb = jsonl.encode(fb or { error = { message = 'injected fault ' .. fs, code = fs } })
        end
        return fs, fh or { ['Content-Type'] = 'application/json' }, fb
      end
    end
    local reply = cfg.script(conv)
    -- delivered: the tool results of this request reached a model that answered
    for _, r in ipairs(new_results) do c.tool_results[#c.tool_results + 1] = r end
    st.tool_results = st.tool_results + #new_results
    local msg = { role = 'assistant', content = reply.content ~= nil and reply.content or jsonl.null }
    if reply.tool_calls and #reply.tool_calls > 0 then
      local tcs = jsonl.array()
      for i, tc in ipairs(reply.tool_calls) do
        local args = tc.arguments or jsonl.encode({ command = tc.command })
        tcs[i] = { id = string.format('call_%d_%d', n, i), type = 'function',
          ['function'] = { name = tc.name or 'bash', arguments = args } }
      end
      msg.tool_calls = tcs
      st.tool_calls_issued = st.tool_calls_issued + #tcs
    end
    local usage
    if cfg.usage ~= false then usage = pick(cfg.usage or default_usage, conv) end
    c.completions = c.completions + 1
    c.usage[#c.usage + 1] = usage
    st.completions = st.completions + 1
    return json(200, {
      id = 'chatcmpl-fake-' .. n, object = 'chat.completion', created = 1700000000, model = body.model,
      choices = jsonl.array { { index = 0, message = msg,
        finish_reason = reply.finish_reason or (msg.tool_calls and 'tool_calls' or 'stop') } },
      usage = usage,
    })
  end

  local self = { api_key = cfg.api_key }
  function self.handler(req)
    local s, h, b = answer(req)
    count_status(s)
    return s, h, b
  end
  function self.stats() return st end
  function self.set(o)
    for k, v in pairs(o) do cfg[k] = v end
    if o.limit == false then cfg.limit = nil end
    if o.retry_after == false then cfg.retry_after = nil end
  end
  function self.close()
    release()
    if self.server then self.server:close() end
  end
  return self
end

--- Start the fake on 127.0.0.1 (opts.port, default an ephemeral one).
---@param opts table switches, see the file header
---@return llm_fake
function fake.start(opts)
  local self = fake.new(opts)
  self.server = assert(serve.listen { host = '127.0.0.1', port = (opts or {}).port or 0, handler = self.handler })
  local url = self.server:url()
  self.url, self.url_v1 = url .. '/api/v1', url .. '/v1'
  return self
end

return fake
