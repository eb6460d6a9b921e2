// Drives Debian's headless Chromium over the viewer's history page for
// spec/view/history_browser_spec.lua, which serves the fixture folder and reads the JSON this prints
// (one {name: value} per observation: the verdicts stay in the spec). A screenshot goes to cfg.shots.
// usage: node history.mjs '<json config>'
import path from 'node:path';
import { launch } from './launch.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = {};
const note = (name, value) => { out[name] = value; };
const { ctx, page, close } = await launch();
const errors = [], offsite = [];
ctx.on('request', (r) => { if (!r.url().startsWith(cfg.base)) offsite.push(r.url()); });
page.on('pageerror', (e) => errors.push(String(e)));
page.setDefaultTimeout(30000);

try {
  await page.goto(cfg.base + '/history');
  await page.waitForSelector('body[data-ready]');
  note('ready', await page.evaluate(() => document.body.dataset.ready));
  note('lineages', await page.$$eval('#lineage option', (os) => os.map((o) => o.textContent)));
  note('primitive', await page.$eval('#primitive', (s) => s.value));
  note('charts', await page.$$eval('svg.history-chart', (ss) => ss.map((s) => ({ provider: s.dataset.provider, points: Number(s.dataset.points),
    label: s.getAttribute('aria-label') }))));
  note('change_markers', await page.$$eval('svg.history-chart circle.change-marker', (cs) => cs.map((c) => ({
    index: Number(c.dataset.runIndex), direction: c.dataset.direction }))));
  note('change_links', await page.$$eval('table.changes a.run-link', (as) => as.map((a) => a.textContent)));
  note('bands', await page.$$eval('svg.history-chart path.ci-band', (ps) => ps.map((p) => p.getAttribute('d').length > 0)));
  await page.screenshot({ path: path.join(cfg.shots, 'history.png'), fullPage: true });
  // another primitive, through the selector
  await page.selectOption('#primitive', 'measured/first_exec');
  await page.waitForSelector('body[data-ready="1"]');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('primitive') === 'measured/first_exec');
  await page.waitForSelector('svg.history-chart');
  note('first_exec_markers', await page.$$eval('svg.history-chart circle.change-marker', (cs) => cs.length));
  // a click on the chart at the 9th run opens that run's page
  await page.goto(cfg.base + '/history');
  await page.waitForSelector('body[data-ready="1"] svg.history-chart');
  const box = await page.$eval('svg.history-chart rect.hit', (r) => { const b = r.getBoundingClientRect(); return { x: b.x, y: b.y, w: b.width, h: b.height }; });
  const n = cfg.runs;
  await page.mouse.move(box.x + box.w * (8 / (n - 1)), box.y + box.h / 2);
  note('tip', await page.$eval('#history-tip', (t) => t.textContent));
  await Promise.all([page.waitForNavigation(), page.mouse.click(box.x + box.w * (8 / (n - 1)), box.y + box.h / 2)]);
  await page.waitForSelector('body[data-ready]');
  note('clicked_url', page.url());
  note('clicked_title', await page.$eval('h1', (h) => h.textContent));
} catch (e) {
  note('exception', String(e && e.stack || e));
}
note('page_errors', errors);
note('offsite_requests', offsite);
await close();
console.log(JSON.stringify(out));
