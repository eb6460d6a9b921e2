-- Where make bench runs its processes (bench/lib.lua's pinning): the servers on the last CPU this
-- process may use, the measured clients on the first, with taskset; none where only one CPU may
-- be used or CSENG_BENCH_PIN=0. Checked as a user meets it: the helper run under a narrowed
-- affinity, a process started with each prefix read back from /proc, and bench/probe.lua's --pin
-- refusing what it cannot do. Verdicts are values, never times.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local cjson = require('cjson')

local ROOT = sys.root()
local CSENG = os.getenv('CSENG') or fs.join(ROOT, 'cseng')
if not CSENG:find('/', 1, true) then CSENG = fs.join(ROOT, CSENG) end
local blib = require('bench.lib')

-- the CPUs this process may use, as a list of numbers
local function allowed(pid)
  local list = (fs.read('/proc/' .. pid .. '/status') or ''):match('Cpus_allowed_list:%s*([%d,%-]+)')
  local cpus = {}
  for part in (list or ''):gmatch('[^,]+') do
    local a, b = part:match('^(%d+)%-(%d+)$')
    for c = tonumber(a or part), tonumber(b or part) do cpus[#cpus + 1] = c end
  end
  return cpus
end
local CPUS = allowed('self')
-- a case that needs two CPUs is pending where this process may use one
local it2 = #CPUS >= 2 and it or function(name) pending(name .. ' (this process may use one CPU)') end

local tmp, script
setup(function()
  tmp = assert(fs.tempdir('cseng-bench-pin'))
  script = fs.join(tmp, 'pinning.lua')
  assert(fs.write(script, [[
local cjson = require('cjson')
local sys = require('cseng.sys')
local p, why = require('bench.lib').pinning()
print(cjson.encode(p and { client = p.client, server = p.server, client_cpu = p.client_cpu,
  server_cpu = p.server_cpu, cpus = p.cpus } or { why = why }))
]]))
end)
teardown(function() if tmp then fs.remove_tree(tmp) end end)

-- bench/lib.lua's pinning() in a child (prefix: e.g. a taskset narrowing it first)
local function pinning_in_child(prefix, env)
  local argv = {}
  for _, a in ipairs(prefix or {}) do argv[#argv + 1] = a end
  for _, a in ipairs { CSENG, 'lua', script } do argv[#argv + 1] = a end
  local r = assert(proc.run { argv = argv, cwd = ROOT, env_add = env, timeout = 60 })
  assert.are.equal(0, r.code, r.stderr)
  return cjson.decode(r.stdout)
end

describe('bench/lib.lua pinning', function()
  it2('puts the servers on the last CPU and the clients on the first', function()
    local p = pinning_in_child()
    assert.are.same({ 'taskset', '-c', tostring(CPUS[1]) }, p.client)
    assert.are.same({ 'taskset', '-c', tostring(CPUS[#CPUS]) }, p.server)
    assert.are.equal(CPUS[1], p.client_cpu)
    assert.are.equal(CPUS[#CPUS], p.server_cpu)
  end)

  it2('reads a list of single CPUs as well as a range', function()
    local list = CPUS[1] .. ',' .. CPUS[#CPUS]
    local p = pinning_in_child { 'taskset', '-c', list }
    assert.are.same({ 'taskset', '-c', tostring(CPUS[1]) }, p.client)
    assert.are.same({ 'taskset', '-c', tostring(CPUS[#CPUS]) }, p.server)
  end)

  it('pins nothing where one CPU may be used, or with CSENG_BENCH_PIN=0', function()
    local one = pinning_in_child { 'taskset', '-c', tostring(CPUS[#CPUS]) }
    assert.is_nil(one.client)
    assert.are.equal('this process may use 1 CPU', one.why)
    local off = pinning_in_child(nil, { CSENG_BENCH_PIN = '0' })
    assert.is_nil(off.client)
    assert.are.equal('CSENG_BENCH_PIN=0', off.why)
  end)

  it2('starts each process on its CPU', function()
    local pin = assert(blib.pinning())
    for _, role in ipairs { 'client', 'server' } do
      local argv = {}
      for _, a in ipairs(pin[role]) do argv[#argv + 1] = a end
      argv[#argv + 1] = 'sleep'
      argv[#argv + 1] = '30'
      local p = assert(proc.spawn { argv = argv })
      local pid = p:pid()
      -- taskset sets the affinity, then execs sleep in the same process
      for _ = 1, 200 do
        if (fs.read('/proc/' .. pid .. '/comm') or ''):match('^sleep') then break end
        task.sleep(0.01)
      end
      local got = allowed(pid)
      p:kill('KILL')
      p:close()
      assert.are.same({ role == 'client' and pin.client_cpu or pin.server_cpu }, got, role)
    end
  end)

  it('bench/probe.lua refuses a --pin or --fake it cannot do, before it starts or makes anything', function()
    local dir = assert(fs.tempdir('bench-pin-spec-')) -- its TMPDIR: what a refused probe left is seen here
    local env = { TMPDIR = dir }
    local r = assert(proc.run { argv = { CSENG, 'lua', 'bench/probe.lua', '--pin', 'sometimes' }, cwd = ROOT, timeout = 60, env_add = env })
    assert.are.equal(2, r.code)
    assert.matches('probe: %-%-pin: on, off or both', r.stderr)
    r = assert(proc.run { argv = { 'taskset', '-c', tostring(CPUS[1]), CSENG, 'lua', 'bench/probe.lua', '--pin', 'both' },
      cwd = ROOT, timeout = 60, env_add = env })
    assert.are.equal(2, r.code)
    assert.matches('probe: %-%-pin both: this process may use 1 CPU', r.stderr)
    r = assert(proc.run { argv = { CSENG, 'lua', 'bench/probe.lua', '--fake', 'python' }, cwd = ROOT, timeout = 60, env_add = env })
    assert.are.equal(2, r.code)
    assert.matches('probe: %-%-fake: lua or c', r.stderr)
    local left = fs.list(dir)
    fs.remove_tree(dir)
    assert.same({}, left)
  end)
end)
