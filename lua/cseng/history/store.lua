--- The history store: one SQLite database per results folder (<dir>/history.sqlite, through the
--- engine's cseng.sqlite), holding every run's identity and per provider, phase and primitive
--- summaries with their CIs, per provider reliability, an index of trials by run, task, provider
--- and outcome, the watches' slots, and the verdicts and changes of regression detection.
---
--- The run logs stay the source of truth: the store is rebuilt from them on demand (S:rebuild),
--- and kept current file by file (S:sync: a log whose size, modification time or first bytes
--- changed is read again, one that is gone is forgotten). A log is hostile input: what is indexed
--- passed lua/cseng/history/extract.lua's checks, and reaches SQL only as bound values. A store
--- file that is corrupt, of another schema, or not a database is replaced by a fresh one (it is a
--- cache), never trusted: the engine opens it with an untrusted schema and defensive settings.
---
--- Lineages: the runs one detection follows in order. A watch's runs (its journal names each
--- slot's log) are `watch:<name>`, in slot order; any other run is `plan:<plan>` by start time.
--- Only runs that ended (finished, stopped, cleanup_failed), with trials, and not superseded by a
--- later attempt of their slot are judged. Detection (lua/cseng/history/detect.lua) runs over the
--- new runs of a lineage from the saved state of the ones before; a lineage whose processed runs
--- changed (a log read again, a run inserted earlier) is judged again from its start, so the
--- store updated run by run and the store rebuilt from the logs hold the same rows.
local sqlite = require('cseng.sqlite')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local extract = require('cseng.history.extract')
local detect = require('cseng.history.detect')

local store = {}

store.FILE = 'history.sqlite'
store.SCHEMA = 3
store.JOURNALS = 'watches' -- <dir>/watches/<name>.jsonl: the watches' journals
store.ENDED = { finished = true, stopped = true, cleanup_failed = true }

local SCHEMA = [[
PRAGMA foreign_keys = ON;
CREATE TABLE IF NOT EXISTS logs(file TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, head TEXT, error TEXT);
CREATE TABLE IF NOT EXISTS runs(
  file TEXT PRIMARY KEY REFERENCES logs(file) ON DELETE CASCADE,
  run_id TEXT, kind TEXT, plan TEXT, label TEXT, mode TEXT, solver TEXT, model TEXT, dataset TEXT, dataset_digest TEXT,
  providers TEXT, started_at TEXT, started_s REAL, finished_at TEXT, finished_s REAL, duration_s REAL, status TEXT,
  trials INTEGER, passed INTEGER, failed INTEGER, errors INTEGER, lost INTEGER, leaked INTEGER, cost_usd REAL,
  solver_cost_usd REAL, rejected INTEGER, rejected_first TEXT, lines INTEGER, torn INTEGER, last_time TEXT,
  lineage TEXT, slot INTEGER, attempt INTEGER, superseded INTEGER NOT NULL DEFAULT 0, lineage_index INTEGER);
CREATE INDEX IF NOT EXISTS runs_lineage ON runs(lineage, lineage_index);
-- a run's first and last records and its live sandboxes, apart: the runs table stays narrow for
-- the queries that walk a year of runs
CREATE TABLE IF NOT EXISTS run_events(file TEXT PRIMARY KEY REFERENCES runs(file) ON DELETE CASCADE,
  started_json TEXT, finished_json TEXT, live_json TEXT);
CREATE INDEX IF NOT EXISTS runs_id ON runs(run_id);
CREATE TABLE IF NOT EXISTS series(
  file TEXT REFERENCES runs(file) ON DELETE CASCADE, provider TEXT, phase TEXT, primitive TEXT,
  n INTEGER, min REAL, max REAL, mean REAL, p50 REAL, p50_lo REAL, p50_hi REAL, p95 REAL, p95_lo REAL, p95_hi REAL,
  p99 REAL, n_blocks INTEGER, block_lo REAL, block_hi REAL,
  PRIMARY KEY(file, provider, phase, primitive));
CREATE TABLE IF NOT EXISTS reliability(
  file TEXT REFERENCES runs(file) ON DELETE CASCADE, provider TEXT, trials INTEGER, errors INTEGER, lost INTEGER,
  leaked INTEGER, PRIMARY KEY(file, provider));
CREATE TABLE IF NOT EXISTS codes(
  file TEXT REFERENCES runs(file) ON DELETE CASCADE, provider TEXT, code TEXT, n INTEGER,
  PRIMARY KEY(file, provider, code));
CREATE TABLE IF NOT EXISTS trials(
  file TEXT REFERENCES runs(file) ON DELETE CASCADE, seq INTEGER, event TEXT, task TEXT, round INTEGER,
  provider TEXT, mode TEXT, solver TEXT, model TEXT, attempt INTEGER, outcome TEXT, ok INTEGER, rerun INTEGER,
  reward REAL, code TEXT, stage TEXT, error TEXT, sandbox_s REAL, cost REAL, solver_cost REAL, elapsed REAL,
  block INTEGER, warmup INTEGER, interrupted INTEGER, create_ms REAL, first_exec_ms REAL, ready_ms REAL,
  cleanup_ms REAL, cleanup_ok INTEGER, ph_build REAL, ph_start REAL, ph_upload REAL, ph_prepare REAL,
  ph_instruction_write REAL, ph_solve REAL, ph_verify REAL, ph_stop REAL, off INTEGER, len INTEGER,
  PRIMARY KEY(file, seq));
CREATE INDEX IF NOT EXISTS trials_task ON trials(task, provider);
CREATE INDEX IF NOT EXISTS trials_outcome ON trials(provider, outcome);
-- every run's point in each series of its lineage, judged or not (a derived primitive's is not),
-- with what a chart draws, keyed so a series is one range of the key: a year of hourly runs is
-- read in one scan
CREATE TABLE IF NOT EXISTS points(
  lineage TEXT, provider TEXT, phase TEXT, primitive TEXT, metric TEXT, lineage_index INTEGER,
  file TEXT REFERENCES runs(file) ON DELETE CASCADE, run_id TEXT, started_s REAL,
  value REAL, lo REAL, hi REAL, verdict TEXT, w_first INTEGER, w_last INTEGER, w_runs INTEGER, w_value REAL,
  w_lo REAL, w_hi REAL, n INTEGER, p95 REAL, p95_lo REAL, p95_hi REAL,
  PRIMARY KEY(lineage, provider, phase, primitive, metric, lineage_index)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS points_file ON points(file);
CREATE TABLE IF NOT EXISTS changes(
  key TEXT PRIMARY KEY, lineage TEXT, provider TEXT, phase TEXT, primitive TEXT, metric TEXT, direction TEXT,
  regression INTEGER, first_index INTEGER, confirmed_index INTEGER, first_file TEXT, first_run_id TEXT,
  confirmed_file TEXT, confirmed_run_id TEXT, value REAL, baseline_value REAL, baseline_lo REAL, baseline_hi REAL,
  ratio REAL, evidence TEXT);
CREATE INDEX IF NOT EXISTS changes_lineage ON changes(lineage, first_index);
CREATE TABLE IF NOT EXISTS lineage_series(lineage TEXT, provider TEXT, phase TEXT, primitive TEXT, metric TEXT,
  points INTEGER, PRIMARY KEY(lineage, provider, phase, primitive, metric));
CREATE TABLE IF NOT EXISTS detect_state(lineage TEXT, key TEXT, state TEXT, PRIMARY KEY(lineage, key));
CREATE TABLE IF NOT EXISTS lineages(lineage TEXT PRIMARY KEY, options TEXT, processed INTEGER, digest TEXT);
CREATE TABLE IF NOT EXISTS slots(
  watch TEXT, slot INTEGER, attempt INTEGER, status TEXT, due_s REAL, file TEXT, reason TEXT,
  PRIMARY KEY(watch, slot, attempt));
CREATE TABLE IF NOT EXISTS missed(watch TEXT, first INTEGER, last INTEGER, reason TEXT, PRIMARY KEY(watch, first));
]]

local Store = {}
Store.__index = Store

local function check(v, err, code, what)
  if v == nil then errors.raise(code or errors.ESQLITE, (what and (what .. ': ') or '') .. tostring(err)) end
  return v
end

--- The statement for sql, prepared once per store.
function Store:stmt(sql)
  local st = self.cache[sql]
  if not st then
    st = check(self.db:prepare(sql))
    self.cache[sql] = st
  end
  return st
end

--- Run a statement: changes, or raises a one-line error (the store's path and SQLite's message).
function Store:run(sql, ...) return check(self:stmt(sql):run(...)) end
--- The first row, or nil.
function Store:one(sql, ...)
  local r, err, code = self:stmt(sql):one(...)
  if err then check(nil, err, code) end
  return r
end
--- Every row.
function Store:all(sql, ...) return check(self:stmt(sql):all(...)) end

--- fn() in one write transaction (BEGIN IMMEDIATE: another writer waits for the busy timeout,
--- then EBUSY); rolled back if fn raises, the error raised again.
function Store:tx(fn)
  if not self.db:autocommit() then return fn() end -- nested: the outer transaction holds
  check(self.db:exec('BEGIN IMMEDIATE'))
  local ok, a, b = pcall(fn)
  if not ok then
    self.db:exec('ROLLBACK')
    error(a, 0)
  end
  check(self.db:exec('COMMIT'))
  return a, b
end

local function open_db(path, o)
  local db, err, code = sqlite.open(path, { readonly = o.readonly, busy_timeout = o.busy_timeout or 10 })
  if not db then return nil, err, code end
  local function fail(e, c) db:close(); return nil, e, c end
  if not o.readonly then
    local ok, e, c = db:exec('PRAGMA journal_mode = WAL')
    if not ok then return fail(e, c) end
    ok, e, c = db:exec('PRAGMA synchronous = NORMAL')
    if not ok then return fail(e, c) end
  end
  local st, e, c = db:prepare('PRAGMA user_version')
  if not st then return fail(e, c) end
  local row, e2, c2 = st:one()
  st:close()
  if e2 then return fail(e2, c2) end
  local version = row and row.user_version or 0
  if version ~= 0 and version ~= store.SCHEMA then return fail(path .. ': a store of schema ' .. version, 'ECORRUPT') end
  if not o.readonly then
    local ok, e3, c3 = db:exec(SCHEMA)
    if not ok then return fail(e3, c3) end
    if version == 0 then db:exec('PRAGMA user_version = ' .. math.tointeger(store.SCHEMA)) end
  else
    db:exec('PRAGMA foreign_keys = ON')
  end
  return db
end

local function remove_files(path)
  for _, p in ipairs({ path, path .. '-wal', path .. '-shm', path .. '-journal' }) do
    local st = fs.lstat(p)
    if st and st.type ~= 'dir' then fs.remove(p) end
  end
end

--- Open the store of a results folder (created if missing; a corrupt one, or one of another
--- schema, is replaced). o.readonly: never write (a folder that is not ours); o.busy_timeout:
--- seconds a write waits for another process (default 10). Returns the store, or nil, err, code.
---@param dir string
---@param o? {readonly?: boolean, busy_timeout?: number}
---@return table|nil store, string|nil err, string|nil code
function store.open(dir, o)
  o = o or {}
  local path = fs.join(dir, store.FILE)
  if o.readonly and not fs.exists(path) then return nil, path .. ': no history store', 'ENOENT' end
  local db, err, code = open_db(path, o)
  if not db and not o.readonly and (code == 'ECORRUPT' or code == 'ESQLITE') then
    remove_files(path) -- a cache: a file we cannot use is made again from the logs
    db, err, code = open_db(path, o)
  end
  if not db then return nil, err, code end
  return setmetatable({ db = db, dir = dir, path = path, cache = {}, readonly = o.readonly }, Store)
end

--- Close the store (idempotent).
function Store:close()
  for _, st in pairs(self.cache) do st:close() end
  self.cache = {}
  if self.db then self.db:close(); self.db = nil end
end

-- ---- logs ------------------------------------------------------------------------------------

--- Whether the store holds file as it is now (size, modification time, first bytes).
---@param file string the log's name in the folder
---@param st table|nil fs.stat of it (read when nil)
function Store:current(file, st)
  st = st or fs.stat(fs.join(self.dir, file))
  if not st then return false end
  local row = self:one('SELECT size, mtime_ns, head FROM logs WHERE file = ?', file)
  if not row or row.size ~= st.size or row.mtime_ns ~= st.mtime_ns then return false end
  return row.head == extract.head(fs.join(self.dir, file))
end

local RUN_COLS = { 'file', 'run_id', 'kind', 'plan', 'label', 'mode', 'solver', 'model', 'dataset', 'dataset_digest',
  'providers', 'started_at', 'started_s', 'finished_at', 'finished_s', 'duration_s', 'status', 'trials', 'passed',
  'failed', 'errors', 'lost', 'leaked', 'cost_usd', 'solver_cost_usd', 'rejected', 'rejected_first', 'lines', 'torn',
  'last_time', 'lineage', 'slot', 'attempt', 'superseded' }
local TRIAL_COLS = { 'file', 'seq', 'event', 'task', 'round', 'provider', 'mode', 'solver', 'model', 'attempt', 'outcome',
  'ok', 'rerun', 'reward', 'code', 'stage', 'error', 'sandbox_s', 'cost', 'solver_cost', 'elapsed', 'block', 'warmup',
  'interrupted', 'create_ms', 'first_exec_ms', 'ready_ms', 'cleanup_ms', 'cleanup_ok', 'ph_build', 'ph_start',
  'ph_upload', 'ph_prepare', 'ph_instruction_write', 'ph_solve', 'ph_verify', 'ph_stop', 'off', 'len' }
local SERIES_COLS = { 'file', 'provider', 'phase', 'primitive', 'n', 'min', 'max', 'mean', 'p50', 'p50_lo', 'p50_hi', 'p95',
  'p95_lo', 'p95_hi', 'p99', 'n_blocks', 'block_lo', 'block_hi' }

local function insert_sql(tbl, cols)
  return string.format('INSERT INTO %s(%s) VALUES (%s)', tbl, table.concat(cols, ', '),
    string.rep('?', #cols, ', '))
end
local RUN_INSERT, TRIAL_INSERT, SERIES_INSERT = insert_sql('runs', RUN_COLS), insert_sql('trials', TRIAL_COLS),
  insert_sql('series', SERIES_COLS)

local function values(row, cols, out)
  for i, c in ipairs(cols) do
    local v = row[c]
    if type(v) == 'boolean' then v = v and 1 or 0 end
    out[i] = v
  end
  return table.unpack(out, 1, #cols)
end

-- the lineage and slot a file belongs to by the watches' journals (applied earlier)
function Store:slot_of(file)
  return self:one('SELECT watch, slot, attempt, status FROM slots WHERE file = ? ORDER BY slot DESC, attempt DESC LIMIT 1', file)
end

local function default_lineage(run)
  return 'plan:' .. (run.plan or run.kind or 'run')
end

--- Index one log (read and checked by extract.read) in one transaction, replacing what the store
--- held of it. A log that cannot be read is recorded with its error (and not read again until it
--- changes). Returns the run (nil for an unreadable log) and the error.
---@param file string the log's name in the folder
---@return table|nil run, string|nil err
function Store:ingest(file)
  local path = fs.join(self.dir, file)
  local st = fs.stat(path)
  local run, err = extract.read(path, { file = file })
  self:tx(function()
    self:run('DELETE FROM logs WHERE file = ?', file)
    self:run('INSERT INTO logs(file, size, mtime_ns, head, error) VALUES (?, ?, ?, ?, ?)', file,
      st and st.size or 0, st and st.mtime_ns or 0, run and run.head or extract.head(path), err and util.head(err, 500) or nil)
    if not run then return end
    local c = run.counts
    local leaked = 0
    for _, r in ipairs(run.reliability) do leaked = leaked + r.leaked end
    local slot = self:slot_of(file)
    local row = {
      file = file, run_id = run.run_id, kind = run.kind, plan = run.plan, label = run.label, mode = run.mode,
      solver = run.solver, model = run.model, dataset = run.dataset, dataset_digest = run.dataset_digest,
      providers = jsonl.encode(jsonl.array(run.providers)), started_at = run.started_at, started_s = run.started_s,
      finished_at = run.finished_at, finished_s = run.finished_s, duration_s = run.duration_s, status = run.status,
      trials = c.trials, passed = c.passed, failed = c.failed, errors = c.errors, lost = c.lost, leaked = leaked,
      cost_usd = c.cost, solver_cost_usd = c.solver_cost, rejected = run.rejected, rejected_first = run.rejected_first,
      lines = run.lines, torn = run.torn and 1 or 0, last_time = run.last_time,
      lineage = slot and ('watch:' .. slot.watch) or default_lineage(run), slot = slot and slot.slot,
      attempt = slot and slot.attempt, superseded = slot and slot.status == 'abandoned' and 1 or 0,
    }
    local buf = {}
    self:run(RUN_INSERT, values(row, RUN_COLS, buf))
    self:run('INSERT INTO run_events(file, started_json, finished_json, live_json) VALUES (?, ?, ?, ?)', file,
      run.started_line, run.finished_line, jsonl.encode(jsonl.array(run.live)))
    local ins = self:stmt(TRIAL_INSERT)
    for _, t in ipairs(run.trials) do
      t.file = file
      check(ins:run(values(t, TRIAL_COLS, buf)))
    end
    for _, s in ipairs(run.series) do
      s.file = file
      self:run(SERIES_INSERT, values(s, SERIES_COLS, buf))
    end
    for _, r in ipairs(run.reliability) do
      self:run('INSERT INTO reliability(file, provider, trials, errors, lost, leaked) VALUES (?, ?, ?, ?, ?, ?)', file,
        r.provider, r.trials, r.errors, r.lost, r.leaked)
      local codes = util.keys(r.codes)
      table.sort(codes)
      for _, code in ipairs(codes) do
        self:run('INSERT INTO codes(file, provider, code, n) VALUES (?, ?, ?, ?)', file, r.provider, code, r.codes[code])
      end
    end
  end)
  return run, err
end

--- Forget a log that is gone (its rows and detection points go with it).
function Store:forget(file)
  self:tx(function() self:run('DELETE FROM logs WHERE file = ?', file) end)
end

-- ---- watches' journals ---------------------------------------------------------------------

--- What a watch's journal says (its events, as read): the options it recorded, every slot's
--- attempts {slot, attempt, status, due_s, file, reason}, the missed ranges {first, last,
--- reason}. Journal records are checked like a log's.
---@param events table[]
---@return table {options, slots = {...}, missed = {...}}
function store.fold_journal(events)
  local out = { slots = {}, missed = {}, options = nil }
  local by = {}
  for _, e in ipairs(events) do
    if type(e) == 'table' then
      if e.event == 'watch_started' and type(e.detect) == 'table' then out.options = e.detect end
      local slot = math.tointeger(e.slot)
      local attempt = math.tointeger(e.attempt) or 1
      if e.event == 'slot' and slot and slot >= 0 and attempt >= 1 and attempt <= 1000 then
        local key = slot .. ':' .. attempt
        local s = by[key]
        if not s then
          s = { slot = slot, attempt = attempt }
          by[key] = s
          out.slots[#out.slots + 1] = s
        end
        s.status = extract.name(e.status, 32) or s.status
        s.due_s = type(e.due_s) == 'number' and e.due_s == e.due_s and e.due_s or s.due_s
        local file = type(e.file) == 'string' and e.file:match('^[%w][%w._-]*%.jsonl$') and #e.file <= 255 and e.file or nil
        s.file = file or s.file
        s.reason = extract.text(e.reason, 200) or s.reason
      elseif e.event == 'slots_missed' then
        local first, last = math.tointeger(e.first), math.tointeger(e.last)
        if first and last and first >= 0 and last >= first then
          out.missed[#out.missed + 1] = { first = first, last = last, reason = extract.name(e.reason, 32) or 'missed' }
        end
      end
    end
  end
  table.sort(out.slots, function(a, b) if a.slot ~= b.slot then return a.slot < b.slot end return a.attempt < b.attempt end)
  return out
end

--- Apply a watch's journal: its slots and missed ranges replace what the store held of it, and
--- the runs it names join its lineage (`watch:<name>`; an abandoned attempt is superseded).
---@param name string the watch's name
---@param j table store.fold_journal's result
function Store:apply_journal(name, j)
  self:tx(function()
    local lineage = 'watch:' .. name
    self:run('DELETE FROM slots WHERE watch = ?', name)
    self:run('DELETE FROM missed WHERE watch = ?', name)
    -- runs the journal no longer names go back to their plan's lineage
    for _, r in ipairs(self:all('SELECT file, plan, kind FROM runs WHERE lineage = ?', lineage)) do
      self:run('UPDATE runs SET lineage = ?, slot = NULL, attempt = NULL, superseded = 0 WHERE file = ?',
        default_lineage(r), r.file)
    end
    for _, s in ipairs(j.slots) do
      self:run('INSERT INTO slots(watch, slot, attempt, status, due_s, file, reason) VALUES (?, ?, ?, ?, ?, ?, ?)', name,
        s.slot, s.attempt, s.status, s.due_s, s.file, s.reason)
      if s.file then
        self:run('UPDATE runs SET lineage = ?, slot = ?, attempt = ?, superseded = ? WHERE file = ?', lineage, s.slot,
          s.attempt, s.status == 'abandoned' and 1 or 0, s.file)
      end
    end
    for _, m in ipairs(j.missed) do
      self:run('INSERT OR REPLACE INTO missed(watch, first, last, reason) VALUES (?, ?, ?, ?)', name, m.first, m.last, m.reason)
    end
    self:run('INSERT OR IGNORE INTO lineages(lineage, processed, digest) VALUES (?, 0, ?)', lineage, '')
    self:run('UPDATE lineages SET options = ? WHERE lineage = ?', j.options and jsonl.encode(j.options) or nil, lineage)
  end)
end

-- ---- detection -----------------------------------------------------------------------------

local function lineage_order(lineage)
  if lineage:match('^watch:') then return 'r.slot, r.attempt, r.file' end
  return 'r.started_s, r.file'
end

--- The runs detection judges in a lineage, in order: file, run_id, size.
function Store:judged_runs(lineage)
  return self:all('SELECT r.file, r.run_id, r.started_s, l.size, l.mtime_ns FROM runs r JOIN logs l ON l.file = r.file ' ..
    "WHERE r.lineage = ? AND r.superseded = 0 AND r.trials > 0 AND r.status IN ('finished', 'stopped', 'cleanup_failed') " ..
    'ORDER BY ' .. lineage_order(lineage), lineage)
end

local function series_key(provider, phase, primitive, metric)
  return table.concat({ provider, phase, primitive, metric }, '/')
end

local function change_key(lineage, c)
  return table.concat({ lineage, c.provider, c.phase, c.primitive, c.metric, c.first_run_id }, '|')
end

--- Judge the runs of a lineage the store has not judged yet (all of them when the runs already
--- judged changed), in one transaction. o: detection options (detect.options); default the
--- lineage's recorded ones. Returns the changes confirmed now (rows of the changes table).
---@param lineage string
---@param o? table
---@return table[] changes
function Store:detect(lineage, o)
  local lin = self:one('SELECT options, processed, digest FROM lineages WHERE lineage = ?', lineage)
  local opts = o or (lin and lin.options and jsonl.decode(lin.options)) or nil
  opts = detect.options(opts)
  local runs = self:judged_runs(lineage)
  local new = {}
  self:tx(function()
    -- the runs already judged must be the first ones now, unchanged; else judge them all again
    local processed = lin and lin.processed or 0
    -- the digest starts from the method and its options: either changed, every run is judged again
    local h = crypto.sha256_hex(detect.VERSION .. jsonl.encode(opts))
    local digests = {}
    for i, r in ipairs(runs) do
      h = crypto.sha256_hex(h .. '\n' .. r.file .. '\0' .. tostring(r.size) .. '\0' .. tostring(r.mtime_ns))
      digests[i] = h
    end
    local from
    if lin and processed > 0 and processed <= #runs and digests[processed] == lin.digest then
      from = processed + 1
    else
      self:run('DELETE FROM points WHERE lineage = ?', lineage)
      self:run('DELETE FROM changes WHERE lineage = ?', lineage)
      self:run('DELETE FROM detect_state WHERE lineage = ?', lineage)
      self:run('DELETE FROM lineage_series WHERE lineage = ?', lineage)
      self:run('UPDATE runs SET lineage_index = NULL WHERE lineage = ?', lineage)
      from = 1
    end
    local states = {}
    for _, row in ipairs(self:all('SELECT key, state FROM detect_state WHERE lineage = ?', lineage)) do
      states[row.key] = jsonl.decode(row.state)
    end
    local touched = {}
    local POINT = 'INSERT OR REPLACE INTO points(lineage, provider, phase, primitive, metric, lineage_index, file, run_id, ' ..
      'started_s, value, lo, hi, verdict, w_first, w_last, w_runs, w_value, w_lo, w_hi, n, p95, p95_lo, p95_hi) ' ..
      'VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)'
    local function point(index, r, provider, phase, primitive, metric, pt, verdict, b, s)
      self:run(POINT, lineage, provider, phase, primitive, metric, index, r.file, r.run_id, r.started_s, pt.value, pt.lo,
        pt.hi, verdict, b and b.first, b and b.last, b and b.runs, b and b.value, b and b.lo, b and b.hi, s and s.n,
        s and s.p95, s and s.p95_lo, s and s.p95_hi)
    end
    local function judge(index, r, provider, phase, primitive, metric, kind, p, s)
      local key = series_key(provider, phase, primitive, metric)
      p.index, p.run_id, p.file = index, r.run_id, r.file
      local state, verdict, b, change = detect.step(key, kind, states[key] or detect.state(), p, opts)
      states[key], touched[key] = state, true
      local pt = state.hist[#state.hist]
      if state.cand then pt = state.cand.points[#state.cand.points] end
      if verdict == 'change' then pt = change.points[#change.points] end
      point(index, r, provider, phase, primitive, metric, pt, verdict, b, s)
      if change then
        local first = change.points[1]
        local c = { lineage = lineage, provider = provider, phase = phase, primitive = primitive, metric = metric,
          direction = change.direction, regression = detect.regression(change) and 1 or 0,
          first_index = change.first_index, confirmed_index = change.confirmed_index, first_file = first.file,
          first_run_id = first.run_id, confirmed_file = r.file, confirmed_run_id = r.run_id, value = change.value,
          baseline_value = change.baseline.value, baseline_lo = change.baseline.lo, baseline_hi = change.baseline.hi,
          ratio = change.ratio }
        c.key = change_key(lineage, c)
        c.evidence = jsonl.encode({ metric = metric, kind = kind, direction = change.direction, options = opts,
          baseline = change.baseline, runs = change.points, value = change.value, ratio = change.ratio })
        self:run('INSERT OR REPLACE INTO changes(key, lineage, provider, phase, primitive, metric, direction, regression, ' ..
          'first_index, confirmed_index, first_file, first_run_id, confirmed_file, confirmed_run_id, value, ' ..
          'baseline_value, baseline_lo, baseline_hi, ratio, evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
          c.key, lineage, provider, phase, primitive, metric, c.direction, c.regression, c.first_index,
          c.confirmed_index, c.first_file, c.first_run_id, c.confirmed_file, c.confirmed_run_id, c.value,
          c.baseline_value, c.baseline_lo, c.baseline_hi, c.ratio, c.evidence)
        new[#new + 1] = c
      end
    end
    local count = 'INSERT INTO lineage_series(lineage, provider, phase, primitive, metric, points) VALUES (?, ?, ?, ?, ?, 1) ' ..
      'ON CONFLICT(lineage, provider, phase, primitive, metric) DO UPDATE SET points = points + 1'
    for index = from, #runs do
      local r = runs[index]
      self:run('UPDATE runs SET lineage_index = ? WHERE file = ?', index, r.file)
      for _, s in ipairs(self:all('SELECT provider, phase, primitive, n, p50, p50_lo, p50_hi, p95, p95_lo, p95_hi, n_blocks, ' ..
          'block_lo, block_hi FROM series WHERE file = ? ORDER BY provider, phase, primitive', r.file)) do
        self:run(count, lineage, s.provider, s.phase, s.primitive, 'p50')
        local lo, hi = s.p50_lo, s.p50_hi
        if (s.n_blocks or 0) >= 2 and s.block_lo then lo, hi = s.block_lo, s.block_hi end
        if s.p50 and lo and not extract.DERIVED[s.primitive] then
          judge(index, r, s.provider, s.phase, s.primitive, 'p50', 'latency', { value = s.p50, lo = lo, hi = hi }, s)
        else -- shown, not judged
          point(index, r, s.provider, s.phase, s.primitive, 'p50', { value = s.p50, lo = lo, hi = hi }, nil, nil, s)
        end
      end
      for _, rel in ipairs(self:all('SELECT provider, trials, errors, lost FROM reliability WHERE file = ? ORDER BY provider',
          r.file)) do
        if rel.trials > 0 then
          judge(index, r, rel.provider, '-', '-', 'error_rate', 'rate', { k = rel.errors, n = rel.trials })
          judge(index, r, rel.provider, '-', '-', 'lost_rate', 'rate', { k = rel.lost, n = rel.trials })
          self:run(count, lineage, rel.provider, '-', '-', 'error_rate')
          self:run(count, lineage, rel.provider, '-', '-', 'lost_rate')
        end
      end
    end
    for key in pairs(touched) do
      self:run('INSERT OR REPLACE INTO detect_state(lineage, key, state) VALUES (?, ?, ?)', lineage, key,
        jsonl.encode(states[key]))
    end
    self:run('INSERT OR IGNORE INTO lineages(lineage, processed, digest) VALUES (?, 0, ?)', lineage, '')
    self:run('UPDATE lineages SET processed = ?, digest = ? WHERE lineage = ?', #runs, digests[#runs] or '', lineage)
  end)
  return new
end

-- ---- the folder ------------------------------------------------------------------------------

--- The run logs of the folder: the .jsonl files directly in it that are regular files.
function Store:log_files()
  local out = {}
  for _, name in ipairs(fs.list(self.dir) or {}) do
    if name:match('%.jsonl$') then
      local st = fs.lstat(fs.join(self.dir, name))
      if st and st.type == 'file' then out[#out + 1] = { file = name, st = st } end
    end
  end
  return out
end

--- The watches' journals of the folder: {name, path, st}.
function Store:journal_files()
  local out, dir = {}, fs.join(self.dir, store.JOURNALS)
  for _, name in ipairs(fs.list(dir) or {}) do
    local w = name:match('^([%w][%w._-]*)%.jsonl$')
    local st = w and fs.lstat(fs.join(dir, name))
    if st and st.type == 'file' and #w <= 64 then out[#out + 1] = { name = w, path = fs.join(dir, name), st = st } end
  end
  return out
end

--- Bring the store up to the folder: logs that changed are read again, logs that are gone
--- forgotten, every journal applied, every lineage whose runs changed judged. o.on_progress(done,
--- total) after each log read. Returns {read, unchanged, removed, errors = {file: err}, changes}.
---@param o? {on_progress?: fun(done: integer, total: integer), detect?: table}
function Store:sync(o)
  o = o or {}
  local out = { read = 0, unchanged = 0, removed = 0, errors = {}, changes = {} }
  local files, present = self:log_files(), {}
  local stale = {}
  for _, f in ipairs(files) do
    present[f.file] = true
    if self:current(f.file, f.st) then out.unchanged = out.unchanged + 1 else stale[#stale + 1] = f.file end
  end
  -- journals first, so a log read now joins its watch's lineage at once
  local results = require('cseng.results.log')
  for _, j in ipairs(self:journal_files()) do
    local ok, events = pcall(results.read, j.path)
    if ok then self:apply_journal(j.name, store.fold_journal(events)) end
  end
  for i, file in ipairs(stale) do
    local _, err = self:ingest(file)
    out.read = out.read + 1
    if err then out.errors[file] = err end
    if o.on_progress then o.on_progress(i, #stale) end
  end
  for _, row in ipairs(self:all('SELECT file FROM logs')) do
    if not present[row.file] then self:forget(row.file); out.removed = out.removed + 1 end
  end
  for _, row in ipairs(self:all('SELECT DISTINCT lineage FROM runs WHERE lineage IS NOT NULL ORDER BY lineage')) do
    for _, c in ipairs(self:detect(row.lineage)) do out.changes[#out.changes + 1] = c end
  end
  -- a lineage left without runs (its logs are gone) keeps nothing but a watch's options
  self:tx(function()
    local gone = "lineage NOT IN (SELECT lineage FROM runs WHERE lineage IS NOT NULL)"
    self:run('DELETE FROM changes WHERE ' .. gone)
    self:run('DELETE FROM points WHERE ' .. gone)
    self:run('DELETE FROM detect_state WHERE ' .. gone)
    self:run('DELETE FROM lineage_series WHERE ' .. gone)
    self:run('DELETE FROM lineages WHERE ' .. gone .. " AND lineage NOT IN (SELECT 'watch:' || watch FROM slots)")
    self:run("UPDATE lineages SET processed = 0, digest = '' WHERE " .. gone)
  end)
  return out
end

--- Empty the store and read every log again (the logs are the source of truth).
function Store:rebuild(o)
  self:tx(function()
    for _, t in ipairs({ 'logs', 'lineages', 'lineage_series', 'detect_state', 'changes', 'slots', 'missed' }) do
      self:run('DELETE FROM ' .. t)
    end
  end)
  return self:sync(o)
end

-- ---- queries ---------------------------------------------------------------------------------

--- The lineages with their runs, first and last start, providers and changes.
function Store:lineages()
  return self:all('SELECT lineage, COUNT(*) AS runs, SUM(lineage_index IS NOT NULL) AS judged, MIN(started_at) AS first, ' ..
    'MAX(started_at) AS last, (SELECT COUNT(*) FROM changes c WHERE c.lineage = r.lineage) AS changes ' ..
    'FROM runs r WHERE lineage IS NOT NULL GROUP BY lineage ORDER BY MAX(started_s) DESC, lineage')
end

--- The series of a lineage's judged runs: {provider, phase, primitive, metric, points}: the
--- median of every primitive (judged, but for derived ones), and the rates.
function Store:series_list(lineage)
  return self:all('SELECT provider, phase, primitive, metric, points FROM lineage_series WHERE lineage = ? ' ..
    'ORDER BY provider, phase, primitive, metric', lineage)
end

local SERIES = 'SELECT lineage_index AS i, run_id, started_s, value, lo, hi, verdict, w_value, w_lo, w_hi, n, ' ..
  'p95, p95_lo, p95_hi FROM points WHERE lineage = ? AND provider = ? AND phase = ? AND primitive = ? AND metric = ? ' ..
  'ORDER BY lineage_index'

--- One series of a lineage, run by run: each run's point (its median or rate and interval, its
--- verdict and window where it was judged, its p95 and CI). metric: 'p50' or a rate.
function Store:series(lineage, provider, phase, primitive, metric)
  return self:all(SERIES, lineage, provider, phase, primitive, metric)
end

--- The same series as one array per column ({i = {...}, value = {...}, ...}; a NULL is `null`)
--- and its length: a year of hourly runs without a table per run.
function Store:series_arrays(null, lineage, provider, phase, primitive, metric)
  local cols, n, code = self:stmt(SERIES):arrays(null, lineage, provider, phase, primitive, metric)
  if not cols then check(nil, n, code) end
  return cols, n
end

--- The changes of a lineage (every lineage when nil), in order.
function Store:changes(lineage)
  if lineage then return self:all('SELECT * FROM changes WHERE lineage = ? ORDER BY first_index, key', lineage) end
  return self:all('SELECT * FROM changes ORDER BY lineage, first_index, key')
end

--- A run by its run id or file.
function Store:run_row(id)
  return self:one('SELECT * FROM runs WHERE run_id = ? OR file = ? ORDER BY file LIMIT 1', id, id)
end

--- Every row of every table, in key order (the rebuilt store equals the one kept current).
function Store:dump()
  local out = {}
  local keys = { logs = 'file', runs = 'file', run_events = 'file', series = 'file, provider, phase, primitive',
    reliability = 'file, provider', codes = 'file, provider, code', trials = 'file, seq',
    points = 'lineage, provider, phase, primitive, metric, lineage_index', changes = 'key', detect_state = 'lineage, key',
    lineage_series = 'lineage, provider, phase, primitive, metric', lineages = 'lineage', slots = 'watch, slot, attempt',
    missed = 'watch, first' }
  for t, k in pairs(keys) do out[t] = self:all('SELECT * FROM ' .. t .. ' ORDER BY ' .. k) end
  return out
end

return store
