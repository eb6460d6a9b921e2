--- A loopback fake of the Anthropic Messages API (`POST /v1/messages`, streamed as server-sent
--- events), the API Claude Code speaks, on cseng.serve; a scripted model that counts what it was
--- asked, like spec/fakes/llm/fake.lua:
---
---   local mf = require 'spec.fakes.llm.messages'
---   local f = mf.start { api_key = 'sk-ant-x', script = function(conv) return { tool_calls = {{ command = 'ls' }} } end }
---   -- ANTHROPIC_BASE_URL = f.url; f.stats() -> {requests, completions, side_requests, bad_requests, problems, convs}
---
--- The agent's requests carry the `Bash` tool; a conversation is keyed by its first user text that
--- is not a <system-reminder>, its turn is 1 + the tool_result blocks it carries. Requests without
--- the Bash tool (a CLI's side queries: titles, summaries) are answered with a short text and counted
--- in side_requests. Checks (a failed one is a 400): the x-api-key (or bearer), `stream = true`,
--- `model`, `max_tokens`, user/assistant messages alternating from a user one (system messages may sit
--- between them), and every tool_use answered by a
--- tool_result with its id in the next user message.
--- Per turn the fake charges `usage({turn})` (default: input 1000 x turn + 7, output 50 + turn tokens).
--- `hold(conv)` true: that request is never answered (counted in `held`, not in completions) until
--- the fake closes, as a model slower than anything the client does meanwhile: a spec of the spend
--- ceiling holds the turn after the one that crosses it, so the verdict is a count, not a race.
local jsonl = require('cseng.lib.jsonl')
local scripted = require('spec.fakes.llm.scripted')

local fake = {}

local sse = scripted.sse

local function blocks(content)
  if type(content) == 'string' then return { { type = 'text', text = content } } end
  return type(content) == 'table' and content or {}
end

-- the API's answers to a wrong key and to a request that fails the checks
local REFUSED = {
  unauthorized = '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
  bad = function(problem) return jsonl.encode({ type = 'error', error = { type = 'invalid_request_error', message = problem } }) end,
}

local function check(body, cfg)
  local problem = scripted.check_stream(body, cfg)
  if problem then return problem end
  if math.type(body.max_tokens) ~= 'integer' then return 'no max_tokens' end
  local ms = body.messages
  if type(ms) ~= 'table' or #ms == 0 or ms[1].role ~= 'user' then return 'messages: must start with a user message' end
  -- system messages (Claude Code sends its environment as one) sit between turns; the rest alternate
  local turns = {}
  for _, m in ipairs(ms) do if m.role ~= 'system' then turns[#turns + 1] = m end end
  ms = turns
  for i, m in ipairs(ms) do
    local want = i % 2 == 1 and 'user' or 'assistant'
    if m.role ~= want then return string.format('messages[%d]: %s, expected %s', i, tostring(m.role), want) end
    if m.role == 'assistant' then
      local ids = {}
      for _, b in ipairs(blocks(m.content)) do if b.type == 'tool_use' then ids[b.id] = true end end
      if next(ids) then
        local nxt = ms[i + 1]
        if not nxt then return string.format('messages[%d]: a tool_use is not answered', i) end
        for _, b in ipairs(blocks(nxt.content)) do if b.type == 'tool_result' then ids[b.tool_use_id] = nil end end
        if next(ids) then return 'tool_use ' .. tostring(next(ids)) .. ' has no tool_result' end
      end
    end
  end
  return nil
end

--- The fake without a listener: f.handler(req) answers one request (spec/fakes/llm/model.lua
--- serves it beside the other APIs on one port).
---@param opts table {api_key?, model?, script = fun(conv): reply, tool? ('Bash'), usage? = fun(conv): table, hold? = fun(conv): boolean}
function fake.new(opts)
  local cfg = scripted.config('messages fake', opts, { api_key = 'sk-ant-test', tool = 'Bash' })
  local st = scripted.stats { held = 0 }

  local hold = require('spec.fakes.llm.hold')(st)

  local function answer(req)
    st.requests = st.requests + 1
    local n = st.requests
    if req.method ~= 'POST' or req.path ~= '/v1/messages' then
      st.not_found = st.not_found + 1
      return 404, { ['Content-Type'] = 'application/json' }, '{"type":"error","error":{"type":"not_found_error","message":"no route"}}'
    end
    local key = req.headers['x-api-key'] or (req.headers['authorization'] or ''):match('^Bearer (.*)$')
    local body, status, headers, refusal = scripted.admit(cfg, st, key, req, check, REFUSED)
    if not body then return status, headers, refusal end
    local has_tool = false
    for _, t in ipairs(body.tools or {}) do if t.name == cfg.tool then has_tool = true end end
    local user, turn, results = nil, 1, {}
    for _, m in ipairs(body.messages) do
      if m.role == 'user' then
        for _, b in ipairs(blocks(m.content)) do
          if b.type == 'text' and not user and not b.text:match('^%s*<system%-reminder>') then user = b.text end
          if b.type == 'tool_result' then
            turn = turn + 1
            local c = b.content
            if type(c) == 'table' then
              local parts = {}
              for _, x in ipairs(c) do parts[#parts + 1] = tostring(x.text or '') end
              c = table.concat(parts, '\n')
            end
            results[#results + 1] = tostring(c)
          end
        end
      end
    end
    user = user or ''
    local reply, u, held = scripted.reply(cfg, st, has_tool,
      { key = user, user = user, turn = turn, n = n, messages = body.messages, tool_results = results }, hold)
    if held then return hold.wait() end
    -- a side query is charged as a turn here (the default usage, not side_usage)
    if not has_tool then u = scripted.usage({}, turn) end
    local events = { { type = 'message_start', message = { id = 'msg_' .. n, type = 'message', role = 'assistant',
      model = body.model, content = jsonl.array(), stop_reason = jsonl.null, stop_sequence = jsonl.null,
      usage = { input_tokens = u.input_tokens, output_tokens = 1, cache_creation_input_tokens = u.cache_creation_input_tokens or 0,
        cache_read_input_tokens = u.cache_read_input_tokens or 0 } } } }
    local stop = 'end_turn'
    if reply.tool_calls and #reply.tool_calls > 0 then
      stop = 'tool_use'
      for i, tc in ipairs(reply.tool_calls) do
        local id = string.format('toolu_%d_%d', n, i)
        events[#events + 1] = { type = 'content_block_start', index = i - 1,
          content_block = { type = 'tool_use', id = id, name = tc.name or cfg.tool, input = setmetatable({}, nil) } }
        events[#events + 1] = { type = 'content_block_delta', index = i - 1,
          delta = { type = 'input_json_delta', partial_json = tc.arguments or jsonl.encode({ command = tc.command }) } }
        events[#events + 1] = { type = 'content_block_stop', index = i - 1 }
        st.tool_calls_issued = st.tool_calls_issued + 1
      end
    else
      events[#events + 1] = { type = 'content_block_start', index = 0, content_block = { type = 'text', text = '' } }
      events[#events + 1] = { type = 'content_block_delta', index = 0, delta = { type = 'text_delta', text = reply.content or 'Done.' } }
      events[#events + 1] = { type = 'content_block_stop', index = 0 }
    end
    events[#events + 1] = { type = 'message_delta', delta = { stop_reason = stop, stop_sequence = jsonl.null },
      usage = { output_tokens = u.output_tokens } }
    events[#events + 1] = { type = 'message_stop' }
    return 200, { ['Content-Type'] = 'text/event-stream', ['Cache-Control'] = 'no-cache' }, sse(events)
  end

  return scripted.object(cfg, st, answer, hold)
end

--- Start the fake on 127.0.0.1 (an ephemeral port); ANTHROPIC_BASE_URL = f.url.
fake.start = scripted.starter(fake)

return fake
