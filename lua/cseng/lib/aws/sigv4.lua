--- AWS Signature Version 4 (header and presigned-query signing), on the engine's crypto.
---
---   local sigv4 = require 'cseng.lib.aws.sigv4'
---   local add, info = sigv4.sign {
---     method = 'POST', url = 'https://lambda.us-east-1.amazonaws.com/2025-09-09/microvms',
---     headers = { ['Content-Type'] = 'application/json' }, body = '{}',
---     region = 'us-east-1', service = 'lambda',
---     access_key_id = 'AKID', secret_access_key = 'SECRET', session_token = nil,
---   }
---   -- add: { Authorization=, ['X-Amz-Date']=, ['X-Amz-Security-Token']= (with a token),
---   --        ['X-Amz-Content-Sha256']= (s3, or content_sha256 = true) }
---   -- info: { canonical_request=, string_to_sign=, signature=, signed_headers=, scope=, payload_hash= }
---
--- Rules (AWS's "Create a signed AWS API request"; checked against every case of aws-c-auth's
--- v4 test suite and against botocore, see spec/lib/aws/sigv4_spec.lua):
--- - canonical URI: the URL's path as sent. Services other than S3: dot segments removed and
---   repeated slashes collapsed (normalize = false keeps them), then every byte but the
---   unreserved ones and '/' percent-encoded, so an already-encoded "%20" is encoded again
---   ("%2520", AWS's double encoding). S3 (s3 = true, or service 's3'): no normalization and no
---   double encoding: the path is kept, bytes that cannot appear raw are encoded, %XX stays.
--- - canonical query: each name and value percent-decoded then encoded (unreserved kept, so
---   space is %20 and '+' is %2B), "name" without '=' is "name=", sorted by name then value.
--- - canonical headers: names lowercased; values trimmed, inner runs of whitespace (line folds
---   included) made one space; a repeated header's values joined with ',' in the order given;
---   Host from the URL (default ports dropped) unless given; sorted. Not signed: user-agent,
---   expect, x-amzn-trace-id, authorization (as botocore).
--- - payload hash: SHA-256 of the body, or 'UNSIGNED-PAYLOAD' (unsigned_payload = true), or
---   payload_hash as given.
local crypto = require('cseng.crypto')
local errors = require('cseng.lib.errors')

local M = {}

M.ALGORITHM = 'AWS4-HMAC-SHA256'
M.UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD'
M.EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'

local NOT_SIGNED = { ['user-agent'] = true, expect = true, ['x-amzn-trace-id'] = true, authorization = true }

--- Percent-encode every byte of s but A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash).
---@param s string
---@param keep_slash boolean?
---@return string
function M.uri_encode(s, keep_slash)
  local pat = keep_slash and '[^%w%-%._~/]' or '[^%w%-%._~]'
  return (s:gsub(pat, function(c) return string.format('%%%02X', c:byte()) end))
end

--- Decode %XX sequences (a '%' not followed by two hex digits stays as it is; '+' stays '+').
---@param s string
---@return string
function M.uri_decode(s)
  return (s:gsub('%%(%x%x)', function(h) return string.char(tonumber(h, 16)) end))
end

