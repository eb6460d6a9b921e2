--- Checking decoded JSON against models declared field by field, with pydantic v2's rules for
--- the types other tools' models use (Harbor's ATIF trajectories and job folders are pydantic
--- models: lua/cseng/evals/atif.lua, lua/cseng/results/harbor.lua). What a pydantic model in
--- "lax" mode (its default, how `Model.model_validate(json.loads(text))` reads a file) accepts,
--- this accepts; what it refuses, this refuses, naming the field by its location as pydantic does
--- (`steps.0.tool_calls.1.arguments`).
---
---   local S = require 'cseng.lib.schema'
---   local Agent = S.model('Agent', {
---     { 'name', S.str },                                -- required
---     { 'model_name', S.optional(S.str), default = S.NONE },
---     { 'extra', S.optional(S.dict(S.any)), default = S.NONE },
---   }, { extra = 'forbid' })
---   local ok, errs = S.check(Agent, value)             -- errs: { 'name: required field is missing', ... }
---
--- Types (pydantic v2 lax mode, Python input decoded from JSON):
---   str      a string only (a number is not coerced: pydantic v2 refuses it)
---   int      an integer, a float with no fractional part, a string of an integer, a boolean;
---            options ge/gt/le
---   float    a number, a string of a number, a boolean; options ge
---   bool     a boolean, 0 or 1, the strings true/false/yes/no/on/off/1/0/t/f/y/n
---   any      anything
---   dict(V)  an object whose values are V
---   list(T)  an array of T; option min_length
---   literal(a, b, ...)   one of the values
---   optional(T)          absent, null or T
---   union(T1, T2, ...)   the first that accepts it ("smart" unions pick the exact type first)
---   datetime an ISO 8601 date-time string (Python's datetime.fromisoformat) or a number
---   uuid     a UUID string (hex with or without hyphens, braces or a urn: prefix)
---   model(name, fields, {extra = 'forbid'|'ignore', validators = {fn(value, add)}})
--- A field is { name, type, default = <value> | S.NONE } (no default: required).
local jsonl = require('cseng.lib.jsonl')

local S = {}

--- The default of an Optional field whose default is None (a field with a default is not required).
S.NONE = setmetatable({}, { __name = 'schema.NONE', __tostring = function() return 'None' end })

local function is_array(v)
  return type(v) == 'table' and (getmetatable(v) == jsonl.array_mt or next(v) == nil or v[1] ~= nil)
end
local function is_object(v)
  return type(v) == 'table' and getmetatable(v) ~= jsonl.array_mt and (next(v) == nil or v[1] == nil)
end
S.is_array, S.is_object = is_array, is_object

local function is_null(v) return v == nil or v == jsonl.null end

local function join(loc, k)
  if loc == '' then return tostring(k) end
  return loc .. '.' .. tostring(k)
end

local function kind(t) return setmetatable(t, { __name = 'schema.type' }) end

-- each type: check(value, loc, add) -> ok (adds its problems), and describe() -> the annotation
-- as Harbor's source spells it (the spec compares these to the models' own sources)

S.str = kind { name = 'str', check = function(v, loc, add)
  if type(v) == 'string' then return true end
  add(loc, 'Input should be a valid string')
end }

--- str with constraints (min_length).
function S.string(o)
  o = o or {}
  return kind { name = 'str', min_length = o.min_length, check = function(v, loc, add)
    if type(v) ~= 'string' then add(loc, 'Input should be a valid string'); return false end
    if o.min_length and #v < o.min_length then
      add(loc, string.format('String should have at least %d character%s', o.min_length, o.min_length == 1 and '' or 's'))
      return false
    end
    return true
  end }
end

S.any = kind { name = 'Any', check = function() return true end }

local TRUE = { ['true'] = true, yes = true, on = true, ['1'] = true, t = true, y = true }
local FALSE = { ['false'] = true, no = true, off = true, ['0'] = true, f = true, n = true }

S.bool = kind { name = 'bool', check = function(v, loc, add)
  if type(v) == 'boolean' then return true end
  if v == 0 or v == 1 then return true end
  if type(v) == 'string' and (TRUE[v:lower()] or FALSE[v:lower()]) then return true end
  add(loc, 'Input should be a valid boolean')
end }

local function number_of(v, integral)
  if type(v) == 'boolean' then return v and 1 or 0 end
  if type(v) == 'number' then
    if v ~= v then return nil end
    if integral and math.type(v) == 'float' and (v ~= math.floor(v) or v == math.huge or v == -math.huge) then return nil end
    return v
  end
  if type(v) == 'string' then
    local s = v:match('^%s*(.-)%s*$')
    if integral then return math.tointeger(tonumber(s:match('^[+-]?%d+$') and s or '')) end
    local n = tonumber(s)
    if n and not s:find('^0[xX]') then return n end
  end
  return nil
