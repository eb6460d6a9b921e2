-- E2B against its official SDK (e2b, spec/sdk/package.json): the SDK's lifecycle
-- (spec/sdk/e2b.mjs) passes against the stateful fake (spec/fakes/e2b.lua), cseng's adapter runs
-- the same lifecycle against the same fake, and the two request logs agree per operation up to the
-- differences listed below with their reasons. Writes the e2b section of docs/providers/CONFORMANCE.md.
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local e2b = require 'providers.e2b'

local ROOT = sys.root()
local C = dofile(ROOT .. '/spec/helpers/conformance.lua')
local fake = dofile(ROOT .. '/spec/fakes/e2b.lua')
local vendor = dofile(ROOT .. '/spec/helpers/vendor.lua')

local SDK_DIR = ROOT .. '/spec/sdk/node_modules/e2b'

-- How records are compared: label, metadata and environment maps hold data, not schema; the
-- envd headers that select the sandbox, the user and the stream's deadline matter.
local OPTS = {
  maps = { 'metadata', 'envVars', 'process.envs' },
  headers = { ['e2b-sandbox-id'] = 'present', ['connect-timeout-ms'] = 'present', ['keepalive-ping-interval'] = 'value' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
}

local function sdk_missing()
  if not proc.which('node') then return 'node is not installed (make deps-test)' end
  if not fs.exists(SDK_DIR .. '/package.json') then return 'the e2b SDK is not installed: make deps-test (npm ci --prefix spec/sdk)' end
  return nil
end

local function sdk_version()
  return cjson.decode((assert(fs.read(SDK_DIR .. '/package.json')))).version
end

describe('e2b against its official SDK', function()
  local f, why, run, sdk_out
  local client

  setup(function()
    why = sdk_missing()
    if why then return end
    f = fake.start {}
    run = 'conf-' .. crypto.hex(crypto.random_bytes(4))
  end)

  teardown(function()
    if f then f.close() end
  end)

  it('the SDK runs the lifecycle against the fake and gets the right answers', function()
    if why then pending(why) return end
    f.record('sdk')
    local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/e2b.mjs' }, cwd = ROOT, timeout = 300,
      env_add = { E2B_API_URL = f.url, E2B_SANDBOX_URL = f.envd_url, E2B_API_KEY = f.api_key, CSENG_CONF_RUN = run,
                  E2B_DEBUG = false, E2B_DOMAIN = false } })
    f.record(false)
    assert.equal(0, r.code, 'spec/sdk/e2b.mjs failed:\n' .. r.stderr .. r.stdout)
    sdk_out = cjson.decode(r.stdout)
    assert.same({ exitCode = 0, stdout = 'arena-startup-ready-20261001\n' }, sdk_out.exec)
    assert.same({ exitCode = 3, stderr = 'to-stderr\n' }, sdk_out.exit3)
    assert.equal('written by the e2b sdk\n', sdk_out.file.content)
    assert.same({ sdk_out.create.sandboxId }, sdk_out.list.ids)
    assert.equal('prepared\n', sdk_out.warm.stdout)
    assert.same({ true, true }, sdk_out.destroy)
    assert.is_false(sdk_out.destroy_again)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    assert.equal(2, s.creates)
    assert.equal(1, s.snapshots)
  end)

  it('the adapter runs the same lifecycle against the same fake', function()
    if why then pending(why) return end
    local before = f.stats()
    client = e2b.connect(f.config())
    local labels = { ['cseng.run'] = run .. '-a', ['cseng.launcher'] = 'cseng@conformance', ['cseng.task'] = 'task-a' }
    f.record('adapter')
    local sb = assert(e2b.create(client, { labels = labels, env = { GREETING = 'hello world' }, ttl_seconds = 900,
                                           network = false, workdir = '/workspace' }))
    local r = assert(e2b.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 60 }))
    assert.same({ 0, 'arena-startup-ready-20261001\n' }, { r.code, r.stdout })
    r = assert(e2b.exec(client, sb, 'echo to-stderr >&2; exit 3', { timeout = 60 }))
    assert.same({ 3, 'to-stderr\n' }, { r.code, r.stderr })
    assert(e2b.put(client, sb, '/workspace', vendor.tar_of({ ['hello.txt'] = 'written by cseng\n' }, 'tar')))
    assert.equal('written by cseng\n', assert(e2b.get(client, sb, '/workspace/hello.txt')))
    local found = assert(e2b.list(client, { labels = { ['cseng.run'] = run .. '-a' } }))
    assert.same({ sb.id }, vendor.sorted_ids(found))
    assert.equal(0, assert(e2b.exec(client, sb, 'mkdir -p /workspace && echo prepared > /workspace/mark')).code)
    local snap = assert(e2b.snapshot(client, sb, 'conf-a-' .. run)) -- not the SDK's name: no reuse
    local warm = assert(e2b.create(client, { labels = labels, warm_artifact = snap, ttl_seconds = 900, network = false }))
    assert.equal('prepared\n', assert(e2b.exec(client, warm, 'cat /workspace/mark')).stdout)
    assert.is_true(e2b.destroy(client, sb))
    assert.is_true(e2b.destroy(client, warm))
    assert.is_true(e2b.destroy(client, sb)) -- 404: already gone
    f.record(false)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(before.creates + 2, s.creates)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
  end)

  it('sends what the SDK sends, operation by operation, up to the listed differences', function()
    if why then pending(why) return end
    local sdk, ad = f.records('sdk'), f.records('adapter')
    assert.is_true(#sdk > 0 and #ad > 0, 'both lifecycles ran')
    local diffs, rows, unused = C.compare(sdk, ad, ALLOW, OPTS)
    C.write_section('e2b', C.markdown({
      title = 'E2B',
      sdk = 'e2b ' .. sdk_version(),
      intro = 'SDK lifecycle: `spec/sdk/e2b.mjs` (E2B_API_URL and E2B_SANDBOX_URL point the SDK at `spec/fakes/e2b.lua`); '
        .. 'adapter lifecycle and comparison: `spec/conformance_e2b_spec.lua`. Compared headers: X-API-Key, Authorization '
        .. '(envd Basic user), X-Access-Token, E2b-Sandbox-Id, Content-Type, Connect-Protocol-Version, '
        .. 'Connect-Timeout-Ms, Keepalive-Ping-Interval. Maps whose keys are data: metadata, envVars, process.envs.',
    }, rows))
    assert.same({}, unused, 'allow-list entries that matched nothing (stale reasons)')
    assert.equal('', C.describe(diffs), 'differences with no reason in the allow-list')
    -- every operation of the lifecycle was compared
    local ops = {}
    for _, row in ipairs(rows) do ops[row.op] = true end
    for _, op in ipairs({ 'create', 'create_from_snapshot', 'exec', 'upload', 'download', 'list', 'snapshot',
                          'snapshot_lookup', 'destroy' }) do
      assert.is_true(ops[op], op)
    end
  end)
end)
