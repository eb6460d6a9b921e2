--- The startup kind, the arena (plans/startup.lua): for each provider, create a sandbox, run one
--- command and check its output, destroy the sandbox; repeat; compare (docs/ARENA.md). The frame
--- (lua/cseng/run/frame.lua) runs it; this file supplies its options, its samples, its schedule
--- (the modes) and its end. Its per-provider state is its own (F.k.providers), not the
--- connections'.
---
--- Design, against the seed script it replaces:
---   * Rounds in lockstep: every round runs one trial per provider, providers in parallel, and
---     the next round starts when all are done, so each provider has at most one live sandbox
---     and the trials of a round share the same moment (time-of-day drift hits all alike).
---   * The provider order of every round is a Fisher-Yates shuffle of the sorted provider names
---     with stats.rng(seed) (warmup rounds first, then measured ones); orders are logged
---     (`round` events, and `position` in every trial) and are identical for the same seed.
---   * Warmups are recorded (warmup=true) and excluded from statistics. No measurement is ever
---     retried: a failure is a measured outcome (ok=false, error, error_stage, error_code).
---   * ready_ms = create_ms + first_exec_ms, each taken with the monotonic clock from the adapter
---     call to the arrival of its last answer (clock.answered: on the native HTTP/1.1 path the
---     kernel's receive stamp, so the time an answer waits for this process's loop is not charged
---     to the provider): the engine's own bookkeeping (the fsynced allocation record) falls
---     between them and is recorded apart (record_ms), not charged to the provider.
---   * The allocation record is appended and fsynced the moment a sandbox id exists; cleanup is
---     tried 3 times with back-off (the session's ledger, lua/cseng/run/session.lua: the arena reads its
---     timing points). A cleanup failure, an HTTP 401/403, or a readiness failure in warmup
---     stops the run: no new sandbox is allocated after it.
---   * Ctrl-C (or SIGTERM): the engine cancels every task; each trial's waiting call raises
---     ECANCELED, the trial still destroys its sandbox and writes its records, no new round starts.
local task = require('cseng.task')
local clock = require('cseng.clock')
local http = require('cseng.http')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')
local session = require('cseng.run.session')
local frame = require('cseng.run.frame')
local records = require('cseng.run.records')
local admission = require('cseng.run.admission')
local stats = require('cseng.lib.stats')
local util = require('cseng.lib.util')
local audit = require('cseng.run.audit')
local workloads = require('cseng.run.workloads')

local arena = { name = 'startup' }

arena.VERSION = '1.0'
arena.DEFAULT_EXPECT = 'arena-startup-ready-20261001'
arena.DEFAULT_COMMAND = [[python3 -c "print('arena-startup-ready-20261001')"]]
arena.DEFAULT_SAMPLES = 300
arena.DEFAULT_WARMUPS = 3
arena.METHOD = 'lockstep rounds, one live sandbox per provider, providers in parallel; seeded shuffled ' ..
  'provider order per round (stats.rng xorshift64*); warmups recorded, excluded from statistics; no ' ..
  'measurement retries; ready_ms = create_ms + first_exec_ms (monotonic clock from each adapter call to ' ..
  'the arrival of its last answer)'

--- Printed by the environment probe, one key=value per line (parsed by arena.parse_environment).
arena.ENV_PROBE = table.concat({
  'echo "python=$(python3 --version 2>&1 | head -n 1)"',
  'for f in cpu.max memory.max; do [ -r /sys/fs/cgroup/$f ] && echo "cgroup2.$f=$(cat /sys/fs/cgroup/$f)"; done',
  'for f in cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory/memory.limit_in_bytes; do ' ..
    '[ -r /sys/fs/cgroup/$f ] && echo "cgroup1.${f#*/}=$(cat /sys/fs/cgroup/$f)"; done',
  'echo "nproc=$(nproc 2>/dev/null)"',
  'echo "meminfo.MemTotal=$(awk \'/^MemTotal:/ {print $2}\' /proc/meminfo 2>/dev/null)"',
  'echo "kernel=$(uname -r 2>/dev/null)"',
  '[ -r /etc/os-release ] && . /etc/os-release && echo "os=$PRETTY_NAME"',
  'true',
}, '; ')

local function ms(ns) return ns / 1e6 end

