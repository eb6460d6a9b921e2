--- `cseng prewarm --provider NAME [PLAN.lua] [--dataset ... --task-index ...]`: prepares the warm
--- artifact of each selected task (runner.prepare_artifact: build if the provider builds, create,
--- stage, prepare, snapshot, destroy) and prints it: `DOCKER_IMAGE_ID=<id>` for one task, a
--- task -> artifact table for several. Writes results/prewarm-<provider>-<stamp>.json, which
--- `cseng run ... --mode warm --prewarm-file FILE` reads (or pass one id with --warm-artifact).
local flags = require 'flags'
local plan = require 'plan'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local task = require 'cseng.task'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local dataset = require 'dataset'
local results = require 'results'
local runner = require 'runner'
local util = require 'util'

local RUN_SPEC = require('commands.run').SPEC
local NAMES = { 'provider', 'dataset', 'task-index', 'tasks', 'task-limit', 'concurrency', 'image-map', 'allow-network',
  'timeout-seconds', 'output', 'env-file', 'quiet' }
local SPEC = {}
for _, n in ipairs(NAMES) do SPEC[n] = RUN_SPEC[n] end
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
    local o = require('commands.run').options({}, { env_file = f.env_file }, {})
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
    local okp, provider = pcall(runner.provider, f.provider)
    if okp and provider.prewarm_image then return prewarm_image(provider, f) end
  end
  if #pos > 1 then io.stderr:write('cseng: prewarm takes at most one PLAN.lua\n'); return 2 end
  local plan_path = pos[1] or (sys.root() .. '/' .. DEFAULT_PLAN)
  local ok, p = pcall(plan.load, plan_path)
  if not ok then io.stderr:write('cseng: ', tostring(p), '\n'); return 2 end
  local argv = { 'cseng', 'prewarm', table.unpack(args) }
  local ok2, o = pcall(require('commands.run').options, p, f, argv)
  if not ok2 then io.stderr:write('cseng: ', tostring(o), '\n'); return 2 end
  o.mode = 'warm'
  if not f.provider then io.stderr:write('cseng: prewarm needs --provider NAME\n'); return 2 end

  local status = 0
  local rok, rerr = pcall(function()
    local provider = runner.provider(o.provider)
    if not provider.snapshot then error(string.format("provider '%s' has no warm mode (no snapshot)", provider.name), 0) end
    local tasks = dataset.load(o.dataset)
    local selected = dataset.select(tasks, o.task_index, o.task_limit, o.tasks)
    local stamp = os.date('!%Y%m%d-%H%M%S')
    local run_id = string.format('prewarm-%s-%s-%s', provider.name, stamp, crypto.hex(crypto.random_bytes(2)))
    local dir = (o.output and not o.output:match('%.json$')) and o.output or 'results'
    local out_json = (o.output and o.output:match('%.json$')) and o.output or (dir .. '/prewarm-' .. provider.name .. '-' .. stamp .. '.json')
    local log = out_json:gsub('%.json$', '') .. '.jsonl'
    local getenv = function(k) return (o.env or {})[k] or os.getenv(k) end
    local client = provider.connect(util.merge(o.provider_config, { getenv = getenv, run_id = run_id }))
    local writer = results.open(log, run_id)
    local run = {
      id = run_id, opts = o, provider = provider, writer = writer, getenv = getenv, client = client,
      warm_cache = {}, launcher = 'cseng@' .. (sys.hostname() or 'localhost'),
    }
    writer:event('run_started', { kind = 'prewarm', argv = argv, provider = provider.name, dataset = o.dataset,
      task_count = #selected, host = sys.hostname(), pid = sys.pid() }, true)
    if not o.quiet then
      io.stdout:write(string.format('prewarm %s: %d task(s) on %s (concurrency %d)\nlog: %s\n', run_id, #selected,
        provider.name, o.concurrency or 1, log))
    end
    local artifacts, errors = {}, {}
    local sem = task.semaphore(o.concurrency or 1)
    local workers = {}
    for _, t in ipairs(selected) do
      sem:acquire()
      workers[#workers + 1] = task.spawn(function()
        local pok, art = pcall(runner.prepare_artifact, run, t, t.sha256:sub(1, 24))
        sem:release()
        if pok then
          artifacts[t.id] = art
          if not o.quiet and #selected > 1 then io.stdout:write(string.format('%-44s %s\n', t.id, art)) end
        else
          local msg = type(art) == 'table' and tostring(art.message or cjson.encode(art)) or tostring(art)
          errors[t.id] = msg
          io.stderr:write(string.format('cseng: prewarm %s: %s\n', t.id, msg))
        end
      end)
    end
    for _, w in ipairs(workers) do w:join() end
    local nerr = 0
    for _ in pairs(errors) do nerr = nerr + 1 end
    writer:event('run_finished', { status = nerr == 0 and 'finished' or 'errors', errors = nerr }, true)
    local doc = {
      kind = 'cseng-prewarm', provider = provider.name, run_id = run_id, created_at = os.date('!%Y-%m-%dT%H:%M:%SZ'),
      dataset = o.dataset, artifact_env = provider.artifact_env, artifacts = artifacts,
      errors = next(errors) and errors or nil,
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
    if nerr > 0 then status = 1 end
  end)
  if not rok then
    if type(rerr) == 'table' and rerr.code == 'ECANCELED' then return 130 end
    io.stderr:write('cseng: prewarm: ', type(rerr) == 'table' and tostring(rerr.message or cjson.encode(rerr)) or tostring(rerr), '\n')
    return 1
  end
  return status
end

return cmd
