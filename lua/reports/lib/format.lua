--- Reports' text: numbers, durations, percentages, intervals, markdown tables and escaping, and
--- the answer of a comparison in hyperfine's words.
local stats = require('cseng.lib.stats')
local util = require('cseng.lib.util')

local format = {}

-- ---- formatting ---------------------------------------------------------------------------

local DASH = '–'

--- A number with `digits` decimals ('–' for nil, NaN or infinity).
---@param v number|nil
---@param digits? integer default 2
---@return string
function format.num(v, digits)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return DASH end
  return string.format('%.' .. (digits or 2) .. 'f', v)
end

--- Milliseconds with precision that suits their size: 1234, 123.4, 12.34, 1.234.
---@param v number|nil
---@return string
function format.ms(v)
  if v == nil or v ~= v then return DASH end
  local a = math.abs(v)
  if a >= 1000 then return string.format('%.0f', v) end
  if a >= 100 then return string.format('%.1f', v) end
  if a >= 10 then return string.format('%.2f', v) end
  return string.format('%.3f', v)
end

--- A fraction as a percentage: 0.9967 -> "99.7%", 1 -> "100%".
---@param f number|nil
---@return string
function format.pct(f)
  if f == nil or f ~= f then return DASH end
  if f == 1 then return '100%' end
  if f == 0 then return '0%' end
  return string.format('%.1f%%', f * 100)
end

--- An interval "[lo, hi]" with a formatter (default format.ms).
function format.ci(lo, hi, fmt)
  if lo == nil or hi == nil then return DASH end
  fmt = fmt or format.ms
  return '[' .. fmt(lo) .. ', ' .. fmt(hi) .. ']'
end

--- Bootstrap replicates of the reports' (and the console's) confidence intervals.
format.REPS = 2000

--- The ratio of medians slow/fast with its 95% percentile bootstrap CI (stats.ratio_ci,
--- format.REPS replicates, `seed`), over sorted copies: the interval does not depend on the
--- order the samples were recorded in, so the console and a report of the same run agree.
---@param slow number[]
---@param fast number[]
---@param seed integer
---@return stats.ratio|nil
function format.ratio_of_medians(slow, fast, seed)
  local a, b = util.copy(slow), util.copy(fast)
  table.sort(a)
  table.sort(b)
  return stats.ratio_ci(a, b, { reps = format.REPS, seed = seed })
end

--- The answer of a comparison, hyperfine's way: "fast is 1.23 x faster than slow [95% CI
--- 1.10, 1.37]", or "fast and slow are not distinguishable [95% CI 0.86, 1.30]" when the CI of
--- the ratio slow/fast holds 1 (r: format.ratio_of_medians).
---@param fast string
---@param slow string
---@param r stats.ratio
---@return string
function format.speedup(fast, slow, r)
  local ci = string.format('[95%% CI %s, %s]', format.num(r.lo, 2), format.num(r.hi, 2))
  if r.lo <= 1 and r.hi >= 1 then return string.format('%s and %s are not distinguishable %s', fast, slow, ci) end
  return string.format('%s is %s x faster than %s %s', fast, format.num(r.ratio, 2), slow, ci)
end

--- Escape text for a markdown table cell (pipes, newlines) or inline text. Text from a log is
--- text: no link or image (`](` is escaped, so `[x](javascript:...)` or `![b](https://...)`
--- stays literal) and no HTML tag.
function format.escape(s)
  s = tostring(s == nil and '' or s)
  -- "<" only where it could open an HTML tag, so code spans keep most text intact
  return (s:gsub('\r?\n', ' '):gsub('|', '\\|'):gsub('<([%a/!?])', '&lt;%1'):gsub('%]%(', ']\\('))
end

--- Inline code, safe for any content (uses a longer fence when the text holds backticks).
function format.code(s)
  s = tostring(s):gsub('\r?\n', ' ')
  local fence = '`'
  while s:find(fence, 1, true) do fence = fence .. '`' end
  local pad = (s:sub(1, 1) == '`' or s:sub(-1) == '`') and ' ' or ''
  return fence .. pad .. s .. pad .. fence
end

--- A markdown table. rows: arrays of cells (strings or numbers, escaped here unless a cell is
--- {raw=string}); align: one letter per column, l/r/c (default: first left, others right).
---@param headers string[]
---@param rows any[][]
---@param align? string
---@return string
function format.table(headers, rows, align)
  align = align or ('l' .. string.rep('r', #headers - 1))
  local function cell(v)
    if type(v) == 'table' and v.raw then return v.raw end
    return format.escape(v)
  end
  local out = {}
  local hs = {}
  for i, hd in ipairs(headers) do hs[i] = cell(hd) end
  out[1] = '| ' .. table.concat(hs, ' | ') .. ' |'
  local seps = {}
  for i = 1, #headers do
    local a = align:sub(i, i)
    seps[i] = a == 'r' and '---:' or a == 'c' and ':---:' or ':---'
  end
  out[2] = '| ' .. table.concat(seps, ' | ') .. ' |'
  for _, row in ipairs(rows) do
    local cs = {}
    for i = 1, #headers do cs[i] = cell(row[i] == nil and '' or row[i]) end
    out[#out + 1] = '| ' .. table.concat(cs, ' | ') .. ' |'
  end
  return table.concat(out, '\n') .. '\n'
end

--- The numbers of a field (or function) over a list, skipping nil and non-numbers.
---@param list table[]
---@param get string|fun(item: table): number|nil
---@param keep? fun(item: table): boolean
---@return number[]
function format.values(list, get, keep)
  local f = type(get) == 'function' and get or function(x) return x[get] end
  local out = {}
  for _, x in ipairs(list or {}) do
    if not keep or keep(x) then
      local v = f(x)
      if type(v) == 'number' and v == v then out[#out + 1] = v end
    end
  end
  return out
end


return format
