--- What the loopback fakes of the REST providers (spec/providers/<vendor>/fake.lua: daytona, e2b, lizard, ...)
--- share: their switches (opts over defaults, changeable by set), the request counters specs
--- assert exact numbers on (luv's tap.lua style), injected latencies and forced statuses, the
--- live sandboxes, and the f.stats / f.sandbox / f.set / f.close every fake offers.
---
---   local common = require 'spec.fakes.rest'
---   local b = common.fake(opts, { api_key = 'k' }, { execs = 0 }, host)  -- host: optional, sandboxes.lua's
---   b.cfg (the switches), b.st (the counters), b.sandboxes (id -> record)
---   local n = b.hit('creates', 'create')   -- count a call of an endpoint, then sleep its latency
---   local s = b.forced('create_status', n)  -- the status forced for the n-th call, or nil
---   b.count('bad_requests') ; b.refused(is_create) ; b.request('GET /x')
---   b.add(id, sb) ; b.remove(id)          -- the live set, created/destroyed/live/max_live, ids
---   local items = b.matching('labels', want) ; local page, next_start = common.page(items, start, size, fn)
---   local srv = common.listen(handler, port, {max_body=})  -- max_body: serve's request body cap
---   local body = common.body(req) ; common.is_strmap(t)  -- a JSON object body (nil: not one) ; a string map
---   common.with(base, extra) ; common.part_names(parts)  -- base with extra's fields ; a multipart body's shape
---   b.record(req, 'create', '/sandboxes/{id}', body?)  -- for the differential specs (below)
---   fake.route = common.router { { 'GET', '/sandboxes/{id}', 'get' } }  -- op, template, params
---   local route = b.routes({ { 'GET', '/sandboxes/{id}', get, op = 'get', hit = { 'gets', 'get' } } }, no_route)
---   local route = b.routes(rows, no_route, guard)  -- guard(req, row): the checks before any route (auth)
---   return b.finish(f, { srv, srv2 })      -- adds f.stats, f.sandbox, f.set, f.close
local serve = require('cseng.serve')
local task = require('cseng.task')
local clock = require('cseng.clock')
local jsonl = require('cseng.lib.jsonl')
local cjson = require('cjson')

local M = {}

--- A switch's value: v itself, or v(...) when it is a function.
function M.pick(v, ...)
  if type(v) == 'function' then return v(...) end
  return v
end

--- A JSON answer (jsonl.encode: members sorted), with extra headers.
function M.json(status, value, headers)
  local h = { ['Content-Type'] = 'application/json' }
  for k, v in pairs(headers or {}) do h[k] = v end
  return status, h, jsonl.encode(value)
end

--- A request's JSON object body ({} when there is none), or nil when it is not one.
function M.body(req)
  if req.body == nil or req.body == '' then return {} end
  local ok, b = pcall(cjson.decode, req.body)
  if not ok or type(b) ~= 'table' then return nil end
  return b
end

--- Whether t is absent or a map of strings to strings (labels, environments).
function M.is_strmap(t)
  if t == nil then return true end
  if type(t) ~= 'table' then return false end
  for k, v in pairs(t) do if type(k) ~= 'string' or type(v) ~= 'string' then return false end end
  return true
end

--- A loopback listener (an ephemeral port unless port) answering with handler.
function M.listen(handler, port, o)
  return assert(serve.listen { host = '127.0.0.1', port = port or 0, handler = handler, max_body = o and o.max_body })
end

--- One page of a list: fn(item) for items[start .. start + size - 1], and the start of the
--- next page (nil on the last).
function M.page(items, start, size, fn)
  local page = {}
  for i = start, math.min(#items, start + size - 1) do page[#page + 1] = fn(items[i]) end
  return page, start + size <= #items and start + size or nil
end

--- A route table's matcher: rows { METHOD, '/path/{name}/more', ... } (op: row.op, else row[3]
--- when it is a string), tried in order; METHOD '*' matches any method; {name} matches one path
--- segment, returned as sent (not URL-decoded; an id holding '/' arrives as %2F, one segment);
--- row.where = { name = 'lua pattern' } narrows what a segment may be (a row matches only when
--- each named segment matches its pattern). route(method, path) -> op, template, params, row; no
--- row: 'unknown', path, {}.
---@param rows table[]
---@return fun(method: string, path: string): string, string, table, table|nil
function M.router(rows)
  local compiled = {}
  for _, r in ipairs(rows) do
    local names = {}
    local pattern = r[2]:gsub('[%^%$%(%)%%%.%[%]%*%+%-%?]', '%%%0')
    pattern = pattern:gsub('{([%w_]+)}', function(n)
      names[#names + 1] = n
      return '([^/]+)'
    end)
    compiled[#compiled + 1] = { pattern = '^' .. pattern .. '$', names = names, row = r,
      op = r.op or (type(r[3]) == 'string' and r[3] or nil) }
  end
  return function(method, path)
    for _, c in ipairs(compiled) do
      if c.row[1] == method or c.row[1] == '*' then
        local caps = { path:match(c.pattern) }
        if caps[1] then
          local params, ok = {}, true
          for i, n in ipairs(c.names) do
            params[n] = caps[i]
            local want = c.row.where and c.row.where[n]
            if want and not caps[i]:match(want) then ok = false end
          end
          if ok then return c.op, c.row[2], params, c.row end
        end
      end
    end
    return 'unknown', path, {}, nil
  end
end

--- The names of a multipart body's parts (parts: nil when it was not one), the shape the
--- differential record keeps of it.
function M.part_names(parts)
  local names = {}
  for _, p in ipairs(parts or {}) do names[p.name] = 'a multipart part' end
  return names
end

--- base with the fields of extra set on it (f.config / f.env with the caller's additions).
function M.with(base, extra)
  for k, v in pairs(extra or {}) do base[k] = v end
  return base
end

--- A sandbox host (spec/fakes/sandboxes.lua) that breaks the promises a benchmark relies on
--- when the fake's switches say so (the arena's fidelity audit must catch each):
---   reuse_sandboxes = true | fn(n) -> bool   a destroyed sandbox goes back to a pool, unreset, and
---       the next create hands it out again under a new id (a warm pool that does not reset:
---       files, processes and the kernel are the earlier sample's); st.pooled, st.reused count
---   grant_cpus = n | fn(asked) -> n           every command runs on n CPUs only (its affinity,
---       taskset -c 0..n-1), whatever the create asked for (asked: the create's cpus, or nil)
--- Switches are read at each call, so f.set changes them during a run. The host's functions are
--- replaced in place (the fakes call their own reference to it).
function M.faithless(h, cfg, st)
  local host = { create = h.create, destroy = h.destroy, run = h.run, close = h.close }
  h.pool = {}
  function h.create(spec)
    local n = st.created + 1
    local sb
    if M.pick(cfg.reuse_sandboxes, n) and #h.pool > 0 then
      sb = table.remove(h.pool, 1)
      st.reused = st.reused + 1
    else
      sb = host.create(spec)
    end
    local want = cfg.grant_cpus
    if want ~= nil then
      local k = math.tointeger(M.pick(want, spec and spec.cpus))
      sb.cpu_list = k and k >= 1 and ('0-' .. (k - 1)) or nil
    end
    return sb
  end
  function h.destroy(sb)
    if M.pick(cfg.reuse_sandboxes, st.created) then
      st.pooled = st.pooled + 1
      h.pool[#h.pool + 1] = sb
      return true
    end
    return host.destroy(sb)
  end
  function h.run(sb, what, o)
    if sb.cpu_list then
      local argv = what.argv or { 'bash', '-c', what.shell }
      what = { argv = { 'taskset', '-c', sb.cpu_list, table.unpack(argv) } }
    end
    return host.run(sb, what, o)
  end
  function h.close()
    for _, sb in ipairs(h.pool) do pcall(host.destroy, sb) end
    h.pool = {}
    return host.close()
  end
  return h
end

--- The state of one fake. opts: the caller's switches; defaults: switches used when opts has
--- none; counters: the fake's own counters on top of the common ones (creates, created,
--- deletes, destroyed, lists, unauthorized, bad_requests, unknown, live, max_live, ids,
--- requests); host: a sandbox host (spec/fakes/sandboxes.lua) whose sandboxes (record.host)
--- remove destroys and f.close closes.
function M.fake(opts, defaults, counters, host)
  local cfg = {}
  for k, v in pairs(opts or {}) do cfg[k] = v end
  for k, v in pairs(defaults or {}) do
    if cfg[k] == nil then cfg[k] = v end
  end
  local st = {
    creates = 0, created = 0, deletes = 0, destroyed = 0, lists = 0, unauthorized = 0, bad_requests = 0,
    unknown = 0, live = 0, max_live = 0, ids = {}, requests = {},
  }
  for k, v in pairs(counters or {}) do st[k] = v end
  local sandboxes = {}
  st.reused, st.pooled = 0, 0
  if host then M.faithless(host, cfg, st) end
  local b = { cfg = cfg, st = st, sandboxes = sandboxes, host = host }

  -- libuv timers tick in whole milliseconds of a cached loop time, so a plain sleep may end a
  -- little short: sleep until the monotonic clock has passed the deadline.
  function b.latency(endpoint, n)
    local l = cfg.latency
    if type(l) == 'table' then l = l[endpoint] end
    l = M.pick(l, n)
    if not l or l <= 0 then return end
    local deadline = clock.now() + math.floor(l * 1e9)
    repeat
      task.sleep(math.max(0.001, (deadline - clock.now()) / 1e9))
    until clock.now() >= deadline
  end

  --- The status the switch `name` forces for the n-th call (the switch may be fn(n, ...)), or nil.
  function b.forced(name, n, ...)
    local s = M.pick(cfg[name], n, ...)
    if s and s ~= true then return s end
    return nil
  end

  --- Count one more in st[name]; returns the new count.
  function b.count(name)
    st[name] = st[name] + 1
    return st[name]
  end

  --- Count a call of an endpoint (st[counter]) and apply its latency; returns n, its number.
  function b.hit(counter, endpoint)
    local n = b.count(counter)
    b.latency(endpoint, n)
    return n
  end

  function b.request(line) st.requests[#st.requests + 1] = line end

  -- The differential-conformance recorder (spec/helpers/conformance.lua), made by f.record.
  local recorder
  --- Record req as operation op of route (a path template) while f.record(client) is on; body:
  --- the decoded message (a table or JSON text) when req.body is not plain JSON.
  function b.record(req, op, route, body)
    if recorder then recorder:add(req, op, route, body) end
  end

  --- A dispatcher from a route table, the one way the REST fakes name their endpoints. A row:
  ---   { 'POST', '/sandboxes/{id}/exec', fn, op = 'exec', hit = { 'execs', 'exec' }, record = false }
  --- {name} matches one path segment, passed to fn as sent (not URL-decoded). The first row whose
  --- method and path match answers: the request is recorded as operation op of the template (the
  --- differential specs; record = false: fn records it itself, e.g. once it has read the body),
  --- counted and delayed as hit says ({counter, latency endpoint}: b.hit), then answered by
  --- fn(req, params, n, ...) (n: the hit's count; ...: what the dispatcher was called with after
  --- req). No row: st.unknown counts one and unknown(req, ...) answers.
  --- guard (optional): guard(req, row, ...) runs first on every request (row: the matching row or
  --- nil), for what a listener checks before any route (credentials, the sandbox a request is
  --- for): it returns the answer (a status first), or nil followed by the arguments the row's fn
  --- (or unknown) then gets in place of the dispatcher's ...
  ---@param rows table[]
  ---@param unknown fun(req: table, ...): any
  ---@param guard? fun(req: table, row: table|nil, ...): any
  ---@return fun(req: table, ...): any
  function b.routes(rows, unknown, guard)
    local route = M.router(rows)
    local function dispatch(req, template, params, r, ...)
      if not r then
        b.count('unknown')
        return unknown(req, ...)
      end
      if r.record ~= false then b.record(req, r.op, template) end
      local n = r.hit and b.hit(r.hit[1], r.hit[2]) or nil
      return r[3](req, params, n, ...)
    end
    return function(req, ...)
      local _, template, params, r = route(req.method, req.path)
      if not guard then return dispatch(req, template, params, r, ...) end
      local g = table.pack(guard(req, r, ...))
      if g[1] ~= nil then return table.unpack(g, 1, g.n) end
      return dispatch(req, template, params, r, table.unpack(g, 2, g.n))
    end
  end

  --- Count a request refused for its credentials (and the create it was).
  function b.refused(is_create)
    b.count('unauthorized')
    if is_create then b.count('creates') end
  end

  --- A sandbox was created.
  function b.add(id, sb)
    sandboxes[id] = sb
    st.created = st.created + 1
    st.ids[#st.ids + 1] = id
    st.live = st.live + 1
    if st.live > st.max_live then st.max_live = st.live end
  end

  --- A sandbox is destroyed (its host sandbox too).
  function b.remove(id)
    local sb = sandboxes[id]
    sandboxes[id] = nil
    if host and sb and sb.host then host.destroy(sb.host) end
    st.destroyed = st.destroyed + 1
    st.live = st.live - 1
  end

  --- The live sandboxes whose record[field] has every k = v of want (all with no want), by id.
  function b.matching(field, want)
    local items = {}
    for _, sb in pairs(sandboxes) do
      local match = true
      for k, v in pairs(want or {}) do if sb[field][k] ~= v then match = false end end
      if match then items[#items + 1] = sb end
    end
    table.sort(items, function(x, y) return x.id < y.id end)
    return items
  end

  --- Give f the common methods; returns f.
  function b.finish(f, servers)
    --- A snapshot of the counters (lists copied, so a snapshot taken before a run does not grow
    --- with it; live_ids = sandboxes not destroyed).
    function f.stats()
      local out = {}
      for k, v in pairs(st) do
        if type(v) == 'table' then
          local copy = {}
          for k2, v2 in pairs(v) do copy[k2] = v2 end
          v = copy
        end
        out[k] = v
      end
      local live = {}
      for sid in pairs(sandboxes) do live[#live + 1] = sid end
      table.sort(live)
      out.live_ids = live
      return out
    end

    --- The sandbox's record (with a host: record.host is its local sandbox, host.root its "/").
    function f.sandbox(id) return sandboxes[id] end

    --- Change switches (false clears one).
    function f.set(new)
      for k, v in pairs(new) do
        if v == false then cfg[k] = nil else cfg[k] = v end
      end
    end

    --- Record requests as made by client ('sdk' | 'adapter'; false stops recording).
    function f.record(client)
      if not recorder then recorder = require('spec.helpers.conformance').recorder() end
      recorder.client = client or nil
    end

    --- The recorded requests of client (all when nil).
    function f.records(client) return recorder and recorder:of(client) or {} end

    function f.close()
      for _, srv in ipairs(servers) do srv:close() end
      if host then host.close() end
    end

    return f
  end

  return b
end

return M
