// The sandbox lifecycle of the conformance specs, run through E2B's official SDK (e2b, pinned in
// spec/sdk/package.json) against a loopback fake. Run by spec/providers/e2b/conformance_spec.lua:
//   E2B_API_URL=<fake API> E2B_SANDBOX_URL=<fake envd> E2B_API_KEY=<key> CSENG_CONF_RUN=<label> \
//   [CSENG_CONF_BUILD_CONTEXT=<a task's environment/> CSENG_CONF_BUILD_CHECK=<command>] node spec/sdk/e2b.mjs
// The SDK reads E2B_API_URL (ConnectionConfig.apiUrl: every control-plane call) and
// E2B_SANDBOX_URL (getSandboxUrl: envd for every sandbox; the SDK adds E2b-Sandbox-Id, so one
// fake serves them all). E2B_DEBUG must stay unset: in debug mode Sandbox.create makes no request.
// With CSENG_CONF_BUILD_CONTEXT (and CSENG_CONF_BUILD_CHECK) it also builds natively, the SDK's
// own way: Template().fromDockerfile on that environment/'s Dockerfile with it as the file
// context, Template.exists (the cache lookup), Template.build (template request, an upload link
// per COPY by files hash, the uploads, build start, status polling), then a sandbox from the
// template, in which CSENG_CONF_BUILD_CHECK runs (its stdout is reported as build.stdout).
// Prints what it observed as one JSON object; exits non-zero on any failure.
import { Sandbox, CommandExitError, Template } from 'e2b'

const run = process.env.CSENG_CONF_RUN
const buildContext = process.env.CSENG_CONF_BUILD_CONTEXT
const buildCheck = process.env.CSENG_CONF_BUILD_CHECK
if (!process.env.E2B_API_URL || !process.env.E2B_SANDBOX_URL || !run) {
  console.error('e2b.mjs: E2B_API_URL, E2B_SANDBOX_URL and CSENG_CONF_RUN are required')
  process.exit(2)
}
if (buildContext && !buildCheck) {
  console.error('e2b.mjs: CSENG_CONF_BUILD_CONTEXT needs CSENG_CONF_BUILD_CHECK (the command run in the built sandbox)')
  process.exit(2)
}
if (process.env.E2B_DEBUG) {
  console.error('e2b.mjs: E2B_DEBUG must be unset (the SDK then skips the API)')
  process.exit(2)
}

const metadata = { 'cseng.run': run, 'cseng.launcher': 'cseng@conformance', 'cseng.task': 'task-a' }
const root = { user: 'root' } // cseng runs commands and moves files as root (E2B_USER)
// cseng runs commands in the task's workdir with the task's environment: the SDK's cwd and envs
const cmd = { ...root, cwd: '/workspace', envs: { GREETING: 'hello world' }, timeoutMs: 60_000 }
const out = {}
const created = []

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what)
}

