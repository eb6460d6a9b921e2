--- Harbor's job-folder models (src/harbor/models/job/{config,result,lock}.py, trial/{config,result}.py,
--- task/id.py, agent/context.py, verifier/result.py, metric/config.py), declared field by field in
--- cseng.lib.schema's terms (pydantic v2's lax rules). spec/results/harbor_models_spec.lua holds each to
--- the table tools/harbor_models.py reads from Harbor's sources; spec/results/harbor_spec.lua checks
--- every file `cseng export --format harbor` writes against them (what Harbor's
--- `Model.model_validate_json` loads).
local S = require('cseng.lib.schema')

local M = {}

local function opt(name, T) return { name, S.optional(T), default = S.NONE } end
local function def(name, T, v) return { name, T, default = v == nil and true or v } end

local ANY = S.dict(S.any)
local STRS = S.dict(S.str)

M.EnvironmentType = S.enum('EnvironmentType', 'docker', 'daytona', 'e2b', 'modal', 'runloop', 'langsmith', 'gke', 'novita',
  'apple-container', 'singularity', 'islo', 'tensorlake', 'cwsandbox', 'wandb', 'use-computer', 'blaxel')
local ResourceMode = S.enum('ResourceMode', 'auto', 'limit', 'request', 'guarantee', 'ignore')
local MetricType = S.enum('MetricType', 'sum', 'min', 'max', 'mean', 'uv-script')
local MCPTransport = S.enum('MCPTransport', 'stdio', 'sse', 'streamable-http')

-- Harbor's allowed_hosts rule (task/config.py: _validate_allowed_host_names)
local function hosts_ok(list, add, loc)
  for i, h in ipairs(list or {}) do
    local x = tostring(h):lower():gsub('^%s+', ''):gsub('%s+$', ''):gsub('%.$', '')
    local rest = x:match('^%*%.(.+)$') or x
    local ok = x ~= '' and not x:find('[:/]') and not rest:find('*', 1, true)
    for label in (rest .. '.'):gmatch('([^.]*)%.') do
      if not (label:match('^[a-z0-9]$') or label:match('^[a-z0-9][a-z0-9-]*[a-z0-9]$')) then ok = false end
    end
    if not ok then add(loc .. '.' .. (i - 1), 'Value error, allowed_hosts entries must be valid hostnames') end
  end
end

M.MetricConfig = S.model('MetricConfig', { def('type', MetricType, 'mean'), def('kwargs', ANY, {}) })

M.TpuSpec = S.model('TpuSpec', { { 'type', S.string { min_length = 1 } }, { 'topology', S.str } })

M.MCPServerConfig = S.model('MCPServerConfig', {
  { 'name', S.str }, def('transport', MCPTransport, 'sse'), opt('url', S.str), opt('command', S.str), def('args', S.list(S.str), {}),
})

M.ArtifactConfig = S.model('ArtifactConfig', {
  { 'source', S.str }, opt('destination', S.str), def('exclude', S.list(S.str), {}), opt('service', S.str),
})

M.AgentConfig = S.model('AgentConfig', {
  opt('name', S.str), opt('import_path', S.str), opt('model_name', S.str), def('skills', S.list(S.path), {}),
  opt('override_timeout_sec', S.float()), opt('override_setup_timeout_sec', S.float()), opt('max_timeout_sec', S.float()),
  def('extra_allowed_hosts', S.list(S.str), {}), def('include_logs', S.list(S.str), {}), def('exclude_logs', S.list(S.str), {}),
  def('kwargs', ANY, {}), def('env', STRS, {}), def('mcp_servers', S.list(M.MCPServerConfig), {}),
}, { validators = { function(v, add, loc) hosts_ok(v.extra_allowed_hosts, add, (loc == '' and '' or loc .. '.') .. 'extra_allowed_hosts') end } })

M.EnvironmentConfig = S.model('EnvironmentConfig', {
  opt('type', M.EnvironmentType), opt('import_path', S.str), def('force_build', S.bool, false), def('delete', S.bool, true),
  def('cpu_enforcement_policy', ResourceMode, 'auto'), def('memory_enforcement_policy', ResourceMode, 'auto'),
  opt('override_cpus', S.int()), opt('override_memory_mb', S.int()), opt('override_storage_mb', S.int()),
  opt('override_gpus', S.int()), opt('override_tpu', M.TpuSpec), def('suppress_override_warnings', S.bool, false),
  opt('mounts', S.list(S.dict(S.any))), def('extra_docker_compose', S.list(S.path), {}), def('env', STRS, {}),
  def('kwargs', ANY, {}), def('extra_allowed_hosts', S.list(S.str), {}),
})
-- (mounts: ServiceVolumeConfig is a TypedDict, not a model: a dictionary here)

