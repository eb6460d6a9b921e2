--- `cseng fake PROVIDER [--port P] [--env-file FILE]`: start a bundled loopback fake of a provider
--- (spec/providers/<vendor>/fake.lua, listed in spec/fakes/init.lua), or `cseng fake llm`, the
--- scripted model of the LLM solvers (spec/fakes/llm/model.lua), on its own, print the
--- environment that points cseng at it, serve until SIGINT or SIGTERM, then stop it: its
--- sandboxes destroyed, its temporary files (and --env-file) removed.
local fs = require('cseng.fs')
local task = require('cseng.task')
local flags = require('cseng.lib.flags')
local command = require('cseng.cli.command')
local errors = require('cseng.lib.errors')
local util = require('cseng.lib.util')

-- the fakes live in the checkout beside their specs (spec/fakes/init.lua lists them)
local function fakes()
  require('cseng.cli.commands.test').use_checkout()
  return require 'spec.fakes'
end

local cmd = command {
  name = 'fake',
  summary = 'start a bundled loopback fake of a provider and print the environment that points cseng at it',
  usage = 'usage: cseng fake PROVIDER [--port P] [--env-file FILE]\n' ..
    '       cseng fake llm [--port P] [--env-file FILE] [--dataset PATH]\n\n' ..
    'Starts the fake of PROVIDER (one of: ' .. table.concat(fakes().names(), ', ') .. ') on 127.0.0.1, prints\n' ..
    'the `export` lines of a run against it, and serves until Ctrl-C or SIGTERM (exit 0), when its\n' ..
    'sandboxes and temporary files are removed. Sandboxes of the fakes really run their commands\n' ..
    '(containers of the local provider on the Debian base root filesystem). docs/providers/*.md show it.\n' ..
    '`llm` is a scripted model for the LLM solvers (openrouter, ai_gateway: chat completions; codex:\n' ..
    'Responses; claude_code: Messages) that replays the gold solution of the task a prompt names\n' ..
    '(docs/SOLVERS.md): with its exports, `cseng run plans/solve-llm.lua` runs offline.',
  flags = {
    { 'port', 'int', min = 0, arg = 'P', help = "the API's port on 127.0.0.1 (default: a free one)" },
    { 'env-file', 'string', arg = 'FILE',
      help = 'also write the environment to FILE (KEY=VALUE lines, for --env-file; removed when the fake stops)' },
    { 'dataset', 'string', arg = 'PATH',
      help = 'llm: the tasks whose gold solutions the model replays (default data/smoke.jsonl)' },
  },
}

--- The environment lines of f, sorted: {"K=V", ...}.
local function env_lines(f)
  local env, keys = f.env(), {}
  for k in pairs(env) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = { k = k, v = tostring(env[k]) } end
  return out
end

function cmd.main(f, pos)
  local F = fakes()
  local name = pos[1]
  if not name then io.stderr:write('cseng: fake: which provider? one of ', table.concat(F.names(), ', '), '\n'); return 2 end
  if #pos > 1 then io.stderr:write("cseng: fake: unexpected argument '", pos[2], "' (see cseng fake --help)\n"); return 2 end
  if not F.FAKES[name] then
    local near = flags.closest(name, F.names())
    io.stderr:write("cseng: fake: no fake for '", name, "'", near and ('; did you mean ' .. near .. '?') or '',
      ' (fakes: ', table.concat(F.names(), ', '), ')\n')
    return 2
  end
  if f.dataset and name ~= 'llm' then
    io.stderr:write('cseng: fake: --dataset is for cseng fake llm (see cseng fake --help)\n')
    return 2
  end
  if f.dataset and not fs.exists(f.dataset) then
    io.stderr:write('cseng: fake: --dataset ', f.dataset, ': no such file or directory\n')
    return 2
  end
  local fk, err = F.start(name, { port = f.port, dataset = f.dataset })
  if not fk then io.stderr:write('cseng: fake: ', tostring(err), '\n'); return 1 end
  local lines = env_lines(fk)
  local status = 0
  local ok, e = pcall(function()
    if f.env_file then
      local text = {}
      for i, l in ipairs(lines) do text[i] = l.k .. '=' .. l.v end
      assert(fs.write(f.env_file, table.concat(text, '\n') .. '\n'))
    end
    io.stdout:write('# the ', name, ' fake (', F.FAKES[name].dir, '/) serves ', tostring(fk.url), '\n')
    if name == 'llm' then
      io.stdout:write('# a scripted model (', fk.model, '): it replays the gold solutions of the ', tostring(fk.tasks),
        ' tasks of ', fk.dataset, '\n')
    end
    io.stdout:write('# export this environment (or pass --env-file) and run cseng against it; Ctrl-C or SIGTERM stops it\n')
    for _, l in ipairs(lines) do io.stdout:write('export ', l.k, '=', util.shell_quote(l.v), '\n') end
    io.stdout:flush()
    while true do task.sleep(3600) end
  end)
  if not ok and not errors.is_cancel(e) then
    io.stderr:write('cseng: fake: ', errors.line(e), '\n')
    status = 1
  end
  -- stopping: every sandbox destroyed, the fake's temporary files removed (a cancellation was
  -- delivered once, so the cleanup's own waits run)
  local cok, cerr = pcall(fk.close)
  if f.env_file then fs.remove(f.env_file) end
  if not cok then io.stderr:write('cseng: fake: stopping: ', tostring(cerr), '\n'); status = 1 end
  if status == 0 then io.stderr:write('cseng: fake: ', name, ' stopped\n') end
  return status
end

return cmd
