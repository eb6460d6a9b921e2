--- A run against its history: what `cseng compare --history RUN` prints. The run's own interval
--- and its trailing window's, per provider, phase and primitive (the median latency) and per
--- provider (error and lost-sandbox rates), as regression detection judged them in the store
--- (lua/cseng/history/detect.lua), and the changes its lineage called up to it. Markdown; the
--- command line writes it.
local jsonl = require('cseng.lib.jsonl')

local M = {}

local function num(v, metric)
  if v == nil then return '–' end
  if metric ~= 'p50' then return string.format('%.1f%%', 100 * v) end
  return string.format('%.1f ms', v)
end

local function esc(s) return (tostring(s or ''):gsub('[|\\`*_%[%]<>]', '\\%0'):gsub('[%c]', ' ')) end

--- The run (a run id or a log's file name, default the latest judged run of the folder) against its
--- window. Returns {markdown, regressions (series whose run separates upward: a candidate or a
--- change), run (the store's row)} or nil and why.
---@param S table the store (lua/cseng/history/store.lua), brought up to date
---@param ref string|nil
---@return table|nil, string|nil
function M.against_window(S, ref)
  local run
  if ref then
    run = S:run_row(ref)
    if not run then return nil, 'no run ' .. ref .. ' in ' .. S.path end
  else
    run = S:one('SELECT * FROM runs WHERE lineage_index IS NOT NULL ORDER BY started_s DESC, file DESC LIMIT 1')
    if not run then return nil, 'no judged run in ' .. S.path .. ' (a lineage needs runs that ended, with trials)' end
  end
  if not run.lineage_index then
    return nil, string.format('%s (%s) is not judged: status %s, %d trial(s)%s', tostring(run.run_id), run.file,
      tostring(run.status), run.trials or 0, run.superseded == 1 and ', superseded by a later attempt of its slot' or '')
  end
  local pts = S:all('SELECT * FROM points WHERE file = ? ORDER BY metric DESC, provider, phase, primitive', run.file)
  local out = { string.format('# %s against its history\n', esc(run.run_id)),
    string.format('Lineage `%s`, run %d (%s, %s). Each row: the run\'s interval (its block-level CI, or the bootstrap ' ..
      'CI of its median; Wilson for rates) and its trailing window\'s (the block-level CI of the window runs\' ' ..
      'medians; rates pooled). A change is called only when the intervals separate for enough runs in a row ' ..
      '(docs/WATCH.md).\n', esc(run.lineage), run.lineage_index, esc(run.file), tostring(run.started_at)),
    '| provider | phase | primitive | metric | this run | 95% CI | window (runs) | window CI | verdict |',
    '|---|---|---|---|---|---|---|---|---|' }
  local regressions = 0
  for _, p in ipairs(pts) do
    local up = (p.verdict == 'candidate' or p.verdict == 'change') and p.w_value and p.value > p.w_value
    if up then regressions = regressions + 1 end
    out[#out + 1] = string.format('| %s | %s | %s | %s | %s | [%s, %s] | %s (%s-%s) | [%s, %s] | %s |', esc(p.provider),
      esc(p.phase), esc(p.primitive), p.metric, num(p.value, p.metric), num(p.lo, p.metric), num(p.hi, p.metric),
      num(p.w_value, p.metric), tostring(p.w_first or '–'), tostring(p.w_last or '–'), num(p.w_lo, p.metric),
      num(p.w_hi, p.metric), up and ('**' .. p.verdict .. ' (slower)**') or (p.verdict or 'not judged (derived)'))
  end
  local changes = S:all('SELECT * FROM changes WHERE lineage = ? AND confirmed_index <= ? ORDER BY first_index, key',
    run.lineage, run.lineage_index)
  out[#out + 1] = ''
  out[#out + 1] = string.format('## Changes in `%s` up to run %d\n', esc(run.lineage), run.lineage_index)
  if #changes == 0 then out[#out + 1] = 'None.' end
  for _, c in ipairs(changes) do
    local ev = jsonl.decode(c.evidence or '{}') or {}
    local b = ev.baseline or {}
    out[#out + 1] = string.format('- %s: %s %s %s %s went %s from run %d (`%s`): %s against a baseline of %s [%s, %s] ' ..
      '(runs %s-%s); held to run %d.', c.regression == 1 and '**regression**' or 'improvement', esc(c.provider),
      esc(c.phase), esc(c.primitive), c.metric, c.direction, c.first_index, esc(c.first_run_id), num(c.value, c.metric),
      num(c.baseline_value, c.metric), num(c.baseline_lo, c.metric), num(c.baseline_hi, c.metric), tostring(b.first),
      tostring(b.last), c.confirmed_index)
  end
  return { markdown = table.concat(out, '\n') .. '\n', regressions = regressions, run = run }
end

return M
