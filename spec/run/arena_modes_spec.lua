-- The arena's modes (--mode lockstep|sequential|staggered|burst, lua/arena.lua) against Lizard
-- fakes that count the creates in flight at once, and the startup report's mode and
-- computesdk-compatible sections checked against a hand computation on a crafted log.
local task = require('cseng.task')
local fs = require('cseng.fs')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)
local cjson = require('cjson')

local fake = require('spec.fakes').module('lizard')

teardown(A.close_fakes)

local function run_arena(opts) return A.run(opts, 'arena-modes-') end

local assert_accounted = A.assert_accounted

-- A create latency that counts the creates being handled and holds each until `k` are in flight
-- (a barrier, so the count does not depend on timing), or until all `n` creates still to come
-- are (the last wave of a run may be smaller than k); `limit` seconds is a safety net only: a
-- create that waited that long goes on, and the spec fails on the count.
local function gate(k, n, limit)
  local g = { cur = 0, max = 0, total = 0, done = 0, log = {} }
  g.latency = function(i)
    g.cur, g.total = g.cur + 1, g.total + 1
    g.log[#g.log + 1] = i .. ':' .. g.cur
    if g.cur > g.max then g.max = g.cur end
    local function full() return g.cur >= math.min(k, n - g.done) end
    local waited = 0
    while not full() and not g.open and waited < limit do task.sleep(0.005); waited = waited + 0.005 end
    g.open = g.open or full() -- the wave's last arrival opens the gate for it
    task.sleep(0.01)
    g.cur, g.done = g.cur - 1, g.done + 1
    if g.cur == 0 then g.open = false end -- the wave is done: the next one waits for a full wave again
    return 0
  end
  return g
end

describe('arena --mode burst --burst 50', function()
  local status, by, errtext, info, f, g
  setup(function()
    g = gate(50, 50, 60)
    f = fake.start { latency = { create = g.latency } }
    A.started(f)
    status, by, errtext, info = run_arena { providers = { 'liz' }, provider_config = { liz = f.config() },
      mode = 'burst', burst = 50, samples = 50, warmups = 0, seed = 5 }
  end)

  it('has 50 creates in flight at once at the fake', function()
    assert.equal(0, status, errtext)
    assert.equal(50, g.total)
    assert.equal(50, g.max, table.concat(g.log, ' '))
    -- (the fake's live count may peak lower: the first sandbox can be gone before the last is added)
    assert.is_true(f.stats().max_live <= 50)
  end)

  it('records every allocation and destroys every sandbox', function()
    assert_accounted(by, 50)
    local s = f.stats()
    assert.equal(50, s.created)
    assert.equal(50, s.destroyed)
    assert.equal(0, s.live)
  end)

  it('records the mode, the block and the engine\'s lateness per create', function()
    assert.equal('burst', by.run_started[1].mode)
    assert.equal(50, by.run_started[1].burst)
    assert.equal(1, #by.batch)
    assert.equal(50, #by.startup_trial)
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.ok, tostring(t.error))
      assert.equal('burst', t.mode)
      assert.equal(1, t.block)
      assert.is_true(t.lateness_ms >= 0)
      assert.is_true(t.ready_t_ms > t.start_t_ms)
    end
  end)

  it('writes the burst section and the computesdk summary in the report', function()
    local md = assert(fs.read(info.report))
    assert.truthy(md:find('## Mode: burst', 1, true))
    assert.truthy(md:find('50 creates in flight at once per provider', 1, true))
    assert.truthy(md:find('lateness p50 ms', 1, true))
    assert.truthy(md:find('## computesdk-compatible summary', 1, true))
    assert.truthy(md:find('--mode burst --burst 50', 1, true))
  end)
end)

describe('arena --mode burst: the cap', function()
  it('never has more than --burst creates in flight; the queued ones run as places open', function()
    local g = gate(4, 12, 60)
    local f = fake.start { latency = { create = g.latency } }
    A.started(f)
    local status, by, errtext = run_arena { providers = { 'liz' }, provider_config = { liz = f.config() },
      mode = 'burst', burst = 4, samples = 12, warmups = 0, seed = 5 }
    assert.equal(0, status, errtext)
    assert.equal(12, g.total)
    assert.equal(4, g.max, table.concat(g.log, ' '))
    assert_accounted(by, 12)
    assert.equal(0, f.stats().live)
  end)
end)

describe('arena --mode sequential and staggered', function()
  it('sequential: one create in flight at a time over all providers', function()
    local shared = {}
    local fa = fake.start { shared = shared, latency = { create = 0.01 } }
    local fb = fake.start { shared = shared, latency = { create = 0.01 } }
    A.started(fa); A.started(fb)
    local status, by, errtext = run_arena { providers = { 'a', 'b' }, provider_config = { a = fa.config(), b = fb.config() },
      mode = 'sequential', samples = 5, warmups = 0, seed = 9 }
    assert.equal(0, status, errtext)
    assert.equal(1, shared.max_in_flight)
    assert.equal(10, #by.startup_trial)
    assert_accounted(by, 10)
  end)

  it('staggered: one create every --stagger-ms; the report has the ramp profile', function()
    local f = fake.start { latency = { create = 0.02 } }
    A.started(f)
    local status, by, errtext, info = run_arena { providers = { 'liz' }, provider_config = { liz = f.config() },
      mode = 'staggered', stagger_ms = 30, samples = 6, warmups = 0, seed = 9 }
    assert.equal(0, status, errtext)
    table.sort(by.startup_trial, function(x, y) return x.position < y.position end)
    -- a launch is never early: launch i is due (i-1)*30 ms after the first was due, and the first
    -- left lateness_ms after its due time (a loaded machine makes launches late, never early)
    local first = by.startup_trial[1]
    for i = 2, #by.startup_trial do
      local off = by.startup_trial[i].start_t_ms - first.start_t_ms
      assert.is_true(off >= (i - 1) * 30 - (first.lateness_ms or 0) - 1,
        ('launch %d at %.1f ms after the first, which was %.1f ms late'):format(i, off, first.lateness_ms or 0))
    end
    assert_accounted(by, 6)
    local md = assert(fs.read(info.report))
    assert.truthy(md:find('## Mode: staggered', 1, true))
    assert.truthy(md:find('**Ramp profile**', 1, true))
    assert.truthy(md:find('one create every 30 ms', 1, true))
  end)
end)

-- ---- the report's numbers on a crafted log --------------------------------------------------

describe('startup report: mode and computesdk sections on fixed data', function()
  local md
  setup(function()
    local dir = H.tempdir('arena-craft-')
    local lines = {}
    local function ev(t) t.run_id = 'craft'; t.time = '2026-12-01T00:00:00Z'; lines[#lines + 1] = cjson.encode(t) end
    ev { event = 'run_started', kind = 'startup', providers = { 'p' }, seed = 1, samples = 44, warmups = 0,
      mode = 'burst', burst = 44, repeats = 1 }
    -- 40 successes: ready 50, 100, ..., 2000 ms; 4 failures; start_t 1000 + i/4 ms; lateness i/100 ms
    for i = 1, 44 do
      local t = { event = 'startup_trial', provider = 'p', phase = 'measured', warmup = false, round = i,
        position = i, block = 1, mode = 'burst', start_t_ms = 1000 + i * 0.25, lateness_ms = i * 0.01 }
      if i <= 40 then
        t.ok, t.ready_ms, t.create_ms, t.first_exec_ms = true, 50 * i, 40 * i, 10 * i
        t.ready_t_ms = t.start_t_ms + t.ready_ms
      else
        t.ok, t.error, t.error_stage, t.error_code = false, 'forced', 'create', 'HTTP_500'
      end
      ev(t)
    end
    ev { event = 'run_finished', status = 'finished' }
    local path = dir .. '/craft.jsonl'
    assert(fs.write(path, table.concat(lines, '\n') .. '\n'))
    require('reports.lib.render').render { inputs = { path }, template = 'startup', output = dir .. '/craft.md' }
    md = assert(fs.read(dir .. '/craft.md'))
  end)

  it('computesdk summary: 5% trimmed each end, nearest rank, composite score', function()
    -- by hand: 40 successes, floor(40 * 0.05) = 2 trimmed each end -> 150 .. 1900 (36 values);
    -- median (t18 + t19) / 2 = (1000 + 1050) / 2 = 1025; p95 = t[ceil(34.2)] = t35 = 1850;
    -- p99 = t[ceil(35.64)] = t36 = 1900; success 40/44; score =
    -- (0.60 * 89.75 + 0.25 * 81.5 + 0.15 * 81) * 40 / 44 = 86.375 * 0.90909 = 78.52
    local row = md:match('\n| p | 44 | 40 | 2 |[^\n]*')
    assert.truthy(row, 'computesdk row')
    assert.equal('| p | 44 | 40 | 2 | 1025 | 1850 | 1900 | 90.9% | 78.52 |', row:sub(2))
  end)

  it('burst section: TTI, wall clock, time to first ready, lateness', function()
    -- wall clock: first request 1000.25, last ready 1010 + 2000 = 3010 -> 2009.75 ms (2010);
    -- first ready 1000.25 + 50 -> 50 ms; lateness over 44: median 0.225, max 0.44;
    -- TTI p50 of 40 successes (type 7) = (1000 + 1050) / 2 = 1025
    local row = md:match('\n| p | 44 | 90.9%% [^\n]*')
    assert.truthy(row, 'mode row')
    local cells = {}
    for c in row:gmatch('|%s*([^|]-)%s*%f[|]') do cells[#cells + 1] = c end
    assert.equal('1025', cells[4])
    assert.equal('2010', cells[7])
    assert.equal('50.00', cells[8])
    assert.equal('0.225', cells[9])
    assert.equal('0.440', cells[10])
  end)
end)
