-- Cold gold: every bundled task, a fresh sandbox per trial, the task's own solution.
-- Every task should pass; a failure is a broken task or a broken provider.
local plan = require('cseng.run.plan')

return plan.tasks {
  name = 'cold-gold',
  provider = 'local',
  dataset = 'data/smoke.jsonl',
  solver = 'gold',
  mode = 'cold',
  task_index = 'all',
  concurrency = 2,
  timeout_seconds = 900,
  image_map = {
    'ghcr.io/laude-institute/t-bench/ubuntu-24-04:*=cseng/debian:bookworm',
    'debian:bookworm*=cseng/debian:bookworm',
  },
}
