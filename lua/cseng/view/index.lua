--- The viewer's catalogue of run logs: every .jsonl (and summary .json) of the results folders,
--- each read incrementally. A log keeps the byte offset it has read up to; a refresh reads only the
--- bytes appended since (in blocks, so a 1 GB log never sits in memory whole), and a torn last line
--- (a write in progress, or a crash) is left unread until its newline arrives. Per trial it keeps a
--- few columns (task, provider, mode, solver, model, outcome, code, seconds, cost; solver and model
--- keyed as pass@k keys them) and the byte offset and length of its line, so a page of trials or one
--- trial's full record is read back from the file with a seek. A log that cannot be read (not JSON,
--- no run_started, unreadable) keeps its error and is listed with it; it never raises to the server.
local fs = require('cseng.fs')
local jsonl = require('cseng.lib.jsonl')
local report_load = require('reports.lib.load')
local results = require('cseng.results.log')
local sys = require('cseng.sys')
local util = require('cseng.lib.util')
local passk = require('cseng.evals.passk')

local index = {}

local BLOCK = 4 * 1024 * 1024

-- Trial lines are decoded by cjson directly: jsonl.decode's exact-integer pass walks a line in
-- Lua whenever it holds 16 digits in a row (any float cost does), 10x the time at 100,000 trials,
-- and the columns kept need no exact integers. Every other event, and a record read back for a
-- page, goes through jsonl.decode.
local fast = require('cjson').new()
fast.decode_invalid_numbers(false)
local function decode_line(line)
  if line:find('"event":"trial"', 1, true) or line:find('"event":"startup_trial"', 1, true) then
    local ok, v = pcall(fast.decode, line)
    if ok then return v end
    return nil, tostring(v)
  end
  return jsonl.decode(line)
end
local PHASES = { 'build', 'start', 'upload', 'prepare', 'instruction_write', 'solve', 'verify', 'stop' }
index.PHASES = PHASES

-- the columns kept per trial (parallel arrays: 100,000 trials cost a few MB, not a table each)
local COLUMNS = { 'off', 'len', 'task', 'provider', 'mode', 'solver', 'model', 'attempt', 'outcome', 'reward', 'code',
  'stage', 'sandbox_s', 'cost', 'elapsed', 'block', 'warmup' }

local Log = {}
Log.__index = Log

local function new_log(path)
  local log = setmetatable({ path = path, offset = 0, lines = 0, n = 0, cols = {} }, Log)
  log:reset()
  return log
end