-- Remove '.' and '..' segments and empty segments (repeated slashes); keep a trailing slash.
local function normalize_path(path)
  local out = {}
  for seg in path:gmatch('[^/]+') do
    if seg == '..' then
      out[#out] = nil
    elseif seg ~= '.' then
      out[#out + 1] = seg
    end
  end
  local p = '/' .. table.concat(out, '/')
  if #out > 0 and path:sub(-1) == '/' then p = p .. '/' end
  return p
end

--- Split a URL into scheme, host (with a port unless it is the scheme's default), path, query.
---@param url string
---@return string scheme, string host, string path, string query
function M.parse_url(url)
  local scheme, rest = url:match('^(%a[%w+.-]*)://(.*)$')
  if not scheme then errors.raise(errors.EINVAL, 'sigv4: url must be absolute (scheme://host/path): ' .. tostring(url)) end
  scheme = scheme:lower()
  local authority, tail = rest:match('^([^/?#]*)(.*)$')
  authority = authority:gsub('^.*@', '')
  local host, port = authority:match('^(.-):(%d+)$')
  if not host then host = authority end
  if port and not ((scheme == 'https' and port == '443') or (scheme == 'http' and port == '80')) then
    host = host .. ':' .. port
  end
  tail = tail:gsub('#.*$', '')
  local path, query = tail:match('^([^?]*)%??(.*)$')
  if path == '' then path = '/' end
  return scheme, host:lower(), path, query
end

--- The canonical URI of a path as sent on the wire.
---@param path string
---@param s3 boolean? S3 rules: no normalization, no double encoding
---@param normalize boolean? default true (ignored with s3)
---@return string
function M.canonical_uri(path, s3, normalize)
  if path == '' then path = '/' end
  if s3 then
    -- keep %XX as sent; encode only what cannot appear raw
    local out, i = {}, 1
    while i <= #path do
      local c = path:sub(i, i)
      if c == '%' and path:sub(i + 1, i + 2):match('^%x%x$') then
        out[#out + 1] = path:sub(i, i + 2)
        i = i + 3
      else
        out[#out + 1] = c:match('^[%w%-%._~/]$') and c or string.format('%%%02X', c:byte())
        i = i + 1
      end
    end
    return table.concat(out)
  end
  if normalize ~= false then path = normalize_path(path) end
  return M.uri_encode(path, true)
end

--- The canonical query string of a raw query (without '?'), plus extra {name, value} pairs
--- (unencoded) appended before sorting.
---@param query string
---@param extra table? list of {name, value}
---@return string
function M.canonical_query(query, extra)
  local pairs_ = {}
  for part in (query or ''):gmatch('[^&]+') do
    local k, v = part:match('^([^=]*)=(.*)$')
    if not k then k, v = part, '' end
    pairs_[#pairs_ + 1] = { M.uri_encode(M.uri_decode(k)), M.uri_encode(M.uri_decode(v)) }
  end
  for _, kv in ipairs(extra or {}) do
    pairs_[#pairs_ + 1] = { M.uri_encode(kv[1]), M.uri_encode(kv[2]) }
  end
  table.sort(pairs_, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  local out = {}
  for i, kv in ipairs(pairs_) do out[i] = kv[1] .. '=' .. kv[2] end
  return table.concat(out, '&')
end

-- headers: { name = value | {values...} } or a list of { name, value } (order kept for repeats).
-- Returns name(lowercase) -> list of values, in first-seen order of names.
local function collect_headers(headers)
  local by, order = {}, {}
  local function add(name, value)
    if type(name) ~= 'string' then errors.raise(errors.EINVAL, 'sigv4: header name must be a string') end
    local n = name:lower()
    if not by[n] then by[n] = {}; order[#order + 1] = n end
    if type(value) == 'table' then
      for _, v in ipairs(value) do by[n][#by[n] + 1] = tostring(v) end
    else
      by[n][#by[n] + 1] = tostring(value)
    end
  end
  if headers and headers[1] ~= nil then
    for _, kv in ipairs(headers) do add(kv[1], kv[2]) end
  else
    local names = {}
    for k in pairs(headers or {}) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do add(k, headers[k]) end
  end
  return by, order
end

local function trim_value(v)
  return (v:gsub('^%s+', ''):gsub('%s+$', ''):gsub('%s+', ' '))
end

--- Canonical headers block and signed-headers list for a collected header set.
local function canonical_headers(by)
  local names = {}
  for n in pairs(by) do
    if not NOT_SIGNED[n] then names[#names + 1] = n end
  end
  table.sort(names)
  local lines = {}
  for i, n in ipairs(names) do
    local vals = {}
    for j, v in ipairs(by[n]) do vals[j] = trim_value(v) end
    lines[i] = n .. ':' .. table.concat(vals, ',') .. '\n'
  end
  return table.concat(lines), table.concat(names, ';')
end

local function check(req)
  if type(req) ~= 'table' then errors.raise(errors.EINVAL, 'sigv4: sign expects a table') end
  for _, f in ipairs { 'method', 'url', 'region', 'service', 'access_key_id', 'secret_access_key' } do
    if type(req[f]) ~= 'string' or req[f] == '' then
      errors.raise(errors.EINVAL, 'sigv4: field ' .. f .. ' is missing or not a string')
    end
  end
  if req.body ~= nil and type(req.body) ~= 'string' then errors.raise(errors.EINVAL, 'sigv4: body must be a string') end
end

--- 'YYYYMMDDTHHMMSSZ' from req.timestamp (that form or ISO 8601 '2015-08-30T12:36:00Z'), or now.
---@param ts string?
---@return string
function M.amz_date(ts)
  if ts == nil then return (os.date('!%Y%m%dT%H%M%SZ')) end
  if ts:match('^%d%d%d%d%d%d%d%dT%d%d%d%d%d%dZ$') then return ts end
  local y, mo, d, h, mi, s = ts:match('^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)')
  if not y then errors.raise(errors.EINVAL, 'sigv4: timestamp must be YYYYMMDDTHHMMSSZ or YYYY-MM-DDTHH:MM:SSZ: ' .. ts) end
  return y .. mo .. d .. 'T' .. h .. mi .. s .. 'Z'
end

--- The signing key for a date (YYYYMMDD), region and service.
---@return string raw 32 bytes
function M.signing_key(secret, date, region, service)
  local k = crypto.hmac_sha256('AWS4' .. secret, date)
  k = crypto.hmac_sha256(k, region)
  k = crypto.hmac_sha256(k, service)
  return crypto.hmac_sha256(k, 'aws4_request')
end

local function is_s3(req)
  if req.s3 ~= nil then return req.s3 and true or false end
  return req.service == 's3'
end

local function payload_hash(req)
  if req.payload_hash then return req.payload_hash end
  if req.unsigned_payload then return M.UNSIGNED_PAYLOAD end
  return crypto.sha256_hex(req.body or '')
end

local function finish(req, amz_date, creq, signed_names)
  local date = amz_date:sub(1, 8)
  local scope = date .. '/' .. req.region .. '/' .. req.service .. '/aws4_request'
  local sts = M.ALGORITHM .. '\n' .. amz_date .. '\n' .. scope .. '\n' .. crypto.sha256_hex(creq)
  local key = M.signing_key(req.secret_access_key, date, req.region, req.service)
  local sig = crypto.hex(crypto.hmac_sha256(key, sts))
  return { canonical_request = creq, string_to_sign = sts, signature = sig, signed_headers = signed_names,
           scope = scope, amz_date = amz_date }
end

-- The request checked, and what both signings read of it: the X-Amz-Date, the URL's host, path and
-- query, and whether S3 rules apply.
local function parsed(req)
  check(req)
  local amz_date = M.amz_date(req.timestamp)
  local _, host, path, query = M.parse_url(req.url)
  return amz_date, host, path, query, is_s3(req)
end

-- The canonical request (the query with `params` added, for presigning) signed: finish's info
-- with the payload hash.
local function signed_request(req, amz_date, path, query, params, s3, ch, signed, phash)
  local creq = table.concat({
    req.method:upper(), M.canonical_uri(path, s3, req.normalize), M.canonical_query(query, params), ch, signed, phash,
  }, '\n')
  local info = finish(req, amz_date, creq, signed)
  info.payload_hash = phash
  return info
end

---@class aws.sigv4.request
---@field method string
---@field url string absolute URL as sent (path and query already percent-encoded)
---@field headers table? name -> value (or list of values), or a list of {name, value}
---@field body string?
---@field region string
---@field service string
---@field access_key_id string
---@field secret_access_key string
---@field session_token string?
---@field timestamp string? 'YYYYMMDDTHHMMSSZ' (default: now, UTC)
---@field unsigned_payload boolean? payload hash 'UNSIGNED-PAYLOAD'
---@field payload_hash string? a precomputed payload hash
---@field s3 boolean? S3 rules (default: service == 's3'); adds X-Amz-Content-Sha256
---@field content_sha256 boolean? add (and sign) X-Amz-Content-Sha256 for any service
---@field normalize boolean? path normalization for non-S3 (default true)
---@field omit_session_token boolean? X-Amz-Security-Token added but not signed (some services)
---@field expires integer? presign only: X-Amz-Expires seconds (default 900)

--- Header signing. Returns the headers to add to the request and the intermediate values.
---@param req aws.sigv4.request
---@return table<string,string> headers, table info
function M.sign(req)
  local amz_date, host, path, query, s3 = parsed(req)
  local phash = payload_hash(req)
  local by = collect_headers(req.headers)
  local add = {}
  by['authorization'] = nil
  by['x-amz-date'] = { amz_date }
  add['X-Amz-Date'] = amz_date
  if not by['host'] then by['host'] = { host } end
  if s3 or req.content_sha256 then
    by['x-amz-content-sha256'] = { phash }
    add['X-Amz-Content-Sha256'] = phash
  end
  if req.session_token and req.session_token ~= '' then
    add['X-Amz-Security-Token'] = req.session_token
    if req.omit_session_token then
      by['x-amz-security-token'] = nil
    else
      by['x-amz-security-token'] = { req.session_token }
    end
  end
  local ch, signed = canonical_headers(by)
  local info = signed_request(req, amz_date, path, query, nil, s3, ch, signed, phash)
  add['Authorization'] = string.format('%s Credential=%s/%s, SignedHeaders=%s, Signature=%s',
    M.ALGORITHM, req.access_key_id, info.scope, signed, info.signature)
  info.authorization = add['Authorization']
  return add, info
end

--- Query (presigned URL) signing. Returns the signed URL and the intermediate values. The
--- payload hash is the body's (UNSIGNED-PAYLOAD for S3 unless payload_hash is given).
---@param req aws.sigv4.request
---@return string url, table info
function M.presign(req)
  local amz_date, host, path, query, s3 = parsed(req)
  local phash = req.payload_hash or ((s3 or req.unsigned_payload) and M.UNSIGNED_PAYLOAD)
    or crypto.sha256_hex(req.body or '')
  local by = collect_headers(req.headers)
  by['authorization'] = nil
  if not by['host'] then by['host'] = { host } end
  local ch, signed = canonical_headers(by)
  local date = amz_date:sub(1, 8)
  local scope = date .. '/' .. req.region .. '/' .. req.service .. '/aws4_request'
  local params = {
    { 'X-Amz-Algorithm', M.ALGORITHM },
    { 'X-Amz-Credential', req.access_key_id .. '/' .. scope },
    { 'X-Amz-Date', amz_date },
    { 'X-Amz-Expires', tostring(req.expires or 900) },
    { 'X-Amz-SignedHeaders', signed },
  }
  local token = req.session_token ~= '' and req.session_token or nil
  if token and not req.omit_session_token then params[#params + 1] = { 'X-Amz-Security-Token', token } end
  local info = signed_request(req, amz_date, path, query, params, s3, ch, signed, phash)
  local q = {}
  for _, kv in ipairs(params) do q[#q + 1] = M.uri_encode(kv[1]) .. '=' .. M.uri_encode(kv[2]) end
  if token and req.omit_session_token then q[#q + 1] = 'X-Amz-Security-Token=' .. M.uri_encode(token) end
  q[#q + 1] = 'X-Amz-Signature=' .. info.signature
  local base = req.url:gsub('#.*$', '')
  local url = base .. (query ~= '' and '&' or (base:find('?', 1, true) and '' or '?')) .. table.concat(q, '&')
  return url, info
end

return M
