--- The 10,000-sandbox soak: one cseng process holds N live sandboxes of a loopback
--- fake, each with an open exec stream (a chunked response the fake keeps open, writing a
--- heartbeat every --beat seconds, as an agent holds its sandbox's command stream), for --hold
--- seconds; then deletes them all (which ends each stream). Measured in the client process: RSS,
--- open file descriptors (against RLIMIT_NOFILE, which the engine raises to the hard limit at
--- start), CPU, and the heartbeats' timing error (receive time minus the fake's send time: both
--- clock.now(), CLOCK_MONOTONIC of the same machine); the first thing that fails is reported.
---
---   ./cseng lua bench/soak.lua [--sandboxes 10000] [--ramp 256] [--hold 30] [--beat 5]
---                              [--out F.json] [--markdown F.md]
---   ./cseng lua bench/soak.lua --serve --port-file F [--beat 5]     (the fake, its own process)
---
--- Not part of `make bench` (minutes, and 2 x N sockets): its figures are copied into
--- docs/PERFORMANCE.md and docs/SCALE-OUT.md by hand, with the command.
local http = require('cseng.http')
local serve = require('cseng.serve')
local task = require('cseng.task')
local clock = require('cseng.clock')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local cjson = require('cjson')
local stats = require('cseng.lib.stats')
local blib = require('bench.lib')
local jsonl = require('cseng.lib.jsonl')

local opts = blib.options('soak', arg, { sandboxes = { 'int', key = 'n', min = 1 }, ramp = { 'int', min = 1 },
  hold = 'number', beat = 'number', out = 'string', markdown = 'string', serve = 'bool', ['port-file'] = 'string' })
if not opts then return 2 end
local BEAT = opts.beat or 5

