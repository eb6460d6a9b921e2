-- The escape suite: hostile tasks, packed as a dataset would ship them, run by `cseng run` on the
-- local provider as any dataset's tasks run, try to leave their sandbox from a Dockerfile RUN
-- step (the build) and from solve.sh (the trial), with the network on and off. Each try is one
-- line of spec/fixtures/escape/probe.py's output; every one must say "held", and the host is
-- checked from outside too (its core_pattern, its processes, the results that must not hold its
-- secret). docs/providers/local.md states the isolation model these probes hold it to.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local H = require('spec.helpers.common')

local FIXTURES = sys.root() .. '/spec/fixtures/escape'

-- The probes every context runs, and the ones only the trials run (bombs and daemons).
local PROBES = { 'uid_map', 'seccomp', 'sysctl', 'sysrq', 'mount', 'kcore', 'keys', 'timer_list', 'loopback_service',
  'host_sockets', 'interfaces', 'ptrace', 'module', 'release_agent', 'device' }
local BOMBS = { 'fork_bomb', 'memory_bomb', 'disk_filler', 'outlive' }

-- The major:minor of the block device holding "/", from this process's mountinfo.
local function root_device()
  for line in (fs.read('/proc/self/mountinfo') or ''):gmatch('[^\n]+') do
    local majmin, mountpoint = line:match('^%S+ %S+ (%d+:%d+) %S+ (%S+)')
    if mountpoint == '/' then
      local a, b = majmin:match('(%d+):(%d+)')
      return { tonumber(a), tonumber(b) }
    end
  end
end

