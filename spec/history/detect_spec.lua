-- Regression detection with intervals (lua/cseng/history/detect.lua), on series given as numbers:
-- a step is one change dated at its first run, confirmed after `hold` runs; a single outlier is
-- no change and goes back into the window; after a change the window starts again; the same
-- series gives the same verdicts; rates get Wilson intervals. Verdicts are run indices and counts.
local detect = require('cseng.history.detect')

-- run a series of {value, lo, hi} (or {k, n} for rates) through detect.step; returns the verdicts
-- and the changes
local function judge(kind, points, o)
  o = detect.options(o)
  local st, verdicts, changes = detect.state(), {}, {}
  for i, p in ipairs(points) do
    p.index, p.run_id = i, 'run-' .. i
    local v, change, _
    st, v, _, change = detect.step('spec/series', kind, st, p, o)
    verdicts[i] = v
    if change then changes[#changes + 1] = change end
  end
  return verdicts, changes
end

local function lat(v, half) return { value = v, lo = v - (half or 2), hi = v + (half or 2) } end

describe('regression detection', function()
  it('calls one change at the step, dated at its first run, after it held', function()
    local pts = {}
    for i = 1, 12 do pts[i] = lat(i <= 6 and 50 + (i % 3) * 0.5 or 80 + (i % 2)) end
    local verdicts, changes = judge('latency', pts, { window = 5, min_window = 3, hold = 3 })
    assert.equal(1, #changes)
    assert.equal(7, changes[1].first_index)
    assert.equal(9, changes[1].confirmed_index)
    assert.equal('up', changes[1].direction)
    assert.is_true(detect.regression(changes[1]))
    assert.same({ 'learning', 'learning', 'learning', 'ok', 'ok', 'ok', 'candidate', 'candidate', 'change',
      'ok', 'ok', 'ok' }, verdicts) -- after the change its 3 runs are the window
    assert.is_true(changes[1].ratio > 1.5)
  end)

  it('calls nothing for one outlier, which goes back into the window', function()
    local pts = {}
    for i = 1, 12 do pts[i] = lat(i == 7 and 90 or 50 + (i % 3)) end
    local verdicts, changes = judge('latency', pts, { window = 5, min_window = 3, hold = 2 })
    assert.equal(0, #changes)
    assert.equal('candidate', verdicts[7])
    -- the window after it holds the outlier: run 9 is judged against 5 runs, one of them 90
    assert.equal('ok', verdicts[8])
  end)

  it('needs the intervals to separate, not only the medians to move', function()
    local pts = {}
    for i = 1, 10 do pts[i] = lat(i <= 5 and 50 or 56, 8) end -- +12%, but each run's CI is wide
    local _, changes = judge('latency', pts, { window = 5, min_window = 3, hold = 2 })
    assert.equal(0, #changes)
  end)

  it('leaves a change under min_change uncalled, even when intervals separate', function()
    local pts = {}
    for i = 1, 10 do pts[i] = lat(i <= 5 and 50 or 53, 0.5) end -- +6%, tight CIs
    local _, none = judge('latency', pts, { window = 5, min_window = 3, hold = 2, min_change = 0.10 })
    assert.equal(0, #none)
    local _, some = judge('latency', pts, { window = 5, min_window = 3, hold = 2, min_change = 0.05 })
    assert.equal(1, #some)
    assert.equal(6, some[1].first_index)
  end)

  it('calls an improvement down, and a second step after the first', function()
    local pts = {}
    for i = 1, 20 do pts[i] = lat(i <= 6 and 80 or (i <= 13 and 50 or 120)) end
    local _, changes = judge('latency', pts, { window = 5, min_window = 3, hold = 2 })
    assert.equal(2, #changes)
    assert.equal('down', changes[1].direction)
    assert.equal(7, changes[1].first_index)
    assert.is_false(detect.regression(changes[1]))
    assert.equal('up', changes[2].direction)
    assert.equal(14, changes[2].first_index)
  end)

  it('judges rates with Wilson intervals', function()
    local pts = {}
    for i = 1, 10 do pts[i] = { k = i <= 5 and 0 or 8, n = 20 } end
    local _, changes = judge('rate', pts, { window = 5, min_window = 3, hold = 2 })
    assert.equal(1, #changes)
    assert.equal(6, changes[1].first_index)
    assert.equal(0.4, changes[1].value)
    local _, none = judge('rate', { { k = 0, n = 20 }, { k = 0, n = 20 }, { k = 0, n = 20 }, { k = 1, n = 20 }, { k = 0, n = 20 } },
      { window = 5, min_window = 3, hold = 1 })
    assert.equal(0, #none) -- 1 of 20 does not separate from 0 of 60
  end)

  it('gives the same verdicts for the same series, whatever ran before', function()
    local pts = {}
    for i = 1, 15 do pts[i] = lat(50 + ((i * 37) % 11) - 5, 3) end
    local a1, c1 = judge('latency', pts, { window = 6, min_window = 3, hold = 2 })
    judge('latency', { lat(1), lat(2) })
    local a2, c2 = judge('latency', pts, { window = 6, min_window = 3, hold = 2 })
    assert.same(a1, a2)
    assert.same(c1, c2)
  end)

  it('refuses options it cannot use, naming them', function()
    local errors = require('cseng.lib.errors')
    local function refused(o)
      local ok, err = pcall(detect.options, o)
      assert.is_false(ok)
      assert.equal('EUSAGE', err.code)
      return errors.line(err)
    end
    assert.equal('window must be a whole number >= 2, got 1', refused { window = 1 })
    assert.equal('min_window (5) must not exceed window (3)', refused { window = 3, min_window = 5 })
    assert.equal('hold must be a whole number >= 1, got 0', refused { hold = 0 })
    assert.equal('min_change must be a number in [0, 10)', refused { min_change = -1 })
  end)
end)
