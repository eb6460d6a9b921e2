--- The local provider's resource limits: every sandbox and every build gets a cgroup (memory,
--- pids, CPU) and a size-limited writable layer, with defaults when the task names none.
---
--- Storage: the writable layers live on one btrfs filesystem in a sparse image file mounted
--- through a loop device (the store, made once per machine under the cache directory), each
--- sandbox's layer a subvolume whose quota group refuses writes past its storage_mb (EDQUOT), as
--- docker's --storage-opt size does on XFS with project quotas. The store's own size bounds what
--- all sandboxes together can write, so no task fills the host's disk. Where the store cannot
--- be made (no loop device, no btrfs, not root), layers live in a plain directory, the limit is
--- not enforced, and the trial records that gap (limits.storage_enforced = false, with why).
---
--- cgroups: v2 (one unified tree) or v1 (one tree per controller; cpu may be mounted alone or as
--- "cpu,cpuacct"). Files in cgroupfs cannot be replaced by rename, so limits are written in
--- place with fs.append (one write(2)).
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local task = require('cseng.task')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')

local limits = {}

--- What a sandbox gets when its task names nothing (Harbor's task defaults; pids as docker's
--- --pids-limit would be set by a careful operator). Overridable with --default-limits.
limits.DEFAULTS = { cpus = 1, memory_mb = 2048, storage_mb = 10240, pids = 4096 }

--- The store's size when it is first made (sparse: only what is written takes disk space).
limits.STORE_GB = 64

local KEYS = { cpus = 'number', memory_mb = 'int', storage_mb = 'int', pids = 'int' }

--- Parse "cpus=2,memory_mb=4096,..." (the --default-limits flag) or check a plan's table: a
--- table of the known keys, or nil and a message naming the bad part.
function limits.parse(v, where)
  where = where or '--default-limits'
  local t = {}
  if type(v) == 'string' then
    for part in v:gmatch('[^,]+') do
      local k, x = part:match('^%s*([%w_]+)%s*=%s*([^%s]+)%s*$')
      if not k then return nil, where .. ': expected KEY=VALUE, got "' .. part .. '"' end
      t[k] = tonumber(x)
      if t[k] == nil then return nil, where .. ': ' .. k .. ': not a number: ' .. x end
    end
  elseif type(v) == 'table' then
    for k, x in pairs(v) do t[k] = x end
  else
    return nil, where .. ': expected a table or "KEY=VALUE,..."'
  end
  for k, x in pairs(t) do
    local want = KEYS[k]
    if not want then return nil, where .. ': unknown limit "' .. tostring(k) .. '" (cpus, memory_mb, storage_mb, pids)' end
    if type(x) ~= 'number' or x <= 0 or (want == 'int' and not math.tointeger(x)) then
      return nil, where .. ': ' .. k .. ': expected a ' .. (want == 'int' and 'whole number' or 'number') .. ' > 0, got ' .. tostring(x)
    end
    if want == 'int' then t[k] = math.tointeger(x) end
  end
  return t
end

--- The limits a sandbox or build gets: the task's, else the run's defaults, else DEFAULTS; and
--- where each came from ("task" | "default").
function limits.resolve(spec)
  local defaults = util.merge(limits.DEFAULTS, spec.default_limits)
  local out, source = {}, {}
  local asked = { cpus = spec.cpus, memory_mb = spec.memory_mb, storage_mb = spec.disk_mb or spec.storage_mb, pids = spec.pids }
  for k in pairs(KEYS) do
    if asked[k] then out[k], source[k] = asked[k], 'task' else out[k], source[k] = defaults[k], 'default' end
  end
  out.source = source
  return out
end

-- ---- the store ---------------------------------------------------------------------

local function is_mounted_btrfs(dir)
  return fs.exists(dir) and require('cseng.volume').supported(dir) == true
end

