--- Shared by the installed-agent solvers (lua/solvers/shared/agents.lua): a coding-agent CLI from npm,
--- pinned in lua/solvers/installed/package-lock.json and installed on the host by `make
--- deps-agents`, is uploaded into the sandbox (once per sandbox: a sandbox made from a warm artifact
--- that holds it already skips the upload), run there against the solver's endpoint (through the
--- run's model proxy, lua/cseng/evals/proxy.lua, so the sandbox never holds the key), and its
--- output converted to ATIF (lua/cseng/evals/atif.lua). Not a solver by itself.
local archive = require('cseng.archive')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local prices = require('cseng.evals.prices')
local atif = require('cseng.evals.atif')
local crypto = require('cseng.crypto')
local pack = require('solvers.installed.pack')

-- a helper of the solvers in lua/solvers/ (shared/: not one `--solver` names)
local installed = { name = 'installed', description = 'helpers of the installed-agent solvers (lua/solvers/shared/agents.lua)' }

--- Where `make deps-agents` installs the CLIs.
installed.NODE_MODULES = sys.root() .. '/lua/solvers/installed/node_modules'

--- Where agents live in the sandbox.
installed.PREFIX = '/cseng/agents'

local tars = {} -- agent name and version -> tar bytes, packed once per process

--- The host path of an installed file, or an ECONFIG error naming `make deps-agents`.
---@param rel string path below node_modules
function installed.host_file(rel)
  local p = installed.NODE_MODULES .. '/' .. rel
  if not fs.exists(p) then
    errors.raise(errors.ECONFIG, string.format('%s is not installed: run `make deps-agents` (pinned in ' ..
      'lua/solvers/installed/package-lock.json)', p), { stage = 'solve' })
  end
  return p
end

