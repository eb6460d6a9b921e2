--- The arena's workloads (docs/ARENA.md, "Primitives"): what a sample measures once its sandbox
--- answered its first command. `startup` measures nothing more (the arena as it always was); the
--- others are one file each in this folder, a table:
---
---   W.name, W.doc           its name (--workload NAME) and one line
---   W.capability            the adapter capability it needs (nil: every adapter can run it)
---   W.figures(wo)           the figures it records: {{name, unit ('ms' | 'MiB/s' | 'n'), what (from where to where)}}
---   W.headline(wo)          the figure the console and the report's answer compare (a time: less is better)
---   W.prepare(F, wo)        optional, once per run before the first sample (a data pool): its state
---   W.run(ctx)              one sample, after the first command: times its figures with ctx:time,
---                           checks what arrived with ctx:check (clock-free: hashes, counts, contents)
---   W.close(F, ws)          optional: at the run's end
---
--- A figure is a time taken with the monotonic clock from the adapter call to the arrival of its
--- last answer (clock.answered), or derived from such times (MiB/s). A sample that fails has no
--- figures at all (never a 0): its error, stage and checks say why.
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local workloads = {}

--- Every workload, in the order help and reports list them.
workloads.NAMES = { 'startup', 'exec', 'upload', 'download', 'files', 'snapshot', 'pause', 'fork', 'egress', 'standard' }

