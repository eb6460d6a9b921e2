-- The viewer's history page in Debian's headless Chromium (spec/browser/history.mjs): a watch's
-- twelve runs whose create latency stepped at run 6, from the results folder's history store: one
-- chart per provider with every run, the median's CI band, the change marked at run 6 and listed
-- with a link to its run, another primitive through the selector, a click on a point opening that
-- run's page. A screenshot: build/view-screenshots/history.png.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local sys = require('cseng.sys')
local app = require('cseng.view.app')
local index = require('cseng.view.index')
local history = require('cseng.view.history')
local store = require('cseng.history.store')

local root = sys.root()
local H = require('spec.helpers.common')
local HH = require('spec.helpers.history')
teardown(H.remove_tempdirs)

local RUNS = 12

describe('the history page in headless Chromium', function()
  local obs, node_err, srv, stores, code
  setup(function()
    assert(fs.exists('/usr/bin/chromium'), '/usr/bin/chromium is missing: make deps-test installs Debian\'s chromium')
    assert(fs.exists(root .. '/spec/browser/node_modules/playwright-core'),
      'spec/browser/node_modules is missing: make deps-test runs npm ci --prefix spec/browser')
    local dir = H.tempdir('cseng-history-browser-')
    local runs = {}
    for k = 1, RUNS do
      local base = k <= 5 and 50 or 80
      runs[k] = { samples = 15, create = function(i) return base + HH.jitter(k, i, 4) end }
    end
    HH.watch_folder(dir, 'hw', runs, { window = 5, min_window = 3, hold = 2 })
    local S = assert(store.open(dir))
    S:sync()
    S:close()
    stores = history.open({ dir })
    local cat = index.new({ dir }, { restore = function(log) return history.restore(stores, log) end })
    srv = assert(serve.listen { port = 0, handler = app.handler { catalogue = cat, loopback = true, history = stores } })
    local shots = fs.join(root, 'build/view-screenshots')
    assert(fs.mkdir_p(shots))
    local r = assert(proc.run { argv = { 'node', root .. '/spec/browser/history.mjs',
      jsonl.encode({ base = srv:url(), shots = shots, runs = RUNS }) }, cwd = root, timeout = 120 })
    node_err, code = r.stderr, r.code
    obs = jsonl.decode(r.stdout:match('[^\n]*\n?$') or '') or {}
  end)
  teardown(function()
    if srv then srv:close() end
    history.close(stores)
  end)

  it('ran the browser to the end, with no page error and nothing fetched from outside', function()
    assert.is_nil(obs.exception, obs.exception)
    assert.equal(0, code, node_err)
    assert.same({}, obs.page_errors)
    assert.same({}, obs.offsite_requests)
    assert.equal('1', obs.ready)
  end)

  it('draws every run of the lineage with its CI, and marks the change where it began', function()
    assert.same({ 'watch:hw (12 runs)' }, obs.lineages)
    assert.equal('measured/create', obs.primitive)
    assert.same({ { provider = 'lizard', points = RUNS, label = 'lizard create' },
      { provider = 'lizard', points = RUNS, label = 'lizard error rate' } }, obs.charts)
    assert.same({ { index = 6, direction = 'up' } }, obs.change_markers)
    assert.same({ 'hw-000006' }, obs.change_links)
    assert.same({ true, true }, obs.bands)
    assert.equal(0, obs.first_exec_markers)
    assert.is_true(fs.exists(fs.join(root, 'build/view-screenshots/history.png')))
  end)

  it('opens a run\'s page from its point', function()
    assert.matches('^run 9 · ', obs.tip)
    assert.matches('/runs/hw%-000009$', obs.clicked_url)
    assert.matches('^hw%-000009', obs.clicked_title)
  end)
end)
