--- Dockerfile reading: FROM, WORKDIR, ENV, ARG, USER, COPY/ADD of build-context files, RUN,
--- CMD/ENTRYPOINT. Besides the final state (env, workdir, user, copies, runs) the parse keeps
--- the last stage's instructions in order (steps), which lua/cseng/workload/recipe.lua turns into the build
--- recipe every provider uses (native build or replay).
local dockerfile = {}

dockerfile.DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

--- Split a line into words, honouring double/single quotes (shell-like, no expansion).
local function words(s)
  local out, cur, i, q = {}, nil, 1, nil
  while i <= #s do
    local c = s:sub(i, i)
    if q then
      if c == q then q = nil
      elseif c == '\\' and q == '"' and i < #s then i = i + 1; cur = cur .. s:sub(i, i)
      else cur = cur .. c end
    elseif c == '"' or c == "'" then
      q = c; cur = cur or ''
    elseif c:match('%s') then
      if cur then out[#out + 1] = cur; cur = nil end
    elseif c == '\\' and i < #s then
      i = i + 1; cur = (cur or '') .. s:sub(i, i)
    else
      cur = (cur or '') .. c
    end
    i = i + 1
  end
  if cur then out[#out + 1] = cur end
  return out
end

--- Expand $VAR and ${VAR} from the build's ARG/ENV values (as docker does in most instructions).
local function expand(s, vars)
  return (s:gsub('%${([%w_]+)}', function(k) return vars[k] or '' end)
           :gsub('%$([%a_][%w_]*)', function(k) return vars[k] or '' end))
end

local function json_array(s)
  if not s:match('^%s*%[') then return nil end
  local ok, cjson = pcall(require, 'cjson')
  if not ok then return nil end
  local ok2, v = pcall(cjson.decode, s)
  if ok2 and type(v) == 'table' then return v end
  return nil
end

---@class Recipe
---@field from string|nil the base image of the last stage
---@field workdir string|nil
---@field env table<string,string> final ENV values
---@field env_order string[] ENV names in the order they were set
---@field copies {src:string[], dst:string, from:string|nil, chown:string|nil, line:integer, add:boolean}[]
---@field runs {cmd:string, line:integer}[]
---@field user string|nil
---@field cmd string[]|string|nil
---@field entrypoint string[]|string|nil
---@field stages integer
---@field steps table[] the last stage's instructions in order: {op='ENV', line, vars={{k,v}...}},
---  {op='ARG', line, name, value}, {op='WORKDIR', line, path}, {op='USER', line, user},
---  {op='COPY', line, copy=<an entry of copies>}, {op='RUN', line, cmd, args={k=v ARGs in effect}}

--- Parse Dockerfile text. Errors name the source and line.
---@param text string
---@param name? string
---@return Recipe|nil, string|nil
function dockerfile.parse(text, name)
  name = name or 'Dockerfile'
  local r = { env = {}, env_order = {}, copies = {}, runs = {}, stages = 0, steps = {} }
  local arg_values = {} -- ARG values in effect (RUN steps see them as environment variables)
  -- base images define PATH; ENV PATH="${PATH}:..." extends it
  local vars = { PATH = dockerfile.DEFAULT_PATH }
  local logical, start_line = nil, nil
  local lineno = 0
  local function instr(line, at)
    local op, rest = line:match('^%s*(%a+)%s*(.-)%s*$')
    if not op then return nil, string.format('%s:%d: cannot read instruction', name, at), 'EPARSE' end
    op = op:upper()
    if op == 'FROM' then
      local w = words(rest)
      local img = w[1]
      if img == '--platform' or (img and img:match('^%-%-')) then img = w[2] end
      r.from = img and expand(img, vars)
      r.stages = r.stages + 1
      r.workdir = nil
      r.copies, r.runs, r.env, r.env_order, r.steps, r.user = {}, {}, {}, {}, {}, nil -- only the last stage matters
      arg_values = {}
    elseif op == 'WORKDIR' then
      local w = expand(rest, vars)
      if w:sub(1, 1) ~= '/' then w = (r.workdir or '/') .. '/' .. w end
      r.workdir = w:gsub('//+', '/')
      r.steps[#r.steps + 1] = { op = 'WORKDIR', line = at, path = r.workdir }
    elseif op == 'ENV' or op == 'ARG' then
      local w = words(rest)
      local pairs_ = {}
      if w[1] and not w[1]:find('=') and op == 'ENV' then
        pairs_[1] = { w[1], rest:match('^%S+%s+(.*)$') or '' } -- legacy "ENV key value"
      else
        for _, kv in ipairs(w) do
          local k, v = kv:match('^([^=]+)=(.*)$')
          if k then pairs_[#pairs_ + 1] = { k, v }
          elseif op == 'ARG' then pairs_[#pairs_ + 1] = { kv, vars[kv] } end
        end
      end
      local set = {}
      for _, kv in ipairs(pairs_) do
        local v = kv[2] and expand(kv[2], vars)
        if op == 'ENV' then
          if r.env[kv[1]] == nil then r.env_order[#r.env_order + 1] = kv[1] end
          r.env[kv[1]] = v or ''
          set[#set + 1] = { kv[1], v or '' }
        else
          arg_values[kv[1]] = v
          r.steps[#r.steps + 1] = { op = 'ARG', line = at, name = kv[1], value = v }
        end
        vars[kv[1]] = v
      end
      if op == 'ENV' and #set > 0 then r.steps[#r.steps + 1] = { op = 'ENV', line = at, vars = set } end
    elseif op == 'COPY' or op == 'ADD' then
      local w = json_array(rest) or words(rest)
      local c = { line = at, add = op == 'ADD', src = {} }
      local args = {}
      for _, x in ipairs(w) do
        local flag, val = x:match('^%-%-([%w%-]+)=?(.*)$')
        if flag then c[flag] = val ~= '' and val or true
        else args[#args + 1] = expand(x, vars) end
      end
      if #args < 2 then return nil, string.format('%s:%d: %s needs a source and a destination', name, at, op), 'EPARSE' end
      for i = 1, #args - 1 do c.src[i] = args[i] end
      c.dst = args[#args] == '.' and '' or args[#args]:gsub('^%./', '') -- "." and "./x": the workdir's
      if c.dst:sub(1, 1) ~= '/' then
        local base = r.workdir or '/'
        c.dst = (base == '/' and '/' or base .. '/') .. c.dst
        if args[#args]:sub(-1) == '/' and c.dst:sub(-1) ~= '/' then c.dst = c.dst .. '/' end
      end
      r.copies[#r.copies + 1] = c
      r.steps[#r.steps + 1] = { op = 'COPY', line = at, copy = c }
    elseif op == 'RUN' then
      local cmd = rest
      local exec_form = json_array(rest)
      if exec_form then -- exec form: the words, quoted for the shell
        local q = {}
        for i, x in ipairs(exec_form) do q[i] = "'" .. tostring(x):gsub("'", "'\\''") .. "'" end
        cmd = table.concat(q, ' ')
      end
      r.runs[#r.runs + 1] = { cmd = rest, line = at }
      local a = {}
      for k, v in pairs(arg_values) do if v ~= nil then a[k] = v end end
      r.steps[#r.steps + 1] = { op = 'RUN', line = at, cmd = cmd, args = a }
    elseif op == 'USER' then
      r.user = expand(rest, vars)
      r.steps[#r.steps + 1] = { op = 'USER', line = at, user = r.user }
    elseif op == 'CMD' then
      r.cmd = json_array(rest) or rest
    elseif op == 'ENTRYPOINT' then
      r.entrypoint = json_array(rest) or rest
    end
    return true
  end
  for raw in (text .. '\n'):gmatch('(.-)\r?\n') do
    lineno = lineno + 1
    local line = raw
    local skip = line:match('^%s*#') -- comments, between or inside instructions, are dropped
      or (not logical and line:match('^%s*$')) -- so are blank lines between instructions
    if not skip then
      local cont = line:match('^(.-)\\%s*$')
      if logical then logical = logical .. ' ' .. (cont or line)
      else logical, start_line = cont or line, lineno end
      if not cont then
        local ok, err, code = instr(logical, start_line)
        if not ok then return nil, err, code end
        logical = nil
      end
    end
  end
  if logical then
    local ok, err, code = instr(logical, start_line)
    if not ok then return nil, err, code end
  end
  if r.stages == 0 then return nil, string.format('%s: no FROM instruction', name), 'EPARSE' end
  return r
end

--- Render a recipe's ENV as an ordered list of {name, value}.
function dockerfile.env_list(r)
  local out = {}
  for _, k in ipairs(r.env_order) do out[#out + 1] = { k, r.env[k] } end
  return out
end

dockerfile.words = words

--- Map an image through user substitutions: {"pattern=replacement", ...} or {pattern=repl}.
--- Patterns are globs where * matches any run of characters.
function dockerfile.map_image(image, map)
  if not image or not map then return image end
  local entries = {}
  for k, v in pairs(map) do
    if type(k) == 'number' then
      local p, r = tostring(v):match('^(.-)=(.+)$')
      if p then entries[#entries + 1] = { p, r } end
    else
      entries[#entries + 1] = { k, v }
    end
  end
  for _, e in ipairs(entries) do
    local pat = '^' .. e[1]:gsub('[%^%$%(%)%%%.%[%]%+%-%?]', '%%%0'):gsub('%*', '.*') .. '$'
    if image:match(pat) then return e[2] end
  end
  return image
end

return dockerfile
