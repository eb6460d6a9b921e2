--- descriptor.proto's schema subset (google/protobuf/descriptor.proto, proto2) as cseng.protobuf
--- schemas, and the tools to check hand-written schemas against real .proto files.
---
--- Debian's protoc turns .proto files into a FileDescriptorSet
--- (`protoc --descriptor_set_out=F --include_imports -I DIR file.proto`); `D.decode` reads it with
--- the engine's own codec, `D.index` names every message, enum and service by full name, and
--- `D.check(schema, index)` lists where a hand-written schema disagrees with the protos (field
--- number, name, type, label, referenced message or enum, map key/value, oneof, packing).
---
---   local D = require 'cseng.lib.protobuf_descriptor'
---   local index = assert(D.index(assert(D.protoc { 'modal_proto/api.proto' }, { '../shared/specs/modal' })))
---   local problems = D.check(schemas.SandboxCreateRequest, index)   -- {} when all agree
local protobuf = require('cseng.protobuf')

local D = {}

-- FieldDescriptorProto.Label and .Type
D.LABEL_OPTIONAL, D.LABEL_REQUIRED, D.LABEL_REPEATED = 1, 2, 3
D.TYPES = { 'double', 'float', 'int64', 'uint64', 'int32', 'fixed64', 'fixed32', 'bool', 'string', 'group',
  'message', 'bytes', 'uint32', 'enum', 'sfixed32', 'sfixed64', 'sint32', 'sint64' }

local S = {}
D.schemas = S

S.FieldOptions = { name = 'google.protobuf.FieldOptions', fields = {
  { 2, 'packed', 'optional', 'bool' },
  { 3, 'deprecated', 'optional', 'bool' },
} }
S.MessageOptions = { name = 'google.protobuf.MessageOptions', fields = {
  { 3, 'deprecated', 'optional', 'bool' },
  { 7, 'map_entry', 'optional', 'bool' },
} }
S.FieldDescriptorProto = { name = 'google.protobuf.FieldDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'extendee', 'optional', 'string' },
  { 3, 'number', 'optional', 'int32' },
  { 4, 'label', 'optional', 'enum' },
  { 5, 'type', 'optional', 'enum' },
  { 6, 'type_name', 'optional', 'string' },
  { 7, 'default_value', 'optional', 'string' },
  { 8, 'options', 'optional', 'message', S.FieldOptions },
  { 9, 'oneof_index', 'optional', 'int32' },
  { 10, 'json_name', 'optional', 'string' },
  { 17, 'proto3_optional', 'optional', 'bool' },
} }
S.OneofDescriptorProto = { name = 'google.protobuf.OneofDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
} }
S.EnumValueDescriptorProto = { name = 'google.protobuf.EnumValueDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'number', 'optional', 'int32' },
} }
S.EnumDescriptorProto = { name = 'google.protobuf.EnumDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'value', 'repeated', 'message', S.EnumValueDescriptorProto },
  { 5, 'reserved_name', 'repeated', 'string' },
} }
S.DescriptorProto = { name = 'google.protobuf.DescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'field', 'repeated', 'message', S.FieldDescriptorProto },
  -- { 3, 'nested_type', ... } below: the schema refers to itself
  { 4, 'enum_type', 'repeated', 'message', S.EnumDescriptorProto },
  { 6, 'extension', 'repeated', 'message', S.FieldDescriptorProto },
  { 7, 'options', 'optional', 'message', S.MessageOptions },
  { 8, 'oneof_decl', 'repeated', 'message', S.OneofDescriptorProto },
  { 10, 'reserved_name', 'repeated', 'string' },
} }
table.insert(S.DescriptorProto.fields, 3, { 3, 'nested_type', 'repeated', 'message', S.DescriptorProto })
S.MethodDescriptorProto = { name = 'google.protobuf.MethodDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'input_type', 'optional', 'string' },
  { 3, 'output_type', 'optional', 'string' },
  { 5, 'client_streaming', 'optional', 'bool' },
  { 6, 'server_streaming', 'optional', 'bool' },
} }
S.ServiceDescriptorProto = { name = 'google.protobuf.ServiceDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'method', 'repeated', 'message', S.MethodDescriptorProto },
} }
S.FileDescriptorProto = { name = 'google.protobuf.FileDescriptorProto', fields = {
  { 1, 'name', 'optional', 'string' },
  { 2, 'package', 'optional', 'string' },
  { 3, 'dependency', 'repeated', 'string' },
  { 4, 'message_type', 'repeated', 'message', S.DescriptorProto },
  { 5, 'enum_type', 'repeated', 'message', S.EnumDescriptorProto },
  { 6, 'service', 'repeated', 'message', S.ServiceDescriptorProto },
  { 7, 'extension', 'repeated', 'message', S.FieldDescriptorProto },
  { 10, 'public_dependency', 'repeated', 'int32', packed = false },
  { 11, 'weak_dependency', 'repeated', 'int32', packed = false },
  { 12, 'syntax', 'optional', 'string' },
} }
S.FileDescriptorSet = { name = 'google.protobuf.FileDescriptorSet', fields = {
  { 1, 'file', 'repeated', 'message', S.FileDescriptorProto },
} }

