// Fork and the multi-file upload through E2B's official SDK (e2b, pinned in spec/sdk/package.json)
// against the loopback fake, for spec/providers/e2b/fork_files_spec.lua:
//   E2B_API_URL=<fake API> E2B_SANDBOX_URL=<fake envd> E2B_API_KEY=<key> CSENG_CONF_RUN=<label> node spec/sdk/e2b_fork_files.mjs
// A sandbox writes a state file, forks into 2 (sandbox.fork: POST /sandboxes/{id}/fork {count,
// timeout}), each child reads the state file, the first child gets 5 files in one files.write of a
// list (envd POST /files, a "file" part per file named by its path), then every sandbox is killed.
// Prints what it observed as one JSON object; exits non-zero on any failure.
import { Sandbox } from 'e2b'

const run = process.env.CSENG_CONF_RUN
if (!process.env.E2B_API_URL || !process.env.E2B_SANDBOX_URL || !run) {
  console.error('e2b_fork_files.mjs: E2B_API_URL, E2B_SANDBOX_URL and CSENG_CONF_RUN are required')
  process.exit(2)
}
const metadata = { 'cseng.run': run, 'cseng.launcher': 'cseng@conformance' }
const root = { user: 'root' }
const out = {}
const created = []

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what)
}

try {
  const sbx = await Sandbox.create('base', { metadata, timeoutMs: 900_000, allowInternetAccess: false })
  created.push(sbx.sandboxId)
  await sbx.files.write('/tmp/state', 'parent\n', root)
  const kids = await sbx.fork({ count: 2, timeoutMs: 900_000 })
  check(kids.length === 2 && kids.every((k) => k instanceof Sandbox), 'two forked sandboxes, got ' + kids)
  out.fork = { ids: [], states: [] }
  for (const k of kids) {
    created.push(k.sandboxId)
    out.fork.ids.push(k.sandboxId)
    out.fork.states.push(await k.files.read('/tmp/state', root))
  }
  const files = []
  for (let i = 1; i <= 5; i++) files.push({ path: `/tmp/multi/f${i}.txt`, data: `file ${i}\n` })
  const written = await kids[0].files.write(files, root)
  out.write = { entries: written.length, back: await kids[0].files.read('/tmp/multi/f5.txt', root) }
  for (const id of created.splice(0)) await Sandbox.kill(id)
  process.stdout.write(JSON.stringify(out) + '\n')
} catch (e) {
  for (const id of created) await Sandbox.kill(id).catch(() => {})
  console.error('e2b_fork_files.mjs: ' + (e && e.stack || e))
  process.exit(1)
}
