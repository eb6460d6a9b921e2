--- The Debian base root filesystem: built once with debootstrap into the cache directory
--- (<cache>/rootfs/debian-<suite>), the local provider's sandbox root and the content of the
--- docker base image. A lower layer than the CLI: providers (local) and `cseng images` use it.
--- Progress lines go to o.log (a function; nothing is printed without it).
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local clock = require('cseng.clock')
local util = require('cseng.lib.util')

local rootfs = {}

-- What the bundled tasks need in their image (data/README.md), plus TLS roots and ps/kill.
rootfs.PACKAGES = {
  'bash', 'coreutils', 'findutils', 'grep', 'sed', 'gawk', 'diffutils', 'patch', 'tar', 'gzip',
  'python3', 'python3-pytest', 'gcc', 'libc6-dev', 'make', 'git', 'sqlite3', 'ca-certificates', 'procps',
}

--- The cache directory (CSENG_CACHE, else ~/.cache/cseng).
function rootfs.cache_dir()
  return util.cache_dir()
end

--- Where the Debian base root filesystem of a suite lives (complete when <dir>/.cseng-rootfs exists).
function rootfs.rootfs_dir(suite)
  return rootfs.cache_dir() .. '/rootfs/debian-' .. (suite or 'bookworm')
end

-- The deb entries of a deb822 .sources file (stanzas: Types: deb, URIs:, Suites:, Enabled:).
local function deb822_sources(text, path, out)
  for stanza in (text .. '\n\n'):gmatch('(.-)\n%s*\n') do
    local f = {}
    for line in stanza:gmatch('[^\n]+') do
      local k, v = line:match('^([%w%-]+):%s*(.-)%s*$')
      if k and not line:match('^%s*#') then f[k:lower()] = v end
    end
    local enabled = (f.enabled or 'yes'):lower() ~= 'no'
    if enabled and f.types and (' ' .. f.types .. ' '):find(' deb ', 1, true) and f.uris and f.suites then
      local suites = {}
      for s in f.suites:gmatch('%S+') do suites[#suites + 1] = s end
      for uri in f.uris:gmatch('%S+') do out[#out + 1] = { uri = (uri:gsub('/+$', '')), suites = suites, file = path } end
    end
  end
end

-- The entries of a one-line .list file: "deb [options] URL SUITE components".
local function one_line_sources(text, path, out)
  for line in text:gmatch('[^\n]+') do
    local rest = line:match('^%s*deb%s+(.*)$')
    rest = rest and rest:gsub('^%[[^%]]*%]%s*', '') -- [arch=amd64 signed-by=...]
    local url, s = (rest or ''):match('^(%S+)%s+(%S+)')
    if url then out[#out + 1] = { uri = (url:gsub('/+$', '')), suites = { s }, file = path } end
  end
end

--- The machine's apt sources, in the order apt reads them: one-line "deb URL SUITE ..." entries
--- of <root>/sources.list and sources.list.d/*.list, and deb822 stanzas (Types: deb, URIs:,
--- Suites:, Enabled:) of sources.list.d/*.sources (files by name). Returns a list of
--- {uri (no trailing slash), suites = {...}, file}: binary ("deb") sources only, disabled
--- stanzas and comments left out.
---@param root string|nil default /etc/apt
---@return table[]
function rootfs.apt_sources(root)
  root = root or '/etc/apt'
  local files = { root .. '/sources.list' }
  local names = fs.list(root .. '/sources.list.d') or {}
  table.sort(names)
  for _, n in ipairs(names) do
    if n:match('%.list$') or n:match('%.sources$') then files[#files + 1] = root .. '/sources.list.d/' .. n end
  end
  local out = {}
  for _, path in ipairs(files) do
    local text = fs.read(path)
    if text then (path:match('%.sources$') and deb822_sources or one_line_sources)(text, path, out) end
  end
  return out
end

--- The Debian mirror of a suite, read from the machine's apt sources (rootfs.apt_sources): the
--- first source that lists the suite. Returns the URL, or nil and why.
function rootfs.apt_mirror(suite, root)
  root = root or '/etc/apt'
  suite = suite or 'bookworm'
  for _, src in ipairs(rootfs.apt_sources(root)) do
    for _, s in ipairs(src.suites) do
      if s == suite then return src.uri end
    end
  end
  return nil, 'no "deb" source for suite ' .. suite .. ' in ' .. root .. '/sources.list or ' .. root .. '/sources.list.d/ (pass --mirror URL)'
end

local function tail_of(path, n)
  return util.tail(fs.read(path) or '', n or 3000)
end

--- Build the Debian base root filesystem (once): returns its directory, or nil and why.
--- o: {suite, mirror, include, force, log}; returns dir, nil, true when it existed already.
function rootfs.build(o)
  o = o or {}
  local suite = o.suite or 'bookworm'
  local dest = rootfs.rootfs_dir(suite)
  if fs.exists(dest .. '/.cseng-rootfs') and not o.force then return dest, nil, true end
  if sys.uid() ~= 0 then return nil, 'debootstrap needs root' end
  if not proc.which('debootstrap') then return nil, 'debootstrap is not installed (make deps-rootfs)' end
  local mirror, merr = o.mirror, nil
  if not mirror then mirror, merr = rootfs.apt_mirror(suite) end
  if not mirror then return nil, merr end
  local pkgs = util.copy(rootfs.PACKAGES)
  for _, p in ipairs(o.include or {}) do pkgs[#pkgs + 1] = p end
  local cache = rootfs.cache_dir() .. '/debootstrap'
  assert(fs.mkdir_p(cache))
  assert(fs.mkdir_p(util.dirname(dest)))
  local work = dest .. '.tmp-' .. sys.pid()
  fs.remove_tree(work)
  assert(fs.mkdir_p(work))
  local root, log = work .. '/rootfs', work .. '/debootstrap.log'
  local t0 = clock.now()
  local argv = { 'debootstrap', '--variant=minbase', '--include=' .. table.concat(pkgs, ','), '--cache-dir=' .. cache,
    suite, root, mirror }
  local say = o.log or function() end
  say('cseng images rootfs: ' .. util.shell_join(argv))
  say('  (log: ' .. log .. '; a few minutes)')
  local p, perr = proc.spawn { argv = argv, stdout = log, stderr = log, env_add = { DEBIAN_FRONTEND = 'noninteractive' } }
  if not p then fs.remove_tree(work); return nil, 'cannot start debootstrap: ' .. tostring(perr) end
  local r = p:wait()
  if r.code ~= 0 then
    local why = 'debootstrap failed (exit ' .. tostring(r.code) .. '):\n' .. tail_of(log)
    fs.remove_tree(work)
    return nil, why
  end
  -- smaller: no downloaded .debs or package lists (builds run apt-get update anyway)
  proc.run { argv = { 'sh', '-c', 'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/tmp/* "$1"/var/log/*.log', 'sh', root } }
  fs.write(root .. '/.cseng-rootfs', string.format('debian %s (debootstrap --variant=minbase) from %s\n', suite, mirror))
  if o.force then fs.remove_tree(dest) end
  if not fs.rename(root, dest) then
    fs.remove_tree(work)
    if fs.exists(dest .. '/.cseng-rootfs') then return dest end -- another build got there first
    return nil, 'cannot place the root filesystem at ' .. dest
  end
  fs.remove_tree(work)
  say(string.format('%s (debootstrap %s from %s, %.0f s)', dest, suite, mirror, (clock.now() - t0) / 1e9))
  return dest
end

--- The base root filesystem as a user namespace sees it: a copy whose owners are shifted by
--- idmap.uid (root's files owned by the namespace's root, which is an unprivileged uid on the
--- host), made once beside the original (<dir>-u<uid>). Returns its directory, or nil and why.
---@param suite string|nil
---@param idmap {uid:integer, gid:integer}
function rootfs.for_userns(suite, idmap, o)
  o = o or {}
  local src = rootfs.rootfs_dir(suite)
  if idmap.uid ~= idmap.gid then return nil, 'the sandboxes\' uid and gid ranges must start at the same id (/etc/subuid, /etc/subgid)' end
  local dest = src .. '-u' .. idmap.uid
  if fs.exists(dest .. '/.cseng-rootfs') then return dest end
  if not fs.exists(src .. '/.cseng-rootfs') then return nil, 'the Debian base root filesystem is absent (' .. src .. ')' end
  if sys.uid() ~= 0 then return nil, 'shifting the base root filesystem\'s owners needs root' end
  local say = o.log or function() end
  local t0 = clock.now()
  local work = dest .. '.tmp-' .. sys.pid()
  fs.remove_tree(work)
  local r = proc.run { argv = { 'cp', '-a', '--reflink=auto', src, work }, timeout = 1800, tail_bytes = 65536 }
  if not r or r.code ~= 0 then
    fs.remove_tree(work)
    return nil, 'copying ' .. src .. ': ' .. util.trim(r and r.stderr or 'cp did not run')
  end
  local n, err = fs.shift_owner(work, idmap.uid)
  if not n then fs.remove_tree(work); return nil, 'shifting the owners of ' .. work .. ': ' .. tostring(err) end
  fs.write(work .. '/.cseng-idmap', string.format('%d %d\n', idmap.uid, idmap.gid))
  if not fs.rename(work, dest) then
    fs.remove_tree(work)
    if fs.exists(dest .. '/.cseng-rootfs') then return dest end
    return nil, 'cannot place the shifted root filesystem at ' .. dest
  end
  say(string.format('%s (owners shifted by %d: %d entries, %.1f s)', dest, idmap.uid, n, (clock.now() - t0) / 1e9))
  return dest
end

return rootfs
