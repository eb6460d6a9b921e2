-- Redaction of every byte the process writes, C included: the C
-- diagnostics (a never-joined task's error) go through the C redactor the Lua one feeds, and
-- the base64 and percent-encoded forms of each secret are hidden on both sides.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local redact = require('cseng.redact')
local secrets = require('cseng.lib.secrets')
local H = require('spec.helpers.common')

local CSENG = H.CSENG
local KEY = 'sk-planted/Key+0123456789=abc&x y'
local ENV_KEY = 'envplanted-9876543210-zyx'

local tmp = H.tempdir('cseng-redact-c')
teardown(H.remove_tempdirs)

local function url_safe(s) return (s:gsub('[+/]', { ['+'] = '-', ['/'] = '_' })) end
local function pct(s, fmt) return (s:gsub('[^%w%-%._~]', function(c) return string.format(fmt, c:byte()) end)) end

-- Texts a server could echo KEY in: raw, cut, and encoded at every alignment.
local function echoes(key)
  local out = { 'raw ' .. key, 'cut ' .. key:sub(4, 14) .. '...', 'percent ' .. pct(key, '%%%02X'),
    'lower ' .. pct(key, '%%%02x'), 'form ' .. pct(key, '%%%02X'):gsub('%%20', '+') }
  for _, pre in ipairs({ '', 'u:', 'us:', 'use:' }) do
    local b = crypto.base64(pre .. key .. '!')
    out[#out + 1] = 'b64 ' .. b
    out[#out + 1] = 'b64url ' .. url_safe(b)
    out[#out + 1] = 'nopad ' .. b:gsub('=+$', '')
    out[#out + 1] = 'Authorization: Basic ' .. crypto.base64(pre .. key)
  end
  return out
end

-- Whether text still carries key in a form a reader could decode: raw, 8 bytes of it, or
-- its base64 / percent-encoding (whole, or 8 characters of an aligned core).
local function leaks(text, key)
  if text:find(key:sub(1, 8), 1, true) or text:find(key:sub(-8), 1, true) then return 'raw' end
  for _, f in ipairs(secrets.forms(key)) do
    if #f >= 12 and text:find(f:sub(3, 12), 1, true) then return f end
  end
  return nil
end

describe('C diagnostics', function()
  it("print a never-joined task's error with the planted key as [redacted]", function()
    local script = tmp .. '/gc.lua'
    assert(fs.write(script, [[
local task = require('cseng.task')
local secrets = require('cseng.lib.secrets')
local crypto = require('cseng.crypto')
local key = arg[1]
secrets.add(key)
task.spawn(function() error('string error: key=' .. key) end)
task.spawn(function() error({ code = 'ELEAK', message = 'table error: ' .. crypto.base64('u:' .. key) }) end)
task.spawn(function() error('env error: ' .. os.getenv('PLANTED_SECRET') .. ' \27[2J') end)
task.sleep(0.05)
collectgarbage()
collectgarbage()
]]))
    local r = assert(proc.run { argv = { CSENG, 'lua', script, KEY }, env_add = { PLANTED_SECRET = ENV_KEY }, timeout = 30 })
    assert.equal(0, r.code, r.stderr)
    local n = 0
    for _ in r.stderr:gmatch('failed and was never joined') do n = n + 1 end
    assert.equal(3, n, r.stderr)
    assert.matches('string error: key=[redacted]', r.stderr, 1, true)
    assert.matches('env error: [redacted] \\x1b[2J', r.stderr, 1, true)
    assert.matches('table error: ', r.stderr, 1, true)
    assert.is_nil(leaks(r.stderr, KEY), r.stderr)
    assert.is_nil(leaks(r.stderr, ENV_KEY), r.stderr)
  end)
end)

describe('encoded secrets', function()
  it('secrets.redact hides the base64 and percent-encoded forms, and the C side hides the same bytes', function()
    secrets.add(KEY)
    for _, text in ipairs(echoes(KEY)) do
      local lua_out = secrets.redact(text)
      assert.is_nil(leaks(lua_out, KEY), text .. ' -> ' .. lua_out)
      assert.matches('[redacted]', lua_out, 1, true)
      assert.equal(lua_out, redact.apply(text), text)
    end
  end)

  it('leaves text without a secret as it is', function()
    secrets.add(KEY)
    local plain = 'GET /api/sandboxes/lz-000001 200 ' .. crypto.base64('nothing to hide here')
    assert.equal(plain, secrets.redact(plain))
    assert.equal(plain, redact.apply(plain))
  end)
end)
