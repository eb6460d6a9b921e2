-- Per-task environments on the local provider: sandboxes on the Debian base root filesystem
-- (`cseng images rootfs`), each task's recipe built once into a cached overlay layer, and the
-- runner's replay for providers without builds. Real sandboxes; the base root filesystem must
-- exist (make check builds it before the specs).
local fs = require('cseng.fs')
local cjson = require('cjson')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local images = require('cseng.images.rootfs')
local base = require('providers.local')
local H = require('spec.helpers.common')

local ROOT = H.ROOT
local SMOKE = ROOT .. '/data/smoke.jsonl'

local tmp = H.tempdir('cseng-local-env-spec')
teardown(H.remove_tempdirs)

local function run(opts)
  opts.provider = opts.provider or 'local'
  opts.dataset = opts.dataset or SMOKE
  opts.solver = opts.solver or 'gold'
  opts.mode = opts.mode or 'cold'
  opts.concurrency = opts.concurrency or 2
  opts.output = tmp .. '/results'
  opts.quiet = true
  local status, info = frame.run('tasks', opts)
  local events = results.read(info.jsonl)
  return status, results.summary(events), events
end

local function count_outcomes(s)
  local n = { passed = 0, failed = 0, error = 0 }
  for _, r in ipairs(s.results) do n[r.outcome] = n[r.outcome] + 1 end
  return n
end

local function run_gaps(r)
  local n = 0
  for _, g in ipairs(r.fidelity_gaps or {}) do if g.kind == 'RUN' then n = n + 1 end end
  return n
end

local function with_run_steps()
  local out = {}
  for _, t in ipairs(dataset.load(SMOKE)) do
    if #t.recipe.runs > 0 then out[#out + 1] = t end
  end
  return out
end

