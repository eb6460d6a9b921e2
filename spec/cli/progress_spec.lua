-- Progress as a user sees it: cseng run under a real pseudo-terminal (util-linux `script`),
-- a task run and an arena run. The live block is redrawn with real control sequences (cursor
-- up, erase below), and no control character reaches the terminal as escaped text
-- (`\x1b`, `\x0d`): the console guard and the renderer agree on what a terminal may receive.
-- Without a terminal (a pipe), the same runs print plain lines with no control sequence at all.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local util = require('cseng.lib.util')
local console = require('cseng.lib.console')
local H = require('spec.helpers.common')

local ROOT, CSENG = H.ROOT, H.CSENG
local have_script = proc.run { argv = { 'sh', '-c', 'command -v script' } }.code == 0
local have_rootfs = fs.exists((os.getenv('CSENG_CACHE') or ((os.getenv('HOME') or '/tmp') .. '/.cache/cseng')) .. '/rootfs')

local tmp = H.tempdir('cseng-pty')
teardown(H.remove_tempdirs)

-- Run argv under a pty of 120 columns; returns what the terminal received and the exit code.
local function under_pty(argv, name)
  local log = tmp .. '/' .. name .. '.typescript'
  local cmd = 'stty cols 120 rows 40 2>/dev/null; exec ' .. util.shell_join(argv)
  local r = proc.run { argv = { 'script', '-q', '-e', '-f', '-c', cmd, log }, cwd = ROOT, timeout = 240,
    env_add = { TERM = 'xterm-256color' } }
  return fs.read(log) or '', r.code
end

local function plain(argv)
  local r = proc.run { argv = argv, cwd = ROOT, timeout = 240 }
  return (r.stdout or '') .. (r.stderr or ''), r.code
end

local function assert_terminal_clean(text, what)
  -- no control character escaped into text (the symptom: "\x0d\x1b[3A\x1b[J" printed literally)
  assert.is_nil(text:find('\\x1b', 1, true), what .. ': an escape sequence was printed as text')
  assert.is_nil(text:find('\\x0d', 1, true), what .. ': a carriage return was printed as text')
  -- and every ESC that did reach the terminal is one of the renderer's own sequences
  for seq in text:gmatch('\27(%[?[%d;]*.)') do
    assert.is_truthy(seq:match('^%[%d*[AJK]$') or seq:match('^%[%?[%d;]*[hl]$'),
      what .. ': unexpected control sequence ESC' .. console.escape(seq))
  end
end

