--- What the run-log and cleanup specs (spec/run/reclaim_spec.lua, spec/results/log_spec.lua,
--- spec/engine/serve_limits_spec.lua) share: files under a temporary directory, event counts, and a
--- poll whose verdict is a condition, never the time it took. Not a spec itself: load it with
---   local H = require 'spec.helpers.runlog'
local fs = require('cseng.fs')
local util = require('cseng.lib.util')
local common = require('spec.helpers.common')

local H = {}

-- the checkout, the binary and the temporary directories of spec.helpers.common: a spec file
-- makes its scratch directory with `local tmp = H.tempdir(prefix)` and calls
-- teardown(H.remove_tempdirs)
H.ROOT, H.CSENG = common.ROOT, common.CSENG
H.tempdir, H.remove_tempdirs = common.tempdir, common.remove_tempdirs

--- Write text to dir/name (directories made), return the path.
function H.write(dir, name, text)
  local p = dir .. '/' .. name
  assert(fs.mkdir_p(util.dirname(p)))
  assert(fs.write(p, text))
  return p
end

--- A free loopback port (a listener opened on port 0 and closed).
function H.free_port()
  local serve = require('cseng.serve')
  local srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = function() return 200, {}, '' end })
  local port = srv:port()
  srv:close()
  return port
end

--- How many events of this kind.
function H.count(events, kind)
  local n = 0
  for _, e in ipairs(events) do if e.event == kind then n = n + 1 end end
  return n
end

--- Poll until cond() holds, at most n tries 50 ms apart (default 1200: a generous minute).
H.until_true = common.until_true

--- The rows of the bundled smoke dataset.
function H.smoke_count()
  local n = 0
  for line in (fs.read(H.ROOT .. '/data/smoke.jsonl') or ''):gmatch('[^\n]+') do if line:find('%S') then n = n + 1 end end
  return n
end

--- A lizard task plan (spec/providers/lizard/fake.lua's f) written to dir/name; fields is Lua source
--- of further plan fields.
function H.lizard_plan(dir, name, f, fields)
  return H.write(dir, name, string.format([[
local plan = require('cseng.run.plan')
return plan.tasks { name = %q, provider = 'lizard', dataset = %q, solver = 'gold', cleanup_backoff = { 0, 0 },
  provider_config = { api_url = %q, project_id = %q, request_timeout = 3600 }, %s }
]], name:gsub('%.lua$', ''), H.ROOT .. '/data/smoke.jsonl', f.url, f.project_id, fields or ''))
end

return H
