-- Daytona against its official SDK (@daytonaio/sdk, spec/sdk/package.json): the SDK's lifecycle
-- (spec/sdk/daytona.mjs) passes against the stateful fake (spec/providers/daytona/fake.lua), cseng's
-- adapter runs the same lifecycle against the same fake, and the two request logs agree per
-- operation up to the differences listed below with their reasons. Both lifecycles include a
-- native build of a task's Dockerfile (the SDK: Image.fromDockerfile + snapshot.create; the
-- adapter: daytona.build with the task's recipe), so push-access, the S3 calls and POST /snapshots
-- are compared too. Writes the daytona section of docs/providers/CONFORMANCE.md under `make conformance` (else of a temporary copy).
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local daytona = require('providers.daytona')
local daytona_build = require('providers.shared.daytona_build')
local dataset = require('cseng.workload.dataset')
local recipe = require('cseng.workload.recipe')

local ROOT = sys.root()
local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local fake = require('spec.fakes').module('daytona')

-- How records are compared: labels and environments hold data, not schema. X-Daytona-Source
-- names the client ("sdk-typescript" / "cseng"): only its presence is compared. On the S3 calls
-- the SigV4 headers must be there on both sides, and the flexible-checksum algorithm is compared
-- by value.
local OPTS = {
  maps = { 'labels', 'env', 'envs' },
  headers = { ['x-daytona-source'] = 'present', ['x-daytona-organization-id'] = 'present',
              ['x-amz-date'] = 'present', ['x-amz-content-sha256'] = 'present', ['x-amz-security-token'] = 'present',
              ['x-amz-sdk-checksum-algorithm'] = 'value' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
  { op = 's3_put', what = 'header:x-amz-sdk-checksum-algorithm',
    reason = 'the AWS SDK for JavaScript adds a CRC32 flexible checksum (x-amz-sdk-checksum-algorithm, '
      .. 'x-amz-checksum-crc32) to every PutObject by default; S3 treats it as optional, and the adapter\'s '
      .. 'signed x-amz-content-sha256 (the body\'s SHA-256, checked by the storage) already guards the upload' },
}

-- The task both sides build: a Dockerfile with ARG, ENV, RUN as another USER, WORKDIR and a COPY
-- of a file and of a directory. who goes into one context file, so the two contexts differ and
-- each side uploads its own (an upload the other side made is skipped by design).
local DOCKERFILE = table.concat({
  'FROM debian:bookworm-slim',
  'ARG GREETING=built-by-daytona',
  'ENV CSENG_BUILT=1',
  'RUN useradd --create-home --shell /bin/bash builder',
  'USER builder',
  'WORKDIR /home/builder',
  'RUN echo "$GREETING as $(id -un) in $(pwd)" > marker',
  'USER root',
  'WORKDIR /workspace',
  'COPY hello.txt /workspace/hello.txt',
  'COPY data/ /workspace/data/',
  'RUN cat data/a.txt data/sub/b.txt > joined',
  '',
}, '\n')

local function write_task(dir, who)
  local files = {
    ['task.toml'] = 'version = "1.0"\n\n[environment]\ncpus = 1\nmemory_mb = 1024\nallow_internet = false\n',
    ['instruction.md'] = 'Nothing to do: the environment is what is checked.\n',
    ['tests/test.sh'] = '#!/bin/sh\nexit 0\n',
    ['environment/Dockerfile'] = DOCKERFILE,
    ['environment/hello.txt'] = 'copied file\n',
    ['environment/data/a.txt'] = 'dir file a\n',
    ['environment/data/sub/b.txt'] = 'dir file b of ' .. who .. '\n',
  }
  for rel, data in pairs(files) do
    local parent = rel:match('^(.*)/[^/]*$')
    assert(fs.mkdir_p(parent and (dir .. '/' .. parent) or dir))
    assert(fs.write(dir .. '/' .. rel, data))
  end
  return dir
end

-- What the built sandbox shows: the COPY files, then the RUN steps' files and the image's ENV.
local COPIED = 'copied file\ndir file a\ndir file b of %s\n'
local RAN = 'built-by-daytona as builder in /home/builder\ndir file a\ndir file b of %s\n1\n'

describe('daytona against its official SDK', function()
  local f, why, run, tmp

  setup(function()
    why = C.sdk_missing('@daytonaio/sdk')
    if why then return end
    f = fake.start {}
    run = 'conf-' .. crypto.hex(crypto.random_bytes(4))
    tmp = assert(fs.tempdir('cseng-conf-daytona-'))
    write_task(tmp .. '/task-sdk', 'sdk')
    write_task(tmp .. '/task-adapter', 'adapter')
  end)

  teardown(function()
    if f then f.close() end
    if tmp then fs.remove_tree(tmp) end
  end)

  it('the SDK runs the lifecycle against the fake and gets the right answers', function()
    if why then pending(why) return end
    local out = C.run_sdk('daytona.mjs', { DAYTONA_API_URL = f.url, DAYTONA_API_KEY = f.api_key, CSENG_CONF_RUN = run,
      CSENG_CONF_BUILD_DIR = tmp .. '/task-sdk/environment', DAYTONA_TARGET = false, DAYTONA_SERVER_URL = false,
      DAYTONA_JWT_TOKEN = false, DAYTONA_ORGANIZATION_ID = false }, { fake = f })
    assert.same({ exitCode = 0, result = 'arena-startup-ready-20261001\n' }, out.exec)
    assert.same({ exitCode = 3, result = 'to-stderr\n' }, out.exit3)
    assert.equal('written by the daytona sdk\n', out.file.content)
    assert.same({ out.create.id }, out.list.ids)
    assert.equal('active', out.snapshot.state)
    assert.equal('prepared\n', out.warm.result)
    assert.equal(404, out.delete_again)
    assert.same({ 'hello.txt', 'data/' }, out.build.contexts)
    assert.equal('active', out.build.state)
    assert.equal(RAN:format('sdk'), out.build.ran)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized + s.s3_refused)
    assert.equal(3, s.creates)
    assert.equal(1, s.snapshots)
    assert.same({ 1, 2, 2, 1 }, { s.builds, s.s3_lists, s.s3_puts, s.push_access })
    assert.equal(DOCKERFILE, s.build_bodies[1].buildInfo.dockerfileContent)
    assert.same({ 'data/a.txt', 'data/sub/b.txt', 'hello.txt' }, s.build_contexts[out.build.name])
  end)

  it('the adapter runs the same lifecycle against the same fake', function()
    if why then pending(why) return end
    local before = f.stats()
    local client = daytona.connect(f.config())
    local labels = { ['cseng.run'] = run .. '-a', ['cseng.launcher'] = 'cseng@conformance', ['cseng.task'] = 'task-a' }
    f.record('adapter')
    local sb = C.lifecycle(daytona, client, { spec = { labels = labels, env = { GREETING = 'hello world' }, ttl_seconds = 900,
      network = false, workdir = '/workspace', cpus = 1, memory_mb = 1024, disk_mb = 3072 },
      exit3_stream = 'stdout', -- combined, as the toolbox answers
      put_dir = '/workspace', file = 'hello.txt', data = 'written by cseng\n', list_labels = { ['cseng.run'] = run .. '-a' } })
    local r
    -- the snapshot is not named as the SDK's: no reuse
    local warm = C.warm(daytona, client, sb, 'conf-a-' .. run, { spec = { labels = labels, ttl_seconds = 900, network = false } })
    -- the task's environment, built natively from its recipe, then a sandbox from the snapshot
    local rcp = recipe.of_task(dataset.load(tmp .. '/task-adapter')[1])
    local b = assert(daytona.build(client, { recipe = rcp }))
    assert.same({ daytona_build.name(client, rcp), false }, { b.layer, b.cache_hit })
    local built = assert(daytona.create(client, { labels = labels, image = b.image, layer = b.layer, ttl_seconds = 900,
      network = false, workdir = rcp.workdir }))
    r = assert(daytona.exec(client, built, 'cat /workspace/hello.txt /workspace/data/a.txt /workspace/data/sub/b.txt'))
    assert.same({ 0, COPIED:format('adapter') }, { r.code, r.stdout })
    r = assert(daytona.exec(client, built, 'cat /home/builder/marker /workspace/joined; echo "$CSENG_BUILT"'))
    assert.same({ 0, RAN:format('adapter') }, { r.code, r.stdout })
    C.destroy_all(daytona, client, { sb, warm, built })
    f.record(false)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(before.creates + 3, s.creates)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized + s.s3_refused)
    assert.same({ before.builds + 1, before.s3_puts + 2, before.push_access + 1 }, { s.builds, s.s3_puts, s.push_access })
    assert.equal(DOCKERFILE, s.build_bodies[#s.build_bodies].buildInfo.dockerfileContent)
    assert.same({ 'data/a.txt', 'data/sub/b.txt', 'hello.txt' }, s.build_contexts[b.layer])
  end)

  it('sends what the SDK sends, operation by operation, up to the listed differences', function()
    if why then pending(why) return end
    C.verdict('daytona', {
      title = 'Daytona',
      sdk = '@daytonaio/sdk ' .. C.sdk_version('@daytonaio/sdk'),
      intro = 'SDK lifecycle: `spec/sdk/daytona.mjs` (DAYTONA_API_URL points the SDK at `spec/providers/daytona/fake.lua`; '
        .. 'toolbox calls follow the sandbox\'s `toolboxProxyUrl`; `useDeprecatedPolling`, so the SDK polls '
        .. '`GET /sandbox/{id}` as cseng does instead of its socket.io event stream); adapter lifecycle and comparison: '
        .. '`spec/providers/daytona/conformance_spec.lua`. Both build the same task natively (the SDK: `Image.fromDockerfile` + '
        .. '`snapshot.create`; the adapter: `build` with the task\'s recipe), so push-access, the S3 calls and '
        .. '`POST /snapshots` are compared. Compared headers: Authorization (Bearer, or the SigV4 scheme on S3), '
        .. 'Content-Type, X-Daytona-Source (presence), X-Daytona-Organization-ID (presence), X-Amz-Date, '
        .. 'X-Amz-Content-Sha256, X-Amz-Security-Token (presence), X-Amz-Sdk-Checksum-Algorithm (value). '
        .. 'Maps whose keys are data: labels, env, envs.',
    }, f.records('sdk'), f.records('adapter'), { allow = ALLOW, opts = OPTS,
      ops = { 'create', 'create_from_snapshot', 'get', 'exec', 'upload', 'download', 'list', 'snapshot', 'snapshot_get',
              'destroy', 'push_access', 's3_list', 's3_put', 'snapshot_create' } })
  end)
end)

-- The fake's object storage checks what the SDK's PutObject adds: its CRC32 flexible checksum.
describe('the fake\'s object storage (the build contexts)', function()
  local http = require('cseng.http')
  local sigv4 = require('cseng.lib.aws.sigv4')

  it('stores a PUT whose x-amz-checksum-crc32 matches the body, refuses one that does not (BadDigest)', function()
    local f = fake.start {}
    local creds = assert(require('providers.shared.adapter').request('daytona', 'GET', f.url .. '/object-storage/push-access',
      { headers = { Authorization = 'Bearer ' .. f.config().api_key } }))
    local function put(key, crc)
      local url = creds.storageUrl .. '/' .. creds.bucket .. '/' .. creds.organizationId .. '/' .. key .. '/context.tar'
      local h = { ['x-amz-checksum-crc32'] = crc, ['x-amz-sdk-checksum-algorithm'] = 'CRC32' }
      local add = sigv4.sign { method = 'PUT', url = url, headers = h, body = 'tar bytes', region = creds.region, service = 's3',
        access_key_id = creds.accessKey, secret_access_key = creds.secret, session_token = creds.sessionToken }
      for k, v in pairs(add) do h[k] = v end
      return assert(http.request { method = 'PUT', url = url, headers = h, body = 'tar bytes' })
    end
    local good, bad = put('good', fake.crc32_b64('tar bytes')), put('bad', fake.crc32_b64('other bytes'))
    local s = f.stats()
    f.close()
    assert.equal(200, good.status, good.body)
    assert.equal(400, bad.status)
    assert.matches('<Code>BadDigest</Code>', bad.body)
    assert.same({ 2, 1 }, { s.s3_puts, s.s3_refused })
  end)
end)

-- adapter.multipart_parts reads the toolbox's bulk-download answers: checked against busboy (the
-- multipart reader the SDK itself uses, spec/sdk/node_modules/busboy) on random bodies written by
-- adapter.form and by the fake, and against malformed bodies.
describe('adapter.multipart_parts (the bulk-download reader)', function()
  local adapter = require('providers.shared.adapter')
  local jsonl = require('cseng.lib.jsonl')

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
    local missing = C.sdk_missing('busboy')
    if missing then pending(missing) return end
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
