-- The arena's fidelity audit (lua/cseng/run/audit.lua, run on every sample by
-- lua/cseng/run/kinds/startup.lua) against fakes that break a benchmark's promises: one whose warm
-- pool hands out a used sandbox under a new id, one that grants half the CPUs asked for, one
-- whose second create fails and one whose second first command fails. Each is caught, labelled,
-- kept with its sandbox id, and never pooled with the clean samples (the live counters, the
-- summary, the report); a failed sample carries no time. Clock-free: counts, labels, contents.
local sys = require('cseng.sys')
local util = require('cseng.lib.util')
local cjson = require('cjson')
local fs = require('cseng.fs')
local stats = require('cseng.lib.stats')
local audit = require('cseng.run.audit')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local fakes = require('spec.fakes')

local function run_arena(opts)
  local status, by, _, info = A.run(opts, 'arena-audit-')
  return status, by, info
end

local function samples_of(by, provider)
  local out = {}
  for _, t in ipairs(by.startup_trial) do if t.provider == provider and not t.warmup then out[#out + 1] = t end end
  table.sort(out, function(a, b) return a.round < b.round end)
  return out
end

local function has(list, x)
  for _, v in ipairs(list or {}) do if v == x then return true end end
  return false
end

describe('the audit judges an answer', function()
  local function answer(t)
    local lines = {}
    for k, v in pairs(t) do lines[#lines + 1] = k .. '=' .. v end
    lines[#lines + 1] = audit.END
    return audit.parse(table.concat(lines, '\n'))
  end

  it('labels a marker left by another sample reused, and a missing end marker audit_failed', function()
    local seen = audit.seen()
    local a = audit.judge { kv = answer { marker = 'run/x/measured/1/1', nproc = '2' }, key = 'run/x/measured/2/1',
      sandbox_id = 'sb-2', seen = seen }
    assert.is_false(a.ok)
    assert.same({ 'reused' }, a.labels)
    assert.is_nil(audit.parse('nproc=2\n'))
    local b = audit.judge { kv = nil, error = 'no end marker', key = 'k3', sandbox_id = 'sb-3', seen = seen }
    assert.same({ 'audit_failed' }, b.labels)
  end)

  it('labels the same sandbox id twice reused, and CPUs and memory against the request', function()
    local seen = audit.seen()
    assert.is_true(audit.judge { kv = answer { marker = '', nproc = '4' }, key = 'a', sandbox_id = 'same', seen = seen }.ok)
    local again = audit.judge { kv = answer { marker = '', nproc = '4' }, key = 'b', sandbox_id = 'same', seen = seen }
    assert.same({ 'reused' }, again.labels)
    local quota = audit.judge { kv = answer { marker = '', nproc = '8', ['cgroup2.cpu.max'] = '100000 100000',
      ['cgroup2.memory.max'] = tostring(512 << 20), mem_total_kb = tostring(16 << 20) }, key = 'c', sandbox_id = 'c',
      seen = seen, asked = { cpus = 2, memory_mb = 2048 } }
    assert.same({ 'cpus_below_request', 'memory_below_request' }, quota.labels)
    assert.equal(1, quota.cpus)
    assert.equal('cgroup quota', quota.cpus_from)
    assert.equal(512, quota.memory_mb)
    local more = audit.judge { kv = answer { marker = '', nproc = '17', mem_total_kb = tostring(4 << 20) }, key = 'd',
      sandbox_id = 'd', seen = seen, asked = { cpus = 1, memory_mb = 2048 } }
    assert.same({ 'cpus_above_request', 'memory_above_request' }, more.labels)
  end)

  it('tells a gVisor kernel and a container apart', function()
    assert.equal('gvisor', (audit.isolation { kernel = '4.4.0', kernel_version = '#1 SMP Sun Jan 10 15:06:54 PST 2016' }))
    assert.equal('container', (audit.isolation { dockerenv = '1', pid1 = 'sleep' }))
    assert.equal('unknown', (audit.isolation { pid1 = 'systemd' }))
    assert.equal('unknown', (audit.isolation { pid1 = 'systemd', uid_map = '0 0 4294967295' }))
    local class, ev = audit.isolation { pid1 = 'init', uid_map = '0 100000 65536' }
    assert.equal('container', class)
    assert.same({ 'user namespace: root is uid 100000 outside' }, ev)
  end)

  it('finds a local sandbox a container from inside it (its user namespace)', function()
    local L = require('providers.local')
    local client = assert(L.connect({ root = assert(require('cseng.fs').tempdir('cseng-audit-spec-')) }))
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local r = assert(L.exec(client, sb, audit.command('spec')))
    L.destroy(client, sb)
    local kv = assert(audit.parse(r.stdout), r.stderr)
    assert.equal('container', (audit.isolation(kv)))
  end)

  -- every tool the audit spawns is a process start inside the sandbox, paid on every sample: it
  -- reads its values with the shell alone, so with no PATH at all it answers the same (bar the
  -- namespace links and the cgroup mount's inode, which take its one `ls`)
  it('reads its values with the shell alone: the same answer with no tool on PATH', function()
    local L = require('providers.local')
    local client = assert(L.connect({ root = assert(require('cseng.fs').tempdir('cseng-audit-spec-')) }))
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local full = assert(L.exec(client, sb, audit.command('spec-a')))
    local bare = assert(L.exec(client, sb, 'PATH=/nonexistent\n' .. audit.command('spec-b')))
    local tools = assert(L.exec(client, sb, 'nproc; uname -r; grep -m1 MemTotal /proc/meminfo; cat /proc/1/comm'))
    L.destroy(client, sb)
    local kf, kb = assert(audit.parse(full.stdout), full.stderr), assert(audit.parse(bare.stdout), bare.stderr)
    for _, k in ipairs({ 'boot_id', 'nproc', 'cpus_allowed', 'mem_total_kb', 'kernel', 'kernel_version', 'pid1',
      'uid_map', 'cgroup', 'uptime' }) do
      assert.is_true(kb[k] ~= nil and kb[k] ~= '', k .. ' is empty without tools: ' .. bare.stdout)
      if k ~= 'uptime' then assert.equal(kf[k], kb[k], k) end
    end
    assert.equal('spec-a', kb.marker) -- the second run found the first one's marker
    local nproc, release, mem, comm = tostring(tools.stdout):match('^(%d+)\n(%S+)\nMemTotal:%s+(%d+) kB\n(%S+)')
    assert.same({ nproc, release, mem, comm }, { kf.nproc, kf.kernel, kf.mem_total_kb, kf.pid1 })
    assert.matches('^mnt:%[%d+%]$', kf.mnt_ns)
    assert.matches('^pid:%[%d+%]$', kf.pid_ns)
    assert.matches('^%d+$', kf.cgroup_inode)
  end)
end)

describe('the arena audits every sample against faithless fakes', function()
  if sys.cpu_count() < 2 then
    pending('needs 2 CPUs (the fakes grant 2 and 1 by affinity)')
    return
  end
  local started, status, by, info = {}, nil, nil, nil

  setup(function()
    local function start(name, sw)
      local f = assert(fakes.start(name, sw))
      started[#started + 1] = f
      return f
    end
    local F = {
      clean = start('e2b', { grant_cpus = 2 }),
      reuse = start('e2b', { grant_cpus = 2, reuse_sandboxes = true }),
      half = start('daytona', { grant_cpus = function(asked) return math.max(1, (asked or 2) // 2) end }),
      fails_create = start('e2b', { grant_cpus = 2, create_status = function(n) if n == 2 then return 500 end end }),
      -- the first sample runs three commands (the first, the audit, the environment probe): the
      -- 4th is the second sample's first command
      fails_exec = start('e2b', { grant_cpus = 2, envd_fault = function(n) if n == 4 then return 'error_end' end end }),
    }
    local adapters = { clean = 'e2b', reuse = 'e2b', half = 'daytona', fails_create = 'e2b', fails_exec = 'e2b' }
    local config, names = {}, {}
    for name, f in pairs(F) do
      config[name] = util.merge(f.config(), { adapter = adapters[name] })
      names[#names + 1] = name
    end
    status, by, info = run_arena { providers = names, provider_config = config, samples = 3, warmups = 0, seed = 7,
      command = 'echo arena-audit-ready', expect = 'arena-audit-ready', resources = { cpus = 2 } }
    F.reuse_stats = F.reuse.stats()
    started.F = F
  end)

  teardown(function() for _, f in ipairs(started) do f.close() end end)

  it('records an audit with the sandbox id on every sample; the clean fake is clean throughout', function()
    assert.equal(15, #by.startup_trial)
    for _, t in ipairs(by.startup_trial) do
      assert.is_table(t.audit, t.provider .. ' round ' .. t.round .. ' has no audit')
      if t.sandbox_id then assert.equal(t.sandbox_id, t.audit.sandbox_id) end
    end
    for _, t in ipairs(samples_of(by, 'clean')) do
      assert.is_true(t.clean)
      assert.is_true(t.audit.ok)
      assert.is_true(t.audit.fresh)
      assert.equal(2, t.audit.cpus)
      assert.is_string(t.audit.code_path)
      assert.is_number(t.audit_ms)
    end
  end)

  it('labels the samples of a warm pool that hands out used sandboxes reused', function()
    local s = samples_of(by, 'reuse')
    assert.equal(2, started.F.reuse_stats.reused) -- the fake's own count: two creates got a used sandbox
    assert.is_true(s[1].clean)
    local ids = { [s[1].sandbox_id] = true }
    for i = 2, 3 do
      assert.is_true(s[i].ok) -- it worked: the sample is not a failure, it is not what it claims to be
      assert.is_false(s[i].clean)
      assert.is_false(s[i].audit.fresh)
      assert.is_true(has(s[i].audit.labels, 'reused'), cjson.encode(s[i].audit))
      assert.matches('audit marker of ' .. info.run_id:gsub('%p', '%%%0') .. '/reuse/measured/' .. (i - 1),
        s[i].audit.why.reused)
      assert.is_nil(ids[s[i].sandbox_id]) -- a new id each time: only the marker tells
      ids[s[i].sandbox_id] = true
    end
  end)

  it('labels the samples of a fake that grants half the CPUs asked cpus_below_request', function()
    for _, t in ipairs(samples_of(by, 'half')) do
      assert.is_true(t.ok)
      assert.is_false(t.clean)
      assert.equal(1, t.audit.cpus)
      assert.same({ 'cpus_below_request' }, t.audit.labels)
      assert.same({ cpus = 2 }, t.audit.asked)
    end
  end)

  it('labels failed samples failed and gives them no time, at create and at the first command', function()
    local c = samples_of(by, 'fails_create')
    assert.is_false(c[2].ok)
    assert.equal('create', c[2].error_stage)
    assert.is_nil(c[2].ready_ms)
    assert.is_false(c[2].clean)
    assert.same({ 'failed' }, c[2].audit.labels)
    local e = samples_of(by, 'fails_exec')
    assert.is_false(e[2].ok)
    assert.equal('first_exec', e[2].error_stage)
    assert.is_nil(e[2].ready_ms)
    assert.is_number(e[2].create_ms) -- how far it got, kept apart from any figure
    assert.is_string(e[2].sandbox_id)
    assert.is_true(has(e[2].audit.labels, 'failed'))
    assert.equal(2, e[2].audit.cpus) -- the audit still ran in its sandbox
    for _, t in ipairs({ c[1], c[3], e[1], e[3] }) do assert.is_true(t.clean) end
  end)

  it('pools only the clean samples: the summary, the finish counts and the report', function()
    local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
    local want_clean = { clean = 3, reuse = 1, half = 0, fails_create = 2, fails_exec = 2 }
    for _, e in ipairs(doc.providers) do
      assert.equal(3, e.n)
      assert.equal(want_clean[e.provider], e.clean, e.provider)
      local vals = {}
      for _, t in ipairs(samples_of(by, e.provider)) do if t.clean then vals[#vals + 1] = t.ready_ms end end
      if #vals > 0 then
        assert.equal(stats.median(vals), e.ready_ms.p50, e.provider)
      else
        assert.is_nil(e.ready_ms.p50, e.provider)
      end
    end
    local fin = by.run_finished[1]
    assert.same({ reused = 2 }, fin.counts.reuse.audit_labels)
    assert.same({ cpus_below_request = 3 }, fin.counts.half.audit_labels)
    local report = (assert(fs.read(info.report)))
    assert.matches('## Fidelity audit', report, 1, true)
    assert.matches('| reuse | 3 | 1 | reused 2 |', report, 1, true)
    assert.matches('| half | 3 | 0 | cpus_below_request 3 | 1 |', report, 1, true)
    for _, t in ipairs(samples_of(by, 'reuse')) do
      if not t.clean then assert.matches(t.sandbox_id, report, 1, true) end
    end
    assert.matches('left out of every statistic', report, 1, true)
    assert.equal(0, status == 0 and 0 or status)
  end)
end)
