-- The small items of issue 23 (a new user's first hour), each as the user meets it.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local flags = require 'cseng.lib.flags'
local util = require 'cseng.lib.util'
local options = require 'cseng.run.options'
local tasks_kind = require 'cseng.run.kinds.tasks'

local ROOT = sys.root()
local CSENG = ROOT .. '/cseng'
local SMOKE16 = ROOT .. '/../shared/data/terminalbench_2026_03_05_smoke16.parquet'
if not fs.exists(SMOKE16) then SMOKE16 = ROOT .. '/../../shared/data/terminalbench_2026_03_05_smoke16.parquet' end

local tmp
setup(function() tmp = assert(fs.tempdir('cseng-first-hour-')) end)
teardown(function() fs.remove_tree(tmp) end)

local function cseng(args, o)
  local argv = { CSENG }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return assert(proc.run { argv = argv, cwd = (o and o.cwd) or ROOT, timeout = 120, env_add = o and o.env })
end

describe('cseng export of a results folder', function()
  it('reads every run log in the folder (fs.stat says "dir")', function()
    local r = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--task-limit', '1', '--quiet', '--output', tmp .. '/res' })
    assert.equal(0, r.code, r.stderr)
    local e = cseng({ 'export', tmp .. '/res', '--format', 'jsonl' })
    assert.equal(0, e.code, e.stderr)
    local rows = {}
    for line in e.stdout:gmatch('[^\n]+') do rows[#rows + 1] = require('cjson').decode(line) end
    assert.equal(1, #rows, e.stdout) -- the one trial of the one run in the folder
    assert.equal('passed', rows[1].outcome)
  end)
end)

describe('--env-file', function()
  it('merges several files in order, a later value wins', function()
    fs.write(tmp .. '/a.env', 'LIZARD_API_KEY=key-from-a\nLIZARD_PROJECT_ID=proj-a\n')
    fs.write(tmp .. '/b.env', 'LIZARD_API_KEY=key-from-b\n')
    local env = options.read_env_files({ tmp .. '/a.env', tmp .. '/b.env' })
    assert.same({ LIZARD_API_KEY = 'key-from-b', LIZARD_PROJECT_ID = 'proj-a' }, env)
    local o = options.merge({}, { env_file = { tmp .. '/a.env', tmp .. '/b.env' } }, {})
    assert.equal('key-from-b', o.env.LIZARD_API_KEY)
    assert.equal('proj-a', o.env.LIZARD_PROJECT_ID)
    -- the command line: two flags, two files
    local f = assert(flags.parse({ '--env-file', 'a', '--env-file', 'b' }, options.SPEC))
    assert.same({ 'a', 'b' }, f.env_file)
  end)

  it('cseng providers takes --env-file', function()
    fs.write(tmp .. '/l.env', 'LIZARD_API_KEY=k\nLIZARD_PROJECT_ID=p\n')
    local r = cseng({ 'providers', '--env-file', tmp .. '/l.env' }, { env = { LIZARD_API_KEY = false, LIZARD_PROJECT_ID = false } })
    assert.equal(0, r.code, r.stderr)
    assert.matches('\nlizard%s+ready', '\n' .. r.stdout)
    local r2 = cseng({ 'providers' }, { env = { LIZARD_API_KEY = false, LIZARD_PROJECT_ID = false } })
    assert.matches('\nlizard%s+needs LIZARD_API_KEY', '\n' .. r2.stdout)
  end)
end)

describe('names a user mistypes', function()
  it('a typo in a flag gets "did you mean"', function()
    local r = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--concurency', '2' })
    assert.equal(2, r.code)
    assert.matches("unknown option '%-%-concurency'; did you mean %-%-concurrency%?", r.stderr)
    local r2 = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--zzzz' })
    assert.equal(2, r2.code)
    assert.not_matches('did you mean', r2.stderr)
  end)

  it('an unknown solver or provider lists the valid names', function()
    local r = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--solver', 'gld' })
    assert.matches("unknown solver 'gld'; did you mean gold%? %(solvers: .*gold.*nop", r.stderr)
    local r2 = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--provider', 'lizzard' })
    assert.matches("unknown provider 'lizzard'; did you mean lizard%? %(providers: .*docker.*local.*modal", r2.stderr)
  end)

  it('flags.closest: within two edits, or a prefix', function()
    assert.equal('concurrency', flags.closest('concurency', { 'provider', 'concurrency' }))
    assert.equal('samples', flags.closest('sampels', { 'samples', 'seed' }))
    assert.equal('timeout-seconds', flags.closest('timeout', { 'timeout-seconds', 'tasks' }))
    assert.is_nil(flags.closest('xyz', { 'samples', 'seed' }))
  end)
end)

describe('error text', function()
  it('keeps its head (what failed), cut at the tail', function()
    local msg = 'environment/Dockerfile line 12: RUN pip3 install ' .. string.rep('x', 300)
    local h = util.head(msg, 120)
    assert.equal('environment/Dockerfile line 12: RUN pip3', h:sub(1, 40))
    assert.equal(123, #h)
    assert.equal('...', util.head('\u{e9}abc', 1)) -- never half of a UTF-8 sequence
    assert.equal('\u{e9}...', util.head('\u{e9}abc', 2))
  end)
end)

describe('run ids', function()
  it('name the solver the run uses', function()
    assert.equal('cold-gold', tasks_kind.id_name { name = 'cold-gold', solver = 'gold' })
    assert.equal('cold-gold', tasks_kind.id_name { name = 'cold-gold' })
    assert.equal('cold-nop', tasks_kind.id_name { name = 'cold-gold', solver = 'nop' })
    assert.equal('warm-openrouter', tasks_kind.id_name { name = 'warm-gold', solver = 'openrouter' })
    local r = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--solver', 'nop', '--task-limit', '1', '--quiet', '--output', tmp .. '/nop' })
    assert.equal(0, r.code, r.stderr)
    local names = fs.list(tmp .. '/nop')
    table.sort(names)
    assert.matches('^cold%-nop%-local%-cold%-', names[1])
  end)
end)

describe('cseng dataset info', function()
  it('lists the tasks of a parquet dataset, as of a JSONL one', function()
    if not fs.exists(SMOKE16) then error('the smoke16 parquet is absent: ' .. SMOKE16) end
    local r = cseng({ 'dataset', 'info', SMOKE16 })
    assert.equal(0, r.code, r.stderr)
    assert.matches('\ntasks:\n', r.stdout)
    local n = 0
    for _ in r.stdout:gmatch('\n%s*%d+  [%w_]+%s+terminalbench') do n = n + 1 end
    assert.equal(16, n)
  end)
end)

describe('a task with no gold solution', function()
  it('is marked no_solution in its record and its progress line', function()
    local d = tmp .. '/tasks/no-solution'
    for _, sub in ipairs({ 'environment', 'tests' }) do assert(fs.mkdir_p(d .. '/' .. sub)) end
    fs.write(d .. '/task.toml', 'version = "1.0"\n')
    fs.write(d .. '/instruction.md', 'write /x\n')
    fs.write(d .. '/environment/Dockerfile', 'FROM debian:bookworm-slim\n')
    fs.write(d .. '/tests/test.sh', 'test -f /x && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
    local r = cseng({ 'run', ROOT .. '/plans/cold-gold.lua', '--dataset', d, '--output', tmp .. '/nosol' })
    assert.equal(0, r.code, r.stderr)
    assert.matches('failed .*%(no gold solution: nothing was solved%)', r.stdout)
    local log
    for _, n in ipairs(fs.list(tmp .. '/nosol')) do if n:match('%.jsonl$') then log = fs.read(tmp .. '/nosol/' .. n) end end
    local trial
    for line in log:gmatch('[^\n]+') do
      local ev = require('cjson').decode(line)
      if ev.event == 'trial' then trial = ev end
    end
    assert.equal('failed', trial.outcome)
    assert.is_true(trial.no_solution)
    -- said once before the first trial, in one line
    local before = r.stdout .. r.stderr
    assert.matches('cseng: none of the 1 selected tasks has a gold solution %(solution/solve%.sh%): gold solves ' ..
      'nothing there, so its trial can only fail or error', before)
  end)
end)

describe('the smaller defects of the first hour, round two', function()
  it('a report template for the other kind of run says so, and writes nothing', function()
    local dir = tmp .. '/kinds'
    assert(fs.mkdir_p(dir))
    local task_log = dir .. '/t.jsonl'
    fs.write(task_log, '{"event":"run_started","run_id":"t1","kind":"tasks","time":"2026-01-01T00:00:00Z"}\n' ..
      '{"event":"trial","run_id":"t1","task_id":"a","outcome":"passed","provider":"local","mode":"cold"}\n')
    for _, tpl in ipairs({ 'lua/reports/startup.lua', 'startup' }) do
      local r = cseng({ 'report', task_log, '--template', tpl, '-o', dir .. '/s.md' })
      assert.equal(2, r.code, r.stdout)
      assert.matches('reports startup arena runs, and the input holds none: t1 %(a task run%); use %-%-template per_task', r.stderr)
      assert.is_false(fs.exists(dir .. '/s.md'))
    end
    local arena_log = dir .. '/a.jsonl'
    fs.write(arena_log, '{"event":"run_started","run_id":"a1","kind":"startup","time":"2026-01-01T00:00:00Z"}\n')
    local r = cseng({ 'report', arena_log, '--template', 'per_task', '-o', dir .. '/p.md' })
    assert.equal(2, r.code, r.stdout)
    assert.matches('per_task template reports task runs, and the input holds none: a1 %(a startup arena run%); ' ..
      'use %-%-template startup', r.stderr)
    -- a template of one's own is not judged by its name
    fs.write(dir .. '/mine.lua', 'return function(data) return "# " .. #data.runs .. " run(s)\\n" end\n')
    assert.equal(0, cseng({ 'report', task_log, '--template', dir .. '/mine.lua', '-o', dir .. '/m.md' }).code)
  end)

  it('cseng providers: every description starts in one column, however long the names and variables', function()
    local r = cseng({ 'providers' })
    local lines = {}
    for l in r.stdout:gmatch('[^\n]+') do lines[#lines + 1] = l end
    local col
    for i = 2, #lines, 2 do
      local at = lines[i]:find('%S')
      col = col or at
      assert.equal(col, at, lines[i])
      assert.equal(col, #lines[i - 1]:match('^%S+%s+') + 1, lines[i - 1]) -- the state under it, aligned
    end
    assert.is_true(#lines >= 18)
  end)

  it('cseng merge: --help and the usage line name the same option', function()
    local r = cseng({ 'merge', '--help' })
    assert.matches('usage: cseng merge DIR %-%-output RUN%.jsonl', r.stdout)
    assert.matches('\n  %-%-output RUN%.jsonl', r.stdout)
    assert.matches('\n  %-o RUN%.jsonl%s+same as %-%-output', r.stdout)
    local bad = cseng({ 'merge', tmp, '-o', tmp .. '/x.json' })
    assert.equal(2, bad.code)
    assert.matches('%-%-output must name a %.jsonl file', bad.stderr)
  end)

  it('cseng run --help lists every solver, and no helper module', function()
    local r = cseng({ 'run', '--help' })
    local line = r.stdout:match('\n  %-%-solver NAME%s+([^\n]+)')
    assert.is_string(line, r.stdout)
    for _, name in ipairs({ 'ai_gateway', 'claude_code', 'codex', 'command', 'gold', 'nop', 'openrouter' }) do
      assert.matches('%f[%w_]' .. name .. '%f[^%w_]', line)
    end
    assert.is_nil(line:find('agent,', 1, true))
    assert.is_nil(line:find('installed', 1, true))
  end)

  it('cseng prewarm --list writes no file', function()
    local dir = tmp .. '/pwlist'
    assert(fs.mkdir_p(dir))
    for _ = 1, 2 do assert.equal(0, cseng({ 'prewarm', '--list', '--provider', 'local', '--output', dir }).code) end
    assert.same({}, fs.list(dir))
  end)
end)
