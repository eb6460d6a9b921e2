--- How a command ends when it fails: one line on stderr, never a traceback, and the exit status
--- by one rule (2 for a usage error, 130 for a cancellation, else 1). Commands return these.
local exit = {}

--- A usage error (the one shape: errors.usage, code EUSAGE) reported now: one line
--- "cseng: message" on stderr, status 2. A command either returns this or raises
--- errors.usage(message) (exit.fail, and cli.main around every command, give it status 2).
---@param fmt any a format and its arguments, or one message (an error value: its message)
---@return integer status 2
function exit.usage_error(fmt, ...)
  local errors = require('cseng.lib.errors')
  return exit.fail(errors.usage(select('#', ...) > 0 and string.format(fmt, ...) or errors.line(fmt)))
end

--- A command's flags (lib/flags.parse against spec), or its usage error reported now (one line
--- naming the command and its --help, status 2): returns the flags and the positional arguments
--- (and, with pass, the options passed on as given: lib/flags.parse), or nil and the status.
---@param name string the command, e.g. "compare"
---@param args string[]|nil
---@param spec table the command's flag table
---@param pass? table {spec, refuse, what}: another command's options, passed on (cseng watch)
---@return table|nil flags, string[]|integer positional arguments, or the status
---@return string[]? passed
function exit.flags(name, args, spec, pass)
  local f, pos, passed = require('cseng.lib.flags').parse(args or {}, spec, pass)
  if not f then return nil, exit.usage_error('%s: %s (see cseng %s --help)', name, pos, name) end
  return f, pos, passed
end

--- A command's failure: 130 for a cancellation (Ctrl-C; the engine has said so), 2 for a usage
--- error (EUSAGE), else 1; one line "cseng: [what: ]message" on stderr (never a traceback).
---@param err any
---@param what string|nil the command, e.g. "prewarm"
---@return integer status
function exit.fail(err, what)
  local errors = require('cseng.lib.errors')
  if errors.is_cancel(err) then return 130 end
  -- io.stderr:write redacts and escapes (console.guard)
  io.stderr:write('cseng: ', what and (what .. ': ') or '', errors.line(err), '\n')
  return errors.is_usage(err) and 2 or 1
end

return exit
