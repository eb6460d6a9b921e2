--- Claude Code (`@anthropic-ai/claude-code`, pinned in lua/solvers/installed/package-lock.json) as a
--- solver: its Linux binary is uploaded into the sandbox and run there as
---   claude -p --output-format stream-json --verbose --dangerously-skip-permissions --model MODEL
--- with the instruction on stdin, against the Anthropic Messages API at ANTHROPIC_BASE_URL (key
--- ANTHROPIC_API_KEY), telemetry and update checks off. Its stream-json events (system init,
--- assistant messages with text / thinking / tool_use blocks, user messages with tool_result
--- blocks, the final result with usage and cost) become the trial's ATIF trajectory and
--- solver_usage. The sandbox reaches the API through the run's model proxy
--- (lua/cseng/evals/proxy.lua): ANTHROPIC_BASE_URL is the proxy's and ANTHROPIC_API_KEY holds a
--- token of the trial, never the key; tokens and cost are then the proxy's counts of the answers.
--- The sandbox gets network access (the agent calls its endpoint from inside it).
local errors = require 'cseng.lib.errors'
local jsonl = require 'cseng.lib.jsonl'
local util = require 'cseng.lib.util'
local installed = require 'solvers.shared.installed'

local claude = {
  name = 'claude_code', description = 'Claude Code (npm @anthropic-ai/claude-code) in the sandbox, against ANTHROPIC_BASE_URL',
  needs_network = true,
  model_proxy = true, -- through the run's model proxy: the key stays on the host
}

claude.VERSION = '2.1.332'
claude.BINARY = '@anthropic-ai/claude-code-linux-x64/claude'

function claude.config(options, getenv)
  local key = getenv('ANTHROPIC_API_KEY')
  if not key or key == '' then return nil, 'claude_code: set ANTHROPIC_API_KEY', errors.ECONFIG end
  local model = options.model or getenv('CLAUDE_CODE_MODEL')
  if not model or model == '' then
    return nil, 'claude_code: set CLAUDE_CODE_MODEL or the plan\'s model (e.g. claude-sonnet-4-5)', errors.ECONFIG
  end
  return { base_url = getenv('ANTHROPIC_BASE_URL') or 'https://api.anthropic.com', api_key = key, model = model }
end

function claude.check(options, getenv) return installed.check(claude, options, getenv) end

local function int(v) return math.tointeger(v) or 0 end

