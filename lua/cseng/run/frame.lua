--- The run frame: the one driver every run kind goes through (lua/cseng/run/kinds/: tasks
--- and each run of a matrix, resume, the startup arena in every mode, prewarm, cleanup).
---
--- frame.run(kind, opts) owns the sequence, the same for every kind:
---   open   K.open(opts) -> the options, how the log opens (a new run id, a shard's, the log of
---          a run being resumed or cleaned), the kind's state (F.k); then the session (run id,
---          log, providers, the sandbox ledger);
---   begin  K.begin(F) -> the items: providers connected, the run's identity written once in
---          `run_started` (frame.identity; `--resume` restores and checks it), the plan said;
---   trials K.schedule(F, items) (default: Frame:pool, a concurrency bound, no new trial once
---          the run halts or K.more says no), each item through Frame:trial: a new record
---          (K.record), the body under the trial's watchdog (K.trial in a child task, so a
---          timeout cancels the body and never the worker; the error mapped into the record with
---          a registered code), what follows on every path (K.settle), --retry-errors for a
---          kind that allows it (K.retries), then K.finished;
---   halting an authentication failure, a failed cleanup, a log that cannot be written (the
---          session), a stop rule (Frame:stop), a dead endpoint (Frame:observe: K creates in a row
---          failing with one code), an interrupt;
---   end    creates whose answer was lost swept by label on every provider (Frame:reclaim), then
---          K.finish(F): run_finished (Frame:close) and the exit status by one rule
---          (frame.exit_status); K.close(F) runs however the run ends.
--- A kind supplies only what differs; a new kind is one file in lua/cseng/run/kinds/.
--- The frame never prints: it emits events (Frame:emit) to the observers in opts.observers;
--- the command line attaches the progress renderer and the status server (cseng.cli.present).
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local session = require('cseng.run.session')
local admission = require('cseng.run.admission')


local frame = {}

local Frame = {}
Frame.__index = Frame

--- Consecutive creates failing with the same code that stop a run (a dead endpoint); a plan
--- or --stop-after-create-failures N sets it, 0 turns the rule off.
frame.DEAD_ENDPOINT_AFTER = 5

