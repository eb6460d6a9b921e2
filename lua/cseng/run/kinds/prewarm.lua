--- The prewarm kind (`cseng prewarm --provider NAME`): the warm artifact of each selected task
--- (lua/cseng/run/environment.lua's prepare_artifact: build if the provider builds, create,
--- stage, prepare, snapshot, destroy), recorded as `prewarmed` events, and a prewarm file
--- (results/prewarm-<provider>-<stamp>.json) that `cseng run ... --prewarm-file FILE` reads.
local fs = require('cseng.fs')
local dataset = require('cseng.workload.dataset')
local recipe = require('cseng.workload.recipe')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local session = require('cseng.run.session')
local frame = require('cseng.run.frame')
local environment = require('cseng.run.environment')
local tasks = require('cseng.run.kinds.tasks')

local K = { name = 'prewarm' }

function K.open(opts)
  local o = util.copy(opts)
  o.mode = 'warm'
  local provider = session.adapter(o.provider)
  if not provider.snapshot then errors.raise(errors.ENOTSUP, string.format("provider '%s' has no warm mode (no snapshot)", provider.name)) end
  local all = dataset.load(o.dataset)
  local selected = dataset.select(all, o.task_index, o.task_limit, o.tasks)
  -- the summary is results/prewarm-<provider>-<stamp>.json (or --output FILE.json), the log beside it
  return o, { id_parts = { 'prewarm', provider.name }, stem = function(stamp) return 'prewarm-' .. provider.name .. '-' .. stamp end },
    { provider = provider, selected = selected, artifacts = {}, failed = {} }
end

function K.begin(F)
  local k, o, s = F.k, F.opts, F.session
  local pv = F:connect(o.provider, o.provider_config)
  k.run = tasks.run_of(s, pv, nil, F)
  F:started({ kind = 'prewarm', provider = k.provider.name, dataset = o.dataset, task_count = #k.selected,
    provider_config = o.provider_config },
    frame.identity(o, { kind = 'prewarm', provider = k.provider.name, providers = { k.provider.name },
      selection = { task_index = o.task_index, task_limit = o.task_limit, tasks = o.tasks, count = #k.selected } }))
  F:emit('plan', { run_id = s.id, total = #k.selected, provider = k.provider.name, concurrency = o.concurrency or 1, log = s.jsonl })
  return k.selected
end

-- The prepared artifact is the trial's result; an artifact that could not be made is its error.
function K.record() return {} end

function K.trial(F, t, rec)
  local run = F.k.run
  rec.artifact = environment.prepare_artifact(run, t, recipe.for_run(run, t).key:sub(1, 24))
end

function K.finished(F, t, rec)
  local k = F.k
  if rec.artifact then
    k.artifacts[t.id] = rec.artifact
    F:emit('artifact', { task_id = t.id, artifact = rec.artifact, many = #k.selected > 1 })
  elseif not rec.interrupted then
    F:observe(k.run.p, { error_code = rec.error_code, error = rec.error, error_stage = 'start' }, {})
    k.failed[t.id] = rec.error
    F:emit('artifact_failed', { task_id = t.id, error = rec.error })
  end
end

--- The end: run_finished, the prewarm file, and what the command prints. Returns the exit status
--- (1 when an artifact could not be made) and {json (the prewarm file), artifacts, artifact_env}.
function K.finish(F)
  local k, s = F.k, F.session
  local nerr = 0
  for _ in pairs(k.failed) do nerr = nerr + 1 end
  F:close({ errors = nerr, prepared = #k.selected - nerr })
  local doc = {
    kind = 'cseng-prewarm', provider = k.provider.name, run_id = s.id, created_at = os.date('!%Y-%m-%dT%H:%M:%SZ'),
    dataset = F.opts.dataset, artifact_env = k.provider.artifact_env, artifacts = k.artifacts,
    errors = next(k.failed) and k.failed or nil,
  }
  errors.check(nil, fs.mkdir_p(util.dirname(s.json)))
  errors.check(nil, fs.write(s.json, util.json_sorted(doc) .. '\n'))
  local status = frame.exit_status(F, #k.selected, nerr)
  if nerr > 0 and status == 0 then status = 1 end -- an artifact that could not be made is missing
  return status, { json = s.json, artifacts = k.artifacts, selected = k.selected,
    artifact_env = k.provider.artifact_env or (k.provider.name:upper() .. '_ARTIFACT'), provider = k.provider.name }
end

function K.close(F)
  if F.k.run then require('cseng.evals.hooks').finish(F.k.run) end
end

return K
