-- Datasets never read the host: decoded task content is always archive bytes (never a path), and
-- a SWE-smith row's environment.source_dir resolves only inside the dataset's own folder tree
-- (or --source-root). Each refusal is one error naming the file, row and field.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local cjson = require('cjson')
local dataset = require('cseng.workload.dataset')
local H = require('spec.helpers.common')

local ROOT = H.ROOT

local tmp = H.tempdir('cseng-dataset-safety')
teardown(H.remove_tempdirs)

local function load_err(path, opts)
  local ok, err = pcall(dataset.load, path, opts or { cache_dir = tmp .. '/cache' })
  assert.is_false(ok, 'the dataset loaded')
  return tostring(err)
end

describe('seed rows', function()
  it('never open a host file whose path the base64 decodes to', function()
    -- a host archive whose test.sh would run if it were extracted
    local host = tmp .. '/host-task.tar.gz'
    assert(fs.write(host, archive.pack({ { path = 'task.toml', data = 'version = "1.0"\n' },
      { path = 'instruction.md', data = 'x' }, { path = 'tests/test.sh', data = 'touch ' .. tmp .. '/PWNED\n' } },
      { format = 'tar.gz' })))
    local row = { task_id = 'evil', instruction = 'x',
      task_files = { encoding = 'tar.gz+base64', content = crypto.base64(host) } }
    local file = tmp .. '/evil.jsonl'
    assert(fs.write(file, cjson.encode(row) .. '\n'))
    local err = load_err(file)
    assert.matches('^' .. file:gsub('%p', '%%%0') .. ': row 1: task_files', err)
    assert.is_nil(err:find(host, 1, true), 'the error must not echo (and so probe) the host path')
    assert.is_false(fs.exists(tmp .. '/PWNED'))
    -- the same text naming a path that does not exist gives the same error: nothing is probed
    row.task_files.content = crypto.base64(tmp .. '/does-not-exist.tar.gz')
    assert(fs.write(file, cjson.encode(row) .. '\n'))
    local err2 = load_err(file)
    assert.are.equal(err:gsub('row 1: .*', ''), err2:gsub('row 1: .*', ''))
    assert.is_nil(err2:find('does%-not%-exist'))
  end)
end)

