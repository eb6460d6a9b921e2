-- The docker provider (lua/providers/docker.lua) against the real dockerd on its unix socket.
-- The stream/tar/Dockerfile helpers are checked without docker. Every test that needs dockerd
-- checks for it first: when /var/run/docker.sock (or DOCKER_HOST) does not answer, or the base
-- image is absent, the test is marked pending with the reason (our totals count it as skipped,
-- and the reason is printed), never passed.
local http = require('cseng.http')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local proc = require('cseng.proc')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local cjson = require('cjson')
local docker = require('providers.docker')
local docker_build = require('providers.shared.docker_build')
local wire = require('providers.shared.docker_wire')
local H = require('spec.helpers.common')

local BASE = 'cseng/debian:bookworm'
local MAP = { 'debian:bookworm*=' .. BASE }
local ROOT = sys.root()
-- the engine running this spec (the asan build under make asan), for the CLI runs
local CSENG = sys.realpath('/proc/self/exe') or (ROOT .. '/cseng')
local RUN_ID = 'spec-docker-' .. crypto.hex(crypto.random_bytes(4))

local SOCKET = (os.getenv('DOCKER_HOST') or ''):match('^unix://(.+)$') or '/var/run/docker.sock'

-- ---- availability: probed once, lazily (inside a test, where engine I/O may yield) ----------

local state
local function probe()
  if state then return state end
  state = { why = H.docker_missing(BASE) }
  if state.why then io.stderr:write('\ndocker_spec: SKIPPING every dockerd test: ', state.why, '\n')
  else state.client = docker.connect({}) end
  return state
end

--- The client, or the test is marked pending with the reason.
local function need_docker()
  local s = probe()
  if s.why then pending(s.why) end
  return s.client
end

local created_images = {}

local function labels(extra)
  local l = { ['cseng.run'] = RUN_ID, ['cseng.launcher'] = 'spec', ['cseng.task'] = 'spec', ['cseng.created'] = tostring(os.time()) }
  for k, v in pairs(extra or {}) do l[k] = v end
  return l
end

local function with_sandbox(client, spec, fn)
  spec.image = spec.image or BASE
  spec.labels = spec.labels or labels()
  local sb = assert(docker.create(client, spec))
  local ok, err = pcall(fn, sb)
  docker.destroy(client, sb)
  if not ok then error(err, 0) end
end

