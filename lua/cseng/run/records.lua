--- The records a run passes between its modules, declared once: what a field means and who
--- writes it. A record is made by its constructor here and has no other fields; under
--- `cseng test` (CSENG_STRICT_RECORDS=1, which every spec process and the processes it starts
--- inherit) writing a field that is not declared raises, naming the record and the field, so a
--- module that decorates another's table fails its spec at once instead of drifting.
---
---   Run        what a run of tasks works with (the session, its provider connection, the solver,
---              the warm cache, the evals layer's state): the kinds' and staging's view of a run.
---   Trial      one trial of a task (the `trial` event of the run log): docs/RESULTS.md's
---              "The trial record" lists the same fields, and spec/run/records_spec.lua holds the two
---              together.
---   Sample     one sample of the startup arena (the `startup_trial` event): docs/ARENA.md.
---   Connection a provider the run connected (the session's fields, then the frame's counters).
local records = {}

records.strict = os.getenv('CSENG_STRICT_RECORDS') == '1'

-- name -> {field = what it is}
local DECLARED = {}

local function declare(name, fields)
  DECLARED[name] = fields
  return fields
end

--- The fields the run log's writer adds to every record it writes (lua/cseng/results/log.lua).
local WRITTEN = {
  event = 'the event name (trial, startup_trial, ...)',
  run_id = 'the run the record belongs to',
  time = 'when the record was written (ISO-8601 UTC)',
}

records.Trial = declare('Trial', {
  task_id = 'the task', task_sha256 = "the task's content hash",
  attempt = 'its number among --attempts K (pass@k samples)', try = 'its number among --retry-errors tries',
  tries = 'how many tries it took (absent for one)', rerun = 'a --rerun-errors run of a task that errored before',
  provider = 'the provider (as the run names it)', mode = 'cold or warm', solver = 'the solver', model = 'the model, for LLM solvers',
  outcome = 'passed | failed | error', passed = 'whether the verifier passed it', reward = 'the reward read',
  reward_rule = 'where the reward came from (reward.txt, reward.json, exit code)', return_code = "the verifier's exit code",
  stdout_tail = "the verifier's output (last bytes)", stderr_tail = "the verifier's errors (last bytes)",
  verify_timed_out = "the verifier's timeout hit", verifier_user = 'who ran the verifier (verifier | root)',
  error = 'what failed (outcome error)', error_stage = 'the phase it failed in', error_code = 'a registered error code',
  timed_out = 'the trial timed out', interrupted = 'an interrupt stopped it', retriable = 'a rerun may pass it (ESANDBOX)',
  phases = 'seconds per phase (<phase>_seconds)', elapsed_seconds = 'the whole trial', sandbox_seconds = "the sandbox's lifetime",
  queue_seconds = "waiting for a place under the adapter's max_concurrency", estimated_cost_usd = "the sandbox's cost",
  cost = 'the cost ledger (sandbox and model lines)', solve_return_code = "the solver's exit status",
  solve_elapsed_seconds = "the solver's time", solve_stdout_tail = "the solver's output (last bytes)",
  solve_stderr_tail = "the solver's errors (last bytes)", solve_timed_out = "the solve timeout hit",
  solve_note = "the solver's note (nop solver, no solution)", solver_usage = 'tokens, turns and cost of LLM solvers',
  solver_transcript_path = "the solver's transcript beside the run log", trajectory_path = 'its ATIF trajectory',
  trajectory_error = 'why the trajectory could not be written', probe = "the sandbox's health after a failed solve",
  no_solution = 'gold on a task without solution/solve.sh', sandbox_id = 'the sandbox', labels = "the sandbox's labels",
  environment = 'how the environment was made (method, cache_hit, content_key, mode, run_steps, replayed_steps)',
  image = 'the image or layer it ran on', build_cache_hit = 'the build was cached', build_log_tail = "the build's output (last bytes)",
  warm_artifact = 'the warm artifact it started from', staged_files = 'files staged by the upload',
  fidelity_gaps = "what the sandbox lacks compared with the task's image", cleanup_error = "why the sandbox's destroy failed",
  limits = 'the resource limits the provider enforced', limit_hits = 'the limits the trial ran into',
  started_at = 'when it started (ISO-8601 UTC)', finished_at = 'when it finished (ISO-8601 UTC)',
  rewards = "every reward the verifier wrote (reward.json's numeric keys, reward.txt's reward): each a metric",
  primary_metric = 'the reward key that decided pass/fail (--primary-metric, [metadata] primary_metric, else reward)',
  network = "each phase's network as given ({mode, declared, hosts, enforced, allowed, withheld, gap}), by phase",
  steps = 'the steps of a [[steps]] task: {name, rewards, reward, passed, gate, solve_* and verifier fields}',
  step_stop = 'the step a [[steps]] task stopped at, and why (its min_reward gate, a failed setup)',
  artifacts = "the task's artifacts collected after the verifier: {source, destination, type, status, bytes}",
  artifacts_dir = 'where they were collected (results/<run-id>/artifacts/<trial>/, with manifest.json)',
})
for k, v in pairs(WRITTEN) do records.Trial[k] = v end

records.Sample = declare('Sample', {
  provider = 'the provider (as the plan names it)', adapter = 'its adapter', phase = 'warmup | measure',
  warmup = 'a warmup (not a sample of the statistics)', round = 'its round', position = 'its place in the round',
  order = "the round's order of providers", block = 'its block (--repeat)', mode = 'lockstep | sequential | staggered | burst',
  ok = 'the sandbox answered its first command with the marker', started_at = 'when it started (ISO-8601 UTC)',
  finished_at = 'when it finished (ISO-8601 UTC)', sandbox_id = 'the sandbox', http = "the create's HTTP phases",
  exec_http = "the first command's HTTP phases", create_ms = 'create, request to answer', first_exec_ms = 'the first command',
  ready_ms = 'create + first command', start_t_ms = 'when the create left (ms since the run began)',
  ready_t_ms = 'when it was ready (ms since the run began)', lateness_ms = 'how late the create left against its schedule',
  handshakes = "the create's calls that waited for a new connection (TCP, TLS, HTTP/2 settings)",
  handshake_ms = "those connections' handshakes, reported apart (--cold-connections)",
  record_ms = 'writing the allocation record', stall_ms = "the engine's own record writes inside its measured calls",
  exit_code = "the first command's exit status", stdout_tail = "the first command's output when it failed",
  stderr_tail = "the first command's errors when it failed", cleanup_ms = 'destroy', cleanup_attempts = 'destroy tries',
  cleanup_ok = 'the sandbox is gone', cleanup_error = 'why not', cleanup_error_code = 'its code', elapsed_ms = 'the whole sample',
  error = 'what failed', error_stage = 'create | first_exec', error_code = 'a registered error code',
  timed_out = 'its timeout hit', interrupted = 'an interrupt stopped it',
  -- the arena's primitives (lua/cseng/run/workloads/, docs/ARENA.md "Primitives")
  workload = 'the workload it measured (startup, exec, upload, download, files, snapshot, pause, fork, egress, standard)',
  figures = "the workload's figures by name (ms, MiB/s); nil when the sample failed: a failure is never a time",
  checks = "the workload's clock-free checks ({name = {ok, want, got}}: hashes, counts, contents that arrived or were kept)",
  paths = 'how each step was done (the adapter function or API path the workload used)',
  sandboxes = 'the other sandboxes the sample made (a restored snapshot, forks): their ids, for the provider to check',
  audit = 'the fidelity audit ({ok, labels, fresh, isolation, cpus, memory_mb, code_path, ...}): lua/cseng/run/audit.lua',
  audit_ms = "the audit command's own time (never part of a figure)",
  resources = 'what the plan asked every provider for ({cpus, memory_mb})',
  clean = 'ok and its audit found nothing: the samples statistics pool (the others are reported apart)',
  audit_key = "the marker this sample's audit left in its sandbox (run, provider, phase, round, position)",
})
for k, v in pairs(WRITTEN) do records.Sample[k] = v end

records.Run = declare('Run', {
  session = 'the session (lua/cseng/run/session.lua)', id = 'the run id', opts = "the run's options",
  provider = 'the adapter module', client = "the adapter's client", p = 'the Connection', solver = 'the solver module',
  writer = 'the run log', getenv = "the run's environment", launcher = 'cseng@<host>', frame = 'the run frame',
  warm_cache = 'warm artifacts by content key (prepared once per run)', admission = "the model endpoints' admission",
  evals = "the evals layer's state (lua/cseng/evals/hooks.lua: budget, model proxy, how keys travel)",
})

records.Connection = declare('Connection', {
  name = 'the provider as the run names it', adapter_name = 'the adapter file', adapter = 'the adapter module',
  client = "the adapter's client", queue = "a semaphore of the adapter's max_concurrency",
  live = 'ids of its sandboxes not destroyed yet', counts = 'started, allocated, destroyed, cleanup_failed, outcomes',
  endpoint = 'the endpoint it talks to (scheme, host, port, loopback)', last_error = 'its last trial error',
  rates = 'its sandbox rates {vcpu_s, gib_s, per_create} (lua/cseng/evals/rates.lua)',
  rates_source = 'where they came from {from = plan | pricing | adapter, ...}',
})

--- The declared fields of a record kind.
---@param name string 'Trial' | 'Sample' | 'Run' | 'Connection'
---@return table<string, string>
function records.fields(name) return assert(DECLARED[name], name) end

local function strict_mt(name, fields)
  return {
    __newindex = function(t, k, v)
      if fields[k] == nil then
        error(string.format('%s has no field %q: declare it in lua/cseng/run/records.lua (and say what it is)', name,
          tostring(k)), 2)
      end
      rawset(t, k, v)
    end,
  }
end

local META = {}

--- A new record of a declared kind with the fields of init (each must be declared too). Under
--- records.strict, writing an undeclared field later raises.
---@param name string
---@param init table|nil
---@return table
function records.new(name, init)
  local fields = records.fields(name)
  local rec = {}
  for k, v in pairs(init or {}) do
    if fields[k] == nil then
      error(string.format('%s has no field %q: declare it in lua/cseng/run/records.lua', name, tostring(k)), 2)
    end
    rec[k] = v
  end
  if records.strict then
    META[name] = META[name] or strict_mt(name, fields)
    setmetatable(rec, META[name])
  end
  return rec
end

function records.trial(init) return records.new('Trial', init) end
function records.sample(init) return records.new('Sample', init) end
function records.run(init) return records.new('Run', init) end
function records.connection(init) return records.new('Connection', init) end

return records
