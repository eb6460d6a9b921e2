--- `cseng providers [--json]`: which adapters exist (lua/providers/*.lua that define create) and
--- which have their credentials.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local flags = require 'cseng.lib.flags'
local jsonl = require 'cseng.lib.jsonl'
local cli = require 'cseng.cli.main'

local SPEC = {
  ['json'] = { key = 'json', type = 'bool', help = 'one JSON document: [{name, ready, missing, credentials, description, remote, error}]' },
  ['env-file'] = { key = 'env_file', type = 'multi', arg = 'FILE',
    help = 'read credentials from FILE too (KEY=VALUE; repeatable, a later file wins; a file wins over the environment)' },
}

local cmd = {
  summary = 'list provider adapters and whether their credentials are set',
  usage = 'usage: cseng providers [--json] [--env-file FILE]\n\nLists lua/providers/*.lua with their description and credential variables.\n\noptions:\n' ..
    flags.help(SPEC, { 'json', 'env-file' }),
}

--- Every adapter: {name, ready, missing[], credentials[], description, remote, error}.
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
    elseif type(p) == 'table' and type(p.create) == 'function' then -- helpers beside the adapters are not providers
      local missing, creds = jsonl.array(), jsonl.array()
      for _, v in ipairs(p.credentials or {}) do
        local alts = type(v) == 'table' and v or { v }
        local have = false
        for _, a in ipairs(alts) do if getenv(a) and getenv(a) ~= '' then have = true end end
        creds[#creds + 1] = table.concat(alts, '|')
        if not have then missing[#missing + 1] = table.concat(alts, '|') end
      end
      out[#out + 1] = { name = n:gsub('_', '-'), module = n, ready = #missing == 0, missing = missing, credentials = creds,
        description = p.description, remote = p.remote == true }
    end
  end
  return out
end

function cmd.run(args)
  local f, pos = flags.parse(args or {}, SPEC)
  if not f then return cli.usage_error('providers: ' .. pos .. ' (see cseng providers --help)') end
  if #pos > 0 then return cli.usage_error("providers: unexpected argument '" .. pos[1] .. "' (see cseng providers --help)") end
  local getenv
  if f.env_file then
    local ok, env = pcall(require('cseng.run.options').read_env_files, f.env_file)
    if not ok then return cli.usage_error('providers: ' .. require('cseng.lib.errors').line(env)) end
    getenv = function(k) if env[k] ~= nil then return env[k] end return os.getenv(k) end
  end
  local list = cmd.list(getenv)
  if f.json then
    io.stdout:write(jsonl.encode(list), '\n')
    return 0
  end
  for _, p in ipairs(list) do
    if p.error then
      print(string.format('%-12s (fails to load: %s)', p.name, p.error))
    else
      local cred = p.ready and 'ready' or ('needs ' .. table.concat(p.missing, ', '))
      print(string.format('%-12s %-34s %s', p.name, cred, p.description or ''))
    end
  end
  return 0
end

return cmd
