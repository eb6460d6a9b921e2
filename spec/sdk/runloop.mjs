// The seed's lifecycle through the official @runloop/api-client SDK (the referee), against a
// loopback fake: create a devbox with metadata and wait until it runs, the arena's python3
// command (stdout, exit status 0), a command exiting 3, upload a file and download it back,
// list and find it by metadata, snapshot the disk (async, polled to complete), create from the
// snapshot (the file is there), shut both down, delete the snapshot; then a native build: a
// blueprint from a task's Dockerfile with its environment/ as the build context, the SDK's own
// way (RunloopSDK.blueprint.create with build_context_dir: the directory packed as a gzipped tar,
// objects.create, a PUT to the returned upload_url, objects.complete, blueprints.create, its status
// polled to build_complete), looked up by name first, and a devbox from it in which the RUN
// step's output and the COPY file are checked. Prints what it observed as JSON and exits non-zero
// on any failure.
//
//   RUNLOOP_BASE_URL=http://127.0.0.1:PORT RUNLOOP_API_KEY=... node spec/sdk/runloop.mjs
//
// The task built is data/tasks/build-generated-config (CSENG_BUILD_DIR names another environment/
// with the same Dockerfile and files).
//
// `baseURL` points the SDK at the fake. `http2: false`: since 1.25 the SDK speaks HTTP/2 by
// default (node:http2, cleartext with prior knowledge on http://), and the fakes' server
// (cseng.serve) is HTTP/1.1 only; every path, body and header is the same on both transports.
import Runloop, { RunloopSDK, toFile } from '@runloop/api-client';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const BASE = process.env.RUNLOOP_BASE_URL;
const KEY = process.env.RUNLOOP_API_KEY;
if (!BASE || !KEY) {
  console.error('runloop.mjs: RUNLOOP_BASE_URL and RUNLOOP_API_KEY are required');
  process.exit(2);
}

const client = new Runloop({ bearerToken: KEY, baseURL: BASE, http2: false, maxRetries: 0 });
const sdk = new RunloopSDK({ bearerToken: KEY, baseURL: BASE, http2: false, maxRetries: 0 });
const BUILD_DIR = process.env.CSENG_BUILD_DIR ||
  fileURLToPath(new URL('../../data/tasks/build-generated-config/environment', import.meta.url));
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

  // the native build: nothing of that name is built yet (the lookup cseng's build cache does)
  const name = `cseng-sdk-build-${RUN}`;
  const named = [];
  for await (const b of client.blueprints.list({ name, limit: 100 })) named.push(b.id);
  check(named.length === 0, `no blueprint named ${name} yet (got ${named})`);
  const dockerfile = readFileSync(join(BUILD_DIR, 'Dockerfile'), 'utf8');
  const bp = await sdk.blueprint.create({ name, dockerfile, build_context_dir: BUILD_DIR,
                                          metadata: { 'cseng.content_key': RUN } });
  const info = await bp.getInfo();
  check(info.status === 'build_complete', `blueprint built (got ${info.status})`);
  check(info.parameters?.build_context?.type === 'object', 'the blueprint has an object build context');
  out.steps.build = { id: bp.id, status: info.status, object_id: info.parameters.build_context.object_id };

  const built = await client.devboxes.create({ blueprint_id: bp.id, metadata, launch_parameters });
  const box3 = await client.devboxes.awaitRunning(built.id);
  check(box3.status === 'running', `the devbox from the blueprint runs (got ${box3.status})`);
  // the RUN step ran with the ARG defaults and the ENV: its generated file is there
  const ini = await client.devboxes.executeAndAwaitCompletion(box3.id, { command: 'cat /etc/cseng-app/app.ini' });
  check(ini.exit_status === 0, `the RUN step's file exists (exit ${ini.exit_status}, ${ini.stderr})`);
  check(ini.stdout.includes('port = 8125\n') && ini.stdout.includes('host = api-staging.eu-north.internal\n'),
    `the RUN step's file (got ${JSON.stringify(ini.stdout)})`);
  // the COPY source arrived byte for byte
  const want = readFileSync(join(BUILD_DIR, 'gen_config.py'));
  const copied = Buffer.from(await (await client.devboxes.downloadFile(box3.id, { path: '/opt/gen/gen_config.py' })).arrayBuffer());
  check(Buffer.compare(copied, want) === 0, 'the COPY file in the devbox is the context\'s');
  const down3 = await client.devboxes.shutdown(box3.id);
  check(down3.status === 'shutdown', `shutdown (got ${down3.status})`);
  const gone = await live();
  check(gone.length === 0, `no live devbox left after the build (got ${gone})`);
  out.steps.from_blueprint = { id: box3.id, run_step: true, copy: want.length };
  out.ok = true;
}

main().then(() => { console.log(JSON.stringify(out)); }, (e) => {
  out.ok = false;
  out.error = String(e && e.stack || e);
  console.log(JSON.stringify(out));
  process.exit(1);
});
