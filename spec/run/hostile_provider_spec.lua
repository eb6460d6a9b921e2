-- Reliability under a hostile provider: a planted key reaches no output, lost create
-- answers leave no sandbox behind, signals interrupt running Lua, an auth failure stops a task
-- run, a huge response is refused while it arrives, bad plan fields and control characters.
-- Every case is a fault-injecting fake (spec/providers/lizard/fake.lua) or a crafted input.
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local serve = require('cseng.serve')
local crypto = require('cseng.crypto')
local http = require('cseng.http')
local results = require('cseng.results.log')
local frame = require('cseng.run.frame')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local adapter = require('providers.shared.adapter')

local H = require('spec.helpers.runlog')
local ROOT, CSENG = H.ROOT, H.CSENG
local lizard_fake = require('spec.fakes').module('lizard')

local tmp = H.tempdir('cseng-reliability')
teardown(H.remove_tempdirs)

local function write(name, text) return H.write(tmp, name, text) end

-- Every file under dir (recursively), as path -> content.
local function files_under(dir, out)
  out = out or {}
  for _, name in ipairs(fs.list(dir) or {}) do
    local p = dir .. '/' .. name
    local st = fs.stat(p)
    if st and st.type == 'directory' then files_under(p, out)
    elseif st then out[p] = fs.read(p) or '' end
  end
  return out
end

