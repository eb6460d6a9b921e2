--- Reports: run a template over loaded runs, write the markdown and its charts.
---
--- A template is a Lua file returning `function(data, h) -> markdown string` (lua/reports/*.lua).
--- `data` is what load.load returns: every run of the inputs with its events, and the trial
--- records across runs, grouped by provider, mode and task. Inputs are run logs (.jsonl), run
--- summaries (.json: cseng's, or the seed harness's, which have no events), or directories of both.
--- `h` is render.context(output): the formatting (lua/reports/lib/format.lua) and loading
--- (load.lua) helpers, statistics (stats.lua), SVG charts (h.svg, svg.lua), and h.chart, which
--- writes an SVG next to the markdown and returns the image link (a relative path, so the chart
--- renders on GitHub).
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local stats = require('cseng.lib.stats')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local load = require('reports.lib.load')
local format = require('reports.lib.format')
local svg = require('reports.lib.svg')

local render = {}

-- What h offers a template besides its own fields: every formatting and loading helper, and svg.
local helpers = { svg = svg }
for k, v in pairs(load) do helpers[k] = v end
for k, v in pairs(format) do helpers[k] = v end

-- ---- templates --------------------------------------------------------------------------

--- Where a template lives: a path (relative to the current directory, else to the cseng tree),
--- or a bare name from lua/reports/ ("startup").
---@param name string
---@return string
function render.template_path(name)
  if fs.exists(name) then return name end
  local in_tree = fs.join(sys.root(), name)
  if fs.exists(in_tree) then return in_tree end
  local by_name = fs.join(sys.root(), 'lua/reports/' .. name:gsub('%.lua$', '') .. '.lua')
  if not name:find('/') and fs.exists(by_name) then return by_name end
  errors.raise(errors.ENOENT, 'report template not found: ' .. name)
end

--- The helpers a template receives; `output` decides where charts go.
---@param output string the markdown path ("-" for stdout: charts go to the current directory)
---@return table h
function render.context(output)
  local h = setmetatable({ files = {}, output = output, stats = stats, util = util }, { __index = helpers })
  local dir = output == '-' and '.' or util.dirname(output)
  local stem = output == '-' and 'report' or util.basename(output):gsub('%.md$', '')
  --- Keep an SVG to write beside the markdown; returns the markdown image link.
  function h.chart(name, svg_text, alt)
    local file = stem .. '.' .. name:gsub('[^%w%-_.]', '-') .. '.svg'
    h.files[#h.files + 1] = { path = fs.join(dir, file), content = svg_text }
    return string.format('![%s](%s)', (alt or name):gsub('[%[%]]', ''), file)
  end
  return h
end

---@class report.render_opts
---@field inputs? string[] run logs (.jsonl files or directories)
---@field data? report.data already loaded
---@field template string a path or a name from lua/reports/
---@field output string markdown path, or "-" for stdout

--- Load, run the template, write the markdown and its charts. Returns {output, files, markdown}.
---@param opts report.render_opts
---@return table
function render.render(opts)
  local data = opts.data or load.load(opts.inputs)
  local path = render.template_path(opts.template)
  local chunk, err = loadfile(path)
  if not chunk then errors.raise(errors.EPLAN, err) end
  local fn = chunk()
  if type(fn) ~= 'function' then errors.raise(errors.EPLAN, path .. ': a report template must return function(data, helpers)') end
  local h = render.context(opts.output)
  local md = fn(data, h)
  if type(md) ~= 'string' then errors.raise(errors.EPLAN, path .. ': the template returned ' .. type(md) .. ', not a string') end
  local written = {}
  for _, f in ipairs(h.files) do
    errors.check(nil, fs.mkdir_p(util.dirname(f.path)))
    local ok, werr = fs.write(f.path, f.content)
    if not ok then errors.raise(errors.EIO, 'cannot write ' .. f.path .. ': ' .. tostring(werr)) end
    written[#written + 1] = f.path
  end
  if opts.output == '-' then
    io.stdout:write(md)
  else
    errors.check(nil, fs.mkdir_p(util.dirname(opts.output)))
    local ok, werr = fs.write(opts.output, md)
    if not ok then errors.raise(errors.EIO, 'cannot write ' .. opts.output .. ': ' .. tostring(werr)) end
  end
  return { output = opts.output, files = written, markdown = md, warnings = data.warnings }
end


return render
