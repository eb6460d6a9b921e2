--- The archive an installed agent is shipped in to a remote sandbox (lua/solvers/shared/installed.lua's
--- installed.ship): the CLI's files from the host's npm tree (`make deps-agents`) as one
--- deterministic tar.gz (cseng.archive.pack: sorted entries, mtime 0, uid 0, a gzip header without
--- time), made once and cached in $CSENG_CACHE/agents (else ~/.cache/cseng/agents) as
---   <name>-<key16>.tar.gz   the archive
---   <name>-<key16>.json     its manifest {format, name, version, key, sha256, size, entries}
--- The key is the sha256 of the format, name, version and every entry's path, mode and source
--- file (real path, size, mtime): a manifest whose key, archive size and archive sha256 match is
--- reused (pack.stats.reused), anything else is packed again (pack.stats.packs). Packing a
--- 300-400 MB binary takes seconds of CPU and libarchive blocks the loop, so it runs in a child
--- `cseng lua` (this file, `--pack JOB.json`), which writes the archive and then its manifest, each
--- atomically; concurrent callers in this process wait for the one pack of a key.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

local pack = { FORMAT = 1 }

--- What this process did: packs (child processes that made an archive), reused (cache hits).
pack.stats = { packs = 0, reused = 0 }

local inflight = {} -- key -> the task packing it

--- The cache directory of packed agents: <CSENG_CACHE or ~/.cache/cseng>/agents.
---@param getenv? fun(name: string): string|nil
function pack.dir(getenv)
  return util.cache_dir(getenv) .. '/agents'
end

--- The cache key of an archive and the entries as the child packs them (file = the real path).
---@param o {name: string, version: string, entries: {path: string, file?: string, mode?: string, type?: string, target?: string}[]}
function pack.key(o)
  local desc = { format = pack.FORMAT, name = o.name, version = o.version, entries = {} }
  local entries = {}
  for i, e in ipairs(o.entries) do
    if not e.file then -- a folder or a link (an agent shipped as a tree)
      desc.entries[i] = { path = e.path, type = e.type, target = e.target }
      entries[i] = { path = e.path, type = e.type, target = e.target }
      goto next
    end
    local real = sys.realpath(e.file)
    local st = real and fs.stat(real)
    if not st then
      errors.raise(errors.ENOENT, e.file .. ' is not installed: run `make deps-agents`', { stage = 'solve' })
    end
    desc.entries[i] = { path = e.path, mode = e.mode or '0644', file = real, size = st.size, mtime_ns = st.mtime_ns }
    entries[i] = { path = e.path, mode = e.mode or '0644', file = real }
    ::next::
  end
  return crypto.sha256_hex(jsonl.encode(desc)), entries
end

local function manifest_ok(m, key, path)
  if type(m) ~= 'table' or m.format ~= pack.FORMAT or m.key ~= key or type(m.sha256) ~= 'string' then return false end
  local st = fs.stat(path)
  return st ~= nil and st.size == m.size
end

--- The cached archive of o = {name, version, entries, dir?} (dir: pack.dir()), packed when the cache
--- has no matching one. Returns {path, sha256, size, key, name, cached = true|false}; raises
--- EPREPARE when packing fails.
function pack.get(o)
  local dir = o.dir or pack.dir()
  local key, entries = pack.key(o)
  local stem = string.format('%s/%s-%s', dir, o.name, key:sub(1, 16))
  local path, mpath = stem .. '.tar.gz', stem .. '.json'
  local function cached()
    local text = fs.read(mpath)
    local ok, m = pcall(jsonl.decode, text or '')
    if ok and manifest_ok(m, key, path) then return m end
  end
  local m = cached()
  if m then
    pack.stats.reused = pack.stats.reused + 1
    return { path = path, sha256 = m.sha256, size = m.size, key = key, name = o.name, cached = true }
  end
  if not inflight[key] then
    inflight[key] = task.spawn(function()
      errors.check({ stage = 'solve', prefix = 'agent cache ' .. dir .. ': ' }, fs.mkdir_p(dir))
      local job = dir .. string.format('/.job-%s-%d.json', key:sub(1, 16), sys.pid())
      errors.check({ stage = 'solve' }, fs.write(job, jsonl.encode({
        out = path, manifest = mpath, entries = entries,
        info = { format = pack.FORMAT, name = o.name, version = o.version, key = key, entries = entries },
      })))
      local exe = assert(sys.realpath('/proc/self/exe'))
      local r, err = proc.run { argv = { exe, 'lua', sys.root() .. '/lua/solvers/installed/pack.lua', '--pack', job },
        timeout = 1800, tail_bytes = 64 * 1024 }
      fs.remove(job)
      pack.stats.packs = pack.stats.packs + 1
      if not r or r.code ~= 0 then
        errors.raise(errors.EPREPARE, string.format('packing %s into %s: %s', o.name, path,
          r and (r.stderr ~= '' and r.stderr or ('exit ' .. r.code)) or tostring(err)), { stage = 'solve' })
      end
    end)
  end
  local t = inflight[key]
  local ok, perr = task.join(t)
  if inflight[key] == t then inflight[key] = nil end
  if not ok then error(perr, 0) end
  m = cached()
  if not m then errors.raise(errors.EPREPARE, 'packing ' .. o.name .. ': no valid manifest at ' .. mpath, { stage = 'solve' }) end
  return { path = path, sha256 = m.sha256, size = m.size, key = key, name = o.name, cached = false }
end

--- The child: `cseng lua pack.lua --pack JOB.json`. Packs JOB.entries as tar.gz into JOB.out, then
--- writes JOB.manifest (JOB.info with the archive's sha256 and size); 0 on success.
local function child(job_path)
  local job = jsonl.decode(assert(fs.read(job_path)))
  local bytes, err = archive.pack(job.entries, { format = 'tar.gz' })
  if not bytes then io.stderr:write('pack: ', tostring(err), '\n'); return 1 end
  local m = job.info
  m.sha256, m.size = crypto.sha256_hex(bytes), #bytes
  local ok, werr = fs.write(job.out, bytes)
  if not ok then io.stderr:write('pack: ', tostring(werr), '\n'); return 1 end
  bytes = nil -- luacheck: ignore 311 (let the archive go before the manifest is written)
  ok, werr = fs.write(job.manifest, jsonl.encode(m))
  if not ok then io.stderr:write('pack: ', tostring(werr), '\n'); return 1 end
  return 0
end

local first, second = ...
if first == '--pack' then return child(second) end

return pack
