--- The viewer at scale: a 100,000-trial run log (about 1 KB a line, verifier tails included),
--- served by `cseng view` in its own process, then measured: the first request for the run's page
--- data (which indexes the whole log), the requests the run page makes once indexed (shell, run
--- document, first page of trials, one trial), the page opened in headless Chromium until drawn,
--- a page deep in the log, and the server's resident memory (VmRSS and its peak VmHWM).
---
---   ./cseng lua bench/view_bench.lua [--trials 100000] [--keep]
---
--- Prints one JSON object and a summary; docs/VIEWER.md quotes the figures. Not a test: nothing
--- here passes or fails on time.
local clock = require('cseng.clock')
local blib = require('bench.lib')
local fs = require('cseng.fs')
local http = require('cseng.http')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local task = require('cseng.task')

local root = sys.root()
local fixtures = require('spec.browser.fixtures')

local f = blib.options('view_bench', { ... }, { trials = { 'int', min = 1 }, keep = 'bool' })
if not f then return 2 end
local N = f.trials or 100000
local RUN = 'view-bench-local-cold-20261201-000000-beef'

local dir = assert(fs.tempdir('cseng-view-bench-'))
local path = fs.join(dir, RUN .. '.jsonl')

-- the log, written with the results codec in big appends (Writer:event per line would fsync-free
-- append 100,000 times: the same bytes, slower)
local t0 = clock.now()
local out = assert(io.open(path, 'wb'))
local function line(rec) return jsonl.encode(rec) .. '\n' end
out:write(line { event = 'run_started', run_id = RUN, time = '2026-12-01T00:00:00.000000Z', plan = 'view-bench',
  provider = 'local', mode = 'cold', solver = 'gold', dataset = 'data/bench.jsonl', task_count = N, host = 'bench',
  pid = 1 })
