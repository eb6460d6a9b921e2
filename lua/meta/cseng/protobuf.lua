---@meta cseng.protobuf
-- LuaLS only: the types of `require 'cseng.protobuf'` (engine/lprotobuf.c over engine/protobuf.c).
-- Never loaded at run time (the binary preloads cseng.protobuf).

---The protobuf wire codec driven by message schemas written as Lua tables, and gRPC's 5-byte
---framing. Synchronous. Schema format: docs/ENGINE.md, "cseng.protobuf".
---@class cseng.protobuf
local protobuf = {}

---A field: `{number, name, [label,] type, [ref], oneof=, packed=}`; label `'repeated'` or
---`'optional'` (proto3 explicit presence); type a scalar type name, `'message'` (ref: its schema),
---`'enum'` (ref: its enum schema, optional), or `'map'` followed by key type, value type, value ref.
---@alias cseng.protobuf.Field table

---@class cseng.protobuf.Schema
---@field name string the message's full name, e.g. 'modal.client.SandboxCreateRequest'
---@field fields cseng.protobuf.Field[]

---@class cseng.protobuf.Enum
---@field name string full name, e.g. 'modal.client.GenericResult.GenericStatus'
---@field values table<string, integer>

---Encode a message. Raises on a bad schema or value, naming the field path
---(`protobuf.encode: pkg.Msg.items[2].name: expected a string, got number`).
---@param schema cseng.protobuf.Schema
---@param value table
---@return string bytes
function protobuf.encode(schema, value) end

---Decode a message: absent fields stay nil unless `opts.defaults`; 64-bit integers are Lua
---integers (uint64 above 2^63-1 wrap to negative), enums are numbers, maps are tables.
---@param schema cseng.protobuf.Schema
---@param bytes string
---@param opts? {defaults?: boolean}
---@return table? message
---@return string? err "<Msg>.<field path>: <reason> at byte N"
---@return "EPROTOBUF"? code
function protobuf.decode(schema, bytes, opts) end

---Check (and cache) a schema now; raises naming the bad field.
---@param schema cseng.protobuf.Schema
---@return true
function protobuf.compile(schema) end

---gRPC framing: a flag byte (1 = compressed), the big-endian 4-byte length, the payload.
---@param payload string
---@param compressed? boolean
---@return string
function protobuf.frame(payload, compressed) end

---The complete frames at the start of data and how many bytes they took (keep the rest for
---the next chunk). Compressed frames, flags other than 0/1 and frames over max fail.
---@param data string
---@param max? integer largest payload (default 4 MiB)
---@return string[]? payloads
---@return integer|string used_or_err
---@return "EPROTOBUF"? code
function protobuf.deframe(data, max) end

return protobuf
