-- Differential conformance for Modal: the same sandbox lifecycle once through the official `modal`
-- JS SDK (spec/sdk/modal.mjs) and once through cseng's adapter (lua/providers/modal.lua), each
-- against a fresh Modal fake (spec/providers/modal/server.mjs) that logs every RPC in the shared
-- recorded-request shape (op = RPC name, headers = gRPC metadata, body = the decoded request
-- message). The requests are compared per RPC with spec/helpers/conformance.lua, and the result is
-- the modal section of docs/providers/CONFORMANCE.md.
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local modal = require('providers.modal')

local ROOT = sys.root()
local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local modal_fake = require('spec.fakes').module('modal')

-- Headers compared: credentials and tokens by presence, the client identification by value.
local OPTS = {
  maps = { 'env', 'definition.environment_variables.contents' },
  headers = {
    ['x-modal-token-id'] = 'present', ['x-modal-token-secret'] = 'present', ['x-modal-auth-token'] = 'present',
    ['x-modal-client-type'] = 'value', ['x-modal-client-version'] = 'value', ['x-modal-host'] = 'present',
    ['x-idempotency-key'] = 'present', ['x-retry-attempt'] = 'value', ['x-modal-libmodal-version'] = 'present',
  },
}

local ALLOW = {
  { op = '*', what = 'header:x-modal-client-type',
    reason = 'the SDK says CLIENT_TYPE_LIBMODAL_JS (8); cseng is not the JS SDK and sends CLIENT_TYPE_LIBMODAL (7), a setting ' ..
      '(client_type)' },
  { op = 'TaskExecStdinWriteStream', what = 'op',
    reason = 'the SDK streams stdin (client streaming) for its filesystem writes; cseng writes stdin with the unary ' ..
      'TaskExecStdinWrite (lua/cseng/lib/grpc.lua has no client streaming)' },
  { op = 'TaskExecStdinWrite', what = 'op',
    reason = 'cseng\'s put uploads the archive on the stdin of `cat > /tmp/...` in 1 MiB unary writes (see ' ..
      'TaskExecStdinWriteStream)' },
  { op = 'TaskSnapshotFilesystem', what = 'op',
    reason = 'SDK 0.11.1 snapshots through the command router; cseng uses the control plane\'s SandboxSnapshotFs (in api.proto; same image id ' ..
      'result)' },
  { op = 'SandboxSnapshotFs', what = 'op', reason = 'see TaskSnapshotFilesystem' },
  { op = 'SandboxTagsGet', what = 'op', reason = 'the SDK script reads the tags back to check them; cseng reads them from SandboxList' },
  { op = 'SandboxWait', what = 'op', reason = 'the SDK script waits for the exit code after terminate; cseng does not need it' },
  { op = 'SandboxCreate', what = 'body:definition.resources.gpu_config', reason = 'the SDK sends an empty GPUConfig; cseng asks for no GPU by leaving it out' },
  { op = 'SandboxCreate', what = 'body:definition.open_ports', reason = 'the SDK sends an empty PortSpecs; cseng opens no ports' },
  { op = 'SandboxCreate', what = 'body:definition.open_ports_oneof',
    reason = 'the SDK sends an empty PortSpecs (the fake\'s decoder names the oneof that is set); cseng opens no ' ..
      'ports' },
  { op = 'SandboxCreate', what = 'body:definition.environment_variables',
    reason = 'cseng passes the task\'s environment to the sandbox (the SDK script has ' ..
      'none)' },
  { op = 'SandboxCreate', what = 'body:definition.environment_variables.contents', reason = 'see environment_variables' },
  { op = 'SandboxCreate', what = 'body:definition.environment_variables.contents.*', reason = 'see environment_variables' },
  { op = 'SandboxCreate', what = 'body:definition.workdir', reason = 'cseng sets the task\'s workdir; the SDK script uses the image\'s' },
  { op = 'TaskExecStart', what = 'body:env', reason = 'cseng passes the trial\'s environment per command (the SDK script has none)' },
  { op = 'TaskExecStart', what = 'body:env.*', reason = 'see env' },
  { op = 'TaskExecStart', what = 'body:workdir', reason = 'cseng runs in the task\'s workdir (the SDK script uses the sandbox\'s)' },
  { op = 'TaskExecStart', what = 'body:timeout_secs', reason = 'cseng gives every command its timeout; the SDK script gives none' },
  { op = 'SandboxGetTaskId', what = 'body:timeout', reason = 'cseng long-polls (timeout 10 s) instead of polling every 500 ms' },
  { op = 'ImageFromId', what = 'op',
    reason = 'the SDK script resolves a built image id to an Image before creating a sandbox from it; cseng creates from the id' },
}