local function host_interfaces()
  local out = {}
  for name in (fs.read('/proc/net/dev') or ''):gmatch('\n%s*([%w%.%-_@]+):') do out[#out + 1] = name end
  return out
end

-- A task whose build and trial run the probe. allow: its task.toml's allow_internet.
local function a_task(dir, name, allow)
  local d = dir .. '/' .. name
  for _, sub in ipairs({ 'environment', 'tests', 'solution' }) do assert(fs.mkdir_p(d .. '/' .. sub)) end
  fs.write(d .. '/task.toml', table.concat({
    'version = "1.0"', '[agent]', 'timeout_sec = 900.0', '[verifier]', 'timeout_sec = 300.0',
    '[environment]', 'build_timeout_sec = 900.0', 'storage_mb = 64', 'allow_internet = ' .. tostring(allow), '' }, '\n'))
  fs.write(d .. '/instruction.md', 'Leave the sandbox.\n')
  fs.write(d .. '/environment/Dockerfile', table.concat({
    'FROM debian:bookworm-slim',
    'COPY probe.py host.json /probe/',
    'RUN python3 /probe/probe.py build-$(grep -q tap0 /proc/net/dev && echo net || echo nonet) > /probe/build.txt 2>&1; '
      .. 'chmod 644 /probe/build.txt', '' }, '\n'))
  assert(fs.copy_tree(FIXTURES .. '/probe.py', d .. '/environment/probe.py'))
  fs.write(d .. '/environment/host.json', fs.read(dir .. '/host.json'))
  fs.write(d .. '/solution/solve.sh', 'python3 /probe/probe.py trial-$(grep -q tap0 /proc/net/dev && echo net || echo nonet) bombs '
    .. '> /logs/agent/probe.txt 2>&1; chmod 644 /logs/agent/probe.txt\n')
  fs.write(d .. '/tests/test.sh', 'cat /probe/build.txt /logs/agent/probe.txt; '
    .. 'if grep -q "^probe " /logs/agent/probe.txt && ! grep -q " ESCAPED " /probe/build.txt /logs/agent/probe.txt; '
    .. 'then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n')
  return d
end

describe('the local sandbox against a task that tries to leave it', function()
  local tmp, secret_srv, victim, marker, secret, core_pattern
  local lines = {} -- context -> probe -> {verdict, detail}
  local records = {}

  setup(function()
    tmp = H.tempdir('cseng-escape-')
    secret = 'cseng-host-secret-' .. crypto.hex(crypto.random_bytes(8))
    marker = 'cseng-escape-marker-' .. crypto.hex(crypto.random_bytes(4))
    secret_srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function() return 200, {}, secret end })
    -- a host process the probe must not see or signal
    victim = assert(proc.spawn { argv = { '/bin/sh', '-c', 'exec -a ' .. marker .. ' sleep 3600' } })
    core_pattern = fs.read('/proc/sys/kernel/core_pattern')
    local dev = root_device()
    fs.write(tmp .. '/host.json', cjson.encode({
      secret_port = secret_srv:port(), secret = secret, interfaces = host_interfaces(), pid = victim:pid(), marker = marker,
      root_dev = (dev and dev[1] > 0) and dev or { 1, 3 }, -- else /dev/null's numbers: still a device node to refuse
      fork_cap = 2000, memory_cap_mb = 1536, disk_cap_mb = 300,
    }))
    -- run A: the build has the network (the default), the trial has none; run B: the build has
    -- none (--build-network off), the trial has it (allow_internet + --allow-network)
    for _, run in ipairs({ { name = 'a', allow = false, flags = {} },
                           { name = 'b', allow = true, flags = { '--build-network', 'off', '--allow-network' } } }) do
      local ds = tmp .. '/dataset-' .. run.name
      assert(fs.mkdir_p(ds))
      fs.write(ds .. '/host.json', fs.read(tmp .. '/host.json'))
      a_task(ds, 'escape-' .. run.name, run.allow)
      fs.remove(ds .. '/host.json')
      local argv = { 'run', 'plans/cold-gold.lua', '--dataset', ds, '--output', tmp .. '/results-' .. run.name, '--quiet',
        '--default-limits', 'memory_mb=512,pids=512', '--timeout-seconds', '1800' }
      for _, f in ipairs(run.flags) do argv[#argv + 1] = f end
      local r = H.cseng(argv, { timeout = 2400 })
      local log
      for _, n in ipairs(fs.list(tmp .. '/results-' .. run.name) or {}) do
        if n:match('%.jsonl$') then log = tmp .. '/results-' .. run.name .. '/' .. n end
      end
      assert(log, 'no run log: ' .. tostring(r.stdout) .. tostring(r.stderr))
      for line in fs.read(log):gmatch('[^\n]+') do
        local e = cjson.decode(line)
        if e.event == 'trial' then
          records[#records + 1] = e
          for ctx, name, verdict, detail in (tostring(e.stdout_tail) .. '\n'):gmatch('probe (%S+) (%S+) (%S+) ([^\n]*)\n') do
            lines[ctx] = lines[ctx] or {}
            lines[ctx][name] = { verdict, detail }
          end
        end
      end
    end
  end)

  teardown(function()
    if victim then victim:kill('KILL'); victim:wait(5); victim:close() end
    if secret_srv then secret_srv:close() end
    -- a daemon that did outlive its trial would be a finding of the spec, not a leftover of it
    proc.run { argv = { 'pkill', '-KILL', '-f', marker .. '-outlive' } }
    H.remove_tempdirs()
  end)

  it('runs both hostile tasks to a verdict (no infrastructure error)', function()
    assert.equal(2, #records)
    for _, r in ipairs(records) do
      assert.is_nil(r.error, tostring(r.error) .. ' ' .. tostring(r.build_log_tail))
    end
  end)

  for _, ctx in ipairs({ 'build-net', 'build-nonet', 'trial-net', 'trial-nonet' }) do
    local names = ctx:match('^trial') and { table.unpack(PROBES) } or PROBES
    if ctx:match('^trial') then for _, b in ipairs(BOMBS) do names[#names + 1] = b end end
    for _, name in ipairs(names) do
      it(ctx .. ': ' .. name .. ' holds', function()
        local l = lines[ctx] and lines[ctx][name]
        assert(l, 'no "' .. name .. '" line from the ' .. ctx .. ' probe')
        assert.equal('held', l[1], l[2])
      end)
    end
  end

  it('the hostile tasks score as contained (their verifiers saw no escape)', function()
    for _, r in ipairs(records) do assert.equal('passed', r.outcome, r.task_id .. ': ' .. tostring(r.stdout_tail)) end
  end)

  it('leaves the host as it was: core_pattern unchanged, no daemon outlives its trial', function()
    assert.equal(core_pattern, fs.read('/proc/sys/kernel/core_pattern'))
    local r = proc.run { argv = { 'pgrep', '-f', marker .. '-outlive' } }
    assert.equal('', r.stdout, 'a process of a finished trial still runs on the host')
  end)

  it('the host\'s loopback-only secret is nowhere in the results', function()
    local r = proc.run { argv = { 'grep', '-r', '-l', secret, tmp .. '/results-a', tmp .. '/results-b' } }
    assert.equal('', r.stdout)
  end)

  it('records the limits the trials ran under, and the limits they ran into', function()
    for _, r in ipairs(records) do
      assert.is_table(r.limits)
      assert.equal(512, r.limits.memory_mb)
      assert.equal(512, r.limits.pids)
      assert.equal(64, r.limits.storage_mb)
      assert.is_true(r.limits.storage_enforced)
      assert.equal('default', r.limits.source.memory_mb)
      assert.equal('task', r.limits.source.storage_mb)
      assert.is_table(r.limit_hits, 'the memory bomb was killed by the memory limit')
      assert.is_true((r.limit_hits.memory or 0) >= 1)
    end
  end)
end)
