--- The egress workload (capabilities.egress): the time for the sandbox to reach a package mirror it
--- is allowed to reach and fetch a file from it. The URL is workload_options.egress_url
--- (--egress-url); without one, the machine's own apt sources name it: the first http(s) source's
--- dists/<its first suite>/Release (a small file every Debian mirror holds). Per sample, untimed
--- first: where the adapter filters egress (network_policy), the sandbox is allowed that host and
--- nothing else; the tool is found (curl, else python3's http.client). Then one command fetches
--- the URL into a file, and the tool reports from inside the sandbox
---   egress_connect_ms     request start -> connection ready (name resolved, TCP, and TLS for https)
---   egress_first_byte_ms  request start -> the response's first bytes arrived
---   egress_total_ms       request start -> its last byte written
--- while the host times the same command as egress_exec_ms (exec call sent -> its answer). After
--- the timing, the host fetches the URL itself: the sandbox's status must be 200, its file's
--- length and sha256 the host's.
local http = require('cseng.http')
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')
local workloads = require('cseng.run.workloads')

local W = { name = 'egress', capability = 'egress',
  doc = 'fetch a file from a package mirror the sandbox may reach (connect, first byte, total; bytes checked)' }

local FIELD = 'workload_options.egress_url (--egress-url)'

-- The fetch with python3 (images without curl): prints what curl's -w prints below, in seconds.
local PY = table.concat({
  'import sys,time,http.client',
  'from urllib.parse import urlsplit',
  'u=urlsplit(sys.argv[1])',
  'C=http.client.HTTPSConnection if u.scheme=="https" else http.client.HTTPConnection',
  't0=time.monotonic()',
  'c=C(u.hostname,u.port,timeout=300)',
  'c.connect()',
  't1=time.monotonic()',
  'c.request("GET",(u.path or "/")+("?"+u.query if u.query else ""),headers={"User-Agent":"cseng-egress"})',
  'r=c.getresponse()',
  't2=time.monotonic()',
  'f=open(sys.argv[2],"wb")',
  'while True:',
  '    d=r.read(65536)',
  '    if not d: break',
  '    f.write(d)',
  'f.close()',
  't3=time.monotonic()',
  'print("code=%d\\nconnect=%.6f\\nfirst_byte=%.6f\\ntotal=%.6f"%(r.status,t1-t0,t2-t0,t3-t0))',
}, '\n')

local CURL_FORMAT = 'code=%{http_code}\\nconnect=%{time_connect}\\nappconnect=%{time_appconnect}\\n'
  .. 'first_byte=%{time_starttransfer}\\ntotal=%{time_total}\\n'

-- What a URL given here may hold: unreserved characters, '%' escapes and the delimiters no shell
-- reads (no ; & | $ ` ' " \\ < > ( ) * ! space or newline), so no quoting mistake anywhere can
-- turn it into a command.
local URL_CHARS = '^[%w%-%._~:/%%?=+,@]+$'

--- The URL's parts {scheme, host, port, path}, or nil and why (a URL that is not http(s), holds
--- a character outside URL_CHARS, names no host, a user, or a port out of range).
---@param url any
---@return table|nil, string|nil
function W.parse_url(url)
  if type(url) ~= 'string' then return nil, 'expected a URL, got ' .. type(url) end
  local shown = string.format('%q', url):gsub('\\\n', '\\n')
  local scheme = url:match('^(%a[%w+.-]*)://')
  if not scheme or (scheme:lower() ~= 'http' and scheme:lower() ~= 'https') then
    return nil, shown .. ': only http:// and https:// URLs are fetched'
  end
  if not url:match(URL_CHARS) then
    local bad = url:match('[^%w%-%._~:/%%?=+,@]')
    bad = (bad:byte() < 32 or bad:byte() > 126) and string.format('\\%d', bad:byte()) or bad
    return nil, string.format('%s holds "%s", which a URL given here may not (letters, digits and - . _ ~ : / %% ? = + , @)',
      shown, bad)
  end
  local authority, path = url:match('^%a[%w+.-]*://([^/?]*)(.*)$')
  if authority:find('@', 1, true) then return nil, shown .. ': a user in the URL is not supported' end
  local host, port = authority:match('^([%w.-]+):?(%d*)$')
  if not host or host == '' or host:sub(1, 1) == '-' or host:sub(1, 1) == '.' then
    return nil, shown .. ': no host name or IPv4 address after ' .. scheme .. '://'
  end
  local p = tonumber(port ~= '' and port or (scheme:lower() == 'https' and 443 or 80))
  if p < 1 or p > 65535 then return nil, shown .. ': port ' .. port .. ' is out of range' end
  return { scheme = scheme:lower(), host = host, port = math.tointeger(p), path = path ~= '' and path or '/' }
end

--- The default URL: the first http(s) apt source of the machine (rootfs.apt_sources, root
--- default /etc/apt) and a small file under it, dists/<its first suite>/Release. Returns the URL,
--- or nil and why.
---@param root string|nil
---@return string|nil, string|nil
function W.default_url(root)
  root = root or '/etc/apt'
  for _, src in ipairs(require('cseng.images.rootfs').apt_sources(root)) do
    local s = src.suites[1]
    if src.uri:match('^[Hh][Tt][Tt][Pp][Ss]?://') and s and s ~= '' and not s:find('/', 1, true) then
      return src.uri .. '/dists/' .. s .. '/Release'
    end
  end
  return nil, string.format('no egress_url given, and no http(s) source in %s/sources.list or %s/sources.list.d/ '
    .. 'to take one from (pass --egress-url URL)', root, root)
end

--- Where the default's apt sources are read (nil: /etc/apt; a spec points it at its own).
W.apt_root = nil

function W.options(wo)
  if wo.egress_url == nil then
    local url, why = W.default_url(W.apt_root)
    if not url then error(FIELD .. ': ' .. why, 0) end
    wo.egress_url, wo.egress_url_from = url, 'apt sources'
  end
  local u, why = W.parse_url(wo.egress_url)
  if not u then error(FIELD .. ': ' .. why, 0) end
end

-- A sandbox whose adapter honours network = false (network_policy) must be made with the network.
function W.refuse(_, P, spec, name)
  if (P.capabilities or {}).network_policy == true and not spec.network then
    return string.format('%s\'s sandboxes have no network: give them one (plan: sandbox = { network = true }, or '
      .. 'provider_config.%s.sandbox.network = true)', name, name)
  end
end

function W.figures()
  return {
    { 'egress_connect_ms', 'ms', 'inside: request start -> connection ready (name resolved, TCP, TLS for https)' },
    { 'egress_first_byte_ms', 'ms', 'inside: request start -> the response\'s first bytes arrived' },
    { 'egress_total_ms', 'ms', 'inside: request start -> its last byte written' },
    { 'egress_exec_ms', 'ms', 'the fetching command: exec call sent -> its answer arrived (the tool\'s start included)' },
  }
end
function W.headline() return 'egress_total_ms' end

-- Allow the sandbox the URL's host (and nothing else) where the adapter filters egress; the
-- path says what held.
local function allow(ctx, host)
  local P = ctx.p.adapter
  if not P.network_policy then
    ctx:path('egress_policy', 'the provider\'s own network (no egress filter in the adapter)')
    return
  end
  local r, why = P.network_policy(ctx.p.client, ctx.sb, { mode = 'allowlist', hosts = { host } })
  if not r then
    ctx:path('egress_policy', 'not filtered: ' .. tostring(why))
    return
  end
  for _, u in ipairs(r.unenforced or {}) do
    errors.raise(errors.EEGRESS, string.format('the allowlist could not admit %s: %s', tostring(u.host), tostring(u.why)))
  end
  ctx:path('egress_policy', string.format('allowlist %s (%s)', table.concat(r.allowed or {}, ','), tostring(r.enforced)))
end

function W.run(ctx)
  local url = ctx.wo.egress_url
  local host = assert(W.parse_url(url)).host
  local file = '/tmp/cseng-egress-' .. ctx.hex:sub(1, 8) .. '.bin'
  ctx:stage('egress_prepare')
  allow(ctx, host)
  local tools = ctx:sh('for t in curl python3; do command -v $t >/dev/null 2>&1 && echo $t; done; true').stdout or ''
  local cmd
  if tools:match('curl') then
    ctx:path('egress', 'curl')
    cmd = 'curl -sS -o ' .. util.shell_quote(file) .. ' -w ' .. util.shell_quote(CURL_FORMAT) .. ' --url ' .. util.shell_quote(url)
  elseif tools:match('python3') then
    ctx:path('egress', 'python3 http.client')
    cmd = 'python3 -c ' .. util.shell_quote(PY) .. ' ' .. util.shell_quote(url) .. ' ' .. util.shell_quote(file)
  else
    errors.raise(errors.ETOOLS, 'the sandbox has neither curl nor python3 to fetch with (the egress workload needs one)')
  end
  ctx:stage('egress')
  local _, res = ctx:time('egress_exec_ms', function() return ctx:sh(cmd, { any_exit = true }) end)
  local kv = workloads.kv(res.stdout)
  if res.code ~= 0 or not kv.code then
    errors.raise(errors.EEGRESS, string.format('fetching %s inside the sandbox: exit %s: %s', url, tostring(res.code),
      util.tail(util.trim((res.stderr or '') .. ' ' .. (res.stdout or '')), 300)))
  end
  if kv.code ~= '200' then
    ctx:sh('rm -f ' .. util.shell_quote(file))
    errors.raise(errors.EEGRESS, string.format('fetching %s inside the sandbox: HTTP %s (expected 200)', url, kv.code))
  end
  local function ms(k) local v = tonumber(kv[k]); return v and v * 1000 or nil end
  ctx:figure('egress_connect_ms', math.max(ms('connect') or 0, ms('appconnect') or 0))
  ctx:figure('egress_first_byte_ms', ms('first_byte'))
  ctx:figure('egress_total_ms', ms('total'))
  ctx:stage('egress_check')
  local got, size = ctx:file_sum(file, { remove = true, what = 'sha256sum of the fetched file' })
  local ref, rerr = http.request { url = url, timeout = 300, headers = { ['User-Agent'] = 'cseng-egress' } }
  if not ref then errors.raise(errors.EEGRESS, string.format('the host\'s own fetch of %s: %s', url, tostring(rerr))) end
  if ref.status ~= 200 then
    errors.raise(errors.EEGRESS, string.format('the host\'s own fetch of %s: HTTP %s', url, tostring(ref.status)))
  end
  ctx:check('egress_bytes', size == #ref.body, #ref.body, size)
  ctx:check('egress_sha256', got == crypto.sha256_hex(ref.body), crypto.sha256_hex(ref.body), got)
end

return W
