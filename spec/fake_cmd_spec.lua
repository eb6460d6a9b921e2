-- `cseng fake PROVIDER` (issue 23): a bundled fake started on its own serves a cold-gold run and
-- an arena run by the environment it prints alone, and leaves no file behind after SIGTERM.
-- Each fake runs as its own cseng process with a private TMPDIR, so "no file behind" is checked
-- on that directory (other processes' temporary files never count).
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local task = require 'cseng.task'
local cjson = require 'cjson'

local ROOT = sys.root()
local CSENG = ROOT .. '/cseng'

local tmp
setup(function() tmp = assert(fs.tempdir('cseng-fake-cmd-spec-')) end)
teardown(function() fs.remove_tree(tmp) end)

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
