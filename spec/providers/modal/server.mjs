// A stateful fake of Modal's gRPC API for the specs (spec/providers/modal/modal_spec.lua, spec/sdk/modal.mjs).
//
// It serves modal.client.ModalClient (control plane) and modal.task_command_router.TaskCommandRouter
// (the per-task command router) on two loopback ports with @grpc/grpc-js, from Modal's own protos
// in ../shared/specs/modal/ (loaded at run time; nothing is copied into this repository). The
// official `modal` JS SDK runs against it (spec/sdk/modal.mjs): that is what keeps it honest.
//
// Sandboxes are real: each is an overlayfs mount on this machine (lower: the image's layers over the
// Debian base root filesystem of `cseng images rootfs`; upper and work: the sandbox's own directory)
// that becomes "/" of a bubblewrap sandbox (root without a user namespace, Docker's default
// capabilities, no network), like the local provider's sandboxes (lua/providers/local.lua): a real,
// writable Debian root with dpkg's database and /etc/passwd. Every exec is a new bwrap process whose
// stdout/stderr are kept for TaskExecStdioRead and whose stdin is fed by TaskExecStdinWrite(Stream).
// Images are layers: `FROM <tag>` is the base root filesystem (the tag is recorded, nothing is
// pulled), RUN steps really run in an overlay over the parent's layers whose upper dir becomes the
// image's top layer (as the image's USER, ARG values in their environment), COPY takes
// Image.context_files or the files of Image.context_mount_id (MountPutFile by sha256, then
// MountGetOrCreate; modes and --chown applied), ENV and WORKDIR are kept; a filesystem snapshot
// is a copy of the sandbox's upper dir, a new top layer usable as an image id. Every mount is
// unmounted when its sandbox terminates, its build ends, or the fake exits.
// /__modal/.bin/modal-sandbox-fs-tools (the tool the SDK's sandbox.filesystem execs inside a Modal
// container) is a small stand-in in the fake's own layer under every image.
//   node spec/providers/modal/server.mjs [--log FILE] [--client sdk|adapter] [--http1-only]
//        [--token-id ID --token-secret SECRET] [--proto-root DIR] [--dir DIR] [--rootfs DIR]
//        [--tls-cert F --tls-key F]
//        (--rootfs: the base root filesystem; default $CSENG_LOCAL_ROOTFS; needs root;
//         --tls-cert/--tls-key: the control plane and the command router speak TLS, as Modal's do)
// prints one JSON line {"cp_port", "router_port", "admin_port", "dir"} when it listens, then serves
// until POST /close on the admin port (or SIGTERM). The admin port (HTTP/1.1, JSON):
//   GET  /stats  -> {connections: {cp, router}, rpcs: {Op: n}, creates, terminates, snapshots,
//                    builds, live, sandboxes: [{id, app_id, tags, state, ...}], apps, images,
//                    build_requests: [{image_id, dockerfile_commands, context_files, mount_files}]
//                    (every build started), exec_commands (every TaskExecStart's argv, joined),
//                    mount_puts, mount_refused}
//   POST /set    {latency_ms, latency: {Op: ms}, schedule_ms, build_ms, fail_image_build,
//                 unknown_app, page_size, client, token_id, token_secret, fail: {Op: code}} (merged)
//   POST /close  terminate every sandbox, remove the state directory, exit
// Every RPC is appended to --log as one JSON line in the shared recorded-request shape:
//   {op, method: "POST", path, route, query: {}, headers: <metadata>, body: <decoded request>,
//    client, service, status: <gRPC status name>}
// (a streamed request's messages are logged as body.messages). MODAL_FAKE_DEBUG=1 logs each
// connection's open/close and each stdio stream's end to stderr. A retried unary control-plane
// call (same x-idempotency-key) gets the first call's answer (stats.dedups counts them).
import fs from 'node:fs';
import path from 'node:path';
import net from 'node:net';
import http from 'node:http';
import os from 'node:os';
import crypto from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '../../..');
const require = createRequire(path.join(repo, 'spec/sdk/package.json'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// ---- options ------------------------------------------------------------------------------------
const argv = process.argv.slice(2);
function opt(name, dflt) {
  const i = argv.indexOf('--' + name);
  return i >= 0 ? argv[i + 1] : dflt;
}
const flag = (name) => argv.includes('--' + name);
const protoRoot = opt('proto-root', path.resolve(repo, '../shared/specs/modal'));
const logFile = opt('log', null);
// the default state directory is made only when --dir is not given (an eager default left an empty one behind)
const stateDir = opt('dir', null) ?? fs.mkdtempSync(path.join(os.tmpdir(), 'cseng-modal-fake-'));
// The Debian base root filesystem (`cseng images rootfs`): the lowest layer of every image, so a
// sandbox has a real, writable Debian root (dpkg's database, /etc/passwd, gcc) like Modal's.
const ROOTFS = opt('rootfs', process.env.CSENG_LOCAL_ROOTFS || '');
if (!ROOTFS || !fs.existsSync(path.join(ROOTFS, 'usr/bin')) || !fs.existsSync(path.join(ROOTFS, 'etc/passwd'))) {
  process.stderr.write(`modal fake: the Debian base root filesystem is absent (${ROOTFS || 'no --rootfs given'}): ` +
    'build it with `./cseng images rootfs` (debootstrap, needs root), then pass --rootfs DIR\n');
  process.exit(2);
}
if (process.getuid() !== 0) {
  process.stderr.write('modal fake: sandboxes are overlayfs mounts over the base root filesystem: run as root\n');
  process.exit(2);
}
const BWRAP = process.env.CSENG_BWRAP || '/usr/bin/bwrap';

const settings = {
  client: opt('client', 'unknown'),
  token_id: opt('token-id', 'ak-cseng-fake'),
  token_secret: opt('token-secret', 'as-cseng-fake'),
  latency_ms: 0, // before every RPC
  latency: {}, // {Op: ms} before that RPC
  schedule_ms: 0, // a new sandbox gets its task this long after SandboxCreate
  build_ms: 0, // an image build takes at least this long
  fail_image_build: false, // every new build fails
  unknown_app: false, // AppGetOrCreate answers NOT_FOUND
  page_size: 100, // SandboxList page
  fail: {}, // {Op: 'UNAVAILABLE'}: answer that status instead
  http1_only: flag('http1-only'),
};
// TLS for both gRPC servers (grpc-js's own, ALPN h2), with a certificate made for the run
const TLS = opt('tls-cert', null)
  ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: fs.readFileSync(opt('tls-cert')), private_key: fs.readFileSync(opt('tls-key')) }], false)
  : null;

