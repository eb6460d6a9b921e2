-- luacheck (Debian's lua-check) over every Lua file of the project, with .luacheckrc.
local proc = require('cseng.proc')
local sys = require('cseng.sys')

describe('lint', function()
  it('luacheck reports nothing for lua/, spec/, plans/ and bench/', function()
    if not proc.which('luacheck') then
      pending('luacheck is not installed (make deps installs lua-check)')
      return
    end
    local r = assert(proc.run { argv = { 'luacheck', '--no-color', '--formatter', 'plain', 'lua', 'spec', 'plans', 'bench' },
      cwd = sys.root(), timeout = 300 })
    assert.equal(0, r.code, 'luacheck found:\n' .. r.stdout .. r.stderr)
  end)
end)
