-- lua/cseng/lib/stats.lua against values computed independently: by hand (the arithmetic is in the
-- comments), by Python's standard library (statistics.quantiles with method='inclusive' is
-- Hyndman & Fan type 7), and by a Python re-implementation of the generator and the bootstrap
-- with arbitrary-precision integers (PY below), run at test time.
local stats = require('cseng.lib.stats')
local proc = require('cseng.proc')
local cjson = require('cjson')

local function close(a, b, tol)
  tol = tol or 1e-9
  return math.abs(a - b) <= tol * math.max(1, math.abs(a), math.abs(b))
end

local function assert_close(expected, got, tol, what)
  assert(got ~= nil, (what or 'value') .. ': got nil')
  assert(close(expected, got, tol), string.format('%s: expected %.17g, got %.17g', what or 'value', expected, got))
end

-- The reference: the same algorithms written from their papers in Python, big integers masked
-- to 64 bits (no shared code with stats.lua). Reads a JSON job on stdin, writes JSON.
local PY = [==[
import json, statistics, sys
M = (1 << 64) - 1
def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
class Rng:
    def __init__(s, seed): s.s = splitmix(seed & M) or 88172645463325252
    def next(s):
        x = s.s; x ^= x >> 12; x ^= (x << 25) & M; x ^= x >> 27; s.s = x
        return (x * 0x2545F4914F6CDD1D) & M
    def int(s, n):
        lim = (1 << 63) - ((1 << 63) % n)
        while True:
            v = s.next() >> 1
            if v < lim: return v % n + 1
def signed(v): return v - (1 << 64) if v >= 1 << 63 else v
def q7(s, q):
    n = len(s)
    if n == 1: return s[0]
    h = (n - 1) * q + 1; lo = int(h); hi = min(lo + 1, n)
    return s[lo - 1] + (h - lo) * (s[hi - 1] - s[lo - 1])
def boot(xs, seed, reps, q=0.5, level=0.95):
    r = Rng(seed); est = []
    for _ in range(reps):
        est.append(q7(sorted(xs[r.int(len(xs)) - 1] for _ in xs), q))
    est.sort(); a = (1 - level) / 2
    return [q7(est, a), q7(est, 1 - a)]
def ratio(a, b, seed, reps, level=0.95):
    r = Rng(seed); est = []
    for _ in range(reps):
        ma = q7(sorted(a[r.int(len(a)) - 1] for _ in a), .5)
        mb = q7(sorted(b[r.int(len(b)) - 1] for _ in b), .5)
        est.append(ma / mb)
    est.sort(); al = (1 - level) / 2
    return [q7(sorted(a), .5) / q7(sorted(b), .5), q7(est, al), q7(est, 1 - al)]
def shuffle(arr, r):
    for i in range(len(arr), 1, -1):
        j = r.int(i); arr[i - 1], arr[j - 1] = arr[j - 1], arr[i - 1]
    return arr
job = json.load(sys.stdin); out = {}
r = Rng(job['seed']); out['next'] = [str(signed(r.next())) for _ in range(5)]
r = Rng(job['seed']); out['ints'] = [r.int(n) for n in job['ns']]
r = Rng(job['seed']); out['shuffles'] = [shuffle(list(job['names']), r) for _ in range(job['rounds'])]
out['quantiles'] = statistics.quantiles(job['data'], n=100, method='inclusive')
out['boot'] = [boot(job['data'], job['seed'], job['reps'], q) for q in (0.5, 0.9)]
out['ratio'] = ratio(job['data'], job['other'], job['seed'], job['reps'])
print(json.dumps(out))
]==]

local function python(job)
  local r = assert(proc.run { argv = { 'python3', '-c', PY }, stdin = cjson.encode(job), timeout = 120 })
  assert(r.code == 0, 'python3 failed: ' .. r.stderr)
  return cjson.decode(r.stdout)
end

