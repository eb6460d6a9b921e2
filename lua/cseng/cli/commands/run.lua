--- `cseng run PLAN.lua [flags]`: run a plan; flags override the plan's fields.
local command = require('cseng.cli.command')
local plan = require('cseng.run.plan')
local options = require('cseng.run.options')
local present = require('cseng.cli.present')
local exit = require('cseng.cli.exit')
local frame = require('cseng.run.frame')

local cmd = command {
  name = 'run',
  summary = 'run a plan (plans/cold-gold.lua, plans/startup.lua, ...)',
  usage = 'usage: cseng run PLAN.lua [options]\n\nRuns the plan; options override its fields.',
  flags = options.FLAGS,
  epilog = 'exit status (every run kind): 0 the run finished (failed and ' ..
    'errored trials are results); 1 it stopped early (cleanup failure, authentication, a dead endpoint, a stop ' ..
    'rule), every trial errored, or any errored under --fail-on-error; 2 usage; 128+N after signal N (130: Ctrl-C).',
}

function cmd.main(f, pos, _, args)
  if #pos ~= 1 then
    return exit.usage_error('run needs exactly one PLAN.lua (see cseng run --help)')
  end
  local ok, p = pcall(plan.load, pos[1])
  if not ok then
    return exit.usage_error(p)
  end
  local argv = { 'cseng', 'run', table.unpack(args) }
  local ok2, o = pcall(options.merge, p, f, argv)
  if not ok2 then
    return exit.usage_error(o)
  end
  -- the program as the user invoked it (./cseng), for the commands the end of the run prints
  o.program = type(_G.arg) == 'table' and type(_G.arg[0]) == 'string' and _G.arg[0] or nil
  local runok, status = pcall(function()
    if o.kind == 'tasks' or o.kind == 'matrix' then
      local worst, done = 0, {}
      local runs = plan.expand(o)
      for _, one in ipairs(runs) do -- a matrix is one tasks run per provider x mode
        local st, info = frame.run('tasks', present.attach(one))
        done[#done + 1] = { opts = one, status = st, info = info }
        if st >= 128 then break end -- a signal ends the matrix (its status is the signal's)
        worst = math.max(worst, st)
      end
      if #runs > 1 and not o.quiet then
        io.stdout:write(present.matrix_summary(done), '\n')
        -- the runs' logs share a folder: the viewer opens them together
        local last = done[#done].info
        if last and last.jsonl then
          io.stdout:write('open them: ', present.view_command(o, require('cseng.lib.util').dirname(last.jsonl)), '\n')
        end
      end
      if done[#done] and done[#done].status >= 128 then return done[#done].status end
      return worst
    end
    -- any other kind is a run kind of its own (lua/cseng/run/kinds/<kind>.lua: startup, ...)
    return (frame.run(o.kind, present.attach(o)))
  end)
  if not runok then return exit.fail(status) end
  return status
end

return cmd
