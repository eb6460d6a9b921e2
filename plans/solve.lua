-- Solve: an external solver script (the seed's --solve-command-file) on every task until
-- --stop-after-passes tasks pass.
local plan = require('cseng.run.plan')

return plan.tasks {
  name = 'solve',
  provider = 'local',
  dataset = 'data/smoke.jsonl',
  solver = 'command',
  mode = 'cold',
  task_index = 'all',
  concurrency = 2,
  timeout_seconds = 900,
  solve_timeout_seconds = 420,
}
