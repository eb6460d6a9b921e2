--- The gold solver: runs the task's own solution/solve.sh in the sandbox.
--- The script is wrapped so that applying it twice is harmless (a marker records success),
--- as the seed harness makes its solve.sh idempotent. A task without a solution is reported
--- as such (the verifier still runs; it should score 0).
local archive = require('cseng.archive')
local errors = require('cseng.lib.errors')

local solver = { name = 'gold', description = "run the task's own solution/solve.sh" }

local WRAPPER = [[#!/bin/bash
# cseng: apply the gold solution once; a second run is a no-op.
marker=/cseng/.gold-solve-done${CSENG_GOLD_STEP:+-$CSENG_GOLD_STEP}
if [ -f "$marker" ]; then echo "cseng: gold solution already applied"; exit 0; fi
bash /solution/solve.sh "$@"
code=$?
[ $code -eq 0 ] && : > "$marker"
exit $code
]]

---@param ctx SolveContext
function solver.solve(ctx)
  local task = ctx.task
  if not task.has_solution then
    return { skipped = true, note = 'the task has no solution/solve.sh' }
  end
  -- a step of a [[steps]] task solves with its own solution/ when it has one
  local tar = archive.pack_dir(task.solution_dir or (task.dir .. '/solution'), {})
  errors.check({ stage = 'solve', prefix = 'uploading solution/: ' }, ctx:put('/solution', tar))
  errors.check({ stage = 'solve', prefix = 'uploading the solve wrapper: ' },
    ctx:put('/cseng', archive.pack({ { path = 'gold-solve.sh', data = WRAPPER, mode = tonumber('755', 8) } })))
  local res = errors.check({ stage = 'solve' },
    ctx:exec('bash /cseng/gold-solve.sh', { env = require('cseng.lib.util').merge(task.config.solution_env,
      { CSENG_GOLD_STEP = task.step }), timeout = ctx.timeout }))
  ctx:exec('rm -rf /solution', { timeout = 60 })
  return { return_code = res.code, stdout = res.stdout, stderr = res.stderr, elapsed = res.elapsed, timed_out = res.timed_out }
end

return solver
