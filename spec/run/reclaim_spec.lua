-- Reclaiming after a crash: a run killed with SIGKILL while every
-- create is still unanswered leaves an `intent` record per create, and `cseng cleanup RUN.jsonl`
-- alone then finds and destroys every sandbox by the run's labels, for a task log (`provider`)
-- and an arena log (`providers`); several sandboxes may carry one create label (a POST curl
-- sent again); provider strings are bounded where they enter the session.
-- The provider is the fault-injecting Lizard fake (spec/providers/lizard/fake.lua), held in this
-- process while the run is a child process, so the kill takes only the run.
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local results = require('cseng.results.log')
local session = require('cseng.run.session')

local H = require('spec.helpers.runlog')
local ROOT, CSENG = H.ROOT, H.CSENG
local lizard_fake = require('spec.fakes').module('lizard')

local tmp = H.tempdir('cseng-reliability3')
teardown(H.remove_tempdirs)

local function write(name, text) return H.write(tmp, name, text) end
local count, until_true = H.count, H.until_true

local function env_file(f, name)
  return write(name, 'LIZARD_API_KEY=' .. f.api_key .. '\n')
end

-- Run argv as a child, wait until the fake holds `want` unanswered creates, then kill -9 it.
local function kill_mid_create(f, argv, want)
  local p = assert(proc.spawn { argv = argv, cwd = ROOT, stdout = 'null', stderr = tmp .. '/killed.err' })
  local held = until_true(function() return f.stats().creates >= want end)
  p:kill('KILL')
  p:wait()
  assert.is_true(held, 'the run sent its creates: ' .. tostring(fs.read(tmp .. '/killed.err')))
end

local function cleanup(log, envf)
  return assert(proc.run { argv = { CSENG, 'cleanup', log, '--env-file', envf }, cwd = ROOT, timeout = 120 })
end

