local toml = require('cseng.lib.toml')

describe('toml', function()
  it('parses a real TerminalBench task.toml', function()
    local t = assert(toml.parse([[
version = "1.0"

[metadata]
author_name = "Terminal Bench"
tags = [ "coding", "automation",]
expert_time_estimate_min = 30.0

[verifier]
timeout_sec = 240.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 2048
allow_internet = true
mcp_servers = []

[verifier.env]
FOO = "bar"

[solution.env]
]], 'task.toml'))
    assert.equal('1.0', t.version)
    assert.same({ 'coding', 'automation' }, t.metadata.tags)
    assert.equal(240.0, t.verifier.timeout_sec)
    assert.equal(1, t.environment.cpus)
    assert.is_true(math.type(t.environment.memory_mb) == 'integer')
    assert.is_true(t.environment.allow_internet)
    assert.same({}, t.environment.mcp_servers)
    assert.equal('bar', t.verifier.env.FOO)
    assert.same({}, t.solution.env)
  end)

  it('handles strings, numbers, inline tables, dotted keys and arrays of tables', function()
    local t = assert(toml.parse([==[
a = "tab\there \u00e9"
b = 'C:\path'
c = """
multi
line"""
d = '''raw\n'''
e = 0x1F
f = 1_000
g = -3.5e2
h = { x = 1, y.z = "w" }
i.j.k = true
dt = 1979-05-27T07:32:00Z
arr = [ [1, 2], ["a"], ]
[[srv]]
name = "one"
[[srv]]
name = "two"
[srv.opts]
p = 1
]==]))
    assert.equal('tab\there é', t.a)
    assert.equal('C:\\path', t.b)
    assert.equal('multi\nline', t.c)
    assert.equal('raw\\n', t.d)
    assert.equal(31, t.e)
    assert.equal(1000, t.f)
    assert.equal(-350.0, t.g)
    assert.same({ x = 1, y = { z = 'w' } }, t.h)
    assert.is_true(t.i.j.k)
    assert.equal('1979-05-27T07:32:00Z', t.dt)
    assert.same({ { 1, 2 }, { 'a' } }, t.arr)
    assert.equal(2, #t.srv)
    assert.equal('two', t.srv[2].name)
    assert.equal(1, t.srv[2].opts.p)
  end)

  it('reports errors with the source name and line', function()
    local _, err, code = toml.parse('a = 1\nb 2\n', 'x/task.toml')
    assert.equal("x/task.toml:2: expected '=' after key", err)
    assert.equal('EPARSE', code)
    _, err = toml.parse('a = 1\na = 2\n', 't')
    assert.equal("t:2: duplicate key 'a'", err)
    _, err = toml.parse('a = "open\n', 't')
    assert.matches('^t:1: newline in a single%-line string', err)
    _, err = toml.parse('a = [1, 2', 't')
    assert.matches("^t:1: expected", err)
  end)
end)
