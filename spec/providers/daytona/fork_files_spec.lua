-- The Daytona adapter's fork (POST /sandbox/{id}/fork, one child per call; GET /sandbox/{id}/forks)
-- and bulk upload (the toolbox's POST /files/bulk-upload with many files) against the stateful fake
-- (spec/providers/daytona/fake.lua): what each child holds (the parent's files at its call, not later
-- ones), that each is a sandbox of its own, a fork whose second call fails, a fork whose answer was
-- lost, and a bulk upload the daemon partly refuses (daytonaio/daytona #3771: a 400 must be an
-- error with its code and the failed paths, never a silent partial upload). Clock-free: contents,
-- ids and the fake's own counters.
local crypto = require('cseng.crypto')
local daytona = require('providers.daytona')
local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('daytona')
local labels = vendor.labeller('cseng@spec fork')

local function sh(client, sb, cmd)
  return assert(daytona.exec(client, sb, cmd, { timeout = 60, cwd = '/' }))
end

describe('daytona fork (stateful fake)', function()
  local f, client
  before_each(function()
    f = fake.start { start_reads = 1 }
    client = daytona.connect(f.config())
  end)
  after_each(function() f.close() end)

  it('makes N children, each holding the parent\'s files at the call and not later ones', function()
    local sb = assert(daytona.create(client, { labels = labels('fork') }))
    assert.equal(0, sh(client, sb, 'mkdir -p /var/tmp/f && echo before > /var/tmp/f/state && sync').code)
    local kids, err, code = daytona.fork(client, sb, 3, { labels = labels('fork', 'kids') })
    assert(kids, tostring(err) .. ' ' .. tostring(code))
    assert.equal(3, #kids)
    local s = f.stats()
    assert.same({ 3, 3, 0 }, { s.forks, s.forked, s.fork_lists }) -- one call per child; nothing lost
    assert.same({}, s.fork_bodies[1]) -- ForkSandbox without a name, as the SDK sends it
    assert.equal(0, sh(client, sb, 'echo after > /var/tmp/f/later && sync').code)
    local ids = { [sb.id] = true }
    for _, k in ipairs(kids) do
      assert.is_nil(ids[k.id], 'a child reuses an id')
      ids[k.id] = true
      assert.equal('started', k.state) -- waited for, as the SDK's fork waits
      assert.equal('before\n', sh(client, k, 'cat /var/tmp/f/state').stdout)
      assert.equal('absent\n', sh(client, k, 'test -e /var/tmp/f/later && echo present || echo absent').stdout)
    end
    assert.equal(0, sh(client, kids[1], 'echo mine > /var/tmp/f/child').code)
    assert.equal('absent\n', sh(client, sb, 'test -e /var/tmp/f/child && echo present || echo absent').stdout)
    assert(daytona.destroy(client, kids[1]))
    assert.equal('before\n', sh(client, kids[2], 'cat /var/tmp/f/state').stdout)
    for i = 2, 3 do assert(daytona.destroy(client, kids[i])) end
    assert(daytona.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)

  it('reports a fork whose second call is refused, with the children that were made', function()
    local sb = assert(daytona.create(client, { labels = labels('fork-partial') }))
    f.set { fork_status = function(n) return n == 2 and 409 or nil end }
    local kids, err, code, made = daytona.fork(client, sb, 3, { labels = labels('fork-partial', 'kids') })
    assert.is_nil(kids)
    assert.equal('EFORK', code)
    assert.matches('1 of 3 children failed: child 2: daytona: POST ', err, 1, true)
    assert.matches('/sandbox/' .. sb.id .. '/fork: HTTP 409: forced failure 409', err, 1, true)
    assert.equal(2, #made)
    assert.equal(0, f.stats().fork_lists) -- a clear refusal made nothing: no need to look
    for _, k in ipairs(made) do assert(daytona.destroy(client, k)) end
    -- every call refused: the refusal's own code
    f.set { fork_status = 401 }
    kids, err, code, made = daytona.fork(client, sb, 2, {})
    assert.is_nil(kids)
    assert.equal('HTTP_401', code)
    assert.matches('2 of 2 children failed', err, 1, true)
    assert.same({}, made)
    assert(daytona.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)

  it('finds a child whose call failed after it was made (a 5xx) through GET /sandbox/{id}/forks', function()
    local sb = assert(daytona.create(client, { labels = labels('fork-lost') }))
    f.set { lose_fork = function(n) return n == 1 and 'error' or nil end }
    local kids, err, code, made = daytona.fork(client, sb, 2, {})
    assert.is_nil(kids)
    assert.equal('EFORK', code, err)
    assert.equal(2, #made) -- the answered one and the lost one, found by the parent's list
    local s = f.stats()
    assert.same({ 1, 1, 2 }, { s.lost_forks, s.fork_lists, s.forked })
    for _, k in ipairs(made) do assert(daytona.destroy(client, k)) end
    assert(daytona.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)
end)

describe('daytona write_files (toolbox bulk upload, stateful fake)', function()
  local f, client
  before_each(function()
    f = fake.start {}
    client = daytona.connect(f.config())
  end)
  after_each(function() f.close() end)

  it('the fake refuses what the daemon refuses: no files, a path without its file, a file without its path', function()
    local http = require('cseng.http')
    local adapter = require('providers.shared.adapter')
    local wire = require('providers.shared.daytona_wire')
    local sb = assert(daytona.create(client, { labels = labels('bulk-refused') }))
    local function post(parts)
      local body, ct = adapter.form(parts)
      return assert(http.request { method = 'POST', url = wire.toolbox(client, sb, '/files/bulk-upload'),
        headers = { Authorization = 'Bearer ' .. f.api_key, ['Content-Type'] = ct }, body = body })
    end
    local before = f.stats()
    assert.equal(400, post({ { name = 'file', filename = '/tmp/r/a', data = 'a' } }).status)
    assert.equal(400, post({ { name = 'files[0].path', data = '/tmp/r/a' } }).status)
    assert.equal(400, post({ { name = 'files[0].file', filename = '/tmp/r/a', data = 'a' } }).status)
    assert.equal(200, post({ { name = 'files[0].path', data = '/tmp/r/a' },
      { name = 'files[0].file', filename = '/tmp/r/a', data = 'a' } }).status)
    assert.equal(before.bad_requests + 3, f.stats().bad_requests)
    assert.equal('a', sh(client, sb, 'cat /tmp/r/a').stdout)
    assert(daytona.destroy(client, sb))
  end)

  it('sends every file in one request and they arrive intact (count and sha256 manifest), with their modes', function()
    local sb = assert(daytona.create(client, { labels = labels('bulk') }))
    local files, lines = {}, {}
    for i = 1, 40 do
      local path = string.format('/tmp/bulk/d%d/f%03d.bin', i % 4, i)
      files[i] = { path = path, data = crypto.random_bytes(100 + i * 37) }
      lines[#lines + 1] = crypto.sha256_hex(files[i].data) .. '  ' .. path
    end
    files[7].mode = '755'
    table.sort(lines)
    local before = f.stats()
    assert(daytona.write_files(client, sb, files))
    local s = f.stats()
    assert.equal(before.uploads + 1, s.uploads)
    assert.equal(40, s.last_upload_files)
    assert.equal(before.upload_files + 40, s.upload_files)
    local got = {}
    for line in sh(client, sb, 'find /tmp/bulk -type f | LC_ALL=C sort | xargs sha256sum').stdout:gmatch('[^\n]+') do
      got[#got + 1] = line
    end
    table.sort(got)
    assert.same(lines, got)
    assert.equal('755\n', sh(client, sb, 'stat -c %a ' .. files[7].path).stdout)
    assert(daytona.destroy(client, sb))
  end)

  it('a bulk upload the daemon partly refuses (400 {"errors"}) is an error naming the status and the failed paths', function()
    local sb = assert(daytona.create(client, { labels = labels('bulk-400') }))
    f.set { upload_fail = function(_, path) return path:match('f3$') and 'mkdir /tests: permission denied' or nil end }
    local files = {}
    for i = 1, 5 do files[i] = { path = '/tmp/b400/f' .. i, data = 'file ' .. i } end
    local ok, err, code = daytona.write_files(client, sb, files)
    assert.is_nil(ok)
    assert.equal('HTTP_400', code)
    assert.matches('HTTP 400: /tmp/b400/f3: mkdir /tests: permission denied (a bulk upload of 5 files)', err, 1, true)
    -- the daemon wrote the others (a partial upload): the error is what tells the caller
    assert.equal('4\n', sh(client, sb, 'ls /tmp/b400 | wc -l').stdout)
    -- a 400 without a body, as Harbor met it: still the status, never a success
    f.set { upload_fail = false, upload_status = 400 }
    ok, err, code = daytona.write_files(client, sb, files)
    assert.is_nil(ok)
    assert.equal('HTTP_400', code)
    assert.matches('bulk-upload: HTTP 400', err, 1, true)
    f.set { upload_status = false }
    assert(daytona.destroy(client, sb))
  end)
end)

-- Against the official SDK (spec/sdk/daytona_fork_files.mjs): the SDK's fork and uploadFiles pass
-- against the fake, and what the adapter sends for the same steps agrees with what the SDK sent,
-- operation by operation (spec/helpers/conformance.lua's comparison: routes, query keys, headers
-- that matter, body shapes).
describe('daytona fork and bulk upload against the official SDK', function()
  local C = require('spec.helpers.conformance')
  local OPTS = { maps = { 'labels' }, headers = { ['x-daytona-source'] = 'present' } }

  local function only(recs, ops)
    local out = {}
    for _, r in ipairs(recs) do if ops[r.op] then out[#out + 1] = r end end
    return out
  end

  it('sends what the SDK sends for fork and a many-file upload', function()
    local why = C.sdk_missing('@daytonaio/sdk')
    if why then pending(why) return end
    local f = fake.start {}
    local run = 'conf-fork-' .. crypto.hex(crypto.random_bytes(3))
    local out = C.run_sdk('daytona_fork_files.mjs', { DAYTONA_API_URL = f.url, DAYTONA_API_KEY = f.api_key, CSENG_CONF_RUN = run,
      DAYTONA_TARGET = false, DAYTONA_SERVER_URL = false, DAYTONA_JWT_TOKEN = false, DAYTONA_ORGANIZATION_ID = false },
      { fake = f })
    assert.same({ 'parent\n', 'parent\n' }, out.fork.states)
    assert.equal('file 5\n', out.write.back)
    local s = f.stats()
    assert.same({ 2, 2 }, { s.forks, s.forked })
    local client = daytona.connect(f.config())
    f.record('adapter')
    local sb = assert(daytona.create(client, { labels = labels(run), network = false }))
    assert(daytona.write_files(client, sb, { { path = '/tmp/state', data = 'parent\n' } }))
    local kids = assert(daytona.fork(client, sb, 2, { labels = labels(run, 'kids') }))
    local files = {}
    for i = 1, 5 do files[i] = { path = '/tmp/multi/f' .. i .. '.txt', data = 'file ' .. i .. '\n' } end
    assert(daytona.write_files(client, kids[1], files))
    for _, k in ipairs(kids) do assert(daytona.destroy(client, k)) end
    assert(daytona.destroy(client, sb))
    f.record(false)
    local ops = { fork = true, upload = true }
    local sdk_recs, ours = only(f.records('sdk'), ops), only(f.records('adapter'), ops)
    assert.same({ 4, 4 }, { #sdk_recs, #ours }) -- the forks and the uploads of each side
    local diffs = C.compare(sdk_recs, ours, {}, OPTS)
    local s2 = f.stats()
    f.close()
    assert.equal(0, #diffs, C.describe(diffs))
    assert.same({ {}, {}, {}, {} }, s2.fork_bodies) -- ForkSandbox {} on both sides
    assert.same({ 1, 5, 1, 5 }, s2.upload_batches)
  end)
end)
