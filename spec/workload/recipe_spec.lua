-- The build recipe (lua/cseng/workload/recipe.lua) and the ordered Dockerfile steps it is made of: one content
-- key per task that does not depend on when or where the task was packed, and that changes
-- with one context byte or one step; solution/ never part of a build input.
local fs = require('cseng.fs')
local sys = require('cseng.sys')
local proc = require('cseng.proc')
local task = require('cseng.task')
local archive = require('cseng.archive')
local dataset = require('cseng.workload.dataset')
local dockerfile = require('cseng.workload.dockerfile')
local recipe = require('cseng.workload.recipe')
local replay = require('cseng.workload.replay')
local H = require('spec.helpers.common')

local ROOT = H.ROOT
local CSENG = sys.realpath('/proc/self/exe') or (ROOT .. '/cseng')

local tmp = H.tempdir('cseng-recipe-spec')
teardown(H.remove_tempdirs)

local function task_of(dir)
  return dataset.load(dir)[1]
end

local function key_of(dir, o) return recipe.of_task(task_of(dir), o).key end

describe('dockerfile steps', function()
  it('keeps the last stage in order, with ARG and ENV substituted where docker does', function()
    local r = assert(dockerfile.parse(table.concat({
      'FROM golang AS build', 'RUN go build', -- an earlier stage: dropped
      'FROM debian:bookworm-slim',
      'ARG V=1.2', 'ARG EMPTY',
      'ENV APP=/opt/app-${V} MODE=prod',
      'WORKDIR $APP',
      'COPY --chown=svc:svc conf/ ./conf/',
      'USER svc',
      'RUN echo "$V" > /tmp/v \\', '  && true',
      'RUN ["/bin/echo", "it\'s", "exec form"]',
      'USER root',
    }, '\n')))
    local ops = {}
    for i, s in ipairs(r.steps) do ops[i] = s.op end
    assert.same({ 'ARG', 'ARG', 'ENV', 'WORKDIR', 'COPY', 'USER', 'RUN', 'RUN', 'USER' }, ops)
    assert.same({ { 'APP', '/opt/app-1.2' }, { 'MODE', 'prod' } }, r.steps[3].vars)
    assert.equal('/opt/app-1.2', r.steps[4].path)
    assert.equal('/opt/app-1.2/conf/', r.steps[5].copy.dst)
    assert.equal('svc:svc', r.steps[5].copy.chown)
    assert.equal('echo "$V" > /tmp/v    && true', r.steps[7].cmd) -- the shell expands it, from args
    assert.same({ V = '1.2' }, r.steps[7].args)
    assert.equal("'/bin/echo' 'it'\\''s' 'exec form'", r.steps[8].cmd)
    assert.equal(10, r.steps[7].line)
    assert.equal('root', r.user)
  end)
end)

