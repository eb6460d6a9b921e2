-- Workload figures in `cseng view`, as a user meets them: real arena runs with a workload (exec on
-- two Daytona fakes, one of whose warm pool hands out used sandboxes so the audit labels them;
-- upload on a Daytona fake and the local provider) served by the viewer and opened in Debian's
-- headless Chromium at a laptop's width (1,280 px) by spec/browser/workload.mjs, which measures
-- the page as laid out. Each figure of the run's `figures` list has its own section and exactly
-- one chart; every chart is visible, inside the viewport, and does not scroll sideways; each
-- provider's clean samples are drawn as dots with one median and one CI band, and the samples the
-- audit labelled are drawn in a row of their own, with no median or CI (never pooled). Counts
-- come from the runs' own logs; no duration decides anything. Screenshots:
-- build/view-screenshots/workload-*.png.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local sys = require('cseng.sys')
local util = require('cseng.lib.util')
local app = require('cseng.view.app')
local index = require('cseng.view.index')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
local fakes = require('spec.fakes')

local root = sys.root()
local WIDTH = 1280
teardown(H.remove_tempdirs)

-- per provider: the measured samples with the figure, clean (pooled) and labelled (apart)
local function expected_rows(by, fname)
  local out = {}
  for _, t in ipairs(by.startup_trial) do
    if not t.warmup then
      local e = out[t.provider] or { clean = 0, labelled = 0 }
      out[t.provider] = e
      local v = t.ok and t.figures and t.figures[fname]
      if type(v) == 'number' then
        if t.clean == false then e.labelled = e.labelled + 1 else e.clean = e.clean + 1 end
      end
    end
  end
  return out
end

