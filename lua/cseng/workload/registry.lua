--- Datasets by name, through a Harbor registry: `--dataset NAME@VERSION --registry R`.
---
--- A registry is Harbor's registry.json (src/harbor/models/registry.py: a list of DatasetSpec
--- {name, version, description, tasks = [{name, git_url, git_commit_id, path}], metrics}), read
--- from (R):
---   * a local file, or a folder holding registry.json;
---   * an http(s) URL of one (Harbor's JsonRegistryClient);
---   * a git repository (Harbor's GitRepoRegistryClient): `git+URL[@REF]`, a URL ending in .git,
---     a git:// or file:// URL, or a local folder that is a git repository; its registry.json at
---     REF (default HEAD, resolved to a commit), whose tasks without a git_url are the
---     repository's own at that commit; a repository without registry.json is one dataset, its
---     tasks/ folder (Harbor's implicit dataset).
--- NAME@VERSION picks a dataset (without @VERSION: "head", else the highest version, as Harbor's
--- resolve_version); `org/name@sha256:<hex>` picks the dataset whose content hash (Harbor's
--- DatasetManifest.compute_content_hash over its tasks' digests) is that; `org/name@latest` is as
--- without a version. Each task is fetched by git at its pinned commit into the cache
--- (<cache>/registry/), once: a bare mirror of each repository, the task's folder extracted with
--- `git archive COMMIT:PATH`. A task entry may carry `digest` ("sha256:<hex>", Harbor's task
--- content hash: lua/cseng/workload/registry.lua's content_hash follows Harbor's Packager): the
--- fetched folder must hash to it, or the run is refused in one line naming the task.
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local http = require('cseng.http')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local confine = require('cseng.lib.confine')
local S = require('cseng.lib.schema')

local registry = {}

local function fail(msg) errors.raise(errors.EDATASET, msg) end

-- ---- Harbor's registry models (src/harbor/models/registry.py, metric/config.py) ---------------

local MetricConfig = S.model('MetricConfig', {
  { 'type', S.enum('MetricType', 'sum', 'min', 'max', 'mean', 'uv-script'), default = 'mean' },
  { 'kwargs', S.dict(S.any), default = {} },
})

local RegistryTaskId = S.model('RegistryTaskId', {
  { 'name', S.str },
  { 'git_url', S.optional(S.str), default = S.NONE },
  { 'git_commit_id', S.optional(S.str), default = S.NONE },
  { 'path', S.path },
})

local DatasetSpec = S.model('DatasetSpec', {
  { 'name', S.str }, { 'version', S.str }, { 'description', S.str },
  { 'tasks', S.list(RegistryTaskId) },
  { 'metrics', S.list(MetricConfig), default = {} },
})

--- Harbor's models, by class name (spec/results/harbor_models_spec.lua holds them to Harbor's sources).
registry.MODELS = { RegistryTaskId = RegistryTaskId, DatasetSpec = DatasetSpec, MetricConfig = MetricConfig }

-- ---- git -----------------------------------------------------------------------------------------

local function git(args, o)
  o = o or {}
  local argv = { 'git' }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local r, err = proc.run { argv = argv, cwd = o.cwd, timeout = o.timeout or 600, tail_bytes = o.tail_bytes or (64 << 20),
    env_add = { GIT_TERMINAL_PROMPT = '0', GIT_CONFIG_NOSYSTEM = '1', GIT_ASKPASS = 'true' } }
  if not r then fail('git ' .. table.concat(args, ' ') .. ': ' .. tostring(err)) end
  if r.code ~= 0 and not o.may_fail then
    fail(string.format('git %s: %s', table.concat(args, ' '), util.trim(r.stderr ~= '' and r.stderr or ('exit ' .. r.code))))
  end
  return r
end

local function is_sha(s) return type(s) == 'string' and (#s == 40 or #s == 64) and not s:find('[^0-9a-fA-F]') end

--- The bare mirror of a repository in the cache, fetched so that it holds `want` (a commit, or
--- nil: whatever the remote has). Returns its path.
function registry.mirror(url, want, cache)
  local dir = cache .. '/repos/' .. crypto.sha256_hex(url):sub(1, 24) .. '.git'
  if not fs.exists(dir .. '/HEAD') then
    errors.check(nil, fs.mkdir_p(cache .. '/repos'))
    local tmp = dir .. '.tmp' .. tostring(require('cseng.sys').pid())
    fs.remove_tree(tmp)
    git({ 'clone', '--quiet', '--mirror', '--', url, tmp })
    fs.remove_tree(dir)
    errors.check(nil, fs.rename(tmp, dir))
  elseif not want or git({ 'cat-file', '-e', want .. '^{commit}' }, { cwd = dir, may_fail = true }).code ~= 0 then
    git({ 'fetch', '--quiet', '--prune', 'origin', '+refs/*:refs/*' }, { cwd = dir, may_fail = true })
  end
  if want and git({ 'cat-file', '-e', want .. '^{commit}' }, { cwd = dir, may_fail = true }).code ~= 0 then
    fail(string.format('%s has no commit %s', url, want))
  end
  return dir
end

-- ---- Harbor's task content hash (src/harbor/publisher/packager.py) --------------------------

-- Packager.DEFAULT_IGNORES, applied when the task has no .gitignore
local DEFAULT_IGNORES = { '__pycache__/', '*.pyc', '.DS_Store', '*.swp', '*.swo', '*~' }

local function glob_pat(g)
  return (g:gsub('[%^%$%(%)%%%.%[%]%+%-]', '%%%0'):gsub('%*', '[^/]*'):gsub('%?', '[^/]'))
end

-- gitignore rules as pathspec reads them, for the common forms: `name`, `*.ext`, `dir/`, `/anchored`,
-- `a/b` (anchored when it holds a slash), `!negation`, comments and blank lines
local function ignorer(lines)
  local rules = {}
  for _, l in ipairs(lines) do
    l = l:gsub('%s+$', '')
    if l ~= '' and not l:match('^#') then
      local neg = l:sub(1, 1) == '!'
      if neg then l = l:sub(2) end
      local dir_only = l:sub(-1) == '/'
      l = l:gsub('/$', '')
      local anchored = l:find('/', 1, true) ~= nil
      l = l:gsub('^/', '')
      rules[#rules + 1] = { pat = '^' .. glob_pat(l) .. '$', neg = neg, dir_only = dir_only, anchored = anchored }
    end
  end
  return function(rel)
    local parts = {}
    for p in rel:gmatch('[^/]+') do parts[#parts + 1] = p end
    local ignored = false
    for _, r in ipairs(rules) do
      local hit = false
      -- a rule matches the path or one of its parent folders
      for n = 1, #parts do
        local is_dir = n < #parts
        if not r.dir_only or is_dir then
          local sub = table.concat(parts, '/', 1, n)
          if r.anchored then
            if sub:match(r.pat) then hit = true end
          elseif parts[n]:match(r.pat) then
            hit = true
          end
        end
        if hit then break end
      end
      if hit then ignored = not r.neg end
    end
    return ignored
  end
end

--- Harbor's content hash of a task folder: the files it publishes (task.toml, instruction.md,
--- README.md, and every file below environment/, tests/, solution/, steps/), less what the task's
--- .gitignore (else Harbor's default ignores) excludes, sorted by path; sha256 over
--- "<path>\0<sha256 of the file>\n" for each. Returns the hex digest and the file count.
---@param dir string
function registry.content_hash(dir)
  local gi = fs.read(dir .. '/.gitignore')
  local lines = {}
  if gi then for l in gi:gmatch('[^\n]+') do lines[#lines + 1] = l end else lines = DEFAULT_IGNORES end
  local ignored = ignorer(lines)
  local files = {}
  for _, single in ipairs({ 'task.toml', 'instruction.md', 'README.md' }) do
    local st = fs.stat(dir .. '/' .. single)
    if st and st.type == 'file' then files[#files + 1] = single end
  end
  for _, sub in ipairs({ 'environment', 'tests', 'solution', 'steps' }) do
    local st = fs.stat(dir .. '/' .. sub)
    if st and st.type == 'dir' then
      for _, e in ipairs(fs.walk(dir .. '/' .. sub)) do
        local full = dir .. '/' .. sub .. '/' .. e.path
        local fst = (e.type == 'file' or e.type == 'link') and fs.stat(full)
        if fst and fst.type == 'file' then files[#files + 1] = sub .. '/' .. e.path end
      end
    end
  end
  local kept = {}
  for _, f in ipairs(files) do if not ignored(f) then kept[#kept + 1] = f end end
  table.sort(kept)
  local parts = {}
  for i, f in ipairs(kept) do
    parts[i] = f .. '\0' .. crypto.sha256_hex(assert(fs.read(dir .. '/' .. f))) .. '\n'
  end
  return crypto.sha256_hex(table.concat(parts)), #kept
end

--- Harbor's dataset content hash (DatasetManifest.compute_content_hash without files): sha256 of
--- the tasks' digests (hex, sorted) joined by commas.
function registry.dataset_hash(digests)
  local hex = {}
  for i, d in ipairs(digests) do hex[i] = tostring(d):gsub('^sha256:', '') end
  table.sort(hex)
  return crypto.sha256_hex(table.concat(hex, ','))
end

-- ---- reading a registry -------------------------------------------------------------------------

--- What --registry names: "file", "url" or "git", and the location (git: url and ref).
function registry.kind(src)
  if type(src) ~= 'string' or src == '' then fail('--registry: empty') end
  local g = src:match('^git%+(.*)$')
  if g then
    local url, ref = g:match('^(.-)@([^@/:]+)$')
    return 'git', url or g, ref
  end
  if src:match('^git://') or src:match('%.git/?$') or src:match('%.git@[^@/:]+$') then
    local url, ref = src:match('^(.-%.git/?)@([^@/:]+)$')
    return 'git', url or src, ref
  end
  if src:match('^https?://') then return 'url', src end
  local path = src:gsub('^file://', '')
  local st = fs.stat(path)
  if st and st.type == 'dir' and (fs.exists(path .. '/.git') or fs.exists(path .. '/HEAD') and fs.exists(path .. '/objects'))
    and not fs.exists(path .. '/registry.json') then
    return 'git', src:match('^file://') and src or ('file://' .. (require('cseng.sys').realpath(path) or path)), nil
  end
  if src:match('^file://') and st and st.type == 'dir' and fs.exists(path .. '/.git') then return 'git', src, nil end
  return 'file', path
end

local function decode_specs(text, where)
  local ok, doc = pcall(jsonl.decode, text)
  if not ok or doc == nil then fail(where .. ': not JSON: ' .. tostring(doc)) end
  if not S.is_array(doc) then fail(where .. ': expected a list of datasets (Harbor\'s registry.json)') end
  local vok, problems = S.check(S.list(DatasetSpec), doc)
  if not vok then fail(where .. ': ' .. problems[1] .. (#problems > 1 and string.format(' (and %d more)', #problems - 1) or '')) end
  -- what cseng adds to a task entry (Harbor's models ignore unknown keys): its content digest
  for i, d in ipairs(doc) do
    for j, t in ipairs(d.tasks) do
      if t.digest ~= nil and not (type(t.digest) == 'string' and t.digest:match('^sha256:%x+$') and #t.digest == 71) then
        fail(string.format('%s: %d.tasks.%d.digest: expected "sha256:<64 hex digits>", got %s', where, i - 1, j - 1, tostring(t.digest)))
      end
    end
  end
  return doc
end

---@class Registry
---@field source string what --registry said
---@field kind string file | url | git
---@field datasets table[] DatasetSpec records
---@field git_url string|nil the registry's repository (git)
---@field commit string|nil the commit its registry.json was read at (git)

--- Open a registry (see the file's header). opts.cache: the cache folder (default <cache>/registry).
---@return Registry
function registry.open(src, opts)
  opts = opts or {}
  local cache = opts.cache or (util.cache_dir(opts.getenv) .. '/registry')
  local kind, loc, ref = registry.kind(src)
  local reg = { source = src, kind = kind, cache = cache }
  if kind == 'file' then
    local path = loc
    local st = fs.stat(path)
    if st and st.type == 'dir' then path = path .. '/registry.json' end
    local text = fs.read(path)
    if not text then fail('--registry ' .. src .. ': no such registry file (a registry.json, a folder holding one, a URL or a git repository)') end
    reg.datasets = decode_specs(text, path)
    reg.base = util.dirname(path)
  elseif kind == 'url' then
    local res, err = http.request { url = loc, timeout = 60 }
    if not res then fail('--registry ' .. src .. ': ' .. tostring(err)) end
    if res.status ~= 200 then fail(string.format('--registry %s: HTTP %d', src, res.status)) end
    reg.datasets = decode_specs(res.body, src)
  else
    errors.check(nil, fs.mkdir_p(cache))
    local r = git({ 'ls-remote', '--', loc, ref or 'HEAD' })
    local sha = is_sha(ref) and ref or tostring(r.stdout):match('^(%x+)')
    if not sha then fail(string.format('--registry %s: no ref %s in %s', src, ref or 'HEAD', loc)) end
    local mirror = registry.mirror(loc, sha, cache)
    reg.git_url, reg.commit, reg.mirror = loc, sha, mirror
    local shown = git({ 'show', sha .. ':registry.json' }, { cwd = mirror, may_fail = true })
    if shown.code == 0 then
      reg.datasets = decode_specs(shown.stdout, loc .. '@' .. sha:sub(1, 12) .. ':registry.json')
      for _, d in ipairs(reg.datasets) do
        for _, t in ipairs(d.tasks) do
          t.git_url = t.git_url or loc
          t.git_commit_id = t.git_commit_id or sha
        end
      end
    else -- Harbor's implicit dataset: the task folders of tasks/
      local ls = git({ 'ls-tree', '--name-only', sha, 'tasks/' }, { cwd = mirror, may_fail = true })
      local tasks = {}
      for p in tostring(ls.stdout):gmatch('[^\n]+') do
        if git({ 'cat-file', '-e', sha .. ':' .. p .. '/task.toml' }, { cwd = mirror, may_fail = true }).code == 0 then
          tasks[#tasks + 1] = { name = util.basename(p), git_url = loc, git_commit_id = sha, path = p }
        end
      end
      if #tasks == 0 then fail(string.format('--registry %s: neither registry.json nor task folders in tasks/ at %s', src, sha)) end
      local name = loc:gsub('^%a+://', ''):gsub('%.git$', '') .. '/tree/' .. sha .. '/tasks'
      reg.datasets = { { name = name, version = sha:sub(1, 12), description = '', tasks = tasks, metrics = {} } }
    end
  end
  return reg
end

-- Harbor's resolve_version: "head", else the highest version (numbers compared as numbers), else
-- the lexically last.
local function version_key(v)
  local nums = {}
  for n in tostring(v):gmatch('%d+') do nums[#nums + 1] = tonumber(n) end
  return nums
end
local function resolve_version(versions)
  for _, v in ipairs(versions) do if v == 'head' then return v end end
  local numeric = {}
  for _, v in ipairs(versions) do if v:match('^v?%d+[%.%d]*[%w%.%-+]*$') then numeric[#numeric + 1] = v end end
  local pool = #numeric > 0 and numeric or util.copy(versions)
  table.sort(pool, function(a, b)
    local ka, kb = version_key(a), version_key(b)
    for i = 1, math.max(#ka, #kb) do
      local x, y = ka[i] or 0, kb[i] or 0
      if x ~= y then return x > y end
    end
    return a > b
  end)
  return pool[1]
end

--- The dataset `spec` names ("NAME", "NAME@VERSION", "org/name@sha256:<hex>", "org/name@latest").
--- Raises naming what the registry has.
function registry.find(reg, spec)
  local name, version = tostring(spec):match('^([^@]+)@(.+)$')
  name = name or spec
  local matching, names = {}, {}
  for _, d in ipairs(reg.datasets) do
    names[d.name] = true
    if d.name == name then matching[#matching + 1] = d end
  end
  if #matching == 0 then
    local have = {}
    for n in pairs(names) do have[#have + 1] = n end
    table.sort(have)
    fail(string.format("--dataset %s: no dataset '%s' in the registry %s (it has: %s)", spec, name, reg.source,
      #have > 0 and table.concat(have, ', ') or 'none'))
  end
  if version and version:match('^sha256:') then
    for _, d in ipairs(matching) do
      local digests, all = {}, true
      for i, t in ipairs(d.tasks) do
        if not t.digest then all = false break end
        digests[i] = t.digest
      end
      if all and 'sha256:' .. registry.dataset_hash(digests) == version:lower() then return d end
    end
    fail(string.format("--dataset %s: no version of '%s' in %s has the content hash %s (versions whose tasks all carry digests are compared)",
      spec, name, reg.source, version))
  end
  if version and version ~= 'latest' then
    local have = {}
    for _, d in ipairs(matching) do
      if d.version == version then return d end
      have[#have + 1] = d.version
    end
    fail(string.format("--dataset %s: no version '%s' of '%s' in the registry %s (versions: %s)", spec, version, name,
      reg.source, table.concat(have, ', ')))
  end
  local versions = {}
  for _, d in ipairs(matching) do versions[#versions + 1] = d.version end
  local v = resolve_version(versions)
  for _, d in ipairs(matching) do if d.version == v then return d end end
end

--- Fetch the tasks of a dataset into the cache at their pinned commits, each checked against its
--- registry digest. Returns a list of {id, dir, sha256 (Harbor's content hash, hex), where,
--- source = {name, git_url, git_commit_id, path, digest}}.
function registry.fetch(reg, ds)
  local out = {}
  local label = ds.name .. '@' .. ds.version
  for i, t in ipairs(ds.tasks) do
    local where = string.format('registry %s: dataset %s: task %s', reg.source, label, t.name)
    local path = confine.name(tostring(t.path))
    if not path then fail(where .. ': path ' .. tostring(t.path) .. ' is not a relative path inside its repository') end
    local dir, commit
    if t.git_url then
      local want = t.git_commit_id
      if want and not is_sha(want) then
        local r = git({ 'ls-remote', '--', t.git_url, want })
        want = tostring(r.stdout):match('^(%x+)') or fail(string.format('%s: no ref %s in %s', where, t.git_commit_id, t.git_url))
      elseif not want then
        local r = git({ 'ls-remote', '--', t.git_url, 'HEAD' })
        want = tostring(r.stdout):match('^(%x+)') or fail(where .. ': ' .. t.git_url .. ' has no HEAD')
      end
      commit = want:lower()
      dir = reg.cache .. '/tasks/' .. crypto.sha256_hex(t.git_url .. '\0' .. commit .. '\0' .. path):sub(1, 24)
      if not fs.exists(dir .. '/.complete') then
        local mirror = registry.mirror(t.git_url, commit, reg.cache)
        local tar = git({ 'archive', '--format=tar', commit .. ':' .. path }, { cwd = mirror, may_fail = true })
        if tar.code ~= 0 then fail(string.format('%s: %s has no folder %s at %s', where, t.git_url, path, commit)) end
        local tmp = dir .. '.tmp' .. tostring(require('cseng.sys').pid())
        fs.remove_tree(tmp)
        errors.check(nil, fs.mkdir_p(tmp))
        local ok, xerr = archive.extract(tar.stdout, tmp, { from = 'bytes' })
        if not ok then fs.remove_tree(tmp); fail(where .. ': the task\'s archive was refused: ' .. tostring(xerr)) end
        fs.write(tmp .. '/.complete', commit .. '\n')
        fs.remove_tree(dir)
        errors.check(nil, fs.rename(tmp, dir))
      end
    else -- a local task: its path relative to the registry file's folder
      local base = reg.base or '.'
      dir = path:sub(1, 1) == '/' and path or (base .. '/' .. path)
      if not fs.exists(dir .. '/task.toml') then fail(where .. ': no task folder at ' .. dir) end
    end
    local hex = registry.content_hash(dir)
    if t.digest and 'sha256:' .. hex ~= t.digest:lower() then
      fail(string.format('%s (%s@%s:%s): content digest sha256:%s does not match the registry\'s %s: refused', where,
        tostring(t.git_url or 'local'), tostring(commit or '-'):sub(1, 12), path, hex, t.digest))
    end
    out[i] = { id = util.basename(path), dir = dir, sha256 = hex, where = where,
      source = { name = t.name, git_url = t.git_url, git_commit_id = commit, path = path, digest = 'sha256:' .. hex } }
  end
  return out
end

--- Everything a run of `--dataset SPEC --registry R` needs: the tasks' folders and the record of
--- where they came from (for the run's identity).
function registry.resolve(src, spec, opts)
  local reg = registry.open(src, opts)
  local ds = registry.find(reg, spec)
  local tasks = registry.fetch(reg, ds)
  local digests, pins = {}, {}
  for i, t in ipairs(tasks) do
    digests[i] = t.source.digest
    pins[i] = { name = t.source.name, git_url = t.source.git_url, git_commit_id = t.source.git_commit_id,
      path = t.source.path, digest = t.source.digest }
  end
  return tasks, { registry = src, registry_commit = reg.commit, name = ds.name, version = ds.version,
    content_hash = 'sha256:' .. registry.dataset_hash(digests), tasks = pins }
end

--- Whether --dataset names a registry dataset rather than a file: it does not exist as a path and
--- a registry is given.
function registry.is_name(dataset, reg)
  return reg ~= nil and type(dataset) == 'string' and not fs.exists(dataset)
end

return registry