describe('the recipe', function()
  local TASKS = ROOT .. '/data/tasks'

  it('gives the same key for the same task packed twice, a second apart, from a fresh copy', function()
    local a = tmp .. '/clone-a'
    local r = assert(proc.run { argv = { 'git', 'clone', '-q', '--no-hardlinks', ROOT, a }, timeout = 120 })
    assert.equal(0, r.code, r.stderr)
    task.sleep(1.1)
    local b = tmp .. '/clone-b'
    r = assert(proc.run { argv = { 'git', 'clone', '-q', '--no-hardlinks', ROOT, b }, timeout = 120 })
    assert.equal(0, r.code, r.stderr)
    -- the working tree's committed tasks (a clone holds what git has)
    local checked = 0
    for _, name in ipairs(fs.list(a .. '/data/tasks')) do
      if fs.exists(ROOT .. '/data/tasks/' .. name .. '/task.toml') then
        local ka = key_of(a .. '/data/tasks/' .. name)
        local kb = key_of(b .. '/data/tasks/' .. name)
        assert.equal(ka, kb, name)
        assert.matches('^%x+$', ka)
        assert.equal(64, #ka)
        checked = checked + 1
      end
    end
    assert.is_true(checked > 0)
    -- and through the packed dataset (seed rows, extracted elsewhere) the keys are the same
    r = assert(proc.run { argv = { CSENG, 'dataset', 'pack', a .. '/data/tasks', '-o', tmp .. '/a.jsonl' }, cwd = ROOT })
    assert.equal(0, r.code, r.stderr)
    task.sleep(1.1)
    r = assert(proc.run { argv = { CSENG, 'dataset', 'pack', b .. '/data/tasks', '-o', tmp .. '/b.jsonl' }, cwd = ROOT })
    assert.equal(0, r.code, r.stderr)
    local ta = dataset.load(tmp .. '/a.jsonl', { cache_dir = tmp .. '/cache-a' })
    local tb = dataset.load(tmp .. '/b.jsonl', { cache_dir = tmp .. '/cache-b' })
    assert.equal(#ta, #tb)
    for i, t in ipairs(ta) do
      assert.equal(recipe.of_task(t).key, recipe.of_task(tb[i]).key, t.id)
      assert.equal(key_of(a .. '/data/tasks/' .. t.id), recipe.of_task(t).key, t.id)
    end
  end)

  local function copy_task(name)
    local d = tmp .. '/' .. name .. '-' .. tostring(math.random(1e9))
    assert(fs.copy_tree(TASKS .. '/' .. name, d))
    return d
  end

  it('changes with one context byte, one step, the base image or an ARG value', function()
    local d = copy_task('build-generated-config')
    local k0 = key_of(d)
    assert.equal(k0, key_of(d))
    -- one byte of a context file
    local src = assert(fs.read(d .. '/environment/gen_config.py'))
    fs.write(d .. '/environment/gen_config.py', src:sub(1, -2) .. (src:sub(-1) == '\n' and ' ' or '\n'))
    local k1 = key_of(d)
    assert.not_equal(k0, k1)
    fs.write(d .. '/environment/gen_config.py', src)
    assert.equal(k0, key_of(d))
    -- a new file in the context, even one no step copies
    fs.write(d .. '/environment/unused.txt', 'x')
    assert.not_equal(k0, key_of(d))
    fs.remove(d .. '/environment/unused.txt')
    -- a mode bit (git records the executable bit)
    fs.chmod(d .. '/environment/gen_config.py', tonumber('755', 8))
    assert.not_equal(k0, key_of(d))
    fs.chmod(d .. '/environment/gen_config.py', tonumber('644', 8))
    assert.equal(k0, key_of(d))
    -- one step
    local df = assert(fs.read(d .. '/environment/Dockerfile'))
    fs.write(d .. '/environment/Dockerfile', df .. 'RUN true\n')
    assert.not_equal(k0, key_of(d))
    fs.write(d .. '/environment/Dockerfile', (df:gsub('ARG APP_PORT=8125', 'ARG APP_PORT=8126')))
    assert.not_equal(k0, key_of(d))
    fs.write(d .. '/environment/Dockerfile', df)
    -- the base image, through the image map
    assert.not_equal(k0, key_of(d, { image_map = { 'debian:*=other/base:1' } }))
    assert.equal(k0, key_of(d))
  end)

  it('does not change with the solution or the tests (they are not build inputs)', function()
    local d = copy_task('build-compiled-checksum-tool')
    local k0 = key_of(d)
    fs.write(d .. '/solution/solve.sh', 'echo changed\n')
    fs.write(d .. '/solution/extra.txt', 'more')
    fs.write(d .. '/tests/test_outputs.py', 'def test_x(): pass\n')
    fs.write(d .. '/instruction.md', 'changed')
    assert.equal(k0, key_of(d))
  end)

  it('never carries solution/ in any build input of any bundled task', function()
    local tasks = dataset.load(ROOT .. '/data/smoke.jsonl', { cache_dir = tmp .. '/cache-smoke' })
    assert.is_true(#tasks > 0)
    local runs = 0
    for _, t in ipairs(tasks) do
      local rcp = recipe.of_task(t)
      runs = runs + rcp.run_steps
      for _, e in ipairs(assert(archive.list(rcp.context))) do
        assert.is_nil(e.path:match('^solution'), t.id .. ': ' .. e.path)
        assert.is_nil(e.path:match('solve%.sh$'), t.id .. ': ' .. e.path)
      end
      -- no solution file's content in the context or in the steps
      local sol = t.dir .. '/solution'
      local steps = recipe._canonical(rcp.steps)
      for _, e in ipairs(fs.walk(sol) or {}) do
        if e.type == 'file' then
          local data = assert(fs.read(sol .. '/' .. e.path))
          if #data >= 64 then
            assert.is_nil(rcp.context:find(data, 1, true), t.id .. ': solution/' .. e.path .. ' is in the context')
            assert.is_nil(steps:find(data, 1, true), t.id .. ': solution/' .. e.path .. ' is in the steps')
          end
        end
      end
      assert.is_nil(rcp.context_dir:find('/solution', 1, true))
    end
    assert.is_true(runs >= 4) -- the bundled tasks that need their RUN steps
  end)

  it('maps the base image: the user first, then the provider, then the defaults', function()
    local d = copy_task('build-generated-config')
    local t = task_of(d)
    assert.equal('debian:bookworm-slim', recipe.of_task(t).base)
    assert.equal('cseng/debian:bookworm', recipe.of_task(t, { provider_map = { 'debian:bookworm*=cseng/debian:bookworm' } }).base)
    assert.equal('mine:1', recipe.of_task(t, { image_map = { 'debian:*=mine:1' },
      provider_map = { 'debian:bookworm*=cseng/debian:bookworm' } }).base)
    t.config.docker_image = 'cseng/swesmith.x'
    assert.equal('cseng/debian:bookworm', recipe.of_task(t).base)
  end)
end)

describe('replay', function()
  -- a recording adapter: exec and put are what a provider without builds offers
  local function recorder(fail_on)
    local P = { calls = {} }
    function P.exec(_, _, cmd, o)
      P.calls[#P.calls + 1] = { 'exec', cmd, o }
      if fail_on and cmd:find(fail_on, 1, true) then
        return { code = 3, stdout = 'step output\n', stderr = 'the error\n' }
      end
      return { code = 0, stdout = '', stderr = '' }
    end
    function P.put(_, _, dir, tar)
      local names = {}
      for _, e in ipairs(assert(archive.list(tar))) do names[#names + 1] = e.path end
      P.calls[#P.calls + 1] = { 'put', dir, names }
      return true
    end
    return P
  end

  it('runs the steps in order, as the step\'s user, in its workdir, with ENV and ARGs', function()
    local t = task_of(ROOT .. '/data/tasks/build-service-user')
    local P = recorder()
    local info = assert(replay.run(P, nil, {}, recipe.of_task(t)))
    assert.equal(2, info.runs)
    local kinds = {}
    for i, c in ipairs(P.calls) do kinds[i] = c[1] end
    assert.same({ 'exec', 'exec', 'put', 'exec', 'exec' }, kinds) -- RUN, RUN as appsvc, COPY (upload, move), chown
    assert.matches('exec /bin/sh %-c .groupadd', P.calls[1][2])
    assert.matches("runuser %-u '?appsvc'? %-%- /bin/sh %-c", P.calls[2][2])
    assert.matches('^/tmp/cseng%-copy%-%x+$', P.calls[3][2]) -- beside the root, then moved into place
    assert.equal('srv/app/notes.txt', P.calls[3][3][#P.calls[3][3]])
    assert.matches('tar %-C /tmp/cseng%-copy%-%x+ %-cf %- %. | tar %-C / %-%-no%-overwrite%-dir %-xpf %-', P.calls[4][2])
    assert.matches("chown %-R '?appsvc:appsvc'? %-%- '?/srv/app/notes.txt'?", P.calls[5][2])
    t = task_of(ROOT .. '/data/tasks/build-generated-config')
    P = recorder()
    assert(replay.run(P, nil, {}, recipe.of_task(t)))
    local run = P.calls[3]
    assert.equal('put', P.calls[1][1])
    assert.same({ APP_PORT = '8125', APP_ENV = 'staging', APP_REGION = 'eu-north' }, run[3].env)
  end)

  it('stops at a failing step, naming its line, with the output tail', function()
    local t = task_of(ROOT .. '/data/tasks/build-service-user')
    local P = recorder('build-marker')
    local info, err, code = replay.run(P, nil, {}, recipe.of_task(t))
    assert.is_nil(info)
    assert.equal('EBUILD', code)
    assert.matches('environment/Dockerfile line 5: RUN .*: exit 3', err.message)
    assert.equal('step output\nthe error\n', err.log)
    assert.equal(2, #P.calls) -- nothing after the failing step
  end)
end)
