-- AWS SigV4 (lua/cseng/lib/aws/sigv4.lua) and credentials (lua/cseng/lib/aws/credentials.lua):
--   * every case of AWS's own test suite (../shared/data/aws-sigv4-test-suite, aws-c-auth's v4
--     suite), header and query signing: canonical request, string to sign, signature, and the
--     signed request's Authorization header / query parameters; read from ../shared at test time;
--   * a cross-check against botocore (Debian's python3-botocore, through
--     spec/providers/aws_microvm/sigv4_verify.py): same Authorization for the same requests, and its
--     verifier accepts ours and refuses a wrong secret or a changed header;
--   * credentials from the environment and from the shared config/credentials files.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local jsonl = require('cseng.lib.jsonl')
local sigv4 = require('cseng.lib.aws.sigv4')
local credentials = require('cseng.lib.aws.credentials')

local ROOT = sys.root()
local SUITE = ROOT .. '/../shared/data/aws-sigv4-test-suite'
local VERIFY = ROOT .. '/spec/providers/aws_microvm/sigv4_verify.py'
-- Debian's interpreter, whose dist-packages hold python3-botocore (a pyenv python3 on PATH may not)
local PYTHON = fs.exists('/usr/bin/python3') and '/usr/bin/python3' or 'python3'

local function read(path) return assert(fs.read(path)) end

