--- ATIF trajectories (Harbor's Agent Trajectory Interchange Format, RFC 0001, v1.7): a builder the
--- agent solvers fill step by step, a validator that follows Harbor's pydantic models field by
--- field plus this project's stricter rules (both listed in docs/SOLVERS.md, "ATIF"), and the writer
--- of `<trial>.trajectory.json`.
---
---   local tr = atif.new { session_id = 'run/task/1', agent = { name = 'cseng-agent', version = '1' },
---                         model_name = 'fake/model' }
---   tr:system(prompt); tr:user(instruction)
---   local step = tr:agent { message = '...', tool_calls = {{id=, name=, arguments=}}, metrics = {...} }
---   tr:observe(step, call_id, 'exit code: 0 ...')
---   local doc = tr:finish()        -- final_metrics are the sums of the steps' metrics
---   local ok, problems = atif.validate(doc)
local jsonl = require('cseng.lib.jsonl')
local clock = require('cseng.clock')
local errors = require('cseng.lib.errors')

local atif = {}

atif.SCHEMA_VERSION = 'ATIF-v1.7'

local Trajectory = {}
Trajectory.__index = Trajectory

---@class AtifMeta
---@field session_id string the run's trial (run-scoped: Trajectory.session_id)
---@field trajectory_id? string this document (default: session_id)
---@field agent {name: string, version: string, extra?: table, tool_definitions?: table[]}
---@field model_name? string
---@field notes? string
---@field extra? table

--- A new trajectory under construction.
---@param meta AtifMeta
function atif.new(meta)
  local agent_ = { name = tostring(meta.agent.name), version = tostring(meta.agent.version),
    model_name = meta.model_name, extra = meta.agent.extra, tool_definitions = meta.agent.tool_definitions }
  return setmetatable({
    doc = { schema_version = atif.SCHEMA_VERSION, session_id = tostring(meta.session_id),
      trajectory_id = tostring(meta.trajectory_id or meta.session_id), agent = agent_,
      notes = meta.notes, extra = meta.extra, steps = jsonl.array() },
  }, Trajectory)
end

function Trajectory:add(step)
  local steps = self.doc.steps
  step.step_id = #steps + 1
  step.timestamp = step.timestamp or clock.wall()
  step.message = step.message or ''
  steps[#steps + 1] = step
  return step
end

--- A system step (the system prompt).
function Trajectory:system(message, extra) return self:add { source = 'system', message = message, extra = extra } end

--- A user step (the instruction).
function Trajectory:user(message, extra) return self:add { source = 'user', message = message, extra = extra } end

-- Tool-call arguments as an object: a JSON string is decoded; anything that is not an object is
-- kept under `raw` (ATIF requires an object; the model's malformed text is still evidence).
local function args_object(a)
  if type(a) == 'table' then return next(a) == nil and setmetatable({}, nil) or a end
  if type(a) == 'string' then
    if a:match('^%s*$') then return {} end
    local v = jsonl.decode(a)
    if type(v) == 'table' and getmetatable(v) ~= jsonl.array_mt and (next(v) == nil or v[1] == nil) then return v end
    return { raw = a }
  end
  return {}
end

---@class AtifMetrics
---@field prompt_tokens? integer all input tokens, cached ones included
---@field completion_tokens? integer
---@field cached_tokens? integer the subset of prompt_tokens served from cache
---@field cost_usd? number
---@field extra? table reasoning_tokens, cache_creation_input_tokens, cost_source, ...

--- An agent step: the model's answer, its tool calls ({id, name, arguments}) and its metrics.
--- llm_calls: how many model inferences the step stands for (ATIF v1.7 llm_call_count; nil: not
--- tracked, as for a CLI whose output does not say).
---@param s {message?: string, reasoning?: string, model_name?: string, tool_calls?: table[], metrics?: AtifMetrics, extra?: table, llm_calls?: integer}
function Trajectory:agent(s)
  local step = { source = 'agent', message = s.message or '', reasoning_content = s.reasoning, model_name = s.model_name,
    metrics = s.metrics, extra = s.extra, llm_call_count = s.llm_calls }
  if s.tool_calls and #s.tool_calls > 0 then
    local tcs = jsonl.array()
    for i, c in ipairs(s.tool_calls) do
      tcs[i] = { tool_call_id = tostring(c.id), function_name = tostring(c.name), arguments = args_object(c.arguments) }
    end
    step.tool_calls = tcs
  end
  return self:add(step)
end

--- The result of one tool call of an agent step (call_id nil: an action without a tool call).
function Trajectory:observe(step, call_id, content) -- luacheck: ignore 212/self (a method, for symmetry)
  step.observation = step.observation or { results = jsonl.array() }
  local r = step.observation.results
  r[#r + 1] = { source_call_id = call_id, content = content }
end

--- The sums of the steps' metrics (the final_metrics of a document).
---@param steps table[]
---@return table
function atif.totals(steps)
  local t = { total_prompt_tokens = 0, total_completion_tokens = 0, total_cached_tokens = 0, total_steps = #steps }
  local cost, priced, reasoning, creation = 0, 0, 0, 0
  for _, s in ipairs(steps) do
    local m = s.metrics
    if type(m) == 'table' then
      t.total_prompt_tokens = t.total_prompt_tokens + (m.prompt_tokens or 0)
      t.total_completion_tokens = t.total_completion_tokens + (m.completion_tokens or 0)
      t.total_cached_tokens = t.total_cached_tokens + (m.cached_tokens or 0)
      if type(m.cost_usd) == 'number' then cost, priced = cost + m.cost_usd, priced + 1 end
      local e = type(m.extra) == 'table' and m.extra or {}
      reasoning = reasoning + (math.tointeger(e.reasoning_tokens) or 0)
      creation = creation + (math.tointeger(e.cache_creation_input_tokens) or 0)
    end
  end
  if priced > 0 then t.total_cost_usd = cost end
  t.extra = { reasoning_tokens = reasoning, cache_creation_input_tokens = creation, priced_steps = priced }
  return t
end

--- Close the document: final_metrics from the steps (merged with extra fields given).
---@param extra? table final_metrics.extra members (stop_reason, ...)
---@return table doc
function Trajectory:finish(extra)
  local fm = atif.totals(self.doc.steps)
  for k, v in pairs(extra or {}) do fm.extra[k] = v end
  self.doc.final_metrics = fm
  return self.doc
end

-- ---- validation -------------------------------------------------------------
--
-- Two levels. atif.harbor(doc): Harbor's own pydantic models (src/harbor/models/trajectories/*.py),
-- field by field, with their validators: what `harbor.utils.trajectory_validator` accepts (its
-- Trajectory(**doc)). atif.validate(doc): that, plus this project's stricter rules (the totals of
-- final_metrics equal the sums of the steps, token counts are non-negative and cached tokens a
-- subset of the prompt's, tool call ids unique in the document). docs/SOLVERS.md lists both.

local S = require('cseng.lib.schema')

local function D(T) return { T, default = S.NONE } end -- an Optional field defaulting to None
local function opt(name, T) local f = D(S.optional(T)); table.insert(f, 1, name); return f end

local VERSIONS = {}
for i = 0, 7 do VERSIONS[#VERSIONS + 1] = 'ATIF-v1.' .. i end
atif.VERSIONS = VERSIONS

local ImageSource = S.model('ImageSource', {
  { 'media_type', S.literal('image/jpeg', 'image/png', 'image/gif', 'image/webp') },
  { 'path', S.str },
}, { extra = 'forbid' })

local ContentPart = S.model('ContentPart', {
  { 'type', S.literal('text', 'image') },
  opt('text', S.str),
  opt('source', ImageSource),
}, { extra = 'forbid', validators = { function(v, add, loc)
  if v.type == 'text' then
    if v.text == nil then add(loc, "Value error, 'text' field is required when type='text'") end
    if v.source ~= nil then add(loc, "Value error, 'source' field is not allowed when type='text'") end
  elseif v.type == 'image' then
    if v.source == nil then add(loc, "Value error, 'source' field is required when type='image'") end
    if v.text ~= nil then add(loc, "Value error, 'text' field is not allowed when type='image'") end
  end
end } })

local SubagentTrajectoryRef = S.model('SubagentTrajectoryRef', {
  opt('trajectory_id', S.str), opt('session_id', S.str), opt('trajectory_path', S.str), opt('extra', S.dict(S.any)),
}, { extra = 'forbid', validators = { function(v, add, loc)
  if v.trajectory_id == nil and v.trajectory_path == nil then
    add(loc, 'Value error, SubagentTrajectoryRef must be resolvable: set either `trajectory_id` (for embedded references) '
      .. 'or `trajectory_path` (for external-file references)')
  end
end } })

local ToolCall = S.model('ToolCall', {
  { 'tool_call_id', S.str }, { 'function_name', S.str }, { 'arguments', S.dict(S.any) }, opt('extra', S.dict(S.any)),
}, { extra = 'forbid' })

local ObservationResult = S.model('ObservationResult', {
  opt('source_call_id', S.str),
  opt('content', S.union(S.str, S.list(ContentPart))),
  opt('subagent_trajectory_ref', S.list(SubagentTrajectoryRef)),
  opt('extra', S.dict(S.any)),
}, { extra = 'forbid' })

local Observation = S.model('Observation', { { 'results', S.list(ObservationResult) } }, { extra = 'forbid' })

local Metrics = S.model('Metrics', {
  opt('prompt_tokens', S.int()), opt('completion_tokens', S.int()), opt('cached_tokens', S.int()),
  opt('cost_usd', S.float()), opt('prompt_token_ids', S.list(S.int())), opt('completion_token_ids', S.list(S.int())),
  opt('logprobs', S.list(S.float())), opt('extra', S.dict(S.any)),
}, { extra = 'forbid' })

local AGENT_ONLY = { 'model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'metrics' }

local Step = S.model('Step', {
  { 'step_id', S.int { ge = 1 } },
  opt('timestamp', S.str),
  { 'source', S.literal('system', 'user', 'agent') },
  opt('model_name', S.str),
  opt('reasoning_effort', S.union(S.str, S.float())),
  { 'message', S.union(S.str, S.list(ContentPart)) },
  opt('reasoning_content', S.str),
  opt('tool_calls', S.list(ToolCall)),
  opt('observation', Observation),
  opt('metrics', Metrics),
  opt('is_copied_context', S.bool),
  opt('llm_call_count', S.int { ge = 0 }),
  opt('extra', S.dict(S.any)),
}, { extra = 'forbid', validators = {
  function(v, add, loc) -- field_validator("timestamp"): datetime.fromisoformat after Z -> +00:00
    if v.timestamp ~= nil and not S.iso_datetime(v.timestamp) then
      add(loc .. '.timestamp', 'Value error, Invalid ISO 8601 timestamp: ' .. tostring(v.timestamp))
    end
  end,
  function(v, add, loc)
    if v.source ~= 'agent' then
      for _, f in ipairs(AGENT_ONLY) do
        if v[f] ~= nil then
          add(loc, string.format("Value error, Field '%s' is only applicable when source is 'agent', but source is '%s'", f, v.source))
        end
      end
    end
  end,
  function(v, add, loc)
    if v.llm_call_count == 0 and v.source == 'agent' then
      for _, f in ipairs({ 'metrics', 'reasoning_content' }) do
        if v[f] ~= nil then
          add(loc, string.format("Value error, Field '%s' must be absent when llm_call_count is 0 (deterministic dispatch on a "
            .. "'source: agent' step)", f))
        end
      end
    end
  end,
} })

local Agent = S.model('Agent', {
  { 'name', S.str }, { 'version', S.str }, opt('model_name', S.str),
  opt('tool_definitions', S.list(S.dict(S.any))), opt('extra', S.dict(S.any)),
}, { extra = 'forbid' })

local FinalMetrics = S.model('FinalMetrics', {
  opt('total_prompt_tokens', S.int()), opt('total_completion_tokens', S.int()), opt('total_cached_tokens', S.int()),
  opt('total_cost_usd', S.float()), opt('total_steps', S.int { ge = 0 }), opt('extra', S.dict(S.any)),
}, { extra = 'forbid' })

local TrajectoryRef = S.forward('Trajectory')
local Trajectory_ = S.model('Trajectory', {
  { 'schema_version', S.literal(table.unpack(VERSIONS)), default = 'ATIF-v1.7' },
  opt('session_id', S.str),
  opt('trajectory_id', S.str),
  { 'agent', Agent },
  { 'steps', S.list(Step, { min_length = 1 }) },
  opt('notes', S.str),
  opt('final_metrics', FinalMetrics),
  opt('continued_trajectory_ref', S.str),
  opt('extra', S.dict(S.any)),
  opt('subagent_trajectories', S.list(TrajectoryRef)),
}, { extra = 'forbid', validators = {
  function(v, add, loc)
    for i, st in ipairs(v.steps) do
      if st.step_id ~= i then
        add(loc, string.format('Value error, steps[%d].step_id: expected %d (sequential from 1), got %s', i - 1, i, tostring(st.step_id)))
      end
    end
  end,
  function(v, add, loc)
    local seen = {}
    for i, sub in ipairs(v.subagent_trajectories or {}) do
      if sub.trajectory_id == nil then
        add(loc, string.format('Value error, subagent_trajectories[%d].trajectory_id is required for embedded subagents', i - 1))
      elseif seen[sub.trajectory_id] then
        add(loc, string.format('Value error, subagent_trajectories[%d].trajectory_id %q is not unique within subagent_trajectories',
          i - 1, sub.trajectory_id))
      else
        seen[sub.trajectory_id] = true
      end
    end
  end,
  function(v, add, loc)
    for _, st in ipairs(v.steps) do
      if st.observation then
        local ids = {}
        for _, tc in ipairs(st.tool_calls or {}) do ids[tc.tool_call_id] = true end
        for _, r in ipairs(st.observation.results) do
          if r.source_call_id ~= nil and not ids[r.source_call_id] then
            add(loc, string.format("Value error, Observation result references source_call_id '%s' which is not found in step %s's "
              .. 'tool_calls', r.source_call_id, tostring(st.step_id)))
          end
        end
      end
    end
  end,
} })
TrajectoryRef.set(Trajectory_)

--- Harbor's trajectory models, by the names of their classes (spec/results/harbor_models_spec.lua compares
--- them field by field with Harbor's sources).
atif.MODELS = { Trajectory = Trajectory_, Agent = Agent, Step = Step, ToolCall = ToolCall, Observation = Observation,
  ObservationResult = ObservationResult, Metrics = Metrics, FinalMetrics = FinalMetrics, ContentPart = ContentPart,
  ImageSource = ImageSource, SubagentTrajectoryRef = SubagentTrajectoryRef }

--- Check a decoded document against Harbor's models (what Harbor's trajectory validator accepts).
--- Returns true, or nil and the problems ("steps.2.tool_calls.0.arguments: Input should be a valid
--- dictionary"; locations as pydantic gives them: 0-based).
---@return true|nil ok, string[] problems
function atif.harbor(doc) return S.check(Trajectory_, doc) end

local function is_int(v) return math.type(v) == 'integer' end

-- this project's rules, beyond Harbor's models (a trajectory cseng writes must also pass these)
local function strict(doc, p)
  local function bad(path, why) p[#p + 1] = path .. ': ' .. why end
  local ids = {}
  for i, s in ipairs(doc.steps or {}) do
    local at = string.format('steps.%d', i - 1)
    for j, c in ipairs(type(s) == 'table' and s.tool_calls or {}) do
      if type(c) == 'table' and type(c.tool_call_id) == 'string' then
        local cat = string.format('%s.tool_calls.%d.tool_call_id', at, j - 1)
        if c.tool_call_id == '' then bad(cat, 'empty (cseng: a tool call needs an id)')
        elseif ids[c.tool_call_id] then bad(cat, 'duplicate ' .. c.tool_call_id .. ' (cseng: ids are unique in a document)') end
        ids[c.tool_call_id] = true
      end
    end
    local m = type(s) == 'table' and s.metrics
    if type(m) == 'table' then
      for _, f in ipairs({ 'prompt_tokens', 'completion_tokens', 'cached_tokens' }) do
        if m[f] ~= nil and (not is_int(m[f]) or m[f] < 0) then bad(at .. '.metrics.' .. f, 'a non-negative integer') end
      end
      if is_int(m.cached_tokens) and is_int(m.prompt_tokens) and m.cached_tokens > m.prompt_tokens then
        bad(at .. '.metrics.cached_tokens', 'more than prompt_tokens (cached tokens are a subset of them)')
      end
      if type(m.cost_usd) == 'number' and m.cost_usd < 0 then bad(at .. '.metrics.cost_usd', 'a non-negative number') end
    end
  end
  local fm = doc.final_metrics
  if type(fm) == 'table' then
    for _, f in ipairs({ 'total_prompt_tokens', 'total_completion_tokens', 'total_cached_tokens' }) do
      if fm[f] ~= nil and (not is_int(fm[f]) or fm[f] < 0) then bad('final_metrics.' .. f, 'a non-negative integer') end
    end
    -- the totals equal the steps' sums (the RFC says "sum of ..."; cseng holds its writers to it)
    local sums = atif.totals(doc.steps or {})
    for _, f in ipairs({ 'total_prompt_tokens', 'total_completion_tokens', 'total_cached_tokens' }) do
      if is_int(fm[f]) and fm[f] ~= sums[f] then
        bad('final_metrics.' .. f, string.format('%d, but the steps sum to %s', fm[f], tostring(sums[f])))
      end
    end
    if is_int(fm.total_steps) and fm.total_steps ~= #(doc.steps or {}) and type(doc.notes) ~= 'string' then
      bad('final_metrics.total_steps', string.format('%d for %d steps, and no notes explain it', fm.total_steps, #(doc.steps or {})))
    end
    if type(fm.total_cost_usd) == 'number' then
      if fm.total_cost_usd < 0 then bad('final_metrics.total_cost_usd', 'a non-negative number')
      elseif sums.total_cost_usd and math.abs(fm.total_cost_usd - sums.total_cost_usd) > 1e-9 * math.max(1, sums.total_cost_usd) then
        bad('final_metrics.total_cost_usd', string.format('%.9g, but the steps sum to %.9g', fm.total_cost_usd, sums.total_cost_usd))
      end
    end
  end
end

--- Check a decoded ATIF document: Harbor's models (atif.harbor) and this project's stricter rules.
--- Returns true, or nil and the list of problems (each naming its field). Every problem is collected.
---@param doc table
---@return true|nil ok, string[] problems
function atif.validate(doc)
  local _, p = atif.harbor(doc)
  if type(doc) == 'table' then strict(doc, p) end
  if #p > 0 then return nil, p end
  return true, p
end

--- Validate the JSON text of a trajectory file.
---@return true|nil ok, string[] problems
function atif.validate_text(text)
  local ok, doc = pcall(jsonl.decode, text)
  if not ok or doc == nil then return nil, { 'not JSON: ' .. tostring(doc) } end
  return atif.validate(doc)
end

--- Write a document as `path` (redacted, pretty enough to diff: one JSON text), after validating
--- it: an invalid trajectory is a bug of its producer, so it raises.
---@param path string
---@param doc table
---@return string path
function atif.write(path, doc)
  local fs = require('cseng.fs')
  local util = require('cseng.lib.util')
  local secrets = require('cseng.lib.secrets')
  local ok, problems = atif.validate(doc)
  if not ok then errors.raise(errors.EINVAL, 'ATIF trajectory ' .. path .. ' is invalid: ' .. table.concat(problems, '; ')) end
  errors.check(nil, fs.mkdir_p(util.dirname(path)))
  local wok, err, code = fs.write(path, jsonl.encode(secrets.redact_all(doc)) .. '\n')
  if not wok then errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err)) end
  return path
end

return atif
