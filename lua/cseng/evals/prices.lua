--- Model prices in USD per 1M tokens, by kind: input (uncached), cached_input (cache reads),
--- cache_write (cache creation), output. Reasoning tokens are billed as output and are already
--- inside the completion/output count of both APIs, so they have no price of their own (they are
--- recorded, never added twice). Public list prices when written; they change: configure prices
--- (llm_price_* options, CSENG_LLM_PRICE_* variables) for anything that matters.
local errors = require('cseng.lib.errors')

local prices = {}

--- model id -> {input, cached_input, cache_write, output}; an id is looked up as given, then
--- without its "vendor/" prefix.
prices.TABLE = {
  ['openai/gpt-4o'] = { input = 2.50, cached_input = 1.25, cache_write = 2.50, output = 10.00 },
  ['openai/gpt-4o-mini'] = { input = 0.15, cached_input = 0.075, cache_write = 0.15, output = 0.60 },
  ['openai/gpt-4.1'] = { input = 2.00, cached_input = 0.50, cache_write = 2.00, output = 8.00 },
  ['openai/gpt-4.1-mini'] = { input = 0.40, cached_input = 0.10, cache_write = 0.40, output = 1.60 },
  ['anthropic/claude-sonnet-4'] = { input = 3.00, cached_input = 0.30, cache_write = 3.75, output = 15.00 },
  ['google/gemini-2.5-flash'] = { input = 0.30, cached_input = 0.075, cache_write = 0.30, output = 2.50 },
}

local KINDS = { 'input', 'cached_input', 'cache_write', 'output' }
prices.KINDS = KINDS

--- The price of a model: configured (options llm_price_in/out[/cached/cache_write], else the
--- CSENG_LLM_PRICE_IN/OUT/CACHED/CACHE_WRITE variables; in and out both or neither; cached and
--- cache_write default to in), else the table, else nil.
---@param options table
---@param getenv fun(name: string): string|nil
---@param model string
---@return table|nil price {input, cached_input, cache_write, output}, string|nil source "configured" | "table"
function prices.lookup(options, getenv, model)
  local o = options or {}
  local function get(opt, var) local v = o[opt]; if v == nil and getenv then v = getenv(var) end; return v end
  local pin, pout = get('llm_price_in', 'CSENG_LLM_PRICE_IN'), get('llm_price_out', 'CSENG_LLM_PRICE_OUT')
  if pin ~= nil or pout ~= nil then
    local a, b = tonumber(pin), tonumber(pout)
    if not a or not b or a < 0 or b < 0 then
      errors.raise(errors.ECONFIG, string.format(
        'LLM prices: set both CSENG_LLM_PRICE_IN and CSENG_LLM_PRICE_OUT (USD per 1M tokens,'
          .. ' or llm_price_in/out), got %s and %s', tostring(pin), tostring(pout)), { stage = 'solve' })
    end
    local p = { input = a, output = b }
    for _, k in ipairs({ { 'llm_price_cached', 'CSENG_LLM_PRICE_CACHED', 'cached_input' },
      { 'llm_price_cache_write', 'CSENG_LLM_PRICE_CACHE_WRITE', 'cache_write' } }) do
      local v = get(k[1], k[2])
      local n = v ~= nil and tonumber(v) or a
      if not n or n < 0 then
        errors.raise(errors.ECONFIG, string.format('LLM prices: %s must be a non-negative number, got %s', k[2], tostring(v)),
          { stage = 'solve' })
      end
      p[k[3]] = n
    end
    return p, 'configured'
  end
  local p = prices.TABLE[model] or (type(model) == 'string' and prices.TABLE[model:match('^[^/]+/(.+)$') or ''])
  if not p and type(model) == 'string' then -- "gpt-4o" finds "openai/gpt-4o"
    for id, q in pairs(prices.TABLE) do if id:match('/(.+)$') == model then p = q break end end
  end
  if p then return p, 'table' end
  return nil
end

---@class TokenCounts
---@field input integer all input tokens (cached and cache-creation ones included)
---@field cached integer input tokens read from a cache
---@field cache_creation integer input tokens written to a cache
---@field output integer
---@field reasoning integer (inside output)

--- USD of token counts at a price.
---@param t TokenCounts
---@param p table
---@return number
function prices.cost(t, p)
  local cached, creation = t.cached or 0, t.cache_creation or 0
  local plain = math.max(0, (t.input or 0) - cached - creation)
  return (plain * p.input + cached * (p.cached_input or p.input) + creation * (p.cache_write or p.input)
    + (t.output or 0) * p.output) / 1e6
end

return prices
