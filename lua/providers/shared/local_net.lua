--- The local provider's networks. A sandbox (or build) with the network gets its own network
--- namespace, owned by its user namespace, joined to the outside by slirp4netns: outbound NAT in
--- user space (the sandbox is 10.0.2.100, its gateway 10.0.2.2, DNS 10.0.2.3), with
--- --disable-host-loopback, so nothing inside reaches the host's 127.0.0.1 or another sandbox,
--- and raw sockets inside see only the sandbox's own interface. The ports a sandbox must reach on
--- the host (spec.host_ports: the engine's own model proxy, for example) are relayed one by one:
--- 127.0.0.1:P inside is joined to 127.0.0.1:P on the host, and no other port is.
--- A sandbox without the network has a namespace with only its loopback (no route anywhere).
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local clock = require('cseng.clock')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')

local net = {}

net.RESOLV = 'nameserver 10.0.2.3\n'
net.READY_TIMEOUT = 30

--- Start slirp4netns for ns (a cseng.namespace with net): returns a handle {p, ready} to stop with
--- net.stop, or nil, why, code. dir: where its ready file lives (the sandbox's directory).
function net.start(ns, dir)
  local slirp = proc.which('slirp4netns')
  if not slirp then return nil, 'slirp4netns is not installed (make deps)', errors.ECONFIG end
  local ready = dir .. '/slirp.ready'
  fs.remove(ready)
  -- setpriv --pdeathsig: slirp4netns dies with the engine, so a crash leaves no NAT behind
  local p, err, code = proc.spawn {
    argv = { '/bin/sh', '-c', 'exec setpriv --pdeathsig KILL -- "$@" 3>"$0"', ready, slirp, '--configure', '--mtu=65520',
      '--disable-host-loopback', '--ready-fd=3', '--netns-type=path', '--userns-path=' .. ns:path('user'), ns:path('net'), 'tap0' },
    stdout = dir .. '/slirp.log', stderr = dir .. '/slirp.log',
  }
  if not p then return nil, 'starting slirp4netns: ' .. tostring(err), code end
  local deadline = clock.now() + net.READY_TIMEOUT * 1e9
  while (fs.read(ready) or '') == '' do
    local exit = p:wait(0.002)
    if exit then
      return nil, 'slirp4netns exited (' .. tostring(exit.code) .. '): ' .. util.trim(fs.read(dir .. '/slirp.log') or ''), errors.EIO
    end
    if clock.now() > deadline then
      p:kill('KILL'); p:close()
      return nil, 'slirp4netns did not configure the sandbox\'s network in ' .. net.READY_TIMEOUT .. ' s', 'ETIMEDOUT'
    end
  end
  return { p = p }
end

--- Stop what net.start started (idempotent).
function net.stop(h)
  if not h or not h.p then return end
  h.p:kill('KILL')
  h.p:wait(5)
  h.p:close()
  h.p = nil
end

--- Relay each of ports (127.0.0.1:P inside ns to 127.0.0.1:P on the host): a list of relays, or
--- nil, why, code (the ones made so far closed).
function net.relays(ns, ports)
  local out = {}
  for _, port in ipairs(ports or {}) do
    local p = math.tointeger(port)
    if not p or p < 1 or p > 65535 then
      for _, r in ipairs(out) do r:close() end
      return nil, 'host_ports: not a port: ' .. tostring(port), errors.EINVAL
    end
    local r, err, code = require('cseng.namespace').relay(ns, p, p)
    if not r then
      for _, x in ipairs(out) do x:close() end
      return nil, err, code
    end
    out[#out + 1] = r
  end
  return out
end

-- ---- a phase's egress policy (Harbor's network_mode / allowed_hosts) ------------------------

-- the addresses of one allowed host: an IPv4 literal as it is; a name resolved on the host now
-- (its A records: the sandbox resolves through slirp4netns' resolver, which asks the host's);
-- a wildcard pattern has no addresses (it cannot be enforced by address)
local function addresses(host)
  if host:match('^%d+%.%d+%.%d+%.%d+$') then return { host } end
  if host:sub(1, 2) == '*.' then return nil, 'a wildcard pattern cannot be enforced by address' end
  local r = proc.run { argv = { 'getent', 'ahostsv4', host }, timeout = 15 }
  if not r or r.code ~= 0 then return nil, 'does not resolve on this machine' end
  local out, seen = {}, {}
  for ip in tostring(r.stdout):gmatch('(%d+%.%d+%.%d+%.%d+)%s') do
    if not seen[ip] then seen[ip] = true; out[#out + 1] = ip end
  end
  if #out == 0 then return nil, 'has no IPv4 address' end
  return out
end

--- The iptables ruleset of a policy ({mode = public|no-network|allowlist, hosts}): public accepts
--- everything; no-network and allowlist accept the loopback (the relayed host ports live there),
--- what answers connections already made, and for allowlist each host's addresses (and the
--- resolver, when a name is allowed); everything else is rejected at once (a refused connect,
--- not a timeout). Returns the rules text, the addresses allowed, and the hosts that could not be
--- enforced ({host, why}).
function net.ruleset(policy)
  local lines = { '*filter', ':INPUT ACCEPT [0:0]', ':FORWARD ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]' }
  local allowed, unenforced = {}, {}
  if policy.mode ~= 'public' then
    lines[#lines + 1] = '-A OUTPUT -o lo -j ACCEPT'
    lines[#lines + 1] = '-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT'
    if policy.mode == 'allowlist' then
      local names = false
      for _, h in ipairs(policy.hosts or {}) do
        local ips, why = addresses(h)
        if ips then
          if not h:match('^%d+%.%d+%.%d+%.%d+$') then names = true end
          for _, ip in ipairs(ips) do
            allowed[#allowed + 1] = ip
            lines[#lines + 1] = '-A OUTPUT -d ' .. ip .. '/32 -j ACCEPT'
          end
        else
          unenforced[#unenforced + 1] = { host = h, why = why }
        end
      end
      if names then
        lines[#lines + 1] = '-A OUTPUT -d 10.0.2.3/32 -p udp --dport 53 -j ACCEPT'
        lines[#lines + 1] = '-A OUTPUT -d 10.0.2.3/32 -p tcp --dport 53 -j ACCEPT'
      end
    end
    lines[#lines + 1] = '-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset'
    lines[#lines + 1] = '-A OUTPUT -j REJECT --reject-with icmp-port-unreachable'
  end
  lines[#lines + 1] = 'COMMIT'
  return table.concat(lines, '\n') .. '\n', allowed, unenforced
end

--- Apply a phase's policy to a sandbox's own network namespace (the path netns), replacing the
--- previous phase's: iptables-restore entered into the namespace (the engine is root there: the
--- namespace belongs to a user namespace it made). Returns {allowed, unenforced} or nil, why, code.
function net.filter(netns, policy)
  local iptables = proc.which('iptables-restore')
  if not iptables then return nil, 'iptables-restore is not installed (make deps)', errors.ECONFIG end
  local rules, allowed, unenforced = net.ruleset(policy)
  local r, err = proc.run { argv = { 'nsenter', '--net=' .. netns, iptables }, stdin = rules, timeout = 30 }
  if not r then return nil, 'iptables-restore: ' .. tostring(err), errors.EIO end
  if r.code ~= 0 then return nil, 'iptables-restore in the sandbox\'s namespace: ' .. util.trim(r.stderr), errors.EIO end
  return { allowed = allowed, unenforced = unenforced }
end

return net
