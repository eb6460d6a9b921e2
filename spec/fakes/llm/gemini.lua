--- A loopback fake of Google's Gemini API (generateContent), the API Gemini CLI speaks:
---   POST /v1beta/models/<model>:streamGenerateContent?alt=sse   (server-sent events)
---   POST /v1beta/models/<model>:generateContent                  (one JSON answer)
---   POST /v1beta/models/<model>:countTokens
--- on cseng.serve; a scripted model that counts what it was asked, like spec/fakes/llm/messages.lua:
---
---   local gf = require 'spec.fakes.llm.gemini'
---   local f = gf.start { api_key = 'k', script = function(conv) return { tool_calls = {{ command = 'ls' }} } end }
---   -- GOOGLE_GEMINI_BASE_URL = f.url; f.stats() -> {requests, completions, side_requests, bad_requests, problems, convs}
---
--- The agent's requests declare the shell tool (`tool`, default `run_shell_command`) among their
--- functionDeclarations; a conversation is keyed by the user text that holds the task (the first
--- user part that is not the CLI's <session_context>), its turn is 1 + the functionResponse parts it
--- carries. Requests without the tool (side queries) get a short text, count in side_requests and
--- are charged `side_usage` (default prompt 11, candidates 1). Checks (a failed one is a 400, in the
--- API's error shape): the key in `x-goog-api-key` (or `?key=`), the model in the path (and `model`
--- when configured), `contents` that begin with a user turn and alternate user/model, and every
--- functionCall of a model turn answered by a functionResponse of the same name in the next user
--- turn. Per turn the fake charges `usage({turn})` (default: prompt 1000 x turn + 7, candidates 50 +
--- turn), in usageMetadata (the stream's last chunk carries it).
local jsonl = require('cseng.lib.jsonl')
local scripted = require('spec.fakes.llm.scripted')

local fake = {}

local function gerror(status, code, message)
  return status, { ['Content-Type'] = 'application/json' },
    jsonl.encode({ error = { code = code, message = message, status = status == 401 and 'UNAUTHENTICATED'
      or status == 404 and 'NOT_FOUND' or 'INVALID_ARGUMENT' } })
end

local function check(body)
  if type(body) ~= 'table' then return 'body is not a JSON object' end
  local cs = body.contents
  if type(cs) ~= 'table' or #cs == 0 then return 'contents: empty' end
  if cs[1].role ~= 'user' then return 'contents[0]: must be a user turn' end
  for i, c in ipairs(cs) do
    local want = i % 2 == 1 and 'user' or 'model'
    if c.role ~= want then return string.format('contents[%d]: role %s, expected %s', i - 1, tostring(c.role), want) end
    if type(c.parts) ~= 'table' or #c.parts == 0 then return string.format('contents[%d]: no parts', i - 1) end
    if c.role == 'model' then
      local open = {}
      for _, p in ipairs(c.parts) do
        if type(p.functionCall) == 'table' then open[#open + 1] = tostring(p.functionCall.name) end
      end
      if #open > 0 then
        local nxt = cs[i + 1]
        if not nxt then return string.format('contents[%d]: a functionCall is not answered', i - 1) end
        local answered = {}
        for _, p in ipairs(nxt.parts or {}) do
          if type(p.functionResponse) == 'table' then answered[#answered + 1] = tostring(p.functionResponse.name) end
        end
        if #answered ~= #open then
          return string.format('contents[%d]: %d functionCall(s), %d functionResponse(s) after them', i - 1, #open, #answered)
        end
      end
    end
  end
  return nil
end

--- The fake without a listener: f.handler(req) answers one request.
---@param opts table {api_key?, model?, script = fun(conv): reply, tool? ('run_shell_command'), usage? = fun(conv): table, side_usage?}
function fake.new(opts)
  local cfg = scripted.config('gemini fake', opts, { api_key = 'gemini-test-key', tool = 'run_shell_command' })
  local st = scripted.stats { count_tokens = 0, streamed = 0, side_usage = { input = 0, output = 0 } }

  local function answer(req)
    st.requests = st.requests + 1
    local n = st.requests
    local model, method = req.path:match('^/v1beta/models/([^/:]+):(%a+)$')
    if req.method ~= 'POST' or not model then
      st.not_found = st.not_found + 1
      return gerror(404, 404, 'no route ' .. req.method .. ' ' .. req.path)
    end
    local key = req.headers['x-goog-api-key'] or ('&' .. (req.query or '')):match('&key=([^&]*)')
    if key ~= cfg.api_key then
      st.unauthorized = st.unauthorized + 1
      return gerror(401, 401, 'API key not valid. Please pass a valid API key.')
    end
    if method == 'countTokens' then
      st.count_tokens = st.count_tokens + 1
      return 200, { ['Content-Type'] = 'application/json' }, '{"totalTokens": 42}'
    end
    if method ~= 'generateContent' and method ~= 'streamGenerateContent' then
      st.not_found = st.not_found + 1
      return gerror(404, 404, 'no method ' .. method)
    end
    if cfg.model and model ~= cfg.model then
      scripted.bad(st, 'unexpected model ' .. model)
      return gerror(400, 400, 'unexpected model ' .. model)
    end
    local body = jsonl.decode(req.body or '')
    local problem = check(body)
    if problem then
      scripted.bad(st, problem)
      return gerror(400, 400, problem)
    end
    local has_tool = false
    for _, t in ipairs(body.tools or {}) do
      for _, d in ipairs(type(t) == 'table' and t.functionDeclarations or {}) do
        if d.name == cfg.tool then has_tool = true end
      end
    end
    local user, turn, results = nil, 1, {}
    for _, c in ipairs(body.contents) do
      for _, p in ipairs(c.parts) do
        if c.role == 'user' and type(p.text) == 'string' and not user and not p.text:match('^%s*<session_context>') then
          user = p.text
        end
        if type(p.functionResponse) == 'table' then
          turn = turn + 1
          results[#results + 1] = jsonl.encode(p.functionResponse.response)
        end
      end
    end
    user = user or ''
    local reply, x = scripted.reply(cfg, st, has_tool,
      { key = user, user = user, turn = turn, n = n, contents = body.contents, tool_results = results })
    local u = { promptTokenCount = x.input_tokens, candidatesTokenCount = x.output_tokens }
    u.totalTokenCount = u.promptTokenCount + u.candidatesTokenCount
    local parts = jsonl.array()
    if reply.tool_calls and #reply.tool_calls > 0 then
      for i, tc in ipairs(reply.tool_calls) do
        parts[i] = { functionCall = { name = tc.name or cfg.tool, args = tc.args or { command = tc.command, description = 'cseng fake' } } }
        st.tool_calls_issued = st.tool_calls_issued + 1
      end
    else
      parts[1] = { text = reply.content or 'Done.' }
    end
    local resp = { candidates = jsonl.array { { content = { role = 'model', parts = parts }, finishReason = 'STOP', index = 0 } },
      usageMetadata = u, modelVersion = model, responseId = 'resp-' .. n }
    if method == 'streamGenerateContent' then
      st.streamed = st.streamed + 1
      return 200, { ['Content-Type'] = 'text/event-stream' }, 'data: ' .. jsonl.encode(resp) .. '\r\n\r\n'
    end
    return 200, { ['Content-Type'] = 'application/json' }, jsonl.encode(resp)
  end

  return scripted.object(cfg, st, answer)
end

--- Start the fake on 127.0.0.1 (an ephemeral port); GOOGLE_GEMINI_BASE_URL = f.url.
fake.start = scripted.starter(fake)

return fake
