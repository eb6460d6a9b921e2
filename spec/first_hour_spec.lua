-- The small items of issue 23 (a new user's first hour), each as the user meets it.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local flags = require 'cseng.lib.flags'
local util = require 'cseng.lib.util'
local options = require 'cseng.run.options'
local runner = require 'cseng.run.runner'

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
    assert.equal('cold-gold', runner.id_name { name = 'cold-gold', solver = 'gold' })
    assert.equal('cold-gold', runner.id_name { name = 'cold-gold' })
    assert.equal('cold-nop', runner.id_name { name = 'cold-gold', solver = 'nop' })
    assert.equal('warm-openrouter', runner.id_name { name = 'warm-gold', solver = 'openrouter' })
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
  end)
end)