describe('SWE-smith rows', function()
  local base
  setup(function()
    local line = assert(fs.read(ROOT .. '/data/swesmith/instances.jsonl')):match('[^\n]+')
    base = cjson.decode(line)
  end)

  local function write_row(dir, source_dir)
    assert(fs.mkdir_p(dir))
    local r = cjson.decode(cjson.encode(base))
    r.environment.source_dir = source_dir
    local file = dir .. '/rows.jsonl'
    assert(fs.write(file, cjson.encode(r) .. '\n'))
    return file
  end

  it('refuse an absolute source_dir', function()
    local file = write_row(tmp .. '/abs', '/usr/share')
    assert.matches('row 1: environment%.source_dir: /usr/share is absolute', load_err(file))
  end)

  it('refuse a climbing source_dir', function()
    local file = write_row(tmp .. '/climb/a', 'x/../../../../usr/share')
    assert.matches('row 1: environment%.source_dir: [^\n]* climbs out of its folder', load_err(file))
  end)

  it('refuse a symbolic link out of the dataset folder', function()
    local dir = tmp .. '/link'
    assert(fs.mkdir_p(dir))
    assert(fs.symlink('/usr/share', dir .. '/repo'))
    local file = write_row(dir, 'repo')
    assert.matches('row 1: environment%.source_dir: repo resolves outside', load_err(file))
  end)

  -- a row whose test ids climb out of the snapshot and the task cache: refused at load, before
  -- anything is read or written (the old code read src/<id> and wrote cache/<sha>/tests/files/<id>)
  local function with_tests(dir, f2p, p2p)
    assert(fs.mkdir_p(dir))
    local r = cjson.decode(cjson.encode(base))
    r.environment.source_dir = 'repo'
    assert(fs.copy_tree(ROOT .. '/data/swesmith/repos/tinystats', dir .. '/repo'))
    r.FAIL_TO_PASS, r.PASS_TO_PASS = f2p, p2p or {}
    local file = dir .. '/rows.jsonl'
    assert(fs.write(file, cjson.encode(r) .. '\n'))
    return file
  end

  for depth = 1, 6 do
    it('refuse a test id that climbs ' .. depth .. ' level(s), and write nothing', function()
      local dir = tmp .. '/d1/d2/d3/d4/d5/d6/climbid' .. depth
      local target = 'PWNED-' .. depth .. '.py'
      local id = string.rep('../', depth) .. target .. '::test_x'
      -- the file the old code would have read exists, so only confinement can refuse it
      local up = dir .. '/repo'
      for _ = 1, depth do up = up:match('^(.*)/[^/]*$') end
      assert(fs.mkdir_p(dir .. '/repo')); assert(fs.write(up .. '/' .. target, 'import os\n'))
      local file = with_tests(dir, { id })
      local cache = dir .. '/cache'
      local err = load_err(file, { cache_dir = cache })
      assert.matches('rows%.jsonl: row 1: FAIL_TO_PASS%[1%]: [^\n]*climbs out of its folder', err)
      assert.is_nil(err:find('\n'), 'one line')
      -- nothing written: no task folder in the cache, no file where the id pointed
      for _, name in ipairs(fs.list(cache) or {}) do assert.is_nil(name:match('^%x+$'), 'a task folder was written') end
      local landed = cache .. '/x/tests/files'
      for _ = 1, depth do landed = landed:match('^(.*)/[^/]*$') end
      assert.is_false(fs.exists(landed .. '/' .. target))
    end)
  end

  it('refuse an absolute test id, a PASS_TO_PASS climb, and an overlong one', function()
    local err = load_err(with_tests(tmp .. '/absid', { '/etc/passwd::x' }))
    assert.matches('FAIL_TO_PASS%[1%]: /etc/passwd is absolute', err)
    err = load_err(with_tests(tmp .. '/p2p', { 'tests/test_core.py::test_median_even' }, { 'tests/../../x.py' }))
    assert.matches('PASS_TO_PASS%[1%]: [^\n]*climbs out', err)
    err = load_err(with_tests(tmp .. '/long', { string.rep('a', 300) .. '.py::x' }))
    assert.matches('FAIL_TO_PASS%[1%]: [^\n]*component of 303 bytes', err)
  end)

  it('refuse a test id through a symbolic link out of the snapshot (.pytest_cache too)', function()
    local dir = tmp .. '/linkid'
    local file = with_tests(dir, { '.pytest_cache/leak.py::x' })
    assert(fs.write(tmp .. '/host-secret.txt', 'SECRET'))
    assert(fs.mkdir_p(dir .. '/repo/.pytest_cache'))
    assert(fs.symlink(tmp .. '/host-secret.txt', dir .. '/repo/.pytest_cache/leak.py'))
    local err = load_err(file)
    assert.matches('FAIL_TO_PASS%[1%]: test file %.pytest_cache/leak%.py resolves outside', err)
    -- a link to a directory on the way out is caught the same way
    assert(fs.symlink(tmp, dir .. '/repo/up'))
    err = load_err(with_tests(tmp .. '/linkid2', { 'up/host-secret.txt::x' }))
    assert.matches('does not exist', err) -- linkid2 has its own repo copy: no such link there
  end)

  it('refuse a task id or instance id that is a climbing path', function()
    local r = cjson.decode(cjson.encode(base))
    r.instance_id = '../../escape'
    local f = tmp .. '/iid.jsonl'
    assert(fs.write(f, cjson.encode(r) .. '\n'))
    assert.matches('row 1: instance_id: %.%./%.%./escape climbs out', load_err(f))
    local seed = { task_id = '/abs/id', instruction = 'x', task_files = { encoding = 'tar.gz+base64', content = '' } }
    assert(fs.write(f, cjson.encode(seed) .. '\n'))
    assert.matches('row 1: task_id: /abs/id is absolute', load_err(f))
  end)

  it('resolve inside --source-root when given, and the bundled rows still load', function()
    local repo = tmp .. '/elsewhere/swesmith/repos/tinystats'
    assert(fs.mkdir_p(tmp .. '/elsewhere/swesmith/repos'))
    assert(fs.copy_tree(ROOT .. '/data/swesmith/repos/tinystats', repo))
    local file = write_row(tmp .. '/rooted', 'swesmith/repos/tinystats')
    assert.matches('not found in', load_err(file))
    local tasks = dataset.load(file, { cache_dir = tmp .. '/cache', source_root = tmp .. '/elsewhere' })
    assert.are.equal(1, #tasks)
    assert.is_true(#dataset.load(ROOT .. '/data/swesmith/instances.jsonl', { cache_dir = tmp .. '/cache' }) > 0)
  end)
end)
