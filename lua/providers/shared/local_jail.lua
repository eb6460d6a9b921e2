--- How the local provider isolates a sandbox's processes (the policy; docs/providers/local.md
--- states it as Docker's security docs state theirs; jail/cseng-jail.c carries it out). A
--- base-mode sandbox is a container: an init process made at create (`cseng-jail init`) holds
--- its namespaces and mounts, and every command joins them (`cseng-jail enter`, as `docker exec`).
---   * its own user namespace: ids 0..65535 inside are the host's idmap.uid.. (a subordinate
---     range registered in /etc/subuid), so root inside is an unprivileged uid outside, and the
---     verifier's uid 1000 is not the host's uid 1000;
---   * commands run with Docker's default capability set, inside that namespace only,
---     no_new_privs, and Docker's default seccomp profile (the containers project's copy that
---     Debian ships in golang-github-containers-common, resolved here for those capabilities and
---     this architecture, compiled by libseccomp);
---   * its own mount, pid, ipc, uts and cgroup namespaces, shared by its commands (a daemon one
---     command starts is there for the next, until the sandbox is destroyed); its own network
---     namespace (loopback only, or slirp4netns' outbound NAT with no route to the host's
---     loopback), never the host's;
---   * /proc with /proc/sys, /proc/sysrq-trigger, /proc/irq, /proc/bus and /proc/fs read-only
---     and /proc/kcore, /proc/keys, /proc/timer_list and the other paths Docker masks masked; no
---     /sys but its own cgroup limits, read-only (what the sandbox was granted is visible inside);
---   * every process inside the sandbox's cgroups (memory, pids, CPU), joined as root on the
---     host before anything enters the namespaces.

local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local errors = require('cseng.lib.errors')

local jail = {}

--- Seconds the init has to say it is ready (a cold page cache and a loaded machine included).
jail.INIT_TIMEOUT = 60

--- The launcher: jail/cseng-jail as `make` builds it, when it is there.
function jail.launcher()
  local p = require('cseng.sys').root() .. '/build/cseng-jail'
  return require('cseng.proc').which(p) and p or nil
end

--- The capabilities docker gives a container's root by default (moby's defaults).
jail.CAPS = { 'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE' }

--- Docker's masked paths (runc's defaults for a container) and read-only paths.
jail.MASKED = { '/proc/asound', '/proc/acpi', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
  '/proc/timer_stats', '/proc/sched_debug', '/proc/scsi', '/proc/interrupts' }
jail.READONLY = { '/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger' }

--- Where Debian's golang-github-containers-common puts the default seccomp profile.
jail.PROFILE = '/usr/share/containers/seccomp.json'

--- The subordinate id range for sandboxes: cseng's entry of /etc/subuid (and /etc/subgid).
jail.SUBID_NAME = 'cseng'
jail.SUBID_COUNT = 65536

