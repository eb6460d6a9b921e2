-- The Acme provider (lua/providers/acme.lua) against a small loopback Acme: the adapter
-- contract, a sandbox's lifecycle, and a bundled task through `cseng run --provider acme`, which
-- passes with gold and fails with nop, leaving no sandbox behind.
-- (The skeleton's spec, docs/providers/skeleton_spec.lua: copy it to spec/providers/<name>/<name>_spec.lua beside
-- lua/providers/<name>.lua and make its fake answer as your API does. spec/providers/new_provider_spec.lua
-- copies the two skeleton files into a fresh tree and runs this spec there: a new provider is
-- those two files, with no edit anywhere else.)
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local serve = require('cseng.serve')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')
local cjson = require('cjson')
local contract = require('providers.shared.contract')

local ROOT = sys.root()
local vendor = require('spec.helpers.vendor')
local sandboxes = require('spec.fakes.sandboxes')
local P = require('providers.acme')

-- A loopback Acme whose sandboxes really run commands (local-provider sandboxes on this machine,
-- spec/fakes/sandboxes.lua). start() -> f: f.env() (the variables of a run against it),
-- f.stats() ({creates, deletes, live}), f.close().
local fake = {}

function fake.start()
  local key = 'acme-' .. crypto.hex(crypto.random_bytes(8))
  local host = sandboxes.host()
  local boxes, st, seq = {}, { creates = 0, deletes = 0, live = 0 }, 0
  local JSON = { ['Content-Type'] = 'application/json' }
  local function answer(status, value) return status, JSON, cjson.encode(value) end
  local srv = assert(serve.listen { handler = function(req)
    if req.headers.authorization ~= 'Bearer ' .. key then return answer(401, { error = 'bad key' }) end
    if req.path == '/sandboxes' and req.method == 'POST' then
      local b = cjson.decode(req.body)
      seq = seq + 1
      local id = 'sb-' .. seq
      boxes[id] = { labels = b.labels or {}, created = os.time(), sb = host.create { env = b.env, labels = b.labels } }
      st.creates, st.live = st.creates + 1, st.live + 1
      return answer(201, { id = id })
    elseif req.path == '/sandboxes' and req.method == 'GET' then
      local list = {}
      for id, b in pairs(boxes) do list[#list + 1] = { id = id, labels = b.labels, created = b.created } end
      return answer(200, { sandboxes = list })
    end
    local id, rest = req.path:match('^/sandboxes/([^/]+)(.*)$')
    local box = id and boxes[id]
    if not box then return answer(404, { error = 'no such sandbox' }) end
    if rest == '' and req.method == 'DELETE' then
      host.destroy(box.sb)
      boxes[id] = nil
      st.deletes, st.live = st.deletes + 1, st.live - 1
      return 204, {}, ''
    elseif rest == '/exec' and req.method == 'POST' then
      local b = cjson.decode(req.body)
      local r = host.run(box.sb, { shell = b.cmd[3] }, { cwd = b.cwd, env = b.env, user = b.user, timeout = b.timeout })
      return answer(200, { exit_code = r.code, stdout = r.stdout, stderr = r.stderr, timed_out = r.timed_out })
    elseif rest == '/files' then
      local path = sandboxes.urldecode(req.query:match('path=([^&]*)') or '')
      if req.method == 'PUT' then
        local ok, err = host.write(box.sb, path, req.body)
        if not ok then return answer(500, { error = tostring(err) }) end
        return 204, {}, ''
      end
      local data = host.read(box.sb, path)
      if data then return 200, { ['Content-Type'] = 'application/octet-stream' }, data end
      return answer(404, { error = 'no such file' })
    end
    return answer(400, { error = 'unexpected ' .. req.method .. ' ' .. req.path })
  end })
  local f = {}
  function f.env() return { ACME_API_KEY = key, ACME_API_URL = srv:url() } end
  function f.stats() return { creates = st.creates, deletes = st.deletes, live = st.live } end
  function f.close()
    srv:close()
    host.close()
  end
  return f
end

describe('the Acme provider', function()
  it('keeps the adapter contract', function()
    assert.same({}, contract.check(P, 'acme', assert(fs.read(ROOT .. '/lua/providers/acme.lua'))))
  end)

  describe('against a loopback Acme', function()
    local runner = vendor.runner(fake, 'acme', { ACME_API_KEY = false, ACME_TOKEN = false, ACME_API_URL = false })
    local f
    setup(function() f = runner.start() end)
    teardown(runner.stop)

    it("runs a sandbox's lifecycle: commands, files, list by label, an idempotent destroy", function()
      local env = f.env()
      local client = P.connect { getenv = function(k) return env[k] end }
      local labels = { ['cseng.run'] = 'acme-spec-' .. crypto.hex(crypto.random_bytes(3)) }
      local sb = assert(P.create(client, { labels = labels, env = { GREETING = 'hello' } }))
      local r = assert(P.exec(client, sb, 'echo "$GREETING" from "$(pwd)"', { cwd = '/tmp', timeout = 60 }))
      assert.same({ 0, 'hello from /tmp\n' }, { r.code, r.stdout })
      assert.equal(3, assert(P.exec(client, sb, 'exit 3', { timeout = 60 })).code)
      assert.is_true(P.put(client, sb, '/cseng', assert(archive.pack({ { path = 'a.txt', data = 'A\n' } }, { format = 'tar' }))))
      assert.equal('A\n', P.get(client, sb, '/cseng/a.txt'))
      assert.equal('ENOENT', select(3, P.get(client, sb, '/cseng/nope')))
      local listed = assert(P.list(client, { labels = labels }))
      assert.same({ sb.id }, vendor.sorted_ids(listed))
      assert.is_true(P.destroy(client, sb))
      assert.is_true(P.destroy(client, sb)) -- already gone
      assert.same({}, assert(P.list(client, { labels = labels })))
    end)

    it('passes a bundled task with gold and fails it with nop through cseng run, no sandbox left', function()
      runner.check_gold_then_nop('bash-template-render')
    end)
  end)
end)
