-- lua/providers/shared/adapter.lua's sandbox-side helpers, run in a real local (bubblewrap) sandbox.
local adapter = require('providers.shared.adapter')
local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local fs = require('cseng.fs')
local L = require('providers.local')

describe('adapter.extract_tar_in_sandbox', function()
  local client, sb
  setup(function()
    client = L.connect({})
    sb = assert(L.create(client, { workdir = '/workspace' }))
  end)
  teardown(function() L.destroy(client, sb) end)

  for _, format in ipairs({ 'tar.gz', 'tar' }) do
    it('unpacks a base64-uploaded ' .. format .. ' into a new directory', function()
      local tar = archive.pack({ { path = 'a.txt', data = 'alpha' }, { path = 'sub/run.sh', data = 'echo hi', mode = tonumber('755', 8) } },
        { format = format })
      assert(fs.write(sb.root .. '/tmp/up.b64', crypto.base64(tar)))
      assert(adapter.extract_tar_in_sandbox(L, client, sb, '/tmp/up.b64', '/dst-' .. format, { base64 = true }))
      assert.equal('alpha', fs.read(sb.root .. '/dst-' .. format .. '/a.txt'))
      assert.equal('echo hi', fs.read(sb.root .. '/dst-' .. format .. '/sub/run.sh'))
      assert.is_nil(fs.lstat(sb.root .. '/tmp/up.b64'), 'the upload is removed')
      assert.is_nil(fs.lstat(sb.root .. '/tmp/up.b64.tar'), 'the decoded tar is removed')
    end)
  end

  it('reports a broken archive as EIO naming the directory', function()
    assert(fs.write(sb.root .. '/tmp/bad.b64', crypto.base64('not a tar')))
    local ok, msg, code = adapter.extract_tar_in_sandbox(L, client, sb, '/tmp/bad.b64', '/dst-bad', { base64 = true })
    assert.is_nil(ok)
    assert.equal('EIO', code)
    assert.matches('extracting into /dst%-bad', msg)
  end)
end)

describe('adapter.post_created', function()
  local function call_returning(...)
    local ret = table.pack(...)
    return function(_, method)
      assert.equal('POST', method)
      return table.unpack(ret, 1, ret.n)
    end
  end

  it('returns the answer and the response when the id field is a non-empty string', function()
    local data, res = adapter.post_created(call_returning({ id = 'sb-1' }, { status = 201 }), {}, '/v1/boxes', { json = {} },
      'id', 'p: POST /v1/boxes')
    assert.same({ id = 'sb-1' }, data)
    assert.same({ status = 201 }, res)
  end)

  for name, answer in pairs({ missing = {}, empty = { id = '' }, number = { id = 7 }, ['not a table'] = 'x' }) do
    it('is EPROTO naming the field when the id is ' .. name, function()
      local data, msg, code = adapter.post_created(call_returning(answer, {}), {}, '/v1/boxes', nil, 'id', 'p: POST /v1/boxes')
      assert.is_nil(data)
      assert.equal('p: POST /v1/boxes: no id in the response', msg)
      assert.equal('EPROTO', code)
    end)
  end

  it("passes the call's failure through, with the raw response", function()
    local data, msg, code, raw = adapter.post_created(call_returning(nil, 'p: POST /v1/boxes: HTTP 429', 'HTTP_429', { status = 429 }),
      {}, '/v1/boxes', nil, 'id', 'p: POST /v1/boxes')
    assert.is_nil(data)
    assert.equal('p: POST /v1/boxes: HTTP 429', msg)
    assert.equal('HTTP_429', code)
    assert.same({ status = 429 }, raw)
  end)
end)
