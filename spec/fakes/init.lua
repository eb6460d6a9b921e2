--- The bundled fakes, in one place: which provider each stands for, where it lives (a vendor's fake
--- beside its specs: spec/providers/<vendor>/fake.lua; what the fakes share is in this folder:
--- rest.lua, sandboxes.lua, native_build.lua, node_server.lua, prism.lua), how it starts and what
--- points a run at it. `cseng fake PROVIDER` (lua/cseng/cli/commands/fake.lua) and the specs start
--- fakes here.
---
---   local fakes = require 'spec.fakes'
---   local f = fakes.start('lizard', { port = 0 })  -- f.env() the variables of a run against it; f.close()
---   fakes.names()                                  -- the providers that have a fake, sorted
local sys = require('cseng.sys')
local fs = require('cseng.fs')

local M = {}

--- provider -> {dir (under the checkout), file (default fake.lua), port (whether --port is honoured), opts
--- (what `cseng fake` starts it with), needs (what it needs beyond cseng: shown when it is missing)}. `llm` is
--- no provider: the scripted model the LLM solvers run against (spec/fakes/llm/model.lua).
M.FAKES = {
  llm = { dir = 'spec/fakes/llm', file = 'model.lua', port = true },
  daytona = { dir = 'spec/providers/daytona', port = true },
  e2b = { dir = 'spec/providers/e2b', port = true },
  lizard = { dir = 'spec/providers/lizard', port = true, opts = { real = true } }, -- commands really run (the specs emulate them)
  vercel = { dir = 'spec/providers/vercel', port = true },
  runloop = { dir = 'spec/providers/runloop', port = true },
  modal = { dir = 'spec/providers/modal', needs = 'node and grpc-js (make deps-test)' },
  ['aws-microvm'] = { dir = 'spec/providers/aws_microvm', needs = 'python3-botocore and the agent (make agent)',
    opts = function() return { agent = sys.root() .. '/build/microvm-agent/microvm-agent' } end },
}
-- aws_microvm is the adapter's module name
M.FAKES.aws_microvm = M.FAKES['aws-microvm']

--- The providers that have a fake (the adapters' names, sorted), and llm.
function M.names()
  local out = {}
  for k in pairs(M.FAKES) do if k ~= 'aws_microvm' then out[#out + 1] = k end end
  table.sort(out)
  return out
end

--- The module of a provider's fake (its start(opts) returns f with f.env, f.config, f.close).
function M.module(name)
  local e = M.FAKES[name]
  if not e then return nil end
  return require((e.dir .. '/' .. (e.file or 'fake.lua')):gsub('%.lua$', ''):gsub('/', '.'))
end

--- Start the fake of provider name. o: {port} and the fake's own switches. Returns f (f.env() is
--- the environment of a run against it), or nil and why.
function M.start(name, o)
  local e = M.FAKES[name]
  if not e then return nil, 'no fake for ' .. tostring(name) .. ' (fakes: ' .. table.concat(M.names(), ', ') .. ')' end
  o = o or {}
  if o.port and o.port ~= 0 and not e.port then return nil, 'the ' .. name .. ' fake picks its own ports (no --port)' end
  local opts = type(e.opts) == 'function' and e.opts() or {}
  for k, v in pairs(type(e.opts) == 'table' and e.opts or {}) do opts[k] = v end
  for k, v in pairs(o) do opts[k] = v end
  if opts.agent and not fs.exists(opts.agent) then return nil, 'the ' .. name .. ' fake needs ' .. e.needs end
  local ok, f = pcall(M.module(name).start, opts)
  if not ok then return nil, tostring(type(f) == 'table' and (f.message or f[1]) or f) .. (e.needs and (' (it needs ' .. e.needs .. ')') or '') end
  return f
end

return M
