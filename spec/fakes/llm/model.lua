--- The scripted model behind `cseng fake llm`: one loopback server that answers the three APIs
--- cseng's solvers speak, with one script. Chat completions (the openrouter and ai_gateway
--- solvers: /api/v1/chat/completions, /v1/chat/completions; spec/fakes/llm/fake.lua), Responses
--- (codex: /v1/responses; responses.lua), Messages (claude_code: /v1/messages; messages.lua),
--- streamed chat completions of a coding CLI (opencode: /opencode/v1/chat/completions;
--- chat_stream.lua) and Gemini's generateContent (gemini_cli: /v1beta/models/...; gemini.lua).
---
--- The script replays gold solutions: it finds the task whose instruction the prompt holds among
--- the tasks of a dataset (default data/smoke.jsonl, the bundled tasks), writes that task's
--- solution/ to /solution in the sandbox with one shell call (where the gold solver puts it),
--- runs solve.sh with a second, then answers "Done.". A prompt that holds no known instruction, or a task without a solution, gets a plain
--- answer and no command, so that trial fails: the model knows exactly what the dataset gives.
---
---   local m = require 'spec.fakes.llm.model'
---   local f = m.start { port = 0 }        -- or dataset = 'path', api_key =, model =
---   f.env()   --> OPENROUTER_*, AI_GATEWAY_*, OPENAI_API_KEY and CODEX_*, ANTHROPIC_* and CLAUDE_CODE_MODEL
---   f.stats() --> { chat = ..., responses = ..., messages = ... } (each fake's counters)
---   f.close()
local serve = require('cseng.serve')
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local crypto = require('cseng.crypto')
local archive = require('cseng.archive')

local M = {}

M.MODEL = 'cseng-fake/gold-replay'

--- The script shared by the three APIs: conv.user is the prompt, conv.turn counts from 1.
---@param tasks table[] dataset.load's tasks
---@param where string the dataset's path (for the answer to an unknown prompt)
---@return fun(conv: table): table
function M.gold_script(tasks, where)
  local by_prompt = {}
  local function task_in(text)
    local known = by_prompt[text]
    if known ~= nil then return known or nil end
    local found = false
    for _, t in ipairs(tasks) do
      if type(t.instruction) == 'string' and t.instruction ~= '' and text:find(t.instruction, 1, true) then
        found = t
        break
      end
    end
    by_prompt[text] = found
    return found or nil
  end
  return function(conv)
    local t = task_in(conv.user or '')
    if not t then
      return { content = 'cseng fake llm replays the gold solutions of ' .. where ..
        ' and this prompt holds none of its tasks\' instructions: no command.' }
    end
    if not (t.dir and fs.exists(t.dir .. '/solution/solve.sh')) then
      return { content = 'cseng fake llm: task ' .. t.id .. ' has no gold solution to replay.' }
    end
    -- solution/ where the gold solver puts it (a solve.sh may read its files from /solution)
    local tar = assert(archive.pack_dir(t.dir .. '/solution', { format = 'tar' }))
    local b64 = crypto.base64(tar):gsub(('.'):rep(76), '%0\n')
    local cmds = {
      "mkdir -p /solution && base64 -d <<'CSENG_REPLAY_EOF' | tar -x -C /solution\n" .. b64 .. '\nCSENG_REPLAY_EOF',
      'bash /solution/solve.sh && echo replayed',
    }
    local c = cmds[conv.turn]
    if c then return { tool_calls = { { command = c } } } end
    return { content = 'Done.' }
  end
end

--- Start the model on 127.0.0.1. o: port (default an ephemeral one), dataset (default
--- data/smoke.jsonl), api_key (default a random sk-… key), model (default M.MODEL).
---@param o? table
---@return table f {url, port, api_key, model, env(), stats(), close()}
function M.start(o)
  o = o or {}
  local where = o.dataset or (sys.root() .. '/data/smoke.jsonl')
  local tasks = require('cseng.workload.dataset').load(where)
  -- a key that shares no 8 characters with the model's name: the redactor hides every such run
  local key = o.api_key or ('sk-' .. crypto.hex(crypto.random_bytes(24)))
  local model = o.model or M.MODEL
  local script = M.gold_script(tasks, where)
  local opts = { api_key = key, model = model, script = script }
  local chat = require('spec.fakes.llm.fake').new(opts)
  local responses = require('spec.fakes.llm.responses').new(opts)
  local messages = require('spec.fakes.llm.messages').new(opts)
  local chat_stream = require('spec.fakes.llm.chat_stream').new(opts)
  -- Gemini names a model in the URL's path: one without a slash
  local gemini_model = model:gsub('/', '-')
  local gemini = require('spec.fakes.llm.gemini').new { api_key = key, model = gemini_model, script = script }
  local srv = assert(serve.listen { host = '127.0.0.1', port = o.port or 0, handler = function(req)
    if req.path == '/v1/responses' then return responses.handler(req) end
    if req.path == '/v1/messages' then return messages.handler(req) end
    if req.path:match('^/v1beta/models/') then return gemini.handler(req) end
    -- a coding CLI's chat completions (OpenCode: streamed, many tools) under their own prefix
    if req.path:match('^/opencode/') then return chat_stream.handler(req) end
    return chat.handler(req) -- chat completions, and the 404 of any other path
  end })
  local url = srv:url()
  local f = { url = url, port = srv:port(), api_key = key, model = model, tasks = #tasks, dataset = where }

  --- The environment of a run of any LLM solver against the model.
  function f.env()
    return {
      OPENROUTER_BASE_URL = url .. '/api/v1', OPENROUTER_API_KEY = key, OPENROUTER_MODEL = model,
      AI_GATEWAY_BASE_URL = url .. '/v1', AI_GATEWAY_API_KEY = key, AI_GATEWAY_MODEL = model,
      CODEX_BASE_URL = url .. '/v1', OPENAI_API_KEY = key, CODEX_MODEL = model,
      ANTHROPIC_BASE_URL = url, ANTHROPIC_API_KEY = key, CLAUDE_CODE_MODEL = model,
      OPENCODE_BASE_URL = url .. '/opencode/v1', OPENCODE_API_KEY = key, OPENCODE_MODEL = model,
      GOOGLE_GEMINI_BASE_URL = url, GEMINI_API_KEY = key, GEMINI_MODEL = gemini_model,
    }
  end

  function f.stats()
    return { chat = chat.stats(), responses = responses.stats(), messages = messages.stats(), chat_stream = chat_stream.stats(),
      gemini = gemini.stats() }
  end

  function f.close()
    chat.close()
    responses.close()
    messages.close()
    chat_stream.close()
    gemini.close()
    srv:close()
  end
  return f
end

return M
