--- A loopback fake of an OpenAI-compatible chat-completions API as coding CLIs call it (OpenCode:
--- `POST /v1/chat/completions`, `stream: true`, many tools, server-sent events), on cseng.serve; a
--- scripted model that counts what it was asked, like spec/fakes/llm/messages.lua:
---
---   local cf = require 'spec.fakes.llm.chat_stream'
---   local f = cf.start { api_key = 'sk-x', script = function(conv) return { tool_calls = {{ command = 'ls' }} } end }
---   -- OPENCODE_BASE_URL = f.url .. '/v1'; f.stats() -> {requests, completions, side_requests, bad_requests, problems, convs}
---
--- The agent's requests carry the shell tool (`tool`, default `bash`) among others; a conversation is
--- keyed by its first user message (OpenCode quotes it: read back), its turn is 1 + the tool messages it carries. Requests without
--- the shell tool (a CLI's side queries: a session title) get a short text and count in
--- side_requests, charged `side_usage` (default input 11, output 1). Checks (a failed one is a 400):
--- the bearer, `stream = true` with `stream_options.include_usage`, `model`, messages that begin with
--- a system or user one, and every tool call of an assistant message answered by tool messages with
--- its ids before the next assistant message. Per turn the fake charges `usage({turn})` (default:
--- input 1000 x turn + 7, output 50 + turn), reported in the last chunk.
local jsonl = require('cseng.lib.jsonl')
local scripted = require('spec.fakes.llm.scripted')

local fake = {}

local function text_of(c)
  if type(c) == 'string' then return c end
  local parts = {}
  for _, x in ipairs(type(c) == 'table' and c or {}) do parts[#parts + 1] = tostring(x.text or '') end
  return table.concat(parts, '\n')
end

-- the API's answers to a wrong key and to a request that fails the checks
local REFUSED = {
  unauthorized = '{"error":{"message":"invalid api key","type":"invalid_request_error"}}',
  bad = function(problem) return jsonl.encode({ error = { message = problem, type = 'invalid_request_error' } }) end,
}

local function check(body, cfg)
  local problem = scripted.check_stream(body, cfg)
  if problem then return problem end
  if type(body.stream_options) ~= 'table' or body.stream_options.include_usage ~= true then
    return 'stream_options.include_usage is not true'
  end
  local ms = body.messages
  if type(ms) ~= 'table' or #ms == 0 then return 'no messages' end
  if ms[1].role ~= 'system' and ms[1].role ~= 'user' then return 'messages[1]: ' .. tostring(ms[1].role) end
  local open = {}
  for i, m in ipairs(ms) do
    if m.role == 'assistant' then
      if next(open) then return string.format('messages[%d]: tool call %s has no tool message', i, tostring(next(open))) end
      for _, tc in ipairs(m.tool_calls or {}) do open[tostring(tc.id)] = true end
    elseif m.role == 'tool' then
      if not open[tostring(m.tool_call_id)] then return string.format('messages[%d]: a tool message for no open call', i) end
      open[tostring(m.tool_call_id)] = nil
    end
  end
  if next(open) then return 'tool call ' .. tostring(next(open)) .. ' is not answered' end
  return nil
end

--- The fake without a listener: f.handler(req) answers one request.
---@param opts table {api_key?, model?, script = fun(conv): reply, tool? ('bash'), usage? = fun(conv): table, side_usage?}
function fake.new(opts)
  local cfg = scripted.config('chat_stream fake', opts, { api_key = 'sk-test', tool = 'bash' })
  local st = scripted.stats { side_usage = { input = 0, output = 0 } }

  local function answer(req)
    st.requests = st.requests + 1
    local n = st.requests
    if req.method ~= 'POST' or not req.path:match('/chat/completions$') then
      st.not_found = st.not_found + 1
      return 404, { ['Content-Type'] = 'application/json' }, '{"error":{"message":"no route","type":"not_found"}}'
    end
    local key = (req.headers['authorization'] or ''):match('^Bearer (.*)$')
    local body, status, headers, refusal = scripted.admit(cfg, st, key, req, check, REFUSED)
    if not body then return status, headers, refusal end
    local has_tool = false
    for _, t in ipairs(body.tools or {}) do
      if type(t['function']) == 'table' and t['function'].name == cfg.tool then has_tool = true end
    end
    local user, turn, results = nil, 1, {}
    for _, m in ipairs(body.messages) do
      if m.role == 'user' and not user then
        user = text_of(m.content)
        -- OpenCode 1.18 sends `opencode run MESSAGE` in double quotes with its quotes escaped (\")
        -- and nothing else escaped: the fake reads the message back
        local inner = user:match('^"(.*)"$')
        if inner then user = inner:gsub('\\"', '"') end
      end
      if m.role == 'tool' then turn = turn + 1; results[#results + 1] = text_of(m.content) end
    end
    user = user or ''
    local reply, x = scripted.reply(cfg, st, has_tool,
      { key = user, user = user, turn = turn, n = n, messages = body.messages, tool_results = results })
    local u = { prompt_tokens = x.input_tokens, completion_tokens = x.output_tokens }
    u.total_tokens = u.prompt_tokens + u.completion_tokens
    local id = 'chatcmpl-' .. n
    local chunks = {}
    local function add(delta, finish, usage)
      chunks[#chunks + 1] = 'data: ' .. jsonl.encode({ id = id, object = 'chat.completion.chunk', model = body.model,
        choices = jsonl.array { { index = 0, delta = delta, finish_reason = finish or jsonl.null } }, usage = usage }) .. '\n\n'
    end
    local finish = 'stop'
    if reply.tool_calls and #reply.tool_calls > 0 then
      finish = 'tool_calls'
      local calls = jsonl.array()
      for i, tc in ipairs(reply.tool_calls) do
        calls[i] = { index = i - 1, id = string.format('call_%d_%d', n, i), type = 'function',
          ['function'] = { name = tc.name or cfg.tool, arguments = tc.arguments or jsonl.encode({ command = tc.command,
            description = 'cseng fake' }) } }
        st.tool_calls_issued = st.tool_calls_issued + 1
      end
      add({ role = 'assistant', tool_calls = calls })
    else
      add({ role = 'assistant', content = reply.content or 'Done.' })
    end
    add(setmetatable({}, nil), finish)
    chunks[#chunks + 1] = 'data: ' .. jsonl.encode({ id = id, object = 'chat.completion.chunk', model = body.model,
      choices = jsonl.array(), usage = u }) .. '\n\n'
    chunks[#chunks + 1] = 'data: [DONE]\n\n'
    return 200, { ['Content-Type'] = 'text/event-stream', ['Cache-Control'] = 'no-cache' }, table.concat(chunks)
  end

  return scripted.object(cfg, st, answer)
end

--- Start the fake on 127.0.0.1 (an ephemeral port); the API's base URL is f.url .. '/v1'.
fake.start = scripted.starter(fake)

return fake