// ---- state --------------------------------------------------------------------------------------
const stats = { connections: { cp: 0, router: 0 }, rpcs: {}, creates: 0, terminates: 0, snapshots: 0, builds: 0, dedups: 0,
  build_requests: [], exec_commands: [], mount_puts: 0, mount_refused: 0 };
const apps = new Map(); // name -> {app_id, name, environment}
const images = new Map(); // image_id -> {id, key, state: building|ok|failed, root, env, workdir, log[], waiters, result}
const imageByKey = new Map();
const blobs = new Map(); // sha256 hex -> Buffer (MountPutFile)
const mounts = new Map(); // mount_id -> {app_id, files: Map(filename -> {data, mode})}
const sandboxes = new Map(); // sandbox_id -> sandbox
const tasks = new Map(); // task_id -> sandbox
const authTokens = new Set();
const answered = new Map(); // x-idempotency-key -> the response
const jwtKey = crypto.randomBytes(32);
let lastCreatedAt = 0;

const ALNUM = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
function modalId(prefix) { // Modal's ids: a prefix and 22 alphanumerics (the SDK checks sb- ids' shape)
  const b = crypto.randomBytes(22);
  let s = '';
  for (const x of b) s += ALNUM[x % 62];
  return prefix + '-' + s;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const b64url = (s) => Buffer.from(s).toString('base64url');
function signJwt(claims) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify(claims));
  const sig = crypto.createHmac('sha256', jwtKey).update(head + '.' + body).digest('base64url');
  return `${head}.${body}.${sig}`;
}
function verifyJwt(tok) {
  const [head, body, sig] = String(tok || '').split('.');
  if (!sig) return null;
  const want = crypto.createHmac('sha256', jwtKey).update(head + '.' + body).digest('base64url');
  if (want !== sig) return null;
  try {
    const c = JSON.parse(Buffer.from(body, 'base64url').toString());
    return c.exp * 1000 > Date.now() ? c : null;
  } catch { return null; }
}

// ---- the request log ----------------------------------------------------------------------------
function plain(v) { // a decoded message as JSON-able data (bytes as base64)
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return Buffer.from(v).toString('base64');
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') {
    const o = {};
    for (const [k, x] of Object.entries(v)) {
      if (x === undefined) continue;
      if (k.startsWith('_') && x === k.slice(1)) continue; // proto-loader's virtual oneof of a proto3 `optional`
      o[k] = plain(x);
    }
    return o;
  }
  return v;
}
function metaHeaders(md) {
  const h = {};
  for (const [k, v] of Object.entries(md.getMap())) h[k.toLowerCase()] = Buffer.isBuffer(v) ? v.toString('base64') : String(v);
  return h;
}
function logRequest(service, op, md, body, status) {
  if (!logFile) return;
  const p = `/${service}/${op}`;
  const rec = { op, method: 'POST', path: p, route: p, query: {}, headers: metaHeaders(md), body: plain(body),
                client: settings.client, service: service.split('.').pop(), status };
  fs.appendFileSync(logFile, JSON.stringify(rec) + '\n');
}

class RpcError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}
const S = grpc.status;
const statusName = (c) => Object.keys(S).find((k) => S[k] === c) || String(c);

// ---- sandbox roots and processes ----------------------------------------------------------------
const FS_TOOL = `#!/usr/bin/python3
# cseng's Modal fake: a stand-in for Modal's /__modal/.bin/modal-sandbox-fs-tools (the SDK's
# sandbox.filesystem execs it with one JSON argument; errors are a JSON payload on stderr).
import json, os, shutil, stat, sys
def fail(kind, msg):
    sys.stderr.write(json.dumps({"error_kind": kind, "message": msg, "detail": ""}))
    sys.exit(1)
(op, a), = json.loads(sys.argv[1]).items()
p = a.get("path", "")
try:
    if op == "ReadFile":
        if os.path.isdir(p): fail("IsDirectory", "Is a directory")
        with open(p, "rb") as f: sys.stdout.buffer.write(f.read())
    elif op == "WriteFile":
        d = os.path.dirname(p)
        if d: os.makedirs(d, exist_ok=True)
        if os.path.isdir(p): fail("IsDirectory", "Is a directory")
        data = sys.stdin.buffer.read()
        with open(p, "wb") as f: f.write(data)
    elif op == "MakeDirectory":
        if os.path.exists(p): fail("PathAlreadyExists", "Path already exists")
        (os.makedirs if a.get("parents") else os.mkdir)(p)
    elif op == "Remove":
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p) if a.get("recursive") else os.rmdir(p)
        else: os.remove(p)
    elif op == "ListFiles":
        if not os.path.isdir(p): fail("NotDirectory", "Not a directory")
        for n in sorted(os.listdir(p)):
            q = os.path.join(p, n); st = os.lstat(q)
            t = "directory" if stat.S_ISDIR(st.st_mode) else "symlink" if stat.S_ISLNK(st.st_mode) else "file"
            print(json.dumps({"name": n, "path": q, "type": t, "size": st.st_size, "mode": st.st_mode}))
    else: fail("NotSupported", "unknown operation " + op)
except FileNotFoundError: fail("NotFound", "No such file or directory")
except NotADirectoryError: fail("NotDirectory", "Not a directory")
except PermissionError: fail("PermissionDenied", "Permission denied")
`;

