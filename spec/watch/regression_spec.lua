-- `cseng watch` against loopback fakes, judged by counts and run indices: a fake whose create
-- latency steps from 50 ms to 80 ms after 5 runs makes the watch report one regression, dated at
-- run 6 and told once to --on-change with its evidence; a fake whose latency only jitters makes
-- it report none.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local store = require('cseng.history.store')

local H = require('spec.helpers.common')
local W = require('spec.helpers.watch')
local lizard = require('spec.fakes').module('lizard')
teardown(H.remove_tempdirs)

local SAMPLES = 12
local PER_RUN = SAMPLES + 1 -- creates per run: the samples and one warmup
local STEP_AFTER = 5

-- a deterministic jitter of +-a seconds for the n-th create
local function jitter(n, a) return (((n * 7919) % 1000) / 1000 * 2 - 1) * a end

-- exec and delete held for a steady 20 ms: every primitive the watch judges has a latency of the
-- fake's, so the machine's own noise (a loaded machine halves or doubles a 0.1 ms answer) is far
-- below the detector's 10% minimum change and cannot make a change of its own
local function steady(n) return 0.020 + jitter(n, 0.001) end

local function watch_of(dir, fake, hook)
  local args = { W.plan(dir, SAMPLES), '--every', '1s', '--max-late', '1s', '--runs', '8', '--output', dir,
    '--window', '5', '--min-window', '3', '--hold', '2' }
  if hook then args[#args + 1] = '--on-change'; args[#args + 1] = hook end
  local p = W.start(dir, args, fake.env())
  return W.wait(p, 600)
end

describe('cseng watch on a stepping and a jittering provider', function()
  it('reports one regression at the run where the create latency stepped, and tells it once', function()
    local dir = H.tempdir('cseng-watch-step-')
    local fake = lizard.start { latency = { create = function(n)
      local run = (n - 1) // PER_RUN + 1
      return (run <= STEP_AFTER and 0.050 or 0.080) + jitter(n, 0.003)
    end, exec = steady, delete = steady } }
    local hook_out = fs.join(dir, 'changes.jsonl')
    local code = watch_of(dir, fake, 'cat >> ' .. hook_out)
    local st = fake.stats()
    fake.close()
    assert.equal(0, code, fs.read(fs.join(dir, 'watch.err')))
    assert.equal(8 * PER_RUN, st.creates) -- 8 runs, no create failed or was repeated
    local S = assert(store.open(dir))
    S:sync()
    local runs = S:judged_runs('watch:wspec')
    assert.equal(8, #runs)
    local changes = S:changes('watch:wspec')
    assert.equal(1, #changes, jsonl.encode(changes))
    local c = changes[1]
    assert.same({ 'lizard', 'measured', 'create', 'p50', 'up', 1, STEP_AFTER + 1, STEP_AFTER + 2 },
      { c.provider, c.phase, c.primitive, c.metric, c.direction, c.regression, c.first_index, c.confirmed_index })
    assert.equal(runs[STEP_AFTER + 1].run_id, c.first_run_id)
    S:close()
    -- told once, with its evidence
    local told = {}
    for line in (fs.read(hook_out) or ''):gmatch('[^\n]+') do told[#told + 1] = jsonl.decode(line) end
    assert.equal(1, #told)
    assert.equal(c.key, told[1].key)
    assert.is_true(told[1].regression)
    assert.equal(STEP_AFTER + 1, told[1].first_index)
    assert.is_true(told[1].baseline.hi < told[1].runs[1].lo)
    assert.is_true(told[1].value > 70 and told[1].baseline.value < 60)
    assert.equal(8, #W.slots(W.journal(dir, 'wspec'), 'finished'))
    local notified = 0
    for _, e in ipairs(W.journal(dir, 'wspec')) do if e.event == 'change_notified' and e.ok then notified = notified + 1 end end
    assert.equal(1, notified)
    assert.equal(1, W.count(fs.join(dir, 'watch.out'), 'CHANGE regression p50: lizard measured create up from run 6'))
  end)

  it('reports nothing on a provider whose latency only jitters', function()
    local dir = H.tempdir('cseng-watch-jitter-')
    local fake = lizard.start { latency = { create = function(n) return 0.050 + jitter(n, 0.010) end, exec = steady, delete = steady } }
    local code = watch_of(dir, fake)
    fake.close()
    assert.equal(0, code, fs.read(fs.join(dir, 'watch.err')))
    local S = assert(store.open(dir))
    S:sync()
    assert.equal(8, #S:judged_runs('watch:wspec'))
    assert.same({}, S:changes('watch:wspec'))
    S:close()
  end)
end)
