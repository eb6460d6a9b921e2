--- `cseng merge DIR -o RUN.jsonl`: the shards of one sharded run (`cseng run --shard K/N`, a
--- Slurm job array or a Kubernetes Indexed Job) into one log and one summary that the report
--- templates read exactly as a single-machine run's. Refuses, with one line naming them, shards
--- that are missing, duplicated, from another run, or that hold the same trial twice; and, since
--- a shard comes from another machine, one naming an adapter this cseng does not have, a sandbox
--- id that is not its adapter's, or a job id that is not a plain name (the file and line named).
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local results = require('cseng.results.log')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local session = require('cseng.run.session')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'merge',
  summary = 'merge the shards of a sharded run into one log and summary',
  usage = 'usage: cseng merge DIR --output RUN.jsonl [--run RUN_ID] [--allow-incomplete]\n\n' ..
    'DIR holds <run-id>.shard-K-of-N.jsonl files (from cseng run --shard K/N, Slurm job arrays or\n' ..
    'Kubernetes Indexed Jobs). Every shard 0..N-1 of the run must be there exactly once.',
  flags = {
    { 'output', 'string', alias = 'o', arg = 'RUN.jsonl', help = 'the merged log (the summary .json is written beside it)' },
    { 'run', 'string', arg = 'RUN_ID', help = 'merge this run when DIR holds shards of several' },
    { 'allow-incomplete', 'bool', help = 'merge shards whose run did not finish (status kept)' },
  },
}

-- what is wrong with the shards given is a usage error (exit status 2)
local function fail(msg) error(errors.usage(msg), 0) end

