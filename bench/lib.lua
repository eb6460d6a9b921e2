--- What the benchmark scripts share (bench/run.lua, bench/probe.lua, bench/instructions.lua):
---   local blib = require 'bench.lib'
---   local fake, url = blib.start_fake(exe, tmpdir, { '--create-ms', 50 })
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local task = require('cseng.task')
local sys = require('cseng.sys')
local flags = require('cseng.lib.flags')

local M = {}

--- The bench scripts' flags, in one compact table: name = 'type' or name = { 'type', min = 1,
--- key = 'field' } (the field is the flag's name with - as _ unless key says). A bad flag, or a
--- missing one of `required` (flag names), is one line "<script>: <why>" on stderr and nil (the
--- script exits 2); else the options as cseng.lib.flags parses them.
---@param script string the script's name in messages
---@param argv string[]
---@param spec table<string, string|table>
---@param required? string[]
---@return table|nil
function M.options(script, argv, spec, required)
  local full = {}
  for name, t in pairs(spec) do
    if type(t) == 'string' then t = { t } end
    local f = { key = (name:gsub('%-', '_')) }
    for k, v in pairs(t) do
      if k == 1 then f.type = v else f[k] = v end
    end
    full[name] = f
  end
  local opts, err = flags.parse(argv, full)
  if opts then
    local missing = {}
    for _, name in ipairs(required or {}) do
      if opts[full[name].key] == nil then missing[#missing + 1] = '--' .. name end
    end
    if #missing > 0 then
      opts, err = nil, table.concat(missing, ' and ') .. (#missing > 1 and ' are required' or ' is required')
    end
  end
  if not opts then io.stderr:write(script, ': ', err, '\n') end
  return opts
end

--- Start bench/fake_provider.lua under exe (extra: more of its flags; prefix: a wrapper's argv,
--- e.g. valgrind's) and wait for its port (10 s at most, 120 s with a prefix); returns the
--- process and its URL, or raises with the fake's log.
function M.start_fake(exe, tmp, extra, prefix)
  local ROOT = sys.root()
  local port_file, log = fs.join(tmp, 'fake.port'), fs.join(tmp, 'fake.log')
  fs.remove(port_file)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs { exe, 'lua', fs.join(ROOT, 'bench/fake_provider.lua'), '--port-file', port_file, '--max-seconds', 3600 } do
    argv[#argv + 1] = a
  end
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, cwd = ROOT, stdout = log, stderr = log })
  for _ = 1, prefix and 2400 or 200 do
    local t = fs.read(port_file)
    if t and t:match('%d+\n') then return p, 'http://127.0.0.1:' .. t:match('%d+'), argv end
    task.sleep(0.05)
  end
  p:close()
  error('the fake provider did not start: ' .. tostring(fs.read(log)), 0)
end

--- Start the fake in C (bench/fake_provider.c, built by `make build/bench/fake_provider`) with
--- the same flags (prefix: a wrapper's argv, e.g. M.pinning().server); returns the process and
--- its URL (https:// when the flags have --tls-cert), or raises.
function M.start_fake_c(tmp, extra, prefix)
  local ROOT = sys.root()
  local exe = fs.join(ROOT, 'build/bench/fake_provider')
  if not fs.stat(exe) then error('the C fake is not built: make build/bench/fake_provider', 0) end
  local port_file, log = fs.join(tmp, 'fake.port'), fs.join(tmp, 'fake.log')
  fs.remove(port_file)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs { exe, '--port-file', port_file, '--max-seconds', 3600 } do argv[#argv + 1] = a end
  local scheme = 'http'
  for _, a in ipairs(extra or {}) do
    argv[#argv + 1] = a
    if a == '--tls-cert' then scheme = 'https' end
  end
  local p = assert(proc.spawn { argv = argv, cwd = ROOT, stdout = log, stderr = log })
  for _ = 1, 200 do
    local t = fs.read(port_file)
    if t and t:match('%d+\n') then return p, scheme .. '://127.0.0.1:' .. t:match('%d+'), argv end
    task.sleep(0.05)
  end
  p:close()
  error('the C fake did not start: ' .. tostring(fs.read(log)), 0)
end

--- Certificates for loopback TLS, made now in dir with Debian's openssl tool (never committed:
--- each run has its own keys): a CA, and certificates it signs for the names and addresses a
--- loopback test uses (localhost, 127.0.0.1, ::1), P-256 ECDSA keys. Returns {ca = PEM path,
--- cert = , key = } for a server; with variants, also for each of its names: 'expired' (signed
--- by the CA, its validity ended a day ago), 'wronghost' (signed by the CA for other.invalid
--- only), 'selfsigned' (localhost and 127.0.0.1, signed by itself, not by the CA), and
--- 'other_ca' (a second CA, which signed nothing here). Raises when openssl fails.
function M.make_certs(dir, variants)
  assert(fs.mkdir_p(dir))
  local function openssl(args)
    local argv = { 'openssl' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local r = proc.run { argv = argv, cwd = dir, timeout = 60 }
    if not (r and r.code == 0) then
      error('openssl ' .. table.concat(args, ' ') .. ': ' .. tostring(r and (r.stderr ~= '' and r.stderr or r.stdout)), 0)
    end
  end
  local function key_and_csr(name, cn)
    openssl { 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', name .. '.key',
      '-out', name .. '.csr', '-subj', '/CN=' .. cn }
  end
  local function ca(name, cn)
    openssl { 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', name .. '.key',
      '-out', name .. '.pem', '-days', '3', '-subj', '/CN=' .. cn, '-addext', 'basicConstraints=critical,CA:TRUE',
      '-addext', 'keyUsage=critical,keyCertSign,cRLSign' }
  end
  local serial = 1
  local function signed(name, cn, sans, days)
    key_and_csr(name, cn)
    assert(fs.write(fs.join(dir, name .. '.ext'), 'subjectAltName=' .. sans ..
      '\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n'))
    serial = serial + 1
    openssl { 'x509', '-req', '-in', name .. '.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-set_serial', tostring(serial),
      '-out', name .. '.pem', '-days', tostring(days), '-extfile', name .. '.ext' }
    return { cert = fs.join(dir, name .. '.pem'), key = fs.join(dir, name .. '.key') }
  end
  local LOOPBACK = 'DNS:localhost,IP:127.0.0.1,IP:::1'
  ca('ca', 'cseng loopback test CA')
  local out = signed('server', 'localhost', LOOPBACK, 3)
  out.ca = fs.join(dir, 'ca.pem')
  if variants then
    out.expired = signed('expired', 'localhost', LOOPBACK, -1) -- notAfter a day before now
    out.wronghost = signed('wronghost', 'other.invalid', 'DNS:other.invalid', 3)
    key_and_csr('selfsigned', 'localhost')
    assert(fs.write(fs.join(dir, 'selfsigned.ext'), 'subjectAltName=' .. LOOPBACK .. '\n'))
    openssl { 'x509', '-req', '-in', 'selfsigned.csr', '-key', 'selfsigned.key', '-out', 'selfsigned.pem', '-days', '3',
      '-extfile', 'selfsigned.ext' }
    out.selfsigned = { cert = fs.join(dir, 'selfsigned.pem'), key = fs.join(dir, 'selfsigned.key') }
    ca('other_ca', 'cseng other test CA')
    out.other_ca = fs.join(dir, 'other_ca.pem')
  end
  return out
end

--- Where the bench runs its processes: on a machine where this process may use two or more CPUs,
--- the servers (the fake provider, nginx) are pinned to the last of them and the measured clients
--- (cseng, python, wrk) to the first, with taskset (util-linux). The fake stands in for a provider
--- on another machine: left free, the scheduler often puts it on the client's core, where the
--- client's answers wait behind it (at 256 lifecycles in flight on a 2-core VM the error p50 went
--- from ~0.5 to ~0.15 ms when pinned). At a few lifecycles in flight pinning costs a cross-CPU
--- wake-up of an idle vCPU instead (p99 ~0.4 -> ~0.8 ms at 4 and 64), which a provider on
--- another machine costs too. bench/probe.lua --pin both measures both ways.
--- Returns {client = argv prefix, server = argv prefix, client_cpu, server_cpu, cpus}, or nil and
--- why not (CSENG_BENCH_PIN=0, one CPU, no taskset).
function M.pinning()
  if os.getenv('CSENG_BENCH_PIN') == '0' then return nil, 'CSENG_BENCH_PIN=0' end
  local list = (fs.read('/proc/self/status') or ''):match('Cpus_allowed_list:%s*([%d,%-]+)')
  local cpus = {}
  for part in (list or ''):gmatch('[^,]+') do
    local a, b = part:match('^(%d+)%-(%d+)$')
    for c = tonumber(a or part), tonumber(b or part) do cpus[#cpus + 1] = c end
  end
  if #cpus < 2 then return nil, 'this process may use ' .. #cpus .. ' CPU' .. (#cpus == 1 and '' or 's') end
  if not proc.which('taskset') then return nil, 'taskset (util-linux) is not installed' end
  local first, last = cpus[1], cpus[#cpus]
  return { client = { 'taskset', '-c', tostring(first) }, server = { 'taskset', '-c', tostring(last) },
    client_cpu = first, server_cpu = last, cpus = list }
end

--- Move a running server (pid, every thread) to the servers' CPU of pin (M.pinning()), or with
--- free back to every CPU this process may use; raises when taskset fails.
function M.place(pin, pid, free)
  local r = proc.run { argv = { 'taskset', '-a', '-p', '-c', free and pin.cpus or tostring(pin.server_cpu), tostring(pid) },
    timeout = 10 }
  if not (r and r.code == 0) then error('taskset -p ' .. tostring(pid) .. ' failed: ' .. tostring(r and r.stderr), 0) end
end

return M
