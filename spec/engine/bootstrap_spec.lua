-- cseng.bootstrap (engine/lbootstrap.c): stats.bootstrap_ci of a quantile in C gives the numbers
-- the Lua resampling gives, bit for bit, on random data (ties, one value, two, hundreds), any
-- quantile, seed and level.
local stats = require('cseng.lib.stats')

describe('the bootstrap of a quantile in C', function()
  it('equals the Lua resampling bit for bit', function()
    local rng = stats.rng(777)
    for case = 1, 60 do
      local n = ({ 1, 2, 3, 10, 37, 250 })[case % 6 + 1]
      local xs = {}
      for i = 1, n do xs[i] = case % 3 == 0 and rng.int(5) or rng.float() * 100 - 20 end
      local q = ({ 0.5, 0.95, 0.05, 0.99, 0, 1, 0.37 })[case % 7 + 1]
      local o = { seed = rng.int(1 << 30) - (case % 2) * (1 << 40), reps = 100 + rng.int(400), q = q,
        level = ({ 0.95, 0.9, 0.99 })[case % 3 + 1] }
      local lo1, hi1 = stats.bootstrap_ci(xs, o)
      local lo2, hi2 = stats.bootstrap_ci(xs, { seed = o.seed, reps = o.reps, level = o.level,
        stat = function(s) return stats.quantile(s, q) end })
      assert.equal(lo2, lo1, 'case ' .. case)
      assert.equal(hi2, hi1, 'case ' .. case)
    end
  end)

  it('refuses what it cannot bootstrap', function()
    local b = require('cseng.bootstrap')
    assert.has_error(function() b.quantile_ci({ 1, 'x' }, 0.5, 10, 1, 0.95) end, 'bootstrap: value 2 is not a number')
    assert.has_error(function() b.quantile_ci({ 1 }, 2, 10, 1, 0.95) end)
    assert.has_error(function() b.quantile_ci({ 1 }, 0.5, 0, 1, 0.95) end)
    assert.same({}, { b.quantile_ci({}, 0.5, 10, 1, 0.95) })
  end)
end)
