-- The doc-test of docs/PLANS.md and docs/HARBOR.md (the rules and the machinery: spec/doctest.lua).
local sys = require 'cseng.sys'

local DOCT = dofile(sys.root() .. '/spec/doctest.lua')

setup(function() DOCT.open() end)
teardown(function() DOCT.close() end)

DOCT.describe_docs({ describe = describe, it = it }, 'doctest: docs/PLANS.md and docs/HARBOR.md', { 'docs/PLANS.md', 'docs/HARBOR.md' })
