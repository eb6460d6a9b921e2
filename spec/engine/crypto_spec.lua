local crypto = require('cseng.crypto')

local function unhex(s) return (assert(crypto.unhex((s:gsub('%s', ''))))) end

describe('cseng.crypto', function()
  describe('sha256', function()
    it('matches FIPS 180-2 vectors', function()
      assert.equal('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', crypto.sha256_hex('abc'))
      assert.equal('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', crypto.sha256_hex(''))
      assert.equal('248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
        crypto.sha256_hex('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'))
      assert.equal('cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0',
        crypto.sha256_hex(string.rep('a', 1000000)))
    end)

    it('returns 32 raw bytes that hex-encode to sha256_hex', function()
      local raw = crypto.sha256('abc')
      assert.equal(32, #raw)
      assert.equal(crypto.sha256_hex('abc'), crypto.hex(raw))
    end)

    it('hashes embedded NULs', function()
      assert.are_not.equal(crypto.sha256_hex('a\0b'), crypto.sha256_hex('a'))
      assert.equal('59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138', crypto.sha256_hex('a\0b')) -- Python's hashlib
    end)

    it('raises on misuse', function()
      assert.has_error(function() crypto.sha256() end)
      assert.has_error(function() crypto.sha256({}) end)
    end)
  end)

  describe('hmac_sha256 (RFC 4231)', function()
    local cases = {
      { -- 1
        key = string.rep('\x0b', 20), data = 'Hi There',
        mac = 'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7' },
      { -- 2
        key = 'Jefe', data = 'what do ya want for nothing?',
        mac = '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843' },
      { -- 3
        key = string.rep('\xaa', 20), data = string.rep('\xdd', 50),
        mac = '773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe' },
      { -- 4
        key = unhex('0102030405060708090a0b0c0d0e0f10111213141516171819'), data = string.rep('\xcd', 50),
        mac = '82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b' },
      { -- 6: key longer than the block size
        key = string.rep('\xaa', 131), data = 'Test Using Larger Than Block-Size Key - Hash Key First',
        mac = '60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54' },
      { -- 7
        key = string.rep('\xaa', 131),
        data = 'This is a test using a larger than block-size key and a larger than block-size data. '
          .. 'The key needs to be hashed before being used by the HMAC algorithm.',
        mac = '9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2' },
    }
    for i, c in ipairs(cases) do
      it('test case ' .. ({ 1, 2, 3, 4, 6, 7 })[i], function()
        local mac = crypto.hmac_sha256(c.key, c.data)
        assert.equal(32, #mac)
        assert.equal(c.mac, crypto.hex(mac))
      end)
    end

    it('test case 5 (truncated to 128 bits)', function()
      local mac = crypto.hmac_sha256(string.rep('\x0c', 20), 'Test With Truncation')
      assert.equal('a3b6167473100ee06e0c796c2955552b', crypto.hex(mac):sub(1, 32))
    end)

    it('accepts an empty key and an empty message', function()
      -- HMAC-SHA256 with key "" and message "" (cross-checked with Python's hmac module)
      assert.equal('b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad',
        crypto.hex(crypto.hmac_sha256('', '')))
    end)
  end)

  describe('hex', function()
    it('encodes lowercase and decodes either case', function()
      assert.equal('00ff10ab', crypto.hex('\0\255\16\171'))
      assert.equal('\0\255\16\171', crypto.unhex('00FF10aB'))
      assert.equal('', crypto.hex(''))
      assert.equal('', crypto.unhex(''))
    end)

    it('refuses odd length and non-hex digits with EINVAL', function()
      local v, msg, code = crypto.unhex('abc')
      assert.is_nil(v)
      assert.matches('odd length', msg)
      assert.equal('EINVAL', code)
      v, msg, code = crypto.unhex('zz')
      assert.is_nil(v)
      assert.matches('invalid hex digit at offset 0', msg)
      assert.equal('EINVAL', code)
      assert.equal('EINVAL', select(3, crypto.unhex('0g')))
    end)
  end)

  describe('base64 (RFC 4648 section 10 vectors)', function()
    local vectors = {
      { '', '' }, { 'f', 'Zg==' }, { 'fo', 'Zm8=' }, { 'foo', 'Zm9v' },
      { 'foob', 'Zm9vYg==' }, { 'fooba', 'Zm9vYmE=' }, { 'foobar', 'Zm9vYmFy' },
    }
    for _, v in ipairs(vectors) do
      it(string.format('%q <-> %q', v[1], v[2]), function()
        assert.equal(v[2], crypto.base64(v[1]))
        assert.equal(v[1], crypto.unbase64(v[2]))
      end)
    end

    it('round-trips every byte value and uses + and /', function()
      local all = {}
      for i = 0, 255 do all[#all + 1] = string.char(i) end
      all = table.concat(all)
      local enc = crypto.base64(all)
      assert.matches('[+]', enc)
      assert.matches('/', enc)
      assert.is_nil(enc:find('\n'))
      assert.equal(all, crypto.unbase64(enc))
      for n = 0, 40 do
        local s = crypto.random_bytes(n)
        assert.equal(s, crypto.unbase64(crypto.base64(s)))
      end
    end)

    it('tolerates line breaks as in wrapped base64 (76 columns, CRLF or LF)', function()
      local data = string.rep('The quick brown fox. ', 20)
      local enc = crypto.base64(data)
      local wrapped = enc:gsub(('.'):rep(76), '%0\n') .. '\n'
      assert.equal(data, crypto.unbase64(wrapped))
      assert.equal(data, crypto.unbase64((enc:gsub(('.'):rep(64), '%0\r\n'))))
      assert.equal('foobar', crypto.unbase64('Zm9v\nYmFy\n'))
      assert.equal('f', crypto.unbase64('Z\ng=\n=\n'))
    end)

    local bad = {
      { 'Zg=', 'truncated' },          -- missing padding
      { 'Zg', 'truncated' },
      { 'Zm9vY', 'truncated' },
      { 'Zg==Zg==', 'data after padding' },
      { 'Z===', 'misplaced padding' },
      { '=Zg=', 'misplaced padding' },
      { 'Zm9v YmFy', 'invalid character' },  -- spaces are not line breaks
      { 'Zm9v\tYmFy', 'invalid character' },
      { 'Zm9-', 'invalid character' },       -- base64url is a different alphabet
      { 'Zm9_', 'invalid character' },
      { 'Zh==', 'non%-zero padding bits' },  -- "Zg==" is the canonical form of "f"
      { 'Zm9=', 'non%-zero padding bits' },
      { 'Zg=a', 'data after padding' },
      { 'Zg==x', 'data after padding' },
    }
    for _, b in ipairs(bad) do
      it(string.format('refuses %q (%s) with EINVAL', b[1], b[2]:gsub('%%', '')), function()
        local v, msg, code = crypto.unbase64(b[1])
        assert.is_nil(v)
        assert.equal('EINVAL', code)
        assert.matches(b[2], msg)
      end)
    end
  end)

  describe('random_bytes', function()
    it('returns n bytes, different each time', function()
      assert.equal('', crypto.random_bytes(0))
      local a, b = crypto.random_bytes(32), crypto.random_bytes(32)
      assert.equal(32, #a)
      assert.are_not.equal(a, b)
      assert.equal(100000, #crypto.random_bytes(100000))
    end)

    it('is not constant: 4096 bytes use most byte values', function()
      local seen, n = {}, 0
      for c in crypto.random_bytes(4096):gmatch('.') do
        if not seen[c] then seen[c] = true; n = n + 1 end
      end
      assert.is_true(n > 240, 'distinct byte values: ' .. n)
    end)

    it('raises on a negative or huge count', function()
      assert.has_error(function() crypto.random_bytes(-1) end)
      assert.has_error(function() crypto.random_bytes(1 << 40) end)
      assert.has_error(function() crypto.random_bytes('x') end)
    end)
  end)
end)
