-- The everyday commands as a user meets them: --tasks globs, cseng compare, cseng export (CSV that
-- Python's csv module reads back to the JSONL's values; a results folder), cseng providers (--json,
-- --env-file), unknown options refused by every command and mistyped names answered with the valid
-- ones, error text, run ids, cseng dataset info, a task with no gold solution, and what the
-- commands print and refuse (help, usage, report templates of the other kind of run).
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local cjson = require('cjson')
local dataset = require('cseng.workload.dataset')
local results = require('cseng.results.log')
local flags = require('cseng.lib.flags')
local util = require('cseng.lib.util')
local options = require('cseng.run.options')
local tasks_kind = require('cseng.run.kinds.tasks')
local H = require('spec.helpers.common')

local ROOT = H.ROOT
local SMOKE16 = ROOT .. '/../shared/data/terminalbench_2026_03_05_smoke16.parquet'
if not fs.exists(SMOKE16) then SMOKE16 = ROOT .. '/../../shared/data/terminalbench_2026_03_05_smoke16.parquet' end

local tmp = H.tempdir('cseng-commands-spec-')
teardown(H.remove_tempdirs)

-- ./cseng with args (env_add: variables set, or unset with false)
local function cseng(args, env_add) return H.cseng(args, { env_add = env_add, timeout = 600 }) end

