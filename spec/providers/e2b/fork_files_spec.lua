-- The E2B adapter's fork (POST /sandboxes/{id}/fork) and multi-file upload (envd POST /files with
-- several "file" parts) against the stateful fake (spec/providers/e2b/fake.lua): what each child
-- holds (the parent's files at the call, not later ones), that each is a sandbox of its own, a fork
-- whose children fail one by one, and files that arrive intact in one request. Clock-free: contents,
-- ids and the fake's own counters.
local crypto = require('cseng.crypto')
local e2b = require('providers.e2b')
local vendor = require('spec.helpers.vendor')
local fake = require('spec.fakes').module('e2b')
local labels = vendor.labeller('cseng@spec fork')

local function sh(client, sb, cmd)
  local r = assert(e2b.exec(client, sb, cmd, { timeout = 60, cwd = '/' }))
  return r
end

describe('e2b fork (stateful fake)', function()
  local f, client
  before_each(function()
    f = fake.start {}
    client = e2b.connect(f.config())
  end)
  after_each(function() f.close() end)

  it('makes N children in one call, each holding the parent\'s files at the call and not later ones', function()
    local sb = assert(e2b.create(client, { labels = labels('fork'), ttl_seconds = 900, network = false }))
    assert.equal(0, sh(client, sb, 'mkdir -p /var/tmp/f && echo before > /var/tmp/f/state && sync').code)
    local kids, err, code = e2b.fork(client, sb, 3, { labels = labels('fork', 'kids') })
    assert(kids, tostring(err) .. ' ' .. tostring(code))
    assert.equal(3, #kids)
    -- one request carried the count and the parent's lifetime (the API's default is 15 s)
    local s = f.stats()
    assert.same({ 1, 3 }, { s.forks, s.forked })
    assert.same({ count = 3, timeout = 900 }, s.fork_bodies[1])
    assert.equal(0, sh(client, sb, 'echo after > /var/tmp/f/later && sync').code)
    local ids = { [sb.id] = true }
    for _, k in ipairs(kids) do
      assert.is_nil(ids[k.id], 'a child reuses an id')
      ids[k.id] = true
      assert.equal(sb.id, k.fork_of)
      assert.equal('before\n', sh(client, k, 'cat /var/tmp/f/state').stdout)
      assert.equal('absent\n', sh(client, k, 'test -e /var/tmp/f/later && echo present || echo absent').stdout)
    end
    -- a child is a sandbox of its own: what it writes stays in it; destroying it leaves the others
    assert.equal(0, sh(client, kids[1], 'echo mine > /var/tmp/f/child').code)
    assert.equal('absent\n', sh(client, sb, 'test -e /var/tmp/f/child && echo present || echo absent').stdout)
    assert(e2b.destroy(client, kids[1]))
    assert.equal('before\n', sh(client, kids[2], 'cat /var/tmp/f/state').stdout)
    assert.equal('after\n', sh(client, sb, 'cat /var/tmp/f/later').stdout)
    for i = 2, 3 do assert(e2b.destroy(client, kids[i])) end
    assert(e2b.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)

  it('reports a fork where one child failed, with the children that were made', function()
    f.set { fork_fail = function(i) return i == 2 end }
    local sb = assert(e2b.create(client, { labels = labels('fork-partial'), ttl_seconds = 900 }))
    local kids, err, code, made = e2b.fork(client, sb, 3, { labels = labels('fork-partial', 'kids') })
    assert.is_nil(kids)
    assert.equal('EFORK', code)
    assert.matches('1 of 3 forks failed: fork 2: 500 sandbox_create_failed: injected by the fake: fork 2', err, 1, true)
    assert.equal(2, #made)
    for _, k in ipairs(made) do assert(e2b.destroy(client, k)) end
    -- every fork failing: the failure's own code
    f.set { fork_fail = function() return true end }
    kids, err, code, made = e2b.fork(client, sb, 2, {})
    assert.is_nil(kids)
    assert.equal('HTTP_500', code)
    assert.matches('2 of 2 forks failed', err, 1, true)
    assert.same({}, made)
    -- an unknown parent: the API's 404, nothing made
    kids, err, code = e2b.fork(client, { id = 'inosuchsandbox0001' }, 2, {})
    assert.is_nil(kids)
    assert.equal('HTTP_404', code)
    assert.matches('/fork: HTTP 404', err, 1, true)
    assert(e2b.destroy(client, sb))
    assert.equal(0, f.stats().live)
  end)
end)

describe('e2b write_files (envd multi-file upload, stateful fake)', function()
  local f, client
  before_each(function()
    f = fake.start {}
    client = e2b.connect(f.config())
  end)
  after_each(function() f.close() end)

  it('the fake refuses what envd refuses: no file part, several files to one path, a part without a path', function()
    local http = require('cseng.http')
    local adapter = require('providers.shared.adapter')
    local wire = require('providers.shared.e2b_wire')
    local sb = assert(e2b.create(client, { labels = labels('bulk-refused'), ttl_seconds = 900 }))
    local function post(query, parts)
      local body, ct = adapter.form(parts)
      return assert(http.request { method = 'POST', url = wire.envd_url(client, sb) .. '/files?username=root' .. query,
        headers = wire.envd_headers(client, sb, false, { ['Content-Type'] = ct }), body = body })
    end
    local before = f.stats()
    local a = { name = 'file', filename = '/tmp/r/a', data = 'a' }
    local b = { name = 'file', filename = '/tmp/r/b', data = 'b' }
    assert.equal(400, post('', { { name = 'other', data = 'x' } }).status)
    assert.equal(400, post('&path=/tmp/r/one', { a, b }).status)
    assert.equal(400, post('', { { name = 'file', data = 'no filename' } }).status)
    local ok = post('', { a, b })
    assert.equal(200, ok.status)
    assert.same({ { name = 'a', path = '/tmp/r/a', type = 'file' }, { name = 'b', path = '/tmp/r/b', type = 'file' } },
      require('cjson').decode(ok.body))
    assert.equal(before.bad_requests + 3, f.stats().bad_requests)
    assert.equal('ab', assert(e2b.exec(client, sb, 'cat /tmp/r/a /tmp/r/b')).stdout)
    assert(e2b.destroy(client, sb))
  end)

  it('sends every file in one request and they arrive intact (count and sha256 manifest), with their modes', function()
    local sb = assert(e2b.create(client, { labels = labels('bulk'), ttl_seconds = 900 }))
    local files, lines = {}, {}
    for i = 1, 40 do
      local path = string.format('/tmp/bulk/d%d/f%03d.bin', i % 4, i)
      files[i] = { path = path, data = crypto.random_bytes(100 + i * 37) }
      lines[#lines + 1] = crypto.sha256_hex(files[i].data) .. '  ' .. path
    end
    files[7].mode = '755'
    table.sort(lines)
    local before = f.stats()
    assert(e2b.write_files(client, sb, files))
    local s = f.stats()
    assert.equal(before.uploads + 1, s.uploads) -- one request for the 40
    assert.equal(40, s.last_upload_files)
    assert.equal(before.upload_files + 40, s.upload_files)
    local r = sh(client, sb, 'find /tmp/bulk -type f | LC_ALL=C sort | xargs sha256sum')
    local got = {}
    for line in r.stdout:gmatch('[^\n]+') do got[#got + 1] = line end
    table.sort(got)
    assert.same(lines, got)
    assert.equal('755\n', sh(client, sb, 'stat -c %a ' .. files[7].path).stdout)
    -- one file per call: one request each
    before = f.stats()
    for i = 1, 5 do assert(e2b.write_files(client, sb, { files[i] })) end
    assert.equal(before.uploads + 5, f.stats().uploads)
    assert(e2b.destroy(client, sb))
  end)

  it('splits a bulk upload into requests under max_upload_bytes, and surfaces a refused one with its code', function()
    local small = e2b.connect(f.config { max_upload_bytes = 64 * 1024 })
    local sb = assert(e2b.create(small, { labels = labels('bulk-split'), ttl_seconds = 900 }))
    local files = {}
    for i = 1, 10 do files[i] = { path = '/tmp/split/f' .. i, data = crypto.random_bytes(20 * 1024) } end
    local before = f.stats().uploads
    assert(e2b.write_files(small, sb, files))
    local n = f.stats().uploads - before
    assert.is_true(n >= 4 and n <= 5, tostring(n)) -- 3 files of 20 KiB (and their headers) per 64 KiB
    assert.equal('10\n', sh(small, sb, 'ls /tmp/split | wc -l').stdout)
    -- the fake's limit below the client's: the 413 comes back as the error, never a success
    f.set { max_upload_bytes = 1000 }
    local ok, err, code = e2b.write_files(small, sb, { files[1], files[2] })
    assert.is_nil(ok)
    assert.equal('HTTP_413', code)
    assert.matches('multi-file upload of 2 files', err, 1, true)
    assert(e2b.destroy(small, sb))
  end)
end)

-- Against the official SDK (spec/sdk/e2b_fork_files.mjs): the SDK's fork and multi-file write pass
-- against the fake, and what the adapter sends for the same steps agrees with what the SDK sent,
-- operation by operation (spec/helpers/conformance.lua's comparison: routes, query keys, headers
-- that matter, body shapes).
describe('e2b fork and multi-file upload against the official SDK', function()
  local C = require('spec.helpers.conformance')
  local wire = require('providers.shared.e2b_wire')
  local OPTS = { headers = { ['e2b-sandbox-id'] = 'present' } }

  local function only(recs, ops)
    local out = {}
    for _, r in ipairs(recs) do if ops[r.op] then out[#out + 1] = r end end
    return out
  end

  it('sends what the SDK sends for fork and a multi-file write', function()
    local why = C.sdk_missing('e2b')
    if why then pending(why) return end
    local f = fake.start {}
    local run = 'conf-fork-' .. crypto.hex(crypto.random_bytes(3))
    local out = C.run_sdk('e2b_fork_files.mjs', { E2B_API_URL = f.url, E2B_SANDBOX_URL = f.envd_url, E2B_API_KEY = f.api_key,
      CSENG_CONF_RUN = run, E2B_DEBUG = false, E2B_DOMAIN = false }, { fake = f })
    assert.same({ 'parent\n', 'parent\n' }, out.fork.states)
    assert.same({ entries = 5, back = 'file 5\n' }, out.write)
    local s = f.stats()
    assert.same({ 1, 2 }, { s.forks, s.forked })
    assert.equal(5, s.last_upload_files)
    -- the adapter, the same steps
    local client = e2b.connect(f.config())
    f.record('adapter')
    local sb = assert(e2b.create(client, { labels = labels(run), ttl_seconds = 900, network = false }))
    assert(wire.upload(client, sb, '/tmp/state', 'parent\n')) -- one file: the path parameter, as the SDK's write of one
    local kids = assert(e2b.fork(client, sb, 2, { labels = labels(run, 'kids') }))
    local files = {}
    for i = 1, 5 do files[i] = { path = '/tmp/multi/f' .. i .. '.txt', data = 'file ' .. i .. '\n' } end
    assert(e2b.write_files(client, kids[1], files))
    for _, k in ipairs(kids) do assert(e2b.destroy(client, k)) end
    assert(e2b.destroy(client, sb))
    f.record(false)
    local ops = { fork = true, upload = true }
    local sdk_recs, ours = only(f.records('sdk'), ops), only(f.records('adapter'), ops)
    assert.same({ 3, 3 }, { #sdk_recs, #ours }) -- the forks and the uploads of each side
    local diffs = C.compare(sdk_recs, ours, {}, OPTS)
    local s2 = f.stats()
    f.close()
    assert.equal(0, #diffs, C.describe(diffs))
    assert.same(s2.fork_bodies[1], s2.fork_bodies[2]) -- {count = 2, timeout = 900} both
    assert.same({ 1, 5, 1, 5 }, s2.upload_batches)
  end)
end)
