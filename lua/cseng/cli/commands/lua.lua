--- `cseng lua FILE [args]`: run a Lua script inside a task, with every engine module.
local exit = require('cseng.cli.exit')
local cmd = {
  summary = 'run a Lua script with the engine modules (like lua FILE)',
  usage = [[usage: cseng lua FILE [args...]

Runs FILE as the main task: engine primitives (cseng.http, cseng.proc, cseng.task, ...) may
yield. The global `arg` holds the script name at 0 and its arguments. A number returned
by the script is the exit status.]],
}

function cmd.run(args)
  local file = args[1]
  if not file then
    return exit.usage_error('lua needs a FILE (see cseng lua --help)')
  end
  local fn, err = loadfile(file)
  if not fn then
    io.stderr:write('cseng: ', err, '\n')
    return 1
  end
  local script_arg = { [0] = file }
  for i = 2, #args do script_arg[i - 1] = args[i] end
  _G.arg = script_arg
  local status = fn(table.unpack(script_arg))
  if type(status) == 'number' then return math.tointeger(status) or 1 end
  return 0
end

return cmd