-- ---- the fake ---------------------------------------------------------------------------------
if opts.serve then
  local live, seq, streams = {}, 0, {}
  local st = { created = 0, deleted = 0, live = 0, streams_open = 0, peak_streams = 0 }
  local JSON = { ['Content-Type'] = 'application/json' }
  -- every held sandbox is a connection: no cap but the descriptor limit (cseng.serve's default,
  -- 128, is a status server's; it refused create 129)
  local srv = assert(serve.listen { host = '127.0.0.1', port = 0, backlog = 4096, max_connections = 1 << 20,
    handler = function(req)
    if req.method == 'POST' and req.path == '/api/sandboxes' then
      seq = seq + 1
      local id = string.format('soak-%06d', seq)
      live[id] = true
      st.created, st.live = st.created + 1, st.live + 1
      return 201, JSON, cjson.encode { sandboxId = id }
    end
    local id = req.path:match('^/api/sandboxes/([%w%-]+)/stream$')
    if req.method == 'POST' and id and live[id] then
      req:start(200, { ['Content-Type'] = 'text/plain' })
      st.streams_open = st.streams_open + 1
      st.peak_streams = math.max(st.peak_streams, st.streams_open)
      streams[id] = true
      while streams[id] do
        req:write(tostring(clock.now()) .. '\n')
        local t = clock.now() + math.floor(BEAT * 1e9)
        while streams[id] and clock.now() < t do task.sleep(math.min(0.5, (t - clock.now()) / 1e9)) end
      end
      st.streams_open = st.streams_open - 1
      req:write('end\n')
      return req:finish()
    end
    id = req.path:match('^/api/sandboxes/([%w%-]+)$')
    if req.method == 'DELETE' and id and live[id] then
      live[id], streams[id] = nil, nil
      st.deleted, st.live = st.deleted + 1, st.live - 1
      return 204, {}, ''
    end
    if req.method == 'GET' and req.path == '/stats' then
      local u = sys.usage()
      st.maxrss_kb, st.cpu_s = u.maxrss_kb, u.user_s + u.sys_s
      return 200, JSON, cjson.encode(st)
    end
    return 404, JSON, '{"error":"not found"}'
  end })
  assert(fs.write(opts.port_file, srv:port() .. '\n'))
  while true do task.sleep(3600) end
end

-- ---- the client -------------------------------------------------------------------------------
local N = opts.n or 10000
local RAMP = opts.ramp or 256
local HOLD = opts.hold or 30
local ROOT = sys.root()
local EXE = fs.readlink('/proc/self/exe') or (ROOT .. '/cseng')
local TMP = assert(fs.tempdir('cseng-soak-'))

local function nofile()
  local lim = (fs.read('/proc/self/limits') or ''):match('Max open files%s+(%d+)%s+(%d+)')
  return tonumber(lim)
end
local NOFILE = nofile()
-- /proc/self/fd cannot be listed only when no descriptor is left: that is the limit
local function fds()
  local names = fs.list('/proc/self/fd')
  return names and #names or NOFILE or 0
end
-- (0 when /proc cannot be opened: out of descriptors, which is what the soak looks for)
local function rss_kb()
  return tonumber((fs.read('/proc/self/status') or ''):match('VmRSS:%s*(%d+)')) or sys.usage().maxrss_kb
end

local fake = assert(proc.spawn { argv = { EXE, 'lua', fs.join(ROOT, 'bench/soak.lua'), '--serve', '--port-file',
  TMP .. '/port', '--beat', tostring(BEAT) }, stdout = TMP .. '/fake.log', stderr = TMP .. '/fake.log' })
local base
for _ = 1, 200 do
  local t = fs.read(TMP .. '/port')
  if t and t:match('%d+\n') then base = 'http://127.0.0.1:' .. t:match('%d+') break end
  task.sleep(0.05)
end
if not base then
  fake:close()
  error('soak: the fake did not start: ' .. tostring(fs.read(TMP .. '/fake.log')), 0)
end
http.configure { max_connections = N + 512, max_host_connections = 0, max_total_connections = 0 }
local HEADERS = { ['Content-Type'] = 'application/json' }

local res = { sandboxes = N, ramp = RAMP, hold_s = HOLD, beat_s = BEAT, nofile = NOFILE, fds_start = fds(),
  rss_start_kb = rss_kb(), versions = sys.versions() }
local first_error, errors = nil, 0
local function fail(what, err)
  errors = errors + 1
  first_error = first_error or (what .. ': ' .. tostring(err))
end

-- created: every sandbox the fake gave, densely, so the delete phase reaches each one even
-- when a create failed in between (a hole in an indexed list stopped it, and the streams of
-- the sandboxes never deleted kept the soak waiting for their timeouts)
local created, opened, beats, lat, ended, stream_failed = {}, 0, 0, {}, 0, 0
local stream_tasks = {}
local u0 = sys.usage()
local t0 = clock.now()

-- ramp: RAMP workers create sandboxes and open their streams
local next_i = 0
local workers = {}
for w = 1, RAMP do
  workers[w] = task.spawn(function()
    while next_i < N and not first_error do
      next_i = next_i + 1
      local i = next_i
      local r, err = http.request { method = 'POST', url = base .. '/api/sandboxes', headers = HEADERS, body = '{}', timeout = 120 }
      if not r or r.status ~= 201 then fail('create ' .. i, err or r.status) break end
      local id = cjson.decode(r.body).sandboxId
      created[#created + 1] = id
      local got_first = false
      stream_tasks[#stream_tasks + 1] = task.spawn(function()
        local buf = ''
        local sr, serr = http.request { method = 'POST', url = base .. '/api/sandboxes/' .. id .. '/stream', headers = HEADERS,
          body = '{"cmd":"agent"}', timeout = HOLD + 600, stream = function(chunk)
            local now = clock.now()
            buf = buf .. chunk
            for line in buf:gmatch('([^\n]*)\n') do
              local sent = math.tointeger(tonumber(line))
              if sent then
                beats = beats + 1
                if got_first then lat[#lat + 1] = (now - sent) / 1e6 end
                if not got_first then got_first = true; opened = opened + 1 end
              end
            end
            buf = buf:match('[^\n]*$')
          end }
        if not sr or sr.status ~= 200 then
          stream_failed = stream_failed + 1
          fail('stream ' .. i, serr or sr.status)
        else
          ended = ended + 1
        end
      end)
    end
  end)
end
for _, w in ipairs(workers) do task.join(w) end
while opened + stream_failed < #created and not first_error and clock.now() - t0 < 600e9 do task.sleep(0.1) end
res.ramp_s = (clock.now() - t0) / 1e9
res.opened = opened
res.fds_open = fds()
res.rss_open_kb = rss_kb()
io.stderr:write(string.format('soak: %d sandboxes with open streams after %.1f s, %d fds (limit %s), RSS %.1f MiB%s\n',
  opened, res.ramp_s, res.fds_open, tostring(res.nofile), res.rss_open_kb / 1024, first_error and (', first error: ' .. first_error) or ''))

-- hold: heartbeats keep coming; sample the process
local u1 = sys.usage()
local lat_start = #lat
local h0 = clock.now()
local peak_rss, peak_fds = res.rss_open_kb, res.fds_open
while clock.now() - h0 < HOLD * 1e9 and not first_error do
  task.sleep(1)
  peak_rss = math.max(peak_rss, rss_kb())
  peak_fds = math.max(peak_fds, fds())
end
local u2 = sys.usage()
local hold_lat = {}
for k = lat_start + 1, #lat do hold_lat[#hold_lat + 1] = lat[k] end
local s = stats.summary(hold_lat)
res.hold_beats = #hold_lat
res.beat_error_ms = { p50 = s.p50, p99 = s.p99, max = s.max, n = s.n }
res.hold_cpu_s = (u2.user_s + u2.sys_s) - (u1.user_s + u1.sys_s)
res.hold_cpu_share = res.hold_cpu_s / HOLD
res.ramp_cpu_s = (u1.user_s + u1.sys_s) - (u0.user_s + u0.sys_s)
res.peak_rss_kb, res.peak_fds = peak_rss, peak_fds

-- delete all: each delete ends its stream
local d0 = clock.now()
local undeleted = {} -- a delete that failed (out of descriptors: the streams hold them all) is retried
next_i = 0
workers = {}
for w = 1, RAMP do
  workers[w] = task.spawn(function()
    while next_i < #created do
      next_i = next_i + 1
      local id = created[next_i]
      local r, err = http.request { method = 'DELETE', url = base .. '/api/sandboxes/' .. id, timeout = 120 }
      if not r or r.status ~= 204 then
        fail('delete ' .. id, err or (r and r.status))
        undeleted[#undeleted + 1] = id
      end
    end
  end)
end
for _, w in ipairs(workers) do task.join(w) end
-- every delete ends its stream; one that has not ended 60 s after the last delete is cancelled
-- and counted, so an error never leaves the soak waiting for a stream's timeout
local grace = clock.now() + 60e9
local function streams_left()
  local n = 0
  for _, t in ipairs(stream_tasks) do if t:status() ~= 'done' then n = n + 1 end end
  return n
end
while streams_left() > 0 and clock.now() < grace do task.sleep(0.1) end
res.streams_cancelled = 0
for _, t in ipairs(stream_tasks) do
  if t:status() ~= 'done' then
    t:cancel()
    res.streams_cancelled = res.streams_cancelled + 1
  end
end
if res.streams_cancelled > 0 then fail('streams', res.streams_cancelled .. ' did not end after their delete (cancelled)') end
for _, t in ipairs(stream_tasks) do pcall(task.join, t) end
-- the cancelled streams gave their descriptors back: the deletes that failed go again, so the
-- fake is left with nothing live
res.delete_retried, res.delete_failed = #undeleted, 0
for _, id in ipairs(undeleted) do
  local r = http.request { method = 'DELETE', url = base .. '/api/sandboxes/' .. id, timeout = 120 }
  if not r or (r.status ~= 204 and r.status ~= 404) then res.delete_failed = res.delete_failed + 1 end
end
res.delete_s = (clock.now() - d0) / 1e9
res.ended = ended
local fr = http.request { url = base .. '/stats', timeout = 30 }
res.fake = fr and fr.status == 200 and cjson.decode(fr.body) or nil
res.errors, res.first_error = errors, first_error
res.maxrss_kb = sys.usage().maxrss_kb
fake:close()
fs.remove_tree(TMP)

local summary = string.format(
  '%d sandboxes, %d streams open after %.1f s (ramp %d), held %.0f s: client RSS peak %.1f MiB (%.1f KiB per sandbox), ' ..
  'fds peak %d of %s, CPU %.1f%% of a core while holding (%.1f s for the ramp), heartbeat error p50 %.2f / p99 %.2f / max %.2f ms ' ..
  '(%d beats), %d deleted in %.1f s (%d on a second try), %s left live at the fake, %d streams ended, errors %d%s',
  N, opened, res.ramp_s, RAMP, HOLD, peak_rss / 1024, (peak_rss - res.rss_start_kb) / math.max(1, opened), peak_fds, tostring(res.nofile),
  res.hold_cpu_share * 100, res.ramp_cpu_s, s.p50 or -1, s.p99 or -1, s.max or -1, #hold_lat,
  res.fake and res.fake.deleted or -1, res.delete_s, res.delete_retried, res.fake and string.format('%d', res.fake.live) or '?', ended, errors,
  first_error and (' (first: ' .. first_error .. ')') or '')
print(summary)
res.summary = summary
if opts.out then assert(fs.write(opts.out, jsonl.encode(res))) end
if opts.markdown then -- the section between <!-- soak:begin --> and <!-- soak:end --> (bench/run.lua keeps it)
  local la = (fs.read('/proc/loadavg') or ''):match('^(%S+ %S+ %S+)') or '?'
  local md = table.concat({
    '<!-- soak:begin -->',
    '## The 10,000-sandbox soak',
    '',
    string.format('Generated by `./cseng lua bench/soak.lua --sandboxes %d --hold %g --beat %g --markdown ...` (%s UTC; not part of ' ..
      '`make bench`, whose regeneration keeps this section; load average at the end %s on a 2-core machine shared with ' ..
      'other agents). One cseng process creates %d sandboxes of a loopback fake (its own process), %d creates at a time, ' ..
      'and holds each with an open exec stream (a chunked response on its own HTTP/1.1 connection; the fake writes a ' ..
      'heartbeat with its `clock.now()` every %g s), then deletes them all, which ends each stream.',
      N, HOLD, BEAT, os.date('!%Y-%m-%d %H:%M'), la, N, RAMP, BEAT),
    '',
    '| measure | value |',
    '| :--- | ---: |',
    string.format('| sandboxes with an open stream | %d of %d (%.1f s to open them all) |', opened, N, res.ramp_s),
    string.format('| client RSS at start / all open / peak | %.1f / %.1f / %.1f MiB (%.1f KiB per sandbox) |',
      res.rss_start_kb / 1024, res.rss_open_kb / 1024, peak_rss / 1024, (peak_rss - res.rss_start_kb) / math.max(1, opened)),
    string.format('| file descriptors at peak / RLIMIT_NOFILE (raised to the hard limit at start) | %d / %s |', peak_fds, tostring(res.nofile)),
    string.format('| client CPU while holding | %.1f%% of a core (%.2f s in %g s) |', res.hold_cpu_share * 100, res.hold_cpu_s, HOLD),
    string.format('| client CPU to open them (create + stream start) | %.2f s (%.0f µs per sandbox) |', res.ramp_cpu_s,
      res.ramp_cpu_s / math.max(1, opened) * 1e6),
    string.format('| heartbeat timing error while holding (receive − send), p50 / p99 / max | %.2f / %.2f / %.2f ms (%d beats) |',
      s.p50 or -1, s.p99 or -1, s.max or -1, #hold_lat),
    string.format('| deleted, streams ended, errors | %d in %.1f s, %d, %d%s |', res.fake and res.fake.deleted or -1, res.delete_s,
      ended, errors, first_error and (' (first: ' .. first_error .. ')') or ''),
    string.format('| the fake: peak streams, RSS, CPU | %s, %s MiB, %s s |', res.fake and tostring(res.fake.peak_streams) or '?',
      res.fake and string.format('%.1f', res.fake.maxrss_kb / 1024) or '?', res.fake and string.format('%.1f', res.fake.cpu_s) or '?'),
    '',
    '<!-- soak:end -->',
  }, '\n')
  local text = fs.read(opts.markdown) or ''
  local a, b = text:find('<!%-%- soak:begin %-%->.-<!%-%- soak:end %-%->')
  text = a and (text:sub(1, a - 1) .. md .. text:sub(b + 1)) or (text .. '\n' .. md .. '\n')
  assert(fs.write(opts.markdown, text))
end
return errors == 0 and 0 or 1
