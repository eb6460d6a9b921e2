--- The fidelity audit of the arena (docs/ARENA.md, "The fidelity audit"): on every sample, one
--- command run inside the sandbox after the measured calls (its own cost is `audit_ms`, never part
--- of a figure) reads what the sandbox really is, and the arena judges it against what was asked
--- and what earlier samples saw:
---
---   fresh or reused  a marker file the audit leaves (/tmp/.cseng-audit, naming the run and the
---                    sample): a later sample that finds one is in a sandbox an earlier sample
---                    used; the sandbox id an earlier sample had; for a sandbox with a kernel of its
---                    own (microVM, gVisor) the boot_id an earlier sample saw. Mount and pid
---                    namespace inodes and the cgroup are recorded as evidence (their inode numbers
---                    are reused by the kernel once freed, so equal numbers alone prove nothing)
---   resources        the CPUs it can use (its affinity, nproc, and a cgroup CPU quota when one is
---                    visible) and its memory (the cgroup limit when visible, else MemTotal), against
---                    the plan's `resources` (cpus, memory_mb) when it asked for any
---   isolation        microvm, gvisor, container or unknown, with the evidence it was told from
---   code path        the adapter, its version and the path its sandbox was made through (sb.code_path)
---
--- The verdict is a record {ok, labels, ...}: `labels` lists what is wrong (failed, reused,
--- cpus_below_request, cpus_above_request, memory_below_request, memory_above_request,
--- audit_failed; absent when there is none); ok is true when there is nothing. A sample whose audit is not ok is reported apart
--- and never pooled with clean samples (lua/reports/startup.lua); readers use sample.audit.ok and
--- sample.audit.labels only by those names.
local util = require('cseng.lib.util')

local audit = {}

local function num(v) return (string.format('%.4g', v)) end

audit.VERSION = 1
audit.MARKER = '/tmp/.cseng-audit'
audit.END = 'cseng-audit-end'

--- The labels that make a sample not clean, with what each means (docs/ARENA.md prints the same).
audit.LABELS = {
  { 'failed', 'the sample failed (its figures are not numbers, its error says why)' },
  { 'reused', 'the sandbox had served an earlier sample (the audit\'s marker file was there, or the same sandbox id, '
    .. 'or the same boot_id of a kernel of its own)' },
  { 'cpus_below_request', 'the CPUs it can use are fewer than the plan asked for' },
  { 'cpus_above_request', 'it can use more CPUs than the plan asked for' },
  { 'memory_below_request', 'its memory is under 90% of what the plan asked for' },
  { 'memory_above_request', 'its memory is over 110% of what the plan asked for' },
  { 'audit_failed', 'the audit command could not run or its answer could not be read' },
}

--- The tolerances: a VM's MemTotal is under its RAM by the kernel's own reserve.
audit.MEMORY_TOLERANCE = 0.10
audit.CPU_TOLERANCE = 0.01

