--- `cseng prewarm --provider NAME [PLAN.lua] [--dataset ... --task-index ...]`: prepares the warm
--- artifact of each selected task (the prewarm run kind, lua/cseng/run/kinds/prewarm.lua) and
--- prints it: `DOCKER_IMAGE_ID=<id>` for one task, a task -> artifact table for several. Writes results/prewarm-<provider>-<stamp>.json, which
--- `cseng run ... --mode warm --prewarm-file FILE` reads (or pass one id with --warm-artifact).
local flags = require('cseng.lib.flags')
local plan = require('cseng.run.plan')
local options = require('cseng.run.options')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local errors = require('cseng.lib.errors')
local frame = require('cseng.run.frame')
local environment = require('cseng.run.environment')
local session = require('cseng.run.session')
local util = require('cseng.lib.util')
local exit = require('cseng.cli.exit')
local command = require('cseng.cli.command')

local RUN = options.SPEC
local DEFAULT_PLAN = 'plans/warm-gold.lua'

local cmd = command {
  name = 'prewarm',
  summary = 'prepare warm artifacts (prewarmed images/roots) and print their ids',
  usage = 'usage: cseng prewarm --provider NAME [PLAN.lua] [options]\n\n' ..
    'Prepares each selected task\'s warm artifact and prints it (DOCKER_IMAGE_ID=<id> for one task).\n' ..
    'A provider whose warm artifact is one runner image (its adapter\'s prewarm_image) builds that\n' ..
    'instead and prints <ARTIFACT_ENV>=<id>; cseng prewarm --provider NAME --help shows its own flags.\n' ..
    'The plan (default ' .. DEFAULT_PLAN .. ') gives the dataset and image map; options override it.\n' ..
    'Writes results/prewarm-<provider>-<stamp>.json; reuse it with\n' ..
    '  cseng run plans/warm-gold.lua --provider NAME --prewarm-file FILE\n' ..
    'cseng prewarm --list [--provider NAME] [--output DIR] shows the artifacts and their age;\n' ..
    '--prune removes them (through the adapter where it can delete artifacts) and their files.',
  -- run's options prewarm takes, as run reads them; prewarm reads a dataset by path only (run's
  -- --dataset also takes NAME@VERSION with --registry)
  flags = {
    { 'provider', from = RUN },
    { 'dataset', from = RUN, arg = 'PATH', help = '.jsonl, .parquet, a TB2 task directory or a folder of them' },
    { 'task-index', from = RUN }, { 'tasks', from = RUN }, { 'task-limit', from = RUN }, { 'concurrency', from = RUN },
    { 'image-map', from = RUN }, { 'allow-network', from = RUN }, { 'build-network', from = RUN },
    { 'timeout-seconds', from = RUN }, { 'output', from = RUN }, { 'env-file', from = RUN }, { 'quiet', from = RUN },
    { 'list', 'bool', help = 'show the warm artifacts (the adapter\'s own listing, else the prewarm files)' },
    { 'prune', 'bool', help = 'remove the warm artifacts --list shows, and their prewarm files' },
  },
}
local SPEC = cmd.flags

