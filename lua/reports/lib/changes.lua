--- What changed from run A to run B, as markdown: what `cseng compare A B` prints and the viewer's
--- comparison page shows (lua/cseng/cli/commands/compare.lua and lua/cseng/view/app.lua both call
--- M.compare; it lives here, in report/, so the viewer needs nothing of the CLI).
---
--- Task runs: per (solver, model, provider, mode) cell (lua/cseng/results/compare.lua) the pass rate
--- on each side with the change B − A and its 95% CI, pass@1..K when the cell has repeated attempts,
--- and the cost per trial and per pass; per task, the outcome in A and B (a task that passed in A and
--- not in B is a regression, the reverse a fix), and per phase the change in seconds over the tasks
--- both ran: the median of the per-task ratios B/A with a bootstrap CI over tasks (paired: the same
--- task on both sides). A phase whose CI lies wholly above 1.10 is called out as slower, wholly below
--- 0.91 as faster; otherwise "no clear change". Startup runs (and computesdk's result files, read
--- as startup runs): per provider (and mode, when a side holds several), ready_ms (create + first
--- command) as the ratio of medians B/A with a bootstrap CI (samples are independent), the
--- success rate of each side, and computesdk's composite score of each side beside the one a
--- computesdk file publishes. A cell, provider or phase on one side only is listed as such, except
--- the cells of two runs of different solvers (or models) over the same provider and mode, which are
--- compared as one row (lua/cseng/results/compare.lua). The regressions are said once, with what
--- they are made of ("31 regression(s): 30 tasks ..., 1 slower phase (verify)"), at the top and as
--- the last line, so no part of the page counts them differently.
local report_render = require('reports.lib.render')
local stats = require('cseng.lib.stats')
local cells = require('cseng.results.compare')
local identity = require('cseng.results.identity')
local computesdk = require('cseng.results.computesdk')

local M = {}

local SLOWER, FASTER = 1.10, 1 / 1.10
local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }

local function verdict(lo, hi)
  if not lo then return 'too few to tell' end
  if lo > SLOWER then return '**slower**' end
  if hi < FASTER then return 'faster' end
  return 'no clear change'
end

