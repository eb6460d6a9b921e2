--- The Codex CLI (`@openai/codex`, pinned in lua/solvers/installed/package-lock.json) as a solver:
--- its static Linux binary is uploaded into the sandbox and run there as
---   codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -m MODEL -
--- with the instruction on stdin, against a custom model provider (the OpenAI Responses API at
--- CODEX_BASE_URL, key from OPENAI_API_KEY), so the same binary talks to OpenAI, a gateway or the
--- spec's fake. The sandbox reaches it through the run's model proxy (lua/cseng/evals/proxy.lua):
--- the provider's base_url is the proxy's and CSENG_CODEX_API_KEY holds a token of the trial, never
--- the key. Its JSON event stream (thread.started, item.completed {agent_message, reasoning,
--- command_execution}, turn.completed {usage}, turn.failed) becomes the trial's ATIF trajectory;
--- tokens and cost are the proxy's counts of the answers (without the proxy: the events' usage x
--- lua/cseng/evals/prices.lua; Codex reports no cost). The sandbox gets network access (the agent
--- calls its endpoint from inside it).
local errors = require 'cseng.lib.errors'
local jsonl = require 'cseng.lib.jsonl'
local util = require 'cseng.lib.util'
local installed = require 'solvers.shared.installed'

local codex = {
  name = 'codex', description = 'the Codex CLI (npm @openai/codex) in the sandbox, against CODEX_BASE_URL',
  needs_network = true, -- the CLI runs inside the sandbox and calls its endpoint from there
  model_proxy = true, -- through the run's model proxy: the key stays on the host
}

codex.VERSION = '0.171.0' -- the pinned package (package-lock.json); the binary's own --version is recorded too
codex.BINARY = '@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex'

--- The endpoint: CODEX_BASE_URL (default the OpenAI API), OPENAI_API_KEY, the model (--model or CODEX_MODEL).
function codex.config(options, getenv)
  local key = getenv('OPENAI_API_KEY')
  if not key or key == '' then return nil, 'codex: set OPENAI_API_KEY (the bearer sent to CODEX_BASE_URL)', errors.ECONFIG end
  local model = options.model or getenv('CODEX_MODEL')
  if not model or model == '' then return nil, 'codex: set CODEX_MODEL or the plan\'s model (e.g. gpt-5-codex)', errors.ECONFIG end
  return { base_url = getenv('CODEX_BASE_URL') or 'https://api.openai.com/v1', api_key = key, model = model }
end

function codex.check(options, getenv) return installed.check(codex, options, getenv) end

local function toml_string(s) return '"' .. tostring(s):gsub('\\', '\\\\'):gsub('"', '\\"') .. '"' end

--- The Codex configuration: one custom provider, no retries hidden from the record.
function codex.config_toml(cfg)
  return table.concat({
    'model_provider = "cseng"',
    'model = ' .. toml_string(cfg.model),
    '[model_providers.cseng]',
    'name = "cseng"',
    'base_url = ' .. toml_string(cfg.base_url),
    'wire_api = "responses"',
    'env_key = "CSENG_CODEX_API_KEY"',
    'request_max_retries = 2',
    'stream_max_retries = 2',
    '',
  }, '\n')
end

--- Codex's JSON events -> ATIF document and usage. usage: the summed turn.completed usage (what the
--- CLI reports; through the proxy, the proxy's counts replace it: installed.counted).
---@param stdout string
---@param meta {session_id: string, model: string, instruction: string}
function codex.convert(stdout, meta)
  local tr, usage = installed.start('codex', 'codex', codex.VERSION, 'codex exec --json', meta)
  local reasoning, last, thread
  for line in stdout:gmatch('[^\n]+') do
    local e = jsonl.decode(line)
    if type(e) == 'table' then
      usage.events = usage.events + 1
      if e.type == 'thread.started' then thread = e.thread_id
      elseif e.type == 'item.completed' and type(e.item) == 'table' then
        local it = e.item
        if it.type == 'reasoning' then reasoning = (reasoning and reasoning .. '\n' or '') .. tostring(it.text or '')
        elseif it.type == 'agent_message' then
          last = tr:agent { message = tostring(it.text or ''), reasoning = reasoning, model_name = meta.model }
          reasoning = nil
        elseif it.type == 'command_execution' then
          usage.tool_calls, usage.commands = usage.tool_calls + 1, usage.commands + 1
          last = tr:agent { message = '', reasoning = reasoning, model_name = meta.model,
            tool_calls = { { id = tostring(it.id), name = 'exec_command', arguments = { cmd = it.command } } } }
          reasoning = nil
          tr:observe(last, tostring(it.id), string.format('exit code: %s\n%s', tostring(it.exit_code), tostring(it.aggregated_output or '')))
        elseif it.type == 'error' then
          tr:add { source = 'system', message = tostring(it.message or ''), extra = { codex_item = 'error' } }
        end
      elseif e.type == 'turn.completed' then
        usage.turns = usage.turns + 1
        usage.stop_reason = 'done'
        local u = type(e.usage) == 'table' and e.usage or {}
        local function int(v) return math.tointeger(v) or 0 end
        usage.prompt_tokens = usage.prompt_tokens + int(u.input_tokens)
        usage.cached_tokens = usage.cached_tokens + int(u.cached_input_tokens)
        usage.cache_creation_tokens = usage.cache_creation_tokens + int(u.cache_write_input_tokens)
        usage.completion_tokens = usage.completion_tokens + int(u.output_tokens)
        usage.reasoning_tokens = usage.reasoning_tokens + int(u.reasoning_output_tokens)
      elseif e.type == 'turn.failed' or e.type == 'error' then
        usage.stop_reason = 'error'
        usage.error = type(e.error) == 'table' and e.error.message or e.message
      end
    end
  end
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
  usage.thread_id = thread
  return tr, usage, last
end

--- Warm mode (runner hook): the CLI goes into the warm artifact, named with this tag.
codex.artifact_tag = 'codex-' .. codex.VERSION
function codex.install(ctx) return installed.ensure(ctx, 'codex', installed.host_file(codex.BINARY), 'codex', codex.VERSION) end

---@param ctx SolveContext
function codex.solve(ctx)
  local home = installed.PREFIX .. '/codex-home'
  return installed.run(ctx, codex, {
    name = 'codex', scope = 'codex turn', api = 'openai',
    -- cfg: what the sandbox may know (through the proxy: its base URL and the trial's token)
    prepare = function(cfg) installed.write(ctx, home, 'config.toml', codex.config_toml(cfg)) end,
    command = function()
      return string.format('%s/codex/codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox'
        .. ' -C %s - < %s/prompt.md', installed.PREFIX, util.shell_quote(ctx.workdir or '/'), installed.PREFIX)
    end,
    env = function(cfg) return { CODEX_HOME = home, HOME = '/root', CSENG_CODEX_API_KEY = cfg.api_key } end,
    notes = 'Converted from `codex exec --json` events; Codex reports usage per turn, so a turn\'s tokens are the metrics of its last step.',
  })
end

return codex
