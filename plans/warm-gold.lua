-- Warm gold: the environment of each task is prepared once (a prewarmed artifact), then
-- every trial starts from it.
local plan = require('cseng.run.plan')

return plan.tasks {
  name = 'warm-gold',
  provider = 'local',
  dataset = 'data/smoke.jsonl',
  solver = 'gold',
  mode = 'warm',
  task_index = 'all',
  concurrency = 2,
  timeout_seconds = 900,
  image_map = {
    'ghcr.io/laude-institute/t-bench/ubuntu-24-04:*=cseng/debian:bookworm',
    'debian:bookworm*=cseng/debian:bookworm',
  },
}
