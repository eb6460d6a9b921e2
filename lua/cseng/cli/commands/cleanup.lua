--- `cseng cleanup RUN.jsonl` destroys every sandbox a run allocated and did not destroy;
--- `cseng cleanup --provider NAME [--older-than 2h] [--run RUN_ID]` finds cseng's sandboxes
--- by label (what a dead run left behind) and destroys them.
local flags = require 'cseng.lib.flags'
local options = require 'cseng.run.options'
local results = require 'cseng.results.log'
local session = require 'cseng.run.session'
local errors = require 'cseng.lib.errors'
local exit = require 'cseng.cli.exit'
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
  if not f then return exit.usage_error('cleanup: ' .. pos) end
  local failures, done = 0, 0
  local ok, err = pcall(function()
    if #pos == 1 then
      local events = results.read(pos[1])
      local scope = results.run_scope(events)
      local run_id = scope.run_id or (events[1] and events[1].run_id)
      local s = open_session(f, pos[1], run_id)
      -- a renamed provider (the arena's "lizard-eu") records the adapter it runs; the log holds
      -- secrets as [redacted]: those come from the environment or --env-file
      local function provider(rec)
        local p = s.providers[rec.provider]
        if p then return p end
        local info = scope.providers[rec.provider] or {}
        return s:connect(rec.adapter or info.adapter or rec.provider, info.config, rec.provider)
      end
      -- every provider the log names, first: a missing credential stops us before anything
      for _, name in ipairs(scope.order) do provider({ provider = name }) end
      local ok_n, fail_n = s:sweep(events, { reason = 'cleanup' }, provider, {
        dry_run = f.dry_run,
        on_result = function(p, id, r)
          if r and r.refused then io.stderr:write('cseng: cleanup: ', r.error, '\n')
          elseif not r then print('would destroy ' .. p.name .. ' ' .. tostring(id))
          elseif r.ok then print('destroyed ' .. p.name .. ' ' .. tostring(id))
          else io.stderr:write('cseng: cannot destroy ', tostring(id), ': ', tostring(r.error), '\n') end
        end,
        on_list_failure = function(name, msg, refused)
          if refused then io.stderr:write('cseng: cleanup: ', name, ': ', msg, '\n')
          else io.stderr:write('cseng: cleanup: cannot list ', name, '\'s sandboxes by label: ', msg, '\n') end
          failures = failures + 1
        end,
      })
      done, failures = done + ok_n, failures + fail_n
      -- creates sent whose answer the log never recorded: only a label finds those
      local answered, unanswered = {}, 0
      for _, e in ipairs(events) do
        local l = type(e.labels) == 'table' and e.labels['cseng.create'] or nil
        if e.event == 'allocated' and l then answered[l] = true end
      end
      for _, e in ipairs(events) do
        local l = type(e.labels) == 'table' and e.labels['cseng.create'] or nil
        if (e.event == 'intent' and l and not answered[l]) or (e.event == 'lost_create' and e.listable == false) then
          unanswered = unanswered + 1
        end
      end
      for _, p in pairs(s.providers) do
        if not p.adapter.list or p.adapter.list_by_label == false then
          io.stderr:write('cseng: cleanup: ', p.name, ' cannot list sandboxes by label: sandboxes whose create ',
            'answer never came (', unanswered, ' in the log) may exist unattributed; check the provider\'s console\n')
        end
      end
      if not f.dry_run and done == 0 and failures == 0 then
        print('nothing to clean: every allocated sandbox of ' .. pos[1] .. ' was destroyed, and none carries its labels')
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
    return exit.fail(err, not errors.is_usage(err) and 'cleanup' or nil)
  end
  if not f.dry_run and #pos <= 1 and (done > 0 or failures > 0 or #pos == 0) then
    print(string.format('%d destroyed, %d failed', done, failures))
  end
  return failures > 0 and 1 or 0
end

return cmd
