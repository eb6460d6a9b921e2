--- Names from a dataset that become paths: the one confinement rule.
---
--- A dataset row is untrusted input. Every name it gives that cseng turns into a path (test
--- ids of SWE-smith rows, task and instance ids, environment.source_dir, file names inside
--- task_files and instance files) goes through confine.name, at load, before anything is read
--- or written; a file is then opened only through confine.path, which follows no symbolic
--- link out of its tree. A violation is a one-line reason; the caller names the row and field.
local sys = require('cseng.sys')
local fs = require('cseng.fs')

local confine = {}

--- Bounds: a whole name, and one component of it (NAME_MAX on Linux).
confine.MAX_NAME = 1024
confine.MAX_COMPONENT = 255

--- A relative name made safe to join under a root: its normal form ("a/b/c": no "", "." or
--- trailing slash), or nil and the reason. Refused: a non-string, empty, over MAX_NAME bytes or
--- a component over MAX_COMPONENT, a NUL or control character, an absolute name, and any ".."
--- component (a name never needs one; refusing it outright leaves no normalisation to get wrong).
---@param s any
---@return string|nil normal
---@return string|nil reason
function confine.name(s)
  if type(s) ~= 'string' then return nil, 'not a string' end
  if s == '' then return nil, 'empty' end
  if #s > confine.MAX_NAME then return nil, string.format('%d bytes long (at most %d)', #s, confine.MAX_NAME) end
  if s:find('[%z\1-\31\127]') then return nil, 'contains a control character' end
  if s:sub(1, 1) == '/' then return nil, 'is absolute: names are relative to their folder' end
  local parts = {}
  for part in s:gmatch('[^/]+') do
    if part == '..' then return nil, 'climbs out of its folder (..)' end
    if #part > confine.MAX_COMPONENT then
      return nil, string.format('has a component of %d bytes (at most %d)', #part, confine.MAX_COMPONENT)
    end
    if part ~= '.' then parts[#parts + 1] = part end
  end
  if #parts == 0 then return nil, 'names no file (only . and /)' end
  return table.concat(parts, '/')
end

--- A single path component (an id that becomes one file or folder name): confine.name with
--- no '/' at all.
function confine.component(s)
  local n, why = confine.name(s)
  if not n then return nil, why end
  if n:find('/', 1, true) then return nil, 'contains a /' end
  return n
end

local function within(real, root)
  return real == root or real:sub(1, #root + 1) == root .. '/'
end

--- The path of `name` under `root`, if the name is confined and the file it reaches (every
--- symbolic link on the way resolved) is inside root: root .. '/' .. normal, or nil and the
--- reason. opts.exist=false allows a name that does not exist yet (the nearest existing
--- ancestor must then be inside root).
---@param root string
---@param name string
---@param opts? {exist?:boolean}
function confine.path(root, name, opts)
  local n, why = confine.name(name)
  if not n then return nil, why end
  local rroot = sys.realpath(root)
  if not rroot then return nil, 'its folder ' .. tostring(root) .. ' does not exist' end
  local full = root .. '/' .. n
  local probe = full
  while true do
    if fs.lstat(probe) then
      local real = sys.realpath(probe)
      if not real then return nil, 'is a dangling symbolic link' end
      if not within(real, rroot) then return nil, 'resolves outside its folder (a symbolic link)' end
      if probe ~= full and (not opts or opts.exist ~= false) then return nil, 'does not exist' end
      return full
    end
    if not opts or opts.exist ~= false then return nil, 'does not exist' end
    local up = probe:match('^(.*)/[^/]*$')
    if not up or #up < #root then return nil, 'does not exist' end
    probe = up
  end
end

return confine
