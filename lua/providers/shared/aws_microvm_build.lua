--- The AWS Lambda MicroVMs runner image (for lua/providers/aws_microvm.lua and its specs): what
--- `cseng prewarm --provider aws-microvm` builds once: cseng's exec agent (an aarch64 build) and
--- a Dockerfile zipped as the code artifact, uploaded to S3, CreateMicrovmImage with the hooks,
--- then GetMicrovmImage until CREATED.
local clock = require('cseng.clock')
local task = require('cseng.task')
local crypto = require('cseng.crypto')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.aws_microvm_wire')

local build = {}

local API = wire.API
local urlencode, str = adapter.urlencode, adapter.str
local call = wire.call

local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC_TABLE[i] = c
end

--- CRC-32 (zip's, IEEE 802.3) of a string.
function build.crc32(s)
  local c = 0xFFFFFFFF
  local t = CRC_TABLE
  for i = 1, #s do c = t[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

--- A zip archive (method 0, stored) of {{name, data, mode}} in the order given: the code
--- artifact's format (a zip with the Dockerfile at its root). Times are 1980-01-01 and the
--- entries' Unix modes go in the external attributes, so the same files give the same bytes.
function build.zip(entries)
  local parts, central, offset = {}, {}, 0
  for _, e in ipairs(entries) do
    local crc, n = build.crc32(e.data), #e.data
    local attr = (tonumber(e.mode or '644', 8) | 0x8000) << 16
    local lh = string.pack('<I4I2I2I2I2I2I4I4I4I2I2', 0x04034b50, 20, 0, 0, 0, 0x21, crc, n, n, #e.name, 0) .. e.name
    parts[#parts + 1] = lh
    parts[#parts + 1] = e.data
    central[#central + 1] = string.pack('<I4I2I2I2I2I2I2I4I4I4I2I2I2I2I2I4I4', 0x02014b50, 0x0314, 20, 0, 0, 0, 0x21,
      crc, n, n, #e.name, 0, 0, 0, 0, attr, offset) .. e.name
    offset = offset + #lh + n
  end
  local cd = table.concat(central)
  return table.concat(parts) .. cd .. string.pack('<I4I2I2I2I2I4I4I2', 0x06054b50, 0, 0, #entries, #entries, #cd, offset, 0)
end

--- The Dockerfile of the code artifact: the agent on top of base_from, started on the hooks port.
function build.dockerfile(base_from, port)
  return table.concat({
    '# cseng exec agent (docs/providers/aws_microvm.md): built by cseng prewarm --provider aws-microvm',
    'FROM ' .. base_from,
    'COPY microvm-agent /usr/local/bin/microvm-agent',
    'CMD ["/usr/local/bin/microvm-agent", "--port", "' .. port .. '"]', '' }, '\n')
end

--- The runner image (`cseng prewarm --provider aws-microvm`): the agent (aarch64 build) and its Dockerfile zipped as
--- the code artifact, uploaded to S3 (path style, SigV4 service s3), CreateMicrovmImage with
--- the hooks, polled with GetMicrovmImage until CREATED. Names are content-addressed (the zip's
--- SHA-256), so a second prewarm of the same agent reuses the image. o: {bucket, build_role_arn,
--- agent (path; default AWS_MICROVM_AGENT_BINARY or build/microvm-agent/microvm-agent-aarch64), base_image_arn,
--- base_from, name, timeout, log = fn(line)}. Returns the image ARN, or nil, message, CODE.
function build.image(client, o)
  local fs = require('cseng.fs')
  local sys = require('cseng.sys')
  local log = o.log or function() end
  if not o.bucket then return nil, 'aws-microvm prewarm: --aws-bucket BUCKET is required', 'ECONFIG' end
  if not o.build_role_arn then return nil, 'aws-microvm prewarm: --aws-build-role-arn ARN is required', 'ECONFIG' end
  local path = o.agent or os.getenv('AWS_MICROVM_AGENT_BINARY') or (sys.root() .. '/build/microvm-agent/microvm-agent-aarch64')
  local bin = fs.read(path)
  if not bin then
    return nil, 'aws-microvm prewarm: no agent binary at ' .. path .. ' (build it with make agent, or set AWS_MICROVM_AGENT_BINARY)', 'ENOENT'
  end
  if bin:sub(1, 4) ~= '\127ELF' or string.unpack('<I2', bin, 19) ~= 183 then
    return nil, 'aws-microvm prewarm: ' .. path .. ' is not an aarch64 ELF (Lambda MicroVMs run ARM_64 only)', 'EBUILD'
  end
  local base_from = o.base_from or os.getenv('AWS_MICROVM_BASE_FROM') or 'public.ecr.aws/docker/library/python:3.12-slim-bookworm'
  local zip = build.zip { { name = 'Dockerfile', data = build.dockerfile(base_from, client.agent_port) },
                      { name = 'microvm-agent', data = bin, mode = '755' } }
  local sha = crypto.sha256_hex(zip)
  local key = 'cseng/microvm-agent-' .. sha:sub(1, 16) .. '.zip'
  local put, perr, pcode = call(client, 'PUT', '/' .. urlencode(o.bucket) .. '/' .. key,
    { body = zip, content_type = 'application/zip', service = 's3', base = client.s3_endpoint, raw = true, timeout = 600,
      query = { { 'x-id', 'PutObject' } } }) -- the operation hint AWS's S3 clients add
  if not put then return nil, perr, pcode end
  log(string.format('uploaded s3://%s/%s (%d bytes)', o.bucket, key, #zip))
  local base = o.base_image_arn or os.getenv('AWS_MICROVM_BASE_IMAGE_ARN')
  if not base then
    local m, merr, mcode = call(client, 'GET', API .. '/managed-microvm-images')
    if not m then return nil, merr, mcode end
    local first = type(m) == 'table' and type(m.items) == 'table' and m.items[1]
    base = first and str(first.imageArn)
    if not base then return nil, 'aws-microvm prewarm: ListManagedMicrovmImages lists no base image', 'EPROTO' end
  end
  local name = o.name or ('cseng-agent-' .. sha:sub(1, 12))
  local body = {
    name = name, baseImageArn = base, buildRoleArn = o.build_role_arn, codeArtifact = { uri = 's3://' .. o.bucket .. '/' .. key },
    cpuConfigurations = { { architecture = 'ARM_64' } },
    hooks = { port = client.agent_port, microvmHooks = { run = 'ENABLED', terminate = 'ENABLED' },
              microvmImageHooks = { ready = 'ENABLED' } },
    tags = { ['cseng.image'] = 'microvm-agent', ['cseng.agent-sha256'] = sha:sub(1, 32) },
    clientToken = 'cseng-' .. sha:sub(1, 32),
  }
  local img, ierr, icode = call(client, 'POST', API .. '/microvm-images', { json = body })
  local arn
  if img then
    arn = str(img.imageArn)
  elseif icode == 'HTTP_409' then -- the same content was registered before under its name
    log('image ' .. name .. ' exists: reusing it')
  else
    return nil, ierr, icode
  end
  local t0, delay = clock.now(), client.o.poll_first
  local timeout = o.timeout or 3600
  while true do
    local g, gerr, gcode = call(client, 'GET', API .. '/microvm-images/' .. urlencode(arn or name))
    if not g then return nil, gerr, gcode end
    arn = str(g.imageArn) or arn
    local state = str(g.state)
    if state == 'CREATED' or state == 'UPDATED' then return arn end
    if state == 'CREATE_FAILED' or state == 'UPDATE_FAILED' or state == 'DELETED' or state == 'DELETING' then
      local why = ''
      local v = str(g.latestFailedImageVersion)
      if v then
        local gv = call(client, 'GET', API .. '/microvm-images/' .. urlencode(arn) .. '/versions/' .. urlencode(v))
        if type(gv) == 'table' and str(gv.stateReason) then why = ': ' .. gv.stateReason end
      end
      return nil, 'aws-microvm prewarm: image ' .. tostring(arn) .. ' is ' .. state .. why, 'EBUILD'
    end
    if (clock.now() - t0) / 1e9 > timeout then
      return nil, string.format('aws-microvm prewarm: image %s still %s after %d s', tostring(arn), tostring(state), timeout), 'ETIMEDOUT'
    end
    task.sleep(delay)
    delay = math.min(delay * client.o.poll_factor, 5)
  end
end

return build
