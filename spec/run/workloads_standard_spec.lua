-- The arena's standard workload (lua/cseng/run/workloads/standard.lua): the bundled repository
-- packed as a git bundle with the same commit id every time, its size stated in run_started; a
-- run on local clones, builds and tests it in each sample, the clone's HEAD the bundle's commit and
-- the suite's passes the host's count of its tests; a suite with a failing test, or one that
-- loses a test, fails the sample (EINTACT), not a time; a sandbox root without the tools and a
-- folder that is no such repository are refused before the log is opened. No duration decides.
local util = require('cseng.lib.util')
local cjson = require('cjson')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local errors = require('cseng.lib.errors')
local workloads = require('cseng.run.workloads')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local standard = require('cseng.run.workloads.standard')

local function base(extra)
  return util.merge({ providers = { 'local' }, samples = 2, warmups = 0, seed = 23, workload = 'standard',
    command = 'echo arena-standard-ready', expect = 'arena-standard-ready' }, extra)
end

-- A copy of the bundled repository, changed by edit(text of the test file) -> new text.
local function variant(edit)
  local dir = H.tempdir('standard-variant-') .. '/repo'
  assert(fs.copy_tree(standard.default_dir(), dir))
  local path = dir .. '/tests/test_minicodec.c'
  assert(fs.write(path, edit(assert(fs.read(path)))))
  return dir
end

describe('the standard workload\'s repository', function()
  it('counts the bundled suite\'s tests and packs it with the same commit every time', function()
    local wo = workloads.options { workload = 'standard' }
    assert.equal(standard.default_dir(), wo.standard_dir)
    -- the host's count: one TEST( line per test, as the runner's RUN lines
    local text = assert(fs.read(wo.standard_dir .. '/tests/test_minicodec.c'))
    assert.equal(select(2, text:gsub('\n%s*RUN%(', '')), wo.standard_tests)
    assert.is_true(wo.standard_tests >= 20)
    local a = standard.pack(wo.standard_dir, wo.standard_tests)
    local b = standard.pack(wo.standard_dir, wo.standard_tests)
    assert.equal(a.commit, b.commit)
    assert.equal(a.bundle, b.bundle)
    assert.matches('^%x+$', a.commit)
    -- its size: the tracked files (build outputs are ignored) and their lines
    local bundle = H.tempdir('standard-bundle-') .. '/repo.bundle'
    assert(fs.write(bundle, a.bundle))
    local r = assert(proc.run { argv = { 'git', 'bundle', 'list-heads', bundle }, timeout = 30 })
    assert.matches(a.commit .. ' refs/heads/main', r.stdout, 1, true)
    assert.is_true(a.files >= 9 and a.files <= 12, tostring(a.files))
    assert.is_true(a.lines >= 300 and a.lines <= 600, tostring(a.lines))
  end)

  it('refuses a folder that is no such repository, naming the field', function()
    local empty = H.tempdir('standard-empty-')
    assert.has_error(function() workloads.options { workload = 'standard', workload_options = { standard_dir = empty } } end,
      'workload_options.standard_dir: ' .. empty .. ' has no Makefile (`make` builds, `make test` tests)')
    assert(fs.write(empty .. '/Makefile', 'all:\n'))
    assert.has_error(function() workloads.options { workload = 'standard', workload_options = { standard_dir = empty } } end,
      'workload_options.standard_dir: ' .. empty .. '/tests/*.c defines no TEST(name): nothing to count the passes against')
  end)

  it('refuses a local root without git, make and cc before the log is opened', function()
    local root = H.tempdir('standard-root-')
    assert(fs.mkdir_p(root .. '/etc')); assert(fs.mkdir_p(root .. '/usr/bin'))
    assert(fs.write(root .. '/etc/passwd', 'root:x:0:0::/root:/bin/sh\n'))
    assert(fs.write(root .. '/usr/bin/make', ''))
    local dir = H.tempdir('arena-standard-refused-')
    local ok, err = pcall(require('cseng.run.frame').run, 'startup', base { output = dir, quiet = true,
      provider_config = { ['local'] = { rootfs = root } } })
    assert.is_false(ok)
    assert.equal('--workload standard: local\'s sandboxes lack git, cc (in ' .. root .. '): the standard workload needs '
      .. 'git, make, cc', errors.line(err):gsub(' %(EUSAGE%)$', ''))
    assert.same({}, fs.list(dir) or {})
  end)
end)

