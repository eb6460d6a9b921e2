--- make bench: cseng's own overhead, measured on loopback, written to docs/PERFORMANCE.md.
---
---   ./cseng lua bench/run.lua [--reps 3] [--duration 3] [--warmup 1] [--concurrency 4,64,256,1024]
---                             [--quick] [--no-python] [--no-docker] [--no-profile] [--no-modal] [--no-history]
---                             [--no-primitives]
---                             [--output docs/PERFORMANCE.md] [--fake c|lua] [--no-pin]
---                             [--no-tls] [--no-burst] [--no-loops]
---
--- Every measured client runs in its own process against servers in their own processes:
---   build/bench/fake_provider the fake Lizard provider in C (bench/fake_provider.c), injected
---                            latencies; --fake lua: bench/fake_provider.lua on cseng.serve instead
---                            (the same answers, spec/bench/fake_provider_spec.lua; ~1.5x its CPU, which
---                            on two cores is taken from the client it measures)
---   build/bench/fake_provider --tls-cert ...  the same fake over TLS (HTTP/1.1 or HTTP/2 by ALPN), a CA
---                            and certificate made for the run (bench/lib.lua's make_certs); every
---                            cseng figure is given plain, over TLS with HTTP/1.1 and over TLS with HTTP/2
---   nginx (Debian)           the zero-latency endpoint for the raw request rate, plain and over TLS
---                            (HTTP/1.1 and HTTP/2 by ALPN)
---   bench/client.lua         the cseng client; bench/client.py the seed-style Python client
---   wrk (Debian)             the reference load generator (also https://)
---   h2load (Debian's nghttp2-client)  the HTTP/2 reference (64 streams on one connection)
---   bench/burst.lua          a burst of 1,000 creates over TLS, connections warmed or cold
---   bench/client.lua --loops the client as several processes (loops), merged
---   bench/startup.lua        create -> first exec of the local (and docker) provider
---   bench/micro.lua          clock.now() cost, idle RSS
---   bench/modal_burst.lua    a burst of 100 against the Modal fake (gRPC over HTTP/2), 5 runs, plain and over TLS
---   bench/history_bench.lua  the history page and the viewer's start at a year of hourly runs
---   bench/primitives.lua     the arena's workloads against the Daytona and E2B fakes behind a link of known
---                            latency and bandwidth (bench/link_fake.lua; egress: local's sandbox fetching from
---                            it): each figure against the injection
--- The servers run on the last CPU and the measured clients (cseng, python, wrk) on the first
--- (bench/lib.lua's pinning; --no-pin or CSENG_BENCH_PIN=0 leaves them to the scheduler), and the
--- machine's own wake-up latency on the clients' CPU is measured with cyclictest (rt-tests), the
--- floor under the error of a client that stops its clock when its thread wakes (the Python one;
--- cseng's calls end at the answer's kernel receive stamp).
--- Repeated runs are interleaved (each repetition runs every client at every concurrency, the
--- clients' order alternating), so slow phases of a shared machine hit all of them alike; the
--- report shows the median over repetitions and the min-max. Raw results go to
--- bench/out/<stamp>.json; the markdown comes from bench/PERFORMANCE.md.tmpl. Whatever sits
--- between <!-- docker:begin --> and <!-- docker:end --> in the existing report is kept, and so is
--- bench/grpc_vs_rest.lua's section (<!-- grpc:begin --> ... <!-- grpc:end -->) and bench/soak.lua's
--- (<!-- soak:begin --> ... <!-- soak:end -->).
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local http = require('cseng.http')
local serve = require('cseng.serve')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local stats = require('cseng.lib.stats')
local flags = require('cseng.lib.flags')
local report_render = require('reports.lib.render')

local SPEC = {
  reps = { key = 'reps', type = 'int', min = 1 },
  duration = { key = 'duration', type = 'number' },
  warmup = { key = 'warmup', type = 'number' },
  concurrency = { key = 'concurrency', type = 'list' },
  quick = { key = 'quick', type = 'bool' },
  ['no-python'] = { key = 'no_python', type = 'bool' },
  ['no-docker'] = { key = 'no_docker', type = 'bool' },
  ['no-profile'] = { key = 'no_profile', type = 'bool' },
  ['no-modal'] = { key = 'no_modal', type = 'bool' },
  ['no-history'] = { key = 'no_history', type = 'bool' },
  ['no-primitives'] = { key = 'no_primitives', type = 'bool' },
  output = { key = 'output', type = 'string' },
  fake = { key = 'fake', type = 'string' },
  ['no-pin'] = { key = 'no_pin', type = 'bool' },
  ['no-tls'] = { key = 'no_tls', type = 'bool' },
  ['no-burst'] = { key = 'no_burst', type = 'bool' },
  ['no-loops'] = { key = 'no_loops', type = 'bool' },
}
local opts, perr = flags.parse(arg, SPEC)
if not opts then
  io.stderr:write('bench: ', perr, '\n')
  return 2
end

local FAKE = opts.fake or 'c'
if FAKE ~= 'c' and FAKE ~= 'lua' then
  io.stderr:write('bench: --fake: c or lua\n')
  return 2
end

local ROOT = sys.root()
local EXE = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local PY = '/usr/bin/python3' -- Debian's, for Debian's python3-httpx
local QUICK = opts.quick
local REPS = opts.reps or (QUICK and 1 or 3)
local DURATION = opts.duration or (QUICK and 1 or 3)
local WARMUP = opts.warmup or (QUICK and 0.5 or 1)
local CONC = {}
for _, c in ipairs(opts.concurrency or { '4', '64', '256', '1024' }) do CONC[#CONC + 1] = assert(math.tointeger(tonumber(c)), c) end
local RAW_C = 64
local LOCAL_N = QUICK and 10 or 100
local DOCKER_N = QUICK and 3 or 10 -- per repetition, for the provider and for `docker run`
local CLOCK_N = QUICK and 1000000 or 10000000
local NOMINAL = { create = 50, exec = 20, delete = 10 } -- ms, the issue's defaults
local PERIOD_MS = NOMINAL.create + NOMINAL.exec + NOMINAL.delete
local OUTPUT = opts.output or fs.join(ROOT, 'docs/PERFORMANCE.md')
local TEMPLATE = fs.join(ROOT, 'bench/PERFORMANCE.md.tmpl')
local STAMP = os.date('!%Y%m%dT%H%M%SZ')
local TMP = assert(fs.tempdir('cseng-bench-'))
local blib = require('bench.lib')
local TLS = not opts.no_tls and FAKE == 'c' -- the Lua fake speaks plain HTTP only
-- a CA and certificate for the run's TLS servers, trusted by every client it runs (and by this
-- process, which reads the TLS fake's /stats)
local CERTS = TLS and blib.make_certs(fs.join(TMP, 'certs')) or nil
if CERTS then http.configure { ca_file = CERTS.ca } end
local PIN, NOPIN
if opts.no_pin then NOPIN = '--no-pin' else PIN, NOPIN = blib.pinning() end
-- argv with the role's pinning prefix (client or server) in front
local function pinned(role, argv)
  if not PIN then return argv end
  local out = {}
  for _, a in ipairs(PIN[role]) do out[#out + 1] = a end
  for _, a in ipairs(argv) do out[#out + 1] = a end
  return out
end

local function say(...)
  io.stderr:write('bench: ', string.format(...), '\n')
end

-- ---- processes ------------------------------------------------------------------------------

local commands, seen_cmd = {}, {}

-- Record a command line for the report once per kind, with temp paths and ports made generic.
local function note(kind, argv, env_add)
  local prefix = ''
  for k, v in pairs(env_add or {}) do prefix = prefix .. k .. '=' .. tostring(v) .. ' ' end
  if seen_cmd[prefix .. kind] then return end
  seen_cmd[prefix .. kind] = true
  local parts = {}
  for i, a in ipairs(argv) do
    if a == EXE then a = './cseng' end
    a = tostring(a):gsub(TMP:gsub('%p', '%%%0'), '$TMP'):gsub(ROOT:gsub('%p', '%%%0') .. '/', '')
    a = a:gsub('http://127%.0%.0%.1:%d+', '$URL')
    parts[i] = a:find('[%s"\'$]') and not a:find('^%$') and ("'" .. a .. "'") or a
  end
  commands[#commands + 1] = prefix .. table.concat(parts, ' ')
end

local function run(kind, argv, timeout, env_add)
  note(kind, argv, env_add)
  local r, err, code = proc.run { argv = argv, cwd = ROOT, timeout = timeout or 120, tail_bytes = 1 << 20, env_add = env_add }
  if not r then return nil, tostring(err) .. ' (' .. tostring(code) .. ')' end
  if r.timed_out then return nil, kind .. ': timed out', r end
  if r.code ~= 0 then return nil, kind .. ': exit ' .. r.code .. ': ' .. (r.stderr ~= '' and r.stderr or r.stdout):sub(-800), r end
  return r
end

local function read_json(path)
  local text = fs.read(path)
  if not text then return nil end
  local ok, v = pcall(cjson.decode, text)
  return ok and v or nil
end

local function first_line(s) return (tostring(s or ''):match('[^\n]*') or ''):gsub('%s+$', '') end

-- A command's output (wrk -v exits 1 after printing its version), or nil when it failed silently.
local function sh(argv)
  local r = proc.run { argv = argv, timeout = 20 }
  if not r then return nil end
  local out = r.stdout ~= '' and r.stdout or r.stderr
  if r.code ~= 0 and (out == '' or out:find('Error') or out:find('No module')) then return nil end
  return out
end

-- A free loopback port (bound, read, released: nginx needs a number in its config).
local function free_port()
  local s = assert(serve.listen { port = 0 })
  local p = s:port()
  s:close()
  return p
end

local function get_json(url)
  local r = http.request { url = url, timeout = 10 }
  if not r or r.status ~= 200 then return nil end
  return cjson.decode(r.body)
end

-- ---- the machine ----------------------------------------------------------------------------

local function cpu_busy(seconds)
  local function sample()
    local l = fs.read('/proc/stat'):match('^cpu%s+([^\n]+)')
    local v = {}
    for n in l:gmatch('%d+') do v[#v + 1] = tonumber(n) end
    local idle = v[4] + (v[5] or 0)
    local total = 0
    for _, x in ipairs(v) do total = total + x end
    return idle, total
  end
  local i0, t0 = sample()
  task.sleep(seconds)
  local i1, t1 = sample()
  if t1 == t0 then return nil end
  return 1 - (i1 - i0) / (t1 - t0)
end

local function machine()
  local m = {}
  local cpuinfo = fs.read('/proc/cpuinfo') or ''
  m.model = cpuinfo:match('model name%s*:%s*([^\n]+)') or '?'
  m.nproc = sys.cpu_count()
  local kb = tonumber((fs.read('/proc/meminfo') or ''):match('MemTotal:%s*(%d+)') or 0)
  m.mem_gib = kb / 1048576
  m.kernel = first_line(fs.read('/proc/sys/kernel/osrelease'))
  m.os = (fs.read('/etc/os-release') or ''):match('PRETTY_NAME="([^"]+)"') or '?'
  m.cseng_version = sh { EXE, '--version' } or '?'
  m.versions = sys.versions()
  m.wrk = first_line(sh { 'wrk', '-v' } or 'absent')
  m.nginx = first_line(sh { 'nginx', '-v' } or 'absent')
  m.python = first_line(sh { PY, '--version' } or 'absent')
  m.httpx = first_line(sh { PY, '-c', 'import httpx; print(httpx.__version__)' } or 'absent')
  m.perf = first_line(sh { 'perf', '--version' } or 'absent')
  m.loadavg_start = (fs.read('/proc/loadavg') or ''):match('^(%S+ %S+ %S+)')
  m.busy_before = cpu_busy(1)
  m.hostname = sys.hostname()
  return m
end

-- ---- statistics -------------------------------------------------------------------------------

-- median, min, max of a list of numbers (nil entries dropped)
local function agg(xs)
  local v = {}
  for _, x in pairs(xs) do if type(x) == 'number' and x == x then v[#v + 1] = x end end
  if #v == 0 then return nil end
  table.sort(v)
  return { med = stats.quantile_sorted(v, 0.5), min = v[1], max = v[#v], n = #v }
end

local PHASES = { 'create', 'exec', 'delete' }

-- Errors of one lifecycle run, in ms: against the fake's held time, against the nominal latency,
-- and the fake's own lateness (held - nominal).
local function lifecycle_summary(d)
  local held, nominal, late = {}, {}, {}
  local per_phase = {}
  for _, ph in ipairs(PHASES) do
    local m, h, nom = d.samples[ph] or {}, d.samples[ph .. '_held'] or {}, d.nominal_ns[ph]
    local ph_held = {}
    for i = 1, #m do
      nominal[#nominal + 1] = (m[i] - nom) / 1e6
      if h[i] and h[i] > 0 then
        local e = (m[i] - h[i]) / 1e6
        held[#held + 1] = e
        ph_held[#ph_held + 1] = e
        late[#late + 1] = (h[i] - nom) / 1e6
      end
    end
    local s = stats.summary(ph_held)
    per_phase[ph] = { n = s.n, p50 = s.p50, p99 = s.p99, max = s.max }
  end
  local function brief(xs)
    local s = stats.summary(xs)
    return { n = s.n, min = s.min, p50 = s.p50, p99 = s.p99, max = s.max, mean = s.mean }
  end
  -- the error's two parts and the loop wait (bench/client.lua's split, from the fake's X-Fake-Hold-From)
  local split
  for _, k in ipairs { 'way_there', 'way_back', 'resume' } do
    local v = {}
    for i, x in ipairs(d.samples[k] or {}) do v[i] = x / 1e6 end
    if #v > 0 then
      split = split or {}
      split[k] = brief(v)
    end
  end
  return { held = brief(held), nominal = brief(nominal), lateness = brief(late), per_phase = per_phase, split = split }, held
end

-- ---- the servers ------------------------------------------------------------------------------

local fake, fake_url, tls_fake, tls_url
local function start_fake()
  local argv
  local flags_ = { '--create-ms', NOMINAL.create, '--exec-ms', NOMINAL.exec, '--delete-ms', NOMINAL.delete }
  local prefix = PIN and PIN.server or nil
  if FAKE == 'c' then fake, fake_url, argv = blib.start_fake_c(TMP, flags_, prefix)
  else fake, fake_url, argv = blib.start_fake(EXE, TMP, flags_, prefix) end
  note('fake', argv)
  if TLS then -- the same fake over TLS, in its own process beside the plain one (one at a time is measured)
    local dir = fs.join(TMP, 'tls-fake')
    assert(fs.mkdir_p(dir))
    local tflags = { '--tls-cert', CERTS.cert, '--tls-key', CERTS.key }
    for _, a in ipairs(flags_) do tflags[#tflags + 1] = a end
    tls_fake, tls_url, argv = blib.start_fake_c(dir, tflags, prefix)
    note('fake-tls', argv)
  end
  return true
end

-- The measured client kinds: 'cseng' (plain HTTP/1.1), 'cseng-tls1' and 'cseng-tls2' (TLS with
-- HTTP/1.1 or HTTP/2 by ALPN), 'cseng-free' (plain, unpinned), 'python' (plain).
local TLS_VERSION = { ['cseng-tls1'] = '1.1', ['cseng-tls2'] = '2' }
local function fake_of(kind) return TLS_VERSION[kind] and tls_url or fake_url end

local nginx, nginx_url, nginx_tls_url, nginx_conf_text
local function start_nginx()
  if not proc.which('nginx') then return nil, 'nginx is not installed (apt-get install nginx-light)' end
  local dir = fs.join(TMP, 'nginx')
  assert(fs.mkdir_p(dir))
  local port = free_port()
  local tls_port = TLS and free_port() or nil
  local zero = "    location = /zero { default_type application/json; return 200 '{\"ok\":true}'; }"
  local lines = {
    'worker_processes 1;', 'daemon off;', 'pid ' .. dir .. '/nginx.pid;', 'error_log ' .. dir .. '/error.log warn;',
    'events { worker_connections 4096; }',
    'http {', '  access_log off;', '  client_body_temp_path ' .. dir .. '/body;', '  keepalive_requests 10000000;',
    '  http2_max_requests 10000000;',
    '  server {', '    listen 127.0.0.1:' .. port .. ' backlog=4096;', zero, '  }' }
  if tls_port then -- the same endpoint over TLS, HTTP/2 or HTTP/1.1 by ALPN, the run's certificate
    for _, l in ipairs { '  server {', '    listen 127.0.0.1:' .. tls_port .. ' ssl http2 backlog=4096;',
      '    ssl_certificate ' .. CERTS.cert .. ';', '    ssl_certificate_key ' .. CERTS.key .. ';', zero, '  }' } do
      lines[#lines + 1] = l
    end
  end
  lines[#lines + 1] = '}'
  lines[#lines + 1] = ''
  nginx_conf_text = table.concat(lines, '\n')
  assert(fs.write(dir .. '/nginx.conf', nginx_conf_text))
  local argv = pinned('server', { 'nginx', '-p', dir, '-c', dir .. '/nginx.conf', '-e', dir .. '/error.log' })
  note('nginx', argv)
  local p, err = proc.spawn { argv = argv, stdout = dir .. '/out.log', stderr = dir .. '/out.log' }
  if not p then return nil, err end
  nginx_url = 'http://127.0.0.1:' .. port
  nginx_tls_url = tls_port and ('https://127.0.0.1:' .. tls_port) or nil
  for _ = 1, 100 do
    local r = http.request { url = nginx_url .. '/zero', timeout = 2 }
    local t = not nginx_tls_url or http.request { url = nginx_tls_url .. '/zero', timeout = 2 }
    if r and r.status == 200 and t and (t == true or t.status == 200) then
      nginx = p
      return true
    end
    task.sleep(0.05)
  end
  p:close()
  return nil, 'nginx did not answer: ' .. tostring(fs.read(dir .. '/out.log'))
end

-- ---- the measurements -------------------------------------------------------------------------

local function wrk(url, c, seconds)
  if not proc.which('wrk') then return nil, 'wrk is not installed' end
  local r, err = run(url:match('^https') and 'wrk-tls' or 'wrk', pinned('client', { 'wrk', '-t1', '-c' .. c, '-d' .. seconds .. 's', url }),
    seconds + 30)
  if not r then return nil, err end
  local rate = tonumber(r.stdout:match('Requests/sec:%s*([%d%.]+)'))
  local errors = r.stdout:match('Non%-2xx or 3xx responses:%s*(%d+)') or r.stdout:match('Socket errors:[^\n]*')
  return { rate = rate, errors = errors, text = r.stdout }
end

-- h2load (Debian's nghttp2-client): one connection, `streams` requests in flight on it (HTTP/2
-- by ALPN), for `seconds`, one thread: the HTTP/2 reference.
local function h2load(url, streams, seconds)
  if not proc.which('h2load') then return nil, 'h2load is not installed (apt-get install nghttp2-client)' end
  local r, err = run('h2load', pinned('client', { 'h2load', '-c', '1', '-m', tostring(streams), '-t', '1', '-D',
    tostring(math.ceil(seconds)), url }), seconds + 30)
  if not r then return nil, err end
  local rate = tonumber(r.stdout:match('finished in [^,]+, ([%d%.]+) req/s'))
  local failed = tonumber(r.stdout:match('(%d+) failed'))
  return { rate = rate, errors = failed and failed > 0 and failed or nil, text = r.stdout }
end

local function client_argv(kind, url, c, mode, extra)
  local free = kind == 'cseng-free' or kind:match('%-free$') -- left to the scheduler (and the fake with it)
  local version = TLS_VERSION[kind:gsub('%-free$', '')]
  local cseng = kind:match('^cseng') ~= nil
  local common = { '--url', url, '--concurrency', c, '--warmup', WARMUP, '--duration', DURATION,
    '--create-ms', NOMINAL.create, '--exec-ms', NOMINAL.exec, '--delete-ms', NOMINAL.delete, '--mode', mode }
  local argv = cseng and { EXE, 'lua', fs.join(ROOT, 'bench/client.lua') } or { PY, fs.join(ROOT, 'bench/client.py') }
  for _, a in ipairs(common) do argv[#argv + 1] = tostring(a) end
  -- the connections it needs opened before the warm-up (TLS: 1,024 handshakes are no steady state)
  if cseng then argv[#argv + 1] = '--warm' end
  if version then
    for _, a in ipairs { '--ca', CERTS.ca, '--http-version', version } do argv[#argv + 1] = a end
  end
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = tostring(a) end
  return free and argv or pinned('client', argv)
end

local function run_client(kind, url, c, mode, env_add, tag, extra)
  local out = fs.join(TMP, string.format('%s%s-%s-%d.json', kind, tag and ('-' .. tag) or '', mode, c))
  fs.remove(out)
  local argv = client_argv(kind, url, c, mode, extra)
  argv[#argv + 1] = '--out'
  argv[#argv + 1] = out
  local r, err = run(kind .. '-' .. mode, argv, WARMUP + DURATION + 300, env_add)
  if not r then return nil, err end
  local d = read_json(out)
  if not d then return nil, kind .. ': no result file' end
  return d
end

local results = { stamp = STAMP, config = { reps = REPS, duration_s = DURATION, warmup_s = WARMUP, concurrency = CONC,
  nominal_ms = NOMINAL, raw_concurrency = RAW_C, tls = TLS, local_n = LOCAL_N, docker_n = DOCKER_N, clock_n = CLOCK_N, fake = FAKE,
  pinning = PIN and { client_cpu = PIN.client_cpu, server_cpu = PIN.server_cpu, cpus = PIN.cpus } or { none = NOPIN } } }
local charts = {} -- err_held samples of the last repetition, per client and concurrency
local clients = { 'cseng' }
if not opts.no_python then
  if sh { PY, '-c', 'import httpx' } then clients[2] = 'python'
  else results.python_missing = 'python3-httpx is not installed for ' .. PY end
end

-- 1 and 2: timing fidelity and throughput
-- With pinning, the cseng client also runs unpinned (cseng-free), the fake then unpinned too:
-- the placement's own effect, shown beside the pinned figures (which the targets use).
local fidelity_kinds = { 'cseng' }
if TLS then
  fidelity_kinds[#fidelity_kinds + 1] = 'cseng-tls1'
  fidelity_kinds[#fidelity_kinds + 1] = 'cseng-tls2'
end
if clients[2] then fidelity_kinds[#fidelity_kinds + 1] = clients[2] end
if PIN then fidelity_kinds[#fidelity_kinds + 1] = 'cseng-free' end

-- the fake on the servers' CPU, or on every CPU this process may use for an unpinned run
local function place_fake(free)
  if PIN then blib.place(PIN, fake:pid(), free) end
end

local function fidelity()
  results.fidelity = {}
  for rep = 1, REPS do
    for ci, c in ipairs(CONC) do
      local order = {}
      for i, k in ipairs(fidelity_kinds) do order[i] = k end
      if (rep + ci) % 2 == 0 then -- alternate the order
        for i = 1, #order // 2 do order[i], order[#order - i + 1] = order[#order - i + 1], order[i] end
      end
      for _, kind in ipairs(order) do
        place_fake(kind == 'cseng-free')
        local furl = fake_of(kind)
        get_json(furl .. '/stats?reset=1')
        local s0 = get_json(furl .. '/stats?reset=1')
        local d, err = run_client(kind, furl, c, 'lifecycle')
        local s1 = get_json(furl .. '/stats?reset=1')
        local rec = { client = kind, concurrency = c, rep = rep }
        if not d then
          rec.error = err
          say('%s c=%d rep %d: %s', kind, c, rep, err)
        else
          local sum, held = lifecycle_summary(d)
          rec.summary = sum
          rec.rate = d.rate
          rec.ideal = c / (PERIOD_MS / 1000)
          rec.completed, rec.requests, rec.failures, rec.first_error = d.completed, d.requests, d.failures, d.first_error
          rec.cpu_s, rec.cpu_per_request_us, rec.maxrss_kb = d.cpu_s, d.cpu_per_request_us, d.maxrss_kb
          if s0 and s1 then
            local wall = (s1.now_ns - s0.now_ns) / 1e9
            rec.fake = {
              cpu_s = (s1.user_s + s1.sys_s) - (s0.user_s + s0.sys_s), wall_s = wall,
              requests = s1.requests - s0.requests, peak_in_flight = s1.peak_in_flight, live_after = s1.live,
              not_found = s1.not_found - s0.not_found,
            }
            rec.fake.cores = rec.fake.cpu_s / wall
          end
          if rec.fake and d.fake_window and d.fake_window.requests > 0 then -- the window's alone (not the warm's handshakes)
            rec.fake.cpu_s, rec.fake.requests, rec.fake.wall_s = d.fake_window.cpu_s, d.fake_window.requests, d.fake_window.wall_s
            rec.fake.cores = d.fake_window.cpu_s / d.fake_window.wall_s
          end
          charts[kind .. '/' .. c] = held
          say('%-6s c=%-4d rep %d: %.0f lifecycles/s (ideal %.0f), error vs held p50 %.3f p99 %.3f ms, CPU %.1f us/req, RSS %.1f MiB',
            kind, c, rep, d.rate, rec.ideal, sum.held.p50 or -1, sum.held.p99 or -1, d.cpu_per_request_us or -1, d.maxrss_kb / 1024)
        end
        results.fidelity[#results.fidelity + 1] = rec
      end
    end
  end
  place_fake(false)
end

-- 3: raw request rate on the zero-latency endpoint
local function raw_rate()
  results.raw = {}
  local ok, err = start_nginx()
  results.raw_server = ok and 'nginx' or 'fake'
  if not ok then
    results.nginx_error = err
    say('nginx: %s; the raw rate uses the fake provider /zero instead', err)
  end
  local url = ok and nginx_url or fake_url
  local turl = ok and nginx_tls_url or tls_url -- over TLS: nginx, else the TLS fake's /zero
  results.raw_tls_server = TLS and (ok and 'nginx' or 'fake') or nil
  for rep = 1, REPS do
    local tools = { 'wrk', 'cseng', 'python' }
    if TLS then for _, t in ipairs { 'wrk-tls', 'cseng-tls1', 'h2load', 'cseng-tls2' } do tools[#tools + 1] = t end end
    for _ = 1, rep - 1 do table.insert(tools, 1, table.remove(tools)) end -- rotate the order
    local row = { rep = rep }
    for _, tool in ipairs(tools) do
      if tool == 'wrk' or tool == 'wrk-tls' then
        local w, werr = wrk((tool == 'wrk' and url or turl) .. '/zero', RAW_C, DURATION)
        row[tool] = w and { rate = w.rate, errors = w.errors } or { error = werr }
      elseif tool == 'h2load' then
        local w, werr = h2load(turl .. '/zero', RAW_C, DURATION)
        row.h2load = w and { rate = w.rate, errors = w.errors } or { error = werr }
      elseif tool == 'python' and not clients[2] then
        row.python = { error = results.python_missing or 'skipped' }
      else
        local d, derr = run_client(tool, TLS_VERSION[tool] and turl or url, RAW_C, 'raw')
        row[tool] = d and { rate = d.rate, cpu_per_request_us = d.cpu_per_request_us, failures = d.failures,
          first_error = d.first_error, maxrss_kb = d.maxrss_kb } or { error = derr }
      end
    end
    say('raw rep %d: wrk %.0f, cseng %.0f, python %.0f req/s; TLS: wrk %.0f, cseng/1.1 %.0f, h2load %.0f, cseng/2 %.0f',
      rep, row.wrk.rate or -1, row.cseng.rate or -1, row.python and row.python.rate or -1,
      row['wrk-tls'] and row['wrk-tls'].rate or -1, row['cseng-tls1'] and row['cseng-tls1'].rate or -1,
      row.h2load and row.h2load.rate or -1, row['cseng-tls2'] and row['cseng-tls2'].rate or -1)
    results.raw[#results.raw + 1] = row
  end
  -- the fake provider's own capacity, for the not-the-bottleneck argument
  local w = wrk(fake_url .. '/zero', RAW_C, DURATION)
  results.fake_capacity = w and { rate = w.rate, errors = w.errors } or nil
end

-- 8: the native path (engine/h1.c, engine/h2.c, the default) against libcurl (CSENG_HTTP=curl),
-- the same binary and client, alternating, plain and over TLS (HTTP/1.1, HTTP/2): lifecycles at
-- the highest concurrency, raw GETs beside the reference of the same repetition (wrk, wrk over
-- TLS, h2load)
local function paths()
  results.paths = {}
  local big = CONC[#CONC]
  local protos = { 'cseng' }
  if TLS then protos[2], protos[3] = 'cseng-tls1', 'cseng-tls2' end
  for rep = 1, REPS do
    for _, kind in ipairs(protos) do
      local raw_url = TLS_VERSION[kind] and (nginx_tls_url or tls_url) or (nginx_url or fake_url)
      local w
      if kind == 'cseng-tls2' then w = h2load(raw_url .. '/zero', RAW_C, DURATION)
      else w = wrk(raw_url .. '/zero', RAW_C, DURATION) end
      for _, path in ipairs(rep % 2 == 0 and { 'curl', 'native' } or { 'native', 'curl' }) do
        local env = path == 'curl' and { CSENG_HTTP = 'curl' } or nil
        local rec = { path = path, proto = kind, rep = rep, concurrency = big, wrk = w and w.rate }
        local d, derr = run_client(kind, fake_of(kind), big, 'lifecycle', env, path)
        if d then
          local sum = lifecycle_summary(d)
          rec.lifecycle = { rate = d.rate, share = d.rate / (big / (PERIOD_MS / 1000)), p50 = sum.held.p50,
            p99 = sum.held.p99, cpu_us = d.cpu_per_request_us, failures = d.failures, first_error = d.first_error,
            maxrss_kb = d.maxrss_kb }
        else
          rec.lifecycle = { error = derr }
        end
        local r, rerr = run_client(kind, raw_url, RAW_C, 'raw', env, path)
        rec.raw = r and { rate = r.rate, cpu_us = r.cpu_per_request_us, failures = r.failures } or { error = rerr }
        say('paths rep %d %-10s %-6s: c=%d %.1f%% of ideal, p99 %.2f ms, %.1f us/req; raw %.0f req/s (ref %.0f), %.1f us/req',
          rep, kind, path, big, (rec.lifecycle.share or 0) * 100, rec.lifecycle.p99 or -1, rec.lifecycle.cpu_us or -1,
          rec.raw.rate or -1, w and w.rate or -1, rec.raw.cpu_us or -1)
        results.paths[#results.paths + 1] = rec
      end
    end
  end
end

-- 9: a burst of creates over TLS (bench/burst.lua), timed as the arena's burst mode times them,
-- its connections warmed before the burst (http.warm, as the arena does) or cold (the idle ones
-- closed: each create opens or waits for its own, reported apart)
local BURST_N = QUICK and 200 or 1000
local function bursts()
  results.bursts = {}
  if not TLS then results.bursts_skipped = 'no TLS fake (--no-tls or --fake lua)' return end
  for rep = 1, REPS do
    for _, v in ipairs { '1.1', '2' } do
      for _, cold in ipairs { false, true } do
        local out = fs.join(TMP, 'burst.json')
        fs.remove(out)
        get_json(tls_url .. '/stats?reset=1')
        local argv = pinned('client', { EXE, 'lua', fs.join(ROOT, 'bench/burst.lua'), '--url', tls_url, '--burst',
          tostring(BURST_N), '--ca', CERTS.ca, '--http-version', v, '--out', out })
        if cold then argv[#argv + 1] = '--cold' end
        local _, err = run('burst', argv, 600)
        local d = read_json(out)
        local rec = { rep = rep, http_version = v, cold = cold, error = not d and (err or 'no result') or nil }
        if d then
          local e, there, back, hs = {}, {}, {}, {}
          for i, m in ipairs(d.samples.create) do
            local held = d.samples.held[i]
            if held and held > 0 then e[#e + 1] = (m - held) / 1e6 end
          end
          for _, x in ipairs(d.samples.way_there or {}) do there[#there + 1] = x / 1e6 end
          for _, x in ipairs(d.samples.way_back or {}) do back[#back + 1] = x / 1e6 end
          for _, x in ipairs(d.samples.handshake or {}) do hs[#hs + 1] = x / 1e6 end
          local se, st, sb, shs = stats.summary(e), stats.summary(there), stats.summary(back), stats.summary(hs)
          rec.n, rec.failures, rec.first_error, rec.seconds, rec.warm = #e, d.failures, d.first_error, d.seconds, d.warm
          rec.err = { p50 = se.p50, p99 = se.p99, max = se.max }
          rec.there_p99, rec.back_p99 = st.p99, sb.p99
          rec.handshakes, rec.waited = d.handshakes, #hs
          rec.handshake = #hs > 0 and { p50 = shs.p50, p99 = shs.p99 } or nil
          say('burst rep %d TLS/%s %s: %d creates, error p50 %.3f p99 %.3f ms, %d waited for a connection%s, %d failures',
            rep, v, cold and 'cold' or 'warm', #e, se.p50 or -1, se.p99 or -1, #hs,
            #hs > 0 and string.format(' (p50 %.1f ms)', shs.p50) or '', d.failures)
        else
          say('burst rep %d TLS/%s %s: %s', rep, v, cold and 'cold' or 'warm', tostring(err))
        end
        results.bursts[#results.bursts + 1] = rec
      end
    end
  end
end

-- 10: the client as several loops (bench/client.lua --loops N: N processes, merged), at the
-- highest concurrency over TLS, unpinned (the loops may use every CPU, the fake stays where it is)
local LOOPS = { 1, 2 }
local function loops()
  results.loops = {}
  if not TLS then results.loops_skipped = 'no TLS fake (--no-tls or --fake lua)' return end
  local big = CONC[#CONC]
  for rep = 1, REPS do
    for _, kind in ipairs { 'cseng-tls1', 'cseng-tls2' } do
      for _, n in ipairs(rep % 2 == 0 and { LOOPS[2], LOOPS[1] } or LOOPS) do
        local d, err = run_client(kind .. '-free', fake_of(kind), big, 'lifecycle', nil, 'loops' .. n, { '--loops', n })
        local rec = { rep = rep, proto = kind, loops = n }
        if d then
          local sum = lifecycle_summary(d)
          rec.rate, rec.share, rec.p99 = d.rate, d.rate / (big / (PERIOD_MS / 1000)), sum.held.p99
          rec.cpu_us, rec.failures, rec.maxrss_kb = d.cpu_per_request_us, d.failures, d.maxrss_kb
          say('loops rep %d %-10s %d loop(s): %.1f%% of ideal, p99 %.3f ms, %.1f us/req', rep, kind, n, rec.share * 100,
            rec.p99 or -1, rec.cpu_us or -1)
        else
          rec.error = err
          say('loops rep %d %-10s %d loop(s): %s', rep, kind, n, tostring(err))
        end
        results.loops[#results.loops + 1] = rec
      end
    end
  end
end

-- 3e: HTTP/2 calls per connection at 256 in flight (bench/client.lua --max-streams, the arena's
-- --h2-streams): answers that share a connection can share a read, and with it the kernel's
-- receive stamp of the newest bytes, so the error's tail grows with the calls a connection carries
local STREAMS = { 1, 4, 16, 100 }
local STREAMS_C = 256
local function streams()
  results.streams = {}
  if not TLS then results.streams_skipped = 'no TLS fake (--no-tls or --fake lua)' return end
  for rep = 1, REPS do
    local order = {}
    for i, s in ipairs(STREAMS) do order[rep % 2 == 0 and (#STREAMS - i + 1) or i] = s end
    for _, s in ipairs(order) do
      local d, err = run_client('cseng-tls2', tls_url, STREAMS_C, 'lifecycle', nil, 'streams' .. s, { '--max-streams', s })
      local rec = { rep = rep, streams = s }
      if d then
        local sum = lifecycle_summary(d)
        rec.share, rec.p50, rec.p99 = d.rate / (STREAMS_C / (PERIOD_MS / 1000)), sum.held.p50, sum.held.p99
        rec.way_back_p99 = sum.split and sum.split.way_back and sum.split.way_back.p99
        rec.cpu_us, rec.failures = d.cpu_per_request_us, d.failures
        say('streams rep %d: %3d a connection: p50 %.3f p99 %.3f ms, %.1f us/req', rep, s, rec.p50 or -1, rec.p99 or -1,
          rec.cpu_us or -1)
      else
        rec.error = err
        say('streams rep %d: %3d a connection: %s', rep, s, tostring(err))
      end
      results.streams[#results.streams + 1] = rec
    end
  end
end

-- 5: local provider and docker startup
local function docker_present()
  if opts.no_docker then return nil, 'skipped (--no-docker)' end
  if not fs.exists('/var/run/docker.sock') then return nil, 'no /var/run/docker.sock (dockerd is not running)' end
  local r = http.request { url = 'http://docker/_ping', unix_socket = '/var/run/docker.sock', timeout = 5 }
  if not r or r.status ~= 200 then return nil, '/var/run/docker.sock does not answer' end
  if not fs.exists(fs.join(ROOT, 'lua/providers/docker.lua')) then return nil, 'lua/providers/docker.lua does not exist yet' end
  if not proc.which('docker') then return nil, 'the docker CLI is not installed' end
  local img = http.request { url = 'http://docker/v1.41/images/cseng/debian:bookworm/json', unix_socket = '/var/run/docker.sock', timeout = 5 }
  if not img or img.status ~= 200 then return nil, 'the base image cseng/debian:bookworm is absent (tools/docker-up.sh builds it)' end
  return 'cseng/debian:bookworm'
end

local function startup()
  results.startup = {}
  local image, why = docker_present()
  results.docker_image, results.docker_skip = image, why
  local kinds = { { 'local', LOCAL_N } }
  if image then
    kinds[2] = { 'docker', DOCKER_N }
    kinds[3] = { 'docker-run', DOCKER_N }
  end
  for rep = 1, REPS do
    for _, k in ipairs(kinds) do
      local out = fs.join(TMP, 'startup-' .. k[1] .. '.json')
      fs.remove(out)
      local argv = { EXE, 'lua', fs.join(ROOT, 'bench/startup.lua'), '--provider', k[1], '--n', tostring(k[2]), '--out', out }
      if k[1] ~= 'local' then argv[#argv + 1] = '--image'; argv[#argv + 1] = image end
      local r, err = run('startup-' .. k[1], argv, 900)
      local d = r and read_json(out)
      local rec = { provider = k[1], rep = rep }
      if not d then rec.error = err or 'no result' else
        rec.failures, rec.first_error, rec.info = d.failures, d.first_error, d.info
        rec.samples = {}
        for name, v in pairs(d.samples) do
          local ms = {}
          for i, x in ipairs(v) do ms[i] = x / 1e6 end
          rec.samples[name] = ms
        end
      end
      say('startup %s rep %d: %s', k[1], rep, rec.error or string.format('ready p50 %.2f ms', stats.median(rec.samples.ready) or -1))
      results.startup[#results.startup + 1] = rec
    end
  end
end

-- 7: a Modal burst (gRPC over HTTP/2 against spec/providers/modal): errors per run, no retry
local MODAL_RUNS, MODAL_BURST = QUICK and 1 or 5, 100
local function modal_burst()
  local why = opts.no_modal and 'skipped (--no-modal)' or (not proc.which('node') and 'node is not installed (make deps-test)')
  if why then
    results.modal, results.modal_tls = { skipped = why }, { skipped = why }
    return
  end
  local kinds = { false, true } -- gRPC with prior knowledge, then over TLS (ALPN), as Modal's
  if opts.no_tls then kinds, results.modal_tls = { false }, { skipped = 'skipped (--no-tls)' } end
  for _, tls in ipairs(kinds) do
    local out = fs.join(TMP, 'modal.json')
    fs.remove(out)
    local argv = { EXE, 'lua', fs.join(ROOT, 'bench/modal_burst.lua'), '--runs', tostring(MODAL_RUNS),
      '--burst', tostring(MODAL_BURST), '--out', out }
    if tls then argv[#argv + 1] = '--tls' end
    local _, err = run(tls and 'modal-burst-tls' or 'modal-burst', argv, 1800)
    local d = read_json(out)
    local rec = d and { runs = d, burst = MODAL_BURST } or { skipped = 'did not run: ' .. tostring(err) }
    if tls then results.modal_tls = rec else results.modal = rec end
  end
end

-- 0: the machine's own wake-up latency (cyclictest, rt-tests): a thread on the clients' CPU,
-- SCHED_OTHER like every process here, sleeps 200 us at a time and records how late it woke; the
-- machine's idle states are left as the bench finds them (--laptop: cyclictest does not hold
-- /dev/cpu_dma_latency at 0). At low load every call a client times when its thread wakes holds
-- two such wake-ups (the fake's to read the request, the client's to read the answer), the floor
-- under its error; cseng's calls end at the kernel's receive stamp and the C fake holds from its
-- own, so neither wake-up is in cseng's error.
local function wake_floor()
  if not proc.which('cyclictest') then
    results.floor = { skipped = 'cyclictest is not installed (apt-get install rt-tests; make deps-bench)' }
    return
  end
  results.floor = {}
  for rep = 1, REPS do
    local argv = { 'cyclictest', '-q', '-t1', '-i', '200', '-D', tostring(math.ceil(DURATION)), '-h', '20000',
      '--policy=other', '--laptop' }
    if PIN then
      argv[#argv + 1] = '-a'
      argv[#argv + 1] = tostring(PIN.client_cpu)
    end
    local r, err = run('cyclictest', argv, DURATION + 60)
    local rec = { rep = rep }
    if not r then rec.error = err else
      local counts, n, overflow = {}, 0, tonumber(r.stdout:match('# Histogram Overflows:%s*(%d+)')) or 0
      for us, c in r.stdout:gmatch('\n(%d+)%s+(%d+)') do
        c = tonumber(c)
        if c > 0 then
          counts[#counts + 1] = { tonumber(us), c }
          n = n + c
        end
      end
      n = n + overflow
      local function q(p)
        local want, acc = math.ceil(p * n), 0
        for _, b in ipairs(counts) do
          acc = acc + b[2]
          if acc >= want then return b[1] / 1000 end
        end
        return 20 -- in the overflow: 20 ms or more
      end
      if n > 0 then
        rec.n, rec.p50, rec.p99, rec.p999 = n, q(0.5), q(0.99), q(0.999)
        rec.max = (tonumber(r.stdout:match('# Max Latencies:%s*(%d+)')) or 0) / 1000
      else
        rec.error = 'cyclictest printed no histogram'
      end
    end
    say('wake-up floor rep %d: %s', rep, rec.error or string.format('p50 %.3f p99 %.3f p99.9 %.3f max %.3f ms', rec.p50, rec.p99, rec.p999, rec.max))
    results.floor[#results.floor + 1] = rec
  end
end

-- 6: clock cost, idle RSS
local function micro()
  results.micro = {}
  for rep = 1, REPS do
    local out = fs.join(TMP, 'micro.json')
    local r, err = run('micro', { EXE, 'lua', fs.join(ROOT, 'bench/micro.lua'), '--n', tostring(CLOCK_N), '--out', out }, 300)
    results.micro[rep] = r and read_json(out) or { error = err }
  end
  local py = sh { PY, '-c', [[
import time
n = 2000000
f = time.perf_counter_ns
t0 = f()
for _ in range(n): f()
t1 = f()
for _ in range(n): pass
t2 = f()
print((t1 - t0) / n, (t2 - t1) / n)]] }
  if py then
    local a, b = py:match('([%d%.]+)%s+([%d%.]+)')
    results.python_clock = { ns_per_call = tonumber(a), loop_ns = tonumber(b) }
  end
end

-- The profile that explains the client's CPU: perf (software clock) on the cseng client at the
-- highest concurrency, and the system calls per request (strace -c) of the raw client.
local function profile()
  results.profile = {}
  if opts.no_profile then results.profile.skipped = '--no-profile' return end
  local c = CONC[#CONC]
  if proc.which('perf') then
    local data = fs.join(TMP, 'perf.data')
    local out = fs.join(TMP, 'perf-client.json')
    local argv = { 'perf', 'record', '-F', '1999', '-g', '-o', data, '--' }
    for _, a in ipairs(client_argv('cseng', fake_url, c, 'lifecycle')) do argv[#argv + 1] = a end
    argv[#argv + 1] = '--out'
    argv[#argv + 1] = out
    local r, err = run('perf', argv, DURATION + WARMUP + 120)
    if r then
      local function rep(sort)
        local rr = proc.run { argv = { 'perf', 'report', '-i', data, '--no-children', '--sort', sort, '--stdio', '-g', 'none',
          '--percent-limit', '0.7' }, timeout = 120 }
        if not rr then return nil end
        local lines = {}
        for l in rr.stdout:gmatch('[^\n]+') do
          if not l:find('^#') and l:find('%%') then lines[#lines + 1] = l:gsub('%s+$', '') end
        end
        return lines
      end
      results.profile.perf_dso = rep('dso')
      results.profile.perf_sym = rep('dso,sym')
      results.profile.perf_concurrency = c
    else
      results.profile.perf_error = err
    end
  else
    results.profile.perf_error = 'perf is not installed'
  end
  if proc.which('strace') then
    local out = fs.join(TMP, 'strace-client.json')
    local sfile = fs.join(TMP, 'strace.txt')
    local argv = { 'strace', '-f', '-c', '-o', sfile }
    for _, a in ipairs(client_argv('cseng', nginx_url or fake_url, RAW_C, 'raw')) do argv[#argv + 1] = a end
    argv[#argv + 1] = '--out'
    argv[#argv + 1] = out
    local r = run('strace', argv, DURATION + WARMUP + 120)
    local d = r and read_json(out)
    local text = fs.read(sfile)
    if d and text and d.total_requests - d.failures > 0 then
      local rows = {}
      for calls, errors, name in text:gmatch('\n%s*[%d%.]+%s+[%d%.]+%s+%d+%s+(%d+)%s+(%d*)%s*([%w_]+)') do
        if name ~= 'total' then rows[#rows + 1] = { name = name, calls = tonumber(calls), errors = tonumber(errors) or 0 } end
      end
      table.sort(rows, function(a, b) return a.calls > b.calls end)
      results.profile.syscalls = { requests = d.total_requests - d.failures, failures = d.failures, rows = rows }
    end
  end
end

-- ---- the report -------------------------------------------------------------------------------

local h = report_render.context(OUTPUT)
local function ms(v) return h.ms(v) end
local function range(a, fmt)
  fmt = fmt or ms
  if not a then return '–' end
  if a.n == 1 then return fmt(a.med) end
  return string.format('%s (%s–%s)', fmt(a.med), fmt(a.min), fmt(a.max))
end
local function int(v) return v and string.format('%.0f', v) or '–' end
local function x2(v) return v and string.format('%.2f×', v) or '–' end
local function mib(v) return v and string.format('%.1f', v / 1024) or '–' end

local function fid(kind, c)
  local out = {}
  for _, r in ipairs(results.fidelity or {}) do
    if r.client == kind and r.concurrency == c and r.summary then out[#out + 1] = r end
  end
  return out
end
local function pick(list, f)
  local v = {}
  for _, r in ipairs(list) do v[#v + 1] = f(r) end
  return agg(v)
end

local V = {}

local function render_machine(m)
  local v = m.versions
  local rows = {
    { 'CPU', string.format('%d × %s', m.nproc, m.model) },
    { 'memory', string.format('%.1f GiB', m.mem_gib) },
    { 'kernel / OS', m.kernel .. ' / ' .. m.os },
    { 'cseng', (m.cseng_version:gsub('\n', ', '):gsub(', $', '')) },
    { 'libraries', string.format('%s, libcurl %s, libuv %s, %s, %s', v.lua, v.libcurl, v.libuv, v.openssl, v.malloc) },
    { 'wrk', m.wrk }, { 'nginx', m.nginx }, { 'python / httpx', m.python .. ' / httpx ' .. m.httpx }, { 'perf', m.perf },
    { 'load average (1, 5, 15 min) at start / end', m.loadavg_start .. ' / ' .. (m.loadavg_end or '?') },
    { 'machine busy in the second before the run', m.busy_before and h.pct(m.busy_before) or '?' },
  }
  return h.table({ 'what', 'value' }, rows, 'll')
end

local function targets_and_render()
  local big = CONC[#CONC]
  local cs_big = fid('cseng', big)
  local err_p99 = pick(cs_big, function(r) return r.summary.held.p99 end)
  local err_nom_p99 = pick(cs_big, function(r) return r.summary.nominal.p99 end)
  local thr = pick(cs_big, function(r) return r.rate / r.ideal end)
  local rss = pick(cs_big, function(r) return r.maxrss_kb end)
  local ratio_wrk = pick(results.raw or {}, function(r) return r.cseng.rate and r.wrk.rate and r.cseng.rate / r.wrk.rate end)
  local local_ready = {}
  for _, s in ipairs(results.startup or {}) do
    if s.provider == 'local' and s.samples then local_ready[#local_ready + 1] = stats.median(s.samples.ready) end
  end
  local lr = agg(local_ready)
  local function verdict(ok) if ok == nil then return 'not measured' end return ok and '**met**' or '**missed**' end
  -- a bound that must hold and a goal beyond it
  local function verdict2(v, within)
    if not v then return 'not measured' end
    if within(v.goal) then return '**met** (the goal too)' end
    return within(v.bound) and '**met** (the bound; the goal is missed)' or '**missed**'
  end
  local mid = 256
  local err_mid = pick(fid('cseng', mid), function(r) return r.summary.held.p99 end)
  local rows = {
    { string.format('timing error p99 at %d lifecycles (vs the fake\'s held time)', big), '≤ 5 ms (goal ≤ 1 ms)', range(err_p99) .. ' ms',
      verdict2(err_p99 and { bound = 5, goal = 1 }, function(x) return err_p99.med <= x end) },
    { string.format('timing error p99 at %d lifecycles (vs nominal latency)', big), '≤ 5 ms (goal ≤ 1 ms)', range(err_nom_p99) .. ' ms',
      verdict2(err_nom_p99 and { bound = 5, goal = 1 }, function(x) return err_nom_p99.med <= x end) },
    { string.format('timing error p99 at %d lifecycles (vs the fake\'s held time)', mid), '≤ 1 ms', range(err_mid) .. ' ms',
      verdict(err_mid and err_mid.med <= 1) },
    { string.format('throughput at %d lifecycles', big), '≥ 90% of ideal (goal ≥ 95%)', range(thr, h.pct),
      verdict2(thr and { bound = 0.90, goal = 0.95 }, function(x) return thr.med >= x end) },
    { 'raw request rate, 64 connections', '≥ 0.4× wrk', range(ratio_wrk, x2), verdict(ratio_wrk and ratio_wrk.med >= 0.4) },
    { string.format('peak RSS, %d in flight', big), '≤ 100 MiB', range(rss and { med = rss.med / 1024, min = rss.min / 1024,
      max = rss.max / 1024, n = rss.n }, function(x) return string.format('%.1f', x) end) .. ' MiB', verdict(rss and rss.med <= 100 * 1024) },
    { 'local provider create→first exec p50', '≤ 15 ms', range(lr) .. ' ms', verdict(lr and lr.med <= 15) },
  }
  -- over TLS (HTTP/1.1 and HTTP/2 by ALPN), each against plain's figure of the same concurrency
  if TLS then
    local raw = results.raw or {}
    for _, kind in ipairs { 'cseng-tls1', 'cseng-tls2' } do
      local name = kind == 'cseng-tls1' and 'TLS/1.1' or 'TLS/2'
      local tb = fid(kind, big)
      local t_thr = pick(tb, function(r) return r.rate / r.ideal end)
      local t_p99 = pick(tb, function(r) return r.summary.held.p99 end)
      local t_mid = pick(fid(kind, mid), function(r) return r.summary.held.p99 end)
      local t_rss = pick(tb, function(r) return r.maxrss_kb end)
      local goal_thr = thr and string.format(' (goal ≥ %s: within 10%% of plain)', h.pct(thr.med * 0.9)) or ''
      local goal_p99 = err_p99 and string.format(' (goal ≤ %s ms: within 10%% of plain)', ms(err_p99.med * 1.1)) or ''
      -- the bound must hold; the goal (within 10% of plain's figure) is said beside it
      local function both_ok(bound_ok, goal_ok)
        if bound_ok == nil then return 'not measured' end
        if not bound_ok then return '**missed**' end
        return goal_ok and '**met** (the goal too)' or '**met** (the bound; the goal is missed)'
      end
      rows[#rows + 1] = { string.format('%s: throughput at %d lifecycles', name, big), '≥ 90% of ideal' .. goal_thr,
        range(t_thr, h.pct), both_ok(t_thr and t_thr.med >= 0.90, t_thr and thr and t_thr.med >= thr.med * 0.9) }
      rows[#rows + 1] = { string.format('%s: timing error p99 at %d lifecycles (vs held)', name, big), '≤ 1 ms' .. goal_p99,
        range(t_p99) .. ' ms', both_ok(t_p99 and t_p99.med <= 1, t_p99 and err_p99 and t_p99.med <= err_p99.med * 1.1) }
      rows[#rows + 1] = { string.format('%s: timing error p99 at %d lifecycles (vs held)', name, mid), '≤ 0.1 ms',
        range(t_mid) .. ' ms', verdict(t_mid and t_mid.med <= 0.1) }
      if kind == 'cseng-tls2' then -- the same over a connection per call (--h2-streams 1, section 3e)
        local one = {}
        for _, r in ipairs(results.streams or {}) do if r.streams == 1 and r.p99 then one[#one + 1] = r end end
        local o_p99 = pick(one, function(r) return r.p99 end)
        rows[#rows + 1] = { string.format('TLS/2, a connection per call (--h2-streams 1): timing error p99 at %d lifecycles (vs held)',
          STREAMS_C), '≤ 0.1 ms', range(o_p99) .. ' ms', verdict(o_p99 and o_p99.med <= 0.1) }
      end
      rows[#rows + 1] = { string.format('%s: peak RSS, %d in flight', name, big), '≤ 100 MiB',
        range(t_rss and { med = t_rss.med / 1024, min = t_rss.min / 1024, max = t_rss.max / 1024, n = t_rss.n },
          function(x) return string.format('%.1f', x) end) .. ' MiB', verdict(t_rss and t_rss.med <= 100 * 1024) }
    end
    local r1 = pick(raw, function(r) return r['cseng-tls1'] and r['wrk-tls'] and r['cseng-tls1'].rate and r['wrk-tls'].rate
      and r['cseng-tls1'].rate / r['wrk-tls'].rate end)
    local r2 = pick(raw, function(r) return r['cseng-tls2'] and r.h2load and r['cseng-tls2'].rate and r.h2load.rate
      and r['cseng-tls2'].rate / r.h2load.rate end)
    rows[#rows + 1] = { 'TLS/1.1: raw request rate, 64 connections', '≥ 1× wrk https://', range(r1, x2), verdict(r1 and r1.med >= 1) }
    rows[#rows + 1] = { 'TLS/2: raw request rate, 64 streams', '≥ 1× h2load', range(r2, x2), verdict(r2 and r2.med >= 1) }
    for _, v in ipairs { '1.1', '2' } do
      local warm = {}
      for _, b in ipairs(results.bursts or {}) do if b.http_version == v and not b.cold and b.err then warm[#warm + 1] = b end end
      local bp = pick(warm, function(b) return b.err.p99 end)
      local waited = pick(warm, function(b) return b.waited end)
      rows[#rows + 1] = { string.format('TLS/%s: burst of %d creates, warmed connections: create error p99 (vs held)', v, BURST_N),
        '≤ 1 ms, no create waits for a connection', range(bp) .. ' ms' .. (waited and string.format(', %d waited', waited.max) or ''),
        verdict(bp and bp.med <= 1 and waited and waited.max == 0) }
      local cold = {}
      for _, b in ipairs(results.bursts or {}) do if b.http_version == v and b.cold and b.err then cold[#cold + 1] = b end end
      local hp = pick(cold, function(b) return b.handshake and b.handshake.p50 end)
      rows[#rows + 1] = { string.format('TLS/%s: the same burst, --cold-connections', v), 'the handshake reported apart',
        hp and (range(pick(cold, function(b) return b.waited end), int) .. ' creates waited, p50 ' .. range(hp) .. ' ms') or '–',
        verdict(hp ~= nil) }
    end
    local mt = results.modal_tls
    if mt and mt.runs then
      local bad = 0
      for _, r in ipairs(mt.runs) do if r.errors > 0 then bad = bad + 1 end end
      rows[#rows + 1] = { string.format('Modal burst of %d over TLS', MODAL_BURST), string.format('0 errors, %d runs in a row', #mt.runs),
        string.format('%d of %d runs with errors', bad, #mt.runs), verdict(bad == 0) }
    end
  end
  V.targets = h.table({ 'target', 'goal', 'measured: median (min–max) over runs', 'verdict' }, rows, 'llll')
  -- what the timing error no longer holds (item 14): said beside the targets, not hidden in figure 1b
  local wait_big = pick(cs_big, function(r) return r.summary.split and r.summary.split.resume and r.summary.split.resume.p99 end)
  V.loop_wait = wait_big and string.format('The timing error is what cseng records: a call ends when its answer arrived ' ..
    '(`clock.answered()`, item 14). The wait of an arrived answer for the client\'s busy loop is not in it; at %d in ' ..
    'flight its p99 was %s ms (figure 1b), and it is in throughput: each lifecycle\'s next call starts that much later.',
    big, range(wait_big)) or ''


  -- the machine's wake-up floor (cyclictest) beside the targets
  local fl = results.floor or {}
  local fp99 = pick(fl, function(r) return r.p99 end)
  if fl.skipped or not fp99 then
    V.floor = 'The machine\'s own wake-up latency was not measured: ' .. tostring(fl.skipped or (fl[1] and fl[1].error) or 'no result') .. '.'
  else
    V.floor = string.format('The machine\'s own wake-up latency on the clients\' CPU%s (`cyclictest`, one SCHED_OTHER ' ..
      'thread sleeping 200 µs at a time, idle states as found, %s s per repetition): p50 %s, **p99 %s**, p99.9 %s, ' ..
      'max %s ms. Where the processes sleep between answers (low load), a call timed until the client\'s thread ' ..
      'wakes (the Python client) holds two such wake-ups (the fake\'s, to read the request, and the client\'s, to ' ..
      'read the answer), so its timing error cannot be below this floor on this machine. cseng\'s calls end at the ' ..
      'kernel\'s receive stamp of the answer and the C fake holds from its own of the request (item 14), so neither ' ..
      'wake-up is in cseng\'s error; the client\'s wake-up is in its loop wait (the split under figure 1).',
      PIN and (' (CPU ' .. PIN.client_cpu .. ')') or '', tostring(math.ceil(DURATION)),
      range(pick(fl, function(r) return r.p50 end)), range(fp99), range(pick(fl, function(r) return r.p999 end)),
      range(pick(fl, function(r) return r.max end)))
  end

  -- Figure 1: timing fidelity
  local f1 = {}
  local LABELS = { cseng = 'cseng, plain', ['cseng-tls1'] = 'cseng, TLS/1.1', ['cseng-tls2'] = 'cseng, TLS/2',
    ['cseng-free'] = 'cseng, plain, unpinned' }
  local function label(kind) return LABELS[kind] or kind end
  for _, c in ipairs(CONC) do
    for _, kind in ipairs(fidelity_kinds) do
      local l = fid(kind, c)
      if #l > 0 then
        f1[#f1 + 1] = { c, label(kind), int((pick(l, function(r) return r.summary.held.n end) or {}).med),
          range(pick(l, function(r) return r.summary.held.p50 end)),
          range(pick(l, function(r) return r.summary.held.p99 end)),
          range(pick(l, function(r) return r.summary.held.max end)),
          range(pick(l, function(r) return r.summary.nominal.p50 end)),
          range(pick(l, function(r) return r.summary.nominal.p99 end)),
          range(pick(l, function(r) return r.summary.lateness.p99 end)) }
      end
    end
  end
  V.fig1 = h.table({ 'lifecycles in flight', 'client', 'calls/run', 'error p50', 'error p99', 'error max',
    'vs nominal p50', 'vs nominal p99', 'fake lateness p99' }, f1, 'rlrrrrrrr')
  local f1b = {}
  for _, c in ipairs(CONC) do
    for _, kind in ipairs { 'cseng', 'cseng-tls1', 'cseng-tls2' } do
      local l = {}
      for _, r in ipairs(fid(kind, c)) do if r.summary.split then l[#l + 1] = r end end
      if #l > 0 then
        local function part(k, q) return range(pick(l, function(r) return r.summary.split[k] and r.summary.split[k][q] end)) end
        f1b[#f1b + 1] = { c, label(kind), range(pick(l, function(r) return r.summary.held.p99 end)),
          part('way_there', 'p50'), part('way_there', 'p99'), part('way_back', 'p50'), part('way_back', 'p99'),
          part('resume', 'p50'), part('resume', 'p99') }
      end
    end
  end
  V.fig1b = #f1b == 0 and '(not measured: the fake sent no X-Fake-Hold-From)' or
    h.table({ 'lifecycles in flight', 'client', 'error p99', 'way there p50', 'way there p99', 'way back p50', 'way back p99',
      'loop wait p50 (not in the error)', 'loop wait p99' }, f1b, 'rlrrrrrrr')
  local series = {}
  local colors = { cseng = '#0072B2', ['cseng-free'] = '#009E73', python = '#D55E00', ['cseng-tls1'] = '#CC79A7',
    ['cseng-tls2'] = '#E69F00' }
  for _, c in ipairs(CONC) do
    for _, kind in ipairs(fidelity_kinds) do
      local v = charts[kind .. '/' .. c]
      if v then
        local clamped = {}
        for i, x in ipairs(v) do clamped[i] = math.max(x, 0.01) end
        series[#series + 1] = { name = label(kind) .. ' ' .. c, values = clamped, color = colors[kind] }
      end
    end
  end
  V.fig1_chart = #series > 0 and h.chart('timing-error', h.svg.box(series, {
    title = 'Measured minus held time per call (last repetition)', xlabel = 'ms (log scale; values below 0.01 ms drawn at 0.01)',
    log = true }), 'timing error per call, box p25-p75, whiskers p5-p95, dots min and max') or ''

  -- Figure 2: throughput
  local f2 = {}
  for _, c in ipairs(CONC) do
    for _, kind in ipairs(fidelity_kinds) do
      local l = fid(kind, c)
      if #l > 0 and kind ~= 'cseng-free' then
        f2[#f2 + 1] = { c, label(kind), int(c / (PERIOD_MS / 1000)), range(pick(l, function(r) return r.rate end), int),
          range(pick(l, function(r) return r.rate / r.ideal end), h.pct),
          range(pick(l, function(r) return r.cpu_per_request_us end), function(x) return string.format('%.1f', x) end),
          range(pick(l, function(r) return r.fake and r.fake.cores end), function(x) return string.format('%.2f', x) end),
          range(pick(l, function(r) return r.fake and r.fake.requests > 0 and r.fake.cpu_s / r.fake.requests * 1e6 end), int),
          int((pick(l, function(r) return r.fake and r.fake.peak_in_flight end) or {}).max) }
      end
    end
  end
  V.fig2 = h.table({ 'lifecycles in flight', 'client', 'ideal lifecycles/s', 'lifecycles/s', '% of ideal', 'client CPU µs/request',
    'fake CPU (cores)', 'fake CPU µs/request', 'fake peak requests in flight' }, f2, 'rlrrrrrrr')

  -- Figure 3: raw request rate
  local raw = results.raw or {}
  local function rate(tool) return pick(raw, function(r) return r[tool] and r[tool].rate end) end
  local function cpu(tool) return pick(raw, function(r) return r[tool] and r[tool].cpu_per_request_us end) end
  local f3 = {
    { 'wrk -t1 -c64', range(rate('wrk'), int), '1', '–' },
    { 'cseng (64 tasks, one loop)', range(rate('cseng'), int), range(ratio_wrk, x2), range(cpu('cseng'), function(x) return string.format('%.1f', x) end) },
    { 'python (64 threads, one httpx.Client)', range(rate('python'), int),
      range(pick(raw, function(r) return r.python and r.python.rate and r.wrk.rate and r.python.rate / r.wrk.rate end), x2),
      range(cpu('python'), function(x) return string.format('%.0f', x) end) },
  }
  if TLS then
    local function us(tool) return range(cpu(tool), function(x) return string.format('%.1f', x) end) end
    local function ratio(a, b)
      return range(pick(raw, function(r) return r[a] and r[b] and r[a].rate and r[b].rate and r[a].rate / r[b].rate end), x2)
    end
    f3[#f3 + 1] = { 'wrk -t1 -c64, https:// (TLS, HTTP/1.1)', range(rate('wrk-tls'), int), '1 (TLS reference)', '–' }
    f3[#f3 + 1] = { 'cseng, TLS/1.1 (64 tasks, one loop)', range(rate('cseng-tls1'), int), ratio('cseng-tls1', 'wrk-tls') ..
      ' of wrk https://', us('cseng-tls1') }
    f3[#f3 + 1] = { 'h2load -c1 -m64 (TLS, HTTP/2, 64 streams)', range(rate('h2load'), int), '1 (HTTP/2 reference)', '–' }
    f3[#f3 + 1] = { 'cseng, TLS/2 (64 tasks, one loop)', range(rate('cseng-tls2'), int), ratio('cseng-tls2', 'h2load') ..
      ' of h2load', us('cseng-tls2') }
  end
  V.fig3 = h.table({ 'client', 'requests/s', 'ratio to the reference (same repetition)', 'client CPU µs/request' }, f3)
  V.raw_tls_server = results.raw_tls_server == 'nginx' and
    'The TLS rows: the same nginx, a second listener with the run\'s certificate (`ssl http2`: HTTP/2 or HTTP/1.1 by ALPN).'
    or results.raw_tls_server == 'fake' and 'The TLS rows: the TLS fake\'s `/zero` (nginx was unavailable).' or ''
  V.cseng_vs_python_raw = range(pick(raw, function(r) return r.python and r.python.rate and r.cseng.rate and r.cseng.rate / r.python.rate end), x2)
  V.raw_server = results.raw_server == 'nginx' and 'nginx (1 worker, `return 200`)' or
    ('the fake provider (nginx was unavailable: ' .. tostring(results.nginx_error) .. ')')
  V.nginx_conf = nginx_conf_text or '(nginx not used)'
  V.fake_capacity = results.fake_capacity and int(results.fake_capacity.rate) or '–'

  -- not the bottleneck
  local max_client_rps = 0
  for _, r in ipairs(results.fidelity or {}) do
    if r.rate and r.fake then max_client_rps = math.max(max_client_rps, r.fake.requests / r.fake.wall_s) end
  end
  V.max_client_rps = int(max_client_rps)
  V.fake_headroom = results.fake_capacity and results.fake_capacity.rate and max_client_rps > 0 and
    string.format('%.1f×', results.fake_capacity.rate / max_client_rps) or '–'
  -- whether it is: its cores and CPU per request at each concurrency (a loop at ~0.8 core and more
  -- is saturated: it cannot answer faster, and what the client measures there is the fake's limit)
  local lines, saturated = {}, {}
  for _, c in ipairs(CONC) do
    local cores, per = {}, {}
    for _, r in ipairs(results.fidelity or {}) do
      if r.client == 'cseng' and r.concurrency == c and r.fake and r.fake.requests > 0 then
        cores[#cores + 1] = r.fake.cores
        per[#per + 1] = r.fake.cpu_s / r.fake.requests * 1e6
      end
    end
    local ca, pa = agg(cores), agg(per)
    if ca then
      lines[#lines + 1] = string.format('%d in flight: %.2f of a core, %.0f µs per request', c, ca.med, pa.med)
      if ca.med >= 0.8 then saturated[#saturated + 1] = tostring(c) end
    end
  end
  V.fake_verdict = #lines == 0 and 'Its CPU was not measured.' or
    ('Its own CPU during the cseng runs (`getrusage` through `/stats`, median): ' .. table.concat(lines, '; ') .. '. ' ..
      (#saturated == 0 and 'Its loop is never saturated: it is not the bottleneck of any figure below.' or
        ('**At ' .. table.concat(saturated, ', ') .. ' in flight it is the bottleneck**: its one loop is at a whole core, ' ..
          'so it cannot answer faster, and the throughput and timing error measured there are its limit as much as the ' ..
          'client\'s (with the client beside it, the two processes need more than the machine\'s two cores).')))
  local bad = 0
  for _, r in ipairs(results.fidelity or {}) do
    if r.fake and (r.fake.live_after ~= 0 or r.fake.not_found ~= 0) then bad = bad + 1 end
    if (r.failures or 0) > 0 or r.error then bad = bad + 1 end
  end
  V.lifecycle_failures = bad == 0 and 'none: every sandbox created was deleted, no call failed' or
    (bad .. ' runs had failures or leftover sandboxes (see the JSON)')
  V.adapter_check = results.adapter_check or '–'

  -- Figure 4: memory
  local f4 = {}
  for _, kind in ipairs(fidelity_kinds) do
    local l = fid(kind, big)
    local a = pick(l, function(r) return r.maxrss_kb end)
    f4[#f4 + 1] = { label(kind), a and range({ med = a.med, min = a.min, max = a.max, n = a.n }, mib) or '–',
      int((pick(l, function(r) return r.fake and r.fake.peak_in_flight end) or {}).max) }
  end
  local idle = pick(results.micro or {}, function(r) return r.idle_maxrss_kb end)
  V.fig4 = h.table({ 'client', string.format('peak RSS (MiB), %d lifecycles in flight', big), 'fake peak requests in flight' }, f4)
  V.idle_rss = idle and mib(idle.med) or '–'

  -- Figure 5: startup
  local f5 = {}
  for _, p in ipairs({ 'local', 'docker', 'docker-run' }) do
    local runs, pooled = {}, { create = {}, exec = {}, ready = {}, destroy = {} }
    for _, s in ipairs(results.startup or {}) do
      if s.provider == p and s.samples then
        runs[#runs + 1] = s
        for k, v in pairs(s.samples) do for _, x in ipairs(v) do table.insert(pooled[k], x) end end
      end
    end
    if #runs > 0 then
      local function per(k, q) return pick(runs, function(s) return #s.samples[k] > 0 and stats.quantile(s.samples[k], q) or nil end) end
      local fails = 0
      for _, s in ipairs(runs) do fails = fails + (s.failures or 0) end
      f5[#f5 + 1] = { p == 'docker-run' and '`docker run --rm` (CLI, via proc.run)' or (p .. ' provider'), #pooled.ready,
        range(per('create', 0.5)), range(per('exec', 0.5)), range(per('ready', 0.5)), range(per('ready', 0.95)),
        range(per('destroy', 0.5)), string.format('%d', fails) }
    end
  end
  V.fig5 = h.table({ 'what', 'samples', 'create p50', 'first exec p50', 'create→first exec p50', 'create→first exec p95',
    'destroy p50', 'failures' }, f5)
  V.docker_note = results.docker_image and ('image `' .. results.docker_image .. '`, ' .. (function()
    for _, s in ipairs(results.startup) do if s.info and s.info.runtime then return s.info.runtime end end
    return 'dockerd'
  end)()) or ('docker: not measured, ' .. tostring(results.docker_skip))

  -- Figure 6: engine costs
  local now = pick(results.micro or {}, function(r) return r.now_ns_per_call end)
  local net = pick(results.micro or {}, function(r) return r.net_ns_per_call end)
  local ns = function(x) return string.format('%.1f', x) end
  local f6 = {
    { '`clock.now()` from Lua, per call', range(now, ns) .. ' ns' },
    { '`clock.now()` minus an empty Lua call', range(net, ns) .. ' ns' },
    { 'Python `time.perf_counter_ns()`, per call', results.python_clock and (ns(results.python_clock.ns_per_call) .. ' ns') or '–' },
  }
  for _, c in ipairs(CONC) do
    for _, kind in ipairs { 'cseng', 'cseng-tls1', 'cseng-tls2' } do
      local l = fid(kind, c)
      if #l > 0 then
        f6[#f6 + 1] = { string.format('%s: CPU per request, %d lifecycles', label(kind), c),
          range(pick(l, function(r) return r.cpu_per_request_us end), function(x) return string.format('%.1f', x) end) .. ' µs' }
      end
    end
  end
  f6[#f6 + 1] = { 'cseng CPU per request, raw GETs at 64', range(cpu('cseng'), function(x) return string.format('%.1f', x) end) .. ' µs' }
  V.fig6 = h.table({ 'what', 'median (min–max) over runs' }, f6, 'lr')
  -- numbers the analysis quotes
  local cpu_big = pick(fid('cseng', big), function(r) return r.cpu_per_request_us end)
  local cpu_raw = cpu('cseng')
  local function us(a) return a and string.format('%.0f', a.med) or '–' end
  V.big = tostring(big)
  V.cpu_big, V.cpu_raw = us(cpu_big), us(cpu_raw)
  -- over TLS: what the client and the fake spend per request at the highest concurrency, and the
  -- cores the pair needs at the ideal rate
  do
    local parts = {}
    for _, kind in ipairs { 'cseng', 'cseng-tls1', 'cseng-tls2' } do
      local l = fid(kind, big)
      local cc = pick(l, function(r) return r.cpu_per_request_us end)
      local fc = pick(l, function(r) return r.fake and r.fake.requests > 0 and r.fake.cpu_s / r.fake.requests * 1e6 end)
      if cc and fc then
        parts[#parts + 1] = string.format('%s: client %.0f µs, fake %.0f µs per request, %.1f cores for the pair at the ideal',
          label(kind), cc.med, fc.med, 3 * big / (PERIOD_MS / 1000) * (cc.med + fc.med) / 1e6)
      end
    end
    V.tls_cores = #parts == 0 and '' or ('**Over TLS** each end also encrypts and decrypts a record each way per ' ..
      'request over HTTP/1.1, and over HTTP/2 one per write, which may carry several requests or answers (OpenSSL 3.0: ' ..
      'some 7k instructions a record on its provider calls alone), the fake included. At ' .. big ..
      ' in flight (medians): ' .. table.concat(parts, '; ') .. '. Where the pair needs more than the machine\'s two ' ..
      'cores, neither can keep up, whichever client is measured (section 3d runs the client as several loops).')
  end
  V.ideal_rps_big = int(3 * big / (PERIOD_MS / 1000))
  V.need_cores = cpu_big and string.format('%.1f', 3 * big / (PERIOD_MS / 1000) * cpu_big.med / 1e6) or '–'
  V.need_cores_raw = cpu_raw and string.format('%.1f', 3 * big / (PERIOD_MS / 1000) * cpu_raw.med / 1e6) or '–'
  local wrk_rate = rate('wrk')
  V.wrk_us = wrk_rate and string.format('%.0f', 1e6 / wrk_rate.med) or '–'
  V.target_rate = wrk_rate and int(0.4 * wrk_rate.med) or '–'
  V.target_us = wrk_rate and string.format('%.0f', 1e6 / (0.4 * wrk_rate.med)) or '–'
  local lp = {}
  for _, s in ipairs(results.startup or {}) do
    if s.provider == 'local' and s.samples then lp[#lp + 1] = s end
  end
  V.local_create = range(pick(lp, function(s) return stats.median(s.samples.create) end))
  V.local_exec = range(pick(lp, function(s) return stats.median(s.samples.exec) end))
  V.clock_n = int(CLOCK_N)

  -- profile
  local p = results.profile or {}
  if p.perf_dso then
    local top = { table.unpack(p.perf_sym, 1, math.min(#p.perf_sym, 30)) }
    V.profile_perf = string.format('`perf record -F 1999 -g` (software cpu-clock) of the cseng client at %d lifecycles, ' ..
      'share of samples:\n\n```\n%s\n```\n\nTop symbols (`--sort dso,sym`; Debian\'s libcurl is stripped, so its ' ..
      'internal functions show as addresses):\n\n```\n%s\n```\n',
      p.perf_concurrency, table.concat(p.perf_dso, '\n'), table.concat(top, '\n'))
  else
    V.profile_perf = 'perf: ' .. tostring(p.perf_error or p.skipped or 'not run') .. '\n'
  end
  if p.syscalls then
    local srows = {}
    for i = 1, math.min(#p.syscalls.rows, 8) do
      local s = p.syscalls.rows[i]
      srows[#srows + 1] = { s.name, s.calls, string.format('%.2f', s.calls / p.syscalls.requests), s.errors }
    end
    V.profile_syscalls = string.format('System calls of the raw cseng client (`strace -f -c`, %d requests; strace ' ..
      'slows the run, the counts per request are what matter):\n\n', p.syscalls.requests) ..
      h.table({ 'system call', 'calls', 'per request', 'errors' }, srows)
  else
    V.profile_syscalls = ''
  end
end

-- 11: the history page at a year of hourly runs (bench/history_bench.lua, in its own processes)
local HISTORY_RUNS = QUICK and 500 or 9000
local function history_page()
  if opts.no_history then results.history = { skipped = 'skipped (--no-history)' } return end
  local out = fs.join(TMP, 'history.json')
  local _, err = run('history', { EXE, 'lua', fs.join(ROOT, 'bench/history_bench.lua'), '--runs', tostring(HISTORY_RUNS),
    '--out', out }, 7200)
  results.history = read_json(out) or { skipped = 'did not run: ' .. tostring(err) }
end
local function render_history()
  local d = results.history or { skipped = 'not run' }
  if d.skipped then return 'Not measured: ' .. d.skipped .. '.' end
  local function msf(v) return v and string.format('%.0f ms', v) or '–' end
  local rows = {
    { 'store rebuilt from the logs (`cseng history --rebuild`)', string.format('%.1f s', d.rebuild_s), string.format('%.1f MiB', d.store_mib) },
    { 'the viewer started until every run is listed, the store current', msf(d.view_start_store_ms), 'the index restored from the store' },
    { 'the same, without a store', msf(d.view_start_logs_ms), 'every log read' },
    { '`/api/history` (lineages and series)', msf(d.history_index_ms), string.format('%d bytes', d.history_index_bytes) },
    { '`/api/history/series` (one primitive, every run), first and again', msf(d.history_series_ms) .. ' / ' .. msf(d.history_series_ms_2),
      string.format('%d bytes', d.history_series_bytes) },
    { 'the page drawn in Chromium (a fresh browser, then warm loads)', d.page_ms and (table.concat(d.page_ms, ' / ') .. ' ms') or
      tostring(d.page_error), d.page_points and (table.concat(d.page_points, ', ') .. ' points per chart; the server\'s CPU for the ' ..
      'four loads ' .. tostring(d.page_server_cpu_s) .. ' s') or '' },
  }
  return string.format('`bench/history_bench.lua`: a watch folder of %d hourly arena runs (two providers, 10 measured samples ' ..
    'each, one provider\'s create latency 25%% higher from two thirds on), written as logs, then measured through ' ..
    '`cseng history` and `cseng view` in their own processes. Load average %s before, %s after, on %d CPUs.\n\n',
    d.runs, tostring(d.loadavg_1min_before), tostring(d.loadavg_1min_after), d.cpus or 0) ..
    h.table({ 'what', 'time', '' }, rows, 'lrl')
end

-- 12: the arena's primitive workloads against a link of known latency and bandwidth
-- (bench/primitives.lua, in its own process: it writes its own section)
local function primitives()
  if opts.no_primitives then results.primitives = { skipped = 'skipped (--no-primitives)' } return end
  local md, raw = fs.join(TMP, 'primitives.md'), fs.join(TMP, 'primitives.json')
  local _, err = run('primitives', { EXE, 'lua', fs.join(ROOT, 'bench/primitives.lua'), '--samples', QUICK and '3' or '5',
    '--out', md, '--json', raw }, 1800)
  results.primitives = read_json(raw) or { skipped = 'did not run: ' .. tostring(err) }
  results.primitives_md = fs.read(md)
end
local function render_primitives()
  local d = results.primitives or { skipped = 'not run' }
  if d.skipped or not results.primitives_md then return 'Not measured: ' .. tostring(d.skipped or 'no section written') .. '.' end
  return (results.primitives_md:gsub('%s+$', ''))
end

local function render_modal(mo)
  mo = mo or { skipped = 'not run' }
  if mo.skipped then return 'Not measured: ' .. mo.skipped .. '.' end
  local rows, bad = {}, 0
  for _, r in ipairs(mo.runs) do
    if r.errors > 0 then bad = bad + 1 end
    rows[#rows + 1] = { string.format('%d', r.run), string.format('%d / %d', r.errors, r.burst), r.seconds and string.format('%.1f', r.seconds) or '–',
      tostring(math.tointeger(r.connections) or r.connections or '–'), r.first_error and ('`' .. r.first_error:sub(1, 160) .. '`') or '' }
  end
  return string.format('%d of %d runs without an error.\n\n', #mo.runs - bad, #mo.runs) ..
    h.table({ 'run', 'errors', 'seconds', 'control-plane connections', 'first error' }, rows, 'rrrrl')
end

local PROTO_LABEL = { cseng = 'plain HTTP/1.1', ['cseng-tls1'] = 'TLS, HTTP/1.1', ['cseng-tls2'] = 'TLS, HTTP/2' }

local function render_paths()
  local list = results.paths or {}
  if #list == 0 then return 'Not measured.' end
  local rows = {}
  local function pct(v) return v and string.format('%.1f%%', v * 100) or '–' end
  local function us(v) return v and string.format('%.1f', v) or '–' end
  local by = {}
  for _, r in ipairs(list) do
    local k = (r.proto or 'cseng') .. '/' .. r.path
    by[k] = by[k] or {}
    table.insert(by[k], r)
  end
  local ratios = {}
  for _, proto in ipairs { 'cseng', 'cseng-tls1', 'cseng-tls2' } do
    for _, path in ipairs { 'native', 'curl' } do
      local rs = by[proto .. '/' .. path]
      if rs then
        local fails = 0
        for _, r in ipairs(rs) do fails = fails + (r.lifecycle.failures or 0) + (r.raw.failures or 0) end
        rows[#rows + 1] = { PROTO_LABEL[proto], path == 'native' and 'native (the default)' or 'libcurl (`CSENG_HTTP=curl`)',
          range(pick(rs, function(r) return r.lifecycle.share end), pct),
          range(pick(rs, function(r) return r.lifecycle.p99 end)),
          range(pick(rs, function(r) return r.lifecycle.cpu_us end), us),
          range(pick(rs, function(r) return r.raw.rate end), int),
          range(pick(rs, function(r) return r.raw.rate and r.wrk and r.raw.rate / r.wrk end), x2),
          range(pick(rs, function(r) return r.raw.cpu_us end), us), string.format("%d", fails) }
      end
    end
    local ratio = {}
    for rep = 1, REPS do
      local n, c
      for _, r in ipairs(list) do
        if r.rep == rep and (r.proto or 'cseng') == proto and r.path == 'native' then n = r end
        if r.rep == rep and (r.proto or 'cseng') == proto and r.path == 'curl' then c = r end
      end
      if n and c and n.lifecycle.cpu_us and c.lifecycle.cpu_us then ratio[#ratio + 1] = c.lifecycle.cpu_us / n.lifecycle.cpu_us end
    end
    if by[proto .. '/native'] then ratios[#ratios + 1] = PROTO_LABEL[proto] .. ' ' .. range(agg(ratio), x2) end
  end
  return h.table({ 'protocol', 'HTTP path', string.format('%% of ideal, %d lifecycles', list[1].concurrency),
      'error p99 (vs held)', 'CPU µs/request', string.format('raw GETs/s, %d connections', RAW_C), 'ratio to the reference',
      'raw CPU µs/request', 'failures' }, rows, 'llrrrrrrr') ..
    string.format('\nlibcurl / native CPU per lifecycle request, same repetition: %s.\n', table.concat(ratios, '; '))
end

local function render_bursts()
  if results.bursts_skipped then return 'Not measured: ' .. results.bursts_skipped .. '.' end
  local list = results.bursts or {}
  if #list == 0 then return 'Not measured.' end
  local rows = {}
  for _, v in ipairs { '1.1', '2' } do
    for _, cold in ipairs { false, true } do
      local l = {}
      local fails = 0
      for _, b in ipairs(list) do
        if b.http_version == v and b.cold == cold then
          if b.err then l[#l + 1] = b end
          fails = fails + (b.failures or 0) + (b.error and 1 or 0)
        end
      end
      if #l > 0 then
        rows[#rows + 1] = { 'TLS/' .. v, cold and 'cold (`--cold-connections`)' or 'warmed',
          range(pick(l, function(b) return b.err.p50 end)), range(pick(l, function(b) return b.err.p99 end)),
          range(pick(l, function(b) return b.err.max end)),
          range(pick(l, function(b) return b.there_p99 end)), range(pick(l, function(b) return b.back_p99 end)),
          range(pick(l, function(b) return b.waited end), int),
          range(pick(l, function(b) return b.handshake and b.handshake.p50 end)),
          range(pick(l, function(b) return b.handshake and b.handshake.p99 end)),
          cold and '–' or range(pick(l, function(b) return b.warm and b.warm.seconds end), function(x) return string.format('%.2f s', x) end),
          string.format("%d", fails) }
      end
    end
  end
  return h.table({ 'protocol', 'connections', 'create error p50', 'p99', 'max', 'way there p99', 'way back p99',
    'creates that waited for a connection', 'that wait p50', 'p99', 'warming took', 'failures' }, rows, 'llrrrrrrrrrr')
end

local function render_loops()
  if results.loops_skipped then return 'Not measured: ' .. results.loops_skipped .. '.' end
  local list = results.loops or {}
  if #list == 0 then return 'Not measured.' end
  local rows = {}
  for _, kind in ipairs { 'cseng-tls1', 'cseng-tls2' } do
    for _, n in ipairs(LOOPS) do
      local l = {}
      for _, r in ipairs(list) do if r.proto == kind and r.loops == n and r.rate then l[#l + 1] = r end end
      if #l > 0 then
        rows[#rows + 1] = { PROTO_LABEL[kind], tostring(n), range(pick(l, function(r) return r.rate end), int),
          range(pick(l, function(r) return r.share end), h.pct), range(pick(l, function(r) return r.p99 end)),
          range(pick(l, function(r) return r.cpu_us end), function(x) return string.format('%.1f', x) end),
          range(pick(l, function(r) return r.maxrss_kb and r.maxrss_kb / 1024 end), function(x) return string.format('%.1f', x) end) }
      end
    end
  end
  return h.table({ 'protocol', 'loops', 'lifecycles/s', '% of ideal', 'error p99 (vs held)', 'CPU µs/request',
    'RSS, all loops (MiB)' }, rows, 'lrrrrrr')
end

local function render_streams()
  if results.streams_skipped then return 'Not measured: ' .. results.streams_skipped .. '.' end
  local rows = {}
  for _, s in ipairs(STREAMS) do
    local l = {}
    for _, r in ipairs(results.streams or {}) do if r.streams == s and r.p99 then l[#l + 1] = r end end
    if #l > 0 then
      local function f1(x) return string.format('%.1f', x) end
      rows[#rows + 1] = { tostring(s), tostring(math.ceil(STREAMS_C / s)), range(pick(l, function(r) return r.p50 end)),
        range(pick(l, function(r) return r.p99 end)), range(pick(l, function(r) return r.way_back_p99 end)),
        range(pick(l, function(r) return r.share end), h.pct), range(pick(l, function(r) return r.cpu_us end), f1) }
    end
  end
  if #rows == 0 then return 'Not measured.' end
  return h.table({ 'calls a connection (--h2-streams)', 'connections', 'error p50 (vs held)', 'error p99', 'way back p99',
    '% of ideal', 'CPU µs/request' }, rows, 'rrrrrrr')
end

local function render(m)
  V.date = clock.wall()
  V.streams_section = render_streams()
  V.streams_c = tostring(STREAMS_C)
  V.paths_section = render_paths()
  V.modal_section = render_modal(results.modal)
  V.modal_tls_section = render_modal(results.modal_tls)
  V.bursts_section = render_bursts()
  V.loops_section = render_loops()
  V.burst_n = tostring(BURST_N)
  V.history_section = render_history()
  V.primitives_section = render_primitives()
  V.modal_burst_n = tostring(MODAL_BURST)
  V.elapsed = string.format('%.0f', results.elapsed_s)
  V.stamp = STAMP
  V.machine = render_machine(m)
  V.reps, V.duration, V.warmup = tostring(REPS), tostring(DURATION), tostring(WARMUP)
  V.concurrency = table.concat(CONC, ', ')
  V.pinning = PIN and string.format('The servers (the fake provider, nginx) run on CPU %d and the measured clients (cseng, ' ..
    'python, wrk) on CPU %d, pinned with `taskset` (`bench/lib.lua`): the fake stands in for a provider on another ' ..
    'machine, so its work is not done on the client\'s core and its answers wake the client from another CPU, as a ' ..
    'network card\'s would. Figure 1 also shows the cseng client unpinned (the fake then unpinned too): at low load the ' ..
    'scheduler then wakes the two on one core, which spares the cross-CPU wake-up of an idle vCPU (an error lower than ' ..
    'a remote provider allows), and from a few hundred in flight they share that core and the client\'s answers wait ' ..
    'behind the fake. The targets are the pinned runs\'.', PIN.server_cpu, PIN.client_cpu) or
    ('The processes are not pinned to CPUs (' .. tostring(NOPIN) .. ').')
  V.fake_impl = FAKE == 'c' and
    '`bench/fake_provider.c` (built by `make build/bench/fake_provider`: one libuv loop, Debian\'s http-parser and jansson), ' ..
    'in its own process; `spec/bench/fake_provider_spec.lua` (in `make check`) holds it to `bench/fake_provider.lua`, the same ' ..
    'server on the engine\'s own `cseng.serve` (`make bench` ran with the C one: on two cores the fake\'s CPU is ' ..
    'taken from the client it measures, and the Lua one costs ~1.5× as much per request; `--fake lua` runs that one)'
    or '`bench/fake_provider.lua`, on the engine\'s own server (`cseng.serve`), in its own process (`--fake lua`; ' ..
    'the default is its C twin, `bench/fake_provider.c`)'
  V.nominal = string.format('create %d ms, exec %d ms, delete %d ms', NOMINAL.create, NOMINAL.exec, NOMINAL.delete)
  V.local_n, V.docker_n = tostring(LOCAL_N), tostring(DOCKER_N)
  V.commands = table.concat(commands, '\n')
  targets_and_render()
  local existing = fs.read(OUTPUT)
  V.docker_section = existing and existing:match('<!%-%- docker:begin %-%->.-<!%-%- docker:end %-%->') or
    '<!-- docker:begin -->\n<!-- docker:end -->'
  -- bench/grpc_vs_rest.lua's section (gRPC vs REST), kept as it is
  V.grpc_section = existing and existing:match('<!%-%- grpc:begin %-%->.-<!%-%- grpc:end %-%->') or
    '<!-- grpc:begin -->\n<!-- grpc:end -->'
  -- bench/soak.lua's section (the 10,000-sandbox soak), kept as it is
  V.soak_section = existing and existing:match('<!%-%- soak:begin %-%->.-<!%-%- soak:end %-%->') or
    '<!-- soak:begin -->\n(run ./cseng lua bench/soak.lua --markdown docs/PERFORMANCE.md)\n<!-- soak:end -->'
  -- bench/environments.lua writes its own section; a regenerated report keeps it
  V.environments_section = existing and existing:match('<!%-%- environments:begin %-%->.-<!%-%- environments:end %-%->') or
    '<!-- environments:begin -->\n(run ./cseng lua bench/environments.lua)\n<!-- environments:end -->'
  local tmpl = assert(fs.read(TEMPLATE))
  local missing = {}
  local md = tmpl:gsub('{{([%w_]+)}}', function(k)
    local v = V[k]
    if v == nil then missing[#missing + 1] = k return '{{' .. k .. '}}' end
    return tostring(v)
  end)
  if #missing > 0 then error('template placeholders without a value: ' .. table.concat(missing, ', '), 0) end
  return md
end

-- ---- main ---------------------------------------------------------------------------------------

local t_begin = clock.now()
say('machine description')
local m = machine()
results.machine = m
start_fake()
say('fake provider at %s', fake_url)

-- the fake speaks what lua/providers/lizard.lua speaks: one lifecycle through the real adapter
do
  local ok, lizard = pcall(require, 'providers.lizard')
  if ok then
    local client = lizard.connect { api_url = fake_url, api_key = 'bench-key', project_id = 'bench' }
    local sb, err = lizard.create(client, {})
    local r = sb and lizard.exec(client, sb, 'python3 -c "print(\'arena-startup-ready-20261001\')"')
    local gone = sb and lizard.destroy(client, sb)
    results.adapter_check = (sb and r and r.code == 0 and r.stdout == 'arena-startup-ready-20261001\n' and gone) and
      'one create → exec → destroy through `lua/providers/lizard.lua` against the fake passed' or
      ('the lizard adapter against the fake failed: ' .. tostring(err))
  else
    results.adapter_check = 'lua/providers/lizard.lua is absent: not checked'
  end
end

local ok, err = pcall(function()
  say('0: the machine\'s wake-up latency on the clients\' CPU')
  wake_floor()
  say('1-2: timing fidelity and throughput at %s lifecycles, %d repetitions', table.concat(CONC, ', '), REPS)
  fidelity()
  say('3: raw request rate at %d connections', RAW_C)
  raw_rate()
  say('8: the native HTTP/1.1 path against libcurl')
  paths()
  say('5: local provider startup')
  startup()
  say('6: clock.now() and idle RSS')
  micro()
  if not opts.no_burst then
    say('9: bursts of %d creates over TLS, warm and cold', BURST_N)
    bursts()
  end
  if not opts.no_loops then
    say('10: the client as %d and %d loops at %d over TLS', LOOPS[1], LOOPS[2], CONC[#CONC])
    loops()
  end
  say('3e: HTTP/2 at %d in flight, %s calls a connection', STREAMS_C, table.concat(STREAMS, ', '))
  streams()
  say('7: Modal burst of %d, %d runs, plain and over TLS', MODAL_BURST, MODAL_RUNS)
  modal_burst()
  say('11: the history page at %d hourly runs', HISTORY_RUNS)
  history_page()
  say('12: the primitive workloads against a link of known latency and bandwidth')
  primitives()
  say('profile')
  profile()
end)
if fake then fake:close() end
if tls_fake then tls_fake:close() end
if nginx then nginx:close() end
if not ok then
  say('failed: %s', tostring(err))
  fs.remove_tree(TMP)
  return 1
end
m.loadavg_end = (fs.read('/proc/loadavg') or ''):match('^(%S+ %S+ %S+)')
results.elapsed_s = (clock.now() - t_begin) / 1e9
results.commands = commands

local outdir = fs.join(ROOT, 'bench/out')
assert(fs.mkdir_p(outdir))
local raw_path = fs.join(outdir, STAMP .. '.json')
assert(fs.write(raw_path, jsonl.encode(results)))
local md = render(m)
for _, f in ipairs(h.files) do assert(fs.write(f.path, f.content)) end
assert(fs.write(OUTPUT, md))
fs.remove_tree(TMP)
say('wrote %s and %s (%.0f s)', OUTPUT, raw_path, results.elapsed_s)
return 0
