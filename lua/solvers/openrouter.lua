--- The OpenRouter solver: the agent loop (solvers/agent.lua) on OpenRouter's OpenAI-compatible
--- chat completions. Variables (the --env-file first, then the environment):
---   OPENROUTER_API_KEY (required), OPENROUTER_MODEL (required unless the plan or --model sets
---   `model`), OPENROUTER_BASE_URL (default https://openrouter.ai/api/v1),
---   OPENROUTER_HTTP_REFERER and OPENROUTER_X_TITLE (attribution headers; the title defaults to cseng).
--- OpenRouter reports each response's cost in usage.cost; the record uses it.
local errors = require 'cseng.lib.errors'
local agent = require 'solvers.agent'

local DEFAULT_BASE_URL = 'https://openrouter.ai/api/v1'

local function nonempty(v) if type(v) == 'string' and v ~= '' then return v end end

return agent.solver {
  name = 'openrouter',
  description = 'LLM agent (one bash tool) on OpenRouter; needs OPENROUTER_API_KEY and OPENROUTER_MODEL',
  config = function(options, getenv)
    local key = nonempty(getenv('OPENROUTER_API_KEY'))
    if not key then
      return nil, 'the openrouter solver needs OPENROUTER_API_KEY (set it in the environment or the --env-file)',
        errors.ECONFIG
    end
    local model = nonempty(options.model) or nonempty(getenv('OPENROUTER_MODEL'))
    if not model then
      return nil, "the openrouter solver needs a model: set OPENROUTER_MODEL (or the plan's model field)", errors.ECONFIG
    end
    return {
      name = 'openrouter',
      base_url = nonempty(getenv('OPENROUTER_BASE_URL')) or DEFAULT_BASE_URL,
      api_key = key, key_var = 'OPENROUTER_API_KEY', model = model,
      headers = {
        ['HTTP-Referer'] = nonempty(getenv('OPENROUTER_HTTP_REFERER')),
        ['X-Title'] = nonempty(getenv('OPENROUTER_X_TITLE')) or 'cseng',
      },
      body = { usage = { include = true } }, -- deprecated upstream (usage is always sent) but harmless
    }
  end,
}