describe('standard through the arena on local', function()
  it('clones, builds and tests: HEAD is the bundle\'s commit, every test passes, the size is stated', function()
    local status, by = A.run(base {}, 'arena-standard-')
    assert.equal(0, status)
    local st = by.run_started[1]
    local info = st.workload_info
    assert.equal('data/workloads/standard', info.source)
    local packed = standard.pack(standard.default_dir(), info.tests)
    assert.equal(packed.commit, info.commit)
    assert.equal(packed.files, info.files)
    assert.equal(packed.lines, info.lines)
    assert.equal('standard_total_ms', st.headline)
    assert.equal(2, #by.startup_trial)
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.ok, tostring(t.error))
      assert.is_true(t.clean, cjson.encode(t.audit))
      assert.same({ ok = true, want = info.commit, got = info.commit }, t.checks.standard_head)
      assert.same({ ok = true, want = info.tests, got = info.tests }, t.checks.standard_tests_passed)
      assert.same({ ok = true, want = 0, got = 0 }, t.checks.standard_tests_failed)
      for _, f in ipairs(st.figures) do assert.is_number(t.figures[f[1]], f[1]) end
    end
    local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
    assert.equal(2, doc.providers[1].figures.standard_total_ms.n)
    assert.equal(#by.allocated, #by.destroyed)
  end)

  it('a failing test fails the sample (EINTACT, no figures), and so does a test the runner never runs', function()
    -- one check made false: the suite runs every test, one fails
    local failing = variant(function(t) return (t:gsub('CHECK%(crc%("123456789"%) == 0xCBF43926u%)',
      'CHECK(crc("123456789") == 0xCBF43927u)')) end)
    local status, by = A.run(base { samples = 1, workload_options = { standard_dir = failing } }, 'arena-standard-')
    assert.equal(1, status)
    local t = by.startup_trial[1]
    assert.is_false(t.ok)
    assert.equal('EINTACT', t.error_code)
    assert.equal('standard_check', t.error_stage)
    assert.is_nil(t.figures)
    assert.is_true(t.checks.standard_head.ok)
    assert.same({ ok = false, want = by.run_started[1].workload_info.tests, got = by.run_started[1].workload_info.tests - 1 },
      t.checks.standard_tests_passed)
    -- a test defined but never run: every test run passes, one fewer than the host counted
    local lost = variant(function(src) return (src:gsub('  RUN%(crc32_zero_bytes%);\n', '')) end)
    status, by = A.run(base { samples = 1, workload_options = { standard_dir = lost } }, 'arena-standard-')
    assert.equal(1, status)
    t = by.startup_trial[1]
    assert.equal('EINTACT', t.error_code)
    local n = by.run_started[1].workload_info.tests
    assert.same({ ok = false, want = n, got = n - 1 }, t.checks.standard_tests_passed)
  end)
end)

-- docker: the base image (cseng/debian:bookworm) holds git, make and gcc; pending without dockerd
describe('standard on docker', function()
  it('clones, builds and tests in a container: HEAD and every test as on local', function()
    local why = H.docker_missing()
    if why then pending(why); return end
    local status, by = A.run(base { providers = { 'docker' }, samples = 1,
      provider_config = { docker = { sandbox = { image = 'cseng/debian:bookworm' } } } }, 'arena-standard-')
    assert.equal(0, status)
    local info = by.run_started[1].workload_info
    local t = by.startup_trial[1]
    assert.is_true(t.ok, tostring(t.error))
    assert.equal(info.commit, t.checks.standard_head.got)
    assert.equal(info.tests, t.checks.standard_tests_passed.got)
    assert.equal(#by.allocated, #by.destroyed)
  end)
end)
