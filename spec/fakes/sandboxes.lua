--- What the Daytona and E2B fakes (spec/providers/daytona/fake.lua, spec/providers/e2b/fake.lua) share: real
--- sandboxes on this machine, and the bits of HTTP they parse (their counters, switches and
--- f.stats/set/close come from spec/fakes/rest.lua, shared with the Lizard fake).
---
--- A fake's sandbox is a sandbox of the local provider (lua/providers/local.lua): its
--- own directory is "/" inside, so /workspace, /tests, /logs, /tmp are the sandbox's, state
--- persists between commands, and commands really run (loopback and local only; no network
--- inside unless created with network = true: then the host's, loopback included, which the
--- local provider's host_network option gives test harnesses only). Commands get the sandbox's
--- environment, as a container's processes would.
--- A networked sandbox is also given the ports of this process's model proxies
--- (lua/cseng/evals/proxy.lua: `host_ports` of the local provider's spec), as a cloud whose
--- sandboxes run on this machine reaches its loopback: the run's installed agents reach the proxy.
---
---   local host = require('spec.fakes.sandboxes').host()
---   local sb = host.create { env = {A='1'} }            -- warm_artifact = a host.snapshot result;
---                                                      -- network = true: the host's network
---   local artifact = host.snapshot(sb, 'name')         -- a copy of sb's root (the vendors' snapshots)
---   host.run(sb, { argv = {...} } | { shell = 'cmd' }, { cwd=, env=, timeout=, user= })
---       -> {code, stdout, stderr, timed_out, elapsed}
---   host.write(sb, '/tmp/x', data) ; host.read(sb, '/tmp/x') -> data | nil, msg
---   host.destroy(sb) ; host.close()
local fs = require('cseng.fs')
local archive = require('cseng.archive')
local util = require('cseng.lib.util')

local M = {}

local localp = require('providers.local')

--- A sandbox host: sandboxes live under a temporary directory removed by close().
function M.host()
  local root = assert(fs.tempdir('cseng-fake-sandboxes-'))
  local client = localp.connect { root = root, cgroups = false, host_network = true }
  local h = { root = root, live = {} }

  function h.create(spec)
    local network = spec and spec.network or false
    local sb = assert(localp.create(client, { env = spec and spec.env or {}, workdir = spec and spec.workdir or '/workspace',
                                              network = network,
                                              host_ports = network and require('cseng.evals.proxy').ports() or nil,
                                              labels = spec and spec.labels or {},
                                              warm_artifact = spec and spec.warm_artifact }))
    h.live[sb.id] = sb
    return sb
  end

  --- Keep a copy of a sandbox's root under a name (providers.local.snapshot: an existing copy of
  --- that name is reused); returns the directory a create's warm_artifact takes, or nil, msg.
  function h.snapshot(sb, name)
    return localp.snapshot(client, sb, (tostring(name):gsub('[^%w%-_.]', '_')))
  end

  --- Run argv (exec'd as is) or a shell command (bash -c). opts: cwd, env, timeout, user
  --- ('root' or 'verifier'), tail_bytes.
  function h.run(sb, what, o)
    o = o or {}
    local cmd = what.shell or util.shell_join(what.argv)
    local r, err, code = localp.exec(client, sb, cmd, {
      cwd = o.cwd, env = o.env, timeout = o.timeout, user = o.user, tail_bytes = o.tail_bytes or (64 << 20),
    })
    if not r then return { code = 127, stdout = '', stderr = tostring(err) .. ' (' .. tostring(code) .. ')', elapsed = 0 } end
    return r
  end

  --- Write a file at an absolute path of the sandbox (parents created; never through a
  --- symlink planted in the sandbox).
  function h.write(sb, path, data, mode)
    local dir, name = util.dirname(path), util.basename(path)
    if name == '' or not path:match('^/') then return nil, path .. ': not an absolute file path' end
    local tar = archive.pack({ { path = name, data = data, mode = mode or '0644' } }, { format = 'tar' })
    return localp.put(client, sb, dir, tar)
  end

  function h.read(sb, path)
    local r = h.run(sb, { argv = { 'cat', '--', path } }, { cwd = '/' })
    if r.code ~= 0 then return nil, util.trim(r.stderr) end
    return r.stdout
  end

  --- Freeze (on = true) or thaw every process of the sandbox: SIGSTOP / SIGCONT to each process in
  --- its pid namespace (its init's), as a cgroup freezer stops them; memory and files are kept.
  --- Returns true, or nil and why.
  function h.freeze(sb, on)
    local init = sb.init_pid
    if not init then return nil, 'the sandbox has no init (host mode)' end
    local ns = fs.readlink and fs.readlink('/proc/' .. init .. '/ns/pid')
    if not ns then return nil, 'cannot read the pid namespace of ' .. init end
    local pids = {}
    for _, d in ipairs(fs.list('/proc') or {}) do
      if d:match('^%d+$') and fs.readlink('/proc/' .. d .. '/ns/pid') == ns then pids[#pids + 1] = d end
    end
    local r = require('cseng.proc').run { argv = { 'kill', on and '-STOP' or '-CONT', table.unpack(pids) }, timeout = 10 }
    if not r or r.code ~= 0 then return nil, 'kill: ' .. util.trim(r and r.stderr or '') end
    return true
  end

  function h.destroy(sb)
    h.live[sb.id] = nil
    return localp.destroy(client, sb)
  end

  function h.close()
    for _, sb in pairs(h.live) do localp.destroy(client, sb) end
    h.live = {}
    fs.remove_tree(root)
  end

  return h
end

-- ---- HTTP bits -------------------------------------------------------------------------------

function M.urldecode(s)
  return (tostring(s):gsub('%+', ' '):gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

--- "a=1&b=x%20y" -> {a='1', b='x y'}; a repeated key keeps every value in order in list[key].
function M.query(q)
  local out, list = {}, {}
  for pair in tostring(q or ''):gmatch('[^&]+') do
    local k, v = pair:match('^([^=]*)=?(.*)$')
    k, v = M.urldecode(k), M.urldecode(v)
    if out[k] == nil then out[k] = v end
    list[k] = list[k] or {}
    table.insert(list[k], v)
  end
  return out, list
end

--- The parts of a multipart/form-data body: {{name=, filename=, data=, headers=}}, or nil, why.
function M.multipart(body, content_type)
  local boundary = tostring(content_type or ''):match('boundary="?([^";]+)"?')
  if not tostring(content_type or ''):lower():match('^multipart/form%-data') or not boundary then
    return nil, 'not multipart/form-data with a boundary'
  end
  local delim = '--' .. boundary
  local parts = {}
  local pos = body:find(delim, 1, true)
  if not pos then return nil, 'no opening boundary' end
  pos = pos + #delim
  while true do
    if body:sub(pos, pos + 1) == '--' then break end -- closing boundary
    if body:sub(pos, pos + 1) ~= '\r\n' then return nil, 'malformed boundary line' end
    pos = pos + 2
    local hend = body:find('\r\n\r\n', pos, true)
    if not hend then return nil, 'part without a header end' end
    local headers = {}
    for line in body:sub(pos, hend - 1):gmatch('[^\r\n]+') do
      local k, v = line:match('^([^:]+):%s*(.*)$')
      if k then headers[k:lower()] = v end
    end
    local nextb = body:find('\r\n' .. delim, hend + 4, true)
    if not nextb then return nil, 'part without a closing boundary' end
    local disp = headers['content-disposition'] or ''
    parts[#parts + 1] = {
      name = disp:match('name="([^"]*)"'), filename = disp:match('filename="([^"]*)"'),
      data = body:sub(hend + 4, nextb - 1), headers = headers,
    }
    pos = nextb + 2 + #delim
  end
  return parts
end

--- A random id in the shape of a UUID.
function M.uuid()
  local h = require('cseng.crypto').hex(require('cseng.crypto').random_bytes(16))
  return string.format('%s-%s-%s-%s-%s', h:sub(1, 8), h:sub(9, 12), h:sub(13, 16), h:sub(17, 20), h:sub(21, 32))
end

return M
