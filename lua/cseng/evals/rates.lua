--- A provider's sandbox rates ({vcpu_s, gib_s, per_create} in USD, what the cost ledger
--- multiplies) and where they came from, resolved once per provider when a run connects it:
---
---   1. the plan's `rates` (one table for every provider of the run, or a table of them by
---      provider name): source "plan";
---   2. else, with `--pricing FILE` (computesdk's pricing.json), the file's normalised rate of
---      the provider's adapter (their `id` is the adapter's name: e2b, daytona, modal, vercel,
---      runloop): source "pricing", with the file, its sha256, last_updated and confidence;
---   3. else the adapter's own `rates` (its defaults, or what its settings made them): source
---      "adapter"; an adapter without rates (local, docker) has none (source "none").
---
--- computesdk's pricing.json normalises every vendor to one figure, `total_1vcpu_2gb_hr` ($/hour
--- for 1 vCPU + 2 GB), beside `cpu_per_vcpu_hr`. It becomes vcpu_s = cpu_per_vcpu_hr / 3600 and
--- gib_s = (total − cpu) / 2 / 3600, so 1 vCPU + 2 GiB costs exactly their total (a vendor that
--- bundles memory with CPU gets gib_s = 0); without a CPU figure, or one above the total, the
--- whole total is per vCPU. Their GB is taken as GiB. They publish no per-create fee: the
--- adapter's stays. The file is input from elsewhere: a bad field is a one-line ECONFIG naming
--- the file and the field.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')

local rates = {}

rates.KEYS = { 'vcpu_s', 'gib_s', 'per_create' }
local IS_KEY = { vcpu_s = true, gib_s = true, per_create = true }
local MAX_RATE = 1000 -- USD per second (or per create): a rate past it is a typo
local MAX_HR = 10000  -- USD per hour, in a pricing file
local MAX_BYTES = 16 * 1024 * 1024

