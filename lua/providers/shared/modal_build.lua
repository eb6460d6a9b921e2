--- Modal's image build (for lua/providers/modal.lua and its specs): a task's recipe as a Modal
--- image, as the SDKs send one (the Dockerfile as dockerfile_commands over a registry base image,
--- the COPY sources as a context mount), ImageGetOrCreate and ImageJoinStreaming until the build
--- has a result; the image of a registry tag, and a Dockerfile with inline context files.
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.modal_wire')

local build = {}

local call, once = wire.call, wire.once

--- The image builder version: the setting, else the environment's (EnvironmentGetOrCreate).
local function builder_version(client)
  if client.builder_version then return client.builder_version end
  return once(client, 'builder_version', function()
    local r, err, code = call(client, client.cp, 'EnvironmentGetOrCreate', { deployment_name = client.environment })
    if not r then return nil, err, code end
    return r.metadata and r.metadata.settings and r.metadata.settings.image_builder_version or ''
  end)
end

--- The id of a built image, and whether it was there already (a cache hit: Modal answered
--- ImageGetOrCreate with a finished result, or this client built it before). recipe: {commands =
--- {"FROM tag", ...}, context_files = {{filename, data}}, context_mount_id, base_images}.
--- ImageGetOrCreate, then ImageJoinStreaming until the build has a result; a failed build is
--- "modal: image build <id> failed: <exception>" (EBUILD), with the log's tail.
function build.image_id(client, recipe)
  local key = 'image:' .. crypto.sha256_hex(require('cjson').encode({ recipe.commands, recipe.base_images or {},
    recipe.context_files or {}, recipe.context_mount_id or '' }))
  local waited = client.once[key] ~= nil
  local v, err, code = once(client, key, function()
    local id, hit, c = build.build_image(client, recipe)
    if not id then return nil, hit, c end
    return { id = id, hit = hit }
  end)
  if not v then return nil, err, code end
  return v.id, waited or v.hit
end

local function finished(result)
  return result and result.status and result.status ~= 'GENERIC_STATUS_UNSPECIFIED' and result.status ~= 0
end

--- ImageGetOrCreate (and ImageJoinStreaming until a result) for a recipe: the id and whether it
--- was built before.
function build.build_image(client, recipe)
  local app, aerr, acode = wire.app_id(client)
  if not app then return nil, aerr, acode end
  local bv, berr, bcode = builder_version(client)
  if not bv then return nil, berr, bcode end
  local r, err, code = call(client, client.cp, 'ImageGetOrCreate', {
    app_id = app, builder_version = bv,
    image = { dockerfile_commands = recipe.commands, context_files = recipe.context_files, base_images = recipe.base_images,
              context_mount_id = recipe.context_mount_id },
  })
  if not r then return nil, err, code end
  local id, result = r.image_id, r.result
  local hit = finished(result) and true or false
  local log = adapter.tail_buffer(8192)
  local last = ''
  local rounds = 0
  while not finished(result) do
    rounds = rounds + 1
    if rounds > 120 then return nil, 'modal: image build ' .. id .. ' has no result after ' .. rounds .. ' joins', 'ETIMEDOUT' end
    local joined, jerr, jcode = call(client, client.cp, 'ImageJoinStreaming', { image_id = id, timeout = 55, last_entry_id = last },
      { timeout = 90, on_message = function(item)
        if item.entry_id and item.entry_id ~= '' then last = item.entry_id end
        for _, l in ipairs(item.task_logs or {}) do log.add(l.data or '') end
        if finished(item.result) then
          result = item.result
          return false
        end
      end })
    if not joined then return nil, jerr, jcode end
  end
  local status = result.status
  if status ~= 'GENERIC_STATUS_SUCCESS' and status ~= 1 then
    return nil, errors.new(errors.EBUILD, string.format('modal: image build %s (%s) failed: %s', id, recipe.commands[1],
      util.trim(result.exception or tostring(status))), { log = log.get() }), errors.EBUILD
  end
  return id, hit
end

--- A registry tag's image id (`FROM <tag>`).
function build.registry_image(client, tag)
  return build.image_id(client, { commands = { 'FROM ' .. tag } })
end