end

local function bounds(self, n, loc, add)
  if self.ge and n < self.ge then add(loc, 'Input should be greater than or equal to ' .. self.ge); return false end
  if self.gt and n <= self.gt then add(loc, 'Input should be greater than ' .. self.gt); return false end
  if self.le and n > self.le then add(loc, 'Input should be less than or equal to ' .. self.le); return false end
  return true
end

--- int, with optional bounds (ge, gt, le).
function S.int(o)
  o = o or {}
  return kind { name = 'int', ge = o.ge, gt = o.gt, le = o.le, check = function(v, loc, add)
    local n = number_of(v, true)
    if n == nil then
      add(loc, type(v) == 'number' and 'Input should be a valid integer, got a number with a fractional part'
        or 'Input should be a valid integer')
      return false
    end
    return bounds(o, n, loc, add)
  end }
end

--- float, with optional bounds.
function S.float(o)
  o = o or {}
  return kind { name = 'float', ge = o.ge, gt = o.gt, le = o.le, check = function(v, loc, add)
    local n = number_of(v, false)
    if n == nil then add(loc, 'Input should be a valid number'); return false end
    return bounds(o, n, loc, add)
  end }
end

--- list[T], with an optional min_length.
function S.list(T, o)
  o = o or {}
  return kind { name = 'list[' .. T.name .. ']', min_length = o.min_length, item = T, check = function(v, loc, add)
    if not is_array(v) then add(loc, 'Input should be a valid list'); return false end
    if o.min_length and #v < o.min_length then
      add(loc, string.format('List should have at least %d item%s after validation, not %d', o.min_length,
        o.min_length == 1 and '' or 's', #v))
      return false
    end
    local ok = true
    for i, x in ipairs(v) do
      if not T.check(x, join(loc, i - 1), add) then ok = false end
    end
    return ok
  end }
end

--- dict[str, V].
function S.dict(V)
  return kind { name = 'dict[str, ' .. V.name .. ']', value = V, check = function(v, loc, add)
    if not is_object(v) then add(loc, 'Input should be a valid dictionary'); return false end
    local ok = true
    for k, x in pairs(v) do
      if not V.check(x, join(loc, k), add) then ok = false end
    end
    return ok
  end }
end

--- Literal[...] of strings (or numbers).
function S.literal(...)
  local values, names = { ... }, {}
  for i, x in ipairs(values) do names[i] = string.format('%q', x):gsub('^"(.*)"$', "'%1'") end
  return kind { name = 'Literal[' .. table.concat(names, ', ') .. ']', values = values, check = function(v, loc, add)
    for _, x in ipairs(values) do if v == x then return true end end
    add(loc, 'Input should be ' .. table.concat(names, ' or '))
    return false
  end }
end

--- A str Enum (its values), named as the enum class is.
function S.enum(name, ...)
  local L = S.literal(...)
  L.name = name
  return L
end

--- T | None (absent or null is None).
function S.optional(T)
  return kind { name = T.name .. ' | None', inner = T, optional = true, check = function(v, loc, add)
    if is_null(v) then return true end
    return T.check(v, loc, add)
  end }
end

-- the exact-type test pydantic's smart union tries before lax coercion
local function exact(T, v)
  local n = T.name
  if n == 'str' then return type(v) == 'string' end
  if n == 'int' then return math.type(v) == 'integer' end
  if n == 'float' then return type(v) == 'number' end
  if n == 'bool' then return type(v) == 'boolean' end
  return nil
end

--- T1 | T2 | ...: pydantic's smart mode (an exact match first, then the first that accepts it).
function S.union(...)
  local Ts, names = { ... }, {}
  for i, T in ipairs(Ts) do names[i] = T.name end
  return kind { name = table.concat(names, ' | '), members = Ts, check = function(v, loc, add)
    for _, T in ipairs(Ts) do if exact(T, v) then return T.check(v, loc, add) end end
    local all = {}
    for _, T in ipairs(Ts) do
      local mine = {}
      if T.check(v, loc, function(l, m) mine[#mine + 1] = { l, m } end) then return true end
      for _, e in ipairs(mine) do all[#all + 1] = e end
    end
    for _, e in ipairs(all) do add(e[1], e[2]) end
    return false
  end }
end

-- Python's datetime.fromisoformat (3.11): a date, optionally T or space and a time with optional
-- fraction and offset (Z or +hh[:mm[:ss]])
local function iso_datetime(s)
  local date, rest = s:match('^(%d%d%d%d%-%d%d%-%d%d)(.*)$')
  if not date then
    date, rest = s:match('^(%d%d%d%d%d%d%d%d)(.*)$')
    if not date then return false end
  end
  if rest == '' then return true end
  local time = rest:match('^[T ](.*)$')
  if not time then return false end
  local hms, tz = time:match('^(%d%d:?%d%d:?%d%d[%.,]?%d*)(.*)$')
  if not hms then hms, tz = time:match('^(%d%d:?%d%d)(.*)$') end
  if not hms then hms, tz = time:match('^(%d%d)(.*)$') end
  if not hms then return false end
  return tz == '' or tz == 'Z' or tz:match('^[%+%-]%d%d:?%d%d$') ~= nil or tz:match('^[%+%-]%d%d:?%d%d:?%d%d$') ~= nil
    or tz:match('^[%+%-]%d%d$') ~= nil
end
S.iso_datetime = iso_datetime

S.datetime = kind { name = 'datetime', check = function(v, loc, add)
  if type(v) == 'number' then return true end
  if type(v) == 'string' and iso_datetime(v) then return true end
  add(loc, 'Input should be a valid datetime')
  return false
end }

S.uuid = kind { name = 'UUID', check = function(v, loc, add)
  if type(v) == 'string' then
    local h = v:lower():gsub('^urn:uuid:', ''):gsub('^{(.*)}$', '%1'):gsub('%-', '')
    if #h == 32 and not h:find('[^0-9a-f]') then return true end
  end
  add(loc, 'Input should be a valid UUID')
  return false
end }

--- Path: a string.
S.path = kind { name = 'Path', check = function(v, loc, add)
  if type(v) == 'string' then return true end
  add(loc, 'Input should be a valid path')
  return false
end }

--- A model: fields in order ({name, T, default = ...}); extra 'forbid' refuses unknown keys
--- (pydantic's default is 'ignore'); validators run after the fields passed, as
--- `@model_validator(mode="after")` does (fn(value, add, loc)).
function S.model(name, fields, o)
  o = o or {}
  local M = kind { name = name, model = true, fields = fields, extra = o.extra or 'ignore', validators = o.validators or {} }
  local by = {}
  for _, f in ipairs(fields) do by[f[1]] = f end
  M.by_name = by
  M.check = function(v, loc, add)
    if not is_object(v) then add(loc, 'Input should be a valid dictionary or instance of ' .. name); return false end
    local ok = true
    for _, f in ipairs(fields) do
      local x = v[f[1]]
      if x == nil then -- absent (the decoder drops an object's null members: a required field then reads as missing)
        if f.default == nil then add(join(loc, f[1]), 'Field required'); ok = false end
      elseif not f[2].check(x, join(loc, f[1]), add) then
        ok = false
      end
    end
    if M.extra == 'forbid' then
      local extra = {}
      for k in pairs(v) do if not by[k] then extra[#extra + 1] = tostring(k) end end
      table.sort(extra)
      for _, k in ipairs(extra) do add(join(loc, k), 'Extra inputs are not permitted'); ok = false end
    end
    if ok then
      for _, fn in ipairs(M.validators) do
        local before = 0
        local function a(l, m) before = before + 1; add(l, m) end
        fn(v, a, loc)
        if before > 0 then ok = false end
      end
    end
    return ok
  end
  return M
end

--- A type declared later (recursive models: Trajectory.subagent_trajectories). set(T) fills it.
function S.forward(name)
  local F = kind { name = name }
  F.check = function(v, loc, add) return F.target.check(v, loc, add) end
  function F.set(T) F.target = T; F.model = T.model; F.fields = T.fields; F.by_name = T.by_name end
  return F
end

--- Check a value: true, or nil and the problems ("loc: message", in the order found).
---@return true|nil ok, string[] problems
function S.check(T, value)
  local p = {}
  T.check(value, '', function(loc, msg) p[#p + 1] = (loc == '' and '(root)' or loc) .. ': ' .. msg end)
  if #p > 0 then return nil, p end
  return true, p
end

--- A model's fields as a table for comparison with the model's source: {field = {annotation,
--- required, ge, min_length}} and its extra policy.
function S.describe(M)
  local out = { extra = M.extra, fields = {} }
  for _, f in ipairs(M.fields) do
    local T = f[2]
    local d = { annotation = T.name, required = f.default == nil }
    local inner = T.inner or T
    d.ge = inner.ge
    d.min_length = inner.min_length
    out.fields[f[1]] = d
  end
  return out
end

return S
