--- pass@k from repeated attempts (`--attempts K`): the unbiased estimator of Chen et al. (2021),
--- pass@k = 1 - C(n-c, k) / C(n, k) for a task with n graded attempts of which c passed, averaged
--- over the tasks that have n >= k, with a 95% percentile-bootstrap CI over tasks (seeded, so a
--- report is reproducible). Attempts whose outcome is `error` (infrastructure) are not samples of
--- the solver: they are counted apart and left out of n.
local stats = require('cseng.lib.stats')

local passk = {}

--- The dimensions a pass@k row is keyed by.
passk.DIMS = { 'solver', 'model', 'provider', 'mode' }

--- The unbiased pass@k of one task: 1 - prod_{i=n-c+1..n} (1 - k/i) (numerically stable form).
---@param n integer attempts graded
---@param c integer attempts passed
---@param k integer
---@return number|nil nil when n < k
function passk.estimate(n, c, k)
  if k < 1 or n < k then return nil end
  if n - c < k then return 1.0 end
  local prod = 1.0
  for i = n - c + 1, n do prod = prod * (1 - k / i) end
  return 1 - prod
end

--- A trial's model: the solver's (solver_usage.model), else nil.
function passk.model_of(t)
  local u = t.solver_usage
  return type(u) == 'table' and type(u.model) == 'string' and u.model or nil
end

local function dim_value(t, d)
  if d == 'model' then return passk.model_of(t) or '-' end
  return tostring(t[d] or '-')
end

--- pass@1..K rows, one per solver x model x provider x mode.
---@param trials table[] trial records
---@param opts? {kmax?: integer, reps?: integer, seed?: integer}
---@return table[] rows {solver, model, provider, mode, tasks, attempts, errors, k_max, pass_at = {[k] = {value, lo, hi, tasks}}}
function passk.table(trials, opts)
  opts = opts or {}
  local groups, order = {}, {}
  for _, t in ipairs(trials) do
    local parts = {}
    for i, d in ipairs(passk.DIMS) do parts[i] = dim_value(t, d) end
    local key = table.concat(parts, '\0')
    local g = groups[key]
    if not g then
      g = { key = key, tasks = {}, task_order = {}, errors = 0, attempts = 0 }
      for i, d in ipairs(passk.DIMS) do g[d] = parts[i] end
      groups[key] = g
      order[#order + 1] = g
    end
    if t.outcome == 'error' then g.errors = g.errors + 1
    else
      local s = g.tasks[t.task_id]
      if not s then s = { n = 0, c = 0 }; g.tasks[t.task_id] = s; g.task_order[#g.task_order + 1] = t.task_id end
      s.n = s.n + 1
      if t.outcome == 'passed' then s.c = s.c + 1 end
      g.attempts = g.attempts + 1
    end
  end
  local rows = {}
  for _, g in ipairs(order) do
    local kmax = 0
    for _, s in pairs(g.tasks) do kmax = math.max(kmax, s.n) end
    if opts.kmax then kmax = math.min(kmax, opts.kmax) end
    local row = { solver = g.solver, model = g.model, provider = g.provider, mode = g.mode,
      tasks = #g.task_order, attempts = g.attempts, errors = g.errors, k_max = kmax, pass_at = {} }
    for k = 1, kmax do
      local xs = {}
      for _, id in ipairs(g.task_order) do
        local s = g.tasks[id]
        local v = passk.estimate(s.n, s.c, k)
        if v then xs[#xs + 1] = v end
      end
      if #xs > 0 then
        local lo, hi = stats.bootstrap_ci(xs, { stat = stats.mean, reps = opts.reps or 2000, seed = opts.seed or 1 })
        row.pass_at[k] = { value = stats.mean(xs), lo = lo, hi = hi, tasks = #xs }
      end
    end
    rows[#rows + 1] = row
  end
  table.sort(rows, function(a, b)
    for _, d in ipairs(passk.DIMS) do if a[d] ~= b[d] then return a[d] < b[d] end end
    return false
  end)
  return rows
end

--- The rows as JSON-friendly data (pass_at keyed "1".."K": a JSON object).
function passk.summary(trials, opts)
  local rows = passk.table(trials, opts)
  for _, r in ipairs(rows) do
    local m = {}
    for k, v in pairs(r.pass_at) do m[tostring(k)] = v end
    r.pass_at = m
  end
  return rows
end

return passk
