-- The LLM solvers (lua/solvers/shared/chat_loop.lua, openrouter.lua, ai_gateway.lua) end to end through the
-- runner on the local provider, against the scripted chat-completions fake (spec/fakes/llm/fake.lua).
-- The fake "model" replays each task's gold solution through bash tool calls, or misbehaves on
-- purpose; counts are asserted exactly on both sides.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local agent = require('solvers.shared.chat_loop')

local ROOT = sys.root()
local SMOKE = ROOT .. '/data/smoke.jsonl'
local llm = require('spec.fakes.llm.fake')

local KEY = 'sk-test-' .. crypto.hex(crypto.random_bytes(12))
local OIDC = 'oidc-test-' .. crypto.hex(crypto.random_bytes(12))
local MODEL = 'fake/model-1'

local tmp, tasks, by_instruction
local fakes = {}

setup(function()
  tmp = assert(fs.tempdir('cseng-solvers-spec'))
  tasks = dataset.load(SMOKE)
  by_instruction = {}
  for _, t in ipairs(tasks) do by_instruction[t.instruction] = t end
end)
teardown(function()
  for _, f in ipairs(fakes) do f.close() end
  fs.remove_tree(tmp)
end)

local function start(opts)
  opts.api_key = opts.api_key or KEY
  opts.model = opts.model or MODEL
  local f = llm.start(opts)
  fakes[#fakes + 1] = f
  return f
end

-- The task a conversation is about, from its user message ("Working directory: …\n\n<instruction>").
local function task_of(conv)
  local instruction = conv.user:match('^Working directory: [^\n]*\n\n(.*)$')
  return assert(by_instruction[instruction], 'the user message carries no known instruction')
end

-- The gold solution as two bash calls: write it into the sandbox, run it.
local function gold_commands(conv)
  local t = task_of(conv)
  local solve = assert(fs.read(t.dir .. '/solution/solve.sh'))
  return {
    "mkdir -p /tmp/replay && cat > /tmp/replay/solve.sh <<'CSENG_REPLAY_EOF'\n" .. solve .. '\nCSENG_REPLAY_EOF',
    'bash /tmp/replay/solve.sh && echo replayed',
  }
end

local run_no = 0
local function run(opts, env)
  run_no = run_no + 1
  opts.provider = 'local'
  opts.dataset = SMOKE
  opts.solver = opts.solver or 'openrouter'
  opts.mode = 'cold'
  opts.concurrency = 2
  opts.output = tmp .. '/results-' .. run_no
  opts.quiet = true
  opts.llm_backoff_seconds = opts.llm_backoff_seconds or 0.05
  opts.env = env
  local status, info = frame.run('tasks', opts)
  local s = results.summary(results.read(info.jsonl))
  return status, s, info
end

local function openrouter_env(f, extra)
  local env = { OPENROUTER_API_KEY = KEY, OPENROUTER_BASE_URL = f.url, OPENROUTER_MODEL = MODEL }
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

-- Expected sums of the fake's default usage over turns 1..n.
local function default_sums(n)
  local p, c = 0, 0
  for t = 1, n do p, c = p + 1000 * t + 7, c + 50 + t end
  return p, c
end

describe('the openrouter solver', function()
  it('replays the gold solutions through tool calls: both tasks pass, usage summed exactly', function()
    local f = start { script = llm.replay(gold_commands), usage = function(conv)
      local p, c = 1000 * conv.turn + 7, 50 + conv.turn
      return { prompt_tokens = p, completion_tokens = c, total_tokens = p + c, cost = conv.turn / 1000 }
    end }
    local status, s = run({ task_limit = 2 }, openrouter_env(f))
    assert.equal(0, status)
    assert.equal(2, #s.results)
    local st = f.stats()
    assert.same({}, st.problems)
    assert.equal(0, st.bad_requests)
    assert.equal(2, st.conversations)
    assert.equal(6, st.requests)        -- per task: write, run, final answer
    assert.equal(6, st.completions)
    assert.equal(4, st.tool_calls_issued)
    assert.equal(4, st.tool_results)    -- every tool call answered, once
    for _, lg in ipairs(st.requests_log) do
      assert.equal('/api/v1/chat/completions', lg.path)
      assert.equal('cseng', lg.x_title)
      assert.is_true(lg.usage_include)
      assert.equal(MODEL, lg.model)
    end
    local p, c = default_sums(3)
    for _, r in ipairs(s.results) do
      assert.equal('passed', r.outcome, tostring(r.error) .. ' ' .. tostring(r.stdout_tail))
      assert.equal(0, r.solve_return_code)
      assert.equal('the model finished', r.solve_note)
      -- the runner stores the transcript beside the log (docs/SOLVERS.md "Transcripts")
      assert.matches('/transcripts/[^/]+%.jsonl$', r.solver_transcript_path)
      local lines = 0
      for line in io.lines(r.solver_transcript_path) do lines = lines + 1; assert(require('cjson').decode(line)) end
      assert.is_true(lines >= 3)
      local u = r.solver_usage
      assert.equal('openrouter', u.provider)
      assert.equal(MODEL, u.model)
      assert.equal(MODEL, u.response_model)
      assert.equal('done', u.stop_reason)
      assert.equal(3, u.turns)
      assert.equal(2, u.tool_calls)
      assert.equal(2, u.commands)
      assert.equal(0, u.tool_errors)
      assert.equal(3, u.api_requests)
      assert.equal(0, u.retries)
      assert.equal(p, u.prompt_tokens)
      assert.equal(c, u.completion_tokens)
      assert.equal(p + c, u.total_tokens)
      assert.is_true(math.type(u.prompt_tokens) == 'integer')
      assert.near(0.006, u.cost_usd, 1e-12)
      assert.equal('provider', u.cost_source)
      assert.matches('%$ bash /tmp/replay/solve.sh && echo replayed\n  %-> exit 0', r.solve_stdout_tail)
      assert.matches('stop: done after 3 turn%(s%), 2 tool call%(s%)', r.solve_stdout_tail)
    end
    for _, conv in pairs(st.convs) do
      assert.equal(2, #conv.tool_results)
      assert.matches('^exit code: 0', conv.tool_results[1])
      assert.matches('^exit code: 0\nstdout:\n.*replayed\n$', conv.tool_results[2])
    end
  end)

  it('prices tokens with CSENG_LLM_PRICE_IN/OUT when the response has no cost', function()
    local f = start { script = llm.replay(gold_commands) }
    local _, s = run({ task_index = 1 }, openrouter_env(f, { CSENG_LLM_PRICE_IN = '2', CSENG_LLM_PRICE_OUT = '8' }))
    local u = s.results[1].solver_usage
    assert.equal('passed', s.results[1].outcome)
    local p, c = default_sums(3)
    assert.near((p * 2 + c * 8) / 1e6, u.cost_usd, 1e-12)
    assert.equal('prices', u.cost_source)
    assert.equal('configured', u.price_source)
    assert.equal(2, u.price_in_per_mtok)
  end)

  it('retries a 429 (honouring Retry-After) and a 500, then passes', function()
    local f = start { script = llm.replay(gold_commands), fault = function(conv)
      if conv.turn == 1 and conv.attempt == 1 then return 429, { ['Retry-After'] = '1' } end
      if conv.turn == 2 and conv.attempt == 1 then return 500 end
    end }
    local _, s = run({ task_index = 1 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('passed', r.outcome, tostring(r.error))
    local st = f.stats()
    assert.equal(5, st.requests)
    assert.equal(1, st.statuses[429])
    assert.equal(1, st.statuses[500])
    assert.equal(3, st.statuses[200])
    assert.equal(2, st.tool_results)
    assert.equal(0, st.bad_requests)
    assert.equal(2, r.solver_usage.retries)
    assert.equal(5, r.solver_usage.api_requests)
    assert.equal(3, r.solver_usage.turns)
    assert.is_true(r.solve_elapsed_seconds >= 1, 'Retry-After: 1 was not honoured')
  end)

  it('gives up after llm_attempts tries of a 503: an error in the solve stage', function()
    local f = start { script = llm.replay(gold_commands), fault = function() return 503 end }
    local status, s = run({ task_index = 1, llm_attempts = 3 }, openrouter_env(f))
    assert.equal(1, status) -- a trial that ended in an error makes the run exit 1
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('solve', r.error_stage)
    assert.equal('HTTP_503', r.error_code)
    assert.matches('openrouter: gave up after 3 tries: HTTP 503: injected fault 503', r.error)
    assert.equal(3, f.stats().requests)
  end)

  it('fails at once on 401, naming OPENROUTER_API_KEY, and redacts the echoed key', function()
    local f = start { api_key = 'sk-test-the-right-one', script = llm.replay(gold_commands) }
    local _, s, last = run({ task_index = 1 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('solve', r.error_stage)
    assert.equal('HTTP_401', r.error_code)
    assert.matches('the API refused the credential in OPENROUTER_API_KEY', r.error, 1, true)
    assert.matches('Invalid credentials: Bearer [redacted]', r.error, 1, true)
    assert.equal(1, f.stats().requests) -- no retry
    assert.equal(1, f.stats().unauthorized)
    assert.is_nil(assert(fs.read(last.jsonl)):find(KEY, 1, true))
  end)

  it('fails before any request when OPENROUTER_API_KEY or the model is missing', function()
    local f = start { script = llm.replay(gold_commands) }
    -- the runner's pre-flight check stops the run before any sandbox is allocated
    local ok, err = pcall(run, { task_index = 1 }, openrouter_env(f, { OPENROUTER_API_KEY = '' }))
    assert.is_false(ok)
    assert.matches('needs OPENROUTER_API_KEY', err, 1, true)
    ok, err = pcall(run, { task_index = 1 }, openrouter_env(f, { OPENROUTER_MODEL = '' }))
    assert.is_false(ok)
    assert.matches('needs a model: set OPENROUTER_MODEL', err, 1, true)
    assert.equal(0, f.stats().requests)
    local solver = require('solvers.openrouter')
    local okc, msg, code = solver.check({}, function() return nil end)
    assert.is_nil(okc)
    assert.equal('ECONFIG', code)
    assert.matches('OPENROUTER_API_KEY', msg)
    local only_key = function(n) return n == 'OPENROUTER_API_KEY' and 'sk-test-check-only' or nil end
    assert.is_true(solver.check({ model = 'm' }, only_key))
  end)

  it('tells the model about malformed tool arguments and goes on', function()
    local replay = llm.replay(function(conv)
      local cmds = gold_commands(conv)
      return { 'unused', cmds[1], cmds[2] }
    end)
    local f = start { script = function(conv)
      if conv.turn == 1 then
        return { tool_calls = {
          { arguments = '{"command": "echo hi' }, { name = 'python', arguments = '{}' },
          { arguments = '{"cmd": "ls"}' },
        } }
      end
      return replay(conv)
    end }
    local _, s = run({ task_index = 1 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('passed', r.outcome, tostring(r.error))
    local u = r.solver_usage
    assert.equal(4, u.turns)
    assert.equal(5, u.tool_calls)
    assert.equal(3, u.tool_errors)
    assert.equal(2, u.commands)
    local st = f.stats()
    assert.equal(0, st.bad_requests)
    assert.equal(5, st.tool_results)
    local _, conv = next(st.convs)
    assert.matches('^error: the arguments are not a JSON object', conv.tool_results[1])
    assert.matches('^error: unknown tool "python"', conv.tool_results[2])
    assert.matches('^error: missing "command"', conv.tool_results[3])
  end)

  it('is done when the model answers without a tool call', function()
    local f = start { script = function() return { content = 'I would rather not.' } end }
    local _, s = run({ task_index = 1 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('failed', r.outcome)
    assert.equal('done', r.solver_usage.stop_reason)
    assert.equal(1, r.solver_usage.turns)
    assert.equal(0, r.solver_usage.tool_calls)
    assert.matches('model: I would rather not.', r.solve_stdout_tail, 1, true)
    assert.equal(1, f.stats().requests)
  end)

  it('stops a model that never stops after max_turns', function()
    local f = start { script = function(conv) return { tool_calls = { { command = 'echo turn ' .. conv.turn } } } end }
    local _, s = run({ task_index = 1, max_turns = 4 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('failed', r.outcome)
    assert.equal(1, r.solve_return_code)
    assert.equal('max_turns', r.solver_usage.stop_reason)
    assert.equal(4, r.solver_usage.turns)
    assert.equal(4, r.solver_usage.tool_calls)
    assert.equal(4, r.solver_usage.commands)
    assert.equal('stopped after max_turns=4', r.solve_note)
    assert.equal(4, f.stats().requests)
    assert.equal(3, f.stats().tool_results) -- the last turn's result is never sent
  end)

  it('honours the solve timeout: a long command is cut, a slow model is cut', function()
    local f = start { script = function() return { tool_calls = { { command = 'sleep 30' } } } end }
    local _, s = run({ task_index = 1, solve_timeout_seconds = 2 }, openrouter_env(f))
    local r = s.results[1]
    assert.equal('failed', r.outcome)
    assert.equal('timeout', r.solver_usage.stop_reason)
    assert.is_true(r.solve_timed_out)
    assert.is_true(r.solve_elapsed_seconds >= 2 and r.solve_elapsed_seconds < 8, tostring(r.solve_elapsed_seconds))
    assert.matches('%-> exit %d+, timed out', r.solve_stdout_tail)
    assert.equal(1, f.stats().requests)

    f = start { script = function() return { content = 'late' } end, latency = 30 }
    _, s = run({ task_index = 1, solve_timeout_seconds = 2 }, openrouter_env(f))
    r = s.results[1]
    assert.equal('timeout', r.solver_usage.stop_reason)
    assert.equal(0, r.solver_usage.turns)
    assert.is_true(r.solve_elapsed_seconds >= 2 and r.solve_elapsed_seconds < 8, tostring(r.solve_elapsed_seconds))
  end)

  it('never gives the sandbox the key', function()
    local f = start { script = llm.replay(function() return { 'env; cat /proc/self/environ | tr "\\0" "\\n"' } end) }
    run({ task_index = 1 }, openrouter_env(f))
    local _, conv = next(f.stats().convs)
    assert.equal(1, #conv.tool_results)
    assert.matches('PATH=', conv.tool_results[1])
    assert.is_nil(conv.tool_results[1]:find(KEY, 1, true))
  end)
end)

describe('the ai_gateway solver', function()
  it('passes with VERCEL_OIDC_TOKEN on a /v1 base URL, without OpenRouter extras', function()
    local f = start { api_key = OIDC, script = llm.replay(gold_commands) }
    local _, s = run({ task_index = 1, solver = 'ai_gateway' }, {
      AI_GATEWAY_API_KEY = '', VERCEL_OIDC_TOKEN = OIDC, AI_GATEWAY_BASE_URL = f.url_v1, AI_GATEWAY_MODEL = MODEL,
    })
    local r = s.results[1]
    assert.equal('passed', r.outcome, tostring(r.error))
    assert.equal('ai_gateway', r.solver_usage.provider)
    assert.equal('unknown', r.solver_usage.cost_source)
    assert.is_nil(r.solver_usage.cost_usd)
    local st = f.stats()
    assert.equal(3, st.requests)
    for _, lg in ipairs(st.requests_log) do
      assert.equal('/v1/chat/completions', lg.path)
      assert.is_nil(lg.usage_include)
      assert.is_nil(lg.x_title)
    end
  end)

  it('names AI_GATEWAY_MODEL when it is unset, and the key variables when both are', function()
    local ok, err = pcall(run, { task_index = 1, solver = 'ai_gateway' }, { AI_GATEWAY_API_KEY = KEY, AI_GATEWAY_MODEL = '' })
    assert.is_false(ok)
    assert.matches('needs a model: set AI_GATEWAY_MODEL', err, 1, true)
    ok, err = pcall(run, { task_index = 1, solver = 'ai_gateway' },
      { AI_GATEWAY_API_KEY = '', VERCEL_OIDC_TOKEN = '', AI_GATEWAY_MODEL = MODEL })
    assert.is_false(ok)
    assert.matches('needs AI_GATEWAY_API_KEY or VERCEL_OIDC_TOKEN', err, 1, true)
  end)

  it('names VERCEL_OIDC_TOKEN in a 401 when that is the credential used', function()
    local f = start { api_key = 'not-this-one', script = llm.replay(gold_commands) }
    local _, s = run({ task_index = 1, solver = 'ai_gateway' }, {
      AI_GATEWAY_API_KEY = '', VERCEL_OIDC_TOKEN = OIDC, AI_GATEWAY_BASE_URL = f.url_v1, AI_GATEWAY_MODEL = MODEL,
    })
    assert.equal('HTTP_401', s.results[1].error_code)
    assert.matches('refused the credential in VERCEL_OIDC_TOKEN', s.results[1].error, 1, true)
  end)
end)

describe('results', function()
  it('hold neither the API key nor the OIDC token, in any file', function()
    local files = 0
    for _, e in ipairs(fs.walk(tmp)) do
      if e.type == 'file' and (e.path:match('%.jsonl$') or e.path:match('%.json$')) then
        files = files + 1
        local text = assert(fs.read(tmp .. '/' .. e.path))
        assert.is_nil(text:find(KEY, 1, true), e.path .. ' holds the API key')
        assert.is_nil(text:find(OIDC, 1, true), e.path .. ' holds the OIDC token')
      end
    end
    assert.is_true(files >= 2 * run_no, 'expected the results of every run')
  end)
end)

describe('the agent helpers', function()
  it('parse Retry-After as seconds or an HTTP date', function()
    assert.equal(7, agent.retry_after('7'))
    assert.equal(1.5, agent.retry_after(' 1.5 '))
    assert.is_nil(agent.retry_after('soon'))
    assert.is_nil(agent.retry_after(nil))
    local future = os.date('!%a, %d %b %Y %H:%M:%S GMT', os.time() + 20)
    local w = agent.retry_after(future)
    assert.is_true(w > 17 and w <= 20, tostring(w))
    assert.equal(0, agent.retry_after('Wed, 21 Oct 2015 07:28:00 GMT'))
  end)

  it('refuse half a price pair', function()
    local ctx = { options = {}, getenv = function(n) return n == 'CSENG_LLM_PRICE_IN' and '1' or nil end }
    local ok, err = pcall(agent.prices, ctx, 'x')
    assert.is_false(ok)
    assert.matches('set both CSENG_LLM_PRICE_IN and CSENG_LLM_PRICE_OUT', err.message, 1, true)
    ctx.getenv = function() return nil end
    assert.same({ 0.15, 0.60 }, (agent.prices(ctx, 'openai/gpt-4o-mini')))
    assert.is_nil(agent.prices(ctx, 'nobody/knows'))
  end)
end)

describe('the agent loop without a sandbox', function()
  it('returns a bounded, redacted transcript and cuts long output to its tail', function()
    local f = start { script = llm.replay(function() return { 'yes | head -c 20000', 'true' } end) }
    local ran = {}
    local ctx = {
      task = { id = 't', instruction = 'print a lot', workdir = '/w', config = {} },
      workdir = '/w', timeout = 60, options = { llm_output_bytes = 100 },
      getenv = function() return nil end,
    }
    function ctx.exec(_, cmd, o)
      ran[#ran + 1] = { cmd = cmd, timeout = o.timeout, tail_bytes = o.tail_bytes }
      if cmd:find('yes', 1, true) then return { code = 0, stdout = ('y\n'):rep(10000), stderr = '', elapsed = 0.01 } end
      return { code = 3, stdout = '', stderr = 'boom ' .. KEY, elapsed = 0.01 }
    end
    local r = agent.run(ctx, { name = 'openrouter', base_url = f.url, api_key = KEY, key_var = 'OPENROUTER_API_KEY',
      model = MODEL })
    assert.equal(2, #ran)
    assert.equal(100, ran[1].tail_bytes)
    assert.is_true(ran[1].timeout <= 60 and ran[1].timeout > 55)
    local _, conv = next(f.stats().convs)
    assert.matches('^exit code: 0\nstdout %(the first 19900 bytes cut%):\n', conv.tool_results[1])
    assert.equal(#'exit code: 0\nstdout (the first 19900 bytes cut):\n' + 100, #conv.tool_results[1])
    assert.matches('^exit code: 3\nstderr:\nboom ', conv.tool_results[2])
    local roles = {}
    for _, e in ipairs(r.transcript) do roles[#roles + 1] = e.role or e.event end
    assert.same({ 'system', 'user', 'assistant', 'tool', 'assistant', 'tool', 'assistant', 'stop' }, roles)
    assert.equal(3, r.transcript[6].exit_code)
    local path = tmp .. '/transcript/t.jsonl'
    assert(agent.write_transcript(path, r.transcript))
    local text = assert(fs.read(path))
    assert.is_nil(text:find(KEY, 1, true))
    local n = 0
    for line in text:gmatch('[^\n]+') do n = n + 1; assert(require('cseng.lib.jsonl').decode(line)) end
    assert.equal(8, n)
  end)
end)
