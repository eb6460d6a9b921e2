--- A bench figure (not a test): per-call client CPU and timing error of a gRPC unary call
--- (lua/cseng/lib/grpc.lua: HTTP/2 + protobuf) against a REST call (cseng.http HTTP/1.1 + JSON) carrying
--- the same content, on the same loopback, against one node process serving both
--- (bench/grpc_rest_server.mjs: grpc-js and node's http, each holding a call --delay-ms and
--- reporting how long it held it).
---
---   ./cseng lua bench/grpc_vs_rest.lua [--calls 2000] [--concurrency 1,16] [--reps 3] [--delay-ms 20]
---                                      [--output docs/PERFORMANCE.md]
---
--- Each (protocol, concurrency, repetition) runs in a fresh cseng client process (this script with
--- --client), so its CPU (sys.usage(): user + system) covers only its calls: 10% of --calls as a
--- warm-up (the connection is opened there), then --calls measured calls spread over
--- --concurrency tasks. Timing error = the client's clock.now() around the call (encoding,
--- request, response, decoding) minus the time the server's handler held it. Repetitions are
--- interleaved (grpc, rest, rest, grpc, ...). The result replaces the section between
--- <!-- grpc:begin --> and <!-- grpc:end --> of the output (bench/run.lua keeps that section
--- when it regenerates the rest of docs/PERFORMANCE.md); raw numbers go to bench/out/.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local clock = require('cseng.clock')
local http = require('cseng.http')
local cjson = require('cjson')
local blib = require('bench.lib')
local stats = require('cseng.lib.stats')

local opts = blib.options('grpc_vs_rest', arg, { calls = { 'int', min = 10 }, concurrency = 'list',
  reps = { 'int', min = 1 }, ['delay-ms'] = 'number', output = 'string', client = 'string', url = 'string',
  out = 'string', c = { 'int', min = 1 } })
if not opts then return 2 end

local ROOT = sys.root()
local CALLS = opts.calls or 2000

local CallRequest = { name = 'cseng.bench.CallRequest', fields = {
  { 1, 'id', 'string' }, { 2, 'command', 'string' }, { 3, 'timeout_ms', 'int64' },
  { 4, 'labels', 'map', 'string', 'string' } } }
local CallReply = { name = 'cseng.bench.CallReply', fields = {
  { 1, 'id', 'string' }, { 2, 'stdout', 'string' }, { 3, 'exit_code', 'int32' }, { 4, 'held_ns', 'int64' } } }
local LABELS = { ['cseng.run'] = 'bench', ['cseng.task'] = 'hello-world' }
local COMMAND = 'python3 -c "print(\'arena-startup-ready-20261001\')"'

