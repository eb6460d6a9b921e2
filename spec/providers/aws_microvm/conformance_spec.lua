-- AWS Lambda MicroVMs against its official SDK (@aws-sdk/client-lambda-microvms, and the
-- @aws-sdk/client-s3 that spec/sdk/package-lock.json pins, for the upload): the SDK's lifecycle
-- (spec/sdk/aws_microvm.mjs) passes against the fake (spec/providers/aws_microvm/fake.py, SigV4 verified
-- with botocore), cseng's adapter runs the same lifecycle and prewarm's image build against the
-- same fake, and the two request logs agree per operation up to the differences listed below
-- with their reasons. Writes the aws-microvm section of docs/providers/CONFORMANCE.md under `make conformance` (else of a temporary copy).
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local aws = require('providers.aws_microvm')
local aws_build = require('providers.shared.aws_microvm_build')

local ROOT = sys.root()
local C = require('spec.helpers.conformance')
teardown(C.remove_doc) -- the sections it wrote (a temporary file unless CSENG_CONFORMANCE_DOC is set)
local awsfake = require('spec.fakes').module('aws-microvm')

local SDK, S3 = '@aws-sdk/client-lambda-microvms', '@aws-sdk/client-s3'
local AGENT, AGENT_ARM = ROOT .. '/build/microvm-agent/microvm-agent', ROOT .. '/build/microvm-agent/microvm-agent-aarch64'
local ROLE = 'arn:aws:iam::123456789012:role/cseng-build'

-- Tags are data; the SigV4 headers must be there on both sides.
local OPTS = {
  maps = { 'Tags', 'tags' },
  headers = { ['x-amz-date'] = 'present', ['x-amz-content-sha256'] = 'present', ['x-amz-security-token'] = 'present' },
}

-- Every difference the comparison may find, with the reason it is acceptable.
local ALLOW = {
}

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
    why = C.sdk_missing(SDK, S3)
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
    local zip = aws_build.zip { { name = 'Dockerfile', data = aws_build.dockerfile('public.ecr.aws/docker/library/python:3.12-slim-bookworm', 8080) },
                          { name = 'microvm-agent', data = assert(fs.read(AGENT_ARM)), mode = '755' } }
    assert(fs.write(dir .. '/artifact.zip', zip))
    -- one terminated microVM beforehand, so the SDK's ListMicrovms (pages of 1) follows a nextToken too
    f.set { client = 'setup' }
    local setup_client = aws.connect(f.config())
    assert(aws.destroy(setup_client, assert(aws.create(setup_client, {}))))
    f.set { client = 'sdk' }
    local ok, out = pcall(C.run_sdk, 'aws_microvm.mjs', { AWS_MICROVM_ENDPOINT_URL = f.url,
      AWS_MICROVM_IMAGE_ID = f.image_arn, AWS_ACCESS_KEY_ID = f.access_key, AWS_SECRET_ACCESS_KEY = f.secret,
      AWS_REGION = f.region, AWS_PROFILE = false, AWS_SESSION_TOKEN = false, AWS_ENDPOINT_URL_S3 = f.s3_url,
      AWS_MICROVM_TEST_BUCKET = f.bucket, AWS_MICROVM_ARTIFACT = dir .. '/artifact.zip', AWS_MICROVM_BUILD_ROLE_ARN = ROLE })
    f.set { client = false }
    assert(ok, out)
    assert.is_true(out.ok)
    assert.equal('CREATED', out.image.state)
    assert.equal(0, f.stats().live)
  end)

  it('the adapter runs the same lifecycle and prewarm against the same fake', function()
    if why then pending(why) return end
    f.set { client = 'adapter' }
    local client = aws.connect(f.config())
    local run = 'conf-aws'
    -- the list goes over pages of 1: nextToken followed
    local sb, other = C.lifecycle(aws, client, { spec = { labels = { ['cseng.run'] = run }, ttl_seconds = 900 }, exit3 = false,
      put_dir = '/workspace', file = 'hello.txt', data = 'written by cseng\n',
      other = { labels = { ['cseng.run'] = 'other' }, ttl_seconds = 900 }, list_labels = { ['cseng.run'] = run } })
    C.destroy_all(aws, client, { sb, other })
    local arn = assert(aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT_ARM }))
    assert.matches(':microvm%-image:', arn)
    f.set { client = false }
    assert.equal(0, f.stats().live)
  end)

  it('sends what the SDK sends, operation by operation, up to the listed differences', function()
    if why then pending(why) return end
    C.verdict('aws-microvm', {
      title = 'AWS Lambda MicroVMs',
      sdk = SDK .. ' ' .. C.sdk_version(SDK) .. '` and `' .. S3 .. ' ' .. C.sdk_version(S3),
      intro = 'SDK lifecycle: `spec/sdk/aws_microvm.mjs` (the client\'s `endpoint` option points it at '
        .. '`spec/providers/aws_microvm/fake.py`; S3 with `forcePathStyle`); adapter lifecycle, prewarm and comparison: '
        .. '`spec/providers/aws_microvm/conformance_spec.lua`. Every request of both is SigV4-verified by botocore in the fake. '
        .. 'Compared headers: Authorization (scheme), X-Amz-Date, X-Amz-Content-Sha256, X-Amz-Security-Token, '
        .. 'Content-Type. Maps whose keys are data: Tags, tags.',
      notes = 'Not compared: requests to the microVM endpoint (the SDK has no client for it; its script only checks '
        .. 'that the endpoint refuses a request without X-aws-proxy-auth), and the SDK\'s own headers '
        .. '(amz-sdk-invocation-id, amz-sdk-request, x-amz-user-agent) that carry no API meaning.',
    }, records(f, 'sdk'), records(f, 'adapter'), { allow = ALLOW, opts = OPTS,
      ops = { 'RunMicrovm', 'GetMicrovm', 'CreateMicrovmAuthToken', 'TagResource', 'ListTags', 'ListMicrovms',
              'TerminateMicrovm', 'ListManagedMicrovmImages', 'S3PutObject', 'CreateMicrovmImage', 'GetMicrovmImage' } })
  end)
end)
