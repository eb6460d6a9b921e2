-- AWS Lambda MicroVMs against its official SDK (@aws-sdk/client-lambda-microvms, and the
-- @aws-sdk/client-s3 that spec/sdk/package-lock.json pins, for the upload): the SDK's lifecycle
-- (spec/sdk/aws_microvm.mjs) passes against the fake (spec/fakes/aws/fake.py, SigV4 verified
-- with botocore), cseng's adapter runs the same lifecycle and prewarm's image build against the
-- same fake, and the two request logs agree per operation up to the differences listed below
-- with their reasons. Writes the aws-microvm section of docs/providers/CONFORMANCE.md.
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local cjson = require 'cjson'
local aws = require 'providers.aws_microvm'

local ROOT = sys.root()
local C = dofile(ROOT .. '/spec/helpers/conformance.lua')
local awsfake = dofile(ROOT .. '/spec/fakes/init.lua').module('aws-microvm')
local vendor = dofile(ROOT .. '/spec/helpers/vendor.lua')

local SDK_DIR = ROOT .. '/spec/sdk/node_modules/@aws-sdk/client-lambda-microvms'
local S3_DIR = ROOT .. '/spec/sdk/node_modules/@aws-sdk/client-s3'
local AGENT, AGENT_ARM = ROOT .. '/build/agent/microvm-agent', ROOT .. '/build/agent/microvm-agent-aarch64'
local ROLE = 'arn:aws:iam::123456789012:role/cseng-build'