-- The environment the SDK script builds (spec/sdk/modal.mjs), as a task: its Dockerfile's steps
-- (the SDK's image builder takes them) and a COPY from the build context (the SDK script sends
-- that one through the SDK's generated client, in the Python SDK's sequence).
local BUILD_DOCKERFILE = table.concat({
  'FROM debian:bookworm-slim', 'ARG GREETING=built-by-modal', 'ENV CSENG_BUILT=1',
  'RUN useradd --create-home --shell /bin/bash builder', 'USER builder',
  'RUN echo "$GREETING as $(id -un)" > "$HOME/marker"', 'USER root', 'WORKDIR /workspace',
  'COPY bin/hello.sh /usr/local/bin/hello', '' }, '\n')

local function build_recipe(dir)
  local fs = require('cseng.fs')
  for _, d in ipairs({ '/environment/bin', '/tests' }) do assert(fs.mkdir_p(dir .. d)) end
  assert(fs.write(dir .. '/task.toml', 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n'))
  assert(fs.write(dir .. '/instruction.md', 'Nothing to do.\n'))
  assert(fs.write(dir .. '/tests/test.sh', '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n'))
  assert(fs.write(dir .. '/environment/Dockerfile', BUILD_DOCKERFILE))
  assert(fs.write(dir .. '/environment/bin/hello.sh', '#!/bin/sh\necho copied\n'))
  assert(fs.chmod(dir .. '/environment/bin/hello.sh', 493))
  local t = assert(require('cseng.workload.dataset').load(dir)[1])
  return require('cseng.workload.recipe').of_task(t)
end

local function lifecycle_adapter(f)
  local client = modal.connect(f.config())
  local tmp = assert(require('cseng.fs').tempdir('modal-conformance-'))
  local rcp = build_recipe(tmp .. '/build-task')
  local b = assert(modal.build(client, { recipe = rcp }))
  require('cseng.fs').remove_tree(tmp)
  local bsb = assert(modal.create(client, { labels = { ['cseng.run'] = 'conformance-build' }, layer = b.layer }))
  local out = assert(modal.exec(client, bsb, 'cat /home/builder/marker; echo "$CSENG_BUILT"; pwd; hello'))
  assert(out.stdout == 'built-by-modal as builder\n1\n/workspace\ncopied\n', out.stdout .. out.stderr)
  assert(modal.destroy(client, bsb))
  local tags = { ['cseng.run'] = 'conformance', ['cseng.launcher'] = 'adapter', ['cseng.task'] = 'lifecycle' }
  local sb = C.lifecycle(modal, client, { spec = { labels = tags, env = { A = '1' }, workdir = '/workspace' },
    exec = { env = { B = '2' }, timeout = 30 }, put_dir = '/tmp/cseng', file = 'hello.txt', data = 'hi\n',
    list_labels = { ['cseng.run'] = 'conformance' } })
  local image = assert(modal.snapshot(client, sb, 'k'))
  local sb2 = assert(modal.create(client, { labels = tags, warm_artifact = image }))
  assert(modal.exec(client, sb2, 'true'))
  assert(modal.destroy(client, sb))
  assert(modal.destroy(client, sb2))
  assert(#assert(modal.list(client, { labels = { ['cseng.run'] = 'conformance' } })) == 0)
end

describe('modal conformance: the official SDK vs the adapter, per RPC', function()
  it('differs only where listed, and writes the modal section of CONFORMANCE.md', function()
    local fs_ = modal_fake.start { client = 'sdk' }
    local r = assert(proc.run { argv = { 'node', C.SDK_ROOT .. '/modal.mjs', 'conformance' }, cwd = ROOT,
                                env_add = fs_.env(), timeout = 300 })
    local sdk = C.load(fs_.log)
    fs_.close()
    assert.equal(0, r.code, r.stdout .. r.stderr)

    local fa = modal_fake.start { client = 'adapter' }
    local ok, err = pcall(lifecycle_adapter, fa)
    local adapter_recs = C.load(fa.log)
    fa.close()
    assert(ok, err)

    C.verdict('modal', {
      title = 'modal',
      sdk = 'modal 0.11.1 (JS SDK, MODAL_SANDBOX_V2=false)',
      intro = 'Both clients against the gRPC fake (spec/providers/modal/server.mjs, Modal\'s protos loaded by ' ..
        '@grpc/proto-loader); an operation is an RPC (`POST /<service>/<method>`), its headers are the gRPC ' ..
        'metadata and its body the decoded request message (proto3 fields the client left at their default are ' ..
        'absent: sending `""`, `0`, `false` or an empty list is the same bytes on the wire as leaving it out).',
      notes = 'SDK 0.11.1 defaults to Modal\'s experimental V2 sandboxes (SandboxCreateV2, ...); cseng speaks the V1 ' ..
        'lifecycle, which is what the SDK runs with `MODAL_SANDBOX_V2=false`, so that is the referee here.',
    }, sdk, adapter_recs, { allow = ALLOW, opts = OPTS })
  end)
end)
