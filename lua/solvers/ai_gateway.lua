--- The Vercel AI Gateway solver: the agent loop (solvers/agent.lua) on the gateway's
--- OpenAI-compatible chat completions. Variables (the --env-file first, then the environment):
---   AI_GATEWAY_API_KEY, or else VERCEL_OIDC_TOKEN (one is required);
---   AI_GATEWAY_MODEL (required unless the plan or --model sets `model`), e.g. deepseek/deepseek-v4-flash;
---   AI_GATEWAY_BASE_URL (default https://ai-gateway.vercel.sh/v1).
local errors = require 'cseng.lib.errors'
local agent = require 'solvers.agent'

local DEFAULT_BASE_URL = 'https://ai-gateway.vercel.sh/v1'

local function nonempty(v) if type(v) == 'string' and v ~= '' then return v end end

return agent.solver {
  name = 'ai_gateway',
  description = 'LLM agent (one bash tool) on Vercel AI Gateway;'
    .. ' needs AI_GATEWAY_API_KEY or VERCEL_OIDC_TOKEN, and AI_GATEWAY_MODEL',
  config = function(options, getenv)
    local key, key_var = nonempty(getenv('AI_GATEWAY_API_KEY')), 'AI_GATEWAY_API_KEY'
    if not key then key, key_var = nonempty(getenv('VERCEL_OIDC_TOKEN')), 'VERCEL_OIDC_TOKEN' end
    if not key then
      return nil, 'the ai_gateway solver needs AI_GATEWAY_API_KEY or VERCEL_OIDC_TOKEN'
        .. ' (set one in the environment or the --env-file)', errors.ECONFIG
    end
    local model = nonempty(options.model) or nonempty(getenv('AI_GATEWAY_MODEL'))
    if not model then
      return nil, "the ai_gateway solver needs a model: set AI_GATEWAY_MODEL (or the plan's model field),"
        .. ' e.g. deepseek/deepseek-v4-flash', errors.ECONFIG
    end
    return {
      name = 'ai_gateway',
      base_url = nonempty(getenv('AI_GATEWAY_BASE_URL')) or DEFAULT_BASE_URL,
      api_key = key, key_var = key_var, model = model,
    }
  end,
}