-- v to `digits` decimals (the status endpoint's numbers; nil stays nil)
local function rounded(v, digits)
  if type(v) ~= 'number' then return v end
  local m = 10 ^ (digits or 1)
  return math.floor(v * m + 0.5) / m
end

-- ---- options ----------------------------------------------------------------------

--- Normalize a startup plan merged with its flags. Raises a one-line error on bad options.
---@param o table
---@return table
function arena.options(o)
  o = util.copy(o)
  local list = o.providers
  if o.provider ~= nil then
    if list ~= nil then
      error("startup plans compare providers: use --providers " .. tostring(o.provider) ..
        " (the plan lists " .. table.concat(list, ',') .. ')', 0)
    end
    list = { o.provider }
  end
  list = list or { 'local' }
  if type(list) == 'string' then list = { list } end
  local seen, names = {}, {}
  for _, n in ipairs(list) do
    n = util.trim(n)
    if n ~= '' and not seen[n] then seen[n] = true; names[#names + 1] = n end
  end
  if #names == 0 then error('no providers given (--providers local,docker,...)', 0) end
  table.sort(names) -- the shuffle starts from a canonical order: a,b and b,a give the same rounds
  o.providers = names
  o.samples = math.tointeger(o.samples) or arena.DEFAULT_SAMPLES
  o.warmups = math.tointeger(o.warmups) or arena.DEFAULT_WARMUPS
  if o.samples < 1 then error('--samples must be >= 1', 0) end
  if o.warmups < 0 then error('--warmups must be >= 0', 0) end
  o.seed_given = o.seed ~= nil
  if o.seed == nil then -- still reproducible: the seed drawn here is recorded and printed
    local b = crypto.random_bytes(4)
    o.seed = (b:byte(1) << 24 | b:byte(2) << 16 | b:byte(3) << 8 | b:byte(4)) & 0x7fffffff
  end
  o.seed = math.tointeger(o.seed)
  if not o.seed then error('--seed must be an integer', 0) end
  o.command = o.command or arena.DEFAULT_COMMAND
  o.expect = o.expect or arena.DEFAULT_EXPECT
  if o.expect == '' then error('--expect must not be empty', 0) end
  o.exec_timeout_seconds = o.exec_timeout_seconds or 30
  o.timeout_seconds = o.timeout_seconds or 300
  o.cleanup_backoff = o.cleanup_backoff or session.BACKOFF
  o.pause_seconds = o.pause_seconds or 0
  o.provider_config = o.provider_config or {}
  o.name = o.name or 'startup'
  arena.mode_options(o)
  arena.workload_options(o)
  return o
end

--- The workload, the resources asked of every provider and the audit switch of a startup plan
--- (in place; raises one line on a bad one): o.workload (default startup), o.wo (its options),
--- o.resources ({cpus, memory_mb} from the plan's `resources` and --cpus/--memory-mb, or nil),
--- o.audit (false only with audit = false or --no-audit).
---@param o table
function arena.workload_options(o)
  o.workload = o.workload or 'startup'
  workloads.load(o.workload) -- an unknown name raises, listing the names
  o.wo = workloads.options(o)
  local r = util.copy(o.resources or {})
  if o.resources ~= nil and type(o.resources) ~= 'table' then error('resources: expected a table {cpus, memory_mb}', 0) end
  for k in pairs(r) do
    if k ~= 'cpus' and k ~= 'memory_mb' then error('resources: unknown key ' .. tostring(k) .. ' (cpus, memory_mb)', 0) end
  end
  if o.cpus ~= nil then r.cpus = o.cpus end
  if o.memory_mb ~= nil then r.memory_mb = o.memory_mb end
  if r.cpus ~= nil and not (type(r.cpus) == 'number' and r.cpus > 0 and r.cpus <= 1024) then
    error('resources.cpus (--cpus): a number of vCPUs in (0, 1024], got ' .. tostring(r.cpus), 0)
  end
  if r.memory_mb ~= nil and not (math.tointeger(r.memory_mb) and r.memory_mb >= 1) then
    error('resources.memory_mb (--memory-mb): a whole number of MiB >= 1, got ' .. tostring(r.memory_mb), 0)
  end
  o.resources = next(r) and r or nil
  o.cpus, o.memory_mb = nil, nil
  o.audit = o.audit ~= false and not o.no_audit
  o.no_audit = nil
end

arena.MODES = { lockstep = true, sequential = true, staggered = true, burst = true }
arena.DEFAULT_STAGGER_MS = 200

--- The mode, repeat, burst and stagger options of a startup plan (in place; raises on bad ones).
---@param o table
function arena.mode_options(o)
  if o.retry_errors ~= nil and o.retry_errors ~= 0 then
    error('--retry-errors: the arena never retries a measurement (a failure is a measured outcome)', 0)
  end
  o.mode = o.mode or 'lockstep'
  if not arena.MODES[o.mode] then
    error(string.format("--mode %s: a startup plan's modes are lockstep (default), sequential, staggered, burst",
      tostring(o.mode)), 0)
  end
  o.repeats = math.tointeger(o.repeats or 1)
  if not o.repeats or o.repeats < 1 then error('--repeat must be an integer >= 1', 0) end
  if o.burst ~= nil then
    o.burst = math.tointeger(o.burst)
    if not o.burst or o.burst < 1 then error('--burst must be an integer >= 1', 0) end
    if o.mode ~= 'burst' then error('--burst N goes with --mode burst (got --mode ' .. o.mode .. ')', 0) end
  end
  if o.stagger_ms ~= nil then
    o.stagger_ms = tonumber(o.stagger_ms)
    if not o.stagger_ms or o.stagger_ms < 0 then error('--stagger-ms must be a number >= 0', 0) end
    if o.mode ~= 'staggered' then error('--stagger-ms M goes with --mode staggered (got --mode ' .. o.mode .. ')', 0) end
  end
  if o.cold_connections and o.mode ~= 'burst' then
    error('--cold-connections goes with --mode burst (got --mode ' .. o.mode .. ')', 0)
  end
  o.cold_connections = o.cold_connections or nil
  if o.h2_streams ~= nil then
    o.h2_streams = math.tointeger(o.h2_streams)
    if not o.h2_streams or o.h2_streams < 1 then error('--h2-streams must be an integer >= 1', 0) end
  end
  if o.mode == 'burst' then o.burst = o.burst or o.samples end
  admission.mode(o, 'startup') -- a burst pins admission off (raises on anything else)
  if o.mode == 'staggered' then o.stagger_ms = o.stagger_ms or arena.DEFAULT_STAGGER_MS end
end

arena.MODE_METHOD = {
  lockstep = 'lockstep rounds, one live sandbox per provider, providers in parallel',
  sequential = 'sequential: one trial at a time over all providers (each round the providers one after another, ' ..
    'in a seeded order)',
  staggered = 'staggered: per provider, one create every --stagger-ms ms, all in flight as they come; providers ' ..
    'one after another in a seeded order per block',
  burst = 'burst: per provider, --burst N creates in flight at once until --samples are done; providers one ' ..
    'after another in a seeded order per block',
}

-- ---- environment --------------------------------------------------------------------

--- Parse the probe's key=value lines into {python, cpus, memory_bytes, nproc, ...}; cpus and
--- memory_bytes are nil when the cgroup sets no limit ("max", -1, or 2^63-ish).
---@param text string
---@return table
function arena.parse_environment(text)
  local kv = workloads.kv(text)
  local env = { raw = kv }
  env.python = kv.python and kv.python:match('Python%s+(%S+)') or nil
  env.python_output = kv.python
  local q, per = (kv['cgroup2.cpu.max'] or ''):match('^(%S+)%s+(%d+)$')
  if q and q ~= 'max' and tonumber(q) then
    env.cpus = tonumber(q) / tonumber(per)
  elseif kv['cgroup1.cpu.cfs_quota_us'] and tonumber(kv['cgroup1.cpu.cfs_quota_us'])
      and tonumber(kv['cgroup1.cpu.cfs_quota_us']) > 0 and tonumber(kv['cgroup1.cpu.cfs_period_us']) then
    env.cpus = tonumber(kv['cgroup1.cpu.cfs_quota_us']) / tonumber(kv['cgroup1.cpu.cfs_period_us'])
  end
  env.cpu_limit = kv['cgroup2.cpu.max'] or (kv['cgroup1.cpu.cfs_quota_us'] and
    (kv['cgroup1.cpu.cfs_quota_us'] .. ' ' .. (kv['cgroup1.cpu.cfs_period_us'] or '?')))
  local mem = tonumber(kv['cgroup2.memory.max'] or kv['cgroup1.memory.limit_in_bytes'] or '')
  if mem and mem > 0 and mem < 2 ^ 60 then env.memory_bytes = math.tointeger(mem) or mem end
  env.memory_limit = kv['cgroup2.memory.max'] or kv['cgroup1.memory.limit_in_bytes']
  env.nproc = math.tointeger(tonumber(kv.nproc or ''))
  local mt = tonumber(kv['meminfo.MemTotal'] or '')
  env.mem_total_bytes = mt and math.tointeger(mt * 1024) or nil
  env.kernel = kv.kernel ~= '' and kv.kernel or nil
  env.os = kv.os
  return env
end

-- What the sandbox was given, as the adapter reports it (sb.allocation) or as asked for.
local function allocation_of(sb, spec)
  if type(sb.allocation) == 'table' then return sb.allocation end
  return { cpus = sb.cpus or spec.cpus, memory_mb = sb.memory_mb or spec.memory_mb, image = sb.image }
end

-- curl's marks are cumulative seconds from the request's start; keep them so (ms), and say
-- whether the connection was reused (no dns/connect/tls time at all).
local function http_phases(t)
  if type(t) ~= 'table' then return nil end
  local function m(v) return v and v * 1000 or nil end
  return {
    dns_ms = m(t.dns), connect_ms = m(t.connect), tls_ms = m(t.tls), ttfb_ms = m(t.ttfb), total_ms = m(t.total),
    reused = (t.connect or 0) == 0 or nil,
  }
end

-- ---- one trial ----------------------------------------------------------------------

local function has_marker(stdout, expect)
  for line in (tostring(stdout or '') .. '\n'):gmatch('(.-)\r?\n') do
    if util.trim(line) == expect then return true end
  end
  return false
end

local function probe_environment(F, p, sb, spec, rec)
  local ok, res, err = pcall(p.adapter.exec, p.client, sb, arena.ENV_PROBE, { timeout = 30 })
  local ev = {
    provider = p.name, adapter = p.adapter_name, sandbox_id = sb.id, phase = rec.phase, round = rec.round,
    allocation = allocation_of(sb, spec),
  }
  if ok and res then
    ev.exit_code = res.code
    ev.output = util.tail(res.stdout or '', 4000)
    ev.environment = arena.parse_environment(res.stdout)
    ev.environment.raw = nil
  else
    ev.error = ok and tostring(err) or (errors.describe(res))
  end
  F.k.providers[p.name].environment = ev
  F.writer:event('environment', ev)
  return ev
end

-- The sandbox spec for a provider: the plan's `sandbox` table, labels, a lifetime cap.
local function sandbox_spec(F, p)
  local spec = util.merge(F.opts.sandbox, (F.opts.provider_config[p.name] or {}).sandbox)
  -- the same resources for every provider: the plan's `resources` win over a sandbox table's
  local r = F.opts.resources
  if r then spec.cpus, spec.memory_mb = r.cpus or spec.cpus, r.memory_mb or spec.memory_mb end
  spec.labels = util.merge(spec.labels, {
    ['cseng.run'] = F.id, ['cseng.launcher'] = F.launcher, ['cseng.purpose'] = 'startup',
  })
  spec.ttl_seconds = spec.ttl_seconds or 600
  return spec
end

-- ---- one sample (Frame:trial: K.record, K.trial under the watchdog, K.settle, K.finished) ----
-- item: {p (the connection), phase, round, position, order, block, due (clock.now() when the
-- create was due: the engine's lateness is measured from it)}.

--- No sample starts once the run stopped (a stop rule, a failed cleanup, auth).
function arena.skip(F) return F.stopped ~= nil end

function arena.record(F, item)
  local p = item.p
  return records.sample {
    provider = p.name, adapter = p.adapter_name, phase = item.phase, warmup = item.phase == 'warmup', round = item.round,
    position = item.position, order = item.order, ok = false, started_at = clock.wall(),
    block = item.block, mode = F.opts.mode, workload = F.opts.workload, resources = F.opts.resources,
  }
end

arena.stage = 'create'

--- create, record, first command with its marker: the measured calls.
function arena.trial(F, item, rec, state)
  local p, opts = item.p, F.opts
  local spec = sandbox_spec(F, p)
  state.spec, state.t_start = spec, clock.now()
  p.counts.started = p.counts.started + 1
  local times = {}
  local hs_n, hs_s = http.handshakes()
  local ok_c, lease = pcall(F.session.sandbox, F.session, spec,
    { phase = item.phase, round = item.round, adapter = p.adapter_name },
    { provider = p, times = times, destroyed = { phase = item.phase, round = item.round } })
  local hs_n1, hs_s1 = http.handshakes() -- the create's calls that waited for a new connection
  if hs_n1 > hs_n then rec.handshakes, rec.handshake_ms = hs_n1 - hs_n, (hs_s1 - hs_s) * 1000 end
  if times.create_end then
    state.windows = { { times.create_start, times.create_end } }
    rec.create_ms = ms(times.create_end - times.create_start)
  end
  if times.create_start then -- the request left at start_t_ms (ms since the run began)
    local first = times.queued or times.create_start
    rec.start_t_ms = ms(first - F.t0)
    if item.due then rec.lateness_ms = math.max(0, ms(first - item.due)) end
  end
  if not ok_c then error(lease, 0) end
  local sb = lease.sb
  state.sb, state.lease = sb, lease
  rec.sandbox_id = sb.id
  rec.http = http_phases(sb.http_timings)
  p.live[sb.id] = true
  p.counts.allocated = p.counts.allocated + 1
  rec.record_ms = ms(times.recorded - times.create_end)

  state.stage = 'first_exec'
  local t1 = clock.now()
  local res, eerr, ecode = p.adapter.exec(p.client, sb, opts.command, { timeout = opts.exec_timeout_seconds })
  local t2 = clock.answered(t1)
  state.windows[2] = { t1, t2 }
  rec.first_exec_ms = ms(t2 - t1)
  rec.ready_ms = rec.create_ms + rec.first_exec_ms
  rec.ready_t_ms = ms(t2 - F.t0)
  if not res then error(errors.returned(eerr, ecode, { default_code = errors.EEXEC }), 0) end
  rec.exit_code = res.code
  rec.exec_http = http_phases(res.http_timings)
  if res.code ~= 0 or not has_marker(res.stdout, opts.expect) then
    rec.stdout_tail = util.tail(res.stdout or '', 500)
    rec.stderr_tail = util.tail(res.stderr or '', 500)
    errors.raise(res.timed_out and errors.ETIMEDOUT or errors.EREADY, string.format(
      'readiness check failed: exit=%s, stdout=%q, stderr=%q (expected a line %q)',
      tostring(res.code), util.tail(res.stdout or '', 200), util.tail(res.stderr or '', 200), opts.expect))
  end
  local W = F.k.W
  if W.run then -- the primitive, in the sandbox that just answered (lua/cseng/run/workloads/)
    state.stage = W.name
    state.ctx = workloads.context { F = F, p = p, sb = sb, rec = rec, wo = opts.wo, ws = F.k.ws, spec = spec,
      item = item, state = state }
    W.run(state.ctx)
  end
  rec.ok = true
end

-- The audit's marker: which sample of which run left it.
local function audit_key(F, item)
  return string.format('%s/%s/%s/%d/%d', F.id, item.p.name, item.phase, item.round or 0, item.position or 0)
end

--- The fidelity audit of one sample (lua/cseng/run/audit.lua), on every path: in its sandbox
--- after the measured calls when it has one (the command's own time is audit_ms), else judged
--- from what is known (a sample that failed before a sandbox existed is `failed`). A failed
--- sample keeps no figure: its partial times (create_ms, first_exec_ms) say how far it got.
local function audit_sample(F, item, rec, state)
  local p, A = item.p, F.k
  local ps = A.providers[p.name]
  ps.seen = ps.seen or audit.seen()
  local key = audit_key(F, item)
  local failed = (not rec.ok and not rec.interrupted) and (rec.error or 'the sample failed') or nil
  local o = { key = key, sandbox_id = state.sb and state.sb.id or nil, failed = failed, asked = F.opts.resources,
    seen = ps.seen, code_path = state.sb and state.sb.code_path or nil, adapter = p.adapter_name,
    version = p.adapter.version }
  if state.sb and F.opts.audit and not rec.interrupted then
    local ok, a, a_ms = pcall(audit.run, p.adapter, p.client, state.sb, o)
    if ok then rec.audit, rec.audit_ms = a, a_ms
    else o.error = errors.line(a); rec.audit = audit.judge(o) end
    rec.audit_key = key
  elseif F.opts.audit or failed then
    rec.audit = audit.judge(o)
  end
  if not rec.ok then
    rec.ready_ms, rec.figures = nil, nil -- a failure is never a time
  end
  rec.clean = rec.ok and (rec.audit == nil or rec.audit.ok) or false
end

--- On every path: the engine's own stalls inside the measured calls, the environment probe
--- (once per provider), the destroy.
function arena.settle(F, item, rec, state)
  local p, opts, A = item.p, F.opts, F.k
  local ps = A.providers[p.name]
  -- what a workload made and did not destroy (a restore, forks): destroyed and recorded now
  if state.ctx then
    for _, l in ipairs(state.ctx.leases) do if not l.result then state.ctx:close(l) end end
  end
  audit_sample(F, item, rec, state)
  if state.windows then
    local stall = 0
    for _, w in ipairs(state.windows) do stall = stall + arena.stall_within(F, w[1], w[2]) end
    rec.stall_ms = ms(stall)
  end
  -- the environment, once per provider: on its first warmup (or its first trial without
  -- warmups), also after a failed readiness check, where it tells what the template lacks
  if state.sb and not ps.environment and not ps.probing and not rec.interrupted and (rec.ok or rec.exit_code ~= nil)
      and (item.phase == 'warmup' or opts.warmups == 0) then
    ps.probing = true -- concurrent trials (burst, staggered) probe once
    probe_environment(F, p, state.sb, state.spec, rec)
  end
  if state.lease then
    local r = state.lease:close()
    rec.cleanup_ms = ms(state.lease:span('destroy_start', 'destroy_end'))
    rec.cleanup_attempts = r.attempts
    rec.cleanup_ok = r.ok
    if r.ok then
      p.live[state.sb.id] = nil
      p.counts.destroyed = p.counts.destroyed + 1
    else
      rec.cleanup_error, rec.cleanup_error_code = r.error, r.code
      p.counts.cleanup_failed = p.counts.cleanup_failed + 1
      F:stop('cleanup', string.format(
        'cleanup of %s sandbox %s failed after %d attempts (%s); stopping new allocations. ' ..
        'Destroy it with: cseng cleanup %s', p.name, state.sb.id, r.attempts, tostring(r.error), F.jsonl), r.code)
    end
  end
  rec.elapsed_ms = ms(clock.now() - (state.t_start or clock.now()))
  rec.finished_at = clock.wall()
end

--- Recorded, counted, and watched by the stop rules that concern every provider.
function arena.finished(F, item, rec)
  local p, phase, A = item.p, item.phase, F.k
  local ps = A.providers[p.name]
  F.writer:event('startup_trial', rec)
  -- counters for the status endpoint and the console
  local c = ps.counts
  if rec.interrupted then p.counts.interrupted = p.counts.interrupted + 1
  elseif phase == 'warmup' then c.warmup = c.warmup + 1; if rec.ok then c.warmup_ok = c.warmup_ok + 1 end
  else
    c.measured = c.measured + 1
    if rec.ok then c.ok = c.ok + 1 end
    -- the statistics pool clean samples only: one the audit labelled is counted apart
    local v = arena.headline_value(F, rec)
    if rec.clean and v then
      c.clean = c.clean + 1
      for name, fv in pairs(rec.figures or {}) do
        if type(fv) == 'number' then ps.figures[name] = ps.figures[name] or {}; table.insert(ps.figures[name], fv) end
      end
      ps.ready[#ps.ready + 1] = v
      if rec.block then
        local b = ps.ready_blocks[rec.block] or {}
        ps.ready_blocks[rec.block] = b
        b[#b + 1] = v
      end
    elseif rec.audit and not rec.audit.ok then
      for _, l in ipairs(rec.audit.labels) do c.labels[l] = (c.labels[l] or 0) + 1 end
    end
  end
  if rec.ok then ps.last_ready_ms = arena.headline_value(F, rec)
  elseif not rec.interrupted then
    -- the create failed this many times in a row with one code: a dead endpoint stops the run
    F:observe(p, rec, { create = true })
    p.counts.errors = p.counts.errors + 1
    p.last_error = string.format('%s (%s, %s round %d)', rec.error, rec.error_stage, phase, item.round)
    F.state.last_error = p.name .. ': ' .. p.last_error
  end
  if errors.is_auth(rec.error_code) then
    F:stop('auth', string.format('%s answered %s to %s: authentication/authorization failed; ' ..
      'check its credentials (cseng providers). Stopping new allocations.', p.name, rec.error_code:gsub('^HTTP_', ''),
      rec.error_stage), rec.error_code)
  elseif phase == 'warmup' and rec.error_stage == 'first_exec' and not rec.interrupted
    and not errors.is_transient(rec.error_code) and not rec.timed_out then
    -- a readiness verdict (the command ran and did not print the marker, or the call was
    -- refused for good); a transient error (5xx, reset, timeout) is a failed warmup, no more
    local env = ps.environment and ps.environment.environment
    F:stop('readiness', string.format('warmup readiness failed on %s: %s. Inspect the template\'s ' ..
      'command support (does it have python3? does --command print --expect?) before measuring.%s', p.name,
      rec.error, env and env.python_output and (' The sandbox says python=' .. env.python_output) or ''),
      rec.error_code)
  end
  return rec
end

--- The figure a sample is compared by: ready_ms for the startup workload, else the workload's
--- headline figure (W.headline); nil when the sample has none (it failed).
function arena.headline_value(F, rec)
  local h = F.k.headline
  if h == 'ready_ms' then return rec.ready_ms end
  return rec.figures and rec.figures[h]
end

-- One sample of provider p (a task of the schedule).
local function sample(F, p, phase, round, position, order, ctx)
  return F:trial({ p = p, phase = phase, round = round, position = position, order = order,
    block = ctx and ctx.block, due = ctx and ctx.due })
end

-- Every record write blocks the loop (fs.append is synchronous, and allocation, destroy and
-- cleanup records are fsynced): the writer is wrapped to keep the time windows of its writes, so
-- each trial records how much of its measured calls overlapped them (stall_ms, an upper bound of
-- what the engine's own bookkeeping added to another provider's timings).
local function tracking_writer(holder, writer)
  holder.stalls = {}
  return setmetatable({}, { __index = function(_, k)
    local f = writer[k]
    if type(f) ~= 'function' then return f end
    return function(_, ...)
      local s = clock.now()
      local r = f(writer, ...)
      local st = holder.stalls
      st[#st + 1] = { s, clock.now() }
      if #st > 256 then table.remove(st, 1) end
      return r
    end
  end })
end

--- Nanoseconds of record writes inside [a, b] (writes never overlap each other: they block).
function arena.stall_within(F, a, b)
  local total, st = 0, F.k.stalls or {}
  for i = #st, 1, -1 do
    local s, e = st[i][1], st[i][2]
    if e <= a then break end
    local lo, hi = math.max(s, a), math.min(e, b)
    if hi > lo then total = total + (hi - lo) end
  end
  return total
end

-- ---- what the status document and the console read ----------------------------------------

--- A provider's arena state: {ready (the measured ready_ms of its successes), ready_blocks
--- (per --repeat block), counts (warmup, warmup_ok, measured, ok), last_ready_ms, environment}.
function arena.provider(F, name) return F.k.providers[name] end

--- What the status document adds (cseng.cli.present.status_doc).
function arena.status(F)
  local st, o = F.state, F.opts
  return { round = st.round, rounds = st.rounds, order = st.order, seed = o.seed, samples = o.samples,
    warmups = o.warmups, mode = o.mode, block = st.block, blocks = o.repeats }
end

--- What a provider's entry of the status document adds.
function arena.status_provider(F, name)
  local ps = F.k.providers[name]
  if not ps then return {} end
  local out = util.copy(ps.counts)
  out.last_ready_ms = ps.last_ready_ms and rounded(ps.last_ready_ms, 1)
  out.p50_ready_ms = ps.ready[1] and rounded(stats.median(ps.ready), 1)
  return out
end

--- The run's summary (results/<run-id>.json, like a task run's): per provider and mode, the
--- measured n, ok, ready (TTI) percentiles with bootstrap CIs, block CIs, and the
--- computesdk-compatible figures and score. `cseng compare` and the viewer read it.
---@return table
function arena.summary(F)
  local o = F.opts
  local doc = { kind = 'cseng-startup-summary', run_id = F.id, mode = o.mode, samples = o.samples,
    warmups = o.warmups, repeats = o.repeats, seed = o.seed, label = o.label, status = F.state.status,
    identity = F.identity, providers = {} }
  for _, name in ipairs(o.providers) do
    local p, ps = F.P[name], F.k.providers[name]
    local c = ps.counts
    local sm = stats.summary(ps.ready)
    local lo, hi = stats.bootstrap_ci(ps.ready, { seed = o.seed ~ stats.hash('ready_ms/' .. name) })
    local cs = stats.computesdk(ps.ready, c.measured)
    local h = F.k.headline
    local entry = {
      provider = name, mode = o.mode, n = c.measured, ok = c.ok, errors = p.counts.errors,
      clean = c.clean, audit_labels = next(c.labels) and c.labels or nil, workload = o.workload, headline = h,
      success_rate = c.measured > 0 and c.ok / c.measured or nil,
      [h] = { p50 = sm.p50, p90 = sm.p90, p99 = sm.p99, mean = sm.mean, min = sm.min, max = sm.max,
        p50_ci = lo and { lo, hi } or nil },
      -- computesdk's figures are start-up times of the samples that passed the audit
      computesdk = h == 'ready_ms' and { median_ms = cs.median, p95_ms = cs.p95, p99_ms = cs.p99,
        success_rate = cs.success_rate, score = cs.score } or nil,
      endpoint = p.endpoint,
    }
    if h ~= 'ready_ms' then
      entry.figures = {}
      for fname, vals in pairs(ps.figures) do
        local fs_ = stats.summary(vals)
        local flo, fhi = stats.bootstrap_ci(vals, { seed = o.seed ~ stats.hash(fname .. '/' .. name) })
        entry.figures[fname] = { n = #vals, p50 = fs_.p50, min = fs_.min, max = fs_.max, p50_ci = flo and { flo, fhi } or nil }
      end
    end
    if o.repeats > 1 then
      local list = {}
      for bk = 1, o.repeats do list[#list + 1] = ps.ready_blocks[bk] or {} end
      local r = stats.blocks(list, { seed = o.seed ~ stats.hash('blocks/ready_ms/' .. name) })
      if r and r.lo then entry[h].block_ci = { r.lo, r.hi }; entry.blocks_disagree = r.disagree or nil end
    end
    doc.providers[#doc.providers + 1] = entry
  end
  return doc
end

local function adapter_info(name, adapter)
  local file = sys.root() .. '/lua/providers/' .. name:gsub('%-', '_') .. '.lua'
  local src = fs.read(file)
  return {
    adapter = name, version = adapter.version, description = adapter.description, remote = adapter.remote or false,
    sha256 = src and crypto.sha256_hex(src):sub(1, 16) or nil,
  }
end

-- ---- host context, per block ---------------------------------------------------------

--- The host's state now: load averages (/proc/loadavg), the aggregate CPU jiffies of /proc/stat
--- (total and steal), and this process's own CPU time (getrusage). Missing files give nils.
---@return table
function arena.host_context()
  local c = { wall = clock.wall(), t = clock.now() }
  local la = fs.read('/proc/loadavg')
  if la then
    local a, b, d = la:match('^(%S+)%s+(%S+)%s+(%S+)')
    c.loadavg = { tonumber(a), tonumber(b), tonumber(d) }
  end
  local st = fs.read('/proc/stat')
  local line = st and st:match('^cpu%s+([^\n]+)')
  if line then
    local f = {}
    for v in line:gmatch('%d+') do f[#f + 1] = tonumber(v) end
    local total = 0
    for i = 1, math.min(#f, 8) do total = total + f[i] end -- guest time is already in user
    c.cpu_jiffies, c.steal_jiffies = total, f[8] or 0
  end
  local u = sys.usage()
  c.client_cpu_s = (u.user_s or 0) + (u.sys_s or 0)
  return c
end

--- What happened on the host between two host_context() readings: steal as a percentage of all
--- CPU time, the client's CPU seconds and their share of the wall time, the load at the end.
---@return table
function arena.host_delta(a, b)
  local d = { wall_s = ms(b.t - a.t) / 1000, loadavg = b.loadavg, loadavg_start = a.loadavg }
  if a.cpu_jiffies and b.cpu_jiffies and b.cpu_jiffies > a.cpu_jiffies then
    d.steal_pct = 100 * (b.steal_jiffies - a.steal_jiffies) / (b.cpu_jiffies - a.cpu_jiffies)
  end
  d.client_cpu_s = b.client_cpu_s - a.client_cpu_s
  if d.wall_s > 0 then d.client_cpu_pct = 100 * d.client_cpu_s / d.wall_s end
  return d
end

-- ---- the schedule: the modes ------------------------------------------------------------

-- Lockstep rounds (warmups, and the lockstep mode): one trial per provider per round, in parallel.
local function lockstep_rounds(F, phase, count, rng, block, first_round)
  local o, A = F.opts, F.k
  for r = 1, count do
    if F:halted() then return end
    local round = (first_round or 0) + r
    local order = stats.shuffle(util.copy(o.providers), rng)
    F.state.round, F.state.order = round, order
    F.writer:event('round', { phase = phase, round = round, order = order, block = block })
    local tasks = {}
    local due = clock.now()
    for pos, name in ipairs(order) do
      tasks[pos] = task.spawn(sample, F, F.P[name], phase, round, pos, order, { block = block, due = due })
    end
    F:join_all(tasks)
    if phase == 'warmup' then A.rounds_done.warmup = round else A.rounds_done.measured = round end
    F:emit('round')
    if A.any_remote and o.pause_seconds > 0 and not F.stopped then
      if not pcall(task.sleep, o.pause_seconds) then F:interrupt_seen() end
    end
  end
end

-- Sequential: one trial at a time; each round the providers one after another (seeded order).
local function sequential_rounds(F, count, rng, block, first_round)
  local o, A = F.opts, F.k
  for r = 1, count do
    local round = first_round + r
    local order = stats.shuffle(util.copy(o.providers), rng)
    F.state.round, F.state.order = round, order
    F.writer:event('round', { phase = 'measured', round = round, order = order, block = block })
    for pos, name in ipairs(order) do
      if F:halted() then return end
      local t = task.spawn(sample, F, F.P[name], 'measured', round, pos, order, { block = block, due = clock.now() })
      F:join_all({ t })
    end
    A.rounds_done.measured = round
    F:emit('round')
  end
end

-- Before a burst: the connections its creates will use, open and ready (TCP, TLS, HTTP/2
-- settings), so a create's time never holds a handshake; with --cold-connections the idle ones are
-- closed instead, and each create opens its own (its trial records the handshake apart).
local function connections(F, p)
  local o, e = F.opts, p.endpoint
  if o.mode ~= 'burst' or not e or (e.scheme ~= 'http' and e.scheme ~= 'https') then return end
  local url = string.format('%s://%s:%d', e.scheme, tostring(e.host):find(':', 1, true) and ('[' .. e.host .. ']') or e.host,
    e.port)
  local ev = { provider = p.name, cold = o.cold_connections or false }
  if o.cold_connections then
    ev.closed = http.close_idle(url)
  else
    local info, err, code = http.warm { url = url, calls = o.burst }
    if info then
      ev.opened, ev.ready, ev.http_version, ev.seconds = info.opened, info.ready, info.http_version, info.seconds
      ev.connections, ev.streams = info.connections, info.streams -- HTTP/2: how many, each carrying how many calls
    else
      ev.error, ev.code = err, code -- the burst goes on: its creates open what they need
      F:say('%s: warming %d connections failed (%s): the burst opens its own', p.name, o.burst, tostring(err))
    end
  end
  F.writer:event('connections', ev)
end

-- Burst or staggered, one provider: `samples` trials, at most --burst in flight (burst), or one
-- launched every --stagger-ms (staggered). `due` is when each create should have left: the
-- engine's lateness is measured against it.
local function batch(F, p, block, first_round)
  local o, A = F.opts, F.k
  connections(F, p)
  local t0 = clock.now()
  local tasks = {}
  local sem = o.mode == 'burst' and task.semaphore(o.burst) or nil
  local step = o.mode == 'staggered' and math.floor(o.stagger_ms * 1e6) or 0
  F.writer:event('batch', { block = block, provider = p.name, mode = o.mode, burst = o.burst,
    stagger_ms = o.stagger_ms, samples = o.samples })
  for i = 1, o.samples do
    if F:halted() then break end
    local due = t0 + (i - 1) * step
    if step > 0 then
      local wait = due - clock.now()
      if wait > 0 and not pcall(task.sleep, wait / 1e9) then F:interrupt_seen(); break end
    end
    tasks[#tasks + 1] = task.spawn(function()
      if sem then
        sem:acquire()
        -- a queued create is due when its place opens, not at the burst's start
        if i > o.burst then due = clock.now() end
      end
      local ok, err = pcall(sample, F, p, 'measured', first_round + i, i, nil, { block = block, due = due })
      if sem then sem:release() end
      if not ok then error(err, 0) end
    end)
  end
  F:join_all(tasks)
  A.rounds_done.measured = A.rounds_done.measured + #tasks
  F:emit('round')
end

--- The arena's schedule: warmup rounds, then per block the mode's rounds.
function arena.schedule(F)
  local o, A = F.opts, F.k
  local rng = stats.rng(o.seed)
  A.any_remote = false
  for _, name in ipairs(o.providers) do A.any_remote = A.any_remote or F.P[name].adapter.remote == true end
  F.state.phase, F.state.rounds = 'warmup', o.warmups
  if not F.stopped then F.state.status = 'running' end
  lockstep_rounds(F, 'warmup', o.warmups, rng)
  -- burst and staggered run the providers one after another: each provider's trials count apart
  local per = (o.mode == 'burst' or o.mode == 'staggered') and #o.providers or 1
  F.state.phase, F.state.rounds = 'measured', o.samples * o.repeats * per
  F.state.blocks = o.repeats
  -- the blocks' provider orders have their own generator: the rounds' orders stay those of
  -- stats.rng(seed) alone (the same seed gives the same rounds with or without --repeat)
  local block_rng = stats.rng(o.seed ~ stats.hash('blocks'))
  for block = 1, o.repeats do
    if F:halted() then return end
    local order = stats.shuffle(util.copy(o.providers), block_rng)
    F.state.block = block
    local before = arena.host_context()
    F.writer:event('block', { block = block, blocks = o.repeats, mode = o.mode, order = order,
      host = { loadavg = before.loadavg, client_cpu_s = before.client_cpu_s } })
    local first = (block - 1) * o.samples
    if o.mode == 'lockstep' then lockstep_rounds(F, 'measured', o.samples, rng, block, first)
    elseif o.mode == 'sequential' then sequential_rounds(F, o.samples, rng, block, first)
    else
      for _, name in ipairs(order) do
        if F:halted() then break end
        batch(F, F.P[name], block, first)
      end
    end
    local d = arena.host_delta(before, arena.host_context())
    F.writer:event('block_finished', { block = block, host = d })
    if block < o.repeats and A.any_remote and o.pause_seconds > 0 and not F.stopped then
      if not pcall(task.sleep, o.pause_seconds) then F:interrupt_seen() end
    end
  end
end

-- ---- the run ---------------------------------------------------------------------------

--- How the run opens (options from plan + flags, see arena.options): a shard of a job takes its
--- providers; a shard with none records that it had nothing to do and ends here.
function arena.open(opts)
  local o = arena.options(opts)
  local sh = require('cseng.run.shard').for_startup(o, o.providers, session.getenv(o.env))
  if sh then
    o.providers = sh.providers
    if #o.providers == 0 then -- more shards than providers: this one records that it had nothing to do
      local w = results.open(sh.jsonl, sh.run_id)
      w:event('run_started', { kind = 'startup', plan = o.name, plan_file = o.plan_file, argv = o.argv,
        providers = {}, shard = sh.record, task_count = 0 }, true)
      w:event('run_finished', { status = 'finished', passed = 0, failed = 0, errors = 0, recorded = 0 }, true)
      return nil, 0, { run_id = sh.run_id, jsonl = sh.jsonl, status = 'finished' }
    end
  end
  -- an unknown provider is refused before the run log exists (a usage error leaves no file)
  -- so is a workload an adapter does not declare (its capability)
  local W = workloads.load(o.workload)
  for _, name in ipairs(o.providers) do
    local P = session.adapter((o.provider_config[name] or {}).adapter or name)
    local sup, why = workloads.supports(P, W)
    -- and one it cannot run there as asked (a sandbox without the network, an image without its tools)
    if sup and W.refuse then
      why = W.refuse(o, P, util.merge(o.sandbox, (o.provider_config[name] or {}).sandbox), name)
      sup = why == nil
    end
    if not sup then errors.raise(errors.EUSAGE, '--workload ' .. o.workload .. ': ' .. why) end
  end
  local A = { sh = sh, providers = {}, rounds_done = { warmup = 0, measured = 0 }, W = workloads.load(o.workload) }
  return o, { id_parts = { o.name },
    run_id = sh and sh.run_id, jsonl = sh and sh.jsonl, -- a shard's log is named by its job
    wrap_writer = function(w) return tracking_writer(A, w) end }, A
end

--- The run begins: adapters and credentials first (a missing variable stops us before anything
--- is allocated), run_started with the identity, the plan said.
function arena.begin(F)
  local o, A = F.opts, F.k
  local sh = A.sh
  F.state.round, F.state.rounds, F.state.started_at = 0, 0, clock.wall()
  local adapters, endpoints = {}, {}
  -- answers that share an HTTP/2 connection may share a read, and the kernel stamps a read with
  -- its newest bytes' arrival: fewer calls a connection, fewer answers stamped late
  if o.h2_streams then
    A.h2_streams_before = http.stats().max_concurrent_streams -- set back when the run ends
    http.configure { max_concurrent_streams = o.h2_streams }
  end
  for _, name in ipairs(o.providers) do
    local cfg = util.copy(o.provider_config[name])
    local adapter_name = cfg.adapter or name
    cfg.adapter, cfg.sandbox = nil, nil
    local p = F:connect(adapter_name, cfg, name)
    A.providers[name] = { ready = {}, ready_blocks = {},
      counts = { warmup = 0, warmup_ok = 0, measured = 0, ok = 0, clean = 0, labels = {} }, figures = {} }
    adapters[name] = adapter_info(adapter_name, p.adapter)
    adapters[name].endpoint = p.endpoint
    endpoints[name] = p.endpoint
    if p.adapter.runtime then
      local rok, rt = pcall(p.adapter.runtime, p.client)
      adapters[name].runtime = rok and rt or nil
    end
  end
  A.report = o.report or (F.jsonl:gsub('%.jsonl$', '') .. '.md')
  A.ws = A.W.prepare and A.W.prepare(F, o.wo) or {}
  A.headline = A.W.headline(o.wo)
  F:started({
    kind = 'startup', plan = o.name, plan_file = o.plan_file, argv = o.argv, providers = o.providers,
    shard = sh and sh.record or nil,
    adapters = adapters, seed = o.seed, seed_given = o.seed_given, samples = o.samples, warmups = o.warmups,
    command = o.command, expect = o.expect, exec_timeout_seconds = o.exec_timeout_seconds,
    timeout_seconds = o.timeout_seconds, pause_seconds = o.pause_seconds, cleanup_backoff = o.cleanup_backoff,
    sandbox = o.sandbox, provider_config = o.provider_config, arena_version = arena.VERSION,
    versions = sys.versions(), cpu_count = sys.cpu_count(),
    method = o.mode == 'lockstep' and arena.METHOD or (arena.MODE_METHOD[o.mode] .. '; ' .. arena.METHOD:gsub('^[^;]*; ', '')),
    mode = o.mode, repeats = o.repeats, burst = o.burst, stagger_ms = o.stagger_ms,
    cold_connections = o.cold_connections, h2_streams = o.h2_streams, computesdk = o.computesdk or nil,
    workload = o.workload, workload_options = o.workload ~= 'startup' and o.wo or nil,
    figures = A.W.figures(o.wo), headline = A.W.headline(o.wo), resources = o.resources, audit = o.audit,
    workload_info = A.W.info and A.W.info(A.ws) or nil,
    audit_version = o.audit and audit.VERSION or nil,
  }, frame.identity(o, { kind = 'startup', providers = o.providers, endpoints = endpoints,
    selection = { samples = o.samples, warmups = o.warmups, repeats = o.repeats, burst = o.burst,
      stagger_ms = o.stagger_ms, cold_connections = o.cold_connections, h2_streams = o.h2_streams, command = o.command, seed = o.seed,
      workload = o.workload, resources = o.resources } }))
  F.state.status, F.state.phase = 'starting', 'starting'
  F:emit('serve', nil, true)
  F:say('startup run %s (%s%s): %s; %d samples%s + %d warmups each; seed %d%s', F.id, o.mode,
    o.mode == 'burst' and (' ' .. o.burst .. ' at once') or (o.mode == 'staggered' and (' every ' .. o.stagger_ms .. ' ms') or ''),
    table.concat(o.providers, ', '), o.samples, o.repeats > 1 and (' x ' .. o.repeats .. ' blocks') or '', o.warmups,
    o.seed, o.seed_given and '' or ' (drawn; pass --seed to pin it)')
  F:say('log: %s', F.jsonl)
  if F.status_url then F:say('status: %s', F.status_url) end
  if o.on_start then
    o.on_start({ run_id = F.id, jsonl = F.jsonl, status_url = F.status_url, report = A.report })
  end
  return {}
end

--- The end: the summary (results/<run-id>.json), run_finished with the live sandboxes, the
--- exit status (1 when every measured trial failed: the run measured nothing) and
--- {run_id, jsonl, json, report, status, stop}.
function arena.finish(F)
  local o, A = F.opts, F.k
  if A.W.close then pcall(A.W.close, F, A.ws) end
  if A.h2_streams_before then http.configure { max_concurrent_streams = A.h2_streams_before } end
  local live, counts = {}, {}
  for _, name in ipairs(o.providers) do
    local p = F.P[name]
    local c = A.providers[name].counts
    counts[name] = { started = p.counts.started, allocated = p.counts.allocated, destroyed = p.counts.destroyed,
      cleanup_failed = p.counts.cleanup_failed, errors = p.counts.errors, interrupted = p.counts.interrupted,
      warmup = c.warmup, warmup_ok = c.warmup_ok, measured = c.measured, ok = c.ok, clean = c.clean,
      audit_labels = next(c.labels) and c.labels or nil }
    for id in pairs(p.live) do live[#live + 1] = { provider = name, sandbox_id = id } end
  end
  table.sort(live, function(a, b) return a.sandbox_id < b.sandbox_id end)
  local measured, measured_ok = 0, 0
  for _, c in pairs(counts) do measured, measured_ok = measured + c.measured, measured_ok + c.ok end
  F.state.status = F.interrupted and 'interrupted' or (F.stopped and 'stopped') or 'finished'
  local sok, serr = pcall(function()
    assert(fs.mkdir_p(util.dirname(F.json)))
    assert(fs.write(F.json, util.json_sorted(arena.summary(F)) .. '\n'))
  end)
  local status = F:close({
    rounds_done = A.rounds_done, counts = counts, live_sandboxes = #live > 0 and live or nil,
    elapsed_s = ms(clock.now() - F.t0) / 1000, summary = sok and F.json or nil,
  }, { live = #live, report_path = A.report, summary_written = sok or nil,
       summary_error = not sok and errors.line(serr) or nil })
  local info = { run_id = F.id, jsonl = F.jsonl, json = sok and F.json or nil, report = A.report,
    status = status, stop = F.stopped }
  return frame.exit_status(F, measured, measured - measured_ok), info
end

return arena
