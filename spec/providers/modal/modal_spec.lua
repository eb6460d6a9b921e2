-- The Modal provider (lua/providers/modal.lua) and its fake (spec/providers/modal/server.mjs):
--   * the official `modal` JS SDK runs its sandbox lifecycle against the fake and passes (what
--     makes the fake a fair stand-in), and is refused with bad credentials;
--   * the adapter's lifecycle over gRPC/HTTP/2 against the same fake, its clear errors, one
--     HTTP/2 connection for 100 concurrent RPCs, and the runner end to end (startup arena,
--     cold-gold cold and warm, kill -9 then cleanup).
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local cjson = require('cjson')

local ROOT = sys.root()
local modal_fake = require('spec.fakes').module('modal')

--- Run spec/sdk/modal.mjs against a fake; returns the process result and what it printed.
local function run_sdk(f, env, run)
  local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/modal.mjs', run or 'sdk-spec' }, cwd = ROOT,
                              env_add = env or f.env(), timeout = 300 })
  local ok, seen = pcall(cjson.decode, r.stdout:match('[^\n]+') or '')
  return r, ok and seen or {}
end

describe('the official modal SDK against the fake', function()
  local f
  before_each(function() f = modal_fake.start { client = 'sdk' } end)
  after_each(function() f.close() end)

  it('runs the whole sandbox lifecycle and the fake saw the V1 call sequence', function()
    local r, seen = run_sdk(f)
    assert.equal(0, r.code, r.stdout .. r.stderr .. f.stderr())
    assert.is_true(seen.ok)
    assert.same({ stdout = 'arena-startup-ready-20261001\n', stderr = '', code = 0 }, seen.ready)
    assert.same({ stdout = 'out\n', stderr = 'err\n', code = 3 }, seen.exit3)
    assert.equal('hello from the sdk\n', seen.read_back)
    assert.same({ seen.sandbox_id }, seen.listed)
    assert.same({ stdout = 'warm\n', stderr = '', code = 0 }, seen.warm)
    -- the SDK's image builder (RUN as a USER, ARG, ENV, WORKDIR) and a context mount build
    assert.same({ stdout = 'built-by-modal as builder\n1\n/workspace\n', stderr = '', code = 0 }, seen.build_marker)
    assert.same({ stdout = 'copied\n', stderr = '', code = 0 }, seen.context_build)
    local s = f.stats()
    assert.equal(4, s.creates)
    assert.equal(1, s.mount_puts)
    assert.equal(0, s.mount_refused)
    assert.equal(0, s.live)
    assert.equal(1, s.connections.cp)
    assert.equal(1, s.connections.router)
    for _, op in ipairs({ 'AuthTokenGet', 'AppGetOrCreate', 'ImageGetOrCreate', 'ImageJoinStreaming', 'SandboxCreate',
                          'SandboxGetTaskId', 'TaskGetCommandRouterAccess', 'TaskExecStart', 'TaskExecStdioRead',
                          'TaskExecWait', 'SandboxList', 'SandboxTerminate', 'MountPutFile', 'MountGetOrCreate' }) do
      assert.is_true((s.rpcs[op] or 0) > 0, op)
    end
    -- the recorded requests: headers and bodies as the SDK sent them
    local create
    for _, rec in ipairs(f.requests()) do
      assert.equal('sdk', rec.client)
      if rec.service == 'ModalClient' then
        assert.equal('ak-cseng-fake', rec.headers['x-modal-token-id'])
        assert.equal('8', rec.headers['x-modal-client-type'])
        if rec.op ~= 'AuthTokenGet' then assert.is_string(rec.headers['x-modal-auth-token']) end
      else
        assert.matches('^Bearer ', rec.headers.authorization)
      end
      if rec.op == 'SandboxCreate' and not create then create = rec.body end
    end
    assert.equal(2000, create.definition.resources.milli_cpu)
    assert.equal(2048, create.definition.resources.memory_mb)
    assert.equal(300, create.definition.timeout_secs)
    assert.same({ 'us-east' }, create.definition.scheduler_placement.regions)
  end)

  it('is refused with bad credentials (UNAUTHENTICATED)', function()
    local r, seen = run_sdk(f, f.env { MODAL_TOKEN_SECRET = 'wrong' })
    assert.equal(1, r.code)
    assert.matches('UNAUTHENTICATED', seen.error)
    assert.equal(0, f.stats().creates)
  end)
end)

