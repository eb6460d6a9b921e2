--- Presentation of a run: the one progress renderer and the one status document and server,
--- for every run kind. The run layer (cseng.run.frame) emits events and never prints; the
--- command line attaches these observers (present.attach) to the options it runs with.
---
--- The renderer keeps a live block (the trials in flight and a status line for a task run;
--- the round's status line for the arena) under the permanent lines (a finished trial, a
--- message). On a terminal the block is redrawn in place with the only control sequences a
--- terminal gets from cseng (console.terminal: carriage return, cursor up, erase below/line);
--- everything else it prints is data, escaped (console.escape) and redacted by the console
--- guard. Without a terminal it prints plain lines, and the arena's status every tenth.
local task = require('cseng.task')
local clock = require('cseng.clock')
local sys = require('cseng.sys')
local util = require('cseng.lib.util')
local secrets = require('cseng.lib.secrets')
local console = require('cseng.lib.console')
local stats = require('cseng.lib.stats')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')

local present = {}

local function ns_to_s(ns) return ns / 1e9 end

-- ---- the renderer ----------------------------------------------------------------------

local Renderer = {}
Renderer.__index = Renderer

--- A renderer on `out` (default io.stdout). o.tty (default: whether stdout is a terminal),
--- o.quiet (nothing but what must be said: stop and cleanup messages on stderr).
function present.renderer(o)
  o = o or {}
  local quiet = o.quiet and true or false
  local tty = o.tty
  if tty == nil then tty = not quiet and sys.isatty(1) end
  return setmetatable({ out = o.out or io.stdout, err = o.err or io.stderr, tty = tty and not quiet, quiet = quiet,
    block = {}, drawn = 0 }, Renderer)
end

function Renderer:erase()
  if self.drawn > 0 then console.terminal('\r\27[' .. self.drawn .. 'A\27[J') end
  self.drawn = 0
end

function Renderer:draw()
  if #self.block == 0 then return end
  self.out:write(table.concat(self.block, '\n'), '\n')
  self.drawn = #self.block
end

--- A permanent line (above the live block on a terminal).
function Renderer:line(text)
  if self.quiet then return end
  if self.tty then self:erase(); self.out:write(text, '\n'); self:draw() else self.out:write(text, '\n') end
  self.out:flush()
end

--- Replace the live block (drawn at once on a terminal; nothing without one, nor once the run
--- was interrupted: the block is cleared for good then, so the notice stays on screen).
function Renderer:live(lines)
  if self.frozen then return end
  self.block = lines
  if not self.tty then return end
  self:erase()
  self:draw()
  self.out:flush()
end

--- Redraw every second on a terminal (o.refresh() rebuilds the block first).
function Renderer:tick(refresh)
  if not self.tty or self.ticker or self.frozen then return end
  self.ticker = task.spawn(function()
    while true do
      task.sleep(1)
      refresh()
      self:erase()
      self:draw()
      self.out:flush()
    end
  end)
end

function Renderer:finish()
  if self.ticker then self.ticker:cancel(); self.ticker = nil end
  if self.tty then self:erase() end
  self.block = {}
end

--- An interrupt: the live block cleared for good (no redraw can erase what follows), then the
--- notice, in trials: how many stop now and destroy their sandboxes. Under --quiet too.
function Renderer:interrupted(d, unit)
  self:finish()
  self.frozen = true
  local n = d.in_flight or 0
  self:warn(string.format('cseng: %s: %s; interrupt again to exit at once',
    d.signal == 15 and 'terminated' or 'interrupted',
    n > 0 and string.format('stopping the %d %s in flight (their sandboxes are destroyed)', n, unit(n))
      or 'stopping (no trial in flight)'))
end

--- A message for stderr, printed under --quiet too (the run did not do what was asked).
function Renderer:warn(text)
  if self.tty then self:erase() end
  self.out:flush() -- the erase (or a line) before the message, on a terminal that shows both
  self.err:write(text, '\n')
  if self.tty then self:draw() end
end

