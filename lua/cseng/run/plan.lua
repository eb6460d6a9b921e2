--- Plans: Lua files that return a table describing a run. Flags given to `cseng run`
--- override the plan's fields.
---
---   local plan = require 'cseng.run.plan'
---   return plan.tasks { name = 'cold-gold', provider = 'local', dataset = 'data/tasks', solver = 'gold' }
local fs = require('cseng.fs')
local rates = require('cseng.evals.rates')

local plan = {}

local TASK_DEFAULTS = {
  provider = 'local', solver = 'gold', mode = 'cold', task_index = 'all', concurrency = 2,
}

-- The constructor of a plan kind: it marks the table with the kind and fills the defaults' unset
-- fields (none when defaults is nil).
local function kind(name, defaults)
  return function(t)
    t.kind = name
    for k, v in pairs(defaults or {}) do if t[k] == nil then t[k] = v end end
    return t
  end
end

--- Trials of tasks on one provider (cold-gold, warm-gold, solve).
plan.tasks = kind('tasks', TASK_DEFAULTS)

--- The startup arena: create, first command, destroy; repeated per provider.
plan.startup = kind('startup')

--- A matrix of task runs: every provider x mode.
plan.matrix = kind('matrix', TASK_DEFAULTS)

--- A plan of any run kind (lua/cseng/run/kinds/<name>.lua): plan.kind('name'){...}.
---@param name string
---@param defaults table|nil
plan.kind = kind

--- The task runs a plan stands for: a tasks plan is itself; a matrix is one tasks run per
--- provider x mode (providers/modes, else provider/mode), each with its own log when --output
--- names a file (x.jsonl -> x-<provider>-<mode>.jsonl).
---@param o table the plan merged with its flags
---@return table[]
function plan.expand(o)
  if o.kind ~= 'matrix' then return { o } end
  local out = {}
  for _, prov in ipairs(o.providers or { o.provider }) do
    for _, mode in ipairs(o.modes or { o.mode }) do
      local one = {}
      for k, v in pairs(o) do one[k] = v end
      one.kind, one.provider, one.mode = 'tasks', prov, mode
      if one.output and one.output:match('%.jsonl?$') then
        one.output = one.output:gsub('(%.jsonl?)$', '-' .. prov .. '-' .. mode .. '%1')
      end
      out[#out + 1] = one
    end
  end
  return out
end

-- The fields of a plan that are not flags of `cseng run` (options.SPEC has the others), by type.
local EXTRA_FIELDS = {
  name = 'string', plan_file = 'string', kind = 'string', exec_timeout_seconds = 'seconds',
  pause_seconds = 'seconds0', cleanup_backoff = 'seconds_list', sandbox = 'table', provider_config = 'table',
  rates = 'table', tail_chars = 'int1', workload_options = 'table', resources = 'table', audit = 'boolean',
}
local MAX_SECONDS = 7 * 86400

local function describe(v)
  if type(v) == 'string' then return string.format('%q', v) end
  return tostring(v)
end

local function seconds_ok(v, zero_ok)
  return type(v) == 'number' and v == v and v ~= math.huge and v <= MAX_SECONDS and (v > 0 or (zero_ok and v == 0))
end

--- Check the type of every field of a plan merged with its flags (o), against the flags'
--- specification (spec: options.SPEC) and the plan-only fields. Raises one line naming the file
--- and the field: "plans/x.lua: concurrency: expected a whole number >= 1, got \"four\"". Timeouts
--- must be finite seconds in (0, 7 days].
---@param o table
---@param spec table options.SPEC
function plan.check(o, spec)
  local where = o.plan_file or 'the plan'
  local function bad(field, want, v) error(string.format('%s: %s: expected %s, got %s', where, field, want, describe(v)), 0) end
  for _, s in pairs(spec) do
    local v = o[s.key]
    if v ~= nil then
      local field = s.key
      if s.type == 'int' then
        local n = math.type(v) == 'integer' and v or (type(v) == 'number' and math.tointeger(v)) or nil
        if not n or (s.min and n < s.min) then bad(field, 'a whole number' .. (s.min and (' >= ' .. s.min) or ''), v) end
        o[s.key] = n
      elseif s.type == 'number' then
        if not seconds_ok(v) then bad(field, 'seconds in (0, ' .. MAX_SECONDS .. ']', v) end
      elseif s.type == 'list' or s.type == 'multi' then
        if type(v) ~= 'table' then bad(field, 'a list of strings, e.g. { \'a\', \'b\' }', v) end
        for i, x in ipairs(v) do if type(x) ~= 'string' then bad(field .. '[' .. i .. ']', 'a string', x) end end
        if s.type == 'list' and #v == 0 then bad(field, 'a non-empty list', '{}') end
      elseif s.type == 'bool' then
        if type(v) ~= 'boolean' then bad(field, 'true or false', v) end
      else
        if type(v) ~= 'string' then bad(field, 'a string', v) end
        if s.choices then
          local okc = false
          for _, c in ipairs(s.choices) do if c == v then okc = true end end
          if not okc then bad(field, 'one of ' .. table.concat(s.choices, ', '), v) end
        end
      end
    end
  end
  for field, t in pairs(EXTRA_FIELDS) do
    local v = o[field]
    if v ~= nil then
      if t == 'seconds' and not seconds_ok(v) then bad(field, 'seconds in (0, ' .. MAX_SECONDS .. ']', v)
      elseif t == 'seconds0' and not seconds_ok(v, true) then bad(field, 'seconds in [0, ' .. MAX_SECONDS .. ']', v)
      elseif t == 'seconds_list' then
        if type(v) ~= 'table' then bad(field, 'a list of seconds', v) end
        for i, x in ipairs(v) do if not seconds_ok(x, true) then bad(field .. '[' .. i .. ']', 'seconds in [0, ' .. MAX_SECONDS .. ']', x) end end
      elseif t == 'int1' and not (math.tointeger(v) and v >= 1) then bad(field, 'a whole number >= 1', v)
      elseif (t == 'string' or t == 'table' or t == 'boolean') and type(v) ~= t then bad(field, 'a ' .. t, v) end
    end
  end
  if type(o.rates) == 'table' then
    local ok, e = pcall(rates.check_plan, o.rates, where)
    if not ok then error(type(e) == 'table' and e.message or e, 0) end
  end
  if o.task_index ~= nil and o.task_index ~= 'all' and not math.tointeger(tonumber(o.task_index)) then
    bad('task_index', "a number or 'all'", o.task_index)
  end
end

--- Load a plan file; errors name the file (an error the file raises as a table is described by
--- its message, or as JSON: never "table: 0x...").
function plan.load(path)
  if not fs.exists(path) then error(path .. ': no such plan file', 0) end
  local chunk, err = loadfile(path)
  if not chunk then error(err, 0) end
  -- plans written before the namespaced tree say `require 'cseng.run.plan'`: they get this module while
  -- the plan loads, and no module of that name exists at any other time
  local prev = package.loaded.plan
  package.loaded.plan = prev or plan
  local ok, p = pcall(chunk)
  package.loaded.plan = prev
  if not ok then error(path .. ': ' .. require('cseng.lib.errors').line(p), 0) end
  if type(p) ~= 'table' or not p.kind then
    error(path .. ': a plan must return plan.tasks{...}, plan.startup{...} or plan.matrix{...}', 0)
  end
  p.plan_file = path
  return p
end

return plan
