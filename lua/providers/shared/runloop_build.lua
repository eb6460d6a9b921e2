--- Runloop's native build (for lua/providers/runloop.lua and its specs): a task's recipe as a
--- blueprint named cseng-<key16>: the build context uploaded as an object, POST /v1/blueprints
--- {name, dockerfile, build_context}, the polls until it is built, and its log when it is not.
local clock = require('cseng.clock')
local task = require('cseng.task')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.runloop_wire')

local build = {}

local urlencode, str = adapter.urlencode, adapter.str
local call = wire.call

local BUILDING = { queued = true, provisioning = true, building = true }

--- The blueprint a recipe builds to: cseng-<the content key's first 16 hex digits>.
function build.name(rcp) return 'cseng-' .. rcp.key:sub(1, 16) end

-- The blueprints named name (GET /v1/blueprints?name=, every page), newest first.
local function blueprints_named(client, name)
  local out, after = {}, nil
  for _ = 1, 20 do
    local q = { { 'name', name }, { 'limit', '100' } }
    if after then q[#q + 1] = { 'starting_after', after } end
    local data, err, code = call(client, 'GET', '/v1/blueprints', { query = q })
    if not data then return nil, err, code end
    local items = type(data) == 'table' and type(data.blueprints) == 'table' and data.blueprints or {}
    for _, b in ipairs(items) do
      if type(b) == 'table' and b.name == name and str(b.id) and b.state ~= 'deleted' then out[#out + 1] = b end
    end
    if not (type(data) == 'table' and data.has_more == true) or #items == 0 then break end
    after = items[#items].id
  end
  table.sort(out, function(a, b) return (tonumber(a.create_time_ms) or 0) > (tonumber(b.create_time_ms) or 0) end)
  return out
end

-- The build log's text (GET /v1/blueprints/{id}/logs), or nil.
local function build_log(client, id)
  local data = call(client, 'GET', '/v1/blueprints/' .. urlencode(id) .. '/logs')
  if type(data) ~= 'table' or type(data.logs) ~= 'table' then return nil end
  local lines = {}
  for _, l in ipairs(data.logs) do if type(l) == 'table' and str(l.message) then lines[#lines + 1] = l.message end end
  return table.concat(lines, '\n')
end

-- Poll GET /v1/blueprints/{id} until it leaves queued/provisioning/building (100 ms, x1.5 to 2 s).
local function await_build(client, bp, timeout)
  local deadline, delay = clock.now() + timeout * 1e9, 0.1
  while BUILDING[bp.status] do
    if clock.now() > deadline then
      return nil, string.format('runloop: blueprint %s (%s) not built after %s s (status %s)', bp.name or '?', bp.id, timeout,
        tostring(bp.status)), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * 1.5, 2)
    local cur, err, code = call(client, 'GET', '/v1/blueprints/' .. urlencode(bp.id))
    if cur then
      if type(cur) ~= 'table' then return nil, 'runloop: GET /v1/blueprints/' .. bp.id .. ': not an object', 'EPROTO' end
      bp = cur
    elseif code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then
      return nil, err, code
    end
  end
  if bp.status ~= 'build_complete' then
    local log = build_log(client, bp.id)
    return nil, errors.new(errors.EBUILD, string.format('runloop: blueprint %s (%s) is %s%s', bp.name or '?', bp.id,
      tostring(bp.status), str(bp.failure_reason) and (': ' .. bp.failure_reason) or ''), { log = log }), errors.EBUILD
  end
  return bp
end

-- The build context as an object: POST /v1/objects {name, content_type tar, ttl_ms} -> upload_url,
-- PUT the bytes there (a presigned URL: no Authorization, no Content-Type), POST /v1/objects/{id}/complete.
local function upload_context(client, name, rcp)
  local obj, err, code = call(client, 'POST', '/v1/objects', { json = { name = 'build-context-' .. name, content_type = 'tar',
    ttl_ms = 3600000, metadata = { ['cseng.content_key'] = rcp.key } } })
  if not obj then return nil, err, code end
  if type(obj) ~= 'table' or not str(obj.id) or not str(obj.upload_url) then
    return nil, 'runloop: POST /v1/objects: no id/upload_url', 'EPROTO'
  end
  -- as the SDK's uploads (a fetch with no headers): no Content-Type at all (curl would add
  -- application/x-www-form-urlencoded to a body; a presigned URL's signature can refuse a
  -- Content-Type it was not signed with).
  local ok, perr, pcode = adapter.request('runloop', 'PUT', obj.upload_url, { body = rcp.context, raw = true, timeout = 300,
    what = 'PUT the build context', omit_headers = { 'Content-Type' } })
  if not ok then return nil, perr, pcode end
  local done, cerr, ccode = call(client, 'POST', '/v1/objects/' .. urlencode(obj.id) .. '/complete', { json = {} })
  if not done then return nil, cerr, ccode end
  return obj.id
end

--- Build the task's recipe as a blueprint named cseng-<key16>: POST /v1/blueprints {name,
--- dockerfile (the task's, FROM set to the recipe's base), build_context {type = object,
--- object_id} (environment/ as the recipe's deterministic tar, uploaded as an object)}, then poll
--- until build_complete. An existing blueprint of that name that is built is the cache hit (one
--- still building is waited for). Returns {image, layer (the blueprint's id, what create takes),
--- blueprint, cache_hit}.
function build.build(client, req)
  local rcp = req.recipe
  local name = build.name(rcp)
  local timeout = math.max(req.timeout or 0, client.build_timeout)
  local found, err, code = blueprints_named(client, name)
  if not found then return nil, err, code end
  for _, b in ipairs(found) do
    if b.status == 'build_complete' then return { image = rcp.base, layer = b.id, blueprint = name, cache_hit = true } end
  end
  for _, b in ipairs(found) do
    if BUILDING[b.status] then
      local bp, werr, wcode = await_build(client, b, timeout)
      if bp then return { image = rcp.base, layer = bp.id, blueprint = name, cache_hit = true } end
      if wcode ~= 'EBUILD' then return nil, werr, wcode end
      break -- that build failed: build again
    end
  end
  local dockerfile, derr = require('cseng.workload.recipe').dockerfile(rcp)
  if not dockerfile then return nil, 'runloop: build: ' .. derr, 'EBUILD' end
  local object_id, uerr, ucode = upload_context(client, name, rcp)
  if not object_id then return nil, uerr, ucode end
  local bp, berr, bcode = call(client, 'POST', '/v1/blueprints', { json = { name = name, dockerfile = dockerfile,
    build_context = { type = 'object', object_id = object_id }, metadata = { ['cseng.content_key'] = rcp.key } } })
  if not bp then return nil, berr, bcode end
  if type(bp) ~= 'table' or not str(bp.id) then return nil, 'runloop: POST /v1/blueprints: no id', 'EPROTO' end
  local done, werr, wcode = await_build(client, bp, timeout)
  if not done then return nil, werr, wcode end
  return { image = rcp.base, layer = done.id, blueprint = name, cache_hit = false }
end

return build
