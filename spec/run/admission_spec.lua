-- Adaptive admission of creates (lua/cseng/run/admission.lua) against a loopback fake with a hidden
-- create rate (spec/fakes/admission.lua): the run converges below it without failed trials,
-- recovers when the limit rises, and a Retry-After pauses every worker's creates. Verdicts are
-- counts (429s, failed trials, limits reached), never times.
local session = require('cseng.run.session')
local admission = require('cseng.run.admission')
local results = require('cseng.results.log')
local task = require('cseng.task')

local fake_mod = require('spec.fakes.admission')
local H = require('spec.helpers.common')

local tmp = H.tempdir('cseng-admission-spec')
teardown(H.remove_tempdirs)

local n_session = 0
local function open(f, opts)
  n_session = n_session + 1
  opts.output = tmp .. '/run-' .. n_session
  local s = session.open { kind = 'tasks', opts = opts, id_parts = { 'admission', tostring(n_session) } }
  s:connect('lizard', { api_url = f.url, api_key = f.api_key, project_id = f.project_id })
  return s
end

-- n trials over `workers` tasks, each one create and one destroy; the failed ones' errors.
local function trials(s, n, workers)
  local next_i, failed = 0, {}
  local ts = {}
  for w = 1, workers do
    ts[w] = task.spawn(function()
      while next_i < n do
        next_i = next_i + 1
        local i = next_i
        local ok, err = pcall(function()
          local lease <close> = s:sandbox({}, { task_id = 't' .. i })
          assert(lease.id)
        end)
        if not ok then failed[#failed + 1] = tostring(type(err) == 'table' and err.message or err) end
      end
    end)
  end
  for _, t in ipairs(ts) do assert(task.join(t)) end
  return failed
end

local function events(s, reason)
  local out = {}
  for _, e in ipairs(results.read(s.jsonl)) do
    if e.event == 'admission' and (not reason or e.reason == reason) then out[#out + 1] = e end
  end
  return out
end

local function max_limit(evs)
  local m = 0
  for _, e in ipairs(evs) do m = math.max(m, e.limit) end
  return m
end

describe('adaptive admission', function()
  it('converges below a hidden create rate without failed trials, and recovers when it rises', function()
    local f = fake_mod.start { rate = 20, latency = 0.05 }
    local s = open(f, { concurrency = 16, admission_start = 4 })
    local failed = trials(s, 60, 16)
    local st1 = f.stats()
    local ev1 = events(s)
    assert.same({}, failed)
    assert.equal(60, st1.created)
    assert.equal(60, st1.deletes)
    assert.is_true(st1.throttled > 0, 'the hidden rate was reached') -- else the test shows nothing
    -- converged: most creates were admitted the first time (16 workers at once would be refused
    -- far more often: the mutation of admission = 'off' fails trials instead)
    assert.is_true(st1.throttled * 4 <= st1.created, string.format('%d 429s for %d creates', st1.throttled, st1.created))
    assert.is_true(#events(s, 'decrease') > 0)
    local before = max_limit(ev1)
    -- the limit rises: the controller probes upward past where it stood
    f.set { rate = 400 }
    failed = trials(s, 200, 16)
    assert.same({}, failed)
    local after = max_limit(events(s))
    assert.is_true(after > before, string.format('limit %d after the rise, %d before', after, before))
    assert.is_true(f.stats().max_in_flight > 4)
    local a = admission.stats(s).lizard
    assert.equal(f.stats().throttled, a.throttled)
    assert.equal(a.throttled, a.retried)
    f.close()
  end)

  it('a Retry-After pauses every worker: at most one 429 per worker per ban', function()
    local f = fake_mod.start { rate = 20, latency = 0.02, retry_after = 1 }
    local s = open(f, { concurrency = 8 })
    local failed = trials(s, 40, 8)
    local st = f.stats()
    assert.same({}, failed)
    assert.equal(40, st.created)
    assert.is_true(st.bans >= 1, 'the hidden rate was reached')
    assert.is_true(#events(s, 'pause') >= 1)
    -- each ban (the fake's count) catches at most the creates already in flight (8) when it
    -- started; without the pause the workers would retry into the ban
    assert.is_true(st.banned <= 8 * st.bans, string.format('%d creates during %d bans', st.banned, st.bans))
    f.close()
  end)

  it('off: the bound only, a 429 fails the trial (a measurement run sees the provider as it is)', function()
    local f = fake_mod.start { rate = 20, latency = 0.05 }
    local s = open(f, { concurrency = 16, admission = 'off' })
    local failed = trials(s, 40, 16)
    assert.is_true(#failed > 0)
    assert.equal(#failed, f.stats().throttled)
    assert.same({}, events(s))
    f.close()
    assert.equal('off', admission.mode({}, 'startup'))
    assert.equal('adaptive', admission.mode({}, 'tasks'))
    assert.has_error(function() admission.mode({ admission = 'fast' }, 'tasks') end,
      "admission: expected 'adaptive', 'fixed' or 'off', got fast")
  end)

  it('a Retry-After beyond the deadline refuses every waiting create at once; within it they wait', function()
    local c = admission.new('p', { bound = 4 })
    local seq = assert(c:acquire(math.huge))
    c:release()
    c:throttled(seq, 'HTTP_429', 30)
    local clock = require('cseng.clock')
    local deadline = clock.now() + 1e9 -- 1 s: the pause (30 s) outlasts it
    local ts, got = {}, {}
    for i = 1, 4 do ts[i] = task.spawn(function() got[i] = c:acquire(deadline) end) end
    for i = 1, 4 do assert(task.join(ts[i])) end
    assert.same({ false, false, false, false }, got) -- all four, none admitted
    assert.equal(1, c.counts.paused)
    assert.equal(0, c.in_flight)
  end)

  it("an adapter's declared creates_per_minute and --concurrency bound the limit", function()
    local c = admission.new('x', { bound = 3, start = 10 })
    assert.equal(3, c.limit)
    assert.equal(5, admission.new('z', { bound = 5 }).limit) -- starts at the bound
    local ctl = admission.new('y', { bound = 2, creates_per_minute = 600, adaptive = false })
    assert.equal(2, ctl.limit)
    assert.equal(100000000, ctl.interval_ns)
    ctl:throttled(1, 'HTTP_429', nil)
    assert.equal(2, ctl.limit) -- fixed: no adaptation
  end)
end)

-- The latency gradient with the controller's own clock (a counter: no sleep, no reading of
-- time): latencies are fed, the limit's moves are counted.
describe('the latency gradient', function()
  local function controller(o)
    local t = 0
    o.now = function() t = t + 1 return t end
    return admission.new('g', o)
  end
  -- n creates one after another, each `ms` long; the limit's latency decreases among them
  local function feed(c, n, ms)
    local before = c.counts.latency_decreases
    for _ = 1, n do
      local seq = assert(c:acquire(math.huge))
      c:release()
      c:success()
      c:latency(seq, ms * 1e6)
    end
    return c.counts.latency_decreases - before
  end

  it('backs off when the create latency rises past the tolerance, and not below it', function()
    local evs = {}
    local c = controller { bound = 16, event = function(f) evs[#evs + 1] = f end }
    assert.equal(0, feed(c, 200, 100)) -- steady: no move
    assert.equal(16, c.limit)
    assert.equal(0, feed(c, 30, 190)) -- 1.9x the baseline: within the tolerance (2)
    assert.equal(16, c.limit)
    -- 4x: each window of 10 halves it (g = 2 x 100 / 400 = 0.5; the baseline, the 10th percentile
    -- of the last 128, is still 100 ms); the additive increase between windows cannot undo that
    local moves = feed(c, 40, 400)
    assert.equal(4, moves)
    assert.is_true(c.limit < 4, 'limit ' .. c.limit)
    local logged = 0 -- each decrease is an event naming its cause
    for _, e in ipairs(evs) do if e.reason == 'decrease' and e.code == 'latency' then logged = logged + 1 end end
    assert.equal(c.counts.decreases, logged)
    assert.is_true(logged >= 3)
  end)

  it('a lasting rise becomes the baseline: the additive increase probes upward again', function()
    local c = controller { bound = 16 }
    feed(c, 130, 100) -- whole windows
    assert.equal(6, feed(c, 60, 400)) -- six windows, six decreases
    local low = c.limit
    assert.is_true(low < 4, 'limit ' .. low)
    -- once half the long window (128) is at 400 ms, 400 ms is no longer a rise: no more
    -- decreases, and the additive increase climbs back
    assert.equal(0, feed(c, 200, 400))
    assert.is_true(c.limit > low + 5, string.format('limit %.1f, was %.1f', c.limit, low))
    assert.equal(0, feed(c, 100, 100)) -- faster again: never a decrease
  end)

  it('a wide spread is not a rise: latencies of 100 to 900 ms in turn never decrease it', function()
    local c = controller { bound = 16 }
    local n = 0
    for _ = 1, 100 do
      for _, ms in ipairs({ 100, 900, 300, 700, 500 }) do n = n + feed(c, 1, ms) end
    end
    assert.equal(0, n) -- the short median (500) is 5x the baseline (100) but no more than the long median
    assert.equal(16, c.limit)
  end)

  it('answers to creates started before a decrease do not decrease it again; fixed and model keys have none', function()
    local c = controller { bound = 32 }
    feed(c, 130, 100) -- whole windows
    local seqs = {}
    for i = 1, 20 do seqs[i] = assert(c:acquire(math.huge)) end -- 20 in flight at once
    for _ = 1, 20 do c:release() end
    for i = 1, 10 do c:latency(seqs[i], 400e6) end
    assert.equal(1, c.counts.latency_decreases)
    for i = 11, 20 do c:latency(seqs[i], 400e6) end -- a whole window, all started before the decrease
    assert.equal(1, c.counts.latency_decreases)
    feed(c, 10, 400) -- started after it: they count
    assert.equal(2, c.counts.latency_decreases)
    local fixed = controller { bound = 4, adaptive = false }
    assert.equal(0, feed(fixed, 20, 100) + feed(fixed, 50, 1000))
    local model = controller { bound = 4, latency = false }
    assert.equal(0, feed(model, 20, 100) + feed(model, 50, 1000))
  end)
end)

describe('the latency gradient against a provider that queues', function()
  it('a rising create latency stops the probe below --concurrency, with no 429', function()
    -- 2 creates in flight take 40 ms each; 8 take 160 ms: the limit that starts at 2 climbs (healthy),
    -- the latency rises with it, and the gradient takes it back well below the bound (16)
    local f = fake_mod.start { rate = false, latency = 0.04, capacity = 2 }
    local s = open(f, { concurrency = 16, admission_start = 2 })
    local failed = trials(s, 100, 16)
    local st = f.stats()
    f.close()
    assert.same({}, failed)
    assert.equal(0, st.throttled)
    local a = admission.stats(s).lizard
    assert.is_true(a.latency_decreases >= 1, 'no latency decrease')
    local lat = 0
    for _, e in ipairs(events(s, 'decrease')) do if e.code == 'latency' then lat = lat + 1 end end
    assert.is_true(lat >= 1)
    -- the additive increase alone climbs from 2 to about 14 over 100 successes (L^2/2 ~ 100)
    assert.is_true(max_limit(events(s)) < 12, 'the limit climbed to ' .. max_limit(events(s)))
  end)
end)

describe('the arena burst pins admission off', function()
  it('a burst against a throttling provider: no admission event or wait, the 429s recorded as failures', function()
    local arena = require('cseng.run.kinds.startup')
    local f = fake_mod.start { rate = 5, latency = 0.05 }
    local sink = { text = '' }
    function sink:write(...) for _, x in ipairs({ ... }) do self.text = self.text .. tostring(x) end end
    local o = { providers = { 'liz' }, mode = 'burst', burst = 12, samples = 12, warmups = 0, seed = 3,
      output = tmp .. '/arena', quiet = true, cleanup_backoff = { 0.01 }, stderr = sink,
      provider_config = { liz = { adapter = 'lizard', api_url = f.url, api_key = f.api_key, project_id = f.project_id } } }
    local _, info = require('cseng.run.frame').run('startup', require('cseng.cli.present').attach(o, { err = sink }))
    local evs = results.read(info.jsonl)
    local failed, adm = 0, 0
    for _, e in ipairs(evs) do
      if e.event == 'startup_trial' and not e.ok and e.error_code == 'HTTP_429' then failed = failed + 1 end
      if e.event == 'admission' then adm = adm + 1 end
    end
    local st = f.stats()
    f.close()
    assert.is_true(st.throttled > 0, 'the burst passed the hidden rate')
    assert.equal(st.throttled, failed) -- every 429 a measured failure, none smoothed away
    assert.equal(12, st.creates) -- no create retried
    assert.equal(0, adm)
    assert.is_nil(results.summary(evs).admission)
    -- a startup plan cannot turn it on for a burst
    assert.has_error(function()
      arena.mode_options { mode = 'burst', samples = 4, admission = 'adaptive' }
    end, "admission: --mode burst measures the provider as it is (a true burst): admission must be 'off', got adaptive")
  end)
end)
