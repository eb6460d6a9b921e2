--- The history at a year's scale: a watch folder of N hourly arena runs (default 9,000, two
--- providers, 10 measured samples each, one provider's create latency stepping up 25% at run
--- N * 2/3), its history store rebuilt from the logs by `cseng history --rebuild` (its own process),
--- then `cseng view` on it (its own process) and measured: the history page's JSON (the index and
--- one series, server time and size), the page opened in headless Chromium until drawn (a fresh
--- browser, then warm loads), and the viewer's start until its run list holds every run, with the
--- store current (the index restored from it) and without a store (every log read).
---
---   ./cseng lua bench/history_bench.lua [--runs 9000] [--out FILE.json] [--keep]
---
--- Prints one JSON object (also to --out) and a summary. Not a test: nothing here passes or fails
--- on time. make bench (bench/run.lua) runs it and writes its section of docs/PERFORMANCE.md.
local clock = require('cseng.clock')
local blib = require('bench.lib')
local fs = require('cseng.fs')
local http = require('cseng.http')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local task = require('cseng.task')

local root = sys.root()
local HH = require('spec.helpers.history')

local f = blib.options('history_bench', { ... }, { runs = { 'int', min = 10 }, out = 'string', keep = 'bool' })
if not f then return 2 end
local N = f.runs or 9000
local dir = assert(fs.tempdir('cseng-history-bench-'))
local m = { runs = N, cpus = sys.cpu_count(), loadavg_1min_before = (fs.read('/proc/loadavg') or ''):match('^(%S+)') }

-- the folder: N hourly runs of a watch, 2 providers x (10 measured + 1 warmup)
local t0 = clock.now()
local runs = {}
local step = N * 2 // 3
for k = 1, N do
  runs[k] = { samples = 10, providers = { 'alpha', 'beta' }, create = function(i, p)
    local base = (p == 'beta' and k > step) and 62.5 or 50
    return base + HH.jitter(k, i, 6)
  end, exec = function(i) return 20 + HH.jitter(k + 7, i, 3) end }
end
HH.watch_folder(dir, 'year', runs, { window = 10, min_window = 5, hold = 3 })
m.write_s = (clock.now() - t0) / 1e9

-- the store from the logs, as a user rebuilds it
local r = assert(proc.run { argv = { root .. '/cseng', 'history', dir, '--rebuild' }, timeout = 3600 })
assert(r.code == 0, r.stderr)
m.rebuild_s = r.elapsed
m.store_mib = fs.stat(fs.join(dir, 'history.sqlite')).size / 1048576
m.rebuild_line = (r.stdout:match('[^\n]+') or '')

local port = 20000 + (sys.pid() + 17) % 20000
local base = string.format('http://127.0.0.1:%d', port)
local server

local function start_server()
  local t = clock.now()
  server = assert(proc.spawn { argv = { root .. '/cseng', 'view', dir, '--port', port }, stdout = fs.join(dir, 'view.out'),
    stderr = fs.join(dir, 'view.err') })
  -- until the run list holds every run, indexed
  for _ = 1, 100000 do
    local ok, resp = pcall(http.request, { url = base .. '/api/runs', timeout = 120 })
    if ok and resp and resp.status == 200 then
      local doc = jsonl.decode(resp.body)
      local pending = 0
      for _, row in ipairs(doc.runs) do if row.indexing then pending = pending + 1 end end
      if #doc.runs >= N and pending == 0 then return (clock.now() - t) / 1e6 end
    end
    task.sleep(0.25) -- every request walks the run list: asking often would slow what it measures
  end
  error('the viewer did not list every run')
end
local function stop_server()
  server:kill('TERM')
  server:wait(30)
  server = nil
end

