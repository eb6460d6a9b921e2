-- The history store (lua/cseng/history/): run logs read as hostile input and indexed in SQLite,
-- kept current file by file and rebuilt from the logs to the same rows, a watch's journal making
-- its runs one lineage, regression detection over the stored runs, and the viewer's run index
-- restored from the store equal to the one read from the logs.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local stats = require('cseng.lib.stats')
local sqlite = require('cseng.sqlite')
local extract = require('cseng.history.extract')
local store = require('cseng.history.store')

local H = require('spec.helpers.common')
local HH = require('spec.helpers.history')
local fixtures = require('spec.browser.fixtures')
teardown(H.remove_tempdirs)

local function write_lines(path, lines) assert(fs.write(path, table.concat(lines, '\n') .. '\n')) end
local function enc(t) return jsonl.encode(t) end

local STARTED = { event = 'run_started', run_id = 'hostile-1', time = '2026-12-01T10:00:00.000000Z', kind = 'startup',
  plan = 'startup', providers = { 'lizard' }, mode = 'lockstep' }
local function trial(over)
  local t = { event = 'startup_trial', run_id = 'hostile-1', time = '2026-12-01T10:00:01.000000Z', provider = 'lizard',
    round = 1, ok = true, create_ms = 50, first_exec_ms = 20, ready_ms = 70, cleanup_ok = true, cleanup_ms = 5 }
  for k, v in pairs(over or {}) do t[k] = v end
  return t
end

