-- `cseng view` in a real browser: Debian's headless Chromium, driven by playwright-core
-- (spec/browser/view.mjs), over a fixture folder served by the viewer in this process: the run
-- list shows every run (and the unreadable ones with their error), a task run lists every trial
-- and opens one with its transcript, a big run pages, the arena page draws its charts, compare
-- shows the planted regression, a live run's page changes while its log grows (appended when the
-- browser asks, so no clock decides), and the static export works from file://. Screenshots of
-- every page: build/view-screenshots/.
local frame = require('cseng.run.frame')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local sys = require('cseng.sys')
local app = require('cseng.view.app')
local index = require('cseng.view.index')

local root = sys.root()
local fixtures = require('spec.browser.fixtures')
local lizard = require('spec.fakes').module('lizard')

local LIVE = 'view-live-local-cold-20261201-120000-cccc'
local BIG = 'view-big-local-cold-20261201-090000-dddd'

-- a 1x1 PNG: the beacon answers with a real image, so only the page's CSP can stop it loading
local PNG = '\137PNG\013\010\026\010\000\000\000\013IHDR\000\000\000\001\000\000\000\001\008\006\000\000\000' ..
  '\031\021\196\137\000\000\000\011IDATx\156c`\000\002\000\000\005\000\001z^\171?\000\000\000\000IEND\174B`\130'

