--- Plans: Lua files that return a table describing a run. Flags given to `cseng run`
--- override the plan's fields.
---
---   local plan = require 'cseng.run.plan'
---   return plan.tasks { name = 'cold-gold', provider = 'local', dataset = 'data/tasks', solver = 'gold' }
local fs = require 'cseng.fs'

local plan = {}

local TASK_DEFAULTS = {
  provider = 'local', solver = 'gold', mode = 'cold', task_index = 'all', concurrency = 2,
}

local function with_defaults(t, defaults)
  for k, v in pairs(defaults) do if t[k] == nil then t[k] = v end end
  return t
end

--- Trials of tasks on one provider (cold-gold, warm-gold, solve).
function plan.tasks(t)
  t.kind = 'tasks'
  return with_defaults(t, TASK_DEFAULTS)
end

--- The startup arena: create, first command, destroy; repeated per provider.
function plan.startup(t)
  t.kind = 'startup'
  return t
end

--- A matrix of task runs: every provider x mode.
function plan.matrix(t)
  t.kind = 'matrix'
  return with_defaults(t, TASK_DEFAULTS)
end

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

--- Load a plan file; errors name the file.
function plan.load(path)
  if not fs.exists(path) then error(path .. ': no such plan file', 0) end
  local chunk, err = loadfile(path)
  if not chunk then error(err, 0) end
  -- plans written before the namespaced tree say `require 'plan'`: they get this module while
  -- the plan loads, and no module of that name exists at any other time
  local prev = package.loaded.plan
  package.loaded.plan = prev or plan
  local ok, p = pcall(chunk)
  package.loaded.plan = prev
  if not ok then error(path .. ': ' .. tostring(p), 0) end
  if type(p) ~= 'table' or not p.kind then
    error(path .. ': a plan must return plan.tasks{...}, plan.startup{...} or plan.matrix{...}', 0)
  end
  p.plan_file = path
  return p
end

return plan
