--- The standard workload (capabilities.standard): a developer's workflow at a stated size, as
--- computesdk's workload benchmark (clone, install, test), with no network: a small repository
--- bundled with cseng (data/workloads/standard/: a C library, its Makefile and a test suite of one
--- `TEST(name)` per test), or workload_options.standard_dir laid out the same way. Once per run,
--- before the first sample, the host makes it a git repository with a fixed author and date (so
--- its commit id is the same on every machine) and packs it as a git bundle; run_started states
--- its size (workload_info: files, lines, commit, tests, bundle bytes). Per sample, untimed first:
--- the sandbox is checked for git, make and cc, and the bundle uploaded (put of a one-file tar:
--- standard_upload_ms, recorded apart). Then, each one command, timed from the exec call to its
--- answer:
---   standard_clone_ms    git clone from the bundle
---   standard_install_ms  make -j$(nproc): the library and the test runner built
---   standard_test_ms     make test: the suite run
---   standard_total_ms    the three together
--- After the timing: the clone's HEAD must be the bundle's commit, the suite's pass count the
--- number of TEST( lines the host counted, and its failures none.
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local workloads = require('cseng.run.workloads')

local W = { name = 'standard', capability = 'standard',
  doc = 'clone, build and test a bundled repository (a stated size) inside the sandbox' }

local FIELD = 'workload_options.standard_dir'

--- The tools the sandbox's image must hold.
W.TOOLS = { 'git', 'make', 'cc' }

-- The fixed identity and date of the packed commit.
local GIT_ENV = {
  GIT_AUTHOR_NAME = 'cseng', GIT_AUTHOR_EMAIL = 'cseng@localhost', GIT_AUTHOR_DATE = '2026-01-01T00:00:00+0000',
  GIT_COMMITTER_NAME = 'cseng', GIT_COMMITTER_EMAIL = 'cseng@localhost', GIT_COMMITTER_DATE = '2026-01-01T00:00:00+0000',
  GIT_CONFIG_NOSYSTEM = '1', GIT_CONFIG_GLOBAL = '/dev/null', GIT_TERMINAL_PROMPT = '0',
}

--- The bundled repository's folder.
function W.default_dir() return sys.root() .. '/data/workloads/standard' end

function W.options(wo)
  local dir = wo.standard_dir
  if dir == nil then dir = W.default_dir() end
  if type(dir) ~= 'string' or dir == '' then error(FIELD .. ': expected a folder, got ' .. type(dir), 0) end
  if not fs.exists(dir .. '/Makefile') then error(FIELD .. ': ' .. dir .. ' has no Makefile (`make` builds, `make test` tests)', 0) end
  local tests = 0
  for _, n in ipairs(fs.list(dir .. '/tests') or {}) do
    if n:match('%.c$') then
      for line in (fs.read(dir .. '/tests/' .. n) or ''):gmatch('[^\n]+') do
        if line:match('^TEST%(') then tests = tests + 1 end
      end
    end
  end
  if tests == 0 then error(FIELD .. ': ' .. dir .. '/tests/*.c defines no TEST(name): nothing to count the passes against', 0) end
  wo.standard_dir, wo.standard_tests = dir, tests
end

-- Which of the tools a root filesystem lacks (lstat: cc is a symlink into the root's own /etc).
local function missing_in(root)
  local out = {}
  for _, t in ipairs(W.TOOLS) do
    local found = false
    for _, d in ipairs({ '/usr/bin/', '/bin/', '/usr/local/bin/' }) do
      if fs.lstat(root .. d .. t) then found = true; break end
    end
    if not found then out[#out + 1] = t end
  end
  return out
end

-- git on the host (it packs the bundle); on local, the tools in the root its sandboxes run on.
function W.refuse(o, P, _, name)
  if not proc.which('git') then return 'git is not installed on this machine (it packs the repository the sandboxes clone)' end
  if P.name ~= 'local' then return nil end
  local cfg = o.provider_config[name] or {}
  local missing, root
  if cfg.host_root == true or o.host_root or os.getenv('CSENG_LOCAL_HOST_ROOT') == '1' then
    missing, root = {}, 'the host\'s /usr'
    for _, t in ipairs(W.TOOLS) do if not proc.which(t) then missing[#missing + 1] = t end end
  else
    root = cfg.rootfs or os.getenv('CSENG_LOCAL_ROOTFS') or require('cseng.images.rootfs').rootfs_dir('bookworm')
    if not fs.exists(root .. '/etc/passwd') then return nil end -- no base root yet: create says how to build it
    missing = missing_in(root)
  end
  if #missing > 0 then
    return string.format('%s\'s sandboxes lack %s (in %s): the standard workload needs %s', name, table.concat(missing, ', '),
      root, table.concat(W.TOOLS, ', '))
  end
end

function W.figures()
  return {
    { 'standard_clone_ms', 'ms', 'git clone from the bundle: exec call sent -> its answer' },
    { 'standard_install_ms', 'ms', 'make -j$(nproc) (the library and the test runner): exec call sent -> its answer' },
    { 'standard_test_ms', 'ms', 'make test (the suite): exec call sent -> its answer' },
    { 'standard_total_ms', 'ms', 'standard_clone_ms + standard_install_ms + standard_test_ms' },
    { 'standard_upload_ms', 'ms', 'the bundle\'s put (untimed for the total): call sent -> its answer' },
  }
end
function W.headline() return 'standard_total_ms' end

local function git(dir, args)
  local argv = { 'git' }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local r, err = proc.run { argv = argv, cwd = dir, env_add = GIT_ENV, timeout = 120 }
  if not r or r.code ~= 0 then
    errors.raise(errors.EPREPARE, string.format('packing %s: git %s: %s', dir, table.concat(args, ' '),
      r and util.tail(util.trim(r.stderr .. ' ' .. r.stdout), 300) or tostring(err)))
  end
  return util.trim(r.stdout)
end

--- Pack a repository folder (laid out as data/workloads/standard/) as a git bundle with a fixed
--- author and date: {bundle (its bytes), commit, files, lines, bytes, tests (the TEST( lines)}.
---@param dir string
---@param tests integer
---@return table
function W.pack(dir, tests)
  local tmp = assert(fs.tempdir('cseng-standard-'))
  local ok, res = pcall(function()
    local repo = tmp .. '/repo'
    local cok, cerr = fs.copy_tree(dir, repo)
    if not cok then errors.raise(errors.EPREPARE, 'packing ' .. dir .. ': ' .. tostring(cerr)) end
    git(repo, { 'init', '-q', '-b', 'main' })
    git(repo, { 'add', '-A' })
    git(repo, { 'commit', '-q', '--no-gpg-sign', '-m', 'the arena\'s standard workload' })
    local commit = git(repo, { 'rev-parse', 'HEAD' })
    local files, lines, bytes = 0, 0, 0
    for rel in git(repo, { 'ls-files' }):gmatch('[^\n]+') do
      local text = fs.read(repo .. '/' .. rel) or ''
      files, bytes = files + 1, bytes + #text
      lines = lines + select(2, text:gsub('\n', ''))
    end
    git(repo, { 'bundle', 'create', '-q', tmp .. '/repo.bundle', 'HEAD', 'main' })
    local bundle = assert(fs.read(tmp .. '/repo.bundle'))
    return { bundle = bundle, commit = commit, files = files, lines = lines, bytes = bytes, tests = tests }
  end)
  fs.remove_tree(tmp)
  if not ok then error(res, 0) end
  return res
end

function W.prepare(_, wo)
  local p = W.pack(wo.standard_dir, wo.standard_tests)
  p.source = wo.standard_dir == W.default_dir() and 'data/workloads/standard' or wo.standard_dir
  p.tar = workloads.tar1('repo.bundle', p.bundle)
  p.bundle_bytes, p.bundle_sha256 = #p.bundle, crypto.sha256_hex(p.bundle)
  p.bundle = nil
  return p
end

function W.info(ws)
  return { source = ws.source, commit = ws.commit, files = ws.files, lines = ws.lines, bytes = ws.bytes, tests = ws.tests,
    bundle_bytes = ws.bundle_bytes, bundle_sha256 = ws.bundle_sha256, tools = W.TOOLS }
end

function W.run(ctx)
  local P, client, sb, ws = ctx.p.adapter, ctx.p.client, ctx.sb, ctx.ws
  local base = '/tmp/cseng-standard-' .. ctx.hex:sub(1, 8)
  local repo = base .. '/minicodec'
  ctx:stage('standard_prepare')
  local probe = ctx:sh('for t in ' .. table.concat(W.TOOLS, ' ') .. '; do command -v $t >/dev/null 2>&1 || echo "missing=$t"; done; true')
  local missing = {}
  for t in tostring(probe.stdout):gmatch('missing=(%S+)') do missing[#missing + 1] = t end
  if #missing > 0 then
    errors.raise(errors.ETOOLS, string.format('the sandbox lacks %s: the standard workload needs %s in its image',
      table.concat(missing, ', '), table.concat(W.TOOLS, ', ')))
  end
  ctx:path('standard_upload', 'put (a tar of the bundle)')
  ctx:time('standard_upload_ms', function() return ctx:must('EPUT', P.put(client, sb, base, ws.tar)) end)
  ctx:path('standard', 'git clone, make, make test')
  ctx:stage('standard_clone')
  local clone_ms = ctx:time('standard_clone_ms', function()
    return ctx:sh('git clone -q ' .. util.shell_quote(base .. '/repo.bundle') .. ' ' .. util.shell_quote(repo), { what = 'git clone' })
  end)
  ctx:stage('standard_install')
  local install_ms = ctx:time('standard_install_ms', function()
    return ctx:sh('make -s -j"$(nproc)"', { cwd = repo, what = 'make' })
  end)
  ctx:stage('standard_test')
  local test_ms, res = ctx:time('standard_test_ms', function() return ctx:sh('make -s test', { cwd = repo, any_exit = true }) end)
  ctx:figure('standard_total_ms', clone_ms + install_ms + test_ms)
  ctx:stage('standard_check')
  local passed, failed = tostring(res.stdout):match('tests: (%d+) passed, (%d+) failed')
  if not passed then
    errors.raise(errors.EEXEC, string.format('make test: exit %s, no "tests: N passed, M failed" line: %s', tostring(res.code),
      util.tail(util.trim((res.stderr or '') .. ' ' .. (res.stdout or '')), 300)))
  end
  local head = ctx:sh('git -C ' .. util.shell_quote(repo) .. ' rev-parse HEAD; rm -rf ' .. util.shell_quote(base),
    { what = 'git rev-parse HEAD' })
  local got = tostring(head.stdout):match('%x+')
  ctx:check('standard_head', got == ws.commit, ws.commit, got)
  ctx:check('standard_tests_passed', tonumber(passed) == ws.tests, ws.tests, tonumber(passed))
  ctx:check('standard_tests_failed', tonumber(failed) == 0, 0, tonumber(failed))
end

return W
