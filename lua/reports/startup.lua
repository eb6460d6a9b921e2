--- Report template: the startup arena (plans/startup.lua). One section per startup run found
--- in the inputs. `cseng report results/<run>.jsonl --template lua/reports/startup.lua`
---
--- Statistics use the measured trials only (warmups are listed apart; trials cut short by
--- Ctrl-C are left out). n = measured trials, successes = those whose readiness check passed;
--- latency statistics are over the successes. The median's 95% CI and the ratios' CIs are
--- percentile bootstraps (2000 replicates) seeded from the run's seed, so the report is the
--- same every time it is rendered.
---
--- Only clean samples are pooled: a sample whose fidelity audit labelled it (reused, given other
--- resources than asked, the audit unreadable: lua/cseng/run/audit.lua) is counted as a success
--- but left out of every latency statistic, and listed under "Fidelity audit" with its sandbox id.
--- A run with a workload other than startup (--workload) gets a section of the workload's figures.
local stats = require('cseng.lib.stats')
local rt = require('reports.lib.task_runs')
local report_format = require('reports.lib.format')

local REPS = report_format.REPS

local METRICS = {
  { key = 'ready_ms', label = 'ready_ms: create + first exec (time to interactive)' },
  { key = 'create_ms', label = 'create_ms: the create call' },
  { key = 'first_exec_ms', label = 'first_exec_ms: the first command, from create\'s return to its output' },
  { key = 'cleanup_ms', label = 'cleanup_ms: destroy, retries included' },
}
local HTTP_METRICS = {
  { key = 'dns_ms', label = 'DNS resolved' },
  { key = 'connect_ms', label = 'TCP connected' },
  { key = 'tls_ms', label = 'TLS handshake done' },
  { key = 'ttfb_ms', label = 'first response byte (TTFB)' },
  { key = 'total_ms', label = 'response complete' },
}

local function get(key)
  return function(r) return r[key] end
end

local function http_get(key)
  return function(r) return r.http and r.http[key] end
end

local function seed_for(run, what)
  local seed = run.started and math.tointeger(run.started.seed) or 1
  return seed ~ stats.hash(what)
end

-- cpus and memory first, then the rest by name
local function h_keys(t)
  local rank = { cpus = 1, memory_mb = 2, memory_gb = 3 }
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys, function(x, y)
    local rx, ry = rank[x] or 9, rank[y] or 9
    if rx ~= ry then return rx < ry end
    return x < y
  end)
  return keys
end

