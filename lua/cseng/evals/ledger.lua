--- The cost ledger: one per trial (`rec.cost`) and one per run (`summary.cost`), and the run's
--- spend ceiling (`--max-cost-usd`).
---
--- A trial's ledger has one line per figure, each with its source:
---   sandbox  seconds x the provider's rates (vcpu_s, gib_s, per_create), source "rates", and
---            rates_from: plan, pricing (computesdk's pricing.json, --pricing) or adapter
---            (lua/cseng/evals/rates.lua); an adapter without rates gives 0 with source "no rates"
---   model    the solver's tokens (input, cached, cache_creation, output, reasoning) and USD:
---            the provider-reported cost when the API gave one, else tokens x lua/cseng/evals/prices.lua;
---            source is the solver's cost_source (provider | prices | mixed | partial | unknown)
--- total_usd sums the lines; `complete` is false when a line is a lower bound or unknown.
---
--- The ceiling (ledger.budget): committed spend (settled trials) plus the in-flight spend of the
--- trials running (for each, the larger of what it reserved at dispatch and what it has spent) plus
--- the estimate of what is asked next must stay <= max. A trial reserves the mean cost of the
--- settled trials (0 before any); an agent turn asks for the cost of its previous turn. A refusal
--- records the stop reason; the runner then dispatches nothing more.
local ledger = {}

--- The ledger of one trial record (after its sandbox was destroyed).
---@param rec table the trial record (sandbox_seconds, estimated_cost_usd, solver_usage)
---@param rates table|nil the provider's rates (lua/cseng/evals/rates.lua)
---@param rates_from string|nil where they came from: plan | pricing | adapter
---@return table cost {total_usd, complete, items[]}
function ledger.trial(rec, rates, rates_from)
  local items = {}
  local has_rates = type(rates) == 'table' and next(rates) ~= nil
  items[1] = { item = 'sandbox', seconds = rec.sandbox_seconds or 0, usd = rec.estimated_cost_usd or 0,
    source = has_rates and 'rates' or 'no rates', rates_from = has_rates and rates_from or nil }
  local total, complete = items[1].usd, true
  local u = rec.solver_usage
  if type(u) == 'table' and (u.turns or u.prompt_tokens) then
    local m = { item = 'model', model = u.model, usd = u.cost_usd, source = u.cost_source or 'unknown',
      tokens = { input = u.prompt_tokens or 0, cached = u.cached_tokens or 0, cache_creation = u.cache_creation_tokens or 0,
        output = u.completion_tokens or 0, reasoning = u.reasoning_tokens or 0 } }
    items[#items + 1] = m
    if type(m.usd) == 'number' then total = total + m.usd end
    if m.source == 'partial' or m.source == 'unknown' then complete = false end
  end
  return { total_usd = total, complete = complete, items = items }
end

--- The run's ledger: sums of the trials' ledgers.
---@param trials table[] trial records
---@return table {total_usd, sandbox_usd, model_usd, trials, incomplete_trials, sources{source=count}}
function ledger.run(trials)
  local r = { total_usd = 0, sandbox_usd = 0, model_usd = 0, trials = 0, incomplete_trials = 0, sources = {} }
  for _, t in ipairs(trials) do
    local c = t.cost
    if type(c) == 'table' and type(c.items) == 'table' then
      r.trials = r.trials + 1
      r.total_usd = r.total_usd + (c.total_usd or 0)
      if not c.complete then r.incomplete_trials = r.incomplete_trials + 1 end
      for _, it in ipairs(c.items) do
        if type(it.usd) == 'number' then
          if it.item == 'sandbox' then r.sandbox_usd = r.sandbox_usd + it.usd else r.model_usd = r.model_usd + it.usd end
        end
        local key = tostring(it.item) .. ':' .. tostring(it.source)
        r.sources[key] = (r.sources[key] or 0) + 1
      end
    end
  end
  return r
end

local Budget = {}
Budget.__index = Budget

--- A spend ceiling of max USD.
---@param max number
function ledger.budget(max)
  return setmetatable({ max = max, committed = 0, settled = 0, inflight = {}, stop = nil }, Budget)
end

function Budget:inflight_usd(except)
  local s = 0
  for k, e in pairs(self.inflight) do
    if k ~= except then s = s + math.max(e.reserved, e.spent) end
  end
  return s
end

--- What one more trial is expected to cost: the mean of the settled ones (0 before any).
function Budget:trial_estimate()
  return self.settled > 0 and self.committed / self.settled or 0
end

-- Refuse: remember why (the first reason is the run's stop reason).
function Budget:refuse(what, need)
  self.stop = self.stop or {
    reason = 'max_cost', what = what, max_usd = self.max, committed_usd = self.committed,
    inflight_usd = self:inflight_usd(), estimate_usd = need,
    message = string.format('the spend ceiling $%.6g would be passed by %s: committed $%.6g + in flight $%.6g + next $%.6g',
      self.max, what, self.committed, self:inflight_usd(), need),
  }
  return false
end

--- May a new trial start? Reserves its estimate when it may.
---@param key any the trial's key
---@return boolean
function Budget:admit_trial(key)
  if self.stop then return false end
  local est = self:trial_estimate()
  if self.committed + self:inflight_usd() + est > self.max + 1e-12 then return self:refuse('a new trial', est) end
  self.inflight[key] = { reserved = est, spent = 0 }
  return true
end

--- May the trial `key` spend `next_usd` more (an agent turn)?
---@return boolean
function Budget:admit_turn(key, next_usd)
  local e = self.inflight[key] or { reserved = 0, spent = 0 }
  if self.committed + self:inflight_usd(key) + e.spent + (next_usd or 0) > self.max + 1e-12 then
    return self:refuse('the next agent turn', next_usd or 0)
  end
  return true
end

--- Record spend of a trial in flight.
function Budget:spend(key, usd)
  if type(usd) ~= 'number' then return end
  local e = self.inflight[key]
  if not e then e = { reserved = 0, spent = 0 }; self.inflight[key] = e end -- a retry after its settle
  e.spent = e.spent + usd
end

--- A trial is over: its total becomes committed.
function Budget:settle(key, total_usd)
  self.inflight[key] = nil
  self.committed = self.committed + (total_usd or 0)
  self.settled = self.settled + 1
end

--- The view an agent loop gets of the budget: admit(next_usd) and spend(usd) for its trial.
function Budget:for_trial(key)
  return {
    admit = function(next_usd) return self:admit_turn(key, next_usd) end,
    spend = function(usd) self:spend(key, usd) end,
  }
end

return ledger
