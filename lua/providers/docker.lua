--- The docker provider: one container per trial, through the Docker Engine API (v1.41) on
--- dockerd's unix socket, spoken with libcurl (cseng.http), never through the docker CLI.
---
--- Cold: the task's environment/ is the build context of POST /build (a deterministic tar, its
--- FROM lines passed through the image map); the image tag is the recipe's content key
--- (lua/cseng/workload/recipe.lua), and the image's cseng.base_ids label names the base images' ids, so an
--- unchanged task on unchanged bases finds its tag and skips the build (a cache hit), and a
--- re-imported base rebuilds it.
--- Then a fresh container: sleep infinity under docker-init, the task's cpus/memory as limits,
--- no network unless the task allows it and the user asks, cseng.* labels on it.
--- Warm: a prepared container is committed to an image (POST /commit) and trials start from it.
--- exec: POST /containers/{id}/exec + /exec/{id}/start (the 8-byte-framed stdout/stderr stream,
--- demultiplexed as it arrives, tails kept) + GET /exec/{id}/json for the exit code; the command
--- runs under `timeout -s KILL`, since the API has no way to kill an exec.
--- The request to dockerd and the stream formats are providers/shared/docker_wire.lua; the image
--- build and the image operations providers/shared/docker_build.lua.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local cjson = require('cjson')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local wire = require('providers.shared.docker_wire')
local build = require('providers.shared.docker_build')

local M = {
  name = 'docker',
  description = 'containers on the local dockerd (Engine API over its unix socket, per-task images)',
  applies_dockerfile = true, -- the image is built from environment/Dockerfile: no COPY emulation
  credentials = {},
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 },
  -- host_ports = false: a container on the bridge network has its own 127.0.0.1 (the sandbox spec's
  -- host_ports are not honoured, so installed agents cannot reach the model proxy)
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true, host_ports = false,
    snapshot = true, pause = true, pause_memory = true, egress = true, standard = true },
  artifact_env = 'DOCKER_IMAGE_ID', -- what `cseng prewarm` prints
  -- container ids as the Engine API gives them (create's Id, list's Id): 64 hex digits
  id_format = { pattern = '^%x%x%x%x%x%x%x%x%x%x%x%x+$', example = string.rep('0123456789abcdef', 4), max = 64 },
}

local DEFAULT_SOCKET = '/var/run/docker.sock'
local VERIFIER_USER = '1000:1000'
local TAIL_BYTES = 1 << 20
local SANDBOX_LABEL = 'cseng.sandbox' -- on containers cseng created, never on images it builds

local api, decode, tbl, int = wire.api, wire.decode, wire.tbl, wire.int

local function socket_from(cfg, getenv)
  if cfg.socket then return cfg.socket, nil end
  local host = getenv('DOCKER_HOST')
  if host and host ~= '' then
    local path = host:match('^unix://(.+)$')
    if path then return path, nil end
    local hp = host:match('^tcp://(.+)$') or host:match('^http://(.+)$')
    if hp then return nil, 'http://' .. hp:gsub('/+$', '') end
    errors.raise(errors.ECONFIG, 'docker provider: DOCKER_HOST=' .. host .. ' is not unix://PATH or tcp://HOST:PORT (TLS is not supported)')
  end
  return DEFAULT_SOCKET, nil
end

