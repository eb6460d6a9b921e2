--- The local provider: one bubblewrap sandbox per trial on this machine.
---
--- A sandbox is a directory: root/ becomes the sandbox's "/" (its workdir, /tmp, /root, /logs,
--- /tests live there, so state persists between the exec calls of one trial), the host's /usr
--- (or a user-given rootfs's) is bound read-only, /etc is a small synthetic one plus read-only
--- binds of what programs need (ld.so.cache, ssl, alternatives). Every exec is a new bwrap
--- process in new namespaces (no network unless the task allows it and the user asks), with
--- --die-with-parent, inside a cgroup with the task's memory/CPU limits when the machine lets us.
--- Cold: a fresh root per trial. Warm: an overlayfs (root only) over a prepared root, so the
--- environment staging is done once per task; without overlayfs, a copy of the prepared root.
--- Dockerfile RUN steps are not executed here: the runner records them as fidelity gaps.
local fs = require 'cseng.fs'
local proc = require 'cseng.proc'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local archive = require 'cseng.archive'
local cjson = require 'cjson'
local util = require 'util'
local task = require 'cseng.task'

local M = {
  name = 'local',
  description = 'bubblewrap sandboxes on this machine (no credentials, no network by default)',
  applies_dockerfile = false, -- the runner stages COPY/ENV/WORKDIR; RUN steps are fidelity gaps
  credentials = {},
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 },
  capabilities = { non_root = true, network_policy = true, run_steps = false, warm = true },
}

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
  return nil, 'cgroup ' .. dir .. ' stays busy'
end

-- Leftovers of dead runs: empty cgroups whose sandbox directory is gone.
local function cg_sweep(client)
  for _, tree in ipairs(client.cgroup.trees) do
    for _, name in ipairs(fs.list(tree) or {}) do
      if name:match('^cseng%-') and not fs.exists(client.base .. '/sandboxes/' .. name) then
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
    error('local provider: bubblewrap is not installed (' .. bwrap .. '); run make deps or apt-get install bubblewrap', 0)
  end
  local base = cfg.root or os.getenv('CSENG_LOCAL_ROOT') or '/tmp/cseng-local'
  assert(fs.mkdir_p(base .. '/sandboxes'))
  assert(fs.mkdir_p(base .. '/warm'))
  local rootfs = cfg.rootfs or os.getenv('CSENG_LOCAL_ROOTFS')
  if rootfs and not fs.exists(rootfs .. '/usr') then
    error('local provider: rootfs ' .. rootfs .. ' has no usr/ directory', 0)
  end
  local client = {
    bwrap = bwrap,
    base = base,
    rootfs = rootfs,
    is_root = sys.uid() == 0,
    cgroup = cfg.cgroups ~= false and detect_cgroup() or nil,
    keep_usr_local = cfg.keep_usr_local or os.getenv('CSENG_LOCAL_KEEP_USR_LOCAL') == '1',
  }
  if client.cgroup then cg_sweep(client) end
  return client
end

local function write_etc(root, hostname, network)
  assert(fs.mkdir_p(root .. '/etc'))
  fs.write(root .. '/etc/passwd', table.concat({
    'root:x:0:0:root:/root:/bin/bash',
    'cseng:x:' .. VERIFIER_UID .. ':' .. VERIFIER_UID .. ':cseng verifier:/home/cseng:/bin/bash',
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin', '' }, '\n'))
  fs.write(root .. '/etc/group', table.concat({
    'root:x:0:', 'cseng:x:' .. VERIFIER_UID .. ':', 'nogroup:x:65534:', '' }, '\n'))
  fs.write(root .. '/etc/hostname', hostname .. '\n')
  fs.write(root .. '/etc/hosts', '127.0.0.1 localhost ' .. hostname .. '\n::1 localhost\n')
  fs.write(root .. '/etc/nsswitch.conf', 'passwd: files\ngroup: files\nhosts: files dns\n')
  if network then
    local resolv = fs.read('/etc/resolv.conf')
    if resolv then fs.write(root .. '/etc/resolv.conf', resolv) end
  end
end

local function make_root(root, hostname, network)
  for _, d in ipairs({ 'tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'workspace', 'run', 'cseng' }) do
    assert(fs.mkdir_p(root .. '/' .. d))
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
    local d = tree .. '/' .. sb.id
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

--- Create a sandbox. spec: {id_prefix, labels, env, workdir, network, cpus, memory_mb,
--- warm_artifact (a prepared root from M.snapshot)}.
function M.create(client, spec)
  local id = 'cseng-' .. crypto.hex(crypto.random_bytes(6))
  local dir = client.base .. '/sandboxes/' .. id
  local root = dir .. '/root'
  assert(fs.mkdir_p(dir))
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
    assert(fs.mkdir_p(root)); assert(fs.mkdir_p(dir .. '/upper')); assert(fs.mkdir_p(dir .. '/work'))
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
  assert(fs.mkdir_p(root .. sb.workdir))
  setup_cgroup(client, sb, spec)
  return sb
end

local function bwrap_argv(client, sb, opts)
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

local function exec_env(sb, opts)
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
  local res, err, code = proc.run {
    argv = argv, env = exec_env(sb, opts), stdin = opts.stdin, timeout = opts.timeout or 600,
    tail_bytes = opts.tail_bytes or (1 << 20),
  }
  if not res then return nil, err, code end
  return res
end

-- Refuse to write through a symlink the sandbox may have planted: every component of the
-- target path below the sandbox root must be a real directory (or not exist yet).
local function safe_target(root, path)
  local cur = root
  for part in path:gmatch('[^/]+') do
    if part == '..' then return nil, path .. ': ".." in a target path' end
    cur = cur .. '/' .. part
    local st = fs.lstat(cur)
    if st and st.type ~= 'dir' then return nil, path .. ': ' .. part .. ' is a ' .. st.type .. ', not a directory' end
    if not st then
      local ok, err = fs.mkdir_p(cur)
      if not ok then return nil, err end
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
    for _, tree in ipairs(client.cgroup.trees) do dirs[#dirs + 1] = tree .. '/' .. sb.id end
  end
  for _, d in ipairs(dirs) do
    local ok, err = cg_remove(d)
    if not ok then return nil, err end
  end
  return true
end

--- Destroy a sandbox: unmount, remove its directory and cgroups. Idempotent.
function M.destroy(client, sb)
  local dir = sb.dir or (client.base .. '/sandboxes/' .. sb.id)
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
  local dest = client.base .. '/warm/' .. key
  if fs.exists(dest .. '/etc/passwd') then return dest end
  return nil
end

--- Artifacts are named by the task's content hash, so an existing one is the same root: it is
--- reused (other runs may have it mounted as a lower layer), and a new one appears atomically.
function M.snapshot(client, sb, key)
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
