-- Installed coding agents as solvers: the real Codex CLI (npm @openai/codex) and Claude Code (npm
-- @anthropic-ai/claude-code), pinned and installed by `make deps-agents`, run inside local sandboxes
-- against fakes of the API each speaks (spec/fakes/llm/responses.lua: OpenAI Responses;
-- spec/fakes/llm/messages.lua: Anthropic Messages), whose scripted "model" sends the shell tool calls
-- that apply each task's gold fix; the CLI runs them. Both tasks pass, nop stays 0, the trajectory
-- is valid ATIF, and the CLI reaches the fake through the run's model proxy
-- (lua/cseng/evals/proxy.lua): the sandbox holds a token, the fake sees only the real key, and the
-- tokens and cost are the proxy's counts of the fake's answers.
local fs = require('cseng.fs')
local installed = require('solvers.shared.installed')

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-installed-spec') end)
teardown(function() H.close() end)

-- each agent: its solver, the fake of its API, the variables that point it there, its shell tool
local AGENTS = {
  { solver = 'codex', fake = 'responses', tool = 'exec_command', agent_name = 'codex',
    env = function(f) return { OPENAI_API_KEY = H.KEY, CODEX_BASE_URL = f.url, CODEX_MODEL = H.MODEL } end,
    missing = 'set OPENAI_API_KEY', model_var = 'CODEX_MODEL' },
  { solver = 'claude_code', fake = 'messages', tool = 'Bash', agent_name = 'claude-code',
    env = function(f) return { ANTHROPIC_API_KEY = H.KEY, ANTHROPIC_BASE_URL = f.url, CLAUDE_CODE_MODEL = H.MODEL } end,
    missing = 'set ANTHROPIC_API_KEY', model_var = 'CLAUDE_CODE_MODEL' },
}

for _, A in ipairs(AGENTS) do
  local mod = require('solvers.' .. A.solver)
  local have = fs.exists(installed.NODE_MODULES .. '/' .. mod.BINARY)
  describe('the ' .. A.solver .. ' solver', function()
    if not have then
      pending('needs ' .. installed.NODE_MODULES .. '/' .. mod.BINARY .. ' (make deps-agents)')
      return
    end

    it('solves two bundled tasks in local sandboxes through the model proxy; usage and cost from the answers', function()
      local fk = require('spec.fakes.llm.' .. A.fake)
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = H.gold_script }
      local env = A.env(f)
      env.CSENG_LLM_PRICE_IN, env.CSENG_LLM_PRICE_OUT = '1', '2' -- USD per 1M tokens
      local status, s = H.run({ solver = A.solver, tasks = H.ids(2), concurrency = 2 }, env)
      f.close()
      local st = f.stats()
      assert.same({}, st.problems)
      assert.equal(0, st.unauthorized)
      assert.equal(2, st.conversations)
      assert.equal(6, st.completions) -- per task: write the fix, run it, answer
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(2, s.passed)
      -- each answer priced as it came: input 1000t + 7 at $1/M, output 50 + t at $2/M, turns 1..3
      local want = ((1007 + 2007 + 3007) * 1 + (51 + 52 + 53) * 2) / 1e6
      for _, r in ipairs(s.results) do
        local u = H.assert_installed_solved(r, A)
        assert.equal('prices', u.cost_source)
        assert.near(want, u.cost_usd, 1e-12)
        assert.equal(2, r.cost and #r.cost.items)
        assert.same({ item = 'model', model = H.MODEL, usd = u.cost_usd, source = 'prices', tokens = { input = 6021,
          cached = 0, cache_creation = 0, output = 156, reasoning = 0 } }, r.cost.items[2])
      end
      assert.near(2 * want, s.cost.model_usd, 1e-12)
    end)

    if A.solver == 'codex' then
      it('warm: the CLI is part of the warm artifact (named with its tag), so no trial uploads it', function()
        local fk = require('spec.fakes.llm.' .. A.fake)
        local f = fk.start { api_key = H.KEY, model = H.MODEL, script = H.gold_script }
        local status, s, _, events = H.run({ solver = A.solver, tasks = H.ids(2), mode = 'warm', concurrency = 2 }, A.env(f))
        f.close()
        assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
        for _, r in ipairs(s.results) do
          assert.equal('passed', r.outcome, tostring(r.error))
          assert.equal('present', r.solver_usage.install)
          assert.equal('warm_artifact', r.environment.method)
          assert.matches('-' .. mod.artifact_tag, tostring(r.warm_artifact), 1, true)
        end
        local prewarmed = 0
        for _, e in ipairs(events) do if e.event == 'prewarmed' then prewarmed = prewarmed + 1 end end
        assert.equal(2, prewarmed)
      end)
    end

    if A.solver == 'codex' then
      it('--model-key sandbox: the real key goes into the sandbox (no proxy), said in one warning line', function()
        local fk = require('spec.fakes.llm.' .. A.fake)
        local f = fk.start { api_key = H.KEY, model = H.MODEL, script = H.gold_script }
        local warnings = {}
        local status, s, _, events = H.run({ solver = A.solver, tasks = H.ids(1), model_key = 'sandbox',
          observers = { function(_, name, d) if name == 'warning' then warnings[#warnings + 1] = d.text end end } }, A.env(f))
        f.close()
        assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
        assert.equal(0, f.stats().unauthorized) -- the CLI sent the key itself
        assert.equal(1, #warnings)
        assert.matches('codex: the real model key is placed in every local sandbox %(asked for with %-%-model%-key sandbox%)',
          warnings[1])
        local u = s.results[1].solver_usage
        assert.equal('sandbox', u.model_key)
        assert.is_nil(u.counted_by) -- the CLI's own figures
        assert.equal(1007 + 2007 + 3007, u.prompt_tokens)
        for _, e in ipairs(events) do
          if e.event == 'run_started' then assert.equal('sandbox', e.options.model_key) end
        end
      end)
    end

    it('fails before any sandbox without its key', function()
      local ok, err = pcall(H.run, { solver = A.solver, tasks = H.ids(1) }, { [A.model_var] = 'm' })
      assert.is_false(ok)
      assert.matches(A.missing, tostring(err), 1, true)
    end)
  end)
end

describe('nop on the same tasks', function()
  it('passes none (the fix is the agent\'s)', function()
    local _, s = H.run({ solver = 'nop', tasks = H.ids(2), concurrency = 2 }, {})
    assert.equal(0, s.passed)
    assert.equal(2, s.failed)
  end)
end)
