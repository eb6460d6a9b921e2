// cseng view: the pages (run list, run, compare), drawn from the JSON the viewer serves
// (lua/cseng/view/app.lua), or, in a static export, from the data scripts beside the page
// (CSENG_PUT calls), so the same code runs over http:// and file://. No framework, no fetch
// from outside: text goes in with textContent; the only HTML set as markup is what the server
// rendered and escaped (the arena's report, the comparison); every href and src passes safeUrl.
'use strict';

const DATA = { runs: null, run: {}, records: {}, compare: {} };
window.CSENG_PUT = (kind, key, doc) => { if (kind === 'runs') DATA.runs = doc; else DATA[kind][key] = doc; };

const ROOT = () => document.body.dataset.root;
const STATIC = () => ROOT() !== '/';
const PAGE_SIZE = 100;
const PHASE_COLORS = {
  build: '#8c6d31', start: '#3182bd', upload: '#6baed6', prepare: '#9ecae1', instruction_write: '#c6dbef',
  solve: '#31a354', verify: '#e6550d', stop: '#756bb1', create: '#3182bd', first_exec: '#31a354', cleanup: '#756bb1',
};

// ---- data access ---------------------------------------------------------------------------

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement('script');
    s.src = src; s.onload = resolve; s.onerror = () => reject(new Error('cannot load ' + src));
    document.body.appendChild(s);
  });
}

function filterTrials(rows, q) {
  return rows.filter((r) => (!q.outcome || r.outcome === q.outcome) && (!q.provider || r.provider === q.provider) &&
    (!q.solver || r.solver === q.solver) && (!q.model || r.model === q.model) &&
    (!q.code || r.code === q.code) && (!q.task || String(r.task).includes(q.task)));
}

async function staticApi(path) {
  const u = new URL(path, 'http://export.invalid');
  const q = Object.fromEntries(u.searchParams);
  const p = u.pathname;
  if (p === '/api/runs') return DATA.runs;
  if (p === '/api/version') return { version: 0 };
  if (p === '/api/compare') return DATA.compare[q.a + '\0' + q.b] || { error: 'this comparison was not exported' };
  const m = p.match(/^\/api\/runs\/([^/]+)(.*)$/);
  if (!m) throw new Error('no such path ' + p);
  const id = decodeURIComponent(m[1]);
  const run = DATA.run[id];
  if (!run) return { error: 'run ' + id + ' was not exported' };
  if (m[2] === '') return run;
  if (m[2] === '/trials') {
    const all = filterTrials(run.trials, q);
    const offset = Number(q.offset || 0), limit = Number(q.limit || PAGE_SIZE);
    return { total: all.length, offset, limit, rows: all.slice(offset, offset + limit), version: 0 };
  }
  if (m[2] === '/groups') return (run.groups || {})[q.by || 'solver,model'] || { error: 'no grouping ' + q.by };
  const t = m[2].match(/^\/trials\/(\d+)$/);
  if (t) {
    const i = Number(t[1]), chunk = Math.floor((i - 1) / run.record_chunk);
    const key = id + '\0' + chunk;
    if (!DATA.records[key]) await loadScript(ROOT() + 'data/rec-' + run.run.file + '-' + chunk + '.js');
    return DATA.records[key][(i - 1) % run.record_chunk];
  }
  throw new Error('no such path ' + p);
}

async function api(path) {
  if (STATIC()) return staticApi(path);
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  const doc = await r.json();
  if (!r.ok && !doc.error) doc.error = 'HTTP ' + r.status;
  return doc;
}

const link = {
  home: () => (STATIC() ? ROOT() + 'index.html' : '/'),
  run: (r) => (STATIC() ? ROOT() + 'runs/' + r.file + '.html' : '/runs/' + encodeURIComponent(r.id)),
  compare: (a, b) => {
    if (!STATIC()) return '/compare?a=' + encodeURIComponent(a) + '&b=' + encodeURIComponent(b);
    const c = (DATA.runs.compares || []).find((x) => x.a === a && x.b === b);
    return c ? ROOT() + 'compare/' + c.file + '.html' : null;
  },
};

