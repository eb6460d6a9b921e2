--- Starts the AWS Lambda MicroVMs fake (spec/providers/aws_microvm/fake.py, Debian's python3 with
--- python3-botocore) from a spec and talks to its control endpoint.
---
---   local awsfake = require 'spec.providers.aws_microvm.fake'
---   local f = awsfake.start { agent = '/path/to/native/agent', switches = { pending_seconds = 0.3 } }
---   providers.aws_microvm.connect(f.config())     -- the adapter; f.env() for an --env-file
---   f.stats() ; f.microvms() ; f.set { throttle = { RunMicrovm = 2 } } ; f.records() ; f.close()
---
--- f.image_arn is an image that exists from the start (built from the agent, hooks on port 8080);
--- f.bucket a bucket S3 PutObject accepts; f.access_key / f.secret the only valid credentials.
local proc = require('cseng.proc')
local http = require('cseng.http')
local task = require('cseng.task')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local cjson = require('cjson')
-- the base root filesystem and the unmount sweep are shared with the Modal fake
local modal_fake = require('spec.providers.modal.fake')

local M = {}

M.PYTHON = '/usr/bin/python3' -- Debian's, where python3-botocore is installed
M.ACCESS_KEY, M.SECRET, M.REGION, M.ACCOUNT = 'AKIDCSENGTEST0001', 'cseng-test-secret-key', 'us-east-1', '123456789012'
M.IMAGE = 'cseng-agent'
M.BUCKET = 'cseng-test-bucket'

--- The hooks of the images the fake knows from the start (as prewarm registers them).
M.HOOKS = { port = 8080, microvmHooks = { run = 'ENABLED', terminate = 'ENABLED' },
            microvmImageHooks = { ready = 'ENABLED' } }

--- opts: agent (the native agent build, required), agent_args (its argv after the program, with
--- {port} for the port; default {'--port', '{port}'}), switches, log (a path; default a temp file).
function M.start(opts)
  assert(opts.agent, 'awsfake.start needs opts.agent')
  local dir = assert(fs.tempdir('cseng-awsfake-'))
  local cfg = {
    region = M.REGION, account = M.ACCOUNT,
    credentials = { [M.ACCESS_KEY] = { secret = M.SECRET } },
    buckets = { M.BUCKET },
    images = { { name = M.IMAGE, hooks = opts.hooks or M.HOOKS, argv = opts.agent_args or { '--port', '{port}' } } },
    switches = opts.switches or {},
  }
  assert(fs.write(dir .. '/config.json', cjson.encode(cfg)))
  local log = opts.log or (dir .. '/requests.jsonl')
  local p = assert(proc.spawn { argv = { M.PYTHON, sys.root() .. '/spec/providers/aws_microvm/fake.py', '--agent', opts.agent,
                                         '--log', log, '--config', dir .. '/config.json',
                                         '--rootfs', modal_fake.rootfs(), '--work', dir .. '/work' },
                                stdout = dir .. '/out', stderr = dir .. '/err' })
  local urls
  for _ = 1, 3000 do -- until it prints its URLs (or exits)
    local out = fs.read(dir .. '/out')
    if out and out:find('\n') then urls = cjson.decode(out:match('^[^\n]+')); break end
    local w = p:wait(0.01)
    if w then error('the aws fake exited: ' .. tostring(fs.read(dir .. '/err')), 0) end
  end
  assert(urls, 'the aws fake did not start: ' .. tostring(fs.read(dir .. '/err')))
  local f = { url = urls.lambda, s3_url = urls.s3, control = urls.control, access_key = M.ACCESS_KEY,
              secret = M.SECRET, region = M.REGION, bucket = M.BUCKET, log = log, dir = dir,
              image_arn = string.format('arn:aws:lambda:%s:%s:microvm-image:%s', M.REGION, M.ACCOUNT, M.IMAGE) }

  local function control(method, path, body)
    local res = assert(http.request { method = method, url = f.control .. path, body = body and cjson.encode(body),
                                      headers = { ['Content-Type'] = 'application/json' }, timeout = 30 })
    assert(res.status == 200, path .. ': ' .. res.status .. ' ' .. res.body)
    return cjson.decode(res.body)
  end

  function f.stats() return control('GET', '/_fake/stats') end
  function f.microvms() return control('GET', '/_fake/microvms') end
  function f.set(sw) return control('POST', '/_fake/set', sw) end
  function f.kill_agent(id) return control('POST', '/_fake/microvms/' .. id .. '/kill', {}) end

  --- The request log so far (JSON lines as tables).
  function f.records()
    local out = {}
    for line in (fs.read(log) or ''):gmatch('[^\n]+') do out[#out + 1] = cjson.decode(line) end
    return out
  end

  --- The adapter's config pointing at the fake (extra merged over it).
  function f.config(extra)
    local env = f.env()
    local c = { getenv = function(k) return env[k] end }
    for k, v in pairs(extra or {}) do c[k] = v end
    return c
  end

  --- The environment of a run against the fake (extra merged over it).
  function f.env(extra)
    local e = { AWS_ACCESS_KEY_ID = M.ACCESS_KEY, AWS_SECRET_ACCESS_KEY = M.SECRET, AWS_REGION = M.REGION,
                AWS_MICROVM_ENDPOINT_URL = f.url, AWS_ENDPOINT_URL_S3 = f.s3_url, AWS_MICROVM_IMAGE_ID = f.image_arn,
                AWS_MICROVM_BASE_DELAY = '0.05' }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
  end

  function f.close()
    pcall(http.request, { method = 'POST', url = f.control .. '/_fake/shutdown', timeout = 5 })
    if not p:wait(10) then p:kill('KILL'); p:wait() end
    p:close()
    modal_fake.umount_under(dir) -- a fake killed before it could unmount its microVMs' roots
    fs.remove_tree(dir)
  end

  function f.pid() return p:pid() end

  task.sleep(0) -- let the listeners settle
  return f
end

return M
