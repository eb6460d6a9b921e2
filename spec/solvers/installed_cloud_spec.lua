-- Installed coding agents on a cloud provider: the real Codex CLI and Claude Code (npm,
-- `make deps-agents`) run inside sandboxes of the E2B fake (spec/providers/e2b/fake.lua; adapter
-- lua/providers/e2b.lua) against the fakes of their APIs (spec/fakes/llm/responses.lua,
-- messages.lua), whose scripted "model" applies each task's gold fix. The CLI's binary travels as
-- the cached deterministic tar.gz of lua/solvers/installed/pack.lua, split into parts under the
-- upload cap (E2B_MAX_UPLOAD_BYTES, set small here, and the fake refuses anything bigger), each
-- part's sha256 and the joined archive's checked in the sandbox before it is unpacked. Both tasks
-- pass, nop stays 0 on them, the trajectory is valid ATIF; the archive is packed once per agent and
-- reused by the next run (counted, not timed); a corrupted part is EPREPARE naming it; a sandbox
-- without network fails at once with ENONETWORK naming the endpoint, before any part is shipped.
-- The CLIs reach their fakes through the run's model proxy (lua/cseng/evals/proxy.lua): the E2B
-- fake's sandboxes run on this machine and are given the proxy's port (spec/fakes/sandboxes.lua).
local fs = require('cseng.fs')
local installed = require('solvers.shared.installed')
local pack = require('solvers.installed.pack')

local e2b_fake = require('spec.fakes').module('e2b')

-- the cap on one upload: small, so each CLI's archive (~120-130 MB) goes in several parts
local CAP = 48 << 20

local H, E, CACHE
setup(function()
  H = require('spec.fakes.llm.harness').new('cseng-installed-cloud-spec')
  E = e2b_fake.start { max_upload_bytes = CAP }
  CACHE = H.tmp .. '/cache' -- this spec's own agent cache, so the first run packs
end)
teardown(function()
  if E then E.close() end
  H.close()
end)

local AGENTS = {
  { solver = 'codex', name = 'codex', fake = 'responses', tool = 'exec_command', agent_name = 'codex',
    env = function(f) return { OPENAI_API_KEY = H.KEY, CODEX_BASE_URL = f.url, CODEX_MODEL = H.MODEL } end },
  { solver = 'claude_code', name = 'claude', fake = 'messages', tool = 'Bash', agent_name = 'claude-code',
    env = function(f) return { ANTHROPIC_API_KEY = H.KEY, ANTHROPIC_BASE_URL = f.url, CLAUDE_CODE_MODEL = H.MODEL } end },
}

-- the run's environment: the agent's endpoint, the E2B fake, the cap, this spec's cache
local function env_of(A, f)
  local env = E.env(A.env(f))
  env.E2B_MAX_UPLOAD_BYTES = tostring(CAP)
  env.CSENG_CACHE = CACHE
  return env
end

for _, A in ipairs(AGENTS) do
  local mod = require('solvers.' .. A.solver)
  local have = fs.exists(installed.NODE_MODULES .. '/' .. mod.BINARY)
  describe('the ' .. A.solver .. ' solver on the E2B fake', function()
    if not have then
      pending('needs ' .. installed.NODE_MODULES .. '/' .. mod.BINARY .. ' (make deps-agents)')
      return
    end
    local f
    before_each(function()
      E.set { offline = false, corrupt_upload = false }
      f = require('spec.fakes.llm.' .. A.fake).start { api_key = H.KEY, model = H.MODEL, script = H.gold_script }
    end)
    after_each(function() f.close() end)

    it('solves its two bundled tasks, the CLI shipped in parts under the cap; packed once; nop stays 0', function()
      local packs, before = pack.stats.packs, E.stats()
      local status, s = H.run({ provider = 'e2b', solver = A.solver, tasks = H.ids(2), concurrency = 2 }, env_of(A, f))
      local st, es = f.stats(), E.stats()
      assert.same({}, st.problems)
      assert.equal(2, st.conversations)
      assert.equal(6, st.completions)
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(2, s.passed)
      assert.equal(1, pack.stats.packs - packs) -- both trials waited for the one pack
      for _, r in ipairs(s.results) do
        assert.equal('passed', r.outcome, tostring(r.error) .. ' ' .. tostring(r.solve_stderr_tail))
        local u = H.assert_installed_solved(r, A)
        local sh = u.shipped
        assert.equal('packed', sh.cache)
        assert.equal(CAP - installed.UPLOAD_OVERHEAD, sh.part_bytes)
        assert.equal((sh.bytes + sh.part_bytes - 1) // sh.part_bytes, sh.parts)
        assert.is_true(sh.parts >= 2, tostring(sh.parts))
      end
      -- the fake saw every part under its cap, none refused, and networked sandboxes
      assert.equal(0, es.upload_too_large - before.upload_too_large)
      assert.is_true(es.largest_upload <= CAP)
      assert.is_true(es.largest_upload > CAP // 2, tostring(es.largest_upload))
      assert.equal(2, es.networked - before.networked)

      local _, n = H.run({ provider = 'e2b', solver = 'nop', tasks = H.ids(2), concurrency = 2 }, env_of(A, f))
      assert.equal(0, n.passed)
      assert.equal(2, n.failed)
    end)

    it('reuses the cached archive the second time (no pack)', function()
      local packs, reused = pack.stats.packs, pack.stats.reused
      local status, s = H.run({ provider = 'e2b', solver = A.solver, tasks = H.ids(1) }, env_of(A, f))
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(1, s.passed)
      assert.equal(0, pack.stats.packs - packs)
      assert.equal(1, pack.stats.reused - reused)
      assert.equal('reused', s.results[1].solver_usage.shipped.cache)
      local m = 0
      for _, name in ipairs(fs.list(CACHE .. '/agents')) do
        if name:match('^' .. A.name .. '%-%x+%.tar%.gz$') then m = m + 1 end
      end
      assert.equal(1, m)
    end)

    it('a part corrupted on the way is EPREPARE naming the part', function()
      E.set { corrupt_upload = function(_, _, data) return data:sub(1, 100):find('.tar.gz.part-002', 1, true) ~= nil end }
      local before = E.stats().corrupted
      local _, s = H.run({ provider = 'e2b', solver = A.solver, tasks = H.ids(1) }, env_of(A, f))
      assert.equal(1, E.stats().corrupted - before)
      local r = s.results[1]
      assert.equal(0, s.passed)
      assert.equal('EPREPARE', r.error_code, tostring(r.error))
      assert.matches(A.name .. ': part 2 of %d+ %(' .. A.name .. '%-%x+%.tar%.gz%.part%-002', tostring(r.error))
      assert.equal(0, f.stats().completions) -- the CLI never ran
    end)

    it('an offline sandbox fails at once with ENONETWORK naming the endpoint, nothing shipped', function()
      E.set { offline = true }
      local before = E.stats()
      local _, s = H.run({ provider = 'e2b', solver = A.solver, tasks = H.ids(1) }, env_of(A, f))
      local r = s.results[1]
      assert.equal(0, s.passed)
      assert.equal('ENONETWORK', r.error_code, tostring(r.error))
      assert.truthy(tostring(r.error):find(f.url, 1, true), r.error)
      assert.truthy(tostring(r.error):find('the sandbox has no network access to it', 1, true), r.error)
      assert.equal(0, f.stats().completions)
      assert.equal(0, E.stats().networked - before.networked)
      -- nothing as big as a part: only the task's own small files went in
      assert.is_true(E.stats().upload_bytes - before.upload_bytes < (1 << 20))
    end)
  end)
end
