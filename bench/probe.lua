--- A lifecycle probe for comparing builds: the fake provider (its own process) and
--- bench/client.lua at one concurrency, run by each given binary in turn, repeated, alternating
--- the order, so a slow phase of a shared machine hits every build alike. The printout is the
--- median (min-max) per build of: the share of the latency-bound ideal, the p99 timing error
--- against the fake's held time, the client's CPU per request, and the fake's (its getrusage
--- through /stats, over the requests it answered during that run).
---
---   ./cseng lua bench/probe.lua [--exe LABEL=PATH[@LIBDIR][+POOLS],...] [--concurrency 1024] [--reps 3]
---                               [--duration 3] [--warmup 1] [--out F.json] [--perf DIR] [--fake lua|c]
---                               [--pin on|off|both] [--tls 1.1|2]
---
--- --exe: the builds to compare (default: this binary). @LIBDIR runs that build with
--- LD_LIBRARY_PATH=LIBDIR (e.g. an older libcurl.so.4 extracted with dpkg -x; a build that
--- needs a newer libcurl refuses to start unless made with CFLAGS+=-DCSENG_CURL_MIN=...). --perf DIR: one more run per build under `perf record` (software
--- clock), its report (dso,sym) written to DIR/perf-LABEL.txt. --fake c: the fake provider is
--- bench/fake_provider.c (make build/bench/fake_provider; same routes and answers, a fraction of
--- the Lua fake's CPU, which on two cores is taken from the client it measures). --pin: the fake on
--- the last CPU and the client on the first (bench/lib.lua's pinning, as make bench runs them; the
--- default), neither (off), or each build both ways, alternating (labels LABEL and LABEL-free).
--- --tls 1.1|2: the C fake over TLS (a CA and certificate made for the run, bench/lib.lua) and
--- the client asking for that HTTP version by ALPN.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local cjson = require('cjson')
local http = require('cseng.http')
local stats = require('cseng.lib.stats')
local blib = require('bench.lib')
local jsonl = require('cseng.lib.jsonl')

local opts = blib.options('probe', arg, { exe = 'list', concurrency = { 'int', min = 1 }, reps = { 'int', min = 1 },
  duration = 'number', warmup = 'number', out = 'string', perf = 'string', fake = 'string', pin = 'string',
  tls = 'string' })
if not opts then return 2 end

local ROOT = sys.root()
local SELF = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local C = opts.concurrency or 1024
local REPS = opts.reps or 3
local DURATION = opts.duration or 3
local WARMUP = opts.warmup or 1
local NOMINAL = { create = 50, exec = 20, delete = 10 }
local IDEAL = C / ((NOMINAL.create + NOMINAL.exec + NOMINAL.delete) / 1000)

local PIN = opts.pin or 'on'
if PIN ~= 'on' and PIN ~= 'off' and PIN ~= 'both' then
  io.stderr:write('probe: --pin: on, off or both\n')
  return 2
end
local pinning, nopin = blib.pinning()
if PIN ~= 'off' and not pinning then
  io.stderr:write('probe: --pin ', PIN, ': ', nopin, '\n')
  return 2
end

local builds = {}
for _, spec in ipairs(opts.exe or { 'self=' .. SELF }) do
  local label, path = spec:match('^([%w_.%-]+)=(.+)$')
  if not label then
    io.stderr:write('probe: --exe ', spec, ': expected LABEL=PATH[@LIBDIR]\n')
    return 2
  end
  local pools
  path, pools = path:match('^(.-)%+(%d+)$') or path, path:match('%+(%d+)$')
  local exe, libdir = path:match('^(.-)@(.+)$')
  if PIN ~= 'off' then builds[#builds + 1] = { label = label, exe = exe or path, libdir = libdir, pools = pools, runs = {}, pin = true } end
  if PIN ~= 'on' then
    builds[#builds + 1] = { label = PIN == 'both' and (label .. '-free') or label, exe = exe or path, libdir = libdir, pools = pools, runs = {} }
  end
end

local function env_for(b)
  local env = { CSENG_ROOT = ROOT } -- a build kept outside the tree runs this tree's Lua
  if b.libdir then
    env.LD_LIBRARY_PATH = b.libdir
  end
  return env
end

if opts.fake ~= nil and opts.fake ~= 'c' and opts.fake ~= 'lua' then
  io.stderr:write('probe: --fake: lua or c\n')
  return 2
end
if opts.tls ~= nil and opts.tls ~= '1.1' and opts.tls ~= '2' then
  io.stderr:write('probe: --tls: 1.1 or 2\n')
  return 2
end
if opts.tls and opts.fake == 'lua' then
  io.stderr:write('probe: --tls needs the C fake (the Lua one serves plain HTTP only)\n')
  return 2
end

-- made once every argument is checked: a refused command leaves nothing behind
local TMP = assert(fs.tempdir('cseng-probe-'))

-- the fake provider, run by this binary
local fake, url, certs
do
  local fargs = { '--create-ms', NOMINAL.create, '--exec-ms', NOMINAL.exec, '--delete-ms', NOMINAL.delete }
  if opts.tls then
    certs = blib.make_certs(fs.join(TMP, 'certs'))
    for _, a in ipairs { '--tls-cert', certs.cert, '--tls-key', certs.key } do fargs[#fargs + 1] = a end
    http.configure { ca_file = certs.ca } -- this process reads the fake's /stats over TLS too
  end
  if opts.fake == 'c' or opts.tls then fake, url = blib.start_fake_c(TMP, fargs)
  else fake, url = blib.start_fake(SELF, TMP, fargs) end
end

local function fake_stats()
  local r = http.request { url = url .. '/stats', timeout = 30 }
  if not r or r.status ~= 200 then return nil end
  return cjson.decode(r.body)
end

local function client(b, prefix)
  if pinning then blib.place(pinning, fake:pid(), not b.pin) end -- the fake where the build's client expects it
  local s0 = fake_stats()
  local out = fs.join(TMP, b.label .. '.json')
  fs.remove(out)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs(b.pin and pinning.client or {}) do argv[#argv + 1] = a end
  for _, a in ipairs { b.exe, 'lua', fs.join(ROOT, 'bench/client.lua'), '--url', url, '--concurrency', C,
    '--warmup', WARMUP, '--duration', DURATION, '--out', out } do argv[#argv + 1] = tostring(a) end
  if b.pools then
    argv[#argv + 1] = '--pools'
    argv[#argv + 1] = b.pools
  end
  if certs then
    for _, a in ipairs { '--ca', certs.ca, '--http-version', opts.tls } do argv[#argv + 1] = a end
  end
  local r, err = proc.run { argv = argv, cwd = ROOT, env_add = env_for(b), timeout = WARMUP + DURATION + 120, tail_bytes = 1 << 16 }
  if not r or r.code ~= 0 then return nil, tostring(err or (r.stderr ~= '' and r.stderr or r.stdout)) end
  local ok, d = pcall(cjson.decode, fs.read(out) or '')
  if not ok then return nil, 'no result file' end
  local errs = {}
  for _, ph in ipairs { 'create', 'exec', 'delete' } do
    local m, h = d.samples[ph] or {}, d.samples[ph .. '_held'] or {}
    for i = 1, #m do
      if h[i] and h[i] > 0 then errs[#errs + 1] = (m[i] - h[i]) / 1e6 end
    end
  end
  local s = stats.summary(errs)
  local parts = {}
  for _, k in ipairs { 'way_there', 'way_back', 'resume' } do
    local v = {}
    for i, x in ipairs(d.samples[k] or {}) do v[i] = x / 1e6 end
    parts[k] = stats.summary(v)
  end
  local s1, fake_us = fake_stats(), nil
  if s0 and s1 and s1.requests > s0.requests + 1 then
    fake_us = (s1.user_s + s1.sys_s - s0.user_s - s0.sys_s) * 1e6 / (s1.requests - s0.requests - 1)
  end
  return { share = d.rate / IDEAL, rate = d.rate, p99 = s.p99, p50 = s.p50, cpu_us = d.cpu_per_request_us, fake_us = fake_us,
    there_p99 = parts.way_there.p99, back_p99 = parts.way_back.p99, resume_p99 = parts.resume.p99,
    failures = d.failures, first_error = d.first_error, maxrss_kb = d.maxrss_kb }
end

for rep = 1, REPS do
  local order = {}
  for i = 1, #builds do order[i] = builds[(rep % 2 == 0) and (#builds - i + 1) or i] end
  for _, b in ipairs(order) do
    local r, err = client(b)
    if r then
      b.runs[#b.runs + 1] = r
      io.stderr:write(string.format('probe: %-8s c=%d rep %d: %.1f%% of ideal, p99 %.2f ms ' ..
        '(parts\' p99: there %.2f, back %.2f, loop wait %.2f), CPU %.1f us/req (fake %.1f), failures %d%s\n',
        b.label, C, rep, r.share * 100, r.p99 or -1, r.there_p99 or -1, r.back_p99 or -1, r.resume_p99 or -1, r.cpu_us or -1,
        r.fake_us or -1, r.failures, r.first_error and (' (' .. r.first_error .. ')') or ''))
    else
      io.stderr:write(string.format('probe: %-8s c=%d rep %d: %s\n', b.label, C, rep, err))
    end
  end
end

if opts.perf then
  assert(fs.mkdir_p(opts.perf))
  for _, b in ipairs(builds) do
    local data = fs.join(TMP, 'perf-' .. b.label .. '.data')
    client(b, { 'perf', 'record', '-F', '1999', '-g', '-o', data, '--' })
    local rr = proc.run { argv = { 'perf', 'report', '-i', data, '--no-children', '--sort', 'dso,sym', '--stdio', '-g', 'none',
      '--percent-limit', '0.5' }, env_add = env_for(b), timeout = 180, tail_bytes = 1 << 20 }
    if rr then assert(fs.write(fs.join(opts.perf, 'perf-' .. b.label .. '.txt'), rr.stdout)) end
  end
end
fake:close()
fs.remove_tree(TMP)

local function med(runs, k, f)
  local v = {}
  for _, r in ipairs(runs) do if r[k] then v[#v + 1] = r[k] * (f or 1) end end
  if #v == 0 then return '–' end
  table.sort(v)
  local fmt = v[#v] < 1 and '%.3f (%.3f–%.3f)' or '%.1f (%.1f–%.1f)' -- sub-millisecond errors keep their digits
  return string.format(fmt, stats.quantile_sorted(v, 0.5), v[1], v[#v])
end
local summary = {}
for _, b in ipairs(builds) do
  print(string.format('%-8s c=%d  ideal %% %s  p99 ms %s (there %s, back %s; loop wait %s)  CPU us/req %s  fake CPU us/req %s  (%d runs)',
    b.label, C, med(b.runs, 'share', 100), med(b.runs, 'p99'), med(b.runs, 'there_p99'), med(b.runs, 'back_p99'),
    med(b.runs, 'resume_p99'), med(b.runs, 'cpu_us'), med(b.runs, 'fake_us'), #b.runs))
  summary[#summary + 1] = { label = b.label, exe = b.exe, libdir = b.libdir, concurrency = C, runs = jsonl.array(b.runs) }
end
if opts.out then assert(fs.write(opts.out, jsonl.encode(summary))) end
return 0
