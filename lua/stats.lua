--- Statistics for timings: quantiles, moments, seeded bootstrap confidence intervals.
--- Quantiles use linear interpolation between order statistics (Hyndman & Fan type 7, the
--- default of R, numpy and Excel's PERCENTILE.INC), so results can be checked independently.
local stats = {}

local function sorted_copy(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s
end

--- Quantile q in [0,1] of an already sorted array (type 7).
function stats.quantile_sorted(s, q)
  local n = #s
  if n == 0 then return nil end
  if n == 1 then return s[1] end
  local h = (n - 1) * q + 1
  local lo = math.floor(h)
  local hi = math.min(lo + 1, n)
  return s[lo] + (h - lo) * (s[hi] - s[lo])
end

function stats.quantile(xs, q) return stats.quantile_sorted(sorted_copy(xs), q) end
function stats.median(xs) return stats.quantile(xs, 0.5) end

function stats.mean(xs)
  local n = #xs
  if n == 0 then return nil end
  local sum = 0
  for _, x in ipairs(xs) do sum = sum + x end
  return sum / n
end

--- Sample standard deviation (n - 1), nil below two values.
function stats.stddev(xs)
  local n = #xs
  if n < 2 then return nil end
  local m = stats.mean(xs)
  local ss = 0
  for _, x in ipairs(xs) do ss = ss + (x - m) ^ 2 end
  return math.sqrt(ss / (n - 1))
end

--- Everything a report table shows for one metric.
function stats.summary(xs)
  local s = sorted_copy(xs)
  local q = function(p) return stats.quantile_sorted(s, p) end
  return {
    n = #s, min = s[1], max = s[#s], mean = stats.mean(s), stddev = stats.stddev(s),
    p50 = q(0.5), p90 = q(0.9), p95 = q(0.95), p99 = q(0.99),
  }
end

--- A small seeded generator (xorshift64*), so bootstrap results are reproducible across
--- machines and Lua builds (math.random's algorithm is not part of the language).
function stats.rng(seed)
  local state = math.tointeger(seed) or 88172645463325252
  if state == 0 then state = 88172645463325252 end
  local r = {}
  function r.next()
    state = state ~ (state << 13)
    state = state ~ (state >> 7)
    state = state ~ (state << 17)
    return state
  end
  --- Integer in [1, n].
  function r.int(n)
    local v = r.next() & 0x7fffffffffffffff
    return (v % n) + 1
  end
  --- Float in [0, 1).
  function r.float()
    return ((r.next() >> 11) & 0x1fffffffffffff) / 9007199254740992.0
  end
  return r
end

--- Fisher-Yates shuffle in place with a stats.rng.
function stats.shuffle(arr, rng)
  for i = #arr, 2, -1 do
    local j = rng.int(i)
    arr[i], arr[j] = arr[j], arr[i]
  end
  return arr
end

--- Percentile bootstrap CI of a statistic (default: the median). Returns lo, hi.
function stats.bootstrap_ci(xs, opts)
  opts = opts or {}
  local n = #xs
  if n == 0 then return nil, nil end
  local reps = opts.reps or 2000
  local level = opts.level or 0.95
  local stat = opts.stat or stats.median
  local rng = stats.rng(opts.seed or 1)
  local est = {}
  local sample = {}
  for r = 1, reps do
    for i = 1, n do sample[i] = xs[rng.int(n)] end
    est[r] = stat(sample)
  end
  table.sort(est)
  local a = (1 - level) / 2
  return stats.quantile_sorted(est, a), stats.quantile_sorted(est, 1 - a)
end

--- Ratio of medians a/b with a bootstrap CI (resampling both groups independently).
function stats.ratio_ci(a, b, opts)
  opts = opts or {}
  if #a == 0 or #b == 0 then return nil end
  local reps = opts.reps or 2000
  local level = opts.level or 0.95
  local rng = stats.rng(opts.seed or 1)
  local est, sa, sb = {}, {}, {}
  for r = 1, reps do
    for i = 1, #a do sa[i] = a[rng.int(#a)] end
    for i = 1, #b do sb[i] = b[rng.int(#b)] end
    local mb = stats.median(sb)
    est[r] = mb ~= 0 and stats.median(sa) / mb or math.huge
  end
  table.sort(est)
  local al = (1 - level) / 2
  local mb = stats.median(b)
  return {
    ratio = mb ~= 0 and stats.median(a) / mb or math.huge,
    lo = stats.quantile_sorted(est, al), hi = stats.quantile_sorted(est, 1 - al),
  }
end

return stats
