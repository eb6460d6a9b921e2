-- How a local sandbox's processes start (jail/cseng-jail.c, lua/providers/shared/local_jail.lua):
-- the sandbox is a container whose init holds its namespaces and mounts, and every command
-- joins them, as `docker exec` does. Each command sees the same sandbox (user namespace, seccomp
-- filter, cgroups, network); what one command leaves running is there for the next and gone
-- with the sandbox; the init cannot be killed, traced or read from inside; and the launcher runs
-- nothing when one of its steps fails.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local L = require('providers.local')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

local FACTS = [[
head -1 /proc/self/uid_map | awk '{print "uid_map", $1, $2}'
grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status | tr -d '\t'
grep -E ':(memory|pids):' /proc/self/cgroup | sed 's/^[0-9]*:/cgroup /'
cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null | sed 's/^/memory limit /'
awk -F: 'NR>2 {gsub(/ /,"",$1); print "if", $1}' /proc/net/dev
echo "hostname $(hostname)"
echo "uid $(id -u)"
]]

describe('a local sandbox exec', function()
  local tmp = H.tempdir('cseng-jail-spec-')

  local function facts(cfg, spec, opts)
    local client = L.connect(cfg)
    local sb = assert(L.create(client, spec))
    local r = assert(L.exec(client, sb, FACTS, opts or {}))
    local r2 = assert(L.exec(client, sb, FACTS, opts or {}))
    assert(L.destroy(client, sb))
    assert.equal(0, r.code, r.stderr)
    assert.equal(r.stdout, r2.stdout) -- every command sees the same sandbox
    return r.stdout, client
  end

  it('starts through the static launcher that make builds', function()
    local _, client = facts({ root = tmp .. '/a' }, { workdir = '/workspace' })
    assert.equal(sys.root() .. '/build/cseng-jail', client.launcher)
  end)

  for _, case in ipairs({ { 'no network', {}, { 'lo' } }, { 'a network of its own', { network = true }, { 'lo', 'tap0' } },
                          { 'a host port', { host_ports = { 9 } }, { 'lo' } } }) do
    it('runs each command in the sandbox\'s namespaces, filter and cgroups (' .. case[1] .. ')', function()
      local spec = { workdir = '/workspace', memory_mb = 256 }
      for k, v in pairs(case[2]) do spec[k] = v end
      local a = facts({ root = tmp .. '/b' }, spec)
      assert.matches('uid_map 0 100000', a, 1, true)
      assert.matches('Seccomp:2', a, 1, true)
      assert.matches('NoNewPrivs:1', a, 1, true)
      assert.matches('CapEff:00000000a80425fb', a, 1, true) -- Docker's default set, nothing more
      -- its own cgroup namespace (its cgroups are its "/") and its own limit, read inside
      assert.matches('cgroup memory:/\n', a, 1, true)
      assert.matches('cgroup pids:/\n', a, 1, true)
      assert.matches('memory limit ' .. 256 * 1048576, a, 1, true)
      local ifs = {}
      for name in a:gmatch('if (%S+)') do ifs[#ifs + 1] = name end
      table.sort(ifs)
      assert.same(case[3], ifs)
      assert.matches('hostname sandbox', a, 1, true)
      assert.matches('uid 0\n', a, 1, true)
    end)
  end

  it('runs the verifier as uid 1000 with no capabilities', function()
    local a = facts({ root = tmp .. '/v' }, { workdir = '/workspace' }, { user = 'verifier', cwd = '/tmp' })
    assert.matches('uid 1000\n', a, 1, true)
    assert.matches('CapEff:0000000000000000', a, 1, true)
    assert.matches('NoNewPrivs:1', a, 1, true)
  end)

  it('keeps what one command started for the next, and ends it with the sandbox', function()
    local marker = 'cseng-jail-spec-' .. require('cseng.crypto').hex(require('cseng.crypto').random_bytes(6))
    local client = L.connect({ root = tmp .. '/d' })
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local r = assert(L.exec(client, sb, 'setsid bash -c "exec -a ' .. marker .. ' sleep 600" </dev/null >/dev/null 2>&1 & echo started'))
    assert.equal(0, r.code, r.stderr)
    r = assert(L.exec(client, sb, 'pgrep -f ' .. marker .. ' >/dev/null && echo running'))
    assert.equal('running\n', r.stdout)
    local host = proc.run { argv = { 'pgrep', '-f', marker } }
    assert.equal(0, host.code, 'the daemon runs on the host (in the sandbox\'s pid namespace)')
    assert(L.destroy(client, sb))
    host = proc.run { argv = { 'pgrep', '-f', marker } }
    assert.equal('', host.stdout, 'a process of a destroyed sandbox still runs on the host')
  end)

  it('keeps the sandbox\'s init out of reach of the processes inside', function()
    local client = L.connect({ root = tmp .. '/e' })
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local r = assert(L.exec(client, sb, table.concat({
      'kill -9 1 2>/dev/null; kill -TERM 1 2>/dev/null; sleep 0; echo "init $(cat /proc/1/comm)"',
      'cat /proc/1/environ >/dev/null 2>&1 && echo "environ readable" || echo "environ denied"',
      'ls /proc/1/root/ >/dev/null 2>&1 && echo "root readable" || echo "root denied"',
      'tr "\\0" " " </proc/1/cmdline; echo',
      'grep CapEff /proc/1/status | tr -d "\\t"' }, '\n')))
    assert.equal(0, r.code, r.stderr)
    assert.matches('init init\n', r.stdout, 1, true)
    assert.matches('environ denied', r.stdout, 1, true)
    assert.matches('root denied', r.stdout, 1, true)
    assert.not_matches('/run/cseng', r.stdout, 1, true) -- nothing of the host's paths in its command line
    assert.matches('CapEff:0000000000000000', r.stdout, 1, true)
    r = assert(L.exec(client, sb, 'echo still here'))
    assert.equal('still here\n', r.stdout)
    assert(L.destroy(client, sb))
  end)

  it('refuses to start the command when a step fails (exit 125, the step named)', function()
    local launcher = sys.root() .. '/build/cseng-jail'
    local marker = tmp .. '/ran'
    local client = L.connect({ root = tmp .. '/f' })
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local function enter(extra)
      local a = { launcher, 'enter', '--pid', tostring(sb.init_pid), '--seccomp', client.filter }
      for _, x in ipairs(extra) do a[#a + 1] = x end
      for _, x in ipairs({ '--', '/usr/bin/touch', marker }) do a[#a + 1] = x end
      return proc.run { argv = a }
    end
    local r = enter({ '--userns', sb.ns:path('user'), '--cgroup', tmp .. '/no-such-cgroup' })
    assert.equal(125, r.code)
    assert.matches('joining the cgroup', r.stderr, 1, true)
    -- a pid whose user namespace is not the sandbox's (a reused pid) is never entered
    r = enter({ '--userns', '/proc/self/ns/user' })
    assert.equal(125, r.code)
    assert.matches('its pid names another process', r.stderr, 1, true)
    r = proc.run { argv = { launcher, 'enter', '--pid', tostring(sb.init_pid), '--', '/usr/bin/touch', marker } }
    assert.equal(125, r.code)
    assert.matches('required', r.stderr, 1, true)
    assert(L.destroy(client, sb))
    assert.is_false(fs.exists(marker))
    r = proc.run { argv = { launcher, 'init', '--root', tmp .. '/no-such-root', '--map', '100000:100000:65536' } }
    assert.equal(125, r.code)
    assert.matches('bind mount of', r.stderr, 1, true)
  end)
end)
