-- `cseng watch` as a service meets it: killed with SIGKILL in the middle of a run (with its run),
-- then started again: the slot is cleaned up and run again, no slot has two runs and none is lost,
-- and the store kept current equals the one rebuilt from the logs; SIGTERM inside a run stops the
-- run by its own rules and the next start finishes the slot, SIGTERM between runs stops at once;
-- one watch of a name per folder; a slot that passes while a run overruns is recorded as missed;
-- a command line it cannot run is refused before anything starts. Verdicts are counts and states.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local jsonl = require('cseng.lib.jsonl')
local store = require('cseng.history.store')

local root = sys.root()
local H = require('spec.helpers.common')
local W = require('spec.helpers.watch')
local HH = require('spec.helpers.history')
local lizard = require('spec.fakes').module('lizard')
teardown(H.remove_tempdirs)

-- startup_trial records in a log
local function trials_in(path) return W.count(path, '"event":"startup_trial"') end

local function log_of_slot(dir, events, status)
  local s = W.slots(events, status)
  return s[#s] and fs.join(dir, s[#s].file) or nil
end

describe('cseng watch', function()
  it('killed with SIGKILL mid-run and started again: no slot lost, none run twice, the store as rebuilt', function()
    local dir = H.tempdir('cseng-watch-kill-')
    local fake = lizard.start { latency = { create = 0.02 } }
    local plan = W.plan(dir, 20)
    local args = { plan, '--every', '1s', '--max-late', '1s', '--output', dir, '--min-window', '2', '--window', '4', '--hold', '2' }
    local p = W.start(dir, W.with(args, '--runs', '3'), fake.env())
    -- the second slot's run, part way through
    local target
    assert(W.until_true(function()
      local started = W.slots(W.journal(dir, 'wspec'), 'started')
      target = started[2] and fs.join(dir, started[2].file)
      return target and trials_in(target) >= 3
    end), 'the second run did not start')
    local child = W.children(p:pid())
    assert.equal(1, #child)
    sys.kill(child[1], 'KILL')
    sys.kill(p:pid(), 'KILL')
    p:wait(60)
    assert.equal(0, W.count(target, '"event":"run_finished"'))
    local live_after_kill = fake.stats().live
    assert.is_true(live_after_kill >= 0)
    -- started again: the cut run is cleaned up and its slot run again, then one more slot
    local p2 = W.start(dir, W.with(args, '--runs', '2'), fake.env())
    assert.equal(0, W.wait(p2, 300), fs.read(fs.join(dir, 'watch.err')))
    local st = fake.stats()
    fake.close()
    assert.equal(0, st.live) -- nothing the killed run made outlived it
    local j = W.journal(dir, 'wspec')
    local abandoned = W.slots(j, 'abandoned')
    assert.equal(1, #abandoned)
    assert.equal(fs.basename(target), abandoned[1].file)
    local finished = W.slots(j, 'finished')
    assert.equal(3, #finished)
    local slots = {}
    for _, e in ipairs(finished) do
      assert.is_nil(slots[e.slot], 'slot ' .. e.slot .. ' finished twice')
      slots[e.slot] = e
    end
    assert.equal(2, slots[abandoned[1].slot].attempt)
    local S = assert(store.open(dir))
    local runs = S:judged_runs('watch:wspec')
    assert.equal(3, #runs)
    for _, r in ipairs(runs) do assert.truthy(r.run_id) end
    assert.equal(1, S:one('SELECT superseded FROM runs WHERE file = ?', fs.basename(target)).superseded)
    assert.is_nil(HH.rebuild_diff(S))
    S:close()
  end)

  it('stops on SIGTERM inside a run as the run stops, and the next start finishes that slot', function()
    local dir = H.tempdir('cseng-watch-term-')
    local fake = lizard.start { latency = { create = 0.02 } }
    local args = { W.plan(dir, 40), '--every', '1s', '--max-late', '1s', '--output', dir }
    local p = W.start(dir, W.with(args, '--runs', '2'), fake.env())
    local log
    assert(W.until_true(function()
      log = log_of_slot(dir, W.journal(dir, 'wspec'), 'started')
      return log and trials_in(log) >= 2
    end))
    p:kill('TERM')
    assert.equal(143, W.wait(p, 120))
    assert.equal(1, W.count(log, '"status":"interrupted"'))
    local j = W.journal(dir, 'wspec')
    assert.equal(1, #W.slots(j, 'interrupted'))
    assert.equal('signal', j[#j].reason)
    local p2 = W.start(dir, W.with(args, '--runs', '1'), fake.env())
    assert.equal(0, W.wait(p2, 300), fs.read(fs.join(dir, 'watch.err')))
    -- nothing the stopped run made outlives its slot (a create the stop cut short may still have
    -- made one on the provider after the run's own sweep: the slot's cleanup found it by label)
    assert.equal(0, fake.stats().live)
    fake.close()
    j = W.journal(dir, 'wspec')
    local fin = W.slots(j, 'finished')
    assert.equal(1, #fin)
    assert.equal(W.slots(j, 'interrupted')[1].slot, fin[1].slot)
    assert.equal(2, fin[1].attempt) -- an arena run cannot resume: cleaned up, then run again
  end)

  it('stops on SIGTERM between runs at once, and refuses a second watch of its name', function()
    local dir = H.tempdir('cseng-watch-lock-')
    local fake = lizard.start { latency = { create = 0.005 } }
    -- the current hourly slot runs at once (--max-late 1h), then the watch waits for the next
    local args = { W.plan(dir, 3), '--every', '1h', '--max-late', '1h', '--output', dir }
    local p = W.start(dir, args, fake.env())
    assert(W.until_true(function() return #W.slots(W.journal(dir, 'wspec'), 'finished') == 1 end))
    local second = H.cseng(W.with({ 'watch' }, table.unpack(args)), { env = fake.env(), timeout = 60 })
    assert.equal(1, second.code)
    assert.matches('watch wspec is already running on ' .. dir:gsub('%p', '%%%0') .. ' %(pid %d+%)', second.stderr)
    p:kill('TERM')
    assert.equal(143, W.wait(p, 60))
    fake.close()
    local j = W.journal(dir, 'wspec')
    assert.same({ 'watch_stopped', 'signal', 1 }, { j[#j].event, j[#j].reason, j[#j].runs })
    assert.equal(0, #W.slots(j, 'interrupted'))
  end)

  it('records a slot that passed while a run overran as missed, and every slot once', function()
    local dir = H.tempdir('cseng-watch-missed-')
    -- 6 creates of 0.3 s: a run holds the fake at least 1.8 s, so a 1 s slot after it is late by
    -- more than --max-late 0.5s whatever the machine's speed
    local fake = lizard.start { latency = { create = 0.3 } }
    local p = W.start(dir, { W.plan(dir, 5), '--every', '1s', '--max-late', '0.5s', '--output', dir, '--runs', '2' }, fake.env())
    assert.equal(0, W.wait(p, 300), fs.read(fs.join(dir, 'watch.err')))
    fake.close()
    local j = W.journal(dir, 'wspec')
    local seen, first, last = {}, math.huge, -1
    local function see(k, what)
      assert.is_nil(seen[k], 'slot ' .. k .. ' is ' .. tostring(seen[k]) .. ' and ' .. what)
      seen[k] = what
      first, last = math.min(first, k), math.max(last, k)
    end
    local missed = 0
    for _, e in ipairs(j) do
      if e.event == 'slot' and e.status == 'finished' then see(e.slot, 'finished')
      elseif e.event == 'slots_missed' then
        assert.equal('busy', e.reason)
        for k = e.first, e.last do see(k, 'missed'); missed = missed + 1 end
      end
    end
    assert.is_true(missed >= 1)
    for k = first, last do assert.truthy(seen[k], 'slot ' .. k .. ' is not accounted for') end
    assert.equal(2, #W.slots(j, 'finished'))
  end)

  it('--once runs the slot that is due and exits, and a second --once finds none due', function()
    local dir = H.tempdir('cseng-watch-once-')
    local fake = lizard.start { latency = { create = 0.005 } }
    local args = { 'watch', W.plan(dir, 3), '--every', '1h', '--max-late', '1h', '--once', '--output', dir }
    local r1 = H.cseng(args, { env = fake.env(), timeout = 120 })
    local r2 = H.cseng(args, { env = fake.env(), timeout = 120 })
    fake.close()
    assert.equal(0, r1.code, r1.stderr)
    assert.equal(0, r2.code, r2.stderr)
    assert.equal(1, #W.slots(W.journal(dir, 'wspec'), 'finished'))
    assert.matches('%-%-once: no slot is due', r2.stdout)
  end)

  it('ships a systemd unit and Kubernetes manifests that run it as the docs say', function()
    local unit = assert(fs.read(fs.join(root, 'deploy/systemd/cseng-watch.service')))
    assert.matches('\nExecStart=/opt/cseng/cseng watch ', unit)
    assert.matches('\nKillMode=mixed\n', unit) -- SIGTERM to the watch alone: it stops its run
    assert.matches('\nTimeoutStopSec=%d+', unit)
    local check = [[
import sys, yaml
docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]
kinds = {d['kind'] for d in docs}
dep = next(d for d in docs if d['kind'] == 'Deployment')
assert dep['spec']['replicas'] == 1 and dep['spec']['strategy']['type'] == 'Recreate'
c = dep['spec']['template']['spec']['containers'][0]
assert c['command'][:2] == ['tini', '--'] and c['args'][0] == 'watch', c
assert c['args'][c['args'].index('--metrics-port') + 1] == str(c['ports'][0]['containerPort'])
cron = next(d for d in docs if d['kind'] == 'CronJob')
assert cron['spec']['concurrencyPolicy'] == 'Forbid'
cc = cron['spec']['jobTemplate']['spec']['template']['spec']['containers'][0]
assert '--once' in cc['args'] and cc['args'][0] == 'watch'
claim = next(d for d in docs if d['kind'] == 'PersistentVolumeClaim')
assert claim['spec']['accessModes'] == ['ReadWriteOnce']
print(' '.join(sorted(kinds)))
]]
    local r = assert(require('cseng.proc').run { argv = { 'python3', '-c', check, fs.join(root, 'deploy/kubernetes/cseng-watch.yaml'),
      fs.join(root, 'deploy/kubernetes/cseng-watch-cronjob.yaml') }, timeout = 60 })
    assert.equal(0, r.code, r.stderr)
    assert.equal('CronJob Deployment PersistentVolumeClaim Secret Service\n', r.stdout)
    -- the arguments the manifests pass are ones cseng watch takes
    local h = H.cseng({ 'watch', '--help' }, { timeout = 30 }).stdout .. H.cseng({ 'run', '--help' }, { timeout = 30 }).stdout
    for _, f in ipairs({ 'deploy/kubernetes/cseng-watch.yaml', 'deploy/kubernetes/cseng-watch-cronjob.yaml' }) do
      for flag in (fs.read(fs.join(root, f)) or ''):gmatch('"%-%-([%w-]+)"') do
        assert.truthy(h:find('--' .. flag, 1, true), f .. ': --' .. flag)
      end
    end
  end)

  it('refuses a command line it cannot run, before anything starts', function()
    local dir = H.tempdir('cseng-watch-usage-')
    local plan = W.plan(dir, 3)
    local cases = {
      { { plan }, '--every DURATION is needed' },
      { { plan, '--every', '0s' }, '--every must be from 1s to 366d' },
      { { plan, '--every', 'soon' }, 'not a duration: "soon"' },
      { { plan, '--every', '1h', '--jitter', '2h' }, '--jitter must be under --every' },
      { { plan, '--every', '1h', '--resume', 'x.jsonl' }, '--resume is not a watch option' },
      { { plan, '--every', '1h', '--evry', '1h' }, "unknown option '--evry'; did you mean --every?" },
      { { plan, '--every', '1h', '--samples', 'many' }, '--samples: expected a whole number' },
      { { plan, '--every', '1h', '--name', '../x' }, '--name ../x' },
      { { plan, '--every', '1h', '--hold', '0' }, '--hold: expected a whole number >= 1' },
      { { plan, '--every', '1h', '--min-change', 'lots' }, '--min-change: expected a fraction or a percentage' },
      { { root .. '/plans/matrix.lua', '--every', '1h' }, 'a matrix plan cannot be watched' },
    }
    for _, c in ipairs(cases) do
      local r = H.cseng({ 'watch', table.unpack(c[1]) }, { timeout = 60 })
      assert.equal(2, r.code, jsonl.encode(c[1]) .. ': ' .. r.stderr)
      assert.truthy(r.stderr:find(c[2], 1, true), jsonl.encode(c[1]) .. ': ' .. r.stderr)
    end
    assert.is_false(fs.exists(fs.join(root, 'results/watches/wspec.jsonl')))
  end)
end)
