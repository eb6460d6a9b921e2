--- Report template: failure modes. Every non-passing trial of the inputs (all trials, not only
--- the evidence ones), grouped by (provider, outcome, error_stage, error_code), with counts and
--- one example each (the newest: task, error text tail, stdout/stderr tail excerpts); the
--- infrastructure-error rate per provider; and a "what to look at first" list ordered by count.
--- `cseng report results/ /work/shared/data/seed-results/ --template lua/reports/failure_modes.lua -o out.md`
local rt = require('reports.lib.task_runs')
local stats = require('cseng.lib.stats')
local report_format = require('reports.lib.format')

local NONE = '–'

-- One line of at most n bytes. An error keeps its head (what failed comes first: "build:
-- environment/Dockerfile line 6: ..."); an output tail keeps its end (head = false).
local function one_line(s, n, head)
  s = tostring(s or ''):gsub('%s+', ' '):gsub('^ ', ''):gsub(' $', '')
  n = n or 160
  if #s > n then
    if head ~= false then
      local cut = n
      while cut > 0 and (s:byte(cut + 1) or 0) >= 0x80 and (s:byte(cut + 1) or 0) < 0xC0 do cut = cut - 1 end
      return s:sub(1, cut) .. '…'
    end
    local cut = #s - n + 1
    while cut <= #s and s:byte(cut) >= 0x80 and s:byte(cut) < 0xC0 do cut = cut + 1 end
    s = '…' .. s:sub(cut)
  end
  return s
end

-- a group's heading: its provider, stage and code are a log's text (escaped: never a link)
local function describe(g)
  local e = report_format.escape
  if g.outcome == 'error' then
    return string.format('%s: error in %s (%s)', e(g.provider), e(g.stage), e(g.code))
  end
  return string.format('%s: %s (the verifier ran; reward below 1)', e(g.provider), e(g.outcome))
end

return function(data, h)
  local out = {}
  local function add(s) out[#out + 1] = s end
  local ev = rt.evidence(data)
  add('# Failure modes\n')
  add('Every trial that did not pass, from all ' .. #data.trials .. ' trial(s) of the runs read (not only the ' ..
    'evidence trials), grouped by provider, outcome, error stage and error code. `failed`: the verifier ran and ' ..
    'the reward was below 1 (a wrong answer, or a broken environment the tests noticed); `error`: an ' ..
    'infrastructure failure in the named phase, with no verdict.\n')
  add(rt.evidence_text(data, ev))

  -- the solver of a trial; a seed summary with solve_enabled = false ran the verifier only
  local verifier_only = {}
  for _, run in ipairs(data.runs) do
    if run.started and run.started.solve_enabled == false and not run.started.solver then verifier_only[run.id] = true end
  end
  local function solver_of(t)
    if t.solver then return tostring(t.solver) end
    return verifier_only[t.run_id] and 'none' or '?'
  end

  -- groups
  local groups, order = {}, {}
  local per_provider, provider_order = {}, {}
  for _, t in ipairs(data.trials) do
    local p = tostring(t.provider or 'unknown')
    if not per_provider[p] then
      per_provider[p] = { n = 0, passed = 0, failed = 0, errors = 0 }
      provider_order[#provider_order + 1] = p
    end
    local pp = per_provider[p]
    pp.n = pp.n + 1
    if t.outcome == 'passed' then pp.passed = pp.passed + 1
    elseif t.outcome == 'error' then pp.errors = pp.errors + 1
    else pp.failed = pp.failed + 1 end
    if t.outcome ~= 'passed' then
      local outcome = tostring(t.outcome or 'failed')
      local stage = outcome == 'error' and tostring(t.error_stage or '?') or NONE
      local code = outcome == 'error' and tostring(t.error_code or '?') or NONE
      local k = table.concat({ p, outcome, stage, code }, '\0')
      local g = groups[k]
      if not g then
        g = { provider = p, outcome = outcome, stage = stage, code = code, n = 0, tasks = {}, ntasks = 0,
          passed_elsewhere = 0, rcs = {}, trials = {}, solvers = {} }
        groups[k] = g
        order[#order + 1] = g
      end
      g.n = g.n + 1
      g.trials[#g.trials + 1] = t
      if not g.tasks[t.task_id] then g.tasks[t.task_id] = true; g.ntasks = g.ntasks + 1 end
      local sel = ev.by_key[rt.column(t)] and ev.by_key[rt.column(t)].by_task[tostring(t.task_id)]
      if sel and sel.outcome == 'passed' then g.passed_elsewhere = g.passed_elsewhere + 1 end
      if t.return_code ~= nil then g.rcs[t.return_code] = (g.rcs[t.return_code] or 0) + 1 end
      local sv = solver_of(t)
      g.solvers[sv] = (g.solvers[sv] or 0) + 1
      if not g.example or rt.time(t) >= rt.time(g.example) then g.example = t end
    end
  end
  table.sort(order, function(a, b)
    if a.n ~= b.n then return a.n > b.n end
    if a.provider ~= b.provider then return a.provider < b.provider end
    if a.outcome ~= b.outcome then return a.outcome < b.outcome end
    if a.stage ~= b.stage then return a.stage < b.stage end
    return a.code < b.code
  end)
  table.sort(provider_order)

  -- infrastructure-error rate
  add('## Infrastructure-error rate per provider\n')
  local prows = {}
  for _, p in ipairs(provider_order) do
    local c = per_provider[p]
    local lo, hi = stats.wilson(c.errors, c.n)
    prows[#prows + 1] = { p, c.n, c.passed, c.failed, c.errors, h.pct(c.errors / c.n), h.ci(lo, hi, h.pct),
      h.pct(c.failed / c.n) }
  end
  add(h.table({ 'provider', 'trials', 'passed', 'failed', 'errors', 'error rate', '95% CI', 'failed rate' }, prows))
  add(rt.pass_at_k_section(data, h)) -- agent failures and infra errors (ESANDBOX) apart, per solver and model
  add(rt.metrics_section(data, h)) -- nil without reward keys beyond `reward`
  add(rt.admission_section(data, h)) -- nil (nothing added) when no run had admission on
  add('Error rate = errors / trials, over every trial read (a retried task counts each time); the interval is ' ..
    'Wilson\'s.\n')

  if #order == 0 then
    add('## What to look at first\n')
    add('Every trial passed.\n')
    return table.concat(out, '\n')
  end

  local function solvers_text(g)
    local l = {}
    for name, n in pairs(g.solvers) do l[#l + 1] = { name = name, n = n } end
    table.sort(l, function(a, b) -- most first, then by name (the same order in every process)
      if a.n ~= b.n then return a.n > b.n end
      return a.name < b.name
    end)
    local parts = {}
    for _, x in ipairs(l) do parts[#parts + 1] = x.name .. ' ×' .. x.n end
    return table.concat(parts, ', ')
  end
  local function expected(g) -- every trial ran without a solver: failing is the point
    for name in pairs(g.solvers) do if name ~= 'nop' and name ~= 'none' then return false end end
    return g.outcome == 'failed'
  end

  -- what first
  add('## What to look at first\n')
  add('Groups by count, largest first. "Passed elsewhere" counts trials whose provider/mode passed the same ' ..
    'task in another trial (flaky, or fixed since). Failures of runs without a solver (`nop`, or a seed ' ..
    'verifier-only run) are expected: they show the tests catch an unsolved task.\n')
  local items = {}
  for i, g in ipairs(order) do
    local ex = g.example
    local why = g.outcome == 'error' and one_line(ex.error, 140) or one_line(rt.tail(ex.stdout_tail, 1), 140, false)
    items[#items + 1] = string.format('%d. **%d × %s**: %d task(s)%s%s; e.g. %s%s', i, g.n, describe(g), g.ntasks,
      g.passed_elsewhere > 0 and string.format(', %d passed elsewhere', g.passed_elsewhere) or '',
      expected(g) and ', no solver (expected)' or '', h.code(ex.task_id), why ~= '' and (': ' .. h.code(why)) or '')
  end
  add(table.concat(items, '\n') .. '\n')

  -- groups table
  add('## Groups\n')
  local grows = {}
  for i, g in ipairs(order) do
    local rcs = {}
    for rc, n in pairs(g.rcs) do rcs[#rcs + 1] = { rc = rc, n = n } end
    table.sort(rcs, function(a, b) return a.n ~= b.n and a.n > b.n or tostring(a.rc) < tostring(b.rc) end)
    local rc_text = {}
    for _, x in ipairs(rcs) do rc_text[#rc_text + 1] = tostring(x.rc) .. (x.n > 1 and (' ×' .. x.n) or '') end
    grows[#grows + 1] = { i, g.provider, g.outcome, g.stage, g.code, g.n, g.ntasks, g.passed_elsewhere,
      #rc_text > 0 and table.concat(rc_text, ', ') or NONE, solvers_text(g), { raw = h.code(g.example.task_id) } }
  end
  add(h.table({ '#', 'provider', 'outcome', 'stage', 'code', 'count', 'tasks', 'passed elsewhere', 'verifier exit codes',
    'solvers', 'example task' }, grows, 'rllllrrrlll'))

  -- examples
  add('## Examples\n')
  add('The newest trial of each group.\n')
  for i, g in ipairs(order) do
    local ex = g.example
    add(string.format('### %d. %s (%d)\n', i, describe(g), g.n))
    local lines = {
      string.format('- task %s, mode %s, run %s, finished %s', h.code(ex.task_id), tostring(ex.mode or 'unknown'),
        h.code(ex.run_id or '?'), tostring(rt.time(ex) ~= '' and rt.time(ex) or '?')),
    }
    if ex.return_code ~= nil then lines[#lines + 1] = '- verifier exit code ' .. tostring(ex.return_code) end
    if ex.error then lines[#lines + 1] = '- error: ' .. h.code(one_line(ex.error, 300)) end
    if ex.solve_note then lines[#lines + 1] = '- solver: ' .. h.code(one_line(ex.solve_note, 200)) end
    add(table.concat(lines, '\n') .. '\n')
    local shown = false
    for _, f in ipairs({ { 'stdout_tail', 'verifier stdout (tail)' }, { 'stderr_tail', 'verifier stderr (tail)' },
      { 'build_log_tail', 'build log (tail)' } }) do
      local text = rt.tail(ex[f[1]], 8, 800)
      if text ~= '' then
        add('*' .. f[2] .. '*\n')
        add(rt.fence(text))
        shown = true
      end
    end
    if not shown then add('*No output recorded (the verifier did not run).*\n') end
  end
  return table.concat(out, '\n')
end
