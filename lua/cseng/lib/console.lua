--- The console: what may reach a terminal. Text is escaped (no control sequence from a task id,
--- an archive name or an error message can repaint the screen or forge a line), and only the
--- progress renderer writes the few sequences it needs (console.terminal), through a guard on
--- stdout (console.guard).
local secrets = require('cseng.lib.secrets')

local console = {}

--- Escape control characters for a terminal: every byte below 0x20 but newline and tab, and
--- DEL, becomes \xNN (an escape sequence or a carriage return in a task id, an archive entry
--- name or an error message cannot repaint the screen or forge a line). A newline is escaped
--- too when o.newline is true (a name that must stay on one line).
---@param s any
---@param newline boolean|nil
---@return string
function console.escape(s, newline)
  s = tostring(s)
  local pat = newline and '[%z\1-\31\127]' or '[%z\1-\8\11-\31\127]'
  return (s:gsub(pat, function(c) return string.format('\\x%02x', c:byte()) end))
end

local CTRL = '[%z\1-\8\11-\31\127]'
local EL = '\r\27[K' -- the progress line's "return, erase line"

--- Escape for stdout: as console.escape, but a CRLF line end (CSV) and the progress line's own
--- redraw ("\r\27[K") pass; everything else below 0x20 but newline and tab is escaped.
---@param s string
---@return string
function console.escape_stdout(s)
  if not s:find(CTRL) then return s end
  local out, pos = {}, 1
  while true do
    local a, b = s:find(EL, pos, true)
    local part = s:sub(pos, (a or 0) - 1)
    -- real NULs first, then a NUL marks each CRLF's CR while the rest is escaped
    part = part:gsub('%z', '\\x00'):gsub('\r\n', '\0\n'):gsub(CTRL, function(c)
      if c == '\0' then return '\0' end
      return string.format('\\x%02x', c:byte())
    end)
    out[#out + 1] = (part:gsub('%z\n', '\r\n'))
    if not a then break end
    out[#out + 1] = EL
    pos = b + 1
  end
  return table.concat(out)
end

--- What the console gets: redacted, then control characters escaped (newlines kept).
---@param s any
---@return string
function console.text(s) return console.escape(secrets.redact(tostring(s))) end

local console_guarded = false
local raw_stdout_write -- the unguarded write, once guard_console has wrapped it

--- The control sequences a terminal may receive from cseng, and only from the progress
--- renderer (cseng.cli.present): carriage return, cursor up N lines, erase to the end of the
--- screen, erase the line. The console guard escapes every other control character on stdout;
--- this is the one way past it, and it refuses anything else.
console.TERMINAL_CONTROLS = { '\r', '\27%[%d+A', '\27%[J', '\27%[K' }

--- Write terminal control sequences (only those of console.TERMINAL_CONTROLS) to stdout.
---@param seq string
function console.terminal(seq)
  local rest = seq
  while #rest > 0 do
    local matched
    for _, pat in ipairs(console.TERMINAL_CONTROLS) do
      local a, b = rest:find('^' .. pat)
      if a then matched = b break end
    end
    if not matched then
      require('cseng.lib.errors').raise('EINVAL', 'console.terminal: not a control sequence the console allows: ' .. console.escape(rest))
    end
    rest = rest:sub(matched + 1)
  end
  if raw_stdout_write then return raw_stdout_write(io.stdout, seq) end
  return io.stdout:write(seq)
end

--- Route everything Lua writes to the console through the redactor: io.write, print, and the
--- write method of io.stdout and io.stderr, which also escape control characters (an escape
--- sequence or a carriage return in a task id, an archive entry name or an error message
--- cannot repaint the terminal or forge a line; stdout keeps CRLF and the progress line's
--- redraw, console.escape_stdout). Idempotent; cli.main calls it first.
function console.guard()
  if console_guarded then return end
  console_guarded = true
  secrets.load() -- the C side's diagnostics hide the environment's secrets from the start
  local meth = getmetatable(io.stdout).__index
  local raw_write = meth.write
  raw_stdout_write = raw_write
  local out, err = io.stdout, io.stderr
  meth.write = function(f, ...)
    if f ~= out and f ~= err then return raw_write(f, ...) end
    local n = select('#', ...)
    local args = { ... }
    for i = 1, n do
      local a = args[i]
      if type(a) == 'string' then
        a = secrets.redact(a)
        if f == err then a = console.escape(a) else a = console.escape_stdout(a) end
        args[i] = a
      end
    end
    return raw_write(f, table.unpack(args, 1, n))
  end
  rawset(io, 'write', function(...) return io.output():write(...) end)
  rawset(_G, 'print', function(...)
    local n = select('#', ...)
    local parts = {}
    for i = 1, n do parts[i] = tostring((select(i, ...))) end
    out:write(table.concat(parts, '\t'), '\n')
  end)
end


return console