--- Reach dockerd (/_ping), read its version and limits. Raises a clear error when it does not answer.
function M.connect(cfg)
  cfg = cfg or {}
  local getenv = cfg.getenv or os.getenv
  local socket, tcp = socket_from(cfg, getenv)
  local where = socket or tcp
  local client = {
    socket = socket,
    base = (tcp or 'http://docker') .. '/' .. wire.API,
    where = where,
    launcher = 'cseng@' .. (sys.hostname() or 'localhost'),
    image_map = cfg.image_map,
  }
  local res, err, code = api(client, 'GET', '/_ping', { timeout = cfg.connect_timeout or 10 })
  if not res then
    local hint = socket and not fs.exists(socket) and ' (no such socket: is dockerd running? try tools/docker-up.sh)'
    hint = hint or ''
    errors.raise(code or errors.EDOCKER, string.format('docker provider: cannot reach dockerd at %s: %s%s', where, tostring(err), hint))
  end
  local v = api(client, 'GET', '/version', {})
  local info = api(client, 'GET', '/info', {})
  local vj, ij = v and decode(v) or {}, info and decode(info) or {}
  client.version = vj.Version
  client.api_version = vj.ApiVersion
  client.ncpu = int(ij.NCPU)
  client.mem_total = int(ij.MemTotal)
  client.storage_driver = ij.Driver
  client.cgroup_version = ij.CgroupVersion
  client.local_daemon = socket ~= nil
  local n = tonumber(cfg.build_concurrency or getenv('CSENG_DOCKER_BUILD_CONCURRENCY') or '') or 2
  client.build_sem = task.semaphore(math.max(1, math.floor(n)))
  return client
end
local function env_list(env)
  local keys = util.keys(env or {})
  if #keys == 0 then return nil end
  local out = {}
  for i, k in ipairs(keys) do out[i] = k .. '=' .. tostring(env[k]) end
  return out
end
--- Create and start a container. spec: {image, warm_artifact, labels, env, workdir, network,
--- cpus, memory_mb, ...}. Returns {id, image, labels, created} or nil, message, CODE.
function M.create(client, spec)
  local image = spec.warm_artifact or spec.image
  if not image then return nil, 'docker provider: no image (the task has no Dockerfile FROM)', 'ENOIMAGE' end
  local labels = util.copy(spec.labels)
  labels['cseng.launcher'] = labels['cseng.launcher'] or client.launcher
  labels['cseng.created'] = labels['cseng.created'] or tostring(os.time())
  labels[SANDBOX_LABEL] = '1'
  if spec.ttl_seconds then labels['cseng.ttl_seconds'] = tostring(spec.ttl_seconds) end
  local host = { Init = true, NetworkMode = spec.network and 'bridge' or 'none', PidsLimit = 4096 }
  if spec.cpus then
    local cpus = spec.cpus
    if client.ncpu and cpus > client.ncpu then cpus = client.ncpu end -- dockerd refuses more than the host has
    host.NanoCpus = math.floor(cpus * 1e9)
  end
  if spec.memory_mb then
    host.Memory = math.floor(spec.memory_mb * 1024 * 1024)
    host.MemorySwap = host.Memory -- no swap beyond the limit
  end
  local name = 'cseng-' .. crypto.hex(crypto.random_bytes(6))
  local res, err, code = api(client, 'POST', '/containers/create', {
    query = { name = name },
    json = {
      Image = image, Entrypoint = { 'sleep' }, Cmd = { 'infinity' }, Labels = labels,
      Env = env_list(spec.env), WorkingDir = spec.workdir, Hostname = 'sandbox', HostConfig = host,
    },
  })
  if not res then
    if code == 'HTTP_404' then
      return nil, string.format('docker provider: image %s is not present (no registry is reachable here; '
        .. 'build it or map it with --image-map)', image), 'ENOIMAGE'
    end
    return nil, err, code
  end
  local id = decode(res).Id
  local sb = { id = id, name = name, image = image, labels = labels, created = tonumber(labels['cseng.created']),
    code_path = 'POST /containers/create + start, commands by POST /containers/{id}/exec' }
  local sres, serr, scode = api(client, 'POST', '/containers/' .. id .. '/start', { ok = { 204, 304 } })
  if not sres then
    api(client, 'DELETE', '/containers/' .. id, { query = { force = true, v = true }, ok = { 204, 404 } })
    return nil, serr, scode
  end
  return sb
end
-- how dockerd is asked again for what lags behind an answer: 5 ms, doubling to 0.1 s, for 15 s
local function settle(fn) return util.settle(fn, { first = 0.005, max = 0.1, seconds = 15 }) end

