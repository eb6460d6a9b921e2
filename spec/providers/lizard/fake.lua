--- A stateful loopback fake of the Lizard sandbox API (lua/providers/lizard.lua), on cseng.serve.
---
---   local lizard_fake = require 'spec.providers.lizard.fake'
---   local f = lizard_fake.start { latency = { create = 0.05 }, delete_status = 500 }
---   -- point the adapter at it: { api_url = f.url, api_key = f.api_key, project_id = f.project_id }
---   f.stats()  --> { creates=, created=, execs=, deletes=, destroyed=, lists=, live=, max_live=, ... }
---   f.set { delete_status = false }   -- change a switch while a run is going
---   f.close()
---
--- It keeps sandboxes in memory and counts every request, so specs assert exact numbers (luv's
--- tap.lua style: a missing or an extra call fails). Switches (all optional, changeable by set):
---   api_key ('test-key'), project_id ('proj-test')   requests must carry them (else 401 / 400)
---   latency = seconds | {create=, exec=, delete=, list=}; a value may be fn(n) -> seconds
---   create_status / exec_status / delete_status = HTTP status | fn(n, ...) -> status|nil|false:
---       force a failure of the n-th call of that endpoint (401, 403, 429, 500, 503, ...)
---   fail_cleanup = true          every DELETE answers 500 (same as delete_status = 500)
---   auth_fail = 'create'|'all'   401 on create (or on every endpoint)
---   missing_marker = true        exec answers exit 127, "python3: command not found"
---   exec = fn(cmd, sandbox, n) -> exitCode, stdout, stderr   replaces the built-in shell emulation
---   allocation = {cpus=, memoryMb=, region=}   what create reports
---   echo_key = true             forced failures and 401s echo the API key in their body (after 290
---                                bytes, so a 300-byte cut falls inside it): a leaky server
---   list_status = HTTP status | fn(n) -> status   force a failure of the n-th list
---   lose_create = fn(n) -> 'reset'|'malformed'|'noid'|'hang'|nil   the n-th create makes the
---       sandbox, then loses its answer: the connection is reset, the body is not JSON, the body
---       has no sandboxId, or no answer comes until the client gives up (st.lost counts them)
---   twin_create = fn(n) -> bool   the n-th create makes a second sandbox with the same labels (as a
---       POST curl re-sent on a fresh connection does; st.twins counts them)
---   environment = string         what the environment probe prints (see ENV_DEFAULT)
---   shared = {}                  a table several fakes share: in_flight and max_in_flight count
---                                the requests being handled across all of them (parallelism)
--- Bodies are checked against the request shapes of ../shared/docs/PROVIDERS.md (Lizard has no
--- official SDK to referee it; spec/providers/lizard/conformance_spec.lua keeps fake.CREATE_KEYS and
--- fake.EXEC_KEYS equal to that document): a key outside them is a 400, as a strict server would.
--- The built-in exec emulation answers `print('X')` / `print("X")` with X, `echo X` with X, and
--- the startup arena's environment probe (a command containing "python3 --version") with
--- `environment`; anything else exits 0 with empty output. With real = true (what `cseng fake
--- lizard` starts) commands really run instead, each sandbox a local bubblewrap sandbox
--- (spec/fakes/sandboxes.lua), so task runs work end to end.
local cjson = require('cjson')
local task = require('cseng.task')

local scaffold = require('spec.fakes.rest')

local fake = {}

--- The body keys of create and exec (PROVIDERS.md's Lizard section).
fake.CREATE_KEYS = { 'projectId', 'template', 'size', 'region', 'timeoutMs', 'metadata', 'envs', 'volumeId' }
fake.EXEC_KEYS = { 'cmd', 'envs', 'user', 'workdir', 'timeoutMs' }

-- The first key of body not in keys, or nil.
local function unknown_key(body, keys)
  local known = {}
  for _, k in ipairs(keys) do known[k] = true end
  for k in pairs(body) do if not known[k] then return tostring(k) end end
  return nil
end

-- What the arena's probe prints on a 2-vCPU / 2 GiB cgroup-v2 sandbox.
fake.ENV_DEFAULT = table.concat({
  'python=Python 3.12.7', 'cgroup2.cpu.max=200000 100000', 'cgroup2.memory.max=2147483648',
  'nproc=2', 'kernel=6.1.0-fake', 'os=Debian GNU/Linux 12 (bookworm)', '' }, '\n')

--- What the arena's fidelity audit (lua/cseng/run/audit.lua) reads in a sandbox of the built-in
--- emulation: the sandbox's own audit marker (a file it keeps: empty until an audit writes one,
--- then what the last audit wrote), a boot id of its own, and the 2-vCPU / 2 GiB cgroup of
--- ENV_DEFAULT (allocation = {cpus=, memoryMb=} changes both).
function fake.audit_answer(cfg, sb, cmd)
  local a = cfg.allocation or {}
  local cpus, mem = tonumber(a.cpus) or 2, tonumber(a.memoryMb) or 2048
  local prev = sb.audit_marker or ''
  sb.audit_marker = cmd:match("%(echo '([^']*)' > \"%$m\"%)") or cmd:match('%(echo ([^%s>]+) > "%$m"%)') or prev
  return table.concat({
    'marker=' .. prev, 'marker_written=1', 'boot_id=fake-boot-' .. sb.id, 'mnt_ns=mnt:[4026530001]',
    'pid_ns=pid:[4026530002]', 'cgroup=0::/lizard/' .. sb.id .. ';', 'nproc=' .. math.ceil(cpus),
    string.format('cgroup2.cpu.max=%d 100000', math.floor(cpus * 100000)),
    'cgroup2.memory.max=' .. math.floor(mem * 1048576), 'mem_total_kb=16777216', 'uptime=3.5',
    'kernel=6.1.0-fake', 'pid1=sleep', 'cseng-audit-end', '' }, '\n')