describe('the history store', function()
  local dir
  before_each(function() dir = H.tempdir('cseng-history-') end)

  it('reads an arena log: trials, series with CIs, reliability', function()
    local path = HH.arena_log(fs.join(dir, 'a.jsonl'), { run_id = 'a-1', samples = 12, warmups = 2,
      create = function(i) return 40 + i end, error = function(i) return i == 3 and 'ECREATE' or nil end,
      lost = function(i) return i == 5 end })
    local run = assert(extract.read(path))
    assert.equal('a-1', run.run_id)
    assert.equal('startup', run.kind)
    assert.equal('finished', run.status)
    assert.equal(14, #run.trials)
    assert.same({ trials = 12, passed = 10, failed = 0, errors = 2, lost = 1, cost = 0, solver_cost = 0 }, run.counts)
    local by = {}
    for _, s in ipairs(run.series) do by[s.primitive] = s end
    -- create: every measured trial whose create succeeded (11; the ENOSANDBOX one had created)
    local xs = {}
    for i = 1, 12 do if i ~= 3 then xs[#xs + 1] = 40 + i end end
    assert.equal(11, by.create.n)
    assert.equal(stats.median(xs), by.create.p50)
    local lo, hi = stats.bootstrap_ci(xs, { seed = stats.hash('lizard/measured/create'), reps = extract.REPS })
    assert.equal(lo, by.create.p50_lo)
    assert.equal(hi, by.create.p50_hi)
    assert.equal(10, by.ready.n) -- ready only when ready
    assert.same({ provider = 'lizard', trials = 12, errors = 2, lost = 1, leaked = 0, codes = { ECREATE = 1, ENOSANDBOX = 1 } },
      run.reliability[1])
  end)

  it('reads a task log: phases as primitives, a rerun replacing its task\'s record', function()
    local _, path = fixtures.task_run(dir, 'tasks-1', { { task_id = 't1', outcome = 'passed' },
      { task_id = 't2', outcome = 'error', error_code = 'ETIMEDOUT', error_stage = 'verify', error = 'timed out' } })
    local text = assert(fs.read(path))
    local rerun = fixtures.trial(9, { task_id = 't2', outcome = 'passed' })
    rerun.event, rerun.run_id, rerun.rerun, rerun.time = 'trial', 'tasks-1', true, '2026-12-01T11:00:00.000000Z'
    assert(fs.write(path, text .. enc({ event = 'run_resumed', run_id = 'tasks-1', time = rerun.time }) .. '\n' .. enc(rerun) .. '\n' ..
      enc({ event = 'run_finished', run_id = 'tasks-1', time = rerun.time, status = 'finished' }) .. '\n'))
    local run = assert(extract.read(path))
    assert.equal(2, #run.trials)
    assert.equal('passed', run.trials[2].outcome)
    assert.is_true(run.trials[2].rerun)
    assert.equal(2, run.counts.passed)
    local prims = {}
    for _, s in ipairs(run.series) do prims[s.phase] = s.primitive end
    assert.same({ start = 'create', upload = 'put', prepare = 'exec', instruction_write = 'put', solve = 'solve',
      verify = 'verify', stop = 'destroy' }, prims)
  end)

  it('refuses what a hostile log plants, names the first refusal, and stores nothing of it', function()
    local path = fs.join(dir, 'hostile.jsonl')
    local deep = string.rep('[', 200) .. string.rep(']', 200)
    write_lines(path, {
      enc(STARTED),
      enc(trial({ provider = "x'); DROP TABLE runs; --" })),        -- 2: not a provider name
      enc(trial({ provider = '../../etc/passwd' })),                -- 3
      enc(trial({ error_code = 'E1; DELETE FROM trials', ok = false, error_stage = 'create' })), -- 4: not a code
      enc(trial({ create_ms = -5, ready_ms = 1e300 })):gsub('1e%+300', '1e999'), -- 5: a latency of Infinity: dropped
      '{"event":"startup_trial","provider":"lizard","create_ms":NaN}', -- 6: not JSON
      '{"event":"startup_trial",' .. '"x":' .. deep .. '}',          -- 7: nested past the depth limit
      'this is not JSON',                                           -- 8
      '[1, 2, 3]',                                                  -- 9: not an object
      enc({ event = 'trial', run_id = 'hostile-1', task_id = { 'a table' }, provider = 'lizard', outcome = 'passed' }), -- 10
      enc({ event = 'trial', run_id = 'hostile-1', task_id = string.rep('t', 5000), provider = 'lizard', outcome = 'passed' }), -- 11
      enc({ event = 'allocated', run_id = 'hostile-1', provider = 'lizard', sandbox_id = 'sb\nforged line' }), -- 12
      enc(trial({ create_ms = 42 })),                               -- 13: fine
      enc({ event = 'run_finished', run_id = 'hostile-1', time = 'yesterday', status = "finished'; --" }),
    })
    local S = assert(store.open(dir))
    local run = assert(S:ingest('hostile.jsonl'))
    assert.equal('hostile.jsonl:2: startup_trial: provider is not a provider name', run.rejected_first)
    assert.equal(10, run.rejected) -- lines 2, 3, 4, 6, 7, 8, 9, 10, 11 and 12
    local rows = S:all('SELECT provider, code, create_ms, ready_ms FROM trials WHERE file = ? ORDER BY seq', 'hostile.jsonl')
    assert.equal(2, #rows)
    for _, r in ipairs(rows) do
      assert.equal('lizard', r.provider)
      assert.is_nil(r.code)
    end
    assert.is_nil(rows[1].create_ms) -- negative: dropped
    assert.is_nil(rows[1].ready_ms)  -- Infinity is not a latency
    assert.equal(42, rows[2].create_ms)
    local r = S:run_row('hostile-1')
    assert.equal('unknown', r.status) -- "finished'; --" is not a status name
    assert.is_nil(r.finished_at)      -- "yesterday" is not a time
    assert.equal(0, #S:all("SELECT * FROM trials WHERE provider LIKE '%DROP%' OR task LIKE '%DROP%'"))
    assert.truthy(S:one("SELECT name FROM sqlite_master WHERE name = 'runs'"))
    assert.equal('ok', S:one('PRAGMA integrity_check').integrity_check)
    S:close()
  end)

  it('survives a fuzzed log: never raises, stores only checked values, stays consistent', function()
    local base = fs.join(dir, 'base.jsonl')
    HH.arena_log(base, { run_id = 'fuzz-1', samples = 8, warmups = 1, create = function(i) return 30 + i end })
    local text = assert(fs.read(base))
    local rng = stats.rng(20261207)
    local S = assert(store.open(dir))
    local junk = { '"', '{', '}', '\n', '\0', '\255', 'NaN', '1e999', '-', ',', '[', '"provider":"..\\/x"', '\\u0000', '"ok":"yes"' }
    for case = 1, 200 do
      local b = { text:byte(1, -1) }
      for _ = 1, 1 + rng.int(6) do
        local at = rng.int(#b)
        local kind = rng.int(4)
        if kind == 1 then b[at] = rng.int(256) - 1
        elseif kind == 2 then table.remove(b, at)
        else
          local j = junk[rng.int(#junk)]
          for k = #j, 1, -1 do table.insert(b, at, j:byte(k)) end
        end
      end
      local chunks = {}
      for i = 1, #b, 4096 do chunks[#chunks + 1] = string.char(table.unpack(b, i, math.min(#b, i + 4095))) end
      local name = string.format('fuzz-%03d.jsonl', case)
      assert(fs.write(fs.join(dir, name), table.concat(chunks)))
      local ok, err = pcall(S.ingest, S, name)
      assert(ok, name .. ': ' .. tostring(err))
    end
    for _, t in ipairs(S:all('SELECT provider, code, mode, create_ms, ready_ms, cleanup_ms FROM trials')) do
      assert.matches('^[%w][%w_.:@/+-]*$', t.provider)
      if t.code then assert.matches('^[A-Z][A-Z0-9_]*$', t.code) end
      for _, k in ipairs({ 'create_ms', 'ready_ms', 'cleanup_ms' }) do
        local v = t[k]
        if v then assert.is_true(v == v and v >= 0 and v <= extract.MAX_MS, k .. ' ' .. tostring(v)) end
      end
    end
    for _, s in ipairs(S:all('SELECT p50, p50_lo, p50_hi FROM series')) do
      assert.is_true(s.p50 >= s.p50_lo and s.p50 <= s.p50_hi)
    end
    assert.equal('ok', S:one('PRAGMA integrity_check').integrity_check)
    assert.equal(0, #S:all('PRAGMA foreign_key_check'))
    S:close()
  end)

  it('stays current file by file, forgets what is gone, and a rebuild gives the same rows', function()
    local files = HH.watch_folder(dir, 'w', {
      { create = function(i) return 50 + HH.jitter(1, i, 3) end }, { create = function(i) return 50 + HH.jitter(2, i, 3) end },
      { create = function(i) return 50 + HH.jitter(3, i, 3) end },
    }, { window = 5, min_window = 2, hold = 2 })
    HH.arena_log(fs.join(dir, 'manual.jsonl'), { run_id = 'manual-1', plan = 'other' })
    assert(fs.write(fs.join(dir, 'notes.jsonl'), 'not a log\n'))
    local S = assert(store.open(dir))
    local r = S:sync()
    assert.equal(5, r.read)
    assert.truthy(r.errors['notes.jsonl'])
    assert.equal(3, #S:judged_runs('watch:w'))
    assert.equal('plan:other', S:run_row('manual-1').lineage)
    local again = S:sync()
    assert.same({ read = 0, unchanged = 5, removed = 0 }, { read = again.read, unchanged = again.unchanged, removed = again.removed })
    -- a run appended to the watch: only it is read, and judged from the saved state
    local more = HH.watch_folder(dir, 'w', {
      { create = function(i) return 50 + HH.jitter(1, i, 3) end }, { create = function(i) return 50 + HH.jitter(2, i, 3) end },
      { create = function(i) return 50 + HH.jitter(3, i, 3) end }, { create = function(i) return 51 + HH.jitter(4, i, 3) end },
    }, { window = 5, min_window = 2, hold = 2 })
    assert.equal(files[3], more[3])
    local step = S:sync()
    assert.equal(4, #S:judged_runs('watch:w'))
    assert.is_true(step.read >= 1)
    fs.remove(fs.join(dir, 'manual.jsonl'))
    assert.equal(1, S:sync().removed)
    assert.is_nil(S:run_row('manual-1'))
    assert.is_nil(HH.rebuild_diff(S))
    S:close()
  end)

  it('replaces a store that is corrupt or of another schema, and refuses a symbolic link', function()
    HH.arena_log(fs.join(dir, 'r.jsonl'), { run_id = 'r-1' })
    assert(fs.write(fs.join(dir, store.FILE), string.rep('garbage ', 1000)))
    local S = assert(store.open(dir))
    assert.equal(1, S:sync().read)
    S:close()
    local db = assert(sqlite.open(fs.join(dir, store.FILE)))
    assert(db:exec('PRAGMA user_version = 99'))
    db:close()
    S = assert(store.open(dir))
    assert.equal(1, S:sync().read) -- a fresh store: read again
    S:close()
    local other = H.tempdir('cseng-history-victim-')
    local victim = fs.join(other, 'victim')
    assert(fs.write(victim, 'keep me'))
    local d2 = H.tempdir('cseng-history-link-')
    assert(fs.symlink(victim, fs.join(d2, store.FILE)))
    local S2, err = store.open(d2)
    assert.is_nil(S2)
    assert.matches(store.FILE, tostring(err))
    assert.equal('keep me', fs.read(victim))
  end)

  it('judges a watch\'s runs: one change at the step, none on jitter, reliability too', function()
    local runs = {}
    for k = 1, 10 do
      local base = k <= 5 and 50 or 80
      runs[k] = { samples = 15, create = function(i) return base + HH.jitter(k, i, 4) end,
        error = function(i) return k >= 9 and i <= 6 and 'ECREATE' or nil end }
    end
    HH.watch_folder(dir, 'step', runs, { window = 5, min_window = 3, hold = 2, min_change = 0.1 })
    local flat = {}
    for k = 1, 10 do flat[k] = { samples = 15, create = function(i) return 50 + HH.jitter(k, i, 5) end } end
    HH.watch_folder(dir, 'flat', flat, { window = 5, min_window = 3, hold = 2, min_change = 0.1 })
    local S = assert(store.open(dir))
    S:sync()
    local changes = S:changes('watch:step')
    local latency, rates = {}, {}
    for _, c in ipairs(changes) do
      if c.metric == 'p50' and c.primitive == 'create' then latency[#latency + 1] = c end
      if c.metric == 'error_rate' then rates[#rates + 1] = c end
    end
    assert.equal(1, #latency)
    assert.equal(6, latency[1].first_index)
    assert.equal(7, latency[1].confirmed_index)
    assert.equal('up', latency[1].direction)
    assert.equal(1, latency[1].regression)
    assert.equal('step-000006', latency[1].first_run_id)
    local ev = jsonl.decode(latency[1].evidence)
    assert.equal(2, #ev.runs)
    assert.is_true(ev.baseline.hi < ev.runs[1].lo)
    assert.equal(1, #rates)
    assert.equal(9, rates[1].first_index)
    for _, c in ipairs(S:changes('watch:flat')) do error('a change on jitter: ' .. c.key) end
    S:close()
  end)
end)

describe('cseng history and cseng compare --history', function()
  it('print the lineages and judge a run against its window, by run id', function()
    local dir = H.tempdir('cseng-history-cli-')
    local runs = {}
    for k = 1, 9 do
      local base = k <= 5 and 50 or 80
      runs[k] = { samples = 15, create = function(i) return base + HH.jitter(k, i, 4) end }
    end
    HH.watch_folder(dir, 'cli', runs, { window = 5, min_window = 3, hold = 2 })
    local h = H.cseng({ 'history', dir })
    assert.equal(0, h.code, h.stderr)
    assert.matches('watch:cli: 9 run%(s%), 9 judged', h.stdout)
    assert.matches('change: REGRESSION lizard measured create p50 up from run 6 %(cli%-000006%)', h.stdout)
    local j = H.cseng({ 'history', dir, '--json', '--lineage', 'watch:cli' })
    assert.equal(0, j.code, j.stderr)
    local doc = jsonl.decode(j.stdout)
    assert.equal(1, #doc.lineages)
    assert.equal(6, doc.lineages[1].changes[1].first_index)
    -- the run where the change began, against its window: it separates upward
    local c = H.cseng({ 'compare', '--history', 'cli-000006', '--results', dir, '--fail-on-regression' })
    assert.equal(1, c.code, c.stderr)
    assert.matches('# cli%-000006 against its history', c.stdout)
    assert.matches('| lizard | measured | create | p50 | [%d.]+ ms | .* | %*%*candidate %(slower%)%*%* |', c.stdout)
    local latest = H.cseng({ 'compare', '--history', '--results', dir, '--fail-on-regression' })
    assert.equal(0, latest.code, latest.stderr) -- run 9: the new regime is its baseline
    assert.matches('cli%-000009 against its history', latest.stdout)
    -- two runs by their ids, found through the store
    local ab = H.cseng({ 'compare', 'cli-000001', 'cli-000009', '--results', dir })
    assert.equal(0, ab.code, ab.stderr)
    assert.matches('%*%*A%*%* %(baseline%): `cli%-000001`', ab.stdout)
    local none = H.cseng({ 'compare', '--history', 'no-such-run', '--results', dir })
    assert.equal(1, none.code)
    assert.matches('no run no%-such%-run in ', none.stderr)
  end)
end)

describe('the viewer\'s run index restored from the store', function()
  it('equals the index read from the logs, page for page', function()
    local index = require('cseng.view.index')
    local app = require('cseng.view.app')
    local history = require('cseng.view.history')
    local dir = H.tempdir('cseng-history-view-')
    local fx = fixtures.folder(dir)
    fixtures.agents_run(dir)
    HH.arena_log(fs.join(dir, 'arena-1.jsonl'), { run_id = 'arena-1', samples = 6, providers = { 'fast', 'slow' },
      error = function(i, p) return p == 'slow' and i == 2 and 'ECREATE' or nil end })
    local S = assert(store.open(dir))
    S:sync()
    S:close()
    local read = index.new({ dir }):refresh()
    local stores = history.open({ dir })
    local n = 0
    local restored = index.new({ dir }, { restore = function(log)
      local ok = history.restore(stores, log)
      if ok then n = n + 1 end
      return ok
    end }):refresh()
    assert.equal(4, n) -- a, b, agents, arena (not the cut copy, the foreign file, the other tool's)
    assert.equal(#read:list(), #restored:list())
    for _, la in ipairs(read:list()) do
      local id = index.id_of(la)
      local lb = restored:find(id)
      assert.truthy(lb, id)
      local ra, rb = app.run_row(la), app.run_row(lb)
      assert.is_nil(H.diff(rb, ra, id .. ' row'))
      if not la.error then
        local da, db = app.run_doc(read, la, { offline = true }), app.run_doc(restored, lb, { offline = true })
        da.catalogue_version, db.catalogue_version, da.version, db.version = nil, nil, nil, nil
        assert.is_nil(H.diff(db, da, id .. ' run_doc'))
        local ta, tb = app.trials_doc(la, { limit = 500 }), app.trials_doc(lb, { limit = 500 })
        ta.version, tb.version = nil, nil
        assert.is_nil(H.diff(tb, ta, id .. ' trials'))
        if la.kind ~= 'startup' then
          local ga, gb = app.groups(la), app.groups(lb)
          ga.version, gb.version = nil, nil
          assert.is_nil(H.diff(gb, ga, id .. ' groups'))
        end
      end
    end
    assert.truthy(fx.ids.a)
    history.close(stores)
  end)
end)