-- the server's CPU seconds (utime + stime): on a loaded machine the wall times include waiting for
-- a core, this does not
local function cpu_s()
  local st = fs.read('/proc/' .. server:pid() .. '/stat') or ''
  local fields = {}
  for x in (st:match('%) (.*)$') or ''):gmatch('%S+') do fields[#fields + 1] = x end
  return ((tonumber(fields[12]) or 0) + (tonumber(fields[13]) or 0)) / 100
end

local function get(p)
  local s = clock.now()
  local resp = assert(http.request { url = base .. p, timeout = 120 })
  assert(resp.status == 200, p .. ': HTTP ' .. resp.status)
  return (clock.now() - s) / 1e6, #resp.body
end

-- 1. the viewer with the store current: its run index restored from the store
m.view_start_store_ms = start_server()
m.history_index_ms, m.history_index_bytes = get('/api/history')
local q = '/api/history/series?store=1&lineage=' .. 'watch%3Ayear' .. '&provider=beta&phase=measured&primitive=create&metric=p50'
m.history_series_ms, m.history_series_bytes = get(q)
m.history_series_ms_2 = get(q)

-- the page in headless Chromium: from navigation until drawn (charts of both providers)
local probe = fs.join(dir, 'probe.mjs')
assert(fs.write(probe, [[
import { launch } from ']] .. root .. [[/spec/browser/launch.mjs';
const { page, close } = await launch();
const times = [];
let points = null;
for (let k = 0; k < Number(process.argv[3]); k++) {
  const t = Date.now();
  await page.goto(process.argv[2]);
  await page.waitForSelector('body[data-ready="1"] svg.history-chart', { timeout: 120000 });
  times.push(Date.now() - t);
  points = await page.$$eval('svg.history-chart', (ss) => ss.map((s) => Number(s.dataset.points)));
}
await close();
console.log(JSON.stringify({ times, points }));
]]))
local have_browser = fs.exists('/usr/bin/chromium') and fs.exists(root .. '/spec/browser/node_modules/playwright-core')
if have_browser then
  local c0 = cpu_s()
  local br = proc.run { argv = { 'node', probe, base .. '/history', '4' }, timeout = 900 }
  m.page_server_cpu_s = cpu_s() - c0 -- the 4 loads (the first one builds the series' JSON)
  local doc = br and jsonl.decode(br.stdout:match('[^\n]*\n?$') or '')
  if doc then m.page_ms, m.page_points = doc.times, doc.points else m.page_error = br and br.stderr:sub(-400) end
else
  m.page_error = 'no browser (make deps-test: chromium, spec/browser/node_modules)'
end
stop_server()

-- 2. without a store: every log read at start
fs.rename(fs.join(dir, 'history.sqlite'), fs.join(dir, 'kept.sqlite'))
for _, x in ipairs({ '-wal', '-shm' }) do fs.remove(fs.join(dir, 'history.sqlite' .. x)) end
m.view_start_logs_ms = start_server()
stop_server()
m.loadavg_1min_after = (fs.read('/proc/loadavg') or ''):match('^(%S+)')

if not f.keep then fs.remove_tree(dir) else m.dir = dir end
if f.out then assert(fs.write(f.out, jsonl.encode(m))) end
print(jsonl.encode(m))
print(string.format('history bench: %d hourly runs (2 providers). Store rebuilt from the logs in %.1f s (%.1f MiB). ' ..
  'Viewer start until every run is listed: %.0f ms with the store current, %.0f ms reading every log. History JSON: ' ..
  'index %.0f ms (%d bytes), one series %.0f ms (%d bytes). Page drawn in Chromium in %s ms (fresh, then warm; ' ..
  'the server\'s CPU for the four: %s s). ' ..
  'Load average %s / %s on %d CPUs.', N, m.rebuild_s, m.store_mib, m.view_start_store_ms, m.view_start_logs_ms,
  m.history_index_ms, m.history_index_bytes, m.history_series_ms, m.history_series_bytes,
  m.page_ms and table.concat(m.page_ms, ' / ') or tostring(m.page_error), tostring(m.page_server_cpu_s), tostring(m.loadavg_1min_before),
  tostring(m.loadavg_1min_after), m.cpus))
