-- The error type (lua/cseng/lib/errors.lua): every error code written as a literal in the Lua
-- tree, the plans and the engine's C is registered; the classification functions keep the
-- behaviour the run layer relied on; a failed trial record always carries a registered code.
local fs = require('cseng.fs')
local frame = require('cseng.run.frame')
local sys = require('cseng.sys')
local errors = require('cseng.lib.errors')
local results = require('cseng.results.log')

local ROOT = sys.root()

-- Words that look like codes but are not: Dockerfile instructions, vendor enum values, protobuf
-- and Parquet type names, and the E2B provider's environment variables.
local NOT_CODES = { ENV = true, ENTRYPOINT = true, EXPOSE = true, ENABLED = true, ENUM = true }
local function not_a_code(word) return NOT_CODES[word] or word:match('^E2B_') end

local function files_under(dir, ext, out)
  out = out or {}
  local entries = fs.list(dir) or {}
  table.sort(entries)
  for _, name in ipairs(entries) do
    local p = dir .. '/' .. name
    local st = fs.lstat(p)
    if st and st.type == 'dir' then files_under(p, ext, out)
    elseif name:sub(-#ext) == ext then out[#out + 1] = p end
  end
  return out
end

-- Every quoted code literal of a file: {code, file, line}. Lua files: 'E...', "E...",
-- 'HTTP_nnn', 'GRPC_...'; C files: "E..." string literals.
local function literals(path, c_file)
  local out, n = {}, 0
  for line in (fs.read(path) or ''):gmatch('[^\n]*') do
    n = n + 1
    local pats = c_file and { '"(E[A-Z0-9_]+)"' } or
      { "'(E[A-Z0-9_]+)'", '"(E[A-Z0-9_]+)"', "'(HTTP_%d+)'", "'(GRPC_[A-Z_]+)'" }
    for _, pat in ipairs(pats) do
      for word in line:gmatch(pat) do
        if not not_a_code(word) then out[#out + 1] = { word, path:sub(#ROOT + 2), n } end
      end
    end
  end
  return out
end

local function all_literals()
  local out = {}
  for _, dir in ipairs({ 'lua', 'plans' }) do
    for _, p in ipairs(files_under(ROOT .. '/' .. dir, '.lua')) do
      for _, l in ipairs(literals(p, false)) do out[#out + 1] = l end
    end
  end
  for _, p in ipairs(files_under(ROOT .. '/engine', '.c')) do
    for _, l in ipairs(literals(p, true)) do out[#out + 1] = l end
  end
  return out
end

describe('the error code registry', function()
  it('registers every code literal in lua/, plans/ and engine/', function()
    local lits = all_literals()
    assert.is_true(#lits > 300, 'the scan found the literals (' .. #lits .. ')')
    local missing = {}
    for _, l in ipairs(lits) do
      if not errors.registered(l[1]) then missing[#missing + 1] = string.format('%s:%d: %s', l[2], l[3], l[1]) end
    end
    assert.same({}, missing)
  end)

  it('finds an unregistered literal (the scan is not blind)', function()
    local p = assert(fs.tempdir('cseng-errors-spec')) .. '/x.lua'
    assert(fs.write(p, "return nil, 'no', 'ENOTACODE'\nlocal e = { code = 'EIO' }\n"))
    local found = {}
    for _, l in ipairs(literals(p, false)) do found[#found + 1] = l[1] end
    assert.same({ 'ENOTACODE', 'EIO' }, found)
    assert.is_false(errors.registered('ENOTACODE'))
    fs.remove_tree(fs.dirname(p))
  end)

  it('gives every code a one-line meaning, once, and a field of its own', function()
    local seen = {}
    for _, c in ipairs(errors.registry) do
      assert.is_nil(seen[c[1]], c[1] .. ' is registered twice')
      seen[c[1]] = true
      assert.matches('^E[A-Z0-9_]+$', c[1])
      assert.is_true(type(c[2]) == 'string' and #c[2] > 10 and not c[2]:find('\n'), c[1])
      assert.equal(c[1], errors[c[1]])
      assert.equal(c[1], errors.code(c[1]))
    end
    assert.is_true(errors.registered('HTTP_503'))
    assert.is_true(errors.registered('GRPC_UNAVAILABLE'))
    assert.is_false(errors.registered('HTTP_5'))
    assert.is_false(errors.registered(nil))
    assert.is_false(pcall(errors.code, 'ENOTACODE'))
  end)
end)

describe('classification', function()
  -- code -> { is_auth, is_transient, maybe_created }: the behaviour of providers.shared.adapter's
  -- is_auth/is_transient and session.maybe_created before they moved here
  local TABLE = {
    HTTP_401 = { true, false, false }, HTTP_403 = { true, false, false },
    GRPC_UNAUTHENTICATED = { true, false, false }, GRPC_PERMISSION_DENIED = { true, false, false },
    EAUTH = { true, false, false },
    HTTP_500 = { false, true, true }, HTTP_503 = { false, true, true }, HTTP_429 = { false, true, false },
    HTTP_408 = { false, true, true }, HTTP_404 = { false, false, false }, HTTP_409 = { false, false, false },
    ECONNRESET = { false, true, true }, ETIMEDOUT = { false, true, true }, ECONNREFUSED = { false, true, false },
    EHOSTUNREACH = { false, true, true }, GRPC_UNAVAILABLE = { false, true, true },
    GRPC_DEADLINE_EXCEEDED = { false, true, true }, EBADRESPONSE = { false, true, true }, EPROTO = { false, true, true },
    ENOTFOUND = { false, false, false }, EURL = { false, false, false }, ECONFIG = { false, false, false },
    ENOIMAGE = { false, false, false }, ECANCELED = { false, false, true }, EINTERNAL = { false, false, true },
    EIO = { false, false, true },
  }

  it('agrees with the behaviour the run layer relied on, for codes and for error objects', function()
    for code, want in pairs(TABLE) do
      for _, v in ipairs({ code, errors.new(code, 'x'), { code = code, message = 'x' } }) do
        assert.equal(want[1], errors.is_auth(v), 'is_auth ' .. code)
        assert.equal(want[2], errors.is_transient(v), 'is_transient ' .. code)
        assert.equal(want[3], errors.maybe_created(v), 'maybe_created ' .. code)
      end
    end
    -- no code at all: not auth, not transient, and the create's answer may have been lost
    assert.is_false(errors.is_auth(nil))
    assert.is_false(errors.is_transient(nil))
    assert.is_true(errors.maybe_created(nil))
    assert.is_true(errors.maybe_created({ message = 'no code' }))
  end)

  it('is the one implementation: the old entry points delegate', function()
    local adapter = require('providers.shared.adapter')
    local session = require('cseng.run.session')
    assert.equal(errors.is_auth, adapter.is_auth)
    assert.equal(errors.is_transient, adapter.is_transient)
    assert.equal(errors.maybe_created, session.maybe_created)
  end)
end)

describe('error records', function()
  local tmp
  before_each(function() tmp = assert(fs.tempdir('cseng-errors-spec')) end)
  after_each(function() fs.remove_tree(tmp) end)

  it('describes every error value with a registered code (a raised string is EINTERNAL)', function()
    for _, e in ipairs({ 'a plain string', { message = 'a table without code' }, 42, errors.new('EIO', 'x') }) do
      local _, code = errors.describe(e)
      assert.is_true(errors.registered(code), tostring(code))
    end
    assert.equal('EINTERNAL', select(2, errors.describe('boom')))
    assert.equal('EIO', select(2, errors.describe(errors.new('EIO', 'x'))))
  end)

  it('refuses, in strict mode, a failed trial record without a registered error_code', function()
    local strict = results.strict_codes
    results.strict_codes = true
    local w = results.open(tmp .. '/r.jsonl', 'r1')
    local ok, err = pcall(w.event, w, 'trial', { task_id = 't', outcome = 'error', error = 'x' })
    assert.is_false(ok)
    assert.equal('EINTERNAL', err.code)
    assert.matches('error_code nil', err.message)
    assert.is_false(pcall(w.event, w, 'startup_trial', { provider = 'p', ok = false, error = 'x', error_code = 'EWHAT' }))
    assert.is_true(pcall(w.event, w, 'trial', { task_id = 't', outcome = 'error', error = 'x', error_code = 'HTTP_500' }))
    assert.is_true(pcall(w.event, w, 'trial', { task_id = 't', outcome = 'failed' }))
    results.strict_codes = strict
  end)

  it('records a string raised inside a trial with a registered code', function()
    local strict = results.strict_codes
    results.strict_codes = true
    local base = require('providers.local')
    package.loaded['providers.errstring'] = setmetatable({
      name = 'errstring',
      exec = function() error('a plain string from the adapter') end,
    }, { __index = base })
    local ok, st, info = pcall(frame.run, 'tasks', { provider = 'errstring', dataset = ROOT .. '/data/smoke.jsonl',
      task_limit = 1, solver = 'nop', mode = 'cold', output = tmp .. '/run', quiet = true })
    package.loaded['providers.errstring'] = nil
    results.strict_codes = strict
    assert(ok, st)
    local trials = results.trials(results.read(info.jsonl))
    assert.equal(1, #trials)
    assert.equal('error', trials[1].outcome)
    assert.equal('EINTERNAL', trials[1].error_code)
    assert.matches('a plain string from the adapter', trials[1].error)
  end)

  it('never writes a Lua source position into the message of a bad --output', function()
    local ok, err = pcall(results.open, '/proc/cseng-nope/x/run.jsonl', 'r')
    assert.is_false(ok)
    assert.is_true(errors.is(err))
    assert.is_nil(tostring(err.message):find('%.lua:%d+:'))
    assert.matches('^cannot create the directory of the run log /proc/cseng%-nope/x/run.jsonl', err.message)
  end)
end)

describe('raised errors', function()
  -- lua/cseng/run/ is the run frame's (its raised strings are listed for its refactor); these two
  -- are not errors of a run: the LuaLS stub refusing to load, and busted's os.exit in cseng test
  local ALLOWED = {
    ['lua/meta/cseng.lua'] = true,
    ['lua/cseng/cli/commands/test.lua'] = true,
  }

  it('raises no bare string and no ad-hoc table outside the run frame', function()
    local found = {}
    for _, dir in ipairs({ 'lua', 'plans' }) do
      for _, p in ipairs(files_under(ROOT .. '/' .. dir, '.lua')) do
        local rel = p:sub(#ROOT + 2)
        if not ALLOWED[rel] and not rel:find('^lua/cseng/run/') then
          local n = 0
          for line in (fs.read(p) or ''):gmatch('[^\n]*') do
            n = n + 1
            local code = line:gsub('%-%-.*$', '')
            if code:find('%f[%w_.]error%(%s*[\'"{]') or code:find('%f[%w_.]error%(%s*string%.format') then
              found[#found + 1] = rel .. ':' .. n .. ': ' .. line:gsub('^%s+', '')
            end
          end
        end
      end
    end
    assert.same({}, found)
  end)

  it('gives every command one usage error: one line, no source position, exit status 2', function()
    local proc = require('cseng.proc')
    local cli = require('cseng.cli.main')
    local exit = require('cseng.cli.exit')
    local tried = 0
    for _, name in ipairs(cli.commands) do
      if name ~= 'test' and name ~= 'lua' then -- they pass options on (to busted, to the script)
        local r = assert(proc.run { argv = { ROOT .. '/cseng', name, '--no-such-flag' }, timeout = 60 })
        tried = tried + 1
        assert.equal(2, r.code, name .. ': ' .. r.stderr)
        assert.matches('^cseng: [^\n]+\n$', r.stderr, nil, name)
        assert.is_nil(r.stderr:find('%.lua:%d+:'), r.stderr)
      end
    end
    assert.is_true(tried >= 10)
    -- raised (dataset), returned (report) and from the dispatcher: the same shape
    for _, argv in ipairs({ { 'dataset', 'pack' }, { 'report' }, { 'no-such-command' }, { 'cleanup' } }) do
      local r = assert(proc.run { argv = { ROOT .. '/cseng', table.unpack(argv) }, timeout = 60 })
      assert.equal(2, r.code, table.concat(argv, ' ') .. ': ' .. r.stderr)
      assert.matches('^cseng: [^\n]+\n$', r.stderr)
    end
    local stderr, said = io.stderr, {}
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do said[#said + 1] = s end end } -- luacheck: ignore 122
    local usage_status, other_status = exit.fail(errors.usage('x')), exit.fail(errors.new('EIO', 'y'))
    io.stderr = stderr -- luacheck: ignore 122
    assert.equal(2, usage_status)
    assert.equal(1, other_status)
    assert.equal('cseng: x\ncseng: y\n', table.concat(said))
  end)
end)
