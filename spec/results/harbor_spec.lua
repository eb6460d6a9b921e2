-- `cseng export --format harbor DIR` (lua/cseng/results/harbor.lua): a Harbor job folder that
-- Harbor's own models load. Every file is checked here against the models as declared field by
-- field from Harbor's sources (lua/cseng/results/harbor_models.lua, held to them by
-- spec/results/harbor_models_spec.lua; ATIF: lua/cseng/evals/atif.lua), the trial folders are named as
-- Harbor names them, the agent's trajectory and the verifier's outputs are in place; and the job
-- folder reads back into `cseng compare` and `cseng view` (every reward key a metric there too).
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local S = require('cseng.lib.schema')
local atif = require('cseng.evals.atif')
local HM = require('cseng.results.harbor_models')
local harbor = require('cseng.results.harbor')
local export = require('cseng.cli.commands.export')
local report_load = require('reports.lib.load')
local changes = require('reports.lib.changes')
local index = require('cseng.view.index')
local app = require('cseng.view.app')

local ROOT = sys.root()
local H, job, runs
setup(function()
  H = require('spec.fakes.llm.harness').new('cseng-harbor-export-spec')
  runs = {}
  -- an LLM agent's trial (a trajectory) against the chat-completions fake
  local f = H.start { script = H.llm.replay(H.gold_commands) }
  local _, _, info = H.run({ tasks = H.ids(1) }, H.openrouter_env(f))
  runs[1] = info.jsonl
  -- gold on the 1.3 tasks: several reward keys, artifacts, [[steps]]
  local _, _, info2 = H.run({ solver = 'gold', dataset = ROOT .. '/spec/fixtures/harbor13',
    image_map = { 'debian:bookworm*=cseng/debian:bookworm' } }, {})
  runs[2] = info2.jsonl
  job = H.tmp .. '/jobs/my-job'
  assert.equal(0, export.run({ runs[1], runs[2], '--format', 'harbor', '-o', job }))
end)
teardown(function() H.close() end)

local function load_json(path)
  return assert(jsonl.decode(assert(fs.read(path), path)), path)
end

local function must_load(M, path)
  local ok, p = S.check(M, load_json(path))
  assert.is_true(ok, path .. ': ' .. table.concat(p or {}, '; '))
end

