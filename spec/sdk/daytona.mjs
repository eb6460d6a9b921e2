// The sandbox lifecycle of the conformance specs, run through Daytona's official SDK
// (@daytonaio/sdk, pinned in spec/sdk/package.json) against a loopback fake. Run by
// spec/providers/daytona/conformance_spec.lua:
//   DAYTONA_API_URL=<fake API> DAYTONA_API_KEY=<key> CSENG_CONF_RUN=<label> \
//   CSENG_CONF_BUILD_DIR=<a build context with its Dockerfile> node spec/sdk/daytona.mjs
// The SDK reads DAYTONA_API_URL from the process environment (Daytona's constructor) for every
// control-plane call; toolbox calls go to the sandbox's toolboxProxyUrl + "/" + id, taken from
// the sandbox the API returns (the fake answers with its toolbox listener). useDeprecatedPolling:
// the SDK then waits for states by polling GET /sandbox/{id}, as cseng does, instead of its
// default socket.io event stream ({api}/socket.io/), which the fake does not serve.
// A native build the SDK's own way: Image.fromDockerfile over the spec's build context, then
// daytona.snapshot.create (GET /object-storage/push-access, per COPY source an S3 ListObjectsV2
// and, when absent, a PUT of its tar, POST /snapshots {name, buildInfo{dockerfileContent,
// contextHashes}}, GET /snapshots/{name} until active), then a sandbox from that snapshot.
// Prints what it observed as one JSON object; exits non-zero on any failure.
import { Daytona, Image } from '@daytonaio/sdk'
import fs from 'node:fs'
import path from 'node:path'

const run = process.env.CSENG_CONF_RUN
if (!process.env.DAYTONA_API_URL || !run || !process.env.CSENG_CONF_BUILD_DIR) {
  console.error('daytona.mjs: DAYTONA_API_URL, CSENG_CONF_RUN and CSENG_CONF_BUILD_DIR are required')
  process.exit(2)
}

const daytona = new Daytona({ useDeprecatedPolling: true })
const labels = { 'cseng.run': run, 'cseng.launcher': 'cseng@conformance', 'cseng.task': 'task-a' }
// cseng's create: network off, stop after the trial's budget, delete on stop, resources asked for
const common = { labels, networkBlockAll: true, autoStopInterval: 15, autoDeleteInterval: 0 }
const env = { GREETING: 'hello world' }
const out = {}
const created = []

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

