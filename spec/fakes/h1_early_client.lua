-- The client side of spec/engine/http_native_spec.lua's "answered before its body was sent" case, run
-- as its own process (`cseng lua spec/fakes/h1_early_client.lua BASE native|curl [VERSION CA]`:
-- over TLS, the http_version asked for and the CA file trusted) so that a
-- crash of the engine fails that case, not the whole spec file. Prints one line a request:
-- "name<TAB>status<TAB>body<TAB>x-conn<TAB>code" (three rounds), then "done<TAB>native requests".
io.stdout:setvbuf('no')
local http = require('cseng.http')
local base, mode = arg[1], arg[2]
local version = arg[3] ~= '' and arg[3] or nil
http.configure { native = mode == 'native', ca_file = arg[4] }
local function show(name, r, _, code)
  print(table.concat({ name, tostring(r and r.status), tostring(r and r.body), tostring(r and r.headers['x-conn']),
    tostring(code) }, '\t'))
end
for _ = 1, 3 do -- three rounds: the native path's failure here depends on timing
  show('early', http.request { url = base .. '/early', method = 'POST', body = string.rep('z', 16 * 1024 * 1024),
    timeout = 10, http_version = version })
  for i = 1, 3 do show('next' .. i, http.request { url = base .. '/cl', timeout = 10, http_version = version }) end
end
print('done', http.stats().native.requests)
return 0
