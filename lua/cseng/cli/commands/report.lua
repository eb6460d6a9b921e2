--- `cseng report RESULTS... [--template T] [-o OUT.md]`: render run logs (.jsonl), run summaries
--- (.json, cseng's or the seed harness's) or directories of them through a report template
--- (lua/reports/*.lua); see lua/reports/lib/ (load, format, svg, render) and docs/REPORTS.md.
local command = require('cseng.cli.command')
local report_load = require('reports.lib.load')
local report_render = require('reports.lib.render')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'report',
  summary = 'render run logs through a markdown report template',
  usage = 'usage: cseng report RESULTS... [--template lua/reports/X.lua] [-o OUT.md]\n\n' ..
    'RESULTS are run logs (.jsonl), run summaries (.json: cseng\'s or the seed harness\'s) or\n' ..
    'directories of them (a summary whose log is also read is left out). The template is a Lua\n' ..
    'file returning function(data, helpers) -> markdown; SVG charts are written next to it.\n' ..
    'Templates: lua/reports/ (startup, cross_vendor, per_task, per_provider, failure_modes).',
  flags = {
    { 'template', 'string', arg = 'FILE|NAME',
      help = 'lua/reports/X.lua (or X); default: by the run kind (startup runs: startup)' },
    { 'output', 'string', alias = 'o', arg = 'OUT.md',
      help = 'the markdown file (charts go beside it); - for stdout; default: RUN.md beside a single RUN.jsonl/.json' },
  },
}

-- The kind of run each bundled template reports.
local BUNDLED_KIND = { startup = 'startup', cross_vendor = 'tasks', per_task = 'tasks', per_provider = 'tasks',
  failure_modes = 'tasks' }

function cmd.main(f, pos)
  if #pos == 0 then
    return exit.usage_error('report needs at least one RESULTS path (see cseng report --help)')
  end
  local ok, data = pcall(report_load.load, pos)
  if not ok then return exit.fail(data, 'report') end
  for _, w in ipairs(data.warnings) do io.stderr:write('cseng: report: ', w, '\n') end
  if #data.runs == 0 then io.stderr:write('cseng: report: no runs in ', table.concat(pos, ' '), '\n'); return 1 end
  local template = f.template
  if not template then
    local kinds = {}
    for _, r in ipairs(data.runs) do kinds[r.kind] = true end
    if kinds.startup and not kinds.tasks then template = 'startup'
    else
      return exit.usage_error('report: give --template lua/reports/X.lua (no default for these runs; ' ..
        'cross_vendor, per_task, per_provider, failure_modes)')
    end
  end
  -- a bundled template for the other kind of run renders nothing useful: said, not written
  local base = template:gsub('^.*/', ''):gsub('%.lua$', '')
  local wants = BUNDLED_KIND[base]
  local tok, tpath = pcall(report_render.template_path, template)
  local sys = require('cseng.sys')
  if wants and tok and sys.realpath(tpath) == sys.realpath(sys.root() .. '/lua/reports/' .. base .. '.lua') then
    local found, have = false, {}
    for _, r in ipairs(data.runs) do
      if r.kind == wants then found = true end
      have[#have + 1] = string.format('%s (%s)', r.id, r.kind == 'startup' and 'a startup arena run' or
        r.kind == 'tasks' and 'a task run' or ('kind ' .. tostring(r.kind)))
    end
    if not found then
      return exit.usage_error(string.format('report: the %s template reports %s, and the input holds none: %s; ' ..
        'use %s', template, wants == 'startup' and 'startup arena runs' or 'task runs', table.concat(have, ', '),
        wants == 'startup' and '--template per_task, per_provider, cross_vendor or failure_modes' or '--template startup'))
    end
  end
  local out = f.output
  if not out then
    if #pos == 1 and pos[1]:match('%.jsonl?$') then out = pos[1]:gsub('%.jsonl?$', '') .. '.md'
    else return exit.usage_error('report: give -o OUT.md for several inputs or a directory') end
  end
  local rok, res = pcall(report_render.render, { data = data, template = template, output = out })
  if not rok then return exit.fail(res, 'report') end
  if out ~= '-' then
    io.stdout:write('report: ', out, '\n')
    for _, file in ipairs(res.files) do io.stdout:write('chart: ', file, '\n') end
  end
  return 0
end

return cmd
