-- Every schema field of lua/providers/shared/modal_schema.lua (number, name, type, label, referenced
-- message or enum, oneof, map key and value) against Modal's own protos in ../shared/specs/modal/:
-- Debian's protoc compiles them into a descriptor set (--include_imports), which cseng.protobuf
-- decodes with the descriptor.proto schemas of lua/cseng/lib/protobuf_descriptor.lua.
local sys = require('cseng.sys')
local protobuf = require('cseng.protobuf')
local D = require('cseng.lib.protobuf_descriptor')
local S = require('providers.shared.modal_schema')

local PROTOS = sys.root() .. '/../shared/specs/modal'

describe('modal_schema against the protos', function()
  local idx
  setup(function()
    local bytes = assert(D.protoc({ 'modal_proto/api.proto', 'modal_proto/task_command_router.proto' }, { PROTOS }))
    idx = assert(D.index(bytes))
  end)

  it('agrees on every message the adapter uses', function()
    local n, fields = 0, 0
    for key, schema in pairs(S) do
      if type(schema) == 'table' and schema.fields then
        n = n + 1
        fields = fields + #schema.fields
        assert.same({}, D.check(schema, idx), key)
        assert.is_true(protobuf.compile(schema))
      end
    end
    assert.is_true(n >= 40, tostring(n))
    assert.is_true(fields >= 100, tostring(fields))
  end)

  it('agrees on every enum, value by value', function()
    local n = 0
    for key, e in pairs(S) do
      if type(e) == 'table' and e.values then
        n = n + 1
        local want = idx.enums['.' .. e.name]
        assert.is_table(want, key)
        for name, num in pairs(e.values) do assert.equal(want.values[name], num, key .. '.' .. name) end
      end
    end
    assert.is_true(n >= 7)
  end)

  it('agrees on every method: service, request, response and streaming', function()
    local n = 0
    for method, m in pairs(S.methods) do
      n = n + 1
      assert.same({}, D.check_method(idx, m[1], method, m[2], m[3], m.stream), method)
    end
    assert.is_true(n >= 16)
  end)

  it('would notice a wrong field number, type, label or reference', function()
    local bad = { name = 'modal.client.SandboxCreateRequest', fields = {
      { 1, 'app_id', 'bytes' }, { 3, 'definition', 'message', S.Sandbox },
      { 4, 'tags', 'message', S.SandboxTag }, { 2, 'definition', 'message', S.Resources } } }
    local problems = D.check(bad, idx)
    local text = table.concat(problems, '\n')
    assert.matches('app_id: type is string in the protos, bytes here', text, 1, true)
    assert.matches('field 3 is named environment_name', text, 1, true)
    assert.matches('tags: repeated in the protos, singular here', text, 1, true)
    assert.matches('refers to .modal.client.Sandbox in the protos, modal.client.Resources here', text, 1, true)
  end)
end)