local function fmt_alloc(a)
  if type(a) ~= 'table' then return '–' end
  local parts = {}
  for _, k in ipairs(h_keys(a)) do
    if type(a[k]) ~= 'table' then parts[#parts + 1] = k .. '=' .. tostring(a[k]) end
  end
  return #parts > 0 and table.concat(parts, ', ') or '–'
end

local function fmt_bytes(b)
  if not b then return nil end
  if b >= 2 ^ 30 then return string.format('%.3g GiB', b / 2 ^ 30) end
  return string.format('%.0f MiB', b / 2 ^ 20)
end


local MODE_TITLE = {
  lockstep = 'lockstep (one live sandbox per provider, providers in parallel)',
  sequential = 'sequential (one trial at a time)',
  staggered = 'staggered',
  burst = 'burst',
}

-- The blocks the trials carry (sorted), and the trials of one provider by block.
local function block_numbers(trials)
  local seen, list = {}, {}
  for _, t in ipairs(trials) do
    local b = t.block
    if b and not seen[b] then seen[b] = true; list[#list + 1] = b end
  end
  table.sort(list)
  return list
end

local function by_block(trials)
  local out = {}
  for _, t in ipairs(trials) do
    local b = t.block or 1
    out[b] = out[b] or {}
    table.insert(out[b], t)
  end
  return out
end

-- The mode metrics of one batch of trials (a provider's trials in one block): success rate,
-- wall clock from the first request to the last ready, time to the first ready, lateness.
local function batch_metrics(trials)
  local first, last_ready, first_ready, n, ok = nil, nil, nil, 0, 0
  for _, t in ipairs(trials) do
    n = n + 1
    if t.start_t_ms and (not first or t.start_t_ms < first) then first = t.start_t_ms end
    if t.ok then
      ok = ok + 1
      if t.ready_t_ms then
        if not last_ready or t.ready_t_ms > last_ready then last_ready = t.ready_t_ms end
        if not first_ready or t.ready_t_ms < first_ready then first_ready = t.ready_t_ms end
      end
    end
  end
  return {
    n = n, ok = ok, first = first,
    wall_ms = first and last_ready and (last_ready - first) or nil,
    first_ready_ms = first and first_ready and (first_ready - first) or nil,
  }
end

local arena_sections

-- run_started.figures as the report reads it: the {name, unit, what} entries with a name; anything
-- else in a log (a number, an empty table) is passed over, not a reason to fail the report
local function figure_list(st)
  local out = {}
  for _, f in ipairs(type(st.figures) == 'table' and st.figures or {}) do
    if type(f) == 'table' and (type(f[1]) == 'string' or type(f[1]) == 'number') then
      out[#out + 1] = { tostring(f[1]), f[2] ~= nil and tostring(f[2]) or '', f[3] ~= nil and tostring(f[3]) or '' }
    end
  end
  return out
end

-- One section per figure of the workload (generic over run_started's figures, so a new workload
-- gets its sections and charts with no edit here): what is timed, a table per provider (the clean
-- samples pooled; the labelled ones counted apart, the failed ones with no figure) and the chart
-- of every sample (svg.strip: the clean ones with their median and CI, the labelled ones in a row
-- of their own, never pooled).
local function figure_sections(h, H2, st, providers, measured, ok_trials, describe, chart_prefix)
  local out = {}
  for _, f in ipairs(figure_list(st)) do
    local fname, unit, what = tostring(f[1]), tostring(f[2] or ''), tostring(f[3] or '')
    local fmt = unit == 'ms' and h.ms or function(v) return v and string.format('%.4g', v) or '–' end
    local rows, chart_rows = {}, {}
    for _, name in ipairs(providers) do
      local vals, labelled, failed = {}, {}, 0
      for _, t in ipairs(ok_trials(name)) do
        local v = t.figures and t.figures[fname]
        if type(v) == 'number' then vals[#vals + 1] = v end
      end
      for _, t in ipairs(measured[name] or {}) do
        local v = t.figures and t.figures[fname]
        if not t.ok then failed = failed + 1
        elseif t.clean == false and type(v) == 'number' then labelled[#labelled + 1] = v end
      end
      local d = describe(vals, fname .. '/' .. name)
      rows[#rows + 1] = { name, #vals, fmt(d.p50), h.ci(d.ci_lo, d.ci_hi, fmt), fmt(d.p90), fmt(d.min), fmt(d.max),
        #labelled, failed }
      chart_rows[#chart_rows + 1] = { name = name, values = vals, labelled = labelled, p50 = d.p50, ci_lo = d.ci_lo,
        ci_hi = d.ci_hi }
    end
    local parts = { H2:sub(1, -2) .. '# ' .. fname .. (fname == st.headline and ' (headline)' or '') .. '\n',
      string.format('%s%s. Unit: %s.\n', what:sub(1, 1):upper(), what:sub(2), unit),
      h.table({ 'provider', 'n', 'p50', 'p50 95% CI', 'p90', 'min', 'max', 'labelled (apart)', 'failed (no figure)' },
        rows) }
    parts[#parts + 1] = h.chart(chart_prefix .. 'figure-' .. fname:gsub('[^%w_%-]', '_'), h.svg.strip(chart_rows, {
      title = fname .. ': every sample, the median and its 95% CI', xlabel = fname .. ' (' .. unit .. ')', fmt = fmt,
      unit = unit, attrs = { class = 'workload-figure', ['data-figure'] = fname,
        ['data-unit'] = unit } }), 'samples of ' .. fname .. ' per provider') .. '\n'
    out[#out + 1] = table.concat(parts, '\n')
  end
  return out
end

local function median_of(list)
  return #list > 0 and stats.median(list) or nil
end

-- The fidelity audit (every measured sample) and, for a workload other than startup, its
-- figures over the clean samples: markdown chunks.
arena_sections = function(run, h, H2, providers, measured, ok_trials, describe, chart_prefix)
  local out = {}
  local function add(s) out[#out + 1] = s end
  local st = run.started or {}
  local any = false
  for _, name in ipairs(providers) do
    for _, t in ipairs(measured[name] or {}) do if t.audit then any = true end end
  end
  -- the workload's figures
  if st.workload and st.workload ~= 'startup' and type(st.figures) == 'table' then
    add(H2 .. 'Workload: ' .. st.workload .. '\n')
    local rows = {}
    for _, f in ipairs(figure_list(st)) do
      local fname, unit, what = f[1], f[2], f[3]
      for _, name in ipairs(providers) do
        local vals = {}
        for _, t in ipairs(ok_trials(name)) do
          local v = t.figures and t.figures[fname]
          if type(v) == 'number' then vals[#vals + 1] = v end
        end
        local d = describe(vals, fname .. '/' .. name)
        local fmt = unit == 'ms' and h.ms or function(v) return v and string.format('%.4g', v) or '–' end
        rows[#rows + 1] = { fname .. (fname == st.headline and ' (headline)' or ''), name, #vals, fmt(d.p50),
          h.ci(d.ci_lo, d.ci_hi, fmt), fmt(d.min), fmt(d.max), unit, what }
      end
    end
    add(h.table({ 'figure', 'provider', 'n', 'p50', 'p50 95% CI', 'min', 'max', 'unit', 'timed from -> to' }, rows))
    add('Each figure over the clean samples only (ok, and nothing labelled by the audit); a failed sample has no ' ..
      'figure at all (docs/ARENA.md, "Primitives"). Each figure has a section of its own below, with a chart of ' ..
      'every sample.\n')
    for _, section in ipairs(figure_sections(h, H2, st, providers, measured, ok_trials, describe, chart_prefix)) do
      add(section)
    end
  end
  if not any then return out end
  -- the fidelity audit
  add(H2 .. 'Fidelity audit\n')
  local asked = st.resources
  add('One command in each sandbox after its measured calls (its time, audit_ms, is never part of a figure): ' ..
    'fresh or reused, the CPUs and memory granted' .. (asked and string.format(' against what the plan asked ' ..
    'every provider for (%s)', fmt_alloc(asked)) or ' (the plan asked for no resources: --cpus, --memory-mb)') ..
    ', the isolation class, the code path. A labelled sample is reported here and pooled nowhere.\n')
  local rows, lrows = {}, {}
  for _, name in ipairs(providers) do
    local clean, counts, cpus, mem, iso, paths, ams = 0, {}, {}, {}, {}, {}, {}
    for _, t in ipairs(measured[name] or {}) do
      local a = t.audit
      if a then
        if t.clean then clean = clean + 1 end
        for _, l in ipairs(a.labels or {}) do counts[l] = (counts[l] or 0) + 1 end
        if a.cpus then cpus[#cpus + 1] = a.cpus end
        if a.memory_mb then mem[#mem + 1] = a.memory_mb end
        if a.isolation then iso[a.isolation] = true end
        if a.code_path then paths[a.code_path] = true end
        if t.audit_ms then ams[#ams + 1] = t.audit_ms end
        if a.labels and #lrows < 50 then
          local why = {}
          for _, l in ipairs(a.labels) do why[#why + 1] = l .. ': ' .. tostring((a.why or {})[l] or '') end
          lrows[#lrows + 1] = { name, tostring(t.round), '`' .. tostring(t.sandbox_id or a.sandbox_id or '–') .. '`',
            t.ok and 'ok' or 'failed', table.concat(why, '; ') }
        end
      end
    end
    local keys, labels = {}, {}
    for l in pairs(counts) do keys[#keys + 1] = l end
    table.sort(keys)
    for _, l in ipairs(keys) do labels[#labels + 1] = l .. ' ' .. counts[l] end
    local function set(t) local k = {}; for x in pairs(t) do k[#k + 1] = x end; table.sort(k); return table.concat(k, ', ') end
    local c, m = median_of(cpus), median_of(mem)
    local given = '–'
    if asked and (asked.cpus or asked.memory_mb) then
      local parts = {}
      if asked.cpus and c then
        parts[#parts + 1] = c < asked.cpus and 'fewer CPUs' or (c > asked.cpus and 'more CPUs' or 'CPUs as asked')
      end
      if asked.memory_mb and m then
        parts[#parts + 1] = m < asked.memory_mb * 0.9 and 'less memory' or (m > asked.memory_mb * 1.1 and 'more memory'
          or 'memory as asked')
      end
      given = table.concat(parts, ', ')
    end
    rows[#rows + 1] = { name, #(measured[name] or {}), clean, #labels > 0 and table.concat(labels, ', ') or 'none',
      c and string.format('%.4g', c) or '–', m and string.format('%.0f', m) or '–', given, set(iso), set(paths) ~= '' and set(paths) or '–',
      h.ms(median_of(ams)) }
  end
  add(h.table({ 'provider', 'n', 'clean', 'labelled', 'CPUs (median)', 'memory MiB (median)', 'against the request',
    'isolation', 'code path', 'audit_ms p50' }, rows))
  if #lrows > 0 then
    add('Labelled samples (at most 50; each with the provider\'s sandbox id, for the provider to check):\n')
    add(h.table({ 'provider', 'round', 'sandbox id', 'sample', 'labels' }, lrows))
  end
  return out
end

local function section(run, h, multi)
  local out = {}
  local function add(s) out[#out + 1] = s end
  local st, fin = run.started or {}, run.finished or {}
  local providers = st.providers or {}
  if #providers == 0 then
    local g = h.group(run.startup_trials, 'provider')
    for _, grp in ipairs(g) do providers[#providers + 1] = grp.key end
  end

  local measured, warmups = {}, {}
  for _, name in ipairs(providers) do measured[name], warmups[name] = {}, {} end
  for _, t in ipairs(run.startup_trials) do
    local bucket = t.warmup and warmups or measured
    bucket[t.provider] = bucket[t.provider] or {}
    if not t.interrupted then table.insert(bucket[t.provider], t) end
  end
  -- the samples statistics pool: ok, and clean by the audit (a log without audits: ok)
  local function ok_trials(name)
    local list = {}
    for _, t in ipairs(measured[name] or {}) do
      if t.ok and t.clean ~= false then list[#list + 1] = t end
    end
    return list
  end
  local function successes(name)
    local k = 0
    for _, t in ipairs(measured[name] or {}) do if t.ok then k = k + 1 end end
    return k
  end

  -- one bootstrap per (metric, provider), seeded from the run seed and the pair
  local described = {}
  local function describe(vals, what)
    if not described[what] then described[what] = stats.describe(vals, { reps = REPS, seed = seed_for(run, what) }) end
    return described[what]
  end

  local H2 = multi and '### ' or '## '
  local blocks = block_numbers(run.startup_trials)

  -- the summary of ready_ms, per provider
  local srows = {}
  local ready = {}
  for _, name in ipairs(providers) do
    local n = #(measured[name] or {})
    local oks = ok_trials(name)
    local vals = h.values(oks, 'ready_ms')
    ready[name] = vals
    local d = describe(vals, 'ready_ms/' .. name)
    local k = successes(name)
    local wlo, whi = stats.wilson(k, n)
    srows[#srows + 1] = { name, n, k, n > 0 and (h.pct(k / n) .. ' ' .. h.ci(wlo, whi, h.pct)) or '–',
      h.ms(d.p50), h.ci(d.ci_lo, d.ci_hi), h.ms(d.p90), h.ms(d.p99), h.ms(d.max) }
  end
  -- the block-level medians and CIs (--repeat), per provider
  local block_ci = {}
  if #blocks > 1 then
    for _, name in ipairs(providers) do
      local bb = by_block(ok_trials(name))
      local lists = {}
      for _, b in ipairs(blocks) do lists[#lists + 1] = h.values(bb[b] or {}, 'ready_ms') end
      block_ci[name] = stats.blocks(lists, { reps = REPS, seed = seed_for(run, 'blocks/ready_ms/' .. name) })
    end
  end

  -- the answer first: the fastest provider against each other one, as the console says it
  add((multi and '## ' or '# ') .. 'Sandbox startup: ' .. table.concat(providers, ' vs ') .. '\n')
  local answer = {}
  local ranked = {}
  for _, name in ipairs(providers) do
    if #ready[name] > 0 then ranked[#ranked + 1] = { name = name, median = stats.median(ready[name]) } end
  end
  table.sort(ranked, function(a, b) return a.median < b.median end)
  for i = 2, #ranked do
    local fast, slow = ranked[1].name, ranked[i].name
    local r = h.ratio_of_medians(ready[slow], ready[fast], seed_for(run, 'ratio/ready_ms/' .. slow .. '/' .. fast))
    local line = '**' .. h.speedup(fast, slow, r) .. '** (ready_ms, the ratio of medians)'
    local a, b = block_ci[fast], block_ci[slow]
    if a and b then
      if not (a.lo and b.lo) or stats.overlap(a.lo, a.hi, b.lo, b.hi) then
        line = line .. '; across the ' .. #blocks .. ' blocks they are **not distinguishable** (block-level CIs overlap)'
      else
        line = line .. '; the ' .. #blocks .. ' blocks agree (block-level CIs apart)'
      end
    end
    answer[#answer + 1] = '- ' .. line
  end
  if #ranked == 1 and #providers == 1 then
    local d = describe(ready[ranked[1].name], 'ready_ms/' .. ranked[1].name)
    answer[#answer + 1] = string.format('- **%s is ready in %s ms** (median ready_ms, 95%% CI %s)', ranked[1].name,
      h.ms(d.p50), h.ci(d.ci_lo, d.ci_hi))
  end
  for _, name in ipairs(providers) do
    if #ready[name] == 0 then answer[#answer + 1] = '- **' .. name .. ' had no successful measured trial** (Failures, below)' end
  end
  add(H2 .. 'Answer\n')
  add(table.concat(answer, '\n') .. '\n')
  add(h.table({ 'provider', 'n', 'ok', 'success [95% CI]', 'p50 ms', 'p50 95% CI', 'p90 ms', 'p99 ms', 'max ms' },
    srows))
  add('ready_ms: create + the first command (time to interactive), measured trials only.\n')
  local flagged = 0
  for _, name in ipairs(providers) do flagged = flagged + successes(name) - #ok_trials(name) end
  if flagged > 0 then
    add(string.format('%d successful sample(s) that the fidelity audit labelled are left out of every statistic ' ..
      '(Fidelity audit, below).\n', flagged))
  end
  add(table.concat(arena_sections(run, h, H2, providers, measured, ok_trials, describe,
    multi and (run.id .. '.') or ''), '\n'))

  -- the run
  add(H2 .. 'Run\n')
  local status = fin.status or 'incomplete (no run_finished record: the run was killed or is still going)'
  local versions = st.versions or {}
  local rows = {
    { 'run', h.code(run.id) },
    { 'started / finished', (st.time or '?') .. ' / ' .. (fin.time or '–') },
    { 'status', status .. (fin.stop_message and (': ' .. fin.stop_message) or '') },
    { 'samples, warmups', string.format('%s measured + %s warmup rounds planned; %s + %s done', tostring(st.samples),
      tostring(st.warmups), tostring(fin.rounds_done and fin.rounds_done.measured or '?'),
      tostring(fin.rounds_done and fin.rounds_done.warmup or '?')) },
    { 'seed', tostring(st.seed) .. (st.seed_given == false and ' (drawn at start)' or '') },
    { 'mode', (MODE_TITLE[st.mode or 'lockstep'] or tostring(st.mode)) ..
      (st.burst and (', ' .. st.burst .. ' creates in flight at once per provider') or '') ..
      (st.stagger_ms and (', one create every ' .. h.num(st.stagger_ms, 0) .. ' ms') or '') },
    { 'blocks', tostring(st.repeats or 1) .. ((st.repeats or 1) > 1 and
      ' (--repeat: the run as repeated blocks; block order seeded)' or '') },
    { 'command', h.code(st.command or '?') },
    { 'readiness marker', h.code(st.expect or '?') .. ' as a line of stdout, exit code 0' },
    { 'host', string.format('%s (%s CPUs)', tostring(st.host), tostring(st.cpu_count)) },
    { 'engine', string.format('cseng %s, %s, libcurl %s, libuv %s, arena %s', tostring(versions.cseng),
      tostring(versions.lua), tostring(versions.libcurl), tostring(versions.libuv), tostring(st.arena_version)) },
  }
  for _, name in ipairs(providers) do
    local a = (st.adapters or {})[name] or {}
    local ep = type(a.endpoint) == 'table' and a.endpoint.host and a.endpoint.scheme ~= 'unix' and a.endpoint or nil
    rows[#rows + 1] = { 'adapter ' .. name, string.format('%s %s (sha256 %s)%s%s', tostring(a.adapter or name),
      a.version and ('v' .. a.version) or '', tostring(a.sha256), a.remote and ', remote' or '',
      ep and string.format(', endpoint %s://%s%s%s', ep.scheme, ep.host, ep.port and (':' .. ep.port) or '',
        ep.loopback and ' (loopback: a local fake?)' or '') or '') }
  end
  if st.label then table.insert(rows, 2, { 'label', st.label }) end
  add(h.table({ 'field', 'value' }, rows, 'll'))
  add('Method: ' .. (st.method or 'see docs/ARENA.md') .. '. Statistics: type-7 quantiles; the 95% CI of the ' ..
    'median is a percentile bootstrap (' .. REPS .. ' replicates, seeded from the run seed); success-rate ' ..
    'intervals are Wilson score intervals.\n')

  local series = {}
  for _, name in ipairs(providers) do series[#series + 1] = { name = name, values = ready[name] } end
  add(h.chart((multi and (run.id .. '.') or '') .. 'ready-ecdf', h.svg.ecdf(series, {
    title = 'ready_ms: time from create to the first command\'s output', xlabel = 'ready_ms (milliseconds)' }),
    'ECDF of ready_ms per provider') .. '\n')
  add('Each curve is the fraction of successful measured trials ready within x ms; the dot marks the median.\n')
  add(h.chart((multi and (run.id .. '.') or '') .. 'ready-box', h.svg.box(series, {
    title = 'ready_ms: p5, p25, median, p75, p95; dots at min and max', xlabel = 'ready_ms (milliseconds)' }),
    'box plot of ready_ms per provider') .. '\n')


  local mode = st.mode or 'lockstep'

  -- repeated blocks: the run as a random effect
  if #blocks > 1 then
    add(H2 .. 'Repeated blocks: how much of the difference survives a rerun\n')
    add(string.format('The measured trials ran as %d blocks (`--repeat`). The block-level figure is the median of ' ..
      'the block medians, with a percentile bootstrap over whole blocks (%d replicates): it counts the run itself ' ..
      'as a random effect. The within-run CI is the usual bootstrap over every sample pooled, as one run would ' ..
      'report it; each block\'s own CI is what that block alone would have said.\n', #blocks, REPS))
    local brows = {}
    for _, name in ipairs(providers) do
      local r = block_ci[name]
      local d = describe(ready[name], 'ready_ms/' .. name)
      if r then
        local own = {}
        for i, m in ipairs(r.medians) do
          own[#own + 1] = h.ms(m) .. ' ' .. h.ci(r.within[i].lo, r.within[i].hi)
        end
        local verdict
        if not r.lo then verdict = 'one block with successes: no block-level CI'
        elseif r.disagree then
          verdict = string.format('**disagree**: %d of %d blocks\' own CIs exclude the block-level median; ' ..
            'one run\'s CI overstates the certainty, read the block-level CI', r.outside, r.n_blocks)
        else verdict = 'agree: every block\'s own CI holds the block-level median' end
        brows[#brows + 1] = { name, r.n_blocks, h.ms(r.median), h.ci(r.lo, r.hi), h.ms(d.p50), h.ci(d.ci_lo, d.ci_hi),
          h.ms(r.spread), h.ms(r.mad), table.concat(own, '; '), { raw = verdict } }
      end
    end
    add(h.table({ 'provider', 'blocks', 'median of block medians', 'block-level 95% CI', 'pooled p50',
      'within-run 95% CI', 'between-block spread (max-min)', 'MAD', 'each block: median [own CI]', 'runs' },
      brows, 'lrrrrrrrll'))
    if #providers > 1 then
      add('Provider comparisons at the block level: a pair whose block-level CIs overlap is **not distinguishable** ' ..
        'by this run, whatever the pooled ratio says.\n')
      local crow = {}
      for i = 1, #providers do
        for j = i + 1, #providers do
          local a, b = block_ci[providers[i]], block_ci[providers[j]]
          if a and b then
            local reading
            if not (a.lo and b.lo) or stats.overlap(a.lo, a.hi, b.lo, b.hi) then
              reading = 'not distinguishable (block-level CIs overlap)'
            else
              local fast, slow = providers[i], providers[j]
              if a.median > b.median then fast, slow = slow, fast end
              reading = string.format('%s faster than %s (block-level CIs apart)', fast, slow)
            end
            crow[#crow + 1] = { providers[i], h.ci(a.lo, a.hi), providers[j], h.ci(b.lo, b.hi), reading }
          end
        end
      end
      add(h.table({ 'provider A', 'block-level CI', 'provider B', 'block-level CI', 'reading' }, crow, 'lrlrl'))
    end
    -- host and network context, per block
    local ctx = {}
    for _, e in ipairs(run.events) do
      if e.event == 'block' then ctx[e.block] = ctx[e.block] or {}; ctx[e.block].start = e end
      if e.event == 'block_finished' then ctx[e.block] = ctx[e.block] or {}; ctx[e.block].fin = e end
    end
    add('**Host and network context per block** (load average at the block\'s end, CPU steal over the block from ' ..
      '/proc/stat, the client\'s own CPU time from getrusage, and the create call\'s HTTP phases, median over the ' ..
      'block\'s successful trials: a slow network or a busy client is not a slow provider)\n')
    local hrows = {}
    for _, b in ipairs(blocks) do
      local c = ctx[b] or {}
      local hd = c.fin and c.fin.host or {}
      local order = c.start and c.start.order and table.concat(c.start.order, ', ') or '–'
      local net = {}
      for _, name in ipairs(providers) do
        local list = by_block(ok_trials(name))[b] or {}
        local function med(k) local v = h.values(list, http_get(k)); return #v > 0 and h.ms(stats.median(v)) or nil end
        if med('ttfb_ms') then
          net[#net + 1] = string.format('%s: dns %s, connect %s, tls %s, ttfb %s', name, med('dns_ms') or '–',
            med('connect_ms') or '–', med('tls_ms') or '–', med('ttfb_ms'))
        end
      end
      hrows[#hrows + 1] = { b, order, hd.wall_s and h.num(hd.wall_s, 1) or '–',
        hd.loadavg and h.num(hd.loadavg[1], 2) or '–', hd.steal_pct and h.num(hd.steal_pct, 2) .. '%' or '–',
        hd.client_cpu_s and (h.num(hd.client_cpu_s, 2) .. ' s (' .. h.num(hd.client_cpu_pct, 1) .. '%)') or '–',
        #net > 0 and table.concat(net, '; ') or 'no HTTP timings (local providers)' }
    end
    add(h.table({ 'block', 'order', 'wall s', 'load (1 min)', 'CPU steal', 'client CPU', 'create HTTP phases (ms)' },
      hrows, 'rlrrrrl'))
  end

  -- the mode
  add(H2 .. 'Mode: ' .. (MODE_TITLE[mode] or mode) .. '\n')
  add('Time to interactive (TTI) = create + the first command (`ready_ms`). Wall clock: from a provider\'s first ' ..
    'create request to its last ready sandbox, per block (median over blocks when there are several); time to first ' ..
    'ready: from that first request to the first ready sandbox. Lateness: how late the engine sent a create after ' ..
    'it was due (burst: the burst\'s start or the moment a place opened; staggered: its slot), and `stall_ms`: how ' ..
    'much of a trial\'s timed calls overlapped the engine\'s own record writes. Both are the client\'s own timing ' ..
    'error, not the provider\'s.\n')
  local mrows = {}
  for _, name in ipairs(providers) do
    local all = measured[name] or {}
    local oks = ok_trials(name)
    local d = describe(ready[name], 'ready_ms/' .. name)
    local walls, firsts = {}, {}
    for _, list in pairs(by_block(all)) do
      local m = batch_metrics(list)
      if m.wall_ms then walls[#walls + 1] = m.wall_ms end
      if m.first_ready_ms then firsts[#firsts + 1] = m.first_ready_ms end
    end
    local late = h.values(all, 'lateness_ms')
    local stall = h.values(oks, 'stall_ms')
    local wlo, whi = stats.wilson(#oks, #all)
    mrows[#mrows + 1] = { name, #all, #all > 0 and (h.pct(#oks / #all) .. ' ' .. h.ci(wlo, whi, h.pct)) or '–',
      h.ms(d.p50), h.ms(d.p95), h.ms(d.p99), h.ms(stats.median(walls)), h.ms(stats.median(firsts)),
      h.ms(stats.median(late)), h.ms(#late > 0 and stats.summary(late).max or nil),
      h.ms(#stall > 0 and stats.summary(stall).max or nil) }
  end
  add(h.table({ 'provider', 'n', 'success [95% CI]', 'TTI p50 ms', 'TTI p95', 'TTI p99', 'wall clock ms',
    'time to first ready ms', 'lateness p50 ms', 'lateness max ms', 'stall max ms' }, mrows))
  if mode == 'staggered' then
    add('**Ramp profile**: TTI by launch offset (ms from the provider\'s first create in its block), in ten equal ' ..
      'slices of the launch window; a provider that queues under load shows TTI rising with the offset.\n')
    local rrows = {}
    for _, name in ipairs(providers) do
      local pts = {}
      for _, list in pairs(by_block(measured[name] or {})) do
        local first = batch_metrics(list).first
        for _, t in ipairs(list) do
          if t.ok and t.start_t_ms and first then pts[#pts + 1] = { t.start_t_ms - first, t.ready_ms } end
        end
      end
      local maxoff = 0
      for _, pt in ipairs(pts) do maxoff = math.max(maxoff, pt[1]) end
      local slices = {}
      for _, pt in ipairs(pts) do
        local k = maxoff > 0 and math.min(10, math.floor(pt[1] / maxoff * 10) + 1) or 1
        slices[k] = slices[k] or {}
        table.insert(slices[k], pt[2])
      end
      for k = 1, 10 do
        if slices[k] then
          rrows[#rrows + 1] = { name, string.format('%s–%s', h.num((k - 1) * maxoff / 10, 0), h.num(k * maxoff / 10, 0)),
            #slices[k], h.ms(stats.median(slices[k])), h.ms(stats.summary(slices[k]).max) }
        end
      end
    end
    add(h.table({ 'provider', 'launch offset ms', 'n', 'TTI p50 ms', 'TTI max ms' }, rrows))
  end

  -- computesdk-compatible
  add(H2 .. 'computesdk-compatible summary\n')
  add('The figures computesdk\'s public benchmark publishes, computed its way over the measured TTI: 5% of the ' ..
    'successful times trimmed from each end, the median of the rest, nearest-rank p95 and p99, the success rate ' ..
    'over every attempt, and the composite score (0.60 s(median) + 0.25 s(p95) + 0.15 s(p99)) × success rate with ' ..
    's(v) = max(0, 100 (1 − v / 10 s)). Their numbers come from their harness, region and mode (burst of 100 ' ..
    'today): set them beside these only for the same mode.\n')
  local crows = {}
  for _, name in ipairs(providers) do
    local c = stats.computesdk(ready[name], #(measured[name] or {}))
    crows[#crows + 1] = { name, c.attempts, c.n, c.trimmed, h.ms(c.median), h.ms(c.p95), h.ms(c.p99),
      h.pct(c.success_rate), h.num(c.score, 2) }
  end
  add(h.table({ 'provider', 'attempts', 'successes', 'trimmed each end', 'median ms', 'p95 ms', 'p99 ms',
    'success rate', 'score' }, crows))
  add('`cseng export --format computesdk` writes this run as their result file (docs/ARENA.md, computesdk interop).\n')
  add(rt.rates_section({ runs = { run } }, h, multi and '###' or '##')) -- nil without recorded rates

  -- per metric
  add((multi and '### ' or '## ') .. 'Per metric\n')
  local function metric_table(getter, what)
    local rs = {}
    for _, name in ipairs(providers) do
      local n = #(measured[name] or {})
      local oks = ok_trials(name)
      local vals = h.values(oks, getter)
      local d = describe(vals, what .. '/' .. name)
      rs[#rs + 1] = { name, n, #oks, n > 0 and h.pct(#oks / n) or '–', h.ms(d.min), h.ms(d.p50), h.ci(d.ci_lo, d.ci_hi),
        h.ms(d.p90), h.ms(d.p95), h.ms(d.p99) .. ((d.n > 0 and d.n < 100) and '*' or ''), h.ms(d.max), h.ms(d.mean),
        h.ms(d.stddev) }
    end
    return h.table({ 'provider', 'n', 'successes', 'success rate', 'min', 'p50', 'p50 95% CI', 'p90', 'p95', 'p99',
      'max', 'mean', 'stddev' }, rs)
  end
  for _, m in ipairs(METRICS) do
    add('**' .. m.label .. '** (ms)\n')
    add(metric_table(get(m.key), m.key))
  end
  local any_http = false
  for _, name in ipairs(providers) do
    for _, t in ipairs(ok_trials(name)) do if t.http then any_http = true end end
  end
  if any_http then
    add('**HTTP phases of the create call** (curl\'s marks, ms from the start of the request; a reused ' ..
      'connection has no DNS, connect or TLS time)\n')
    local skipped = {}
    for _, m in ipairs(HTTP_METRICS) do
      local any = false
      for _, name in ipairs(providers) do
        for _, v in ipairs(h.values(ok_trials(name), http_get(m.key))) do if v ~= 0 then any = true end end
      end
      if any then
        add('*create call: ' .. m.label .. '*\n')
        add(metric_table(http_get(m.key), 'http_' .. m.key))
      else
        skipped[#skipped + 1] = m.key
      end
    end
    if #skipped > 0 then
      add('Left out, zero in every trial: ' .. table.concat(skipped, ', ') .. ' (a reused connection or a local socket).\n')
    end
    local rrows = {}
    for _, name in ipairs(providers) do
      local oks, reused = ok_trials(name), 0
      local with = 0
      for _, t in ipairs(oks) do if t.http then with = with + 1; if t.http.reused then reused = reused + 1 end end end
      if with > 0 then rrows[#rrows + 1] = { name, with, reused } end
    end
    add(h.table({ 'provider', 'create calls with timings', 'on a reused connection' }, rrows))
  end
  add('\\* p99 of fewer than 100 samples is close to the maximum; read it as such.\n')
  local rec_ms, stalled, stall_max, nm = {}, 0, 0, 0
  for _, t in ipairs(run.startup_trials) do
    if t.record_ms then rec_ms[#rec_ms + 1] = t.record_ms end
    if not t.warmup and t.ok then
      nm = nm + 1
      if (t.stall_ms or 0) > 0 then stalled = stalled + 1; stall_max = math.max(stall_max, t.stall_ms) end
    end
  end
  if #rec_ms > 0 then
    local s = stats.summary(rec_ms)
    add(string.format('Engine bookkeeping: writing and fsyncing an allocation record took p50 %s ms, max %s ms ' ..
      '(`record_ms`, not part of any metric). Record writes hold the engine\'s loop, so a call of another ' ..
      'provider that completed meanwhile is timed late by at most the overlap: %d of %d successful measured ' ..
      'trials overlapped a write, by at most %s ms (`stall_ms`; docs/ARENA.md).\n', h.ms(s.p50), h.ms(s.max),
      stalled, nm, h.ms(stall_max)))
  end

  -- pairwise
  if #providers > 1 then
    add((multi and '### ' or '## ') .. 'Pairwise: ratio of medians\n')
    add('For each pair, the slower provider\'s median divided by the faster one\'s, with a 95% percentile ' ..
      'bootstrap CI (both samples resampled independently). A CI that excludes 1 is a difference the data supports.\n')
    local prow = {}
    for _, m in ipairs({ METRICS[1], METRICS[2], METRICS[3] }) do
      for i = 1, #providers do
        for j = i + 1, #providers do
          local a, b = providers[i], providers[j]
          local va, vb = h.values(ok_trials(a), m.key), h.values(ok_trials(b), m.key)
          if #va > 0 and #vb > 0 then
            local fast, slow, vf, vs = a, b, va, vb
            if stats.median(va) > stats.median(vb) then fast, slow, vf, vs = b, a, vb, va end
            local r = h.ratio_of_medians(vs, vf, seed_for(run, 'ratio/' .. m.key .. '/' .. slow .. '/' .. fast))
            local sig = (r.lo > 1 or r.hi < 1) and 'yes' or 'no'
            prow[#prow + 1] = { m.key, fast, slow, h.num(r.ratio, 3),
              h.ci(r.lo, r.hi, function(v) return h.num(v, 3) end),
              sig, (h.speedup(fast, slow, r):gsub(' %[95%% CI [^%]]*%]$', '')) }
          end
        end
      end
    end
    if #prow > 0 then
      add(h.table({ 'metric', 'faster', 'slower', 'slower/faster', '95% CI', 'CI excludes 1', 'reading' }, prow,
        'lllrrcl'))
    else
      add('No pair has successful samples on both sides.\n')
    end

    -- order position: what the shuffle protects against
    if mode == 'lockstep' or mode == 'sequential' then
    add((multi and '### ' or '## ') .. 'Order position\n')
    add('Median ready_ms by the provider\'s position in its round (1 = started first). The order of every round is ' ..
      'a seeded shuffle, so a position effect, if any, is spread evenly over the providers instead of biasing one.\n')
    local orow = {}
    for _, name in ipairs(providers) do
      local row = { name }
      for pos = 1, #providers do
        local vals = h.values(ok_trials(name), 'ready_ms', function(t) return t.position == pos end)
        row[#row + 1] = #vals > 0 and string.format('%s (n=%d)', h.ms(stats.median(vals)), #vals) or '–'
      end
      orow[#orow + 1] = row
    end
    local hdr = { 'provider' }
    for pos = 1, #providers do hdr[#hdr + 1] = 'position ' .. pos end
    add(h.table(hdr, orow))
    end
  end

  -- failures
  add((multi and '### ' or '## ') .. 'Failures\n')
  local frows = {}
  for _, name in ipairs(providers) do
    local groups = {}
    local keys = {}
    for _, t in ipairs(measured[name] or {}) do
      if not t.ok then
        local k = (t.error_stage or '?') .. '\0' .. (t.error_code or '?')
        if not groups[k] then
          groups[k] = { stage = t.error_stage or '?', code = t.error_code or '?', n = 0, example = t.error }
          keys[#keys + 1] = k
        end
        groups[k].n = groups[k].n + 1
      end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local g = groups[k]
      local ex = tostring(g.example or '')
      if #ex > 160 then ex = ex:sub(1, 160) .. '…' end
      frows[#frows + 1] = { name, g.stage, g.code, g.n, ex }
    end
  end
  if #frows == 0 then add('No measured trial failed.\n')
  else add(h.table({ 'provider', 'stage', 'code', 'count', 'example' }, frows, 'lllrl')) end
  local interrupted = 0
  for _, t in ipairs(run.startup_trials) do if t.interrupted then interrupted = interrupted + 1 end end
  if interrupted > 0 then
    add(string.format('%d trial(s) were cut short by an interrupt and are left out.\n', interrupted))
  end

  -- warmups (none: no section)
  local any_warmup = false
  for _, name in ipairs(providers) do if #(warmups[name] or {}) > 0 then any_warmup = true end end
  local wrows = {}
  for _, name in ipairs(providers) do
    local ws = warmups[name] or {}
    local okc, vals = 0, {}
    for _, t in ipairs(ws) do
      if t.ok then okc = okc + 1 end
      vals[#vals + 1] = t.ok and h.ms(t.ready_ms) or ('failed: ' .. tostring(t.error_stage))
    end
    wrows[#wrows + 1] = { name, #ws, okc, table.concat(vals, ', ') }
  end
  if any_warmup then
    add((multi and '### ' or '## ') .. 'Warmups (excluded from the statistics)\n')
    add(h.table({ 'provider', 'warmups', 'ok', 'ready_ms in order' }, wrows, 'lrrl'))
  end

  -- environment
  add((multi and '### ' or '## ') .. 'Environment (probed on the first warmup)\n')
  local erows = {}
  local envs = {}
  for _, e in ipairs(run.environments) do envs[e.provider] = envs[e.provider] or e end
  for _, name in ipairs(providers) do
    local e = envs[name]
    if e then
      local env = e.environment or {}
      erows[#erows + 1] = {
        name, env.python_output or (e.error and ('probe failed: ' .. e.error)) or '–',
        env.cpus and h.num(env.cpus, 2) or (env.cpu_limit and ('no limit (' .. env.cpu_limit .. ')') or 'not visible'),
        fmt_bytes(env.memory_bytes) or (env.memory_limit and 'no limit' or 'not visible'),
        env.nproc or '–', fmt_bytes(env.mem_total_bytes) or '–', env.kernel or '–', env.os or '–',
        fmt_alloc(e.allocation),
      }
    else
      erows[#erows + 1] = { name, 'not probed', '', '', '', '', '', '', '' }
    end
  end
  add(h.table({ 'provider', 'python', 'cgroup CPUs', 'cgroup memory', 'nproc', 'MemTotal', 'kernel', 'os',
    'allocation (provider-reported)' }, erows, 'lllllllll'))

  -- cleanup accounting, from the allocation records (not from the trial records)
  add((multi and '### ' or '## ') .. 'Sandboxes\n')
  local arows = {}
  local live_by = {}
  for _, a in ipairs(run.live) do
    live_by[a.provider] = live_by[a.provider] or {}
    table.insert(live_by[a.provider], a.sandbox_id)
  end
  local count = function(list, name)
    local n = 0
    for _, e in ipairs(list) do if e.provider == name then n = n + 1 end end
    return n
  end
  for _, name in ipairs(providers) do
    local live = live_by[name] or {}
    arows[#arows + 1] = { name, count(run.allocated, name), count(run.destroyed, name), count(run.cleanup_failed, name),
      #live > 0 and table.concat(live, ', ') or 'none' }
  end
  add(h.table({ 'provider', 'allocated', 'destroyed', 'cleanup failed', 'not destroyed' }, arows, 'lrrrl'))
  if #run.live > 0 then
    add('Some sandboxes were not destroyed: `cseng cleanup ' .. run.path .. '` destroys them.\n')
  end

  -- admission (off for a burst, and by default for every startup run: shown when a plan turned it on)
  local adm = rt.admission_section({ runs = { run } }, h)
  if adm then add(multi and (adm:gsub('^## ', '### ')) or adm) end

  -- reproduce
  add((multi and '### ' or '## ') .. 'Reproduce\n')
  local cmd = string.format('cseng run %s --providers %s --samples %s --warmups %s --seed %s',
    st.plan_file or 'plans/startup.lua',
    table.concat(providers, ','), tostring(st.samples), tostring(st.warmups), tostring(st.seed)) ..
    (mode ~= 'lockstep' and (' --mode ' .. mode) or '') .. (st.burst and (' --burst ' .. st.burst) or '') ..
    (st.stagger_ms and (' --stagger-ms ' .. h.num(st.stagger_ms, 0)) or '') ..
    ((st.repeats or 1) > 1 and (' --repeat ' .. st.repeats) or '')
  add('```sh\n' .. cmd .. '\ncseng report ' .. run.path .. ' --template lua/reports/startup.lua\n```\n')
  return table.concat(out, '\n')
end

return function(data, h)
  local runs = {}
  for _, run in ipairs(data.runs) do
    if run.kind == 'startup' then runs[#runs + 1] = run end
  end
  if #runs == 0 then return '# Sandbox startup\n\nNo startup runs in ' .. table.concat(data.inputs, ', ') .. '.\n' end
  local parts = {}
  if #runs > 1 then parts[1] = '# Sandbox startup: ' .. #runs .. ' runs\n' end
  for _, run in ipairs(runs) do parts[#parts + 1] = section(run, h, #runs > 1) end
  return table.concat(parts, '\n')
end
