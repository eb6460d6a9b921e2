--- What the specs of the vendor adapters (spec/providers/daytona/daytona_spec.lua, spec/providers/e2b/e2b_spec.lua) share:
--- sandbox labels and archives, Prism proxies started in front of a fake, the runner driven end
--- to end against a fake, and the lifecycle checks whose logic is the same for every REST
--- adapter. Not a spec itself (no _spec in the name): the specs load it with
---   local vendor = require 'spec.helpers.vendor'
--- Busted's globals (describe, it, assert) are not visible here, so checks use luassert.
local proc = require('cseng.proc')
local task = require('cseng.task')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local assert = require('luassert')

local V = {}

V.ROOT = sys.root()
V.prism = require 'spec.fakes.prism'

--- labels(run, task) -> the cseng.* labels the runner puts on a sandbox, with this launcher.
function V.labeller(launcher)
  return function(run, t)
    return { ['cseng.run'] = run, ['cseng.launcher'] = launcher, ['cseng.task'] = t or 'task-a',
             ['cseng.created'] = tostring(os.time()) }
  end
end

--- An archive of {path = data} (default tar.gz).
function V.tar_of(files, format)
  local entries = {}
  for path, data in pairs(files) do entries[#entries + 1] = { path = path, data = data } end
  return archive.pack(entries, { format = format or 'tar.gz' })
end

--- The ids of a list of sandboxes, sorted.
function V.sorted_ids(list)
  local ids = {}
  for _, s in ipairs(list) do ids[#ids + 1] = s.id end
  table.sort(ids)
  return ids
end

--- The 0-based index of a task in data/smoke.jsonl (what --task-index takes), or nil.
function V.smoke_index(task_id)
  local n = 0
  for line in assert(fs.read(V.ROOT .. '/data/smoke.jsonl')):gmatch('[^\n]+') do
    if jsonl.decode(line).task_id == task_id then return n end
    n = n + 1
  end
  return nil
end

-- What a task asks of a provider, as distinct features: each Dockerfile instruction kind of its
-- recipe (COPY and ADD with their --chown/--chmod flags apart), the final WORKDIR and USER, more
-- than one RUN step; and what its files ask of the adapter's upload: an executable file, a binary
-- one (a NUL in its first 8 KiB), an empty one, one over 256 KiB, a symbolic link, a path three
-- or more levels deep, a name beyond [A-Za-z0-9._-].
local function task_features(t)
  local f = {}
  for _, e in ipairs(fs.walk(t.dir) or {}) do
    if e.type == 'file' then
      if e.mode & 73 ~= 0 then f['file:exec'] = true end
      if e.size == 0 then f['file:empty'] = true end
      if e.size > 256 * 1024 then f['file:large'] = true end
      local h = io.open(fs.join(t.dir, e.path), 'rb') -- its first 8 KiB, not the whole file
      if h then
        if (h:read(8192) or ''):find('\0', 1, true) then f['file:binary'] = true end
        h:close()
      end
    elseif e.type ~= 'dir' then
      f['file:' .. e.type] = true -- a symbolic link (or anything else an upload must carry)
    end
    if select(2, e.path:gsub('/', '')) >= 3 then f['file:deep'] = true end
    if e.path:find('[^%w%._/%-]') then f['file:oddname'] = true end
  end
  for _, s in ipairs(t.recipe.steps or {}) do
    local k = s.op
    if s.op == 'COPY' then
      k = (s.copy.add and 'ADD' or 'COPY') .. (s.copy.chown and '+chown' or '') .. (s.copy.chmod and '+chmod' or '')
    end
    f[k] = true
  end
  f['workdir=' .. tostring(t.recipe.workdir)] = true
  f['user=' .. tostring(t.recipe.user)] = true
  if #(t.recipe.runs or {}) > 1 then f['RUNx2+'] = true end
  return f
end

--- The fewest tasks of data/smoke.jsonl (greedy, in dataset order on ties) that together have
--- every feature of task_features any task has: read from the recipes and files, never named, so
--- a task added with a new kind of environment or file joins the set. The vendor fakes run these
--- cold, warm and with nop; every task runs cold and warm with gold on local and docker (the real
--- runtimes) and with nop on local (spec/run/tasks_spec.lua, spec/providers/docker/docker_spec.lua): what a vendor
--- adds is its API (create, exec, upload, snapshot, destroy), which these exercise with every
--- kind of environment and file the dataset has. Returns their ids in dataset order.
function V.covering_tasks()
  local tasks = require('cseng.workload.dataset').load(V.ROOT .. '/data/smoke.jsonl')
  local feats, missing = {}, {}
  for i, t in ipairs(tasks) do
    feats[i] = task_features(t)
    for k in pairs(feats[i]) do missing[k] = true end
  end
  local chosen = {}
  while next(missing) do
    local best, gain = nil, 0
    for i in ipairs(tasks) do
      local g = 0
      if not chosen[i] then for k in pairs(feats[i]) do if missing[k] then g = g + 1 end end end
      if g > gain then best, gain = i, g end
    end
    chosen[best] = true
    for k in pairs(feats[best]) do missing[k] = nil end
  end
  local ids = {}
  for i, t in ipairs(tasks) do if chosen[i] then ids[#ids + 1] = t.id end end
  return ids
end

--- Start Prism proxies concurrently, one per {spec file, upstream URL}; returns them in order.
--- Raises (after every start has ended) when one fails.
function V.start_prisms(...)
  local tasks = {}
  for i, p in ipairs({ ... }) do
    tasks[i] = task.spawn(function() return V.prism.start(p[1], { upstream = p[2] }) end)
  end
  local joined = {}
  for i, t in ipairs(tasks) do joined[i] = table.pack(t:join()) end
  local out = {}
  for i, j in ipairs(joined) do
    local ok, px, err = j[1], j[2], j[3]
    assert(ok and px, tostring(err or px))
    out[i] = px
  end
  return table.unpack(out)
end

-- ---- the runner on a fake ------------------------------------------------------------------

--- `cseng run plans/cold-gold.lua --provider NAME` against a fake. In a describe block:
---   local runner = vendor.runner(fake, 'e2b', { E2B_API_KEY = false, ... })
---   setup(function() f = runner.start() end) ; teardown(runner.stop)
--- runner.env_file(extra) writes the fake's f.env(extra) as an --env-file; runner.run(args,
--- env_add) runs the plan with args and returns the process result and the run's summary.
--- env_add defaults to unset: the provider's variables removed from the inherited environment,
--- so only the env file points the runner at the fake.
function V.runner(fake, provider, unset)
  local h = {}

  function h.start()
    h.f = fake.start {}
    h.tmp = assert(fs.tempdir(provider .. '-runner-'))
    return h.f
  end

  function h.stop()
    h.f.close()
    fs.remove_tree(h.tmp)
  end

  function h.env_file(extra)
    local lines = {}
    for k, v in pairs(h.f.env(extra)) do lines[#lines + 1] = k .. '=' .. v end
    local p = h.tmp .. '/' .. provider .. '-' .. crypto.hex(crypto.random_bytes(3)) .. '.env'
    assert(fs.write(p, table.concat(lines, '\n') .. '\n'))
    return p
  end

  function h.run(args, env_add)
    local out = h.tmp .. '/out-' .. crypto.hex(crypto.random_bytes(3))
    local argv = { V.ROOT .. '/cseng', 'run', 'plans/cold-gold.lua', '--provider', provider, '--output', out, '--quiet' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local r = assert(proc.run { argv = argv, cwd = V.ROOT, timeout = 600, env_add = env_add or util.copy(unset) })
    local summary
    for _, name in ipairs(fs.list(out) or {}) do
      if name:match('%.json$') then summary = cjson.decode((assert(fs.read(out .. '/' .. name)))) end
    end
    return r, summary
  end

  --- A bundled task of data/smoke.jsonl passes with gold (the fake really runs it: one sandbox
  --- created and deleted), then fails with nop, no sandbox left after either. after_gold(stats,
  --- before, summary) and after_nop(summary) add the provider's own checks.
  function h.check_gold_then_nop(task_id, after_gold, after_nop)
    local i = V.smoke_index(task_id)
    assert.is_number(i)
    local before = h.f.stats()
    local r, summary = h.run { '--env-file', h.env_file(), '--task-index', tostring(i), '--task-limit', '1' }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    assert.equal(1, summary.passed, jsonl.encode(summary))
    assert.equal(provider, summary.provider)
    assert.equal(task_id, summary.results[1].task_id)
    local s = h.f.stats()
    assert.equal(1, s.creates - before.creates)
    assert.equal(1, s.deletes - before.deletes)
    assert.equal(0, s.live)
    if after_gold then after_gold(s, before, summary) end

    r, summary = h.run { '--env-file', h.env_file(), '--task-index', tostring(i), '--task-limit', '1', '--solver', 'nop' }
    assert.equal(0, r.code, r.stderr)
    assert.equal(0, summary.passed)
    if after_nop then after_nop(summary) end
    assert.equal(0, h.f.stats().live)
  end

  --- The covering tasks (V.covering_tasks: every kind of environment and file the dataset has)
  --- pass with gold in each of modes (default cold), then fail with nop (reward 0, no error)
  --- cold. No sandbox is left live after any run. Every task runs cold and warm on local and
  --- docker, and with nop on local (spec/run/tasks_spec.lua, spec/providers/docker/docker_spec.lua). Returns the
  --- summaries by mode (and .nop).
  function h.check_covering_tasks(modes)
    local out = {}
    local cover = V.covering_tasks()
    local cover_arg = table.concat(cover, ',')
    for _, mode in ipairs(modes or { 'cold' }) do
      local n = #cover
      local r, summary = h.run { '--env-file', h.env_file(), '--mode', mode, '--tasks', cover_arg }
      assert.equal(0, r.code, r.stderr .. r.stdout)
      local failed = {}
      for _, rec in ipairs(summary.results) do
        if not rec.passed then failed[#failed + 1] = rec.task_id .. ': ' .. tostring(rec.outcome) .. ' ' .. tostring(rec.error) end
      end
      assert.same({}, failed, mode)
      assert.equal(n, #summary.results, mode)
      assert.equal(n, summary.passed, mode .. ': ' .. jsonl.encode(summary))
      assert.equal(provider, summary.provider)
      assert.equal(0, h.f.stats().live, mode)
      out[mode] = summary
    end
    local r, summary = h.run { '--env-file', h.env_file(), '--solver', 'nop', '--tasks', cover_arg }
    assert.equal(0, r.code, r.stderr)
    assert.equal(#cover, #summary.results)
    assert.equal(0, summary.passed, jsonl.encode(summary))
    for _, rec in ipairs(summary.results) do
      assert.is_false(rec.passed, rec.task_id)
      assert.equal('failed', rec.outcome, rec.task_id .. ': ' .. tostring(rec.error))
    end
    assert.equal(0, h.f.stats().live)
    out.nop = summary
    return out
  end

  --- Warm mode (`--mode warm`) on a bundled task, twice: each run prepares a sandbox, snapshots
  --- it through the vendor's API (the fake copies its root for real) and runs the trial from the
  --- snapshot; gold passes and the record has the artifact. The second run finds the artifact the
  --- first made (same task content) and does not snapshot again. snapshots: the fake's counter
  --- of snapshot calls. Returns the artifact and the first run's summary.
  function h.check_warm(task_id, snapshots)
    local i = V.smoke_index(task_id)
    assert.is_number(i)
    local args = { '--env-file', h.env_file(), '--task-index', tostring(i), '--task-limit', '1', '--mode', 'warm' }
    local before = h.f.stats()
    local r, summary = h.run(args)
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local rec = summary.results[1]
    assert.equal(1, summary.passed, jsonl.encode(summary))
    assert.equal(task_id, rec.task_id)
    assert.is_string(rec.warm_artifact)
    local s = h.f.stats()
    assert.equal(1, s[snapshots] - before[snapshots])
    assert.equal(2, s.creates - before.creates) -- the prewarm sandbox, then the trial's
    assert.equal(0, s.live)
    local r2, summary2 = h.run(args)
    assert.equal(0, r2.code, r2.stderr .. r2.stdout)
    assert.equal(1, summary2.passed, jsonl.encode(summary2))
    assert.equal(rec.warm_artifact, summary2.results[1].warm_artifact)
    assert.equal(s[snapshots], h.f.stats()[snapshots]) -- reused, not made again
    assert.equal(0, h.f.stats().live)
    return rec.warm_artifact, summary
  end

  --- Warm mode when the vendor's snapshot fails (fault: the fake's switch set to status): the
  --- trial is an error in the build stage naming the snapshot, and nothing is left allocated.
  function h.check_warm_snapshot_fails(task_id, switch, status)
    local i = V.smoke_index(task_id)
    h.f.set { [switch] = status }
    local _, summary = h.run { '--env-file', h.env_file(), '--task-index', tostring(i), '--task-limit', '1',
                               '--mode', 'warm' }
    h.f.set { [switch] = false }
    local rec = summary.results[1]
    assert.equal('error', rec.outcome, jsonl.encode(rec))
    assert.equal('build', rec.error_stage)
    assert.matches('snapshot', rec.error)
    assert.equal('HTTP_' .. status, rec.error_code)
    assert.is_nil(rec.sandbox_id) -- no trial sandbox was created
    assert.equal(0, h.f.stats().live)
    return rec
  end

  --- The run stops with a clear error naming key_var when it is missing (url_var still points
  --- at the fake), and no request reaches the fake.
  function h.check_missing_key(key_var, url_var)
    local before = #h.f.stats().requests
    local r = h.run({ '--task-limit', '1' }, { [key_var] = false, [url_var] = h.f.url })
    assert.equal(1, r.code)
    assert.matches(key_var, r.stderr)
    assert.not_matches('stack traceback', r.stderr)
    assert.equal(before, #h.f.stats().requests)
  end

  return h
end

-- ---- lifecycle checks against a fake -------------------------------------------------------

--- connect raises an error naming the credential variable, which is the adapter's first.
function V.check_names_credential(adapter, var)
  local ok, err = pcall(adapter.connect, { getenv = function() return nil end })
  assert.is_false(ok)
  assert.matches(var, err)
  assert.equal(var, adapter.credentials[1])
end

--- A create the fake answers after 0.3 s: its timings show the wait (ttfb >= 0.3). Returns the
--- client and the sandbox.
function V.slow_create(adapter, f)
  f.set { latency = { create = 0.3 } }
  local client = adapter.connect(f.config())
  local sb = assert(adapter.create(client, {}))
  assert.is_true(sb.http_timings.ttfb >= 0.3, tostring(sb.http_timings.ttfb))
  return client, sb
end

--- A create refused for its credentials: the fake's 401 (auth_fail = 'create') and then a wrong
--- credential (wrong: the config fields that make it wrong) are nil, HTTP_401 and a message that
--- never holds the secret (the fake's) nor the wrong value. Returns a client with the right
--- credentials and the first refusal's message.
function V.refused_create(adapter, f, secret, wrong)
  f.set { auth_fail = 'create' }
  local client = adapter.connect(f.config())
  local sb, msg, code = adapter.create(client, {})
  assert.is_nil(sb)
  assert.equal('HTTP_401', code)
  assert.is_nil(msg:find(secret, 1, true))
  f.set { auth_fail = false }
  local bad = adapter.connect(f.config(wrong))
  local sb2, msg2, code2 = adapter.create(bad, {})
  assert.is_nil(sb2)
  assert.equal('HTTP_401', code2)
  for _, v in pairs(wrong) do assert.is_nil(msg2:find(v, 1, true)) end
  return client, msg
end

--- A failing delete is reported (HTTP_500); a sandbox already gone (404) counts as destroyed.
function V.check_destroy(adapter, f)
  local client = adapter.connect(f.config())
  local sb = assert(adapter.create(client, {}))
  f.set { delete_status = 500 }
  local ok, msg, code = adapter.destroy(client, sb)
  assert.is_nil(ok)
  assert.equal('HTTP_500', code)
  assert.matches('forced failure 500', msg)
  f.set { delete_status = false }
  assert.is_true(adapter.destroy(client, sb))
  assert.is_true(adapter.destroy(client, sb)) -- 404 now: already gone
  assert.is_true(adapter.destroy(client, { id = 'never-existed' }))
  local s = f.stats()
  assert.equal(4, s.deletes)
  assert.equal(1, s.destroyed)
end

--- list finds exactly one run's sandboxes by label across pages of 2 (3 of them among 5: two
--- list calls), the fake saw the filter as f.stats()[seen_key], and no filter lists all 5.
function V.check_list_pages(adapter, f, labels, run, seen_key)
  f.set { page_size = 2 }
  local client = adapter.connect(f.config())
  local mine, theirs = {}, {}
  for i = 1, 3 do mine[#mine + 1] = assert(adapter.create(client, { labels = labels(run, 't' .. i) })) end
  for i = 1, 2 do theirs[#theirs + 1] = assert(adapter.create(client, { labels = labels('run-B', 't' .. i) })) end
  local lists0 = f.stats().lists
  local found = assert(adapter.list(client, { labels = { ['cseng.run'] = run } }))
  assert.same(V.sorted_ids(mine), V.sorted_ids(found))
  assert.equal(2, f.stats().lists - lists0) -- the next page was followed
  assert.same({ ['cseng.run'] = run }, f.stats()[seen_key])
  assert.equal(5, #assert(adapter.list(client, {})))
  for _, s in ipairs(mine) do assert(adapter.destroy(client, s)) end
  for _, s in ipairs(theirs) do assert(adapter.destroy(client, s)) end
end

return V
