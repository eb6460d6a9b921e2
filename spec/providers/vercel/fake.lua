--- A stateful loopback fake of the Vercel Sandbox REST API as @vercel/sandbox 3.5 speaks it
--- (its dist/api-client: paths, bodies, the NDJSON command stream, the zod shapes it validates
--- answers with), on cseng.serve, whose sandboxes really run commands (spec/fakes/sandboxes.lua:
--- bubblewrap). Both the SDK (spec/sdk/vercel.mjs) and the adapter (lua/providers/vercel.lua) run
--- against it; requests are recorded in the shared conformance shape while f.record(client) is on.
---
---   local vercel_fake = require 'spec.providers.vercel.fake'
---   local f = vercel_fake.start { latency = { create = 0.3 }, delete_status = 500 }
---   -- the adapter: providers.vercel.connect(f.config())  (the runner: f.env() as an --env-file)
---   f.stats()  --> { creates=, created=, execs=, deletes= (stop calls), destroyed=, lists=,
---                    snapshots=, writes=, reads=, unauthorized=, bad_requests=, unknown=, live=, ... }
---   f.record('sdk' | 'adapter' | false) ; f.records(client) --> the shared conformance records
---                  (spec/helpers/conformance.lua; op and route from fake.route)
---   f.set { delete_status = false } ; f.close()
---
--- Every call must carry Authorization: Bearer <token> and ?teamId=<team_id> (else 401/403).
---   POST /v2/sandboxes {projectId, runtime (node22|node24|python3.13), ports, timeout, resources,
---        persistent, tags, env, source}  |  POST /v3/sandboxes (the same without runtime: image
---        or a snapshot source)  -> {sandbox, session, routes}
---   GET  /v2/sandboxes?project=&limit=&cursor=&tags=key:value -> {sandboxes, pagination{count, next}}
---   GET  /v2/sandboxes/{name}?projectId= -> {sandbox, session, routes} ; DELETE -> {sandbox}
---   GET  /v2/sandboxes/sessions/{sid} -> {session, routes}
---   POST /v2/sandboxes/sessions/{sid}/cmd {command, args, cwd, env, sudo, wait, logs, timeout}
---        wait:true -> application/x-ndjson: {command} when it starts, {stream, data} lines (logs),
---        {command{exitCode}} when it ends; else {command} and it runs in the background.
---        argv is exec'd as is (no shell), as root with sudo, else as uid 1000; timeout (ms)
---        kills it (exit 137).
---   GET  .../cmd/{cmdId}[?wait=true] -> {command} ; GET .../cmd/{cmdId}/logs -> NDJSON {stream, data}
---   POST .../fs/write (gzipped tar, x-cwd) -> {} ; POST .../fs/read {path, cwd} -> the bytes | 404
---   POST .../fs/mkdir {path, cwd} -> {}
---   POST .../stop -> {session{status="stopped", activeCpuDurationMs}, sandbox} (again on a stopped one)
---   POST .../snapshot -> {snapshot{id, status="created"}, session}: the session's whole root is
---        copied (host.snapshot) and restored into sandboxes created from it; the session stops.
---   GET / DELETE /v2/sandboxes/snapshots/{id} -> {snapshot}
--- Switches (all optional, changeable by set):
---   token ('test-vercel-token'), team_id ('team_test'), project_id ('prj_test')
---   latency = seconds | {create=, exec=, delete=, list=, snapshot=}; values may be fn(n)
---   create_status / exec_status / delete_status / list_status / snapshot_status = status | fn(n, ...)
---   auth_fail = 'create' | 'all'   401 on create (or on every call)
---   stall = seconds                the cmd stream waits this long before the exit record
---   stream_error = {code, message} the cmd stream ends with an error line instead of the exit record
---   page_size (100)                list page size
local task = require('cseng.task')
local clock = require('cseng.clock')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')

local common = require('spec.fakes.sandboxes')
local scaffold = require('spec.fakes.rest')
local json = scaffold.json

