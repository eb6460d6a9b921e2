--- Run logs and watch journals written directly, for the history specs and the history bench
--- (spec/history/store_spec.lua, spec/view/history_browser_spec.lua, bench/history_bench.lua): the shapes
--- cseng writes (run_started, startup_trial, allocated/destroyed, run_finished; the journal's
--- watch_started, slot), with the values the caller chooses. Not a spec.
---
---   local HH = require 'spec.helpers.history'
---   HH.arena_log(path, { run_id = 'r1', t0 = 1796600000, samples = 12, create = function(i) return 50 end })
---   HH.watch_folder(dir, 'w', { {create = ...}, ... }, { window = 5, hold = 2 })
local fs = require('cseng.fs')
local clock = require('cseng.clock')
local jsonl = require('cseng.lib.jsonl')
local common = require('spec.helpers.common')

local HH = {}

local function line(rec) return jsonl.encode(rec) .. '\n' end

--- An arena (startup) log at path. o: run_id, t0 (epoch seconds), providers (default {'lizard'}),
--- samples (default 12), warmups (default 1), create(i, provider) / exec(i, provider) -> ms
--- (defaults 50 and 20), error(i, provider) -> code | nil (the create failed), lost(i, provider)
--- -> true (the sandbox vanished: ENOSANDBOX in first_exec), status (default 'finished'; false:
--- no run_finished), blocks (default 1), plan (default 'startup').
function HH.arena_log(path, o)
  local out = {}
  local t0 = o.t0 or 1796600000
  local providers = o.providers or { 'lizard' }
  local function at(s) return clock.wall(t0 + s) end
  out[#out + 1] = line { event = 'run_started', run_id = o.run_id, time = at(0), kind = 'startup', plan = o.plan or 'startup',
    providers = providers, mode = 'lockstep', samples = o.samples or 12, warmups = o.warmups or 1, host = 'spec', pid = 1,
    identity = { kind = 'startup', plan = o.plan or 'startup', providers = providers, mode = 'lockstep' } }
  local blocks = o.blocks or 1
  local per = (o.samples or 12) // blocks
  local k = 0
  for w = 1, (o.warmups or 1) + (o.samples or 12) do
    local warm = w <= (o.warmups or 1)
    local i = warm and 0 or (w - (o.warmups or 1))
    for _, p in ipairs(providers) do
      k = k + 1
      local sb = string.format('sb-%s-%d', o.run_id, k)
      local rec = { event = 'startup_trial', run_id = o.run_id, time = at(1 + k * 0.01), provider = p, phase = warm and 'warmup' or 'measured',
        warmup = warm, round = w, mode = 'lockstep', block = (not warm and blocks > 1) and math.min(blocks, (i - 1) // per + 1) or nil }
      local code = not warm and o.error and o.error(i, p) or nil
      if code then
        rec.ok, rec.error, rec.error_code, rec.error_stage = false, 'create failed: ' .. code, code, 'create'
      else
        out[#out + 1] = line { event = 'allocated', run_id = o.run_id, time = at(1 + k * 0.01), provider = p, sandbox_id = sb }
        local c = o.create and o.create(i, p) or 50
        local e = o.exec and o.exec(i, p) or 20
        rec.sandbox_id, rec.create_ms, rec.first_exec_ms = sb, c, e
        if not warm and o.lost and o.lost(i, p) then
          rec.ok, rec.error, rec.error_code, rec.error_stage = false, 'the sandbox is gone', 'ENOSANDBOX', 'first_exec'
        else
          rec.ok, rec.ready_ms, rec.exit_code = true, c + e, 0
        end
        rec.cleanup_ms, rec.cleanup_ok, rec.cleanup_attempts = 5, true, 1
        out[#out + 1] = line { event = 'destroyed', run_id = o.run_id, time = at(1 + k * 0.01), provider = p, sandbox_id = sb }
      end
      rec.elapsed_ms = (rec.ready_ms or 10) + 5
      out[#out + 1] = line(rec)
    end
  end
  if o.status ~= false then
    out[#out + 1] = line { event = 'run_finished', run_id = o.run_id, time = at(2 + k * 0.01), status = o.status or 'finished' }
  end
  assert(fs.write(path, table.concat(out)))
  return path
end

--- A watch's folder: one arena log per entry of runs (each entry arena_log's options; run_id, t0
--- and the slot filled in), named as `cseng watch` names them, and the watch's journal naming
--- them slot by slot. Returns the files in order.
---@param dir string
---@param name string
---@param runs table[]
---@param detect table|nil the detection options the journal records
---@param o? {every?: number, first_slot?: integer}
function HH.watch_folder(dir, name, runs, detect, o)
  o = o or {}
  local every = o.every or 3600
  local first = o.first_slot or 499000
  assert(fs.mkdir_p(fs.join(dir, 'watches')))
  local j = { line { event = 'watch_started', run_id = 'watch:' .. name, time = clock.wall(first * every), name = name,
    plan = 'plans/startup.lua', kind = 'startup', every_s = every, detect = detect } }
  local files = {}
  for k, r in ipairs(runs) do
    local slot = first + k - 1
    local file = string.format('%s-%d.jsonl', name, slot)
    r.run_id = r.run_id or string.format('%s-%06d', name, k)
    r.t0 = r.t0 or slot * every + 5
    HH.arena_log(fs.join(dir, file), r)
    files[#files + 1] = file
    j[#j + 1] = line { event = 'slot', run_id = 'watch:' .. name, time = clock.wall(slot * every), slot = slot, attempt = 1,
      status = 'started', due_s = slot * every, file = file }
    j[#j + 1] = line { event = 'slot', run_id = 'watch:' .. name, time = clock.wall(slot * every + 60), slot = slot, attempt = 1,
      status = 'finished', file = file, run_id_of = r.run_id }
  end
  assert(fs.write(fs.join(dir, 'watches', name .. '.jsonl'), table.concat(j)))
  return files
end

--- A deterministic jitter in [-a, a] for run k, sample i.
function HH.jitter(k, i, a)
  local x = ((k * 7919 + i * 104729) % 1000) / 1000
  return (2 * x - 1) * a
end

--- The first difference between a history store as it stands and the same store rebuilt from its
--- logs (a store kept current must equal the rebuilt one), or nil. Rebuilds S.
---@param S table an open store (cseng.history.store)
---@return string|nil
function HH.rebuild_diff(S)
  local kept = S:dump()
  S:rebuild()
  local rebuilt = S:dump()
  for t, rows in pairs(kept) do
    local d = common.diff(rebuilt[t], rows, t)
    if d then return d end
  end
  return nil
end

return HH
