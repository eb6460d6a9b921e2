-- Scale-out: the partition of a plan's trials into shards, shard logs and `cseng merge`, the
-- Kubernetes manifest's contract, and three shards run with JOB_COMPLETION_INDEX set by hand.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local cjson = require('cjson')
local dataset = require('cseng.workload.dataset')
local results = require('cseng.results.log')
local shard = require('cseng.run.shard')

local H = require('spec.helpers.common')
local ROOT = H.ROOT

local tmp = H.tempdir('cseng-shard-spec')
teardown(H.remove_tempdirs)

local function cseng(args, env) return H.cseng(args, { env = env or {} }) end

-- The trial identities of a plan the way `cseng run` forms them: tasks x providers x modes.
local function trials(task_ids, providers, modes)
  local out = {}
  for _, p in ipairs(providers) do
    for _, m in ipairs(modes) do
      for _, id in ipairs(task_ids) do out[#out + 1] = shard.identity { task_id = id, provider = p, mode = m } end
    end
  end
  return out
end

local function bundled_ids()
  local ids = {}
  for _, t in ipairs(dataset.load(ROOT .. '/data/smoke.jsonl')) do ids[#ids + 1] = t.id end
  return ids
end

describe('the partition', function()
  local plans = {
    ['cold-gold'] = function(ids) return trials(ids, { 'local' }, { 'cold' }) end,
    ['matrix'] = function(ids) return trials(ids, { 'local', 'docker', 'daytona' }, { 'cold', 'warm' }) end,
    ['large'] = function()
      local many = {}
      for i = 1, 500 do many[i] = string.format('task-%03d', i) end
      return trials(many, { 'e2b', 'modal' }, { 'cold', 'warm' })
    end,
  }

  for name, make in pairs(plans) do
    for _, n in ipairs { 1, 2, 3, 7 } do
      it(string.format('%s in %d shard(s): every trial in exactly one shard, sizes within one', name, n), function()
        local ids = make(bundled_ids())
        local where = shard.assign(ids, n)
        local count, sizes = 0, {}
        for _, id in ipairs(ids) do
          local k = where[id]
          assert.is_true(k ~= nil and k >= 0 and k < n, 'trial without a shard')
          sizes[k] = (sizes[k] or 0) + 1
          count = count + 1
        end
        assert.are.equal(#ids, count)
        -- the union of the filters is the whole plan, with no duplicate
        local union = {}
        for k = 0, n - 1 do
          for _, id in ipairs(shard.filter(ids, function(x) return x end, k, n)) do
            assert.is_nil(union[id], 'a trial in two shards')
            union[id] = k
          end
        end
        for _, id in ipairs(ids) do assert.are.equal(where[id], union[id]) end
        local lo, hi = math.huge, 0
        for k = 0, n - 1 do lo, hi = math.min(lo, sizes[k] or 0), math.max(hi, sizes[k] or 0) end
        assert.is_true(hi - lo <= 1, string.format('shard sizes %d..%d', lo, hi))
      end)
    end
  end

  it('is the same whatever the order of the trials (it depends on identities, not positions)', function()
    local ids = trials(bundled_ids(), { 'local' }, { 'cold', 'warm' })
    local rev = {}
    for i = #ids, 1, -1 do rev[#rev + 1] = ids[i] end
    local a, b = shard.assign(ids, 3), shard.assign(rev, 3)
    for _, id in ipairs(ids) do assert.are.equal(a[id], b[id]) end
  end)

  it('moves few trials when one task is added to the dataset', function()
    for _, n in ipairs { 2, 3, 7 } do
      for _, base in ipairs { 26, 100, 500 } do
        local ids = {}
        for i = 1, base do ids[i] = shard.identity { task_id = 'task-' .. i, provider = 'local', mode = 'cold' } end
        local before = shard.assign(ids, n)
        ids[#ids + 1] = shard.identity { task_id = 'a-new-task', provider = 'local', mode = 'cold' }
        local after = shard.assign(ids, n)
        local moved = 0
        for id, k in pairs(before) do if after[id] ~= k then moved = moved + 1 end end
        -- a list-position split would move about half of them; bounded-load hashing moves a handful
        assert.is_true(moved <= 3, string.format('%d of %d trials moved (N=%d)', moved, base, n))
      end
    end
  end)

  it('reads the shard from Slurm and Kubernetes variables, and refuses bad values in one line', function()
    local function env(t) return function(k) return t[k] end end
    local s = shard.detect({}, env { SLURM_ARRAY_TASK_ID = '5', SLURM_ARRAY_TASK_MIN = '4', SLURM_ARRAY_TASK_COUNT = '3' })
    assert.are.same({ 1, 3 }, { s.index, s.count })
    assert.matches('Slurm job array', s.source)
    s = shard.detect({}, env { JOB_COMPLETION_INDEX = '2', CSENG_SHARD_COUNT = '3' })
    assert.are.same({ 2, 3 }, { s.index, s.count })
    assert.matches('Kubernetes Indexed Job', s.source)
    s = shard.detect({ shard = '0/2' }, env { JOB_COMPLETION_INDEX = '2', CSENG_SHARD_COUNT = '3' })
    assert.are.same({ 0, 2 }, { s.index, s.count }) -- the flag wins
    assert.is_nil(shard.detect({}, env {}))
    local ok, err = pcall(shard.detect, {}, env { JOB_COMPLETION_INDEX = '1' })
    assert.is_false(ok)
    assert.matches('CSENG_SHARD_COUNT', err)
    for _, bad in ipairs { '3/3', '1', 'a/b', '-1/2', '0/0' } do
      ok, err = pcall(shard.detect, { shard = bad }, env {})
      assert.is_false(ok, bad)
      assert.matches('^%-%-shard: ', err)
      assert.is_nil(err:find('\n'), 'one line')
    end
  end)
end)

describe('the Kubernetes manifest', function()
  it('is an Indexed Job with what cseng relies on (structural check with PyYAML)', function()
    local script = [[
import sys, yaml, json
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
json.dump(docs, sys.stdout)
]]
    local r = assert(proc.run { argv = { 'python3', '-c', script, ROOT .. '/deploy/kubernetes/cseng-indexed-job.yaml' } })
    assert.are.equal(0, r.code, r.stderr)
    local docs = cjson.decode(r.stdout)
    local jobs, secret = {}, nil
    for _, d in ipairs(docs) do
      if d.kind == 'Job' then jobs[d.metadata.name] = d end
      if d.kind == 'Secret' then secret = d end
    end
    local job = assert(jobs['cseng-shards'], 'no cseng-shards Job')
    assert.are.equal('batch/v1', job.apiVersion)
    assert.are.equal('Indexed', job.spec.completionMode)
    assert.is_true(math.tointeger(job.spec.completions) and job.spec.completions >= 1)
    local pod = job.spec.template.spec
    assert.are.equal('Never', pod.restartPolicy)
    local c = pod.containers[1]
    local env = {}
    for _, e in ipairs(c.env) do env[e.name] = e end
    assert.are.equal(tostring(math.tointeger(job.spec.completions)), env.CSENG_SHARD_COUNT.value, 'CSENG_SHARD_COUNT must equal completions')
    assert.matches('controller%-uid', env.CSENG_JOB_ID.valueFrom.fieldRef.fieldPath)
    assert.are.equal(secret.metadata.name, c.envFrom[1].secretRef.name)
    local args = table.concat(c.args, ' ')
    assert.matches('^run ', args)
    local out = args:match('%-%-output (%S+)')
    local mounted
    for _, m in ipairs(c.volumeMounts) do if m.mountPath == out then mounted = m.name end end
    assert.is_truthy(mounted, '--output is not on a mounted volume')
    local vol
    for _, v in ipairs(pod.volumes) do if v.name == mounted then vol = v end end
    local claim = vol.persistentVolumeClaim.claimName
    local pvc
    for _, d in ipairs(docs) do if d.kind == 'PersistentVolumeClaim' and d.metadata.name == claim then pvc = d end end
    assert.are.same({ 'ReadWriteMany' }, pvc.spec.accessModes)
    local merge = assert(jobs['cseng-merge'], 'no merge Job')
    local margs = merge.spec.template.spec.containers[1].args
    assert.are.equal('merge', margs[1])
    assert.are.equal(out, margs[2])
  end)
end)

describe('three shards with JOB_COMPLETION_INDEX set by hand, and cseng merge', function()
  local dir, ids
  setup(function()
    dir = tmp .. '/k8s'
    assert(fs.mkdir_p(dir))
    ids = bundled_ids()
  end)

  it('each shard runs its part, says so on its first line; merge gives the whole run', function()
    local seen = {}
    for k = 0, 2 do
      local r = cseng({ 'run', 'plans/cold-gold.lua', '--output', dir, '--concurrency', '2' },
        { JOB_COMPLETION_INDEX = tostring(k), CSENG_SHARD_COUNT = '3', CSENG_JOB_ID = 'uid-1234' })
      assert.are.equal(0, r.code, r.stdout .. r.stderr)
      local first = r.stdout:match('^[^\n]*')
      assert.matches(string.format('^cseng: shard %d/3 %%(Kubernetes Indexed Job: JOB_COMPLETION_INDEX=%d', k, k), first)
    end
    local files = {}
    for _, name in ipairs(assert(fs.list(dir))) do if name:match('%.jsonl$') then files[#files + 1] = name end end
    table.sort(files)
    assert.are.equal(3, #files)
    local run_id = files[1]:match('^(.+)%.shard%-0%-of%-3%.jsonl$')
    assert.is_truthy(run_id, files[1])
    for k = 0, 2 do assert.are.equal(string.format('%s.shard-%d-of-3.jsonl', run_id, k), files[k + 1]) end
    for _, f in ipairs(files) do
      for _, t in ipairs(results.trials(results.read(dir .. '/' .. f))) do
        assert.is_nil(seen[t.task_id], 'a task in two shards')
        seen[t.task_id] = f
      end
    end
    local r = cseng { 'merge', dir, '-o', tmp .. '/merged/run.jsonl' }
    assert.are.equal(0, r.code, r.stderr)
    local events = results.read(tmp .. '/merged/run.jsonl')
    local s = results.summary(events)
    assert.are.equal(#ids, s.task_count)
    assert.are.equal(#ids, s.passed)
    assert.are.equal('finished', s.status)
    local got = {}
    for _, t in ipairs(results.trials(events)) do got[#got + 1] = t.task_id end
    table.sort(got)
    local want = { table.unpack(ids) }
    table.sort(want)
    assert.are.same(want, got)
    assert.are.equal(0, #results.live_allocations(events))
    assert.is_true(fs.exists(tmp .. '/merged/run.json'))
    -- the report templates read the merged log as a single-machine run's
    r = cseng { 'report', tmp .. '/merged/run.jsonl', '--template', 'lua/reports/per_task.lua', '-o', tmp .. '/merged/r.md' }
    assert.are.equal(0, r.code, r.stderr)
    assert.matches(string.format('| local/cold | %d | %d | 0 | 0 | 100%% |', #ids, #ids), assert(fs.read(tmp .. '/merged/r.md')), 1, true)
  end)

  it('a missing shard is a one-line error naming its index', function()
    local part = tmp .. '/missing'
    assert(fs.mkdir_p(part))
    for _, name in ipairs(assert(fs.list(dir))) do
      if not name:find('shard-1-of-3', 1, true) then assert(fs.write(part .. '/' .. name, assert(fs.read(dir .. '/' .. name)))) end
    end
    local r = cseng { 'merge', part, '-o', tmp .. '/m2.jsonl' }
    assert.are.equal(2, r.code)
    assert.matches('^cseng: merge: run [^ ]+: missing shard 1 of 3 %(have 2%)\n$', r.stderr)
    assert.is_false(fs.exists(tmp .. '/m2.jsonl'))
  end)

  it('a shard from another run is a one-line error', function()
    local part = tmp .. '/foreign'
    assert(fs.mkdir_p(part))
    local names = assert(fs.list(dir))
    table.sort(names)
    for _, name in ipairs(names) do assert(fs.write(part .. '/' .. name, assert(fs.read(dir .. '/' .. name)))) end
    -- shard 2 replaced by shard 2 of another job's run of the same plan, renamed to fit
    local other = tmp .. '/other'
    assert(fs.mkdir_p(other))
    local r = cseng({ 'run', 'plans/cold-gold.lua', '--output', other, '--task-limit', '3', '--quiet', '--shard', '2/3', '--job-id', 'other-job' })
    assert.are.equal(0, r.code, r.stderr)
    local foreign
    for _, name in ipairs(assert(fs.list(other))) do if name:match('%.jsonl$') then foreign = name end end
    local target
    for _, name in ipairs(names) do if name:find('shard-2-of-3.jsonl', 1, true) then target = name end end
    assert(fs.write(part .. '/' .. target, assert(fs.read(other .. '/' .. foreign))))
    r = cseng { 'merge', part, '-o', tmp .. '/m3.jsonl' }
    assert.are.equal(2, r.code)
    assert.matches('^cseng: merge: [^\n]*shard%-2%-of%-3%.jsonl: belongs to run [^\n]+a shard from another run%)\n$', r.stderr)
  end)

  it('a shard resumes as the same shard of the same run', function()
    local rdir = tmp .. '/resume'
    assert(fs.mkdir_p(rdir))
    local r = cseng({ 'run', 'plans/cold-gold.lua', '--output', rdir, '--quiet', '--shard', '1/2', '--job-id', 'j-resume' })
    assert.are.equal(0, r.code, r.stderr)
    local log
    for _, name in ipairs(assert(fs.list(rdir))) do if name:match('%.jsonl$') then log = rdir .. '/' .. name end end
    -- drop the last two trials (as if killed before them), then resume: only those run again
    local events = results.read(log)
    local kept, dropped, lines = {}, 0, {}
    for i = #events, 1, -1 do
      local e = events[i]
      if e.event == 'run_finished' then e = nil
      elseif e.event == 'trial' and dropped < 2 then dropped = dropped + 1; e = nil end
      if e then table.insert(kept, 1, e) end
    end
    for _, e in ipairs(kept) do lines[#lines + 1] = cjson.encode(e) end
    assert(fs.write(log, table.concat(lines, '\n') .. '\n'))
    r = cseng { 'run', 'plans/cold-gold.lua', '--resume', log, '--quiet' }
    assert.are.equal(0, r.code, r.stderr)
    local again = results.read(log)
    local count, per = 0, {}
    for _, t in ipairs(results.trials(again)) do count = count + 1; per[t.task_id] = (per[t.task_id] or 0) + 1 end
    local started
    for _, e in ipairs(again) do if e.event == 'run_started' then started = e end end
    local want = shard.filter(dataset.load(ROOT .. '/data/smoke.jsonl'), function(t)
      return shard.identity { task_id = t.id, provider = 'local', mode = 'cold' }
    end, 1, 2)
    assert.are.equal(#want, count)
    for _, t in ipairs(want) do assert.are.equal(1, per[t.id], t.id) end
    assert.are.same({ 1, 2 }, { started.shard.index, started.shard.count })
    -- and `cseng cleanup` of a shard log works as for any run
    r = cseng { 'cleanup', log }
    assert.are.equal(0, r.code, r.stderr)
    assert.matches('nothing to clean', r.stdout)
  end)

  it('a sharded run without a job id is refused before anything runs', function()
    local r = cseng({ 'run', 'plans/cold-gold.lua', '--output', tmp .. '/nojob', '--shard', '0/2' })
    assert.are.equal(2, r.code)
    assert.matches('needs a job id', r.stderr)
  end)
end)

describe('the arena, sharded', function()
  it('keeps whole providers per shard, says so, and merges into one startup run', function()
    local dir = tmp .. '/arena'
    assert(fs.mkdir_p(dir))
    local plan_file = tmp .. '/startup3.lua'
    assert(fs.write(plan_file, [[
local plan = require('cseng.run.plan')
return plan.startup {
  name = 'startup3', providers = { 'local', 'local-b', 'local-c' }, samples = 3, warmups = 0, seed = 7,
  command = [=[python3 -c "print('ready-7')"]=], expect = 'ready-7',
  provider_config = { ['local-b'] = { adapter = 'local' }, ['local-c'] = { adapter = 'local' } },
}
]]))
    local assigned = {}
    for k = 0, 1 do
      local r = cseng { 'run', plan_file, '--shard', k .. '/2', '--job-id', 'arena-1', '--output', dir }
      assert.are.equal(0, r.code, r.stdout .. r.stderr)
      local first = r.stdout:match('^[^\n]*')
      assert.matches('lockstep rounds are never split across machines', first)
      for name in (first:match('provider%(s%) ([^%(]-) of 3') or ''):gmatch('[%w%-]+') do
        assert.is_nil(assigned[name], name .. ' in two shards')
        assigned[name] = k
      end
    end
    local n = 0
    for _ in pairs(assigned) do n = n + 1 end
    assert.are.equal(3, n)
    local r = cseng { 'merge', dir, '-o', tmp .. '/arena-merged/run.jsonl' }
    assert.are.equal(0, r.code, r.stderr)
    local per = {}
    for _, e in ipairs(results.read(tmp .. '/arena-merged/run.jsonl')) do
      if e.event == 'startup_trial' and not e.warmup then per[e.provider] = (per[e.provider] or 0) + 1 end
    end
    assert.are.same({ ['local'] = 3, ['local-b'] = 3, ['local-c'] = 3 }, per)
    r = cseng { 'report', tmp .. '/arena-merged/run.jsonl', '--template', 'lua/reports/startup.lua', '-o', tmp .. '/arena.md' }
    assert.are.equal(0, r.code, r.stderr)
    local md = assert(fs.read(tmp .. '/arena.md'))
    for _, name in ipairs { 'local', 'local-b', 'local-c' } do assert.matches('| ' .. name .. ' |', md, 1, true) end
  end)
end)

