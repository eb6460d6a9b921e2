-- Rates seeded from computesdk's pricing.json (`cseng run --pricing FILE`, lua/cseng/evals/rates.lua):
-- their normalised $/hour for 1 vCPU + 2 GB becomes each adapter's rates where the plan names
-- none, the plan wins over the file and the file over the adapter's own, the source is recorded
-- in run_started and every trial's cost ledger, and a bad file or plan field is one line naming
-- the file and the field. Their published file (spec/fixtures/computesdk/pricing.json) is the input.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')
local rates = require('cseng.evals.rates')
local frame = require('cseng.run.frame')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

local ROOT = sys.root()
local PRICING = ROOT .. '/spec/fixtures/computesdk/pricing.json'
local lizard_fake = require('spec.fakes').module('lizard')

local function raised(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return errors.line(e), type(e) == 'table' and e.code or nil
end

-- Their file, decoded independently of rates.lua (cjson), by id.
local function theirs()
  local doc = require('cjson').decode((assert(fs.read(PRICING))))
  local by = {}
  for _, p in ipairs(doc.providers) do by[p.id] = p end
  return doc, by
end

local function near(a, b, what) assert(math.abs(a - b) <= 1e-12 * math.max(1, math.abs(b)), string.format('%s: %.17g ~= %.17g', what, a, b)) end

describe('rates.load_pricing on computesdk\'s published pricing.json', function()
  local p, doc, by
  setup(function()
    p = rates.load_pricing(PRICING)
    doc, by = theirs()
  end)

  it('records the file, its sha256, its date and basis', function()
    assert.equal(PRICING, p.file)
    assert.equal(crypto.sha256_hex(assert(fs.read(PRICING))), p.sha256)
    assert.equal(doc.meta.last_updated, p.last_updated)
    assert.equal('1 vCPU + 2 GB RAM / hour', p.basis)
  end)

  it('gives every provider with a normalised total rates that cost exactly that total for 1 vCPU + 2 GiB for an hour', function()
    local n = 0
    for id, e in pairs(by) do
      local norm = e.pricing and e.pricing.normalized
      if norm and type(norm.total_1vcpu_2gb_hr) == 'number' then
        n = n + 1
        local r = assert(p.by_id[id], id .. ' left out')
        near(3600 * (1 * r.vcpu_s + 2 * r.gib_s), norm.total_1vcpu_2gb_hr, id .. ': 1 vCPU + 2 GiB for an hour')
        assert.is_true(r.vcpu_s >= 0 and r.gib_s >= 0, id)
      else
        assert.is_nil(p.by_id[id], id .. ' has no total and seeds nothing')
      end
    end
    assert.equal(10, n) -- the file's providers with a total: e2b, blaxel, modal, namespace, vercel, ...
  end)

  it('splits CPU and memory by their cpu_per_vcpu_hr (e2b), and bundles memory where the CPU rate is the total (namespace)', function()
    near(p.by_id.e2b.vcpu_s, 0.0504 / 3600, 'e2b vcpu_s')
    near(p.by_id.e2b.gib_s, (0.0828 - 0.0504) / 2 / 3600, 'e2b gib_s')
    near(p.by_id.namespace.vcpu_s, 0.06 / 3600, 'namespace vcpu_s')
    assert.equal(0, p.by_id.namespace.gib_s)
    assert.equal('estimated', p.by_id.codesandbox.confidence)
  end)
end)

describe('rates.resolve: plan, then pricing, then the adapter', function()
  local p
  setup(function() p = rates.load_pricing(PRICING) end)
  local own = { vcpu_s = 0.000014, gib_s = 0.0000045, per_create = 0.001 }

  it('takes the plan\'s rates (one table for all, or by provider name) over the file', function()
    local r, src = rates.resolve { name = 'e2b', adapter_name = 'e2b', adapter_rates = own, pricing = p,
      plan_rates = { vcpu_s = 0.5 } }
    assert.same({ vcpu_s = 0.5, gib_s = own.gib_s, per_create = own.per_create }, r)
    assert.equal('plan', src.from)
    r, src = rates.resolve { name = 'e2b-eu', adapter_name = 'e2b', adapter_rates = own, pricing = p,
      plan_rates = { ['e2b-eu'] = { gib_s = 0.25 } } }
    assert.equal(0.25, r.gib_s)
    assert.equal('plan', src.from)
  end)

  it('seeds from the file by the adapter\'s name where the plan names none, keeping the adapter\'s per-create fee', function()
    local r, src = rates.resolve { name = 'fast', adapter_name = 'daytona', adapter_rates = own, pricing = p,
      plan_rates = { other = { vcpu_s = 1 } } }
    assert.equal(p.by_id.daytona.vcpu_s, r.vcpu_s)
    assert.equal(p.by_id.daytona.gib_s, r.gib_s)
    assert.equal(own.per_create, r.per_create)
    assert.same({ from = 'pricing', file = PRICING, sha256 = p.sha256, last_updated = '2026-03-16', id = 'daytona',
      total_1vcpu_2gb_hr = 0.0828, confidence = 'exact' }, src)
  end)

  it('never prices a provider by its record name: a lizard named "e2b" keeps its adapter\'s rates', function()
    local r, src = rates.resolve { name = 'e2b', adapter_name = 'lizard', adapter_rates = { vcpu_s = 0, gib_s = 0 }, pricing = p }
    assert.same({ vcpu_s = 0, gib_s = 0, per_create = 0 }, r)
    assert.equal('adapter', src.from)
    assert.matches('no normalised rate for it in', src.note)
  end)

  it('leaves an adapter without rates (local) without any', function()
    local r, src = rates.resolve { name = 'local', adapter_name = 'local', pricing = p }
    assert.is_nil(r)
    assert.equal('none', src.from)
  end)
end)

describe('hostile pricing files and plan rates', function()
  local dir
  setup(function() dir = H.tempdir('pricing-') end)
  local function file(name, text)
    local path = dir .. '/' .. name
    assert(fs.write(path, text))
    return path
  end
  local GOOD_META = '"meta":{"normalization_basis":"1 vCPU + 2 GB RAM / hour","last_updated":"2026-03-16"}'
  local function one(normalized)
    return '{' .. GOOD_META .. ',"providers":[{"id":"e2b","pricing":{"normalized":' .. normalized .. '}}]}'
  end

  local CASES = {
    { 'not JSON', '{"meta": ', 'not valid JSON' },
    { 'a list', '[1,2]', '%(the file%): expected a JSON object' },
    { 'another basis', '{"meta":{"normalization_basis":"2 vCPU + 4 GB"},"providers":[]}', 'meta.normalization_basis: expected' },
    { 'no meta', '{"providers":[]}', 'meta: expected an object' },
    { 'providers an object', '{' .. GOOD_META .. ',"providers":{"e2b":1}}', 'providers: expected a list' },
    { 'a provider not an object', '{' .. GOOD_META .. ',"providers":[7]}', 'providers%[1%]: expected an object' },
    { 'a bad id', '{' .. GOOD_META .. ',"providers":[{"id":"../etc"}]}', 'providers%[1%]%.id: expected a provider name' },
    { 'an id twice', '{' .. GOOD_META .. ',"providers":[{"id":"e2b"},{"id":"e2b"}]}', 'providers%[2%]%.id: expected one entry per provider' },
    { 'a string rate', one('{"total_1vcpu_2gb_hr":"cheap"}'), 'providers%[1%]%.pricing%.normalized%.total_1vcpu_2gb_hr: expected USD per hour' },
    { 'a negative rate', one('{"total_1vcpu_2gb_hr":-1}'), 'total_1vcpu_2gb_hr: expected USD per hour in %[0, 10000%]' },
    { 'a huge rate', one('{"total_1vcpu_2gb_hr":1e300}'), 'total_1vcpu_2gb_hr: expected USD per hour in %[0, 10000%]' },
    { 'a bad cpu rate', one('{"total_1vcpu_2gb_hr":0.1,"cpu_per_vcpu_hr":true}'), 'cpu_per_vcpu_hr: expected USD per hour' },
    { 'normalized a list', one('[1]'), 'pricing%.normalized: expected an object' },
  }
  for _, c in ipairs(CASES) do
    it('refuses ' .. c[1] .. ' in one line naming the file and the field', function()
      local path = file(c[1]:gsub('%W', '_') .. '.json', c[2])
      local msg, code = raised(rates.load_pricing, path)
      assert.equal(errors.ECONFIG, code)
      assert.truthy(msg:find(path, 1, true), msg)
      assert.matches(c[3], msg)
      assert.is_nil(msg:find('\n'), msg)
    end)
  end

  it('refuses a missing file', function()
    local msg, code = raised(rates.load_pricing, dir .. '/absent.json')
    assert.equal(errors.ECONFIG, code)
    assert.matches('absent%.json: %-%-pricing: no such file', msg)
  end)

  it('takes a file whose CPU figure is above its total as all-CPU (never a negative memory rate)', function()
    local p = rates.load_pricing(file('cpu-above.json', one('{"total_1vcpu_2gb_hr":0.05,"cpu_per_vcpu_hr":0.09}')))
    near(p.by_id.e2b.vcpu_s, 0.05 / 3600, 'vcpu_s')
    assert.equal(0, p.by_id.e2b.gib_s)
  end)

  local PLAN_CASES = {
    { { vcpu_s = -1 }, 'rates%.vcpu_s: expected USD in %[0, 1000%], got %-1' },
    { { vcpu_s = 0 / 0 }, 'rates%.vcpu_s: expected USD' },
    { { cpu = 1 }, 'rates%.cpu: expected a table {vcpu_s, gib_s, per_create}, got 1' },
    { { e2b = { vcpu_s = 'cheap' } }, 'rates%.e2b%.vcpu_s: expected USD in %[0, 1000%], got "cheap"' },
    { { e2b = 5 }, 'rates%.e2b: expected a table' },
    { { e2b = { typo_s = 1 } }, 'rates%.e2b: unknown rate "typo_s"' },
  }
  for i, c in ipairs(PLAN_CASES) do
    it('refuses a bad plan rates field (' .. i .. ') naming the plan and the field', function()
      local ok, e = pcall(rates.check_plan, c[1], 'plans/x.lua')
      assert.is_false(ok)
      local msg = errors.line(e)
      assert.matches('^plans/x%.lua: ', msg)
      local any = false
      for alt in c[2]:gmatch('[^|]+') do if msg:find(alt) then any = true end end
      assert.is_true(any, msg)
      assert.equal(errors.EPLAN, e.code)
    end)
  end

  it('cseng run --pricing BAD stops before anything is written, exit 1, one line', function()
    local bad = file('cli-bad.json', one('{"total_1vcpu_2gb_hr":"cheap"}'))
    local out = dir .. '/cli-out'
    local r = H.cseng({ 'run', 'plans/cold-gold.lua', '--task-limit', '1', '--pricing', bad, '--output', out, '--quiet' })
    assert.equal(1, r.code, r.stderr)
    assert.matches('cli%-bad%.json: providers%[1%]%.pricing%.normalized%.total_1vcpu_2gb_hr: expected', r.stderr)
    assert.is_nil(fs.stat(out))
  end)
end)

describe('a run with --pricing', function()
  local dir, f, by, lizard_entry
  setup(function()
    dir = H.tempdir('pricing-run-')
    -- their file with one entry more: the lizard adapter priced as they price e2b
    local doc = jsonl.decode(assert(fs.read(PRICING)))
    local e2b
    for _, p in ipairs(doc.providers) do if p.id == 'e2b' then e2b = p end end
    lizard_entry = util.copy(e2b)
    lizard_entry.id = 'lizard'
    table.insert(doc.providers, lizard_entry)
    assert(fs.write(dir .. '/pricing.json', jsonl.encode(doc)))
    f = lizard_fake.start {}
    local _, info = frame.run('tasks', {
      provider = 'lizard', dataset = ROOT .. '/data/smoke.jsonl', solver = 'gold', mode = 'cold', task_limit = 2,
      concurrency = 1, output = dir .. '/out', quiet = true, cleanup_backoff = { 0, 0 },
      provider_config = f.config(), pricing = dir .. '/pricing.json',
    })
    by = setmetatable({}, { __index = function(t, k) local l = {}; rawset(t, k, l); return l end })
    for _, e in ipairs(results.read(info.jsonl)) do table.insert(by[e.event], e) end
  end)
  teardown(function() if f then f.close() end end)

  it('records the rates and their source in run_started', function()
    local r = by.run_started[1].rates.lizard
    near(r.vcpu_s, 0.0504 / 3600, 'vcpu_s')
    near(r.gib_s, (0.0828 - 0.0504) / 2 / 3600, 'gib_s')
    assert.equal(0, r.per_create)
    assert.equal('pricing', r.source.from)
    assert.equal(dir .. '/pricing.json', r.source.file)
    assert.equal(crypto.sha256_hex(assert(fs.read(dir .. '/pricing.json'))), r.source.sha256)
    assert.equal('2026-03-16', r.source.last_updated)
    assert.equal('lizard', r.source.id)
    assert.equal(0.0828, r.source.total_1vcpu_2gb_hr)
  end)

  it('costs every trial with them, and says so in its ledger', function()
    assert.is_true(#by.trial >= 2)
    for _, t in ipairs(by.trial) do
      assert.is_true(t.sandbox_seconds > 0, t.task_id)
      local cpus = t.config and t.config.cpus or 1
      local gib = (t.config and t.config.memory_mb or 1024) / 1024
      local want = t.sandbox_seconds * (cpus * 0.0504 / 3600 + gib * (0.0828 - 0.0504) / 2 / 3600)
      near(t.estimated_cost_usd, want, t.task_id .. ' cost')
      assert.equal('rates', t.cost.items[1].source)
      assert.equal('pricing', t.cost.items[1].rates_from)
    end
  end)

  it('--resume refuses a pricing file changed since the run started, and takes the same one', function()
    local started = by.run_started[1]
    local opts = { flags_given = {}, provider = 'lizard' }
    local ok, e = pcall(frame.restore, opts, started)
    assert.is_true(ok, ok or errors.line(e))
    assert.equal(dir .. '/pricing.json', e.pricing)
    local saved = assert(fs.read(dir .. '/pricing.json'))
    assert(fs.write(dir .. '/pricing.json', (saved:gsub('0%.0828', '0.0829', 1))))
    ok, e = pcall(frame.restore, opts, started)
    assert(fs.write(dir .. '/pricing.json', saved))
    assert.is_false(ok)
    assert.matches('%-%-resume: %-%-pricing .*pricing%.json is not the file the run started with %(sha256 %x+, now %x+%)', errors.line(e))
  end)

  it('shows the rates and their source in the report', function()
    local r = H.cseng({ 'report', dir .. '/out', '--template', 'per_provider', '-o', dir .. '/report.md' })
    assert.equal(0, r.code, r.stderr)
    local md = assert(fs.read(dir .. '/report.md'))
    assert.truthy(md:find('## Sandbox rates', 1, true), md)
    assert.truthy(md:find('pricing.json', 1, true))
    assert.truthy(md:find('0.0828', 1, true))
  end)
end)

describe('an arena run with --pricing', function()
  it('records the seeded rates per provider and shows them in its report', function()
    local dir = H.tempdir('pricing-arena-')
    local doc = jsonl.decode(assert(fs.read(PRICING)))
    for _, p in ipairs(doc.providers) do if p.id == 'daytona' then p.id = 'lizard' end end -- the lizard adapter priced as daytona
    assert(fs.write(dir .. '/pricing.json', jsonl.encode(doc)))
    local f = lizard_fake.start {}
    local sink = { text = '' }
    function sink:write(...) for _, x in ipairs({ ... }) do self.text = self.text .. tostring(x) end end
    local opts = { providers = { 'liz' }, provider_config = { liz = f.config() }, samples = 3, warmups = 0, seed = 3,
      output = dir, quiet = true, cleanup_backoff = { 0.01, 0.02 }, pricing = dir .. '/pricing.json', stderr = sink }
    local status, info = frame.run('startup', require('cseng.cli.present').attach(opts, { err = sink }))
    f.close()
    assert.equal(0, status, sink.text)
    local st
    for _, e in ipairs(results.read(info.jsonl)) do if e.event == 'run_started' then st = e end end
    local r = st.rates.liz
    assert.equal('pricing', r.source.from)
    assert.equal('lizard', r.source.id)
    near(3600 * (r.vcpu_s + 2 * r.gib_s), 0.0828, 'liz: 1 vCPU + 2 GiB per hour')
    local md = assert(fs.read(info.report))
    assert.truthy(md:find('## Sandbox rates', 1, true), md)
    assert.truthy(md:find('| liz | 0.0504 | 0.0162 |', 1, true), md)
  end)
end)
