--- `cseng compare A B [-o OUT.md] [--fail-on-regression]`: what changed from run A to run B (each a
--- run log, a summary or a directory of them), as markdown. The comparison itself (per solver,
--- model, provider and mode cell; per task; per phase; startup per provider) is
--- lua/reports/lib/changes.lua, which the viewer's comparison page shows too; this file is the
--- command: its flags, loading both sides, writing the markdown, the exit status.
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local report_load = require('reports.lib.load')
local exit = require('cseng.cli.exit')
local report_compare = require('reports.lib.changes')

local cmd = command {
  name = 'compare',
  summary = 'compare two runs: pass rate per solver/model/provider/mode, outcome and phase changes with CIs, regressions called out',
  usage = 'usage: cseng compare A B [-o OUT.md] [--fail-on-regression]\n' ..
    '       cseng compare --history [RUN] [--results DIR] [-o OUT.md] [--fail-on-regression]\n\n' ..
    'A and B are run logs (.jsonl), summaries (.json) or directories of them, or run ids of the results\n' ..
    'folder\'s history store; A is the baseline. With --history, RUN is judged against the trailing window\n' ..
    'of its lineage (docs/WATCH.md).',
  flags = {
    { 'output', 'string', alias = 'o', arg = 'OUT.md', help = 'write the markdown here (default: stdout)' },
    { 'fail-on-regression', 'bool', help = 'exit 1 when anything regressed (for CI)' },
    { 'seed', 'int', arg = 'N', help = 'bootstrap seed (default 1)' },
    { 'min-seconds', 'number', arg = 'S',
      help = 'a phase is slower/faster only if its median also moved by more than S seconds (default 0.01)' },
    { 'history', 'bool', help = 'compare RUN (default: the latest) with its trailing window in the results folder\'s history store' },
    { 'results', 'string', arg = 'DIR',
      help = 'the results folder whose history store resolves run ids (default results)' },
  },
}

--- Compare loaded data a and b (lua/reports/lib/changes.lua). Returns {markdown, regressions}.
cmd.compare = report_compare.compare

-- the results folder's history store, brought up to its logs (nil and why when there is none)
local function history_store(dir)
  local st = fs.stat(dir)
  if not st or st.type ~= 'dir' then return nil, dir .. ': not a results folder' end
  local S, err = require('cseng.history.store').open(dir)
  if not S then return nil, err end
  local ok, e = pcall(S.sync, S)
  if not ok then S:close(); return nil, e end
  return S
end

local function write(f, markdown)
  if f.output and f.output ~= '-' then
    local ok, err = fs.write(f.output, markdown)
    if not ok then io.stderr:write('cseng: compare: cannot write ', f.output, ': ', tostring(err), '\n'); return false end
    io.stdout:write('compare: ', f.output, '\n')
  else
    io.stdout:write(markdown)
  end
  return true
end

function cmd.main(f, pos)
  if f.history then
    if #pos > 1 then return exit.usage_error('compare --history takes one run (see cseng compare --help)') end
    local S, err = history_store(f.results or 'results')
    if not S then return exit.fail(err, 'compare') end
    local ok, r, why = pcall(require('cseng.history.compare').against_window, S, pos[1])
    S:close()
    if not ok then return exit.fail(r, 'compare') end
    if not r then io.stderr:write('cseng: compare: ', why, '\n'); return 1 end
    if not write(f, r.markdown) then return 1 end
    return (f.fail_on_regression and r.regressions > 0) and 1 or 0
  end
  if #pos ~= 2 then return exit.usage_error('compare needs two runs, A and B (see cseng compare --help)') end
  local S
  for i = 1, 2 do -- a run id: its log, found through the history store
    if not fs.exists(pos[i]) then
      S = S or history_store(f.results or 'results')
      local row = S and S:run_row(pos[i])
      if row then pos[i] = fs.join(S.dir, row.file) end
    end
  end
  if S then S:close() end
  local sides = {}
  for i = 1, 2 do
    local ok, d = pcall(report_load.load, { pos[i] })
    if not ok then return exit.fail(d, 'compare') end
    if #d.runs == 0 then io.stderr:write('cseng: compare: no runs in ', pos[i], '\n'); return 1 end
    sides[i] = d
  end
  local r = cmd.compare(sides[1], sides[2], { seed = f.seed, min_seconds = f.min_seconds })
  if not write(f, r.markdown) then return 1 end
  if f.fail_on_regression and r.regressions > 0 then return 1 end
  return 0
end

return cmd