local function subid_entries(path)
  local out = {}
  for line in (fs.read(path) or ''):gmatch('[^\n]+') do
    local name, start, count = line:match('^%s*([^:#%s]+):(%d+):(%d+)%s*$')
    if name then out[#out + 1] = { name = name, start = tonumber(start), count = tonumber(count) } end
  end
  return out
end

--- cseng's subordinate range: {uid=, gid=, count=} from /etc/subuid and /etc/subgid, or nil and why.
---@param root? string the directory holding subuid/subgid (default /etc)
function jail.subids(root)
  root = root or '/etc'
  local r = {}
  for _, kind in ipairs({ 'uid', 'gid' }) do
    for _, e in ipairs(subid_entries(root .. '/sub' .. kind)) do
      if e.name == jail.SUBID_NAME and e.count >= jail.SUBID_COUNT then r[kind] = e.start; break end
    end
    if not r[kind] then
      return nil, 'no "' .. jail.SUBID_NAME .. ':START:' .. jail.SUBID_COUNT .. '" entry in ' .. root .. '/sub' .. kind
        .. ' (`./cseng images rootfs` adds one)'
    end
  end
  r.count = jail.SUBID_COUNT
  return r
end

--- Register cseng's range in /etc/subuid and /etc/subgid when it has none: the first 65,536 ids at
--- or above 100000 (useradd's SUB_UID_MIN) that no entry of either file holds, as useradd picks
--- ranges for new users, so no later user is given the sandboxes' ids. Returns subids().
function jail.ensure_subids(root)
  root = root or '/etc'
  local have = jail.subids(root)
  if have then return have end
  local taken = {}
  for _, kind in ipairs({ 'uid', 'gid' }) do
    for _, e in ipairs(subid_entries(root .. '/sub' .. kind)) do taken[#taken + 1] = e end
  end
  local start = 100000
  local moved = true
  while moved do
    moved = false
    for _, e in ipairs(taken) do
      if start < e.start + e.count and e.start < start + jail.SUBID_COUNT then start = e.start + e.count; moved = true end
    end
  end
  for _, kind in ipairs({ 'uid', 'gid' }) do
    local path = root .. '/sub' .. kind
    local text = fs.read(path) or ''
    if not jail.subids(root) or not text:find('\n' .. jail.SUBID_NAME .. ':', 1, true) then
      if text ~= '' and text:sub(-1) ~= '\n' then text = text .. '\n' end
      local ok, err = fs.write(path, text .. string.format('%s:%d:%d\n', jail.SUBID_NAME, start, jail.SUBID_COUNT))
      if not ok then return nil, 'registering the sandboxes\' ids in ' .. path .. ': ' .. tostring(err) end
    end
  end
  return jail.subids(root)
end

local function kernel_version()
  local v = (fs.read('/proc/sys/kernel/osrelease') or ''):match('^(%d+%.%d+)')
  local a, b = (v or '0.0'):match('(%d+)%.(%d+)')
  return tonumber(a) * 1000 + tonumber(b)
end

local function version_of(s)
  local a, b = tostring(s):match('(%d+)%.(%d+)')
  return a and (tonumber(a) * 1000 + tonumber(b)) or 0
end

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

local ARCH = { x86_64 = { 'SCMP_ARCH_X86_64', 'amd64' }, aarch64 = { 'SCMP_ARCH_AARCH64', 'arm64' } }

--- The profile's rules that apply to a process with caps on this machine's architecture (the
--- includes/excludes of moby's profile format: caps, arches, minKernel), in the shape
--- cseng.seccomp.compile takes. profile: the decoded JSON; machine: uname -m.
function jail.resolve(profile, caps, machine)
  local have = {}
  for _, c in ipairs(caps) do have[c] = true end
  local arch = ARCH[machine] or ARCH.x86_64
  local arches = { arch[1] }
  for _, m in ipairs(profile.archMap or {}) do
    if m.architecture == arch[1] then
      for _, sub in ipairs(m.subArchitectures or {}) do arches[#arches + 1] = sub end
    end
  end
  local kernel = kernel_version()
  local function applies(r)
    local inc, exc = r.includes or {}, r.excludes or {}
    if type(inc.arches) == 'table' and #inc.arches > 0 and not contains(inc.arches, arch[2]) then return false end
    if type(exc.arches) == 'table' and contains(exc.arches, arch[2]) then return false end
    for _, c in ipairs(type(inc.caps) == 'table' and inc.caps or {}) do if not have[c] then return false end end
    for _, c in ipairs(type(exc.caps) == 'table' and exc.caps or {}) do if have[c] then return false end end
    if inc.minKernel and kernel < version_of(inc.minKernel) then return false end
    return true
  end
  local out = { default_action = profile.defaultAction, default_errno = math.tointeger(profile.defaultErrnoRet), arches = arches, syscalls = {} }
  for _, r in ipairs(profile.syscalls or {}) do
    if applies(r) then
      local args = {}
      for _, a in ipairs(type(r.args) == 'table' and r.args or {}) do
        args[#args + 1] = { index = math.tointeger(a.index), value = math.tointeger(a.value), value_two = math.tointeger(a.valueTwo), op = a.op }
      end
      out.syscalls[#out.syscalls + 1] = { names = r.names, action = r.action, errno = math.tointeger(r.errnoRet), args = args }
    end
  end
  return out
end

--- The compiled filter as a file under dir (made once per profile, capability set and machine):
--- its path, or nil, why, code.
function jail.filter_file(dir, machine)
  local text = fs.read(jail.PROFILE)
  if not text then
    return nil, 'the seccomp profile ' .. jail.PROFILE .. ' is missing: install golang-github-containers-common (make deps)',
      errors.ECONFIG
  end
  local key = crypto.sha256_hex(text .. '\0' .. table.concat(jail.CAPS, ',') .. '\0' .. tostring(machine)
    .. '\0' .. tostring(kernel_version())):sub(1, 16)
  local path = dir .. '/seccomp-' .. key .. '.bpf'
  if fs.exists(path) then return path end
  local ok, profile = pcall(cjson.decode, text)
  if not ok or type(profile) ~= 'table' then return nil, jail.PROFILE .. ': not a JSON seccomp profile', errors.ECONFIG end
  local bpf, err = require('cseng.seccomp').compile(jail.resolve(profile, jail.CAPS, machine))
  if not bpf then return nil, 'compiling the seccomp profile: ' .. tostring(err), errors.ECONFIG end
  local wok, werr = fs.write(path, bpf)
  if not wok then return nil, werr, errors.EIO end
  return path
end

--- The masked and read-only paths this machine has (bwrap fails on a missing bind source).
function jail.proc_paths()
  local masked, readonly = {}, {}
  for _, p in ipairs(jail.MASKED) do
    local st = fs.stat(p)
    if st then masked[#masked + 1] = { path = p, dir = st.type == 'dir' } end
  end
  for _, p in ipairs(jail.READONLY) do
    if fs.stat(p) then readonly[#readonly + 1] = p end
  end
  return { masked = masked, readonly = readonly }
end

--- The sandbox's init (jail/cseng-jail.c, `init`): the argv that makes its namespaces and mounts.
--- j: {launcher, idmap {uid, gid, count}, root (the sandbox's root on the host), net_host (share
---     the engine's network: test harnesses only), cgroups (dirs to join), cgroup_views ({{host
---     dir, inside path}}), paths (proc_paths()), binds ({'ro', host path, inside path} |
---     {'tmpfs', inside path}, mounted after /proc and /dev, before the masks)}
function jail.init_command(j)
  local a = { j.launcher, 'init', '--root', j.root,
    '--map', string.format('%d:%d:%d', j.idmap.uid, j.idmap.gid, j.idmap.count), '--hostname', 'sandbox' }
  local function add(...) for _, x in ipairs({ ... }) do a[#a + 1] = x end end
  if j.net_host then add('--net-host') end
  for _, d in ipairs(j.cgroups or {}) do add('--cgroup', d) end
  for _, b in ipairs(j.binds or {}) do
    if b[1] == 'tmpfs' then add('--tmpfs', b[2]) else add(b[1] == 'ro' and '--ro-bind' or '--bind', b[2] .. ':' .. b[3]) end
  end
  for _, p in ipairs(j.paths.readonly) do add('--readonly', p) end
  for _, m in ipairs(j.paths.masked) do add(m.dir and '--mask-dir' or '--mask', m.path) end
  for _, v in ipairs(j.cgroup_views or {}) do add('--sys', v[1] .. ':' .. v[2]) end
  return a
end

--- One command in a sandbox (jail/cseng-jail.c, `enter`): the argv that runs argv there.
--- j: {launcher, pid (the init's), userns (a path naming the init's user namespace: the
---     engine's handle), filter (the compiled seccomp filter's path), cgroups, cwd,
---     user ('root' | 'verifier' | uid)}
function jail.enter_command(j, argv)
  local a = { j.launcher, 'enter', '--pid', tostring(j.pid), '--userns', j.userns, '--seccomp', j.filter }
  for _, d in ipairs(j.cgroups or {}) do a[#a + 1] = '--cgroup'; a[#a + 1] = d end
  local user = j.user
  if user and user ~= 'root' and user ~= 0 then
    a[#a + 1] = '--user'; a[#a + 1] = tostring(user == 'verifier' and 1000 or tonumber(user) or 1000)
  end
  a[#a + 1] = '--cwd'; a[#a + 1] = j.cwd or '/'
  a[#a + 1] = '--'
  for _, x in ipairs(argv) do a[#a + 1] = x end
  return a
end

return jail
