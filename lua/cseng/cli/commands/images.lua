--- `cseng images`: the Debian base root filesystem and the docker provider's images.
---   rootfs builds the Debian base root filesystem with debootstrap into the cache directory
---          (<cache>/rootfs/debian-<suite>): the local provider's sandbox root, and the content
---          of the docker base image. Built once; later calls find it;
---   base   imports that root filesystem (built first when absent) into dockerd as the base image
---          (cseng/debian:bookworm) with POST /images/create?fromSrc=- (no registry is reachable);
---   list   the images cseng built or uses (bases, per-task images, warm images);
---   prune  removes per-task and warm images (the build cache) older than an age.
local flags = require 'cseng.lib.flags'
local fs = require 'cseng.fs'
local proc = require 'cseng.proc'
local sys = require 'cseng.sys'
local clock = require 'cseng.clock'
local util = require 'cseng.lib.util'
local errors = require 'cseng.lib.errors'
local cli = require 'cseng.cli.main'

-- What the bundled tasks need in their image (data/README.md), plus TLS roots and ps/kill.
local PACKAGES = {
  'bash', 'coreutils', 'findutils', 'grep', 'sed', 'gawk', 'diffutils', 'patch', 'tar', 'gzip',
  'python3', 'python3-pytest', 'gcc', 'libc6-dev', 'make', 'git', 'sqlite3', 'ca-certificates', 'procps',
}

local SPEC = {
  ['mirror'] = { key = 'mirror', type = 'string', arg = 'URL', help = "Debian mirror (default: the machine's apt sources)" },
  ['suite'] = { key = 'suite', type = 'string', arg = 'NAME', help = 'Debian suite (default bookworm)' },
  ['tag'] = { key = 'tag', type = 'string', arg = 'REPO:TAG', help = 'image name (default cseng/debian:<suite>)' },
  ['include'] = { key = 'include', type = 'list', arg = 'A,B', help = 'extra packages for the base image' },
  ['force'] = { key = 'force', type = 'bool', help = 'rebuild even when the image exists' },
  ['older-than'] = { key = 'older_than', type = 'string', arg = 'AGE', help = 'prune: only images created before now-AGE (30m, 2h, 7d)' },
  ['dry-run'] = { key = 'dry_run', type = 'bool', help = 'prune: list, do not remove' },
}

local cmd = {
  summary = 'the Debian base root filesystem (local) and docker images: build, list, prune',
  usage = table.concat({
    'usage: cseng images rootfs [--mirror URL] [--suite bookworm] [--include A,B] [--force]',
    '       cseng images base [--mirror URL] [--suite bookworm] [--tag cseng/debian:bookworm] [--include A,B] [--force]',
    '       cseng images list',
    '       cseng images prune [--older-than 7d] [--dry-run]',
    '',
    'rootfs: debootstrap --variant=minbase --include=<the bundled tasks\' tools> into',
    '<cache>/rootfs/debian-<suite> (cache: $CSENG_CACHE, else ~/.cache/cseng; needs root and',
    'debootstrap: make deps-rootfs). The mirror is the first deb source of the suite in',
    '/etc/apt/sources.list and /etc/apt/sources.list.d/ (--mirror overrides). The local provider',
    'runs its sandboxes on this root filesystem.',
    'base: imports the root filesystem (built first when absent) into dockerd as the image. The',
    'per-task images are built FROM it (see --image-map).',
    '',
    'options:',
    flags.help(SPEC, { 'mirror', 'suite', 'tag', 'include', 'force', 'older-than', 'dry-run' }),
  }, '\n'),
  PACKAGES = PACKAGES,
}

--- The cache directory (CSENG_CACHE, else ~/.cache/cseng).
function cmd.cache_dir()
  return os.getenv('CSENG_CACHE') or ((os.getenv('HOME') or '/tmp') .. '/.cache/cseng')
end

