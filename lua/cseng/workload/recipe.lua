--- The build recipe of a task: what every provider needs to make the task's environment, derived
--- once from environment/ (the Dockerfile and its build context), provider-agnostic.
---
---   base     the Dockerfile's FROM (or task.toml's docker_image) through the image map (the
---            user's --image-map, then the provider's, then recipe.DEFAULT_IMAGE_MAP);
---   steps    the last stage's RUN, COPY/ADD, ENV, WORKDIR, USER and ARG instructions in order,
---            ARG/ENV values substituted where docker substitutes them (RUN steps carry the ARG
---            values in effect as `args`, which docker exposes to them as environment variables);
---   context  environment/ as a deterministic tar (cseng.archive: sorted entries, zero times,
---            numeric root owner, modes normalized as git records them), so a fresh clone of an
---            unchanged task packs to the same bytes;
---   key      sha256 over all of it (base, steps, final env/workdir/user, the context's sha256):
---            the same task maps to the same image, layer, template or snapshot everywhere.
--- solution/ is never read here (only environment/ is packed); tests/ is uploaded at verify only.
local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local fs = require('cseng.fs')
local cjson = require('cjson')
local dockerfile = require('cseng.workload.dockerfile')
local errors = require('cseng.lib.errors')

local recipe = {}

recipe.VERSION = 1

--- Substitutions every provider applies after the user's and its own map (first match wins).
--- SWE-smith rows name per-repository images (cseng/swesmith.<repo>) that exist nowhere; the
--- repository is staged by COPY on top of the Debian base, which has python3 and pytest.
recipe.DEFAULT_IMAGE_MAP = { 'cseng/swesmith.*=cseng/debian:bookworm' }

--- The image map in order: the user's entries, the provider's, the defaults.
---@param user_map table|nil
---@param provider_map table|nil
---@return string[]
function recipe.image_map(user_map, provider_map)
  local out = {}
  for _, m in ipairs({ user_map or {}, provider_map or {}, recipe.DEFAULT_IMAGE_MAP }) do
    for k, v in pairs(m) do
      if type(k) == 'number' then out[#out + 1] = v else out[#out + 1] = k .. '=' .. v end
    end
  end
  return out
end

--- JSON with sorted object keys (so the key does not depend on table order).
local function canonical(v)
  local t = type(v)
  if t == 'table' then
    if next(v) == nil then return '{}' end
    if #v > 0 then
      local parts = {}
      for i = 1, #v do parts[i] = canonical(v[i]) end
      return '[' .. table.concat(parts, ',') .. ']'
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for i, k in ipairs(keys) do parts[i] = cjson.encode(k) .. ':' .. canonical(v[k]) end
    return '{' .. table.concat(parts, ',') .. '}'
  end
  return cjson.encode(v)
end
recipe._canonical = canonical

-- A step as the key sees it: only what the build does (no parse bookkeeping).
local function key_step(s)
  if s.op == 'COPY' then
    local c = s.copy
    return { op = c.add and 'ADD' or 'COPY', src = c.src, dst = c.dst, chown = c.chown, chmod = c.chmod, from = c.from }
  end
  local out = {}
  for k, v in pairs(s) do if k ~= 'line' then out[k] = v end end
  return out
end

---@class BuildRecipe
---@field key string sha256 (hex) over everything below: the content key
---@field task_id string
---@field from string|nil the Dockerfile's FROM (last stage), or task.toml's docker_image
---@field base string|nil from, through the image map
---@field image_map string[] the map that gave base
---@field steps table[] ordered {op='RUN'|'COPY'|'ENV'|'WORKDIR'|'USER'|'ARG', line, ...} (lua/cseng/workload/dockerfile.lua)
---@field env table<string,string> final ENV
---@field env_order string[]
---@field workdir string the task's workdir
---@field user string|nil the final USER
---@field run_steps integer how many RUN steps
---@field stages integer
---@field context string the build context: environment/ as a deterministic tar
---@field context_sha256 string
---@field context_dir string environment/ on this host (for COPY sources)
---@field dockerfile string|nil the Dockerfile text

--- The recipe of a task. o: {image_map (the user's), provider_map}.
---@param t Task
---@param o? table
---@return BuildRecipe
function recipe.of_task(t, o)
  o = o or {}
  local r = t.recipe
  local map = recipe.image_map(o.image_map, o.provider_map)
  local from = t.config.docker_image or r.from
  local ctx_dir = t.dir .. '/environment'
  local context
  if fs.exists(ctx_dir) then
    context = errors.check(nil, archive.pack_dir(ctx_dir, { modes = 'normalize' }))
  else
    context = errors.check(nil, archive.pack({}, { format = 'tar' }))
  end
  local rec = {
    task_id = t.id, from = from, base = dockerfile.map_image(from, map), image_map = map,
    steps = r.steps or {}, env = r.env or {}, env_order = r.env_order or {}, workdir = t.workdir, user = r.user,
    stages = r.stages, context = context, context_sha256 = crypto.sha256_hex(context), context_dir = ctx_dir,
    dockerfile = fs.read(ctx_dir .. '/Dockerfile'),
  }
  local n, ksteps = 0, {}
  for i, s in ipairs(rec.steps) do
    if s.op == 'RUN' then n = n + 1 end
    ksteps[i] = key_step(s)
  end
  rec.run_steps = n
  rec.key = crypto.sha256_hex(canonical({
    v = recipe.VERSION, base = rec.base or '', steps = ksteps, env = rec.env, workdir = rec.workdir or '',
    user = rec.user or '', context = rec.context_sha256,
  }))
  return rec
end

-- A COPY source's glob (`*`, `?`) as an anchored pattern over one path component.
local function glob_pattern(g)
  return '^' .. g:gsub('[%^%$%(%)%%%.%[%]%+%-]', '%%%0'):gsub('%*', '[^/]*'):gsub('%?', '[^/]') .. '$'
end

--- The task's Dockerfile as a provider builds it (Daytona's buildInfo, Runloop's blueprint, Modal's
--- dockerfile_commands): the task's own, with its last FROM's image set to the recipe's base (the
--- image map applied); a task without a Dockerfile (only task.toml's docker_image) is FROM base alone.
function recipe.dockerfile(rcp)
  local base = rcp.base or rcp.from
  if not base then return nil, 'the task has no base image (no FROM, no docker_image)' end
  local text = rcp.dockerfile
  if not text then return 'FROM ' .. base .. '\n' end
  local lines, last = {}, nil
  for line in (text:gsub('\r\n', '\n') .. (text:sub(-1) == '\n' and '' or '\n')):gmatch('([^\n]*)\n') do
    lines[#lines + 1] = line
    if line:match('^%s*[Ff][Rr][Oo][Mm]%s') then last = #lines end
  end
  if not last then return 'FROM ' .. base .. '\n' .. text end
  local pre, rest = lines[last]:match('^(%s*[Ff][Rr][Oo][Mm]%s+)(.*)$')
  local flags = {}
  while rest:match('^%-%-%S+%s+') do
    local f, r = rest:match('^(%-%-%S+)%s+(.*)$')
    flags[#flags + 1] = f
    rest = r
  end
  local stage = rest:match('^%S+(%s+[Aa][Ss]%s+%S+)%s*$') or ''
  lines[last] = pre .. (#flags > 0 and (table.concat(flags, ' ') .. ' ') or '') .. base .. stage
  return table.concat(lines, '\n') .. '\n'
end

--- The COPY/ADD sources of a recipe's steps, as @daytonaio/sdk's Image.fromDockerfile derives its
--- build contexts: one per source (relative to environment/, globs expanded), {archive_path,
--- source}; sources that escape the context, URLs and COPY --from are not contexts.
function recipe.copy_sources(rcp)
  local out, seen = {}, {}
  local function add(rel)
    rel = rel:gsub('^%./', ''):gsub('/+$', '')
    if rel == '' then rel = '.' end
    if seen[rel] then return end
    seen[rel] = true
    out[#out + 1] = { archive_path = rel, source = rel == '.' and rcp.context_dir or (rcp.context_dir .. '/' .. rel) }
  end
  -- a glob's matches in its folder of the context (the last part may be a glob), by name
  local function add_glob(src)
    local dir, name = src:match('^(.-)/?([^/]*)$')
    local list = fs.list(rcp.context_dir .. (dir ~= '' and ('/' .. dir) or '')) or {}
    table.sort(list)
    local pat = glob_pattern(name)
    for _, n in ipairs(list) do
      if n:match(pat) then add((dir ~= '' and (dir .. '/') or '') .. n) end
    end
  end
  for _, s in ipairs(rcp.steps or {}) do
    local c = s.op == 'COPY' and s.copy
    for _, src in ipairs(c and not c.from and c.src or {}) do
      local in_context = not src:match('^%a+://') and not src:match('^/') and not src:match('%.%.')
      if in_context then (src:match('[%*%?%[]') and add_glob or add)(src) end
    end
  end
  return out
end

-- Recipes of a run's tasks, by run then task id. Weak keys: a finished run's recipes go with it;
-- the run object itself is never written.
local by_run = setmetatable({}, { __mode = 'k' })

--- The recipe of a task in a run (its --image-map and its provider's image_map), computed once
--- per task and run.
function recipe.for_run(run, t)
  local cache = by_run[run]
  if not cache then cache = {}; by_run[run] = cache end
  local r = cache[t.id]
  if not r then
    r = recipe.of_task(t, { image_map = run.opts.image_map, provider_map = run.provider.image_map })
    cache[t.id] = r
  end
  return r
end

return recipe
