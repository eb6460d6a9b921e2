--- Report template: one section per provider. Its runs and modes with pass rates, the
--- distribution of phase times (p50/p90/p99), a histogram of error stages and codes, fidelity
--- gaps (RUN steps the sandbox did not execute, by task), the build cache hit rate (providers
--- that build images: docker) and cost.
--- `cseng report results/ /work/shared/data/seed-results/ --template lua/reports/per_provider.lua -o out.md`
---
--- Pass rates are given both over the evidence trials (report_tasks.RULE) and over every trial;
--- timing distributions, errors, cache hits and cost use every trial of the provider.
local rt = require('reports.lib.task_runs')
local stats = require('cseng.lib.stats')

local function bar(n, max)
  if max <= 0 then return '' end
  return string.rep('█', math.max(n > 0 and 1 or 0, math.floor(n / max * 20 + 0.5)))
end

local function section(provider, data, ev, h, add)
  add('## ' .. h.escape(provider) .. '\n')
  local trials, runs, cols = {}, {}, {}
  for _, t in ipairs(data.trials) do if tostring(t.provider or 'unknown') == provider then trials[#trials + 1] = t end end
  for _, col in ipairs(ev.columns) do if col.provider == provider then cols[#cols + 1] = col end end
  for _, run in ipairs(rt.task_runs(data)) do
    for _, t in ipairs(run.trials) do
      if tostring(t.provider or 'unknown') == provider then runs[#runs + 1] = run; break end
    end
  end

  -- runs
  add('### Runs\n')
  local rrows = {}
  for _, run in ipairs(runs) do
    local mine = {}
    for _, t in ipairs(run.trials) do if tostring(t.provider or 'unknown') == provider then mine[#mine + 1] = t end end
    local c = rt.counts(mine)
    local st = run.started or {}
    rrows[#rrows + 1] = { { raw = h.code(run.id) }, run.source or 'log', st.mode or '?',
      st.solver or (st.solve_enabled == false and 'none (verifier only)' or '?'), rt.run_date(run), c.n, c.passed,
      c.failed, c.errors, run.finished and run.finished.status or 'incomplete' }
  end
  add(h.table({ 'run', 'source', 'mode', 'solver', 'date', 'trials', 'passed', 'failed', 'errors', 'status' }, rrows,
    'lllllrrrrl'))

  -- warm artifacts: prepared in the run, or reused (from the provider, a prewarm file), and how old
  local prepared, reused, ages = 0, 0, {}
  for _, run in ipairs(runs) do
    for _, e in ipairs(run.events or {}) do
      if e.event == 'prewarmed' and tostring(e.provider) == provider then
        if e.reused then reused = reused + 1 else prepared = prepared + 1 end
        if e.reused and type(e.age_s) == 'number' then ages[#ages + 1] = e.age_s end
      end
    end
  end
  if prepared + reused > 0 then
    local age = ''
    if #ages > 0 then
      local smr = stats.summary(ages)
      age = string.format(' (age of the reused ones: median %s, oldest %s)', rt.secs(smr.p50), rt.secs(smr.max))
    end
    add(string.format('Warm artifacts: %d prepared by these runs, %d reused%s. `cseng prewarm --list` shows them, ' ..
      '`--fresh-artifacts` prepares them anew.\n', prepared, reused, age))
  end

  -- modes
  add('### Modes and pass rates\n')
  local mrows = {}
  for _, col in ipairs(cols) do
    local ce, ca = rt.counts(col.trials), rt.counts(col.all)
    local nruns = {}
    for _, t in ipairs(col.all) do nruns[t.run_id or '?'] = true end
    local nr = 0
    for _ in pairs(nruns) do nr = nr + 1 end
    mrows[#mrows + 1] = { col.mode, nr, #col.trials, ce.passed, ce.failed, ce.errors,
      h.pct(ce.n > 0 and ce.passed / ce.n or nil), ca.n, h.pct(ca.n > 0 and ca.passed / ca.n or nil) }
  end
  add(h.table({ 'mode', 'runs', 'tasks', 'passed', 'failed', 'errors', 'pass rate (evidence)', 'trials',
    'pass rate (all trials)' }, mrows))

  -- timings
  add('### Phase timing distribution (seconds, every trial)\n')
  local trows, series = {}, {}
  for _, col in ipairs(cols) do
    local function row(label, vals)
      if #vals == 0 then return end
      local s = stats.summary(vals)
      trows[#trows + 1] = { col.mode, label, s.n, rt.secs(s.p50), rt.secs(s.p90), rt.secs(s.p99), rt.secs(s.max) }
    end
    for _, p in ipairs(rt.PHASES) do
      local vals = h.values(col.all, function(t) return rt.phase(t, p) end)
      row(p, vals)
      if #vals > 0 then series[#series + 1] = { name = (#cols > 1 and (col.mode .. ' ') or '') .. p, values = vals } end
    end
    row('trial (elapsed)', h.values(col.all, 'elapsed_seconds'))
    row('sandbox lifetime', h.values(col.all, 'sandbox_seconds'))
  end
  if #trows == 0 then add('No timings recorded.\n')
  else
    add(h.table({ 'mode', 'phase', 'n', 'p50', 'p90', 'p99', 'max' }, trows, 'llrrrrr'))
    add('p99 of fewer than 100 trials is close to the maximum. A phase\'s n counts the trials in which it ran ' ..
      '(phases after an error do not).\n')
    if #series > 0 then
      add(h.chart(provider .. '.phases', h.svg.box(series, { title = provider .. ': phase seconds, every trial',
        xlabel = 'seconds' }), provider .. ': box plot of phase seconds') .. '\n')
    end
  end

  -- errors
  add('### Error stages and codes\n')
  local groups, keys, nerr, nfail = {}, {}, 0, 0
  for _, t in ipairs(trials) do
    if t.outcome == 'error' then
      nerr = nerr + 1
      local k = tostring(t.error_stage or '?') .. '\0' .. tostring(t.error_code or '?')
      if not groups[k] then
        groups[k] = { stage = tostring(t.error_stage or '?'), code = tostring(t.error_code or '?'), n = 0 }
        keys[#keys + 1] = k
      end
      groups[k].n = groups[k].n + 1
    elseif t.outcome ~= 'passed' then
      nfail = nfail + 1
    end
  end
  if nerr == 0 then
    add(string.format('No infrastructure errors in %d trial(s)%s.\n', #trials,
      nfail > 0 and string.format(' (%d failed: the verifier ran and did not reward them)', nfail) or ''))
  else
    table.sort(keys, function(a, b)
      if groups[a].n ~= groups[b].n then return groups[a].n > groups[b].n end
      return a < b
    end)
    local max = groups[keys[1]].n
    local erows = {}
    for _, k in ipairs(keys) do
      local g = groups[k]
      erows[#erows + 1] = { g.stage, g.code, g.n, h.pct(g.n / nerr), { raw = bar(g.n, max) } }
    end
    add(h.table({ 'stage', 'code', 'count', 'share of errors', '' }, erows, 'llrrl'))
    add(string.format('%d error(s) in %d trial(s) (%s); %d failed (the verifier ran). ' ..
      'Examples: the failure_modes report.\n', nerr, #trials, h.pct(nerr / #trials), nfail))
  end

  -- fidelity gaps
  add('### Fidelity gaps\n')
  local newest = {}
  for _, t in ipairs(trials) do
    local cur = newest[t.task_id]
    if type(t.fidelity_gaps) == 'table' and (not cur or rt.time(t) >= rt.time(cur)) then newest[t.task_id] = t end
  end
  local tasks = {}
  for task in pairs(newest) do tasks[#tasks + 1] = task end
  table.sort(tasks)
  if #tasks == 0 then
    add('No trial recorded fidelity gaps: the provider builds the task\'s image (or the records predate the field).\n')
  else
    local frows, total_run, with_run = {}, 0, 0
    for _, task in ipairs(tasks) do
      local n, other = 0, {}
      for _, g in ipairs(newest[task].fidelity_gaps) do
        if g.kind == 'RUN' then n = n + 1 else other[tostring(g.kind)] = (other[tostring(g.kind)] or 0) + 1 end
      end
      total_run = total_run + n
      if n > 0 then with_run = with_run + 1 end
      local parts = {}
      for kind, c in pairs(other) do parts[#parts + 1] = kind .. (c > 1 and (' ×' .. c) or '') end
      table.sort(parts)
      frows[#frows + 1] = { { raw = h.code(task) }, n, table.concat(parts, ', ') }
    end
    add(string.format('What the sandbox lacks compared with the task\'s image (`fidelity_gaps`, from the newest ' ..
      'trial of each task): %d RUN step(s) not executed across %d of %d task(s).\n', total_run, with_run, #tasks))
    add(h.table({ 'task', 'RUN steps not executed', 'other gaps' }, frows, 'lrl'))
  end

  -- build cache
  add('### Build cache\n')
  local hits, n, broken = 0, 0, 0
  for _, t in ipairs(trials) do
    if t.build_cache_hit ~= nil then
      n = n + 1
      if t.build_cache_hit == true then hits = hits + 1 end
    elseif t.outcome == 'error' and t.error_stage == 'build' and t.mode ~= 'warm' then
      broken = broken + 1
    end
  end
  if n == 0 and broken == 0 then
    add('No trial recorded `build_cache_hit` (only providers that build task images do: docker).\n')
  else
    add(string.format('%d of %d successful builds were cache hits (%s)%s.\n', hits, n, h.pct(n > 0 and hits / n or nil),
      broken > 0 and string.format('; %d build(s) failed and are not counted', broken) or ''))
  end

  -- cost
  add('### Cost\n')
  local ev_trials = {}
  for _, col in ipairs(cols) do for _, t in ipairs(col.trials) do ev_trials[#ev_trials + 1] = t end end
  local all_cost = rt.sum(trials, function(t) return t.estimated_cost_usd end)
  local ev_cost = rt.sum(ev_trials, function(t) return t.estimated_cost_usd end)
  local s_cost = rt.sum(trials, rt.solver_cost)
  add(h.table({ 'what', 'value' }, {
    { 'estimated sandbox cost, every trial', rt.usd(all_cost) },
    { 'estimated sandbox cost, evidence trials', rt.usd(ev_cost) },
    { 'per task (evidence)', rt.usd(ev_cost and #ev_trials > 0 and ev_cost / #ev_trials or nil) },
    { 'solver (model) cost, every trial', rt.usd(s_cost) },
  }, 'lr'))
end

return function(data, h)
  local out, add, ev = rt.document(data, '# Per-provider report\n')
  local providers, seen = {}, {}
  for _, col in ipairs(ev.columns) do
    if not seen[col.provider] then seen[col.provider] = true; providers[#providers + 1] = col.provider end
  end
  if #providers == 0 then
    return rt.no_records(data, out)
  end
  local names = {}
  for i, p in ipairs(providers) do names[i] = h.escape(p) end
  add('Providers: ' .. table.concat(names, ', ') .. '.\n')
  add(rt.pass_at_k_section(data, h)) -- nil (nothing added) without agent trials
  add(rt.metrics_section(data, h)) -- nil without reward keys beyond `reward`
  add(rt.admission_section(data, h)) -- nil (nothing added) when no run had admission on
  add(rt.rates_section(data, h)) -- nil without recorded rates
  for _, p in ipairs(providers) do section(p, data, ev, h, add) end
  return table.concat(out, '\n')
end