// The fake's own layer over the base: Modal's fs tool, the hostname.
function makeModalLayer(root) {
  for (const d of ['etc', '__modal/.bin']) fs.mkdirSync(path.join(root, d), { recursive: true });
  fs.writeFileSync(path.join(root, 'etc/hostname'), 'modal\n');
  fs.writeFileSync(path.join(root, 'etc/hosts'), '127.0.0.1 localhost modal\n::1 localhost\n');
  fs.writeFileSync(path.join(root, '__modal/.bin/modal-sandbox-fs-tools'), FS_TOOL, { mode: 0o755 });
}
const MODAL_LAYER = path.join(stateDir, 'modal-layer');
makeModalLayer(MODAL_LAYER);
const BASE_LOWERS = [MODAL_LAYER, ROOTFS];
function copyDir(from, to) { // cp -a keeps modes, symlinks, ownership, xattrs and overlay whiteouts
  fs.mkdirSync(path.dirname(to), { recursive: true });
  const r = spawnSync('cp', ['-a', from, to]);
  if (r.status !== 0) throw new RpcError(S.INTERNAL, `copying ${from}: ${r.stderr}`);
}
// Every image and sandbox root is an overlayfs at DIR/root: lowers (top first), DIR/upper, DIR/work.
const mounted = new Set();
function mountOverlay(dir, lowers) {
  for (const d of ['upper', 'work', 'root']) fs.mkdirSync(path.join(dir, d), { recursive: true });
  const r = spawnSync('mount', ['-t', 'overlay', 'overlay', '-o',
    `lowerdir=${lowers.join(':')},upperdir=${path.join(dir, 'upper')},workdir=${path.join(dir, 'work')}`, path.join(dir, 'root')]);
  if (r.status !== 0) throw new RpcError(S.INTERNAL, `mounting the overlay at ${dir}/root: ${r.stderr}`);
  mounted.add(path.join(dir, 'root'));
  return path.join(dir, 'root');
}
function umountOverlay(dir) {
  const m = path.join(dir, 'root');
  if (!mounted.has(m)) return;
  spawnSync('umount', ['-l', m]);
  mounted.delete(m);
}
// Docker's default capability set (what a build step or a sandbox command keeps as root).
const CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP', 'SETPCAP',
  'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE'];
function bwrapArgs(root, cwd) {
  // no user namespace: it would map only root, and builds need every id (useradd, chown, dpkg)
  const a = ['--die-with-parent', '--new-session', '--unshare-ipc', '--unshare-pid', '--unshare-net', '--unshare-uts',
    '--unshare-cgroup-try', '--cap-drop', 'ALL'];
  for (const c of CAPS) a.push('--cap-add', 'CAP_' + c);
  a.push('--hostname', 'modal', '--bind', root, '/', '--proc', '/proc', '--dev', '/dev', '--chdir', cwd || '/');
  return a;
}
const BASE_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root', LANG: 'C.UTF-8', TERM: 'dumb' };

// One process in a root: {proc, out: [Buffer], err: [Buffer], outLen, errLen, exit: {code}|{signal}|null, waiters}.
function runIn(root, args, { cwd, env, timeoutSecs, stdin } = {}) {
  const p = { out: [], err: [], exit: null, waiters: [], stdinWritten: 0, stdinClosed: false, timedOut: false };
  const child = spawn(BWRAP, [...bwrapArgs(root, cwd), '--', ...args], { env: { ...BASE_ENV, ...env }, detached: true,
    stdio: ['pipe', 'pipe', 'pipe'] });
  p.child = child;
  const wake = () => { const w = p.waiters; p.waiters = []; for (const f of w) f(); };
  child.stdout.on('data', (d) => { p.out.push(d); wake(); });
  child.stderr.on('data', (d) => { p.err.push(d); wake(); });
  child.stdin.on('error', () => {});
  let timer;
  if (timeoutSecs) timer = setTimeout(() => { p.timedOut = true; kill(p); }, timeoutSecs * 1000);
  child.on('error', (e) => { p.err.push(Buffer.from(String(e) + '\n')); });
  child.on('close', (code, signal) => {
    clearTimeout(timer);
    p.exit = signal ? { signal: os.constants.signals[signal] || 9 } : { code: code ?? 0 };
    wake();
  });
  if (stdin !== undefined) { child.stdin.end(stdin); p.stdinClosed = true; }
  return p;
}
function kill(p) {
  if (p.exit) return;
  try { process.kill(-p.child.pid, 'SIGKILL'); } catch { try { p.child.kill('SIGKILL'); } catch { /* gone */ } }
}
function untilChange(p, ms) { return new Promise((r) => { const t = setTimeout(r, ms); p.waiters.push(() => { clearTimeout(t); r(); }); }); }
async function finished(p) { while (!p.exit) await untilChange(p, 60000); return p.exit; }

