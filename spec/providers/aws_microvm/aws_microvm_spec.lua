-- The AWS Lambda MicroVMs adapter (lua/providers/aws_microvm.lua) against the stateful fake
-- (spec/providers/aws_microvm/fake.py: every control-plane and S3 request verified with botocore's SigV4,
-- every microVM the real exec agent in a bubblewrap sandbox behind an endpoint proxy):
--   * the official SDK's lifecycle passes against the fake; a wrong secret, a changed header or
--     body, an unknown key are refused;
--   * create/exec/put/get/destroy, a lost create response (no second microVM), throttling and
--     5xx retried after Retry-After, quota errors, list by tags across pages;
--   * the runner end to end: plans/cold-gold.lua (the covering tasks of spec/helpers/vendor.lua
--     pass with gold and score 0 with nop, every microVM terminated), plans/startup.lua, kill -9 then cseng cleanup, and
--     cseng prewarm printing an image id that a run then uses.
local proc = require('cseng.proc')
local http = require('cseng.http')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')
local sigv4 = require('cseng.lib.aws.sigv4')
local aws = require('providers.aws_microvm')
local aws_wire = require('providers.shared.aws_microvm_wire')
local aws_build = require('providers.shared.aws_microvm_build')

local ROOT = sys.root()
local vendor = require('spec.helpers.vendor')
local awsfake = require('spec.fakes').module('aws-microvm')
local labels, tar_of = vendor.labeller('cseng@spec'), vendor.tar_of

local AGENT = ROOT .. '/build/microvm-agent/microvm-agent'
local AGENT_ARM = ROOT .. '/build/microvm-agent/microvm-agent-aarch64'
local ROLE = 'arn:aws:iam::123456789012:role/cseng-build'

-- The agent builds (make agent), made here when missing.
local function agents()
  if not (fs.exists(AGENT) and fs.exists(AGENT_ARM)) then
    local r = assert(proc.run { argv = { 'make', '-C', ROOT, 'agent' }, timeout = 600 })
    assert(r.code == 0, 'make agent: ' .. r.stderr)
  end
  return AGENT
end

