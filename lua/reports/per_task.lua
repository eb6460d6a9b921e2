--- Report template: per-task comparison. One row per task, one column group per provider/mode:
--- the evidence trial's outcome (✓ passed, ✗ failed, "error: <stage>") and its seconds.
--- `cseng report results/ /work/shared/data/seed-results/ --template lua/reports/per_task.lua -o out.md`
---
--- Sections: counts per column; tasks whose outcome differs between the columns that ran them
--- (the interesting ones); tasks that pass nowhere; tasks that pass everywhere they ran; the full
--- table. Evidence rule: report_tasks.RULE.
local rt = require('reports.lib.task_runs')

local function cell(ev, t)
  if not t then return '–' end
  local s = rt.outcome(t)
  local a = ev.attempts[t]
  if a and a.n > 1 then s = s .. string.format(' (%d/%d passed)', a.passed, a.n) end
  return s
end

local function task_table(h, ev, tasks)
  local hdr, align = { 'task' }, 'l'
  for _, col in ipairs(ev.columns) do
    hdr[#hdr + 1] = col.key
    hdr[#hdr + 1] = 's'
    align = align .. 'cr'
  end
  local rows = {}
  for _, task in ipairs(tasks) do
    local row = { { raw = h.code(task) } }
    for _, col in ipairs(ev.columns) do
      local t = col.by_task[task]
      row[#row + 1] = cell(ev, t)
      row[#row + 1] = t and rt.secs(t.elapsed_seconds) or ''
    end
    rows[#rows + 1] = row
  end
  return h.table(hdr, rows, align)
end

return function(data, h)
  local out, add, ev = rt.document(data, '# Per-task comparison\n')
  if #ev.tasks == 0 then
    return rt.no_records(data, out)
  end
  add(rt.pass_at_k_section(data, h)) -- nil (nothing added) without agent trials
  add(rt.metrics_section(data, h)) -- nil without reward keys beyond `reward`
  add('Cells: ✓ passed (reward 1), ✗ failed (the verifier ran, reward below 1), `error: <stage>` (an ' ..
    'infrastructure error in that phase, no verdict), – not run there. "(k/n passed)" when the column ran the ' ..
    'task n times. Seconds are the evidence trial\'s `elapsed_seconds`.\n')

  -- classify
  local differ, nowhere, everywhere = {}, {}, {}
  for _, task in ipairs(ev.tasks) do
    local seen, ran, passes = {}, 0, 0
    local kinds = 0
    for _, col in ipairs(ev.columns) do
      local t = col.by_task[task]
      if t then
        ran = ran + 1
        if t.outcome == 'passed' then passes = passes + 1 end
        local o = tostring(t.outcome)
        if not seen[o] then seen[o] = true; kinds = kinds + 1 end
      end
    end
    if kinds > 1 then differ[#differ + 1] = task end
    if passes == 0 then nowhere[#nowhere + 1] = { task = task, ran = ran } end
    if passes == ran then everywhere[#everywhere + 1] = { task = task, ran = ran } end
  end

  add('## Summary\n')
  local srows = {}
  for _, col in ipairs(ev.columns) do
    local c = rt.counts(col.trials)
    srows[#srows + 1] = { col.key, c.n, c.passed, c.failed, c.errors, h.pct(c.n > 0 and c.passed / c.n or nil) }
  end
  add(h.table({ 'provider/mode', 'tasks run', 'passed', 'failed', 'errors', 'pass rate' }, srows))
  add(string.format('%d task(s) in all: %d with an outcome that differs between the columns that ran them, %d ' ..
    'that pass nowhere, %d that pass everywhere they ran.\n', #ev.tasks, #differ, #nowhere, #everywhere))

  add('## Outcome differs between providers/modes\n')
  if #differ == 0 then
    add(#ev.columns > 1 and 'No task has different outcomes in different columns.\n' or
      'Only one provider/mode column: nothing to compare.\n')
  else
    add('Tasks run by two or more columns whose evidence outcomes are not all the same (passed, failed, error): ' ..
      'a provider difference, a flaky task, or a fidelity gap. Start here.\n')
    add(task_table(h, ev, differ))
  end

  local function listing(items)
    local parts = {}
    for _, x in ipairs(items) do
      parts[#parts + 1] = string.format('%s (%d column%s)', h.code(x.task), x.ran, x.ran == 1 and '' or 's')
    end
    return table.concat(parts, ', ') .. '\n'
  end
  add('## Pass nowhere\n')
  if #nowhere == 0 then add('Every task passed in at least one column.\n')
  else
    local names = {}
    for _, x in ipairs(nowhere) do names[#names + 1] = x.task end
    add(#nowhere .. ' task(s) did not pass in any column that ran them:\n')
    add(task_table(h, ev, names))
  end

  add('## Pass everywhere\n')
  if #everywhere == 0 then add('No task passed in every column that ran it.\n')
  else add(#everywhere .. ' task(s) passed in every column that ran them: ' .. listing(everywhere)) end

  add('## All tasks\n')
  add(task_table(h, ev, ev.tasks))

  -- how the runs were paced: after the answers, not before them
  add(rt.admission_section(data, h)) -- nil (nothing added) when no run had admission on

  add('## Runs\n')
  add(rt.runs_table(data, h))
  return table.concat(out, '\n')
end
