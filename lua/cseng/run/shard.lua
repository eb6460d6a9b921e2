--- Sharding one plan over many machines (Slurm job arrays, Kubernetes Indexed Jobs, or by hand).
---
--- Every machine runs the same plan on the same dataset and keeps only the trials of its own
--- shard. The partition depends on the trials' identities only (a hash of task, provider, mode
--- and attempt), never on list positions, so every machine computes the same one, and adding a
--- task moves few other trials. It is consistent hashing with bounded loads: taken in the order of
--- their own hashes, each trial ranks the shards by a rendezvous hash and takes the first that still
--- has room. Shard k has room for floor(M/N) trials, plus one when k < M mod N, so the capacities add
--- up to M: every shard is filled exactly, and shard sizes differ by at most one.
---
--- The shard comes from `--shard K/N` (0 <= K < N), else from the environment: `CSENG_SHARD=K/N`,
--- a Slurm job array (`SLURM_ARRAY_TASK_ID` - `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT`) or
--- a Kubernetes Indexed Job (`JOB_COMPLETION_INDEX` with `CSENG_SHARD_COUNT`, which the manifest
--- sets to the Job's `completions`: Kubernetes does not expose that number to the pod itself).
local crypto = require('cseng.crypto')

local shard = {}

--- A trial's identity, the string its place in the partition is derived from.
---@param t {task_id:string, provider:string?, mode:string?, attempt:integer?}
---@return string
function shard.identity(t)
  return table.concat({ tostring(t.task_id), tostring(t.provider or ''), tostring(t.mode or ''),
    tostring(t.attempt or 1) }, '\0')
end

local function hash64(s)
  -- the first 8 bytes of sha256, as an unsigned comparison key (a hex string sorts the same way)
  return crypto.hex(crypto.sha256(s)):sub(1, 16)
end

-- Rendezvous hashing: the shards in id's order of preference (its weight for each, highest first).
local function preferences(id, count)
  local prefs = {}
  for k = 0, count - 1 do prefs[#prefs + 1] = { k = k, w = hash64(id .. '\0#' .. k) } end
  table.sort(prefs, function(a, b) if a.w ~= b.w then return a.w > b.w end return a.k < b.k end)
  return prefs
end

--- Assign every identity to a shard. Returns a table identity -> shard index (0-based).
---@param ids string[] trial identities (duplicates are an error)
---@param count integer number of shards (>= 1)
---@return table<string, integer>
function shard.assign(ids, count)
  assert(math.tointeger(count) and count >= 1, 'shard count must be a whole number >= 1')
  local order, seen = {}, {}
  for _, id in ipairs(ids) do
    if seen[id] then error('shard: duplicate trial identity ' .. (id:gsub('%z', '/')), 0) end
    seen[id] = true
    order[#order + 1] = { id = id, h = hash64(id) }
  end
  table.sort(order, function(a, b) if a.h ~= b.h then return a.h < b.h end return a.id < b.id end)
  local base, extra = #order // count, #order % count
  local load, cap, out = {}, {}, {}
  for k = 0, count - 1 do load[k], cap[k] = 0, base + (k < extra and 1 or 0) end
  for _, o in ipairs(order) do -- each to its most preferred shard with room left
    local k = 0
    for _, p in ipairs(preferences(o.id, count)) do
      if load[p.k] < cap[p.k] then k = p.k; break end
    end
    out[o.id], load[k] = k, load[k] + 1
  end
  return out
end

--- Keep the items of one shard. key(item) -> identity. Returns the kept items in their order.
---@generic T
---@param items T[]
---@param key fun(item:T):string
---@param index integer
---@param count integer
---@return T[]
function shard.filter(items, key, index, count)
  local ids = {}
  for i, it in ipairs(items) do ids[i] = key(it) end
  local where = shard.assign(ids, count)
  local out = {}
  for i, it in ipairs(items) do if where[ids[i]] == index then out[#out + 1] = it end end
  return out
end

--- Parse "K/N". Returns {index=K, count=N} or nil, error.
---@param s string
---@param what string? where the text came from, for the error
function shard.parse(s, what)
  what = what or '--shard'
  local k, n = tostring(s):match('^%s*(%d+)%s*/%s*(%d+)%s*$')
  k, n = tonumber(k), tonumber(n)
  if not k then return nil, string.format('%s: expected K/N (shard K of N, 0 <= K < N), got %q', what, tostring(s)) end
  if n < 1 or k >= n then
    return nil, string.format('%s: shard index %d is out of range for %d shard(s) (0 <= K < N)', what, k, n)
  end
  return { index = math.tointeger(k), count = math.tointeger(n) }
end

--- The shard this process runs: from opts.shard ("K/N"), else from the environment.
--- Returns nil (not sharded), or {index, count, source = 'a sentence saying where it came from'};
--- raises a one-line error on a malformed value.
---@param opts table {shard=string?}
---@param getenv fun(name:string):string?
function shard.detect(opts, getenv)
  getenv = getenv or os.getenv
  local function check(text, what, source)
    local s, err = shard.parse(text, what)
    if not s then error(err, 0) end
    s.source = source
    return s
  end
  if opts.shard then return check(opts.shard, '--shard', '--shard ' .. opts.shard) end
  local env = getenv('CSENG_SHARD')
  if env and env ~= '' then return check(env, 'CSENG_SHARD', 'CSENG_SHARD=' .. env) end
  local id, count = getenv('SLURM_ARRAY_TASK_ID'), getenv('SLURM_ARRAY_TASK_COUNT')
  if id and id ~= '' then
    if not count or count == '' then
      error('SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not (Slurm 20.02 or newer sets both)', 0)
    end
    local min = tonumber(getenv('SLURM_ARRAY_TASK_MIN') or '0') or 0
    local step = tonumber(getenv('SLURM_ARRAY_TASK_STEP') or '1') or 1
    local k = (tonumber(id) or -1) - min
    if step > 1 then k = k // step end
    return check(string.format('%d/%s', k, count), 'SLURM_ARRAY_TASK_ID',
      string.format('Slurm job array: SLURM_ARRAY_TASK_ID=%s, SLURM_ARRAY_TASK_MIN=%d, SLURM_ARRAY_TASK_COUNT=%s', id, min, count))
  end
  local jci = getenv('JOB_COMPLETION_INDEX')
  if jci and jci ~= '' then
    local n = getenv('CSENG_SHARD_COUNT')
    if not n or n == '' then
      error('JOB_COMPLETION_INDEX is set but CSENG_SHARD_COUNT is not: set it to the Job\'s completions ' ..
        '(see deploy/kubernetes/cseng-indexed-job.yaml)', 0)
    end
    return check(jci .. '/' .. n, 'JOB_COMPLETION_INDEX',
      string.format('Kubernetes Indexed Job: JOB_COMPLETION_INDEX=%s, CSENG_SHARD_COUNT=%s', jci, n))
  end
  return nil
end

--- The job id all shards of one job share: --job-id, CSENG_JOB_ID, or Slurm's array job id.
---@return string?
function shard.job_id(opts, getenv)
  getenv = getenv or os.getenv
  local v = opts.job_id or getenv('CSENG_JOB_ID')
  if v == nil or v == '' then v = getenv('SLURM_ARRAY_JOB_ID') end
  if v == nil or v == '' then return nil end
  return (tostring(v):gsub('[^%w%._-]', '-'))
end

--- The run id every shard of one job derives the same way: the plan, what it runs, the dataset's
--- task ids and the job id. parts: {name, provider, mode, solver, task_ids = {...}, job_id}.
---@return string
function shard.run_id(parts)
  local ids = {}
  for i, v in ipairs(parts.task_ids or {}) do ids[i] = tostring(v) end
  table.sort(ids)
  local h = crypto.hex(crypto.sha256(table.concat({ tostring(parts.name), tostring(parts.provider),
    tostring(parts.mode), tostring(parts.solver), tostring(parts.job_id), table.concat(ids, '\n') }, '\0'))):sub(1, 8)
  return string.format('%s-%s-%s-job%s-%s', parts.name or 'run', parts.provider or 'any', parts.mode or 'cold',
    parts.job_id, h)
end

--- The log path of one shard: <dir>/<run_id>.shard-K-of-N.jsonl (and .json beside it).
function shard.paths(dir, run_id, s)
  local base = string.format('%s/%s.shard-%d-of-%d', dir, run_id, s.index, s.count)
  return base .. '.jsonl', base .. '.json'
end


local function out_dir(opts)
  local out = opts.output
  if out and out:match('%.jsonl?$') then return (out:match('^(.*)/[^/]*$') or '.') end
  return out or 'results'
end

local function announce(opts, s, what)
  local line = string.format('cseng: shard %d/%d (%s): %s\n', s.index, s.count, s.source, what)
  if opts.quiet then io.stderr:write(line) else io.stdout:write(line) end
end

--- A tasks run's shard: nil when not sharded; else {index, count, source, job_id, run_id,
--- selected (this shard's tasks), total (the plan's trial count), jsonl, json, record (for
--- run_started)}. `fixed` is the shard recorded in a log being resumed (it wins over flags).
---@param opts table the run's options (shard, job_id, name, provider, mode, solver, output, quiet)
---@param tasks table[] the selected tasks (each with .id)
---@param getenv fun(name:string):string?
---@param fixed table? {index, count, job_id, run_id} from a resumed log
function shard.for_tasks(opts, tasks, getenv, fixed)
  local s
  if fixed then
    s = { index = fixed.index, count = fixed.count, job_id = fixed.job_id, run_id = fixed.run_id,
      source = 'resumed log' }
  else
    s = shard.detect(opts, getenv)
    if not s then return nil end
    s.job_id = shard.required_job_id(opts, getenv)
  end
  local ids = {}
  for i, t in ipairs(tasks) do ids[i] = t.id end
  s.run_id = s.run_id or shard.run_id { name = opts.name, provider = opts.provider, mode = opts.mode,
    solver = opts.solver, task_ids = ids, job_id = s.job_id }
  s.total = #tasks
  s.selected = shard.filter(tasks, function(t)
    return shard.identity { task_id = t.id, provider = opts.provider, mode = opts.mode }
  end, s.index, s.count)
  s.jsonl, s.json = shard.paths(out_dir(opts), s.run_id, s)
  s.record = { index = s.index, count = s.count, job_id = s.job_id, total_trials = s.total, source = s.source }
  announce(opts, s, string.format('%d of the plan\'s %d trials', #s.selected, s.total))
  return s
end

--- The job id of a sharded run (shard.job_id), or a one-line refusal: every shard must share it.
function shard.required_job_id(opts, getenv)
  local id = shard.job_id(opts, getenv)
  if not id then
    error('a sharded run needs a job id that every shard shares: --job-id ID or CSENG_JOB_ID ' ..
      '(Slurm job arrays provide SLURM_ARRAY_JOB_ID)', 0)
  end
  return id
end

--- A startup run's shard: whole providers, never one provider's rounds split (they are lockstep).
--- Returns nil or the shard as for_tasks, with .providers instead of .selected.
function shard.for_startup(opts, providers, getenv)
  local s = shard.detect(opts, getenv)
  if not s then return nil end
  s.job_id = shard.required_job_id(opts, getenv)
  s.run_id = shard.run_id { name = opts.name, provider = 'arena', mode = 'startup', solver = '',
    task_ids = providers, job_id = s.job_id }
  s.total = #providers
  s.providers = shard.filter(providers, function(p) return shard.identity { task_id = p, provider = p, mode = 'startup' } end,
    s.index, s.count)
  s.jsonl, s.json = shard.paths(out_dir(opts), s.run_id, s)
  s.record = { index = s.index, count = s.count, job_id = s.job_id, total_trials = s.total, source = s.source,
    unit = 'provider' }
  announce(opts, s, string.format('provider(s) %s of %d (the arena shards by provider: one provider\'s ' ..
    'lockstep rounds are never split across machines)', #s.providers > 0 and table.concat(s.providers, ', ') or 'none',
    s.total))
  return s
end

return shard