local function by_op(f, op)
  local out = {}
  for _, r in ipairs(f.records()) do if r.op == op then out[#out + 1] = r end end
  return out
end

describe('aws-microvm: the official SDK and SigV4 against the fake', function()
  local f
  setup(function() f = awsfake.start { agent = agents() } end)
  teardown(function() if f then f.close() end end)

  it('runs the SDK lifecycle (RunMicrovm, GetMicrovm, CreateMicrovmAuthToken, TerminateMicrovm, ...)', function()
    local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/aws_microvm.mjs' }, cwd = ROOT, timeout = 300,
      env_add = { AWS_MICROVM_ENDPOINT_URL = f.url, AWS_MICROVM_IMAGE_ID = f.image_arn, AWS_ACCESS_KEY_ID = f.access_key,
                  AWS_SECRET_ACCESS_KEY = f.secret, AWS_REGION = f.region, AWS_PROFILE = false,
                  AWS_SESSION_TOKEN = false } })
    assert.equal(0, r.code, r.stdout .. r.stderr)
    local out = cjson.decode(r.stdout)
    assert.is_true(out.ok)
    assert.equal('RUNNING', out.get.state)
    assert.same({ 'X-aws-proxy-auth' }, out.auth_token_keys)
    assert.equal('TERMINATED', out.after_terminate)
    assert.same({ name = 'InvalidSignatureException', status = 403 }, out.wrong_secret)
    local s = f.stats()
    assert.equal(1, s.bad_signatures) -- only the wrong-secret call
    assert.equal(0, s.live)
  end)

  it('refuses a wrong secret, an unknown key, a header or body changed after signing', function()
    local c = aws.connect(f.config())
    assert.is_true(assert(aws.list(c, {})) ~= nil)
    local bad = aws.connect(f.config { getenv = function(k)
      return ({ AWS_ACCESS_KEY_ID = f.access_key, AWS_SECRET_ACCESS_KEY = 'not-the-secret', AWS_REGION = f.region,
                AWS_MICROVM_ENDPOINT_URL = f.url })[k] end })
    local ok, msg, code = aws.list(bad, {})
    assert.is_nil(ok)
    assert.equal('HTTP_403', code)
    assert.matches('InvalidSignatureException', msg)
    assert.is_nil(msg:find('not-the-secret', 1, true))
    local unknown = aws.connect(f.config { getenv = function(k)
      return ({ AWS_ACCESS_KEY_ID = 'AKIDUNKNOWN0000', AWS_SECRET_ACCESS_KEY = 'x-secret-x', AWS_REGION = f.region,
                AWS_MICROVM_ENDPOINT_URL = f.url })[k] end })
    ok, msg, code = aws.list(unknown, {})
    assert.is_nil(ok)
    assert.equal('HTTP_403', code)
    assert.matches('UnrecognizedClientException', msg)

    -- signed correctly, then one signed header (or the body) changed on the way
    local url = f.url .. '/2025-09-09/microvms'
    local body = cjson.encode { imageIdentifier = f.image_arn }
    local function send(mutate)
      local h = { ['Content-Type'] = 'application/json' }
      local add = sigv4.sign { method = 'POST', url = url, headers = h, body = body, region = f.region, service = 'lambda',
        access_key_id = f.access_key, secret_access_key = f.secret, content_sha256 = true }
      for k, v in pairs(add) do h[k] = v end
      local b = body
      if mutate then b = mutate(h, b) end
      return assert(http.request { method = 'POST', url = url, headers = h, body = b })
    end
    local res = send(function(h, b) h['Content-Type'] = 'application/x-json'; return b end)
    assert.equal(403, res.status)
    assert.equal('InvalidSignatureException', res.headers['x-amzn-errortype'])
    res = send(function(_, b) return b:gsub('}$', ',"maximumDurationInSeconds":60}') end)
    assert.equal(403, res.status)
    local before = f.stats().created
    res = send(nil) -- unchanged: accepted (and terminated below)
    assert.equal(200, res.status, res.body)
    assert.equal(before + 1, f.stats().created)
    assert(aws.destroy(c, { id = cjson.decode(res.body).microvmId }))

    -- S3: a wrong secret is the XML SignatureDoesNotMatch
    local s3url = f.s3_url .. '/' .. f.bucket .. '/k'
    local h = {}
    local add = sigv4.sign { method = 'PUT', url = s3url, headers = h, body = 'data', region = f.region, service = 's3',
      access_key_id = f.access_key, secret_access_key = 'wrong' }
    for k, v in pairs(add) do h[k] = v end
    res = assert(http.request { method = 'PUT', url = s3url, headers = h, body = 'data' })
    assert.equal(403, res.status)
    assert.matches('<Code>SignatureDoesNotMatch</Code>', res.body)
  end)
end)

