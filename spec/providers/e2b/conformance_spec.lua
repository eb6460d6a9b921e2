-- E2B against its official SDK (e2b, spec/sdk/package.json): the SDK's lifecycle
-- (spec/sdk/e2b.mjs) passes against the stateful fake (spec/providers/e2b/fake.lua), cseng's adapter runs
-- the same lifecycle against the same fake, and the two request logs agree per operation up to the
-- differences listed below with their reasons. Writes the e2b section of docs/providers/CONFORMANCE.md under `make conformance` (else of a temporary copy).
-- The lifecycle includes a native build of one Dockerfile (BUILD below, in a task directory per
-- side): the SDK's Template().fromDockerfile + Template.build, the adapter's e2b.build of the task's
-- recipe (cseng.workload.recipe), each followed by a sandbox from the template that shows the RUN step
-- ran and the COPY files arrived.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local e2b = require('providers.e2b')
local e2b_build = require('providers.shared.e2b_build')
local dataset = require('cseng.workload.dataset')
local recipe = require('cseng.workload.recipe')

local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local fake = require('spec.fakes').module('e2b')

-- How records are compared: label, metadata and environment maps hold data, not schema; the
-- envd headers that select the sandbox, the user and the stream's deadline matter, and so does
-- the header a template files upload link asks for (the fake's X-Cseng-Fake-Upload).
local OPTS = {
  maps = { 'metadata', 'envVars', 'process.envs' },
  headers = { ['e2b-sandbox-id'] = 'present', ['connect-timeout-ms'] = 'present', ['keepalive-ping-interval'] = 'value',
              ['x-cseng-fake-upload'] = 'present' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
}

-- The build both sides make: ARG, ENV, WORKDIR, a file and a directory COPY (an executable in a
-- subdirectory, a symlink), a RUN that reads the copied files. notes.txt differs per side (so
-- each side uploads it: the fake's file cache is per team, as E2B's), conf/ is the same (the
-- adapter finds it cached under the SDK's files hash).
local BUILD = {
  dockerfile = table.concat({
    'FROM debian:bookworm-slim',
    'ARG LEVEL=3',
    'ENV GREETING=hello-build',
    'WORKDIR /opt/app',
    'COPY notes.txt /opt/app/notes.txt',
    'COPY conf/ /opt/app/conf/',
    'RUN echo "built at level $LEVEL: $GREETING" > /opt/app/built.txt && cat /opt/app/conf/app.ini >> /opt/app/built.txt',
    'USER root',
  }, '\n') .. '\n',
  app_ini = '[app]\nport=8125\n',
  check = 'cat /opt/app/built.txt /opt/app/notes.txt && stat -c %a /opt/app/conf/bin/run.sh && readlink /opt/app/conf/current.ini '
    .. '&& echo "greeting=$GREETING"',
}

-- A task directory holding BUILD (task.toml, instruction, tests, environment/); notes: notes.txt.
local function build_task(dir, notes)
  local env = dir .. '/environment'
  assert(fs.mkdir_p(env .. '/conf/bin'))
  assert(fs.mkdir_p(dir .. '/tests'))
  assert(fs.write(dir .. '/task.toml', 'version = "1.0"\n'))
  assert(fs.write(dir .. '/instruction.md', 'Nothing to do: the environment is what is checked.\n'))
  assert(fs.write(dir .. '/tests/test.sh', '#!/bin/sh\nexit 0\n', { mode = tonumber('755', 8) }))
  assert(fs.write(env .. '/Dockerfile', BUILD.dockerfile))
  assert(fs.write(env .. '/notes.txt', notes))
  assert(fs.write(env .. '/conf/app.ini', BUILD.app_ini))
  assert(fs.write(env .. '/conf/bin/run.sh', '#!/bin/sh\necho run\n', { mode = tonumber('755', 8) }))
  assert(fs.symlink('app.ini', env .. '/conf/current.ini'))
  return dir
end

-- What BUILD.check prints in a sandbox of the template built with notes.
local function build_output(notes)
  return 'built at level 3: hello-build\n' .. BUILD.app_ini .. notes .. '755\napp.ini\ngreeting=hello-build\n'
end

describe('e2b against its official SDK', function()
  local f, why, run, sdk_out, tmp
  local client
  local SDK_NOTES, ADAPTER_NOTES = 'notes of the sdk build\n', 'notes of the adapter build\n'

  setup(function()
    why = C.sdk_missing('e2b')
    if why then return end
    f = fake.start {}
    run = 'conf-' .. crypto.hex(crypto.random_bytes(4))
    tmp = assert(fs.tempdir('cseng-conf-e2b-'))
    build_task(tmp .. '/sdk-task', SDK_NOTES)
    build_task(tmp .. '/adapter-task', ADAPTER_NOTES)
  end)

  teardown(function()
    if f then f.close() end
    if tmp then fs.remove_tree(tmp) end
  end)

  it('the SDK runs the lifecycle against the fake and gets the right answers', function()
    if why then pending(why) return end
    sdk_out = C.run_sdk('e2b.mjs', { E2B_API_URL = f.url, E2B_SANDBOX_URL = f.envd_url, E2B_API_KEY = f.api_key,
      CSENG_CONF_RUN = run, CSENG_CONF_BUILD_CONTEXT = tmp .. '/sdk-task/environment', CSENG_CONF_BUILD_CHECK = BUILD.check,
      E2B_DEBUG = false, E2B_DOMAIN = false }, { fake = f })
    assert.same({ exitCode = 0, stdout = 'arena-startup-ready-20261001\n' }, sdk_out.exec)
    assert.same({ exitCode = 3, stderr = 'to-stderr\n' }, sdk_out.exit3)
    assert.equal('written by the e2b sdk\n', sdk_out.file.content)
    assert.same({ sdk_out.create.sandboxId }, sdk_out.list.ids)
    assert.equal('prepared\n', sdk_out.warm.stdout)
    assert.equal(build_output(SDK_NOTES), sdk_out.build.stdout)
    assert.same({ true, true, true }, sdk_out.destroy)
    assert.is_false(sdk_out.destroy_again)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized + s.upload_refused)
    assert.equal(3, s.creates)
    assert.equal(1, s.snapshots)
    assert.equal(1, s.builds)
    assert.equal(2, s.file_uploads) -- notes.txt and conf/
    assert.equal(sdk_out.build.alias, s.template_requests[1].name)
  end)

  it('hashes COPY files as the SDK does (the same filesHash for the same files)', function()
    if why then pending(why) return end
    local body = f.stats().build_bodies[1]
    local sdk_copies = {}
    for _, st in ipairs(body.steps) do
      if st.type == 'COPY' then sdk_copies[#sdk_copies + 1] = { st.args[1], st.args[2], st.filesHash } end
    end
    local steps = assert(e2b_build.steps(recipe.of_task(dataset.load(tmp .. '/sdk-task')[1])))
    local ours = {}
    for _, st in ipairs(steps) do
      if st.type == 'COPY' then ours[#ours + 1] = { st.args[1], st.args[2], st.filesHash } end
    end
    assert.equal(2, #sdk_copies)
    assert.same(sdk_copies, ours)
  end)

  it('the adapter runs the same lifecycle against the same fake', function()
    if why then pending(why) return end
    local before = f.stats()
    client = e2b.connect(f.config())
    local labels = { ['cseng.run'] = run .. '-a', ['cseng.launcher'] = 'cseng@conformance', ['cseng.task'] = 'task-a' }
    f.record('adapter')
    local sb = C.lifecycle(e2b, client, { spec = { labels = labels, env = { GREETING = 'hello world' }, ttl_seconds = 900,
      network = false, workdir = '/workspace' }, put_dir = '/workspace', file = 'hello.txt', data = 'written by cseng\n',
      list_labels = { ['cseng.run'] = run .. '-a' } })
    -- the snapshot is not named as the SDK's: no reuse
    local warm = C.warm(e2b, client, sb, 'conf-a-' .. run, { spec = { labels = labels, ttl_seconds = 900, network = false } })
    -- native build of the task's recipe (nothing cached under its name yet), then a cache hit,
    -- then a sandbox from the template
    local rcp = recipe.of_task(dataset.load(tmp .. '/adapter-task')[1])
    local built = assert(e2b.build(client, { recipe = rcp }))
    assert.same({ false, e2b_build.name(rcp), 'debian:bookworm-slim' }, { built.cache_hit, built.layer, built.image })
    local again = assert(e2b.build(client, { recipe = rcp }))
    assert.same({ true, built.layer, built.template_id }, { again.cache_hit, again.layer, again.template_id })
    local tsb = assert(e2b.create(client, { labels = labels, layer = built.layer, ttl_seconds = 900, network = false }))
    assert.equal(build_output(ADAPTER_NOTES), assert(e2b.exec(client, tsb, BUILD.check)).stdout)
    C.destroy_all(e2b, client, { sb, warm, tsb })
    f.record(false)
    local s = f.stats()
    assert.equal(0, s.live)
    assert.equal(before.creates + 3, s.creates)
    assert.equal(before.builds + 1, s.builds)
    assert.equal(before.file_uploads + 1, s.file_uploads) -- notes.txt; conf/ is cached under the SDK's hash
    assert.equal(0, s.bad_requests + s.unknown + s.unauthorized + s.upload_refused)
  end)

  it('sends what the SDK sends, operation by operation, up to the listed differences', function()
    if why then pending(why) return end
    C.verdict('e2b', {
      title = 'E2B',
      sdk = 'e2b ' .. C.sdk_version('e2b'),
      intro = 'SDK lifecycle: `spec/sdk/e2b.mjs` (E2B_API_URL and E2B_SANDBOX_URL point the SDK at `spec/providers/e2b/fake.lua`); '
        .. 'adapter lifecycle and comparison: `spec/providers/e2b/conformance_spec.lua`. Compared headers: X-API-Key, Authorization '
        .. '(envd Basic user), X-Access-Token, E2b-Sandbox-Id, Content-Type, Connect-Protocol-Version, '
        .. 'Connect-Timeout-Ms, Keepalive-Ping-Interval, and X-Cseng-Fake-Upload (the header the fake\'s template '
        .. 'files upload links ask for). Maps whose keys are data: metadata, envVars, process.envs. The native build: '
        .. 'the SDK\'s `Template().fromDockerfile` + `Template.exists` + `Template.build` and the adapter\'s `e2b.build` '
        .. 'of the same Dockerfile\'s recipe (`spec/providers/e2b/conformance_spec.lua` BUILD), each followed by a sandbox from '
        .. 'the template; COPY files hashes agree with the SDK\'s.',
    }, f.records('sdk'), f.records('adapter'), { allow = ALLOW, opts = OPTS,
      ops = { 'create', 'create_from_snapshot', 'create_from_template', 'exec', 'upload', 'download', 'list', 'snapshot',
              'snapshot_lookup', 'template_alias', 'template_create', 'template_files', 'template_file_upload',
              'template_build', 'template_build_status', 'destroy' } })
  end)
end)
