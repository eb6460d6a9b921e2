--- A loopback fake of the Lizard create/delete API (lua/providers/lizard.lua) with a hidden create
--- rate: a token bucket of `rate` creates per second (burst 1; rate = false: none); a create over it is a 429, with
--- `Retry-After: retry_after` when that is set, and then every create until that time has passed
--- is a 429 too (a ban, as rate-limited APIs do). Creates take `latency` seconds, times
--- in_flight / capacity when `capacity` is set and more are in flight (a provider that queues:
--- its create latency rises with the load, with no 429).
---
---   local f = require('spec.fakes.admission').start { rate = 20, latency = 0.05 }
---   f.set { rate = 200 }         -- the limit rises (or retry_after = 1: bans)
---   f.stats() --> { creates =, created =, throttled =, bans =, banned = (429s during a ban), deletes =,
---                   live =, max_in_flight = }
---   f.close()
local serve = require('cseng.serve')
local clock = require('cseng.clock')
local task = require('cseng.task')
local cjson = require('cjson')

local M = {}
M.API_KEY, M.PROJECT = 'adm-key', 'adm-proj'

function M.start(o)
  local cfg = { rate = o.rate == nil and 20 or o.rate, latency = o.latency or 0.05, retry_after = o.retry_after, capacity = o.capacity }
  local st = { creates = 0, created = 0, throttled = 0, banned = 0, bans = 0, deletes = 0, live = 0, in_flight = 0, max_in_flight = 0 }
  local tokens, last, ban_until, seq = 1, clock.now(), 0, 0
  local JSON = { ['Content-Type'] = 'application/json' }

  local function take()
    local now = clock.now()
    tokens = math.min(1, tokens + (now - last) / 1e9 * cfg.rate)
    last = now
    if tokens >= 1 then
      tokens = tokens - 1
      return true
    end
    return false
  end

  local function handler(req)
    if req.headers['x-api-key'] ~= M.API_KEY then return 401, JSON, '{"error":"invalid API key"}' end
    if req.method == 'POST' and req.path == '/api/sandboxes' then
      st.creates = st.creates + 1
      local now = clock.now()
      if now < ban_until then
        st.throttled, st.banned = st.throttled + 1, st.banned + 1
        return 429, { ['Content-Type'] = 'application/json', ['Retry-After'] = tostring(cfg.retry_after) },
          '{"error":"rate limited"}'
      end
      if cfg.rate and not take() then
        st.throttled = st.throttled + 1
        local h = { ['Content-Type'] = 'application/json' }
        if cfg.retry_after then
          h['Retry-After'] = tostring(cfg.retry_after)
          ban_until = now + math.floor(cfg.retry_after * 1e9)
          st.bans = st.bans + 1
        end
        return 429, h, '{"error":"rate limited"}'
      end
      st.in_flight = st.in_flight + 1
      st.max_in_flight = math.max(st.max_in_flight, st.in_flight)
      task.sleep(cfg.latency * (cfg.capacity and math.max(1, st.in_flight / cfg.capacity) or 1))
      st.in_flight = st.in_flight - 1
      seq = seq + 1
      st.created, st.live = st.created + 1, st.live + 1
      return 201, JSON, cjson.encode { sandboxId = string.format('adm-%06d', seq), status = 'running' }
    end
    if req.method == 'DELETE' and req.path:match('^/api/sandboxes/[%w%-]+$') then
      st.deletes, st.live = st.deletes + 1, st.live - 1
      return 204, {}, ''
    end
    return 404, JSON, '{"error":"not found"}'
  end

  local srv = assert(serve.listen { host = '127.0.0.1', port = 0, handler = handler })
  local f = { url = 'http://127.0.0.1:' .. srv:port(), api_key = M.API_KEY, project_id = M.PROJECT }
  function f.set(t)
    for k, v in pairs(t) do cfg[k] = v end
    if t.retry_after == false then cfg.retry_after, ban_until = nil, 0 end
  end
  function f.stats()
    local out = {}
    for k, v in pairs(st) do out[k] = v end
    return out
  end
  function f.close() srv:close() end
  return f
end

return M
