--- The command solver: an external solver script (the seed's --solve-command-file), uploaded
--- to /cseng/solver.sh and run in the sandbox's workdir with the instruction at
--- $CSENG_INSTRUCTION_FILE. Variables named in --solver-env are passed from the host.
local archive = require('cseng.archive')
local fs = require('cseng.fs')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local solver = { name = 'command', description = 'run a solver script in the sandbox (--solve-command-file)' }

function solver.solve(ctx)
  local file = ctx.options.solve_command_file
  if not file then errors.raise(errors.ECONFIG, 'the command solver needs --solve-command-file FILE', { stage = 'solve' }) end
  local script = errors.check({ stage = 'solve', default_code = errors.ECONFIG }, fs.read(file))
  errors.check({ stage = 'solve', prefix = 'uploading the solver: ' },
    ctx:put('/cseng', archive.pack({ { path = 'solver.sh', data = script, mode = tonumber('755', 8) } })))
  local env = util.merge(ctx.task.config.agent_env, { CSENG_INSTRUCTION_FILE = '/cseng/instruction.md' })
  for name in tostring(ctx.options.solver_env or ''):gmatch('[^,%s]+') do
    env[name] = ctx.getenv(name)
  end
  local res = errors.check({ stage = 'solve' }, ctx:exec('bash /cseng/solver.sh', { env = env, timeout = ctx.timeout }))
  return { return_code = res.code, stdout = res.stdout, stderr = res.stderr, elapsed = res.elapsed, timed_out = res.timed_out }
end

return solver
