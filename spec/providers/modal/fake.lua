--- The Modal fake (spec/providers/modal/server.mjs, node + grpc-js) started from a spec:
---
---   local modal_fake = require 'spec.providers.modal.fake'
---   local f = modal_fake.start { client = 'adapter', http1_only = false, log = path, tls = {cert=, key=} }
---   f.url                 the control plane (http://127.0.0.1:PORT, gRPC with prior knowledge; with tls:
---                         https://, the router too: the client must trust the certificate's CA)
---   f.env(extra)          MODAL_SERVER_URL / MODAL_TOKEN_ID / MODAL_TOKEN_SECRET for it (+ extra)
---   f.config(extra)       a provider cfg for providers.modal.connect (getenv reads f.env())
---   f.stats()             the fake's counters: connections {cp, router}, rpcs {Op = n}, creates,
---                         terminates, snapshots, builds, live, sandboxes, apps, images
---   f.set { latency = { SandboxCreate = 300 }, fail_image_build = true, ... } (merged)
---   f.requests()          the request log (the shared recorded-request shape), decoded
---   f.close()             terminates every sandbox, stops the process (idempotent)
local proc = require('cseng.proc')
local http = require('cseng.http')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local cjson = require('cjson')

local M = {}

M.TOKEN_ID, M.TOKEN_SECRET = 'ak-cseng-fake', 'as-cseng-fake'

--- The Debian base root filesystem the fake's sandboxes run on (CSENG_LOCAL_ROOTFS, else the one
--- `cseng images rootfs` builds).
function M.rootfs()
  return os.getenv('CSENG_LOCAL_ROOTFS') or require('cseng.images.rootfs').rootfs_dir('bookworm')
end

--- Unmount whatever is still mounted under dir (a fake killed before it could), deepest first.
function M.umount_under(dir)
  local real = sys.realpath(dir) or dir
  local found = {}
  for line in (fs.read('/proc/self/mounts') or ''):gmatch('[^\n]+') do
    local mp = line:match('^%S+ (%S+)')
    if mp and (mp:sub(1, #real + 1) == real .. '/') then found[#found + 1] = mp end
  end
  table.sort(found, function(a, b) return #a > #b end)
  for _, mp in ipairs(found) do proc.run { argv = { 'umount', '-l', mp }, timeout = 30 } end
end

function M.start(o)
  o = o or {}
  assert(proc.which('node'), 'the Modal fake needs node (make deps-test)')
  local dir = assert(fs.tempdir('cseng-modal-fake-'))
  local out = dir .. '/ports.json'
  local log = o.log or (dir .. '/requests.jsonl')
  local argv = { 'node', sys.root() .. '/spec/providers/modal/server.mjs', '--log', log, '--client', o.client or 'adapter',
                 '--dir', dir .. '/state', '--token-id', M.TOKEN_ID, '--token-secret', M.TOKEN_SECRET }
  -- Modal's protos: ../shared/specs/modal beside the checkout (a git worktree one level deeper)
  for _, d in ipairs({ sys.root() .. '/../shared/specs/modal', sys.root() .. '/../../shared/specs/modal' }) do
    if fs.exists(d .. '/modal_proto/api.proto') then
      argv[#argv + 1] = '--proto-root'; argv[#argv + 1] = d
      break
    end
  end
  argv[#argv + 1] = '--rootfs'
  argv[#argv + 1] = M.rootfs()
  if o.http1_only then argv[#argv + 1] = '--http1-only' end
  if o.tls then
    for _, a in ipairs { '--tls-cert', o.tls.cert, '--tls-key', o.tls.key } do argv[#argv + 1] = a end
  end
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
              url = string.format('%s://127.0.0.1:%d', o.tls and 'https' or 'http', ports.cp_port),
              admin = string.format('http://127.0.0.1:%d', ports.admin_port) }

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
    M.umount_under(dir)
    if not o.keep then fs.remove_tree(dir) end
  end
  task.sleep(0) -- let the loop settle
  return f
end

return M
