--- `cseng history [DIR] [--rebuild] [--lineage L] [--json]`: the results folder's history store
--- (lua/cseng/history/store.lua) brought up to its logs, or rebuilt from them, and what it holds:
--- each lineage (a watch's runs, a plan's runs) with its latest verdict per provider, phase and
--- primitive, and the changes regression detection called, with their evidence.
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local console = require('cseng.lib.console')
local exit = require('cseng.cli.exit')
local store = require('cseng.history.store')

local cmd = command {
  name = 'history',
  summary = 'the history store of a results folder: lineages, latest verdicts, changes (--rebuild: from the logs)',
  usage = 'usage: cseng history [DIR] [--rebuild] [--lineage L] [--json]\n\n' ..
    'Brings DIR/history.sqlite (default DIR: results) up to the run logs of DIR (a log that changed is\n' ..
    'read again, one that is gone forgotten; --rebuild reads them all), then prints each lineage: a\n' ..
    'watch\'s runs (watch:NAME) or a plan\'s (plan:NAME), its latest run judged per provider, phase and\n' ..
    'primitive against its trailing window, and the changes called (docs/WATCH.md).',
  flags = {
    { 'rebuild', 'bool', help = 'empty the store and read every run log again' },
    { 'lineage', 'string', arg = 'L', help = 'only this lineage (watch:NAME or plan:NAME)' },
    { 'json', 'bool', help = 'print the lineages, latest points and changes as JSON' },
  },
}

local function f(v, unit)
  if v == nil then return '-' end
  if unit == 'rate' then return string.format('%.1f%%', 100 * v) end
  return string.format('%.1f ms', v)
end

local function latest(S, lineage)
  local rows = {}
  for _, s in ipairs(S:series_list(lineage)) do
    local pts = S:series(lineage, s.provider, s.phase, s.primitive, s.metric)
    local last = pts[#pts]
    if last then
      rows[#rows + 1] = { provider = s.provider, phase = s.phase, primitive = s.primitive, metric = s.metric, runs = #pts,
        index = last.i, run_id = last.run_id, value = last.value, lo = last.lo, hi = last.hi, verdict = last.verdict,
        window = last.w_value and { value = last.w_value, lo = last.w_lo, hi = last.w_hi } or nil }
    end
  end
  return rows
end

function cmd.main(o, pos)
  if #pos > 1 then return exit.usage_error('history takes one results folder (see cseng history --help)') end
  local dir = pos[1] or 'results'
  local st = fs.stat(dir)
  if not st or st.type ~= 'dir' then return exit.usage_error('history: %s: not a results folder', dir) end
  local S, err = store.open(dir)
  if not S then return exit.fail(err, 'history') end
  local ok, res = pcall(function()
    local r = o.rebuild and S:rebuild() or S:sync()
    local doc = { dir = dir, store = S.path, read = r.read, unchanged = r.unchanged, removed = r.removed, errors = r.errors,
      lineages = jsonl.array() }
    for _, l in ipairs(S:lineages()) do
      if not o.lineage or o.lineage == l.lineage then
        local changes = {}
        for _, c in ipairs(S:changes(l.lineage)) do
          local ev = jsonl.decode(c.evidence or '{}') or {}
          changes[#changes + 1] = { provider = c.provider, phase = c.phase, primitive = c.primitive, metric = c.metric,
            direction = c.direction, regression = c.regression == 1, first_index = c.first_index,
            confirmed_index = c.confirmed_index, first_run_id = c.first_run_id, value = c.value,
            baseline = ev.baseline, ratio = c.ratio }
        end
        doc.lineages[#doc.lineages + 1] = { lineage = l.lineage, runs = l.runs, judged = l.judged, first = l.first,
          last = l.last, latest = jsonl.array(latest(S, l.lineage)), changes = jsonl.array(changes) }
      end
    end
    return doc
  end)
  S:close()
  if not ok then return exit.fail(res, 'history') end
  if o.json then io.stdout:write(jsonl.encode(res), '\n'); return 0 end
  local out = { string.format('history of %s (%s): %d log(s) read, %d unchanged, %d gone', dir, res.store, res.read,
    res.unchanged, res.removed) }
  for file, e in pairs(res.errors) do out[#out + 1] = '  unreadable: ' .. console.escape(file, true) .. ': ' .. e end
  for _, l in ipairs(res.lineages) do
    out[#out + 1] = ''
    out[#out + 1] = string.format('%s: %d run(s), %d judged, %s .. %s, %d change(s)', l.lineage, l.runs, l.judged or 0,
      tostring(l.first), tostring(l.last), #l.changes)
    for _, r in ipairs(l.latest) do
      local unit = r.metric == 'p50' and 'ms' or 'rate'
      out[#out + 1] = string.format('  %-12s %-18s %-11s %-10s run %-5s %s [%s, %s]%s  %s', r.provider, r.phase, r.primitive,
        r.metric, tostring(r.index), f(r.value, unit), f(r.lo, unit), f(r.hi, unit),
        r.window and string.format('  window %s [%s, %s]', f(r.window.value, unit), f(r.window.lo, unit), f(r.window.hi, unit)) or '',
        r.verdict or 'not judged (derived)')
    end
    for _, c in ipairs(l.changes) do
      local unit = c.metric == 'p50' and 'ms' or 'rate'
      out[#out + 1] = string.format('  change: %s %s %s %s %s %s from run %d (%s): %s, baseline %s [%s, %s] (runs %s-%s), confirmed at run %d',
        c.regression and 'REGRESSION' or 'improvement', c.provider, c.phase, c.primitive, c.metric, c.direction,
        c.first_index, tostring(c.first_run_id), f(c.value, unit), f(c.baseline and c.baseline.value, unit),
        f(c.baseline and c.baseline.lo, unit), f(c.baseline and c.baseline.hi, unit), tostring(c.baseline and c.baseline.first),
        tostring(c.baseline and c.baseline.last), c.confirmed_index)
    end
  end
  io.stdout:write(table.concat(out, '\n'), '\n')
  return 0
end

return cmd
