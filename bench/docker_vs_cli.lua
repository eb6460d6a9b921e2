--- Docker startup, Engine API vs CLI: create -> first exec through lua/providers/docker.lua
--- (POST /containers/create + start + exec `true`, over the unix socket) against
--- `docker run --rm --init --network none IMAGE true` (the CLI, through proc.run), same image,
--- samples interleaved one by one so both see the same machine. A figure, not a test.
---
---   ./cseng lua bench/docker_vs_cli.lua [--n 30] [--warmup 3] [--image cseng/debian:bookworm]
---                                       [--out F.json] [--markdown]
---
--- api_ready   create + start + first exec returns (the seed's ready_ms), destroy not included
--- api_cycle   the same plus destroy (DELETE ?force=1), the whole lifecycle
--- cli_run     `docker run --rm`: create, start, `true` as PID 1, wait, remove
--- The ratio is cli_run p50 / api_ready p50 (and cli_run p50 / api_cycle p50).
local clock = require('cseng.clock')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local cjson = require('cjson')
local blib = require('bench.lib')
local stats = require('cseng.lib.stats')
local docker = require('providers.docker')

local opts = blib.options('docker_vs_cli', arg, { n = { 'int', min = 1 }, warmup = { 'int', min = 0 },
  image = 'string', out = 'string', markdown = 'bool' })
if not opts then return 2 end
local N, WARMUP = opts.n or 30, opts.warmup or 3
local IMAGE = opts.image or 'cseng/debian:bookworm'
local CLI = proc.which('docker')
if not CLI then io.stderr:write('docker_vs_cli: the docker CLI is not installed\n'); return 1 end

local client = docker.connect({})
if not require('providers.shared.docker_build').image_id(client, IMAGE) then
  io.stderr:write('docker_vs_cli: image ', IMAGE, ' is absent (tools/docker-up.sh builds it)\n'); return 1
end
local RUN = 'bench-docker-vs-cli-' .. os.time()
local CLI_ARGV = { CLI, 'run', '--rm', '--init', '--network', 'none', IMAGE, 'true' }

local function api_sample()
  local t0 = clock.now()
  local sb, err = docker.create(client, { image = IMAGE, network = false, labels = {
    ['cseng.run'] = RUN, ['cseng.task'] = 'bench', ['cseng.launcher'] = 'bench', ['cseng.created'] = tostring(os.time()) } })
  if not sb then error('create: ' .. tostring(err)) end
  local t1 = clock.now()
  local r, xerr = docker.exec(client, sb, 'true', { timeout = 60, cwd = '/' })
  local t2 = clock.now()
  local ok, derr = docker.destroy(client, sb)
  local t3 = clock.now()
  if not r or r.code ~= 0 then error('exec: ' .. tostring(xerr or r.code)) end
  if not ok then error('destroy: ' .. tostring(derr)) end
  return (t1 - t0) / 1e6, (t2 - t0) / 1e6, (t3 - t0) / 1e6
end

local function cli_sample()
  local t0 = clock.now()
  local r, err = proc.run { argv = CLI_ARGV, timeout = 120 }
  local t1 = clock.now()
  if not r or r.code ~= 0 then error('docker run: ' .. tostring(err or (r.code .. ' ' .. r.stderr))) end
  return (t1 - t0) / 1e6
end

for _ = 1, WARMUP do api_sample(); cli_sample() end
local s = { api_create = {}, api_ready = {}, api_cycle = {}, cli_run = {} }
for i = 1, N do
  -- alternate which goes first, so neither always follows the other's teardown
  if i % 2 == 1 then
    s.api_create[i], s.api_ready[i], s.api_cycle[i] = api_sample()
    s.cli_run[i] = cli_sample()
  else
    s.cli_run[i] = cli_sample()
    s.api_create[i], s.api_ready[i], s.api_cycle[i] = api_sample()
  end
end

local function q(v, p) return stats.quantile(v, p) end
local summary = {}
for k, v in pairs(s) do summary[k] = { p50 = q(v, 0.5), p90 = q(v, 0.9), min = q(v, 0), max = q(v, 1) } end
local ratio_ready = summary.cli_run.p50 / summary.api_ready.p50
local ratio_cycle = summary.cli_run.p50 / summary.api_cycle.p50
local cmdline = './cseng lua bench/docker_vs_cli.lua --n ' .. N .. ' --warmup ' .. WARMUP .. ' --image ' .. IMAGE
local cli_version = proc.run { argv = { CLI, 'version', '--format', '{{.Client.Version}}' }, timeout = 30 }
local doc = {
  date = os.date('!%Y-%m-%d %H:%M UTC'), command = cmdline, n = N, warmup = WARMUP, image = IMAGE,
  cli_argv = CLI_ARGV, runtime = docker.runtime(client), cli_version = cli_version and cli_version.stdout:gsub('%s+$', ''),
  cpus = sys.cpu_count and sys.cpu_count() or nil, samples_ms = s, summary_ms = summary,
  ratio_cli_over_api_ready = ratio_ready, ratio_cli_over_api_cycle = ratio_cycle,
}
if opts.out then assert(fs.write(opts.out, cjson.encode(doc) .. '\n')) end

local function row(name, what, k)
  local x = summary[k]
  return string.format('| %s | %s | %.1f | %.1f | %.1f–%.1f |', name, what, x.p50, x.p90, x.min, x.max)
end
local lines = {
  string.format('Measured %s on this machine (%s CPUs, %s; docker CLI %s), image `%s`, %d samples each after %d warm-ups,',
    doc.date, tostring(doc.cpus), doc.runtime, tostring(doc.cli_version), IMAGE, N, WARMUP),
  'interleaved one by one. Command:',
  '',
  '```',
  cmdline,
  '```',
  '',
  '| path | what is timed | p50 ms | p90 ms | min–max ms |',
  '|---|---|---|---|---|',
  row('Engine API: create', '`POST /containers/create` + `/start` (docker-init, `sleep infinity`)', 'api_create'),
  row('Engine API: create → first exec', 'the above + exec `true` (create, start, stream, inspect)', 'api_ready'),
  row('Engine API: whole lifecycle', 'the above + `DELETE /containers/{id}?force=1`', 'api_cycle'),
  row('CLI', '`' .. table.concat({ 'docker', 'run', '--rm', '--init', '--network', 'none', IMAGE, 'true' }, ' ') .. '`', 'cli_run'),
  '',
  string.format('**Ratio: `docker run --rm` p50 / Engine API create → first exec p50 = %.2f×** (against the', ratio_ready),
  string.format('whole API lifecycle including the delete: %.2f×).', ratio_cycle),
}
local md = table.concat(lines, '\n')
if opts.markdown then print(md) else
  print(string.format('api create→first exec p50 %.1f ms, api lifecycle p50 %.1f ms, docker run --rm p50 %.1f ms: ratio %.2f (lifecycle %.2f)',
    summary.api_ready.p50, summary.api_cycle.p50, summary.cli_run.p50, ratio_ready, ratio_cycle))
end
return 0
