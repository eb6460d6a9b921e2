--- Staging: what goes into a sandbox, and when.
---
--- Rules (so a planted conftest.py or a symlinked log directory cannot fake a reward):
---   * the agent-visible workdir never holds solution/ (the gold solver uploads it to /solution
---     and removes it after solving);
---   * tests/ is copied in fresh only for the verify window, after /tests and /logs/verifier are
---     removed and recreated (rm -rf removes a planted symlink, not its target), and config files
---     pytest would read from / are removed;
---   * the environment is made one of three ways (staging.env_mode): "native" (the provider
---     builds the recipe: docker's image build, local's cached overlay layer), "replay" (a
---     provider without builds: cseng replays the recipe's steps in the sandbox, lua/cseng/workload/replay.lua;
---     a recipe without RUN/USER steps is staged with one upload of the COPY sources, as
---     before), "host" (local --host-root: COPY/ENV/WORKDIR staged by cseng, RUN steps recorded
---     as fidelity gaps).
local archive = require('cseng.archive')
local fs = require('cseng.fs')
local cjson = require('cjson')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local staging = {}

staging.VERIFY_RESET = table.concat({
  'rm -rf /tests /logs/verifier',
  'mkdir -p /tests /logs/verifier',
  'chmod 0777 /logs/verifier',
  'rm -f /conftest.py /pytest.ini /tox.ini /setup.cfg /pyproject.toml',
}, ' && ')

-- both reward files, each base64 (one line; absent: empty): Harbor reads reward.json first and
-- takes `reward` from reward.txt when the JSON lacks it
staging.READ_REWARD = [[
printf 'cseng-reward-json:'; if [ -f /logs/verifier/reward.json ]; then head -c 65536 /logs/verifier/reward.json | base64 -w0; else printf -- -; fi; echo
printf 'cseng-reward-txt:'; if [ -f /logs/verifier/reward.txt ]; then head -c 4096 /logs/verifier/reward.txt | base64 -w0; else printf -- -; fi; echo]]

--- Every reward the verifier wrote, as Harbor reads them (src/harbor/verifier/verifier.py):
--- reward.json's numeric members (booleans and other values ignored), with `reward` from
--- reward.txt when the JSON has none; else reward.txt as {reward = N}. Returns the rewards (nil
--- when neither file held one) and the rule ("reward.json", "reward.txt", "reward.json+txt").
---@return table<string, number>|nil rewards, string|nil rule
function staging.read_rewards(out)
  local crypto = require('cseng.crypto')
  local function section(name)
    local b64 = tostring(out or ''):match('cseng%-reward%-' .. name .. ':([^\n]*)')
    if not b64 or b64 == '-' then return nil end
    return crypto.unbase64(b64) or nil
  end
  local rewards, rule
  local jtext, ttext = section('json'), section('txt')
  local txt = ttext and tonumber(util.trim(ttext)) or nil
  if jtext then
    local ok, j = pcall(cjson.decode, jtext)
    if ok and type(j) == 'table' then
      for k, v in pairs(j) do
        if type(k) == 'string' and type(v) == 'number' and v == v then rewards = rewards or {}; rewards[k] = v end
      end
      rule = 'reward.json'
      if rewards and rewards.reward == nil and txt then rewards.reward, rule = txt, 'reward.json+txt' end
      if not rewards and txt then rewards, rule = { reward = txt }, 'reward.txt' end
    elseif ok and type(j) == 'number' then
      rewards, rule = { reward = j }, 'reward.json'
    end
  end
  if not rewards and txt then rewards, rule = { reward = txt }, 'reward.txt' end
  return rewards, rewards and rule or nil
end

--- The reward that decides pass/fail from READ_REWARD's output: the primary metric (`primary`,
--- default `reward`; the only key when there is one), else the verifier's exit code. Returns
--- reward (number|nil), rule ("reward.json", "reward.txt", "reward.json+txt", "exit_code" or
--- "reward.json: no key K"), the rewards (every key) and the primary key used.
function staging.parse_reward(out, exit_code, primary)
  local rewards, rule = staging.read_rewards(out)
  if not rewards then return exit_code == 0 and 1 or 0, 'exit_code', nil, nil end
  local key = primary or 'reward'
  if rewards[key] == nil and not primary then
    local only, n = nil, 0
    for k in pairs(rewards) do only, n = k, n + 1 end
    if n == 1 then key = only end
  end
  if rewards[key] == nil then return nil, rule .. ': no key ' .. key, rewards, key end
  return rewards[key], rule, rewards, key
end

