-- Harbor's task schema 1.3 (src/harbor/models/task/config.py) on the local provider: multi-key
-- reward.json (every key a metric in the trial and the summary, one primary deciding pass/fail),
-- artifacts collected with Harbor's manifest, [[steps]] with per-step verifiers and a min_reward
-- gate that stops the trial, and network_mode / allowed_hosts enforced per phase by an egress
-- filter in the sandbox's own network namespace: a task allowed one host reaches it and not
-- another, and its verifier (no-network) reaches neither. The hosts are test hosts in a network
-- namespace this spec makes (a veth pair, 10.211.77.0/24), serving HTTP with the engine's server.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local jsonl = require('cseng.lib.jsonl')
local dataset = require('cseng.workload.dataset')
local frame = require('cseng.run.frame')
local results = require('cseng.results.log')
local K = require('cseng.run.kinds.tasks')
local H = require('spec.helpers.common')

local ROOT = H.ROOT
local FIX = ROOT .. '/spec/fixtures/harbor13'
local tmp = H.tempdir('cseng-task-schema-spec-')
teardown(H.remove_tempdirs)

local MAP = { 'debian:bookworm*=cseng/debian:bookworm' }

local function run(dataset_path, opts)
  opts = opts or {}
  opts.provider, opts.mode, opts.concurrency, opts.quiet = 'local', 'cold', 1, true
  opts.dataset = dataset_path
  opts.solver = opts.solver or 'gold'
  opts.image_map = MAP
  opts.output = tmp .. '/results-' .. tostring(math.random(1e9))
  local status, info = frame.run('tasks', opts)
  local events = results.read(info.jsonl)
  return status, results.summary(events), events, info
end