describe('cseng view in headless Chromium', function()
  local tmp, fx, arena_id, obs, srv, ctl, fakes, node_err, lsrv, many, long_path, gold, nop
  local beacon_hits = 0
  local AGENTS = 'view-agents-local-cold-20261201-130000-eeee'
  setup(function()
    assert(fs.exists('/usr/bin/chromium'), '/usr/bin/chromium is missing: make deps-test installs Debian\'s chromium')
    assert(fs.exists(root .. '/spec/browser/node_modules/playwright-core'),
      'spec/browser/node_modules is missing: make deps-test runs npm ci --prefix spec/browser')
    tmp = assert(fs.tempdir('cseng-view-browser-'))
    local dir = fs.join(tmp, 'results')
    assert(fs.mkdir_p(dir))
    fx = fixtures.folder(dir)
    local agents_id = fixtures.agents_run(dir)
    -- a real arena run against two loopback fakes
    local fa = lizard.start { latency = { create = function(n) return 0.005 + (n % 5) * 0.002 end } }
    local fb = lizard.start { latency = { create = function(n) return 0.012 + (n % 3) * 0.003 end } }
    fakes = { fa, fb }
    local status, info = frame.run('startup', { providers = { 'fast', 'slow' }, provider_config = { fast = fa.config(), slow = fb.config() },
      samples = 10, warmups = 1, seed = 3, output = dir, quiet = true, cleanup_backoff = { 0.01, 0.02 },
      stderr = { write = function() end } })
    assert.equal(0, status)
    arena_id = fs.basename(info.jsonl):gsub('%.jsonl$', '')
    local big = {}
    for i = 1, 250 do big[i] = { task_id = string.format('task-%04d', i), outcome = i % 10 == 0 and 'failed' or 'passed' } end
    fixtures.task_run(dir, BIG, big)
    -- the live run: its writer is this process, so it is live until run_finished
    local w = fixtures.task_run(dir, LIVE, { { task_id = 'first', outcome = 'passed' }, { task_id = 'second', outcome = 'passed' } },
      { unfinished = true, pid = sys.pid() })
    local appended = 0
    ctl = assert(serve.listen { port = 0, handler = function(req)
      if req.path == '/beacon.png' then -- what an exported page must never load (its CSP refuses it)
        beacon_hits = beacon_hits + 1
        return 200, { ['Content-Type'] = 'image/png' }, PNG
      end
      if req.path ~= '/append' then return 404, {}, 'no' end
      for k = 1, 3 do
        appended = appended + 1
        w:event('trial', fixtures.trial(10 + appended, { task_id = 'grown-' .. appended, outcome = k == 2 and 'failed' or 'passed' }))
      end
      return 200, { ['Access-Control-Allow-Origin'] = '*' }, 'appended 3'
    end })
    -- the export, written before the live run grows
    local export_dir = fs.join(tmp, 'export')
    app.export(index.new({ dir }):refresh(), export_dir, { compare = { { fx.ids.a, fx.ids.b } } })
    srv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), loopback = true } })
    -- the layout's folder: the fixtures above and 40 runs as a team's folder holds them
    local layout_dir = fs.join(tmp, 'many')
    assert(fs.mkdir_p(layout_dir))
    many, long_path = fixtures.many_runs(layout_dir, 40)
    gold, nop = fixtures.gold_nop(layout_dir)
    lsrv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir, layout_dir }), loopback = true } })
    local shots = fs.join(root, 'build/view-screenshots')
    assert(fs.mkdir_p(shots))
    local cfg = { base = srv:url(), control = ctl:url(), shots = shots, a = fx.ids.a, b = fx.ids.b, arena = arena_id,
      live = LIVE, big = BIG, export = export_dir, agents = agents_id,
      export_compare = app.file_name(fx.ids.a) .. '--' .. app.file_name(fx.ids.b),
      layout = lsrv:url(), layout_sample = many[3], gold = gold, nop = nop }
    local r = assert(proc.run { argv = { 'node', root .. '/spec/browser/view.mjs', jsonl.encode(cfg) }, cwd = root, timeout = 120 })
    node_err = r.stderr
    obs = jsonl.decode(r.stdout:match('[^\n]*\n?$') or '') or {}
    obs._code = r.code
  end)
  teardown(function()
    if srv then srv:close() end
    if lsrv then lsrv:close() end
    if ctl then ctl:close() end
    for _, f in ipairs(fakes or {}) do pcall(f.close) end
    if tmp then fs.remove_tree(tmp) end
  end)

  it('ran the browser to the end, with no page error and nothing fetched from outside', function()
    assert.is_nil(obs.exception, obs.exception)
    assert.equal(0, obs._code, node_err)
    assert.same({}, obs.page_errors)
    assert.same({}, obs.offsite_requests)
  end)

  it('lists every run of the folder, the unreadable ones with their error', function()
    assert.equal('1', obs['runs.ready'])
    local ids = {}
    for _, id in ipairs(obs['runs.ids']) do ids[id] = true end
    for _, id in ipairs({ fx.ids.a, fx.ids.b, arena_id, LIVE, BIG, AGENTS, 'notes', 'other-tool' }) do
      assert.is_true(ids[id], id .. ' not listed')
    end
    local cut = fx.ids.a .. ' (cut-short.jsonl)'
    assert.is_true(ids[cut], 'the truncated copy is not listed')
    assert.equal(9, #obs['runs.ids'])
    assert.matches('notes%.jsonl:1: malformed JSON', obs['runs.errors'].notes)
    assert.matches('no run_started event; not a cseng run log', obs['runs.errors']['other-tool'])
    assert.matches('a torn last line .*cut short', obs['runs.errors'][cut])
    assert.same({ fx.ids.b }, obs['runs.filtered'])
  end)

  it('lists every trial of a task run and opens one with its transcript step by step', function()
    assert.same({ 'alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot' }, obs['run.tasks'])
    assert.same({ 'ETIMEDOUT in verify', 'failed (verifier ran, reward < 1)' }, obs['run.failure_modes'])
    assert.matches('trial 1: alpha', obs['trial.title'])
    assert.same({ '1. system', '2. user', '3. assistant', '4. tool', '5. assistant' }, obs['trial.steps'])
    assert.same({ '→ bash {"command":"ls /app"}', '$ ls /app' }, obs['trial.tool_calls'])
    assert.same({ 'delta' }, obs['run.errors_only'])
  end)

  it('gives every trial an address of its own: reopened from it, back and forward move between trials', function()
    assert.equal('#trial-1', obs['trial.hash'])
    assert.matches('^trial 4: delta', obs['trial.reopened'])
    assert.same({ '4' }, obs['trial.reopened_selected'])
    assert.equal('#trial-2', obs['trial.clicked_hash'])
    assert.same({ '#trial-4' }, { obs['trial.back'][1] })
    assert.matches('^trial 4: delta', obs['trial.back'][2])
    assert.equal('#trial-2', obs['trial.forward'][1])
    assert.matches('^trial 2: bravo', obs['trial.forward'][2])
    assert.equal('#trial-4', obs['export.trial_hash'])
    assert.matches('^trial 2: bravo', obs['export.reopened'])
  end)

  it('shows a trial\'s environment, usage, cost and limits as tables, not JSON', function()
    local env = {}
    for _, r in ipairs(obs['trial.environment']) do env[r[1]] = r[2] end
    assert.same({ method = 'cached_layer', cache_hit = 'true', mode = 'native', run_steps = '0',
      content_key = string.rep('a0ee3239', 8) }, env)
    local usage = {}
    for _, r in ipairs(obs['trial.usage']) do usage[r[1]] = r[2] end
    assert.same({ prompt_tokens = '1200', completion_tokens = '80', cost_usd = '0.0021' }, usage)
    assert.equal('sandbox', obs['trial.cost'][1][1])
    assert.equal('total', obs['trial.cost'][#obs['trial.cost']][1])
    local limits = {}
    for _, r in ipairs(obs['trial.limits']) do limits[r[1]] = r[2] end
    assert.equal('1024', limits.memory_mb)
    assert.equal('default', limits['source.pids'])
    assert.same({}, obs['trial.json_in_fields'])
  end)

  it('filters the run list by solver', function()
    assert.same({ 'agent', 'gold', 'openrouter' }, obs['runs.solver_options'])
    assert.same({ AGENTS }, obs['runs.by_solver'])
  end)

  it('filters and groups a run\'s trials by solver and model, with pass@k per solver and model', function()
    assert.same({ 'solver', 'model' }, obs['agents.columns'])
    assert.same({ 'every solver', 'codex', 'openrouter' }, obs['agents.solver_options'])
    assert.equal(9, obs['agents.rows_all'])
    assert.equal(3, obs['agents.rows_codex'])
    assert.same({ 'codex' }, obs['agents.solvers_shown'])
    assert.equal(6, obs['agents.rows_model1'])
    assert.same({ 'fake/model-1' }, obs['agents.models_shown'])
    -- the groups: solver / model rows with pass@1 and pass@2 (t1 1 of 2, t2 2 of 2, t3 0 of 2)
    local g = obs['agents.groups']
    assert.same({ 'codex / fake/model-2', 'openrouter / fake/model-1' }, g.rows)
    assert.matches('^50%.0%% %[', g.cells['openrouter / fake/model-1'][1])
    assert.matches('^66%.7%% %[', g.cells['openrouter / fake/model-1'][2])
    assert.matches('^100%.0%% %[', g.cells['codex / fake/model-2'][1])
    assert.equal('–', g.cells['codex / fake/model-2'][2])
    assert.same({ 'local / cold' }, obs['agents.groups_by_provider'])
    assert.same({ 'codex / fake/model-2 / local / cold', 'openrouter / fake/model-1 / local / cold' }, obs['agents.groups_all_dims'])
    assert.same({ 'fake/model-1', 'fake/model-2' }, obs['export.agents.models'])
    assert.same({ 'codex / fake/model-2', 'openrouter / fake/model-1' }, obs['export.agents.groups'])
  end)

  it('pages a big run', function()
    assert.equal('1–100 of 250 trial(s)', obs['big.page1'])
    assert.equal(100, obs['big.rows1'])
    assert.equal('101–200 of 250 trial(s)', obs['big.page2'])
  end)

  it('counts an arena\'s samples without its warmups (2 providers x 10 samples, 1 warmup each)', function()
    assert.equal(20, obs['runs.arena_samples'])
    assert.equal('20 sample(s)', obs['arena.count'])
    assert.matches('2 warmup%(s%), not counted', obs['arena.warmups'])
  end)

  it('shows a gold run against a nop run as the change of the pass rate, the header counting as the body', function()
    assert.equal('1', obs['goldnop.ready'])
    local summary = '10 regression(s): 8 tasks that passed in A and not in B, 1 pass rate lower ' ..
      '(gold → nop / - / local / cold), 1 slower phase (verify).'
    assert.equal(summary, obs['goldnop.header'])
    assert.equal(summary, obs['goldnop.last'])
    assert.same({ regressions = '10', tasks = '8', cells = '1', phases = '1', providers = '0' }, obs['goldnop.by'])
    assert.equal(8, obs['goldnop.tasks_regressed'])
    local row = obs['goldnop.cells'][1]
    assert.equal(1, #obs['goldnop.cells'])
    assert.same({ 'gold → nop', '-', 'local', 'cold', '100.0% (8/8)', '0.0% (0/8)', '-100.0' },
      { row[1], row[2], row[3], row[4], row[5], row[6], row[7] })
    assert.equal('lower', row[#row])
    assert.same({}, obs['goldnop.literal_quotes'])
  end)

  it('draws the arena charts', function()
    assert.equal('1', obs['arena.ready'])
    assert.is_true(obs['arena.charts'] >= 2, 'charts: ' .. tostring(obs['arena.charts']))
    assert.is_true(obs['arena.ecdf_paths'] >= 2)
    local h = table.concat(obs['arena.headings'], '|')
    assert.matches('^Sandbox startup: .-|Answer|', h) -- the answer first (lua/reports/startup.lua)
    assert.matches('Per metric', h)
    assert.matches('computesdk', h)
  end)

  it('shows the planted regression in compare, and that the solvers differ', function()
    assert.equal('2', obs['compare.regressions'])
    local rows = table.concat(obs['compare.rows'], '\n')
    assert.matches('bravopassedfailedregression', rows)
    assert.matches('foxtrotfailedpassedfixed', rows)
    assert.same({ '⚠ the runs differ in solver: A has gold, B has agent' }, obs['compare.warnings'])
    -- gold against agent over the same tasks: one row with both pass rates
    assert.matches('gold → agent%-localcold83%.3%% %(5/6%)80%.0%% %(4/5%) %+1 error%(s%)', rows)
  end)

  it('updates a live run\'s page while its log grows', function()
    assert.equal('2', obs['live.before'])
    assert.matches('live', obs['live.indicator'])
    assert.equal('appended 3', obs['live.appended'])
    assert.equal('5', obs['live.after'])
    assert.same({ 'first', 'second', 'grown-1', 'grown-2', 'grown-3' }, obs['live.tasks'])
  end)

  -- The run list as people read it: at 1,280 and 1,920 px, over 51 runs with a 109-character dataset
  -- path and long labels, measured in the page. A row is one line (27 px here) unless it has a note
  -- (an unreadable file's error, a torn copy's file name): then two. No run id is broken over lines, no
  -- column ends past the table's container or the viewport (nothing scrolls sideways), a screen of
  -- 900 px shows 20 runs or more, and the long path and the label are shortened with their full text
  -- on hover.
  for _, width in ipairs({ 1280, 1920 }) do
    it(string.format('lays the run list out for reading at %d px', width), function()
      local L = obs['layout.' .. width]
      assert.is_table(L, 'no layout measured at ' .. width)
      assert.equal(51, #L.rows)
      -- every finding is collected first, so a failure shows them all with their numbers
      local bad = {}
      local function check(ok, fmt_, ...) if not ok then bad[#bad + 1] = string.format(fmt_, ...) end end
      local edge = math.min(L.wrap_right, L.viewport) + 0.5
      for _, th in ipairs(L.heads) do
        check(th.right <= edge, 'column %s cut off: it ends at %.1f px, the container at %.1f', th.label, th.right, edge)
      end
      check(L.wrap_scroll <= L.wrap_client, 'the table scrolls sideways: %d px wide in %d', L.wrap_scroll, L.wrap_client)
      local broken, tall, max_h = 0, 0, 0
      for _, r in ipairs(L.rows) do
        if r.id_lines ~= 1 then broken = broken + 1 end
        local noted = r.id == 'notes' or r.id == 'other-tool' or r.id:find(' (', 1, true)
        if not noted then max_h = math.max(max_h, r.height) end
        if r.height > L.head_height * (noted and 2.3 or 1.3) then tall = tall + 1 end
        check(r.id_lines == 1, 'run id %s in %d line boxes', r.id, r.id_lines)
        check(r.height <= L.head_height * (noted and 2.3 or 1.3), 'row %s is %.1f px tall (a line: %.1f px)', r.id, r.height,
          L.head_height)
      end
      check(L.on_screen >= 20, '%d runs on the first 900 px', L.on_screen)
      -- the long path and the label: shortened in the cell, whole on hover
      local d = L.dataset or { text = '', titles = {} }
      check(#d.text < #long_path, 'the dataset path shown whole (%d characters)', #d.text)
      check(d.titles[1] == long_path, 'no title with the whole dataset path')
      local label = 'nightly terminal-bench core, retries on, build network off #3'
      local titled = false
      for _, t in ipairs(L.row_titles) do if t:find(label, 1, true) then titled = true end end
      check(titled, 'the label is not there on hover')
      assert(#bad == 0, string.format('at %d px: %d of %d run ids broken over lines, %d rows too tall (the tallest ' ..
        'one-line row %.1f px, a line %.1f px), %d runs on the first screen:\n  %s', width, broken, #L.rows, tall, max_h,
        L.head_height, L.on_screen, table.concat(bad, '\n  ')))
    end)
  end

  it('exports pages whose Content-Security-Policy stops a load from elsewhere in Chromium', function()
    -- the page tried to load an image from a loopback server; its meta CSP (img-src 'self') refused it
    assert.is_string(obs['export.csp_probe'])
    assert.not_equal('loaded', obs['export.csp_probe'])
    assert.equal(0, beacon_hits, 'the exported page loaded an image from another origin')
  end)

  it('exports pages that open from file://', function()
    assert.equal('1', obs['export.ready'])
    assert.equal(9, #obs['export.ids'])
    assert.matches('^file://.*/runs/' .. fx.ids.b:gsub('%-', '%%-') .. '%.html$', obs['export.run_url'])
    assert.same({ 'alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot' }, obs['export.tasks'])
    assert.matches('trial 4: delta', obs['export.trial'])
    assert.equal('2', obs['export.compare.regressions'])
  end)
end)
