--- What the fakes that build natively (daytona snapshots, runloop blueprints, e2b templates)
--- share: a real build of a Dockerfile from the build context the fake received.
---
---   local NB = require 'spec.fakes.native_build'
---   local artifact, env, files = NB.build(host, name, dockerfile_text, ctx_dir)
---     -- or nil, nil, files, reason
---   local artifact, env, files, reason = NB.build_tars(host, name, dockerfile_text, tars, why_of)
---     -- the same from the context tars the fake received (unpacked into a fresh directory)
---
--- The Dockerfile is parsed (lua/dockerfile.lua); every COPY/ADD source (not a glob, not a URL,
--- not --from) must be in ctx_dir, else the build fails naming it; then its steps run in a
--- fresh sandbox of host (spec/fakes/sandboxes.lua) with lua/replay.lua's semantics (RUN as
--- /bin/sh -c as the step's USER with its WORKDIR/ENV/ARGs, COPY from ctx_dir), and the
--- sandbox's root is kept as the artifact (host.snapshot) a create's warm_artifact takes. env:
--- the Dockerfile's final ENV (what a container of the image starts with). files: the context's
--- file list (sorted, relative), for the specs.
local fs = require('cseng.fs')
local archive = require('cseng.archive')
local dockerfile = require('cseng.workload.dockerfile')
local replay = require('cseng.workload.replay')

local NB = {}

NB.PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

--- The files of a directory, relative and sorted.
function NB.files(dir)
  local files = {}
  for _, e in ipairs(fs.walk(dir) or {}) do if e.type ~= 'dir' then files[#files + 1] = e.path end end
  table.sort(files)
  return files
end

function NB.build(host, name, text, ctx)
  local files = NB.files(ctx)
  local parsed, perr = dockerfile.parse(text, 'Dockerfile')
  if not parsed then return nil, nil, files, 'Dockerfile: ' .. tostring(perr) end
  for _, c in ipairs(parsed.copies or {}) do
    if not c.from then
      for _, src in ipairs(c.src) do
        if not src:match('[%*%?%[]') and not src:match('^%a+://') and not fs.exists(ctx .. '/' .. src) then
          return nil, nil, files, string.format('COPY %s (line %d): not in the build context', src, c.line)
        end
      end
    end
  end
  local sb = host.create { env = {} }
  local P = {
    exec = function(_, hsb, cmd, o)
      return host.run(hsb, { shell = cmd }, { cwd = o and o.cwd, env = o and o.env, timeout = o and o.timeout })
    end,
    put = function(_, hsb, dir, tar)
      local tmp = '/tmp/cseng-fake-put-' .. tostring(math.random(1 << 30)) .. '.tar'
      local ok, werr = host.write(hsb, tmp, tar)
      if not ok then return nil, werr end
      local r = host.run(hsb, { argv = { 'sh', '-c', 'mkdir -p "$1" && tar -C "$1" -xf "$2"; rc=$?; rm -f "$2"; exit $rc',
        'sh', dir, tmp } }, { cwd = '/' })
      if r.code ~= 0 then return nil, r.stderr end
      return true
    end,
  }
  local ok, info, berr = pcall(replay.run, P, nil, sb, { steps = parsed.steps, context_dir = ctx }, { env = { PATH = NB.PATH } })
  if not ok or not info then
    host.destroy(sb)
    local e = ok and berr or info
    if type(e) == 'table' then e = tostring(e.message) .. (e.log and ('\n' .. e.log) or '') end
    return nil, nil, files, 'build failed: ' .. tostring(e)
  end
  local artifact, why = host.snapshot(sb, name)
  host.destroy(sb)
  if not artifact then return nil, nil, files, 'snapshot failed: ' .. tostring(why) end
  return artifact, parsed.env or {}, files
end

--- NB.build from tars (each tar's bytes, or false for one that never arrived) unpacked in order
--- into one fresh context directory, removed afterwards. A tar missing or not unpacking fails
--- the build before it starts: nil, nil, nil, why_of(i, err) (err nil: the i-th is missing).
function NB.build_tars(host, name, text, tars, why_of)
  local ctx = assert(fs.tempdir('cseng-fake-ctx-'))
  for i = 1, #tars do
    local ok, xerr = false, nil
    if tars[i] then ok, xerr = archive.extract(tars[i], ctx); xerr = tostring(xerr) end
    if not ok then
      fs.remove_tree(ctx)
      return nil, nil, nil, why_of(i, xerr)
    end
  end
  local artifact, env, files, why = NB.build(host, name, text, ctx)
  fs.remove_tree(ctx)
  return artifact, env, files, why
end

return NB
