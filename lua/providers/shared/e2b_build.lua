--- E2B's template build (for lua/providers/e2b.lua and its specs): a task's recipe as a template
--- aliased cseng-<key16>, as the SDK's Template.build makes one (e2b 2.51): its steps, the COPY
--- sources' hashes and tar.gz uploads, the build call and the status polls.
local clock = require('cseng.clock')
local task = require('cseng.task')
local fs = require('cseng.fs')
local archive = require('cseng.archive')
local jsonl = require('cseng.lib.jsonl')
local crypto = require('cseng.crypto')
local util = require('cseng.lib.util')
local errors = require('cseng.lib.errors')
local adapter = require('providers.shared.adapter')
local wire = require('providers.shared.e2b_wire')

local build = {}

local urlencode, str = adapter.urlencode, adapter.str
local api, request = wire.api, wire.request

--- The template alias a recipe builds to: cseng-<the content key's first 16 hex digits>.
function build.name(rcp) return 'cseng-' .. rcp.key:sub(1, 16) end

-- The sources of one COPY source (globs expanded), relative to the context.
local function copy_sources(rcp, src)
  return require('cseng.workload.recipe').copy_sources({ context_dir = rcp.context_dir,
    steps = { { op = 'COPY', copy = { src = { src } } } } })
end

