-- The arena's primitive workloads (lua/cseng/run/workloads/, --workload NAME) on the local provider
-- and the E2B and Daytona fakes (whose sandboxes really run commands): each runs through the
-- arena as start-up does (rounds, the audit, the summary, the report), and each sample checks
-- clock-free facts: the bytes that arrived (sha256 and length, inside the sandbox or on the
-- host), the files that arrived (count and manifest hash), a restored snapshot's files, an answer
-- per command; the fakes' own counters say which path carried them. No duration decides anything.
local util = require('cseng.lib.util')
local cjson = require('cjson')
local fs = require('cseng.fs')
local workloads = require('cseng.run.workloads')
local contract = require('providers.shared.contract')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local fakes = require('spec.fakes')

local function run_arena(opts)
  local status, by, errtext, info = A.run(opts, 'arena-prim-')
  return status, by, info, errtext
end

-- Every sample ok, clean, with every figure the workload declares, every check passed; every
-- sandbox it made destroyed.
local function assert_clean_run(status, by, names, samples)
  assert.equal(0, status)
  local st = by.run_started[1]
  assert.equal(#names * samples, #by.startup_trial)
  for _, t in ipairs(by.startup_trial) do
    local where = t.provider .. ' round ' .. t.round
    assert.is_true(t.ok, where .. ': ' .. tostring(t.error))
    assert.is_true(t.clean, where .. ': ' .. cjson.encode(t.audit))
    for _, f in ipairs(st.figures) do
      assert.is_number(t.figures[f[1]], where .. ' has no ' .. f[1])
      assert.is_true(t.figures[f[1]] > 0, where .. ': ' .. f[1])
    end
    for name, c in pairs(t.checks) do assert.is_true(c.ok, where .. ': ' .. name) end
  end
  local destroyed = {}
  for _, e in ipairs(by.destroyed) do destroyed[e.provider .. '/' .. e.sandbox_id] = true end
  for _, e in ipairs(by.allocated) do assert.is_true(destroyed[e.provider .. '/' .. e.sandbox_id], e.sandbox_id) end
  local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
  for _, e in ipairs(doc.providers) do
    assert.equal(st.headline, e.headline)
    assert.equal(samples, e[st.headline] and e.clean)
    assert.is_number(e[st.headline].p50)
    for _, f in ipairs(st.figures) do assert.equal(samples, e.figures[f[1]].n, f[1]) end
  end
end

local function checks_named(t, prefix)
  local n = 0
  for name in pairs(t.checks) do if name:sub(1, #prefix) == prefix then n = n + 1 end end
  return n
end

describe('workload options', function()
  it('parses sizes, refuses bad ones and unknown options with the field named', function()
    local wo = workloads.options { sizes = { '64MiB', '1MiB', '4096' } }
    assert.same({ 4096, 1 << 20, 64 << 20 }, wo.sizes)
    assert.equal('64MiB', workloads.size_name(64 << 20))
    assert.has_error(function() workloads.options { sizes = { '12 parsecs' } } end,
      '--sizes: 12 parsecs is not a size (1MiB, 64KiB, 4096)')
    assert.has_error(function() workloads.options { workload_options = { filez = 3 } } end)
    assert.has_error(function() workloads.options { workload_options = { files = 0 } } end,
      'workload_options.files: a whole number >= 1, got 0')
  end)

  it('refuses a workload the adapter does not declare, before anything is allocated', function()
    local daytona = require('providers.daytona')
    local ok, why = workloads.supports(daytona, workloads.load('pause'))
    assert.is_nil(ok)
    assert.matches('does not declare capabilities.pause', why, 1, true)
    local dir = H.tempdir('arena-prim-refused-')
    local rok, err = pcall(require('cseng.run.frame').run, 'startup', { providers = { 'lizard' }, workload = 'snapshot',
      samples = 1, warmups = 0, output = dir, quiet = true, provider_config = { lizard = { api_key = 'k', project_id = 'p',
      api_url = 'http://127.0.0.1:9' } } })
    assert.is_false(rok)
    assert.matches('--workload snapshot: lizard does not declare capabilities.snapshot', require('cseng.lib.errors').line(err),
      1, true)
    assert.same({}, fs.list(dir) or {}) -- no log: nothing was allocated or recorded
  end)

  it('keeps an adapter from claiming a primitive without its functions', function()
    local P = { name = 'x', capabilities = { pause = true } }
    local field
    for _, f in ipairs(contract.FIELDS) do if f[1] == 'capabilities' then field = f end end
    assert.matches('claimed without pause', field.check(P.capabilities, P), 1, true)
    P.pause, P.resume = function() end, function() end
    assert.is_nil(field.check(P.capabilities, P))
  end)
end)

describe('primitives through the arena', function()
  local started = {}
  local config = {}
  setup(function()
    local e = assert(fakes.start('e2b', {}))
    local d = assert(fakes.start('daytona', {}))
    started = { e2b = e, daytona = d }
    config = { e2b = util.merge(e.config(), { adapter = 'e2b' }), daytona = util.merge(d.config(), { adapter = 'daytona' }) }
  end)
  teardown(function() for _, f in pairs(started) do f.close() end end)

  local NAMES = { 'daytona', 'e2b', 'local' }
  local function base(extra)
    return util.merge({ providers = NAMES, provider_config = config, samples = 2, warmups = 0, seed = 11,
      command = 'echo arena-prim-ready', expect = 'arena-prim-ready' }, extra)
  end

  it('exec: every round trip answers with its own marker', function()
    local status, by = run_arena(base { workload = 'exec', workload_options = { exec_count = 5 } })
    assert_clean_run(status, by, NAMES, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.same({ ok = true, want = 5, got = 5 }, t.checks.answers_with_their_marker)
    end
  end)

  it('upload: each size arrives whole (sha256 and length inside), through the file API, else put', function()
    local before = started.e2b.stats().uploads
    local status, by = run_arena(base { workload = 'upload', sizes = { '64KiB', '1MiB' } })
    assert_clean_run(status, by, NAMES, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.equal(4, checks_named(t, 'upload_'))
      assert.equal(65536, t.checks.upload_64KiB_bytes.want)
      assert.equal(t.provider == 'local' and 'put (a tar of the file)' or 'write_files', t.paths.upload)
    end
    -- the E2B fake's own count: one upload request per size per sample
    assert.equal(before + 2 * 2, started.e2b.stats().uploads)
  end)

  it('download: each size arrives whole on the host (sha256 and length)', function()
    local before = started.daytona.stats().downloads
    local status, by = run_arena(base { workload = 'download', sizes = { '64KiB', '1MiB' } })
    assert_clean_run(status, by, NAMES, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.equal(1 << 20, t.checks.download_1MiB_bytes.got)
      assert.equal(t.checks.download_1MiB_sha256.want, t.checks.download_1MiB_sha256.got)
    end
    assert.equal(before + 2 * 2, started.daytona.stats().downloads)
  end)

  it('files: many small files by the bulk path and the per-file path, each counted and hashed inside', function()
    local e0, d0 = started.e2b.stats(), started.daytona.stats()
    local status, by = run_arena(base { workload = 'files', workload_options = { files = 30, file_bytes = 4096 } })
    assert_clean_run(status, by, NAMES, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.same({ ok = true, want = 30, got = '30' }, t.checks.files_bulk_count)
      assert.same({ ok = true, want = 30, got = '30' }, t.checks.files_per_file_count)
      assert.same(t.checks.files_bulk_manifest.want, t.checks.files_per_file_manifest.want)
      if t.provider == 'local' then -- no file API: one tar, a tar per file
        assert.equal('put (one tar)', t.paths.files_bulk)
      else -- the vendor's multi-file upload, then its file API once per file
        assert.equal('write_files (30 files, bulk)', t.paths.files_bulk)
        assert.equal('write_files (one file per call)', t.paths.files_per_file)
        assert.is_true(t.figures.files_per_file_over_bulk > 0)
      end
    end
    -- the fakes' own counters: per sample, one request carrying the 30 files, then 30 of one file each
    local want = {}
    for _ = 1, 2 do
      want[#want + 1] = 30
      for _ = 1, 30 do want[#want + 1] = 1 end
    end
    for name, f in pairs({ e2b = { started.e2b, e0 }, daytona = { started.daytona, d0 } }) do
      local s = f[1].stats()
      local got = {}
      for i = #f[2].upload_batches + 1, #s.upload_batches do got[#got + 1] = s.upload_batches[i] end
      assert.same(want, got, name)
      assert.equal(f[2].uploads + 2 * (1 + 30), s.uploads, name)
      assert.equal(f[2].upload_files + 2 * 60, s.upload_files, name)
    end
  end)

  it('files: a bulk upload the provider partly refuses (HTTP 400) fails the sample with the code, never a partial success', function()
    -- the Daytona daemon answers 400 {"errors"} for one file of the bulk upload and writes the others
    local d = assert(fakes.start('daytona', { upload_fail = function(_, path)
      return path:match('/bulk/d00/f0007%.dat$') and 'mkdir: permission denied' or nil end }))
    local cfg = { daytona = util.merge(d.config(), { adapter = 'daytona' }) }
    local status, by = run_arena(base { providers = { 'daytona' }, provider_config = cfg, samples = 1, workload = 'files',
      workload_options = { files = 20, file_bytes = 1024 } })
    local s = d.stats()
    d.close()
    assert.equal(1, status) -- the only measured sample failed: nothing measured
    local t = by.startup_trial[1]
    assert.is_false(t.ok)
    assert.equal('HTTP_400', t.error_code)
    assert.equal('files_bulk', t.error_stage)
    assert.matches('f0007.dat: mkdir: permission denied (a bulk upload of 20 files)', t.error, 1, true)
    assert.is_nil(t.figures)
    assert.same({ 'failed' }, t.audit.labels)
    assert.equal(19, s.upload_files) -- the daemon wrote the others: only the error tells
    assert.equal(#by.allocated, #by.destroyed)
  end)

  it('fork (daytona, e2b, local): every child holds the parent\'s state file and not a later one, is its own sandbox, and is destroyed', function()
    local e0, d0 = started.e2b.stats(), started.daytona.stats()
    local status, by = run_arena(base { workload = 'fork', workload_options = { fork_count = 3 } })
    assert_clean_run(status, by, NAMES, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.same({ ok = true, want = 3, got = 3 }, t.checks.fork_children)
      assert.same({ ok = true, want = 3, got = 3 }, t.checks.fork_children_hold_the_state)
      assert.same({ ok = true, want = 3, got = 3 }, t.checks.fork_children_are_new_sandboxes)
      assert.same({ ok = true, want = 3, got = 3 }, t.checks.fork_children_without_later_files)
      -- local: a snapshot of the parent's layer where the store has volumes, else a copy
      local api = ({ e2b = 'POST /sandboxes/{id}/fork', daytona = 'POST /sandbox/{id}/fork' })[t.provider]
      if api then assert.matches('fork (3 children): ' .. api, t.paths.fork, 1, true)
      else
        local how = t.paths.fork:match('^fork %(3 children%): a (%a+) of the parent\'s writable layer')
        assert.is_true(how == 'snapshot' or how == 'copy', t.paths.fork)
      end
      assert.equal(3, #t.sandboxes)
      local ids = { [t.sandbox_id] = true }
      for _, id in ipairs(t.sandboxes) do
        assert.is_nil(ids[id])
        ids[id] = true
      end
    end
    -- each child recorded in the ledger, with the fork's labels, and destroyed
    local allocated = {}
    for _, e in ipairs(by.allocated) do allocated[e.sandbox_id] = e end
    for _, t in ipairs(by.startup_trial) do
      for _, id in ipairs(t.sandboxes) do assert.equal(t.sandbox_id, allocated[id].labels['cseng.fork_of']) end
    end
    assert.equal(#by.allocated, #by.destroyed)
    assert.equal(3 * 2 * (1 + 3), #by.allocated)
    -- the fakes' own counters: E2B one call per sample making 3, Daytona one call per child
    local e, d = started.e2b.stats(), started.daytona.stats()
    assert.same({ e0.forks + 2, e0.forked + 6 }, { e.forks, e.forked })
    assert.same({ d0.forks + 6, d0.forked + 6 }, { d.forks, d.forked })
    assert.same({ 0, 0 }, { e.live, d.live })
  end)

  it('fork: a child whose answer was lost is destroyed all the same (found by the parent\'s forks or its labels)', function()
    -- the Daytona fake makes the first child, then closes the connection unanswered: the client
    -- either sends the call again (a twin the run never hears of) or reports the loss (the adapter
    -- then lists the parent's forks); either way nothing outlives the run
    local d = assert(fakes.start('daytona', { lose_fork = function(n) return n == 1 and 'reset' or nil end }))
    local cfg = { daytona = util.merge(d.config(), { adapter = 'daytona' }) }
    local status, by = run_arena(base { providers = { 'daytona' }, provider_config = cfg, samples = 1, workload = 'fork',
      workload_options = { fork_count = 2 } })
    local s = d.stats()
    d.close()
    assert.equal(1, s.lost_forks)
    assert.equal(0, s.live)
    local reconciled = 0
    for _, e in ipairs(by.destroyed) do if e.reason == 'reconciled' then reconciled = reconciled + 1 end end
    local t = by.startup_trial[1]
    if t.ok then -- sent again: two children answered, the twin reclaimed at the run's end by its labels
      assert.equal(0, status)
      assert.equal(3, s.forked)
      assert.equal(1, reconciled)
    else -- reported: the lost child found by GET /sandbox/{id}/forks, recorded and destroyed with the sample
      assert.equal('EFORK', t.error_code)
      assert.equal(1, s.fork_lists)
      assert.equal(2, #t.sandboxes)
    end
    assert.equal(#by.allocated, #by.destroyed)
  end)

  it('fork: a fork where one child fails is a failed sample (EFORK, its check, no figures), its other children destroyed', function()
    local e = assert(fakes.start('e2b', { fork_fail = function(i) return i == 2 end }))
    local cfg = { e2b = util.merge(e.config(), { adapter = 'e2b' }) }
    local status, by = run_arena(base { providers = { 'e2b' }, provider_config = cfg, samples = 1, workload = 'fork',
      workload_options = { fork_count = 3 } })
    local s = e.stats()
    e.close()
    assert.equal(1, status)
    local t = by.startup_trial[1]
    assert.is_false(t.ok)
    assert.equal('EFORK', t.error_code)
    assert.equal('fork', t.error_stage)
    assert.matches('1 of 3 forks failed: fork 2: 500 sandbox_create_failed', t.error, 1, true)
    assert.same({ ok = false, want = 3, got = 2 }, t.checks.fork_children)
    assert.is_nil(t.figures)
    assert.same({ 'failed' }, t.audit.labels)
    assert.equal(2, #t.sandboxes) -- the two made: recorded with their ids
    assert.equal(#by.allocated, #by.destroyed)
    assert.equal(0, s.live)
    local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
    assert.equal(0, doc.providers[1].clean)
  end)

  it('snapshot (local, daytona, e2b): the restored sandbox holds the files written before, the artifact is deleted', function()
    local before, e_before = started.daytona.stats().snapshot_deletes, started.e2b.stats().snapshot_deletes
    local status, by = run_arena(base { workload = 'snapshot', sizes = { '64KiB', '1MiB' } })
    assert_clean_run(status, by, NAMES, 2)
    assert.equal(before + 2 * 2, started.daytona.stats().snapshot_deletes) -- each snapshot deleted after its restore
    assert.equal(e_before + 2 * 2, started.e2b.stats().snapshot_deletes)
    for _, t in ipairs(by.startup_trial) do
      for _, n in ipairs({ '64KiB', '1MiB' }) do
        assert.is_true(t.checks['restore_' .. n .. '_state'].ok)
        assert.equal(t.checks['restore_' .. n .. '_sha256'].want, t.checks['restore_' .. n .. '_sha256'].got)
      end
      assert.equal(2, #t.sandboxes) -- one restore per size, each recorded with its id
    end
    assert.equal(#by.allocated, #by.destroyed)
    assert.equal(3 * 2 * 3, #by.allocated)
  end)

  it('a sample whose bytes arrive changed fails with EINTACT and no figures, and is not pooled', function()
    -- the E2B fake writes the second upload of the run with a flipped byte
    local e = assert(fakes.start('e2b', { corrupt_upload = 2 }))
    local cfg = { bad = util.merge(e.config(), { adapter = 'e2b' }) }
    local status, by = run_arena(base { providers = { 'bad' }, provider_config = cfg, workload = 'upload',
      sizes = { '64KiB' } })
    e.close()
    assert.equal(0, status)
    local s = by.startup_trial
    table.sort(s, function(a, b) return a.round < b.round end)
    assert.is_true(s[1].clean)
    assert.is_false(s[2].ok)
    assert.equal('EINTACT', s[2].error_code)
    assert.equal('upload_check', s[2].error_stage)
    assert.is_nil(s[2].figures)
    assert.is_false(s[2].checks.upload_64KiB_sha256.ok)
    assert.same({ 'failed' }, s[2].audit.labels)
    local doc = cjson.decode((assert(fs.read(by.run_finished[1].summary))))
    assert.equal(1, doc.providers[1].figures.upload_64KiB_ms.n)
  end)
end)

describe('pause through the arena (the E2B fake)', function()
  it('pause -> resume keeps the files and a running process (e2b fake, local); the fake froze and thawed it', function()
    local e = assert(fakes.start('e2b', {}))
    local cfg = { e2b = util.merge(e.config(), { adapter = 'e2b' }) }
    local status, by = run_arena { providers = { 'e2b', 'local' }, provider_config = cfg, samples = 2, warmups = 0,
      seed = 5, command = 'echo arena-prim-ready', expect = 'arena-prim-ready', workload = 'pause' }
    local s = e.stats()
    e.close()
    assert_clean_run(status, by, { 'e2b', 'local' }, 2)
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.checks.resumed_state_file.ok)
      assert.same({ ok = true, want = 'alive', got = 'alive' }, t.checks.resumed_process_alive)
      assert.matches('pause_memory', t.paths.pause, 1, true)
    end
    assert.equal(2, s.pauses)
    assert.equal(2, s.resumes) -- each connect found its sandbox paused
  end)

  it('a provider whose resume loses the sandbox\'s state fails the sample (EINTACT), not a time', function()
    local e = assert(fakes.start('e2b', {}))
    local cfg = { e2b = util.merge(e.config(), { adapter = 'e2b' }) }
    -- the fake's pause wipes the state file the workload wrote before it (a resume from scratch)
    local real = e.sandbox
    e.set { on_pause = function(id) local sb = real(id); require('cseng.fs').remove(sb.host.root .. '/var/tmp/cseng-pause/state') end }
    local status, by = run_arena { providers = { 'e2b' }, provider_config = cfg, samples = 1, warmups = 0, seed = 5,
      command = 'echo arena-prim-ready', expect = 'arena-prim-ready', workload = 'pause' }
    e.close()
    assert.equal(1, status) -- every measured sample failed: the run measured nothing
    local t = by.startup_trial[1]
    assert.is_false(t.ok)
    assert.equal('EINTACT', t.error_code)
    assert.is_nil(t.figures)
    assert.is_false(t.checks.resumed_state_file.ok)
  end)
end)
