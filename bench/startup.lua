--- Create -> first exec of a real provider adapter (lua/providers/<name>.lua), or of `docker run`:
---
---   ./cseng lua bench/startup.lua --provider local  --n 100 --out F
---   ./cseng lua bench/startup.lua --provider docker --n 30 --image cseng/debian:bookworm --out F
---   ./cseng lua bench/startup.lua --provider docker-run --n 30 --image cseng/debian:bookworm --out F
---
--- Each sample: create (t0..t1), exec 'true' (t1..t2), destroy (t2..t3), timed with clock.now();
--- ready = t2 - t0, the seed's create -> first exec. docker-run times `docker run --rm IMAGE true`
--- through proc.run (the CLI creates, starts, waits and removes; ready = its whole run). One
--- warm-up sample is not kept. F receives {samples = {create=, exec=, ready=, destroy=} (ns), ...}.
local clock = require('cseng.clock')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local blib = require('bench.lib')

local opts = blib.options('startup', arg, { provider = 'string', n = { 'int', min = 1 }, image = 'string',
  out = 'string' }, { 'provider', 'out' })
if not opts then return 2 end
local N = opts.n or 100
local samples = { create = {}, exec = {}, ready = {}, destroy = {} }
local failures, first_error = 0, nil
local info = {}

local function fail(msg)
  failures = failures + 1
  first_error = first_error or tostring(msg)
end

local function keep(i, k, v)
  if i > 0 then samples[k][#samples[k] + 1] = v end
end

if opts.provider == 'docker-run' then
  local docker = assert(proc.which('docker'))
  for i = 0, N do
    local t0 = clock.now()
    local r, err = proc.run { argv = { docker, 'run', '--rm', '--network', 'none', opts.image, 'true' }, timeout = 120 }
    local t1 = clock.now()
    if not r or r.code ~= 0 then fail(err or (r.stderr ~= '' and r.stderr or ('exit ' .. r.code)))
    else keep(i, 'ready', t1 - t0) end
  end
else
  local provider = require('providers.' .. opts.provider)
  local client = provider.connect {}
  if provider.runtime then info.runtime = provider.runtime(client) end
  local spec = { image = opts.image, labels = { ['cseng.run'] = 'bench', ['cseng.task'] = 'startup' } }
  for i = 0, N do
    local t0 = clock.now()
    local sb, err = provider.create(client, spec)
    local t1 = clock.now()
    if not sb then fail(err) else
      local r, xerr = provider.exec(client, sb, 'true', { timeout = 60 })
      local t2 = clock.now()
      if not r or r.code ~= 0 then fail(xerr or ('exit ' .. tostring(r and r.code)))
      else
        keep(i, 'create', t1 - t0)
        keep(i, 'exec', t2 - t1)
        keep(i, 'ready', t2 - t0)
      end
      local ok, derr = provider.destroy(client, sb)
      if not ok then fail(derr) else keep(i, 'destroy', clock.now() - t2) end
    end
  end
end

local out = { provider = opts.provider, n = N, image = opts.image, failures = failures, first_error = first_error,
  info = info, samples = {} }
for k, v in pairs(samples) do out.samples[k] = jsonl.array(v) end
assert(fs.write(opts.out, jsonl.encode(out)))
return 0
