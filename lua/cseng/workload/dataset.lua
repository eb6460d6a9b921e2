--- Datasets: the task formats cseng reads, normalized to one Task shape.
---
--- Sources:
---   * seed JSONL rows: task_id, prompt|instruction, task_files{encoding="tar.gz+base64", content},
---     optional metadata{data_source, env_type, ...}; parquet files with the same rows (flat, or
---     nested under metadata.instance);
---   * Harbor / TerminalBench 2 task directories (task.toml, instruction.md, environment/Dockerfile,
---     solution/solve.sh, tests/test.sh): one directory or a folder of them;
---   * SWE-smith-style rows: instance_id, repo, patch (the bug-inducing diff), FAIL_TO_PASS,
---     PASS_TO_PASS, image_name, environment{source_dir, install}; workdir /testbed.
--- Every task becomes a directory in the TB2 layout (extracted or synthesized once, under the
--- cache directory), so staging and providers see one shape.
local cjson = require('cjson')
local fs = require('cseng.fs')
local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local proc = require('cseng.proc')
local toml = require('cseng.lib.toml')
local dockerfile = require('cseng.workload.dockerfile')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local confine = require('cseng.lib.confine')

local dataset = {}

---@class TaskConfig
---@field verifier_timeout number seconds
---@field agent_timeout number seconds
---@field build_timeout number seconds
---@field cpus number|nil
---@field memory_mb integer|nil
---@field storage_mb integer|nil
---@field gpus integer|nil
---@field allow_internet boolean
---@field verifier_env table<string,string>
---@field solution_env table<string,string>
---@field agent_env table<string,string>
---@field docker_image string|nil
---@field network {environment: table, agent: table|nil, verifier: table|nil} Harbor 1.3's policies ({mode, hosts})
---@field primary_metric string|nil the reward key that decides pass/fail ([metadata] primary_metric)
---@field artifacts table[] {source, destination, exclude} collected after the verifier
---@field steps table[]|nil [[steps]]: {name, agent_timeout, verifier_timeout, verifier_env, agent_network, verifier_network, min_reward, artifacts}
---@field multi_step_reward_strategy string|nil mean | final

---@class Task
---@field id string
---@field index integer 0-based position in the dataset (what --task-index selects)
---@field format "terminalbench"|"swesmith"
---@field dir string the task in TB2 layout
---@field instruction string
---@field config TaskConfig
---@field recipe Recipe the parsed environment/Dockerfile
---@field workdir string
---@field sha256 string content hash of the task (archive bytes or packed directory)
---@field where string file[:row] the task came from
---@field metadata table|nil
---@field has_solution boolean
---@field source table|nil where a registry task came from {name, git_url, git_commit_id, path, digest}

local DEFAULTS = { verifier_timeout = 600, agent_timeout = 900, build_timeout = 600 }

local function bad(where, field, msg)
  errors.raise(errors.EDATASET, string.format('%s: %s: %s', where, field, msg))
end

--- A name from the row that becomes a path: its confined normal form, or a refusal naming the
--- row and field (cseng.lib.confine: no absolute path, no .., no control character, bounded).
local function confined(where, field, s)
  local n, why = confine.name(s)
  if not n then bad(where, field, tostring(s):sub(1, 200):gsub('%c', '?') .. ' ' .. why) end
  return n
end

local function num(where, t, path, default)
  local v = t
  for part in path:gmatch('[^.]+') do
    if type(v) ~= 'table' then v = nil break end
    v = v[part]
  end
  if v == nil then return default end
  if type(v) ~= 'number' then bad(where, 'task.toml ' .. path, 'expected a number, got ' .. type(v)) end
  -- nan, infinities and negatives would disable or break the bound they set
  if v ~= v or v < 0 or v == math.huge then bad(where, 'task.toml ' .. path, 'expected a finite number >= 0, got ' .. tostring(v)) end
  if path:match('timeout_sec$') and (v <= 0 or v > 7 * 86400) then
    bad(where, 'task.toml ' .. path, 'expected seconds in (0, 604800], got ' .. tostring(v))
  end
  return v
end

