-- cseng.protobuf (engine/protobuf.c + engine/lprotobuf.c) against an independent implementation:
-- Debian's protoc encodes text-format messages of spec/fixtures/protobuf/alltypes.proto (every
-- type, packed and unpacked repeated, nested messages, enums, maps, optional, oneof) and decodes
-- the codec's bytes; both ways must agree byte for byte. Then a real FileDescriptorSet of Modal's
-- protos, decoded with lua/cseng/lib/protobuf_descriptor.lua, and hostile inputs.
local protobuf = require('cseng.protobuf')
local proc = require('cseng.proc')
local sys = require('cseng.sys')
local D = require('cseng.lib.protobuf_descriptor')

local ROOT = sys.root()
local FIX = ROOT .. '/spec/fixtures/protobuf'
local SHARED = os.getenv('CSENG_SHARED') or (ROOT .. '/../shared')
local MODAL = SHARED .. '/specs/modal'

local Color = { name = 'cseng.test.Color', values = { COLOR_UNSPECIFIED = 0, RED = 1, GREEN = 2, NEGATIVE = -1 } }
local Inner = { name = 'cseng.test.Inner', fields = { { 1, 'x', 'int32' }, { 2, 's', 'string' } } }
Inner.fields[3] = { 3, 'kids', 'repeated', 'message', Inner }
local All = { name = 'cseng.test.All', fields = {
  { 1, 'f_double', 'double' }, { 2, 'f_float', 'float' }, { 3, 'f_int64', 'int64' }, { 4, 'f_uint64', 'uint64' },
  { 5, 'f_int32', 'int32' }, { 6, 'f_fixed64', 'fixed64' }, { 7, 'f_fixed32', 'fixed32' }, { 8, 'f_bool', 'bool' },
  { 9, 'f_string', 'string' }, { 10, 'f_msg', 'message', Inner }, { 11, 'f_bytes', 'bytes' },
  { 12, 'f_uint32', 'uint32' }, { 13, 'f_enum', 'enum', Color }, { 14, 'f_sfixed32', 'sfixed32' },
  { 15, 'f_sfixed64', 'sfixed64' }, { 16, 'f_sint32', 'sint32' }, { 17, 'f_sint64', 'sint64' },
  { 20, 'r_int32', 'repeated', 'int32' }, { 21, 'r_sint64', 'repeated', 'sint64' },
  { 22, 'r_double', 'repeated', 'double' }, { 23, 'r_fixed32', 'repeated', 'fixed32' },
  { 24, 'r_bool', 'repeated', 'bool' }, { 25, 'r_enum', 'repeated', 'enum', Color },
  { 26, 'r_unpacked', 'repeated', 'int32', packed = false }, { 27, 'r_string', 'repeated', 'string' },
  { 28, 'r_bytes', 'repeated', 'bytes' }, { 29, 'r_msg', 'repeated', 'message', Inner },
  { 34, 'r_float', 'repeated', 'float' }, { 35, 'r_uint64', 'repeated', 'uint64' },
  { 30, 'm_ss', 'map', 'string', 'string' }, { 31, 'm_im', 'map', 'int32', 'message', Inner },
  { 32, 'm_se', 'map', 'string', 'enum', Color }, { 33, 'm_bi', 'map', 'bool', 'int64' },
  { 40, 'o_int32', 'optional', 'int32' }, { 41, 'o_string', 'optional', 'string' },
  { 50, 'c_string', 'string', oneof = 'choice' }, { 51, 'c_msg', 'message', Inner, oneof = 'choice' },
  { 52, 'c_int', 'int64', oneof = 'choice' },
  { 536870911, 'max_number', 'int64' },
} }

-- name -> {type=, list=, key=, value=} for a message schema
local function info_of(schema)
  local t = {}
  for _, f in ipairs(schema.fields) do
    local at = (f[3] == 'repeated' or f[3] == 'optional') and 4 or 3
    t[f[2]] = { type = f[at], list = f[3] == 'repeated', key = f[at + 1], value = f[at + 2] }
  end
  return t
end
local INFO = { [All] = info_of(All), [Inner] = info_of(Inner) }

