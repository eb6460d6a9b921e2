-- Matrix: the same tasks on every listed provider, cold and warm.
local plan = require('cseng.run.plan')

return plan.matrix {
  name = 'matrix',
  providers = { 'local' },
  modes = { 'cold', 'warm' },
  dataset = 'data/smoke.jsonl',
  solver = 'gold',
  task_index = 'all',
  concurrency = 2,
  timeout_seconds = 900,
}
