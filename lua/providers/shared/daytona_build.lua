--- Daytona's native build (for lua/providers/daytona.lua and its specs): a task's recipe as a
--- snapshot named cseng-<key16>, as @daytonaio/sdk's Image.fromDockerfile makes one: the
--- Dockerfile (its last FROM set to the recipe's base), its COPY sources as build contexts
--- uploaded to Daytona's object storage (S3, SigV4), POST /snapshots, then the wait until active.
local crypto = require('cseng.crypto')
local secrets = require('cseng.lib.secrets')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local archive = require('cseng.archive')
local fs = require('cseng.fs')
local sigv4 = require('cseng.lib.aws.sigv4')
local recipe = require('cseng.workload.recipe')
local wire = require('providers.shared.daytona_wire')

local build = {}

local str = adapter.str
local call, api_url = wire.call, wire.api_url

--- The snapshot a recipe builds to: cseng-<the content key's first 16 hex digits>.
function build.name(client, rcp)
  return wire.snapshot_name(client, rcp.key:sub(1, 16))
end

--- The Dockerfile sent as buildInfo.dockerfileContent (recipe.dockerfile: the task's own, its
--- last FROM set to the recipe's base).
function build.dockerfile(rcp) return recipe.dockerfile(rcp) end

--- The build contexts of a recipe, as @daytonaio/sdk's Image.fromDockerfile derives them
--- (recipe.copy_sources: one per COPY/ADD source).
function build.contexts(rcp) return recipe.copy_sources(rcp) end

-- A context's tar (entries under its archive path, sorted, as the SDK's tar.create of the path)
-- and its hash: the SDK's computeHashForPathMd5 over the same inputs (the archive path, then
-- each file's path relative to the source and its bytes, an empty directory's path), in sorted
-- order and with SHA-256 (the engine has no MD5), cut to 32 hex digits.
local function context_tar(ctx)
  local st = fs.stat(ctx.source)
  if not st then return nil, 'COPY source ' .. ctx.archive_path .. ' is not in environment/', 'EBUILD' end
  local entries, h = {}, { ctx.archive_path }
  local base = ctx.archive_path == '.' and '' or ctx.archive_path
  if st.type ~= 'dir' then
    local data = fs.read(ctx.source)
    entries[1] = { path = base, data = data, mode = st.mode }
    h[#h + 1] = data
  else
    if base ~= '' then entries[1] = { path = base, type = 'dir' } end
    local list = fs.walk(ctx.source)
    table.sort(list, function(a, b) return a.path < b.path end)
    for _, e in ipairs(list) do
      local path = base == '' and e.path or (base .. '/' .. e.path)
      if e.type == 'dir' then
        entries[#entries + 1] = { path = path, type = 'dir' }
        local empty = #(fs.list(ctx.source .. '/' .. e.path) or {}) == 0
        if empty then h[#h + 1] = e.path end
      elseif e.type == 'link' then
        entries[#entries + 1] = { path = path, type = 'symlink', target = fs.readlink(ctx.source .. '/' .. e.path) }
      else
        local data = fs.read(ctx.source .. '/' .. e.path)
        entries[#entries + 1] = { path = path, data = data, mode = e.mode }
        h[#h + 1] = e.path
        h[#h + 1] = data
      end
    end
  end
  return archive.pack(entries, { format = 'tar' }), crypto.sha256_hex(table.concat(h)):sub(1, 32)
end

-- S3 (the push access GET /object-storage/push-access hands out): path-style URLs, SigV4.
local function s3_call(creds, method, key, query, body)
  local url = creds.storageUrl:gsub('/+$', '') .. '/' .. sigv4.uri_encode(creds.bucket) .. (key and ('/' .. sigv4.uri_encode(key, true)) or '')
    .. (query and ('?' .. query) or '')
  local headers = {}
  if body then headers['Content-Type'] = 'application/octet-stream' end
  local add = sigv4.sign { method = method, url = url, headers = headers, body = body or '', region = creds.region or 'us-east-1',
    service = 's3', access_key_id = creds.accessKey, secret_access_key = creds.secret, session_token = creds.sessionToken }
  for k, v in pairs(add) do headers[k] = v end
  return adapter.request('daytona', method, url, { headers = headers, body = body or (method == 'PUT' and '' or nil), raw = true,
    timeout = 300 })
end

-- Upload each context tar (ListObjectsV2 first: an existing prefix is not uploaded again, as
-- the SDK's ObjectStorage.upload). Returns the list of hashes, or nil, err, code.
local function upload_contexts(client, rcp)
  local contexts = build.contexts(rcp)
  if #contexts == 0 then return {} end
  local creds, err, code = call(client, 'GET', api_url(client, '/object-storage/push-access'))
  if not creds then return nil, err, code end
  if type(creds) ~= 'table' or not str(creds.storageUrl) or not str(creds.accessKey) or not str(creds.organizationId) then
    return nil, 'daytona: GET /object-storage/push-access: no storageUrl/accessKey/organizationId', 'EPROTO'
  end
  creds.bucket = str(creds.bucket) or 'daytona-volume-builds'
  secrets.add(creds.secret)
  if str(creds.sessionToken) then secrets.add(creds.sessionToken) end
  local hashes = {}
  for _, ctx in ipairs(contexts) do
    local tar, hash = context_tar(ctx)
    if not tar then return nil, 'daytona: build context: ' .. hash, 'ESTAGING' end
    local prefix = creds.organizationId .. '/' .. hash .. '/'
    local listing, lerr, lcode = s3_call(creds, 'GET', nil,
      'list-type=2&max-keys=1&prefix=' .. sigv4.uri_encode(prefix))
    if not listing then return nil, lerr, lcode end
    if not tostring(listing):find('<Key>', 1, true) then
      -- x-id=PutObject: the operation hint AWS's S3 clients add (the SDK's upload sends it)
      local ok, perr, pcode = s3_call(creds, 'PUT', prefix .. 'context.tar', 'x-id=PutObject', tar)
      if not ok then return nil, perr, pcode end
    end
    hashes[#hashes + 1] = hash
  end
  return hashes
end

--- Build the task's recipe as a snapshot named cseng-<key16> (POST /snapshots with buildInfo:
--- the full Dockerfile, FROM set to the recipe's base, and the hashes of its COPY sources
--- uploaded to Daytona's object storage), then wait until it is active. A snapshot of that
--- name that exists is the cache hit (waited for when still building). Returns {image, layer
--- (the snapshot's name, what create starts from), cache_hit, snapshot, log_tail}.
function build.build(client, req)
  local rcp = req.recipe
  local name = build.name(client, rcp)
  local snap, err, code = wire.get_snapshot(client, name)
  if snap == nil then return nil, err, code end
  local hit = snap and true or false
  if not snap then
    local dockerfile, derr = build.dockerfile(rcp)
    if not dockerfile then return nil, 'daytona: build: ' .. derr, 'EBUILD' end
    local hashes, uerr, ucode = upload_contexts(client, rcp)
    if not hashes then return nil, uerr, ucode end
    local body = { name = name, buildInfo = { dockerfileContent = dockerfile } }
    if #hashes > 0 then body.buildInfo.contextHashes = hashes end -- cjson would send {} for an empty list
    if client.target then body.regionId = client.target end
    local data
    data, err, code = call(client, 'POST', api_url(client, '/snapshots'), { json = body, timeout = client.request_timeout })
    if not data then
      if code ~= 'HTTP_409' then return nil, err, code end
      hit = true -- another run started the same build: wait for it
    elseif type(data) == 'table' then
      snap = data
    end
  end
  local timeout = client.snapshot_timeout
  client.snapshot_timeout = math.max(timeout, req.timeout or 0, client.build_timeout)
  local ok, werr, wcode = wire.wait_snapshot(client, name, snap or nil)
  client.snapshot_timeout = timeout
  if not ok then
    local bcode = (wcode == 'ESNAPSHOT' or not wcode) and errors.EBUILD or wcode
    return nil, errors.new(bcode, (werr:gsub('^daytona: snapshot', 'daytona: build: snapshot')), { log = werr }), bcode
  end
  return { image = rcp.base, layer = name, snapshot = name, cache_hit = hit }
end

return build
