-- The doc-test of the provider pages (docs/providers/*.md): their offline blocks run against
-- the bundled fakes (`cseng fake`), their real-service blocks are marked `# needs: credentials`
-- (the rules: spec/doctest.lua).
local sys = require 'cseng.sys'

local DOCT = dofile(sys.root() .. '/spec/doctest.lua')

setup(function() DOCT.open() end)
teardown(function() DOCT.close() end)

describe('doctest: the provider pages', function()
  for _, doc in ipairs(DOCT.provider_pages()) do
    it(doc, function()
      local failures = DOCT.run_doc(doc)
      assert.equal(0, #failures, '\n' .. table.concat(failures, '\n'))
    end)
  end
end)
