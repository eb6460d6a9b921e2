--- The session: what every run kind (tasks, matrix, startup, prewarm, cleanup, resume) goes
--- through. It owns the run id, the output paths, getenv (--env-file first, then the process
--- environment), the provider clients, the event writer, and the sandbox ledger:
---
---   local s = session.open { kind = 'tasks', opts = o, id_parts = { o.name, o.provider, o.mode } }
---   local p = s:connect(o.provider, o.provider_config)
---   do
---     local sb <close> = s:sandbox(spec, { task_id = t.id })   -- created, allocation fsynced
---     p.adapter.exec(p.client, sb.sb, 'true', {})
---   end                                                        -- destroyed (with retries), recorded
---
--- The ledger's rules (docs/providers/README.md): the allocation record is appended and fsynced
--- the moment create returns an id, before anything else touches the sandbox; close destroys
--- with retries under one back-off policy (opts.cleanup_backoff, default {1, 2} seconds between
--- three attempts; a Retry-After the adapter's error carries is honoured, up to 60 s) and records
--- `destroyed` or `cleanup_failed`; after a failed cleanup the session allocates nothing more
--- (s:sandbox raises ECLEANUP, s.cleanup_failed says why). An adapter that declares
--- `max_concurrency` has its creates queued by the session before the ledger's timing starts.
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')
local records = require('cseng.run.records')
local util = require('cseng.lib.util')
local jsonl = require('cseng.lib.jsonl')
local contract = require('providers.shared.contract')
local rates = require('cseng.evals.rates')


local session = {}

session.BACKOFF = { 1, 2 }   -- seconds between destroy attempts (three attempts)
session.RETRY_AFTER_MAX = 60 -- a provider's Retry-After is honoured up to this
session.MAX_ID_BYTES = 512             -- a sandbox id a provider returns, at most
session.MAX_FIELD_BYTES = 64 * 1024    -- any other string of the sandbox a create returns

---@class Provider
---@field name string the name records use (the arena may rename an adapter, e.g. lizard-eu)
---@field adapter_name string lua/providers/<adapter_name>.lua
---@field adapter table the adapter module
---@field client any what adapter.connect returned

---@class Session
---@field id string the run id
---@field kind string tasks | startup | prewarm | cleanup | resume
---@field opts table the run's options
---@field jsonl string the event log
---@field json string the summary path (tasks runs)
---@field writer table the event writer (results.open)
---@field getenv fun(name:string):string|nil
---@field launcher string cseng@host
---@field stamp string the UTC stamp in the run id
---@field provider Provider|nil the first provider connected
---@field cleanup_failed string|nil why the session stopped allocating
---@field pricing table|nil computesdk's pricing.json as cseng.evals.rates read it (--pricing)
local Session = {}
Session.__index = Session
session.Session = Session

--- Load a module of a folder of plug-ins by name (lua/<folder>/<name>.lua, '-' read as '_'):
--- only a missing module is "unknown <kind>" (one line listing the valid names, those exporting
--- `fn`); a module whose own require fails is reported with that error's first line.
---@return table
function session.plugin(folder, kind, name, fn, hint)
  -- a name is a file directly in the folder: a log's or shard's adapter name ("shared.adapter",
  -- "../x") never reaches require, where a dot is a directory
  if type(name) ~= 'string' or not name:match('^[%w][%w_-]*$') then
    local flags = require('cseng.lib.flags')
    error(flags.unknown(kind, tostring(name), flags.modules(folder, fn, folder == 'providers')) .. (hint or ''), 0)
  end
  local mod_name = folder .. '.' .. tostring(name):gsub('%-', '_')
  local ok, mod = pcall(require, mod_name)
  if not ok then
    local flags = require('cseng.lib.flags')
    if tostring(mod):find("module '" .. mod_name .. "' not found", 1, true) then
      error(flags.unknown(kind, name, flags.modules(folder, fn, folder == 'providers')) .. (hint or ''), 0)
    end
    -- the first line says what failed (the rest is require's search path)
    error(string.format("%s '%s' failed to load: %s", kind, name, (errors.line(mod):gsub(':?\n.*$', ''))), 0)
  end
  return mod
end

--- Load a provider adapter by name (lua/providers/<name>.lua): session.plugin.
---@param name string
---@return table
function session.adapter(name)
  local mod = session.plugin('providers', 'provider', name, 'create', ' (see cseng providers)')
  mod.name = mod.name or name
  return mod
end

--- getenv over an --env-file's table, then the process environment.
---@param env table|nil
---@return fun(name:string):string|nil
function session.getenv(env)
  return function(name)
    local v = env and env[name]
    if v ~= nil then return v end
    return os.getenv(name)
  end
end

--- A run id: the parts, the UTC stamp, 4 random hex digits ("cold-gold-local-cold-20261001-120000-a1b2").
---@param parts string[]
---@param stamp string
function session.run_id(parts, stamp)
  local p = {}
  for _, v in ipairs(parts) do p[#p + 1] = tostring(v) end
  p[#p + 1] = stamp
  p[#p + 1] = crypto.hex(crypto.random_bytes(2))
  return table.concat(p, '-')
end

--- The log and summary paths for --output (a directory, default results/, or a .jsonl or .json
--- path: the other one sits beside it) and a file stem.
---@return string jsonl, string json
function session.paths(output, stem)
  if output and output:match('%.json$') then return (output:gsub('%.json$', '.jsonl')), output end
  if output and output:match('%.jsonl$') then return output, (output:gsub('%.jsonl$', '.json')) end
  local dir = output or 'results'
  return dir .. '/' .. stem .. '.jsonl', dir .. '/' .. stem .. '.json'
end

--- A writer that records nothing (a session with no log: o.no_log).
session.NO_LOG = setmetatable({}, { __index = function() return function() return true end end })

--- Open a session. o: kind, opts (the run's options: env, output, cleanup_backoff), and either
--- run_id + jsonl (continuing a log: resume, cleanup), id_parts (a new run id) with an optional
--- stem (the file name, default the run id; or a function of the UTC stamp), or no_log (a
--- session that records nothing: a cleanup by label); wrap_writer(writer) -> writer.
---@param o table
---@return Session
function session.open(o)
  local opts = o.opts or {}
  local s = setmetatable({
    kind = o.kind, opts = opts, getenv = session.getenv(opts.env), stamp = os.date('!%Y%m%d-%H%M%S'),
    launcher = 'cseng@' .. (sys.hostname() or 'localhost'), providers = {},
    backoff = opts.cleanup_backoff or session.BACKOFF,
  }, Session)
  -- read before the log exists: a bad pricing file stops the run with nothing written
  if opts.pricing then s.pricing = rates.load_pricing(opts.pricing) end
  if o.no_log then -- a label sweep (cseng cleanup --provider): nothing to record in
    s.id = 'cleanup'
    s.writer = session.NO_LOG
    return s
  end
  if o.jsonl then
    s.id, s.jsonl = o.run_id, o.jsonl
    s.json = o.json or (o.jsonl:gsub('%.jsonl$', '') .. '.json')
  else
    s.id = o.run_id or session.run_id(o.id_parts or { 'run' }, s.stamp)
    local stem = o.stem or s.id
    if type(stem) == 'function' then stem = stem(s.stamp) end
    s.jsonl, s.json = session.paths(o.output or opts.output, stem)
  end
  local writer = results.open(s.jsonl, s.id, { shared = o.kind == 'cleanup' })
  writer.on_failure = function(msg, code) s.log_failed, s.log_failed_code = s.log_failed or msg, code end
  s.writer = o.wrap_writer and o.wrap_writer(writer) or writer
  return s
end

--- Connect a provider: load the adapter, call its connect with the config plus getenv and the
--- run id. A connect failure (a missing credential) is raised as its one-line message. Its
--- rates are resolved then (the plan's, --pricing's, the adapter's: cseng.evals.rates).
---@param adapter_name string
---@param cfg table|nil
---@param name string|nil the name records use (default adapter_name)
---@return Provider
function Session:connect(adapter_name, cfg, name)
  local adapter = session.adapter(adapter_name)
  local ok, client = pcall(adapter.connect, util.merge(cfg, { getenv = self.getenv, run_id = self.id }))
  if not ok then
    if errors.is_cancel(client) then error(client, 0) end
    error(errors.line(client), 0)
  end
  local p = records.connection { name = name or adapter.name, adapter_name = adapter_name, adapter = adapter, client = client }
  p.rates, p.rates_source = rates.resolve { name = p.name, adapter_name = adapter_name, adapter_rates = adapter.rates,
    plan_rates = self.opts.rates, pricing = self.pricing }
  local limit = math.tointeger(adapter.max_concurrency)
  if limit and limit > 0 then p.queue = task.semaphore(limit) end
  self.providers[p.name] = p
  self.provider = self.provider or p
  return p
end

-- ---- the sandbox ledger -------------------------------------------------------------------

---@class Lease
---@field sb table the adapter's sandbox ({id=, ...})
---@field id string
---@field provider Provider
---@field times table clock.now() marks: queued, create_start, create_end, recorded, destroy_start, destroy_end
--- (create_end and destroy_end are clock.answered(): when the provider's last answer arrived)
---@field result table|nil after close: {ok, attempts, error, code}
local Lease = {}
Lease.__index = Lease
Lease.__close = function(self) self:close() end

-- The fsynced allocation record of a new lease; when it cannot be written the sandbox must not
-- outlive the call: the lease is closed and the failure raised.
local function record_allocation(self, lease, p, sb, labels, extra)
  local wok, werr = pcall(self.writer.allocated, self.writer, p.name, sb, labels, extra)
  if wok and werr then return end
  lease:close()
  if not wok then error(errors.from(werr), 0) end
  self:check_allocating()
  errors.raise(errors.ELOG, 'the allocation record could not be written')
end

--- Create a sandbox and record it. extra: fields of the allocation (and destroy) records, e.g.
--- {task_id=}. o: provider (default the session's first), times (a table the ledger fills with
--- its timing points, also when create fails), destroyed (fields of the destroy record, default
--- extra). Raises ECLEANUP after a failed cleanup, else the adapter's failure (default ECREATE).
---@param spec table
---@param extra table|nil
---@param o table|nil
---@return Lease
function Session:sandbox(spec, extra, o)
  o = o or {}
  local p = o.provider or self.provider
  local times = o.times or {}
  self:check_allocating()
  -- an adapter's max_concurrency: wait for a place before the clock starts
  if p.queue then
    times.queued = clock.now()
    p.queue:acquire()
    if self:halted() then
      p.queue:release()
      self:check_allocating()
    end
  end
  -- every create carries a label of its own (cseng.create) and the session's (cseng.session:
  -- shards of one run share cseng.run), so a create whose answer is lost can be found
  self.nonce = self.nonce or crypto.hex(crypto.random_bytes(8))
  spec = util.merge(spec, { labels = util.merge(spec.labels, {
    ['cseng.create'] = crypto.hex(crypto.random_bytes(8)), ['cseng.session'] = self.nonce }) })
  -- the intent first, fsynced: killed before the answer, the log still names the labels to sweep
  if not self.writer:intent(p.name, spec.labels, { adapter = p.adapter_name, task_id = extra and extra.task_id }) then
    if p.queue then p.queue:release() end
    self:check_allocating()
    errors.raise(errors.ELOG, 'not allocating: the intent record could not be written')
  end
  -- admission (lua/cseng/run/admission.lua): pcall(p.adapter.create), paced and retried on 429
  local cok, sb, err, code = require('cseng.run.admission').create(self, p, spec, times)
  if not cok or not sb then
    if p.queue then p.queue:release() end
    local e = not cok and errors.from(sb, errors.ECREATE)
      or errors.returned(err, code, { default_code = errors.ECREATE, prefix = o.prefix })
    if errors.is_auth(e) then self:stop_auth(e) end
    if session.maybe_created(e.code) then pcall(self.reconcile_create, self, p, spec) end
    error(e, 0)
  end
  local bad = session.oversized(p, sb)
  if bad then -- not recorded (it would bloat every record, or fail every later check): destroyed at
    -- once through the adapter (the id create just answered, not one read back), and refused
    if p.queue then p.queue:release() end
    self:destroy(p, sb, { answered = true })
    errors.raise(errors.EBADRESPONSE, bad)
  end
  self:know(p, sb.id)
  local lease = setmetatable({ session = self, provider = p, sb = sb, id = sb.id, times = times,
    destroyed = o.destroyed or extra }, Lease)
  record_allocation(self, lease, p, sb, spec.labels, extra)
  times.recorded = clock.now()
  return lease
end

--- Record a sandbox another call than create made (a fork's children): the same checks and the
--- same fsynced allocation record as Session:sandbox, the moment its id is known; the lease
--- destroys and records it like any other. The caller wrote the intent with `labels` before the
--- call that made it (so a lost answer is swept by label).
---@param p Provider
---@param sb table what the adapter returned for it
---@param labels table the labels it was made with
---@param extra table|nil fields of the allocation (and destroy) records
---@return Lease
function Session:derived(p, sb, labels, extra)
  local bad = session.oversized(p, sb)
  if bad then
    self:destroy(p, sb, { answered = true })
    errors.raise(errors.EBADRESPONSE, bad)
  end
  self:know(p, sb.id)
  local lease = setmetatable({ session = self, provider = p, sb = sb, id = sb.id, times = {}, destroyed = extra,
    adopted = true }, Lease)
  record_allocation(self, lease, p, sb, labels, extra)
  return lease
end

--- What is wrong with the sandbox id of a log's record (allocated, destroyed, cleanup_failed)
--- for its adapter: nil when it is one of the adapter's ids (contract.valid_id), else one line,
--- `sandbox_id "<id, JSON-quoted>" <why>`.
---@param rec table
---@param adapter table|nil the adapter (nil: the generic format)
---@return string|nil
function session.id_problem(rec, adapter)
  local ok, why = contract.valid_id(adapter or {}, rec.sandbox_id)
  if ok then return nil end
  local id = rec.sandbox_id
  return string.format('sandbox_id %s %s', type(id) == 'string' and jsonl.encode(id) or tostring(id), why)
end

--- Why a sandbox a provider returned is refused (nil: it is not): an id that is not a short
--- string or number, or a string field over session.MAX_FIELD_BYTES; the message names the
--- provider and the field.
---@param p Provider
---@param sb table
---@return string|nil
function session.oversized(p, sb)
  local id = sb.id
  if type(id) ~= 'string' and math.type(id) ~= 'integer' then
    return string.format('%s: create answered a sandbox without an id (sandbox.id is %s)', p.name, type(id))
  end
  if #tostring(id) > session.MAX_ID_BYTES then
    return string.format('%s: create answered a sandbox id of %d bytes (sandbox.id: at most %d)', p.name, #tostring(id),
      session.MAX_ID_BYTES)
  end
  local ok, why = contract.valid_id(p.adapter, id)
  if not ok then -- never recorded: a later cleanup or --resume would refuse it
    return string.format('%s: create answered sandbox id %s, which %s', p.name, jsonl.encode(tostring(id)), why)
  end
  for k, v in pairs(sb) do
    if type(v) == 'string' and #v > session.MAX_FIELD_BYTES then
      return string.format('%s: create answered a sandbox whose %s is %d bytes (at most %d)', p.name, tostring(k), #v,
        session.MAX_FIELD_BYTES)
    end
  end
  return nil
end

--- Whether a create that failed with this code may have created a sandbox all the same (its
--- answer was lost: a reset, a timeout, a malformed or id-less body, a 5xx, a cancellation):
--- everything but a refusal (4xx, auth, a bad configuration).
---@param code string|nil
session.maybe_created = errors.maybe_created

-- The ids this session has allocated or adopted, per provider name.
function Session:know(p, id)
  self.known = self.known or {}
  self.known[p.name] = self.known[p.name] or {}
  self.known[p.name][tostring(id)] = true
end

-- Destroy and record one sandbox the log did not know (found by label). An id that is not one of
-- the adapter's (a provider's answer is input too) is neither recorded nor destroyed: false, why.
function Session:reclaim(p, sb, reason)
  local idok, why = contract.valid_id(p.adapter, sb.id)
  if not idok then return false, string.format('listed sandbox id %s %s: not destroyed', jsonl.encode(tostring(sb.id)), why) end
  self:know(p, sb.id)
  pcall(self.writer.allocated, self.writer, p.name, { id = sb.id }, sb.labels, { reason = reason })
  return self:adopt({ id = sb.id, labels = sb.labels }, { reason = reason }, p):close().ok
end

--- After a create that failed without an id: list the provider's sandboxes by this create's own
--- label (cseng.create) and destroy, recording them, those the log does not know. A provider
--- that cannot list by label gets a `lost_create` record instead (`cseng cleanup` says so).
---@return integer reclaimed
function Session:reconcile_create(p, spec)
  local labels = spec.labels or {}
  if not p.adapter.list or p.adapter.list_by_label == false then
    self.writer:event('lost_create', { provider = p.name, labels = labels, listable = false }, true)
    return 0
  end
  local found = p.adapter.list(p.client, { labels = { ['cseng.create'] = labels['cseng.create'] } })
  local n = 0
  -- every one carrying the label: a POST curl sent again on a fresh connection made a twin
  for _, sb in ipairs(type(found) == 'table' and found or {}) do
    local l = sb.labels or {}
    if l['cseng.create'] == labels['cseng.create'] and not self:knows(p, sb) then
      if self:reclaim(p, sb, 'lost_create') then n = n + 1 end
    end
  end
  if n == 0 then self.writer:event('lost_create', { provider = p.name, labels = labels, listable = true }, true) end
  return n
end

--- At the end of a run (nothing of this session in flight): list each provider's sandboxes by
--- the labels (default: this run's cseng.run and this session's cseng.session, so another shard
--- of the run is left alone; `cseng cleanup RUN.jsonl` passes the run's alone) and destroy,
--- recording them, those this session never learned of (a create whose answer was lost and
--- which the provider finished later; several may carry one cseng.create label). Returns how
--- many, and the failures ({provider, message, refused}: a list that failed, or a listed sandbox
--- whose id is not one of the adapter's, refused). only: the providers to list (default all).
---@param want table|nil labels every reclaimed sandbox must carry
---@param only Provider[]|nil
---@return integer reclaimed, table[] failures
function Session:reconcile(want, only)
  local n, failures = 0, {}
  if not want and not self.nonce then return 0, failures end -- this session created nothing
  want = want or { ['cseng.run'] = self.id, ['cseng.session'] = self.nonce }
  local list = only
  if not list then
    list = {}
    for _, p in pairs(self.providers) do list[#list + 1] = p end
  end
  for _, p in ipairs(list) do
    if p.adapter.list and p.adapter.list_by_label ~= false then
      local ok, found, lerr = pcall(p.adapter.list, p.client, { labels = want })
      if not ok or type(found) ~= 'table' then
        failures[#failures + 1] = { provider = p.name, message = tostring(ok and lerr or found) }
      end
      for _, sb in ipairs(ok and type(found) == 'table' and found or {}) do
        local l = sb.labels or {}
        local match = true
        for k, v in pairs(want) do if l[k] ~= v then match = false end end
        if match and not self:knows(p, sb) then
          local done, why = self:reclaim(p, sb, 'reconciled')
          if done then n = n + 1
          elseif why then failures[#failures + 1] = { provider = p.name, message = why, refused = true } end
        end
      end
    end
  end
  return n, failures
end

-- Whether this session allocated or adopted sb already; an id over the bound counts as known
-- (it is never recorded, and its destroy was tried when create returned it).
function Session:knows(p, sb)
  if #tostring(sb.id) > session.MAX_ID_BYTES then return true end
  return self.known and self.known[p.name] and self.known[p.name][tostring(sb.id)] or false
end

--- Whether the session has stopped allocating (a failed cleanup, an authentication failure).
function Session:halted() return self.cleanup_failed ~= nil or self.auth_failed ~= nil or self.log_failed ~= nil end

--- Why the session stopped allocating (nil if it has not).
function Session:stop_reason() return self.auth_failed or self.cleanup_failed or self.log_failed end

--- Raise ECLEANUP / the auth error when the session has stopped allocating.
function Session:check_allocating()
  if self.auth_failed then errors.raise(self.auth_code or errors.ECONFIG, 'not allocating: ' .. self.auth_failed) end
  if self.cleanup_failed then errors.raise(errors.ECLEANUP, 'not allocating: an earlier cleanup failed') end
  if self.log_failed then errors.raise(errors.ELOG, 'not allocating: ' .. self.log_failed) end
end

--- An authentication or permission failure on any call: stop allocating (no retry helps).
---@param e any the error (its code and message)
function Session:stop_auth(e)
  if self.auth_failed then return end
  local msg, code = errors.describe(e)
  self.auth_failed = string.format('authentication failed (%s): %s', tostring(code), msg)
  self.auth_code = code
end

--- A lease on a sandbox that already exists (a resume sweep, cleanup): closing it destroys and
--- records it like any other.
---@param sb table {id=, labels=}
---@param destroyed table|nil fields of the destroy record
---@param provider Provider|nil
---@return Lease
function Session:adopt(sb, destroyed, provider)
  self:know(provider or self.provider, sb.id)
  return setmetatable({ session = self, provider = provider or self.provider, sb = sb, id = sb.id, times = {},
    destroyed = destroyed, adopted = true }, Lease)
end

-- Seconds a failed destroy asks us to wait: err.retry_after (seconds), or a Retry-After header
-- on the response an adapter returns after its code.
local function retry_after_of(err, res)
  if type(err) == 'table' and tonumber(err.retry_after) then return tonumber(err.retry_after) end
  local h = type(res) == 'table' and type(res.headers) == 'table' and res.headers or nil
  if h then return util.retry_after(h['retry-after'] or h['Retry-After']) end
  return nil
end

--- Destroy with retries under the session's one back-off policy. Never raises. An id that is not
--- one of the adapter's (contract.valid_id) is refused before the adapter sees it (EUNSAFE),
--- unless o.answered: the id create has just answered in this process, refused by the ledger
--- (session.oversized) and destroyed at once so that it does not outlive the call.
---@param o? {answered?: boolean}
---@return boolean ok, integer attempts, string|nil message, string|nil code
function Session:destroy(p, sb, o)
  local idok, why = contract.valid_id(p.adapter, sb.id)
  if not idok and not (o and o.answered) then
    return false, 0, string.format('sandbox id %s %s: not destroyed', jsonl.encode(tostring(sb.id)), why), errors.EUNSAFE
  end
  local attempts, last = 0, nil
  for attempt = 1, #self.backoff + 1 do
    attempts = attempt
    local ok, res, err, code, resp = pcall(p.adapter.destroy, p.client, sb)
    if ok and res then return true, attempts end
    local wait
    if ok then
      last = errors.returned(err, code, { default_code = errors.ECLEANUP })
      wait = retry_after_of(err, resp)
    else
      last = errors.from(res, errors.ECLEANUP)
      wait = retry_after_of(res)
    end
    -- no retry helps an authentication failure, a name that does not resolve, or a refusal
    if errors.is_auth(last) then self:stop_auth(last); break end
    if last.code == 'ENOTFOUND' or last.code == errors.EUNSAFE then break end
    if attempt <= #self.backoff then
      wait = math.max(self.backoff[attempt], math.min(wait or 0, session.RETRY_AFTER_MAX))
      pcall(task.sleep, wait)
    end
  end
  local msg, code = errors.describe(last)
  return false, attempts, msg, code
end

--- Destroy the sandbox (once; later calls return the first result) and record the outcome:
--- `destroyed`, or `cleanup_failed` and the session stops allocating.
---@return table result {ok, attempts, error, code}
function Lease:close()
  if self.result then return self.result end
  local s, p = self.session, self.provider
  self.result = { ok = false, attempts = 0 } -- a re-entrant close (Ctrl-C inside) sees a result
  self.times.destroy_start = clock.now()
  local ok, attempts, msg, code = s:destroy(p, self.sb)
  self.times.destroy_end = clock.answered(self.times.destroy_start)
  if p.queue and not self.adopted then p.queue:release() end
  self.result = { ok = ok, attempts = attempts, error = msg, code = code }
  if ok then
    s.writer:destroyed(p.name, self.id, self.destroyed)
  else
    s.writer:cleanup_failed(p.name, self.id, msg)
    s.cleanup_failed = s.cleanup_failed or string.format('destroying %s failed: %s', self.id, tostring(msg))
  end
  return self.result
end

--- Nanoseconds between two of the lease's timing points (nil if either is missing).
function Lease:span(a, b)
  local x, y = self.times[a], self.times[b]
  return x and y and (y - x) or nil
end

--- Destroy what a log left behind (a resume sweep; the cleanup command), with this session's
--- policy, records and stop rule: every sandbox it records as allocated and not destroyed,
--- then, on every provider the log names, every sandbox carrying the run's labels that the log
--- does not know (a create whose answer never came: a kill -9 mid-create, a lost answer). The
--- labels: the run's cseng.run; for a shard's log, with each of its sessions' cseng.session, so
--- the other shards are left alone. `providers(record)` maps a record ({provider=, adapter=})
--- to a Provider (default: the session's). o: dry_run (list, destroy nothing), on_result(p, id,
--- result) per sandbox of the log, and on_list_failure(provider, message, refused).
---
--- A log may come from another machine: a record whose sandbox id is not one of its adapter's
--- (session.id_problem) is refused before any path or URL is built from it: nothing is destroyed
--- or recorded for it, on_result gets {ok = false, refused = true, error = "<log>:<line>: ...",
--- code = EUNSAFE}, it counts as failed, and the session stops allocating (a --resume of that
--- log runs nothing new).
---@param events table[]
---@param destroyed table|nil fields of each destroy record
---@param providers (fun(rec:table):Provider)|nil
---@param o table|nil
---@return integer destroyed, integer failed
function Session:sweep(events, destroyed, providers, o)
  o = o or {}
  local scope = results.run_scope(events)
  local function provider_of(rec)
    if providers then return providers(rec) end
    return self.providers[rec.provider] or self.provider
  end
  local n_ok, n_fail = 0, 0
  for _, a in ipairs(results.live_allocations(events)) do
    local p = provider_of(a)
    local bad = session.id_problem(a, p.adapter)
    if bad then
      local msg = string.format('%s: %s: not destroyed', results.where(a) or tostring(self.jsonl), bad)
      self.cleanup_failed = self.cleanup_failed or msg
      n_fail = n_fail + 1
      if o.on_result then o.on_result(p, a.sandbox_id, { ok = false, refused = true, error = msg, code = errors.EUNSAFE }) end
    elseif o.dry_run then
      if o.on_result then o.on_result(p, a.sandbox_id, nil) end
    else
      local r = self:adopt({ id = a.sandbox_id, labels = a.labels }, destroyed, p):close()
      if r.ok then n_ok = n_ok + 1 else n_fail = n_fail + 1 end
      if o.on_result then o.on_result(p, a.sandbox_id, r) end
    end
  end
  if o.dry_run or not scope.run_id then return n_ok, n_fail end
  local wants = {}
  if scope.shard then
    for nonce in pairs(scope.sessions) do wants[#wants + 1] = { ['cseng.run'] = scope.run_id, ['cseng.session'] = nonce } end
  else
    wants[1] = { ['cseng.run'] = scope.run_id }
  end
  for _, name in ipairs(scope.order) do
    local p = provider_of(scope.providers[name] and { provider = name, adapter = scope.providers[name].adapter } or { provider = name })
    for _, want in ipairs(wants) do
      local n, failures = self:reconcile(want, { p })
      n_ok = n_ok + n
      for _, f in ipairs(failures) do if o.on_list_failure then o.on_list_failure(f.provider, f.message, f.refused) end end
    end
  end
  return n_ok, n_fail
end

return session
