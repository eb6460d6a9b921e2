--- The snapshot workload (capabilities.snapshot): for each size (--sizes, ascending), the sandbox
--- holds a file of that size (made inside from /dev/urandom, not timed) and a state file naming
--- the sample; then
---   snapshot_<size>_ms  snapshot(client, sb, key, {fresh = true}) sent -> its answer arrived
---                       (a new artifact from the sandbox as it is now, never one found by key)
---   restore_<size>_ms   create from the artifact sent -> its answer arrived, plus its first
---                       command (reading the state file) sent -> answered; the allocation
---                       record written between them is not counted (as the arena's ready_ms)
--- The restored sandbox must hold the state file and a file whose sha256 and size are the
--- original's (checked after the timing); it is destroyed, then the artifact is deleted
--- (delete_artifact, snapshot_delete_<size>_ms). The original sandbox runs on between sizes.
local crypto = require('cseng.crypto')
local clock = require('cseng.clock')
local workloads = require('cseng.run.workloads')

local W = { name = 'snapshot', capability = 'snapshot',
  doc = 'snapshot a sandbox holding a file of each size, restore it, check the restored files' }

local DIR = '/var/tmp/cseng-snapshot'

function W.figures(wo)
  local out = {}
  for _, b in ipairs(wo.sizes) do
    local n = workloads.size_name(b)
    out[#out + 1] = { 'snapshot_' .. n .. '_ms', 'ms', 'snapshot call sent -> its answer arrived (' .. n .. ' written before)' }
    out[#out + 1] = { 'restore_' .. n .. '_ms', 'ms', 'create from the snapshot + its first command (' .. n .. ')' }
    out[#out + 1] = { 'restore_create_' .. n .. '_ms', 'ms', 'create from the snapshot alone (' .. n .. ')' }
    out[#out + 1] = { 'snapshot_delete_' .. n .. '_ms', 'ms', 'delete_artifact of that snapshot' }
  end
  return out
end
function W.headline(wo) return 'restore_' .. workloads.size_name(wo.sizes[#wo.sizes]) .. '_ms' end

function W.run(ctx)
  local P, client = ctx.p.adapter, ctx.p.client
  ctx:sh('mkdir -p ' .. DIR .. ' && echo ' .. ctx.hex .. ' > ' .. DIR .. '/state')
  for i, b in ipairs(ctx.wo.sizes) do
    local n = workloads.size_name(b)
    ctx:stage('snapshot_prepare')
    local want = ctx:random_file(DIR .. '/blob', b, { sync = true, what = 'writing the snapshot\'s file' })
    ctx:stage('snapshot')
    local key = crypto.sha256_hex(ctx.hex .. '/' .. i):sub(1, 24)
    local _, artifact = ctx:time('snapshot_' .. n .. '_ms', function()
      return ctx:must('ESNAPSHOT', P.snapshot(client, ctx.sb, key, { fresh = true }))
    end)
    ctx:path('snapshot', 'snapshot (fresh) + create with warm_artifact + delete_artifact')
    local restored_ok, rerr = pcall(function()
      ctx:stage('restore')
      local times = {}
      local lease = ctx:sandbox({ warm_artifact = artifact }, times)
      local create_ms = (times.create_end - times.create_start) / 1e6
      ctx:figure('restore_create_' .. n .. '_ms', create_ms)
      local exec_ms, r = ctx:time(nil, function() return ctx:sh('cat ' .. DIR .. '/state', { sb = lease.sb }) end)
      ctx:figure('restore_' .. n .. '_ms', create_ms + exec_ms)
      ctx:stage('restore_check')
      ctx:check('restore_' .. n .. '_state', tostring(r.stdout):match('%x+') == ctx.hex, ctx.hex, tostring(r.stdout):match('%x+'))
      local got, size = ctx:file_sum(DIR .. '/blob', { sb = lease.sb, what = 'the restored file' })
      ctx:check('restore_' .. n .. '_bytes', size == b, b, size)
      ctx:check('restore_' .. n .. '_sha256', got == want, want, got)
      ctx:close(lease)
    end)
    ctx:stage('snapshot_delete')
    local t0 = clock.now()
    local dok, derr, dcode = P.delete_artifact(client, artifact)
    ctx:figure('snapshot_delete_' .. n .. '_ms', (clock.answered(t0) - t0) / 1e6)
    if not restored_ok then error(rerr, 0) end
    ctx:must('ESNAPSHOT', dok, derr, dcode)
  end
end

return W
