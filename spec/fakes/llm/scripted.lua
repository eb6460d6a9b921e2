--- What the scripted model API fakes share (spec/fakes/llm/chat_stream.lua, gemini.lua, messages.lua,
--- responses.lua): their switches, the counters they keep, a request's reply from the script with
--- its usage, the gate of a request (its key, body and checks: S.admit), and the fake's object
--- (f.handler, f.stats, f.close; start on a loopback port). Each
--- fake keeps its own API's shapes: routes, errors, checks and how a reply is written.
---
---   local scripted = require 'spec.fakes.llm.scripted'
---   local cfg = scripted.config('gemini fake', opts, { api_key = 'k', tool = 'run_shell_command' })
---   local st = scripted.stats { count_tokens = 0 }
---   local reply, usage, held = scripted.reply(cfg, st, has_tool, { key = user, user = user, turn = t, ... }, hold)
---   return scripted.object(cfg, st, answer, hold)     -- in fake.new
---   fake.start = scripted.starter(fake, '/v1')         -- f.url: the listener's URL and the suffix
local serve = require('cseng.serve')
local jsonl = require('cseng.lib.jsonl')

local S = {}

--- The caller's switches over defaults; a script is required (name: the fake's, for the message).
---@param name string
---@param opts? table
---@param defaults table
---@return table
function S.config(name, opts, defaults)
  local cfg = {}
  for k, v in pairs(opts or {}) do cfg[k] = v end
  for k, v in pairs(defaults) do
    if cfg[k] == nil then cfg[k] = v end
  end
  assert(cfg.script, name .. ': a script is required')
  return cfg
end

--- The counters every fake keeps (requests, completions, side_requests, unauthorized,
--- bad_requests, not_found, problems, convs, conversations, tool_calls_issued), with extra's.
---@param extra? table
---@return table
function S.stats(extra)
  local st = { requests = 0, completions = 0, side_requests = 0, unauthorized = 0, bad_requests = 0, not_found = 0,
    problems = {}, convs = {}, conversations = 0, tool_calls_issued = 0 }
  for k, v in pairs(extra or {}) do st[k] = v end
  return st
end

--- A request whose body fails the API's checks: counted in bad_requests, listed in problems.
---@param st table
---@param problem string
function S.bad(st, problem)
  st.bad_requests = st.bad_requests + 1
  st.problems[#st.problems + 1] = problem
end

--- The checks every streamed chat API makes of a request body first: a JSON object, a model (the
--- expected one when cfg.model is set), `stream = true`. Returns nil or the reason it is bad.
---@param body any
---@param cfg table
---@return string|nil
function S.check_stream(body, cfg)
  if type(body) ~= 'table' then return 'body is not a JSON object' end
  if type(body.model) ~= 'string' or body.model == '' then return 'no model' end
  if cfg.model and body.model ~= cfg.model then return 'unexpected model ' .. body.model end
  if body.stream ~= true then return 'stream is not true' end
  return nil
end

--- The gate a routed request passes in every fake: its key (a wrong one is a 401 with the API's
--- `refused.unauthorized` body, counted in unauthorized), then its JSON body and the API's
--- `check(body, cfg)` (a failed one is a 400 with `refused.bad(problem)`, counted by S.bad).
--- Returns the decoded body, or nil and the answer (status, headers, body).
---@param key string|nil the key the request carries
---@param check fun(body: any, cfg: table): string|nil
---@param refused {unauthorized: string, bad: fun(problem: string): string}
function S.admit(cfg, st, key, req, check, refused)
  if key ~= cfg.api_key then
    st.unauthorized = st.unauthorized + 1
    return nil, 401, { ['Content-Type'] = 'application/json' }, refused.unauthorized
  end
  local body = jsonl.decode(req.body or '')
  local problem = check(body, cfg)
  if problem then
    S.bad(st, problem)
    return nil, 400, { ['Content-Type'] = 'application/json' }, refused.bad(problem)
  end
  return body
end

--- The usage the fake charges a scripted turn: cfg.usage({turn}), by default input 1000 x turn
--- + 7 and output 50 + turn ({input_tokens, output_tokens, ...}).
---@param cfg table
---@param turn integer
---@return table
function S.usage(cfg, turn)
  return cfg.usage and cfg.usage({ turn = turn }) or { input_tokens = 1000 * turn + 7, output_tokens = 50 + turn }
end

--- One request's reply. Without the shell tool (has_tool false: a CLI's side query) it is a short
--- text, counted in side_requests and charged cfg.side_usage (default input 11, output 1; summed in
--- st.side_usage where the fake keeps it). Else a turn of the conversation conv.user: counted in
--- st.convs (its requests, its latest tool results), held when cfg.hold(conv) says so and `hold`
--- is given (then nil, nil, true: the caller returns hold.wait()), else answered by
--- cfg.script(conv) and charged S.usage. Returns the reply and its usage.
---@param cfg table
---@param st table
---@param has_tool boolean
---@param conv table {key, user, turn, n, tool_results, ...}: what the script is given
---@param hold? table spec/fakes/llm/hold.lua's
---@return table|nil reply
---@return table|nil usage
---@return boolean|nil held
function S.reply(cfg, st, has_tool, conv, hold)
  if not has_tool then
    st.side_requests = st.side_requests + 1
    local su = cfg.side_usage or { input = 11, output = 1 }
    if st.side_usage then
      st.side_usage.input, st.side_usage.output = st.side_usage.input + su.input, st.side_usage.output + su.output
    end
    return { content = 'ok' }, { input_tokens = su.input, output_tokens = su.output }
  end
  local c = st.convs[conv.user]
  if not c then
    c = { requests = 0 }
    st.convs[conv.user] = c
    st.conversations = st.conversations + 1
  end
  c.requests = c.requests + 1
  c.tool_results = conv.tool_results
  if hold and cfg.hold and cfg.hold(conv) then return nil, nil, true end
  local reply = cfg.script(conv)
  st.completions = st.completions + 1
  return reply, S.usage(cfg, conv.turn)
end

--- Server-sent events as the Anthropic and OpenAI Responses APIs stream them: each event's
--- `event:` line is its type.
---@param events table[]
---@return string
function S.sse(events)
  local out = {}
  for _, e in ipairs(events) do out[#out + 1] = 'event: ' .. e.type .. '\ndata: ' .. jsonl.encode(e) .. '\n\n' end
  return table.concat(out)
end

--- The fake without a listener: f.handler = answer, f.stats(), f.close() (which ends held
--- requests too).
---@param cfg table
---@param st table
---@param answer fun(req: table): integer, table, string
---@param hold? table
---@return table
function S.object(cfg, st, answer, hold)
  local self = { api_key = cfg.api_key, handler = answer }
  function self.stats() return st end
  function self.close()
    if hold then hold.closed = true end
    if self.server then self.server:close() end
  end
  return self
end

--- fake.start for a fake module with new(opts): the fake on 127.0.0.1 (an ephemeral port), f.url
--- the listener's URL followed by suffix.
---@param fake table
---@param suffix? string
---@return fun(opts: table): table
function S.starter(fake, suffix)
  return function(opts)
    local self = fake.new(opts)
    self.server = assert(serve.listen { handler = self.handler })
    self.url = self.server:url() .. (suffix or '')
    return self
  end
end

return S
