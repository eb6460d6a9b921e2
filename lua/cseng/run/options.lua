--- The options of `cseng run` (and the commands that take a subset of them: prewarm,
--- cleanup): the flag table, its help order, and the merge of flags into a plan.
local fs = require('cseng.fs')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local flags = require('cseng.lib.flags')

local options = {}

-- run's flags in the order of `cseng run --help` (lib/flags.declare's entries)
local FLAGS = {
  { 'provider', 'string', arg = 'NAME', help = 'provider adapter (lua/providers/NAME.lua); default local' },
  { 'providers', 'list', arg = 'A,B', help = 'providers (startup and matrix plans)' },
  { 'dataset', 'string', arg = 'PATH|NAME@VERSION',
    help = '.jsonl, .parquet, a TB2 task directory or a folder of them; with --registry a dataset by name (org/name@ref too)' },
  { 'registry', 'string', arg = 'R',
    help = "a Harbor registry: registry.json (a file, a folder, an http(s) URL) or a git repository (git+URL[@REF], *.git, file://)" },
  { 'primary-metric', 'string', arg = 'KEY',
    help = "the reward.json key that decides pass/fail (default: the task's [metadata] primary_metric, else 'reward')" },
  { 'task-index', 'string', arg = 'N|all', help = '0-based task index, or all (default)' },
  { 'tasks', 'list', arg = 'NAME,...', help = "only these tasks: ids or shell-style globs ('git-*'), comma-separated, repeatable" },
  { 'task-limit', 'int', min = 1, arg = 'N', help = 'at most N tasks' },
  { 'stop-after-passes', 'int', min = 1, arg = 'N', help = 'start no new trial once N passed' },
  { 'timeout-seconds', 'number', arg = 'S', help = 'whole-trial timeout' },
  { 'solve-timeout-seconds', 'number', arg = 'S', help = "solve timeout (default: task.toml's agent timeout)" },
  { 'verify-timeout-seconds', 'number', arg = 'S', help = "verifier timeout (default: task.toml's)" },
  { 'concurrency', 'int', min = 1, arg = 'N', help = 'trials in flight at once' },
  { 'mode', 'string', choices = { 'cold', 'warm', 'lockstep', 'sequential', 'staggered', 'burst' },
    arg = 'MODE', help = 'tasks: cold|warm (fresh sandbox, or from a prewarmed artifact); startup: ' ..
    'lockstep (default)|sequential|staggered|burst' },
  { 'modes', 'list', arg = 'cold,warm', help = 'modes (matrix plans)' },
  { 'solver', 'string', arg = 'NAME',
    help = function() return table.concat(flags.modules('solvers', 'solve'), ', ') .. ' (lua/solvers/; default gold)' end },
  { 'solve-command-file', 'string', arg = 'FILE', help = 'the command solver\'s script' },
  { 'solver-env', 'string', arg = 'A,B', help = 'host variables passed to the command solver' },
  { 'model', 'string', arg = 'ID',
    help = "the LLM and installed-agent solvers' model (else the solver's variable: OPENROUTER_MODEL, CODEX_MODEL, ...)" },
  { 'max-turns', 'int', min = 1, arg = 'N', help = 'LLM agent: completions per trial (default 50)' },
  { 'output', 'string', arg = 'PATH', help = 'results directory, or the summary .json path' },
  { 'resume', 'string', arg = 'RUN.jsonl', help = 'continue a run: skip the trials it recorded' },
  { 'env-file', 'multi', arg = 'FILE',
    help = 'KEY=VALUE file of credentials (never written to results); repeatable, a later file wins' },
  { 'image-map', 'multi', arg = 'PAT=IMAGE', help = 'substitute base images (glob * allowed); repeatable' },
  { 'allow-network', 'bool', help = "give each phase the network its task.toml declares (network_mode, allow_internet; Harbor's default public); else none" },
  { 'build-network', 'string', choices = { 'on', 'off' }, arg = 'on|off',
    help = "the network of the task's build steps (RUN): on (default, as docker build) or off" },
  { 'verifier-user', 'string', choices = { 'root', 'verifier' }, arg = 'root|verifier',
    help = 'who runs tests/test.sh (default: non-root where possible)' },
  { 'warm-artifact', 'string', arg = 'ID', help = 'warm artifact for every task (else prepared per task)' },
  { 'prewarm-file', 'string', arg = 'FILE', help = 'warm artifacts per task, from cseng prewarm (results/prewarm-*.json)' },
  { 'skip-bad-rows', 'bool', help = 'record bad dataset rows and go on' },
  { 'source-root', 'string', arg = 'DIR',
    help = "SWE-smith rows' environment.source_dir resolve inside DIR (default: the dataset's folder or its parent)" },
  { 'samples', 'int', min = 1, arg = 'N', help = 'measured samples per provider (startup)' },
  { 'warmups', 'int', min = 0, arg = 'N', help = 'unmeasured warmup samples per provider (startup)' },
  { 'seed', 'int', arg = 'N', help = 'random seed (recorded)' },
  { 'command', 'string', arg = 'CMD', help = 'the readiness command (startup)' },
  { 'expect', 'string', arg = 'TEXT', help = 'the readiness marker in its output (startup)' },
  { 'status-port', 'int', min = 0, arg = 'PORT', help = 'serve the run state as JSON on 127.0.0.1:PORT' },
  { 'report', 'string', arg = 'PATH', help = 'write the markdown report here (startup)' },
  { 'quiet', 'bool', help = 'no progress output' },
  { 'shard', 'string', arg = 'K/N',
    help = 'run shard K of N (0-based; else from SLURM_ARRAY_TASK_ID / JOB_COMPLETION_INDEX; docs/SCALE-OUT.md)' },
  { 'job-id', 'string', arg = 'ID', help = 'the job id every shard shares (else CSENG_JOB_ID, SLURM_ARRAY_JOB_ID)' },
  { 'host-root', 'bool', help = "local: run on the host's /usr instead of the Debian base root filesystem (RUN steps become fidelity gaps)" },
  { 'repeat', 'int', key = 'repeats', min = 1, arg = 'N', help = 'startup: run the arena as N blocks (block-level CIs)' },
  { 'burst', 'int', min = 1, arg = 'N', help = 'startup --mode burst: N creates in flight at once per provider' },
  { 'stagger-ms', 'number', arg = 'M', help = 'startup --mode staggered: one create every M ms (default 200)' },
  { 'cold-connections', 'bool', help = 'startup --mode burst: no warmed connections; the creates open theirs, the handshake recorded apart' },
  { 'h2-streams', 'int', min = 1, arg = 'N',
    help = 'startup: calls one HTTP/2 connection carries at once (default 100); 1: a connection per call in flight, '
      .. 'so no answer shares a read, and its receive stamp, with another (docs/ARENA.md)' },
  { 'workload', 'string', arg = 'NAME',
    choices = { 'startup', 'exec', 'upload', 'download', 'files', 'snapshot', 'pause', 'fork', 'egress', 'standard' },
    help = 'startup: what each sample measures after its first command (docs/ARENA.md, "Primitives"; default startup)' },
  { 'sizes', 'list', arg = '1MiB,64MiB', help = 'startup --workload upload|download|snapshot: the sizes (default 1MiB,64MiB,512MiB)' },
  { 'egress-url', 'string', arg = 'URL',
    help = 'startup --workload egress: the http(s) URL the sandbox fetches (default: the first http(s) apt source\'s '
      .. 'dists/<suite>/Release)' },
  { 'cpus', 'number', arg = 'N', help = 'startup: ask every provider for N vCPUs (the audit checks what was granted)' },
  { 'memory-mb', 'int', min = 1, arg = 'M', help = 'startup: ask every provider for M MiB of memory (the audit checks it)' },
  { 'no-audit', 'bool', help = 'startup: no fidelity audit command after each sample (docs/ARENA.md)' },
  { 'computesdk', 'bool', help = 'startup: print the computesdk-compatible summary too' },
  { 'label', 'string', arg = 'TEXT', help = 'a label recorded in run_started; reports key columns by it' },
  { 'pricing', 'string', arg = 'FILE',
    help = "computesdk's pricing.json: each provider whose adapter it prices takes that rate where the plan names no rates "
      .. '(the source recorded in run_started and the reports; docs/ARENA.md)' },
  { 'retry-errors', 'int', min = 0, arg = 'N', help = "tasks: rerun a trial whose outcome is 'error' up to N times" },
  { 'rerun-errors', 'bool', help = "with --resume: rerun the tasks whose last outcome was 'error'" },
  { 'fresh-artifacts', 'bool', help = 'warm mode: prepare every warm artifact anew (no reuse)' },
  -- agent evals (lua/cseng/evals/): repeated attempts for pass@k, and the run's spend ceiling
  { 'attempts', 'int', min = 1, arg = 'K',
    help = 'tasks: run each task K times (fresh sandbox each, interleaved); pass@1..K in the summary' },
  { 'max-cost-usd', 'number', arg = 'X',
    help = 'tasks: dispatch no new trial or agent turn once committed + in-flight spend would pass X USD' },
  { 'model-key', 'string', choices = { 'auto', 'proxy', 'sandbox' }, arg = 'auto|proxy|sandbox',
    help = 'installed agents (codex, claude_code, opencode, gemini_cli): the model key stays on the host behind a proxy '
      .. '(auto: where the provider reaches it, '
      .. 'else the key goes in with a warning; proxy: always, else refuse; sandbox: the key in the sandbox)' },
  { 'fail-on-error', 'bool', help = 'exit 1 when any trial errored (CI); else only when the run stopped early or every trial errored' },
  { 'stop-after-create-failures', 'int', min = 0, arg = 'N',
    help = 'stop the run when N creates in a row fail with the same code (a dead endpoint; default 5, 0 never)' },
  { 'default-limits', 'string', arg = 'K=V,...',
    help = 'local: limits of sandboxes and builds whose task names none (cpus=1,memory_mb=2048,storage_mb=10240,pids=4096)' },
}
local SPEC = flags.declare(FLAGS)
options.FLAGS = FLAGS -- what cseng run declares (lua/cseng/cli/commands/run.lua)
options.SPEC = SPEC   -- flag name -> {key, type, arg, help, ...}: what watch passes on, cleanup and prewarm share

