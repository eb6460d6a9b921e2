--- The command line: `cseng <command> [args]`. Each command is a module under
--- lua/cseng/cli/commands/ returning {summary=, usage=, run=function(args) -> exit status}: a
--- command with flags declares them with lua/cseng/cli/command.lua, which parses them for it
--- (`lua` and `test` pass their arguments on as given).
local sys = require('cseng.sys')
local exit = require('cseng.cli.exit')

local cli = {}

-- The order here is the order of `cseng --help`.
cli.commands = { 'run', 'watch', 'history', 'merge', 'report', 'compare', 'view', 'export', 'cleanup', 'prewarm', 'providers',
  'fake', 'dataset', 'images', 'lua', 'test' }

local function load_command(name)
  local ok, mod = pcall(require, 'cseng.cli.commands.' .. name)
  if ok then return mod end
  if type(mod) == 'string' and mod:find("module 'cseng.cli.commands." .. name .. "' not found", 1, true) then
    return nil
  end
  error(mod, 0) -- the module's own error (a syntax error keeps its position: it is a bug)
end

function cli.help()
  local out = { 'usage: cseng <command> [options]', '', 'commands:' }
  for _, name in ipairs(cli.commands) do
    local cmd = load_command(name)
    if cmd then out[#out + 1] = string.format('  %-10s %s', name, cmd.summary) end
  end
  out[#out + 1] = ''
  out[#out + 1] = 'cseng <command> --help shows a command\'s options.'
  out[#out + 1] = 'cseng --version prints the engine and library versions.'
  return table.concat(out, '\n')
end

function cli.version()
  local v = sys.versions()
  return table.concat({
    'cseng ' .. v.cseng,
    v.lua,
    'libcurl ' .. v.libcurl,
    'libuv ' .. v.libuv,
    v.libarchive,
    v.openssl,
    v.malloc,
  }, '\n')
end

function cli.main(...)
  require('cseng.lib.console').guard()
  local errors = require('cseng.lib.errors')
  local args = { ... }
  -- an error a command raises is printed here as one redacted line (a table error by its
  -- message, never "table: 0x..."); the cancellation goes on to the engine (status 130)
  local ok, status = xpcall(cli.dispatch, function(e)
    if errors.is_cancel(e) then return e end
    -- a string error with a position is a bug: it keeps its traceback
    local bug = type(e) == 'string' and e:match('^[^\n]-%.lua:%d+:') and debug.traceback(e, 2)
    return { failed = e, bug = bug }
  end, args)
  if ok then return status end
  if errors.is_cancel(status) then error(status, 0) end
  if status.bug then io.stderr:write('cseng: ', status.bug, '\n'); return 1 end
  return exit.fail(status.failed)
end

--- The command line without the top-level error handler (cli.main adds it).
---@param args string[]
function cli.dispatch(args)
  local name = args[1]
  if name == nil or name == '--help' or name == '-h' or name == 'help' then
    print(cli.help())
    return name == nil and 2 or 0
  end
  if name == '--version' or name == '-V' then
    print(cli.version())
    return 0
  end
  local cmd = name:sub(1, 1) ~= '-' and load_command(name) or nil
  if not cmd then
    return exit.usage_error("unknown %s '%s' (see cseng --help)", name:sub(1, 1) == '-' and 'option' or 'command', name)
  end
  table.remove(args, 1)
  if args[1] == '--help' or args[1] == '-h' then
    print(cmd.usage)
    return 0
  end
  return cmd.run(args)
end

return cli
