--- `cseng export RUN... --format csv|jsonl [-o FILE]`: one row per trial, flattened (phases and
--- usage as columns), with the run-level fields (run id, kind, provider, mode, dataset, plan,
--- solver) in every row, for spreadsheets, pandas or a warehouse. RUN is a run log (.jsonl) or a
--- directory of them. Startup runs export their measured and warmup samples.
--- `--format computesdk [--shape v1.1|schema] [--mode M]`: startup runs as computesdk's result
--- file (lua/cseng/results/computesdk.lua), to sit beside their `latest.json`.
--- `--format harbor -o DIR`: a Harbor job folder (lua/cseng/results/harbor.lua).
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local results = require('cseng.results.log')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local exit = require('cseng.cli.exit')
local computesdk = require('cseng.results.computesdk')

local cmd = command {
  name = 'export',
  summary = 'flatten run logs into CSV or JSONL rows (one per trial), or write computesdk\'s result file or a Harbor job',
  usage = 'usage: cseng export RUN.jsonl|DIR... [--format csv|jsonl] [-o FILE]\n' ..
    '       cseng export RUN.jsonl|DIR... --format computesdk [--shape v1.1|schema] [--mode MODE] [-o FILE]\n' ..
    '       cseng export RUN.jsonl|DIR... --format harbor -o JOB_DIR\n\n' ..
    'csv, jsonl: one row per trial (a startup run: per sample), with the run-level fields in every row.\n' ..
    'Nested fields become dotted columns (phases.verify_seconds); lists are JSON text. A CSV text\n' ..
    'cell beginning with = + - @ tab or CR gets a leading \' (a spreadsheet shows it as text).\n\n' ..
    '--format harbor writes a Harbor job folder (config.json, result.json, lock.json, one <task>__<id>/\n' ..
    'folder per trial with config.json, result.json, agent/trajectory.json, verifier/ and artifacts/)\n' ..
    'that Harbor\'s models load, checked against them before it is written (docs/HARBOR.md).\n\n' ..
    '--format computesdk writes startup (arena) runs as computesdk\'s benchmark result file (their\n' ..
    'results/<mode>_tti/latest.json): per provider the measured samples as iterations (each with its\n' ..
    'sandboxId), summary.ttiMs median/p95/p99, compositeScore and successRate their way; a burst or\n' ..
    'staggered run adds concurrency, wall clock, time to first ready (and the ramp profile). Modes:\n' ..
    'lockstep and sequential are their sequential, burst their concurrent. Samples a fidelity audit\n' ..
    'failed are iterations with an error naming its labels, never pooled; a failed sample has no\n' ..
    'time. --shape v1.1 (default) is their writer\'s file, one mode (name it with --mode when the\n' ..
    'inputs hold several); --shape schema holds every mode and adds min/max/avg, createMs and\n' ..
    'firstExecMs, and a cseng object per result. Both validate against their results/schema.json;\n' ..
    'cseng compare reads their files, and cseng run --pricing takes rates from their pricing.json.\n' ..
    'docs/ARENA.md, "computesdk interop".',
  flags = {
    { 'format', 'string', choices = { 'csv', 'jsonl', 'computesdk', 'harbor' },
      arg = 'csv|jsonl|computesdk|harbor',
      help = 'output format (default csv); computesdk: their benchmark\'s result file, from startup runs; '
        .. 'harbor: a Harbor job folder at -o DIR' },
    { 'shape', 'string', choices = computesdk.SHAPES, arg = 'v1.1|schema',
      help = 'computesdk: v1.1 (default): their latest.json, one mode; schema: every mode, richer (their results/schema.json)' },
    { 'mode', 'string', choices = { 'lockstep', 'sequential', 'burst', 'staggered' },
      arg = 'lockstep|sequential|burst|staggered', help = 'computesdk: only the runs of this arena mode (a v1.1 file holds one)' },
    { 'output', 'string', alias = 'o', arg = 'FILE|DIR',
      help = 'write here (default: stdout; harbor: the job folder, required)' },
  },
}

-- Run-level columns first, in this order; then the trial's own columns, sorted.
local RUN_COLUMNS = { 'run_id', 'run_kind', 'run_plan', 'run_provider', 'run_mode', 'run_dataset', 'run_solver', 'run_label' }
-- Bulky text that makes a table unreadable; kept in jsonl, cut to its tail in csv.
local TEXT_TAIL = 2000
local SKIP = { event = true, run_id = true }

local function flatten(v, prefix, out)
  if type(v) == 'table' then
    if #v > 0 or next(v) == nil then -- a list (or empty): one JSON cell
      out[prefix] = jsonl.encode(v)
    else
      for k, x in pairs(v) do flatten(x, prefix == '' and tostring(k) or (prefix .. '.' .. tostring(k)), out) end
    end
  elseif v ~= nil then
    out[prefix] = v
  end
end

