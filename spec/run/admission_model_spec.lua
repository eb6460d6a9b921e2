-- Adaptive admission of a model endpoint (lua/cseng/run/admission.lua, admission.endpoint; the
-- agent loop's ctx.admission, key model:<host>) against the chat-completions fake with a hidden
-- limit of one request at a time (spec/fakes/llm/fake.lua `limit`), reached whatever the
-- machine's speed: the fake holds its first request until another one was refused (`hold_first`).
-- The run ends with no failed trial although every completion may be tried only twice (a 429
-- under admission spends no try), with and without Retry-After; with admission off the same run
-- fails a trial. Verdicts are counts, never times.

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-admission-model-spec') end)
teardown(function() H.close() end)

local function admission_events(events, reason)
  local out = {}
  for _, e in ipairs(events) do
    if e.event == 'admission' and tostring(e.key):match('^model:') and (not reason or e.reason == reason) then
      out[#out + 1] = e
    end
  end
  return out
end

-- 3 tasks x 3 attempts (9 conversations of 3 completions) on 3 workers, 2 tries per completion.
local function run(f, extra)
  local o = { tasks = H.ids(3), attempts = 3, concurrency = 3, llm_attempts = 2 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return H.run(o, H.openrouter_env(f))
end

describe('admission of a model endpoint', function()
  it('throttled by the endpoint: the limit halves, every 429 retried, no failed trial', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), limit = 1, hold_first = 1 }
    local status, summary, _, events = run(f)
    local st = f.stats()
    assert.equal(0, status)
    assert.equal(9, summary.task_count)
    assert.equal(9, summary.passed, 'no failed trial')
    assert.equal(0, summary.errors)
    assert.equal(27, st.completions)
    assert.equal(1, st.held)
    assert.is_true(st.rate_limited >= 1, 'the hidden limit was reached') -- else the spec shows nothing
    -- the refusals met the first (held) request: after them admission never sent two at once
    -- (the fake answers without yielding, so only the held request can overlap another)
    assert.is_true(st.rate_limited <= 2, st.rate_limited .. ' 429s: more than the two other workers\' first requests')
    local dec = admission_events(events, 'decrease')
    assert.is_true(#dec >= 1)
    assert.is_true(dec[1].limit < 3, 'the first decrease lowered the limit from --concurrency')
    local total = admission_events(events, 'total')
    assert.equal(1, #total)
    assert.equal(st.rate_limited, total[1].throttled) -- every 429 seen, none lost
    assert.equal(summary.admission[total[1].key].throttled, st.rate_limited)
    local throttled = 0
    for _, r in ipairs(summary.results) do throttled = throttled + (r.solver_usage.throttled or 0) end
    assert.equal(st.rate_limited, throttled) -- each one retried inside its trial
  end)

  it('with Retry-After: the pause holds every conversation, no failed trial', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), limit = 1, hold_first = 1, retry_after = 0.5 }
    local status, summary, _, events = run(f)
    local st = f.stats()
    assert.equal(0, status)
    assert.equal(9, summary.passed)
    assert.is_true(st.rate_limited >= 1)
    local pauses = admission_events(events, 'pause')
    assert.is_true(#pauses >= 1)
    assert.equal(0.5, pauses[1].retry_after_s)
  end)

  it('a trial cut by its timeout mid-request gives its place back', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), latency = 20 }
    local _, summary, _, events = H.run({ tasks = H.ids(1), timeout_seconds = 1 }, H.openrouter_env(f))
    assert.equal(1, summary.errors) -- timed out
    local total = admission_events(events, 'total')
    assert.equal(1, #total)
    assert.equal(0, total[1].in_flight) -- the cancelled request released it (else every later one waits)
  end)

  it('off: the same endpoint fails a trial (each 429 spends one of the two tries)', function()
    -- held until one conversation was refused twice: without admission its retry comes while the
    -- first request still holds the endpoint's one place, and its completion has no try left
    local f = H.start { script = H.llm.replay(H.gold_commands), limit = 1, hold_first = 2 }
    local _, summary, _, events = run(f, { admission = 'off' })
    assert.is_true(summary.errors >= 1, 'a trial failed on 429')
    local failed = 0
    for _, r in ipairs(summary.results) do
      if r.outcome == 'error' then
        failed = failed + 1
        assert.equal('HTTP_429', r.error_code, tostring(r.error))
      end
    end
    assert.equal(summary.errors, failed)
    assert.same({}, admission_events(events))
    assert.is_nil(summary.admission)
  end)
end)
