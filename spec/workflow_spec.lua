-- The everyday workflow: --tasks globs, cseng compare, cseng export (CSV that Python's csv module
-- reads back to the JSONL's values), cseng providers --json, and unknown options refused by every
-- command.
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local cjson = require 'cjson'
local dataset = require 'cseng.workload.dataset'
local results = require 'cseng.results.log'

local ROOT = sys.root()

local tmp
setup(function() tmp = assert(fs.tempdir('cseng-workflow-spec')) end)
teardown(function() fs.remove_tree(tmp) end)

local H = dofile(ROOT .. '/spec/helpers/common.lua')
local function cseng(args, stdin) return H.cseng(args, { stdin = stdin, timeout = 600 }) end

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
  local report_svg = require 'reports.lib.svg'
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