local function text_of(c)
  if type(c) == 'string' then return c end
  local parts = {}
  for _, x in ipairs(type(c) == 'table' and c or {}) do parts[#parts + 1] = tostring(x.text or '') end
  return table.concat(parts, '\n')
end

--- The usage one model request has reported so far, from a stream-json line (an assistant message:
--- its input tokens are exact, its output tokens partial while it streams).
function claude.turn_usage(e)
  local m = e.type == 'assistant' and type(e.message) == 'table' and e.message or nil
  local u = m and type(m.usage) == 'table' and m.usage or nil
  if not u then return nil end
  local cached, creation = int(u.cache_read_input_tokens), int(u.cache_creation_input_tokens)
  return { id = m.id, input = int(u.input_tokens) + cached + creation, cached = cached, cache_creation = creation,
    output = int(u.output_tokens) }
end

--- stream-json events -> ATIF trajectory builder, usage, the last agent step. A session stopped
--- before its result (a timeout) sums its messages' own usage instead (output tokens as far as the
--- stream reported them). Through the proxy, the proxy's counts replace these (installed.counted).
function claude.convert(stdout, meta)
  local tr, usage = installed.start('claude_code', 'claude-code', claude.VERSION, 'claude -p --output-format stream-json', meta)
  local by_msg, by_call, last = {}, {}, nil
  local msg_usage, result_seen = {}, false
  for line in stdout:gmatch('[^\n]+') do
    local e = jsonl.decode(line)
    if type(e) == 'table' then
      usage.events = usage.events + 1
      local m = type(e.message) == 'table' and e.message or {}
      if e.type == 'system' and e.subtype == 'init' then usage.session = e.session_id
      elseif e.type == 'assistant' then
        local mu = claude.turn_usage(e)
        if mu then
          local prev = msg_usage[tostring(mu.id)]
          if prev then mu.output = math.max(mu.output, prev.output) end
          msg_usage[tostring(mu.id)] = mu
        end
        -- one step per API message: the CLI emits a message's blocks as several events with one id
        local step = by_msg[m.id]
        if not step then
          step = tr:agent { message = '', model_name = type(m.model) == 'string' and m.model or nil,
            extra = { parent_tool_use_id = e.parent_tool_use_id } }
          by_msg[tostring(m.id)] = step
          usage.turns = usage.turns + 1
        end
        for _, b in ipairs(type(m.content) == 'table' and m.content or {}) do
          if b.type == 'text' then step.message = step.message .. tostring(b.text or '')
          elseif b.type == 'thinking' then step.reasoning_content = (step.reasoning_content or '') .. tostring(b.thinking or '')
          elseif b.type == 'tool_use' then
            step.tool_calls = step.tool_calls or jsonl.array()
            step.tool_calls[#step.tool_calls + 1] = { tool_call_id = tostring(b.id), function_name = tostring(b.name),
              arguments = type(b.input) == 'table' and b.input or {} }
            by_call[tostring(b.id)] = step
            usage.tool_calls = usage.tool_calls + 1
            if b.name == 'Bash' then usage.commands = usage.commands + 1 end
          end
        end
        last = step
      elseif e.type == 'user' then
        for _, b in ipairs(type(m.content) == 'table' and m.content or {}) do
          if b.type == 'tool_result' and by_call[tostring(b.tool_use_id)] then
            tr:observe(by_call[tostring(b.tool_use_id)], tostring(b.tool_use_id),
              (b.is_error and 'error: ' or '') .. text_of(b.content))
          end
        end
      elseif e.type == 'result' then
        result_seen = true
        usage.stop_reason = e.is_error and 'error' or 'done'
        usage.result_subtype = e.subtype
        usage.num_turns = e.num_turns
        usage.agent_cost_usd = type(e.total_cost_usd) == 'number' and e.total_cost_usd or nil
        -- the whole session, sub-agents included: modelUsage has every model, else usage
        local models = type(e.modelUsage) == 'table' and e.modelUsage or nil
        if models and next(models) then
          for _, mu in pairs(models) do
            usage.prompt_tokens = usage.prompt_tokens + int(mu.inputTokens) + int(mu.cacheReadInputTokens)
              + int(mu.cacheCreationInputTokens)
            usage.cached_tokens = usage.cached_tokens + int(mu.cacheReadInputTokens)
            usage.cache_creation_tokens = usage.cache_creation_tokens + int(mu.cacheCreationInputTokens)
            usage.completion_tokens = usage.completion_tokens + int(mu.outputTokens)
          end
        elseif type(e.usage) == 'table' then
          local u = e.usage
          usage.cached_tokens = int(u.cache_read_input_tokens)
          usage.cache_creation_tokens = int(u.cache_creation_input_tokens)
          usage.prompt_tokens = int(u.input_tokens) + usage.cached_tokens + usage.cache_creation_tokens
          usage.completion_tokens = int(u.output_tokens)
        end
        if type(e.usage) == 'table' and type(e.usage.output_tokens_details) == 'table' then
          usage.reasoning_tokens = int(e.usage.output_tokens_details.thinking_tokens)
        end
      end
    end
  end
  if not result_seen then
    installed.add_records(usage, msg_usage)
  end
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
  return tr, usage, last
end

--- Warm mode (runner hook): the CLI goes into the warm artifact, named with this tag.
claude.artifact_tag = 'claude-' .. claude.VERSION
function claude.install(ctx) return installed.ensure(ctx, 'claude', installed.host_file(claude.BINARY), 'claude', claude.VERSION) end

---@param ctx SolveContext
function claude.solve(ctx)
  return installed.run(ctx, claude, {
    name = 'claude_code', scope = 'claude session', api = 'anthropic',
    command = function(cfg)
      return string.format('%s/claude/claude -p --output-format stream-json --verbose --dangerously-skip-permissions'
        .. ' --model %s < %s/prompt.md', installed.PREFIX, util.shell_quote(cfg.model), installed.PREFIX)
    end,
    -- cfg: what the sandbox may know (through the proxy: its base URL and the trial's token)
    env = function(cfg)
      return { HOME = '/root', IS_SANDBOX = '1', ANTHROPIC_BASE_URL = cfg.base_url, ANTHROPIC_API_KEY = cfg.api_key,
        DISABLE_TELEMETRY = '1', DISABLE_AUTOUPDATER = '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = '1' }
    end,
    -- the CLI's per-message usage is partial while streaming; the session totals (every model) are exact
    notes = 'Converted from `claude -p --output-format stream-json`; per-message usage is partial while streaming, '
      .. 'so the session totals (every model, sub-agents included) are the metrics of the last step.',
  })
end

return claude