local describe_pty = (have_script and have_rootfs) and describe or pending
describe_pty('progress under a pseudo-terminal', function()
  it('a task run redraws its live block with real control sequences, none as text', function()
    local out, code = under_pty({ CSENG, 'run', 'plans/cold-gold.lua', '--provider', 'local', '--concurrency', '2',
      '--tasks', 'awk-fixed-width-to-csv,bash-fix-linecount-script,bash-template-render', '--output', tmp .. '/tasks' }, 'tasks')
    assert.equal(0, code, out)
    assert_terminal_clean(out, 'task run')
    assert.matches('\27%[%d+A\27%[J', out) -- the live block was erased and redrawn in place
    assert.matches('3/3 done', out)
    assert.matches('trials 3: 3 passed, 0 failed, 0 errors', out)
  end)

  it('an arena run redraws its status line the same way', function()
    local out, code = under_pty({ CSENG, 'run', 'plans/startup.lua', '--providers', 'local', '--samples', '4',
      '--warmups', '1', '--seed', '7', '--output', tmp .. '/arena' }, 'arena')
    assert.equal(0, code, out)
    assert_terminal_clean(out, 'arena run')
    assert.matches('\27%[%d+A\27%[J', out)
    assert.matches('measured lockstep %[4/4%]', out)
    assert.matches('warmup %[1/1%]', out) -- warmups are labelled warmups in every mode, never "lockstep"
  end)

  it('an interrupted task run keeps its notice on screen, clears the live block, says what is left and how to resume', function()
    local task = require('cseng.task')
    local out_dir = tmp .. '/int'
    local log = tmp .. '/int.typescript'
    local argv = { CSENG, 'run', 'plans/cold-gold.lua', '--provider', 'local', '--concurrency', '2',
      '--tasks', 'awk-fixed-width-to-csv,csv-sales-report,sqlite-top-customers,shell-backup-rotation,regex-redact-logs',
      '--output', out_dir }
    local p = assert(proc.spawn { argv = { 'script', '-q', '-e', '-f', '-c',
      'stty cols 160 rows 40 2>/dev/null; exec ' .. util.shell_join(argv), log }, cwd = ROOT,
      env_add = { TERM = 'xterm-256color' } })
    -- a trial in flight: its line in the live block (two spaces, the task id, its phase)
    local text = ''
    for _ = 1, 6000 do
      text = fs.read(log) or ''
      if text:find('\n  %S+%s+%a[%w_]*%s+%d+%.%ds') then break end
      task.sleep(0.02)
    end
    assert.matches('\n  %S+%s+%a[%w_]*%s+%d+%.%ds', text, nil, 'no trial was in flight: ' .. text)
    local child = assert(proc.run { argv = { 'pgrep', '-P', tostring(p:pid()) } }).stdout:match('%d+')
    assert(sys.kill(assert(tonumber(child), 'the cseng process under script'), 'INT'))
    local w = p:wait(240)
    local out = fs.read(log) or ''
    assert.equal(130, w.code, out)
    assert_terminal_clean(out, 'interrupted run')
    -- the notice counts trials, not the engine's tasks, and the block was erased just before it
    local at, n = out:match('\27%[%d+A\27%[J()cseng: interrupted: stopping the (%d+) trials? in flight')
    assert.is_truthy(at, 'the notice right after the live block was erased:\n' .. out)
    assert.is_true(tonumber(n) >= 1 and tonumber(n) <= 2, n .. ' trials in flight at concurrency 2')
    assert.is_nil(out:find('cancelling %d+ task', 1), 'the engine\'s own line (coroutines) was printed')
    -- nothing drawn after it can move the cursor up over it: the block is gone for good
    local after = out:sub(at)
    assert.is_nil(after:find('\27%[%d+A'), 'a redraw after the notice:\n' .. after)
    local left, total = after:match('cseng: (%d+) of (%d+) trials not run; finish the run with:')
    assert.equal('5', total, after)
    assert.is_true(tonumber(left) >= 1)
    local resume = after:match('\n  ([^\r\n]+%-%-resume [^\r\n]+)')
    assert.is_string(resume, after)
    local jsonl = after:match('open them: %S+ view (%S+%.jsonl)')
    assert.is_string(jsonl, after)
    assert.equal(util.shell_join(argv) .. ' --resume ' .. jsonl, resume)
    -- the command finishes the run: every task recorded once, none interrupted twice
    local r = proc.run { argv = { 'sh', '-c', resume .. ' --quiet' }, cwd = ROOT, timeout = 600 }
    assert.equal(0, r.code, r.stderr)
    local seen = {}
    for line in assert(fs.read(jsonl)):gmatch('[^\n]+') do
      local id = line:match('"event":"trial"') and line:match('"task_id":"([^"]+)"')
      if id then
        assert.is_nil(seen[id], id .. ' recorded twice')
        seen[id] = true
      end
    end
    local ids = {}
    for id in pairs(seen) do ids[#ids + 1] = id end
    assert.equal(5, #ids)
  end)

  it('an arena run between two providers ends with the comparison', function()
    local plan_file = tmp .. '/two.lua'
    assert(fs.write(plan_file, [[
local plan = require('cseng.run.plan')
return plan.startup { name = 'two', providers = { 'a', 'b' }, samples = 6, warmups = 1, seed = 11,
  provider_config = { a = { adapter = 'local' }, b = { adapter = 'local' } } }
]]))
    local out, code = under_pty({ CSENG, 'run', plan_file, '--output', tmp .. '/two' }, 'two')
    assert.equal(0, code, out)
    assert_terminal_clean(out, 'arena run')
    local line = out:match('\n(%a is %d+%.%d%d x faster than %a %[95%% CI %d+%.%d%d, %d+%.%d%d%] %(ready_ms medians%))\r?\n')
      or out:match('\n(%a and %a are not distinguishable %[95%% CI %d+%.%d%d, %d+%.%d%d%] %(ready_ms medians%))\r?\n')
    assert.is_string(line, out)
    -- after the table, before the command that opens the run
    local t_at, l_at, v_at = out:find('provider%s+ok/n'), out:find(line, 1, true), out:find('open them: ')
    assert.is_true(t_at < l_at and l_at < v_at, out)
    -- the report says the same, first
    local md = assert(fs.read(assert(out:match('report: (%S+%.md)'))))
    assert.matches('^# Sandbox startup: a vs b\n\n## Answer\n\n%- %*%*' .. line:gsub(' %(ready_ms medians%)$', ''):gsub('%p', '%%%0'), md)
  end)

  it('without a terminal the same runs print plain lines and no control sequence', function()
    local out, code = plain({ CSENG, 'run', 'plans/cold-gold.lua', '--provider', 'local',
      '--tasks', 'awk-fixed-width-to-csv', '--output', tmp .. '/plain' })
    assert.equal(0, code, out)
    assert.is_nil(out:find('\27', 1, true), 'a control sequence went to a pipe')
    assert.is_nil(out:find('\\x1b', 1, true))
    assert.matches('%[1/1%] awk%-fixed%-width%-to%-csv', out)
  end)
end)
