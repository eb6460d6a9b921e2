--- A burst of creates against the fake provider, timed as the arena's burst mode times them: N
--- creates let go at once (one task each), each from clock.now() before the request to
--- clock.answered() after it, beside the fake's held time (X-Fake-Held-Ns), then deleted. Before
--- the burst the connections it will use are opened (http.warm, as the arena does), or with
--- --cold the idle ones are closed and each create opens (or waits for) its own: the wait is
--- then reported apart (http.handshakes()), as the arena's handshake_ms.
---
---   ./cseng lua bench/burst.lua --url URL --out F.json [--burst 1000] [--cold] [--ca FILE]
---          [--http-version 1.1|2]
---
--- F receives {burst, cold, http_version, failures, first_error, warm, seconds, samples =
--- {create, held, way_there, way_back, handshake (ns; handshake: one per create that waited for a
--- connection)}, handshakes}.
local http = require('cseng.http')
local task = require('cseng.task')
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local blib = require('bench.lib')

local opts = blib.options('burst', arg, { url = 'string', out = 'string', burst = { 'int', min = 1 }, cold = 'bool',
  ca = 'string', ['http-version'] = 'string' }, { 'url', 'out' })
if not opts then return 2 end

local BASE = opts.url:gsub('/+$', '')
local N = opts.burst or 1000
-- X-Fake-Stamp: the fake says when each hold began (X-Fake-Hold-From), so each create's error splits
-- into the way there (request to the fake's receive stamp) and the way back (its answer to ours)
local HEADERS = { ['X-API-Key'] = 'bench-key', ['Content-Type'] = 'application/json', ['Accept'] = 'application/json',
  ['X-Fake-Stamp'] = '1' }
local CREATE = cjson.encode { template = 'base', size = 'small', projectId = 'bench', region = 'us-east-1' }
http.configure { max_host_connections = 0, max_total_connections = 0, max_connections = N + 16, ca_file = opts.ca }

local function create()
  return http.request { method = 'POST', url = BASE .. '/api/sandboxes', headers = HEADERS, body = CREATE, timeout = 120,
    http_version = opts.http_version }
end
local function delete(id)
  return http.request { method = 'DELETE', url = BASE .. '/api/sandboxes/' .. id, headers = HEADERS, timeout = 120,
    http_version = opts.http_version }
end

-- one lifecycle first, as the arena's warmup round: the origin is known (its options, its protocol)
do
  local r, err = create()
  if not (r and r.status == 201) then
    io.stderr:write('burst: the first create failed: ', tostring(err or r.status), '\n')
    return 1
  end
  delete(cjson.decode(r.body).sandboxId)
end

local warm
if opts.cold then
  warm = { closed = http.close_idle(BASE) }
else
  local w, err, code = http.warm { url = BASE, calls = N, http_version = opts.http_version, timeout = 600 }
  if not w then
    io.stderr:write('burst: warm: ', tostring(err), ' (', tostring(code), ')\n')
    return 1
  end
  warm = { opened = w.opened, ready = w.ready, http_version = w.http_version, seconds = w.seconds }
end

local samples = { create = {}, held = {}, handshake = {}, way_there = {}, way_back = {} }
local failures, first_error, handshakes, version = 0, nil, 0, nil
local t0 = clock.now()
local tasks = {}
for i = 1, N do
  tasks[i] = task.spawn(function()
    local hn, hs = http.handshakes()
    local s = clock.now()
    local r, err, code = create()
    local e = clock.answered(s)
    local hn1, hs1 = http.handshakes()
    if not (r and r.status == 201) then
      failures = failures + 1
      first_error = first_error or (tostring(err or r.status) .. ' ' .. tostring(code))
      return
    end
    version = version or r.http_version
    samples.create[#samples.create + 1] = e - s
    local held = math.tointeger(tonumber(r.headers['x-fake-held-ns'])) or 0
    local from = math.tointeger(tonumber(r.headers['x-fake-hold-from']))
    samples.held[#samples.held + 1] = held
    if from then
      samples.way_there[#samples.way_there + 1] = from - s
      samples.way_back[#samples.way_back + 1] = e - (from + held)
    end
    if hn1 > hn then
      handshakes = handshakes + (hn1 - hn)
      samples.handshake[#samples.handshake + 1] = math.floor((hs1 - hs) * 1e9)
    end
    local d = delete(cjson.decode(r.body).sandboxId)
    if not (d and d.status == 204) then
      failures = failures + 1
      first_error = first_error or 'delete failed'
    end
  end)
end
for _, t in ipairs(tasks) do
  local ok, e = t:join()
  if not ok then
    failures = failures + 1
    first_error = first_error or tostring(e)
  end
end
local out = { burst = N, cold = opts.cold or false, http_version = version, failures = failures, first_error = first_error,
  warm = warm, seconds = (clock.now() - t0) / 1e9, handshakes = handshakes, samples = {} }
for k, v in pairs(samples) do out.samples[k] = jsonl.array(v) end
assert(fs.write(opts.out, jsonl.encode(out)))
return failures == 0 and 0 or 1
