--- The download workload: a file of each size (--sizes) made inside the sandbox from
--- /dev/urandom (not timed), then read back with the adapter's get, timed from the call to the
--- arrival of its last answer. The host's sha256 of what arrived must equal the sandbox's, and its
--- length the size. For the run, the engine's response cap (CSENG_MAX_RESPONSE_BYTES, 32 MiB by
--- default) is raised to the largest size plus 1 MiB: the user asked for downloads that large.
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local workloads = require('cseng.run.workloads')

local W = { name = 'download', doc = 'a file of each size out of the sandbox (MiB/s), its hash checked on the host' }

W.figures, W.headline = workloads.transfer_figures('download', 'the get call sent -> its last byte arrived')

function W.prepare(_, wo)
  local shared = require('providers.shared.adapter')
  local want = wo.sizes[#wo.sizes] + (1 << 20)
  local prev = shared.max_body
  if prev and prev ~= 0 and prev < want then shared.max_body = want end
  return { prev_max_body = prev }
end

function W.close(_, ws)
  if ws and ws.prev_max_body then require('providers.shared.adapter').max_body = ws.prev_max_body end
end

function W.run(ctx)
  local P, client, sb = ctx.p.adapter, ctx.p.client, ctx.sb
  ctx:path('download', 'get')
  for _, b in ipairs(ctx.wo.sizes) do
    local n = workloads.size_name(b)
    local path = '/tmp/cseng-download-' .. ctx.hex:sub(1, 8) .. '-' .. n .. '.bin'
    ctx:stage('download_prepare')
    local want = ctx:random_file(path, b, { what = 'making the file to download' })
    ctx:stage('download')
    local ms, data = ctx:time('download_' .. n .. '_ms', function() return ctx:must('EEXEC', P.get(client, sb, path)) end)
    ctx:figure('download_' .. n .. '_mibps', workloads.mibps(b, ms))
    ctx:stage('download_check')
    local got_len = #data
    local got = crypto.sha256_hex(data)
    data = nil -- luacheck: ignore 311
    ctx:sh('rm -f ' .. util.shell_quote(path))
    ctx:check('download_' .. n .. '_bytes', got_len == b, b, got_len)
    ctx:check('download_' .. n .. '_sha256', got == want, want, got)
  end
end

return W
