local fs = require('cseng.fs')
local sys = require('cseng.sys')

local function octal(s) return tonumber(s, 8) end

describe('cseng.fs', function()
  local dir
  before_each(function() dir = assert(fs.tempdir('cseng-fs-spec-')) end)
  after_each(function() if dir and fs.exists(dir) then assert(fs.remove_tree(dir)) end end)

  describe('read / write / append', function()
    it('writes and reads back binary data', function()
      local p = dir .. '/a.bin'
      local data = 'x\0y\255' .. string.rep('z', 200000)
      assert.is_true(fs.write(p, data))
      assert.equal(data, fs.read(p))
      assert.equal('', (function() fs.write(p, ''); return fs.read(p) end)())
    end)

    it('returns nil, message with path, ENOENT for a missing file', function()
      local v, msg, code = fs.read(dir .. '/nope')
      assert.is_nil(v)
      assert.equal('ENOENT', code)
      assert.matches(dir .. '/nope', msg, 1, true)
      assert.matches('No such file', msg)
    end)

    it('reports EISDIR and ENOTDIR', function()
      assert.equal('EISDIR', select(3, fs.read(dir)))
      fs.write(dir .. '/f', 'x')
      assert.equal('ENOTDIR', select(3, fs.read(dir .. '/f/g')))
      assert.equal('ENOTDIR', select(3, fs.write(dir .. '/f/g', 'x')))
    end)

    it('write is atomic: replaces by rename and leaves no temp files', function()
      local p = dir .. '/c.txt'
      fs.write(p, 'old')
      assert.is_true(fs.write(p, 'new', { sync = true }))
      assert.equal('new', fs.read(p))
      assert.same({ 'c.txt' }, fs.list(dir))
    end)

    it('write keeps an open reader on the old content (rename, not truncate)', function()
      local p = dir .. '/r.txt'
      fs.write(p, 'old content')
      local f = assert(io.open(p, 'rb'))
      fs.write(p, 'NEW')
      assert.equal('old content', f:read('a'))
      f:close()
      assert.equal('NEW', fs.read(p))
    end)

    it('write sets the mode (default 0644) and accepts octal strings', function()
      fs.write(dir .. '/m1', 'x')
      assert.equal(octal('644'), fs.stat(dir .. '/m1').mode)
      fs.write(dir .. '/m2', 'x', { mode = octal('755') })
      assert.equal(octal('755'), fs.stat(dir .. '/m2').mode)
      fs.write(dir .. '/m3', 'x', { mode = '0600' })
      assert.equal(octal('600'), fs.stat(dir .. '/m3').mode)
      assert.has_error(function() fs.write(dir .. '/m4', 'x', { mode = '9' }) end)
      assert.has_error(function() fs.write(dir .. '/m4', 'x', { mode = 1 << 20 }) end)
      assert.has_error(function() fs.write(dir .. '/m4', 'x', 'notatable') end)
    end)

    it('write leaves no temp file behind when it fails', function()
      fs.mkdir_p(dir .. '/sub')
      local v, _, code = fs.write(dir .. '/sub', 'x') -- rename over a directory
      assert.is_nil(v)
      assert.equal('EISDIR', code)
      assert.same({ 'sub' }, fs.list(dir))
    end)

    it('append creates, appends and syncs', function()
      local p = dir .. '/log'
      assert.is_true(fs.append(p, 'a\n'))
      assert.is_true(fs.append(p, 'b\n', { sync = true }))
      assert.is_true(fs.append(p, ''))
      assert.equal('a\nb\n', fs.read(p))
      assert.equal('ENOENT', select(3, fs.append(dir .. '/no/such/log', 'x')))
    end)

    it('append: large records from two processes never interleave', function()
      -- Two engine processes each append 100 records of 200 KiB (well above PIPE_BUF) to one file.
      local p = dir .. '/shared.log'
      local script = dir .. '/appender.lua'
      fs.write(script, [[
        local fs = require('cseng.fs')
        local path, tag = arg[1], arg[2]
        local body = string.rep(tag, 200 * 1024)
        for i = 1, 100 do assert(fs.append(path, tag .. i .. ':' .. body .. '\n')) end
      ]])
      local exe = sys.root() .. '/cseng'
      local a = io.popen(string.format('%q lua %q %q A', exe, script, p))
      local b = io.popen(string.format('%q lua %q %q B', exe, script, p))
      a:read('a'); b:read('a')
      assert.is_true(a:close())
      assert.is_true(b:close())
      local n = 0
      for line in fs.read(p):gmatch('([^\n]*)\n') do
        n = n + 1
        local tag, rest = line:match('^([AB])%d+:(.*)$')
        assert.is_not_nil(tag)
        assert.equal(200 * 1024, #rest)
        assert.is_nil(rest:find(tag == 'A' and 'B' or 'A', 1, true))
      end
      assert.equal(200, n)
    end)
  end)

  describe('directories', function()
    it('mkdir_p creates parents, accepts existing dirs, refuses files in the way', function()
      assert.is_true(fs.mkdir_p(dir .. '/a/b//c/'))
      assert.equal('dir', fs.stat(dir .. '/a/b/c').type)
      assert.is_true(fs.mkdir_p(dir .. '/a/b'))
      fs.write(dir .. '/f', 'x')
      local v, msg, code = fs.mkdir_p(dir .. '/f/g')
      assert.is_nil(v)
      assert.equal('ENOTDIR', code)
      assert.matches(dir .. '/f', msg, 1, true)
      assert.equal('EEXIST', select(3, fs.mkdir_p(dir .. '/f')))
      fs.mkdir_p(dir .. '/m', '0700')
      assert.equal(octal('700'), fs.stat(dir .. '/m').mode)
    end)

    it('list returns sorted names without . and ..', function()
      for _, n in ipairs({ 'b', 'a', 'C', '.hidden', 'a-b', 'a b' }) do fs.write(dir .. '/' .. n, '') end
      assert.same({ '.hidden', 'C', 'a', 'a b', 'a-b', 'b' }, fs.list(dir))
      assert.same({}, fs.list((function() fs.mkdir_p(dir .. '/empty'); return dir .. '/empty' end)()))
      assert.equal('ENOENT', select(3, fs.list(dir .. '/missing')))
      assert.equal('ENOTDIR', select(3, fs.list(dir .. '/a')))
    end)

    it('walk lists the tree sorted, with types, without following symlinks', function()
      fs.mkdir_p(dir .. '/t/sub/deep')
      fs.write(dir .. '/t/sub/deep/f.txt', 'hello')
      fs.write(dir .. '/t/a-b', '')
      fs.write(dir .. '/t/z', '', { mode = octal('755') })
      fs.mkdir_p(dir .. '/outside')
      fs.write(dir .. '/outside/secret', 's')
      fs.symlink('../outside', dir .. '/t/link')
      local got = {}
      for _, e in ipairs(assert(fs.walk(dir .. '/t/'))) do got[#got + 1] = e.path .. ':' .. e.type end
      assert.same({ 'a-b:file', 'link:link', 'sub:dir', 'sub/deep:dir', 'sub/deep/f.txt:file', 'z:file' }, got)
      local w = fs.walk(dir .. '/t')
      assert.equal(5, w[5].size)
      assert.equal(octal('755'), w[6].mode)
      assert.equal('ENOENT', select(3, fs.walk(dir .. '/none')))
    end)

    it('tempdir makes private unique directories under $TMPDIR', function()
      local a, b = fs.tempdir('x-'), fs.tempdir('x-')
      assert.are_not.equal(a, b)
      assert.equal(octal('700'), fs.stat(a).mode)
      assert.matches('/x%-[%w]+$', a)
      fs.remove_tree(a); fs.remove_tree(b)
      assert.has_error(function() fs.tempdir('a/b') end)
    end)
  end)

  describe('metadata', function()
    it('stat and lstat report type, size, mode, mtime, uid, gid', function()
      fs.write(dir .. '/f', 'abc', { mode = '0640' })
      fs.symlink('f', dir .. '/l')
      local s = assert(fs.stat(dir .. '/l'))
      assert.equal('file', s.type)
      assert.equal(3, s.size)
      assert.equal(octal('640'), s.mode)
      assert.equal(sys.uid(), s.uid)
      assert.is_number(s.gid)
      assert.is_true(math.abs(s.mtime - os.time()) < 60)
      assert.equal(math.type(s.mtime_ns), 'integer')
      local l = assert(fs.lstat(dir .. '/l'))
      assert.equal('link', l.type)
      assert.equal(1, l.size)
      assert.equal('dir', fs.stat(dir).type)
    end)

    it('stat of a missing path is nil, message, ENOENT; exists sees dangling links', function()
      local v, msg, code = fs.stat(dir .. '/missing')
      assert.is_nil(v)
      assert.equal('ENOENT', code)
      assert.matches('missing', msg)
      assert.equal('ENOENT', select(3, fs.lstat(dir .. '/missing')))
      assert.is_false(fs.exists(dir .. '/missing'))
      fs.symlink('missing', dir .. '/dangling')
      assert.is_true(fs.exists(dir .. '/dangling'))
      assert.equal('ENOENT', select(3, fs.stat(dir .. '/dangling')))
    end)

    it('chmod, rename, symlink, readlink, remove', function()
      fs.write(dir .. '/f', 'x')
      assert.is_true(fs.chmod(dir .. '/f', '0750'))
      assert.equal(octal('750'), fs.stat(dir .. '/f').mode)
      assert.is_true(fs.rename(dir .. '/f', dir .. '/g'))
      assert.is_false(fs.exists(dir .. '/f'))
      local v, msg, code = fs.rename(dir .. '/f', dir .. '/h')
      assert.is_nil(v)
      assert.equal('ENOENT', code)
      assert.matches('rename .*/f %-> .*/h', msg)
      assert.is_true(fs.symlink('g', dir .. '/l'))
      assert.equal('EEXIST', select(3, fs.symlink('g', dir .. '/l')))
      assert.equal('g', fs.readlink(dir .. '/l'))
      assert.equal('EINVAL', select(3, fs.readlink(dir .. '/g')))
      assert.is_true(fs.remove(dir .. '/l'))
      assert.equal('x', fs.read(dir .. '/g'))
      fs.mkdir_p(dir .. '/d/e')
      assert.equal('ENOTEMPTY', select(3, fs.remove(dir .. '/d')))
      assert.is_true(fs.remove(dir .. '/d/e'))
      assert.is_true(fs.remove(dir .. '/d'))
      assert.equal('ENOENT', select(3, fs.remove(dir .. '/d')))
      assert.has_error(function() fs.chmod(dir .. '/g') end)
    end)

    it('reports EACCES for an unreadable file (as root: in a child dropped to nobody)', function()
      fs.write(dir .. '/secret', 'x', { mode = '0000' })
      if sys.uid() ~= 0 then
        local v, msg, code = fs.read(dir .. '/secret')
        assert.is_nil(v)
        assert.equal('EACCES', code)
        assert.matches('secret: Permission denied', msg)
        return
      end
      -- root bypasses permission checks: ask an unprivileged child engine instead
      if not os.execute('command -v setpriv >/dev/null 2>&1') then
        pending('running as root without setpriv(1)')
        return
      end
      fs.chmod(dir, '0755')
      local script = dir .. '/eacces.lua'
      fs.write(script, [[
        local fs = require('cseng.fs')
        local v, msg, code = fs.read(arg[1])
        local w, _, wcode = fs.write(arg[2], 'x')
        io.write(tostring(v), '|', msg, '|', code, '|', tostring(w), '|', wcode)
      ]])
      local cmd = string.format('setpriv --reuid=65534 --regid=65534 --clear-groups %q lua %q %q %q 2>&1',
        sys.root() .. '/cseng', script, dir .. '/secret', dir .. '/sub-not-writable')
      local out = io.popen(cmd):read('a')
      assert.equal('nil|' .. dir .. '/secret: Permission denied|EACCES|nil|EACCES', out)
    end)
  end)

  describe('remove_tree', function()
    it('removes a tree, including read-only directories', function()
      fs.mkdir_p(dir .. '/t/a/b')
      fs.write(dir .. '/t/a/b/f', 'x')
      fs.chmod(dir .. '/t/a/b', '0555')
      fs.chmod(dir .. '/t/a', '0500')
      assert.is_true(fs.remove_tree(dir .. '/t'))
      assert.is_false(fs.exists(dir .. '/t'))
      assert.equal('ENOENT', select(3, fs.remove_tree(dir .. '/t')))
    end)

    it('never follows symlinks out of the tree, even when given "link/"', function()
      fs.mkdir_p(dir .. '/outside/keep')
      fs.write(dir .. '/outside/keep/precious', 'p')
      fs.mkdir_p(dir .. '/t/sub')
      fs.symlink(dir .. '/outside', dir .. '/t/abs')
      fs.symlink('../../outside/keep', dir .. '/t/sub/rel')
      fs.symlink(dir .. '/outside', dir .. '/toplink')
      assert.is_true(fs.remove_tree(dir .. '/t'))
      assert.is_true(fs.remove_tree(dir .. '/toplink/'))
      assert.is_false(fs.exists(dir .. '/toplink'))
      assert.equal('p', fs.read(dir .. '/outside/keep/precious'))
    end)

    it('removes a single file', function()
      fs.write(dir .. '/f', 'x')
      assert.is_true(fs.remove_tree(dir .. '/f'))
      assert.is_false(fs.exists(dir .. '/f'))
    end)
  end)

  describe('copy_tree', function()
    it('copies files, dirs and symlinks with their modes', function()
      fs.mkdir_p(dir .. '/src/bin')
      fs.write(dir .. '/src/bin/run.sh', '#!/bin/sh\n', { mode = '0755' })
      fs.write(dir .. '/src/data', string.rep('d', 700000), { mode = '0600' })
      fs.symlink('bin/run.sh', dir .. '/src/link')
      fs.symlink('/etc/passwd', dir .. '/src/abs')
      fs.chmod(dir .. '/src/bin', '0750')
      assert.is_true(fs.copy_tree(dir .. '/src', dir .. '/dst'))
      local function shape(root)
        local out = {}
        for _, e in ipairs(fs.walk(root)) do
          out[#out + 1] = string.format('%s %s %o %s', e.path, e.type, e.mode,
            e.type == 'link' and fs.readlink(root .. '/' .. e.path) or e.type == 'file' and fs.read(root .. '/' .. e.path):sub(1, 8) or '')
        end
        return out
      end
      assert.same(shape(dir .. '/src'), shape(dir .. '/dst'))
      assert.equal('link', fs.lstat(dir .. '/dst/abs').type)
      assert.equal(700000, fs.stat(dir .. '/dst/data').size)
    end)

    it('merges into an existing directory, replacing (not writing through) symlinks', function()
      fs.mkdir_p(dir .. '/src')
      fs.write(dir .. '/src/f', 'new')
      fs.mkdir_p(dir .. '/dst')
      fs.write(dir .. '/victim', 'keep')
      fs.symlink(dir .. '/victim', dir .. '/dst/f')
      fs.write(dir .. '/dst/other', 'o')
      assert.is_true(fs.copy_tree(dir .. '/src', dir .. '/dst'))
      assert.equal('file', fs.lstat(dir .. '/dst/f').type)
      assert.equal('new', fs.read(dir .. '/dst/f'))
      assert.equal('keep', fs.read(dir .. '/victim'))
      assert.equal('o', fs.read(dir .. '/dst/other'))
    end)

    it('fails with the source path and code', function()
      local v, msg, code = fs.copy_tree(dir .. '/nope', dir .. '/dst')
      assert.is_nil(v)
      assert.equal('ENOENT', code)
      assert.matches('nope', msg)
      fs.mkdir_p(dir .. '/src/d')
      fs.write(dir .. '/dst', 'file in the way')
      assert.equal('EEXIST', select(3, fs.copy_tree(dir .. '/src', dir .. '/dst')))
    end)
  end)

  describe('path helpers', function()
    it('basename', function()
      local cases = { { 'a/b', 'b' }, { 'a/b/', 'b' }, { 'b', 'b' }, { '/', '/' }, { '//', '/' }, { '', '.' },
        { '/a', 'a' }, { 'a.tar.gz', 'a.tar.gz' } }
      for _, c in ipairs(cases) do assert.equal(c[2], fs.basename(c[1]), c[1]) end
    end)

    it('dirname', function()
      local cases = { { 'a/b', 'a' }, { 'a/b/', 'a' }, { 'a', '.' }, { '/a', '/' }, { '/', '/' }, { '', '.' },
        { 'a//b', 'a' }, { '/x/y/z', '/x/y' }, { './a', '.' } }
      for _, c in ipairs(cases) do assert.equal(c[2], fs.dirname(c[1]), c[1]) end
    end)

    it('join', function()
      assert.equal('a/b/c', fs.join('a', 'b', 'c'))
      assert.equal('a/b', fs.join('a/', '/b'))
      assert.equal('/x/etc', fs.join('/x', '/etc'))
      assert.equal('a/b', fs.join('a', '', 'b'))
      assert.equal('/a', fs.join('/', 'a'))
      assert.equal('a/', fs.join('a', '/'))
      assert.equal('', fs.join())
      assert.has_error(function() fs.join('a', {}) end)
    end)
  end)
end)
