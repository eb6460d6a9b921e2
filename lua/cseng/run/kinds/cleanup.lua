--- The cleanup kind (`cseng cleanup`): destroy the sandboxes a run allocated and did not
--- destroy, from its log (`log`: the session continues that log, so each destroy is recorded
--- there, and lost creates are found by the run's labels), or cseng's sandboxes found by label
--- on one provider (`provider`, `older_than`, `run`: no log to record in). A log is input from
--- another machine: the session's sweep checks every id against its adapter's format first.
--- Lines for the user are emitted as `say` (stdout) and `warning` (stderr) events.
local results = require('cseng.results.log')
local errors = require('cseng.lib.errors')

local K = { name = 'cleanup' }

local function age_seconds(s)
  local n, unit = tostring(s):match('^(%d+)([smhd]?)$')
  if not n then return nil end
  return tonumber(n) * ({ s = 1, m = 60, h = 3600, d = 86400, [''] = 1 })[unit]
end

--- opts: log (RUN.jsonl) or provider (with older_than, run), dry_run, env.
function K.open(opts)
  local k = { done = 0, failures = 0 }
  if opts.log then
    k.events = results.read(opts.log)
    k.scope = results.run_scope(k.events)
    local run_id = k.scope.run_id or (k.events[1] and k.events[1].run_id)
    return opts, { jsonl = opts.log, run_id = run_id }, k
  end
  if not opts.provider then errors.raise(errors.EUSAGE, 'cleanup needs RUN.jsonl or --provider NAME (see cseng cleanup --help)') end
  if opts.older_than then
    k.min_age = age_seconds(opts.older_than)
    if not k.min_age then errors.raise(errors.EUSAGE, 'cleanup: --older-than: expected e.g. 30s, 15m, 2h, 1d') end
  end
  return opts, { no_log = true }, k
end

function K.begin(F)
  local k = F.k
  if k.scope then
    -- every provider the log names, first: a missing credential stops us before anything; a
    -- renamed provider (the arena's "lizard-eu") records the adapter it runs, and the log holds
    -- secrets as [redacted]: those come from the environment or --env-file
    for _, name in ipairs(k.scope.order) do K.connection(F, { provider = name }) end
  else
    local p = F:connect(F.opts.provider)
    if not p.adapter.list then errors.raise(errors.ENOTSUP, 'provider ' .. F.opts.provider .. ' cannot list sandboxes') end
  end
  return {}
end

--- The connection of a log record's provider (connected once).
function K.connection(F, rec)
  local s, scope = F.session, F.k.scope
  local p = s.providers[rec.provider]
  if p then return p end
  local info = scope.providers[rec.provider] or {}
  return F:connect(rec.adapter or info.adapter or rec.provider, info.config, rec.provider)
end

local function say(F, text) F:emit('say', { text = text }) end
local function warn(F, text) F:emit('warning', { text = text }) end

-- From a log: the session's sweep, then what only a label could find.
local function from_log(F)
  local k, s, o = F.k, F.session, F.opts
  local ok_n, fail_n = s:sweep(k.events, { reason = 'cleanup' }, function(rec) return K.connection(F, rec) end, {
    dry_run = o.dry_run,
    on_result = function(p, id, r)
      if r and r.refused then warn(F, 'cseng: cleanup: ' .. r.error)
      elseif not r then say(F, 'would destroy ' .. p.name .. ' ' .. tostring(id))
      elseif r.ok then say(F, 'destroyed ' .. p.name .. ' ' .. tostring(id))
      else warn(F, 'cseng: cannot destroy ' .. tostring(id) .. ': ' .. tostring(r.error)) end
    end,
    on_list_failure = function(name, msg, refused)
      if refused then warn(F, 'cseng: cleanup: ' .. name .. ': ' .. msg)
      else warn(F, 'cseng: cleanup: cannot list ' .. name .. '\'s sandboxes by label: ' .. msg) end
      k.failures = k.failures + 1
    end,
  })
  k.done, k.failures = k.done + ok_n, k.failures + fail_n
  -- creates sent whose answer the log never recorded: only a label finds those
  local answered, unanswered = {}, 0
  for _, e in ipairs(k.events) do
    local l = type(e.labels) == 'table' and e.labels['cseng.create'] or nil
    if e.event == 'allocated' and l then answered[l] = true end
  end
  for _, e in ipairs(k.events) do
    local l = type(e.labels) == 'table' and e.labels['cseng.create'] or nil
    if (e.event == 'intent' and l and not answered[l]) or (e.event == 'lost_create' and e.listable == false) then
      unanswered = unanswered + 1
    end
  end
  for _, p in pairs(s.providers) do
    if not p.adapter.list or p.adapter.list_by_label == false then
      warn(F, 'cseng: cleanup: ' .. p.name .. ' cannot list sandboxes by label: sandboxes whose create answer never came ('
        .. unanswered .. ' in the log) may exist unattributed; check the provider\'s console')
    end
  end
  if not o.dry_run and k.done == 0 and k.failures == 0 then
    say(F, 'nothing to clean: every allocated sandbox of ' .. o.log .. ' was destroyed, and none carries its labels')
  end
end

-- By label: every sandbox of cseng's on the provider (older than --older-than, of --run).
local function by_label(F)
  local k, s, o = F.k, F.session, F.opts
  local p = s.providers[o.provider] or s.provider
  local provider, client = p.adapter, p.client
  if provider.list_by_label == false then
    warn(F, 'cseng: cleanup: ' .. o.provider .. ' cannot list sandboxes by label: unattributed sandboxes '
      .. '(a create whose answer was lost) may exist; check the provider\'s console')
  end
  local labels = o.run and { ['cseng.run'] = o.run } or nil
  local found = provider.list(client, { labels = labels })
  local now = os.time()
  for _, sb in ipairs(found) do
    local created = tonumber(sb.created) or tonumber((sb.labels or {})['cseng.created'])
    local is_ours = (sb.labels or {})['cseng.run'] ~= nil or o.provider == 'local'
    if is_ours and (not k.min_age or (created and now - created >= k.min_age)) then
      if o.dry_run then say(F, 'would destroy ' .. sb.id)
      else
        local dok, _, msg = s:destroy(p, sb) -- no log to record in: the sandbox was found by label
        if dok then say(F, 'destroyed ' .. sb.id); k.done = k.done + 1
        else warn(F, 'cseng: cannot destroy ' .. sb.id .. ': ' .. tostring(msg)); k.failures = k.failures + 1 end
      end
    end
  end
end

function K.schedule(F)
  if F.k.scope then from_log(F) else by_label(F) end
end

--- The end: no run_finished (the log, when there is one, is the run's own). Returns the exit
--- status (1 when a destroy failed) and {done, failures}.
function K.finish(F)
  local k = F.k
  if F.stopped then warn(F, 'cseng: cleanup: ' .. tostring(F.stopped.message)); k.failures = k.failures + 1 end
  return k.failures > 0 and 1 or 0, { done = k.done, failures = k.failures }
end

return K
