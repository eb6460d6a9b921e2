--- `cseng images`: the Debian base root filesystem and the docker provider's images.
---   rootfs builds the Debian base root filesystem with debootstrap into the cache directory
---          (<cache>/rootfs/debian-<suite>): the local provider's sandbox root, and the content
---          of the docker base image. Built once; later calls find it;
---   base   imports that root filesystem (built first when absent) into dockerd as the base image
---          (cseng/debian:bookworm) with POST /images/create?fromSrc=- (no registry is reachable);
---   list   the images cseng built or uses (bases, per-task images, warm images);
---   prune  removes per-task and warm images (the build cache) older than an age.
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local clock = require('cseng.clock')
local rootfs_image = require('cseng.images.rootfs')
local errors = require('cseng.lib.errors')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'images',
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
  }, '\n'),
  flags = {
    { 'mirror', 'string', arg = 'URL', help = "Debian mirror (default: the machine's apt sources)" },
    { 'suite', 'string', arg = 'NAME', help = 'Debian suite (default bookworm)' },
    { 'tag', 'string', arg = 'REPO:TAG', help = 'image name (default cseng/debian:<suite>)' },
    { 'include', 'list', arg = 'A,B', help = 'extra packages for the base image' },
    { 'force', 'bool', help = 'rebuild even when the image exists' },
    { 'older-than', 'string', arg = 'AGE', help = 'prune: only images created before now-AGE (30m, 2h, 7d)' },
    { 'dry-run', 'bool', help = 'prune: list, do not remove' },
  },
}

-- The docker image operations (providers/shared/docker_build.lua) and a client of dockerd.
local function connect()
  local ok, client = pcall(require('providers.docker').connect, {})
  if not ok then return nil, errors.line(client), errors.from(client).code end
  return require 'providers.shared.docker_build', client
end

local function fmt_size(n)
  if not n then return '-' end
  if n >= 1e9 then return string.format('%.1f GB', n / 1e9) end
  return string.format('%.0f MB', n / 1e6)
end

local function rootfs(f)
  local dest, err, existed = rootfs_image.build({ suite = f.suite, mirror = f.mirror, include = f.include, force = f.force, log = print })
  if not dest then io.stderr:write('cseng: images rootfs: ', tostring(err), '\n'); return 1 end
  if existed then print(string.format('%s exists; --force rebuilds it', dest)) end
  -- the local provider's sandboxes see it through a user namespace: its owners shifted into the
  -- subordinate range registered for them
  local jail = require('providers.shared.local_jail')
  local ids, why = jail.ensure_subids()
  if not ids then io.stderr:write('cseng: images rootfs: ', tostring(why), '\n'); return 1 end
  if f.force and not existed then fs.remove_tree(rootfs_image.rootfs_dir(f.suite) .. '-u' .. ids.uid) end
  local shifted, serr = rootfs_image.for_userns(f.suite, ids, { log = print })
  if not shifted then io.stderr:write('cseng: images rootfs: ', tostring(serr), '\n'); return 1 end
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
  local root, rerr = rootfs_image.build({ suite = suite, mirror = f.mirror, include = f.include, force = f.force, log = print })
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
  if f.older_than and not min_age then return exit.usage_error('images prune: --older-than: expected e.g. 30m, 2h, 7d') end
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

function cmd.main(f, pos)
  local sub = pos[1]
  if sub == 'rootfs' then return rootfs(f) end
  if sub == 'base' then return base(f) end
  if sub == 'list' or sub == nil then return list() end
  if sub == 'prune' then return prune(f) end
  return exit.usage_error("images: unknown subcommand '" .. tostring(sub) .. "' (rootfs, base, list, prune)")
end

return cmd
