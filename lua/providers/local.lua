--- The local provider: one bubblewrap sandbox per trial on this machine.
---
--- Base root filesystem mode (the default): the sandbox's "/" is an overlayfs whose lowest layer
--- is the Debian base root filesystem `cseng images rootfs` builds with debootstrap (the content
--- of docker's cseng/debian:bookworm), above it the task's layer, above that the trial's own
--- upper directory (state persists between the exec calls of one trial). The task's layer is
--- its build: the recipe's steps (lua/cseng/workload/recipe.lua: COPY, RUN, ENV, WORKDIR, USER, ARG) replayed
--- (lua/cseng/workload/replay.lua) in a build sandbox over the base, whose upper directory is then kept under
--- the recipe's content key (<cache>/local-layers/<key>), so a later run of an unchanged task
--- starts from the cached layer (build cache hit). Needs root (overlayfs mounts).
--- Host mode (--host-root, or when asked with host_root = true): as before this layer existed,
--- the host's /usr bound read-only, a synthetic /etc, cseng stages COPY/ENV/WORKDIR and the
--- runner records RUN steps as fidelity gaps.
--- Every exec is a new bwrap process in new namespaces (a trial has no network unless the task
--- allows it and the user asks; the build sandbox has the host's, as docker build gives it, unless
--- --build-network off), with --die-with-parent, inside a cgroup with the task's memory/CPU
--- limits when the machine lets us. Warm: the prepared sandbox's upper directory (base mode) or
--- root (host mode) becomes one more lower layer of later trials.
local fs = require 'cseng.fs'
local proc = require 'cseng.proc'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local archive = require 'cseng.archive'
local cjson = require 'cjson'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'
local task = require 'cseng.task'
local clock = require 'cseng.clock'

local M = {
  name = 'local',
  description = 'bubblewrap sandboxes on this machine (no credentials, no network by default)',
  -- its sandbox ids, and so the names of the directories under <root>/sandboxes/ (M.create)
  id_format = { pattern = '^cseng%-' .. string.rep('%x', 12) .. '$', example = 'cseng-0123456789ab', max = 18 },
  applies_dockerfile = true, -- base mode: the task's layer is built from the recipe (M.env_mode)
  credentials = {},
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 },
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true, exec_stream = true },
  -- base images the Debian base root filesystem stands for (after the user's --image-map)
  image_map = { 'debian:bookworm*=cseng/debian:bookworm' },
}

--- The image the base root filesystem is (a recipe whose base is another image records a gap).
M.BASE_IMAGE = 'cseng/debian:bookworm'

-- The capabilities docker gives a container's root by default (moby's defaults).
local DOCKER_CAPS = { 'CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP',
  'SETPCAP', 'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE' }

local DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
local VERIFIER_UID = 1000

-- /etc entries bound read-only from the host when present.
local ETC_BINDS = {
  'alternatives', 'ssl', 'ca-certificates', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime',
  'python3', 'python3.11', 'python3.12', 'bash.bashrc', 'inputrc', 'magic', 'magic.mime', 'mime.types',
  'protocols', 'services', 'debian_version', 'os-release', 'gai.conf', 'profile', 'perl', 'gitconfig',
}

-- cgroups: v2 (one unified tree) or v1 (one tree per controller; cpu may be mounted alone or
-- as "cpu,cpuacct"). Files in cgroupfs cannot be replaced by rename, so limits are written
-- in place with fs.append (one write(2)).
local CG = '/sys/fs/cgroup'

local function cg_write(path, value)
  return fs.append(path, tostring(value))
end

