--- Statistics for timings: quantiles, moments, seeded bootstrap confidence intervals.
--- Quantiles use linear interpolation between order statistics (Hyndman & Fan type 7, the
--- default of R, numpy and Excel's PERCENTILE.INC, and Python's statistics.quantiles with
--- method='inclusive'), so results can be checked independently.
---
--- Every random choice goes through stats.rng (splitmix64-seeded xorshift64*), never
--- math.random, so a seed gives the same shuffles and the same bootstrap intervals on every
--- machine and Lua build.
local errors = require('cseng.lib.errors')

local stats = {}

local function sorted_copy(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s
end

--- Quantile q in [0,1] of an already sorted array (type 7).
---@param s number[] sorted ascending
---@param q number
---@return number|nil
function stats.quantile_sorted(s, q)
  local n = #s
  if n == 0 then return nil end
  if n == 1 then return s[1] end
  local h = (n - 1) * q + 1
  local lo = math.floor(h)
  local hi = math.min(lo + 1, n)
  return s[lo] + (h - lo) * (s[hi] - s[lo])
end

--- Quantile q in [0,1] (type 7); nil for an empty array.
---@param xs number[]
---@param q number
---@return number|nil
function stats.quantile(xs, q) return stats.quantile_sorted(sorted_copy(xs), q) end

---@param xs number[]
---@return number|nil
function stats.median(xs) return stats.quantile(xs, 0.5) end

---@param xs number[]
---@return number|nil
function stats.mean(xs)
  local n = #xs
  if n == 0 then return nil end
  local sum = 0
  for _, x in ipairs(xs) do sum = sum + x end
  return sum / n
end

--- Sample standard deviation (n - 1), nil below two values.
---@param xs number[]
---@return number|nil
function stats.stddev(xs)
  local n = #xs
  if n < 2 then return nil end
  local m = stats.mean(xs)
  local ss = 0
  for _, x in ipairs(xs) do ss = ss + (x - m) ^ 2 end
  return math.sqrt(ss / (n - 1))
end

---@class stats.summary
---@field n integer
---@field min number|nil
---@field max number|nil
---@field mean number|nil
---@field stddev number|nil
---@field p50 number|nil
---@field p90 number|nil
---@field p95 number|nil
---@field p99 number|nil

--- Everything a report table shows for one metric.
---@param xs number[]
---@return stats.summary
function stats.summary(xs)
  local s = sorted_copy(xs)
  local q = function(p) return stats.quantile_sorted(s, p) end
  return {
    n = #s, min = s[1], max = s[#s], mean = stats.mean(s), stddev = stats.stddev(s),
    p50 = q(0.5), p90 = q(0.9), p95 = q(0.95), p99 = q(0.99),
  }
end

-- ---- the seeded generator -------------------------------------------------------

-- splitmix64 (Steele, Lea & Flood; Vigna's reference constants): spreads any seed, including
-- small or consecutive ones, over the whole 64-bit state, so seeds 1 and 2 give unrelated
-- streams. Lua's integers wrap on overflow and >> is a logical shift, as in the C reference.
local function splitmix64(x)
  x = x + 0x9E3779B97F4A7C15
  x = (x ~ (x >> 30)) * 0xBF58476D1CE4E5B9
  x = (x ~ (x >> 27)) * 0x94D049BB133111EB
  return x ~ (x >> 31)
end

---@class stats.rng
---@field next fun(): integer  the next 64-bit output (any integer, sign bit included)
---@field int fun(n: integer): integer  uniform in [1, n], without modulo bias
---@field float fun(): number  uniform in [0, 1), 53 bits
---@field fill fun(n: integer, k: integer, out: integer[]): integer[]  k draws of int(n) into out

--- A seeded generator: xorshift64* (Vigna 2014: shifts 12, 25, 27, multiplier
--- 0x2545F4914F6CDD1D) over a splitmix64-scrambled seed. Reproducible across machines.
---@param seed? integer default 88172645463325252
---@return stats.rng
function stats.rng(seed)
  local state = splitmix64(math.tointeger(seed) or 88172645463325252)
  if state == 0 then state = 88172645463325252 end -- xorshift's one fixed point
  local r = {}
  function r.next()
    state = state ~ (state >> 12)
    state = state ~ (state << 25)
    state = state ~ (state >> 27)
    return state * 0x2545F4914F6CDD1D
  end
  local last_n, last_m, limit = nil, nil, nil
  function r.int(n)
    if n ~= last_n then
      local m = math.tointeger(n)
      if not m or m < 1 then errors.raise(errors.EINVAL, 'stats.rng: int(n) needs an integer n >= 1') end
      -- accept 63-bit values up to the last whole block of n, so every residue is equally likely
      last_n, last_m, limit = n, m, math.maxinteger - (math.maxinteger % m + 1) % m -- (2^63 mod n)
    end
    while true do
      local v = r.next() >> 1
      if v <= limit then return v % last_m + 1 end
    end
  end
  function r.float()
    return (r.next() >> 11) * (1.0 / 9007199254740992.0)
  end
  --- out[1..k] = k successive r.int(n) (the same numbers, without a call per draw).
  function r.fill(n, k, out)
    local m = math.tointeger(n)
    if not m or m < 1 then errors.raise(errors.EINVAL, 'stats.rng: fill(n) needs an integer n >= 1') end
    local lim = math.maxinteger - (math.maxinteger % m + 1) % m
    local x = state
    local i = 1
    while i <= k do
      x = x ~ (x >> 12)
      x = x ~ (x << 25)
      x = x ~ (x >> 27)
      local v = (x * 0x2545F4914F6CDD1D) >> 1
      if v <= lim then out[i] = v % m + 1; i = i + 1 end
    end
    state = x
    return out
  end
  return r
end

--- Fisher-Yates shuffle in place with a stats.rng: for i = n..2, swap arr[i] with
--- arr[rng.int(i)]. Returns arr.
---@generic T
---@param arr T[]
---@param rng stats.rng
---@return T[]
function stats.shuffle(arr, rng)
  for i = #arr, 2, -1 do
    local j = rng.int(i)
    arr[i], arr[j] = arr[j], arr[i]
  end
  return arr
end

-- ---- bootstrap --------------------------------------------------------------------

-- A resampler for type-7 quantiles that never sorts a resample: the data is sorted once, each
-- draw of an index counts one more copy of that value's rank, and the two order statistics
-- the quantile needs are found by walking the counts. Draws are xs[rng.int(n)] for i = 1..n,
-- exactly as the generic path below takes them, so both give identical results (the spec
-- checks it); this one costs O(n) per replicate instead of O(n log n) plus a copy.
local function quantile_resampler(xs, q)
  local n = #xs
  local idx = {}
  for i = 1, n do idx[i] = i end
  table.sort(idx, function(a, b) if xs[a] ~= xs[b] then return xs[a] < xs[b] end return a < b end)
  local sorted, rank = {}, {}
  for r, i in ipairs(idx) do sorted[r] = xs[i]; rank[i] = r end
  local h = (n - 1) * q + 1
  local lo = math.floor(h)
  local frac = h - lo
  local counts, draws = {}, {}
  return function(rng)
    for r = 1, n do counts[r] = 0 end
    rng.fill(n, n, draws)
    for i = 1, n do
      local r = rank[draws[i]]
      counts[r] = counts[r] + 1
    end
    if n == 1 then return sorted[1] end
    local cum, r = 0, 0
    repeat r = r + 1; cum = cum + counts[r] until cum >= lo
    local a = sorted[r]
    if lo >= n then return a + frac * (a - a) end
    while cum < lo + 1 do r = r + 1; cum = cum + counts[r] end
    local b = sorted[r]
    return a + frac * (b - a)
  end
end

local function generic_resampler(xs, stat)
  local n = #xs
  local sample = {}
  return function(rng)
    for i = 1, n do sample[i] = xs[rng.int(n)] end
    return stat(sample)
  end
end

local function resampler(xs, opts)
  if opts.stat then return generic_resampler(xs, opts.stat) end
  return quantile_resampler(xs, opts.q or 0.5)
end

---@class stats.bootstrap_opts
---@field reps? integer replicates (default 2000)
---@field level? number confidence level (default 0.95)
---@field seed? integer rng seed (default 1)
---@field q? number the statistic is the type-7 quantile q (default 0.5, the median)
---@field stat? fun(sample: number[]): number any other statistic (slower: called per replicate)

--- Percentile bootstrap CI of a statistic (default: the median). Returns lo, hi.
--- Replicate r resamples n values with replacement (xs[rng.int(n)], i = 1..n); the interval is
--- the type-7 (1-level)/2 and (1+level)/2 quantiles of the sorted replicate statistics.
---@param xs number[]
---@param opts? stats.bootstrap_opts
---@return number|nil lo, number|nil hi
function stats.bootstrap_ci(xs, opts)
  opts = opts or {}
  local n = #xs
  if n == 0 then return nil, nil end
  local reps = opts.reps or 2000
  local level = opts.level or 0.95
  if not opts.stat then -- a quantile: the same resampling in C (engine/lbootstrap.c), about 40x faster
    return require('cseng.bootstrap').quantile_ci(xs, opts.q or 0.5, reps, math.tointeger(opts.seed or 1), level)
  end
  local rng = stats.rng(opts.seed or 1)
  local draw = resampler(xs, opts)
  local est = {}
  for r = 1, reps do est[r] = draw(rng) end
  table.sort(est)
  local a = (1 - level) / 2
  return stats.quantile_sorted(est, a), stats.quantile_sorted(est, 1 - a)
end

---@class stats.ratio
---@field ratio number the point estimate, stat(a) / stat(b)
---@field lo number
---@field hi number

--- Ratio of medians a/b with a percentile bootstrap CI (both groups resampled independently,
--- a's draws then b's in each replicate, from one stats.rng). opts as stats.bootstrap_ci.
---@param a number[]
---@param b number[]
---@param opts? stats.bootstrap_opts
---@return stats.ratio|nil
function stats.ratio_ci(a, b, opts)
  opts = opts or {}
  if #a == 0 or #b == 0 then return nil end
  local reps = opts.reps or 2000
  local level = opts.level or 0.95
  local rng = stats.rng(opts.seed or 1)
  local da, db = resampler(a, opts), resampler(b, opts)
  local est = {}
  for r = 1, reps do
    local ma = da(rng)
    local mb = db(rng)
    est[r] = mb ~= 0 and ma / mb or math.huge
  end
  table.sort(est)
  local al = (1 - level) / 2
  local point = opts.stat or function(xs) return stats.quantile(xs, opts.q or 0.5) end
  local mb = point(b)
  return {
    ratio = mb ~= 0 and point(a) / mb or math.huge,
    lo = stats.quantile_sorted(est, al), hi = stats.quantile_sorted(est, 1 - al),
  }
end

-- ---- proportions and distributions ---------------------------------------------------

--- Wilson score interval of a proportion k/n (z = 1.959964 for 95%). Returns lo, hi in [0, 1];
--- nil when n is 0. Unlike the normal approximation it stays inside [0, 1] and is informative at
--- 0 or n successes (300 of 300 gives [0.9874, 1]).
---@param k integer successes
---@param n integer trials
---@param z? number
---@return number|nil lo, number|nil hi
function stats.wilson(k, n, z)
  if n == 0 then return nil, nil end
  z = z or 1.959963984540054
  local p = k / n
  local z2 = z * z
  local denom = 1 + z2 / n
  local centre = (p + z2 / (2 * n)) / denom
  local half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
  return math.max(0, centre - half), math.min(1, centre + half)
end

--- The empirical CDF as step points: xs sorted, ps[i] = i / n (the fraction <= xs[i]).
---@param xs number[]
---@return number[] xs, number[] ps
function stats.ecdf(xs)
  local s = sorted_copy(xs)
  local ps = {}
  for i = 1, #s do ps[i] = i / #s end
  return s, ps
end

---@class stats.description: stats.summary
---@field ci_lo number|nil lower end of the bootstrap CI of the median
---@field ci_hi number|nil upper end
---@field level number
---@field reps integer

--- stats.summary plus the bootstrap CI of the median (opts as stats.bootstrap_ci).
---@param xs number[]
---@param opts? stats.bootstrap_opts
---@return stats.description
function stats.describe(xs, opts)
  opts = opts or {}
  local d = stats.summary(xs)
  d.ci_lo, d.ci_hi = stats.bootstrap_ci(xs, opts)
  d.level = opts.level or 0.95
  d.reps = opts.reps or 2000
  return d
end

--- A 64-bit FNV-1a hash of a string: derives independent, stable seeds per (run seed, name),
--- e.g. stats.rng(seed ~ stats.hash('ready_ms/local')).
---@param s string
---@return integer
function stats.hash(s)
  local h = -3750763034362895579 -- 0xcbf29ce484222325
  for i = 1, #s do
    h = (h ~ s:byte(i)) * 0x100000001b3
  end
  return h
end

-- ---- runs as a random effect: repeated blocks --------------------------------------------

---@class stats.blocks
---@field medians number[] each block's median, in block order
---@field within {lo:number, hi:number}[] each block's own CI of its median: what that run alone would report
---@field median number the median of the block medians (the point estimate)
---@field lo number|nil lower end of the CI of that median, bootstrapping whole blocks
---@field hi number|nil
---@field spread number max - min of the block medians (the between-block spread)
---@field mad number median absolute deviation of the block medians
---@field n_blocks integer
---@field outside integer blocks whose own CI excludes the block-level median
---@field disagree boolean some block's own CI excludes the block-level median: one run's CI overstates how certain its number is

--- The median across repeated blocks of one measurement, with a CI that treats the block (a run,
--- an hour, a machine state) as a random effect: the point is the median of the block medians and
--- the CI a percentile bootstrap over whole blocks (each replicate draws k block medians with
--- replacement and takes their median). Each block's own (within-run) CI is computed too: when one
--- of them excludes the block-level median, the runs disagree by more than a single run's CI admits,
--- and the report says so. opts as stats.bootstrap_ci. Empty blocks are skipped; fewer than two
--- blocks give no block-level CI.
---@param blocks number[][]
---@param opts? stats.bootstrap_opts
---@return stats.blocks|nil
function stats.blocks(blocks, opts)
  opts = opts or {}
  local medians, within = {}, {}
  for _, b in ipairs(blocks) do
    if #b > 0 then
      medians[#medians + 1] = stats.median(b)
      local lo, hi = stats.bootstrap_ci(b, opts)
      within[#within + 1] = { lo = lo, hi = hi }
    end
  end
  if #medians == 0 then return nil end
  local r = { medians = medians, within = within, n_blocks = #medians, median = stats.median(medians) }
  local s = sorted_copy(medians)
  r.spread = s[#s] - s[1]
  local dev = {}
  for i, m in ipairs(medians) do dev[i] = math.abs(m - r.median) end
  r.mad = stats.median(dev)
  if #medians >= 2 then r.lo, r.hi = stats.bootstrap_ci(medians, opts) end
  r.outside = 0
  if r.lo then
    for _, w in ipairs(within) do
      if r.median < w.lo or r.median > w.hi then r.outside = r.outside + 1 end
    end
  end
  r.disagree = r.outside > 0
  return r
end

--- Whether two intervals overlap (a comparison whose block-level CIs overlap is "not distinguishable").
---@return boolean
function stats.overlap(alo, ahi, blo, bhi)
  if not (alo and ahi and blo and bhi) then return true end
  return alo <= bhi and blo <= ahi
end

-- ---- computesdk-compatible summary --------------------------------------------------------

--- Nearest-rank percentile (p in 0..100) of sorted values: sorted[ceil(p/100 n)], at least the first.
---@param sorted number[]
---@param p number
---@return number|nil
function stats.nearest_rank(sorted, p)
  local n = #sorted
  if n == 0 then return nil end
  local idx = math.max(1, math.ceil(p / 100 * n))
  return sorted[math.min(idx, n)]
end

--- Sorted copy of xs with floor(n * frac) values trimmed from each end (none when that would
--- leave nothing).
---@param xs number[]
---@param frac number e.g. 0.05
---@return number[]
function stats.trimmed(xs, frac)
  local s = sorted_copy(xs)
  local k = math.floor(#s * frac)
  if k == 0 or #s - 2 * k <= 0 then return s end
  local out = {}
  for i = k + 1, #s - k do out[#out + 1] = s[i] end
  return out
end

---@class stats.computesdk
---@field median number|nil ms, of the trimmed successful samples
---@field p95 number|nil nearest rank
---@field p99 number|nil
---@field success_rate number successes / attempts
---@field score number composite 0..100
---@field n integer successful samples
---@field attempts integer
---@field trimmed integer samples trimmed from each end

--- The summary computesdk's benchmark publishes, computed the same way, so cseng's numbers can be
--- set beside theirs: 5% of the successful times trimmed from each end (floor), the median of the
--- rest (mean of the two middle values when even), nearest-rank p95 and p99, and the composite
--- score: (0.60 s(median) + 0.25 s(p95) + 0.15 s(p99)) x success rate, where
--- s(v) = max(0, 100 (1 - v / 10 000 ms)).
---@param ok_ms number[] times of the successful samples, milliseconds
---@param attempts integer every sample attempted (successes + failures)
---@return stats.computesdk
function stats.computesdk(ok_ms, attempts)
  local t = stats.trimmed(ok_ms, 0.05)
  local r = { n = #ok_ms, attempts = attempts, trimmed = (#ok_ms - #t) // 2 }
  r.success_rate = attempts > 0 and #ok_ms / attempts or 0
  if #t == 0 then r.score = 0 return r end
  local mid = #t // 2
  r.median = (#t % 2 == 0) and (t[mid] + t[mid + 1]) / 2 or t[mid + 1]
  r.p95, r.p99 = stats.nearest_rank(t, 95), stats.nearest_rank(t, 99)
  local function s(v) return math.max(0, 100 * (1 - v / 10000)) end
  r.score = (0.60 * s(r.median) + 0.25 * s(r.p95) + 0.15 * s(r.p99)) * r.success_rate
  return r
end

return stats
