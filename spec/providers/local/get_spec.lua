-- The local provider's get (a file out of the sandbox) against its cap: 256 MiB, or the engine's
-- response cap where that is larger (the download workload raises it to its largest size, so a
-- 512 MiB download does not fail with EFBIG while the same size over HTTP passes). Contents checked.
local L = require('providers.local')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local shared = require('providers.shared.adapter')

describe('local get', function()
  local client, sb, want
  local SIZE = 256 * 1048576 + 4096
  setup(function()
    client = assert(L.connect({ root = assert(fs.tempdir('cseng-get-spec-')) }))
    sb = assert(L.create(client, { workdir = '/workspace' }))
    local r = assert(L.exec(client, sb, 'head -c ' .. SIZE .. ' /dev/urandom > /tmp/big && sha256sum /tmp/big'))
    want = tostring(r.stdout):match('^(%x+)')
  end)
  teardown(function() if sb then L.destroy(client, sb) end end)

  it('refuses a file over 256 MiB when the response cap is smaller (EFBIG, naming the file)', function()
    local prev = shared.max_body
    shared.max_body = 32 * 1048576
    local data, err, code = L.get(client, sb, '/tmp/big')
    shared.max_body = prev
    assert.is_nil(data)
    assert.equal('EFBIG', code)
    assert.matches('/tmp/big: larger than', err, 1, true)
  end)

  it('reads it whole when the response cap was raised above it', function()
    local prev = shared.max_body
    shared.max_body = SIZE + 1048576
    local data, err = L.get(client, sb, '/tmp/big')
    shared.max_body = prev
    assert.is_string(data, err)
    assert.equal(SIZE, #data)
    assert.equal(want, crypto.sha256_hex(data))
  end)
end)
