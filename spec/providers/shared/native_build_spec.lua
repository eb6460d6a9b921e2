-- Native builds of the task's recipe on the vendors that have them (daytona, runloop,
-- e2b, modal), end to end:
-- `cseng run --provider P` against the provider's fake, on the bundled tasks whose tests pass
-- only if their Dockerfile's RUN steps ran (data/tasks/build-*, found in data/smoke.jsonl).
-- The fakes build for real (the Dockerfile's steps in a fresh sandbox, from the context they
-- received) and the specs check what they received: the full Dockerfile (FROM set to the
-- recipe's base) and every COPY source's files; the record says native_build with the content
-- key and a build phase, then cached_layer on a second run; no RUN step was replayed in the
-- trial's sandbox; nop scores 0.
local fs = require('cseng.fs')
local crypto = require('cseng.crypto')
local jsonl = require('cseng.lib.jsonl')

local vendor = require('spec.helpers.vendor')

-- The build-* tasks of data/smoke.jsonl (counted from the dataset).
local function build_tasks()
  local out = {}
  for line in assert(fs.read(vendor.ROOT .. '/data/smoke.jsonl')):gmatch('[^\n]+') do
    local id = jsonl.decode(line).task_id
    if id:match('^build%-') then out[#out + 1] = id end
  end
  table.sort(out)
  return out
end

local function task_dir(id) return vendor.ROOT .. '/data/tasks/' .. id .. '/environment' end

-- The Dockerfile's lines without its FROM lines, and its RUN commands' first words.
local function without_from(text)
  local out = {}
  for l in text:gmatch('([^\n]*)\n?') do
    if not l:match('^%s*[Ff][Rr][Oo][Mm]%s') then out[#out + 1] = l end
  end
  while out[#out] == '' do out[#out] = nil end
  return table.concat(out, '\n')
end

-- Every file a COPY line of the Dockerfile names, relative to environment/ (directories walked).
local function copy_files(id)
  local dir, files = task_dir(id), {}
  for l in assert(fs.read(dir .. '/Dockerfile')):gmatch('[^\n]+') do
    local rest = l:match('^%s*COPY%s+(.*)$') or l:match('^%s*ADD%s+(.*)$')
    if rest then
      local words = {}
      for w in rest:gmatch('%S+') do if not w:match('^%-%-') then words[#words + 1] = w end end
      for i = 1, #words - 1 do
        local src = words[i]:gsub('^%./', ''):gsub('/+$', '')
        local st = fs.stat(dir .. '/' .. src)
        if st and st.type == 'dir' then
          for _, e in ipairs(fs.walk(dir .. '/' .. src)) do
            if e.type ~= 'dir' then files[#files + 1] = src .. '/' .. e.path end
          end
        else
          files[#files + 1] = src
        end
      end
    end
  end
  table.sort(files)
  return files
end

-- The RUN commands of a task's Dockerfile (joined continuation lines).
local function run_commands(id)
  local text = assert(fs.read(task_dir(id) .. '/Dockerfile')):gsub('\\\n', ' ')
  local out = {}
  for l in text:gmatch('[^\n]+') do
    local c = l:match('^%s*RUN%s+(.*)$')
    if c then out[#out + 1] = c end
  end
  return out
end

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- Runs every build-* task cold with gold (native build), again (cache hit), then with nop.
-- o: {fake, provider, unset, builds = fn(stats) -> list of build bodies,
--     check_build = fn(f, task_id, rec, stats) (the provider's own checks of what it received),
--     sandbox_commands = fn(stats) -> the commands the trial sandboxes ran (decoded)}
local function native_suite(o)
  local runner = vendor.runner(o.fake, o.provider, o.unset)
  local tasks = build_tasks()

  setup(function() runner.start() end)
  teardown(function() runner.stop() end)

  it('finds the bundled tasks that need their Dockerfile', function()
    assert.is_true(#tasks >= 4, table.concat(tasks, ' '))
  end)

  it('builds each build-* task natively (full Dockerfile and context received), passes with gold, hits the cache next time, nop scores 0', function()
    for _, id in ipairs(tasks) do
      local i = vendor.smoke_index(id)
      local args = { '--env-file', runner.env_file(), '--task-index', tostring(i), '--task-limit', '1' }
      local before = runner.f.stats()
      local r, summary = runner.run(args)
      assert.equal(0, r.code, r.stderr .. r.stdout .. jsonl.encode(summary or {}))
      local rec = summary.results[1]
      assert.equal(id, rec.task_id)
      assert.equal(1, summary.passed, id .. ': ' .. jsonl.encode(rec))
      local env = rec.environment
      assert.equal('native', env.mode, id)
      assert.equal('native_build', env.method, id)
      assert.is_false(env.cache_hit)
      assert.equal(64, #env.content_key)
      assert.is_number(rec.phases.build_seconds)
      local s = runner.f.stats()
      assert.equal(1, #o.builds(s) - #o.builds(before), id .. ': one build')
      o.check_build(runner.f, id, rec, s)
      -- the trial's sandbox did not replay: none of the RUN commands ran there
      local cmds = o.sandbox_commands(s, before)
      assert.is_true(#cmds > 0, id .. ': the trial ran commands')
      for _, run in ipairs(run_commands(id)) do
        for _, c in ipairs(cmds) do
          assert.is_nil(c:find(run, 1, true), id .. ': RUN replayed in the sandbox: ' .. run)
        end
      end
      assert.equal(0, s.live)

      -- the same content again: the built artifact is found, nothing is built
      local r2, summary2 = runner.run(args)
      assert.equal(0, r2.code, r2.stderr .. r2.stdout)
      local rec2 = summary2.results[1]
      assert.equal(1, summary2.passed, id .. ': ' .. jsonl.encode(rec2))
      assert.equal('cached_layer', rec2.environment.method)
      assert.is_true(rec2.environment.cache_hit)
      assert.equal(env.content_key, rec2.environment.content_key)
      assert.equal(#o.builds(s), #o.builds(runner.f.stats()), id .. ': no second build')

      local r3, summary3 = runner.run { '--env-file', runner.env_file(), '--task-index', tostring(i), '--task-limit', '1',
        '--solver', 'nop' }
      assert.equal(0, r3.code, r3.stderr)
      assert.equal(0, summary3.passed, id)
      assert.equal(0, runner.f.stats().live)
    end
  end)
end

-- The base64 words of Daytona toolbox commands, decoded (what the command really ran).
local function daytona_commands(s, before)
  local out = {}
  for i = #before.exec_bodies + 1, #s.exec_bodies do
    for b in s.exec_bodies[i].command:gmatch('echo (%S+) | base64 %-d') do
      out[#out + 1] = crypto.unbase64(b) or ''
    end
  end
  return out
end

describe('daytona native builds (snapshots from buildInfo)', function()
  native_suite {
    fake = require('spec.fakes').module('daytona'), provider = 'daytona',
    unset = { DAYTONA_API_KEY = false, DAYTONA_API_URL = false, DAYTONA_SNAPSHOT = false },
    builds = function(s) return s.build_bodies end,
    sandbox_commands = daytona_commands,
    check_build = function(_, id, rec, s)
      local body = s.build_bodies[#s.build_bodies]
      assert.equal('cseng-' .. rec.environment.content_key:sub(1, 16), body.name)
      local df = body.buildInfo.dockerfileContent
      local want = assert(fs.read(task_dir(id) .. '/Dockerfile'))
      -- the full Dockerfile, its FROM set to the recipe's base
      assert.equal(without_from(want), without_from(df))
      assert.truthy(df:find('FROM ' .. rec.image .. '\n', 1, true), df)
      -- every COPY source's files arrived through the uploaded contexts, and the trial started
      -- from the snapshot
      local got = s.build_contexts[body.name]
      for _, p in ipairs(copy_files(id)) do assert.is_true(has(got, p), id .. ': ' .. p .. ' not in the context') end
      assert.equal(body.name, s.last_create.snapshot)
      assert.is_nil(s.last_create.buildInfo)
      assert.equal(0, s.s3_refused)
    end,
  }
end)

describe('runloop native builds (blueprints from a Dockerfile and a build context object)', function()
  native_suite {
    fake = require('spec.fakes').module('runloop'), provider = 'runloop',
    unset = { RUNLOOP_API_KEY = false, RUNLOOP_BASE_URL = false, RUNLOOP_BLUEPRINT_ID = false, RUNLOOP_BLUEPRINT_NAME = false,
              RUNLOOP_SNAPSHOT_ID = false },
    builds = function(s) return s.build_bodies end,
    sandbox_commands = function(s, before)
      local out = {}
      for i = #before.exec_bodies + 1, #s.exec_bodies do out[#out + 1] = s.exec_bodies[i].command end
      return out
    end,
    check_build = function(_, id, rec, s)
      local body = s.build_bodies[#s.build_bodies]
      assert.equal('cseng-' .. rec.environment.content_key:sub(1, 16), body.name)
      local want = assert(fs.read(task_dir(id) .. '/Dockerfile'))
      assert.equal(without_from(want), without_from(body.dockerfile))
      assert.truthy(body.dockerfile:find('FROM ' .. rec.image .. '\n', 1, true), body.dockerfile)
      assert.equal('object', body.build_context.type)
      -- the whole environment/ arrived as the build context
      local got = s.build_contexts[body.name]
      for _, p in ipairs(copy_files(id)) do assert.is_true(has(got, p), id .. ': ' .. p .. ' not in the context') end
      assert.is_true(has(got, 'Dockerfile'))
      assert.is_string(s.last_create.blueprint_id)
      assert.is_nil(s.last_create.snapshot_id)
      assert.equal(0, s.object_refused)
    end,
  }
end)

describe('e2b native builds (templates from the recipe steps, files uploaded by hash)', function()
  native_suite {
    fake = require('spec.fakes').module('e2b'), provider = 'e2b',
    unset = { E2B_API_KEY = false, E2B_API_URL = false, E2B_ENVD_URL_TEMPLATE = false, E2B_TEMPLATE = false },
    builds = function(s) return s.build_bodies end,
    sandbox_commands = function(s, before)
      local out = {}
      for i = #before.start_requests + 1, #s.start_requests do
        local p = s.start_requests[i].process or {}
        out[#out + 1] = tostring(p.cmd) .. ' ' .. table.concat(p.args or {}, ' ')
      end
      return out
    end,
    check_build = function(_, id, rec, s)
      local alias = 'cseng-' .. rec.environment.content_key:sub(1, 16)
      assert.equal(alias, s.template_requests[#s.template_requests].name)
      local body = s.build_bodies[#s.build_bodies]
      assert.equal(rec.image, body.fromImage)
      -- every RUN of the Dockerfile is a RUN step, in order; every COPY source a COPY step
      local runs = {}
      for _, st in ipairs(body.steps) do
        if st.type == 'RUN' then runs[#runs + 1] = st.args[1] end
        if st.type == 'COPY' then assert.is_string(st.filesHash) end
      end
      local want = run_commands(id)
      assert.equal(#want, #runs, id)
      for i, r in ipairs(want) do
        assert.truthy(runs[i]:find(r:gsub('%s+$', ''), 1, true) or runs[i]:find(r:gsub('\\?\n?%s+', ' '), 1, true), runs[i])
      end
      local got = s.build_contexts[alias]
      for _, p in ipairs(copy_files(id)) do assert.is_true(has(got, p), id .. ': ' .. p .. ' not uploaded') end
      assert.equal(alias, s.last_create.templateID)
      assert.equal(0, s.upload_refused)
    end,
  }
end)

describe('modal native builds (ImageGetOrCreate from the Dockerfile, COPY sources as a context mount)', function()
  native_suite {
    fake = require('spec.fakes').module('modal'), provider = 'modal',
    unset = { MODAL_SERVER_URL = false, MODAL_TOKEN_ID = false, MODAL_TOKEN_SECRET = false, MODAL_BUILD = false },
    -- the task layers built (a registry image, `FROM <tag>` alone, is the shared base)
    builds = function(s)
      local out = {}
      for _, b in ipairs(s.build_requests) do if #b.dockerfile_commands > 1 then out[#out + 1] = b end end
      return out
    end,
    sandbox_commands = function(s, before)
      local out = {}
      for i = #before.exec_commands + 1, #s.exec_commands do out[#out + 1] = s.exec_commands[i] end
      return out
    end,
    check_build = function(_, id, rec, s)
      local body = s.build_requests[#s.build_requests]
      assert.is_true(#body.dockerfile_commands > 1, id)
      local df = table.concat(body.dockerfile_commands, '\n') .. '\n'
      local want = assert(fs.read(task_dir(id) .. '/Dockerfile'))
      -- the full Dockerfile, one command per line, as a layer over the recipe's base image
      -- (`FROM base`, base_images naming the registry image built from the base's tag)
      assert.equal(without_from(want), without_from(df))
      assert.equal('FROM base', body.dockerfile_commands[1])
      assert.equal('base', body.base_images[1].docker_tag)
      local base_tag
      for _, im in ipairs(s.images) do if im.id == body.base_images[1].image_id then base_tag = im.tag end end
      assert.equal(rec.image, base_tag)
      assert.equal(0, #body.context_files)
      -- every COPY source's files arrived in the context mount, uploaded by hash
      local copies = copy_files(id)
      if #copies > 0 then assert.truthy(body.context_mount_id:match('^mo%-'), body.context_mount_id) end
      for _, p in ipairs(copies) do
        assert.is_true(has(body.mount_files, '/' .. p), id .. ': ' .. p .. ' not in the mount')
      end
      -- the trial's sandbox started from the built image
      local last
      for _, sb in ipairs(s.sandboxes) do
        if not last or sb.created_at > last.created_at then last = sb end
      end
      assert.equal(body.image_id, last.image_id)
      assert.equal(0, s.mount_refused)
    end,
  }
end)
