-- Daytona against its official SDK (@daytonaio/sdk, spec/sdk/package.json): the SDK's lifecycle
-- (spec/sdk/daytona.mjs) passes against the stateful fake (spec/fakes/daytona.lua), cseng's
-- adapter runs the same lifecycle against the same fake, and the two request logs agree per
-- operation up to the differences listed below with their reasons. Writes the daytona section of
-- docs/providers/CONFORMANCE.md.
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local crypto = require 'cseng.crypto'
local cjson = require 'cjson'
local daytona = require 'providers.daytona'

local ROOT = sys.root()
local C = dofile(ROOT .. '/spec/helpers/conformance.lua')
local fake = dofile(ROOT .. '/spec/fakes/daytona.lua')
local vendor = dofile(ROOT .. '/spec/helpers/vendor.lua')

local SDK_DIR = ROOT .. '/spec/sdk/node_modules/@daytonaio/sdk'

-- How records are compared: labels and environments hold data, not schema. X-Daytona-Source
-- names the client ("sdk-typescript-legacy" / "cseng"): only its presence is compared.
local OPTS = {
  maps = { 'labels', 'env', 'envs' },
  headers = { ['x-daytona-source'] = 'present', ['x-daytona-organization-id'] = 'present' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
}

local function sdk_missing()
  if not proc.which('node') then return 'node is not installed (make deps-test)' end
  if not fs.exists(SDK_DIR .. '/package.json') then
    return 'the Daytona SDK is not installed: make deps-test (npm ci --prefix spec/sdk)'
  end
  return nil
end

local function sdk_version()
  return cjson.decode((assert(fs.read(SDK_DIR .. '/package.json')))).version
end

describe('daytona against its official SDK', function()
  local f, why, run

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
    local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/daytona.mjs' }, cwd = ROOT, timeout = 300,
      env_add = { DAYTONA_API_URL = f.url, DAYTONA_API_KEY = f.api_key, CSENG_CONF_RUN = run, DAYTONA_TARGET = false,
                  DAYTONA_SERVER_URL = false, DAYTONA_JWT_TOKEN = false, DAYTONA_ORGANIZATION_ID = false } })
    f.record(false)
    assert.equal(0, r.code, 'spec/sdk/daytona.mjs failed:\n' .. r.stderr .. r.stdout)
    local out = cjson.decode(r.stdout)
    assert.same({ exitCode = 0, result = 'arena-startup-ready-20261001\n' }, out.exec)
    assert.same({ exitCode = 3, result = 'to-stderr\n' }, out.exit3)
    assert.equal('written by the daytona sdk\n', out.file.content)
    assert.same({ out.create.id }, out.list.ids)
    assert.equal('active', out.snapshot.state)
    assert.equal('prepared\n', out.warm.result)
    assert.equal(404, out.delete_again)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized)
    assert.equal(2, s.creates)
    assert.equal(1, s.snapshots)
  end)

  it('the adapter runs the same lifecycle against the same fake', function()
    if why then pending(why) return end
    local before = f.stats()
    local client = daytona.connect(f.config())
    local labels = { ['cseng.run'] = run .. '-a', ['cseng.launcher'] = 'cseng@conformance', ['cseng.task'] = 'task-a' }
    f.record('adapter')
    local sb = assert(daytona.create(client, { labels = labels, env = { GREETING = 'hello world' }, ttl_seconds = 900,
      network = false, workdir = '/workspace', cpus = 1, memory_mb = 1024, disk_mb = 3072 }))
    local r = assert(daytona.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 60 }))
    assert.same({ 0, 'arena-startup-ready-20261001\n' }, { r.code, r.stdout })
    r = assert(daytona.exec(client, sb, 'echo to-stderr >&2; exit 3', { timeout = 60 }))
    assert.same({ 3, 'to-stderr\n' }, { r.code, r.stdout }) -- combined, as the toolbox answers
    assert(daytona.put(client, sb, '/workspace', vendor.tar_of({ ['hello.txt'] = 'written by cseng\n' }, 'tar')))
    assert.equal('written by cseng\n', assert(daytona.get(client, sb, '/workspace/hello.txt')))
    local found = assert(daytona.list(client, { labels = { ['cseng.run'] = run .. '-a' } }))
    assert.same({ sb.id }, vendor.sorted_ids(found))
    assert.equal(0, assert(daytona.exec(client, sb, 'mkdir -p /workspace && echo prepared > /workspace/mark')).code)
    local snap = assert(daytona.snapshot(client, sb, 'conf-a-' .. run)) -- not the SDK's name: no reuse
    local warm = assert(daytona.create(client, { labels = labels, warm_artifact = snap, ttl_seconds = 900, network = false }))
    assert.equal('prepared\n', assert(daytona.exec(client, warm, 'cat /workspace/mark')).stdout)
    assert.is_true(daytona.destroy(client, sb))
    assert.is_true(daytona.destroy(client, warm))
    assert.is_true(daytona.destroy(client, sb)) -- 404: already gone
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
    C.write_section('daytona', C.markdown({
      title = 'Daytona',
      sdk = '@daytonaio/sdk ' .. sdk_version(),
      intro = 'SDK lifecycle: `spec/sdk/daytona.mjs` (DAYTONA_API_URL points the SDK at `spec/fakes/daytona.lua`; '
        .. 'toolbox calls follow the sandbox\'s `toolboxProxyUrl`; `useDeprecatedPolling`, so the SDK polls '
        .. '`GET /sandbox/{id}` as cseng does instead of its socket.io event stream); adapter lifecycle and comparison: '
        .. '`spec/conformance_daytona_spec.lua`. Compared headers: Authorization (Bearer), Content-Type, '
        .. 'X-Daytona-Source (presence), X-Daytona-Organization-ID (presence). Maps whose keys are data: labels, env, envs.',
    }, rows))
    assert.same({}, unused, 'allow-list entries that matched nothing (stale reasons)')
    assert.equal('', C.describe(diffs), 'differences with no reason in the allow-list')
    local ops = {}
    for _, row in ipairs(rows) do ops[row.op] = true end
    for _, op in ipairs({ 'create', 'create_from_snapshot', 'get', 'exec', 'upload', 'download', 'list', 'snapshot',
                          'snapshot_get', 'destroy' }) do
      assert.is_true(ops[op], op)
    end
  end)
end)