local function log_files(inputs)
  local out = {}
  for _, p in ipairs(inputs) do
    local st = fs.stat(p)
    if not st then errors.raise(errors.ENOENT, p .. ': no such file or directory') end
    if st.type == 'dir' then
      local names = fs.list(p) or {}
      table.sort(names)
      for _, n in ipairs(names) do if n:match('%.jsonl$') then out[#out + 1] = util.join(p, n) end end
    else
      out[#out + 1] = p
    end
  end
  return out
end

--- The rows of the given logs: list of flat tables (column -> scalar).
function cmd.rows(inputs)
  local rows = {}
  for _, path in ipairs(log_files(inputs)) do
    local events = results.read(path)
    local started
    for _, e in ipairs(events) do if e.event == 'run_started' then started = e break end end
    if not started then errors.raise(errors.ENOTRUN, path .. ': no run_started event; not a cseng run log') end
    local run = {
      run_id = started.run_id, run_kind = started.kind or 'tasks', run_plan = started.plan,
      run_provider = started.provider or (started.providers and table.concat(started.providers, ',')),
      run_mode = started.mode, run_dataset = started.dataset, run_solver = started.solver, run_label = started.label,
    }
    for _, e in ipairs(events) do
      if e.event == 'trial' or e.event == 'startup_trial' then
        local row = {}
        for k, v in pairs(run) do row[k] = v end
        local flat = {}
        for k, v in pairs(e) do if not SKIP[k] then flatten(v, k, flat) end end
        for k, v in pairs(flat) do row[k] = v end
        rows[#rows + 1] = row
      end
    end
  end
  return rows
end

local function csv_cell(v)
  if v == nil then return '' end
  if type(v) == 'boolean' then return v and 'true' or 'false' end
  if math.type(v) == 'integer' then return tostring(v) end
  if type(v) == 'number' then
    if v ~= v or v == math.huge or v == -math.huge then return '' end
    for digits = 15, 17 do -- the shortest text that reads back as the same double
      local t = string.format('%.' .. digits .. 'g', v)
      if tonumber(t) == v then return t end
    end
  end
  local s = tostring(v)
  if #s > TEXT_TAIL then s = s:sub(-TEXT_TAIL) end
  -- text a spreadsheet would run as a formula (OWASP's CSV injection rule): a cell that begins
  -- with = + - @ tab or carriage return gets a leading single quote, so it is shown as text
  -- (a task id "=HYPERLINK(...)", an output tail "@SUM(...)"); numbers above stay numbers
  if s:find('^[=+%-@\t\r]') then s = "'" .. s end
  if s:find('[,"\r\n]') then s = '"' .. s:gsub('"', '""') .. '"' end
  return s
end

--- CSV (RFC 4180: quoted cells where needed, CRLF line ends) of rows with a header row. A text
--- cell (or column name) beginning with = + - @ tab or CR is prefixed with ' (csv_cell).
function cmd.csv(rows)
  local seen, extra = {}, {}
  for _, c in ipairs(RUN_COLUMNS) do seen[c] = true end
  for _, r in ipairs(rows) do
    for k in pairs(r) do if not seen[k] then seen[k] = true; extra[#extra + 1] = k end end
  end
  table.sort(extra)
  local cols = {}
  for _, c in ipairs(RUN_COLUMNS) do cols[#cols + 1] = c end
  for _, c in ipairs(extra) do cols[#cols + 1] = c end
  local head = {}
  for i, c in ipairs(cols) do head[i] = csv_cell(c) end -- a column is a record's key: text like any
  local lines = { table.concat(head, ',') }
  for _, r in ipairs(rows) do
    local cells = {}
    for i, c in ipairs(cols) do cells[i] = csv_cell(r[c]) end
    lines[#lines + 1] = table.concat(cells, ',')
  end
  return table.concat(lines, '\r\n') .. '\r\n'
end

--- --format computesdk: the document (lua/cseng/results/computesdk.lua), written or printed.
function cmd.computesdk(f, pos)
  local ok, doc, counts = pcall(function() return computesdk.export(log_files(pos), { shape = f.shape, mode = f.mode }) end)
  if not ok then return exit.fail(doc, 'export') end
  local text = computesdk.encode(doc)
  if f.output and f.output ~= '-' then
    local wok, err = fs.write(f.output, text)
    if not wok then io.stderr:write('cseng: export: cannot write ', f.output, ': ', tostring(err), '\n'); return 1 end
    io.stderr:write(string.format('cseng: export: %d provider result(s), %d iteration(s) (%d excluded by the audit) to %s\n',
      counts.results, counts.iterations, counts.excluded, f.output))
  else
    io.stdout:write(text)
  end
  return 0
end

function cmd.main(f, pos)
  if #pos == 0 then return exit.usage_error('export needs at least one RUN.jsonl or directory (see cseng export --help)') end
  if f.format ~= 'computesdk' and (f.shape or f.mode) then
    return exit.usage_error('export: --shape and --mode go with --format computesdk')
  end
  if f.format == 'computesdk' then return cmd.computesdk(f, pos) end
  if f.format == 'harbor' then
    if not f.output or f.output == '-' then return exit.usage_error('export --format harbor needs -o DIR (the job folder to write)') end
    local hok, r = pcall(function() return require('cseng.results.harbor').export(log_files(pos), f.output) end)
    if not hok then return exit.fail(r, 'export') end
    io.stderr:write(string.format('cseng: export: a Harbor job of %d trial(s) in %s\n', r.trials, r.dir))
    return 0
  end
  local ok, rows = pcall(cmd.rows, pos)
  if not ok then return exit.fail(rows, 'export') end
  local text
  if (f.format or 'csv') == 'csv' then
    text = cmd.csv(rows)
  else
    local lines = {}
    for i, r in ipairs(rows) do lines[i] = jsonl.encode(r) end
    text = #lines > 0 and (table.concat(lines, '\n') .. '\n') or ''
  end
  if f.output and f.output ~= '-' then
    local wok, err = fs.write(f.output, text)
    if not wok then io.stderr:write('cseng: export: cannot write ', f.output, ': ', tostring(err), '\n'); return 1 end
    io.stderr:write(string.format('cseng: export: %d row(s) to %s\n', #rows, f.output))
  else
    io.stdout:write(text)
  end
  return 0
end

return cmd
