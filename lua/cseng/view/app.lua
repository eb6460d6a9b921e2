--- The viewer's application: the JSON documents the pages show (run list, run page, a page of
--- trials, one trial, a comparison), the HTTP handler that serves them with the page shell and its
--- assets (lua/cseng/view/assets/), and the static export that writes the same documents as
--- script files beside the same shell so the pages open from file://.
---
--- Task runs are read through the catalogue's byte-offset index (lua/cseng/view/index.lua); an arena
--- run's page is lua/reports/startup.lua rendered with its SVG charts inlined; a comparison is what
--- `cseng compare` computes (lua/reports/lib/changes.lua), shown as HTML.
local fs = require('cseng.fs')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
local report_render = require('reports.lib.render')
local index = require('cseng.view.index')
local markdown = require('cseng.view.markdown')
local report_compare = require('reports.lib.changes')
local passk = require('cseng.evals.passk')
local sys = require('cseng.sys')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local confine = require('cseng.lib.confine')
local run_status = require('cseng.view.status')

local app = {}

local ASSETS = { ['app.js'] = 'application/javascript; charset=utf-8', ['app.css'] = 'text/css; charset=utf-8',
  ['history.js'] = 'application/javascript; charset=utf-8', ['dom.js'] = 'application/javascript; charset=utf-8' }
local PAGE_MAX = 500

--- The directory of the page assets.
function app.assets_dir()
  return fs.join(sys.root(), 'lua/cseng/view/assets')
end

--- A run id as a file name (export).
---@param id string
---@return string
function app.file_name(id)
  local s = tostring(id):gsub('[^%w%._-]', '_')
  if s ~= id then s = s .. '-' .. crypto.sha256_hex(id):sub(1, 8) end
  return s
end

--- A run id as the path segment of its page (/runs/<segment>): percent-encoded as the page's script
--- encodes it (encodeURIComponent), so an id with a space or a slash still has an address.
---@param id string
---@return string
function app.url_id(id)
  return (tostring(id):gsub("[^%w%-_%.!~%*'%(%)]", function(c) return string.format('%%%02X', c:byte()) end))
end

local function identity(log)
  local s = log.started or {}
  return type(s.identity) == 'table' and s.identity or {}
end

local function keys_sorted(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function iso_seconds(t)
  if type(t) ~= 'string' then return nil end
  local y, mo, d, h, mi, s = t:match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):([%d.]+)')
  if not y then return nil end
  local days = os.time { year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = 12 }
  return days - 12 * 3600 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end

--- The run list's row for a log.
function app.run_row(log)
  local s, id = log.started or {}, identity(log)
  local started, last = s.time, log.finished and log.finished.time or log.last_time
  local t0, t1 = iso_seconds(started), iso_seconds(last)
  local live = log:is_live()
  -- the identity's fields may be objects ({name, model}, {path, digest}): shown by their name
  local function named(v, ...)
    if type(v) ~= 'table' then return v end
    for _, k in ipairs({ ... }) do if type(v[k]) ~= 'table' and v[k] ~= nil then return v[k] end end
    return jsonl.encode(v)
  end
  local solver = named(id.solver or s.solver, 'name', 'id')
  local model = named(id.model or (type(id.solver) == 'table' and id.solver.model) or s.model
    or (type(s.solver_config) == 'table' and s.solver_config.model) or nil, 'name', 'id')
  local dataset = named(id.dataset or s.dataset, 'path', 'name', 'file')
  local digest = id.dataset_digest or id.dataset_sha256
    or (type(id.dataset) == 'table' and (id.dataset.digest or id.dataset.sha256)) or nil
  local sandboxes = {}
  for p, n in pairs(log.live_by_provider) do if n > 0 then sandboxes[p] = n end end
  local row = {
    id = index.id_of(log), run_id = log.run_id, file = app.file_name(index.id_of(log)), path = log.path,
    kind = log.kind or (log.error and 'unreadable' or '?'),
    plan = id.plan or s.plan, label = named(id.label or s.label, 'name'), providers = jsonl.array(util.copy(log.provider_order)),
    modes = jsonl.array(keys_sorted(log.modes)),
    mode = named(id.mode or s.mode, 'name'), solver = solver, model = model,
    dataset = dataset, dataset_digest = named(digest, 'sha256', 'digest'),
    tasks = named(id.tasks or id.task_selection or s.task_count, 'count', 'n'),
    started = started, finished = log.finished and log.finished.time or nil,
    duration_s = (t0 and t1) and (t1 - t0) or nil,
    -- an arena's warmups are listed with the samples but are not samples: counted apart
    trials = log.n - log.warmups, warmups = log.warmups > 0 and log.warmups or nil,
    passed = log.counts.passed, failed = log.counts.failed, errors = log.counts.error,
    cost_usd = log.cost, solver_cost_usd = log.solver_cost > 0 and log.solver_cost or nil,
    status = log.finished and log.finished.status or (live and 'running' or (log.error and 'error' or 'incomplete')),
    live = live, error = log.error, live_sandboxes = sandboxes,
    torn = log.torn and string.format('a torn last line (%d bytes at byte %d): %s', log.torn.bytes, log.torn.offset,
      live and 'being written' or 'the run was cut short') or nil,
    source = log.summary and 'summary' or 'log',
    indexing = log.pending and { read = log.offset, bytes = log.size } or nil,
    bytes = log.size,
  }
  return row
