--- Run comparison by cell: the trials of each side grouped per (solver, model, provider, mode), the
--- keying of pass@k (lua/cseng/evals/passk.lua: passk.DIMS, the model from solver_usage.model), and
--- per cell the pass rate with its change B − A and a 95% CI of that change, pass@1..K when a cell has
--- repeated attempts, and the cost per trial and per pass when the trials carry a cost ledger
--- (`rec.cost`, lua/cseng/evals/ledger.lua). Data only: lua/reports/lib/changes.lua renders it.
---
--- The pass rate is passed / graded, graded being the trials whose outcome is not `error`
--- (infrastructure errors are not samples of the solver, as in pass@k; they are counted apart).
--- The CI of the difference of two independent proportions is Newcombe's hybrid score interval
--- (method 10 of Newcombe 1998) built from each side's Wilson interval: it stays informative at
--- 0% and 100%, where the normal approximation collapses.
local passk = require('cseng.evals.passk')
local stats = require('cseng.lib.stats')

local compare = {}

compare.DIMS = passk.DIMS

--- A trial's value of each dimension (as passk keys it: '-' when absent).
---@param t table a trial record
---@return string[] values, string key
function compare.key_of(t)
  local parts = {}
  for i, d in ipairs(passk.DIMS) do
    if d == 'model' then parts[i] = passk.model_of(t) or '-' else parts[i] = tostring(t[d] or '-') end
  end
  return parts, table.concat(parts, '\0')
end

--- The cells of one side: key -> {solver, model, provider, mode, trials, graded, passed, errors,
--- rate, lo, hi, cost_trials, cost_usd, per_trial_usd, per_pass_usd, pass_at, k_max}.
---@param trials table[]
---@param opts? {seed?: integer, reps?: integer}
---@return table<string, table> cells, string[] order (sorted)
function compare.cells(trials, opts)
  opts = opts or {}
  local cells, order = {}, {}
  for _, t in ipairs(trials) do
    local parts, key = compare.key_of(t)
    local c = cells[key]
    if not c then
      c = { key = key, trials = 0, graded = 0, passed = 0, errors = 0, cost_trials = 0, cost_usd = 0 }
      for i, d in ipairs(passk.DIMS) do c[d] = parts[i] end
      cells[key] = c
      order[#order + 1] = key
    end
    c.trials = c.trials + 1
    if t.outcome == 'error' then c.errors = c.errors + 1
    else
      c.graded = c.graded + 1
      if t.outcome == 'passed' then c.passed = c.passed + 1 end
    end
    local cost = type(t.cost) == 'table' and tonumber(t.cost.total_usd) or nil
    if cost then c.cost_trials, c.cost_usd = c.cost_trials + 1, c.cost_usd + cost end
  end
  for _, row in ipairs(passk.table(trials, { seed = opts.seed, reps = opts.reps })) do
    local key = table.concat({ row.solver, row.model, row.provider, row.mode }, '\0')
    if cells[key] then cells[key].pass_at, cells[key].k_max = row.pass_at, row.k_max end
  end
  for _, c in pairs(cells) do
    if c.graded > 0 then
      c.rate = c.passed / c.graded
      c.lo, c.hi = stats.wilson(c.passed, c.graded)
    end
    if c.cost_trials > 0 then
      c.per_trial_usd = c.cost_usd / c.cost_trials
      -- per pass: only when every trial of the cell has its cost (else the sum is a lower bound)
      if c.cost_trials == c.trials and c.passed > 0 then c.per_pass_usd = c.cost_usd / c.passed end
    end
  end
  table.sort(order)
  return cells, order
end

--- The change of a pass rate, B − A, with Newcombe's hybrid score 95% interval. nil when a side
--- has no graded trial.
---@return table|nil {delta, lo, hi}
function compare.delta(a, b)
  if not (a and b and a.rate and b.rate) then return nil end
  local d = b.rate - a.rate
  local lo = d - math.sqrt((b.rate - b.lo) ^ 2 + (a.hi - a.rate) ^ 2)
  local hi = d + math.sqrt((b.hi - b.rate) ^ 2 + (a.rate - a.lo) ^ 2)
  return { delta = d, lo = math.max(-1, lo), hi = math.min(1, hi) }
end

--- Compare two sides' trials cell by cell. Rows in key order: {key, solver, model, provider, mode,
--- a, b (the cells, nil on the side that lacks it), only ('A' | 'B' | nil), paired, delta, verdict};
--- the verdict is 'lower' when the CI of the change lies wholly below 0, 'higher' wholly above, else
--- 'no clear change' ('only in A'/'only in B' for a one-sided cell).
---
--- Runs of two solvers (gold against nop, one model against another) share no cell, yet they ran the
--- same tasks on the same provider and mode: when, for a provider and mode, each side has exactly one
--- cell and the two differ, they are compared as one row (paired = true) whose solver and model read
--- `A → B` where they differ. With a cell common to both sides (an agent-eval run with several
--- solvers), the one-sided cells stay one-sided: which of them to pair would be a guess.
---@param a_trials table[]
---@param b_trials table[]
---@param opts? {seed?: integer, reps?: integer}
---@return table[] rows, integer k_max (the largest k both sides of some cell have)
function compare.by_cell(a_trials, b_trials, opts)
  local ca, oa = compare.cells(a_trials, opts)
  local cb, ob = compare.cells(b_trials, opts)
  local keys, seen = {}, {}
  for _, list in ipairs({ oa, ob }) do
    for _, k in ipairs(list) do if not seen[k] then seen[k] = true; keys[#keys + 1] = k end end
  end
  table.sort(keys)
  -- per provider and mode: the keys of each side's cells (pairing needs one on each side, none shared)
  local where = {}
  for _, k in ipairs(keys) do
    local c = ca[k] or cb[k]
    local pm = c.provider .. '\0' .. c.mode
    local w = where[pm] or { a = {}, b = {}, both = 0 }
    where[pm] = w
    if ca[k] and cb[k] then w.both = w.both + 1
    elseif ca[k] then w.a[#w.a + 1] = k
    else w.b[#w.b + 1] = k end
  end
  local paired_with = {}
  for _, w in pairs(where) do
    if w.both == 0 and #w.a == 1 and #w.b == 1 then paired_with[w.a[1]], paired_with[w.b[1]] = w.b[1], true end
  end
  local rows, kmax = {}, 0
  for _, k in ipairs(keys) do
    -- the B side of a pair is shown in its A cell's row
    if paired_with[k] ~= true then
      local a, b = ca[k], cb[k] or (paired_with[k] and cb[paired_with[k]])
      local any = a or b
      local row = { key = k, a = a, b = b }
      for _, d in ipairs(passk.DIMS) do row[d] = any[d] end
      if paired_with[k] then
        row.paired, row.key = true, k .. '\0' .. paired_with[k]
        for _, d in ipairs({ 'solver', 'model' }) do
          if a[d] ~= b[d] then row[d] = a[d] .. ' → ' .. b[d] end
        end
      end
      if not a or not b then
        row.only = a and 'A' or 'B'
        row.verdict = 'only in ' .. row.only
      else
        row.delta = compare.delta(a, b)
        if not row.delta then row.verdict = 'no graded trials'
        elseif row.delta.hi < 0 then row.verdict = 'lower'
        elseif row.delta.lo > 0 then row.verdict = 'higher'
        else row.verdict = 'no clear change' end
        kmax = math.max(kmax, math.min(a.k_max or 0, b.k_max or 0))
      end
      rows[#rows + 1] = row
    end
  end
  return rows, kmax
end

return compare
