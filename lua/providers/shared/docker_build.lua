--- Docker images (for lua/providers/docker.lua, `cseng images` and their specs): the build of a
--- task's image (POST /build of environment/ with its FROM lines passed through the image map,
--- tagged by the recipe's content key, the base images' ids in a label so a re-imported base
--- rebuilds it), and the image operations: an image's id, cseng's images, removal, import.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.docker_wire')

local build = {}

local api, decode, tbl, int = wire.api, wire.decode, wire.tbl, wire.int
local LOG_TAIL = 4000

--- The id of a local image, or nil when it is absent.
function build.image_id(client, name)
  local res = api(client, 'GET', '/images/' .. name .. '/json', { ok = { 200 } })
  if not res then return nil end
  return decode(res).Id
end

-- The image map of a build: the request's (the user's --image-map), the client's, then
-- recipe.DEFAULT_IMAGE_MAP (SWE-smith rows name per-repository images that exist nowhere; the
-- repository is staged by COPY on top of the Debian base, which has python3 and pytest).
local function image_map_of(client, map)
  local out = {}
  for _, e in ipairs(map or {}) do out[#out + 1] = e end
  for _, e in ipairs(client.image_map or {}) do out[#out + 1] = e end
  for _, e in ipairs(require('cseng.workload.recipe').DEFAULT_IMAGE_MAP) do out[#out + 1] = e end
  return out
end

local function map_image(image, map)
  return require('cseng.workload.dockerfile').map_image(image, map)
end

--- Rewrite the FROM lines of a Dockerfile through the image map. Stage names (FROM x AS name)
--- used by later FROM lines are left alone. Returns the text and the list of base images.
function build.rewrite_from(text, map)
  local stages, bases, seen = {}, {}, {}
  local out = {}
  local continued = false
  for line in (text .. (text:sub(-1) == '\n' and '' or '\n')):gmatch('(.-)\r?\n') do
    local was_continued = continued
    if line:match('^%s*#') then continued = was_continued else continued = line:match('\\%s*$') ~= nil end
    local indent, kw, flags, image, rest
    if not was_continued then
      indent, kw, flags, image, rest = line:match('^(%s*)([Ff][Rr][Oo][Mm])(%s+%-%-%S+%s+)(%S+)(.*)$')
      if not kw then
        flags = ' '
        indent, kw, image, rest = line:match('^(%s*)([Ff][Rr][Oo][Mm])%s+(%S+)(.*)$')
      end
    end
    if kw and image and not image:find('%$') then
      local mapped = image
      if not stages[image:lower()] then
        mapped = map_image(image, map)
        if not seen[mapped] then seen[mapped] = true; bases[#bases + 1] = { from = image, image = mapped } end
      end
      local stage = rest:match('^%s+[Aa][Ss]%s+(%S+)')
      if stage then stages[stage:lower()] = true end
      line = indent .. kw .. (flags or ' ') .. mapped .. rest
    end
    out[#out + 1] = line
  end
  return table.concat(out, '\n') .. '\n', bases
end

--- The deterministic build context: environment/ with the rewritten Dockerfile.
local function build_context(dir, dockerfile_name, dockerfile_text)
  local entries = {}
  for _, e in ipairs(fs.walk(dir)) do
    if e.path ~= dockerfile_name then
      local host = dir .. '/' .. e.path
      if e.type == 'dir' then entries[#entries + 1] = { path = e.path, type = 'dir', mode = e.mode }
      elseif e.type == 'link' then entries[#entries + 1] = { path = e.path, type = 'symlink', target = fs.readlink(host) }
      elseif e.type == 'file' then entries[#entries + 1] = { path = e.path, file = host, mode = e.mode } end
    end
  end
  entries[#entries + 1] = { path = dockerfile_name, data = dockerfile_text, mode = tonumber('644', 8) }
  return archive.pack(entries, { format = 'tar' })
end

local function build_failure(msg, log, code)
  code = code or errors.EBUILD
  return nil, errors.new(code, msg, { log = util.tail(log or '', LOG_TAIL) }), code
end

-- The labels of a local image, or nil when it is absent.
local function image_labels(client, name)
  local res = api(client, 'GET', '/images/' .. name .. '/json', { ok = { 200 } })
  if not res then return nil end
  local j = decode(res)
  return tbl(tbl(j.Config).Labels), j.Id
end

--- Build (or find) the task's image. req: {recipe, task_id, context_dir, dockerfile, image_map,
--- timeout, labels}. The tag is the recipe's content key (without a recipe: the sha256 of the
--- context and the base ids). Returns {image, image_id, cache_hit, log_tail, context_sha256,
--- content_key, bases} or nil, {message, log}, "EBUILD" | "ETIMEDOUT".
function build.build(client, req)
  local df_name = req.dockerfile or 'Dockerfile'
  local text = fs.read(req.context_dir .. '/' .. df_name)
  if not text then return build_failure('no ' .. df_name .. ' in ' .. req.context_dir) end
  local map = image_map_of(client, req.image_map)
  local rewritten, bases = build.rewrite_from(text, map)
  local tar, perr = build_context(req.context_dir, df_name, rewritten)
  if not tar then return build_failure('packing the build context: ' .. tostring(perr)) end
  -- the tag names the context and the exact base images, so a re-imported base rebuilds
  local ids = {}
  for i, b in ipairs(bases) do
    b.id = build.image_id(client, b.image)
    ids[i] = b.image .. '@' .. (b.id or 'absent')
  end
  local base_ids = table.concat(ids, ' ')
  local sha = crypto.sha256_hex(tar .. '\0' .. table.concat(ids, '\0'))
  local key = req.recipe and req.recipe.key or sha
  local tag = 'cseng-task/' .. wire.repo_component(req.task_id) .. ':' .. key:sub(1, 16)
  local result = { image = tag, context_sha256 = sha, content_key = key, bases = bases }
  local from_note = {}
  for _, b in ipairs(bases) do
    from_note[#from_note + 1] = b.from == b.image and b.image or (b.from .. ' -> ' .. b.image)
  end
  local have, existing = image_labels(client, tag)
  if have and have['cseng.base_ids'] ~= base_ids then existing = nil end -- a base changed: rebuild
  if existing then
    result.image_id, result.cache_hit = existing, true
    result.log_tail = string.format('cseng: %s exists (build context sha256 %s, FROM %s): build skipped\n', tag, sha,
      table.concat(from_note, ', '))
    return result
  end
  local labels = util.merge(req.labels, { ['cseng.kind'] = 'task-image', ['cseng.context_sha256'] = sha,
    ['cseng.content_key'] = key, ['cseng.base_ids'] = base_ids })
  client.build_sem:acquire()
  local stream = wire.build_stream()
  local ok, res, err, code = pcall(api, client, 'POST', '/build', {
    query = { t = tag, rm = true, forcerm = true, dockerfile = df_name, labels = cjson.encode(labels),
      networkmode = req.network == false and 'none' or nil }, -- --build-network off
    headers = { ['Content-Type'] = 'application/x-tar' },
    body = tar, timeout = req.timeout or 600, stream = stream.feed,
  })
  client.build_sem:release()
  if not ok then error(res, 0) end
  stream.finish()
  local header = string.format('cseng: building %s (FROM %s)\n', tag, table.concat(from_note, ', '))
  local log = header .. stream.log.get()
  if not res then
    if code == 'ETIMEDOUT' then
      return build_failure(string.format('build timed out after %s s%s', tostring(req.timeout or 600),
        stream.step and (' in ' .. stream.step) or ''), log, 'ETIMEDOUT')
    end
    return build_failure('build request failed: ' .. tostring(err), log)
  end
  if stream.error or not stream.image_id then
    local msg = stream.error or 'the build stream ended without an image id'
    if msg:find('pull access denied') or msg:find('manifest') or msg:find('no such host') or msg:find('lookup ') then
      msg = msg .. ' (no registry is reachable here: map the base image, e.g. --image-map \'' ..
        ((bases[1] or {}).image or 'IMAGE') .. '=cseng/debian:bookworm\')'
    end
    return build_failure(string.format('build failed%s: %s', stream.step and (' at ' .. stream.step) or '', msg), log)
  end
  result.image_id = stream.image_id
  result.cache_hit = stream.counted > 0 and stream.cached == stream.counted
  result.steps, result.cached_steps = stream.counted, stream.cached
  result.log_tail = util.tail(log, LOG_TAIL)
  return result
end

--- Images cseng made or uses: task images, warm images, the bases (for `cseng images list`).
function build.list_images(client)
  local res, err, code = api(client, 'GET', '/images/json', {})
  if not res then return nil, err, code end
  local out = {}
  for _, im in ipairs(decode(res)) do
    local tags = {}
    for _, t in ipairs(tbl(im.RepoTags)) do
      if t:match('^cseng') then tags[#tags + 1] = t end
    end
    local labels = tbl(im.Labels)
    if #tags > 0 or labels['cseng.kind'] then
      out[#out + 1] = { id = im.Id, tags = tags, labels = labels, created = int(im.Created), size = int(im.Size) }
    end
  end
  table.sort(out, function(a, b) return (a.tags[1] or a.id) < (b.tags[1] or b.id) end)
  return out
end

--- Remove an image (by id or tag); absent is success.
function build.remove_image(client, name, force)
  local res, err, code = api(client, 'DELETE', '/images/' .. name, {
    query = { force = force and true or nil }, ok = { 200, 404 },
  })
  if not res then return nil, err, code end
  return true
end

--- Import a root filesystem tar as an image (POST /images/create?fromSrc=-).
function build.import(client, tar_bytes, repo, tag, changes)
  local q = { fromSrc = '-', repo = repo, tag = tag, message = 'cseng images base' }
  local path = '/images/create' .. wire.query(q)
  for _, c in ipairs(changes or {}) do path = path .. '&changes=' .. adapter.urlencode(c) end
  local res, err, code = api(client, 'POST', path, {
    headers = { ['Content-Type'] = 'application/x-tar' }, body = tar_bytes, timeout = 1800,
  })
  if not res then return nil, err, code end
  local id
  for l in res.body:gmatch('[^\r\n]+') do
    local ok, m = pcall(cjson.decode, l)
    if ok and type(m) == 'table' then
      if m.error and m.error ~= cjson.null then return nil, 'docker import: ' .. tostring(m.error), 'EDOCKER' end
      if type(m.status) == 'string' and m.status:match('^sha256:') then id = m.status end
    end
  end
  return id or build.image_id(client, repo .. ':' .. tag)
end

return build
