-- `cseng view` without a browser: the incremental byte-offset index (appended bytes only, a torn
-- last line left for later, a rewritten file read again), bad logs listed with their error, the
-- JSON API (paging, filters, one trial, compare), the token and Host checks, the refusal of a
-- non-loopback --host without --token, the markdown's escaping, and the export's files.
local fs = require('cseng.fs')
local http = require('cseng.http')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local task = require('cseng.task')
local sys = require('cseng.sys')
local app = require('cseng.view.app')
local index = require('cseng.view.index')
local markdown = require('cseng.view.markdown')
local view = require('cseng.cli.commands.view')

local fixtures = require('spec.browser.fixtures')

local tmp
setup(function() tmp = assert(fs.tempdir('cseng-view-spec-')) end)
teardown(function() fs.remove_tree(tmp) end)

local function line(rec) return jsonl.encode(rec) .. '\n' end

describe('the index', function()
  it('reads only what was appended, and leaves a torn last line until its newline arrives', function()
    local dir = fs.join(tmp, 'inc')
    assert(fs.mkdir_p(dir))
    local p = fs.join(dir, 'r.jsonl')
    local head = line { event = 'run_started', run_id = 'r', time = '2026-12-01T00:00:00Z', plan = 'p', provider = 'x', mode = 'cold' }
      .. line { event = 'trial', run_id = 'r', task_id = 't1', provider = 'x', outcome = 'passed', phases = { start_seconds = 0.5 } }
      .. line { event = 'trial', run_id = 'r', task_id = 't2', provider = 'x', outcome = 'error', error_code = 'ECREATE', error_stage = 'start' }
    assert(fs.write(p, head))
    local cat = index.new({ dir }):refresh()
    local log = cat:find('r')
    assert.equal(2, log.n)
    assert.equal(#head, log.offset)
    local third = line { event = 'trial', run_id = 'r', task_id = 't3', provider = 'y', outcome = 'failed', reward = 0 }
    assert(fs.append(p, third:sub(1, 20)))
    cat:refresh()
    assert.equal(2, log.n)
    assert.equal(#head, log.offset)
    assert.same({ offset = #head, bytes = 20 }, log.torn)
    assert(fs.append(p, third:sub(21)))
    cat:refresh()
    assert.equal(3, log.n) -- 3, not 5: the first two lines were not read again
    assert.is_nil(log.torn)
    assert.equal(#head + #third, log.offset)
    assert.same({ passed = 1, failed = 1, error = 1 }, log.counts)
    assert.equal('t3', log:record(3).task_id)
    -- a rerun (--resume --rerun-errors) replaces the task's record
    local rerun = line { event = 'trial', run_id = 'r', task_id = 't2', provider = 'x', outcome = 'passed', rerun = true }
    assert(fs.append(p, rerun))
    cat:refresh()
    assert.equal(3, log.n)
    assert.same({ passed = 2, failed = 1, error = 0 }, log.counts)
    assert.equal('passed', log.cols.outcome[2])
    assert.equal(0.5, log.phase_sum.start)
    -- a file rewritten shorter is read again from the start
    assert(fs.write(p, line { event = 'run_started', run_id = 'r', time = '2026-12-01T00:00:00Z' }))
    cat:refresh()
    assert.equal(0, log.n)
    -- and so is one replaced by a longer one
    cat:refresh()
    assert(fs.write(p, line { event = 'run_started', run_id = 'r', time = '2026-12-01T00:00:01Z' } .. head))
    cat:refresh()
    assert.equal(2, log.n)
    assert.equal('2026-12-01T00:00:01Z', log.started.time)
  end)

  it('reads a big log in slices of a budget, each ending at a line end', function()
    local dir = fs.join(tmp, 'slices')
    assert(fs.mkdir_p(dir))
    local trials = {}
    for i = 1, 60 do trials[i] = { task_id = string.format('t%02d', i), outcome = 'passed' } end
    local _, p = fixtures.task_run(dir, 'sliced', trials)
    local size = fs.stat(p).size
    local cat = index.new({ dir })
    local seen, steps = {}, 0
    repeat
      cat:refresh(8192)
      local log = cat:find('sliced')
      steps = steps + 1
      seen[#seen + 1] = log.n
      assert.is_true(log.offset == size or log.pending)
      if log.pending then assert.is_nil(log.torn) end
    until not cat.pending or steps > 100
    local log = cat:find('sliced')
    assert.equal(60, log.n)
    assert.equal(size, log.offset)
    assert.is_true(steps >= math.floor(size / 8192), 'steps: ' .. steps)
    assert.is_true(seen[1] > 0 and seen[1] < 60, 'first slice: ' .. seen[1])
    assert.same({ passed = 60, failed = 0, error = 0 }, log.counts)
  end)

  it('reads run_started.identity when the log has one, and its objects by their names', function()
    local dir = fs.join(tmp, 'ident')
    assert(fs.mkdir_p(dir))
    assert(fs.write(fs.join(dir, 'i.jsonl'), line { event = 'run_started', run_id = 'i', time = '2026-12-01T00:00:00Z',
      solver = 'gold', mode = 'cold', dataset = 'data/smoke.jsonl', provider = 'local',
      identity = { solver = { name = 'agent', model = 'm-1' }, providers = jsonl.array({ 'local', 'docker' }), mode = 'warm',
        dataset = { path = 'data/other.jsonl', digest = 'sha256:abc' } } }))
    local row = app.runs_doc(index.new({ dir }):refresh()).runs[1]
    assert.same({ 'agent', 'm-1', 'warm', 'data/other.jsonl', 'sha256:abc' }, { row.solver, row.model, row.mode, row.dataset, row.dataset_digest })
    assert.same({ 'local', 'docker' }, row.providers)
  end)

  it('lists a run whose run id is not text under its file\'s name', function()
    local dir = fs.join(tmp, 'oddid')
    assert(fs.mkdir_p(dir))
    assert(fs.write(fs.join(dir, 'odd.jsonl'), line { event = 'run_started', run_id = { x = 1 }, time = '2026-12-01T00:00:00Z',
      label = { a = '<b>' } } .. line { event = 'trial', task_id = 't', outcome = 'passed' }))
    assert(fs.write(fs.join(dir, 'num.jsonl'), line { event = 'run_started', run_id = 12345, time = '2026-12-01T00:00:01Z' }))
    local ok, doc = pcall(app.runs_doc, index.new({ dir }):refresh())
    assert.is_true(ok, tostring(doc))
    local ids = {}
    for _, r in ipairs(doc.runs) do ids[#ids + 1] = r.id end
    assert.same({ '12345', 'odd' }, ids)
    assert.equal('{"a":"<b>"}', doc.runs[2].label)
  end)

  it('lists a foreign file, a log without run_started and a truncated copy with their errors', function()
    local dir = fs.join(tmp, 'bad')
    assert(fs.mkdir_p(dir))
    local fx = fixtures.folder(dir)
    local doc = app.runs_doc(index.new({ dir }):refresh())
    local by = {}
    for _, r in ipairs(doc.runs) do by[r.id] = r end
    assert.equal(5, #doc.runs)
    assert.matches('notes%.jsonl:1: malformed JSON', by.notes.error)
    assert.matches('other%-tool%.jsonl: no run_started event; not a cseng run log', by['other-tool'].error)
    local cut = by[fx.ids.a .. ' (cut-short.jsonl)']
    assert.is_nil(cut.error)
    assert.is_false(cut.live)
    assert.equal('incomplete', cut.status)
    assert.matches('a torn last line %(%d+ bytes at byte %d+%): the run was cut short', cut.torn)
    assert.equal(6, by[fx.ids.a].trials)
    assert.equal('finished', by[fx.ids.a].status)
  end)
end)

describe('the server', function()
  local dir, fx, srv, tsrv
  setup(function()
    dir = fs.join(tmp, 'srv')
    assert(fs.mkdir_p(dir))
    fx = fixtures.folder(dir)
    srv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), loopback = true } })
    tsrv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), token = 's3cret-token' } })
  end)
  teardown(function() srv:close(); tsrv:close() end)

  local function get(base, path, headers)
    local r = assert(http.request { url = base .. path, headers = headers })
    return r.status, r.status < 500 and r.headers['content-type'] and r.headers['content-type']:find('json') and jsonl.decode(r.body) or r.body, r
  end

  it('pages and filters trials, and reads one back with its transcript', function()
    local st, page = get(srv:url(), '/api/runs/' .. fx.ids.b .. '/trials?limit=2&offset=1')
    assert.equal(200, st)
    assert.equal(6, page.total)
    assert.same({ 'bravo', 'charlie' }, { page.rows[1].task, page.rows[2].task })
    local _, errs = get(srv:url(), '/api/runs/' .. fx.ids.b .. '/trials?outcome=error')
    assert.equal(1, errs.total)
    assert.equal('ETIMEDOUT', errs.rows[1].code)
    local _, bycode = get(srv:url(), '/api/runs/' .. fx.ids.b .. '/trials?code=ETIMEDOUT')
    assert.equal('delta', bycode.rows[1].task)
    local _, one = get(srv:url(), '/api/runs/' .. fx.ids.b .. '/trials/1')
    assert.equal('alpha', one.record.task_id)
    assert.equal(5, #one.transcript)
    assert.equal('ls /app', one.transcript[4].command)
    local st404 = get(srv:url(), '/api/runs/' .. fx.ids.b .. '/trials/99')
    assert.equal(404, st404)
  end)

  it('computes what cseng compare does, and warns that the solvers differ', function()
    local st, doc = get(srv:url(), '/api/compare?a=' .. fx.ids.a .. '&b=' .. fx.ids.b)
    assert.equal(200, st)
    assert.equal(2, doc.regressions)
    local compare = require('reports.lib.changes')
    local report_load = require('reports.lib.load')
    assert.equal(compare.compare(report_load.load({ fx.a }), report_load.load({ fx.b }), {}).markdown, doc.markdown)
    assert.same({ 'the runs differ in solver: A has gold, B has agent' }, doc.warnings)
  end)

  it('shows the status endpoint of a live run started with --status-port', function()
    local status = assert(serve.listen { port = 0, handler = function(req)
      if req.path ~= '/status' then return 404, {}, '' end
      return 200, { ['Content-Type'] = 'application/json' }, '{"phase":"trials","live":{"local":2}}'
    end })
    local w = fixtures.task_run(dir, 'with-status', { { task_id = 'one', outcome = 'passed' } }, { unfinished = true, pid = sys.pid() })
    -- fixtures.task_run's argv has no --status-port: a second run_started is ignored, so rewrite
    local text = assert(fs.read(w.path)):gsub('"argv":%["cseng","run"%]',
      '"argv":["cseng","run","--status-port","' .. status:port() .. '"]', 1)
    assert(fs.write(w.path, text))
    -- the proof the viewer asks for (lua/cseng/view/status.lua): the log's writer (this process,
    -- its pid) holds the log (the rewrite made a new file: hold it as a run holds its log) and
    -- the port; hostile_logs_spec has the logs that fail it
    local lock = assert(fs.lock(w.path))
    local st, doc = get(srv:url(), '/api/runs/with-status')
    lock:close()
    status:close()
    assert.equal(200, st)
    assert.is_true(doc.run.live)
    assert.same({ phase = 'trials', live = { ['local'] = 2 } }, doc.status)
    local _, finished = get(srv:url(), '/api/runs/' .. fx.ids.a)
    assert.is_nil(finished.status)
  end)

  it('answers loopback names only when it has no token', function()
    assert.equal(200, (get(srv:url(), '/api/version')))
    assert.equal(403, (get(srv:url(), '/api/version', { Host = 'rebound.example:80' })))
  end)

  it('checks the token on every request', function()
    assert.equal(401, (get(tsrv:url(), '/')))
    assert.equal(401, (get(tsrv:url(), '/api/runs')))
    assert.equal(401, (get(tsrv:url(), '/api/runs?token=wrong')))
    local st, _, r = get(tsrv:url(), '/?token=s3cret-token')
    assert.equal(200, st)
    assert.matches('cseng_view_token=s3cret%-token; HttpOnly', r.headers['set-cookie'])
    assert.equal(200, (get(tsrv:url(), '/api/runs', { Cookie = 'cseng_view_token=s3cret-token' })))
    assert.equal(200, (get(tsrv:url(), '/api/runs', { Authorization = 'Bearer s3cret-token' })))
    assert.equal(401, (get(tsrv:url(), '/assets/app.js', { Cookie = 'cseng_view_token=nope' })))
  end)

  it('takes the next free port when the default one is taken, and prints a single run\'s page', function()
    -- the port of an earlier viewer: the next one is taken; a port given with --port is that or nothing
    local busy = assert(serve.listen { port = 0, handler = function() return 200, {}, '' end })
    local h = function() return 200, {}, 'x' end
    local other = view.listen('127.0.0.1', busy:port(), false, h)
    assert.is_truthy(other)
    assert.is_true(other:port() > busy:port() and other:port() < busy:port() + 20)
    other:close()
    local none, _, code = view.listen('127.0.0.1', busy:port(), true, h)
    busy:close()
    assert.is_nil(none)
    assert.equal('EADDRINUSE', code)
    -- `cseng view <log>` (what a run's last line says) prints the run's own page
    local out = fs.join(tmp, 'view.out')
    local p = assert(proc.spawn { argv = { sys.root() .. '/cseng', 'view', fx.b, '--port', '0' }, stdout = out, stderr = out })
    local url
    for _ = 1, 400 do
      url = (fs.read(out) or ''):match('view: (http://127%.0%.0%.1:%d+/runs/%S+)\n')
      if url then break end
      task.sleep(0.025)
    end
    local text = fs.read(out)
    local r = url and http.request { url = url:gsub('/runs/', '/api/runs/') }
    p:kill('TERM')
    p:wait(30)
    assert.is_string(url, text)
    assert.equal(fx.ids.b, url:match('/runs/(.*)$'))
    assert.equal(200, r.status)
    assert.equal(fx.ids.b, jsonl.decode(r.body).run.id)
  end)

  it('refuses a non-loopback --host without --token', function()
    local err = { text = '' }
    local real = io.stderr
    -- luacheck: ignore 122
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do err.text = err.text .. s end end }
    local ok, code = pcall(view.run, { dir, '--host', '0.0.0.0', '--port', '0' })
    io.stderr = real
    assert.is_true(ok)
    assert.equal(2, code)
    assert.matches('%-%-host 0%.0%.0%.0 is not a loopback address: give %-%-token', err.text)
  end)
end)