M.VerifierConfig = S.model('VerifierConfig', {
  opt('override_timeout_sec', S.float()), opt('max_timeout_sec', S.float()), def('include_logs', S.list(S.str), {}),
  def('exclude_logs', S.list(S.str), {}), def('env', STRS, {}), opt('import_path', S.str), def('kwargs', ANY, {}),
  def('disable', S.bool, false),
})

M.TaskConfig = S.model('TaskConfig', {
  opt('path', S.path), opt('git_url', S.str), opt('git_commit_id', S.str), opt('name', S.str), opt('ref', S.str),
  def('overwrite', S.bool, false), opt('download_dir', S.path), opt('source', S.str),
}, { validators = { function(v, add, loc)
  if v.path == nil and v.name == nil then add(loc, "Value error, Either 'path' or 'name' must be set.") end
  if v.path ~= nil and v.name ~= nil then add(loc, "Value error, Cannot set both 'path' and 'name'.") end
  if v.ref ~= nil and v.name == nil then add(loc, "Value error, 'ref' requires 'name' to be set.") end
  if v.git_commit_id ~= nil and v.git_url == nil then add(loc, "Value error, 'git_commit_id' requires 'git_url' to be set.") end
end } })

M.TrialConfig = S.model('TrialConfig', {
  { 'task', M.TaskConfig }, def('trial_name', S.str, ''), def('trials_dir', S.path, 'trials'),
  def('timeout_multiplier', S.float(), 1.0), opt('agent_timeout_multiplier', S.float()), opt('verifier_timeout_multiplier', S.float()),
  opt('agent_setup_timeout_multiplier', S.float()), opt('environment_build_timeout_multiplier', S.float()),
  def('agent', M.AgentConfig, {}), def('environment', M.EnvironmentConfig, {}), def('verifier', M.VerifierConfig, {}),
  def('artifacts', S.list(S.union(S.str, M.ArtifactConfig)), {}), def('extra_instruction_paths', S.list(S.path), {}),
  opt('job_id', S.uuid),
})

M.RetryConfig = S.model('RetryConfig', {
  def('max_retries', S.int { ge = 0 }, 0), opt('include_exceptions', S.list(S.str)), opt('exclude_exceptions', S.list(S.str)),
  def('wait_multiplier', S.float(), 1.0), def('min_wait_sec', S.float(), 1.0), def('max_wait_sec', S.float(), 60.0),
})

M.DatasetConfig = S.model('DatasetConfig', {
  opt('path', S.path), opt('name', S.str), opt('version', S.str), opt('ref', S.str), opt('registry_url', S.str),
  opt('registry_path', S.path), opt('repo', S.str), def('overwrite', S.bool, false), opt('download_dir', S.path),
  opt('task_names', S.list(S.str)), opt('exclude_task_names', S.list(S.str)), opt('n_tasks', S.int()),
}, { validators = { function(v, add, loc)
  if v.version ~= nil and v.ref ~= nil then add(loc, "Value error, Cannot set both 'version' and 'ref'.") end
  if v.repo == nil then
    if v.path == nil and v.name == nil then add(loc, "Value error, Either 'path' or 'name' must be set.") end
    if v.path ~= nil and v.name ~= nil then add(loc, "Value error, Cannot set both 'path' and 'name'.") end
  end
end } })

M.PluginConfig = S.model('PluginConfig', { { 'import_path', S.str }, def('kwargs', ANY, {}) })

M.JobConfig = S.model('JobConfig', {
  def('job_name', S.str, 'now'), def('jobs_dir', S.path, 'jobs'), def('n_attempts', S.int(), 1), def('timeout_multiplier', S.float(), 1.0),
  opt('agent_timeout_multiplier', S.float()), opt('verifier_timeout_multiplier', S.float()),
  opt('agent_setup_timeout_multiplier', S.float()), opt('environment_build_timeout_multiplier', S.float()),
  def('debug', S.bool, false), def('n_concurrent_trials', S.int(), 4), def('quiet', S.bool, false),
  def('retry', M.RetryConfig, {}), def('environment', M.EnvironmentConfig, {}), def('verifier', M.VerifierConfig, {}),
  def('metrics', S.list(M.MetricConfig), {}), def('agents', S.list(M.AgentConfig), {}), def('datasets', S.list(M.DatasetConfig), {}),
  def('tasks', S.list(M.TaskConfig), {}), def('artifacts', S.list(S.union(S.str, M.ArtifactConfig)), {}),
  def('extra_instruction_paths', S.list(S.path), {}), def('plugins', S.list(M.PluginConfig), {}),
})

