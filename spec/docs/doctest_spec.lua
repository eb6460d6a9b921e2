-- The doc-test of README.md and docs/ARENA.md, and of every `--help` option (the rules and the
-- machinery: spec/helpers/doctest.lua; docs/PLANS.md: spec/docs/plans_spec.lua; the provider pages:
-- spec/docs/providers_spec.lua; three files, so each stays well under a minute).
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')

local ROOT = sys.root()
local DOCT = require('spec.helpers.doctest')
local DOCS = { 'README.md', 'docs/ARENA.md' }

local tmp
setup(function() tmp = DOCT.open() end)
teardown(function() DOCT.close() end)

describe('doctest: parsing the docs', function()
  it('reads commands, continuations, comments, markers and exit codes', function()
    local text = table.concat({ 'x', '```sh', './cseng run plans/a.lua \\', "  --tasks 'a b'   # here: exit 1",
      'make check  # needs: long', '', '# a comment line', './cseng fake e2b --env-file f.env &', 'kill %1', '```',
      '```sh', '# needs: credentials', 'export A=...', '```', '' }, '\n')
    local b = DOCT.blocks(text)
    assert.equal(2, #b)
    local c = DOCT.commands(b[1])
    assert.equal(4, #c)
    assert.same({ './cseng', 'run', 'plans/a.lua', '--tasks', 'a b' }, c[1].argv)
    assert.equal(1, c[1].exit)
    assert.equal(3, c[1].line)
    assert.equal('long', c[2].needs)
    assert.is_true(c[3].background)
    assert.same({ 'kill', '%1' }, c[4].argv)
    assert.equal('credentials', DOCT.commands(b[2])[1].needs)
  end)

  it('bounds runs: task limit, samples, no build network', function()
    assert.same({ './cseng', 'run', 'plans/cold-gold.lua', '--task-limit', '1', '--build-network', 'off', '--quiet' },
      DOCT.bounded({ './cseng', 'run', 'plans/cold-gold.lua' }, tmp))
    assert.same({ './cseng', 'run', 'plans/startup.lua', '--samples', '50', '--samples', '3', '--warmups', '0',
      '--build-network', 'off', '--quiet' }, DOCT.bounded({ './cseng', 'run', 'plans/startup.lua', '--samples', '50' }, tmp))
  end)

  it('fails when a documented command behaves otherwise (a changed exit code, an unmarked command)', function()
    local text = table.concat({ '```sh',
      './cseng dataset info data/smoke.jsonl          # exit 1', -- documented wrong on purpose: it exits 0
      './cseng no-such-command                        # exit 2',
      'ls -l', '```', '' }, '\n')
    local failures = DOCT.run_doc('mutation.md', { text = text })
    assert.equal(2, #failures, table.concat(failures, '\n'))
    assert.matches('exit 0, documented 1', failures[1])
    assert.matches('not a %./cseng command', failures[2])
  end)
end)

DOCT.describe_docs({ describe = describe, it = it }, 'doctest: every documented command', DOCS)

describe('doctest: every --help option is documented', function()
  it('appears in README.md or docs/', function()
    local docs = { assert(fs.read(ROOT .. '/README.md')) }
    local function add_dir(d)
      for _, f in ipairs(fs.list(d) or {}) do
        if f:match('%.md$') then docs[#docs + 1] = fs.read(d .. '/' .. f) or '' end
      end
    end
    add_dir(ROOT .. '/docs'); add_dir(ROOT .. '/docs/providers')
    local all = table.concat(docs, '\n')
    local missing = {}
    local cli = require('cseng.cli.main')
    for _, name in ipairs(cli.commands) do
      local r = assert(proc.run { argv = { ROOT .. '/cseng', name, '--help' }, timeout = 30 })
      for opt in r.stdout:gmatch('%f[%-%w]%-%-([%w][%w%-]*)') do
        if opt ~= 'help' and not all:find('--' .. opt, 1, true) then missing[#missing + 1] = name .. ' --' .. opt end
      end
    end
    assert.same({}, missing)
  end)
end)