describe('the pages', function()
  it('escape what the logs hold', function()
    local html = markdown.html('| task | x |\n| :--- | ---: |\n| `<script>` | **<b>** |\n\n<img src=x onerror=1>')
    assert.not_matches('<script>', html)
    assert.not_matches('<img', html)
    assert.matches('<code>&lt;script&gt;</code>', html)
    assert.matches('<td class="right"><strong>&lt;b&gt;</strong></td>', html)
  end)

  it('export writes every run page, the data scripts and the comparison', function()
    local dir = fs.join(tmp, 'exp')
    assert(fs.mkdir_p(dir))
    local fx = fixtures.folder(dir)
    local out = fs.join(tmp, 'exported')
    local r = app.export(index.new({ dir }):refresh(), out, { compare = { { fx.ids.a, fx.ids.b } } })
    assert.equal(1 + 5 + 1, r.pages)
    for _, f in ipairs({ 'index.html', 'assets/app.js', 'assets/app.css', 'data/runs.js', 'runs/' .. fx.ids.b .. '.html',
      'data/run-' .. fx.ids.b .. '.js', 'data/rec-' .. fx.ids.b .. '-0.js', 'compare/' .. fx.ids.a .. '--' .. fx.ids.b .. '.html' }) do
      assert.is_true(fs.exists(fs.join(out, f)), f)
    end
    local page = assert(fs.read(fs.join(out, 'runs', fx.ids.b .. '.html')))
    assert.matches('<script src="%.%./data/run%-' .. fx.ids.b:gsub('%-', '%%-') .. '%.js"></script>', page)
    assert.not_matches('http://', page)
  end)
end)