describe('kill -9 before any create was answered', function()
  it('a task run: each create has an intent record, and `cseng cleanup RUN.jsonl` alone leaves 0 live', function()
    local f = lizard_fake.start { lose_create = function() return 'hang' end, hang_seconds = 3600 }
    local ok, err = pcall(function()
      local plan = H.lizard_plan(tmp, 'kill-tasks.lua', f, 'concurrency = 4, task_limit = 4')
      local envf = env_file(f, 'kill.env')
      local log = tmp .. '/kill/tasks.jsonl'
      kill_mid_create(f, { CSENG, 'run', plan, '--output', log, '--quiet', '--env-file', envf }, 4)
      local st = f.stats()
      assert.equal(4, st.live, 'every create made its sandbox, and no answer came')
      local events = results.read(log)
      assert.equal(0, count(events, 'allocated'))
      assert.equal(4, count(events, 'intent'))
      for _, e in ipairs(events) do
        if e.event == 'intent' then
          assert.equal('lizard', e.provider)
          assert.matches('^%x+$', e.labels['cseng.create'])
          assert.equal(events[1].run_id, e.labels['cseng.run'])
        end
      end
      local r = cleanup(log, envf)
      assert.equal(0, r.code, r.stderr)
      assert.equal(0, f.stats().live, r.stdout .. r.stderr)
      assert.matches('4 destroyed, 0 failed', r.stdout)
      -- and what it destroyed is recorded: the log now says nothing is live
      events = results.read(log)
      assert.same({}, results.live_allocations(events))
      assert.equal(4, count(events, 'destroyed'))
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('a task run: `--resume RUN.jsonl` sweeps them the same way before it goes on', function()
    local f = lizard_fake.start { lose_create = function(n) return n <= 4 and 'hang' or nil end, hang_seconds = 3600 }
    local ok, err = pcall(function()
      local plan = H.lizard_plan(tmp, 'resume-tasks.lua', f, 'concurrency = 4, task_limit = 4')
      local envf = env_file(f, 'resume.env')
      local log = tmp .. '/kill/resume.jsonl'
      kill_mid_create(f, { CSENG, 'run', plan, '--output', log, '--quiet', '--env-file', envf }, 4)
      assert.equal(4, f.stats().live)
      local r = assert(proc.run { argv = { CSENG, 'run', plan, '--resume', log, '--quiet', '--env-file', envf },
        cwd = ROOT, timeout = 300 })
      assert.equal(0, r.code, r.stderr)
      assert.equal(0, f.stats().live)
      local events = results.read(log)
      assert.equal(4, #results.trials(events))
      local reconciled = 0
      for _, e in ipairs(events) do
        if e.event == 'destroyed' and e.reason == 'reconciled' then reconciled = reconciled + 1 end
      end
      assert.equal(4, reconciled, 'the four the killed run never heard of')
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('an arena run (its log names `providers`, one renamed): cleanup sweeps each of them', function()
    local a = lizard_fake.start { lose_create = function() return 'hang' end, hang_seconds = 3600 }
    local b = lizard_fake.start { lose_create = function() return 'hang' end, hang_seconds = 3600, api_key = a.api_key }
    local ok, err = pcall(function()
      local plan = write('kill-arena.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.startup { name = 'killarena', providers = { 'lizard', 'lizard-eu' }, samples = 2, warmups = 0, seed = 1,
  command = 'echo hi', expect = 'hi', cleanup_backoff = { 0, 0 },
  provider_config = { lizard = { api_url = %q, project_id = %q, request_timeout = 3600 },
    ['lizard-eu'] = { adapter = 'lizard', api_url = %q, project_id = %q, request_timeout = 3600 } } }
]], a.url, a.project_id, b.url, b.project_id))
      local envf = env_file(a, 'arena.env')
      local log = tmp .. '/kill/arena.jsonl'
      local p = assert(proc.spawn { argv = { CSENG, 'run', plan, '--output', log, '--quiet', '--env-file', envf },
        cwd = ROOT, stdout = 'null', stderr = tmp .. '/arena.err' })
      local held = until_true(function() return a.stats().creates >= 1 and b.stats().creates >= 1 end)
      p:kill('KILL')
      p:wait()
      assert.is_true(held, tostring(fs.read(tmp .. '/arena.err')))
      local live = a.stats().live + b.stats().live
      assert.is_true(live >= 2)
      local events = results.read(log)
      assert.equal(0, count(events, 'allocated'))
      local r = cleanup(log, envf)
      assert.equal(0, r.code, r.stderr)
      assert.equal(0, a.stats().live, r.stdout .. r.stderr)
      assert.equal(0, b.stats().live, r.stdout .. r.stderr)
      assert.matches(live .. ' destroyed, 0 failed', r.stdout)
    end)
    a.close(); b.close()
    if not ok then error(err, 0) end
  end)
end)

describe('several sandboxes under one create label', function()
  it('a lost create with a twin: both are reclaimed at once', function()
    local f = lizard_fake.start { lose_create = function(n) return n == 1 and 'noid' or nil end,
      twin_create = function(n) return n == 1 end }
    local ok, err = pcall(function()
      local s = session.open { kind = 'tasks', opts = { cleanup_backoff = { 0, 0 } }, run_id = 'twins-1',
        jsonl = tmp .. '/twins/a.jsonl' }
      s:connect('lizard', f.config())
      local cok = pcall(s.sandbox, s, { labels = { ['cseng.run'] = 'twins-1' } })
      assert.is_false(cok)
      assert.equal(1, f.stats().twins)
      assert.equal(0, f.stats().live, 'the sandbox and its twin were both destroyed')
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('an answered create with a twin, then the process dies: cleanup destroys both', function()
    local f = lizard_fake.start { twin_create = function(n) return n == 1 end }
    local ok, err = pcall(function()
      local log = tmp .. '/twins/b.jsonl'
      local s = session.open { kind = 'tasks', opts = { cleanup_backoff = { 0, 0 } }, run_id = 'twins-2', jsonl = log }
      s.writer:event('run_started', { provider = 'lizard', provider_config = f.config() }, true)
      s:connect('lizard', f.config())
      local lease = s:sandbox({ labels = { ['cseng.run'] = 'twins-2' } })
      assert.equal(2, f.stats().live)
      s.writer:close() -- as if the process ended here: the lease is never closed
      local status = require('cseng.cli.commands.cleanup').run { log, '--env-file', env_file(f, 'twins.env') }
      assert.equal(0, status)
      assert.equal(0, f.stats().live)
      assert.is_nil(f.sandbox(lease.id))
    end)
    f.close()
    if not ok then error(err, 0) end
  end)
end)

describe('provider strings are bounded where they enter', function()
  it('a 5 MB sandbox id is refused naming the provider and field, destroyed, and never recorded', function()
    local lizard = require('providers.lizard')
    local f = lizard_fake.start {}
    local ok, err = pcall(function()
      local log = tmp .. '/huge/a.jsonl'
      local s = session.open { kind = 'tasks', opts = { cleanup_backoff = { 0, 0 } }, run_id = 'huge-1', jsonl = log }
      local p = s:connect('lizard', f.config())
      local huge = string.rep('x', 5 * 1024 * 1024)
      local destroyed = {}
      p.adapter = setmetatable({
        create = function(client, spec)
          local sb, e, c = lizard.create(client, spec)
          if not sb then return nil, e, c end
          destroyed.real = sb.id
          return { id = huge, real = sb.id }
        end,
        destroy = function(client, sb)
          destroyed[#destroyed + 1] = #sb.id
          return lizard.destroy(client, { id = sb.real })
        end,
      }, { __index = lizard })
      local cok, cerr = pcall(s.sandbox, s, { labels = { ['cseng.run'] = 'huge-1' } })
      assert.is_false(cok)
      assert.equal('EBADRESPONSE', cerr.code)
      assert.equal('lizard: create answered a sandbox id of 5242880 bytes (sandbox.id: at most 512)', cerr.message)
      assert.same({ 5242880 }, { destroyed[1] })
      assert.equal(0, f.stats().live)
      local size = fs.stat(log).size
      assert.is_true(size < 4096, 'the log stays small: ' .. size)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)
end)
