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

-- adapter.multipart_parts reads the toolbox's bulk-download answers: checked against busboy (the
-- multipart reader the SDK itself uses, spec/sdk/node_modules/busboy) on random bodies written by
-- adapter.form and by the fake, and against malformed bodies.
describe('adapter.multipart_parts (the bulk-download reader)', function()
  local adapter = require 'providers.shared.adapter'
  local jsonl = require 'cseng.lib.jsonl'

  -- busboy over each {body, ct} of argv[1]: {parts = {{name, filename, data (base64)}}} or
  -- {error} per body, written to argv[2]
  local BUSBOY = [[
const Busboy = require('busboy'); const fs = require('fs')
const cases = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'))
;(async () => {
  const out = []
  for (const c of cases) {
    out.push(await new Promise((resolve) => {
      const parts = []
      let bb
      try { bb = Busboy({ headers: { 'content-type': c.ct }, preservePath: true }) } catch (e) { return resolve({ error: String(e) }) }
      bb.on('file', (name, stream, info) => {
        const chunks = [], part = { name, filename: info.filename }
        parts.push(part) // in stream order; the data arrives later
        stream.on('data', (d) => chunks.push(d))
        stream.on('end', () => { part.data = Buffer.concat(chunks).toString('base64') })
      })
      bb.on('field', (name, value) => parts.push({ name, data: Buffer.from(value).toString('base64') }))
      bb.on('close', () => resolve({ parts }))
      bb.on('error', (e) => resolve({ error: String(e) }))
      bb.end(Buffer.from(c.body, 'base64'))
    }))
  }
  fs.writeFileSync(process.argv[2], JSON.stringify(out))
})()
]]

  local function random_bytes(n)
    if n == 0 then return '' end
    local b = crypto.random_bytes(n)
    -- now and then a near-boundary line inside the data
    if n > 8 and b:byte(1) % 4 == 0 then b = b:sub(1, n // 2) .. '\r\n--cseng-' .. b:sub(n // 2 + 1) end
    return b
  end

  it('reads what busboy reads, byte for byte', function()
    if not proc.which('node') or not fs.exists(SDK_DIR .. '/../../busboy/package.json') then
      pending('node or busboy is not installed (make deps-test)')
      return
    end
    local cases, expect = {}, {}
    for i = 1, 60 do
      local parts = {}
      for j = 1, 1 + i % 3 do
        local size = ({ 0, 1, 17, 700, 70000 })[(i + j) % 5 + 1]
        parts[j] = { name = 'file', filename = '/tmp/dir ' .. i .. '/f"' .. j .. '\\x.bin', content_type = 'application/octet-stream',
                     data = random_bytes(size) }
        if j == 2 then parts[j] = { name = 'files[0].path', data = '/tmp/p' .. i } end
      end
      local body, ct = adapter.form(parts)
      cases[i] = { body = crypto.base64(body), ct = ct }
      expect[i] = parts
    end
    local tmp = assert(fs.tempdir('multipart-'))
    assert(fs.write(tmp .. '/cases.json', jsonl.encode(cases)))
    local r = assert(proc.run { argv = { 'node', '-e', BUSBOY, tmp .. '/cases.json', tmp .. '/out.json' },
                                cwd = ROOT .. '/spec/sdk', timeout = 120 })
    local text = fs.read(tmp .. '/out.json')
    fs.remove_tree(tmp)
    assert.equal(0, r.code, r.stderr)
    local theirs = cjson.decode(text)
    for i, c in ipairs(cases) do
      local mine = assert(adapter.multipart_parts(crypto.unbase64(c.body), c.ct))
      assert.equal(#expect[i], #mine)
      assert.is_table(theirs[i].parts, theirs[i].error)
      assert.equal(#mine, #theirs[i].parts)
      for j, p in ipairs(mine) do
        assert.equal(expect[i][j].data, p.data)
        assert.equal(expect[i][j].name, p.name)
        assert.equal(expect[i][j].filename, p.filename)
        assert.equal(theirs[i].parts[j].name, p.name)
        assert.equal(theirs[i].parts[j].filename, p.filename)
        assert.equal(theirs[i].parts[j].data, crypto.base64(p.data))
      end
    end
  end)

  it('reads the fake\'s answers (file and error parts) and refuses malformed bodies', function()
    local body = '--b\r\nContent-Disposition: form-data; name="file"; filename="/a"\r\nContent-Type: application/octet-stream\r\n\r\n'
      .. 'A\r\n--b\r\nContent-Disposition: form-data; name="error"; filename="/b"\r\nContent-Type: application/json\r\n\r\n'
      .. '{"statusCode":404}\r\n--b--\r\n'
    local parts = assert(adapter.multipart_parts('preamble\r\n' .. body .. 'epilogue', 'multipart/form-data; boundary="b"'))
    assert.same({ { 'file', '/a', 'A' }, { 'error', '/b', '{"statusCode":404}' } },
      { { parts[1].name, parts[1].filename, parts[1].data }, { parts[2].name, parts[2].filename, parts[2].data } })
    assert.equal('application/json', parts[2].headers['content-type'])
    local bad = {
      { body, 'application/json', 'not a multipart body' },
      { body, 'multipart/form-data', 'no usable boundary' },
      { body, 'multipart/form-data; boundary=c', 'no opening boundary' },
      { body:sub(1, 60), 'multipart/form-data; boundary=b', 'no end of headers' },
      { body:sub(1, 110), 'multipart/form-data; boundary=b', 'no closing boundary' },
      { '--bX\r\n\r\nx\r\n--b--', 'multipart/form-data; boundary=b', 'malformed boundary line' },
      { '--b\r\nno colon\r\n\r\nx\r\n--b--', 'multipart/form-data; boundary=b', 'malformed header line' },
    }
    for _, c in ipairs(bad) do
      local p, why = adapter.multipart_parts(c[1], c[2])
      assert.is_nil(p, c[3])
      assert.truthy(tostring(why):find(c[3], 1, true), tostring(why))
    end
    -- every prefix of a valid body is an error, never a crash or a wrong success
    for cut = 0, #body - 3 do
      assert.is_nil((adapter.multipart_parts(body:sub(1, cut), 'multipart/form-data; boundary=b')), cut)
    end
  end)
end)
