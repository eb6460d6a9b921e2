--- `cseng cleanup RUN.jsonl` destroys every sandbox a run allocated and did not destroy;
--- `cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]` finds cseng's sandboxes
--- by label (what a dead run left behind) and destroys them.
local flags = require 'flags'
local results = require 'results'
local runner = require 'runner'
local util = require 'util'

local SPEC = {
  ['provider'] = { key = 'provider', type = 'string', arg = 'NAME', help = 'sweep this provider by label' },
  ['older-than'] = { key = 'older_than', type = 'string', arg = 'AGE', help = 'only sandboxes created before now-AGE (30s, 15m, 2h, 1d)' },
  ['run'] = { key = 'run', type = 'string', arg = 'RUN_ID', help = 'only this run\'s sandboxes' },
  ['env-file'] = { key = 'env_file', type = 'string', arg = 'FILE', help = 'credentials file' },
  ['dry-run'] = { key = 'dry_run', type = 'bool', help = 'list, do not destroy' },
}

local cmd = {
  summary = 'destroy sandboxes a run left behind (from its log, or by label)',
  usage = 'usage: cseng cleanup RUN.jsonl\n       cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]\n\noptions:\n' ..
    flags.help(SPEC, { 'provider', 'older-than', 'run', 'env-file', 'dry-run' }),
}

local function age_seconds(s)
  local n, unit = tostring(s):match('^(%d+)([smhd]?)$')
  if not n then return nil end
  return tonumber(n) * ({ s = 1, m = 60, h = 3600, d = 86400, [''] = 1 })[unit]
end

local function connect(name, f, provider_config)
  local o = require('commands.run').options({}, { env_file = f.env_file }, {})
  local provider = runner.provider(name)
  local getenv = function(k) return (o.env or {})[k] or os.getenv(k) end
  return provider, provider.connect(util.merge(provider_config, { getenv = getenv }))
end

function cmd.run(args)
  local f, pos = flags.parse(args, SPEC)
  if not f then io.stderr:write('cseng: cleanup: ', pos, '\n'); return 2 end
  local failures, done = 0, 0
  if #pos == 1 then
    local events = results.read(pos[1])
    local live = results.live_allocations(events)
    if #live == 0 then print('nothing to clean: every allocated sandbox of ' .. pos[1] .. ' was destroyed'); return 0 end
    local run_id, provider_config
    for _, e in ipairs(events) do
      if e.event == 'run_started' then run_id, provider_config = e.run_id, e.provider_config end
    end
    local writer = results.open(pos[1], run_id)
    local providers = {}
    for _, a in ipairs(live) do
      -- a renamed provider (the arena's "lizard-eu") records the adapter it runs
      local adapter = a.adapter or a.provider
      local p = providers[a.provider]
      if not p then
        local cfg = provider_config
        if type(cfg) == 'table' and type(cfg[a.provider]) == 'table' then cfg = cfg[a.provider] end
        -- the log holds secrets as [redacted]: those come from the environment or --env-file
        local clean = {}
        for k, v in pairs(type(cfg) == 'table' and cfg or {}) do
          if v ~= '[redacted]' then clean[k] = v end
        end
        cfg = clean
        local prov, client = connect(adapter, f, cfg)
        p = { prov, client }
        providers[a.provider] = p
      end
      if f.dry_run then print('would destroy ' .. a.provider .. ' ' .. a.sandbox_id)
      else
        local ok, err = p[1].destroy(p[2], { id = a.sandbox_id, labels = a.labels })
        if ok then
          writer:destroyed(a.provider, a.sandbox_id, { reason = 'cleanup' })
          print('destroyed ' .. a.provider .. ' ' .. a.sandbox_id); done = done + 1
        else
          writer:cleanup_failed(a.provider, a.sandbox_id, err)
          io.stderr:write('cseng: cannot destroy ', a.sandbox_id, ': ', tostring(err), '\n'); failures = failures + 1
        end
      end
    end
  elseif #pos == 0 and f.provider then
    local min_age = f.older_than and age_seconds(f.older_than)
    if f.older_than and not min_age then io.stderr:write('cseng: cleanup: --older-than: expected e.g. 30s, 15m, 2h, 1d\n'); return 2 end
    local provider, client = connect(f.provider, f)
    if not provider.list then io.stderr:write('cseng: provider ', f.provider, ' cannot list sandboxes\n'); return 1 end
    local labels = f.run and { ['cseng.run'] = f.run } or nil
    local found = provider.list(client, { labels = labels })
    local now = os.time()
    for _, s in ipairs(found) do
      local created = tonumber(s.created) or tonumber((s.labels or {})['cseng.created'])
      local is_ours = (s.labels or {})['cseng.run'] ~= nil or f.provider == 'local'
      if is_ours and (not min_age or (created and now - created >= min_age)) then
        if f.dry_run then print('would destroy ' .. s.id)
        else
          local ok, err = provider.destroy(client, s)
          if ok then print('destroyed ' .. s.id); done = done + 1
          else io.stderr:write('cseng: cannot destroy ', s.id, ': ', tostring(err), '\n'); failures = failures + 1 end
        end
      end
    end
  else
    io.stderr:write('cseng: cleanup needs RUN.jsonl or --provider NAME (see cseng cleanup --help)\n')
    return 2
  end
  if not f.dry_run then print(string.format('%d destroyed, %d failed', done, failures)) end
  return failures > 0 and 1 or 0
end

return cmd
