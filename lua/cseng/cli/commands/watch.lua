--- `cseng watch PLAN.lua --every 1h [watch options] [run options]`: run a plan on a schedule,
--- every run an ordinary run log in the results folder, each judged against the runs before it
--- (lua/cseng/watch/watch.lua, docs/WATCH.md). This file parses the command line, checks the
--- run's options the way `cseng run` does before anything starts, and prints what the watch does.
local flags = require('cseng.lib.flags')
local fs = require('cseng.fs')
local clock = require('cseng.clock')
local util = require('cseng.lib.util')
local console = require('cseng.lib.console')
local plan = require('cseng.run.plan')
local options = require('cseng.run.options')
local errors = require('cseng.lib.errors')
local exit = require('cseng.cli.exit')
local command = require('cseng.cli.command')
local schedule = require('cseng.watch.schedule')

-- run options the watch owns or that make no sense on a schedule
local NOT_PASSED = { output = 'the watch names each run\'s log (--output is the watch\'s folder)',
  resume = 'the watch resumes its own runs', ['rerun-errors'] = 'the watch resumes its own runs',
  shard = 'a watch runs whole plans', ['job-id'] = 'a watch runs whole plans', quiet = 'runs are quiet under a watch',
  report = 'each run writes its report beside its log', modes = 'a matrix is one watch per provider and mode' }

local cmd = command {
  name = 'watch',
  summary = 'run a plan on a schedule: history, regression detection with intervals, OpenMetrics',
  usage = 'usage: cseng watch PLAN.lua --every DURATION [watch options] [run options]\n\n' ..
    'Runs the plan every DURATION (slots aligned to the clock, with jitter), each run an ordinary run\n' ..
    'log in the results folder (<name>-<slot>.jsonl), never two at once; judges each run against the\n' ..
    'trailing window of the ones before it (docs/WATCH.md); stops on Ctrl-C or SIGTERM (a run in\n' ..
    'progress stops as any run does, and the next start finishes it). Run options are those of\n' ..
    '`cseng run` (see cseng run --help), passed to every run.',
  options_title = 'watch options',
  flags = {
    { 'every', 'string', arg = 'DURATION', help = 'run every DURATION (90s, 15m, 1h, 1d; or the plan\'s watch.every)' },
    { 'jitter', 'string', arg = 'DURATION', help = 'start each run up to DURATION after its slot (default 0)' },
    { 'max-late', 'string', arg = 'DURATION',
      help = 'a slot not started within DURATION of its time is missed (default half of --every)' },
    { 'name', 'string', arg = 'NAME', help = 'the watch\'s name (default: the plan\'s); one watch of a name per folder' },
    { 'output', 'string', arg = 'DIR', help = 'the results folder of the runs, journal and history (default results)' },
    { 'runs', 'int', min = 1, arg = 'N', help = 'stop after N runs (default: run until stopped)' },
    { 'once', 'bool', help = 'finish a slot left open, run the slot due now if one is, and exit (a cron job, a Kubernetes CronJob)' },
    { 'window', 'int', min = 2, arg = 'N', help = 'regression detection: runs in the trailing window (default 10)' },
    { 'min-window', 'int', min = 2, arg = 'N', help = 'runs the window needs before it judges (default 5)' },
    { 'hold', 'int', min = 1, arg = 'N', help = 'runs a change must hold before it is called (default 3)' },
    { 'min-change', 'string', arg = 'PCT',
      help = 'a latency change under PCT of the baseline is not called (default 10%)' },
    { 'min-rate-change', 'string', arg = 'PCT',
      help = 'an error or lost-sandbox rate change under PCT points is not called (default 2%)' },
    { 'on-change', 'string', arg = 'CMD', help = 'run `sh -c CMD` once per change (its JSON on stdin and in CSENG_CHANGE)' },
    { 'metrics-port', 'int', min = 0, arg = 'PORT', help = 'serve /metrics (OpenMetrics) and /status on PORT' },
    { 'metrics-host', 'string', arg = 'ADDR',
      help = 'the address /metrics listens on (default 127.0.0.1; 0.0.0.0 for a scraper on another host)' },
  },
  epilog = 'exit status: 0 after --runs N runs (or --once); 1 when a run refuses its command line (a slot whose run\n' ..
    'dies three times is recorded failed, and the watch goes on); 2 usage; 128+N after signal N.',
  pass = { spec = options.SPEC, refuse = NOT_PASSED, what = 'a watch' },
}

-- "10%" or "0.1" as a fraction
local function fraction(v, what)
  if v == nil then return nil end
  local n = tonumber(v)
  if type(v) == 'string' and v:match('%%$') then n = tonumber(v:sub(1, -2)); n = n and n / 100 end
  if not n or n ~= n or n < 0 or n >= 10 then
    errors.raise(errors.EUSAGE, string.format('%s: expected a fraction or a percentage (10%% or 0.1), got %s', what, tostring(v)))
  end
  return n
end

local function duration(v, what)
  if v == nil then return nil end
  local s, err = schedule.duration(v)
  if not s then errors.raise(errors.EUSAGE, what .. ': ' .. err) end
  return s
end

local function stamp() return (clock.wall():gsub('%.%d+Z$', 'Z')) end

