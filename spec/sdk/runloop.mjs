// The seed's lifecycle through the official @runloop/api-client SDK (the referee), against a
// loopback fake: create a devbox with metadata and wait until it runs, the arena's python3
// command (stdout, exit status 0), a command exiting 3, upload a file and download it back,
// list and find it by metadata, snapshot the disk (async, polled to complete), create from the
// snapshot (the file is there), shut both down, delete the snapshot. Prints what it observed as
// JSON and exits non-zero on any failure.
//
//   RUNLOOP_BASE_URL=http://127.0.0.1:PORT RUNLOOP_API_KEY=... node spec/sdk/runloop.mjs
//
// `baseURL` points the SDK at the fake. `http2: false`: since 1.25 the SDK speaks HTTP/2 by
// default (node:http2, cleartext with prior knowledge on http://), and the fakes' server
// (cseng.serve) is HTTP/1.1 only; every path, body and header is the same on both transports.
import Runloop, { toFile } from '@runloop/api-client';

const BASE = process.env.RUNLOOP_BASE_URL;
const KEY = process.env.RUNLOOP_API_KEY;
if (!BASE || !KEY) {
  console.error('runloop.mjs: RUNLOOP_BASE_URL and RUNLOOP_API_KEY are required');
  process.exit(2);
}

const client = new Runloop({ bearerToken: KEY, baseURL: BASE, http2: false, maxRetries: 0 });
const MARK = 'arena-startup-ready-20261001';
const RUN = process.env.CSENG_RUN || `sdk-${process.pid}`;
const metadata = { 'cseng.run': RUN, 'cseng.launcher': 'sdk@spec', 'cseng.task': 'sdk-task' };
const launch_parameters = { keep_alive_time_seconds: 600, resource_size_request: 'SMALL',
                            user_parameters: { username: 'root', uid: 0 } };
const out = { sdk: '@runloop/api-client', steps: {} };
const check = (cond, what) => { if (!cond) throw new Error(`check failed: ${what}`); };
const live = async () => {
  const found = [];
  for await (const d of client.devboxes.list({ limit: 100 })) {
    if (d.metadata?.['cseng.run'] === RUN && d.status !== 'shutdown' && d.status !== 'failure') found.push(d.id);
  }
  return found;
};

async function main() {
  const created = await client.devboxes.create({ metadata, launch_parameters });
  const box = await client.devboxes.awaitRunning(created.id);
  check(box.status === 'running', `running (got ${box.status})`);
  out.steps.create = { id: box.id, first_status: created.status, status: box.status };

  const ready = await client.devboxes.executeAndAwaitCompletion(box.id, { command: `python3 -c "print('${MARK}')"` });
  check(ready.exit_status === 0, `python3 exit status 0 (got ${ready.exit_status})`);
  check(ready.stdout === `${MARK}\n`, `python3 stdout (got ${JSON.stringify(ready.stdout)})`);
  out.steps.exec = { exit_status: ready.exit_status, stdout: ready.stdout };

  const three = await client.devboxes.executeAndAwaitCompletion(box.id, { command: 'echo to-stderr >&2; exit 3' });
  check(three.exit_status === 3, `exit 3 (got ${three.exit_status})`);
  check(three.stderr === 'to-stderr\n', `stderr (got ${JSON.stringify(three.stderr)})`);
  out.steps.exit3 = { exit_status: three.exit_status, stderr: three.stderr };

  const content = Buffer.from(`uploaded by the SDK ${RUN}\n\u0000\u00ff binary tail`);
  const path = '/tmp/cseng-sdk-file.bin';
  await client.devboxes.uploadFile(box.id, { path, file: await toFile(content, 'cseng-sdk-file.bin') });
  const back = Buffer.from(await (await client.devboxes.downloadFile(box.id, { path })).arrayBuffer());
  check(Buffer.compare(back, content) === 0, 'the file downloaded is the one uploaded');
  out.steps.files = { bytes: back.length };

  const listed = await live();
  check(listed.length === 1 && listed[0] === box.id, `list by metadata finds ${box.id} (got ${listed})`);
  out.steps.list = { ids: listed };

  const snap = await client.devboxes.snapshotDiskAsync(box.id, { name: `cseng-sdk-${RUN}`, metadata: { 'cseng.warm_key': RUN } });
  const done = await client.devboxes.diskSnapshots.awaitCompleted(snap.id);
  check(done.status === 'complete', `snapshot complete (got ${done.status})`);
  out.steps.snapshot = { id: snap.id, status: done.status };

  const found = [];
  for await (const s of client.devboxes.listDiskSnapshots({ limit: 100 })) {
    if (s.metadata?.['cseng.warm_key'] === RUN) found.push(s.id);
  }
  check(found.length === 1 && found[0] === snap.id, `the snapshot found by its metadata (got ${found})`);

  // a command that outlives execute's optimistic wait (the fake's optimistic_cap): long-polled
  const slow = await client.devboxes.executeAndAwaitCompletion(box.id, { command: 'sleep 1; echo slow-done' });
  check(slow.exit_status === 0 && slow.stdout === 'slow-done\n', `slow command (got ${JSON.stringify(slow)})`);
  out.steps.slow = { exit_status: slow.exit_status, stdout: slow.stdout };

  const again = await client.devboxes.create({ snapshot_id: snap.id, metadata, launch_parameters });
  const box2 = await client.devboxes.awaitRunning(again.id);
  const restored = Buffer.from(await (await client.devboxes.downloadFile(box2.id, { path })).arrayBuffer());
  check(Buffer.compare(restored, content) === 0, 'the devbox from the snapshot has the file');
  const warm = await client.devboxes.executeAndAwaitCompletion(box2.id, { command: `python3 -c "print('${MARK}')"` });
  check(warm.exit_status === 0 && warm.stdout === `${MARK}\n`, 'python3 in the devbox from the snapshot');
  out.steps.from_snapshot = { id: box2.id, file: true };

  const down1 = await client.devboxes.shutdown(box.id);
  const down2 = await client.devboxes.shutdown(box2.id);
  check(down1.status === 'shutdown' && down2.status === 'shutdown', `shutdown (got ${down1.status}, ${down2.status})`);
  await client.devboxes.diskSnapshots.delete(snap.id);
  const left = await live();
  check(left.length === 0, `no live devbox left (got ${left})`);
  out.steps.destroy = { status: down2.status, live: left.length };
  out.ok = true;
}

main().then(() => { console.log(JSON.stringify(out)); }, (e) => {
  out.ok = false;
  out.error = String(e && e.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
});
