--- The local provider: one container per trial on this machine (cseng's own launcher,
--- jail/cseng-jail.c; bubblewrap only in host mode without root).
---
--- Base root filesystem mode (the default): the sandbox's "/" is an overlayfs whose lowest layer
--- is the Debian base root filesystem `cseng images rootfs` builds with debootstrap (the content
--- of docker's cseng/debian:bookworm), above it the task's layer, above that the trial's own
--- writable layer (state persists between the exec calls of one trial). The task's layer is its
--- build: the recipe's steps (lua/cseng/workload/recipe.lua: COPY, RUN, ENV, WORKDIR, USER, ARG)
--- replayed (lua/cseng/workload/replay.lua) in a build sandbox over the base, kept under the
--- recipe's content key, and each RUN step's result kept too, so a rerun after a failed step
--- starts at that step (as docker build's cache does). Needs root.
--- Host mode (--host-root, or host_root = true): the host's /usr bound read-only, a synthetic
--- /etc, cseng stages COPY/ENV/WORKDIR and the runner records RUN steps as fidelity gaps.
---
--- Isolation (providers/shared/local_jail.lua; docs/providers/local.md): create starts the
--- sandbox's init in its own user namespace (root inside is an unprivileged subordinate uid
--- outside) with new mount/pid/ipc/uts/cgroup/network namespaces; every exec joins them
--- (as docker exec) with Docker's capabilities, seccomp profile and masked /proc paths. The
--- network (providers/shared/local_net.lua) is loopback only, or slirp4netns with no route to
--- the host's loopback.
--- Limits (providers/shared/local_limits.lua): every sandbox and build runs in cgroups (memory,
--- pids, CPU) and on a size-limited writable layer, with defaults when the task names none.
--- Warm: the prepared sandbox's writable layer (base mode) or root (host mode) becomes one more
--- lower layer of later trials.
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local namespace = require('cseng.namespace')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local task = require('cseng.task')
local clock = require('cseng.clock')
local jail = require('providers.shared.local_jail')
local limits = require('providers.shared.local_limits')
local net = require('providers.shared.local_net')
local adapter = require('providers.shared.adapter')

local M = {
  name = 'local',
  description = 'containers on this machine (no credentials, no network by default; no daemon)',
  -- its sandbox ids, and so the names of the directories under <root>/sandboxes/ (M.create)
  id_format = { pattern = '^cseng%-' .. string.rep('%x', 12) .. '$', example = 'cseng-0123456789ab', max = 18 },
  applies_dockerfile = true, -- base mode: the task's layer is built from the recipe (M.env_mode)
  credentials = {},
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 },
  -- fork: a copy of the sandbox's writable layer into each child (base mode; processes are not carried over)
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true, exec_stream = true, host_ports = true,
    snapshot = true, pause = true, pause_memory = true, egress = true, standard = true, fork = true },
  -- base images the Debian base root filesystem stands for (after the user's --image-map)
  image_map = { 'debian:bookworm*=cseng/debian:bookworm' },
}

-- The image the base root filesystem is (a recipe whose base is another image records a gap).
local BASE_IMAGE = 'cseng/debian:bookworm'

local DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
local VERIFIER_UID = 1000

-- /etc entries bound read-only from the host when present (host mode).
local ETC_BINDS = {
  'alternatives', 'ssl', 'ca-certificates', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime',
  'python3', 'python3.11', 'python3.12', 'bash.bashrc', 'inputrc', 'magic', 'magic.mime', 'mime.types',
  'protocols', 'services', 'debian_version', 'os-release', 'gai.conf', 'profile', 'perl', 'gitconfig',
}

-- A sandbox's cgroup name: "sb-<tag of the sandboxes' root>-<id>", so a sweep by a client with
-- another root (another run's, a spec's) never takes a live sandbox's cgroup.
local function cg_name(client, id) return 'sb-' .. client.cg_tag .. '-' .. id end

-- Where a sandbox's root is mounted: under /run/cseng-local/<tag>/ (root's, mode 0711), so the
-- namespace's owner uid that bubblewrap runs as can reach it whatever the sandboxes' folder's
-- parents allow (a spec's 0700 temporary directory, a user's home).
local function mount_point(client, id) return client.mnt .. '/' .. id end

-- A sandbox's writable layer in the store: derived from the id, never read from a file.
local function volume_of(client, id) return client.store.dir .. '/sb-' .. client.cg_tag .. '-' .. id end

