-- Differential conformance of the vercel adapter with @vercel/sandbox 3.5.0: the seed's lifecycle
-- runs once through the official SDK (spec/sdk/vercel.mjs, which must pass) and once through
-- lua/providers/vercel.lua against one recording fake (spec/fakes/vercel/fake.lua); every operation is
-- compared (spec/helpers/conformance.lua) and any difference not listed in ALLOW, with its reason,
-- fails. Writes the vercel section of docs/providers/CONFORMANCE.md.
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local cjson = require 'cjson'
local vercel = require 'providers.vercel'

local C = dofile(sys.root() .. '/spec/helpers/conformance.lua')
local vendor = dofile(sys.root() .. '/spec/helpers/vendor.lua')
local fake = dofile(sys.root() .. '/spec/fakes/init.lua').module('vercel')

local SDK_VERSION = cjson.decode((assert(require('cseng.fs').read(
  sys.root() .. '/spec/sdk/node_modules/@vercel/sandbox/package.json')))).version

-- The differences cseng keeps on purpose, each with its reason: none left on this lifecycle.
local ALLOW = {}

-- Bodies whose keys are data, not field names.
local OPTS = { maps = { 'tags', 'env' }, headers = { ['x-cwd'] = 'value' } }

--- The adapter's side of the lifecycle, step for step what spec/sdk/vercel.mjs does.
local function adapter_lifecycle(f)
  local client = vercel.connect(f.config())
  local labels = vendor.labeller('cseng@spec')('conformance-adapter', 'sdk-task')
  local sb = assert(vercel.create(client, { labels = labels, cpus = 2, ttl_seconds = 600 }))
  local r = assert(vercel.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]],
    { timeout = 30, env = { CSENG_TRIAL = '1' } }))
  assert.equal(0, r.code)
  assert.equal('arena-startup-ready-20261001\n', r.stdout)
  r = assert(vercel.exec(client, sb, 'echo to-stderr >&2; exit 3', { timeout = 30 }))
  assert.equal(3, r.code)
  assert.equal('to-stderr\n', r.stderr)
  assert(vercel.put(client, sb, '/tmp/cseng-adapter', vendor.tar_of({ ['file.bin'] = 'written by the adapter\n\0\255' }, 'tar')))
  assert.equal('written by the adapter\n\0\255', assert(vercel.get(client, sb, '/tmp/cseng-adapter/file.bin')))
  local none, _, code = vercel.get(client, sb, '/tmp/cseng-adapter/no-such-file')
  assert.is_nil(none)
  assert.equal('ENOENT', code)
  local found = assert(vercel.list(client, { labels = { ['cseng.run'] = 'conformance-adapter' } }))
  assert.equal(1, #found)
  local snap = assert(vercel.snapshot(client, sb, 'key'))
  assert.equal('created', assert(vercel.get_snapshot(client, snap)).status)
  local sb2 = assert(vercel.create(client, { labels = labels, warm_artifact = snap, ttl_seconds = 600 }))
  assert.equal('written by the adapter\n\0\255', assert(vercel.get(client, sb2, '/tmp/cseng-adapter/file.bin')))
  r = assert(vercel.exec(client, sb2, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 30 }))
  assert.equal(0, r.code)
  assert(vercel.destroy(client, sb2))
  assert(vercel.delete_snapshot(client, snap))
  assert.same({}, assert(vercel.list(client, { labels = { ['cseng.run'] = 'conformance-adapter' } })))
end

describe('vercel: @vercel/sandbox against the adapter (differential)', function()
  it('the SDK lifecycle passes on the fake, and the adapter sends what the SDK sends', function()
    local f = fake.start {}
    finally(f.close)
    f.record('sdk')
    local r = assert(proc.run { argv = { 'node', sys.root() .. '/spec/sdk/vercel.mjs' }, cwd = sys.root(), timeout = 300,
      env_add = { VERCEL_FAKE_URL = f.url, VERCEL_TOKEN = f.token, VERCEL_TEAM_ID = f.team_id,
                  VERCEL_PROJECT_ID = f.project_id, CSENG_RUN = 'conformance-sdk' } })
    local ok, seen = pcall(cjson.decode, r.stdout)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.is_true(ok and seen.ok, r.stdout)
    assert.equal('arena-startup-ready-20261001\n', seen.steps.exec.stdout)
    assert.equal(3, seen.steps.exit3.exitCode)
    f.record('adapter')
    adapter_lifecycle(f)
    f.record(false)
    assert.equal(0, f.stats().live)

    local sdk, ours = f.records('sdk'), f.records('adapter')
    assert.is_true(#sdk >= 12 and #ours >= 12)
    local diffs, rows, unused = C.compare(sdk, ours, ALLOW, OPTS)
    assert.same({}, diffs, C.describe(diffs))
    assert.same({}, unused, 'an allow-list entry matched nothing: drop it')
    -- the check can fail: the adapter's create with persistent renamed is reported
    local mutated = {}
    for i, rec in ipairs(ours) do
      mutated[i] = rec
      if rec.op == 'create' and rec.body and rec.body.persistent ~= nil then
        local b = {}
        for k, v in pairs(rec.body) do b[k] = v end
        b.persistant, b.persistent = b.persistent, nil
        mutated[i] = setmetatable({ body = b }, { __index = rec })
      end
    end
    local bad = C.compare(sdk, mutated, ALLOW, OPTS)
    assert.matches('body:persistant', C.describe(bad), 1, true)
    C.write_section('vercel', C.markdown({
      title = 'vercel',
      sdk = '@vercel/sandbox ' .. SDK_VERSION,
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
    }, rows))
  end)
end)
