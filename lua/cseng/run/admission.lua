--- Adaptive admission of sandbox creates: per provider (any key: a model endpoint
--- too), an AIMD limit on the creates in flight, bounded by --concurrency and by what the adapter
--- declares (`M.limits = { creates_per_minute =, max_creates_in_flight = }`), with a pause of
--- every create of that key when the provider answers Retry-After.
---
---   local adm = admission.for_session(session, provider)   -- nil when pinned off
---   local ok, sb, err, code = adm:create(provider, spec, times)   -- pcall(adapter.create) results
---
--- The rules:
---   * a create starts only while fewer than floor(limit) are in flight, no pause is on, and (with
---     creates_per_minute) at least 60/creates_per_minute s after the previous start;
---   * a success raises the limit by 1/limit (one more per window of successes: additive
---     increase), up to the bound;
---   * a 429, 503 or GRPC_RESOURCE_EXHAUSTED halves it (not below 1), once per window: answers to
---     creates that started before the last decrease do not decrease it again;
---   * the same answer also paces the starts: at 0.8x the rate of the last second's starts (or
---     of the pace already set, if lower); each success then raises the pace by 0.5 creates/s
---     (so it grows about 50% per second while healthy) until it passes what the limit alone
---     allows (the pace is dropped again). A concurrency window alone cannot sit below 2 in
---     flight when the provider's limit is a rate: it would collect a 429 every other create;
---   * a Retry-After on such an answer pauses every create of the key until it has passed;
---   * a 429 (a refusal: nothing was created) is retried here, after the pause or the decrease,
---     while the wait stays within the budget (the run's --timeout-seconds, else
---     admission.MAX_WAIT_S); a 503 is not (it may have created a sandbox: the session's
---     reconciliation handles it), it only slows the next creates down.
---   * rising create latency decreases it too (a gradient, as Netflix's concurrency-limits):
---     every `window` (10) creates that started after the last decrease, the median of their
---     latencies is compared with the 10th percentile of the last `long` (128) successful creates
---     (the baseline: the latency of a provider not yet loaded); past `tolerance` (2) x the
---     baseline and past the long window's median (rising, not merely spread), the limit is
---     multiplied by tolerance x baseline / median (at most halved, not below 1;
---     admission.LATENCY holds these). Healthy windows leave the additive increase to
---     probe upward; a lasting change becomes the baseline once the long window holds it. A model
---     endpoint has no gradient (a completion's latency is its output's length, not the load).
--- Every change of the limit, every pause and every retry is an `admission` event in the run log
--- ({provider = key, key, limit, in_flight, reason, retry_after_s?}); at the run's end
--- (admission.finish, called by the frame) one `total` event per key carries the counters
--- (throttled = 429/503 answers, retried, waits = acquisitions that waited, wait_s).
---
--- Model endpoints (`model:<host>`): the agent solvers' chat completions go through
--- ctx.admission(key) (admission.endpoint): acquire before a request, release after, success or
--- throttled on its answer; a 429 is retried there without spending one of the agent's tries.
---
--- The run's option `admission_start` (a plan field) sets the first limit (default --concurrency).
--- Pinned off by the plan field / option `admission = 'off'` (a measurement run: startup runs
--- default to off, and the arena's burst refuses anything else: it must stay a true burst), or
--- `'fixed'` (the bound only: --concurrency and the adapter's declared limits, no adaptation).
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local task = require('cseng.task')
local util = require('cseng.lib.util')

local admission = {}
admission.MAX_WAIT_S = 600
admission.LATENCY = { window = 10, long = 128, tolerance = 2, baseline_q = 0.1 }
admission.THROTTLE = { HTTP_429 = 'retry', HTTP_503 = 'slow', GRPC_RESOURCE_EXHAUSTED = 'retry' }

local Ctl = {}
Ctl.__index = Ctl

local controllers = setmetatable({}, { __mode = 'k' }) -- per session: key -> controller

--- A controller for key. o: bound (creates in flight at most), creates_per_minute, adaptive
--- (default true), event = fn(fields) (the run log), start (the first limit; default the bound:
--- a healthy provider sees the run exactly as without admission until it throttles), now (the
--- clock, ns; default cseng.clock.now: a spec feeds its own; a create's end is clock.answered,
--- the arrival of its last answer, unless a spec's own clock is given), latency = false (no gradient) or
--- {window, long, tolerance, baseline_q} (admission.LATENCY's fields).
---@return table
function admission.new(key, o)
  local bound = math.max(1, math.tointeger(o.bound) or 1)
  local lat = o.latency
  if lat ~= false then lat = util.merge(admission.LATENCY, type(lat) == 'table' and lat or nil) end
  local c = setmetatable({
    key = key, bound = bound, adaptive = o.adaptive ~= false, event = o.event or function() end,
    now = o.now or clock.now, answered = o.now or clock.answered, lat = lat or nil, long = {}, nlong = 0, short = {},
    waits = 0, wait_ns = 0,
    limit = o.adaptive == false and bound or math.max(1, math.min(bound, math.tointeger(o.start) or bound)),
    in_flight = 0, waiting = 0, signals = 0, gate = task.semaphore(0),
    paused_until = 0, next_start = 0, started = 0, decreased_at = 0,
    interval_ns = o.creates_per_minute and math.floor(60e9 / o.creates_per_minute) or nil,
    declared_ns = o.creates_per_minute and math.floor(60e9 / o.creates_per_minute) or nil,
    pace = nil, starts = {}, nstarts = 0, -- learned creates/s, the last starts (ring of 64)
    counts = { throttled = 0, retried = 0, paused = 0, increases = 0, decreases = 0, latency_decreases = 0 },
  }, Ctl)
  c:note('start')
  return c
end

function Ctl:note(reason, extra)
  self.event(util.merge({ provider = self.key, key = self.key, limit = math.floor(self.limit), in_flight = self.in_flight, reason = reason,
    bound = self.bound }, extra))
end

-- Wake as many waiters as there are free places (each wakes once; a woken waiter re-checks).
function Ctl:wake()
  local free = math.floor(self.limit) - self.in_flight
  while free > 0 and self.waiting > self.signals do
    self.signals = self.signals + 1
    self.gate:release()
    free = free - 1
  end
end

--- Wait for a place; false when the wait would pass deadline (ns of the controller's clock).
--- Returns the start's sequence number (for throttled/latency) and whether it had to wait.
function Ctl:acquire(deadline)
  local t0, waited = self.now(), false
  while true do
    local now = self.now()
    if self.paused_until > now then
      if self.paused_until > deadline then return false end
      waited = true
      task.sleep((self.paused_until - now) / 1e9)
    elseif self.in_flight < math.floor(self.limit) then
      if self.interval_ns and self.next_start > now then
        if self.next_start > deadline then return false end
        waited = true
        task.sleep((self.next_start - now) / 1e9)
      else
        if waited then
          self.waits, self.wait_ns = self.waits + 1, self.wait_ns + (now - t0)
        end
        self.in_flight = self.in_flight + 1
        self.started = self.started + 1
        self.nstarts = self.nstarts % 64 + 1
        self.starts[self.nstarts] = now
        if self.interval_ns then self.next_start = math.max(now, self.next_start) + self.interval_ns end
        return self.started
      end
    else
      waited = true
      self.waiting = self.waiting + 1
      self.gate:acquire()
      self.waiting = self.waiting - 1
      self.signals = self.signals - 1
    end
  end
end

function Ctl:release()
  self.in_flight = self.in_flight - 1
  self:wake()
end

local Held = { __close = function(h) if h.c then h.c:release() end end }

--- A place acquired (seq from acquire) as a to-be-closed value: `local h <close> = c:hold()`
--- releases it when the scope ends, a cancellation or an error included, unless h:release()
--- released it first.
function Ctl:hold()
  return setmetatable({ c = self, release = function(h)
    if h.c then h.c:release() end
    h.c = nil
  end }, Held)
end

-- Starts per second over the last second (of the last 64 starts).
function Ctl:recent_rate()
  local now, n = self.now(), 0
  for _, t in pairs(self.starts) do if now - t <= 1e9 then n = n + 1 end end
  return n
end

function Ctl:set_pace(pace)
  self.pace = pace
  local ns = pace and math.floor(1e9 / pace) or nil
  if self.declared_ns and (not ns or ns < self.declared_ns) then ns = self.declared_ns end
  self.interval_ns = ns
end

function Ctl:success()
  if not self.adaptive then return end
  if self.pace then
    local pace = self.pace + 0.5
    if pace > 2 * self:recent_rate() + 10 then pace = nil end -- the pace no longer binds: drop it
    self:set_pace(pace)
    if not pace then self:note('unpaced') end
  end
  if self.limit >= self.bound then return end
  local before = math.floor(self.limit)
  self.limit = math.min(self.bound, self.limit + 1 / self.limit)
  if math.floor(self.limit) > before then
    self.counts.increases = self.counts.increases + 1
    self:note('increase')
    self:wake()
  end
end

-- A sorted copy of a list of numbers, and its q-quantile (nearest rank).
local function sorted(list)
  local xs = {}
  for i = 1, #list do xs[i] = list[i] end
  table.sort(xs)
  return xs
end
local function quantile(xs, q) return xs[math.max(1, math.min(#xs, math.ceil(q * #xs)))] end

--- The latency (ns) of a successful create that started as number `seq`: the gradient. Returns
--- the ratio tolerance x baseline / short of a window that decreased the limit, else nil.
function Ctl:latency(seq, ns)
  local lat = self.lat
  if not self.adaptive or not lat or type(ns) ~= 'number' or ns <= 0 then return nil end
  -- the baseline: a ring of the last `long` latencies, every sample (the long window drifts with
  -- a provider whose latency really changed, so a lasting change stops decreasing the limit)
  self.nlong = self.nlong % lat.long + 1
  self.long[self.nlong] = ns
  -- the short window counts only creates started after the last decrease: the ones already in
  -- flight then saw the load that caused it
  if seq <= self.decreased_at then return nil end
  local short = self.short
  short[#short + 1] = ns
  if #short < lat.window then return nil end
  self.short = {}
  if #self.long < 2 * lat.window then return nil end -- no baseline yet
  -- the baseline is a low quantile (p10) of the long window, the latency of a provider not yet
  -- loaded (a median would rise with the limit while it climbs, and never see the rise)
  local long = sorted(self.long)
  local base, now = quantile(long, lat.baseline_q), quantile(sorted(short), 0.5)
  local g = lat.tolerance * base / now
  -- and only while it rises: past the long window's median too (a provider whose latencies
  -- simply spread widely is not loaded by them)
  if g >= 1 or now <= quantile(long, 0.5) then return nil end
  local before = math.floor(self.limit)
  self.limit = math.max(1, self.limit * math.max(0.5, g))
  self.decreased_at = self.started
  self.counts.latency_decreases = self.counts.latency_decreases + 1
  if math.floor(self.limit) < before then
    self.counts.decreases = self.counts.decreases + 1
    self:note('decrease', { code = 'latency', before = before, latency_ms = math.floor(now / 1e6),
      baseline_ms = math.floor(base / 1e6) })
  end
  return g
end

-- A throttling answer to the create that started as number `seq`; retry_after in seconds or nil.
function Ctl:throttled(seq, code, retry_after)
  self.counts.throttled = self.counts.throttled + 1
  if retry_after and retry_after > 0 then
    local until_ns = self.now() + math.floor(retry_after * 1e9)
    if until_ns > self.paused_until then
      self.paused_until = until_ns
      self.counts.paused = self.counts.paused + 1
      self:note('pause', { code = code, retry_after_s = retry_after })
    end
  end
  if self.adaptive and seq > self.decreased_at then
    self.decreased_at = self.started -- answers to creates already started do not decrease again
    local before = math.floor(self.limit)
    self.limit = math.max(1, self.limit / 2)
    local recent = self:recent_rate()
    self:set_pace(math.max(0.5, 0.8 * math.min(recent, self.pace or recent)))
    self.counts.decreases = self.counts.decreases + 1
    self:note('decrease', { code = code, before = before, pace = math.floor(self.pace * 10) / 10 })
  end
end

-- The Retry-After of a failed create, in seconds: from the HTTP response an adapter returns as
-- its 4th value (adapter.request's res), or an error table's retry_after.
local function retry_after_of(err, res)
  if type(res) == 'table' and type(res.headers) == 'table' then
    local v = util.retry_after(res.headers['retry-after'])
    if v then return v end
  end
  if type(err) == 'table' and type(err.retry_after) == 'number' then return err.retry_after end
  return nil
end

--- One create under admission: waits for a place, calls the adapter (protected), adapts, and
--- retries a 429 within the budget. Returns what pcall(adapter.create, client, spec) returns
--- (cok, sb, err, code). times.create_start / create_end mark the attempt that counted (the
--- last); times.admission_wait_ns sums the time spent waiting here.
function Ctl:create(p, spec, times, budget_s)
  local t0 = self.now()
  local deadline = t0 + math.floor((budget_s or admission.MAX_WAIT_S) * 1e9)
  local wait_ns = 0
  while true do
    local w0 = self.now()
    local seq = self:acquire(deadline)
    wait_ns = wait_ns + (self.now() - w0)
    times.admission_wait_ns = wait_ns
    if not seq then
      return true, nil, string.format('%s: no create admitted within %.0f s (throttled %d times)', self.key,
        (deadline - t0) / 1e9, self.counts.throttled), 'HTTP_429'
    end
    local held <close> = self:hold() -- released on every path (a cancelled create too)
    times.create_start = self.now()
    local cok, sb, err, code, res = pcall(p.adapter.create, p.client, spec)
    times.create_end = self.answered(times.create_start)
    held:release()
    local kind = cok and not sb and admission.THROTTLE[code]
    if not kind then
      if cok and sb then
        self:success()
        self:latency(seq, times.create_end - times.create_start)
      end
      return cok, sb, err, code
    end
    local ra = retry_after_of(err, res)
    self:throttled(seq, code, ra)
    local next_try = math.max(self.paused_until, self.now())
    if kind ~= 'retry' or next_try > deadline then return cok, sb, err, code end
    self.counts.retried = self.counts.retried + 1
    self:note('retry', { code = code, retry_after_s = ra })
  end
end

--- The mode of a run's options: 'adaptive' (default for task runs), 'fixed' or 'off' (default
--- for startup runs: a measurement).
---@return string
function admission.mode(opts, kind)
  local m = opts and opts.admission
  if m == nil then return kind == 'startup' and 'off' or 'adaptive' end
  if m ~= 'adaptive' and m ~= 'fixed' and m ~= 'off' then
    error("admission: expected 'adaptive', 'fixed' or 'off', got " .. tostring(m), 0)
  end
  if kind == 'startup' and opts.mode == 'burst' and m ~= 'off' then
    error("admission: --mode burst measures the provider as it is (a true burst): admission must be 'off', got "
      .. m, 0)
  end
  return m
end

-- The session's controller of key, made by make(event) on first use (event writes to the run log).
local function controller(s, key, make)
  local per = controllers[s]
  if not per then
    per = {}
    controllers[s] = per
  end
  local c = per[key]
  if not c then
    c = make(function(f) if s.writer then s.writer:event('admission', f) end end)
    per[key] = c
  end
  return c
end

--- The controller of a session's provider (created on first use), or nil when admission is off.
---@return table|nil
function admission.for_session(s, p)
  local mode = admission.mode(s.opts, s.kind)
  if mode == 'off' then return nil end
  return controller(s, p.name, function(event)
    local limits = type(p.adapter.limits) == 'table' and p.adapter.limits or {}
    local bound = math.tointeger(s.opts.concurrency) or 1
    local declared = math.tointeger(limits.max_creates_in_flight)
    if declared and declared > 0 then bound = math.min(bound, declared) end
    local cpm = tonumber(limits.creates_per_minute)
    return admission.new(p.name, {
      bound = bound, adaptive = mode == 'adaptive', creates_per_minute = cpm and cpm > 0 and cpm or nil,
      start = s.opts.admission_start, event = event,
    })
  end)
end

--- The admission of a session's model endpoints, for a solver's context (ctx.admission): a
--- function key -> controller (keys `model:<host>`, one per endpoint, created on first use, bound
--- by --concurrency, no latency gradient), or nil when admission is off or fixed (a fixed bound
--- of --concurrency is what the trials already are).
---@return (fun(key: string): table)|nil
function admission.endpoint(s)
  if admission.mode(s.opts, s.kind) ~= 'adaptive' then return nil end
  return function(key)
    key = tostring(key)
    return controller(s, key, function(event)
      return admission.new(key, { bound = math.tointeger(s.opts.concurrency) or 1, latency = false, event = event })
    end)
  end
end

--- The end of a run (the frame calls it before run_finished; a run kind that reads its log
--- before that calls it first): one `total` admission event per key with its counters, written
--- again only when they changed since the last one.
function admission.finish(s)
  local keys = {}
  for k in pairs(controllers[s] or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local c = controllers[s][k]
    local total = util.merge(c.counts, { waits = c.waits, wait_s = math.floor(c.wait_ns / 1e6) / 1e3 })
    local sig = {}
    for _, f in ipairs({ 'throttled', 'retried', 'paused', 'increases', 'decreases', 'latency_decreases', 'waits' }) do
      sig[#sig + 1] = tostring(total[f])
    end
    sig = table.concat(sig, ',') .. ',' .. math.floor(c.limit)
    if c.total_sig ~= sig then
      c.total_sig = sig
      -- scope: this controller (a shard's totals add up in a merged log; a later total of the
      -- same scope replaces its earlier one)
      c.scope = c.scope or crypto.hex(crypto.random_bytes(6))
      total.scope = c.scope
      c:note('total', total)
    end
  end
end

--- The session's hook: the create of Session:sandbox under admission (or plain when off).
--- Returns pcall(adapter.create)'s results and fills times.create_start / create_end.
function admission.create(s, p, spec, times)
  local c = admission.for_session(s, p)
  if not c then
    times.create_start = clock.now()
    local cok, sb, err, code = pcall(p.adapter.create, p.client, spec)
    times.create_end = clock.answered(times.create_start) -- its last answer's arrival (lclock.c)
    return cok, sb, err, code
  end
  return c:create(p, spec, times, s.opts.timeout_seconds)
end

--- The counters of a session's controllers: {provider = {limit, bound, throttled, retried, ...}}.
function admission.stats(s)
  local out = {}
  for k, c in pairs(controllers[s] or {}) do
    out[k] = util.merge(c.counts, { limit = math.floor(c.limit), bound = c.bound, in_flight = c.in_flight,
      waits = c.waits })
  end
  return out
end

return admission
