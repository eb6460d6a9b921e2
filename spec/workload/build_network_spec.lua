-- The network of build steps: RUN steps get a network of their own (outbound through
-- slirp4netns, as `docker build` gives one through its bridge, never the host's loopback),
-- `--build-network off` forbids it, the trial keeps its own policy; a RUN step that cannot reach
-- a host says which (lua/cseng/workload/replay.lua's replay.unreachable). Only loopback is used:
-- a listener on the host's 127.0.0.1 that the build must not reach, and the build's own route
-- table says whether it has a way out.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local serve = require('cseng.serve')
local replay = require('cseng.workload.replay')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local images = require('cseng.images.rootfs') -- the Debian base root filesystem

describe('replay.unreachable: the host a failed step could not reach', function()
  local cases = {
    { "W: Failed to fetch http://mirror.example.invalid/debian/dists/bookworm/InRelease  Temporary failure resolving 'mirror.example.invalid'",
      'could not reach mirror.example.invalid (name resolution failed)' },
    { "Err:1 http://archive.example.invalid/ubuntu noble InRelease\n  Could not resolve 'archive.example.invalid'",
      'could not reach archive.example.invalid (name resolution failed)' },
    { 'curl: (6) Could not resolve host: example.org', 'could not reach example.org (name resolution failed)' },
    { 'curl: (7) Failed to connect to files.example.org port 443 after 3 ms: Connection refused',
      'could not reach files.example.org (connection failed)' },
    { "fatal: unable to access 'https://github.com/x/y.git/': Could not resolve host: github.com",
      'could not reach github.com (name resolution failed)' },
    { "wget: unable to resolve host address 'dl.example.com'", 'could not reach dl.example.com (name resolution failed)' },
    { "ERROR: HTTPSConnectionPool(host='files.example.invalid', port=443): Max retries exceeded",
      'could not reach files.example.invalid (connection failed)' },
    { "npm ERR! request to https://registry.example/x failed, reason: getaddrinfo EAI_AGAIN registry.example",
      'could not reach registry.example (name resolution failed)' },
    { "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
      .. "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -2] Name or service not known')': "
      .. '/simple/pytest/\nERROR: No matching distribution found for pytest==8.4.1',
      "could not reach pip's package index (Name or service not known)" },
  }
  for _, c in ipairs(cases) do
    it(c[2], function() assert.equal(c[2], replay.unreachable(c[1])) end)
  end
  it('says nothing when the output names no unreachable host', function()
    assert.is_nil(replay.unreachable('E: Unable to locate package r-base-dev\n'))
    assert.is_nil(replay.unreachable(''))
  end)
end)

describe('replay on a provider that cannot take the network from its sandboxes', function()
  local function provider(log)
    return {
      name = 'nonet',
      exec = function(_, _, cmd) log[#log + 1] = cmd; return { code = 0, stdout = '', stderr = '' } end,
      put = function() return true end,
    }
  end
  local rcp = { steps = { { op = 'ENV', vars = { { 'A', '1' } }, line = 2 },
                          { op = 'RUN', cmd = 'apt-get update &&\n  apt-get install -y curl', line = 3 } } }

  it('runs RUN steps with the network by default', function()
    local log = {}
    assert.truthy(replay.run(provider(log), {}, {}, rcp, { network = true }))
    assert.equal(1, #log)
  end)

  it('refuses the first RUN step with --build-network off, naming the line and the provider', function()
    local log = {}
    local info, err, code = replay.run(provider(log), {}, {}, rcp, { network = false })
    assert.is_nil(info)
    assert.equal('EBUILD', code)
    assert.equal(3, err.step)
    assert.equal('environment/Dockerfile line 3: RUN apt-get update && apt-get install -y curl: not run: '
      .. '--build-network off, and nonet cannot take the network from a running sandbox', err.message)
    assert.equal(0, #log)
  end)
end)

describe('the local build sandbox and the network', function()
  local rootfs = images.rootfs_dir('bookworm')
  local tmp, srv
  setup(function()
    tmp = assert(fs.tempdir('cseng-build-net-spec'))
    srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function() return 200, {}, 'reached\n' end })
  end)
  teardown(function() srv:close(); fs.remove_tree(tmp) end)
  before_each(function()
    if not fs.exists(rootfs .. '/etc/passwd') then
      error('the Debian base root filesystem is absent (' .. rootfs .. '): ./cseng images rootfs builds it (make check does)')
    end
  end)

  local function a_task(name, dockerfile)
    local d = tmp .. '/tasks/' .. name
    for _, sub in ipairs({ 'environment', 'tests', 'solution' }) do assert(fs.mkdir_p(d .. '/' .. sub)) end
    fs.write(d .. '/task.toml', 'version = "1.0"\n[environment]\nbuild_timeout_sec = 120.0\n')
    fs.write(d .. '/instruction.md', 'nothing to do\n')
    fs.write(d .. '/environment/Dockerfile', dockerfile)
    fs.write(d .. '/solution/solve.sh', 'true\n')
    -- the build had a route out and no way to the host's loopback; the trial (the task does not
    -- allow the network) has neither: only its loopback interface
    fs.write(d .. '/tests/test.sh', 'grep -q tap0 /built && grep -q refused /built && ! python3 /probe.py 2>/dev/null '
      .. '&& ! grep -q tap0 /proc/net/dev && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
    return d
  end

  local function run(d, extra)
    local opts = { provider = 'local', dataset = d, solver = 'gold', mode = 'cold', concurrency = 1, quiet = true,
                   output = tmp .. '/results', provider_config = { layers = tmp .. '/layers-' .. sys.pid() .. '-' .. tostring(extra and 1 or 0) } }
    for k, v in pairs(extra or {}) do opts[k] = v end
    local status, info = frame.run('tasks', opts)
    local events = results.read(info.jsonl)
    return status, results.summary(events).results[1], events
  end

  -- a RUN step that records its route out (slirp4netns' tap0) and fails when it has none, after
  -- trying the host's loopback listener (which must refuse it: the build's network is its own)
  local function dockerfile()
    local probe = string.format("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/').read().decode())",
      srv:port())
    return 'FROM debian:bookworm-slim\nRUN echo "' .. probe .. '" > /probe.py\n'
      .. 'RUN (python3 /probe.py 2>&1 | grep -q reached && echo reached || echo refused) > /built && '
      .. '(grep tap0 /proc/net/route >> /built || (echo "no route out: the build has no network" >&2; exit 1))\n'
  end

  it('gives RUN steps a network of their own (a route out, no way to the host\'s loopback), and the trial none', function()
    local status, r, events = run(a_task('net-on', dockerfile()))
    assert.equal(0, status)
    assert.equal('passed', r.outcome, tostring(r.error) .. ' ' .. tostring(r.build_log_tail))
    assert.same({}, results.live_allocations(events))
  end)

  it('--build-network off: the RUN step that needs the network fails, naming its line', function()
    local status, r = run(a_task('net-off', dockerfile()), { build_network = 'off' })
    assert.equal(1, status)
    assert.equal('error', r.outcome)
    assert.equal('build', r.error_stage)
    assert.equal('EBUILD', r.error_code)
    assert.matches('^environment/Dockerfile line 3: RUN %(python3 /probe.py', r.error)
    assert.matches('exit 1', r.error)
    assert.matches('no route out', r.build_log_tail)
  end)

  it('--build-network off: an apt-get step says which host it could not reach, and why', function()
    local status, r = run(a_task('apt-off', 'FROM debian:bookworm-slim\nRUN apt-get update -o Acquire::Retries=0 '
      .. '&& apt-get install -y cowsay\n'), { build_network = 'off' })
    assert.equal(1, status)
    assert.equal('EBUILD', r.error_code)
    assert.matches("^environment/Dockerfile line 2: RUN apt%-get update .*: exit 100: could not reach [%w%.%-]+ "
      .. '%(name resolution failed%); the build has no network %(%-%-build%-network off%)$', r.error)
  end)
end)
