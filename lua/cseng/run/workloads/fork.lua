--- The fork workload (capabilities.fork): 1 -> N. The parent holds a state file naming the
--- sample; then
---   fork_ms        fork(client, sb, N, spec) sent -> its (last) answer arrived: N sandboxes exist
---   fork_ready_ms  the fork sent -> every child answered its first command (reading the state
---                  file; the children's first commands run in parallel). The allocation records
---                  written between are not counted
--- Each child must hold the parent's state file and be another sandbox than the parent, and not
--- see a file the parent writes after the fork (untimed, after fork_ready_ms); each is
--- recorded in the ledger the moment its id is known (an intent with the children's labels goes
--- first, so a lost answer is swept by label) and destroyed when the sample ends. A fork that made
--- fewer than N children (the adapter's nil, err, code, made) fails the sample: the children made
--- are recorded and destroyed, the check fork_children says how many of N arrived.
local task = require('cseng.task')
local clock = require('cseng.clock')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local W = { name = 'fork', capability = 'fork', doc = 'fork a sandbox into N, check every child holds its state' }

local DIR = '/var/tmp/cseng-fork'

function W.figures(wo)
  return {
    { 'fork_ms', 'ms', 'fork call sent -> the answer holding all ' .. wo.fork_count .. ' children arrived' },
    { 'fork_ready_ms', 'ms', 'fork call sent -> every child answered its first command (record writes not counted)' },
  }
end
function W.headline() return 'fork_ready_ms' end

function W.run(ctx)
  local P, client, p, n = ctx.p.adapter, ctx.p.client, ctx.p, ctx.wo.fork_count
  ctx:stage('fork_prepare')
  ctx:sh('mkdir -p ' .. DIR .. ' && echo ' .. ctx.hex .. ' > ' .. DIR .. '/state && sync')
  local labels = util.merge(ctx.spec.labels, { ['cseng.create'] = crypto.hex(crypto.random_bytes(8)),
    ['cseng.session'] = ctx.F.session.nonce, ['cseng.fork_of'] = ctx.sb.id })
  if not ctx.F.writer:intent(p.name, labels, { adapter = p.adapter_name }) then
    errors.raise(errors.ELOG, 'not forking: the intent record could not be written')
  end
  ctx:stage('fork')
  ctx:path('fork', 'fork (' .. n .. ' children)')
  local t0 = clock.now()
  local kids, err, code, made = P.fork(client, ctx.sb, n, util.merge(ctx.spec, { labels = labels }))
  local t1 = clock.answered(t0)
  ctx.state.windows[#ctx.state.windows + 1] = { t0, t1 }
  ctx:figure('fork_ms', (t1 - t0) / 1e6)
  local leases = {}
  for _, sb in ipairs(kids or made or {}) do leases[#leases + 1] = ctx:derived(sb, labels) end
  if not kids then
    -- a partial fork (some children made, others failed) is a failed sample, never a clean one
    -- with fewer children: its check says how many of n there were, its error which failed and why
    ctx.rec.checks.fork_children = { ok = false, want = n, got = #(made or {}) }
    error(errors.returned(err, code, { default_code = errors.EFORK }), 0)
  end
  ctx:check('fork_children', #kids == n, n, #kids)
  if kids[1] and kids[1].code_path then ctx:path('fork', 'fork (' .. n .. ' children): ' .. kids[1].code_path) end
  ctx:stage('fork_ready')
  local answers, last = {}, t1
  local tasks = {}
  local t_rec = clock.now() -- record writes between the fork's answer and the first commands: not counted
  for i, l in ipairs(leases) do
    tasks[i] = task.spawn(function()
      local r = ctx:sh('cat ' .. DIR .. '/state', { sb = l.sb })
      answers[i] = tostring(r.stdout):match('%x+')
      local at = clock.answered(t_rec)
      if at > last then last = at end
    end)
  end
  local failure
  for _, t in ipairs(tasks) do
    local ok, e = t:join()
    if not ok and not failure then failure = e end
  end
  if failure then error(failure, 0) end
  ctx:figure('fork_ready_ms', (t1 - t0 + (last - t_rec)) / 1e6)
  ctx:stage('fork_check')
  local same, distinct = 0, 0
  for i, l in ipairs(leases) do
    if answers[i] == ctx.hex then same = same + 1 end
    if l.sb.id ~= ctx.sb.id then distinct = distinct + 1 end
  end
  ctx:check('fork_children_hold_the_state', same == n, n, same)
  ctx:check('fork_children_are_new_sandboxes', distinct == n, n, distinct)
  -- a child holds the parent's files as they were at the fork, not a view of them: a file the
  -- parent writes now must not appear in any child
  ctx:sh('echo ' .. ctx.hex .. ' > ' .. DIR .. '/later && sync')
  local apart = 0
  for _, l in ipairs(leases) do
    local r = ctx:sh('test -e ' .. DIR .. '/later && echo shared || echo apart', { sb = l.sb })
    if util.trim(r.stdout) == 'apart' then apart = apart + 1 end
  end
  ctx:check('fork_children_without_later_files', apart == n, n, apart)
  for _, l in ipairs(leases) do ctx:close(l) end
end

return W
