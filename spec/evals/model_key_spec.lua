-- The model key stays outside the sandbox: a hostile task (spec/fixtures/hostile/model-key-probe)
-- puts its own `git` first on PATH, so whenever the agent runs git, the task's code runs beside the
-- agent and looks for credentials everywhere it can: its environment, every process's environment
-- and command line (/proc/*/environ, /proc/*/cmdline, ps e) and key-shaped strings in the files it
-- can read. What it finds goes back to the model in the tool's result (the real Codex CLI and
-- Claude Code in local sandboxes, against the fakes of their APIs). Through the run's model proxy
-- (lua/cseng/evals/proxy.lua) the probe finds the trial's token where the key used to be, and never
-- the key; the token of the first trial, used from the second trial's sandbox once the first has
-- ended, is refused (401) while the second trial's own token works, and the fake only ever sees the
-- real key (the proxy adds it). Verdicts are contents and counts, never durations.
local sys = require('cseng.sys')
local fs = require('cseng.fs')
local installed = require('solvers.shared.installed')

local ROOT = sys.root()
local PROBE_TASK = ROOT .. '/spec/fixtures/hostile/model-key-probe'
local H
setup(function() H = require('spec.fakes.llm.harness').new('cseng-model-key-spec') end)
teardown(function() H.close() end)

local AGENTS = {
  { solver = 'codex', fake = 'responses', route = '/v1/responses', var = 'CSENG_CODEX_API_KEY',
    env = function(f) return { OPENAI_API_KEY = H.KEY, CODEX_BASE_URL = f.url, CODEX_MODEL = H.MODEL } end },
  { solver = 'claude_code', fake = 'messages', route = '/v1/messages', var = 'ANTHROPIC_API_KEY',
    env = function(f) return { ANTHROPIC_API_KEY = H.KEY, ANTHROPIC_BASE_URL = f.url, CLAUDE_CODE_MODEL = H.MODEL } end },
}

-- A raw HTTP request to the model proxy from inside the sandbox (bash's /dev/tcp), printing the
-- status line: `label: HTTP/1.1 401 ...`.
local function raw_request(label, port, route, token)
  return string.format([[{ tok=%s; exec 3<>/dev/tcp/127.0.0.1/%d && printf 'POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n]]
    .. [[Authorization: Bearer %%s\r\nx-api-key: %%s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n]]
    .. [[Connection: close\r\n\r\n{}' "$tok" "$tok" >&3 && echo "%s: $(head -n 1 <&3)"; } 2>&1]], token, port, route, label)
end

-- the model proxy's port while the run is live (this process runs it); 0 without one
local function proxy_port()
  local ok, proxy = pcall(require, 'cseng.evals.proxy')
  return ok and proxy.ports and proxy.ports()[1] or 0
end

for _, A in ipairs(AGENTS) do
  local mod = require('solvers.' .. A.solver)
  local have = fs.exists(installed.NODE_MODULES .. '/' .. mod.BINARY)
  describe('the model key with ' .. A.solver, function()
    if not have then
      pending('needs ' .. installed.NODE_MODULES .. '/' .. mod.BINARY .. ' (make deps-agents)')
      return
    end

    it('is found by no task code: the probe sees only the trial\'s token, which opens nothing once its trial ended', function()
      -- two trials of the hostile task, one after the other; each runs git (the probe), records the
      -- version, and answers; the second also tries the first trial's token, and its own
      local trials, results, first_token = 0, {}, nil
      local function script(conv)
        if conv.turn == 1 then
          trials = trials + 1
          local cmd = 'git --version; git --version 2>/dev/null | tail -n 1 > /workspace/git-version.txt'
          if trials == 2 then
            local port = proxy_port()
            cmd = cmd .. '; ' .. raw_request('stolen', port, A.route, tostring(first_token))
              .. '; own=$(cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n" | grep -ao "cseng-trial-[0-9a-f]*" | grep -v '
              .. tostring(first_token) .. ' | head -n 1); '
              .. raw_request('own', port, A.route, '"$own"')
          end
          return { tool_calls = { { command = cmd } } }
        end
        local out = table.concat(conv.tool_results, '\n')
        results[trials] = out
        if trials == 1 then first_token = out:match('cseng%-trial%-%x+') or 'none' end
        return { content = 'Done.' }
      end
      local fk = require('spec.fakes.llm.' .. A.fake)
      local f = fk.start { api_key = H.KEY, model = H.MODEL, script = script }
      local status, s = H.run({ solver = A.solver, dataset = PROBE_TASK, attempts = 2, concurrency = 1 }, A.env(f))
      local st = f.stats()
      f.close()
      assert.equal(2, trials)
      -- the probe ran in both trials, and read the environment of more processes than its own
      for i = 1, 2 do
        local out = assert(results[i], 'trial ' .. i .. ' sent no tool result')
        local procs, read = out:match('cseng%-probe: end processes=(%d+) environ_read=(%d+)')
        assert.truthy(procs, 'trial ' .. i .. ': the probe did not finish:\n' .. out)
        assert.is_true(tonumber(read) >= 3, 'trial ' .. i .. ' read ' .. tostring(read) .. ' environments:\n' .. out)
        -- what the task's code found: no key, whole or in part
        assert.falsy(out:find(H.KEY, 1, true), 'trial ' .. i .. ': the probe found the model key:\n' .. out)
        assert.falsy(out:find(H.KEY:sub(9), 1, true), 'trial ' .. i .. ': the probe found part of the model key:\n' .. out)
        -- where the key was, the trial's token (the probe did look there)
        assert.truthy(out:find(A.var .. '=cseng-trial-', 1, true), 'trial ' .. i .. ':\n' .. out)
      end
      assert.not_equal(results[1]:match('cseng%-trial%-%x+'), results[2]:match('cseng%-trial%-%x+'))
      -- the first trial's token, from the second trial's sandbox after the first ended: refused
      assert.matches('stolen: HTTP/1.1 401', results[2])
      -- its own token goes through to the model endpoint (the fake refuses the empty request itself)
      assert.matches('own: HTTP/1.1 400', results[2])
      assert.same({ 'no model' }, st.problems)
      -- the endpoint only ever saw the real key
      assert.equal(0, st.unauthorized)
      assert.equal(0, status, tostring(s.results[1] and s.results[1].error))
      assert.equal(2, s.passed)
      for _, r in ipairs(s.results) do
        assert.equal('proxy', r.solver_usage.model_key)
        assert.equal('proxy', r.solver_usage.counted_by)
      end
    end)
  end)
end