const fmt = {
  s: (v, d = 2) => (v === undefined || v === null ? '–' : Number(v).toFixed(d)),
  usd: (v) => (v === undefined || v === null ? '–' : '$' + Number(v).toFixed(Number(v) < 1 ? 4 : 2)),
  dur: (s) => {
    if (s === undefined || s === null) return '–';
    if (s < 60) return s.toFixed(1) + ' s';
    if (s < 3600) return (s / 60).toFixed(1) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  },
  time: (t) => (t ? String(t).replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–'),
  // a start in the run list: month, day and minute this year (the year before, the date); UTC, as logged
  day: (t) => {
    const s = String(t);
    return s.slice(0, 4) === String(new Date().getUTCFullYear()) ? s.slice(5, 16).replace('T', ' ') : s.slice(0, 10);
  },
};

function badge(text, kind) { return el('span', { class: 'badge ' + (kind || text) }, text); }

function statusBadge(r) {
  if (r.live) return badge('live', 'live');
  if (r.error) return badge('error', 'error');
  return badge(r.status || '?', r.status === 'finished' ? 'ok' : 'warn');
}

function kv(pairs) {
  return el('dl', { class: 'kv' }, pairs.filter((p) => p[1] !== undefined && p[1] !== null && p[1] !== '')
    .map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

function setLive(on) {
  const ind = document.getElementById('live-indicator');
  ind.textContent = on ? '● live: updating' : '';
  ind.className = on ? 'live-on' : '';
}

// a poller that calls fn every ms while keep() holds (server mode only)
function poll(ms, fn) {
  if (STATIC()) return;
  let busy = false;
  const t = setInterval(async () => {
    if (busy) return;
    busy = true;
    try { if ((await fn()) === false) clearInterval(t); } catch (e) { console.error(e); } finally { busy = false; }
  }, ms);
}

// ---- charts (hand-written SVG) -------------------------------------------------------------

function waterfall(phases, scale, width, height) {
  const svg = svgEl('svg', { width, height, class: 'waterfall', viewBox: `0 0 ${width} ${height}` });
  let x = 0;
  for (const [name, sec] of phases || []) {
    const w = Math.max(scale > 0 ? (sec / scale) * width : 0, sec > 0 ? 1 : 0);
    const r = svgEl('rect', { x, y: 0, width: w, height, fill: PHASE_COLORS[name] || '#999' });
    r.append(svgEl('title', {}, `${name}: ${fmt.s(sec, 3)} s`));
    svg.append(r);
    x += w;
  }
  return svg;
}

function hbars(items, unit) {
  const max = Math.max(...items.map((i) => i.value), 1e-9);
  const rowH = 20, labelW = 130, barW = 300, w = labelW + barW + 80;
  const svg = svgEl('svg', { width: w, height: items.length * rowH + 4, class: 'hbars', role: 'img' });
  items.forEach((it, k) => {
    const y = k * rowH + 2;
    svg.append(svgEl('text', { x: labelW - 6, y: y + 14, 'text-anchor': 'end' }, it.label));
    svg.append(svgEl('rect', { x: labelW, y: y + 2, width: Math.max(1, (it.value / max) * barW), height: rowH - 6,
      fill: it.color || '#3182bd' }));
    svg.append(svgEl('text', { x: labelW + (it.value / max) * barW + 6, y: y + 14 }, fmt.s(it.value, 3) + (unit || '')));
  });
  return svg;
}

// ---- page: run list ------------------------------------------------------------------------

// The run list reads at 1,280 px: a row is one line (a second, clipped, for a note), a run id is
// never broken, and the text that can be long (plan and label, providers, solver and model, the
// dataset's path) is clipped to a share of the viewport with its whole text in a title.
const RUN_COLUMNS = [
  ['id', 'run'], ['status', 'status'], ['plan', 'plan'], ['providers', 'providers / mode'],
  ['solver', 'solver / model'], ['dataset', 'dataset'], ['started', 'started'], ['duration_s', 'duration'],
  ['passed', 'passed'], ['failed', 'failed'], ['errors', 'errors'], ['cost_usd', 'cost'],
];

// a path cut to about max characters, its end kept (the file name says most): …/tasks/smoke16.jsonl
function shortPath(p, max) {
  const s = String(p);
  if (s.length <= max) return s;
  const parts = s.split('/');
  let out = parts[parts.length - 1];
  if (out.length + 2 > max) return out.slice(0, Math.ceil(max / 2) - 1) + '…' + out.slice(out.length - Math.floor(max / 2) + 1);
  for (let i = parts.length - 2; i > 0; i--) {
    if (parts[i].length + out.length + 3 > max) break;
    out = parts[i] + '/' + out;
  }
  return '…/' + out;
}

// text clipped to its column (CSS: .clip), the whole of it in a title
function clip(text, title, cls) {
  return el('span', { class: 'clip' + (cls ? ' ' + cls : ''), title: title || text }, text);
}

// a note under a run id: one line, clipped, whole in its title; it never widens the column
function note(text, cls) { return el('div', { class: 'note ' + (cls || 'muted'), title: text }, text); }

// an error of a file that is not a run: the log's path is on its page; here, its base name
function shortError(r) {
  const e = String(r.error);
  return r.path && e.startsWith(r.path) ? e.replace(r.path, r.path.split('/').pop()) : e;
}

function runCell(r, key) {
  switch (key) {
    case 'id': {
      // a copy of another file's run is listed as "<run id> (<file>)": the id stays whole, the file is a note
      const id = String(r.id), rid = typeof r.run_id === 'string' ? r.run_id : null;
      const suffix = rid && id !== rid && id.startsWith(rid + ' ') ? id.slice(rid.length + 1) : null;
      const name = suffix ? rid : id;
      const notes = [suffix, r.torn, r.indexing ? `reading the log: ${Math.floor((100 * r.indexing.read) / r.indexing.bytes)}%` : null];
      return el('td', { class: 'run-id' }, r.error && !r.started ? el('span', { class: 'run-name' }, name)
        : el('a', { href: link.run(r), class: 'run-link' }, name),
      notes.some(Boolean) ? note(notes.filter(Boolean).join(': '), r.torn ? 'warn-text' : 'muted') : null);
    }
    // an arena run (kind startup) says so before its plan; the kind has a filter of its own
    case 'plan': {
      const arena = r.kind === 'startup';
      const text = [r.plan, r.label].filter(Boolean).join(' · ');
      const title = [r.kind && 'kind: ' + r.kind, r.plan && 'plan: ' + r.plan, r.label && 'label: ' + r.label].filter(Boolean).join('\n');
      return el('td', { class: 'flex' }, el('span', { class: 'clip', title }, arena ? el('span', { class: 'tag' }, 'arena') : null, text));
    }
    case 'providers': return el('td', { class: 'flex' }, clip([(r.providers || []).join(', '), r.mode].filter(Boolean).join(' / ')));
    case 'solver': return el('td', { class: 'flex' }, clip([r.solver, r.model].filter(Boolean).join(' / ')));
    // the path cut to what its column can show (about 1/45 of the window in characters): the file name first
    case 'dataset': return el('td', { class: 'flex' }, r.dataset ? clip(shortPath(r.dataset, Math.max(16, Math.round(window.innerWidth / 45))),
      String(r.dataset)) : '');
    case 'started': return el('td', {}, r.started ? el('span', { title: fmt.time(r.started) + ' (UTC)' }, fmt.day(r.started)) : '–');
    case 'duration_s': return el('td', { class: 'num' }, fmt.dur(r.duration_s));
    case 'cost_usd': return el('td', { class: 'num' }, fmt.usd(r.cost_usd));
    case 'passed': case 'failed': case 'errors': return el('td', { class: 'num ' + key }, r[key] ?? 0);
    case 'status': return el('td', {}, statusBadge(r));
    default: return el('td', {}, r[key] ?? '');
  }
}

// a row of the run list; a file that is not a run has its error where its columns would be
function runRow(r) {
  const tr = el('tr', { 'data-run-id': r.id, class: r.live ? 'live-row' : '' });
  if (r.error && !r.started) {
    tr.append(runCell(r, 'id'), runCell(r, 'status'),
      el('td', { colspan: RUN_COLUMNS.length - 2, class: 'row-error' }, note(shortError(r), 'err')));
  } else {
    tr.append(...RUN_COLUMNS.map(([k]) => runCell(r, k)));
    if (r.error) tr.cells[0].append(note(shortError(r), 'err'));
  }
  return tr;
}

async function pageRuns(root) {
  let doc = await api('/api/runs');
  const state = { sort: 'started', dir: -1, filter: '', kind: '', solver: '', model: '' };
  const tbody = el('tbody');
  const count = el('span', { class: 'muted' });
  const kinds = el('select', { 'aria-label': 'kind', onchange: (e) => { state.kind = e.target.value; draw(); } });
  // solver and model: each run's (run_started's identity), filtered like kind
  const pick = (key) => el('select', { 'aria-label': key, 'data-run-filter': key, onchange: (e) => { state[key] = e.target.value; draw(); } });
  const solvers = pick('solver'), models = pick('model');
  const options = (sel, label, values, cur) => {
    if (sel.options.length === values.length + 1) return;
    sel.replaceChildren(el('option', { value: '' }, 'every ' + label), ...values.map((v) => el('option', { value: v }, v)));
    sel.value = cur;
  };
  const selA = el('select', { 'aria-label': 'run A' }), selB = el('select', { 'aria-label': 'run B' });
  const compareBtn = el('button', { onclick: () => {
    const href = link.compare(selA.value, selB.value);
    if (href) location.href = href; else alert('this comparison was not exported');
  } }, 'compare');
  const head = el('tr', {}, RUN_COLUMNS.map(([k, label]) => el('th', { 'data-key': k, onclick: () => {
    state.dir = state.sort === k ? -state.dir : (k === 'started' ? -1 : 1); state.sort = k; draw();
  } }, label)));
  function draw() {
    const f = state.filter.toLowerCase();
    let rows = doc.runs.filter((r) => (!state.kind || r.kind === state.kind) &&
      (!state.solver || r.solver === state.solver) && (!state.model || r.model === state.model) &&
      (!f || JSON.stringify([r.id, r.plan, r.label, r.providers, r.mode, r.solver, r.model, r.dataset, r.status, r.error]).toLowerCase().includes(f)));
    rows = rows.slice().sort((a, b) => {
      const x = a[state.sort], y = b[state.sort];
      if (x === y) return 0;
      if (x === undefined || x === null) return 1;
      if (y === undefined || y === null) return -1;
      return (x < y ? -1 : 1) * state.dir;
    });
    tbody.replaceChildren(...rows.map(runRow));
    count.textContent = `${rows.length} of ${doc.runs.length} run(s)`;
    for (const th of head.children) th.className = th.dataset.key === state.sort ? (state.dir > 0 ? 'sorted asc' : 'sorted desc') : '';
    const ks = [...new Set(doc.runs.map((r) => r.kind))].sort();
    if (kinds.options.length !== ks.length + 1) {
      kinds.replaceChildren(el('option', { value: '' }, 'every kind'), ...ks.map((k) => el('option', { value: k }, k)));
      kinds.value = state.kind;
    }
    const seen = (k) => [...new Set(doc.runs.map((r) => r[k]).filter((v) => v !== undefined && v !== null))].map(String).sort();
    options(solvers, 'solver', seen('solver'), state.solver);
    options(models, 'model', seen('model'), state.model);
    const ok = doc.runs.filter((r) => r.started && !(r.error && !r.trials));
    for (const s of [selA, selB]) {
      const v = s.value;
      s.replaceChildren(...ok.map((r) => el('option', { value: r.id }, r.id)));
      if (v) s.value = v;
    }
    if (!selB.dataset.init && ok.length > 1) { selA.value = ok[1].id; selB.value = ok[0].id; selB.dataset.init = '1'; }
    setLive(doc.runs.some((r) => r.live));
  }
  root.replaceChildren(
    el('h1', {}, 'Runs'),
    el('div', { class: 'toolbar' },
      el('input', { type: 'search', placeholder: 'filter runs', 'aria-label': 'filter runs', oninput: (e) => { state.filter = e.target.value; draw(); } }),
      kinds, solvers, models, count),
    el('div', { class: 'table-wrap' }, el('table', { id: 'runs' }, el('thead', {}, head), tbody)),
    el('h2', {}, 'Compare two runs'),
    el('div', { class: 'toolbar' }, 'A (baseline) ', selA, ' B ', selB, compareBtn));
  draw();
  let version = doc.version;
  poll(1500, async () => {
    const v = await api('/api/version');
    if (v.version !== version) { doc = await api('/api/runs'); version = doc.version; draw(); }
  });
}

// ---- page: one run -------------------------------------------------------------------------

function runHeader(doc) {
  const r = doc.run;
  const lives = Object.entries(r.live_sandboxes || {});
  return el('section', { class: 'run-header' },
    el('h1', {}, r.id, ' ', statusBadge(r)),
    r.error ? el('p', { class: 'err' }, r.error) : null,
    r.torn ? el('p', { class: 'warn-text' }, r.torn) : null,
    r.indexing ? el('p', { class: 'muted', id: 'indexing' }, `reading the log: ${Math.floor((100 * r.indexing.read) / r.indexing.bytes)}% ` +
      `of ${(r.indexing.bytes / 1048576).toFixed(0)} MiB; the counts grow as it goes`) : null,
    kv([['kind', r.kind], ['plan', r.plan], ['providers', (r.providers || []).join(', ')], ['mode', r.mode],
      ['solver', [r.solver, r.model].filter(Boolean).join(' / ')], ['dataset', r.dataset], ['dataset digest', r.dataset_digest],
      ['started', fmt.time(r.started)], ['finished', fmt.time(r.finished)], ['duration', fmt.dur(r.duration_s)],
      ['file', r.path]]),
    el('p', { class: 'counts' },
      el('span', { class: 'passed', 'data-count': 'trials' }, `${r.trials} ${r.kind === 'startup' ? 'sample' : 'trial'}(s)`),
      r.warmups ? el('span', { class: 'muted', 'data-count': 'warmups' }, ` (and ${r.warmups} warmup(s), not counted)`) : null, ': ',
      el('span', { class: 'passed' }, `${r.passed} passed`), ', ',
      el('span', { class: 'failed' }, `${r.failed} failed`), ', ',
      el('span', { class: 'errors' }, `${r.errors} errors`),
      `; sandbox cost ${fmt.usd(r.cost_usd)}`, r.solver_cost_usd ? `; model ${fmt.usd(r.solver_cost_usd)}` : ''),
    lives.length ? el('p', { class: 'live-sandboxes' }, 'live sandboxes: ', lives.map(([p, n]) => `${p} ${n}`).join(', ')) : null,
    doc.status ? el('details', { class: 'status-port' }, el('summary', {}, 'status endpoint (--status-port)'),
      el('pre', {}, JSON.stringify(doc.status, null, 2))) : null);
}

function summarySection(doc) {
  const provs = el('table', { class: 'small' }, el('thead', {}, el('tr', {}, ['provider', 'passed', 'failed', 'errors', 'live sandboxes'].map((h) => el('th', {}, h)))),
    el('tbody', {}, doc.providers.map((p) => el('tr', {}, el('td', {}, p.provider), el('td', { class: 'num passed' }, p.passed),
      el('td', { class: 'num failed' }, p.failed), el('td', { class: 'num errors' }, p.errors), el('td', { class: 'num' }, p.live_sandboxes)))));
  const phases = doc.phases.length ? hbars(doc.phases.map((p) => ({ label: p.phase, value: p.mean_s, color: PHASE_COLORS[p.phase] })), ' s') : el('p', { class: 'muted' }, 'no phase timings');
  const fm = doc.failure_modes.length
    ? el('table', { class: 'small', id: 'failure-modes' }, el('thead', {}, el('tr', {}, ['failure mode', 'trials', 'tasks (first 5)', 'example'].map((h) => el('th', {}, h)))),
      el('tbody', {}, doc.failure_modes.map((f) => el('tr', {}, el('td', {}, f.mode), el('td', { class: 'num' }, f.count),
        el('td', {}, (f.tasks || []).join(', ')), el('td', { class: 'err' }, f.example || '')))))
    : el('p', { class: 'muted' }, 'no failures');
  // every reward key the verifiers wrote is a metric (Harbor's reward.json): its mean over the trials that have it
  const metrics = (doc.metrics || []).length
    ? el('table', { class: 'small', id: 'metrics' }, el('thead', {}, el('tr', {}, ['metric', 'trials', 'mean', 'min', 'max'].map((h) => el('th', {}, h)))),
      el('tbody', {}, doc.metrics.map((m) => el('tr', { 'data-metric': m.key }, el('td', {}, m.key, m.primary ? el('span', { class: 'muted' }, ' (primary)') : ''),
        el('td', { class: 'num' }, m.n), el('td', { class: 'num mean' }, fmt.s(m.mean, 3)), el('td', { class: 'num' }, fmt.s(m.min, 3)),
        el('td', { class: 'num' }, fmt.s(m.max, 3))))))
    : null;
  return el('section', { class: 'grid' },
    el('div', {}, el('h2', {}, 'By provider'), provs),
    el('div', {}, el('h2', {}, 'Phase means'), phases),
    metrics ? el('div', { class: 'wide' }, el('h2', {}, 'Metrics (reward keys)'), metrics) : null,
    el('div', { class: 'wide' }, el('h2', {}, 'Failure modes'), fm));
}

// the trials grouped by solver and model (or with provider and mode, or by provider and mode alone),
// each group's counts and pass@1..K, from /api/runs/<id>/groups (computed apart: a big log's bootstrap
// takes a while, the run document must not)
const GROUPINGS = [['solver,model', 'solver, model'], ['solver,model,provider,mode', 'solver, model, provider, mode'],
  ['provider,mode', 'provider, mode']];
function groupsSection(id) {
  const state = { by: GROUPINGS[0][0] };
  const body = el('div', { id: 'groups' });
  const sel = el('select', { 'aria-label': 'group by', 'data-group-by': '1', onchange: (e) => { state.by = e.target.value; load(); } },
    GROUPINGS.map(([v, label]) => el('option', { value: v }, label)));
  const pct = (p) => `${(100 * p.value).toFixed(1)}% [${(100 * p.lo).toFixed(1)}, ${(100 * p.hi).toFixed(1)}]`;
  async function load() {
    const g = await api('/api/runs/' + encodeURIComponent(id) + '/groups?by=' + encodeURIComponent(state.by));
    if (!g || g.error) { fill(body, el('p', { class: 'err' }, (g && g.error) || 'no groups')); return; }
    const dims = g.by.split(',');
    const kmax = Math.max(0, ...g.rows.flatMap((r) => Object.keys(r.pass_at || {}).map(Number)));
    const ks = Array.from({ length: kmax }, (_, i) => i + 1);
    const head = [...dims, 'trials', 'passed', 'failed', 'errors', ...ks.map((k) => 'pass@' + k)];
    fill(body, el('table', { class: 'small', id: 'groups-table', 'data-by': g.by },
      el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
      el('tbody', {}, g.rows.map((r) => el('tr', { 'data-group': dims.map((d) => r[d]).join(' / ') },
        dims.map((d) => el('td', { class: d }, r[d])), el('td', { class: 'num' }, r.trials),
        el('td', { class: 'num passed' }, r.passed), el('td', { class: 'num failed' }, r.failed), el('td', { class: 'num errors' }, r.errors),
        ks.map((k) => { const p = (r.pass_at || {})[String(k)]; return el('td', { class: 'num pass-at', 'data-k': k }, p ? pct(p) : '–'); }))))));
  }
  const section = el('section', { class: 'groups' }, el('h2', {}, 'By solver and model'),
    el('p', { class: 'muted' }, 'pass@k: the unbiased estimator 1 − C(n−c, k)/C(n, k) per task, averaged over the group\'s tasks with n ≥ k ' +
      '(every attempt is a sample; infrastructure errors are left out of n and counted apart), [95% bootstrap interval over tasks].'),
    el('div', { class: 'toolbar' }, 'group by ', sel), body);
  return { section, load };
}

function textBlock(title, text) {
  if (text === undefined || text === null || text === '') return null;
  return el('div', { class: 'block' }, el('h4', {}, title), el('pre', {}, String(text)));
}

function transcriptView(list) {
  const steps = list.map((e, k) => {
    const role = e.role || e.event || 'entry';
    const parts = [];
    if (e.content) parts.push(el('pre', {}, typeof e.content === 'string' ? e.content : JSON.stringify(e.content, null, 2)));
    for (const c of e.tool_calls || []) {
      parts.push(el('div', { class: 'tool-call' }, '→ ', el('code', {}, (c.name || c.function?.name || 'tool') + ' '),
        el('code', {}, typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments || c.function?.arguments))));
    }
    if (e.command) parts.push(el('div', { class: 'tool-call' }, '$ ', el('code', {}, e.command)));
    for (const key of ['output', 'observation', 'text', 'stdout', 'stderr', 'error']) {
      if (e[key]) parts.push(el('div', { class: 'observation' }, el('span', { class: 'muted' }, key + ' '), el('pre', {}, String(e[key]))));
    }
    const meta = [];
    if (e.exit_code !== undefined) meta.push('exit ' + e.exit_code);
    if (e.seconds !== undefined) meta.push(fmt.s(e.seconds) + ' s');
    const tok = e.usage || e.tokens;
    if (tok) meta.push(Object.entries(tok).map(([k, v]) => `${k} ${v}`).join(', '));
    if (e.cost !== undefined || e.cost_usd !== undefined) meta.push(fmt.usd(e.cost ?? e.cost_usd));
    if (e.finish_reason) meta.push('finish: ' + e.finish_reason);
    if (e.stop_reason) meta.push('stop: ' + e.stop_reason);
    if (e.wait_seconds !== undefined) meta.push('retry after ' + fmt.s(e.wait_seconds) + ' s');
    return el('li', { class: 'step ' + role }, el('div', { class: 'step-head' }, el('b', {}, `${k + 1}. ${role}`),
      e.turn !== undefined ? ` (turn ${e.turn})` : '', meta.length ? el('span', { class: 'muted' }, '  ' + meta.join(' · ')) : ''), parts);
  });
  return el('ol', { class: 'transcript' }, steps);
}

// a record's object as rows of a two-column table: nested objects by dotted key, a list of plain
// values joined, a list of objects as JSON; numbers with at most 4 decimals
function flatten(obj, prefix, out) {
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? prefix + '.' + k : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, key, out);
    else if (Array.isArray(v)) out.push([key, v.every((x) => x === null || typeof x !== 'object') ? v.join(', ') : JSON.stringify(v)]);
    else out.push([key, v]);
  }
  return out;
}
function fieldValue(v) {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number' && !Number.isInteger(v)) return String(Number(v.toFixed(4)));
  return String(v);
}
function fieldsTable(name, obj) {
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) return null;
  const rows = flatten(obj, '', []);
  if (!rows.length) return null;
  return el('div', { class: 'block' }, el('h4', {}, name), el('table', { class: 'small fields', 'data-fields': name },
    el('tbody', {}, rows.map(([k, v]) => el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, fieldValue(v)))))));
}
// the cost ledger (lua/cseng/agent/ledger.lua): one row per item, then the total
function costTable(cost) {
  if (!cost || typeof cost !== 'object' || !Array.isArray(cost.items)) return fieldsTable('cost', cost);
  const cols = [...new Set(cost.items.flatMap((it) => Object.keys(it || {})))];
  return el('div', { class: 'block' }, el('h4', {}, 'cost' + (cost.complete === false ? ' (incomplete: some items have no price)' : '')),
    el('table', { class: 'small fields', 'data-fields': 'cost' },
      el('thead', {}, el('tr', {}, cols.map((c) => el('th', {}, c)))),
      el('tbody', {}, cost.items.map((it) => el('tr', {}, cols.map((c) => el('td', { class: typeof it[c] === 'number' ? 'num' : '' },
        it[c] === undefined ? '' : (c === 'usd' ? fmt.usd(it[c]) : fieldValue(it[c])))))),
      el('tr', { class: 'total' }, el('th', { colspan: Math.max(1, cols.length - 1) }, 'total'), el('td', { class: 'num' }, fmt.usd(cost.total_usd))))));
}

