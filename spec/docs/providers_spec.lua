-- The doc-test of the provider pages (docs/providers/*.md): their offline blocks run against
-- the bundled fakes (`cseng fake`), their real-service blocks are marked `# needs: credentials`
-- (the rules: spec/helpers/doctest.lua).

local DOCT = require('spec.helpers.doctest')

setup(function() DOCT.open() end)
teardown(function() DOCT.close() end)

DOCT.describe_docs({ describe = describe, it = it }, 'doctest: the provider pages', DOCT.provider_pages())
