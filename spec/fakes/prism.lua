--- Prism (@stoplight/prism-cli, installed under spec/fakes/prism/node_modules by
--- `npm ci --prefix spec/fakes/prism`) for conformance specs: adapter requests validated
--- against the vendors' own OpenAPI specs, on a loopback port.
---
---   local prism = require 'spec.fakes.prism'
---   local p, why = prism.start(SPEC_FILE, { upstream = fake.url })  -- proxy mode, else mock mode
---   if not p then pending(why) end
---   ... requests to p.url ...
---   p.close()
---
--- Both modes run with --errors: a request that violates the spec gets a 4xx problem+json
--- (422 "Invalid request", 401 for missing security, 404 for a path the spec lacks) instead
--- of being forwarded; in proxy mode an upstream response that violates the spec becomes a
--- 500 "VIOLATIONS". So an adapter call that succeeds through Prism sent a valid request and
--- got a valid response.
---
--- When Prism is not installed, start returns nil, reason, "ENOPRISM"; prism.missing() gives
--- the same reason for marking specs pending (and says it on stderr, loudly).
local proc = require('cseng.proc')
local http = require('cseng.http')
local serve = require('cseng.serve')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local sys = require('cseng.sys')

local M = {}

M.DIR = sys.root() .. '/spec/fakes/prism'
M.BIN = M.DIR .. '/node_modules/.bin/prism'
M.SPECS = sys.root() .. '/../shared/specs'

local warned = false

--- nil when Prism can run here, else why not (with the command that fixes it).
function M.missing()
  local why
  if not proc.which('node') then
    why = 'node is not installed (apt-get install nodejs npm), so Prism cannot run'
  elseif not fs.exists(M.BIN) then
    why = 'Prism is not installed: run `npm ci --prefix spec/fakes/prism --no-audit --no-fund` (make deps-test)'
  end
  if why and not warned then
    warned = true
    io.stderr:write('\n*** PRISM CONFORMANCE SPECS PENDING: ', why, ' ***\n\n')
  end
  return why
end

-- A free loopback port (bound and released: a small race, acceptable in specs).
local function free_port()
  local s = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function() return 204 end })
  local port = s:port()
  s:close()
  return port
end

local function tail(path, n)
  local text = fs.read(path) or ''
  return #text > n and text:sub(-n) or text
end

---@class prism_server
---@field url string
---@field port integer
---@field log string path of Prism's output
---@field close fun()

--- Start Prism on spec_file: `prism proxy` in front of opts.upstream, else `prism mock`.
--- opts: upstream, port, errors (default true), timeout (seconds to wait for the port,
--- default 120), log (path), dynamic (mock: generate responses instead of examples).
---@return prism_server|nil, string? why, string? code
function M.start(spec_file, opts)
  opts = opts or {}
  local why = M.missing()
  if why then return nil, why, 'ENOPRISM' end
  if not fs.exists(spec_file) then return nil, spec_file .. ': no such spec file', 'ENOENT' end
  local port = opts.port or free_port()
  local logdir = not opts.log and assert(fs.tempdir('cseng-prism-')) or nil
  local log = opts.log or (logdir .. '/prism.log')
  local argv = { M.BIN, opts.upstream and 'proxy' or 'mock', '-h', '127.0.0.1', '-p', tostring(port) }
  if opts.errors ~= false then argv[#argv + 1] = '--errors' end
  if opts.dynamic then argv[#argv + 1] = '--dynamic' end
  argv[#argv + 1] = spec_file
  if opts.upstream then argv[#argv + 1] = opts.upstream end
  local p, err = proc.spawn { argv = argv, stdout = log, stderr = log, kill_grace = 2 }
  if not p then return nil, 'cannot start Prism: ' .. tostring(err), 'ESTART' end
  local url = 'http://127.0.0.1:' .. port
  local deadline = clock.now() + math.floor((opts.timeout or 120) * 1e9)
  while true do
    local exited = p:wait(0.25)
    if exited then
      p:close()
      return nil, 'Prism exited with status ' .. tostring(exited.code) .. ' before listening:\n' .. tail(log, 2000), 'ESTART'
    end
    -- Prism answers every path once it listens (404 problem+json for unknown ones)
    local res = http.request { url = url .. '/cseng-prism-readiness-probe', timeout = 2, connect_timeout = 1 }
    if res then break end
    if clock.now() > deadline then
      p:close()
      return nil, 'Prism did not listen on ' .. url .. ' within ' .. (opts.timeout or 120) .. ' s:\n' .. tail(log, 2000), 'ETIMEDOUT'
    end
  end
  local server = { url = url, port = port, log = log, process = p }
  function server.close()
    p:close()
    if logdir and fs.exists(logdir) then fs.remove_tree(logdir) end
  end
  return server
end

--- Copy of a spec whose every path is mounted under /{param} (a path parameter), for APIs
--- documented relative to a per-resource base URL: Daytona's toolbox paths are relative to
--- {toolboxProxyUrl}/{sandboxId}. Text-level: the keys of the top-level `paths:` map (lines
--- "  /...:") get the prefix; nothing else changes.
function M.prefix_paths(spec_file, param, out_path)
  local text = assert(fs.read(spec_file))
  local out, in_paths = {}, false
  for line in (text .. '\n'):gmatch('(.-)\n') do
    if line:match('^%S') then in_paths = line:match('^paths:%s*$') ~= nil end
    if in_paths and line:match('^  /') then line = '  /{' .. param .. '}' .. line:sub(3) end
    out[#out + 1] = line
  end
  assert(fs.write(out_path, table.concat(out, '\n')))
  return out_path
end

return M
