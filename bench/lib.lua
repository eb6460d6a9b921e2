--- What the benchmark scripts share (bench/run.lua, bench/probe.lua, bench/instructions.lua):
---   local blib = dofile(sys.root() .. '/bench/lib.lua')
---   local fake, url = blib.start_fake(exe, tmpdir, { '--create-ms', 50 })
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local task = require 'cseng.task'
local sys = require 'cseng.sys'

local M = {}

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
--- its URL, or raises.
function M.start_fake_c(tmp, extra, prefix)
  local ROOT = sys.root()
  local exe = fs.join(ROOT, 'build/bench/fake_provider')
  if not fs.stat(exe) then error('the C fake is not built: make build/bench/fake_provider', 0) end
  local port_file, log = fs.join(tmp, 'fake.port'), fs.join(tmp, 'fake.log')
  fs.remove(port_file)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs { exe, '--port-file', port_file, '--max-seconds', 3600 } do argv[#argv + 1] = a end
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, cwd = ROOT, stdout = log, stderr = log })
  for _ = 1, 200 do
    local t = fs.read(port_file)
    if t and t:match('%d+\n') then return p, 'http://127.0.0.1:' .. t:match('%d+'), argv end
    task.sleep(0.05)
  end
  p:close()
  error('the C fake did not start: ' .. tostring(fs.read(log)), 0)
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
