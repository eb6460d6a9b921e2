-- A burst times the provider, not the client's handshakes: before each provider's burst the
-- arena opens the connections its creates will use (http.warm: TCP, TLS, HTTP/2 settings), so no
-- create waits for a new connection; with --cold-connections it closes the idle ones instead, each
-- create opens (or waits for) a new one, and its trial records that wait apart (handshakes,
-- handshake_ms), the choice recorded in the run's identity. Against the bench's C fake over TLS
-- (the Lizard shape, a CA made for this run), speaking HTTP/2 and, with ALPN narrowed, HTTP/1.1.
-- Verdicts are counts and values (a handshake_ms present or absent), never durations.
local arena = require('cseng.run.kinds.startup')
local http = require('cseng.http')
local fs = require('cseng.fs')
local cjson = require('cjson')
local H = require('spec.helpers.common')
local A = require('spec.helpers.arena')
teardown(H.remove_tempdirs)

local blib = require('bench.lib')

local function run_arena(opts) return A.run(opts, 'arena-conn-') end

local measured = A.measured

for _, proto in ipairs { { name = 'HTTP/2', alpn = 'h2,http/1.1' }, { name = 'HTTP/1.1', alpn = 'http/1.1' } } do
  describe('arena --mode burst over TLS (' .. proto.name .. ')', function()
    local fake, url, certs
    setup(function()
      local dir = H.tempdir('arena-conn-fake-')
      certs = blib.make_certs(fs.join(dir, 'certs'))
      fake, url = blib.start_fake_c(dir, { '--tls-cert', certs.cert, '--tls-key', certs.key, '--alpn', proto.alpn,
        '--create-ms', 20, '--exec-ms', 2, '--delete-ms', 2 })
      http.configure { ca_file = certs.ca }
    end)
    teardown(function()
      http.configure { ca_file = false }
      if fake then fake:close() end
    end)
    local function stats() return cjson.decode(assert(http.request { url = url .. '/stats', timeout = 30 }).body) end
    local function config() return { liz = { adapter = 'lizard', api_url = url, api_key = 'bench-key', project_id = 'bench' } } end

    it('warms the connections before the burst: no create waits for one', function()
      local s0 = stats()
      local status, by, errtext = run_arena { providers = { 'liz' }, provider_config = config(), mode = 'burst',
        burst = 12, samples = 12, warmups = 1, seed = 3 }
      assert.equal(0, status, errtext)
      assert.equal(1, #by.connections)
      local c = by.connections[1]
      assert.is_false(c.cold)
      assert.is_nil(c.error)
      assert.equal(proto.name == 'HTTP/2' and '2' or '1.1', c.http_version)
      assert.is_true(c.ready >= 12, 'ready ' .. tostring(c.ready))
      local m = measured(by)
      assert.equal(12, #m)
      for _, t in ipairs(m) do
        assert.is_true(t.ok, t.error)
        assert.is_nil(t.handshakes, 'a create waited for a connection')
        assert.is_nil(t.handshake_ms)
      end
      local s1 = stats()
      assert.is_true(s1.tls_handshakes > s0.tls_handshakes) -- (the warmups' and the warm's)
      assert.is_nil(by.run_started[1].identity.selection.cold_connections)
    end)

    if proto.name == 'HTTP/2' then
      it('--h2-streams 1: a connection for each create in flight, recorded; the setting before back after the run', function()
        local before = http.stats().max_concurrent_streams
        local status, by, errtext = run_arena { providers = { 'liz' }, provider_config = config(), mode = 'burst',
          burst = 12, samples = 12, warmups = 1, seed = 3, h2_streams = 1 }
        assert.equal(0, status, errtext)
        assert.equal(before, http.stats().max_concurrent_streams)
        local c = by.connections[1]
        assert.equal(1, c.streams)
        assert.is_true(c.connections >= 12 and c.ready >= 12, cjson.encode(c))
        for _, t in ipairs(measured(by)) do
          assert.is_true(t.ok, t.error)
          assert.is_nil(t.handshakes, 'a create waited for a connection')
        end
        assert.equal(1, by.run_started[1].identity.selection.h2_streams)
        assert.equal(1, by.run_started[1].h2_streams)
        -- the next run, without the option, carries its calls on shared connections again
        status, by, errtext = run_arena { providers = { 'liz' }, provider_config = config(), mode = 'burst',
          burst = 12, samples = 12, warmups = 1, seed = 3 }
        assert.equal(0, status, errtext)
        assert.is_true(by.connections[1].streams >= 12, cjson.encode(by.connections[1]))
        assert.is_nil(by.run_started[1].identity.selection.h2_streams)
      end)
    end

    it('--cold-connections: the idle ones closed, each create waits for a new one, recorded apart', function()
      local status, by, errtext = run_arena { providers = { 'liz' }, provider_config = config(), mode = 'burst',
        burst = 12, samples = 12, warmups = 1, seed = 3, cold_connections = true }
      assert.equal(0, status, errtext)
      local c = by.connections[1]
      assert.is_true(c.cold)
      assert.is_true(c.closed >= 1, 'the warmup\'s connection was not closed')
      -- The first create opens a connection (none is left), and those made while it is being opened
      -- open their own (HTTP/1.1) or wait for it (HTTP/2); one made after a connection was free
      -- again (a slow client: the first creates already answered) takes it, as a burst would
      local m, waited = measured(by), 0
      assert.equal(12, #m)
      for _, t in ipairs(m) do
        assert.is_true(t.ok, t.error)
        if t.handshakes then
          waited = waited + 1
          assert.equal(1, t.handshakes)
          assert.is_true(t.handshake_ms > 0 and t.handshake_ms <= t.create_ms)
        end
      end
      assert.is_true(waited >= 1)
      assert.is_true(by.run_started[1].identity.selection.cold_connections)
      assert.is_true(by.run_started[1].cold_connections)
    end)
  end)
end

describe('--cold-connections', function()
  it('goes with --mode burst only', function()
    local ok, err = pcall(arena.options, { providers = { 'local' }, mode = 'lockstep', cold_connections = true })
    assert.is_false(ok)
    assert.matches('%-%-cold%-connections goes with %-%-mode burst', tostring(err))
  end)
end)

describe('--h2-streams', function()
  it('is a whole number >= 1', function()
    for _, v in ipairs { 0, -3, 1.5, 'many' } do
      local ok, err = pcall(arena.options, { providers = { 'local' }, mode = 'burst', h2_streams = v })
      assert.is_false(ok, tostring(v))
      assert.matches('%-%-h2%-streams must be an integer >= 1', tostring(err))
    end
  end)
end)
