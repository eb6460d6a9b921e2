// The seed's lifecycle through the official @vercel/sandbox SDK (the referee), against a loopback
// fake: create with tags, the arena's python3 command (stdout, exit code 0), a command exiting
// 3, write a file and read it back, list by tag, snapshot (stops the session), create from the
// snapshot (the file is there), stop, delete the snapshot. Prints what it observed as JSON and
// exits non-zero on any failure.
//
//   VERCEL_FAKE_URL=http://127.0.0.1:PORT VERCEL_TOKEN=... VERCEL_TEAM_ID=... VERCEL_PROJECT_ID=... \
//     node spec/sdk/vercel.mjs
//
// The SDK has no base-URL setting (https://vercel.com/api is fixed in its APIClient), but every
// entry point takes a `fetch` option: this one rewrites the origin to the fake's, keeps the path
// and query, and drops the SDK's undici `dispatcher` (an Agent of the SDK's own undici copy,
// which Node's built-in fetch need not accept).
import { Sandbox, Snapshot } from '@vercel/sandbox';

const FAKE = process.env.VERCEL_FAKE_URL;
const creds = { token: process.env.VERCEL_TOKEN, teamId: process.env.VERCEL_TEAM_ID, projectId: process.env.VERCEL_PROJECT_ID };
if (!FAKE || !creds.token || !creds.teamId || !creds.projectId) {
  console.error('vercel.mjs: VERCEL_FAKE_URL, VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID are required');
  process.exit(2);
}

const fake = new URL(FAKE);
const seen = [];
async function fetchToFake(url, opts = {}) {
  const u = new URL(url);
  if (u.origin !== 'https://vercel.com' || !u.pathname.startsWith('/api/')) throw new Error(`unexpected SDK URL ${url}`);
  seen.push(`${opts.method || 'GET'} ${u.pathname.slice(4)}`);
  const target = new URL(u.pathname.slice(4) + u.search, fake);
  const { dispatcher, ...rest } = opts;
  return fetch(target, rest);
}

const MARK = 'arena-startup-ready-20261001';
const RUN = process.env.CSENG_RUN || `sdk-${process.pid}`;
const tags = { 'cseng.run': RUN, 'cseng.launcher': 'sdk@spec', 'cseng.task': 'sdk-task' };
const out = { sdk: '@vercel/sandbox', steps: {} };
const check = (cond, what) => { if (!cond) throw new Error(`check failed: ${what}`); };

async function main() {
  const p = { ...creds, fetch: fetchToFake };
  const sb = await Sandbox.create({ ...p, runtime: 'python3.13', tags, persistent: false, timeout: 600000,
                                    resources: { vcpus: 2 } });
  out.steps.create = { name: sb.name, session: sb.currentSession().sessionId };

  const ready = await sb.runCommand({ cmd: 'bash', args: ['-c', `python3 -c "print('${MARK}')"`], env: { CSENG_TRIAL: '1' },
                                     sudo: true, timeoutMs: 60000 });
  const readyOut = await ready.stdout();
  check(ready.exitCode === 0, `python3 exit code 0 (got ${ready.exitCode})`);
  check(readyOut === `${MARK}\n`, `python3 stdout (got ${JSON.stringify(readyOut)})`);
  out.steps.exec = { exitCode: ready.exitCode, stdout: readyOut };

  const three = await sb.runCommand({ cmd: 'bash', args: ['-c', 'echo to-stderr >&2; exit 3'], cwd: '/tmp', sudo: true,
                                     timeoutMs: 60000 });
  check(three.exitCode === 3, `exit 3 (got ${three.exitCode})`);
  const threeErr = await three.stderr();
  check(threeErr === 'to-stderr\n', `stderr (got ${JSON.stringify(threeErr)})`);
  out.steps.exit3 = { exitCode: three.exitCode, stderr: threeErr };

  const content = Buffer.from(`written by the SDK ${RUN}\n\u0000\u00ff binary tail`);
  await sb.writeFiles([{ path: '/tmp/cseng-sdk/file.bin', content }]);
  const back = await sb.readFileToBuffer({ path: '/tmp/cseng-sdk/file.bin' });
  check(back && Buffer.compare(back, content) === 0, 'the file read back is the one written');
  const missing = await sb.readFileToBuffer({ path: '/tmp/cseng-sdk/no-such-file' });
  check(missing === null, 'a missing file reads as null');
  out.steps.files = { bytes: back.length, missing: missing === null };

  const listed = await Sandbox.list({ ...p, tags: { 'cseng.run': RUN } });
  const names = listed.sandboxes.map((s) => s.name);
  check(names.includes(sb.name), `list by tag finds ${sb.name} (got ${names})`);
  out.steps.list = { names };

  const snap = await sb.snapshot();
  check(snap.status === 'created', `snapshot created (got ${snap.status})`);
  const got = await Snapshot.get({ ...p, snapshotId: snap.snapshotId });
  check(got.snapshotId === snap.snapshotId, 'Snapshot.get finds it');
  out.steps.snapshot = { id: snap.snapshotId, status: got.status };

  const sb2 = await Sandbox.create({ ...p, source: { type: 'snapshot', snapshotId: snap.snapshotId }, tags,
                                     persistent: false, timeout: 600000 });
  const again = await sb2.readFileToBuffer({ path: '/tmp/cseng-sdk/file.bin' });
  check(again && Buffer.compare(again, content) === 0, 'the sandbox from the snapshot has the file');
  const warm = await sb2.runCommand({ cmd: 'bash', args: ['-c', `python3 -c "print('${MARK}')"`], sudo: true, timeoutMs: 60000 });
  check(warm.exitCode === 0 && (await warm.stdout()) === `${MARK}\n`, 'python3 in the sandbox from the snapshot');
  out.steps.from_snapshot = { name: sb2.name, file: true };

  const stopped = await sb2.stop();
  check(stopped.status === 'stopped', `stop (got ${stopped.status})`);
  await snap.delete();
  check(snap.status === 'deleted', `snapshot deleted (got ${snap.status})`);
  const after = await Sandbox.list({ ...p, tags: { 'cseng.run': RUN } });
  const running = after.sandboxes.filter((s) => s.status === 'running').map((s) => s.name);
  check(running.length === 0, `no running sandbox left (got ${running})`);
  out.steps.destroy = { status: stopped.status, running: running.length };
  out.requests = seen;
  out.ok = true;
}

main().then(() => { console.log(JSON.stringify(out)); }, (e) => {
  out.ok = false;
  out.error = String(e && e.stack || e);
  out.requests = seen;
  console.log(JSON.stringify(out));
  process.exit(1);
});
