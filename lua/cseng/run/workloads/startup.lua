--- The startup workload: nothing after the first command. The sample is the arena's create ->
--- first command -> destroy, its figure ready_ms = create_ms + first_exec_ms (docs/ARENA.md).
local W = { name = 'startup', doc = 'create a sandbox and run its first command (time to interactive)' }

function W.figures() return { { 'ready_ms', 'ms', 'create call sent -> the first command\'s answer arrived' } } end
function W.headline() return 'ready_ms' end

return W
