--- The arena's primitive workloads measured against a fake of known latency and bandwidth: each
--- figure against what the injection alone makes it, with the error, for docs/PERFORMANCE.md's
--- "Primitives against a known link" (bench/run.lua runs this in its own process and keeps the section).
---
---   ./cseng lua bench/primitives.lua [--samples 5] [--latency-ms 50] [--mibps 32] [--sizes 1MiB,16MiB]
---                                    [--files 20] [--out SECTION.md] [--json RAW.json]
---
--- The fake: bench/link_fake.lua in its own process, the Daytona fake (whose sandboxes really run
--- their commands) behind a link that answers every request at arrival + L + bytes / B. The arena
--- runs here, as `cseng run plans/startup.lua --workload W` runs it (lua/cseng/run/frame.lua), over
--- exec, upload, download and files. What a figure should be follows from the calls its path makes
--- (the sample's `paths`: put is an upload then a `tar -x` command) and the bytes each carried (the
--- link's log): L per call plus the call's bytes at B. The error of a figure is its median over the
--- clean samples minus that; the bound it is held to is the engine's documented error (docs/ARENA.md,
--- "Primitives", Known error): KNOWN below. No sample may be below its injected time (the link never
--- answers early, so one that is would be a clock that reads short).
local clock = require 'cseng.clock'
local fs = require 'cseng.fs'
local proc = require 'cseng.proc'
local task = require 'cseng.task'
local sys = require 'cseng.sys'
local cjson = require 'cjson'
local jsonl = require 'cseng.lib.jsonl'
local stats = require 'cseng.lib.stats'
local frame = require 'cseng.run.frame'
local workloads = require 'cseng.run.workloads'
local report_format = require 'reports.lib.format'
local blib = require 'bench.lib'

local opts = blib.options('primitives', arg, { samples = { 'int', min = 2 }, ['latency-ms'] = 'number', mibps = 'number',
  sizes = 'string', files = { 'int', min = 1 }, out = 'string', json = 'string', warmups = { 'int', min = 0 } })