--- Open (make and mount, the first time) the store: {dir, enforced, why}. o: {dir, image, size_gb}.
function limits.store(o)
  local dir, image = o.dir, o.image
  local function plain(why)
    local fallback = o.fallback
    errors.check(nil, fs.mkdir_p(fallback))
    return { dir = fallback, enforced = false, why = why }
  end
  if is_mounted_btrfs(dir) then return { dir = dir, enforced = true } end
  if sys.uid() ~= 0 then return plain('storage limits need root (a loop-mounted btrfs store)') end
  for _, tool in ipairs({ 'mkfs.btrfs', 'btrfs', 'mount' }) do
    if not proc.which(tool) then return plain(tool .. ' is not installed (btrfs-progs; make deps)') end
  end
  errors.check(nil, fs.mkdir_p(util.dirname(image)))
  local lock
  for _ = 1, 600 do -- another process may be making it
    lock = fs.lock(image .. '.lock')
    if lock then break end
    task.sleep(0.05)
  end
  if not lock then return plain('the store is being made by another process (' .. image .. '.lock)') end
  local function run(argv)
    local r = proc.run { argv = argv, timeout = 120, tail_bytes = 65536 }
    if not r or r.code ~= 0 then return nil, util.shell_join(argv) .. ': ' .. util.trim(r and (r.stderr .. r.stdout) or 'did not run') end
    return true
  end
  local ok, err = true, nil
  if not is_mounted_btrfs(dir) then
    if not fs.exists(image) then
      local size = math.floor((o.size_gb or limits.STORE_GB) * 1024) .. 'M'
      ok, err = run({ 'truncate', '-s', size, image .. '.tmp' })
      if ok then ok, err = run({ 'mkfs.btrfs', '-q', image .. '.tmp' }) end
      if ok then ok, err = fs.rename(image .. '.tmp', image) end
    end
    if ok then ok, err = fs.mkdir_p(dir) end
    if ok then ok, err = run({ 'mount', '-o', 'loop,noatime,user_subvol_rm_allowed', image, dir }) end
    if ok then ok, err = run({ 'btrfs', 'quota', 'enable', dir }) end
  end
  lock:close()
  if not ok then return plain('the btrfs store could not be made: ' .. tostring(err)) end
  return { dir = dir, enforced = true }
end

--- A writable layer for a sandbox or build: a subvolume with the storage limit (a directory when
--- the store is not enforced). Returns true or nil, why, code.
function limits.volume(store, path, storage_mb)
  if not store.enforced then return fs.mkdir_p(path) end
  local ok, err = require('cseng.volume').create(path, math.floor(storage_mb * 1048576))
  if not ok then return nil, err, errors.EIO end
  return true
end

--- A layer at path that starts as the layer src holds now (src made by limits.volume): a
--- copy-on-write snapshot, where the store has volumes (btrfs); nil and why elsewhere (the caller
--- copies instead). limits.volume_limit gives it its own limit.
function limits.volume_snapshot(store, src, path)
  if not store.enforced then return nil, 'the store has no volumes (' .. tostring(store.why) .. ')' end
  return require('cseng.volume').snapshot(src, path)
end

--- Set the limit of a layer made by limits.volume or limits.volume_snapshot.
function limits.volume_limit(store, path, storage_mb)
  if not store.enforced then return true end
  local ok, err = require('cseng.volume').limit(path, math.floor(storage_mb * 1048576))
  if not ok then return nil, err, errors.EIO end
  return true
end

--- Remove a layer made by limits.volume (anything else at path is refused: the caller checked
--- that path is its own).
function limits.remove_volume(store, path)
  if not fs.exists(path) then return true end
  if store.enforced then
    local ok = require('cseng.volume').delete(path)
    if ok then return true end
  end
  local ok, err = fs.remove_tree(path)
  if not ok then return nil, err, errors.EIO end
  return true
end

-- ---- cgroups -----------------------------------------------------------------------

local CG = '/sys/fs/cgroup'

local function cg_write(path, value)
  return fs.append(path, tostring(value))
end

--- The machine's cgroup trees for sandboxes: {version, trees, memory, cpu, pids} or nil.
function limits.detect_cgroup()
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

