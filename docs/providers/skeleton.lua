--- The Acme provider: sandboxes from the Acme REST API (docs/providers/acme.md).
--- (The skeleton of docs/providers/README.md: spec/providers/shared/contract_spec.lua checks it against the adapter
--- contract and runs its lifecycle on a loopback fake, so it stays true. Copy it to
--- lua/providers/<name>.lua and docs/providers/skeleton_spec.lua to spec/providers/<name>/<name>_spec.lua, and
--- replace the Acme calls.)
local util = require('cseng.lib.util')
local adapter = require('providers.shared.adapter')

local M = {
  name = 'acme',
  description = 'Acme sandboxes (REST API)',
  -- an entry is a variable, or a list of alternative names (the first one set is used)
  credentials = { { 'ACME_API_KEY', 'ACME_TOKEN' } },
  rates = { vcpu_s = 0.000014, gib_s = 0.0000045, per_create = 0 },
  capabilities = { non_root = false },
  remote = true,
  -- what its sandbox ids look like: an id read back from a log is checked against it first
  id_format = { pattern = '^sb%-%w+$', example = 'sb-0123abcd' },
}

--- Settings come from the plan's provider_config first, then the environment (cfg.getenv: the
--- --env-file entries, then the process's). A missing credential is one line naming it.
function M.connect(cfg)
  local setting = adapter.settings(cfg)
  local key = adapter.credentials('acme', setting, { { 'api_key', { 'ACME_API_KEY', 'ACME_TOKEN' }, secret = true } })
  return { base = tostring(setting('api_url', 'ACME_API_URL') or 'https://api.acme.example'):gsub('/+$', ''), key = key }
end

-- One API call: JSON in, JSON out; an HTTP error is nil, "acme: METHOD /path: HTTP 4xx: <body>",
-- "HTTP_4xx" (the body redacted and cut), a transport error keeps cseng.http's code.
local function call(client, method, path, o)
  o = o or {}
  return adapter.request('acme', method, client.base .. path, { json = o.json, body = o.body, raw = o.raw,
    headers = { Authorization = 'Bearer ' .. client.key }, timeout = o.timeout or 60, what = method .. ' ' .. path })
end

function M.create(client, spec)
  local r, err, code = call(client, 'POST', '/sandboxes',
    { json = { image = spec.image, labels = spec.labels, ttl = spec.ttl_seconds, env = spec.env } })
  if not r then return nil, err, code end
  if type(r) ~= 'table' or type(r.id) ~= 'string' then return nil, 'acme: POST /sandboxes: no id in the response', 'EPROTO' end
  return { id = r.id, labels = spec.labels }
end

function M.exec(client, sb, cmd, opts)
  opts = opts or {}
  local r, err, code = call(client, 'POST', '/sandboxes/' .. adapter.urlencode(sb.id) .. '/exec',
    { json = { cmd = { 'bash', '-c', cmd }, cwd = opts.cwd, env = opts.env, user = opts.user, timeout = opts.timeout },
      timeout = (opts.timeout or 600) + 30 })
  if not r then return nil, err, code end
  return { code = adapter.int(r.exit_code), stdout = adapter.str(r.stdout) or '', stderr = adapter.str(r.stderr) or '',
           timed_out = r.timed_out == true or nil }
end

-- A file upload: the bytes as the body of PUT /sandboxes/{id}/files?path=...
local function upload(client, sb, path, bytes)
  return adapter.done(call(client, 'PUT', '/sandboxes/' .. adapter.urlencode(sb.id) .. '/files?path='
    .. adapter.urlencode(path), { body = bytes, raw = true }))
end

--- Unpack a tar (or tar.gz) into dir: uploaded to the sandbox's /tmp, then `tar -xf` there.
M.put = adapter.put_via(M, upload)

function M.get(client, sb, path)
  local data, err, code = call(client, 'GET', '/sandboxes/' .. adapter.urlencode(sb.id) .. '/files?path='
    .. adapter.urlencode(path), { raw = true })
  if data == nil and code == 'HTTP_404' then return nil, path .. ': no such file', 'ENOENT' end
  return data, err, code
end

--- Idempotent: a sandbox already gone (404) is destroyed.
function M.destroy(client, sb)
  return adapter.deleted(call(client, 'DELETE', '/sandboxes/' .. adapter.urlencode(sb.id)))
end

--- The sandboxes carrying every label of filter.labels (filtered here: say the API cannot).
function M.list(client, filter)
  local r, err, code = call(client, 'GET', '/sandboxes')
  if not r then return nil, err, code end
  local out = {}
  for _, s in ipairs(type(r) == 'table' and r.sandboxes or {}) do
    local labels, match = type(s.labels) == 'table' and s.labels or {}, true
    for k, v in pairs(filter and filter.labels or {}) do if labels[k] ~= v then match = false end end
    if match then out[#out + 1] = { id = s.id, labels = util.copy(labels), created = adapter.int(s.created) } end
  end
  return out
end

return M
