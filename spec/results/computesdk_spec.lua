-- cseng and computesdk's sandbox benchmark side by side (lua/cseng/results/computesdk.lua):
-- `cseng export --format computesdk` of arena runs (sequential, burst, staggered on a Lizard fake,
-- with failed samples and samples a fidelity audit failed) validates against computesdk's
-- published results/schema.json, and its composite score, success rate and median/p95/p99 equal
-- their formula computed apart from cseng (spec/helpers/computesdk_check.py, Python, from their
-- src/scoring.ts and src/util/stats.ts) on the same samples; their own published files score the
-- same under that referee and under cseng; `cseng compare` reads their files and cseng's exports,
-- and refuses a malformed one in one line naming the file and the field.
-- The test data and its sources: spec/fixtures/computesdk/README.md.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')
local computesdk = require('cseng.results.computesdk')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

local ROOT = sys.root()
local DATA = ROOT .. '/spec/fixtures/computesdk'
local SCHEMA = DATA .. '/schema.json'
local CHECK = ROOT .. '/spec/helpers/computesdk_check.py'
local THEIRS = { 'sequential_tti-latest.json', 'burst_tti-latest.json', 'staggered_tti-latest.json' }
local fake = require('spec.fakes').module('lizard')

local A = require('spec.helpers.arena')
teardown(A.close_fakes)

-- The referee's answer (JSON on stdout).
local function referee(...)
  local r = assert(proc.run { argv = { 'python3', CHECK, ... }, cwd = ROOT, timeout = 300 })
  assert.equal(0, r.code, r.stderr)
  return assert(jsonl.decode(r.stdout), r.stdout)
end

