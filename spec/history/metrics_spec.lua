-- OpenMetrics (lua/cseng/history/metrics.lua): the exposition as the format writes it (TYPE,
-- UNIT, HELP, counters' _total, cumulative buckets with +Inf, _count and _sum, escaped label
-- values, # EOF), and the collector of run logs: the store's samples, counted once however often
-- a log is fed, a torn last line left until it is whole, and nothing from a hostile line as a label.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local metrics = require('cseng.history.metrics')
local extract = require('cseng.history.extract')

local H = require('spec.helpers.common')
local HH = require('spec.helpers.history')
teardown(H.remove_tempdirs)

describe('OpenMetrics', function()
  it('writes the exposition the format defines', function()
    local R = metrics.registry()
    local c = R:counter('cseng_x', 'Things, by kind.', { 'kind' })
    local g = R:gauge('cseng_y_seconds', 'A time.', { 'w' }, 'seconds')
    local h = R:histogram('cseng_z_seconds', 'Latency\nwith a newline.', { 'p' }, { 0.01, 0.1, 1 })
    c:inc({ kind = 'b' }, 2)
    c:inc({ kind = 'a"\\\nz' })
    g:set({ w = 'one' }, 1.25)
    for _, v in ipairs({ 0.005, 0.05, 0.05, 2 }) do h:observe({ p = 'lizard' }, v) end
    assert.equal(table.concat({
      '# TYPE cseng_x counter',
      '# HELP cseng_x Things, by kind.',
      'cseng_x_total{kind="a\\"\\\\\\nz"} 1',
      'cseng_x_total{kind="b"} 2',
      '# TYPE cseng_y_seconds gauge',
      '# UNIT cseng_y_seconds seconds',
      '# HELP cseng_y_seconds A time.',
      'cseng_y_seconds{w="one"} 1.25',
      '# TYPE cseng_z_seconds histogram',
      '# UNIT cseng_z_seconds seconds',
      '# HELP cseng_z_seconds Latency\\nwith a newline.',
      'cseng_z_seconds_bucket{p="lizard",le="0.01"} 1',
      'cseng_z_seconds_bucket{p="lizard",le="0.1"} 3',
      'cseng_z_seconds_bucket{p="lizard",le="1.0"} 3',
      'cseng_z_seconds_bucket{p="lizard",le="+Inf"} 4',
      'cseng_z_seconds_count{p="lizard"} 4',
      'cseng_z_seconds_sum{p="lizard"} 2.105',
      '# EOF', '' }, '\n'), R:render())
  end)

  it('collects a run log into the store\'s samples, once, as the log grows', function()
    local dir = H.tempdir('cseng-metrics-')
    local path = HH.arena_log(fs.join(dir, 'm.jsonl'), { run_id = 'm-1', samples = 10, warmups = 2,
      create = function(i) return 40 + i end, error = function(i) return i == 4 and 'ECREATE' or nil end,
      lost = function(i) return i == 7 end, status = false })
    local R = metrics.registry()
    local C = metrics.collector(R)
    C:feed(path)
    C:feed(path) -- nothing new: nothing counted twice
    local run = assert(extract.read(path))
    local n = {}
    for _, s in ipairs(run.series) do n[s.primitive] = s.n end
    local text = R:render()
    local function sample(name) return tonumber(text:match('\n' .. name:gsub('%p', '%%%0') .. ' ([^\n]+)')) end
    assert.equal(8, sample('cseng_trials_total{provider="lizard",outcome="passed"}'))
    assert.equal(2, sample('cseng_trials_total{provider="lizard",outcome="error"}'))
    assert.equal(1, sample('cseng_trial_errors_total{provider="lizard",code="ENOSANDBOX"}'))
    assert.equal(1, sample('cseng_sandboxes_lost_total{provider="lizard"}'))
    for prim, count in pairs(n) do
      assert.equal(count, sample('cseng_sandbox_latency_seconds_count{provider="lizard",phase="measured",primitive="' .. prim .. '"}'))
    end
    -- the log grows: a torn line waits for its newline, a hostile one is no label
    local more = jsonl.encode({ event = 'allocated', run_id = 'm-1', provider = 'lizard', sandbox_id = 'sb-x' }) .. '\n' ..
      jsonl.encode({ event = 'startup_trial', run_id = 'm-1', provider = 'evil"} 1\nfake_metric 9', ok = true, create_ms = 5 }) .. '\n'
    local torn = jsonl.encode({ event = 'admission', run_id = 'm-1', key = 'lizard', limit = 4, reason = 'decrease' })
    assert(fs.write(path, fs.read(path) .. more .. torn))
    C:feed(path)
    text = R:render()
    assert.equal(1, sample('cseng_live_sandboxes{provider="lizard"}'))
    assert.is_nil(text:find('evil', 1, true))
    assert.is_nil(text:find('fake_metric', 1, true))
    assert.is_nil(text:find('cseng_admission_limit{', 1, true))
    assert(fs.write(path, fs.read(path) .. '\n'))
    C:feed(path)
    text = R:render()
    assert.equal(4, sample('cseng_admission_limit{key="lizard"}'))
    assert.equal(1, sample('cseng_admission_decreases_total{key="lizard"}'))
  end)
end)
