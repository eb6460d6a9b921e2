// The official `modal` JS SDK (spec/sdk/node_modules/modal, pinned in package.json) runs the
// sandbox lifecycle against cseng's Modal fake (spec/providers/modal/server.mjs), as a referee: what
// the SDK does and expects is what the fake must serve, and the fake's request log of this run is
// compared with the adapter's (spec/providers/modal/conformance_spec.lua).
//
//   MODAL_SERVER_URL=http://127.0.0.1:PORT MODAL_TOKEN_ID=... MODAL_TOKEN_SECRET=... \
//     node spec/sdk/modal.mjs [RUN_TAG]
// The SDK reads those variables itself (src/config.ts). It prints what it observed as one JSON
// object and exits non-zero on the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';

// SDK 0.11.1 defaults to Modal's experimental "V2" sandboxes (SandboxCreateV2, ...); the adapter
// speaks the V1 lifecycle (SandboxCreate, SandboxGetTaskId, TaskGetCommandRouterAccess), which is
// what the SDK runs with MODAL_SANDBOX_V2=false (src/config.ts), so that is what is compared.
process.env.MODAL_SANDBOX_V2 = process.env.MODAL_SANDBOX_V2 || 'false';
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const { ModalClient } = require('modal');

const run = process.argv[2] || 'sdk-' + Date.now();
const tags = { 'cseng.run': run, 'cseng.launcher': 'sdk', 'cseng.task': 'sdk-lifecycle' };
const seen = { run };

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what + ' ' + JSON.stringify(seen));
}

async function execText(sb, argv, params) {
  const p = await sb.exec(argv, params);
  const [stdout, stderr] = await Promise.all([p.stdout.readText(), p.stderr.readText()]);
  const code = await p.wait();
  return { stdout, stderr, code };
}

