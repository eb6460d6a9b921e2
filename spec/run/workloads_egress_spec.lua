-- The arena's egress workload (lua/cseng/run/workloads/egress.lua): its URL (given, or taken from
-- the machine's apt sources), refused when it is no http(s) URL or holds what a shell reads; a
-- sandbox without the network refused before the log is opened; a fetch through the arena on
-- local from a "mirror" this spec serves (python3 -m http.server: on the loopback for a sandbox
-- sharing the host's network, and in a network namespace of its own behind a veth pair for the
-- allowlist path through slirp4netns), the bytes that arrived compared with the host's own fetch;
-- a missing file is a labelled failure. Never the real network; no duration decides anything.
local util = require('cseng.lib.util')
local cjson = require('cjson')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local task = require('cseng.task')
local errors = require('cseng.lib.errors')
local workloads = require('cseng.run.workloads')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local egress = require('cseng.run.workloads.egress')

-- A mirror's tree: a Release file and a 200 KiB blob of random bytes.
local function mirror_tree()
  local dir = H.tempdir('egress-mirror-')
  assert(fs.mkdir_p(dir .. '/debian/dists/test'))
  assert(fs.mkdir_p(dir .. '/debian/pool'))
  local blob = crypto.random_bytes(200 * 1024)
  assert(fs.write(dir .. '/debian/pool/blob.bin', blob))
  assert(fs.write(dir .. '/debian/dists/test/Release', 'Origin: cseng test\nSuite: test\n'))
  return dir, blob
end