local function mux_frame(kind, payload) return string.pack('>B xxx I4', kind, #payload) .. payload end

-- ---- without docker --------------------------------------------------------------------------

--- A dockerd that answers what exec needs over loopback TCP, and marks a container paused again
--- after an unpause for `stale` exec attempts, as dockerd 20.10 does when containerd's "paused"
--- event arrives after the unpause (daemon/monitor.go). Returns the client and the fake's counts.
local function stale_pause_dockerd(stale)
  local rest = require('spec.fakes.rest')
  local st = { execs = 0, refused = 0, stale = 0, paused = false }
  local srv = rest.listen(function(req)
    local path = req.path:gsub('^/v[%d.]+', '')
    if path == '/_ping' then return 200, {}, 'OK' end
    if path == '/version' or path == '/info' then return rest.json(200, {}) end
    if path == '/containers/c1/pause' then st.paused, st.stale = true, 0; return 204, {}, '' end
    if path == '/containers/c1/unpause' then st.paused, st.stale = false, stale; return 204, {}, '' end
    if path == '/containers/c1/exec' then
      if st.paused or st.stale > 0 then
        st.stale, st.refused = math.max(0, st.stale - 1), st.refused + 1
        return rest.json(409, { message = 'Container c1 is paused, unpause the container before exec' })
      end
      st.execs = st.execs + 1
      return rest.json(201, { Id = 'e' .. st.execs })
    end
    if path:match('^/exec/e%d+/start$') then
      return 200, { ['Content-Type'] = 'application/vnd.docker.raw-stream' }, mux_frame(1, 'ok\n')
    end
    if path:match('^/exec/e%d+/json$') then return rest.json(200, { Running = false, ExitCode = 0, Pid = 0 }) end
    return rest.json(404, { message = 'no route ' .. req.method .. ' ' .. path })
  end)
  local client = docker.connect({ getenv = function(k) if k == 'DOCKER_HOST' then return 'tcp://' .. srv:url():match('//([^/]+)') end end })
  return client, st, srv
end

describe('docker provider against a dockerd whose paused flag lags', function()
  it('an exec after resume waits out the stale "is paused"; an exec on a sandbox it paused fails at once', function()
    local client, st, srv = stale_pause_dockerd(3)
    local sb = { id = 'c1', labels = {} }
    assert.is_true(docker.pause(client, sb))
    local r, err, code = docker.exec(client, sb, 'true', { timeout = 5 })
    assert.is_nil(r)
    assert.equal('HTTP_409', code)
    assert.matches('is paused', err, 1, true)
    assert.equal(1, st.refused) -- asked once: this adapter left it paused
    assert.is_true(docker.resume(client, sb))
    r, err = docker.exec(client, sb, 'true', { timeout = 5 })
    assert.is_table(r, err)
    assert.equal(0, r.code)
    assert.equal('ok\n', r.stdout)
    assert.equal(1 + 3, st.refused) -- the three stale refusals were asked through
    assert.equal(1, st.execs)
    srv:close()
  end)
end)

describe('docker provider helpers', function()
  it('demultiplexes the exec stream wherever the chunks are cut', function()
    local stream = mux_frame(1, 'hello ') .. mux_frame(2, 'oops\n') .. mux_frame(1, '') .. mux_frame(1, 'world\n') .. mux_frame(2, string.rep('e', 300))
    for cut = 1, #stream do
      local d = wire.demuxer(1 << 20)
      d.feed(stream:sub(1, cut - 1))
      d.feed(stream:sub(cut))
      assert.equal('hello world\n', d.out.get())
      assert.equal('oops\n' .. string.rep('e', 300), d.err.get())
      assert.is_true(d.complete())
    end
    -- byte by byte
    local d = wire.demuxer(1 << 20)
    for i = 1, #stream do d.feed(stream:sub(i, i)) end
    assert.equal('hello world\n', d.out.get())
    assert.equal(5, d.frames)
  end)

  it('keeps only the tail of each stream and counts what it dropped', function()
    local d = wire.demuxer(10)
    for i = 1, 50000 do d.feed(mux_frame(1, string.format('%05d\n', i))) end
    assert.equal(10, #d.out.get())
    assert.equal('9\n50000\n', d.out.get():sub(-8))
    assert.equal(50000 * 6 - 10, d.out.dropped())
    assert.equal('', d.err.get())
    assert.is_false(d.complete() == false)
    d.feed(string.pack('>B xxx I4', 1, 4) .. 'ab')
    assert.is_false(d.complete())
  end)

  it('reads the first file of a tar and refuses directories', function()
    local data = 'bin\0ary' .. string.rep('x', 1000)
    local tar = assert(archive.pack({ { path = 'f.bin', data = data } }, { format = 'tar' }))
    assert.equal(data, wire.tar_first_file(tar))
    -- a name longer than ustar's 100 bytes: a pax header comes first
    tar = assert(archive.pack({ { path = string.rep('n', 150), data = 'long name' } }, { format = 'tar' }))
    assert.equal('long name', wire.tar_first_file(tar))
    tar = assert(archive.pack({ { path = 'd', type = 'dir' } }, { format = 'tar' }))
    local v, err, code = wire.tar_first_file(tar)
    assert.is_nil(v)
    assert.equal('EISDIR', code, err)
    assert.equal('EARCHIVE', select(3, wire.tar_first_file(string.rep('\0', 1024))))
  end)

  it('maps FROM lines, leaving stage names, ARG images and RUN continuations alone', function()
    local map = { 'ghcr.io/laude-institute/t-bench/ubuntu-24-04:*=' .. BASE, 'debian:*=' .. BASE, 'cseng/swesmith.*=' .. BASE }
    local text = table.concat({
      'FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624',
      'from --platform=linux/amd64 debian:bookworm-slim AS builder',
      'RUN echo a \\',
      'FROM debian:bookworm',
      'FROM builder',
      'FROM ${BASE}',
      'FROM alpine:3',
      'COPY --from=builder /x /y',
    }, '\n')
    local out, bases = docker_build.rewrite_from(text, map)
    assert.equal(table.concat({
      'FROM ' .. BASE,
      'from --platform=linux/amd64 ' .. BASE .. ' AS builder',
      'RUN echo a \\',
      'FROM debian:bookworm',
      'FROM builder',
      'FROM ${BASE}',
      'FROM alpine:3',
      'COPY --from=builder /x /y',
    }, '\n') .. '\n', out)
    assert.same({ { from = 'ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624', image = BASE },
      { from = 'alpine:3', image = 'alpine:3' } }, bases)
  end)

  it('makes valid repository names of task ids', function()
    assert.equal('tinystats-median-even-floor', wire.repo_component('tinystats__median_even_floor'))
    assert.equal('r-package-dependency-missing-medium', wire.repo_component('R_package_dependency_missing_medium'))
    assert.equal('task', wire.repo_component('___'))
  end)

  it('counts build steps served from the cache in the build stream', function()
    local s = wire.build_stream()
    local lines = {
      { stream = 'Step 1/3 : FROM x\n' }, { stream = ' ---> abc\n' },
      { stream = 'Step 2/3 : RUN true\n' }, { stream = ' ---> Using cache\n' },
      { stream = 'Step 3/3 : COPY a /a\n' }, { stream = ' ---> Running in 123\n' },
      { errorDetail = { message = 'COPY failed: no a' }, error = 'COPY failed: no a' },
    }
    local raw = ''
    for _, l in ipairs(lines) do raw = raw .. cjson.encode(l) .. '\r\n' end
    for i = 1, #raw, 7 do s.feed(raw:sub(i, i + 6)) end
    s.finish()
    assert.equal(2, s.counted)
    assert.equal(1, s.cached)
    assert.equal('Step 3/3 : COPY a /a', s.step)
    assert.equal('COPY failed: no a', s.error)
  end)
end)

-- ---- against dockerd -------------------------------------------------------------------------

describe('docker provider on dockerd', function()
  teardown(function()
    local s = state
    if not s or s.why then return end
    for _, c in ipairs(docker.list(s.client, { labels = { ['cseng.run'] = RUN_ID } }) or {}) do docker.destroy(s.client, c) end
    for _, im in ipairs(created_images) do docker_build.remove_image(s.client, im, true) end
  end)

  it('connect names the socket it cannot reach', function()
    need_docker()
    local ok, err = pcall(docker.connect, { socket = '/nonexistent/docker.sock' })
    assert.is_false(ok)
    assert.matches('docker provider: cannot reach dockerd at /nonexistent/docker.sock', err, 1, true)
  end)

  it('creates a labelled, limited, offline container; lists it; destroy is idempotent', function()
    local client = need_docker()
    local sb = assert(docker.create(client, { image = BASE, labels = labels(), cpus = 1, memory_mb = 512, workdir = '/workspace' }))
    local res = assert(http.request { url = 'http://docker/v1.41/containers/' .. sb.id .. '/json', unix_socket = SOCKET })
    local info = cjson.decode(res.body)
    assert.equal(RUN_ID, info.Config.Labels['cseng.run'])
    for _, k in ipairs({ 'cseng.launcher', 'cseng.task', 'cseng.created' }) do assert.is_string(info.Config.Labels[k]) end
    assert.equal(1e9, info.HostConfig.NanoCpus)
    assert.equal(512 * 1024 * 1024, info.HostConfig.Memory)
    assert.equal('none', info.HostConfig.NetworkMode)
    assert.is_true(info.State.Running)
    local found = docker.list(client, { labels = { ['cseng.run'] = RUN_ID } })
    local ids = {}
    for _, c in ipairs(found) do ids[c.id] = c end
    assert.is_table(ids[sb.id])
    assert.equal(RUN_ID, ids[sb.id].labels['cseng.run'])
    assert.is_true(docker.destroy(client, sb))
    assert.is_true(docker.destroy(client, sb)) -- already gone: still success
    assert.equal(0, #docker.list(client, { labels = { ['cseng.run'] = RUN_ID } }))
  end)

  it('exec returns stdout, stderr and the exit code; honours cwd, env and the verifier user', function()
    local client = need_docker()
    with_sandbox(client, { workdir = '/workspace' }, function(sb)
      local r = assert(docker.exec(client, sb, 'printf out; printf err >&2; pwd >&2; exit 7', { cwd = '/workspace' }))
      assert.equal(7, r.code)
      assert.equal('out', r.stdout)
      assert.equal('err/workspace\n', r.stderr)
      assert.is_false(r.timed_out)
      r = assert(docker.exec(client, sb, 'echo "$A $B"; id -u; id -g', { env = { A = 'x y', B = '$HOME' } }))
      assert.equal('x y $HOME\n0\n0\n', r.stdout)
      r = assert(docker.exec(client, sb, 'id -u; id -g; echo $HOME; touch /root/x', { user = 'verifier' }))
      assert.equal('1000\n1000\n/tmp\n', r.stdout)
      assert.not_equal(0, r.code) -- /root is not the verifier's
      r = assert(docker.exec(client, sb, 'wc -c; cat /tmp/.cseng-stdin-* 2>/dev/null | wc -l', { stdin = string.rep('z', 100000) }))
      assert.equal('100000\n0\n', r.stdout) -- read, and the staged file is gone
    end)
  end)

  it('exec keeps the tail of large output and kills a command at its timeout', function()
    local client = need_docker()
    with_sandbox(client, {}, function(sb)
      local r = assert(docker.exec(client, sb, 'seq 1 400000; seq 1 3 >&2', { tail_bytes = 4096 }))
      assert.equal(0, r.code)
      assert.equal(4096, #r.stdout)
      assert.equal('399999\n400000\n', r.stdout:sub(-14))
      assert.equal('1\n2\n3\n', r.stderr)
      assert.is_true(r.stdout_dropped > 2000000)
      local t0 = clock.now()
      r = assert(docker.exec(client, sb, 'echo started; sleep 300 & sleep 301', { timeout = 1.5 }))
      local took = (clock.now() - t0) / 1e9
      assert.is_true(r.timed_out)
      assert.equal(137, r.code)
      assert.equal('started\n', r.stdout)
      assert.is_true(took >= 1.5 and took < 10, 'took ' .. took)
      local left = assert(docker.exec(client, sb, 'pgrep -c -f "sleep 30[01]" || true', {}))
      assert.equal('0\n', left.stdout)
    end)
  end)

  it('put extracts into a directory it creates; get reads files back byte for byte', function()
    local client = need_docker()
    with_sandbox(client, {}, function(sb)
      local bin = ''
      for i = 0, 255 do bin = bin .. string.char(i) end
      bin = bin:rep(300)
      assert.is_true(docker.put(client, sb, '/deep/new/dir', archive.pack({ { path = 'a.bin', data = bin },
        { path = 'sub/run.sh', data = '#!/bin/sh\necho ran\n', mode = tonumber('755', 8) } })))
      assert.equal(bin, docker.get(client, sb, '/deep/new/dir/a.bin'))
      local r = assert(docker.exec(client, sb, '/deep/new/dir/sub/run.sh', {}))
      assert.equal('ran\n', r.stdout)
      local v, err, code = docker.get(client, sb, '/deep/missing')
      assert.is_nil(v)
      assert.equal('ENOENT', code, err)
      assert.equal('EISDIR', select(3, docker.get(client, sb, '/deep/new')))
      assert.is_true(docker.put(client, sb, '/tmp', archive.pack({ { path = 'link', type = 'symlink', target = '/deep/new/dir/sub/run.sh' } })))
      assert.equal('#!/bin/sh\necho ran\n', docker.get(client, sb, '/tmp/link'))
    end)
    local gone = { id = 'cseng-spec-no-such-container' }
    local v, _, code = docker.exec(client, gone, 'true', {})
    assert.is_nil(v)
    assert.equal('ENOSANDBOX', code)
  end)

  it('network stays off unless the spec allows it', function()
    local client = need_docker()
    with_sandbox(client, { network = false }, function(sb)
      assert.equal('lo\n', assert(docker.exec(client, sb, 'ls /sys/class/net', {})).stdout)
    end)
    with_sandbox(client, { network = true }, function(sb)
      assert.matches('eth0', assert(docker.exec(client, sb, 'ls /sys/class/net', {})).stdout)
    end)
  end)

  it('builds a task image once: the same context is a cache hit, a faster one', function()
    local client = need_docker()
    local dir = assert(fs.tempdir('cseng-spec-ctx-'))
    local nonce = crypto.hex(crypto.random_bytes(8))
    fs.write(dir .. '/Dockerfile', 'FROM debian:bookworm-slim\nWORKDIR /workspace\nCOPY data.txt /workspace/data.txt\nRUN echo built > /built\n')
    fs.write(dir .. '/data.txt', nonce .. '\n')
    local req = { task_id = 'spec-build-' .. nonce, context_dir = dir, image_map = MAP, timeout = 300, labels = labels() }
    local t0 = clock.now()
    local b1, err = docker.build(client, req)
    local first = (clock.now() - t0) / 1e9
    assert.is_table(b1, err and err.message)
    created_images[#created_images + 1] = b1.image
    assert.is_false(b1.cache_hit)
    assert.matches('^cseng%-task/spec%-build%-' .. nonce .. ':%x+$', b1.image)
    assert.matches('FROM debian:bookworm%-slim %-> cseng/debian:bookworm', b1.log_tail)
    t0 = clock.now()
    local b2 = assert(docker.build(client, req))
    local second = (clock.now() - t0) / 1e9
    assert.is_true(b2.cache_hit)
    assert.equal(b1.image, b2.image)
    assert.is_true(second < first, string.format('hit %.3f s vs build %.3f s', second, first))
    -- the image carries cseng's labels and the content
    local res = assert(http.request { url = 'http://docker/v1.41/images/' .. b1.image .. '/json', unix_socket = SOCKET })
    local img = cjson.decode(res.body)
    assert.equal(RUN_ID, img.Config.Labels['cseng.run'])
    assert.equal('task-image', img.Config.Labels['cseng.kind'])
    with_sandbox(client, { image = b1.image }, function(sb)
      assert.equal(nonce .. '\nbuilt\n', assert(docker.exec(client, sb, 'cat /workspace/data.txt /built', {})).stdout)
    end)
    -- a changed context is a new tag
    fs.write(dir .. '/data.txt', nonce .. ' changed\n')
    local b3 = assert(docker.build(client, req))
    created_images[#created_images + 1] = b3.image
    assert.not_equal(b1.image, b3.image)
    fs.remove_tree(dir)
  end)

  it('a failing build step is an EBUILD error naming the step, with the log, and leaves no containers', function()
    local client = need_docker()
    local dir = assert(fs.tempdir('cseng-spec-ctx-'))
    local nonce = crypto.hex(crypto.random_bytes(8))
    fs.write(dir .. '/Dockerfile', 'FROM debian:bookworm-slim\nRUN echo ok\nRUN echo failing-step-' .. nonce .. ' >&2; exit 3\n')
    local mine = { labels = { ['cseng.run'] = RUN_ID } } -- other specs' containers come and go beside this one
    local before = #assert(docker.list(client, mine))
    local b, err, code = docker.build(client, { task_id = 'spec-fail', context_dir = dir, image_map = MAP, timeout = 300, labels = labels() })
    assert.is_nil(b)
    assert.equal('EBUILD', code)
    assert.matches('build failed at Step 3/%d+ : RUN echo failing%-step', err.message)
    assert.matches('returned a non%-zero code: 3', err.message)
    assert.matches('failing%-step', err.log)
    assert.equal(before, #assert(docker.list(client, mine)))
    local res = assert(http.request { url = 'http://docker/v1.41/containers/json?all=1', unix_socket = SOCKET })
    for _, c in ipairs(cjson.decode(res.body)) do
      assert.is_nil(tostring(c.Command):find(nonce, 1, true), 'intermediate container left: ' .. c.Id)
    end
    fs.remove_tree(dir)
  end)

  it('snapshot commits a prepared container; a container from it starts prepared', function()
    local client = need_docker()
    local image
    with_sandbox(client, { labels = labels({ ['cseng.task'] = 'spec-warm' }) }, function(sb)
      assert.equal(0, assert(docker.exec(client, sb, 'mkdir -p /logs/agent && echo prepared > /cseng-ready', {})).code)
      image = assert(docker.snapshot(client, sb, 'spec' .. crypto.hex(crypto.random_bytes(3))))
    end)
    created_images[#created_images + 1] = image
    assert.matches('^sha256:%x+$', image)
    with_sandbox(client, { warm_artifact = image, image = 'ignored:absent' }, function(sb)
      assert.equal('prepared\n', assert(docker.exec(client, sb, 'cat /cseng-ready; test -d /logs/agent', {})).stdout)
    end)
  end)

  -- every bundled task, through the runner (in this process)

  local function run_tasks(opts)
    local results = require('cseng.results.log')
    local frame = require('cseng.run.frame')
    opts.provider, opts.dataset = 'docker', opts.dataset or (ROOT .. '/data/smoke.jsonl')
    opts.solver, opts.mode = opts.solver or 'gold', opts.mode or 'cold'
    opts.concurrency, opts.quiet = opts.concurrency or 2, true
    opts.image_map = MAP
    opts.output = assert(fs.tempdir('cseng-spec-out-'))
    local status, info = frame.run('tasks', opts)
    local events = results.read(info.jsonl)
    fs.remove_tree(opts.output)
    return status, results.summary(events).results, events
  end

  local function outcomes(trials)
    local n = { passed = 0, failed = 0, error = 0 }
    for _, r in ipairs(trials) do n[r.outcome] = n[r.outcome] + 1 end
    return n
  end

  local function no_run_gap(r)
    for _, g in ipairs(r.fidelity_gaps or {}) do assert.not_equal('RUN', g.kind, r.task_id) end
  end

  local function tasks_with_run_steps()
    local out = {}
    for _, t in ipairs(require('cseng.workload.dataset').load(ROOT .. '/data/smoke.jsonl')) do
      if #t.recipe.runs > 0 then out[#out + 1] = t end
    end
    return out
  end

  it('passes every bundled task with gold, cold and warm; nop scores 0 on the covering tasks; no RUN fidelity gap', function()
    local client = need_docker()
    local n_tasks = #require('cseng.workload.dataset').load(ROOT .. '/data/smoke.jsonl')
    local status, trials = run_tasks({})
    for _, r in ipairs(trials) do
      if r.outcome ~= 'passed' then print(r.task_id, r.error, r.build_log_tail, r.stdout_tail) end
    end
    assert.equal(0, status)
    assert.equal(n_tasks, #trials)
    assert.equal(n_tasks, outcomes(trials).passed)
    for _, r in ipairs(trials) do
      no_run_gap(r)
      assert.matches('^cseng%-task/.+:' .. r.environment.content_key:sub(1, 16) .. '$', r.image)
      assert.is_true(r.environment.method == 'native_build' or r.environment.method == 'cached_layer')
      assert.is_number(r.phases.build_seconds)
    end
    -- nop on the tasks that cover every kind of environment (every task's nop: spec/run/tasks_spec.lua)
    local cover = require('spec.helpers.vendor').covering_tasks()
    local _, nop = run_tasks({ solver = 'nop', tasks = cover })
    assert.equal(#cover, #nop)
    assert.equal(#cover, outcomes(nop).failed)
    for _, r in ipairs(nop) do
      assert.equal(0, r.reward, r.task_id)
      assert.is_true(r.environment.cache_hit, r.task_id) -- the gold run built every image
      assert.equal('cached_layer', r.environment.method)
    end
    local wstatus, warm, events = run_tasks({ mode = 'warm' })
    assert.equal(0, wstatus)
    assert.equal(n_tasks, outcomes(warm).passed)
    for _, r in ipairs(warm) do
      no_run_gap(r)
      assert.equal('warm_artifact', r.environment.method)
      created_images[#created_images + 1] = r.warm_artifact
    end
    local prewarmed = 0
    for _, e in ipairs(events) do if e.event == 'prewarmed' then prewarmed = prewarmed + 1 end end
    assert.equal(n_tasks, prewarmed)
    assert.equal(0, #docker.list(client, { labels = { ['cseng.run'] = events[1].run_id } }))
  end)

  it('a second cold run of a task with RUN steps reports the cached image', function()
    need_docker()
    local tasks = tasks_with_run_steps()
    assert.is_true(#tasks >= 4)
    for _, t in ipairs(tasks) do
      -- content no build has seen: the task with a fresh ENV line right after FROM
      local dir = assert(fs.tempdir('cseng-spec-task-'))
      assert(fs.copy_tree(t.dir, dir .. '/' .. t.id))
      local df = dir .. '/' .. t.id .. '/environment/Dockerfile'
      local nonce = crypto.hex(crypto.random_bytes(8))
      fs.write(df, (assert(fs.read(df)):gsub('^(FROM [^\n]*\n)', '%1ENV CSENG_SPEC_NONCE=' .. nonce .. '\n')))
      local _, first = run_tasks({ dataset = dir })
      local _, second = run_tasks({ dataset = dir })
      fs.remove_tree(dir)
      created_images[#created_images + 1] = first[1].image
      local a, b = first[1], second[1]
      assert.equal('passed', a.outcome, t.id .. ': ' .. tostring(a.error))
      assert.equal('passed', b.outcome, t.id .. ': ' .. tostring(b.error))
      assert.is_false(a.environment.cache_hit, t.id)
      assert.equal('native_build', a.environment.method)
      assert.is_true(b.environment.cache_hit, t.id)
      assert.is_true(b.build_cache_hit)
      assert.equal('cached_layer', b.environment.method)
      assert.equal(a.environment.content_key, b.environment.content_key)
      assert.equal(a.image, b.image)
    end
  end)

  -- end to end, through the CLI

  local function run_cseng(args, timeout)
    local argv = { CSENG }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(proc.run { argv = argv, cwd = ROOT, timeout = timeout or 600, tail_bytes = 65536 })
  end

  local function trials_of(jsonl)
    local out = {}
    for line in (fs.read(jsonl) or ''):gmatch('[^\n]+') do
      local e = cjson.decode(line)
      if e.event == 'trial' then out[#out + 1] = e end
    end
    return out
  end

  it('runs a bundled task cold with gold (passes) and nop (fails), recording the image and cache hit', function()
    local client = need_docker()
    local out = assert(fs.tempdir('cseng-spec-out-'))
    local r = run_cseng({ 'run', 'plans/cold-gold.lua', '--provider', 'docker', '--task-index', '0', '--output', out .. '/gold.json', '--quiet' })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    local t = trials_of(out .. '/gold.jsonl')[1]
    assert.equal('passed', t.outcome, cjson.encode(t))
    assert.matches('^cseng%-task/', t.image)
    assert.is_boolean(t.build_cache_hit)
    assert.is_string(t.build_log_tail)
    run_cseng({ 'run', 'plans/cold-gold.lua', '--provider', 'docker', '--task-index', '0', '--solver', 'nop',
      '--output', out .. '/nop.json', '--quiet' })
    t = trials_of(out .. '/nop.jsonl')[1]
    assert.equal('failed', t.outcome, cjson.encode(t))
    assert.is_true(t.build_cache_hit) -- the gold run built it
    assert.equal(0, #docker.list(client, { labels = { ['cseng.run'] = t.run_id } }))
    fs.remove_tree(out)
  end)

  it('cleanup --provider docker removes what a kill -9 left behind', function()
    local client = need_docker()
    local out = assert(fs.tempdir('cseng-spec-out-'))
    fs.write(out .. '/solver.sh', 'sleep 120\n')
    local p = assert(proc.spawn { argv = { CSENG, 'run', 'plans/cold-gold.lua', '--provider', 'docker', '--task-limit', '2',
      '--concurrency', '2', '--solver', 'command', '--solve-command-file', out .. '/solver.sh', '--output', out .. '/run.json', '--quiet' },
      cwd = ROOT })
    -- wait for both trials' containers, then kill the run without a chance to clean up
    local run_id
    for _ = 1, 600 do
      for line in (fs.read(out .. '/run.jsonl') or ''):gmatch('[^\n]+') do
        local e = cjson.decode(line)
        if e.event == 'run_started' then run_id = e.run_id end
      end
      if run_id and #docker.list(client, { labels = { ['cseng.run'] = run_id } }) >= 2 then break end
      task.sleep(0.1)
    end
    assert.is_string(run_id)
    finally(function() -- whatever happens, leave nothing behind
      p:close()
      for _, c in ipairs(docker.list(client, { labels = { ['cseng.run'] = run_id } }) or {}) do docker.destroy(client, c) end
      fs.remove_tree(out)
    end)
    assert.equal(2, #docker.list(client, { labels = { ['cseng.run'] = run_id } }))
    p:kill('KILL')
    p:wait(10)
    assert.equal(2, #docker.list(client, { labels = { ['cseng.run'] = run_id } })) -- left behind
    local r = run_cseng({ 'cleanup', '--provider', 'docker', '--run', run_id })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches('2 destroyed, 0 failed', r.stdout)
    assert.equal(0, #docker.list(client, { labels = { ['cseng.run'] = run_id } }))
  end)
end)
