-- cseng's declarations of Harbor's pydantic models (lua/cseng/evals/atif.lua: the ATIF trajectory;
-- lua/cseng/results/harbor.lua: the job folder) against the models' own sources, field by field.
-- spec/fixtures/harbor/models.json is what tools/harbor_models.py reads from Harbor's source with
-- Python's ast (no pydantic needed): every field of every model, its annotation as written,
-- whether it is required, its constraints (ge, min_length) and the model's extra policy. A field
-- Harbor adds, drops, retypes or constrains shows here once the table is regenerated.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local S = require('cseng.lib.schema')
local atif = require('cseng.evals.atif')

local FIX = jsonl.decode(assert(fs.read(sys.root() .. '/spec/fixtures/harbor/models.json')))

-- cseng's model -> the entry of the table it follows
local function compare(M, key, spelled)
  local want = assert(FIX[key], 'no ' .. key .. ' in the fixture')
  local got = S.describe(M)
  local problems = {}
  local function bad(f, msg) problems[#problems + 1] = key .. '.' .. f .. ': ' .. msg end
  if got.extra ~= want.extra then bad('model_config', 'extra ' .. got.extra .. ', Harbor: ' .. want.extra) end
  for name, w in pairs(want.fields) do
    local g = got.fields[name]
    if not g then bad(name, 'not declared (Harbor: ' .. w.annotation .. ')')
    else
      local same = g.annotation == w.annotation
      for _, alias in ipairs(spelled and spelled[g.annotation] or {}) do if alias == w.annotation then same = true end end
      if not same then bad(name, 'annotation ' .. g.annotation .. ', Harbor: ' .. w.annotation) end
      if g.required ~= w.required then bad(name, 'required ' .. tostring(g.required) .. ', Harbor: ' .. tostring(w.required)) end
      if g.ge ~= w.ge then bad(name, 'ge ' .. tostring(g.ge) .. ', Harbor: ' .. tostring(w.ge)) end
      if g.min_length ~= w.min_length then bad(name, 'min_length ' .. tostring(g.min_length) .. ', Harbor: ' .. tostring(w.min_length)) end
    end
  end
  for name in pairs(got.fields) do
    if not want.fields[name] then bad(name, 'declared, but Harbor has no such field') end
  end
  return problems
end

describe("Harbor's ATIF models", function()
  local map = {
    Trajectory = 'trajectories.trajectory.Trajectory', Agent = 'trajectories.agent.Agent', Step = 'trajectories.step.Step',
    ToolCall = 'trajectories.tool_call.ToolCall', Observation = 'trajectories.observation.Observation',
    ObservationResult = 'trajectories.observation_result.ObservationResult', Metrics = 'trajectories.metrics.Metrics',
    FinalMetrics = 'trajectories.final_metrics.FinalMetrics', ContentPart = 'trajectories.content.ContentPart',
    ImageSource = 'trajectories.content.ImageSource', SubagentTrajectoryRef = 'trajectories.subagent_trajectory_ref.SubagentTrajectoryRef',
  }
  it('are declared field by field as Harbor declares them', function()
    local all = {}
    for name, key in pairs(map) do
      for _, p in ipairs(compare(assert(atif.MODELS[name], name), key)) do all[#all + 1] = p end
    end
    table.sort(all)
    assert.same({}, all)
  end)
  it('cover every trajectory model of the table', function()
    for key in pairs(FIX) do
      if key:match('^trajectories%.') then
        local found = false
        for _, k in pairs(map) do if k == key then found = true end end
        assert.is_true(found, key .. ' is not declared')
      end
    end
  end)
end)

describe("Harbor's job folder models (config.json, result.json, lock.json of a job and of its trials)", function()
  local H = require('cseng.results.harbor_models')
  it('are declared field by field as Harbor declares them', function()
    local all = {}
    for name, key in pairs(H.FIXTURE) do
      for _, p in ipairs(compare(assert(H[name], name), key, H.SPELLED)) do all[#all + 1] = p end
    end
    table.sort(all)
    assert.same({}, all)
  end)
end)

describe("Harbor's registry models", function()
  local registry = require('cseng.workload.registry')
  it('are declared field by field as Harbor declares them', function()
    local all = {}
    for name, key in pairs({ DatasetSpec = 'registry.DatasetSpec', RegistryTaskId = 'registry.RegistryTaskId',
      MetricConfig = 'metric.config.MetricConfig' }) do
      for _, p in ipairs(compare(registry.MODELS[name], key)) do all[#all + 1] = p end
    end
    table.sort(all)
    assert.same({}, all)
  end)
end)

describe('the comparison itself', function()
  it('fails on a field declared otherwise than in Harbor', function()
    local M = S.model('ToolCall', { { 'tool_call_id', S.str }, { 'function_name', S.optional(S.str), default = S.NONE },
      { 'arguments', S.dict(S.any) }, { 'extra', S.optional(S.dict(S.any)), default = S.NONE }, { 'timeout', S.int() } },
      { extra = 'ignore' })
    local p = table.concat(compare(M, 'trajectories.tool_call.ToolCall'), '\n')
    assert.matches('function_name: annotation str | None, Harbor: str', p, 1, true)
    assert.matches('function_name: required false, Harbor: true', p, 1, true)
    assert.matches('timeout: declared, but Harbor has no such field', p, 1, true)
    assert.matches('model_config: extra ignore, Harbor: forbid', p, 1, true)
  end)
end)

return { compare = compare, FIX = FIX }
