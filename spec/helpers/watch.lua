--- What the watch specs share (spec/watch/watch_spec.lua, spec/watch/regression_spec.lua,
--- spec/watch/prometheus_spec.lua): a startup plan without pauses against a loopback lizard fake,
--- `cseng watch` started as users start it (its own process, the fake's environment), its journal
--- and store read back, and polls whose verdict is a condition, never the time they took.
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local results = require('cseng.results.log')
local common = require('spec.helpers.common')

local W = {}

W.ROOT, W.CSENG = common.ROOT, common.CSENG

--- A startup plan in dir: one provider (lizard), `samples` measured rounds after one warmup, no
--- pause between rounds. Returns its path.
function W.plan(dir, samples)
  local path = fs.join(dir, 'wspec.lua')
  assert(fs.write(path, string.format([[
local plan = require('cseng.run.plan')
return plan.startup {
  name = 'wspec', providers = { 'lizard' }, samples = %d, warmups = 1, seed = 7, pause_seconds = 0,
  command = [=[python3 -c "print('arena-startup-ready-20261001')"]=], expect = 'arena-startup-ready-20261001',
  cleanup_backoff = { 0.05, 0.05 }, sandbox = { template = 'base' },
}
]], samples or 12)))
  return path
end

--- Start `cseng watch args...` in its own process with the fake's environment; output in dir.
--- Returns the process and the paths of its stdout and stderr.
function W.start(dir, args, env)
  local argv = { W.CSENG, 'watch' }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local out, err = fs.join(dir, 'watch.out'), fs.join(dir, 'watch.err')
  local p = assert(proc.spawn { argv = argv, cwd = W.ROOT, env_add = env, stdout = out, stderr = err })
  return p, out, err
end

--- The events of a watch's journal (none when it does not exist yet).
function W.journal(dir, name)
  local path = fs.join(dir, 'watches', name .. '.jsonl')
  if not fs.exists(path) then return {} end
  local ok, ev = pcall(results.read, path)
  return ok and ev or {}
end

--- The journal's `slot` events of one status.
function W.slots(events, status)
  local out = {}
  for _, e in ipairs(events) do if e.event == 'slot' and e.status == status then out[#out + 1] = e end end
  return out
end

--- Poll until cond() holds, at most n tries 50 ms apart (default 2400: two generous minutes).
function W.until_true(cond, n) return common.until_true(cond, n or 2400) end

--- Count the lines of a file holding a string.
function W.count(path, s)
  local n = 0
  for line in ((fs.exists(path) and fs.read(path)) or ''):gmatch('[^\n]+') do
    if line:find(s, 1, true) then n = n + 1 end
  end
  return n
end

--- The pids of pid's children (/proc).
function W.children(pid)
  local out = {}
  local text = fs.read(string.format('/proc/%d/task/%d/children', pid, pid)) or ''
  for c in text:gmatch('%d+') do out[#out + 1] = tonumber(c) end
  return out
end

--- A copy of list with more values after it.
function W.with(list, ...)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  for _, v in ipairs({ ... }) do out[#out + 1] = v end
  return out
end

--- Wait for a process to end; its exit code.
function W.wait(p, seconds)
  local r = p:wait(seconds or 300)
  assert(r, 'the watch did not end')
  return r.code
end

return W