describe('stats: quantiles (type 7)', function()
  -- sorted {15, 20, 35, 40, 50}: position h = (n-1)q + 1, value x[floor h] + frac(h) (x[floor h + 1] - x[floor h])
  local xs = { 50, 15, 40, 20, 35 }
  it('matches hand-computed percentiles', function()
    assert.equal(15, stats.quantile(xs, 0))
    assert.equal(20, stats.quantile(xs, 0.25))          -- h = 2
    assert.equal(29, stats.quantile(xs, 0.40))          -- h = 2.6: 20 + 0.6 * 15
    assert.equal(35, stats.median(xs))                  -- h = 3
    assert_close(46, stats.quantile(xs, 0.90))          -- h = 4.6: 40 + 0.6 * 10
    assert_close(48, stats.quantile(xs, 0.95))          -- h = 4.8
    assert_close(49.6, stats.quantile(xs, 0.99))        -- h = 4.96
    assert.equal(50, stats.quantile(xs, 1))
    assert.same({ 50, 15, 40, 20, 35 }, xs, 'the input is not reordered')
  end)

  it('handles even counts, ties, one value and none', function()
    assert.equal(2.5, stats.median({ 4, 1, 3, 2 }))     -- h = 2.5
    assert_close(3.7, stats.quantile({ 1, 2, 3, 4 }, 0.9)) -- h = 3.7
    assert_close(7.2, stats.quantile({ 3, 1, 2, 2, 10 }, 0.9)) -- sorted 1 2 2 3 10, h = 4.6: 3 + 0.6 * 7
    assert.equal(2, stats.median({ 3, 1, 2, 2, 10 }))
    assert.equal(7, stats.quantile({ 7 }, 0.99))
    assert.is_nil(stats.quantile({}, 0.5))
  end)

  it('summarizes: n, min, max, mean, sample stddev, p50..p99', function()
    local s = stats.summary(xs)
    assert.equal(5, s.n)
    assert.equal(15, s.min)
    assert.equal(50, s.max)
    assert.equal(32, s.mean)                            -- 160 / 5
    -- deviations -17 -12 3 8 18, squares sum 830, / (n-1) = 207.5
    assert_close(math.sqrt(207.5), s.stddev)
    assert_close(14.404860290887934, s.stddev)          -- Python: statistics.stdev
    assert.equal(35, s.p50)
    assert_close(46, s.p90)
    assert_close(48, s.p95)
    assert_close(49.6, s.p99)
    assert.is_nil(stats.stddev({ 1 }))
    assert.is_nil(stats.mean({}))
  end)
end)

