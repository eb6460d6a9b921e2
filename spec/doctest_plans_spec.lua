-- The doc-test of docs/PLANS.md (the rules and the machinery: spec/doctest.lua).
local sys = require 'cseng.sys'

local DOCT = dofile(sys.root() .. '/spec/doctest.lua')

setup(function() DOCT.open() end)
teardown(function() DOCT.close() end)

describe('doctest: docs/PLANS.md', function()
  it('runs every command of its sh blocks as documented, or marks it', function()
    local failures = DOCT.run_doc('docs/PLANS.md')
    assert.equal(0, #failures, '\n' .. table.concat(failures, '\n'))
  end)
end)
