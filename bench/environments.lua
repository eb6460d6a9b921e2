--- Per-task environments on the local provider, written into docs/PERFORMANCE.md between
--- <!-- environments:begin --> and <!-- environments:end --> (bench/run.lua keeps the section):
---
---   ./cseng lua bench/environments.lua [--n 100] [--reps 3] [--output docs/PERFORMANCE.md]
---
---   1. create -> first exec (exec 'true') -> destroy on the Debian base root filesystem (an
---      overlay mount per sandbox) and in host mode (--host-root), interleaved per repetition;
---   2. the build phase (local's build: the task's layer) of every bundled task with RUN steps,
---      cold (a fresh layer cache: the steps replayed) and cached (the layer found), per repetition.
--- Needs root and the base root filesystem (./cseng images rootfs).
local clock = require('cseng.clock')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local blib = require('bench.lib')
local stats = require('cseng.lib.stats')
local dataset = require('cseng.workload.dataset')
local recipe = require('cseng.workload.recipe')
local L = require('providers.local')

local opts = blib.options('environments', arg, { n = { 'int', min = 1 }, reps = { 'int', min = 1 }, output = 'string' })
if not opts then return 2 end
local ROOT = sys.root()
local N, REPS = opts.n or 100, opts.reps or 3
local OUTPUT = opts.output or (ROOT .. '/docs/PERFORMANCE.md')
local work = assert(fs.tempdir('cseng-bench-env-'))
local load0 = (fs.read('/proc/loadavg') or ''):match('^(%S+)') or '?'

local function ms(ns) return ns / 1e6 end

local function startup(client, samples)
  local spec = { labels = { ['cseng.run'] = 'bench', ['cseng.task'] = 'startup' }, workdir = '/workspace' }
  for i = 0, N do
    local t0 = clock.now()
    local sb = assert(L.create(client, spec))
    local r = assert(L.exec(client, sb, 'true', { timeout = 60 }))
    local t1 = clock.now()
    assert(r.code == 0, 'exec true failed: ' .. tostring(r.stderr))
    assert(L.destroy(client, sb))
    if i > 0 then samples[#samples + 1] = ms(t1 - t0) end
  end
end

-- as users run it: every sandbox in its user namespace, with its seccomp filter, cgroups and
-- size-limited writable layer
local modes = {
  { name = 'base root filesystem (overlay)', cfg = { root = work .. '/sb' } },
  { name = 'host mode (--host-root)', cfg = { root = work .. '/sb', host_root = true } },
}
local ready = {}
for _, m in ipairs(modes) do m.client = L.connect(m.cfg); ready[m.name] = {} end

local tasks = {}
for _, t in ipairs(dataset.load(ROOT .. '/data/smoke.jsonl')) do
  if #t.recipe.runs > 0 then tasks[#tasks + 1] = t end
end
local builds = {}
for _, t in ipairs(tasks) do builds[t.id] = { cold = {}, cached = {} } end

for rep = 1, REPS do
  local order = rep % 2 == 1 and { 1, 2 } or { 2, 1 }
  for _, i in ipairs(order) do startup(modes[i].client, ready[modes[i].name]) end
  local client = L.connect({ root = work .. '/sb', layers = work .. '/layers-' .. rep })
  for _, t in ipairs(tasks) do
    -- cold: no layer and no kept step of an earlier repetition (step_cache = false)
    local req = { recipe = recipe.of_task(t, { provider_map = L.image_map }), timeout = 600, step_cache = false }
    for _, kind in ipairs({ 'cold', 'cached' }) do
      local t0 = clock.now()
      local b, err = L.build(client, req)
      local el = clock.now() - t0
      assert(b, t.id .. ': ' .. tostring(type(err) == 'table' and err.message or err))
      assert(b.cache_hit == (kind == 'cached'), t.id .. ': unexpected cache_hit')
      table.insert(builds[t.id][kind], ms(el))
    end
  end
  io.stderr:write(string.format('environments: repetition %d/%d done\n', rep, REPS))
end

local function p(xs, q) return stats.quantile(xs, q) or 0 end
local lines = {
  '<!-- environments:begin -->',
  string.format('`bench/environments.lua` (%s, %d repetitions, load average %s at the start and %s at the end on this '
    .. '2-core machine, shared with other runs: compare the rows, not the absolute values): `lua/providers/local.lua` directly.',
    os.date('!%Y-%m-%d'), REPS, load0, (fs.read('/proc/loadavg') or ''):match('^(%S+)') or '?'),
  '',
  string.format('**create → first exec** (`create`, exec `true`; %d samples per repetition after one warm-up; the sandbox '
    .. 'as users get it: its own user namespace, seccomp filter, cgroups and size-limited writable layer), ms:', N),
  '',
  '| sandbox root | samples | p50 | p95 |',
  '| :--- | ---: | ---: | ---: |',
}
for _, m in ipairs(modes) do
  local xs = ready[m.name]
  lines[#lines + 1] = string.format('| %s | %d | %.2f | %.2f |', m.name, #xs, p(xs, 0.5), p(xs, 0.95))
end
local base_p50, host_p50 = p(ready[modes[1].name], 0.5), p(ready[modes[2].name], 0.5)
lines[#lines + 1] = ''
lines[#lines + 1] = string.format('Base root filesystem / host mode at p50: %.2f× (the base mode adds an overlayfs mount '
  .. 'and unmount per sandbox; host mode writes a synthetic /etc and binds more paths per exec).', base_p50 / host_p50)
lines[#lines + 1] = ''
lines[#lines + 1] = '**build phase** (`build`: the task\'s layer) of the bundled tasks with RUN steps, ms, median over repetitions ' ..
  '(cold: a fresh layer cache, the recipe replayed over the base; cached: the layer found under its content key):'
lines[#lines + 1] = ''
lines[#lines + 1] = '| task | RUN steps | cold p50 | cached p50 | cold / cached |'
lines[#lines + 1] = '| :--- | ---: | ---: | ---: | ---: |'
for _, t in ipairs(tasks) do
  local c, h = p(builds[t.id].cold, 0.5), p(builds[t.id].cached, 0.5)
  lines[#lines + 1] = string.format('| `%s` | %d | %.1f | %.3f | %.0f× |', t.id, #t.recipe.runs, c, h, c / h)
end
lines[#lines + 1] = ''
lines[#lines + 1] = 'Reproduce: `./cseng lua bench/environments.lua` (root; `./cseng images rootfs` first).'
lines[#lines + 1] = '<!-- environments:end -->'
local section = table.concat(lines, '\n')

local doc = fs.read(OUTPUT) or ''
local pat = '<!%-%- environments:begin %-%->.-<!%-%- environments:end %-%->'
if doc:find(pat) then
  doc = doc:gsub(pat, function() return section end)
else
  local at = doc:find('\n## Reproducing', 1, true)
  local block = '\n## Per-task environments (local)\n\n' .. section .. '\n'
  if at then doc = doc:sub(1, at) .. block .. doc:sub(at + 1) else doc = doc .. block end
end
assert(fs.write(OUTPUT, doc))
fs.remove_tree(work)
print(section)
return 0