--- Forget what was read (the file was replaced or shrank).
function Log:reset()
  self.offset, self.lines, self.n, self.error, self.torn = 0, 0, 0, nil, nil
  self.started, self.finished, self.kind, self.run_id = nil, nil, nil, nil
  for _, c in ipairs(COLUMNS) do self.cols[c] = {} end
  self.counts = { passed = 0, failed = 0, error = 0 }
  self.warmups = 0 -- an arena's warmup samples: listed, never counted as samples
  self.cost, self.solver_cost = 0, 0
  self.providers, self.provider_order, self.modes = {}, {}, {}
  self.solvers, self.models = {}, {} -- the values seen (the trial filters' choices)
  self.codes, self.failure_modes = {}, {}
  self.phase_sum, self.phase_n = {}, {}
  self.live_sb, self.live_by_provider = {}, {}
  self.attempts, self.rerun_at = {}, {}
  self.metrics, self.primaries = {}, {} -- reward keys: {n, sum, min, max}; the primary metrics seen
  self.last_time, self.version = nil, (self.version or 0) + 1
end

local function add_provider(log, p)
  if p ~= nil and not log.providers[p] then
    log.providers[p] = { passed = 0, failed = 0, error = 0 }
    log.provider_order[#log.provider_order + 1] = p
  end
end

local function count_outcome(log, t, outcome, sign)
  log.counts[outcome] = log.counts[outcome] + sign
  local p = log.providers[t.provider]
  if p then p[outcome] = p[outcome] + sign end
end

-- A trial (or startup_trial) event into the columns.
function Log:add_trial(e, off, len)
  local startup = e.event == 'startup_trial'
  local outcome
  if startup then outcome = e.ok and 'passed' or 'error'
  else
    outcome = e.outcome
    if outcome ~= 'passed' and outcome ~= 'failed' then outcome = 'error' end
  end
  local provider = e.provider ~= nil and tostring(e.provider) or '?'
  add_provider(self, provider)
  local mode = e.mode ~= nil and tostring(e.mode) or (startup and (self.started and self.started.mode) or nil)
  if mode then self.modes[mode] = true end
  local task_id = startup and ('round ' .. tostring(e.round or e.sample or '?')) or tostring(e.task_id)
  local key = provider .. '\0' .. tostring(mode) .. '\0' .. task_id
  local i
  local warmup = e.warmup and true or nil
  if e.rerun and self.rerun_at[key] then
    -- cseng run --resume --rerun-errors: the task's new record replaces its earlier one
    i = self.rerun_at[key]
    if self.cols.warmup[i] then self.warmups = self.warmups - 1
    else count_outcome(self, { provider = self.cols.provider[i] }, self.cols.outcome[i], -1) end
    self.cost = self.cost - (self.cols.cost[i] or 0)
  else
    self.n = self.n + 1
    i = self.n
    self.attempts[key] = (self.attempts[key] or 0) + 1
  end
  self.rerun_at[key] = i
  local c = self.cols
  if type(e.rewards) == 'table' then -- every reward key a metric (a rerun's record counts too)
    for k, v in pairs(e.rewards) do
      if type(v) == 'number' then
        local m = self.metrics[k] or { n = 0, sum = 0 }
        m.n, m.sum = m.n + 1, m.sum + v
        m.min, m.max = math.min(m.min or v, v), math.max(m.max or v, v)
        self.metrics[k] = m
      end
    end
    if e.primary_metric then self.primaries[e.primary_metric] = true end
  end
  local code = e.error_code or (type(e.error) == 'table' and e.error.code) or nil
  c.off[i], c.len[i], c.task[i], c.provider[i], c.mode[i] = off, len, task_id, provider, mode or '-'
  -- solver and model as pass@k keys them (lua/cseng/evals/passk.lua): '-' when absent
  local solver = e.solver or (not startup and self.started and self.started.solver) or nil
  c.solver[i] = type(solver) == 'string' and solver or '-'
  c.model[i] = passk.model_of(e) or '-'
  self.solvers[c.solver[i]], self.models[c.model[i]] = true, true
  c.attempt[i] = math.tointeger(e.attempt) or self.attempts[key]
  c.outcome[i], c.reward[i], c.code[i], c.stage[i] = outcome, tonumber(e.reward), code and tostring(code) or nil,
    e.error_stage
  c.sandbox_s[i] = tonumber(e.sandbox_seconds) or (startup and tonumber(e.ready_ms) and e.ready_ms / 1000) or nil
  c.cost[i], c.elapsed[i] = tonumber(e.estimated_cost_usd), tonumber(e.elapsed_seconds)
  c.block[i], c.warmup[i] = math.tointeger(e.block) or e.block, warmup
  -- the cost of a warmup was spent, so it counts; its outcome and timings are not a sample's
  self.cost = self.cost + (tonumber(e.estimated_cost_usd) or 0)
  if warmup then self.warmups = self.warmups + 1; return end
  count_outcome(self, { provider = provider }, outcome, 1)
  if type(e.solver_usage) == 'table' and tonumber(e.solver_usage.cost_usd) then
    self.solver_cost = self.solver_cost + e.solver_usage.cost_usd
  end
  if outcome ~= 'passed' then
    local mode_key = outcome == 'failed' and 'failed (verifier ran, reward < 1)'
      or string.format('%s in %s', tostring(code or 'error'), tostring(e.error_stage or (startup and 'startup') or '?'))
    local fm = self.failure_modes[mode_key]
    if not fm then
      fm = { mode = mode_key, count = 0, tasks = {}, example = e.error and tostring(e.error):sub(1, 300) or nil }
      self.failure_modes[mode_key] = fm
    end
    fm.count = fm.count + 1
    if #fm.tasks < 5 then fm.tasks[#fm.tasks + 1] = task_id end
    if code then self.codes[tostring(code)] = (self.codes[tostring(code)] or 0) + 1 end
  end
  if type(e.phases) == 'table' then
    for _, ph in ipairs(PHASES) do
      local v = tonumber(e.phases[ph .. '_seconds'])
      if v then
        self.phase_sum[ph] = (self.phase_sum[ph] or 0) + v
        self.phase_n[ph] = (self.phase_n[ph] or 0) + 1
      end
    end
  end
end

-- A run id names the run's page and its export's files: text only (a log may hold anything there;
-- without a usable one the run goes by its file's name).
local function text_id(rid)
  if type(rid) == 'string' and rid ~= '' then return rid end
  if math.type(rid) == 'integer' then return tostring(rid) end
  return nil
end

function Log:add_event(e, off, len)
  local kind = e.event
  if e.time then self.last_time = e.time end
  if kind == 'run_started' then
    if not self.started then
      self.started = e
      self.run_id = text_id(e.run_id)
      self.kind = e.kind or 'tasks'
      local id = type(e.identity) == 'table' and e.identity or {}
      local provs = id.providers or e.providers or (e.provider and { e.provider }) or {}
      for _, p in ipairs(type(provs) == 'table' and provs or { provs }) do add_provider(self, tostring(p)) end
      local mode = id.mode or e.mode
      if mode then self.modes[tostring(mode)] = true end
    end
  elseif kind == 'run_finished' then self.finished = e
  elseif kind == 'run_resumed' then self.finished = nil
  elseif kind == 'trial' or kind == 'startup_trial' then self:add_trial(e, off, len)
  elseif kind == 'allocated' then
    local k = tostring(e.provider) .. '\0' .. tostring(e.sandbox_id)
    if not self.live_sb[k] then
      self.live_sb[k] = true
      self.live_by_provider[tostring(e.provider)] = (self.live_by_provider[tostring(e.provider)] or 0) + 1
    end
  elseif kind == 'destroyed' then
    local k = tostring(e.provider) .. '\0' .. tostring(e.sandbox_id)
    if self.live_sb[k] then
      self.live_sb[k] = nil
      self.live_by_provider[tostring(e.provider)] = self.live_by_provider[tostring(e.provider)] - 1
    end
  end
end

--- Read what was appended since the last refresh, at most about `budget` bytes (default: all),
--- so a server can index a big log in slices and answer requests in between. Returns true when
--- something changed; self.pending says whether unread bytes remain.
---@param budget? integer
function Log:refresh(budget)
  local st = fs.stat(self.path)
  if not st then
    self.pending = false
    if self.error == 'the file is gone' then return false end
    self:reset(); self.error = 'the file is gone'
    return true
  end
  if st.size < self.offset or (self.inode_mtime and st.mtime_ns < self.inode_mtime) then self:reset() end
  self.mtime, self.inode_mtime, self.size = st.mtime, st.mtime_ns, st.size
  self.pending = false
  if st.size == self.offset or self.error then return false end
  local f, err = io.open(self.path, 'rb')
  if not f then self.error = tostring(err); return true end
  -- a file replaced by another (a rename over it) that is longer: its first bytes differ
  if self.offset > 0 and f:read(#self.head) ~= self.head then self:reset() end
  if self.offset == 0 then self.head = f:read(256) or ''; f:seek('set', 0) end
  f:seek('set', self.offset)
  local carry, base, read = '', self.offset, 0
  local changed = false
  budget = budget or math.huge
  local start = self.offset
  -- past the budget only while no line was complete yet (a line longer than the budget)
  while not self.error and (read < budget or self.offset == start) do
    local chunk = f:read(math.min(BLOCK, math.max(4096, budget - read)))
    if not chunk then break end
    read = read + #chunk
    local text = carry .. chunk
    local pos = 1
    while true do
      local nl = text:find('\n', pos, true)
      if not nl then break end
      self.lines = self.lines + 1
      if nl > pos then
        local line = text:sub(pos, nl - 1)
        local e, derr = decode_line(line)
        if type(e) ~= 'table' or e.event == nil then
          self.error = string.format('%s:%d: %s', self.path, self.lines,
            type(e) ~= 'table' and ('malformed JSON: ' .. tostring(derr)) or 'not an event (no "event" field)')
          break
        end
        self:add_event(e, base + pos - 1, nl - pos)
        changed = true
      end
      pos = nl + 1
      self.offset = base + pos - 1
    end
    carry = text:sub(pos)
    base = base + pos - 1
  end
  f:close()
  local at_end = self.offset + #carry >= st.size
  self.pending = not self.error and not at_end
  -- a last line without its newline, at the end of the file: still being written, or cut short
  self.torn = (at_end and #carry > 0 and not self.error) and { offset = self.offset, bytes = #carry } or nil
  if at_end and not self.error and self.offset > 0 and not self.started then
    self.error = self.path .. ': no run_started event; not a cseng run log'
  end
  if changed then self.version = self.version + 1 end
  return changed
end

--- Whether the run is still being written: no run_finished, and its process is alive on this
--- host (run_started's host and pid), or the file changed in the last minute.
function Log:is_live(now)
  if self.finished or self.error or not self.started then return false end
  local s = self.started
  if s.host and s.pid and s.host == (sys.hostname()) then
    -- a run of this host: live while its process is (a dead writer left a killed or truncated log)
    return fs.exists('/proc/' .. tostring(math.tointeger(s.pid)))
  end
  return self.mtime ~= nil and (now or os.time()) - self.mtime < 60
end

--- One trial's full record, read back from its line.
function Log:record(i)
  local off, len = self.cols.off[i], self.cols.len[i]
  if not off then return nil end
  local f = io.open(self.path, 'rb')
  if not f then return nil end
  f:seek('set', off)
  local line = f:read(len)
  f:close()
  return line and jsonl.decode(line) or nil
end

--- Every event of the log (for the pages that need them all: the arena's report, compare).
function Log:load()
  return report_load.load({ self.path })
end

-- ---- summaries (.json): small, read whole -----------------------------------------------

local function summary_log(path)
  local log = new_log(path)
  log.summary = true
  function log.refresh(self)
    local st = fs.stat(self.path)
    if not st then self.error = 'the file is gone'; return false end
    if self.size == st.size and self.inode_mtime == st.mtime_ns then return false end
    self:reset()
    self.size, self.mtime, self.inode_mtime = st.size, st.mtime, st.mtime_ns
    local ok, s, why = pcall(report_load.read_summary, self.path)
    if not ok then self.error = tostring(s); return true end
    if not s then self.error = self.path .. ': ' .. why; self.not_a_run = true; return true end
    local run = report_load.summary_run(s, self.path)
    self.run_data = run
    self:add_event(run.started, nil, nil)
    self.run_id = text_id(run.id)
    -- no file offsets: a summary trial's column `len` is its place in run.trials
    for i, t in ipairs(run.trials) do self:add_trial(t, nil, i) end
    if run.finished.status ~= 'unknown' and run.finished.time then self.finished = run.finished end
    self.finished = self.finished or { status = run.finished.status }
    self.version = self.version + 1
    return true
  end
  function log.record(self, i)
    return self.run_data and self.run_data.trials[self.cols.len[i]] or nil
  end
  function log.load(self)
    return report_load.load({ self.path })
  end
  function log.is_live() return false end
  return log
end

-- ---- the catalogue ---------------------------------------------------------------------

local Catalogue = {}
Catalogue.__index = Catalogue

--- A catalogue over folders (or single files). o.restore(log): fill a new log's index from elsewhere
--- (the history store: lua/cseng/view/history.lua) instead of reading it; returns whether it did.
---@param inputs string[]
---@param o? {restore?: fun(log: table): boolean}
function index.new(inputs, o)
  return setmetatable({ inputs = inputs, logs = {}, order = {}, version = 0, restore = o and o.restore }, Catalogue)
end

local harbor = require('cseng.results.harbor')

local function files_of(input, out)
  local st = fs.stat(input)
  if not st then return end
  if st.type ~= 'dir' then out[#out + 1] = input; return end
  if harbor.is_job(input) then out[#out + 1] = input; return end -- a Harbor job folder is one run
  for _, name in ipairs(fs.list(input) or {}) do
    if name:match('%.jsonl$') or name:match('%.json$') or harbor.is_job(fs.join(input, name)) then
      out[#out + 1] = fs.join(input, name)
    end
  end
end

-- A Harbor job folder (lua/cseng/results/harbor.lua), read whole as a summary is: its trials as
-- cseng's trial records.
local function harbor_log(path)
  local log = summary_log(path)
  function log.refresh(self)
    local st = fs.stat(self.path .. '/result.json')
    if not st then self.error = 'the job\'s result.json is gone'; return false end
    if self.inode_mtime == st.mtime_ns then return false end
    self:reset()
    self.inode_mtime = st.mtime_ns
    local ok, events = pcall(harbor.read_job, self.path)
    if not ok then self.error = tostring(type(events) == 'table' and events.message or events); return true end
    local run = report_load.summary_run(results.summary(events), self.path)
    self.run_data = run
    self:add_event(run.started, nil, nil)
    self.run_id = text_id(run.id)
    for i, t in ipairs(run.trials) do self:add_trial(t, nil, i) end
    self.finished = run.finished.time and run.finished or { status = run.finished.status }
    self.version = self.version + 1
    return true
  end
  return log
end

--- Find new files and read what every log gained (at most about `budget` bytes in all; default:
--- everything). self.pending says whether a log has unread bytes left. Returns the catalogue.
---@param budget? integer
function Catalogue:refresh(budget)
  local files = {}
  for _, input in ipairs(self.inputs) do files_of(input, files) end
  local logs_seen = {}
  for _, path in ipairs(files) do
    if path:match('%.jsonl$') then logs_seen[path:gsub('%.jsonl$', '')] = true end
  end
  local changed = false
  for _, path in ipairs(files) do
    if not self.logs[path] then
      -- a summary beside its log is the same run (cseng writes both): the log is read
      local twin = path:match('%.json$') and logs_seen[path:gsub('%.json$', '')]
      if not twin then
        self.logs[path] = path:match('%.jsonl$') and new_log(path) or (harbor.is_job(path) and harbor_log(path)) or summary_log(path)
        self.order[#self.order + 1] = path
        if self.restore and not self.logs[path].summary and self.restore(self.logs[path]) then changed = true end
      end
    end
  end
  local left = budget or math.huge
  self.pending = false
  for _, path in ipairs(self.order) do
    local log = self.logs[path]
    if left > 0 then
      local before = log.offset
      local ok, c = pcall(log.refresh, log, left)
      if not ok then log.error = tostring(c); c = true end
      changed = changed or c
      left = left - math.max(0, log.offset - before)
      self.pending = self.pending or log.pending or false
    else
      self.pending = true -- not looked at this time
    end
  end
  if changed then self.version = self.version + 1 end
  return self
end

--- The logs that are runs (or failed to be read as one), in start order; JSON that is not a run
--- summary at all (a prewarm artifact) is left out.
function Catalogue:list()
  local out = {}
  for _, path in ipairs(self.order) do
    local log = self.logs[path]
    if not log.not_a_run and (log.offset > 0 or log.summary or log.error or log.torn) then out[#out + 1] = log end
  end
  table.sort(out, function(a, b)
    local ta = a.started and a.started.time or ''
    local tb = b.started and b.started.time or ''
    if ta ~= tb then return ta > tb end
    return a.path < b.path
  end)
  -- two files of one run id (a copy, a cut-short duplicate) are listed apart: the later-listed
  -- one's id gets its file name
  local owner = {}
  for _, log in ipairs(out) do -- the file named after its run id owns the id, else the first listed
    local id = log.run_id or (util.basename(log.path):gsub('%.jsonl?$', ''))
    local named = util.basename(log.path):gsub('%.jsonl?$', '') == id
    if not owner[id] or (named and util.basename(owner[id].path):gsub('%.jsonl?$', '') ~= id) then owner[id] = log end
  end
  for _, log in ipairs(out) do
    local id = log.run_id or (util.basename(log.path):gsub('%.jsonl?$', ''))
    log.view_id = owner[id] == log and id or (id .. ' (' .. util.basename(log.path) .. ')')
  end
  return out
end

--- A log by its run id (else by its file's base name).
function Catalogue:find(id)
  local list = self:list()
  for _, log in ipairs(list) do if log.view_id == id then return log end end
  for _, log in ipairs(list) do
    if util.basename(log.path):gsub('%.jsonl?$', '') == id then return log end
  end
  return nil
end

--- The id a log is listed under.
function index.id_of(log)
  return log.view_id or log.run_id or (util.basename(log.path):gsub('%.jsonl?$', ''))
end

return index
