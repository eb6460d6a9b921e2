--- The arena's primitive workloads measured against a fake of known latency and bandwidth: each
--- figure against what the injection alone makes it, with the error, for docs/PERFORMANCE.md's
--- "Primitives against a known link" (bench/run.lua runs this in its own process and keeps the section).
---
---   ./cseng lua bench/primitives.lua [--samples 5] [--latency-ms 50] [--mibps 32] [--sizes 1MiB,16MiB]
---                                    [--files 20] [--snapshot-size 1MiB] [--forks 4] [--egress-size 1MiB]
---                                    [--only exec,...] [--out SECTION.md] [--json RAW.json]
---
--- The fake: bench/link_fake.lua in its own process, the Daytona fake (whose sandboxes really run
--- their commands) behind a link that answers every request at arrival + L + bytes / B; for pause,
--- the E2B fake (API and envd) behind a link of its own. The arena runs here, as `cseng run
--- plans/startup.lua --workload W` runs it (lua/cseng/run/frame.lua), over exec, upload, download,
--- files, snapshot, fork (Daytona), pause (E2B) and egress (the local provider's sandbox, sharing the
--- host's network, fetching a file from the link acting as the mirror). What a figure should be
--- follows from the calls its path makes (the sample's `paths`: put is an upload then a `tar -x`
--- command) and the bytes each carried (the link's log): L per call plus the call's bytes at B; a
--- figure made of polled calls (snapshot, restore's create, fork), the span the link saw from the
--- first call's arrival to the last call's answer; egress, the link's hold plus the sandbox's own
--- path (the same fetch from the link's echo, answered at once). The error of a figure is its median
--- over the clean samples minus that; the bound it is held to is the engine's documented error
--- (docs/ARENA.md, "Primitives", Known error): KNOWN below. No sample may be below its injected time
--- (the link never answers early, so one that is would be a clock that reads short).
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local task = require('cseng.task')
local sys = require('cseng.sys')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local stats = require('cseng.lib.stats')
local http = require('cseng.http')
local frame = require('cseng.run.frame')
local workloads = require('cseng.run.workloads')
local report_format = require('reports.lib.format')
local blib = require('bench.lib')

local opts = blib.options('primitives', arg, { samples = { 'int', min = 2 }, ['latency-ms'] = 'number', mibps = 'number',
  sizes = 'string', files = { 'int', min = 1 }, out = 'string', json = 'string', warmups = { 'int', min = 0 },
  forks = { 'int', min = 1 }, ['snapshot-size'] = 'string', only = 'string', ['egress-size'] = 'string' })
if not opts then return 2 end
local ROOT = sys.root()
local EXE = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local SAMPLES, WARMUPS = opts.samples or 5, opts.warmups or 1
local L_MS, MIBPS = opts.latency_ms or 50, opts.mibps or 32
local FILES, FILE_BYTES = opts.files or 20, 4096
local SIZES = {}
for s in (opts.sizes or '1MiB,16MiB'):gmatch('[^,]+') do SIZES[#SIZES + 1] = assert(workloads.parse_size(s), s) end
-- snapshot: one size (the file stays in the fake's sandbox, the link carries none of it); fork: N children
local SNAP_SIZE = assert(workloads.parse_size(opts.snapshot_size or '1MiB'), 'primitives: --snapshot-size')
local FORKS = opts.forks or 4
-- egress: the local provider's sandbox (sharing the host's network) fetching a file of this size
-- from the link acting as the mirror
local EGRESS_BYTES = assert(workloads.parse_size(opts.egress_size or '1MiB'), 'primitives: --egress-size')

--- The engine's documented error on loopback (docs/ARENA.md, "Primitives", Known error): a
--- figure's median is within per_call_ms per call the figure makes, plus per_mib_ms per MiB it
--- moves (the client and the link copying the bytes on this machine), plus rel of the time (a median
--- of a few samples against the median of the link's calls) of what the link held, and no sample
--- is below the injection by more than below_ms.
local KNOWN = { per_call_ms = 5, per_mib_ms = 50, rel = 0.10, below_ms = 0.5 }

local TMP = assert(fs.tempdir('cseng-bench-prim-'))
local INFO, LOG = fs.join(TMP, 'link.json'), fs.join(TMP, 'link.jsonl')

local function say(...) io.stderr:write('primitives: ', string.format(...), '\n') end

-- ---- the fake behind its link, in its own process -----------------------------------------------
-- one link per vendor (Daytona for most workloads, E2B for pause), started when first needed
local links, info = {}, nil
local function link_for(vendor)
  if links[vendor] then info = links[vendor].info return end
  fs.remove(INFO)
  local p = assert(proc.spawn { argv = { EXE, 'lua', fs.join(ROOT, 'bench/link_fake.lua'), '--vendor', vendor,
    '--latency-ms', tostring(L_MS), '--mibps', tostring(MIBPS), '--info', INFO, '--log', LOG, '--max-seconds', '3600' },
    cwd = ROOT, stdout = fs.join(TMP, 'link-' .. vendor .. '.out'), stderr = fs.join(TMP, 'link-' .. vendor .. '.out') })
  local got
  for _ = 1, 400 do
    local t = fs.read(INFO)
    if t and t:find('\n') then got = cjson.decode(t) break end
    task.sleep(0.05)
  end
  if not got then
    p:close()
    error('the ' .. vendor .. ' link fake did not start: ' .. tostring(fs.read(fs.join(TMP, 'link-' .. vendor .. '.out'))), 0)
  end
  links[vendor] = { proc = p, info = got }
  info = got
end
local function close_links() for _, l in pairs(links) do l.proc:close() end end

local function read_log()
  local out = {}
  for line in (fs.read(LOG) or ''):gmatch('[^\n]+') do out[#out + 1] = cjson.decode(line) end
  return out
end

-- ---- what the injection makes a figure -----------------------------------------------------------
-- Per class of call (the link's log): the injection's time (hold_ms: L + bytes / B) and the time the
-- link really took (held_ms: the same, or more where the fake's own work outlasted it), as the
-- median (a figure of one call) or the mean (a figure that sums many calls) over the class.
-- The loopback's own cost of a call of bytes_in / bytes_out on this machine now: the median of 5
-- calls to the link's echo (answered at once), timed here as the engine times a call. It is part
-- of every figure (the bodies cross loopback outside the link's window) and none of the injection.
local calib_cache = {}
local function loopback_ms(bytes_in, bytes_out)
  local key = math.floor(bytes_in) .. '/' .. math.floor(bytes_out)
  if calib_cache[key] then return calib_cache[key] end
  local body = string.rep('y', math.floor(bytes_in))
  local xs = {}
  for _ = 1, 5 do
    local t0 = clock.now()
    local res = http.request { method = 'POST', url = info.config.api_url .. '/__link/echo?n=' .. math.floor(bytes_out),
      body = body, timeout = 120, max_body = 1 << 30 }
    local t1 = clock.answered(t0) -- as the workloads' ctx:time stops its clock
    if res and res.status == 200 then xs[#xs + 1] = (t1 - t0) / 1e6 end
  end
  calib_cache[key] = #xs > 0 and stats.median(xs) or 0
  return calib_cache[key]
end

-- The calls of one class in a sample's part of the link's log, as one expected value: how =
-- 'one' (the first such call), 'median', 'min', 'max' (of the calls), or 'sum' (all of them).
-- What one logged call should have taken: the link's hold, plus its bodies' loopback.
local function each(r)
  return { inj = r.hold_ms, held = r.held_ms, loopback = loopback_ms(r.bytes_in, r.bytes_out), calls = 1,
    mib = (r.bytes_in + r.bytes_out) / 1048576, bytes = r.bytes_in + r.bytes_out }
end
local function class(seg, fn, how)
  local calls = {}
  for _, r in ipairs(seg) do if fn(r) then calls[#calls + 1] = r end end
  if #calls == 0 then return nil end
  if how == 'sum' then
    local e = { inj = 0, held = 0, loopback = 0, calls = 0, mib = 0, bytes = 0 }
    for _, r in ipairs(calls) do
      local c = each(r)
      for k in pairs(e) do e[k] = e[k] + c[k] end
    end
    return e
  end
  if how == 'one' or #calls == 1 then return each(calls[1]) end
  table.sort(calls, function(a, b) return a.held_ms < b.held_ms end)
  if how == 'min' then return each(calls[1]) end
  if how == 'max' then return each(calls[#calls]) end
  -- the median call (the lower middle one of an even count: a call's own time, not a mean of two)
  return each(calls[(#calls + 1) // 2])
end
local function plus(a, b)
  if not (a and b) then return nil end
  local e = {}
  for k in pairs(a) do e[k] = a[k] + (b[k] or 0) end
  for k in pairs(b) do if e[k] == nil then e[k] = b[k] end end
  return e
end

-- A figure made of several calls with the client's own sleeps between them (a create or a snapshot
-- polled until ready, a fork's children polled together): no sum of the calls' injections says what
-- it should be, the client's back-off is between them. What the link saw is the span from the first
-- call's arrival to the last call's answer: the calls' injections and the client's sleeps and work
-- between them are all inside it, and the client's clock, started before the first call was sent and
-- stopped after the last answer arrived, can only add the two ends (a body sent, a body read: the
-- loopback of the first request and the last answer). So the expected time is that span + that
-- loopback, the injection floor is the span itself, and the window counts as one call for the bound.
local function span(calls)
  if not calls or #calls == 0 then return nil end
  local first, last, bytes = calls[1], calls[1], 0
  for _, r in ipairs(calls) do
    if r.at_ms < first.at_ms then first = r end
    if r.done_ms > last.done_ms then last = r end
    bytes = bytes + r.bytes_in + r.bytes_out
  end
  local s = last.done_ms - first.at_ms
  return { inj = s, held = s, loopback = loopback_ms(first.bytes_in, last.bytes_out), calls = 1, mib = bytes / 1048576,
    bytes = bytes, polled = #calls }
end
-- the index of the first call at or after i that fn accepts
local function find(seg, i, fn)
  for k = i or 1, #seg do if fn(seg[k]) then return k end end
  return nil
end
-- seg[i] and the calls right after it that fn accepts (a call and its polls)
local function run_of(seg, i, fn)
  if not i then return nil end
  local out = { seg[i] }
  for k = i + 1, #seg do
    if not fn(seg[k]) then break end
    out[#out + 1] = seg[k]
  end
  return out
end
local function api(method, pattern)
  return function(r) return r.side == 'api' and (not method or r.method == method) and r.path:match(pattern) ~= nil end
end
local function command(prefix) return function(r) return r.command and r.command:sub(1, #prefix) == prefix end end
local function is_upload(r) return r.side == 'toolbox' and r.path:match('/files/bulk%-upload$') end
local function is_download(r) return r.side == 'toolbox' and r.path:match('/files/bulk%-download$') end
local is_tar = command('mkdir -p ')
-- a transfer of b bytes in k files: its body is at least b and at most b + the tar framing (a 512 B
-- header per file, the end blocks and the record padding: 20 KiB) + the multipart framing (2%)
local function near(b, k) return function(n) return n >= b and n <= b + 512 * (k or 1) + 20480 + b * 0.02 end end

-- Per workload: a sample's part of the log -> {figure = expected}. put is an upload and the tar -x
-- command after it (the first tar -x in the sample after that upload).
local function after(seg, fn)
  for i, r in ipairs(seg) do if fn(r) then
    local rest = {}
    for k = i, #seg do rest[#rest + 1] = seg[k] end
    return rest
  end end
  return {}
end
local function put_of(seg, payload, path, k)
  local is_it = function(r) return is_upload(r) and near(payload, k)(r.bytes_in) end
  local up = class(seg, is_it, 'one')
  if not up or not path:match('^put') then return up end
  return plus(up, class(after(seg, is_it), is_tar, 'one'))
end
local EXPECT = {}
function EXPECT.exec(seg)
  local echo = command('echo cseng-exec-')
  return { exec_rtt_ms = class(seg, echo, 'median'), exec_rtt_min_ms = class(seg, echo, 'min'),
    exec_rtt_max_ms = class(seg, echo, 'max') }
end
local function mibps(b) return function(ms) return b / 1048576 / (ms / 1000) end end
function EXPECT.upload(seg, paths)
  local out = {}
  for _, b in ipairs(SIZES) do
    local n = workloads.size_name(b)
    out['upload_' .. n .. '_ms'] = put_of(seg, b, paths.upload or 'put')
    out['upload_' .. n .. '_mibps'] = { from = 'upload_' .. n .. '_ms', f = mibps(b) }
  end
  return out
end
function EXPECT.download(seg)
  local out = {}
  for _, b in ipairs(SIZES) do
    local n = workloads.size_name(b)
    out['download_' .. n .. '_ms'] = class(seg, function(r) return is_download(r) and near(b)(r.bytes_out) end, 'one')
    out['download_' .. n .. '_mibps'] = { from = 'download_' .. n .. '_ms', f = mibps(b) }
  end
  return out
end
-- snapshot: the POST /sandbox/{id}/snapshot and its GET /snapshots/{name} polls until active; the
-- restore's create (POST /sandbox and its GET /sandbox/{id} polls until started: every API call before
-- the restored sandbox's first command) and that first command (`cat` of the state file); the delete
-- (GET /snapshots/{name} for its id, DELETE /snapshots/{id})
function EXPECT.snapshot(seg)
  local n = workloads.size_name(SNAP_SIZE)
  local s = find(seg, 1, api('POST', '^/sandbox/[^/]+/snapshot$'))
  local snap = run_of(seg, s, api('GET', '^/snapshots/'))
  local c = s and find(seg, s, api('POST', '^/sandbox$'))
  local create = run_of(seg, c, function(r) return r.side == 'api' end)
  local cat = c and find(seg, c, command('cat /var/tmp/cseng-snapshot/state'))
  local d = cat and find(seg, cat, api('DELETE', '^/snapshots/'))
  local del = d and ((seg[d - 1] and api('GET', '^/snapshots/')(seg[d - 1])) and { seg[d - 1], seg[d] } or { seg[d] })
  local create_e = span(create)
  return { ['snapshot_' .. n .. '_ms'] = span(snap), ['restore_create_' .. n .. '_ms'] = create_e,
    ['restore_' .. n .. '_ms'] = cat and plus(create_e, each(seg[cat])),
    ['snapshot_delete_' .. n .. '_ms'] = span(del) }
end
-- fork: every POST /sandbox/{id}/fork (one per child) and the children's GET /sandbox/{id} polls until
-- started (every API call before the children's first commands); fork_ready adds the span of the
-- children's first commands (`cat` of the state file, in parallel)
function EXPECT.fork(seg)
  local f = find(seg, 1, api('POST', '^/sandbox/[^/]+/fork$'))
  local calls = run_of(seg, f, function(r) return r.side == 'api' end)
  local cats = {}
  for k = f or #seg + 1, #seg do
    if #cats < FORKS and command('cat /var/tmp/cseng-fork/state')(seg[k]) then cats[#cats + 1] = seg[k] end
  end
  local fork_e = span(calls)
  return { fork_ms = fork_e, fork_ready_ms = #cats == FORKS and plus(fork_e, span(cats)) or nil }
end
function EXPECT.files(seg, paths)
  local bulk = put_of(seg, FILES * FILE_BYTES, paths.files_bulk or 'put', FILES)
  -- the per-file path: every one-file upload, and for put every tar -x but the bulk one
  local small = function(r) return is_upload(r) and near(FILE_BYTES)(r.bytes_in) end
  local per = class(seg, small, 'sum')
  if per and (paths.files_per_file or 'put'):match('^put') then per = plus(per, class(after(seg, small), is_tar, 'sum')) end
  return { files_bulk_ms = bulk, files_per_file_ms = per,
    files_bulk_per_s = { from = 'files_bulk_ms', f = function(ms) return FILES / (ms / 1000) end },
    files_per_file_per_s = { from = 'files_per_file_ms', f = function(ms) return FILES / (ms / 1000) end },
    files_per_file_over_bulk = { from = 'files_per_file_ms', ratio = { 'files_per_file_ms', 'files_bulk_ms' } } }
end

-- pause (E2B): POST /sandboxes/{id}/pause, POST /sandboxes/{id}/connect (the resume), and the first
-- command after it (envd's Process.Start of `cat` of the state file)
function EXPECT.pause(seg)
  local pause = class(seg, api('POST', '^/sandboxes/[^/]+/pause$'), 'one')
  local c = find(seg, 1, api('POST', '^/sandboxes/[^/]+/connect$'))
  local resume = c and each(seg[c])
  local cat = c and find(seg, c, command('cat /var/tmp/cseng-pause/state'))
  local exec = cat and each(seg[cat])
  return { pause_ms = pause, resume_ms = resume, resume_exec_ms = exec, resume_ready_ms = plus(resume, exec) }
end

-- egress: the sandbox's fetch of the file (the link as the mirror: one call, L + its bytes at B)
-- against the same figure of the calibration run (EGRESS_CALIB: the same fetch from the link's echo,
-- answered at once), which stands for the sandbox's own path: its tool started and timing itself,
-- loopback's TCP, the bytes read and written. The connection is not held (the link holds requests),
-- so egress_connect_ms is expected at the calibration's alone.
local EGRESS_CALIB = nil
function EXPECT.egress(seg)
  local r = seg[1]
  if not (r and r.side == 'mirror' and EGRESS_CALIB) then return {} end
  local function e(name, held)
    local c = EGRESS_CALIB[name]
    if not c then return nil end
    return { inj = held and r.hold_ms or 0, held = held and r.held_ms or 0, loopback = c, calls = 1,
      mib = held and (r.bytes_in + r.bytes_out) / 1048576 or 0, bytes = r.bytes_in + r.bytes_out }
  end
  return { egress_connect_ms = e('egress_connect_ms', false), egress_first_byte_ms = e('egress_first_byte_ms', true),
    egress_total_ms = e('egress_total_ms', true), egress_exec_ms = e('egress_exec_ms', true) }
end
-- the mirror's log cut into samples: the sandbox's fetch, then the host's check fetch of the same
-- URL (user-agent cseng-egress; python3's fetch inside says the same, so at most two per sample)
local function egress_segments(log)
  local segs = {}
  for _, r in ipairs(log) do
    if r.side == 'mirror' then
      local cur = segs[#segs]
      if not cur or #cur >= 2 or r.ua ~= 'cseng-egress' then segs[#segs + 1] = { r } else cur[#cur + 1] = r end
    end
  end
  return segs
end

-- The link's log cut into samples: each sample's first call is its create (POST /sandbox) and its
-- first command the readiness command; the arena ran them one after another (one provider,
-- lockstep), warmups first. A create whose sandbox never runs the readiness command (snapshot's
-- restore) belongs to the sample before it.
local is_ready = command('echo bench-prim-ready')
-- a create: Daytona's POST /sandbox, E2B's POST /v2/sandboxes (or the older /sandboxes)
local function is_create(r)
  return r.side == 'api' and r.method == 'POST' and (r.path == '/sandbox' or r.path == '/sandboxes' or r.path == '/v2/sandboxes')
end
local function segments(log)
  local segs = {}
  for _, r in ipairs(log) do
    if is_create(r) then segs[#segs + 1] = {} end
    if #segs > 0 then table.insert(segs[#segs], r) end
  end
  local out = {}
  for _, seg in ipairs(segs) do
    if find(seg, 1, is_ready) or #out == 0 then out[#out + 1] = seg
    else for _, r in ipairs(seg) do table.insert(out[#out], r) end end
  end
  return out
end

-- ---- the runs ----------------------------------------------------------------------------------
local RUNS = {
  { workload = 'exec', options = { exec_count = 10 } },
  { workload = 'upload', sizes = SIZES },
  { workload = 'download', sizes = SIZES },
  { workload = 'files', options = { files = FILES, file_bytes = FILE_BYTES } },
  { workload = 'snapshot', sizes = { SNAP_SIZE } },
  { workload = 'fork', options = { fork_count = FORKS } },
  { workload = 'pause', vendor = 'e2b' },
  { workload = 'egress', provider = 'local', provider_config = { host_network = true, sandbox = { network = true } } },
}
if opts.only then
  local keep, want = {}, {}
  for w in opts.only:gmatch('[^,]+') do want[w] = true end
  for _, R in ipairs(RUNS) do if want[R.workload] then keep[#keep + 1] = R; want[R.workload] = nil end end
  local unknown = next(want)
  if unknown then io.stderr:write('primitives: --only: no workload ' .. unknown .. '\n'); return 2 end
  RUNS = keep
end
local results = { latency_ms = L_MS, mibps = MIBPS, samples = SAMPLES, warmups = WARMUPS, known = KNOWN, files = FILES,
  sizes = SIZES, runs = {}, host = sys.hostname and sys.hostname() or nil,
  loadavg_before = (fs.read('/proc/loadavg') or ''):match('^(%S+)') }
local t_begin = clock.now()
-- one workload's run against its link, its figures paired with the link's log
local function run_one(R)
  local vendor = R.vendor or 'daytona'
  link_for(vendor)
  fs.write(LOG, '')
  say('%s: %d samples + %d warmup(s) %s (%g ms, %g MiB/s)', R.workload, SAMPLES, WARMUPS,
    R.provider and (R.provider .. '\'s sandbox fetching from the link') or ('on the ' .. vendor .. ' fake behind the link'),
    L_MS, MIBPS)
  local sink = { write = function() end }
  local t0 = clock.now()
  local function arena(egress_url)
    local provider = R.provider or vendor
    local status, run_info = frame.run('startup', { providers = { provider },
      provider_config = { [provider] = R.provider_config or info.config },
      workload = R.workload, workload_options = R.options, sizes = R.sizes, samples = SAMPLES, warmups = WARMUPS, seed = 45,
      egress_url = egress_url, output = fs.join(TMP, 'results'), quiet = true, command = 'echo bench-prim-ready',
      expect = 'bench-prim-ready', cleanup_backoff = { 0.05, 0.1 }, stderr = sink })
    local trials, started = {}, nil
    for line in (fs.read(run_info.jsonl) or ''):gmatch('[^\n]+') do
      local e = cjson.decode(line)
      if e.event == 'run_started' then started = e end
      if e.event == 'startup_trial' and not e.warmup then trials[#trials + 1] = e end
    end
    return status, trials, started
  end
  if R.workload == 'egress' then
    -- the sandbox's own path (its tool started, loopback's TCP, the bytes read and written): the
    -- same workload fetching the same bytes from the link's echo, answered at once, unlogged
    local _, ctrials = arena(info.config.api_url .. '/__link/echo?n=' .. EGRESS_BYTES)
    local per = {}
    for _, t in ipairs(ctrials) do
      if t.ok and t.clean ~= false then
        for k, v in pairs(t.figures or {}) do per[k] = per[k] or {}; table.insert(per[k], v) end
      end
    end
    EGRESS_CALIB = {}
    for k, xs in pairs(per) do EGRESS_CALIB[k] = stats.median(xs) end
    if not next(EGRESS_CALIB) then error('egress: the calibration run made no clean sample', 0) end
    fs.write(LOG, '')
  end
  local status, trials, started = arena(R.workload == 'egress' and (info.config.api_url .. '/__link/file?n=' .. EGRESS_BYTES) or nil)
  local wall_s = (clock.now() - t0) / 1e9
  local log = read_log()
  local segs = R.workload == 'egress' and egress_segments(log) or segments(log)
  local paths = {}
  for _, t in ipairs(trials) do for k, v in pairs(t.paths or {}) do paths[k] = v end end
  local late, late_max = 0, 0
  for _, r in ipairs(log) do
    if r.late_ms > 0 then late = late + 1; late_max = math.max(late_max, r.late_ms) end
  end
  -- each clean sample against its own calls (its part of the link's log)
  local per_sample = {}
  for _, t in ipairs(trials) do
    local seg = segs[WARMUPS + t.round]
    if t.ok and t.clean ~= false and seg then per_sample[#per_sample + 1] = { t = t, e = EXPECT[R.workload](seg, paths) } end
  end
  local function time_of(e, name)
    local x = e[name]
    return x and x.held and (x.held + x.loopback) or nil, x and x.inj
  end
  local figs = {}
  for _, f in ipairs(started.figures) do
    local name, unit = f[1], f[2]
    local vals, exp, inj, diffs, below = {}, {}, {}, {}, 0
    local calls, mib, kind, polled = 0, 0, nil, {}
    for _, p in ipairs(per_sample) do
      local v = p.t.figures and p.t.figures[name]
      local x = p.e[name]
      if type(v) == 'number' and x then
        local want, floor
        if x.held then
          kind = 'time'
          want, floor = x.held + x.loopback, x.inj
          calls, mib = x.calls, x.mib
          if x.polled then polled[#polled + 1] = x.polled end
          if v < floor - KNOWN.below_ms then below = below + 1 end
        elseif x.ratio then
          kind = 'derived'
          local a, ai = time_of(p.e, x.ratio[1])
          local b, bi = time_of(p.e, x.ratio[2])
          want, floor = a and b and a / b, ai and bi and ai / bi
        elseif x.from then
          kind = 'derived'
          local t_ms, t_inj = time_of(p.e, x.from)
          want, floor = t_ms and x.f(t_ms), t_inj and x.f(t_inj)
        end
        if want then
          vals[#vals + 1], exp[#exp + 1], inj[#inj + 1], diffs[#diffs + 1] = v, want, floor, v - want
        end
      end
    end
    local d = stats.describe(vals, { reps = report_format.REPS, seed = 45 ~ stats.hash(name) })
    local fig = { name = name, unit = unit, n = #vals, kind = kind, p50 = d.p50, ci_lo = d.ci_lo, ci_hi = d.ci_hi }
    if #vals > 0 then
      fig.expected, fig.injected, fig.error = stats.median(exp), stats.median(inj), stats.median(diffs)
      fig.worst = 0
      for _, x in ipairs(diffs) do if math.abs(x) > math.abs(fig.worst) then fig.worst = x end end
      fig.below = below
      if kind == 'time' then
        fig.calls, fig.mib = calls, mib
        fig.polled = #polled > 0 and stats.median(polled) or nil
        fig.bound = KNOWN.per_call_ms * calls + KNOWN.per_mib_ms * mib + KNOWN.rel * fig.expected
        fig.within = math.abs(fig.error) <= fig.bound and below == 0
      end
    end
    figs[#figs + 1] = fig
  end
  results.runs[#results.runs + 1] = { workload = R.workload, vendor = vendor, provider = R.provider, status = status, wall_s = wall_s, paths = paths,
    requests = #log, samples_in_log = #segs, paired = #per_sample, late = late, late_max_ms = late_max, figures = figs }
end
-- a run that fails (a fake that would not start, a provider that cannot run here: local's sandboxes
-- need their namespaces) is reported as failed in the section, and the other runs still are
local ok, err = pcall(function()
  for _, R in ipairs(RUNS) do
    local t0 = clock.now()
    local rok, rerr = pcall(run_one, R)
    if not rok then
      say('%s: failed: %s', R.workload, tostring(rerr))
      results.runs[#results.runs + 1] = { workload = R.workload, vendor = R.vendor or 'daytona', provider = R.provider,
        status = 'failed', error = tostring(rerr), wall_s = (clock.now() - t0) / 1e9, paths = {}, requests = 0,
        late = 0, late_max_ms = 0, figures = {} }
    end
  end
end)
close_links()
if not ok then
  say('failed: %s', tostring(err))
  fs.remove_tree(TMP)
  return 1
end
results.elapsed_s = (clock.now() - t_begin) / 1e9
results.loadavg_after = (fs.read('/proc/loadavg') or ''):match('^(%S+)')

-- ---- verdicts and the section ------------------------------------------------------------------
local function fmt(v, unit)
  if v == nil then return '–' end
  if unit == 'ms' then return report_format.ms(v) end
  return string.format('%.4g', v)
end
local rows, within_n, total_n, below = {}, 0, 0, {}
for _, r in ipairs(results.runs) do
  for _, f in ipairs(r.figures) do
    local inj_s, exp_s, err_s, bound_s, verdict = '–', '–', '–', '–', 'not paired'
    if f.expected then
      inj_s, exp_s = fmt(f.injected, f.unit), fmt(f.expected, f.unit)
      if f.polled then inj_s = inj_s .. string.format(' (span of %g calls)', f.polled) end
      if f.below > 0 then below[#below + 1] = f.name end
      if f.kind == 'time' then
        err_s = string.format('%+.2f ms (%+.1f%%); worst %+.1f', f.error, f.error / f.expected * 100, f.worst)
        bound_s = '±' .. report_format.ms(f.bound) .. ' ms'
        total_n = total_n + 1
        if f.within then within_n = within_n + 1 end
        verdict = f.within and 'within' or (f.below > 0 and '**below the injection**' or '**outside**')
      else
        err_s = string.format('%+.1f%%', f.error / f.expected * 100)
        verdict = 'derived'
      end
    end
    rows[#rows + 1] = { r.workload, '`' .. f.name .. '`', f.unit, inj_s, exp_s, fmt(f.p50, f.unit) .. ' ' ..
      report_format.ci(f.ci_lo, f.ci_hi, function(v) return fmt(v, f.unit) end), err_s, bound_s, verdict }
  end
end
results.within, results.total, results.below = within_n, total_n, below
local failed = {}
for _, r in ipairs(results.runs) do
  if r.error then failed[#failed + 1] = r.workload .. ' (' .. r.error:gsub('%s+', ' '):sub(1, 200) .. ')' end
end
results.failed = #failed
if opts.json then assert(fs.write(opts.json, jsonl.encode(results) .. '\n')) end

local H = report_format
local run_rows = {}
for _, r in ipairs(results.runs) do
  local p = {}
  for k, v in pairs(r.paths) do p[#p + 1] = k .. ': ' .. v end
  table.sort(p)
  run_rows[#run_rows + 1] = { r.workload, r.provider or r.vendor, tostring(r.status), string.format('%.1f', r.wall_s), tostring(r.requests),
    string.format('%d (max %s ms)', r.late, report_format.ms(r.late_max_ms)), table.concat(p, '; ') }
end
local md = table.concat({
  string.format('`bench/primitives.lua`: the arena\'s workloads (`--workload exec`, `upload`, `download`, `files`, ' ..
    '`snapshot`, `fork`) on the Daytona fake (its sandboxes run their commands for real), `pause` on the E2B fake ' ..
    '(its API and its envd), each behind `bench/link_fake.lua`, a link in its own process that answers every ' ..
    'request at its arrival + **%g ms** + its bytes (request and answer bodies) at **%g MiB/s**; `egress` on the ' ..
    'local provider, its sandbox (sharing the host\'s network) fetching %s from the same link acting as the ' ..
    'mirror. %d measured samples (+ %d warmup) per workload, sizes %s, %d files of %d B, snapshot of a sandbox ' ..
    'holding %s, fork 1 -> %d; %.0f s in all. Load average %s before, %s after.', L_MS, MIBPS,
    workloads.size_name(EGRESS_BYTES), SAMPLES, WARMUPS, table.concat((function()
      local t = {}
      for i, b in ipairs(SIZES) do t[i] = workloads.size_name(b) end
      return t
    end)(), ', '), FILES, FILE_BYTES, workloads.size_name(SNAP_SIZE), FORKS, results.elapsed_s,
    tostring(results.loadavg_before), tostring(results.loadavg_after)),
  '',
  string.format('**%d of %d timed figures within the documented error** (docs/ARENA.md, "Primitives": a median at ' ..
    'most %g ms per call + %g ms per MiB moved + %g%% from what the link held, and no sample below the injection ' ..
    'by more than %g ms)%s.',
    within_n, total_n, KNOWN.per_call_ms, KNOWN.per_mib_ms, KNOWN.rel * 100, KNOWN.below_ms,
    #below > 0 and ('; **below the injection**: ' .. table.concat(below, ', ')) or '; no sample below the injection')
    .. (#failed > 0 and ('; **runs that failed** (no figures): ' .. table.concat(failed, '; ')) or ''),
  '',
  H.table({ 'workload', 'figure', 'unit', 'injected (L per call + bytes at B; polled: the span the link saw)',
    'expected (the link held + loopback; egress: + the sandbox\'s own path)',
    'measured p50 [95% CI]', 'error: median of (sample - expected)', 'documented bound', 'verdict' }, rows, 'lllrrrrrl'),
  'Each clean sample is paired with its own calls: the link\'s log cut at each sample\'s create (the samples ran one ' ..
    'after another), the calls its path made found in it (its `paths`: `put` is an upload and the `tar -x` command ' ..
    'after it; exec\'s median, min and max are its median, fastest and slowest call). Injected: L per call plus the ' ..
    'call\'s bodies (request and answer, from the link\'s log) at B. Expected: what the link held those calls (arrival ' ..
    'to answer: the injection, or more where the fake\'s own work, a real command in a real sandbox, outlasted it) ' ..
    'plus what their bodies cost on loopback by themselves, timed beside it (the median of 5 calls of the same bytes ' ..
    'to the link\'s echo, answered at once: the bodies cross loopback outside the link\'s window). Error: the median ' ..
    'over the samples of (figure - expected), and the worst one: what the engine adds beyond both (its loop, its ' ..
    'clock, its own work on the path: a multipart form built, a tar read). Columns are medians over the samples; a ' ..
    'derived figure (MiB/s, files/s, the ratio) follows the times it is derived from. No sample may be below the ' ..
    'injection: the link never answers early.',
  '',
  'Polled figures (`snapshot_*_ms`: the snapshot call and its `GET /snapshots/{name}` polls until active; ' ..
    '`restore_create_*_ms`: the create and its `GET /sandbox/{id}` polls until started; `snapshot_delete_*_ms`: ' ..
    'the lookup and the delete; `fork_ms`: one `POST /sandbox/{id}/fork` per child, then the children polled ' ..
    'together until started): the adapter sleeps between its calls with its own back-off (100 ms, x1.1 to 1 s), ' ..
    'so no sum of injections says what such a figure should be. What the link saw does: the span from the ' ..
    'first call\'s arrival to the last call\'s answer, the calls\' injections and the client\'s sleeps and work ' ..
    'between them all inside it. The figure\'s clock starts before that first call is sent and stops after that ' ..
    'last answer arrives, so the engine can only add the two ends: expected = the span + the loopback of the ' ..
    'first request and the last answer, the injected column is the span (no sample may be below it), and the ' ..
    'window counts as one call in the bound. `restore_*_ms` adds the restored sandbox\'s first command, ' ..
    '`fork_ready_ms` the span of the children\'s first commands (in parallel). `pause` (E2B) is single calls: ' ..
    '`POST /sandboxes/{id}/pause`, `POST /sandboxes/{id}/connect` (the resume) and envd\'s first command after. ' ..
    '`egress`: the figures are the sandbox\'s tool\'s own clock (curl\'s `-w`, else python3\'s); the link holds ' ..
    'the GET (not the connection) for L + the file at B; the sandbox\'s own path (the tool, loopback\'s TCP, the ' ..
    'bytes read and written) is calibrated by the same workload run just before on the same provider ' ..
    'fetching the same bytes from the link\'s echo, answered at once: expected = the link\'s hold + that run\'s ' ..
    'median of the same figure (`egress_connect_ms`: the calibration alone).',
  '',
  H.table({ 'workload', 'provider (fake)', 'arena status', 'wall s', 'requests through the link', 'answered late (the fake outlasted ' ..
    'the window)', 'paths' }, run_rows, 'llrrrrl'),
  string.format('Not measured here: 64 MiB and 512 MiB (the Daytona fake\'s toolbox takes request bodies up to 64 MiB, ' ..
    'cseng.serve\'s default; at %g MiB/s a 512 MiB sample would hold each transfer %.0f s, about %.0f s per sample ' ..
    'for upload and download each, with the fake holding several copies of it in memory); snapshot at more than one ' ..
    'size (the snapshot\'s bytes stay in the fake, none cross the link, so the size changes the fake\'s copy, not ' ..
    'the injection); pause elsewhere than E2B and fork elsewhere than Daytona (the same calls on other fakes); ' ..
    '`standard` (its figures are the sandbox\'s own compile and tests, one command each, with nothing of ' ..
    'the link\'s to compare them with).',
    MIBPS, 512 / MIBPS, 2 * (512 / MIBPS) + 2),
}, '\n') .. '\n'
if opts.out then assert(fs.write(opts.out, md)) else io.stdout:write(md) end
fs.remove_tree(TMP)
say('%d of %d figures within the documented error (%.0f s)%s', within_n, total_n, results.elapsed_s,
  #failed > 0 and string.format('; %d run(s) failed', #failed) or '')
return #failed > 0 and 1 or 0
