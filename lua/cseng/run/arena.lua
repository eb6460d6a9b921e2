--- The startup arena (plans/startup.lua): for each provider, create a sandbox, run one command
--- and check its output, destroy the sandbox; repeat; compare (docs/ARENA.md).
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
local task = require 'cseng.task'
local clock = require 'cseng.clock'
local http = require 'cseng.http'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local errors = require 'cseng.lib.errors'
local results = require 'cseng.results.log'
local session = require 'cseng.run.session'
local frame = require 'cseng.run.frame'
local admission = require 'cseng.run.admission'
local stats = require 'cseng.lib.stats'
local util = require 'cseng.lib.util'

local arena = {}

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
  return o
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
  local kv = {}
  for line in tostring(text or ''):gmatch('[^\n]+') do
    local k, v = line:match('^([%w%._]+)=(.*)$')
    if k then kv[k] = util.trim(v) end
  end
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

local function probe_environment(run, p, sb, spec, rec)
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
  p.environment = ev
  run.writer:event('environment', ev)
  return ev
end

-- The sandbox spec for a provider: the plan's `sandbox` table, labels, a lifetime cap.
local function sandbox_spec(run, p)
  local spec = util.merge(run.opts.sandbox, (run.opts.provider_config[p.name] or {}).sandbox)
  spec.labels = util.merge(spec.labels, {
    ['cseng.run'] = run.id, ['cseng.launcher'] = run.launcher, ['cseng.purpose'] = 'startup',
  })
  spec.ttl_seconds = spec.ttl_seconds or 600
  return spec
end

