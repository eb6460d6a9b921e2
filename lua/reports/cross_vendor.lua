--- Report template: cross-vendor comparison of task runs, one row per provider × mode.
--- `cseng report results/ /work/shared/data/seed-results/ --template lua/reports/cross_vendor.lua -o out.md`
---
--- Numbers are over the evidence trials (report_tasks.RULE: per provider/mode and task, the
--- newest passing trial, else the newest trial): outcomes, pass rate (with a Wilson 95% interval),
--- median and p95 trial seconds (elapsed_seconds), per-phase medians, estimated sandbox cost
--- and solver (model) cost; pairwise ratios of the median start (create) time with a seeded
--- bootstrap CI; a grouped bar chart of the phase medians and a box plot of trial seconds.
local rt = require('reports.lib.task_runs')
local stats = require('cseng.lib.stats')

local REPS = 2000

return function(data, h)
  local out, add, ev = rt.document(data, '# Cross-vendor comparison\n')
  if #ev.columns == 0 then
    return rt.no_records(data, out)
  end

  add('## Runs\n')
  add(rt.runs_table(data, h))
  add(rt.pass_at_k_section(data, h)) -- nil (nothing added) without agent trials
  add(rt.metrics_section(data, h)) -- nil without reward keys beyond `reward`
  add(rt.admission_section(data, h)) -- nil (nothing added) when no run had admission on
  add(rt.rates_section(data, h)) -- nil without recorded rates

  -- outcomes, time, cost
  add('## Outcomes, trial time and cost\n')
  add('One row per provider/mode, over its evidence trials (one per task). Trial seconds are `elapsed_seconds` ' ..
    '(the whole trial, stop included). Sandbox cost is the harness estimate (`estimated_cost_usd`: billed lifetime ' ..
    'times the provider\'s configured rates; `local` and `docker` have none); solver cost is the model spend LLM ' ..
    'solvers report (`solver_usage.cost_usd`), kept apart.\n')
  local rows = {}
  for _, col in ipairs(ev.columns) do
    local c = rt.counts(col.trials)
    local secs = h.values(col.trials, 'elapsed_seconds')
    local lo, hi = stats.wilson(c.passed, c.n)
    local cost = rt.sum(col.trials, function(t) return t.estimated_cost_usd end)
    local scost = rt.sum(col.trials, rt.solver_cost)
    rows[#rows + 1] = { col.provider, col.mode, c.n, c.passed, c.failed, c.errors, h.pct(c.n > 0 and c.passed / c.n or nil),
      h.ci(lo, hi, h.pct), rt.secs(stats.median(secs)), rt.secs(stats.quantile(secs, 0.95)), rt.usd(cost),
      rt.usd(cost and c.n > 0 and cost / c.n or nil), rt.usd(scost) }
  end
  add(h.table({ 'provider', 'mode', 'tasks', 'passed', 'failed', 'errors', 'pass rate', '95% CI', 'median s', 'p95 s',
    'sandbox cost', 'per task', 'solver cost' }, rows, 'llrrrrrrrrrrr'))
  local common, same = 0, true
  for _, task in ipairs(ev.tasks) do
    local everywhere = true
    for _, col in ipairs(ev.columns) do if not col.by_task[task] then everywhere = false; same = false end end
    if everywhere then common = common + 1 end
  end
  if not same then
    add(string.format('The columns did not all run the same tasks (%d task(s) were run by every column), so the rows ' ..
      'above compare different task sets; the per_task report lines them up task by task.\n', common))
  end
  local all_cost = rt.sum(data.trials, function(t) return t.estimated_cost_usd end)
  add(string.format('All %d trials read (evidence or not) cost %s in estimated sandbox time.\n', #data.trials,
    rt.usd(all_cost)))

  -- phases
  add('## Median phase times (seconds)\n')
  local phases = {}
  for _, p in ipairs(rt.PHASES) do
    for _, t in ipairs(ev.selected) do
      if rt.phase(t, p) then phases[#phases + 1] = p; break end
    end
  end
  if #phases == 0 then
    add('No trial recorded phase times.\n')
  else
    add('Each cell is the median over the column\'s evidence trials in which the phase ran (n is the number of ' ..
      'evidence trials). `start` is the create call, `stop` the destroy; `build` appears only where the provider ' ..
      'builds images or prepares a warm artifact.\n')
    local hdr = { 'provider', 'mode', 'n' }
    for _, p in ipairs(phases) do hdr[#hdr + 1] = p end
    local prow, series = {}, {}
    for _, col in ipairs(ev.columns) do
      local row = { col.provider, col.mode, #col.trials }
      local vals = {}
      for i, p in ipairs(phases) do
        local m = stats.median(h.values(col.trials, function(t) return rt.phase(t, p) end))
        row[#row + 1] = rt.secs(m)
        vals[i] = m
      end
      prow[#prow + 1] = row
      if next(vals) then series[#series + 1] = { name = col.key, values = vals } end
    end
    add(h.table(hdr, prow, 'llr' .. string.rep('r', #phases)))
    if #series < #ev.columns then
      add('Columns without any phase times (summaries that do not record them) are left out of the chart.\n')
    end
    add(h.chart('phases', h.svg.bars(phases, series, { title = 'Median phase time per provider/mode (evidence trials)',
      ylabel = 'seconds', unit = ' s' }), 'grouped bars: median seconds of each phase per provider/mode') .. '\n')
    local box = {}
    for _, col in ipairs(ev.columns) do
      box[#box + 1] = { name = col.key, values = h.values(col.trials, 'elapsed_seconds') }
    end
    add(h.chart('trial-seconds', h.svg.box(box, { title = 'Trial seconds (evidence trials): p5, p25, median, p75, p95',
      xlabel = 'elapsed_seconds' }), 'box plot of trial seconds per provider/mode') .. '\n')
  end

  -- start ratios
  add('## Start (create) time: pairwise ratios of medians\n')
  local starts = {}
  for _, col in ipairs(ev.columns) do starts[col.key] = h.values(col.trials, function(t) return rt.phase(t, 'start') end) end
  local rrows = {}
  for i = 1, #ev.columns do
    for j = i + 1, #ev.columns do
      local a, b = ev.columns[i].key, ev.columns[j].key
      local va, vb = starts[a], starts[b]
      if #va > 0 and #vb > 0 then
        local fast, slow, vf, vs = a, b, va, vb
        if stats.median(va) > stats.median(vb) then fast, slow, vf, vs = b, a, vb, va end
        local r = stats.ratio_ci(vs, vf, { reps = REPS, seed = stats.hash('start/' .. slow .. '/' .. fast) })
        if r then
          rrows[#rrows + 1] = { fast, slow, string.format('%s (n=%d)', rt.secs(stats.median(vf)), #vf),
            string.format('%s (n=%d)', rt.secs(stats.median(vs)), #vs), h.num(r.ratio, 2),
            h.ci(r.lo, r.hi, function(v) return h.num(v, 2) end) }
        end
      end
    end
  end
  if #rrows == 0 then
    add('Fewer than two provider/mode columns have start times; no pairs to compare.\n')
  else
    add('For each pair of columns, the slower median start time divided by the faster one, with a 95% percentile ' ..
      'bootstrap CI (' .. REPS .. ' replicates, both samples resampled, seeded from the pair\'s names so the ' ..
      'report renders the same every time). With a handful of tasks the interval is wide; the startup arena ' ..
      '(`plans/startup.lua`, docs/ARENA.md) measures creation properly.\n')
    add(h.table({ 'faster', 'slower', 'faster median s', 'slower median s', 'slower/faster', '95% CI' }, rrows,
      'llrrrr'))
  end

  add('## Files read\n')
  local files = {}
  for _, p in ipairs(data.inputs) do files[#files + 1] = '- ' .. h.code(p) end
  add(table.concat(files, '\n') .. '\n')
  return table.concat(out, '\n')
end
