-- `cseng fake PROVIDER`: a bundled fake started on its own serves a cold-gold run and an arena
-- run by the environment it prints alone, and leaves no file behind after SIGTERM; `cseng fake
-- llm`, the scripted model, serves plans/solve-llm.lua the same way.
-- Each fake runs as its own cseng process with a private TMPDIR, so "no file behind" is checked
-- on that directory (other processes' temporary files never count).
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local task = require('cseng.task')
local cjson = require('cjson')
local H = require('spec.helpers.common')

local ROOT, CSENG = H.ROOT, H.CSENG

local tmp = H.tempdir('cseng-fake-cmd-spec-')
teardown(H.remove_tempdirs)

-- Start `cseng fake name` with a private TMPDIR; returns {p, env (from its export lines), dir, out}.
local function start(name, extra)
  local dir = tmp .. '/' .. name
  assert(fs.mkdir_p(dir .. '/tmp'))
  local argv = { CSENG, 'fake', name }
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, env_add = { TMPDIR = dir .. '/tmp' }, stdout = dir .. '/out', stderr = dir .. '/err' })
  local env
  for _ = 1, 600 do
    local out = fs.read(dir .. '/out') or ''
    if out:find('Ctrl%-C') and out:find('\n$') then
      env = {}
      for k, v in out:gmatch("export ([%w_]+)='?([^'\n]*)'?\n") do env[k] = v end
      break
    end
    if p:wait(0.05) then break end
  end
  assert(env and next(env), name .. ': the fake printed no environment: ' .. tostring(fs.read(dir .. '/err')))
  return { p = p, env = env, dir = dir }
end

-- A cseng command run with the fake's environment alone (added to this process's).
local function cseng(fk, args, timeout)
  local argv = { CSENG }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local r = assert(proc.run { argv = argv, env_add = fk.env, timeout = timeout or 240, cwd = fk.dir })
  return r
end

local function stop(fk)
  assert(fk.p:kill('TERM'))
  local exit = fk.p:wait(60)
  assert(exit, 'the fake did not stop within 60 s after SIGTERM')
  fk.p:close()
  return exit
end

local function summary(dir)
  for _, n in ipairs(fs.list(dir) or {}) do
    if n:match('%.json$') then return cjson.decode((assert(fs.read(dir .. '/' .. n)))) end
  end
end

for _, name in ipairs({ 'lizard', 'e2b', 'modal' }) do
  describe('cseng fake ' .. name, function()
    it('serves a cold-gold run and an arena run by its printed environment, and leaves nothing after SIGTERM', function()
      if name == 'modal' and not proc.which('node') then error('the Modal fake needs node (make deps-test)') end
      local fk = start(name)
      local ok, err = pcall(function()
        local r = cseng(fk, { 'run', ROOT .. '/plans/cold-gold.lua', '--provider', name, '--task-limit', '2', '--quiet',
          '--dataset', ROOT .. '/data/smoke.jsonl', '--output', fk.dir .. '/gold' })
        assert.equal(0, r.code, r.stderr)
        local s = summary(fk.dir .. '/gold')
        assert.equal(2, s.passed, r.stderr)
        assert.equal(name, s.provider)
        local a = cseng(fk, { 'run', ROOT .. '/plans/startup.lua', '--providers', name, '--samples', '3', '--warmups', '0',
          '--quiet', '--output', fk.dir .. '/arena' })
        assert.equal(0, a.code, a.stderr)
        local text = ''
        for _, n in ipairs(fs.list(fk.dir .. '/arena') or {}) do
          if n:match('%.jsonl$') then text = fs.read(fk.dir .. '/arena/' .. n) end
        end
        local oks = 0
        for line in text:gmatch('[^\n]+') do
          local ev = cjson.decode(line)
          if ev.event == 'startup_trial' and ev.ok == true and ev.phase == 'measured' then oks = oks + 1 end
        end
        assert.equal(3, oks, 'measured samples that reached ready')
      end)
      local exit = stop(fk)
      assert.is_true(ok, tostring(err))
      -- the status of a command stopped by a signal (130 today; 143 under a 128+N rule)
      assert.is_true(exit.code == 130 or exit.code == 143, 'exit ' .. tostring(exit.code))
      assert.matches(name .. ' stopped', fs.read(fk.dir .. '/err'))
      assert.same({}, fs.list(fk.dir .. '/tmp'))
    end)
  end)
end

