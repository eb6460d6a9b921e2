-- The parquet reader (engine/parquet.c via cseng.parquet, helpers in lua/cseng/workload/parquet.lua) against
-- files from two independent writers (spec/fixtures/parquet, see its README), the seed's
-- smoke16 parquet against the JSONL beside it, and damaged files.
local core = require('cseng.parquet')
local parquet = require('cseng.workload.parquet')
local cjson = require('cjson')

local FIX = 'spec/fixtures/parquet/'
local SHARED = os.getenv('CSENG_SHARED') or '../shared'
local SMOKE = SHARED .. '/data/terminalbench_2026_03_05_smoke16'

local function slurp(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('a')
  f:close()
  return s
end

local function tmpname()
  local p = os.tmpname()
  finally(function() os.remove(p) end)
  return p
end

local diff = require('spec.helpers.common').diff

local manifest = dofile(FIX .. 'manifest.lua')

describe('parquet fixtures from independent writers', function()
  for _, m in ipairs(manifest) do
    local file = FIX .. m.name .. '.parquet'
    if m.error then
      it(m.name .. ': ' .. m.desc .. ' is a clear ' .. m.error .. ' error naming the column', function()
        local r, err, code = core.read(file)
        assert.is_nil(r)
        assert.are.equal(m.error, code)
        assert.truthy(err:find('column n', 1, true), err)
        assert.truthy(err:find('unsupported compression codec ' .. m.codec, 1, true), err)
        -- metadata still reads: info works on files whose pages cannot be decoded
        local info = assert(core.info(file))
        assert.are.same({ m.codec }, info.columns[1].codecs)
      end)
    else
      it(string.format('%s (%s, %s, pages %s): %s', m.name, m.writer, m.codec, m.pages, m.desc), function()
        local expected = dofile(FIX .. m.expected .. '.expected.lua')
        local f, err, code = core.read(file)
        assert(f, tostring(err) .. ' ' .. tostring(code))
        assert.are.equal(#expected, f.num_rows)
        assert.are.equal(#expected, #f.rows)
        for i = 1, #expected do
          local d = diff(f.rows[i], expected[i], 'row ' .. i)
          assert(d == nil, d)
        end
        for _, c in ipairs(f.columns) do
          assert.are.same({ m.codec }, c.codecs)
        end
      end)
    end
  end

  it('covers every codec, both page versions and every encoding in scope', function()
    local codecs, pages, encodings = {}, {}, {}
    for _, m in ipairs(manifest) do
      if not m.error then
        codecs[m.codec], pages[m.pages] = true, true
        for _, c in ipairs(assert(core.info(FIX .. m.name .. '.parquet')).columns) do
          for _, e in ipairs(c.encodings) do encodings[e] = true end
        end
      end
    end
    assert.are.same({ UNCOMPRESSED = true, SNAPPY = true, GZIP = true, ZSTD = true }, codecs)
    assert.are.same({ v1 = true, v2 = true }, pages)
    assert.are.same({ PLAIN = true, RLE = true, RLE_DICTIONARY = true, DELTA_BINARY_PACKED = true,
      DELTA_LENGTH_BYTE_ARRAY = true, DELTA_BYTE_ARRAY = true, BYTE_STREAM_SPLIT = true }, encodings)
  end)

  it('keeps INT64 exact, INT32 unsigned, bytes verbatim and types distinct', function()
    local r = assert(core.read(FIX .. 'pw_zstd_v1.parquet')).rows
    assert.are.equal(9007199254740993, r[3].i64)
    assert.are.equal(math.maxinteger, r[5].i64)
    assert.are.equal(math.mininteger, r[6].i64)
    assert.are.equal(4000000000, r[2].u32)
    assert.are.equal('integer', math.type(r[1].i32))
    assert.are.equal('float', math.type(r[1].f64))
    assert.are.equal('\255\254\0\128', r[2].bin)
    assert.are.equal('日本語 ✓ 🎉', r[5].s)
    assert.are.equal(core.null, r[3].b)
    assert.are.equal(cjson.null, r[3].b)
  end)

  it('reads nulls, empty lists, null elements and nested structs', function()
    local r = assert(core.read(FIX .. 'hy_nested_snappy.parquet')).rows
    assert.are.equal('Oslo', r[1].person.address.city)
    assert.are.equal(core.null, r[2].person)
    assert.are.same({}, r[2].tags)
    assert.are.equal(core.null, r[3].tags)
    assert.are.equal(3, #r[4].tags)
    assert.are.equal(core.null, r[4].tags[1])
    assert.are.equal('c', r[4].tags[2])
    assert.are.equal(core.null, r[4].matrix[1])
    assert.are.same({}, r[4].matrix[2])
    assert.are.equal(5, r[4].matrix[3][2])
    assert.are.equal(core.null, r[4].points[2].y)
  end)

  it('omits null struct fields with nulls = "omit" but keeps list elements', function()
    local r = assert(core.read(FIX .. 'hy_nested_snappy.parquet', { nulls = 'omit' })).rows
    assert.is_nil(r[2].person)
    assert.is_nil(r[3].person.name)
    assert.are.same({ 'a', 'b' }, r[1].tags)
    assert.are.equal(core.null, r[4].tags[1])
    assert.has_error(function() core.read(FIX .. 'hy_nested_snappy.parquet', { nulls = 'drop' }) end)
  end)

  it('reads several row groups with several pages each', function()
    local f = assert(core.read(FIX .. 'hy_many_rows.parquet'))
    assert.are.equal(3, #f.row_groups)
    assert.are.equal(2500, #f.rows)
    assert.are.equal(2499 * 1000003 - 5000000, f.rows[2500].id)
    assert.are.equal('w2', f.rows[2499].word)
    assert.are.equal(core.null, f.rows[2500].word)
    assert.are.equal(2498 * 0.25, f.rows[2499].x)
    assert.are.equal(core.null, f.rows[2496].x)
  end)

  it('decodes from bytes exactly as from a path', function()
    local a = assert(core.read(FIX .. 'pw_gzip_v2.parquet'))
    local b = assert(core.decode(slurp(FIX .. 'pw_gzip_v2.parquet')))
    assert.is_nil(diff(b.rows, a.rows))
  end)

  it('describes schema, columns, codecs and key-value metadata', function()
    local f = assert(core.info(FIX .. 'pw_snappy_v1.parquet'))
    assert.is_nil(f.rows)
    assert.are.equal(6, f.num_rows)
    local by = {}
    for _, fld in ipairs(f.schema.fields) do by[fld.name] = fld end
    assert.are.equal('list', by.tags.kind)
    assert.are.equal('struct', by.person.kind)
    assert.are.equal('leaf', by.s.kind)
    assert.are.equal('STRING', by.s.logical)
    assert.are.equal('FIXED_LEN_BYTE_ARRAY', by.fixed.type)
    assert.are.equal(4, by.fixed.type_length)
    local paths = {}
    for _, c in ipairs(f.columns) do paths[c.path] = c end
    assert.truthy(paths['person.address.city'])
    assert.are.equal(1, paths['tags.list.item'] and paths['tags.list.item'].max_repetition_level
      or paths['tags.list.element'].max_repetition_level)
  end)
end)

describe('parquet: the seed smoke16 file', function()
  it('reads to the same 16 tasks as the JSONL beside it', function()
    local f, err = core.read(SMOKE .. '.parquet')
    assert(f, err)
    local want = {}
    for line in slurp(SMOKE .. '.jsonl'):gmatch('[^\n]+') do want[#want + 1] = cjson.decode(line) end
    assert.are.equal(16, #want)
    assert.are.equal(16, #f.rows)
    for i, w in ipairs(want) do
      local inst = f.rows[i].metadata.instance
      assert.are.equal(w.task_id, inst.task_id)
      assert.are.equal(w.instruction, inst.instruction)
      assert.are.equal(w.prompt, f.rows[i].prompt)
      -- the parquet stores task_files as a JSON string; the archive inside is byte-identical
      local tf = cjson.decode(inst.task_files)
      assert.are.equal(w.task_files.encoding, tf.encoding)
      assert.are.equal(w.task_files.content, tf.content)
    end
  end)

  it('rows() gives the rows and the file table', function()
    local rows, f = parquet.rows(SMOKE .. '.parquet')
    assert.are.equal(16, #rows)
    assert.are.equal(16, f.num_rows)
    local none, err, code = parquet.rows(SMOKE .. '.missing.parquet')
    assert.is_nil(none)
    assert.are.equal('ENOENT', code)
    assert.truthy(err:find('missing', 1, true))
  end)

  it('info_text shows rows, codecs, schema and columns', function()
    local text = assert(parquet.info_text(SMOKE .. '.parquet'))
    assert.truthy(text:find('rows: 16 in 1 row group\n', 1, true), text)
    assert.truthy(text:find('codecs: SNAPPY\n', 1, true), text)
    assert.truthy(text:find('created by: parquet-cpp-arrow', 1, true), text)
    assert.truthy(text:find('    instance: struct, optional\n      instruction: BYTE_ARRAY STRING, optional', 1, true), text)
    assert.truthy(text:find('metadata.instance.task_id', 1, true), text)
    assert.truthy(text:find('RLE_DICTIONARY', 1, true), text)
  end)

  it('to_jsonl writes 16 lines that decode to the same rows', function()
    local out = tmpname()
    assert.are.equal(16, assert(parquet.to_jsonl(SMOKE .. '.parquet', out)))
    local rows = assert(core.read(SMOKE .. '.parquet')).rows
    local n = 0
    for line in slurp(out):gmatch('[^\n]+') do
      n = n + 1
      local d = diff(cjson.decode(line), rows[n], 'line ' .. n)
      assert(d == nil, d)
    end
    assert.are.equal(16, n)
  end)
end)

describe('parquet to_jsonl', function()
  it('round-trips nested rows through JSON, nulls as null, fields in schema order', function()
    local out = tmpname()
    assert.are.equal(4, assert(parquet.to_jsonl(FIX .. 'hy_nested_gzip.parquet', out)))
    local lines = {}
    for line in slurp(out):gmatch('[^\n]+') do lines[#lines + 1] = line end
    assert.are.equal('{"id":2,"person":null,"tags":[],"matrix":[],"points":[]}', lines[2])
    assert.are.equal('{"id":4,"person":{"name":"Bo","address":{"city":null,"zip":9}},'
      .. '"tags":[null,"c",null],"matrix":[null,[],[null,5]],"points":[null,{"x":3.5,"y":null}]}', lines[4])
    local rows = assert(core.read(FIX .. 'hy_nested_gzip.parquet')).rows
    for i, line in ipairs(lines) do
      local got = cjson.decode(line)
      -- cjson reads every number as a float; compare values, not subtypes
      assert.are.same(rows[i], got)
    end
  end)

  it('writes exact integers, shortest floats, escapes, and \\u00XX for bytes that are not UTF-8', function()
    local out = tmpname()
    assert(parquet.to_jsonl(FIX .. 'hy_types_plain_uncompressed.parquet', out))
    local lines = {}
    for line in slurp(out):gmatch('[^\n]+') do lines[#lines + 1] = line end
    assert.truthy(lines[3]:find('"i64":9007199254740993,', 1, true), lines[3])
    assert.truthy(lines[6]:find('"i64":-9223372036854775808,', 1, true), lines[6])
    assert.truthy(lines[2]:find('"f32":-0.1,', 1, true), lines[2])
    assert.truthy(lines[1]:find('"f64":0.1,', 1, true), lines[1])
    assert.truthy(lines[6]:find('"f64":9007199254740992.0,', 1, true) or lines[6]:find('"f64":9.007199254740992e+15,', 1, true), lines[6])
    assert.truthy(lines[3]:find([["s":"quote \" backslash \\ newline \n tab \t"]], 1, true), lines[3])
    assert.truthy(lines[2]:find([["bin":"\u00ff\u00fe\u0000\u0080"]], 1, true), lines[2])
    assert.truthy(lines[6]:find([["bin":"\u00c3(",]], 1, true), lines[6])
    assert.truthy(lines[5]:find('"s":"日本語 ✓ 🎉"', 1, true), lines[5])
    for _, line in ipairs(lines) do cjson.decode(line) end
  end)

  it('leaves no output file behind when the input cannot be decoded', function()
    local out = tmpname()
    local r, err, code = parquet.to_jsonl(FIX .. 'pw_lz4raw.parquet', out)
    assert.is_nil(r)
    assert.are.equal('PARQUET_CODEC', code)
    assert.truthy(err:find('LZ4_RAW', 1, true))
    assert.is_nil(io.open(out, 'rb'))
  end)

  it('reports a missing input and an unwritable output', function()
    local r, _, code = parquet.to_jsonl(FIX .. 'nope.parquet', os.tmpname())
    assert.is_nil(r)
    assert.are.equal('ENOENT', code)
    local err
    r, err, code = parquet.to_jsonl(FIX .. 'hy_nested_gzip.parquet', '/nonexistent-dir/x.jsonl')
    assert.is_nil(r)
    assert.are.equal('EIO', code)
    assert.truthy(err:find('/nonexistent-dir/x.jsonl', 1, true))
  end)
end)

describe('parquet: damaged files are clear errors', function()
  local good = slurp(FIX .. 'pw_snappy_v1.parquet')

  local function read_bytes(bytes)
    local r, err, code = core.decode(bytes)
    assert.is_nil(r)
    assert.are.equal('string', type(err))
    assert.truthy(code:match('^PARQUET_') or code == 'ENOMEM', code)
    return err, code
  end

  it('a bad magic', function()
    local err, code = read_bytes('XXXX' .. good:sub(5))
    assert.are.equal('PARQUET_MAGIC', code)
    assert.truthy(err:find('PAR1', 1, true))
    assert.are.equal('PARQUET_MAGIC', select(3, core.decode('hello world, not parquet')))
  end)

  it('a footer length past the end', function()
    local n = #good
    local bad = good:sub(1, n - 8) .. string.pack('<I4', n) .. 'PAR1'
    local err, code = read_bytes(bad)
    assert.are.equal('PARQUET_TRUNCATED', code)
    assert.truthy(err:find('footer length', 1, true), err)
  end)

  it('every truncation of a file', function()
    for len = 0, #good - 1, 7 do read_bytes(good:sub(1, len)) end
  end)

  it('a file cut before its footer but still ending in PAR1', function()
    local err, code = read_bytes(good:sub(1, 200) .. good:sub(-8))
    assert.truthy(code == 'PARQUET_TRUNCATED' or code == 'PARQUET_METADATA', code .. ': ' .. err)
  end)

  it('every single corrupted byte fails cleanly or decodes', function()
    -- not an assertion about which: only that nothing crashes (ASan runs this too)
    for i = 1, #good, 3 do
      local b = good:sub(1, i - 1) .. string.char((good:byte(i) + 0x55) % 256) .. good:sub(i + 1)
      local r, err, code = core.decode(b)
      if not r then
        assert.are.equal('string', type(err))
        assert.truthy(code:match('^PARQUET_'), code)
      end
    end
  end)

  it('max_memory bounds what one file may allocate', function()
    local r, err, code = core.read(FIX .. 'hy_many_rows.parquet', { max_memory = 4096 })
    assert.is_nil(r)
    assert.are.equal('PARQUET_LIMIT', code)
    assert.truthy(err:find('max_memory', 1, true))
  end)

  it('misuse raises', function()
    assert.has_error(function() core.read() end)
    assert.has_error(function() core.read(FIX .. 'pw_snappy_v1.parquet', 'x') end)
    assert.has_error(function() core.read(FIX .. 'pw_snappy_v1.parquet', { max_memory = -1 }) end)
  end)
end)
