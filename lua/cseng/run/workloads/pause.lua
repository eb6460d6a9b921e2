--- The pause workload (capabilities.pause): the sandbox holds a state file naming the sample (and,
--- where the adapter declares pause_memory, a detached process counting in a file), then
---   pause_ms         pause(client, sb) sent -> its answer arrived
---   resume_ms        resume(client, sb) sent -> its answer arrived
---   resume_exec_ms   the first command after the resume (reading the state file)
---   resume_ready_ms  resume_ms + resume_exec_ms: paused -> usable again
--- After the timing: the state file must hold the sample's nonce; with pause_memory, the process
--- started before the pause must still be running (its pid alive, its counter file there).
local W = { name = 'pause', capability = 'pause', doc = 'pause a sandbox, resume it, check it kept its state' }

local DIR = '/var/tmp/cseng-pause'

function W.figures()
  return {
    { 'pause_ms', 'ms', 'pause call sent -> its answer arrived' },
    { 'resume_ms', 'ms', 'resume call sent -> its answer arrived' },
    { 'resume_exec_ms', 'ms', 'the first command after the resume: sent -> answered' },
    { 'resume_ready_ms', 'ms', 'resume_ms + resume_exec_ms: paused -> usable again' },
  }
end
function W.headline() return 'resume_ready_ms' end

function W.run(ctx)
  local P, client = ctx.p.adapter, ctx.p.client
  local memory = (P.capabilities or {}).pause_memory == true
  ctx:stage('pause_prepare')
  ctx:sh('mkdir -p ' .. DIR .. ' && echo ' .. ctx.hex .. ' > ' .. DIR .. '/state')
  local pid
  if memory then
    local r = ctx:sh('nohup sh -c \'i=0; while :; do i=$((i+1)); echo $i > ' .. DIR .. '/count; sleep 0.2; done\' '
      .. '> /dev/null 2>&1 < /dev/null & echo $!', { what = 'starting the counting process' })
    pid = tostring(r.stdout):match('(%d+)')
    ctx:check('process_started', pid ~= nil, 'a pid', r.stdout)
  end
  ctx:path('pause', 'pause + resume' .. (memory and ' (processes kept: pause_memory)' or ''))
  ctx:stage('pause')
  ctx:time('pause_ms', function() return ctx:must('EPAUSE', P.pause(client, ctx.sb)) end)
  ctx:stage('resume')
  local resume_ms = ctx:time('resume_ms', function() return ctx:must('EPAUSE', P.resume(client, ctx.sb)) end)
  -- the command must answer; what it read is checked after (a lost file is EINTACT, not EEXEC)
  local exec_ms, r = ctx:time('resume_exec_ms', function() return ctx:sh('cat ' .. DIR .. '/state', { any_exit = true }) end)
  ctx:figure('resume_ready_ms', resume_ms + exec_ms)
  ctx:stage('pause_check')
  local got = tostring(r.stdout):match('%x+')
  ctx:check('resumed_state_file', got == ctx.hex, ctx.hex, got)
  if memory then
    local alive = ctx:sh('if kill -0 ' .. pid .. ' 2>/dev/null; then echo alive; else echo gone; fi; cat ' .. DIR .. '/count',
      { any_exit = true })
    local kv = tostring(alive.stdout)
    ctx:check('resumed_process_alive', kv:match('^alive') ~= nil, 'alive', kv:match('^(%a+)'))
    ctx:check('resumed_process_counted', kv:match('\n(%d+)') ~= nil, 'a count', kv:match('\n(%S*)'))
    ctx:sh('kill ' .. pid .. ' 2>/dev/null; true')
  end
end

return W
