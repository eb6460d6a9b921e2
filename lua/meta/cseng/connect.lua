---@meta cseng.connect
-- LuaLS only: the types of `require 'cseng.connect'` (engine/lconnect.c over engine/connect.c).
-- Never loaded at run time (the binary preloads cseng.connect).

---The Connect protocol's streaming envelope: flags (1 byte: 0x01 compressed, 0x02
---end-of-stream), payload length (4 bytes, big-endian), payload. Synchronous.
---@class cseng.connect
---@field FLAG_COMPRESSED integer 0x01
---@field FLAG_END_STREAM integer 0x02
local connect = {}

---@class cseng.connect.Frame
---@field flags integer
---@field data string the payload
---@field end_stream boolean flags has 0x02
---@field compressed boolean flags has 0x01

---An incremental decoder: feed it the bytes as they arrive, cut anywhere. Errors are sticky.
---@class cseng.connect.Decoder
local Decoder = {}

---The frames completed by this chunk (possibly none), or the failure: a declared length over
---the limit, reserved flag bits, bytes after the end-of-stream frame.
---@param chunk string
---@return cseng.connect.Frame[]? frames
---@return string? message
---@return "ECONNECT"? code
function Decoder:feed(chunk) end

---At the end of the stream: true at a frame boundary, else the failure (a partial frame).
---@return true? ok
---@return string? message
---@return "ECONNECT"? code
function Decoder:finish() end

---Whether an end-of-stream frame was delivered.
---@return boolean
function Decoder:ended() end

---Bytes held of an unfinished frame (its header included).
---@return integer
function Decoder:buffered() end

---Free the buffer (also __close and __gc); methods on a closed decoder raise.
function Decoder:close() end

---The envelope for a payload: the 5-byte header, then payload.
---@param payload string
---@param flags? integer 0..255 (default 0)
---@return string
function connect.encode(payload, flags) end

---@param max_frame? integer largest accepted payload (default 16 MiB)
---@return cseng.connect.Decoder
function connect.decoder(max_frame) end

return connect
