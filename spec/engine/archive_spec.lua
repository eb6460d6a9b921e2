local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local fs = require('cseng.fs')
local task = require('cseng.task')

local function octal(s) return tonumber(s, 8) end

-- A minimal ustar writer, so the specs can build archives that archive.pack refuses to make.
local function tar_header(h)
  local function num(n, width) return string.format('%0' .. (width - 1) .. 'o', n) .. '\0' end
  local function str(s, width) return s .. string.rep('\0', width - #s) end
  local hdr = table.concat({
    str(h.name, 100), num(h.mode or octal('644'), 8), num(0, 8), num(0, 8), num(h.size or 0, 12), num(0, 12),
    '        ', h.type or '0', str(h.link or '', 100), 'ustar\0', '00', str('', 32), str('', 32),
    num(0, 8), num(0, 8), str('', 155),
  })
  hdr = hdr .. string.rep('\0', 512 - #hdr)
  local sum = 0
  for i = 1, 512 do sum = sum + hdr:byte(i) end
  return hdr:sub(1, 148) .. string.format('%06o', sum) .. '\0 ' .. hdr:sub(157)
end

-- entries: {name=, data=, type='0'|'2'|'1'|'5'|..., link=, mode=, size= (header size, default #data)}
local function tar(entries)
  local out = {}
  for _, e in ipairs(entries) do
    local data = e.data or ''
    out[#out + 1] = tar_header({ name = e.name, mode = e.mode, size = e.size or #data, type = e.type, link = e.link })
    out[#out + 1] = data .. string.rep('\0', (512 - #data % 512) % 512)
  end
  out[#out + 1] = string.rep('\0', 1024)
  return table.concat(out)
end

local function shape(root)
  local out = {}
  for _, e in ipairs(assert(fs.walk(root))) do
    local p = root .. '/' .. e.path
    local extra = e.type == 'link' and fs.readlink(p) or e.type == 'file' and crypto.sha256_hex(fs.read(p)) or ''
    out[#out + 1] = string.format('%s %s %o %s', e.path, e.type, e.mode, extra)
  end
  return out
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

describe('cseng.archive', function()
  local root
  before_each(function() root = assert(fs.tempdir('cseng-archive-spec-')) end)
  after_each(function() if root then fs.remove_tree(root) end end)

  describe('extract refuses unsafe archives, writing nothing', function()
    local out, before

    before_each(function()
      fs.mkdir_p(root .. '/a/out')
      fs.write(root .. '/a/sibling', 'untouched')
      out = root .. '/a/out'
      before = shape(root)
    end)

    local function refused(bytes, code, pattern, opts)
      local res, msg, c = archive.extract(bytes, out, opts)
      assert.is_nil(res)
      assert.equal(code, c, msg)
      assert.matches(pattern, msg)
      assert.same(before, shape(root)) -- nothing outside, and the target is still empty
      return msg
    end

    it('an entry named ../x', function()
      refused(tar({ { name = 'ok.txt', data = 'fine' }, { name = '../x', data = 'escaped' } }), 'EUNSAFE',
        "^%.%./x: '%.%.' in path$")
    end)

    it('.. hidden in the middle of a path', function()
      refused(tar({ { name = 'a/../../x', data = 'escaped' } }), 'EUNSAFE', "^a/%.%./%.%./x: '%.%.' in path")
    end)

    it('an absolute path (/etc/x style)', function()
      -- absolute, and pointing into this spec's own tree so a failure would be visible and harmless
      local name = root .. '/abs-victim'
      local msg = refused(tar({ { name = name, data = 'escaped' } }), 'EUNSAFE', 'absolute path')
      assert.equal(name .. ': absolute path', msg)
      refused(tar({ { name = '/etc/x', data = 'escaped' } }), 'EUNSAFE', '^/etc/x: absolute path$')
    end)

    it('a symlink to / followed by a file written through it', function()
      local bytes = tar({
        { name = 'l', type = '2', link = '/' },
        { name = 'l' .. root .. '/pwned', data = 'escaped' },
      })
      refused(bytes, 'EUNSAFE', '^l: symlink to an absolute path')
      -- even when escaping symlinks are allowed, nothing is written through one
      refused(bytes, 'EUNSAFE', "^l/.*pwned: path goes through the symlink 'l'$", { unsafe_symlinks = true })
    end)

    it('a relative symlink climbing out, and one with .. after a name', function()
      refused(tar({ { name = 'd/l', type = '2', link = '../../..' } }), 'EUNSAFE', 'outside the archive root')
      refused(tar({ { name = 'l', type = '2', link = 'x/../..' } }), 'EUNSAFE', "'%.%.' after a name")
    end)

    it('a symlink already planted in the target directory (libarchive SECURE_SYMLINKS)', function()
      fs.mkdir_p(root .. '/outside')
      fs.symlink(root .. '/outside', out .. '/planted')
      before = shape(root)
      refused(tar({ { name = 'planted/x', data = 'escaped' } }), 'EUNSAFE', '^planted/x: .*symlink')
      assert.same({}, fs.list(root .. '/outside'))
    end)

    it('hardlinks pointing outside or to nothing extracted before', function()
      refused(tar({ { name = 'h', type = '1', link = '../../etc/passwd' } }), 'EUNSAFE', "^h: hardlink to '%.%./%.%./etc/passwd'")
      refused(tar({ { name = 'h', type = '1', link = '/etc/passwd' } }), 'EUNSAFE', '^h: hardlink .*absolute')
      refused(tar({ { name = 'h', type = '1', link = 'later' }, { name = 'later', data = 'x' } }), 'EUNSAFE',
        'not a file extracted before it')
    end)

    it('symlink replacing a directory, and an entry replacing a symlink', function()
      refused(tar({ { name = 'd/f', data = 'x' }, { name = 'd', type = '2', link = '.' } }), 'EUNSAFE',
        'replaces a directory')
      refused(tar({ { name = 'l', type = '2', link = 'x' }, { name = 'l', data = 'x' } }), 'EUNSAFE',
        'replaces a symlink')
    end)

    it('devices and fifos', function()
      refused(tar({ { name = 'null', type = '3' } }), 'EUNSAFE', 'unsupported entry type %(char%)')
      refused(tar({ { name = 'fifo', type = '6' } }), 'EUNSAFE', 'unsupported entry type %(fifo%)')
    end)

    it('a 1 GiB-of-zeros gzip bomb, at its header, without unpacking it', function()
      -- 1024 concatenated gzip members of 1 MiB of zeros: a valid tar.gz of about 1 MiB
      -- holding one 1 GiB entry, built without ever holding 1 GiB anywhere.
      local bomb = root .. '/bomb.tar.gz'
      assert.is_true(sh(string.format([[python3 - %q <<'EOF'
import gzip, sys, tarfile
ti = tarfile.TarInfo('zeros.bin'); ti.size = 1 << 30; ti.mode = 0o644; ti.mtime = 0
z = gzip.compress(b'\0' * (1 << 20), mtime=0)
with open(sys.argv[1], 'wb') as f:
    f.write(gzip.compress(ti.tobuf(tarfile.USTAR_FORMAT), mtime=0))
    for _ in range(1024): f.write(z)
    f.write(gzip.compress(b'\0' * 10240, mtime=0))
EOF]], bomb)), 'python3 builds the bomb')
      before = shape(root)
      local data = fs.read(bomb)
      assert.is_true(#data < 2 * 1024 * 1024)
      assert.equal('\31\139', data:sub(1, 2))
      -- refused at the header (the size it claims), so nothing is inflated or written
      refused(data, 'ELIMIT', '^zeros%.bin: more than 268435456 bytes uncompressed %(opts%.max_bytes%)$',
        { max_bytes = 256 << 20 })
      refused(bomb, 'ELIMIT', '^zeros%.bin: more than', { max_bytes = 256 << 20 }) -- from a path
      -- and by a caller that passes no limit at all (the default, 512 MiB)
      refused(data, 'ELIMIT', '^zeros%.bin: more than 536870912 bytes uncompressed')
      refused(bomb, 'ELIMIT', '^zeros%.bin: more than 536870912 bytes uncompressed', {})
    end)

    it('an entry over the default 512 MiB limit (header claims 3 GiB)', function()
      local bytes = tar({ { name = 'huge.bin', size = 3 << 30 } }):sub(1, 512) -- the header alone
      refused(bytes, 'ELIMIT', '^huge%.bin: more than 536870912 bytes')
    end)

    it('many small entries adding up past max_bytes', function()
      local es = {}
      for i = 1, 10 do es[i] = { name = 'f' .. i, data = string.rep('x', 1000) } end
      refused(tar(es), 'ELIMIT', '^f10: more than 9500 bytes', { max_bytes = 9500 })
    end)

    it('more entries than max_entries', function()
      local es = {}
      for i = 1, 11 do es[i] = { name = 'f' .. i, data = 'x' } end
      refused(tar(es), 'ELIMIT', '^f11: more than 10 entries', { max_entries = 10 })
      assert.is_table(archive.extract(tar(es), out, { max_entries = 11 }))
    end)

    it('a zip whose data is larger than its headers say', function()
      local z = root .. '/lie.zip'
      assert.is_true(sh(string.format([[python3 -c "
import zipfile, sys
with zipfile.ZipFile(sys.argv[1], 'w', compression=zipfile.ZIP_DEFLATED) as z:
    z.writestr('zeros.bin', b'\0' * (64 << 20))
" %q]], z)))
      local data = fs.read(z)
      local function patch(s, off, v) return s:sub(1, off) .. string.pack('<I4', v) .. s:sub(off + 5) end
      data = patch(data, 22, 1024)
      data = patch(data, data:find('PK\1\2', 1, true) - 1 + 24, 1024)
      before = shape(root)
      local res, msg, code = archive.extract(data, out)
      assert.is_nil(res)
      assert.equal('EARCHIVE', code)
      assert.matches('^zeros%.bin: .*[Tt]oo much data', msg)
      assert.same({ 'zeros.bin' }, fs.list(out)) -- truncated at the declared 1024 bytes, inside out
      assert.equal(1024, fs.stat(out .. '/zeros.bin').size)
    end)

    it('corrupt and truncated input', function()
      refused('not an archive\0 at all', 'EARCHIVE', 'archive bytes')
      local good = assert(archive.pack({ { path = 'f', data = crypto.random_bytes(100000) } }))
      refused(good:sub(1, #good // 2), 'EARCHIVE', '.')
      refused(tar({ { name = 'f', data = 'x' } }):sub(1, 600) .. '\0', 'EARCHIVE', '.') -- truncated data
      local res, msg, code = archive.extract(root .. '/missing.tar', out)
      assert.is_nil(res)
      assert.equal('ENOENT', code)
      assert.matches('missing%.tar', msg)
    end)
  end)

  describe('extract', function()
    it('strips a leading ./ consistently and reports entries and bytes', function()
      local bytes = tar({
        { name = './', type = '5', mode = octal('755') },
        { name = './a/', type = '5', mode = octal('755') },
        { name = './a/b.txt', data = 'hello' },
        { name = './a/c.txt', data = 'world!' },
        { name = './/a/./d/', type = '5' },
      })
      local res = assert(archive.extract(bytes, root))
      assert.same({ entries = 5, bytes = 11 }, res)
      assert.equal('hello', fs.read(root .. '/a/b.txt'))
      assert.equal('world!', fs.read(root .. '/a/c.txt'))
      local names = {}
      for _, e in ipairs(archive.list(bytes)) do names[#names + 1] = e.path end
      assert.same({ '.', 'a', 'a/b.txt', 'a/c.txt', 'a/./d' }, names) -- list strips only the leading ./
      assert.equal('dir', fs.stat(root .. '/a/d').type)
    end)

    it('strip_components', function()
      local bytes = tar({
        { name = 'pkg-1.0/', type = '5' },
        { name = 'pkg-1.0/src/main.c', data = 'int main;' },
        { name = 'pkg-1.0/README', data = 'r' },
        { name = 'top-level-file', data = 'dropped' },
      })
      assert(archive.extract(bytes, root, { strip_components = 1 }))
      assert.same({ 'README', 'src' }, fs.list(root))
      assert.equal('int main;', fs.read(root .. '/src/main.c'))
    end)

    it('keeps safe relative symlinks and hardlinks to earlier files', function()
      local bytes = tar({
        { name = 'd/f', data = 'data' },
        { name = 'd/up', type = '2', link = '../d/f' },
        { name = 'd/e/deep', type = '2', link = '../../d/f' },
        { name = 'h', type = '1', link = 'd/f' },
      })
      assert(archive.extract(bytes, root))
      assert.equal('../d/f', fs.readlink(root .. '/d/up'))
      assert.equal('data', fs.read(root .. '/d/e/deep'))
      assert.equal('data', fs.read(root .. '/h'))
    end)

    it('allows escaping symlinks with unsafe_symlinks, still never writing through them', function()
      assert(archive.extract(tar({ { name = 'etc', type = '2', link = '/etc' } }), root, { unsafe_symlinks = true }))
      assert.equal('/etc', fs.readlink(root .. '/etc'))
    end)

    it('drops setuid/setgid bits and restores mtimes', function()
      local bytes = tar({ { name = 'suid', data = 'x', mode = octal('4755') } })
      assert(archive.extract(bytes, root))
      local st = fs.stat(root .. '/suid')
      assert.equal(octal('755'), st.mode)
      assert.equal(0, st.mtime)
    end)

    it('detects bytes vs path, and honours opts.from', function()
      local bytes = assert(archive.pack({ { path = 'x', data = 'y' } }))
      fs.write(root .. '/x.tgz', bytes)
      fs.mkdir_p(root .. '/o1')
      fs.mkdir_p(root .. '/o2')
      assert(archive.extract(root .. '/x.tgz', root .. '/o1'))
      assert(archive.extract(root .. '/x.tgz', root .. '/o2', { from = 'path' }))
      assert.equal('y', fs.read(root .. '/o1/x'))
      assert.equal('y', fs.read(root .. '/o2/x'))
      local res, _, code = archive.extract(root .. '/x.tgz', root .. '/o2', { from = 'bytes' })
      assert.is_nil(res)
      assert.equal('EARCHIVE', code)
      assert.has_error(function() archive.extract(bytes, root, { from = 'other' }) end)
    end)

    it('accepts a relative archive path and a relative target', function()
      local sys = require('cseng.sys')
      local rel = 'spec/tmp/archive-rel-' .. sys.pid()
      assert(fs.mkdir_p(rel .. '/out'))
      fs.write(rel .. '/x.tgz', assert(archive.pack({ { path = 'f', data = 'relative' } })))
      local ok, err = archive.extract(rel .. '/x.tgz', rel .. '/out')
      local content = fs.read(rel .. '/out/f')
      fs.remove_tree(rel)
      assert.is_table(ok, err)
      assert.equal('relative', content)
    end)

    it('needs an existing target directory', function()
      local res, _, code = archive.extract(tar({}), root .. '/nope')
      assert.is_nil(res)
      assert.equal('ENOENT', code)
    end)

    it('does not change the working directory', function()
      local sys = require('cseng.sys')
      local cwd = sys.cwd()
      assert(archive.extract(tar({ { name = 'f', data = 'x' } }), root))
      archive.extract(tar({ { name = '../f', data = 'x' } }), root)
      assert.equal(cwd, sys.cwd())
    end)
  end)

  describe('list', function()
    it('lists path, type, size, mode and linkname', function()
      local bytes = tar({
        { name = 'dir/', type = '5', mode = octal('700') },
        { name = 'dir/f', data = 'abc', mode = octal('600') },
        { name = 'dir/l', type = '2', link = 'f' },
        { name = 'dir/h', type = '1', link = 'dir/f' },
      })
      local l = assert(archive.list(bytes))
      assert.same({
        { path = 'dir', type = 'dir', size = 0, mode = octal('700') },
        { path = 'dir/f', type = 'file', size = 3, mode = octal('600') },
        { path = 'dir/l', type = 'symlink', size = 0, mode = octal('644'), linkname = 'f' },
        { path = 'dir/h', type = 'hardlink', size = 0, mode = octal('644'), linkname = 'dir/f' },
      }, l)
    end)

    it('shows unsafe names as they are, and fails cleanly on garbage', function()
      local l = assert(archive.list(tar({ { name = '../evil', data = 'x' } })))
      assert.equal('../evil', l[1].path)
      local res, _, code = archive.list('garbage\0')
      assert.is_nil(res)
      assert.equal('EARCHIVE', code)
    end)
  end)

  describe('pack', function()
    local function entries_of(bytes)
      local out = {}
      for _, e in ipairs(assert(archive.list(bytes))) do out[#out + 1] = e.path .. ':' .. e.type end
      return out
    end

    it('round-trips contents, modes and symlinks through extract', function()
      local blob = crypto.random_bytes(300000)
      local bytes = assert(archive.pack({
        { path = 'bin/run.sh', data = '#!/bin/sh\necho hi\n', mode = octal('755') },
        { path = 'secret', data = 's3cret', mode = '0600' },
        { path = 'data/blob.bin', data = blob },
        { path = 'data/empty', data = '' },
        { path = 'private', type = 'dir', mode = octal('700') },
        { path = 'link-to-run', type = 'symlink', target = 'bin/run.sh' },
        { path = 'data/up', type = 'symlink', target = '../secret' },
      }))
      assert(archive.extract(bytes, root))
      assert.same({
        'bin dir 755 ',
        'bin/run.sh file 755 ' .. crypto.sha256_hex('#!/bin/sh\necho hi\n'),
        'data dir 755 ',
        'data/blob.bin file 644 ' .. crypto.sha256_hex(blob),
        'data/empty file 644 ' .. crypto.sha256_hex(''),
        'data/up link 777 ../secret',
        'link-to-run link 777 bin/run.sh',
        'private dir 700 ',
        'secret file 600 ' .. crypto.sha256_hex('s3cret'),
      }, shape(root))
    end)

    it('is deterministic: sorted, parents implied, zero times and owners, input order irrelevant', function()
      local a = assert(archive.pack({ { path = 'z', data = '1' }, { path = 'a/b/c', data = '2' }, { path = 'a-b', data = '3' } }))
      local b = assert(archive.pack({ { path = 'a-b', data = '3' }, { path = './z', data = '1' }, { path = 'a//b/c/', data = '2' } }))
      assert.equal(crypto.sha256_hex(a), crypto.sha256_hex(b))
      -- byte order: '-' (0x2d) sorts before '/' (0x2f); parents still precede their contents
      assert.same({ 'a:dir', 'a-b:file', 'a/b:dir', 'a/b/c:file', 'z:file' }, entries_of(a))

      local t = assert(archive.pack({ { path = 'f', data = 'x' } }, { format = 'tar' }))
      local hdr = t:sub(1, 512)
      local function field(from, to) return tonumber(hdr:sub(from, to):match('^ *([0-7]+)'), 8) end
      assert.equal('f\0', hdr:sub(1, 2))
      assert.equal(0, field(109, 116)) -- uid
      assert.equal(0, field(117, 124)) -- gid
      assert.equal(0, field(137, 148)) -- mtime
      assert.equal(1, field(125, 136)) -- size: the fields are really parsed
      assert.equal(octal('644'), field(101, 108))
      assert.equal('ustar\0', hdr:sub(258, 263))
      assert.equal(string.rep('\0', 64), hdr:sub(266, 329)) -- uname, gname
      assert.equal(0, #t % 512)
    end)

    it('writes a gzip header without timestamp or name', function()
      local gz = assert(archive.pack({ { path = 'f', data = 'x' } }))
      assert.equal('\31\139\8', gz:sub(1, 3)) -- magic, deflate
      assert.equal('\0', gz:sub(4, 4)) -- flags: no FNAME, no FCOMMENT
      assert.equal('\0\0\0\0', gz:sub(5, 8)) -- MTIME 0
      local t = assert(archive.pack({ { path = 'f', data = 'x' } }, { format = 'tar' }))
      assert.are_not.equal('\31\139', t:sub(1, 2))
    end)

    it('gives the same bytes a second later, after the source files were touched', function()
      fs.mkdir_p(root .. '/src/sub')
      fs.write(root .. '/src/a.txt', 'alpha')
      fs.write(root .. '/src/sub/b.sh', 'echo b', { mode = '0755' })
      fs.symlink('a.txt', root .. '/src/link')
      local entries = {
        { path = 'a.txt', file = root .. '/src/a.txt' },
        { path = 'sub/b.sh', file = root .. '/src/sub/b.sh', mode = '0755' },
      }
      local p1 = assert(archive.pack(entries))
      local d1 = assert(archive.pack_dir(root .. '/src'))
      task.sleep(1.1)
      fs.write(root .. '/src/a.txt', 'alpha') -- same content, new mtime (and a new inode)
      assert(sh(string.format('touch %q %q', root .. '/src/sub/b.sh', root .. '/src/sub')))
      local p2 = assert(archive.pack(entries))
      local d2 = assert(archive.pack_dir(root .. '/src'))
      assert.equal(crypto.sha256_hex(p1), crypto.sha256_hex(p2))
      assert.equal(crypto.sha256_hex(d1), crypto.sha256_hex(d2))
      fs.write(root .. '/src/a.txt', 'alphA')
      assert.are_not.equal(crypto.sha256_hex(d1), crypto.sha256_hex(assert(archive.pack_dir(root .. '/src'))))
    end)

    it('stays byte-identical for long and non-ASCII names (pax headers)', function()
      local es = { { path = string.rep('long-directory-name/', 20) .. 'file', data = 'x' }, { path = 'ünïcødé/ƒ', data = 'u' } }
      local a, b = assert(archive.pack(es)), assert(archive.pack(es))
      assert.equal(a, b)
      assert(archive.extract(a, root))
      assert.equal('x', fs.read(root .. '/' .. es[1].path))
      assert.equal('u', fs.read(root .. '/ünïcødé/ƒ'))
    end)

    it('is readable by GNU tar', function()
      local bytes = assert(archive.pack({ { path = 'd/f', data = 'gnu' }, { path = 'd/l', type = 'symlink', target = 'f' } }))
      fs.write(root .. '/x.tgz', bytes)
      fs.mkdir_p(root .. '/o')
      assert.is_true(sh(string.format('tar -xzf %q -C %q 2>/dev/null', root .. '/x.tgz', root .. '/o')))
      assert.equal('gnu', fs.read(root .. '/o/d/f'))
      assert.equal('f', fs.readlink(root .. '/o/d/l'))
    end)

    it('raises on misuse: bad paths, duplicates, files as parents, bad types', function()
      assert.has_error(function() archive.pack({ { path = '../x', data = '' } }) end)
      assert.has_error(function() archive.pack({ { path = '/abs', data = '' } }) end)
      assert.has_error(function() archive.pack({ { path = './', data = '' } }) end)
      assert.has_error(function() archive.pack({ { path = 'a', data = '1' }, { path = 'a/b', data = '2' } }) end)
      assert.has_error(function() archive.pack({ { path = 'a' } }) end)
      assert.has_error(function() archive.pack({ { path = 'a', data = 'x', file = '/etc/hostname' } }) end)
      assert.has_error(function() archive.pack({ { path = 'a', type = 'fifo' } }) end)
      assert.has_error(function() archive.pack({ { path = 'a', type = 'symlink' } }) end)
      assert.has_error(function() archive.pack({}, { format = 'zip' }) end)
    end)

    it('lets a later entry with the same path replace an earlier one', function()
      local bytes = assert(archive.pack({
        { path = 'app', type = 'dir' }, { path = 'app/f', data = 'old' }, { path = 'app', type = 'dir', mode = '0700' },
        { path = './app/f', data = 'new', mode = '0600' }, { path = 'x', data = 'file' }, { path = 'x', type = 'symlink', target = 'app' },
      }))
      local l = archive.list(bytes)
      assert.equal(3, #l)
      assert.same({ 'app', 'dir', octal('700') }, { l[1].path, l[1].type, l[1].mode })
      assert.same({ 'app/f', 'file', octal('600'), 3 }, { l[2].path, l[2].type, l[2].mode, l[2].size })
      assert.same({ 'x', 'symlink', 'app' }, { l[3].path, l[3].type, l[3].linkname })
      -- a file given as a parent is still an error, whatever the order
      assert.has_error(function() archive.pack({ { path = 'a/b', data = '2' }, { path = 'a', data = '1' } }) end)
    end)

    it('returns nil, message, code for an unreadable file', function()
      local res, msg, code = archive.pack({ { path = 'a', file = root .. '/missing' } })
      assert.is_nil(res)
      assert.equal('ENOENT', code)
      assert.matches('missing', msg)
    end)
  end)

  describe('pack_dir', function()
    before_each(function()
      fs.mkdir_p(root .. '/task/solution')
      fs.mkdir_p(root .. '/task/tests/__pycache__')
      fs.mkdir_p(root .. '/task/environment')
      fs.write(root .. '/task/instruction.md', '# do it')
      fs.write(root .. '/task/solution/solve.sh', 'echo solved', { mode = '0755' })
      fs.write(root .. '/task/tests/test.sh', 'pytest', { mode = '0700' })
      fs.write(root .. '/task/tests/x.pyc', 'bytecode')
      fs.write(root .. '/task/tests/__pycache__/y.pyc', 'bytecode')
      fs.write(root .. '/task/environment/Dockerfile', 'FROM scratch')
      fs.symlink('../instruction.md', root .. '/task/environment/README')
    end)

    it('packs a directory tree with symlinks, excluding patterns and subtrees', function()
      local bytes = assert(archive.pack_dir(root .. '/task', { exclude = { 'solution', 'tests/*.pyc', '__pycache__' } }))
      local got = {}
      for _, e in ipairs(archive.list(bytes)) do got[#got + 1] = e.path .. ':' .. e.type end
      assert.same({
        'environment:dir', 'environment/Dockerfile:file', 'environment/README:symlink', 'instruction.md:file',
        'tests:dir', 'tests/__pycache__:dir', 'tests/__pycache__/y.pyc:file', 'tests/test.sh:file',
      }, got)
      assert(archive.extract(bytes, root .. '/task', { strip_components = 0 }) and true)
    end)

    it('puts entries under a prefix and preserves or normalizes modes', function()
      local bytes = assert(archive.pack_dir(root .. '/task', { prefix = 'app/', exclude = { 'environment/', 'tests/*.pyc', '/tests/__pycache__' } }))
      fs.mkdir_p(root .. '/o')
      assert(archive.extract(bytes, root .. '/o'))
      assert.same({ 'app' }, fs.list(root .. '/o'))
      assert.equal('echo solved', fs.read(root .. '/o/app/solution/solve.sh'))
      assert.equal(octal('700'), fs.stat(root .. '/o/app/tests/test.sh').mode)
      assert.is_false(fs.exists(root .. '/o/app/environment'))

      local norm = assert(archive.pack_dir(root .. '/task', { modes = 'normalize' }))
      local modes = {}
      for _, e in ipairs(archive.list(norm)) do modes[e.path] = e.mode end
      assert.equal(octal('755'), modes['tests/test.sh'])
      assert.equal(octal('755'), modes['solution/solve.sh'])
      assert.equal(octal('644'), modes['instruction.md'])
    end)

    it('fails with a code for a missing directory and for special files', function()
      local res, _, code = archive.pack_dir(root .. '/nope')
      assert.is_nil(res)
      assert.equal('ENOENT', code)
      assert(sh(string.format('mkfifo %q', root .. '/task/fifo')))
      res, _, code = archive.pack_dir(root .. '/task')
      assert.is_nil(res)
      assert.equal('ENOTSUP', code)
      assert.is_string(archive.pack_dir(root .. '/task', { exclude = { 'fifo' } }))
    end)
  end)
end)
