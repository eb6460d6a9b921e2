--- A small Harbor registry to try `--dataset NAME@VERSION --registry R` offline (docs/HARBOR.md):
---
---   ./cseng lua docs/examples/harbor-registry.lua DIR [--git]
---
--- writes, from two bundled tasks (data/tasks/awk-fixed-width-to-csv, data/tasks/csv-sales-report):
---   DIR/tasks/<task>/        the two task folders
---   DIR/tampered/<task>/     csv-sales-report with a line added to its tests/test.sh
---   DIR/registry.json        Harbor's registry.json (a list of DatasetSpec) with three versions of
---                            datasets, their tasks by path relative to the file's folder:
---       smoke@1.0           both tasks, each with its content digest (Harbor's Packager hash)
---       smoke@0.9           both tasks, without digests (nothing to check)
---       smoke-tampered@1.0  awk-fixed-width-to-csv as in smoke@1.0, csv-sales-report from
---                           tampered/ with smoke@1.0's digest (refused: the folder does not hash
---                           to what the registry says)
--- With --git, also:
---   DIR/repo/                a git repository holding tasks/<task> (one commit)
---   DIR/git/registry.json    `smoke@1.0` with each task pinned to that commit (git_url file://...)
--- Run from the checkout's root (it reads data/tasks/).
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')
local registry = require('cseng.workload.registry')

local TASKS = { 'awk-fixed-width-to-csv', 'csv-sales-report' }
local dir, git = nil, false
for _, a in ipairs(arg) do
  if a == '--git' then git = true elseif not dir then dir = a end
end
if not dir then
  io.stderr:write('usage: cseng lua docs/examples/harbor-registry.lua DIR [--git]\n')
  return 2
end
if fs.exists(dir .. '/registry.json') then
  io.stderr:write(dir .. '/registry.json exists: give a new folder\n')
  return 1
end

local function copy(src, dst)
  assert(fs.mkdir_p(dst:match('^(.*)/[^/]+$')))
  assert(fs.copy_tree(src, dst))
end

local entries, tampered, bare = {}, {}, {}
for i, t in ipairs(TASKS) do
  copy('data/tasks/' .. t, dir .. '/tasks/' .. t)
  local digest = 'sha256:' .. registry.content_hash(dir .. '/tasks/' .. t)
  entries[i] = { name = t, path = 'tasks/' .. t, digest = digest }
  bare[i] = { name = t, path = 'tasks/' .. t }
  tampered[i] = { name = t, path = 'tasks/' .. t, digest = digest }
end
-- the second task, changed after the registry took its digest
local edited = dir .. '/tampered/' .. TASKS[2]
copy('data/tasks/' .. TASKS[2], edited)
assert(fs.write(edited .. '/tests/test.sh', assert(fs.read(edited .. '/tests/test.sh')) .. '# an edit the registry did not pin\n'))
tampered[2].path = 'tampered/' .. TASKS[2]

local doc = {
  { name = 'smoke', version = '1.0', description = 'two bundled tasks, with their content digests', tasks = entries },
  { name = 'smoke', version = '0.9', description = 'two bundled tasks, no digests', tasks = bare },
  { name = 'smoke-tampered', version = '1.0', description = 'csv-sales-report changed after its digest was taken',
    tasks = tampered },
}
assert(fs.write(dir .. '/registry.json', jsonl.encode(doc) .. '\n'))
print(dir .. '/registry.json: smoke@1.0, smoke@0.9 (no digests), smoke-tampered@1.0')

if git then
  local repo = dir .. '/repo'
  for _, t in ipairs(TASKS) do copy('data/tasks/' .. t, repo .. '/tasks/' .. t) end
  local env = { GIT_AUTHOR_NAME = 'cseng', GIT_AUTHOR_EMAIL = 'cseng@localhost', GIT_COMMITTER_NAME = 'cseng',
    GIT_COMMITTER_EMAIL = 'cseng@localhost', GIT_CONFIG_NOSYSTEM = '1' }
  local function run(argv)
    local r = assert(proc.run { argv = argv, cwd = repo, env_add = env, timeout = 60 })
    if r.code ~= 0 then error(table.concat(argv, ' ') .. ': ' .. r.stderr, 0) end
    return (r.stdout:gsub('%s+$', ''))
  end
  run({ 'git', 'init', '-q', '-b', 'main' })
  run({ 'git', 'add', '-A' })
  run({ 'git', 'commit', '-q', '-m', 'two bundled tasks' })
  local commit = run({ 'git', 'rev-parse', 'HEAD' })
  local url = 'file://' .. sys.realpath(repo)
  local pinned = {}
  for i, e in ipairs(entries) do
    pinned[i] = { name = e.name, git_url = url, git_commit_id = commit, path = e.path, digest = e.digest }
  end
  assert(fs.mkdir_p(dir .. '/git'))
  assert(fs.write(dir .. '/git/registry.json', jsonl.encode({ { name = 'smoke', version = '1.0',
    description = 'two bundled tasks pinned to a commit of ' .. url, tasks = pinned } }) .. '\n'))
  print(dir .. '/git/registry.json: smoke@1.0 at ' .. url .. ' ' .. commit)
end
return 0
