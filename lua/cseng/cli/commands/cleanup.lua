--- `cseng cleanup RUN.jsonl` destroys every sandbox a run allocated and did not destroy;
--- `cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]` finds cseng's sandboxes
--- by label (what a dead run left behind) and destroys them: the cleanup run kind
--- (lua/cseng/run/kinds/cleanup.lua); this file parses the flags and prints the count.
local command = require('cseng.cli.command')
local options = require('cseng.run.options')
local frame = require('cseng.run.frame')
local errors = require('cseng.lib.errors')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'cleanup',
  summary = 'destroy sandboxes a run left behind (from its log, or by label)',
  usage = 'usage: cseng cleanup RUN.jsonl\n       cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]',
  flags = {
    { 'provider', 'string', arg = 'NAME', help = 'sweep this provider by label' },
    { 'older-than', 'string', arg = 'AGE', help = 'only sandboxes created before now-AGE (30s, 15m, 2h, 1d)' },
    { 'run', 'string', arg = 'RUN_ID', help = 'only this run\'s sandboxes' },
    { 'env-file', from = options.SPEC }, -- as cseng run reads them: repeatable, a later file wins
    { 'dry-run', 'bool', help = 'list, do not destroy' },
  },
}

function cmd.main(f, pos)
  if #pos > 1 or (#pos == 0 and not f.provider) then
    return exit.usage_error('cleanup needs RUN.jsonl or --provider NAME (see cseng cleanup --help)')
  end
  local o = options.merge({}, { env_file = f.env_file }, {})
  o.log, o.provider, o.older_than, o.run, o.dry_run = pos[1], (#pos == 0) and f.provider or nil, f.older_than, f.run, f.dry_run
  o.observers = { function(_, name, d)
    if name == 'say' then print(d.text) elseif name == 'warning' then io.stderr:write(d.text, '\n') end
  end }
  local ok, status, info = pcall(frame.run, 'cleanup', o)
  if not ok then return exit.fail(status, not errors.is_usage(status) and 'cleanup' or nil) end
  if not f.dry_run and (info.done > 0 or info.failures > 0 or #pos == 0) then
    print(string.format('%d destroyed, %d failed', info.done, info.failures))
  end
  return status
end

return cmd
