-- The primitives every adapter declares (exec, upload, download, files) through the arena on the
-- cloud fakes that spec/run/workloads_spec.lua does not run (Runloop, Vercel, Lizard, Modal, AWS
-- Lambda MicroVMs), each through its adapter's own path (file APIs, base64 through exec, S3):
-- every sample answers, its bytes and files arrive intact (the workloads' own sha256 and
-- manifest checks) and every sandbox it made is destroyed. Clock-free: checks and counts only.
local util = require('cseng.lib.util')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local A = require('spec.helpers.arena')
local H = require('spec.helpers.common')
local fakes = require('spec.fakes')
teardown(H.remove_tempdirs)

local ROOT = sys.root()
local AGENT = ROOT .. '/build/microvm-agent/microvm-agent'

local FAKES = { runloop = 'runloop', vercel = 'vercel', lizard = 'lizard', modal = 'modal', aws = 'aws-microvm' }

describe('primitives on every other cloud fake', function()
  local started, config, env = {}, {}, {}
  setup(function()
    if not fs.exists(AGENT) then
      local r = assert(proc.run { argv = { 'make', '-C', ROOT, 'agent' }, timeout = 600 })
      assert(r.code == 0, 'make agent: ' .. r.stderr)
    end
    for name, adapter in pairs(FAKES) do
      local f = assert(fakes.start(adapter, adapter == 'aws-microvm' and { agent = AGENT } or {}))
      started[name] = f
      local cfg = util.merge(f.config(), { adapter = adapter })
      cfg.getenv = nil -- the run's env (below) carries what the adapters read from the environment
      config[name] = cfg
      if f.env then env = util.merge(env, f.env()) end
    end
  end)
  teardown(function() for _, f in pairs(started) do pcall(f.close) end end)

  local function run(workload, extra)
    local names = util.keys(FAKES)
    local status, by, errtext = A.run(util.merge({ providers = names, provider_config = config, env = env,
      samples = 1, warmups = 0, seed = 13, command = 'echo prim-fakes-ready', expect = 'prim-fakes-ready',
      workload = workload }, extra), 'prim-fakes-')
    assert.equal(0, status, errtext)
    assert.equal(#names, #by.startup_trial)
    local per = {}
    for _, t in ipairs(by.startup_trial) do
      local where = t.provider .. ' round ' .. t.round
      assert.is_true(t.ok, where .. ': ' .. tostring(t.error))
      assert.is_true(next(t.checks) ~= nil, where .. ' checked nothing')
      for name, c in pairs(t.checks) do assert.is_true(c.ok, where .. ': ' .. name) end
      for _, f in ipairs(by.run_started[1].figures) do assert.is_number(t.figures[f[1]], where .. ': ' .. f[1]) end
      per[t.provider] = (per[t.provider] or 0) + 1
    end
    for name in pairs(FAKES) do assert.equal(1, per[name], name) end
    A.assert_accounted(by, #by.allocated)
    return by
  end

  it('exec: every round trip answers with its own marker', function()
    local by = run('exec', { workload_options = { exec_count = 3 } })
    for _, t in ipairs(by.startup_trial) do assert.is_true(t.checks.answers_with_their_marker.ok, t.provider) end
  end)

  it('upload: the bytes inside equal the host\'s (sha256 and size)', function()
    run('upload', { sizes = { '64KiB', '1MiB' } })
  end)

  it('download: what arrives equals the sandbox\'s file', function()
    run('download', { sizes = { '64KiB', '1MiB' } })
  end)

  it('files: every file arrives, bulk and one by one (count and manifest)', function()
    local by = run('files', { workload_options = { files = 20, file_bytes = 4096 } })
    for _, t in ipairs(by.startup_trial) do assert.is_string(t.paths.files_bulk, t.provider) end
  end)

  it('snapshot (runloop: disk snapshots): the restored devbox holds the files written before; each is deleted', function()
    local before = started.runloop.stats().snapshots
    local status, by, errtext = A.run({ providers = { 'runloop' }, provider_config = config, env = env, samples = 2,
      warmups = 0, seed = 13, command = 'echo prim-fakes-ready', expect = 'prim-fakes-ready', workload = 'snapshot',
      sizes = { '64KiB', '1MiB' } }, 'prim-fakes-')
    assert.equal(0, status, errtext)
    for _, t in ipairs(by.startup_trial) do
      assert.is_true(t.ok, tostring(t.error))
      for _, n in ipairs({ '64KiB', '1MiB' }) do
        assert.is_true(t.checks['restore_' .. n .. '_state'].ok)
        assert.is_true(t.checks['restore_' .. n .. '_sha256'].ok)
      end
    end
    assert.equal(before + 4, started.runloop.stats().snapshots)
    A.assert_accounted(by, 2 * 3)
  end)
end)
