--- Instructions per request of the cseng client, counted by valgrind's callgrind (repeatable on
--- a shared machine, where seconds are not): bench/client.lua against the fake provider, run
--- under callgrind for a short and a long window; the difference in instructions over the
--- difference in requests is the steady-state cost (start-up and the connects cancel out).
---
---   ./cseng lua bench/instructions.lua [--exe PATH] [--concurrency 1024] [--short 4] [--long 12]
---                                      [--pools N] [--fake] [--out F.json] [--tls 1.1|2]
---
--- --exe: the build measured (default: this binary; the fake always runs on this one). Prints
--- "N.Nk instructions/request" and the counts behind it. Needs valgrind.
--- --fake: measure the other end instead: the fake provider (cseng.serve and the dispatcher)
--- runs on --exe under callgrind, once per window, and the client runs natively on this binary
--- (use a lower --concurrency: the fake is some 50x slower under valgrind).
--- --tls 1.1|2: the client over TLS (HTTP/1.1 or HTTP/2 by ALPN) against the C fake
--- (bench/fake_provider.c with a CA and certificate made for the run); not with --fake.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local cjson = require('cjson')
local blib = require('bench.lib')
local jsonl = require('cseng.lib.jsonl')

local opts = blib.options('instructions', arg, { exe = 'string', concurrency = { 'int', min = 1 }, short = 'number',
  long = 'number', pools = { 'int', min = 1 }, fake = 'bool', out = 'string', tls = 'string' })
if not opts then return 2 end
if opts.tls and (opts.fake or (opts.tls ~= '1.1' and opts.tls ~= '2')) then
  io.stderr:write('instructions: --tls 1.1 or 2, and not with --fake\n')
  return 2
end
if not proc.which('valgrind') then
  io.stderr:write('instructions: valgrind is not installed\n')
  return 2
end

local ROOT = sys.root()
local SELF = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local EXE = opts.exe or SELF
local C = opts.concurrency or 1024
local SHORT, LONG = opts.short or 4, opts.long or 12
if LONG <= SHORT then
  io.stderr:write('instructions: --long must be longer than --short\n')
  return 2
end
local TMP = assert(fs.tempdir('cseng-instr-'))

local fake, url, certs
if opts.tls then
  certs = blib.make_certs(fs.join(TMP, 'certs'))
  fake, url = blib.start_fake_c(TMP, { '--tls-cert', certs.cert, '--tls-key', certs.key })
elseif not opts.fake then fake, url = blib.start_fake(SELF, TMP) end

-- One client run under callgrind (with --fake: one fake's life under callgrind, the client
-- native): its instruction total and its request count.
local function measure(seconds)
  local cg, res = fs.join(TMP, 'cg.' .. seconds), fs.join(TMP, 'res.' .. seconds .. '.json')
  local grind = { 'valgrind', '--tool=callgrind', '--callgrind-out-file=' .. cg }
  if opts.fake then fake, url = blib.start_fake(EXE, TMP, nil, grind) end
  local client_exe = opts.fake and SELF or EXE
  local argv = { client_exe, 'lua', fs.join(ROOT, 'bench/client.lua'),
    '--url', url, '--concurrency', tostring(C), '--warmup', '2', '--duration', tostring(seconds), '--out', res,
    '--no-split' } -- the split's samples are encoded after the window, which the difference would count
  if not opts.fake then table.move(argv, 1, #argv, #grind + 1, grind); argv = grind end
  if opts.pools then
    argv[#argv + 1] = '--pools'
    argv[#argv + 1] = tostring(opts.pools)
  end
  if certs then
    for _, a in ipairs { '--ca', certs.ca, '--http-version', opts.tls } do argv[#argv + 1] = a end
  end
  local r, err = proc.run { argv = argv, cwd = ROOT, env_add = { CSENG_ROOT = ROOT }, timeout = seconds * 60 + 600,
                            tail_bytes = 1 << 16 }
  if opts.fake then -- SIGTERM: the fake stops cleanly and callgrind writes its counts
    fake:kill('TERM')
    fake:wait()
    fake:close()
    fake = nil
  end
  if not r or r.code ~= 0 then error('instructions: the client failed: ' .. tostring(err or r.stderr), 0) end
  local ir = tonumber((fs.read(cg) or ''):match('\nsummary: (%d+)') or (fs.read(cg) or ''):match('\ntotals: (%d+)'))
  local d = cjson.decode((assert(fs.read(res), 'no client result')))
  if not ir then error('instructions: no total in ' .. cg, 0) end
  return { seconds = seconds, instructions = ir, requests = d.total_requests, failures = d.failures }
end

local ok, a, b = pcall(function() return measure(SHORT), measure(LONG) end)
if fake then fake:close() end
fs.remove_tree(TMP)
if not ok then error(a, 0) end
if b.requests <= a.requests then error('instructions: the long run made no more requests than the short one', 0) end
local per = (b.instructions - a.instructions) / (b.requests - a.requests)
print(string.format('%s: %.1fk instructions/request at %d in flight (%d instr / %d req, %d instr / %d req; failures %d, %d)',
  opts.fake and 'fake' or 'client', per / 1000, C, a.instructions, a.requests, b.instructions, b.requests, a.failures, b.failures))
if opts.out then
  assert(fs.write(opts.out, jsonl.encode { exe = EXE, concurrency = C, per_request = per, runs = jsonl.array { a, b } }))
end
return (a.failures == 0 and b.failures == 0) and 0 or 1