--- The audit's command (POSIX sh; each read guarded, so a sandbox without a file or a tool
--- answers the rest). It reads files with the shell's own `read` rather than a tool per value:
--- every external command is a process spawn inside the sandbox (milliseconds each on a loaded
--- host, ~30 of them before), while this spawns one `ls` (the namespace links and the cgroup
--- mount's inode) and tools only where a value is missing or long. key: what the marker file will
--- say (run id and sample).
---@param key string
---@return string
function audit.command(key)
  local q = util.shell_quote(key)
  return table.concat({
    'm=' .. audit.MARKER .. '; [ -d /tmp ] && [ -w /tmp ] || m=/var/tmp/.cseng-audit',
    'mk=; [ -e "$m" ] && { IFS= read -r mk < "$m"; } 2>/dev/null; [ ${#mk} -le 200 ] || mk=$(printf %s "$mk" | cut -c1-200)',
    'echo "marker=$mk"',
    '(echo ' .. q .. ' > "$m") 2>/dev/null && echo "marker_written=1"',
    -- r KEY FILE: the file's first line (empty when unreadable)
    'r() { v=; [ -r "$2" ] && { IFS= read -r v < "$2"; } 2>/dev/null; echo "$1=$v"; }',
    'r boot_id /proc/sys/kernel/random/boot_id',
    'mnt_ns=; pid_ns=; cgroup_ns=; cgroup_inode=',
    'while read -r ino rest; do case "$rest" in',
    '  *" /sys/fs/cgroup") cgroup_inode=$ino ;;',
    '  *"/ns/mnt -> "*) mnt_ns=${rest##* -> } ;; *"/ns/pid -> "*) pid_ns=${rest##* -> } ;;',
    '  *"/ns/cgroup -> "*) cgroup_ns=${rest##* -> } ;;',
    'esac; done <<CSENG_AUDIT_LS',
    '$(ls -ild /sys/fs/cgroup /proc/$$/ns/mnt /proc/$$/ns/pid /proc/$$/ns/cgroup 2>/dev/null)',
    'CSENG_AUDIT_LS',
    'echo "mnt_ns=$mnt_ns"; echo "pid_ns=$pid_ns"; echo "cgroup_ns=$cgroup_ns"; echo "cgroup_inode=$cgroup_inode"',
    'c=; [ -r /proc/self/cgroup ] && while IFS= read -r l; do c="$c$l;"; done < /proc/self/cgroup; echo "cgroup=$c"',
    -- the affinity's CPUs: Cpus_allowed_list counted here (nproc, a spawn, only where it is absent)
    'cal=; [ -r /proc/self/status ] && while IFS= read -r l; do case "$l" in Cpus_allowed_list:*) cal=${l#*:};; esac; done < /proc/self/status',
    'set -f; cal=$(echo $cal); n=0; oifs=$IFS; IFS=,',
    'for x in $cal; do case "$x" in *-*) n=$((n + ${x#*-} - ${x%-*} + 1)) ;; [0-9]*) n=$((n + 1)) ;; esac; done; IFS=$oifs; set +f',
    '[ "$n" -gt 0 ] || n=$(nproc 2>/dev/null); echo "nproc=$n"; echo "cpus_allowed=$cal"',
    'for f in cpu.max memory.max; do [ -r /sys/fs/cgroup/$f ] && r cgroup2.$f /sys/fs/cgroup/$f; done',
    'for f in cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory/memory.limit_in_bytes; do ' ..
      '[ -r /sys/fs/cgroup/$f ] && r "cgroup1.${f#*/}" /sys/fs/cgroup/$f; done',
    'mt=; [ -r /proc/meminfo ] && while read -r k v u; do [ "$k" = MemTotal: ] && { mt=$v; break; }; done < /proc/meminfo; echo "mem_total_kb=$mt"',
    'up=; [ -r /proc/uptime ] && read -r up x < /proc/uptime; echo "uptime=$up"',
    '[ -r /proc/cpuinfo ] && while IFS= read -r l; do case "$l" in flags*) ' ..
      'case "$l " in *" hypervisor "*) echo "hypervisor=1";; esac; break;; esac; done < /proc/cpuinfo',
    'k=; [ -r /proc/sys/kernel/osrelease ] && read -r k < /proc/sys/kernel/osrelease; [ -n "$k" ] || k=$(uname -r 2>/dev/null); echo "kernel=$k"',
    'k=; [ -r /proc/sys/kernel/version ] && IFS= read -r k < /proc/sys/kernel/version; [ -n "$k" ] || k=$(uname -v 2>/dev/null); echo "kernel_version=$k"',
    '[ -e /.dockerenv ] && echo "dockerenv=1"',
    '[ -e /run/.containerenv ] && echo "containerenv=1"',
    'r pid1 /proc/1/comm',
    'a=; b=; c=; [ -r /proc/self/uid_map ] && read -r a b c x < /proc/self/uid_map; echo "uid_map=$a $b $c"',
    'r sys_vendor /sys/class/dmi/id/sys_vendor',
    'r product /sys/class/dmi/id/product_name',
    'l=; [ -r /proc/cmdline ] && IFS= read -r l < /proc/cmdline; [ ${#l} -le 300 ] || l=$(printf %s "$l" | cut -c1-300); echo "cmdline=$l"',
    'echo ' .. audit.END,
  }, '\n')
end

--- The audit's answer as key = value (the last value of a key wins); nil when the end marker is
--- missing (the command did not run to its end).
---@param text string
---@return table|nil
function audit.parse(text)
  text = tostring(text or '')
  if not text:find(audit.END, 1, true) then return nil end
  local kv = {}
  for line in text:gmatch('[^\n]+') do
    local k, v = line:match('^([%w%._]+)=(.*)$')
    if k then kv[k] = util.trim(v) end
  end
  return kv
end

local CONTAINER_INIT = { bwrap = true, ['docker-init'] = true, tini = true, sleep = true, catatonit = true,
  ['dumb-init'] = true, ['containerd-shim'] = true, conmon = true, ['cseng-jail'] = true }

--- The isolation class from an audit's answer, with its evidence: gvisor (its fixed uname),
--- container (a runtime's marks), microvm (a hypervisor flag and a kernel booted minutes ago, no
--- container mark), else unknown.
---@param kv table
---@return string class, string[] evidence
function audit.isolation(kv)
  local ev = {}
  if kv.kernel == '4.4.0' and tostring(kv.kernel_version):find('2016', 1, true) then
    return 'gvisor', { 'uname 4.4.0 of 2016 (gVisor\'s)' }
  end
  if kv.dockerenv then ev[#ev + 1] = '/.dockerenv' end
  if kv.containerenv then ev[#ev + 1] = '/run/.containerenv' end
  local cg = tostring(kv.cgroup or '')
  for _, w in ipairs({ 'docker', 'kubepods', 'containerd', 'libpod', 'lxc' }) do
    if cg:find(w, 1, true) then ev[#ev + 1] = 'cgroup ' .. w end
  end
  if kv.pid1 and CONTAINER_INIT[kv.pid1] then ev[#ev + 1] = 'pid 1 is ' .. kv.pid1 end
  -- a user namespace that maps root elsewhere: a rootless or user-namespaced container (a VM's
  -- kernel and the host's own show the identity map, 0 0 4294967295)
  local inside, outside = tostring(kv.uid_map or ''):match('^%s*(%d+)%s+(%d+)%s+%d+')
  if inside == '0' and outside ~= '0' then ev[#ev + 1] = 'user namespace: root is uid ' .. outside .. ' outside' end
  if #ev > 0 then return 'container', ev end
  local up = tonumber(kv.uptime)
  if kv.hypervisor and up and up < 3600 then
    return 'microvm', { 'hypervisor flag', string.format('kernel up %.0f s', up) }
  end
  if kv.hypervisor then ev[#ev + 1] = 'hypervisor flag, kernel up ' .. tostring(kv.uptime) .. ' s' end
  return 'unknown', ev
end

-- CPUs a cgroup quota grants, or nil when none is set or visible.
local function quota_cpus(kv)
  local q, per = tostring(kv['cgroup2.cpu.max'] or ''):match('^(%S+)%s+(%d+)$')
  if q and q ~= 'max' and tonumber(q) and tonumber(per) and tonumber(per) > 0 then return tonumber(q) / tonumber(per) end
  local q1, p1 = tonumber(kv['cgroup1.cfs_quota_us'] or kv['cgroup1.cpu.cfs_quota_us']), tonumber(kv['cgroup1.cfs_period_us']
    or kv['cgroup1.cpu.cfs_period_us'])
  if q1 and q1 > 0 and p1 and p1 > 0 then return q1 / p1 end
  return nil
end

-- Memory (MiB) a cgroup limit grants, or nil when none is set or visible.
local function limit_mb(kv)
  local v = tonumber(kv['cgroup2.memory.max'] or kv['cgroup1.limit_in_bytes'] or kv['cgroup1.memory.limit_in_bytes'] or '')
  if v and v > 0 and v < 2 ^ 60 then return v / 1048576 end
  return nil
end

--- What the sandbox was given, read from the answer: cpus (usable: its affinity's count, capped by
--- a visible quota), memory_mb (a visible cgroup limit, else MemTotal), and how each was told.
---@param kv table
---@return table
function audit.resources(kv)
  local r = {}
  local n = math.tointeger(tonumber(kv.nproc or ''))
  local q = quota_cpus(kv)
  r.nproc, r.cpu_quota = n, q
  if n and q then r.cpus, r.cpus_from = math.min(n, q), q < n and 'cgroup quota' or 'affinity (nproc)'
  elseif n then r.cpus, r.cpus_from = n, 'affinity (nproc)'
  elseif q then r.cpus, r.cpus_from = q, 'cgroup quota' end
  local lim = limit_mb(kv)
  local total = tonumber(kv.mem_total_kb or '')
  r.mem_total_mb = total and total / 1024 or nil
  r.memory_limit_mb = lim
  if lim and (not r.mem_total_mb or lim <= r.mem_total_mb) then r.memory_mb, r.memory_from = lim, 'cgroup limit'
  elseif r.mem_total_mb then r.memory_mb, r.memory_from = r.mem_total_mb, 'MemTotal' end
  return r
end

--- The per-provider memory of a run's audits (what earlier samples saw).
---@return table
function audit.seen() return { ids = {}, boots = {}, keys = {} } end

--- Judge one sample. o: {kv (the parsed answer, nil when it could not be read), error (why the
--- audit did not run), key (this sample's marker), sandbox_id, failed (the sample failed), asked
--- ({cpus, memory_mb} or nil), seen (audit.seen() of the provider), code_path, adapter, version}.
--- Returns the audit record; remembers this sample's identity in o.seen.
---@param o table
---@return table
function audit.judge(o)
  local labels, why = {}, {}
  local function label(name, text)
    labels[#labels + 1] = name
    why[name] = text
  end
  local a = { version = audit.VERSION, code_path = o.code_path, adapter = o.adapter, adapter_version = o.version,
    sandbox_id = o.sandbox_id }
  if o.failed then label('failed', o.failed) end
  local seen = o.seen or audit.seen()
  if o.sandbox_id and seen.ids[o.sandbox_id] then
    label('reused', 'sandbox id ' .. tostring(o.sandbox_id) .. ' served sample ' .. seen.ids[o.sandbox_id])
  end
  local kv = o.kv
  if not kv then
    if o.sandbox_id then label('audit_failed', o.error or 'no answer') end
    a.labels, a.why, a.ok = #labels > 0 and labels or nil, next(why) and why or nil, #labels == 0
    if o.sandbox_id then seen.ids[o.sandbox_id] = seen.ids[o.sandbox_id] or o.key end
    return a
  end
  a.fresh = true
  local marker = kv.marker ~= '' and kv.marker or nil
  if marker and marker ~= o.key then
    a.fresh = false
    if not why.reused then label('reused', 'the audit marker of ' .. marker .. ' was there') end
  end
  a.marker_found, a.marker_written = marker, kv.marker_written == '1' or nil
  a.isolation, a.evidence = audit.isolation(kv)
  a.boot_id = kv.boot_id ~= '' and kv.boot_id or nil
  a.mnt_ns, a.pid_ns, a.cgroup_ns = kv.mnt_ns, kv.pid_ns, kv.cgroup_ns
  a.cgroup, a.cgroup_inode = kv.cgroup, kv.cgroup_inode
  a.uptime_s = tonumber(kv.uptime or '')
  a.kernel, a.pid1 = kv.kernel, kv.pid1 ~= '' and kv.pid1 or nil
  local own_kernel = a.isolation == 'microvm' or a.isolation == 'gvisor'
  if own_kernel and a.boot_id and seen.boots[a.boot_id] and seen.boots[a.boot_id] ~= o.key then
    a.fresh = false
    if not why.reused then label('reused', 'boot_id ' .. a.boot_id .. ' (a kernel of its own) served sample ' .. seen.boots[a.boot_id]) end
  end
  if why.reused then a.fresh = false end
  local r = audit.resources(kv)
  a.cpus, a.cpus_from, a.nproc, a.cpu_quota = r.cpus, r.cpus_from, r.nproc, r.cpu_quota
  a.memory_mb, a.memory_from, a.mem_total_mb = r.memory_mb and math.floor(r.memory_mb + 0.5) or nil, r.memory_from,
    r.mem_total_mb and math.floor(r.mem_total_mb + 0.5) or nil
  local asked = o.asked
  if asked then
    a.asked = asked
    if asked.cpus then
      if not r.cpus then label('audit_failed', 'no CPU count could be read')
      elseif r.cpus < asked.cpus * (1 - audit.CPU_TOLERANCE) then
        label('cpus_below_request', string.format('%s CPUs usable (%s), %s asked', num(r.cpus), r.cpus_from, num(asked.cpus)))
      elseif r.cpus > asked.cpus * (1 + audit.CPU_TOLERANCE) then
        label('cpus_above_request', string.format('%s CPUs usable (%s), %s asked', num(r.cpus), r.cpus_from, num(asked.cpus)))
      end
    end
    if asked.memory_mb then
      if not r.memory_mb then label('audit_failed', 'no memory size could be read')
      elseif r.memory_mb < asked.memory_mb * (1 - audit.MEMORY_TOLERANCE) then
        label('memory_below_request', string.format('%.0f MiB (%s), %s asked', r.memory_mb, r.memory_from, num(asked.memory_mb)))
      elseif r.memory_mb > asked.memory_mb * (1 + audit.MEMORY_TOLERANCE) then
        label('memory_above_request', string.format('%.0f MiB (%s), %s asked', r.memory_mb, r.memory_from, num(asked.memory_mb)))
      end
    end
  end
  -- remembered for the samples after this one
  if o.sandbox_id then seen.ids[o.sandbox_id] = seen.ids[o.sandbox_id] or o.key end
  if own_kernel and a.boot_id then seen.boots[a.boot_id] = seen.boots[a.boot_id] or o.key end
  a.labels, a.why, a.ok = #labels > 0 and labels or nil, next(why) and why or nil, #labels == 0
  return a
end

--- Run the audit in sb (one exec, `timeout` seconds) and judge it (o as audit.judge's, without
--- kv and error). Returns the audit record and the command's own time in ms (nil when it did not
--- run).
---@return table audit, number|nil ms
function audit.run(adapter, client, sb, o)
  local clock = require('cseng.clock')
  local t0 = clock.now()
  local ok, res, err = pcall(adapter.exec, client, sb, audit.command(o.key), { timeout = o.timeout or 30, cwd = '/' })
  local ms = (clock.answered(t0) - t0) / 1e6
  local j = util.copy(o)
  if not ok then j.error = tostring(type(res) == 'table' and (res.message or res[1]) or res)
  elseif not res then j.error = tostring(err)
  else
    j.kv = audit.parse(res.stdout)
    if not j.kv then j.error = string.format('exit %s, no end marker in its output (%s)', tostring(res.code),
      util.tail(tostring(res.stdout or '') .. tostring(res.stderr or ''), 160)) end
  end
  return audit.judge(j), ms
end

return audit