local function strtable(where, t, path)
  local v = t
  for part in path:gmatch('[^.]+') do
    if type(v) ~= 'table' then return {} end
    v = v[part]
  end
  if v == nil then return {} end
  if type(v) ~= 'table' then bad(where, 'task.toml ' .. path, 'expected a table') end
  local out = {}
  for k, x in pairs(v) do
    if type(x) == 'table' then bad(where, 'task.toml ' .. path .. '.' .. k, 'expected a string') end
    out[k] = tostring(x)
  end
  return out
end

-- ---- Harbor's task schema 1.3 (src/harbor/models/task/config.py) --------------------------

local MODES = { ['no-network'] = true, public = true, allowlist = true }

-- allowed_hosts entries as Harbor normalizes them: lower case, no trailing dot, a hostname (or an
-- IPv4 literal, whose labels are digits) or a leading-wildcard pattern "*.example.com"
local function host_entry(where, field, h)
  if type(h) ~= 'string' then bad(where, field, 'expected a hostname string') end
  h = h:match('^%s*(.-)%s*$'):lower():gsub('%.$', '')
  if h == '' then bad(where, field, 'allowed_hosts entries must be non-empty hostnames') end
  if h:find('://', 1, true) or h:find('/', 1, true) or h:find(':', 1, true) then
    bad(where, field, 'allowed_hosts entries must be hostnames, not URLs, ports, or paths: ' .. h)
  end
  local rest = h
  if h:sub(1, 2) == '*.' then rest = h:sub(3)
  elseif h:find('*', 1, true) then bad(where, field, "allowed_hosts wildcard entries must use a leading '*.' prefix: " .. h) end
  for label in (rest .. '.'):gmatch('([^.]*)%.') do
    if not (label:match('^[a-z0-9]$') or label:match('^[a-z0-9][a-z0-9-]*[a-z0-9]$')) or #label > 63 then
      bad(where, field, 'allowed_hosts entries must be valid hostnames or leading wildcard host patterns: ' .. h)
    end
  end
  return h
end

-- One [environment] / [agent] / [verifier] network policy: {mode, hosts} or nil (not set).
local function network_policy(where, sec, path, baseline)
  if type(sec) ~= 'table' then return nil end
  local mode, hosts = sec.network_mode, sec.allowed_hosts
  if mode ~= nil and not MODES[mode] then
    bad(where, 'task.toml ' .. path .. '.network_mode', "expected 'no-network', 'public' or 'allowlist', got " .. tostring(mode))
  end
  if hosts ~= nil then
    if type(hosts) ~= 'table' then bad(where, 'task.toml ' .. path .. '.allowed_hosts', 'expected a list of hostnames') end
    if (mode or (baseline and 'public')) ~= 'allowlist' then
      bad(where, 'task.toml ' .. path .. '.allowed_hosts', "allowed_hosts is only valid when network_mode='allowlist'")
    end
    local out = {}
    for i, h in ipairs(hosts) do out[i] = host_entry(where, string.format('task.toml %s.allowed_hosts[%d]', path, i), h) end
    hosts = out
  end
  if mode == nil then return nil end
  return { mode = mode, hosts = hosts or {} }
end

-- artifacts = ["/path", {source, destination, exclude}]: Harbor's ArtifactConfig rules (no ..,
-- a relative destination that is not manifest.json)
local function artifacts_of(where, list, path)
  if list == nil then return {} end
  if type(list) ~= 'table' then bad(where, 'task.toml ' .. path, 'expected a list') end
  local out = {}
  for i, a in ipairs(list) do
    local f = string.format('task.toml %s[%d]', path, i)
    local e = type(a) == 'string' and { source = a } or a
    if type(e) ~= 'table' or type(e.source) ~= 'string' or e.source == '' then bad(where, f, 'expected a path or {source = ...}') end
    for part in e.source:gmatch('[^/]+') do if part == '..' then bad(where, f .. '.source', "must not contain '..' components") end end
    local dest = e.destination
    if dest ~= nil and dest ~= '' then
      if type(dest) ~= 'string' or dest:sub(1, 1) == '/' or dest:find('\\', 1, true) then
        bad(where, f .. '.destination', 'must be a relative path with forward slashes')
      end
      for part in dest:gmatch('[^/]+') do if part == '..' then bad(where, f .. '.destination', "must not contain '..' components") end end
      if dest:gsub('/+$', '') == 'manifest.json' then bad(where, f .. '.destination', "'manifest.json' is reserved") end
    else
      dest = nil
    end
    local excl = {}
    for j, x in ipairs(type(e.exclude) == 'table' and e.exclude or {}) do
      if type(x) ~= 'string' then bad(where, f .. '.exclude[' .. j .. ']', 'expected a pattern string') end
      excl[j] = x
    end
    if e.service ~= nil and e.service ~= 'main' then bad(where, f .. '.service', 'sidecar services are not supported (main only)') end
    out[i] = { source = e.source, destination = dest, exclude = excl }
  end
  return out