-- the lines the watch prints, one per event
local function presenter(out, err)
  local function say(fmt, ...) out:write(stamp(), ' ', string.format(fmt, ...), '\n'); out:flush() end
  return function(name, d)
    if name == 'serving' then say('metrics: %s', d.url)
    elseif name == 'indexing' then say('history: indexing %s', d.dir)
    elseif name == 'indexed' then
      say('history: %d log(s) read, %d unchanged, %d gone', d.read, d.unchanged, d.removed)
      for file, e in pairs(d.errors or {}) do err:write('cseng: watch: ', console.escape(file, true), ': ', e, '\n') end
    elseif name == 'waiting_slot' then say('slot %d due at %s (in %s)', d.slot, clock.wall(d.due), util.fmt_seconds(d.in_s))
    elseif name == 'missed' then
      say('missed %s (%s)', d.first == d.last and ('slot ' .. d.first) or string.format('slots %d-%d', d.first, d.last),
        d.reason == 'busy' and 'a run overran its period' or 'the watch was not running')
    elseif name == 'run_started' then
      say('slot %d%s: %s %s', d.slot, d.attempt > 1 and (' attempt ' .. d.attempt) or '', d.resume and 'resuming' or 'running',
        console.escape(d.file, true))
    elseif name == 'run_finished' then
      say('slot %d: %s, run %s of the watch, verdict %s', d.slot, d.status, tostring(d.index or '-'), d.verdict)
    elseif name == 'recovering' then say('slot %d was left open: finishing %s', d.slot, console.escape(d.file, true))
    elseif name == 'waiting' then say('slot %d: its run is still going in another process; waiting', d.slot)
    elseif name == 'cleanup' then say('slot %d: the arena run was cut short; cleaning up %s and running it again', d.slot,
      console.escape(d.file, true))
    elseif name == 'retry' then say('slot %d: the run died (exit %s); again', d.slot, tostring(d.exit))
    elseif name == 'stopping' then say('stopping: the run of slot %s stops first', tostring(d.slot))
    elseif name == 'change' then
      local c = d.change
      say('CHANGE %s %s: %s %s %s %s from run %d (%s) to %.4g [baseline %.4g, %.4g-%.4g]', c.regression == 1 and 'regression' or
        'improvement', c.metric, c.provider, c.phase, c.primitive, c.direction, c.first_index, c.first_run_id or '-',
        c.value or 0, c.baseline_value or 0, c.baseline_lo or 0, c.baseline_hi or 0)
    elseif name == 'hook_failed' then err:write('cseng: watch: --on-change failed (', tostring(d.result), ')',
      d.stderr and d.stderr ~= '' and (': ' .. d.stderr) or '', '\n')
    elseif name == 'none_due' then say('--once: no slot is due (the next, %d, is due at %s)', d.slot, clock.wall(d.due))
    elseif name == 'stopped' then say('stopped after %d run(s)', d.runs)
    end
  end
end

-- f: the watch's own options; theirs: the runs' options, passed on as given (checked just below)
function cmd.main(f, pos, theirs)
  if #pos ~= 1 then return exit.usage_error('watch needs exactly one PLAN.lua (see cseng watch --help)') end
  local rf, rerr = flags.parse(theirs, options.SPEC)
  if not rf then return exit.usage_error('watch: ' .. rerr .. ' (see cseng run --help)') end
  local ok, p = pcall(plan.load, pos[1])
  if not ok then return exit.usage_error(p) end
  -- the runs' options as `cseng run` checks them, now, not at the first slot
  local ok2, o = pcall(options.merge, p, rf, { 'cseng', 'run', pos[1], table.unpack(theirs) })
  if not ok2 then return exit.usage_error('watch: ' .. errors.line(o)) end
  if o.kind ~= 'tasks' and o.kind ~= 'startup' then
    return exit.usage_error('watch: a %s plan cannot be watched (a tasks or startup plan; a matrix is one watch per provider and mode)',
      tostring(o.kind))
  end
  local pw = type(p.watch) == 'table' and p.watch or {}
  local ok3, wo = pcall(function()
    local every = duration(f.every or pw.every, '--every')
    if not every then errors.raise(errors.EUSAGE, '--every DURATION is needed (or the plan\'s watch = { every = ... })') end
    return {
      every = every, jitter = duration(f.jitter or pw.jitter, '--jitter'), max_late = duration(f.max_late or pw.max_late, '--max-late'),
      detect = require('cseng.history.detect').options {
        window = f.window or pw.window, min_window = f.min_window or pw.min_window, hold = f.hold or pw.hold,
        min_change = fraction(f.min_change or pw.min_change, '--min-change'),
        min_rate_change = fraction(f.min_rate_change or pw.min_rate_change, '--min-rate-change'),
      },
    }
  end)
  if not ok3 then return exit.usage_error('watch: ' .. errors.line(wo)) end
  local sok, serr = pcall(schedule.new, { every = wo.every, jitter = wo.jitter, max_late = wo.max_late })
  if not sok then return exit.usage_error('watch: ' .. errors.line(serr)) end
  local name = f.name or pw.name or p.name or (fs.basename(pos[1]):gsub('%.lua$', ''))
  local watch = require('cseng.watch.watch')
  if not watch.valid_name(name) then
    return exit.usage_error('watch: --name %s: letters, digits, ., _ and - (at most 64)', tostring(name))
  end
  local run_ok, status = pcall(watch.run, {
    name = name, plan_file = pos[1], kind = o.kind, run_args = theirs, dir = f.output or 'results',
    every = wo.every, jitter = wo.jitter, max_late = wo.max_late, runs = f.runs, once = f.once, detect = wo.detect,
    on_change = f.on_change or pw.on_change, metrics_port = f.metrics_port, metrics_host = f.metrics_host,
    emit = presenter(io.stdout, io.stderr),
  })
  if not run_ok then return exit.fail(status, 'watch') end
  return status
end

return cmd
