--- The engine's own costs, in one process:
---
---   ./cseng lua bench/micro.lua --n 10000000 --out F
---
--- clock.now(): N calls in a loop, minus the same loop with a local function that returns an
--- integer (the loop and call overhead), in ns per call. Also the idle engine's peak RSS.
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local blib = require('bench.lib')

local opts = blib.options('micro', arg, { n = { 'int', min = 1 }, out = 'string' })
if not opts then return 2 end
local N = opts.n or 10000000
local idle_rss = sys.usage().maxrss_kb

local now = clock.now
local function empty() return 0 end

local function loop(f)
  local t0 = now()
  for _ = 1, N do f() end
  return now() - t0
end

loop(now) -- warm
local t_now = loop(now)
local t_empty = loop(empty)

local out = {
  n = N, now_total_ns = t_now, empty_total_ns = t_empty,
  now_ns_per_call = t_now / N, empty_ns_per_call = t_empty / N, net_ns_per_call = (t_now - t_empty) / N,
  idle_maxrss_kb = idle_rss,
}
assert(fs.write(opts.out, jsonl.encode(out)))
return 0