end

-- min_reward: a number (gates the `reward` key) or {key = threshold}
local function min_reward_of(where, v, path)
  if v == nil then return nil end
  if type(v) == 'number' then return { reward = v } end
  if type(v) ~= 'table' then bad(where, 'task.toml ' .. path, 'expected a number or a table of key = threshold') end
  local out = {}
  for k, x in pairs(v) do
    if type(x) ~= 'number' then bad(where, 'task.toml ' .. path .. '.' .. tostring(k), 'expected a number') end
    out[k] = x
  end
  return out
end

--- Read task.toml into a TaskConfig.
function dataset.config(text, where)
  local t, err = toml.parse(text, 'task.toml')
  if not t then bad(where, 'task.toml', err) end
  local env = t.environment or {}
  if type(env) ~= 'table' then bad(where, 'task.toml environment', 'expected a table') end
  local allow = env.allow_internet
  if allow ~= nil and type(allow) ~= 'boolean' then
    bad(where, 'task.toml environment.allow_internet', 'expected true or false')
  end
  -- the network: [environment] is the baseline (Harbor's default public; the deprecated
  -- allow_internet maps to public / no-network when network_mode is not set), [agent] and
  -- [verifier] override it for their phase
  local baseline = network_policy(where, env, 'environment', true)
  if not baseline then
    if allow ~= nil then baseline = { mode = allow and 'public' or 'no-network', hosts = {} }
    else baseline = { mode = 'public', hosts = {}, default = true } end
  end
  local meta = type(t.metadata) == 'table' and t.metadata or {}
  local primary = meta.primary_metric
  if primary ~= nil and type(primary) ~= 'string' then bad(where, 'task.toml metadata.primary_metric', 'expected a reward key (a string)') end
  local strategy = t.multi_step_reward_strategy
  if strategy ~= nil and strategy ~= 'mean' and strategy ~= 'final' then
    bad(where, 'task.toml multi_step_reward_strategy', "expected 'mean' or 'final', got " .. tostring(strategy))
  end
  local steps
  if t.steps ~= nil then
    if type(t.steps) ~= 'table' or #t.steps == 0 then bad(where, 'task.toml steps', 'expected [[steps]] tables') end
    steps = {}
    local names = {}
    for i, st in ipairs(t.steps) do
      local at = string.format('steps[%d]', i)
      if type(st) ~= 'table' or type(st.name) ~= 'string' or st.name == '' then bad(where, 'task.toml ' .. at .. '.name', 'required, a string') end
      local n = confine.name(st.name)
      if not n or n:find('/', 1, true) then bad(where, 'task.toml ' .. at .. '.name', 'a folder name under steps/: ' .. st.name) end
      if names[st.name] then bad(where, 'task.toml ' .. at .. '.name', 'repeats step ' .. st.name) end
      names[st.name] = true
      steps[i] = {
        name = st.name,
        agent_timeout = num(where, st, 'agent.timeout_sec', nil),
        verifier_timeout = num(where, st, 'verifier.timeout_sec', nil),
        verifier_env = strtable(where, st, 'verifier.env'),
        agent_network = network_policy(where, st.agent, at .. '.agent'),
        verifier_network = network_policy(where, st.verifier, at .. '.verifier'),
        min_reward = min_reward_of(where, st.min_reward, at .. '.min_reward'),
        artifacts = artifacts_of(where, st.artifacts, at .. '.artifacts'),
      }
    end
  end
  return {
    schema_version = type(t.schema_version or t.version) == 'string' and (t.schema_version or t.version) or nil,
    network = { environment = baseline, agent = network_policy(where, t.agent, 'agent'),
      verifier = network_policy(where, t.verifier, 'verifier') },
    primary_metric = primary,
    artifacts = artifacts_of(where, t.artifacts, 'artifacts'),
    steps = steps,
    multi_step_reward_strategy = strategy,
    verifier_timeout = num(where, t, 'verifier.timeout_sec', DEFAULTS.verifier_timeout),
    agent_timeout = num(where, t, 'agent.timeout_sec', DEFAULTS.agent_timeout),
    build_timeout = num(where, t, 'environment.build_timeout_sec', DEFAULTS.build_timeout),
    cpus = num(where, t, 'environment.cpus', nil),
    memory_mb = num(where, t, 'environment.memory_mb', nil),
    storage_mb = num(where, t, 'environment.storage_mb', nil),
    gpus = num(where, t, 'environment.gpus', nil),
    allow_internet = allow == true,
    verifier_env = strtable(where, t, 'verifier.env'),
    solution_env = strtable(where, t, 'solution.env'),
    agent_env = strtable(where, t, 'agent.env'),
    docker_image = type(env.docker_image) == 'string' and env.docker_image or nil,
    raw = t,
  }
