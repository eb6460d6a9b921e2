// cseng view: the history page (lua/cseng/view/history.lua serves its JSON from the results
// folders' history stores). Per lineage (a watch's runs, or a plan's) and provider, the time
// series of the median and p95 of one primitive with their CIs, the trailing window detection
// judged each run against, the changes it called (marked), and the error rate; every point is a
// link to its run. A year of hourly runs is one path per line and band, not an element per
// point. Text goes in with textContent; the only URLs are the viewer's own.
'use strict';

const W = 1100, H = 260, PAD = { l: 64, r: 16, t: 14, b: 34 };

async function api(path) {
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  const doc = await r.json();
  if (!r.ok) throw new Error(doc.error || 'HTTP ' + r.status);
  // an empty list may come as {} (the server's JSON encoder cannot tell an empty array)
  if (doc.columns) for (const k of Object.keys(doc.columns)) if (!Array.isArray(doc.columns[k])) doc.columns[k] = [];
  if (doc.changes && !Array.isArray(doc.changes)) doc.changes = [];
  return doc;
}

const runLink = (id) => '/runs/' + encodeURIComponent(id);
const fmtMs = (v) => (v === null || v === undefined ? '–' : v >= 1000 ? (v / 1000).toFixed(2) + ' s' : v.toFixed(1) + ' ms');
const fmtRate = (v) => (v === null || v === undefined ? '–' : (100 * v).toFixed(1) + '%');
const time = (t) => (t ? String(t).replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–');
const epochTime = (s) => (s === null || s === undefined ? '–' : time(new Date(s * 1000).toISOString()));

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// a path through the points that have values (a gap where one is missing)
function linePath(xs, ys) {
  let d = '', pen = false;
  for (let i = 0; i < xs.length; i++) {
    if (ys[i] === null || ys[i] === undefined) { pen = false; continue; }
    d += (pen ? 'L' : 'M') + xs[i].toFixed(1) + ' ' + ys[i].toFixed(1);
    pen = true;
  }
  return d;
}

// a band between lo and hi, one closed shape per run of points that have both
function bandPath(xs, lo, hi) {
  let d = '', i = 0;
  while (i < xs.length) {
    while (i < xs.length && (lo[i] === null || hi[i] === null)) i++;
    const s = i;
    while (i < xs.length && lo[i] !== null && hi[i] !== null) i++;
    if (i > s) {
      d += 'M' + xs[s].toFixed(1) + ' ' + hi[s].toFixed(1);
      for (let k = s + 1; k < i; k++) d += 'L' + xs[k].toFixed(1) + ' ' + hi[k].toFixed(1);
      for (let k = i - 1; k >= s; k--) d += 'L' + xs[k].toFixed(1) + ' ' + lo[k].toFixed(1);
      d += 'Z';
    }
  }
  return d;
}

// One chart of a series: doc.columns are parallel arrays (i, run_id, started_s, value, lo, hi,
// verdict, w_value, w_lo, w_hi, p50.., p95..). rate: the error rate (no p95).
function chart(doc, opts) {
  const c = doc.columns, n = doc.n;
  const rate = opts.rate;
  const fmt = rate ? fmtRate : fmtMs;
  const tops = [];
  for (let k = 0; k < n; k++) tops.push(rate ? c.hi[k] : (opts.p95 ? (c.p95_hi[k] ?? c.p95[k]) : c.hi[k]));
  let ymax = niceMax(Math.max(...tops.filter((v) => v !== null && v !== undefined), rate ? 0.05 : 1));
  if (!rate && opts.cap) ymax = Math.min(ymax, niceMax(opts.cap));
  const x = (k) => PAD.l + (n <= 1 ? (W - PAD.l - PAD.r) / 2 : (k * (W - PAD.l - PAD.r)) / (n - 1));
  const y = (v) => (v === null || v === undefined ? null : PAD.t + (H - PAD.t - PAD.b) * (1 - Math.min(v, ymax) / ymax));
  const xs = Array.from({ length: n }, (_, k) => x(k));
  const m = (arr) => arr.map(y);
  const root = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, class: 'history-chart', role: 'img', 'data-provider': opts.provider,
    'data-points': String(n), 'aria-label': opts.title });
  // axes and grid
  for (let g = 0; g <= 4; g++) {
    const v = (ymax * g) / 4, yy = y(v);
    root.append(svgEl('line', { x1: PAD.l, x2: W - PAD.r, y1: yy, y2: yy, stroke: '#e5e7eb' }));
    root.append(svgEl('text', { x: PAD.l - 6, y: yy + 4, 'text-anchor': 'end' }, fmt(v)));
  }
  const ticks = Math.min(n, 6);
  for (let t = 0; t < ticks; t++) {
    const k = ticks <= 1 ? 0 : Math.round((t * (n - 1)) / (ticks - 1));
    const anchor = ticks > 1 && t === ticks - 1 ? 'end' : (ticks > 1 && t === 0 ? 'start' : 'middle');
    root.append(svgEl('text', { x: xs[k], y: H - 14, 'text-anchor': anchor }, 'run ' + c.i[k]));
    root.append(svgEl('text', { x: xs[k], y: H - 2, 'text-anchor': anchor, class: 'muted-svg' }, epochTime(c.started_s[k]).slice(0, 10)));
  }
  // the window detection judged against, then the run's CI, then the lines
  root.append(svgEl('path', { d: bandPath(xs, m(c.w_lo), m(c.w_hi)), fill: '#e5e7eb', 'fill-opacity': 0.7, class: 'window-band' }));
  if (!rate && opts.p95) {
    root.append(svgEl('path', { d: bandPath(xs, m(c.p95_lo), m(c.p95_hi)), fill: '#fdba74', 'fill-opacity': 0.25, class: 'p95-band' }));
    root.append(svgEl('path', { d: linePath(xs, m(c.p95)), fill: 'none', stroke: '#ea580c', 'stroke-width': 1.2,
      'stroke-dasharray': '4 3', class: 'p95-line' }));
  }
  root.append(svgEl('path', { d: bandPath(xs, m(c.lo), m(c.hi)), fill: '#93c5fd', 'fill-opacity': 0.45, class: 'ci-band' }));
  root.append(svgEl('path', { d: linePath(xs, m(c.value)), fill: 'none', stroke: '#1d4ed8', 'stroke-width': 1.5, class: 'p50-line' }));
  // candidates (a run that separates, not held yet) and changes
  for (let k = 0; k < n; k++) {
    if (c.verdict[k] === 'candidate') root.append(svgEl('circle', { cx: xs[k], cy: y(c.value[k]), r: 3, fill: '#f59e0b', class: 'candidate-marker' }));
  }
  for (const ch of doc.changes) {
    const k = c.i.indexOf(ch.first_index);
    if (k < 0) continue;
    const col = ch.regression ? '#b91c1c' : '#15803d';
    root.append(svgEl('line', { x1: xs[k], x2: xs[k], y1: PAD.t, y2: H - PAD.b, stroke: col, 'stroke-width': 1.5,
      'stroke-dasharray': '2 2', class: 'change-line' }));
    const mk = svgEl('circle', { cx: xs[k], cy: y(c.value[k]), r: 5, fill: col, class: 'change-marker',
      'data-run-index': String(ch.first_index), 'data-direction': ch.direction });
    mk.append(svgEl('title', {}, `${ch.regression ? 'regression' : 'improvement'} from run ${ch.first_index}`));
    root.append(mk);
  }
  // hover and click: the nearest run
  const hover = svgEl('line', { y1: PAD.t, y2: H - PAD.b, stroke: '#111827', 'stroke-width': 1, visibility: 'hidden' });
  root.append(hover);
  const catcher = svgEl('rect', { x: PAD.l, y: PAD.t, width: W - PAD.l - PAD.r, height: H - PAD.t - PAD.b, fill: 'transparent',
    class: 'hit', style: 'cursor:pointer' });
  root.append(catcher);
  const nearest = (ev) => {
    const r = root.getBoundingClientRect();
    const px = ((ev.clientX - r.left) / r.width) * W;
    return Math.max(0, Math.min(n - 1, Math.round(((px - PAD.l) / (W - PAD.l - PAD.r)) * (n - 1))));
  };
  catcher.addEventListener('mousemove', (ev) => {
    const k = nearest(ev);
    hover.setAttribute('x1', xs[k]); hover.setAttribute('x2', xs[k]); hover.setAttribute('visibility', 'visible');
    opts.tip(`run ${c.i[k]} · ${epochTime(c.started_s[k])} · ${c.run_id[k]} · median ${fmt(c.value[k])} [${fmt(c.lo[k])}, ${fmt(c.hi[k])}]` +
      (rate ? '' : ` · p95 ${fmt(c.p95[k])}`) + ` · window ${fmt(c.w_value[k])} [${fmt(c.w_lo[k])}, ${fmt(c.w_hi[k])}] · ${c.verdict[k]}`);
  });
  catcher.addEventListener('mouseleave', () => { hover.setAttribute('visibility', 'hidden'); opts.tip(''); });
  catcher.addEventListener('click', (ev) => { window.location.href = runLink(c.run_id[nearest(ev)]); });
  return root;
}

