-- lua/providers/shared/adapter.lua's sandbox-side helpers, run in a real local (bubblewrap) sandbox.
local adapter = require 'providers.shared.adapter'
local archive = require 'cseng.archive'
local crypto = require 'cseng.crypto'
local fs = require 'cseng.fs'
local L = require 'providers.local'

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
