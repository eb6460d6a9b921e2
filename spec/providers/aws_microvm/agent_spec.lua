-- The exec agent for AWS Lambda MicroVMs (microvm-agent/microvm-agent.c), on loopback:
--   exec (stdout, stderr, exit code, env, cwd, stdin, tails), a timeout that kills the process
--   group, put/get round trips of tar archives, refused path escapes, refused requests without
--   the token or with a wrong one, the hooks and the run hook's token, malformed and slow
--   requests; on the native build and on the aarch64 build under qemu-user (qemu-aarch64).
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local http = require('cseng.http')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local jsonl = require('cseng.lib.jsonl')

local ROOT = sys.root()
local NATIVE = ROOT .. '/build/microvm-agent/microvm-agent'
local AARCH64 = ROOT .. '/build/microvm-agent/microvm-agent-aarch64'
local TOKEN_HEADER = 'X-Cseng-Agent-Token'

-- Build both binaries (make: nothing to do when they are current).
local built = assert(proc.run { argv = { 'make', '-s', '-C', ROOT, 'build/microvm-agent/microvm-agent',
                                         'build/microvm-agent/microvm-agent-aarch64' }, timeout = 300 })
assert(built.code == 0, 'make agent failed: ' .. built.stdout .. built.stderr)

local QEMU = proc.which('qemu-aarch64')
local qemu_reason
if not QEMU then
  qemu_reason = 'qemu-aarch64 (Debian qemu-user) is not installed'
else
  local r = proc.run { argv = { QEMU, AARCH64, '--version' }, timeout = 60 }
  if not r or r.code ~= 0 or not r.stdout:find('aarch64', 1, true) then
    qemu_reason = 'qemu-aarch64 cannot run the aarch64 build here: ' .. tostring(r and (r.stdout .. r.stderr))
  end
end

