-- Repeated blocks (the run as a random effect) and the computesdk-compatible summary.
local stats = require('cseng.lib.stats')

local function block(center, n, seed)
  local rng, out = stats.rng(seed), {}
  for i = 1, n do out[i] = center + (rng.int(100) - 50) / 100 end -- center +- 0.5
  return out
end

describe('stats.blocks', function()
  it('gives a block-level CI that covers a between-run shift the within-run CI misses', function()
    -- four runs of 100 samples whose level shifts between runs (31, 69, 35, 55 ms: as measured)
    local blocks = { block(31, 100, 1), block(69, 100, 2), block(35, 100, 3), block(55, 100, 4) }
    local r = stats.blocks(blocks, { seed = 7 })
    assert.are.equal(4, r.n_blocks)
    assert.is_true(math.abs(r.median - 45) < 1, tostring(r.median)) -- median of ~31, 35, 55, 69
    -- the block CI spans the blocks' levels; each run's own CI is narrow and misses the others
    assert.is_true(r.lo <= 35 and r.hi >= 55, string.format('[%g, %g]', r.lo, r.hi))
    for _, w in ipairs(r.within) do
      assert.is_true(w.hi - w.lo < 0.1 * (r.hi - r.lo))
      assert.is_true(r.median < w.lo or r.median > w.hi) -- no single run's CI covers the median of runs
    end
    assert.are.equal(4, r.outside)
    assert.is_true(r.disagree)
    assert.is_true(r.spread > 37 and r.spread < 39)
  end)

  it('agrees with the within-run CI when the blocks do not differ', function()
    local blocks = { block(40, 200, 11), block(40, 200, 12), block(40, 200, 13), block(40, 200, 14), block(40, 200, 15) }
    local r = stats.blocks(blocks, { seed = 3 })
    assert.is_true(r.lo <= 40.1 and r.hi >= 39.9)
    assert.are.equal(0, r.outside)
    assert.is_false(r.disagree)
  end)

  it('has no block-level CI with one block, and skips empty blocks', function()
    local r = stats.blocks({ {}, { 1, 2, 3 } })
    assert.are.equal(1, r.n_blocks)
    assert.is_nil(r.lo)
    assert.is_false(r.disagree)
    assert.is_nil(stats.blocks({ {}, {} }))
  end)

  it('overlap', function()
    assert.is_true(stats.overlap(1, 3, 2, 4))
    assert.is_false(stats.overlap(1, 2, 3, 4))
    assert.is_true(stats.overlap(nil, nil, 3, 4)) -- unknown: not distinguishable
  end)
end)

describe('stats.computesdk', function()
  it('matches a hand computation on fixed data', function()
    local ok = {}
    for i = 1, 20 do ok[i] = 100 * (21 - i) end -- 2000, 1900, ..., 100 (order must not matter)
    local r = stats.computesdk(ok, 22)           -- and 2 failures
    -- trim floor(20 * 0.05) = 1 from each end: 200..1900 (18 values)
    assert.are.equal(1, r.trimmed)
    assert.are.equal(1050, r.median)              -- (1000 + 1100) / 2
    assert.are.equal(1900, r.p95)                 -- sorted[ceil(0.95 * 18) = 18]
    assert.are.equal(1900, r.p99)                 -- sorted[ceil(0.99 * 18) = 18]
    assert.are.equal(20 / 22, r.success_rate)
    -- s(1050) = 89.5, s(1900) = 81: 0.6*89.5 + 0.25*81 + 0.15*81 = 86.1, times 20/22
    assert.is_true(math.abs(r.score - 86.1 * 20 / 22) < 1e-9, tostring(r.score))
  end)

  it('scores 0 past the 10 s ceiling and with no success', function()
    assert.are.equal(0, stats.computesdk({ 12000, 15000, 11000 }, 3).score)
    local r = stats.computesdk({}, 5)
    assert.are.equal(0, r.score)
    assert.are.equal(0, r.success_rate)
    assert.is_nil(r.median)
  end)

  it('nearest rank and trimming on small inputs', function()
    assert.are.equal(3, stats.nearest_rank({ 1, 2, 3 }, 95))
    assert.are.equal(1, stats.nearest_rank({ 1, 2, 3 }, 1))
    assert.are.same({ 1, 2, 3 }, stats.trimmed({ 3, 1, 2 }, 0.05)) -- floor(3 * 0.05) = 0: nothing trimmed
    assert.are.same({ 2 }, stats.trimmed({ 3, 1, 2 }, 0.34))
  end)
end)
