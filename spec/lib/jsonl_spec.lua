local jsonl = require('cseng.lib.jsonl')
local fs = require('cseng.fs')
local task = require('cseng.task')
local clock = require('cseng.clock')

describe('jsonl', function()
  local dir
  before_each(function() dir = assert(fs.tempdir('cseng-jsonl-spec-')) end)
  after_each(function() if dir then fs.remove_tree(dir) end end)

  describe('append and read', function()
    it('appends one line per record and reads them back with line numbers', function()
      local p = dir .. '/r.jsonl'
      assert.is_true(jsonl.append(p, { event = 'run_started', n = 1 }))
      assert.is_true(jsonl.append(p, { event = 'allocated', id = 'sb-1' }, { sync = true }))
      assert.equal('{"event":"run_started","n":1}\n{"event":"allocated","id":"sb-1"}\n', fs.read(p))
      local seen = {}
      local iter, status = jsonl.read(p)
      for rec, n in iter do seen[#seen + 1] = { rec.event, n } end
      assert.same({ { 'run_started', 1 }, { 'allocated', 2 } }, seen)
      assert.is_nil(status.torn)
      assert.equal(2, status.lines)
    end)

    it('200 tasks appending concurrently produce 200 complete lines', function()
      local p = dir .. '/concurrent.jsonl'
      local ts = {}
      for i = 1, 200 do
        ts[i] = task.spawn(function()
          task.sleep((i % 7) / 1000) -- interleave the tasks
          -- records of very different sizes, some far above PIPE_BUF
          local rec = { task = i, payload = string.rep(string.char(65 + i % 26), (i % 5) * 20000 + i) }
          assert(jsonl.append(p, rec, { sync = i % 50 == 0 }))
          return i
        end)
      end
      for i = 1, 200 do assert.same({ true, i }, { ts[i]:join() }) end
      local recs, status = assert(jsonl.read_all(p))
      assert.equal(200, #recs)
      assert.is_nil(status.torn)
      local seen = {}
      for _, r in ipairs(recs) do
        assert.is_nil(seen[r.task])
        seen[r.task] = true
        assert.equal((r.task % 5) * 20000 + r.task, #r.payload)
        assert.equal(string.rep(string.char(65 + r.task % 26), #r.payload), r.payload)
      end
      local nl = select(2, fs.read(p):gsub('\n', '\n'))
      assert.equal(200, nl)
    end)

    it('does not yield a torn final line, and reports it in the status', function()
      local p = dir .. '/torn.jsonl'
      jsonl.append(p, { a = 1 })
      jsonl.append(p, { a = 2 })
      fs.append(p, '{"a":3,"b":"half-writ')
      local got = {}
      local iter, status = jsonl.read(p)
      assert.is_nil(status.torn) -- filled in as the iteration reaches the end
      for rec, n in iter do got[#got + 1] = rec.a .. '@' .. n end
      assert.same({ '1@1', '2@2' }, got)
      assert.same({ line = 3, offset = 16, text = '{"a":3,"b":"half-writ' }, status.torn)

      local all, st2 = jsonl.read_all(p)
      assert.equal(2, #all)
      assert.equal(3, st2.torn.line)
    end)

    it('a final line that parses but lacks its newline is still torn', function()
      local p = dir .. '/nonl.jsonl'
      fs.write(p, '{"a":1}\n{"a":2}')
      local all, st = jsonl.read_all(p)
      assert.equal(1, #all)
      assert.equal('{"a":2}', st.torn.text)
    end)

    it('raises on a torn final line with strict = true', function()
      local p = dir .. '/torn2.jsonl'
      fs.write(p, '{"a":1}\n{"a":')
      local ok, err = pcall(jsonl.read_all, p, { strict = true })
      assert.is_false(ok)
      assert.equal(p .. ':2: torn final line (5 bytes without a newline)', err.message)
      assert.equal('EPARSE', err.code)
    end)

    it('a malformed middle line raises an error naming the file and line number', function()
      local p = dir .. '/bad.jsonl'
      local lines = {}
      for i = 1, 20 do lines[i] = jsonl.encode({ i = i }) end
      lines[17] = '{"i": 17, oops}'
      fs.write(p, table.concat(lines, '\n') .. '\n')
      local n = 0
      local ok, err = pcall(function()
        for _, ln in jsonl.read(p) do n = ln end
      end)
      assert.is_false(ok)
      assert.equal(16, n) -- lines 1..16 were yielded first
      assert.matches('^' .. p:gsub('%p', '%%%0') .. ':17: malformed JSON: ', err)
      assert.has_error(function() jsonl.read_all(p) end)
    end)

    it('refuses non-JSON numbers as malformed', function()
      local p = dir .. '/nan.jsonl'
      fs.write(p, '{"a":1}\n{"a":NaN}\n')
      local ok, err = pcall(jsonl.read_all, p)
      assert.is_false(ok)
      assert.matches(':2: malformed JSON', err)
      fs.write(p, '{"a":0x10}\n')
      assert.is_false((pcall(jsonl.read_all, p)))
    end)

    it('skips blank lines but counts them', function()
      local p = dir .. '/blank.jsonl'
      fs.write(p, '{"a":1}\n\n  \n{"a":2}\n')
      local got = {}
      for _, n in jsonl.read(p) do got[#got + 1] = n end
      assert.same({ 1, 4 }, got)
    end)

    it('returns nil, message, code for a missing file', function()
      local it, msg, code = jsonl.read(dir .. '/missing.jsonl')
      assert.is_nil(it)
      assert.equal('ENOENT', code)
      assert.matches('missing.jsonl', msg)
      assert.equal('ENOENT', select(3, jsonl.read_all(dir .. '/missing.jsonl')))
      assert.equal('ENOENT', select(3, jsonl.append(dir .. '/no/dir.jsonl', {})))
    end)

    it('raises when the record is not a table', function()
      assert.has_error(function() jsonl.append(dir .. '/x', 'str') end)
      assert.has_error(function() jsonl.append(dir .. '/x', { f = print }) end)
    end)
  end)

  describe('encoding', function()
    local function roundtrip(v) return jsonl.decode(jsonl.encode(v)) end

    it('keeps integers exact, including nanosecond clocks beyond 2^53', function()
      local now = clock.now()
      local cases = { 0, -1, 1, 2 ^ 53 + 1 | 0, 1234567890123456789, math.maxinteger, math.mininteger, now,
        1764401704123456789 }
      for _, v in ipairs(cases) do
        local back = roundtrip({ v = v }).v
        assert.equal(math.type(v), math.type(back))
        assert.equal(v, back)
      end
      assert.equal('{"v":1234567890123456789}', jsonl.encode({ v = 1234567890123456789 }))
    end)

    it('keeps floats exact (shortest round-trip form)', function()
      local cases = { 0.1, 1 / 3, 2 / 3, 1e-9, 123456.789012345, 1.7976931348623157e308, 5e-324, -2.5,
        12.345678901234567, 1764401704.1234567 }
      for _, v in ipairs(cases) do
        local back = roundtrip({ v }) [1]
        assert.equal(v, back)
      end
      assert.equal('[0.1]', jsonl.encode({ 0.1 }))
      assert.equal('[0.30000000000000004]', jsonl.encode({ 0.1 + 0.2 }))
      assert.equal('{"elapsed":1.5}', jsonl.encode({ elapsed = 1.5 }))
    end)

    it('nanosecond-derived seconds round-trip exactly', function()
      for _ = 1, 100 do
        local ns = clock.now()
        local secs = ns / 1e9
        assert.equal(secs, roundtrip({ s = secs }).s)
      end
    end)

    it('integral floats read back as integers; NaN and infinities become null', function()
      assert.equal('integer', math.type(roundtrip({ a = 3.0 }).a))
      assert.equal('{"a":null,"b":null,"c":null}', jsonl.encode({ a = 0 / 0, b = math.huge, c = -math.huge }))
    end)

    it('sorts object members for deterministic lines', function()
      assert.equal('{"a":1,"b":{"x":true,"y":false},"c":[1,2,3]}',
        jsonl.encode({ c = { 1, 2, 3 }, b = { y = false, x = true }, a = 1 }))
    end)

    it('escapes control characters, quotes and backslashes; lines never contain a raw newline', function()
      local s = 'line1\nline2\r\t"q"\\ \0 \127 /'
      local line = jsonl.encode({ s = s })
      assert.is_nil(line:find('\n', 1, true))
      assert.equal('{"s":"line1\\nline2\\r\\t\\"q\\"\\\\ \\u0000 \\u007f /"}', line)
      assert.equal(s, roundtrip({ s = s }).s)
    end)

    it('keeps UTF-8 and replaces invalid bytes with U+FFFD', function()
      assert.equal('héllo ✓', roundtrip({ s = 'héllo ✓' }).s)
      assert.equal('a\u{FFFD}b\u{FFFD}', roundtrip({ s = 'a\255b\195' }).s)
    end)

    it('arrays, empty tables, nulls in arrays, and jsonl.array', function()
      assert.equal('{}', jsonl.encode({}))
      assert.equal('[]', jsonl.encode(jsonl.array()))
      assert.equal('{"a":[]}', jsonl.encode({ a = jsonl.array({}) }))
      assert.equal('[1,null,3]', jsonl.encode({ 1, nil, 3 }))
      local back = jsonl.decode('{"a":[1,null,3],"b":null}')
      assert.equal(jsonl.null, back.a[2])
      assert.is_nil(back.b)
      assert.equal('{"1":"x","a":"y"}', jsonl.encode({ 'x', a = 'y' }))
      assert.has_error(function() jsonl.encode({ [1] = 1, [1000] = 2 }) end)
    end)

    it('refuses cycles and unencodable values with a clear error', function()
      local t = {}
      t.self = t
      assert.has_error(function() jsonl.encode(t) end)
      local function encode_error(v)
        local ok, err = pcall(jsonl.encode, v)
        assert.is_false(ok)
        assert.equal('EINVAL', err.code)
        return err.message
      end
      assert.equal('jsonl: cannot encode a function value at key "f"', encode_error({ f = function() end }))
      assert.equal('jsonl: cannot encode: boolean key in the record', encode_error({ [true] = 1 }))
    end)

    it('does not mistake long digit runs inside strings for numbers', function()
      local rec = { id = '12345678901234567890', note = 'x:1234567890123456789,', n = 98765432109876543 }
      local back = roundtrip(rec)
      assert.same(rec, back)
      assert.equal('string', type(back.id))
      -- integers beyond int64 stay floats rather than failing
      assert.equal(1e20, jsonl.decode('[100000000000000000000]')[1])
    end)
  end)
end)