-- The adapter's own flags (its prewarm_flags, lua/cseng/lib/flags.lua's spec format) beside the
-- command's: parsed into f.adapter_flags[key]. nil, why when one has a name the command uses.
local function with_adapter_flags(provider)
  local spec, names = {}, {}
  for k, v in pairs(SPEC) do spec[k] = v end
  local own = {}
  for name in pairs(type(provider) == 'table' and type(provider.prewarm_flags) == 'table' and provider.prewarm_flags or {}) do
    own[#own + 1] = name
  end
  table.sort(own)
  for _, name in ipairs(own) do
    if spec[name] then return nil, string.format("provider '%s': its prewarm flag --%s is a flag of cseng prewarm", provider.name, name) end
    local s = {}
    for k, v in pairs(provider.prewarm_flags[name]) do s[k] = v end
    s.key = 'adapter_flags\0' .. provider.prewarm_flags[name].key
    spec[name], names[#names + 1] = s, name
  end
  return spec, names
end

-- The provider named by --provider NAME / --provider=NAME in args, or nil.
local function provider_in(args)
  for i, a in ipairs(args) do
    if a == '--' then return nil end
    if a == '--provider' then return args[i + 1] end
    local v = a:match('^%-%-provider=(.*)$')
    if v then return v end
  end
  return nil
end

-- One runner image for every task: built by provider.prewarm_image with its prewarm_flags' values,
-- printed as <artifact_env>=<id>.
local function prewarm_image(provider, f)
  local ok, err = pcall(function()
    local o = options.merge({}, { env_file = f.env_file }, {})
    local getenv = function(k) return (o.env or {})[k] or os.getenv(k) end
    local client = provider.connect({ getenv = getenv })
    local log = not f.quiet and function(line) io.stderr:write('prewarm ', provider.name, ': ', line, '\n') end or nil
    local po = { log = log }
    for k, v in pairs(f) do
      local key = type(k) == 'string' and k:match('^adapter_flags%z(.+)$')
      if key then po[key] = v end
    end
    local id, perr, code = provider.prewarm_image(client, po)
    if not id then error(errors.returned(perr, code, { default_code = errors.EPREPARE }), 0) end
    print((provider.artifact_env or (provider.name:upper() .. '_ARTIFACT')) .. '=' .. id)
  end)
  if ok then return 0 end
  return exit.fail(err, 'prewarm')
end

-- The prewarm files in dir (newest first): {path, doc}, for one provider or all.
local function prewarm_files(dir, provider)
  local out = {}
  for _, name in ipairs(fs.list(dir) or {}) do
    if name:match('^prewarm%-.+%.json$') then
      local path = dir .. '/' .. name
      local ok, doc = pcall(require('cjson').decode, fs.read(path) or '')
      if ok and type(doc) == 'table' and doc.kind == 'cseng-prewarm' and (not provider or doc.provider == provider) then
        out[#out + 1] = { path = path, doc = doc }
      end
    end
  end
  table.sort(out, function(a, b) return tostring(a.doc.created_at) > tostring(b.doc.created_at) end)
  return out
end

local function age_text(s)
  if not s then return '?' end
  if s < 120 then return s .. ' s' end
  if s < 7200 then return (s // 60) .. ' min' end
  if s < 172800 then return (s // 3600) .. ' h' end
  return (s // 86400) .. ' d'
end

--- --list / --prune: the adapter's own listing (adapter.list_artifacts(client) -> {{id, created_at?,
--- task_id?}}) when it has one, else the prewarm files in results/ (or --output DIR). Prune deletes
--- through adapter.delete_artifact(client, id) where it exists, then removes the prewarm files.
local function list_or_prune(o, prune)
  local dir = (o.output and not o.output:match('%.json$')) and o.output or 'results'
  local rows, n_art, n_del, kept = {}, 0, 0, 0
  local adapter, client
  if o.provider then
    adapter = session.adapter(o.provider)
    if adapter.list_artifacts or (prune and adapter.delete_artifact) then
      -- a client, not a run: listing allocates nothing, so it writes no run log
      local ok, c = pcall(adapter.connect, util.merge(o.provider_config, { getenv = session.getenv(o.env) }))
      if not ok then error(errors.line(c), 0) end
      client = c
    end
  end
  if adapter and adapter.list_artifacts then
    local list = errors.check(nil, adapter.list_artifacts(client))
    for _, a in ipairs(list) do
      n_art = n_art + 1
      rows[#rows + 1] = string.format('%-10s %-44s %-8s %s', adapter.name, tostring(a.task_id or '-'),
        age_text(environment.artifact_age(a.id, a.created_at)), a.id)
      if prune and adapter.delete_artifact then
        if adapter.delete_artifact(client, a.id) then n_del = n_del + 1 end
      end
    end
  end
  local files = prewarm_files(dir, o.provider)
  for _, fdoc in ipairs(files) do
    local doc = fdoc.doc
    local ids = {}
    for tid in pairs(doc.artifacts or {}) do ids[#ids + 1] = tid end
    table.sort(ids)
    for _, tid in ipairs(ids) do
      local id = doc.artifacts[tid]
      if not (adapter and adapter.list_artifacts) then
        n_art = n_art + 1
        rows[#rows + 1] = string.format('%-10s %-44s %-8s %s  (%s)', tostring(doc.provider), tid,
          age_text(environment.artifact_age(id, doc.created_at)), tostring(id), fdoc.path)
        if prune then
          if adapter and adapter.delete_artifact and doc.provider == adapter.name then
            if adapter.delete_artifact(client, id) then n_del = n_del + 1 end
          else kept = kept + 1 end
        end
      end
    end
    if prune then fs.remove(fdoc.path) end
  end
  io.stdout:write(string.format('%-10s %-44s %-8s %s\n', 'provider', 'task', 'age', 'artifact'))
  for _, r in ipairs(rows) do io.stdout:write(r, '\n') end
  if n_art == 0 then io.stdout:write('no warm artifacts recorded in ', dir, '/', o.provider and (' for ' .. o.provider) or '', '\n') end
  if prune then
    io.stdout:write(string.format('pruned: %d prewarm file(s) removed, %d artifact(s) deleted at the provider%s\n',
      #files, n_del, kept > 0 and string.format(', %d kept (the adapter cannot delete artifacts; pass --provider ' ..
        'NAME where it can)', kept) or ''))
  end
  return 0
end

-- prewarm parses its own command line: the adapter named by --provider brings its own flags (and
-- its --help shows them)
function cmd.run(args)
  local spec, own = SPEC, {}
  local named = provider_in(args)
  local okp, named_adapter = false, nil
  if named then okp, named_adapter = pcall(session.adapter, named) end
  if okp then
    local why
    spec, why = with_adapter_flags(named_adapter)
    if not spec then return exit.usage_error('prewarm: ' .. why) end
    own = why
  end
  for _, a in ipairs(args) do
    if a == '--' then break end
    if a == '--help' or a == '-h' then
      print(cmd.usage)
      if #own > 0 then print('\n' .. named_adapter.name .. '\'s own options:\n' .. flags.help(spec, own)) end
      return 0
    end
  end
  local f, pos = exit.flags('prewarm', args, spec)
  if not f then return pos end
  if f.list or f.prune then
    if #pos > 0 then return exit.usage_error('prewarm --list/--prune take no PLAN.lua') end
    local ok, o = pcall(options.merge, {}, f, { 'cseng', 'prewarm', table.unpack(args) })
    if not ok then return exit.usage_error(o) end
    local lok, st = pcall(list_or_prune, o, f.prune)
    if not lok then return exit.fail(st, 'prewarm') end
    return st
  end
  if okp and named_adapter.prewarm_image then return prewarm_image(named_adapter, f) end
  if #pos > 1 then return exit.usage_error('prewarm takes at most one PLAN.lua') end
  local plan_path = pos[1] or (sys.root() .. '/' .. DEFAULT_PLAN)
  local ok, p = pcall(plan.load, plan_path)
  if not ok then return exit.usage_error(p) end
  local argv = { 'cseng', 'prewarm', table.unpack(args) }
  local ok2, o = pcall(options.merge, p, f, argv)
  if not ok2 then return exit.usage_error(o) end
  o.mode = 'warm'
  if not f.provider then return exit.usage_error('prewarm needs --provider NAME') end

  local rok, status, info = pcall(frame.run, 'prewarm', require('cseng.cli.present').attach(o))
  if not rok then return exit.fail(status, 'prewarm') end
  local sel = info.selected
  if #sel == 1 and info.artifacts[sel[1].id] then print(info.artifact_env .. '=' .. info.artifacts[sel[1].id]) end
  if not o.quiet then
    io.stdout:write('prewarm file: ', info.json, '\n',
      string.format('use: cseng run plans/warm-gold.lua --provider %s --prewarm-file %s\n', info.provider, info.json))
  end
  return status
end

return cmd
