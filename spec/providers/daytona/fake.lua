--- A stateful loopback fake of Daytona (lua/providers/daytona.lua): the REST API on one
--- cseng.serve listener, the toolbox on another, sandboxes that really run commands.
---
---   local daytona_fake = require 'spec.providers.daytona.fake'
---   local f = daytona_fake.start { start_reads = 2, delete_status = 500 }
---   -- the adapter: providers.daytona.connect(f.config())  (or the env of f.env() for the runner)
---   f.stats()  --> { creates=, created=, gets=, execs=, uploads=, downloads=, deletes=, destroyed=,
---                    lists=, unauthorized=, bad_requests=, unknown=, live=, ids=, requests=, ... }
---   f.set { delete_status = false }   -- change a switch while a run is going
---   f.close()
---
--- Sandboxes: POST /sandbox makes one in state "creating" (or "pending_build" with buildInfo),
--- as its answer says; the sandbox's GET /sandbox/{id} reads that state start_reads more times,
--- then "started" (or end_state, e.g. "error" or "build_failed", with an errorReason). The
--- start is counted in reads, not seconds, so what a client sends does not depend on the
--- machine's speed (a client that polls always sends a GET). Its commands run for real (spec/fakes/sandboxes.lua:
--- bubblewrap, the sandbox's own directory as /), with the create body's env as the process
--- environment. Like Daytona's daemon, process/execute does NOT use a shell: the command is
--- split on spaces honouring '...' and "..." (no escapes) and exec'd; `envs` is ignored (the
--- daemon of apps/daemon/pkg/toolbox/process/execute ignores it too); stdout and stderr come
--- back combined; a command over its timeout (default 360 s) answers 408.
---
--- Files: POST /files/bulk-upload (multipart: a field files[i].path, then the part files[i].file)
--- and POST /files/bulk-download {paths} (answered as multipart/form-data: a part named "file"
--- per file, filename = its path, or a part named "error" holding {message, statusCode, code})
--- are what the official SDK (@daytonaio/sdk 0.218) sends; the single-file GET /files/download
--- and POST /files/upload?path= of the toolbox spec are served too.
---
--- Bulk upload semantics: every file of a request is tried; a path that cannot be written (or one
--- upload_fail = fn(n, path) -> why names) is reported in a 400 {"errors": ["<path>: <why>", ...]},
--- as the daemon answers, while the others stay written. upload_status = status | fn(n, files)
--- forces a status for the n-th upload request before anything is written. Counters: uploads
--- (requests), upload_batches (the files of each, in order), upload_files (files written),
--- upload_failed, last_upload_files.
---
--- Forks: POST /sandbox/{id}/fork {name?} (ForkSandbox) makes one child: a copy of the parent's
--- root as it is at the call (host.snapshot, then a sandbox over it: files written in the parent
--- after the call are not in it; running processes are not carried over), with the parent's
--- labels, env and resources, reading "creating" for start_reads reads, then "started" (or
--- fork_end_state); the answer is the child's Sandbox. The parent runs on. 404 for an unknown
--- parent, 400 when it is not started, 409 for a name taken. GET /sandbox/{id}/forks lists the
--- children (includeDestroyed=true: the deleted too). fork_status = status | fn(n, id) forces a
--- status for the n-th fork call; lose_fork = fn(n) -> 'reset' | 'error' makes the child, then
--- closes the connection unanswered (a client may send the call again: a twin) or answers 500. Counters: forks (calls), forked (children made), fork_lists,
--- fork_bodies, lost_forks.
---
--- Snapshots (warm mode): POST /sandbox/{id}/snapshot {name} copies the sandbox's root for real
--- (spec/fakes/sandboxes.lua's host.snapshot) into a snapshot that reads "pending", then "active"
--- after snapshot_delay (GET /snapshots/{id or name}); the sandbox reads "snapshotting" for
--- that long (the SDK waits for it to leave that state); a name already taken is 409. POST /sandbox
--- {snapshot = <an active snapshot's name or id>} starts from that copy. Counters: snapshots
--- (POST calls), snapshot_gets, snapshot_bodies, last_snapshot.
---
--- Every request is counted (luv's tap.lua style: specs assert exact numbers). Switches (all
--- optional, changeable by set):
---   api_key ('test-daytona-key')        requests must carry Authorization: Bearer <it> (else 401)
---   start_reads (0)                     GETs of a new sandbox that still read "creating" (math.huge: it never starts)
---   end_state = 'error' | 'build_failed' the state a sandbox reaches instead of "started"
---   latency = seconds | {create=, get=, exec=, upload=, download=, delete=, list=}; values may be fn(n)
---   create_status / exec_status / delete_status / list_status / get_status = status | fn(n, ...):
---       force that status for the n-th call of the endpoint (401, 403, 408, 429, 500, ...)
---   auth_fail = 'create' | 'all'        401 on create (or on every API call)
---   lose_create = fn(n) -> 'reset'|nil   the n-th create makes the sandbox, then closes the
---                                       connection unanswered (st.lost counts them)
---   page_size (100)                     list page size (nextCursor paging)
---   snapshot_status = status | fn(n, id) force that status for POST /sandbox/{id}/snapshot
---   snapshot_delay (0.05)               seconds from a sandbox snapshot to the snapshot's "active"
---   snapshot_end_state = 'error' | 'build_failed'  the state a snapshot reaches instead of "active"
---   toolbox_public_url                  the toolboxProxyUrl sandboxes report (a Prism proxy in front
---                                       of f.toolbox_url, in the conformance specs)
--- Native builds (the adapter's env_mode native): GET /object-storage/push-access hands out
--- credentials for an S3 listener of the fake (path-style: GET /{bucket}?list-type=2&prefix=,
--- PUT /{bucket}/{org}/{hash}/context.tar; each request must carry a SigV4 Authorization with
--- the access key, the session token and the body's x-amz-content-sha256; a PUT's optional
--- x-amz-checksum-crc32, which the AWS SDK adds, must match the body, else 400 BadDigest). POST /snapshots
--- {name, buildInfo{dockerfileContent, contextHashes}} BUILDS for real: the Dockerfile is parsed
--- (lua/dockerfile.lua), every context tar is unpacked into one build context, every COPY
--- source must be in it (else the snapshot is build_failed naming the missing source), then the
--- steps run in a fresh sandbox (lua/replay.lua's semantics: RUN as the step's USER, COPY from
--- the received context) and its root becomes the snapshot, with the Dockerfile's final ENV as
--- the environment of sandboxes created from it. A failing step makes it build_failed with the
--- step's error as errorReason. Counters: builds, build_bodies (every POST /snapshots body),
--- build_contexts (name -> the received context's file list), s3_puts, s3_lists, s3_refused, push_access.
--- Switch: build_delay (0.05) seconds from a build's end to "active".
local clock = require('cseng.clock')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local crypto = require('cseng.crypto')

local common = require('spec.fakes.sandboxes')
local scaffold = require('spec.fakes.rest')
local NB = require('spec.fakes.native_build')
local json = scaffold.json

local fake = {}

local function err(status, message)
  local names = { [400] = 'Bad Request', [401] = 'Unauthorized', [403] = 'Forbidden', [404] = 'Not Found',
                  [408] = 'Request Timeout', [409] = 'Conflict', [429] = 'Too Many Requests', [500] = 'Internal Server Error' }
  return json(status, { statusCode = status, message = message, error = names[status] or 'Error' })
end

--- The daemon's parseCommand: split on ' ' outside quotes; ' and " quote (the other kind is
--- literal inside); no escapes.
function fake.parse_command(command)
  local args, cur, quote = {}, {}, nil
  for i = 1, #command do
    local c = command:sub(i, i)
    if c == '"' or c == "'" then
      if not quote then quote = c
      elseif quote == c then quote = nil
      else cur[#cur + 1] = c end
    elseif c == ' ' and not quote then
      if #cur > 0 then args[#args + 1] = table.concat(cur); cur = {} end
    else
      cur[#cur + 1] = c
    end
  end
  if #cur > 0 then args[#args + 1] = table.concat(cur) end
  return args
end

local function iso(t) return os.date('!%Y-%m-%dT%H:%M:%S.000Z', t) end

local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC_TABLE[i] = c
end

--- S3's x-amz-checksum-crc32 of a body: the CRC-32 (IEEE) as 4 big-endian bytes, base64.
function fake.crc32_b64(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = CRC_TABLE[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return crypto.base64(string.pack('>I4', c ~ 0xFFFFFFFF))
end

function fake.start(opts)
  local host = common.host()
  local core = scaffold.fake(opts, { api_key = 'test-daytona-key', start_reads = 0 },
    { snapshot_deletes = 0, gets = 0, execs = 0, uploads = 0, downloads = 0, timeouts = 0, creates_bodies = {}, exec_bodies = {},
      snapshots = 0, snapshot_gets = 0, snapshot_bodies = {},
      forks = 0, forked = 0, fork_lists = 0, fork_bodies = {}, lost_forks = 0, upload_files = 0, upload_batches = {}, upload_failed = 0,
      builds = 0, build_bodies = {}, build_contexts = {}, s3_puts = 0, s3_lists = 0, s3_refused = 0, push_access = 0 }, host)
  local cfg, st, sandboxes, forced = core.cfg, core.st, core.sandboxes, core.forced
  local toolbox_srv
  local snapshots = {} -- name -> {id, name, artifact, created, created_ns, delay, end_state}
  local forks_of = {} -- parent id -> its children (records, also once deleted)
  if cfg.snapshot_delay == nil then cfg.snapshot_delay = 0.05 end
  if cfg.build_delay == nil then cfg.build_delay = 0.05 end
  local objects = {} -- S3 key -> bytes
  local s3 = { access_key = 'fake-push-key', secret = 'fake-push-secret', token = 'fake-push-token',
               bucket = 'daytona-volume-builds', org = 'org-cseng-fake' }
  local s3_srv

  -- The build of POST /snapshots (spec/fakes/native_build.lua): artifact, env, or nil, nil, why.
  local function run_build(name, info)
    local hashes = type(info.contextHashes) == 'table' and info.contextHashes or {}
    local tars = {}
    for i, h in ipairs(hashes) do tars[i] = objects[s3.org .. '/' .. tostring(h) .. '/context.tar'] or false end
    local artifact, env, files, why = NB.build_tars(host, name, info.dockerfileContent, tars, function(i, xerr)
      return 'context ' .. tostring(hashes[i]) .. (xerr and (': ' .. xerr) or ' was not uploaded')
    end)
    if files then st.build_contexts[name] = files end
    return artifact, env, why
  end

  local function snapshot_state(snap)
    if (clock.now() - snap.created_ns) / 1e9 >= (snap.delay or 0) then return snap.end_state or 'active' end
    return 'pending'
  end

  local function find_snapshot(ref)
    if snapshots[ref] then return snapshots[ref] end
    for _, snap in pairs(snapshots) do if snap.id == ref then return snap end end
    return nil
  end

  local function state_of(s)
    if s.deleted then return 'destroyed' end
    if s.snapshotting_until and clock.now() < s.snapshotting_until then return 'snapshotting' end
    if s.reads_to_start then return s.build and 'pending_build' or 'creating' end
    return s.end_state or 'started'
  end

  -- a read of the sandbox (GET /sandbox/{id}) moves it towards its start
  local function read(s)
    if not s.reads_to_start then return end
    if s.reads_to_start <= 0 then s.reads_to_start = nil else s.reads_to_start = s.reads_to_start - 1 end
  end

  local function view(s)
    local state = state_of(s)
    local v = {
      id = s.id, organizationId = 'org-cseng-fake', name = s.name, snapshot = s.snapshot, user = s.user,
      env = s.env, labels = s.labels, public = false, networkBlockAll = s.networkBlockAll,
      target = s.target, cpu = s.cpu, gpu = 0, memory = s.memory, disk = s.disk, state = state,
      desiredState = s.deleted and 'destroyed' or 'started',
      autoStopInterval = s.autoStopInterval, autoArchiveInterval = 10080, autoDeleteInterval = s.autoDeleteInterval,
      createdAt = iso(s.created), updatedAt = iso(os.time()),
      toolboxProxyUrl = cfg.toolbox_public_url or toolbox_srv:url(),
    }
    if state == 'error' or state == 'build_failed' then v.errorReason = 'injected by the fake: ' .. state end
    if s.build then
      local hashes = type(s.build.contextHashes) == 'table' and s.build.contextHashes or {}
      v.buildInfo = { dockerfileContent = s.build.dockerfileContent, contextHashes = jsonl.array(hashes),
                      createdAt = iso(s.created), updatedAt = iso(s.created), snapshotRef = 'cseng-fake-build-' .. s.id:sub(1, 8) }
    end
    return v
  end

  local function authorized(req)
    return req.headers.authorization == 'Bearer ' .. cfg.api_key
  end

  local function decode_body(req)
    local ok, b = pcall(cjson.decode, req.body or '')
    if not ok or type(b) ~= 'table' then return nil end
    return b
  end

  -- ---- the REST API -------------------------------------------------------------------------

  local function snapshot(req, seg, n)
    local snap_of = common.urldecode(seg.sandboxIdOrName)
    local s = forced('snapshot_status', n, snap_of)
    if s then return err(s, 'forced failure ' .. s) end
    local sb = sandboxes[snap_of]
    if not sb then return err(404, 'Sandbox with ID or name ' .. snap_of .. ' not found') end
    local body = decode_body(req)
    if not body or type(body.name) ~= 'string' or body.name == '' then
      core.count('bad_requests')
      return err(400, 'name is required')
    end
    st.snapshot_bodies[#st.snapshot_bodies + 1] = body
    st.last_snapshot = body
    if snapshots[body.name] then return err(409, 'Snapshot with name ' .. body.name .. ' already exists') end
    if state_of(sb) ~= 'started' then return err(400, 'sandbox is not started') end
    local artifact, why = host.snapshot(sb.host, body.name)
    if not artifact then return err(500, 'snapshot failed: ' .. tostring(why)) end
    snapshots[body.name] = { id = common.uuid(), name = body.name, artifact = artifact, created = os.time(),
                             created_ns = clock.now(), delay = cfg.snapshot_delay, end_state = cfg.snapshot_end_state,
                             cpu = sb.cpu, memory = sb.memory, disk = sb.disk }
    sb.snapshotting_until = clock.now() + math.floor((cfg.snapshot_delay or 0) * 1e9)
    local v = view(sb)
    v.state = 'snapshotting'
    return json(200, v)
  end

  -- fork: one child per call, a copy of the parent's root as it is now (host.snapshot, then a
  -- sandbox over it), started after start_reads reads like a create; the parent runs on
  local function fork(req, seg, n)
    local fork_of = common.urldecode(seg.sandboxIdOrName)
    local s = forced('fork_status', n, fork_of)
    if s then return err(s, 'forced failure ' .. s) end
    local parent = sandboxes[fork_of]
    if not parent then
      for _, x in pairs(sandboxes) do if x.name == fork_of then parent = x end end
    end
    if not parent then return err(404, 'Sandbox with ID or name ' .. fork_of .. ' not found') end
    local body = decode_body(req)
    if not body or (body.name ~= nil and (type(body.name) ~= 'string' or body.name == '')) then
      core.count('bad_requests')
      return err(400, 'the body must be a ForkSandbox object ({name?})')
    end
    st.fork_bodies[#st.fork_bodies + 1] = body
    if body.name then
      for _, x in pairs(sandboxes) do
        if x.name == body.name then return err(409, 'Sandbox with name ' .. body.name .. ' already exists') end
      end
    end
    if state_of(parent) ~= 'started' then return err(400, 'Sandbox is not started (' .. state_of(parent) .. ')') end
    local id = common.uuid()
    local artifact, why = host.snapshot(parent.host, 'fork-' .. id)
    if not artifact then return err(500, 'fork failed: ' .. tostring(why)) end
    local labels = scaffold.with({}, parent.labels)
    local sb = {
      id = id, name = body.name or id, snapshot = parent.snapshot, user = parent.user, env = parent.env, labels = labels,
      networkBlockAll = parent.networkBlockAll, target = parent.target, cpu = parent.cpu, memory = parent.memory,
      disk = parent.disk, autoStopInterval = parent.autoStopInterval, autoDeleteInterval = parent.autoDeleteInterval,
      created = os.time(), created_ns = clock.now(), reads_to_start = tonumber(cfg.start_reads) or 0,
      end_state = cfg.fork_end_state, parent = parent.id,
    }
    sb.host = host.create { env = sb.env, labels = labels, warm_artifact = artifact, cpus = sb.cpu }
    core.add(id, sb)
    st.forked = st.forked + 1
    forks_of[parent.id] = forks_of[parent.id] or {}
    table.insert(forks_of[parent.id], sb)
    local lose = type(cfg.lose_fork) == 'function' and cfg.lose_fork(n) or nil
    if lose == 'reset' then
      st.lost_forks = st.lost_forks + 1
      req:abort()
      return nil
    elseif lose == 'error' then
      st.lost_forks = st.lost_forks + 1
      return err(500, 'fork answer lost by the fake (the child exists)')
    end
    return json(200, view(sb))
  end

  local function fork_list(req, seg)
    local forks_id = common.urldecode(seg.sandboxIdOrName)
    local q = common.query(req.query)
    local out = jsonl.array()
    for _, sb in ipairs(forks_of[forks_id] or {}) do
      if not sb.deleted or q.includeDestroyed == 'true' then out[#out + 1] = view(sb) end
    end
    return json(200, out)
  end

  local function push_access()
    return json(200, { accessKey = s3.access_key, secret = s3.secret, sessionToken = s3.token, storageUrl = s3_srv:url(),
                       organizationId = s3.org, bucket = s3.bucket, region = 'us-east-1' })
  end

  local function snapshot_create(req)
    local body = decode_body(req)
    if not body or type(body.name) ~= 'string' or body.name == '' then
      core.count('bad_requests')
      return err(400, 'name is required')
    end
    st.build_bodies[#st.build_bodies + 1] = body
    if snapshots[body.name] then return err(409, 'Snapshot with name ' .. body.name .. ' already exists') end
    local info = body.buildInfo
    if type(info) ~= 'table' or type(info.dockerfileContent) ~= 'string' then
      core.count('bad_requests')
      return err(400, 'buildInfo.dockerfileContent is required (no imageName in this fake)')
    end
    local artifact, env, why = run_build(body.name, info)
    snapshots[body.name] = { id = common.uuid(), name = body.name, artifact = artifact, env = env, created = os.time(),
                             created_ns = clock.now(), delay = cfg.build_delay, end_state = (not artifact) and 'build_failed' or nil,
                             reason = why, cpu = body.cpu or 1, memory = body.memory or 1, disk = body.disk or 3,
                             build = info }
    return json(200, { id = snapshots[body.name].id, name = body.name, state = 'pending', organizationId = s3.org,
                       general = false, imageName = cjson.null, cpu = body.cpu or 1, gpu = 0, mem = body.memory or 1,
                       disk = body.disk or 3, createdAt = iso(os.time()), updatedAt = iso(os.time()) })
  end

  -- by id, as Daytona's API (its copy of the root is removed)
  local function snapshot_delete(_, seg)
    local snap_ref = common.urldecode(seg.id)
    local snap = find_snapshot(snap_ref)
    if not snap or snap.id ~= snap_ref then return err(404, 'Snapshot with ID ' .. snap_ref .. ' not found') end
    snapshots[snap.name] = nil
    if snap.artifact then pcall(require('cseng.fs').remove_tree, snap.artifact) end
    return 200, {}, ''
  end

  local function snapshot_get(_, seg)
    local snap_ref = common.urldecode(seg.id)
    local snap = find_snapshot(snap_ref)
    if not snap then return err(404, 'Snapshot ' .. snap_ref .. ' not found') end
    local state = snapshot_state(snap)
    return json(200, {
      id = snap.id, organizationId = 'org-cseng-fake', general = false, name = snap.name,
      imageName = 'cseng-fake/' .. snap.name, state = state, size = 0.1, entrypoint = cjson.null,
      cpu = snap.cpu, gpu = 0, mem = snap.memory, disk = snap.disk,
      errorReason = (state == 'error' or state == 'build_failed') and (snap.reason or ('injected by the fake: ' .. state)) or cjson.null,
      createdAt = iso(snap.created), updatedAt = iso(os.time()), lastUsedAt = cjson.null,
    })
  end

  local function create(req, _, n)
    if cfg.auth_fail == 'create' then return err(401, 'Invalid API key') end
    local s = forced('create_status', n)
    if s then return err(s, 'forced failure ' .. s) end
    local body = decode_body(req)
    core.record(req, body and type(body.snapshot) == 'string' and find_snapshot(body.snapshot) and 'create_from_snapshot'
      or 'create', '/sandbox')
    if not body then
      core.count('bad_requests')
      return err(400, 'body must be a JSON object')
    end
    st.creates_bodies[#st.creates_bodies + 1] = body
    st.last_create = body
    local id = common.uuid()
    local env = type(body.env) == 'table' and body.env or {}
    local from = type(body.snapshot) == 'string' and find_snapshot(body.snapshot)
    if from and from.env then env = scaffold.with(scaffold.with({}, from.env), env) end -- the image's ENV under the create's
    local sb = {
      id = id, name = type(body.name) == 'string' and body.name or id, snapshot = body.snapshot or 'daytonaio/sandbox:fake',
      user = type(body.user) == 'string' and body.user or 'root', env = env,
      labels = type(body.labels) == 'table' and body.labels or {}, networkBlockAll = body.networkBlockAll == true,
      target = type(body.target) == 'string' and body.target or 'us', cpu = body.cpu or 1, memory = body.memory or 1,
      disk = body.disk or 3, autoStopInterval = body.autoStopInterval or 15, autoDeleteInterval = body.autoDeleteInterval or -1,
      build = type(body.buildInfo) == 'table' and body.buildInfo or nil, created = os.time(), created_ns = clock.now(),
      reads_to_start = tonumber(cfg.start_reads) or 0, end_state = cfg.end_state,
    }
    local snap = type(body.snapshot) == 'string' and find_snapshot(body.snapshot)
    if snap and snapshot_state(snap) ~= 'active' then
      return err(400, 'Snapshot ' .. body.snapshot .. ' is ' .. snapshot_state(snap))
    end
    sb.from_snapshot = snap and snap.name or nil
    sb.host = host.create { env = env, labels = sb.labels, warm_artifact = snap and snap.artifact or nil, cpus = sb.cpu }
    core.add(id, sb)
    -- lose_create = fn(n) -> 'reset': the sandbox exists, its answer is lost (the connection closed)
    if type(cfg.lose_create) == 'function' and cfg.lose_create(n) == 'reset' then
      st.lost = (st.lost or 0) + 1
      req:abort()
      return nil
    end
    return json(200, view(sb))
  end

  local function list(req, _, n)
    local s = forced('list_status', n)
    if s then return err(s, 'forced failure ' .. s) end
    local q = common.query(req.query)
    local want = {}
    if q.labels and q.labels ~= '' then
      local ok, l = pcall(cjson.decode, q.labels)
      if not ok or type(l) ~= 'table' then
        core.count('bad_requests')
        return err(400, 'labels must be a JSON object')
      end
      want = l
    end
    st.last_list_labels = want
    local page, next_start = scaffold.page(core.matching('labels', want), tonumber(q.cursor) or 1, cfg.page_size or 100,
      function(sb)
        local v = view(sb)
        v.env, v.buildInfo, v.networkBlockAll = nil, nil, nil
        return v
      end)
    return json(200, { items = jsonl.array(page), nextCursor = next_start and tostring(next_start) or cjson.null })
  end

  local function get(_, seg, n)
    local id = common.urldecode(seg.sandboxIdOrName)
    local s = forced('get_status', n)
    if s then return err(s, 'forced failure ' .. s) end
    local sb = sandboxes[id]
    if not sb then return err(404, 'Sandbox with ID or name ' .. id .. ' not found') end
    read(sb)
    return json(200, view(sb))
  end

  local function destroy(_, seg, n)
    local id = common.urldecode(seg.sandboxIdOrName)
    local s = forced('delete_status', n, id)
    if s then return err(s, 'forced failure ' .. s) end
    local sb = sandboxes[id]
    if not sb then return err(404, 'Sandbox with ID or name ' .. id .. ' not found') end
    sb.deleted = true
    core.remove(id)
    return json(200, view(sb))
  end

  local api = core.routes({
    -- create is recorded once its body says create or create_from_snapshot
    { 'POST', '/sandbox', create, op = 'create', hit = { 'creates', 'create' }, record = false },
    { 'GET', '/sandbox', list, op = 'list', hit = { 'lists', 'list' } },
    { 'GET', '/sandbox/{sandboxIdOrName}', get, op = 'get', hit = { 'gets', 'get' } },
    { 'DELETE', '/sandbox/{sandboxIdOrName}', destroy, op = 'destroy', hit = { 'deletes', 'delete' } },
    { 'POST', '/sandbox/{sandboxIdOrName}/snapshot', snapshot, op = 'snapshot', hit = { 'snapshots', 'snapshot' } },
    { 'POST', '/sandbox/{sandboxIdOrName}/fork', fork, op = 'fork', hit = { 'forks', 'fork' } },
    { 'GET', '/sandbox/{sandboxIdOrName}/forks', fork_list, op = 'fork_list', hit = { 'fork_lists', 'fork_list' } },
    { 'GET', '/object-storage/push-access', push_access, op = 'push_access', hit = { 'push_access', 'push_access' } },
    { 'POST', '/snapshots', snapshot_create, op = 'snapshot_create', hit = { 'builds', 'build' } },
    { 'GET', '/snapshots/{id}', snapshot_get, op = 'snapshot_get', hit = { 'snapshot_gets', 'snapshot_get' } },
    { 'DELETE', '/snapshots/{id}', snapshot_delete, op = 'snapshot_delete', hit = { 'snapshot_deletes', 'snapshot_delete' } },
  }, function(req) return err(404, 'Cannot ' .. req.method .. ' ' .. req.path) end, function(req, row)
    core.request(req.method .. ' ' .. req.path)
    if cfg.auth_fail == 'all' or not authorized(req) then
      core.refused(row ~= nil and row.op == 'create')
      return err(401, 'Unauthorized')
    end
  end)

  -- ---- the toolbox ------------------------------------------------------------------------

  -- the sandbox a toolbox request names: its id (URL-decoded) and record (nil: none)
  local function target(seg)
    local id = common.urldecode(seg.sandboxId)
    return id, sandboxes[id]
  end

  local function exec(req, seg, n)
    local id, sb = target(seg)
    if not sb then return err(404, 'sandbox ' .. id .. ' not found') end
    local body = decode_body(req)
    if not body or type(body.command) ~= 'string' then
      core.count('bad_requests')
      return err(400, 'command is required')
    end
    st.exec_bodies[#st.exec_bodies + 1] = body
    st.last_exec = body
    local s = forced('exec_status', n, body.command)
    if s then return err(s, 'forced failure ' .. s) end
    if state_of(sb) ~= 'started' then return err(409, 'sandbox is not started') end
    local argv = fake.parse_command(body.command)
    if #argv == 0 then return err(400, 'empty command') end
    local timeout = math.tointeger(body.timeout) and body.timeout > 0 and body.timeout or 360
    local r = host.run(sb.host, { argv = argv }, { cwd = type(body.cwd) == 'string' and body.cwd or nil, timeout = timeout })
    if r.timed_out then
      core.count('timeouts')
      return err(408, string.format('Command execution timed out after %d seconds. The timeout can be increased by '
        .. 'adjusting the timeout parameter in the request.', timeout))
    end
    return json(200, { exitCode = r.code, result = (r.stdout or '') .. (r.stderr or '') })
  end

  local function bulk_upload(req, seg)
    local id, sb = target(seg)
    local parts, why = common.multipart(req.body, req.headers['content-type'])
    -- files[i].path (a field) and files[i].file (the data), i from 0
    local files, order = {}, {}
    for _, p in ipairs(parts or {}) do
      local i, field = tostring(p.name):match('^files%[(%d+)%]%.(%a+)$')
      if i and (field == 'path' or field == 'file') then
        if not files[i] then files[i] = {}; order[#order + 1] = i end
        files[i][field] = field == 'path' and p.data or p
      end
    end
    local shape = jsonl.array()
    for _, i in ipairs(order) do
      shape[#shape + 1] = { path = files[i].path and 'a multipart field' or nil, file = files[i].file and 'a multipart part' or nil }
    end
    core.record(req, 'upload', '/{sandboxId}/files/bulk-upload', { files = shape })
    if not sb then return err(404, 'sandbox ' .. id .. ' not found') end
    if #order == 0 then
      core.count('bad_requests')
      return err(400, 'no files[i].path / files[i].file parts' .. (why and (': ' .. why) or ''))
    end
    -- like the daemon: every file is tried; those that fail are named in a 400 {"errors"}, the
    -- others stay written (a partial upload the client must report)
    local n = st.uploads
    local forced_status = forced('upload_status', n, #order)
    if forced_status then return err(forced_status, 'forced failure ' .. forced_status) end
    local errs = {}
    for _, i in ipairs(order) do
      local fpath, file = files[i].path, files[i].file
      if not fpath or fpath == '' or not file then
        core.count('bad_requests')
        return err(400, 'files[' .. i .. '] needs both .path and .file')
      end
      local refuse = type(cfg.upload_fail) == 'function' and cfg.upload_fail(n, fpath) or nil
      local ok, werr = false, refuse
      if not refuse then ok, werr = host.write(sb.host, fpath, file.data) end
      if ok then
        st.uploaded_bytes = (st.uploaded_bytes or 0) + #file.data
        st.upload_files = st.upload_files + 1
      else
        errs[#errs + 1] = fpath .. ': ' .. tostring(werr)
        st.upload_failed = st.upload_failed + 1
      end
    end
    st.last_upload_files = #order
    st.upload_batches[#st.upload_batches + 1] = #order
    if #errs > 0 then return json(400, { errors = jsonl.array(errs) }) end
    return 200, {}, ''
  end

  local function bulk_download(req, seg)
    local id, sb = target(seg)
    if not sb then return err(404, 'sandbox ' .. id .. ' not found') end
    local body = decode_body(req)
    if not body or type(body.paths) ~= 'table' or #body.paths == 0 then
      core.count('bad_requests')
      return err(400, 'paths is required')
    end
    local boundary = 'cseng-fake-' .. common.uuid()
    local out = {}
    for _, fpath in ipairs(body.paths) do
      local data = type(fpath) == 'string' and host.read(sb.host, fpath)
      if data then
        out[#out + 1] = table.concat { '--', boundary, '\r\nContent-Disposition: form-data; name="file"; filename="',
          fpath, '"\r\nContent-Type: application/octet-stream\r\n\r\n', data, '\r\n' }
      else
        out[#out + 1] = table.concat { '--', boundary, '\r\nContent-Disposition: form-data; name="error"; filename="',
          tostring(fpath), '"\r\nContent-Type: application/json\r\n\r\n',
          jsonl.encode { message = 'file not found: ' .. tostring(fpath), statusCode = 404, code = 'FILE_NOT_FOUND' }, '\r\n' }
      end
    end
    out[#out + 1] = '--' .. boundary .. '--\r\n'
    return 200, { ['Content-Type'] = 'multipart/form-data; boundary=' .. boundary }, table.concat(out)
  end

  local function file_upload(req, seg)
    local id, sb = target(seg)
    local parts, why = common.multipart(req.body, req.headers['content-type'])
    core.record(req, 'upload', '/{sandboxId}/files/upload', scaffold.part_names(parts))
    if not sb then return err(404, 'sandbox ' .. id .. ' not found') end
    local q = common.query(req.query)
    local file
    for _, p in ipairs(parts or {}) do if p.name == 'file' then file = p end end
    if not q.path or q.path == '' or not file then
      core.count('bad_requests')
      return err(400, 'path and a multipart part named "file" are required' .. (why and (': ' .. why) or ''))
    end
    local ok, werr = host.write(sb.host, q.path, file.data)
    if not ok then return err(400, tostring(werr)) end
    st.uploaded_bytes = (st.uploaded_bytes or 0) + #file.data
    return json(200, { message = 'File uploaded successfully' })
  end

  local function file_download(req, seg)
    local id, sb = target(seg)
    if not sb then return err(404, 'sandbox ' .. id .. ' not found') end
    local q = common.query(req.query)
    local data = q.path and host.read(sb.host, q.path)
    if not data then return err(404, 'file not found: ' .. tostring(q.path)) end
    return 200, { ['Content-Type'] = 'application/octet-stream' }, data
  end

  local toolbox = core.routes({
    { 'POST', '/{sandboxId}/process/execute', exec, op = 'exec', hit = { 'execs', 'exec' } },
    -- the uploads are recorded with the shape of their parts
    { 'POST', '/{sandboxId}/files/bulk-upload', bulk_upload, op = 'upload', hit = { 'uploads', 'upload' }, record = false },
    { 'POST', '/{sandboxId}/files/bulk-download', bulk_download, op = 'download', hit = { 'downloads', 'download' } },
    { 'POST', '/{sandboxId}/files/upload', file_upload, op = 'upload', hit = { 'uploads', 'upload' }, record = false },
    { 'GET', '/{sandboxId}/files/download', file_download, op = 'download', hit = { 'downloads', 'download' } },
  }, function(req) return err(404, 'no route ' .. req.method .. ' ' .. req.path) end, function(req)
    core.request('toolbox ' .. req.method .. ' ' .. req.path)
    if cfg.auth_fail == 'all' or not authorized(req) then
      core.refused(false)
      return err(401, 'Unauthorized')
    end
  end)

  -- ---- S3 (the build contexts) --------------------------------------------------------------

  local function s3_xml(status, code, message)
    return status, { ['Content-Type'] = 'application/xml' },
      '<?xml version="1.0" encoding="UTF-8"?><Error><Code>' .. code .. '</Code><Message>' .. message .. '</Message></Error>'
  end

  local function s3_handler(req)
    local method, path = req.method, req.path
    core.request('s3 ' .. method .. ' ' .. path)
    local a = req.headers.authorization or ''
    local body = req.body or ''
    local cred = a:match('^AWS4%-HMAC%-SHA256 Credential=([^,]+),')
    if not cred or cred:sub(1, #s3.access_key + 1) ~= s3.access_key .. '/' or not cred:match('/%d+/[%w%-]+/s3/aws4_request$')
      or req.headers['x-amz-security-token'] ~= s3.token
      or (req.headers['x-amz-content-sha256'] ~= crypto.sha256_hex(body)) then
      core.count('s3_refused')
      return s3_xml(403, 'AccessDenied', 'bad SigV4 credentials, token or payload hash')
    end
    local bucket, key = path:match('^/([^/]+)/?(.*)$')
    if bucket ~= s3.bucket then return s3_xml(404, 'NoSuchBucket', tostring(bucket)) end
    key = common.urldecode(key or '')
    if method == 'GET' and key == '' then
      core.record(req, 's3_list', '/{bucket}')
      core.hit('s3_lists', 's3_list')
      local q = common.query(req.query)
      local prefix = q.prefix or ''
      local keys = {}
      for k in pairs(objects) do if k:sub(1, #prefix) == prefix then keys[#keys + 1] = k end end
      table.sort(keys)
      local items = {}
      for i = 1, math.min(#keys, tonumber(q['max-keys']) or 1000) do
        items[#items + 1] = '<Contents><Key>' .. keys[i] .. '</Key><Size>' .. #objects[keys[i]] .. '</Size></Contents>'
      end
      return 200, { ['Content-Type'] = 'application/xml' }, '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
        .. '<Name>' .. s3.bucket .. '</Name><Prefix>' .. prefix .. '</Prefix><KeyCount>' .. #items .. '</KeyCount>'
        .. '<IsTruncated>false</IsTruncated>' .. table.concat(items) .. '</ListBucketResult>'
    end
    if method == 'PUT' and key ~= '' then
      core.record(req, 's3_put', '/{bucket}/{key}')
      core.hit('s3_puts', 's3_put')
      local crc = req.headers['x-amz-checksum-crc32']
      if crc and crc ~= fake.crc32_b64(body) then -- a flexible checksum, when sent, is checked (S3 does)
        core.count('s3_refused')
        return s3_xml(400, 'BadDigest', 'The CRC32 you specified did not match the calculated checksum.')
      end
      objects[key] = body
      return 200, { ETag = '"' .. crypto.sha256_hex(body):sub(1, 32) .. '"' }, ''
    end
    return s3_xml(400, 'NotImplemented', method .. ' ' .. path)
  end

  s3_srv = scaffold.listen(s3_handler)
  local srv = scaffold.listen(api, cfg.port)
  toolbox_srv = scaffold.listen(toolbox)
  local f = { url = srv:url(), port = srv:port(), toolbox_url = toolbox_srv:url(), api_key = cfg.api_key }

  --- The provider_config that points the adapter here (fast polling).
  function f.config(extra)
    return scaffold.with({ adapter = 'daytona', api_url = f.url, api_key = cfg.api_key,
                           poll = { first = 0.01, factor = 1.1, max = 0.05 } }, extra)
  end

  --- The environment (or --env-file lines) that points the runner here.
  function f.env(extra)
    return scaffold.with({ DAYTONA_API_URL = f.url, DAYTONA_API_KEY = cfg.api_key }, extra)
  end

  return core.finish(f, { srv, toolbox_srv, s3_srv })
end

return fake