describe('task.toml 1.3', function()
  it('reads network policies, primary metric, artifacts and steps; refuses what Harbor refuses, naming the field', function()
    local c = dataset.config(assert(fs.read(FIX .. '/stepped/task.toml')), 'x')
    assert.equal(2, #c.steps)
    assert.same({ reward = 1.0 }, c.steps[1].min_reward)
    assert.same({ reward = 1.0, bonus = 0.5 }, c.steps[2].min_reward)
    assert.equal('no-network', c.network.environment.mode)
    local m = dataset.config(assert(fs.read(FIX .. '/multi-key/task.toml')), 'x')
    assert.equal('correct', m.primary_metric)
    assert.equal(2, #m.artifacts)
    assert.same({ '*.tmp' }, m.artifacts[2].exclude)
    local cases = {
      { '[agent]\nallowed_hosts = ["a.com"]\n', "agent.allowed_hosts: allowed_hosts is only valid when network_mode='allowlist'" },
      { '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://a.com"]\n', 'must be hostnames, not URLs' },
      { '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.*.com"]\n', "leading '*.' prefix" },
      { '[environment]\nnetwork_mode = "open"\n', "environment.network_mode: expected 'no-network', 'public' or 'allowlist'" },
      { 'artifacts = ["/a/../etc"]\n', "artifacts[1].source: must not contain '..'" },
      { 'artifacts = [{ source = "/a", destination = "manifest.json" }]\n', "'manifest.json' is reserved" },
      { '[[steps]]\nname = "../x"\n', 'steps[1].name' },
      { '[[steps]]\nname = "a"\nmin_reward = "high"\n', 'steps[1].min_reward: expected a number' },
      { 'multi_step_reward_strategy = "max"\n', "expected 'mean' or 'final'" },
    }
    for _, cse in ipairs(cases) do
      local ok, err = pcall(dataset.config, cse[1], 'task X')
      assert.is_false(ok, cse[1])
      assert.matches(cse[2], type(err) == 'table' and err.message or tostring(err), 1, true)
    end
  end)

  it('multi-key reward.json: every key a metric in the trial and the summary, the primary decides; artifacts with a manifest', function()
    local status, s = run(FIX .. '/multi-key')
    assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
    local r = s.results[1]
    assert.equal('passed', r.outcome)
    assert.same({ correct = 1, logged = 1, style = 0.5 }, r.rewards) -- booleans and strings ignored
    assert.equal('correct', r.primary_metric)
    assert.equal(1, r.reward)
    assert.same({ correct = { mean = 1, n = 1, min = 1, max = 1 }, logged = { mean = 1, n = 1, min = 1, max = 1 },
      style = { mean = 0.5, n = 1, min = 0.5, max = 0.5 } }, s.metrics)
    -- artifacts: the named file, the folder under its destination less the excluded, the convention folder
    local dir = r.artifacts_dir
    assert.equal('done\n', fs.read(dir .. '/workspace/report.txt'))
    assert.equal('solved\n', fs.read(dir .. '/run-logs/run.log'))
    assert.is_nil(fs.read(dir .. '/run-logs/x.tmp'))
    assert.matches('convention', fs.read(dir .. '/logs/artifacts/note.txt'))
    local manifest = jsonl.decode(fs.read(dir .. '/manifest.json'))
    assert.equal(3, #manifest)
    for _, e in ipairs(manifest) do assert.equal('ok', e.status) end
    -- nop: the primary metric is 0, so the trial fails though other keys have values
    local _, n = run(FIX .. '/multi-key', { solver = 'nop' })
    assert.equal('failed', n.results[1].outcome)
    assert.equal(0, n.results[1].rewards.correct)
  end)

  it('[[steps]]: each step verified; gold passes both; nop stops at the first step\'s min_reward gate', function()
    local status, s = run(FIX .. '/stepped')
    local r = s.results[1]
    assert.equal(0, status, tostring(r.error))
    assert.equal('passed', r.outcome, tostring(r.error))
    assert.equal(2, #r.steps)
    assert.equal('one', r.steps[1].name)
    assert.is_true(r.steps[1].passed)
    assert.same({ reward = 1, bonus = 1 }, r.steps[2].rewards)
    assert.same({ reward = 1, bonus = 0.5 }, r.rewards) -- per-key means over the steps (bonus absent in step one: 0)
    assert.is_nil(r.step_stop)
    local _, n = run(FIX .. '/stepped', { solver = 'nop' })
    local x = n.results[1]
    assert.equal('failed', x.outcome)
    assert.equal(1, #x.steps) -- step two never ran
    assert.same({ step = 'one', why = 'reward=0 below min_reward 1' }, x.step_stop)
    assert.same({ key = 'reward', min_reward = 1, got = 0 }, x.steps[1].gate)
  end)

  it('a phase a provider cannot hold is recorded as the trial\'s gap', function()
    local rec = {}
    local state = { lease = { sb = {} }, spec = { network = true } }
    K.network({ provider = { name = 'cloudy' }, client = {} }, state, rec, 'agent', { mode = 'allowlist', hosts = { 'a.com' }, declared = 'allowlist' })
    assert.equal("cloudy cannot filter egress by host: this phase had the sandbox's full network", rec.network.agent.gap)
    K.network({ provider = { name = 'cloudy' }, client = {} }, state, rec, 'verifier', { mode = 'no-network', hosts = {}, declared = 'no-network' })
    assert.matches('cannot take the network away for one phase', rec.network.verifier.gap)
  end)
end)

-- the allowlist, for real: needs root (the sandbox's namespaces), slirp4netns, iptables and ip
local can = sys.uid() == 0
for _, tool in ipairs({ 'slirp4netns', 'iptables-restore', 'ip', 'nsenter' }) do if not proc.which(tool) then can = false end end
describe('network_mode = "allowlist" on local', function()
  if not can then
    pending('needs root, slirp4netns, iptables, ip and nsenter')
    return
  end
  local NS = 'csengt-' .. sys.pid()
  local VETH = 'csv' .. (sys.pid() % 100000)
  local server
  local function sh(cmd)
    local r = assert(proc.run { argv = { 'bash', '-c', cmd }, timeout = 30 })
    assert(r.code == 0, cmd .. ': ' .. r.stderr)
  end
  setup(function()
    sh(string.format('ip netns add %s && ip link add %s type veth peer name %sn netns %s && ip addr add 10.211.77.1/24 dev %s'
      .. ' && ip link set %s up && ip netns exec %s sh -c "ip addr add 10.211.77.2/24 dev %sn && ip addr add 10.211.77.3/24 dev %sn'
      .. ' && ip link set %sn up && ip link set lo up"', NS, VETH, VETH, NS, VETH, VETH, NS, VETH, VETH, VETH))
    fs.write(tmp .. '/srv.lua', [[
local serve = require('cseng.serve')
local s = assert(serve.listen { host = '0.0.0.0', port = 18080, handler = function() return 200, {}, 'hello\n' end })
require('cseng.task').sleep(600)
s:close()
]])
    server = assert(proc.spawn { argv = { 'ip', 'netns', 'exec', NS, ROOT .. '/cseng', 'lua', tmp .. '/srv.lua' } })
    for _ = 1, 400 do -- until it answers on both addresses (a count of tries)
      local r = proc.run { argv = { 'bash', '-c', 'exec 3<>/dev/tcp/10.211.77.3/18080' }, timeout = 5 }
      if r and r.code == 0 then break end
      require('cseng.task').sleep(0.05)
    end
    -- the task: the agent phase may reach 10.211.77.2 only; the verifier phase nothing
    local d = tmp .. '/allowlist/probe-allowlist'
    fs.mkdir_p(d .. '/environment'); fs.mkdir_p(d .. '/solution'); fs.mkdir_p(d .. '/tests')
    fs.write(d .. '/task.toml', table.concat({ 'schema_version = "1.3"', '[environment]', 'network_mode = "no-network"',
      '[agent]', 'network_mode = "allowlist"', 'allowed_hosts = ["10.211.77.2"]', '[verifier]', 'network_mode = "no-network"', '' }, '\n'))
    fs.write(d .. '/instruction.md', 'Probe the two hosts.\n')
    fs.write(d .. '/environment/Dockerfile', 'FROM debian:bookworm\nWORKDIR /workspace\n')
    local probe = 'probe() { timeout 20 bash -c "exec 3<>/dev/tcp/$1/18080 && printf \'GET / HTTP/1.0\\r\\n\\r\\n\' >&3'
      .. ' && cat <&3" 2>/dev/null | grep -q hello && echo 1 || echo 0; }'
    fs.write(d .. '/solution/solve.sh', '#!/bin/bash\n' .. probe .. '\necho "$(probe 10.211.77.2) $(probe 10.211.77.3)" > /workspace/probe.txt\n',
      { mode = tonumber('755', 8) })
    fs.write(d .. '/tests/test.sh', '#!/bin/bash\n' .. probe .. '\nread a o < /workspace/probe.txt\nv=$(probe 10.211.77.2)\n'
      .. 'ok=0; [ "$a" = 1 ] && [ "$o" = 0 ] && [ "$v" = 0 ] && ok=1\n'
      .. 'printf \'{"reward": %d, "agent_allowed": %d, "agent_other": %d, "verifier_allowed": %d}\\n\' $ok $a $o $v > /logs/verifier/reward.json\n',
      { mode = tonumber('755', 8) })
  end)
  teardown(function()
    if server then server:close() end
    proc.run { argv = { 'bash', '-c', 'ip netns del ' .. NS .. '; ip link del ' .. VETH .. ' 2>/dev/null; true' }, timeout = 30 }
  end)

  it('the agent reaches its allowed host and not another; the verifier (no-network) reaches neither', function()
    local status, s = run(tmp .. '/allowlist', { allow_network = true })
    local r = s.results[1]
    assert.equal(0, status, tostring(r.error))
    assert.same({ reward = 1, agent_allowed = 1, agent_other = 0, verifier_allowed = 0 }, r.rewards)
    assert.equal('passed', r.outcome)
    assert.equal('allowlist', r.network.agent.mode)
    assert.equal("egress filter in the sandbox's network namespace", r.network.agent.enforced)
    assert.same({ '10.211.77.2' }, r.network.agent.allowed)
    assert.equal('no-network', r.network.verifier.mode)
    assert.is_nil(r.network.agent.gap)
  end)

  it('without --allow-network the allowlist is withheld (no network), and said so', function()
    local _, s = run(tmp .. '/allowlist')
    local r = s.results[1]
    assert.equal(0, r.rewards.agent_allowed)
    assert.equal('no-network', r.network.agent.mode)
    assert.equal('the run was not started with --allow-network', r.network.agent.withheld)
  end)
end)
