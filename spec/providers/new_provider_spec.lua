-- A new provider is one file and its spec, with no edit anywhere else: in a fresh tree (every
-- other entry of this checkout linked in unchanged), docs/providers/skeleton.lua becomes
-- lua/providers/acme.lua and docs/providers/skeleton_spec.lua becomes spec/providers/acme/acme_spec.lua. There,
-- `cseng providers` lists acme as keeping the contract, `--provider` finds it by name, and its
-- spec passes: the contract, a sandbox's lifecycle, and a bundled task through `cseng run
-- --provider acme` against its loopback fake (gold passes, nop fails, no sandbox left).
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local cjson = require('cjson')

local ROOT = sys.root()

-- A tree whose entries are links to this checkout's, but dir/ (made anew, its own entries
-- linked) for each dir of `open`, and the files of `put` ({path = text}) written in.
local function tree(dest, open, put)
  local function fill(rel)
    local src, dst = ROOT .. (rel == '' and '' or ('/' .. rel)), dest .. (rel == '' and '' or ('/' .. rel))
    assert(fs.mkdir_p(dst))
    for _, name in ipairs(assert(fs.list(src))) do
      local r = rel == '' and name or (rel .. '/' .. name)
      if open[r] then fill(r)
      elseif name ~= '.git' and r ~= 'results' and not put[r] then assert(fs.symlink(src .. '/' .. name, dst .. '/' .. name)) end
    end
  end
  fill('')
  assert(fs.mkdir_p(dest .. '/results'))
  for path, text in pairs(put) do
    assert(fs.mkdir_p(dest .. '/' .. path:match('^(.*)/[^/]+$')))
    assert(fs.write(dest .. '/' .. path, text))
  end
end

describe('a new provider', function()
  local tmp, env

  setup(function()
    tmp = assert(fs.tempdir('cseng-new-provider-'))
    tree(tmp, { lua = true, ['lua/providers'] = true, spec = true, ['spec/providers'] = true }, {
      ['lua/providers/acme.lua'] = assert(fs.read(ROOT .. '/docs/providers/skeleton.lua')),
      ['spec/providers/acme/acme_spec.lua'] = assert(fs.read(ROOT .. '/docs/providers/skeleton_spec.lua')),
    })
    env = { CSENG_ROOT = tmp, ACME_API_KEY = false, ACME_TOKEN = false, ACME_API_URL = false }
  end)

  teardown(function() if tmp then fs.remove_tree(tmp) end end)

  local function cseng(args, timeout)
    local argv = { ROOT .. '/cseng' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(proc.run { argv = argv, cwd = tmp, env_add = env, timeout = timeout or 120 })
  end

  it('is the skeleton copied into lua/providers/ and spec/, nothing else (this checkout has neither)', function()
    assert.is_nil(fs.lstat(ROOT .. '/lua/providers/acme.lua'))
    assert.is_nil(fs.lstat(ROOT .. '/spec/providers/acme/acme_spec.lua'))
    assert.equal('file', fs.lstat(tmp .. '/lua/providers/acme.lua').type)
    assert.equal('link', fs.lstat(tmp .. '/lua/providers/lizard.lua').type)
    assert.equal('link', fs.lstat(tmp .. '/lua/providers/shared').type)
    assert.equal('link', fs.lstat(tmp .. '/lua/cseng').type)
  end)

  it('is listed by cseng providers as keeping the contract, and found by --provider', function()
    local r = cseng { 'providers', '--json' }
    assert.equal(0, r.code, r.stderr .. r.stdout)
    local acme
    for _, p in ipairs(cjson.decode(r.stdout)) do if p.name == 'acme' then acme = p end end
    assert.is_table(acme, r.stdout)
    assert.same({}, acme.violations)
    assert.same({ 'ACME_API_KEY|ACME_TOKEN' }, acme.missing)
    assert.equal('Acme sandboxes (REST API)', acme.description)
    -- the core finds it by its file's name: a typo is told the name
    r = cseng { 'run', 'plans/cold-gold.lua', '--provider', 'acm', '--quiet' }
    assert.equal(1, r.code, r.stderr)
    assert.matches("unknown provider 'acm'; did you mean acme%? %(providers: acme, ", r.stderr)
  end)

  it('passes its own spec there: the contract, the lifecycle, and a bundled task on its fake', function()
    local r = cseng({ 'test', 'spec/providers/acme/acme_spec.lua' }, 900)
    assert.equal(0, r.code, r.stdout .. r.stderr)
    assert.matches('\n3 successes / 0 failures / 0 errors / 0 pending', r.stdout)
  end)
end)
