// Drives Debian's headless Chromium over the viewer's pages for spec/view/browser_spec.lua, which
// serves the fixtures and reads the JSON this prints: one {name, value} per observation, so the
// verdicts stay in the spec. Screenshots of every page go to cfg.shots.
// usage: node view.mjs '<json config>'
import path from 'node:path';
import { launch } from './launch.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = {};
const note = (name, value) => { out[name] = value; };

const { ctx, page, close } = await launch();
const errors = [];
// nothing but the viewer itself (and file:// for the export) may be fetched; the CSP probe's
// beacon is asked for on purpose (and refused by the page: the spec counts what reached it)
const offsite = [];
const beacon = cfg.control + '/beacon.png';
ctx.on('request', (r) => {
  const u = r.url();
  if (u !== beacon && !u.startsWith(cfg.base) && !u.startsWith(cfg.layout) && !u.startsWith('file://') && !u.startsWith('data:')) offsite.push(u);
});
page.on('pageerror', (e) => errors.push(String(e)));
page.setDefaultTimeout(20000);

async function open(url) {
  await page.goto(url);
  await page.waitForSelector('body[data-ready]');
  return page.evaluate(() => document.body.dataset.ready);
}
const shot = (name) => page.screenshot({ path: path.join(cfg.shots, name + '.png'), fullPage: true });
const rowIds = () => page.$$eval('#runs tbody tr', (trs) => trs.map((t) => t.dataset.runId));
const trialTasks = () => page.$$eval('#trials tbody tr', (trs) => trs.map((t) => t.children[1].textContent));

