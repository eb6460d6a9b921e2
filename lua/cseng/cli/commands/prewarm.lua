--- `cseng prewarm --provider NAME [PLAN.lua] [--dataset ... --task-index ...]`: prepares the warm
--- artifact of each selected task (runner.prepare_artifact: build if the provider builds, create,
--- stage, prepare, snapshot, destroy) and prints it: `DOCKER_IMAGE_ID=<id>` for one task, a
--- task -> artifact table for several. Writes results/prewarm-<provider>-<stamp>.json, which
--- `cseng run ... --mode warm --prewarm-file FILE` reads (or pass one id with --warm-artifact).
local flags = require 'cseng.lib.flags'
local plan = require 'cseng.run.plan'
local options = require 'cseng.run.options'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local task = require 'cseng.task'
local dataset = require 'cseng.task.dataset'
local errors = require 'cseng.lib.errors'
local runner = require 'cseng.run.runner'
local session = require 'cseng.run.session'
local util = require 'cseng.lib.util'

local NAMES = { 'provider', 'dataset', 'task-index', 'tasks', 'task-limit', 'concurrency', 'image-map', 'allow-network',
  'timeout-seconds', 'output', 'env-file', 'quiet' }
local SPEC = options.subset(NAMES)
-- providers whose warm artifact is one runner image, not a snapshot per task (provider.prewarm_image)
local IMAGE_NAMES = { 'aws-bucket', 'aws-build-role-arn' }
SPEC['aws-bucket'] = { key = 'aws_bucket', type = 'string', arg = 'BUCKET',
  help = 'aws-microvm: the S3 bucket the code artifact is uploaded to' }
SPEC['aws-build-role-arn'] = { key = 'aws_build_role_arn', type = 'string', arg = 'ARN',
  help = 'aws-microvm: the IAM role the image build assumes' }
