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
local http = require 'cseng.http'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local task = require 'cseng.task'
local clock = require 'cseng.clock'
local crypto = require 'cseng.crypto'
local archive = require 'cseng.archive'
local cjson = require 'cjson'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'
local adapter = require 'providers.shared.adapter'
local wire = require 'providers.shared.docker_wire'

local M = {
  name = 'docker',
  description = 'containers on the local dockerd (Engine API over its unix socket, per-task images)',
  applies_dockerfile = true, -- the image is built from environment/Dockerfile: no COPY emulation
  credentials = {},
  rates = { vcpu_s = 0, gib_s = 0, per_create = 0 },
  -- host_ports = false: a container on the bridge network has its own 127.0.0.1 (the sandbox spec's
  -- host_ports are not honoured, so installed agents cannot reach the model proxy)
  capabilities = { non_root = true, network_policy = true, run_steps = true, warm = true, host_ports = false },
  artifact_env = 'DOCKER_IMAGE_ID', -- what `cseng prewarm` prints
  -- container ids as the Engine API gives them (create's Id, list's Id): 64 hex digits
  id_format = { pattern = '^%x%x%x%x%x%x%x%x%x%x%x%x+$', example = string.rep('0123456789abcdef', 4), max = 64 },
}

local API = 'v1.41'
local DEFAULT_SOCKET = '/var/run/docker.sock'
local VERIFIER_USER = '1000:1000'
local TAIL_BYTES = 1 << 20
local LOG_TAIL = 4000
local SANDBOX_LABEL = 'cseng.sandbox' -- on containers cseng created, never on images it builds

--- Substitutions applied after the user's --image-map (first match wins). SWE-smith rows name
--- per-repository images (cseng/swesmith.<repo>) that exist nowhere; the repository is staged
--- by COPY on top of the Debian base, which has python3 and pytest.
M.DEFAULT_IMAGE_MAP = require('cseng.workload.recipe').DEFAULT_IMAGE_MAP

-- ---- the Engine API ------------------------------------------------------------------------

local urlencode = adapter.urlencode