-- Tags are data; the SigV4 headers must be there on both sides.
local OPTS = {
  maps = { 'Tags', 'tags' },
  headers = { ['x-amz-date'] = 'present', ['x-amz-content-sha256'] = 'present', ['x-amz-security-token'] = 'present' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
}

local function missing()
  if not proc.which('node') then return 'node is not installed (make deps-test)' end
  if not fs.exists(SDK_DIR .. '/package.json') then return 'the SDK is not installed: make deps-test (npm ci --prefix spec/sdk)' end
  if not fs.exists(S3_DIR .. '/package.json') then return '@aws-sdk/client-s3 is not installed: make deps-test' end
  return nil
end

local function version(dir) return cjson.decode((assert(fs.read(dir .. '/package.json')))).version end

local function records(f, client)
  local out = {}
  for _, r in ipairs(C.load(f.log)) do
    -- the endpoint is no SDK operation: the SDK script only checks that it refuses a bare request
    if r.client == client and r.op ~= 'Endpoint' then out[#out + 1] = r end
  end
  return out
end

describe('aws-microvm against its official SDK', function()
  local f, why, dir

  setup(function()
    why = missing()
    if why then return end
    if not (fs.exists(AGENT) and fs.exists(AGENT_ARM)) then
      assert(proc.run { argv = { 'make', '-C', ROOT, 'agent' }, timeout = 600 })
    end
    f = awsfake.start { agent = AGENT, switches = { page_size = 1 } }
    dir = assert(fs.tempdir('aws-conf-'))
  end)

  teardown(function()
    if f then f.close() end
    if dir then fs.remove_tree(dir) end
  end)

  it('the SDK runs the lifecycle and the image build against the fake', function()
    if why then pending(why) return end
    local zip = aws.zip { { name = 'Dockerfile', data = aws.dockerfile('public.ecr.aws/docker/library/python:3.12-slim-bookworm', 8080) },
                          { name = 'microvm-agent', data = assert(fs.read(AGENT_ARM)), mode = '755' } }
    assert(fs.write(dir .. '/artifact.zip', zip))
    -- one terminated microVM beforehand, so the SDK's ListMicrovms (pages of 1) follows a nextToken too
    f.set { client = 'setup' }
    local setup_client = aws.connect(f.config())
    assert(aws.destroy(setup_client, assert(aws.create(setup_client, {}))))
    f.set { client = 'sdk' }
    local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/aws_microvm.mjs' }, cwd = ROOT, timeout = 300,
      env_add = { AWS_MICROVM_ENDPOINT_URL = f.url, AWS_MICROVM_IMAGE_ID = f.image_arn, AWS_ACCESS_KEY_ID = f.access_key,
                  AWS_SECRET_ACCESS_KEY = f.secret, AWS_REGION = f.region, AWS_PROFILE = false, AWS_SESSION_TOKEN = false,
                  AWS_ENDPOINT_URL_S3 = f.s3_url, AWS_MICROVM_TEST_BUCKET = f.bucket,
                  AWS_MICROVM_ARTIFACT = dir .. '/artifact.zip', AWS_MICROVM_BUILD_ROLE_ARN = ROLE } })
    f.set { client = false }
    assert.equal(0, r.code, r.stdout .. r.stderr)
    local out = cjson.decode(r.stdout)
    assert.is_true(out.ok)
    assert.equal('CREATED', out.image.state)
    assert.equal(0, f.stats().live)
  end)

  it('the adapter runs the same lifecycle and prewarm against the same fake', function()
    if why then pending(why) return end
    f.set { client = 'adapter' }
    local client = aws.connect(f.config())
    local run = 'conf-aws'
    local sb = assert(aws.create(client, { labels = { ['cseng.run'] = run }, ttl_seconds = 900 }))
    local r = assert(aws.exec(client, sb, [[python3 -c "print('arena-startup-ready-20261001')"]], { timeout = 60 }))
    assert.same({ 0, 'arena-startup-ready-20261001\n' }, { r.code, r.stdout })
    assert(aws.put(client, sb, '/workspace', vendor.tar_of({ ['hello.txt'] = 'written by cseng\n' }, 'tar')))
    assert.equal('written by cseng\n', assert(aws.get(client, sb, '/workspace/hello.txt')))
    local other = assert(aws.create(client, { labels = { ['cseng.run'] = 'other' }, ttl_seconds = 900 }))
    local found = assert(aws.list(client, { labels = { ['cseng.run'] = run } })) -- pages of 1: nextToken followed
    assert.same({ sb.id }, vendor.sorted_ids(found))
    assert.is_true(aws.destroy(client, sb))
    assert.is_true(aws.destroy(client, sb)) -- idempotent
    assert.is_true(aws.destroy(client, other))
    local arn = assert(aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT_ARM }))
    assert.matches(':microvm%-image:', arn)
    f.set { client = false }
    assert.equal(0, f.stats().live)
  end)

  it('sends what the SDK sends, operation by operation, up to the listed differences', function()
    if why then pending(why) return end
    local sdk, ad = records(f, 'sdk'), records(f, 'adapter')
    assert.is_true(#sdk > 0 and #ad > 0, 'both lifecycles ran')
    local diffs, rows, unused = C.compare(sdk, ad, ALLOW, OPTS)
    C.write_section('aws-microvm', C.markdown({
      title = 'AWS Lambda MicroVMs',
      sdk = '@aws-sdk/client-lambda-microvms ' .. version(SDK_DIR) .. '` and `@aws-sdk/client-s3 ' .. version(S3_DIR),
      intro = 'SDK lifecycle: `spec/sdk/aws_microvm.mjs` (the client\'s `endpoint` option points it at '
        .. '`spec/fakes/aws/fake.py`; S3 with `forcePathStyle`); adapter lifecycle, prewarm and comparison: '
        .. '`spec/conformance_aws_microvm_spec.lua`. Every request of both is SigV4-verified by botocore in the fake. '
        .. 'Compared headers: Authorization (scheme), X-Amz-Date, X-Amz-Content-Sha256, X-Amz-Security-Token, '
        .. 'Content-Type. Maps whose keys are data: Tags, tags.',
      notes = 'Not compared: requests to the microVM endpoint (the SDK has no client for it; its script only checks '
        .. 'that the endpoint refuses a request without X-aws-proxy-auth), and the SDK\'s own headers '
        .. '(amz-sdk-invocation-id, amz-sdk-request, x-amz-user-agent) that carry no API meaning.',
    }, rows))
    assert.same({}, unused, 'allow-list entries that matched nothing (stale reasons)')
    assert.equal('', C.describe(diffs), 'differences with no reason in the allow-list')
    local ops = {}
    for _, row in ipairs(rows) do ops[row.op] = true end
    for _, op in ipairs({ 'RunMicrovm', 'GetMicrovm', 'CreateMicrovmAuthToken', 'TagResource', 'ListTags', 'ListMicrovms',
                          'TerminateMicrovm', 'ListManagedMicrovmImages', 'S3PutObject', 'CreateMicrovmImage',
                          'GetMicrovmImage' }) do
      assert.is_true(ops[op], op)
    end
  end)
end)
