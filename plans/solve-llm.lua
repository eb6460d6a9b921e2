-- Solve with an LLM: the openrouter agent (lua/solvers/shared/chat_loop.lua, one bash tool) on every bundled
-- task. No task limit and no stop after N passes by default: stopping at the 10th pass (the seed's
-- proof run: --stop-after-passes 10) biases a pass rate upwards. Repeat with --attempts K for pass@k.
-- Needs OPENROUTER_API_KEY and OPENROUTER_MODEL (in the environment or --env-file .env).
--   cseng run plans/solve-llm.lua --env-file .env
--   offline, against the scripted model that replays each task's gold solution (docs/SOLVERS.md):
--     cseng fake llm --env-file /tmp/llm.env &   (or export the lines it prints; Ctrl-C stops it)
--     cseng run plans/solve-llm.lua --env-file /tmp/llm.env --attempts 3   (--solver ai_gateway, codex,
--     claude_code: the same model)
--   cseng run plans/solve-llm.lua --env-file .env --solver ai_gateway      # AI_GATEWAY_API_KEY or
--                                                 # VERCEL_OIDC_TOKEN, and AI_GATEWAY_MODEL
--   the seed's exact run: --provider docker --dataset ../shared/data/terminalbench_2026_03_05_smoke16.jsonl
--   the seed's proof run exactly: ... --stop-after-passes 10 --task-limit 16
--   a ceiling on the whole run's spend: --max-cost-usd 5
-- Token counts and cost land in each trial's solver_usage and cost ledger, its trajectory in
-- results/<run>/trajectories/ (ATIF; docs/SOLVERS.md).
local plan = require('cseng.run.plan')

return plan.tasks {
  name = 'solve-llm',
  provider = 'local',
  dataset = 'data/smoke.jsonl',
  solver = 'openrouter',
  mode = 'cold',
  task_index = 'all',
  concurrency = 2,
  timeout_seconds = 900,
  solve_timeout_seconds = 420,
  max_turns = 50,
  image_map = {
    'ghcr.io/laude-institute/t-bench/ubuntu-24-04:*=cseng/debian:bookworm',
    'debian:bookworm*=cseng/debian:bookworm',
  },
}
