--- A command of `cseng`, declared once: its name, one-line summary, usage text, its flags
--- (lib/flags.declare's entries, in the order --help lists them) and what --help says after
--- them (epilog). cli.main dispatches the table this returns: its run(args) parses args against
--- the flags (a bad one is one usage line naming the command, status 2) and calls
--- cmd.main(flags, positional, passed, args), which the command's file defines below the declaration.
--- With pass ({spec, refuse, what}), another command's options are passed on as given (watch).
local flags = require('cseng.lib.flags')
local exit = require('cseng.cli.exit')

---@param def {name: string, summary: string, usage: string, flags: table[]|nil, options_title: string|nil, epilog: string|nil, pass: table|nil}
---@return table cmd {name, summary, usage, flags (the spec), run(args) -> status}
return function(def)
  local cmd = { name = def.name, summary = def.summary }
  local order
  cmd.flags, order = flags.declare(def.flags or {})
  local parts = { def.usage }
  if #order > 0 then parts[#parts + 1] = (def.options_title or 'options') .. ':\n' .. flags.help(cmd.flags, order) end
  parts[#parts + 1] = def.epilog
  cmd.usage = table.concat(parts, '\n\n')

  --- The command as the command line runs it: args parsed, then cmd.main.
  ---@param args string[]
  ---@return integer status
  function cmd.run(args)
    local f, pos, passed = exit.flags(cmd.name, args, cmd.flags, def.pass)
    if not f then return pos end
    return cmd.main(f, pos, passed, args)
  end
  return cmd
end
