-- The arena's repeated blocks (--repeat N, lua/arena.lua, lua/reports/startup.lua) against Lizard
-- fakes whose create latency shifts from block to block: each block's own CI is narrow and misses
-- the other blocks, the block-level CI (stats.blocks: median of block medians, bootstrap over
-- blocks) covers the shift, the report says the runs disagree, and a comparison whose block-level
-- CIs overlap reads "not distinguishable". Plus the host context recorded per block.
local arena = require('cseng.run.kinds.startup')
local stats = require('cseng.lib.stats')
local fs = require('cseng.fs')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local fake = require('spec.fakes').module('lizard')

teardown(A.close_fakes)

local function run_arena(opts) return A.run(opts, 'arena-blocks-') end

local SAMPLES, BLOCKS = 8, 4
-- block b of provider a: its creates (b-1)*SAMPLES+1 .. b*SAMPLES (no warmups), shifted by SHIFT[b]
local SHIFT = { 0, 0.2, 0.1, 0.3 }
local function shifting(n)
  local b = (n - 1) // SAMPLES + 1
  return 0.01 + (SHIFT[b] or 0) + (n % 3) * 0.001
end

describe('arena --repeat: a provider whose latency shifts between blocks', function()
  local status, by, errtext, info, fa, fb
  setup(function()
    fa = fake.start { latency = { create = shifting } }
    -- b does not shift; its creates spread over 20 ms, so that a block's CI is not narrower than
    -- the machine's own jitter (1 ms steps made a loaded machine's slow block "disagree")
    fb = fake.start { latency = { create = function(n) return 0.09 + (n % 3) * 0.01 end } }
    A.started(fa); A.started(fb)
    status, by, errtext, info = run_arena { providers = { 'a', 'b' }, provider_config = { a = fa.config(), b = fb.config() },
      samples = SAMPLES, warmups = 0, repeats = BLOCKS, seed = 7 }
  end)

  it('runs N blocks of the planned samples; every trial records its block', function()
    assert.equal(0, status, errtext)
    assert.equal(BLOCKS, #by.block)
    assert.equal(BLOCKS, #by.block_finished)
    local per = {}
    for _, t in ipairs(by.startup_trial) do
      assert.is_number(t.block, 'trial without a block')
      per[t.provider .. t.block] = (per[t.provider .. t.block] or 0) + 1
    end
    for b = 1, BLOCKS do
      assert.equal(SAMPLES, per['a' .. b])
      assert.equal(SAMPLES, per['b' .. b])
    end
    assert.equal(BLOCKS * SAMPLES, fa.stats().destroyed)
    assert.equal(0, fa.stats().live)
    assert.equal(0, fb.stats().live)
  end)

  it('records the block order (seeded) and the host context of each block', function()
    local blocks = {}
    for _, e in ipairs(by.block) do
      blocks[#blocks + 1] = table.concat(e.order, ',')
      assert.equal(3, #e.host.loadavg)
    end
    -- the same seed draws the same block orders: stats.rng(seed ~ hash('blocks'))
    local rng = stats.rng(7 ~ stats.hash('blocks'))
    for b = 1, BLOCKS do assert.equal(table.concat(stats.shuffle({ 'a', 'b' }, rng), ','), blocks[b]) end
    for _, e in ipairs(by.block_finished) do
      local h = e.host
      assert.is_true(h.wall_s > 0)
      assert.is_true(h.client_cpu_s >= 0)
      assert.is_number(h.steal_pct, 'CPU steal from /proc/stat')
      assert.equal(3, #h.loadavg)
    end
  end)

  it('each block\'s own CI misses the shift; the block-level CI covers it', function()
    local lists = {}
    for b = 1, BLOCKS do lists[b] = {} end
    for _, t in ipairs(by.startup_trial) do
      if t.provider == 'a' and t.ok then table.insert(lists[t.block], t.ready_ms) end
    end
    local r = stats.blocks(lists, { seed = 3 })
    assert.is_true(r.disagree)
    -- each block's own CI holds no other block's median: one run would not have seen the shift
    for i, w in ipairs(r.within) do
      for j, m in ipairs(r.medians) do
        if i ~= j then assert.is_false(m >= w.lo and m <= w.hi, ('block %d CI holds block %d median'):format(i, j)) end
      end
    end
    -- the block-level CI spans the two middle blocks (shifts 0.1 and 0.2 s)
    local s = { table.unpack(r.medians) }
    table.sort(s)
    assert.is_true(r.lo <= s[2] and r.hi >= s[3], ('block-level CI [%g, %g] vs %g, %g'):format(r.lo, r.hi, s[2], s[3]))
  end)

  it('the report gives the block-level CI beside the within-run CI and says the runs disagree', function()
    local md = assert(fs.read(info.report))
    assert.truthy(md:find('## Repeated blocks', 1, true))
    local row = md:match('\n| a | 4 |[^\n]*')
    assert.truthy(row, 'no block row for a')
    assert.truthy(row:find('**disagree**: 4 of 4 blocks', 1, true), row)
    local rowb = md:match('\n| b | 4 |[^\n]*')
    assert.truthy(rowb:find('agree: every block', 1, true), rowb)
    assert.truthy(md:find('| a | %[[^|]+| b | %[[^|]+| not distinguishable %(block%-level CIs overlap%) |'),
      'the a/b comparison is reported as not distinguishable')
    assert.truthy(md:find('**Host and network context per block**', 1, true))
    assert.truthy(md:find('--repeat 4', 1, true), 'the reproduce command keeps --repeat')
  end)
end)

describe('arena --repeat: options', function()
  it('refuses a bad --repeat, --burst without burst mode, a tasks mode', function()
    for _, case in ipairs({
      { { repeats = 0 }, '--repeat must be' },
      { { burst = 3 }, '--burst N goes with --mode burst' },
      { { stagger_ms = 5 }, '--stagger-ms M goes with --mode staggered' },
      { { mode = 'cold' }, "startup plan's modes are lockstep" },
    }) do
      local ok, err = pcall(arena.options, case[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(case[2], 1, true), tostring(err))
    end
    local o = arena.options { mode = 'burst', samples = 9 }
    assert.equal(9, o.burst)
    assert.equal(200, arena.options({ mode = 'staggered' }).stagger_ms)
    assert.equal('lockstep', arena.options({}).mode)
  end)
end)
