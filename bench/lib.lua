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
--- the same flags; returns the process and its URL, or raises.
function M.start_fake_c(tmp, extra)
  local ROOT = sys.root()
  local exe = fs.join(ROOT, 'build/bench/fake_provider')
  if not fs.stat(exe) then error('the C fake is not built: make build/bench/fake_provider', 0) end
  local port_file, log = fs.join(tmp, 'fake.port'), fs.join(tmp, 'fake.log')
  fs.remove(port_file)
  local argv = { exe, '--port-file', port_file, '--max-seconds', 3600 }
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

return M