local function describe(v)
  if type(v) == 'string' then return string.format('%q', #v > 60 and (v:sub(1, 60) .. '...') or v) end
  if type(v) == 'table' then return 'a table' end
  return tostring(v)
end

-- a decoded JSON object (not a list: cjson gives both as tables)
local function is_object(v) return type(v) == 'table' and getmetatable(v) ~= jsonl.array_mt and #v == 0 end

local function rate_ok(v) return type(v) == 'number' and v == v and v >= 0 and v <= MAX_RATE end

-- One {vcpu_s, gib_s, per_create} table: every key one of those, every value a rate.
local function check_one(t, where)
  if type(t) ~= 'table' then
    errors.raise(errors.EPLAN, string.format('%s: expected a table {vcpu_s, gib_s, per_create}, got %s', where, describe(t)))
  end
  for k, v in pairs(t) do
    if not IS_KEY[k] then
      errors.raise(errors.EPLAN, string.format('%s: unknown rate %s (vcpu_s, gib_s, per_create)', where, describe(k)))
    end
    if not rate_ok(v) then
      errors.raise(errors.EPLAN, string.format('%s.%s: expected USD in [0, %d], got %s', where, k, MAX_RATE, describe(v)))
    end
  end
end

-- Whether a plan's rates are one table for every provider (it has a rate key) or one per provider.
local function flat(plan_rates)
  for k in pairs(plan_rates) do if IS_KEY[k] then return true end end
  return false
end

--- Check a plan's `rates`: one {vcpu_s, gib_s, per_create} table for every provider of the run,
--- or a table of them by provider name. Raises EPLAN naming where and the field
--- ("plans/x.lua: rates.e2b.vcpu_s: expected USD in [0, 1000], got -1").
---@param v any
---@param where string the plan file
function rates.check_plan(v, where)
  if v == nil then return end
  if type(v) ~= 'table' then check_one(v, where .. ': rates') end
  if flat(v) then check_one(v, where .. ': rates') return end
  for name, t in pairs(v) do
    if type(name) ~= 'string' then errors.raise(errors.EPLAN, string.format('%s: rates: a provider name, got %s', where, describe(name))) end
    check_one(t, where .. ': rates.' .. name)
  end
end

---@class rates.pricing
---@field file string
---@field sha256 string
---@field last_updated string|nil
---@field basis string
---@field by_id table<string, {vcpu_s: number, gib_s: number, total_1vcpu_2gb_hr: number, cpu_per_vcpu_hr: number|nil, confidence: string|nil}>

--- Read computesdk's pricing.json (see the header). Providers without a normalised total are
--- left out (they seed nothing).
---@param path string
---@return rates.pricing
function rates.load_pricing(path)
  local function bad(field, want, v)
    errors.raise(errors.ECONFIG, string.format('%s: %s: expected %s, got %s', path, field, want, describe(v)))
  end
  local st = fs.stat(path)
  if not st then errors.raise(errors.ECONFIG, path .. ': --pricing: no such file') end
  if st.size and st.size > MAX_BYTES then bad('(the file)', 'at most ' .. MAX_BYTES .. ' bytes', st.size .. ' bytes') end
  local text, err = fs.read(path)
  if not text then errors.raise(errors.ECONFIG, path .. ': ' .. tostring(err)) end
  local doc, derr = jsonl.decode(text)
  if doc == nil then errors.raise(errors.ECONFIG, path .. ': not valid JSON: ' .. tostring(derr)) end
  if not is_object(doc) then bad('(the file)', 'a JSON object {meta, providers}', doc) end
  local meta = doc.meta
  if not is_object(meta) then bad('meta', 'an object', meta) end
  local basis = meta.normalization_basis
  if type(basis) ~= 'string' or not basis:find('1 vCPU + 2 GB', 1, true) then
    bad('meta.normalization_basis', '"1 vCPU + 2 GB RAM / hour" (the basis these rates are read on)', basis)
  end
  if meta.last_updated ~= nil and type(meta.last_updated) ~= 'string' then bad('meta.last_updated', 'a string', meta.last_updated) end
  if type(doc.providers) ~= 'table' or (next(doc.providers) ~= nil and #doc.providers == 0) then
    bad('providers', 'a list', doc.providers)
  end
  local seen = {}
  local out = { file = path, sha256 = crypto.sha256_hex(text), last_updated = meta.last_updated, basis = basis, by_id = {} }
  for i, p in ipairs(doc.providers) do
    local at = string.format('providers[%d]', i)
    if not is_object(p) then bad(at, 'an object', p) end
    local id = p.id
    if type(id) ~= 'string' or not id:match('^[%w][%w._-]*$') or #id > 64 then bad(at .. '.id', 'a provider name', id) end
    if seen[id] then bad(at .. '.id', 'one entry per provider', id .. ' (again)') end
    seen[id] = true
    local pr = p.pricing
    if pr ~= nil and not is_object(pr) then bad(at .. '.pricing', 'an object', pr) end
    local n = pr and pr.normalized
    if n ~= nil and not is_object(n) then bad(at .. '.pricing.normalized', 'an object', n) end
    if n then
      local function hr(k)
        local v = n[k]
        if v == nil then return nil end
        if type(v) ~= 'number' or v ~= v or v < 0 or v > MAX_HR then
          bad(at .. '.pricing.normalized.' .. k, string.format('USD per hour in [0, %d] or null', MAX_HR), v)
        end
        return v
      end
      local total, cpu = hr('total_1vcpu_2gb_hr'), hr('cpu_per_vcpu_hr')
      hr('memory_per_gib_hr')
      if n.confidence ~= nil and type(n.confidence) ~= 'string' then bad(at .. '.pricing.normalized.confidence', 'a string', n.confidence) end
      if total then
        local vcpu_hr, gib_hr
        if cpu and cpu <= total then vcpu_hr, gib_hr = cpu, (total - cpu) / 2 else vcpu_hr, gib_hr = total, 0 end
        out.by_id[id] = { vcpu_s = vcpu_hr / 3600, gib_s = gib_hr / 3600, total_1vcpu_2gb_hr = total,
          cpu_per_vcpu_hr = cpu, confidence = n.confidence }
      end
    end
  end
  return out
end

--- On --resume: the pricing file must be the one the run started with (run_started.rates records
--- its sha256 per provider it priced), so the trials still to run are costed as the ones before.
--- Raises EUSAGE naming the file and both digests.
---@param path string the restored --pricing
---@param recorded table|nil run_started.rates
function rates.check_resume(path, recorded)
  if type(recorded) ~= 'table' then return end
  local want
  for _, r in pairs(recorded) do
    local src = type(r) == 'table' and r.source
    if type(src) == 'table' and src.from == 'pricing' and type(src.sha256) == 'string' then want = src.sha256 end
  end
  if not want then return end
  local text = fs.read(path)
  local now = text and crypto.sha256_hex(text) or 'missing'
  if now ~= want then
    errors.raise(errors.EUSAGE, string.format('--resume: --pricing %s is not the file the run started with (sha256 %s, now %s): '
      .. 'restore it, or start a new run', path, want:sub(1, 12), now:sub(1, 12)))
  end
end

--- The rates of one provider and their source (see the header).
---@param o {name: string, adapter_name: string, adapter_rates: table|nil, plan_rates: table|nil, pricing: rates.pricing|nil}
---@return table|nil rates {vcpu_s, gib_s, per_create}, table source {from = 'plan'|'pricing'|'adapter'|'none', ...}
function rates.resolve(o)
  local own = type(o.adapter_rates) == 'table' and o.adapter_rates or {}
  local function copy(t)
    return { vcpu_s = t.vcpu_s or 0, gib_s = t.gib_s or 0, per_create = t.per_create or 0 }
  end
  local pr = o.plan_rates
  if type(pr) == 'table' then
    local mine
    if flat(pr) then mine = pr else mine = pr[o.name] or pr[o.adapter_name] end
    if mine then
      local r = copy(own)
      for _, k in ipairs(rates.KEYS) do if mine[k] ~= nil then r[k] = mine[k] end end
      return r, { from = 'plan' }
    end
  end
  local pricing = o.pricing
  -- by the adapter's name only: their ids are vendors, and a provider named after another vendor
  -- (a fake called "e2b") is still its adapter
  local e = pricing and pricing.by_id[o.adapter_name]
  if e then
    return { vcpu_s = e.vcpu_s, gib_s = e.gib_s, per_create = own.per_create or 0 }, {
      from = 'pricing', file = pricing.file, sha256 = pricing.sha256, last_updated = pricing.last_updated,
      id = o.adapter_name, total_1vcpu_2gb_hr = e.total_1vcpu_2gb_hr,
      confidence = e.confidence,
    }
  end
  local note = pricing and ('no normalised rate for it in ' .. pricing.file) or nil
  -- an adapter without rates (local, docker) keeps none: its trials' cost source says "no rates"
  if type(o.adapter_rates) ~= 'table' then return nil, { from = 'none', note = note } end
  return copy(own), { from = 'adapter', note = note }
end

return rates
