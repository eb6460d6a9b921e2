-- Infra vs agent failure (lua/cseng/evals/probe.lua): a sandbox destroyed for real in the middle
-- of an agent's solve is recorded as an ESANDBOX error (retriable: --retry-errors reruns it), not
-- as the agent failing; an agent that fails in a live sandbox stays `failed`.

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-probe-spec') end)
teardown(function()
  package.loaded['providers.killable_local'] = nil
  H.close()
end)

-- The local provider, remembering its sandboxes so the spec can kill one (local's own destroy:
-- unmount, cgroups and root removed, as a provider reaping a sandbox would).
local base = require('providers.local')
local live = {}
package.loaded['providers.killable_local'] = setmetatable({
  name = 'killable_local',
  create = function(client, spec)
    local sb, err, code = base.create(client, spec)
    if sb then live[#live + 1] = { client = client, sb = sb } end
    return sb, err, code
  end,
}, { __index = base })

local function kill_latest()
  local l = assert(live[#live], 'no sandbox to kill')
  assert(base.destroy(l.client, l.sb))
end

-- A model that kills its sandbox at turn 2 of its first conversation, then keeps calling bash.
local function killer()
  local conversations = 0
  return function(conv)
    if conv.turn == 1 then conversations = conversations + 1 end
    if conversations == 1 then
      if conv.turn == 2 then kill_latest() end
      return { tool_calls = { { command = 'echo still here' } } }
    end
    local c = H.gold_commands(conv)[conv.turn]
    if c then return { tool_calls = { { command = c } } } end
    return { content = 'Done.' }
  end
end

describe('a sandbox killed mid-solve', function()
  it('is an ESANDBOX error in the solve stage, not an agent failure', function()
    local f = H.start { script = killer() }
    local status, s = H.run({ provider = 'killable_local', tasks = H.ids(1), max_turns = 4 }, H.openrouter_env(f))
    assert.equal(1, status)
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('ESANDBOX', r.error_code)
    assert.equal('solve', r.error_stage)
    assert.is_true(r.retriable)
    assert.is_false(r.probe.alive)
    assert.matches('the sandbox died during the solve', r.error, 1, true)
    -- what the agent saw is kept: its next command found the sandbox gone
    assert.equal('error', r.solver_usage.stop_reason)
    assert.equal(2, r.solver_usage.turns)
    assert.is_nil(r.phases.verify_seconds) -- no verdict on a dead sandbox
    assert.equal(1, s.errors)
    assert.equal(0, s.failed)
  end)

  it('is retried by --retry-errors, and the retry is judged on its own', function()
    local f = H.start { script = killer() }
    local status, s, _, events = H.run({ provider = 'killable_local', tasks = H.ids(1), max_turns = 4,
      retry_errors = 1 }, H.openrouter_env(f))
    assert.equal(0, status)
    local r = s.results[1]
    assert.equal('passed', r.outcome)
    assert.equal(2, r.try)
    local tries = 0
    for _, e in ipairs(events) do
      if e.event == 'trial_try' then tries = tries + 1; assert.equal('ESANDBOX', e.error_code) end
    end
    assert.equal(1, tries)
  end)

  it('an agent that fails in a live sandbox is `failed`, and the probe says the sandbox lived', function()
    local f = H.start { script = function() return { tool_calls = { { command = 'false' } } } end }
    local status, s = H.run({ tasks = H.ids(1), max_turns = 2 }, H.openrouter_env(f))
    assert.equal(0, status)
    local r = s.results[1]
    assert.equal('failed', r.outcome)
    assert.is_true(r.probe.alive)
    assert.is_nil(r.error_code)
  end)
end)
