--- AWS credentials and region, found the way the AWS CLI and SDKs find them:
---   1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
---   2. the shared files, profile AWS_PROFILE (or opts.profile, default 'default'):
---      the credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials, sections
---      `[name]`) and the config file (AWS_CONFIG_FILE, default ~/.aws/config, sections
---      `[profile name]`, and `[default]`); keys aws_access_key_id, aws_secret_access_key,
---      aws_session_token, region; the credentials file wins over the config file.
--- Region: AWS_REGION, then AWS_DEFAULT_REGION, then the profile's `region` in the config file.
---
---   local credentials = require 'cseng.lib.aws.credentials'
---   local c, err = credentials.resolve { profile = nil, require_region = true }
---   -- c = { access_key_id=, secret_access_key=, session_token=?, region=?, source='environment'|'profile NAME' }
---   -- err names what is missing (variables, files, profile, key), never a secret's value.
--- Nothing here writes the values anywhere; credentials.describe(c) is safe to print.
local M = {}

local function nonempty(v)
  if v == nil or v == '' then return nil end
  return v
end

--- Parse an INI-style AWS file. Returns sections (name -> {key = value}) or nil, message.
--- A missing file is an empty table.
---@param path string
---@return table<string, table<string,string>>? sections
---@return string? message
function M.parse_file(path)
  local f = io.open(path, 'r')
  if not f then return {} end
  local text = f:read('a')
  f:close()
  local sections, cur, nested = {}, nil, false
  local n = 0
  for line in (text .. '\n'):gmatch('(.-)\r?\n') do
    n = n + 1
    local indented = line:match('^%s') ~= nil
    local s = line:gsub('^%s+', ''):gsub('%s+$', '')
    local blank = s == '' or s:match('^[#;]') ~= nil -- blank or comment
    if blank then
      goto continue
    end
    if not indented and s:match('^%[.*%]$') then
      local name = s:sub(2, -2):gsub('^%s+', ''):gsub('%s+$', '')
      sections[name] = sections[name] or {}
      cur, nested = sections[name], false
    elseif indented and nested then
      -- a nested setting (s3 =\n  addressing_style = path): not ours
      if not s:find('=', 1, true) then return nil, string.format('%s:%d: expected "key = value"', path, n) end
    else
      local k, v = s:match('^([^=]-)%s*=%s*(.*)$')
      if not k or k == '' then return nil, string.format('%s:%d: expected "key = value"', path, n) end
      if not cur then return nil, string.format('%s:%d: "%s" outside any [section]', path, n, k) end
      v = v:gsub('%s+[#;].*$', '')
      cur[k:lower()] = v
      nested = (v == '')
    end
    ::continue::
  end
  return sections
end

local function home(getenv)
  return nonempty(getenv('HOME')) or '~'
end

---@class aws.credentials
---@field access_key_id string
---@field secret_access_key string
---@field session_token string?
---@field region string?
---@field source string 'environment' or 'profile NAME'

--- Resolve credentials and region. opts: getenv (default os.getenv), profile (default
--- AWS_PROFILE, then 'default'), require_region (fail when no region is found).
---@param opts? {getenv?: fun(name: string): string?, profile?: string, require_region?: boolean}
---@return aws.credentials? credentials
---@return string? message
function M.resolve(opts)
  opts = opts or {}
  local getenv = opts.getenv or os.getenv
  local region = nonempty(getenv('AWS_REGION')) or nonempty(getenv('AWS_DEFAULT_REGION'))
  local cred_file = nonempty(getenv('AWS_SHARED_CREDENTIALS_FILE')) or (home(getenv) .. '/.aws/credentials')
  local config_file = nonempty(getenv('AWS_CONFIG_FILE')) or (home(getenv) .. '/.aws/config')
  local explicit = nonempty(opts.profile) or nonempty(getenv('AWS_PROFILE'))
  local profile = explicit or 'default'

  local function finish(c)
    if not c.region and opts.require_region then
      return nil, string.format('no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or "region" in profile %q of %s',
        profile, config_file)
    end
    return c
  end

  local akid, secret = nonempty(getenv('AWS_ACCESS_KEY_ID')), nonempty(getenv('AWS_SECRET_ACCESS_KEY'))
  if akid or secret then
    if not akid then return nil, 'AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not', 'ECONFIG' end
    if not secret then return nil, 'AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not', 'ECONFIG' end
    if not region then
      local cfg = M.parse_file(config_file) or {}
      local sec = cfg[profile == 'default' and 'default' or ('profile ' .. profile)] or {}
      region = nonempty(sec.region)
    end
    return finish { access_key_id = akid, secret_access_key = secret,
                    session_token = nonempty(getenv('AWS_SESSION_TOKEN')), region = region, source = 'environment' }
  end

  local creds, err = M.parse_file(cred_file)
  if not creds then return nil, err end
  local cfg
  cfg, err = M.parse_file(config_file)
  if not cfg then return nil, err end
  local csec = creds[profile]
  local fsec = cfg['profile ' .. profile] or (profile == 'default' and cfg['default']) or nil
  if not csec and not fsec then
    if explicit then
      return nil, string.format("AWS profile '%s' not found in %s or %s", profile, cred_file, config_file)
    end
    return nil, string.format('no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, '
      .. "or add a [default] profile to %s (or %s), or set AWS_PROFILE", cred_file, config_file)
  end
  local function get(k)
    return nonempty(csec and csec[k]) or nonempty(fsec and fsec[k])
  end
  local where = csec and cred_file or config_file
  akid, secret = get('aws_access_key_id'), get('aws_secret_access_key')
  if not akid then return nil, string.format("AWS profile '%s' in %s has no aws_access_key_id", profile, where) end
  if not secret then return nil, string.format("AWS profile '%s' in %s has no aws_secret_access_key", profile, where) end
  return finish { access_key_id = akid, secret_access_key = secret, session_token = get('aws_session_token'),
                  region = region or nonempty(fsec and fsec.region), source = 'profile ' .. profile }
end

--- A printable description (the access key id's first four characters, never the secret).
---@param c aws.credentials
---@return string
function M.describe(c)
  return string.format('AWS credentials %s... from %s%s (region %s)', (c.access_key_id or ''):sub(1, 4), c.source or '?',
    c.session_token and ', with a session token' or '', c.region or 'unset')
end

return M
