-- Adaptive admission of a model endpoint (lua/cseng/run/admission.lua, admission.endpoint; the
-- agent loop's ctx.admission, key model:<host>) against the chat-completions fake with a hidden
-- request rate (spec/fakes/llm/fake.lua `rate`): the run converges below it with no failed trial
-- although every completion may be tried only twice (a 429 under admission spends no try), with
-- and without Retry-After; with admission off the same run fails trials. Verdicts are counts.
local sys = require 'cseng.sys'

local H
setup(function() H = dofile(sys.root() .. '/spec/fakes/llm/harness.lua').new('cseng-admission-model-spec') end)
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
  it('converges below a hidden request rate: no failed trial, the 429s bounded', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), rate = 8 }
    local status, summary, _, events = run(f)
    local st = f.stats()
    assert.equal(0, status)
    assert.equal(9, summary.task_count)
    assert.equal(9, summary.passed, 'no failed trial')
    assert.equal(0, summary.errors)
    assert.equal(27, st.completions)
    assert.is_true(st.rate_limited > 0, 'the hidden rate was reached') -- else the spec shows nothing
    -- converged: far fewer refusals than completions (no admission: every worker retries into it)
    assert.is_true(st.rate_limited * 2 <= st.completions,
      string.format('%d 429s for %d completions', st.rate_limited, st.completions))
    local dec = admission_events(events, 'decrease')
    assert.is_true(#dec >= 1)
    local total = admission_events(events, 'total')
    assert.equal(1, #total)
    assert.equal(st.rate_limited, total[1].throttled) -- every 429 seen, none lost
    assert.equal(summary.admission[total[1].key].throttled, st.rate_limited)
    local throttled = 0
    for _, r in ipairs(summary.results) do throttled = throttled + (r.solver_usage.throttled or 0) end
    assert.equal(st.rate_limited, throttled) -- each one retried inside its trial
  end)

  it('with Retry-After: the pause holds every conversation, no failed trial', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), rate = 8, rate_retry_after = 0.5 }
    local status, summary, _, events = run(f)
    local st = f.stats()
    assert.equal(0, status)
    assert.equal(9, summary.passed)
    assert.is_true(st.rate_limited > 0)
    assert.is_true(#admission_events(events, 'pause') >= 1)
    assert.is_true(st.rate_limited * 2 <= st.completions,
      string.format('%d 429s for %d completions', st.rate_limited, st.completions))
  end)

  it('a trial cut by its timeout mid-request gives its place back', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), latency = 20 }
    local _, summary, _, events = H.run({ tasks = H.ids(1), timeout_seconds = 1 }, H.openrouter_env(f))
    assert.equal(1, summary.errors) -- timed out
    local total = admission_events(events, 'total')
    assert.equal(1, #total)
    assert.equal(0, total[1].in_flight) -- the cancelled request released it (else every later one waits)
  end)

  it('off: the same run fails trials (each 429 spends one of the two tries)', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), rate = 8 }
    local _, summary, _, events = run(f, { admission = 'off' })
    assert.is_true(summary.errors > 0, 'trials failed on 429')
    assert.same({}, admission_events(events))
    assert.is_nil(summary.admission)
  end)
end)
