-- A real Prometheus (Debian's `prometheus`, on loopback, its own temporary data folder) scrapes a
-- `cseng watch --metrics-port` against the lizard fake, and a run's own status server: both
-- expositions parse (the targets are up with no scrape error), `histogram_quantile(0.5, ...)` of
-- the create latency agrees with cseng's own p50 of the same trials within one bucket, and the
-- trial and sandbox counters equal what the run log holds.
local fs = require('cseng.fs')
local http = require('cseng.http')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')
local store = require('cseng.history.store')
local metrics = require('cseng.history.metrics')

local root = sys.root()
local H = require('spec.helpers.common')
local W = require('spec.helpers.watch')
local RL = require('spec.helpers.runlog')
local lizard = require('spec.fakes').module('lizard')
teardown(H.remove_tempdirs)

local function urlencode(s)
  return (s:gsub('[^%w%-%._~]', function(c) return string.format('%%%02X', c:byte()) end))
end

-- the bucket a value falls in (1-based; #BUCKETS + 1 is +Inf)
local function bucket(v)
  for i, b in ipairs(metrics.BUCKETS) do if v <= b then return i end end
  return #metrics.BUCKETS + 1
end

describe('cseng watch scraped by Prometheus', function()
  local tmp, fake, watch_p, prom, base
  setup(function()
    assert(proc.which('prometheus'), 'prometheus is missing: make deps-test installs Debian\'s prometheus')
    tmp = H.tempdir('cseng-prometheus-')
  end)
  teardown(function()
    if prom then prom:close() end
    if watch_p then watch_p:close() end
    if fake then fake.close() end
  end)

  local function query(q)
    local r = http.request { url = base .. '/api/v1/query?query=' .. urlencode(q), timeout = 10 }
    if not r or r.status ~= 200 then return nil end
    local doc = jsonl.decode(r.body)
    return doc and doc.status == 'success' and doc.data.result or nil
  end
  local function scalar(q)
    local res = query(q)
    return res and res[1] and tonumber(res[1].value[2]) or nil
  end

  it('agrees with cseng on the median and the counters', function()
    local dir = fs.join(tmp, 'results')
    assert(fs.mkdir_p(dir))
    fake = lizard.start { latency = { create = function(n) return 0.030 + ((n * 7919) % 41) / 1000 end } }
    local mport, rport, pport = RL.free_port(), RL.free_port(), RL.free_port()
    -- the current hourly slot runs at once, then the watch waits with its metrics up
    watch_p = W.start(dir, { W.plan(dir, 30), '--every', '1h', '--max-late', '1h', '--output', dir,
      '--metrics-port', tostring(mport) }, fake.env())
    assert(W.until_true(function() return #W.slots(W.journal(dir, 'wspec'), 'finished') == 1 end),
      'the watch\'s first run did not finish: ' .. tostring(fs.read(fs.join(dir, 'watch.err'))))

    local cfg = fs.join(tmp, 'prometheus.yml')
    assert(fs.write(cfg, table.concat({
      'global:', '  scrape_interval: 1s', '  scrape_timeout: 1s',
      'scrape_configs:',
      '  - job_name: cseng-watch', '    static_configs:', string.format("      - targets: ['127.0.0.1:%d']", mport),
      '  - job_name: cseng-run', '    static_configs:', string.format("      - targets: ['127.0.0.1:%d']", rport), '' }, '\n')))
    prom = assert(proc.spawn { argv = { 'prometheus', '--config.file=' .. cfg, '--storage.tsdb.path=' .. fs.join(tmp, 'data'),
      '--web.listen-address=127.0.0.1:' .. pport, '--log.level=warn' }, stdout = fs.join(tmp, 'prom.out'),
      stderr = fs.join(tmp, 'prom.err') })
    base = 'http://127.0.0.1:' .. pport
    assert(W.until_true(function()
      local up = scalar('min_over_time(up{job="cseng-watch"}[10m])')
      local n = scalar('count_over_time(up{job="cseng-watch"}[10m])')
      return up == 1 and n and n >= 2
    end), 'Prometheus did not scrape the watch twice')
    -- a run of its own with a status port, scraped while it runs: far more samples than it gets
    -- to (it is stopped once scraped), so how fast the machine is decides nothing
    local run_p = assert(proc.spawn { argv = { W.CSENG, 'run', W.plan(tmp, 100000), '--output', fs.join(tmp, 'run'), '--quiet',
      '--status-port', tostring(rport) }, cwd = root, env_add = fake.env(), stdout = 'null', stderr = fs.join(tmp, 'run.err') })
    -- scrapes before the run's server listens count as down: wait for two that found it up
    assert(W.until_true(function() local r = scalar('sum_over_time(up{job="cseng-run"}[10m])'); return r and r >= 2 end),
      'Prometheus did not scrape the run up twice: ' .. tostring(fs.read(fs.join(tmp, 'run.err'))))
    local targets = jsonl.decode(assert(http.request { url = base .. '/api/v1/targets', timeout = 10 }).body)
    for _, t in ipairs(targets.data.activeTargets) do
      if t.labels.job == 'cseng-watch' then
        assert.equal('up', t.health)
        assert.equal('', t.lastError)
      end
    end
    run_p:kill('INT')
    local rr = run_p:wait(300)
    assert.equal(130, rr.code, fs.read(fs.join(tmp, 'run.err'))) -- interrupted, its sandboxes destroyed

    -- the median: Prometheus from the histogram, cseng from the same trials
    local q = 'histogram_quantile(0.5, sum by (le) (cseng_sandbox_latency_seconds_bucket{job="cseng-watch",' ..
      'provider="lizard",phase="measured",primitive="create"}))'
    local prom_p50 = assert(scalar(q), 'no histogram_quantile result')
    local S = assert(store.open(dir))
    S:sync()
    local runs = S:judged_runs('watch:wspec')
    assert.equal(1, #runs)
    local s = S:one("SELECT n, p50 FROM series WHERE file = ? AND provider = 'lizard' AND primitive = 'create'", runs[1].file)
    S:close()
    assert.equal(30, s.n)
    local a, b = bucket(prom_p50), bucket(s.p50 / 1000)
    assert.is_true(math.abs(a - b) <= 1, string.format('Prometheus p50 %.4f s (bucket %d), cseng p50 %.4f s (bucket %d)',
      prom_p50, a, s.p50 / 1000, b))

    -- the counters: what the run log holds
    local log = fs.read(fs.join(dir, runs[1].file))
    local passed, errors, allocated, destroyed = 0, 0, 0, 0
    for line in log:gmatch('[^\n]+') do
      local e = jsonl.decode(line)
      if e.event == 'startup_trial' and not e.warmup then
        if e.ok then passed = passed + 1 else errors = errors + 1 end
      elseif e.event == 'allocated' then allocated = allocated + 1
      elseif e.event == 'destroyed' then destroyed = destroyed + 1 end
    end
    assert.equal(30, passed + errors)
    assert.equal(passed, scalar('sum(cseng_trials_total{job="cseng-watch",provider="lizard",outcome="passed"})'))
    assert.equal(errors, scalar('sum(cseng_trials_total{job="cseng-watch",provider="lizard",outcome="error"}) or vector(0)'))
    assert.equal(allocated, scalar('sum(cseng_sandboxes_created_total{job="cseng-watch",provider="lizard"})'))
    assert.equal(destroyed, scalar('sum(cseng_sandboxes_destroyed_total{job="cseng-watch",provider="lizard"})'))
    assert.equal(0, scalar('cseng_live_sandboxes{job="cseng-watch",provider="lizard"}'))
    assert.equal(30, scalar('cseng_sandbox_latency_seconds_count{job="cseng-watch",primitive="create"}'))
    assert.equal(1, scalar('cseng_watch_last_run_verdict{job="cseng-watch",watch="wspec",verdict="learning"}'))
    assert.equal(1, scalar('sum(cseng_watch_runs_total{job="cseng-watch",watch="wspec"})'))
  end)
end)