M.TimingInfo = S.model('TimingInfo', { opt('started_at', S.datetime), opt('finished_at', S.datetime) })
M.ExceptionInfo = S.model('ExceptionInfo', {
  { 'exception_type', S.str }, { 'exception_message', S.str }, { 'exception_traceback', S.str }, { 'occurred_at', S.datetime },
})
M.ModelInfo = S.model('ModelInfo', { { 'name', S.str }, opt('provider', S.str) })
M.AgentInfo = S.model('AgentInfo', { { 'name', S.str }, { 'version', S.str }, opt('model_info', M.ModelInfo) })
M.AgentContext = S.model('AgentContext', {
  opt('n_input_tokens', S.int()), opt('n_cache_tokens', S.int()), opt('n_output_tokens', S.int()), opt('cost_usd', S.float()),
  opt('rollout_details', S.list(ANY)), opt('metadata', ANY),
})
M.VerifierResult = S.model('VerifierResult', { opt('rewards', S.dict(S.union(S.float(), S.int()))), opt('statistics', ANY) })
M.StepResult = S.model('StepResult', {
  { 'step_name', S.str }, opt('agent_result', M.AgentContext), opt('verifier_result', M.VerifierResult),
  opt('exception_info', M.ExceptionInfo), opt('agent_execution', M.TimingInfo), opt('verifier', M.TimingInfo),
})
M.GitTaskId = S.model('GitTaskId', { { 'git_url', S.str }, opt('git_commit_id', S.str), { 'path', S.path } })
M.LocalTaskId = S.model('LocalTaskId', { { 'path', S.path } })
M.PackageTaskId = S.model('PackageTaskId', { { 'org', S.str }, { 'name', S.str }, opt('ref', S.str) })

M.TrialResult = S.model('TrialResult', {
  def('id', S.uuid, 'uuid4'), { 'task_name', S.str }, { 'trial_name', S.str }, { 'trial_uri', S.str },
  { 'task_id', S.union(M.LocalTaskId, M.GitTaskId, M.PackageTaskId) }, opt('source', S.str), { 'task_checksum', S.str },
  { 'config', M.TrialConfig }, { 'agent_info', M.AgentInfo }, opt('agent_result', M.AgentContext),
  opt('verifier_result', M.VerifierResult), opt('exception_info', M.ExceptionInfo), opt('started_at', S.datetime),
  opt('finished_at', S.datetime), opt('environment_setup', M.TimingInfo), opt('agent_setup', M.TimingInfo),
  opt('agent_execution', M.TimingInfo), opt('verifier', M.TimingInfo), opt('step_results', S.list(M.StepResult)),
})

-- dict keys pydantic parses from JSON's strings: an int (pass_at_k), a number (reward_stats)
local function keyed(kind, V)
  local T = S.dict(V)
  local inner = T.check
  T.name = 'dict[' .. kind .. ', ' .. V.name .. ']'
  T.check = function(v, loc, add)
    if not inner(v, loc, add) then return false end
    for k in pairs(v) do
      local n = tonumber(k)
      if not n or (kind == 'int' and math.type(n) ~= 'integer' and n ~= math.floor(n)) then
        add(loc .. '.' .. tostring(k), 'Input should be a valid ' .. (kind == 'int' and 'integer' or 'number'))
        return false
      end
    end
    return true
  end
  return T
end

M.AgentDatasetStats = S.model('AgentDatasetStats', {
  def('n_trials', S.int(), 0), def('n_errors', S.int(), 0), def('metrics', S.list(ANY), {}),
  def('pass_at_k', keyed('int', S.float()), {}), def('reward_stats', S.dict(keyed('float | int', S.list(S.str))), {}),
  def('exception_stats', S.dict(S.list(S.str)), {}),
})
M.JobStats = S.model('JobStats', {
  def('n_completed_trials', S.int(), 0), def('n_errored_trials', S.int(), 0), def('n_running_trials', S.int(), 0),
  def('n_pending_trials', S.int(), 0), def('n_cancelled_trials', S.int(), 0), def('n_retries', S.int(), 0),
  def('evals', S.dict(M.AgentDatasetStats), {}), opt('n_input_tokens', S.int()), opt('n_cache_tokens', S.int()),
  opt('n_output_tokens', S.int()), opt('cost_usd', S.float()),
})
M.JobResult = S.model('JobResult', {
  { 'id', S.uuid }, { 'started_at', S.datetime }, opt('updated_at', S.datetime), opt('finished_at', S.datetime),
  { 'n_total_trials', S.int() }, { 'stats', M.JobStats }, def('trial_results', S.list(M.TrialResult), {}),
})

