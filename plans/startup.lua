-- The startup arena: for each provider, create a sandbox, run one command and check its
-- output, destroy it; 300 measured rounds after 3 warmups; providers in parallel, one live
-- sandbox each, the order of every round a seeded shuffle. See docs/ARENA.md.
--
--   cseng run plans/startup.lua --providers local --samples 50
--   cseng run plans/startup.lua --providers local,docker,lizard --status-port 8080
local plan = require('cseng.run.plan')

return plan.startup {
  name = 'startup',
  providers = { 'local' },
  samples = 300,
  warmups = 3,
  seed = 20261001,
  command = [[python3 -c "print('arena-startup-ready-20261001')"]],
  expect = 'arena-startup-ready-20261001',
  exec_timeout_seconds = 30, -- the first command's own timeout
  timeout_seconds = 300,     -- a whole trial (create + exec); a hung call becomes ETIMEDOUT
  cleanup_backoff = { 1, 2 }, -- seconds before the 2nd and 3rd destroy attempts
  pause_seconds = 0.25,      -- between rounds, only when a remote provider takes part
  -- what every sandbox is asked for (adapters take what they understand)
  sandbox = { template = 'base', size = 'small' },
  -- per-provider settings; `adapter` runs one adapter under another name, e.g. two regions:
  --   ['lizard-eu'] = { adapter = 'lizard', region = 'eu-west-1' },
  provider_config = {
    -- docker: the base image tools/docker-up.sh imports (debootstrap; no registry here)
    docker = { sandbox = { image = 'cseng/debian:bookworm' } },
  },
}
