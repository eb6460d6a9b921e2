--- `cseng providers`: which adapters exist and which have their credentials.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'

local cmd = {
  summary = 'list provider adapters and whether their credentials are set',
  usage = 'usage: cseng providers\n\nLists lua/providers/*.lua with their description and credential variables.',
}

function cmd.run()
  local dir = sys.root() .. '/lua/providers'
  local names = {}
  for _, f in ipairs(fs.list(dir) or {}) do
    local n = f:match('^(.-)%.lua$')
    if n then names[#names + 1] = n end
  end
  table.sort(names)
  for _, n in ipairs(names) do
    local ok, p = pcall(require, 'providers.' .. n)
    if ok and type(p) == 'table' and p.create == nil then
      -- a helper module beside the adapters (e.g. modal_schema): not a provider
    elseif not ok then
      print(string.format('%-12s (fails to load: %s)', n, tostring(p)))
    else
      local missing = {}
      for _, v in ipairs(p.credentials or {}) do
        local alts = type(v) == 'table' and v or { v }
        local have = false
        for _, a in ipairs(alts) do if os.getenv(a) and os.getenv(a) ~= '' then have = true end end
        if not have then missing[#missing + 1] = table.concat(alts, '|') end
      end
      local cred = #missing == 0 and 'ready' or ('needs ' .. table.concat(missing, ', '))
      print(string.format('%-12s %-34s %s', n, cred, p.description or ''))
    end
  end
  return 0
end

return cmd