local function detect_cgroup()
  if fs.exists(CG .. '/cgroup.controllers') then
    local base = CG .. '/cseng'
    if not fs.mkdir_p(base) then return nil end
    -- controllers must be enabled for children, in the root and in cseng/
    cg_write(CG .. '/cgroup.subtree_control', '+memory +cpu +pids')
    cg_write(base .. '/cgroup.subtree_control', '+memory +cpu +pids')
    return { version = 2, trees = { base } }
  end
  if fs.exists(CG .. '/memory/tasks') then
    local cpu = fs.exists(CG .. '/cpu,cpuacct/tasks') and (CG .. '/cpu,cpuacct') or (CG .. '/cpu')
    local trees = {}
    for _, d in ipairs({ CG .. '/memory', cpu, CG .. '/pids' }) do
      if fs.exists(d .. '/tasks') and fs.mkdir_p(d .. '/cseng') then trees[#trees + 1] = d .. '/cseng' end
    end
    if #trees == 0 then return nil end
    return { version = 1, trees = trees, memory = CG .. '/memory/cseng', cpu = cpu .. '/cseng', pids = CG .. '/pids/cseng' }
  end
  return nil
end

-- Remove a sandbox's cgroup: kill what is left in it, then rmdir (EBUSY while processes exit).
local function cg_remove(dir)
  for _ = 1, 40 do
    if not fs.exists(dir) then return true end
    local procs = fs.read(dir .. '/cgroup.procs') or ''
    for pid in procs:gmatch('%d+') do sys.kill(tonumber(pid), 'KILL') end
    if fs.remove(dir) then return true end
    task.sleep(0.025)
  end
  return nil, 'cgroup ' .. dir .. ' stays busy', 'EBUSY'
end

-- A sandbox's cgroup name: "sb-<tag of the sandboxes' root>-<id>", so a sweep by a client with
-- another root (another run's, a spec's) never takes a live sandbox's cgroup.
local function cg_name(client, id) return 'sb-' .. client.cg_tag .. '-' .. id end

-- Leftovers of dead runs: empty cgroups (of this sandboxes' root) whose sandbox directory is gone.
local function cg_sweep(client)
  local prefix = 'sb-' .. client.cg_tag .. '-'
  for _, tree in ipairs(client.cgroup.trees) do
    for _, name in ipairs(fs.list(tree) or {}) do
      if name:sub(1, #prefix) == prefix and not fs.exists(client.base .. '/sandboxes/' .. name:sub(#prefix + 1)) then
        local procs = fs.read(tree .. '/' .. name .. '/cgroup.procs') or ''
        if not procs:match('%d') then fs.remove(tree .. '/' .. name) end
      end
    end
  end
end

--- Check that bwrap is present and works; choose where sandboxes live.
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
  local images = require 'cseng.images.rootfs'
  local rootfs = cfg.rootfs or os.getenv('CSENG_LOCAL_ROOTFS')
  local base_root
  if host_root then
    -- host mode: /usr from the host, or from a user-given root filesystem
    if rootfs and not fs.exists(rootfs .. '/usr') then
      errors.raise(errors.ECONFIG, 'local provider: rootfs ' .. rootfs .. ' has no usr/ directory')
    end
  else
    base_root = rootfs or images.rootfs_dir('bookworm')
    rootfs = nil
    if not fs.exists(base_root .. '/usr/bin') or not fs.exists(base_root .. '/etc/passwd') then
      errors.raise(errors.ECONFIG, 'local provider: the Debian base root filesystem is absent (' .. base_root .. '): build it with '
        .. '`./cseng images rootfs` (debootstrap, needs root; make check and make demo do), or pass --host-root '
        .. "to run on the host's /usr (RUN steps are then recorded as fidelity gaps, not run)")
    end
    if sys.uid() ~= 0 then
      errors.raise(errors.ECONFIG, 'local provider: the base root filesystem mode needs root (overlayfs mounts); run as root, or pass '
        .. "--host-root to run on the host's /usr")
    end
  end
  local layers = cfg.layers or os.getenv('CSENG_LOCAL_LAYERS') or (images.cache_dir() .. '/local-layers')
  if base_root then assert(fs.mkdir_p(layers)) end
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
    is_root = sys.uid() == 0,
    cgroup = cfg.cgroups ~= false and detect_cgroup() or nil,
    cg_tag = crypto.sha256_hex(sys.realpath(base) or base):sub(1, 8),
    keep_usr_local = cfg.keep_usr_local or os.getenv('CSENG_LOCAL_KEEP_USR_LOCAL') == '1',
  }
  if client.cgroup then cg_sweep(client) end
  return client
end

-- /etc/hostname and /etc/hosts naming the sandbox, and with the network the host's resolv.conf.
local function write_host_files(root, hostname, network)
  fs.write(root .. '/etc/hostname', hostname .. '\n')
  fs.write(root .. '/etc/hosts', '127.0.0.1 localhost ' .. hostname .. '\n::1 localhost\n')
  if network then
    local resolv = fs.read('/etc/resolv.conf')
    if resolv then fs.write(root .. '/etc/resolv.conf', resolv) end
  end
end

local function write_etc(root, hostname, network)
  errors.check(nil, fs.mkdir_p(root .. '/etc'))
  fs.write(root .. '/etc/passwd', table.concat({
    'root:x:0:0:root:/root:/bin/bash',
    'cseng:x:' .. VERIFIER_UID .. ':' .. VERIFIER_UID .. ':cseng verifier:/home/cseng:/bin/bash',
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin', '' }, '\n'))
  fs.write(root .. '/etc/group', table.concat({
    'root:x:0:', 'cseng:x:' .. VERIFIER_UID .. ':', 'nogroup:x:65534:', '' }, '\n'))
  fs.write(root .. '/etc/nsswitch.conf', 'passwd: files\ngroup: files\nhosts: files dns\n')
  write_host_files(root, hostname, network)
end

local function make_root(root, hostname, network)
  for _, d in ipairs({ 'tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'workspace', 'run', 'cseng' }) do
    errors.check(nil, fs.mkdir_p(root .. '/' .. d))
  end
  fs.chmod(root .. '/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/var/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/home/cseng', tonumber('777', 8))
  for _, l in ipairs({ { 'usr/bin', 'bin' }, { 'usr/sbin', 'sbin' }, { 'usr/lib', 'lib' }, { 'usr/lib64', 'lib64' } }) do
    if not fs.lstat(root .. '/' .. l[2]) then fs.symlink(l[1], root .. '/' .. l[2]) end
  end
  write_etc(root, hostname, network)
end

local function setup_cgroup(client, sb, spec)
  local cg = client.cgroup
  if not cg or not (spec.memory_mb or spec.cpus) then return end
  local dirs, applied = {}, {}
  local function make(tree)
    local d = tree .. '/' .. cg_name(client, sb.id)
    if fs.mkdir_p(d) then dirs[#dirs + 1] = d; return d end
  end
  if cg.version == 2 then
    local d = make(cg.trees[1])
    if d then
      if spec.memory_mb and cg_write(d .. '/memory.max', math.floor(spec.memory_mb * 1048576)) then applied.memory_mb = spec.memory_mb end
      if spec.cpus and cg_write(d .. '/cpu.max', string.format('%d 100000', math.floor(spec.cpus * 100000))) then applied.cpus = spec.cpus end
      cg_write(d .. '/pids.max', 4096)
    end
  else
    if spec.memory_mb and fs.exists(cg.memory) then
      local d = make(cg.memory)
      if d and cg_write(d .. '/memory.limit_in_bytes', math.floor(spec.memory_mb * 1048576)) then applied.memory_mb = spec.memory_mb end
    end
    if spec.cpus and fs.exists(cg.cpu) then
      local d = make(cg.cpu)
      if d and cg_write(d .. '/cpu.cfs_period_us', 100000)
          and cg_write(d .. '/cpu.cfs_quota_us', math.floor(spec.cpus * 100000)) then applied.cpus = spec.cpus end
    end
    if fs.exists(cg.pids) then
      local d = make(cg.pids)
      if d then cg_write(d .. '/pids.max', 4096) end
    end
  end
  sb.cgroups = dirs
  sb.limits = applied -- what the machine let us enforce (recorded by the runner)
end

-- Mount an overlayfs of lowers (top first) with dir/upper and dir/work at dir/root.
local function mount_overlay(dir, lowers)
  for _, d in ipairs({ dir .. '/root', dir .. '/upper', dir .. '/work' }) do errors.check(nil, fs.mkdir_p(d)) end
  local res = proc.run { argv = { 'mount', '-t', 'overlay', 'overlay', '-o',
    'lowerdir=' .. table.concat(lowers, ':') .. ',upperdir=' .. dir .. '/upper,workdir=' .. dir .. '/work', dir .. '/root' },
    timeout = 30 }
  if not res or res.code ~= 0 then
    return nil, 'mounting the sandbox root (overlayfs): ' .. util.trim(res and (res.stderr .. res.stdout) or 'mount did not run'), 'EMOUNT'
  end
  return true
end

-- What every sandbox on the base root filesystem gets in its own upper layer.
local function base_root_files(root, network)
  for _, d in ipairs({ 'tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'cseng' }) do
    errors.check(nil, fs.mkdir_p(root .. '/' .. d))
  end
  fs.chmod(root .. '/tmp', tonumber('1777', 8))
  fs.chmod(root .. '/home/cseng', tonumber('777', 8))
  write_host_files(root, 'sandbox', network)
end

--- The layer directory of a recipe on this client's base (complete when layer.json exists).
M.LAYER_VERSION = 2 -- how layers are built: a change rebuilds them

local function layer_dir(client, key)
  return client.layers .. '/' .. crypto.sha256_hex(key .. '\0' .. client.base_id .. '\0' .. M.LAYER_VERSION):sub(1, 32)
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
  if rcp.base and rcp.base ~= M.BASE_IMAGE then
    gaps[1] = { kind = 'FROM', text = 'base image ' .. rcp.base .. ' is not available here: the sandbox runs on the Debian '
      .. 'base root filesystem (' .. M.BASE_IMAGE .. '; map the image with --image-map)' }
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

local bwrap_argv -- defined below
local exec_env

--- Build (or find) the task's layer: the recipe's steps replayed over the base root filesystem
--- in a build sandbox (the host's network unless req.network == false), its upper directory kept
--- under the content key. req: {recipe, timeout, network}. Returns {image, layer, cache_hit, log_tail, content_key, steps} or nil,
--- {message, log}, "EBUILD" | "ETIMEDOUT".
function M.build(client, req)
  local rcp = req.recipe
  local dir = layer_dir(client, rcp.key)
  local image = 'local-layer:' .. rcp.key:sub(1, 16)
  while client.building[dir] do task.sleep(0.02) end -- another trial of this run builds it
  if fs.exists(dir .. '/layer.json') then
    return { image = image, layer = dir .. '/upper', cache_hit = true, content_key = rcp.key,
      log_tail = 'cseng: layer ' .. dir .. ' exists (content key ' .. rcp.key .. '): build skipped\n' }
  end
  client.building[dir] = true
  local bdir = dir .. '.build-' .. crypto.hex(crypto.random_bytes(4))
  local ok, res, err, code = pcall(function()
    local t0 = clock.now()
    local mok, merr, mcode = mount_overlay(bdir, { client.base_root })
    if not mok then fs.remove_tree(bdir); return nil, errors.new(mcode or errors.EMOUNT, merr), mcode end
    -- RUN steps get the host's network, as `docker build` gives it (and its resolv.conf, bound
    -- read-only: it never lands in the layer); --build-network off (req.network == false) keeps
    -- the build in its own empty network namespace
    local net = req.network ~= false
    local sb = { id = 'build', dir = bdir, root = bdir .. '/root', env = {}, workdir = '/', network = net, base_mode = true,
      resolv = net and sys.realpath('/etc/resolv.conf') or nil }
    local replay = require 'cseng.workload.replay'
    local info, rerr, rcode = replay.run(M, client, sb, rcp, { timeout = req.timeout or 600, network = net, enforced = true })
    proc.run { argv = { 'umount', bdir .. '/root' }, timeout = 60 }
    if not info then fs.remove_tree(bdir); return nil, rerr, rcode end
    fs.write(bdir .. '/layer.json', cjson.encode({ content_key = rcp.key, task_id = rcp.task_id, base = client.base_root,
      base_id = client.base_id, built = os.time(), steps = info.steps, runs = info.runs }))
    fs.remove_tree(bdir .. '/work')
    fs.remove(bdir .. '/root')
    if not fs.rename(bdir, dir) then -- another process got there first: the same content
      fs.remove_tree(bdir)
      if not fs.exists(dir .. '/layer.json') then return nil, errors.new(errors.EIO, 'cannot place the layer at ' .. dir), errors.EIO end
    end
    return { image = image, layer = dir .. '/upper', cache_hit = false, content_key = rcp.key, steps = info.steps,
      log_tail = string.format('cseng: built layer %s (%d steps, %d RUN) in %.2f s\n', dir, info.steps, info.runs,
        (clock.now() - t0) / 1e9) }
  end)
  client.building[dir] = nil
  if not ok then -- cancelled (a trial timeout, Ctrl-C) or broken: leave no build mount behind
    proc.run { argv = { 'umount', '-l', bdir .. '/root' }, timeout = 60 }
    fs.remove_tree(bdir)
    error(res, 0)
  end
  return res, err, code
end

-- The lower layers of a warm artifact made in base mode (artifact.json beside its upper/).
local function artifact_lowers(artifact)
  local ok, meta = pcall(cjson.decode, fs.read(artifact .. '/artifact.json') or '')
  if not ok or type(meta) ~= 'table' or type(meta.lowers) ~= 'table' then return nil end
  local lowers = { artifact .. '/upper' }
  for _, l in ipairs(meta.lowers) do lowers[#lowers + 1] = l end
  return lowers
end

--- Create a sandbox. spec: {id_prefix, labels, env, workdir, network, cpus, memory_mb,
--- warm_artifact (a prepared root from M.snapshot), layer (from M.build), recipe}.
function M.create(client, spec)
  if not client.host_root then return M.create_on_base(client, spec) end
  local id = 'cseng-' .. crypto.hex(crypto.random_bytes(6))
  local dir = client.base .. '/sandboxes/' .. id
  local root = dir .. '/root'
  errors.check(nil, fs.mkdir_p(dir))
  local sb = {
    id = id, dir = dir, root = root, env = spec.env or {}, workdir = spec.workdir or '/workspace',
    network = spec.network and true or false, labels = spec.labels or {},
    cpus = spec.cpus, memory_mb = spec.memory_mb, created = os.time(),
  }
  fs.write(dir .. '/sandbox.json', cjson.encode({ id = id, labels = sb.labels, created = sb.created }))
  if spec.warm_artifact then
    local lower = spec.warm_artifact
    if not fs.exists(lower .. '/etc/passwd') then
      return nil, 'warm artifact ' .. lower .. ' is not a prepared root (run cseng prewarm --provider local)', 'EARTIFACT'
    end
    errors.check(nil, fs.mkdir_p(root)); errors.check(nil, fs.mkdir_p(dir .. '/upper')); errors.check(nil, fs.mkdir_p(dir .. '/work'))
    local res = client.is_root and proc.run { argv = { 'mount', '-t', 'overlay', 'overlay', '-o',
      'lowerdir=' .. lower .. ',upperdir=' .. dir .. '/upper,workdir=' .. dir .. '/work', root }, timeout = 30 }
    if res and res.code == 0 then
      sb.overlay = true
    else
      fs.remove_tree(root)
      local ok, err = fs.copy_tree(lower, root)
      if not ok then return nil, 'cannot copy the warm root: ' .. tostring(err), 'EIO' end
      sb.warm_copy = true
    end
  else
    make_root(root, 'sandbox', sb.network)
  end
  errors.check(nil, fs.mkdir_p(root .. sb.workdir))
  setup_cgroup(client, sb, spec)
  return sb
end

--- A sandbox on the base root filesystem: the overlay of its own upper over the warm artifact
--- or the task's layer over the base.
function M.create_on_base(client, spec)
  local id = 'cseng-' .. crypto.hex(crypto.random_bytes(6))
  local dir = client.base .. '/sandboxes/' .. id
  errors.check(nil, fs.mkdir_p(dir))
  local rcp = spec.recipe or {}
  local sb = {
    id = id, dir = dir, root = dir .. '/root', env = util.merge(rcp.env, spec.env),
    workdir = spec.workdir or rcp.workdir or '/workspace', network = spec.network and true or false,
    labels = spec.labels or {}, cpus = spec.cpus, memory_mb = spec.memory_mb, created = os.time(), base_mode = true,
  }
  fs.write(dir .. '/sandbox.json', cjson.encode({ id = id, labels = sb.labels, created = sb.created }))
  local lowers
  if spec.warm_artifact then
    lowers = artifact_lowers(spec.warm_artifact)
    if not lowers then
      return nil, 'warm artifact ' .. spec.warm_artifact .. ' is not a prepared layer (run cseng prewarm --provider local)', 'EARTIFACT'
    end
  else
    lowers = { spec.layer, client.base_root }
    if not spec.layer then lowers = { client.base_root } end
  end
  sb.lowers = lowers
  local ok, err, code = mount_overlay(dir, lowers)
  if not ok then fs.remove_tree(dir); return nil, err, code end
  sb.overlay = true
  base_root_files(sb.root, sb.network)
  errors.check(nil, fs.mkdir_p(sb.root .. sb.workdir))
  setup_cgroup(client, sb, spec)
  return sb
end

bwrap_argv = function(client, sb, opts)
  if sb.base_mode then
    -- the whole root is the overlay: nothing from the host. No user namespace: one maps only
    -- root, and builds need every id (useradd, chown, dpkg); a non-root command drops to its
    -- uid with setpriv inside the sandbox
    local a = { client.bwrap, '--die-with-parent', '--new-session', '--unshare-ipc', '--unshare-pid', '--unshare-uts',
      '--unshare-cgroup-try' }
    if not sb.network then a[#a + 1] = '--unshare-net' end
    -- root keeps docker's default capability set, not all of them (no mounts, no modules)
    a[#a + 1] = '--cap-drop'; a[#a + 1] = 'ALL'
    for _, c in ipairs(DOCKER_CAPS) do a[#a + 1] = '--cap-add'; a[#a + 1] = 'CAP_' .. c end
    for _, x in ipairs({ '--hostname', 'sandbox', '--bind', sb.root, '/', '--proc', '/proc', '--dev', '/dev',
      '--chdir', opts.cwd or sb.workdir }) do a[#a + 1] = x end
    if sb.resolv then -- the build sandbox: the host's resolver, read-only, over the root's own
      for _, x in ipairs({ '--ro-bind', sb.resolv, '/etc/resolv.conf' }) do a[#a + 1] = x end
    end
    local user = opts.user
    if user and user ~= 'root' and user ~= 0 then
      local uid = tostring(user == 'verifier' and VERIFIER_UID or tonumber(user) or VERIFIER_UID)
      for _, x in ipairs({ '/usr/bin/setpriv', '--reuid=' .. uid, '--regid=' .. uid, '--clear-groups' }) do a[#a + 1] = x end
    end
    return a
  end
  local a = { client.bwrap, '--die-with-parent', '--new-session', '--unshare-all' }
  local function add(...) for _, x in ipairs({ ... }) do a[#a + 1] = x end end
  if sb.network then add('--share-net') end
  add('--hostname', 'sandbox', '--bind', sb.root, '/')
  add('--ro-bind', (client.rootfs or '') .. '/usr', '/usr')
  -- the host's /usr/local holds tools and Python packages no task image has
  if not client.rootfs and not client.keep_usr_local then add('--tmpfs', '/usr/local') end
  if client.rootfs then
    for _, d in ipairs({ 'etc/alternatives' }) do
      if fs.exists(client.rootfs .. '/' .. d) then add('--ro-bind', client.rootfs .. '/' .. d, '/' .. d) end
    end
  end
  for _, e in ipairs(ETC_BINDS) do
    local src = (client.rootfs or '') .. '/etc/' .. e
    if fs.exists(src) and (e ~= 'resolv.conf' or sb.network) then add('--ro-bind', src, '/etc/' .. e) end
  end
  add('--proc', '/proc', '--dev', '/dev')
  local user = opts.user
  if user and user ~= 'root' and user ~= 0 then
    local uid = user == 'verifier' and VERIFIER_UID or tonumber(user) or VERIFIER_UID
    add('--uid', tostring(uid), '--gid', tostring(uid))
  end
  add('--chdir', opts.cwd or sb.workdir)
  return a
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

--- Run a shell command in the sandbox. opts: {cwd, env, user ('root'|'verifier'|uid), timeout, stdin}.
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local argv = bwrap_argv(client, sb, opts)
  argv[#argv + 1] = '/bin/bash'
  argv[#argv + 1] = '-c'
  argv[#argv + 1] = cmd
  if sb.cgroups and #sb.cgroups > 0 then
    -- join the trial's cgroups, then become bwrap
    local join = {}
    for i, d in ipairs(sb.cgroups) do join[i] = 'echo $$ > ' .. util.shell_quote(d .. '/cgroup.procs') end
    table.insert(argv, 1, '/bin/sh')
    table.insert(argv, 2, '-c')
    table.insert(argv, 3, table.concat(join, ' && ') .. ' && exec "$@"')
    table.insert(argv, 4, 'cseng-cgroup')
  end
  if opts.on_output then return M.exec_streaming(sb, argv, opts) end
  local res, err, code = proc.run {
    argv = argv, env = exec_env(sb, opts), stdin = opts.stdin, timeout = opts.timeout or 600,
    tail_bytes = opts.tail_bytes or (1 << 20),
  }
  if not res then return nil, err, code end
  return res
end

M.STREAM_POLL_S = 0.05
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

--- exec with opts.on_output(chunk, stream): the command's stdout and stderr go to files beside
--- the sandbox (outside its root), read as they grow (every STREAM_POLL_S seconds, while the
--- command runs, and once more after it exits) and handed over in order, stream "stdout" or
--- "stderr". When on_output returns false the command is stopped there: its process group is
--- killed (bwrap --die-with-parent takes the sandbox's processes with it) and the result says
--- `stopped = true`. The result has proc.run's shape (code, signal, stdout and stderr tails,
--- elapsed, timed_out). The capability `exec_stream` says an adapter has this.
function M.exec_streaming(sb, argv, opts)
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
      p:kill(stopped and 'KILL' or 'TERM')
      exit = p:wait(timed_out and 2 or 10)
      if not exit then p:kill('KILL'); exit = p:wait() end
    else
      local e, _, wcode = p:wait(M.STREAM_POLL_S)
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
  return res
end

-- Refuse to write through a symlink the sandbox may have planted: every component of the
-- target path below the sandbox root must be a real directory (or not exist yet).
local function safe_target(root, path)
  local cur = root
  for part in path:gmatch('[^/]+') do
    if part == '..' then return nil, path .. ': ".." in a target path', 'EUNSAFE' end
    cur = cur .. '/' .. part
    local st = fs.lstat(cur)
    if st and st.type ~= 'dir' then return nil, path .. ': ' .. part .. ' is a ' .. st.type .. ', not a directory', 'EUNSAFE' end
    if not st then
      local ok, err, code = fs.mkdir_p(cur)
      if not ok then return nil, err, code end
    end
  end
  return cur
end

--- Unpack a tar (bytes) into a directory of the sandbox.
function M.put(client, sb, dir, tar_bytes) -- luacheck: ignore 212/client
  local target, err = safe_target(sb.root, dir)
  if not target then return nil, err, 'EUNSAFE' end
  local ok, xerr, code = archive.extract(tar_bytes, target, {})
  if not ok then return nil, xerr, code end
  return true
end

--- Read a file of the sandbox (resolved inside it).
function M.get(client, sb, path) -- luacheck: ignore 212/client (every adapter takes it)
  local limit = 256 * 1048576
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
    local ok, err, code = cg_remove(d)
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

--- Destroy a sandbox: unmount, remove its directory and cgroups. Idempotent. Refused (EUNSAFE,
--- nothing touched) unless the sandbox is one of this root's own (own_dir).
function M.destroy(client, sb)
  local dir, why = own_dir(client, sb)
  if why then return nil, 'local: ' .. why .. ': not removed', 'EUNSAFE' end
  if not dir then return rm_cgroups(client, sb) end
  if fs.exists(dir .. '/root') and (sb.overlay or fs.exists(dir .. '/upper')) then
    proc.run { argv = { 'umount', '-l', dir .. '/root' }, timeout = 30 }
  end
  local cok, cerr = rm_cgroups(client, sb)
  if not cok then return nil, cerr, 'EBUSY' end
  if fs.exists(dir) then
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

--- Keep a prepared sandbox's root as a warm artifact (the lower layer of later trials).
--- A warm artifact made earlier for the same content key, if it is still there.
function M.find_artifact(client, key)
  if not client.host_root then
    local dest = client.base .. '/warm/base-' .. key .. '-' .. client.base_id
    if fs.exists(dest .. '/artifact.json') then return dest end
    return nil
  end
  local dest = client.base .. '/warm/' .. key
  if fs.exists(dest .. '/etc/passwd') then return dest end
  return nil
end

-- Base mode: the prepared sandbox's upper directory (cp -a keeps owners, modes, xattrs and
-- overlay whiteouts), with the layers below it named in artifact.json.
local function snapshot_on_base(client, sb, key)
  local dest = client.base .. '/warm/base-' .. key .. '-' .. client.base_id
  if fs.exists(dest .. '/artifact.json') then return dest end
  local tmp = dest .. '.tmp-' .. sb.id
  fs.remove_tree(tmp)
  errors.check(nil, fs.mkdir_p(tmp))
  local r = proc.run { argv = { 'cp', '-a', sb.dir .. '/upper', tmp .. '/upper' }, timeout = 600, tail_bytes = 65536 }
  if not r or r.code ~= 0 then fs.remove_tree(tmp); return nil, 'copying the prepared layer: ' .. util.trim(r and r.stderr or ''), 'EIO' end
  fs.write(tmp .. '/artifact.json', cjson.encode({ lowers = sb.lowers, key = key, created = os.time(),
    task_id = (sb.labels or {})['cseng.task'] }))
  if not fs.rename(tmp, dest) then
    fs.remove_tree(tmp)
    if not fs.exists(dest .. '/artifact.json') then return nil, 'cannot place warm artifact ' .. dest, 'EIO' end
  end
  return dest
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

--- Artifacts are named by the task's content hash, so an existing one is the same root: it is
--- reused (other runs may have it mounted as a lower layer), and a new one appears atomically.
function M.snapshot(client, sb, key)
  if sb.base_mode then return snapshot_on_base(client, sb, key) end
  local dest = client.base .. '/warm/' .. key
  if fs.exists(dest .. '/etc/passwd') then return dest end
  local tmp = dest .. '.tmp-' .. sb.id
  local ok, err = fs.copy_tree(sb.root, tmp)
  if not ok then fs.remove_tree(tmp); return nil, err, 'EIO' end
  if not fs.rename(tmp, dest) then -- another run got there first
    fs.remove_tree(tmp)
    if not fs.exists(dest .. '/etc/passwd') then return nil, 'cannot place warm artifact ' .. dest, 'EIO' end
  end
  return dest
end

return M
