--- Start a node script that writes a JSON object of ports to the file named by its first
--- argument once it listens (spec/fakes/h2_server.mjs, spec/fakes/grpc_server.mjs); stop it with
--- srv:close() (also on failure: call it from a finally). In a task.
local proc = require('cseng.proc')
local cjson = require('cjson')

local M = {}

---@param script string path of the .mjs
---@param args? string[] more arguments after the port file
---@return table? server {ports = {...}, log = path, close = fn}
---@return string? err
function M.start(script, args)
  local portfile = os.tmpname()
  local log = os.tmpname()
  os.remove(portfile)
  local argv = { 'node', script, portfile }
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local p, err = proc.spawn { argv = argv, stdout = log, stderr = log, kill_grace = 2 }
  if not p then return nil, 'cannot start node ' .. script .. ': ' .. tostring(err) end
  local srv = { log = log }
  function srv.close()
    p:close()
    os.remove(portfile)
    os.remove(log)
  end
  for _ = 1, 600 do -- up to a minute for node to start (a bound on a failure, not a verdict)
    local f = io.open(portfile, 'r')
    if f then
      srv.ports = {}
      for k, v in pairs(cjson.decode(f:read('a'))) do srv.ports[k] = math.tointeger(v) or v end
      f:close()
      return srv
    end
    local exited = p:wait(0.1)
    if exited then
      local l = io.open(log, 'r')
      local out = l and l:read('a') or ''
      if l then l:close() end
      srv.close()
      return nil, script .. ' exited with ' .. tostring(exited.code) .. ' before listening: ' .. out
    end
  end
  srv.close()
  return nil, script .. ' did not listen within a minute'
end

return M