local function ids_of(log)
  local out = {}
  for _, t in ipairs(results.trials(results.read(log))) do out[#out + 1] = t.task_id end
  table.sort(out)
  return out
end

describe('--tasks', function()
  local all
  setup(function()
    all = {}
    for _, t in ipairs(dataset.load(ROOT .. '/data/smoke.jsonl')) do all[#all + 1] = t.id end
  end)

  it('selects by exact id and by shell-style glob, in every combination', function()
    local function sel(names)
      local out = {}
      for _, t in ipairs(dataset.select(dataset.load(ROOT .. '/data/smoke.jsonl'), 'all', nil, names)) do out[#out + 1] = t.id end
      table.sort(out)
      return out
    end
    local want_git = {}
    for _, id in ipairs(all) do if id:sub(1, 4) == 'git-' then want_git[#want_git + 1] = id end end
    table.sort(want_git)
    assert.is_true(#want_git >= 2)
    assert.are.same(want_git, sel { 'git-*' })
    assert.are.same({ 'csv-sales-report' }, sel { 'csv-sales-report' })
    assert.are.same({ 'c-fix-base64-codec', 'c-fix-wordfreq-crash' }, sel { 'c-fix-*' })
    assert.are.same({ 'tinystats__median_even_floor' }, sel { 'tinystats__m?dian_*' })
    assert.are.same({ 'c-fix-base64-codec', 'c-fix-wordfreq-crash' }, sel { 'c-fix-[bw]*' })
    assert.are.same({ 'c-fix-wordfreq-crash' }, sel { 'c-fix-[!b]*' })
    local both = sel { 'git-*', 'csv-sales-report' }
    assert.are.equal(#want_git + 1, #both)
    -- a dot or a dash in a name is literal
    assert.are.same({}, (function() local ok = pcall(sel, { 'csv.sales.report' }); return ok and { 'matched' } or {} end)())
    local ok, err = pcall(sel, { 'git-*', 'no-such-*' })
    assert.is_false(ok)
    assert.matches("^%-%-tasks: no task matches 'no%-such%-%*'", err)
  end)

  it('runs only the selected tasks, end to end', function()
    local r = cseng { 'run', 'plans/cold-gold.lua', '--tasks', 'git-*', '--tasks', 'csv-sales-report', '--quiet',
      '--output', tmp .. '/sel.jsonl' }
    assert.are.equal(0, r.code, r.stderr)
    local got = ids_of(tmp .. '/sel.jsonl')
    local want = { 'csv-sales-report' }
    for _, id in ipairs(all) do if id:sub(1, 4) == 'git-' then want[#want + 1] = id end end
    table.sort(want)
    assert.are.same(want, got)
  end)
end)

describe('cseng export', function()
  local log
  setup(function()
    log = tmp .. '/exp.jsonl'
    local r = cseng { 'run', 'plans/cold-gold.lua', '--tasks', 'c-fix-*,csv-*,regex-*', '--quiet', '--output', log }
    assert.are.equal(0, r.code, r.stderr)
  end)

  it('writes CSV that Python reads back to the values of the JSONL export, run fields in every row', function()
    local r = cseng { 'export', log, '--format', 'csv', '-o', tmp .. '/exp.csv' }
    assert.are.equal(0, r.code, r.stderr)
    r = cseng { 'export', log, '--format', 'jsonl', '-o', tmp .. '/exp.rows.jsonl' }
    assert.are.equal(0, r.code, r.stderr)
    local script = [[
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1], newline='')))
js = [json.loads(l) for l in open(sys.argv[2])]
assert len(rows) == len(js), (len(rows), len(js))
checked = 0
for row, j in zip(rows, js):
    for k in ('run_id', 'run_kind', 'run_plan', 'run_provider', 'run_mode', 'run_dataset', 'run_solver'):
        assert row[k] != '' , k
    for k, v in j.items():
        cell = row[k]
        if isinstance(v, bool):
            assert cell == ('true' if v else 'false'), (k, cell, v)
        elif isinstance(v, (int, float)):
            assert float(cell) == float(v), (k, cell, v)
        elif isinstance(v, str):
            assert cell == v[-2000:], (k, cell[:80], v[:80])
        checked += 1
print(json.dumps({'rows': len(rows), 'cells': checked, 'columns': list(rows[0].keys())}))
]]
    local p = assert(proc.run { argv = { 'python3', '-c', script, tmp .. '/exp.csv', tmp .. '/exp.rows.jsonl' } })
    assert.are.equal(0, p.code, p.stderr)
    local res = cjson.decode(p.stdout)
    assert.are.equal(#ids_of(log), res.rows)
    assert.is_true(res.cells > res.rows * 20)
    local cols = table.concat(res.columns, ',')
    assert.matches('^run_id,run_kind,run_plan,run_provider,run_mode,run_dataset,run_solver', cols)
    assert.matches('phases%.verify_seconds', cols)
    assert.matches('task_id', cols)
  end)

  it('a path that is not a run log is a one-line error', function()
    local r = cseng { 'export', tmp .. '/nope.jsonl' }
    assert.are.equal(1, r.code)
    assert.matches('^cseng: export: [^\n]*nope%.jsonl: no such file or directory\n$', r.stderr)
  end)
end)

describe('cseng compare', function()
  it('calls out the tasks that regress from gold to nop, and exits 1 with --fail-on-regression', function()
    local a, b = tmp .. '/cmp-a.jsonl', tmp .. '/cmp-b.jsonl'
    assert.are.equal(0, cseng({ 'run', 'plans/cold-gold.lua', '--tasks', 'c-fix-*,git-*', '--quiet', '--output', a }).code)
    assert.are.equal(0, cseng({ 'run', 'plans/cold-gold.lua', '--tasks', 'c-fix-*,git-*', '--solver', 'nop', '--quiet', '--output', b }).code)
    local n = #ids_of(a)
    local r = cseng { 'compare', a, b, '-o', tmp .. '/cmp.md' }
    assert.are.equal(0, r.code, r.stderr)
    local md = assert(fs.read(tmp .. '/cmp.md'))
    assert.matches(string.format('%d task%%(s%%) in A, %d in B, %d in both: %d regression%%(s%%), 0 fix', n, n, n, n), md)
    assert.matches('| `c-fix-base64-codec` | passed | failed | **regression** |', md, 1, true)
    assert.matches('| solve |', md, 1, true)
    r = cseng { 'compare', a, b, '--fail-on-regression' }
    assert.are.equal(1, r.code)
    -- and the other way round: every task is a fix, nothing regressed in outcome
    r = cseng { 'compare', b, a }
    assert.matches(string.format('%d fix%%(es%%)', n), r.stdout)
    assert.matches('0 regression%(s%), ', r.stdout)
    -- a run compared with itself changes nothing
    r = cseng { 'compare', a, a, '--fail-on-regression' }
    assert.are.equal(0, r.code, r.stdout)
    assert.matches('Every task has the same outcome in A and B.', r.stdout, 1, true)
    assert.matches('No regression.', r.stdout, 1, true)
  end)

  it('compares startup runs per provider with a ratio CI', function()
    local a, b = tmp .. '/su-a.jsonl', tmp .. '/su-b.jsonl'
    for _, out in ipairs { a, b } do
      local r = cseng { 'run', 'plans/startup.lua', '--providers', 'local', '--samples', '8', '--warmups', '0', '--quiet', '--output', out }
      assert.are.equal(0, r.code, r.stderr)
    end
    local r = cseng { 'compare', a, b }
    assert.are.equal(0, r.code, r.stderr)
    assert.matches('## Startup %(ready_ms%)', r.stdout)
    assert.matches('| local | [%d.]+ | [%d.]+ | [%d.]+× | %[[%d.]+, [%d.]+%] | 100%% | 100%% |', r.stdout)
  end)
end)

describe('cseng providers --json', function()
  it('lists every adapter with its credential state, and no helper module', function()
    local r = cseng { 'providers', '--json' }
    assert.are.equal(0, r.code, r.stderr)
    local list = cjson.decode(r.stdout)
    local by = {}
    for _, p in ipairs(list) do by[p.name] = p end
    assert.is_true(by['local'].ready)
    assert.are.same({}, by['local'].missing)
    assert.is_false(by.daytona.ready and os.getenv('DAYTONA_API_KEY') == nil)
    assert.are.same({ 'DAYTONA_API_KEY' }, by.daytona.credentials)
    for _, p in ipairs(list) do
      assert.is_truthy(p.description, p.name)
      assert.is_nil(p.error, p.name .. ': ' .. tostring(p.error))
      -- every listed provider is loadable by the runner under the listed name
      assert.is_truthy(fs.exists(ROOT .. '/lua/providers/' .. p.name:gsub('%-', '_') .. '.lua'))
    end
  end)
end)

describe('every command', function()
  it('refuses an unknown option with one line and exit 2', function()
    local cases = {
      { 'run', 'plans/cold-gold.lua', '--bogus' }, { 'report', 'results', '--bogus' }, { 'cleanup', '--bogus' },
      { 'prewarm', '--bogus' }, { 'providers', '--bogus' }, { 'dataset', 'info', 'data/smoke.jsonl', '--bogus' },
      { 'images', 'list', '--bogus' }, { 'merge', 'results', '--bogus' }, { 'compare', 'a', 'b', '--bogus' },
      { 'export', 'a', '--bogus' },
    }
    for _, args in ipairs(cases) do
      local r = cseng(args)
      assert.are.equal(2, r.code, table.concat(args, ' ') .. ': ' .. r.stdout .. r.stderr)
      assert.matches("unknown option '%-%-bogus'", r.stderr, 1)
      assert.is_nil(r.stderr:gsub('\n$', ''):find('\n'), table.concat(args, ' ') .. ': more than one line: ' .. r.stderr)
    end
  end)
end)

describe('bar charts', function()
  local report_svg = require('reports.lib.svg')
  it('turn horizontal at 26+ categories, every label in full and one bar per value', function()
    local cats, vals = {}, {}
    for i = 1, 30 do cats[i] = 'a-fairly-long-task-name-number-' .. i; vals[i] = i end
    local text = report_svg.bars(cats, { { name = 'local/cold', values = vals } }, { title = 't' })
    local height = tonumber(text:match('<svg[^>]-height="(%d+)"'))
    assert.is_true(height >= 30 * 20, tostring(height)) -- grows with the categories
    for _, c in ipairs(cats) do assert.matches('>' .. c:gsub('%-', '%%-') .. '<title>', text) end
    local _, bars = text:gsub('<rect [^>]*><title>', '')
    assert.are.equal(30, bars)
    -- a few short categories stay vertical
    local v = report_svg.bars({ 'start', 'verify' }, { { name = 's', values = { 1, 2 } } }, {})
    assert.is_nil(v:find('<title>start</title>', 1, true))
    assert.matches('text%-anchor="middle" fill="#222">start<', v)
  end)
end)

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
    local r = cseng({ 'providers', '--env-file', tmp .. '/l.env' }, { LIZARD_API_KEY = false, LIZARD_PROJECT_ID = false })
    assert.equal(0, r.code, r.stderr)
    assert.matches('\nlizard%s+ready', '\n' .. r.stdout)
    local r2 = cseng({ 'providers' }, { LIZARD_API_KEY = false, LIZARD_PROJECT_ID = false })
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

  it('cleanup reads every --env-file, as run does (a bad first file is named, not skipped)', function()
    local dir = H.tempdir('cseng-cleanup-env-')
    assert(fs.write(dir .. '/a.env', 'this is not KEY=VALUE\n'))
    assert(fs.write(dir .. '/b.env', 'FOO=1\n'))
    local r = H.cseng({ 'cleanup', '--provider', 'local', '--dry-run', '--env-file', dir .. '/a.env', '--env-file', dir .. '/b.env' })
    assert.not_equal(0, r.code)
    assert.matches('a.env:1: expected KEY=VALUE', r.stderr, 1, true)
  end)

  it('flags.parse with pass: its own options parsed, the other command\'s passed on as given', function()
    local mine = { every = { key = 'every', type = 'string' }, once = { key = 'once', type = 'bool' } }
    local pass = { spec = options.SPEC, refuse = { resume = 'the watch resumes its own runs' }, what = 'a watch' }
    local f, pos, passed = flags.parse({ 'p.lua', '--every', '1h', '--samples', '3', '--allow-network', '--once',
      '--concurrency=4', '--', '--seed', '7' }, mine, pass)
    assert.same({ every = '1h', once = true }, f)
    assert.same({ 'p.lua' }, pos)
    assert.same({ '--samples', '3', '--allow-network', '--concurrency=4', '--seed', '7' }, passed)
    assert.same({ nil, '--resume is not a watch option: the watch resumes its own runs' },
      { flags.parse({ '--resume', 'x.jsonl' }, mine, pass) })
    assert.same({ nil, '--samples needs a value' }, { flags.parse({ '--samples' }, mine, pass) })
    local _, err = flags.parse({ '--evry', '1h' }, mine, pass)
    assert.equal("unknown option '--evry'; did you mean --every?", err)
    -- without pass, nothing is passed on: an option the spec does not declare is unknown
    assert.is_nil((flags.parse({ '--samples', '3' }, mine)))
  end)

  it('flags.declare: one entry a flag, in help order; keys from names, aliases, flags of another spec', function()
    local base = flags.declare { { 'env-file', 'multi', arg = 'FILE', help = 'credentials' } }
    local spec, order = flags.declare {
      { 'task-limit', 'int', min = 1, arg = 'N', help = 'at most N tasks' },
      { 'repeat', 'int', key = 'repeats', arg = 'N', help = 'blocks' },
      { 'output', 'string', alias = 'o', arg = 'OUT.md', help = 'where' },
      { 'env-file', from = base },
    }
    assert.same({ 'task-limit', 'repeat', 'output', 'env-file' }, order) -- the alias is not a flag of its own
    assert.equal('task_limit', spec['task-limit'].key)
    assert.equal('repeats', spec['repeat'].key)
    assert.equal(spec.output, spec.o)
    assert.same({ key = 'env_file', type = 'multi', arg = 'FILE', help = 'credentials' }, spec['env-file'])
    local f = assert(flags.parse({ '-o', 'x.md', '--task-limit', '3', '--repeat=2', '--env-file', 'a', '--env-file', 'b' }, spec))
    assert.same({ output = 'x.md', task_limit = 3, repeats = 2, env_file = { 'a', 'b' } }, f)
    assert.equal('  --output OUT.md                where\n  -o OUT.md                      same as --output',
      flags.help(spec, { 'output' }))
    -- an error names the flag as it was typed
    assert.same({ nil, '-o needs a value' }, { flags.parse({ '-o' }, spec) })
    assert.same({ nil, '--output needs a value' }, { flags.parse({ '--output' }, spec) })
    -- a declaration that cannot be right is refused where it is written
    assert.error_matches(function() flags.declare { { 'seed', 'integer' } } end, 'seed: a type of string')
    assert.error_matches(function() flags.declare { { 'seed', 'int' }, { 'seed', 'int' } } end, '%-%-seed is declared twice')
    assert.error_matches(function() flags.declare { { 'Seed', 'int' } } end, 'a name')
    assert.error_matches(function() flags.declare { { 'seed', from = base } } end, 'not a flag of the spec it is from')
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

describe('what the commands print and refuse', function()
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