--- A Dockerfile's text (and its build-context files {path = data}) as an image Modal builds
--- (context files inline, Image.context_files): for specs and tools; task builds go through
--- build.build (a context mount, as the Python SDK's Image.from_dockerfile).
function build.dockerfile_image(client, dockerfile, context)
  local files = {}
  for name, data in pairs(context or {}) do files[#files + 1] = { filename = name, data = data } end
  table.sort(files, function(a, b) return a.filename < b.filename end)
  return build.image_id(client, { commands = build.dockerfile_commands(dockerfile), context_files = files })
end

--- A Dockerfile's text as Image.dockerfile_commands: one entry per line, as the Python SDK's
--- Image.from_dockerfile reads it (a trailing newline adds no empty command).
function build.dockerfile_commands(text)
  local out = {}
  for line in (text:gsub('\r\n', '\n'):gsub('\n$', '') .. '\n'):gmatch('([^\n]*)\n') do out[#out + 1] = line end
  return out
end

-- MountPutFile data above this goes through Modal's blob store in the Python SDK
-- (LARGE_FILE_LIMIT), which cseng does not speak: such a build context is refused by name.
build.INLINE_FILE_LIMIT = 4 << 20
--- The files of a recipe's COPY sources as a Modal mount's {filename = "/<path in environment/>",
--- data, mode}, sorted (directories walked; symlinks followed inside the context).
function build.context_files(rcp)
  local fs = require('cseng.fs')
  local out, seen = {}, {}
  local function add(rel, abs)
    if seen[rel] then return true end
    local st = fs.stat(abs)
    if not st then return nil, 'COPY source ' .. rel .. ' is not in environment/', 'EBUILD' end
    if st.type == 'dir' then
      local list = fs.walk(abs)
      table.sort(list, function(a, b) return a.path < b.path end)
      for _, e in ipairs(list) do
        if e.type ~= 'dir' then
          local ok, err, code = add((rel == '.' and '' or (rel .. '/')) .. e.path, abs .. '/' .. e.path)
          if not ok then return nil, err, code end
        end
      end
      return true
    end
    seen[rel] = true
    local data = fs.read(abs)
    if not data then return nil, 'COPY source ' .. rel .. ' cannot be read', 'EBUILD' end
    if #data > build.INLINE_FILE_LIMIT then
      return nil, string.format('build context file %s is %d bytes: files over %d bytes need Modal\'s blob '
        .. 'uploads, which cseng does not implement (use MODAL_BUILD=replay for this task)', rel, #data, build.INLINE_FILE_LIMIT),
        'EBUILD'
    end
    out[#out + 1] = { filename = '/' .. rel, data = data, mode = (st.mode or 420) & 4095 }
    return true
  end
  for _, c in ipairs(require('cseng.workload.recipe').copy_sources(rcp)) do
    local ok, err, code = add(c.archive_path, c.source)
    if not ok then return nil, err, code end
  end
  table.sort(out, function(a, b) return a.filename < b.filename end)
  return out
end

--- The build context as a mount owned by the App, as the Python SDK loads one: MountPutFile by
--- hash (a file Modal already has is not sent), then MountGetOrCreate with the file list. '' for
--- a recipe without COPY sources.
function build.context_mount(client, app, rcp)
  local files, ferr = build.context_files(rcp)
  if not files then return nil, 'modal: build: ' .. ferr, 'EBUILD' end
  if #files == 0 then return '' end
  local listed, sent = {}, {}
  for i, f in ipairs(files) do
    local sha = crypto.sha256_hex(f.data)
    listed[i] = { filename = f.filename, sha256_hex = sha, size = #f.data, mode = f.mode }
    if not sent[sha] then
      sent[sha] = true
      local r, err, code = call(client, client.cp, 'MountPutFile', { sha256_hex = sha })
      if not r then return nil, err, code end
      if not r.exists then
        r, err, code = call(client, client.cp, 'MountPutFile', { sha256_hex = sha, data = f.data })
        if not r then return nil, err, code end
      end
    end
  end
  local r, err, code = call(client, client.cp, 'MountGetOrCreate', {
    object_creation_type = 'OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP', files = listed, app_id = app,
    environment_name = client.environment })
  if not r then return nil, err, code end
  if not r.mount_id or r.mount_id == '' then return nil, 'modal: MountGetOrCreate: no mount_id', 'EPROTO' end
  return r.mount_id
end

--- The dockerfile_commands of a task's layer. A single-stage Dockerfile is built as the JS SDK
--- builds `images.fromRegistry(base).dockerfileCommands(steps)`: the registry image is its own
--- image (shared by every task on that base), and the task's steps a layer over it, `FROM base`
--- with base_images naming it; returns the commands and true (base_images to fill in). A
--- multi-stage Dockerfile is sent whole (Python's Image.from_dockerfile): commands, nil.
function build.layer_commands(dockerfile, base)
  local lines = build.dockerfile_commands(dockerfile)
  local froms = {}
  for i, l in ipairs(lines) do
    if l:match('^%s*[Ff][Rr][Oo][Mm]%s') then froms[#froms + 1] = i end
  end
  if #froms ~= 1 or not base then return lines, nil end
  local out = { 'FROM base' }
  for i = froms[1] + 1, #lines do out[#out + 1] = lines[i] end
  return out, true
end

--- Build the task's recipe as a Modal image: the task's Dockerfile (its last FROM set to the
--- recipe's base) as dockerfile_commands (build.layer_commands), its COPY sources as the context
--- mount, as the Python SDK's Image.from_dockerfile sends them. Modal caches images by
--- definition, so an unchanged task is a cache hit (ImageGetOrCreate answers with a finished
--- result). Returns {image, layer (the image id create starts from), cache_hit, image_id}.
function build.build(client, req)
  local rcp = req.recipe
  local dockerfile, derr = require('cseng.workload.recipe').dockerfile(rcp)
  if not dockerfile then return nil, 'modal: build: ' .. derr, 'EBUILD' end
  local app, err, code = wire.app_id(client)
  if not app then return nil, err, code end
  local mount
  mount, err, code = once(client, 'mount:' .. rcp.key, function() return build.context_mount(client, app, rcp) end)
  if not mount then return nil, err, code end
  local commands, base_images = build.layer_commands(dockerfile, rcp.base)
  if base_images then
    local base_id, berr, bcode = build.registry_image(client, rcp.base)
    if not base_id then return nil, berr, bcode end
    base_images = { { docker_tag = 'base', image_id = base_id } }
  end
  local id, hit
  id, hit, code = build.image_id(client, { commands = commands, base_images = base_images,
    context_mount_id = mount ~= '' and mount or nil })
  if not id then return nil, hit, code end
  return { image = rcp.base, layer = id, image_id = id, cache_hit = hit }
end

return build