local function a_task(name, dockerfile, files)
  local d = tmp .. '/tasks/' .. name
  assert(fs.mkdir_p(d .. '/environment'))
  assert(fs.mkdir_p(d .. '/tests'))
  assert(fs.mkdir_p(d .. '/solution'))
  fs.write(d .. '/task.toml', 'version = "1.0"\n[environment]\nbuild_timeout_sec = 120.0\n')
  fs.write(d .. '/instruction.md', 'nothing to do\n')
  fs.write(d .. '/environment/Dockerfile', dockerfile)
  for k, v in pairs(files or {}) do fs.write(d .. '/environment/' .. k, v) end
  fs.write(d .. '/solution/solve.sh', 'true\n')
  fs.write(d .. '/tests/test.sh', 'test -f /built && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
  return d
end

describe('local on the base root filesystem', function()
  local rootfs = images.rootfs_dir('bookworm')
  local present = fs.exists(rootfs .. '/etc/passwd')

  before_each(function()
    if not present then
      error('the Debian base root filesystem is absent (' .. rootfs .. '): ./cseng images rootfs builds it (make check does)')
    end
  end)

  -- every bundled task with gold cold and warm, and nop, on the base root filesystem with no
  -- RUN gap: spec/run/tasks_spec.lua's local runs (they use this mode by default)

  it('a second cold run of a task with RUN steps starts from the cached layer', function()
    local layers = tmp .. '/layers-second'
    local tasks = with_run_steps()
    assert.is_true(#tasks >= 4)
    for _, t in ipairs(tasks) do
      local _, s1 = run { task_index = t.index, provider_config = { layers = layers } }
      local _, s2 = run { task_index = t.index, provider_config = { layers = layers } }
      local a, b = s1.results[1], s2.results[1]
      assert.equal('passed', a.outcome, t.id .. ': ' .. tostring(a.error))
      assert.equal('passed', b.outcome, t.id .. ': ' .. tostring(b.error))
      assert.equal('native_build', a.environment.method, t.id)
      assert.is_false(a.environment.cache_hit)
      assert.equal('cached_layer', b.environment.method, t.id)
      assert.is_true(b.environment.cache_hit)
      assert.is_true(b.build_cache_hit)
      assert.equal(a.environment.content_key, b.environment.content_key)
      assert.matches('build skipped', b.build_log_tail)
    end
  end)

  it('a failing RUN step is a build error naming the line, with the output tail, and no layer is kept', function()
    local d = a_task('failing-run', 'FROM debian:bookworm-slim\nRUN echo first > /built\nRUN echo "the-step-output"; echo oops >&2; exit 7\n')
    local layers = tmp .. '/layers-fail'
    local status, s, events = run { dataset = d, provider_config = { layers = layers } }
    assert.equal(1, status)
    local r = s.results[1]
    assert.equal('error', r.outcome)
    assert.equal('build', r.error_stage)
    assert.equal('EBUILD', r.error_code)
    assert.matches('environment/Dockerfile line 3: RUN .*: exit 7', r.error)
    assert.matches('the%-step%-output', r.build_log_tail)
    assert.matches('oops', r.build_log_tail)
    for _, name in ipairs(fs.list(layers) or {}) do
      assert.is_nil(name:match('^%x+$') and fs.exists(layers .. '/' .. name .. '/layer.json') or nil, 'a layer was kept: ' .. name)
    end
    assert.same({}, results.live_allocations(events))
  end)

  it('a trial timeout during a layer build leaves no build mount or directory behind', function()
    local layers = tmp .. '/layers-timeout'
    local t = with_run_steps()[1]
    local _, s, events = run { task_index = t.index, timeout_seconds = 0.2, provider_config = { layers = layers } }
    assert.equal(1, #s.results)
    local mounts = assert(fs.read('/proc/self/mountinfo'))
    assert.is_nil(mounts:find(layers, 1, true), 'a build mount is left')
    for _, name in ipairs(fs.list(layers) or {}) do
      assert.is_nil(name:find('.build-', 1, true), 'a build directory is left: ' .. name)
    end
    assert.same({}, results.live_allocations(events))
  end)

  it('records the base image it cannot provide as a FROM gap, and still runs the steps', function()
    local d = a_task('other-base', 'FROM alpine:3\nRUN echo x > /built\n')
    local _, s = run { dataset = d, provider_config = { layers = tmp .. '/layers-other' } }
    local r = s.results[1]
    assert.equal('passed', r.outcome, tostring(r.error))
    assert.equal('FROM', r.fidelity_gaps[1].kind)
    assert.matches('alpine:3 is not available here', r.fidelity_gaps[1].text)
  end)

  it("enforces the task's memory limit on the base root filesystem through the sandbox's cgroup", function()
    local client = base.connect({ root = tmp .. '/limits' })
    if not client.cgroup then pending('no writable cgroup hierarchy here') return end
    local sb = assert(base.create(client, { labels = {}, memory_mb = 256, cpus = 1, workdir = '/workspace' }))
    local ok, err = pcall(function()
      assert.equal(256, sb.limits.memory_mb)
      local limit
      for _, d in ipairs(sb.cgroups) do
        limit = limit or fs.read(d .. '/memory.limit_in_bytes') or fs.read(d .. '/memory.max')
      end
      assert.equal(256 * 1048576, tonumber(limit))
      -- a process of the sandbox cannot hold more than the limit, and can hold less
      local r = assert(base.exec(client, sb, "python3 -c 'x = bytearray(100 * 1048576); print(len(x))'", { timeout = 60 }))
      assert.equal(0, r.code, r.stderr)
      r = assert(base.exec(client, sb, "python3 -c 'x = bytearray(400 * 1048576); print(len(x))'", { timeout = 60 }))
      assert.not_equal(0, r.code)
    end)
    base.destroy(client, sb)
    if not ok then error(err, 0) end
  end)

  it('says how to build the base root filesystem when it is absent, and offers --host-root', function()
    local ok, err = pcall(base.connect, { rootfs = tmp .. '/no-rootfs' })
    assert.is_false(ok)
    assert.matches('the Debian base root filesystem is absent', err, 1, true)
    assert.matches('./cseng images rootfs', err, 1, true)
    assert.matches('--host-root', err, 1, true)
  end)

  it('host mode (--host-root) records the RUN steps as gaps, and the tasks that need them fail', function()
    local tasks = with_run_steps()
    local _, s = run { task_index = tasks[1].index, provider_config = { host_root = true } }
    local r = s.results[1]
    assert.equal('failed', r.outcome, tostring(r.error))
    assert.equal('host', r.environment.method)
    assert.is_true(run_gaps(r) >= 1)
  end)
end)

describe('replay on a provider without builds', function()
  -- local's sandboxes on the base root filesystem, without its layer build: the runner replays
  -- the recipe's steps in each sandbox, through the adapter's exec and put
  local function replay_provider()
    package.loaded['providers.replay_local'] = setmetatable({
      name = 'replay_local', build = false, env_mode = function() return 'replay' end,
    }, { __index = base })
  end
  after_each(function() package.loaded['providers.replay_local'] = nil end)

  it('passes every task with RUN steps, cold, with the replay timed as the build phase', function()
    replay_provider()
    for _, t in ipairs(with_run_steps()) do
      local status, s = run { provider = 'replay_local', task_index = t.index }
      local r = s.results[1]
      assert.equal(0, status, t.id .. ': ' .. tostring(r.error) .. ' ' .. tostring(r.build_log_tail))
      assert.equal('passed', r.outcome, t.id)
      assert.equal('replay', r.environment.method)
      assert.equal(#t.recipe.steps, r.environment.replayed_steps)
      assert.is_number(r.phases.build_seconds)
      assert.equal(0, run_gaps(r), t.id)
    end
  end)

  it('warm: the replay is paid once per content key, then trials start from the snapshot', function()
    replay_provider()
    local t = with_run_steps()[1]
    local d = tmp .. '/twice'
    assert(fs.mkdir_p(d))
    -- the same task twice under two ids: one content key, one preparation
    assert(fs.copy_tree(t.dir, d .. '/a'))
    assert(fs.copy_tree(t.dir, d .. '/b'))
    local status, s, events = run { provider = 'replay_local', dataset = d, mode = 'warm', concurrency = 1,
      provider_config = { root = tmp .. '/replay-warm' } }
    assert.equal(0, status)
    assert.equal(2, count_outcomes(s).passed)
    local prewarmed = 0
    for _, e in ipairs(events) do if e.event == 'prewarmed' then prewarmed = prewarmed + 1 end end
    assert.equal(1, prewarmed)
    assert.equal(s.results[1].environment.content_key, s.results[2].environment.content_key)
    for _, r in ipairs(s.results) do assert.equal('warm_artifact', r.environment.method) end
    local hits = {}
    for _, r in ipairs(s.results) do hits[#hits + 1] = r.environment.cache_hit end
    table.sort(hits, function(x, y) return tostring(x) < tostring(y) end)
    assert.same({ false, true }, hits)
    assert.is_string(cjson.encode(s.results))
  end)
end)
