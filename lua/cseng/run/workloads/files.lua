--- The files workload: many small files (files x file_bytes, default 1,000 x 4 KiB) into the
--- sandbox two ways, both timed from the first call to the arrival of the last answer:
---   bulk      every file in one go: the adapter's write_files where it declares bulk_upload (the
---             provider's own multi-file upload), else put with one tar of them all;
---   per file  one call per file: write_files with one file where the adapter has it (the
---             provider's own file API), else put with a one-file tar each.
--- Each way lands in its own folder; the sandbox counts the files and hashes their manifest
--- (sha256sum of every file, sorted by name), which must equal the host's.
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local util = require('cseng.lib.util')
local workloads = require('cseng.run.workloads')

local W = { name = 'files', doc = 'many small files into the sandbox: the bulk path and the per-file path' }

function W.figures(wo)
  local what = string.format('%d files of %s', wo.files, workloads.size_name(wo.file_bytes))
  return {
    { 'files_bulk_ms', 'ms', what .. ' in one go: the first call sent -> the last answer arrived' },
    { 'files_per_file_ms', 'ms', what .. ', one call per file: the first call sent -> the last answer arrived' },
    { 'files_bulk_per_s', 'files/s', 'files over files_bulk_ms' },
    { 'files_per_file_per_s', 'files/s', 'files over files_per_file_ms' },
    { 'files_per_file_over_bulk', 'x', 'files_per_file_ms / files_bulk_ms: what the per-file path costs' },
  }
end
function W.headline() return 'files_bulk_ms' end

function W.prepare() return { pool = {} } end

local function name_of(i) return string.format('d%02d/f%04d.dat', (i - 1) // 100, i) end

function W.run(ctx)
  local P, client, sb, wo = ctx.p.adapter, ctx.p.client, ctx.sb, ctx.wo
  local all = workloads.data(ctx.ws.pool, wo.files * wo.file_bytes, ctx.nonce)
  local files = {}
  for i = 1, wo.files do
    files[i] = { rel = './' .. name_of(i), name = name_of(i), data = all:sub((i - 1) * wo.file_bytes + 1, i * wo.file_bytes) }
  end
  local sorted = util.copy(files)
  table.sort(sorted, function(a, b) return a.rel < b.rel end)
  local want = crypto.sha256_hex(workloads.manifest(sorted))
  local base = '/tmp/cseng-files-' .. ctx.hex:sub(1, 8)
  local function verify(way, dir)
    ctx:stage('files_check')
    local kv = workloads.kv(ctx:sh(workloads.manifest_command(dir), { what = 'the manifest of ' .. dir }).stdout)
    ctx:check('files_' .. way .. '_count', tonumber(kv.count) == wo.files, wo.files, kv.count)
    ctx:check('files_' .. way .. '_manifest', kv.manifest == want, want, kv.manifest)
  end
  local bulk_ms, per_ms
  -- bulk
  ctx:stage('files_bulk')
  local dir = base .. '/bulk'
  if P.write_files and (P.capabilities or {}).bulk_upload then
    ctx:path('files_bulk', 'write_files (' .. wo.files .. ' files, bulk)')
    local list = {}
    for i, f in ipairs(files) do list[i] = { path = dir .. '/' .. f.name, data = f.data } end
    bulk_ms = ctx:time('files_bulk_ms', function() return ctx:must('EPUT', P.write_files(client, sb, list)) end)
  else
    ctx:path('files_bulk', 'put (one tar)')
    local entries = {}
    for i, f in ipairs(files) do entries[i] = { path = f.name, data = f.data } end
    local tar = assert(archive.pack(entries, { format = 'tar' }))
    bulk_ms = ctx:time('files_bulk_ms', function() return ctx:must('EPUT', P.put(client, sb, dir, tar)) end)
  end
  verify('bulk', dir)
  -- per file
  ctx:stage('files_per_file')
  dir = base .. '/per-file'
  if P.write_files then
    ctx:path('files_per_file', 'write_files (one file per call)')
    per_ms = ctx:time('files_per_file_ms', function()
      for _, f in ipairs(files) do ctx:must('EPUT', P.write_files(client, sb, { { path = dir .. '/' .. f.name, data = f.data } })) end
      return true
    end)
  else
    ctx:path('files_per_file', 'put (a one-file tar per call)')
    local tars = {}
    for i, f in ipairs(files) do
      local d, n = f.name:match('^(.*)/([^/]+)$')
      tars[i] = { dir = dir .. '/' .. d, tar = workloads.tar1(n, f.data) }
    end
    per_ms = ctx:time('files_per_file_ms', function()
      for _, t in ipairs(tars) do ctx:must('EPUT', P.put(client, sb, t.dir, t.tar)) end
      return true
    end)
  end
  verify('per_file', dir)
  ctx:sh('rm -rf ' .. util.shell_quote(base))
  ctx:figure('files_bulk_per_s', bulk_ms > 0 and wo.files / (bulk_ms / 1000) or nil)
  ctx:figure('files_per_file_per_s', per_ms > 0 and wo.files / (per_ms / 1000) or nil)
  ctx:figure('files_per_file_over_bulk', bulk_ms > 0 and per_ms / bulk_ms or nil)
end

return W