-- Start an agent; returns {url, token, dir, log(), close()}.
local function start(prefix, opts)
  opts = opts or {}
  local dir = assert(fs.tempdir('cseng-agent-spec-'))
  local token
  if not opts.no_token then token = crypto.hex(crypto.random_bytes(16)) end
  local argv = {}
  for _, a in ipairs(prefix) do argv[#argv + 1] = a end
  for _, a in ipairs { '--port', '0', '--listen', '127.0.0.1', '--port-file', dir .. '/port',
                       '--token-file', dir .. '/token' } do
    argv[#argv + 1] = a
  end
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  local p = assert(proc.spawn { argv = argv, env_add = { CSENG_AGENT_TOKEN = token or false },
                                stderr = dir .. '/log', stdout = 'null' })
  local port
  for _ = 1, 600 do -- qemu starts slower; the port file appears once listening
    local s = fs.read(dir .. '/port')
    if s and s:match('^%d+\n$') then port = tonumber(s); break end
    task.sleep(0.05)
  end
  if not port then
    p:close()
    error('agent did not start: ' .. tostring(fs.read(dir .. '/log')))
  end
  local a = { url = 'http://127.0.0.1:' .. port, port = port, token = token, dir = dir, p = p }
  function a.log() return fs.read(dir .. '/log') or '' end
  function a.close()
    p:close()
    fs.remove_tree(dir)
  end
  return a
end

local function req(a, method, path, body, headers, token)
  local h = { ['Content-Type'] = 'application/json' }
  if token ~= false then h[TOKEN_HEADER] = token or a.token end
  for k, v in pairs(headers or {}) do h[k] = v end
  return assert(http.request { url = a.url .. path, method = method, headers = h, body = body, timeout = 120 })
end

local function exec(a, t, token)
  local r = req(a, 'POST', '/exec', jsonl.encode(t), nil, token)
  assert.equal(200, r.status, r.body)
  return jsonl.decode(r.body)
end

-- pids of live processes whose command line contains s
local survivors = require('spec.helpers.common').pgrep

-- a ustar header block for hostile archives cseng.archive refuses to write
local function ustar(name, data, typeflag, linkname)
  data = data or ''
  local function field(s, n) return s .. string.rep('\0', n - #s) end
  local function oct(v, n) return string.format('%0' .. (n - 1) .. 'o', v) .. '\0' end
  local h = field(name, 100) .. oct(420, 8) .. oct(0, 8) .. oct(0, 8) .. oct(#data, 12) .. oct(0, 12)
    .. string.rep(' ', 8) .. (typeflag or '0') .. field(linkname or '', 100) .. 'ustar\00000' .. string.rep('\0', 247)
  local sum = 0
  for i = 1, #h do sum = sum + h:byte(i) end
  h = h:sub(1, 148) .. string.format('%06o\0 ', sum) .. h:sub(157)
  assert(#h == 512)
  return h .. data .. string.rep('\0', (512 - #data % 512) % 512)
end
local END = string.rep('\0', 1024)

local function suite(label, prefix, skip_reason)
  describe('microvm-agent (' .. label .. ')', function()
    if skip_reason then
      it('runs', function() pending(skip_reason) end)
      return
    end
    local a
    setup(function() a = start(prefix) end)
    teardown(function() if a then a.close() end end)

    it('answers /health with its architecture', function()
      local r = req(a, 'GET', '/health')
      assert.equal(200, r.status)
      local h = jsonl.decode(r.body)
      assert.is_true(h.ok)
      assert.equal(label == 'aarch64' and 'aarch64' or 'x86_64', h.arch)
    end)

    it('runs a shell command: stdout, stderr, exit code', function()
      local r = exec(a, { cmd = 'echo out; echo err >&2; exit 7' })
      assert.equal(7, r.code)
      assert.equal('out\n', r.stdout)
      assert.equal('err\n', r.stderr)
      assert.is_false(r.timed_out)
      assert.is_nil(r.signal)
    end)

    it('runs an argv with cwd, env and stdin', function()
      local cwd = a.dir .. '/work dir'
      assert(fs.mkdir_p(cwd))
      local r = exec(a, { argv = { 'sh', '-c', 'pwd; echo "$GREETING"; cat; printf "%s" "$CSENG_AGENT_TOKEN"' },
                          cwd = cwd, env = { GREETING = 'hello world' }, stdin = 'from stdin\n' })
      assert.equal(0, r.code)
      assert.equal(cwd .. '\nhello world\nfrom stdin\n', r.stdout) -- the agent's token is not passed on
      r = exec(a, { argv = { 'no-such-program-cseng' } })
      assert.equal(127, r.code)
      assert.matches('no%-such%-program%-cseng', r.exec_error)
      local bad = req(a, 'POST', '/exec', jsonl.encode { cmd = 'true', cwd = a.dir .. '/missing' })
      assert.equal(400, bad.status)
      assert.matches('cwd', bad.body)
      bad = req(a, 'POST', '/exec', '{"cmd": ')
      assert.equal(400, bad.status)
      bad = req(a, 'POST', '/exec', jsonl.encode { cmd = 'true', argv = { 'true' } })
      assert.equal(400, bad.status)
    end)

    it('keeps the tail of large output and counts what it dropped', function()
      local r = exec(a, { cmd = 'head -c 300000 /dev/zero | tr "\\0" a; printf END', tail_bytes = 1000 })
      assert.equal(0, r.code)
      assert.equal(1000, #r.stdout)
      assert.equal('END', r.stdout:sub(-3))
      assert.equal(300003, r.stdout_bytes)
      assert.equal(299003, r.stdout_dropped)
    end)

    it('kills a command that outlives its timeout, with its process group', function()
      local marker = string.format('1000.%06d', math.random(0, 999999))
      local r = exec(a, { cmd = 'sleep ' .. marker .. ' & sleep ' .. marker .. '; echo never', timeout = 1 })
      assert.is_true(r.timed_out)
      assert.equal('SIGKILL', r.signal)
      assert.equal(137, r.code)
      assert.equal('', r.stdout)
      local left
      for _ = 1, 100 do
        left = survivors('sleep ' .. marker)
        if #left == 0 then break end
        task.sleep(0.05)
      end
      assert.same({}, left)
    end)

    it('puts a tar into a directory and gets files and directories back', function()
      local long = string.rep('d', 60) .. '/' .. string.rep('e', 60) .. '/' .. string.rep('f', 70) .. '.txt'
      local blob = crypto.random_bytes(200000)
      local tar = assert(archive.pack({
        { path = 'hello.txt', data = 'hello\n' },
        { path = 'bin/run.sh', data = '#!/bin/sh\necho run\n', mode = '0755' },
        { path = 'data/blob.bin', data = blob },
        { path = 'empty', type = 'dir', mode = '0700' },
        { path = 'current', type = 'symlink', target = 'hello.txt' },
        { path = long, data = 'long name\n' },
      }, { format = 'tar' }))
      local dst = a.dir .. '/put/here'
      local r = req(a, 'PUT', '/files?dir=' .. dst, tar, { ['Content-Type'] = 'application/x-tar' })
      assert.equal(200, r.status, r.body)
      assert.is_true(jsonl.decode(r.body).ok)
      assert.equal('hello\n', fs.read(dst .. '/hello.txt'))
      assert.equal(blob, fs.read(dst .. '/data/blob.bin'))
      assert.equal('long name\n', fs.read(dst .. '/' .. long))
      assert.equal('hello.txt', fs.readlink(dst .. '/current'))
      assert.equal(tonumber('755', 8), fs.stat(dst .. '/bin/run.sh').mode & tonumber('777', 8))
      assert.equal('run\n', exec(a, { cmd = dst .. '/bin/run.sh' }).stdout)

      r = req(a, 'GET', '/files?path=' .. dst .. '/data/blob.bin')
      assert.equal(200, r.status)
      assert.equal('file', r.headers['x-cseng-file-type'])
      assert.equal(blob, r.body)

      r = req(a, 'GET', '/files?path=' .. dst)
      assert.equal(200, r.status)
      assert.equal('directory', r.headers['x-cseng-file-type'])
      local back = a.dir .. '/back'
      assert(fs.mkdir_p(back))
      assert(archive.extract(r.body, back))
      assert.equal('hello\n', fs.read(back .. '/hello.txt'))
      assert.equal(blob, fs.read(back .. '/data/blob.bin'))
      assert.equal('long name\n', fs.read(back .. '/' .. long))
      assert.equal('hello.txt', fs.readlink(back .. '/current'))
      assert.is_true(fs.stat(back .. '/empty').type == 'dir' or fs.stat(back .. '/empty').type == 'directory')

      r = req(a, 'GET', '/files?path=' .. dst .. '/missing')
      assert.equal(404, r.status)
      r = req(a, 'GET', '/files?path=relative/path')
      assert.equal(400, r.status)
    end)

    it('refuses archive members that would escape the directory', function()
      local dst = a.dir .. '/escape/dst'
      local outside = a.dir .. '/escape/outside'
      assert(fs.mkdir_p(outside))
      local cases = {
        { 'dotdot', ustar('../evil.txt', 'x') .. END },
        { 'nested dotdot', ustar('ok/../../evil.txt', 'x') .. END },
        { 'absolute', ustar(outside .. '/evil.txt', 'x') .. END },
        { 'through a symlink', ustar('l', '', '2', outside) .. ustar('l/evil.txt', 'x') .. END },
        { 'hard link', ustar('h', '', '1', '/etc/passwd') .. END },
        { 'good member before a bad one', ustar('good.txt', 'x') .. ustar('../evil.txt', 'x') .. END },
      }
      for _, c in ipairs(cases) do
        local r = req(a, 'PUT', '/files?dir=' .. dst, c[2], { ['Content-Type'] = 'application/x-tar' })
        assert.equal(400, r.status, c[1] .. ': ' .. r.body)
        assert.is_nil(fs.lstat(dst .. '/good.txt'), c[1]) -- checked before anything is written
        assert.is_nil(fs.lstat(outside .. '/evil.txt'), c[1])
        assert.is_nil(fs.lstat(a.dir .. '/escape/evil.txt'), c[1])
      end
      -- a symlink already in dir (only the writing pass can see it)
      assert(fs.mkdir_p(dst))
      assert(fs.symlink(outside, dst .. '/planted'))
      local r0 = req(a, 'PUT', '/files?dir=' .. dst, ustar('planted/evil.txt', 'x') .. END)
      assert.equal(400, r0.status, r0.body)
      assert.is_nil(fs.lstat(outside .. '/evil.txt'))
      -- a relative dir, a corrupt archive
      assert.equal(400, req(a, 'PUT', '/files?dir=rel', ustar('f', 'x') .. END).status)
      local corrupt = ustar('f', 'x'):gsub('^f', 'g') .. END
      local r = req(a, 'PUT', '/files?dir=' .. dst, corrupt)
      assert.equal(400, r.status)
      assert.matches('checksum', r.body)
      assert.matches('refused archive member', a.log())
    end)

    it('refuses requests without the token or with a wrong one, and logs them', function()
      local flag = a.dir .. '/ran'
      local body = jsonl.encode { cmd = 'touch ' .. flag }
      local none = req(a, 'POST', '/exec', body, nil, false)
      assert.equal(401, none.status)
      local wrong = req(a, 'POST', '/exec', body, nil, a.token:sub(1, -2) .. 'x')
      assert.equal(401, wrong.status)
      local empty = req(a, 'POST', '/exec', body, nil, '')
      assert.equal(401, empty.status)
      assert.equal(401, req(a, 'GET', '/files?path=/etc/passwd', nil, nil, false).status)
      assert.equal(401, req(a, 'PUT', '/files?dir=' .. a.dir .. '/x', ustar('f', 'x') .. END, nil, 'nope').status)
      assert.equal(401, req(a, 'GET', '/health', nil, nil, false).status)
      assert.is_nil(fs.lstat(flag))
      assert.is_nil(fs.lstat(a.dir .. '/x'))
      local log = a.log()
      assert.matches('401 POST /exec: no X%-Cseng%-Agent%-Token header', log)
      assert.matches('401 POST /exec: wrong token', log)
      assert.is_nil(log:find(a.token, 1, true))
      -- the right token still works
      assert.equal(0, exec(a, { cmd = 'true' }).code)
    end)

    it('answers malformed and slow requests and keeps serving others', function()
      local py = [[
import socket, sys, json
port = int(sys.argv[1]); out = {}
def talk(data, close_write=False):
    s = socket.create_connection(('127.0.0.1', port), timeout=60)
    s.sendall(data)
    if close_write: s.shutdown(socket.SHUT_WR)
    buf = b''
    while True:
        try: c = s.recv(65536)
        except socket.timeout: break
        if not c: break
        buf += c
    s.close()
    return buf.split(b'\r\n', 1)[0].decode()
slow = socket.create_connection(('127.0.0.1', port), timeout=60)
slow.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n')   # never finished
out['garbage'] = talk(b'\x00\x01 nonsense\r\n\r\n')
out['version'] = talk(b'GET /health HTTP/2.0\r\n\r\n')
out['huge_head'] = talk(b'GET /health HTTP/1.1\r\nX: ' + b'a' * 20000 + b'\r\n\r\n')
out['too_big'] = talk(b'PUT /files?dir=/tmp/x HTTP/1.1\r\nX-Cseng-Agent-Token: ' + sys.argv[2].encode() +
                      b'\r\nContent-Length: 99999999999\r\n\r\n')
out['chunked_exec'] = talk(b'POST /exec HTTP/1.1\r\nX-Cseng-Agent-Token: ' + sys.argv[2].encode() +
                           b'\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"cmd\r\n9\r\n":"true"}\r\n0\r\n\r\n')
out['while_slow'] = talk(b'GET /health HTTP/1.1\r\nX-Cseng-Agent-Token: ' + sys.argv[2].encode() + b'\r\n\r\n')
slow.settimeout(60)
out['slow'] = slow.recv(65536).split(b'\r\n', 1)[0].decode()
# --max-conns 1 (the third agent): one connection held open, the next one gets 503 at once
port = int(sys.argv[3])
held = socket.create_connection(('127.0.0.1', port), timeout=60)
held.sendall(b'GET /health HTTP/1.1\r\n')
import time
for _ in range(100):   # the agent counts the held connection once it has accepted it
    r = talk(b'GET /health HTTP/1.1\r\n\r\n')
    if r.startswith('HTTP/1.1 503'): break
    time.sleep(0.05)
out['busy'] = r
held.close()
print(json.dumps(out))
]]
      local b = start(prefix, { args = { '--header-timeout', '1', '--max-body', '1000000' } })
      local c = start(prefix, { args = { '--max-conns', '1' } })
      local ok, err = pcall(function()
        local r = assert(proc.run { argv = { 'python3', '-c', py, tostring(b.port), b.token, tostring(c.port) },
                                    timeout = 120 })
        assert.equal(0, r.code, r.stderr)
        local o = jsonl.decode(r.stdout)
        assert.equal('HTTP/1.1 400 Bad Request', o.garbage)
        assert.equal('HTTP/1.1 505 HTTP Version Not Supported', o.version)
        assert.equal('HTTP/1.1 431 Request Header Fields Too Large', o.huge_head)
        assert.equal('HTTP/1.1 413 Content Too Large', o.too_big)
        assert.equal('HTTP/1.1 200 OK', o.chunked_exec)
        assert.equal('HTTP/1.1 200 OK', o.while_slow)
        assert.equal('HTTP/1.1 408 Request Timeout', o.slow)
        assert.equal('HTTP/1.1 503 Service Unavailable', o.busy)
        assert.is_nil(b.log():find('AddressSanitizer', 1, true))
        assert.is_nil(b.log():find('runtime error:', 1, true))
      end)
      b.close()
      c.close()
      assert(ok, err)
    end)

    it('serves concurrent requests, and runs a command as another user', function()
      local tasks = {}
      for i = 1, 8 do
        tasks[i] = task.spawn(function() return exec(a, { cmd = 'sleep 0.2; echo ' .. i }) end)
      end
      for i = 1, 8 do
        local ok, r = task.join(tasks[i])
        assert(ok, r)
        assert.equal(i .. '\n', r.stdout)
      end
      if sys.uid() == 0 and (fs.read('/etc/passwd') or ''):find('\nnobody:', 1, true) then
        local r = exec(a, { argv = { 'id', '-un' }, user = 'nobody' })
        assert.equal('nobody\n', r.stdout)
      end
      local bad = req(a, 'POST', '/exec', jsonl.encode { argv = { 'true' }, user = 'no-such-user-cseng' })
      assert.equal(400, bad.status)
      assert.matches('no%-such%-user%-cseng', bad.body)
    end)

    it('logged no crash or sanitizer report (for ASAN builds of the agent)', function()
      local log = a.log()
      assert.is_nil(log:find('AddressSanitizer', 1, true))
      assert.is_nil(log:find('runtime error:', 1, true))
      assert.matches('listening on 127%.0%.0%.1:' .. a.port, log)
    end)
  end)

  describe('microvm-agent hooks (' .. label .. ')', function()
    if skip_reason then
      it('runs', function() pending(skip_reason) end)
      return
    end

    it('serves the hook paths without a token and takes the token from the run hook', function()
      local a = start(prefix, { no_token = true, args = { '--hook', 'validate=/hooks/validate' } })
      local ok, err = pcall(function()
        local r = req(a, 'POST', '/exec', jsonl.encode { cmd = 'true' }, nil, 'anything')
        assert.equal(401, r.status)
        assert.matches('no token configured yet', r.body)
        for _, p in ipairs { '/ready', '/hooks/validate', '/resume', '/suspend' } do
          r = req(a, 'POST', p, '', nil, false)
          assert.equal(200, r.status, p)
          assert.is_true(jsonl.decode(r.body).ok, p)
        end
        assert.equal(401, req(a, 'POST', '/validate', '', nil, false).status) -- no longer a hook path
        r = req(a, 'POST', '/run', jsonl.encode { token = 'tok-from-payload' }, nil, false)
        assert.equal(200, r.status)
        assert.is_true(jsonl.decode(r.body).token_set)
        assert.equal(0, exec(a, { cmd = 'exit 0' }, 'tok-from-payload').code)
        -- a second run hook cannot replace it
        r = req(a, 'POST', '/run', jsonl.encode { token = 'other' }, nil, false)
        assert.is_false(jsonl.decode(r.body).token_set)
        assert.equal(401, req(a, 'POST', '/exec', jsonl.encode { cmd = 'true' }, nil, 'other').status)
        assert.equal(200, req(a, 'POST', '/terminate', '', nil, false).status)
      end)
      a.close()
      assert(ok, err)
    end)
  end)
end

suite('native', { NATIVE }, nil)
suite('aarch64', { QEMU or 'qemu-aarch64', AARCH64 }, qemu_reason)
