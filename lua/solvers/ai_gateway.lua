--- The Vercel AI Gateway solver: the agent loop (solvers/shared/chat_loop.lua) on the gateway's
--- OpenAI-compatible chat completions. Variables (the --env-file first, then the environment):
---   AI_GATEWAY_API_KEY, or else VERCEL_OIDC_TOKEN (one is required);
---   AI_GATEWAY_MODEL (required unless the plan or --model sets `model`), e.g. deepseek/deepseek-v4-flash;
---   AI_GATEWAY_BASE_URL (default https://ai-gateway.vercel.sh/v1).
local agent = require('solvers.shared.chat_loop')

local ENDPOINT = {
  name = 'ai_gateway', keys = { 'AI_GATEWAY_API_KEY', 'VERCEL_OIDC_TOKEN' },
  model_var = 'AI_GATEWAY_MODEL', model_example = 'deepseek/deepseek-v4-flash',
  base_var = 'AI_GATEWAY_BASE_URL', base_url = 'https://ai-gateway.vercel.sh/v1',
}

return agent.solver {
  name = 'ai_gateway',
  description = 'LLM agent (one bash tool) on Vercel AI Gateway;'
    .. ' needs AI_GATEWAY_API_KEY or VERCEL_OIDC_TOKEN, and AI_GATEWAY_MODEL',
  config = function(options, getenv) return agent.endpoint_config(ENDPOINT, options, getenv) end,
}