-- python3 -m http.server on addr (port 0: any) serving dir, run as argv_prefix... : {port, close}.
local function http_server(dir, addr, port, argv_prefix)
  local argv = util.copy(argv_prefix or {})
  for _, a in ipairs({ 'python3', '-u', '-m', 'http.server', tostring(port or 0), '--bind', addr, '--directory', dir }) do
    argv[#argv + 1] = a
  end
  local p = assert(proc.spawn { argv = argv, stdout = 'pipe', stderr = 'null' })
  local line = assert(p:read_line(30))
  local got = tonumber(line:match(' port (%d+)'))
  assert(got, 'no port in: ' .. line)
  return { port = got, close = function() p:close() end }
end

local function run_arena(opts)
  local status, by, errtext, info = A.run(opts, 'arena-egress-')
  return status, by, info, errtext
end

local function base(extra)
  return util.merge({ providers = { 'local' }, samples = 2, warmups = 0, seed = 17, workload = 'egress',
    command = 'echo arena-egress-ready', expect = 'arena-egress-ready' }, extra)
end

describe('egress options', function()
  it('takes its default from the machine\'s apt sources: the first http(s) binary source and its first suite', function()
    local root = H.tempdir('egress-apt-')
    assert(fs.mkdir_p(root .. '/sources.list.d'))
    assert(fs.write(root .. '/sources.list', '# deb http://10.0.0.1/old bookworm main\ndeb cdrom:[Disc 1]/ bookworm main\n'
      .. 'deb file:/srv/repo ./\n'))
    assert(fs.write(root .. '/sources.list.d/a.sources', 'Types: deb-src\nURIs: http://10.0.0.2/src\nSuites: bookworm\n\n'
      .. 'Types: deb\nURIs: http://10.0.0.3/off\nSuites: bookworm\nEnabled: no\n\n'
      .. 'Types: deb\nURIs: https://10.0.0.4/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n'))
    assert(fs.write(root .. '/sources.list.d/b.list', 'deb [signed-by=/k.gpg] http://10.0.0.5/other trixie main\n'))
    assert.equal('https://10.0.0.4/debian/dists/bookworm/Release', egress.default_url(root))
    -- no http(s) source at all: one line naming the field and the flag
    local empty = H.tempdir('egress-apt-empty-')
    assert(fs.write(empty .. '/sources.list', 'deb cdrom:[Disc 1]/ bookworm main\n'))
    local url, why = egress.default_url(empty)
    assert.is_nil(url)
    assert.matches('no http(s) source in ' .. empty .. '/sources.list', why, 1, true)
    egress.apt_root = empty
    local ok, err = pcall(workloads.options, { workload = 'egress' })
    egress.apt_root = nil
    assert.is_false(ok)
    assert.matches('^workload_options.egress_url %(%-%-egress%-url%): no egress_url given', err)
  end)

  it('refuses a URL that is not http(s) or holds what a shell would read, naming the field', function()
    local hostile = {
      'http://127.0.0.1:1/x;touch /tmp/cseng-egress-pwned', 'http://127.0.0.1/$(id)', 'http://127.0.0.1/`id`',
      "http://127.0.0.1/a'b", 'http://127.0.0.1/a b', 'http://127.0.0.1/a|b', 'http://127.0.0.1/a&b',
      'http://127.0.0.1/a>b', 'http://127.0.0.1/a\nb', 'http://127.0.0.1/a"b', 'http://127.0.0.1/a\\b',
      'file:///etc/passwd', 'ftp://127.0.0.1/x', 'gopher://127.0.0.1/x', '-K/etc/passwd', '/etc/passwd',
      'http:///nohost', 'http://user@127.0.0.1/x', 'http://127.0.0.1:99999/x', 'http://-x/y',
    }
    for _, u in ipairs(hostile) do
      local ok, err = pcall(workloads.options, { workload = 'egress', egress_url = u })
      assert.is_false(ok, 'accepted: ' .. u)
      assert.matches('^workload_options.egress_url %(%-%-egress%-url%): ', tostring(err))
      -- the plan's workload_options the same
      ok = pcall(workloads.options, { workload = 'egress', workload_options = { egress_url = u } })
      assert.is_false(ok, 'accepted from the plan: ' .. u)
    end
    for _, u in ipairs({ 'http://127.0.0.1:8080/debian/dists/bookworm/Release', 'https://10.1.2.3/a/b-c_d.e~f?x=1%20',
      'HTTP://mirror-1.internal/pool/+x,y@z' }) do
      assert.equal(u, workloads.options { workload = 'egress', egress_url = u }.egress_url)
    end
  end)

  it('survives fuzzed URLs and apt sources: never raises, accepts only http(s) URLs of the safe characters', function()
    local stats = require('cseng.lib.stats')
    local rng = stats.rng(20261207)
    local seeds = { 'http://127.0.0.1:8080/debian/dists/bookworm/Release', 'https://10.0.0.4/a?b=c%20d' }
    local junk = { ';', '$', '`', "'", '"', ' ', '\n', '\0', '\255', '|', '&', '@', ':', '/', '-', '://', 'file:', '%' }
    local accepted = 0
    for _ = 1, 2000 do
      local b = { seeds[rng.int(#seeds)]:byte(1, -1) }
      for _ = 1, 1 + rng.int(4) do
        local at = rng.int(#b)
        local kind = rng.int(3)
        if kind == 1 then b[at] = rng.int(256) - 1
        elseif kind == 2 then table.remove(b, at)
        else for i, c in ipairs({ junk[rng.int(#junk)]:byte(1, -1) }) do table.insert(b, at + i - 1, c) end end
      end
      local chunks = {}
      for i, c in ipairs(b) do chunks[i] = string.char(c) end
      local u = table.concat(chunks)
      local ok, parts = pcall(egress.parse_url, u)
      assert(ok, parts)
      if parts then
        accepted = accepted + 1
        assert.matches('^[Hh][Tt][Tt][Pp][Ss]?://[%w.-]', u)
        assert.matches('^[%w%-%._~:/%%?=+,@]+$', u)
        assert.is_true(parts.port >= 1 and parts.port <= 65535)
      end
    end
    assert.is_true(accepted > 0)
    -- apt sources of random bytes and cut stanzas: a list, never an error
    local root = H.tempdir('egress-apt-fuzz-')
    assert(fs.mkdir_p(root .. '/sources.list.d'))
    local text = 'Types: deb\nURIs: http://10.0.0.4/debian\nSuites: bookworm\n\ndeb [a=b] http://10.0.0.5/x trixie main\n'
    for _ = 1, 200 do
      local b = { text:byte(1, -1) }
      for _ = 1, 1 + rng.int(6) do b[rng.int(#b)] = rng.int(256) - 1 end
      local chunks = {}
      for i, c in ipairs(b) do chunks[i] = string.char(c) end
      assert(fs.write(root .. '/sources.list.d/a.sources', table.concat(chunks)))
      assert(fs.write(root .. '/sources.list', table.concat(chunks)))
      local ok, url = pcall(egress.default_url, root)
      assert(ok, url)
      if url then assert.is_true(egress.parse_url(url) ~= nil or url:match('^[Hh][Tt][Tt][Pp][Ss]?://') ~= nil) end
    end
  end)

  it('refuses a hostile URL and a sandbox without the network before the log is opened', function()
    local frame = require('cseng.run.frame')
    local dir = H.tempdir('arena-egress-refused-')
    local ok, err = pcall(frame.run, 'startup', base { output = dir, quiet = true, egress_url = 'http://127.0.0.1/;reboot',
      sandbox = { network = true } })
    assert.is_false(ok)
    assert.matches('workload_options.egress_url (--egress-url)', errors.line(err), 1, true)
    ok, err = pcall(frame.run, 'startup', base { output = dir, quiet = true, egress_url = 'http://127.0.0.1:9/x' })
    assert.is_false(ok)
    assert.matches('--workload egress: local\'s sandboxes have no network', errors.line(err), 1, true)
    assert.same({}, fs.list(dir) or {}) -- no log: nothing was allocated or recorded
  end)
end)

describe('egress through the arena on local (a sandbox sharing the host\'s network)', function()
  local dir, blob, server
  setup(function()
    dir, blob = mirror_tree()
    server = http_server(dir, '127.0.0.1', 0)
  end)
  teardown(function() if server then server.close() end end)
  local function cfg() return { ['local'] = { host_network = true, sandbox = { network = true } } } end

  it('fetches the file whole (length and sha256 as the host fetched it), every figure recorded', function()
    local url = string.format('http://127.0.0.1:%d/debian/pool/blob.bin', server.port)
    local status, by = run_arena(base { provider_config = cfg(), egress_url = url })
    assert.equal(0, status)
    local st = by.run_started[1]
    assert.equal('egress_total_ms', st.headline)
    assert.equal(url, st.workload_options.egress_url)
    assert.equal(2, #by.startup_trial)
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.ok, tostring(t.error))
      assert.same({ ok = true, want = #blob, got = #blob }, t.checks.egress_bytes)
      assert.same({ ok = true, want = crypto.sha256_hex(blob), got = crypto.sha256_hex(blob) }, t.checks.egress_sha256)
      for _, f in ipairs(st.figures) do assert.is_number(t.figures[f[1]], f[1]) end
      assert.matches('^not filtered: ', t.paths.egress_policy) -- the host's network is not the sandbox's to filter
      assert.is_string(t.paths.egress)
    end
    local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
    assert.equal(2, doc.providers[1].figures.egress_total_ms.n)
  end)

  it('a file the mirror does not hold fails the sample (EEGRESS, no figures, labelled), not a time', function()
    local url = string.format('http://127.0.0.1:%d/debian/pool/absent.bin', server.port)
    local status, by = run_arena(base { provider_config = cfg(), egress_url = url, samples = 1 })
    assert.equal(1, status) -- every measured sample failed: the run measured nothing
    local t = by.startup_trial[1]
    assert.is_false(t.ok)
    assert.equal('EEGRESS', t.error_code)
    assert.equal('egress', t.error_stage)
    assert.matches('HTTP 404 (expected 200)', t.error, 1, true)
    assert.is_nil(t.figures)
    assert.same({ 'failed' }, t.audit.labels)
  end)
end)

-- the allowlist through slirp4netns, for real: needs root (the sandbox's namespaces), slirp4netns,
-- iptables and ip; the mirror lives in a network namespace this spec makes (a veth pair, 10.211.79.0/24)
local can = sys.uid() == 0
for _, tool in ipairs({ 'slirp4netns', 'iptables-restore', 'ip', 'nsenter' }) do if not proc.which(tool) then can = false end end
describe('egress on local through the allowlist (slirp4netns)', function()
  if not can then
    pending('needs root, slirp4netns, iptables, ip and nsenter')
    return
  end
  local NS = 'csenge-' .. sys.pid()
  local VETH = 'cse' .. (sys.pid() % 100000)
  local dir, blob, server
  local function sh(cmd)
    local r = assert(proc.run { argv = { 'bash', '-c', cmd }, timeout = 30 })
    assert(r.code == 0, cmd .. ': ' .. r.stderr)
  end
  setup(function()
    sh(string.format('ip netns add %s && ip link add %s type veth peer name %sn netns %s && ip addr add 10.211.79.1/24 dev %s'
      .. ' && ip link set %s up && ip netns exec %s sh -c "ip addr add 10.211.79.2/24 dev %sn && ip link set %sn up'
      .. ' && ip link set lo up"', NS, VETH, VETH, NS, VETH, VETH, NS, VETH, VETH))
    dir, blob = mirror_tree()
    server = http_server(dir, '10.211.79.2', 18079, { 'ip', 'netns', 'exec', NS })
    for _ = 1, 400 do -- until it answers (a count of tries)
      local r = proc.run { argv = { 'bash', '-c', 'exec 3<>/dev/tcp/10.211.79.2/18079' }, timeout = 5 }
      if r and r.code == 0 then break end
      task.sleep(0.05)
    end
  end)
  teardown(function()
    if server then server.close() end
    proc.run { argv = { 'bash', '-c', 'ip netns del ' .. NS .. '; ip link del ' .. VETH .. ' 2>/dev/null; true' }, timeout = 30 }
  end)

  it('the sandbox is allowed the mirror\'s address alone and fetches the file whole', function()
    local url = 'http://10.211.79.2:18079/debian/pool/blob.bin'
    local status, by = run_arena(base { sandbox = { network = true }, egress_url = url, samples = 1 })
    assert.equal(0, status)
    local t = by.startup_trial[1]
    assert.is_true(t.ok, tostring(t.error))
    assert.matches('^allowlist 10.211.79.2 %(egress filter', t.paths.egress_policy)
    assert.equal(#blob, t.checks.egress_bytes.got)
    assert.equal(crypto.sha256_hex(blob), t.checks.egress_sha256.got)
  end)
end)

-- docker: a container on the bridge network reaches the mirror at the bridge's own address on
-- the host (docker0); pending when dockerd, the base image or docker0 is not there
describe('egress on docker (the bridge network)', function()
  it('fetches the file whole from a mirror on the bridge\'s host address', function()
    local why = H.docker_missing()
    if why then pending(why); return end
    local r = proc.run { argv = { 'ip', '-4', '-o', 'addr', 'show', 'docker0' }, timeout = 10 }
    local gw = r and r.code == 0 and r.stdout:match('inet (%d+%.%d+%.%d+%.%d+)/')
    if not gw then pending('no docker0 bridge on this machine'); return end
    local dir, blob = mirror_tree()
    local server = http_server(dir, gw, 0)
    local url = string.format('http://%s:%d/debian/pool/blob.bin', gw, server.port)
    local ok, status, by = pcall(run_arena, base { providers = { 'docker' }, samples = 1, egress_url = url,
      provider_config = { docker = { sandbox = { image = 'cseng/debian:bookworm', network = true } } } })
    server.close()
    assert(ok, status)
    assert.equal(0, status)
    local t = by.startup_trial[1]
    assert.is_true(t.ok, tostring(t.error))
    assert.equal('the provider\'s own network (no egress filter in the adapter)', t.paths.egress_policy)
    assert.equal(#blob, t.checks.egress_bytes.got)
    assert.equal(crypto.sha256_hex(blob), t.checks.egress_sha256.got)
    assert.equal(#by.allocated, #by.destroyed)
  end)
end)
