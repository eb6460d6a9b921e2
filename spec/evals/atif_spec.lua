-- ATIF trajectories (lua/cseng/evals/atif.lua): the validator's rules (docs/SOLVERS.md "ATIF"),
-- each broken on purpose, and the trajectory every openrouter trial writes, checked against the
-- validator and against the fake's own counts.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local atif = require('cseng.evals.atif')

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-atif-spec') end)
teardown(function() H.close() end)

-- A small valid document (the RFC's three-step shape: user, agent with two tool calls, agent).
local function sample()
  return {
    schema_version = 'ATIF-v1.4', session_id = 's-1',
    agent = { name = 'a', version = '1.0', model_name = 'm' },
    steps = {
      { step_id = 1, timestamp = '2026-01-01T00:00:00Z', source = 'user', message = 'do it' },
      { step_id = 2, source = 'agent', message = 'calling', tool_calls = {
          { tool_call_id = 'c1', function_name = 'bash', arguments = { command = 'ls' } },
          { tool_call_id = 'c2', function_name = 'bash', arguments = { command = 'pwd' } } },
        observation = { results = { { source_call_id = 'c1', content = 'x' }, { source_call_id = 'c2', content = '/' } } },
        metrics = { prompt_tokens = 500, completion_tokens = 80, cached_tokens = 200, cost_usd = 0.0004 } },
      { step_id = 3, source = 'agent', message = 'done', metrics = { prompt_tokens = 600, completion_tokens = 44, cost_usd = 0.0003,
        extra = { reasoning_tokens = 12 } } },
    },
    final_metrics = { total_prompt_tokens = 1100, total_completion_tokens = 124, total_cached_tokens = 200,
      total_cost_usd = 0.0007, total_steps = 3 },
  }
end

local function problems(doc)
  local ok, p = atif.validate(doc)
  assert.is_nil(ok)
  return table.concat(p, '\n')
end

describe('the ATIF validator', function()
  it('accepts a valid document, also after a JSON round trip', function()
    assert.is_true((atif.validate(sample())))
    assert.is_true((atif.validate_text(jsonl.encode(sample()))))
  end)

  -- each case breaks one rule of Harbor's models (src/harbor/models/trajectories/*.py) or one of
  -- cseng's own; the problem names the field as pydantic locates it (0-based)
  local cases = {
    { 'schema_version', function(d) d.schema_version = '1.4' end, "schema_version: Input should be 'ATIF-v1.0' or" },
    { 'agent.version', function(d) d.agent.version = nil end, 'agent.version: Field required' },
    { 'agent.name a string', function(d) d.agent.name = 7 end, 'agent.name: Input should be a valid string' },
    { 'no steps', function(d) d.steps = {} d.final_metrics = nil end, 'steps: List should have at least 1 item' },
    { 'step ids sequential from 1', function(d) d.steps[2].step_id = 5 end, 'steps[1].step_id: expected 2 (sequential from 1), got 5' },
    { 'step_id >= 1', function(d) d.steps[1].step_id = 0 end, 'steps.0.step_id: Input should be greater than or equal to 1' },
    { 'source', function(d) d.steps[1].source = 'tool' end, "steps.0.source: Input should be 'system' or 'user' or 'agent'" },
    { 'message required', function(d) d.steps[3].message = nil end, 'steps.2.message: Field required' },
    { 'agent-only fields', function(d) d.steps[1].reasoning_content = 'hm' end,
      "steps.0: Value error, Field 'reasoning_content' is only applicable when source is 'agent'" },
    { 'timestamp', function(d) d.steps[1].timestamp = 'yesterday' end, 'steps.0.timestamp: Value error, Invalid ISO 8601 timestamp' },
    { 'arguments an object', function(d) d.steps[2].tool_calls[1].arguments = 'ls' end,
      'steps.1.tool_calls.0.arguments: Input should be a valid dictionary' },
    { 'unknown field (extra forbidden)', function(d) d.steps[2].tool_calls[1].timeout = 5 end,
      'steps.1.tool_calls.0.timeout: Extra inputs are not permitted' },
    { 'dangling source_call_id', function(d) d.steps[2].observation.results[2].source_call_id = 'zz' end,
      "Observation result references source_call_id 'zz' which is not found in step 2's tool_calls" },
    { 'llm_call_count >= 0', function(d) d.steps[3].llm_call_count = -1 end, 'steps.2.llm_call_count: Input should be greater than or equal to 0' },
    { 'llm_call_count 0 has no metrics', function(d) d.steps[3].llm_call_count = 0 end,
      "steps.2: Value error, Field 'metrics' must be absent when llm_call_count is 0" },
    { 'content part text', function(d) d.steps[1].message = { { type = 'text' } } end,
      "steps.0.message.0: Value error, 'text' field is required when type='text'" },
    { 'content part image source', function(d) d.steps[1].message = { { type = 'image', source = { media_type = 'image/bmp', path = 'x' } } } end,
      "steps.0.message.0.source.media_type: Input should be 'image/jpeg' or" },
    { 'subagent ref resolvable', function(d) d.steps[2].observation.results[1].subagent_trajectory_ref = { { session_id = 's' } } end,
      'SubagentTrajectoryRef must be resolvable' },
    { 'embedded subagents have ids', function(d)
      d.subagent_trajectories = { { agent = { name = 'sub', version = '1' }, steps = { { step_id = 1, source = 'user', message = 'x' } } } }
    end, 'subagent_trajectories[0].trajectory_id is required for embedded subagents' },
    { 'total_steps >= 0', function(d) d.final_metrics.total_steps = -1 end, 'final_metrics.total_steps: Input should be greater than or equal to 0' },
    -- cseng's own rules (stricter than Harbor's models)
    { 'duplicate call ids', function(d) d.steps[2].tool_calls[2].tool_call_id = 'c1' end, 'duplicate c1' },
    { 'integer tokens', function(d) d.steps[3].metrics.prompt_tokens = 1.5 end, 'steps.2.metrics.prompt_tokens: Input should be a valid integer' },
    { 'cached within prompt', function(d) d.steps[2].metrics.cached_tokens = 501 end, 'more than prompt_tokens' },
    { 'totals equal the steps', function(d) d.final_metrics.total_prompt_tokens = 1101 end,
      'final_metrics.total_prompt_tokens: 1101, but the steps sum to 1100' },
    { 'cost total', function(d) d.final_metrics.total_cost_usd = 0.001 end, 'final_metrics.total_cost_usd' },
    { 'total_steps', function(d) d.final_metrics.total_steps = 4 end, 'final_metrics.total_steps: 4 for 3 steps' },
  }
  for _, c in ipairs(cases) do
    it('rejects: ' .. c[1], function()
      local d = sample()
      c[2](d)
      assert.matches(c[3], problems(d), 1, true)
    end)
  end

  it('accepts what v1.7 adds: tool definitions, content parts, trajectory ids, llm_call_count, extra, embedded subagents', function()
    local d = sample()
    d.schema_version = 'ATIF-v1.7'
    d.session_id = nil -- optional since v1.7
    d.trajectory_id = 't-root'
    d.agent.tool_definitions = { { type = 'function', ['function'] = { name = 'bash', parameters = { type = 'object' } } } }
    d.steps[1].message = { { type = 'text', text = 'look:' }, { type = 'image', source = { media_type = 'image/png', path = 'a.png' } } }
    d.steps[2].llm_call_count = 1
    d.steps[2].tool_calls[1].extra = { retries = 0 }
    d.steps[2].observation.results[1].extra = { score = 0.5 }
    d.steps[2].observation.results[2].subagent_trajectory_ref = { { trajectory_id = 'sub-1', session_id = 's-1' } }
    d.subagent_trajectories = { { trajectory_id = 'sub-1', agent = { name = 'sub', version = '1' },
      steps = { { step_id = 1, source = 'user', message = 'x' }, { step_id = 2, source = 'agent', message = 'ok', llm_call_count = 0 } } } }
    d.extra = { cseng = true }
    local ok, p = atif.validate(d)
    assert.is_true(ok, table.concat(p or {}, '\n'))
    assert.is_true((atif.harbor(d)))
  end)

  it('Harbor\'s models alone accept what only cseng refuses (its stricter rules are its own)', function()
    local d = sample()
    d.final_metrics.total_prompt_tokens = 1101
    assert.is_true((atif.harbor(d)))
    assert.is_nil((atif.validate(d)))
  end)

  it('collects every problem, not just the first', function()
    local d = sample()
    d.agent.version = nil
    d.steps[1].source = 'x'
    d.final_metrics.total_completion_tokens = 1
    local _, p = atif.validate(d)
    assert.equal(3, #p)
  end)

  it('builds documents whose final_metrics are the sums of the steps', function()
    local tr = atif.new { session_id = 's', agent = { name = 'n', version = 'v' } }
    tr:system('sys')
    local st = tr:agent { message = '', tool_calls = { { id = 'k', name = 'bash', arguments = '{"command":"ls"}' } },
      metrics = { prompt_tokens = 10, completion_tokens = 2, cached_tokens = 4, cost_usd = 0.5 } }
    tr:observe(st, 'k', 'out')
    tr:agent { message = 'bye', tool_calls = { { id = 'j', name = 'bash', arguments = 'not json' } },
      metrics = { prompt_tokens = 7, completion_tokens = 3 } }
    local doc = tr:finish()
    assert.is_true((atif.validate(doc)))
    assert.same({ 17, 5, 4, 3, 0.5 }, { doc.final_metrics.total_prompt_tokens, doc.final_metrics.total_completion_tokens,
      doc.final_metrics.total_cached_tokens, doc.final_metrics.total_steps, doc.final_metrics.total_cost_usd })
    assert.same({ raw = 'not json' }, doc.steps[3].tool_calls[1].arguments) -- malformed arguments kept as evidence
  end)
end)

describe('the openrouter agent', function()
  it('writes <trial>.trajectory.json for every trial: valid ATIF, totals equal to the usage and the fake', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), usage = function(conv)
      local p, c = 1000 * conv.turn + 7, 50 + conv.turn
      return { prompt_tokens = p, completion_tokens = c, total_tokens = p + c, cost = conv.turn / 1000,
        prompt_tokens_details = { cached_tokens = 100 * conv.turn }, completion_tokens_details = { reasoning_tokens = 3 } }
    end }
    local status, s = H.run({ tasks = H.ids(2) }, H.openrouter_env(f))
    assert.equal(0, status)
    assert.equal(2, #s.results)
    for _, r in ipairs(s.results) do
      assert.equal('passed', r.outcome, tostring(r.error))
      assert.matches('/trajectories/' .. r.task_id:gsub('%p', '%%%0') .. '%.trajectory%.json$', r.trajectory_path)
      local text = assert(fs.read(r.trajectory_path))
      local ok, p = atif.validate_text(text)
      assert.is_true(ok, table.concat(p or {}, '\n'))
      local doc = jsonl.decode(text)
      assert.equal('ATIF-v1.7', doc.schema_version)
      assert.equal('cseng-agent', doc.agent.name)
      assert.equal(H.MODEL, doc.agent.model_name)
      assert.matches('/' .. r.task_id:gsub('%p', '%%%0') .. '$', doc.session_id)
      -- system, user, then one agent step per completion
      assert.equal(5, #doc.steps)
      assert.same({ 'system', 'user', 'agent', 'agent', 'agent' },
        { doc.steps[1].source, doc.steps[2].source, doc.steps[3].source, doc.steps[4].source, doc.steps[5].source })
      local u = r.solver_usage
      local fm = doc.final_metrics
      assert.equal(u.prompt_tokens, fm.total_prompt_tokens)
      assert.equal(u.completion_tokens, fm.total_completion_tokens)
      assert.equal(u.cached_tokens, fm.total_cached_tokens)
      assert.equal(600, fm.total_cached_tokens)
      assert.equal(9, fm.extra.reasoning_tokens)
      assert.near(u.cost_usd, fm.total_cost_usd, 1e-12)
      assert.equal('done', fm.extra.stop_reason)
      -- each tool call is answered by an observation with its id, carrying what the model saw
      for i = 3, 4 do
        local st = doc.steps[i]
        assert.equal(1, #st.tool_calls)
        assert.equal('bash', st.tool_calls[1].function_name)
        assert.is_string(st.tool_calls[1].arguments.command)
        assert.equal(st.tool_calls[1].tool_call_id, st.observation.results[1].source_call_id)
        assert.matches('^exit code: 0', st.observation.results[1].content)
      end
      assert.equal('Done.', doc.steps[5].message)
    end
    -- the fake's ids are the trajectory's ids: call_<request number>_1, every one seen once
    local issued, seen = {}, 0
    for _, lg in ipairs(f.stats().requests_log) do issued[string.format('call_%d_1', lg.n)] = true end
    for _, r in ipairs(s.results) do
      local doc = jsonl.decode(assert(fs.read(r.trajectory_path)))
      for _, st in ipairs(doc.steps) do
        for _, tc in ipairs(st.tool_calls or {}) do
          assert.is_true(issued[tc.tool_call_id], tc.tool_call_id)
          issued[tc.tool_call_id] = nil
          seen = seen + 1
        end
      end
    end
    assert.equal(4, seen)
    assert.equal(4, f.stats().tool_calls_issued)
  end)

  it('writes the trajectory of a solve that failed on the API too (stop_reason error)', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), fault = function(conv)
      if conv.turn == 2 then return 400 end
    end }
    local status, s = H.run({ tasks = H.ids(1) }, H.openrouter_env(f))
    assert.equal(1, status)
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('solve', r.error_stage)
    local text = assert(fs.read(r.trajectory_path))
    assert.is_true((atif.validate_text(text)))
    local doc = jsonl.decode(text)
    assert.equal(3, #doc.steps) -- system, user, the one completion that came back
    assert.equal('error', doc.final_metrics.extra.stop_reason)
    assert.equal(r.solver_usage.prompt_tokens, doc.final_metrics.total_prompt_tokens)
  end)
end)
