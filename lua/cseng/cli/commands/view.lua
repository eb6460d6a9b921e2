--- `cseng view [DIR ...] [--port P] [--host H --token T] [--export OUT]`: a local web viewer over
--- results folders (lua/cseng/view/, docs/VIEWER.md). The engine's own HTTP server (cseng.serve)
--- serves the pages and their JSON; logs are read incrementally, so a run still being written
--- updates in the open page. --export writes the same pages as static files instead.
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local index = require('cseng.view.index')

local cmd = command {
  name = 'view',
  summary = 'a local web viewer for runs (live and finished), or --export static pages',
  usage = 'usage: cseng view [DIR|FILE ...] [--port P] [--host ADDR --token T] [--export OUT]\n\n' ..
    'Serves the runs of the results folders (default results/) as web pages: the run list, each\n' ..
    'run (trials, phases, failure modes; the arena\'s charts; each trial at #trial-N), and\n' ..
    '/compare?a=RUN&b=RUN. Given one run log (what a run\'s last line says), it prints that run\'s\n' ..
    'page too. Binds loopback unless --host says otherwise; a non-loopback address needs --token.',
  flags = {
    { 'port', 'int', min = 0, arg = 'P',
      help = 'port to listen on (default 8765, or the next free one up to 8784; 0: any free port)' },
    { 'host', 'string', arg = 'ADDR', help = 'address to bind (default 127.0.0.1; another needs --token)' },
    { 'token', 'string', arg = 'T', help = 'require this token on every request (?token=T once, then a cookie)' },
    { 'export', 'string', arg = 'OUT', help = 'write the pages as static files into OUT and exit' },
    { 'compare', 'multi', arg = 'A:B',
      help = 'with --export: write the comparison of runs A and B (repeatable; default: each run against the previous run of its plan)' },
  },
}

-- bytes of logs read between two looks at the pending requests
local BUDGET = 1024 * 1024
local DEFAULT_PORT, PORTS_TRIED = 8765, 20

local function loopback(host)
  return host == '127.0.0.1' or host == '::1' or host == 'localhost' or host:match('^127%.%d+%.%d+%.%d+$') ~= nil
end

--- Listen on host:port, or, when the port was not given (explicit false), on the first free one of
--- the PORTS_TRIED from it: a run ends by printing `cseng view <its log>`, and the viewer of an
--- earlier run may still hold the default port. Returns the server, or nil, message, code.
---@param host string
---@param port integer
---@param explicit boolean
---@param handler function
function cmd.listen(host, port, explicit, handler)
  local serve = require('cseng.serve')
  local srv, err, code
  for k = 0, explicit and 0 or PORTS_TRIED - 1 do
    srv, err, code = serve.listen { host = host, port = port + k, handler = handler }
    if srv or code ~= 'EADDRINUSE' then break end
  end
  return srv, err, code
end

function cmd.main(f, pos)
  if #pos == 0 then pos = { 'results' } end
  for _, p in ipairs(pos) do
    if not fs.exists(p) then io.stderr:write('cseng: view: ', p, ': no such file or directory\n'); return 2 end
  end
  local app = require('cseng.view.app')
  if f.export then
    local cat = index.new(pos)
    cat:refresh()
    local pairs_list
    if f.compare then
      pairs_list = {}
      for _, spec in ipairs(f.compare) do
        local a, b = spec:match('^(.-):([^:]+)$')
        if not a then io.stderr:write('cseng: view: --compare wants A:B, got ', spec, '\n'); return 2 end
        pairs_list[#pairs_list + 1] = { a, b }
      end
    else
      pairs_list = app.default_pairs(cat)
    end
    local r = app.export(cat, f.export, { compare = pairs_list })
    io.stdout:write(string.format('view: %d page(s), %d file(s) in %s; open %s/index.html\n', r.pages, r.files,
      f.export, f.export))
    return 0
  end
  local host = f.host or '127.0.0.1'
  if host == 'localhost' then host = '127.0.0.1' end
  local lb = loopback(host)
  if not lb and not f.token then
    io.stderr:write('cseng: view: --host ', host, ' is not a loopback address: give --token T (checked on every request)\n')
    return 2
  end
  local task = require('cseng.task')
  -- the folders' history stores: the history page, and the index of every log they hold as it is
  -- now restored from them instead of read (lua/cseng/view/history.lua)
  local history = require('cseng.view.history')
  local stores = history.open(pos)
  local restored = setmetatable({}, { __mode = 'k' })
  local cat = index.new(pos, { restore = function(log)
    local ok = history.restore(stores, log)
    if ok then restored[log] = true end
    return ok
  end })
  local handler = app.handler { catalogue = cat, token = f.token, loopback = lb, budget = BUDGET, history = stores }
  local port = f.port or DEFAULT_PORT
  local srv, err, code = cmd.listen(host, port, f.port ~= nil, handler)
  if not srv then
    io.stderr:write(string.format('cseng: view: cannot listen on %s:%d%s: %s (%s)\n', host, port,
      f.port and '' or string.format('-%d', port + PORTS_TRIED - 1), tostring(err), tostring(code)))
    return 1
  end
  local url = string.format('http://%s:%d/', host:find(':') and ('[' .. host .. ']') or host, srv:port())
  local token = f.token and '?token=<the token>' or ''
  io.stdout:write(lb and 'view: listening on loopback only\n' or 'view: listening on ' .. host .. ' (token required)\n')
  if srv:port() ~= port and not f.port then
    io.stdout:write(string.format('view: port %d is taken (another viewer?): this one is on %d\n', port, srv:port()))
  end
  io.stdout:write('view: ', url, token, '\n')
  -- one run's log: its page's address too (the first slice of the log names the run)
  if #pos == 1 and fs.stat(pos[1]) and fs.stat(pos[1]).type ~= 'dir' then
    cat:refresh(BUDGET)
    local log = cat:list()[1]
    if log and log.started then
      io.stdout:write('view: ', url, 'runs/', app.url_id(index.id_of(log)), token, '\n')
    end
  end
  io.stdout:flush()
  -- the logs are read in slices, requests answered in between: a big log's page opens at once
  -- and fills in as its index grows; then every half second for what the logs gained
  local said = false
  local remembered, unstored, seen = {}, {}, nil
  while true do
    cat:refresh(BUDGET)
    if not cat.pending and not said then
      said = true
      io.stdout:write(string.format('view: %d run(s) from %s\n', #cat:list(), table.concat(pos, ' ')))
      io.stdout:flush()
    end
    -- a finished log read from its bytes (not restored) goes into the store, one per turn: the next
    -- start restores it
    if said and #stores > 0 then
      if seen ~= cat.version then
        seen = cat.version
        for _, path in ipairs(cat.order) do
          local log = cat.logs[path]
          local key = path .. '\0' .. tostring(log.version)
          if not restored[log] and not remembered[key] and log.finished and not log.summary then
            remembered[key] = true
            unstored[#unstored + 1] = log
          end
        end
      end
      local log = table.remove(unstored)
      if log then history.remember(stores, log) end
    end
    task.sleep(cat.pending and 0 or 0.5)
  end
end

return cmd