describe('stats.rng (splitmix64-seeded xorshift64*)', function()
  it('gives the reference outputs for fixed seeds', function()
    -- from the Python reference above (same outputs as Vigna's C with uint64_t, read as signed)
    local r = stats.rng(20261001)
    assert.equal(-8604881200625132869, r.next())
    assert.equal(8341067331563338367, r.next())
    assert.equal(-4790944488959778530, r.next())
    r = stats.rng(1)
    assert.equal(5424204624148110235, r.next())
    assert.equal(-2890764224077349132, r.next())
  end)

  it('is reproducible, and different seeds differ from the first draw', function()
    local a, b, c = stats.rng(7), stats.rng(7), stats.rng(8)
    local differ = false
    for _ = 1, 100 do
      local x = a.next()
      assert.equal(x, b.next())
      if x ~= c.next() then differ = true end
    end
    assert.is_true(differ)
    assert.are_not.equal(stats.rng(1).int(1000000), stats.rng(2).int(1000000))
  end)

  it('draws integers in [1, n] about uniformly and floats in [0, 1)', function()
    local r = stats.rng(3)
    local counts = { 0, 0, 0, 0, 0, 0 }
    for _ = 1, 60000 do
      local v = r.int(6)
      assert(v >= 1 and v <= 6 and math.type(v) == 'integer')
      counts[v] = counts[v] + 1
    end
    -- chi-square with 5 degrees of freedom; 20.5 is the 0.999 quantile
    local chi = 0
    for i = 1, 6 do chi = chi + (counts[i] - 10000) ^ 2 / 10000 end
    assert.is_true(chi < 20.5, 'chi-square ' .. chi)
    for _ = 1, 1000 do
      local f = r.float()
      assert(f >= 0 and f < 1)
    end
    assert.equal(1, r.int(1))
    assert.has_error(function() r.int(0) end)
    -- fill(n, k) gives exactly k successive int(n), and leaves the stream where they would
    local a, b = stats.rng(77), stats.rng(77)
    local buf = a.fill(1000, 50, {})
    for i = 1, 50 do assert.equal(b.int(1000), buf[i]) end
    assert.equal(b.next(), a.next())
  end)

  it('shuffles in place, keeping the elements', function()
    local arr = { 'a', 'b', 'c', 'd', 'e' }
    local same = stats.shuffle(arr, stats.rng(11))
    assert.equal(arr, same)
    local sorted = { table.unpack(arr) }
    table.sort(sorted)
    assert.same({ 'a', 'b', 'c', 'd', 'e' }, sorted)
  end)
end)

describe('stats: bootstrap', function()
  local xs = { 12.5, 7, 30, 18, 9.25, 41, 15, 22, 11, 27 }

  it('gives the recorded interval for a fixed seed', function()
    -- computed once with this implementation and, independently, with the Python reference
    local lo, hi = stats.bootstrap_ci(xs, { seed = 42, reps = 1000 })
    assert.equal(10.125, lo)
    assert.equal(28.5, hi)
    local r = stats.ratio_ci(xs, { 5, 6, 7, 8, 9 }, { seed = 42, reps = 1000 })
    assert_close(2.357142857142857, r.ratio)            -- median 16.5 / median 7
    assert_close(1.3888888888888888, r.lo)
    assert_close(4.334999999999998, r.hi)
  end)

  it('the counting resampler equals sorting every resample (same draws)', function()
    for _, q in ipairs({ 0, 0.1, 0.5, 0.9, 0.99, 1 }) do
      local lo1, hi1 = stats.bootstrap_ci(xs, { seed = 9, reps = 300, q = q })
      local lo2, hi2 = stats.bootstrap_ci(xs,
        { seed = 9, reps = 300, stat = function(s) return stats.quantile(s, q) end })
      assert.equal(lo2, lo1)
      assert.equal(hi2, hi1)
    end
    local ties = { 5, 5, 5, 1, 1, 9, 9, 9, 9, 2 }
    local lo1, hi1 = stats.bootstrap_ci(ties, { seed = 5, reps = 500 })
    local lo2, hi2 = stats.bootstrap_ci(ties, { seed = 5, reps = 500, stat = stats.median })
    assert.equal(lo2, lo1)
    assert.equal(hi2, hi1)
  end)

  it('behaves at the edges: constant data, one value, no values', function()
    assert.same({ 4, 4 }, { stats.bootstrap_ci({ 4, 4, 4, 4 }, { seed = 1, reps = 50 }) })
    assert.same({ 3, 3 }, { stats.bootstrap_ci({ 3 }, { seed = 1, reps = 50 }) })
    assert.same({}, { stats.bootstrap_ci({}, {}) })
    assert.is_nil(stats.ratio_ci({}, { 1 }))
    local r = stats.ratio_ci({ 2, 2, 2 }, { 1, 1, 1 }, { reps = 50 })
    assert.same({ ratio = 2, lo = 2, hi = 2 }, r)
  end)

  it('contains the sample median, and a ratio of a sample to itself contains 1', function()
    local r = stats.rng(99)
    local big = {}
    for i = 1, 300 do big[i] = 100 + 50 * r.float() end
    local lo, hi = stats.bootstrap_ci(big, { seed = 1 })
    local m = stats.median(big)
    assert.is_true(lo <= m and m <= hi)
    local rr = stats.ratio_ci(big, big, { seed = 1 })
    assert.equal(1, rr.ratio)
    assert.is_true(rr.lo < 1 and rr.hi > 1)
  end)

  it('describe() = summary + the median CI', function()
    local d = stats.describe(xs, { seed = 42, reps = 1000 })
    assert.equal(10.125, d.ci_lo)
    assert.equal(28.5, d.ci_hi)
    assert.equal(16.5, d.p50)
    assert.equal(10, d.n)
  end)
end)

describe('stats: proportions and ECDF', function()
  it('Wilson intervals match the formula', function()
    -- Python: p=k/n; c=(p+z²/2n)/(1+z²/n); h=z·sqrt(p(1-p)/n + z²/4n²)/(1+z²/n)
    local lo, hi = stats.wilson(0, 10)
    assert.equal(0, lo)
    assert_close(0.2775327998628892, hi)
    lo, hi = stats.wilson(300, 300)
    assert_close(0.9873570287754538, lo)
    assert_close(1, hi)
    lo, hi = stats.wilson(45, 50)
    assert_close(0.7863976856252035, lo)
    assert_close(0.9565242350681096, hi)
    assert.is_nil(stats.wilson(0, 0))
  end)

  it('ECDF steps', function()
    local x, p = stats.ecdf({ 3, 1, 2, 2 })
    assert.same({ 1, 2, 2, 3 }, x)
    assert.same({ 0.25, 0.5, 0.75, 1 }, p)
  end)
end)

describe('stats against the independent Python reference', function()
  it('agrees on generator, shuffles, 99 percentiles, bootstrap and ratio CIs', function()
    local gen = stats.rng(123)
    local data, other = {}, {}
    for i = 1, 157 do data[i] = math.floor(gen.float() * 1e6) / 1000 + (i % 7 == 0 and 400 or 0) end
    for i = 1, 61 do other[i] = 80 + math.floor(gen.float() * 1e5) / 1000 end
    local ns = {}
    for i = 1, 50 do ns[i] = (i * 7919) % 1000 + 1 end
    ns[51] = 3
    ns[52] = 1 << 40
    local job = { seed = 20261001, ns = ns, names = { 'daytona', 'e2b', 'lizard', 'local', 'modal' }, rounds = 12,
                  data = data, other = other, reps = 300 }
    local py = python(job)

    local r = stats.rng(job.seed)
    for i = 1, 5 do assert.equal(math.tointeger(tonumber(py.next[i])), r.next()) end
    r = stats.rng(job.seed)
    for i, n in ipairs(ns) do assert.equal(py.ints[i], r.int(n)) end
    r = stats.rng(job.seed)
    for i = 1, job.rounds do
      assert.same(py.shuffles[i], stats.shuffle({ table.unpack(job.names) }, r))
    end
    for i = 1, 99 do
      assert_close(py.quantiles[i], stats.quantile(data, i / 100), 1e-12, 'p' .. i)
    end
    for k, q in ipairs({ 0.5, 0.9 }) do
      local lo, hi = stats.bootstrap_ci(data, { seed = job.seed, reps = job.reps, q = q })
      assert_close(py.boot[k][1], lo, 1e-12, 'boot lo q=' .. q)
      assert_close(py.boot[k][2], hi, 1e-12, 'boot hi q=' .. q)
    end
    local rr = stats.ratio_ci(data, other, { seed = job.seed, reps = job.reps })
    assert_close(py.ratio[1], rr.ratio, 1e-12)
    assert_close(py.ratio[2], rr.lo, 1e-12)
    assert_close(py.ratio[3], rr.hi, 1e-12)
  end)
end)