--- Why the run stopped allocating, if it did (and how to finish a failed cleanup): stderr,
--- under --quiet too.
function Renderer:stopped(F, prefix)
  local why = F:stop_message()
  if not why then return end
  self:warn(prefix .. 'stopped allocating: ' .. why)
  if F.session.cleanup_failed then self:warn('  run `cseng cleanup ' .. F.jsonl .. '` to retry the cleanup') end
end

--- The command line a user types for cseng: the program as invoked (opts.program) and args,
--- shell-quoted.
function present.command(opts, args)
  local argv = { opts.program or 'cseng' }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return util.shell_join(argv)
end

--- The command that finishes an interrupted or stopped task run: the run's own command line
--- (opts.argv, what the user typed; the flags --resume restores agree with the log, so they
--- may stay) with --resume LOG (an earlier --resume dropped).
function present.resume_command(opts, log)
  local argv, out, skip = opts.argv or { 'cseng', 'run', opts.plan_file or 'PLAN.lua' }, {}, false
  for i = 2, #argv do
    local a = argv[i]
    if skip then skip = false
    elseif a == '--resume' then skip = true
    elseif not a:match('^%-%-resume=') then out[#out + 1] = a end
  end
  out[#out + 1] = '--resume'
  out[#out + 1] = log
  return present.command(opts, out)
end

--- The command that opens a run's results in the viewer.
function present.view_command(opts, log)
  return present.command(opts, { 'view', log })
end

-- ---- what a task run shows -----------------------------------------------------------------

local passk = require('cseng.evals.passk')

local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }

-- Text cut to n bytes in the middle (an error's head says what failed, its tail why), never
-- inside a UTF-8 sequence.
local function middle_cut(s, n)
  if #s <= n then return s end
  local head = util.head(s, n // 2 - 2):gsub('%.%.%.$', '')
  local from = #s - (n - #head - 5) + 1
  while (s:byte(from) or 0) >= 0x80 and (s:byte(from) or 0) < 0xC0 do from = from + 1 end
  return head .. ' ... ' .. s:sub(from)
end

-- The one-line example of a trial that did not pass: its error, or for a failed verdict the
-- verifier's first FAILED line (pytest's short summary) or its last line.
local function example_of(r)
  local text = r.error
  if not text and r.outcome ~= 'error' then
    local tail = tostring(r.stdout_tail or '') .. '\n' .. tostring(r.stderr_tail or '')
    text = tail:match('\n(FAILED [^\n]+)') or tail:match('^(FAILED [^\n]+)')
    if not text then
      for l in tail:gmatch('[^\n]+') do if l:match('%S') then text = l end end
    end
  end
  text = tostring(text or ''):gsub('%s+', ' '):gsub('^ ', '')
  return console.escape(middle_cut(text, 150), true)
end

--- What did not pass, grouped as pytest's short summary and hyperfine's failure notes group
--- them: by outcome (failed: the verifier said no; error: the trial could not be judged), stage
--- and error code, the largest group first, each with the number of trials and one example.
---@param records table[]
---@return table[] groups {outcome, stage, code, n, task_id, example}
function present.failure_groups(records)
  local groups, by = {}, {}
  for _, r in ipairs(records) do
    if r.outcome ~= 'passed' then
      local outcome = r.outcome == 'error' and 'error' or 'failed'
      local stage = r.error_stage or (outcome == 'failed' and 'verify' or '?')
      local code = r.error_code or (outcome == 'failed' and ('reward ' .. tostring(r.reward or 0))) or '?'
      local key = outcome .. '\0' .. stage .. '\0' .. code
      local g = by[key]
      if not g then
        g = { outcome = outcome, stage = stage, code = code, n = 0, task_id = r.task_id, example = example_of(r) }
        by[key] = g
        groups[#groups + 1] = g
      end
      g.n = g.n + 1
    end
  end
  table.sort(groups, function(a, b)
    if a.n ~= b.n then return a.n > b.n end
    if a.outcome ~= b.outcome then return a.outcome < b.outcome end
    return a.stage .. a.code < b.stage .. b.code
  end)
  return groups
end

--- The end-of-run table of a task run (trial records; elapsed: the run's seconds).
function present.tasks_table(records, elapsed_s)
  local passed, failed, n_errors = 0, 0, 0
  local elapsed = {}
  local sums, counts = {}, {}
  for _, r in ipairs(records) do
    if r.outcome == 'passed' then passed = passed + 1 elseif r.outcome == 'error' then n_errors = n_errors + 1 else failed = failed + 1 end
    elapsed[#elapsed + 1] = r.elapsed_seconds
    for _, p in ipairs(PHASES) do
      local v = r.phases and r.phases[p .. '_seconds']
      if v then sums[p] = (sums[p] or 0) + v; counts[p] = (counts[p] or 0) + 1 end
    end
  end
  local parts = {}
  for _, p in ipairs(PHASES) do
    if counts[p] then parts[#parts + 1] = string.format('%s %.3f', p, sums[p] / counts[p]) end
  end
  local lines = {
    string.format('trials %d: %d passed, %d failed, %d errors%s', #records, passed, failed, n_errors,
      elapsed_s and (' in ' .. util.fmt_seconds(elapsed_s)) or ''),
  }
  local groups = present.failure_groups(records)
  local wstage, wn = 0, 0
  for _, g in ipairs(groups) do
    wstage = math.max(wstage, #(g.stage .. ' ' .. g.code))
    wn = math.max(wn, #tostring(g.n))
  end
  for _, g in ipairs(groups) do
    lines[#lines + 1] = string.format('  %-6s %' .. wn .. 'd x %-' .. wstage .. 's  e.g. %s%s', g.outcome, g.n,
      g.stage .. ' ' .. g.code, console.escape(g.task_id, true), g.example ~= '' and (': ' .. g.example) or '')
  end
  if #elapsed > 0 then
    lines[#lines + 1] = string.format('trial seconds: median %.2f, p95 %.2f', stats.median(elapsed),
      stats.quantile(elapsed, 0.95))
  end
  if #parts > 0 then lines[#lines + 1] = 'phase means (s): ' .. table.concat(parts, ', ') end
  -- with --attempts K > 1: pass@1..K per solver x model x provider x mode (as in the summary JSON)
  for _, row in ipairs(passk.table(records)) do
    if row.k_max > 1 then
      local ks = {}
      for k = 1, row.k_max do
        local v = row.pass_at[k]
        if v then ks[#ks + 1] = string.format('pass@%d %.3f [%.3f, %.3f]', k, v.value, v.lo, v.hi) end
      end
      lines[#lines + 1] = string.format('%s/%s on %s/%s, %d tasks x %d attempts%s: %s', row.solver, row.model or '-',
        row.provider, row.mode, row.tasks, row.k_max, row.errors > 0 and string.format(' (%d infra errors left out)', row.errors) or '',
        table.concat(ks, ', '))
    end
  end
  return table.concat(lines, '\n')
end

--- The combined summary after a matrix run: one line per provider x mode run, with its counts,
--- status and log. done: {opts, status, info} per run, in the order they ran.
function present.matrix_summary(done)
  local lines = { string.format('matrix: %d run(s)', #done),
    string.format('  %-14s %-6s %6s %6s %6s %6s  %-12s %s', 'provider', 'mode', 'tasks', 'passed', 'failed', 'errors',
      'status', 'log') }
  local tot = { 0, 0, 0, 0 }
  for _, d in ipairs(done) do
    local sm = d.info and d.info.summary or {}
    local n = { sm.task_count or 0, sm.passed or 0, sm.failed or 0, sm.errors or 0 }
    for i = 1, 4 do tot[i] = tot[i] + n[i] end
    local word = d.status == 0 and 'ok' or (d.status >= 128 and 'interrupted' or 'errors')
    lines[#lines + 1] = string.format('  %-14s %-6s %6d %6d %6d %6d  %-12s %s', tostring(d.opts.provider),
      tostring(d.opts.mode or 'cold'), n[1], n[2], n[3], n[4], word, d.info and d.info.jsonl or '-')
  end
  lines[#lines + 1] = string.format('  %-14s %-6s %6d %6d %6d %6d', 'total', '', tot[1], tot[2], tot[3], tot[4])
  return table.concat(lines, '\n')
end

local Tasks = {}
Tasks.__index = Tasks

local function tasks_view(r)
  return setmetatable({ r = r, total = 0, done = 0, passed = 0, failed = 0, errors = 0, retried = 0, running = 0,
    live = {}, order = {}, t0 = clock.now(), width = 1 }, Tasks)
end

function Tasks:status()
  local el = ns_to_s(clock.now() - self.t0)
  local eta = self.done > 0 and el / self.done * (self.total - self.done) or nil
  return string.format('%d/%d done, %d running, %d passed, %d failed, %d errors%s, %s elapsed%s', self.done,
    self.total, self.running, self.passed, self.failed, self.errors,
    self.retried > 0 and string.format(' (%d retried)', self.retried) or '', util.fmt_seconds(el),
    eta and (', ETA ' .. util.fmt_seconds(eta)) or '')
end

--- The trials in flight as {task_id, phase, phase_s}, in start order (the status document too).
function Tasks:in_flight()
  local out, keep = {}, {}
  for _, id in ipairs(self.order) do
    local l = self.live[id]
    if l then
      keep[#keep + 1] = id
      out[#out + 1] = { task_id = id, phase = l.phase, phase_s = math.floor(ns_to_s(clock.now() - l.since) * 10 + 0.5) / 10 }
    end
  end
  self.order = keep
  return out
end

function Tasks:block()
  local lines = {}
  for _, l in ipairs(self:in_flight()) do
    lines[#lines + 1] = string.format('  %-40s %-18s %6.1fs', console.escape(l.task_id, true), l.phase or '?', l.phase_s)
  end
  lines[#lines + 1] = self:status()
  return lines
end

function Tasks:refresh() self.r.block = self:block() end

function Tasks:on(F, name, d)
  local r = self.r
  if name == 'plan' then
    self.total, self.width, self.t0 = d.total, #tostring(d.total), clock.now()
    r:line(string.format('run %s: %d task(s) on %s (%s, solver %s, concurrency %d)%s', d.run_id, d.total,
      d.provider, tostring(d.mode), d.solver, d.concurrency or 1,
      d.resumed and d.resumed > 0 and string.format(', resuming: %d already recorded', d.resumed) or ''))
    if d.no_solution then -- a warning: under --quiet too
      local which = d.no_solution == d.tasks
        and string.format('none of the %d selected tasks has a gold solution', d.tasks)
        or string.format('%d of the %d selected tasks %s no gold solution', d.no_solution, d.tasks,
          d.no_solution == 1 and 'has' or 'have')
      r:warn('cseng: ' .. which .. ' (solution/solve.sh): gold solves nothing there, so ' ..
        (d.no_solution == 1 and 'its trial' or 'their trials') .. ' can only fail or error')
    end
    r:line('log: ' .. d.log)
    if d.status_url then r:line('status: ' .. d.status_url) end
    r:tick(function() self:refresh() end)
    r:live(self:block())
  elseif name == 'warning' then
    r:warn(d.text)
  elseif name == 'trial_start' then
    self.running = self.running + 1
  elseif name == 'phase' then
    local l = self.live[d.task_id]
    if not l then
      l = {}
      self.live[d.task_id] = l
      self.order[#self.order + 1] = d.task_id
    end
    l.phase, l.since = d.phase, clock.now()
  elseif name == 'try' then
    local rec = d.rec
    self.retried = self.retried + 1
    r:line(string.format('[%s] %-40s %-6s %6.1fs [%s: %s] attempt %d of %d, retrying',
      string.rep(' ', 2 * self.width + 1), console.escape(rec.task_id, true), 'error', rec.elapsed_seconds or 0,
      rec.error_stage or '?', console.escape(util.head(rec.error or '', 120), true), rec.try, d.of))
  elseif name == 'trial_gone' then
    self.running = self.running - 1
    self.live[d.task_id] = nil
  elseif name == 'trial' then
    local rec = d.rec
    self.running = self.running - 1
    self.done = self.done + 1
    self.live[rec.task_id] = nil
    if rec.outcome == 'passed' then self.passed = self.passed + 1
    elseif rec.outcome == 'error' then self.errors = self.errors + 1
    else self.failed = self.failed + 1 end
    local detail = rec.outcome == 'error' and string.format(' [%s: %s]', rec.error_stage or '?', util.head(rec.error or '', 160)) or
      string.format(' reward=%s (%s)', tostring(rec.reward), rec.reward_rule or '-')
    if rec.no_solution then detail = detail .. ' (no gold solution: nothing was solved)' end
    if (rec.tries or 1) > 1 then detail = detail .. string.format(' (try %d)', rec.try) end
    if (rec.attempt or 1) > 1 then detail = detail .. string.format(' [attempt %d]', rec.attempt) end
    -- a task id or an error is data: its control characters are escaped
    local line = string.format('[%' .. self.width .. 'd/%d] %-40s %-6s %6.1fs%s', self.done, self.total,
      console.escape(rec.task_id, true), rec.outcome, rec.elapsed_seconds or 0, console.escape(detail, true))
    if not r.tty then line = line .. '  (' .. self:status() .. ')' end
    self:refresh()
    r:line(line)
  elseif name == 'interrupted' then
    r:interrupted(d, function(n) return n == 1 and 'trial' or 'trials' end)
  elseif name == 'finished' then
    r:finish()
    if d.records then
      r:line(present.tasks_table(d.records, F:elapsed()))
    end
    r:stopped(F, 'cseng: ')
    -- an interrupted or stopped run: what is left, and the command that finishes it
    local not_run = self.total - self.done
    if (d.status ~= 'finished' or F.interrupted) and not_run > 0 then
      r:warn(string.format('cseng: %d of %d %s not run; finish the run with:', not_run, self.total,
        self.total == 1 and 'trial' or 'trials'))
      r:warn('  ' .. present.resume_command(F.opts, F.jsonl))
    end
    r:line('results: ' .. F.jsonl .. (d.records and (' (summary: ' .. F.json .. ')') or ''))
    r:line('open them: ' .. present.view_command(F.opts, F.jsonl))
  end
end

-- ---- what the arena shows ------------------------------------------------------------

local Arena = {}
Arena.__index = Arena

--- The arena's status line: per provider ok/n and p50 (warmups: their own counts).
function present.arena_line(F)
  local s, o = F.state, F.opts
  local parts = {}
  for _, name in ipairs(o.providers) do
    local p = F.K.provider(F, name)
    local med = stats.median(p.ready)
    if s.phase == 'warmup' then -- warmups are not measured: their own counts, not "0/0 ok"
      parts[#parts + 1] = string.format('%s %d/%d warmups ok', name, p.counts.warmup_ok, p.counts.warmup)
    else
      parts[#parts + 1] = string.format('%s %d/%d ok%s', name, p.counts.ok, p.counts.measured,
        med and string.format(' p50 %.1f ms', med) or '')
    end
  end
  local done = s.phase == 'warmup' and s.round or F.k.rounds_done.measured
  local w = #tostring(s.rounds)
  -- warmups run as rounds whatever the mode: labelled warmups, not by a mode they do not have
  local label = s.phase == 'warmup' and 'warmup' or (tostring(s.phase) .. ' ' .. tostring(o.mode))
  return string.format('%s [%' .. w .. 'd/%d]%s: %s', label, done, s.rounds,
    (s.blocks or 1) > 1 and string.format(' block %d/%d', s.block or 0, s.blocks) or '', table.concat(parts, ', ')), done
end

--- The arena's end-of-run table (per provider ok/n, p50 with its CI, p90, p99, block CIs, and
--- the computesdk-compatible lines when asked).
function present.arena_table(F)
  local o = F.opts
  local blocks = o.repeats > 1
  local fmt = '%-14s %9s %12s %22s %10s %10s' .. (blocks and ' %22s %s' or '')
  local lines = {
    string.format(fmt, 'provider', 'ok/n', 'p50 ' .. ((F.k.headline or 'ready_ms') == 'ready_ms' and 'ready'
      or F.k.headline), '95% CI', 'p90', 'p99', 'block-level 95% CI', ''),
  }
  local flagged = {}
  local function f(v) return v and string.format('%.1f ms', v) or '-' end
  for _, name in ipairs(o.providers) do
    local p = F.K.provider(F, name)
    local s = stats.summary(p.ready)
    local lo, hi = stats.bootstrap_ci(p.ready, { seed = o.seed ~ stats.hash('ready_ms/' .. name) })
    local bl, note = '-', ''
    if blocks then
      local list = {}
      for b = 1, o.repeats do list[#list + 1] = p.ready_blocks[b] or {} end
      local r = stats.blocks(list, { seed = o.seed ~ stats.hash('blocks/ready_ms/' .. name) })
      if r and r.lo then
        bl = string.format('[%.1f, %.1f]', r.lo, r.hi)
        note = r.disagree and string.format('runs disagree: %d of %d block CIs exclude the block median', r.outside, r.n_blocks) or ''
      end
    end
    lines[#lines + 1] = string.format(fmt, name, p.counts.ok .. '/' .. p.counts.measured,
      f(s.p50), lo and string.format('[%.1f, %.1f]', lo, hi) or '-', f(s.p90), f(s.p99), bl, note)
    local labels = {}
    for l, k in pairs(p.counts.labels or {}) do if l ~= 'failed' then labels[#labels + 1] = l .. ' ' .. k end end
    table.sort(labels)
    if #labels > 0 then
      flagged[#flagged + 1] = string.format('  %s: %s (the fidelity audit; left out of these statistics)', name,
        table.concat(labels, ', '))
    end
  end
  for _, l in ipairs(flagged) do lines[#lines + 1] = l end
  if o.computesdk and (F.k.headline or 'ready_ms') == 'ready_ms' then
    lines[#lines + 1] = 'computesdk-compatible (TTI, 5% trimmed each side, nearest-rank p95/p99, composite score):'
    for _, name in ipairs(o.providers) do
      local p = F.K.provider(F, name)
      local c = stats.computesdk(p.ready, p.counts.measured)
      lines[#lines + 1] = string.format('  %-14s median %s, p95 %s, p99 %s, success %.1f%%, score %.2f', name,
        f(c.median), f(c.p95), f(c.p99), 100 * c.success_rate, c.score)
    end
  end
  return (table.concat(lines, '\n'):gsub(' +\n', '\n'):gsub(' +$', ''))
end

--- The arena's answer, hyperfine's way: per provider after the fastest (by the median
--- ready_ms of the measured successes), "A is N.NN x faster than B [lo, hi]" with the 95% CI
--- of the ratio of medians (a percentile bootstrap seeded as the startup report's, so both say
--- the same), or "A and B are not distinguishable [lo, hi]" when the CI holds 1.
---@return string[] lines
function present.arena_comparison(F)
  local o = F.opts
  local with = {}
  for _, name in ipairs(o.providers) do
    local p = F.K.provider(F, name)
    if p and #p.ready > 0 then with[#with + 1] = { name = name, ready = p.ready, median = stats.median(p.ready) } end
  end
  if #with < 2 then return {} end
  table.sort(with, function(a, b) return a.median < b.median end)
  local report_format = require('reports.lib.format')
  local out, fast = {}, with[1]
  for i = 2, #with do
    local slow = with[i]
    local r = report_format.ratio_of_medians(slow.ready, fast.ready,
      (math.tointeger(o.seed) or 1) ~ stats.hash('ratio/ready_ms/' .. slow.name .. '/' .. fast.name))
    out[#out + 1] = report_format.speedup(fast.name, slow.name, r) .. ' (ready_ms medians)'
  end
  return out
end

local function arena_view(r) return setmetatable({ r = r }, Arena) end

function Arena:on(F, name, d)
  local r = self.r
  if name == 'say' then
    r:line(d.text)
  elseif name == 'round' then
    local line, done = present.arena_line(F)
    local s = F.state
    if r.tty then r:live({ line })
    elseif s.phase == 'warmup' or done == s.rounds or done % math.max(1, s.rounds // 10) == 0 then r:line(line) end
  elseif name == 'interrupted' then
    r:interrupted(d, function(n) return n == 1 and 'trial' or 'trials' end)
  elseif name == 'finished' then
    r:finish()
    r:line(present.arena_table(F))
    for _, line in ipairs(present.arena_comparison(F)) do r:line(line) end
    local o = F.opts
    local planned, measured = #o.providers * o.samples * o.repeats, 0
    for _, pname in ipairs(o.providers) do measured = measured + ((F.K.provider(F, pname) or {}).counts or {}).measured or 0 end
    if (F.interrupted or F.stopped) and measured < planned then
      r:warn(string.format('cseng: %d of %d measured trials not run (an arena run is not resumed: run it again)',
        planned - measured, planned))
    end
    -- the report: rendered here, by the command line, from the log the run wrote
    local rok, rerr = pcall(function()
      return require('reports.lib.render').render { inputs = { F.jsonl }, template = 'startup', output = d.report_path }
    end)
    if rok then r:line('report: ' .. d.report_path)
    else
      r:warn('cseng: the report failed (the log is complete; retry with cseng report ' .. F.jsonl .. '): ' ..
        require('cseng.lib.errors').describe(rerr))
    end
    if d.summary_error then r:warn('cseng: the summary could not be written: ' .. d.summary_error) end
    r:line('results: ' .. F.jsonl .. ((F.json and d.summary_written) and (' (summary: ' .. F.json .. ')') or ''))
    if F.stopped then r:warn('cseng: stopped: ' .. F.stopped.message) end
    if d.live and d.live > 0 then
      r:warn(string.format('cseng: %d sandbox(es) may still exist; run `cseng cleanup %s`', d.live, F.jsonl))
    end
    r:line('open them: ' .. present.view_command(F.opts, F.jsonl))
  end
end

-- ---- what prewarm shows --------------------------------------------------------------

local function prewarm_view(r)
  return { on = function(_, F, name, d)
    if name == 'plan' then
      r:line(string.format('prewarm %s: %d task(s) on %s (concurrency %d)', d.run_id, d.total, d.provider, d.concurrency or 1))
      r:line('log: ' .. d.log)
    elseif name == 'artifact' then
      if d.many then r:line(string.format('%-44s %s', console.escape(d.task_id, true), d.artifact)) end
    elseif name == 'artifact_failed' then
      r:warn(string.format('cseng: prewarm %s: %s', console.escape(d.task_id, true), d.error))
    elseif name == 'interrupted' then
      r:interrupted(d, function(n) return n == 1 and 'task' or 'tasks' end)
    elseif name == 'finished' then
      r:finish()
      r:stopped(F, 'cseng: prewarm: ')
    end
  end }
end

-- ---- the status document and server ------------------------------------------------------

local function r1(v) return v and math.floor(v * 10 + 0.5) / 10 or nil end

--- The status document of any run: run_id, kind, status, phase, label, elapsed_s, log,
--- last_error, stop_reason, and providers.<name> with its counters, endpoint and `live` (always
--- a list); plus what the kind adds (a task run: total, done, eta_s, the trials in flight; the
--- arena: round, rounds, order, seed, ...). Redacted through the one redactor: a secret echoed
--- by a provider or a command never reaches it.
---@return table
function present.status_doc(F, view)
  local st = F.state
  local doc = {
    run_id = F.id, kind = F.kind == 'resume' and 'tasks' or F.kind, status = st.status, phase = st.phase,
    label = F.opts.label, elapsed_s = r1(F:elapsed()), log = F.jsonl, last_error = st.last_error,
    stop_reason = st.stop_reason, started_at = st.started_at, providers = {},
  }
  for _, name in ipairs(F.order) do
    local p = F.P[name]
    local live = {}
    for id in pairs(p.live or {}) do live[#live + 1] = id end
    table.sort(live)
    local c = util.copy(p.counts or {})
    c.live = jsonl.array(live) -- `[]` when empty, never `{}`
    c.last_error = p.last_error
    c.endpoint = p.endpoint
    if F.K and F.K.status_provider then for k, v in pairs(F.K.status_provider(F, name)) do c[k] = v end end
    doc.providers[name] = c
  end
  if view and view.in_flight then
    doc.total, doc.done = view.total, view.done
    local el = F:elapsed()
    doc.eta_s = view.done > 0 and r1(el / view.done * (view.total - view.done)) or nil
    doc.trials = jsonl.array(view:in_flight())
    local p = F.P[F.order[1]]
    if p then
      local c = doc.providers[p.name]
      c.running, c.passed, c.failed, c.errors, c.retried = view.running, view.passed, view.failed, view.errors, view.retried
    end
  end
  if F.K and F.K.status then for k, v in pairs(F.K.status(F)) do doc[k] = v end end
  return secrets.redact_all(doc) -- last_error quotes what providers and commands said
end

-- each run's metrics: its log read incrementally into a registry (weak: it goes with the run)
local run_metrics = setmetatable({}, { __mode = 'k' })

--- The OpenMetrics exposition of a run (its `/metrics`): what its log holds so far, read from
--- where the last scrape stopped (lua/cseng/history/metrics.lua: trials by outcome and code,
--- latency histograms per provider, phase and primitive, live sandboxes, admission limits).
---@return string
function present.metrics(F)
  local metrics = require('cseng.history.metrics')
  local m = run_metrics[F]
  if not m then
    local R = metrics.registry()
    m = { R = R, C = metrics.collector(R) }
    run_metrics[F] = m
  end
  m.C:feed(F.jsonl)
  return m.R:render()
end

--- Serve present.status_doc on 127.0.0.1:port (GET / or /status) and the run's metrics (GET
--- /metrics, OpenMetrics), for every run kind. The server bounds its connections (the engine's
--- defaults: a connection cap, an idle timeout).
function present.status_server(F, port, view)
  local serve = require('cseng.serve')
  local srv, err, code = serve.listen { host = '127.0.0.1', port = port, handler = function(req)
    if req.method ~= 'GET' and req.method ~= 'HEAD' then
      return 405, { ['Allow'] = 'GET', ['Content-Type'] = 'application/json' }, '{"error":"GET only"}'
    end
    if req.path == '/metrics' then
      return 200, { ['Content-Type'] = require('cseng.history.metrics').CONTENT_TYPE, ['Cache-Control'] = 'no-store' },
        present.metrics(F)
    end
    if req.path ~= '/' and req.path ~= '/status' then
      return 404, { ['Content-Type'] = 'application/json' }, '{"error":"try GET / or /status or /metrics"}'
    end
    return 200, { ['Content-Type'] = 'application/json', ['Cache-Control'] = 'no-store' },
      util.json_sorted(present.status_doc(F, view)) .. '\n'
  end }
  if not srv then errors.raise(code or errors.EIO, string.format('--status-port %d: %s (%s)', port, tostring(err), tostring(code))) end
  return srv
end

--- The options with the presentation attached: the progress renderer (plain lines, a live
--- block on a terminal, nothing but warnings under --quiet) and, with --status-port, the status
--- server. o.out/o.err/o.tty override the renderer's streams (specs).
---@param opts table
---@param o table|nil
---@return table opts
function present.attach(opts, o)
  o = o or {}
  -- an interrupt is said by the renderer, in trials (the engine's line counts coroutines, and
  -- the live block's redraw would erase it)
  task.interrupt_notice(false)
  local out = util.copy(opts)
  local r = present.renderer { quiet = opts.quiet, tty = o.tty, out = o.out, err = o.err }
  local view
  local srv
  out.observers = util.copy(opts.observers or {})
  out.observers[#out.observers + 1] = function(F, name, d)
    if not view then
      view = (F.kind == 'startup' and arena_view(r)) or (F.kind == 'prewarm' and prewarm_view(r)) or tasks_view(r)
    end
    if name == 'serve' and opts.status_port then
      srv = present.status_server(F, opts.status_port, view.in_flight and view or nil)
      F.status_url = srv:url() .. '/'
    end
    view:on(F, name, d)
    if name == 'finished' and srv then srv:close(); srv = nil end
  end
  return out
end

return present
