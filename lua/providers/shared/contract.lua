--- The adapter contract of docs/providers/README.md, executable: which fields and functions an
--- adapter (lua/providers/<name>.lua) must have, of which type, and the defaults of the optional
--- ones. `cseng providers` reports what contract.check finds; spec/contract_spec.lua runs every
--- adapter (and the doc's skeleton, docs/providers/skeleton.lua) through it.
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

-- Each field: type, required, default (a value or fn(P, module_name)), check (fn(v) -> why|nil).
contract.FIELDS = {
  { 'name', 'string', default = function(_, module) return (module or ''):gsub('_', '-') end },
  { 'description', 'string', required = true,
    check = function(v) if v == '' or v:find('\n') then return 'must be one non-empty line' end end },
  { 'credentials', 'table', required = true, check = function(v)
    for i, c in ipairs(v) do
      if not (type(c) == 'string' and c ~= '') and not is_list_of_strings(c) then
        return string.format('entry %d must be a variable name or a list of alternative names', i)
      end
    end
    if size(v) ~= #v then return 'must be a list' end
  end },
  { 'rates', 'table', default = { vcpu_s = 0, gib_s = 0, per_create = 0 }, check = function(v)
    for _, k in ipairs({ 'vcpu_s', 'gib_s', 'per_create' }) do
      if v[k] ~= nil and not non_negative(v[k]) then return k .. ' must be a number >= 0' end
    end
  end },
  { 'capabilities', 'table', default = {} },
  { 'applies_dockerfile', 'boolean', default = false },
  { 'image_map', 'table', default = {} },
  { 'artifact_env', 'string' },
  { 'remote', 'boolean', default = false },
  { 'version', 'string' },
  { 'max_concurrency', 'number', check = function(v)
    if math.tointeger(v) == nil or v < 1 then return 'must be an integer >= 1' end
  end },
  { 'list_by_label', 'boolean', default = true },
  { 'replay', 'boolean' },
  -- what its sandbox ids look like: {pattern = '^...$' (a Lua pattern), example = an id, max = bytes?}
  { 'id_format', 'table', required = true, check = check_id_format },
}

-- Functions: required ones are called by every run kind; optional ones change behaviour when there.
contract.FUNCTIONS = {
  { 'connect', required = true }, { 'create', required = true }, { 'exec', required = true },
  { 'put', required = true }, { 'get', required = true }, { 'destroy', required = true },
  { 'list', required = true },
  { 'runtime' }, { 'build' }, { 'env_mode' }, { 'fidelity_gaps' }, { 'snapshot' }, { 'find_artifact' },
  -- network_policy(client, sb, {mode, hosts}): a phase's network on a live sandbox (Harbor's
  -- network_mode / allowed_hosts), or nil, why: the run records the gap
  { 'network_policy' },
}

--- The violations of the contract by the adapter P (loaded from lua/providers/<module>.lua): a
--- list of one-line strings, empty when it conforms.
---@param P any the module's value
---@param module? string the file's name without .lua
---@return string[]
function contract.check(P, module)
  if type(P) ~= 'table' then return { 'the file must return a table, not a ' .. type(P) } end
  local out = {}
  for _, f in ipairs(contract.FIELDS) do
    local name, ty, v = f[1], f[2], P[f[1]]
    if v == nil then
      if f.required then out[#out + 1] = name .. ' is required (' .. ty .. ')' end
    elseif type(v) ~= ty then
      out[#out + 1] = string.format('%s must be a %s, not a %s', name, ty, type(v))
    elseif f.check then
      local why = f.check(v)
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
  -- an underscore export is an internal made public for a spec: specs use the public surface
  local extra = {}
  for k in pairs(P) do
    if type(k) == 'string' and k:match('^_') then extra[#extra + 1] = k end
  end
  table.sort(extra)
  for _, k in ipairs(extra) do out[#out + 1] = k .. ': adapters export no underscore internals' end
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