local function query(params)
  local keys = util.keys(params)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = params[k]
    if v ~= nil and v ~= false then parts[#parts + 1] = urlencode(k) .. '=' .. urlencode(v == true and '1' or v) end
  end
  return #parts > 0 and ('?' .. table.concat(parts, '&')) or ''
end

-- The message of an error response ({"message": "..."}), else the body's start.
local function api_message(res)
  local ok, j = pcall(cjson.decode, res.body or '')
  if ok and type(j) == 'table' and type(j.message) == 'string' then return j.message end
  return util.trim((res.body or ''):sub(1, 300))
end

--- One request to dockerd. o: {query, json, body, headers, timeout, stream, ok={statuses}}.
--- Returns the response (status in o.ok, default 2xx) or nil, message, CODE (transport codes
--- from cseng.http, or "HTTP_<status>").
local function api(client, method, path, o)
  o = o or {}
  local headers, body = adapter.body(o)
  local res, err, code = http.request {
    method = method, url = client.base .. path .. query(o.query or {}), unix_socket = client.socket,
    headers = headers, body = body, timeout = o.timeout or 60, stream = o.stream,
  }
  if not res then return nil, string.format('docker %s %s: %s', method, path, tostring(err)), code end
  local good
  if o.ok then
    for _, s in ipairs(o.ok) do if res.status == s then good = true end end
  else
    good = res.status >= 200 and res.status < 300
  end
  if not good then
    local msg = string.format('docker %s %s: HTTP %d: %s', method, path, res.status, api_message(res))
    return nil, msg, 'HTTP_' .. res.status, res
  end
  return res
end

local function decode(res)
  local ok, j = pcall(cjson.decode, res.body)
  if ok and type(j) == 'table' then return j end
  return {}
end

-- cjson decodes JSON null as a light userdata; treat it as absent.
local function tbl(v) return type(v) == 'table' and v or {} end

-- cjson decodes every number as a float; exit codes and times are integers.
local function int(v)
  local n = tonumber(v)
  return n and (math.tointeger(n) or math.floor(n)) or nil
end

-- ---- the exec stream -------------------------------------------------------------------------

local demuxer = wire.demuxer


-- ---- tar reading (GET archive answers with a tar of the path) --------------------------------

local tar_first_file = wire.tar_first_file

-- ---- connect ---------------------------------------------------------------------------------

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
    base = (tcp or 'http://docker') .. '/' .. API,
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

function M.runtime(client)
  return string.format('docker %s (API %s, %s, cgroup v%s)', tostring(client.version), tostring(client.api_version),
    tostring(client.storage_driver), tostring(client.cgroup_version))
end

-- ---- images ----------------------------------------------------------------------------------

--- The id of a local image, or nil when it is absent.
function M.image_id(client, name)
  local res = api(client, 'GET', '/images/' .. name .. '/json', { ok = { 200 } })
  if not res then return nil end
  return decode(res).Id
end

local function image_map_of(client, map)
  local out = {}
  for _, e in ipairs(map or {}) do out[#out + 1] = e end
  for _, e in ipairs(client.image_map or {}) do out[#out + 1] = e end
  for _, e in ipairs(M.DEFAULT_IMAGE_MAP) do out[#out + 1] = e end
  return out
end

local function map_image(image, map)
  return require('cseng.workload.dockerfile').map_image(image, map)
end

--- Rewrite the FROM lines of a Dockerfile through the image map. Stage names (FROM x AS name)
--- used by later FROM lines are left alone. Returns the text and the list of base images.
function M.rewrite_from(text, map)
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
function M.build(client, req)
  local df_name = req.dockerfile or 'Dockerfile'
  local text = fs.read(req.context_dir .. '/' .. df_name)
  if not text then return build_failure('no ' .. df_name .. ' in ' .. req.context_dir) end
  local map = image_map_of(client, req.image_map)
  local rewritten, bases = M.rewrite_from(text, map)
  local tar, perr = build_context(req.context_dir, df_name, rewritten)
  if not tar then return build_failure('packing the build context: ' .. tostring(perr)) end
  -- the tag names the context and the exact base images, so a re-imported base rebuilds
  local ids = {}
  for i, b in ipairs(bases) do
    b.id = M.image_id(client, b.image)
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

-- ---- containers ------------------------------------------------------------------------------

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
  local sb = { id = id, name = name, image = image, labels = labels, created = tonumber(labels['cseng.created']) }
  local sres, serr, scode = api(client, 'POST', '/containers/' .. id .. '/start', { ok = { 204, 304 } })
  if not sres then
    api(client, 'DELETE', '/containers/' .. id, { query = { force = true, v = true }, ok = { 204, 404 } })
    return nil, serr, scode
  end
  return sb
end

local function exec_inspect(client, eid)
  local pause, deadline = 0.005, clock.now() + 15e9
  while true do -- the exit code lands a moment after the stream closes (later on a busy host)
    local res = api(client, 'GET', '/exec/' .. eid .. '/json', {})
    if not res then return nil end
    local j = decode(res)
    if j.Running == false and int(j.ExitCode) then return j end
    if clock.now() > deadline then return nil end
    task.sleep(pause)
    pause = math.min(pause * 2, 0.1)
  end
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
  local res, err, code = api(client, 'POST', '/containers/' .. sb.id .. '/exec', {
    json = {
      AttachStdout = true, AttachStderr = true, AttachStdin = false, Tty = false, Cmd = argv,
      Env = env_list(env), WorkingDir = opts.cwd,
      User = not non_root and '0:0' or (user == 'verifier' and VERIFIER_USER or tostring(user)),
    },
  })
  if not res then
    if code == 'HTTP_404' then return nil, 'sandbox ' .. sb.id .. ' is gone: ' .. err, 'ENOSANDBOX' end
    return nil, err, code
  end
  local eid = decode(res).Id
  local cap = opts.tail_bytes or TAIL_BYTES
  local d = demuxer(cap)
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
  local data, terr, tcode = tar_first_file(res.body)
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

--- Images cseng made or uses: task images, warm images, the bases (for `cseng images list`).
function M.list_images(client)
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
function M.remove_image(client, name, force)
  local res, err, code = api(client, 'DELETE', '/images/' .. name, {
    query = { force = force and true or nil }, ok = { 200, 404 },
  })
  if not res then return nil, err, code end
  return true
end

--- Import a root filesystem tar as an image (POST /images/create?fromSrc=-).
function M.import(client, tar_bytes, repo, tag, changes)
  local q = { fromSrc = '-', repo = repo, tag = tag, message = 'cseng images base' }
  local path = '/images/create' .. query(q)
  for _, c in ipairs(changes or {}) do path = path .. '&changes=' .. urlencode(c) end
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
  return id or M.image_id(client, repo .. ':' .. tag)
end

return M