// A trial's address is the run page's fragment #trial-N: it can be copied and reopened, and back and
// forward move between the trials opened (hashchange opens the one named, an empty fragment closes it).
const trialHash = (i) => '#trial-' + i;
function trialFromHash() { const m = /^#trial-(\d+)$/.exec(location.hash); return m ? Number(m[1]) : null; }

async function openTrial(runId, i, panel, opts) {
  panel.replaceChildren(el('p', { class: 'muted' }, 'loading trial…'));
  for (const tr of document.querySelectorAll('#trials tbody tr.selected')) tr.classList.remove('selected');
  const sel = document.querySelector(`#trials tbody tr[data-trial="${i}"]`);
  if (sel) sel.classList.add('selected');
  const d = await api('/api/runs/' + encodeURIComponent(runId) + '/trials/' + i);
  if (!d || d.error) { panel.replaceChildren(el('p', { class: 'err' }, (d && d.error) || 'no trial ' + i)); return; }
  const r = d.record, row = d.row;
  const total = (row.phases || []).reduce((a, p) => a + p[1], 0);
  const here = location.href.replace(/#.*$/, '') + trialHash(i);
  fill(panel,
    el('div', { class: 'trial-head' },
      el('h3', { id: 'trial-title' }, `trial ${i}: ${row.task}`, ' ', badge(row.outcome), row.warmup ? ' (warmup)' : ''),
      el('a', { href: trialHash(i), class: 'trial-link', title: here }, 'link to this trial'),
      el('button', { onclick: () => { history.pushState(null, '', location.pathname + location.search); closeTrial(panel); } }, 'close')),
    kv([['provider', row.provider], ['mode', row.mode], ['solver', row.solver], ['model', row.model !== '-' ? row.model : ''],
      ['attempt', row.attempt], ['reward', r.reward ?? ''],
      ['reward rule', r.reward_rule], ['return code', r.return_code], ['error', typeof r.error === 'string' ? r.error : ''],
      ['error stage / code', r.error_stage || r.error_code ? `${r.error_stage || '?'} / ${r.error_code || '?'}` : ''],
      ['sandbox', r.sandbox_id], ['image', r.image], ['sandbox seconds', fmt.s(r.sandbox_seconds, 3)],
      ['cost', fmt.usd(r.estimated_cost_usd)], ['started', fmt.time(r.started_at)], ['finished', fmt.time(r.finished_at)]]),
    row.phases ? el('div', { class: 'block' }, el('h4', {}, 'phases'), waterfall(row.phases, total, 600, 22),
      el('div', { class: 'legend' }, row.phases.map(([n, s]) => el('span', {}, el('i', { style: `background:${PHASE_COLORS[n] || '#999'}` }), `${n} ${fmt.s(s, 3)} s`)))) : null,
    el('div', { class: 'fields-grid' }, fieldsTable('rewards', r.rewards), fieldsTable('network', r.network),
      fieldsTable('environment', r.environment), fieldsTable('solver usage', r.solver_usage),
      costTable(r.cost), fieldsTable('limits', r.limits)),
    textBlock('verifier stdout (tail)', r.stdout_tail), textBlock('verifier stderr (tail)', r.stderr_tail),
    textBlock('build log (tail)', r.build_log_tail), textBlock('solver stdout (tail)', r.solve_stdout_tail),
    textBlock('solver stderr (tail)', r.solve_stderr_tail), textBlock('solver note', r.solve_note),
    textBlock('error', r.error && typeof r.error !== 'string' ? JSON.stringify(r.error, null, 2) : null),
    d.transcript ? el('div', { class: 'block' }, el('h4', {}, `solver transcript (${d.transcript.length} steps)`), transcriptView(d.transcript)) : null,
    d.transcript_error ? el('p', { class: 'warn-text' }, d.transcript_error) : null,
    el('details', {}, el('summary', {}, 'the whole record (JSON)'), el('pre', {}, JSON.stringify(r, null, 2))));
  panel.scrollIntoView({ block: opts && opts.top ? 'start' : 'nearest' });
}

function closeTrial(panel) {
  panel.replaceChildren();
  for (const tr of document.querySelectorAll('#trials tbody tr.selected')) tr.classList.remove('selected');
}

function trialsSection(doc, id) {
  const q = { outcome: '', provider: '', solver: '', model: '', code: '', task: '', offset: 0, limit: PAGE_SIZE };
  const tbody = el('tbody'), info = el('span', { class: 'muted', id: 'trial-count' });
  const panel = el('div', { id: 'trial-detail', class: 'detail' });
  const mk = (label, key, values) => el('select', { 'aria-label': label, 'data-filter': key, onchange: (e) => { q[key] = e.target.value; q.offset = 0; load(); } },
    el('option', { value: '' }, 'every ' + label), values.map((v) => el('option', { value: v }, v)));
  const prev = el('button', { onclick: () => { q.offset = Math.max(0, q.offset - q.limit); load(); } }, '◀ prev');
  const next = el('button', { onclick: () => { q.offset += q.limit; load(); } }, 'next ▶');
  const startup = doc.run.kind === 'startup';
  async function load() {
    const params = new URLSearchParams(Object.entries(q).filter(([, v]) => v !== '' && v !== null));
    const page = await api('/api/runs/' + encodeURIComponent(id) + '/trials?' + params);
    const scale = Math.max(1e-9, ...page.rows.map((r) => (r.phases || []).reduce((a, p) => a + p[1], 0)));
    const open = trialFromHash();
    tbody.replaceChildren(...page.rows.map((r) => el('tr', { 'data-trial': r.i, class: 'trial-row ' + r.outcome + (r.i === open ? ' selected' : ''),
      onclick: (e) => { if (!e.target.closest('a')) location.hash = trialHash(r.i); } },
      el('td', { class: 'num' }, el('a', { href: trialHash(r.i), title: 'this trial\'s own address' }, r.i)), el('td', {}, r.task, r.warmup ? ' (warmup)' : ''), el('td', {}, r.provider), el('td', {}, r.mode),
      startup ? null : [el('td', { class: 'solver' }, r.solver), el('td', { class: 'model' }, r.model)],
      el('td', { class: 'num' }, startup ? (r.block ?? '') : (r.attempt ?? '')), el('td', {}, badge(r.outcome)),
      el('td', { class: 'num' }, r.reward ?? ''), el('td', {}, r.code || '', r.stage ? el('span', { class: 'muted' }, ' in ' + r.stage) : ''),
      el('td', {}, waterfall(r.phases, scale, 160, 12)), el('td', { class: 'num' }, fmt.s(r.sandbox_s, 3)),
      el('td', { class: 'num' }, fmt.usd(r.cost_usd)))));
    info.textContent = page.total ? `${page.offset + 1}–${page.offset + page.rows.length} of ${page.total} trial(s)` : 'no trials match';
    info.dataset.total = page.total;
    prev.disabled = page.offset === 0;
    next.disabled = page.offset + page.rows.length >= page.total;
  }
  const section = el('section', {},
    el('h2', {}, startup ? 'Samples' : 'Trials'),
    el('div', { class: 'toolbar' },
      mk('outcome', 'outcome', ['passed', 'failed', 'error']), mk('provider', 'provider', doc.providers.map((p) => p.provider)),
      startup ? null : [mk('solver', 'solver', doc.solvers || []), mk('model', 'model', doc.models || [])],
      mk('error code', 'code', doc.codes),
      el('input', { type: 'search', placeholder: 'task contains', 'aria-label': 'task', oninput: (e) => { q.task = e.target.value; q.offset = 0; load(); } }),
      prev, next, info),
    el('div', { class: 'table-wrap' }, el('table', { id: 'trials' }, el('thead', {}, el('tr', {},
      ['#', startup ? 'round' : 'task', 'provider', 'mode', ...(startup ? [] : ['solver', 'model']), startup ? 'block' : 'attempt', 'outcome', 'reward',
        'error', 'phases', startup ? 'ready s' : 'sandbox s', 'cost'].map((h) => el('th', {}, h)))), tbody)),
    panel);
  // the trial the address names: opened when the page loads and whenever the fragment changes
  async function follow(first) {
    const i = trialFromHash();
    if (i) await openTrial(id, i, panel, { top: first }); else closeTrial(panel);
  }
  window.addEventListener('hashchange', () => follow(false));
  return { section, load, follow };
}

async function pageRun(root) {
  const id = STATIC() ? Object.keys(DATA.run)[0] : decodeURIComponent(location.pathname.split('/')[2]);
  let doc = await api('/api/runs/' + encodeURIComponent(id));
  if (doc.error && !doc.run) { root.replaceChildren(el('h1', {}, id), el('p', { class: 'err' }, doc.error)); return; }
  const top = el('div');
  const trials = trialsSection(doc, id);
  const groups = doc.run.kind !== 'startup' ? groupsSection(id) : null;
  function draw() {
    const parts = [el('p', {}, el('a', { href: link.home() }, '← every run')), runHeader(doc)];
    if (doc.report_html) {
      const rep = el('section', { class: 'report', id: 'arena-report' });
      rep.innerHTML = doc.report_html; // rendered and escaped by the server (lua/cseng/view/markdown.lua)
      parts.push(rep);
    } else if (doc.report_error) parts.push(el('p', { class: 'err' }, 'the arena report failed: ' + doc.report_error));
    if (doc.run.kind !== 'startup') parts.push(summarySection(doc));
    top.replaceChildren(...parts);
    setLive(doc.run.live);
  }
  fill(root, top, groups && groups.section, trials.section);
  draw();
  if (groups) await groups.load();
  await trials.load();
  await trials.follow(true);
  let version = doc.version;
  poll(1000, async () => {
    const d = await api('/api/runs/' + encodeURIComponent(id));
    if (d.version !== version) {
      version = d.version; doc = d;
      draw(); if (groups) await groups.load(); await trials.load();
    }
    setLive(d.run.live);
    return true;
  });
}

// ---- page: compare -------------------------------------------------------------------------

// the regressions as the comparison's own summary says them (the count and what it is made of, the
// same words as its last line), rendered and escaped by the server
function regressionsLine(doc) {
  const p = el('p', { id: 'regressions', class: doc.regressions ? 'err' : 'ok-text', 'data-regressions': doc.regressions });
  for (const [k, n] of Object.entries(doc.regressions_by || {})) p.dataset[k] = n;
  if (doc.summary_html) p.innerHTML = doc.summary_html; // rendered and escaped by the server
  else p.textContent = doc.regressions ? `${doc.regressions} regression(s)` : 'no regression';
  return p;
}

async function pageCompare(root) {
  let a, b;
  if (STATIC()) { [a, b] = Object.keys(DATA.compare)[0].split('\0'); } else {
    const q = new URLSearchParams(location.search); a = q.get('a'); b = q.get('b');
  }
  if (!a || !b) { root.replaceChildren(el('p', {}, 'pick two runs on ', el('a', { href: link.home() }, 'the run list'))); return; }
  const doc = await api('/api/compare?a=' + encodeURIComponent(a) + '&b=' + encodeURIComponent(b));
  const rep = el('section', { class: 'report', id: 'compare-report' });
  if (doc.html) rep.innerHTML = doc.html; // rendered and escaped by the server
  fill(root,
    el('p', {}, el('a', { href: link.home() }, '← every run')),
    el('h1', {}, 'Compare'),
    doc.a ? kv([['A (baseline)', el('a', { href: link.run(doc.a) }, doc.a.id)], ['B', el('a', { href: link.run(doc.b) }, doc.b.id)]]) : null,
    doc.error ? el('p', { class: 'err' }, doc.error) : null,
    ...(doc.warnings || []).map((w) => el('p', { class: 'warn-text identity-warning' }, '⚠ ' + w)),
    doc.regressions !== undefined ? regressionsLine(doc) : null,
    rep);
}

// ---- start ---------------------------------------------------------------------------------

async function start() {
  const root = document.getElementById('app');
  const page = document.body.dataset.page;
  try {
    if (page === 'run') await pageRun(root);
    else if (page === 'compare') await pageCompare(root);
    else await pageRuns(root);
    document.body.dataset.ready = '1';
  } catch (e) {
    root.replaceChildren(el('p', { class: 'err' }, 'cseng view: ' + e.message));
    document.body.dataset.ready = 'error';
  }
}
document.addEventListener('DOMContentLoaded', start);
