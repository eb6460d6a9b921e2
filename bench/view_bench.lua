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
local clock = require 'cseng.clock'
local flags = require 'cseng.lib.flags'
local fs = require 'cseng.fs'
local http = require 'cseng.http'
local jsonl = require 'cseng.lib.jsonl'
local proc = require 'cseng.proc'
local sys = require 'cseng.sys'
local task = require 'cseng.task'

local root = sys.root()
package.path = root .. '/spec/browser/?.lua;' .. package.path
local fixtures = require 'fixtures'

local f = assert(flags.parse({ ... }, {
  trials = { key = 'trials', type = 'int', min = 1 },
  keep = { key = 'keep', type = 'bool' },
}))
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
-- from the server's start to the run document answered: the process starts, listens, reads and
-- indexes the whole log (the first request waits for that)
local t_spawn = clock.now()
local server = assert(proc.spawn { argv = { root .. '/cseng', 'view', dir, '--port', port }, stdout = fs.join(dir, 'view.out'),
  stderr = fs.join(dir, 'view.err') })
local first_ms
for _ = 1, 600 do
  local r = http.request { url = base .. '/api/runs/' .. RUN, timeout = 300 }
  if r and r.status == 200 then first_ms = (clock.now() - t_spawn) / 1e6; break end
  task.sleep(0.02)
end
assert(first_ms, 'the viewer did not answer')

local function get(p)
  local s = clock.now()
  local r = assert(http.request { url = base .. p, timeout = 120 })
  assert(r.status == 200, p .. ': HTTP ' .. r.status .. ' ' .. r.body:sub(1, 200))
  return (clock.now() - s) / 1e6, r
end

local function rss()
  local st = fs.read('/proc/' .. server:pid() .. '/status') or ''
  return tonumber(st:match('VmRSS:%s*(%d+)')) / 1024, tonumber(st:match('VmHWM:%s*(%d+)')) / 1024
end

-- the server's CPU seconds (utime + stime, clock ticks of 1/100 s): on a shared, loaded machine
-- the wall times above include waiting for a core; this does not
local function cpu_s()
  local st = fs.read('/proc/' .. server:pid() .. '/stat') or ''
  local rest = st:match('%) (.*)$') or ''
  local fields = {}
  for x in rest:gmatch('%S+') do fields[#fields + 1] = x end
  return ((tonumber(fields[12]) or 0) + (tonumber(fields[13]) or 0)) / 100
end
local function loadavg() return (fs.read('/proc/loadavg') or ''):match('^(%S+)') end

local m = { trials = N, log_bytes = size, write_s = write_s, loadavg_1min = loadavg(), cpus = sys.cpu_count() }
m.start_to_run_doc_ms = first_ms
-- the server lists the log at startup (a stat); the first /api/ request reads it: timed here
m.index_cpu_s = cpu_s() -- startup and the index: all the server did so far
m.rss_indexed_mib = rss()
local c1 = cpu_s()
m.shell_ms = get('/runs/' .. RUN)
m.run_doc_ms = get('/api/runs/' .. RUN)
m.trials_page_ms = get('/api/runs/' .. RUN .. '/trials?limit=100')
m.trials_deep_ms = get('/api/runs/' .. RUN .. '/trials?offset=99900&limit=100')
m.trials_filtered_ms = get('/api/runs/' .. RUN .. '/trials?outcome=error&offset=5000&limit=100')
m.trial_ms = get('/api/runs/' .. RUN .. '/trials/77777')
m.run_list_ms = get('/api/runs')
m.requests_cpu_s = cpu_s() - c1
m.rss_mib, m.peak_rss_mib = rss()

-- the page in headless Chromium, from navigation to drawn (its first page of trials shown)
local probe = fs.join(dir, 'probe.mjs')
assert(fs.write(probe, [[
import { chromium } from ']] .. root .. [[/spec/browser/node_modules/playwright-core/index.mjs';
import fs from 'node:fs'; import os from 'node:os'; import path from 'node:path';
const prof = fs.mkdtempSync(path.join(os.tmpdir(), 'cseng-view-bench-'));
const ctx = await chromium.launchPersistentContext(prof, { executablePath: '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'] });
const page = ctx.pages()[0] || await ctx.newPage();
const times = [];
for (let k = 0; k < 3; k++) {
  const t = Date.now();
  await page.goto(process.argv[2]);
  await page.waitForSelector('body[data-ready="1"] #trials tbody tr', { timeout: 60000 });
  times.push(Date.now() - t);
}
const rows = await page.$$eval('#trials tbody tr', (r) => r.length);
await ctx.close(); fs.rmSync(prof, { recursive: true, force: true });
console.log(JSON.stringify({ times, rows }));
]]))
if fs.exists('/usr/bin/chromium') and fs.exists(root .. '/spec/browser/node_modules/playwright-core') then
  local r = proc.run { argv = { 'node', probe, base .. '/runs/' .. RUN }, timeout = 300 }
  local doc = r and jsonl.decode(r.stdout:match('[^\n]*\n?$') or '')
  if doc then m.browser_open_ms, m.browser_rows = doc.times, doc.rows
  else m.browser_error = r and (r.stderr:sub(-400)) or 'node did not run' end
end
m.rss_after_browser_mib, m.peak_rss_after_browser_mib = rss()
server:kill('TERM')
server:wait(10)
if not f.keep then fs.remove_tree(dir) else m.dir = dir end

print(jsonl.encode(m))
print(string.format('view bench: %d trials, %.0f MiB log; start to run document %.0f ms (%.2f s CPU); run page data %.0f + %.0f ms; ' ..
  'trials page %.0f ms (deep %.0f, filtered %.0f); one trial %.1f ms; Chromium open %s ms; RSS %.0f MiB (peak %.0f)',
  N, size / 1048576, m.start_to_run_doc_ms, m.index_cpu_s, m.run_doc_ms, m.trials_page_ms, m.trials_page_ms, m.trials_deep_ms, m.trials_filtered_ms,
  m.trial_ms, m.browser_open_ms and table.concat(m.browser_open_ms, '/') or '?', m.rss_after_browser_mib,
  m.peak_rss_after_browser_mib) .. string.format('; load average %s on %d CPUs', m.loadavg_1min, m.cpus))