// ---- images -------------------------------------------------------------------------------------
function parseCommands(cmds) { // dockerfile_commands -> steps (continuation lines joined)
  const steps = [];
  let cur = '';
  for (const raw of cmds) {
    for (const line of String(raw).split('\n')) {
      if (!cur && (/^\s*#/.test(line) || !line.trim())) continue;
      if (/\\\s*$/.test(line)) { cur += line.replace(/\\\s*$/, ' '); continue; }
      cur += line;
      const m = cur.trim().match(/^(\w+)\s*(.*)$/s);
      if (m) steps.push({ op: m[1].toUpperCase(), arg: m[2] });
      cur = '';
    }
  }
  return steps;
}
function envPairs(arg) { // ENV A=1 B="x y" | ENV A 1
  const out = {};
  if (!arg.includes('=')) { const [k, ...v] = arg.split(/\s+/); out[k] = v.join(' '); return out; }
  for (const m of arg.matchAll(/(\w+)=("([^"]*)"|'([^']*)'|(\S*))/g)) out[m[1]] = m[3] ?? m[4] ?? m[5] ?? '';
  return out;
}

async function build(img, req) {
  const log = (s) => { img.log.push({ id: String(img.log.length + 1), data: s }); wakeImage(img); };
  const fail = (msg) => { img.state = 'failed'; img.result = { status: 2, exception: msg }; log(msg + '\n'); };
  const t0 = Date.now();
  try {
    stats.builds++;
    const steps = parseCommands(req.image?.dockerfile_commands || []);
    const bases = new Map((req.image?.base_images || []).map((b) => [b.docker_tag, b.image_id]));
    const ctx = new Map((req.image?.context_files || []).map((f) => [f.filename.replace(/^\/+/, ''), { data: f.data }]));
    if (req.image?.context_mount_id) {
      const m = mounts.get(req.image.context_mount_id);
      if (!m) return fail(`context mount ${req.image.context_mount_id} not found`);
      for (const [name, f] of m.files) ctx.set(name.replace(/^\/+/, ''), f);
    }
    const args = {}; // ARG values in effect: environment variables of later RUN steps (ENV wins)
    if (!steps.length || steps[0].op !== 'FROM') return fail('Dockerfile commands must start with FROM');
    const from = steps[0].arg.split(/\s+/)[0];
    let parent;
    if (bases.has(from)) {
      const base = images.get(bases.get(from));
      if (!base || base.state !== 'ok') return fail(`base image ${bases.get(from)} is not built`);
      parent = base.lowers;
      img.env = { ...base.env };
      img.workdir = base.workdir;
      img.user = base.user;
    } else {
      parent = BASE_LOWERS;
      img.env = {};
      img.tag = from;
    }
    // the build runs in an overlay over the parent's layers; its upper dir becomes the image's top layer
    img.dir = path.join(stateDir, 'images', img.id);
    img.root = mountOverlay(img.dir, parent);
    img.parent = parent;
    log(`#1 FROM ${from}\n`);
    if (settings.build_ms) await sleep(settings.build_ms);
    if (settings.fail_image_build) return fail('Image build failed: a step exited with code 1 (forced by the fake: fail_image_build)');
    for (const [i, s] of steps.slice(1).entries()) {
      log(`#${i + 2} ${s.op} ${s.arg}\n`);
      if (s.op === 'RUN') {
        let cmd = s.arg.trim().startsWith('[') ? JSON.parse(s.arg) : ['/bin/sh', '-c', s.arg];
        const env = { ...args, ...img.env };
        if (img.user && !['root', '0', '0:0', 'root:root'].includes(img.user)) { // as the USER, HOME from passwd
          const u = userOf(img.root, img.user);
          if (!u) return fail(`USER ${img.user}: no such user in the image's /etc/passwd`);
          cmd = ['setpriv', `--reuid=${u.uid}`, `--regid=${u.gid}`, u.name ? '--init-groups' : '--clear-groups', '--', ...cmd];
          Object.assign(env, { HOME: u.home || '/', USER: u.name || String(u.uid) }, img.env);
        }
        const p = runIn(img.root, cmd, { cwd: img.workdir || '/', env, timeoutSecs: 600 });
        const exit = await finished(p);
        const out = Buffer.concat([...p.out, ...p.err]).toString();
        if (out) log(out);
        if (exit.code !== 0) return fail(`Image build failed: RUN ${s.arg} exited with ${JSON.stringify(exit)}`);
      } else if (s.op === 'ENV') {
        Object.assign(img.env, envPairs(s.arg));
      } else if (s.op === 'ARG') {
        const [, k, v] = s.arg.trim().match(/^(\w+)(?:=(.*))?$/) || [];
        if (k) args[k] = (v ?? '').replace(/^"(.*)"$/, '$1').replace(/^'(.*)'$/, '$1');
      } else if (s.op === 'USER') {
        img.user = s.arg.trim();
      } else if (s.op === 'WORKDIR') {
        img.workdir = path.posix.resolve(img.workdir || '/', s.arg.trim());
        fs.mkdirSync(path.join(img.root, img.workdir), { recursive: true });
      } else if (s.op === 'COPY' || s.op === 'ADD') {
        const words = s.arg.trim().split(/\s+/);
        const chown = (words.find((x) => x.startsWith('--chown=')) || '').slice(8);
        const owner = chown ? ownerOf(img.root, chown) : null;
        if (chown && !owner) return fail(`COPY --chown=${chown}: no such user or group in the image`);
        const parts = words.filter((x) => !x.startsWith('--'));
        const dest = parts.pop();
        for (const src of parts) {
          const key = src.replace(/^\.?\/+/, '');
          const hits = [...ctx.keys()].filter((k) => k === key || k.startsWith(key.replace(/\/?$/, '/')) || key === '.');
          if (!hits.length) return fail(`COPY ${src}: not in the image's context files`);
          for (const k of hits) {
            const rel = key === '.' || k === key ? path.basename(k) : k.slice(key.replace(/\/?$/, '/').length);
            const abs = path.posix.resolve(img.workdir || '/', dest);
            const target = dest.endsWith('/') || hits.length > 1 || k !== key ? path.posix.join(abs, rel) : abs;
            fs.mkdirSync(path.dirname(path.join(img.root, target)), { recursive: true });
            const f = ctx.get(k);
            fs.writeFileSync(path.join(img.root, target), f.data);
            fs.chmodSync(path.join(img.root, target), f.mode ?? 0o644);
            if (owner) fs.chownSync(path.join(img.root, target), owner.uid, owner.gid);
          }
        }
      } // CMD, ENTRYPOINT, LABEL, EXPOSE, SHELL: recorded in the log only (commands run as root,
      //    whatever the image's last USER)
    }
    umountOverlay(img.dir);
    img.lowers = [path.join(img.dir, 'upper'), ...img.parent];
    img.state = 'ok';
    img.result = { status: 1 };
    log(`built ${img.id} in ${Date.now() - t0} ms\n`);
  } catch (e) {
    fail('Image build failed: ' + e.message);
  } finally {
    if (img.dir) umountOverlay(img.dir);
  }
}
// A USER or --chown spec (name, uid, name:group, uid:gid) through the image's own passwd/group.
function idTable(root, file) {
  const rows = [];
  for (const l of (fs.existsSync(path.join(root, file)) ? fs.readFileSync(path.join(root, file), 'utf8') : '').split('\n')) {
    const f = l.split(':');
    if (f.length >= 4) rows.push(f);
  }
  return rows;
}
function userOf(root, spec) {
  const [u, g] = String(spec).split(':');
  const row = idTable(root, 'etc/passwd').find((f) => f[0] === u || f[2] === u);
  if (!row && !/^\d+$/.test(u)) return null;
  let gid = row ? Number(row[3]) : Number(u);
  if (g !== undefined) {
    const grow = idTable(root, 'etc/group').find((f) => f[0] === g || f[2] === g);
    if (!grow && !/^\d+$/.test(g)) return null;
    gid = grow ? Number(grow[2]) : Number(g);
  }
  return { uid: row ? Number(row[2]) : Number(u), gid, name: row ? row[0] : null, home: row ? row[5] : '/' };
}
function ownerOf(root, spec) {
  const [u, g] = String(spec).split(':');
  const user = userOf(root, u);
  if (!user) return null;
  if (g === undefined) return user;
  const grow = idTable(root, 'etc/group').find((f) => f[0] === g || f[2] === g);
  if (!grow && !/^\d+$/.test(g)) return null;
  return { uid: user.uid, gid: grow ? Number(grow[2]) : Number(g) };
}
function wakeImage(img) { const w = img.waiters; img.waiters = []; for (const f of w) f(); }

// ---- sandboxes ----------------------------------------------------------------------------------
function terminate(sb, status = 3, exception = '') {
  if (sb.state === 'finished') return;
  sb.state = 'finished';
  sb.result = { status, exception };
  clearTimeout(sb.lifetime);
  clearTimeout(sb.scheduler);
  for (const p of sb.execs.values()) kill(p);
  stats.terminates++;
  umountOverlay(sb.dir);
  fs.rmSync(sb.dir, { recursive: true, force: true });
  const w = sb.waiters; sb.waiters = []; for (const f of w) f();
}
function untilSandbox(sb, ms) { return new Promise((r) => { const t = setTimeout(r, ms); sb.waiters.push(() => { clearTimeout(t); r(); }); }); }
function sandboxOf(id) {
  const sb = sandboxes.get(id);
  if (!sb) throw new RpcError(S.NOT_FOUND, `Sandbox ${id} not found`);
  return sb;
}
function taskOf(taskId) {
  const sb = tasks.get(taskId);
  if (!sb) throw new RpcError(S.NOT_FOUND, `Task ${taskId} not found`);
  if (sb.state === 'finished') throw new RpcError(S.NOT_FOUND, `Task ${taskId} has finished (sandbox ${sb.id} terminated)`);
  return sb;
}
function execOf(req) {
  const sb = taskOf(req.task_id);
  const p = sb.execs.get(req.exec_id);
  if (!p) throw new RpcError(S.NOT_FOUND, `exec ${req.exec_id} not found in task ${req.task_id}`);
  return p;
}
function info(sb) {
  return { id: sb.id, created_at: sb.created_at, app_id: sb.app_id, tags: sb.tags, image_id: sb.image_id,
    timeout_secs: sb.timeout_secs, task_info: sb.task_id ? { id: sb.task_id, started_at: sb.created_at } : undefined };
}

// ---- the control plane --------------------------------------------------------------------------
const cp = {
  AuthTokenGet() {
    const token = signJwt({ sub: settings.token_id, exp: Math.floor(Date.now() / 1000) + 3600 });
    authTokens.add(token);
    return { token };
  },
  EnvironmentGetOrCreate(req) {
    const name = req.deployment_name || 'main';
    return { environment_id: 'en-' + crypto.createHash('sha256').update(name).digest('hex').slice(0, 22),
      metadata: { name, settings: { image_builder_version: '2025.06', webhook_suffix: 'modal.run' } } };
  },
  AppGetOrCreate(req) {
    const env = req.environment_name || 'main';
    const key = env + '/' + req.app_name;
    if (!req.app_name) throw new RpcError(S.INVALID_ARGUMENT, 'app_name is required');
    if (settings.unknown_app || (!apps.has(key) && !req.object_creation_type)) {
      throw new RpcError(S.NOT_FOUND, `App '${req.app_name}' not found in environment '${env}'`);
    }
    if (!apps.has(key)) apps.set(key, { app_id: modalId('ap'), name: req.app_name, environment: env });
    return { app_id: apps.get(key).app_id };
  },
  ImageGetOrCreate(req) {
    if (!req.app_id || ![...apps.values()].some((a) => a.app_id === req.app_id)) throw new RpcError(S.NOT_FOUND, `App ${req.app_id} not found`);
    const im = req.image || {};
    const mount = im.context_mount_id ? mounts.get(im.context_mount_id) : null;
    if (im.context_mount_id && (!mount || mount.app_id !== req.app_id)) {
      throw new RpcError(S.NOT_FOUND, `Mount ${im.context_mount_id} not found for app ${req.app_id}`);
    }
    const mountKey = mount ? [...mount.files].map(([n, f]) => [n, f.sha, f.mode]) : [];
    const key = crypto.createHash('sha256').update(JSON.stringify([im.dockerfile_commands || [], im.base_images || [],
      (im.context_files || []).map((f) => [f.filename, Buffer.from(f.data || '').toString('base64')]), mountKey])).digest('hex');
    const known = images.get(imageByKey.get(key));
    if (known && !req.force_build && known.state !== 'failed') {
      return known.state === 'ok' ? { image_id: known.id, result: known.result, metadata: {} } : { image_id: known.id };
    }
    const img = { id: modalId('im'), key, state: 'building', log: [], waiters: [], env: {} };
    images.set(img.id, img);
    stats.build_requests.push({ image_id: img.id, dockerfile_commands: im.dockerfile_commands || [],
      base_images: im.base_images || [], context_files: (im.context_files || []).map((f) => f.filename),
      context_mount_id: im.context_mount_id || '', mount_files: mount ? [...mount.files.keys()] : [] });
    imageByKey.set(key, img.id);
    build(img, req);
    return { image_id: img.id };
  },
  ImageFromId(req) {
    const img = images.get(req.image_id);
    if (!img || img.state !== 'ok') throw new RpcError(S.NOT_FOUND, `Image ${req.image_id} not found`);
    return { image_id: img.id, metadata: {} };
  },
  MountPutFile(req) { // by hash: {exists}; with data: stored once its sha256 checks
    const sha = String(req.sha256_hex || '');
    if (!/^[0-9a-f]{64}$/.test(sha)) throw new RpcError(S.INVALID_ARGUMENT, 'sha256_hex must be 64 lowercase hex digits');
    if (req.data_oneof === 'data_blob_id') throw new RpcError(S.UNIMPLEMENTED, 'blob uploads are not implemented by the fake');
    if (req.data_oneof === 'data') {
      const data = Buffer.from(req.data || []);
      if (crypto.createHash('sha256').update(data).digest('hex') !== sha) {
        stats.mount_refused++;
        throw new RpcError(S.INVALID_ARGUMENT, `data does not match sha256_hex ${sha}`);
      }
      blobs.set(sha, data);
      stats.mount_puts++;
      return { exists: true };
    }
    return { exists: blobs.has(sha) };
  },
  MountGetOrCreate(req) {
    if (req.object_creation_type !== 4) { // ANONYMOUS_OWNED_BY_APP: what a build context is
      throw new RpcError(S.UNIMPLEMENTED, 'only anonymous app-owned mounts are implemented by the fake');
    }
    if (!req.app_id || ![...apps.values()].some((a) => a.app_id === req.app_id)) throw new RpcError(S.NOT_FOUND, `App ${req.app_id} not found`);
    const files = new Map();
    for (const f of req.files || []) {
      if (!f.filename || !f.filename.startsWith('/')) throw new RpcError(S.INVALID_ARGUMENT, `mount file name must be absolute: ${f.filename}`);
      const data = blobs.get(f.sha256_hex);
      if (!data) { stats.mount_refused++; throw new RpcError(S.FAILED_PRECONDITION, `${f.filename}: sha256 ${f.sha256_hex} was never uploaded (MountPutFile)`); }
      files.set(f.filename, { data, sha: f.sha256_hex, mode: f.mode ?? 0o644 });
    }
    const id = modalId('mo');
    mounts.set(id, { app_id: req.app_id, files });
    return { mount_id: id, handle_metadata: { content_checksum_sha256_hex: crypto.createHash('sha256')
      .update(JSON.stringify([...files].map(([n, f]) => [n, f.sha]))).digest('hex') } };
  },
  async *ImageJoinStreaming(req) {
    const img = images.get(req.image_id);
    if (!img) throw new RpcError(S.NOT_FOUND, `Image ${req.image_id} not found`);
    const deadline = Date.now() + Math.max(1, req.timeout || 55) * 1000;
    let next = req.last_entry_id ? Number(req.last_entry_id) : 0;
    while (true) {
      while (next < img.log.length) {
        const e = img.log[next++];
        yield { task_logs: [{ data: e.data, file_descriptor: 1 }], entry_id: e.id };
      }
      if (img.state !== 'building') { yield { result: img.result, eof: true, metadata: img.state === 'ok' ? {} : undefined }; return; }
      if (Date.now() >= deadline) return;
      await new Promise((r) => { const t = setTimeout(r, deadline - Date.now()); img.waiters.push(() => { clearTimeout(t); r(); }); });
    }
  },
  SandboxCreate(req) {
    if (!req.app_id || ![...apps.values()].some((a) => a.app_id === req.app_id)) throw new RpcError(S.NOT_FOUND, `App ${req.app_id} not found`);
    const def = req.definition || {};
    const img = images.get(def.image_id);
    if (!img) throw new RpcError(S.NOT_FOUND, `Image ${def.image_id} not found`);
    if (img.state !== 'ok') throw new RpcError(S.FAILED_PRECONDITION, `Image ${def.image_id} is not built (${img.state})`);
    const id = modalId('sb');
    const dir = path.join(stateDir, 'sandboxes', id);
    mountOverlay(dir, img.lowers);
    let created = Date.now() / 1000;
    if (created <= lastCreatedAt) created = lastCreatedAt + 1e-6;
    lastCreatedAt = created;
    const sb = { id, dir, root: path.join(dir, 'root'), lowers: img.lowers, app_id: req.app_id, image_id: img.id, tags: req.tags || [],
      definition: def, state: 'pending', created_at: created, execs: new Map(), waiters: [],
      env: { ...img.env, ...(def.environment_variables?.contents || {}) }, workdir: def.workdir || img.workdir || '/',
      timeout_secs: def.timeout_secs || 300, resources: def.resources || {} };
    fs.mkdirSync(path.join(sb.root, sb.workdir), { recursive: true });
    sandboxes.set(id, sb);
    stats.creates++;
    const schedule = () => {
      sb.task_id = modalId('ta');
      tasks.set(sb.task_id, sb);
      sb.state = 'running';
      const w = sb.waiters; sb.waiters = []; for (const f of w) f();
    };
    if (settings.schedule_ms) sb.scheduler = setTimeout(schedule, settings.schedule_ms); else schedule();
    sb.lifetime = setTimeout(() => terminate(sb, 4, `Sandbox timed out after ${sb.timeout_secs} s`), sb.timeout_secs * 1000);
    return { sandbox_id: id, metadata: { app_id: req.app_id } };
  },
  async SandboxGetTaskId(req) {
    const sb = sandboxOf(req.sandbox_id);
    if (!sb.task_id && sb.state !== 'finished' && req.timeout) await untilSandbox(sb, req.timeout * 1000);
    if (sb.state === 'finished') return { task_id: sb.task_id, task_result: sb.result };
    return sb.task_id ? { task_id: sb.task_id } : {};
  },
  TaskGetCommandRouterAccess(req) {
    const sb = taskOf(req.task_id);
    return { jwt: signJwt({ task_id: sb.task_id, sandbox_id: sb.id, exp: Math.floor(Date.now() / 1000) + 3600 }),
      url: `https://127.0.0.1:${routerPort}` };
  },
  async SandboxWait(req) {
    const sb = sandboxOf(req.sandbox_id);
    if (sb.state !== 'finished' && req.timeout) await untilSandbox(sb, req.timeout * 1000);
    return sb.state === 'finished' ? { result: sb.result, metadata: { app_id: sb.app_id } } : { metadata: { app_id: sb.app_id } };
  },
  SandboxTerminate(req) {
    const sb = sandboxOf(req.sandbox_id);
    const existing = sb.state === 'finished' ? sb.result : undefined;
    terminate(sb);
    return { existing_result: existing };
  },
  SandboxList(req) {
    const want = req.tags || [];
    const rows = [...sandboxes.values()]
      .filter((sb) => req.include_finished || sb.state !== 'finished')
      .filter((sb) => !req.app_id || sb.app_id === req.app_id)
      .filter((sb) => !req.before_timestamp || sb.created_at < req.before_timestamp)
      .filter((sb) => want.every((t) => sb.tags.some((x) => x.tag_name === t.tag_name && x.tag_value === t.tag_value)))
      .sort((a, b) => b.created_at - a.created_at)
      .slice(0, settings.page_size);
    return { sandboxes: rows.map(info) };
  },
  SandboxTagsGet(req) { return { tags: sandboxOf(req.sandbox_id).tags }; },
  async SandboxSnapshotFs(req) {
    const sb = sandboxOf(req.sandbox_id);
    if (sb.state !== 'running') throw new RpcError(S.FAILED_PRECONDITION, `Sandbox ${sb.id} is ${sb.state}`);
    return { image_id: snapshot(sb), result: { status: 1 } };
  },
};
function snapshot(sb) {
  const img = { id: modalId('im'), key: 'snapshot:' + sb.id, state: 'ok', log: [], waiters: [], env: { ...sb.env },
    workdir: sb.workdir, result: { status: 1 } };
  // a snapshot of an overlay sandbox: a copy of its upper dir, a new top layer over its lowers
  img.dir = path.join(stateDir, 'images', img.id);
  copyDir(path.join(sb.dir, 'upper'), path.join(img.dir, 'layer'));
  img.lowers = [path.join(img.dir, 'layer'), ...sb.lowers];
  images.set(img.id, img);
  stats.snapshots++;
  return img.id;
}

// ---- the command router -------------------------------------------------------------------------
const router = {
  TaskExecStart(req) {
    const sb = taskOf(req.task_id);
    if (!req.exec_id) throw new RpcError(S.INVALID_ARGUMENT, 'exec_id is required');
    if (sb.execs.has(req.exec_id)) return {}; // idempotent on the client-chosen id
    if (!req.command_args?.length) throw new RpcError(S.INVALID_ARGUMENT, 'command_args is empty');
    stats.exec_commands.push(req.command_args.join(' '));
    const p = runIn(sb.root, req.command_args, { cwd: req.workdir || sb.workdir, env: { ...sb.env, ...(req.env || {}) },
      timeoutSecs: req.timeout_secs || 0 });
    p.stdoutPiped = req.stdout_config === 1;
    p.stderrPiped = req.stderr_config === 1;
    sb.execs.set(req.exec_id, p);
    return {};
  },
  async *TaskExecStdioRead(req) {
    const p = execOf(req);
    const chunks = req.file_descriptor === 1 ? p.err : p.out;
    const piped = req.file_descriptor === 1 ? p.stderrPiped : p.stdoutPiped;
    let off = Number(req.offset || 0);
    let i = 0, pos = 0; // chunk index and the byte offset where it starts
    while (true) {
      for (; i < chunks.length; pos += chunks[i].length, i++) {
        const c = chunks[i];
        if (piped && pos + c.length > off) { yield { data: c.subarray(Math.max(0, off - pos)) }; off = pos + c.length; }
      }
      if (p.exit) {
        // stdout/stderr "close" comes before the process "close": nothing is left once exit is set
        if (i >= chunks.length) {
          if (process.env.MODAL_FAKE_DEBUG) console.error(`stdio ${req.exec_id} fd ${req.file_descriptor} done at ${off}`);
          return;
        }
        continue;
      }
      await untilChange(p, 60000);
    }
  },
  async TaskExecWait(req) {
    const p = execOf(req);
    await Promise.race([finished(p), sleep(55000)]);
    if (!p.exit) throw new RpcError(S.DEADLINE_EXCEEDED, 'exec still running');
    return p.exit;
  },
  TaskExecPoll(req) { return execOf(req).exit || {}; },
  TaskExecStdinWrite(req) {
    const p = execOf(req);
    if (p.stdinClosed) throw new RpcError(S.FAILED_PRECONDITION, 'stdin is closed');
    const off = Number(req.offset || 0);
    const data = Buffer.from(req.data || []);
    if (off + data.length > p.stdinWritten) { // a resent prefix is skipped
      p.child.stdin.write(data.subarray(Math.max(0, p.stdinWritten - off)));
      p.stdinWritten = off + data.length;
    }
    if (req.eof) { p.child.stdin.end(); p.stdinClosed = true; }
    return {};
  },
  TaskExecStdinStatus(req) { const p = execOf(req); return { num_bytes_written: p.stdinWritten, closed: p.stdinClosed }; },
  async TaskSnapshotFilesystem(req) {
    const sb = taskOf(req.task_id);
    return { image_id: snapshot(sb) };
  },
};
// client streaming: the messages, then the answer
router.TaskExecStdinWriteStream = async (msgs) => {
  let p;
  for (const m of msgs) {
    if (m.start) { p = execOf(m.start); if (p.stdinClosed) throw new RpcError(S.FAILED_PRECONDITION, 'stdin is closed'); }
    else if (!p) throw new RpcError(S.INVALID_ARGUMENT, 'the first message must be start');
    else if (m.data) { const d = Buffer.from(m.data); p.child.stdin.write(d); p.stdinWritten += d.length; }
    else if (m.end) { p.child.stdin.end(); p.stdinClosed = true; }
  }
  return {};
};

// ---- gRPC plumbing ------------------------------------------------------------------------------
const pkgDef = protoLoader.loadSync(['modal_proto/api.proto', 'modal_proto/task_command_router.proto'], {
  keepCase: true, longs: Number, enums: Number, bytes: Buffer, defaults: false, oneofs: true, includeDirs: [protoRoot],
});
const loaded = grpc.loadPackageDefinition(pkgDef);

function checkAuth(kind, op, md) {
  const get = (k) => { const v = md.get(k); return v.length ? String(v[0]) : ''; };
  if (kind === 'cp') {
    if (get('x-modal-token-id') !== settings.token_id || get('x-modal-token-secret') !== settings.token_secret) {
      throw new RpcError(S.UNAUTHENTICATED, 'Token ID or secret is invalid (x-modal-token-id / x-modal-token-secret)');
    }
    const tok = get('x-modal-auth-token');
    if (op !== 'AuthTokenGet' && tok && !authTokens.has(tok)) throw new RpcError(S.UNAUTHENTICATED, 'x-modal-auth-token is invalid or expired');
  } else {
    const m = get('authorization').match(/^Bearer (.+)$/);
    const claims = m && verifyJwt(m[1]);
    if (!claims) throw new RpcError(S.UNAUTHENTICATED, 'missing or invalid command router JWT (authorization: Bearer)');
    return claims;
  }
  return null;
}
async function before(op) {
  stats.rpcs[op] = (stats.rpcs[op] || 0) + 1;
  const ms = (settings.latency_ms || 0) + (settings.latency[op] || 0);
  if (ms) await sleep(ms);
  if (settings.fail[op]) throw new RpcError(S[settings.fail[op]] ?? S.UNAVAILABLE, `${op}: forced failure ${settings.fail[op]}`);
}
function grpcError(e) {
  if (e instanceof RpcError) return { code: e.code, details: e.message };
  console.error(e);
  return { code: S.INTERNAL, details: String(e && e.stack || e) };
}

function makeService(kind, service, impl) {
  const handlers = {};
  for (const [name, def] of Object.entries(service.service)) {
    const op = def.originalName ? def.originalName[0].toUpperCase() + def.originalName.slice(1) : name;
    const fn = impl[name];
    const svc = def.path.split('/')[1];
    const missing = () => new RpcError(S.UNIMPLEMENTED, `${op} is not implemented by cseng's Modal fake`);
    if (!def.requestStream && !def.responseStream) {
      handlers[name] = async (call, cb) => {
        let status = 'OK';
        try {
          const claims = checkAuth(kind, name, call.metadata);
          if (claims && call.request.task_id && claims.task_id !== call.request.task_id) {
            throw new RpcError(S.PERMISSION_DENIED, `the JWT is for task ${claims.task_id}, not ${call.request.task_id}`);
          }
          await before(name);
          if (!fn) throw missing();
          // a retried call (same x-idempotency-key) gets the first answer, as Modal dedups them
          const key = kind === 'cp' ? String(call.metadata.get('x-idempotency-key')[0] || '') : '';
          if (key && answered.has(key)) { stats.dedups++; cb(null, answered.get(key)); }
          else {
            const out = await fn(call.request);
            if (key) answered.set(key, out);
            cb(null, out);
          }
        } catch (e) { const g = grpcError(e); status = statusName(g.code); cb(g); }
        logRequest(svc, name, call.metadata, call.request, status);
      };
    } else if (def.responseStream && !def.requestStream) {
      handlers[name] = async (call) => {
        let status = 'OK';
        try {
          const claims = checkAuth(kind, name, call.metadata);
          if (claims && call.request.task_id && claims.task_id !== call.request.task_id) {
            throw new RpcError(S.PERMISSION_DENIED, `the JWT is for task ${claims.task_id}, not ${call.request.task_id}`);
          }
          await before(name);
          if (!fn) throw missing();
          for await (const m of fn(call.request)) { if (call.cancelled) break; call.write(m); }
          call.end();
          if (process.env.MODAL_FAKE_DEBUG) console.error(`stream ${name} ended (cancelled=${call.cancelled})`);
        } catch (e) { const g = grpcError(e); status = statusName(g.code); call.emit('error', g); }
        logRequest(svc, name, call.metadata, call.request, status);
      };
    } else if (def.requestStream && !def.responseStream) {
      handlers[name] = (call, cb) => {
        const msgs = [];
        call.on('data', (m) => msgs.push(m));
        call.on('end', async () => {
          let status = 'OK';
          try {
            checkAuth(kind, name, call.metadata);
            await before(name);
            if (!fn) throw missing();
            cb(null, await fn(msgs));
          } catch (e) { const g = grpcError(e); status = statusName(g.code); cb(g); }
          logRequest(svc, name, call.metadata, { messages: msgs }, status);
        });
      };
    } else {
      handlers[name] = (call) => { call.emit('error', { code: S.UNIMPLEMENTED, details: `${op} is not implemented` }); };
    }
  }
  return handlers;
}

let routerPort = 0;
function listen(kind, server) { // a TCP listener that counts connections and hands them to grpc-js
  return new Promise((resolve) => {
    const inject = server && server.createConnectionInjector(TLS || grpc.ServerCredentials.createInsecure());
    const tcp = net.createServer((sock) => {
      stats.connections[kind]++;
      if (process.env.MODAL_FAKE_DEBUG) {
        const n = stats.connections[kind], t0 = Date.now();
        console.error(`conn ${kind}#${n} open`);
        sock.on('close', (hadErr) => console.error(`conn ${kind}#${n} closed after ${Date.now() - t0} ms err=${hadErr}`));
        sock.once('data', (d) => console.error(`conn ${kind}#${n} first bytes ${JSON.stringify(d.subarray(0, 40).toString('latin1'))}`));
      }
      if (inject) inject.injectConnection(sock);
    });
    tcp.listen(0, '127.0.0.1', () => resolve({ tcp, port: tcp.address().port }));
  });
}

const cpServer = new grpc.Server();
cpServer.addService(loaded.modal.client.ModalClient.service, makeService('cp', loaded.modal.client.ModalClient, cp));
const routerServer = new grpc.Server();
routerServer.addService(loaded.modal.task_command_router.TaskCommandRouter.service,
  makeService('router', loaded.modal.task_command_router.TaskCommandRouter, router));

let cpListen;
if (settings.http1_only) {
  // A server that speaks HTTP/1.1 only (an HTTP proxy or a REST endpoint in the way): HTTP/2's
  // connection preface gets what Node's HTTP/1.1 parser answers to it (400 Bad Request).
  const h1 = http.createServer((req, res) => { res.writeHead(404, { 'content-type': 'text/plain' }); res.end('not found\n'); });
  cpListen = await new Promise((resolve) => {
    const tcp = net.createServer((sock) => { stats.connections.cp++; h1.emit('connection', sock); });
    tcp.listen(0, '127.0.0.1', () => resolve({ tcp, port: tcp.address().port }));
  });
} else {
  cpListen = await listen('cp', cpServer);
}
const routerListen = await listen('router', routerServer);
routerPort = routerListen.port;

// ---- admin --------------------------------------------------------------------------------------
function close() {
  for (const sb of sandboxes.values()) terminate(sb);
  for (const m of mounted) spawnSync('umount', ['-l', m]); // builds still running
  mounted.clear();
  fs.rmSync(stateDir, { recursive: true, force: true });
  process.exit(0);
}
const admin = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    const reply = (o) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify(o)); };
    if (req.url === '/stats') {
      const list = [...sandboxes.values()].map((sb) => ({ ...info(sb), state: sb.state, resources: sb.resources,
        definition: plain(sb.definition), result: sb.result, execs: sb.execs.size }));
      return reply({ ...stats, live: list.filter((s) => s.state !== 'finished').length, sandboxes: list,
        apps: [...apps.values()], images: [...images.values()].map((i) => ({ id: i.id, state: i.state, tag: i.tag, result: i.result })),
        settings });
    }
    if (req.url === '/set' && req.method === 'POST') {
      const o = body ? JSON.parse(body) : {};
      for (const [k, v] of Object.entries(o)) settings[k] = v;
      return reply(settings);
    }
    if (req.url === '/close' && req.method === 'POST') { reply({ ok: true }); setTimeout(close, 10); return; }
    res.writeHead(404); res.end();
  });
});
await new Promise((r) => admin.listen(0, '127.0.0.1', r));
process.on('exit', () => { for (const m of mounted) spawnSync('umount', ['-l', m]); });
process.on('SIGTERM', close);
process.on('SIGINT', close);
process.stdout.write(JSON.stringify({ cp_port: cpListen.port, router_port: routerPort, admin_port: admin.address().port,
  dir: stateDir }) + '\n');
