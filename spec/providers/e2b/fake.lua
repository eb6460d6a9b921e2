--- A stateful loopback fake of E2B (lua/providers/e2b.lua): the control-plane API on one
--- cseng.serve listener, envd (Connect Process service + /files) on another, sandboxes that
--- really run commands.
---
---   local e2b_fake = require 'spec.providers.e2b.fake'
---   local f = e2b_fake.start { envd_fault = 'truncate' }
---   -- the adapter: providers.e2b.connect(f.config())  (or the env of f.env() for the runner)
---   f.stats()  --> { creates=, created=, starts=, signals=, uploads=, downloads=, deletes=,
---                    destroyed=, lists=, unauthorized=, bad_requests=, unknown=, live=, ... }
---   f.set { delete_status = false } ; f.close()
---
--- Create is POST /v2/sandboxes (what the official SDK, e2b 2.51, sends: NewSandboxV2, every
--- sandbox secured, so no "secure" key) and the older POST /sandboxes (NewSandbox); both answer
--- the same. envd routes by the E2b-Sandbox-Id header (the SDK and the adapter always send it), else
--- by a Host of the form <port>-<sandboxID>.<domain>. It requires the sandbox's X-Access-Token and
--- a Basic user of "root" or "user" ("user" runs as uid 1000); without an Authorization header the
--- user is "user", as envd >= 0.4.0 does (the SDK sends none unless a user is asked for). Process.Start is checked the way the
--- real server would parse it (one envelope, a JSON StartRequest with known fields only, decoded
--- here with string.unpack, independently of cseng.connect), then the command runs for real
--- (spec/fakes/sandboxes.lua) and the answer streams as envelopes: start {pid}, data events of
--- at most 700 bytes (base64) with keepalives between, end {exitCode (omitted when 0), exited,
--- status}, then the end-of-stream envelope {}. Connect-Timeout-Ms is honoured: a command over
--- it ends with {"error":{"code":"deadline_exceeded"}}.
---
--- Snapshots (warm mode): POST /sandboxes/{id}/snapshots {name?} copies the sandbox's root for
--- real (spec/fakes/sandboxes.lua's host.snapshot) and answers 201 {snapshotID, names}, with
--- snapshotID "cseng-fake-team/<name>:default" (a raw id without a name); a name already taken
--- gets a new build under the same snapshotID, as the spec describes. GET /snapshots?name= lists
--- them; POST /sandboxes {templateID = a snapshotID} starts from the copy; DELETE
--- /templates/{snapshotID} removes it (204; 404 when unknown). Counters: snapshots (POST calls),
--- snapshot_lists, snapshot_deletes, last_snapshot.
---
--- Pause and resume: POST /sandboxes/{id}/pause -> 204 (409 when paused already) freezes every
--- process of the sandbox (SIGSTOP) and makes its envd answer 502 "paused"; POST
--- /sandboxes/{id}/connect {timeout} -> 201 and the sandbox (200 when it was running) thaws them.
--- Files and running processes are kept, as E2B documents. Counters: pauses, connects, resumes,
--- paused_refused (envd requests refused while paused). on_pause = fn(id) runs before the freeze
--- (a spec's way to make a pause that loses state).
---
--- Files: POST /files (multipart) writes every part named "file": to the path parameter when
--- given (then one part only, else 400), else to the part's filename (relative: under the user's
--- home), as the SDK's files.write of a list sends; the answer lists each file's EntryInfo.
--- Counters: uploads (requests), upload_batches (the files of each, in order), upload_files (files written), last_upload_files.
---
--- Forks: POST /sandboxes/{id}/fork {count (1..100, default 1), timeout (s, default 15)} checkpoints
--- the parent once (a copy of its root, host.snapshot: files written after the call are not in
--- the children; running processes are not carried over, where E2B's fork keeps memory) and
--- answers 201 with one result per fork, {sandbox} or {error}; each child has the parent's metadata
--- and env, its own id and token, and is destroyed on its own. 404 for an unknown parent, 409 for a
--- paused one, 400 for a bad body. fork_fail = fn(i, n) -> true makes the i-th fork of the n-th call
--- fail (500 sandbox_create_failed); fork_status forces a status for the n-th call. Counters: forks
--- (calls), forked (children made), fork_failed, fork_bodies.
---
--- Template builds (native builds; what the SDK's Template.build and Template.exists send):
--- GET /templates/aliases/{alias} (404 until a build of that name is ready); POST /v3/templates
--- {name} -> 202 {templateID, buildID, names, tags, aliases, public}; GET /templates/{id}/files/{hash}
--- (hash: 64 lowercase hex digits, else 400) -> 201 {present, url, headers}, the file cache per team
--- as E2B's (one team here: a hash once uploaded is present for every template), url a presigned
--- PUT whose ?sig and whose headers (X-Cseng-Fake-Upload) are checked, else 403 (upload_refused);
--- POST /v2/templates/{id}/builds/{buildID} {fromImage, steps, force} -> 202, then the steps are
--- built for real (fake.steps_dockerfile, spec/fakes/native_build.lua) from the uploaded tars; GET
--- .../status?logsOffset= -> {status (waiting, building, ready, error), logEntries, logs, reason}.
--- POST /v2/sandboxes {templateID = the alias or the id} starts from the built root with its ENV.
--- Counters: builds, build_bodies, build_dockerfiles, build_contexts, template_requests, file_uploads.
---
--- Switches (optional, changeable by set):
---   api_key ('test-e2b-key')             X-API-Key required (else 401)
---   latency = seconds | {create=, delete=, list=, start=, files=}; values may be fn(n)
---   create_status / delete_status / list_status = status | fn(n, ...): force a failure
---   auth_fail = 'create' | 'all'         401 on create (or on every API call)
---   envd_fault = 'truncate' | 'error_end' | 'no_end_event' | 'unauthenticated' | 'http_401' | fn(n)
---       truncate: the stream stops in the middle of an envelope; error_end: an end-of-stream
---       envelope holding {"error":{"code":"internal"}}; no_end_event: {} without the process end
---       event; unauthenticated: the Connect error; http_401: a plain 401 before any envelope
---   snapshot_status = status | fn(n, id) force that status for POST /sandboxes/{id}/snapshots
---   page_size (100)                      /v2/sandboxes page size (X-Next-Token paging)
---   envd_version ('0.5.7')              envdVersion in the create answer (the SDK picks its envd
---                                        behaviour by it: < 0.4.0 always sends user "user")
---   files_via = url                      forward /files requests there first (a Prism proxy whose
---                                        upstream is this envd; marked X-Cseng-Via-Prism)
---   offline (false)                      every sandbox without network, whatever allow_internet_access
---                                        asks (otherwise true or absent = the host's network, as E2B's
---                                        default; false = none)
---   max_upload_bytes (100 MiB)           a /files upload whose request body is larger gets 413
---                                        (counter upload_too_large; largest_upload, upload_bytes:
---                                        the largest accepted body, the sum of them)
---   corrupt_upload = n | fn(n, path, data)  the n-th upload (or one fn says yes to) is written with
---                                        its middle byte flipped (counter corrupted)
local http = require('cseng.http')
local crypto = require('cseng.crypto')
local cjson = require('cjson')
local jsonl = require('cseng.lib.jsonl')

local task = require('cseng.task')
local common = require('spec.fakes.sandboxes')
local NB = require('spec.fakes.native_build')
local scaffold = require('spec.fakes.rest')
local json, pick = scaffold.json, scaffold.pick

local fake = {}

-- The header an upload link requires (TemplateBuildFileUpload.headers: "Request headers that
-- must be sent with the upload request"); a PUT without it is refused.
local UPLOAD_HEADER = 'X-Cseng-Fake-Upload'

--- A template's steps (the v2 build body) as the Dockerfile they stand for, for the real build
--- of spec/fakes/native_build.lua: USER, ENV k="v", WORKDIR, RUN (as the step's user when it
--- names one), COPY --chown=user --chmod=mode src dest.
function fake.steps_dockerfile(from, steps)
  local out = { 'FROM ' .. from }
  local user = 'root'
  for _, st in ipairs(steps) do
    local a = type(st.args) == 'table' and st.args or {}
    if st.type == 'USER' then user = a[1]; out[#out + 1] = 'USER ' .. a[1]
    elseif st.type == 'WORKDIR' then out[#out + 1] = 'WORKDIR ' .. a[1]
    elseif st.type == 'ENV' then
      local kv = {}
      for i = 1, #a, 2 do kv[#kv + 1] = a[i] .. '=' .. cjson.encode(tostring(a[i + 1])):gsub('\\/', '/') end
      out[#out + 1] = 'ENV ' .. table.concat(kv, ' ')
    elseif st.type == 'RUN' then
      if a[2] and a[2] ~= '' and a[2] ~= user then
        out[#out + 1] = 'USER ' .. a[2]; out[#out + 1] = 'RUN ' .. a[1]; out[#out + 1] = 'USER ' .. user
      else
        out[#out + 1] = 'RUN ' .. a[1]
      end
    elseif st.type == 'COPY' then
      out[#out + 1] = 'COPY ' .. ((a[3] and a[3] ~= '') and ('--chown=' .. a[3] .. ' ') or '')
        .. ((a[4] and a[4] ~= '') and ('--chmod=' .. a[4] .. ' ') or '') .. a[1] .. ' ' .. a[2]
    else
      return nil, 'unknown step type ' .. tostring(st.type)
    end
  end
  return table.concat(out, '\n') .. '\n'
end

local function api_error(status, message) return json(status, { code = status, message = message }) end

local function envelope(flags, value)
  local data = type(value) == 'string' and value or jsonl.encode(value)
  return string.pack('>B I4', flags, #data) .. data
end

local function iso(t) return os.date('!%Y-%m-%dT%H:%M:%SZ', t) end

-- The known fields of StartRequest / ProcessConfig (e2b-process.proto), in JSON names.
local START_FIELDS = { process = 'table', pty = 'table', tag = 'string', stdin = 'boolean' }
local PROCESS_FIELDS = { cmd = 'string', args = 'table', envs = 'table', cwd = 'string' }

--- Parse a Start request body: exactly one uncompressed envelope holding a StartRequest.
--- Returns the request table or nil, why.
function fake.parse_start(body)
  if #body < 5 then return nil, 'body shorter than an envelope header' end
  local flags, len = string.unpack('>B I4', body)
  if flags ~= 0 then return nil, string.format('request envelope flags 0x%02x (want 0)', flags) end
  if #body ~= 5 + len then return nil, string.format('envelope says %d bytes, body has %d', len, #body - 5) end
  local ok, req = pcall(cjson.decode, body:sub(6))
  if not ok or type(req) ~= 'table' then return nil, 'the message is not a JSON object' end
  for k, v in pairs(req) do
    if not START_FIELDS[k] then return nil, 'unknown StartRequest field ' .. k end
    if type(v) ~= START_FIELDS[k] then return nil, 'StartRequest.' .. k .. ' has the wrong type' end
  end
  local p = req.process
  if type(p) ~= 'table' then return nil, 'StartRequest.process is required' end
  for k, v in pairs(p) do
    if not PROCESS_FIELDS[k] then return nil, 'unknown ProcessConfig field ' .. k end
    if type(v) ~= PROCESS_FIELDS[k] then return nil, 'ProcessConfig.' .. k .. ' has the wrong type' end
  end
  if type(p.cmd) ~= 'string' or p.cmd == '' then return nil, 'ProcessConfig.cmd is required' end
  for i, a in ipairs(p.args or {}) do
    if type(a) ~= 'string' then return nil, 'ProcessConfig.args[' .. i .. '] is not a string' end
  end
  for k, v in pairs(p.envs or {}) do
    if type(k) ~= 'string' or type(v) ~= 'string' then return nil, 'ProcessConfig.envs must map strings to strings' end
  end
  return req
end

function fake.start(opts)
  local host = common.host()
  local core = scaffold.fake(opts, { api_key = 'test-e2b-key', envd_version = '0.5.7', max_upload_bytes = 100 << 20 }, {
    pauses = 0, connects = 0, resumes = 0, paused_refused = 0,
    forks = 0, forked = 0, fork_failed = 0, fork_bodies = {}, upload_files = 0, upload_batches = {},
    starts = 0, signals = 0, uploads = 0, downloads = 0, deadlines = 0, upload_too_large = 0, largest_upload = 0, upload_bytes = 0, corrupted = 0,
    networked = 0,
    start_requests = {}, signal_requests = {}, users = {}, snapshots = 0, snapshot_lists = 0, snapshot_deletes = 0,
    builds = 0, build_bodies = {}, build_contexts = {}, build_dockerfiles = {}, file_uploads = 0, upload_refused = 0,
    template_requests = {},
  }, host)
  local templates, by_alias, tfiles = {}, {}, {} -- templateID -> template; alias -> templateID; hash -> tar
  local tseq = 0
  local api_url -- set once listening
  local snapshots, snapshot_order = {}, {} -- snapshotID -> {id, name, artifact}
  local cfg, st, sandboxes, forced = core.cfg, core.st, core.sandboxes, core.forced
  local seq = 0
  local envd_srv

  local function listed(s)
    return {
      templateID = s.templateID, sandboxID = s.id, clientID = 'cseng-fake', startedAt = iso(s.created),
      endAt = iso(s.created + s.timeout), cpuCount = 2, memoryMB = 512, diskSizeMB = 2048,
      metadata = s.metadata, state = 'running', envdVersion = cfg.envd_version,
    }
  end

  -- ---- control plane ----------------------------------------------------------------------

  local function fake_upload(req, seg)
    local up_hash = seg.hash
    local q = common.query(req.query)
    local want = tfiles[up_hash]
    if not want or want.sig ~= q.sig then core.count('upload_refused'); return api_error(403, 'bad upload signature') end
    if req.headers[UPLOAD_HEADER:lower()] ~= want.token then
      core.count('upload_refused')
      return api_error(403, 'the upload link\'s headers were not sent')
    end
    want.tar = req.body or ''
    core.hit('file_uploads', 'file_upload')
    return 200, {}, ''
  end

  local function snapshot(req, seg, n)
    local snap_of = common.urldecode(seg.sandboxID)
    local s = forced('snapshot_status', n, snap_of)
    if s then return api_error(s, 'forced failure ' .. s) end
    local sb = sandboxes[snap_of]
    if not sb then return api_error(404, 'sandbox "' .. snap_of .. '" not found') end
    local ok, body = pcall(cjson.decode, req.body ~= '' and req.body or '{}')
    if not ok or type(body) ~= 'table' or (body.name ~= nil and type(body.name) ~= 'string') then
      core.count('bad_requests')
      return api_error(400, 'invalid snapshot request')
    end
    st.last_snapshot = body
    local name = body.name
    local id = name and ('cseng-fake-team/' .. name .. ':default') or (crypto.hex(crypto.random_bytes(10)) .. ':default')
    local artifact, why = host.snapshot(sb.host, (id:gsub('[/:]', '_')) .. '-' .. crypto.hex(crypto.random_bytes(4)))
    if not artifact then return api_error(500, 'snapshot failed: ' .. tostring(why)) end
    if not snapshots[id] then snapshot_order[#snapshot_order + 1] = id end
    snapshots[id] = { id = id, name = name, artifact = artifact }
    return json(201, { snapshotID = id, names = jsonl.array(name and { 'cseng-fake-team/' .. name .. ':default' } or {}) })
  end

  -- DELETE /templates/{templateID}: a snapshot is a template (the SDK's Sandbox.deleteSnapshot
  -- sends its snapshotID there); its copy of the root is removed; unknown: 404
  local function template_delete(_, seg)
    local del_ref = common.urldecode(seg.templateID)
    local snap = snapshots[del_ref]
    if snap then
      snapshots[del_ref] = nil
      for i, sid in ipairs(snapshot_order) do if sid == del_ref then table.remove(snapshot_order, i) break end end
      pcall(require('cseng.fs').remove_tree, snap.artifact)
      return 204, {}, ''
    end
    if templates[del_ref] then
      templates[del_ref] = nil
      return 204, {}, ''
    end
    return api_error(404, 'template "' .. del_ref .. '" not found')
  end

  -- ---- template builds --------------------------------------------------------------------
  local function template_alias(_, seg)
    local alias_ref = seg.alias
    local t = templates[by_alias[common.urldecode(alias_ref)] or '']
    if not t or t.status ~= 'ready' then return api_error(404, 'template alias not found') end
    return json(200, { templateID = t.id, public = false })
  end

  local function template_create(req)
    local ok, body = pcall(cjson.decode, req.body or '')
    if not ok or type(body) ~= 'table' or type(body.name) ~= 'string' or body.name == '' then
      core.count('bad_requests')
      return api_error(400, 'name is required')
    end
    st.template_requests[#st.template_requests + 1] = body
    tseq = tseq + 1
    local t = { id = string.format('tpl%04d%s', tseq, crypto.hex(crypto.random_bytes(4))), alias = body.name,
                build = 'bld-' .. crypto.hex(crypto.random_bytes(6)), status = 'waiting', log = {} }
    templates[t.id] = t
    return json(202, { templateID = t.id, buildID = t.build, names = jsonl.array { body.name }, tags = jsonl.array { 'default' },
                       aliases = jsonl.array { body.name }, public = false })
  end

  local function template_files(_, seg)
    local ft, fh = seg.templateID, seg.hash
    if not fh:match('^' .. ('[0-9a-f]'):rep(64) .. '$') then
      core.count('bad_requests')
      return api_error(400, 'Invalid files hash')
    end
    if not templates[common.urldecode(ft)] then return api_error(404, 'template not found') end
    local f = tfiles[fh] or { sig = crypto.hex(crypto.random_bytes(8)), token = crypto.hex(crypto.random_bytes(8)) }
    tfiles[fh] = f
    return json(201, { present = f.tar ~= nil, url = api_url .. '/fake-upload/' .. fh .. '?sig=' .. f.sig,
                       headers = { [UPLOAD_HEADER] = f.token } })
  end

  local function template_build(req, seg)
    local bt, bb = seg.templateID, seg.buildID
    local t = templates[common.urldecode(bt)]
    if not t or t.build ~= common.urldecode(bb) then return api_error(404, 'build not found') end
    local ok, body = pcall(cjson.decode, req.body or '')
    if not ok or type(body) ~= 'table' or type(body.fromImage) ~= 'string' or type(body.steps) ~= 'table' then
      core.count('bad_requests')
      return api_error(400, 'fromImage and steps are required')
    end
    st.build_bodies[#st.build_bodies + 1] = body
    t.status = 'building'
    task.spawn(function()
      local function fail(msg)
        t.status, t.reason = 'error', msg
        t.log[#t.log + 1] = { level = 'error', message = msg, timestamp = iso(os.time()) }
      end
      local df, derr = fake.steps_dockerfile(body.fromImage, body.steps)
      if not df then return fail(derr) end
      st.build_dockerfiles[t.alias] = df
      local copies, tars = {}, {}
      for _, step in ipairs(body.steps) do
        if step.type == 'COPY' then
          local f = tfiles[tostring(step.filesHash)]
          copies[#copies + 1], tars[#tars + 1] = step, f and f.tar or false
        end
      end
      local artifact, env, got, why = NB.build_tars(host, t.id, df, tars, function(i, xerr)
        if xerr then return 'COPY files: ' .. xerr end
        return 'COPY ' .. tostring(copies[i].args and copies[i].args[1]) .. ': files ' .. tostring(copies[i].filesHash)
          .. ' were not uploaded'
      end)
      if not got then return fail(why) end
      st.build_contexts[t.alias] = got
      if not artifact then return fail(why) end
      t.artifact, t.env, t.status = artifact, env, 'ready'
      by_alias[t.alias] = t.id
      t.log[#t.log + 1] = { level = 'info', message = 'built ' .. t.alias, timestamp = iso(os.time()) }
    end)
    return 202, {}, ''
  end

  local function template_build_status(req, seg)
    local stt, stb = seg.templateID, seg.buildID
    local t = templates[common.urldecode(stt)]
    if not t or t.build ~= common.urldecode(stb) then return api_error(404, 'build not found') end
    local q = common.query(req.query)
    local from = (tonumber(q.logsOffset) or 0) + 1
    local entries, lines = {}, {}
    for i = from, #t.log do entries[#entries + 1] = t.log[i]; lines[#lines + 1] = t.log[i].message end
    return json(200, { templateID = t.id, buildID = t.build, status = t.status, logEntries = jsonl.array(entries),
                       logs = jsonl.array(lines), reason = t.reason and { message = t.reason } or nil })
  end

  local function snapshot_lookup(req)
    local q = common.query(req.query)
    local out = {}
    for _, id in ipairs(snapshot_order) do
      local snap = snapshots[id]
      if not q.name or q.name == '' or snap.name == q.name or id == q.name
         or 'cseng-fake-team/' .. tostring(snap.name) == q.name then
        out[#out + 1] = { snapshotID = id, names = jsonl.array(snap.name and { id } or {}) }
      end
    end
    return json(200, jsonl.array(out))
  end

  local function create(req, _, n)
    if cfg.auth_fail == 'create' then return api_error(401, 'Invalid API key') end
    local s = forced('create_status', n)
    if s then return api_error(s, 'forced failure ' .. s) end
    local ok, body = pcall(cjson.decode, req.body or '')
    local from = ok and type(body) == 'table' and type(body.templateID) == 'string' and body.templateID or ''
    local built = templates[by_alias[from] or from]
    core.record(req, (snapshots[from] and 'create_from_snapshot') or (built and built.status == 'ready' and 'create_from_template')
      or 'create', req.path)
    if not ok or type(body) ~= 'table' or type(body.templateID) ~= 'string' then
      core.count('bad_requests')
      return api_error(400, 'templateID is required')
    end
    st.last_create = body
    seq = seq + 1
    local id = string.format('i%s%04d', crypto.hex(crypto.random_bytes(6)), seq)
    local env = type(body.envVars) == 'table' and body.envVars or {}
    local sb = {
      id = id, templateID = body.templateID, metadata = type(body.metadata) == 'table' and body.metadata or {},
      env = env, timeout = math.tointeger(body.timeout) or 15, created = os.time(),
      -- POST /v2/sandboxes secures every sandbox; POST /sandboxes only with secure = true
      token = (req.path == '/v2/sandboxes' or body.secure) and ('envd-token-' .. crypto.hex(crypto.random_bytes(12))) or nil,
    }
    local snap = snapshots[body.templateID]
    sb.from_snapshot = snap and snap.id or nil
    local tpl = templates[by_alias[body.templateID] or body.templateID]
    if tpl and tpl.status == 'ready' then -- a built template: its root, its ENV under envVars
      local merged = scaffold.with(scaffold.with({}, tpl.env), env)
      env, sb.env, sb.from_template = merged, merged, tpl.alias
    end
    -- allow_internet_access (E2B's default: true): the host's network, else none; offline: never
    sb.network = body.allow_internet_access ~= false and not cfg.offline
    if sb.network then core.count('networked') end
    sb.host = host.create { env = env, labels = sb.metadata, network = sb.network,
                            warm_artifact = (snap and snap.artifact) or (tpl and tpl.artifact) or nil }
    core.add(id, sb)
    return json(201, {
      sandboxID = id, templateID = sb.templateID, clientID = 'cseng-fake', envdVersion = cfg.envd_version,
      envdAccessToken = sb.token, domain = 'fake.e2b.test',
    })
  end

  local function list_sandboxes(req, _, n)
    local s = forced('list_status', n)
    if s then return api_error(s, 'forced failure ' .. s) end
    local q = common.query(req.query)
    if q.state and q.state ~= '' then
      for state in q.state:gmatch('[^,]+') do
        if state ~= 'running' and state ~= 'paused' then
          core.count('bad_requests')
          return api_error(400, 'invalid state ' .. state)
        end
      end
    end
    -- metadata: "k=v&k2=v2" with keys and values URL-encoded inside the (decoded) parameter
    local want = {}
    for pair in tostring(q.metadata or ''):gmatch('[^&]+') do
      local k, v = pair:match('^([^=]*)=(.*)$')
      if not k then
        core.count('bad_requests')
        return api_error(400, 'invalid metadata filter ' .. pair)
      end
      want[common.urldecode(k)] = common.urldecode(v)
    end
    st.last_list_metadata = want
    local items = core.matching('metadata', want)
    local page, next_start = scaffold.page(items, tonumber(q.nextToken) or 1,
      math.min(cfg.page_size or 100, tonumber(q.limit) or 100), listed)
    local headers = { ['X-Total-Running'] = tostring(#items) }
    if next_start then headers['X-Next-Token'] = tostring(next_start) end
    return json(200, jsonl.array(page), headers)
  end

  -- fork: one checkpoint of the parent (a copy of its root, host.snapshot), count children from
  -- it, each succeeding or failing on its own; the parent runs on with its id and expiry
  local function fork(req, seg, n)
    local fork_of = common.urldecode(seg.sandboxID)
    local s = forced('fork_status', n, fork_of)
    if s then return api_error(s, 'forced failure ' .. s) end
    local parent = sandboxes[fork_of]
    if not parent then return api_error(404, 'sandbox "' .. fork_of .. '" not found') end
    local ok, body = pcall(cjson.decode, (req.body or '') ~= '' and req.body or '{}')
    local bad
    if not ok or type(body) ~= 'table' then bad = 'the body must be a SandboxForkRequest object'
    else
      for k in pairs(body) do if k ~= 'count' and k ~= 'timeout' then bad = 'unknown field ' .. tostring(k) end end
      local c, t = body.count, body.timeout
      if c ~= nil and (not math.tointeger(c) or c < 1 or c > 100) then bad = 'count must be an integer from 1 to 100' end
      if t ~= nil and (not math.tointeger(t) or t < 0) then bad = 'timeout must be an integer >= 0' end
    end
    if bad then
      core.count('bad_requests')
      return api_error(400, bad)
    end
    st.fork_bodies[#st.fork_bodies + 1] = body
    if parent.paused then return api_error(409, 'sandbox "' .. fork_of .. '" is paused') end
    local count, ttl = body.count or 1, body.timeout or 15
    local artifact, why = host.snapshot(parent.host, 'fork-' .. parent.id .. '-' .. crypto.hex(crypto.random_bytes(4)))
    if not artifact then return api_error(500, 'checkpointing the sandbox: ' .. tostring(why)) end
    local out = jsonl.array()
    for i = 1, count do
      if type(cfg.fork_fail) == 'function' and cfg.fork_fail(i, n) then
        st.fork_failed = st.fork_failed + 1
        out[i] = { error = { code = 500, error_code = 'sandbox_create_failed', message = 'injected by the fake: fork ' .. i } }
      else
        seq = seq + 1
        local id = string.format('i%s%04d', crypto.hex(crypto.random_bytes(6)), seq)
        local meta = scaffold.with({}, parent.metadata)
        local sb = {
          id = id, templateID = parent.templateID, metadata = meta, env = parent.env, timeout = ttl, created = os.time(),
          token = 'envd-token-' .. crypto.hex(crypto.random_bytes(12)), network = parent.network, parent = parent.id,
        }
        sb.host = host.create { env = sb.env, labels = meta, network = sb.network, warm_artifact = artifact }
        core.add(id, sb)
        st.forked = st.forked + 1
        out[i] = { sandbox = { sandboxID = id, templateID = sb.templateID, clientID = 'cseng-fake', envdVersion = cfg.envd_version,
                               envdAccessToken = sb.token, domain = 'fake.e2b.test' } }
      end
    end
    return json(201, out)
  end

  -- pause: the sandbox's processes are frozen (SIGSTOP, spec/fakes/sandboxes.lua) and its envd
  -- answers 502 until connect thaws them: files and running processes are kept, as E2B's pause
  -- keeps the filesystem and memory
  local function pause(_, seg)
    local pid_ = seg.sandboxID
    local sb = sandboxes[common.urldecode(pid_)]
    if not sb then return api_error(404, 'sandbox "' .. pid_ .. '" not found') end
    if sb.paused then return api_error(409, 'sandbox "' .. pid_ .. '" is already paused') end
    if type(cfg.on_pause) == 'function' then cfg.on_pause(sb.id) end
    local ok, why = host.freeze(sb.host, true)
    if not ok then return api_error(500, 'pausing: ' .. tostring(why)) end
    sb.paused = true
    return 204, {}, ''
  end

  local function connect(req, seg)
    local cid = seg.sandboxID
    local sb = sandboxes[common.urldecode(cid)]
    if not sb then return api_error(404, 'sandbox "' .. cid .. '" not found') end
    local ok, body = pcall(cjson.decode, req.body or '')
    if not ok or type(body) ~= 'table' or not math.tointeger(body.timeout) then
      core.count('bad_requests')
      return api_error(400, 'timeout (seconds) is required')
    end
    local was = sb.paused
    if was then
      local fok, why = host.freeze(sb.host, false)
      if not fok then return api_error(500, 'resuming: ' .. tostring(why)) end
      sb.paused = false
      core.count('resumes')
    end
    return json(was and 201 or 200, {
      sandboxID = sb.id, templateID = sb.templateID, clientID = 'cseng-fake', envdVersion = cfg.envd_version,
      envdAccessToken = sb.token, domain = 'fake.e2b.test',
    })
  end

  local function destroy(_, seg, n)
    local id = common.urldecode(seg.sandboxID)
    local s = forced('delete_status', n, id)
    if s then return api_error(s, 'forced failure ' .. s) end
    if not sandboxes[id] then return api_error(404, 'sandbox "' .. id .. '" not found') end
    core.remove(id)
    return 204, {}, ''
  end

  local api = core.routes({
    -- a presigned upload URL (no X-API-Key: its signature and headers); file_uploads counts those accepted
    { 'PUT', '/fake-upload/{hash}', fake_upload, op = 'template_file_upload', where = { hash = '^%x+$' }, public = true },
    -- a create is recorded once its body says create, create_from_snapshot or create_from_template
    { 'POST', '/v2/sandboxes', create, op = 'create', hit = { 'creates', 'create' }, record = false },
    { 'POST', '/sandboxes', create, op = 'create', hit = { 'creates', 'create' }, record = false },
    { 'GET', '/v2/sandboxes', list_sandboxes, op = 'list', hit = { 'lists', 'list' } },
    { 'DELETE', '/sandboxes/{sandboxID}', destroy, op = 'destroy', hit = { 'deletes', 'delete' } },
    { 'POST', '/sandboxes/{sandboxID}/snapshots', snapshot, op = 'snapshot', hit = { 'snapshots', 'snapshot' } },
    { 'POST', '/sandboxes/{sandboxID}/fork', fork, op = 'fork', hit = { 'forks', 'fork' } },
    { 'POST', '/sandboxes/{sandboxID}/pause', pause, op = 'pause', hit = { 'pauses', 'pause' } },
    { 'POST', '/sandboxes/{sandboxID}/connect', connect, op = 'connect', hit = { 'connects', 'connect' } },
    { 'GET', '/snapshots', snapshot_lookup, op = 'snapshot_lookup', hit = { 'snapshot_lists', 'snapshot_list' } },
    { 'DELETE', '/templates/{templateID}', template_delete, op = 'template_delete', hit = { 'snapshot_deletes', 'snapshot_delete' } },
    { 'GET', '/templates/aliases/{alias}', template_alias, op = 'template_alias' },
    { 'POST', '/v3/templates', template_create, op = 'template_create' },
    { 'GET', '/templates/{templateID}/files/{hash}', template_files, op = 'template_files' },
    { 'POST', '/v2/templates/{templateID}/builds/{buildID}', template_build, op = 'template_build', hit = { 'builds', 'build' } },
    { 'GET', '/templates/{templateID}/builds/{buildID}/status', template_build_status, op = 'template_build_status' },
  }, function(req) return api_error(404, 'no route ' .. req.method .. ' ' .. req.path) end, function(req, row)
    core.request(req.method .. ' ' .. req.path)
    if row and row.public then return nil end
    if cfg.auth_fail == 'all' or req.headers['x-api-key'] ~= cfg.api_key then
      core.refused(row ~= nil and row.op == 'create')
      return api_error(401, 'Invalid API key, please visit https://e2b.dev/docs to get your API key')
    end
  end)

  -- ---- envd ---------------------------------------------------------------------------------

  local function connect_error(code, message)
    return 200, { ['Content-Type'] = 'application/connect+json' },
      envelope(2, { error = { code = code, message = message } })
  end

  local function envd_user(req)
    if req.headers.authorization == nil then return 'user' end -- envd's default user
    local b64 = tostring(req.headers.authorization or ''):match('^Basic%s+(%S+)$')
    local dec = b64 and crypto.unbase64(b64)
    local user = dec and dec:match('^([^:]*):')
    if user == 'root' or user == 'user' then return user end
    return nil
  end

  local function process_start(req, _, n, sb, user)
    if not tostring(req.headers['content-type']):match('^application/connect%+json') then
      core.count('bad_requests')
      return 415, { ['Content-Type'] = 'application/json' }, '{"code":"unknown","message":"unsupported content type"}'
    end
    if req.headers['connect-protocol-version'] ~= '1' then
      core.count('bad_requests')
      return connect_error('invalid_argument', 'missing Connect-Protocol-Version: 1')
    end
    local start, why = fake.parse_start(req.body)
    core.record(req, 'exec', '/process.Process/Start', req.body:sub(6))
    if not start then
      core.count('bad_requests')
      return connect_error('invalid_argument', why)
    end
    st.start_requests[#st.start_requests + 1] = start
    st.last_start = start
    st.last_start_headers = req.headers
    st.users[#st.users + 1] = user
    local fault = pick(cfg.envd_fault, n)
    if fault == 'http_401' then
      return 401, { ['Content-Type'] = 'text/plain' }, 'unauthorized: invalid access token'
    elseif fault == 'unauthenticated' then
      return connect_error('unauthenticated', 'invalid access token')
    end
    local pid = 1000 + n
    req:start(200, { ['Content-Type'] = 'application/connect+json' })
    req:write(envelope(0, { event = { start = { pid = pid } } }))
    if fault == 'error_end' then
      req:write(envelope(2, { error = { code = 'internal', message = 'injected by the fake' } }))
      return
    end
    local p = start.process
    local argv = { p.cmd }
    for _, a in ipairs(p.args or {}) do argv[#argv + 1] = a end
    local timeout_ms = tonumber(req.headers['connect-timeout-ms'])
    local r = host.run(sb.host, { argv = argv }, {
      cwd = p.cwd, env = p.envs, user = user == 'user' and 'verifier' or 'root',
      timeout = timeout_ms and timeout_ms / 1000 or nil,
    })
    if fault == 'truncate' then
      local whole = envelope(0, { event = { data = { stdout = crypto.base64(r.stdout .. 'tail') } } })
      req:write(whole:sub(1, math.max(3, #whole // 2)))
      return -- the stream ends inside an envelope
    end
    local function data(name, bytes)
      for i = 1, #bytes, 700 do
        req:write(envelope(0, { event = { data = { [name] = crypto.base64(bytes:sub(i, i + 699)) } } }))
        req:write(envelope(0, { event = { keepalive = {} } }))
      end
    end
    data('stdout', r.stdout or '')
    data('stderr', r.stderr or '')
    if r.timed_out then
      core.count('deadlines')
      req:write(envelope(2, { error = { code = 'deadline_exceeded', message = 'context deadline exceeded' } }))
      return
    end
    if fault ~= 'no_end_event' then
      local e = { exited = true, status = 'exit status ' .. r.code }
      if r.code ~= 0 then e.exitCode = r.code end -- proto3 JSON omits the default 0
      req:write(envelope(0, { event = { ['end'] = e } }))
    end
    req:write(envelope(2, {}))
  end

  -- the query of a /files request, or nil and why its user is not one envd knows
  local function files_query(req, user)
    local q = common.query(req.query)
    -- the user is the username parameter (what the SDK sends), else the Authorization user
    if q.username and req.headers.authorization and q.username ~= user then
      return nil, 'username and Authorization user differ'
    end
    if q.username and q.username ~= '' and q.username ~= 'root' and q.username ~= 'user' then
      return nil, 'unknown user ' .. q.username
    end
    return q
  end

  local function upload(req, _, _, sb, user)
    local q, bad = files_query(req, user)
    if not q then return api_error(400, bad) end
    local n = core.hit('uploads', 'files')
    if #req.body > cfg.max_upload_bytes then
      core.count('upload_too_large')
      return api_error(413, string.format('request body of %d bytes is over the upload limit of %d bytes', #req.body,
        cfg.max_upload_bytes))
    end
    st.largest_upload = math.max(st.largest_upload, #req.body)
    st.upload_bytes = st.upload_bytes + #req.body
    local parts, why = common.multipart(req.body, req.headers['content-type'])
    core.record(req, 'upload', '/files', scaffold.part_names(parts))
    -- every part named "file" is a file: written to the path parameter when there is one (then
    -- only one file), else to its filename (relative: under the user's home), as envd does
    local list = {}
    for _, p in ipairs(parts or {}) do if p.name == 'file' then list[#list + 1] = p end end
    if #list == 0 then
      core.count('bad_requests')
      return api_error(400, 'a multipart part named "file" is required' .. (why and (': ' .. why) or ''))
    end
    local has_path = q.path and q.path ~= ''
    if has_path and #list > 1 then
      core.count('bad_requests')
      return api_error(400, 'the path parameter names one file, but ' .. #list .. ' were sent')
    end
    local home = (q.username or user) == 'root' and '/root' or '/home/user'
    local entries = jsonl.array()
    st.last_upload_files = #list
    st.upload_batches[#st.upload_batches + 1] = #list
    for _, file in ipairs(list) do
      local fpath = has_path and q.path or file.filename
      if not fpath or fpath == '' then
        core.count('bad_requests')
        return api_error(400, 'path is required (the path parameter or the part\'s filename)')
      end
      if fpath:sub(1, 1) ~= '/' then fpath = home .. '/' .. fpath end
      local data = file.data
      local c = cfg.corrupt_upload
      if (type(c) == 'number' and c == n and file == list[1]) or (type(c) == 'function' and c(n, fpath, data)) then
        local mid = #data // 2 + 1
        data = data:sub(1, mid - 1) .. string.char(data:byte(mid) ~ 0xff) .. data:sub(mid + 1)
        core.count('corrupted')
      end
      local ok, werr = host.write(sb.host, fpath, data)
      if not ok then return api_error(400, tostring(werr)) end
      st.upload_files = st.upload_files + 1
      entries[#entries + 1] = { path = fpath, name = fpath:match('[^/]*$'), type = 'file' }
    end
    return json(200, entries)
  end

  local function download(req, _, _, sb, user)
    local q, bad = files_query(req, user)
    if not q then return api_error(400, bad) end
    if not q.path or q.path == '' then
      core.count('bad_requests')
      return api_error(400, 'path is required')
    end
    core.record(req, 'download', '/files')
    core.hit('downloads', 'files')
    local data = host.read(sb.host, q.path)
    if not data then return api_error(404, "path '" .. q.path .. "' does not exist") end
    return 200, { ['Content-Type'] = 'application/octet-stream' }, data
  end

  local function files_other(req, _, _, _, user)
    local _, bad = files_query(req, user)
    if bad then return api_error(400, bad) end
    core.count('unknown')
    return api_error(405, 'method not allowed')
  end

  local function forward(req, base)
    local headers = {}
    for k, v in pairs(req.headers) do
      if k ~= 'host' and k ~= 'content-length' and k ~= 'connection' and k ~= 'transfer-encoding' then headers[k] = v end
    end
    headers['X-Cseng-Via-Prism'] = '1'
    local res, err = http.request { method = req.method, url = base .. req.path .. (req.query ~= '' and ('?' .. req.query) or ''),
                                    headers = headers, body = req.method ~= 'GET' and req.body or nil, timeout = 120 }
    if not res then return 502, { ['Content-Type'] = 'text/plain' }, 'forwarding to Prism: ' .. tostring(err) end
    return res.status, { ['Content-Type'] = res.headers['content-type'] }, res.body
  end

  local function signal(req)
    core.count('signals')
    local ok, body = pcall(cjson.decode, req.body or '')
    st.signal_requests[#st.signal_requests + 1] = ok and body or req.body
    return json(200, {})
  end

  local envd = core.routes({
    -- a Start is recorded once its envelope is read (the record holds the message)
    { 'POST', '/process.Process/Start', process_start, op = 'exec', hit = { 'starts', 'start' }, record = false },
    { 'POST', '/process.Process/SendSignal', signal, op = 'signal' }, -- counts signals (no latency)
    -- /files (forwarded to files_via when set): the user is checked first, then uploads or
    -- downloads count what gets past it; other methods are unknown (405)
    { 'POST', '/files', upload, op = 'upload', record = false, forward = true },
    { 'GET', '/files', download, op = 'download', record = false, forward = true },
    { '*', '/files', files_other, op = 'files', record = false, forward = true },
  }, function(req) return api_error(404, 'no route ' .. req.method .. ' ' .. req.path) end, function(req, row)
    core.request('envd ' .. req.method .. ' ' .. req.path)
    if row and row.forward and cfg.files_via and not req.headers['x-cseng-via-prism'] then
      return forward(req, cfg.files_via)
    end
    local id = req.headers['e2b-sandbox-id']
    if not id then id = tostring(req.headers.host or ''):match('^%d+%-([^.]+)%.') end
    local sb = id and sandboxes[id]
    if not sb then
      core.count('unknown')
      return 502, { ['Content-Type'] = 'text/plain' }, 'The sandbox was not found: ' .. tostring(id)
    end
    if sb.paused then -- a paused sandbox's envd is not running: the proxy answers for it
      core.count('paused_refused')
      return 502, { ['Content-Type'] = 'text/plain' }, 'The sandbox ' .. id .. ' is paused'
    end
    if sb.token and req.headers['x-access-token'] ~= sb.token then
      core.refused(false)
      return 401, { ['Content-Type'] = 'application/json' }, '{"code":401,"message":"unauthorized access, please provide a valid access token"}'
    end
    local user = envd_user(req)
    if not user then
      core.refused(false)
      return api_error(401, 'invalid user in the Authorization header')
    end
    return nil, sb, user
  end)

  local srv = scaffold.listen(api, cfg.port)
  api_url = srv:url()
  envd_srv = scaffold.listen(envd, nil, { max_body = 1 << 30 }) -- the upload limit is max_upload_bytes, answered 413
  local f = { url = srv:url(), port = srv:port(), envd_url = envd_srv:url(), api_key = cfg.api_key }

  --- The provider_config that points the adapter here.
  function f.config(extra)
    return scaffold.with({ adapter = 'e2b', api_url = f.url, api_key = cfg.api_key, envd_url_template = f.envd_url }, extra)
  end

  --- The environment (or --env-file lines) that points the runner here.
  function f.env(extra)
    return scaffold.with({ E2B_API_URL = f.url, E2B_API_KEY = cfg.api_key, E2B_ENVD_URL_TEMPLATE = f.envd_url }, extra)
  end

  return core.finish(f, { srv, envd_srv })
end

return fake
