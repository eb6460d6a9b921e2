--- Parquet files for datasets and for `cseng dataset info|convert`, over the cseng.parquet
--- binding (engine/lparquet.c, decoder in engine/parquet.c).
---
--- Rows are Lua tables: structs are tables keyed by field name, lists (LIST-annotated groups
--- and bare repeated fields) are arrays, INT32/INT64 are integers, FLOAT/DOUBLE are floats,
--- BOOLEAN is a boolean, BYTE_ARRAY (STRING, JSON or raw) and FIXED_LEN_BYTE_ARRAY are strings
--- of the stored bytes. A null is `parquet.null`, which is the same value as `cjson.null`, so a
--- parquet row reads like the JSON row cjson would give for the same data (and is truthy: test
--- `v == parquet.null`, not `not v`). Logical types that are not strings (DECIMAL, DATE,
--- TIMESTAMP, ...) come back as their stored integers or bytes.
local core = require('cseng.parquet')

local parquet = {}

--- The null sentinel (== cjson.null).
parquet.null = core.null

---@class ParquetColumn
---@field path string dotted path, e.g. "metadata.instance.task_id"
---@field type string physical type
---@field logical string|nil logical or converted type ("STRING", "JSON", "LIST", ...)
---@field repetition string REQUIRED|OPTIONAL|REPEATED
---@field codecs string[] codecs used across row groups
---@field encodings string[] encodings used across row groups
---@field compressed_size integer
---@field uncompressed_size integer

---@class ParquetFile
---@field num_rows integer
---@field file_size integer
---@field version integer
---@field created_by string|nil
---@field schema table root node: {name, kind="struct"|"list"|"leaf", repetition, type, logical, fields}
---@field columns ParquetColumn[]
---@field row_groups table[] {num_rows, total_byte_size, columns={{path, codec, encodings, num_values, ...}}}
---@field key_value {key:string, value:string|nil}[]
---@field rows table[]|nil absent when read with {rows=false}

--- Reads every row of a parquet file.
---@param path string
---@param opts? {nulls?: "null"|"omit", max_memory?: integer}
---@return table[]|nil rows
---@return ParquetFile|string file_or_error
---@return string|nil code stable error code (ENOENT, PARQUET_MAGIC, PARQUET_CODEC, ...)
function parquet.rows(path, opts)
  local f, err, code = core.read(path, opts)
  if not f then return nil, err, code end
  return f.rows, f
end

--- Reads a file's metadata (schema, columns, row groups) without decoding rows.
---@param path string
---@return ParquetFile|nil
---@return string|nil err
---@return string|nil code
function parquet.info(path)
  return core.info(path)
end

local function schema_lines(node, indent, out)
  for _, f in ipairs(node.fields or {}) do
    local what
    if f.kind == 'leaf' then
      what = f.type .. (f.type_length and ('(' .. f.type_length .. ')') or '')
      if f.logical then what = what .. ' ' .. f.logical end
    else
      what = f.kind == 'list' and 'list' or 'struct'
      if f.logical and f.logical ~= 'LIST' then what = what .. ' ' .. f.logical end
    end
    out[#out + 1] = string.format('%s%s: %s, %s', indent, f.name, what, f.repetition:lower())
    if f.fields then schema_lines(f, indent .. '  ', out) end
  end
end

--- The text `cseng dataset info x.parquet` prints: rows, row groups, codecs, schema, columns.
---@param path string
---@return string|nil text
---@return string|nil err
---@return string|nil code
function parquet.info_text(path)
  local f, err, code = core.info(path)
  if not f then return nil, err, code end
  local out = {}
  local function add(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  local codecs, seen = {}, {}
  for _, c in ipairs(f.columns) do
    for _, k in ipairs(c.codecs) do
      if not seen[k] then seen[k] = true; codecs[#codecs + 1] = k end
    end
  end
  table.sort(codecs)
  add('file: %s (%d bytes)', path, f.file_size)
  add('created by: %s', f.created_by or '(unknown)')
  add('rows: %d in %d row group%s', f.num_rows, #f.row_groups, #f.row_groups == 1 and '' or 's')
  add('codecs: %s', #codecs > 0 and table.concat(codecs, ', ') or '(none)')
  add('schema:')
  schema_lines(f.schema, '  ', out)
  add('columns:')
  local w = 4
  for _, c in ipairs(f.columns) do w = math.max(w, #c.path) end
  add('  %-' .. w .. 's  %-20s  %-12s  %-36s  %12s  %12s', 'path', 'type', 'codecs', 'encodings',
      'compressed', 'uncompressed')
  for _, c in ipairs(f.columns) do
    local ty = c.type .. (c.logical and ('/' .. c.logical) or '')
    add('  %-' .. w .. 's  %-20s  %-12s  %-36s  %12d  %12d', c.path, ty, table.concat(c.codecs, ','),
        table.concat(c.encodings, ','), c.compressed_size, c.uncompressed_size)
  end
  return table.concat(out, '\n') .. '\n'
end

--- `cseng dataset convert x.parquet -o x.jsonl`: one JSON object per row, fields in schema
--- order, nulls as null, exact 64-bit integers, floats in shortest round-trip form. Bytes
--- that are not valid UTF-8 are written as \u00XX (their Latin-1 reading).
---@param path string
---@param out string output path, or "-" for stdout
---@return integer|nil rows written
---@return string|nil err
---@return string|nil code
function parquet.to_jsonl(path, out)
  return core.to_jsonl(path, out)
end

return parquet
