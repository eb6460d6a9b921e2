-- The startup report's per-figure sections on a crafted log of a workload run: one section and one
-- chart per figure named in run_started.figures (whatever the workload), the clean samples pooled,
-- the audit-labelled ones counted and drawn apart (never in a median), the failed ones with no
-- figure; a figure name from the log cannot place its chart outside the report's folder, nor put
-- markup in the chart or the page, and an entry that is no {name, unit, what} is passed over (the
-- log is input like any other).
local fs = require('cseng.fs')
local cjson = require('cjson')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

local HOSTILE = '../../evil<script>alert(1)</script>_ms'

describe('startup report: a section and a chart per workload figure', function()
  local dir, md
  setup(function()
    dir = H.tempdir('report-figures-')
    local lines = {}
    local function ev(t) t.run_id = 'fig'; t.time = '2026-12-01T00:00:00Z'; lines[#lines + 1] = cjson.encode(t) end
    ev { event = 'run_started', kind = 'startup', providers = { 'p' }, seed = 1, samples = 8, warmups = 0,
      workload = 'probe', headline = 'alpha_ms',
      figures = { { 'alpha_ms', 'ms', 'call sent -> answer' }, { 'beta_mibps', 'MiB/s', 'bytes over alpha_ms' },
        { HOSTILE, 'ms', 'a name no workload would give' }, 42, { {} } } }
    -- rounds 1-5 clean (alpha 10..50), 6-7 ok but labelled reused (alpha 1000, 2000), 8 failed
    for i = 1, 8 do
      local t = { event = 'startup_trial', provider = 'p', phase = 'measured', warmup = false, round = i, position = 1,
        block = 1, mode = 'lockstep' }
      if i <= 7 then
        t.ok, t.ready_ms, t.clean = true, 5, i <= 5
        local a = i <= 5 and 10 * i or 1000 * (i - 5)
        t.figures = { alpha_ms = a, beta_mibps = 1000 / a, [HOSTILE] = a }
        t.audit = { labels = i > 5 and { 'reused' } or nil, why = i > 5 and { reused = 'marker of round 1' } or nil }
      else
        t.ok, t.error, t.error_stage, t.error_code = false, 'forced', 'probe', 'EINTACT'
        t.audit = { labels = { 'failed' } }
      end
      ev(t)
    end
    ev { event = 'run_finished', status = 'finished' }
    local path = dir .. '/fig.jsonl'
    assert(fs.write(path, table.concat(lines, '\n') .. '\n'))
    require('reports.lib.render').render { inputs = { path }, template = 'startup', output = dir .. '/fig.md' }
    md = assert(fs.read(dir .. '/fig.md'))
  end)

  it('has one section per figure, in the log\'s order, each with its table and chart', function()
    local heads = {}
    for h in md:gmatch('\n### ([^\n]+)') do heads[#heads + 1] = h end
    assert.same({ 'alpha_ms (headline)', 'beta_mibps', HOSTILE }, heads)
    local charts = 0
    for _ in md:gmatch('!%[samples of [^%]]*%]%(fig%.figure%-[%w_%-]+%.svg%)') do charts = charts + 1 end
    assert.equal(3, charts)
  end)

  it('pools the clean samples only; the labelled and the failed are counted apart', function()
    -- alpha over rounds 1-5: median 30 (the labelled 1000 and 2000 would make it 40)
    local row = md:match('\n### alpha_ms %(headline%).-\n| p | ([^\n]*)')
    assert.truthy(row, 'alpha_ms row')
    local cells = {}
    for c in ('| p | ' .. row):gmatch('|%s*([^|]-)%s*%f[|]') do cells[#cells + 1] = c end
    assert.equal('5', cells[2])      -- n: the clean samples
    assert.equal('30.00', cells[3])  -- p50 of 10..50
    assert.equal('50.00', cells[7])  -- max: no labelled sample in it
    assert.equal('2', cells[8])      -- labelled, apart
    assert.equal('1', cells[9])      -- failed, no figure
    local svg = assert(fs.read(dir .. '/fig.figure-alpha_ms.svg'))
    local clean = svg:match('<g class="strip%-row" data%-provider="p" data%-labelled="false" data%-samples="(%d+)">')
    local labelled = svg:match('<g class="strip%-row labelled" data%-provider="p" data%-labelled="true" data%-samples="(%d+)">')
    assert.equal('5', clean)
    assert.equal('2', labelled)
    -- one median and one CI, both in the clean row
    local _, medians = svg:gsub('class="median"', '')
    local _, cis = svg:gsub('class="ci"', '')
    assert.equal(1, medians)
    assert.equal(1, cis)
    local labelled_part = svg:match('<g class="strip%-row labelled".-</g>')
    assert.is_nil(labelled_part:find('class="median"', 1, true))
  end)

  it('keeps a hostile figure name\'s chart beside the report and its markup out of the SVG', function()
    local names = fs.list(dir)
    table.sort(names)
    local svgs = {}
    for _, n in ipairs(names) do if n:match('%.svg$') then svgs[#svgs + 1] = n end end
    for _, n in ipairs(svgs) do assert.is_nil(n:find('/', 1, true)) end
    assert.is_nil(fs.exists(fs.join(dir, '../../evil')) and true or nil)
    local hostile
    for _, n in ipairs(svgs) do if n:match('evil') then hostile = n end end
    assert.truthy(hostile, 'no chart for the hostile figure: ' .. table.concat(svgs, ', '))
    assert.is_nil(hostile:find('..', 1, true))
    local svg = assert(fs.read(fs.join(dir, hostile)))
    assert.is_nil(svg:find('<script', 1, true))
    assert.truthy(svg:find('&lt;script&gt;', 1, true))
  end)
end)
