--- `cseng cleanup RUN.jsonl` destroys every sandbox a run allocated and did not destroy;
--- `cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]` finds cseng's sandboxes
--- by label (what a dead run left behind) and destroys them.
local flags = require 'cseng.lib.flags'
local options = require 'cseng.run.options'
local results = require 'cseng.results.log'
local session = require 'cseng.run.session'
local errors = require 'cseng.lib.errors'
local cli = require 'cseng.cli.main'
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

-- The session a cleanup runs in: the run's own log (its records go there), or none for a
-- label sweep (nothing is written). getenv reads --env-file, then the environment.
local function open_session(f, jsonl, run_id)
  local o = options.merge({}, { env_file = f.env_file }, {})
  if jsonl then return session.open { kind = 'cleanup', opts = o, jsonl = jsonl, run_id = run_id } end
  local s = setmetatable({ kind = 'cleanup', opts = o, getenv = session.getenv(o.env), providers = {},
    backoff = session.BACKOFF }, { __index = session.Session })
  return s
end

function cmd.run(args)
  local f, pos = flags.parse(args, SPEC)
  if not f then return cli.usage_error('cleanup: ' .. pos) end
  local failures, done = 0, 0
  local ok, err = pcall(function()
    if #pos == 1 then
      local events = results.read(pos[1])
      local live = results.live_allocations(events)
      local run_id, provider_config, run_provider, lost = nil, nil, nil, 0
      for _, e in ipairs(events) do
        if e.event == 'run_started' then run_id, provider_config, run_provider = e.run_id, e.provider_config, e.provider end
        if e.event == 'lost_create' then lost = lost + 1 end
      end
      -- a create whose answer was lost left no allocation record: only its label finds it
      if #live == 0 and lost == 0 then print('nothing to clean: every allocated sandbox of ' .. pos[1] .. ' was destroyed'); return end
      local s = open_session(f, pos[1], run_id)
      if #live == 0 and type(run_provider) == 'string' and not f.dry_run then
        live = { { provider = run_provider, none = true } }
      end
      for _, a in ipairs(live) do
        -- a renamed provider (the arena's "lizard-eu") records the adapter it runs
        local p = s.providers[a.provider]
        if not p then
          local cfg = provider_config
          if type(cfg) == 'table' and type(cfg[a.provider]) == 'table' then cfg = cfg[a.provider] end
          -- the log holds secrets as [redacted]: those come from the environment or --env-file
          local clean = {}
          for k, v in pairs(type(cfg) == 'table' and cfg or {}) do
            if v ~= '[redacted]' then clean[k] = v end
          end
          p = s:connect(a.adapter or a.provider, clean, a.provider)
        end
        if a.none then -- luacheck: ignore 542 (nothing live in the log: only the label sweep below)
        elseif f.dry_run then print('would destroy ' .. a.provider .. ' ' .. a.sandbox_id)
        else
          local r = s:adopt({ id = a.sandbox_id, labels = a.labels }, { reason = 'cleanup' }, p):close()
          if r.ok then print('destroyed ' .. a.provider .. ' ' .. a.sandbox_id); done = done + 1
          else
            io.stderr:write('cseng: cannot destroy ', a.sandbox_id, ': ', tostring(r.error), '\n'); failures = failures + 1
          end
        end
      end
      if not f.dry_run and run_id then
        -- then what the log does not know: the run's sandboxes found by its label
        local n = s:reconcile { ['cseng.run'] = run_id }
        done = done + n
        for _, p in pairs(s.providers) do
          if not p.adapter.list or p.adapter.list_by_label == false then
            io.stderr:write('cseng: cleanup: ', p.name, ' cannot list sandboxes by label: sandboxes whose create ',
              'answer was lost (', lost, ' recorded) may exist unattributed; check the provider\'s console\n')
          end
        end
      end
    elseif #pos == 0 and f.provider then
      local min_age = f.older_than and age_seconds(f.older_than)
      if f.older_than and not min_age then error(errors.usage('cleanup: --older-than: expected e.g. 30s, 15m, 2h, 1d'), 0) end
      local s = open_session(f)
      local p = s:connect(f.provider)
      local provider, client = p.adapter, p.client
      if not provider.list then errors.raise(errors.ENOTSUP, 'provider ' .. f.provider .. ' cannot list sandboxes') end
      if provider.list_by_label == false then
        io.stderr:write('cseng: cleanup: ', f.provider, ' cannot list sandboxes by label: unattributed sandboxes ',
          '(a create whose answer was lost) may exist; check the provider\'s console\n')
      end
      local labels = f.run and { ['cseng.run'] = f.run } or nil
      local found = provider.list(client, { labels = labels })
      local now = os.time()
      for _, sb in ipairs(found) do
        local created = tonumber(sb.created) or tonumber((sb.labels or {})['cseng.created'])
        local is_ours = (sb.labels or {})['cseng.run'] ~= nil or f.provider == 'local'
        if is_ours and (not min_age or (created and now - created >= min_age)) then
          if f.dry_run then print('would destroy ' .. sb.id)
          else
            local dok, _, msg = s:destroy(p, sb) -- no log to record in: the sandbox was found by label
            if dok then print('destroyed ' .. sb.id); done = done + 1
            else io.stderr:write('cseng: cannot destroy ', sb.id, ': ', tostring(msg), '\n'); failures = failures + 1 end
          end
        end
      end
    else
      error(errors.usage('cleanup needs RUN.jsonl or --provider NAME (see cseng cleanup --help)'), 0)
    end
  end)
  if not ok then
    return cli.fail(err, not errors.is_usage(err) and 'cleanup' or nil)
  end
  if not f.dry_run and #pos <= 1 and (done > 0 or failures > 0 or #pos == 0) then
    print(string.format('%d destroyed, %d failed', done, failures))
  end
  return failures > 0 and 1 or 0
end

return cmd
