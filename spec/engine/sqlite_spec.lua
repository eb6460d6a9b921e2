-- cseng.sqlite (engine/lsqlite.c): Debian's libsqlite3 as the history store uses it. Values go in
-- only as bound parameters and come back as they went (integers stay integers, NULs stay in
-- strings, NaN is NULL); text that looks like SQL is data; misuse raises, naming what was wrong;
-- failures carry the engine's codes; a file that is not a database, a symbolic link in place of
-- the file, a read-only open and another connection's lock are refused with their own codes.
local sqlite = require('cseng.sqlite')
local fs = require('cseng.fs')

local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

local function db_in(dir, name, o)
  return assert(sqlite.open(fs.join(dir, name or 'x.db'), o))
end

describe('cseng.sqlite', function()
  local dir
  before_each(function() dir = H.tempdir('cseng-sqlite-') end)

  it('binds every Lua type and reads it back unchanged', function()
    local db = db_in(dir)
    assert(db:exec('CREATE TABLE t(k INTEGER PRIMARY KEY, v)'))
    local ins = assert(db:prepare('INSERT INTO t(k, v) VALUES (?, ?)'))
    local values = { math.maxinteger, math.mininteger, 0, -1, 1.5, 1e300, -0.25, 'text', 'a\0b\0', '', true, false }
    for i, v in ipairs(values) do assert.equal(1, ins:run(i, v)) end
    assert.equal(1, ins:run(100, nil))
    assert.equal(1, ins:run(101, 0 / 0)) -- NaN is stored as NULL
    local sel = assert(db:prepare('SELECT v FROM t WHERE k = ?'))
    for i, v in ipairs(values) do
      local row = sel:one(i)
      if type(v) == 'boolean' then v = v and 1 or 0 end
      assert.is_nil(H.diff(row.v, v, 'value ' .. i))
    end
    assert.same({}, sel:one(100))
    assert.same({}, sel:one(101))
    assert.is_nil(sel:one(999))
    assert.equal(14, #db:prepare('SELECT k FROM t ORDER BY k'):all())
    db:close()
  end)

  it('keeps text that looks like SQL as data, and exec takes no values', function()
    local db = db_in(dir)
    assert(db:exec('CREATE TABLE runs(id TEXT); CREATE TABLE other(x)'))
    local evil = "x'); DROP TABLE other; --"
    assert(db:prepare('INSERT INTO runs(id) VALUES (?)'):run(evil))
    assert.equal(evil, db:prepare('SELECT id FROM runs'):one().id)
    assert.truthy(db:prepare("SELECT name FROM sqlite_master WHERE name = 'other'"):one())
    assert.has_error(function() db:exec('SELECT ?', 1) end, 'sqlite: exec takes no values (prepare a statement and bind them)')
    assert.has_error(function() db:prepare('SELECT 1; SELECT 2') end)
    local ok, err = pcall(db.prepare, db, 'SELECT 1; DROP TABLE runs')
    assert.is_false(ok)
    assert.matches('prepare takes one statement', tostring(err))
    db:close()
  end)

  it('raises on misuse, naming it', function()
    local db = db_in(dir)
    local st = assert(db:prepare('SELECT ? AS a, ? AS b'))
    assert.has_error(function() st:one(1) end, 'sqlite: the statement takes 2 value(s), got 1')
    assert.has_error(function() st:one(1, {}) end, 'sqlite: value 2 is a table (nil, boolean, number or string)')
    assert.same({ a = 1, b = 'x' }, st:one(1, 'x'))
    assert.same({ 'a', 'b' }, st:columns())
    st:close()
    st:close() -- idempotent
    assert.has_error(function() st:one(1, 2) end, 'sqlite: the statement is closed')
    local st2 = assert(db:prepare('SELECT 1 AS one'))
    db:close()
    assert.has_error(function() db:exec('SELECT 1') end, 'sqlite: the database is closed')
    assert.has_error(function() st2:one() end, "sqlite: the statement's database is closed")
    assert.has_error(function() sqlite.open(fs.join(dir, 'y.db'), { busy_timeout = -1 }) end)
  end)

  it('returns failures with the engine\'s codes', function()
    local db = db_in(dir)
    assert(db:exec('CREATE TABLE u(k TEXT PRIMARY KEY)'))
    local ins = assert(db:prepare('INSERT INTO u(k) VALUES (?)'))
    assert(ins:run('a'))
    local n, err, code = ins:run('a')
    assert.is_nil(n)
    assert.equal('ECONSTRAINT', code)
    assert.matches('UNIQUE constraint failed', err)
    assert(ins:run('b')) -- the statement is usable after a failure
    local _, serr, scode = db:exec('SELECT * FROM nope')
    assert.equal('ESQLITE', scode)
    assert.matches('no such table: nope', serr)
    local _, perr, pcode = db:prepare('SELEC 1')
    assert.equal('ESQLITE', pcode)
    assert.matches('syntax error', perr)
    db:close()
    -- a file that is not a database
    local bad = fs.join(dir, 'bad.db')
    assert(fs.write(bad, string.rep('not a database ', 100)))
    local bdb = assert(sqlite.open(bad))
    local _, _, ccode = bdb:exec('SELECT * FROM sqlite_master')
    assert.equal('ECORRUPT', ccode)
    bdb:close()
    -- a directory that does not exist
    local _, oerr, ocode = sqlite.open(fs.join(dir, 'no/such/dir/x.db'))
    assert.equal('ENOENT', ocode)
    assert.matches('no/such/dir/x.db', oerr)
  end)

  it('refuses a symbolic link as the database and writes through a read-only open', function()
    local target = fs.join(dir, 'victim.db')
    local v = db_in(dir, 'victim.db')
    assert(v:exec('CREATE TABLE t(x)'))
    v:close()
    local before = fs.read(target)
    assert(fs.symlink(target, fs.join(dir, 'link.db')))
    local db, err, code = sqlite.open(fs.join(dir, 'link.db'))
    assert.is_nil(db)
    assert.is_string(code)
    assert.matches('link.db', err)
    assert.equal(before, fs.read(target))
    local ro = assert(sqlite.open(target, { readonly = true }))
    local _, _, rcode = ro:exec('INSERT INTO t VALUES (1)')
    assert.equal('EROFS', rcode)
    ro:close()
    local _, _, ncode = sqlite.open(fs.join(dir, 'absent.db'), { create = false })
    assert.equal('ENOENT', ncode)
  end)

  it('waits for another connection\'s lock up to its busy timeout, then fails with EBUSY', function()
    local a = db_in(dir, 'shared.db')
    assert(a:exec('CREATE TABLE t(x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1)'))
    local b = db_in(dir, 'shared.db', { busy_timeout = 0.05 })
    local _, err, code = b:exec('BEGIN IMMEDIATE')
    assert.equal('EBUSY', code)
    assert.matches('locked', err)
    assert(a:exec('COMMIT'))
    assert(b:exec('BEGIN IMMEDIATE; INSERT INTO t VALUES (2); COMMIT'))
    assert.equal(2, b:prepare('SELECT COUNT(*) AS n FROM t'):one().n)
    assert.is_true(b:autocommit())
    a:close(); b:close()
  end)

  it('each: a row at a time, and a raise inside ends the read', function()
    local db = db_in(dir)
    assert(db:exec('CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3)'))
    local st = assert(db:prepare('SELECT x FROM t WHERE x >= ? ORDER BY x'))
    local seen = {}
    assert.equal(2, st:each(function(r) seen[#seen + 1] = r.x end, 2))
    assert.same({ 2, 3 }, seen)
    assert.has_error(function() st:each(function() error('stop here', 0) end, 1) end, 'stop here')
    -- the statement was reset: a writer on another connection is not blocked by a read left open
    local w = db_in(dir, 'x.db', { busy_timeout = 0 })
    assert(w:exec('INSERT INTO t VALUES (4)'))
    assert.equal(4, #st:all(1))
    w:close(); db:close()
  end)

  it('an unreachable statement and database are collected without a leak or a crash', function()
    for _ = 1, 50 do
      local db = db_in(dir)
      local st = db:prepare('SELECT 1 AS x')
      assert.equal(1, st:one().x)
    end
    collectgarbage(); collectgarbage()
    assert.matches('^3%.', sqlite.version())
  end)
end)
