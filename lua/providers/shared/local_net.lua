--- The local provider's networks. A sandbox (or build) with the network gets its own network
--- namespace, owned by its user namespace, joined to the outside by slirp4netns: outbound NAT in
--- user space (the sandbox is 10.0.2.100, its gateway 10.0.2.2, DNS 10.0.2.3), with
--- --disable-host-loopback, so nothing inside reaches the host's 127.0.0.1 or another sandbox,
--- and raw sockets inside see only the sandbox's own interface. The ports a sandbox must reach on
--- the host (spec.host_ports: the engine's own model proxy, for example) are relayed one by one:
--- 127.0.0.1:P inside is joined to 127.0.0.1:P on the host, and no other port is.
--- A sandbox without the network has a namespace with only its loopback (no route anywhere).
local fs = require 'cseng.fs'
local proc = require 'cseng.proc'
local clock = require 'cseng.clock'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'

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

return net
