--- Regression detection with intervals: each new run of a lineage (a watch's runs, or a plan's)
--- against the trailing window of the runs before it, per provider, phase and primitive (the
--- median latency) and per provider (the error rate and the rate of lost sandboxes).
---
--- A run is a block (the run is the random effect, as in stats.blocks): the window's interval is
--- the block-level CI of its runs' medians (a percentile bootstrap over whole runs), the run's own
--- is its block-level CI when it ran repeated blocks, else the bootstrap CI of its median. A
--- change is called when the two intervals separate and the median moved by at least
--- `min_change` (relative), and only once it held for `hold` runs in a row against the same
--- baseline; the change is dated at its first run. After a change the window starts again at
--- that run: the new regime is the baseline from then on (a window shorter than `min_window`
--- calls nothing). A run that separates and is not followed by enough like it goes back into the
--- window. Rates: the window pools its runs' counts, both sides get Wilson intervals, and the rate
--- must move by at least `min_rate_change` (absolute).
---
--- Everything here is a pure function of the runs in their order (seeds from the series' name
--- and the window's place), so the store rebuilt from the logs gives the same changes as the
--- one updated run by run, and a verdict depends on counts and run indices, never on a clock.
local stats = require('cseng.lib.stats')
local errors = require('cseng.lib.errors')

local detect = {}

--- The method's version: a store judged with another version judges every run again.
detect.VERSION = '1'

detect.DEFAULTS = { window = 10, min_window = 5, hold = 3, min_change = 0.10, min_rate_change = 0.02, reps = 1000 }

--- The options with their defaults filled, checked (one line naming the bad one).
---@param o table|nil
---@return table
function detect.options(o)
  o = o or {}
  local out = {}
  for k, v in pairs(detect.DEFAULTS) do out[k] = o[k] == nil and v or o[k] end
  local function int(k, lo)
    local n = math.tointeger(out[k])
    if not n or n < lo then errors.raise(errors.EUSAGE, string.format('%s must be a whole number >= %d, got %s', k, lo, tostring(out[k]))) end
    out[k] = n
  end
  int('window', 2); int('min_window', 2); int('hold', 1); int('reps', 100)
  if out.min_window > out.window then
    errors.raise(errors.EUSAGE, string.format('min_window (%d) must not exceed window (%d)', out.min_window, out.window))
  end
  for _, k in ipairs({ 'min_change', 'min_rate_change' }) do
    local v = out[k]
    if type(v) ~= 'number' or v ~= v or v < 0 or v >= 10 then errors.raise(errors.EUSAGE, k .. ' must be a number in [0, 10)') end
  end
  return out
end

-- the window's interval: latency, the block-level CI of its runs' medians; rates, pooled Wilson
local function baseline(key, kind, pts, o)
  local first, last = pts[1].index, pts[#pts].index
  if kind == 'rate' then
    local k, n = 0, 0
    for _, p in ipairs(pts) do k, n = k + p.k, n + p.n end
    local lo, hi = stats.wilson(k, n)
    return { first = first, last = last, runs = #pts, value = n > 0 and k / n or 0, lo = lo or 0, hi = hi or 1, k = k, n = n }
  end
  local xs = {}
  for i, p in ipairs(pts) do xs[i] = p.value end
  local lo, hi = stats.bootstrap_ci(xs, { seed = stats.hash(key) ~ (first * 1000003 + last), reps = o.reps })
  return { first = first, last = last, runs = #pts, value = stats.median(xs), lo = lo, hi = hi }
end

-- 'up', 'down' or nil: does point p separate from baseline b by enough?
local function separates(kind, p, b, o)
  if not (p.lo and p.hi and b.lo and b.hi) then return nil end
  if kind == 'rate' then
    if p.lo > b.hi and p.value - b.value >= o.min_rate_change then return 'up' end
    if p.hi < b.lo and b.value - p.value >= o.min_rate_change then return 'down' end
    return nil
  end
  if b.value <= 0 then return nil end
  if p.lo > b.hi and (p.value - b.value) / b.value >= o.min_change then return 'up' end
  if p.hi < b.lo and (b.value - p.value) / b.value >= o.min_change then return 'down' end
  return nil
end

local function push(hist, p, w)
  hist[#hist + 1] = p
  while #hist > w do table.remove(hist, 1) end
end

local function point_of(p)
  return { index = p.index, run_id = p.run_id, file = p.file, value = p.value, lo = p.lo, hi = p.hi, k = p.k, n = p.n }
end

--- A fresh state of one series.
function detect.state() return { hist = {} } end

--- Evaluate one run of a series. key: the series' name (seeds); kind: 'latency' (p.value, p.lo,
--- p.hi: its median and interval) or 'rate' (p.k of p.n; its Wilson interval is computed here);
--- p.index: its place in the lineage (increasing). Returns the new state, the run's verdict
--- ('learning': the window is too short; 'ok'; 'candidate': it separates, the change is not held
--- yet; 'change'), the baseline it was judged against (nil while learning), and the change when
--- this run confirms one: {direction ('up'|'down'), first_index, confirmed_index, baseline,
--- points (the runs of the change), value (their median), ratio (value / baseline; rates: the
--- difference)}.
---@return table state, string verdict, table|nil baseline, table|nil change
function detect.step(key, kind, state, p, o)
  o = o or detect.options()
  p = point_of(p)
  if kind == 'rate' then
    p.value = p.n > 0 and p.k / p.n or 0
    p.lo, p.hi = stats.wilson(p.k, p.n)
  end
  local st = { hist = {}, cand = state.cand }
  for i, h in ipairs(state.hist or {}) do st.hist[i] = h end
  if st.cand then
    local c = st.cand
    local dir = separates(kind, p, c.baseline, o)
    if dir == c.direction then
      local pts = {}
      for i, x in ipairs(c.points) do pts[i] = x end
      pts[#pts + 1] = p
      if #pts >= o.hold then
        local vals = {}
        for i, x in ipairs(pts) do vals[i] = x.value end
        local v = stats.median(vals)
        local change = { direction = c.direction, first_index = pts[1].index, confirmed_index = p.index,
          baseline = c.baseline, points = pts, value = v,
          ratio = kind == 'rate' and (v - c.baseline.value) or (c.baseline.value > 0 and v / c.baseline.value or nil) }
        return { hist = pts }, 'change', c.baseline, change
      end
      st.cand = { direction = c.direction, baseline = c.baseline, points = pts }
      return st, 'candidate', c.baseline, nil
    end
    -- not held: the candidate's runs go back into the window, and this run is judged afresh
    for _, x in ipairs(c.points) do push(st.hist, x, o.window) end
    st.cand = nil
  end
  if #st.hist < o.min_window then
    push(st.hist, p, o.window)
    return st, 'learning', nil, nil
  end
  local b = baseline(key, kind, st.hist, o)
  local dir = separates(kind, p, b, o)
  if not dir then
    push(st.hist, p, o.window)
    return st, 'ok', b, nil
  end
  if o.hold <= 1 then
    local change = { direction = dir, first_index = p.index, confirmed_index = p.index, baseline = b, points = { p },
      value = p.value, ratio = kind == 'rate' and (p.value - b.value) or (b.value > 0 and p.value / b.value or nil) }
    return { hist = { p } }, 'change', b, change
  end
  st.cand = { direction = dir, baseline = b, points = { p } }
  return st, 'candidate', b, nil
end

--- Whether a change is a regression: latency and error rates going up.
function detect.regression(change) return change.direction == 'up' end

return detect
