--- A watch's schedule: slots of `every` seconds aligned to the epoch (slot k's base time is
--- k * every, so an hourly watch runs at the top of the hour on every machine and after every
--- restart), each due at its base plus its jitter: a fraction of `jitter` drawn from the watch's
--- name and the slot (stats.hash), the same after a restart, different between watches, so many
--- watches of one provider do not start at the same second. A slot not started within `max_late`
--- of its due time is missed, and recorded as missed: a run that overran its period (`busy`), or
--- a watch that was not running (`down`).
local stats = require('cseng.lib.stats')
local errors = require('cseng.lib.errors')

local schedule = {}

local UNITS = { ms = 0.001, s = 1, m = 60, h = 3600, d = 86400 }

--- Seconds of a duration: "90s", "15m", "1h", "1h30m", "2d", "500ms" or a bare number of seconds;
--- nil and why for anything else.
---@param s string|number
---@return number|nil seconds, string|nil err
function schedule.duration(s)
  if type(s) == 'number' then
    if s ~= s or s < 0 or s == math.huge then return nil, 'not a duration: ' .. tostring(s) end
    return s
  end
  if type(s) ~= 'string' or s == '' or #s > 32 then return nil, 'not a duration: ' .. tostring(s) end
  if tonumber(s) then return schedule.duration(tonumber(s)) end
  local total, rest = 0, s
  while rest ~= '' do
    local n, unit, tail = rest:match('^(%d+%.?%d*)(%a+)(.*)$')
    if not n or not UNITS[unit] then
      return nil, string.format('not a duration: %q (a number and a unit: ms, s, m, h, d; e.g. 1h30m)', s)
    end
    total = total + tonumber(n) * UNITS[unit]
    rest = tail
  end
  return total
end

local Schedule = {}
Schedule.__index = Schedule

--- A schedule. o.every (seconds, >= 1), o.jitter (seconds, [0, every)), o.max_late (seconds,
--- [0, every]; default every / 2), o.seed (a string: the watch's name).
---@return table
function schedule.new(o)
  local every = o.every
  if type(every) ~= 'number' or every < 1 or every > 366 * 86400 then errors.raise(errors.EUSAGE, '--every must be from 1s to 366d') end
  local jitter = o.jitter or 0
  if type(jitter) ~= 'number' or jitter < 0 or jitter >= every then errors.raise(errors.EUSAGE, '--jitter must be under --every') end
  local max_late = o.max_late or every / 2
  if type(max_late) ~= 'number' or max_late < 0 or max_late > every then
    errors.raise(errors.EUSAGE, '--max-late must be from 0 to --every')
  end
  return setmetatable({ every = every, jitter = jitter, max_late = max_late, seed = tostring(o.seed or '') }, Schedule)
end

--- The slot whose period holds time t (seconds since the epoch).
function Schedule:slot_at(t) return math.floor(t / self.every) end

--- When slot k is due (seconds since the epoch): its base time plus its jitter.
function Schedule:due(k)
  local base = k * self.every
  if self.jitter == 0 then return base end
  local u = (stats.hash(self.seed .. ':' .. math.tointeger(k)) >> 11) / 9007199254740992.0 -- [0, 1)
  return base + u * self.jitter
end

--- The next slot to run after slot `last` (nil: none yet) at time now: {slot, due, missed}, where
--- missed = {first, last} are the slots in between whose time passed (due + max_late <= now).
---@param last integer|nil
---@param now number
---@return {slot: integer, due: number, missed: {first: integer, last: integer}|nil}
function Schedule:next(last, now)
  local cur = self:slot_at(now)
  local k = last and (last + 1) or cur
  local first_missed
  -- every slot before cur - 1 is past its window (max_late <= every): skip them at once
  if k < cur - 1 then first_missed, k = k, cur - 1 end
  while self:due(k) + self.max_late <= now do
    first_missed = first_missed or k
    k = k + 1
  end
  return { slot = k, due = self:due(k), missed = first_missed and { first = first_missed, last = k - 1 } or nil }
end

return schedule
