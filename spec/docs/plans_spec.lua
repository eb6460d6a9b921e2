-- The doc-test of docs/PLANS.md and docs/HARBOR.md (the rules and the machinery: spec/helpers/doctest.lua).

local DOCT = require('spec.helpers.doctest')

setup(function() DOCT.open() end)
teardown(function() DOCT.close() end)

DOCT.describe_docs({ describe = describe, it = it }, 'doctest: docs/PLANS.md and docs/HARBOR.md', { 'docs/PLANS.md', 'docs/HARBOR.md' })
