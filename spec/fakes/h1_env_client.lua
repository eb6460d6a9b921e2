-- For spec/engine/http_native_spec.lua: one request to URL from a process started with a given
-- environment (CSENG_HTTP=curl, a proxy variable), as `cseng lua spec/fakes/h1_env_client.lua URL
-- [VERSION CA]` (over TLS: the http_version asked for, the CA file trusted).
-- Prints "enabled<TAB>native requests<TAB>status or error code<TAB>body".
local http = require('cseng.http')
local r, _, code = http.request { url = arg[1], timeout = 10, http_version = arg[2] ~= '' and arg[2] or nil,
  ca_file = arg[3] }
local st = http.stats().native
print(table.concat({ tostring(st.enabled), tostring(st.requests), tostring(r and r.status or code),
  tostring(r and r.body) }, '\t'))
return 0
