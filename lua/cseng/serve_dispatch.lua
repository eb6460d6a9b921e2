--- The dispatcher of cseng.serve (engine/lserve.c loads it with require when serve.listen is
--- given a handler): a pool of worker tasks, each accepting a request and running the handler
--- in itself, so handlers may yield. A worker that takes a request when none other waits spawns
--- one more first, so a request never waits for a handler to finish (a handler may wait on
--- another request); a worker that finishes while IDLE_MAX others wait ends. No task is created
--- per request under a steady load. A handler's error becomes a 500 (logged with its
--- traceback); a handler that returns after req:start is finished for it; a cancelled handler
--- aborts its request and ends its worker.
---@param srv table the server (engine/lserve.c)
---@param handler fun(req: table): any
---@return table task the first worker
return function(srv, handler)
  local task = require('cseng.task')

  local function msgh(e)
    if type(e) == 'table' then return e end
    return { message = tostring(e), traceback = debug.traceback(tostring(e), 2), plain = true }
  end

  local function fail(req, e)
    local text = type(e) == 'table' and e.plain and e.message or tostring(e)
    io.stderr:write('cseng.serve: ', req.method, ' ', req.path, ': ',
      type(e) == 'table' and e.traceback or text, '\n')
    if req:state() == 'pending' then
      req:respond(500, { ['content-type'] = 'text/plain; charset=utf-8' }, text .. '\n')
    else
      req:abort()
    end
  end

  local function finish(req, ok, status, headers, body)
    if not ok then return fail(req, status) end
    local st = req:state()
    if st == 'streaming' then return req:finish() end
    if st == 'done' then return end
    if type(status) == 'table' then status, headers, body = status.status, status.headers, status.body end
    if status == nil then return fail(req, 'the handler returned no status') end
    local rok, err = pcall(req.respond, req, status, headers, body)
    if not rok then return fail(req, err) end
  end

  local function serve_one(req)
    local ok, status, headers, body = xpcall(handler, msgh, req)
    if not ok and type(status) == 'table' and status.code == 'ECANCELED' then
      req:abort()
      error(status, 0)
    end
    finish(req, ok, status, headers, body)
  end

  local IDLE_MAX = 128
  local idle = 0
  local worker
  function worker()
    while true do
      idle = idle + 1
      local ok, req = pcall(srv.accept, srv)
      idle = idle - 1
      if not ok then error(req, 0) end
      if not req then return end
      if idle == 0 then task.spawn(worker) end
      serve_one(req)
      -- a handler that caught its cancellation leaves this task cancelled: serve no more here
      if idle >= IDLE_MAX or task.cancelled() then return end
    end
  end

  return task.spawn(worker)
end
