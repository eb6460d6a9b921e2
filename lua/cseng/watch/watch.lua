--- `cseng watch`: a plan run on a schedule, each run an ordinary run log judged against the ones
--- before it.
---
--- Each run is a child `cseng run PLAN --output <dir>/<name>-<slot>.jsonl --quiet ARGS` process,
--- started the way a user starts one: the watch knows runs only by their command line and their
--- logs, not by the run layer's internals, and a run's memory, state and crash stay its own
--- (a watch lives for months; a run's process ends). While a run goes, the watch reads its log
--- as it grows (the metrics); when it ends, the watch indexes it in the folder's history store
--- (lua/cseng/history/store.lua), judges it (lua/cseng/history/detect.lua), and tells every
--- change to `--on-change` once.
---
--- The journal, <dir>/watches/<name>.jsonl (append-only, like a run log, and locked by the
--- watch while it runs: one watch of a name per folder, so never two runs of one watch at once),
--- records what the watch did: each slot started (its log named before the child starts),
--- finished, interrupted, abandoned or failed; the slots missed, with why; each change
--- notified. A watch that restarts reads it and resumes: a run still going in an orphaned child
--- is waited for (its log's lock), a task run cut short is continued with `cseng run --resume`,
--- an arena run cut short is cleaned up (`cseng cleanup LOG`) and run again as the slot's next
--- attempt (the arena cannot resume: its rounds are its measurement), so no slot is run twice
--- and none is lost. Stopping (SIGINT, SIGTERM): between runs the watch stops at once; inside a
--- run it passes SIGTERM to the run, which stops as any run does (the run frame: trials
--- cancelled, sandboxes destroyed, run_finished `interrupted`), and the next start finishes that
--- slot.
---
--- The watch layer prints nothing: it emits events (o.emit) the command line renders.
local task = require('cseng.task')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local errors = require('cseng.lib.errors')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local results = require('cseng.results.log')
local store_mod = require('cseng.history.store')
local metrics = require('cseng.history.metrics')
local detect = require('cseng.history.detect')
local schedule = require('cseng.watch.schedule')

local watch = {}

watch.MAX_ATTEMPTS = 3         -- a slot whose run keeps dying is recorded failed after this many
watch.HOOK_TIMEOUT = 60        -- seconds an --on-change command may take
watch.HOOK_TRIES = 3           -- an --on-change command that fails is tried again, at most this often
watch.FEED_SECONDS = 1         -- how often a running run's log is read for the metrics

--- A watch's name: letters, digits, '.', '_', '-' (it names files).
function watch.valid_name(n)
  return type(n) == 'string' and #n <= 64 and n:match('^[%w][%w._-]*$') ~= nil
end

--- The log of a slot's attempt, in the results folder.
function watch.file_of(name, slot, attempt)
  if (attempt or 1) <= 1 then return string.format('%s-%d.jsonl', name, slot) end
  return string.format('%s-%d-a%d.jsonl', name, slot, attempt)
end

-- ---- the journal ------------------------------------------------------------------------------

--- What a journal's events say: the last slot handled, the slot still open (started, not
--- closed) with its attempts, the changes notified (and how often tried), whether it ever ran.
function watch.fold(events)
  local st = { last = nil, open = nil, attempts = {}, notified = {}, tries = {}, started_before = false, runs = 0 }
  for _, e in ipairs(events) do
    if type(e) == 'table' then
      local slot = math.tointeger(e.slot)
      if e.event == 'watch_started' then st.started_before = true
      elseif e.event == 'slot' and slot then
        st.attempts[slot] = math.max(st.attempts[slot] or 0, math.tointeger(e.attempt) or 1)
        if e.status == 'started' then
          st.open = { slot = slot, attempt = math.tointeger(e.attempt) or 1, file = e.file, due_s = e.due_s, pid = e.pid }
        elseif e.status == 'abandoned' then -- the slot goes on with its next attempt
          if st.open and st.open.slot == slot then st.open.abandoned = true end
        elseif e.status == 'finished' or e.status == 'failed' then
          if st.open and st.open.slot == slot then st.open = nil end
          if e.status == 'finished' then st.runs = st.runs + 1 end
        end
        if not st.last or slot > st.last then st.last = slot end
      elseif e.event == 'slots_missed' then
        local l = math.tointeger(e.last)
        if l and (not st.last or l > st.last) then st.last = l end
      elseif e.event == 'change_notified' and type(e.key) == 'string' then
        st.tries[e.key] = (st.tries[e.key] or 0) + 1
        if e.ok then st.notified[e.key] = true end
      end
    end
  end
  return st
end

-- ---- the metrics -------------------------------------------------------------------------------

local function watch_metrics(R)
  return {
    info = R:gauge('cseng_build_info', 'The cseng build serving these metrics (always 1).', { 'version' }),
    running = R:gauge('cseng_watch_running', 'Whether a run of the watch is going (1) or the watch waits (0).', { 'watch' }),
    next_run = R:gauge('cseng_watch_next_run_timestamp_seconds', 'When the next run is due (seconds since the epoch).',
      { 'watch' }, 'seconds'),
    last_run = R:gauge('cseng_watch_last_run_timestamp_seconds', 'When the last run of the watch ended (seconds since ' ..
      'the epoch).', { 'watch' }, 'seconds'),
    last_duration = R:gauge('cseng_watch_last_run_duration_seconds', 'How long the last run took.', { 'watch' }, 'seconds'),
    verdict = R:gauge('cseng_watch_last_run_verdict', 'The verdict on the last run (1 for the current one): ok, ' ..
      'learning (too few runs to judge), candidate (it separates from its window, not held yet), regression, ' ..
      'improvement, failed (the run did not end).', { 'watch', 'verdict' }),
    runs = R:counter('cseng_watch_runs', 'Runs of the watch that ended, by the slot\'s status (finished, failed).',
      { 'watch', 'status' }),
    missed = R:counter('cseng_watch_missed_slots', 'Slots not run, by why: busy (a run overran its period), down (the ' ..
      'watch was not running).', { 'watch', 'reason' }),
    changes = R:counter('cseng_watch_changes', 'Changes confirmed by regression detection, by metric (p50, error_rate, ' ..
      'lost_rate) and direction (up, down).', { 'watch', 'metric', 'direction' }),
    regression = R:gauge('cseng_watch_regression', 'Series whose last confirmed change is a regression (1) or not (0), ' ..
      'by provider, phase, primitive and metric.', { 'watch', 'provider', 'phase', 'primitive', 'metric' }),
  }
end

local VERDICTS = { 'ok', 'learning', 'candidate', 'regression', 'improvement', 'failed' }

-- ---- the run of a slot --------------------------------------------------------------------------

-- Wait for a child, reading its log for the metrics meanwhile. An interrupt is passed to the
-- child as SIGTERM (once; the engine's second interrupt exits at once), then the child's end is
-- awaited: a run stops by its own rules. Returns the child's result and whether we were interrupted.
local function wait_child(W, p, log)
  local interrupted = false
  while true do
    local ok, r, err, code = pcall(p.wait, p, watch.FEED_SECONDS)
    if not ok then
      if not errors.is_cancel(r) then error(r, 0) end
      interrupted = true
      p:kill('TERM')
      W.emit('stopping', { slot = W.current and W.current.slot, reason = 'signal' })
    elseif r then
      if log then pcall(W.collector.feed, W.collector, log) end
      return r, interrupted
    elseif code ~= 'ETIMEDOUT' then
      error(errors.new(code or errors.EIO, tostring(err)), 0)
    end
    if log then pcall(W.collector.feed, W.collector, log) end
  end
end

local function spawn(W, argv, log)
  local p, err, code = proc.spawn { argv = argv, stdout = 'null', stderr = W.child_stderr or 'inherit' }
  if not p then errors.raise(code or errors.EIO, 'cannot start ' .. argv[1] .. ': ' .. tostring(err)) end
  return p, log
end

-- A log's lock held by another process: an orphaned run of a watch that died.
local function held_elsewhere(path)
  if not fs.exists(path) then return false end
  local lock, _, code = fs.lock(path)
  if lock then lock:close(); return false end
  return code == 'EAGAIN'
end

local function run_argv(W, file, resume)
  local argv = { W.exe, 'run', W.plan_file }
  if resume then
    argv[#argv + 1], argv[#argv + 2] = '--resume', fs.join(W.dir, file)
  else
    argv[#argv + 1], argv[#argv + 2] = '--output', fs.join(W.dir, file)
  end
  argv[#argv + 1] = '--quiet'
  for _, a in ipairs(W.run_args) do argv[#argv + 1] = a end
  return argv
end

-- the history of the run a child just ended: its status in the log
local function ingest(W, file)
  local run, err = W.store:ingest(file)
  return run, err
end

--- Run one attempt of a slot (resume: continue the attempt's log). Returns the slot's status:
--- 'finished' (the run ended: finished, stopped, cleanup_failed), 'interrupted' (we were
--- signalled), 'died' (no run_finished: the child was killed, or crashed), or 'usage' (the
--- run refused its command line).
local function run_attempt(W, s, resume)
  local path = fs.join(W.dir, s.file)
  local argv = run_argv(W, s.file, resume)
  local t0 = clock.epoch()
  -- the slot and its log are in the journal before the run exists: a watch that dies at any
  -- point after this finds the slot open on its restart
  W.journal:event('slot', { slot = s.slot, attempt = s.attempt, status = 'started', due_s = s.due, file = s.file,
    resume = resume or nil }, true)
  local p = spawn(W, argv, path)
  W.current = s
  W.m.running:set({ watch = W.name }, 1)
  W.emit('run_started', { slot = s.slot, attempt = s.attempt, file = path, due = s.due, resume = resume, pid = p:pid() })
  local r, interrupted = wait_child(W, p, path)
  p:close()
  W.m.running:set({ watch = W.name }, 0)
  W.current = nil
  local run = ingest(W, s.file)
  local status
  if r.code == 2 and not (run and store_mod.ENDED[run.status]) then status = 'usage'
  elseif run and store_mod.ENDED[run.status] then status = 'finished'
  elseif interrupted then status = 'interrupted'
  else status = 'died' end
  W.last_duration = clock.epoch() - t0
  return status, run, r, interrupted
end

-- Continue or redo the open slot of a watch that was stopped or died, until it ends; returns
-- the final status of the slot ('finished', 'failed', 'interrupted', 'usage').
local function settle(W, s, resume_first)
  local resume = resume_first
  local tries = 0
  while true do
    tries = tries + 1
    local path = fs.join(W.dir, s.file)
    while held_elsewhere(path) do -- an orphaned run of ours still writes it: let it end
      W.emit('waiting', { slot = s.slot, file = path })
      task.sleep(1)
    end
    local status, run, r, interrupted
    if resume then
      local st = fs.exists(path) and ingest(W, s.file)
      if st and store_mod.ENDED[st.status] then
        status, run = 'finished', st
      elseif st and W.kind == 'tasks' then
        status, run, r, interrupted = run_attempt(W, s, true)
      elseif fs.exists(path) then
        -- an arena run cannot resume: what it left is destroyed, and the slot runs again
        W.emit('cleanup', { slot = s.slot, file = path })
        local c = proc.run { argv = { W.exe, 'cleanup', path }, timeout = 3600 }
        W.journal:event('slot', { slot = s.slot, attempt = s.attempt, status = 'abandoned', file = s.file,
          reason = 'cut short; cleaned up (exit ' .. tostring(c and c.code) .. ')' }, true)
        ingest(W, s.file) -- the cleanup appended its destroy records
        s = { slot = s.slot, attempt = s.attempt + 1, due = s.due }
        s.file = watch.file_of(W.name, s.slot, s.attempt)
        status, run, r, interrupted = run_attempt(W, s, false)
      else
        status, run, r, interrupted = run_attempt(W, s, false)
      end
    else
      status, run, r, interrupted = run_attempt(W, s, false)
    end
    if status == 'finished' or status == 'usage' then
      W.journal:event('slot', { slot = s.slot, attempt = s.attempt, status = status == 'usage' and 'failed' or 'finished',
        file = s.file, run_id = run and run.run_id, run_status = run and run.status, exit = r and r.code,
        reason = status == 'usage' and 'the run refused its command line (exit 2)' or nil }, true)
      return status, run, s
    end
    if status == 'interrupted' or interrupted then
      W.journal:event('slot', { slot = s.slot, attempt = s.attempt, status = 'interrupted', file = s.file,
        exit = r and r.code }, true)
      return 'interrupted', run, s
    end
    -- the run died without ending: once more (resume or redo), up to MAX_ATTEMPTS
    if tries >= watch.MAX_ATTEMPTS or s.attempt >= watch.MAX_ATTEMPTS then
      W.journal:event('slot', { slot = s.slot, attempt = s.attempt, status = 'failed', file = s.file, exit = r and r.code,
        reason = string.format('the run died %d times without ending', tries) }, true)
      return 'failed', run, s
    end
    W.emit('retry', { slot = s.slot, attempt = s.attempt, exit = r and r.code })
    resume = true
  end
end

-- ---- after a run -----------------------------------------------------------------------------

local function verdict_of(W, file, failed)
  if failed then return 'failed' end
  local rows = W.store:all('SELECT verdict, metric FROM points WHERE file = ?', file)
  local changes = W.store:all('SELECT regression FROM changes WHERE confirmed_file = ?', file)
  for _, c in ipairs(changes) do if c.regression == 1 then return 'regression' end end
  if #changes > 0 then return 'improvement' end
  local any, learning = false, true
  for _, r in ipairs(rows) do
    if r.verdict == nil then goto next end -- a derived primitive: shown, not judged
    any = true
    if r.verdict == 'candidate' then return 'candidate' end
    if r.verdict ~= 'learning' then learning = false end
    ::next::
  end
  if any and learning then return 'learning' end
  return 'ok'
end

local function hook(W, c)
  local evidence = jsonl.decode(c.evidence or '{}') or {}
  local doc = { watch = W.name, lineage = c.lineage, provider = c.provider, phase = c.phase, primitive = c.primitive,
    metric = c.metric, direction = c.direction, regression = c.regression == 1, first_index = c.first_index,
    confirmed_index = c.confirmed_index, first_run_id = c.first_run_id, confirmed_run_id = c.confirmed_run_id,
    first_log = c.first_file and fs.join(W.dir, c.first_file), value = c.value, baseline = evidence.baseline,
    ratio = c.ratio, runs = evidence.runs, key = c.key }
  local json = jsonl.encode(doc)
  local env = {
    CSENG_WATCH = W.name, CSENG_CHANGE = json, CSENG_CHANGE_PROVIDER = c.provider, CSENG_CHANGE_METRIC = c.metric,
    CSENG_CHANGE_PHASE = c.phase, CSENG_CHANGE_PRIMITIVE = c.primitive, CSENG_CHANGE_DIRECTION = c.direction,
    CSENG_CHANGE_REGRESSION = c.regression == 1 and '1' or '0', CSENG_CHANGE_RUN_ID = c.first_run_id or '',
    CSENG_CHANGE_LOG = doc.first_log or '',
  }
  local r, err = proc.run { argv = { 'sh', '-c', W.on_change }, env_add = env, stdin = json .. '\n',
    timeout = watch.HOOK_TIMEOUT, tail_bytes = 4096 }
  local ok = r and r.code == 0 and not r.timed_out
  return ok, r and (r.timed_out and 'timed out' or ('exit ' .. tostring(r.code))) or tostring(err),
    r and util.tail(r.stderr or '', 300) or nil
end

-- Tell every change of the lineage not told yet (a change is told once: the journal says so).
local function notify(W, st)
  for _, c in ipairs(W.store:changes(W.lineage)) do
    if not st.notified[c.key] and (st.tries[c.key] or 0) < watch.HOOK_TRIES then
      if not W.told[c.key] then
        W.told[c.key] = true
        W.m.changes:inc({ watch = W.name, metric = c.metric, direction = c.direction })
        W.emit('change', { change = c })
      end
      if W.on_change then
        local ok, why, stderr = hook(W, c)
        st.tries[c.key] = (st.tries[c.key] or 0) + 1
        if ok then st.notified[c.key] = true end
        W.journal:event('change_notified', { key = c.key, ok = ok, result = why, stderr = stderr and stderr ~= '' and stderr or nil }, true)
        if not ok then W.emit('hook_failed', { change = c, result = why, stderr = stderr }) end
      else
        st.notified[c.key] = true
        W.journal:event('change_notified', { key = c.key, ok = true, result = 'no --on-change' }, true)
      end
    end
  end
  -- the regression gauge: per series, whether its last change is a regression
  W.m.regression:clear()
  local last = {}
  for _, c in ipairs(W.store:changes(W.lineage)) do
    last[table.concat({ c.provider, c.phase, c.primitive, c.metric }, '\0')] = c
  end
  for _, c in pairs(last) do
    W.m.regression:set({ watch = W.name, provider = c.provider, phase = c.phase, primitive = c.primitive, metric = c.metric },
      c.regression)
  end
end

local function refresh_store(W, all)
  if all then W.store:sync() end -- every log of the folder as it is now
  local events = results.read(W.journal_path)
  W.store:apply_journal(W.name, store_mod.fold_journal(events))
  W.store:detect(W.lineage)
  return watch.fold(events)
end

local function after_run(W, status, s)
  local st = refresh_store(W)
  local verdict = verdict_of(W, s.file, status ~= 'finished')
  W.m.verdict:clear()
  for _, v in ipairs(VERDICTS) do W.m.verdict:set({ watch = W.name, verdict = v }, v == verdict and 1 or 0) end
  W.m.last_run:set({ watch = W.name }, clock.epoch())
  W.m.last_duration:set({ watch = W.name }, W.last_duration or 0)
  W.m.runs:inc({ watch = W.name, status = status == 'finished' and 'finished' or 'failed' })
  W.emit('run_finished', { slot = s.slot, attempt = s.attempt, file = fs.join(W.dir, s.file), status = status,
    verdict = verdict, index = (W.store:one('SELECT lineage_index FROM runs WHERE file = ?', s.file) or {}).lineage_index })
  notify(W, st)
  return st
end

-- ---- the server ----------------------------------------------------------------------------------

local function status_doc(W)
  local doc = { watch = W.name, plan = W.plan_file, dir = W.dir, every_s = W.schedule.every, jitter_s = W.schedule.jitter,
    running = W.current and { slot = W.current.slot, attempt = W.current.attempt, file = W.current.file } or nil,
    next = W.next and { slot = W.next.slot, due = clock.wall(W.next.due) } or nil, runs = W.runs_done,
    lineage = W.lineage }
  return doc
end

local function serve(W, port, host)
  local serve_mod = require('cseng.serve')
  local srv, err, code = serve_mod.listen { host = host or '127.0.0.1', port = port, handler = function(req)
    if req.method ~= 'GET' and req.method ~= 'HEAD' then
      return 405, { Allow = 'GET', ['Content-Type'] = 'text/plain' }, 'GET only\n'
    end
    if req.path == '/metrics' then
      if W.current then pcall(W.collector.feed, W.collector, fs.join(W.dir, W.current.file)) end
      return 200, { ['Content-Type'] = metrics.CONTENT_TYPE, ['Cache-Control'] = 'no-store' }, W.registry:render()
    end
    if req.path == '/' or req.path == '/status' then
      return 200, { ['Content-Type'] = 'application/json', ['Cache-Control'] = 'no-store' }, jsonl.encode(status_doc(W)) .. '\n'
    end
    return 404, { ['Content-Type'] = 'text/plain' }, 'try /metrics or /status\n'
  end }
  if not srv then errors.raise(code or errors.EIO, string.format('--metrics-port %d: %s', port, tostring(err))) end
  return srv
end

-- ---- the loop --------------------------------------------------------------------------------------

--- Run a watch until it is stopped (SIGINT/SIGTERM) or has run o.runs slots. o: name, plan_file,
--- kind ('tasks' | 'startup'), run_args (the `cseng run` options it passes on), dir (the results
--- folder), every, jitter, max_late (seconds), runs, once (finish an open slot, run the slot due now
--- if one is, then return: a CronJob's pod), detect (options), on_change (a shell
--- command), metrics_port, metrics_host, exe (the cseng binary), emit(event, data) (the
--- presentation), now (clock, default clock.epoch), child_stderr ('inherit' | a path).
--- Returns the exit status: 0 after o.runs runs (or o.once), 128 + N after signal N, 1 when a run
--- refuses its command line (a slot whose run keeps dying is recorded failed, and the watch goes on).
---@param o table
---@return integer status
function watch.run(o)
  if not watch.valid_name(o.name) then errors.raise(errors.EUSAGE, 'a watch name is letters, digits, ., _ and - (at most 64): ' .. tostring(o.name)) end
  local W = {
    name = o.name, plan_file = o.plan_file, kind = o.kind, run_args = o.run_args or {}, dir = o.dir or 'results',
    exe = o.exe or assert(sys.realpath('/proc/self/exe')), emit = o.emit or function() end, on_change = o.on_change,
    lineage = 'watch:' .. o.name, told = {}, runs_done = 0, child_stderr = o.child_stderr,
  }
  local now = o.now or clock.epoch
  W.schedule = schedule.new { every = o.every, jitter = o.jitter, max_late = o.max_late, seed = o.name }
  W.detect = detect.options(o.detect)
  local ok, err, code = fs.mkdir_p(fs.join(W.dir, store_mod.JOURNALS))
  if not ok then errors.raise(code or errors.EIO, tostring(err)) end
  W.journal_path = fs.join(W.dir, store_mod.JOURNALS, W.name .. '.jsonl')
  local prior = fs.exists(W.journal_path) and results.read(W.journal_path) or {}
  local jok, journal = pcall(results.open, W.journal_path, W.lineage)
  if not jok then
    if type(journal) == 'table' and journal.code == errors.EBUSY then
      local pid
      for _, e in ipairs(prior) do if e.event == 'watch_started' then pid = e.pid end end
      errors.raise(errors.EBUSY, string.format('watch %s is already running on %s%s (one watch of a name per folder; ' ..
        'give this one another --name)', W.name, W.dir, pid and (' (pid ' .. tostring(pid) .. ')') or ''))
    end
    error(journal, 0)
  end
  W.journal = journal
  local st = watch.fold(prior)
  local fresh = not st.started_before -- slots before a watch's first start are not missed
  W.journal:event('watch_started', { name = W.name, plan = W.plan_file, kind = W.kind, every_s = W.schedule.every,
    jitter_s = W.schedule.jitter, max_late_s = W.schedule.max_late, detect = W.detect, run_args = W.run_args,
    on_change = W.on_change and true or nil, pid = sys.pid(), host = sys.hostname(), resumed = st.started_before or nil }, true)

  W.registry = metrics.registry()
  W.m = watch_metrics(W.registry)
  W.collector = metrics.collector(W.registry)
  W.m.info:set({ version = sys.versions().cseng }, 1)
  W.m.running:set({ watch = W.name }, 0)
  local srv = o.metrics_port and serve(W, o.metrics_port, o.metrics_host) or nil
  if srv then W.emit('serving', { url = srv:url() .. '/metrics' }) end

  local sok, serr = pcall(function()
    W.store = assert(store_mod.open(W.dir))
    W.emit('indexing', { dir = W.dir })
    local synced = W.store:sync()
    W.emit('indexed', synced)
    st = refresh_store(W)
    notify(W, st) -- changes confirmed before a crash and never told
  end)
  if not sok then
    if W.store then W.store:close() end
    if srv then srv:close() end
    W.journal:close()
    error(serr, 0)
  end

  local status = 0
  local lok, lerr = pcall(function()
    -- a slot left open by a watch that stopped or died: finish it first
    if st.open then
      local s = { slot = st.open.slot, attempt = st.open.attempt, file = st.open.file, due = st.open.due_s }
      local resume = true
      if st.open.abandoned then -- cleaned up, and its next attempt never started
        s.attempt, resume = s.attempt + 1, false
        s.file = nil
      end
      if not s.file then s.file = watch.file_of(W.name, s.slot, s.attempt) end
      W.emit('recovering', { slot = s.slot, attempt = s.attempt, file = fs.join(W.dir, s.file) })
      local r, _, fs_ = settle(W, s, resume)
      s = fs_ or s
      st = after_run(W, r, s)
      if r == 'interrupted' then status = 130; return end
      if r == 'usage' then status = 1; return end
      W.runs_done = W.runs_done + 1
    end
    local first = true
    while not (o.runs and W.runs_done >= o.runs) do
      local n = W.schedule:next(st.last, now())
      if o.once and not first then return end -- --once: the slot that was due, and no other
      if n.missed and not (first and fresh) then
        local reason = first and 'down' or 'busy'
        W.journal:event('slots_missed', { first = n.missed.first, last = n.missed.last, reason = reason }, true)
        W.m.missed:inc({ watch = W.name, reason = reason }, n.missed.last - n.missed.first + 1)
        W.emit('missed', { first = n.missed.first, last = n.missed.last, reason = reason })
      end
      first = false
      if o.once and n.due > now() then W.emit('none_due', { slot = n.slot, due = n.due }); return end
      st.last = n.slot - 1
      W.next = n
      W.m.next_run:set({ watch = W.name }, n.due)
      W.emit('waiting_slot', { slot = n.slot, due = n.due, in_s = math.max(0, n.due - now()) })
      -- between runs a signal stops the watch at once
      while now() < n.due do
        local wok = pcall(task.sleep, math.min(60, math.max(0.001, n.due - now())))
        if not wok or task.interrupted() > 0 then status = 128 + (task.signal and task.signal() or 2); return end
      end
      local s = { slot = n.slot, attempt = (st.attempts[n.slot] or 0) + 1, due = n.due }
      s.file = watch.file_of(W.name, s.slot, s.attempt)
      W.next = nil
      local r, _, fs_ = settle(W, s, false)
      s = fs_ or s
      st = after_run(W, r, s)
      st.last = math.max(st.last or n.slot, n.slot)
      if r == 'interrupted' then status = 128 + (task.signal and task.signal() or 2); return end
      if r == 'usage' then status = 1; return end
      W.runs_done = W.runs_done + 1
      if task.interrupted() > 0 then status = 128 + (task.signal and task.signal() or 2); return end
    end
  end)
  if not lok then
    if errors.is_cancel(lerr) then status = 128 + (task.signal and task.signal() or 2)
    else
      pcall(W.journal.event, W.journal, 'watch_stopped', { reason = 'error', error = errors.line(lerr) }, true)
      pcall(refresh_store, W, true)
      W.store:close()
      if srv then srv:close() end
      W.journal:close()
      error(lerr, 0)
    end
  end
  W.journal:event('watch_stopped', { reason = status == 0 and 'runs' or (status >= 128 and 'signal' or 'error'),
    runs = W.runs_done }, true)
  pcall(refresh_store, W, true)
  W.emit('stopped', { status = status, runs = W.runs_done })
  W.store:close()
  if srv then srv:close() end
  W.journal:close()
  return status
end

return watch