-- st_mode's file type bits, which the SDK's hash includes (node's stats.mode; fs gives 07777).
local S_IFMT = { file = 0x8000, dir = 0x4000, link = 0xA000 }

-- The files of one COPY step's source as the SDK's calculateFilesHash covers them: sha256 of
-- "COPY src dest", then per path (the source itself, and a directory's whole tree; sorted by
-- path) its path relative to the context, its st_mode and size in decimal, then a file's bytes
-- or a symlink's target. Also their tar.gz (entries under their paths in the context, as the
-- SDK's spoolTarArchive). A symlink named as the source itself is followed (docker's COPY), and
-- hashed as the SDK's resolveSymlinks option hashes it; links inside a directory stay links.
local function copy_files(rcp, src, dest)
  local list = {}
  for _, c in ipairs(copy_sources(rcp, src)) do
    local st = fs.stat(c.source)
    if not st then return nil, 'COPY source ' .. src .. ' is not in environment/', 'EBUILD' end
    local top = c.archive_path == '.' and '' or c.archive_path
    list[#list + 1] = { rel = top, type = st.type, mode = st.mode, size = st.size, path = c.source }
    if st.type == 'dir' then
      for _, e in ipairs(fs.walk(c.source)) do
        list[#list + 1] = { rel = top == '' and e.path or (top .. '/' .. e.path), type = e.type, mode = e.mode, size = e.size,
                            path = c.source .. '/' .. e.path }
      end
    end
  end
  table.sort(list, function(a, b) return a.rel < b.rel end)
  local h, entries = { 'COPY ' .. src .. ' ' .. dest }, {}
  for _, f in ipairs(list) do
    h[#h + 1] = f.rel .. tostring((S_IFMT[f.type] or 0) | f.mode) .. tostring(f.size)
    if f.type == 'dir' then
      if f.rel ~= '' then entries[#entries + 1] = { path = f.rel, type = 'dir', mode = f.mode } end
    elseif f.type == 'link' then
      local target = fs.readlink(f.path)
      entries[#entries + 1] = { path = f.rel, type = 'symlink', target = target }
      h[#h + 1] = tostring(target)
    else
      local data = fs.read(f.path)
      entries[#entries + 1] = { path = f.rel, data = data, mode = f.mode }
      h[#h + 1] = data
    end
  end
  if #entries == 0 then return nil, 'no files found for COPY ' .. src, 'EBUILD' end
  return crypto.sha256_hex(table.concat(h)), archive.pack(entries, { format = 'tar.gz' })
end

--- The template's steps for a recipe: {type, args, force[, filesHash]}
--- in the recipe's order after a USER root (docker's RUN runs as root until a USER step); ARG
--- values are exported in front of the RUN steps they are in effect for; each COPY source is a
--- COPY step [src, dest, chown, chmod]. Returns the steps and the uploads {hash, tar}.
function build.steps(rcp)
  local steps, uploads = { { type = 'USER', args = { 'root' }, force = false } }, {}
  for _, s in ipairs(rcp.steps or {}) do
    if s.op == 'ENV' then
      local args = {}
      for _, kv in ipairs(s.vars) do args[#args + 1] = kv[1]; args[#args + 1] = kv[2] end
      steps[#steps + 1] = { type = 'ENV', args = args, force = false }
    elseif s.op == 'WORKDIR' then
      steps[#steps + 1] = { type = 'WORKDIR', args = { s.path }, force = false }
    elseif s.op == 'USER' then
      steps[#steps + 1] = { type = 'USER', args = { s.user }, force = false }
    elseif s.op == 'RUN' then
      local pre = {}
      for _, k in ipairs(util.keys(s.args or {})) do pre[#pre + 1] = 'export ' .. k .. '=' .. util.shell_quote(s.args[k]) .. '; ' end
      steps[#steps + 1] = { type = 'RUN', args = { table.concat(pre) .. s.cmd }, force = false }
    elseif s.op == 'COPY' and not s.copy.from then
      local c = s.copy
      local dest = c.dst
      if #c.src > 1 and dest:sub(-1) ~= '/' then dest = dest .. '/' end
      for _, src in ipairs(c.src) do
        if src:match('^%a+://') then return nil, 'ADD of a URL is not supported by template builds: ' .. src, 'EBUILD' end
        local hash, tar, tcode = copy_files(rcp, src, dest)
        if not hash then return nil, tar, tcode end
        steps[#steps + 1] = { type = 'COPY', args = { src, dest, c.chown or '', c.chmod or '' }, force = false, filesHash = hash }
        uploads[#uploads + 1] = { hash = hash, tar = tar }
      end
    end
  end
  return steps, uploads
end

-- The headers of a COPY files upload: those the upload link asks for (as the SDK sends them,
-- Content-Length aside), and the names not to send: no Content-Type unless the link names one,
-- as the SDK's upload (libcurl would otherwise label the body application/x-www-form-urlencoded).
local function upload_headers(asked)
  local h, typed = {}, false
  for k, v in pairs(type(asked) == 'table' and asked or {}) do
    if type(k) == 'string' and type(v) == 'string' and k:lower() ~= 'content-length' then
      h[k] = v
      if k:lower() == 'content-type' then typed = true end
    end
  end
  return h, not typed and { 'Content-Type' } or nil
end

-- Poll the build's status until ready or error (200 ms); the log lines gathered.
local function await_build(client, tid, bid, timeout)
  local deadline, offset, log = clock.now() + timeout * 1e9, 0, {}
  local path = '/templates/' .. urlencode(tid) .. '/builds/' .. urlencode(bid) .. '/status'
  while true do
    local data, err, code = api(client, 'GET', path .. '?logsOffset=' .. offset)
    if not data then
      if code ~= 'ETIMEDOUT' and code ~= 'ECONNRESET' and not tostring(code):match('^HTTP_5') then return nil, err, code end
    elseif type(data) == 'table' then
      local entries = type(data.logEntries) == 'table' and data.logEntries or {}
      offset = offset + #entries
      for _, e in ipairs(entries) do if type(e) == 'table' and str(e.message) then log[#log + 1] = e.message end end
      if data.status == 'ready' then return true end
      if data.status == 'error' then
        local reason = type(data.reason) == 'table' and str(data.reason.message) or 'no reason given'
        return nil, errors.new(errors.EBUILD, 'e2b: template build ' .. bid .. ' failed: ' .. reason,
          { log = table.concat(log, '\n') }), errors.EBUILD
      end
    end
    if clock.now() > deadline then
      return nil, errors.new(errors.ETIMEDOUT, 'e2b: template build ' .. bid .. ' not ready after ' .. timeout .. ' s',
        { log = table.concat(log, '\n') }), errors.ETIMEDOUT
    end
    task.sleep(client.build_poll)
  end
end

--- Build the task's recipe as a template aliased cseng-<key16> (the SDK's Template.build):
--- GET /templates/aliases/{alias} (it exists: the cache hit), else POST /v3/templates {name,
--- } -> {templateID, buildID}; per COPY step GET /templates/{id}/files/{hash}
--- -> {present, url, headers} and a PUT of its tar.gz to url (with those headers) when absent; POST
--- /v2/templates/{id}/builds/{buildID} {fromImage (the recipe's base), steps, force}; then
--- GET .../status?logsOffset= until ready. Returns {image, layer (the alias: create's
--- templateID), cache_hit, template_id}.
function build.build(client, req)
  local rcp = req.recipe
  local alias = build.name(rcp)
  local timeout = math.max(req.timeout or 0, client.build_timeout)
  local found, ferr, fcode = api(client, 'GET', '/templates/aliases/' .. urlencode(alias))
  if found then
    return { image = rcp.base, layer = alias, cache_hit = true, template_id = type(found) == 'table' and str(found.templateID) or nil }
  elseif fcode ~= 'HTTP_404' then
    return nil, ferr, fcode
  end
  if not rcp.base then return nil, 'e2b: build: the task has no base image (no FROM, no docker_image)', 'EBUILD' end
  local steps, uploads = build.steps(rcp)
  if not steps then return nil, 'e2b: build: ' .. uploads, 'EBUILD' end
  -- (cpuCount/memoryMB: the template's defaults; the sandbox's own come with create)
  local created, cerr, ccode = api(client, 'POST', '/v3/templates', { json = { name = alias } })
  if not created then return nil, cerr, ccode end
  local tid, bid = type(created) == 'table' and str(created.templateID), type(created) == 'table' and str(created.buildID)
  if not tid or not bid then return nil, 'e2b: POST /v3/templates: no templateID/buildID', 'EPROTO' end
  for _, u in ipairs(uploads) do
    local link, lerr, lcode = api(client, 'GET', '/templates/' .. urlencode(tid) .. '/files/' .. u.hash)
    if not link then return nil, lerr, lcode end
    if type(link) == 'table' and link.present ~= true and str(link.url) then
      local headers, omit = upload_headers(link.headers)
      local ok, perr, pcode = request('PUT', link.url, headers, { body = u.tar, raw = true, timeout = 300, omit_headers = omit })
      if not ok then return nil, perr, pcode end
    end
  end
  local body = { fromImage = rcp.base, steps = jsonl.array(steps), force = false }
  local ok, berr, bcode = api(client, 'POST', '/v2/templates/' .. urlencode(tid) .. '/builds/' .. urlencode(bid), { json = body })
  if not ok then return nil, berr, bcode end
  local done, werr, wcode = await_build(client, tid, bid, timeout)
  if not done then return nil, werr, wcode end
  return { image = rcp.base, layer = alias, cache_hit = false, template_id = tid }
end

return build