--- Decode a serialized FileDescriptorSet.
---@param bytes string
---@return table? set
---@return string? message
---@return string? code
function D.decode(bytes)
  return protobuf.decode(S.FileDescriptorSet, bytes)
end

--- Run Debian's protoc over .proto files (yields: call it in a task) and return the
--- FileDescriptorSet's bytes (imports included; google/protobuf's well-known types are found
--- in /usr/include, from libprotobuf-dev).
---@param files string[] .proto paths relative to one of the include dirs
---@param include_dirs string[]
---@return string? bytes
---@return string? message
---@return string? code
function D.protoc(files, include_dirs)
  local proc = require('cseng.proc')
  local out = os.tmpname()
  local argv = { 'protoc', '--descriptor_set_out=' .. out, '--include_imports' }
  for _, d in ipairs(include_dirs or {}) do argv[#argv + 1] = '-I' .. d end
  argv[#argv + 1] = '-I/usr/include'
  for _, f in ipairs(files) do argv[#argv + 1] = f end
  local r, err, code = proc.run { argv = argv, timeout = 120 }
  if not r then
    os.remove(out)
    return nil, 'protoc: ' .. tostring(err), code
  end
  if r.code ~= 0 then
    os.remove(out)
    return nil, 'protoc failed (exit ' .. r.code .. '): ' .. r.stderr, 'EPROTOC'
  end
  local f, ferr = io.open(out, 'rb')
  if not f then return nil, 'protoc: ' .. tostring(ferr), 'EIO' end
  local bytes = f:read('a')
  f:close()
  os.remove(out)
  return bytes
end

--- Index a decoded FileDescriptorSet (or its bytes) by full names with a leading dot, as
--- type_name spells them: {messages = {['.pkg.Msg'] = {desc=, syntax=, file=}},
--- enums = {['.pkg.Enum'] = {desc=, values = {NAME = number}}}, services = {['pkg.Svc'] =
--- {methods = {Name = MethodDescriptorProto}}}}.
---@param set table|string
---@return table? index
---@return string? message
function D.index(set)
  if type(set) == 'string' then
    local err
    set, err = D.decode(set)
    if not set then return nil, err end
  end
  local idx = { messages = {}, enums = {}, services = {} }
  local function add_enum(prefix, e, file)
    local values = {}
    for _, v in ipairs(e.value or {}) do values[v.name] = v.number or 0 end
    idx.enums[prefix .. '.' .. e.name] = { desc = e, values = values, file = file }
  end
  local function add_msg(prefix, m, syntax, file)
    local full = prefix .. '.' .. m.name
    idx.messages[full] = { desc = m, syntax = syntax, file = file }
    for _, n in ipairs(m.nested_type or {}) do add_msg(full, n, syntax, file) end
    for _, e in ipairs(m.enum_type or {}) do add_enum(full, e, file) end
  end
  for _, f in ipairs(set.file or {}) do
    local prefix = f.package and f.package ~= '' and ('.' .. f.package) or ''
    local syntax = f.syntax or 'proto2'
    for _, m in ipairs(f.message_type or {}) do add_msg(prefix, m, syntax, f.name) end
    for _, e in ipairs(f.enum_type or {}) do add_enum(prefix, e, f.name) end
    for _, s in ipairs(f.service or {}) do
      local methods = {}
      for _, m in ipairs(s.method or {}) do methods[m.name] = m end
      idx.services[prefix:sub(2) .. (prefix ~= '' and '.' or '') .. s.name] = { desc = s, methods = methods }
    end
  end
  return idx
end

-- A schema field spec as cseng.protobuf reads it (lprotobuf.c: compile).
local function parse_field(f)
  local at, label = 3, 'singular'
  if f[3] == 'repeated' or f[3] == 'optional' then label, at = f[3], 4 end
  local p = { number = f[1], name = f[2], label = label, type = f[at], ref = f[at + 1], oneof = f.oneof,
    packed = f.packed }
  if p.type == 'map' then
    p.key_type, p.value_type, p.value_ref = f[at + 1], f[at + 2], f[at + 3]
    p.ref = nil
  end
  return p
end

local PACKABLE = {}
for _, t in ipairs(D.TYPES) do
  if t ~= 'string' and t ~= 'bytes' and t ~= 'message' and t ~= 'group' then PACKABLE[t] = true end
end

local function type_name_of(d)
  return D.TYPES[d.type or 0] or ('type ' .. tostring(d.type))
end

local function check_enum(ref, idx, where, out)
  local e = idx.enums['.' .. tostring(ref.name)]
  if not e then
    out[#out + 1] = where .. ': enum ' .. tostring(ref.name) .. ' is not in the protos'
    return
  end
  for name, num in pairs(ref.values or {}) do
    if e.values[name] == nil then
      out[#out + 1] = string.format('%s: enum %s has no value %s', where, ref.name, name)
    elseif e.values[name] ~= num then
      out[#out + 1] = string.format('%s: enum %s.%s is %d in the protos, %s here', where, ref.name, name, e.values[name],
        tostring(num))
    end
  end
end

--- Where a hand-written schema (and every schema it refers to) disagrees with the protos:
--- a list of "<Message>.<field>: <what differs>" strings, empty when everything agrees. Fields
--- of the protos that the schema leaves out are fine (schemas are subsets).
---@param schema table a cseng.protobuf message schema
---@param idx table from D.index
---@return string[]
function D.check(schema, idx)
  local out, seen = {}, {}
  local function check_type(where, want_type, ref, d)
    local got = type_name_of(d)
    if want_type ~= got then
      out[#out + 1] = string.format('%s: type is %s in the protos, %s here', where, got, tostring(want_type))
      return false
    end
    if want_type == 'message' or want_type == 'enum' then
      if ref == nil then
        if want_type == 'message' then out[#out + 1] = where .. ': no message schema given' end
        return true
      end
      if d.type_name ~= '.' .. tostring(ref.name) then
        out[#out + 1] = string.format('%s: refers to %s in the protos, %s here', where, tostring(d.type_name),
          tostring(ref.name))
      end
    end
    return true
  end
  local check_msg
  local function check_ref(t, ref, where)
    if t == 'message' and type(ref) == 'table' then check_msg(ref)
    elseif t == 'enum' and type(ref) == 'table' then check_enum(ref, idx, where, out) end
  end
  function check_msg(s)
    if seen[s] then return end
    seen[s] = true
    local m = idx.messages['.' .. tostring(s.name)]
    if not m then
      out[#out + 1] = tostring(s.name) .. ': no such message in the protos'
      return
    end
    local by_number = {}
    for _, d in ipairs(m.desc.field or {}) do by_number[d.number] = d end
    for _, fs in ipairs(s.fields or {}) do
      local f = parse_field(fs)
      local where = s.name .. '.' .. tostring(f.name)
      local d = by_number[f.number]
      if not d then
        out[#out + 1] = string.format('%s: no field number %s in the protos', where, tostring(f.number))
        goto continue
      end
      if d.name ~= f.name then
        out[#out + 1] = string.format('%s: field %d is named %s in the protos', where, f.number, d.name)
      end
      local entry = d.type == 11 and d.type_name and idx.messages[d.type_name]
      local is_map = entry and entry.desc.options and entry.desc.options.map_entry
      if f.type == 'map' or is_map then
        if not is_map then
          out[#out + 1] = where .. ': a map here, not in the protos'
        elseif f.type ~= 'map' then
          out[#out + 1] = where .. ': a map in the protos, not here'
        else
          local kd, vd
          for _, ef in ipairs(entry.desc.field or {}) do
            if ef.number == 1 then kd = ef elseif ef.number == 2 then vd = ef end
          end
          check_type(where .. ' (map key)', f.key_type, nil, kd)
          if check_type(where .. ' (map value)', f.value_type, f.value_ref, vd) then
            check_ref(f.value_type, f.value_ref, where)
          end
        end
        goto continue
      end
      do
        local label = 'singular'
        if d.label == D.LABEL_REPEATED then label = 'repeated'
        elseif d.proto3_optional or (m.syntax == 'proto2' and d.label == D.LABEL_OPTIONAL) then label = 'optional' end
        if label ~= f.label then
          out[#out + 1] = string.format('%s: %s in the protos, %s here', where, label, f.label)
        end
        if check_type(where, f.type, f.ref, d) then check_ref(f.type, f.ref, where) end
        local oneof = (d.oneof_index and not d.proto3_optional and m.desc.oneof_decl)
          and m.desc.oneof_decl[d.oneof_index + 1].name or nil
        if oneof ~= f.oneof then
          out[#out + 1] = string.format('%s: oneof %s in the protos, %s here', where, tostring(oneof), tostring(f.oneof))
        end
        if label == 'repeated' and PACKABLE[f.type] then
          local want = m.syntax == 'proto3'
          if d.options and d.options.packed ~= nil then want = d.options.packed end
          local here = f.packed ~= false
          if want ~= here then
            out[#out + 1] = string.format('%s: %s in the protos, %s here', where, want and 'packed' or 'not packed',
              here and 'packed' or 'not packed')
          end
        end
      end
      ::continue::
    end
  end
  check_msg(schema)
  table.sort(out)
  return out
end

--- Check an RPC: the method exists in the service, its request and response types are these
--- schemas' messages, and it streams as said. Returns a list of problems (empty when it agrees).
---@param idx table from D.index
---@param service string full service name, e.g. 'modal.client.ModalClient'
---@param method string e.g. 'SandboxCreate'
---@param request table request message schema
---@param response table response message schema
---@param server_streaming? boolean
---@return string[]
function D.check_method(idx, service, method, request, response, server_streaming)
  local out = {}
  local s = idx.services[service]
  local m = s and s.methods[method]
  if not m then return { service .. '/' .. method .. ': no such method in the protos' } end
  local where = service .. '/' .. method
  if m.input_type ~= '.' .. request.name then
    out[#out + 1] = string.format('%s: takes %s in the protos, %s here', where, m.input_type, request.name)
  end
  if m.output_type ~= '.' .. response.name then
    out[#out + 1] = string.format('%s: returns %s in the protos, %s here', where, m.output_type, response.name)
  end
  if (m.server_streaming or false) ~= (server_streaming or false) then
    out[#out + 1] = string.format('%s: server streaming is %s in the protos', where, tostring(m.server_streaming or false))
  end
  if m.client_streaming then out[#out + 1] = where .. ': client streaming (not supported by lua/cseng/lib/grpc.lua)' end
  return out
end

return D