-- Leftovers of dead runs: empty cgroups and writable layers (of this sandboxes' root) whose
-- sandbox directory is gone.
local function sweep(client)
  local prefix = 'sb-' .. client.cg_tag .. '-'
  local function gone(name) return name:sub(1, #prefix) == prefix and not fs.exists(client.base .. '/sandboxes/' .. name:sub(#prefix + 1)) end
  for _, tree in ipairs(client.cgroup and client.cgroup.trees or {}) do
    for _, name in ipairs(fs.list(tree) or {}) do
      if gone(name) then
        local procs = fs.read(tree .. '/' .. name .. '/cgroup.procs') or ''
        if not procs:match('%d') then fs.remove(tree .. '/' .. name) end
      end
    end
  end
  for _, name in ipairs(fs.list(client.store.dir) or {}) do
    if gone(name) then limits.remove_volume(client.store, client.store.dir .. '/' .. name) end
  end
  for _, name in ipairs(fs.list(client.mnt) or {}) do
    if not fs.exists(client.base .. '/sandboxes/' .. name) then
      namespace.umount(client.mnt .. '/' .. name, { lazy = true })
      fs.remove(client.mnt .. '/' .. name)
    end
  end
end

local function machine()
  local r = proc.run { argv = { 'uname', '-m' }, timeout = 10 }
  return r and util.trim(r.stdout) or 'x86_64'
end

--- Check that bwrap is present and works; choose where sandboxes live; set up the isolation
--- (the sandboxes' id range, the seccomp filter, the store of writable layers).
function M.connect(cfg)
  cfg = cfg or {}
  local bwrap = cfg.bwrap or os.getenv('CSENG_BWRAP') or '/usr/bin/bwrap'
  if not fs.exists(bwrap) then
    errors.raise(errors.ECONFIG, 'local provider: bubblewrap is not installed (' .. bwrap .. '); run make deps or apt-get install bubblewrap')
  end
  local base = cfg.root or os.getenv('CSENG_LOCAL_ROOT') or '/tmp/cseng-local'
  assert(fs.mkdir_p(base .. '/sandboxes'))
  assert(fs.mkdir_p(base .. '/warm'))
  local host_root = cfg.host_root == true or os.getenv('CSENG_LOCAL_HOST_ROOT') == '1'
  local images = require('cseng.images.rootfs')
  local rootfs = cfg.rootfs or os.getenv('CSENG_LOCAL_ROOTFS')
  local is_root = sys.uid() == 0
  local base_root
  local idmap
  if is_root then
    local why
    idmap, why = jail.subids()
    if not idmap then idmap, why = jail.ensure_subids() end
    if not idmap then errors.raise(errors.ECONFIG, 'local provider: ' .. tostring(why)) end
  end
  if host_root then
    -- host mode: /usr from the host, or from a user-given root filesystem
    if rootfs and not fs.exists(rootfs .. '/usr') then
      errors.raise(errors.ECONFIG, 'local provider: rootfs ' .. rootfs .. ' has no usr/ directory')
    end
  else
    if not is_root then
      errors.raise(errors.ECONFIG, 'local provider: the base root filesystem mode needs root (overlayfs mounts, the '
        .. "sandboxes' user namespaces); run as root, or pass --host-root to run on the host's /usr")
    end
    if rootfs then
      base_root = rootfs
      local st = fs.stat(rootfs)
      if not fs.exists(rootfs .. '/usr/bin') or not fs.exists(rootfs .. '/etc/passwd') then
        errors.raise(errors.ECONFIG, 'local provider: the Debian base root filesystem is absent (' .. rootfs .. '): build it with '
          .. '`./cseng images rootfs` (debootstrap, needs root; make check and make demo do), or pass --host-root '
          .. "to run on the host's /usr (RUN steps are then recorded as fidelity gaps, not run)")
      end
      if st and st.uid ~= idmap.uid then
        errors.raise(errors.ECONFIG, 'local provider: rootfs ' .. rootfs .. ' must be owned by the sandboxes\' root (uid '
          .. idmap.uid .. ', from /etc/subuid), as `cseng images rootfs` makes it')
      end
    else
      local plain = images.rootfs_dir('bookworm')
      if not fs.exists(plain .. '/usr/bin') or not fs.exists(plain .. '/etc/passwd') then
        errors.raise(errors.ECONFIG, 'local provider: the Debian base root filesystem is absent (' .. plain .. '): build it with '
          .. '`./cseng images rootfs` (debootstrap, needs root; make check and make demo do), or pass --host-root '
          .. "to run on the host's /usr (RUN steps are then recorded as fidelity gaps, not run)")
      end
      local err
      base_root, err = images.for_userns('bookworm', idmap)
      if not base_root then errors.raise(errors.ECONFIG, 'local provider: ' .. tostring(err)) end
    end
    rootfs = nil
  end
  local cache = images.cache_dir()
  local store = is_root and limits.store { dir = cfg.store or (cache .. '/local-store'), image = cache .. '/local-store.img',
    fallback = base .. '/volumes' } or { dir = base .. '/volumes', enforced = false, why = 'storage limits need root' }
  assert(fs.mkdir_p(store.dir))
  local layers = cfg.layers or os.getenv('CSENG_LOCAL_LAYERS') or (store.enforced and (store.dir .. '/layers') or (cache .. '/local-layers'))
  if base_root then assert(fs.mkdir_p(layers)); assert(fs.mkdir_p(store.dir .. '/builds')) end
  local marker = base_root and (fs.read(base_root .. '/.cseng-rootfs') or '')
  local mst = base_root and fs.stat(base_root .. '/.cseng-rootfs')
  local client = {
    bwrap = bwrap,
    base = base,
    rootfs = rootfs,
    host_root = host_root,
    base_root = base_root,
    -- layers are keyed by the recipe and the base they were built on (a rebuilt base rebuilds them)
    base_id = base_root and crypto.sha256_hex(base_root .. '\0' .. marker .. '\0' .. tostring(mst and mst.mtime)):sub(1, 16),
    layers = layers,
    building = {},
    is_root = is_root,
    idmap = idmap,
    store = store,
    -- a test harness's fakes stand for cloud sandboxes that reach the host's services: with
    -- host_network their network sandboxes share the host's namespace (never the default)
    host_network = cfg.host_network == true,
    default_limits = cfg.default_limits,
    cgroup = cfg.cgroups ~= false and limits.detect_cgroup() or nil,
    cg_tag = crypto.sha256_hex(sys.realpath(base) or base):sub(1, 8),
    keep_usr_local = cfg.keep_usr_local or os.getenv('CSENG_LOCAL_KEEP_USR_LOCAL') == '1',
  }
  client.mnt = (is_root and '/run/cseng-local/' or (base .. '/mnt/')) .. client.cg_tag
  assert(fs.mkdir_p(client.mnt))
  if is_root then
    fs.chmod('/run/cseng-local', tonumber('711', 8))
    fs.chmod(client.mnt, tonumber('711', 8))
    local filter, ferr, fcode = jail.filter_file(base, machine())
    if not filter then errors.raise(fcode or errors.ECONFIG, 'local provider: ' .. tostring(ferr)) end
    client.filter = filter
    client.proc_paths = jail.proc_paths()
    client.launcher = jail.launcher()
    if not client.launcher then
      errors.raise(errors.ECONFIG, 'local provider: build/cseng-jail is missing (it starts every sandbox as root): run make')
    end
  end
  sweep(client)
  return client
end
-- ---- files the engine writes into a sandbox ------------------------------------------

-- Owned by the sandbox's root (the host's idmap.uid), so root inside may change them.
local function own(client, path)
  if client.idmap then fs.lchown(path, client.idmap.uid, client.idmap.gid) end
end

local function mkdirs(client, root, rel)
  local cur = root
  for part in rel:gmatch('[^/]+') do
    cur = cur .. '/' .. part
    if not fs.lstat(cur) then
      errors.check(nil, fs.mkdir_p(cur))
      own(client, cur)
    end
  end
  return cur
end

local function write_owned(client, path, data)
  fs.write(path, data)
  own(client, path)
end

-- /etc/hostname, /etc/hosts, and with the network a resolv.conf (slirp4netns' resolver, or the
-- host's when the sandbox shares the host's network).
local function write_host_files(client, root, hostname, network)
  write_owned(client, root .. '/etc/hostname', hostname .. '\n')
  write_owned(client, root .. '/etc/hosts', '127.0.0.1 localhost ' .. hostname .. '\n::1 localhost\n')
  if network then
    write_owned(client, root .. '/etc/resolv.conf', client.host_network and (fs.read('/etc/resolv.conf') or net.RESOLV) or net.RESOLV)
  end
end

local function make_root(client, root, hostname, network)
  for _, d in ipairs({ 'tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'workspace', 'run', 'cseng', 'etc' }) do
    mkdirs(client, root, d)
  end
  fs.chmod(root .. '/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/var/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/home/cseng', tonumber('777', 8))
  for _, l in ipairs({ { 'usr/bin', 'bin' }, { 'usr/sbin', 'sbin' }, { 'usr/lib', 'lib' }, { 'usr/lib64', 'lib64' } }) do
    if not fs.lstat(root .. '/' .. l[2]) then fs.symlink(l[1], root .. '/' .. l[2]); own(client, root .. '/' .. l[2]) end
  end
  write_owned(client, root .. '/etc/passwd', table.concat({
    'root:x:0:0:root:/root:/bin/bash',
    'cseng:x:' .. VERIFIER_UID .. ':' .. VERIFIER_UID .. ':cseng verifier:/home/cseng:/bin/bash',
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin', '' }, '\n'))
  write_owned(client, root .. '/etc/group', table.concat({
    'root:x:0:', 'cseng:x:' .. VERIFIER_UID .. ':', 'nogroup:x:65534:', '' }, '\n'))
  write_owned(client, root .. '/etc/nsswitch.conf', 'passwd: files\ngroup: files\nhosts: files dns\n')
  write_host_files(client, root, hostname, network)
end

-- What every sandbox on the base root filesystem gets in its own writable layer.
local function base_root_files(client, root, network)
  for _, d in ipairs({ 'tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'cseng' }) do
    mkdirs(client, root, d)
  end
  fs.chmod(root .. '/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/home/cseng', tonumber('777', 8))
  write_host_files(client, root, 'sandbox', network)
end
-- How layers are built: a change rebuilds them.
local LAYER_VERSION = 3

-- The layer directory of a recipe on this client's base (complete when layer.json exists). The
-- network a build had is part of its layer's key, as docker's build cache keys on it: a
-- --build-network off run never reuses a layer whose steps had the network.
local function layer_dir(client, key, network)
  return client.layers .. '/' .. crypto.sha256_hex(key .. '\0' .. client.base_id .. '\0' .. LAYER_VERSION
    .. (network == false and '\0nonet' or '')):sub(1, 32)
end
-- ---- namespaces, networks and limits of one sandbox --------------------------------------

-- The sandbox's cgroups, its init (jail/cseng-jail.c: the process that holds its namespaces
-- and mounts), its network (slirp4netns when it has the network, relays for its host_ports),
-- recorded on sb. Returns true or nil, why, code.
local function isolate(client, sb, lim, host_ports)
  if not client.idmap then return true end
  local shared_net = sb.network and client.host_network
  local own_net = not shared_net
  local cg = limits.cgroup(client.cgroup, cg_name(client, sb.id), lim)
  sb.cgroups, sb.cgroup_views = cg.dirs, cg.views
  sb.limits = {
    cpus = cg.applied.cpus, memory_mb = cg.applied.memory_mb, pids = cg.applied.pids,
    storage_mb = client.store.enforced and lim.storage_mb or nil,
    storage_enforced = client.store.enforced, storage_gap = client.store.why,
    source = lim.source,
  }
  local log = sb.dir .. '/init.log'
  local p, err, code = proc.spawn { argv = jail.init_command {
      launcher = client.launcher, idmap = client.idmap, root = sb.root, net_host = shared_net or nil,
      cgroups = sb.cgroups, cgroup_views = sb.cgroup_views, paths = client.proc_paths, binds = sb.binds,
    }, stdout = 'pipe', stderr = log }
  if not p then return nil, 'starting the sandbox\'s init: ' .. tostring(err), code end
  sb.init = p
  local line, lerr, lcode = p:read_line(jail.INIT_TIMEOUT)
  local pid = line and math.tointeger(tonumber(line:match('^ready (%d+)$')))
  if not pid then
    local why = util.trim(fs.read(log) or '')
    return nil, 'the sandbox\'s init: ' .. (why ~= '' and why or tostring(line or lerr)), lcode == 'ETIMEDOUT' and lcode or errors.EIO
  end
  sb.init_pid = pid
  local ns, nerr, ncode = namespace.open(pid, { net = own_net })
  if not ns then return nil, 'the sandbox\'s namespaces: ' .. tostring(nerr), ncode end
  sb.ns = ns
  if own_net then
    if sb.network then
      local h, serr, scode = net.start(ns, sb.dir)
      if not h then return nil, 'the sandbox\'s network: ' .. tostring(serr), scode end
      sb.slirp = h
    end
    local relays, rerr, rcode = net.relays(ns, host_ports)
    if not relays then return nil, 'the sandbox\'s host ports: ' .. tostring(rerr), rcode end
    sb.relays = relays
  end
  return true
end

-- Stop what isolate started: the relays, the network, then the init, whose end ends every
-- process of the sandbox (its pid namespace goes with it) and lets go of its mounts.
local function release(sb)
  for _, r in ipairs(sb.relays or {}) do r:close() end
  sb.relays = nil
  net.stop(sb.slirp)
  sb.slirp = nil
  if sb.init then
    sb.init:kill('KILL')
    sb.init:wait(10)
    sb.init:close()
    sb.init = nil
  end
  if sb.ns then sb.ns:close(); sb.ns = nil end
end

local exec_env

-- The command that runs bash -c cmd in sb.
local function command(client, sb, cmd, opts)
  local argv = { '/bin/bash', '-c', cmd }
  if client.idmap then
    return jail.enter_command({ launcher = client.launcher, pid = sb.init_pid, userns = sb.ns:path('user'),
      filter = client.filter, cgroups = sb.cgroups, cwd = opts.cwd or sb.workdir, user = opts.user }, argv)
  end
  -- host mode without root: bubblewrap's own unprivileged user namespace (the caller's uid
  -- mapped, nothing else), the host's /usr read-only; no cgroups (they need root)
  local a = { client.bwrap, '--die-with-parent', '--new-session', '--unshare-all' }
  local function add(...) for _, x in ipairs({ ... }) do a[#a + 1] = x end end
  if sb.network then add('--share-net') end
  add('--hostname', 'sandbox', '--bind', sb.root, '/')
  for _, b in ipairs(sb.binds or {}) do
    if b[1] == 'tmpfs' then add('--tmpfs', b[2]) else add('--ro-bind', b[2], b[3]) end
  end
  add('--proc', '/proc', '--dev', '/dev')
  local user = opts.user
  if user and user ~= 'root' and user ~= 0 then
    local uid = user == 'verifier' and VERIFIER_UID or tonumber(user) or VERIFIER_UID
    add('--uid', tostring(uid), '--gid', tostring(uid))
  end
  add('--chdir', opts.cwd or sb.workdir)
  for _, x in ipairs(argv) do a[#a + 1] = x end
  return a
end

-- Host mode's binds: the host's (or the user's root filesystem's) /usr and some of /etc.
local function host_binds(client, network)
  local b = { { 'ro', (client.rootfs or '') .. '/usr', '/usr' } }
  -- the host's /usr/local holds tools and Python packages no task image has
  if not client.rootfs and not client.keep_usr_local then b[#b + 1] = { 'tmpfs', '/usr/local' } end
  if client.rootfs and fs.exists(client.rootfs .. '/etc/alternatives') then
    b[#b + 1] = { 'ro', client.rootfs .. '/etc/alternatives', '/etc/alternatives' }
  end
  for _, e in ipairs(ETC_BINDS) do
    local src = (client.rootfs or '') .. '/etc/' .. e
    if fs.exists(src) and (e ~= 'resolv.conf' or network) then b[#b + 1] = { 'ro', src, '/etc/' .. e } end
  end
  return b
end
-- ---- builds --------------------------------------------------------------------------------

-- The chain of step keys of a recipe: key[i] names the layer after step i (what docker's build
-- cache keys a step by: the steps before it, the step itself, the build context for COPY, and
-- here the build's network setting and base).
local function step_keys(client, rcp, network)
  local keys, prev = {}, crypto.sha256_hex(client.base_id .. '\0' .. LAYER_VERSION .. '\0' .. tostring(rcp.base))
  local canonical = require('cseng.workload.recipe')._canonical
  for i, s in ipairs(rcp.steps or {}) do
    local st = {}
    for k, v in pairs(s) do if k ~= 'line' then st[k] = v end end
    prev = crypto.sha256_hex(prev .. '\0' .. canonical(st) .. '\0' .. (s.op == 'COPY' and tostring(rcp.context_sha256) or '')
      .. '\0' .. (network and 'net' or 'nonet'))
    keys[i] = prev
  end
  return keys
end

local function step_dir(client, key) return client.store.dir .. '/builds/step-' .. key:sub(1, 32) end
-- ---- sandboxes -----------------------------------------------------------------------------

-- The lower layers of a warm artifact made in base mode (artifact.json beside its upper/).
local function artifact_lowers(artifact)
  local ok, meta = pcall(cjson.decode, fs.read(artifact .. '/artifact.json') or '')
  if not ok or type(meta) ~= 'table' or type(meta.lowers) ~= 'table' then return nil end
  local lowers = { artifact .. '/upper' }
  for _, l in ipairs(meta.lowers) do lowers[#lowers + 1] = l end
  return lowers
end

local function new_id() return 'cseng-' .. crypto.hex(crypto.random_bytes(6)) end

-- A sandbox's record in its directory (what list, cleanup and destroy read): its id and labels.
local function write_record(dir, id, labels, created)
  return fs.write(dir .. '/sandbox.json', cjson.encode({ id = id, labels = labels or {}, created = created or os.time() }))
end

-- A failed create leaves nothing: what isolate and the mounts made is undone.
local function abandon(client, sb)
  release(sb)
  if sb.overlay or sb.bound then namespace.umount(sb.root, { lazy = true }) end
  fs.remove(sb.root)
  for _, d in ipairs(sb.cgroups or {}) do limits.remove_cgroup(d) end
  if sb.vol then limits.remove_volume(client.store, sb.vol) end
  fs.remove_tree(sb.dir)
end
-- A sandbox on the base root filesystem: the overlay of its own writable layer (a size-limited
-- volume in the store) over the warm artifact or the task's layer over the base. from (a fork):
-- {lowers, and either id with snapshot (the child's id, whose volume is already a snapshot of the
-- parent's, made while the parent was stopped) or upper (a copy of the parent's writable layer)}:
-- the parent's lower layers, and what becomes the start of this one's writable layer.
local function create_on_base(client, spec, from)
  local id = from and from.id or new_id()
  local dir = client.base .. '/sandboxes/' .. id
  errors.check(nil, fs.mkdir_p(dir))
  errors.check(nil, fs.mkdir_p(mount_point(client, id)))
  local rcp = spec.recipe or {}
  local sb = {
    id = id, dir = dir, root = mount_point(client, id), env = util.merge(rcp.env, spec.env),
    workdir = spec.workdir or rcp.workdir or '/workspace', network = spec.network and true or false,
    labels = spec.labels or {}, cpus = spec.cpus, memory_mb = spec.memory_mb, created = os.time(), base_mode = true,
    code_path = 'cseng-jail init on the Debian root filesystem, commands by cseng-jail enter',
  }
  write_record(dir, id, sb.labels, sb.created)
  local lowers
  if from then
    lowers = from.lowers
  elseif spec.warm_artifact then
    lowers = artifact_lowers(spec.warm_artifact)
    if not lowers then
      fs.remove_tree(dir)
      return nil, 'warm artifact ' .. spec.warm_artifact .. ' is not a prepared layer (run cseng prewarm --provider local)', 'EARTIFACT'
    end
  else
    lowers = { spec.layer, client.base_root }
    if not spec.layer then lowers = { client.base_root } end
  end
  sb.lowers = lowers
  local lim = limits.resolve(util.merge({ default_limits = client.default_limits }, spec))
  local vol = volume_of(client, id)
  local vok, verr, vcode
  if from and from.snapshot then -- the parent's layer, copy-on-write, under this sandbox's own limit
    vok, verr, vcode = limits.volume_limit(client.store, vol, lim.storage_mb)
    fs.remove_tree(vol .. '/work') -- the parent's overlay work directory as it was: a new one below
  else
    vok, verr, vcode = limits.volume(client.store, vol, lim.storage_mb)
  end
  if not vok then
    if from and from.snapshot then limits.remove_volume(client.store, vol) end
    fs.remove_tree(dir); return nil, 'the sandbox\'s writable layer: ' .. tostring(verr), vcode
  end
  sb.vol = vol
  errors.check(nil, fs.mkdir_p(vol .. '/upper'))
  errors.check(nil, fs.mkdir_p(vol .. '/work'))
  own(client, vol .. '/upper')
  if from and from.upper then -- cp -a keeps owners, modes, xattrs and the overlay's whiteouts
    local r = proc.run { argv = { 'cp', '-a', from.upper .. '/.', vol .. '/upper/' }, timeout = 600, tail_bytes = 65536 }
    if not r or r.code ~= 0 then
      abandon(client, sb)
      return nil, 'copying the parent\'s writable layer: ' .. util.trim(r and r.stderr or ''), 'EIO'
    end
  end
  local ok, err = namespace.mount_overlay(sb.root, lowers, vol .. '/upper', vol .. '/work')
  if not ok then abandon(client, sb); return nil, 'mounting the sandbox root (overlayfs): ' .. tostring(err), 'EMOUNT' end
  sb.overlay = true
  base_root_files(client, sb.root, sb.network)
  mkdirs(client, sb.root, sb.workdir)
  local iok, ierr, icode = isolate(client, sb, lim, spec.host_ports)
  if not iok then abandon(client, sb); return nil, ierr, icode end
  return sb
end
--- Create a sandbox. spec: {id_prefix, labels, env, workdir, network, cpus, memory_mb, disk_mb,
--- default_limits, host_ports (host loopback ports the sandbox reaches at 127.0.0.1:P),
--- warm_artifact (a prepared root from M.snapshot), layer (from M.build), recipe}.
function M.create(client, spec)
  if not client.host_root then return create_on_base(client, spec) end
  local id = new_id()
  local dir = client.base .. '/sandboxes/' .. id
  errors.check(nil, fs.mkdir_p(dir))
  local sb = {
    id = id, dir = dir, root = dir .. '/root', env = spec.env or {}, workdir = spec.workdir or '/workspace',
    network = spec.network and true or false, labels = spec.labels or {},
    cpus = spec.cpus, memory_mb = spec.memory_mb, created = os.time(), code_path = 'bubblewrap on the host\'s /usr (--host-root)',
  }
  write_record(dir, id, sb.labels, sb.created)
  local root = sb.root -- the files; sb.root becomes its mount point below when the jail is on
  if spec.warm_artifact then
    local lower = spec.warm_artifact
    if not fs.exists(lower .. '/etc/passwd') then
      fs.remove_tree(dir)
      return nil, 'warm artifact ' .. lower .. ' is not a prepared root (run cseng prewarm --provider local)', 'EARTIFACT'
    end
    local ok
    if client.is_root then
      errors.check(nil, fs.mkdir_p(root)); errors.check(nil, fs.mkdir_p(dir .. '/upper')); errors.check(nil, fs.mkdir_p(dir .. '/work'))
      own(client, dir .. '/upper')
      ok = namespace.mount_overlay(root, { lower }, dir .. '/upper', dir .. '/work')
    end
    if ok then
      sb.overlay = true
    else
      fs.remove_tree(root)
      local cok, err = fs.copy_tree(lower, root)
      if not cok then fs.remove_tree(dir); return nil, 'cannot copy the warm root: ' .. tostring(err), 'EIO' end
      sb.warm_copy = true
    end
  else
    errors.check(nil, fs.mkdir_p(root))
    own(client, root)
    make_root(client, root, 'sandbox', sb.network)
  end
  mkdirs(client, root, sb.workdir)
  sb.binds = host_binds(client, sb.network)
  if client.idmap then
    local mp = mount_point(client, id)
    errors.check(nil, fs.mkdir_p(mp))
    local bok, berr = namespace.bind_mount(root, mp)
    if not bok then abandon(client, sb); return nil, tostring(berr), 'EMOUNT' end
    sb.files, sb.root, sb.bound = root, mp, true
  end
  local lim = limits.resolve(util.merge({ default_limits = client.default_limits }, spec))
  local ok, err, code = isolate(client, sb, lim, spec.host_ports)
  if not ok then abandon(client, sb); return nil, err, code end
  return sb
end
exec_env = function(sb, opts)
  local non_root = opts.user and opts.user ~= 'root' and opts.user ~= 0
  local env = {
    PATH = DEFAULT_PATH, HOME = non_root and '/home/cseng' or '/root', LANG = 'C.UTF-8',
    TERM = 'dumb', HOSTNAME = 'sandbox', USER = non_root and 'cseng' or 'root',
  }
  for k, v in pairs(sb.env or {}) do env[k] = v end
  for k, v in pairs(opts.env or {}) do env[k] = v end
  return env
end

-- A sandbox known only by its id (from a log: cleanup, resume) has no namespaces of this
-- process: it can be destroyed, not run in.
local function runnable(client, sb)
  if sb.destroyed then return nil, 'sandbox ' .. tostring(sb.id) .. ' is gone (destroyed)', 'ESANDBOX' end
  if client.idmap and not sb.init then return nil, 'sandbox ' .. tostring(sb.id) .. ' was not created by this process', 'ESTALE' end
  return true
end

-- The limits the sandbox's cgroups report hit since the last look: added to res.limit_hits.
local function note_hits(sb, res)
  if not sb.cgroups or #sb.cgroups == 0 then return end
  local now = limits.hits(nil, sb.cgroups)
  local seen = sb.hits_seen or {}
  for k, n in pairs(now) do
    if n > (seen[k] or 0) then
      res.limit_hits = res.limit_hits or {}
      res.limit_hits[k] = n - (seen[k] or 0)
    end
  end
  sb.hits_seen = now
end
local STREAM_POLL_S = 0.05
local streams = 0

-- the bytes of a file from offset on (nil when it cannot be read)
local function read_from(path, offset)
  local f = io.open(path, 'rb')
  if not f then return nil end
  f:seek('set', offset)
  local s = f:read('a')
  f:close()
  return s
end

-- exec with opts.on_output(chunk, stream): the command's stdout and stderr go to files beside
-- the sandbox (outside its root), read as they grow (every STREAM_POLL_S seconds, while the
-- command runs, and once more after it exits) and handed over in order, stream "stdout" or
-- "stderr". When on_output returns false the command is stopped there: its process group is
-- signalled (the launcher passes TERM on to the command's process group inside the sandbox, KILL follows) and the result says
-- `stopped = true`. The result has proc.run's shape (code, signal, stdout and stderr tails,
-- elapsed, timed_out). The capability `exec_stream` says an adapter has this.
local function exec_streaming(sb, argv, opts)
  streams = streams + 1
  local base = string.format('%s/exec-%d-%d', sb.dir, sys.pid(), streams)
  local out_path, err_path, in_path = base .. '.stdout', base .. '.stderr', nil
  if opts.stdin then
    in_path = base .. '.stdin'
    local ok, werr, wcode = fs.write(in_path, opts.stdin)
    if not ok then return nil, werr, wcode end
  end
  local t0 = clock.now()
  local p <close>, err, code = proc.spawn { argv = argv, env = exec_env(sb, opts), stdin = in_path or 'null',
    stdout = out_path, stderr = err_path }
  if not p then return nil, err, code end
  local deadline = t0 + math.floor((opts.timeout or 600) * 1e9)
  local at = { stdout = 0, stderr = 0 }
  local stopped, timed_out, exit = false, false, nil
  local function pump()
    for _, name in ipairs({ 'stdout', 'stderr' }) do
      local chunk = read_from(name == 'stdout' and out_path or err_path, at[name])
      if chunk and #chunk > 0 then
        at[name] = at[name] + #chunk
        if not stopped and opts.on_output(chunk, name) == false then stopped = true end
      end
    end
  end
  while not exit do
    pump()
    if stopped or clock.now() >= deadline then
      timed_out = not stopped
      p:kill('TERM') -- passed on to the command's process group in the sandbox
      exit = p:wait(stopped and 2 or 10)
      if not exit then p:kill('KILL'); exit = p:wait() end
    else
      local e, _, wcode = p:wait(STREAM_POLL_S)
      if e then exit = e elseif wcode ~= 'ETIMEDOUT' then exit = { code = -1 } end
    end
  end
  pump() -- what it wrote last
  local keep = opts.tail_bytes or (1 << 20)
  local res = { code = exit.code, signal = exit.signal, elapsed = (clock.now() - t0) / 1e9,
    timed_out = timed_out or nil, stopped = stopped or nil,
    stdout = util.tail(read_from(out_path, math.max(0, at.stdout - keep)) or '', keep),
    stderr = util.tail(read_from(err_path, math.max(0, at.stderr - keep)) or '', keep) }
  fs.remove(out_path); fs.remove(err_path)
  if in_path then fs.remove(in_path) end
  note_hits(sb, res)
  return res
end
--- A phase's network policy (Harbor's network_mode / allowed_hosts: {mode, hosts}) on a live
--- sandbox: an egress filter in the sandbox's own network namespace
--- (providers/shared/local_net.lua: net.filter), replaced at each phase. Returns {enforced,
--- allowed, unenforced} or nil, why (a sandbox without a namespace of its own: host mode without
--- root, or the host's network shared).
function M.network_policy(client, sb, policy)
  local netns = sb.ns and sb.ns:path('net')
  if not netns then
    if not client.idmap and not sb.network and policy.mode == 'no-network' then
      return { enforced = 'no network in the sandbox', allowed = {}, unenforced = {} }
    end
    if sb.ns then return nil, 'the sandbox shares the host\'s network (host_network): nothing to filter' end
    return nil, 'the sandbox has no network namespace of its own to filter'
  end
  if policy.mode ~= 'no-network' and not sb.slirp then
    return nil, 'the sandbox was made without the network'
  end
  local r, err, code = net.filter(netns, policy)
  if not r then return nil, err, code end
  r.enforced = 'egress filter in the sandbox\'s network namespace'
  return r
end

--- Run a shell command in the sandbox. opts: {cwd, env, user ('root'|'verifier'|uid), timeout,
--- stdin, on_output}. The result has proc.run's shape, plus limit_hits ({memory = OOM kills,
--- pids = forks refused}) when the command ran into the sandbox's limits.
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local rok, rerr, rcode = runnable(client, sb)
  if not rok then return nil, rerr, rcode end
  local argv = command(client, sb, cmd, opts)
  if opts.on_output then return exec_streaming(sb, argv, opts) end
  local res, err, code = proc.run {
    argv = argv, env = exec_env(sb, opts), stdin = opts.stdin, timeout = opts.timeout or 600,
    tail_bytes = opts.tail_bytes or (1 << 20),
  }
  if not res then return nil, err, code end
  note_hits(sb, res)
  return res
end
-- Refuse to write through a symlink the sandbox may have planted: every component of the
-- target path below the sandbox root must be a real directory (or not exist yet; it is made,
-- owned by the sandbox's root).
local function safe_target(client, root, path)
  local cur = root
  for part in path:gmatch('[^/]+') do
    if part == '..' then return nil, path .. ': ".." in a target path', 'EUNSAFE' end
    cur = cur .. '/' .. part
    local st = fs.lstat(cur)
    if st and st.type ~= 'dir' then return nil, path .. ': ' .. part .. ' is a ' .. st.type .. ', not a directory', 'EUNSAFE' end
    if not st then
      local ok, err, code = fs.mkdir_p(cur)
      if not ok then return nil, err, code end
      own(client, cur)
    end
  end
  return cur
end

--- Unpack a tar (bytes) into a directory of the sandbox (its entries owned by their ids inside
--- the sandbox: root's files are the sandbox root's).
function M.put(client, sb, dir, tar_bytes)
  local target, err = safe_target(client, sb.root, dir)
  if not target then return nil, err, 'EUNSAFE' end
  local ok, xerr, code = archive.extract(tar_bytes, target, { id_offset = client.idmap and client.idmap.uid or nil })
  if not ok then return nil, xerr, code end
  return true
end

--- Read a file of the sandbox (resolved inside it), up to 256 MiB or the engine's response cap
--- where that is larger (the download workload raises it to its largest size; 0 = no cap).
function M.get(client, sb, path)
  local cap = adapter.max_body
  local limit = (cap == 0 and math.maxinteger) or math.max(256 * 1048576, cap or 0)
  local res, err, code = M.exec(client, sb, 'cat -- ' .. util.shell_quote(path), { timeout = 120, cwd = '/', tail_bytes = limit })
  if not res then return nil, err, code end
  if res.code ~= 0 then return nil, path .. ': ' .. util.trim(res.stderr), 'ENOENT' end
  if (res.stdout_dropped or 0) > 0 then return nil, path .. ': larger than ' .. limit .. ' bytes', 'EFBIG' end
  return res.stdout
end

local function rm_cgroups(client, sb)
  if not client.cgroup then return true end
  local dirs = sb.cgroups
  if not dirs then -- a sandbox known only by id (cleanup, resume)
    dirs = {}
    for _, tree in ipairs(client.cgroup.trees) do dirs[#dirs + 1] = tree .. '/' .. cg_name(client, sb.id) end
  end
  for _, d in ipairs(dirs) do
    local ok, err, code = limits.remove_cgroup(d)
    if not ok then return nil, err, code end
  end
  return true
end

-- The directory destroy may remove for sb, or nil when there is none (gone already), or nil, why:
-- a destroy can come from a log another machine wrote (cleanup, --resume), so the id must have
-- local's format, the directory must be <root>/sandboxes/<id> itself (no symbolic link on the
-- way), and its own sandbox.json must name that id, before anything is unmounted or removed.
local function own_dir(client, sb)
  local id = sb.id
  if type(id) ~= 'string' or not id:match(M.id_format.pattern) then
    return nil, string.format('%s is not a local sandbox id (like %s)', cjson.encode(tostring(id)), M.id_format.example)
  end
  local boxes = client.base .. '/sandboxes'
  local dir = boxes .. '/' .. id
  if sb.dir and sb.dir ~= dir then return nil, id .. ': its directory ' .. tostring(sb.dir) .. ' is not ' .. dir end
  local st = fs.lstat(dir)
  if not st then return nil end
  if st.type ~= 'dir' then return nil, id .. ': ' .. dir .. ' is not a directory (' .. st.type .. ')' end
  local real, rboxes = sys.realpath(dir), sys.realpath(boxes)
  if not real or not rboxes or real ~= rboxes .. '/' .. id then
    return nil, id .. ': ' .. dir .. ' resolves outside ' .. boxes
  end
  local mst = fs.lstat(dir .. '/sandbox.json')
  local text = mst and mst.type == 'file' and fs.read(dir .. '/sandbox.json')
  if not text then return nil, id .. ': ' .. dir .. ' has no sandbox.json: not a sandbox of this provider' end
  local ok, meta = pcall(cjson.decode, text)
  if not ok or type(meta) ~= 'table' or meta.id ~= id then
    return nil, string.format('%s: its sandbox.json names %s, not this sandbox', id,
      ok and type(meta) == 'table' and tostring(meta.id) or 'nothing (malformed)')
  end
  return dir
end

--- Destroy a sandbox: stop its network, unmount, remove its writable layer, directory and
--- cgroups. Idempotent. Refused (EUNSAFE, nothing touched) unless the sandbox is one of this
--- root's own (own_dir).
function M.destroy(client, sb)
  local dir, why = own_dir(client, sb)
  if why then return nil, 'local: ' .. why .. ': not removed', 'EUNSAFE' end
  release(sb)
  sb.destroyed = true
  local mp = mount_point(client, sb.id)
  if fs.exists(mp) then
    namespace.umount(mp, { lazy = true })
    fs.remove(mp)
  end
  if dir and fs.exists(dir .. '/root') then namespace.umount(dir .. '/root', { lazy = true }) end
  local cok, cerr = rm_cgroups(client, sb)
  if not cok then return nil, cerr, 'EBUSY' end
  local vol = sb.vol or volume_of(client, sb.id)
  local vok, verr = limits.remove_volume(client.store, vol)
  if not vok then return nil, verr, 'EIO' end
  if dir and fs.exists(dir) then
    local ok, err = fs.remove_tree(dir)
    if not ok then return nil, err, 'EIO' end
  end
  return true
end

--- Sandboxes that still exist, optionally only those whose labels match.
function M.list(client, filter)
  local out = {}
  for _, name in ipairs(fs.list(client.base .. '/sandboxes') or {}) do
    local meta = fs.read(client.base .. '/sandboxes/' .. name .. '/sandbox.json')
    local ok, rec = pcall(cjson.decode, meta or '')
    if ok and type(rec) == 'table' then
      local match = true
      for k, v in pairs((filter and filter.labels) or {}) do
        if (rec.labels or {})[k] ~= v then match = false end
      end
      if match then out[#out + 1] = { id = rec.id, labels = rec.labels, created = rec.created } end
    end
  end
  return out
end
--- Build (or find) the task's layer: the recipe's steps replayed over the base root filesystem
--- in a build sandbox (its own network through slirp4netns unless req.network == false), kept
--- under the content key; each RUN step's result is kept as well (when the store is btrfs), so
--- a later build of a recipe that shares its first steps starts after them.
--- req: {recipe, timeout, network, limits, default_limits, step_cache (false: neither read nor
--- keep the step snapshots, a cold build however often it runs)}. Returns {image, layer, cache_hit,
--- log_tail, content_key, steps, cached_steps} or nil, {message, log}, "EBUILD" | "ETIMEDOUT".
function M.build(client, req)
  local rcp = req.recipe
  local dir = layer_dir(client, rcp.key, req.network ~= false)
  local image = 'local-layer:' .. rcp.key:sub(1, 16)
  while client.building[dir] do task.sleep(0.02) end -- another trial of this run builds it
  if fs.exists(dir .. '/layer.json') then
    return { image = image, layer = dir .. '/upper', cache_hit = true, content_key = rcp.key,
      log_tail = 'cseng: layer ' .. dir .. ' exists (content key ' .. rcp.key .. '): build skipped\n' }
  end
  client.building[dir] = true
  local name = 'build-' .. crypto.hex(crypto.random_bytes(6))
  local bdir = client.base .. '/sandboxes/' .. name
  local vol = client.store.dir .. '/builds/' .. name
  local netw = req.network ~= false
  local lim = limits.resolve(util.merge({ default_limits = req.default_limits or client.default_limits }, req.limits or {}))
  local sb = { id = name, dir = bdir, root = mount_point(client, name), env = {}, workdir = '/', network = netw, base_mode = true }
  local ok, res, err, code = pcall(function()
    local t0 = clock.now()
    errors.check(nil, fs.mkdir_p(bdir))
    errors.check(nil, fs.mkdir_p(sb.root))
    -- the longest prefix of steps already built: its snapshot is where this build starts
    local keys = (client.store.enforced and req.step_cache ~= false) and step_keys(client, rcp, netw) or {}
    local from = 0
    for i = #keys, 1, -1 do
      if fs.exists(step_dir(client, keys[i]) .. '/upper') then from = i; break end
    end
    local vok, verr
    if from > 0 then
      vok, verr = require('cseng.volume').snapshot(step_dir(client, keys[from]), vol)
      if vok then require('cseng.volume').limit(vol, math.floor(lim.storage_mb * 1048576)) end
    else
      vok, verr = limits.volume(client.store, vol, lim.storage_mb)
      if vok then
        errors.check(nil, fs.mkdir_p(vol .. '/upper'))
        own(client, vol .. '/upper')
      end
    end
    if not vok then return nil, errors.new(errors.EIO, 'the build\'s writable layer: ' .. tostring(verr)), errors.EIO end
    errors.check(nil, fs.mkdir_p(vol .. '/work'))
    local mok, merr = namespace.mount_overlay(sb.root, { client.base_root }, vol .. '/upper', vol .. '/work')
    if not mok then return nil, errors.new(errors.EMOUNT, 'mounting the build root: ' .. tostring(merr)), errors.EMOUNT end
    sb.overlay = true
    -- the resolver is bound over the root's own, read-only: it never lands in the layer
    if netw then
      local resolv = client.mnt .. '/' .. name .. '.resolv.conf'
      fs.write(resolv, client.host_network and (fs.read('/etc/resolv.conf') or net.RESOLV) or net.RESOLV)
      sb.binds = { { 'ro', resolv, '/etc/resolv.conf' } }
      sb.resolv = resolv
    end
    local iok, ierr, icode = isolate(client, sb, lim, nil)
    if not iok then return nil, errors.new(icode or errors.EIO, ierr), icode end
    local replay = require('cseng.workload.replay')
    local log = {}
    local info, rerr, rcode = replay.run(M, client, sb, rcp, { timeout = req.timeout or 600, network = netw, enforced = true,
      from_step = from,
      on_step = #keys > 0 and function(i, s)
        -- keep what this RUN step made: a later build that fails further on starts here
        if s.op ~= 'RUN' then return end
        local dest = step_dir(client, keys[i])
        if not fs.exists(dest) then
          require('cseng.volume').snapshot(vol, dest, { readonly = true })
          log[#log + 1] = string.format('cseng: step %d (Dockerfile line %d) kept in the build cache\n', i, s.line or 0)
        end
      end or nil })
    release(sb) -- the init holds the build root's mount: it ends before the layer is placed
    namespace.umount(sb.root)
    sb.overlay = nil
    if from > 0 then
      table.insert(log, 1, string.format('cseng: steps 1-%d from the build cache (%s)\n', from, step_dir(client, keys[from])))
    end
    if not info then
      if type(rerr) == 'table' then rerr.log = table.concat(log) .. (rerr.log or '') end
      return nil, rerr, rcode
    end
    require('cseng.volume').limit(vol, 0)
    fs.remove_tree(vol .. '/work')
    fs.write(vol .. '/layer.json', cjson.encode({ content_key = rcp.key, task_id = rcp.task_id, base = client.base_root,
      base_id = client.base_id, built = os.time(), steps = info.steps, runs = info.runs, cached_steps = from }))
    local placed = fs.rename(vol, dir)
    if not placed and not fs.exists(dir .. '/layer.json') then -- another filesystem (a layers folder of the caller's)
      local tmp = dir .. '.tmp-' .. name
      local r = proc.run { argv = { 'cp', '-a', vol, tmp }, timeout = 1800, tail_bytes = 65536 }
      if not (r and r.code == 0 and fs.rename(tmp, dir)) then fs.remove_tree(tmp) end
      limits.remove_volume(client.store, vol)
    elseif not placed then
      limits.remove_volume(client.store, vol) -- another process placed the same content first
    end
    if not fs.exists(dir .. '/layer.json') then return nil, errors.new(errors.EIO, 'cannot place the layer at ' .. dir), errors.EIO end
    return { image = image, layer = dir .. '/upper', cache_hit = false, content_key = rcp.key, steps = info.steps,
      cached_steps = from,
      log_tail = table.concat(log) .. string.format('cseng: built layer %s (%d steps, %d RUN, %d from the cache) in %.2f s\n',
        dir, info.steps, info.runs, from, (clock.now() - t0) / 1e9) }
  end)
  client.building[dir] = nil
  release(sb)
  if sb.overlay then namespace.umount(sb.root, { lazy = true }) end
  fs.remove(sb.root)
  if sb.resolv then fs.remove(sb.resolv) end
  for _, d in ipairs(sb.cgroups or {}) do limits.remove_cgroup(d) end
  if fs.exists(vol) then limits.remove_volume(client.store, vol) end
  fs.remove_tree(bdir)
  if not ok then error(res, 0) end -- cancelled (a trial timeout, Ctrl-C) or broken: nothing is left behind
  return res, err, code
end
--- How this client makes environments: "native" (base root filesystem + the task's layer) or
--- "host" (--host-root).
function M.env_mode(client)
  return client.host_root and 'host' or 'native'
end

--- What the sandbox lacks compared with the task's image.
function M.fidelity_gaps(client, t, run)
  local gaps = {}
  if client.host_root then
    if t.recipe.from then
      gaps[1] = { kind = 'FROM', text = 'base image ' .. t.recipe.from .. ' not used: the sandbox runs on the host /usr' }
    end
    return gaps
  end
  local rcp = require('cseng.workload.recipe').for_run(run, t)
  if rcp.base and rcp.base ~= BASE_IMAGE then
    gaps[1] = { kind = 'FROM', text = 'base image ' .. rcp.base .. ' is not available here: the sandbox runs on the Debian '
      .. 'base root filesystem (' .. BASE_IMAGE .. '; map the image with --image-map)' }
  end
  for _, st in ipairs(rcp.steps) do
    if st.op == 'COPY' and st.copy.from then
      gaps[#gaps + 1] = { kind = 'COPY --from', line = st.line, text = 'COPY --from=' .. tostring(st.copy.from) .. ' is not applied' }
    end
    for _, src in ipairs(st.op == 'COPY' and st.copy.src or {}) do
      if st.copy.add and src:match('^%a+://') then
        gaps[#gaps + 1] = { kind = 'ADD url', line = st.line, text = 'ADD of a URL is not fetched: ' .. src }
      end
    end
  end
  return gaps
end
-- Base mode: the prepared sandbox's writable layer (cp -a keeps owners, modes, xattrs and
-- overlay whiteouts), with the layers below it named in artifact.json.
local function snapshot_on_base(client, sb, key)
  local dest = client.base .. '/warm/base-' .. key .. '-' .. client.base_id
  if fs.exists(dest .. '/artifact.json') then return dest end
  local tmp = dest .. '.tmp-' .. sb.id
  fs.remove_tree(tmp)
  errors.check(nil, fs.mkdir_p(tmp))
  local r = proc.run { argv = { 'cp', '-a', sb.vol .. '/upper', tmp .. '/upper' }, timeout = 600, tail_bytes = 65536 }
  if not r or r.code ~= 0 then fs.remove_tree(tmp); return nil, 'copying the prepared layer: ' .. util.trim(r and r.stderr or ''), 'EIO' end
  fs.write(tmp .. '/artifact.json', cjson.encode({ lowers = sb.lowers, key = key, created = os.time(),
    task_id = (sb.labels or {})['cseng.task'] }))
  if not fs.rename(tmp, dest) then
    fs.remove_tree(tmp)
    if not fs.exists(dest .. '/artifact.json') then return nil, 'cannot place warm artifact ' .. dest, 'EIO' end
  end
  return dest
end
--- Keep a prepared sandbox's root as a warm artifact (the lower layer of later trials).
--- Artifacts are named by the task's content hash, so an existing one is the same root: it is
--- reused (other runs may have it mounted as a lower layer), and a new one appears atomically.
function M.snapshot(client, sb, key, opts)
  -- a fresh one (the arena's snapshot workload) is never one made earlier for the key
  if opts and opts.fresh then key = key .. '-' .. crypto.hex(crypto.random_bytes(4)) end
  if sb.base_mode then return snapshot_on_base(client, sb, key) end
  -- a root made in the sandboxes' user namespace is named by its id range: one made before (or
  -- without root) has other owners and is never taken for it
  local dest = client.base .. '/warm/' .. key .. (client.idmap and ('-u' .. client.idmap.uid) or '')
  if fs.exists(dest .. '/etc/passwd') then return dest end
  local tmp = dest .. '.tmp-' .. sb.id
  local ok, err
  if client.idmap then -- cp -a keeps the owners the sandbox's namespace gave its files
    local r = proc.run { argv = { 'cp', '-a', sb.files or sb.root, tmp }, timeout = 600, tail_bytes = 65536 }
    ok, err = r and r.code == 0, 'copying the prepared root: ' .. util.trim(r and r.stderr or '')
  else
    ok, err = fs.copy_tree(sb.files or sb.root, tmp)
  end
  if not ok then fs.remove_tree(tmp); return nil, err, 'EIO' end
  if not fs.rename(tmp, dest) then -- another run got there first
    fs.remove_tree(tmp)
    if not fs.exists(dest .. '/etc/passwd') then return nil, 'cannot place warm artifact ' .. dest, 'EIO' end
  end
  return dest
end
--- A warm artifact made earlier for the same content key, if it is still there.
function M.find_artifact(client, key)
  if not client.host_root then
    local dest = client.base .. '/warm/base-' .. key .. '-' .. client.base_id
    if fs.exists(dest .. '/artifact.json') then return dest end
    return nil
  end
  local dest = client.base .. '/warm/' .. key .. (client.idmap and ('-u' .. client.idmap.uid) or '')
  if fs.exists(dest .. '/etc/passwd') then return dest end
  return nil
end
--- The warm artifacts under this client's root (what `cseng prewarm --list --provider local` shows,
--- whoever made them: cseng prewarm or a warm run): {{id (the directory), created_at, task_id}}.
function M.list_artifacts(client)
  local out = {}
  local dir = client.base .. '/warm'
  local names = fs.list(dir) or {}
  table.sort(names)
  for _, name in ipairs(names) do
    local path = dir .. '/' .. name
    if not name:find('.tmp-', 1, true) then
      local ok, meta = pcall(cjson.decode, fs.read(path .. '/artifact.json') or '')
      if ok and type(meta) == 'table' then
        out[#out + 1] = { id = path, task_id = meta.task_id, created_at = meta.created and os.date('!%Y-%m-%dT%H:%M:%SZ', meta.created) }
      elseif fs.exists(path .. '/etc/passwd') then -- host mode: the prepared root itself
        out[#out + 1] = { id = path }
      end
    end
  end
  return out
end

--- Remove a warm artifact (a directory M.list_artifacts gave). A trial that still has it as a
--- lower layer keeps its mount; later trials prepare it again.
function M.delete_artifact(client, id)
  local dir = client.base .. '/warm/'
  if type(id) ~= 'string' or id:sub(1, #dir) ~= dir or id:find('/%.%./') or id:sub(#dir + 1):find('/') then
    return nil, 'not a warm artifact of this root: ' .. tostring(id), 'EINVAL'
  end
  local ok, err = fs.remove_tree(id)
  if not ok then return nil, err, 'EIO' end
  return true
end
-- Stop (on) or continue every process of the sandbox: SIGSTOP / SIGCONT to each process in its
-- init's pid namespace (found by /proc/<pid>/ns/pid, so a reused pid elsewhere is never hit), as a
-- cgroup freezer stops them: memory, files and open sockets are kept.
local function freeze(sb, on)
  if not sb.init_pid then return nil, 'local: pausing needs a sandbox with an init (not --host-root)', errors.EPAUSE end
  local ns = fs.readlink('/proc/' .. sb.init_pid .. '/ns/pid')
  if not ns then return nil, 'local: the sandbox\'s init ' .. sb.init_pid .. ' is gone', errors.EPAUSE end
  local pids = {}
  for _, d in ipairs(fs.list('/proc') or {}) do
    if d:match('^%d+$') and fs.readlink('/proc/' .. d .. '/ns/pid') == ns then pids[#pids + 1] = d end
  end
  local r = proc.run { argv = { 'kill', on and '-STOP' or '-CONT', table.unpack(pids) }, timeout = 30 }
  if not r or r.code ~= 0 then
    return nil, 'local: kill ' .. (on and '-STOP' or '-CONT') .. ': ' .. util.trim(r and r.stderr or ''), errors.EPAUSE
  end
  sb.paused = on or nil
  return true
end

--- Pause the sandbox: every process stopped, its state kept (the arena's pause workload).
---@return true|nil ok, string? err, string? code
function M.pause(_, sb) return freeze(sb, true) end

--- Resume a paused sandbox: its processes continue where they stopped.
---@return true|nil ok, string? err, string? code
function M.resume(_, sb) return freeze(sb, false) end

--- Fork a sandbox (base mode) into n new ones: sb's processes are stopped (as pause does) while its
--- writable layer is snapshotted once per child (btrfs, copy-on-write; where the store has no
--- volumes, copied once with cp -a), then resumed; each child is a sandbox of its own (its own
--- init, namespaces, cgroups and size-limited writable layer, which starts as that) over sb's lower layers, created with
--- spec (labels, env, limits). Files only: no process of sb is carried over (a child's init is
--- new). Returns the n children, or nil, message, CODE and the children made (the caller records
--- and destroys them).
---@return table[]|nil kids, string? err, string? code, table[]? made
function M.fork(client, sb, n, spec)
  if not sb.base_mode or not sb.vol or not sb.init_pid then
    return nil, 'local: fork needs a running sandbox on the base root filesystem (not --host-root)', errors.EFORK, {}
  end
  if sb.destroyed then return nil, 'local: sandbox ' .. sb.id .. ' is gone (destroyed)', errors.EFORK, {} end
  local was_paused = sb.paused
  if not was_paused then
    local ok, err, code = freeze(sb, true)
    if not ok then return nil, err, code, {} end
  end
  -- While sb is stopped: where the store has volumes, each child's writable layer is a snapshot of
  -- sb's (copy-on-write: no byte copied), its sandbox directory and labels written first, so that
  -- no other run's sweep takes the volume for a leftover and `cseng cleanup` finds it should this
  -- process die; elsewhere one copy of it (cp -a), in sb's own directory (removed with it), which
  -- each child copies.
  local froms, stage, r = {}, nil, nil
  local function unmade(f) -- a snapshot no child was made from
    limits.remove_volume(client.store, volume_of(client, f.id))
    fs.remove_tree(client.base .. '/sandboxes/' .. f.id)
  end
  for i = 1, n do
    local id = new_id()
    local dir = client.base .. '/sandboxes/' .. id
    local made = fs.mkdir_p(dir) and write_record(dir, id, (spec or {}).labels)
    if not (made and limits.volume_snapshot(client.store, sb.vol, volume_of(client, id))) then
      fs.remove_tree(dir)
      break
    end
    froms[i] = { lowers = sb.lowers, id = id, snapshot = true }
  end
  if #froms < n then
    stage = sb.dir .. '/fork-' .. crypto.hex(crypto.random_bytes(4))
    r = proc.run { argv = { 'cp', '-a', sb.vol .. '/upper', stage }, timeout = 600, tail_bytes = 65536 }
    for i = #froms + 1, n do froms[i] = { lowers = sb.lowers, upper = stage } end
  end
  if not was_paused then freeze(sb, false) end
  if stage and (not r or r.code ~= 0) then
    fs.remove_tree(stage)
    for _, f in ipairs(froms) do if f.snapshot then unmade(f) end end
    return nil, 'local: fork of ' .. sb.id .. ': copying its writable layer: ' .. util.trim(r and r.stderr or ''), 'EIO', {}
  end
  local kids, failures, code = {}, {}, nil
  local cok, cerr = pcall(function()
    for i = 1, n do
      local child, err, ecode = create_on_base(client, spec or {}, froms[i])
      if child then
        child.fork_of = sb.id
        child.code_path = (froms[i].snapshot and 'a snapshot' or 'a copy') .. ' of the parent\'s writable layer, '
          .. 'cseng-jail init on the Debian root filesystem'
        kids[#kids + 1] = child
      else
        failures[#failures + 1] = string.format('child %d: %s', i, tostring(err))
        code = code or ecode
      end
    end
  end)
  if stage then fs.remove_tree(stage) end
  if not cok then -- cancelled or misused: no child outlives the call unrecorded
    for _, k in ipairs(kids) do pcall(M.destroy, client, k) end
    local made = {}
    for _, k in ipairs(kids) do made[k.id] = true end
    for _, f in ipairs(froms) do if f.snapshot and not made[f.id] then unmade(f) end end
    error(cerr, 0)
  end
  if #failures == 0 then return kids end
  return nil, string.format('local: fork of %s: %d of %d children failed: %s', sb.id, #failures, n,
    table.concat(failures, '; ')), #kids > 0 and errors.EFORK or code or errors.EFORK, kids
end

return M
