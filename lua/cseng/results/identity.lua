--- A run's identity as its log records it (run_started.identity, written by the run frame:
--- plan, solver, model, providers, mode, dataset and its digest, task selection, options), and
--- what two runs differ in. Logs written before the identity record existed fall back to the
--- top-level fields of run_started.
local identity = {}

--- The identity of a run from its run_started record (nil for none).
---@param started table|nil
---@return table|nil
function identity.of(started)
  if type(started) ~= 'table' then return nil end
  local id = type(started.identity) == 'table' and started.identity or {}
  local providers = id.providers or started.providers or (started.provider and { started.provider }) or nil
  return {
    kind = id.kind or started.kind or 'tasks', plan = id.plan or started.plan, solver = id.solver or started.solver,
    model = id.model, providers = providers, mode = id.mode or started.mode, dataset = id.dataset or started.dataset,
    dataset_sha256 = id.dataset_sha256, selection = id.selection, label = id.label or started.label,
  }
end

local function str(v)
  if v == nil then return '-' end
  if type(v) == 'table' then
    local parts = {}
    for _, x in ipairs(v) do parts[#parts + 1] = tostring(x) end
    return table.concat(parts, ',')
  end
  return tostring(v)
end

--- What two identities differ in that makes their comparison suspect: solver, model, mode,
--- dataset (by digest when both have one), the task selection, providers. A list of
--- {field, a, b} (empty when they agree or when either is unknown).
---@return table[]
function identity.diff(a, b)
  local out = {}
  if not a or not b then return out end
  local function check(field, x, y)
    if x ~= nil and y ~= nil and str(x) ~= str(y) then out[#out + 1] = { field = field, a = str(x), b = str(y) } end
  end
  check('solver', a.solver, b.solver)
  check('model', a.model, b.model)
  check('mode', a.mode, b.mode)
  if a.dataset_sha256 and b.dataset_sha256 then
    check('dataset', a.dataset_sha256:sub(1, 12), b.dataset_sha256:sub(1, 12))
  else
    check('dataset', a.dataset, b.dataset)
  end
  local sa, sb = a.selection or {}, b.selection or {}
  if sa.ids_sha256 and sb.ids_sha256 and sa.ids_sha256 ~= sb.ids_sha256 then
    out[#out + 1] = { field = 'selection', a = str(sa.count) .. ' task(s) ' .. sa.ids_sha256:sub(1, 8),
      b = str(sb.count) .. ' task(s) ' .. sb.ids_sha256:sub(1, 8) }
  end
  return out
end

--- One line saying what differs ("the runs differ in solver (A: nop, B: gold), ..."), or nil.
function identity.warning(a, b)
  local d = identity.diff(a, b)
  if #d == 0 then return nil end
  local parts = {}
  for _, x in ipairs(d) do parts[#parts + 1] = string.format('%s (A: %s, B: %s)', x.field, x.a, x.b) end
  return 'the runs differ in ' .. table.concat(parts, ', ') .. ': a change below may be theirs, not the provider\'s'
end

return identity
