--- The LLM agent loop behind the openrouter and ai_gateway solvers: one OpenAI-compatible
--- chat-completions conversation whose only tool, `bash`, runs a command in the sandbox.
---
--- A turn is one completion. The loop ends when the model answers without a tool call ("done"),
--- after max_turns completions ("max_turns"; the tool calls of the last one still run), when the
--- solve time is up ("timeout": the request, command or back-off in flight is cut at the deadline),
--- or on an API error that retrying cannot cure: that one is raised as {stage='solve', message,
--- code, usage, transcript}, so the runner records error_stage=solve. 429, 408, 5xx, transport
--- timeouts and resets are retried with exponential back-off and jitter, honouring Retry-After;
--- under the run's admission of the model endpoint (ctx.admission, key `model:<host>`), a 429 is
--- retried when admission lets it (its pause, its pace) without spending a try;
--- 401/403 fail at once with a message naming the credential variable. Tokens are summed from each
--- response's `usage`; cost is the provider's `usage.cost` when reported, else tokens x prices.
local http = require('cseng.http')
local clock = require('cseng.clock')
local errors = require('cseng.lib.errors')
local task = require('cseng.task')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local atif = require('cseng.evals.atif')
local price_table = require('cseng.evals.prices')

-- a helper of the solvers in lua/solvers/ (shared/: not one `--solver` names)
local agent = { name = 'agent', description = 'the loop behind the openrouter and ai_gateway solvers' }

--- Option defaults; each may be set in the plan or run options (ctx.options).
agent.DEFAULTS = {
  max_turns = 50,              -- completions per trial
  llm_command_timeout = 300,   -- seconds per bash call (cut to the solve time left)
  llm_output_bytes = 8192,     -- tail of stdout and of stderr the model sees, each
  llm_request_timeout = 300,   -- seconds per HTTP request (cut to the solve time left)
  llm_attempts = 5,            -- tries per completion (1 + retries)
  llm_backoff_seconds = 1,     -- first back-off; doubles per retry, with jitter
  llm_backoff_max = 30,        -- cap of one back-off (Retry-After is honoured beyond it)
  llm_transcript_bytes = 2 * 1024 * 1024, -- bound of the returned transcript
}

--- The agent's name and version in its ATIF trajectories (agent.name / agent.version).
agent.ATIF_NAME, agent.VERSION = 'cseng-agent', '1.1'

--- List prices: lua/cseng/evals/prices.lua (input, cached input, cache write, output per 1M
--- tokens), used only when the response carries no `usage.cost`.
agent.PRICES = price_table.TABLE

--- The system prompt: a string.format template (workdir, command timeout, output bytes).
agent.SYSTEM_PROMPT = table.concat({
  'You are an autonomous software engineer working in a Linux sandbox. Solve the task you are given',
  ' by running shell commands with the `bash` tool.\n\n',
  '- Each `bash` call runs `bash -c COMMAND` in a new process, starting in the working directory %s.',
  ' Files persist between calls; shell state (cd, variables, background jobs) does not.\n',
  '- Commands are killed after %d seconds. Do not start interactive programs (editors, pagers, prompts);',
  ' write files with heredocs, sed or python.\n',
  '- You see the exit code and the last %d bytes of stdout and of stderr.\n',
  '- Nobody will answer questions. Work until the task is done and check your work, then reply with a',
  ' short summary and no tool call.',
})

local TOOLS = jsonl.array {
  {
    type = 'function',
    ['function'] = {
      name = 'bash',
      description = 'Run a shell command in the sandbox (bash -c, in the task working directory)'
        .. ' and return its exit code and output.',
      parameters = {
        type = 'object',
        properties = { command = { type = 'string', description = 'the shell command to run' } },
        required = jsonl.array { 'command' },
      },
    },
  },
}

-- Transport failures worth another try (cseng.http codes).
local RETRY_CODES = {
  -- not ENOTFOUND: a name that does not resolve will not resolve on the next try either
  ETIMEDOUT = true, ECONNRESET = true, ECONNREFUSED = true, EHOSTUNREACH = true, ECURL = true,
}

