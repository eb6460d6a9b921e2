-- The Modal provider (lua/providers/modal.lua) and its fake (spec/fakes/modal/server.mjs):
--   * the official `modal` JS SDK runs its sandbox lifecycle against the fake and passes (what
--     makes the fake a fair stand-in), and is refused with bad credentials;
--   * the adapter's lifecycle over gRPC/HTTP/2 against the same fake, its clear errors, one
--     HTTP/2 connection for 100 concurrent RPCs, and the runner end to end (startup arena,
--     cold-gold cold and warm, kill -9 then cleanup).
local proc = require 'cseng.proc'
local sys = require 'cseng.sys'
local cjson = require 'cjson'

local ROOT = sys.root()
local modal_fake = dofile(ROOT .. '/spec/fakes/modal/fake.lua')

--- Run spec/sdk/modal.mjs against a fake; returns the process result and what it printed.
local function run_sdk(f, env, run)
  local r = assert(proc.run { argv = { 'node', ROOT .. '/spec/sdk/modal.mjs', run or 'sdk-spec' }, cwd = ROOT,
                              env_add = env or f.env(), timeout = 300 })
  local ok, seen = pcall(cjson.decode, r.stdout:match('[^\n]+') or '')
  return r, ok and seen or {}
end

describe('the official modal SDK against the fake', function()
  local f
  before_each(function() f = modal_fake.start { client = 'sdk' } end)
  after_each(function() f.close() end)

  it('runs the whole sandbox lifecycle and the fake saw the V1 call sequence', function()
    local r, seen = run_sdk(f)
    assert.equal(0, r.code, r.stdout .. r.stderr .. f.stderr())
    assert.is_true(seen.ok)
    assert.same({ stdout = 'arena-startup-ready-20261001\n', stderr = '', code = 0 }, seen.ready)
    assert.same({ stdout = 'out\n', stderr = 'err\n', code = 3 }, seen.exit3)
    assert.equal('hello from the sdk\n', seen.read_back)
    assert.same({ seen.sandbox_id }, seen.listed)
    assert.same({ stdout = 'warm\n', stderr = '', code = 0 }, seen.warm)
    local s = f.stats()
    assert.equal(2, s.creates)
    assert.equal(0, s.live)
    assert.equal(1, s.connections.cp)
    assert.equal(1, s.connections.router)
    for _, op in ipairs({ 'AuthTokenGet', 'AppGetOrCreate', 'ImageGetOrCreate', 'ImageJoinStreaming', 'SandboxCreate',
                          'SandboxGetTaskId', 'TaskGetCommandRouterAccess', 'TaskExecStart', 'TaskExecStdioRead',
                          'TaskExecWait', 'SandboxList', 'SandboxTerminate' }) do
      assert.is_true((s.rpcs[op] or 0) > 0, op)
    end
    -- the recorded requests: headers and bodies as the SDK sent them
    local create
    for _, rec in ipairs(f.requests()) do
      assert.equal('sdk', rec.client)
      if rec.service == 'ModalClient' then
        assert.equal('ak-cseng-fake', rec.headers['x-modal-token-id'])
        assert.equal('8', rec.headers['x-modal-client-type'])
        if rec.op ~= 'AuthTokenGet' then assert.is_string(rec.headers['x-modal-auth-token']) end
      else
        assert.matches('^Bearer ', rec.headers.authorization)
      end
      if rec.op == 'SandboxCreate' and not create then create = rec.body end
    end
    assert.equal(2000, create.definition.resources.milli_cpu)
    assert.equal(2048, create.definition.resources.memory_mb)
    assert.equal(300, create.definition.timeout_secs)
    assert.same({ 'us-east' }, create.definition.scheduler_placement.regions)
  end)

  it('is refused with bad credentials (UNAUTHENTICATED)', function()
    local r, seen = run_sdk(f, f.env { MODAL_TOKEN_SECRET = 'wrong' })
    assert.equal(1, r.code)
    assert.matches('UNAUTHENTICATED', seen.error)
    assert.equal(0, f.stats().creates)
  end)
end)
