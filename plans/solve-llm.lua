-- Solve with an LLM: the openrouter agent (lua/solvers/agent.lua, one bash tool) on every bundled
-- task until 10 pass, as the seed's proof run ("until 10 TerminalBench smoke tasks pass").
-- Needs OPENROUTER_API_KEY and OPENROUTER_MODEL (in the environment or --env-file .env).
--   cseng run plans/solve-llm.lua --env-file .env
--   cseng run plans/solve-llm.lua --env-file .env --solver ai_gateway      # AI_GATEWAY_API_KEY or
--                                                 # VERCEL_OIDC_TOKEN, and AI_GATEWAY_MODEL
--   the seed's exact run: --provider docker --dataset ../shared/data/terminalbench_2026_03_05_smoke16.jsonl
-- Token counts and cost land in each trial's solver_usage (docs/SOLVERS.md).
local plan = require 'cseng.run.plan'

return plan.tasks {
  name = 'solve-llm',
  provider = 'local',
  dataset = 'data/smoke.jsonl',
  solver = 'openrouter',
  mode = 'cold',
  task_index = 'all',
  task_limit = 16,
  stop_after_passes = 10,
  concurrency = 2,
  timeout_seconds = 900,
  solve_timeout_seconds = 420,
  max_turns = 50,
  image_map = {
    'ghcr.io/laude-institute/t-bench/ubuntu-24-04:*=cseng/debian:bookworm',
    'debian:bookworm*=cseng/debian:bookworm',
  },
}
