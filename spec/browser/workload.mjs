// Drives Debian's headless Chromium over arena runs with a workload (--workload) for
// spec/view/workload_browser_spec.lua, at a laptop's width (cfg.width, 1,280 px): for each run
// page it measures every workload figure's chart (svg.workload-figure) as laid out, its rows and
// dots, and whether anything scrolls sideways. It prints one JSON object of observations; the
// verdicts stay in the spec. A screenshot of each page goes to cfg.shots.
// usage: node workload.mjs '<json config>'
import path from 'node:path';
import { launch } from './launch.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { runs: {} };
const note = (name, value) => { out[name] = value; };
const { ctx, page, close } = await launch({ viewport: { width: cfg.width, height: 900 } });
const errors = [], offsite = [];
ctx.on('request', (r) => { if (!r.url().startsWith(cfg.base)) offsite.push(r.url()); });
page.on('pageerror', (e) => errors.push(String(e)));
page.setDefaultTimeout(30000);

try {
  for (const id of cfg.runs) {
    await page.goto(cfg.base + '/runs/' + encodeURIComponent(id));
    await page.waitForSelector('body[data-ready]');
    await page.waitForSelector('#arena-report');
    out.runs[id] = await page.evaluate(() => {
      const vw = document.documentElement.clientWidth;
      const charts = [...document.querySelectorAll('#arena-report svg.workload-figure')].map((svg) => {
        const b = svg.getBoundingClientRect();
        const fig = svg.closest('figure');
        const cs = getComputedStyle(svg);
        // the heading the chart's section opens with
        let h = fig; while (h && !/^H[1-6]$/.test(h.tagName)) h = h.previousElementSibling;
        return {
          figure: svg.dataset.figure, unit: svg.dataset.unit, heading: h ? h.textContent : null,
          left: b.left, right: b.right, width: b.width, height: b.height,
          visible: cs.display !== 'none' && cs.visibility !== 'hidden' && b.width > 0 && b.height > 0,
          fig_scroll: fig ? fig.scrollWidth : null, fig_client: fig ? fig.clientWidth : null,
          rows: [...svg.querySelectorAll('g.strip-row')].map((g) => ({
            provider: g.dataset.provider, labelled: g.dataset.labelled === 'true', samples: Number(g.dataset.samples),
            dots: g.querySelectorAll('circle.sample').length, medians: g.querySelectorAll('line.median').length,
            cis: g.querySelectorAll('rect.ci').length,
            // every dot inside the chart's own box
            dots_outside: [...g.querySelectorAll('circle.sample')].filter((c) => {
              const r = c.getBoundingClientRect();
              return r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5;
            }).length,
          })),
        };
      });
      return { viewport: vw, page_scroll: document.documentElement.scrollWidth, charts,
        headings: [...document.querySelectorAll('#arena-report h2, #arena-report h3, #arena-report h4')].map((x) => x.textContent) };
    });
    await page.screenshot({ path: path.join(cfg.shots, 'workload-' + cfg.names[id] + '.png'), fullPage: true });
    const first = await page.$('#arena-report svg.workload-figure');
    if (first) await first.screenshot({ path: path.join(cfg.shots, 'workload-' + cfg.names[id] + '-chart.png') });
  }
} catch (e) {
  note('exception', String(e && e.stack || e));
}
note('page_errors', errors);
note('offsite_requests', offsite);
await close();
console.log(JSON.stringify(out));
