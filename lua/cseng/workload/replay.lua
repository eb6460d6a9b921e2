--- Replay of a build recipe (lua/cseng/workload/recipe.lua) inside a running sandbox, for providers without a
--- native image build: the steps run in order through the adapter's own exec and put.
---   ENV      sets the variables of the later steps (the sandbox's own ENV comes from create);
---   ARG      its value is in the environment of the RUN steps after it (as docker does);
---   WORKDIR  the directory of the later RUN steps (created by the step that needs it);
---   USER     who runs the later RUN steps: runuser -u NAME (setpriv for uid[:gid]), with HOME
---            from the user's passwd entry; root again after USER root;
---   COPY/ADD the sources, resolved in the build context on this host (no escaping it, * and ?
---            globs), uploaded with put into a /tmp directory, then moved into place with
---            `tar --no-overwrite-dir` (existing directories keep their owner and mode, as with
---            docker); consecutive COPYs are one upload; --chown applied with chown -R after;
---   RUN      /bin/sh -c CMD (docker's shell form; the exec form is quoted into it).
--- A failing RUN stops the replay: the error names the Dockerfile line and the exit code (and the
--- host it could not reach, when its output shows one: replay.unreachable), and its log is the
--- tail of the step's output (stdout then stderr).
--- The network: RUN steps get it, as `docker build` gives it (o.network ~= false). With
--- o.network == false (--build-network off) a sandbox that enforces it (o.enforced: local's build
--- sandbox) runs the steps without a network; one that cannot (the replaying providers' sandboxes
--- have the provider's network) refuses the first RUN step.
local archive = require('cseng.archive')
local clock = require('cseng.clock')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local staging = require('cseng.workload.staging')

local replay = {}

replay.LOG_TAIL = 4000

local function q(s) return util.shell_quote(s) end

-- What tools print when they cannot reach a host: a pattern capturing the host, and the reason.
local UNREACHABLE = {
  { "Temporary failure resolving '([^']+)'", 'name resolution failed' },           -- apt
  { "Could not resolve '([^']+)'", 'name resolution failed' },                     -- apt
  { 'Could not connect to ([%w%.%-]+):%d+', 'connection failed' },                 -- apt
  { 'Unable to connect to ([%w%.%-]+):', 'connection failed' },                    -- apt
  { 'Could not resolve host: ([%w%.%-]+)', 'name resolution failed' },             -- curl, git
  { 'Failed to connect to ([%w%.%-]+) port', 'connection failed' },                -- curl, git
  { "unable to resolve host address .([%w%.%-]+)", 'name resolution failed' },     -- wget
  { 'Connecting to ([%w%.%-]+) %([^)]*%)[^\n]*failed', 'connection failed' },     -- wget
  { "HTTPSConnectionPool%(host='([^']+)'", 'connection failed' },                  -- pip, requests
  { "HTTPConnectionPool%(host='([^']+)'", 'connection failed' },
  { 'getaddrinfo [%u_]+ ([%w%.%-]+)', 'name resolution failed' },                  -- npm, node
  { 'dial tcp: lookup ([%w%.%-]+)', 'name resolution failed' },                    -- go
  { 'Failed to fetch https?://([%w%.%-]+)', 'fetch failed' },                      -- apt (last: its other lines say why)
}

--- The host a failed step's output says it could not reach: "could not reach HOST (REASON)", or
--- nil. pip without a host in its output (a NewConnectionError on /simple/...) is "could not
--- reach pip's package index".
---@param log string
---@return string|nil
function replay.unreachable(log)
  log = tostring(log or '')
  for _, p in ipairs(UNREACHABLE) do
    local host = log:match(p[1])
    if host then return 'could not reach ' .. host .. ' (' .. p[2] .. ')' end
  end
  if log:match('NewConnectionError') and log:match('/simple/') then
    local why = log:match('Failed to establish a new connection: %[Errno [^%]]*%] ([^\'\n]+)')
    return "could not reach pip's package index" .. (why and (' (' .. why .. ')') or '')
  end
  return nil
end

local function one_line(s) return (tostring(s):gsub('%s+', ' ')) end

local head = util.head

--- The shell command of a RUN step: as root, or dropped to the step's USER.
function replay.run_command(cmd, cwd, user)
  local pre = 'mkdir -p -- ' .. q(cwd) .. ' && cd -- ' .. q(cwd) .. ' || exit 1; '
  if not user or user == '' or user == 'root' or user == '0' or user == '0:0' then
    return pre .. 'exec /bin/sh -c ' .. q(cmd)
  end
  local name, group = user:match('^([^:]+):?(.*)$')
  if name:match('^%d+$') then
    local g = group ~= '' and group or name
    return pre .. 'exec setpriv --reuid=' .. q(name) .. ' --regid=' .. q(g) .. ' --clear-groups /bin/sh -c ' .. q(cmd)
  end
  local home = 'h=$(getent passwd ' .. q(name) .. ' | cut -d: -f6); export HOME="${h:-/}" USER=' .. q(name) .. '; '
  if group ~= '' then
    return pre .. home .. 'exec setpriv --reuid=' .. q(name) .. ' --regid=' .. q(group) .. ' --init-groups /bin/sh -c ' .. q(cmd)
  end
  return pre .. home .. 'exec runuser -u ' .. q(name) .. ' -- /bin/sh -c ' .. q(cmd)
end

--- Run a recipe's steps in a sandbox. P: the adapter module (P.exec, P.put); o: {timeout
--- (seconds for the whole replay, default 600), env (the sandbox's base variables, e.g.
--- PATH), from_step (steps 1..from_step are already in the sandbox, from a build cache: their
--- ENV, ARG, WORKDIR and USER still apply, nothing of theirs runs), on_step (fn(i, step) after
--- each RUN step that ran and succeeded, and after the COPY steps before it)}. Returns {steps,
--- runs, copies, seconds} or nil, an error {message, log, step, line}, "EBUILD" | "ETIMEDOUT" |
--- the adapter's code.
---@param P table
---@param client any
---@param sb table
---@param rcp BuildRecipe
---@param o? table
function replay.run(P, client, sb, rcp, o)
  o = o or {}
  local t0 = clock.now()
  local deadline = t0 + (o.timeout or 600) * 1e9
  local env = util.copy(o.env)
  local cwd, user = '/', nil
  local pending = {} -- COPY steps not uploaded yet
  local info = { steps = 0, runs = 0, copies = 0 }
  local function fail(msg, log, code, step)
    code = code or errors.EBUILD
    return nil, errors.new(code, msg, { log = log and util.tail(log, replay.LOG_TAIL) or nil, step = step, line = step }), code
  end
  local function flush()
    if #pending == 0 then return true end
    local gaps = {}
    local entries = staging.copy_entries(rcp.context_dir, { copies = pending }, gaps)
    local chowns = {}
    for _, c in ipairs(pending) do
      if c.chown then chowns[#chowns + 1] = c end
    end
    pending = {}
    if #entries > 0 then
      -- uploaded beside the root, then moved into place by tar with --no-overwrite-dir: as with
      -- docker's COPY, directories that exist keep their owner and mode (an archive carries every
      -- parent directory, as root's)
      local tar = archive.pack(entries, { format = 'tar' })
      local stage = util.sandbox_tmp_path('copy')
      local ok, err, code = P.put(client, sb, stage, tar)
      if not ok then return fail('replay: COPY: uploading: ' .. tostring(err), nil, code) end
      local r, xerr, xcode = P.exec(client, sb, 'tar -C ' .. q(stage) .. ' -cf - . | tar -C / --no-overwrite-dir -xpf -; rc=$?; rm -rf -- '
        .. q(stage) .. '; exit $rc', { cwd = '/', timeout = 300 })
      if not r then return fail('replay: COPY: ' .. tostring(xerr), nil, xcode) end
      if r.code ~= 0 then
        return fail('replay: COPY: moving the files into place: ' .. util.trim(r.stderr), (r.stdout or '') .. (r.stderr or ''))
      end
    end
    for _, c in ipairs(chowns) do
      local dst = c.dst:gsub('/+$', '')
      local r, err, code = P.exec(client, sb, 'chown -R ' .. q(c.chown) .. ' -- ' .. q(dst), { cwd = '/', timeout = 120 })
      if not r then return fail('replay: COPY --chown: ' .. tostring(err), nil, code) end
      if r.code ~= 0 then
        return fail(string.format('environment/Dockerfile line %d: COPY --chown=%s: %s', c.line, c.chown, util.trim(r.stderr)),
          (r.stdout or '') .. (r.stderr or ''))
      end
    end
    return true
  end
  local from = o.from_step or 0
  for i, s in ipairs(rcp.steps or {}) do
    info.steps = info.steps + 1
    if i <= from then
      -- already built: only the state it leaves for later steps
      if s.op == 'ENV' then
        for _, kv in ipairs(s.vars) do env[kv[1]] = kv[2] end
      elseif s.op == 'WORKDIR' then
        cwd = s.path
      elseif s.op == 'USER' then
        user = s.user
      elseif s.op == 'RUN' then
        info.runs = info.runs + 1
      end
    elseif s.op == 'COPY' then
      if s.copy.from == nil then pending[#pending + 1] = s.copy; info.copies = info.copies + 1 end
    else
      local ok, err, code = flush()
      if not ok then return nil, err, code end
      if s.op == 'ENV' then
        for _, kv in ipairs(s.vars) do env[kv[1]] = kv[2] end
      elseif s.op == 'WORKDIR' then -- (ARG: nothing to do, each RUN step carries the values in effect)
        cwd = s.path
      elseif s.op == 'USER' then
        user = s.user
      elseif s.op == 'RUN' then
        info.runs = info.runs + 1
        if o.network == false and not o.enforced then
          return fail(string.format('environment/Dockerfile line %d: RUN %s: not run: --build-network off, and %s cannot take '
            .. "the network from a running sandbox", s.line, head(one_line(s.cmd), 200), P.name or 'this provider'), nil, 'EBUILD', s.line)
        end
        local left = (deadline - clock.now()) / 1e9
        if left <= 0 then
          return fail(string.format('replay timed out before environment/Dockerfile line %d (RUN %s)', s.line, s.cmd),
            nil, 'ETIMEDOUT', s.line)
        end
        local run_env = util.merge(s.args or {}, env)
        local r, xerr, xcode = P.exec(client, sb, replay.run_command(s.cmd, cwd, user), { cwd = '/', env = run_env, timeout = left })
        if not r then return fail('replay: RUN at environment/Dockerfile line ' .. s.line .. ': ' .. tostring(xerr), nil, xcode, s.line) end
        local log = (r.stdout or '') .. (r.stderr or '')
        if r.timed_out then
          return fail(string.format('environment/Dockerfile line %d: RUN %s: timed out', s.line, s.cmd), log, 'ETIMEDOUT', s.line)
        end
        if r.code ~= 0 then
          local why = replay.unreachable(log)
          if why and o.network == false then why = why .. '; the build has no network (--build-network off)' end
          return fail(string.format('environment/Dockerfile line %d: RUN %s: exit %d%s', s.line, head(one_line(s.cmd), 200), r.code,
            why and (': ' .. why) or ''), log, 'EBUILD', s.line)
        end
        if o.on_step then o.on_step(i, s) end
      end
    end
  end
  local ok, err, code = flush()
  if not ok then return nil, err, code end
  info.seconds = (clock.now() - t0) / 1e9
  return info
end

return replay