describe('workload figures in the viewer, in headless Chromium at 1,280 px', function()
  local obs, node_err, code, srv, runs = {}, nil, nil, nil, {}
  local started = {}
  setup(function()
    assert(fs.exists('/usr/bin/chromium'), '/usr/bin/chromium is missing: make deps-test installs Debian\'s chromium')
    assert(fs.exists(root .. '/spec/browser/node_modules/playwright-core'),
      'spec/browser/node_modules is missing: make deps-test runs npm ci --prefix spec/browser')
    local dir = H.tempdir('cseng-view-workload-')
    started.clean = assert(fakes.start('daytona', {}))
    started.pool = assert(fakes.start('daytona', { reuse_sandboxes = true }))
    local config = {
      clean = util.merge(started.clean.config(), { adapter = 'daytona' }),
      pool = util.merge(started.pool.config(), { adapter = 'daytona' }),
    }
    local base = { provider_config = config, warmups = 0, seed = 7, output = dir, command = 'echo view-wl-ready',
      expect = 'view-wl-ready', cleanup_backoff = { 0.01, 0.02 } }
    local plans = {
      exec = util.merge(base, { providers = { 'clean', 'pool' }, workload = 'exec', workload_options = { exec_count = 3 },
        samples = 4 }),
      upload = util.merge(base, { providers = { 'clean', 'local' }, workload = 'upload', sizes = { '64KiB', '1MiB' },
        samples = 3 }),
    }
    local ids, names = {}, {}
    for _, name in ipairs({ 'exec', 'upload' }) do
      local status, by, errtext, info = A.run(plans[name])
      assert(status == 0, name .. ': ' .. tostring(errtext))
      local id = fs.basename(info.jsonl):gsub('%.jsonl$', '')
      runs[name] = { id = id, by = by, figures = by.run_started[1].figures }
      ids[#ids + 1], names[id] = id, name
    end
    srv = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), loopback = true } })
    local shots = fs.join(root, 'build/view-screenshots')
    assert(fs.mkdir_p(shots))
    local r = assert(proc.run { argv = { 'node', root .. '/spec/browser/workload.mjs', jsonl.encode({ base = srv:url(),
      shots = shots, width = WIDTH, runs = ids, names = names }) }, cwd = root, timeout = 120 })
    node_err, code = r.stderr, r.code
    obs = jsonl.decode(r.stdout:match('[^\n]*\n?$') or '') or {}
  end)
  teardown(function()
    if srv then srv:close() end
    for _, f in pairs(started) do pcall(f.close) end
  end)

  it('ran the browser to the end, with no page error and nothing fetched from outside', function()
    assert.is_nil(obs.exception, obs.exception)
    assert.equal(0, code, node_err)
    assert.same({}, obs.page_errors)
    assert.same({}, obs.offsite_requests)
  end)

  for _, name in ipairs({ 'exec', 'upload' }) do
    it(name .. ': one chart per figure of the run, in its own section, each visible and inside the page', function()
      local run = runs[name]
      local page = (obs.runs or {})[run.id]
      assert.is_table(page, 'no observations of ' .. name)
      local want, got = {}, {}
      for _, f in ipairs(run.figures) do want[#want + 1] = f[1] end
      for _, c in ipairs(page.charts) do got[#got + 1] = c.figure end
      assert.is_true(#want >= 3, 'the run declares ' .. #want .. ' figures')
      assert.same(want, got)
      local bad = {}
      local function check(ok, fmt_, ...) if not ok then bad[#bad + 1] = string.format(fmt_, ...) end end
      check(page.page_scroll <= page.viewport, 'the page scrolls sideways: %d px in %d', page.page_scroll, page.viewport)
      for _, c in ipairs(page.charts) do
        check(c.visible, '%s: not visible (%.0f x %.0f px)', c.figure, c.width, c.height)
        check(c.left >= 0 and c.right <= page.viewport + 0.5, '%s: from %.1f to %.1f px, the viewport %d px wide',
          c.figure, c.left, c.right, page.viewport)
        check(c.fig_scroll <= c.fig_client, '%s: its box scrolls sideways (%d px in %d)', c.figure, c.fig_scroll,
          c.fig_client)
        check(type(c.heading) == 'string' and c.heading:find(c.figure, 1, true) == 1, '%s: under the heading %s',
          c.figure, tostring(c.heading))
      end
      assert(#bad == 0, string.format('at %d px:\n  %s', WIDTH, table.concat(bad, '\n  ')))
    end)

    it(name .. ': every clean sample a dot with the median and CI; labelled samples in a row of their own', function()
      local run = runs[name]
      local page = (obs.runs or {})[run.id] or { charts = {} }
      assert.is_true(#page.charts > 0)
      for _, c in ipairs(page.charts) do
        local want = expected_rows(run.by, c.figure)
        local clean_rows, labelled_rows = {}, {}
        for _, r in ipairs(c.rows) do
          assert.equal(0, r.dots_outside, c.figure .. '/' .. r.provider .. ': dots outside the chart')
          assert.equal(r.samples, r.dots)
          if r.labelled then labelled_rows[r.provider] = r else clean_rows[r.provider] = r end
        end
        for provider, e in pairs(want) do
          local where = c.figure .. '/' .. provider
          local cr = clean_rows[provider]
          assert.is_table(cr, where .. ': no row')
          assert.equal(e.clean, cr.dots, where)
          assert.equal(e.clean > 0 and 1 or 0, cr.medians, where)
          assert.equal(e.clean > 1 and 1 or 0, cr.cis, where)
          local lr = labelled_rows[provider]
          if e.labelled > 0 then
            assert.is_table(lr, where .. ': its labelled samples are not shown')
            assert.equal(e.labelled, lr.dots, where)
            assert.equal(0, lr.medians, where .. ': a median over labelled samples')
            assert.equal(0, lr.cis, where .. ': a CI over labelled samples')
          else
            assert.is_nil(lr, where .. ': a labelled row with nothing labelled')
          end
        end
      end
    end)
  end

  it('exec: the reusing pool\'s samples were labelled and shown apart, the clean fake\'s pooled', function()
    local w = expected_rows(runs.exec.by, 'exec_rtt_ms')
    assert.is_true(w.pool.labelled >= 1, 'the pool fake handed out no used sandbox')
    assert.equal(0, w.clean.labelled)
    assert.equal(4, w.clean.clean)
    assert.equal(4, w.pool.clean + w.pool.labelled)
  end)
end)
