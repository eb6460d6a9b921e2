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
}

-- Functions: required ones are called by every run kind; optional ones change behaviour when there.
contract.FUNCTIONS = {
  { 'connect', required = true }, { 'create', required = true }, { 'exec', required = true },
  { 'put', required = true }, { 'get', required = true }, { 'destroy', required = true },
  { 'list', required = true },
  { 'runtime' }, { 'build' }, { 'env_mode' }, { 'fidelity_gaps' }, { 'snapshot' }, { 'find_artifact' },
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