try {
  // create, with metadata labels and an environment; network off (cseng's default)
  const sbx = await Sandbox.create('base', {
    metadata, envs: { GREETING: 'hello world' }, timeoutMs: 900_000, allowInternetAccess: false,
  })
  created.push(sbx.sandboxId)
  out.create = { sandboxId: sbx.sandboxId }

  // exec: stdout and the exit code
  const r = await sbx.commands.run(`python3 -c "print('arena-startup-ready-20261001')"`, cmd)
  check(r.exitCode === 0, 'python3 exit code 0, got ' + r.exitCode)
  check(r.stdout === 'arena-startup-ready-20261001\n', 'python3 stdout, got ' + JSON.stringify(r.stdout))
  out.exec = { exitCode: r.exitCode, stdout: r.stdout }

  // a command that exits 3: the SDK throws CommandExitError carrying the result
  try {
    await sbx.commands.run('echo to-stderr >&2; exit 3', cmd)
    throw new Error('exit 3 did not throw')
  } catch (e) {
    check(e instanceof CommandExitError, 'CommandExitError, got ' + e)
    check(e.exitCode === 3, 'exit code 3, got ' + e.exitCode)
    check(e.stderr === 'to-stderr\n', 'stderr of exit 3, got ' + JSON.stringify(e.stderr))
    out.exit3 = { exitCode: e.exitCode, stderr: e.stderr }
  }

  // write a file, read it back
  await sbx.files.write('/workspace/hello.txt', 'written by the e2b sdk\n', root)
  const back = await sbx.files.read('/workspace/hello.txt', root)
  check(back === 'written by the e2b sdk\n', 'file read back, got ' + JSON.stringify(back))
  out.file = { content: back }

  // list by label
  const page = await Sandbox.list({ query: { metadata: { 'cseng.run': run }, state: ['running'] }, limit: 100 }).nextItems()
  const ids = page.map((s) => s.sandboxId).sort()
  check(ids.length === 1 && ids[0] === sbx.sandboxId, 'list by metadata, got ' + JSON.stringify(ids))
  out.list = { ids }

  // warm mode: look the snapshot up by name (none yet), snapshot, create from it
  const name = 'cseng-conf-' + run.replace(/[^A-Za-z0-9_-]/g, '-')
  const before = await Sandbox.listSnapshots({ name, limit: 10 }).nextItems()
  check(before.length === 0, 'no snapshot named ' + name + ' yet')
  await sbx.commands.run('mkdir -p /workspace && echo prepared > /workspace/mark', cmd)
  const snap = await Sandbox.createSnapshot(sbx.sandboxId, { name })
  check(typeof snap.snapshotId === 'string' && snap.snapshotId !== '', 'a snapshotId')
  out.snapshot = { snapshotId: snap.snapshotId, names: snap.names }
  const warm = await Sandbox.create(snap.snapshotId, { metadata, timeoutMs: 900_000, allowInternetAccess: false })
  created.push(warm.sandboxId)
  const mark = await warm.commands.run('cat /workspace/mark', { ...root, cwd: '/workspace', timeoutMs: 60_000 })
  check(mark.stdout === 'prepared\n', 'the snapshot holds the prepared file, got ' + JSON.stringify(mark.stdout))
  out.warm = { sandboxId: warm.sandboxId, stdout: mark.stdout }

  // native build: no template of that name yet, build it from the Dockerfile, then it exists
  if (buildContext) {
    const alias = 'cseng-conf-sdk-' + run.replace(/[^A-Za-z0-9_-]/g, '-')
    check(await Template.exists(alias) === false, 'no template named ' + alias + ' yet')
    const template = Template({ fileContextPath: buildContext }).fromDockerfile(buildContext + '/Dockerfile')
    const built = await Template.build(template, alias)
    check(typeof built.templateId === 'string' && built.templateId !== '', 'a templateId')
    check(await Template.exists(alias) === true, 'the template ' + alias + ' exists once built')
    const tsbx = await Sandbox.create(alias, { metadata, timeoutMs: 900_000, allowInternetAccess: false })
    created.push(tsbx.sandboxId)
    const inside = await tsbx.commands.run(buildCheck, { ...root, timeoutMs: 60_000 })
    out.build = { alias, templateId: built.templateId, buildId: built.buildId, sandboxId: tsbx.sandboxId, stdout: inside.stdout }
  }

  // destroy every sandbox; a second kill finds nothing
  out.destroy = []
  for (const id of created.splice(0)) out.destroy.push(await Sandbox.kill(id))
  check(out.destroy.every((x) => x === true), 'kill returned true')
  out.destroy_again = await Sandbox.kill(sbx.sandboxId)
  check(out.destroy_again === false, 'a second kill returns false (404)')
  process.stdout.write(JSON.stringify(out) + '\n')
} catch (e) {
  for (const id of created) await Sandbox.kill(id).catch(() => {})
  console.error('e2b.mjs: ' + (e && e.stack || e))
  process.exit(1)
}
