-- The spend ceiling between an installed CLI's own requests (--max-cost-usd): the real Codex CLI and
-- Claude Code in local sandboxes against their API fakes, which charge a known usage per turn
-- (input 1000 x turn + 7 tokens, output 50 + turn) priced at $1 per 1M tokens each way. The CLI
-- reaches its model through the run's model proxy (lua/cseng/evals/proxy.lua), which reads each
-- answer's usage, spends its cost against the trial's budget and, before each model request, asks
-- whether one more request costing what the last one did still fits; the request that would not is
-- answered 402 by the proxy and never reaches the fake. The verdict is a count: exactly two
-- completions served, none held, the third request refused by the proxy. The trial is recorded
-- with stop_reason max_cost and the proxy's exact tokens, the run stops with max_cost, and the
-- trajectory so far validates.
local fs = require('cseng.fs')
local atif = require('cseng.evals.atif')
local installed = require('solvers.shared.installed')

local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-ceiling-spec') end)
teardown(function() H.close() end)

-- six shell turns before the answer: a session that would run 7 requests unstopped
local function long_script(conv)
  if conv.turn <= 6 then return { tool_calls = { { command = 'echo step ' .. conv.turn } } } end
  return { content = 'Done.' }
end

local PRICES = { CSENG_LLM_PRICE_IN = '1', CSENG_LLM_PRICE_OUT = '1' }
local function with(t, extra)
  for k, v in pairs(extra) do t[k] = v end
  return t
end

-- turn t costs (1000t + 7 + 50 + t) / 1e6: t1 $0.001058, t2 $0.002059, as the proxy reads them from
-- the answers (the CLIs' own reports do not matter: Claude Code's stream-json counts output tokens
-- as 1 while a message streams)
local AGENTS = {
  { solver = 'codex', fake = 'responses',
    env = function(f) return with({ OPENAI_API_KEY = H.KEY, CODEX_BASE_URL = f.url, CODEX_MODEL = H.MODEL }, PRICES) end },
  { solver = 'claude_code', fake = 'messages',
    env = function(f) return with({ ANTHROPIC_API_KEY = H.KEY, ANTHROPIC_BASE_URL = f.url, CLAUDE_CODE_MODEL = H.MODEL }, PRICES) end },
}
local SPENT, PROMPT, COMPLETION = 0.001058 + 0.002059, 1007 + 2007, 51 + 52