const modal = new ModalClient();
const created = [];
try {
  const app = await modal.apps.fromName('cseng-sdk', { createIfMissing: true });
  seen.app_id = app.appId;
  const image = modal.images.fromRegistry('python:3.12-slim');
  const sb = await modal.sandboxes.create(app, image, { tags, cpu: 2, memoryMiB: 2048, timeoutMs: 300000,
    regions: ['us-east'] });
  created.push(sb);
  seen.sandbox_id = sb.sandboxId;

  const ready = await execText(sb, ['python3', '-c', "print('arena-startup-ready-20261001')"]);
  seen.ready = ready;
  check(ready.code === 0 && ready.stdout === 'arena-startup-ready-20261001\n', 'ready marker');

  const three = await execText(sb, ['sh', '-c', 'echo out; echo err >&2; exit 3']);
  seen.exit3 = three;
  check(three.code === 3 && three.stdout === 'out\n' && three.stderr === 'err\n', 'exit 3 with stdout and stderr');

  await sb.filesystem.writeText('hello from the sdk\n', '/tmp/cseng/hello.txt');
  seen.read_back = await sb.filesystem.readText('/tmp/cseng/hello.txt');
  check(seen.read_back === 'hello from the sdk\n', 'file read back');
  const cat = await execText(sb, ['cat', '/tmp/cseng/hello.txt']);
  check(cat.stdout === 'hello from the sdk\n', 'the written file is in the sandbox');

  const listed = [];
  for await (const s of modal.sandboxes.list({ tags: { 'cseng.run': run } })) listed.push(s.sandboxId);
  seen.listed = listed;
  check(listed.length === 1 && listed[0] === sb.sandboxId, 'list by tags');
  seen.tags = await sb.getTags();
  check(seen.tags['cseng.run'] === run, 'tags kept');

  await execText(sb, ['sh', '-c', 'echo warm > /root/marker']);
  const snap = await sb.snapshotFilesystem();
  seen.snapshot_image_id = snap.imageId;
  check(/^im-/.test(snap.imageId), 'snapshot image id');
  const sb2 = await modal.sandboxes.create(app, snap, { tags, timeoutMs: 300000 });
  created.push(sb2);
  seen.sandbox2_id = sb2.sandboxId;
  const warm = await execText(sb2, ['cat', '/root/marker']);
  seen.warm = warm;
  check(warm.code === 0 && warm.stdout === 'warm\n', 'sandbox from the snapshot has the file');

  // A task's environment, built by Modal. The SDK's own image builder: a registry image
  // and the Dockerfile steps it accepts (RUN, ENV, ARG, USER, WORKDIR; it refuses COPY from a
  // local context), one ImageGetOrCreate (+ ImageJoinStreaming), then a sandbox from it.
  const built = await modal.images.fromRegistry('debian:bookworm-slim').dockerfileCommands([
    'ARG GREETING=built-by-modal', 'ENV CSENG_BUILT=1',
    'RUN useradd --create-home --shell /bin/bash builder', 'USER builder',
    'RUN echo "$GREETING as $(id -un)" > "$HOME/marker"', 'USER root', 'WORKDIR /workspace',
  ]).build(app);
  seen.built_image_id = built.imageId;
  const sb3 = await modal.sandboxes.create(app, built, { tags, timeoutMs: 300000 });
  created.push(sb3);
  const marker = await execText(sb3, ['sh', '-c', 'cat /home/builder/marker; echo "$CSENG_BUILT"; pwd']);
  seen.build_marker = marker;
  check(marker.code === 0 && marker.stdout === 'built-by-modal as builder\n1\n/workspace\n', 'the built image ran its steps');

  // A build context (COPY), which the JS SDK has no builder for: the Python SDK's sequence
  // (Image.from_dockerfile: MountPutFile by sha256, then with the data, MountGetOrCreate owned by
  // the App, ImageGetOrCreate with context_mount_id) spoken through the JS SDK's generated client,
  // so its encoder is the referee for these messages.
  const data = Buffer.from('#!/bin/sh\necho copied\n');
  const sha256Hex = createHash('sha256').update(data).digest('hex');
  const have = await modal.cpClient.mountPutFile({ sha256Hex });
  if (!have.exists) await modal.cpClient.mountPutFile({ sha256Hex, data });
  const mount = await modal.cpClient.mountGetOrCreate({ objectCreationType: 4 /* ANONYMOUS_OWNED_BY_APP */,
    files: [{ filename: '/bin/hello.sh', sha256Hex, size: data.length, mode: 0o755 }], appId: app.appId });
  const env = await modal.cpClient.environmentGetOrCreate({ deploymentName: '' });
  const ctxImage = await modal.cpClient.imageGetOrCreate({ appId: app.appId,
    builderVersion: env.metadata?.settings?.imageBuilderVersion || '',
    image: { dockerfileCommands: ['FROM debian:bookworm-slim', 'COPY bin/hello.sh /usr/local/bin/hello'], contextMountId: mount.mountId } });
  let result = ctxImage.result;
  while (!result?.status) {
    for await (const item of modal.cpClient.imageJoinStreaming({ imageId: ctxImage.imageId, timeout: 55, lastEntryId: '' })) {
      if (item.result?.status) { result = item.result; break; }
    }
  }
  check(result.status === 1, 'the context build succeeded: ' + JSON.stringify(result));
  const sb4 = await modal.sandboxes.create(app, await modal.images.fromId(ctxImage.imageId), { tags, timeoutMs: 300000 });
  created.push(sb4);
  const hello = await execText(sb4, ['hello']);
  seen.context_build = hello;
  check(hello.code === 0 && hello.stdout === 'copied\n', 'the COPY source arrived with its mode');

  for (const s of created) await s.terminate();
  seen.exit_after_terminate = await sb.wait();
  const after = [];
  for await (const s of modal.sandboxes.list({ tags: { 'cseng.run': run } })) after.push(s.sandboxId);
  seen.listed_after_terminate = after;
  check(after.length === 0, 'nothing listed after terminate');
  seen.ok = true;
  process.stdout.write(JSON.stringify(seen) + '\n');
  modal.close();
  process.exit(0);
} catch (e) {
  for (const s of created) { try { await s.terminate(); } catch { /* best effort */ } }
  seen.ok = false;
  seen.error = String(e && e.stack || e);
  process.stdout.write(JSON.stringify(seen) + '\n');
  process.exit(1);
}