local function by_task(trials)
  local out, order = {}, {}
  for _, t in ipairs(trials) do
    local id = tostring(t.task_id)
    if not out[id] then out[id] = {}; order[#order + 1] = id end
    table.insert(out[id], t)
  end
  return out, order
end

local function ok_outcome(list)
  for _, t in ipairs(list) do if t.outcome == 'passed' or t.passed == true then return 'passed' end end
  local last = list[#list]
  return last and (last.outcome or (last.passed == false and 'failed')) or 'missing'
end

local function phase_seconds(list, phase)
  local xs = {}
  for _, t in ipairs(list) do
    local v = type(t.phases) == 'table' and tonumber(t.phases[phase .. '_seconds'])
    if v then xs[#xs + 1] = v end
  end
  return #xs > 0 and stats.median(xs) or nil
end


local function usd(v) return v and string.format('$%.4f', v) or '–' end

local function side_rate(c)
  if not c then return '–' end
  local s = string.format('%s (%d/%d)', c.rate and (string.format('%.1f%%', 100 * c.rate)) or '–', c.passed, c.graded)
  if c.errors > 0 then s = s .. string.format(' +%d error(s)', c.errors) end
  return s
end

-- The per-cell section (solver, model, provider, mode). Returns the regressions it found (each cell's
-- name): cells whose pass rate fell with a CI of the change wholly below 0.
local function cell_section(add, h, ta, tb, seed)
  local rows, kmax = cells.by_cell(ta, tb, { seed = seed })
  add('## Pass rate by solver, model, provider and mode')
  add('')
  add('One row per cell (the keying of the pass@k tables: the model is the one the solver reported). Pass ' ..
    'rate: passed / graded trials, infrastructure errors counted apart; Δ is B − A in percentage points with ' ..
    'a 95% interval (Newcombe\'s hybrid score interval from the two Wilson intervals). Cost: the trials\' ' ..
    'ledgers (sandbox and model), per trial and per passing trial. A cell on one side only is listed as such, ' ..
    'unless each side has one cell of that provider and mode and they share none: then the two are compared ' ..
    '(`gold → nop`: runs of two solvers over the same tasks).')
  add('')
  local out, found = {}, {}
  local function pp(x) return string.format('%+.1f', 100 * x) end
  for _, r in ipairs(rows) do
    local v = r.verdict
    if v == 'lower' then v = '**lower**'; found[#found + 1] = table.concat({ r.solver, r.model, r.provider, r.mode }, ' / ') end
    local d = r.delta
    out[#out + 1] = { r.solver, r.model, r.provider, r.mode, side_rate(r.a), side_rate(r.b),
      d and pp(d.delta) or '–', d and ('[' .. pp(d.lo) .. ', ' .. pp(d.hi) .. ']') or '–',
      usd(r.a and r.a.per_trial_usd), usd(r.b and r.b.per_trial_usd), usd(r.a and r.a.per_pass_usd),
      usd(r.b and r.b.per_pass_usd), v }
  end
  add(h.table({ 'solver', 'model', 'provider', 'mode', 'A pass rate', 'B pass rate', 'Δ pp', '95% CI', 'A $/trial',
    'B $/trial', 'A $/pass', 'B $/pass', 'verdict' }, out, 'llllrrrlrrrrl'))
  add('')
  if kmax > 1 then
    add('pass@k per cell, over the tasks with at least k graded attempts on that side (the unbiased estimator; ' ..
      '[95% bootstrap interval over tasks]):')
    add('')
    local head, align, prow = { 'solver', 'model', 'provider', 'mode' }, 'llll', {}
    for k = 1, kmax do head[#head + 1] = 'A pass@' .. k; head[#head + 1] = 'B pass@' .. k; align = align .. 'rr' end
    local function fmt(c, k)
      local p = c and c.pass_at and c.pass_at[k]
      if not p then return '–' end
      return string.format('%.1f%% [%.1f, %.1f]', 100 * p.value, 100 * p.lo, 100 * p.hi)
    end
    for _, r in ipairs(rows) do
      if not r.only then
        local row = { r.solver, r.model, r.provider, r.mode }
        for k = 1, kmax do row[#row + 1] = fmt(r.a, k); row[#row + 1] = fmt(r.b, k) end
        prow[#prow + 1] = row
      end
    end
    add(h.table(head, prow, align))
    add('')
  end
  return found
end

-- "31 regression(s): 30 tasks, 1 slower phase (verify)": the count and what it is made of, as the
-- summary at the top and the last line say it
local function regression_line(by)
  local parts = {}
  local function part(list, one, many, names)
    if #list == 0 then return end
    local s = string.format('%d %s', #list, #list == 1 and one or many)
    if names then s = s .. ' (' .. table.concat(list, ', ') .. ')' end
    parts[#parts + 1] = s
  end
  part(by.tasks, 'task that passed in A and not in B', 'tasks that passed in A and not in B')
  part(by.cells, 'pass rate lower', 'pass rates lower', true)
  part(by.phases, 'slower phase', 'slower phases', true)
  part(by.providers, 'slower provider', 'slower providers', true)
  local n = #by.tasks + #by.cells + #by.phases + #by.providers
  if n == 0 then return 'No regression.', 0 end
  return string.format('**%d regression(s)**: %s.', n, table.concat(parts, ', ')), n
end

-- A sample's time when it is a clean success: it answered, and no fidelity audit failed it
-- (such a sample is a failure of its provider, never pooled).
local function clean_ms(t)
  if t.ok ~= true or type(t.ready_ms) ~= 'number' then return nil end
  if type(t.audit) == 'table' and t.audit.ok == false then return nil end
  return t.ready_ms
end

-- The measured startup samples of a side, by provider, and by provider and mode when a side
-- holds several modes (their TTI must not be pooled): key -> {ok = {ms...}, n}.
local function startup_groups(d, by_mode)
  local g = {}
  for _, t in ipairs(d.startup_trials) do
    if not t.warmup and t.phase ~= 'warmup' and not t.interrupted then
      local key = by_mode and (tostring(t.provider) .. ' (' .. tostring(t.mode or '?') .. ')') or tostring(t.provider)
      local p = g[key] or { ok = {}, n = 0 }
      g[key] = p
      p.n = p.n + 1
      local ms = clean_ms(t)
      if ms then p.ok[#p.ok + 1] = ms end
    end
  end
  return g
end

local function mode_count(d)
  local seen, n = {}, 0
  for _, t in ipairs(d.startup_trials) do
    local m = tostring(t.mode or '?')
    if not t.warmup and not seen[m] then seen[m] = true; n = n + 1 end
  end
  return n
end

-- The scores computesdk's files publish, by the key startup_groups gives their provider.
local function published(d, by_mode)
  local out = {}
  for _, run in ipairs(d.runs) do
    for _, r in ipairs(run.computesdk and run.computesdk.results or {}) do
      if r.composite_score then
        local key = by_mode and (r.provider .. ' (' .. (r.cseng_mode or r.mode) .. ')') or r.provider
        out[key] = { score = r.composite_score, recomputed = computesdk.recompute(r) }
      end
    end
  end
  return out
end

-- Startup: ready_ms per provider (ratio of medians, success rates), and computesdk's composite
-- score of each side.
local function startup_section(add, h, a, b, seed, by)
  local by_mode = mode_count(a) > 1 or mode_count(b) > 1
  local ga, gb = startup_groups(a, by_mode), startup_groups(b, by_mode)
  local provs, seen = {}, {}
  for p in pairs(ga) do if not seen[p] then seen[p] = true; provs[#provs + 1] = p end end
  for p in pairs(gb) do if not seen[p] then seen[p] = true; provs[#provs + 1] = p end end
  table.sort(provs)
  add('## Startup (ready_ms)')
  add('')
  add('Per provider' .. (by_mode and ' and mode (a side holds several modes; their times are never pooled)' or '') ..
    ': the median ready time (create + first command) of the measured samples, the ratio of ' ..
    'medians B/A with a 95% bootstrap CI, and each side\'s success rate. These CIs describe the samples ' ..
    'within each run only; repeated blocks (`--repeat`) say how much runs themselves vary. A sample a fidelity ' ..
    'audit failed counts as a failure; a computesdk file\'s iterations are its samples.')
  add('')
  local rows = {}
  for _, p in ipairs(provs) do
    local x, y = ga[p], gb[p]
    if x and y and #x.ok > 0 and #y.ok > 0 then
      local r = stats.ratio_ci(y.ok, x.ok, { seed = seed ~ stats.hash(p) })
      local v = verdict(r.lo, r.hi)
      if v == '**slower**' then by.providers[#by.providers + 1] = p end
      local sra, srb = #x.ok / x.n, #y.ok / y.n
      if srb < sra then v = v .. ', fewer successes' end
      rows[#rows + 1] = { p, h.ms(stats.median(x.ok)), h.ms(stats.median(y.ok)), h.num(r.ratio, 2) .. '×',
        h.ci(r.lo, r.hi, function(z) return h.num(z, 2) end), h.pct(sra), h.pct(srb), v }
    else
      rows[#rows + 1] = { p, x and #x.ok > 0 and h.ms(stats.median(x.ok)) or '–', y and #y.ok > 0 and h.ms(stats.median(y.ok)) or '–',
        '–', '–', x and h.pct(#x.ok / x.n) or '–', y and h.pct(#y.ok / y.n) or '–',
        x and y and 'no successful samples' or ('only in ' .. (x and 'A' or 'B')) }
    end
  end
  add(h.table({ 'provider', 'A median ms', 'B median ms', 'B/A', '95% CI', 'A ok', 'B ok', 'verdict' }, rows, 'lrrrlrrl'))
  add('')
  -- computesdk's composite score, their formula on each side's samples
  local pa, pb = published(a, by_mode), published(b, by_mode)
  add('### computesdk composite score')
  add('')
  add('Their formula on each side\'s measured samples: 5% of the successful times trimmed from each end, the median ' ..
    'of the rest, nearest-rank p95 and p99, (0.60 s(median) + 0.25 s(p95) + 0.15 s(p99)) × success rate with ' ..
    's(v) = max(0, 100 (1 − v / 10 s)), rounded to 0.01. A computesdk file\'s published score is shown beside it; ' ..
    'one that its own iterations do not give is called out.')
  add('')
  local srows, notes = {}, {}
  local function score(g) return g and computesdk.round2(stats.computesdk(g.ok, g.n).score) or nil end
  local function pub(p, side, list)
    local x = list[p]
    if not x then return '–' end
    if x.recomputed and math.abs(x.recomputed.score - x.score) > 0.011 then
      notes[#notes + 1] = string.format('%s %s: the file publishes %s, its iterations give %s.', side, p,
        h.num(x.score, 2), h.num(x.recomputed.score, 2))
      return h.num(x.score, 2) .. ' (!)'
    end
    return h.num(x.score, 2)
  end
  for _, p in ipairs(provs) do
    local sa, sb = score(ga[p]), score(gb[p])
    srows[#srows + 1] = { p, sa and h.num(sa, 2) or '–', sb and h.num(sb, 2) or '–',
      (sa and sb) and string.format('%+.2f', sb - sa) or '–', pub(p, 'A', pa), pub(p, 'B', pb) }
  end
  add(h.table({ 'provider', 'A score', 'B score', 'Δ', 'A published', 'B published' }, srows, 'lrrrrr'))
  add('')
  for _, n in ipairs(notes) do add('- ' .. n) end
  if #notes > 0 then add('') end
end

--- Compare loaded data a and b. Returns {markdown, regressions (count: tasks, slower phases and
--- providers, cells whose pass rate fell), by = {tasks, cells, phases, providers} (the names of
--- each kind), fixes, summary (the line saying so: at the top of the markdown and at its end)}.
function M.compare(a, b, opts)
  opts = opts or {}
  local seed = opts.seed or 1
  local h = report_render.context('-')
  local out = {}
  local by = { tasks = {}, cells = {}, phases = {}, providers = {} }
  local fixes = 0
  local function add(s) out[#out + 1] = s end
  add('# Run comparison')
  add('')
  local function names(d)
    local ids = {}
    for _, r in ipairs(d.runs) do ids[#ids + 1] = '`' .. r.id .. '`' end
    return #ids > 0 and table.concat(ids, ', ') or '(no runs)'
  end
  add('- **A** (baseline): ' .. names(a))
  add('- **B**: ' .. names(b))
  add('')
  -- what the runs were (solver, mode, dataset, selection): a difference there is called out
  local warn = identity.warning(identity.of(a.runs[1] and a.runs[1].started), identity.of(b.runs[1] and b.runs[1].started))
  if warn then
    add('> **Warning:** ' .. warn .. '.')
    add('')
  end
  local summary_at = #out + 1 -- the regressions, filled in at the end
  add('')
  add('')

  -- task runs
  if #a.trials > 0 or #b.trials > 0 then
    by.cells = cell_section(add, h, a.trials, b.trials, seed)
    local ta, oa = by_task(a.trials)
    local tb, ob = by_task(b.trials)
    local rows, both = {}, {}
    local all, seen = {}, {}
    for _, id in ipairs(oa) do if not seen[id] then seen[id] = true; all[#all + 1] = id end end
    for _, id in ipairs(ob) do if not seen[id] then seen[id] = true; all[#all + 1] = id end end
    table.sort(all)
    for _, id in ipairs(all) do
      local xa, xb = ta[id] and ok_outcome(ta[id]) or 'not run', tb[id] and ok_outcome(tb[id]) or 'not run'
      local change = ''
      if ta[id] and tb[id] then
        both[#both + 1] = id
        if xa == 'passed' and xb ~= 'passed' then change = '**regression**'; by.tasks[#by.tasks + 1] = id
        elseif xa ~= 'passed' and xb == 'passed' then change = 'fixed'; fixes = fixes + 1 end
      end
      if change ~= '' or xa ~= xb then rows[#rows + 1] = { h.code(id), xa, xb, change } end
    end
    -- every reward key a metric: its mean on each side (Harbor's reward.json keys)
    local function means(trials)
      local m = {}
      for _, t in ipairs(trials) do
        for k, v in pairs(type(t.rewards) == 'table' and t.rewards or {}) do
          if type(v) == 'number' then
            local x = m[k] or { n = 0, sum = 0 }
            x.n, x.sum = x.n + 1, x.sum + v
            m[k] = x
          end
        end
      end
      return m
    end
    local ma, mb = means(a.trials), means(b.trials)
    local mkeys, beyond = {}, false
    for k in pairs(ma) do mkeys[k] = true; if k ~= 'reward' then beyond = true end end
    for k in pairs(mb) do mkeys[k] = true; if k ~= 'reward' then beyond = true end end
    if beyond then
      local mnames = {}
      for k in pairs(mkeys) do mnames[#mnames + 1] = k end
      table.sort(mnames)
      local mrows = {}
      for _, k in ipairs(mnames) do
        local x, y = ma[k], mb[k]
        local xa_, xb_ = x and x.sum / x.n, y and y.sum / y.n
        mrows[#mrows + 1] = { h.code(k), x and string.format('%.3f (%d)', xa_, x.n) or '–', y and string.format('%.3f (%d)', xb_, y.n) or '–',
          (xa_ and xb_) and string.format('%+.3f', xb_ - xa_) or '–' }
      end
      add('## Metrics (reward keys)')
      add('')
      add('Every numeric key of the verifiers\' reward.json is a metric: its mean on each side (trials).')
      add('')
      add(h.table({ 'metric', 'A mean', 'B mean', 'Δ' }, mrows, 'lrrr'))
      add('')
    end
    add('## Outcomes')
    add('')
    add(string.format('%d task(s) in A, %d in B, %d in both: %d regression(s), %d fix(es).', #oa, #ob, #both, #by.tasks, fixes))
    add('')
    if #rows > 0 then
      add(h.table({ 'task', 'A', 'B', 'change' }, rows, 'llll'))
    else
      add('Every task has the same outcome in A and B.')
    end
    add('')
    add('## Phases')
    add('')
    add(string.format('Per phase, over the %d task(s) both ran: the median seconds on each side, and the median of ' ..
      'the per-task ratios B/A with a 95%% bootstrap CI over tasks (paired). Slower: the CI lies above %.2f ' ..
      'and the median moved by more than %s s; faster: below %.2f and the same.', #both, SLOWER,
      h.num(opts.min_seconds or 0.01, 3), FASTER))
    add('')
    local prow = {}
    for _, ph in ipairs(PHASES) do
      local va, vb, ratios = {}, {}, {}
      for _, id in ipairs(both) do
        local x, y = phase_seconds(ta[id], ph), phase_seconds(tb[id], ph)
        if x and y then
          va[#va + 1], vb[#vb + 1] = x, y
          if x > 0 then ratios[#ratios + 1] = y / x end
        end
      end
      if #va > 0 then
        local lo, hi
        if #ratios >= 3 then lo, hi = stats.bootstrap_ci(ratios, { seed = seed ~ stats.hash(ph) }) end
        local med = #ratios > 0 and stats.median(ratios) or nil
        local v = verdict(lo, hi)
        if v ~= 'too few to tell' and math.abs(stats.median(vb) - stats.median(va)) <= (opts.min_seconds or 0.01) then
          v = 'no clear change (under ' .. h.num(opts.min_seconds or 0.01, 3) .. ' s)'
        end
        if v == '**slower**' then by.phases[#by.phases + 1] = ph end
        prow[#prow + 1] = { ph, tostring(#va), h.num(stats.median(va), 3), h.num(stats.median(vb), 3),
          med and (h.num(med, 2) .. '×') or '–', lo and h.ci(lo, hi, function(x) return h.num(x, 2) end) or '–', v }
      end
    end
    if #prow > 0 then
      add(h.table({ 'phase', 'tasks', 'A median s', 'B median s', 'B/A', '95% CI', 'verdict' }, prow, 'lrrrrll'))
    else
      add('No phase timings on both sides.')
    end
    add('')
  end

  -- startup runs
  if #a.startup_trials > 0 or #b.startup_trials > 0 then
    startup_section(add, h, a, b, seed, by)
  end
  if #a.trials == 0 and #b.trials == 0 and #a.startup_trials == 0 and #b.startup_trials == 0 then
    add('Neither side has trials.')
    add('')
  end
  local line, regressions = regression_line(by)
  out[summary_at] = line
  add(line)
  return { markdown = table.concat(out, '\n') .. '\n', regressions = regressions, by = by, fixes = fixes, summary = line }
end

return M
