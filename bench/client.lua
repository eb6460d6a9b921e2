--- The measured cseng client: sandbox lifecycles (or plain GETs) against the fake provider,
--- written the way the seed arena's Lizard code is (create -> exec (check the marker) -> delete,
--- one shared HTTP client, JSON in and out), with cseng tasks instead of threads.
---
---   ./cseng lua bench/client.lua --url http://127.0.0.1:PORT --concurrency 64 --out F
---          [--mode lifecycle|raw] [--warmup 1] [--duration 3] [--create-ms 50 --exec-ms 20 --delete-ms 10]
---          [--pools N]   (cseng.http's connection pools, default the engine's)
---          [--ca FILE]   (the CA bundle to trust: an https:// fake's, bench/lib.lua's make_certs)
---          [--http-version 1.1|2]  (each request's http_version; default cseng.http's)
---          [--max-streams N]  (HTTP/2 streams a connection carries, http.configure's max_concurrent_streams)
---          [--warm]      (the connections the concurrency needs opened before the warm-up: http.warm)
---          [--loops N]   (N client processes, each running its share of the lifecycles on its own loop,
---                         their windows started together and their results merged into one)
---          [--no-split]  (no way_there/way_back/resume samples: bench/instructions.lua, whose
---                         count would include their encoding at the end)
---
--- lifecycle: `concurrency` tasks each run lifecycles back to back until the window closes; their
--- starts are spread evenly over one nominal lifecycle so the waves of responses do not all land
--- in the same millisecond. Each call is timed as a runner times a phase: from clock.now() before
--- the request to clock.answered() after its JSON decoding, which is when the answer arrived (the
--- kernel's receive stamp on the native HTTP/1.1 path), not when this loop got round to it.
--- Lifecycles that start after the warm-up are sampled; throughput counts lifecycles completed
--- inside the window.
--- raw: `concurrency` tasks GET /zero back to back; the rate counts responses inside the window.
---
--- F receives one JSON object: samples (nanoseconds: measured and the fake's X-Fake-Held-Ns per
--- call; way_there, way_back: the error's two parts, and resume: the wait for this loop after the
--- answer arrived (not in the measurement), for one sampled lifecycle in four, from the
--- X-Fake-Hold-From the fake adds when asked with X-Fake-Stamp),
--- counts, the CPU time used inside the window and the peak RSS (sys.usage()). With --loops N the
--- same object for the N processes together: samples and counts joined, the rate summed, CPU per
--- request over every request, maxrss_kb their sum (loop_maxrss_kb each one's).
--- --loops: a process the machine may run on another core; the parent waits until every child
--- has opened its connections (its --warm), then tells them all when their window starts.
local http = require('cseng.http')
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local blib = require('bench.lib')
-- a build from before clock.answered (bench/probe.lua --exe compares builds): its clock.now()
local answered = clock.answered or clock.now

local opts = blib.options('client', arg, { url = 'string', mode = 'string', concurrency = { 'int', min = 1 },
  warmup = 'number', duration = 'number', out = 'string', ['create-ms'] = 'number', ['exec-ms'] = 'number',
  ['delete-ms'] = 'number', ['no-stagger'] = 'bool', pools = { 'int', min = 1 }, ['no-split'] = 'bool', ca = 'string',
  ['http-version'] = 'string', ['max-streams'] = { 'int', min = 1 }, warm = 'bool', loops = { 'int', min = 1 },
  ['loop-index'] = { 'int', min = 1 }, ['loop-dir'] = 'string' }, { 'url', 'out' })
if not opts then return 2 end

-- --loops N: this process starts N children (the same arguments, --loop-index I), lets their
-- windows start together once all are warm, and merges what they wrote
if (opts.loops or 1) > 1 and not opts.loop_index then
  local proc = require('cseng.proc')
  local dir = assert(fs.tempdir('cseng-client-loops-'))
  local kids = {}
  local self = fs.readlink('/proc/self/exe')
  for i = 1, opts.loops do
    local argv = { self, 'lua', arg[0] }
    for _, a in ipairs(arg) do argv[#argv + 1] = a end
    for _, a in ipairs { '--loop-index', tostring(i), '--loop-dir', dir, '--out', fs.join(dir, 'out.' .. i) } do
      argv[#argv + 1] = a
    end
    kids[i] = assert(proc.spawn { argv = argv, stdout = fs.join(dir, 'log.' .. i), stderr = fs.join(dir, 'log.' .. i) })
  end
  local ready = 0
  for _ = 1, 12000 do -- every child warm (a bound on a failure: 10 min)
    ready = 0
    for i = 1, opts.loops do if fs.stat(fs.join(dir, 'ready.' .. i)) then ready = ready + 1 end end
    if ready == opts.loops then break end
    local dead = false
    for _, k in ipairs(kids) do if k:wait(0.001) then dead = true end end
    if dead then break end
    task.sleep(0.05)
  end
  if ready == opts.loops then assert(fs.write(fs.join(dir, 'go'), tostring(clock.now() + 100000000))) end
  local merged
  for i, k in ipairs(kids) do
    local st = k:wait()
    k:close()
    local d = st and st.code == 0 and fs.read(fs.join(dir, 'out.' .. i))
    if not d then
      io.stderr:write('client: loop ', i, ' failed: ', tostring(fs.read(fs.join(dir, 'log.' .. i))), '\n')
      fs.remove_tree(dir)
      return 1
    end
    d = cjson.decode(d)
    if not merged then
      merged = d
      merged.loop_maxrss_kb = { d.maxrss_kb }
    else
      for _, k2 in ipairs { 'completed', 'requests', 'total_requests', 'failures', 'rate', 'cpu_user_s', 'cpu_sys_s', 'cpu_s',
        'maxrss_kb' } do merged[k2] = (merged[k2] or 0) + (d[k2] or 0) end
      merged.first_error = merged.first_error or d.first_error
      merged.loop_maxrss_kb[#merged.loop_maxrss_kb + 1] = d.maxrss_kb
      for k2, v in pairs(d.samples) do
        local into = merged.samples[k2]
        for _, x in ipairs(v) do into[#into + 1] = x end
      end
    end
  end
  fs.remove_tree(dir)
  merged.concurrency, merged.loops = opts.concurrency or 64, opts.loops
  merged.cpu_per_request_us = merged.requests > 0 and merged.cpu_s / merged.requests * 1e6 or nil
  for k2, v in pairs(merged.samples) do merged.samples[k2] = jsonl.array(v) end
  merged.loop_maxrss_kb = jsonl.array(merged.loop_maxrss_kb)
  assert(fs.write(opts.out, jsonl.encode(merged)))
  return 0
end

local BASE = opts.url:gsub('/+$', '')
local SPLIT = not opts.no_split
local C_ALL = opts.concurrency or 64
local LOOPS, LOOP = opts.loops or 1, opts.loop_index or 1
-- this loop's share of the lifecycles (the first ones take the remainder)
local C = C_ALL // LOOPS + ((LOOP <= C_ALL % LOOPS) and 1 or 0)
local MODE = opts.mode or 'lifecycle'
local WARMUP = math.floor((opts.warmup or 1) * 1e9)
local DURATION = math.floor((opts.duration or 3) * 1e9)
local NOMINAL = {
  create = math.floor((opts.create_ms or 50) * 1e6),
  exec = math.floor((opts.exec_ms or 20) * 1e6),
  delete = math.floor((opts.delete_ms or 10) * 1e6),
}
local PERIOD = NOMINAL.create + NOMINAL.exec + NOMINAL.delete
local MARKER = 'arena-startup-ready-20261001'
local COMMAND = 'python3 -c "print(\'' .. MARKER .. '\')"'
local HEADERS = { ['X-API-Key'] = 'bench-key', ['Content-Type'] = 'application/json', ['Accept'] = 'application/json' }
-- one sampled lifecycle in STAMP_EVERY asks the fake for X-Fake-Hold-From (the split below): one
-- more header each way costs CPU, which at 1,024 in flight is the tail measured
local STAMPED = { ['X-Fake-Stamp'] = '1' }
for k, v in pairs(HEADERS) do STAMPED[k] = v end
local STAMP_EVERY = 4
local CREATE_BODY = cjson.encode {
  template = 'base', size = 'small', projectId = 'bench', region = 'us-east-1', timeoutMs = 300000,
}

http.configure { max_host_connections = 0, max_total_connections = 0, max_connections = C + 16, pools = opts.pools,
  ca_file = opts.ca, max_concurrent_streams = opts.max_streams }
local VERSION = opts.http_version

-- The samples, kept as packed strings of CHUNK integers each (string.pack), not as Lua arrays:
-- a Lua array of every sample (some 300,000 numbers by the end of a window at 1,024 in flight)
-- is live data the collector traverses again at the end of each cycle (it is written to after
-- being marked), and its pauses grew with the window, to 5-7 ms at its end; the packed strings
-- are not traversed (bench/client.lua measured the instrument's own pauses, not the engine's).
local CHUNK = 1024
local PACK = '<' .. ('j'):rep(CHUNK)
local function series() return { n = 0, cur = {}, chunks = {} } end
local function add(sr, v)
  if v == nil then return end -- as an append of nil to an array: nothing
  local i = sr.n % CHUNK + 1
  sr.cur[i] = v
  sr.n = sr.n + 1
  if i == CHUNK then sr.chunks[#sr.chunks + 1] = PACK:pack(table.unpack(sr.cur, 1, CHUNK)) end
end
local function array(sr)
  local out, k = {}, 0
  for _, chunk in ipairs(sr.chunks) do
    local vals = { PACK:unpack(chunk) }
    for i = 1, CHUNK do out[k + i] = vals[i] end
    k = k + CHUNK
  end
  for i = 1, sr.n % CHUNK do out[k + i] = sr.cur[i] end
  return out
end

local samples = { create = series(), create_held = series(), exec = series(), exec_held = series(),
  delete = series(), delete_held = series() }
-- the split's three parts per call, one series, taken apart after the window
local parts = series()
local failures, first_error = 0, nil
local completed, requests, total = 0, 0, 0
local t_start, t_warm, t_end, usage_warm

local function fail(msg)
  failures = failures + 1
  first_error = first_error or msg
end

-- Where one call's error went, from the fake's X-Fake-Hold-From (clock.now() ns on the same
-- machine; the answer left at Hold-From + Held-Ns): the way there (from the call to the fake
-- having the whole request: the engine, the write, the kernel, the fake's wake-up and parse; with
-- the Lua fake's --hold-from handler also its dispatcher) and the way back (from the answer to the
-- end of the measurement, clock.answered(): the kernel's delivery to the socket; on a path without
-- the kernel's stamp also this loop's wake-up, the read and parse). And, outside the measurement,
-- the resume: from the answer's arrival to the task's clock.now() after the JSON decoding (the
-- answer's wait in the socket for this loop, the ready queue and the decoding).
local function split(res, held, t0, t1, t_run)
  local recv = math.tointeger(tonumber(res.headers['x-fake-hold-from']))
  if not (recv and held) then return end
  add(parts, recv - t0)
  add(parts, t1 - (recv + held))
  add(parts, t_run - t1)
end

-- One API call as the seed makes it: the status checked, the JSON decoded. stamped: the request
-- asks for X-Fake-Hold-From (a sampled lifecycle's call) and its error is split.
local function call(method, path, body, ok_status, stamped)
  local t0 = clock.now()
  local res, err, code = http.request { method = method, url = BASE .. path, headers = stamped or HEADERS, body = body,
    timeout = 90, http_version = VERSION }
  local data
  if res and res.status == ok_status and res.body ~= '' then data = cjson.decode(res.body) end
  local t1, t_run = answered(t0), clock.now()
  total = total + 1
  if t_run >= t_warm and t_run <= t_end then requests = requests + 1 end
  if not res then return nil, tostring(err) .. ' (' .. tostring(code) .. ')' end
  if res.status ~= ok_status then return nil, method .. ' ' .. path .. ': HTTP ' .. res.status end
  local held = math.tointeger(tonumber(res.headers['x-fake-held-ns']))
  if stamped then split(res, held, t0, t1, t_run) end
  return data or true, t1 - t0, held
end

local nsampled = 0
local function lifecycle(sampled)
  local stamped
  if sampled and SPLIT then
    nsampled = nsampled + 1
    stamped = nsampled % STAMP_EVERY == 0 and STAMPED or nil
  end
  local sb, d, held = call('POST', '/api/sandboxes', CREATE_BODY, 201, stamped)
  if not sb then return fail(d) end
  if sampled then
    add(samples.create, d)
    add(samples.create_held, held)
  end
  local id = sb.sandboxId
  local r
  r, d, held = call('POST', '/api/sandboxes/' .. id .. '/exec',
    cjson.encode { cmd = COMMAND, timeoutMs = 30000 }, 200, stamped)
  local ok = r and r.exitCode == 0 and (r.stdout or ''):match('^%s*(.-)%s*$') == MARKER
  if not r then fail(d)
  elseif not ok then fail('invalid readiness response: exit=' .. tostring(r.exitCode))
  elseif sampled then
    add(samples.exec, d)
    add(samples.exec_held, held)
  end
  r, d, held = call('DELETE', '/api/sandboxes/' .. id, nil, 204, stamped)
  if not r then return fail(d) end
  if sampled then
    add(samples.delete, d)
    add(samples.delete_held, held)
  end
  return ok
end

local function lifecycle_worker(i)
  -- starts spread evenly over one lifecycle, across every loop's workers
  if not opts.no_stagger then task.sleep(((i - 1) * LOOPS + LOOP - 1) * PERIOD / C_ALL / 1e9) end
  while clock.now() < t_end do
    local sampled = clock.now() >= t_warm
    local ok = lifecycle(sampled)
    local now = clock.now()
    if ok and now >= t_warm and now <= t_end then completed = completed + 1 end
  end
end

local function raw_worker()
  local url = BASE .. '/zero'
  while clock.now() < t_end do
    local res, err, code = http.request { url = url, timeout = 90, http_version = VERSION }
    local now = clock.now()
    total = total + 1
    if not res or res.status ~= 200 then fail(tostring(err or res.status) .. ' ' .. tostring(code))
    elseif now >= t_warm and now <= t_end then requests = requests + 1 end
  end
end

local warmed
if opts.warm then -- the connections C calls start on, open and ready before anything is timed
  local w, werr, wcode = http.warm { url = BASE, calls = C, http_version = VERSION, timeout = 600 }
  if w then
    warmed = { opened = w.opened, ready = w.ready, http_version = w.http_version, seconds = w.seconds }
  elseif wcode == 'EURL' then -- not the native path's (CSENG_HTTP=curl): nothing to warm, the requests open theirs
    warmed = { error = werr }
  else
    io.stderr:write('client: warm: ', tostring(werr), ' (', tostring(wcode), ')\n')
    return 1
  end
end
if opts.loop_dir then -- warm: the parent starts every loop's window at once
  assert(fs.write(fs.join(opts.loop_dir, 'ready.' .. LOOP), '1'))
  local go
  for _ = 1, 12000 do
    go = tonumber(fs.read(fs.join(opts.loop_dir, 'go')) or '')
    if go then break end
    task.sleep(0.01)
  end
  if not go then return 1 end
  if go > clock.now() then task.sleep((go - clock.now()) / 1e9) end
end

t_start = clock.now()
t_warm = t_start + WARMUP
t_end = t_warm + DURATION
-- the fake's own CPU inside the window (its /stats: getrusage), beside ours: its handshakes with
-- the warmed connections are not in it
local fake0, fake1
local function fake_stats()
  local r = http.request { url = BASE .. '/stats', timeout = 30, http_version = VERSION }
  local ok, d = pcall(cjson.decode, r and r.status == 200 and r.body or '')
  return ok and type(d) == 'table' and d.user_s and d or nil
end
-- CPU and RSS inside the window: sampled when the warm-up ends
local sampler = task.spawn(function()
  task.sleep(WARMUP / 1e9)
  usage_warm = sys.usage()
  if LOOP == 1 then fake0 = fake_stats() end
end)
local workers = {}
for i = 1, C do workers[i] = task.spawn(MODE == 'raw' and raw_worker or lifecycle_worker, i) end
local usage_end
local closer = task.spawn(function()
  task.sleep((t_end - clock.now()) / 1e9)
  usage_end = sys.usage()
  if fake0 then fake1 = fake_stats() end
end)
for _, w in ipairs(workers) do
  local ok, e = task.join(w)
  if not ok then fail(tostring(e)) end
end
task.join(sampler)
task.join(closer)
local usage_final = sys.usage()

local window_s = DURATION / 1e9
local cpu_s = (usage_end.user_s + usage_end.sys_s) - (usage_warm.user_s + usage_warm.sys_s)
local out = {
  client = 'cseng', mode = MODE, concurrency = C, warmup_s = WARMUP / 1e9, window_s = window_s,
  nominal_ns = NOMINAL, stagger = not opts.no_stagger,
  completed = completed, requests = requests, total_requests = total, failures = failures, first_error = first_error,
  rate = (MODE == 'raw' and requests or completed) / window_s,
  cpu_user_s = usage_end.user_s - usage_warm.user_s, cpu_sys_s = usage_end.sys_s - usage_warm.sys_s,
  cpu_s = cpu_s, cpu_per_request_us = requests > 0 and cpu_s / requests * 1e6 or nil,
  maxrss_kb = usage_final.maxrss_kb,
  warm = warmed,
  native = http.stats().native,
  fake_window = fake0 and fake1 and { cpu_s = (fake1.user_s + fake1.sys_s) - (fake0.user_s + fake0.sys_s),
    requests = fake1.requests - fake0.requests - 1, wall_s = (fake1.now_ns - fake0.now_ns) / 1e9 } or nil,
  samples = {},
}
for k, v in pairs(samples) do out.samples[k] = jsonl.array(array(v)) end
if SPLIT then
  local there, back, resume, flat = {}, {}, {}, array(parts)
  for i = 1, #flat, 3 do
    local j = (i + 2) // 3
    there[j], back[j], resume[j] = flat[i], flat[i + 1], flat[i + 2]
  end
  out.samples.way_there, out.samples.way_back, out.samples.resume = jsonl.array(there), jsonl.array(back), jsonl.array(resume)
end
assert(fs.write(opts.out, jsonl.encode(out)))
return 0
