-- Scale-out on a real Slurm: munged, slurmctld and slurmd on localhost (tools/slurm-up.sh, from a
-- generated slurm.conf), `sbatch --array=0-3` of deploy/slurm/cseng-array.sbatch running
-- plans/cold-gold.lua on the local provider in 4 shards, then `cseng merge`. Where Slurm cannot
-- start here, the test is reported as skipped (pending) with the reason, never as passed.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local dataset = require('cseng.workload.dataset')
local results = require('cseng.results.log')

local ROOT = sys.root()
local CSENG = ROOT .. '/cseng'

local function env_with(extra)
  local e = {}
  for _, k in ipairs { 'PATH', 'HOME', 'TMPDIR', 'LANG' } do e[k] = os.getenv(k) end
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

describe('a Slurm job array', function()
  local tmp, cluster, why
  setup(function()
    tmp = assert(fs.tempdir('cseng-slurm-spec'))
    cluster = tmp .. '/slurm'
    local r = assert(proc.run { argv = { ROOT .. '/tools/slurm-up.sh', cluster }, cwd = ROOT, timeout = 120 })
    if r.code ~= 0 then why = 'Slurm could not start here: ' .. (r.stderr:match('SLURM UNAVAILABLE: ([^\n]*)') or r.stderr) end
  end)
  teardown(function()
    if cluster then proc.run { argv = { ROOT .. '/tools/slurm-down.sh', cluster }, timeout = 60 } end
    if tmp then fs.remove_tree(tmp) end
  end)

  it('runs cold-gold in 4 shards; cseng merge gives the same trials as one machine, every one passed', function()
    if why then pending(why) return end
    local out = tmp .. '/results'
    local env = env_with { SLURM_CONF = cluster .. '/slurm.conf', CSENG_DIR = ROOT, RESULTS = out,
      PLAN = 'plans/cold-gold.lua', CSENG_ARGS = '--quiet --concurrency 1' }
    local r = assert(proc.run { argv = { 'sbatch', '--array=0-3', '--wait', '--output=' .. tmp .. '/job-%a.out',
      ROOT .. '/deploy/slurm/cseng-array.sbatch' }, cwd = ROOT, env = env, timeout = 1200 })
    local outs = {}
    for k = 0, 3 do outs[#outs + 1] = fs.read(tmp .. '/job-' .. k .. '.out') or '' end
    assert.are.equal(0, r.code, r.stdout .. r.stderr .. table.concat(outs, '\n'))
    local job = r.stdout:match('Submitted batch job (%d+)')
    assert.is_truthy(job, r.stdout)
    -- each array task said which shard it ran, from Slurm's own variables
    for k = 0, 3 do
      assert.matches(string.format('cseng: shard %d/4 %%(Slurm job array: SLURM_ARRAY_TASK_ID=%d', k, k), outs[k + 1], 1)
    end
    local logs = {}
    for _, name in ipairs(assert(fs.list(out))) do if name:match('%.jsonl$') then logs[#logs + 1] = name end end
    assert.are.equal(4, #logs, table.concat(logs, ' '))
    for _, name in ipairs(logs) do assert.matches('%-job' .. job .. '%-', name) end -- the run id names the job

    r = assert(proc.run { argv = { CSENG, 'merge', out, '-o', tmp .. '/merged/run.jsonl' }, cwd = ROOT, timeout = 120 })
    assert.are.equal(0, r.code, r.stderr)
    local events = results.read(tmp .. '/merged/run.jsonl')
    local s = results.summary(events)
    local tasks = dataset.load(ROOT .. '/data/smoke.jsonl')
    assert.are.equal(#tasks, s.task_count)
    assert.are.equal(#tasks, s.passed)
    local want, got = {}, {}
    for _, t in ipairs(tasks) do want[#want + 1] = t.id end
    for _, t in ipairs(results.trials(events)) do got[#got + 1] = t.task_id end
    table.sort(want); table.sort(got)
    assert.are.same(want, got)
    assert.are.equal(0, #results.live_allocations(events))
    local hosts = {}
    for _, e in ipairs(events) do
      if e.event == 'run_started' then hosts = e.merged_from.shards end
    end
    assert.are.equal(4, #hosts)

    r = assert(proc.run { argv = { CSENG, 'report', tmp .. '/merged/run.jsonl', '--template', 'lua/reports/per_task.lua',
      '-o', tmp .. '/merged/report.md' }, cwd = ROOT, timeout = 120 })
    assert.are.equal(0, r.code, r.stderr)
    assert.matches(string.format('| local/cold | %d | %d | 0 | 0 | 100%% |', #tasks, #tasks),
      assert(fs.read(tmp .. '/merged/report.md')), 1, true)
  end)
end)