function changesTable(changes, rate) {
  if (!changes.length) return el('p', { class: 'muted' }, 'No change called.');
  const fmt = rate ? fmtRate : fmtMs;
  return el('table', { class: 'small changes' },
    el('thead', {}, el('tr', {}, ['', 'from run', 'held to', 'value', 'baseline', 'baseline CI', 'first run'].map((h) => el('th', {}, h)))),
    el('tbody', {}, changes.map((ch) => el('tr', { class: ch.regression ? 'regression' : 'improvement' },
      el('td', {}, el('span', { class: 'badge ' + (ch.regression ? 'error' : 'ok') }, ch.regression ? 'regression' : 'improvement')),
      el('td', { class: 'num' }, ch.first_index), el('td', { class: 'num' }, ch.confirmed_index),
      el('td', { class: 'num' }, fmt(ch.value)), el('td', { class: 'num' }, fmt(ch.baseline_value)),
      el('td', { class: 'num' }, `[${fmt(ch.baseline_lo)}, ${fmt(ch.baseline_hi)}]`),
      el('td', {}, el('a', { href: runLink(ch.first_run_id), class: 'run-link' }, ch.first_run_id))))));
}

async function draw(root, index) {
  const q = new URLSearchParams(location.search);
  const lineages = [];
  for (const s of index.stores) for (const l of s.lineages) lineages.push({ store: s.store, dir: s.dir, ...l });
  if (!lineages.length) {
    root.replaceChildren(el('h1', {}, 'History'), el('p', { class: 'muted' },
      'No judged runs yet: the history store holds a lineage once its runs have ended (cseng watch, or cseng history DIR).'));
    return;
  }
  const key = (l) => l.store + ':' + l.lineage;
  const cur = lineages.find((l) => key(l) === q.get('lineage')) || lineages[0];
  const p50s = cur.series.filter((s) => s.metric === 'p50');
  const prims = [...new Set(p50s.map((s) => s.phase + '/' + s.primitive))];
  const prim = prims.includes(q.get('primitive')) ? q.get('primitive') : (prims.find((p) => p.endsWith('/create')) || prims[0]);
  const providers = [...new Set(cur.series.map((s) => s.provider))];
  const tip = el('div', { id: 'history-tip', class: 'muted' }, '');
  const go = (l, p) => { const u = new URLSearchParams({ lineage: key(l), primitive: p || '' }); location.search = u.toString(); };
  const selL = el('select', { id: 'lineage', onchange: (e) => go(lineages[Number(e.target.value)], prim) },
    lineages.map((l, k) => el('option', { value: String(k), selected: l === cur ? 'selected' : null },
      `${l.lineage} (${l.runs} runs${index.stores.length > 1 ? ', ' + l.dir : ''})`)));
  const selP = el('select', { id: 'primitive', onchange: (e) => go(cur, e.target.value) },
    prims.map((p) => el('option', { value: p, selected: p === prim ? 'selected' : null }, p)));
  const charts = el('div', { id: 'history-charts' });
  root.replaceChildren(el('p', {}, el('a', { href: '/' }, '← every run')), el('h1', {}, 'History'),
    el('div', { class: 'toolbar' }, 'lineage ', selL, ' phase/primitive ', selP),
    el('p', { class: 'muted' }, `${cur.runs} run(s), ${cur.judged ?? 0} judged, ${time(cur.first)} to ${time(cur.last)}, ` +
      `${cur.changes} change(s). Blue: the median with its CI; orange: p95 with its CI; grey: the trailing window each run ` +
      'was judged against; a red (green) line: a regression (improvement) from that run. Click a point for its run.'),
    tip, charts);
  const [phase, primitive] = (prim || '/').split('/');
  // every series the page shows, asked for at once
  const wanted = [];
  for (const p of providers) {
    const lq = (metric, ph, pr) => '/api/history/series?' + new URLSearchParams({ store: String(cur.store), lineage: cur.lineage,
      provider: p, phase: ph, primitive: pr, metric }).toString();
    const has = (metric) => cur.series.some((s) => s.provider === p && s.metric === metric &&
      (metric !== 'p50' || (s.phase === phase && s.primitive === primitive)));
    wanted.push({ p, latency: prim && has('p50') ? api(lq('p50', phase, primitive)) : null,
      errors: has('error_rate') ? api(lq('error_rate', '-', '-')) : null });
  }
  const setTip = (t) => { tip.textContent = t; };
  for (const w of wanted) {
    const sec = el('section', { class: 'provider', 'data-provider': w.p }, el('h2', {}, w.p));
    charts.append(sec);
    if (w.latency) {
      const doc = await w.latency;
      sec.append(el('h3', {}, `${primitive} (${phase}): median and p95`),
        chart(doc, { provider: w.p, p95: true, tip: setTip, title: `${w.p} ${primitive}` }), changesTable(doc.changes, false));
    }
    if (w.errors) {
      const doc = await w.errors;
      sec.append(el('h3', {}, 'error rate'), chart(doc, { provider: w.p, rate: true, tip: setTip, title: `${w.p} error rate` }),
        changesTable(doc.changes, true));
    }
  }
}

async function start() {
  const root = document.getElementById('app');
  try {
    await draw(root, await api('/api/history'));
    document.body.dataset.ready = '1';
  } catch (e) {
    root.replaceChildren(el('p', { class: 'err' }, 'cseng view: ' + e.message));
    document.body.dataset.ready = 'error';
  }
}
document.addEventListener('DOMContentLoaded', start);
