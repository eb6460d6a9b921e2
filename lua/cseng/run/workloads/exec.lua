--- The exec workload: command round trips after the first one, in the running sandbox. Each of
--- exec_count commands (`echo` of a marker of its own) is timed from the adapter's exec call to
--- the arrival of its answer; the sample's figure is their median (its min and max beside it),
--- so one sample is one value whatever the count. Each answer must carry its own marker.
local stats = require('cseng.lib.stats')

local W = { name = 'exec', doc = 'command round trips after the first command' }

function W.figures()
  return {
    { 'exec_rtt_ms', 'ms', 'median over the sample\'s commands: exec call sent -> its answer arrived' },
    { 'exec_rtt_min_ms', 'ms', 'the fastest of the sample\'s commands' },
    { 'exec_rtt_max_ms', 'ms', 'the slowest of the sample\'s commands' },
  }
end
function W.headline() return 'exec_rtt_ms' end

function W.run(ctx)
  ctx:stage('exec')
  local times, answered = {}, 0
  for i = 1, ctx.wo.exec_count do
    local marker = string.format('cseng-exec-%s-%d', ctx.hex:sub(1, 8), i)
    local ms, res = ctx:time(nil, function() return ctx:sh('echo ' .. marker) end)
    times[#times + 1] = ms
    for line in tostring(res.stdout or ''):gmatch('[^\r\n]+') do
      if line == marker then answered = answered + 1; break end
    end
  end
  ctx:check('answers_with_their_marker', answered == ctx.wo.exec_count, ctx.wo.exec_count, answered)
  local s = stats.summary(times)
  ctx:figure('exec_rtt_ms', s.p50)
  ctx:figure('exec_rtt_min_ms', s.min)
  ctx:figure('exec_rtt_max_ms', s.max)
  ctx:path('exec', 'exec')
end

return W
