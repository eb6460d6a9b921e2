--- The live status of a run a log names (`cseng run --status-port P`), and the proof the viewer
--- asks for before it connects: a log may come from anywhere, and a port it names may be any
--- loopback service (a proxy into what listens only on 127.0.0.1). The viewer connects only when
--- this machine's /proc shows, without a connection, that the log's own writer holds the port:
---
---   1. the log was written on this host (run_started's `host`), by the live process `pid`;
---   2. that process holds the log itself open (a run keeps its log's lock descriptor until it
---      ends: /proc/<pid>/fd has a link to the log's real path);
---   3. that same process holds the listening TCP socket of port P on 127.0.0.1 or 0.0.0.0
---      (one of its /proc/<pid>/fd links is socket:[inode], and /proc/net/tcp lists that inode
---      listening on P).
---
--- A copied log (another host, or a writer that is gone), a pid that is not the log's writer, and
--- a writer that does not hold the port all fail the proof; so does a run of another user (its
--- /proc/<pid>/fd is not readable). Nothing here connects anywhere; status.fetch connects to a
--- port only after status.proven_port returned it.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')

local status = {}

-- 127.0.0.1 and 0.0.0.0 as /proc/net/tcp prints them (the address as a native 32-bit number:
-- little- and big-endian hosts)
local LOOPBACK = { ['0100007F'] = true, ['7F000001'] = true, ['00000000'] = true }

--- The port a log's argv asks for (`--status-port P` or `--status-port=P`), or nil.
---@param started table|nil the run_started record
---@return integer|nil
function status.port_of(started)
  local argv = type(started) == 'table' and started.argv
  if type(argv) ~= 'table' then return nil end
  local port
  for i, a in ipairs(argv) do
    local v = (a == '--status-port' and argv[i + 1]) or (type(a) == 'string' and a:match('^%-%-status%-port=(%d+)$'))
    if type(v) == 'string' and v:match('^%d+$') then port = math.tointeger(tonumber(v)) end
  end
  if port and port >= 1 and port <= 65535 then return port end
  return nil
end

--- The status port the writer of the log at `path` proves it holds (see the module's header),
--- or nil and why not. Reads /proc only.
---@param path string the log
---@param started table its run_started record
---@return integer|nil port
---@return string|nil why
function status.proven_port(path, started)
  local port = status.port_of(started)
  if not port then return nil, 'no --status-port in its argv' end
  if started.host ~= sys.hostname() then return nil, 'written on another host' end
  local pid = math.tointeger(started.pid)
  if not pid or pid <= 0 then return nil, 'no pid' end
  local fd_dir = '/proc/' .. pid .. '/fd'
  local fds = fs.list(fd_dir)
  if not fds then return nil, 'its process is gone or not ours to inspect' end
  local real = sys.realpath(path)
  if not real then return nil, 'the log is gone' end
  local holds, sockets = false, {}
  for _, fd in ipairs(fds) do
    local target = fs.readlink(fd_dir .. '/' .. fd)
    if target == real then holds = true
    elseif target then
      local inode = target:match('^socket:%[(%d+)%]$')
      if inode then sockets[inode] = true end
    end
  end
  if not holds then return nil, 'its process does not hold the log' end
  local want = string.format('%04X', port)
  for line in (fs.read('/proc/net/tcp') or ''):gmatch('[^\n]+') do
    local f = {}
    for w in line:gmatch('%S+') do f[#f + 1] = w end
    local addr, p = (f[2] or ''):match('^(%x+):(%x+)$')
    if p == want and f[4] == '0A' and LOOPBACK[addr] and sockets[f[10]] then return port end
  end
  return nil, 'its process does not listen on 127.0.0.1:' .. port
end

--- The status document of a live run whose writer proved it holds the port (nil otherwise, or
--- when the port does not answer within a second).
---@param path string
---@param started table
---@return table|nil
function status.fetch(path, started)
  local port = status.proven_port(path, started)
  if not port then return nil end
  local http = require('cseng.http')
  local r = http.request { url = string.format('http://127.0.0.1:%d/status', port), timeout = 1 }
  if not r or r.status ~= 200 then return nil end
  return jsonl.decode(r.body)
end

return status