--- Map an image through user substitutions (dockerfile.map_image).
staging.map_image = require('cseng.workload.dockerfile').map_image

function staging.labels(run, t)
  return {
    ['cseng.run'] = run.id,
    ['cseng.launcher'] = run.launcher,
    ['cseng.task'] = t.id,
    ['cseng.created'] = tostring(os.time()),
  }
end

--- How a run's provider makes a task's environment: "native" | "replay" | "host". A provider
--- says so with env_mode(client); else one with a build() is native, one with replay = false
--- is host, any other replays.
function staging.env_mode(run)
  local P = run.provider
  if P.env_mode then return P.env_mode(run.client) end
  if P.build then return 'native' end
  if P.replay == false then return 'host' end
  return 'replay'
end

--- The recipe needs a replay in the sandbox (RUN steps, or a USER they run as); a recipe
--- without either is staged by one upload (staging.upload_environment).
function staging.needs_replay(rcp)
  for _, s in ipairs(rcp.steps or {}) do
    if s.op == 'RUN' then return true end
  end
  return false
end

--- A phase's network as the run will give it: the task's declared policy for the phase ({mode,
--- hosts}: the step's or the task's [agent]/[verifier] override, else [environment]'s), withheld
--- (no network) when the run was not started with --allow-network. Returns {mode, hosts, declared,
--- withheld}.
function staging.phase_network(run, t, phase, step)
  local n = t.config.network or { environment = { mode = t.config.allow_internet and 'public' or 'no-network', hosts = {} } }
  local declared = (step and step[phase .. '_network']) or n[phase] or n.environment
  local eff = { mode = declared.mode, hosts = declared.hosts or {}, declared = declared.mode }
  if declared.mode ~= 'no-network' and not run.opts.allow_network then
    eff.mode, eff.hosts = 'no-network', {}
    -- a task that said nothing gets cseng's offline default silently; one that asked is told
    if not declared.default then eff.withheld = 'the run was not started with --allow-network' end
  end
  return eff
end

--- Whether a task's sandbox needs the network at all: an installed agent calls its model from it,
--- or one of its phases (any step's) has the network.
function staging.needs_network(run, t)
  if run.solver and run.solver.needs_network then return true end
  local steps = t.config.steps or { false }
  for _, st in ipairs(steps) do
    for _, phase in ipairs({ 'agent', 'verifier' }) do
      if staging.phase_network(run, t, phase, st or nil).mode ~= 'no-network' then return true end
    end
  end
  return false
end

--- The create() spec of a task's sandbox.
function staging.sandbox_spec(run, t)
  local applies = staging.env_mode(run) == 'native'
  local c = t.config
  local ttl = (run.opts.timeout_seconds or (c.agent_timeout + c.verifier_timeout + 600))
  return {
    task = t,
    labels = staging.labels(run, t),
    image = staging.map_image(c.docker_image or t.recipe.from, run.opts.image_map),
    env = applies and {} or util.copy(t.recipe.env),
    workdir = t.workdir,
    -- an installed agent (lua/solvers/codex.lua) runs in the sandbox and calls its model endpoint from there
    network = staging.needs_network(run, t),
    -- ports of this machine's 127.0.0.1 the sandbox must reach as its own 127.0.0.1:PORT: the run's
    -- model proxy (lua/cseng/evals/proxy.lua), which installed agents call instead of their endpoint
    -- an installed agent's model: the proxy's port, or a loopback endpoint it calls itself
    host_ports = (run.evals and run.evals.model_proxy and { run.evals.model_proxy.port })
      or (run.evals and run.evals.model_endpoint_port and { run.evals.model_endpoint_port }) or nil,
    cpus = c.cpus, memory_mb = c.memory_mb, disk_mb = c.storage_mb,
    default_limits = run.opts.default_limits, -- what a provider that enforces limits uses where the task names none
    ttl_seconds = math.ceil(ttl),
    mode = run.opts.mode,
  }
end

--- What a provider that builds images needs (recipe: the task's BuildRecipe, lua/cseng/workload/recipe.lua).
function staging.build_request(run, t)
  return {
    recipe = require('cseng.workload.recipe').for_run(run, t),
    task_id = t.id,
    context_dir = t.dir .. '/environment',
    dockerfile = 'Dockerfile',
    image_map = run.opts.image_map,
    timeout = t.config.build_timeout,
    labels = staging.labels(run, t),
    network = run.opts.build_network ~= 'off', -- RUN steps get the network unless --build-network off
    limits = { cpus = t.config.cpus, memory_mb = t.config.memory_mb, disk_mb = t.config.storage_mb },
    default_limits = run.opts.default_limits,
  }
end

---@class SolveContext
---@field task Task
---@field sb table the sandbox
---@field workdir string
---@field timeout number solve timeout (seconds)
---@field options table the run options
---@field getenv fun(name:string):string|nil
---@field applies_dockerfile boolean whether the provider built the task's Dockerfile
---@field remote boolean whether the provider's sandboxes are elsewhere (its files travel over a network)
---@field max_upload_bytes integer|nil the provider's cap on one upload's bytes (client.max_upload_bytes or limits.max_upload_bytes)
---@field exec fun(self, cmd:string, o?:table):table|nil, string?, string?
---@field put fun(self, dir:string, tar:string):boolean|nil, string?, string?
---@field get fun(self, path:string):string|nil, string?, string?

-- The run behind each context, for staging's own steps (solvers see only the context).
local run_of = setmetatable({}, { __mode = 'k' })

--- The run a context was made for (staging's steps only; solvers get the context alone).
function staging.run_of(ctx) return run_of[ctx] end

--- The object solvers and staging steps use to reach the sandbox: the task, the sandbox's
--- exec/put/get, the run's options and getenv; not the run itself. extra: fields the trial adds
--- (session_id, budget, model_proxy, admission: the evals layer's and the run's).
function staging.context(run, t, sb, extra)
  local provider, client = run.provider, run.client
  local ctx = {
    task = t, sb = sb, workdir = t.workdir, options = run.opts, getenv = run.getenv,
    timeout = run.opts.solve_timeout_seconds or t.config.agent_timeout,
    applies_dockerfile = staging.env_mode(run) == 'native', -- the provider built the recipe (staging.env_mode)
    remote = provider.remote and true or false,
    -- what one upload may carry: the client's setting (E2B_MAX_UPLOAD_BYTES), else the adapter's limits
    max_upload_bytes = type(client) == 'table' and math.tointeger(client.max_upload_bytes)
      or math.tointeger(type(provider.limits) == 'table' and provider.limits.max_upload_bytes or nil),
  }
  function ctx:exec(cmd, o)
    o = util.copy(o)
    o.cwd = o.cwd or self.workdir
    return provider.exec(client, sb, cmd, o)
  end
  ctx.put = function(_, dir, tar) return provider.put(client, sb, dir, tar) end
  ctx.get = function(_, path) return provider.get(client, sb, path) end
  for k, v in pairs(extra or {}) do ctx[k] = v end
  run_of[ctx] = run
  return ctx
end

local function glob_to_pattern(g)
  return '^' .. g:gsub('[%^%$%(%)%%%.%[%]%+%-]', '%%%0'):gsub('%*', '[^/]*'):gsub('%?', '[^/]') .. '$'
end

-- Resolve a COPY source inside the build context (no escaping it), with * and ? globs.
local function resolve_sources(ctx_dir, src)
  local clean = src:gsub('^%./', ''):gsub('/+$', '')
  if clean == '' or clean == '.' then return { ctx_dir } end
  for part in clean:gmatch('[^/]+') do
    if part == '..' then return nil, src .. ': outside the build context', 'EUNSAFE' end
  end
  if not clean:find('[%*%?]') then
    local p = ctx_dir .. '/' .. clean
    if not fs.lstat(p) then return nil, src .. ': not found in the build context', 'ENOENT' end
    return { p }
  end
  local dir, pat = clean:match('^(.-)/?([^/]*)$')
  local base = dir ~= '' and (ctx_dir .. '/' .. dir) or ctx_dir
  local out = {}
  for _, name in ipairs(fs.list(base) or {}) do
    if name:match(glob_to_pattern(pat)) then out[#out + 1] = base .. '/' .. name end
  end
  if #out == 0 then return nil, src .. ': no match in the build context', 'ENOENT' end
  return out
end

--- Tar entries for a recipe's COPY/ADD steps (paths relative to /). Gaps are appended to gaps.
function staging.copy_entries(ctx_dir, recipe, gaps)
  local entries, seen = {}, {}
  local function add(e)
    if seen[e.path] then entries[seen[e.path]] = e else entries[#entries + 1] = e; seen[e.path] = #entries end
  end
  for _, c in ipairs(recipe.copies) do
    if c.from then
      gaps[#gaps + 1] = { kind = 'COPY --from', line = c.line, text = 'COPY --from=' .. tostring(c.from) .. ' is not applied' }
    else
      local into_dir = c.dst:sub(-1) == '/' or #c.src > 1
      for _, src in ipairs(c.src) do
        if c.add and src:match('^%a+://') then
          gaps[#gaps + 1] = { kind = 'ADD url', line = c.line, text = 'ADD of a URL is not fetched: ' .. src }
        else
          local paths, err = resolve_sources(ctx_dir, src)
          if not paths then errors.raise(errors.ESTAGING, 'environment/Dockerfile line ' .. c.line .. ': COPY ' .. err, { stage = 'upload' }) end
          for _, p in ipairs(paths) do
            local st = fs.stat(p)
            local dst = c.dst:gsub('/+$', '')
            if st and st.type == 'dir' then
              add({ path = dst:sub(2), type = 'dir' })
              for _, e in ipairs(fs.walk(p)) do
                local rel = dst:sub(2) .. '/' .. e.path
                if e.type == 'dir' then add({ path = rel, type = 'dir' })
                elseif e.type == 'link' then add({ path = rel, type = 'symlink', target = fs.readlink(p .. '/' .. e.path) })
                else add({ path = rel, file = p .. '/' .. e.path, mode = e.mode }) end
              end
            else
              local target = into_dir and (dst .. '/' .. util.basename(p)) or dst
              add({ path = target:sub(2), file = p, mode = st and st.mode })
            end
          end
        end
      end
    end
  end
  return entries
end

--- Upload phase for providers that do not build the Dockerfile: COPY/ADD sources into place.
function staging.upload_environment(ctx, rec)
  if ctx.applies_dockerfile then return end
  local gaps = {}
  local entries = staging.copy_entries(ctx.task.dir .. '/environment', ctx.task.recipe, gaps)
  if #entries > 0 then
    local tar = archive.pack(entries, { format = 'tar' })
    errors.check({ stage = 'upload', prefix = 'staging environment files: ' }, ctx:put('/', tar))
  end
  if rec then rec.staged_files = #entries end
end

--- Prepare phase: the directories every trial relies on; also the first exec of the sandbox.
function staging.prepare(ctx)
  local wd = util.shell_quote(ctx.workdir)
  local res = errors.check({ stage = 'prepare' }, ctx:exec('mkdir -p ' .. wd ..
    ' /logs/agent /logs/verifier /cseng && chmod 0777 /logs/verifier /cseng', { timeout = 120, cwd = '/' }))
  if res.code ~= 0 then
    errors.raise(errors.EPREPARE, 'preparing directories failed: ' .. util.trim(res.stderr), { stage = 'prepare' })
  end
end

function staging.write_instruction(ctx)
  local tar = archive.pack({ { path = 'instruction.md', data = ctx.task.instruction } }, { format = 'tar' })
  errors.check({ stage = 'instruction_write' }, ctx:put('/cseng', tar))
end

--- What a provider leaves out of the task's environment. With run (the runner passes it), the
--- env mode decides: native builds leave nothing out but what the provider reports
--- (provider.fidelity_gaps(client, task), e.g. local's base image); a replay runs every RUN
--- step; host mode (and a call without run, for a provider without builds) lists the RUN
--- steps it skipped.
function staging.fidelity_gaps(provider, t, run)
  local gaps = {}
  local mode = run and staging.env_mode(run) or (provider.applies_dockerfile and 'native' or 'host')
  if provider.fidelity_gaps and run then
    for _, g in ipairs(provider.fidelity_gaps(run.client, t, run) or {}) do gaps[#gaps + 1] = g end
  end
  if mode == 'native' then return gaps end
  local r = t.recipe
  if r.from and not provider.fidelity_gaps then
    gaps[#gaps + 1] = { kind = 'FROM', text = 'base image ' .. r.from .. (mode == 'host' and ' not used: the sandbox runs on the host /usr'
      or " not used: the provider's sandbox image stands in") }
  end
  if mode == 'host' then
    for _, run_ in ipairs(r.runs) do
      gaps[#gaps + 1] = { kind = 'RUN', line = run_.line, text = run_.cmd }
    end
    if r.user and r.user ~= 'root' and r.user ~= '0' then
      gaps[#gaps + 1] = { kind = 'USER', text = 'USER ' .. r.user .. ' not applied: commands run as root' }
    end
  end
  for _, c in ipairs(r.copies) do
    if c.from then gaps[#gaps + 1] = { kind = 'COPY --from', line = c.line, text = 'COPY --from=' .. tostring(c.from) } end
    for _, src in ipairs(c.src) do
      if c.add and src:match('^%a+://') then
        gaps[#gaps + 1] = { kind = 'ADD url', line = c.line, text = 'ADD of a URL is not fetched: ' .. src }
      end
    end
  end
  return gaps
end

return staging
