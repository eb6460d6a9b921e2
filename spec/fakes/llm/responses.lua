--- A loopback fake of the OpenAI Responses API (`POST /v1/responses`, streamed as server-sent
--- events), the API the Codex CLI speaks, on cseng.serve. Like spec/fakes/llm/fake.lua it is a scripted
--- model that counts what it was asked:
---
---   local rf = require 'spec.fakes.llm.responses'
---   local f = rf.start { api_key = 'sk-x', script = function(conv) return { tool_calls = {{ command = 'ls' }} } end }
---   -- base URL: f.url (…/v1); f.stats() -> {requests, completions, unauthorized, bad_requests, problems, convs, tool_results}
---
--- A conversation is keyed by its last user message that is not harness context (the prompt); its
--- turn is 1 + the function_call_output items the request carries. The script's reply is
--- {content=} (a final message) or {tool_calls={{command=} | {name=, arguments=}}}; a command
--- becomes a call of the CLI's shell tool (`exec_command {cmd}` for Codex: `tool` option).
--- Checks (a failed one is a 400 counted in bad_requests): the bearer, `stream = true`, `model`,
--- an `input` list, the shell tool among `tools`, every function_call of the input answered by a
--- function_call_output with its call_id.
--- Per turn the fake charges `usage(conv)` (default: input 1000 x turn + 7, output 50 + turn tokens).
--- `hold(conv)` true: that request is never answered (counted in `held`, not in completions) until
--- the fake closes, as a model slower than anything the client does meanwhile: a spec of the spend
--- ceiling holds the turn after the one that crosses it, so the verdict is a count, not a race.
local jsonl = require('cseng.lib.jsonl')
local scripted = require('spec.fakes.llm.scripted')

local fake = {}

local sse = scripted.sse