--- Open a run: the session (o.session: session.open's arguments) and the frame around it.
--- o.kind: 'tasks' | 'resume' | 'startup' | 'prewarm'; o.opts: the run's options.
---@return table F
function frame.open(o)
  local F = setmetatable({
    kind = o.kind, opts = o.opts or {}, t0 = clock.now(), observers = {}, P = {}, order = {},
    counts = { started = 0, done = 0, passed = 0, failed = 0, errors = 0, retried = 0, interrupted = 0 },
    state = { status = 'starting', phase = 'starting' }, create_fails = {},
    guarded = 0, -- trials in flight: bodies inside Frame:guard
  }, Frame)
  for _, fn in ipairs(F.opts.observers or {}) do F.observers[#F.observers + 1] = fn end
  local so = util.copy(o.session or {})
  so.kind, so.opts = so.kind or o.kind, F.opts
  F.session = session.open(so)
  local s = F.session
  F.id, F.writer, F.jsonl, F.json, F.launcher = s.id, s.writer, s.jsonl, s.json, s.launcher
  return F
end

--- Tell the observers (presentation: progress, status). An observer's failure (a closed
--- terminal) never stops the run.
---@param name string
---@param data table|nil
function Frame:emit(name, data, strict)
  for _, fn in ipairs(self.observers) do
    if strict then fn(self, name, data or {}) else pcall(fn, self, name, data or {}) end
  end
end

--- A line for the console (the presentation decides where and whether it is printed).
function Frame:say(fmt, ...)
  self:emit('say', { text = select('#', ...) > 0 and string.format(fmt, ...) or fmt })
end

--- The endpoint a provider's client talks to: scheme, host, port and whether it is loopback
--- (never a credential: user info, path and query are dropped). nil for a provider with no
--- URL (local, docker over a socket is reported as unix).
---@return table|nil
function frame.endpoint(client)
  if type(client) ~= 'table' then return nil end
  if type(client.endpoint_url) == 'function' then client = { base_url = client.endpoint_url(client) } end
  local function is_url(v) return type(v) == 'string' and v:match('^%a[%w+.-]*://') ~= nil end
  -- the adapter's own settings: its client, or one table inside it (cfg, settings, ...)
  local function scan(t)
    for _, k in ipairs({ 'base_url', 'api_url', 'url', 'endpoint', 'server_url', 'base' }) do
      if is_url(t[k]) then return t[k] end
    end
    local keys = {}
    for k, v in pairs(t) do if type(k) == 'string' and k:match('url$') and is_url(v) then keys[#keys + 1] = k end end
    table.sort(keys)
    return keys[1] and t[keys[1]] or nil
  end
  local url = scan(client)
  if not url then
    local names = {}
    for k, v in pairs(client) do if type(k) == 'string' and type(v) == 'table' then names[#names + 1] = k end end
    table.sort(names)
    for _, k in ipairs(names) do url = scan(client[k]); if url then break end end
  end
  if not url and type(client.socket) == 'string' then return { scheme = 'unix', host = client.socket, loopback = true } end
  if not url then return nil end
  local scheme, rest = url:match('^(%a[%w+.-]*)://([^/?#]*)')
  if not scheme then return nil end
  rest = rest:gsub('^.*@', '') -- user info never leaves
  local host, port = rest:match('^%[([^%]]+)%]:?(%d*)$')
  if not host then host, port = rest:match('^([^:]*):?(%d*)$') end
  port = tonumber(port) or (scheme == 'https' and 443) or (scheme == 'http' and 80) or nil
  local h = (host or ''):lower()
  local loopback = h == 'localhost' or h == '::1' or h:match('^127%.') ~= nil
  return { scheme = scheme, host = host, port = port, loopback = loopback }
end

--- Connect a provider (Session:connect) and keep its counters: started, allocated,
--- destroyed, live ids, outcomes; the status document and the progress read them.
function Frame:connect(adapter_name, cfg, name)
  local p = self.session:connect(adapter_name, cfg, name)
  p.live = p.live or {}
  p.counts = p.counts or { started = 0, allocated = 0, destroyed = 0, cleanup_failed = 0, passed = 0, failed = 0,
    errors = 0, interrupted = 0 }
  p.endpoint = frame.endpoint(p.client)
  if not self.P[p.name] then self.order[#self.order + 1] = p.name end
  self.P[p.name] = p
  return p
end

--- Seconds since the run opened.
function Frame:elapsed() return (clock.now() - self.t0) / 1e9 end

--- The digest of a dataset: sha256 over the loaded tasks' content hashes (each computed at load
--- from the task's archive or directory), so a resume, a report or a comparison can tell whether
--- two runs ran the same tasks without reading the dataset again.
---@param tasks table[]
function frame.dataset_digest(tasks)
  local parts = {}
  for _, t in ipairs(tasks) do parts[#parts + 1] = tostring(t.id) .. '=' .. tostring(t.sha256) end
  table.sort(parts)
  return crypto.sha256_hex(table.concat(parts, '\n'))
end

--- The fields of a run's identity that --resume restores (the rest are recorded for reports
--- and comparisons). Flag names as `cseng run` spells them.
frame.RESTORED = {
  { key = 'solver', flag = '--solver' }, { key = 'provider', flag = '--provider' }, { key = 'mode', flag = '--mode' },
  { key = 'dataset', flag = '--dataset' }, { key = 'task_index', flag = '--task-index' },
  { key = 'task_limit', flag = '--task-limit' }, { key = 'tasks', flag = '--tasks' },
  { key = 'timeout_seconds', flag = '--timeout-seconds' }, { key = 'solve_timeout_seconds', flag = '--solve-timeout-seconds' },
  { key = 'verify_timeout_seconds', flag = '--verify-timeout-seconds' }, { key = 'model', flag = '--model' },
  { key = 'stop_after_passes', flag = '--stop-after-passes' }, { key = 'verifier_user', flag = '--verifier-user' },
  { key = 'solve_command_file', flag = '--solve-command-file' }, { key = 'allow_network', flag = '--allow-network' },
  { key = 'max_turns', flag = '--max-turns' }, { key = 'registry', flag = '--registry' },
  { key = 'primary_metric', flag = '--primary-metric' }, { key = 'pricing', flag = '--pricing' },
}

--- The run's identity: one record, written once in run_started. x: kind-specific fields
--- (providers, solver name, dataset digest, the selected task ids).
---@return table
function frame.identity(opts, x)
  x = x or {}
  local id = {
    kind = x.kind, plan = opts.name, plan_file = opts.plan_file, solver = x.solver, model = opts.model,
    providers = x.providers, provider = x.provider, mode = opts.mode, dataset = opts.dataset,
    dataset_sha256 = x.dataset_sha256, label = opts.label,
    registry = x.registry, -- a dataset by name: the registry, name, version, content hash and each task's pin
    selection = x.selection, endpoints = x.endpoints,
    options = {},
  }
  for _, r in ipairs(frame.RESTORED) do
    if id[r.key] == nil and r.key ~= 'solver' and r.key ~= 'provider' then id.options[r.key] = opts[r.key] end
  end
  id.options.dataset, id.options.mode, id.options.model = nil, nil, nil
  id.options.concurrency, id.options.retry_errors = opts.concurrency, opts.retry_errors
  return id
end

local function same(a, b)
  if type(a) == 'table' and type(b) == 'table' then return util.json_sorted(a) == util.json_sorted(b) end
  if type(a) == 'number' and type(b) == 'number' then return a == b end
  return tostring(a) == tostring(b)
end

--- --resume: the options restored from the prior run's identity (and its run_started for logs
--- written before the identity record existed). A flag given now that contradicts the run is
--- refused in one line; one that agrees, or one the run did not record, is kept.
---@param opts table the merged options of this invocation (opts.flags_given: the flags given)
---@param started table the prior run_started record
---@return table opts
function frame.restore(opts, started)
  local id = started.identity or {}
  local function recorded(key)
    if key == 'solver' or key == 'provider' or key == 'mode' or key == 'dataset' or key == 'model' then
      local v = id[key]
      if v == nil then v = started[key] end
      return v
    end
    local o = id.options or {}
    if o[key] ~= nil then return o[key] end
    if type(started.options) == 'table' then return started.options[key] end
    return nil
  end
  local given = opts.flags_given or {}
  local out = util.copy(opts)
  for _, r in ipairs(frame.RESTORED) do
    local was = recorded(r.key)
    if was ~= nil then
      if given[r.key] ~= nil and not same(given[r.key], was) then
        errors.raise(errors.EUSAGE or 'EUSAGE', string.format(
          '--resume: %s %s contradicts the run being resumed (%s %s); resume restores the run as it was: drop the flag, or start a new run',
          r.flag, type(given[r.key]) == 'table' and table.concat(given[r.key], ',') or tostring(given[r.key]),
          r.flag, type(was) == 'table' and table.concat(was, ',') or tostring(was)))
      end
      out[r.key] = was
    end
  end
  if out.pricing then require('cseng.evals.rates').check_resume(out.pricing, started.rates) end
  return out
end

--- The run saw a SIGINT/SIGTERM: remembered, and the observers told once ('interrupted',
--- {in_flight = the trials in flight, which now stop and destroy their sandboxes; signal}).
function Frame:interrupt_seen()
  self.interrupted = true
  if self.interrupt_told then return end
  self.interrupt_told = true
  self:emit('interrupted', { in_flight = self.guarded, signal = task.signal() })
end

--- Whether the run has halted, and why: an interrupt, a stop rule (Frame:stop), or the
--- session stopped allocating (auth, a failed cleanup, an unwritable log).
---@return string|nil reason
function Frame:halted()
  if self.interrupted or task.interrupted() > 0 then self:interrupt_seen(); return 'interrupted' end
  if self.stopped then return self.stopped.reason end
  if self.session:halted() then return 'session' end
  return nil
end

--- Stop the run (the first reason wins): no trial starts after this. The message is redacted
--- (it reaches stderr, the status document and the log).
function Frame:stop(reason, message, code, detail)
  if self.stopped then return end
  message = secrets.redact(message)
  self.stopped = { reason = reason, message = message, code = code, detail = detail }
  self.state.status, self.state.stop_reason, self.state.last_error = 'stopping', reason, message
  self:emit('stopping', self.stopped)
end

--- Why the run stopped early (nil if it did not): the stop rule's message, else the session's.
function Frame:stop_message()
  if self.stopped then return self.stopped.message end
  return self.session:stop_reason()
end

--- Watch a finished trial for the rules that concern every kind: an authentication failure
--- stops allocating; K creates in a row failing with the same code (a dead endpoint, a wrong
--- URL, an exhausted quota) stop the run in one line instead of erroring every trial.
---@param p table the provider
---@param rec table the trial record (error_code, error_stage, outcome/ok)
---@param create_stages table<string,boolean> the stages that mean "the create failed"
function Frame:observe(p, rec, create_stages)
  if rec.error_code and errors.is_auth(rec.error_code) then
    self.session:stop_auth({ code = rec.error_code, message = rec.error })
  end
  local limit = math.tointeger(self.opts.stop_after_create_failures) or frame.DEAD_ENDPOINT_AFTER
  if limit <= 0 or rec.interrupted then return end
  local c = self.create_fails[p.name] or { n = 0 }
  self.create_fails[p.name] = c
  if rec.error_code and create_stages[rec.error_stage or ''] and not rec.timed_out then
    if c.code == rec.error_code then c.n = c.n + 1 else c.code, c.n = rec.error_code, 1 end
    if c.n >= limit then
      self:stop('dead_endpoint', string.format('%d creates in a row on %s failed with %s (last: %s); stopping: ' ..
        'is the endpoint up and its URL right%s? (--stop-after-create-failures N changes the rule)', c.n, p.name,
        rec.error_code, util.tail(tostring(rec.error), 300),
        p.endpoint and p.endpoint.host and (' (' .. p.endpoint.scheme .. '://' .. p.endpoint.host ..
          (p.endpoint.port and (':' .. p.endpoint.port) or '') .. ')') or ''), rec.error_code)
    end
  elseif rec.error_code == nil then
    c.code, c.n = nil, 0
  end
end

--- Map a trial's failure into its record: error, error_stage, a registered error_code (a
--- raised string is EINTERNAL, never nil), timed_out, interrupted.
function frame.fail(rec, err, state, timeout)
  local msg, code = errors.describe(err)
  rec.error_stage = rec.error_stage or (type(err) == 'table' and err.stage) or state.stage
  if state.timed_out then
    rec.error, rec.error_code, rec.timed_out = string.format('trial timed out after %s s (in %s)', timeout,
      tostring(rec.error_stage)), errors.ETIMEDOUT, true
  elseif code == errors.ECANCELED then
    rec.error, rec.error_code, rec.interrupted = 'interrupted', errors.ECANCELED, true
    state.interrupted = true
  else
    rec.error, rec.error_code = msg, code -- errors.describe always gives a registered code
  end
end

-- Join a task; a SIGINT cancels our wait too, so wait again until the task has finished its
-- cleanup (on_interrupt() is called when that first happens). Returns the task's ok, err and
-- whether an interrupt arrived meanwhile.
local function join(t, on_interrupt)
  local interrupted = false
  while true do
    local jok, ok, err = pcall(t.join, t)
    if jok then return ok, err, interrupted end
    if not interrupted and on_interrupt then on_interrupt() end
    interrupted = true
  end
end
frame.join = join

--- Run one trial's body under its watchdog (opts.timeout seconds): body(rec, state) runs in a
--- child task, so the watchdog cancels the body and never the caller (whose cleanup, retry
--- and record then run uncancelled). Never raises; a failure is mapped into rec (frame.fail).
--- state.stage: the stage the body is in (it sets it); returns state (timed_out, interrupted).
---@return table state
function Frame:guard(rec, body, o)
  o = o or {}
  local state = { stage = o.stage }
  self.guarded = self.guarded + 1
  local child = task.spawn(function() return body(rec, state) end)
  local watchdog
  if o.timeout then
    watchdog = task.spawn(function()
      task.sleep(o.timeout)
      state.timed_out = true
      child:cancel()
    end)
  end
  local ok, err, interrupted = join(child, function() self:interrupt_seen() end)
  self.guarded = self.guarded - 1
  if watchdog then watchdog:cancel() end
  if interrupted then self:interrupt_seen() end
  if not ok then frame.fail(rec, err, state, o.timeout) end
  if interrupted and not rec.error then
    rec.interrupted, state.interrupted = true, true
  end
  return state
end

--- One trial of the run's kind (the second and last hop between the worker loop and the kind's
--- body): a new record (K.record), the body under its watchdog (Frame:guard runs K.trial in a
--- child task), what follows on every path (K.settle), then K.finished(F, item, rec,
--- interrupted). With --retry-errors N (opts.retry_errors) and a kind that allows it
--- (K.retries), an `error` outcome (an infrastructure failure, a timed-out trial included, never
--- a `failed` verdict) runs again up to N more times, after opts.retry_delay_seconds (default 1):
--- every try but the last is a `trial_try` event; the last is the trial (`try` numbers it,
--- `tries` counts them; `attempt` is the sample's number among --attempts K, the same on every
--- try). No retry after an interrupt or a halt. Returns what K.finished returns.
function Frame:trial(item)
  local K = self.K
  if K.skip and K.skip(self, item) then return nil end
  if K.start then K.start(self, item) end
  local max = K.retries and (math.tointeger(self.opts.retry_errors) or 0) or 0
  local try = 0
  while true do
    try = try + 1
    local rec = K.record(self, item)
    local t0 = clock.now()
    local state = self:guard(rec, function(r, st) return K.trial(self, item, r, st) end,
      { timeout = K.timeout and K.timeout(self, item) or self.opts.timeout_seconds, stage = K.stage })
    if K.settle then K.settle(self, item, rec, state, t0) end
    if K.retries then rec.try = try end
    local again = K.retries and not state.interrupted and rec.outcome == 'error' and try <= max and not self:halted()
    if not again then
      if try > 1 then rec.tries = try end
      return K.finished(self, item, rec, state.interrupted)
    end
    self.counts.retried = self.counts.retried + 1
    self.writer:event('trial_try', rec)
    self:emit('try', { rec = rec, of = max + 1 })
    local delay = tonumber(self.opts.retry_delay_seconds) or 1
    if delay > 0 and not pcall(task.sleep, delay) then
      rec.tries = try
      self:interrupt_seen()
      return K.finished(self, item, rec, true)
    end
  end
end

--- The worker loop: each(item) for every item, at most `concurrency` at once, none started
--- once the run halts or o.more() says no. Waits for every worker (an interrupt meanwhile is
--- remembered, and the workers' cleanups still run). A worker that fails inside cseng stops
--- the run ('internal').
---@param items table[]
---@param o {concurrency:integer, each:function, more:function|nil}
function Frame:pool(items, o)
  local sem = task.semaphore(math.max(1, math.tointeger(o.concurrency) or 1))
  local workers = {}
  for _, item in ipairs(items) do
    if self:halted() or (o.more and not o.more()) then break end
    local aok = pcall(sem.acquire, sem)
    if not aok then self:interrupt_seen(); break end
    if self:halted() or (o.more and not o.more(item)) then sem:release(); break end
    workers[#workers + 1] = task.spawn(function()
      local ok, err = pcall(o.each, item)
      sem:release()
      if not ok then error(err, 0) end
    end)
  end
  self:join_all(workers)
end

--- Join tasks the run spawned; one that failed inside cseng (not a cancellation) stops the run.
function Frame:join_all(tasks)
  for _, t in ipairs(tasks) do
    local ok, err, interrupted = join(t, function() self:interrupt_seen() end)
    if interrupted then self:interrupt_seen() end
    if not ok and not errors.is_cancel(err) then
      self:stop('internal', 'a trial failed inside cseng: ' .. errors.line(err), errors.EINTERNAL)
    end
  end
end

--- A resumed run continues: its identity is the one its run_started recorded.
function Frame:resumed(identity)
  self.identity = identity
  self.state.status, self.state.phase = 'running', 'trials'
end

--- Write run_started: the kind's fields plus the identity record and what every kind shares.
function Frame:started(fields, identity)
  fields = util.copy(fields or {})
  fields.identity = identity
  fields.argv = fields.argv or self.opts.argv
  fields.host = fields.host or sys.hostname()
  fields.pid = fields.pid or sys.pid()
  fields.label = fields.label or self.opts.label
  -- each provider's sandbox rates and where they came from (the plan, --pricing, the adapter)
  local rl
  for name, p in pairs(self.P) do
    local r = p.rates or {}
    if p.rates or (p.rates_source and p.rates_source.note) then
      rl = rl or {}
      rl[name] = { vcpu_s = r.vcpu_s, gib_s = r.gib_s, per_create = r.per_create, source = p.rates_source }
    end
  end
  fields.rates = fields.rates or rl
  self.identity = identity
  self.writer:event('run_started', fields, true)
  self.state.status, self.state.phase = 'running', 'trials'
  self:emit('started', { fields = fields })
end

--- The exit status, one rule for every run kind: 128+N after signal N (130 for Ctrl-C); 1 when
--- the run stopped early (a stop rule, auth, a failed cleanup, an unwritable log) or every
--- trial errored, or any errored under --fail-on-error; 2 is the command line's (usage); else 0.
---@param F table
---@param n integer trials recorded
---@param n_errors integer of which outcome error
function frame.exit_status(F, n, n_errors)
  if F.interrupted or task.interrupted() > 0 then
    return 128 + (math.tointeger(task.signal()) or 2)
  end
  if F.stopped or F.session:halted() then return 1 end
  if n > 0 and n_errors == n then return 1 end
  if F.opts.fail_on_error and n_errors > 0 then return 1 end
  return 0
end

--- Sweep, once, the sandboxes of this run the log never learned of (a create whose answer was
--- lost and which the provider finished later): by label, on every provider. After an
--- interrupt too: a lost create must not outlive the run (a second Ctrl-C exits at once).
---@return integer reclaimed
function Frame:reclaim()
  if self.reclaimed then return self.reclaimed end
  -- with credentials refused, a list is refused too: `cseng cleanup` sweeps once they are fixed
  if self.session.auth_failed then self.reclaimed = 0; return 0 end
  local rok, n = pcall(self.session.reconcile, self.session)
  self.reclaimed = rok and n or 0
  return self.reclaimed
end

--- The end, the same for every kind: the lost-create sweep (Frame:reclaim), run_finished
--- (status, stop reason, what was reclaimed, plus `fields`), and the observers told
--- ('finished', with `extra`). Returns the status word and the number reclaimed.
---@return string status, integer reclaimed
function Frame:close(fields, extra)
  fields = util.copy(fields or {})
  local reclaimed = self:reclaim()
  local interrupted = self.interrupted or task.interrupted() > 0
  if interrupted then self:interrupt_seen() end
  local status = interrupted and 'interrupted' or (self.stopped and 'stopped')
    or (self.session.auth_failed and 'stopped') or (self.session.cleanup_failed and 'cleanup_failed') or 'finished'
  self.state.status, self.state.phase = status, 'done'
  fields.status = status
  fields.stop_reason = fields.stop_reason or (self.stopped and self.stopped.reason) or self.session.auth_failed
  fields.stop_message = fields.stop_message or (self.stopped and self.stopped.message) or nil
  fields.stop_code = fields.stop_code or (self.stopped and self.stopped.code) or nil
  fields.stop_detail = fields.stop_detail or (self.stopped and self.stopped.detail) or nil
  fields.cleanup_error = fields.cleanup_error or self.session.cleanup_failed
  fields.reclaimed = reclaimed > 0 and reclaimed or nil
  fields.elapsed_s = fields.elapsed_s or self:elapsed()
  pcall(admission.finish, self.session) -- the admission counters (a `total` event per key)
  local wok, rec = pcall(self.writer.event, self.writer, 'run_finished', fields, true)
  self.finished = wok and rec or fields
  local ev = util.copy(extra or {})
  ev.status, ev.reclaimed, ev.fields = status, reclaimed, fields
  self:emit('finished', ev)
  return status, reclaimed
end

-- ---- the driver --------------------------------------------------------------------------

--- A run kind by name: lua/cseng/run/kinds/<name>.lua (a table; frame.run documents its fields).
---@param name string|table
---@return table
function frame.kind(name)
  if type(name) == 'table' then return name end
  if type(name) ~= 'string' or not name:match('^[%w_]+$') then
    errors.raise(errors.EPLAN, 'not a run kind: ' .. tostring(name))
  end
  local ok, K = pcall(require, 'cseng.run.kinds.' .. name)
  if not ok then
    if tostring(K):find("module 'cseng.run.kinds." .. name .. "' not found", 1, true) then
      errors.raise(errors.EPLAN, "unknown run kind '" .. name .. "' (lua/cseng/run/kinds/)")
    end
    error(K, 0)
  end
  return K
end

--- Run a kind with its options: the whole sequence (the header of this file). Returns the
--- exit status and what the kind's finish returns (its info: run_id, jsonl, ...).
---@param kind string|table a kind's name (lua/cseng/run/kinds/<name>.lua) or the kind itself
---@param opts table
---@return integer status, table|nil info
function frame.run(kind, opts)
  local K = frame.kind(kind)
  local o, so, k = K.open(opts)
  if o == nil then return so, k end -- the kind had nothing to run (a shard past the providers): status, info
  local F = frame.open { kind = so and so.resumed and 'resume' or K.name, opts = o, session = so }
  F.K, F.k = K, k or {}
  local _ <close> = setmetatable({}, { __close = function() if K.close then K.close(F) end end })
  local items = K.begin(F)
  local ok, err = pcall(function()
    if K.schedule then return K.schedule(F, items) end
    F:pool(items, { concurrency = o.concurrency, more = K.more and function(item) return K.more(F, item) end,
      each = function(item) F:trial(item) end })
  end)
  if not ok then
    if errors.is_cancel(err) then F:interrupt_seen()
    else F:stop('internal', 'the run failed inside cseng: ' .. errors.describe(err), errors.EINTERNAL) end
  end
  F:reclaim() -- creates whose answer was lost, by label, before the kind's end reads the log
  return K.finish(F)
end

return frame