try {
  const sbx = await daytona.create({ ...common, envVars: env, resources: { cpu: 1, memory: 1, disk: 3 } }, { timeout: 60 })
  created.push(sbx)
  check(sbx.state === 'started', 'started after create, got ' + sbx.state)
  out.create = { id: sbx.id, state: sbx.state }

  // exec: the toolbox runs the command without a shell; stdout and the exit code
  const r = await sbx.process.executeCommand(`python3 -c "print('arena-startup-ready-20261001')"`, '/workspace', env, 60)
  check(r.exitCode === 0, 'python3 exit code 0, got ' + r.exitCode)
  check(r.result === 'arena-startup-ready-20261001\n', 'python3 stdout, got ' + JSON.stringify(r.result))
  out.exec = { exitCode: r.exitCode, result: r.result }

  // a command that exits 3 (stdout and stderr come back combined in result)
  const r3 = await sbx.process.executeCommand('sh -c "echo to-stderr >&2; exit 3"', '/workspace', env, 60)
  check(r3.exitCode === 3, 'exit code 3, got ' + r3.exitCode)
  out.exit3 = { exitCode: r3.exitCode, result: r3.result }

  // write a file, read it back
  await sbx.fs.uploadFile(Buffer.from('written by the daytona sdk\n'), '/workspace/hello.txt')
  const back = (await sbx.fs.downloadFile('/workspace/hello.txt')).toString()
  check(back === 'written by the daytona sdk\n', 'file read back, got ' + JSON.stringify(back))
  out.file = { content: back }

  // list by label
  const ids = []
  for await (const s of daytona.list({ labels: { 'cseng.run': run }, limit: 100 })) ids.push(s.id)
  check(ids.length === 1 && ids[0] === sbx.id, 'list by labels, got ' + JSON.stringify(ids))
  out.list = { ids }

  // warm mode: look the snapshot up (none yet), snapshot the prepared sandbox, wait until it is
  // active, create from it
  const name = 'cseng-conf-' + run.replace(/[^A-Za-z0-9_.-]/g, '-')
  let missing = false
  try { await daytona.snapshot.get(name) } catch (e) { missing = e.statusCode === 404 }
  check(missing, 'no snapshot named ' + name + ' yet (404)')
  const prep = await sbx.process.executeCommand('sh -c "mkdir -p /workspace && echo prepared > /workspace/mark"', '/workspace', env, 60)
  check(prep.exitCode === 0, 'prepare step')
  await sbx.createSnapshot(name, 60)
  let snap
  for (let i = 0; i < 600; i++) {
    snap = await daytona.snapshot.get(name)
    if (snap.state === 'active') break
    check(snap.state !== 'error' && snap.state !== 'build_failed', 'snapshot state ' + snap.state)
    await sleep(50)
  }
  check(snap.state === 'active', 'snapshot active, got ' + snap.state)
  out.snapshot = { name: snap.name, state: snap.state }
  const warm = await daytona.create({ ...common, snapshot: name }, { timeout: 60 })
  created.push(warm)
  const mark = await warm.process.executeCommand('cat /workspace/mark', '/workspace', undefined, 60)
  check(mark.result === 'prepared\n', 'the snapshot holds the prepared file, got ' + JSON.stringify(mark.result))
  out.warm = { id: warm.id, result: mark.result }

  // a task's environment, built by Daytona: the Dockerfile of CSENG_CONF_BUILD_DIR (written by the
  // spec: ARG, ENV, RUN as another USER, WORKDIR, COPY of a file and of a directory) with that
  // directory as its build context
  const dir = process.env.CSENG_CONF_BUILD_DIR
  const image = Image.fromDockerfile(path.join(dir, 'Dockerfile'))
  const contexts = image.contextList.map((c) => c.archivePath)
  check(contexts.length === 2, 'two build contexts (a file, a directory), got ' + JSON.stringify(image.contextList))
  const built = await daytona.snapshot.create({ name: 'cseng-conf-build-' + run.replace(/[^A-Za-z0-9_.-]/g, '-'), image },
    { timeout: 120 })
  check(built.state === 'active', 'the built snapshot is active, got ' + built.state)
  const bsb = await daytona.create({ ...common, snapshot: built.name }, { timeout: 60 })
  created.push(bsb)
  const copied = await bsb.process.executeCommand('cat /workspace/hello.txt /workspace/data/a.txt /workspace/data/sub/b.txt',
    '/workspace', undefined, 60)
  const ctx = (rel) => fs.readFileSync(path.join(dir, rel), 'utf8')
  check(copied.exitCode === 0 && copied.result === ctx('hello.txt') + ctx('data/a.txt') + ctx('data/sub/b.txt'),
    'the COPY files arrived, got ' + JSON.stringify(copied))
  const ran = await bsb.process.executeCommand('sh -c "cat /home/builder/marker /workspace/joined; echo $CSENG_BUILT"',
    '/workspace', undefined, 60)
  check(ran.exitCode === 0, 'the RUN steps\' files, got ' + JSON.stringify(ran))
  out.build = { name: built.name, state: built.state, contexts, ran: ran.result }

  // destroy all three; deleting again is a 404
  for (const s of created.splice(0)) await s.delete()
  out.destroyed = 3
  try {
    await sbx.delete()
    out.delete_again = 'no error'
  } catch (e) {
    out.delete_again = e.statusCode
  }
  check(out.delete_again === 404, 'a second delete is a 404, got ' + out.delete_again)
  process.stdout.write(JSON.stringify(out) + '\n')
  process.exit(0)
} catch (e) {
  for (const s of created) await s.delete().catch(() => {})
  console.error('daytona.mjs: ' + (e && e.stack || e))
  process.exit(1)
}
