--- The Modal fake (spec/fakes/modal/server.mjs, node + grpc-js) started from a spec:
---
---   local modal_fake = dofile(sys.root() .. '/spec/fakes/modal/fake.lua')
---   local f = modal_fake.start { client = 'adapter', http1_only = false, log = path }
---   f.url                 the control plane (http://127.0.0.1:PORT, gRPC with prior knowledge)
---   f.env(extra)          MODAL_SERVER_URL / MODAL_TOKEN_ID / MODAL_TOKEN_SECRET for it (+ extra)
---   f.config(extra)       a provider cfg for providers.modal.connect (getenv reads f.env())
---   f.stats()             the fake's counters: connections {cp, router}, rpcs {Op = n}, creates,
---                         terminates, snapshots, builds, live, sandboxes, apps, images
---   f.set { latency = { SandboxCreate = 300 }, fail_image_build = true, ... } (merged)
---   f.requests()          the request log (the shared recorded-request shape), decoded
---   f.close()             terminates every sandbox, stops the process (idempotent)
local proc = require 'cseng.proc'
local http = require 'cseng.http'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local task = require 'cseng.task'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'

local M = {}

M.TOKEN_ID, M.TOKEN_SECRET = 'ak-cseng-fake', 'as-cseng-fake'

function M.start(o)
  o = o or {}
  assert(proc.which('node'), 'the Modal fake needs node (make deps-test)')
  local dir = assert(fs.tempdir('cseng-modal-fake-'))
  local out = dir .. '/ports.json'
  local log = o.log or (dir .. '/requests.jsonl')
  local argv = { 'node', sys.root() .. '/spec/fakes/modal/server.mjs', '--log', log, '--client', o.client or 'adapter',
                 '--dir', dir .. '/state', '--token-id', M.TOKEN_ID, '--token-secret', M.TOKEN_SECRET }
  if o.http1_only then argv[#argv + 1] = '--http1-only' end
  local p = assert(proc.spawn { argv = argv, stdout = out, stderr = dir .. '/stderr.log', kill_grace = 3 })
  local ports
  for _ = 1, 400 do
    local s = fs.read(out)
    if s and s:find('\n') then ports = cjson.decode(s); break end
    if p:wait(0.05) then break end
  end
  if not ports then
    local err = fs.read(dir .. '/stderr.log') or ''
    p:close()
    error('the Modal fake did not start: ' .. err, 0)
  end
  local f = { dir = dir, log = log, process = p, ports = ports,
              url = string.format('http://127.0.0.1:%d', ports.cp_port), admin = string.format('http://127.0.0.1:%d', ports.admin_port) }

  local function admin(method, path, body)
    local r = assert(http.request { method = method, url = f.admin .. path, body = body and cjson.encode(body),
                                    headers = { ['Content-Type'] = 'application/json' }, timeout = 30 })
    assert(r.status == 200, path .. ': HTTP ' .. r.status)
    return cjson.decode(r.body)
  end
  function f.stats() return admin('GET', '/stats') end
  function f.set(t) return admin('POST', '/set', t) end
  function f.env(extra)
    local e = { MODAL_SERVER_URL = f.url, MODAL_TOKEN_ID = M.TOKEN_ID, MODAL_TOKEN_SECRET = M.TOKEN_SECRET }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
  end
  function f.config(extra)
    local env = f.env()
    local cfg = { getenv = function(k) return env[k] end, run_id = 'spec-' .. crypto.hex(crypto.random_bytes(3)) }
    for k, v in pairs(extra or {}) do cfg[k] = v end
    return cfg
  end
  function f.requests()
    local out_ = {}
    for line in (fs.read(f.log) or ''):gmatch('[^\n]+') do out_[#out_ + 1] = cjson.decode(line) end
    return out_
  end
  function f.stderr() return fs.read(dir .. '/stderr.log') or '' end
  function f.close()
    if f.closed then return end
    f.closed = true
    pcall(http.request, { method = 'POST', url = f.admin .. '/close', timeout = 10 })
    if not p:wait(5) then p:kill('KILL'); p:wait(5) end
    p:close()
    if not o.keep then fs.remove_tree(dir) end
  end
  task.sleep(0) -- let the loop settle
  return f
end

return M
