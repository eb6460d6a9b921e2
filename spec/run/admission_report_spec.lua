-- The admission of a run in its JSON summary (`admission`, results.admission) and in the markdown
-- reports, rendered by the cseng binary as users run it (`cseng report RUN.jsonl --template T`),
-- from the log and from the summary: a run against the chat-completions fake with a hidden
-- limit it reaches whatever the machine's speed (its first request held until another was
-- refused); the table's counts checked against the fake's and the log's own counts.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local proc = require('cseng.proc')
local jsonl = require('cseng.lib.jsonl')

local ROOT = sys.root()
local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-admission-report-spec') end)
teardown(function() H.close() end)

local function report(input, template)
  local out = H.tmp .. '/' .. template .. '-' .. fs.basename(input) .. '.md'
  local r = assert(proc.run { argv = { ROOT .. '/cseng', 'report', input, '--template', template, '-o', out }, cwd = ROOT })
  assert.equal(0, r.code, r.stderr)
  return assert(fs.read(out))
end

local function has(md, s) assert(md:find(s, 1, true), 'missing: ' .. s .. '\nin:\n' .. md) end

describe('admission in the summary and the reports', function()
  it('the summary has the admission section; per_provider, per_task, cross_vendor and failure_modes show it', function()
    local f = H.start { script = H.llm.replay(H.gold_commands), limit = 1, hold_first = 1 }
    local status, _, info, events = H.run({ tasks = H.ids(3), attempts = 2, concurrency = 3, llm_attempts = 2 },
      H.openrouter_env(f))
    assert.equal(0, status)
    local st = f.stats()
    assert.is_true(st.rate_limited > 0, 'the hidden limit was reached')
    local key = 'model:' .. f.url:match('^http://([^/]+)')
    -- the log's own counts, independently of results.admission
    local ups, downs, limits = 0, 0, {}
    for _, e in ipairs(events) do
      if e.event == 'admission' and e.key == key then
        if e.reason == 'increase' then ups = ups + 1 elseif e.reason == 'decrease' then downs = downs + 1 end
        limits[#limits + 1] = e.limit
      end
    end
    assert.is_true(downs >= 1)
    assert.equal(3, limits[1]) -- starts at --concurrency
    local s = jsonl.decode(assert(fs.read(info.json))) -- the summary file, as written
    local a = assert(s.admission and s.admission[key], 'the summary has no admission section for ' .. key)
    assert.same({ 3, st.rate_limited, ups, downs, ups + downs }, { a.start, a.throttled, a.increases, a.decreases, a.changes })
    assert.equal(limits[#limits], a.final)
    local row = string.format('| `%s` | `%s` | 3 | %d | %d | %d | %d (%d up, %d down) | 0 | %d | 0 |', s.run_id, key,
      a.min, a.max, a.final, ups + downs, ups, downs, st.rate_limited)
    for _, template in ipairs({ 'per_provider', 'per_task', 'cross_vendor', 'failure_modes' }) do
      local md = report(info.jsonl, template)
      has(md, '## Admission\n')
      has(md, row)
    end
    has(report(info.json, 'per_provider'), row) -- from the summary alone
  end)

  it("a merged log's shards add up: the last total of each controller (scope) counts", function()
    local results = require('cseng.results.log')
    local function ev(reason, limit, extra)
      local e = { event = 'admission', key = 'p', provider = 'p', reason = reason, limit = limit }
      for k, v in pairs(extra or {}) do e[k] = v end
      return e
    end
    local a = results.admission {
      ev('start', 8), ev('decrease', 4), ev('start', 8), ev('total', 4, { scope = 'a', throttled = 1, waits = 2 }),
      ev('decrease', 2), ev('total', 2, { scope = 'a', throttled = 3, waits = 5 }), -- replaces a's first
      ev('increase', 3), ev('total', 3, { scope = 'b', throttled = 4, waits = 1 }),
    }
    assert.same({ 8, 2, 8, 3, 1, 2, 3, 7, 6 }, { a.p.start, a.p.min, a.p.max, a.p.final, a.p.increases, a.p.decreases,
      a.p.changes, a.p.throttled, a.p.waits })
    assert.is_nil(results.admission { { event = 'trial' } })
  end)

  it('a run with admission off has no admission section', function()
    local f = H.start { script = H.llm.replay(H.gold_commands) }
    local status, _, info = H.run({ tasks = H.ids(1), admission = 'off' }, H.openrouter_env(f))
    assert.equal(0, status)
    local s = jsonl.decode(assert(fs.read(info.json)))
    assert.is_nil(s.admission)
    assert.is_nil(report(info.jsonl, 'per_provider'):find('## Admission', 1, true))
  end)
end)