end

--- Finish a task whose TB2 directory exists: read task.toml, instruction, Dockerfile.
local function from_dir(dir, where, fields)
  local task = fields or {}
  task.dir = dir
  task.where = where
  local toml_text = fs.read(dir .. '/task.toml')
  task.config = dataset.config(toml_text or '', where)
  local steps = task.config.steps
  if steps then -- [[steps]]: each step's instruction, and a verifier for each (its own, or the shared tests/)
    for _, st in ipairs(steps) do
      local sd = dir .. '/steps/' .. st.name
      st.instruction = fs.read(sd .. '/instruction.md')
      if not st.instruction then bad(where, 'steps/' .. st.name .. '/instruction.md', 'missing') end
      st.has_tests = fs.exists(sd .. '/tests/test.sh')
      if not st.has_tests and not fs.exists(dir .. '/tests/test.sh') then
        bad(where, 'steps/' .. st.name .. '/tests/test.sh', 'missing, and no shared tests/test.sh')
      end
      st.has_solution = fs.exists(sd .. '/solution/solve.sh')
      st.has_workdir = fs.exists(sd .. '/workdir')
    end
  end
  if not task.instruction then
    local ins = fs.read(dir .. '/instruction.md')
    if not ins and steps then ins = steps[1].instruction end
    if not ins then bad(where, 'instruction.md', 'missing') end
    task.instruction = ins
  end
  local df_text = fs.read(dir .. '/environment/Dockerfile')
  if df_text then
    local recipe, err = dockerfile.parse(df_text, 'environment/Dockerfile')
    if not recipe then bad(where, 'environment/Dockerfile', err) end
    task.recipe = recipe
  else
    task.recipe = { from = nil, env = {}, env_order = {}, copies = {}, runs = {}, stages = 0 }
  end
  if not steps and not fs.exists(dir .. '/tests/test.sh') then bad(where, 'tests/test.sh', 'missing') end
  task.has_solution = fs.exists(dir .. '/solution/solve.sh') and true or false
  if steps then
    local all = true
    for _, st in ipairs(steps) do if not st.has_solution and not task.has_solution then all = false end end
    task.has_solution = all
  end
  task.workdir = task.workdir or task.recipe.workdir or '/workspace'
  task.format = task.format or 'terminalbench'
  return task
end

local function cache_dir(opts)
  local d = opts.cache_dir or util.cache_dir() .. '/tasks'
  errors.check(nil, fs.mkdir_p(d))
  return d
end

