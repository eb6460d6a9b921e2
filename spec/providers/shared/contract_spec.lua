-- The adapter contract (docs/providers/README.md, lua/providers/shared/contract.lua) for every
-- adapter in lua/providers/, for the doc's skeleton (docs/providers/skeleton.lua, which the README
-- shows verbatim), and for `cseng providers`, which reports what an adapter breaks.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local serve = require('cseng.serve')
local cjson = require('cjson')
local archive = require('cseng.archive')
local contract = require('providers.shared.contract')

local ROOT = sys.root()
local SKELETON = ROOT .. '/docs/providers/skeleton.lua'

local function adapters()
  local names = {}
  for _, f in ipairs(fs.list(ROOT .. '/lua/providers') or {}) do
    local n = f:match('^(.-)%.lua$')
    if n then names[#names + 1] = n end
  end
  table.sort(names)
  return names
end

-- A shallow copy of an adapter with some fields changed (false removes one).
local function mutated(P, changes)
  local c = {}
  for k, v in pairs(P) do c[k] = v end
  for k, v in pairs(changes) do if v == false then c[k] = nil else c[k] = v end end
  return c
end

-- Adapters whose connect names only the first missing entry, and why.
local FIRST_ONLY = {
  aws_microvm = 'the AWS credential chain (lua/cseng/lib/aws/credentials.lua) reports its first failure; '
    .. 'AWS_MICROVM_IMAGE_ID is checked at create, since `cseng prewarm` connects to build that image',
}

local function source(n) return assert(fs.read(ROOT .. '/lua/providers/' .. n .. '.lua')) end

describe('the adapter contract', function()
  it('every adapter in lua/providers/ keeps it (its source too: functions in the contract\'s order)', function()
    local names = adapters()
    assert.is_true(#names >= 9, table.concat(names, ' '))
    for _, n in ipairs(names) do
      local P = require('providers.' .. n)
      local v = contract.check(P, n, source(n))
      assert.same({}, v, n .. ': ' .. table.concat(v, '; '))
    end
  end)

  it('an adapter exports its contract and nothing else (what specs need of it lives in lua/providers/shared/)', function()
    local known = contract.names()
    for _, n in ipairs(adapters()) do
      local extra = {}
      for k in pairs(require('providers.' .. n)) do
        if not known[k] then extra[#extra + 1] = tostring(k) end
      end
      table.sort(extra)
      assert.same({}, extra, n .. ' exports ' .. table.concat(extra, ', '))
    end
    -- one export more, whatever its name, is a violation naming it
    local P = require('providers.lizard')
    for _, name in ipairs({ 'create_body', '_call', 'DEFAULTS', 'exec_streaming' }) do
      assert.same({ name .. ' is not a name of the adapter contract (an internal belongs in lua/providers/shared/)' },
        contract.check(mutated(P, { [name] = function() end }), 'lizard'))
    end
  end)

  it('an adapter defines its functions in the contract\'s order', function()
    local src = source('lizard')
    assert.same({ 'connect', 'create', 'exec', 'put', 'get', 'destroy', 'list' }, contract.defined_order(src))
    -- destroy moved before exec
    local a, b = src:find('\n%-%-%- Destroy a sandbox.-\nend\n')
    assert.is_number(a)
    local moved = src:sub(1, a) .. src:sub(b + 1)
    moved = moved:gsub('\n(%-%-%- Run a shell command)', '\n' .. src:sub(a + 1, b):gsub('%%', '%%%%') .. '\n%1', 1)
    assert.same({ 'connect', 'create', 'destroy', 'exec', 'put', 'get', 'list' }, contract.defined_order(moved))
    assert.same({ "exec is defined after destroy: functions go in the contract's order (connect, create, destroy, exec, put, get, list)" },
      contract.check(require 'providers.lizard', 'lizard', moved))
  end)

  it('finds what an adapter breaks, one line each', function()
    local P = require('providers.lizard')
    assert.same({ 'description is required (string)' }, contract.check(mutated(P, { description = false }), 'lizard'))
    assert.same({ 'create must be a function, not a string' }, contract.check(mutated(P, { create = 'x' }), 'lizard'))
    assert.same({ 'destroy is required (a function)' }, contract.check(mutated(P, { destroy = false }), 'lizard'))
    assert.same({ 'credentials entry 2 must be a variable name or a list of alternative names' },
      contract.check(mutated(P, { credentials = { 'A', { 'B', 3 } } }), 'lizard'))
    assert.same({ 'rates vcpu_s must be a number >= 0' }, contract.check(mutated(P, { rates = { vcpu_s = -1 } }), 'lizard'))
    assert.same({ 'max_concurrency must be an integer >= 1' }, contract.check(mutated(P, { max_concurrency = 0.5 }), 'lizard'))
    assert.same({ 'capabilities exec_streams is not a capability of the contract' },
      contract.check(mutated(P, { capabilities = { exec_streams = true } }), 'lizard'))
    assert.same({ 'capabilities host_ports must be a boolean' },
      contract.check(mutated(P, { capabilities = { host_ports = 'yes' } }), 'lizard'))
    assert.same({ 'limits creates_per_second is not a limit of the contract' },
      contract.check(mutated(P, { limits = { creates_per_second = 5 } }), 'lizard'))
    assert.same({ 'limits max_upload_bytes must be an integer >= 1' },
      contract.check(mutated(P, { limits = { max_upload_bytes = 0 } }), 'lizard'))
    assert.same({ 'prewarm_flags needs prewarm_image (the flags are its options)' },
      contract.check(mutated(P, { prewarm_flags = {} }), 'lizard'))
    local image = function() end
    assert.same({ 'prewarm_flags bucket.type must be one of string, int, number, bool, list, multi' },
      contract.check(mutated(P, { prewarm_image = image, prewarm_flags = { bucket = { key = 'bucket', type = 'str', help = 'h' } } }),
        'lizard'))
    assert.same({ 'prewarm_flags "Bucket" must be a flag name (lower case, digits, -)' },
      contract.check(mutated(P, { prewarm_image = image, prewarm_flags = { Bucket = { key = 'b', type = 'string', help = 'h' } } }),
        'lizard'))
    assert.same({ 'prewarm_flags bucket.key must be a Lua name other than log (prewarm_image reads o[key])' },
      contract.check(mutated(P, { prewarm_image = image, prewarm_flags = { bucket = { key = 'log', type = 'string', help = 'h' } } }),
        'lizard'))
    assert.same({ 'list_artifacts must be a function, not a table' }, contract.check(mutated(P, { list_artifacts = {} }), 'lizard'))
    assert.same({ 'name "lizzard" does not match its file lizard.lua (--provider loads it by file)' },
      contract.check(mutated(P, { name = 'lizzard' }), 'lizard'))
    assert.same({ 'the file must return a table, not a boolean' }, contract.check(true, 'x'))
  end)

  it('every adapter declares the format of its sandbox ids, which accepts its own and refuses hostile ones', function()
    -- ids as each provider (its fake, its bundled bench fake, its API's documentation) gives them
    local OWN = {
      ['local'] = { 'cseng-0a1b2c3d4e5f' },
      docker = { string.rep('9f', 32) },
      daytona = { '0b5e2f1c-7a3d-4e8b-9c1f-2d6a8e4b7c90', 'sandbox123' },
      e2b = { 'i0a1b2c3d4e5f0001', 'i6sbq7qk1r2gqbm8q9fd1-a1b2c3d4' },
      lizard = { 'lz-000001', 'lz-00000042', 'adm-000001' },
      modal = { 'sb-0aB1cD2eF3gH4iJ5kL6mN7' },
      runloop = { 'dbx_fake000001', 'dbx_31TqkLxd7mR2a9hW3YpZc' },
      vercel = { 'sess_fake000001', 'sbx_0123456789' },
      aws_microvm = { 'mvm-0123456789abcdef' },
    }
    for _, n in ipairs(adapters()) do
      local P = require('providers.' .. n)
      assert.is_table(P.id_format, n)
      assert.is_true(contract.valid_id(P, P.id_format.example), n)
      -- (a new adapter needs no entry here: its id_format's example stands in)
      for _, id in ipairs(OWN[n] or { P.id_format.example }) do
        assert.is_true(contract.valid_id(P, id), n .. ': refuses its own id ' .. id)
      end
      for _, id in ipairs(contract.HOSTILE_IDS) do
        local ok, why = contract.valid_id(P, id)
        assert.is_nil(ok, string.format('%s accepts %q', n, id))
        assert.is_string(why)
      end
    end
    assert.same({ nil, 'is not a local sandbox id (like cseng-0123456789ab)' },
      { contract.valid_id(require('providers.local'), 'cseng-012345') })
    assert.same({ nil, 'contains a path separator' }, { contract.valid_id(require('providers.e2b'), 'x/y') })
    assert.same({ nil, 'is not a string (table)' }, { contract.valid_id(require('providers.e2b'), {}) })
    -- an adapter without the field (one a spec builds) gets the generic format
    assert.is_true(contract.valid_id({ name = 'x' }, 'sb-1'))
    assert.is_nil(contract.valid_id({ name = 'x' }, '../sb-1'))
  end)

  it('reports a missing or malformed id_format', function()
    local P = require('providers.lizard')
    assert.same({ 'id_format is required (table)' }, contract.check(mutated(P, { id_format = false }), 'lizard'))
    assert.same({ 'id_format pattern must be a Lua pattern anchored at both ends (^...$)' },
      contract.check(mutated(P, { id_format = { pattern = '[%w-]+', example = 'lz-1' } }), 'lizard'))
    assert.same({ 'id_format example "lz/1" does not match its pattern' },
      contract.check(mutated(P, { id_format = { pattern = '^lz%-%d+$', example = 'lz/1' } }), 'lizard'))
    assert.same({ 'id_format example "a..b" contains ..' },
      contract.check(mutated(P, { id_format = { pattern = '^[%w.]+$', example = 'a..b' } }), 'lizard'))
  end)

  it('fills the optional fields with their defaults', function()
    local P = { description = 'x', credentials = {} }
    assert.equal('aws-microvm', contract.get(P, 'name', 'aws_microvm'))
    assert.same({ vcpu_s = 0, gib_s = 0, per_create = 0 }, contract.get(P, 'rates'))
    assert.is_true(contract.get(P, 'list_by_label'))
    assert.is_false(contract.get(P, 'remote'))
    assert.is_nil(contract.get(P, 'max_concurrency'))
    assert.same({ { 'A' }, { 'B', 'C' } }, contract.credential_alternatives({ credentials = { 'A', { 'B', 'C' } } }))
  end)

  it('connect without credentials raises one line naming each variable (no request, no traceback)', function()
    for _, n in ipairs(adapters()) do
      local P = require('providers.' .. n)
      if #P.credentials > 0 then
        local ok, e = pcall(P.connect, { getenv = function() return nil end })
        assert.is_false(ok, n)
        -- the one error type: ECONFIG with a one-line message
        assert.equal('ECONFIG', type(e) == 'table' and e.code or nil, n)
        local err = e.message
        assert.not_matches('\n', err, n)
        assert.not_matches('traceback', err, n)
        local entries = contract.credential_alternatives(P)
        if FIRST_ONLY[n] then entries = { entries[1] } end
        for _, alts in ipairs(entries) do
          local named = false
          for _, a in ipairs(alts) do if err:find(a, 1, true) then named = true end end
          assert.is_true(named, n .. ': ' .. err .. ' does not name ' .. table.concat(alts, '|'))
        end
      end
    end
  end)

  it('is the one docs/providers/README.md describes: each of its tables lists exactly what contract.lua lists', function()
    local readme = assert(fs.read(ROOT .. '/docs/providers/README.md'))
    -- the first column's names of the table after a heading (or after a line of text under it)
    local function table_after(pattern)
      local from = assert(readme:find(pattern), pattern)
      local body = readme:sub(from):match('\n(|[^\n]*|\n|%-%-%-.-)\n\n')
      assert.is_string(body, 'no table after ' .. pattern)
      local names, second = {}, {}
      for line in body:gsub('\\|', '/'):gmatch('[^\n]+') do
        local cell, rest = line:match('^| (`[^|]*`) | ([^|]*)|')
        if cell then
          local name = cell:match('^`([%w_]+)')
          names[#names + 1] = name
          second[name] = rest
        end
      end
      return names, second
    end
    local function names_of(list)
      local out = {}
      for _, e in ipairs(list) do out[#out + 1] = e[1] end
      return out
    end
    local fields, req = table_after('\n### Fields\n')
    assert.same(names_of(contract.FIELDS), fields)
    for _, f in ipairs(contract.FIELDS) do
      assert.equal(f.required == true, req[f[1]]:match('^yes') ~= nil, f[1] .. ': required in one, not the other')
    end
    local functions, called = table_after('\n### Functions\n')
    assert.same(names_of(contract.FUNCTIONS), functions)
    for _, f in ipairs(contract.FUNCTIONS) do
      assert.equal(f.required == true, called[f[1]]:match('^optional') == nil, f[1] .. ': required in one, not the other')
    end
    assert.same(names_of(contract.CAPABILITIES), (table_after('\n### Capabilities')))
    assert.same(names_of(contract.LIMITS), (table_after('\n### Limits')))
    assert.same(names_of(contract.EXEC_OPTIONS), (table_after('\n### Exec options and result\n')))
    assert.same(names_of(contract.EXEC_RESULT), (table_after('What the core reads of the result')))
    assert.same(names_of(contract.SANDBOX), (table_after('`create` returns a table')))
    assert.same(names_of(contract.CLIENT), (table_after('`connect` returns a client')))
    -- every entry of contract.lua says what it means
    for _, list in ipairs({ contract.FIELDS, contract.FUNCTIONS, contract.CAPABILITIES, contract.LIMITS, contract.EXEC_OPTIONS,
                            contract.EXEC_RESULT, contract.SANDBOX, contract.CLIENT }) do
      for _, e in ipairs(list) do assert.is_string(e.doc or e[2], e[1]) end
    end
  end)

  it('`cseng providers` reports a violation and exits 1', function()
    local cmd = require('cseng.cli.commands.providers')
    for _, p in ipairs(cmd.list(function() return nil end)) do
      assert.same({}, p.violations, p.name)
    end
    local real = package.loaded['providers.lizard']
    package.loaded['providers.lizard'] = mutated(real, { list = false, description = 42 })
    local ok, rows = pcall(cmd.list, function() return nil end)
    package.loaded['providers.lizard'] = real
    assert(ok, rows)
    local row
    for _, p in ipairs(rows) do if p.module == 'lizard' then row = p end end
    assert.same({ 'description must be a string, not a number', 'list is required (a function)' }, row.violations)
    assert.is_false(row.ready)
  end)
end)

describe('cseng prewarm and the adapters\' prewarm_flags', function()
  local proc = require('cseng.proc')
  local function cseng(args)
    local argv = { ROOT .. '/cseng' }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    return assert(proc.run { argv = argv, cwd = ROOT, timeout = 60 })
  end

  it('knows no vendor flag itself: --provider NAME --help shows the adapter\'s own', function()
    local plain = cseng { 'prewarm', '--help' }
    assert.equal(0, plain.code)
    for _, n in ipairs(adapters()) do
      for name in pairs(require('providers.' .. n).prewarm_flags or {}) do
        assert.not_matches('%-%-' .. name:gsub('%-', '%%-'), plain.stdout, n)
        local own = cseng { 'prewarm', '--provider', n, '--help' }
        assert.equal(0, own.code)
        assert.matches('%-%-' .. name:gsub('%-', '%%-') .. ' ', own.stdout, n)
      end
    end
    local aws = cseng { 'prewarm', '--provider', 'aws-microvm', '--help' }
    assert.matches("aws%-microvm's own options:\n  %-%-aws%-bucket BUCKET +the S3 bucket", aws.stdout)
    -- another adapter's flag is unknown to it
    local r = cseng { 'prewarm', '--provider', 'docker', '--aws-bucket', 'b' }
    assert.equal(2, r.code)
    assert.matches("unknown option '%-%-aws%-bucket'", r.stderr)
    local src = assert(fs.read(ROOT .. '/lua/cseng/cli/commands/prewarm.lua'))
    assert.is_nil(src:find('aws', 1, true), 'lua/cseng/cli/commands/prewarm.lua names a vendor')
  end)

  it('refuses an adapter flag that is one of the command\'s own, naming the adapter', function()
    local cmd = require('cseng.cli.commands.prewarm')
    package.loaded['providers.clashing'] = { name = 'clashing', prewarm_image = function() end,
      prewarm_flags = { output = { key = 'out', type = 'string', help = 'h' } } }
    local stderr, said = io.stderr, {}
    io.stderr = { write = function(self, ...) for _, x in ipairs({ ... }) do said[#said + 1] = tostring(x) end return self end } -- luacheck: ignore 122
    local ok, status = pcall(cmd.run, { '--provider', 'clashing', '--help' })
    io.stderr = stderr -- luacheck: ignore 122
    package.loaded['providers.clashing'] = nil
    assert(ok, status)
    assert.equal(2, status)
    assert.matches("provider 'clashing': its prewarm flag %-%-output is a flag of cseng prewarm", table.concat(said))
  end)
end)

describe('the skeleton of docs/providers/README.md', function()
  it('is docs/providers/skeleton.lua, verbatim', function()
    local readme = assert(fs.read(ROOT .. '/docs/providers/README.md'))
    local block = readme:match('\n### A skeleton\n.-```lua\n(.-)```\n')
    assert.is_string(block, 'no ```lua block under "### A skeleton"')
    assert.equal(assert(fs.read(SKELETON)), block)
  end)

  it('keeps the contract and runs its lifecycle on a loopback Acme', function()
    local P = dofile(SKELETON)
    assert.same({}, contract.check(P, 'acme'))
    -- a small Acme: sandboxes with labels, exec recorded (tar extraction answered 0), files
    local key = 'acme-key-' .. require('cseng.crypto').hex(require('cseng.crypto').random_bytes(8))
    local boxes, files, execs, seq = {}, {}, {}, 0
    local srv <close> = assert(serve.listen { handler = function(req)
      if req.headers.authorization ~= 'Bearer ' .. key then
        return 401, { ['Content-Type'] = 'application/json' }, '{"error":"bad key ' .. tostring(req.headers.authorization) .. '"}'
      end
      local json = { ['Content-Type'] = 'application/json' }
      local id, rest = req.path:match('^/sandboxes/([^/]+)(.*)$')
      if req.path == '/sandboxes' and req.method == 'POST' then
        seq = seq + 1
        local b = cjson.decode(req.body)
        boxes['sb-' .. seq] = { labels = b.labels }
        return 201, json, cjson.encode { id = 'sb-' .. seq }
      elseif req.path == '/sandboxes' and req.method == 'GET' then
        local list = {}
        for i, b in pairs(boxes) do list[#list + 1] = { id = i, labels = b.labels, created = 1700000000 } end
        return 200, json, cjson.encode { sandboxes = list }
      elseif id and not boxes[id] then
        return 404, json, '{"error":"no such sandbox"}'
      elseif rest == '' and req.method == 'DELETE' then
        boxes[id] = nil
        return 204, {}, ''
      elseif rest == '/exec' then
        local b = cjson.decode(req.body)
        execs[#execs + 1] = b.cmd[3]
        return 200, json, cjson.encode { exit_code = 0, stdout = 'ran\n', stderr = '' }
      elseif rest == '/files' then
        local path = req.query:match('path=([^&]*)'):gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end)
        if req.method == 'PUT' then files[path] = req.body; return 204, {}, '' end
        if files[path] then return 200, {}, files[path] end
        return 404, json, '{"error":"no such file"}'
      end
      return 400, json, '{"error":"unexpected ' .. req.method .. ' ' .. req.path .. '"}'
    end })
    local env = { ACME_TOKEN = key, ACME_API_URL = srv:url() }
    local client = P.connect { getenv = function(k) return env[k] end } -- the second alternative name
    local labels = { ['cseng.run'] = 'r1', ['cseng.task'] = 't' }
    local sb = assert(P.create(client, { image = 'debian', labels = labels }))
    local other = assert(P.create(client, { image = 'debian', labels = { ['cseng.run'] = 'r2' } }))
    local r = assert(P.exec(client, sb, 'echo hi', { cwd = '/app', timeout = 5 }))
    assert.same({ code = 0, stdout = 'ran\n', stderr = '' }, r)
    local tar = assert(archive.pack({ { path = 'a.txt', data = 'A' } }, { format = 'tar' }))
    assert.is_true(P.put(client, sb, '/cseng', tar))
    assert.matches("^mkdir %-p '?/cseng'? && tar %-xf /tmp/cseng%-put%-%x+%.tar %-C '?/cseng'?", execs[#execs])
    local uploaded = execs[#execs]:match('(/tmp/cseng%-put%-%x+%.tar)')
    assert.equal(tar, assert(P.get(client, sb, uploaded)))
    assert.equal('ENOENT', select(3, P.get(client, sb, '/nope')))
    local listed = assert(P.list(client, { labels = { ['cseng.run'] = 'r1' } }))
    assert.equal(1, #listed)
    assert.same({ id = sb.id, labels = labels, created = 1700000000 }, listed[1])
    assert.is_true(P.destroy(client, sb))
    assert.is_true(P.destroy(client, sb)) -- already gone: idempotent
    assert.is_true(P.destroy(client, other))
    -- a wrong key: one line, HTTP_401, the key redacted from the echoed body
    local bad = P.connect { getenv = function(k) return ({ ACME_API_KEY = 'wrong-key-123456', ACME_API_URL = srv:url() })[k] end }
    local _, err, code = P.create(bad, { labels = {} })
    assert.equal('HTTP_401', code)
    assert.not_matches('\n', err)
    assert.not_matches('wrong%-key%-123456', err)
    assert.matches('^acme: POST /sandboxes: HTTP 401', err)
    -- no key at all: both alternatives named
    local ok, e = pcall(P.connect, { getenv = function() return nil end })
    assert.is_false(ok)
    assert.equal('ECONFIG', e.code)
    assert.equal('acme provider: ACME_API_KEY or ACME_TOKEN is not set (export it, or put it in an --env-file)', e.message)
  end)
end)

describe('the shared adapter helpers the contract leans on', function()
  local adapter = require('providers.shared.adapter')

  it('settings and credentials take alternative variable names', function()
    local env = { B_KEY = 'b', EMPTY = '' }
    local setting = adapter.settings { getenv = function(k) return env[k] end, given = 'cfg' }
    assert.equal('b', setting(nil, { 'EMPTY', 'A_TOKEN', 'B_KEY' }))
    assert.equal('cfg', setting('given', { 'B_KEY' }))
    assert.is_nil(setting('absent', { 'A_TOKEN', 'EMPTY' }))
    local ok, err = pcall(adapter.credentials, 'x', setting, { { 'k', { 'A_TOKEN', 'A_KEY' } }, { 'p', 'P_ID' } })
    assert.is_false(ok)
    assert.equal('ECONFIG', err.code)
    assert.equal('x provider: A_TOKEN or A_KEY and P_ID are not set (export them, or put them in an --env-file)', err.message)
    assert.equal('b', adapter.credentials('x', setting, { { 'k', { 'A_TOKEN', 'B_KEY' } } }))
  end)

  it('message_from reads the first non-empty field of an error body, else a snippet', function()
    local m = adapter.message_from { 'error.message', 'error', 'message' }
    assert.equal('deep', m('{"error":{"message":"deep"},"message":"top"}'))
    assert.equal('flat', m('{"error":"flat"}'))
    assert.equal('a; b', m('{"message":["a","b"]}'))
    assert.equal('top', m('{"error":{"message":""},"message":"top"}'))
    assert.equal('<html>oops</html>', m('<html>oops</html>'))
  end)

  it('stdin_upload, put_via and done', function()
    local wrote, ran = {}, {}
    local function upload(_, _, path, data)
      if data == 'refuse' then return nil, 'no space', 'EIO' end
      wrote[path] = data
      return true
    end
    assert.is_nil(adapter.stdin_upload(upload, nil, {}, nil))
    local path = adapter.stdin_upload(upload, nil, {}, 'input')
    assert.matches('^/tmp/cseng%-stdin%-%x+$', path)
    assert.equal('input', wrote[path])
    assert.same({ false, 'no space', 'EIO' }, { adapter.stdin_upload(upload, nil, {}, 'refuse') })
    local P = { name = 'p', exec = function(_, _, cmd) ran[#ran + 1] = cmd; return { code = 0, stdout = '', stderr = '' } end }
    assert.is_true(adapter.put_via(P, upload)(nil, {}, '/dst', 'tarbytes'))
    assert.matches("^mkdir %-p '?/dst'? && tar %-xf /tmp/cseng%-put%-%x+%.tar %-C '?/dst'?", ran[1])
    assert.same({ nil, 'no space', 'EIO' }, { adapter.put_via(P, upload)(nil, {}, '/dst', 'refuse') })
    assert.is_true(adapter.done({ any = 'data' }))
    assert.same({ nil, 'm', 'HTTP_500' }, { adapter.done(nil, 'm', 'HTTP_500') })
  end)
end)
