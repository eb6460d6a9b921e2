--- Staging: what goes into a sandbox, and when.
---
--- Rules (so a planted conftest.py or a symlinked log directory cannot fake a reward):
---   * the agent-visible workdir never holds solution/ (the gold solver uploads it to /solution
---     and removes it after solving);
---   * tests/ is copied in fresh only for the verify window, after /tests and /logs/verifier are
---     removed and recreated (rm -rf removes a planted symlink, not its target), and config files
---     pytest would read from / are removed;
---   * for providers that do not build the Dockerfile (local), COPY/ADD of build-context files,
---     ENV and WORKDIR are applied by cseng; RUN steps are not, and are reported as fidelity gaps.
local archive = require 'cseng.archive'
local fs = require 'cseng.fs'
local cjson = require 'cjson'
local errors = require 'errors'
local util = require 'util'

local staging = {}

staging.VERIFY_RESET = table.concat({
  'rm -rf /tests /logs/verifier',
  'mkdir -p /tests /logs/verifier',
  'chmod 0777 /logs/verifier',
  'rm -f /conftest.py /pytest.ini /tox.ini /setup.cfg /pyproject.toml',
}, ' && ')

staging.READ_REWARD = [[
if [ -f /logs/verifier/reward.txt ]; then echo "cseng-reward:txt"; head -c 4096 /logs/verifier/reward.txt
elif [ -f /logs/verifier/reward.json ]; then echo "cseng-reward:json"; head -c 65536 /logs/verifier/reward.json
else echo "cseng-reward:none"; fi]]

--- Reward from READ_REWARD's output; falls back to the verifier's exit code.
--- Returns reward (number), rule ("reward.txt" | "reward.json" | "exit_code").
function staging.parse_reward(out, exit_code)
  local kind, body = tostring(out or ''):match('^cseng%-reward:(%a+)\n?(.*)$')
  if kind == 'txt' then
    local v = tonumber(util.trim(body))
    if v then return v, 'reward.txt' end
  elseif kind == 'json' then
    local ok, j = pcall(cjson.decode, body)
    if ok then
      if type(j) == 'number' then return j, 'reward.json' end
      if type(j) == 'table' and type(j.reward) == 'number' then return j.reward, 'reward.json' end
    end
  end
  return exit_code == 0 and 1 or 0, 'exit_code'
end

--- Map an image through user substitutions (dockerfile.map_image).
staging.map_image = require('dockerfile').map_image

function staging.labels(run, t)
  return {
    ['cseng.run'] = run.id,
    ['cseng.launcher'] = run.launcher,
    ['cseng.task'] = t.id,
    ['cseng.created'] = tostring(os.time()),
  }
end

--- The create() spec of a task's sandbox.
function staging.sandbox_spec(run, t)
  local applies = run.provider.applies_dockerfile
  local c = t.config
  local ttl = (run.opts.timeout_seconds or (c.agent_timeout + c.verifier_timeout + 600))
  return {
    task = t,
    labels = staging.labels(run, t),
    image = staging.map_image(c.docker_image or t.recipe.from, run.opts.image_map),
    env = applies and {} or util.copy(t.recipe.env),
    workdir = t.workdir,
    network = c.allow_internet and run.opts.allow_network or false,
    cpus = c.cpus, memory_mb = c.memory_mb, disk_mb = c.storage_mb,
    ttl_seconds = math.ceil(ttl),
    mode = run.opts.mode,
  }
end

--- What a provider that builds images needs.
function staging.build_request(run, t)
  return {
    task_id = t.id,
    context_dir = t.dir .. '/environment',
    dockerfile = 'Dockerfile',
    image_map = run.opts.image_map,
    timeout = t.config.build_timeout,
    labels = staging.labels(run, t),
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
---@field exec fun(self, cmd:string, o?:table):table|nil, string?, string?
---@field put fun(self, dir:string, tar:string):boolean|nil, string?, string?
---@field get fun(self, path:string):string|nil, string?, string?

-- The run behind each context, for staging's own steps (solvers see only the context).
local run_of = setmetatable({}, { __mode = 'k' })

--- The run a context was made for (staging's steps only; solvers get the context alone).
function staging.run_of(ctx) return run_of[ctx] end

--- The object solvers and staging steps use to reach the sandbox: the task, the sandbox's
--- exec/put/get, the run's options and getenv; not the run itself.
function staging.context(run, t, sb)
  local provider, client = run.provider, run.client
  local ctx = {
    task = t, sb = sb, workdir = t.workdir, options = run.opts, getenv = run.getenv,
    timeout = run.opts.solve_timeout_seconds or t.config.agent_timeout,
    applies_dockerfile = provider.applies_dockerfile and true or false,
  }
  function ctx:exec(cmd, o)
    o = util.copy(o)
    o.cwd = o.cwd or self.workdir
    return provider.exec(client, sb, cmd, o)
  end
  ctx.put = function(_, dir, tar) return provider.put(client, sb, dir, tar) end
  ctx.get = function(_, path) return provider.get(client, sb, path) end
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
    if part == '..' then return nil, src .. ': outside the build context' end
  end
  if not clean:find('[%*%?]') then
    local p = ctx_dir .. '/' .. clean
    if not fs.lstat(p) then return nil, src .. ': not found in the build context' end
    return { p }
  end
  local dir, pat = clean:match('^(.-)/?([^/]*)$')
  local base = dir ~= '' and (ctx_dir .. '/' .. dir) or ctx_dir
  local out = {}
  for _, name in ipairs(fs.list(base) or {}) do
    if name:match(glob_to_pattern(pat)) then out[#out + 1] = base .. '/' .. name end
  end
  if #out == 0 then return nil, src .. ': no match in the build context' end
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

--- What a provider that does not build the Dockerfile leaves out.
function staging.fidelity_gaps(provider, t)
  local gaps = {}
  if provider.applies_dockerfile then return gaps end
  local r = t.recipe
  if r.from then
    gaps[#gaps + 1] = { kind = 'FROM', text = 'base image ' .. r.from .. ' not used: the sandbox runs on the host /usr' }
  end
  for _, run in ipairs(r.runs) do
    gaps[#gaps + 1] = { kind = 'RUN', line = run.line, text = run.cmd }
  end
  if r.user and r.user ~= 'root' and r.user ~= '0' then
    gaps[#gaps + 1] = { kind = 'USER', text = 'USER ' .. r.user .. ' not applied: commands run as root' }
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
