--- The OpenRouter solver: the agent loop (solvers/shared/chat_loop.lua) on OpenRouter's OpenAI-compatible
--- chat completions. Variables (the --env-file first, then the environment):
---   OPENROUTER_API_KEY (required), OPENROUTER_MODEL (required unless the plan or --model sets
---   `model`), OPENROUTER_BASE_URL (default https://openrouter.ai/api/v1),
---   OPENROUTER_HTTP_REFERER and OPENROUTER_X_TITLE (attribution headers; the title defaults to cseng).
--- OpenRouter reports each response's cost in usage.cost; the record uses it.
local agent = require('solvers.shared.chat_loop')

local ENDPOINT = {
  name = 'openrouter', keys = { 'OPENROUTER_API_KEY' }, model_var = 'OPENROUTER_MODEL',
  base_var = 'OPENROUTER_BASE_URL', base_url = 'https://openrouter.ai/api/v1',
}

local function nonempty(v) if type(v) == 'string' and v ~= '' then return v end end

return agent.solver {
  name = 'openrouter',
  description = 'LLM agent (one bash tool) on OpenRouter; needs OPENROUTER_API_KEY and OPENROUTER_MODEL',
  config = function(options, getenv)
    local cfg, err, code = agent.endpoint_config(ENDPOINT, options, getenv)
    if not cfg then return nil, err, code end
    cfg.headers = {
      ['HTTP-Referer'] = nonempty(getenv('OPENROUTER_HTTP_REFERER')),
      ['X-Title'] = nonempty(getenv('OPENROUTER_X_TITLE')) or 'cseng',
    }
    cfg.body = { usage = { include = true } } -- deprecated upstream (usage is always sent) but harmless
    return cfg
  end,
}
