--- What many specs share (not a spec: no _spec in the name):
---   local H = require 'spec.helpers.common'
---   H.diff(got, want, 'row 3')      -- the first difference, or nil (integers and floats apart)
---   H.cseng({ 'run', ... }, { env = {...}, stdin = '...', timeout = 600 })   -- the binary
---   H.tempdir('arena-spec-')    -- a temporary directory, removed by H.remove_tempdirs
---   teardown(H.remove_tempdirs)  -- at the spec file's top level: every one it made
---   H.pgrep('sleep 901.5')      -- pids of live processes whose command line holds it
---   H.until_true(cond, n)       -- poll: the verdict is the condition, never the time it took
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local task = require('cseng.task')

local H = {}

H.ROOT = sys.root()
H.CSENG = H.ROOT .. '/cseng'

local made = {}

--- A temporary directory (fs.tempdir(prefix)) that H.remove_tempdirs removes: a spec file that
--- makes them calls teardown(H.remove_tempdirs), so make check leaves nothing under /tmp.
---@param prefix string
---@return string
function H.tempdir(prefix)
  local d = assert(fs.tempdir(prefix))
  made[#made + 1] = d
  return d
end

--- Remove every directory H.tempdir made in this process.
function H.remove_tempdirs()
  for i = #made, 1, -1 do
    fs.remove_tree(made[i])
    made[i] = nil
  end
end

--- Deep equality that insists integers stay integers and floats stay floats (NaN equals NaN),
--- naming the first difference ("row.a.b: 1 vs 2"), or nil when a and b are the same.
---@param a any what was read
---@param b any what was expected
---@param path? string the name of the value in messages (default "value")
---@return string|nil
function H.diff(a, b, path)
  path = path or 'value'
  if type(a) ~= type(b) then
    return string.format('%s: %s (%s) vs %s (%s)', path, tostring(a), type(a), tostring(b), type(b))
  end
  if type(a) == 'number' then
    if math.type(a) ~= math.type(b) then
      return string.format('%s: %s is %s, expected %s', path, tostring(a), math.type(a), math.type(b))
    end
    if a ~= b and not (a ~= a and b ~= b) then return string.format('%s: %s vs %s', path, a, b) end
    return nil
  end
  if type(a) ~= 'table' then
    if a ~= b then return string.format('%s: %q vs %q', path, tostring(a), tostring(b)) end
    return nil
  end
  for k, v in pairs(b) do
    local d = H.diff(a[k], v, path .. '.' .. tostring(k))
    if d then return d end
  end
  for k in pairs(a) do
    if b[k] == nil then return path .. '.' .. tostring(k) .. ': unexpected key' end
  end
  return nil
end

--- Run ./cseng with args in the repository root; returns proc.run's result. o.env: run with
--- only PATH, HOME and TMPDIR of this process plus these (else the whole environment is
--- inherited); o.env_add: variables set on the inherited environment (false unsets one);
--- o.stdin; o.timeout (default 900 s).
---@param args string[]
---@param o? {env?: table, env_add?: table, stdin?: string, timeout?: number}
function H.cseng(args, o)
  o = o or {}
  local argv = { H.CSENG }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local env
  if o.env then
    env = {}
    for _, k in ipairs { 'PATH', 'HOME', 'TMPDIR' } do env[k] = os.getenv(k) end
    for k, v in pairs(o.env) do env[k] = v end
  end
  return assert(proc.run { argv = argv, cwd = H.ROOT, env = env, env_add = o.env_add, stdin = o.stdin,
    timeout = o.timeout or 900 })
end

--- Pids of live (non-zombie) processes whose command line contains s (pgrep -f).
---@param s string
---@return integer[]
function H.pgrep(s)
  local r = assert(proc.run { argv = { 'pgrep', '-f', s } })
  local pids = {}
  for pid in r.stdout:gmatch('%d+') do pids[#pids + 1] = tonumber(pid) end
  return pids
end

--- Run a python3 client script with the server's port as argv[1] (proc.run: this process's loop
--- keeps answering it) and return its JSON output; the client's failure or timeout (default
--- 120 s) fails the spec.
---@param port integer
---@param script string
---@param timeout? number
function H.python_client(port, script, timeout)
  local r = assert(proc.run { argv = { 'python3', '-c', script, tostring(port) }, timeout = timeout or 120 })
  assert(not r.timed_out, 'python client timed out: ' .. r.stderr)
  assert(r.code == 0, 'python client failed (' .. tostring(r.code) .. '): ' .. r.stderr)
  return require('cjson').decode(r.stdout)
end

--- Poll until cond() holds, at most n tries 50 ms apart (default 1200: a generous minute); the
--- verdict is the condition, never the time it took.
---@param cond fun(): boolean
---@param n? integer
---@return boolean
function H.until_true(cond, n)
  for _ = 1, n or 1200 do
    if cond() then return true end
    task.sleep(0.05)
  end
  return cond()
end

--- Why a spec that needs dockerd and the base image cannot run here, or nil when both are
--- there: dockerd answers /_ping on its socket (DOCKER_HOST's unix path, else the default) and
--- holds image (default cseng/debian:bookworm); with tools/docker-up.sh's own reason when it
--- failed (build/docker/unavailable). Asked once per image in a spec process. Specs mark
--- themselves pending with the reason.
---@param image? string
---@return string|nil
local docker_why = {}
function H.docker_missing(image)
  image = image or 'cseng/debian:bookworm'
  if docker_why[image] == nil then
    local http = require('cseng.http')
    local socket = (os.getenv('DOCKER_HOST') or ''):match('^unix://(.+)$') or '/var/run/docker.sock'
    local why
    local ping, err = http.request { url = 'http://docker/v1.41/_ping', unix_socket = socket, timeout = 5 }
    if not ping or ping.status ~= 200 then
      why = 'dockerd not available at ' .. socket .. ': ' .. (ping and ('HTTP ' .. ping.status) or tostring(err))
    else
      local img = http.request { url = 'http://docker/v1.41/images/' .. image .. '/json', unix_socket = socket, timeout = 10 }
      if not img or img.status ~= 200 then why = 'the base image ' .. image .. ' is absent (tools/docker-up.sh builds it)' end
    end
    local up = why and fs.read(H.ROOT .. '/build/docker/unavailable')
    if up then why = why .. ' (tools/docker-up.sh: ' .. up:gsub('%s+$', '') .. ')' end
    docker_why[image] = why or false
  end
  return docker_why[image] or nil
end

return H