-- request.txt: "METHOD PATH HTTP/1.1", "Name:value" lines (a line starting with whitespace
-- continues the previous value), a blank line, the body.
local function parse_request(text)
  local head, body = text:match('^(.-)\n\n(.*)$')
  if not head then head, body = text:gsub('\n$', ''), '' end
  local lines = {}
  for line in (head .. '\n'):gmatch('(.-)\n') do lines[#lines + 1] = line end
  local method, path = lines[1]:match('^(%S+) (.-) HTTP/1%.1$')
  assert(method, 'bad request line: ' .. lines[1])
  local headers = {}
  for i = 2, #lines do
    local l = lines[i]
    if l:match('^%s') then
      local last = headers[#headers]
      last[2] = last[2] .. '\n' .. l
    else
      local n, v = l:match('^([^:]+):(.*)$')
      assert(n, 'bad header line: ' .. l)
      headers[#headers + 1] = { n, v }
    end
  end
  local host
  for _, h in ipairs(headers) do
    if h[1]:lower() == 'host' then host = h[2] end
  end
  return { method = method, path = path, headers = headers, body = body, url = 'https://' .. host .. path }
end

local function cases()
  local out = {}
  for _, name in ipairs(assert(fs.list(SUITE))) do
    if fs.exists(SUITE .. '/' .. name .. '/context.json') then out[#out + 1] = name end
  end
  return out
end

local function signing_args(dir)
  local ctx = jsonl.decode(read(dir .. '/context.json'))
  local req = parse_request(read(dir .. '/request.txt'))
  return {
    method = req.method, url = req.url, headers = req.headers, body = req.body,
    region = ctx.region, service = ctx.service,
    access_key_id = ctx.credentials.access_key_id, secret_access_key = ctx.credentials.secret_access_key,
    session_token = ctx.credentials.token, timestamp = ctx.timestamp,
    normalize = ctx.normalize, content_sha256 = ctx.sign_body, omit_session_token = ctx.omit_session_token,
    expires = ctx.expiration_in_seconds,
  }
end

local function header_of(signed_request, name)
  for line in signed_request:gmatch('[^\n]+') do
    local n, v = line:match('^([^:]+):(.*)$')
    if n and n:lower() == name:lower() then return v end
  end
end

local function query_params(url)
  local q = url:match('%?([^ ]*)') or ''
  local t = {}
  for part in q:gmatch('[^&]+') do
    local k, v = part:match('^([^=]*)=?(.*)$')
    t[k] = v
  end
  return t
end

local function python(mode, items)
  local r = assert(proc.run { argv = { PYTHON, VERIFY, mode }, stdin = jsonl.encode(items), timeout = 120 })
  assert(r.code == 0, 'sigv4_verify.py failed: ' .. r.stderr)
  return jsonl.decode(r.stdout)
end

describe('aws.sigv4: the AWS test suite', function()
  local names = cases()

  it('finds the suite in ../shared', function()
    assert.is_true(#names > 0, 'no case under ' .. SUITE)
  end)

  for _, name in ipairs(names) do
    local dir = SUITE .. '/' .. name
    it('header signing: ' .. name, function()
      local args = signing_args(dir)
      local add, info = sigv4.sign(args)
      assert.equal(read(dir .. '/header-canonical-request.txt'), info.canonical_request)
      assert.equal(read(dir .. '/header-string-to-sign.txt'), info.string_to_sign)
      assert.equal(read(dir .. '/header-signature.txt'), info.signature)
      local sreq = read(dir .. '/header-signed-request.txt')
      assert.equal(header_of(sreq, 'Authorization'), add.Authorization)
      assert.equal(header_of(sreq, 'X-Amz-Date'), add['X-Amz-Date'])
      assert.equal(header_of(sreq, 'X-Amz-Security-Token'), add['X-Amz-Security-Token'])
      if args.content_sha256 then
        assert.equal(header_of(sreq, 'X-Amz-Content-Sha256'), add['X-Amz-Content-Sha256'])
      end
    end)

    it('query signing: ' .. name, function()
      local args = signing_args(dir)
      local url, info = sigv4.presign(args)
      assert.equal(read(dir .. '/query-canonical-request.txt'), info.canonical_request)
      assert.equal(read(dir .. '/query-string-to-sign.txt'), info.string_to_sign)
      assert.equal(read(dir .. '/query-signature.txt'), info.signature)
      local want = query_params(read(dir .. '/query-signed-request.txt'):match('^[^\n]*'))
      local got = query_params(url)
      for _, k in ipairs { 'X-Amz-Algorithm', 'X-Amz-Credential', 'X-Amz-Date', 'X-Amz-SignedHeaders',
                           'X-Amz-Expires', 'X-Amz-Security-Token', 'X-Amz-Signature' } do
        assert.equal(want[k], got[k], k)
      end
    end)
  end
end)

describe('aws.sigv4: rules', function()
  local base = { region = 'us-east-1', access_key_id = 'AKIDEXAMPLE', secret_access_key = 'secret',
                 timestamp = '20260101T000000Z' }
  local function with(t)
    local r = {}
    for k, v in pairs(base) do r[k] = v end
    for k, v in pairs(t) do r[k] = v end
    return r
  end

  it('double-encodes the path for services other than S3 and keeps it for S3', function()
    local _, a = sigv4.sign(with { method = 'GET', service = 'lambda', url = 'https://h/a%20b/c' })
    assert.equal('/a%2520b/c', a.canonical_request:match('^GET\n([^\n]*)'))
    local _, b = sigv4.sign(with { method = 'GET', service = 's3', url = 'https://h/a%20b//./c' })
    assert.equal('/a%20b//./c', b.canonical_request:match('^GET\n([^\n]*)'))
    -- S3: %XX kept, raw bytes that cannot appear encoded once, a stray '%' encoded
    assert.equal('/a%20bz/z%20z%252/%E1%88%B4', sigv4.canonical_uri('/a%20bz/z z%2/\xe1\x88\xb4', true))
    assert.equal('/a%2520bz/z%20z%252', sigv4.canonical_uri('/a%20bz/z z%2', false))
  end)

  it('adds X-Amz-Content-Sha256 for S3 (UNSIGNED-PAYLOAD when asked) and a session token', function()
    local add = sigv4.sign(with { method = 'PUT', service = 's3', url = 'https://b.s3.amazonaws.com/k', body = 'x',
                                  session_token = 'TOKEN' })
    assert.equal(require('cseng.crypto').sha256_hex('x'), add['X-Amz-Content-Sha256'])
    assert.equal('TOKEN', add['X-Amz-Security-Token'])
    assert.matches('SignedHeaders=host;x%-amz%-content%-sha256;x%-amz%-date;x%-amz%-security%-token', add.Authorization)
    add = sigv4.sign(with { method = 'PUT', service = 's3', url = 'https://b/k', body = 'x', unsigned_payload = true })
    assert.equal('UNSIGNED-PAYLOAD', add['X-Amz-Content-Sha256'])
    add = sigv4.sign(with { method = 'GET', service = 'lambda', url = 'https://h/' })
    assert.is_nil(add['X-Amz-Content-Sha256'])
    assert.is_nil(add['X-Amz-Security-Token'])
  end)

  it('drops default ports from Host and keeps others', function()
    local _, a = sigv4.sign(with { method = 'GET', service = 'x', url = 'https://H.example:443/' })
    assert.matches('\nhost:h.example\n', a.canonical_request)
    _, a = sigv4.sign(with { method = 'GET', service = 'x', url = 'http://127.0.0.1:8123/' })
    assert.matches('\nhost:127.0.0.1:8123\n', a.canonical_request)
  end)

  it('raises a clear error on a missing field', function()
    local ok, err = pcall(sigv4.sign, { method = 'GET', url = 'https://h/', region = 'r', service = 's' })
    assert.is_false(ok)
    assert.equal('EINVAL', err.code)
    assert.equal('sigv4: field access_key_id is missing or not a string', err.message)
    assert.has_error(function() sigv4.sign(with { method = 'GET', service = 's', url = '/relative' }) end)
  end)
end)

describe('aws.sigv4 against botocore', function()
  local creds = { access_key_id = 'AKIDCSENGTEST', secret_access_key = 'c2VjcmV0/+key' }
  local requests = {
    { method = 'POST', url = 'https://lambda.us-east-1.amazonaws.com/2025-09-09/microvms', service = 'lambda',
      headers = { { 'Content-Type', 'application/json' } }, body = '{"imageIdentifier":"img-1","clientToken":"t-1"}' },
    { method = 'GET', url = 'https://lambda.eu-west-1.amazonaws.com/2025-09-09/microvms?maxResults=10&nextToken=a%2Fb%3D',
      service = 'lambda', region = 'eu-west-1' },
    { method = 'DELETE', url = 'http://127.0.0.1:40123/2025-09-09/microvms/mvm-0123', service = 'lambda',
      session_token = 'FQoGZXIvYXdzEXAMPLE//token+/=' },
    { method = 'POST', url = 'https://lambda.us-east-1.amazonaws.com/2025-09-09/microvms/mvm%3A1/auth-token',
      service = 'lambda', headers = { { 'Content-Type', 'application/json' }, { 'X-Custom', '  a   b  ' } },
      body = '{"allowedPorts":[8080],"expirationInMinutes":60}' },
    { method = 'PUT', url = 'https://bucket.s3.us-east-1.amazonaws.com/cseng/agent%20v1/artifact.zip', service = 's3',
      headers = { { 'Content-Type', 'application/zip' } }, body = string.rep('\1\2\3', 1000) },
    { method = 'GET', url = 'http://127.0.0.1:9000/bucket/key?list-type=2&prefix=a%20b', service = 's3',
      session_token = 'tok' },
  }
  local function args(r)
    return {
      method = r.method, url = r.url, headers = r.headers or {}, body = r.body or '', region = r.region or 'us-east-1',
      service = r.service, access_key_id = creds.access_key_id, secret_access_key = creds.secret_access_key,
      session_token = r.session_token, timestamp = '20261201T081500Z',
    }
  end

  it('signs the same requests to the same Authorization', function()
    local items, ours = {}, {}
    for i, r in ipairs(requests) do
      items[i] = args(r)
      local add, info = sigv4.sign(items[i])
      ours[i] = { add = add, info = info }
    end
    local theirs = python('sign', items)
    assert.equal(#requests, #theirs)
    for i = 1, #requests do
      assert.equal(theirs[i].canonical_request, ours[i].info.canonical_request, requests[i].url)
      assert.equal(theirs[i].authorization, ours[i].add.Authorization, requests[i].url)
    end
  end)

  it('passes botocore verification, and a wrong secret or a changed header fails it', function()
    local function raw(r, add)
      local _, host, path, query = sigv4.parse_url(r.url)
      local headers = { { 'Host', host } }
      for _, h in ipairs(r.headers or {}) do headers[#headers + 1] = { h[1], h[2] } end
      local names = {}
      for k in pairs(add) do names[#names + 1] = k end
      table.sort(names)
      for _, k in ipairs(names) do headers[#headers + 1] = { k, add[k] } end
      return { method = r.method, path = path, query = query, headers = headers, body = r.body or '',
               keys = { [creds.access_key_id] = creds.secret_access_key }, service = r.service }
    end
    local items = {}
    for _, r in ipairs(requests) do
      local a = args(r)
      local add = sigv4.sign(a)
      items[#items + 1] = raw(r, add)
      -- wrong secret
      local b = args(r); b.secret_access_key = 'not-the-secret'
      items[#items + 1] = raw(r, (sigv4.sign(b)))
      -- a changed header value after signing
      local changed = raw(r, add)
      for _, h in ipairs(changed.headers) do
        if h[1] == 'X-Amz-Date' then h[2] = '20261201T081501Z' end
      end
      items[#items + 1] = changed
      -- a changed body
      local body = raw(r, add)
      body.body = (body.body or '') .. 'x'
      items[#items + 1] = body
    end
    local res = python('verify', items)
    for i, r in ipairs(requests) do
      local base_i = (i - 1) * 4
      assert.is_true(res[base_i + 1].ok, r.url .. ': ' .. tostring(res[base_i + 1].reason))
      assert.is_false(res[base_i + 2].ok, r.url)
      assert.equal('signature mismatch', res[base_i + 2].reason)
      assert.is_false(res[base_i + 3].ok, r.url)
      assert.is_false(res[base_i + 4].ok, r.url)
      assert.matches(r.service == 's3' and 'X%-Amz%-Content%-Sha256 does not match the body' or 'signature mismatch',
        res[base_i + 4].reason)
    end
  end)
end)

describe('aws.credentials', function()
  local dir
  before_each(function() dir = assert(fs.tempdir('cseng-awscreds-')) end)
  after_each(function() fs.remove_tree(dir) end)

  local function env(t) return function(k) return t[k] end end

  it('reads the environment first', function()
    local c = assert(credentials.resolve { getenv = env {
      AWS_ACCESS_KEY_ID = 'AKENV', AWS_SECRET_ACCESS_KEY = 'SENV', AWS_SESSION_TOKEN = 'TENV', AWS_REGION = 'eu-west-3',
      AWS_DEFAULT_REGION = 'us-west-2', HOME = dir } })
    assert.same({ access_key_id = 'AKENV', secret_access_key = 'SENV', session_token = 'TENV', region = 'eu-west-3',
                  source = 'environment' }, c)
    c = assert(credentials.resolve { getenv = env {
      AWS_ACCESS_KEY_ID = 'AKENV', AWS_SECRET_ACCESS_KEY = 'SENV', AWS_DEFAULT_REGION = 'us-west-2', HOME = dir } })
    assert.equal('us-west-2', c.region)
    assert.is_nil(c.session_token)
  end)

  it('reads ~/.aws/credentials and ~/.aws/config with AWS_PROFILE, [profile x] in config', function()
    assert(fs.mkdir_p(dir .. '/.aws'))
    assert(fs.write(dir .. '/.aws/credentials', table.concat({
      '# comment', '[default]', 'aws_access_key_id = AKDEF', 'aws_secret_access_key = SDEF', '',
      '[work]', 'aws_access_key_id=AKWORK', '  aws_secret_access_key =  SWORK  ', 'aws_session_token = TWORK', '',
    }, '\n')))
    assert(fs.write(dir .. '/.aws/config', table.concat({
      '[default]', 'region = us-east-2', '[profile work]', 'region = ap-south-1',
      '[profile cfgonly]', 'aws_access_key_id = AKCFG', 'aws_secret_access_key = SCFG', 'region = sa-east-1', '',
    }, '\n')))
    local c = assert(credentials.resolve { getenv = env { HOME = dir } })
    assert.same({ access_key_id = 'AKDEF', secret_access_key = 'SDEF', region = 'us-east-2',
                  source = 'profile default' }, c)
    c = assert(credentials.resolve { getenv = env { HOME = dir, AWS_PROFILE = 'work' } })
    assert.same({ access_key_id = 'AKWORK', secret_access_key = 'SWORK', session_token = 'TWORK',
                  region = 'ap-south-1', source = 'profile work' }, c)
    c = assert(credentials.resolve { getenv = env { HOME = dir }, profile = 'cfgonly' })
    assert.equal('AKCFG', c.access_key_id)
    assert.equal('sa-east-1', c.region)
    -- the environment's region beats the profile's
    c = assert(credentials.resolve { getenv = env { HOME = dir, AWS_PROFILE = 'work', AWS_REGION = 'eu-north-1' } })
    assert.equal('eu-north-1', c.region)
  end)

  it('honours AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE', function()
    assert(fs.write(dir .. '/creds', '[p]\naws_access_key_id = AKF\naws_secret_access_key = SF\n'))
    assert(fs.write(dir .. '/cfg', '[profile p]\nregion = ca-central-1\n'))
    local c = assert(credentials.resolve { getenv = env {
      HOME = dir .. '/nowhere', AWS_SHARED_CREDENTIALS_FILE = dir .. '/creds', AWS_CONFIG_FILE = dir .. '/cfg',
      AWS_PROFILE = 'p' } })
    assert.same({ access_key_id = 'AKF', secret_access_key = 'SF', region = 'ca-central-1', source = 'profile p' }, c)
  end)

  it('names what is missing and never prints a secret', function()
    local c, err = credentials.resolve { getenv = env { HOME = dir } }
    assert.is_nil(c)
    assert.matches('AWS_ACCESS_KEY_ID', err)
    assert.matches(dir .. '/.aws/credentials', err, 1, true)
    c, err = credentials.resolve { getenv = env { HOME = dir, AWS_ACCESS_KEY_ID = 'AKONLY',
                                                  AWS_SECRET_ACCESS_KEY = '' } }
    assert.is_nil(c)
    assert.matches('AWS_SECRET_ACCESS_KEY', err)
    assert(fs.write(dir .. '/creds', '[x]\naws_secret_access_key = TOPSECRET\n'))
    c, err = credentials.resolve { getenv = env { HOME = dir, AWS_SHARED_CREDENTIALS_FILE = dir .. '/creds',
                                                  AWS_PROFILE = 'x' } }
    assert.is_nil(c)
    assert.matches('aws_access_key_id', err)
    assert.is_nil(err:find('TOPSECRET', 1, true))
    c, err = credentials.resolve { getenv = env { HOME = dir, AWS_PROFILE = 'absent' } }
    assert.is_nil(c)
    assert.matches("profile 'absent'", err)
    -- no region anywhere
    c, err = credentials.resolve { getenv = env { HOME = dir, AWS_ACCESS_KEY_ID = 'A', AWS_SECRET_ACCESS_KEY = 'S' },
                                   require_region = true }
    assert.is_nil(c)
    assert.matches('AWS_REGION', err)
    -- a credentials table's tostring hides the secret
    c = assert(credentials.resolve { getenv = env { AWS_ACCESS_KEY_ID = 'A', AWS_SECRET_ACCESS_KEY = 'S3CR3T' } })
    assert.is_nil(credentials.describe(c):find('S3CR3T', 1, true))
  end)

  it('reports a malformed file with its name and line', function()
    assert(fs.write(dir .. '/creds', '[p]\nthis line has no equals sign\n'))
    local c, err = credentials.resolve { getenv = env { HOME = dir, AWS_SHARED_CREDENTIALS_FILE = dir .. '/creds',
                                                        AWS_PROFILE = 'p' } }
    assert.is_nil(c)
    assert.matches(dir .. '/creds:2', err, 1, true)
  end)
end)