local fake = {}

local RUNTIMES = { node22 = true, node24 = true, ['python3.13'] = true }
local DEAD = { stopped = true, failed = true, aborted = true }

local function err(status, code, message)
  return json(status, { error = { code = code, message = message } })
end

-- The operation a request is, and its route template (the shared record shape).
local ROUTES = {
  { 'POST', '/v2/sandboxes', 'create' },
  { 'POST', '/v3/sandboxes', 'create' },
  { 'GET', '/v2/sandboxes', 'list' },
  { 'GET', '/v2/sandboxes/snapshots/{id}', 'snapshot_get' },
  { 'DELETE', '/v2/sandboxes/snapshots/{id}', 'snapshot_delete' },
  { 'GET', '/v2/sandboxes/sessions/{sessionId}', 'session_get' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/cmd', 'exec' },
  { 'GET', '/v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}', 'command_get' },
  { 'GET', '/v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/logs', 'logs' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/fs/write', 'write_file' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/fs/read', 'read_file' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/fs/mkdir', 'mkdir' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/stop', 'destroy' },
  { 'POST', '/v2/sandboxes/sessions/{sessionId}/snapshot', 'snapshot' },
  { 'GET', '/v2/sandboxes/{name}', 'sandbox_get' },
  { 'DELETE', '/v2/sandboxes/{name}', 'sandbox_delete' },
}

fake.route = scaffold.router(ROUTES)

function fake.start(opts)
  local host = common.host()
  local core = scaffold.fake(opts, { token = 'test-vercel-token', team_id = 'team_test', project_id = 'prj_test' },
    { execs = 0, logs = 0, snapshots = 0, writes = 0, reads = 0, create_bodies = {}, exec_bodies = {} }, host)
  local cfg, st, sessions, forced = core.cfg, core.st, core.sandboxes, core.forced
  local stopped, boxes, box_order, snapshots, seq = {}, {}, {}, {}, 0
  local clock_ms = math.floor(clock.epoch() * 1000)

  local function now_ms()
    clock_ms = math.max(clock_ms + 1, math.floor(clock.epoch() * 1000))
    return clock_ms
  end

  local function session_view(s)
    return { id = s.id, memory = s.vcpus * 2048, vcpus = s.vcpus, region = 'iad1', runtime = s.runtime,
             timeout = s.timeout, status = s.status, requestedAt = s.created_ms, startedAt = s.created_ms,
             createdAt = s.created_ms, updatedAt = s.updated_ms, cwd = '/vercel/sandbox',
             sourceSnapshotId = s.snapshot, activeCpuDurationMs = s.status == 'stopped' and s.cpu_ms or nil,
             stoppedAt = s.stopped_ms, duration = s.stopped_ms and (s.stopped_ms - s.created_ms) or nil }
  end

  local function box_view(b)
    local s = b.session
    return { name = b.name, persistent = b.persistent, region = 'iad1', vcpus = s.vcpus, memory = s.vcpus * 2048,
             runtime = s.runtime, image = b.image, timeout = s.timeout, createdAt = b.created_ms,
             updatedAt = s.updated_ms, currentSessionId = s.id, status = s.status, cwd = '/vercel/sandbox',
             tags = b.tags, totalActiveCpuDurationMs = s.cpu_ms,
             totalDurationMs = (s.stopped_ms or now_ms()) - s.created_ms }
  end

  local function snap_view(sn)
    return { id = sn.id, sourceSessionId = sn.session, region = 'iad1', status = sn.status, sizeBytes = sn.size,
             createdAt = sn.created_ms, updatedAt = sn.created_ms }
  end

  local function cmd_view(c)
    return { id = c.id, name = c.name, args = jsonl.array(c.args), cwd = c.cwd, sessionId = c.session,
             startedAt = c.started, exitCode = c.exit == nil and cjson.null or c.exit, durationMs = c.duration }
  end

  local decode_body, is_strmap = scaffold.body, scaffold.is_strmap

  local function stop_session(s)
    if s.status == 'stopped' then return end
    s.status, s.stopped_ms = 'stopped', now_ms()
    s.updated_ms = s.stopped_ms
    stopped[s.id] = s
    core.remove(s.id)
  end

  local function create(body, version)
    local n = core.hit('creates', 'create')
    if cfg.auth_fail == 'create' then return err(401, 'forbidden', 'Not authorized') end
    local s = forced('create_status', n)
    if s then return err(s, 'forced', 'forced failure ' .. s) end
    st.create_bodies[#st.create_bodies + 1] = body
    st.last_create, st.last_create_version = body, version
    local bad
    if body.projectId ~= cfg.project_id then bad = 'projectId must be the project of the token'
    elseif version == 'v2' and not RUNTIMES[body.runtime] then bad = 'v2: a runtime (node22|node24|python3.13) is required'
    elseif version == 'v3' and body.runtime ~= nil then bad = 'v3 takes no runtime (an image, or a source)'
    elseif body.runtime ~= nil and body.image ~= nil then bad = 'runtime and image cannot be used together'
    elseif body.timeout ~= nil and not math.tointeger(body.timeout) then bad = 'timeout must be an integer (ms)'
    elseif body.ports ~= nil and type(body.ports) ~= 'table' then bad = 'ports must be a list'
    elseif body.persistent ~= nil and type(body.persistent) ~= 'boolean' then bad = 'persistent must be a boolean'
    elseif not is_strmap(body.tags) then bad = 'tags must map strings to strings'
    elseif not is_strmap(body.env) then bad = 'env must map strings to strings'
    elseif body.resources ~= nil and (type(body.resources) ~= 'table' or not math.tointeger(body.resources.vcpus)) then
      bad = 'resources.vcpus must be an integer'
    end
    if bad then
      core.count('bad_requests')
      return err(400, 'bad_request', bad)
    end
    local snap
    if body.source ~= nil then
      if type(body.source) ~= 'table' or body.source.type ~= 'snapshot' or body.runtime ~= nil or body.image ~= nil then
        core.count('bad_requests')
        return err(400, 'bad_request', 'this fake knows source{type="snapshot", snapshotId} (with no runtime or image) only')
      end
      snap = snapshots[body.source.snapshotId]
      if not snap or snap.status ~= 'created' then
        return err(404, 'snapshot_not_found', 'snapshot ' .. tostring(body.source.snapshotId) .. ' not found')
      end
    end
    seq = seq + 1
    local name = type(body.name) == 'string' and body.name or string.format('sbx_fake%06d', seq)
    if boxes[name] and not DEAD[boxes[name].session.status] then
      return err(409, 'conflict', 'sandbox ' .. name .. ' exists')
    end
    local t = now_ms()
    local sess = { id = string.format('sess_fake%06d', seq), runtime = snap and snap.runtime or body.runtime or 'image',
                   vcpus = type(body.resources) == 'table' and body.resources.vcpus or 2,
                   timeout = body.timeout or 300000, status = 'running', created_ms = t, updated_ms = t, cmds = {},
                   snapshot = snap and snap.id or nil, labels = body.tags or {}, env = body.env or {}, cpu_ms = 0 }
    sess.host = host.create { labels = {}, warm_artifact = snap and snap.dir or nil }
    host.run(sess.host, { shell = 'mkdir -p /vercel/sandbox && chown 1000:1000 /vercel/sandbox' }, { cwd = '/' })
    local b = { name = name, persistent = body.persistent ~= false, image = body.image, tags = body.tags or {},
                created_ms = t, session = sess }
    sess.box = b
    if not boxes[name] then box_order[#box_order + 1] = name end
    boxes[name] = b
    core.add(sess.id, sess)
    return json(200, { sandbox = box_view(b), session = session_view(sess), routes = jsonl.array() })
  end

  local function run_argv(s, c, body)
    local argv = { body.command }
    for _, a in ipairs(body.args or {}) do argv[#argv + 1] = a end
    local env = {}
    for k, v in pairs(s.env) do env[k] = v end
    for k, v in pairs(body.env or {}) do env[k] = v end
    local t0 = clock.now()
    local r = host.run(s.host, { argv = argv }, { cwd = c.cwd, env = env, user = body.sudo and 'root' or 'verifier',
                                                   timeout = body.timeout and body.timeout / 1000 or nil })
    c.duration = math.floor((clock.now() - t0) / 1e6)
    s.cpu_ms = s.cpu_ms + c.duration
    c.stdout, c.stderr, c.exit = r.stdout or '', r.stderr or '', r.timed_out and 137 or r.code
  end

  local function log_lines(req, c)
    for _, stream in ipairs({ 'stdout', 'stderr' }) do
      local bytes = c[stream] or ''
      for i = 1, #bytes, 700 do
        req:write(cjson.encode { stream = stream, data = bytes:sub(i, i + 699) } .. '\n')
      end
    end
  end

  local function run_cmd(req, s, n)
    local body = decode_body(req)
    if not body or type(body.command) ~= 'string' or body.command == '' or
       (body.args ~= nil and type(body.args) ~= 'table') or not is_strmap(body.env) or
       (body.timeout ~= nil and not math.tointeger(body.timeout)) or
       (body.sudo ~= nil and type(body.sudo) ~= 'boolean') then
      core.count('bad_requests')
      return err(400, 'bad_request', 'command (a string), args (a list), env (strings), sudo (a boolean), timeout (ms)')
    end
    st.exec_bodies[#st.exec_bodies + 1] = body
    st.last_exec = body
    local f = forced('exec_status', n, body)
    if f then return err(f, 'forced', 'forced failure ' .. f) end
    local c = { id = string.format('cmd_%s_%d', s.id:sub(-6), #s.cmds + 1), name = body.command,
                args = body.args or {}, cwd = body.cwd or '/vercel/sandbox', session = s.id, started = now_ms() }
    s.cmds[c.id] = c
    s.cmds[#s.cmds + 1] = c
    if body.wait ~= true then
      c.running = task.spawn(function() run_argv(s, c, body) end)
      return json(200, { command = cmd_view(c) })
    end
    req:start(200, { ['Content-Type'] = 'application/x-ndjson' })
    req:write(cjson.encode { command = cmd_view(c) } .. '\n')
    run_argv(s, c, body)
    if body.logs then log_lines(req, c) end
    if cfg.stream_error then -- the SDK's LogError line: {stream = "error", data = {code, message}}
      req:write(cjson.encode { stream = 'error', data = cfg.stream_error } .. '\n')
      return
    end
    if cfg.stall then task.sleep(scaffold.pick(cfg.stall, n)) end
    req:write(cjson.encode { command = cmd_view(c) } .. '\n')
  end

  local function list(q, qlist)
    local n = core.hit('lists', 'list')
    local s = forced('list_status', n)
    if s then return err(s, 'forced', 'forced failure ' .. s) end
    if q.project ~= cfg.project_id then
      core.count('bad_requests')
      return err(400, 'bad_request', 'project is required')
    end
    if qlist.tags and #qlist.tags > 1 then
      core.count('bad_requests')
      return err(400, 'bad_request', 'filtering by one tag only')
    end
    local tk, tv
    if q.tags then
      tk, tv = q.tags:match('^([^:]+):(.*)$')
      if not tk then core.count('bad_requests'); return err(400, 'bad_request', 'tags is key:value') end
    end
    st.last_list_filter = tk and { [tk] = tv } or nil
    local items = {}
    for _, name in ipairs(box_order) do
      local b = boxes[name]
      if b and (not tk or b.tags[tk] == tv) then items[#items + 1] = b end
    end
    table.sort(items, function(a, b) return a.created_ms > b.created_ms end)
    local size = math.min(tonumber(q.limit) or 100, cfg.page_size or 100)
    local start = tonumber(q.cursor) or 1
    local page, more = scaffold.page(items, start, size, box_view)
    return json(200, { sandboxes = jsonl.array(page),
      pagination = { count = #page, next = more and tostring(more) or cjson.null } })
  end

  local function snapshot(s, n)
    core.hit('snapshots', 'snapshot')
    local f = forced('snapshot_status', n)
    if f then return err(f, 'forced', 'forced failure ' .. f) end
    local id = string.format('snap_fake%06d', st.snapshots)
    local dir = assert(host.snapshot(s.host, id))
    local du = host.run(s.host, { shell = 'du -sb --exclude=proc / 2>/dev/null | cut -f1' }, { cwd = '/' })
    snapshots[id] = { id = id, dir = dir, session = s.id, status = 'created', runtime = s.runtime,
                      size = tonumber((du.stdout or ''):match('%d+')) or 0, created_ms = now_ms() }
    stop_session(s)
    return json(200, { snapshot = snap_view(snapshots[id]), session = session_view(s) })
  end

  local function session_of(sid)
    return sessions[sid] or stopped[sid]
  end

  local function handle(req)
    local method, path = req.method, req.path
    core.request(method .. ' ' .. path)
    local q, qlist = common.query(req.query)
    local op, route = fake.route(method, path)
    core.record(req, op, route)
    if cfg.auth_fail == 'all' or req.headers.authorization ~= 'Bearer ' .. cfg.token then
      core.refused(op == 'create')
      return err(401, 'forbidden', 'Not authorized')
    end
    if q.teamId ~= cfg.team_id then
      core.refused(op == 'create')
      return err(403, 'forbidden', 'You do not have access to this team')
    end
    if op == 'create' then
      local body = decode_body(req)
      if not body then
        core.count('bad_requests')
        return err(400, 'bad_request', 'body must be a JSON object')
      end
      return create(body, path:match('^/(v%d)/'))
    end
    if op == 'list' then return list(q, qlist) end
    if op == 'snapshot_get' or op == 'snapshot_delete' then
      local sn = snapshots[common.urldecode(path:match('([^/]+)$'))]
      if not sn or sn.status == 'deleted' then return err(404, 'not_found', 'snapshot not found') end
      if op == 'snapshot_delete' then sn.status = 'deleted' end
      return json(200, { snapshot = snap_view(sn) })
    end
    if op == 'sandbox_get' or op == 'sandbox_delete' then
      local b = boxes[common.urldecode(path:match('([^/]+)$'))]
      if q.projectId ~= cfg.project_id then core.count('bad_requests'); return err(400, 'bad_request', 'projectId is required') end
      if not b then return err(404, 'not_found', 'sandbox not found') end
      if op == 'sandbox_delete' then
        stop_session(b.session)
        boxes[b.name] = nil
        return json(200, { sandbox = box_view(b) })
      end
      return json(200, { sandbox = box_view(b), session = session_view(b.session), routes = jsonl.array() })
    end

    local sid, rest = path:match('^/v2/sandboxes/sessions/([^/]+)(.*)$')
    if not sid or op == 'unknown' then
      core.count('unknown')
      return err(404, 'not_found', 'no route ' .. method .. ' ' .. path)
    end
    sid = common.urldecode(sid)
    local live = sessions[sid]
    if op == 'session_get' then
      local s = session_of(sid)
      if not s then return err(404, 'not_found', 'session not found') end
      return json(200, { session = session_view(s), routes = jsonl.array() })
    end
    if op == 'destroy' then
      local n = core.hit('deletes', 'delete')
      local f = forced('delete_status', n, sid)
      if f then return err(f, 'forced', 'forced failure ' .. f) end
      local s = session_of(sid)
      if not s then return err(404, 'not_found', 'session ' .. sid .. ' not found') end
      stop_session(s)
      return json(200, { session = session_view(s), sandbox = box_view(s.box) })
    end
    local n = op == 'exec' and core.hit('execs', 'exec') or 0
    if stopped[sid] then return err(410, 'sandbox_stopped', 'session ' .. sid .. ' is stopped') end
    if not live then return err(404, 'not_found', 'session ' .. sid .. ' not found') end
    if op == 'exec' then return run_cmd(req, live, n) end
    if op == 'snapshot' then return snapshot(live, st.snapshots + 1) end
    local cmd_id = rest:match('^/cmd/([^/]+)')
    if op == 'command_get' or op == 'logs' then
      local c = live.cmds[common.urldecode(cmd_id)]
      if not c then return err(404, 'not_found', 'command ' .. cmd_id .. ' not found') end
      if op == 'logs' then core.count('logs') end
      if (op == 'logs' or q.wait == 'true') and c.running then c.running:join() end
      if op == 'command_get' then return json(200, { command = cmd_view(c) }) end
      req:start(200, { ['Content-Type'] = 'application/x-ndjson' })
      log_lines(req, c)
      return
    end
    if op == 'write_file' then
      core.count('writes')
      local dir = req.headers['x-cwd'] or '/'
      if (req.headers['content-type'] or '') ~= 'application/gzip' or not dir:match('^/') then
        core.count('bad_requests')
        return err(400, 'bad_request', 'a gzipped tar (Content-Type: application/gzip) and an absolute x-cwd')
      end
      local tmp = '/tmp/.cseng-fs-write-' .. st.writes .. '.tgz'
      assert(host.write(live.host, tmp, req.body))
      local r = host.run(live.host, { argv = { 'bash', '-c', 'mkdir -p "$1" && tar -xzf "$2" -C "$1"; rc=$?; rm -f "$2"; exit $rc',
                                               'x', dir, tmp } }, { cwd = '/' })
      if r.code ~= 0 then return err(400, 'bad_request', 'extracting: ' .. (r.stderr or '')) end
      return json(200, {})
    end
    local body = decode_body(req)
    if not body or type(body.path) ~= 'string' then
      core.count('bad_requests')
      return err(400, 'bad_request', 'path is required')
    end
    local p = body.path:match('^/') and body.path or ((body.cwd or '/vercel/sandbox') .. '/' .. body.path)
    if op == 'read_file' then
      core.count('reads')
      local data = host.read(live.host, p)
      if not data then return err(404, 'file_not_found', 'no such file: ' .. p) end
      return 200, { ['Content-Type'] = 'application/octet-stream' }, data
    end
    -- mkdir
    local r = host.run(live.host, { argv = { 'mkdir', '-p', '--', p } }, { cwd = '/' })
    if r.code ~= 0 then return err(400, 'bad_request', r.stderr) end
    return json(200, {})
  end

  local srv = scaffold.listen(handle, cfg.port)
  local f = { url = srv:url(), port = srv:port(), token = cfg.token, team_id = cfg.team_id, project_id = cfg.project_id }

  --- Snapshots not deleted, by id.
  function f.snapshots()
    local out = {}
    for id, sn in pairs(snapshots) do if sn.status ~= 'deleted' then out[id] = sn end end
    return out
  end

  --- The provider_config that points the adapter here.
  function f.config(extra)
    return scaffold.with({ adapter = 'vercel', api_url = f.url, token = cfg.token, team_id = cfg.team_id,
                           project_id = cfg.project_id }, extra)
  end

  --- The environment (or --env-file lines) that points the runner here.
  function f.env(extra)
    return scaffold.with({ VERCEL_API_URL = f.url, VERCEL_TOKEN = cfg.token, VERCEL_TEAM_ID = cfg.team_id,
                           VERCEL_PROJECT_ID = cfg.project_id }, extra)
  end

  return core.finish(f, { srv })
end

return fake
