--- What the agent-eval specs share (spec/evals/atif_spec.lua, spec/agent_*_spec.lua): the bundled tasks,
--- the gold-replaying "model" for the chat-completions fake (spec/fakes/llm/fake.lua), and a runner call
--- on the local provider whose results go to a temporary directory.
---
---   local H = require('spec.fakes.llm.harness').new('cseng-atif-spec')
---   local f = H.start { script = H.llm.replay(H.gold_commands) }
---   local status, summary, info = H.run({ task_limit = 2 }, H.openrouter_env(f))
---   H.close()
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')

local ROOT = sys.root()
local M = {}

--- OpenCode and Gemini CLI (rows of lua/solvers/shared/agents.lua), each with the fake of the API
--- it speaks (a module name), its name in the ATIF document, the model it is run with when not the
--- harness's, and env(H, f): the variables that point it at the started fake f.
M.OPENCODE_GEMINI = {
  { solver = 'opencode', fake = 'spec.fakes.llm.chat_stream', agent_name = 'opencode',
    env = function(H, f) return { OPENCODE_API_KEY = H.KEY, OPENCODE_BASE_URL = f.url .. '/v1', OPENCODE_MODEL = H.MODEL } end },
  { solver = 'gemini_cli', fake = 'spec.fakes.llm.gemini', agent_name = 'gemini-cli', model = 'gemini-fake-1',
    env = function(H, f) return { GEMINI_API_KEY = H.KEY, GOOGLE_GEMINI_BASE_URL = f.url, GEMINI_MODEL = 'gemini-fake-1' } end },
}

function M.new(name)
  local H = { ROOT = ROOT, SMOKE = ROOT .. '/data/smoke.jsonl', llm = require('spec.fakes.llm.fake'),
    KEY = 'sk-test-' .. crypto.hex(crypto.random_bytes(12)), MODEL = 'fake/model-1' }
  H.tmp = assert(fs.tempdir(name))
  H.tasks = dataset.load(H.SMOKE)
  table.sort(H.tasks, function(a, b) return a.id < b.id end)
  local by_instruction = {}
  for _, t in ipairs(H.tasks) do by_instruction[t.instruction] = t end
  local fakes, run_no = {}, 0

  --- A fake on loopback with the harness's key and model.
  function H.start(opts)
    opts.api_key = opts.api_key or H.KEY
    opts.model = opts.model or H.MODEL
    local f = H.llm.start(opts)
    fakes[#fakes + 1] = f
    return f
  end

  --- The task a conversation is about, from its user message.
  function H.task_of(conv)
    local instruction = conv.user:match('^Working directory: [^\n]*\n\n(.*)$')
    return assert(by_instruction[instruction], 'the user message carries no known instruction')
  end

  --- The gold solution as two bash calls: write it into the sandbox, run it.
  function H.gold_commands(conv)
    local solve = assert(fs.read(H.task_of(conv).dir .. '/solution/solve.sh'))
    return {
      "mkdir -p /tmp/replay && cat > /tmp/replay/solve.sh <<'CSENG_REPLAY_EOF'\n" .. solve .. '\nCSENG_REPLAY_EOF',
      'bash /tmp/replay/solve.sh && echo replayed',
    }
  end

  --- The task whose instruction a prompt holds (the installed CLIs wrap the instruction in text of their own).
  function H.task_in(text)
    for _, t in ipairs(H.tasks) do
      -- trimmed: a CLI given the prompt as "$(cat prompt.md)" loses its final newlines
      if t.instruction and text:find((t.instruction:gsub('^%s+', ''):gsub('%s+$', '')), 1, true) then return t end
    end
    error('the prompt holds no known instruction: ' .. text:sub(1, 120))
  end

  --- The script of the Responses/Messages fakes that replays the gold fix: two shell calls, then an answer.
  function H.gold_script(conv)
    local solve = assert(fs.read(H.task_in(conv.user).dir .. '/solution/solve.sh'))
    local cmds = {
      "mkdir -p /tmp/replay && cat > /tmp/replay/solve.sh <<'CSENG_REPLAY_EOF'\n" .. solve .. '\nCSENG_REPLAY_EOF',
      'bash /tmp/replay/solve.sh && echo replayed',
    }
    local c = cmds[conv.turn]
    if c then return { tool_calls = { { command = c } } } end
    return { content = 'Done.' }
  end

  --- A trial of an installed agent (A: {agent_name, tool}) that solved its task with the gold script:
  --- passed, two commands, the fake's default usage (turn n: input 1000n + 7, output 50 + n) as the
  --- run's model proxy counted it from the three answers (the CLI's own report agreeing), and a
  --- valid ATIF trajectory whose tokens are the trial's and whose tool calls are answered by id.
  function H.assert_installed_solved(r, A)
    local assert = require('luassert') -- busted's (a required module runs outside the spec's environment)
    local atif = require('cseng.evals.atif')
    local jsonl = require('cseng.lib.jsonl')
    assert.equal('passed', r.outcome, tostring(r.error) .. ' ' .. tostring(r.solve_stderr_tail))
    local u = r.solver_usage
    assert.equal('done', u.stop_reason)
    assert.equal(2, u.commands)
    assert.equal('uploaded', u.install)
    assert.equal(1007 + 2007 + 3007, u.prompt_tokens)
    assert.equal(51 + 52 + 53, u.completion_tokens)
    -- counted by the proxy from the answers themselves: the sandbox held a token, not the key
    assert.equal('proxy', u.model_key)
    assert.equal('proxy', u.counted_by)
    assert.equal(3, u.requests)
    assert.equal(3, u.responses)
    assert.equal(0, u.responses_without_usage)
    assert.equal(0, u.refused.ceiling + u.refused.route)
    assert.equal(u.prompt_tokens, u.agent_reported.prompt_tokens)
    assert.equal(u.completion_tokens, u.agent_reported.completion_tokens)
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
    return u
  end

  function H.openrouter_env(f, extra)
    local env = { OPENROUTER_API_KEY = H.KEY, OPENROUTER_BASE_URL = f.url, OPENROUTER_MODEL = H.MODEL }
    for k, v in pairs(extra or {}) do env[k] = v end
    return env
  end

  --- runner.run_tasks on local (cold, concurrency 1 unless given), quiet; returns status, summary, info.
  function H.run(opts, env)
    run_no = run_no + 1
    opts.provider = opts.provider or 'local'
    opts.dataset = opts.dataset or H.SMOKE
    opts.solver = opts.solver or 'openrouter'
    opts.mode = opts.mode or 'cold'
    opts.concurrency = opts.concurrency or 1
    opts.output = opts.output or (H.tmp .. '/results-' .. run_no)
    opts.quiet = true
    opts.llm_backoff_seconds = opts.llm_backoff_seconds or 0.05
    opts.retry_delay_seconds = 0
    opts.env = env
    local status, info = frame.run('tasks', opts)
    local events = results.read(info.jsonl)
    return status, results.summary(events), info, events
  end

  -- bundled tasks whose verifiers are quick (the specs' run time is mostly verify)
  local QUICK = { 'awk-fixed-width-to-csv', 'csv-sales-report', 'python-fix-roman-numerals' }

  --- n task ids (n <= 3), quick ones first, sorted.
  function H.ids(n)
    local out = {}
    for i = 1, n do out[i] = assert(QUICK[i]) end
    table.sort(out)
    return out
  end

  function H.close()
    for _, f in ipairs(fakes) do f.close() end
    fs.remove_tree(H.tmp)
  end
  return H
end

return M