--- The variables of one or more --env-file files, merged in order (a later file wins); their
--- credentials are registered with the redactor.
---@param files string|string[]
---@return table<string, string>
function options.read_env_files(files)
  local env = {}
  for _, file in ipairs(type(files) == 'table' and files or { files }) do
    local text, err = fs.read(file)
    if not text then error('--env-file: ' .. tostring(err), 0) end
    local one, perr = util.parse_env_file(text, file)
    if not one then error(perr, 0) end
    for k, v in pairs(one) do
      env[k] = v
      if secrets.is_name(k) then secrets.add(v) end
    end
  end
  return env
end

--- Merge flags into the plan, load --env-file, normalize fields.
function options.merge(p, f, argv)
  local o = util.copy(p)
  for k, v in pairs(f) do o[k] = v end
  if f.image_map then -- flags first, then the plan's own map
    local m = util.copy(f.image_map)
    for _, v in ipairs(p.image_map or {}) do m[#m + 1] = v end
    o.image_map = m
  end
  o.argv = argv
  o.flags_given = util.copy(f) -- what this invocation said itself (--resume checks it against the run)
  o.plan_solver = p.solver
  if o.host_root then o.provider_config = util.merge(o.provider_config, { host_root = true }) end
  if type(o.env_file) == 'string' then o.env_file = { o.env_file } end -- a plan's or another command's one file
  if o.env_file then o.env = options.read_env_files(o.env_file) end
  if o.prewarm_file then
    local text, err = fs.read(o.prewarm_file)
    if not text then error('--prewarm-file: ' .. tostring(err), 0) end
    local ok, doc = pcall(require('cjson').decode, text)
    if not ok or type(doc) ~= 'table' or type(doc.artifacts) ~= 'table' then
      error('--prewarm-file: ' .. o.prewarm_file .. ' is not a cseng prewarm file (no "artifacts")', 0)
    end
    if doc.provider and o.provider and doc.provider ~= o.provider then
      error(string.format('--prewarm-file: %s holds %s artifacts, not %s', o.prewarm_file, doc.provider, o.provider), 0)
    end
    o.warm_artifacts = util.copy(doc.artifacts)
    o.warm_artifacts_created_at = doc.created_at
  end
  if o.warm_artifact then o.warm_artifacts = util.merge(o.warm_artifacts, { ['*'] = o.warm_artifact }) end
  do -- a malformed shard, or a sharded run whose shards could not agree on a run id, is refused here
    local shard = require('cseng.run.shard')
    local getenv = require('cseng.run.session').getenv(o.env)
    if not o.resume and shard.detect(o, getenv) and not shard.job_id(o, getenv) then
      error('a sharded run needs a job id that every shard shares: --job-id ID or CSENG_JOB_ID ' ..
        '(Slurm job arrays provide SLURM_ARRAY_JOB_ID)', 0)
    end
  end
  local arena_modes = { lockstep = true, sequential = true, staggered = true, burst = true }
  if o.mode ~= nil and (p.kind == 'startup') ~= (arena_modes[o.mode] == true) then
    error(string.format('--mode %s: %s', o.mode, p.kind == 'startup' and
      'a startup plan runs lockstep (default), sequential, staggered or burst' or 'a tasks plan runs cold or warm'), 0)
  end
  if o.task_index ~= nil and o.task_index ~= 'all' and not math.tointeger(tonumber(o.task_index)) then
    error("--task-index: expected a number or 'all', got " .. tostring(o.task_index), 0)
  end
  if o.default_limits ~= nil then -- a flag's "cpus=2,..." or a plan's table
    local lim, lerr = require('providers.shared.local_limits').parse(o.default_limits,
      f.default_limits and '--default-limits' or ((o.plan_file or 'the plan') .. ': default_limits'))
    if not lim then error(lerr, 0) end
    o.default_limits = nil
    require('cseng.run.plan').check(o, SPEC)
    o.default_limits = lim
    return o
  end
  -- every field's type and range, one line naming the file and the field
  require('cseng.run.plan').check(o, SPEC)
  return o
end

return options
