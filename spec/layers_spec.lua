-- Imports point down (docs/ARCHITECTURE.md, "Layers"): every `require` of a literal module name in
-- lua/ (lua/meta/ is LuaLS stubs, never loaded) is read with a small Lua tokenizer (so requires in
-- comments and strings do not count), each module is given its layer, and an edge that the table
-- ALLOWED below does not list fails, as does any cycle between modules (lazy requires inside
-- functions included: a cycle is a cycle whether or not the load order hides it).
local fs = require('cseng.fs')
local sys = require('cseng.sys')

local ROOT = sys.root()

-- The layers, by module name prefix (first match wins). `engine` is the C modules (luaopen_cseng_*
-- in engine/) and the engine's own Lua (cseng.serve_dispatch); `cseng.task` is the C scheduler,
-- `cseng.workload.*` the benchmark tasks' modules (datasets, staging, recipes, replay).
local LAYER_OF = {
  { '^cseng%.cli%.', 'cli' },
  { '^cseng%.run%.', 'run' },
  { '^cseng%.watch%.', 'watch' },
  { '^cseng%.view%.', 'view' },
  { '^cseng%.history%.', 'history' },
  { '^reports%.', 'reports' },
  { '^solvers%.', 'solvers' },
  { '^providers%.', 'providers' },
  { '^cseng%.workload%.', 'workload' },
  { '^cseng%.images%.', 'images' },
  { '^cseng%.results%.', 'results' },
  { '^cseng%.evals%.', 'evals' },
  { '^cseng%.lib%.', 'lib' },
  { '^cseng%.serve_dispatch$', 'engine' },
}

