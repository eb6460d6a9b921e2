-- A new run kind is one file (lua/cseng/run/kinds/<name>.lua): the frame finds it by name and runs
-- it with everything every kind shares (the log and its identity record, the sandbox ledger, the
-- worker loop, the trial's watchdog, the end and its exit status). Shown with a tiny kind written
-- to a temporary tree: nothing else in cseng is edited for it.
local fs = require('cseng.fs')
local results = require('cseng.results.log')
local frame = require('cseng.run.frame')
local H = require('spec.helpers.common')
teardown(H.remove_tempdirs)

-- Each item: a local sandbox that prints the item back; the record says what it printed.
local KIND = [==[
local frame = require('cseng.run.frame')
local K = { name = 'echoes' }
function K.open(opts) return opts, { id_parts = { 'echoes' } }, { seen = {} } end
function K.begin(F)
  local p = F:connect('local', F.opts.provider_config)
  F.k.p = p
  F:started({ kind = 'echoes', items = #F.opts.items }, frame.identity(F.opts, { kind = 'echoes', providers = { 'local' } }))
  return F.opts.items
end
function K.record(_, item) return { item = item } end
function K.trial(F, item, rec, state)
  state.lease = F.session:sandbox({ labels = {} }, { item = item }, { provider = F.k.p })
  local r = assert(F.k.p.adapter.exec(F.k.p.client, state.lease.sb, 'echo ' .. item, {}))
  rec.said = r.stdout:gsub('%s+$', '')
end
function K.settle(_, _, rec, state) if state.lease then rec.destroyed = state.lease:close().ok end end
function K.finished(F, item, rec)
  F.writer:event('echo', rec)
  F.k.seen[#F.k.seen + 1] = rec.said
end
function K.finish(F)
  F:close({ echoed = #F.k.seen })
  return frame.exit_status(F, #F.k.seen, 0), { jsonl = F.jsonl, seen = F.k.seen }
end
return K
]==]

describe('a run kind added as one file', function()
  it('runs through the frame by name: the log, the ledger, every sandbox destroyed, exit 0', function()
    local tree = H.tempdir('cseng-kind-spec-')
    assert(fs.mkdir_p(tree .. '/cseng/run/kinds'))
    assert(fs.write(tree .. '/cseng/run/kinds/echoes.lua', KIND))
    local saved = package.path
    package.path = tree .. '/?.lua;' .. package.path
    local ok, status, info = pcall(frame.run, 'echoes', { items = { 'a', 'b', 'c' }, concurrency = 2, output = tree .. '/out',
      provider_config = { root = tree .. '/sandboxes' } })
    package.path = saved
    package.loaded['cseng.run.kinds.echoes'] = nil
    assert(ok, tostring(status))
    assert.equal(0, status)
    table.sort(info.seen)
    assert.same({ 'a', 'b', 'c' }, info.seen)
    local events = results.read(info.jsonl)
    local by = {}
    for _, e in ipairs(events) do by[e.event] = (by[e.event] or 0) + 1 end
    assert.equal(1, by.run_started)
    assert.equal(3, by.allocated)
    assert.equal(3, by.destroyed)
    assert.equal(3, by.echo)
    assert.equal(1, by.run_finished)
    assert.same({}, results.live_allocations(events))
  end)

  it('an unknown kind is refused in one line naming the folder', function()
    local ok, err = pcall(frame.run, 'no_such_kind', {})
    assert.is_false(ok)
    assert.matches("unknown run kind 'no_such_kind' (lua/cseng/run/kinds/)", tostring(err.message or err), 1, true)
  end)
end)
