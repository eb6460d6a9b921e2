-- Records declared once (lua/cseng/run/records.lua): a module that writes a field its record
-- does not declare fails (under cseng test every record is strict), and docs/RESULTS.md's trial
-- table lists exactly the Trial record's fields.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local records = require('cseng.run.records')

describe('declared records', function()
  it('are strict under cseng test: an undeclared field raises, naming the record and the field', function()
    assert.is_true(records.strict)
    local rec = records.trial { task_id = 't' }
    rec.outcome = 'passed' -- declared
    local ok, err = pcall(function() rec.bogus_field = 1 end)
    assert.is_false(ok)
    assert.matches('Trial has no field "bogus_field"', tostring(err), 1, true)
    assert.matches('lua/cseng/run/records.lua', tostring(err), 1, true)
    local ok2, err2 = pcall(records.sample, { provider = 'x', nope = true })
    assert.is_false(ok2)
    assert.matches('Sample has no field "nope"', tostring(err2), 1, true)
  end)

  it('say what each field is', function()
    for _, name in ipairs({ 'Trial', 'Sample', 'Run', 'Connection' }) do
      for k, v in pairs(records.fields(name)) do
        assert.is_true(type(v) == 'string' and #v > 3, name .. '.' .. k .. ' has no meaning')
      end
    end
  end)

  it('docs/RESULTS.md lists the trial record field for field', function()
    local doc = assert(fs.read(sys.root() .. '/docs/RESULTS.md'))
    local section = doc:match('\n## The trial record\n(.-)\n## ')
    assert(section, 'no "The trial record" section')
    local listed = {}
    for row in section:gmatch('\n| ([^\n]-) | ') do
      for name in row:gmatch('`([%w_]+)`') do listed[name] = true end
    end
    local declared = records.fields('Trial')
    local missing, extra = {}, {}
    for k in pairs(declared) do if not listed[k] then missing[#missing + 1] = k end end
    for k in pairs(listed) do if not declared[k] then extra[#extra + 1] = k end end
    table.sort(missing); table.sort(extra)
    assert.same({}, missing, 'declared but not in docs/RESULTS.md')
    assert.same({}, extra, 'in docs/RESULTS.md but not declared')
  end)
end)
