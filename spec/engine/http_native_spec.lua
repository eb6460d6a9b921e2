-- cseng.http's native HTTP/1.1 path (engine/h1.c) against its libcurl path, in one process, over
-- plain HTTP: the cases are spec/helpers/native_h1.lua's (spec/engine/https_native_spec.lua runs them
-- over TLS); plus nginx, when installed.
local http = require('cseng.http')
local task = require('cseng.task')
local proc = require('cseng.proc')
local fs = require('cseng.fs')
local cjson = require('cjson')

local N = require('spec.helpers.native_h1')
N.cases({ title = 'cseng.http native HTTP/1.1 path against libcurl' }, _ENV)
local run, norm = N.run, N.norm
local free_port = require('spec.helpers.runlog').free_port

describe('cseng.http native path against nginx', function()
  local nginx, base, dir
  setup(function()
    if not proc.which('nginx') then return end
    dir = os.tmpname()
    os.remove(dir)
    assert(fs.mkdir_p(dir .. '/www'))
    assert(fs.write(dir .. '/www/file.bin', string.rep('nginx-static-', 100000)))
    local port = free_port()
    assert(fs.write(dir .. '/nginx.conf', table.concat({
      'worker_processes 1;', 'daemon off;', 'pid ' .. dir .. '/nginx.pid;', 'error_log ' .. dir .. '/error.log warn;',
      'events { worker_connections 1024; }',
      'http {', '  access_log off;', '  client_body_temp_path ' .. dir .. '/body;',
      '  proxy_temp_path ' .. dir .. '/proxy;', '  fastcgi_temp_path ' .. dir .. '/fastcgi;',
      '  uwsgi_temp_path ' .. dir .. '/uwsgi;', '  scgi_temp_path ' .. dir .. '/scgi;',
      '  server {', '    listen 127.0.0.1:' .. port .. ';', '    root ' .. dir .. '/www;',
      "    location = /zero { default_type application/json; return 200 '{\"ok\":true}'; }",
      '    location = /moved { return 301 /zero; }', '  }', '}', '' }, '\n')))
    local p = assert(proc.spawn { argv = { 'nginx', '-p', dir, '-c', dir .. '/nginx.conf', '-e', dir .. '/error.log' },
      stdout = dir .. '/out.log', stderr = dir .. '/out.log' })
    base = 'http://127.0.0.1:' .. port
    for _ = 1, 200 do
      local r = http.request { url = base .. '/zero', timeout = 2 }
      if r and r.status == 200 then
        nginx = p
        return
      end
      task.sleep(0.05)
    end
    p:close()
    error('nginx did not answer: ' .. tostring(fs.read(dir .. '/out.log')))
  end)
  teardown(function()
    http.configure { native = true }
    if nginx then nginx:close() end
    if dir then fs.remove_tree(dir) end
  end)

  it('answers the same on both paths: return, a static file, HEAD, a redirect, a 404, a POST', function()
    if not nginx then
      pending('nginx is not on PATH (apt-get install nginx-light)')
      return
    end
    local cases = {
      { url = base .. '/zero' }, { url = base .. '/file.bin' }, { url = base .. '/file.bin', method = 'HEAD' },
      { url = base .. '/moved' }, { url = base .. '/missing' }, { url = base .. '/zero', method = 'POST', body = 'x=1' },
    }
    local out = {}
    for i, o in ipairs(cases) do
      o.timeout = 20
      local n = run(true, o)
      local c = run(false, o)
      http.configure { native = true }
      assert.equal(1, n.native, 'case ' .. i .. ' did not go through h1.c')
      assert.same(norm(c), norm(n), 'case ' .. i)
      out[i] = n.res
    end
    assert.same({ ok = true }, cjson.decode(out[1].body))
    assert.equal(string.rep('nginx-static-', 100000), out[2].body)
    assert.equal('', out[3].body)
    assert.equal(tostring(#'nginx-static-' * 100000), out[3].headers['content-length'])
    assert.equal(301, out[4].status)
    assert.equal(404, out[5].status)
    assert.equal(200, out[6].status)
  end)
end)
