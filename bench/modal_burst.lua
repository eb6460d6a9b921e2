--- A Modal burst against the Modal fake (spec/providers/modal, node + grpc-js): `--burst` sandboxes
--- created at once from as many tasks, each then running the readiness command and destroyed, over
--- gRPC/HTTP/2 from one fresh client, with no retry (the adapter's retries = 0: a transport
--- failure is counted, not hidden). Each run starts a fresh fake (a new origin: the first
--- connection's race is in every run). Errors are counted per run. --tls: the fake's control
--- plane and command router speak TLS (a CA and certificate made for the run, trusted with
--- http.configure{ca_file=}), as Modal's do: gRPC over HTTP/2 by ALPN.
---
---   ./cseng lua bench/modal_burst.lua [--runs 5] [--burst 100] [--out F.json] [--tls]
---
--- Prints one line per run and exits 1 if any run had an error (a failed create, exec or destroy,
--- a wrong readiness output, a task that raised, or a sandbox the fake still holds).
local task = require('cseng.task')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local blib = require('bench.lib')
local jsonl = require('cseng.lib.jsonl')

local opts = blib.options('modal_burst', arg, { runs = { 'int', min = 1 }, burst = { 'int', min = 1 }, out = 'string',
  tls = 'bool' })
if not opts then return 2 end

local RUNS, BURST = opts.runs or 5, opts.burst or 100
local MARKER = 'arena-startup-ready-20261001'
local COMMAND = 'python3 -c "print(\'' .. MARKER .. '\')"'
local modal_fake = require('spec.providers.modal.fake')
local modal = require('providers.modal')
local http = require('cseng.http')

local TMP, TLS
if opts.tls then
  TMP = assert(fs.tempdir('cseng-modal-burst-'))
  local c = blib.make_certs(fs.join(TMP, 'certs'))
  TLS = { cert = c.cert, key = c.key }
  http.configure { ca_file = c.ca }
end

local function one_run(i)
  local f = modal_fake.start { tls = TLS }
  local client = modal.connect(f.config { retries = 0 })
  local errors, first = 0, nil
  local function fail(msg)
    errors = errors + 1
    first = first or msg
  end
  local t0 = clock.now()
  local tasks = {}
  for k = 1, BURST do
    tasks[k] = task.spawn(function()
      local sb, err = modal.create(client, {})
      if not sb then return fail('create: ' .. tostring(err)) end
      local r, eerr = modal.exec(client, sb, COMMAND)
      if not r then fail('exec: ' .. tostring(eerr))
      elseif r.code ~= 0 or r.stdout ~= MARKER .. '\n' then fail('exec: exit ' .. tostring(r.code) .. ', stdout ' .. r.stdout) end
      local ok, derr = modal.destroy(client, sb)
      if not ok then fail('destroy: ' .. tostring(derr)) end
    end)
  end
  for _, t in ipairs(tasks) do
    local ok, e = t:join()
    if not ok then fail('task raised: ' .. tostring(e)) end
  end
  local seconds = (clock.now() - t0) / 1e9
  local s = f.stats()
  if s.live ~= 0 then fail(s.live .. ' sandboxes left live') end
  if s.creates ~= BURST then fail(tostring(s.creates) .. ' creates seen by the fake, not ' .. BURST) end
  f.close()
  local st = http.stats().native
  local r = { run = i, burst = BURST, errors = errors, first_error = first, seconds = seconds,
              connections = s.connections and s.connections.cp, tls = TLS ~= nil,
              native_h2_streams = st.h2_streams }
  io.stderr:write(string.format('modal_burst: run %d: %d/%d errors, %.1f s, %s control-plane connection(s)%s\n',
    i, errors, BURST, seconds, tostring(math.tointeger(r.connections) or r.connections), first and (' (first: ' .. first .. ')') or ''))
  return r
end

local results, failed = {}, 0
for i = 1, RUNS do
  local ok, r = pcall(one_run, i)
  if not ok then r = { run = i, burst = BURST, errors = BURST, first_error = 'run raised: ' .. tostring(r) } end
  results[#results + 1] = r
  if r.errors > 0 then failed = failed + 1 end
end
if TMP then fs.remove_tree(TMP) end
print(string.format('modal burst of %d%s: %d of %d runs with errors', BURST, TLS and ' over TLS' or '', failed, RUNS))
if opts.out then assert(fs.write(opts.out, jsonl.encode(jsonl.array(results)))) end
return failed == 0 and 0 or 1
