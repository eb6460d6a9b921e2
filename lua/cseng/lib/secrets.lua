--- Secrets: what must never reach a log, a report or a terminal. secrets.redact replaces every
--- secret value (and its encoded forms, and every run of 8 or more of its bytes) by [redacted];
--- every string cseng writes goes through it.
local secrets = {}

-- Secret values: environment variables whose names say TOKEN, KEY, SECRET or PASSWORD (a
-- value of 6 or more bytes that is not an absolute path), plus anything registered with
-- secrets.add (--env-file credentials, tokens a provider returned). Each one is hidden with
-- its encoded forms (secrets.forms), and the engine's C side (cseng.redact, which C
-- diagnostics go through) is handed every form the moment the set changes.
local whole = nil   -- list of every whole form to hide
local frags = nil    -- secret fragments of FRAG bytes: fragment -> true
local seen = nil     -- form -> true
local extra_secrets = {}
local FRAG = 8       -- no run of this many bytes of a secret survives secrets.redact

--- Whether the name of an environment variable says it holds a credential.
---@param name string
function secrets.is_name(name)
  local up = tostring(name):upper()
  return (up:find('TOKEN') or up:find('KEY') or up:find('SECRET') or up:find('PASSWORD')) and true or false
end

local function url_safe(b) return (b:gsub('[+/]', { ['+'] = '-', ['/'] = '_' })) end

--- The strings that hide v when a server echoes it: v itself, then its base64 (standard and
--- URL-safe alphabets, padded; and, for each of the 3 alignments v can have inside a longer
--- encoded string, the characters made of v's bits alone, which also match the unpadded
--- form) and its percent-encodings (upper- and lower-case hex, and a form body's `+` for a
--- space) where they differ from v.
---@param v string
---@return string[]
function secrets.forms(v)
  local b64 = require('cseng.crypto').base64
  local out, have = {}, {}
  local function put(f)
    if #f > 5 and not have[f] then have[f] = true; out[#out + 1] = f end
  end
  put(v)
  local full = b64(v)
  put(full); put(url_safe(full))
  for a = 0, 2 do
    local enc = b64(string.rep('\0', a) .. v)
    -- character j (from 0) holds bits 6j .. 6j+5 of the encoded bytes; v's are 8a .. 8(a+#v)-1
    local core = enc:sub((8 * a + 5) // 6 + 1, (8 * (a + #v)) // 6)
    put(core); put(url_safe(core))
  end
  local upper = v:gsub('[^%w%-%._~]', function(c) return string.format('%%%02X', c:byte()) end)
  put(upper)
  put((upper:gsub('%%(%x%x)', function(h) return '%' .. h:lower() end)))
  put((v:gsub('[^%w%-%._~ ]', function(c) return string.format('%%%02X', c:byte()) end):gsub(' ', '+')))
  return out
end

local function add(v)
  for _, f in ipairs(secrets.forms(v)) do
    if not seen[f] then
      seen[f] = true
      whole[#whole + 1] = f
      require('cseng.redact').add(f, false)
    end
  end
  require('cseng.redact').add(v, true) -- and its FRAG-byte runs
  for i = 1, #v - FRAG + 1 do frags[v:sub(i, i + FRAG - 1)] = true end
end

local function secret_values()
  if whole then return whole end
  whole, frags, seen = {}, {}, {}
  require('cseng.redact').clear()
  local env = require('cseng.sys').environ()
  for k, v in pairs(env) do
    if secrets.is_name(k) and #v > 5 and v:sub(1, 1) ~= '/' then add(v) end
  end
  for _, v in ipairs(extra_secrets) do add(v) end
  return whole
end

--- Read the environment's secrets now (they are read at the first redaction otherwise): the C
--- side's diagnostics hide them from the start.
function secrets.load() secret_values() end

--- Register a secret value (a provider's token, a credential): secrets.redact hides it, its
--- encoded forms, and every run of 8 or more of its bytes, from then on (the C side too).
---@param v any strings of 6 or more bytes count
function secrets.add(v)
  if type(v) == 'string' and #v > 5 then
    extra_secrets[#extra_secrets + 1] = v
    if whole then add(v) else secret_values() end
  end
end

--- Rebuild the secret list (after --env-file loads new variables).
function secrets.reset()
  whole = nil
  secret_values()
end

--- Replace every secret value in s (and its encoded forms, secrets.forms), and every run of 8
--- or more bytes of one, by [redacted].
--- Call it before cutting a string to a snippet or a tail (a cut secret is still a secret).
--- Cost: one plain search per distinct 8-byte fragment of the secrets (C speed), then one pass
--- to splice the marked ranges.
---@param s any a string (anything else is returned as it is)
---@return any
function secrets.redact(s)
  if type(s) ~= 'string' or #s < 6 then return s end
  local list = secret_values()
  if #list == 0 then return s end
  local ranges = {}
  for _, v in ipairs(list) do -- whole values (also the short ones, below FRAG bytes)
    local i = 1
    while true do
      local a, b = s:find(v, i, true)
      if not a then break end
      ranges[#ranges + 1] = { a, b }
      i = b + 1
    end
  end
  if #s >= FRAG then
    for f in pairs(frags) do
      local i = 1
      while true do
        local a = s:find(f, i, true)
        if not a then break end
        ranges[#ranges + 1] = { a, a + FRAG - 1 }
        i = a + 1
      end
    end
  end
  if #ranges == 0 then return s end
  table.sort(ranges, function(x, y) return x[1] < y[1] end)
  local out, pos = {}, 1
  local ca, cb = ranges[1][1], ranges[1][2]
  for k = 2, #ranges + 1 do
    local r = ranges[k]
    if r and r[1] <= cb + 1 then
      if r[2] > cb then cb = r[2] end
    else
      out[#out + 1] = s:sub(pos, ca - 1)
      out[#out + 1] = '[redacted]'
      pos = cb + 1
      if r then ca, cb = r[1], r[2] end
    end
  end
  out[#out + 1] = s:sub(pos)
  return table.concat(out)
end

--- Redact every string inside a table (a copy).
function secrets.redact_all(v)
  if type(v) == 'string' then return secrets.redact(v) end
  if type(v) ~= 'table' then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = secrets.redact_all(x) end
  return setmetatable(out, getmetatable(v))
end

return secrets
