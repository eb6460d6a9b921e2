--- Reports' charts: self-contained SVG (no script, no external font), colour-blind safe.
local stats = require('cseng.lib.stats')
local format = require('reports.lib.format')
-- ---- SVG charts ---------------------------------------------------------------------------

local svg = {}

--- Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
svg.COLORS = { '#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000', '#F0E442' }
local FONT = 'font-family="-apple-system,BlinkMacSystemFont,Segoe UI,Helvetica,Arial,sans-serif"'

local XML_ESCAPES = { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;', ["'"] = '&#39;' }

local function esc(s)
  return (tostring(s):gsub('[&<>"\']', XML_ESCAPES))
end
svg.escape = esc

local function r1(v) return string.format('%.1f', v) end

local function tick_label(v)
  if v == 0 then return '0' end
  local a = math.abs(v)
  if a >= 10000 then return string.format('%.0fk', v / 1000) end
  if a >= 1 then return string.format('%g', tonumber(string.format('%.4g', v))) end
  return string.format('%g', tonumber(string.format('%.2g', v)))
end

-- A scale over [lo, hi] of the data: log10 (1-2-5 ticks) or linear (nice ticks), mapped to [a, b].
local function scale(lo, hi, a, b, log)
  local s = { log = log }
  if log then
    local function nice_floor(v)
      local e = 10 ^ math.floor(math.log(v, 10) + 1e-9)
      for _, m in ipairs({ 5, 2, 1 }) do if m * e <= v * (1 + 1e-9) then return m * e end end
      return e
    end
    local function nice_ceil(v)
      local e = 10 ^ math.floor(math.log(v, 10) - 1e-9)
      for _, m in ipairs({ 1, 2, 5, 10 }) do if m * e >= v * (1 - 1e-9) then return m * e end end
      return 10 * e
    end
    s.lo, s.hi = nice_floor(lo), nice_ceil(hi)
    if s.hi <= s.lo then s.hi = s.lo * 2 end
    local l0, l1 = math.log(s.lo, 10), math.log(s.hi, 10)
    function s.map(v) return a + (math.log(math.max(v, s.lo), 10) - l0) / (l1 - l0) * (b - a) end
    s.ticks = {}
    local e = 10 ^ math.floor(l0 + 1e-9)
    while e <= s.hi * (1 + 1e-9) do
      for _, m in ipairs({ 1, 2, 5 }) do
        local v = m * e
        if v >= s.lo * (1 - 1e-9) and v <= s.hi * (1 + 1e-9) then s.ticks[#s.ticks + 1] = v end
      end
      e = e * 10
    end
    if #s.ticks > 12 then -- a wide range: powers of ten only, so the labels do not collide
      local thin = {}
      for _, v in ipairs(s.ticks) do
        local l = math.log(v, 10)
        if math.abs(l - math.floor(l + 0.5)) < 1e-9 then thin[#thin + 1] = v end
      end
      s.ticks = thin
    end
  else
    if hi <= lo then hi = lo + math.max(1, math.abs(lo) * 0.1) end
    local raw = (hi - lo) / 5
    local e = 10 ^ math.floor(math.log(raw, 10))
    local step = e
    for _, m in ipairs({ 1, 2, 2.5, 5, 10 }) do if m * e >= raw then step = m * e break end end
    s.lo = math.floor(lo / step) * step
    s.hi = math.ceil(hi / step) * step
    if lo >= 0 and s.lo < 0 then s.lo = 0 end
    function s.map(v) return a + (v - s.lo) / (s.hi - s.lo) * (b - a) end
    s.ticks = {}
    local v = s.lo
    while v <= s.hi + step * 1e-9 do s.ticks[#s.ticks + 1] = v; v = v + step end
  end
  return s
end

-- attrs: more attributes of the root element, {name = value} (written sorted, escaped)
local function frame(w, h, title, attrs)
  local extra = {}
  for k, v in pairs(attrs or {}) do extra[#extra + 1] = string.format(' %s="%s"', k, esc(v)) end
  table.sort(extra)
  return {
    string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s ' ..
      'font-size="12"%s>', w, h, w, h, FONT, table.concat(extra)),
    string.format('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>', w, h),
    title and string.format('<text x="16" y="22" font-size="14" font-weight="bold" fill="#222">%s</text>',
      esc(title)) or '',
  }
end

local function data_range(series)
  local lo, hi, n = math.huge, -math.huge, 0
  for _, s in ipairs(series) do
    for _, v in ipairs(s.values) do
      if v == v then n = n + 1; if v < lo then lo = v end; if v > hi then hi = v end end
    end
  end
  return lo, hi, n
end

-- A series' colour: its own, else the palette's i-th (cycling).
local function series_color(s, i) return s.color or svg.COLORS[(i - 1) % #svg.COLORS + 1] end

-- A value a bar can show: a number, not NaN, not infinite.
local function drawable(v) return type(v) == 'number' and v == v and v ~= math.huge end

local function x_axis(out, sx, x0, x1, y0, y1, label)
  for _, t in ipairs(sx.ticks) do
    local x = r1(sx.map(t))
    out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e5e5e5"/>', x, r1(y0), x, r1(y1))
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#444">%s</text>', x, r1(y1 + 16),
      tick_label(t))
  end
  out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888"/>', r1(x0), r1(y1), r1(x1), r1(y1))
  out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
    r1(y1 + 36), esc(label .. (sx.log and ' (log scale)' or '')))
end

local function legend(out, series, x, y, sub)
  for i, s in ipairs(series) do
    local yy = y + (i - 1) * 34
    out[#out + 1] = string.format('<rect x="%d" y="%d" width="14" height="14" fill="%s"/>', x, yy, s.color)
    out[#out + 1] = string.format('<text x="%d" y="%d" fill="#222">%s</text>', x + 20, yy + 11, esc(s.name))
    if sub then
      out[#out + 1] = string.format('<text x="%d" y="%d" fill="#666" font-size="11">%s</text>', x + 20, yy + 26,
        esc(sub(s)))
    end
  end
end

local function prepare_series(series)
  local out = {}
  for i, s in ipairs(series) do
    local vals = {}
    for _, v in ipairs(s.values or {}) do if type(v) == 'number' and v == v then vals[#vals + 1] = v end end
    table.sort(vals)
    out[i] = { name = s.name, values = vals, color = series_color(s, i) }
  end
  return out
end

local function empty_chart(w, h, title, why)
  local out = frame(w, h, title)
  out[#out + 1] = string.format('<text x="%d" y="%d" text-anchor="middle" fill="#666">%s</text>', w // 2, h // 2,
    esc(why))
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

---@class svg.series
---@field name string
---@field values number[]
---@field color? string

---@class svg.chart_opts
---@field title? string
---@field xlabel? string
---@field width? integer
---@field height? integer
---@field log? boolean log x axis; default: when max/min >= 20

-- The frame and value scale of a chart over series' values in a W x H box with margins L, R,
-- T, B (log when opts.log, or by default when the values span 20x and are positive): returns
-- the SVG lines so far, the scale and the plot area, or the whole "no samples" chart alone.
local function value_axis(series, opts, W, H, L, R, T, B)
  local lo, hi, n = data_range(series)
  if n == 0 then return empty_chart(W, H, opts.title, 'no successful samples') end
  local log = opts.log
  if log == nil then log = lo > 0 and hi / lo >= 20 end
  if lo <= 0 then log = false end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  return frame(W, H, opts.title), scale(lo, hi, x0, x1, log), x0, x1, y0, y1
end

--- Empirical CDFs of several series on one chart (x: value, y: fraction of samples <= x), with
--- each median marked. Returns the SVG text.
---@param series svg.series[]
---@param opts? svg.chart_opts
---@return string
function svg.ecdf(series, opts)
  opts = opts or {}
  local W, H = opts.width or 820, opts.height or 380
  local L, R, T, B = 64, 260, 40, 56
  series = prepare_series(series)
  local out, sx, x0, x1, y0, y1 = value_axis(series, opts, W, H, L, R, T, B)
  if not sx then return out end
  local function sy(p) return y1 - p * (y1 - y0) end
  for _, p in ipairs({ 0, 0.25, 0.5, 0.75, 0.9, 1 }) do
    local y = r1(sy(p))
    out[#out + 1] = string.format('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>', x0, y, x1, y,
      p == 0.5 and '#bbbbbb' or '#eeeeee')
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#444">%d%%</text>', x0 - 6,
      r1(sy(p) + 4), math.floor(p * 100 + 0.5))
  end
  x_axis(out, sx, x0, x1, y0, y1, opts.xlabel or 'value')
  out[#out + 1] = string.format('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>', x0, y0, x0, y1)
  for _, s in ipairs(series) do
    local m = #s.values
    if m > 0 then
      -- at most ~800 steps per curve: beyond that, evenly spaced ranks (a chart, not the data)
      local stride = math.max(1, math.ceil(m / 800))
      local d = { 'M', r1(sx.map(s.values[1])), r1(sy(0)) }
      local i = 1
      while true do
        d[#d + 1] = 'V' .. r1(sy(i / m))
        if i >= m then break end
        local ni = math.min(m, i + stride)
        d[#d + 1] = 'H' .. r1(sx.map(s.values[ni]))
        if stride > 1 then i = ni else i = i + 1 end
      end
      out[#out + 1] = string.format('<path d="%s" fill="none" stroke="%s" stroke-width="2"/>', table.concat(d, ' '),
        s.color)
      local med = stats.quantile_sorted(s.values, 0.5)
      out[#out + 1] = string.format('<circle cx="%s" cy="%s" r="4" fill="%s" stroke="#fff"/>', r1(sx.map(med)),
        r1(sy(0.5)), s.color)
    end
  end
  legend(out, series, x1 + 20, y0, function(s)
    if #s.values == 0 then return 'no successful samples' end
    return string.format('n=%d, p50 %s ms, p99 %s ms', #s.values, format.ms(stats.quantile_sorted(s.values, 0.5)),
      format.ms(stats.quantile_sorted(s.values, 0.99)))
  end)
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

--- Horizontal box plots, one row per series: box p25..p75, line at the median, whiskers
--- p5..p95, dots at min and max. Returns the SVG text.
---@param series svg.series[]
---@param opts? svg.chart_opts
---@return string
function svg.box(series, opts)
  opts = opts or {}
  series = prepare_series(series)
  local W = opts.width or 820
  local row = 36
  local longest = 0
  for _, s in ipairs(series) do longest = math.max(longest, utf8.len(tostring(s.name)) or #tostring(s.name)) end
  local L, R, T, B = math.max(140, 16 + 7 * longest), 30, 40, 56
  local H = opts.height or (T + B + row * math.max(1, #series))
  local out, sx, x0, x1, y0, y1 = value_axis(series, opts, W, H, L, R, T, B)
  if not sx then return out end
  x_axis(out, sx, x0, x1, y0, y1, opts.xlabel or 'value')
  for i, s in ipairs(series) do
    local cy = y0 + (i - 0.5) * row
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#222">%s</text>', x0 - 8, r1(cy + 4),
      esc(s.name))
    if #s.values > 0 then
      local q = function(p) return sx.map(stats.quantile_sorted(s.values, p)) end
      out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>', r1(q(0.05)), r1(cy),
        r1(q(0.95)), r1(cy), s.color)
      out[#out + 1] = string.format(
        '<rect x="%s" y="%s" width="%s" height="%d" fill="%s" fill-opacity="0.25" stroke="%s"/>',
        r1(q(0.25)), r1(cy - 10), r1(math.max(1, q(0.75) - q(0.25))), 20, s.color, s.color)
      out[#out + 1] = string.format('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>',
        r1(q(0.5)), r1(cy - 10),
        r1(q(0.5)), r1(cy + 10), s.color)
      for _, v in ipairs({ s.values[1], s.values[#s.values] }) do
        out[#out + 1] = string.format('<circle cx="%s" cy="%s" r="2.5" fill="%s"/>', r1(sx.map(v)), r1(cy), s.color)
      end
    end
  end
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

---@class svg.bars_opts: svg.chart_opts
---@field ylabel? string
---@field unit? string appended to the values in the bars' tooltips

-- The series of a bar chart with their colours, the largest finite value, and whether any is.
---@class svg.strip_row
---@field name string
---@field values number[] the pooled samples (clean)
---@field labelled? number[] samples the audit labelled: drawn in a row of their own, never pooled
---@field p50? number the median of values
---@field ci_lo? number its 95% CI
---@field ci_hi? number
---@field color? string

--- Per-sample points of one figure, one row per provider: every sample a dot (spread vertically
--- by its rank, so equal values stay visible), the median a bar, its 95% CI a band behind the
--- dots, and the row's n, median and CI at the right. A provider's labelled samples (the fidelity
--- audit's: reused, other resources than asked) get a row of their own below it, hollow dots,
--- with no median or CI: shown, never pooled. opts.attrs: attributes of the root element; opts.fmt:
--- the values' formatter (default format.ms); opts.unit: after the numbers. Returns the SVG text.
---@param rows svg.strip_row[]
---@param opts? svg.chart_opts|{attrs?: table, fmt?: fun(v: number): string, unit?: string}
---@return string
function svg.strip(rows, opts)
  opts = opts or {}
  local fmt, unit = opts.fmt or format.ms, opts.unit and (' ' .. opts.unit) or ''
  local lines, longest = {}, 0
  for i, r in ipairs(rows) do
    local color = series_color(r, i)
    local vals = prepare_series({ { values = r.values } })[1].values
    lines[#lines + 1] = { name = r.name, values = vals, color = color, r = r }
    longest = math.max(longest, utf8.len(tostring(r.name)) or #tostring(r.name))
    if r.labelled and #r.labelled > 0 then
      local lv = prepare_series({ { values = r.labelled } })[1].values
      lines[#lines + 1] = { name = r.name .. ': labelled', values = lv, color = color, r = r, labelled = true }
      longest = math.max(longest, (utf8.len(tostring(r.name)) or #tostring(r.name)) + 10)
    end
  end
  local W, row = opts.width or 820, 40
  local L, R, T, B = math.min(240, math.max(120, 16 + 7 * longest)), 230, 40, 56
  local H = opts.height or (T + B + row * math.max(1, #lines))
  local attrs = opts.attrs
  local all = {}
  for _, l in ipairs(lines) do all[#all + 1] = { values = l.values } end
  local lo, hi, n = data_range(all)
  if n == 0 then
    local out = frame(W, H, opts.title, attrs)
    out[#out + 1] = string.format('<text x="%d" y="%d" text-anchor="middle" fill="#666">%s</text>', W // 2, H // 2,
      esc('no samples with this figure'))
    out[#out + 1] = '</svg>'
    return table.concat(out, '\n') .. '\n'
  end
  local log = opts.log
  if log == nil then log = lo > 0 and hi / lo >= 20 end
  if lo <= 0 then log = false end
  local out = frame(W, H, opts.title, attrs)
  local x0, x1, y0, y1 = L, W - R, T, H - B
  local sx = scale(lo, hi, x0, x1, log)
  x_axis(out, sx, x0, x1, y0, y1, opts.xlabel or 'value')
  for i, l in ipairs(lines) do
    local cy = y0 + (i - 0.5) * row
    out[#out + 1] = string.format('<g class="strip-row%s" data-provider="%s" data-labelled="%s" data-samples="%d">',
      l.labelled and ' labelled' or '', esc(l.r.name), l.labelled and 'true' or 'false', #l.values)
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="%s">%s</text>', x0 - 8, r1(cy + 4),
      l.labelled and '#666' or '#222', esc(l.name))
    local r = l.r
    if not l.labelled and #l.values >= 2 and r.ci_lo and r.ci_hi then -- one sample: no interval to draw
      out[#out + 1] = string.format('<rect class="ci" x="%s" y="%s" width="%s" height="26" fill="%s" fill-opacity="0.15"/>',
        r1(sx.map(r.ci_lo)), r1(cy - 13), r1(math.max(1, sx.map(r.ci_hi) - sx.map(r.ci_lo))), l.color)
    end
    for k, v in ipairs(l.values) do
      local dy = ((k * 7) % 11 - 5) * 2 -- spread by rank: a column of equal values stays countable
      if l.labelled then
        out[#out + 1] = string.format('<circle class="sample" cx="%s" cy="%s" r="3.5" fill="#fff" stroke="%s" ' ..
          'stroke-dasharray="2 1.5"/>', r1(sx.map(v)), r1(cy + dy), l.color)
      else
        out[#out + 1] = string.format('<circle class="sample" cx="%s" cy="%s" r="3" fill="%s" fill-opacity="0.7"/>',
          r1(sx.map(v)), r1(cy + dy), l.color)
      end
    end
    local sub
    if l.labelled then
      sub = string.format('n=%d, labelled: not pooled', #l.values)
    elseif r.p50 then
      out[#out + 1] = string.format('<line class="median" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>',
        r1(sx.map(r.p50)), r1(cy - 14), r1(sx.map(r.p50)), r1(cy + 14), l.color)
      sub = string.format('n=%d, p50 %s%s [%s, %s]', #l.values, fmt(r.p50), unit, r.ci_lo and fmt(r.ci_lo) or '–',
        r.ci_hi and fmt(r.ci_hi) or '–')
    else
      sub = string.format('n=%d: no clean sample', #l.values)
    end
    out[#out + 1] = string.format('<text x="%d" y="%s" fill="%s" font-size="11">%s</text>', x1 + 12, r1(cy + 4),
      l.labelled and '#666' or '#222', esc(sub))
    out[#out + 1] = '</g>'
  end
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

local function bar_series(categories, series)
  local ser, hi, any = {}, 0, false
  for i, s in ipairs(series) do
    ser[i] = { name = s.name, values = s.values or {}, color = series_color(s, i) }
    for j = 1, #categories do
      local v = ser[i].values[j]
      if drawable(v) then any = true; hi = math.max(hi, v) end
    end
  end
  return ser, hi, any
end

-- The value axis of a bar chart: a grid line and a tick label at each tick of sc, across the plot
-- box (x0, x1, y0, y1); upright: values go up the y axis (labels on the left), else along x
-- (labels below).
local function value_grid(out, sc, x0, x1, y0, y1, upright)
  for _, t in ipairs(sc.ticks) do
    local p, stroke = r1(sc.map(t)), t == 0 and '#888' or '#eeeeee'
    if upright then
      out[#out + 1] = string.format('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>', x0, p, x1, p, stroke)
      out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#444">%s</text>', x0 - 6,
        r1(sc.map(t) + 4), tick_label(t))
    else
      out[#out + 1] = string.format('<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>', p, y0, p, y1, stroke)
      out[#out + 1] = string.format('<text x="%s" y="%d" text-anchor="middle" fill="#444">%s</text>', p, y1 + 16, tick_label(t))
    end
  end
end

-- Each drawable value of category j (a finite number): draw(i, v) gives the bar's x, y,
-- width and height; the bar's tooltip names the series, the category and the value.
local function category_bars(out, ser, j, c, unit, draw)
  for i, s in ipairs(ser) do
    local v = s.values[j]
    if drawable(v) then
      local x, y, w, h = draw(i, v)
      out[#out + 1] = string.format('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>',
        x, y, w, h, s.color, esc(string.format('%s, %s: %.4g%s', s.name, c, v, unit or '')))
    end
  end
end

-- The legend at (x, y), and the chart's end.
local function finish(out, ser, x, y)
  legend(out, ser, x, y)
  out[#out + 1] = '</svg>'
  return table.concat(out, '\n') .. '\n'
end

--- Grouped vertical bars: one group per category along x, one bar per series in each group;
--- series[i].values[j] is series i's value in category j (nil or NaN: no bar). The y axis is
--- linear from 0; each bar carries a tooltip with its exact value. Returns the SVG text.
---@param categories string[]
---@param series svg.series[] values aligned with categories
---@param opts? svg.bars_opts
---@return string
function svg.bars(categories, series, opts)
  opts = opts or {}
  -- many categories, or labels wider than their group: horizontal bars, labels on the left
  local widest = 0
  for _, c in ipairs(categories) do widest = math.max(widest, #tostring(c)) end
  if opts.horizontal or (opts.horizontal == nil and (#categories > 12
      or widest * 7 > ((opts.width or 820) - 324) / math.max(1, #categories) * 2)) then
    return svg.hbars(categories, series, opts)
  end
  local W, H = opts.width or 820, opts.height or 380
  local L, R, T, B = 64, 260, 40, 64
  local ser, hi, any = bar_series(categories, series)
  if not any or #categories == 0 then return empty_chart(W, H, opts.title, 'no data') end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  local sy = scale(0, hi, y1, y0, false)
  local out = frame(W, H, opts.title)
  value_grid(out, sy, x0, x1, y0, y1, true)
  if opts.ylabel then
    out[#out + 1] = string.format('<text x="16" y="%s" text-anchor="middle" fill="#222" transform="rotate(-90 16 %s)">%s</text>',
      r1((y0 + y1) / 2), r1((y0 + y1) / 2), esc(opts.ylabel))
  end
  local gw = (x1 - x0) / #categories
  local bw = gw * 0.8 / math.max(1, #ser)
  local stagger = false -- labels wider than their group alternate between two rows
  for _, c in ipairs(categories) do if #tostring(c) * 7 > gw then stagger = true end end
  for j, c in ipairs(categories) do
    local gx = x0 + (j - 1) * gw
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1(gx + gw / 2),
      r1(y1 + ((stagger and j % 2 == 0) and 30 or 16)), esc(c))
    category_bars(out, ser, j, c, opts.unit, function(i, v)
      local top = sy.map(math.max(0, v))
      return r1(gx + gw * 0.1 + (i - 1) * bw), r1(top), r1(math.max(1, bw - 1)), r1(math.max(0.5, y1 - top))
    end)
  end
  if opts.xlabel then
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
      r1(y1 + (stagger and 48 or 36)), esc(opts.xlabel))
  end
  return finish(out, ser, x1 + 20, y0)
end

--- Grouped horizontal bars: one row group per category down the y axis (its label on the left,
--- in full), one bar per series; the height grows with the categories, so 26 or 500 tasks stay
--- readable. Same arguments as svg.bars (which calls this when categories are many or long).
---@param categories string[]
---@param series svg.series[]
---@param opts? svg.bars_opts
---@return string
function svg.hbars(categories, series, opts)
  opts = opts or {}
  local widest = 0
  for _, c in ipairs(categories) do widest = math.max(widest, #tostring(c)) end
  local ser, hi, any = bar_series(categories, series)
  local bh = 12                               -- one bar's height
  local gh = bh * math.max(1, #ser) + 8       -- a category's group
  local L = math.min(420, 16 + widest * 7)    -- room for the labels
  local W = opts.width or math.max(820, L + 560)
  local R, T, B = 260, 40, 56
  local H = T + B + gh * math.max(1, #categories)
  if not any or #categories == 0 then return empty_chart(W, opts.height or 380, opts.title, 'no data') end
  local x0, x1, y0, y1 = L, W - R, T, H - B
  local sx = scale(0, hi, x0, x1, false)
  local out = frame(W, H, opts.title)
  value_grid(out, sx, x0, x1, y0, y1, false)
  for j, c in ipairs(categories) do
    local gy = y0 + (j - 1) * gh
    local label = tostring(c)
    if #label * 7 > L - 12 then label = label:sub(1, (L - 12) // 7 - 1) .. '…' end
    out[#out + 1] = string.format('<text x="%d" y="%s" text-anchor="end" fill="#222">%s<title>%s</title></text>', x0 - 6,
      r1(gy + gh / 2 + 4), esc(label), esc(c))
    category_bars(out, ser, j, c, opts.unit, function(i, v)
      return x0, r1(gy + 4 + (i - 1) * bh), r1(math.max(0.5, sx.map(math.max(0, v)) - x0)), bh - 1
    end)
  end
  local xl = opts.ylabel or opts.xlabel -- the value axis is x here
  if xl then
    out[#out + 1] = string.format('<text x="%s" y="%s" text-anchor="middle" fill="#222">%s</text>', r1((x0 + x1) / 2),
      r1(y1 + 36), esc(xl))
  end
  return finish(out, ser, x1 + 20, y0)
end


return svg