--- The defaults of the workload options (plan: workload_options = {...}; flags override).
workloads.DEFAULTS = {
  sizes = { 1 << 20, 64 << 20, 512 << 20 }, -- upload, download, snapshot
  exec_count = 10,                           -- exec: round trips per sample
  files = 1000, file_bytes = 4096,           -- files: how many, each this size
  fork_count = 4,                            -- fork: 1 -> N
  exec_timeout = 600,                        -- each of a workload's commands
  -- egress_url (egress: what the sandbox fetches; default from the machine's apt sources),
  -- standard_dir (standard: the repository it builds; default data/workloads/standard)
}

local KNOWN_OPTIONS = { sizes = true, exec_count = true, files = true, file_bytes = true, fork_count = true,
  exec_timeout = true, egress_url = true, standard_dir = true }

--- "1MiB" | "64KiB" | "1GiB" | "4096" (bytes) -> integer bytes, or nil.
---@param s any
---@return integer|nil
function workloads.parse_size(s)
  if math.tointeger(s) then return math.tointeger(s) end
  local n, unit = tostring(s):match('^%s*(%d+)%s*([KkMmGg]?i?[Bb]?)%s*$')
  if not n then return nil end
  local mult = ({ [''] = 1, b = 1, k = 1024, kib = 1024, kb = 1024, m = 1 << 20, mib = 1 << 20, mb = 1 << 20,
    g = 1 << 30, gib = 1 << 30, gb = 1 << 30 })[unit:lower()]
  if not mult then return nil end
  return math.tointeger(tonumber(n) * mult)
end

--- A size as figures name it: 1MiB, 64KiB, 4096B.
---@param b integer
---@return string
function workloads.size_name(b)
  if b >= (1 << 30) and b % (1 << 30) == 0 then return (b >> 30) .. 'GiB' end
  if b >= (1 << 20) and b % (1 << 20) == 0 then return (b >> 20) .. 'MiB' end
  if b >= 1024 and b % 1024 == 0 then return (b >> 10) .. 'KiB' end
  return b .. 'B'
end

--- A sized transfer's figures: per size, PREFIX_<size>_ms (span: what is timed) and
--- PREFIX_<size>_mibps; and its headline, the largest size's time.
---@return table figures, fun(wo: table): string headline
function workloads.transfer_figures(prefix, span)
  local function figures(wo)
    local out = {}
    for _, b in ipairs(wo.sizes) do
      local n = workloads.size_name(b)
      out[#out + 1] = { prefix .. '_' .. n .. '_ms', 'ms', span .. ' (' .. n .. ')' }
      out[#out + 1] = { prefix .. '_' .. n .. '_mibps', 'MiB/s', n .. ' over ' .. prefix .. '_' .. n .. '_ms' }
    end
    return out
  end
  return figures, function(wo) return prefix .. '_' .. workloads.size_name(wo.sizes[#wo.sizes]) .. '_ms' end
end

--- Load a workload by name (one line listing the names when there is none).
---@param name string
---@return table
function workloads.load(name)
  name = tostring(name or 'startup')
  for _, n in ipairs(workloads.NAMES) do
    if n == name then return require('cseng.run.workloads.' .. name) end
  end
  errors.raise(errors.EUSAGE, string.format('--workload %s: the workloads are %s', name, table.concat(workloads.NAMES, ', ')))
end

--- The workload options of a plan merged with its flags, checked (a bad one raises one line naming
--- it) and filled with the defaults.
---@param o table the run's options (o.workload_options, and the flags' o.sizes, o.fork_count, ...)
---@return table wo
function workloads.options(o)
  local given = o.workload_options or {}
  if type(given) ~= 'table' then error('workload_options: expected a table, got ' .. type(given), 0) end
  for k in pairs(given) do
    if not KNOWN_OPTIONS[k] then
      local names = {}
      for n in pairs(KNOWN_OPTIONS) do names[#names + 1] = n end
      table.sort(names)
      error(string.format('workload_options: unknown option %s (%s)', tostring(k), table.concat(names, ', ')), 0)
    end
  end
  local wo = util.merge(workloads.DEFAULTS, given)
  -- the flags win over the plan
  for _, k in ipairs({ 'sizes', 'fork_count', 'files', 'file_bytes', 'exec_count', 'egress_url' }) do
    if o[k] ~= nil then wo[k] = o[k] end
  end
  local sizes = {}
  for _, s in ipairs(type(wo.sizes) == 'table' and wo.sizes or { wo.sizes }) do
    local b = workloads.parse_size(s)
    if not b or b < 1 then error(string.format('--sizes: %s is not a size (1MiB, 64KiB, 4096)', tostring(s)), 0) end
    sizes[#sizes + 1] = b
  end
  if #sizes == 0 then error('--sizes: at least one size', 0) end
  table.sort(sizes)
  wo.sizes = sizes
  for _, k in ipairs({ 'exec_count', 'files', 'fork_count' }) do
    local v = math.tointeger(wo[k])
    if not v or v < 1 then error(string.format('workload_options.%s: a whole number >= 1, got %s', k, tostring(wo[k])), 0) end
    wo[k] = v
  end
  if wo.fork_count > 100 then error('--fork-count: at most 100 (the most a fork call makes)', 0) end
  for _, k in ipairs({ 'file_bytes' }) do
    local b = workloads.parse_size(wo[k])
    if not b or b < 1 then error(string.format('workload_options.%s: a size, got %s', k, tostring(wo[k])), 0) end
    wo[k] = b
  end
  local W = workloads.load(o.workload)
  if W.options then W.options(wo) end
  return wo
end

--- Whether adapter P can run workload W: true, or nil and why (the capability it lacks).
---@return boolean|nil ok, string|nil why
function workloads.supports(P, W)
  if not W.capability then return true end
  local caps = type(P.capabilities) == 'table' and P.capabilities or {}
  if caps[W.capability] == true then return true end
  return nil, string.format('%s does not declare capabilities.%s (cseng providers --capabilities)', tostring(P.name),
    W.capability)
end

-- ---- shared data ---------------------------------------------------------------------------

--- Random bytes, made once per run and cut to size: n bytes whose first 16 are `nonce` (so no
--- two samples send the same content, and a provider that deduplicates by hash gains nothing).
---@param pool table {bytes = string} the run's pool (grown on demand, in 64 MiB draws)
---@param n integer
---@param nonce string 16 bytes
---@return string
function workloads.data(pool, n, nonce)
  while #(pool.bytes or '') < n do
    local want = math.min(64 << 20, n - #(pool.bytes or ''))
    pool.bytes = (pool.bytes or '') .. crypto.random_bytes(want)
  end
  nonce = nonce:sub(1, math.min(16, n))
  return nonce .. pool.bytes:sub(#nonce + 1, n)
end

--- A tar holding one file (name, data): what put takes.
function workloads.tar1(name, data) return assert(archive.pack({ { path = name, data = data } }, { format = 'tar' })) end

--- The manifest of files as sha256sum prints it for `find . -type f | sort` in their folder: the
--- text whose sha256 the sandbox computes too (files: {{rel = './a', data}}, sorted by rel).
function workloads.manifest(files)
  local lines = {}
  for _, f in ipairs(files) do lines[#lines + 1] = crypto.sha256_hex(f.data) .. '  ' .. f.rel .. '\n' end
  return table.concat(lines)
end

--- The shell command that prints the count and the manifest's sha256 of the files under dir.
function workloads.manifest_command(dir)
  local q = util.shell_quote(dir)
  return 'cd ' .. q .. ' && echo "count=$(find . -type f | wc -l)" && echo "manifest=$(find . -type f | LC_ALL=C sort | '
    .. 'xargs -d \'\\n\' sha256sum | sha256sum | cut -d\' \' -f1)"'
end

-- ---- the context of one sample ---------------------------------------------------------------

local Ctx = {}
Ctx.__index = Ctx

--- The context W.run gets: ctx.p (the connection: adapter, client), ctx.sb (the sample's sandbox),
--- ctx.rec (its record), ctx.wo (the options), ctx.ws (the run's workload state), ctx.key (this
--- sample's unique key), ctx.nonce (16 random bytes of its own).
function workloads.context(o)
  local c = setmetatable(o, Ctx)
  c.rec.figures, c.rec.checks, c.rec.paths = {}, {}, {}
  c.nonce = crypto.random_bytes(16)
  c.hex = crypto.hex(c.nonce)
  c.leases = c.leases or {}
  return c
end

--- Set the stage (the error_stage of a failure from here on).
function Ctx:stage(name) self.state.stage = name end

--- Record a figure (ms or a derived unit).
function Ctx:figure(name, v) self.rec.figures[name] = v end

--- How a step was done (the adapter function or API path).
function Ctx:path(name, how) self.rec.paths[name] = how end

--- Time fn(...) from the call to the arrival of its last answer; the figure `name` is the time in
--- ms (nil name: not recorded). Returns the time in ms and fn's results. The window counts for the
--- engine's stall accounting (stall_ms).
function Ctx:time(name, fn, ...)
  local t0 = clock.now()
  local r = table.pack(fn(...))
  local t1 = clock.answered(t0)
  local w = self.state.windows
  if w then w[#w + 1] = { t0, t1 } end
  local ms = (t1 - t0) / 1e6
  if name then self.rec.figures[name] = ms end
  return ms, table.unpack(r, 1, r.n)
end

--- An adapter call's result, or raise its failure (code: the default code).
function Ctx.must(_, code, ok, msg, ecode, ...)
  if ok == nil or ok == false then error(errors.returned(msg, ecode, { default_code = code }), 0) end
  return ok, msg, ecode, ...
end

--- Run cmd in sb (the sample's sandbox unless given); a failed call or a non-zero exit raises
--- `code` (default EEXEC) with the output's tail. Returns the result.
function Ctx:sh(cmd, o)
  o = o or {}
  local sb = o.sb or self.sb
  local res, err, ecode = self.p.adapter.exec(self.p.client, sb, cmd, { timeout = o.timeout or self.wo.exec_timeout, cwd = o.cwd or '/' })
  if not res then error(errors.returned(err, ecode, { default_code = errors.EEXEC }), 0) end
  if res.code ~= 0 and not o.any_exit then
    errors.raise(o.code or errors.EEXEC, string.format('%s: exit %s: %s', o.what or util.tail(cmd, 80), tostring(res.code),
      util.tail(util.trim((res.stderr or '') .. ' ' .. (res.stdout or '')), 300)))
  end
  return res
end

--- Write `bytes` random bytes (/dev/urandom) to path in the sample's sandbox, not timed, and
--- return their sha256 (hex). o: what (for the error), sync (sync after: a snapshot must see it).
function Ctx:random_file(path, bytes, o)
  local q = util.shell_quote(path)
  local res = self:sh(string.format('head -c %d /dev/urandom > %s && sha256sum %s%s', bytes, q, q, o.sync and ' && sync' or ''),
    { what = o.what })
  return tostring(res.stdout):match('^(%x+)')
end

--- The sha256 (hex) and size in bytes of a file in a sandbox (o.sb, default the sample's), as
--- the sandbox's sha256sum and stat see it; o.remove: delete it then; o.what: for the error.
function Ctx:file_sum(path, o)
  local q = util.shell_quote(path)
  local res = self:sh('sha256sum ' .. q .. ' && stat -c %s ' .. q .. (o.remove and ('; rm -f ' .. q) or ''),
    { sb = o.sb, what = o.what })
  local hash, size = tostring(res.stdout):match('^(%x+)%s+%S+%s*\n(%d+)')
  return hash, tonumber(size) or size
end

--- key=value lines of a command's output.
function workloads.kv(text)
  local out = {}
  for line in tostring(text or ''):gmatch('[^\n]+') do
    local k, v = line:match('^([%w_%.]+)=(.*)$')
    if k then out[k] = util.trim(v) end
  end
  return out
end

--- Record a clock-free check; a failed one raises EINTACT (the sample fails, its checks say what differed).
function Ctx:check(name, ok, want, got, code)
  self.rec.checks[name] = { ok = ok and true or false, want = want, got = got }
  if not ok then
    errors.raise(code or errors.EINTACT, string.format('%s: expected %s, got %s', name, tostring(want), tostring(got)))
  end
end

--- A sandbox made through the ledger with the sample's spec and `extra` over it (a restore):
--- returns its lease (closed by the arena when the sample ends, if the workload did not).
function Ctx:sandbox(extra, times)
  local spec = util.merge(self.spec, extra)
  spec.labels = util.copy(self.spec.labels)
  local lease = self.F.session:sandbox(spec, { phase = self.item.phase, round = self.item.round,
    adapter = self.p.adapter_name, workload = self.rec.workload },
    { provider = self.p, times = times or {}, destroyed = { phase = self.item.phase, round = self.item.round } })
  self.leases[#self.leases + 1] = lease
  self.rec.sandboxes = self.rec.sandboxes or {}
  self.rec.sandboxes[#self.rec.sandboxes + 1] = lease.sb.id
  self.p.live[lease.sb.id] = true
  self.p.counts.allocated = self.p.counts.allocated + 1
  return lease
end

--- Record a sandbox another call made (a fork's child) in the ledger: its lease.
function Ctx:derived(sb, labels)
  local lease = self.F.session:derived(self.p, sb, labels, { phase = self.item.phase, round = self.item.round,
    adapter = self.p.adapter_name, workload = self.rec.workload })
  self.leases[#self.leases + 1] = lease
  self.rec.sandboxes = self.rec.sandboxes or {}
  self.rec.sandboxes[#self.rec.sandboxes + 1] = sb.id
  self.p.live[sb.id] = true
  self.p.counts.allocated = self.p.counts.allocated + 1
  return lease
end

--- Destroy a lease the workload made (recorded; a failed destroy stops the run as any other).
function Ctx:close(lease)
  local r = lease:close()
  if r.ok then
    self.p.live[lease.sb.id] = nil
    self.p.counts.destroyed = self.p.counts.destroyed + 1
  else
    self.p.counts.cleanup_failed = self.p.counts.cleanup_failed + 1
  end
  return r
end

--- MiB/s of n bytes in ms.
function workloads.mibps(n, ms) return ms > 0 and (n / 1048576) / (ms / 1000) or nil end

return workloads