local function exec_inspect(client, eid)
  return settle(function() -- the exit code lands a moment after the stream closes (later on a busy host)
    local res = api(client, 'GET', '/exec/' .. eid .. '/json', {})
    if not res then return true, nil end
    local j = decode(res)
    if j.Running == false and int(j.ExitCode) then return true, j end
    return false, nil
  end)
end

--- POST /containers/{id}/exec. dockerd (daemon/monitor.go) can mark a container paused again
--- after its unpause answered: containerd's "paused" event, when it arrives late, sets the flag,
--- and only the "resumed" event behind it clears it. An exec meanwhile gets 409 "is paused".
--- A sandbox this adapter did not leave paused (sb.paused) waits that out; one it did fails at once.
local function exec_create(client, sb, body)
  return settle(function()
    local res, err, code = api(client, 'POST', '/containers/' .. sb.id .. '/exec', { json = body })
    local stale = not res and code == 'HTTP_409' and not sb.paused and tostring(err):find('is paused', 1, true)
    return not stale, res, err, code
  end)
end

local function upload_stdin(client, sb, data)
  local name = '.cseng-stdin-' .. crypto.hex(crypto.random_bytes(6))
  local tar = archive.pack({ { path = name, data = data, mode = tonumber('644', 8) } }, { format = 'tar' })
  local ok, err, code = M.put(client, sb, '/tmp', tar)
  if not ok then return nil, 'uploading stdin: ' .. tostring(err), code end
  return '/tmp/' .. name
