--- `cseng providers [--json]`: which adapters exist (every lua/providers/*.lua), which have their
--- credentials, and what each breaks of the adapter contract (lua/providers/shared/contract.lua).
--- `cseng providers --capabilities`: which of the arena's workloads (lua/cseng/run/workloads/) each
--- adapter runs, as a matrix: the ones every adapter runs, and those it declares
--- (contract.CAPABILITIES: snapshot, pause, fork, egress, standard; bulk_upload and pause_memory change how).
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local command = require('cseng.cli.command')
local jsonl = require('cseng.lib.jsonl')
local contract = require('providers.shared.contract')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'providers',
  summary = 'list provider adapters and whether their credentials are set',
  usage = 'usage: cseng providers [--json] [--capabilities] [--env-file FILE]\n\n' ..
    'Lists lua/providers/*.lua with their description and credential variables, and\n' ..
    'what an adapter breaks of the contract (docs/providers/README.md); exit 1 when one does.\n' ..
    "With --capabilities: the arena's workloads each adapter runs (docs/ARENA.md, \"Primitives\").",
  flags = {
    { 'json', 'bool', help = 'one JSON document: [{name, ready, missing, credentials, description, remote, violations, error}]' },
    { 'capabilities', 'bool', help = "the arena's workloads each adapter runs (--workload), as a matrix; with --json " ..
        '{adapter: {workload: bool}}' },
    { 'env-file', 'multi', arg = 'FILE',
      help = 'read credentials from FILE too (KEY=VALUE; repeatable, a later file wins; a file wins over the environment)' },
  },
}

--- Every adapter: {name, ready, missing[], credentials[], description, remote, violations[], error}.
function cmd.list(getenv)
  getenv = getenv or os.getenv
  local dir = sys.root() .. '/lua/providers'
  local names = {}
  for _, f in ipairs(fs.list(dir) or {}) do
    local n = f:match('^(.-)%.lua$')
    if n then names[#names + 1] = n end
  end
  table.sort(names)
  local out = {}
  for _, n in ipairs(names) do
    local ok, p = pcall(require, 'providers.' .. n)
    if not ok then
      out[#out + 1] = { name = n, ready = false, error = tostring(p), missing = jsonl.array(), credentials = jsonl.array() }
    else -- the helpers beside the adapters are in lua/providers/shared/, not listed
      local violations = jsonl.array(contract.check(p, n, fs.read(dir .. '/' .. n .. '.lua')))
      local missing, creds = jsonl.array(), jsonl.array()
      for _, alts in ipairs(type(p) == 'table' and contract.credential_alternatives(p) or {}) do
        local have = false
        for _, a in ipairs(alts) do if getenv(a) and getenv(a) ~= '' then have = true end end
        creds[#creds + 1] = table.concat(alts, '|')
        if not have then missing[#missing + 1] = table.concat(alts, '|') end
      end
      out[#out + 1] = { name = n:gsub('_', '-'), module = n, ready = #missing == 0 and #violations == 0, missing = missing,
        credentials = creds, description = type(p) == 'table' and p.description or nil,
        remote = type(p) == 'table' and p.remote == true, violations = violations }
    end
  end
  return out
end

-- The primitives' capabilities that change how a workload runs, not whether.
local HOW = { 'bulk_upload', 'pause_memory' }

--- The matrix of `--capabilities`: {columns = {workload names..., bulk_upload, pause_memory},
--- rows = {{name, cells = {column = bool}}}} for every adapter that loads.
function cmd.capabilities()
  local workloads = require('cseng.run.workloads')
  local columns = {}
  for _, w in ipairs(workloads.NAMES) do columns[#columns + 1] = w end
  for _, c in ipairs(HOW) do columns[#columns + 1] = c end
  local rows = {}
  for _, p in ipairs(cmd.list(function() return nil end)) do
    if not p.error then
      local P = require('providers.' .. p.module)
      local cells = {}
      for _, w in ipairs(workloads.NAMES) do cells[w] = workloads.supports(P, workloads.load(w)) == true end
      for _, c in ipairs(HOW) do cells[c] = type(P.capabilities) == 'table' and P.capabilities[c] == true end
      rows[#rows + 1] = { name = p.name, cells = cells }
    end
  end
  return { columns = columns, rows = rows }
end

function cmd.main(f, pos)
  if #pos > 0 then return exit.usage_error("providers: unexpected argument '" .. pos[1] .. "' (see cseng providers --help)") end
  local getenv
  if f.env_file then
    local ok, env = pcall(require('cseng.run.options').read_env_files, f.env_file)
    if not ok then return exit.usage_error('providers: ' .. require('cseng.lib.errors').line(env)) end
    getenv = function(k) if env[k] ~= nil then return env[k] end return os.getenv(k) end
  end
  if f.capabilities then
    local m = cmd.capabilities()
    if f.json then
      local doc = {}
      for _, r in ipairs(m.rows) do doc[r.name] = r.cells end
      io.stdout:write(jsonl.encode(doc), '\n')
      return 0
    end
    local w = #'adapter'
    for _, r in ipairs(m.rows) do w = math.max(w, #r.name) end
    local head = { string.format('%-' .. w .. 's', 'adapter') }
    for _, c in ipairs(m.columns) do head[#head + 1] = c end
    print(table.concat(head, '  '))
    for _, r in ipairs(m.rows) do
      local line = { string.format('%-' .. w .. 's', r.name) }
      for _, c in ipairs(m.columns) do line[#line + 1] = string.format('%-' .. #c .. 's', r.cells[c] and 'yes' or '-') end
      print((table.concat(line, '  '):gsub('%s+$', '')))
    end
    print('yes: `cseng run plans/startup.lua --workload NAME` runs it there (docs/ARENA.md, "Primitives"); ' ..
      'bulk_upload and pause_memory change how files and pause run')
    return 0
  end
  local list = cmd.list(getenv)
  local broken = 0
  for _, p in ipairs(list) do if p.error or #(p.violations or {}) > 0 then broken = broken + 1 end end
  if f.json then
    io.stdout:write(jsonl.encode(list), '\n')
    return broken > 0 and 1 or 0
  end
  -- two lines per adapter, aligned whatever their lengths: the name and its state (ready, the
  -- variables it needs, or the contract it breaks), then its description under the state
  local w = 0
  for _, p in ipairs(list) do w = math.max(w, #p.name) end
  local fmt, indent = '%-' .. w .. 's  %s', string.rep(' ', w + 2)
  for _, p in ipairs(list) do
    if p.error then
      print(string.format(fmt, p.name, 'fails to load: ' .. p.error))
    else
      local cred = #p.missing > 0 and ('needs ' .. table.concat(p.missing, ', ')) or (p.ready and 'ready' or 'breaks the contract')
      print(string.format(fmt, p.name, cred))
      if p.description then print(indent .. p.description) end
      for _, v in ipairs(p.violations) do print(indent .. 'contract: ' .. v) end
    end
  end
  return broken > 0 and 1 or 0
end

return cmd
