--- The adapter contract: the whole interface between the core (lua/cseng/, lua/solvers/, plans/,
--- lua/reports/) and a provider adapter (lua/providers/<name>.lua). Every field, function,
--- capability, limit and exec option the core uses of an adapter is listed here with its meaning,
--- and an adapter's table holds these names and nothing else: what a spec needs of an adapter's
--- internals lives in a sibling module under lua/providers/shared/ named by subject
--- (<vendor>_wire.lua: request and response shapes; <vendor>_build.lua: its image or template
--- build), which the spec requires itself. An adapter defines its functions in the order of
--- contract.FUNCTIONS.
---
--- docs/providers/README.md prints the same lists (spec/providers/shared/contract_spec.lua compares them);
--- `cseng providers` reports what contract.check finds; spec/providers/shared/contract_spec.lua runs every adapter
--- (and docs/providers/skeleton.lua) through it.
local flags = require('cseng.lib.flags')
local contract = {}

local function size(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local function is_list_of_strings(v)
  if type(v) ~= 'table' or size(v) ~= #v or #v == 0 then return false end
  for _, s in ipairs(v) do if type(s) ~= 'string' or s == '' then return false end end
  return true
end

local function non_negative(v) return type(v) == 'number' and v >= 0 end
local function positive_int(v) return math.tointeger(v) ~= nil and v >= 1 end

-- ---- sandbox ids ---------------------------------------------------------------------------
-- A sandbox id read back from a log or a shard (cleanup, --resume, cseng merge) comes from
-- another machine: it becomes a URL path segment, a directory (local) or a Docker API path only
-- once it has passed valid_id. Every adapter declares its ids' format (id_format); on top of it,
-- no id may hold what changes the meaning of a path or URL, whatever an adapter declares.

--- The longest sandbox id accepted (as session.MAX_ID_BYTES bounds what create may answer).
contract.MAX_ID_BYTES = 512

--- The format assumed for an adapter that declares none (an adapter object made by a spec):
--- letters, digits and `_ . : -`, beginning with a letter or digit.
contract.GENERIC_ID = { pattern = '^[%w][%w_.:-]*$', example = 'sb-0123456789' }

--- Ids no format may accept (contract_spec checks every adapter against them).
contract.HOSTILE_IDS = { '', '.', '..', '../x', '../../victim', 'a/b', '/abs', 'a\\b', 'a..b', 'a?b', 'a#b', 'a%2fb',
  '%2e%2e', 'a b', 'a\tb', 'a\nb', 'a\rb', 'a\0b', 'a\27[2Jb', '-rf', 'a&b=c' }

-- Why an id is refused whatever the adapter declares, or nil.
local function universal(id)
  if #id == 0 then return 'is empty' end
  if #id > contract.MAX_ID_BYTES then return string.format('is %d bytes long (at most %d)', #id, contract.MAX_ID_BYTES) end
  if id:find('[%c]') then return 'contains a control character' end
  if id:find('%s') then return 'contains white space' end
  if id:find('[/\\]') then return 'contains a path separator' end
  if id:find('..', 1, true) then return 'contains ..' end
  if id:find('[%%?#&=]') then return 'contains a URL delimiter (% ? # & =)' end
  if not id:find('^%w') then return 'does not begin with a letter or digit' end
  return nil
end

local function check_id_format(v)
  if type(v.pattern) ~= 'string' or v.pattern:sub(1, 1) ~= '^' or v.pattern:sub(-1) ~= '$' or v.pattern:sub(-2) == '%$' then
    return 'pattern must be a Lua pattern anchored at both ends (^...$)'
  end
  if type(v.example) ~= 'string' then return 'example must be a string (an id of the provider\'s own)' end
  if v.max ~= nil and (math.tointeger(v.max) == nil or v.max < 1) then return 'max must be an integer >= 1' end
  local ok, m = pcall(string.find, v.example, v.pattern)
  if not ok then return 'pattern is not a valid Lua pattern: ' .. tostring(m) end
  if not m or (v.max and #v.example > v.max) then return string.format('example %q does not match its pattern', v.example) end
  local why = universal(v.example)
  if why then return string.format('example %q %s', v.example, why) end
end

-- ---- capabilities, limits, exec options ----------------------------------------------------

--- The keys of `capabilities` (each a boolean): {name, meaning}.
contract.CAPABILITIES = {
  { 'non_root', 'exec runs `user = "verifier"` as a non-root user (uid 1000): the verifier runs as it, else as root '
    .. '(lua/cseng/run/runner.lua)' },
  { 'host_ports', 'create honours spec.host_ports (127.0.0.1:PORT of the host reachable inside); when absent, an adapter '
    .. 'that is not remote is taken to, a remote one only when its endpoint is loopback (lua/cseng/agent/proxy.lua)' },
  { 'exec_stream', 'exec honours opts.on_output (the output streamed as it comes; returning false stops the command)' },
  { 'network_policy', 'informative: a sandbox created with network = false has no network' },
  { 'run_steps', 'informative: the environment\'s RUN steps are applied (built or replayed)' },
  { 'warm', 'informative: warm mode works (snapshot)' },
  -- the arena's primitives (lua/cseng/run/workloads/): what an adapter claims here it must really do,
  -- and contract.check refuses a claim whose functions are missing
  { 'snapshot', 'the arena\'s snapshot workload: snapshot(client, sb, key, {fresh = true}) makes a new artifact of a running '
    .. 'sandbox, create with spec.warm_artifact restores it (holding the files written before), delete_artifact removes it' },
  { 'pause', 'pause(client, sb) stops a sandbox and resume(client, sb) brings it back with the files written before' },
  { 'pause_memory', 'with pause: a process started before pause runs on after resume (the vendor documents memory kept)' },
  { 'fork', 'fork(client, sb, n, spec) makes n sandboxes holding sb\'s files as they were at the call; sb runs on' },
  { 'bulk_upload', 'write_files(client, sb, files) carries many files in one request (the provider\'s bulk upload)' },
  { 'egress', 'the arena\'s egress workload: a sandbox made with network = true reaches hosts outside over HTTP(S), and '
    .. 'its image has curl or python3 (where network_policy is a function, the workload allows it the one host)' },
  { 'standard', 'the arena\'s standard workload: the sandbox\'s image has git, make and a C compiler (cc), to clone, '
    .. 'build and test the bundled repository (data/workloads/standard/)' },
}

--- What each capability of the arena's primitives needs of the adapter's functions.
contract.CAPABILITY_NEEDS = {
  snapshot = { 'snapshot', 'delete_artifact' }, pause = { 'pause', 'resume' }, pause_memory = { 'pause', 'resume' },
  fork = { 'fork' }, bulk_upload = { 'write_files' },
}

--- The keys of `limits`: {name, meaning, check(v) -> why|nil}.
contract.LIMITS = {
  { 'creates_per_minute', 'creates the service allows per minute: admission paces the run\'s creates to it '
    .. '(lua/cseng/run/admission.lua)', function(v) if type(v) ~= 'number' or v <= 0 then return 'must be a number > 0' end end },
  { 'max_creates_in_flight', 'creates the service allows at once: admission\'s bound on creates in flight',
    function(v) if not positive_int(v) then return 'must be an integer >= 1' end end },
  { 'max_upload_bytes', 'the most one put may carry: larger files go in parts (lua/solvers/shared/installed.lua); the client\'s '
    .. 'max_upload_bytes, when set, wins', function(v) if not positive_int(v) then return 'must be an integer >= 1' end end },
}

--- The options of exec(client, sb, cmd, opts): {name, meaning}.
contract.EXEC_OPTIONS = {
  { 'cwd', 'the working directory (the task\'s workdir when not given)' },
  { 'env', 'variables added to the sandbox\'s environment' },
  { 'user', '"root" or "verifier" (capabilities.non_root)' },
  { 'timeout', 'seconds: the command is killed when it expires, and the result says timed_out' },
  { 'stdin', 'bytes given to the command\'s standard input' },
  { 'tail_bytes', 'how much of stdout and stderr to keep (their tails)' },
  { 'on_output', 'fn(chunk, "stdout"|"stderr") called as output arrives; returning false stops the command (result.stopped); '
    .. 'only with capabilities.exec_stream' },
}

--- What the core reads of the sandbox create returns (beyond the adapter's own fields, which
--- only the adapter reads): {name, meaning}.
contract.SANDBOX = {
  { 'id', 'required: the sandbox id (matching id_format); the allocation record is written the moment it is known' },
  { 'labels', 'the labels it carries (list and cleanup compare them)' },
  { 'image', 'the image it runs, recorded' },
  { 'created', 'Unix seconds (list\'s entries: cseng cleanup --older-than)' },
  { 'allocation', 'what the service gave it ({cpus, memory_mb, region, ...}): the startup arena records it' },
  { 'http_timings', 'the create call\'s HTTP timings (the startup arena splits them into phases)' },
  { 'limits', 'the resource limits the sandbox runs under (local): recorded' },
  { 'hits_seen', 'the limits its commands ran into so far ({memory, pids}; local): recorded as limit_hits' },
  { 'code_path', 'the API or code path the sandbox was made and is driven through (the arena\'s audit records it)' },
}

--- What the core reads of exec's result: {name, meaning}.
contract.EXEC_RESULT = {
  { 'code', 'the exit status (a timeout is a result, not a failure)' },
  { 'stdout', 'its standard output (a tail)' },
  { 'stderr', 'its standard error (a tail; some services combine it into stdout)' },
  { 'timed_out', 'true when opts.timeout killed it' },
  { 'elapsed', 'seconds it ran' },
  { 'stdout_dropped', 'bytes of stdout not kept' },
  { 'stderr_dropped', 'bytes of stderr not kept' },
  { 'stopped', 'true when on_output stopped it' },
  { 'limit_hits', 'the sandbox limits it ran into ({memory, pids})' },
  { 'http_timings', 'the call\'s HTTP timings (the startup arena)' },
}

--- What the core reads of the client connect returns (otherwise opaque): {name, meaning}.
contract.CLIENT = {
  { 'max_upload_bytes', 'the most one put may carry, as configured (wins over limits.max_upload_bytes)' },
  { 'base', 'the service\'s URL (or base_url, api_url, url, endpoint, server_url, a key ending in url, in the client or a '
    .. 'table in it; an endpoint_url(client) function; socket for a unix socket): the run records the endpoint, never a '
    .. 'credential (lua/cseng/run/frame.lua)' },
}

local function check_named(v, list, what, check_value)
  local known = {}
  for _, e in ipairs(list) do known[e[1]] = e end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if not known[k] then return k .. ' is not a ' .. what .. ' of the contract' end
    local why = check_value(known[k], v[k])
    if why then return k .. ' ' .. why end
  end
end

local function check_prewarm_flags(v)
  local names = {}
  for k in pairs(v) do names[#names + 1] = tostring(k) end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = v[name]
    if not name:match('^[a-z][a-z0-9-]*$') then return string.format('%q must be a flag name (lower case, digits, -)', name) end
    if type(s) ~= 'table' then return name .. ' must be a table (lua/cseng/lib/flags.lua\'s spec: key, type, arg, help)' end
    if type(s.key) ~= 'string' or not s.key:match('^[%a_][%w_]*$') or s.key == 'log' then
      return name .. '.key must be a Lua name other than log (prewarm_image reads o[key])'
    end
    if not flags.TYPES[s.type] then return name .. '.type must be one of string, int, number, bool, list, multi' end
    if type(s.help) ~= 'string' or s.help == '' then return name .. '.help must be a non-empty string' end
    if s.arg ~= nil and type(s.arg) ~= 'string' then return name .. '.arg must be a string' end
  end
end

-- ---- fields and functions ------------------------------------------------------------------

-- Each field: {name, type, required, default (a value or fn(P, module_name)), check (fn(v, P) ->
-- why|nil), doc}.
contract.FIELDS = {
  { 'name', 'string', default = function(_, module) return (module or ''):gsub('_', '-') end,
    doc = 'the name records carry as provider (default: the file\'s name, _ as -)' },
  { 'description', 'string', required = true, doc = 'one line for cseng providers; the runtime when there is no runtime()',
    check = function(v) if v == '' or v:find('\n') then return 'must be one non-empty line' end end },
  { 'credentials', 'table', required = true, doc = 'the variables it needs: each a name, or a list of alternative names',
    check = function(v)
      for i, c in ipairs(v) do
        if not (type(c) == 'string' and c ~= '') and not is_list_of_strings(c) then
          return string.format('entry %d must be a variable name or a list of alternative names', i)
        end
      end
      if size(v) ~= #v then return 'must be a list' end
    end },
  { 'rates', 'table', default = { vcpu_s = 0, gib_s = 0, per_create = 0 }, doc = '{vcpu_s, gib_s, per_create} in USD: the cost estimate',
    check = function(v)
      for _, k in ipairs({ 'vcpu_s', 'gib_s', 'per_create' }) do
        if v[k] ~= nil and not non_negative(v[k]) then return k .. ' must be a number >= 0' end
      end
    end },
  { 'capabilities', 'table', default = {}, doc = 'booleans of contract.CAPABILITIES',
    check = function(v, P)
      return check_named(v, contract.CAPABILITIES, 'capability', function(e, x)
        if type(x) ~= 'boolean' then return 'must be a boolean' end
        -- a primitive is claimed only with the functions that do it
        for _, fn in ipairs(x and contract.CAPABILITY_NEEDS[e[1]] or {}) do
          if type(P[fn]) ~= 'function' then return 'is claimed without ' .. fn .. ' (a function)' end
        end
        if x and e[1] == 'pause_memory' and v.pause ~= true then return 'needs capabilities.pause' end
      end)
    end },
  { 'limits', 'table', doc = 'what the service allows, of contract.LIMITS',
    check = function(v)
      return check_named(v, contract.LIMITS, 'limit', function(e, x) return e[3](x) end)
    end },
  -- what its sandbox ids look like: {pattern = '^...$' (a Lua pattern), example = an id, max = bytes?}
  { 'id_format', 'table', required = true, check = check_id_format,
    doc = '{pattern, example, max}: what its sandbox ids look like; an id read back is used only once it matches' },
  { 'remote', 'boolean', default = false, doc = 'a network service (the startup arena pauses between rounds; host_ports)' },
  { 'version', 'string', doc = 'the adapter\'s version (the startup arena records it)' },
  { 'max_concurrency', 'number', doc = 'at most this many of its sandboxes at once: the session queues creates beyond it',
    check = function(v) if not positive_int(v) then return 'must be an integer >= 1' end end },
  { 'list_by_label', 'boolean', default = true, doc = 'false: list cannot filter by label (lost creates cannot be found)' },
  { 'applies_dockerfile', 'boolean', default = false, doc = 'informative: whether the task\'s Dockerfile makes the environment' },
  { 'replay', 'boolean', doc = 'false: without build, the recipe\'s RUN steps are not replayed (env_mode host)' },
  { 'image_map', 'table', default = {}, doc = 'its own base-image substitutions (after --image-map, before recipe.DEFAULT_IMAGE_MAP)' },
  { 'artifact_env', 'string', doc = 'the variable cseng prewarm prints one artifact as (DOCKER_IMAGE_ID=...)' },
  { 'prewarm_flags', 'table', doc = 'the flags of cseng prewarm --provider NAME (lua/cseng/lib/flags.lua\'s spec): their values '
    .. 'go to prewarm_image as o[key]', check = function(v, P)
      if type(P.prewarm_image) ~= 'function' then return 'needs prewarm_image (the flags are its options)' end
      return check_prewarm_flags(v)
    end },
}

-- Functions, in the order an adapter defines them: required ones are called by every run kind;
-- optional ones change behaviour when there. {name, required, sig, doc}.
contract.FUNCTIONS = {
  { 'connect', required = true, sig = 'connect(cfg) -> client', doc = 'read the settings and credentials; once per run' },
  { 'create', required = true, sig = 'create(client, spec) -> sb | nil, msg, CODE', doc = 'a new sandbox' },
  { 'network_policy', sig = 'network_policy(client, sb, {mode, hosts}) -> {enforced, allowed, unenforced} | nil, why',
    doc = 'a phase\'s network (Harbor\'s network_mode / allowed_hosts) on a live sandbox; without it the run records the gap' },
  { 'exec', required = true, sig = 'exec(client, sb, cmd, opts) -> result | nil, msg, CODE',
    doc = 'run a shell command (options: contract.EXEC_OPTIONS)' },
  { 'put', required = true, sig = 'put(client, sb, dir, tar) -> true | nil, msg, CODE', doc = 'unpack a tar or tar.gz into dir' },
  { 'get', required = true, sig = 'get(client, sb, path) -> bytes | nil, msg, CODE', doc = 'a file\'s contents (ENOENT when missing)' },
  { 'destroy', required = true, sig = 'destroy(client, sb) -> true | nil, msg, CODE [, res]',
    doc = 'idempotent; works from {id, labels} alone' },
  { 'list', required = true, sig = 'list(client, {labels}) -> {{id, labels, created}...}', doc = 'the sandboxes that exist' },
  { 'runtime', sig = 'runtime(client) -> string', doc = 'what runs the sandboxes (run_started.runtime)' },
  { 'build', sig = 'build(client, req) -> result | nil, err, CODE', doc = 'make the environment from the task\'s recipe (native)' },
  { 'env_mode', sig = 'env_mode(client) -> "native" | "replay" | "host"', doc = 'how the environment is made' },
  { 'fidelity_gaps', sig = 'fidelity_gaps(client, task, run) -> {{kind, line, text}...}',
    doc = 'what the environment lacks compared with the task\'s image' },
  { 'snapshot', sig = 'snapshot(client, sb, key, opts) -> artifact | nil, msg, CODE',
    doc = 'warm mode: a prepared sandbox as an artifact (opts.fresh: a new one, never one found by key)' },
  { 'find_artifact', sig = 'find_artifact(client, key, task) -> artifact | nil', doc = 'an artifact made earlier for key' },
  { 'list_artifacts', sig = 'list_artifacts(client) -> {{id, created_at, task_id}...} | nil, msg, CODE',
    doc = 'the warm artifacts it keeps (cseng prewarm --list)' },
  { 'delete_artifact', sig = 'delete_artifact(client, id) -> true | nil, msg, CODE', doc = 'remove one (cseng prewarm --prune)' },
  { 'prewarm_image', sig = 'prewarm_image(client, o) -> id | nil, msg, CODE',
    doc = 'cseng prewarm --provider NAME makes its one runner image instead of per-task artifacts (o: prewarm_flags\' values, log)' },
  { 'write_files', sig = 'write_files(client, sb, files) -> true | nil, msg, CODE',
    doc = 'files ({{path, data, mode}}) through the provider\'s own file API (capabilities.bulk_upload: many per request)' },
  { 'pause', sig = 'pause(client, sb) -> true | nil, msg, CODE', doc = 'stop the sandbox, keeping its state (capabilities.pause)' },
  { 'resume', sig = 'resume(client, sb) -> true | nil, msg, CODE', doc = 'bring a paused sandbox back (capabilities.pause)' },
  { 'fork', sig = 'fork(client, sb, n, spec) -> {sb...} | nil, msg, CODE',
    doc = 'n new sandboxes from sb\'s state now, labelled with spec.labels (capabilities.fork)' },
}

--- Every name an adapter's table may hold (fields and functions), as a set.
---@return table<string, true>
function contract.names()
  local out = {}
  for _, f in ipairs(contract.FIELDS) do out[f[1]] = true end
  for _, f in ipairs(contract.FUNCTIONS) do out[f[1]] = true end
  return out
end

--- The names of contract functions an adapter's source defines at the top level (`function
--- M.x(`, `M.x =`, whatever its table is called), in the order it defines them.
---@param src string
---@return string[]
function contract.defined_order(src)
  local fns = {}
  for _, f in ipairs(contract.FUNCTIONS) do fns[f[1]] = true end
  local out, seen = {}, {}
  for line in (src .. '\n'):gmatch('([^\n]*)\n') do
    local name = line:match('^function%s+[%a_][%w_]*%.([%a_][%w_]*)%s*%(') or line:match('^[%a_][%w_]*%.([%a_][%w_]*)%s*=')
    if name and fns[name] and not seen[name] then
      seen[name] = true
      out[#out + 1] = name
    end
  end
  return out
end

-- The first contract function an adapter's source defines before one that comes earlier in the
-- contract, as a problem line; nil when they are in order.
local function out_of_order(src)
  local order, rank = contract.defined_order(src), {}
  for i, f in ipairs(contract.FUNCTIONS) do rank[f[1]] = i end
  for i = 2, #order do
    if rank[order[i]] < rank[order[i - 1]] then
      return string.format('%s is defined after %s: functions go in the contract\'s order (%s)', order[i],
        order[i - 1], table.concat(order, ', '))
    end
  end
end

--- The violations of the contract by the adapter P (loaded from lua/providers/<module>.lua): a
--- list of one-line strings, empty when it conforms. With its source text, also whether it
--- defines its functions in the contract's order.
---@param P any the module's value
---@param module? string the file's name without .lua
---@param src? string the file's text
---@return string[]
function contract.check(P, module, src)
  if type(P) ~= 'table' then return { 'the file must return a table, not a ' .. type(P) } end
  local out = {}
  for _, f in ipairs(contract.FIELDS) do
    local name, ty, v = f[1], f[2], P[f[1]]
    if v == nil then
      if f.required then out[#out + 1] = name .. ' is required (' .. ty .. ')' end
    elseif type(v) ~= ty then
      out[#out + 1] = string.format('%s must be a %s, not a %s', name, ty, type(v))
    elseif f.check then
      local why = f.check(v, P)
      if why then out[#out + 1] = name .. ' ' .. why end
    end
  end
  for _, f in ipairs(contract.FUNCTIONS) do
    local v = P[f[1]]
    if v == nil and f.required then out[#out + 1] = f[1] .. ' is required (a function)'
    elseif v ~= nil and type(v) ~= 'function' then
      out[#out + 1] = string.format('%s must be a function, not a %s', f[1], type(v))
    end
  end
  if module and P.name ~= nil and type(P.name) == 'string' and P.name ~= module:gsub('_', '-') and P.name ~= module then
    out[#out + 1] = string.format('name %q does not match its file %s.lua (--provider loads it by file)', P.name, module)
  end
  -- an adapter exports its contract and nothing else: an internal a spec needs lives in a
  -- module of lua/providers/shared/, which the spec requires itself
  local known, extra = contract.names(), {}
  for k in pairs(P) do
    if not known[k] then extra[#extra + 1] = tostring(k) end
  end
  table.sort(extra)
  for _, k in ipairs(extra) do
    out[#out + 1] = k .. ' is not a name of the adapter contract (an internal belongs in lua/providers/shared/)'
  end
  out[#out + 1] = src and out_of_order(src) or nil
  return out
end

--- The value of field name of adapter P, its default when absent (nil for fields without one).
---@param P table
---@param name string
---@param module? string
function contract.get(P, name, module)
  local v = P[name]
  if v ~= nil then return v end
  for _, f in ipairs(contract.FIELDS) do
    if f[1] == name then
      if type(f.default) == 'function' then return f.default(P, module) end
      return f.default
    end
  end
  return nil
end

--- Whether id is a sandbox id of adapter P, before any path or URL is built from it (an id
--- read from a log or shard, one a provider's list answered): a string (or an integer) that
--- matches P.id_format (contract.GENERIC_ID when P declares none) and holds nothing that
--- changes what a path or URL means (no control character, white space, `/`, `\`, `..`,
--- `%`, `?`, `#`, `&`, `=`; a letter or digit first). Returns true, or nil and the reason, which
--- names the adapter and an example of its ids.
---@param P table the adapter
---@param id any
---@return true|nil ok
---@return string|nil why
function contract.valid_id(P, id)
  if math.type(id) == 'integer' then id = tostring(id) end
  if type(id) ~= 'string' then return nil, 'is not a string (' .. type(id) .. ')' end
  local why = universal(id)
  if why then return nil, why end
  local f = type(P) == 'table' and type(P.id_format) == 'table' and P.id_format or contract.GENERIC_ID
  local ok, m = pcall(string.find, id, tostring(f.pattern))
  if not ok or not m or (math.tointeger(f.max) and #id > f.max) then
    local name = type(P) == 'table' and type(P.name) == 'string' and P.name or nil
    return nil, string.format('is not %s sandbox id (like %s)', name and ('a ' .. name) or 'a', tostring(f.example))
  end
  return true
end

--- The credential entries of P as lists of alternative names: {{'A'}, {'B_TOKEN', 'B_KEY'}}.
---@param P table
---@return string[][]
function contract.credential_alternatives(P)
  local out = {}
  for _, c in ipairs(type(P.credentials) == 'table' and P.credentials or {}) do
    out[#out + 1] = type(c) == 'table' and c or { c }
  end
  return out
end

return contract