for _, n in ipairs(IMAGE_NAMES) do NAMES[#NAMES + 1] = n end

local DEFAULT_PLAN = 'plans/warm-gold.lua'

local cmd = {
  summary = 'prepare warm artifacts (prewarmed images/roots) and print their ids',
  usage = 'usage: cseng prewarm --provider NAME [PLAN.lua] [options]\n\n' ..
    'Prepares each selected task\'s warm artifact and prints it (DOCKER_IMAGE_ID=<id> for one task).\n' ..
    'aws-microvm builds its one runner image instead (--aws-bucket, --aws-build-role-arn) and prints\n' ..
    'AWS_MICROVM_IMAGE_ID=<arn>.\n' ..
    'The plan (default ' .. DEFAULT_PLAN .. ') gives the dataset and image map; options override it.\n' ..
    'Writes results/prewarm-<provider>-<stamp>.json; reuse it with\n' ..
    '  cseng run plans/warm-gold.lua --provider NAME --prewarm-file FILE\n\noptions:\n' .. flags.help(SPEC, NAMES),
}

-- One runner image for every task (aws-microvm): built by provider.prewarm_image, printed as
-- <artifact_env>=<id>.
local function prewarm_image(provider, f)
  local ok, err = pcall(function()
    local o = options.merge({}, { env_file = f.env_file }, {})
    local getenv = function(k) return (o.env or {})[k] or os.getenv(k) end
    local client = provider.connect({ getenv = getenv })
    local log = not f.quiet and function(line) io.stderr:write('prewarm ', provider.name, ': ', line, '\n') end or nil
    local id, perr, code = provider.prewarm_image(client, { bucket = f.aws_bucket, build_role_arn = f.aws_build_role_arn,
                                                            log = log })
    if not id then error(tostring(perr) .. (code and (' (' .. code .. ')') or ''), 0) end
    print((provider.artifact_env or (provider.name:upper() .. '_ARTIFACT')) .. '=' .. id)
  end)
  if ok then return 0 end
  if type(err) == 'table' and err.code == 'ECANCELED' then return 130 end
  io.stderr:write('cseng: prewarm: ', type(err) == 'table' and tostring(err.message) or tostring(err), '\n')
  return 1
end

function cmd.run(args)
  local f, pos = flags.parse(args, SPEC)
  if not f then io.stderr:write('cseng: prewarm: ', pos, ' (see cseng prewarm --help)\n'); return 2 end
  if f.provider then
    local okp, provider = pcall(session.adapter, f.provider)
    if okp and provider.prewarm_image then return prewarm_image(provider, f) end
  end
  if #pos > 1 then io.stderr:write('cseng: prewarm takes at most one PLAN.lua\n'); return 2 end
  local plan_path = pos[1] or (sys.root() .. '/' .. DEFAULT_PLAN)
  local ok, p = pcall(plan.load, plan_path)
  if not ok then io.stderr:write('cseng: ', tostring(p), '\n'); return 2 end
  local argv = { 'cseng', 'prewarm', table.unpack(args) }
  local ok2, o = pcall(options.merge, p, f, argv)
  if not ok2 then io.stderr:write('cseng: ', tostring(o), '\n'); return 2 end
  o.mode = 'warm'
  if not f.provider then io.stderr:write('cseng: prewarm needs --provider NAME\n'); return 2 end

  local status = 0
  local rok, rerr = pcall(function()
    local provider = session.adapter(o.provider)
    if not provider.snapshot then error(string.format("provider '%s' has no warm mode (no snapshot)", provider.name), 0) end
    local tasks = dataset.load(o.dataset)
    local selected = dataset.select(tasks, o.task_index, o.task_limit, o.tasks)
    -- the summary is results/prewarm-<provider>-<stamp>.json (or --output FILE.json), the log beside it
    local s = session.open { kind = 'prewarm', opts = o, id_parts = { 'prewarm', provider.name },
      stem = function(stamp) return 'prewarm-' .. provider.name .. '-' .. stamp end }
    local out_json, log = s.json, s.jsonl
    local run = runner.run_of(s, s:connect(o.provider, o.provider_config))
    local writer = s.writer
    writer:event('run_started', { kind = 'prewarm', argv = argv, provider = provider.name, dataset = o.dataset,
      task_count = #selected, host = sys.hostname(), pid = sys.pid(), provider_config = o.provider_config }, true)
    if not o.quiet then
      io.stdout:write(string.format('prewarm %s: %d task(s) on %s (concurrency %d)\nlog: %s\n', s.id, #selected,
        provider.name, o.concurrency or 1, log))
    end
    local artifacts, failed = {}, {}
    local sem = task.semaphore(o.concurrency or 1)
    local workers = {}
    for _, t in ipairs(selected) do
      if s.cleanup_failed then break end -- a failed cleanup stops new allocations
      sem:acquire()
      if s.cleanup_failed then sem:release(); break end
      workers[#workers + 1] = task.spawn(function()
        local pok, art = pcall(runner.prepare_artifact, run, t, require('cseng.task.recipe').for_run(run, t).key:sub(1, 24))
        sem:release()
        if pok then
          artifacts[t.id] = art
          if not o.quiet and #selected > 1 then io.stdout:write(string.format('%-44s %s\n', t.id, art)) end
        else
          local msg = errors.line(art)
          failed[t.id] = msg
          io.stderr:write(string.format('cseng: prewarm %s: %s\n', t.id, msg))
        end
      end)
    end
    for _, w in ipairs(workers) do w:join() end
    local nerr = 0
    for _ in pairs(failed) do nerr = nerr + 1 end
    local status_word = s.cleanup_failed and 'cleanup_failed' or (nerr == 0 and 'finished' or 'errors')
    writer:event('run_finished', { status = status_word, errors = nerr, cleanup_error = s.cleanup_failed }, true)
    local doc = {
      kind = 'cseng-prewarm', provider = provider.name, run_id = s.id, created_at = os.date('!%Y-%m-%dT%H:%M:%SZ'),
      dataset = o.dataset, artifact_env = provider.artifact_env, artifacts = artifacts,
      errors = next(failed) and failed or nil,
    }
    assert(fs.mkdir_p(util.dirname(out_json)))
    assert(fs.write(out_json, util.json_sorted(doc) .. '\n'))
    local env_name = provider.artifact_env or (provider.name:upper() .. '_ARTIFACT')
    if #selected == 1 and artifacts[selected[1].id] then
      print(env_name .. '=' .. artifacts[selected[1].id])
    end
    if not o.quiet then
      io.stdout:write('prewarm file: ', out_json, '\n',
        string.format('use: cseng run plans/warm-gold.lua --provider %s --prewarm-file %s\n', provider.name, out_json))
    end
    if s.cleanup_failed then
      io.stderr:write('cseng: prewarm: stopped allocating: ', s.cleanup_failed, '\n',
        '  run `cseng cleanup ', log, '` to retry the cleanup\n')
    end
    if nerr > 0 or s.cleanup_failed then status = 1 end
  end)
  if not rok then return require('cseng.cli.main').fail(rerr, 'prewarm') end
  return status
end

return cmd