--- The shard logs in dir: {path, run_id, index, count}.
local function shard_files(dir)
  local names = fs.list(dir)
  if not names then fail(dir .. ': no such directory') end
  local out = {}
  for _, name in ipairs(names) do
    local run_id, k, n = name:match('^(.+)%.shard%-(%d+)%-of%-(%d+)%.jsonl$')
    if run_id then
      out[#out + 1] = { path = util.join(dir, name), run_id = run_id, index = tonumber(k), count = tonumber(n), name = name }
    end
  end
  table.sort(out, function(a, b) if a.run_id ~= b.run_id then return a.run_id < b.run_id end return a.index < b.index end)
  return out
end

-- The records of a shard that name what later becomes a path or URL (the merged log feeds
-- `cseng cleanup`, `--resume` and the viewer): its job id, each record's adapter (a file of
-- lua/providers/, loaded by name), and each sandbox id (the adapter's own format).
local function check_records(f)
  local function at(rec) return results.where(rec) or f.path end
  local job = f.started.shard.job_id
  if job ~= nil and (type(job) ~= 'string' or not job:match('^[%w][%w._-]*$') or job:find('..', 1, true)) then
    fail(string.format('%s: job_id %s is not a job id (letters, digits, . _ -)', at(f.started), jsonl.encode(job)))
  end
  local scope = results.run_scope(f.events)
  local adapters = {}
  for _, e in ipairs(f.events) do
    if e.event == 'allocated' or e.event == 'destroyed' or e.event == 'cleanup_failed' or e.event == 'intent'
      or e.event == 'lost_create' then
      local info = type(e.provider) == 'string' and scope.providers[e.provider] or {}
      local name = e.adapter or info.adapter or e.provider
      local adapter = adapters[name]
      if adapter == nil then
        local ok, a = pcall(session.adapter, name)
        if not ok then
          fail(string.format('%s: adapter %s is not an adapter of this cseng (lua/providers/, see cseng providers)', at(e),
            type(name) == 'string' and jsonl.encode(name) or tostring(name)))
        end
        adapters[name], adapter = a, a
      end
      if e.event ~= 'intent' and e.event ~= 'lost_create' then
        local bad = session.id_problem(e, adapter)
        if bad then fail(string.format('%s: %s', at(e), bad)) end
      end
    end
  end
end

--- Check the shard set and read it. Returns the shards with .events, sorted by index.
function cmd.collect(dir, want_run)
  local files = shard_files(dir)
  if #files == 0 then fail(dir .. ': no shard logs (<run-id>.shard-K-of-N.jsonl)') end
  local runs = {}
  for _, f in ipairs(files) do runs[f.run_id] = true end
  local run_ids = util.keys(runs)
  table.sort(run_ids)
  local run_id = want_run
  if run_id then
    if not runs[run_id] then fail(string.format('%s: no shard of run %s (runs here: %s)', dir, run_id, table.concat(run_ids, ', '))) end
  elseif #run_ids > 1 then
    fail(string.format('%s holds shards of %d runs (%s): name one with --run', dir, #run_ids, table.concat(run_ids, ', ')))
  else
    run_id = run_ids[1]
  end
  local shards, count, by_index = {}, nil, {}
  for _, f in ipairs(files) do
    if f.run_id == run_id then
      count = count or f.count
      if f.count ~= count then
        fail(string.format('%s: shard of %d, but other shards of run %s are of %d', f.name, f.count, run_id, count))
      end
      if by_index[f.index] then fail(string.format('shard %d of run %s is there twice', f.index, run_id)) end
      by_index[f.index] = f
      shards[#shards + 1] = f
    end
  end
  local missing = {}
  for k = 0, count - 1 do if not by_index[k] then missing[#missing + 1] = tostring(k) end end
  if #missing > 0 then
    fail(string.format('run %s: missing shard%s %s of %d (have %d)', run_id, #missing > 1 and 's' or '',
      table.concat(missing, ', '), count, #shards))
  end
  local first
  for _, f in ipairs(shards) do
    f.events = results.read(f.path)
    for _, e in ipairs(f.events) do
      if e.event == 'run_started' then f.started = f.started or e end
      if e.event == 'run_finished' then f.finished = e end
    end
    if not f.started then fail(f.name .. ': no run_started event; not a cseng run log') end
    if f.started.run_id ~= run_id then
      fail(string.format('%s: belongs to run %s, not %s (a shard from another run)', f.name, tostring(f.started.run_id), run_id))
    end
    local s = f.started.shard
    if type(s) ~= 'table' or s.index ~= f.index or s.count ~= f.count then
      fail(string.format('%s: its run_started record says shard %s, not %d/%d', f.name,
        type(s) == 'table' and (tostring(s.index) .. '/' .. tostring(s.count)) or 'none', f.index, f.count))
    end
    first = first or f
    if s.job_id ~= first.started.shard.job_id or f.started.plan ~= first.started.plan
      or f.started.provider ~= first.started.provider or f.started.mode ~= first.started.mode then
      fail(string.format('%s: job %s, plan %s on %s/%s, but %s is job %s, plan %s on %s/%s (a shard from another run)',
        f.name, tostring(s.job_id), tostring(f.started.plan), tostring(f.started.provider), tostring(f.started.mode),
        first.name, tostring(first.started.shard.job_id), tostring(first.started.plan), tostring(first.started.provider),
        tostring(first.started.mode)))
    end
    check_records(f)
  end
  return shards, run_id, count
end

local STATUS_RANK = { finished = 0, cleanup_failed = 1, stopped = 1, incomplete = 2, interrupted = 3 }

--- Merge the events of checked shards into one run's events.
function cmd.merge_events(shards, run_id, opts)
  opts = opts or {}
  local seen, body = {}, {}
  for _, f in ipairs(shards) do
    if not f.finished and not opts.allow_incomplete then
      fail(string.format('%s: the shard did not finish (no run_finished; resume it with cseng run ... --resume %s, or pass --allow-incomplete)',
        f.name, f.path))
    end
    for i, e in ipairs(f.events) do
      if e.event ~= 'run_started' and e.event ~= 'run_finished' and e.event ~= 'run_resumed' then
        local key, what
        if e.event == 'trial' then
          key = table.concat({ 'trial', tostring(e.task_id), tostring(e.provider or ''), tostring(e.mode or ''),
            tostring(e.attempt or '') }, '\0')
          what = 'trial ' .. tostring(e.task_id)
        elseif e.event == 'startup_trial' then
          key = table.concat({ 'startup', tostring(e.provider), tostring(e.phase), tostring(e.round) }, '\0')
          what = string.format('provider %s (%s round %s)', tostring(e.provider), tostring(e.phase), tostring(e.round))
        end
        if key then
          if seen[key] then
            fail(string.format('%s is in shard %d and shard %d: the shards overlap', what, seen[key], f.index))
          end
          seen[key] = f.index
        end
        body[#body + 1] = { e = e, t = tostring(e.time or ''), k = f.index, i = i }
      end
    end
  end
  table.sort(body, function(a, b)
    if a.t ~= b.t then return a.t < b.t end
    if a.k ~= b.k then return a.k < b.k end
    return a.i < b.i
  end)
  local start = util.copy(shards[1].started)
  local total, status, sources, started_at, finished_at = 0, 'finished', {}, start.time, nil
  local counts = { passed = 0, failed = 0, errors = 0, recorded = 0, selected = 0 }
  for _, f in ipairs(shards) do
    total = total + (f.started.task_count or 0)
    if f.started.time and f.started.time < started_at then started_at = f.started.time end
    local fin = f.finished or { status = 'incomplete' }
    if (STATUS_RANK[fin.status] or 2) > (STATUS_RANK[status] or 0) then status = fin.status end
    if fin.time and (not finished_at or fin.time > finished_at) then finished_at = fin.time end
    for k in pairs(counts) do counts[k] = counts[k] + (tonumber(fin[k]) or 0) end
    sources[#sources + 1] = { index = f.index, file = f.name, host = f.started.host, pid = f.started.pid,
      status = fin.status, trials = f.started.task_count }
  end
  if start.kind == 'startup' then -- the arena shards by provider: the merged run has them all
    local names, adapters = {}, {}
    for _, f in ipairs(shards) do
      for _, n in ipairs(f.started.providers or {}) do names[#names + 1] = n end
      for k, v in pairs(f.started.adapters or {}) do adapters[k] = v end
    end
    table.sort(names)
    start.providers, start.adapters = names, adapters
  end
  start.time = started_at
  start.task_count = total
  start.shard = nil
  start.merged_from = { count = #shards, job_id = shards[1].started.shard.job_id, shards = sources }
  local out = { start }
  for _, b in ipairs(body) do out[#out + 1] = b.e end
  local fin = { event = 'run_finished', run_id = run_id, time = finished_at or start.time, status = status,
    merged = true }
  for k, v in pairs(counts) do fin[k] = v end
  out[#out + 1] = fin
  return out
end

function cmd.main(f, pos)
  if #pos ~= 1 or not f.output then
    return exit.usage_error('merge needs DIR and --output RUN.jsonl (see cseng merge --help)')
  end
  if not f.output:match('%.jsonl$') then return exit.usage_error('merge: --output must name a .jsonl file') end
  local ok, err = pcall(function()
    local shards, run_id, count = cmd.collect(pos[1], f.run)
    local events = cmd.merge_events(shards, run_id, f)
    errors.check(nil, fs.mkdir_p(util.dirname(f.output)))
    local lines = {}
    for i, e in ipairs(events) do lines[i] = jsonl.encode(e) end
    local wok, werr = fs.write(f.output, table.concat(lines, '\n') .. '\n')
    if not wok then errors.raise(errors.EIO, 'cannot write ' .. f.output .. ': ' .. tostring(werr)) end
    local json_path = f.output:gsub('%.jsonl$', '.json')
    results.write_summary(events, json_path)
    local s = results.summary(events)
    io.stdout:write(string.format('merged %d shard(s) of run %s: %d trials (%d passed, %d failed, %d errors), status %s\n',
      count, run_id, s.task_count, s.passed, s.failed, s.errors, events[#events].status))
    io.stdout:write('results: ', f.output, '\n', 'summary: ', json_path, '\n')
  end)
  if not ok then
    return exit.fail(err, 'merge')
  end
  return 0
end

return cmd