--- A seed row: the task archive, base64 in task_files.
local function from_seed_row(row, where, opts)
  if type(row.task_id) ~= 'string' or row.task_id == '' then bad(where, 'task_id', 'missing or not a string') end
  confined(where, 'task_id', row.task_id)
  local tf = row.task_files
  if type(tf) == 'string' then -- parquet exports store it as a JSON string
    local ok, decoded = pcall(cjson.decode, tf)
    if ok then tf = decoded end
  end
  if type(tf) ~= 'table' then bad(where, 'task_files', 'missing or not an object') end
  if tf.encoding ~= 'tar.gz+base64' then
    bad(where, 'task_files.encoding', string.format("expected 'tar.gz+base64', got %s", tostring(tf.encoding)))
  end
  if type(tf.content) ~= 'string' then bad(where, 'task_files.content', 'missing or not a string') end
  local bytes, err = crypto.unbase64(tf.content)
  if not bytes then bad(where, 'task_files.content', 'not valid base64: ' .. tostring(err)) end
  local sha = crypto.sha256_hex(bytes)
  local dir = cache_dir(opts) .. '/' .. sha:sub(1, 24)
  if not fs.exists(dir .. '/.complete') then
    local tmp = dir .. '.tmp' .. tostring(require('cseng.sys').pid())
    fs.remove_tree(tmp)
    errors.check(nil, fs.mkdir_p(tmp))
    -- decoded content is bytes, always: a base64 that decodes to a host path must never open it
    local ok, xerr = archive.extract(bytes, tmp, { from = 'bytes', max_bytes = opts.max_task_bytes })
    if not ok then
      fs.remove_tree(tmp)
      bad(where, 'task_files.content', 'archive refused: ' .. tostring(xerr))
    end
    fs.write(tmp .. '/.complete', sha .. '\n')
    fs.remove_tree(dir)
    errors.check(nil, fs.rename(tmp, dir))
  end
  local instruction = row.instruction or row.prompt
  if instruction ~= nil and type(instruction) ~= 'string' then bad(where, 'instruction', 'not a string') end
  local task = from_dir(dir, where, {
    id = row.task_id, instruction = instruction, sha256 = sha, metadata = row.metadata,
  })
  local env_type = type(row.metadata) == 'table' and row.metadata.env_type or nil
  if env_type and tostring(env_type):find('swesmith') then
    task.format = 'swesmith'
    task.workdir = task.recipe.workdir or '/testbed'
  end
  return task
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

