-- How a local sandbox's exec starts (lua/providers/shared/local_jail.lua): the static launcher
-- (jail/cseng-jail) and the shell chain it replaces give a command the same sandbox: the same
-- user namespace, seccomp filter, cgroups and network; and the launcher refuses to run anything
-- when one of its steps fails.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local L = require 'providers.local'
local H = require 'spec.helpers.common'
teardown(H.remove_tempdirs)

local FACTS = [[
head -1 /proc/self/uid_map | awk '{print "uid_map", $1, $2}'
grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -d '\t'
grep -E ':(memory|pids):' /proc/self/cgroup | sed 's/^[0-9]*:/cgroup /'
cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null | sed 's/^/memory limit /'
ls /sys/class/net 2>/dev/null || awk -F: 'NR>2 {gsub(/ /,"",$1); print "if", $1}' /proc/net/dev
id -u
]]

describe('a local sandbox exec', function()
  local tmp = H.tempdir('cseng-jail-spec-')

  local function facts(cfg, spec, opts)
    local client = L.connect(cfg)
    local sb = assert(L.create(client, spec))
    local r = assert(L.exec(client, sb, FACTS, opts or {}))
    assert(L.destroy(client, sb))
    assert.equal(0, r.code, r.stderr)
    return r.stdout, client
  end

  it('starts through the static launcher when make built it', function()
    local _, client = facts({ root = tmp .. '/a' }, { workdir = '/workspace' })
    assert.equal(sys.root() .. '/build/cseng-jail', client.launcher)
  end)

  for _, case in ipairs({ { 'no network', {} }, { 'a network of its own', { network = true } },
                          { 'a host port', { host_ports = { 9 } } } }) do
    it('gives the same sandbox through the launcher and through the shell chain (' .. case[1] .. ')', function()
      local spec = { workdir = '/workspace', memory_mb = 256 }
      for k, v in pairs(case[2]) do spec[k] = v end
      local a = facts({ root = tmp .. '/b' }, spec)
      local b = facts({ root = tmp .. '/c', launcher = false }, spec)
      assert.equal(a, b)
      assert.matches('uid_map 0 100000', a, 1, true)
      assert.matches('Seccomp:2', a, 1, true)
      assert.matches('NoNewPrivs:1', a, 1, true)
      -- its own cgroup namespace (its cgroups are its "/") and its own limit, read inside
      assert.matches('cgroup memory:/\n', a, 1, true)
      assert.matches('cgroup pids:/\n', a, 1, true)
      assert.matches('memory limit ' .. 256 * 1048576, a, 1, true)
    end)
  end

  it('refuses to start the command when a step fails (exit 125, the step named)', function()
    local launcher = sys.root() .. '/build/cseng-jail'
    local marker = tmp .. '/ran'
    local r = proc.run { argv = { launcher, '--cgroup', tmp .. '/no-such-cgroup', '--userns', '/proc/self/ns/user',
      '--seccomp', '/dev/null', '--uid', '100000', '--gid', '100000', '--', '/usr/bin/touch', marker } }
    assert.equal(125, r.code)
    assert.matches('joining the cgroup', r.stderr, 1, true)
    assert.is_false(fs.exists(marker))
    r = proc.run { argv = { launcher, '--userns', '/proc/self/ns/user', '--', '/usr/bin/touch', marker } }
    assert.equal(125, r.code)
    assert.matches('required', r.stderr, 1, true)
    assert.is_false(fs.exists(marker))
  end)
end)