---@class AgentConfig
---@field name string solver name, prefixes messages ("openrouter")
---@field base_url string up to and excluding /chat/completions
---@field api_key string the bearer credential (registered as a secret)
---@field key_var string the variable it came from, named in auth errors
---@field model string
---@field headers? table<string,string> extra request headers
---@field body? table extra request body members (e.g. OpenRouter's usage={include=true})

---@class AgentSolverDef
---@field name string
---@field description string
---@field config fun(options: table, getenv: fun(name: string): string|nil): AgentConfig|nil, string?, string?

---@class AgentUsage
---@field model string
---@field turns integer completions received
---@field tool_calls integer tool calls the model made (malformed ones included)
---@field prompt_tokens integer
---@field completion_tokens integer
---@field total_tokens integer
---@field cost_usd number|nil nil when no response could be priced
---@field cost_source string provider | prices | mixed | partial | unknown
---@field stop_reason string done | max_turns | timeout | max_cost | error

local function num_option(ctx, key)
  local v = ctx.options and ctx.options[key]
  if v == nil then return agent.DEFAULTS[key] end
  local n = tonumber(v)
  if not n or n < 0 then
    errors.raise(errors.ECONFIG, string.format('option %s: expected a non-negative number, got %s', key, tostring(v)),
      { stage = 'solve' })
  end
  return n
end

--- Prices per 1M tokens {in, out} from the options or CSENG_LLM_PRICE_IN/OUT, else the table, else
--- nil (lua/cseng/evals/prices.lua has the cached and cache-write prices too).
---@return number[]|nil prices {in, out}, string|nil where
function agent.prices(ctx, model)
  local p, src = price_table.lookup(ctx.options, ctx.getenv, model)
  if not p then return nil end
  return { p.input, p.output }, src
end

--- Parse a Retry-After value into seconds (>= 0), or nil (util.retry_after).
---@param v string|nil
---@return number|nil
agent.retry_after = util.retry_after

-- The message of an API error body ({"error": {"message": ...}} or text), short and redacted.
local function api_message(body)
  local doc = type(body) == 'string' and jsonl.decode(body)
  local m
  if type(doc) == 'table' then
    local e = doc.error
    m = type(e) == 'table' and (e.message or e.code) or e or doc.message
    if type(e) == 'table' and type(e.metadata) == 'table' and type(e.metadata.raw) == 'string' then
      m = tostring(m) .. ' (' .. e.metadata.raw .. ')'
    end
  end
  m = tostring(m or body or '')
  m = util.trim(m:gsub('%s+', ' '))
  if #m > 300 then m = m:sub(1, 300) .. '...' end
  return secrets.redact(m)
end

-- One bounded piece of text for the transcript.
local function clip(s, n)
  if type(s) ~= 'string' then return s end
  if #s <= n then return s end
  return s:sub(1, n) .. string.format('... [%d bytes cut]', #s - n)
end

-- The transcript: entries kept under a byte bound; the oldest after the opening two go first.
local Transcript = {}
Transcript.__index = Transcript

local function entry_size(e)
  local n = 64
  for _, v in pairs(e) do
    if type(v) == 'string' then n = n + #v elseif type(v) == 'table' then n = n + entry_size(v) end
  end
  return n
end

function Transcript.new(limit)
  return setmetatable({ entries = jsonl.array(), sizes = {}, bytes = 0, limit = limit, dropped = 0 }, Transcript)
end

function Transcript:add(e)
  local n = entry_size(e)
  local es, sz = self.entries, self.sizes
  es[#es + 1], sz[#sz + 1] = e, n
  self.bytes = self.bytes + n
  while self.bytes > self.limit and #es > 3 do
    self.bytes = self.bytes - table.remove(sz, 3)
    table.remove(es, 3)
    self.dropped = self.dropped + 1
  end
end

-- The fatal-error path: raise what the runner records, with what was spent so far.
local function fail(state, message, code)
  state.usage.stop_reason = 'error'
  state.usage.error = message
  state.log:add({ event = 'stop', stop_reason = 'error', error = message, code = code })
  errors.raise(code or errors.EAPI, message, { stage = 'solve', usage = state.usage, transcript = state.log.entries,
    trajectory = state.tr:finish({ stop_reason = 'error', error = message }) })
end

-- One completion, with retries. Returns the decoded response, or nil, msg, CODE; CODE
-- 'ESOLVETIME' means the solve time ran out (not an API failure).
local function complete(state, body)
  local cfg, o, usage = state.cfg, state.o, state.usage
  local url = cfg.base_url:gsub('/+$', '') .. '/chat/completions'
  local headers = util.merge({ ['Content-Type'] = 'application/json', Authorization = 'Bearer ' .. cfg.api_key },
    cfg.headers)
  local function refused(what, code)
    return nil, string.format('%s: the API refused the credential in %s (%s)', cfg.name, cfg.key_var, what), code
  end
  local last_err, last_code
  local adm = state.adm -- the endpoint's admission (ctx.admission), or nil
  local attempt, tries = 0, math.max(1, math.floor(o.llm_attempts))
  while attempt < tries do
    attempt = attempt + 1
    local left = state.left()
    if left <= 0 then
      local why = last_err and (' (last API error: ' .. last_err .. ')') or ''
      return nil, 'the solve time ran out' .. why, errors.ESOLVETIME
    end
    local seq, held
    if adm then
      seq = adm:acquire(state.deadline)
      if not seq then
        return nil, string.format('the solve time ran out waiting for admission to %s (throttled %d times)%s', adm.key,
          adm.counts.throttled, last_err and (' (last API error: ' .. last_err .. ')') or ''), errors.ESOLVETIME
      end
      held = adm:hold()
      left = state.left()
    end
    local _ <close> = held -- the place is released on every path (a cancelled request too)
    usage.api_requests = usage.api_requests + 1
    local res, err, code = http.request { method = 'POST', url = url, headers = headers, body = body,
      timeout = math.max(0.001, math.min(o.llm_request_timeout, left)) }
    if held then held:release() end
    local retry_after, fatal
    if not res then
      if code == errors.ETIMEDOUT and state.left() <= 0 then
        return nil, 'the solve time ran out while waiting for the model', errors.ESOLVETIME
      end
      last_err, last_code = secrets.redact(tostring(err)), code
      fatal = not RETRY_CODES[code]
    elseif res.status >= 200 and res.status < 300 then
      local doc, derr = jsonl.decode(res.body)
      if type(doc) == 'table' and doc.error ~= nil then -- an error inside a 200 (upstream failures)
        local ec = type(doc.error) == 'table' and tonumber(doc.error.code) or nil
        last_err, last_code = string.format('HTTP %d with an error body: %s', res.status, api_message(res.body)), errors.EAPI
        if ec == 401 or ec == 403 then
          return refused(last_err, 'HTTP_' .. ec)
        end
        fatal = ec ~= nil and ec < 500 and ec ~= 429 and ec ~= 408
      elseif type(doc) ~= 'table' or type(doc.choices) ~= 'table' or type(doc.choices[1]) ~= 'table' then
        last_err = 'HTTP ' .. res.status .. ' but not a chat completion: '
          .. (derr and ('invalid JSON: ' .. derr) or api_message(res.body))
        last_code = errors.EBADRESPONSE
      else
        if adm then adm:success() end
        return doc
      end
    else
      local st = res.status
      last_err, last_code = string.format('HTTP %d: %s', st, api_message(res.body)), 'HTTP_' .. st
      if st == 401 or st == 403 then
        return refused(last_err, last_code)
      end
      if st == 429 or st == 408 or st >= 500 then
        retry_after = agent.retry_after(res.headers['retry-after'])
      else
        fatal = true
      end
    end
    if fatal then return nil, string.format('%s: %s (model %s)', cfg.name, last_err, cfg.model), last_code end
    if adm and (last_code == 'HTTP_429' or last_code == 'HTTP_503') then
      adm:throttled(seq, last_code, retry_after)
      if last_code == 'HTTP_429' then
        -- a refusal: retried once admission lets it (the pause, the paced starts), not a try spent
        attempt = attempt - 1
        usage.throttled = (usage.throttled or 0) + 1
        usage.retries = usage.retries + 1 -- a retry still (throttled says how many were 429s under admission)
        state.log:add({ event = 'api_throttled', turn = usage.turns + 1, error = last_err, code = last_code,
          retry_after_seconds = retry_after, admission = adm.key })
        goto continue
      end
    end
    if attempt >= o.llm_attempts then break end
    local wait = retry_after
      or math.min(o.llm_backoff_max, o.llm_backoff_seconds * 2 ^ (attempt - 1)) * (0.5 + 0.5 * math.random())
    if wait >= state.left() then
      return nil, 'the solve time ran out before the next try (last API error: ' .. last_err .. ')', errors.ESOLVETIME
    end
    usage.retries = usage.retries + 1
    state.log:add({ event = 'api_retry', turn = usage.turns + 1, attempt = attempt, error = last_err, code = last_code,
      wait_seconds = wait })
    task.sleep(wait)
    ::continue::
  end
  return nil, string.format('%s: gave up after %d tries: %s', cfg.name, o.llm_attempts, last_err), last_code
end

local function int(v) return math.tointeger(v) or (type(v) == 'number' and math.floor(v + 0.5)) or 0 end

local function account(state, resp)
  local usage, u = state.usage, resp.usage
  if type(resp.model) == 'string' then usage.response_model = resp.model end
  if type(u) ~= 'table' then
    usage.responses_without_usage = usage.responses_without_usage + 1
    state.unpriced = state.unpriced + 1
    return nil
  end
  local p, c = int(u.prompt_tokens), int(u.completion_tokens)
  local t = u.total_tokens ~= nil and int(u.total_tokens) or p + c
  usage.prompt_tokens = usage.prompt_tokens + p
  usage.completion_tokens = usage.completion_tokens + c
  usage.total_tokens = usage.total_tokens + t
  local pd, cd = u.prompt_tokens_details, u.completion_tokens_details
  -- cache reads and writes: OpenAI's cached_tokens, OpenRouter's cache_write_tokens, Anthropic-style
  -- cache_creation_input_tokens (all inside prompt_tokens on a chat-completions API)
  local cached = type(pd) == 'table' and int(pd.cached_tokens) or 0
  local creation = type(pd) == 'table' and int(pd.cache_write_tokens) or 0
  if creation == 0 then creation = int(u.cache_creation_input_tokens) end
  local reasoning = type(cd) == 'table' and int(cd.reasoning_tokens) or 0
  usage.cached_tokens = usage.cached_tokens + cached
  usage.cache_creation_tokens = usage.cache_creation_tokens + creation
  usage.reasoning_tokens = usage.reasoning_tokens + reasoning
  local cost, source
  if type(u.cost) == 'number' then
    cost, source = u.cost, 'provider'
    state.provider_priced = state.provider_priced + 1
  elseif state.prices then
    cost, source = price_table.cost({ input = p, cached = cached, cache_creation = creation, output = c }, state.prices), 'prices'
    state.table_priced = state.table_priced + 1
  else
    state.unpriced = state.unpriced + 1
  end
  if cost then state.cost = state.cost + cost end
  return { prompt_tokens = p, completion_tokens = c, total_tokens = t, cost_usd = cost, cached_tokens = cached,
    cache_creation_tokens = creation, reasoning_tokens = reasoning, cost_source = source or 'unpriced' }
end

local function finish_cost(state)
  local usage = state.usage
  local priced = state.provider_priced + state.table_priced
  if priced == 0 then
    usage.cost_usd, usage.cost_source = nil, 'unknown'
  else
    usage.cost_usd = state.cost
    if state.unpriced > 0 then usage.cost_source = 'partial'
    elseif state.table_priced == 0 then usage.cost_source = 'provider'
    elseif state.provider_priced == 0 then usage.cost_source = 'prices'
    else usage.cost_source = 'mixed' end
  end
end

local function tail(s, n)
  s = s or ''
  if #s <= n then return s, 0 end
  return s:sub(-n), #s - n
end

-- Run one tool call; returns the text for the model and a transcript entry.
local function run_tool(state, ctx, call)
  local o = state.o
  local entry = { role = 'tool', turn = state.usage.turns, tool_call_id = call.id }
  local function refuse(text)
    state.usage.tool_errors = state.usage.tool_errors + 1
    entry.error = text
    return 'error: ' .. text, entry
  end
  if call.name ~= 'bash' then
    return refuse(string.format('unknown tool %q; the only tool is bash {"command": "..."}', tostring(call.name)))
  end
  local args, perr = call.arguments, nil
  if type(args) == 'string' then
    if args:match('^%s*$') then args = {} else args, perr = jsonl.decode(args) end
  end
  if type(args) ~= 'table' then
    return refuse('the arguments are not a JSON object (' .. (perr or type(args))
      .. '); call bash with {"command": "<shell command>"}')
  end
  local cmd = args.command
  if type(cmd) ~= 'string' or cmd == '' then
    return refuse('missing "command" (a non-empty string); call bash with {"command": "<shell command>"}')
  end
  entry.command = clip(cmd, 8192)
  local left = state.left()
  if left <= 0 then
    entry.error = 'not run: the solve time ran out'
    return 'error: not run: the solve time ran out', entry
  end
  local timeout = math.min(o.llm_command_timeout, left)
  local res, err, code = ctx:exec(cmd, { timeout = timeout, env = ctx.task.config.agent_env,
    tail_bytes = math.floor(o.llm_output_bytes) })
  if not res then
    fail(state, state.cfg.name .. ': running a command in the sandbox: ' .. tostring(err), code or errors.EEXEC)
  end
  state.usage.commands = state.usage.commands + 1
  local out, out_cut = tail(res.stdout, o.llm_output_bytes)
  local errs, err_cut = tail(res.stderr, o.llm_output_bytes)
  out_cut = out_cut + (res.stdout_dropped or 0)
  err_cut = err_cut + (res.stderr_dropped or 0)
  local parts = { 'exit code: ' .. tostring(res.code) }
  if res.timed_out then
    parts[1] = parts[1]
      .. string.format(' (killed: the command ran past its %g s limit)', math.floor(timeout * 10 + 0.5) / 10)
  end
  if out ~= '' or out_cut > 0 then
    parts[#parts + 1] = out_cut > 0 and string.format('stdout (the first %d bytes cut):', out_cut) or 'stdout:'
    parts[#parts + 1] = out
  end
  if errs ~= '' or err_cut > 0 then
    parts[#parts + 1] = err_cut > 0 and string.format('stderr (the first %d bytes cut):', err_cut) or 'stderr:'
    parts[#parts + 1] = errs
  end
  if out == '' and errs == '' then parts[#parts + 1] = '(no output)' end
  local text = table.concat(parts, '\n')
  entry.exit_code, entry.timed_out, entry.seconds = res.code, res.timed_out or nil, res.elapsed
  entry.output = clip(text, 4096)
  return text, entry
end

-- Tool calls of a message, normalized; ids made up when the server gave none.
local function tool_calls_of(msg, turn)
  local out = {}
  if type(msg.tool_calls) ~= 'table' then return out end
  for i, tc in ipairs(msg.tool_calls) do
    if type(tc) == 'table' then
      local fn = type(tc['function']) == 'table' and tc['function'] or {}
      local args = fn.arguments
      if type(args) == 'table' then args = jsonl.encode(args) end -- some servers send an object
      out[#out + 1] = {
        id = type(tc.id) == 'string' and tc.id ~= '' and tc.id or string.format('call_%d_%d', turn, i),
        name = fn.name, arguments = args == nil and '' or tostring(args),
      }
    end
  end
  return out
end

local function one_line(s, n)
  s = tostring(s or ''):gsub('%s*\n%s*', ' \\n ')
  if #s > n then s = s:sub(1, n) .. '...' end
  return s
end

--- Run the agent loop in the sandbox of ctx with the given endpoint configuration.
---@param ctx SolveContext
---@param cfg AgentConfig
---@return table result {return_code, stdout, stderr, elapsed, timed_out, note, usage: AgentUsage, transcript}
function agent.run(ctx, cfg)
  local o = {}
  for k in pairs(agent.DEFAULTS) do o[k] = num_option(ctx, k) end
  o.max_turns = math.floor(o.max_turns)
  local solve_timeout = tonumber(ctx.timeout) or 900
  local t0 = clock.now()
  local deadline = t0 + math.floor(solve_timeout * 1e9)
  local usage = {
    provider = cfg.name, model = cfg.model, turns = 0, tool_calls = 0, tool_errors = 0, commands = 0,
    prompt_tokens = 0, completion_tokens = 0, total_tokens = 0, cached_tokens = 0, reasoning_tokens = 0,
    cache_creation_tokens = 0, api_requests = 0, retries = 0, responses_without_usage = 0,
  }
  local prices, price_source = price_table.lookup(ctx.options, ctx.getenv, cfg.model)
  if prices then
    usage.price_in_per_mtok, usage.price_out_per_mtok, usage.price_source = prices.input, prices.output, price_source
    usage.price_cached_per_mtok, usage.price_cache_write_per_mtok = prices.cached_input, prices.cache_write
  end
  local tr = atif.new { session_id = ctx.session_id or tostring(ctx.task.id),
    agent = { name = agent.ATIF_NAME, version = agent.VERSION, extra = { solver = cfg.name }, tool_definitions = TOOLS },
    model_name = cfg.model }
  local state = {
    tr = tr,
    cfg = cfg, o = o, usage = usage, log = Transcript.new(o.llm_transcript_bytes), prices = prices,
    cost = 0, provider_priced = 0, table_priced = 0, unpriced = 0,
    left = function() return (deadline - clock.now()) / 1e9 end, deadline = deadline,
  }
  -- the model endpoint's admission (lua/cseng/run/admission.lua through ctx.admission): one key per host
  local host = type(ctx.admission) == 'function' and cfg.base_url:match('^%a[%w+.-]*://([^/?#]+)')
  if host then state.adm = ctx.admission('model:' .. host:lower()) end
  local lines = {}
  local function say(s) lines[#lines + 1] = s end

  local workdir = ctx.workdir or ctx.task.workdir or '/'
  local system = string.format(agent.SYSTEM_PROMPT, workdir, math.floor(o.llm_command_timeout),
    math.floor(o.llm_output_bytes))
  local user = string.format('Working directory: %s\n\n%s', workdir, ctx.task.instruction or '')
  local messages = jsonl.array { { role = 'system', content = system }, { role = 'user', content = user } }
  state.log:add({ role = 'system', content = system })
  state.log:add({ role = 'user', content = clip(user, 65536) })
  tr:system(system)
  tr:user(user)
  say(string.format('%s agent: model %s, up to %d turns, %g s', cfg.name, cfg.model, o.max_turns, solve_timeout))

  local final
  while true do
    if usage.turns >= o.max_turns then usage.stop_reason = 'max_turns' break end
    if state.left() <= 0 then usage.stop_reason = 'timeout' break end
    -- the run's spend ceiling (--max-cost-usd): a turn is expected to cost what the last one did
    if ctx.budget and not ctx.budget.admit(state.last_turn_cost or 0) then usage.stop_reason = 'max_cost' break end
    local body = { model = cfg.model, messages = messages, tools = TOOLS }
    for k, v in pairs(cfg.body or {}) do body[k] = v end
    local opts = ctx.options or {}
    if opts.llm_max_tokens then body.max_tokens = math.tointeger(tonumber(opts.llm_max_tokens)) end
    if opts.llm_temperature then body.temperature = tonumber(opts.llm_temperature) end
    local r0 = clock.now()
    local resp, err, code = complete(state, jsonl.encode(body))
    if not resp then
      if code == errors.ESOLVETIME then
        usage.stop_reason, usage.last_api_error = 'timeout', err
        say('stop: ' .. err)
        break
      end
      fail(state, err, code)
    end
    usage.turns = usage.turns + 1
    local cost = account(state, resp)
    state.last_turn_cost = cost and cost.cost_usd or state.last_turn_cost
    if ctx.budget and cost and cost.cost_usd then ctx.budget.spend(cost.cost_usd) end
    local choice = resp.choices[1]
    local msg = type(choice.message) == 'table' and choice.message or {}
    local calls = tool_calls_of(msg, usage.turns)
    local content = type(msg.content) == 'string' and msg.content or nil
    local assistant = { role = 'assistant', content = content or jsonl.null }
    if #calls > 0 then
      local tc = jsonl.array()
      for i, c in ipairs(calls) do
        tc[i] = { id = c.id, type = 'function', ['function'] = { name = tostring(c.name), arguments = c.arguments } }
      end
      assistant.tool_calls = tc
    end
    -- reasoning the server returned goes back with its message (some reasoning models need it)
    for _, k in ipairs({ 'reasoning', 'reasoning_content' }) do
      if type(msg[k]) == 'string' and msg[k] ~= '' then assistant[k] = msg[k] end
    end
    if type(msg.reasoning_details) == 'table' and #msg.reasoning_details > 0 then
      assistant.reasoning_details = jsonl.array(msg.reasoning_details)
    end
    messages[#messages + 1] = assistant
    local logged = jsonl.array()
    for i, c in ipairs(calls) do logged[i] = { id = c.id, name = c.name, arguments = clip(c.arguments, 8192) } end
    state.log:add({
      role = 'assistant', turn = usage.turns, content = clip(content, 16384), tool_calls = #calls > 0 and logged or nil,
      finish_reason = choice.finish_reason, usage = cost, seconds = (clock.now() - r0) / 1e9,
    })
    local reasoning = type(msg.reasoning) == 'string' and msg.reasoning
      or type(msg.reasoning_content) == 'string' and msg.reasoning_content or nil
    local step = tr:agent { message = content or '', reasoning = reasoning ~= '' and reasoning or nil,
      model_name = type(resp.model) == 'string' and resp.model or nil, tool_calls = calls, llm_calls = 1,
      metrics = cost and {
        prompt_tokens = cost.prompt_tokens, completion_tokens = cost.completion_tokens, cached_tokens = cost.cached_tokens,
        cost_usd = cost.cost_usd, extra = { reasoning_tokens = cost.reasoning_tokens,
          cache_creation_input_tokens = cost.cache_creation_tokens, cost_source = cost.cost_source },
      } or { extra = { usage = 'not reported' } },
      extra = { finish_reason = choice.finish_reason } }
    if #calls == 0 then
      usage.stop_reason = 'done'
      final = content
      break
    end
    for _, c in ipairs(calls) do
      usage.tool_calls = usage.tool_calls + 1
      local text, entry = run_tool(state, ctx, c)
      tr:observe(step, c.id, text)
      messages[#messages + 1] = { role = 'tool', tool_call_id = c.id, content = text }
      state.log:add(entry)
      if entry.command then
        say('$ ' .. one_line(entry.command, 200))
        say(entry.exit_code and string.format('  -> exit %s%s (%.2f s)', tostring(entry.exit_code),
          entry.timed_out and ', timed out' or '', entry.seconds or 0) or ('  -> ' .. tostring(entry.error)))
      else
        say('tool call refused: ' .. one_line(entry.error, 200))
      end
    end
  end
  if usage.stop_reason == 'max_turns' and state.left() <= 0 then usage.stop_reason = 'timeout' end
  finish_cost(state)
  usage.elapsed_seconds = (clock.now() - t0) / 1e9
  usage.transcript_dropped = state.log.dropped > 0 and state.log.dropped or nil
  state.log:add({ event = 'stop', stop_reason = usage.stop_reason, turns = usage.turns })
  if final and final ~= '' then say('model: ' .. one_line(final, 1000)) end
  say(string.format('stop: %s after %d turn(s), %d tool call(s), %d tokens (%d in, %d out), cost %s (%s)',
    usage.stop_reason, usage.turns, usage.tool_calls, usage.total_tokens, usage.prompt_tokens, usage.completion_tokens,
    usage.cost_usd and string.format('$%.6f', usage.cost_usd) or 'unknown', usage.cost_source))
  local note = ({
    done = 'the model finished', max_turns = 'stopped after max_turns=' .. o.max_turns,
    timeout = 'stopped: the solve time ran out', max_cost = 'stopped: the run\'s spend ceiling (--max-cost-usd)',
  })[usage.stop_reason]
  return {
    return_code = usage.stop_reason == 'done' and 0 or 1,
    stdout = table.concat(lines, '\n') .. '\n',
    stderr = '',
    elapsed = usage.elapsed_seconds,
    timed_out = usage.stop_reason == 'timeout' or nil,
    note = note,
    usage = usage,
    transcript = state.log.entries,
    trajectory = tr:finish({ stop_reason = usage.stop_reason, turns = usage.turns, cost_source = usage.cost_source }),
  }
end

--- The endpoint part of an OpenAI-compatible solver's config, read from the options and getenv:
--- the first non-empty of e.keys (credential variables), the model (options.model, else e.model_var)
--- and the base URL (e.base_var, else e.base_url); nil, message, ECONFIG when the key or the model is
--- missing (the message names e.name, the variables and e.model_example when given).
---@param e {name:string, keys:string[], model_var:string, model_example:string|nil, base_var:string, base_url:string}
---@return table|nil cfg {name, base_url, api_key, key_var, model}, string? message, string? code
function agent.endpoint_config(e, options, getenv)
  local function nonempty(v) if type(v) == 'string' and v ~= '' then return v end end
  local key, key_var
  for _, var in ipairs(e.keys) do
    key, key_var = nonempty(getenv(var)), var
    if key then break end
  end
  if not key then
    return nil, string.format('the %s solver needs %s (set %s in the environment or the --env-file)', e.name,
      table.concat(e.keys, ' or '), #e.keys > 1 and 'one' or 'it'), errors.ECONFIG
  end
  local model = nonempty(options.model) or nonempty(getenv(e.model_var))
  if not model then
    return nil, string.format("the %s solver needs a model: set %s (or the plan's model field)%s", e.name,
      e.model_var, e.model_example and ', e.g. ' .. e.model_example or ''), errors.ECONFIG
  end
  return { name = e.name, base_url = nonempty(getenv(e.base_var)) or e.base_url, api_key = key, key_var = key_var,
    model = model }
end

--- A solver table over the agent loop. def.config(options, getenv) returns an AgentConfig or
--- nil, message, CODE (a missing credential or model).
---@param def AgentSolverDef
---@return table solver {name, description, check, config, solve}
function agent.solver(def)
  local solver = { name = def.name, description = def.description, config = def.config }

  --- Check the configuration before any sandbox work (for runners that call it).
  ---@return true|nil ok, string? message, string? code
  function solver.check(options, getenv)
    local cfg, err, code = def.config(options or {}, getenv)
    if not cfg then return nil, err, code end
    secrets.add(cfg.api_key)
    return true
  end

  ---@param ctx SolveContext
  function solver.solve(ctx)
    local cfg, err, code = def.config(ctx.options or {}, ctx.getenv)
    if not cfg then errors.raise(code or errors.ECONFIG, err, { stage = 'solve' }) end
    secrets.add(cfg.api_key)
    return agent.run(ctx, cfg)
  end

  return solver
end

--- Not a solver by itself: it needs an endpoint (use openrouter or ai_gateway).
function agent.solve()
  errors.raise(errors.ECONFIG, "'agent' is the loop behind the openrouter and ai_gateway solvers:"
    .. ' use --solver openrouter or ai_gateway', { stage = 'solve' })
end

--- Write a transcript (from a solve result) as JSON Lines, redacted; for runners persisting it.
---@param path string
---@param transcript table[]
---@return true|nil ok, string? err, string? code
function agent.write_transcript(path, transcript)
  local fs = require('cseng.fs')
  local lines = {}
  for i, e in ipairs(transcript or {}) do lines[i] = jsonl.encode(secrets.redact_all(e)) end
  local ok, err, code = fs.mkdir_p(util.dirname(path))
  if not ok then return nil, err, code end
  return fs.write(path, table.concat(lines, '\n') .. (#lines > 0 and '\n' or ''))
end

return agent
