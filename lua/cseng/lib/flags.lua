--- Command-line flags: --name value, --name=value, --flag (booleans). Unknown flags and bad
--- values are one-line errors (the caller exits 2).
local flags = {}


-- The edit distance of a and b (insertions, deletions, substitutions, adjacent swaps).
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = { [0] = i } end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      d[i][j] = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        d[i][j] = math.min(d[i][j], d[i - 2][j - 2] + 1)
      end
    end
  end
  return d[#a][#b]
end

--- The candidate closest to name (a typo's "did you mean"): within 2 edits (1 for names of
--- up to 4 letters), or a candidate name starts with; nil when none is close.
---@param name string
---@param candidates string[]
---@return string|nil
function flags.closest(name, candidates)
  local best, best_d
  for _, c in ipairs(candidates) do
    local dist = distance(name, c)
    if dist < (best_d or math.huge) then best, best_d = c, dist end
  end
  if best and best_d <= (#name <= 4 and 1 or 2) then return best end
  for _, c in ipairs(candidates) do
    if #name >= 3 and c:sub(1, #name) == name then return c end
  end
  return nil
end

-- An option spec does not declare: pass.spec's (a command that passes options on to another)
-- goes to passed as given, with its value; one pass.refuse names is refused with its reason;
-- any other is unknown, with the nearest name. Returns the index of its last argument, or nil
-- and the error.
local function not_declared(args, i, a, name, value, spec, pass, passed)
  local ps = pass and pass.spec[name]
  local why = pass and pass.refuse and pass.refuse[name]
  if ps and not why then
    passed[#passed + 1] = a
    if ps.type ~= 'bool' and value == nil then
      i = i + 1
      if args[i] == nil then return nil, string.format('--%s needs a value', name) end
      passed[#passed + 1] = args[i]
    end
    return i
  end
  if why then return nil, string.format('--%s is not %s option: %s', name, pass.what or 'an', why) end
  local names = {}
  for k in pairs(spec) do names[#names + 1] = k end
  for k in pairs(pass and pass.spec or {}) do if not (pass.refuse or {})[k] then names[#names + 1] = k end end
  table.sort(names)
  local near = flags.closest(name, names)
  return nil, string.format("unknown option '%s'%s", a:match('^[^=]*'), near and ("; did you mean --" .. near .. '?') or '')
end

--- Parse args against a spec (flags.declare's): { ['task-index'] = { key = 'task_index', type = 'string' }, ... }.
--- Types: string, int, number, bool, list (comma-separated, repeatable), multi (repeatable).
--- Returns values, positional or nil, error. With pass = {spec = another command's spec, refuse =
--- {name = why}, what = 'a watch'}: the options only pass.spec declares (and all after `--`) are
--- not parsed but returned third, as given, for that command (`cseng watch` passes them to its runs).
function flags.parse(args, spec, pass)
  local out, pos, passed = {}, {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == '--' then
      local rest = pass and passed or pos
      for j = i + 1, #args do rest[#rest + 1] = args[j] end
      break
    elseif a:sub(1, 2) == '--' or a:match('^%-%a$') then
      local name, value = a:match('^%-%-([^=]+)=(.*)$')
      name = name or a:gsub('^%-%-?', '')
      local flag = (a:sub(2, 2) == '-' and '--' or '-') .. name -- as typed, in messages (-o, --output)
      local s = spec[name]
      if not s then
        local last, err = not_declared(args, i, a, name, value, spec, pass, passed)
        if not last then return nil, err end
        i = last
      elseif s.type == 'bool' then
        if value ~= nil then
          if value ~= 'true' and value ~= 'false' then return nil, string.format('%s takes no value', flag) end
          out[s.key] = value == 'true'
        else
          out[s.key] = true
        end
      else
        if value == nil then
          i = i + 1
          value = args[i]
          if value == nil then return nil, string.format('%s needs a value', flag) end
        end
        if s.type == 'int' then
          local n = math.tointeger(tonumber(value))
          if not n or (s.min and n < s.min) then
            return nil, string.format('%s: expected a whole number%s, got %q', flag, s.min and (' >= ' .. s.min) or '', value)
          end
          out[s.key] = n
        elseif s.type == 'number' then
          local n = tonumber(value)
          if not n or n <= 0 then return nil, string.format('%s: expected a positive number, got %q', flag, value) end
          out[s.key] = n
        elseif s.type == 'list' then
          out[s.key] = out[s.key] or {}
          for item in value:gmatch('[^,]+') do out[s.key][#out[s.key] + 1] = item end
        elseif s.type == 'multi' then
          out[s.key] = out[s.key] or {}
          out[s.key][#out[s.key] + 1] = value
        else
          if s.choices then
            local okc = false
            for _, c in ipairs(s.choices) do if c == value then okc = true end end
            if not okc then return nil, string.format('%s: expected one of %s, got %q', flag, table.concat(s.choices, ', '), value) end
          end
          out[s.key] = value
        end
      end
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return out, pos, passed
end

--- The modules of lua/<dir>/ (one level: the helpers in lua/<dir>/shared/ are not listed) that
--- export a function named fn: their names as a user types them ('_' as '-' when dash is true),
--- sorted. What an "unknown NAME" error and `cseng run --help` list.
---@param dir string e.g. 'solvers'
---@param fn string e.g. 'solve'
---@param dash? boolean
---@return string[]
function flags.modules(dir, fn, dash)
  local fs, sys = require 'cseng.fs', require 'cseng.sys'
  local out = {}
  for _, f in ipairs(fs.list(sys.root() .. '/lua/' .. dir) or {}) do
    local n = f:match('^(.-)%.lua$')
    local ok, m = false, nil
    if n then ok, m = pcall(require, dir .. '.' .. n) end
    -- only the folder's own files: shared/ holds the helpers of the others (lua/solvers/shared/)
    if ok and type(m) == 'table' and type(m[fn]) == 'function' then
      out[#out + 1] = dash and (n:gsub('_', '-')) or n
    end
  end
  table.sort(out)
  return out
end

--- "unknown KIND 'name'; did you mean X? (KINDs: a, b, c)".
---@param kind string
---@param name string
---@param names string[]
---@return string
function flags.unknown(kind, name, names)
  local near = flags.closest(tostring(name), names)
  return string.format("unknown %s '%s'%s (%ss: %s)", kind, tostring(name), near and ('; did you mean ' .. near .. '?') or '',
    kind, table.concat(names, ', '))
end

--- The types a flag may have (a set): what parse reads, and what the adapters' prewarm_flags may use.
flags.TYPES = { string = true, int = true, number = true, bool = true, list = true, multi = true }

--- A command's flags, declared once and in the order its --help lists them:
---   flags.declare { { 'task-limit', 'int', min = 1, arg = 'N', help = 'at most N tasks' }, ... }
--- Each entry: the flag's name, its type (string, int, number, bool, list, multi), and any of
--- key (where parse puts the value; default the name with '_' for '-'), arg, help, min,
--- choices, alias (a one-letter form, e.g. 'o', listed as "same as --NAME"); or `from`, another
--- spec whose flag of that name this one is (the fields given here override its own). Returns the spec
--- parse takes (name -> {key, type, ...}; an alias maps to its flag's entry) and the names in
--- their declared order (what help lists).
---@param list table[]
---@return table spec, string[] order
function flags.declare(list)
  local spec, order = {}, {}
  for i, e in ipairs(list) do
    local name, t = e[1], e[2]
    local base = e.from and assert(e.from[name], '--' .. tostring(name) .. ': not a flag of the spec it is from') or {}
    t = t or base.type
    assert(type(name) == 'string' and name:match('^[a-z][a-z0-9-]*$'), 'flag ' .. i .. ': a name (lower case, digits, -)')
    assert(flags.TYPES[t], '--' .. tostring(name) .. ': a type of string, int, number, bool, list, multi')
    assert(spec[name] == nil, '--' .. name .. ' is declared twice')
    local s = {}
    for k, v in pairs(base) do s[k] = v end
    for k, v in pairs(e) do if type(k) == 'string' and k ~= 'from' then s[k] = v end end
    s.key, s.type = e.key or base.key or (name:gsub('-', '_')), t
    spec[name], order[#order + 1] = s, name
    if s.alias then
      assert(spec[s.alias] == nil, '-' .. s.alias .. ' is declared twice')
      spec[s.alias] = s
    end
  end
  return spec, order
end

--- Help text lines for a spec, in order (flags.declare's): one a flag, then its alias.
function flags.help(spec, order)
  local lines = {}
  for _, name in ipairs(order) do
    local s = spec[name]
    local arg = s.type == 'bool' and '' or (' ' .. (s.arg or s.type:upper()))
    local help = s.help
    if type(help) == 'function' then help = help() end -- computed when shown (a listing)
    lines[#lines + 1] = string.format('  --%-28s %s', name .. arg, help or '')
    if s.alias then lines[#lines + 1] = string.format('  -%-29s same as --%s', s.alias .. arg, name) end
  end
  return table.concat(lines, '\n')
end

return flags
