// Fork and the bulk upload through Daytona's official SDK (@daytonaio/sdk, pinned in
// spec/sdk/package.json) against the loopback fake, for spec/providers/daytona/fork_files_spec.lua:
//   DAYTONA_API_URL=<fake API> DAYTONA_API_KEY=<key> CSENG_CONF_RUN=<label> node spec/sdk/daytona_fork_files.mjs
// A sandbox writes a state file, forks twice (sandbox.fork: POST /sandbox/{id}/fork, then the
// child polled until started), each child reads the state file, the first child gets 5 files in
// one fs.uploadFiles (POST /files/bulk-upload: files[i].path and files[i].file), then every sandbox
// is deleted. useDeprecatedPolling, as spec/sdk/daytona.mjs. Prints what it observed as one JSON
// object; exits non-zero on any failure.
import { Daytona } from '@daytonaio/sdk'

const run = process.env.CSENG_CONF_RUN
if (!process.env.DAYTONA_API_URL || !run) {
  console.error('daytona_fork_files.mjs: DAYTONA_API_URL and CSENG_CONF_RUN are required')
  process.exit(2)
}
const daytona = new Daytona({ useDeprecatedPolling: true })
const labels = { 'cseng.run': run, 'cseng.launcher': 'cseng@conformance' }
const out = {}
const created = []

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what)
}

try {
  const sbx = await daytona.create({ labels, networkBlockAll: true, autoStopInterval: 15, autoDeleteInterval: 0 }, { timeout: 60 })
  created.push(sbx)
  await sbx.fs.uploadFile(Buffer.from('parent\n'), '/tmp/state')
  out.fork = { ids: [], states: [] }
  const kids = []
  for (let i = 0; i < 2; i++) {
    const k = await sbx.fork()
    created.push(k)
    kids.push(k)
    check(k.state === 'started', 'a started child, got ' + k.state)
    out.fork.ids.push(k.id)
    out.fork.states.push((await k.fs.downloadFile('/tmp/state')).toString())
  }
  const files = []
  for (let i = 1; i <= 5; i++) files.push({ source: Buffer.from(`file ${i}\n`), destination: `/tmp/multi/f${i}.txt` })
  await kids[0].fs.uploadFiles(files)
  out.write = { back: (await kids[0].fs.downloadFile('/tmp/multi/f5.txt')).toString() }
  for (const s of created.splice(0)) await daytona.delete(s)
  process.stdout.write(JSON.stringify(out) + '\n')
} catch (e) {
  for (const s of created) await daytona.delete(s).catch(() => {})
  console.error('daytona_fork_files.mjs: ' + (e && e.stack || e))
  process.exit(1)
}
