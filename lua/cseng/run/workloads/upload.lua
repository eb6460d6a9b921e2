--- The upload workload: one file of each size (--sizes, default 1 MiB, 64 MiB, 512 MiB) into the
--- sandbox, timed from the adapter call to the arrival of its last answer: through the adapter's
--- own file API (write_files) where it has one, else put (a tar of the one file, unpacked in the
--- sandbox: what cseng itself uses). The bytes are random, with a nonce of the sample's own first
--- (no two samples send the same content); the sandbox's sha256sum of the file must equal the
--- host's. The file is removed after each size.
local crypto = require('cseng.crypto')
local workloads = require('cseng.run.workloads')

local W = { name = 'upload', doc = 'one file of each size into the sandbox (MiB/s), its hash checked inside' }

W.figures, W.headline = workloads.transfer_figures('upload', 'the upload call sent -> its last answer arrived')

function W.prepare() return { pool = {} } end

function W.run(ctx)
  local P, client, sb = ctx.p.adapter, ctx.p.client, ctx.sb
  for _, b in ipairs(ctx.wo.sizes) do
    local n = workloads.size_name(b)
    ctx:stage('upload')
    local data = workloads.data(ctx.ws.pool, b, ctx.nonce)
    local want = crypto.sha256_hex(data)
    local name = 'cseng-upload-' .. ctx.hex:sub(1, 8) .. '-' .. n .. '.bin'
    local path = '/tmp/' .. name
    local ms
    if P.write_files then
      ctx:path('upload', 'write_files')
      ms = ctx:time('upload_' .. n .. '_ms', function()
        return ctx:must('EPUT', P.write_files(client, sb, { { path = path, data = data } }))
      end)
    else
      ctx:path('upload', 'put (a tar of the file)')
      local tar = workloads.tar1(name, data)
      ms = ctx:time('upload_' .. n .. '_ms', function() return ctx:must('EPUT', P.put(client, sb, '/tmp', tar)) end)
    end
    data = nil -- luacheck: ignore (the string may be large: let it go before the next size)
    ctx:figure('upload_' .. n .. '_mibps', workloads.mibps(b, ms))
    ctx:stage('upload_check')
    local got, size = ctx:file_sum(path, { remove = true, what = 'sha256sum of the uploaded file' })
    ctx:check('upload_' .. n .. '_bytes', size == b, b, size)
    ctx:check('upload_' .. n .. '_sha256', got == want, want, got)
  end
end

return W