-- ---- client mode: one protocol, one concurrency, in its own process ---------------------------
if opts.client then
  local grpc = require('cseng.lib.grpc')
  local C = opts.c or 1
  local function one(i)
    local id = 'call-' .. i
    local t0 = clock.now()
    local held
    if opts.client == 'grpc' then
      local res, err = grpc.unary { url = opts.url, service = 'cseng.bench.Bench', method = 'Call',
        request = { id = id, command = COMMAND, timeout_ms = 60000, labels = LABELS },
        request_schema = CallRequest, response_schema = CallReply, timeout = 60 }
      assert(res and res.id == id, err)
      held = res.held_ns
    else
      local res, err = http.request { url = opts.url .. '/call', method = 'POST', timeout = 60,
        headers = { ['content-type'] = 'application/json', accept = 'application/json' },
        body = cjson.encode { id = id, command = COMMAND, timeout_ms = 60000, labels = LABELS } }
      assert(res and res.status == 200, err)
      local body = cjson.decode(res.body)
      assert(body.id == id)
      held = math.tointeger(tonumber(res.headers['x-held-ns']))
    end
    return clock.now() - t0, held
  end
  local function run(n, samples)
    local next_i, ts = 0, {}
    for k = 1, C do
      ts[k] = task.spawn(function()
        while next_i < n do
          next_i = next_i + 1
          local ns, held = one(next_i)
          if samples then samples[#samples + 1] = ns - held end
        end
      end)
    end
    for k = 1, C do assert(ts[k]:join()) end
  end
  run(math.max(C, CALLS // 10)) -- warm-up: connection(s) opened
  local u0 = sys.usage()
  local samples = {}
  local t0 = clock.now()
  run(CALLS, samples)
  local wall = clock.now() - t0
  local u1 = sys.usage()
  local f = assert(io.open(opts.out, 'w'))
  f:write(cjson.encode { errors_ns = samples, cpu_s = (u1.user_s + u1.sys_s) - (u0.user_s + u0.sys_s), wall_ns = wall,
    calls = CALLS })
  f:close()
  return 0
end

-- ---- driver ----------------------------------------------------------------------------------
local node_server = require('spec.fakes.node_server')
local REPS = opts.reps or 3
local DELAY = opts.delay_ms or 20
local CONC = {}
for _, c in ipairs(opts.concurrency or { '1', '16' }) do CONC[#CONC + 1] = assert(math.tointeger(tonumber(c)), c) end
local OUTPUT = opts.output or fs.join(ROOT, 'docs/PERFORMANCE.md')
local EXE = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local STAMP = os.date('!%Y%m%dT%H%M%SZ')

local srv = assert(node_server.start(ROOT .. '/bench/grpc_rest_server.mjs', { tostring(DELAY) }))
local ok, err = pcall(function()
  local urls = { grpc = 'http://127.0.0.1:' .. srv.ports.grpc, rest = 'http://127.0.0.1:' .. srv.ports.rest }
  local results = {} -- [proto][c] = {cpu_us = {...}, errors = {...}}
  for rep = 1, REPS do
    for _, c in ipairs(CONC) do
      local order = rep % 2 == 1 and { 'grpc', 'rest' } or { 'rest', 'grpc' }
      for _, p in ipairs(order) do
        local out = os.tmpname()
        local r = assert(proc.run { argv = { EXE, 'lua', ROOT .. '/bench/grpc_vs_rest.lua', '--client', p, '--url', urls[p],
          '--out', out, '--calls', tostring(CALLS), '--c', tostring(c) }, timeout = 1800 })
        assert(r.code == 0, p .. ' client failed: ' .. r.stderr)
        local f = assert(io.open(out))
        local d = cjson.decode(f:read('a'))
        f:close()
        os.remove(out)
        results[p] = results[p] or {}
        local slot = results[p][c] or { cpu_us = {}, errors = {}, rps = {} }
        results[p][c] = slot
        slot.cpu_us[#slot.cpu_us + 1] = d.cpu_s * 1e6 / d.calls
        slot.rps[#slot.rps + 1] = d.calls / (d.wall_ns / 1e9)
        for _, e in ipairs(d.errors_ns) do slot.errors[#slot.errors + 1] = e / 1e6 end
        io.stderr:write(string.format('grpc_vs_rest: rep %d c=%d %s: %.1f us CPU/call\n', rep, c, p,
          slot.cpu_us[#slot.cpu_us]))
      end
    end
  end
  fs.mkdir_p(fs.join(ROOT, 'bench/out'))
  local raw = assert(io.open(fs.join(ROOT, 'bench/out/grpc_vs_rest-' .. STAMP .. '.json'), 'w'))
  local by_c = {}
  for p, per in pairs(results) do
    by_c[p] = {}
    for c, slot in pairs(per) do by_c[p][tostring(c)] = slot end
  end
  raw:write(cjson.encode(by_c))
  raw:close()

  local function fmt(x, d) return string.format('%.' .. (d or 2) .. 'f', x) end
  local rows = {}
  for _, c in ipairs(CONC) do
    for _, p in ipairs({ 'grpc', 'rest' }) do
      local s = results[p][c]
      table.sort(s.cpu_us)
      table.sort(s.errors)
      rows[#rows + 1] = string.format('| %s | %d | %s (%s–%s) | %s | %s | %s | %s |',
        p == 'grpc' and 'gRPC unary (HTTP/2 h2c, protobuf)' or 'REST (HTTP/1.1, JSON)', c,
        fmt(stats.median(s.cpu_us), 1), fmt(s.cpu_us[1], 1), fmt(s.cpu_us[#s.cpu_us], 1),
        fmt(stats.quantile(s.errors, 0.5), 3), fmt(stats.quantile(s.errors, 0.99), 3),
        fmt(s.errors[#s.errors], 3), fmt(stats.median(s.rps), 0))
    end
  end
  local section = table.concat({
    '<!-- grpc:begin -->',
    '## gRPC unary call vs REST call (client CPU and timing error)',
    '',
    string.format('Generated by `./cseng lua bench/grpc_vs_rest.lua` (%s; not part of `make bench`, whose', os.date('!%Y-%m-%d %H:%M UTC')),
    'regeneration keeps this section). One node process serves both on loopback',
    '(`bench/grpc_rest_server.mjs`): grpc-js over h2c and node\'s `http` over HTTP/1.1 keep-alive,',
    string.format('each holding a call %s ms and reporting how long its handler held it. The same content both', fmt(DELAY, 0)),
    'ways (an id, a command, a timeout, two labels; the reply an id, stdout, an exit code):',
    '`lua/cseng/lib/grpc.lua` (protobuf + gRPC framing, trailers parsed) vs `http.request` + `cjson`.',
    string.format('Each client is its own cseng process: %d measured calls after %d warm-up calls, over',
      CALLS, math.max(1, CALLS // 10)),
    string.format('the concurrency shown, %d interleaved repetitions. CPU = the client process\'s user + system time', REPS),
    'per measured call (median over repetitions, min–max); timing error = the client\'s `clock.now()`',
    'around the whole call minus the server\'s held time (all repetitions pooled, ms).',
    '',
    '| call | concurrency | client CPU per call, µs | timing error p50 | p99 | max | calls/s |',
    '| :--- | ---: | ---: | ---: | ---: | ---: | ---: |',
    table.concat(rows, '\n'),
    '',
    'The server-side held time is measured from the handler\'s start (grpc-js: after it decoded the',
    'request; node http: at the request event, before the JSON body is read), so the error also',
    'includes each server\'s own parsing and writing, not only the client\'s.',
    '<!-- grpc:end -->',
  }, '\n')
  local f = io.open(OUTPUT, 'r')
  local doc = f and f:read('a') or ''
  if f then f:close() end
  local a, b = doc:find('<!%-%- grpc:begin %-%->.-<!%-%- grpc:end %-%->')
  if a then doc = doc:sub(1, a - 1) .. section .. doc:sub(b + 1)
  else
    local m = doc:find('\n## Machine', 1, true)
    if m then doc = doc:sub(1, m) .. section .. '\n\n' .. doc:sub(m + 1) else doc = doc .. '\n' .. section .. '\n' end
  end
  local w = assert(io.open(OUTPUT, 'w'))
  w:write(doc)
  w:close()
  print(section)
end)
srv.close()
if not ok then error(err, 0) end
return 0