local function digest_ok(field)
  return function(v, add, loc)
    local d = v[field]
    if type(d) == 'string' and not (d:match('^sha256:[0-9a-f]+$') and #d == 71) then
      add(loc .. '.' .. field, "Value error, Digest must be in 'sha256:<64 hex chars>' format. Got: " .. d)
    end
  end
end

M.HarborLockInfo = S.model('HarborLockInfo', { opt('version', S.str), opt('git_commit_hash', S.str), opt('is_editable', S.bool) })
M.TaskLock = S.model('TaskLock', {
  { 'name', S.str }, { 'type', S.literal('local', 'git', 'package') }, { 'digest', S.str }, opt('source', S.str),
  opt('path', S.path), opt('git_url', S.str), opt('git_commit_id', S.str),
}, { validators = { digest_ok('digest') } })
M.ExtraInstructionLock = S.model('ExtraInstructionLock', { { 'path', S.path }, { 'digest', S.str } }, { validators = { digest_ok('digest') } })
M.AgentSkillLock = S.model('AgentSkillLock', { { 'name', S.str }, { 'source', S.path }, { 'digest', S.str } },
  { validators = { digest_ok('digest') } })
M.ExtraDockerComposeLock = S.model('ExtraDockerComposeLock', { { 'path', S.path }, { 'digest', S.str } },
  { validators = { digest_ok('digest') } })
M.TrialLock = S.model('TrialLock', {
  { 'task', M.TaskLock }, def('timeout_multiplier', S.float(), 1.0), opt('agent_timeout_multiplier', S.float()),
  opt('verifier_timeout_multiplier', S.float()), opt('agent_setup_timeout_multiplier', S.float()),
  opt('environment_build_timeout_multiplier', S.float()), opt('extra_instructions', S.list(M.ExtraInstructionLock)),
  { 'agent', M.AgentConfig }, def('skills', S.list(M.AgentSkillLock), {}), { 'environment', M.EnvironmentConfig },
  opt('extra_docker_compose', S.list(M.ExtraDockerComposeLock)), { 'verifier', M.VerifierConfig },
})
M.JobLock = S.model('JobLock', {
  def('schema_version', S.int(), 1), def('created_at', S.datetime, 'now'), def('harbor', M.HarborLockInfo, {}),
  opt('invocation', S.list(S.str)), { 'n_concurrent_trials', S.int() }, { 'retry', M.RetryConfig },
  def('trials', S.list(M.TrialLock), {}),
})

--- The fixture's names of the models declared here (spec/results/harbor_models_spec.lua), with the
--- annotations Harbor spells otherwise than these types name themselves (a TypedDict, a set).
M.FIXTURE = {
  JobConfig = 'job.config.JobConfig', RetryConfig = 'job.config.RetryConfig', DatasetConfig = 'job.config.DatasetConfig',
  PluginConfig = 'job.config.PluginConfig', AgentConfig = 'trial.config.AgentConfig',
  EnvironmentConfig = 'trial.config.EnvironmentConfig', VerifierConfig = 'trial.config.VerifierConfig',
  TaskConfig = 'trial.config.TaskConfig', TrialConfig = 'trial.config.TrialConfig', ArtifactConfig = 'task.config.ArtifactConfig',
  MCPServerConfig = 'task.config.MCPServerConfig', TpuSpec = 'task.config.TpuSpec', MetricConfig = 'metric.config.MetricConfig',
  JobResult = 'job.result.JobResult', JobStats = 'job.result.JobStats', AgentDatasetStats = 'job.result.AgentDatasetStats',
  TrialResult = 'trial.result.TrialResult', TimingInfo = 'trial.result.TimingInfo', ExceptionInfo = 'trial.result.ExceptionInfo',
  ModelInfo = 'trial.result.ModelInfo', AgentInfo = 'trial.result.AgentInfo', StepResult = 'trial.result.StepResult',
  AgentContext = 'agent.context.AgentContext', VerifierResult = 'verifier.result.VerifierResult',
  GitTaskId = 'task.id.GitTaskId', LocalTaskId = 'task.id.LocalTaskId', PackageTaskId = 'task.id.PackageTaskId',
  JobLock = 'job.lock.JobLock', TrialLock = 'job.lock.TrialLock', TaskLock = 'job.lock.TaskLock',
  HarborLockInfo = 'job.lock.HarborLockInfo', AgentSkillLock = 'job.lock.AgentSkillLock',
  ExtraInstructionLock = 'job.lock.ExtraInstructionLock', ExtraDockerComposeLock = 'job.lock.ExtraDockerComposeLock',
}
M.SPELLED = {
  ['list[dict[str, Any]] | None'] = { 'list[ServiceVolumeConfig] | None', 'list[RolloutDetail] | None' },
  ['list[str] | None'] = { 'set[str] | None' },
  ['dict[str, float | int] | None'] = { 'dict[str, float | int] | None' },
}

return M
