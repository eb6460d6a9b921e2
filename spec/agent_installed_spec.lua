-- Installed coding agents as solvers: the real Codex CLI (npm @openai/codex) and Claude Code (npm
-- @anthropic-ai/claude-code), pinned and installed by `make deps-agents`, run inside local sandboxes
-- against fakes of the API each speaks (spec/fakes/llm/responses.lua: OpenAI Responses;
-- spec/fakes/llm/messages.lua: Anthropic Messages), whose scripted "model" sends the shell tool calls
-- that apply each task's gold fix; the CLI runs them. Both tasks pass, nop stays 0, the trajectory
-- is valid ATIF and the tokens are the fake's.
local sys = require 'cseng.sys'
local fs = require 'cseng.fs'
local jsonl = require 'cseng.lib.jsonl'
local atif = require 'cseng.agent.atif'
local installed = require 'solvers.installed'

local ROOT = sys.root()
local H
setup(function() H = dofile(ROOT .. '/spec/fakes/llm/harness.lua').new('cseng-installed-spec') end)
teardown(function() H.close() end)

-- the task whose instruction the prompt holds
local function task_in(text)
  for _, t in ipairs(H.tasks) do
    if t.instruction and text:find(t.instruction, 1, true) then return t end
  end
  error('the prompt holds no known instruction: ' .. text:sub(1, 120))
end

local function gold_script(conv)
  local t = task_in(conv.user)
  local solve = assert(fs.read(t.dir .. '/solution/solve.sh'))
  local cmds = {
    "mkdir -p /tmp/replay && cat > /tmp/replay/solve.sh <<'CSENG_REPLAY_EOF'\n" .. solve .. '\nCSENG_REPLAY_EOF',
    'bash /tmp/replay/solve.sh && echo replayed',
  }
  local c = cmds[conv.turn]
  if c then return { tool_calls = { { command = c } } } end
  return { content = 'Done.' }
end


-- each agent: its solver, the fake of its API, the variables that point it there, its shell tool
local AGENTS = {
  { solver = 'codex', fake = 'responses.lua', tool = 'exec_command', agent_name = 'codex',
    env = function(f) return { OPENAI_API_KEY = H.KEY, CODEX_BASE_URL = f.url, CODEX_MODEL = H.MODEL } end,
    missing = 'set OPENAI_API_KEY', model_var = 'CODEX_MODEL' },
  { solver = 'claude_code', fake = 'messages.lua', tool = 'Bash', agent_name = 'claude-code',
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

    it('solves two bundled tasks in local sandboxes against its API fake; the trajectory validates', function()
      local fk = dofile(ROOT .. '/spec/fakes/llm/' .. A.fake)
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = gold_script }
      local status, s = H.run({ solver = A.solver, tasks = H.ids(2), concurrency = 2 }, A.env(f))
      f.close()
      local st = f.stats()
      assert.same({}, st.problems)
      assert.equal(0, st.unauthorized)
      assert.equal(2, st.conversations)
      assert.equal(6, st.completions) -- per task: write the fix, run it, answer
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(2, s.passed)
      for _, r in ipairs(s.results) do
        assert.equal('passed', r.outcome, tostring(r.error) .. ' ' .. tostring(r.solve_stderr_tail))
        local u = r.solver_usage
        assert.equal('done', u.stop_reason)
        assert.equal(2, u.commands)
        assert.equal('uploaded', u.install)
        -- the fake's default usage per turn n: input 1000n + 7, output 50 + n (n = 1..3)
        assert.equal(1007 + 2007 + 3007, u.prompt_tokens)
        assert.equal(51 + 52 + 53, u.completion_tokens)
        local text = assert(fs.read(r.trajectory_path))
        local ok, p = atif.validate_text(text)
        assert.is_true(ok, table.concat(p or {}, '\n'))
        local doc = jsonl.decode(text)
        assert.equal(A.agent_name, doc.agent.name)
        assert.equal(u.prompt_tokens, doc.final_metrics.total_prompt_tokens)
        assert.equal(u.completion_tokens, doc.final_metrics.total_completion_tokens)
        local calls = 0
        for _, step in ipairs(doc.steps) do
          for _, tc in ipairs(step.tool_calls or {}) do
            calls = calls + 1
            assert.equal(A.tool, tc.function_name)
            assert.equal(tc.tool_call_id, step.observation.results[1].source_call_id)
          end
        end
        assert.equal(2, calls)
        assert.equal(2, r.cost and #r.cost.items)
      end
    end)

    if A.solver == 'codex' then
      it('warm: the CLI is part of the warm artifact (named with its tag), so no trial uploads it', function()
        local fk = dofile(ROOT .. '/spec/fakes/llm/' .. A.fake)
        local f = fk.start { api_key = H.KEY, model = H.MODEL, script = gold_script }
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
