-- SIGINT/SIGTERM: the engine cancels every task so its cleanup (to-be-closed variables) runs.
local proc = require 'cseng.proc'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'

local CSENG = sys.root() .. '/cseng'

local function script(body)
  local dir = assert(fs.tempdir('cseng-signal'))
  local path = dir .. '/s.lua'
  assert(fs.write(path, body))
  return dir, path
end

describe('signals', function()
  it('runs a to-be-closed close (which may yield) on Ctrl-C, then exits 130', function()
    local dir, path = script([[
local task = require 'cseng.task'
local fs = require 'cseng.fs'
local sys = require 'cseng.sys'
local out = arg[1]
local worker = task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function()
    task.sleep(0.05) -- cleanup may do I/O
    fs.write(out, 'closed')
  end })
  task.sleep(60)
end)
task.sleep(0.1)
sys.kill(sys.pid(), 'INT')
worker:join()
task.sleep(60)
]])
    local out = dir .. '/out'
    local r = assert(proc.run { argv = { CSENG, 'lua', path, out }, timeout = 30 })
    assert.equal(130, r.code)
    assert.equal('closed', fs.read(out))
    assert.matches('interrupted', r.stderr)
    fs.remove_tree(dir)
  end)

  it('exits at once with 130 on a second SIGINT', function()
    local dir, path = script([[
local task = require 'cseng.task'
local sys = require 'cseng.sys'
task.spawn(function()
  local _ <close> = setmetatable({}, { __close = function() task.sleep(60) end }) -- a stuck cleanup
  task.sleep(60)
end)
task.sleep(0.1)
sys.kill(sys.pid(), 'INT')
pcall(task.sleep, 0.3) -- the first interrupt cancels this sleep
sys.kill(sys.pid(), 'INT')
task.sleep(60)
]])
    local r = assert(proc.run { argv = { CSENG, 'lua', path }, timeout = 30 })
    assert.equal(130, r.code)
    assert.is_false(r.timed_out)
    assert.is_true(r.elapsed < 10)
    assert.matches('interrupted again', r.stderr)
    fs.remove_tree(dir)
  end)
end)
