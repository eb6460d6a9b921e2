--- `cseng test [paths]`: busted specs run inside the engine, so specs can use every primitive.
--- Ends with the plain line "N passed, N failed[, N skipped]" (errors count as failures).
local sys = require('cseng.sys')

local cmd = {
  summary = 'run busted specs inside the engine (default: spec/)',
  usage = [[usage: cseng test [busted options] [paths...]

Runs busted (Debian's lua-busted) inside a cseng task, so specs may call engine
primitives that yield. Paths default to spec/ (every *_spec.lua below it). Specs
require their helpers by name from the checkout (spec.helpers.common, spec.fakes,
bench.lib). The last line is "N passed, N failed[, N skipped]". Busted options pass
through (e.g. --filter=PATTERN).]],
}

--- Put the checkout's root on package.path, so the test support that lives beside the specs is
--- required by name: `require 'spec.helpers.common'`, `require 'spec.fakes'` (spec/fakes/init.lua),
--- `require 'spec.providers.lizard.fake'`, `require 'bench.lib'`. Appended, so a module of lua/
--- always wins. The one place that path is set: `cseng test` calls it for every spec, `cseng fake`
--- and the bench scripts (bench/lib.lua) too. Idempotent.
function cmd.use_checkout()
  local root = sys.root()
  local entry = ';' .. root .. '/?.lua;' .. root .. '/?/init.lua'
  if not package.path:find(entry, 1, true) then package.path = package.path .. entry end
end

function cmd.run(args)
  -- test support lives with the specs (spec/helpers/), not in the runtime tree
  cmd.use_checkout()
  local output = sys.root() .. '/spec/helpers/busted_output.lua'
  if not require('cseng.fs').exists(output) then
    io.stderr:write('cseng test: ', output, ' is missing (cseng test runs specs from a checkout)\n')
    return 1
  end
  local argv = { '--output=' .. output }
  local has_path = false
  for _, a in ipairs(args) do
    argv[#argv + 1] = a
    if a:sub(1, 1) ~= '-' then has_path = true end
  end
  if not has_path then argv[#argv + 1] = 'spec' end
  argv[#argv + 1] = '--pattern=_spec'
  _G.arg = argv
  argv[0] = 'cseng test'
  -- a failed trial record without a registered error_code fails the spec that wrote it
  require('cseng.results.log').strict_codes = true
  -- a module that writes a field its record does not declare fails the spec that made it write
  -- (lua/cseng/run/records.lua; make check exports CSENG_STRICT_RECORDS=1 for the runs specs start)
  require('cseng.run.records').strict = true
  -- busted ends with os.exit; turn that into a return so the engine closes cleanly.
  local real_exit = os.exit
  os.exit = function(code) error({ cseng_exit = code == true and 0 or (code or 0) }, 0) end -- luacheck: ignore 122
  local ok, err = pcall(function() require 'busted.runner' ({ standalone = false }) end)
  os.exit = real_exit -- luacheck: ignore 122
  if ok then return 0 end
  if type(err) == 'table' and err.cseng_exit ~= nil then
    local c = err.cseng_exit
    return c == false and 1 or (math.tointeger(c) or 0)
  end
  io.stderr:write('cseng test: ', tostring(err), '\n')
  return 1
end

return cmd