end

local function json(status, value)
  return status, { ['Content-Type'] = 'application/json' }, cjson.encode(value)
end

-- A failure's body; a leaky server (echo_key) quotes the key the request carried.
local function failure(cfg, status, text)
  if cfg.echo_key then text = text .. ' ' .. string.rep('x', 290) .. ' key=' .. tostring(cfg.api_key) .. ' (echoed)' end
  return json(status, { error = text })
end

---@class lizard_fake
---@field url string
---@field port integer
---@field api_key string
---@field project_id string
---@field stats fun(): table
---@field set fun(opts: table)
---@field close fun()

--- Start the fake on 127.0.0.1 (an ephemeral port unless opts.port).
---@param opts? table switches, see the file header
---@return lizard_fake
function fake.start(opts)
  local host = opts and opts.real and require('spec.fakes.sandboxes').host() or nil
  local core = scaffold.fake(opts, { api_key = 'test-key', project_id = 'proj-test' }, { execs = 0 }, host)
  local cfg, st, sandboxes, forced = core.cfg, core.st, core.sandboxes, core.forced
  local seq = 0

  local function run_exec(cmd, sb, n, body)
    if cfg.exec then return cfg.exec(cmd, sb, n) end
    if sb.host then
      local r = host.run(sb.host, { shell = cmd }, { cwd = body.workdir, env = body.envs,
        timeout = math.tointeger(body.timeoutMs) and body.timeoutMs / 1000 or 600 })
      return r.code, r.stdout, r.stderr
    end
    if cfg.missing_marker then return 127, '', 'bash: line 1: python3: command not found\n' end
    if cmd:find('python3 --version', 1, true) then return 0, cfg.environment or fake.ENV_DEFAULT, '' end
    if cmd:find('cseng-audit-end', 1, true) then return 0, fake.audit_answer(cfg, sb, cmd), '' end
    local printed = cmd:match("print%('([^']*)'%)") or cmd:match('print%("([^"]*)"%)')
      or cmd:match("print%(\\'([^']*)\\'%)")
    if printed then return 0, printed .. '\n', '' end
    local echoed = cmd:match('^%s*echo%s+(.-)%s*$')
    if echoed then return 0, (echoed:gsub("^'(.*)'$", '%1'):gsub('^"(.*)"$', '%1')) .. '\n', '' end
    return 0, '', ''
  end

  local handle

  local function handler(req)
    local shared = cfg.shared
    if not shared then return handle(req) end
    shared.in_flight = (shared.in_flight or 0) + 1
    shared.max_in_flight = math.max(shared.max_in_flight or 0, shared.in_flight)
    local ok, a, b, c = pcall(handle, req)
    shared.in_flight = shared.in_flight - 1
    if not ok then error(a, 0) end
    return a, b, c
  end

  local function create(req, _, n, body)
    if cfg.auth_fail == 'create' then return json(401, { error = 'invalid API key' }) end
    local s = forced('create_status', n)
    if s then return failure(cfg, s, 'forced failure ' .. s) end
    if body.projectId ~= cfg.project_id or type(body.template) ~= 'string' then
      core.count('bad_requests')
      return json(400, { error = 'projectId and template are required' })
    end
    local bad = unknown_key(body, fake.CREATE_KEYS)
    if bad then
      core.count('bad_requests')
      return json(400, { error = 'unknown field ' .. bad })
    end
    seq = seq + 1
    local id = string.format('lz-%06d', seq)
    local alloc = cfg.allocation or { cpus = 2, memoryMb = 2048 }
    core.add(id, { id = id, template = body.template, size = body.size, region = body.region, execs = 0,
                   metadata = type(body.metadata) == 'table' and body.metadata or {},
                   host = host and host.create { env = type(body.envs) == 'table' and body.envs or {}, workdir = '/' } or nil })
    st.last_create = body
    if scaffold.pick(cfg.twin_create, n) then -- curl's re-sent POST: a second sandbox, same labels
      seq = seq + 1
      local twin = string.format('lz-%06d', seq)
      core.add(twin, { id = twin, template = body.template, size = body.size, region = body.region, execs = 0,
                       metadata = type(body.metadata) == 'table' and body.metadata or {} })
      st.twins = (st.twins or 0) + 1
    end
    local lose = scaffold.pick(cfg.lose_create, n)
    if lose then
      st.lost = (st.lost or 0) + 1
      if lose == 'reset' then req:abort(); return nil end
      if lose == 'malformed' then return 201, { ['Content-Type'] = 'application/json' }, '{"sandboxId": "' .. id end
      if lose == 'noid' then return json(201, { status = 'running' }) end
      -- 'hang': answer long after any client timeout (the client resets first)
      task.sleep(cfg.hang_seconds or 600)
      return json(201, { sandboxId = id })
    end
    return json(201, {
      sandboxId = id, cpus = alloc.cpus, memoryMb = alloc.memoryMb, region = alloc.region or body.region,
      template = body.template, size = body.size, status = 'running',
    })
  end

  local function list(_, _, n)
    local s = forced('list_status', n)
    if s then return failure(cfg, s, 'forced failure ' .. s) end
    local items = {}
    for _, sb in ipairs(core.matching()) do
      items[#items + 1] = { sandboxId = sb.id, template = sb.template, region = sb.region, metadata = sb.metadata }
    end
    return json(200, { sandboxes = items })
  end

  local function exec(_, p, n, body)
    local id = p.id
    local sb = sandboxes[id]
    if not sb then return json(404, { error = 'sandbox not found' }) end
    local s = forced('exec_status', n, body.cmd)
    if s then return failure(cfg, s, 'forced failure ' .. s) end
    if type(body.cmd) ~= 'string' then
      core.count('bad_requests')
      return json(400, { error = 'cmd is required' })
    end
    local bad = unknown_key(body, fake.EXEC_KEYS)
    if bad then
      core.count('bad_requests')
      return json(400, { error = 'unknown field ' .. bad })
    end
    sb.execs = sb.execs + 1
    st.last_exec = body
    local code, out, err = run_exec(body.cmd, sb, n, body)
    return json(200, { exitCode = code, stdout = out or '', stderr = err or '' })
  end

  local function destroy(_, p, n)
    local id = p.id
    local s = forced('delete_status', n, id) or (cfg.fail_cleanup and 500)
    if s then return failure(cfg, s, 'forced failure ' .. s) end
    if not sandboxes[id] then return json(404, { error = 'sandbox not found' }) end
    core.remove(id)
    return 204, {}, ''
  end

  local route = core.routes({
    { 'POST', '/api/sandboxes', create, op = 'create', hit = { 'creates', 'create' } },
    { 'GET', '/api/sandboxes', list, op = 'list', hit = { 'lists', 'list' } },
    { 'POST', '/api/sandboxes/{id}/exec', exec, op = 'exec', hit = { 'execs', 'exec' } },
    { 'DELETE', '/api/sandboxes/{id}', destroy, op = 'destroy', hit = { 'deletes', 'delete' } },
  }, function(req) return json(404, { error = 'no route ' .. req.method .. ' ' .. req.path }) end)

  function handle(req)
    local method, path = req.method, req.path
    core.request(method .. ' ' .. path)
    if cfg.auth_fail == 'all' or req.headers['x-api-key'] ~= cfg.api_key then
      core.refused(path == '/api/sandboxes' and method == 'POST')
      return failure(cfg, 401, 'invalid API key')
    end
    local body
    if method == 'POST' then
      local ok, b = pcall(cjson.decode, req.body or '')
      if not ok or type(b) ~= 'table' then
        core.count('bad_requests')
        return json(400, { error = 'body must be a JSON object' })
      end
      body = b
    end
    return route(req, body)
  end

  local srv = scaffold.listen(handler, cfg.port)
  local f = { url = srv:url(), port = srv:port(), api_key = cfg.api_key, project_id = cfg.project_id, server = srv }

  --- The provider_config that points the lizard adapter here.
  function f.config(extra)
    return scaffold.with({ adapter = 'lizard', api_url = f.url, api_key = cfg.api_key, project_id = cfg.project_id }, extra)
  end

  --- The environment (or --env-file lines) that points the runner here.
  function f.env(extra)
    return scaffold.with({ LIZARD_API_URL = f.url, LIZARD_API_KEY = cfg.api_key, LIZARD_PROJECT_ID = cfg.project_id }, extra)
  end

  return core.finish(f, { srv })
end

return fake