if not opts then return 2 end
local ROOT = sys.root()
local EXE = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local SAMPLES, WARMUPS = opts.samples or 5, opts.warmups or 1
local L_MS, MIBPS = opts.latency_ms or 50, opts.mibps or 32
local FILES, FILE_BYTES = opts.files or 20, 4096
local SIZES = {}
for s in (opts.sizes or '1MiB,16MiB'):gmatch('[^,]+') do SIZES[#SIZES + 1] = assert(workloads.parse_size(s), s) end

--- The engine's documented error on loopback (docs/ARENA.md, "Primitives", Known error): a
--- figure's median is within per_call_ms per call the figure makes plus per_mib_ms per MiB it
--- moves (the client and the link copying the bytes on this machine) above what the injection makes
--- it, and never below it by more than below_ms.
local KNOWN = { per_call_ms = 5, per_mib_ms = 8, below_ms = 0.5 }

local TMP = assert(fs.tempdir('cseng-bench-prim-'))
local INFO, LOG = fs.join(TMP, 'link.json'), fs.join(TMP, 'link.jsonl')

local function say(...) io.stderr:write('primitives: ', string.format(...), '\n') end

-- ---- the fake behind its link, in its own process -----------------------------------------------
local link = assert(proc.spawn { argv = { EXE, 'lua', fs.join(ROOT, 'bench/link_fake.lua'), '--vendor', 'daytona',
  '--latency-ms', tostring(L_MS), '--mibps', tostring(MIBPS), '--info', INFO, '--log', LOG, '--max-seconds', '3600' },
  cwd = ROOT, stdout = fs.join(TMP, 'link.out'), stderr = fs.join(TMP, 'link.out') })
local info
for _ = 1, 400 do
  local t = fs.read(INFO)
  if t and t:find('\n') then info = cjson.decode(t) break end
  task.sleep(0.05)
end
if not info then
  link:close()
  error('the link fake did not start: ' .. tostring(fs.read(fs.join(TMP, 'link.out'))), 0)
end

local function read_log()
  local out = {}
  for line in (fs.read(LOG) or ''):gmatch('[^\n]+') do out[#out + 1] = cjson.decode(line) end
  return out
end

-- ---- what the injection makes a figure -----------------------------------------------------------
-- Per class of call (the link's log): the injection's time (hold_ms: L + bytes / B) and the time the
-- link really took (held_ms: the same, or more where the fake's own work outlasted it), as the
-- median (a figure of one call) or the mean (a figure that sums many calls) over the class.
local function class(log, fn, how)
  local inj, held, bytes = {}, {}, {}
  for _, r in ipairs(log) do
    if fn(r) then inj[#inj + 1] = r.hold_ms; held[#held + 1] = r.held_ms; bytes[#bytes + 1] = r.bytes_in + r.bytes_out end
  end
  if #inj == 0 then return nil end
  local pick = how == 'mean' and stats.mean or stats.median
  return { inj = pick(inj), held = pick(held), bytes = pick(bytes), n = #inj }
end
local function sum(parts, times, how)
  local e = { inj = 0, held = 0, calls = 0, mib = 0, how = how }
  for _, p in ipairs(parts) do
    e.inj, e.held = e.inj + p.inj * (times or 1), e.held + p.held * (times or 1)
    e.calls, e.mib = e.calls + (times or 1), e.mib + p.bytes * (times or 1) / 1048576
  end
  return e
end
local function command(prefix) return function(r) return r.command and r.command:sub(1, #prefix) == prefix end end
local function is_upload(r) return r.side == 'toolbox' and r.path:match('/files/bulk%-upload$') end
local function is_download(r) return r.side == 'toolbox' and r.path:match('/files/bulk%-download$') end
local is_tar = command('mkdir -p ')
-- a transfer of about b bytes: within 1 KiB + 2% of it (the multipart and tar framing)
local function near(b) return function(n) return n >= b and n <= b + 1024 + b * 0.02 end end

local EXPECT = {}
-- exec: one toolbox call per command; min, median and max each one call
function EXPECT.exec(log)
  local c = class(log, command('echo cseng-exec-'))
  if not c then return {} end
  local e = sum({ c }, 1, '1 call')
  -- the fastest and the slowest of a sample's calls: held to the injection's floor only
  local floor = { inj = e.inj, held = e.held, calls = 1, mib = 0, how = '1 call (its floor)', floor_only = true }
  return { exec_rtt_ms = e, exec_rtt_min_ms = floor, exec_rtt_max_ms = floor }
end
-- a payload through the sample's path: put is the upload and a tar -x command
local function transfer(log, payload, path, how)
  local up = class(log, function(r) return is_upload(r) and near(payload)(r.bytes_in) end, how)
  if not up then return nil end
  if path:match('^put') then
    local tar = class(log, is_tar, how)
    return tar and sum({ up, tar }, 1, string.format('upload of %s B + tar -x', report_format.num(up.bytes, 0)))
  end
  return sum({ up }, 1, string.format('one call of %s B', report_format.num(up.bytes, 0)))
end
local function derived(out, name, from, f)
  if out[from] then out[name] = { from = from, value = f(out[from].held), inj_value = f(out[from].inj) } end
end
function EXPECT.upload(log, paths)
  local out = {}
  for _, b in ipairs(SIZES) do
    local n = workloads.size_name(b)
    out['upload_' .. n .. '_ms'] = transfer(log, b, paths.upload or 'put')
    derived(out, 'upload_' .. n .. '_mibps', 'upload_' .. n .. '_ms', function(ms) return b / 1048576 / (ms / 1000) end)
  end
  return out
end
function EXPECT.download(log)
  local out = {}
  for _, b in ipairs(SIZES) do
    local n = workloads.size_name(b)
    local c = class(log, function(r) return is_download(r) and near(b)(r.bytes_out) end)
    if c then out['download_' .. n .. '_ms'] = sum({ c }, 1, string.format('one call of %s B', report_format.num(c.bytes, 0))) end
    derived(out, 'download_' .. n .. '_mibps', 'download_' .. n .. '_ms', function(ms) return b / 1048576 / (ms / 1000) end)
  end
  return out
end
function EXPECT.files(log, paths)
  local out = {}
  out.files_bulk_ms = transfer(log, FILES * FILE_BYTES, paths.files_bulk or 'put')
  -- the per-file path: each file's own call (a one-file tar, and for put its tar -x), summed
  local one = transfer(log, FILE_BYTES, paths.files_per_file or 'put', 'mean')
  if one then
    out.files_per_file_ms = sum({ { inj = one.inj, held = one.held, bytes = one.mib * 1048576 } }, FILES,
      string.format('%d x (%s)', FILES, one.how))
    out.files_per_file_ms.calls = one.calls * FILES
  end
  derived(out, 'files_bulk_per_s', 'files_bulk_ms', function(ms) return FILES / (ms / 1000) end)
  derived(out, 'files_per_file_per_s', 'files_per_file_ms', function(ms) return FILES / (ms / 1000) end)
  if out.files_bulk_ms and out.files_per_file_ms then
    out.files_per_file_over_bulk = { from = 'files_per_file_ms', value = out.files_per_file_ms.held / out.files_bulk_ms.held,
      inj_value = out.files_per_file_ms.inj / out.files_bulk_ms.inj }
  end
  return out
end

-- ---- the runs ----------------------------------------------------------------------------------
local RUNS = {
  { workload = 'exec', options = { exec_count = 10 } },
  { workload = 'upload', sizes = SIZES },
  { workload = 'download', sizes = SIZES },
  { workload = 'files', options = { files = FILES, file_bytes = FILE_BYTES } },
}
local results = { latency_ms = L_MS, mibps = MIBPS, samples = SAMPLES, warmups = WARMUPS, known = KNOWN, files = FILES,
  sizes = SIZES, runs = {}, host = sys.hostname and sys.hostname() or nil,
  loadavg_before = (fs.read('/proc/loadavg') or ''):match('^(%S+)') }
local t_begin = clock.now()
local ok, err = pcall(function()
  for _, R in ipairs(RUNS) do
    fs.write(LOG, '')
    say('%s: %d samples + %d warmup(s) against the link (%g ms, %g MiB/s)', R.workload, SAMPLES, WARMUPS, L_MS, MIBPS)
    local sink = { write = function() end }
    local t0 = clock.now()
    local status, run_info = frame.run('startup', { providers = { 'daytona' }, provider_config = { daytona = info.config },
      workload = R.workload, workload_options = R.options, sizes = R.sizes, samples = SAMPLES, warmups = WARMUPS, seed = 45,
      output = fs.join(TMP, 'results'), quiet = true, command = 'echo bench-prim-ready', expect = 'bench-prim-ready',
      cleanup_backoff = { 0.05, 0.1 }, stderr = sink })
    local wall_s = (clock.now() - t0) / 1e9
    local trials, started = {}, nil
    for line in (fs.read(run_info.jsonl) or ''):gmatch('[^\n]+') do
      local e = cjson.decode(line)
      if e.event == 'run_started' then started = e end
      if e.event == 'startup_trial' and not e.warmup then trials[#trials + 1] = e end
    end
    local log = read_log()
    local paths = {}
    for _, t in ipairs(trials) do for k, v in pairs(t.paths or {}) do paths[k] = v end end
    local expect = EXPECT[R.workload](log, paths)
    local late, late_max = 0, 0
    for _, r in ipairs(log) do
      if r.late_ms > 0 then late = late + 1; late_max = math.max(late_max, r.late_ms) end
    end
    local figs = {}
    for _, f in ipairs(started.figures) do
      local name, unit = f[1], f[2]
      local vals = {}
      local clean, failed = 0, 0
      for _, t in ipairs(trials) do
        if t.ok and t.clean ~= false and t.figures and type(t.figures[name]) == 'number' then
          vals[#vals + 1] = t.figures[name]; clean = clean + 1
        elseif not t.ok then failed = failed + 1 end
      end
      local d = stats.describe(vals, { reps = report_format.REPS, seed = 45 ~ stats.hash(name) })
      figs[#figs + 1] = { name = name, unit = unit, n = #vals, failed = failed, p50 = d.p50, ci_lo = d.ci_lo,
        ci_hi = d.ci_hi, min = d.min, max = d.max, expect = expect[name] }
    end
    results.runs[#results.runs + 1] = { workload = R.workload, status = status, wall_s = wall_s, paths = paths,
      requests = #log, late = late, late_max_ms = late_max, figures = figs, log_file = run_info.jsonl }
  end
end)
link:close()
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
    local e = f.expect
    local inj_s, held_s, err_s, bound_s, verdict = '–', '–', '–', '–', '–'
    if e and e.inj and f.p50 then
      f.injected, f.held = e.inj, e.held
      inj_s = report_format.ms(e.inj) .. ' (' .. e.how .. ')'
      held_s = report_format.ms(e.held)
      local floor_ok = f.min >= e.inj - KNOWN.below_ms
      if not floor_ok then below[#below + 1] = f.name end
      if e.floor_only then
        f.within = floor_ok
        verdict = floor_ok and 'not below the injection' or '**below the injection**'
      else
        local bound = KNOWN.per_call_ms * e.calls + KNOWN.per_mib_ms * e.mib
        local d = f.p50 - e.held
        f.error_ms, f.bound_ms = d, bound
        f.within = floor_ok and d <= bound and d >= -KNOWN.below_ms
        err_s = string.format('%+.2f ms (%+.1f%%)', d, d / e.held * 100)
        bound_s = string.format('+%s ms', report_format.ms(bound))
        total_n = total_n + 1
        if f.within then within_n = within_n + 1 end
        verdict = f.within and 'within' or '**outside**'
      end
    elseif e and e.value and f.p50 then
      -- a derived figure: expected from the time it is derived from
      f.injected, f.held = e.inj_value, e.value
      inj_s, held_s = fmt(e.inj_value, f.unit), fmt(e.value, f.unit)
      err_s = string.format('%+.1f%%', (f.p50 - e.value) / e.value * 100)
      verdict = 'as ' .. e.from
    end
    rows[#rows + 1] = { r.workload, '`' .. f.name .. '`', f.unit, inj_s, held_s, fmt(f.p50, f.unit) .. ' ' ..
      report_format.ci(f.ci_lo, f.ci_hi, function(v) return fmt(v, f.unit) end), err_s, bound_s, verdict }
  end
end
results.within, results.total, results.below = within_n, total_n, below
if opts.json then assert(fs.write(opts.json, jsonl.encode(results) .. '\n')) end

local H = report_format
local run_rows = {}
for _, r in ipairs(results.runs) do
  local p = {}
  for k, v in pairs(r.paths) do p[#p + 1] = k .. ': ' .. v end
  table.sort(p)
  run_rows[#run_rows + 1] = { r.workload, tostring(r.status), string.format('%.1f', r.wall_s), tostring(r.requests),
    string.format('%d (max %s ms)', r.late, report_format.ms(r.late_max_ms)), table.concat(p, '; ') }
end
local md = table.concat({
  string.format('`bench/primitives.lua`: the arena\'s workloads (`--workload exec`, `upload`, `download`, `files`) ' ..
    'on the Daytona fake (its sandboxes run their commands for real) behind `bench/link_fake.lua`, a link in its own ' ..
    'process that answers every request at its arrival + **%g ms** + its bytes (request and answer bodies) at ' ..
    '**%g MiB/s**. %d measured samples (+ %d warmup) per workload, sizes %s, %d files of %d B; %.0f s in all. ' ..
    'Load average %s before, %s after.', L_MS, MIBPS, SAMPLES, WARMUPS, table.concat((function()
      local t = {}
      for i, b in ipairs(SIZES) do t[i] = workloads.size_name(b) end
      return t
    end)(), ', '), FILES, FILE_BYTES, results.elapsed_s, tostring(results.loadavg_before), tostring(results.loadavg_after)),
  '',
  string.format('**%d of %d timed figures within the documented error** (docs/ARENA.md, "Primitives": a median at ' ..
    'most %g ms per call + %g ms per MiB moved above what the link held, and no sample below the injection by more ' ..
    'than %g ms)%s.',
    within_n, total_n, KNOWN.per_call_ms, KNOWN.per_mib_ms, KNOWN.below_ms,
    #below > 0 and ('; **below the injection**: ' .. table.concat(below, ', ')) or '; no sample below the injection'),
  '',
  H.table({ 'workload', 'figure', 'unit', 'injected: L per call + bytes at B', 'the link held', 'measured p50 [95% CI]',
    'error (p50 - held)', 'documented bound', 'verdict' }, rows, 'lllrrrrrl'),
  'Injected: L per call the sample\'s path makes (its `paths`; `put` is an upload and a `tar -x` command) plus the ' ..
    'bytes each call carried (request and answer bodies, from the link\'s log) at B. The link held: the time from each ' ..
    'call\'s arrival to its answer, as the link logged it (the median over the calls of that kind; the mean times the ' ..
    'count for the per-file path): the injection, or more where the fake\'s own work (a real command in a real ' ..
    'sandbox, on a loaded machine) outlasted it. Error: the median over the clean samples minus what the link held, ' ..
    'i.e. what the engine adds on the client side: sending and reading the bodies on loopback, its loop, its clock. A ' ..
    'derived figure (MiB/s, files/s, the ratio) follows the time it is derived from. No sample may be below the ' ..
    'injection: the link never answers early.',
  '',
  H.table({ 'workload', 'arena status', 'wall s', 'requests through the link', 'answered late (the fake outlasted ' ..
    'the window)', 'paths' }, run_rows, 'lrrrrl'),
  string.format('Not measured here: 64 MiB and 512 MiB (the Daytona fake\'s toolbox takes request bodies up to 64 MiB, ' ..
    'cseng.serve\'s default; at %g MiB/s a 512 MiB sample would hold each transfer %.0f s, about %.0f s per sample ' ..
    'for upload and download each, with the fake holding several copies of it in memory), snapshot and pause (their ' ..
    'calls poll the fake\'s state with the adapter\'s own back-off, which is not part of the injection).',
    MIBPS, 512 / MIBPS, 2 * (512 / MIBPS) + 2),
}, '\n') .. '\n'
if opts.out then assert(fs.write(opts.out, md)) else io.stdout:write(md) end
fs.remove_tree(TMP)
say('%d of %d figures within the documented error (%.0f s)', within_n, total_n, results.elapsed_s)
return 0
