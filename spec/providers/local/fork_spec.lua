-- The local provider's fork (lua/providers/local.lua M.fork, base root filesystem mode): each child
-- is a sandbox of its own (its own id, init, pid namespace and writable layer) whose files start as
-- the parent's at the call: a file written in the parent before is there, one written after is
-- not, one a child writes stays in it. Processes are not carried over (documented). Clock-free:
-- contents, ids, namespace inodes.
local L = require('providers.local')
local H = require('spec.helpers.common')
local fs = require('cseng.fs')
teardown(H.remove_tempdirs)

local function sh(client, sb, cmd)
  return assert(L.exec(client, sb, cmd, { timeout = 60, cwd = '/' }))
end

describe('local fork', function()
  local tmp = H.tempdir('cseng-local-fork-')

  it('gives each child the parent\'s files at the call, in a sandbox of its own', function()
    local client = L.connect { root = tmp .. '/a' }
    if client.host_root then pending('fork needs the base root filesystem mode (root)') return end
    local sb = assert(L.create(client, { workdir = '/workspace', labels = { ['cseng.run'] = 'fork-spec' } }))
    assert.equal(0, sh(client, sb, 'mkdir -p /var/tmp/f && echo before > /var/tmp/f/state && rm /etc/motd; '
      .. '(sleep 600 &) ; sync').code)
    local kids, err, code = L.fork(client, sb, 3, { workdir = '/workspace', labels = { ['cseng.run'] = 'fork-spec-kid' } })
    assert(kids, tostring(err) .. ' ' .. tostring(code))
    assert.equal(3, #kids)
    assert.equal(0, sh(client, sb, 'echo after > /var/tmp/f/later').code)
    local parent_ns = sh(client, sb, 'stat -L -c %i /proc/self/ns/pid').stdout
    local seen = { [sb.id] = true }
    for _, k in ipairs(kids) do
      assert.is_nil(seen[k.id])
      seen[k.id] = true
      assert.equal(sb.id, k.fork_of)
      -- copy-on-write where the store has volumes (btrfs), else one copy
      assert.matches(client.store.enforced and '^a snapshot of' or '^a copy of', k.code_path)
      assert.equal('fork-spec-kid', k.labels['cseng.run'])
      assert.equal('before\n', sh(client, k, 'cat /var/tmp/f/state').stdout)
      assert.equal('absent\n', sh(client, k, 'test -e /var/tmp/f/later && echo present || echo absent').stdout)
      -- a file the parent removed stays removed (the overlay's whiteout was copied)
      assert.equal('absent\n', sh(client, k, 'test -e /etc/motd && echo present || echo absent').stdout)
      assert.is_not.equal(parent_ns, sh(client, k, 'stat -L -c %i /proc/self/ns/pid').stdout)
      -- no process of the parent was carried over
      assert.equal('0\n', sh(client, k, 'pgrep -c -f "^sleep 600" || true').stdout)
    end
    -- the parent runs on (resumed after the copy), its process too
    assert.equal('1\n', sh(client, sb, 'pgrep -c -f "^sleep 600"').stdout)
    assert.equal(0, sh(client, kids[1], 'echo mine > /var/tmp/f/child').code)
    assert.equal('absent\n', sh(client, kids[2], 'test -e /var/tmp/f/child && echo present || echo absent').stdout)
    assert.equal('absent\n', sh(client, sb, 'test -e /var/tmp/f/child && echo present || echo absent').stdout)
    assert(L.destroy(client, kids[1]))
    assert.equal('before\n', sh(client, kids[2], 'cat /var/tmp/f/state').stdout)
    for i = 2, 3 do assert(L.destroy(client, kids[i])) end
    assert(L.destroy(client, sb))
    assert.same({}, L.list(client))
  end)

  it('gives each child its own size limit over the snapshot of the parent\'s layer; nothing is left', function()
    local client = L.connect { root = tmp .. '/c' }
    if client.host_root then pending('fork needs the base root filesystem mode (root)') return end
    if not client.store.enforced then pending('size limits need the store\'s volumes: ' .. tostring(client.store.why)) return end
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    assert.equal(0, sh(client, sb, 'head -c 24M /dev/urandom > /var/tmp/base && sync').code)
    local kids, err = L.fork(client, sb, 2, { workdir = '/workspace', disk_mb = 48 })
    assert(kids, err)
    -- the parent's 24 MiB count in each child: 16 more fit under its 48 MiB, 32 more do not
    assert.equal(0, sh(client, kids[1], 'head -c 16M /dev/urandom > /var/tmp/more && sync').code)
    local over = sh(client, kids[2], 'head -c 32M /dev/urandom > /var/tmp/more; s=$?; sync; echo $s')
    assert.not_equal('0\n', over.stdout, over.stderr)
    assert.matches('quota', over.stderr)
    -- the parent keeps its own (default) limit
    assert.equal(0, sh(client, sb, 'head -c 32M /dev/urandom > /var/tmp/more && sync').code)
    local vols = {}
    for _, k in ipairs(kids) do vols[#vols + 1] = k.vol; assert(L.destroy(client, k)) end
    assert(L.destroy(client, sb))
    for _, v in ipairs(vols) do assert.is_false(fs.exists(v), v) end
    assert.same({}, L.list(client))
  end)

  it('refuses a sandbox without an init (host mode) with EFORK, making nothing', function()
    local client = L.connect { root = tmp .. '/b', host_root = true }
    local sb = assert(L.create(client, { workdir = '/workspace' }))
    local kids, err, code, made = L.fork(client, sb, 2, {})
    assert.is_nil(kids)
    assert.equal('EFORK', code)
    assert.matches('fork needs a running sandbox on the base root filesystem', err, 1, true)
    assert.same({}, made)
    assert(L.destroy(client, sb))
  end)
end)