local buf = {}
local tail = string.rep('test_outputs.py::test_case PASSED\n', 20)
for i = 1, N do
  local outcome = (i % 17 == 0) and 'error' or ((i % 9 == 0) and 'failed' or 'passed')
  local rec = fixtures.trial(i, { task_id = string.format('task-%06d', i), outcome = outcome,
    provider = (i % 2 == 0) and 'local' or 'docker', error_code = outcome == 'error' and 'ETIMEDOUT' or nil,
    error_stage = outcome == 'error' and 'verify' or nil,
    error = outcome == 'error' and 'trial timed out after 900 s (in verify)' or nil,
    extra = { stdout_tail = outcome ~= 'error' and tail or nil } })
  rec.event, rec.run_id, rec.time = 'trial', RUN, '2026-12-01T00:00:01.000000Z'
  buf[#buf + 1] = line(rec)
  if #buf == 1000 then out:write(table.concat(buf)); buf = {} end
end
out:write(table.concat(buf))
out:write(line { event = 'run_finished', run_id = RUN, time = '2026-12-01T01:00:00.000000Z', status = 'finished' })
out:close()
local write_s = (clock.now() - t0) / 1e9
local size = fs.stat(path).size

local port = 20000 + sys.pid() % 20000
local base = string.format('http://127.0.0.1:%d', port)

-- the page in headless Chromium, from navigation until it has drawn its first page of trials;
-- `rounds` loads in a row (the first one of a fresh browser pays its start-up)
local probe = fs.join(dir, 'probe.mjs')
assert(fs.write(probe, [[
import { launch } from ']] .. root .. [[/spec/browser/launch.mjs';
const { page, close } = await launch();
const times = [], totals = [];
for (let k = 0; k < Number(process.argv[3]); k++) {
  const t = Date.now();
  await page.goto(process.argv[2]);
  await page.waitForSelector('body[data-ready="1"] #trials tbody tr', { timeout: 120000 });
  times.push(Date.now() - t);
  totals.push(await page.getAttribute('#trial-count', 'data-total'));
}
await close();
console.log(JSON.stringify({ times, totals }));
]]))
local have_browser = fs.exists('/usr/bin/chromium') and fs.exists(root .. '/spec/browser/node_modules/playwright-core')
local function browser(rounds)
  if not have_browser then return nil end
  local r = proc.run { argv = { 'node', probe, base .. '/runs/' .. RUN, rounds }, timeout = 600 }
  return r and jsonl.decode(r.stdout:match('[^\n]*\n?$') or '') or { error = r and r.stderr:sub(-400) }
end

local function get(p)
  local s = clock.now()
  local r = assert(http.request { url = base .. p, timeout = 120 })
  assert(r.status == 200, p .. ': HTTP ' .. r.status .. ' ' .. r.body:sub(1, 200))
  return (clock.now() - s) / 1e6, r
end

local server
local function rss()
  local st = fs.read('/proc/' .. server:pid() .. '/status') or ''
  return tonumber(st:match('VmRSS:%s*(%d+)')) / 1024, tonumber(st:match('VmHWM:%s*(%d+)')) / 1024
end
-- the server's CPU seconds (utime + stime, clock ticks of 1/100 s): on a shared, loaded machine
-- the wall times include waiting for a core; this does not
local function cpu_s()
  local st = fs.read('/proc/' .. server:pid() .. '/stat') or ''
  local rest = st:match('%) (.*)$') or ''
  local fields = {}
  for x in rest:gmatch('%S+') do fields[#fields + 1] = x end
  return ((tonumber(fields[12]) or 0) + (tonumber(fields[13]) or 0)) / 100
end
local function loadavg() return (fs.read('/proc/loadavg') or ''):match('^(%S+)') end

local m = { trials = N, log_bytes = size, write_s = write_s, loadavg_1min_before = loadavg(), cpus = sys.cpu_count() }

-- 1. a fresh server: the first run document (the log is read in slices: partial counts), the
-- page in a fresh Chromium at once, and the time until the whole log is indexed
local t_spawn = clock.now()
server = assert(proc.spawn { argv = { root .. '/cseng', 'view', dir, '--port', port }, stdout = fs.join(dir, 'view.out'),
  stderr = fs.join(dir, 'view.err') })
for _ = 1, 1000 do
  local r = http.request { url = base .. '/api/runs/' .. RUN, timeout = 60 }
  if r and r.status == 200 then
    m.start_to_first_run_doc_ms = (clock.now() - t_spawn) / 1e6
    m.first_run_doc_trials = jsonl.decode(r.body).run.trials
    break
  end
  task.sleep(0.01)
end
assert(m.start_to_first_run_doc_ms, 'the viewer did not answer')
local cold = browser(1)
if cold then m.cold_browser_open_ms, m.cold_browser_trials_shown = cold.times and cold.times[1], cold.totals and cold.totals[1] end
while true do
  local _, r = get('/api/runs/' .. RUN)
  local doc = jsonl.decode(r.body)
  if not doc.run.indexing then
    m.start_to_indexed_ms = (clock.now() - t_spawn) / 1e6
    m.indexed_trials = doc.run.trials
    break
  end
  task.sleep(0.05)
end
m.index_cpu_s = cpu_s() -- the server's start, the index, and the requests so far
m.rss_indexed_mib = rss()

-- 2. the indexed server: the requests a run page makes, pages deep in the log, one trial
local c1 = cpu_s()
m.shell_ms = get('/runs/' .. RUN)
m.run_doc_ms = get('/api/runs/' .. RUN)
m.trials_page_ms = get('/api/runs/' .. RUN .. '/trials?limit=100')
m.trials_deep_ms = get('/api/runs/' .. RUN .. '/trials?offset=' .. math.max(0, N - 100) .. '&limit=100')
m.trials_filtered_ms = get('/api/runs/' .. RUN .. '/trials?outcome=error&offset=' .. N // 20 .. '&limit=100')
m.trial_ms = get('/api/runs/' .. RUN .. '/trials/' .. math.max(1, N * 7 // 9))
m.run_list_ms = get('/api/runs')
m.requests_cpu_s = cpu_s() - c1
local warm = browser(3)
if warm then m.browser_open_ms, m.browser_error = warm.times, warm.error end
m.rss_mib, m.peak_rss_mib = rss()
m.loadavg_1min_after = loadavg()
server:kill('TERM')
server:wait(10)
if not f.keep then fs.remove_tree(dir) else m.dir = dir end

print(jsonl.encode(m))
print(string.format('view bench: %d trials, %.0f MiB log. Fresh server: first run document after %.0f ms (%s trials read), ' ..
  'page drawn in a fresh Chromium in %s ms, whole log indexed after %.0f ms (%.2f s CPU). Indexed: run document %.0f ms, ' ..
  'first page of trials %.0f ms (deep %.0f, filtered %.0f), one trial %.1f ms, page drawn in %s ms. RSS %.0f MiB (peak %.0f). ' ..
  'Load average %s / %s on %d CPUs.',
  N, size / 1048576, m.start_to_first_run_doc_ms, tostring(m.first_run_doc_trials), tostring(m.cold_browser_open_ms),
  m.start_to_indexed_ms, m.index_cpu_s, m.run_doc_ms, m.trials_page_ms, m.trials_deep_ms, m.trials_filtered_ms, m.trial_ms,
  m.browser_open_ms and table.concat(m.browser_open_ms, '/') or '?', m.rss_mib, m.peak_rss_mib,
  m.loadavg_1min_before, m.loadavg_1min_after, m.cpus))
