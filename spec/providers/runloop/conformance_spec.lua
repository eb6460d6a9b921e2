-- Differential conformance of the runloop adapter with @runloop/api-client 1.32.0: the seed's
-- lifecycle and a native build (a blueprint from data/tasks/build-generated-config) run once
-- through the official SDK (spec/sdk/runloop.mjs, which must pass) and once through
-- lua/providers/runloop.lua against one recording fake (spec/providers/runloop/fake.lua); every
-- operation is compared (spec/helpers/conformance.lua) and any difference not listed in ALLOW,
-- with its reason, fails. Writes the runloop section of docs/providers/CONFORMANCE.md under `make conformance` (else of a temporary copy).
local sys = require('cseng.sys')
local runloop = require('providers.runloop')
local adapter = require('providers.shared.adapter')
local fs = require('cseng.fs')
local dataset = require('cseng.workload.dataset')
local recipe = require('cseng.workload.recipe')

local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('runloop')

local LAST_N = 'the API returns the last 100 lines of each stream unless `last_n` says otherwise; cseng asks ' ..
  'for `last_n` (10000) lines so a verifier\'s output keeps a useful tail (then cut to `tail_bytes`); the SDK ' ..
  'sends `last_n` only when its caller gives one'

local OBJECT_META = 'cseng tags the build context object with the recipe\'s content key (`cseng.content_key`, as ' ..
  'it tags the blueprint) so an object in the account can be told apart; `metadata` is an optional field of ' ..
  '`ObjectCreateParams`, which the SDK\'s `blueprint.create` (`build_context_dir`) leaves out'

-- The differences cseng keeps on purpose, each with its reason.
local ALLOW = {
  { op = 'exec', what = 'query:last_n', reason = LAST_N },
  { op = 'exec_wait', what = 'query:last_n', reason = LAST_N },
  { op = 'object_create', what = 'body:metadata', reason = OBJECT_META },
  { op = 'object_create', what = 'body:metadata.*', reason = OBJECT_META },
}

-- Bodies whose keys are data, not field names; x-request-id is compared as present or not.
local OPTS = { maps = { 'metadata', 'environment_variables' }, headers = { ['x-request-id'] = 'present' } }

-- The task both sides build natively (spec/sdk/runloop.mjs reads its environment/ too).
local BUILD_TASK = sys.root() .. '/data/tasks/build-generated-config'

--- The adapter's side of the lifecycle, step for step what spec/sdk/runloop.mjs does.
local function adapter_lifecycle(f)
  local client = runloop.connect(f.config())
  local labels = vendor.labeller('cseng@spec')('conformance-adapter', 'sdk-task')
  local sb = C.lifecycle(runloop, client, { spec = { labels = labels, ttl_seconds = 600 }, exec = { timeout = 30 },
    put_dir = '/tmp/cseng-adapter', file = 'file.bin', data = 'uploaded by the adapter\n\0\255',
    list_labels = { ['cseng.run'] = 'conformance-adapter' } })
  local r
  local snap = assert(runloop.snapshot(client, sb, 'conformance-key'))
  assert.equal(snap, runloop.find_artifact(client, 'conformance-key'))
  r = assert(runloop.exec(client, sb, 'sleep 1; echo slow-done', { timeout = 30 }))
  assert.equal('slow-done\n', r.stdout)
  local sb2 = assert(runloop.create(client, { labels = labels, warm_artifact = snap, ttl_seconds = 600 }))
  assert.equal('uploaded by the adapter\n\0\255', assert(runloop.get(client, sb2, '/tmp/cseng-adapter/file.bin')))
  r = assert(runloop.exec(client, sb2, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 30 }))
  assert.equal(0, r.code)
  assert(runloop.destroy(client, sb))
  assert(runloop.destroy(client, sb2))
  assert(runloop.delete_artifact(client, snap))
  assert.same({}, assert(runloop.list(client, { labels = { ['cseng.run'] = 'conformance-adapter' } })))

  -- the native build of the task the SDK built (its recipe, as the runner makes it), a devbox from it
  local t = dataset.load(BUILD_TASK)[1]
  local built = assert(runloop.build(client, { recipe = recipe.of_task(t) }))
  assert.is_false(built.cache_hit)
  local sb3 = assert(runloop.create(client, { labels = labels, layer = built.layer, ttl_seconds = 600 }))
  r = assert(runloop.exec(client, sb3, 'cat /etc/cseng-app/app.ini', { timeout = 30 }))
  assert.equal(0, r.code, r.stderr)
  assert.truthy(r.stdout:find('port = 8125\n', 1, true) and r.stdout:find('host = api-staging.eu-north.internal\n', 1, true), r.stdout)
  assert.equal(assert(fs.read(BUILD_TASK .. '/environment/gen_config.py')), assert(runloop.get(client, sb3, '/opt/gen/gen_config.py')))
  assert(runloop.destroy(client, sb3))
  assert.same({}, assert(runloop.list(client, { labels = { ['cseng.run'] = 'conformance-adapter' } })))
end

