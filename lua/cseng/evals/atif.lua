--- ATIF trajectories (Harbor's Agent Trajectory Interchange Format, RFC 0001, v1.4): a builder the
--- agent solvers fill step by step, a validator that checks a document against the RFC's rules
--- (listed in docs/SOLVERS.md, "ATIF"), and the writer of `<trial>.trajectory.json`.
---
---   local tr = atif.new { session_id = 'run/task/1', agent = { name = 'cseng-agent', version = '1' },
---                         model_name = 'fake/model' }
---   tr:system(prompt); tr:user(instruction)
---   local step = tr:agent { message = '...', tool_calls = {{id=, name=, arguments=}}, metrics = {...} }
---   tr:observe(step, call_id, 'exit code: 0 ...')
---   local doc = tr:finish()        -- final_metrics are the sums of the steps' metrics
---   local ok, problems = atif.validate(doc)
local jsonl = require 'cseng.lib.jsonl'
local clock = require 'cseng.clock'
local errors = require 'cseng.lib.errors'

local atif = {}

atif.SCHEMA_VERSION = 'ATIF-v1.4'

local Trajectory = {}
Trajectory.__index = Trajectory

---@class AtifMeta
---@field session_id string
---@field agent {name: string, version: string, extra?: table}
---@field model_name? string
---@field notes? string
---@field extra? table

--- A new trajectory under construction.
---@param meta AtifMeta
function atif.new(meta)
  local agent_ = { name = tostring(meta.agent.name), version = tostring(meta.agent.version),
    model_name = meta.model_name, extra = meta.agent.extra }
  return setmetatable({
    doc = { schema_version = atif.SCHEMA_VERSION, session_id = tostring(meta.session_id), agent = agent_,
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
---@param s {message?: string, reasoning?: string, model_name?: string, tool_calls?: table[], metrics?: AtifMetrics, extra?: table}
function Trajectory:agent(s)
  local step = { source = 'agent', message = s.message or '', reasoning_content = s.reasoning, model_name = s.model_name,
    metrics = s.metrics, extra = s.extra }
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

local SOURCES = { system = true, user = true, agent = true }
local AGENT_ONLY = { 'model_name', 'reasoning_effort', 'reasoning_content', 'tool_calls', 'metrics' }
local INT_METRICS = { 'prompt_tokens', 'completion_tokens', 'cached_tokens' }
local FINAL_INT = { 'total_prompt_tokens', 'total_completion_tokens', 'total_cached_tokens', 'total_steps' }

local function is_int(v) return math.type(v) == 'integer' end
local function is_obj(v) return type(v) == 'table' and getmetatable(v) ~= jsonl.array_mt and v[1] == nil end
local function is_arr(v) return type(v) == 'table' and (getmetatable(v) == jsonl.array_mt or next(v) == nil or v[1] ~= nil) end
local function iso8601(s)
  return type(s) == 'string' and s:match('^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d') ~= nil
    and (s:match('Z$') or s:match('[%+%-]%d%d:?%d%d$')) ~= nil
end

--- Check a decoded ATIF document. Returns true, or nil and the list of problems (each naming the
--- field path, e.g. "steps[3].tool_calls[1].arguments: not an object"). Every problem is collected.
---@param doc table
---@return true|nil ok, string[] problems
function atif.validate(doc)
  local p = {}
  local function bad(path, why) p[#p + 1] = path .. ': ' .. why end
  if not is_obj(doc) then return nil, { 'root: not an object' } end
  if type(doc.schema_version) ~= 'string' or not doc.schema_version:match('^ATIF%-v1%.%d+$') then
    bad('schema_version', 'expected "ATIF-v1.N", got ' .. tostring(doc.schema_version))
  end
  if type(doc.session_id) ~= 'string' or doc.session_id == '' then bad('session_id', 'required, a non-empty string') end
  local ag = doc.agent
  if not is_obj(ag) then bad('agent', 'required, an object')
  else
    if type(ag.name) ~= 'string' or ag.name == '' then bad('agent.name', 'required, a non-empty string') end
    if type(ag.version) ~= 'string' or ag.version == '' then bad('agent.version', 'required, a non-empty string') end
    if ag.model_name ~= nil and type(ag.model_name) ~= 'string' then bad('agent.model_name', 'not a string') end
    if ag.extra ~= nil and not is_obj(ag.extra) then bad('agent.extra', 'not an object') end
  end
  if doc.notes ~= nil and type(doc.notes) ~= 'string' then bad('notes', 'not a string') end
  if doc.extra ~= nil and not is_obj(doc.extra) then bad('extra', 'not an object') end
  local steps = doc.steps
  if not is_arr(steps) then
    bad('steps', 'required, an array')
    steps = {}
  end
  local ids = {} -- every tool_call_id of the document, for source_call_id references
  for i, s in ipairs(steps) do
    local at = string.format('steps[%d]', i)
    if not is_obj(s) then bad(at, 'not an object') goto continue end
    if s.step_id ~= i then bad(at .. '.step_id', string.format('expected %d (sequential from 1), got %s', i, tostring(s.step_id))) end
    if not SOURCES[s.source] then bad(at .. '.source', 'one of system, user, agent; got ' .. tostring(s.source)) end
    if type(s.message) ~= 'string' then bad(at .. '.message', 'required, a string (may be empty)') end
    if s.timestamp ~= nil and not iso8601(s.timestamp) then bad(at .. '.timestamp', 'not ISO 8601: ' .. tostring(s.timestamp)) end
    if s.source ~= 'agent' then
      for _, f in ipairs(AGENT_ONLY) do
        if s[f] ~= nil then bad(at .. '.' .. f, 'only an agent step may carry it') end
      end
    end
    if s.reasoning_effort ~= nil and type(s.reasoning_effort) ~= 'string' and type(s.reasoning_effort) ~= 'number' then
      bad(at .. '.reasoning_effort', 'a string or a number')
    end
    for _, f in ipairs({ 'model_name', 'reasoning_content' }) do
      if s[f] ~= nil and type(s[f]) ~= 'string' then bad(at .. '.' .. f, 'not a string') end
    end
    if s.tool_calls ~= nil then
      if not is_arr(s.tool_calls) then bad(at .. '.tool_calls', 'not an array')
      else
        for j, c in ipairs(s.tool_calls) do
          local cat = string.format('%s.tool_calls[%d]', at, j)
          if type(c.tool_call_id) ~= 'string' or c.tool_call_id == '' then bad(cat .. '.tool_call_id', 'required, a string')
          elseif ids[c.tool_call_id] then bad(cat .. '.tool_call_id', 'duplicate ' .. c.tool_call_id)
          else ids[c.tool_call_id] = i end
          if type(c.function_name) ~= 'string' or c.function_name == '' then bad(cat .. '.function_name', 'required, a string') end
          if not is_obj(c.arguments) then bad(cat .. '.arguments', 'required, an object') end
        end
      end
    end
    local m = s.metrics
    if m ~= nil then
      if not is_obj(m) then bad(at .. '.metrics', 'not an object')
      else
        for _, f in ipairs(INT_METRICS) do
          if m[f] ~= nil and (not is_int(m[f]) or m[f] < 0) then bad(at .. '.metrics.' .. f, 'a non-negative integer') end
        end
        if is_int(m.cached_tokens) and is_int(m.prompt_tokens) and m.cached_tokens > m.prompt_tokens then
          bad(at .. '.metrics.cached_tokens', 'more than prompt_tokens (cached tokens are a subset of them)')
        end
        if m.cost_usd ~= nil and (type(m.cost_usd) ~= 'number' or m.cost_usd < 0) then bad(at .. '.metrics.cost_usd', 'a non-negative number') end
        for _, f in ipairs({ 'prompt_token_ids', 'completion_token_ids', 'logprobs' }) do
          if m[f] ~= nil and not is_arr(m[f]) then bad(at .. '.metrics.' .. f, 'not an array') end
        end
        if m.extra ~= nil and not is_obj(m.extra) then bad(at .. '.metrics.extra', 'not an object') end
      end
    end
    if s.extra ~= nil and not is_obj(s.extra) then bad(at .. '.extra', 'not an object') end
    ::continue::
  end
  -- observations: after every tool call is known (a result refers to a call of its own step)
  for i, s in ipairs(steps) do
    local o = is_obj(s) and s.observation
    if o then
      local at = string.format('steps[%d].observation', i)
      if not is_obj(o) or not is_arr(o.results) then bad(at, 'an object with a results array')
      else
        for j, r in ipairs(o.results) do
          local rat = string.format('%s.results[%d]', at, j)
          if r.source_call_id ~= nil then
            if type(r.source_call_id) ~= 'string' then bad(rat .. '.source_call_id', 'not a string')
            elseif ids[r.source_call_id] ~= i then
              local why = ids[r.source_call_id] and 'refers to a tool call of another step: ' or 'refers to no tool call: '
              bad(rat .. '.source_call_id', why .. r.source_call_id)
            end
          end
          if r.content ~= nil and type(r.content) ~= 'string' then bad(rat .. '.content', 'not a string') end
          if r.content == nil and r.subagent_trajectory_ref == nil then bad(rat, 'neither content nor subagent_trajectory_ref') end
          if r.subagent_trajectory_ref ~= nil then
            if not is_arr(r.subagent_trajectory_ref) then bad(rat .. '.subagent_trajectory_ref', 'not an array')
            else
              for k, ref in ipairs(r.subagent_trajectory_ref) do
                if type(ref.session_id) ~= 'string' then bad(string.format('%s.subagent_trajectory_ref[%d].session_id', rat, k), 'required, a string') end
              end
            end
          end
        end
      end
    end
  end
  local fm = doc.final_metrics
  if fm ~= nil then
    if not is_obj(fm) then bad('final_metrics', 'not an object')
    else
      for _, f in ipairs(FINAL_INT) do
        if fm[f] ~= nil and (not is_int(fm[f]) or fm[f] < 0) then bad('final_metrics.' .. f, 'a non-negative integer') end
      end
      -- this project's rule, stricter than the RFC's "sum of ...": the totals equal the steps' sums
      local sums = atif.totals(steps)
      for _, f in ipairs({ 'total_prompt_tokens', 'total_completion_tokens', 'total_cached_tokens' }) do
        if is_int(fm[f]) and fm[f] ~= sums[f] then
          bad('final_metrics.' .. f, string.format('%d, but the steps sum to %s', fm[f], tostring(sums[f])))
        end
      end
      if is_int(fm.total_steps) and fm.total_steps ~= #steps and type(doc.notes) ~= 'string' then
        bad('final_metrics.total_steps', string.format('%d for %d steps, and no notes explain it', fm.total_steps, #steps))
      end
      if fm.total_cost_usd ~= nil then
        if type(fm.total_cost_usd) ~= 'number' or fm.total_cost_usd < 0 then bad('final_metrics.total_cost_usd', 'a non-negative number')
        elseif sums.total_cost_usd and math.abs(fm.total_cost_usd - sums.total_cost_usd) > 1e-9 * math.max(1, sums.total_cost_usd) then
          bad('final_metrics.total_cost_usd', string.format('%.9g, but the steps sum to %.9g', fm.total_cost_usd, sums.total_cost_usd))
        end
      end
      if fm.extra ~= nil and not is_obj(fm.extra) then bad('final_metrics.extra', 'not an object') end
    end
  end
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
  local fs = require 'cseng.fs'
  local util = require 'cseng.lib.util'
  local secrets = require 'cseng.lib.secrets'
  local ok, problems = atif.validate(doc)
  if not ok then errors.raise(errors.EINVAL, 'ATIF trajectory ' .. path .. ' is invalid: ' .. table.concat(problems, '; ')) end
  errors.check(nil, fs.mkdir_p(util.dirname(path)))
  local wok, err, code = fs.write(path, jsonl.encode(secrets.redact_all(doc)) .. '\n')
  if not wok then errors.raise(code or errors.EIO, 'cannot write ' .. path .. ': ' .. tostring(err)) end
  return path
end

return atif
