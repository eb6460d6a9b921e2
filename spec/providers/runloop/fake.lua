--- A stateful loopback fake of the Runloop devbox REST API as @runloop/api-client 1.32 speaks it
--- (its src/resources/devboxes: paths, bodies, the views it reads), on cseng.serve (HTTP/1.1:
--- the SDK script passes `http2: false`), whose devboxes really run commands
--- (spec/fakes/sandboxes.lua: bubblewrap). Both the SDK (spec/sdk/runloop.mjs) and the adapter
--- (lua/providers/runloop.lua) run against it; requests are recorded in the shared conformance
--- shape while f.record(client) is on.
---
---   local runloop_fake = require 'spec.providers.runloop.fake'
---   local f = runloop_fake.start { boot = 0.2, long_poll = 0.5 }
---   -- the adapter: providers.runloop.connect(f.config())  (the runner: f.env() as an --env-file)
---   f.stats() --> { creates=, created=, deletes= (shutdown calls), destroyed=, lists=, execs=, waits=,
---                   timeouts= (408s), kills=, uploads=, downloads=, snapshots=, unauthorized=,
---                   bad_requests=, unknown=, no_request_id=, live=, ... }
---   f.record('sdk' | 'adapter' | false) ; f.records(client) --> the shared conformance records
---                  (spec/helpers/conformance.lua; op and route from fake.route; a multipart
---                  upload as its fields {path, file = its size})
---   f.set { delete_status = false } ; f.close()
---
--- Every call must carry Authorization: Bearer <api_key> (else 401).
---   POST /v1/devboxes {blueprint_id | blueprint_name | snapshot_id, metadata, environment_variables,
---        launch_parameters{keep_alive_time_seconds, resource_size_request, user_parameters}, name}
---        -> DevboxView, status "provisioning"; "running" `boot` seconds later. The same
---        x-request-id again returns the same devbox (the SDK's retries are idempotent).
---   POST /v1/devboxes/create_and_await_running -> the same, answered once it runs
---   POST /v1/devboxes/{id}/wait_for_status {statuses, timeout_seconds} -> DevboxView once its
---        status is one of them, else 408 after min(timeout_seconds, long_poll) seconds
---   GET  /v1/devboxes/{id} ; GET /v1/devboxes?limit=&starting_after= -> {devboxes, has_more, total_count}
---   POST /v1/devboxes/{id}/execute?last_n= {command, command_id, optimistic_timeout} -> the
---        execution, completed if it ended within optimistic_timeout (25) seconds. The command is
---        a shell line run in the user's home (root: /root) with the devbox's environment
---        variables, as root when user_parameters.uid is 0, else as uid 1000; the same command_id
---        again returns the same execution. stdout/stderr: the last last_n (100) lines.
---   POST /v1/devboxes/{id}/execute_async {command} -> the execution (running)
---   POST .../executions/{eid}/wait_for_status?last_n= {statuses} -> long poll as above
---   GET  .../executions/{eid} ; POST .../executions/{eid}/kill -> the execution (really killed: 137)
---   POST .../upload_file (multipart: path, file) -> {} ; POST .../download_file {path} -> the bytes | 404
---   POST .../shutdown -> DevboxView "shutdown"; 400 when it is not running any more
---   POST .../snapshot_disk_async {name, metadata} -> DevboxSnapshotView (the devbox's root is
---        copied, host.snapshot); POST .../snapshot_disk -> the same, once complete
---   GET  /v1/devboxes/disk_snapshots?limit=&starting_after=&devbox_id= -> {snapshots, has_more}
---   GET  /v1/devboxes/disk_snapshots/{id}/status -> {status, snapshot} ; POST .../{id}/delete -> {}
---   Native builds (blueprints): POST /v1/objects {name, content_type, ttl_ms, metadata} -> ObjectView
---        with an upload_url on this fake (PUT /fake-storage/{id}?sig=..., no Authorization: a
---        presigned URL, signed without a Content-Type: a PUT with a non-empty one is refused, 403),
---        POST /v1/objects/{id}/complete -> READ_ONLY; the context may be a tar or a gzipped tar
---        (the SDK's build_context_dir packs a tgz);
---        POST /v1/blueprints {name, dockerfile, build_context{type object, object_id}, metadata}
---        -> BlueprintView "queued", then it BUILDS for real (spec/fakes/native_build.lua: the
---        object's tar is the build context, every COPY source must be in it, the steps run in a
---        fresh sandbox whose root becomes the blueprint) -> "build_complete" or "failed" with
---        failure_reason and GET /v1/blueprints/{id}/logs; GET /v1/blueprints?name= lists them;
---        POST /v1/devboxes {blueprint_id | blueprint_name} starts from the built root with the
---        Dockerfile's ENV under environment_variables. Counters: builds, build_bodies,
---        build_contexts (name -> the context's files), object_uploads, object_refused.
--- Switches (all optional, changeable by set):
---   api_key ('test-runloop-key'), boot (0.05 s), long_poll (25 s), snapshot_delay (0.05 s)
---   latency = seconds | {create=, exec=, delete=, list=, snapshot=}; values may be fn(n)
---   create_status / exec_status / delete_status / list_status / snapshot_status = status | fn(n, ...)
---   optimistic_cap = seconds      execute waits at most this long (not 25 s) before answering "running"
---   boot_fail = reason            devboxes go to "failure" with this failure_reason
---   snapshot_fail = message       snapshots end in "error"
---   page_size (100)               list page size
local task = require('cseng.task')
local clock = require('cseng.clock')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')

local crypto = require('cseng.crypto')
local common = require('spec.fakes.sandboxes')
local NB = require('spec.fakes.native_build')
local scaffold = require('spec.fakes.rest')
local json = scaffold.json

local fake = {}

local SIZES = { X_SMALL = true, SMALL = true, MEDIUM = true, LARGE = true, X_LARGE = true, XX_LARGE = true,
                CUSTOM_SIZE = true }
local UUID = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$'

local function err(status, message)
  return json(status, { message = message })
end

local ROUTES = {
  { 'POST', '/v1/devboxes', 'create' },
  { 'POST', '/v1/objects', 'object_create' },
  { 'POST', '/v1/objects/{id}/complete', 'object_complete' },
  { 'PUT', '/fake-storage/{id}', 'object_upload' },
  { 'GET', '/v1/blueprints', 'blueprint_list' },
  { 'POST', '/v1/blueprints', 'blueprint_create' },
  { 'GET', '/v1/blueprints/{id}/logs', 'blueprint_logs' },
  { 'GET', '/v1/blueprints/{id}', 'blueprint_get' },
  { 'POST', '/v1/devboxes/create_and_await_running', 'create_and_await' },
  { 'GET', '/v1/devboxes', 'list' },
  { 'GET', '/v1/devboxes/disk_snapshots', 'snapshot_list' },
  { 'GET', '/v1/devboxes/disk_snapshots/{id}/status', 'snapshot_status' },
  { 'POST', '/v1/devboxes/disk_snapshots/{id}/delete', 'snapshot_delete' },
  { 'GET', '/v1/devboxes/{id}', 'get' },
  { 'POST', '/v1/devboxes/{id}/wait_for_status', 'wait' },
  { 'POST', '/v1/devboxes/{id}/execute', 'exec' },
  { 'POST', '/v1/devboxes/{id}/execute_async', 'exec_async' },
  { 'POST', '/v1/devboxes/{id}/executions/{executionId}/wait_for_status', 'exec_wait' },
  { 'GET', '/v1/devboxes/{id}/executions/{executionId}', 'exec_get' },
  { 'POST', '/v1/devboxes/{id}/executions/{executionId}/kill', 'exec_kill' },
  { 'POST', '/v1/devboxes/{id}/upload_file', 'write_file' },
  { 'POST', '/v1/devboxes/{id}/download_file', 'read_file' },
  { 'POST', '/v1/devboxes/{id}/shutdown', 'destroy' },
  { 'POST', '/v1/devboxes/{id}/snapshot_disk_async', 'snapshot' },
  { 'POST', '/v1/devboxes/{id}/snapshot_disk', 'snapshot_sync' },
}

fake.route = scaffold.router(ROUTES)

-- The last n lines of s.
local function last_lines(s, n)
  if n <= 0 then return '' end
  local count, pos = 0, #s
  if s:sub(-1) == '\n' then pos = pos - 1 end
  while pos > 0 do
    if s:sub(pos, pos) == '\n' then
      count = count + 1
      if count == n then return s:sub(pos + 1), true end
    end
    pos = pos - 1
  end
  return s, false
end

function fake.start(opts)
  local host = common.host()
  local core = scaffold.fake(opts, { api_key = 'test-runloop-key', boot = 0.05, long_poll = 25, snapshot_delay = 0.05 },
    { execs = 0, waits = 0, timeouts = 0, kills = 0, uploads = 0, downloads = 0, snapshots = 0, no_request_id = 0,
      create_bodies = {}, exec_bodies = {}, builds = 0, build_bodies = {}, build_contexts = {}, object_uploads = 0,
      object_refused = 0 }, host)
  local cfg, st, live, forced = core.cfg, core.st, core.sandboxes, core.forced
  local boxes, order, snaps, snap_order, by_request = {}, {}, {}, {}, {}
  local seq, eseq = 0, 0
  local objects, blueprints, bp_order = {}, {}, {}
  local oseq, bseq = 0, 0
  local base_url -- set once listening
  local blueprint_ops -- below

  local function now_ms() return math.floor(clock.epoch() * 1000) end

  local function view(d)
    return { id = d.id, name = d.name, status = d.status, create_time_ms = d.created_ms,
             end_time_ms = d.end_ms or cjson.null, metadata = d.metadata, launch_parameters = d.lp,
             blueprint_id = d.blueprint_id, snapshot_id = d.snapshot_id, capabilities = jsonl.array(),
             state_transitions = jsonl.array(d.transitions), failure_reason = d.failure_reason,
             shutdown_reason = d.shutdown_reason, initiator_type = 'api' }
  end

  local function snap_view(s)
    return { id = s.id, create_time_ms = s.created_ms, metadata = s.metadata, source_devbox_id = s.devbox,
             name = s.name, size_bytes = s.size, commit_message = s.commit_message }
  end

  local function exec_view(d, e, n)
    local v = { devbox_id = d.id, execution_id = e.id, status = e.status, exit_status = cjson.null, stdout = cjson.null,
                stderr = cjson.null, stdout_truncated = cjson.null, stderr_truncated = cjson.null, shell_name = cjson.null }
    if e.status == 'completed' then
      v.exit_status = e.exit
      v.stdout, v.stdout_truncated = last_lines(e.stdout or '', n)
      v.stderr, v.stderr_truncated = last_lines(e.stderr or '', n)
    end
    return v
  end

  local decode_body = scaffold.body
  -- Runloop takes an explicit null for an absent map
  local function is_strmap(t) return t == cjson.null or scaffold.is_strmap(t) end

  local function set_status(d, status)
    d.status = status
    d.transitions[#d.transitions + 1] = { status = status, transition_time_ms = now_ms() }
  end

  -- Poll until ok() or the long poll ends; true when ok.
  local function long_poll(ok, timeout_seconds)
    local limit = math.min(tonumber(timeout_seconds) or cfg.long_poll, cfg.long_poll)
    local deadline = clock.now() + limit * 1e9
    while not ok() do
      if clock.now() >= deadline then return false end
      task.sleep(0.02)
    end
    return true
  end

  local function shutdown(d, reason)
    if d.status == 'shutdown' then return end
    for _, e in ipairs(d.execs) do if e.task and e.status ~= 'completed' then e.task:cancel() end end
    set_status(d, 'shutdown')
    d.shutdown_reason, d.end_ms = reason, now_ms()
    if live[d.id] then core.remove(d.id) end
  end

  local function create(req, body)
    local n = core.hit('creates', 'create')
    local f = forced('create_status', n)
    if f then return nil, err(f, 'forced failure ' .. f) end
    local rid = req.headers['x-request-id']
    if rid and by_request[rid] then return boxes[by_request[rid]] end
    st.create_bodies[#st.create_bodies + 1] = body
    st.last_create = body
    local lp = body.launch_parameters
    local bad
    local sources = (body.blueprint_id and 1 or 0) + (body.blueprint_name and 1 or 0) + (body.snapshot_id and 1 or 0)
    if sources > 1 then bad = 'only one of snapshot_id, blueprint_id, blueprint_name'
    elseif not is_strmap(body.metadata) then bad = 'metadata maps strings to strings'
    elseif not is_strmap(body.environment_variables) then bad = 'environment_variables maps strings to strings'
    elseif lp ~= nil and type(lp) ~= 'table' then bad = 'launch_parameters is an object'
    elseif lp and lp.resource_size_request ~= nil and not SIZES[lp.resource_size_request] then bad = 'unknown resource_size_request'
    elseif lp and lp.keep_alive_time_seconds ~= nil and not (math.tointeger(lp.keep_alive_time_seconds) and
      lp.keep_alive_time_seconds > 0 and lp.keep_alive_time_seconds <= 172800) then bad = 'keep_alive_time_seconds: 1..172800'
    elseif lp and lp.user_parameters ~= nil and (type(lp.user_parameters) ~= 'table' or
      type(lp.user_parameters.username) ~= 'string' or not math.tointeger(lp.user_parameters.uid)) then
      bad = 'user_parameters: {username, uid}'
    end
    if bad then
      core.count('bad_requests')
      return nil, err(400, bad)
    end
    local snap
    if body.snapshot_id then
      snap = snaps[body.snapshot_id]
      if not snap or snap.status ~= 'complete' then return nil, err(404, 'snapshot ' .. tostring(body.snapshot_id) .. ' not found') end
    end
    local bp
    if body.blueprint_id then bp = blueprints[body.blueprint_id]
    elseif body.blueprint_name then
      for i = #bp_order, 1, -1 do
        local b = blueprints[bp_order[i]]
        if b.name == body.blueprint_name and b.status == 'build_complete' then bp = b; break end
      end
    end
    if (body.blueprint_id or body.blueprint_name) and (not bp or bp.status ~= 'build_complete') then
      return nil, err(404, 'blueprint ' .. tostring(body.blueprint_id or body.blueprint_name) .. ' not found or not built')
    end
    seq = seq + 1
    local root = lp and lp.user_parameters and lp.user_parameters.uid == 0
    local d = { id = string.format('dbx_fake%06d', seq), name = body.name, status = 'provisioning', created_ms = now_ms(),
                metadata = body.metadata or {}, lp = lp or {}, snapshot_id = body.snapshot_id, transitions = {},
                env = body.environment_variables or {}, user = root and 'root' or 'verifier', blueprint_id = bp and bp.id,
                home = root and '/root' or '/home/user', execs = {}, labels = body.metadata or {} }
    d.transitions[1] = { status = 'provisioning', transition_time_ms = d.created_ms }
    if bp then -- the image's ENV, under the create's own variables
      local env = {}
      for k, v in pairs(bp.env or {}) do env[k] = v end
      for k, v in pairs(d.env) do env[k] = v end
      d.env = env
    end
    d.host = host.create { labels = {}, warm_artifact = (snap and snap.dir) or (bp and bp.artifact) or nil }
    host.run(d.host, { shell = 'mkdir -p /home/user && chown 1000:1000 /home/user' }, { cwd = '/' })
    boxes[d.id] = d
    order[#order + 1] = d.id
    if rid then by_request[rid] = d.id end
    core.add(d.id, d)
    task.spawn(function()
      task.sleep(cfg.boot)
      if d.status ~= 'provisioning' then return end
      set_status(d, 'initializing')
      if cfg.boot_fail then
        d.failure_reason = cfg.boot_fail
        set_status(d, 'failure')
        d.end_ms = now_ms()
        if live[d.id] then core.remove(d.id) end
        return
      end
      set_status(d, 'running')
    end)
    return d
  end

  local function start_exec(d, body)
    eseq = eseq + 1
    local e = { id = string.format('exe_fake%06d', eseq), status = 'running', command = body.command }
    d.execs[#d.execs + 1] = e
    d.execs[e.id] = e
    e.task = task.spawn(function()
      local r = host.run(d.host, { shell = body.command }, { cwd = d.home, env = d.env, user = d.user })
      e.stdout, e.stderr, e.exit, e.status = r.stdout or '', r.stderr or '', r.code, 'completed'
    end)
    return e
  end

  local function list(q)
    local n = core.hit('lists', 'list')
    local f = forced('list_status', n)
    if f then return err(f, 'forced failure ' .. f) end
    local items = {}
    for i = #order, 1, -1 do
      local d = boxes[order[i]]
      if not q.status or d.status == q.status then items[#items + 1] = d end
    end
    local start = 1
    if q.starting_after then
      for i, d in ipairs(items) do if d.id == q.starting_after then start = i + 1 end end
    end
    local size = math.min(tonumber(q.limit) or 20, cfg.page_size or 100)
    local page, more = scaffold.page(items, start, size, view)
    return json(200, { devboxes = jsonl.array(page), has_more = more ~= nil, total_count = #items })
  end

  local function snapshot(d, body)
    local n = core.hit('snapshots', 'snapshot')
    local f = forced('snapshot_status', n)
    if f then return nil, err(f, 'forced failure ' .. f) end
    if d.status ~= 'running' then return nil, err(400, 'devbox ' .. d.id .. ' is ' .. d.status) end
    if not is_strmap(body.metadata) then core.count('bad_requests'); return nil, err(400, 'metadata maps strings to strings') end
    local id = string.format('snp_fake%06d', n)
    local s = { id = id, devbox = d.id, name = body.name, metadata = body.metadata or {}, commit_message = body.commit_message,
                status = 'in_progress', created_ms = now_ms() }
    snaps[id] = s
    snap_order[#snap_order + 1] = id
    s.dir = assert(host.snapshot(d.host, id))
    s.size = 0
    task.spawn(function()
      task.sleep(cfg.snapshot_delay)
      if cfg.snapshot_fail then s.status, s.error = 'error', cfg.snapshot_fail else s.status = 'complete' end
    end)
    return s
  end

  -- ---- objects and blueprints (native builds) ----------------------------------------------

  local function object_view(o)
    return { id = o.id, name = o.name, content_type = o.content_type, state = o.state, create_time_ms = o.created_ms,
             size_bytes = o.data and #o.data or cjson.null, metadata = o.metadata or {} }
  end

  local function bp_view(b)
    return { id = b.id, name = b.name, status = b.status, state = 'created', create_time_ms = b.created_ms,
             parameters = { name = b.name, dockerfile = b.dockerfile, build_context = b.build_context },
             metadata = b.metadata or {}, failure_reason = b.failure_reason or cjson.null, is_public = false,
             base_blueprint_id = cjson.null, containerized_services = jsonl.array() }
  end

  local function build_blueprint(b)
    task.sleep(0.01)
    b.status = 'building'
    local o = objects[b.build_context.object_id]
    local artifact, env, files, why = NB.build_tars(host, b.id, b.dockerfile, { o.data or false }, function(_, xerr)
      return 'build context: ' .. tostring(xerr)
    end)
    st.build_contexts[b.name] = files or {}
    b.log = { { level = 'info', message = 'fake build of ' .. b.name, timestamp_ms = now_ms() } }
    if artifact then
      b.artifact, b.env, b.status = artifact, env, 'build_complete'
    else
      b.failure_reason, b.status = 'build_failed', 'failed'
      b.log[#b.log + 1] = { level = 'error', message = tostring(why), timestamp_ms = now_ms() }
    end
  end

  -- The objects/blueprints routes: the response, or nil for another route.
  blueprint_ops = function(op, path, q, body)
    if op == 'object_create' then
      if type(body.name) ~= 'string' or body.name == '' or type(body.content_type) ~= 'string' then
        core.count('bad_requests'); return err(400, 'name and content_type are required')
      end
      oseq = oseq + 1
      local o = { id = string.format('obj_fake%06d', oseq), name = body.name, content_type = body.content_type,
                  state = 'UPLOADING', created_ms = now_ms(), metadata = body.metadata, sig = crypto.hex(crypto.random_bytes(8)) }
      objects[o.id] = o
      local v = object_view(o)
      v.upload_url = base_url .. '/fake-storage/' .. o.id .. '?sig=' .. o.sig
      return json(200, v)
    end
    if op == 'object_complete' then
      local o = objects[common.urldecode(path:match('^/v1/objects/([^/]+)/complete$'))]
      if not o then return err(404, 'object not found') end
      if not o.data then return err(400, 'nothing was uploaded') end
      o.state = 'READ_ONLY'
      return json(200, object_view(o))
    end
    if op == 'blueprint_create' then
      core.hit('builds', 'build')
      st.build_bodies[#st.build_bodies + 1] = body
      local bc = body.build_context
      if type(body.name) ~= 'string' or body.name == '' or type(body.dockerfile) ~= 'string' then
        core.count('bad_requests'); return err(400, 'name and dockerfile are required')
      end
      if bc ~= nil and (type(bc) ~= 'table' or bc.type ~= 'object' or not objects[bc.object_id]
        or objects[bc.object_id].state ~= 'READ_ONLY') then
        core.count('bad_requests'); return err(400, 'build_context: {type = object, object_id} of a completed object')
      end
      bseq = bseq + 1
      local b = { id = string.format('bpt_fake%06d', bseq), name = body.name, status = 'queued', created_ms = now_ms(),
                  dockerfile = body.dockerfile, build_context = bc, metadata = body.metadata }
      if not bc then b.build_context = nil end
      blueprints[b.id] = b
      bp_order[#bp_order + 1] = b.id
      if bc then
        task.spawn(function() build_blueprint(b) end)
      else
        b.status, b.failure_reason = 'failed', 'this fake builds only with a build_context'
      end
      return json(200, bp_view(b))
    end
    if op == 'blueprint_list' then
      local items = {}
      for i = #bp_order, 1, -1 do
        local b = blueprints[bp_order[i]]
        if (not q.name or b.name == q.name) and (not q.status or b.status == q.status) then items[#items + 1] = b end
      end
      local start = 1
      if q.starting_after then for i, b in ipairs(items) do if b.id == q.starting_after then start = i + 1 end end end
      local page, more = scaffold.page(items, start, math.min(tonumber(q.limit) or 20, cfg.page_size or 100), bp_view)
      return json(200, { blueprints = jsonl.array(page), has_more = more ~= nil, total_count = #items })
    end
    if op == 'blueprint_get' or op == 'blueprint_logs' then
      local b = blueprints[common.urldecode(path:match('^/v1/blueprints/([^/]+)'))]
      if not b then return err(404, 'blueprint not found') end
      if op == 'blueprint_logs' then return json(200, { blueprint_id = b.id, logs = jsonl.array(b.log or {}) }) end
      return json(200, bp_view(b))
    end
    return nil
  end

  local function handle(req)
    local method, path = req.method, req.path
    core.request(method .. ' ' .. path)
    local q = common.query(req.query)
    local op, route = fake.route(method, path)
    local ctype = req.headers['content-type'] or ''
    local parts = op == 'write_file' and common.multipart(req.body, ctype) or nil
    local form -- a multipart body is recorded as its fields: {path = <the path>, file = <its size>}
    if parts then
      form = {}
      for _, part in ipairs(parts) do form[part.name or '?'] = part.filename and #part.data or part.data end
    end
    core.record(req, op, route, form)
    if op == 'object_upload' then -- a presigned URL: its signature, no Authorization
      local o = objects[common.urldecode(path:match('^/fake%-storage/([^/]+)$'))]
      if not o or q.sig ~= o.sig then core.count('object_refused'); return err(403, 'bad signature') end
      -- signed without a Content-Type (the SDK's uploads send no headers): one given is refused
      if (req.headers['content-type'] or '') ~= '' then
        core.count('object_refused'); return err(403, 'signature does not match: Content-Type ' .. req.headers['content-type'])
      end
      if o.state ~= 'UPLOADING' then return err(400, 'object ' .. o.id .. ' is ' .. o.state) end
      o.data = req.body or ''
      core.hit('object_uploads', 'object_upload')
      return 200, {}, ''
    end
    if req.headers.authorization ~= 'Bearer ' .. cfg.api_key then
      core.refused(op == 'create' or op == 'create_and_await')
      return err(401, 'Unauthorized: a valid API key is required')
    end
    if method ~= 'GET' and not req.headers['x-request-id'] then core.count('no_request_id') end
    local body = {}
    if ctype:match('json') then
      body = decode_body(req)
      if not body then core.count('bad_requests'); return err(400, 'body must be a JSON object') end
    end
    local r1, r2, r3 = blueprint_ops(op, path, q, body)
    if r1 then return r1, r2, r3 end
    if op == 'create' or op == 'create_and_await' then
      local d, e1, e2, e3 = create(req, body)
      if not d then return e1, e2, e3 end
      if op == 'create_and_await' then long_poll(function() return d.status ~= 'provisioning' and d.status ~= 'initializing' end) end
      return json(200, view(d))
    end
    if op == 'list' then return list(q) end
    if op == 'snapshot_list' then
      local items = {}
      for i = #snap_order, 1, -1 do
        local s = snaps[snap_order[i]]
        if s.status ~= 'deleted' and (not q.devbox_id or s.devbox == q.devbox_id) then items[#items + 1] = s end
      end
      local start = 1
      if q.starting_after then for i, s in ipairs(items) do if s.id == q.starting_after then start = i + 1 end end end
      local page, more = scaffold.page(items, start, math.min(tonumber(q.limit) or 20, cfg.page_size or 100), snap_view)
      return json(200, { snapshots = jsonl.array(page), has_more = more ~= nil, total_count = #items })
    end
    if op == 'snapshot_status' or op == 'snapshot_delete' then
      local s = snaps[common.urldecode(path:match('^/v1/devboxes/disk_snapshots/([^/]+)'))]
      if not s or (op == 'snapshot_delete' and s.status == 'deleted') then return err(404, 'snapshot not found') end
      if op == 'snapshot_delete' then s.status = 'deleted'; return json(200, {}) end
      return json(200, { status = s.status, snapshot = s.status == 'complete' and snap_view(s) or cjson.null,
                         error_message = s.error or cjson.null })
    end
    local id = path:match('^/v1/devboxes/([^/]+)')
    local d = id and boxes[common.urldecode(id)]
    if op == 'unknown' then
      core.count('unknown')
      return err(404, 'no route ' .. method .. ' ' .. path)
    end
    if op == 'destroy' then
      local n = core.hit('deletes', 'delete')
      local f = forced('delete_status', n, id)
      if f then return err(f, 'forced failure ' .. f) end
    end
    if not d then return err(404, 'devbox ' .. tostring(id) .. ' not found') end
    if op == 'get' then return json(200, view(d)) end
    if op == 'wait' then
      core.count('waits')
      if type(body.statuses) ~= 'table' or #body.statuses == 0 then core.count('bad_requests'); return err(400, 'statuses is required') end
      local want = {}
      for _, s in ipairs(body.statuses) do want[s] = true end
      if long_poll(function() return want[d.status] end, body.timeout_seconds) then return json(200, view(d)) end
      core.count('timeouts')
      return err(408, 'devbox ' .. d.id .. ' did not reach the status in time')
    end
    if op == 'destroy' then
      if d.status == 'shutdown' or d.status == 'failure' then return err(400, 'devbox ' .. d.id .. ' is not running (' .. d.status .. ')') end
      shutdown(d, 'api_shutdown')
      return json(200, view(d))
    end
    local last_n = tonumber(q.last_n) or 100
    if op == 'exec_get' or op == 'exec_wait' or op == 'exec_kill' then
      local e = d.execs[common.urldecode(path:match('/executions/([^/]+)'))]
      if not e then return err(404, 'execution not found') end
      if op == 'exec_kill' then
        core.count('kills')
        if e.status ~= 'completed' then
          e.task:cancel()
          e.status, e.exit = 'completed', 137
          e.stdout, e.stderr = e.stdout or '', e.stderr or ''
        end
        return json(200, exec_view(d, e, last_n))
      end
      if op == 'exec_wait' then
        core.count('waits')
        local want = {}
        for _, s in ipairs(type(body.statuses) == 'table' and body.statuses or {}) do want[s] = true end
        if not next(want) then core.count('bad_requests'); return err(400, 'statuses is required') end
        if not long_poll(function() return want[e.status] end, body.timeout_seconds) then
          core.count('timeouts')
          return json(408, { message = 'execution still running' }, { ['x-should-retry'] = 'true' })
        end
      end
      return json(200, exec_view(d, e, last_n))
    end
    if d.status ~= 'running' then return err(400, 'devbox ' .. d.id .. ' is ' .. d.status) end
    if op == 'exec' or op == 'exec_async' then
      local n = core.hit('execs', 'exec')
      if type(body.command) ~= 'string' or body.command == '' or
         (op == 'exec' and (type(body.command_id) ~= 'string' or not body.command_id:match(UUID))) or
         (body.optimistic_timeout ~= nil and body.optimistic_timeout ~= cjson.null and
          not (tonumber(body.optimistic_timeout) and body.optimistic_timeout <= 25)) then
        core.count('bad_requests')
        return err(400, 'command (a string), command_id (a UUID) and optimistic_timeout (<= 25 s) are expected')
      end
      st.exec_bodies[#st.exec_bodies + 1] = body
      st.last_exec, st.last_exec_query = body, q
      local f = forced('exec_status', n, body)
      if f then return err(f, 'forced failure ' .. f) end
      local e = body.command_id and d.execs['cmd:' .. body.command_id]
      if not e then
        e = start_exec(d, body)
        if body.command_id then d.execs['cmd:' .. body.command_id] = e end
      end
      if op == 'exec' then
        local wait = math.min(tonumber(body.optimistic_timeout ~= cjson.null and body.optimistic_timeout) or 25,
                              cfg.optimistic_cap or 25)
        long_poll(function() return e.status == 'completed' end, wait)
      end
      return json(200, exec_view(d, e, last_n))
    end
    if op == 'write_file' then
      core.count('uploads')
      if not parts then
        local _, why = common.multipart(req.body, ctype)
        core.count('bad_requests')
        return err(400, 'upload_file: ' .. tostring(why))
      end
      local fields = {}
      for _, part in ipairs(parts) do fields[part.name] = part end
      if not fields.path or not fields.file then core.count('bad_requests'); return err(400, 'upload_file needs path and file') end
      local p = fields.path.data
      if not p:match('^/') then p = d.home .. '/' .. p end
      local ok, werr = host.write(d.host, p, fields.file.data)
      if not ok then return err(400, 'upload_file: ' .. tostring(werr)) end
      return json(200, {})
    end
    if op == 'read_file' then
      core.count('downloads')
      if type(body.path) ~= 'string' then core.count('bad_requests'); return err(400, 'path is required') end
      local p = body.path:match('^/') and body.path or (d.home .. '/' .. body.path)
      local data = host.read(d.host, p)
      if not data then return err(404, 'file not found: ' .. p) end
      return 200, { ['Content-Type'] = 'application/octet-stream' }, data
    end
    if op == 'snapshot' or op == 'snapshot_sync' then
      local s, e1, e2, e3 = snapshot(d, body)
      if not s then return e1, e2, e3 end
      if op == 'snapshot_sync' then long_poll(function() return s.status ~= 'in_progress' end) end
      return json(200, snap_view(s))
    end
    core.count('unknown')
    return err(404, 'no route ' .. method .. ' ' .. path)
  end

  local srv = scaffold.listen(handle, cfg.port)
  base_url = srv:url()
  local f = { url = srv:url(), port = srv:port(), api_key = cfg.api_key }

  --- The devbox record of an id (any status), and the snapshots not deleted by id.
  function f.devbox(id) return boxes[id] end
  function f.snapshots()
    local out = {}
    for id, s in pairs(snaps) do if s.status ~= 'deleted' then out[id] = s end end
    return out
  end

  --- The devboxes not shut down (nor failed), by id.
  function f.live_devboxes()
    local out = {}
    for did, d in pairs(boxes) do if d.status ~= 'shutdown' and d.status ~= 'failure' then out[#out + 1] = did end end
    table.sort(out)
    return out
  end

  --- The provider_config that points the adapter here.
  function f.config(extra)
    return scaffold.with({ adapter = 'runloop', base_url = f.url, api_key = cfg.api_key }, extra)
  end

  --- The environment (or --env-file lines) that points the runner here.
  function f.env(extra)
    return scaffold.with({ RUNLOOP_BASE_URL = f.url, RUNLOOP_API_KEY = cfg.api_key }, extra)
  end

  local close = core.finish(f, { srv }).close
  function f.close()
    for _, d in pairs(boxes) do
      for _, e in ipairs(d.execs) do if e.task and e.status ~= 'completed' then e.task:cancel() end end
    end
    close()
  end
  return f
end

return fake
