--- The viewer and the history store (lua/cseng/history/store.lua): the history page (per lineage
--- and provider, the time series of the median and p95 with their CIs, the trailing window, the
--- changes detection called, each point a link to its run) and its JSON, and the run index
--- restored from the store instead of read from a log that the store holds as it is now.
---
--- The page is its own route (/history) and asset (assets/history.js, with app.css): app.lua
--- hands it the requests under /history and /api/history.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local store = require('cseng.history.store')
local extract = require('cseng.history.extract')

local history = {}

--- The stores of the folders among the viewer's inputs (a folder without one gets one; a
--- folder we cannot write to is read if it has one, else has none). Returns a list of {dir, S}.
---@param inputs string[]
---@return table[]
function history.open(inputs)
  local out = {}
  for _, dir in ipairs(inputs) do
    local st = fs.stat(dir)
    if st and st.type == 'dir' then
      local S = store.open(dir) or store.open(dir, { readonly = true })
      if S then out[#out + 1] = { dir = dir, real = sys.realpath(dir), S = S } end
    end
  end
  return out
end

local function store_of(stores, path)
  local real = sys.realpath(util.dirname(path))
  for _, s in ipairs(stores) do if s.real == real then return s.S end end
  return nil
end

-- a trial row of the store as the event the index reads (lua/cseng/view/index.lua's add_trial)
local PHASES = extract.PHASES
local function event_of(t)
  local e = { event = t.event, provider = t.provider, mode = t.mode, attempt = t.attempt, reward = t.reward,
    error_code = t.code, error_stage = t.stage, error = t.error, sandbox_seconds = t.sandbox_s,
    estimated_cost_usd = t.cost, block = t.block, warmup = t.warmup == 1 or nil, solver = t.solver }
  if t.model or t.solver_cost then e.solver_usage = { model = t.model, cost_usd = t.solver_cost } end
  if t.event == 'startup_trial' then
    -- the index decodes a startup trial's line with cjson, whose numbers are floats ("round 3.0")
    e.round, e.ok, e.ready_ms = t.round and t.round + 0.0, t.ok == 1, t.ready_ms
  else
    e.task_id, e.outcome, e.elapsed_seconds = t.task, t.outcome, t.elapsed
    e.phases = {}
    for _, ph in ipairs(PHASES) do e.phases[ph .. '_seconds'] = t['ph_' .. ph] end
  end
  return e
end

--- Restore a log's index (lua/cseng/view/index.lua) from the store when the store holds the log
--- as it is now: its run_started and run_finished, its trials in order, its live sandboxes, the
--- byte offset it was read to. Through the index's own add_event and add_trial, so the index is
--- the one reading the log gives. Logs the store cannot stand for are read as before: one the
--- store does not hold as it is, one cut short, one with records the store refused, one whose
--- trials were rerun. Returns whether it restored.
---@param stores table[] history.open's list
---@param log table an index Log, not read yet
---@return boolean
function history.restore(stores, log)
  local S = store_of(stores, log.path)
  if not S or log.offset ~= 0 then return false end
  local file = util.basename(log.path)
  local ok, restored = pcall(function()
    local st = fs.stat(log.path)
    if not st or not S:current(file, st) then return false end
    local run = S:one('SELECT r.*, e.started_json, e.finished_json, e.live_json FROM runs r ' ..
      'LEFT JOIN run_events e ON e.file = r.file WHERE r.file = ?', file)
    if not run or run.rejected > 0 or run.torn == 1 or not run.started_json then return false end
    if run.finished_json == nil and run.status ~= 'incomplete' then return false end
    if S:one('SELECT 1 AS x FROM trials WHERE file = ? AND rerun = 1 LIMIT 1', file) then return false end
    local started = jsonl.decode(run.started_json)
    if type(started) ~= 'table' then return false end
    log:reset()
    log:add_event(started, nil, nil)
    S:stmt('SELECT * FROM trials WHERE file = ? ORDER BY seq'):each(function(t) log:add_trial(event_of(t), t.off, t.len) end, file)
    for _, l in ipairs(jsonl.decode(run.live_json or '[]') or {}) do
      log:add_event({ event = 'allocated', provider = l.provider, sandbox_id = l.sandbox_id }, nil, nil)
    end
    if run.finished_json then log:add_event(jsonl.decode(run.finished_json), nil, nil) end
    log.last_time = run.last_time
    local f = io.open(log.path, 'rb')
    log.head = f and f:read(256) or ''
    if f then f:close() end
    log.offset, log.lines, log.size, log.mtime, log.inode_mtime = st.size, run.lines, st.size, st.mtime, st.mtime_ns
    log.pending, log.torn, log.error = false, nil, nil
    log.version = log.version + 1
    return true
  end)
  if ok and restored then return true end
  if not ok or log.n > 0 then log:reset() end -- half restored: read it from the log
  return false
end

--- Index into the store a log the viewer had to read (one it does not hold as it is), once the
--- log is finished: the next start restores it. Returns whether it did.
function history.remember(stores, log)
  if log.summary or log.error or not log.finished or log.torn then return false end
  local S = store_of(stores, log.path)
  if not S or S.readonly then return false end
  local file = util.basename(log.path)
  local ok, did = pcall(function()
    if S:current(file) then return false end
    S:ingest(file)
    local row = S:one('SELECT lineage FROM runs WHERE file = ?', file)
    if row and row.lineage then S:detect(row.lineage) end
    return true
  end)
  return ok and did
end

-- ---- the page's JSON ------------------------------------------------------------------------

--- { stores = [{dir, lineages = [{lineage, runs, judged, first, last, changes, series = [...]}]}] }
function history.index_doc(stores)
  local out = {}
  for i, s in ipairs(stores) do
    local lineages = {}
    for _, l in ipairs(s.S:lineages()) do
      l.series = jsonl.array(s.S:series_list(l.lineage))
      lineages[#lineages + 1] = l
    end
    out[#out + 1] = { store = i, dir = s.dir, lineages = jsonl.array(lineages) }
  end
  return { stores = jsonl.array(out) }
end

-- the page's numbers: 6 significant digits (0.1 us of a 50 ms median) are more than a chart or a
-- tooltip shows, and a year of hourly runs encodes in tens of milliseconds (lua/cseng/lib/jsonl.lua's
-- exact encoder is for records)
local cj = require('cjson').new()
cj.encode_number_precision(6)

-- the JSON of the series asked for lately, per store, while their lineage's judged runs are the same
local cached = setmetatable({}, { __mode = 'k' })

--- One series, run by run, as columns (a year of hourly runs stays one small document), and the
--- changes of its lineage on that series. Returns the JSON text; kept until the lineage's judged
--- runs change (a page opened again is served at once).
function history.series_json(stores, q)
  local s = stores[math.tointeger(tonumber(q.store or '1')) or 1]
  if not s then return nil, 'no store ' .. tostring(q.store) end
  local key = table.concat({ q.lineage or '', q.provider or '', q.phase or '', q.primitive or '', q.metric or 'p50' }, '\0')
  local lin = s.S:one('SELECT processed, digest FROM lineages WHERE lineage = ?', q.lineage or '')
  local stamp = lin and (tostring(lin.processed) .. ':' .. tostring(lin.digest)) or ''
  local c = cached[s.S] or { n = 0 }
  cached[s.S] = c
  if c[key] and c[key].stamp == stamp then return c[key].text end
  local text, err = history.series_text(s, q)
  if text then
    if c.n >= 64 then c = { n = 0 }; cached[s.S] = c end
    c[key], c.n = { stamp = stamp, text = text }, c.n + 1
  end
  return text, err
end

--- The JSON text of one series of store s (history.series_json caches it).
function history.series_text(s, q)
  local metric = q.metric or 'p50'
  local cols, n = s.S:series_arrays(cj.null, q.lineage or '', q.provider or '', q.phase or '', q.primitive or '', metric)
  local changes = {}
  for _, c in ipairs(s.S:changes(q.lineage or '')) do
    if c.provider == q.provider and c.phase == q.phase and c.primitive == q.primitive and c.metric == metric then
      c.evidence = jsonl.decode(c.evidence or '{}')
      changes[#changes + 1] = c
    end
  end
  local doc = { store = s.dir, lineage = q.lineage, provider = q.provider, phase = q.phase, primitive = q.primitive,
    metric = metric, n = n, columns = cols, changes = changes }
  -- (Debian's cjson writes an empty table as {}: the page reads an empty column or list as none)
  return cj.encode(doc)
end

--- The page: its own shell (app.css, assets/dom.js and history.js), under the viewer's CSP.
function history.shell(root, csp)
  return table.concat({ '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
    '<meta http-equiv="Content-Security-Policy" content="' .. csp .. '">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<title>cseng view: history</title>',
    '<link rel="stylesheet" href="' .. root .. 'assets/app.css"></head>',
    '<body data-root="' .. root .. '" data-page="history">',
    '<header><a class="brand" href="' .. root .. '">cseng view</a><a class="brand" href="' .. root .. 'history">history</a></header>',
    '<main id="app"><p class="muted">loading…</p></main>',
    '<script src="' .. root .. 'assets/dom.js"></script>', '<script src="' .. root .. 'assets/history.js"></script>',
    '</body></html>\n' }, '\n')
end

--- Answer a request under /history or /api/history (app.lua's handler calls this): status,
--- headers, body; nil when the path is not the history page's.
---@param stores table[]
---@param path string
---@param q table the query
---@param reply table {json = fn(status, doc), body = fn(status, json_text), html = fn(body), csp}
function history.handle(stores, path, q, reply)
  if path == '/history' then return reply.html(history.shell('/', reply.csp)) end
  if path == '/api/history' then return reply.json(200, history.index_doc(stores)) end
  if path == '/api/history/series' then
    local ok, text, err = pcall(history.series_json, stores, q)
    if not ok then return reply.json(500, { error = tostring(text) }) end
    if not text then return reply.json(404, { error = err }) end
    return reply.body(200, text)
  end
  return nil
end

--- Close the stores.
function history.close(stores)
  for _, s in ipairs(stores or {}) do s.S:close() end
end

return history
