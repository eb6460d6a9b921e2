-- Progress as a user sees it: cseng run under a real pseudo-terminal (util-linux `script`),
-- a task run and an arena run. The live block is redrawn with real control sequences (cursor
-- up, erase below), and no control character reaches the terminal as escaped text
-- (`\x1b`, `\x0d`): the console guard and the renderer agree on what a terminal may receive.
-- Without a terminal (a pipe), the same runs print plain lines with no control sequence at all.
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local proc = require 'cseng.proc'
local util = require 'cseng.lib.util'

local ROOT = sys.root()
local CSENG = ROOT .. '/cseng'
local have_script = proc.run { argv = { 'sh', '-c', 'command -v script' } }.code == 0
local have_rootfs = fs.exists((os.getenv('CSENG_CACHE') or ((os.getenv('HOME') or '/tmp') .. '/.cache/cseng')) .. '/rootfs')

local tmp
setup(function() tmp = assert(fs.tempdir('cseng-pty')) end)
teardown(function() fs.remove_tree(tmp) end)

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
      what .. ': unexpected control sequence ESC' .. util.escape(seq))
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
    assert.matches('warmup rounds %[1/1%]', out) -- warmups are rounds in every mode, never "lockstep"
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