end

--- { runs = [...] }
function app.runs_doc(cat)
  local runs = {}
  for _, log in ipairs(cat:list()) do runs[#runs + 1] = app.run_row(log) end
  return { runs = jsonl.array(runs), version = cat.version }
end

-- the startup report, its charts inlined; cached per log version
local function arena_html(log)
  if log.report_cache and log.report_cache.version == log.version then return log.report_cache.html end
  local data = log:load()
  local h = report_render.context('-')
  local svgs = {}
  function h.chart(name, svg_text, alt)
    svgs[#svgs + 1] = svg_text
    return string.format('![%s](svg:%d)', ((alt or name):gsub('[%[%]]', '')), #svgs)
  end
  local fn = dofile(report_render.template_path('startup'))
  local html = markdown.html(fn(data, h), { svgs = svgs })
  log.report_cache = { version = log.version, html = html }
  return html
end

-- the live status of a run started with --status-port, when it is still going and its writer
-- proves it holds that port (lua/cseng/view/status.lua: read from /proc, before any connection)
local function status_port_doc(log)
  if not log.started or not log:is_live() then return nil end
  return run_status.fetch(log.path, log.started)
end

-- what the run page can group its trials by: each a list of the dimensions kept (the others pooled)
app.GROUPINGS = {
  { id = 'solver,model', dims = { solver = true, model = true } },
  { id = 'solver,model,provider,mode', dims = { solver = true, model = true, provider = true, mode = true } },
  { id = 'provider,mode', dims = { provider = true, mode = true } },
}

--- The run's trials grouped by one of app.GROUPINGS (`by`, default the first): one row per group
--- with its counts and pass@1..K (lua/cseng/evals/passk.lua over the indexed columns, so no record
--- is read back), cached per log version. Served apart from the run document
--- (/api/runs/<id>/groups?by=...): the bootstrap's cost grows with the trials (500 replicates up to
--- 10,000 trials, then fewer, down to 100: 5,000,000 / trials), and the run document must stay
--- fast. A log that grows (a live run) is regrouped at most every max(2 s, 5 x the last grouping's
--- time); in between the last grouping is served (its `version` says which version it counted).
---@return table|nil {by, groupings, rows[{solver, model, provider, mode, trials, passed, failed, errors, attempts, pass_at = {"1": {value, lo, hi, tasks}}}]}
function app.groups(log, by)
  local g
  for _, x in ipairs(app.GROUPINGS) do if x.id == (by or app.GROUPINGS[1].id) then g = x end end
  if not g then return nil end
  local cache = log.groups_cache or {}
  log.groups_cache = cache
  local last = cache[g.id]
  if last and (last.version == log.version or clock.now() < last.next_ns) then return last.doc end
  local c = log.cols
  local trials, counts = {}, {}
  for i = 1, log.n do
    if not c.warmup[i] then
      local function dim(d, v) return g.dims[d] and v or '-' end
      local t = { task_id = c.task[i], outcome = c.outcome[i], solver = dim('solver', c.solver[i]),
        provider = dim('provider', c.provider[i]), mode = dim('mode', c.mode[i]) }
      local model = dim('model', c.model[i])
      if model ~= '-' then t.solver_usage = { model = model } end
      trials[#trials + 1] = t
      local key = table.concat({ t.solver, model, t.provider, t.mode }, '\0')
      local n = counts[key] or { passed = 0, failed = 0, error = 0 }
      counts[key] = n
      n[t.outcome] = n[t.outcome] + 1
    end
  end
  local t0 = clock.now()
  local rows = passk.summary(trials, { reps = math.max(100, math.min(500, 5000000 // math.max(1, #trials))) })
  for _, r in ipairs(rows) do
    local n = counts[table.concat({ r.solver, r.model, r.provider, r.mode }, '\0')]
    r.passed, r.failed, r.trials = n.passed, n.failed, n.passed + n.failed + n.error
  end
  local ids = {}
  for i, x in ipairs(app.GROUPINGS) do ids[i] = x.id end
  local doc = { by = g.id, groupings = jsonl.array(ids), rows = jsonl.array(rows), version = log.version }
  local took = clock.now() - t0
  cache[g.id] = { version = log.version, doc = doc, next_ns = clock.now() + math.max(2e9, 5 * took) }
  return doc
end

--- The run page's document (everything but the trials, which are paged). o.offline (the export):
--- no live status, so no connection at all.
---@param o? {offline?: boolean}
function app.run_doc(cat, log, o)
  local doc = { run = app.run_row(log), version = log.version, phases = jsonl.array() }
  for _, ph in ipairs(index.PHASES) do
    if log.phase_n[ph] then
      doc.phases[#doc.phases + 1] = { phase = ph, n = log.phase_n[ph], mean_s = log.phase_sum[ph] / log.phase_n[ph] }
    end
  end
  local fms = {}
  for _, fm in pairs(log.failure_modes) do fms[#fms + 1] = fm end
  table.sort(fms, function(a, b) if a.count ~= b.count then return a.count > b.count end return a.mode < b.mode end)
  doc.failure_modes = jsonl.array(fms)
  local provs = {}
  for _, p in ipairs(log.provider_order) do
    local c = log.providers[p]
    provs[#provs + 1] = { provider = p, passed = c.passed, failed = c.failed, errors = c.error,
      live_sandboxes = log.live_by_provider[p] or 0 }
  end
  doc.providers = jsonl.array(provs)
  doc.solvers, doc.models = jsonl.array(keys_sorted(log.solvers)), jsonl.array(keys_sorted(log.models))
  doc.codes = jsonl.array(keys_sorted(log.codes))
  local metrics = jsonl.array()
  for _, k in ipairs(keys_sorted(log.metrics or {})) do
    local m = log.metrics[k]
    metrics[#metrics + 1] = { key = k, n = m.n, mean = m.sum / m.n, min = m.min, max = m.max, primary = log.primaries[k] or nil }
  end
  doc.metrics = metrics
  doc.started = log.started
  doc.finished = log.finished
  if log.kind == 'startup' and not log.error then
    local ok, html = pcall(arena_html, log)
    doc.report_html = ok and html or nil
    doc.report_error = not ok and tostring(html) or nil
  end
  if not (o and o.offline) then
    local ok, st = pcall(status_port_doc, log)
    doc.status = ok and st or nil
  end
  doc.catalogue_version = cat.version
  return doc
end

--- Parse a query string into a table (values percent-decoded).
function app.query(q)
  local out = {}
  for k, v in tostring(q or ''):gmatch('([^&=]+)=?([^&]*)') do
    local function dec(s) return (s:gsub('+', ' '):gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end)) end
    out[dec(k)] = dec(v)
  end
  return out
end

local function matches(log, i, f)
  local c = log.cols
  return (not f.outcome or f.outcome == '' or c.outcome[i] == f.outcome)
    and (not f.provider or f.provider == '' or c.provider[i] == f.provider)
    and (not f.solver or f.solver == '' or c.solver[i] == f.solver)
    and (not f.model or f.model == '' or c.model[i] == f.model)
    and (not f.code or f.code == '' or c.code[i] == f.code)
    and (not f.task or f.task == '' or c.task[i]:find(f.task, 1, true) ~= nil)
end

-- the row of trial i: the indexed columns, plus what its record holds for the table (phases)
local function trial_row(log, i, rec)
  local c = log.cols
  local phases
  if type(rec) == 'table' and type(rec.phases) == 'table' then
    phases = {}
    for _, ph in ipairs(index.PHASES) do
      local v = tonumber(rec.phases[ph .. '_seconds'])
      if v then phases[#phases + 1] = { ph, v } end
    end
    phases = jsonl.array(phases)
  elseif type(rec) == 'table' and rec.event == 'startup_trial' then
    phases = jsonl.array({ { 'create', (tonumber(rec.create_ms) or 0) / 1000 }, { 'first_exec', (tonumber(rec.first_exec_ms) or 0) / 1000 },
      { 'cleanup', (tonumber(rec.cleanup_ms) or 0) / 1000 } })
  end
  return { i = i, task = c.task[i], provider = c.provider[i], mode = c.mode[i], solver = c.solver[i], model = c.model[i],
    attempt = c.attempt[i],
    outcome = c.outcome[i], reward = c.reward[i], code = c.code[i], stage = c.stage[i], sandbox_s = c.sandbox_s[i],
    cost_usd = c.cost[i], elapsed_s = c.elapsed[i], block = c.block[i], warmup = c.warmup[i], phases = phases }
end

--- A page of trials: { total (matching), offset, limit, rows }.
function app.trials_doc(log, f)
  local offset = math.max(0, math.tointeger(tonumber(f.offset)) or 0)
  local limit = math.min(PAGE_MAX, math.max(1, math.tointeger(tonumber(f.limit)) or 100))
  local rows, total = {}, 0
  for i = 1, log.n do
    if matches(log, i, f) then
      total = total + 1
      if total > offset and #rows < limit then rows[#rows + 1] = trial_row(log, i, log:record(i)) end
    end
  end
  return { total = total, offset = offset, limit = limit, rows = jsonl.array(rows), version = log.version }
end

-- A solver transcript, read only from inside the log's own folder: the log may come from another
-- machine and name any path. Beside the log first (the tasks kind's save_transcript's
-- <log>/transcripts/<name>: a results folder that was copied or moved), then the recorded path
-- when it lies inside the folder; confine.path refuses `..` and resolves every symbolic link, so
-- one pointing out of the folder is refused too.
local function transcript(log, rec)
  local p = type(rec.solver_transcript_path) == 'string' and rec.solver_transcript_path
  if not p then return nil end
  local dir = util.dirname(log.path)
  local names = { (util.basename(log.path):gsub('%.jsonl$', '')) .. '/transcripts/' .. util.basename(p) }
  if p:sub(1, 1) ~= '/' then
    names[#names + 1] = p
  else
    local rdir = sys.realpath(dir)
    if rdir and p:sub(1, #rdir + 1) == rdir .. '/' then names[#names + 1] = p:sub(#rdir + 2) end
  end
  for _, name in ipairs(names) do
    local full = confine.path(dir, name)
    local st = full and fs.stat(full)
    if st and st.type == 'file' then
      local ok, list = pcall(jsonl.read_all, full)
      if ok and list then return jsonl.array(list), full end
    end
  end
  return nil, nil, p .. ': not found in the run log\'s folder (a path outside the run log\'s folder is never read)'
end

--- One trial: { row, record, transcript }.
function app.trial_doc(log, i)
  local rec = log:record(i)
  if not rec then return nil end
  local doc = { row = trial_row(log, i, rec), record = rec }
  local ok, list, path, missing = pcall(transcript, log, rec)
  if ok then doc.transcript, doc.transcript_path, doc.transcript_error = list, path, missing end
  return doc
end

-- identity fields on which two runs should agree for a fair comparison
local function identity_warnings(la, lb)
  local out = {}
  local ra, rb = app.run_row(la), app.run_row(lb)
  for _, k in ipairs({ 'solver', 'model', 'mode', 'dataset', 'dataset_digest', 'kind' }) do
    local x, y = ra[k], rb[k]
    if x ~= nil and y ~= nil and tostring(x) ~= tostring(y) then
      out[#out + 1] = string.format('the runs differ in %s: A has %s, B has %s', k, tostring(x), tostring(y))
    end
  end
  return jsonl.array(out)
end

--- What `cseng compare A B` computes, as HTML. The page shows the runs, the warnings and the
--- regressions (the markdown's own summary line: the same count, made of the same parts, as its
--- last line) in its header, so the HTML is the markdown from its first section on.
function app.compare_doc(la, lb)
  local r = report_compare.compare(la:load(), lb:load(), {})
  local body = r.markdown:match('\n(## .*)$') or r.markdown
  return { a = app.run_row(la), b = app.run_row(lb), regressions = r.regressions, fixes = r.fixes,
    regressions_by = { tasks = #r.by.tasks, cells = #r.by.cells, phases = #r.by.phases, providers = #r.by.providers },
    summary_html = markdown.inline(r.summary), html = markdown.html(body), markdown = r.markdown,
    warnings = identity_warnings(la, lb) }
end

-- ---- the page shell ---------------------------------------------------------------------

-- What a page may load: itself only (its script, stylesheet and data files; data: images). The
-- server sends it as a header, with frame-ancestors; every page carries it as a meta tag too, so
-- an exported page opened from file:// keeps it (a meta tag cannot carry frame-ancestors).
app.CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'"

--- The HTML every page starts from; app.js draws it. root: the path to the site root ('/' on the
--- server, '../' or '' in an export); scripts: data files of an export.
function app.shell(root, page, scripts)
  local out = { '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
    '<meta http-equiv="Content-Security-Policy" content="' .. app.CSP .. '">', -- no " & < > in it
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<title>cseng view</title>',
    '<link rel="stylesheet" href="' .. root .. 'assets/app.css"></head>',
    '<body data-root="' .. root .. '" data-page="' .. markdown.escape(page or '') .. '">',
    '<header><a class="brand" href="' .. root .. (root == '/' and '' or 'index.html') .. '">cseng view</a>',
    root == '/' and '<a class="brand" href="/history">history</a>' or '', -- served only (view/history.lua)
    '<span id="live-indicator"></span></header>',
    '<main id="app"><p class="muted">loading…</p></main>',
    '<script src="' .. root .. 'assets/dom.js"></script>', '<script src="' .. root .. 'assets/app.js"></script>' }
  for _, s in ipairs(scripts or {}) do out[#out + 1] = '<script src="' .. root .. s .. '"></script>' end
  out[#out + 1] = '</body></html>\n'
  return table.concat(out, '\n')
end

-- ---- the HTTP handler -------------------------------------------------------------------

local JSON = { ['Content-Type'] = 'application/json; charset=utf-8', ['Cache-Control'] = 'no-store' }
local SECURITY = {
  ['X-Content-Type-Options'] = 'nosniff',
  ['Referrer-Policy'] = 'no-referrer',
  ['Content-Security-Policy'] = app.CSP .. "; frame-ancestors 'none'",
}

local function with(h, extra)
  local out = util.copy(SECURITY)
  for k, v in pairs(h or {}) do out[k] = v end
  for k, v in pairs(extra or {}) do out[k] = v end
  return out
end

local function json(status, doc, extra)
  return status, with(JSON, extra), jsonl.encode(doc)
end

local function decode_path(s)
  return (s:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

local function equal_secret(a, b)
  -- compare digests, so the time taken does not tell how much of the token matched
  return crypto.sha256(a) == crypto.sha256(b)
end

--- The request handler for serve.listen. opts: {catalogue, token?, loopback, budget?}: each
--- request (at most every 200 ms) reads up to `budget` bytes of what the logs gained (default:
--- all of it; `cseng view` reads big logs in slices from a task of its own as well).
function app.handler(opts)
  local cat = opts.catalogue
  local last_refresh = nil
  local function refresh(force)
    -- at most every 200 ms (a page polls, and several requests arrive at once), unless a run
    -- asked for is not known yet
    local now = clock.now()
    if force or not last_refresh or now - last_refresh > 200 * 1000000 then
      cat:refresh(opts.budget)
      last_refresh = clock.now()
    end
  end
  return function(req)
    local q = app.query(req.query)
    local set_cookie
    if opts.token then
      local auth = req.headers.authorization and req.headers.authorization:match('^Bearer%s+(.+)$')
      local cookie = req.headers.cookie and req.headers.cookie:match('cseng_view_token=([^;%s]+)')
      local given = q.token or auth or cookie
      if not given or not equal_secret(given, opts.token) then
        return 401, with({ ['Content-Type'] = 'text/plain; charset=utf-8', ['WWW-Authenticate'] = 'Bearer' }),
          'cseng view: this server needs its token: open the URL it printed (?token=...)\n'
      end
      if q.token then set_cookie = 'cseng_view_token=' .. q.token .. '; HttpOnly; SameSite=Strict; Path=/' end
    elseif opts.loopback then
      -- a loopback server answers only to loopback names (a DNS-rebinding page cannot read it)
      local host = (req.headers.host or ''):gsub(':%d+$', '')
      if host ~= '127.0.0.1' and host ~= 'localhost' and host ~= '[::1]' and not host:match('^127%.%d+%.%d+%.%d+$') then
        return 403, with({ ['Content-Type'] = 'text/plain; charset=utf-8' }), 'cseng view: unexpected Host header\n'
      end
    end
    if req.method ~= 'GET' and req.method ~= 'HEAD' then
      return 405, with({ Allow = 'GET', ['Content-Type'] = 'text/plain' }), 'GET only\n'
    end
    local path = req.path
    local extra = set_cookie and { ['Set-Cookie'] = set_cookie } or nil
    local asset = path:match('^/assets/([%w%.]+)$')
    if asset then
      if not ASSETS[asset] then return 404, with({ ['Content-Type'] = 'text/plain' }), 'not found\n' end
      local body = assert(fs.read(fs.join(app.assets_dir(), asset)))
      return 200, with({ ['Content-Type'] = ASSETS[asset], ['Cache-Control'] = 'no-cache' }, extra), body
    end
    if path == '/' or path == '/index.html' or path:match('^/runs/[^/]+$') or path == '/compare' then
      local page = path == '/compare' and 'compare' or (path:match('^/runs/') and 'run' or 'runs')
      return 200, with({ ['Content-Type'] = 'text/html; charset=utf-8', ['Cache-Control'] = 'no-store' }, extra),
        app.shell('/', page)
    end
    if opts.history and (path == '/history' or path:match('^/api/history')) then -- the history page (view/history.lua)
      local st, h, b = require('cseng.view.history').handle(opts.history, path, q, { csp = app.CSP,
        json = function(status, doc) return json(status, doc, extra) end,
        body = function(status, text) return status, with(JSON, extra), text end,
        html = function(body) return 200, with({ ['Content-Type'] = 'text/html; charset=utf-8', ['Cache-Control'] = 'no-store' }, extra), body end })
      if st then return st, h, b end
    end
    if path:match('^/api/') then
      refresh()
      if path == '/api/runs' then return json(200, app.runs_doc(cat), extra) end
      if path == '/api/version' then return json(200, { version = cat.version }, extra) end
      if path == '/api/compare' then
        local la, lb = cat:find(q.a or ''), cat:find(q.b or '')
        if not la or not lb then refresh(true); la, lb = cat:find(q.a or ''), cat:find(q.b or '') end
        if not la or not lb then return json(404, { error = 'no run ' .. tostring(not la and q.a or q.b) }, extra) end
        local ok, doc = pcall(app.compare_doc, la, lb)
        if not ok then return json(422, { error = tostring(doc) }, extra) end
        return json(200, doc, extra)
      end
      local id, rest = path:match('^/api/runs/([^/]+)(.*)$')
      if id then
        local log = cat:find(decode_path(id))
        if not log then refresh(true); log = cat:find(decode_path(id)) end
        if not log then return json(404, { error = 'no run ' .. decode_path(id) }, extra) end
        if rest == '' then return json(200, app.run_doc(cat, log), extra) end
        if rest == '/trials' then return json(200, app.trials_doc(log, q), extra) end
        if rest == '/groups' then
          local doc = app.groups(log, q.by)
          if not doc then return json(404, { error = 'no grouping ' .. tostring(q.by) }, extra) end
          return json(200, doc, extra)
        end
        local n = rest:match('^/trials/(%d+)$')
        if n then
          local doc = app.trial_doc(log, tonumber(n))
          if not doc then return json(404, { error = 'no trial ' .. n }, extra) end
          return json(200, doc, extra)
        end
      end
      return json(404, { error = 'no such API path: ' .. path }, extra)
    end
    return 404, with({ ['Content-Type'] = 'text/plain' }), 'not found\n'
  end
end

-- ---- the static export ------------------------------------------------------------------

local RECORD_CHUNK = 200

local function put_script(kind, key, doc)
  return string.format('CSENG_PUT(%s, %s, %s);\n', jsonl.encode(kind), jsonl.encode(key), jsonl.encode(doc))
end

local function write(path, text)
  errors.check(nil, fs.mkdir_p(util.dirname(path)))
  local ok, err, code = fs.write(path, text)
  if not ok then errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err)) end
end

--- Write every page as static files under dir. Returns {pages, files}.
---@param cat table the catalogue (refreshed)
---@param dir string
---@param opts? {compare?: string[][]} pairs {a, b} of run ids to write comparison pages for
function app.export(cat, dir, opts)
  opts = opts or {}
  local files, pages = 0, 0
  local function out(rel, text) write(fs.join(dir, rel), text); files = files + 1 end
  for name in pairs(ASSETS) do out('assets/' .. name, assert(fs.read(fs.join(app.assets_dir(), name)))) end
  local runs = app.runs_doc(cat)
  for _, r in ipairs(runs.runs) do r.live = false end -- a snapshot is not live
  local compares = {}
  for _, pair in ipairs(opts.compare or {}) do
    if cat:find(pair[1]) and cat:find(pair[2]) then
      compares[#compares + 1] = { a = pair[1], b = pair[2], file = app.file_name(pair[1]) .. '--' .. app.file_name(pair[2]) }
    end
  end
  runs.compares = jsonl.array(compares)
  out('data/runs.js', put_script('runs', '', runs))
  out('index.html', app.shell('', 'runs', { 'data/runs.js' }))
  pages = pages + 1
  for _, log in ipairs(cat:list()) do
    local id = index.id_of(log)
    local f = app.file_name(id)
    local doc = app.run_doc(cat, log, { offline = true })
    doc.run.live = false
    local all = app.trials_doc(log, { limit = math.max(1, log.n), offset = 0 })
    if log.n > PAGE_MAX then
      all.rows = jsonl.array()
      for i = 1, log.n do all.rows[i] = trial_row(log, i, log:record(i)) end
    end
    doc.trials = all.rows
    doc.record_chunk = RECORD_CHUNK
    if log.kind ~= 'startup' then
      doc.groups = {}
      for _, g in ipairs(app.GROUPINGS) do doc.groups[g.id] = app.groups(log, g.id) end
    end
    out('data/run-' .. f .. '.js', put_script('run', id, doc))
    for c = 0, (log.n - 1) // RECORD_CHUNK do
      local recs = {}
      for i = c * RECORD_CHUNK + 1, math.min(log.n, (c + 1) * RECORD_CHUNK) do
        recs[#recs + 1] = app.trial_doc(log, i) or jsonl.null
      end
      out(string.format('data/rec-%s-%d.js', f, c), put_script('records', id .. '\0' .. c, jsonl.array(recs)))
    end
    out('runs/' .. f .. '.html', app.shell('../', 'run', { 'data/runs.js', 'data/run-' .. f .. '.js' }))
    pages = pages + 1
  end
  for _, c in ipairs(compares) do
    local pair = { c.a, c.b }
    local la, lb = cat:find(pair[1]), cat:find(pair[2])
    do
      local key = c.file
      local ok, doc = pcall(app.compare_doc, la, lb)
      if not ok then doc = { error = tostring(doc), a = app.run_row(la), b = app.run_row(lb) } end
      doc.a.live, doc.b.live = false, false
      out('data/compare-' .. key .. '.js', put_script('compare', pair[1] .. '\0' .. pair[2], doc))
      out('compare/' .. key .. '.html', app.shell('../', 'compare', { 'data/runs.js', 'data/compare-' .. key .. '.js' }))
      pages = pages + 1
    end
  end
  return { pages = pages, files = files }
end

--- The comparison pairs an export writes by default: each run against the previous run of the same
--- plan and kind (by start time); runs without a plan (the seed's summaries) or trials are left out.
function app.default_pairs(cat)
  local prev, pairs_out = {}, {}
  local list = cat:list()
  for k = #list, 1, -1 do -- list is newest first
    local log = list[k]
    if not log.error and log.started and log.started.plan and log.n > 0 then
      local key = tostring(log.kind) .. '\0' .. tostring(log.started.plan)
      if prev[key] then pairs_out[#pairs_out + 1] = { prev[key], index.id_of(log) } end
      prev[key] = index.id_of(log)
    end
  end
  return pairs_out
end

return app