describe('a Harbor job folder', function()
  it('names its folders by absolute paths when -o is relative (trial_uri is a file:// URI)', function()
    local rel = 'build/harbor-rel-' .. sys.pid()
    assert.equal(0, export.run({ runs[2], '--format', 'harbor', '-o', rel }))
    local abs = sys.cwd() .. '/' .. rel
    local cfg = load_json(abs .. '/config.json')
    assert.equal(sys.cwd() .. '/build', cfg.jobs_dir)
    local n = 0
    for _, name in ipairs(fs.list(abs)) do
      if fs.exists(abs .. '/' .. name .. '/result.json') then
        n = n + 1
        assert.equal('file://' .. abs .. '/' .. name, load_json(abs .. '/' .. name .. '/result.json').trial_uri)
      end
    end
    assert.is_true(n > 0)
    fs.remove_tree(abs)
  end)

  it('loads with Harbor\'s models: config.json, result.json, lock.json and every trial\'s', function()
    must_load(HM.JobConfig, job .. '/config.json')
    must_load(HM.JobResult, job .. '/result.json')
    must_load(HM.JobLock, job .. '/lock.json')
    local cfg = load_json(job .. '/config.json')
    assert.equal('my-job', cfg.job_name)
    assert.equal(H.tmp .. '/jobs', cfg.jobs_dir)
    local trials = 0
    for _, name in ipairs(fs.list(job)) do
      if fs.exists(job .. '/' .. name .. '/result.json') then
        trials = trials + 1
        must_load(HM.TrialConfig, job .. '/' .. name .. '/config.json')
        must_load(HM.TrialResult, job .. '/' .. name .. '/result.json')
        local tr = load_json(job .. '/' .. name .. '/result.json')
        -- named as Harbor names trials: the task cut to 32 characters, __, 7 of shortuuid's alphabet
        assert.matches('^' .. tr.task_name:sub(1, 32):gsub('[_%-]+$', ''):gsub('%-', '%%-') .. '__[2-9A-HJ-NP-Za-km-z]+$', name)
        assert.equal(7, #name:match('__(.*)$'))
        assert.equal(name, tr.trial_name)
        assert.equal(name, tr.config.trial_name)
        assert.is_true(fs.exists(job .. '/' .. name .. '/verifier/test-stdout.txt') or tr.step_results ~= nil)
      end
    end
    assert.equal(3, trials)
    local res = load_json(job .. '/result.json')
    assert.equal(3, res.n_total_trials)
    assert.equal(3, res.stats.n_completed_trials)
  end)

  it('holds the agent\'s ATIF trajectory (valid by Harbor\'s models), the rewards and the artifacts', function()
    local found = {}
    for _, name in ipairs(fs.list(job)) do
      local rpath = job .. '/' .. name .. '/result.json'
      if fs.exists(rpath) then
        local tr = load_json(rpath)
        found[tr.task_name] = { dir = job .. '/' .. name, tr = tr }
      end
    end
    local llm = found[H.ids(1)[1]]
    local text = assert(fs.read(llm.dir .. '/agent/trajectory.json'))
    assert.is_true((atif.harbor(jsonl.decode(text))))
    assert.equal('openrouter', llm.tr.agent_info.name) -- a cseng solver Harbor has no name for keeps its own
    assert.is_true(llm.tr.agent_result.n_input_tokens > 0)
    local mk = found['multi-key']
    assert.same({ correct = 1, logged = 1, style = 0.5 }, mk.tr.verifier_result.rewards)
    assert.same({ correct = 1, logged = 1, style = 0.5 }, load_json(mk.dir .. '/verifier/reward.json'))
    assert.equal('oracle', mk.tr.agent_info.name)
    assert.equal('done\n', fs.read(mk.dir .. '/artifacts/workspace/report.txt'))
    assert.equal(3, #load_json(mk.dir .. '/artifacts/manifest.json'))
    local st = found['stepped']
    assert.equal(2, #st.tr.step_results)
    assert.equal('two', st.tr.step_results[2].step_name)
    assert.same({ reward = 1, bonus = 1 }, st.tr.step_results[2].verifier_result.rewards)
    -- the lock pins each task by its digest
    local lock = load_json(job .. '/lock.json')
    for _, t in ipairs(lock.trials) do assert.matches('^sha256:%x+$', t.task.digest) end
  end)

  it('the checks refuse what Harbor would not load, naming the field', function()
    local tr = load_json(select(2, next(fs.list(job) or {})) and (function()
      for _, name in ipairs(fs.list(job)) do if fs.exists(job .. '/' .. name .. '/result.json') then return job .. '/' .. name .. '/result.json' end end
    end)())
    tr.task_checksum = nil
    tr.config.task.ref = 'x' -- 'ref' requires 'name'
    tr.started_at = 'last tuesday'
    local ok, p = S.check(HM.TrialResult, tr)
    assert.is_nil(ok)
    local all = table.concat(p, '\n')
    assert.matches('task_checksum: Field required', all, 1, true)
    assert.matches("config.task: Value error, 'ref' requires 'name' to be set.", all, 1, true)
    assert.matches('started_at: Input should be a valid datetime', all, 1, true)
    local lock = load_json(job .. '/lock.json')
    lock.trials[1].task.digest = 'md5:x'
    ok, p = S.check(HM.JobLock, lock)
    assert.is_nil(ok)
    assert.matches("trials.0.task.digest: Value error, Digest must be in 'sha256:<64 hex chars>' format", table.concat(p, '\n'), 1, true)
  end)

  it('refuses to write over a job folder', function()
    local ok, err = pcall(harbor.export, { runs[1] }, job)
    assert.is_false(ok)
    assert.matches('already holds a job', type(err) == 'table' and err.message or tostring(err))
  end)

  it('reads back in cseng compare and the viewer, each reward key a metric', function()
    local d = report_load.load({ job })
    assert.equal(1, #d.runs)
    assert.equal(3, #d.trials)
    local base = report_load.load({ runs[2] })
    local r = changes.compare(base, d, {})
    assert.matches('## Metrics %(reward keys%)', r.markdown)
    assert.matches('| `style` | 0.500 %(1%) | 0.500 %(1%) | %+0.000 |', r.markdown)
    local cat = index.new({ H.tmp .. '/jobs' }):refresh()
    local list = cat:list()
    assert.equal(1, #list)
    local doc = app.run_doc(cat, list[1], { offline = true })
    local keys = {}
    for _, m in ipairs(doc.metrics) do keys[m.key] = m.mean end
    assert.equal(0.5, keys.style)
    assert.equal(1, keys.correct)
    assert.equal(3, list[1].counts.passed + list[1].counts.failed + list[1].counts.error)
  end)
end)