-- ---- the adapter against the fake ------------------------------------------------------------
local task = require('cseng.task')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local results = require('cseng.results.log')
local jsonl = require('cseng.lib.jsonl')
local util = require('cseng.lib.util')
local modal = require('providers.modal')
local modal_wire = require('providers.shared.modal_wire')
local modal_build = require('providers.shared.modal_build')
local vendor = require('spec.helpers.vendor')
local labels, tar_of = vendor.labeller('cseng@spec'), vendor.tar_of

local function ops(f, op)
  local out = {}
  for _, rec in ipairs(f.requests()) do if rec.op == op then out[#out + 1] = rec end end
  return out
end

describe('modal adapter lifecycle (stateful fake)', function()
  local f
  before_each(function() f = modal_fake.start {} end)
  after_each(function() f.close() end)

  it('creates with tags and the seed resources, runs real commands, moves files, lists and terminates', function()
    local client = modal.connect(f.config())
    local want = labels('life') -- once: cseng.created is the clock's second
    local sb = assert(modal.create(client, { labels = want, env = { GREETING = 'hello world' },
                                             workdir = '/workspace' }))
    assert.matches('^sb%-%w+$', sb.id)
    assert.is_number(sb.http_timings.ttfb)
    local create = ops(f, 'SandboxCreate')[1].body
    assert.equal(2000, create.definition.resources.milli_cpu)
    assert.equal(2048, create.definition.resources.memory_mb)
    assert.equal(300, create.definition.timeout_secs)
    assert.same({ 'us-east' }, create.definition.scheduler_placement.regions)
    local tags = {}
    for _, t in ipairs(create.tags) do tags[t.tag_name] = t.tag_value end
    assert.same(want, tags)
    assert.same({ 'FROM python:3.12-slim' }, ops(f, 'ImageGetOrCreate')[1].body.image.dockerfile_commands)

    local r = assert(modal.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.equal(7, r.code)
    assert.equal('out\n', r.stdout)
    assert.equal('err\n', r.stderr)
    assert.is_false(r.timed_out)
    r = assert(modal.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]]))
    assert.same({ 0, 'arena-startup-ready-20261001\n' }, { r.code, r.stdout })
    r = assert(modal.exec(client, sb, [[printf '%s|' "a'b" "$GREETING" "$EXTRA"; pwd]], { env = { EXTRA = 'x y' }, cwd = '/tmp' }))
    assert.equal("a'b|hello world|x y|/tmp\n", r.stdout)
    r = assert(modal.exec(client, sb, 'cat; exit 3', { stdin = 'piped\n' }))
    assert.same({ 3, 'piped\n' }, { r.code, r.stdout })
    -- a command that cannot finish in its timeout is a result with timed_out, not a failure
    r = assert(modal.exec(client, sb, 'sleep 1000', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.are_not.equal(0, r.code)

    assert(modal.put(client, sb, '/tests', tar_of({ ['test.sh'] = 'echo tested\n' }, 'tar')))
    local bin = crypto.random_bytes(3 << 19) .. '\0\255' -- two stdin chunks (see docs/providers/modal.md: large streams)
    assert(modal.put(client, sb, '/data', tar_of { ['blob.bin'] = bin }))
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(modal.get(client, sb, '/data/blob.bin'))))
    assert.equal('tested\n', assert(modal.exec(client, sb, 'bash /tests/test.sh')).stdout)
    local none, msg, code = modal.get(client, sb, '/no/such/file')
    assert.is_nil(none)
    assert.equal('ENOENT', code)
    assert.matches('/no/such/file', msg)

    -- the router: a second connection, every call with the task's bearer JWT
    assert.equal(1, f.stats().connections.router)
    for _, rec in ipairs(f.requests()) do
      if rec.service == 'TaskCommandRouter' then assert.matches('^Bearer ', rec.headers.authorization)
      else
        assert.equal(modal_fake.TOKEN_ID, rec.headers['x-modal-token-id'])
        if rec.op ~= 'AuthTokenGet' then assert.is_string(rec.headers['x-modal-auth-token']) end
      end
    end
    assert.equal(1, #ops(f, 'AuthTokenGet'))

    local listed = assert(modal.list(client, { labels = { ['cseng.run'] = 'life' } }))
    assert.same({ sb.id }, vendor.sorted_ids(listed))
    assert.equal('life', listed[1].labels['cseng.run'])
    assert.is_true(modal.destroy(client, sb))
    assert.is_true(modal.destroy(client, sb)) -- already terminated
    assert.is_true(modal.destroy(client, { id = 'sb-0000000000000000000000' })) -- never existed
    assert.equal(0, f.stats().live)
    assert.same({}, assert(modal.list(client, { labels = { ['cseng.run'] = 'life' } })))
  end)

  it('lists by tags across pages (before_timestamp)', function()
    f.set { page_size = 2 }
    local client = modal.connect(f.config())
    local mine = {}
    for i = 1, 5 do mine[i] = assert(modal.create(client, { labels = labels('paged', 't' .. i) })) end
    assert(modal.create(client, { labels = labels('other') }))
    local before = #ops(f, 'SandboxList')
    assert.same(vendor.sorted_ids(mine), vendor.sorted_ids(assert(modal.list(client, { labels = { ['cseng.run'] = 'paged' } }))))
    assert.equal(4, #ops(f, 'SandboxList') - before) -- pages of 2, 2, 1, then the empty page
    assert.equal(6, #assert(modal.list(client, {})))
  end)

  it('snapshots a prepared sandbox (SandboxSnapshotFs) and starts another from it', function()
    local client = modal.connect(f.config())
    local sb = assert(modal.create(client, { labels = labels('warm') }))
    assert(modal.exec(client, sb, 'mkdir -p /workspace && echo prepared > /workspace/state'))
    local image = assert(modal.snapshot(client, sb, 'key'))
    assert.matches('^im%-', image)
    assert(modal.destroy(client, sb))
    local sb2 = assert(modal.create(client, { labels = labels('warm'), warm_artifact = image }))
    assert.equal('prepared\n', assert(modal.exec(client, sb2, 'cat /workspace/state')).stdout)
    assert.equal(image, ops(f, 'SandboxCreate')[2].body.definition.image_id)
    assert.equal(1, f.stats().snapshots)
    assert(modal.destroy(client, sb2))
  end)

  it('builds an image from a Dockerfile where Modal can (RUN, ENV, WORKDIR, COPY)', function()
    local client = modal.connect(f.config())
    local id = assert(modal_build.dockerfile_image(client,
      'FROM python:3.12-slim\nENV GREETING=built\nWORKDIR /app\nCOPY hello.txt /app/hello.txt\nRUN echo ran > /app/ran',
      { ['hello.txt'] = 'hi\n' }))
    local sb = assert(modal.create(client, { image_id = id }))
    assert.equal('built|hi\n|ran\n', assert(modal.exec(client, sb,
      [[printf '%s|' "$GREETING"; cat hello.txt; printf '|'; cat ran]], { cwd = '/app' })).stdout)
    assert(modal.destroy(client, sb))
  end)

  it('100 concurrent unary RPCs from 100 tasks share one HTTP/2 connection', function()
    local client = modal.connect(f.config())
    assert(modal_wire.auth_token(client))
    f.set { latency = { SandboxList = 300 } } -- so that all 100 are in flight together
    local tasks = {}
    for i = 1, 100 do
      tasks[i] = task.spawn(function() return modal.list(client, { labels = {} }) end)
    end
    for _, t in ipairs(tasks) do
      local ok, r, err = t:join()
      assert.is_true(ok)
      assert.is_table(r, tostring(err))
    end
    local s = f.stats()
    assert.equal(100, s.rpcs.SandboxList)
    assert.equal(1, s.connections.cp)
  end)
end)

describe('modal adapter: one clear error for each failure', function()
  local f
  before_each(function() f = modal_fake.start {} end)
  after_each(function() f.close() end)

  it('bad credentials: UNAUTHENTICATED reads as HTTP_401 and names the variables', function()
    local client = modal.connect(f.config { token_secret = 'wrong' })
    local sb, msg, code = modal.create(client, { labels = labels('auth') })
    assert.is_nil(sb)
    assert.equal('HTTP_401', code)
    assert.matches('AuthTokenGet', msg)
    assert.matches('UNAUTHENTICATED', msg)
    assert.matches('MODAL_TOKEN_ID and MODAL_TOKEN_SECRET', msg)
    assert.not_matches('wrong', msg)
    assert.equal(0, f.stats().creates)
  end)

  it('missing credentials: connect names both variables and sends nothing', function()
    local ok, err = pcall(modal.connect, { getenv = function() return nil end })
    assert.is_false(ok)
    assert.matches('MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set', err)
  end)

  it('MODAL_BUILD chooses native builds or replay, and names a bad value', function()
    assert.equal('native', modal.env_mode(modal.connect(f.config())))
    assert.equal('replay', modal.env_mode(modal.connect(f.config { build = 'replay' })))
    local ok, err = pcall(modal.connect, f.config { build = 'fast' })
    assert.is_false(ok)
    assert.matches('MODAL_BUILD %(or build%) must be native or replay, got fast', err)
  end)

  it('a build context file over the inline limit is refused by name before anything is sent', function()
    local dir = assert(fs.tempdir('modal-ctx-'))
    assert(fs.write(dir .. '/big.bin', string.rep('x', modal_build.INLINE_FILE_LIMIT + 1)))
    local before = f.stats().rpcs.MountPutFile or 0
    local b, err, code = modal.build(modal.connect(f.config()), { recipe = {
      key = string.rep('a', 64), base = 'debian:bookworm-slim', dockerfile = 'FROM x\nCOPY big.bin /big.bin\n',
      context_dir = dir, steps = { { op = 'COPY', copy = { src = { 'big.bin' }, dst = '/big.bin' } } } } })
    fs.remove_tree(dir)
    assert.is_nil(b)
    assert.equal('EBUILD', code)
    assert.matches('build context file big.bin is %d+ bytes', err)
    assert.matches('MODAL_BUILD=replay', err)
    assert.equal(before, f.stats().rpcs.MountPutFile or 0)
  end)

  it('an unknown app (lookup only) names the app', function()
    local client = modal.connect(f.config { app = 'no-such-app', create_app = false })
    local sb, msg, code = modal.create(client, {})
    assert.is_nil(sb)
    assert.equal('GRPC_NOT_FOUND', code)
    assert.matches('app "no%-such%-app" not found', msg)
  end)

  it('a failed image build names the image and the build step', function()
    f.set { fail_image_build = true }
    local client = modal.connect(f.config())
    local sb, msg, code = modal.create(client, {})
    assert.is_nil(sb)
    assert.equal('EBUILD', code)
    assert.matches('image build im%-%w+ %(FROM python:3.12%-slim%) failed: Image build failed', msg)
    assert.equal(0, f.stats().creates)
  end)

  it('a server that answers HTTP/1.1 only is named as such', function()
    local h1 = modal_fake.start { http1_only = true }
    local client = modal.connect(h1.config())
    local sb, msg = modal.create(client, {})
    h1.close()
    assert.is_nil(sb)
    assert.matches('AuthTokenGet', msg)
    assert.matches('HTTP/2', msg)
    assert.matches('127%.0%.0%.1', msg)
  end)
end)

-- ---- the runner on the fake --------------------------------------------------------------------

describe('cseng run with --provider modal (fake)', function()
  local f, tmp
  setup(function()
    f = modal_fake.start {}
    tmp = assert(fs.tempdir('modal-runner-'))
  end)
  teardown(function()
    f.close()
    fs.remove_tree(tmp)
  end)

  local function env_file()
    local lines = {}
    for k, v in pairs(f.env()) do lines[#lines + 1] = k .. '=' .. v end
    local p = tmp .. '/modal-' .. crypto.hex(crypto.random_bytes(3)) .. '.env'
    assert(fs.write(p, table.concat(lines, '\n') .. '\n'))
    return p
  end
  local unset = { MODAL_SERVER_URL = false, MODAL_TOKEN_ID = false, MODAL_TOKEN_SECRET = false }

  local function cseng(args, timeout)
    local out = tmp .. '/out-' .. crypto.hex(crypto.random_bytes(3))
    local argv = { ROOT .. '/cseng' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    for _, a in ipairs({ '--output', out, '--env-file', env_file() }) do argv[#argv + 1] = a end
    local r = assert(proc.run { argv = argv, cwd = ROOT, timeout = timeout or 900, env_add = unset })
    local jsonl_path, summary
    for _, name in ipairs(fs.list(out) or {}) do
      if name:match('%.jsonl$') then jsonl_path = out .. '/' .. name end
      if name:match('%.json$') then summary = cjson.decode((assert(fs.read(out .. '/' .. name)))) end
    end
    return r, jsonl_path and results.read(jsonl_path) or {}, summary
  end

  it('startup arena: every trial ok, ready_ms >= the injected latency, all terminated, allocations logged first', function()
    f.set { latency = { SandboxCreate = 250 } }
    local r, events = cseng({ 'run', 'plans/startup.lua', '--providers', 'modal', '--samples', '4', '--warmups', '1', '--quiet' })
    f.set { latency = {} }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local trials, alloc, destroyed = 0, {}, {}
    for _, e in ipairs(events) do
      if e.event == 'allocated' then alloc[e.sandbox_id] = true end
      if e.event == 'destroyed' then destroyed[e.sandbox_id] = true end
      if e.event == 'startup_trial' then
        trials = trials + 1
        assert.is_true(e.ok, jsonl.encode(e))
        assert.is_true(alloc[e.sandbox_id] == true, 'trial before its allocation record')
        assert.is_true(e.ready_ms >= 250, tostring(e.ready_ms))
        assert.is_number(e.http.ttfb_ms)
      end
    end
    assert.equal(5, trials)
    local s = f.stats()
    for _, sb in ipairs(s.sandboxes) do
      assert.equal('finished', sb.state)
      assert.is_true(alloc[sb.id] == true, sb.id .. ' created but not in an allocated record')
      assert.is_true(destroyed[sb.id] == true, sb.id .. ' not destroyed')
    end
    assert.equal(0, s.live)
  end)

  local function failures(summary)
    local out = {}
    for _, r in ipairs(summary and summary.results or {}) do
      if r.error then out[#out + 1] = r.task_id .. ': ' .. tostring(r.error) end
    end
    return table.concat(out, '\n')
  end

  -- no --retry-errors: on libcurl 8.14 (tools/apt-backports.sh) no call breaks under concurrency
  -- (7.88 lost HTTP/2 stream ends here: "Received HTTP/0.9")
  it('cold-gold: the covering tasks (every kind of environment and file) pass with gold cold and warm; they score 0 with nop', function()
    -- every task runs cold and warm on local and docker and with nop on local (spec/run/tasks_spec.lua,
    -- spec/providers/docker/docker_spec.lua); here, the tasks that cover every kind of environment and file the dataset has
    local ids = vendor.covering_tasks()
    local cover = table.concat(ids, ',')
    for _, mode in ipairs({ 'cold', 'warm' }) do
      local args = { 'run', 'plans/cold-gold.lua', '--provider', 'modal', '--mode', mode, '--quiet', '--concurrency', '2',
                     '--tasks', cover }
      local want = #ids
      local r, _, summary = cseng(args, 1800)
      assert.equal(0, r.code, r.stderr .. r.stdout .. failures(summary))
      assert.equal(want, summary.task_count)
      assert.equal(want, summary.passed, mode .. ': ' .. jsonl.encode(summary))
    end
    local r, _, summary = cseng({ 'run', 'plans/cold-gold.lua', '--provider', 'modal', '--solver', 'nop', '--quiet',
                                  '--concurrency', '2', '--tasks', cover }, 1800)
    assert.equal(0, r.code, r.stderr .. failures(summary))
    assert.equal(#ids, summary.task_count)
    assert.equal(0, summary.passed)
    assert.equal(0, f.stats().live)
  end)

  it('kill -9 mid-run, then cseng cleanup --provider modal leaves nothing with the run\'s tags', function()
    f.set { latency = { TaskExecWait = 1500 } } -- trials are in their first command when killed
    local out = tmp .. '/killed'
    local p = assert(proc.spawn { argv = { ROOT .. '/cseng', 'run', 'plans/cold-gold.lua', '--provider', 'modal',
      '--concurrency', '3', '--output', out, '--env-file', env_file(), '--quiet' }, cwd = ROOT, env_add = unset })
    while f.stats().live < 3 do task.sleep(0.05) end
    p:kill('KILL')
    p:wait()
    p:close()
    f.set { latency = {} }
    local run_id
    for _, name in ipairs(fs.list(out) or {}) do run_id = run_id or name:match('^(.-)%.jsonl$') end
    assert.is_string(run_id)
    local left = 0
    for _, sb in ipairs(f.stats().sandboxes) do
      for _, t in ipairs(sb.tags) do
        if t.tag_name == 'cseng.run' and t.tag_value == run_id and sb.state ~= 'finished' then left = left + 1 end
      end
    end
    assert.is_true(left >= 3, tostring(left))
    local r = assert(proc.run { argv = { ROOT .. '/cseng', 'cleanup', '--provider', 'modal', '--run', run_id,
                                         '--env-file', env_file() },
                                cwd = ROOT, timeout = 300, env_add = unset })
    assert.equal(0, r.code, r.stderr .. r.stdout)
    for _, sb in ipairs(f.stats().sandboxes) do
      for _, t in ipairs(sb.tags) do
        if t.tag_name == 'cseng.run' and t.tag_value == run_id then assert.equal('finished', sb.state, sb.id) end
      end
    end
  end)

  it('cseng prewarm --provider modal prints MODAL_IMAGE_ID', function()
    local i = vendor.smoke_index((cjson.decode(assert(fs.read(ROOT .. '/data/smoke.jsonl')):match('[^\n]+'))).task_id)
    local r = assert(proc.run { argv = { ROOT .. '/cseng', 'prewarm', '--provider', 'modal', '--task-index', tostring(i),
      '--task-limit', '1', '--env-file', env_file(), '--output', tmp .. '/prewarm' }, cwd = ROOT, timeout = 600,
      env_add = unset })
    assert.equal(0, r.code, r.stderr)
    assert.matches('MODAL_IMAGE_ID=im%-%w+', r.stdout)
    assert.equal(0, f.stats().live)
    local _ = util
  end)
end)