try {
  // the run list
  note('runs.ready', await open(cfg.base + '/'));
  note('runs.ids', await rowIds());
  // the arena's row: its samples, passed + failed + errors, without the warmups
  note('runs.arena_samples', await page.$$eval(`#runs tbody tr[data-run-id="${cfg.arena}"] td.num`,
    (tds) => tds.filter((td) => /passed|failed|errors/.test(td.className)).reduce((a, td) => a + Number(td.textContent), 0)));
  note('runs.errors', await page.$$eval('#runs tbody tr', (trs) => Object.fromEntries(trs.map((t) =>
    [t.dataset.runId, (t.querySelector('.err') || t.querySelector('.warn-text') || {}).textContent || null]))));
  await page.fill('input[aria-label="filter runs"]', 'bbbb');
  note('runs.filtered', await rowIds());
  await page.fill('input[aria-label="filter runs"]', '');
  note('runs.solver_options', await page.$$eval('select[data-run-filter="solver"] option', (o) => o.map((x) => x.value).filter(Boolean)));
  await page.selectOption('select[data-run-filter="solver"]', 'openrouter');
  note('runs.by_solver', await rowIds());
  await page.selectOption('select[data-run-filter="solver"]', '');
  await shot('runs');

  // the run list's layout at 1,280 and 1,920 px over a folder as a team's looks (spec/browser/fixtures.lua:
  // many_runs' 40 runs with a 109-character dataset path and labels, gold_nop's 2, and the 9 above):
  // measured in the page, not read as text. Per row its height and the line boxes of its run id; per header cell its right edge against
  // the table's container and the viewport; the rows on the first screen; the long path's cell.
  for (const width of [1280, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    note(`layout.${width}.ready`, await open(cfg.layout + '/'));
    note(`layout.${width}`, await page.evaluate((sample) => {
      const table = document.querySelector('#runs');
      const wrap = table.parentElement;
      const vw = document.documentElement.clientWidth;
      const wr = wrap.getBoundingClientRect();
      const heads = [...table.querySelectorAll('thead th')];
      const col = (name) => heads.findIndex((th) => th.textContent.trim().toLowerCase().startsWith(name));
      const cellOf = (tr, name) => tr.cells[col(name)];
      const titles = (td) => (td ? [td, ...td.querySelectorAll('[title]')].map((e) => e.getAttribute('title')).filter(Boolean) : []);
      const rows = [...table.querySelectorAll('tbody tr')].map((tr) => {
        const idEl = tr.cells[0].firstElementChild;
        return { id: tr.dataset.runId, height: Math.round(tr.getBoundingClientRect().height * 10) / 10,
          id_lines: idEl ? idEl.getClientRects().length : 0, bottom: tr.getBoundingClientRect().bottom };
      });
      const sampleRow = table.querySelector(`tbody tr[data-run-id="${sample}"]`);
      const cellInfo = (name) => {
        const td = sampleRow && cellOf(sampleRow, name);
        return td ? { text: td.textContent, titles: titles(td), lines: Math.round(td.getBoundingClientRect().height) } : null;
      };
      return {
        viewport: vw, wrap_right: wr.right, wrap_scroll: wrap.scrollWidth, wrap_client: wrap.clientWidth,
        head_height: table.querySelector('thead tr').getBoundingClientRect().height,
        heads: heads.map((th) => ({ label: th.textContent.trim(), right: Math.round(th.getBoundingClientRect().right * 10) / 10 })),
        rows: rows.map(({ bottom, ...r }) => r),
        on_screen: rows.filter((r) => r.bottom <= window.innerHeight).length,
        dataset: cellInfo('dataset'), plan: cellInfo('plan'), row_text: sampleRow ? sampleRow.textContent : null,
        row_titles: sampleRow ? [...sampleRow.querySelectorAll('[title]')].map((e) => e.getAttribute('title')) : [],
      };
    }, cfg.layout_sample));
    await page.screenshot({ path: path.join(cfg.shots, `runs-${width}.png`) });
  }
  await page.setViewportSize({ width: 1400, height: 900 });

  // a gold run against a nop run: the pass rate's change, the header's count as the body's
  note('goldnop.ready', await open(cfg.layout + '/compare?a=' + encodeURIComponent(cfg.gold) + '&b=' + encodeURIComponent(cfg.nop)));
  note('goldnop.header', await page.textContent('#regressions'));
  note('goldnop.by', await page.$eval('#regressions', (p) => ({ ...p.dataset })));
  note('goldnop.last', await page.$$eval('#compare-report > p', (ps) => ps[ps.length - 1].textContent));
  note('goldnop.cells', await page.$$eval('#compare-report table', (ts) => [...ts[0].querySelectorAll('tbody tr')].map((tr) =>
    [...tr.cells].map((c) => c.textContent))));
  note('goldnop.tasks_regressed', await page.$$eval('#compare-report td', (tds) => tds.filter((t) => t.textContent === 'regression').length));
  note('goldnop.literal_quotes', await page.evaluate(() => document.body.innerText.split('\n').filter((l) => /^\s*>/.test(l))));
  await shot('compare-gold-nop');


  // an agent-eval run: solver and model columns, their filters, the groups with pass@k
  note('agents.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.agents)));
  await page.waitForSelector('#groups-table');
  const groupsSeen = () => page.$$eval('#groups-table tbody tr', (trs) => trs.map((t) => t.dataset.group));
  const column = (cls) => page.$$eval('#trials tbody td.' + cls, (tds) => [...new Set(tds.map((t) => t.textContent))]);
  const rowCount = () => page.$$eval('#trials tbody tr', (trs) => trs.length);
  note('agents.columns', await page.$$eval('#trials thead th', (th) => th.map((x) => x.textContent).filter((x) => x === 'solver' || x === 'model')));
  note('agents.solver_options', await page.$$eval('select[data-filter="solver"] option', (o) => o.map((x) => x.textContent)));
  note('agents.rows_all', await rowCount());
  note('agents.groups', {
    rows: await groupsSeen(),
    cells: await page.$$eval('#groups-table tbody tr', (trs) => Object.fromEntries(trs.map((t) =>
      [t.dataset.group, [...t.querySelectorAll('td.pass-at')].map((td) => td.textContent)]))),
  });
  await shot('agents');
  await page.selectOption('select[data-filter="solver"]', 'codex');
  await page.waitForFunction(() => document.querySelectorAll('#trials tbody tr').length === 3);
  note('agents.rows_codex', await rowCount());
  note('agents.solvers_shown', await column('solver'));
  await page.selectOption('select[data-filter="solver"]', '');
  await page.selectOption('select[data-filter="model"]', 'fake/model-1');
  await page.waitForFunction(() => document.querySelectorAll('#trials tbody tr').length === 6);
  note('agents.rows_model1', await rowCount());
  note('agents.models_shown', await column('model'));
  await page.selectOption('select[data-group-by]', 'provider,mode');
  await page.waitForSelector('#groups-table[data-by="provider,mode"]');
  note('agents.groups_by_provider', await groupsSeen());
  await page.selectOption('select[data-group-by]', 'solver,model,provider,mode');
  await page.waitForSelector('#groups-table[data-by="solver,model,provider,mode"]');
  note('agents.groups_all_dims', await groupsSeen());

  // a task run: every trial, one opened, filters
  note('run.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.b)));
  note('run.tasks', await trialTasks());
  note('run.failure_modes', await page.$$eval('#failure-modes tbody tr', (trs) => trs.map((t) => t.children[0].textContent)));
  await shot('run');
  await page.click('#trials tbody tr[data-trial="1"]');
  await page.waitForSelector('#trial-title');
  note('trial.title', await page.textContent('#trial-title'));
  note('trial.steps', await page.$$eval('ol.transcript > li', (li) => li.map((x) => x.querySelector('.step-head b').textContent)));
  note('trial.tool_calls', await page.$$eval('.tool-call', (x) => x.map((e) => e.textContent)));
  await shot('trial');
  // its address, and its environment, usage, cost and limits as tables
  note('trial.hash', new URL(page.url()).hash);
  const fields = (name) => page.$$eval(`table[data-fields="${name}"] tbody tr`, (trs) => trs.map((t) => [...t.cells].map((c) => c.textContent)));
  note('trial.environment', await fields('environment'));
  note('trial.usage', await fields('solver usage'));
  note('trial.cost', await fields('cost'));
  note('trial.limits', await fields('limits'));
  note('trial.json_in_fields', await page.$$eval('#trial-detail dl.kv dd', (dds) => dds.map((d) => d.textContent).filter((t) => t.includes('{'))));
  // a trial's address reopens it; back and forward move between the trials opened
  const titleStarts = (t) => page.waitForFunction((x) => ((document.querySelector('#trial-title') || {}).textContent || '').startsWith(x), t);
  await open(cfg.base + '/');
  note('trial.reopen.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.b) + '#trial-4'));
  await titleStarts('trial 4:');
  note('trial.reopened', await page.textContent('#trial-title'));
  note('trial.reopened_selected', await page.$$eval('#trials tbody tr.selected', (trs) => trs.map((t) => t.dataset.trial)));
  await page.click('#trials tbody tr[data-trial="2"] td:nth-child(2)');
  await titleStarts('trial 2:');
  note('trial.clicked_hash', new URL(page.url()).hash);
  await page.goBack();
  await titleStarts('trial 4:');
  note('trial.back', [new URL(page.url()).hash, await page.textContent('#trial-title')]);
  await page.goForward();
  await titleStarts('trial 2:');
  note('trial.forward', [new URL(page.url()).hash, await page.textContent('#trial-title')]);
  await page.selectOption('select[data-filter="outcome"]', 'error');
  await page.waitForFunction(() => document.querySelectorAll('#trials tbody tr').length === 1);
  note('run.errors_only', await trialTasks());

  // paging: the big run shows one page and moves to the next
  note('big.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.big)));
  note('big.page1', await page.textContent('#trial-count'));
  note('big.rows1', (await trialTasks()).length);
  await page.click('text=next ▶');
  await page.waitForFunction(() => document.querySelector('#trials tbody tr').dataset.trial === '101');
  note('big.page2', await page.textContent('#trial-count'));

  // the arena: its charts are drawn
  note('arena.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.arena)));
  note('arena.charts', await page.$$eval('#arena-report figure.chart svg', (s) => s.length));
  note('arena.ecdf_paths', await page.$$eval('#arena-report figure.chart svg path, #arena-report figure.chart svg polyline', (s) => s.length));
  note('arena.headings', await page.$$eval('#arena-report h2, #arena-report h3', (h) => h.map((x) => x.textContent)));
  note('arena.count', await page.textContent('[data-count="trials"]'));
  note('arena.warmups', await page.textContent('[data-count="warmups"]'));
  await shot('arena');

  // compare: the planted regression
  note('compare.ready', await open(cfg.base + '/compare?a=' + encodeURIComponent(cfg.a) + '&b=' + encodeURIComponent(cfg.b)));
  note('compare.regressions', await page.getAttribute('#regressions', 'data-regressions'));
  note('compare.rows', await page.$$eval('#compare-report table tbody tr', (trs) => trs.map((t) => t.textContent)));
  note('compare.warnings', await page.$$eval('.identity-warning', (w) => w.map((x) => x.textContent)));
  await shot('compare');

  // a live run grows while the page is open
  note('live.ready', await open(cfg.base + '/runs/' + encodeURIComponent(cfg.live)));
  note('live.before', await page.getAttribute('#trial-count', 'data-total'));
  note('live.indicator', await page.textContent('#live-indicator'));
  const r = await fetch(cfg.control + '/append');
  note('live.appended', await r.text());
  await page.waitForFunction((n) => document.querySelector('#trial-count').dataset.total === String(n),
    Number(out['live.before']) + 3);
  note('live.after', await page.getAttribute('#trial-count', 'data-total'));
  note('live.tasks', await trialTasks());
  await shot('live');

  // the export opens from file://
  note('export.ready', await open('file://' + cfg.export + '/index.html'));
  note('export.ids', await rowIds());
  await page.click(`#runs tbody tr[data-run-id="${cfg.b}"] a.run-link`);
  await page.waitForSelector('body[data-ready]');
  note('export.run_url', page.url());
  note('export.tasks', await trialTasks());
  await page.click('#trials tbody tr[data-trial="4"]');
  await page.waitForSelector('#trial-title');
  note('export.trial', await page.textContent('#trial-title'));
  note('export.trial_hash', new URL(page.url()).hash);
  await open('file://' + cfg.export + '/index.html');
  await open('file://' + cfg.export + '/runs/' + cfg.b + '.html#trial-2');
  await titleStarts('trial 2:');
  note('export.reopened', await page.textContent('#trial-title'));
  await shot('export-run');
  await open('file://' + cfg.export + '/runs/' + cfg.agents + '.html');
  await page.waitForSelector('#groups-table');
  note('export.agents.groups', await page.$$eval('#groups-table tbody tr', (trs) => trs.map((t) => t.dataset.group)));
  await page.selectOption('select[data-filter="model"]', 'fake/model-2');
  await page.waitForFunction(() => document.querySelectorAll('#trials tbody tr').length === 3);
  await page.selectOption('select[data-filter="model"]', '');
  await page.waitForFunction(() => document.querySelectorAll('#trials tbody tr').length === 9);
  note('export.agents.models', await page.$$eval('#trials tbody td.model', (tds) => [...new Set(tds.map((t) => t.textContent))].sort()));
  note('export.compare.ready', await open('file://' + cfg.export + '/compare/' + cfg.export_compare + '.html'));
  note('export.compare.regressions', await page.getAttribute('#regressions', 'data-regressions'));
  await shot('export-compare');
  // the export's CSP (a meta tag) must stop a load from another origin as the server's header does:
  // the first of the image's load, its error or the CSP violation says what happened
  await open('file://' + cfg.export + '/index.html');
  note('export.csp_probe', await page.evaluate((url) => new Promise((resolve) => {
    document.addEventListener('securitypolicyviolation', (e) => resolve('blocked: ' + e.effectiveDirective), { once: true });
    const img = new Image();
    img.onload = () => resolve('loaded');
    img.onerror = () => resolve('error');
    img.src = url;
  }), beacon));
} catch (e) {
  note('exception', String(e && e.stack || e));
} finally {
  note('page_errors', errors);
  note('offsite_requests', offsite);
  await close();
  process.stdout.write(JSON.stringify(out) + '\n');
}
