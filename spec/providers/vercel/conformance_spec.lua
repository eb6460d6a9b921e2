-- Differential conformance of the vercel adapter with @vercel/sandbox 3.5.0: the seed's lifecycle
-- runs once through the official SDK (spec/sdk/vercel.mjs, which must pass) and once through
-- lua/providers/vercel.lua against one recording fake (spec/providers/vercel/fake.lua); every operation is
-- compared (spec/helpers/conformance.lua) and any difference not listed in ALLOW, with its reason,
-- fails. Writes the vercel section of docs/providers/CONFORMANCE.md under `make conformance` (else of a temporary copy).
local vercel = require('providers.vercel')
local vercel_wire = require('providers.shared.vercel_wire')

local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('vercel')

-- The differences cseng keeps on purpose, each with its reason: none left on this lifecycle.
local ALLOW = {}

-- Bodies whose keys are data, not field names.
local OPTS = { maps = { 'tags', 'env' }, headers = { ['x-cwd'] = 'value' } }

--- The adapter's side of the lifecycle, step for step what spec/sdk/vercel.mjs does.
local function adapter_lifecycle(f)
  local client = vercel.connect(f.config())
  local labels = vendor.labeller('cseng@spec')('conformance-adapter', 'sdk-task')
  local sb = C.lifecycle(vercel, client, { spec = { labels = labels, cpus = 2, ttl_seconds = 600 },
    exec = { timeout = 30, env = { CSENG_TRIAL = '1' } }, put_dir = '/tmp/cseng-adapter', file = 'file.bin',
    data = 'written by the adapter\n\0\255', missing = true, list_labels = { ['cseng.run'] = 'conformance-adapter' } })
  local r
  local snap = assert(vercel.snapshot(client, sb, 'key'))
  assert.equal('created', assert(vercel_wire.get_snapshot(client, snap)).status)
  local sb2 = assert(vercel.create(client, { labels = labels, warm_artifact = snap, ttl_seconds = 600 }))
  assert.equal('written by the adapter\n\0\255', assert(vercel.get(client, sb2, '/tmp/cseng-adapter/file.bin')))
  r = assert(vercel.exec(client, sb2, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 30 }))
  assert.equal(0, r.code)
  assert(vercel.destroy(client, sb2))
  assert(vercel.delete_artifact(client, snap))
  assert.same({}, assert(vercel.list(client, { labels = { ['cseng.run'] = 'conformance-adapter' } })))
end

describe('vercel: @vercel/sandbox against the adapter (differential)', function()
  it('the SDK lifecycle passes on the fake, and the adapter sends what the SDK sends', function()
    local why = C.sdk_missing('@vercel/sandbox')
    if why then pending(why) return end
    local f = fake.start {}
    finally(f.close)
    local seen = C.run_sdk('vercel.mjs', { VERCEL_FAKE_URL = f.url, VERCEL_TOKEN = f.token, VERCEL_TEAM_ID = f.team_id,
      VERCEL_PROJECT_ID = f.project_id, CSENG_RUN = 'conformance-sdk' }, { fake = f })
    assert.is_true(seen.ok)
    assert.equal('arena-startup-ready-20261001\n', seen.steps.exec.stdout)
    assert.equal(3, seen.steps.exit3.exitCode)
    f.record('adapter')
    adapter_lifecycle(f)
    f.record(false)
    assert.equal(0, f.stats().live)

    local sdk, ours = f.records('sdk'), f.records('adapter')
    assert.is_true(#sdk >= 12 and #ours >= 12)
    -- the check can fail: the adapter's create with persistent renamed is reported
    local bad = C.compare(sdk, C.renamed(ours, 'create', 'persistent', 'persistant'), ALLOW, OPTS)
    assert.matches('body:persistant', C.describe(bad), 1, true)
    C.verdict('vercel', {
      title = 'vercel',
      sdk = '@vercel/sandbox ' .. C.sdk_version('@vercel/sandbox'),
      intro = 'The lifecycle of `spec/sdk/vercel.mjs` (the SDK, pointed at the fake through its `fetch` option, ' ..
        'which rewrites `https://vercel.com/api` to the fake\'s URL) and the same steps through ' ..
        '`lua/providers/vercel.lua`: create with tags (`/v2/sandboxes` with a runtime, `/v3/sandboxes` from a ' ..
        'snapshot), the arena\'s python3 command, a command exiting 3, a file written and read back (and a missing ' ..
        'one), list by tag, snapshot, get it, create from it, stop, delete the snapshot.',
      notes = 'Not compared: the user agent (`vercel/sandbox/3.5.0 (Node.js/...)` against curl\'s), `Accept` ' ..
        '(the adapter asks for JSON or NDJSON explicitly; the SDK sends none), and the tar inside `fs/write` ' ..
        '(both gzip a tar of paths relative to `x-cwd: /`; the adapter writes one archive file and extracts it ' ..
        'with a command, so a symlink the sandbox planted is never followed by the upload). The adapter also ' ..
        'wraps each command in `timeout -s KILL` and sends the body `timeout` 30 s later as a backstop; ' ..
        'the SDK sends `timeout` when given `timeoutMs`, as the lifecycle does.',
    }, sdk, ours, { allow = ALLOW, opts = OPTS })
  end)
end)