--- Where the Debian base root filesystem of a suite lives (complete when <dir>/.cseng-rootfs exists).
function cmd.rootfs_dir(suite)
  return cmd.cache_dir() .. '/rootfs/debian-' .. (suite or 'bookworm')
end

--- The Debian mirror of a suite, read from the machine's apt sources: one-line "deb URL SUITE ..."
--- entries of /etc/apt/sources.list and sources.list.d/*.list, and deb822 stanzas (Types: deb,
--- URIs:, Suites:) of sources.list.d/*.sources. Returns the URL, or nil and why.
function cmd.apt_mirror(suite, root)
  root = root or '/etc/apt'
  suite = suite or 'bookworm'
  local files = { root .. '/sources.list' }
  local names = fs.list(root .. '/sources.list.d') or {}
  table.sort(names)
  for _, n in ipairs(names) do
    if n:match('%.list$') or n:match('%.sources$') then files[#files + 1] = root .. '/sources.list.d/' .. n end
  end
  for _, path in ipairs(files) do
    local text = fs.read(path)
    if text and path:match('%.sources$') then
      for stanza in (text .. '\n\n'):gmatch('(.-)\n%s*\n') do
        local f = {}
        for line in stanza:gmatch('[^\n]+') do
          local k, v = line:match('^([%w%-]+):%s*(.-)%s*$')
          if k and not line:match('^%s*#') then f[k:lower()] = v end
        end
        local enabled = (f.enabled or 'yes'):lower() ~= 'no'
        if enabled and f.types and (' ' .. f.types .. ' '):find(' deb ', 1, true) and f.uris and f.suites then
          for s in f.suites:gmatch('%S+') do
            if s == suite then return (f.uris:match('^(%S+)'):gsub('/+$', '')) end
          end
        end
      end
    elseif text then
      for line in text:gmatch('[^\n]+') do
        local rest = line:match('^%s*deb%s+(.*)$')
        if rest then
          rest = rest:gsub('^%[[^%]]*%]%s*', '') -- [arch=amd64 signed-by=...]
          local url, s = rest:match('^(%S+)%s+(%S+)')
          if url and s == suite then return (url:gsub('/+$', '')) end
        end
      end
    end
  end
  return nil, 'no "deb" source for suite ' .. suite .. ' in ' .. root .. '/sources.list or ' .. root .. '/sources.list.d/ (pass --mirror URL)', 'ECONFIG'
end

local function connect()
  local docker = require 'providers.docker'
  local ok, client = pcall(docker.connect, {})
  if not ok then return nil, errors.line(client), errors.from(client).code end
  return docker, client
end

local function fmt_size(n)
  if not n then return '-' end
  if n >= 1e9 then return string.format('%.1f GB', n / 1e9) end
  return string.format('%.0f MB', n / 1e6)
end

local function tail_of(path, n)
  return util.tail(fs.read(path) or '', n or 3000)
end

--- Build the Debian base root filesystem (once): returns its directory, or nil and why.
--- o: {suite, mirror, include, force, quiet}.
function cmd.build_rootfs(o)
  o = o or {}
  local suite = o.suite or 'bookworm'
  local dest = cmd.rootfs_dir(suite)
  if fs.exists(dest .. '/.cseng-rootfs') and not o.force then return dest, nil, true end
  if sys.uid() ~= 0 then return nil, 'debootstrap needs root', 'EPERM' end
  if not proc.which('debootstrap') then return nil, 'debootstrap is not installed (make deps-rootfs)', 'ENOENT' end
  local mirror, merr, mcode = o.mirror, nil, nil
  if not mirror then mirror, merr, mcode = cmd.apt_mirror(suite) end
  if not mirror then return nil, merr, mcode end
  local pkgs = util.copy(PACKAGES)
  for _, p in ipairs(o.include or {}) do pkgs[#pkgs + 1] = p end
  local cache = cmd.cache_dir() .. '/debootstrap'
  errors.check(nil, fs.mkdir_p(cache))
  errors.check(nil, fs.mkdir_p(util.dirname(dest)))
  local work = dest .. '.tmp-' .. sys.pid()
  fs.remove_tree(work)
  errors.check(nil, fs.mkdir_p(work))
  local root, log = work .. '/rootfs', work .. '/debootstrap.log'
  local t0 = clock.now()
  local argv = { 'debootstrap', '--variant=minbase', '--include=' .. table.concat(pkgs, ','), '--cache-dir=' .. cache,
    suite, root, mirror }
  if not o.quiet then
    print('cseng images rootfs: ' .. util.shell_join(argv))
    print('  (log: ' .. log .. '; a few minutes)')
  end
  local p, perr = proc.spawn { argv = argv, stdout = log, stderr = log, env_add = { DEBIAN_FRONTEND = 'noninteractive' } }
  if not p then fs.remove_tree(work); return nil, 'cannot start debootstrap: ' .. tostring(perr), 'ENOENT' end
  local r = p:wait()
  if r.code ~= 0 then
    local why = 'debootstrap failed (exit ' .. tostring(r.code) .. '):\n' .. tail_of(log)
    fs.remove_tree(work)
    return nil, why, 'EBUILD'
  end
  -- smaller: no downloaded .debs or package lists (builds run apt-get update anyway)
  proc.run { argv = { 'sh', '-c', 'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/tmp/* "$1"/var/log/*.log', 'sh', root } }
  fs.write(root .. '/.cseng-rootfs', string.format('debian %s (debootstrap --variant=minbase) from %s\n', suite, mirror))
  if o.force then fs.remove_tree(dest) end
  if not fs.rename(root, dest) then
    fs.remove_tree(work)
    if fs.exists(dest .. '/.cseng-rootfs') then return dest end -- another build got there first
    return nil, 'cannot place the root filesystem at ' .. dest, 'EIO'
  end
  fs.remove_tree(work)
  if not o.quiet then print(string.format('%s (debootstrap %s from %s, %.0f s)', dest, suite, mirror, (clock.now() - t0) / 1e9)) end
  return dest
end

local function rootfs(f)
  local dest, err, existed = cmd.build_rootfs({ suite = f.suite, mirror = f.mirror, include = f.include, force = f.force })
  if not dest then io.stderr:write('cseng: images rootfs: ', tostring(err), '\n'); return 1 end
  if existed then print(string.format('%s exists; --force rebuilds it', dest)) end
  return 0
end

local function base(f)
  local docker, client = connect()
  if not docker then io.stderr:write('cseng: images base: ', client, '\n'); return 1 end
  local suite = f.suite or 'bookworm'
  local name = f.tag or ('cseng/debian:' .. suite)
  local repo, tag = name:match('^(.+):([^:/]+)$')
  if not repo then repo, tag = name, 'latest' end
  local existing = docker.image_id(client, name)
  if existing and not f.force then
    print(string.format('%s exists (%s); --force rebuilds it', name, existing))
    return 0
  end
  local t0 = clock.now()
  local root, rerr = cmd.build_rootfs({ suite = suite, mirror = f.mirror, include = f.include, force = f.force })
  if not root then io.stderr:write('cseng: images base: ', tostring(rerr), '\n'); return 1 end
  local work = errors.check(nil, fs.tempdir('cseng-base-'))
  local tarball = work .. '/rootfs.tar'
  local function fail(msg)
    io.stderr:write('cseng: images base: ', msg, '\n')
    fs.remove_tree(work)
    return 1
  end
  local tr = proc.run { argv = { 'tar', '--numeric-owner', '--xattrs', '-C', root, '-cf', tarball,
    '--exclude=./dev/*', '--exclude=./proc/*', '--exclude=./sys/*', '--exclude=./.cseng-rootfs', '.' }, timeout = 1800, tail_bytes = 65536 }
  if not tr or tr.code ~= 0 then return fail('tar of the root filesystem failed: ' .. tostring(tr and tr.stderr)) end
  local data = fs.read(tarball)
  if not data then return fail('cannot read ' .. tarball) end
  print(string.format('importing %s (%s root filesystem tar) as %s', root, fmt_size(#data), name))
  local id, ierr = docker.import(client, data, repo, tag, {
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'ENV LANG=C.UTF-8', 'CMD ["/bin/bash"]',
  })
  if not id then return fail(tostring(ierr)) end
  fs.remove_tree(work)
  print(string.format('%s %s (from %s, %.0f s)', name, id, root, (clock.now() - t0) / 1e9))
  return 0
end

local function list()
  local docker, client = connect()
  if not docker then io.stderr:write('cseng: images list: ', client, '\n'); return 1 end
  local images, err = docker.list_images(client)
  if not images then io.stderr:write('cseng: images list: ', tostring(err), '\n'); return 1 end
  print(string.format('%-56s %-19s %-8s %-10s %s', 'IMAGE', 'ID', 'SIZE', 'KIND', 'CREATED'))
  for _, im in ipairs(images) do
    local names = #im.tags > 0 and im.tags or { '<untagged>' }
    for _, t in ipairs(names) do
      print(string.format('%-56s %-19s %-8s %-10s %s', t, im.id:gsub('^sha256:', ''):sub(1, 19), fmt_size(im.size),
        im.labels['cseng.kind'] or 'base', im.created and os.date('!%Y-%m-%d %H:%M', im.created) or '-'))
    end
  end
  return 0
end

local function age_seconds(s)
  local n, unit = tostring(s):match('^(%d+)([smhd]?)$')
  if not n then return nil end
  return tonumber(n) * ({ s = 1, m = 60, h = 3600, d = 86400, [''] = 1 })[unit]
end

local function prune(f)
  local min_age = f.older_than and age_seconds(f.older_than)
  if f.older_than and not min_age then return cli.usage_error('images prune: --older-than: expected e.g. 30m, 2h, 7d') end
  local docker, client = connect()
  if not docker then io.stderr:write('cseng: images prune: ', client, '\n'); return 1 end
  local images, err = docker.list_images(client)
  if not images then io.stderr:write('cseng: images prune: ', tostring(err), '\n'); return 1 end
  -- warm images are children of task images: remove them first
  table.sort(images, function(a, b)
    local wa, wb = a.labels['cseng.kind'] == 'warm', b.labels['cseng.kind'] == 'warm'
    if wa ~= wb then return wa end
    return (a.tags[1] or a.id) < (b.tags[1] or b.id)
  end)
  local now, removed, failed = os.time(), 0, 0
  for _, im in ipairs(images) do
    local kind = im.labels['cseng.kind']
    if (kind == 'task-image' or kind == 'warm') and (not min_age or (im.created and now - im.created >= min_age)) then
      if f.dry_run then print('would remove ' .. (im.tags[1] or im.id))
      else
        local ok, rerr = docker.remove_image(client, im.id, true)
        if ok then removed = removed + 1; print('removed ' .. (im.tags[1] or im.id))
        else failed = failed + 1; io.stderr:write('cseng: cannot remove ', im.id, ': ', tostring(rerr), '\n') end
      end
    end
  end
  if not f.dry_run then print(string.format('%d removed, %d failed', removed, failed)) end
  return failed > 0 and 1 or 0
end

function cmd.run(args)
  local f, pos = flags.parse(args, SPEC)
  if not f then return cli.usage_error('images: ' .. pos) end
  local sub = pos[1]
  if sub == 'rootfs' then return rootfs(f) end
  if sub == 'base' then return base(f) end
  if sub == 'list' or sub == nil then return list() end
  if sub == 'prune' then return prune(f) end
  return cli.usage_error("images: unknown subcommand '" .. tostring(sub) .. "' (rootfs, base, list, prune)")
end

return cmd