describe('the comparison page', function()
  local dir, gold, nop, cat
  setup(function()
    dir = fs.join(tmp, 'goldnop')
    assert(fs.mkdir_p(dir))
    gold, nop = fixtures.gold_nop(dir)
    cat = index.new({ dir }):refresh()
  end)

  it('says the regressions in its header as its body counts them', function()
    -- 8 tasks regress, the pass rate falls (gold → nop), and verify is 3x slower: 10 in all, and the
    -- header says what they are, as the body's summary and last line do
    local doc = app.compare_doc(cat:find(gold), cat:find(nop))
    assert.equal(10, doc.regressions)
    assert.same({ tasks = 8, cells = 1, phases = 1, providers = 0 }, doc.regressions_by)
    local summary = '**10 regression(s)**: 8 tasks that passed in A and not in B, 1 pass rate lower ' ..
      '(gold → nop / - / local / cold), 1 slower phase (verify).'
    local md_lines = {}
    for l in doc.markdown:gmatch('[^\n]+') do md_lines[#md_lines + 1] = l end
    assert.equal(summary, md_lines[#md_lines])
    local said = select(2, doc.markdown:gsub(summary:gsub('%p', '%%%0'), ''))
    assert.equal(2, said) -- at the top and at the end
    assert.equal(markdown.inline(summary), doc.summary_html)
    -- the body's parts add up to the header's count
    assert.equal(8, select(2, doc.html:gsub('<strong>regression</strong>', '')))
    assert.equal(1, select(2, doc.html:gsub('<strong>lower</strong>', '')))
    assert.equal(1, select(2, doc.html:gsub('<strong>slower</strong>', '')))
    assert.matches('8 task%(s%) in A, 8 in B, 8 in both: 8 regression%(s%), 0 fix%(es%)%.', doc.html)
    assert.matches(markdown.inline(summary), doc.html, 1, true)
  end)

  it('compares the pass rates of a gold run and a nop run by their tasks', function()
    local doc = app.compare_doc(cat:find(gold), cat:find(nop))
    assert.matches('<td class="left">gold → nop</td><td class="left">%-</td><td class="left">local</td>' ..
      '<td class="left">cold</td><td class="right">100%.0%% %(8/8%)</td><td class="right">0%.0%% %(0/8%)</td>' ..
      '<td class="right">%-100%.0</td>', doc.html)
    assert.not_matches('only in', doc.html)
  end)

  it('renders the warning as a block quote, not a literal >', function()
    local doc = app.compare_doc(cat:find(gold), cat:find(nop))
    assert.matches('\n> %*%*Warning:%*%* the runs differ in solver', doc.markdown)
    local html = markdown.html(doc.markdown)
    assert.matches('<blockquote><p><strong>Warning:</strong> the runs differ in solver', html, 1, true)
    assert.not_matches('&gt; ', html)
    assert.not_matches('&gt; ', doc.html)
    -- a quote nested a thousand deep is text past four levels, not a thousand calls
    assert.matches('^<blockquote><blockquote><blockquote><blockquote><p>&gt;', markdown.html(string.rep('>', 1000) .. ' x'))
  end)

  it('leaves a one-sided cell one-sided when the runs share another cell', function()
    local compare = require('cseng.results.compare')
    local t = function(id, solver, outcome) return { task_id = id, solver = solver, provider = 'local', mode = 'cold', outcome = outcome } end
    local rows = compare.by_cell({ t('x', 'gold', 'passed'), t('x', 'agent', 'passed') },
      { t('x', 'agent', 'failed'), t('x', 'codex', 'passed') })
    local verdicts = {}
    for _, r in ipairs(rows) do verdicts[r.solver] = r.verdict end
    assert.same({ agent = 'no clear change', codex = 'only in B', gold = 'only in A' }, verdicts)
    rows = compare.by_cell({ t('x', 'gold', 'passed') }, { t('x', 'nop', 'failed') })
    assert.equal(1, #rows)
    assert.same({ 'gold → nop', true, 'no clear change' }, { rows[1].solver, rows[1].paired, rows[1].verdict })
  end)
end)

describe('an arena run', function()
  it('counts its samples without the warmups', function()
    local dir = fs.join(tmp, 'arena')
    assert(fs.mkdir_p(dir))
    local lines = { line { event = 'run_started', kind = 'startup', run_id = 'arena', time = '2026-12-01T00:00:00Z',
      plan = 'startup', providers = jsonl.array({ 'a', 'b' }), mode = 'lockstep' } }
    for _, p in ipairs({ 'a', 'b' }) do
      for r = 1, 3 do lines[#lines + 1] = line { event = 'startup_trial', provider = p, round = r, warmup = true, ok = true, ready_ms = 50 } end
      for r = 1, 20 do lines[#lines + 1] = line { event = 'startup_trial', provider = p, round = r, ok = r ~= 7, ready_ms = 20 + r } end
    end
    assert(fs.write(fs.join(dir, 'arena.jsonl'), table.concat(lines)))
    local row = app.runs_doc(index.new({ dir }):refresh()).runs[1]
    assert.same({ 40, 3 * 2, 38, 0, 2 }, { row.trials, row.warmups, row.passed, row.failed, row.errors })
  end)
end)

describe('solver and model', function()
  local srv, id
  setup(function()
    local dir = fs.join(tmp, 'agents')
    assert(fs.mkdir_p(dir))
    id = fixtures.agents_run(dir)
    srv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), loopback = true } })
  end)
  teardown(function() srv:close() end)

  local function get(path)
    local r = assert(http.request { url = srv:url() .. path })
    return r.status, jsonl.decode(r.body)
  end

  it('are columns and filters of the trials, and the run lists the values it has', function()
    local _, doc = get('/api/runs/' .. id)
    assert.same({ 'codex', 'openrouter' }, doc.solvers)
    assert.same({ 'fake/model-1', 'fake/model-2' }, doc.models)
    local _, page = get('/api/runs/' .. id .. '/trials?solver=codex')
    assert.equal(3, page.total)
    assert.same({ 'codex', 'fake/model-2' }, { page.rows[1].solver, page.rows[1].model })
    local _, m1 = get('/api/runs/' .. id .. '/trials?model=fake%2Fmodel-1&outcome=passed')
    assert.equal(3, m1.total)
    local _, none = get('/api/runs/' .. id .. '/trials?solver=codex&model=fake%2Fmodel-1')
    assert.equal(0, none.total)
  end)

  it('group the trials with pass@k per group, as the pass@k tables compute it', function()
    local st, g = get('/api/runs/' .. id .. '/groups')
    assert.equal(200, st)
    assert.equal('solver,model', g.by)
    local by = {}
    for _, r in ipairs(g.rows) do by[r.solver .. ' ' .. r.model] = r end
    local o, c = by['openrouter fake/model-1'], by['codex fake/model-2']
    assert.same({ 6, 3, 3, 0 }, { o.trials, o.passed, o.failed, o.errors })
    -- t1 1 of 2, t2 2 of 2, t3 0 of 2: pass@1 (0.5 + 1 + 0) / 3, pass@2 (1 + 1 + 0) / 3
    assert.near(0.5, o.pass_at['1'].value, 1e-9)
    assert.near(2 / 3, o.pass_at['2'].value, 1e-9)
    assert.same({ 3, 2, 0, 1 }, { c.trials, c.passed, c.failed, c.errors })
    assert.near(1, c.pass_at['1'].value, 1e-9) -- the ESANDBOX trial is not a sample
    assert.is_nil(c.pass_at['2'])
    local _, pm = get('/api/runs/' .. id .. '/groups?by=provider,mode')
    assert.equal(1, #pm.rows)
    assert.same({ '-', '-', 'local', 'cold', 9 }, { pm.rows[1].solver, pm.rows[1].model, pm.rows[1].provider, pm.rows[1].mode,
      pm.rows[1].trials })
    local bad = get('/api/runs/' .. id .. '/groups?by=colour')
    assert.equal(404, bad)
  end)
end)