-- Text format (protoc's input) of a Lua value of All or Inner (every nested message is an Inner).
local function quote(s)
  return '"' .. s:gsub('[^%w _.,:;!?%-]', function(c) return string.format('\\%03o', c:byte()) end) .. '"'
end
local function scalar(t, v)
  if t == 'string' or t == 'bytes' then return quote(v) end
  if t == 'bool' then return tostring(v) end
  if t == 'double' or t == 'float' then
    if v ~= v then return 'nan' end
    if v == math.huge then return 'inf' end
    if v == -math.huge then return '-inf' end
    return string.format('%.17g', v)
  end
  if (t == 'uint64' or t == 'fixed64') and v < 0 then return string.format('0x%x', v) end
  return string.format('%d', v)
end
local function text(v, schema)
  local info, out, names = INFO[schema or All], {}, {}
  for k in pairs(v) do names[#names + 1] = k end
  table.sort(names)
  local function one(name, i, x)
    if i.type == 'message' then out[#out + 1] = name .. ' { ' .. text(x, Inner) .. ' }'
    else out[#out + 1] = name .. ': ' .. scalar(i.type, x) end
  end
  for _, name in ipairs(names) do
    local i, val = assert(info[name], name), v[name]
    if i.type == 'map' then
      local keys = {}
      for k in pairs(val) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b)
        if type(a) == 'boolean' then return not a and b end
        return a < b
      end)
      for _, k in ipairs(keys) do
        local vt = i.value == 'message' and ('value { ' .. text(val[k], Inner) .. ' }')
          or ('value: ' .. scalar(i.value, val[k]))
        out[#out + 1] = string.format('%s { key: %s %s }', name, scalar(i.key, k), vt)
      end
    elseif i.list then
      for _, x in ipairs(val) do one(name, i, x) end
    else
      one(name, i, val)
    end
  end
  return table.concat(out, ' ')
end

local function protoc(args, stdin)
  local argv = { 'protoc', '-I' .. FIX, FIX .. '/alltypes.proto' }
  for _, a in ipairs(args) do table.insert(argv, 2, a) end
  local r = assert(proc.run { argv = argv, stdin = stdin, timeout = 60 })
  assert(r.code == 0, 'protoc ' .. table.concat(args, ' ') .. ' failed: ' .. r.stderr)
  return r.stdout
end

local function hex(s)
  return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end))
end

local diff = require('spec.helpers.common').diff

local CASES = {
  { 'empty message', {} },
  { 'every scalar at a typical value', {
    f_double = 3.25, f_float = 1.5, f_int64 = -1234567890123, f_uint64 = 1234567890123, f_int32 = -42,
    f_fixed64 = 77, f_fixed32 = 4000000000, f_bool = true, f_string = 'héllo\n"q"', f_bytes = '\0\1\2\255',
    f_uint32 = 4294967295, f_enum = 2, f_sfixed32 = -7, f_sfixed64 = -8, f_sint32 = -2147483648,
    f_sint64 = math.mininteger, f_msg = { x = 1, s = 'in' } } },
  { 'extremes: 64-bit limits, uint64 above 2^63, negative int32 (10-byte varint), negative enum', {
    f_int64 = math.maxinteger, f_uint64 = -1, f_fixed64 = math.mininteger, f_int32 = -1, f_sint32 = 2147483647,
    f_sint64 = math.maxinteger, f_sfixed64 = math.mininteger, f_sfixed32 = -2147483648, f_enum = -1,
    f_double = -0.0, f_float = -2.5, max_number = 9 } },
  { 'infinities and NaN', { f_double = math.huge, f_float = -math.huge,
    r_double = { string.unpack('<d', string.pack('<i8', 0x7ff8000000000000)), -math.huge } } },
  { 'repeated: packed numerics, unpacked ints, strings, bytes, messages, floats, uint64', {
    r_int32 = { 1, -1, 300, 0 }, r_sint64 = { -1, 1, math.mininteger }, r_double = { 0.5, -0.0, 1e300 },
    r_fixed32 = { 0, 4294967295 }, r_bool = { true, false, true }, r_enum = { 1, 2, -1, 7 },
    r_unpacked = { 5, -5, 0 }, r_string = { 'a', '', 'ccc' }, r_bytes = { '\0', '\255\254' },
    r_msg = { { x = 1 }, {}, { s = 'z', kids = { { x = 2 }, { x = 3, kids = { { s = 'deep' } } } } } },
    r_float = { 0.25, -1 }, r_uint64 = { -1, 0, 1 } } },
  { 'maps of every kind (several entries)', {
    m_ss = { a = '1', b = '', [''] = 'empty key' }, m_im = { [-1] = { x = 9 }, [0] = {}, [5] = { s = 'five' } },
    m_se = { red = 1, none = 0, neg = -1 }, m_bi = { [true] = -1, [false] = 0 } } },
  { 'optional fields set to their defaults are sent', { o_int32 = 0, o_string = '' } },
  { 'a oneof member at its default is sent (string)', { c_string = '' } },
  { 'a oneof message member', { c_msg = { x = -3 } } },
  { 'a oneof integer member at zero', { c_int = 0 } },
}

-- Expected decode: the value with float fields rounded through float32 (as protoc stores them).
local function float32(x) return (string.unpack('<f', string.pack('<f', x))) end
local function expected(v)
  local e = {}
  for k, x in pairs(v) do e[k] = x end
  if e.f_float then e.f_float = float32(e.f_float) end
  if e.r_float then
    e.r_float = {}
    for i, x in ipairs(v.r_float) do e.r_float[i] = float32(x) end
  end
  -- proto3: a singular field at its default is not sent, so it decodes absent
  for _, f in ipairs(All.fields) do
    local name, at = f[2], 3
    if f[3] == 'repeated' or f[3] == 'optional' then at = 4 end
    local x = e[name]
    if at == 3 and not f.oneof and f[3] ~= 'message' and f[3] ~= 'map' and x ~= nil then
      if x == 0 and math.type(x) == 'integer' or x == false or x == '' or (x == 0 and 1 / x > 0) then e[name] = nil end
    end
  end
  return e
end

describe('protobuf codec vs protoc (spec/fixtures/protobuf/alltypes.proto)', function()
  for _, case in ipairs(CASES) do
    local name, value = case[1], case[2]
    it(name .. ': encode agrees byte for byte, and both decoders read the other\'s bytes', function()
      local ours = protobuf.encode(All, value)
      local theirs = protoc({ '--encode=cseng.test.All' }, text(value))
      assert.equal(hex(theirs), hex(ours), 'text: ' .. text(value))
      local back = assert(protobuf.decode(All, theirs))
      local d = diff(back, expected(value))
      assert(d == nil, d)
      -- protoc reads our bytes back to the same text as its own
      assert.equal(protoc({ '--decode=cseng.test.All' }, theirs), protoc({ '--decode=cseng.test.All' }, ours))
    end)
  end

  it('decodes unpacked encodings of packed fields and packed ones of unpacked fields (both are valid)', function()
    local Unpacked = { name = 'cseng.test.All', fields = {
      { 20, 'r_int32', 'repeated', 'int32', packed = false }, { 26, 'r_unpacked', 'repeated', 'int32' } } }
    local v = { r_int32 = { 1, 2, 3 }, r_unpacked = { 4, 5 } }
    local swapped = protobuf.encode(Unpacked, v)
    assert.not_equal(protobuf.encode(All, v), swapped)
    local back = assert(protobuf.decode(All, swapped))
    assert.same(v, back)
    assert.equal(protoc({ '--decode=cseng.test.All' }, swapped), protoc({ '--decode=cseng.test.All' }, protobuf.encode(All, v)))
  end)

  it('skips unknown fields of every wire type (a subset schema reads a full message)', function()
    local full = protoc({ '--encode=cseng.test.All' }, text(CASES[2][2]) .. ' ' .. text(CASES[5][2]) .. ' ' .. text(CASES[6][2]))
    local Subset = { name = 'cseng.test.All', fields = { { 9, 'f_string', 'string' }, { 27, 'r_string', 'repeated', 'string' } } }
    local t = assert(protobuf.decode(Subset, full))
    assert.same({ f_string = 'héllo\n"q"', r_string = { 'a', '', 'ccc' } }, t)
    -- groups (wire types 3/4) are skipped too: field 7 as a group holding a varint and a nested group
    local group = '\x3b\x08\x01\x43\x08\x02\x44\x3c' .. '\x48\x05'
    assert.same({ f_string = nil }, assert(protobuf.decode(Subset, group)))
  end)

  it('the last of repeated singular values wins, messages merge, a oneof keeps the last member', function()
    local a = protobuf.encode(All, { f_int32 = 1, f_msg = { x = 1 }, c_string = 'a' })
    local b = protobuf.encode(All, { f_int32 = 2, f_msg = { s = 'two' }, c_int = 5 })
    local t = assert(protobuf.decode(All, a .. b))
    assert.same({ f_int32 = 2, f_msg = { x = 1, s = 'two' }, c_int = 5 }, t)
    assert.equal(protoc({ '--decode=cseng.test.All' }, a .. b), protoc({ '--decode=cseng.test.All' }, protobuf.encode(All, t)))
  end)

  it('defaults = true fills absent implicit-presence fields, not optional, oneof or message ones', function()
    local t = assert(protobuf.decode(All, '', { defaults = true }))
    assert.equal(0, t.f_int32)
    assert.equal('integer', math.type(t.f_int64))
    assert.equal('float', math.type(t.f_double))
    assert.equal(false, t.f_bool)
    assert.equal('', t.f_bytes)
    assert.same({}, t.r_msg)
    assert.same({}, t.m_ss)
    assert.is_nil(t.o_int32)
    assert.is_nil(t.c_string)
    assert.is_nil(t.f_msg)
  end)

  it('enums encode from names too; decode gives numbers', function()
    assert.equal(protobuf.encode(All, { f_enum = 1, r_enum = { 2, -1 }, m_se = { k = 1 } }),
      protobuf.encode(All, { f_enum = 'RED', r_enum = { 'GREEN', 'NEGATIVE' }, m_se = { k = 'RED' } }))
    assert.same({ f_enum = 1 }, assert(protobuf.decode(All, protobuf.encode(All, { f_enum = 'RED' }))))
  end)
end)

describe('protobuf encode errors name the field', function()
  local cases = {
    { { f_int32 = 'x' }, 'cseng.test.All.f_int32: expected an integer, got string' },
    { { f_int32 = 1.5 }, 'cseng.test.All.f_int32: expected an integer, got a fractional number' },
    { { f_int32 = 2 ^ 31 | 0 }, 'cseng.test.All.f_int32: 2147483648 out of range for int32' },
    { { f_uint32 = -1 }, 'cseng.test.All.f_uint32: -1 out of range for uint32' },
    { { f_string = 5 }, 'cseng.test.All.f_string: expected a string, got number' },
    { { f_bool = 1 }, 'cseng.test.All.f_bool: expected a boolean, got number' },
    { { f_double = '1' }, 'cseng.test.All.f_double: expected a number, got string' },
    { { f_msg = 'x' }, 'cseng.test.All.f_msg: expected a table (message cseng.test.Inner), got string' },
    { { r_msg = { { x = 1 }, { y = 2 } } }, 'cseng.test.All.r_msg[2]: unknown field \'y\' (message cseng.test.Inner)' },
    { { r_int32 = { 1, 'two' } }, 'cseng.test.All.r_int32[2]: expected an integer, got string' },
    { { m_im = { [3] = { x = 'no' } } }, 'cseng.test.All.m_im[3].x: expected an integer, got string' },
    { { m_ss = { [1] = 'a' } }, 'cseng.test.All.m_ss[1]: map key: expected a string, got number' },
    { { f_enum = 'BLUE' }, 'cseng.test.All.f_enum: \'BLUE\' is not a value of this enum' },
    { { c_string = 'a', c_int = 1 }, 'oneof \'choice\'' },
    { { typo = 1 }, 'cseng.test.All: unknown field \'typo\' (message cseng.test.All)' },
  }
  for _, c in ipairs(cases) do
    it(c[2], function()
      local ok, err = pcall(protobuf.encode, All, c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
    end)
  end

  it('a cycle in the value is an error, not a crash', function()
    local v = { x = 1 }
    v.kids = { v }
    local ok, err = pcall(protobuf.encode, Inner, v)
    assert.is_false(ok)
    assert.truthy(err:find('nesting deeper than 64', 1, true), err)
  end)
end)

describe('protobuf schema errors', function()
  local cases = {
    { { name = 'x.M' }, "protobuf schema x.M: 'fields' must be a list of fields, got nil" },
    { { name = 'x.M', fields = { { 1, 'a', 'strin' } } }, "protobuf schema x.M.a: unknown type 'strin'" },
    { { name = 'x.M', fields = { { 0, 'a', 'string' } } }, 'protobuf schema x.M.a: field number must be an integer in 1..2^29-1' },
    { { name = 'x.M', fields = { { 19000, 'a', 'string' } } }, 'not 19000..19999' },
    { { name = 'x.M', fields = { { 1, 'a', 'string' }, { 1, 'b', 'int32' } } }, 'protobuf schema x.M: field number 1 is used twice' },
    { { name = 'x.M', fields = { { 1, 'a', 'string' }, { 2, 'a', 'int32' } } }, "protobuf schema x.M: field name 'a' is used twice" },
    { { name = 'x.M', fields = { { 1, 'a', 'message' } } }, 'protobuf schema x.M.a: a message field needs its message schema' },
    { { name = 'x.M', fields = { { 1, 'a', 'map', 'double', 'string' } } }, 'protobuf schema x.M.a: a map key cannot be double' },
    { { name = 'x.M', fields = { { 1, 'a', 'string', packed = true } } }, "'packed' applies to repeated numeric fields only" },
    { { name = 'x.M', fields = { { 1, 'a', 'repeated', 'int32', oneof = 'o' } } }, 'a oneof member cannot be repeated' },
    { { name = 'x.M', fields = { { 1, 'a', 'message', { name = 'x.N', fields = { { 1, 'b', 'bad' } } } } } },
      "protobuf schema x.N.b: unknown type 'bad'" },
  }
  for _, c in ipairs(cases) do
    it(c[2], function()
      local ok, err = pcall(protobuf.compile, c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), err)
    end)
  end

  it('a schema that failed to compile leaves nothing half-built behind', function()
    local N = { name = 'x.N', fields = { { 1, 'b', 'bad' } } }
    local M = { name = 'x.M', fields = { { 1, 'n', 'message', N } } }
    assert.is_false(pcall(protobuf.compile, M))
    N.fields[1][3] = 'int32'
    assert.is_true(protobuf.compile(M))
    assert.same({ n = { b = 7 } }, assert(protobuf.decode(M, protobuf.encode(M, { n = { b = 7 } }))))
  end)
end)

describe('protobuf decode of hostile bytes', function()
  local cases = {
    { 'a length past the end', '\x4a\x05ab', 'cseng.test.All.f_string: truncated' },
    { 'a varint longer than 10 bytes', '\x28' .. ('\xff'):rep(10) .. '\x01', 'cseng.test.All.f_int32: varint longer than 10 bytes at byte 1' },
    { 'a varint cut short', '\x28\xff', 'truncated' },
    { 'field number 0', '\x00\x01', 'invalid field number' },
    { 'wire type 7', '\x0f', 'invalid wire type' },
    { 'an end-group with no start', '\x0c', 'invalid wire type' },
    { 'a fixed64 cut short', '\x31\x01\x02', 'cseng.test.All.f_fixed64: truncated' },
    { 'a truncated packed run', '\xa2\x01\x02\x01\xff', 'cseng.test.All.r_int32: truncated' },
    { 'a bad byte inside a nested message', '\x52\x02\x08\xff', 'cseng.test.All.f_msg.x: truncated' },
    { 'a group never closed', '\x3b\x08\x01', 'truncated' },
    { 'nesting deeper than 64', (function()
      local m = ''
      for _ = 1, 70 do m = '\x1a' .. string.char(#m < 128 and #m or (#m % 128) | 128) .. (#m < 128 and '' or string.char(#m // 128)) .. m end
      return m
    end)(), 'nesting deeper than 64' },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ' -> EPROTOBUF naming the field and byte', function()
      local schema = c[3]:find('Inner', 1, true) and Inner or All
      if c[1]:find('nesting', 1, true) then schema = Inner end
      local t, err, code = protobuf.decode(schema, c[2])
      assert.is_nil(t)
      assert.equal('EPROTOBUF', code)
      assert.truthy(err:find(c[3], 1, true), err)
    end)
  end
end)

describe('gRPC framing', function()
  it('frames and deframes, keeping a partial frame for the next chunk', function()
    local a, b = protobuf.frame('hello'), protobuf.frame('')
    assert.equal('\0\0\0\0\5hello', a)
    local stream = a .. b .. protobuf.frame('tail')
    for cut = 0, #stream do
      local got, rest = {}, ''
      for _, part in ipairs({ stream:sub(1, cut), stream:sub(cut + 1) }) do
        local frames, used = assert(protobuf.deframe(rest .. part))
        for _, f in ipairs(frames) do got[#got + 1] = f end
        rest = (rest .. part):sub(used + 1)
      end
      assert.same({ 'hello', '', 'tail' }, got)
      assert.equal('', rest)
    end
  end)

  it('refuses compressed frames, unknown flags and frames over the limit', function()
    local _, err, code = protobuf.deframe(protobuf.frame('x', true))
    assert.equal('EPROTOBUF', code)
    assert.truthy(err:find('compressed', 1, true))
    _, err = protobuf.deframe('\2\0\0\0\0')
    assert.truthy(err:find('flags byte 0x02', 1, true), err)
    _, err = protobuf.deframe('\0\255\255\255\255', 1024)
    assert.truthy(err:find('larger than the 1024-byte limit', 1, true), err)
  end)
end)

describe("Modal's protos through protoc's FileDescriptorSet", function()
  local index
  local function modal_index()
    if not index then
      local bytes = assert(D.protoc({ 'modal_proto/api.proto', 'modal_proto/task_command_router.proto' }, { MODAL }))
      index = assert(D.index(bytes))
    end
    return index
  end

  it('decodes the whole set: every message, enum and service of both files', function()
    local idx = modal_index()
    local req = idx.messages['.modal.client.SandboxCreateRequest']
    assert.truthy(req, 'SandboxCreateRequest indexed')
    local by_name = {}
    for _, f in ipairs(req.desc.field) do by_name[f.name] = f end
    assert.equal(1, by_name.app_id.number)
    assert.equal(9, by_name.app_id.type)
    assert.equal('.modal.client.Sandbox', by_name.definition.type_name)
    assert.equal(D.LABEL_REPEATED, by_name.tags.label)
    local svc = idx.services['modal.client.ModalClient']
    assert.equal('.modal.client.SandboxCreateRequest', svc.methods.SandboxCreate.input_type)
    assert.truthy(idx.services['modal.task_command_router.TaskCommandRouter'].methods.TaskExecStdioRead.server_streaming)
    assert.truthy(idx.enums['.modal.client.GenericResult.GenericStatus'])
  end)

  it('D.check finds no problem in a correct schema and names every kind of mistake', function()
    local idx = modal_index()
    local Tag = { name = 'modal.client.SandboxTag', fields = { { 1, 'tag_name', 'string' }, { 2, 'tag_value', 'string' } } }
    local Req = { name = 'modal.client.SandboxCreateRequest', fields = {
      { 1, 'app_id', 'string' }, { 4, 'tags', 'repeated', 'message', Tag } } }
    assert.same({}, D.check(Req, idx))
    local Bad = { name = 'modal.client.SandboxCreateRequest', fields = {
      { 1, 'app_id', 'bytes' }, { 3, 'env', 'string' }, { 4, 'tags', 'message', Tag }, { 999, 'nope', 'string' } } }
    local problems = table.concat(D.check(Bad, idx), '\n')
    assert.truthy(problems:find('SandboxCreateRequest.app_id: type is string in the protos, bytes here', 1, true), problems)
    assert.truthy(problems:find('SandboxCreateRequest.env: field 3 is named environment_name in the protos', 1, true), problems)
    assert.truthy(problems:find('SandboxCreateRequest.tags: repeated in the protos, singular here', 1, true), problems)
    assert.truthy(problems:find('SandboxCreateRequest.nope: no field number 999 in the protos', 1, true), problems)
    assert.same({}, D.check_method(idx, 'modal.client.ModalClient', 'SandboxCreate', Req,
      { name = 'modal.client.SandboxCreateResponse', fields = {} }))
    assert.equal(1, #D.check_method(idx, 'modal.client.ModalClient', 'SandboxCreate', Req, Req))
  end)

  it("descriptor.proto's own descriptor agrees with lua/cseng/lib/protobuf_descriptor.lua's schemas", function()
    local idx = assert(D.index(assert(D.protoc({ 'google/protobuf/descriptor.proto' }, {}))))
    for name, s in pairs(D.schemas) do
      local p = D.check(s, idx)
      assert(#p == 0, name .. ': ' .. table.concat(p, '; '))
    end
  end)
end)