describe('aws-microvm lifecycle (stateful fake)', function()
  local f
  before_each(function() f = awsfake.start { agent = agents() } end)
  after_each(function() if f then f.close() end end)

  it('creates a tagged microVM, runs real commands, moves files and terminates it', function()
    local client = aws.connect(f.config { execution_role_arn = 'arn:aws:iam::123456789012:role/exec' })
    local lab = labels('life')
    local sb = assert(aws.create(client, { labels = lab, env = { GREETING = 'hello world' }, workdir = '/workspace',
                                           ttl_seconds = 1900 }))
    assert.matches('^mvm%-', sb.id)
    assert.is_number(sb.ready_seconds)
    local run = by_op(f, 'RunMicrovm')[1].body
    assert.equal(f.image_arn, run.imageIdentifier)
    assert.equal(1900, run.maximumDurationInSeconds)
    assert.equal('arn:aws:iam::123456789012:role/exec', run.executionRoleArn)
    assert.matches('^cseng%-%x+$', run.clientToken)
    assert.equal(sb.agent_token, cjson.decode(run.runHookPayload).token)
    local vms = f.microvms()
    assert.equal(1, #vms)
    assert.same(lab, vms[1].tags)
    local auth = by_op(f, 'CreateMicrovmAuthToken')[1].body
    assert.same({ expirationInMinutes = 60, allowedPorts = { { port = 8080 } } }, auth)

    local r = assert(aws.exec(client, sb, 'echo out; echo err >&2; exit 7'))
    assert.same({ 7, 'out\n', 'err\n', false }, { r.code, r.stdout, r.stderr, r.timed_out })
    r = assert(aws.exec(client, sb, [[printf '%s|' "a'b" "$GREETING" "$EXTRA"; pwd]], { env = { EXTRA = 'x y' }, cwd = '/tmp' }))
    assert.equal([[a'b|hello world|x y|/tmp]] .. '\n', r.stdout)
    r = assert(aws.exec(client, sb, 'cat; exit 3', { stdin = 'piped\n' }))
    assert.same({ 3, 'piped\n' }, { r.code, r.stdout })
    assert(aws.put(client, sb, '/tests', tar_of({ ['test.sh'] = 'echo tested\n' }, 'tar')))
    local bin = crypto.random_bytes(200000) .. '\0\255'
    assert(aws.put(client, sb, '/data', tar_of { ['blob.bin'] = bin })) -- tar.gz, unpacked for the agent
    assert.equal(crypto.sha256_hex(bin), crypto.sha256_hex(assert(aws.get(client, sb, '/data/blob.bin'))))
    assert.equal('tested\n', assert(aws.exec(client, sb, 'bash /tests/test.sh')).stdout)
    local none, msg, code = aws.get(client, sb, '/no/such/file')
    assert.is_nil(none)
    assert.equal('ENOENT', code)
    assert.matches('/no/such/file', msg)
    r = assert(aws.exec(client, sb, 'head -c 300000 /dev/zero | tr "\\0" x; echo END', { tail_bytes = 1000 }))
    assert.equal(1000, #r.stdout)
    assert.matches('END\n$', r.stdout)
    assert.equal(300004 - 1000, r.stdout_dropped)
    -- the proxy token and the agent token ride on every endpoint request; the port is selected
    for _, e in ipairs(by_op(f, 'Endpoint')) do
      assert.is_string(e.headers['x-aws-proxy-auth'])
      assert.equal(sb.agent_token, e.headers['x-cseng-agent-token'])
      assert.equal('8080', e.headers['x-aws-proxy-port'])
    end

    local root = vms[1].root
    assert.is_true(fs.exists(root .. '/data/blob.bin')) -- the microVM's own "/"
    assert.is_true(aws.destroy(client, sb))
    assert.is_true(aws.destroy(client, sb)) -- TerminateMicrovm is idempotent
    assert.is_true(aws.destroy(client, { id = 'mvm-never-existed' })) -- 404
    assert.is_false(fs.exists(root))
    local s = f.stats()
    assert.same({ 1, 1, 0 }, { s.created, s.terminated, s.live })
    assert.same({ '/run', '/terminate' }, s.hooks)
    assert.equal(0, s.bad_signatures + s.unknown_keys + s.validation_errors + s.proxy_refused)
  end)

  it('makes a working directory the image lacks; tagging can be turned off', function()
    local client = aws.connect(f.config { tags = false })
    local sb = assert(aws.create(client, { labels = labels('notags') }))
    assert.equal(0, #by_op(f, 'TagResource'))
    local r = assert(aws.exec(client, sb, 'pwd', { cwd = '/brand/new/dir' }))
    assert.same({ 0, '/brand/new/dir\n' }, { r.code, r.stdout })
    assert(aws.destroy(client, sb))
  end)

  it('kills a command at its timeout and reports timed_out', function()
    local client = aws.connect(f.config())
    local sb = assert(aws.create(client, {}))
    local r = assert(aws.exec(client, sb, 'echo started; sleep 30; echo never', { timeout = 1 }))
    assert.is_true(r.timed_out)
    assert.equal('started\n', r.stdout)
    r = assert(aws.exec(client, sb, 'exit 137', { timeout = 30 }))
    assert.is_false(r.timed_out)
    assert.equal(137, r.code)
    assert(aws.destroy(client, sb))
  end)

  it('makes no second microVM when the create response is lost: the retry sends the same clientToken', function()
    local client = aws.connect(f.config())
    f.set { drop_create = 1 }
    local sb = assert(aws.create(client, { labels = labels('lost') }))
    local runs = by_op(f, 'RunMicrovm')
    assert.equal(2, #runs) -- the lost one and its retry
    assert.equal(runs[1].body.clientToken, runs[2].body.clientToken)
    local s = f.stats()
    assert.same({ 1, 1, 1 }, { s.dropped, s.created, s.live })
    assert.same({ sb.id }, s.live_ids)
    assert.equal(1, client.stats.transport_errors)
    assert(aws.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)

  it('retries throttling after Retry-After and 5xx with back-off; gives up with the error type', function()
    local client = aws.connect(f.config())
    f.set { throttle = { RunMicrovm = 2 }, retry_after = 1, fail = { GetMicrovm = 2 } }
    local sb = assert(aws.create(client, {}))
    local runs = by_op(f, 'RunMicrovm')
    assert.equal(3, #runs)
    for i = 2, 3 do -- each retry waited at least the Retry-After second
      assert.is_true(runs[i].time - runs[i - 1].time >= 1, tostring(runs[i].time - runs[i - 1].time))
    end
    assert.same({ 2, 2 }, { client.stats.throttled, client.stats.server_errors })
    assert.equal(1, f.stats().created)
    assert(aws.destroy(client, sb))

    local impatient = aws.connect(f.config { max_attempts = 2, base_delay = 0.01 })
    f.set { throttle = { RunMicrovm = 5 }, retry_after = 0 }
    local none, msg, code = aws.create(impatient, {})
    assert.is_nil(none)
    assert.equal('HTTP_429', code)
    assert.matches('ThrottlingException: Rate exceeded', msg)
    f.set { throttle = {} }
    -- a client error is not retried
    f.set { max_live = 1 }
    local one = assert(aws.create(client, {}))
    local n = #by_op(f, 'RunMicrovm')
    none, msg, code = aws.create(client, {})
    assert.is_nil(none)
    assert.equal('HTTP_402', code)
    assert.matches('ServiceQuotaExceededException', msg)
    assert.equal(n + 1, #by_op(f, 'RunMicrovm'))
    assert(aws.destroy(client, one))
    assert.equal(0, f.stats().live)
  end)

  it('waits for the endpoint to answer, not only for RUNNING', function()
    f.set { pending_seconds = 0.3, endpoint_lag = 0.5 }
    local client = aws.connect(f.config())
    local sb = assert(aws.create(client, {}))
    assert.equal(0, assert(aws.exec(client, sb, 'true')).code)
    assert.is_true(f.stats().counts.GetMicrovm >= 2)
    assert(aws.destroy(client, sb))
  end)

  it('terminates the microVM when it never becomes ready, and reports why', function()
    local client = aws.connect(f.config { ready_timeout = 0.5 })
    f.set { pending_seconds = 3600 }
    local sb, msg, code = aws.create(client, {})
    assert.is_nil(sb)
    assert.equal('ETIMEDOUT', code)
    assert.matches('not RUNNING', msg)
    local s = f.stats()
    assert.same({ 1, 0 }, { s.created, s.live })
  end)

  it("lists one run's microVMs by tag across pages; terminated ones are not listed", function()
    f.set { page_size = 2 }
    local client = aws.connect(f.config())
    local mine, theirs = {}, {}
    for i = 1, 3 do mine[i] = assert(aws.create(client, { labels = labels('run-A', 't' .. i) })) end
    for i = 1, 2 do theirs[i] = assert(aws.create(client, { labels = labels('run-B', 't' .. i) })) end
    assert(aws.destroy(client, theirs[2]))
    local lists0 = f.stats().counts.ListMicrovms or 0
    local found = assert(aws.list(client, { labels = { ['cseng.run'] = 'run-A' } }))
    assert.same(vendor.sorted_ids(mine), vendor.sorted_ids(found))
    assert.equal(3, f.stats().counts.ListMicrovms - lists0) -- 5 microVMs, pages of 2
    assert.equal('run-A', found[1].labels['cseng.run'])
    assert.is_number(found[1].created)
    assert.equal(4, #assert(aws.list(client, {})))
    for _, sb in ipairs(mine) do assert(aws.destroy(client, sb)) end
    assert(aws.destroy(client, theirs[1]))
  end)

  it('names what is missing: credentials in connect, the image id in create', function()
    local ok, err = pcall(aws.connect, { getenv = function(k) return ({ HOME = '/nonexistent' })[k] end })
    assert.is_false(ok)
    assert.matches('AWS_ACCESS_KEY_ID', err)
    assert.not_matches('\n', err)
    local env = f.env { AWS_MICROVM_IMAGE_ID = '' }
    local client = aws.connect { getenv = function(k) return env[k] end }
    local sb, msg, code = aws.create(client, {})
    assert.is_nil(sb)
    assert.equal('ECONFIG', code)
    assert.matches('AWS_MICROVM_IMAGE_ID', msg)
    assert.equal(0, f.stats().creates)
  end)

  it('derives the endpoint from the region, overridable by AWS_ENDPOINT_URL_LAMBDA', function()
    local base = { AWS_ACCESS_KEY_ID = 'AKIDX', AWS_SECRET_ACCESS_KEY = 'secret-x', AWS_REGION = 'eu-west-1' }
    local c = aws.connect { getenv = function(k) return base[k] end }
    assert.equal('https://lambda.eu-west-1.amazonaws.com', c.endpoint)
    assert.equal('https://s3.eu-west-1.amazonaws.com', c.s3_endpoint)
    base.AWS_ENDPOINT_URL_LAMBDA = 'http://127.0.0.1:1/'
    assert.equal('http://127.0.0.1:1', aws.connect({ getenv = function(k) return base[k] end }).endpoint)
    base.AWS_MICROVM_ENDPOINT_URL = 'http://127.0.0.1:2'
    assert.equal('http://127.0.0.1:2', aws.connect({ getenv = function(k) return base[k] end }).endpoint)
  end)
end)

describe('aws-microvm prewarm (the image) against the fake', function()
  local f
  before_each(function() agents(); f = awsfake.start { agent = AGENT, switches = { run_artifact = true } } end)
  after_each(function() if f then f.close() end end)

  it('zips the aarch64 agent with its Dockerfile, uploads it, builds the image and runs it under qemu', function()
    local client = aws.connect(f.config())
    local lines = {}
    local arn = assert(aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT_ARM,
                                                   log = function(l) lines[#lines + 1] = l end }))
    assert.matches('^arn:aws:lambda:us%-east%-1:123456789012:microvm%-image:cseng%-agent%-%x+$', arn)
    local img = by_op(f, 'CreateMicrovmImage')[1].body
    assert.equal(ROLE, img.buildRoleArn)
    assert.matches('^s3://cseng%-test%-bucket/cseng/microvm%-agent%-%x+%.zip$', img.codeArtifact.uri)
    assert.same({ { architecture = 'ARM_64' } }, img.cpuConfigurations)
    assert.equal(8080, img.hooks.port)
    assert.equal('arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1', img.baseImageArn)
    local put = by_op(f, 'S3PutObject')[1]
    assert.matches('^AWS4%-HMAC%-SHA256 Credential=[^/]+/%d+/us%-east%-1/s3/aws4_request', put.headers.authorization)
    assert.is_string(put.headers['x-amz-content-sha256'])
    -- the zip is one any reader accepts: libarchive lists the Dockerfile and the agent
    local zipped = aws_build.zip { { name = 'Dockerfile', data = 'FROM x\n' }, { name = 'a', data = 'b', mode = '755' } }
    local listed = assert(require('cseng.archive').list(zipped, { from = 'bytes' }))
    assert.same({ 'Dockerfile', 'a' }, { listed[1].path, listed[2].path })
    assert.equal(tonumber('755', 8), listed[2].mode & tonumber('777', 8))
    -- the same agent again: the same image, no second build
    assert.equal(arn, assert(aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT_ARM })))
    assert.equal(2, #by_op(f, 'CreateMicrovmImage')) -- the same clientToken: the image made before
    local built = 0
    for name in pairs(f.stats().images) do if name:match('^cseng%-agent%-') then built = built + 1 end end
    assert.equal(1, built)
    assert.same({ '/ready' }, f.stats().hooks)
    -- a microVM of that image: its agent is the aarch64 build, under qemu-aarch64
    local c2 = aws.connect(f.config { image_id = arn })
    local sb = assert(aws.create(c2, {}))
    local r = assert(aws_wire.agent(c2, sb, 'GET', '/health'))
    assert.equal('aarch64', cjson.decode(r.body).arch)
    assert.equal('ok\n', assert(aws.exec(c2, sb, 'echo ok')).stdout)
    assert(aws.destroy(c2, sb))
  end)

  it('reports a failed build with its reason; refuses a binary that is not aarch64', function()
    local client = aws.connect(f.config())
    f.set { image_fail = true }
    local arn, msg, code = aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT_ARM })
    assert.is_nil(arn)
    assert.equal('EBUILD', code)
    assert.matches('CREATE_FAILED: forced build failure', msg)
    arn, msg, code = aws.prewarm_image(client, { bucket = f.bucket, build_role_arn = ROLE, agent = AGENT })
    assert.is_nil(arn)
    assert.equal('EBUILD', code)
    assert.matches('not an aarch64 ELF', msg)
    arn, msg = aws.prewarm_image(client, { build_role_arn = ROLE, agent = AGENT_ARM })
    assert.is_nil(arn)
    assert.matches('%-%-aws%-bucket', msg)
  end)
end)

describe('the runner on the aws-microvm fake', function()
  local f, tmp
  local UNSET = { AWS_ACCESS_KEY_ID = false, AWS_SECRET_ACCESS_KEY = false, AWS_SESSION_TOKEN = false, AWS_PROFILE = false,
                  AWS_REGION = false, AWS_DEFAULT_REGION = false, AWS_MICROVM_IMAGE_ID = false,
                  AWS_MICROVM_ENDPOINT_URL = false, AWS_ENDPOINT_URL = false, AWS_ENDPOINT_URL_LAMBDA = false }
  setup(function()
    f = awsfake.start { agent = agents() }
    tmp = assert(fs.tempdir('aws-runner-'))
  end)
  teardown(function()
    if f then f.close() end
    if tmp then fs.remove_tree(tmp) end
  end)

  local function env_file(extra)
    local lines = {}
    for k, v in pairs(f.env(extra)) do lines[#lines + 1] = k .. '=' .. v end
    local p = tmp .. '/aws-' .. crypto.hex(crypto.random_bytes(3)) .. '.env'
    assert(fs.write(p, table.concat(lines, '\n') .. '\n'))
    return p
  end

  local function cseng(args, timeout)
    local argv = { ROOT .. '/cseng' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(proc.run { argv = argv, cwd = ROOT, timeout = timeout or 900, env_add = UNSET })
  end

  local function summary_of(out)
    for _, name in ipairs(fs.list(out) or {}) do
      if name:match('%.json$') then return cjson.decode((assert(fs.read(out .. '/' .. name)))) end
    end
  end

  local function files_free_of(out, secrets)
    local n = 0
    for _, e in ipairs(fs.walk(out)) do
      if e.type == 'file' then
        local data = assert(fs.read(out .. '/' .. e.path))
        n = n + 1
        for _, s in ipairs(secrets) do assert.is_nil(data:find(s, 1, true), e.path) end
      end
    end
    return n
  end

  it('passes the covering tasks with gold, and none of them with nop; every microVM terminated', function()
    -- the tasks that cover every kind of environment and file the dataset has (every task's gold
    -- and nop runs: spec/run/tasks_spec.lua, spec/providers/docker/docker_spec.lua)
    local cover = vendor.covering_tasks()
    local ntasks = #cover
    local out = tmp .. '/gold'
    local r = cseng { 'run', 'plans/cold-gold.lua', '--provider', 'aws-microvm', '--env-file', env_file(), '--output', out,
                      '--quiet', '--concurrency', '2', '--tasks', table.concat(cover, ',') }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local summary = summary_of(out)
    assert.equal('aws-microvm', summary.provider)
    assert.equal(ntasks, #summary.results)
    assert.equal(ntasks, summary.passed, jsonl.encode(summary))
    local s = f.stats()
    assert.same({ ntasks, ntasks, 0 }, { s.created, s.terminated, s.live })
    assert.is_true(files_free_of(out, { f.secret }) >= 2)

    out = tmp .. '/nop'
    r = cseng { 'run', 'plans/cold-gold.lua', '--provider', 'aws-microvm', '--env-file', env_file(), '--output', out,
                '--quiet', '--concurrency', '2', '--solver', 'nop', '--tasks', table.concat(cover, ',') }
    assert.equal(0, r.code, r.stderr)
    summary = summary_of(out)
    assert.equal(#cover, #summary.results)
    assert.equal(0, summary.passed)
    for _, t in ipairs(summary.results) do assert.is_nil(t.error, jsonl.encode(t)) end
    s = f.stats()
    assert.same({ ntasks + #cover, ntasks + #cover, 0 }, { s.created, s.terminated, s.live })
  end)

  it('runs the startup arena: every trial ok, every microVM terminated', function()
    local before = f.stats()
    local out = tmp .. '/startup'
    local r = cseng { 'run', 'plans/startup.lua', '--providers', 'aws-microvm', '--samples', '4', '--warmups', '1',
                      '--env-file', env_file(), '--output', out, '--quiet' }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local trials = 0
    for _, name in ipairs(fs.list(out)) do
      if name:match('%.jsonl$') then
        for line in assert(fs.read(out .. '/' .. name)):gmatch('[^\n]+') do
          local e = cjson.decode(line)
          if e.event == 'startup_trial' then
            trials = trials + 1
            assert.is_true(e.ok, line)
            assert.is_true(e.cleanup_ok, line)
          end
        end
      end
    end
    assert.equal(5, trials)
    local s = f.stats()
    assert.same({ 5, 0 }, { s.created - before.created, s.live })
  end)

  it('kill -9 mid-run, then cseng cleanup --provider aws-microvm: no microVM of the run is left', function()
    local out = tmp .. '/killed'
    local p = assert(proc.spawn { argv = { ROOT .. '/cseng', 'run', 'plans/cold-gold.lua', '--provider', 'aws-microvm',
      '--env-file', env_file(), '--output', out, '--quiet', '--concurrency', '2' }, cwd = ROOT, env_add = UNSET })
    local live
    for _ = 1, 6000 do -- until trials are under way (two microVMs live)
      live = f.stats().live
      if live >= 2 then break end
      task.sleep(0.01)
    end
    assert.is_true(live >= 1, 'no microVM came up')
    p:kill('KILL')
    p:wait()
    p:close()
    local vms = f.microvms()
    local run_id
    for _, m in ipairs(vms) do
      if m.state ~= 'TERMINATED' then run_id = run_id or m.tags['cseng.run'] end
    end
    assert.is_string(run_id)
    local r = cseng { 'cleanup', '--provider', 'aws-microvm', '--run', run_id, '--env-file', env_file() }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    assert.matches('destroyed', r.stdout)
    for _, m in ipairs(f.microvms()) do
      if m.tags['cseng.run'] == run_id then assert.equal('TERMINATED', m.state, m.id) end
    end
    assert.equal(0, f.stats().live)
  end)

  it('cseng prewarm prints AWS_MICROVM_IMAGE_ID, and a run on that image passes', function()
    local r = cseng { 'prewarm', '--provider', 'aws-microvm', '--aws-bucket', f.bucket, '--aws-build-role-arn', ROLE,
                      '--env-file', env_file { AWS_MICROVM_AGENT_BINARY = AGENT_ARM } }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local arn = r.stdout:match('AWS_MICROVM_IMAGE_ID=(arn:%S+)')
    assert.is_string(arn, r.stdout)
    local out = tmp .. '/prewarmed'
    local i = vendor.smoke_index('bash-template-render')
    r = cseng { 'run', 'plans/cold-gold.lua', '--provider', 'aws-microvm', '--task-index', tostring(i), '--task-limit', '1',
                '--env-file', env_file { AWS_MICROVM_IMAGE_ID = arn }, '--output', out, '--quiet' }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    assert.equal(1, summary_of(out).passed)
    local runs = by_op(f, 'RunMicrovm')
    assert.equal(arn, runs[#runs].body.imageIdentifier)
    -- a prewarm without its flags is one clear line
    r = cseng { 'prewarm', '--provider', 'aws-microvm', '--env-file', env_file() }
    assert.equal(1, r.code)
    assert.matches('%-%-aws%-bucket', r.stderr)
  end)
end)