--- Make the cgroups of one sandbox (name: unique on this machine) with lim (limits.resolve).
--- Returns {dirs = the cgroups to join, applied = what was written, views = {{dir, path inside}},
--- memory = the memory cgroup (for its OOM count)}.
function limits.cgroup(cg, name, lim)
  local out = { dirs = {}, applied = {}, views = {} }
  if not cg then return out end
  local function make(tree)
    local d = tree .. '/' .. name
    if fs.mkdir_p(d) then out.dirs[#out.dirs + 1] = d; return d end
  end
  if cg.version == 2 then
    local d = make(cg.trees[1])
    if d then
      if cg_write(d .. '/memory.max', math.floor(lim.memory_mb * 1048576)) then out.applied.memory_mb = lim.memory_mb end
      cg_write(d .. '/memory.swap.max', 0)
      if cg_write(d .. '/cpu.max', string.format('%d 100000', math.floor(lim.cpus * 100000))) then out.applied.cpus = lim.cpus end
      if cg_write(d .. '/pids.max', lim.pids) then out.applied.pids = lim.pids end
      out.memory = d
      out.views[1] = { d, '/sys/fs/cgroup' }
    end
  else
    if fs.exists(cg.memory) then
      local d = make(cg.memory)
      if d and cg_write(d .. '/memory.limit_in_bytes', math.floor(lim.memory_mb * 1048576)) then
        out.applied.memory_mb = lim.memory_mb
        -- no swap beyond the limit where the kernel accounts it
        if fs.exists(d .. '/memory.memsw.limit_in_bytes') then cg_write(d .. '/memory.memsw.limit_in_bytes', math.floor(lim.memory_mb * 1048576)) end
        out.memory = d
        out.views[#out.views + 1] = { d, '/sys/fs/cgroup/memory' }
      end
    end
    if fs.exists(cg.cpu) then
      local d = make(cg.cpu)
      if d and cg_write(d .. '/cpu.cfs_period_us', 100000)
          and cg_write(d .. '/cpu.cfs_quota_us', math.floor(lim.cpus * 100000)) then
        out.applied.cpus = lim.cpus
        out.views[#out.views + 1] = { d, '/sys/fs/cgroup/cpu' }
      end
    end
    if fs.exists(cg.pids) then
      local d = make(cg.pids)
      if d and cg_write(d .. '/pids.max', lim.pids) then
        out.applied.pids = lim.pids
        out.views[#out.views + 1] = { d, '/sys/fs/cgroup/pids' }
      end
    end
  end
  return out
end

--- Which limits a sandbox's cgroups report as hit since they were made: {memory = OOM kills,
--- pids = forks refused} (counts; nil where the kernel does not say).
function limits.hits(cg, dirs)
  local out = {}
  for _, d in ipairs(dirs or {}) do
    local oom = fs.read(d .. '/memory.oom_control') or fs.read(d .. '/memory.events')
    if oom then
      local n = tonumber(oom:match('oom_kill (%d+)'))
      if n and n > 0 then out.memory = n end
    end
    local pev = fs.read(d .. '/pids.events')
    if pev then
      local n = tonumber(pev:match('max (%d+)'))
      if n and n > 0 then out.pids = n end
    end
  end
  if cg == nil then return out end
  return out
end

--- Remove a cgroup: kill what is left in it, then rmdir (EBUSY until the last of its processes
--- has exited and been reaped: the sandbox's init goes a moment after the launcher the engine
--- waited for). Tried again after 1 ms, then twice as long each time up to 25 ms, for 1 s.
function limits.remove_cgroup(dir)
  local gone = util.settle(function()
    if not fs.exists(dir) then return true, true end
    local procs = fs.read(dir .. '/cgroup.procs') or ''
    for pid in procs:gmatch('%d+') do sys.kill(tonumber(pid), 'KILL') end
    local removed = fs.remove(dir) and true or false
    return removed, removed
  end, { first = 0.001, max = 0.025, seconds = 1 })
  if gone then return true end
  return nil, 'cgroup ' .. dir .. ' stays busy', 'EBUSY'
end

return limits
