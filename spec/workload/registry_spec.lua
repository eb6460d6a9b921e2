-- Datasets by name through a Harbor registry (lua/cseng/workload/registry.lua), offline: task
-- repositories and a git-repo registry served by a `git daemon` on 127.0.0.1, a registry.json
-- file and the same file over the engine's own HTTP server. The tasks are fetched at their pinned
-- commits, each checked against the registry's content digest (Harbor's Packager hash); a tampered
-- task is refused in one line naming it; the run's identity records the registry, the dataset's
-- version, content hash and every pin; cold-gold passes on the resolved tasks, nop scores 0.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local jsonl = require('cseng.lib.jsonl')
local registry = require('cseng.workload.registry')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local S = require('cseng.lib.schema')

local ROOT = sys.root()
local TASKS = { 'awk-fixed-width-to-csv', 'csv-sales-report' }
local tmp, daemon, port, http_srv, C1, C2, REG_JSON, CACHE

local function sh(cmd, cwd)
  local r = assert(proc.run { argv = { 'bash', '-c', cmd }, cwd = cwd, timeout = 60,
    env_add = { GIT_AUTHOR_NAME = 'cseng', GIT_AUTHOR_EMAIL = 'c@e', GIT_COMMITTER_NAME = 'cseng', GIT_COMMITTER_EMAIL = 'c@e',
      GIT_AUTHOR_DATE = '2026-01-01T00:00:00Z', GIT_COMMITTER_DATE = '2026-01-01T00:00:00Z' } })
  assert(r.code == 0, cmd .. ': ' .. r.stderr)
  return (r.stdout:gsub('%s+$', ''))
end

local free_port = require('spec.helpers.runlog').free_port

local function git_url(name) return string.format('git://127.0.0.1:%d/%s', port, name) end

setup(function()
  tmp = assert(fs.tempdir('cseng-registry-spec-'))
  CACHE = tmp .. '/cache'
  -- the tasks' repository: two bundled tasks under tasks/ (commit C1), then one of them changed (C2)
  local repo = tmp .. '/srv/tasks.git'
  sh('mkdir -p work/tasks && cp -r ' .. ROOT .. '/data/tasks/' .. TASKS[1] .. ' ' .. ROOT .. '/data/tasks/' .. TASKS[2] ..
    ' work/tasks/ && cd work && git init -q -b main && git add -A && git commit -qm tasks', tmp)
  C1 = sh('git rev-parse HEAD', tmp .. '/work')
  sh('echo "# an edit the registry did not pin" >> tasks/' .. TASKS[2] .. '/tests/test.sh && git commit -qam edit', tmp .. '/work')
  C2 = sh('git rev-parse HEAD', tmp .. '/work')
  sh('git clone -q --bare work ' .. repo, tmp)
  port = free_port()
  daemon = assert(proc.spawn { argv = { 'git', 'daemon', '--reuseaddr', '--export-all', '--listen=127.0.0.1',
    '--port=' .. port, '--base-path=' .. tmp .. '/srv', tmp .. '/srv' }, stderr = tmp .. '/daemon.log' })
  -- wait until it answers (a count of tries, not a time)
  for _ = 1, 200 do
    local r = proc.run { argv = { 'git', 'ls-remote', git_url('tasks.git') }, timeout = 10 }
    if r and r.code == 0 then break end
    require('cseng.task').sleep(0.05)
  end
  -- the digests as Harbor's Packager computes them, over the tasks at C1
  local digests = {}
  sh('git checkout -q ' .. C1, tmp .. '/work')
  for i, t in ipairs(TASKS) do digests[i] = 'sha256:' .. registry.content_hash(tmp .. '/work/tasks/' .. t) end
  local function entries(commit, with_digest)
    local out = {}
    for i, t in ipairs(TASKS) do
      out[i] = { name = t, git_url = git_url('tasks.git'), git_commit_id = commit, path = 'tasks/' .. t,
        digest = with_digest and digests[i] or nil }
    end
    return out
  end
  REG_JSON = {
    { name = 'smoke', version = '1.0', description = 'two bundled tasks', tasks = entries(C1, true) },
    { name = 'smoke', version = '2.0', description = 'pinned to a commit whose content changed', tasks = entries(C2, true) },
    { name = 'smoke', version = '0.9', description = 'no digests', tasks = entries(C1, false) },
    { name = 'cseng/smoke', version = '1', description = 'by content hash', tasks = entries(C1, true) },
  }
  fs.write(tmp .. '/registry.json', jsonl.encode(REG_JSON))
  -- the registry as a git repository of its own (registry.json at its root), served by the daemon
  sh('mkdir -p regwork && cp registry.json regwork/ && cd regwork && git init -q -b main && git add -A && git commit -qm reg && '
    .. 'git clone -q --bare . ' .. tmp .. '/srv/registry.git', tmp)
  -- and over HTTP
  local body = fs.read(tmp .. '/registry.json')
  http_srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function(req)
    if req.path == '/registry.json' then return 200, { ['Content-Type'] = 'application/json' }, body end
    return 404, {}, 'no'
  end })