-- Where the key, or any 8-byte run of it, appears in text: a list of "what: fragment".
local function leaks(key, texts)
  local found = {}
  for what, text in pairs(texts) do
    for i = 1, #key - 7 do
      local frag = key:sub(i, i + 7)
      if text:find(frag, 1, true) then found[#found + 1] = what .. ': ' .. frag; break end
    end
  end
  table.sort(found)
  return found
end

local free_port, smoke_count = H.free_port, H.smoke_count

describe('redaction', function()
  it('finds every 8-byte run of a secret, before any cut, and leaves other text alone', function()
    local key = 'rk_' .. crypto.hex(crypto.random_bytes(12))
    secrets.add(key)
    assert.equal('a [redacted] b', secrets.redact('a ' .. key .. ' b'))
    -- what a 300-byte snippet kept of it before: the first 18 bytes; a tail keeps the last 9
    assert.equal('x [redacted]', secrets.redact('x ' .. key:sub(1, 18)))
    assert.equal('[redacted] y', secrets.redact(key:sub(-9) .. ' y'))
    assert.equal('ok ' .. key:sub(1, 7), secrets.redact('ok ' .. key:sub(1, 7))) -- 7 bytes say nothing
    assert.equal('nothing secret here, at all', secrets.redact('nothing secret here, at all'))
    local body = string.rep('x', 290) .. key .. string.rep('y', 50)
    assert.same({}, leaks(key, { snippet = adapter.snippet(body) }))
    assert.same({}, leaks(key, { tail = util.tail(secrets.redact(body), 40) }))
  end)

  it('keeps a planted key out of the console, the status endpoint, records and reports', function()
    local key = 'lzk_' .. crypto.hex(crypto.random_bytes(14)) -- 32 bytes, planted below
    local status_bodies = {}
    local port = free_port()
    -- the fake echoes the key in every command's output and every error body; the readiness
    -- command of the arena prints it instead of the marker; on its second exec it reads the
    -- arena's status endpoint (the first sample's error is in last_error by then)
    -- (only while the startup run is the one running: the stop run sends the same command, and
    -- which of the fake's execs fail is counted over every run, so the startup run's share of the
    -- probes depends on how many calls the task runs made)
    local probes, phase = 0, nil
    local f = lizard_fake.start { api_key = key, echo_key = true,
      exec = function(cmd)
        if cmd:find('arena-secret-probe', 1, true) then
          if phase == 'startup' then probes = probes + 1 end
          if phase == 'startup' and (probes == 2 or probes == 3) then
            local res, e1, e2 = http.request { url = 'http://127.0.0.1:' .. port .. '/status', timeout = 10 }
            status_bodies[#status_bodies + 1] = res and res.body or ('ERR ' .. tostring(e1) .. ' ' .. tostring(e2))
          end
          return 0, 'the key is ' .. key .. '\n', 'stderr has ' .. key .. '\n'
        end
        return 0, 'out ' .. key .. '\n', 'err ' .. key .. '\n'
      end,
      exec_status = function(n) return n % 7 == 3 and 500 or nil end }
    local ok, err = pcall(function()
      local env_file = write('secrets.env', 'LIZARD_API_KEY=' .. key .. '\n')
      local out = tmp .. '/leak'
      local cfg = string.format('{ api_url = %q, project_id = %q }', f.url, f.project_id)
      local tasks_plan = write('leak-tasks.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = 'leak', provider = 'lizard', dataset = %q, solver = 'gold', concurrency = 2,
  task_limit = 4, cleanup_backoff = { 0, 0 }, provider_config = %s }
]], ROOT .. '/data/smoke.jsonl', cfg))
      local startup_plan = write('leak-startup.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.startup { name = 'leak', providers = { 'lizard' }, samples = 3, warmups = 0, seed = 1,
  command = 'echo arena-secret-probe', expect = 'never-printed', cleanup_backoff = { 0, 0 },
  provider_config = { lizard = %s } }
]], cfg))
      local stop_plan = write('leak-stop.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.startup { name = 'leakstop', providers = { 'lizard' }, samples = 2, warmups = 1, seed = 1,
  command = 'echo arena-secret-probe', expect = 'never-printed', cleanup_backoff = { 0, 0 },
  provider_config = { lizard = %s } }
]], cfg))
      local texts = {}
      local runs = {
        { 'tasks', { CSENG, 'run', tasks_plan, '--env-file', env_file, '--output', out .. '/tasks' } },
        { 'tasks-quiet', { CSENG, 'run', tasks_plan, '--env-file', env_file, '--output', out .. '/quiet', '--quiet' } },
        { 'startup', { CSENG, 'run', startup_plan, '--env-file', env_file, '--output', out .. '/startup',
          '--status-port', tostring(port) } },
        { 'stop', { CSENG, 'run', stop_plan, '--env-file', env_file, '--output', out .. '/stop' } },
      }
      for _, r in ipairs(runs) do
        phase = r[1]
        local res = assert(proc.run { argv = r[2], cwd = ROOT, timeout = 300, env_add = { LIZARD_API_KEY = '' } })
        texts[r[1] .. ' stdout'] = res.stdout
        texts[r[1] .. ' stderr'] = res.stderr
      end
      -- the stop run really stopped on readiness and said so on stderr
      assert.matches('warmup readiness failed', texts['stop stderr'])
      -- a task run's report, and cleanup of its log
      local logs = {}
      for p in pairs(files_under(out .. '/tasks')) do if p:match('%.jsonl$') then logs[#logs + 1] = p end end
      assert.equal(1, #logs)
      local rep = assert(proc.run { argv = { CSENG, 'report', logs[1], '--output', out .. '/tasks/report.md' }, cwd = ROOT, timeout = 120 })
      texts['report stdout'], texts['report stderr'] = rep.stdout, rep.stderr
      local cl = assert(proc.run { argv = { CSENG, 'cleanup', logs[1], '--env-file', env_file }, cwd = ROOT, timeout = 120 })
      texts['cleanup stdout'], texts['cleanup stderr'] = cl.stdout, cl.stderr
      for p, text in pairs(files_under(out)) do texts[p] = text end
      assert.is_true(#status_bodies >= 1, 'the status endpoint was read during the run')
      for i, b in ipairs(status_bodies) do
        texts['status ' .. i] = b
        assert.matches('last_error', b)
      end
      -- the key was really planted: the fake saw it on every request, records hold [redacted]
      local all = table.concat((function() local t = {} for _, v in pairs(texts) do t[#t + 1] = v end return t end)())
      assert.matches('%[redacted%]', all)
      assert.same({}, leaks(key, texts))
    end)
    f.close()
    if not ok then error(err, 0) end
  end)
end)

describe('lost create answers', function()
  local KINDS = { 'reset', 'malformed', 'noid', 'hang' }
  -- every 5th create (20%) makes the sandbox, then loses its answer, cycling through the kinds
  local function lossy(n) return n % 5 == 0 and KINDS[(n // 5 - 1) % #KINDS + 1] or nil end

  local function run_lizard(f, o)
    local opts = util.merge({
      provider = 'lizard', dataset = ROOT .. '/data/smoke.jsonl', solver = 'gold', mode = 'cold', concurrency = 2,
      output = tmp .. '/lost', quiet = true, cleanup_backoff = { 0, 0 },
      provider_config = f.config { request_timeout = 3 },
    }, o)
    local _, info = frame.run('tasks', opts)
    return info
  end

  it('leaves 0 live sandboxes after the run: each lost one is found by its label and destroyed', function()
    local f = lizard_fake.start { lose_create = lossy, hang_seconds = 60 }
    local ok, err = pcall(function()
      local info = run_lizard(f)
      local st = f.stats()
      -- one create per task, and one more per reset on a reused connection: libcurl sends the
      -- POST again on a fresh one (so that lost sandbox has a twin that answered)
      assert.is_true(st.creates >= smoke_count(), 'one create per task')
      assert.is_true(st.lost >= 4, 'every kind of loss happened: ' .. tostring(st.lost))
      assert.equal(0, st.live)
      assert.equal(st.created, st.destroyed)
      local reclaimed = 0
      for _, e in ipairs(results.read(info.jsonl)) do
        if e.event == 'destroyed' and (e.reason == 'lost_create' or e.reason == 'reconciled') then reclaimed = reclaimed + 1 end
      end
      assert.equal(st.lost, reclaimed)
      assert.same({}, results.live_allocations(results.read(info.jsonl)))
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('when listing fails during the run, `cseng cleanup RUN.jsonl` finds them by the run label', function()
    local f = lizard_fake.start { lose_create = lossy, hang_seconds = 60, list_status = 503 }
    local ok, err = pcall(function()
      local info = run_lizard(f, { output = tmp .. '/lost2' })
      local st = f.stats()
      assert.is_true(st.lost >= 4)
      assert.equal(st.lost, st.live, 'the lost ones outlived the run (the fake would not list)')
      f.set { list_status = false }
      local env_file = write('lost.env', 'LIZARD_API_KEY=' .. f.api_key .. '\nLIZARD_PROJECT_ID=' .. f.project_id ..
        '\nLIZARD_API_URL=' .. f.url .. '\n')
      local cleanup = require('cseng.cli.commands.cleanup')
      local status = cleanup.run { info.jsonl, '--env-file', env_file }
      assert.equal(0, status)
      assert.equal(0, f.stats().live)
      local reclaimed = 0
      for _, e in ipairs(results.read(info.jsonl)) do
        if e.event == 'destroyed' and e.reason == 'reconciled' then reclaimed = reclaimed + 1 end
      end
      assert.equal(st.lost, reclaimed)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('reclaims only its own lost sandbox: another session of the same run keeps its sandbox', function()
    local session = require('cseng.run.session')
    local f = lizard_fake.start { lose_create = function(n) return n == 2 and 'noid' or nil end }
    local ok, err = pcall(function()
      local opts = { output = tmp .. '/two', cleanup_backoff = { 0, 0 } }
      local a = session.open { kind = 'tasks', opts = opts, run_id = 'run-shared', jsonl = tmp .. '/two/a.jsonl' }
      local b = session.open { kind = 'tasks', opts = opts, run_id = 'run-shared', jsonl = tmp .. '/two/b.jsonl' }
      a:connect('lizard', f.config()); b:connect('lizard', f.config())
      local lease = a:sandbox({ labels = { ['cseng.run'] = 'run-shared' } }) -- create 1: kept by a
      local bok, berr = pcall(b.sandbox, b, { labels = { ['cseng.run'] = 'run-shared' } }) -- create 2: lost
      assert.is_false(bok)
      assert.equal('EPROTO', berr.code)
      assert.equal(1, f.stats().live, 'the lost one was destroyed at once')
      assert.is_not_nil(f.sandbox(lease.id), "a's sandbox is untouched")
      assert.equal(0, b:reconcile(), "b's end-of-run sweep leaves a's sandbox alone")
      assert.is_not_nil(f.sandbox(lease.id))
      lease:close()
      assert.equal(0, f.stats().live)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('every create carries the run label and its own create label (lizard: metadata)', function()
    local f = lizard_fake.start {}
    local ok, err = pcall(function()
      local info = run_lizard(f, { task_limit = 1, output = tmp .. '/labels' })
      local meta = f.stats().last_create.metadata
      assert.equal(info.run_id, meta['cseng.run'])
      assert.matches('^%x+$', meta['cseng.create'])
    end)
    f.close()
    if not ok then error(err, 0) end
  end)
end)

describe('signals', function()
  local function spawn_script(name, body)
    local path = write(name .. '.lua', body)
    local out, errf = tmp .. '/' .. name .. '.out', tmp .. '/' .. name .. '.err'
    local p = assert(proc.spawn { argv = { CSENG, 'lua', path, tmp .. '/' .. name .. '.marker' }, stdout = out, stderr = errf })
    return p, tmp .. '/' .. name .. '.marker', errf
  end
  local function wait_for(path)
    for _ = 1, 600 do -- a generous 60 s
      if fs.exists(path) then return true end
      task.sleep(0.1)
    end
    return false
  end

  it('SIGINT stops `while true do end`, runs the cleanup, and exits 130', function()
    local p, marker, errf = spawn_script('spin', [[
local fs = require('cseng.fs')
local marker = arg[1]
local _ <close> = setmetatable({}, { __close = function() fs.write(marker .. '.cleanup', 'ran') end })
fs.write(marker, 'spinning')
while true do end
]])
    assert.is_true(wait_for(marker))
    assert.is_true(p:kill('INT'))
    local r = p:wait(60)
    if not r then p:kill('KILL'); p:wait() end
    assert.is_table(r, 'exited after SIGINT')
    assert.equal(130, r.code)
    assert.equal('ran', fs.read(marker .. '.cleanup'))
    assert.matches('interrupted', fs.read(errf))
  end)

  it('SIGTERM too, inside a spawned task (status 143)', function()
    local p, marker = spawn_script('spin_task', [[
local fs = require('cseng.fs')
local task = require('cseng.task')
local marker = arg[1]
local t = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() fs.write(marker .. '.cleanup', 'ran') end })
  fs.write(marker, 'spinning')
  local x = 0
  while true do x = x + 1 end
end)
t:join()
]])
    assert.is_true(wait_for(marker))
    assert.is_true(p:kill('TERM'))
    local r = p:wait(60)
    if not r then p:kill('KILL'); p:wait() end
    assert.is_table(r)
    assert.equal(143, r.code) -- 128 + SIGTERM
    assert.equal('ran', fs.read(marker .. '.cleanup'))
  end)

  it('a second SIGINT exits at once, even while Lua code spins in a stuck cleanup', function()
    local p, marker, errf = spawn_script('stuck', [[
local fs = require('cseng.fs')
local marker = arg[1]
local _ <close> = setmetatable({}, { __close = function()
  fs.write(marker .. '.first', 'seen')
  while true do end -- a cleanup that never ends
end })
fs.write(marker, 'spinning')
while true do end
]])
    assert.is_true(wait_for(marker))
    assert.is_true(p:kill('INT'))
    assert.is_true(wait_for(marker .. '.first'))
    assert.is_true(p:kill('INT'))
    local r = p:wait(60)
    if not r then p:kill('KILL'); p:wait() end
    assert.is_table(r)
    assert.equal(130, r.code)
    assert.matches('interrupted again', fs.read(errf))
  end)
end)

describe('stop rules', function()
  it('a 401 mid-run stops a task run from allocating, and says so under --quiet', function()
    local f = lizard_fake.start { create_status = function(n) return n == 2 and 401 or nil end }
    local ok, err = pcall(function()
      local plan_file = write('auth.lua', string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = 'auth', provider = 'lizard', dataset = %q, concurrency = 1,
  cleanup_backoff = { 0, 0 }, provider_config = { api_url = %q, api_key = %q, project_id = %q } }
]], ROOT .. '/data/smoke.jsonl', f.url, f.api_key, f.project_id))
      local r = assert(proc.run { argv = { CSENG, 'run', plan_file, '--quiet', '--output', tmp .. '/auth' }, cwd = ROOT, timeout = 300 })
      assert.equal(1, r.code)
      assert.matches('stopped allocating: authentication failed %(HTTP_401%)', r.stderr)
      assert.equal(2, f.stats().creates, 'no create after the 401')
      assert.equal(0, f.stats().live)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('a 401 on delete is not retried and stops as auth; a Retry-After is passed back to the session', function()
    local session = require('cseng.run.session')
    local f = lizard_fake.start { delete_status = 401 }
    local ok, err = pcall(function()
      local s = session.open { kind = 'tasks', opts = { output = tmp .. '/del', cleanup_backoff = { 0, 0 } }, id_parts = { 'del' } }
      s:connect('lizard', f.config())
      local lease = s:sandbox({ labels = { ['cseng.run'] = s.id } })
      local r = lease:close()
      assert.is_false(r.ok)
      assert.equal(1, r.attempts)
      assert.equal(1, f.stats().deletes)
      assert.matches('authentication failed', s:stop_reason())
    end)
    f.close()
    if not ok then error(err, 0) end
    -- Retry-After: adapter.deleted hands the response to the session
    local res = { status = 503, headers = { ['retry-after'] = '0' } }
    local a, b, c, d = adapter.deleted(nil, 'busy', 'HTTP_503', res)
    assert.is_nil(a); assert.equal('busy', b); assert.equal('HTTP_503', c); assert.equal(res, d)
  end)

  it('a transient 503 on the first warmup exec is a failed warmup, not a readiness verdict', function()
    local readiness = 0
    local f = lizard_fake.start { exec_status = function(_, cmd)
      if cmd and cmd:find('arena-startup-ready', 1, true) then
        readiness = readiness + 1
        if readiness == 1 then return 503 end
      end
      return nil
    end }
    local ok, err = pcall(function()
      local status, info = frame.run('startup', { providers = { 'lizard' }, provider_config = { lizard = f.config() },
        samples = 2, warmups = 2, seed = 1, quiet = true, output = tmp .. '/warm503', cleanup_backoff = { 0, 0 },
        stderr = { write = function() end } })
      assert.equal(0, status, info.stop and info.stop.message)
      assert.is_nil(info.stop)
      local warm_failed, measured_ok = 0, 0
      for _, e in ipairs(results.read(info.jsonl)) do
        if e.event == 'startup_trial' and e.warmup and not e.ok then warm_failed = warm_failed + 1; assert.equal('HTTP_503', e.error_code) end
        if e.event == 'startup_trial' and not e.warmup and e.ok then measured_ok = measured_ok + 1 end
      end
      assert.equal(1, warm_failed)
      assert.equal(2, measured_ok)
      assert.equal(0, f.stats().live)
    end)
    f.close()
    if not ok then error(err, 0) end
  end)

  it('DNS failures and refusals are not transient; resets, timeouts and 5xx are', function()
    assert.is_false(adapter.is_transient('ENOTFOUND'))
    assert.is_false(adapter.is_transient('HTTP_401'))
    assert.is_false(adapter.is_transient('HTTP_404'))
    for _, c in ipairs({ 'HTTP_503', 'HTTP_500', 'ECONNRESET', 'ETIMEDOUT' }) do assert.is_true(adapter.is_transient(c), c) end
    for _, c in ipairs({ 'HTTP_401', 'HTTP_403', 'GRPC_UNAUTHENTICATED', 'GRPC_PERMISSION_DENIED' }) do assert.is_true(adapter.is_auth(c), c) end
  end)
end)

describe('limits', function()
  it('refuses a 50 MB response while it arrives, without a large RSS', function()
    local big = string.rep('z', 1 << 20)
    local srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function(req)
      req:start(200, { ['Content-Type'] = 'application/json' })
      for _ = 1, 50 do req:write(big) end
      req:finish()
    end })
    local url = srv:url()
    local script = write('big.lua', string.format([[
local adapter = require('providers.shared.adapter')
local function rss()
  local s = io.open('/proc/self/status'):read('a')
  return tonumber(s:match('VmRSS:%%s*(%%d+)'))
end
local before = rss()
local data, msg, code = adapter.request('bigfake', 'GET', %q, {})
print(tostring(data), code, msg)
print('rss_growth_kb', rss() - before)
]], url .. '/big'))
    local r = assert(proc.run { argv = { CSENG, 'lua', script }, timeout = 120 })
    srv:close()
    assert.equal(0, r.code, r.stderr)
    assert.matches('nil\tEBODY\tbigfake: GET ' .. url:gsub('%p', '%%%0') .. '/big: response body larger than 33554432 bytes', r.stdout)
    local growth = tonumber(r.stdout:match('rss_growth_kb\t(%-?%d+)'))
    assert.is_true(growth < 48 * 1024, 'RSS grew by ' .. tostring(growth) .. ' KiB (the cap is 32 MiB)')
  end)

  it('refuses nan, negative and huge task.toml timeouts, naming the file and field', function()
    local dataset = require('cseng.workload.dataset')
    for _, v in ipairs({ 'nan', '-1', '1e12', 'inf', '0' }) do
      local ok, e = pcall(dataset.config, '[verifier]\ntimeout_sec = ' .. v .. '\n', 'tasks/x')
      assert.is_false(ok, v)
      assert.matches('^tasks/x: task.toml verifier.timeout_sec: expected', e)
    end
  end)

  it('checks every plan field with one line naming the file and field', function()
    local cases = {
      { 'plan.tasks { concurrency = 0 }', 'concurrency: expected a whole number >= 1, got 0' },
      { "plan.tasks { concurrency = 'four' }", 'concurrency: expected a whole number >= 1, got "four"' },
      { "plan.matrix { providers = 'local' }", 'providers: expected a list of strings' },
      { "plan.startup { samples = 'five' }", 'samples: expected a whole number >= 1, got "five"' },
      { 'plan.tasks { timeout_seconds = -1 }', 'timeout_seconds: expected seconds' },
      { 'plan.tasks { timeout_seconds = 0/0 }', 'timeout_seconds: expected seconds' },
      { 'plan.startup { exec_timeout_seconds = 1e99 }', 'exec_timeout_seconds: expected seconds' },
      { "plan.tasks { quiet = 'yes' }", 'quiet: expected true or false' },
    }
    for i, c in ipairs(cases) do
      local p = write('bad' .. i .. '.lua', "local plan = require 'cseng.run.plan'\nreturn " .. c[1] .. '\n')
      local r = assert(proc.run { argv = { CSENG, 'run', p }, cwd = ROOT, timeout = 60 })
      assert.equal(2, r.code, c[1])
      assert.equal('cseng: ' .. p .. ': ' .. c[2], r.stderr:match('^[^\n]*'):sub(1, #('cseng: ' .. p .. ': ' .. c[2])), c[1])
      assert.equal(1, select(2, r.stderr:gsub('\n', '')), 'one line: ' .. r.stderr)
    end
    local p = write('tableerr.lua', "error({ code = 'EX', message = 'a table error' })\n")
    local r = assert(proc.run { argv = { CSENG, 'run', p }, cwd = ROOT, timeout = 60 })
    assert.equal('cseng: ' .. p .. ': a table error\n', r.stderr)
    assert.not_matches('table: 0x', r.stderr)
  end)

  it('escapes control characters in what reaches the terminal', function()
    local p = write('ctl.lua', [[
io.stderr:write('id \27[2J\rcseng: all tasks passed\n')
io.stdout:write('name \27]0;title\7 \r\27[K', 'csv a,b\r\n')
error({ code = 'EX', message = 'entry \27[31mred\27[0m\rforged' })
]])
    local r = assert(proc.run { argv = { CSENG, 'lua', p }, timeout = 60 })
    assert.equal('id \\x1b[2J\\x0dcseng: all tasks passed\n', r.stderr:match('^[^\n]*\n'))
    assert.not_matches('\27%[2J', r.stderr)
    assert.not_matches('\27%[31m', r.stderr)
    assert.matches('entry \\x1b%[31mred\\x1b%[0m\\x0dforged', r.stderr)
    assert.equal('name \\x1b]0;title\\x07 \r\27[Kcsv a,b\r\n', r.stdout)
  end)
end)
