-- OpenCode and Gemini CLI (lua/solvers/shared/agents.lua) on a cloud provider: the E2B fake
-- (spec/providers/e2b/fake.lua), whose uploads are capped, so each agent travels as the cached
-- deterministic tar.gz of lua/solvers/installed/pack.lua in parts (Gemini CLI: its bundle and the
-- Node.js runtime, one archive), against the fake of its API; both tasks pass through the model
-- proxy (the E2B fake's sandboxes run on this machine and get the proxy's port), each agent is
-- packed once, the trajectories are valid ATIF v1.7, and nop passes none of the tasks there.
local fs = require('cseng.fs')
local atif = require('cseng.evals.atif')
local installed = require('solvers.shared.installed')
local agents = require('solvers.shared.agents')

local harness = require('spec.fakes.llm.harness')
local H
setup(function() H = harness.new('cseng-opencode-gemini-cloud-spec') end)
teardown(function() H.close() end)

local AGENTS = harness.OPENCODE_GEMINI

-- on a cloud provider: the E2B fake (spec/providers/e2b/fake.lua), whose uploads are capped, so the
-- agent travels as the cached deterministic tar.gz of lua/solvers/installed/pack.lua in parts
describe('on the E2B fake', function()
  local e2b_fake = require('spec.fakes').module('e2b')
  local CAP = 48 << 20
  local E, CACHE
  setup(function()
    E = e2b_fake.start { max_upload_bytes = CAP }
    CACHE = H.tmp .. '/cache'
  end)
  teardown(function() if E then E.close() end end)
  for _, A in ipairs(AGENTS) do
    local D = agents.AGENTS[A.solver]
    local have = fs.exists(installed.NODE_MODULES .. '/' .. D.binary)
    it(A.solver .. ' solves its two bundled tasks, shipped in parts under the cap, packed once', function()
      if not have then pending('needs make deps-agents') return end
      local pack = require('solvers.installed.pack')
      local fk = require(A.fake)
      local f = fk.start { api_key = H.KEY, model = A.model or H.MODEL, script = H.gold_script, tool = D.tool }
      local env = E.env(A.env(H, f))
      env.E2B_MAX_UPLOAD_BYTES, env.CSENG_CACHE = tostring(CAP), CACHE
      local packs = pack.stats.packs
      local status, s = H.run({ provider = 'e2b', solver = A.solver, tasks = H.ids(2), concurrency = 2 }, env)
      f.close()
      local st = f.stats()
      assert.same({}, st.problems)
      assert.equal(6, st.completions)
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(2, s.passed)
      assert.equal(1, pack.stats.packs - packs) -- both trials waited for the one pack
      for _, r in ipairs(s.results) do
        local u = r.solver_usage
        assert.equal('proxy', u.counted_by)
        assert.equal('packed', u.shipped.cache)
        assert.is_true(u.shipped.parts >= 1)
        assert.is_true((atif.validate_text(assert(fs.read(r.trajectory_path)))))
      end
    end)
  end
  it('nop passes none of the same tasks there', function()
    local _, s = H.run({ provider = 'e2b', solver = 'nop', tasks = H.ids(2), concurrency = 2 }, E.env({}))
    assert.equal(0, s.passed)
    assert.equal(2, s.failed)
  end)
end)