end)

teardown(function()
  if daemon then daemon:close() end
  if http_srv then http_srv:close() end
  fs.remove_tree(tmp)
end)

local function run(opts)
  opts.provider = 'local'
  opts.solver = opts.solver or 'gold'
  opts.mode = 'cold'
  opts.concurrency = 2
  opts.output = tmp .. '/results-' .. tostring(math.random(1e9))
  opts.quiet = true
  opts.env = { CSENG_CACHE = CACHE }
  local status, info = frame.run('tasks', opts)
  local events = results.read(info.jsonl)
  return status, results.summary(events), events
end

describe('a Harbor registry', function()
  it('matches Harbor\'s registry models (a DatasetSpec row missing a field is named)', function()
    local ok, p = S.check(S.list(registry.MODELS.DatasetSpec), { { name = 'x', version = '1', tasks = {} } })
    assert.is_nil(ok)
    assert.matches('0.description: Field required', p[1], 1, true)
  end)

  it('lists its datasets from a file, a URL and a git repository alike', function()
    for _, src in ipairs({ tmp .. '/registry.json', http_srv:url() .. '/registry.json', 'git+' .. git_url('registry.git') }) do
      local reg = registry.open(src, { cache = CACHE })
      assert.equal(4, #reg.datasets, src)
      assert.equal('smoke', reg.datasets[1].name)
    end
    local reg = registry.open(git_url('registry.git'), { cache = CACHE })
    assert.equal('git', reg.kind)
    assert.equal(40, #reg.commit)
  end)

  it('resolves NAME@VERSION, NAME (the highest version) and org/name@sha256:<content hash>', function()
    local reg = registry.open(tmp .. '/registry.json', { cache = CACHE })
    assert.equal('1.0', registry.find(reg, 'smoke@1.0').version)
    assert.equal('2.0', registry.find(reg, 'smoke').version)
    local d = registry.find(reg, 'cseng/smoke@latest')
    local digests = {}
    for i, t in ipairs(d.tasks) do digests[i] = t.digest end
    local hash = 'sha256:' .. registry.dataset_hash(digests)
    assert.equal('cseng/smoke', registry.find(reg, 'cseng/smoke@' .. hash).name)
    local ok, err = pcall(registry.find, reg, 'smoke@3.0')
    assert.is_false(ok)
    assert.matches("no version '3.0' of 'smoke' in the registry .* %(versions: 1.0, 2.0, 0.9%)", tostring(err))
    ok, err = pcall(registry.find, reg, 'nope@1')
    assert.is_false(ok)
    assert.matches("no dataset 'nope' in the registry .* %(it has: cseng/smoke, smoke%)", tostring(err))
  end)

  it('fetches each task at its pinned commit into the cache and records the pins', function()
    local tasks, resolved = dataset.load_registry('smoke@1.0', tmp .. '/registry.json', { cache = CACHE })
    assert.equal(2, #tasks)
    for i, t in ipairs(tasks) do
      assert.equal(TASKS[i], t.id)
      assert.equal(C1, t.source.git_commit_id)
      assert.equal(REG_JSON[1].tasks[i].digest, 'sha256:' .. t.sha256)
      assert.is_true(t.has_solution)
    end
    assert.equal('smoke', resolved.name)
    assert.equal('1.0', resolved.version)
    assert.equal(C1, resolved.tasks[2].git_commit_id)
  end)

  it('refuses a task whose content does not match the registry\'s digest, in one line naming it', function()
    local ok, err = pcall(dataset.load_registry, 'smoke@2.0', tmp .. '/registry.json', { cache = CACHE })
    assert.is_false(ok)
    local msg = type(err) == 'table' and err.message or tostring(err)
    assert.equal('EDATASET', type(err) == 'table' and err.code)
    assert.is_nil(msg:find('\n'))
    local name = TASKS[2]:gsub('%-', '%%-')
    assert.matches('task ' .. name .. ' %(git://127%.0%.0%.1:%d+/tasks%.git@' .. C2:sub(1, 12) .. ':tasks/' .. name
      .. '%): content digest sha256:%x+ does not match the registry\'s sha256:%x+: refused', msg)
    -- the first task (unchanged at C2) passed its check; the refusal named the second
    assert.is_nil(msg:find(TASKS[1], 1, true))
  end)

  it('cold-gold on the resolved tasks: gold passes, the identity records the registry and the pins; nop scores 0', function()
    local status, s, events = run { dataset = 'smoke@1.0', registry = 'git+' .. git_url('registry.git') }
    assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
    assert.equal(2, s.passed)
    local started
    for _, e in ipairs(events) do if e.event == 'run_started' then started = e end end
    local reg = started.identity.registry
    assert.equal('smoke', reg.name)
    assert.equal('1.0', reg.version)
    assert.matches('^sha256:%x+$', reg.content_hash)
    assert.equal(40, #reg.registry_commit)
    assert.equal(2, #reg.tasks)
    assert.equal(C1, reg.tasks[1].git_commit_id)
    local _, n = run { dataset = 'smoke@1.0', registry = tmp .. '/registry.json', solver = 'nop' }
    assert.equal(0, n.passed)
  end)

  it('a tampered task stops the run before any sandbox, in one line', function()
    local ok, err = pcall(run, { dataset = 'smoke@2.0', registry = tmp .. '/registry.json' })
    assert.is_false(ok)
    assert.matches('does not match the registry\'s', type(err) == 'table' and err.message or tostring(err))
  end)

  it('an implicit dataset: a repository without registry.json is its tasks/ folder at HEAD', function()
    local reg = registry.open(git_url('tasks.git'), { cache = CACHE })
    assert.equal(1, #reg.datasets)
    assert.equal(2, #reg.datasets[1].tasks)
    assert.equal(C2, reg.commit)
  end)

  it('hashes a task as Harbor\'s Packager does: published files only, default ignores, sorted paths', function()
    local d = tmp .. '/hash'
    fs.mkdir_p(d .. '/tests/__pycache__')
    fs.mkdir_p(d .. '/environment')
    fs.write(d .. '/task.toml', 'version = "1.0"\n')
    fs.write(d .. '/instruction.md', 'do\n')
    fs.write(d .. '/tests/test.sh', 'exit 0\n')
    fs.write(d .. '/tests/__pycache__/x.pyc', 'junk')
    fs.write(d .. '/notes.txt', 'not published')
    fs.write(d .. '/environment/Dockerfile', 'FROM x\n')
    local crypto = require('cseng.crypto')
    local function h(s) return crypto.sha256_hex(s) end
    local want = crypto.sha256_hex('environment/Dockerfile\0' .. h('FROM x\n') .. '\n' .. 'instruction.md\0' .. h('do\n') .. '\n'
      .. 'task.toml\0' .. h('version = "1.0"\n') .. '\n' .. 'tests/test.sh\0' .. h('exit 0\n') .. '\n')
    local got, n = registry.content_hash(d)
    assert.equal(4, n)
    assert.equal(want, got)
    fs.write(d .. '/.gitignore', 'tests/\n')
    local _, n2 = registry.content_hash(d)
    assert.equal(3, n2)
  end)
end)
