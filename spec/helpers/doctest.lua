--- The doc-test's machinery (spec/docs/doctest_spec.lua: README.md, ARENA.md, the --help options;
--- spec/docs/plans_spec.lua: PLANS.md, HARBOR.md; spec/docs/providers_spec.lua: docs/providers/*.md).
--- Every command in a fenced `sh` block of README.md, docs/PLANS.md, docs/HARBOR.md,
--- docs/ARENA.md and docs/providers/*.md runs and exits as documented, or is marked as needing what a spec cannot
--- have; and every option of every `cseng <command> --help` appears in the docs.
--
-- The rules (docs/PLANS.md, "Commands in the docs are tested"):
--   * a line (with its `\` continuations) is a command; a trailing `# ...` is its comment;
--   * `# needs: WHAT` in the comment (or as the block's first line, for the whole block) marks
--     a command that is not run: real credentials, docker, a long run, a file of the reader's;
--   * `exit N` in the comment is the documented exit status (default 0);
--   * an unmarked command must be `./cseng ...` (run with the checkout's binary) or `kill %N`
--     (SIGTERM to the N-th background command of the block); a trailing `&` runs it in the
--     background (`cseng fake`: the next commands wait until its --env-file exists);
--   * each document runs in a fresh temporary folder holding links to the checkout (plans, lua,
--     spec, build, docs) and a copy of data/, with ../shared beside it, so results/ and files
--     written by the commands land there;
--   * bounded: a tasks run gets `--task-limit 1` unless it selects tasks itself, a startup run
--     `--samples 3 --warmups 0` (after the documented flags, so they win), every run
--     `--build-network off` (no network beyond loopback in a spec) and a 240 s timeout;
--   * `<...>` in an argument is a placeholder: the newest existing path matching it with `*`.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')

local ROOT = sys.root()
local DOCT = {}

--- The fenced sh blocks of a markdown text: { {line = N, lines = { {n, text}, ... }} }.
function DOCT.blocks(text)
  local out, cur, n = {}, nil, 0
  for line in (text .. '\n'):gmatch('([^\n]*)\n') do
    n = n + 1
    if cur then
      if line:match('^%s*```') then out[#out + 1] = cur; cur = nil else cur.lines[#cur.lines + 1] = { n, line } end
    elseif line:match('^%s*```sh%s*$') then
      cur = { line = n, lines = {} }
    end
  end
  return out
end

-- Split "cmd # comment" at the first # outside quotes that starts a word.
local function split_comment(s)
  local q
  for i = 1, #s do
    local c = s:sub(i, i)
    if q then
      if c == q then q = nil end
    elseif c == "'" or c == '"' then
      q = c
    elseif c == '#' and (i == 1 or s:sub(i - 1, i - 1):match('%s')) then
      return s:sub(1, i - 1), s:sub(i + 1)
    end
  end
  return s, ''
end

--- Shell words: '...' literal, "..." with \" and \\, backslash escapes outside quotes.
function DOCT.words(s)
  local out, cur, i, have = {}, {}, 1, false
  while i <= #s do
    local c = s:sub(i, i)
    if c == "'" then
      local j = s:find("'", i + 1, true) or (#s + 1)
      cur[#cur + 1] = s:sub(i + 1, j - 1); i = j; have = true
    elseif c == '"' then
      local j = i + 1
      while j <= #s and s:sub(j, j) ~= '"' do
        if s:sub(j, j) == '\\' then j = j + 1 end
        cur[#cur + 1] = s:sub(j, j); j = j + 1
      end
      i = j; have = true
    elseif c == '\\' then
      cur[#cur + 1] = s:sub(i + 1, i + 1); i = i + 1; have = true
    elseif c:match('%s') then
      if have then out[#out + 1] = table.concat(cur); cur, have = {}, false end
    else
      cur[#cur + 1] = c; have = true
    end
    i = i + 1
  end
  if have then out[#out + 1] = table.concat(cur) end
  return out
end

--- The commands of a block: { {line, text, argv, needs, exit, background} }.
function DOCT.commands(block)
  local out, block_needs = {}, nil
  local pending, first, pending_comment = nil, nil, nil
  for i, l in ipairs(block.lines) do
    local n, text = l[1], l[2]
    if i == 1 and text:match('^%s*#%s*needs:') then
      block_needs = text:match('needs:%s*(.-)%s*$')
    elseif pending or text:match('%S') and not text:match('^%s*#') then
      local cmd, comment = split_comment(text)
      local cont = cmd:match('\\%s*$')
      if cont then cmd = cmd:gsub('\\%s*$', '') end
      pending = (pending and (pending .. ' ') or '') .. cmd
      first = first or n
      if comment ~= '' then pending_comment = (pending_comment or '') .. ' ' .. comment end
      if not cont then
        local c = pending_comment or ''
        local bg = pending:match('&%s*$') ~= nil
        local line = pending:gsub('&%s*$', ''):gsub('^%s+', ''):gsub('%s+$', '')
        out[#out + 1] = { line = first, text = line, argv = DOCT.words(line), background = bg,
          needs = block_needs or c:match('needs:%s*([^#]-)%s*$'), exit = tonumber(c:match('exit (%d+)')) or 0 }
        pending, first, pending_comment = nil, nil, nil
      end
    end
  end
  return out
end

local function newest(pattern)
  local dir, name = pattern:match('^(.-)/?([^/]*)$')
  if dir == '' then dir = '.' end
  local pat = '^' .. name:gsub('[%^%$%(%)%%%.%[%]%+%-%?]', '%%%0'):gsub('%*', '.*') .. '$'
  local best, best_t
  for _, f in ipairs(fs.list(dir) or {}) do
    if f:match(pat) then
      local st = fs.stat(dir .. '/' .. f)
      if st and (not best_t or st.mtime > best_t) then best, best_t = (dir == '.' and f or (dir .. '/' .. f)), st.mtime end
    end
  end
  return best
end

local function has(argv, ...)
  for _, a in ipairs(argv) do
    for _, f in ipairs({ ... }) do if a == f or a:sub(1, #f + 1) == f .. '=' then return true end end
  end
  return false
end

--- The argv a spec runs for a documented command (bounded, placeholders resolved), in cwd.
function DOCT.bounded(argv, cwd)
  local out = {}
  for i, a in ipairs(argv) do
    if a:find('<[%w%-_]+>') then
      local pat = a:gsub('<[%w%-_]+>', '*')
      local abs = pat:sub(1, 1) == '/' and pat or (cwd .. '/' .. pat)
      local found = newest(abs)
      if not found then return nil, 'no path matches the placeholder ' .. a end
      a = found
    end
    out[i] = a
  end
  if out[2] == 'run' then
    local startup = false
    for _, a in ipairs(out) do if a:match('plans/startup%.lua$') then startup = true end end
    if startup then
      for _, a in ipairs({ '--samples', '3', '--warmups', '0' }) do out[#out + 1] = a end
    elseif not has(out, '--task-index', '--task-limit', '--tasks') then
      out[#out + 1] = '--task-limit'; out[#out + 1] = '1'
    end
    out[#out + 1] = '--build-network'; out[#out + 1] = 'off'
    if not has(out, '--quiet') then out[#out + 1] = '--quiet' end
  end
  return out
end

--- The provider pages (docs/providers/*.md), sorted.
function DOCT.provider_pages()
  local out = {}
  for _, f in ipairs(fs.list(ROOT .. '/docs/providers') or {}) do
    if f:match('%.md$') then out[#out + 1] = 'docs/providers/' .. f end
  end
  table.sort(out)
  return out
end

local tmp -- the temporary folder of this process's doc runs (DOCT.open / DOCT.close)
function DOCT.open() tmp = assert(fs.tempdir('cseng-doctest-')); return tmp end
function DOCT.close() fs.remove_tree(tmp) end

-- A fresh working folder for one document: links to the checkout, a copy of data/, ../shared.
function DOCT.workdir(name)
  local w = tmp .. '/' .. name:gsub('[^%w]', '_')
  local d = w .. '/checkout'
  assert(fs.mkdir_p(d))
  for _, l in ipairs({ 'cseng', 'plans', 'lua', 'spec', 'build', 'docs', 'Makefile' }) do
    assert(fs.symlink(ROOT .. '/' .. l, d .. '/' .. l))
  end
  local r = assert(proc.run { argv = { 'cp', '-a', ROOT .. '/data', d .. '/data' }, timeout = 60 })
  assert(r.code == 0, r.stderr)
  for _, s in ipairs({ ROOT .. '/../shared', ROOT .. '/../../shared' }) do
    if fs.exists(s .. '/data') then assert(fs.symlink(sys.realpath(s), w .. '/shared')); break end
  end
  return d
end

-- Run the commands of one document; returns the failures (one line each) and the counts.
function DOCT.run_doc(doc, o)
  o = o or {}
  local text = o.text or assert(fs.read(ROOT .. '/' .. doc))
  local failures, ran, marked = {}, 0, 0
  local cwd = o.cwd or DOCT.workdir(doc)
  for _, b in ipairs(DOCT.blocks(text)) do
    local jobs = {}
    for _, c in ipairs(DOCT.commands(b)) do
      local where = doc .. ':' .. c.line .. ': ' .. c.text
      if c.needs then
        marked = marked + 1
      elseif c.argv[1] == 'kill' and c.argv[2] and c.argv[2]:match('^%%%d+$') then
        local j = jobs[tonumber(c.argv[2]:sub(2))]
        if not j then failures[#failures + 1] = where .. ': no such background job' else
          j.p:kill('TERM')
          local e = j.p:wait(60)
          j.p:close()
          if not e then failures[#failures + 1] = where .. ': the job did not stop within 60 s' end
          if j.env_file and fs.exists(cwd .. '/' .. j.env_file) then failures[#failures + 1] = where .. ': its --env-file is left' end
          if j.tmp and #(fs.list(j.tmp) or {}) > 0 then
            failures[#failures + 1] = where .. ': left in TMPDIR: ' .. table.concat(fs.list(j.tmp), ' ')
          end
          jobs[tonumber(c.argv[2]:sub(2))] = false
        end
        ran = ran + 1
      elseif c.argv[1] ~= './cseng' then
        failures[#failures + 1] = where .. ': not a ./cseng command and not marked "# needs: ..."'
      else
        local argv, err = DOCT.bounded(c.argv, cwd)
        if not argv then
          failures[#failures + 1] = where .. ': ' .. err
        elseif c.background then
          local jt = cwd .. '/../tmp-job' .. (#jobs + 1)
          assert(fs.mkdir_p(jt))
          local p = assert(proc.spawn { argv = argv, cwd = cwd, env_add = { TMPDIR = jt },
            stdout = jt .. '.out', stderr = jt .. '.err' })
          local env_file
          for i, a in ipairs(argv) do if a == '--env-file' then env_file = argv[i + 1] end end
          jobs[#jobs + 1] = { p = p, env_file = env_file, tmp = jt }
          if env_file then
            for _ = 1, 600 do
              if fs.exists(cwd .. '/' .. env_file) or p:wait(0.05) then break end
            end
            if not fs.exists(cwd .. '/' .. env_file) then
              failures[#failures + 1] = where .. ': ' .. env_file .. ' never appeared: ' .. tostring(fs.read(jt .. '.err'))
            end
          end
          ran = ran + 1
        else
          local r = proc.run { argv = argv, cwd = cwd, timeout = o.timeout or 240, tail_bytes = 8192 }
          ran = ran + 1
          if os.getenv('CSENG_DOCTEST_TRACE') and r then
            io.stderr:write(string.format('doctest: %6.1f s  exit %d  %s\n', r.elapsed, r.code, where))
          end
          if not r then failures[#failures + 1] = where .. ': did not run'
          elseif r.timed_out then failures[#failures + 1] = where .. ': timed out'
          elseif r.code ~= c.exit then
            failures[#failures + 1] = string.format('%s: exit %d, documented %d: %s', where, r.code, c.exit,
              (r.stderr:match('[^\n]+') or r.stdout:match('[^\n]+') or ''))
          end
        end
      end
    end
    for i, j in ipairs(jobs) do
      if j then
        j.p:close()
        failures[#failures + 1] = doc .. ':' .. b.line .. ': background job ' .. i .. ' never stopped by a `kill %' .. i .. '`'
      end
    end
  end
  return failures, ran, marked
end

--- One busted test per document: every command of its sh blocks as documented, or marked. bt:
--- the spec file's busted functions {describe = describe, it = it} (they are not globals here).
function DOCT.describe_docs(bt, title, docs)
  local describe, it = bt.describe, bt.it
  describe(title, function()
    for _, doc in ipairs(docs) do
      it(doc, function()
        local failures = DOCT.run_doc(doc)
        if #failures > 0 then error(#failures .. ' documented command(s) misbehave:\n' .. table.concat(failures, '\n'), 0) end
      end)
    end
  end)
end

return DOCT
