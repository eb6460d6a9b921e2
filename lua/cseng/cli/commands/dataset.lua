--- `cseng dataset pack|convert|info|validate|list|fetch`: build and inspect datasets, and read Harbor registries.
local command = require('cseng.cli.command')
local fs = require('cseng.fs')
local archive = require('cseng.archive')
local crypto = require('cseng.crypto')
local dataset = require('cseng.workload.dataset')
local jsonl = require('cseng.lib.jsonl')
local errors = require('cseng.lib.errors')
local exit = require('cseng.cli.exit')

local cmd = command {
  name = 'dataset',
  summary = 'pack task directories to JSONL, convert parquet, show dataset info, list and fetch registry datasets',
  usage = [[usage:
  cseng dataset pack SOURCE... -o OUT.jsonl   TB2 task dirs (a folder of them) and SWE-smith
                                              instance files, packed deterministically into seed rows
  cseng dataset convert IN.parquet -o OUT.jsonl
  cseng dataset info FILE                     schema, rows and codecs (parquet) or task summary
  cseng dataset validate PATH [--skip-bad-rows]  load every task; report bad rows
  cseng dataset list --registry R             the datasets of a Harbor registry: name, version, tasks
                                              (R: registry.json, a folder with one, an http(s) URL,
                                              or a git repository: git+URL[@REF], *.git, file://DIR)
  cseng dataset fetch NAME@VERSION --registry R  fetch its tasks at their pinned commits into the cache,
                                              check their digests, print where they are]],
  flags = {
    { 'output', 'string', alias = 'o', arg = 'FILE', help = 'output file' },
    { 'skip-bad-rows', 'bool', help = 'report bad rows and go on' },
    { 'registry', 'string', arg = 'R', help = 'a Harbor registry (file, folder, URL or git repository)' },
  },
}

--- Rows for one source (a TB2 folder, a task dir, or a SWE-smith instances file).
local function rows_for(source)
  local tasks = dataset.load(source)
  local rows = {}
  for _, t in ipairs(tasks) do
    -- modes as git records them, so a fresh checkout packs to the same bytes
    local tar = archive.pack_dir(t.dir, { exclude = { '.complete' }, modes = 'normalize' })
    local row = {
      task_id = t.id,
      instruction = t.instruction,
      prompt = t.instruction,
      task_files = { encoding = 'tar.gz+base64', content = crypto.base64(tar) },
      metadata = { data_source = 'cseng:' .. source, env_type = t.format == 'swesmith' and 'harbor_swesmith' or 'terminalbench' },
    }
    if t.format == 'swesmith' then
      local m = t.metadata or {}
      row.instance_id = t.id
      row.repo = m.repo
      row.image_name = m.image_name
      row.FAIL_TO_PASS = m.FAIL_TO_PASS
      row.PASS_TO_PASS = m.PASS_TO_PASS
      row.patch = fs.read(t.dir .. '/solution/fix.patch')
    end
    rows[#rows + 1] = row
  end
  return rows
end

local function pack(sources, out)
  local lines = {}
  for _, s in ipairs(sources) do
    for _, row in ipairs(rows_for(s)) do
      lines[#lines + 1] = jsonl.encode(row)
    end
  end
  local ok, err, code = fs.write(out, table.concat(lines, '\n') .. '\n')
  if not ok then errors.raise(code or errors.EIO, err) end
  print(string.format('%s: %d tasks', out, #lines))
end

function cmd.main(f, pos)
  local sub = table.remove(pos, 1)
  local ok, err = pcall(function()
    if sub == 'pack' then
      if #pos == 0 or not f.output then error(errors.usage('dataset pack needs SOURCE... and -o OUT.jsonl'), 0) end
      pack(pos, f.output)
    elseif sub == 'convert' then
      if #pos ~= 1 or not f.output then error(errors.usage('dataset convert needs IN.parquet and -o OUT.jsonl'), 0) end
      local n = errors.check(nil, require('cseng.workload.parquet').to_jsonl(pos[1], f.output))
      print(string.format('%s: %d rows', f.output, n))
    elseif sub == 'info' then
      if #pos ~= 1 then error(errors.usage('dataset info needs FILE'), 0) end
      if pos[1]:lower():match('%.parquet$') then
        io.write((errors.check(nil, require('cseng.workload.parquet').info_text(pos[1]))))
        print('tasks:')
      end
      do -- the tasks, for parquet as for JSONL and task folders
        local tasks = dataset.load(pos[1], { skip_bad_rows = true })
        for _, t in ipairs(tasks) do
          print(string.format('%3d  %-44s %-13s workdir %-12s verifier %4ss  RUN steps %d%s', t.index, t.id, t.format,
            t.workdir, t.config.verifier_timeout, #t.recipe.runs, t.has_solution and '' or '  (no solution)'))
        end
      end
    elseif sub == 'validate' then
      if #pos ~= 1 then error(errors.usage('dataset validate needs PATH'), 0) end
      local tasks, bad = dataset.load(pos[1], { skip_bad_rows = f.skip_bad_rows })
      for _, b in ipairs(bad) do print('bad: ' .. b.error) end
      print(string.format('%s: %d tasks ok, %d bad rows', pos[1], #tasks, #bad))
      if #bad > 0 then return 1 end
    elseif sub == 'list' then
      if not f.registry then error(errors.usage('dataset list needs --registry R'), 0) end
      local registry = require('cseng.workload.registry')
      local reg = registry.open(f.registry, {})
      print(string.format('%-40s %-14s %5s  %s', 'dataset', 'version', 'tasks', 'description'))
      for _, d in ipairs(reg.datasets) do
        local digests = 0
        for _, t in ipairs(d.tasks) do if t.digest then digests = digests + 1 end end
        print(string.format('%-40s %-14s %5d  %s%s', d.name, d.version, #d.tasks, (d.description or ''):gsub('%s+', ' '):sub(1, 60),
          digests > 0 and string.format(' [%d/%d digests]', digests, #d.tasks) or ''))
      end
      if reg.commit then print(string.format('(%s at %s)', reg.git_url, reg.commit)) end
    elseif sub == 'fetch' then
      if #pos ~= 1 or not f.registry then error(errors.usage('dataset fetch needs NAME@VERSION and --registry R'), 0) end
      local tasks, resolved = dataset.load_registry(pos[1], f.registry, {})
      for _, t in ipairs(tasks) do
        print(string.format('%-36s %s@%s  sha256:%s  %s', t.id, tostring(t.source.git_url or 'local'),
          tostring(t.source.git_commit_id or '-'):sub(1, 12), t.sha256:sub(1, 16), t.dir))
      end
      print(string.format('%s@%s: %d tasks, content %s', resolved.name, resolved.version, #tasks, resolved.content_hash))
    else
      error(errors.usage(sub and ("unknown dataset subcommand '" .. sub .. "' (pack, convert, info, validate, list, fetch)")
        or 'dataset needs a subcommand: pack, convert, info, validate, list or fetch (see cseng dataset --help)'), 0)
    end
  end)
  if ok then return err or 0 end -- err: the status of validate
  return exit.fail(err)
end

return cmd