--- The archive entries of a host folder below node_modules (`rel`), placed at `as` in the agent's
--- folder: its files with their modes, its folders and links (an agent shipped as a tree: a
--- runtime and its bundle).
---@param rel string
---@param as string
function installed.tree(rel, as)
  local root = installed.host_file(rel)
  local out = { { path = as, type = 'dir' } }
  for _, e in ipairs(fs.walk(root)) do
    local p = as .. '/' .. e.path
    if e.type == 'dir' then out[#out + 1] = { path = p, type = 'dir' }
    elseif e.type == 'link' then out[#out + 1] = { path = p, type = 'symlink', target = fs.readlink(root .. '/' .. e.path) }
    else out[#out + 1] = { path = p, file = root .. '/' .. e.path, mode = string.format('%04o', (e.mode or 420) & 4095) } end
  end
  return out
end

--- Make `<PREFIX>/<name>/<bin>` exist in the sandbox: `entries` are archive entries relative to
--- `<PREFIX>/<name>`, present when `<PREFIX>/<name>/<bin>` is executable. Returns "present" or
--- "uploaded", the target, and for a shipped archive (installed.ship) what was shipped. A provider
--- on this machine gets the files as one uncompressed tar; a remote one (ctx.remote) or one whose
--- requests are capped (ctx.max_upload_bytes) gets the cached tar.gz of installed.ship, in parts
--- under the cap.
---@param ctx SolveContext
---@param name string
---@param entries table[]
---@param bin string its name in the sandbox
---@param version? string the pinned package version (names the cached archive)
function installed.ensure_files(ctx, name, entries, bin, version)
  local dir = installed.PREFIX .. '/' .. name
  local target = dir .. '/' .. bin
  local res = ctx:exec('test -x ' .. util.shell_quote(target), { cwd = '/', timeout = 30 })
  if res and res.code == 0 then return 'present', target end
  if ctx.remote or ctx.max_upload_bytes then
    local shipped = installed.ship(ctx, name, version or '', entries)
    return 'uploaded', target, shipped
  end
  local key = name .. '\0' .. (version or '')
  local tar = tars[key]
  if not tar then
    local err, code
    tar, err, code = archive.pack(entries, { format = 'tar' })
    if not tar then errors.raise(code or errors.EPREPARE, 'packing ' .. name .. ': ' .. tostring(err), { stage = 'solve' }) end
    tars[key] = tar
  end
  errors.check({ stage = 'solve', prefix = 'uploading ' .. name .. ': ' }, ctx:put(dir, tar))
  return 'uploaded', target
end

-- Room left in an upload for the part's tar header and end blocks and the request's own framing
-- (multipart headers and boundaries).
installed.UPLOAD_OVERHEAD = 64 * 1024

--- The size of each part an archive of `size` bytes is split into under a cap of `max_upload`
--- bytes per upload (nil: one part), and how many parts that makes.
function installed.part_size(size, max_upload)
  if not max_upload then return math.max(size, 1), 1 end
  local part = max_upload - installed.UPLOAD_OVERHEAD
  if part < 64 * 1024 then
    errors.raise(errors.ECONFIG, string.format('the provider\'s upload cap of %d bytes leaves no room for an archive part '
      .. '(at least %d bytes)', max_upload, 64 * 1024 + installed.UPLOAD_OVERHEAD), { stage = 'solve' })
  end
  return part, math.max(1, (size + part - 1) // part)
end

-- archive path -> {bytes (verified against the manifest), hashes = {[part size] = each part's sha256}}:
-- read and hashed once per process, not per trial
local archives = {}

--- Ship files of the host's npm tree into `<PREFIX>/<name>` of a remote sandbox: the cached
--- deterministic tar.gz (solvers.installed.pack; packed once, in a child process) split into
--- parts of at most ctx.max_upload_bytes per upload (each part a one-entry tar put into
--- `<PREFIX>/.ship-<name>`), then in the sandbox each part's sha256 and the joined archive's are
--- checked against the host's before it is unpacked; a mismatch is EPREPARE naming the part.
--- Returns {archive, sha256, bytes, parts, part_bytes, cache = "packed" | "reused"}.
function installed.ship(ctx, name, version, entries)
  local p = pack.get { name = name, version = version, entries = entries,
    dir = pack.dir(ctx.getenv) }
  local sh = archives[p.path]
  if not sh then
    local bytes = fs.read(p.path)
    if not bytes or crypto.sha256_hex(bytes) ~= p.sha256 then
      errors.raise(errors.EPREPARE, string.format('%s: the cached archive %s does not match its manifest (sha256 %s): '
        .. 'remove it to pack again', name, p.path, p.sha256), { stage = 'solve' })
    end
    sh = { bytes = bytes, hashes = {} }
    archives[p.path] = sh
  end
  local bytes = sh.bytes
  local part, n = installed.part_size(#bytes, ctx.max_upload_bytes)
  local want = sh.hashes[part]
  if not want then
    want = {}
    for i = 1, n do want[i] = crypto.sha256_hex(bytes:sub((i - 1) * part + 1, i * part)) end
    sh.hashes[part] = want
  end
  local file = string.format('%s-%s.tar.gz', name, p.sha256:sub(1, 12))
  local ship = installed.PREFIX .. '/.ship-' .. name
  local names = {}
  for i = 1, n do
    local piece = bytes:sub((i - 1) * part + 1, i * part)
    names[i] = string.format('%s.part-%03d', file, i)
    local tar = assert(archive.pack({ { path = names[i], data = piece, mode = '0644' } }, { format = 'tar' }))
    errors.check({ stage = 'solve', prefix = string.format('uploading %s part %d of %d (%s): ', name, i, n, names[i]) },
      ctx:put(ship, tar))
  end
  local q = util.shell_quote
  local quoted = {}
  for i, nm in ipairs(names) do quoted[i] = q(nm) end
  local list = table.concat(quoted, ' ')
  local res = errors.check({ stage = 'solve', prefix = 'checking ' .. name .. '\'s parts: ' }, ctx:exec(string.format(
    'cd %s && sha256sum %s && cat %s > %s && rm -f %s && sha256sum %s', q(ship), list, list, q(file), list, q(file)),
    { cwd = '/', timeout = 600 }))
  local got = {}
  for hex, nm in tostring(res.stdout):gmatch('(%x+)  ([^\n]+)') do got[nm] = hex end
  for i, nm in ipairs(names) do
    if got[nm] ~= want[i] then
      errors.raise(errors.EPREPARE, string.format('%s: part %d of %d (%s, %d bytes) arrived with sha256 %s, want %s', name, i, n,
        nm, math.min(part, #bytes - (i - 1) * part), tostring(got[nm] or 'none: ' .. util.trim(tostring(res.stderr))), want[i]),
        { stage = 'solve' })
    end
  end
  if res.code ~= 0 or got[file] ~= p.sha256 then
    errors.raise(errors.EPREPARE, string.format('%s: the joined archive %s has sha256 %s, want %s%s', name, file,
      tostring(got[file]), p.sha256, res.code ~= 0 and (' (' .. util.trim(tostring(res.stderr)) .. ')') or ''), { stage = 'solve' })
  end
  local dir = installed.PREFIX .. '/' .. name
  res = errors.check({ stage = 'solve', prefix = 'unpacking ' .. name .. ': ' }, ctx:exec(string.format(
    'mkdir -p %s && tar -xzf %s/%s -C %s && rm -rf %s', q(dir), q(ship), q(file), q(dir), q(ship)), { cwd = '/', timeout = 600 }))
  if res.code ~= 0 then
    errors.raise(errors.EPREPARE, name .. ': unpacking ' .. file .. ' in the sandbox: ' .. util.trim(tostring(res.stderr)),
      { stage = 'solve' })
  end
  return { archive = file, sha256 = p.sha256, bytes = #bytes, parts = n, part_bytes = part,
    cache = p.cached and 'reused' or 'packed' }
end

--- Whether the model endpoint `url` answers a TCP connect from inside the sandbox (bash's
--- /dev/tcp, 10 s at most). Returns true, or nil and why (the shell's message).
function installed.reachable(ctx, url)
  local scheme, rest = tostring(url):match('^(%a[%w+.-]*)://([^/?#]+)')
  if not scheme then return nil, 'not a URL' end
  rest = rest:gsub('^.*@', '')
  local host, port = rest:match('^%[([^%]]+)%]:?(%d*)$')
  if not host then host, port = rest:match('^([^:]+):?(%d*)$') end
  if not host then return nil, 'no host in the URL' end
  if port == '' then port = scheme:lower() == 'https' and '443' or '80' end
  local res, err = ctx:exec(string.format('timeout 10 bash -c \'exec 3<>"$1"\' cseng-reachable %s',
    util.shell_quote('/dev/tcp/' .. host .. '/' .. port)), { cwd = '/', timeout = 30 })
  if not res then return nil, tostring(err) end
  if res.code == 0 then return true end
  local why = util.trim(tostring(res.stderr))
  if why == '' then why = res.code == 124 and 'no answer within 10 s' or ('exit ' .. tostring(res.code)) end
  return nil, why, host .. ':' .. port
end

--- Write a file into the sandbox (a one-entry tar).
function installed.write(ctx, dir, name, data, mode)
  local tar = assert(archive.pack({ { path = name, data = data, mode = mode or '0644' } }, { format = 'tar' }))
  errors.check({ stage = 'solve', prefix = 'writing ' .. dir .. '/' .. name .. ': ' }, ctx:put(dir, tar))
end

--- A new trajectory (the instruction as its user step) and an empty usage record for a CLI's run.
---@param meta {session_id: string, model: string, instruction: string}
---@return table tr, table usage
function installed.start(provider, agent_name, version, cli, meta)
  local tr = atif.new { session_id = meta.session_id, agent = { name = agent_name, version = version, extra = { cli = cli } },
    model_name = meta.model }
  tr:user(meta.instruction)
  local usage = { provider = provider, model = meta.model, turns = 0, tool_calls = 0, commands = 0, prompt_tokens = 0,
    completion_tokens = 0, total_tokens = 0, cached_tokens = 0, cache_creation_tokens = 0, reasoning_tokens = 0,
    events = 0, stop_reason = 'incomplete' }
  return tr, usage
end

--- Add per-request usage records ({input, cached, cache_creation, output}, keyed by request) to a
--- session's usage totals (the CLIs' own per-request figures, when no session total was seen).
function installed.add_records(usage, records)
  for _, r in pairs(records) do
    usage.prompt_tokens = usage.prompt_tokens + r.input
    usage.cached_tokens = usage.cached_tokens + r.cached
    usage.cache_creation_tokens = usage.cache_creation_tokens + r.cache_creation
    usage.completion_tokens = usage.completion_tokens + r.output
  end
end

--- The solver's check (before any sandbox): its configuration, and the CLI installed on the host.
---@param def {config: function, BINARY: string}
function installed.check(def, options, getenv)
  local cfg, err, code = def.config(options or {}, getenv)
  if not cfg then return nil, err, code end
  secrets.add(cfg.api_key)
  installed.host_file(def.BINARY)
  return true
end

--- Price the session's tokens (usage: prompt/cached/cache_creation/completion tokens) and make
--- them the metrics of the trajectory's last agent step: the CLIs report usage per session (or
--- turn), not per request, so no other step has metrics. A model the price table does not know
--- keeps `agent_cost_usd` (what the CLI computed, source "agent") when there is one.
---@param tr table the ATIF builder
---@param last table|nil the last agent step
---@param scope string what the totals cover ("codex turn", "claude session")
function installed.account(ctx, tr, last, usage, model, scope)
  local price, psrc = prices.lookup(ctx.options, ctx.getenv, model)
  if usage.counted_by == 'proxy' then
    scope = scope .. ', counted by the model proxy' -- the cost is the proxy's, answer by answer
  elseif price then
    usage.cost_usd = prices.cost({ input = usage.prompt_tokens, cached = usage.cached_tokens,
      cache_creation = usage.cache_creation_tokens, output = usage.completion_tokens }, price)
    usage.cost_source, usage.price_source = 'prices', psrc
  elseif usage.agent_cost_usd then
    usage.cost_usd, usage.cost_source = usage.agent_cost_usd, 'agent'
  else
    usage.cost_source = 'unknown'
  end
  for _, st in ipairs(tr.doc.steps) do st.metrics = nil end
  if usage.stop_reason ~= 'incomplete' then
    last = last or tr:agent { message = '' }
    last.metrics = { prompt_tokens = usage.prompt_tokens, completion_tokens = usage.completion_tokens,
      cached_tokens = usage.cached_tokens, cost_usd = usage.cost_usd, extra = { reasoning_tokens = usage.reasoning_tokens,
        cache_creation_input_tokens = usage.cache_creation_tokens, cost_source = usage.cost_source, scope = scope } }
  end
end

--- The solver's result from the CLI's exec result.
function installed.result(name, res, usage, doc)
  return {
    return_code = res.code, stdout = res.stdout, stderr = res.stderr, elapsed = usage.elapsed_seconds,
    timed_out = res.timed_out or nil, note = name .. ' ' .. usage.stop_reason, usage = usage, trajectory = doc,
  }
end

--- Where the CLI sends its model requests, and with what: through the run's model proxy
--- (ctx.model_proxy, lua/cseng/evals/proxy.lua: the sandbox gets the proxy's base URL and a token
--- of this trial, the real key stays on the host) or, when the run places the key in the sandbox
--- (`--model-key sandbox`, or a provider whose sandboxes cannot reach the proxy), the endpoint and
--- the key themselves. Returns the configuration the sandbox sees ({base_url, api_key, model}) and
--- the grant (nil without the proxy).
---@param api string the proxy's API name ("openai" | "anthropic")
function installed.route(ctx, cfg, api)
  if not ctx.model_proxy then return cfg, nil end
  local grant = ctx.model_proxy.grant { api = api, upstream = cfg.base_url, api_key = cfg.api_key, model = cfg.model,
    options = ctx.options, getenv = ctx.getenv }
  return { base_url = grant.base_url, api_key = grant.token, model = cfg.model, upstream = cfg.base_url }, grant
end

-- The CLI's own usage figures, kept beside the proxy's (what the CLI said it spent).
local REPORTED = { 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_creation_tokens', 'reasoning_tokens',
  'agent_cost_usd' }

--- The proxy's counts become the trial's usage: tokens and cost from the answers themselves; the
--- CLI's own figures are kept as `agent_reported`.
function installed.counted(usage, pu)
  local rep = {}
  for _, k in ipairs(REPORTED) do rep[k] = usage[k] end
  usage.agent_reported = rep
  for k, v in pairs(pu) do
    if k ~= 'ceiling_stop' then usage[k] = v end
  end
  usage.agent_cost_usd = nil
end

--- The solve of an installed-agent solver `solver` (its config, install and convert): the config
--- (ECONFIG when incomplete), the model route (installed.route: the run's proxy, or the key in the
--- sandbox), the CLI's upload, `o.prepare(scfg)` (files besides the prompt), the instruction in
--- PREFIX/prompt.md, then `o.command(scfg)` run with `o.env(scfg)` over the task's agent_env, where
--- `scfg` is what the sandbox may know ({base_url, api_key, model}: through the proxy, its URL
--- and this trial's token). Its stdout converted to ATIF; through the proxy, the tokens and cost
--- are the proxy's counts of the answers (installed.counted), else the CLI's figures priced
--- (installed.account, `o.scope`); the trajectory's notes `o.notes`. The grant is revoked when the
--- solve ends, on every path. A request the proxy refused at the run's spend ceiling makes the
--- trial's stop_reason `max_cost`.
---@param o {name:string, api:string, command:fun(cfg:table):string, env:fun(cfg:table):table, prepare:fun(cfg:table)|nil,
---  scope:string, notes:string}
function installed.run(ctx, solver, o)
  local cfg, err, code = solver.config(ctx.options or {}, ctx.getenv)
  if not cfg then errors.raise(code or errors.ECONFIG, err, { stage = 'solve' }) end
  secrets.add(cfg.api_key)
  local t0 = clock.now()
  local scfg, grant = installed.route(ctx, cfg, o.api)
  -- the token opens nothing once the solve is over, however it ends
  local _ <close> = grant and setmetatable({}, { __close = function() grant.revoke() end }) or nil
  -- before anything is shipped: an agent whose endpoint the sandbox cannot reach would only time out
  local reach, why, hostport = installed.reachable(ctx, scfg.base_url)
  if not reach then
    if grant then
      errors.raise(errors.ENONETWORK, string.format('%s: the cseng model proxy %s (%s, for the model endpoint %s) cannot be '
        .. 'reached from inside the sandbox: %s; the sandbox has no network access to it (an offline sandbox, or a provider '
        .. 'that does not give it the spec\'s host_ports; --model-key sandbox places the real key in the sandbox instead)',
        o.name, scfg.base_url, tostring(hostport or scfg.base_url), cfg.base_url, why), { stage = 'solve' })
    end
    errors.raise(errors.ENONETWORK, string.format('%s: the model endpoint %s (%s) cannot be reached from inside the sandbox: %s; '
      .. 'the sandbox has no network access to it (an offline sandbox, or an endpoint only on the host\'s loopback)',
      o.name, cfg.base_url, tostring(hostport or cfg.base_url), why), { stage = 'solve' })
  end
  local install, _, shipped = solver.install(ctx)
  if o.prepare then o.prepare(scfg) end
  installed.write(ctx, installed.PREFIX, 'prompt.md', ctx.task.instruction or '')
  local xopts = { timeout = tonumber(ctx.timeout) or 900, tail_bytes = 8 * 1024 * 1024,
    env = util.merge(ctx.task.config.agent_env, o.env(scfg)) }
  local res, xerr, xcode = ctx:exec(o.command(scfg), xopts)
  if not res then
    errors.raise(xcode or errors.EEXEC, o.name .. ': running the CLI in the sandbox: ' .. tostring(xerr), { stage = 'solve' })
  end
  local tr, usage, last = solver.convert(res.stdout or '', { session_id = ctx.session_id or tostring(ctx.task.id),
    model = cfg.model, instruction = ctx.task.instruction or '' })
  if res.timed_out then usage.stop_reason = 'timeout' end
  usage.model_key = grant and 'proxy' or 'sandbox'
  local pu
  if grant then
    grant.revoke()
    pu = grant.usage()
    installed.counted(usage, pu)
    if pu.ceiling_stop then usage.stop_reason = 'max_cost' end
  end
  if ctx.budget then
    -- how the run's ceiling applied to this CLI: before each of its model requests (the proxy), or between trials only
    usage.ceiling = (not grant and 'between trials (the real key is in the sandbox: no proxy sees the requests)')
      or ((pu.responses > 0 and pu.cost_source == 'unknown') and 'between trials (the model has no price)')
      or 'between requests'
  end
  usage.install, usage.shipped, usage.exit_code = install, shipped, res.code
  installed.account(ctx, tr, last, usage, cfg.model, o.scope)
  usage.elapsed_seconds = (clock.now() - t0) / 1e9
  local doc = tr:finish({ stop_reason = usage.stop_reason, exit_code = res.code })
  doc.notes = o.notes .. (grant and ' Tokens and cost: counted by the cseng model proxy from the API\'s answers.' or '')
  local r = installed.result(o.name, res, usage, doc)
  if usage.stop_reason == 'max_cost' then r.note = o.name .. ' stopped: the run\'s spend ceiling (--max-cost-usd)' end
  return r
end

--- A solver over an installed agent never works without its endpoint: solve() says which to use.
function installed.solve()
  errors.raise(errors.ECONFIG, "'installed' holds the installed-agent helpers: use --solver codex, claude_code, opencode or gemini_cli", { stage = 'solve' })
end

return installed
