-- The cost ledger (lua/cseng/evals/ledger.lua, prices.lua) and the spend ceiling --max-cost-usd:
-- a fake model that charges a fixed amount per call, so every figure is known in advance.
local prices = require('cseng.evals.prices')
local ledger = require('cseng.evals.ledger')

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-ledger-spec') end)
teardown(function() H.close() end)

local CENT = 0.01
local function charging(conv)
  local p, c = 1000 * conv.turn, 50
  return { prompt_tokens = p, completion_tokens = c, total_tokens = p + c, cost = CENT }
end

local function finished(events)
  for _, e in ipairs(events) do if e.event == 'run_finished' then return e end end
end

describe('the cost ledger', function()
  it('records every figure of a trial with its source, and sums them per run', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = charging }
    local status, s = H.run({ tasks = H.ids(2), concurrency = 2 }, H.openrouter_env(f))
    assert.equal(0, status)
    assert.equal(2, #s.results)
    for _, r in ipairs(s.results) do
      local c = r.cost
      assert.equal(2, #c.items)
      assert.equal('sandbox', c.items[1].item)
      assert.equal('rates', c.items[1].source) -- local's rates exist and are 0
      assert.equal(r.sandbox_seconds, c.items[1].seconds)
      assert.equal('model', c.items[2].item)
      assert.equal('provider', c.items[2].source)
      assert.near(3 * CENT, c.items[2].usd, 1e-12)
      assert.same({ input = 6000, cached = 0, cache_creation = 0, output = 150, reasoning = 0 }, c.items[2].tokens)
      assert.is_true(c.complete)
      assert.near(3 * CENT + c.items[1].usd, c.total_usd, 1e-12)
      assert.equal(H.MODEL, r.model)
    end
    assert.near(6 * CENT, s.cost.model_usd, 1e-12)
    assert.equal(2, s.cost.trials)
    assert.equal(2, s.cost.sources['model:provider'])
  end)

  it('prices cache reads and cache writes apart when the API reports no cost', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = function()
      return { prompt_tokens = 1000, completion_tokens = 50, total_tokens = 1050,
        prompt_tokens_details = { cached_tokens = 400, cache_write_tokens = 100 } }
    end }
    local _, s = H.run({ tasks = H.ids(1) }, H.openrouter_env(f, { CSENG_LLM_PRICE_IN = '2', CSENG_LLM_PRICE_OUT = '8',
      CSENG_LLM_PRICE_CACHED = '0.5', CSENG_LLM_PRICE_CACHE_WRITE = '2.5' }))
    local r = s.results[1]
    local per_call = (500 * 2 + 400 * 0.5 + 100 * 2.5 + 50 * 8) / 1e6
    assert.near(3 * per_call, r.solver_usage.cost_usd, 1e-15)
    assert.equal('prices', r.cost.items[2].source)
    assert.same({ input = 3000, cached = 1200, cache_creation = 300, output = 150, reasoning = 0 }, r.cost.items[2].tokens)
  end)

  it('marks a model figure it could not price as incomplete (never a silent $0)', function()
    local f = H.start { script = H.llm.replay(H.gold_commands) }
    local _, s = H.run({ tasks = H.ids(1) }, H.openrouter_env(f))
    local r = s.results[1]
    assert.equal('unknown', r.cost.items[2].source)
    assert.is_nil(r.cost.items[2].usd)
    assert.is_false(r.cost.complete)
    assert.equal(1, s.cost.incomplete_trials)
  end)

  it('finds list prices with or without the vendor prefix', function()
    assert.equal(0.15, (prices.lookup({}, nil, 'openai/gpt-4o-mini')).input)
    assert.equal(0.15, (prices.lookup({}, nil, 'gpt-4o-mini')).input)
    assert.is_nil(prices.lookup({}, nil, 'nobody/knows'))
    assert.near((600 * 3 + 400 * 0.3 + 50 * 15) / 1e6,
      prices.cost({ input = 1000, cached = 400, output = 50 }, prices.TABLE['anthropic/claude-sonnet-4']), 1e-15)
  end)
end)

describe('--max-cost-usd', function()
  it('stops dispatching before a trial would pass the ceiling; the stop reason is recorded', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = charging }
    -- a trial costs 3 calls = $0.03: after the first, committed 0.03 + the next trial's estimate 0.03 > 0.05
    local status, s, _, events = H.run({ tasks = H.ids(3), max_cost_usd = 0.05 }, H.openrouter_env(f))
    assert.equal(1, status)
    assert.equal(1, #s.results)
    assert.equal(3, f.stats().requests)
    local fin = finished(events)
    assert.equal('stopped', fin.status)
    assert.equal('max_cost', fin.stop_reason)
    assert.equal('a new trial', fin.stop_detail.what)
    assert.near(0.03, fin.stop_detail.committed_usd, 1e-12)
    assert.near(0.03, fin.stop_detail.estimate_usd, 1e-12)
    assert.equal('max_cost', s.stop_reason)
    assert.is_true(s.cost.total_usd <= 0.05)
  end)

  it('runs everything when the ceiling is not reached', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = charging }
    local status, s, _, events = H.run({ tasks = H.ids(2), max_cost_usd = 0.06, concurrency = 2 }, H.openrouter_env(f))
    assert.equal(0, status)
    assert.equal(2, #s.results)
    assert.equal('finished', finished(events).status)
  end)

  it('stops an agent before the turn that would pass it', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = charging }
    -- turns: 1 (0 + 0), 2 (0.01 spent + 0.01 expected = 0.02), 3 would make 0.03 > 0.025
    local _, s, _, events = H.run({ tasks = H.ids(2), max_cost_usd = 0.025 }, H.openrouter_env(f))
    assert.equal(2, f.stats().requests)
    assert.equal(1, #s.results)
    local r = s.results[1]
    assert.equal('max_cost', r.solver_usage.stop_reason)
    assert.equal(2, r.solver_usage.turns)
    assert.matches('spend ceiling', r.solve_note)
    assert.equal('the next agent turn', finished(events).stop_detail.what)
  end)
end)

describe('the budget', function()
  it('counts in-flight trials at the larger of their reservation and their spend', function()
    local b = ledger.budget(1.0)
    assert.is_true(b:admit_trial('a'))   -- estimate 0
    b:spend('a', 0.4)
    b:settle('a', 0.4)
    assert.is_true(b:admit_trial('b'))   -- 0.4 + 0.4 <= 1
    assert.is_false(b:admit_trial('c'))  -- 0.4 + 0.4 (b reserved) + 0.4 > 1
    assert.equal('a new trial', b.stop.what)
    assert.is_false(b:admit_trial('d'))  -- once stopped, stopped
  end)
end)