-- The allowed edges: a module of the layer on the left may require modules of the layers on the
-- right (and of its own layer, and the engine's C modules and external libraries: cjson, busted).
local ALLOWED = {
  cli = { 'run', 'watch', 'view', 'history', 'reports', 'solvers', 'providers', 'workload', 'images', 'results',
    'evals', 'lib' },
  watch = { 'history', 'results', 'evals', 'lib' }, -- cseng watch: runs are child processes, never the run layer
  history = { 'results', 'evals', 'lib' }, -- the history store, regression detection, OpenMetrics
  run = { 'solvers', 'providers', 'workload', 'images', 'results', 'evals', 'lib' },
  view = { 'history', 'reports', 'results', 'evals', 'lib' }, -- the results viewer (cseng view)
  reports = { 'results', 'evals', 'lib' }, -- the markdown templates and their helpers (lua/reports/lib/)
  solvers = { 'evals', 'lib' },
  providers = { 'workload', 'images', 'lib' },
  workload = { 'images', 'lib' },
  images = { 'lib' },
  results = { 'evals', 'lib' },
  evals = { 'lib' }, -- the evals layer's records: ATIF, pass@k, the cost ledger, prices, the model proxy
  lib = {},
  engine = {},
}

-- Upward edges that a pending change removes, each still present (a stale entry fails):
-- file, required module, why it is still here.
local PENDING = {}

-- ---- reading requires --------------------------------------------------------------------------

-- Tokens of a Lua source: {kind = 'name'|'string'|'op', value, line}; comments dropped.
local function tokens(src)
  local out, i, line, n = {}, 1, 1, #src
  local function long_bracket(at) -- at '[': returns the level and the position after the opening
    local eq = src:match('^%[(=*)%[', at)
    if eq then return #eq, at + #eq + 2 end
  end
  local function skip_long(level, from) -- returns the contents' end and the position after
    local close = ']' .. string.rep('=', level) .. ']'
    local e = src:find(close, from, true) or n
    return e - 1, e + #close
  end
  while i <= n do
    local c = src:sub(i, i)
    if c == '\n' then line = line + 1; i = i + 1
    elseif c:match('%s') then i = i + 1
    elseif src:sub(i, i + 1) == '--' then
      local level, body = long_bracket(i + 2)
      local stop
      if level then stop = select(2, skip_long(level, body)) else stop = (src:find("\n", i, true) or n + 1) end
      for _ in src:sub(i, stop - 1):gmatch('\n') do line = line + 1 end
      i = stop
    elseif c == '[' and long_bracket(i) then
      local level, body = long_bracket(i)
      local last, stop = skip_long(level, body)
      out[#out + 1] = { kind = 'string', value = src:sub(body, last), line = line }
      for _ in src:sub(i, stop - 1):gmatch('\n') do line = line + 1 end
      i = stop
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while j <= n do
        local d = src:sub(j, j)
        if d == '\\' then buf[#buf + 1] = src:sub(j, j + 1); j = j + 2
        elseif d == c then break
        else buf[#buf + 1] = d; j = j + 1 end
      end
      out[#out + 1] = { kind = 'string', value = table.concat(buf), line = line }
      i = j + 1
    elseif c:match('[%a_]') then
      local w = src:match('^[%w_]+', i)
      out[#out + 1] = { kind = 'name', value = w, line = line }
      i = i + #w
    else
      local op = src:match('^%.%.%.?', i) or c
      out[#out + 1] = { kind = 'op', value = op, line = line }
      i = i + #op
    end
  end
  return out
end

-- The literal requires of a source: {module, line}. Forms: require 'm', require "m",
-- require('m'), require [[m]], pcall(require, 'm'). A computed name (require('providers.' .. n))
-- is not an import edge of the code's structure and is left out.
local function requires_of(src)
  local t, out = tokens(src), {}
  for k, tok in ipairs(t) do
    if tok.kind == 'name' and tok.value == 'require' and not (t[k - 1] and t[k - 1].value == '.') then
      local a, b, c = t[k + 1], t[k + 2], t[k + 3]
      if a and a.kind == 'string' then out[#out + 1] = { module = a.value, line = tok.line }
      elseif a and a.value == '(' and b and b.kind == 'string' and c and c.value == ')' then
        out[#out + 1] = { module = b.value, line = tok.line }
      elseif a and a.value == ',' and t[k - 2] and t[k - 2].value == 'pcall' and b and b.kind == 'string'
          and c and (c.value == ')' or c.value == ',') then
        out[#out + 1] = { module = b.value, line = tok.line }
      end
    end
  end
  return out
end

local function lua_files(dir, out)
  out = out or {}
  for _, e in ipairs(fs.walk(ROOT .. '/' .. dir)) do
    if e.type == 'file' and e.path:match('%.lua$') then out[#out + 1] = dir .. '/' .. e.path end
  end
  table.sort(out)
  return out
end

local function module_of(path)
  return (path:gsub('^lua/', ''):gsub('%.lua$', ''):gsub('/init$', ''):gsub('/', '.'))
end

local C_MODULES = {}
for _, e in ipairs(fs.walk(ROOT .. '/engine')) do
  if e.path:match('%.c$') then
    for name in assert(fs.read(ROOT .. '/engine/' .. e.path)):gmatch('luaopen_cseng_([%w_]+)') do
      C_MODULES['cseng.' .. name] = true
    end
  end
end

local function layer_of(mod)
  if C_MODULES[mod] then return 'engine' end
  for _, r in ipairs(LAYER_OF) do
    if mod:match(r[1]) then return r[2] end
  end
  return nil -- an external library (cjson, busted, lfs)
end

-- The graph: files of lua/ but lua/meta/, their modules and edges.
local function graph()
  local files, modules = {}, {}
  for _, path in ipairs(lua_files('lua')) do
    if not path:match('^lua/meta/') then
      files[#files + 1] = path
      modules[module_of(path)] = path
    end
  end
  local edges = {}
  for _, path in ipairs(files) do
    for _, r in ipairs(requires_of(assert(fs.read(ROOT .. '/' .. path)))) do
      edges[#edges + 1] = { file = path, from = module_of(path), to = r.module, line = r.line }
    end
  end
  return files, modules, edges
end

local function allowed(from_layer, to_layer)
  if to_layer == nil or to_layer == 'engine' or to_layer == from_layer then return true end
  for _, l in ipairs(ALLOWED[from_layer] or {}) do if l == to_layer then return true end end
  return false
end

local function is_pending(e)
  for _, p in ipairs(PENDING) do
    if p[1] == e.file and p[2] == e.to then return true end
  end
  return false
end

-- Violations of the layering: a list of one-line strings.
local function upward(edges, modules)
  local bad = {}
  for _, e in ipairs(edges) do
    local fl, tl = layer_of(e.from), layer_of(e.to)
    if fl == nil then
      bad[#bad + 1] = string.format('%s: module %s has no layer (add it to LAYER_OF)', e.file, e.from)
    elseif not allowed(fl, tl) and not is_pending(e) then
      bad[#bad + 1] = string.format('%s:%d: %s (%s) requires %s (%s): not an allowed edge', e.file, e.line,
        e.from, fl, e.to, tl)
    elseif e.to:match('^cseng%.') and tl ~= 'engine' and not modules[e.to] then
      bad[#bad + 1] = string.format('%s:%d: requires %s, which is neither a file of lua/ nor an engine module',
        e.file, e.line, e.to)
    end
    -- a provider adapter is one file: it may use providers/shared/, not another adapter
    if fl == 'providers' and tl == 'providers' and not e.from:match('^providers%.shared%.')
        and not e.to:match('^providers%.shared%.') then
      bad[#bad + 1] = string.format('%s:%d: adapter %s requires adapter %s (share code through providers/shared/)',
        e.file, e.line, e.from, e.to)
    end
  end
  return bad
end

-- Cycles between modules of lua/: each as "a -> b -> a".
local function cycles(edges, modules)
  local out_edges = {}
  for _, e in ipairs(edges) do
    if modules[e.to] then
      out_edges[e.from] = out_edges[e.from] or {}
      table.insert(out_edges[e.from], e.to)
    end
  end
  local state, stack, found, seen = {}, {}, {}, {}
  local function visit(m)
    state[m] = 'open'
    stack[#stack + 1] = m
    for _, n in ipairs(out_edges[m] or {}) do
      if state[n] == 'open' then
        local loop = {}
        for k = #stack, 1, -1 do
          table.insert(loop, 1, stack[k])
          if stack[k] == n then break end
        end
        loop[#loop + 1] = n
        local key = table.concat(loop, ' -> ')
        if not seen[key] then seen[key] = true; found[#found + 1] = key end
      elseif not state[n] then
        visit(n)
      end
    end
    stack[#stack] = nil
    state[m] = 'done'
  end
  local names = {}
  for m in pairs(modules) do names[#names + 1] = m end
  table.sort(names)
  for _, m in ipairs(names) do if not state[m] then visit(m) end end
  return found
end

-- ---- the specs ---------------------------------------------------------------------------------

describe('layers: the require parser', function()
  it('reads every literal form, and none in comments or strings', function()
    local src = table.concat({
      "local a = require 'cseng.lib.util'",
      'local b = require("cseng.run.plan")',
      "local ok, c = pcall(require, 'cjson')",
      "-- require 'cseng.cli.main' in a comment",
      "--[[ require 'cseng.cli.x'",
      "   still a comment ]]",
      "local s = \"require 'cseng.cli.y'\"",
      "local n = require('providers.' .. name)",
      "local ok2, m = pcall(require, 'cseng.cli.commands.' .. name)",
      "local d = require [[cseng.results.log]]",
    }, '\n')
    local got = {}
    for _, r in ipairs(requires_of(src)) do got[#got + 1] = r.module .. '@' .. r.line end
    assert.same({ 'cseng.lib.util@1', 'cseng.run.plan@2', 'cjson@3', 'cseng.results.log@10' }, got)
  end)

  it('finds an upward edge and a cycle when there is one', function()
    local modules = { ['cseng.lib.a'] = 'lua/cseng/lib/a.lua', ['cseng.lib.b'] = 'lua/cseng/lib/b.lua',
      ['cseng.run.r'] = 'lua/cseng/run/r.lua' }
    local edges = {
      { file = 'lua/cseng/lib/a.lua', from = 'cseng.lib.a', to = 'cseng.run.r', line = 3 },
      { file = 'lua/cseng/lib/a.lua', from = 'cseng.lib.a', to = 'cseng.lib.b', line = 4 },
      { file = 'lua/cseng/lib/b.lua', from = 'cseng.lib.b', to = 'cseng.lib.a', line = 1 },
    }
    local bad = upward(edges, modules)
    assert.equal(1, #bad)
    assert.matches('lua/cseng/lib/a.lua:3: cseng.lib.a %(lib%) requires cseng.run.r %(run%)', bad[1])
    assert.same({ 'cseng.lib.a -> cseng.lib.b -> cseng.lib.a' }, cycles(edges, modules))
  end)
end)

describe('layers of lua/', function()
  local files, modules, edges = graph()

  it('reads the whole tree', function()
    assert.is_true(#files > 60, #files .. ' files')
    assert.is_true(#edges > 300, #edges .. ' requires')
    assert.is_true(C_MODULES['cseng.http'] and C_MODULES['cseng.task'])
  end)

  it('the allowed-edges table itself has no cycle between layers', function()
    local layer_edges, layer_modules = {}, {}
    for from, tos in pairs(ALLOWED) do
      layer_modules[from] = true
      for _, to in ipairs(tos) do layer_edges[#layer_edges + 1] = { from = from, to = to } end
    end
    assert.same({}, cycles(layer_edges, layer_modules))
  end)

  it('every require points down the layers (docs/ARCHITECTURE.md)', function()
    local bad = upward(edges, modules)
    assert.same({}, bad, table.concat(bad, '\n'))
  end)

  it('every pending upward edge is still there (else remove it from PENDING)', function()
    for _, p in ipairs(PENDING) do
      local there = false
      for _, e in ipairs(edges) do if e.file == p[1] and e.to == p[2] then there = true end end
      assert.is_true(there, p[1] .. ' no longer requires ' .. p[2] .. ': remove it from PENDING')
    end
  end)

  it('no module is part of a cycle', function()
    local found = cycles(edges, modules)
    assert.same({}, found, table.concat(found, '\n'))
  end)
end)

-- One spelling for a module's imports, `local m = require('m')`: the call form is the one tools
-- (and readers) take for an import line, so a header of requires reads as imports, not as code.
describe('imports are spelt require(...)', function()
  it('no top-level import in lua/, spec/, bench/ or plans/ is written require \'m\'', function()
    local bad = {}
    for _, dir in ipairs({ 'lua', 'spec', 'bench', 'plans' }) do
      for _, path in ipairs(lua_files(dir)) do
        local n = 0
        for line in io.lines(ROOT .. '/' .. path) do
          n = n + 1
          if line:match('^%s*local [%w_]+ = require%s*[\'"]') then bad[#bad + 1] = path .. ':' .. n .. ': ' .. line end
        end
      end
    end
    assert.same({}, bad, table.concat(bad, '\n'))
  end)
end)