describe('cseng fake llm', function()
  it('a scripted model: plans/solve-llm.lua passes bundled tasks with --attempts 3 by its printed environment', function()
    local fk = start('llm')
    local ok, err = pcall(function()
      for _, k in ipairs({ 'OPENROUTER_BASE_URL', 'OPENROUTER_API_KEY', 'OPENROUTER_MODEL', 'AI_GATEWAY_BASE_URL',
        'AI_GATEWAY_API_KEY', 'AI_GATEWAY_MODEL', 'CODEX_BASE_URL', 'OPENAI_API_KEY', 'CODEX_MODEL',
        'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY', 'CLAUDE_CODE_MODEL' }) do
        assert.is_string(fk.env[k], k)
      end
      -- a TerminalBench task, and a SWE-smith one whose solve.sh reads its patch from /solution
      local tasks = 'awk-fixed-width-to-csv,csv-sales-report,tinystats__median_even_floor'
      local r = cseng(fk, { 'run', ROOT .. '/plans/solve-llm.lua', '--tasks', tasks, '--attempts', '3',
        '--dataset', ROOT .. '/data/smoke.jsonl', '--output', fk.dir .. '/llm' }, 600)
      assert.equal(0, r.code, r.stderr .. r.stdout)
      local s = summary(fk.dir .. '/llm')
      assert.same({ 9, 9, 0, 0 }, { s.task_count, s.passed, s.failed, s.errors })
      assert.equal('openrouter', s.results[1].solver)
      assert.matches('3 tasks x 3 attempts: pass@1 1.000 [1.000, 1.000], pass@2 1.000 [1.000, 1.000], ' ..
        'pass@3 1.000 [1.000, 1.000]', r.stdout, 1, true)
      -- the chat-completions fake counted 3 completions per trial and no bad request
      for _, res in ipairs(s.results) do assert.equal(3, res.solver_usage.turns, res.task_id) end
      -- the same model over the AI Gateway's base URL
      local g = cseng(fk, { 'run', ROOT .. '/plans/solve-llm.lua', '--solver', 'ai_gateway', '--tasks', 'csv-sales-report',
        '--dataset', ROOT .. '/data/smoke.jsonl', '--output', fk.dir .. '/gw', '--quiet' }, 600)
      assert.equal(0, g.code, g.stderr)
      assert.equal(1, summary(fk.dir .. '/gw').passed)
    end)
    local exit = stop(fk)
    assert.is_true(ok, tostring(err))
    assert.is_true(exit.code == 130 or exit.code == 143, 'exit ' .. tostring(exit.code))
    assert.matches('llm stopped', fs.read(fk.dir .. '/err'))
  end)

  it('answers a prompt it does not know with no command (the trial fails), and refuses --dataset for a provider', function()
    local model = require('spec.fakes.llm.model')
    local script = model.gold_script({ { id = 't', instruction = 'Make the widget.', dir = tmp } }, 'x.jsonl')
    local reply = script({ user = 'Something else entirely.', turn = 1 })
    assert.is_nil(reply.tool_calls)
    assert.matches('replays the gold solutions of x%.jsonl', reply.content)
    reply = script({ user = 'Working directory: /w\n\nMake the widget.', turn = 1 })
    assert.is_nil(reply.tool_calls) -- known, but it has no solution/solve.sh
    assert.matches('task t has no gold solution', reply.content)
    local r = assert(proc.run { argv = { CSENG, 'fake', 'lizard', '--dataset', 'data/smoke.jsonl' }, cwd = ROOT, timeout = 30 })
    assert.equal(2, r.code)
    assert.matches('%-%-dataset is for cseng fake llm', r.stderr)
  end)
end)

describe('cseng fake: usage', function()
  it('an unknown provider lists the fakes and suggests the near one', function()
    local r = assert(proc.run { argv = { CSENG, 'fake', 'lizzard' }, timeout = 30 })
    assert.equal(2, r.code)
    assert.matches("no fake for 'lizzard'; did you mean lizard%? %(fakes: .*e2b.*lizard.*modal", r.stderr)
  end)

  it('--env-file writes the environment and removes it when the fake stops', function()
    local envf = tmp .. '/lizard.env'
    local fk = start('lizard', { '--env-file', envf, '--port', '0' })
    local text = assert(fs.read(envf))
    assert.matches('LIZARD_API_URL=http://127%.0%.0%.1:%d+\n', text)
    assert.equal(fk.env.LIZARD_API_URL, text:match('LIZARD_API_URL=(%S+)'))
    stop(fk)
    assert.is_false(fs.exists(envf))
    task.sleep(0)
  end)
end)