for _, A in ipairs(AGENTS) do
  local mod = require('solvers.' .. A.solver)
  local have = fs.exists(installed.NODE_MODULES .. '/' .. mod.BINARY)
  describe('--max-cost-usd with ' .. A.solver, function()
    if not have then
      pending('needs ' .. installed.NODE_MODULES .. '/' .. mod.BINARY .. ' (make deps-agents)')
      return
    end

    it('refuses the request after the turn that crosses the estimate; the trial and the run say max_cost', function()
      local fk = require('spec.fakes.llm.' .. A.fake)
      -- before turn 2: $0.00106 spent + $0.00106 expected <= $0.0025, go on; before turn 3: $0.0031 + $0.0021 > $0.0025,
      -- refused. A third request reaching the fake would be held (never answered): none may
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = long_script, hold = function(conv) return conv.turn >= 3 end }
      local status, s, _, events = H.run({ solver = A.solver, tasks = H.ids(1), max_cost_usd = 0.0025, solve_timeout_seconds = 300 },
        A.env(f))
      local st = f.stats()
      f.close()
      assert.same({}, st.problems)
      assert.equal(2, st.completions)
      assert.equal(0, st.held)
      assert.equal(1, status)
      assert.equal('max_cost', s.stop_reason)
      local fin
      for _, e in ipairs(events) do if e.event == 'run_finished' then fin = e end end
      assert.equal('max_cost', fin.stop_reason)
      assert.equal('the next agent turn', fin.stop_detail.what)
      assert.equal(1, #s.results)
      local r = s.results[1]
      local u = r.solver_usage
      assert.equal('max_cost', u.stop_reason, tostring(r.error) .. ' ' .. tostring(r.solve_stderr_tail))
      assert.equal('between requests', u.ceiling)
      assert.equal('proxy', u.counted_by)
      assert.equal(2, u.responses)
      -- every model request after the stop was refused by the proxy (the CLI may ask again)
      assert.is_true(u.refused.ceiling >= 1, tostring(u.refused.ceiling))
      assert.equal(2 + u.refused.ceiling, u.requests)
      assert.equal(2, u.statuses['200'])
      assert.near(SPENT, u.cost_usd, 1e-12)
      assert.equal('prices', u.cost_source)
      assert.equal(PROMPT, u.prompt_tokens)
      assert.equal(COMPLETION, u.completion_tokens)
      assert.near(SPENT, r.cost.items[2].usd, 1e-12)
      assert.matches('spend ceiling', r.solve_note)
      local text = assert(fs.read(r.trajectory_path))
      local ok, p = atif.validate_text(text)
      assert.is_true(ok, table.concat(p or {}, '\n'))
    end)

    it('runs the whole session when the ceiling is not reached', function()
      local fk = require('spec.fakes.llm.' .. A.fake)
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = long_script }
      local status, s = H.run({ solver = A.solver, tasks = H.ids(1), max_cost_usd = 1 }, A.env(f))
      local st = f.stats()
      f.close()
      assert.equal(7, st.completions)
      assert.equal(0, st.held)
      assert.is_nil(s.stop_reason)
      local u = s.results[1].solver_usage
      assert.equal('done', u.stop_reason)
      assert.equal(7, u.responses)
      assert.equal(0, u.refused.ceiling)
      assert.equal('between requests', u.ceiling)
      assert.is_true(status == 0 or s.results[1].outcome == 'failed') -- the echo session fixes nothing
    end)

    it('says so when the model has no price: the CLI runs to its end, the ceiling holds between trials', function()
      local fk = require('spec.fakes.llm.' .. A.fake)
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = long_script }
      local env = A.env(f)
      env.CSENG_LLM_PRICE_IN, env.CSENG_LLM_PRICE_OUT = nil, nil -- fake/model-1 is in no price table
      local _, s = H.run({ solver = A.solver, tasks = H.ids(1), max_cost_usd = 0.0025 }, env)
      f.close()
      assert.equal(7, f.stats().completions)
      local u = s.results[1].solver_usage
      assert.equal('done', u.stop_reason)
      assert.equal('between trials (the model has no price)', u.ceiling)
    end)
  end)
end

describe("the local provider's streaming exec (on_output)", function()
  local base = require('providers.local')
  local tmp, client, sb
  setup(function()
    tmp = assert(fs.tempdir('cseng-exec-stream-'))
    client = base.connect({ root = tmp .. '/sb' })
    sb = assert(base.create(client, { labels = {}, workdir = '/workspace' }))
  end)
  teardown(function()
    if sb then base.destroy(client, sb) end
    fs.remove_tree(tmp)
  end)

  it('hands over stdout and stderr as written, in order, and returns what proc.run would', function()
    local seen = { stdout = '', stderr = '' }
    local r = assert(base.exec(client, sb, 'for i in 1 2 3; do echo out$i; echo err$i >&2; done; exit 3', {
      on_output = function(chunk, stream) seen[stream] = seen[stream] .. chunk end }))
    assert.equal(3, r.code)
    assert.equal('out1\nout2\nout3\n', seen.stdout)
    assert.equal('err1\nerr2\nerr3\n', seen.stderr)
    assert.equal(seen.stdout, r.stdout)
    assert.equal(seen.stderr, r.stderr)
    assert.is_nil(r.stopped)
  end)

  it('stops the command when on_output says so (a command that would wait forever returns, not timed out)', function()
    local r = assert(base.exec(client, sb, 'echo ready; while [ ! -e /workspace/never ]; do sleep 0.01; done; echo late', {
      timeout = 120, on_output = function(chunk) if chunk:find('ready', 1, true) then return false end end }))
    assert.is_true(r.stopped)
    assert.is_nil(r.timed_out)
    assert.not_equal(0, r.code)
    assert.equal('ready\n', r.stdout)
  end)
end)