--- Run one trial (never raises). Returns the record, or nil if the run was stopped before it
--- could allocate.
--- ctx (optional): block (the repeat block), due (clock.now() when the create was due: the
--- engine's lateness is measured from it).
local function trial(run, p, phase, round, position, order, ctx)
  if run.stopped then return nil end
  ctx = ctx or {}
  local opts = run.opts
  local rec = {
    provider = p.name, adapter = p.adapter_name, phase = phase, warmup = phase == 'warmup', round = round,
    position = position, order = order, ok = false, started_at = clock.wall(),
    block = ctx.block, mode = opts.mode,
  }
  local spec = sandbox_spec(run, p)
  p.counts.started = p.counts.started + 1
  local t_start = clock.now()
  local times = {}
  local state = run:guard(rec, function(_, state)
    local hs_n, hs_s = http.handshakes()
    local ok_c, lease = pcall(run.session.sandbox, run.session, spec,
      { phase = phase, round = round, adapter = p.adapter_name },
      { provider = p, times = times, destroyed = { phase = phase, round = round } })
    local hs_n1, hs_s1 = http.handshakes() -- the create's calls that waited for a new connection
    if hs_n1 > hs_n then rec.handshakes, rec.handshake_ms = hs_n1 - hs_n, (hs_s1 - hs_s) * 1000 end
    if times.create_end then
      state.windows = { { times.create_start, times.create_end } }
      rec.create_ms = ms(times.create_end - times.create_start)
    end
    if times.create_start then -- the request left at start_t_ms (ms since the run began)
      local first = times.queued or times.create_start
      rec.start_t_ms = ms(first - run.t0)
      if ctx.due then rec.lateness_ms = math.max(0, ms(first - ctx.due)) end
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
    rec.ready_t_ms = ms(t2 - run.t0)
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
    rec.ok = true
  end, { timeout = opts.timeout_seconds, stage = 'create' })
  if state.windows then
    local stall = 0
    for _, w in ipairs(state.windows) do stall = stall + arena.stall_within(run, w[1], w[2]) end
    rec.stall_ms = ms(stall)
  end

  -- the environment, once per provider: on its first warmup (or its first trial without
  -- warmups), also after a failed readiness check, where it tells what the template lacks
  if state.sb and not p.environment and not p.probing and not rec.interrupted and (rec.ok or rec.exit_code ~= nil)
      and (phase == 'warmup' or opts.warmups == 0) then
    p.probing = true -- concurrent trials (burst, staggered) probe once
    probe_environment(run, p, state.sb, spec, rec)
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
      arena.stop(run, 'cleanup', string.format(
        'cleanup of %s sandbox %s failed after %d attempts (%s); stopping new allocations. ' ..
        'Destroy it with: cseng cleanup %s', p.name, state.sb.id, r.attempts, tostring(r.error), run.jsonl), r.code)
    end
  end
  rec.elapsed_ms = ms(clock.now() - t_start)
  rec.finished_at = clock.wall()
  run.writer:event('startup_trial', rec)

  -- counters for the status endpoint and the console
  local c = p.counts
  if rec.interrupted then c.interrupted = c.interrupted + 1
  elseif phase == 'warmup' then c.warmup = c.warmup + 1; if rec.ok then c.warmup_ok = c.warmup_ok + 1 end
  else
    c.measured = c.measured + 1
    if rec.ok then
      c.ok = c.ok + 1
      p.ready[#p.ready + 1] = rec.ready_ms
      if rec.block then
        local b = p.ready_blocks[rec.block] or {}
        p.ready_blocks[rec.block] = b
        b[#b + 1] = rec.ready_ms
      end
    end
  end
  if rec.ok then p.last_ready_ms = rec.ready_ms
  elseif not rec.interrupted then
    -- the create failed this many times in a row with one code: a dead endpoint stops the run
    run:observe(p, rec, { create = true })
    c.errors = c.errors + 1
    p.last_error = string.format('%s (%s, %s round %d)', rec.error, rec.error_stage, phase, round)
    run.state.last_error = p.name .. ': ' .. p.last_error
  end

  -- stop conditions that concern every provider
  if errors.is_auth(rec.error_code) then
    arena.stop(run, 'auth', string.format('%s answered %s to %s: authentication/authorization failed; ' ..
      'check its credentials (cseng providers). Stopping new allocations.', p.name, rec.error_code:gsub('^HTTP_', ''),
      rec.error_stage), rec.error_code)
  elseif phase == 'warmup' and rec.error_stage == 'first_exec' and not rec.interrupted
    and not errors.is_transient(rec.error_code) and not rec.timed_out then
    -- a readiness verdict (the command ran and did not print the marker, or the call was
    -- refused for good); a transient error (5xx, reset, timeout) is a failed warmup, no more
    local env = p.environment and p.environment.environment
    arena.stop(run, 'readiness', string.format('warmup readiness failed on %s: %s. Inspect the template\'s ' ..
      'command support (does it have python3? does --command print --expect?) before measuring.%s', p.name,
      rec.error, env and env.python_output and (' The sandbox says python=' .. env.python_output) or ''),
      rec.error_code)
  end
  return rec
end

-- Every record write blocks the loop (fs.append is synchronous, and allocation, destroy and
-- cleanup records are fsynced): the writer is wrapped to keep the time windows of its writes, so
-- each trial records how much of its measured calls overlapped them (stall_ms, an upper bound of
-- what the engine's own bookkeeping added to another provider's timings).
local function tracking_writer(run, writer)
  run.stalls = {}
  return setmetatable({}, { __index = function(_, k)
    local f = writer[k]
    if type(f) ~= 'function' then return f end
    return function(_, ...)
      local s = clock.now()
      local r = f(writer, ...)
      local st = run.stalls
      st[#st + 1] = { s, clock.now() }
      if #st > 256 then table.remove(st, 1) end
      return r
    end
  end })
end

--- Nanoseconds of record writes inside [a, b] (writes never overlap each other: they block).
function arena.stall_within(run, a, b)
  local total, st = 0, run.stalls or {}
  for i = #st, 1, -1 do
    local s, e = st[i][1], st[i][2]
    if e <= a then break end
    local lo, hi = math.max(s, a), math.min(e, b)
    if hi > lo then total = total + (hi - lo) end
  end
  return total
end

--- Stop the run (the first reason wins): no round starts after this (Frame:stop).
function arena.stop(run, reason, message, code) return run:stop(reason, message, code) end

-- ---- what the status document adds (cseng.cli.present.status_doc) ----------------------

local function status_extra(run)
  local st, o = run.state, run.opts
  return { round = st.round, rounds = st.rounds, order = st.order, seed = o.seed, samples = o.samples,
    warmups = o.warmups, mode = o.mode, block = st.block, blocks = o.repeats }
end

local function status_provider(p)
  return { last_ready_ms = p.last_ready_ms and rounded(p.last_ready_ms, 1),
    p50_ready_ms = p.ready[1] and rounded(stats.median(p.ready), 1) }
end

--- The run's summary (results/<run-id>.json, like a task run's): per provider and mode, the
--- measured n, ok, ready (TTI) percentiles with bootstrap CIs, block CIs, and the
--- computesdk-compatible figures and score. `cseng compare` and the viewer read it.
---@return table
function arena.summary(run)
  local o = run.opts
  local doc = { kind = 'cseng-startup-summary', run_id = run.id, mode = o.mode, samples = o.samples,
    warmups = o.warmups, repeats = o.repeats, seed = o.seed, label = o.label, status = run.state.status,
    identity = run.identity, providers = {} }
  for _, name in ipairs(o.providers) do
    local p = run.P[name]
    local sm = stats.summary(p.ready)
    local lo, hi = stats.bootstrap_ci(p.ready, { seed = o.seed ~ stats.hash('ready_ms/' .. name) })
    local c = stats.computesdk(p.ready, p.counts.measured)
    local entry = {
      provider = name, mode = o.mode, n = p.counts.measured, ok = p.counts.ok, errors = p.counts.errors,
      success_rate = p.counts.measured > 0 and p.counts.ok / p.counts.measured or nil,
      ready_ms = { p50 = sm.p50, p90 = sm.p90, p99 = sm.p99, mean = sm.mean, min = sm.min, max = sm.max,
        p50_ci = lo and { lo, hi } or nil },
      computesdk = { median_ms = c.median, p95_ms = c.p95, p99_ms = c.p99, success_rate = c.success_rate, score = c.score },
      endpoint = p.endpoint,
    }
    if o.repeats > 1 then
      local list = {}
      for bk = 1, o.repeats do list[#list + 1] = p.ready_blocks[bk] or {} end
      local r = stats.blocks(list, { seed = o.seed ~ stats.hash('blocks/ready_ms/' .. name) })
      if r and r.lo then entry.ready_ms.block_ci = { r.lo, r.hi }; entry.blocks_disagree = r.disagree or nil end
    end
    doc.providers[#doc.providers + 1] = entry
  end
  return doc
end

-- ---- the run ---------------------------------------------------------------------------

local function adapter_info(name, adapter)
  local file = sys.root() .. '/lua/providers/' .. name:gsub('%-', '_') .. '.lua'
  local src = fs.read(file)
  return {
    adapter = name, version = adapter.version, description = adapter.description, remote = adapter.remote or false,
    sha256 = src and crypto.sha256_hex(src):sub(1, 16) or nil,
  }
end

-- Join tasks; a SIGINT cancels our wait too, so wait again until every trial has cleaned up.
local function join_all(run, tasks) return run:join_all(tasks) end

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

-- ---- the modes -------------------------------------------------------------------------

local function halted(run) return run:halted() end

-- Lockstep rounds (warmups, and the lockstep mode): one trial per provider per round, in parallel.
local function lockstep_rounds(run, phase, count, rng, block, first_round)
  local o = run.opts
  for r = 1, count do
    if halted(run) then return end
    local round = (first_round or 0) + r
    local order = stats.shuffle(util.copy(o.providers), rng)
    run.state.round, run.state.order = round, order
    run.writer:event('round', { phase = phase, round = round, order = order, block = block })
    local tasks = {}
    local due = clock.now()
    for pos, name in ipairs(order) do
      tasks[pos] = task.spawn(trial, run, run.P[name], phase, round, pos, order, { block = block, due = due })
    end
    join_all(run, tasks)
    if phase == 'warmup' then run.rounds_done.warmup = round else run.rounds_done.measured = round end
    run:emit('round')
    if run.any_remote and o.pause_seconds > 0 and not run.stopped then
      if not pcall(task.sleep, o.pause_seconds) then run.interrupted = true end
    end
  end
end

-- Sequential: one trial at a time; each round the providers one after another (seeded order).
local function sequential_rounds(run, count, rng, block, first_round)
  local o = run.opts
  for r = 1, count do
    local round = first_round + r
    local order = stats.shuffle(util.copy(o.providers), rng)
    run.state.round, run.state.order = round, order
    run.writer:event('round', { phase = 'measured', round = round, order = order, block = block })
    for pos, name in ipairs(order) do
      if halted(run) then return end
      local t = task.spawn(trial, run, run.P[name], 'measured', round, pos, order, { block = block, due = clock.now() })
      join_all(run, { t })
    end
    run.rounds_done.measured = round
    run:emit('round')
  end
end

-- Burst or staggered, one provider: `samples` trials, at most --burst in flight (burst), or one
-- launched every --stagger-ms (staggered). `due` is when each create should have left: the
-- engine's lateness is measured against it.
-- Before a burst: the connections its creates will use, open and ready (TCP, TLS, HTTP/2
-- settings), so a create's time never holds a handshake; with --cold-connections the idle ones are
-- closed instead, and each create opens its own (its trial records the handshake apart).
local function connections(run, p)
  local o, e = run.opts, p.endpoint
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
    else
      ev.error, ev.code = err, code -- the burst goes on: its creates open what they need
      run:say('%s: warming %d connections failed (%s): the burst opens its own', p.name, o.burst, tostring(err))
    end
  end
  run.writer:event('connections', ev)
end

local function batch(run, p, block, first_round)
  local o = run.opts
  connections(run, p)
  local t0 = clock.now()
  local tasks = {}
  local sem = o.mode == 'burst' and task.semaphore(o.burst) or nil
  local step = o.mode == 'staggered' and math.floor(o.stagger_ms * 1e6) or 0
  run.writer:event('batch', { block = block, provider = p.name, mode = o.mode, burst = o.burst,
    stagger_ms = o.stagger_ms, samples = o.samples })
  for i = 1, o.samples do
    if halted(run) then break end
    local due = t0 + (i - 1) * step
    if step > 0 then
      local wait = due - clock.now()
      if wait > 0 and not pcall(task.sleep, wait / 1e9) then run.interrupted = true; break end
    end
    tasks[#tasks + 1] = task.spawn(function()
      if sem then
        sem:acquire()
        -- a queued create is due when its place opens, not at the burst's start
        if i > o.burst then due = clock.now() end
      end
      local ok, err = pcall(trial, run, p, 'measured', first_round + i, i, nil, { block = block, due = due })
      if sem then sem:release() end
      if not ok then error(err, 0) end
    end)
  end
  join_all(run, tasks)
  run.rounds_done.measured = run.rounds_done.measured + #tasks
  run:emit('round')
end

local function run_rounds(run)
  local o = run.opts
  local rng = stats.rng(o.seed)
  run.any_remote = false
  for _, name in ipairs(o.providers) do run.any_remote = run.any_remote or run.P[name].adapter.remote == true end
  run.state.phase, run.state.rounds = 'warmup', o.warmups
  if not run.stopped then run.state.status = 'running' end
  lockstep_rounds(run, 'warmup', o.warmups, rng)
  -- burst and staggered run the providers one after another: each provider's trials count apart
  local per = (o.mode == 'burst' or o.mode == 'staggered') and #o.providers or 1
  run.state.phase, run.state.rounds = 'measured', o.samples * o.repeats * per
  run.state.blocks = o.repeats
  -- the blocks' provider orders have their own generator: the rounds' orders stay those of
  -- stats.rng(seed) alone (the same seed gives the same rounds with or without --repeat)
  local block_rng = stats.rng(o.seed ~ stats.hash('blocks'))
  for block = 1, o.repeats do
    if halted(run) then return end
    local order = stats.shuffle(util.copy(o.providers), block_rng)
    run.state.block = block
    local before = arena.host_context()
    run.writer:event('block', { block = block, blocks = o.repeats, mode = o.mode, order = order,
      host = { loadavg = before.loadavg, client_cpu_s = before.client_cpu_s } })
    local first = (block - 1) * o.samples
    if o.mode == 'lockstep' then lockstep_rounds(run, 'measured', o.samples, rng, block, first)
    elseif o.mode == 'sequential' then sequential_rounds(run, o.samples, rng, block, first)
    else
      for _, name in ipairs(order) do
        if halted(run) then break end
        batch(run, run.P[name], block, first)
      end
    end
    local d = arena.host_delta(before, arena.host_context())
    run.writer:event('block_finished', { block = block, host = d })
    if block < o.repeats and run.any_remote and o.pause_seconds > 0 and not run.stopped then
      if not pcall(task.sleep, o.pause_seconds) then run.interrupted = true end
    end
  end
end

--- Run a startup plan (options from plan + flags, see arena.options). Writes
--- results/<run-id>.jsonl and the report (results/<run-id>.md, or opts.report).
--- opts.on_start(info) is called with {run_id, jsonl, status_url, report} once the run has
--- started; opts.stderr (default io.stderr) receives the error messages (specs capture them).
--- Returns the exit status (0 finished, 1 stopped: cleanup, auth, readiness; 130 interrupted)
--- and {run_id, jsonl, report, status, stop}.
---@param opts table
---@return integer status, table info
function arena.run(opts)
  local o = arena.options(opts)
  local sh = require('cseng.run.shard').for_startup(o, o.providers, session.getenv(o.env))
  if sh then
    o.providers = sh.providers
    if #o.providers == 0 then -- more shards than providers: this one records that it had nothing to do
      local w = results.open(sh.jsonl, sh.run_id)
      w:event('run_started', { kind = 'startup', plan = o.name, plan_file = o.plan_file, argv = o.argv,
        providers = {}, shard = sh.record, task_count = 0 }, true)
      w:event('run_finished', { status = 'finished', passed = 0, failed = 0, errors = 0, recorded = 0 }, true)
      return 0, { run_id = sh.run_id, jsonl = sh.jsonl, status = 'finished' }
    end
  end
  local holder = {} -- the writes' time windows (tracking_writer), shared with the run
  local run = frame.open { kind = 'startup', opts = o, session = { id_parts = { o.name },
    run_id = sh and sh.run_id, jsonl = sh and sh.jsonl, -- a shard's log is named by its job
    wrap_writer = function(w) return tracking_writer(holder, w) end } }
  run.stalls = holder.stalls
  run.rounds_done = { warmup = 0, measured = 0 }
  run.state.round, run.state.rounds, run.state.started_at = 0, 0, clock.wall()
  run.status_extra, run.status_provider = status_extra, status_provider
  local run_id = run.id

  -- adapters and credentials first: a missing variable stops us before anything is allocated
  local adapters, endpoints = {}, {}
  for _, name in ipairs(o.providers) do
    local cfg = util.copy(o.provider_config[name])
    local adapter_name = cfg.adapter or name
    cfg.adapter, cfg.sandbox = nil, nil
    local p = run:connect(adapter_name, cfg, name)
    p.ready, p.ready_blocks = {}, {}
    p.counts = { started = 0, allocated = 0, destroyed = 0, cleanup_failed = 0, warmup = 0, warmup_ok = 0,
                 measured = 0, ok = 0, errors = 0, interrupted = 0 }
    adapters[name] = adapter_info(adapter_name, p.adapter)
    adapters[name].endpoint = p.endpoint
    endpoints[name] = p.endpoint
    if p.adapter.runtime then
      local rok, rt = pcall(p.adapter.runtime, p.client)
      adapters[name].runtime = rok and rt or nil
    end
  end

  run.report = o.report or (run.jsonl:gsub('%.jsonl$', '') .. '.md')
  run:started({
    kind = 'startup', plan = o.name, plan_file = o.plan_file, argv = o.argv, providers = o.providers,
    shard = sh and sh.record or nil,
    adapters = adapters, seed = o.seed, seed_given = o.seed_given, samples = o.samples, warmups = o.warmups,
    command = o.command, expect = o.expect, exec_timeout_seconds = o.exec_timeout_seconds,
    timeout_seconds = o.timeout_seconds, pause_seconds = o.pause_seconds, cleanup_backoff = o.cleanup_backoff,
    sandbox = o.sandbox, provider_config = o.provider_config, arena_version = arena.VERSION,
    versions = sys.versions(), cpu_count = sys.cpu_count(),
    method = o.mode == 'lockstep' and arena.METHOD or (arena.MODE_METHOD[o.mode] .. '; ' .. arena.METHOD:gsub('^[^;]*; ', '')),
    mode = o.mode, repeats = o.repeats, burst = o.burst, stagger_ms = o.stagger_ms,
    cold_connections = o.cold_connections, computesdk = o.computesdk or nil,
  }, frame.identity(o, { kind = 'startup', providers = o.providers, endpoints = endpoints,
    selection = { samples = o.samples, warmups = o.warmups, repeats = o.repeats, burst = o.burst,
      stagger_ms = o.stagger_ms, cold_connections = o.cold_connections, command = o.command, seed = o.seed } }))
  run.state.status, run.state.phase = 'starting', 'starting'
  run:emit('serve', nil, true)
  run:say('startup run %s (%s%s): %s; %d samples%s + %d warmups each; seed %d%s', run_id, o.mode,
    o.mode == 'burst' and (' ' .. o.burst .. ' at once') or (o.mode == 'staggered' and (' every ' .. o.stagger_ms .. ' ms') or ''),
    table.concat(o.providers, ', '), o.samples, o.repeats > 1 and (' x ' .. o.repeats .. ' blocks') or '', o.warmups,
    o.seed, o.seed_given and '' or ' (drawn; pass --seed to pin it)')
  run:say('log: %s', run.jsonl)
  if run.status_url then run:say('status: %s', run.status_url) end
  if o.on_start then
    o.on_start({ run_id = run_id, jsonl = run.jsonl, status_url = run.status_url, report = run.report })
  end

  local ok, err = pcall(run_rounds, run)
  if not ok then
    if errors.is_cancel(err) then run.interrupted = true
    else run:stop('internal', 'the arena failed: ' .. (errors.describe(err)), errors.EINTERNAL) end
  end
  run:reclaim() -- creates whose answer was lost, by label, before the live list is taken
  local live, counts = {}, {}
  for _, name in ipairs(o.providers) do
    local p = run.P[name]
    counts[name] = util.copy(p.counts)
    for id in pairs(p.live) do live[#live + 1] = { provider = name, sandbox_id = id } end
  end
  table.sort(live, function(a, b) return a.sandbox_id < b.sandbox_id end)
  local measured, measured_ok = 0, 0
  for _, c in pairs(counts) do measured, measured_ok = measured + c.measured, measured_ok + c.ok end
  run.state.status = run.interrupted and 'interrupted' or (run.stopped and 'stopped') or 'finished'
  local sok, serr = pcall(function()
    assert(fs.mkdir_p(util.dirname(run.json)))
    assert(fs.write(run.json, util.json_sorted(arena.summary(run)) .. '\n'))
  end)
  local status = run:close({
    rounds_done = run.rounds_done, counts = counts, live_sandboxes = #live > 0 and live or nil,
    elapsed_s = ms(clock.now() - run.t0) / 1000, summary = sok and run.json or nil,
  }, { live = #live, report_path = run.report, summary_written = sok or nil,
       summary_error = not sok and errors.line(serr) or nil })
  local info = { run_id = run_id, jsonl = run.jsonl, json = sok and run.json or nil, report = run.report,
    status = status, stop = run.stopped }
  -- every measured trial failed: the run measured nothing (exit 1, as a task run whose every trial errored)
  return frame.exit_status(run, measured, measured - measured_ok), info
end

return arena