end
--- Run a shell command in the container. opts: {cwd, env, user ('root'|'verifier'|uid[:gid]),
--- timeout (s), stdin, tail_bytes}. Returns {code, stdout, stderr, elapsed, timed_out,
--- stdout_dropped, stderr_dropped} or nil, message, CODE.
function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local t0 = clock.now()
  local timeout = opts.timeout or 600
  local argv = { 'timeout', '-s', 'KILL', string.format('%.3f', timeout), '/bin/bash', '-c', cmd }
  if sb.no_timeout_binary then argv = { '/bin/bash', '-c', cmd } end
  if opts.stdin then
    local path, err, code = upload_stdin(client, sb, opts.stdin)
    if not path then return nil, err, code end
    -- open the file as stdin, unlink it, then become the command
    local wrapped = { '/bin/bash', '-c', 'exec <"$1" && rm -f -- "$1" 2>/dev/null; shift; exec "$@"',
      'cseng-stdin', path }
    for _, a in ipairs(argv) do wrapped[#wrapped + 1] = a end
    argv = wrapped
  end
  local user = opts.user
  local non_root = user ~= nil and user ~= 'root' and user ~= 0 and user ~= '0'
  local env = util.copy(opts.env)
  if non_root and env.HOME == nil then env.HOME = '/tmp' end
  local res, err, code = exec_create(client, sb, {
    AttachStdout = true, AttachStderr = true, AttachStdin = false, Tty = false, Cmd = argv,
    Env = env_list(env), WorkingDir = opts.cwd,
    User = not non_root and '0:0' or (user == 'verifier' and VERIFIER_USER or tostring(user)),
  })
  if not res then
    if code == 'HTTP_404' then return nil, 'sandbox ' .. sb.id .. ' is gone: ' .. err, 'ENOSANDBOX' end
    return nil, err, code
  end
  local eid = decode(res).Id
  local cap = opts.tail_bytes or TAIL_BYTES
  local d = wire.demuxer(cap)
  local first = {}
  local sres, serr, scode = api(client, 'POST', '/exec/' .. eid .. '/start', {
    json = { Detach = false, Tty = false }, timeout = timeout + 30,
    stream = function(chunk)
      if #first < 4 then first[#first + 1] = chunk end
      d.feed(chunk)
    end,
  })
  if not sres then
    if scode ~= 'ETIMEDOUT' then return nil, serr, scode end
    -- the wrapper did not end it (no timeout binary?): kill the process by its host pid
    local info = api(client, 'GET', '/exec/' .. eid .. '/json', {})
    local pid = info and int(decode(info).Pid)
    if pid and pid > 0 and client.local_daemon then pcall(sys.kill, pid, 'KILL') end
    return {
      code = 137, stdout = d.out.get(), stderr = d.err.get(), elapsed = (clock.now() - t0) / 1e9, timed_out = true,
      stdout_dropped = d.out.dropped(), stderr_dropped = d.err.dropped(),
    }
  end
  local info = exec_inspect(client, eid)
  if not info then return nil, 'docker exec ' .. eid .. ': no exit code', 'EDOCKER' end
  local exit_code = int(info.ExitCode) or -1
  local elapsed = (clock.now() - t0) / 1e9
  local out = d.out.get()
  if (exit_code == 126 or exit_code == 127) and not sb.no_timeout_binary and
      out:find('"timeout": executable file not found', 1, true) then
    sb.no_timeout_binary = true -- an image without coreutils' timeout: enforce it from outside
    return M.exec(client, sb, cmd, opts)
  end
  return {
    code = exit_code, stdout = out, stderr = d.err.get(), elapsed = elapsed,
    timed_out = exit_code == 137 and elapsed >= timeout, exec_id = eid,
    stdout_dropped = d.out.dropped(), stderr_dropped = d.err.dropped(),
  }
end

--- Extract a tar (bytes, plain or gzip) into a directory of the container (created if missing).
function M.put(client, sb, dir, tar_bytes)
  local function put()
    return api(client, 'PUT', '/containers/' .. sb.id .. '/archive', {
      query = { path = dir }, headers = { ['Content-Type'] = 'application/x-tar' }, body = tar_bytes, timeout = 300,
    })
  end
  local res, err, code = put()
  if not res and code == 'HTTP_404' and not err:find('No such container', 1, true) then
    local mk, merr, mcode = M.exec(client, sb, 'mkdir -p -- ' .. util.shell_quote(dir), { timeout = 60, cwd = '/' })
    if not mk then return nil, merr, mcode end
    if mk.code ~= 0 then return nil, 'mkdir -p ' .. dir .. ': ' .. util.trim(mk.stderr), 'EPUT' end
    res, err, code = put()
  end
  if not res then return nil, err, code end
  return true
end

--- Read a file of the container.
function M.get(client, sb, path)
  local res, err, code = api(client, 'GET', '/containers/' .. sb.id .. '/archive', {
    query = { path = path }, timeout = 300,
  })
  if not res then
    if code == 'HTTP_404' and not err:find('No such container', 1, true) then
      return nil, path .. ': no such file', 'ENOENT'
    end
    return nil, err, code
  end
  local data, terr, tcode = wire.tar_first_file(res.body)
  if data then return data end
  if tcode == 'ESYMLINK' then -- follow it inside the container
    local r, xerr, xcode = M.exec(client, sb, 'cat -- ' .. util.shell_quote(path), { timeout = 60, cwd = '/' })
    if not r then return nil, xerr, xcode end
    if r.code ~= 0 then return nil, path .. ': ' .. util.trim(r.stderr), 'ENOENT' end
    return r.stdout
  end
  return nil, path .. ': ' .. terr, tcode
end

--- Remove the container and its anonymous volumes. Idempotent: an absent container is success.
function M.destroy(client, sb)
  local res, err, code = api(client, 'DELETE', '/containers/' .. sb.id, {
    query = { force = true, v = true }, ok = { 204, 404, 409 }, timeout = 120,
  })
  if not res then return nil, err, code end
  if res.status == 409 then -- "removal already in progress": wait for it to finish
    for _ = 1, 300 do
      local r = api(client, 'GET', '/containers/' .. sb.id .. '/json', { ok = { 200, 404 } })
      if r and r.status == 404 then return true end
      task.sleep(0.1)
    end
    return nil, 'docker: removal of ' .. sb.id .. ' did not finish', 'EBUSY'
  end
  return true
end

--- cseng's sandboxes (containers carrying cseng.run and cseng.sandbox), narrowed by
--- filter.labels {k = v}. cseng.sandbox keeps out the intermediate containers of a running
--- build, which inherit the cseng.* labels of the image being built.
function M.list(client, filter)
  local label = { 'cseng.run', SANDBOX_LABEL }
  for k, v in pairs((filter and filter.labels) or {}) do label[#label + 1] = k .. '=' .. v end
  table.sort(label)
  local res, err, code = api(client, 'GET', '/containers/json', {
    query = { all = true, filters = cjson.encode({ label = label }) },
  })
  if not res then return nil, err, code end
  local out = {}
  local list = decode(res)
  for _, c in ipairs(list) do
    out[#out + 1] = {
      id = c.Id, labels = tbl(c.Labels), created = int(c.Created), image = c.Image, state = c.State,
      name = type(c.Names) == 'table' and tostring(c.Names[1] or ''):gsub('^/', '') or nil,
    }
  end
  return out
end
function M.runtime(client)
  return string.format('docker %s (API %s, %s, cgroup v%s)', tostring(client.version), tostring(client.api_version),
    tostring(client.storage_driver), tostring(client.cgroup_version))
end

--- Build (or find) the task's image (providers/shared/docker_build.lua). req: {recipe, task_id,
--- context_dir, dockerfile, image_map, timeout, labels, network}. The tag is the recipe's content
--- key. Returns {image, image_id, cache_hit, log_tail, context_sha256, content_key, bases} or nil,
--- {message, log}, "EBUILD" | "ETIMEDOUT".
M.build = build.build

--- Commit a prepared container to an image (the warm artifact). Returns the image id (what
--- `cseng prewarm` prints). A later commit of the same task moves the tag, but the id stays
--- valid: warm images are removed only by `cseng images prune`.
function M.snapshot(client, sb, key)
  local labels = util.merge(sb.labels, { ['cseng.kind'] = 'warm', ['cseng.created'] = tostring(os.time()) })
  local task_id = (sb.labels or {})['cseng.task'] or 'task'
  local repo = 'cseng-warm/' .. wire.repo_component(task_id)
  local tag = tostring(key or 'latest'):lower():gsub('[^a-z0-9_.-]', '-')
  local res, err, code = api(client, 'POST', '/commit', {
    query = { container = sb.id, repo = repo, tag = tag, pause = true },
    json = { Labels = labels }, timeout = 600,
  })
  if not res then return nil, err, code end
  local id = decode(res).Id
  if not id then return nil, 'docker commit: no image id in the answer', 'EDOCKER' end
  return id
end

--- The warm images snapshot made (`cseng prewarm --list`): {{id, created_at, task_id}...}.
function M.list_artifacts(client)
  local images, err, code = build.list_images(client)
  if not images then return nil, err, code end
  local out = {}
  for _, im in ipairs(images) do
    if im.labels['cseng.kind'] == 'warm' then
      out[#out + 1] = { id = im.id, created_at = im.created, task_id = im.labels['cseng.task'] }
    end
  end
  return out
end

--- Remove a warm image by id (absent is success). Not forced: an image a container still runs
--- from stays, and the answer says so.
function M.delete_artifact(client, id)
  if type(id) ~= 'string' or not id:match('^sha256:%x+$') and not id:match('^%x+$') then
    return nil, 'docker provider: not an image id: ' .. tostring(id), errors.EUNSAFE
  end
  return build.remove_image(client, id, false)
end

--- Pause a container: dockerd freezes every process of it (the freezer cgroup), memory kept.
function M.pause(client, sb)
  local res, err, code = api(client, 'POST', '/containers/' .. sb.id .. '/pause', { ok = { 204 } })
  if not res then return nil, err, code end
  sb.paused = true
  return true
end

--- Resume a paused container: its processes continue where they stopped.
function M.resume(client, sb)
  local res, err, code = api(client, 'POST', '/containers/' .. sb.id .. '/unpause', { ok = { 204 } })
  if not res then return nil, err, code end
  sb.paused = nil
  return true
end

return M