local function text_of(content)
  if type(content) == 'string' then return content end
  local parts = {}
  for _, c in ipairs(type(content) == 'table' and content or {}) do
    if type(c) == 'table' and type(c.text) == 'string' then parts[#parts + 1] = c.text end
  end
  return table.concat(parts, '\n')
end

-- the API's answers to a wrong key and to a request that fails the checks
local REFUSED = {
  unauthorized = '{"error":{"message":"bad key","code":"invalid_api_key"}}',
  bad = function(problem) return jsonl.encode({ error = { message = problem } }) end,
}

-- the protocol checks; returns nil or the reason the request is bad
local function check(body, cfg)
  local problem = scripted.check_stream(body, cfg)
  if problem then return problem end
  if type(body.input) ~= 'table' or #body.input == 0 then return 'input: not a non-empty list' end
  local has_tool = false
  for _, t in ipairs(body.tools or {}) do if t.name == cfg.tool then has_tool = true end end
  if not has_tool then return 'tools: no ' .. cfg.tool end
  local open = {}
  for _, it in ipairs(body.input) do
    if it.type == 'function_call' then open[it.call_id] = true
    elseif it.type == 'function_call_output' then
      if not open[it.call_id] then return 'function_call_output for an unknown call ' .. tostring(it.call_id) end
      open[it.call_id] = nil
    end
  end
  if next(open) then return 'a function_call is not answered: ' .. tostring(next(open)) end
  return nil
end

--- The fake without a listener: f.handler(req) answers one request (spec/fakes/llm/model.lua
--- serves it beside the other APIs on one port).
---@param opts table {api_key?, model?, script = fun(conv): reply, tool? (exec_command), args? = fun(command): table,
---  usage? = fun(conv): table, hold? = fun(conv): boolean}
function fake.new(opts)
  local cfg = scripted.config('responses fake', opts, { api_key = 'sk-test-key', tool = 'exec_command',
    args = function(command) return { cmd = command } end })
  local st = scripted.stats { held = 0, tool_results = 0, requests_log = {} }
  st.side_requests = nil -- every request of the Responses API is a turn

  local hold = require('spec.fakes.llm.hold')(st)

  local function answer(req)
    st.requests = st.requests + 1
    local n = st.requests
    st.requests_log[n] = { path = req.path, method = req.method }
    if req.method ~= 'POST' or req.path ~= '/v1/responses' then
      st.not_found = st.not_found + 1
      return 404, { ['Content-Type'] = 'application/json' }, '{"error":{"message":"no route"}}'
    end
    local key = (req.headers['authorization'] or ''):match('^Bearer (.*)$')
    local body, status, headers, refusal = scripted.admit(cfg, st, key, req, check, REFUSED)
    if not body then return status, headers, refusal end
    local user, turn, outputs = nil, 1, {}
    for _, it in ipairs(body.input) do
      if it.type == 'message' and it.role == 'user' then
        local tx = text_of(it.content)
        if not tx:match('^%s*<') then user = tx end -- harness context (<environment_context>...) is not the prompt
      elseif it.type == 'function_call_output' then
        turn = turn + 1
        outputs[#outputs + 1] = type(it.output) == 'string' and it.output or jsonl.encode(it.output)
      end
    end
    user = user or ''
    local c = st.convs[user]
    if not c then
      c = { requests = 0, tool_results = {} }
      st.convs[user] = c
      st.conversations = st.conversations + 1
    end
    c.requests = c.requests + 1
    c.tool_results = outputs
    st.tool_results = st.tool_results + (#outputs > 0 and 1 or 0)
    local conv = { key = user, user = user, turn = turn, n = n, input = body.input, tool_results = outputs }
    if cfg.hold and cfg.hold(conv) then return hold.wait() end
    local reply = cfg.script(conv)
    local id = 'resp_' .. n
    local items = {}
    if reply.tool_calls and #reply.tool_calls > 0 then
      for i, tc in ipairs(reply.tool_calls) do
        local args = tc.arguments or jsonl.encode(cfg.args(tc.command))
        items[#items + 1] = { type = 'function_call', id = string.format('fc_%d_%d', n, i),
          call_id = string.format('call_%d_%d', n, i), name = tc.name or cfg.tool, arguments = args, status = 'completed' }
        st.tool_calls_issued = st.tool_calls_issued + 1
      end
    else
      items[1] = { type = 'message', id = 'msg_' .. n, role = 'assistant', status = 'completed',
        content = jsonl.array { { type = 'output_text', text = reply.content or 'Done.', annotations = jsonl.array() } } }
    end
    local u = cfg.usage and cfg.usage(conv) or { input_tokens = 1000 * turn + 7, output_tokens = 50 + turn }
    local usage = { input_tokens = u.input_tokens, output_tokens = u.output_tokens,
      input_tokens_details = { cached_tokens = u.cached_tokens or 0 },
      output_tokens_details = { reasoning_tokens = u.reasoning_tokens or 0 },
      total_tokens = u.input_tokens + u.output_tokens }
    c.usage = c.usage or {}
    c.usage[#c.usage + 1] = usage
    st.completions = st.completions + 1
    local resp = { id = id, object = 'response', created_at = 1700000000, model = body.model, status = 'in_progress',
      output = jsonl.array() }
    local events = { { type = 'response.created', sequence_number = 0, response = resp } }
    for i, it in ipairs(items) do
      events[#events + 1] = { type = 'response.output_item.added', output_index = i - 1, item = it }
      events[#events + 1] = { type = 'response.output_item.done', output_index = i - 1, item = it }
    end
    local done = { id = id, object = 'response', created_at = 1700000000, model = body.model, status = 'completed',
      output = jsonl.array(items), usage = usage }
    events[#events + 1] = { type = 'response.completed', response = done }
    for i, e in ipairs(events) do e.sequence_number = i - 1 end
    return 200, { ['Content-Type'] = 'text/event-stream', ['Cache-Control'] = 'no-cache' }, sse(events)
  end

  return scripted.object(cfg, st, answer, hold)
end

--- Start the fake on 127.0.0.1 (an ephemeral port); base URL f.url (…/v1).
fake.start = scripted.starter(fake, '/v1')

return fake