local function schema_errors(path)
  local out = {}
  for _, e in ipairs(referee('validate', SCHEMA, path).errors) do out[#out + 1] = e.path .. ': ' .. e.message end
  return out
end

local function read_json(path) return assert(jsonl.decode((assert(fs.read(path))))) end

local dir
local logs = {} -- mode -> the run log (audited: see below)

-- One arena run against a fresh fake; the create of every `fail_every`-th call answers 400 (a
-- failed sample, never a time). Create latency varies by call so the samples differ.
local function arena(mode, o)
  local f = fake.start { latency = { create = function(n) return 0.001 * (n % 7) end },
    create_status = function(n) return o.fail and o.fail[n] and 400 or nil end }
  A.started(f)
  local status, _, errtext, info = A.run { providers = { 'liz' }, provider_config = { liz = f.config() }, mode = mode,
    samples = o.samples, warmups = 1, seed = 7, burst = o.burst, stagger_ms = o.stagger_ms, output = dir .. '/' .. mode }
  assert.equal(0, status, errtext)
  f.close()
  return info.jsonl
end

-- The fidelity audit (another part of the arena) records `audit = {ok, labels}` per sample; a
-- copy of the log gets it here, every `k`-th successful measured sample failing it (reused).
local function audited(path, k)
  local out, n = {}, 0
  for _, e in ipairs(results.read(path)) do
    if e.event == 'startup_trial' and e.phase ~= 'warmup' and e.warmup ~= true then
      if e.ok then n = n + 1 end
      e.audit = (e.ok and n % k == 0) and { ok = false, labels = { 'reused' } } or { ok = true, labels = {} }
    end
    out[#out + 1] = jsonl.encode(e)
  end
  local p = path:gsub('%.jsonl$', '-audited.jsonl')
  assert(fs.write(p, table.concat(out, '\n') .. '\n'))
  return p
end

setup(function()
  dir = H.tempdir('computesdk-export-')
  logs.sequential = audited(arena('sequential', { samples = 24, fail = { [5] = true, [13] = true } }), 6)
  logs.burst = audited(arena('burst', { samples = 12, burst = 12, fail = { [3] = true } }), 5)
  logs.staggered = audited(arena('staggered', { samples = 10, stagger_ms = 5 }), 4)
end)

-- The referee's figures of a log, by provider/mode.
local function refereed(log)
  local by = {}
  for _, x in ipairs(referee('fromlog', log)) do by[x.provider .. '/' .. x.mode] = x end
  return by
end

local function export(args)
  local argv = { 'export' }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return H.cseng(argv)
end

describe('cseng export --format computesdk of arena runs', function()
  for _, mode in ipairs({ 'sequential', 'burst', 'staggered' }) do
    it(mode .. ': the v1.1 file validates against their schema and scores as their formula on the same samples', function()
      local out = dir .. '/' .. mode .. '-v11.json'
      local r = export({ logs[mode], '--format', 'computesdk', '-o', out })
      assert.equal(0, r.code, r.stderr)
      assert.same({}, schema_errors(out))
      local doc = read_json(out)
      assert.equal('1.1', doc.version)
      assert.equal(1, #doc.results)
      local res = doc.results[1]
      assert.equal('liz', res.provider)
      assert.equal(computesdk.MODE_OF[mode], res.mode)
      local want = refereed(logs[mode])['liz/' .. mode]
      assert.is_true(want.excluded > 0, 'the audit failed some samples')
      assert.equal(want.attempts, #res.iterations)
      assert.equal(want.compositeScore, res.compositeScore)
      assert.equal(want.successRate, res.successRate)
      assert.equal(want.median, res.summary.ttiMs.median)
      assert.equal(want.p95, res.summary.ttiMs.p95)
      assert.equal(want.p99, res.summary.ttiMs.p99)
      assert.is_true(res.compositeScore > 0 and res.successRate < 1)
      -- the file scores the same from itself under their formula (what their readers recompute)
      local self_score = referee('score', out)[1]
      assert.equal(res.compositeScore, self_score.compositeScore)
      assert.equal(res.successRate, self_score.successRate)
    end)
  end

  it('keeps a failed sample without a time, and an audit-failed one out of the statistics, each with its sandbox id', function()
    local doc = read_json(dir .. '/sequential-v11.json')
    local res = doc.results[1]
    local failed, excluded, timed = 0, 0, 0
    local events = results.read(logs.sequential)
    local by_sid = {}
    for _, e in ipairs(events) do if e.event == 'startup_trial' and e.sandbox_id then by_sid[e.sandbox_id] = e end end
    for _, it in ipairs(res.iterations) do
      if it.error then
        assert.is_nil(it.ttiMs, 'a failed iteration has no time')
        if it.error:find("excluded by cseng's fidelity audit: reused", 1, true) then
          excluded = excluded + 1
          local e = assert(by_sid[it.sandboxId], 'an excluded sample keeps its sandbox id')
          assert.is_false(e.audit.ok)
        else
          failed = failed + 1
        end
      else
        timed = timed + 1
        local e = assert(by_sid[it.sandboxId], 'a timed iteration names its sandbox')
        assert.equal(computesdk.round2(e.ready_ms), it.ttiMs)
      end
    end
    assert.equal(2, failed)
    assert.equal(math.floor((24 - 2) / 6), excluded)
    assert.equal(24 - failed - excluded, timed)
  end)

  it('burst and staggered carry their concurrency, wall clock, time to first ready; staggered its ramp profile', function()
    local b = read_json(dir .. '/burst-v11.json').results[1]
    assert.equal(12, b.concurrency)
    assert.is_true(b.wallClockMs >= b.timeToFirstReadyMs)
    local s = read_json(dir .. '/staggered-v11.json').results[1]
    assert.equal(5, s.staggerDelayMs)
    local timed = 0
    for _, it in ipairs(s.iterations) do if it.ttiMs then timed = timed + 1 end end
    assert.equal(timed, #s.rampProfile) -- one point per clean success, launch order
    for i, p in ipairs(s.rampProfile) do
      assert.is_true(p.readyAt >= p.launchedAt)
      if i > 1 then assert.is_true(p.launchedAt >= s.rampProfile[i - 1].launchedAt) end
    end
  end)

  it('the schema shape holds every mode in one file, validates, and keeps the same figures per mode', function()
    local out = dir .. '/all-schema.json'
    local r = export({ logs.sequential, logs.burst, logs.staggered, '--format', 'computesdk', '--shape', 'schema', '-o', out })
    assert.equal(0, r.code, r.stderr)
    assert.same({}, schema_errors(out))
    local doc = read_json(out)
    assert.equal(3, #doc.results)
    for _, res in ipairs(doc.results) do
      local mode = res.cseng.mode
      local want = refereed(logs[mode])['liz/' .. mode]
      assert.equal(want.compositeScore, res.compositeScore, mode)
      assert.equal(want.median, res.summary.ttiMs.median, mode)
      assert.equal(want.excluded, res.cseng.excluded, mode)
      assert.equal(want.attempts, res.cseng.attempts, mode)
    end
  end)

  it('the validator is not a rubber stamp: a file that breaks their schema is caught', function()
    local doc = read_json(dir .. '/sequential-v11.json')
    doc.results[1].compositeScore = 'high'
    doc.results[1].summary = nil
    local bad = dir .. '/broken.json'
    assert(fs.write(bad, jsonl.encode(doc)))
    local errs = table.concat(schema_errors(bad), '\n')
    assert.matches("results/0/compositeScore: 'high' is not of type 'number'", errs)
    assert.matches("'summary' is a required property", errs)
  end)

  it('refuses a v1.1 file of several modes, --shape without computesdk, and a tasks run, each in one line', function()
    local r = export({ logs.sequential, logs.burst, '--format', 'computesdk' })
    assert.equal(2, r.code, r.stderr)
    assert.matches('a v1.1 file holds one mode', r.stderr)
    r = export({ logs.sequential, logs.burst, '--format', 'computesdk', '--mode', 'burst', '-o', dir .. '/only-burst.json' })
    assert.equal(0, r.code, r.stderr)
    assert.equal('concurrent', read_json(dir .. '/only-burst.json').results[1].mode)
    r = export({ logs.sequential, '--shape', 'schema' })
    assert.equal(2, r.code)
    assert.matches('%-%-shape and %-%-mode go with %-%-format computesdk', r.stderr)
    local tasks_log = dir .. '/tasks.jsonl'
    assert(fs.write(tasks_log, jsonl.encode { event = 'run_started', run_id = 't1', kind = 'tasks', time = '2026-01-01T00:00:00Z' } .. '\n'))
    r = export({ tasks_log, '--format', 'computesdk' })
    assert.is_true(r.code ~= 0)
    assert.matches('is a tasks run; %-%-format computesdk exports startup %(arena%) runs', r.stderr)
    assert.is_nil(r.stderr:find('\n.', 1))
  end)

  it('says what it does in --help', function()
    local r = H.cseng({ 'export', '--help' })
    assert.equal(0, r.code)
    for _, s in ipairs({ '--format computesdk', '--shape v1.1|schema', 'compositeScore', 'fidelity audit', '--format harbor' }) do
      assert.truthy(r.stdout:find(s, 1, true), s)
    end
  end)
end)

describe("computesdk's published result files", function()
  for _, name in ipairs(THEIRS) do
    it(name .. ': validates against their schema; their scores come back from their iterations, under the referee and under cseng', function()
      local path = DATA .. '/' .. name
      assert.same({}, schema_errors(path))
      local doc = read_json(path)
      local ref = referee('score', path)
      local read = computesdk.read(path)
      local n = 0
      for i, r in ipairs(doc.results) do
        if not r.skipped and r.compositeScore ~= nil then
          n = n + 1
          assert.equal(r.compositeScore, ref[i].compositeScore, r.provider .. ' (referee)')
          assert.equal(r.compositeScore, computesdk.recompute(read.results[i]).score, r.provider .. ' (cseng)')
        end
      end
      assert.is_true(n >= 10, name)
    end)
  end
end)

describe('cseng compare with computesdk files', function()
  it('reads their file beside a cseng export and puts the composite scores side by side', function()
    local r = H.cseng({ 'compare', DATA .. '/sequential_tti-latest.json', dir .. '/sequential-v11.json' })
    assert.equal(0, r.code, r.stderr)
    assert.matches('### computesdk composite score', r.stdout)
    local ours = read_json(dir .. '/sequential-v11.json').results[1].compositeScore
    assert.truthy(r.stdout:find(string.format('| liz | – | %.2f |', ours), 1, true), r.stdout)
    assert.matches('| e2b | 94%.23 |', r.stdout)
  end)

  it('calls out a published score that the file\'s own iterations do not give', function()
    local doc = read_json(DATA .. '/sequential_tti-latest.json')
    local e2b
    for _, r in ipairs(doc.results) do if r.provider == 'e2b' then e2b = r end end
    assert.equal(94.23, e2b.compositeScore)
    e2b.compositeScore = 99.5
    local path = dir .. '/doctored/sequential_tti/latest.json'
    assert(fs.mkdir_p(dir .. '/doctored/sequential_tti'))
    assert(fs.write(path, jsonl.encode(doc)))
    local r = H.cseng({ 'compare', DATA .. '/sequential_tti-latest.json', path })
    assert.equal(0, r.code, r.stderr)
    assert.truthy(r.stdout:find('| e2b | 94.23 | 94.23 | +0.00 | 94.23 | 99.50 (!) |', 1, true), r.stdout)
    assert.truthy(r.stdout:find('B e2b: the file publishes 99.50, its iterations give 94.23.', 1, true))
  end)

  it('reads a cseng run log against their file', function()
    local r = H.cseng({ 'compare', DATA .. '/burst_tti-latest.json', logs.burst })
    assert.equal(0, r.code, r.stderr)
    assert.matches('computesdk composite score', r.stdout)
  end)

  local HOSTILE = {
    { 'a time that is text', function(d) d.results[1].iterations[1].ttiMs = 'fast' end,
      'results%[1%]%.iterations%[1%]%.ttiMs: expected a number in %[0, 604800000%]' },
    { 'a negative median', function(d) d.results[2].summary.ttiMs.median = -5 end, 'results%[2%]%.summary%.ttiMs%.median: expected a number' },
    { 'a score past 100', function(d) d.results[1].compositeScore = 1e9 end, 'results%[1%]%.compositeScore: expected a number in %[0, 100%]' },
    { 'a provider twice', function(d) d.results[2].provider = d.results[1].provider end, 'results%[2%]%.provider: expected one entry per provider and mode' },
    { 'a control character in a name', function(d) d.results[1].provider = 'e2b\27[31m' end, 'results%[1%]%.provider: expected a name' },
    { 'results an object', function(d) d.results = { x = 1 } end, 'results: expected a list' },
    { 'no timestamp', function(d) d.timestamp = nil end, 'timestamp: expected an ISO 8601 date%-time' },
  }
  for _, c in ipairs(HOSTILE) do
    it('refuses their file with ' .. c[1] .. ' in one line naming the file and the field', function()
      local doc = read_json(DATA .. '/sequential_tti-latest.json')
      c[2](doc)
      local bad = dir .. '/hostile-' .. c[1]:gsub('%W', '_') .. '.json'
      assert(fs.write(bad, jsonl.encode(doc)))
      local ok, e = pcall(computesdk.read, bad)
      assert.is_false(ok)
      local msg = errors.line(e)
      assert.truthy(msg:find(bad, 1, true), msg)
      assert.matches(c[3], msg)
      local r = H.cseng({ 'compare', DATA .. '/sequential_tti-latest.json', bad })
      assert.is_true(r.code ~= 0, r.stdout)
      assert.matches(c[3], r.stderr)
      assert.is_nil(r.stderr:find('\27', 1, true))
    end)
  end
end)
