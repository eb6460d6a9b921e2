-- The arena's primitives on the docker provider, against the real dockerd: exec, upload, download
-- and files arrive intact;
-- a restored snapshot (docker commit, then a container from that image) holds the files written
-- before it and its image is removed after; a paused container (dockerd's freezer) keeps its
-- files and a process it was running. Clock-free: contents, process state, dockerd's own image
-- list. Pending (with the reason) where dockerd or the base image is absent.
local cjson = require('cjson')
local docker = require('providers.docker')
local docker_build = require('providers.shared.docker_build')
local A = require('spec.helpers.arena')
local H = require('spec.helpers.common')

local BASE = 'cseng/debian:bookworm'

local connected
local function client_or_pending()
  local why = H.docker_missing(BASE) -- (asked once per spec process)
  if why then pending(why); return end
  connected = connected or docker.connect({})
  return connected
end

local function arena(workload, extra)
  local opts = { providers = { 'docker' }, samples = extra and extra.samples or 2, warmups = 0, seed = 11,
    command = 'echo docker-prim-ready', expect = 'docker-prim-ready', workload = workload,
    provider_config = { docker = { sandbox = { image = BASE } } } }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return A.run(opts, 'docker-prim-')
end

local function assert_samples_clean(status, by, samples)
  assert.equal(0, status)
  assert.equal(samples or 2, #by.startup_trial)
  for _, t in ipairs(by.startup_trial) do
    assert.is_true(t.ok, tostring(t.error))
    for name, c in pairs(t.checks) do assert.is_true(c.ok, name .. ': ' .. cjson.encode(c)) end
  end
  A.assert_accounted(by, #by.allocated)
end

describe('docker: snapshot and pause through the arena', function()
  it('snapshot: the restored container holds the files written before; every snapshot image is removed', function()
    local client = client_or_pending()
    local status, by = arena('snapshot', { sizes = { '64KiB', '1MiB' } })
    assert_samples_clean(status, by)
    for _, t in ipairs(by.startup_trial) do
      for _, n in ipairs({ '64KiB', '1MiB' }) do
        assert.is_true(t.checks['restore_' .. n .. '_state'].ok)
        assert.equal(t.checks['restore_' .. n .. '_sha256'].want, t.checks['restore_' .. n .. '_sha256'].got)
      end
      assert.equal(2, #t.sandboxes)
    end
    assert.equal(2 * 3, #by.allocated) -- each sample: its own container and one restore per size
    -- this run's snapshot images carry its sandboxes' labels (other specs make warm images of their
    -- own meanwhile): none is left
    local run_id = by.run_started[1].run_id
    assert.is_string(run_id)
    for _, im in ipairs(assert(docker_build.list_images(client))) do
      assert.is_false(im.labels['cseng.kind'] == 'warm' and im.labels['cseng.run'] == run_id,
        'a snapshot image of this run was left: ' .. im.id)
    end
  end)

  it('pause -> unpause keeps the files and a running process', function()
    client_or_pending()
    local status, by = arena('pause')
    assert_samples_clean(status, by)
    for _, t in ipairs(by.startup_trial) do
      assert.same({ ok = true, want = 'alive', got = 'alive' }, t.checks.resumed_process_alive)
      assert.matches('pause_memory', t.paths.pause, 1, true)
    end
  end)

  it('exec, upload, download and files: every answer, byte and file intact', function()
    client_or_pending()
    for _, w in ipairs({ 'exec', 'upload', 'download', 'files' }) do
      local status, by = arena(w, { samples = 1, sizes = { '64KiB', '1MiB' }, workload_options = { files = 20, exec_count = 3 } })
      assert_samples_clean(status, by, 1)
      for _, t in ipairs(by.startup_trial) do assert.is_true(next(t.checks) ~= nil, w .. ' checked nothing') end
    end
  end)

  it('delete_artifact refuses what is not an image id (an id read from a prewarm file)', function()
    local client = client_or_pending()
    local ok, err, code = docker.delete_artifact(client, '../containers/x')
    assert.is_nil(ok)
    assert.equal('EUNSAFE', code)
    assert.matches('not an image id', err, 1, true)
  end)
end)
