--- A stateful loopback fake of the Vercel Sandbox REST API (lua/providers/vercel.lua), on
--- cseng.serve, whose sandboxes really run commands (spec/fakes/sandboxes.lua: bubblewrap).
---
---   local vercel_fake = dofile(sys.root() .. '/spec/fakes/vercel.lua')
---   local f = vercel_fake.start { latency = { create = 0.3 }, delete_status = 500 }
---   -- the adapter: providers.vercel.connect(f.config())  (the runner: f.env() as an --env-file)
---   f.stats()  --> { creates=, created=, execs=, logs=, deletes= (stop calls), destroyed=, lists=,
---                    snapshots=, unauthorized=, bad_requests=, unknown=, live=, ids=, requests=, ... }
---   f.set { delete_status = false } ; f.close()
---
--- Every call must carry Authorization: Bearer <token> and ?teamId=<team_id> (else 401/403).
---   POST /v1/sandboxes {projectId, runtime, resources{vcpus}, timeout, source}  -> {sandbox{...}}
---   POST /v1/sandboxes/{id}/cmd {command, args, cwd, env, sudo, wait}  -> NDJSON: the command
---        record ({command{id, exitCode = null, ...}}) as soon as it starts, then the record with
---        its exitCode when it ends. argv is exec'd as is (no shell), with the env.
---   GET  /v1/sandboxes/{id}/cmd/{cmdId}/logs -> NDJSON {stream, data} lines (700-byte pieces)
---   POST /v1/sandboxes/{id}/stop -> {sandbox{status = "stopped"}} (again on a stopped one; 404 unknown)
---   GET  /v1/sandboxes?projectId=&limit=&until= -> {sandboxes, pagination{count, next, prev}}
---   POST /v1/sandboxes/{id}/snapshot -> {snapshot{id, ...}, sandbox{...}}: the sandbox's
---        /workspace, /root, /opt, /srv, /home are kept and restored into sandboxes created from it;
---        the sandbox is stopped.
--- Switches (all optional, changeable by set):
---   token ('test-vercel-token'), team_id ('team_test'), project_id ('prj_test')
---   latency = seconds | {create=, exec=, logs=, delete=, list=, snapshot=}; values may be fn(n)
---   create_status / exec_status / delete_status / list_status = status | fn(n, ...): force it
---   auth_fail = 'create' | 'all'   401 on create (or on every call)
---   stall = seconds                the cmd stream waits this long before the exit record (a
---                                  command that outlives the client's request timeout)
---   page_size (100)                list page size
local task = require 'cseng.task'
local cjson = require 'cjson'
local jsonl = require 'jsonl'
local sys = require 'cseng.sys'

local common = dofile(sys.root() .. '/spec/fakes/sandboxes.lua')
local scaffold = dofile(sys.root() .. '/spec/fakes/common.lua')
local json = scaffold.json

local fake = {}

local RUNTIMES = { node22 = true, node24 = true, ['python3.13'] = true }

local function err(status, code, message)
  return json(status, { error = { code = code, message = message } })
end

function fake.start(opts)
  local host = common.host()
  local core = scaffold.fake(opts, { token = 'test-vercel-token', team_id = 'team_test', project_id = 'prj_test' },
    { execs = 0, logs = 0, snapshots = 0, create_bodies = {}, exec_bodies = {} }, host)
  local cfg, st, sandboxes, forced = core.cfg, core.st, core.sandboxes, core.forced
  local stopped, snapshots, seq, clock_ms = {}, {}, 0, 1700000000000

  local function view(s)
    return { id = s.id, projectId = cfg.project_id, runtime = s.runtime, vcpus = s.vcpus, memory = s.vcpus * 2048,
             region = 'iad1', status = s.status, timeout = s.timeout, createdAt = s.created_ms,
             sourceSnapshotId = s.snapshot }
  end

  local function cmd_view(c)
    return { id = c.id, name = c.name, args = c.args, cwd = c.cwd, sandboxId = c.sandbox, startedAt = c.started,
             exitCode = c.exit == nil and cjson.null or c.exit }
  end

  local function decode_body(req)
    if req.body == nil or req.body == '' then return {} end
    local ok, b = pcall(cjson.decode, req.body)
    if not ok or type(b) ~= 'table' then return nil end
    return b
  end

  local function create(body)
    local n = core.hit('creates', 'create')
    if cfg.auth_fail == 'create' then return err(401, 'forbidden', 'Not authorized') end
    local s = forced('create_status', n)
    if s then return err(s, 'forced', 'forced failure ' .. s) end
    st.create_bodies[#st.create_bodies + 1] = body
    st.last_create = body
    if body.projectId ~= cfg.project_id or not RUNTIMES[body.runtime] or
       (body.timeout ~= nil and not math.tointeger(body.timeout)) then
      core.count('bad_requests')
      return err(400, 'bad_request', 'projectId, a runtime (node22|node24|python3.13) and an integer timeout are required')
    end
    local snap
    if body.source ~= nil then
      if type(body.source) ~= 'table' or body.source.type ~= 'snapshot' then
        core.count('bad_requests')
        return err(400, 'bad_request', 'this fake knows source{type="snapshot"} only')
      end
      snap = snapshots[body.source.snapshotId]
      if not snap then return err(404, 'not_found', 'snapshot ' .. tostring(body.source.snapshotId) .. ' not found') end
    end
    seq, clock_ms = seq + 1, clock_ms + 1000
    local id = string.format('sbx_fake%06d', seq)
    local sb = { id = id, runtime = body.runtime, vcpus = type(body.resources) == 'table' and body.resources.vcpus or 2,
                 timeout = body.timeout or 300000, status = 'running', created_ms = clock_ms, cmds = {},
                 snapshot = snap and snap.id or nil, labels = {} }
    sb.host = host.create { labels = {} }
    if snap and snap.tar ~= '' then
      assert(host.write(sb.host, '/tmp/.cseng-snap.tar', snap.tar))
      host.run(sb.host, { shell = 'tar -xf /tmp/.cseng-snap.tar -C / && rm -f /tmp/.cseng-snap.tar' }, { cwd = '/' })
    end
    core.add(id, sb)
    return json(200, { sandbox = view(sb) })
  end

  local function run_cmd(req, sb, n)
    local body = decode_body(req)
    if not body or type(body.command) ~= 'string' or body.command == '' or
       (body.args ~= nil and type(body.args) ~= 'table') or (body.env ~= nil and type(body.env) ~= 'table') then
      core.count('bad_requests')
      return err(400, 'bad_request', 'command (a string), args (a list) and env (an object) are expected')
    end
    st.exec_bodies[#st.exec_bodies + 1] = body
    st.last_exec = body
    local s = forced('exec_status', n, body)
    if s then return err(s, 'forced', 'forced failure ' .. s) end
    local c = { id = string.format('cmd_%s_%d', sb.id:sub(-6), #sb.cmds + 1), name = body.command,
                args = body.args or {}, cwd = body.cwd, sandbox = sb.id, started = clock_ms }
    sb.cmds[c.id] = c
    sb.cmds[#sb.cmds + 1] = c
    local argv = { body.command }
    for _, a in ipairs(body.args or {}) do argv[#argv + 1] = a end
    if body.wait ~= true then
      c.exit = nil
      task.spawn(function()
        local r = host.run(sb.host, { argv = argv }, { cwd = body.cwd, env = body.env })
        c.stdout, c.stderr, c.exit = r.stdout or '', r.stderr or '', r.code
      end)
      return json(200, { command = cmd_view(c) })
    end
    req:start(200, { ['Content-Type'] = 'application/x-ndjson' })
    req:write(cjson.encode { command = cmd_view(c) } .. '\n')
    local r = host.run(sb.host, { argv = argv }, { cwd = body.cwd, env = body.env })
    c.stdout, c.stderr, c.exit = r.stdout or '', r.stderr or '', r.code
    if cfg.stall then task.sleep(scaffold.pick(cfg.stall, n)) end
    req:write(cjson.encode { command = cmd_view(c) } .. '\n')
  end

  local function logs(req, c)
    req:start(200, { ['Content-Type'] = 'application/x-ndjson' })
    for _, stream in ipairs({ 'stdout', 'stderr' }) do
      local bytes = c[stream] or ''
      for i = 1, #bytes, 700 do
        req:write(cjson.encode { stream = stream, data = bytes:sub(i, i + 699) } .. '\n')
      end
    end
  end

  local function list(q)
    local n = core.hit('lists', 'list')
    local s = forced('list_status', n)
    if s then return err(s, 'forced', 'forced failure ' .. s) end
    if q.projectId ~= cfg.project_id then
      core.count('bad_requests')
      return err(400, 'bad_request', 'projectId is required')
    end
    local items = {}
    for _, sb in pairs(sandboxes) do
      if not q['until'] or sb.created_ms < tonumber(q['until']) then items[#items + 1] = sb end
    end
    table.sort(items, function(a, b) return a.created_ms > b.created_ms end)
    local size = math.min(tonumber(q.limit) or 100, cfg.page_size or 100)
    local page, more = scaffold.page(items, 1, size, view)
    return json(200, { sandboxes = jsonl.array(page),
      pagination = { count = #page, next = more and page[#page].createdAt or cjson.null, prev = cjson.null } })
  end

  local function snapshot(sb)
    core.hit('snapshots', 'snapshot')
    local r = host.run(sb.host, { shell = 'd=$(ls -d workspace root opt srv home 2>/dev/null); [ -n "$d" ] && tar -cf - $d' },
      { cwd = '/' })
    local id = string.format('snap_fake%06d', st.snapshots)
    snapshots[id] = { id = id, tar = r.code == 0 and r.stdout or '' }
    sb.status = 'stopped'
    stopped[sb.id] = sb
    core.remove(sb.id)
    return json(200, { snapshot = { id = id, sourceSandboxId = sb.id, status = 'created', sizeBytes = #snapshots[id].tar },
                       sandbox = view(sb) })
  end

  local function handle(req)
    local method, path = req.method, req.path
    core.request(method .. ' ' .. path)
    local q = common.query(req.query)
    local is_create = method == 'POST' and path == '/v1/sandboxes'
    if cfg.auth_fail == 'all' or req.headers.authorization ~= 'Bearer ' .. cfg.token then
      core.refused(is_create)
      return err(401, 'forbidden', 'Not authorized')
    end
    if q.teamId ~= cfg.team_id then
      core.refused(is_create)
      return err(403, 'forbidden', 'You do not have access to this team')
    end
    if is_create then
      local body = decode_body(req)
      if not body then
        core.count('bad_requests')
        return err(400, 'bad_request', 'body must be a JSON object')
      end
      return create(body)
    end
    if method == 'GET' and path == '/v1/sandboxes' then return list(q) end

    local id, rest = path:match('^/v1/sandboxes/([^/]+)(.*)$')
    if id then
      id = common.urldecode(id)
      local sb = sandboxes[id]
      if rest == '/cmd' and method == 'POST' then
        local n = core.hit('execs', 'exec')
        if stopped[id] then return err(410, 'sandbox_stopped', 'sandbox ' .. id .. ' is stopped') end
        if not sb then return err(404, 'not_found', 'sandbox ' .. id .. ' not found') end
        return run_cmd(req, sb, n)
      end
      local cmd_id = rest:match('^/cmd/([^/]+)/logs$')
      if cmd_id and method == 'GET' then
        core.hit('logs', 'logs')
        local c = sb and sb.cmds[common.urldecode(cmd_id)]
        if not c then return err(404, 'not_found', 'command ' .. cmd_id .. ' not found') end
        return logs(req, c)
      end
      if rest == '/stop' and method == 'POST' then
        local n = core.hit('deletes', 'delete')
        local s = forced('delete_status', n, id)
        if s then return err(s, 'forced', 'forced failure ' .. s) end
        if stopped[id] then return json(200, { sandbox = view(stopped[id]) }) end
        if not sb then return err(404, 'not_found', 'sandbox ' .. id .. ' not found') end
        sb.status = 'stopped'
        stopped[id] = sb
        core.remove(id)
        return json(200, { sandbox = view(sb) })
      end
      if rest == '/snapshot' and method == 'POST' then
        if not sb then return err(404, 'not_found', 'sandbox ' .. id .. ' not found') end
        return snapshot(sb)
      end
    end
    core.count('unknown')
    return err(404, 'not_found', 'no route ' .. method .. ' ' .. path)
  end

  local srv = scaffold.listen(handle, cfg.port)
  local f = { url = srv:url(), port = srv:port(), token = cfg.token, team_id = cfg.team_id, project_id = cfg.project_id }

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