describe('runloop: @runloop/api-client against the adapter (differential)', function()
  it('the SDK lifecycle passes on the fake, and the adapter sends what the SDK sends', function()
    -- execute answers "running" after 0.5 s, so both sides long-poll the slow command
    local why = C.sdk_missing('@runloop/api-client')
    if why then pending(why) return end
    local f = fake.start { optimistic_cap = 0.5, boot = 0.2 }
    finally(f.close)
    local seen = C.run_sdk('runloop.mjs', { RUNLOOP_BASE_URL = f.url, RUNLOOP_API_KEY = f.api_key, CSENG_RUN = 'conformance-sdk',
      CSENG_BUILD_DIR = BUILD_TASK .. '/environment' }, { fake = f })
    assert.is_true(seen.ok)
    assert.equal('arena-startup-ready-20261001\n', seen.steps.exec.stdout)
    assert.equal(3, seen.steps.exit3.exit_status)
    assert.equal('build_complete', seen.steps.build.status)
    assert.is_true(seen.steps.from_blueprint.run_step)
    f.record('adapter')
    adapter_lifecycle(f)
    f.record(false)
    assert.same({}, f.live_devboxes())
    assert.equal(0, f.stats().object_refused)
    -- both built the same Dockerfile (the task's; its base is not remapped) from the same files
    local bodies = f.stats().build_bodies
    assert.equal(2, #bodies)
    assert.equal(bodies[1].dockerfile, bodies[2].dockerfile)
    local contexts = f.stats().build_contexts
    assert.same(contexts[bodies[1].name], contexts[bodies[2].name])
    -- the fake's upload_url refuses a Content-Type it was not signed with (curl's default, say)
    local obj = assert(adapter.request('runloop', 'POST', f.url .. '/v1/objects', { json = { name = 'refused', content_type = 'tar' },
      headers = { Authorization = 'Bearer ' .. f.config().api_key } }))
    local _, _, code = adapter.request('runloop', 'PUT', obj.upload_url,
      { body = 'x', raw = true, headers = { ['Content-Type'] = 'application/x-tar' } })
    assert.equal('HTTP_403', code)
    assert.equal(1, f.stats().object_refused)

    local sdk, ours = f.records('sdk'), f.records('adapter')
    assert.is_true(#sdk >= 14 and #ours >= 14)
    -- the check can fail: the adapter's execute with command_id renamed is reported
    local bad = C.compare(sdk, C.renamed(ours, 'exec', 'command_id', 'commandId'), ALLOW, OPTS)
    assert.matches('body:commandId', C.describe(bad), 1, true)
    C.verdict('runloop', {
      title = 'runloop',
      sdk = '@runloop/api-client ' .. C.sdk_version('@runloop/api-client'),
      intro = 'The lifecycle of `spec/sdk/runloop.mjs` (the SDK\'s own `baseURL` option points it at the fake; ' ..
        '`http2: false`, see below) and the same steps through `lua/providers/runloop.lua`: create a devbox with ' ..
        'metadata and wait until it runs (`wait_for_status`, a long poll), the arena\'s python3 command, a command ' ..
        'exiting 3, a file uploaded and downloaded back, list and find it by metadata, snapshot the disk ' ..
        '(`snapshot_disk_async`, status polled), find the snapshot by its metadata, a command that outlives ' ..
        '`execute`\'s optimistic wait (then `executions/{id}/wait_for_status`), create from the snapshot, shut down, ' ..
        'delete the snapshot; then the native build of `data/tasks/build-generated-config` (the SDK: ' ..
        '`blueprints.list` by name, then `RunloopSDK.blueprint.create` with `build_context_dir`, which packs ' ..
        'environment/ as a tgz object (`objects.create`, a PUT to its `upload_url`, `objects.complete`), creates the ' ..
        'blueprint and polls `GET /v1/blueprints/{id}`; the adapter: `runloop.build` with the task\'s recipe, ' ..
        '`recipe.of_task`, its context a tar), a devbox from the blueprint in which the RUN step\'s output and the ' ..
        'COPY file are checked, shut down.',
      notes = 'Transport: the SDK speaks HTTP/2 by default since 1.25 (`node:http2`, cleartext with prior knowledge ' ..
        'on `http://`); the fakes\' server (`cseng.serve`) is HTTP/1.1 only, so the script passes `http2: false`. ' ..
        'Paths, bodies and headers are built before the transport is chosen (`core.ts` `buildRequest`), so the ' ..
        'comparison holds for both; cseng itself speaks whatever curl negotiates (HTTP/2 over TLS with ALPN). ' ..
        'Not compared: the user agent and the `x-stainless-*` headers (SDK telemetry and its retry count), ' ..
        '`Accept`. `x-request-id` is compared as present: the SDK sends `stainless-node-retry-<uuid>`, cseng ' ..
        '`cseng-<uuidv7>`, both on every POST. A multipart upload is compared as its field names (`path`, `file`). ' ..
        'The build context\'s `content_type` differs in value, not in shape: the SDK\'s `build_context_dir` ' ..
        'uploads a gzipped tar (`tgz`), cseng the recipe\'s deterministic tar (`tar`); the fake builds from either.',
    }, sdk, ours, { allow = ALLOW, opts = OPTS })
  end)
end)