--- A SWE-smith row: build the TB2 layout from the repository snapshot and the patch.
local function from_swesmith_row(row, where, opts)
  local function need(field, kind)
    if type(row[field]) ~= kind then bad(where, field, 'missing or not a ' .. kind) end
    return row[field]
  end
  local id = need('instance_id', 'string')
  confined(where, 'instance_id', id)
  local patch = need('patch', 'string')
  local f2p, p2p = need('FAIL_TO_PASS', 'table'), row.PASS_TO_PASS or {}
  if type(p2p) ~= 'table' then bad(where, 'PASS_TO_PASS', 'not a list') end
  if #f2p == 0 then bad(where, 'FAIL_TO_PASS', 'empty: nothing would show the fix') end
  local envr = row.environment or {}
  local src = envr.source_dir
  if type(src) ~= 'string' then bad(where, 'environment.source_dir', 'missing: the repository snapshot to stage') end
  -- A dataset names its repository snapshot relative to its own folder (or that folder's parent:
  -- data/swesmith/x.jsonl names swesmith/repos/r, relative to data/), never by an absolute or a
  -- climbing path: a row must not make cseng read, and for a cloud provider upload, a host
  -- directory. --source-root DIR (opts.source_root) names another folder to resolve inside.
  src = confined(where, 'environment.source_dir', src)
  local dataset_dir = opts.base_dir or '.'
  local roots = opts.source_root and { opts.source_root } or { dataset_dir, util.dirname(dataset_dir) }
  local found
  for _, base in ipairs(roots) do
    if fs.lstat(base .. '/' .. src) then
      local p, why = confine.path(base, src)
      if not p then bad(where, 'environment.source_dir', src .. ' ' .. why .. ' (' .. base .. ')') end
      found = p
      break
    end
  end
  if not found then
    bad(where, 'environment.source_dir', src .. ' not found in ' .. table.concat(roots, ' or '))
  end
  src = found
  -- Every test id names a file of the snapshot (the part before '::'): confined here, before
  -- anything is read or written, so no row writes outside the task's folder or reads a host file.
  local files, seen = {}, {}
  for _, pair in ipairs({ { 'FAIL_TO_PASS', f2p }, { 'PASS_TO_PASS', p2p } }) do
    for i, t in ipairs(pair[2]) do
      local field = string.format('%s[%d]', pair[1], i)
      if type(t) ~= 'string' then bad(where, field, 'not a string') end
      local file = confined(where, field, t:match('^([^:]*)') or '')
      if not seen[file] then
        seen[file] = true
        local p, why = confine.path(src, file)
        if not p then bad(where, field, 'test file ' .. file .. ' ' .. why .. ' in the repository snapshot') end
        local st = fs.stat(p)
        if not st or st.type ~= 'file' then bad(where, field, 'test file ' .. file .. ' is not a regular file') end
        files[#files + 1] = { name = file, path = p }
      end
    end
  end
  table.sort(files, function(a, b) return a.name < b.name end)
  local sha = crypto.sha256_hex(cjson.encode({ id, patch, f2p, p2p, archive.pack_dir(src, { modes = 'normalize' }) }))
  local dir = cache_dir(opts) .. '/' .. sha:sub(1, 24)
  if not fs.exists(dir .. '/.complete') then
    fs.remove_tree(dir)
    local testbed = dir .. '/environment/testbed'
    errors.check(nil, fs.mkdir_p(dir .. '/environment'))
    errors.check(nil, fs.copy_tree(src, testbed))
    local res = proc.run { argv = { 'patch', '-p1', '--forward', '--batch', '-d', testbed }, stdin = patch, timeout = 60 }
    if not res or res.code ~= 0 then
      fs.remove_tree(dir)
      bad(where, 'patch', 'does not apply to ' .. envr.source_dir .. ': ' .. util.trim((res and res.stdout or '') .. (res and res.stderr or '')))
    end
    fs.remove_tree(testbed .. '/.pytest_cache')
    -- every test file the instance names is restored fresh for the verify window (names
    -- confined above: the destination is inside the new task folder)
    for _, f in ipairs(files) do
      local data = fs.read(f.path)
      if not data then fs.remove_tree(dir); bad(where, 'FAIL_TO_PASS', 'test file ' .. f.name .. ' is not readable') end
      errors.check(nil, fs.mkdir_p(util.dirname(dir .. '/tests/files/' .. f.name)))
      errors.check(nil, fs.write(dir .. '/tests/files/' .. f.name, data))
    end
    local ids = {}
    for _, list in ipairs({ f2p, p2p }) do for _, t in ipairs(list) do ids[#ids + 1] = shell_quote(t) end end
    fs.write(dir .. '/environment/Dockerfile', table.concat({
      'FROM ' .. (row.image_name or 'cseng/debian:bookworm'),
      'WORKDIR /testbed',
      'COPY testbed/ /testbed/',
      '',
    }, '\n'))
    errors.check(nil, fs.mkdir_p(dir .. '/solution'))
    fs.write(dir .. '/solution/fix.patch', patch)
    fs.write(dir .. '/solution/solve.sh', table.concat({
      '#!/bin/bash',
      '# Gold: reverse the bug-inducing patch (a no-op when it is already reversed).',
      'set -e',
      'cd /testbed',
      'if patch -p1 -R --dry-run --batch -s < /solution/fix.patch >/dev/null 2>&1; then',
      '  patch -p1 -R --batch < /solution/fix.patch',
      'fi',
      '',
    }, '\n'), { mode = tonumber('755', 8) })
    fs.write(dir .. '/tests/test.sh', table.concat({
      '#!/bin/bash',
      '# SWE-smith verifier: restore the named test files, run FAIL_TO_PASS + PASS_TO_PASS.',
      'cd /testbed',
      'cp -r /tests/files/. /testbed/ 2>/dev/null || true',
      'export PYTHONDONTWRITEBYTECODE=1',
      'python3 -m pytest -q -p no:cacheprovider ' .. table.concat(ids, ' '),
      'code=$?',
      'if [ $code -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi',
      'exit $code',
      '',
    }, '\n'), { mode = tonumber('755', 8) })
    fs.write(dir .. '/instruction.md', row.problem_statement or ('Fix the bug in ' .. tostring(row.repo) .. ' so that its tests pass.'))
    fs.write(dir .. '/task.toml', table.concat({
      'version = "1.0"', '[metadata]', 'source = "swesmith"', '[verifier]', 'timeout_sec = 300.0',
      '[agent]', 'timeout_sec = 900.0', '[environment]', 'allow_internet = false', '',
    }, '\n'))
    fs.write(dir .. '/.complete', sha .. '\n')
  end
  local task = from_dir(dir, where, {
    id = id, sha256 = sha, format = 'swesmith', workdir = '/testbed',
    metadata = { repo = row.repo, FAIL_TO_PASS = f2p, PASS_TO_PASS = p2p, image_name = row.image_name },
  })
  return task
end

--- Normalize one row (a decoded JSON object, or a parquet row) into a Task.
function dataset.from_row(row, where, opts)
  if type(row) ~= 'table' then bad(where, 'row', 'not a JSON object') end
  -- parquet exports nest the seed row under metadata.instance
  if row.task_id == nil and row.instance_id == nil and type(row.metadata) == 'table'
      and type(row.metadata.instance) == 'table' then
    local inner = row.metadata.instance
    for k, v in pairs(row) do if inner[k] == nil and k ~= 'metadata' then inner[k] = v end end
    row = inner
  end
  if row.task_files ~= nil then return from_seed_row(row, where, opts) end
  if row.instance_id ~= nil then return from_swesmith_row(row, where, opts) end
  bad(where, 'task_id', 'row has neither task_files (TerminalBench) nor instance_id (SWE-smith)')
end

local function load_rows(path, push)
  local lower = path:lower()
  if lower:match('%.parquet$') then
    local parquet = require('cseng.workload.parquet')
    local rows, err, code = parquet.rows(path)
    if not rows then errors.raise(code or errors.EDATASET, path .. ': ' .. tostring(err)) end
    for i, row in ipairs(rows) do push(row, string.format('%s: row %d', path, i)) end
    return
  end
  -- lines are read one at a time and refused past the cap: a huge line is never loaded whole
  local jsonl = require('cseng.lib.jsonl')
  local max = math.tointeger(tonumber(os.getenv('CSENG_MAX_LINE_BYTES') or '')) or dataset.MAX_LINE_BYTES
  local lines, err = jsonl.lines(path, { max_line = max })
  if not lines then errors.raise(errors.EIO, tostring(err)) end
  while true do
    local lok, line, n = pcall(lines)
    if not lok then
      local at, cap = tostring(type(line) == 'table' and line.message or line):match(': line (%d+) is over (%d+) bytes$')
      if not at then error(line, 0) end -- an error object from the reader
      errors.raise(errors.EDATASET, string.format('%s: row %s: line is over %s bytes (CSENG_MAX_LINE_BYTES raises the cap)', path, at, cap))
    end
    if not line then break end
    if line:match('%S') then
      local ok, row = pcall(cjson.decode, line)
      if not ok then
        push(nil, string.format('%s: row %d', path, n), 'not valid JSON: ' .. tostring(row):gsub('^.-: ', ''))
      else
        push(row, string.format('%s: row %d', path, n))
      end
    end
  end
end

--- The longest dataset line read (bytes); the environment's CSENG_MAX_LINE_BYTES overrides it.
dataset.MAX_LINE_BYTES = 64 * 1024 * 1024

--- Load a dataset: a .jsonl/.parquet file, a TB2 task directory, or a folder of them.
--- opts.skip_bad_rows: record bad rows in the second result instead of raising.
---@return Task[] tasks, {where:string, error:string}[] bad
function dataset.load(path, opts)
  opts = opts or {}
  local tasks, bads = {}, {}
  opts.base_dir = opts.base_dir or util.dirname(path)
  local function add(fn, ...)
    local ok, t = pcall(fn, ...)
    if ok then
      t.index = #tasks
      tasks[#tasks + 1] = t
    elseif opts.skip_bad_rows then
      bads[#bads + 1] = { where = select(2, ...), error = errors.line(t) }
    else
      error(t, 0)
    end
  end
  local st = fs.stat(path)
  if not st then errors.raise(errors.ENOENT, path .. ': no such dataset file or directory') end
  if st.type == 'dir' then
    if fs.exists(path .. '/task.toml') then
      add(function(d, w)
        return from_dir(d, w, { id = util.basename(d), sha256 = crypto.sha256_hex(archive.pack_dir(d, { modes = 'normalize' })) })
      end, path, path)
    else
      for _, name in ipairs(fs.list(path)) do
        local d = path .. '/' .. name
        if fs.exists(d .. '/task.toml') then
          add(function(dd, w) return from_dir(dd, w, { id = name, sha256 = crypto.sha256_hex(archive.pack_dir(dd, { modes = 'normalize' })) }) end, d, d)
        end
      end
      if #tasks == 0 and #bads == 0 then errors.raise(errors.EDATASET, path .. ': no task directories (with task.toml) inside') end
    end
  else
    load_rows(path, function(row, where, err)
      if err then
        if opts.skip_bad_rows then bads[#bads + 1] = { where = where, error = where .. ': ' .. err }
        else errors.raise(errors.EDATASET, where .. ': ' .. err) end
        return
      end
      add(dataset.from_row, row, where, opts)
    end)
  end
  local seen = {}
  for _, t in ipairs(tasks) do
    if seen[t.id] then errors.raise(errors.EDATASET, string.format('%s: task id %s repeats %s', t.where, t.id, seen[t.id])) end
    seen[t.id] = t.where
  end
  return tasks, bads
end

--- A dataset by name through a Harbor registry (lua/cseng/workload/registry.lua): its tasks
--- fetched at their pinned commits and checked against the registry's digests, loaded as task
--- folders. Returns the tasks and the record of the resolution (name, version, the pins).
---@param spec string NAME@VERSION, org/name@ref
---@param src string the registry (--registry)
---@return Task[] tasks, table resolved
function dataset.load_registry(spec, src, opts)
  opts = opts or {}
  local registry = require('cseng.workload.registry')
  local fetched, resolved = registry.resolve(src, spec, opts)
  local tasks, seen = {}, {}
  for _, f in ipairs(fetched) do
    if seen[f.id] then errors.raise(errors.EDATASET, string.format('%s: task id %s repeats %s', f.where, f.id, seen[f.id])) end
    seen[f.id] = f.where
    local t = from_dir(f.dir, f.where, { id = f.id, sha256 = f.sha256, source = f.source })
    t.index = #tasks
    tasks[#tasks + 1] = t
  end
  return tasks, resolved
end

--- Select tasks: index = 'all' | N (0-based); limit = max count.
--- A shell-style glob (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`) as an anchored Lua pattern.
function dataset.glob_pattern(glob)
  local out, i = { '^' }, 1
  while i <= #glob do
    local c = glob:sub(i, i)
    if c == '*' then out[#out + 1] = '.*'
    elseif c == '?' then out[#out + 1] = '.'
    elseif c == '[' then
      local j = glob:find(']', i + 2, true)
      if not j then out[#out + 1] = '%['
      else
        local body = glob:sub(i + 1, j - 1):gsub('^!', '^'):gsub('([%%%.%(%)%+%*%?%$])', '%%%1')
        out[#out + 1] = '[' .. body .. ']'
        i = j
      end
    else out[#out + 1] = c:gsub('[%^%$%(%)%%%.%[%]%*%+%-%?]', '%%%0') end
    i = i + 1
  end
  out[#out + 1] = '$'
  return table.concat(out)
end

--- The tasks to run: one by 0-based index (or all), only those whose id matches one of `names`
--- (exact ids or shell-style globs, `--tasks 'git-*'`), then at most `limit`. A name that matches
--- nothing is an error naming it.
---@param tasks table[]
---@param index? string|integer
---@param limit? integer
---@param names? string[]
function dataset.select(tasks, index, limit, names)
  local out = {}
  if index == nil or index == 'all' then
    for _, t in ipairs(tasks) do out[#out + 1] = t end
  else
    local i = math.tointeger(tonumber(index))
    if not i or i < 0 or i >= #tasks then
      errors.raise(errors.EUSAGE, string.format('--task-index %s is out of range (the dataset has %d tasks, 0-%d)', tostring(index), #tasks, #tasks - 1))
    end
    out[1] = tasks[i + 1]
  end
  if names and #names > 0 then
    local pats, hits = {}, {}
    for k, n in ipairs(names) do pats[k] = dataset.glob_pattern(n); hits[k] = 0 end
    local kept = {}
    for _, t in ipairs(out) do
      local keep = false
      for k, p in ipairs(pats) do
        if tostring(t.id):match(p) then hits[k] = hits[k] + 1; keep = true end
      end
      if keep then kept[#kept + 1] = t end
    end
    for k, n in ipairs(names) do
      if hits[k] == 0 then
        errors.raise(errors.EUSAGE, string.format("--tasks: no task matches '%s' (%d task(s) to choose from; cseng dataset info lists them)",
          n, #out))
      end
    end
    out = kept
  end
  if limit and limit < #out then
    for i = #out, limit + 1, -1 do out[i] = nil end
  end
  return out
end

return dataset
