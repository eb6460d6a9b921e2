#!/usr/bin/python3
"""A stateful loopback fake of AWS Lambda MicroVMs (API version 2025-09-09), S3 PutObject and the
per-microVM endpoint proxy, for lua/providers/aws_microvm.lua and the official
@aws-sdk/client-lambda-microvms (spec/sdk/aws_microvm.mjs).

  python3 spec/providers/aws_microvm/fake.py --agent build/microvm-agent/cseng-agent --log requests.jsonl [--config cfg.json]

prints one JSON line when it listens: {"lambda": URL, "s3": URL, "control": URL, "pid": N}.

Every control-plane and S3 request is checked with botocore's SigV4 implementation (through
spec/providers/aws_microvm/sigv4_verify.py, which is not ours): an unknown access key is 403
UnrecognizedClientException, a wrong secret or a header changed after signing 403
InvalidSignatureException (S3: the XML SignatureDoesNotMatch), as is a request time more than 15
minutes off, or a body that does not match the X-Amz-Content-Sha256 it was signed with.

The control plane (REST-JSON; paths, status codes and members from the SDK's dist-es/schemas):
  RunMicrovm              POST   /2025-09-09/microvms                       200 (clientToken idempotent)
  GetMicrovm              GET    /2025-09-09/microvms/{id}                  200 PENDING -> RUNNING
  TerminateMicrovm        DELETE /2025-09-09/microvms/{id}                  200 {} (again: 200; unknown: 404)
  ListMicrovms            GET    /2025-09-09/microvms?maxResults&nextToken&imageIdentifier&imageVersion
  CreateMicrovmAuthToken  POST   /2025-09-09/microvms/{id}/auth-token       200 {authToken{X-aws-proxy-auth}}
  TagResource             POST   /2017-03-31/tags/{arn}                     204
  ListTags                GET    /2017-03-31/tags/{arn}                     200 {Tags}
  UntagResource           DELETE /2017-03-31/tags/{arn}?tagKeys=            204
  CreateMicrovmImage      POST   /2025-09-09/microvm-images                 201 CREATING -> CREATED | CREATE_FAILED
  GetMicrovmImage         GET    /2025-09-09/microvm-images/{id}            200
  GetMicrovmImageVersion  GET    /2025-09-09/microvm-images/{id}/versions/{v} 200 (stateReason of a failed build)
  ListManagedMicrovmImages GET   /2025-09-09/managed-microvm-images         200
Errors are restJson1: the x-amzn-errortype header and {"__type", "message", ...members} in the body.

S3 (path style): PUT/GET/HEAD /{bucket}/{key}, signed for service s3 with x-amz-content-sha256.

Each microVM is the real exec agent (the native build given by --agent) inside a bubblewrap
sandbox whose "/" is the microVM's own directory (host /usr read-only, so state persists between
calls and nothing touches the host's /workspace), listening on a loopback port. The microVM's
endpoint (http://127.0.0.1:PORT, one listener per microVM, as each real microVM has its own
endpoint) is a proxy that requires X-aws-proxy-auth (a token from CreateMicrovmAuthToken whose
allowedPorts cover the target port), selects the port by X-aws-proxy-port (else 8080, as the
Lambda developer guide documents), strips both headers and forwards to the agent. The image's
hooks are called as the service does: /ready (and /validate) while an image is built, /run with
the runHookPayload as its body when a microVM starts, /terminate when it is terminated.

Switches (POST /_fake/set on the control URL, or --config; all optional):
  pending_seconds (0.2)      how long a new microVM stays PENDING
  endpoint_lag (0)           seconds after RUNNING during which the endpoint answers 502
  image_build_seconds (0.2)  how long an image stays CREATING
  image_fail (false)         the next image builds end CREATE_FAILED
  drop_create (0)            the next N RunMicrovm calls create the microVM, then drop the connection
  throttle {op: N}           the next N calls of op answer 429 ThrottlingException, Retry-After: retry_after
  retry_after (1)            the Retry-After value (seconds) of throttled calls
  fail {op: N}               the next N calls of op answer fail_status (500 InternalServerException)
  fail_status (500)
  max_live (0 = none)        RunMicrovm beyond this many live microVMs: 402 ServiceQuotaExceededException
  page_size (100)            the largest ListMicrovms page
  client (null)              the "client" of the request log ('sdk'|'adapter'); default from User-Agent
  run_artifact (false)       microVMs of a built image run the image's own aarch64 agent under qemu-aarch64
                             (qemu-user) instead of the native build
Control endpoints: GET /_fake/stats, GET /_fake/microvms, POST /_fake/set, POST /_fake/microvms/{id}/kill
(the agent dies: the endpoint answers 502), POST /_fake/shutdown.
"""
import argparse
import base64
import datetime
import hashlib
import http.client
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sigv4_verify  # noqa: E402  (botocore's SigV4, spec/providers/aws_microvm/sigv4_verify.py)

API = '/2025-09-09'
DEFAULTS = {
    'pending_seconds': 0.2, 'endpoint_lag': 0, 'image_build_seconds': 0.2, 'image_fail': False,
    'drop_create': 0, 'throttle': {}, 'retry_after': 1, 'fail': {}, 'fail_status': 500, 'max_live': 0,
    'page_size': 100, 'client': None,
}
DEFAULT_PORT = 8080  # the endpoint's port without X-aws-proxy-port (Lambda developer guide, networking)
# Docker's default capability set: what root keeps inside a microVM's sandbox (no mounts, no modules)
CAPS = ['CHOWN', 'DAC_OVERRIDE', 'FSETID', 'FOWNER', 'MKNOD', 'NET_RAW', 'SETGID', 'SETUID', 'SETFCAP', 'SETPCAP',
        'NET_BIND_SERVICE', 'SYS_CHROOT', 'KILL', 'AUDIT_WRITE']


def rootfs_error(rootfs):
    """Why the base root filesystem cannot back the microVMs, or None."""
    if not rootfs or not os.path.isdir(os.path.join(rootfs, 'usr/bin')) or \
            not os.path.exists(os.path.join(rootfs, 'etc/passwd')):
        return ('the Debian base root filesystem is absent (%s): build it with `./cseng images rootfs` '
                '(debootstrap, needs root), then pass --rootfs DIR' % (rootfs or 'no --rootfs given'))
    if os.getuid() != 0:
        return 'microVM roots are overlayfs mounts over the base root filesystem: run as root'
    return None


class Spawner:
    """Starts every child from one long-lived thread: bwrap's --die-with-parent is the parent
    *thread's* death signal (PR_SET_PDEATHSIG), and a request handler's thread ends with its
    connection, which would kill the microVM it started."""

    def __init__(self):
        self.q = queue.Queue()
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            argv, kw, out = self.q.get()
            try:
                out.put((subprocess.Popen(argv, **kw), None))
            except Exception as e:  # noqa: BLE001 (handed to the caller)
                out.put((None, e))

    def popen(self, argv, **kw):
        out = queue.Queue()
        self.q.put((argv, kw, out))
        p, err = out.get()
        if err:
            raise err
        return p


SPAWNER = Spawner()


class ApiError(Exception):
    def __init__(self, status, type_, message, headers=None, **members):
        super().__init__(message)
        self.status, self.type, self.message, self.headers, self.members = status, type_, message, headers or {}, members


def iso(t):
    return time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(t)) + '.%03dZ' % int((t % 1) * 1000)


class Fake:
    def __init__(self, args, cfg):
        self.args = args
        self.region = cfg.get('region', 'us-east-1')
        self.account = cfg.get('account', '123456789012')
        self.creds = cfg.get('credentials', {'AKIDCSENGTEST0001': {'secret': 'cseng-test-secret-key'}})
        self.buckets = set(cfg.get('buckets', ['cseng-test-bucket']))
        self.sw = dict(DEFAULTS)
        self.sw.update(cfg.get('switches', {}))
        self.lock = threading.RLock()
        self.log_lock = threading.Lock()
        self.log = open(args.log, 'a', buffering=1) if args.log else None
        if args.work:
            os.makedirs(args.work, exist_ok=True)
        self.work = args.work or tempfile.mkdtemp(prefix='cseng-aws-fake-')
        self.mounted = set()
        self.microvms, self.tokens, self.images, self.objects, self.auth_tokens = {}, {}, {}, {}, {}
        self.counts = {}
        self.st = {'creates': 0, 'created': 0, 'terminates': 0, 'terminated': 0, 'bad_signatures': 0,
                   'unknown_keys': 0, 'throttled': 0, 'failed': 0, 'dropped': 0, 'proxied': 0, 'proxy_refused': 0,
                   'hooks': [], 'validation_errors': 0, 'requests': 0}
        self.managed = [{'imageArn': 'arn:aws:lambda:%s:aws:microvm-image:al2023-1' % self.region,
                         'createdAt': 1767225600.0, 'updatedAt': 1767225600.0}]
        for img in cfg.get('images', []):  # images that exist from the start (as if built earlier)
            self.add_image(img['name'], img.get('hooks', {'port': DEFAULT_PORT}), img.get('argv', ['--port', '{port}']),
                           state='CREATED')

    # ---- bookkeeping ----------------------------------------------------------------------------

    def count(self, op):
        with self.lock:
            self.counts[op] = self.counts.get(op, 0) + 1

    def record(self, rec):
        if self.log:
            with self.log_lock:
                self.log.write(json.dumps(rec, sort_keys=True) + '\n')

    def take(self, switch, op):
        """Consume one of the next-N-calls fault counters of switch for op."""
        with self.lock:
            left = self.sw.get(switch) or {}
            n = left.get(op, 0) if isinstance(left, dict) else 0
            if n > 0:
                left[op] = n - 1
                return True
        return False

    def arn(self, kind, name):
        return 'arn:aws:lambda:%s:%s:%s:%s' % (self.region, self.account, kind, name)

    # ---- images ---------------------------------------------------------------------------------

    def add_image(self, name, hooks, agent_args, state='CREATING', body=None):
        now = time.time()
        img = {'imageArn': self.arn('microvm-image', name), 'name': name, 'state': state, 'createdAt': now,
               'updatedAt': now, 'imageVersion': '1.0', 'hooks': hooks, 'agent_args': agent_args, 'tags': {},
               'body': body or {}, 'stateReason': None}
        if state == 'CREATED':
            img['latestActiveImageVersion'] = '1.0'
        self.images[img['imageArn']] = img
        return img

    def find_image(self, ident):
        with self.lock:
            if ident in self.images:
                return self.images[ident]
            for img in self.images.values():
                if img['name'] == ident:
                    return img
        return None

    def build_image(self, img, uri):
        """The asynchronous build: the artifact must be a zip with a Dockerfile at its root whose CMD
        names an aarch64 ELF of the zip; then the agent runs once and its /ready (and /validate)
        hooks must answer 200."""
        time.sleep(float(self.sw.get('image_build_seconds') or 0))
        reason = None
        try:
            if self.sw.get('image_fail'):
                raise ValueError('forced build failure (image_fail)')
            bucket, _, key = uri[len('s3://'):].partition('/')
            data = self.objects.get((bucket, key))
            if data is None:
                raise ValueError('code artifact %s not found' % uri)
            args, binary = self.check_artifact(data)
            img['agent_args'], img['binary'] = args, binary
            hooks = img['hooks'] or {}
            ih = hooks.get('microvmImageHooks') or {}
            if ih.get('ready') == 'ENABLED' or ih.get('validate') == 'ENABLED':
                vm = self.start_vm_process(img, 'build-' + img['name'])
                try:
                    for hook in ('ready', 'validate'):
                        if ih.get(hook) == 'ENABLED':
                            st, body = self.call_hook(vm, hook, b'')
                            if st != 200:
                                raise ValueError('/%s hook answered %s: %s' % (hook, st, body[:200]))
                finally:
                    self.stop_vm_process(vm)
        except Exception as e:  # noqa: BLE001 (a build failure of any kind is CREATE_FAILED)
            reason = str(e)
        with self.lock:
            img['updatedAt'] = time.time()
            if reason:
                img['state'], img['stateReason'], img['latestFailedImageVersion'] = 'CREATE_FAILED', reason, '1.0'
            else:
                img['state'], img['latestActiveImageVersion'] = 'CREATED', '1.0'
            self.image_fail_consumed()

    def image_fail_consumed(self):
        if self.sw.get('image_fail'):
            self.sw['image_fail'] = False

    def check_artifact(self, data):
        tmp = os.path.join(self.work, 'artifact-%s.zip' % secrets.token_hex(4))
        with open(tmp, 'wb') as f:
            f.write(data)
        try:
            with zipfile.ZipFile(tmp) as z:
                if z.testzip() is not None:
                    raise ValueError('code artifact: a member fails its CRC check')
                names = z.namelist()
                if 'Dockerfile' not in names:
                    raise ValueError('code artifact: no Dockerfile at the root of the zip')
                dockerfile = z.read('Dockerfile').decode()
                copies, cmd = {}, None
                for line in dockerfile.splitlines():
                    words = line.strip().split(None, 1)
                    if not words:
                        continue
                    if words[0].upper() == 'COPY' and len(words) == 2:
                        parts = words[1].split()
                        if len(parts) == 2:
                            copies[parts[1]] = parts[0]
                    elif words[0].upper() in ('CMD', 'ENTRYPOINT') and len(words) == 2:
                        cmd = json.loads(words[1])
                if not cmd:
                    raise ValueError('code artifact: the Dockerfile has no exec-form CMD/ENTRYPOINT')
                src = copies.get(cmd[0])
                if not src or src not in names:
                    raise ValueError('code artifact: %s is not COPY\'d from a file of the zip' % cmd[0])
                head = z.read(src)[:20]
                if head[:4] != b'\x7fELF' or int.from_bytes(head[18:20], 'little') != 183:
                    raise ValueError('code artifact: %s is not an aarch64 ELF (the only CPU architecture is ARM_64)'
                                     % src)
                binary = os.path.join(self.work, 'artifact-bin-%s' % secrets.token_hex(4))
                with open(binary, 'wb') as out:
                    out.write(z.read(src))
                os.chmod(binary, 0o755)
                return cmd[1:], binary
        except zipfile.BadZipFile as e:
            raise ValueError('code artifact is not a zip: %s' % e) from e
        finally:
            os.unlink(tmp)

    # ---- microVM processes ----------------------------------------------------------------------

    def mount_root(self, name):
        """The microVM's "/": an overlayfs whose lower layer is the Debian base root filesystem, with
        upper, work and the merged root under work/NAME; a real, writable Debian root."""
        d = os.path.join(self.work, name)
        for sub in ('upper', 'work', 'root'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        root = os.path.join(d, 'root')
        r = subprocess.run(['mount', '-t', 'overlay', 'overlay', '-o', 'lowerdir=%s,upperdir=%s,workdir=%s' % (
            self.args.rootfs, os.path.join(d, 'upper'), os.path.join(d, 'work')), root], capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(d, ignore_errors=True)
            raise ValueError('mounting the microVM root (overlayfs): %s' % (r.stderr or r.stdout).strip())
        with self.lock:
            self.mounted.add(root)
        for sub in ('tmp', 'var/tmp', 'root', 'home/cseng', 'logs/agent', 'logs/verifier', 'workspace', 'run', 'opt/cseng'):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        os.chmod(os.path.join(root, 'tmp'), 0o1777)
        os.chmod(os.path.join(root, 'home/cseng'), 0o777)
        with open(os.path.join(root, 'etc/hostname'), 'w') as f:
            f.write('microvm\n')
        with open(os.path.join(root, 'etc/hosts'), 'w') as f:
            f.write('127.0.0.1 localhost microvm\n::1 localhost\n')
        return d, root

    def umount_root(self, d):
        root = os.path.join(d, 'root')
        with self.lock:
            was = root in self.mounted
            self.mounted.discard(root)
        if was:
            subprocess.run(['umount', '-l', root], capture_output=True)

    @staticmethod
    def qemu_binds():
        """qemu-aarch64 and the host libraries it links, bound under /opt/cseng/qemu (the base root
        filesystem has no qemu): (bwrap arguments, the argv prefix that runs it)."""
        qemu = shutil.which('qemu-aarch64') or '/usr/bin/qemu-aarch64'
        out = subprocess.run(['ldd', qemu], capture_output=True, text=True).stdout
        binds, loader = ['--ro-bind', qemu, '/opt/cseng/qemu/qemu-aarch64'], None
        for line in out.splitlines():
            m = re.search(r'(/\S+)\s+\(0x', line)
            if not m:
                continue
            lib = m.group(1)
            if 'ld-linux' in os.path.basename(lib):
                loader = lib
            binds += ['--ro-bind', os.path.realpath(lib), '/opt/cseng/qemu/lib/' + os.path.basename(lib)]
        if not loader:
            return binds, ['/opt/cseng/qemu/qemu-aarch64']
        return binds, ['/opt/cseng/qemu/lib/' + os.path.basename(loader), '--library-path', '/opt/cseng/qemu/lib',
                       '/opt/cseng/qemu/qemu-aarch64']

    def start_vm_process(self, img, name):
        """The image's agent in a bubblewrap sandbox of its own, on a free loopback port standing for
        the image's hooks port. Returns {root, proc, port (host), vm_port}."""
        d, root = self.mount_root(name)
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        host_port = s.getsockname()[1]
        s.close()
        vm_port = int((img.get('hooks') or {}).get('port') or DEFAULT_PORT)
        args = [a.replace('{port}', str(host_port)) for a in img.get('agent_args') or []]
        args = [str(host_port) if a == str(vm_port) else a for a in args]  # the hooks port -> our loopback port
        # root without a user namespace (it would map only root; RUN steps need every id: useradd,
        # chown, dpkg), Docker's default capabilities, the host's loopback (the hooks port)
        argv = ['bwrap', '--die-with-parent', '--new-session', '--unshare-ipc', '--unshare-pid', '--unshare-uts',
                '--unshare-cgroup-try', '--cap-drop', 'ALL']
        for c in CAPS:
            argv += ['--cap-add', 'CAP_' + c]
        argv += ['--hostname', 'microvm', '--bind', root, '/']
        # the image's own aarch64 agent under qemu-user (run_artifact), else the native build
        binary, prog = self.args.agent, ['/opt/cseng/agent']
        if self.sw.get('run_artifact') and img.get('binary'):
            qbinds, qprog = self.qemu_binds()
            binary, prog = img['binary'], qprog + ['/opt/cseng/agent']
            argv += qbinds
        argv += ['--proc', '/proc', '--dev', '/dev', '--ro-bind', binary, '/opt/cseng/agent',
                 '--chdir', '/', '--setenv', 'PATH', '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
                 '--setenv', 'HOME', '/root'] + prog + args + ['--listen', '127.0.0.1']
        logf = open(os.path.join(self.work, name + '.agent.log'), 'wb')
        proc = SPAWNER.popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
                                env={'PATH': '/usr/sbin:/usr/bin:/sbin:/bin', 'LANG': 'C.UTF-8'})
        vm = {'root': root, 'dir': d, 'name': name, 'proc': proc, 'port': host_port, 'vm_port': vm_port, 'log': logf}
        deadline = time.time() + 20
        while time.time() < deadline:  # setup, not a verdict: the agent is listening once it accepts
            if proc.poll() is not None:
                raise ValueError('the agent exited (%s) before listening: %s' % (proc.returncode, self.agent_log(vm)))
            try:
                socket.create_connection(('127.0.0.1', host_port), timeout=1).close()
                return vm
            except OSError:
                time.sleep(0.01)
        self.stop_vm_process(vm)
        raise ValueError('the agent did not listen on its port')

    def agent_log(self, vm):
        try:
            with open(os.path.join(self.work, vm['name'] + '.agent.log'), 'rb') as f:
                return f.read()[-500:].decode(errors='replace')
        except OSError:
            return ''

    def stop_vm_process(self, vm, remove=True):
        p = vm.get('proc')
        if p and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        if vm.get('log'):
            vm['log'].close()
            vm['log'] = None
        if remove and vm.get('dir'):
            self.umount_root(vm['dir'])
            shutil.rmtree(vm['dir'], ignore_errors=True)
            vm['dir'] = None
            vm['root'] = None

    def call_hook(self, vm, hook, body):
        c = http.client.HTTPConnection('127.0.0.1', vm['port'], timeout=60)
        try:
            c.request('POST', '/' + hook, body=body, headers={'Content-Type': 'application/octet-stream'})
            r = c.getresponse()
            data = r.read()
            self.st['hooks'].append('/' + hook)
            return r.status, data.decode(errors='replace')
        finally:
            c.close()

    # ---- microVMs -------------------------------------------------------------------------------

    def view(self, m):
        now = time.time()
        if m['state'] == 'PENDING' and now >= m['ready_at']:
            m['state'] = 'RUNNING'
        out = {'microvmId': m['id'], 'state': m['state'], 'endpoint': m['endpoint'], 'imageArn': m['imageArn'],
               'imageVersion': m['imageVersion'], 'maximumDurationInSeconds': m['maximumDurationInSeconds'],
               'startedAt': m['startedAt']}
        for k in ('executionRoleArn', 'idlePolicy', 'ingressNetworkConnectors', 'egressNetworkConnectors',
                  'terminatedAt', 'stateReason'):
            if m.get(k) is not None:
                out[k] = m[k]
        return out

    def run_microvm(self, body):
        ident = body.get('imageIdentifier')
        if not isinstance(ident, str) or not ident:
            raise ApiError(400, 'ValidationException', 'imageIdentifier is required')
        allowed = {'imageIdentifier', 'imageVersion', 'executionRoleArn', 'ingressNetworkConnectors',
                   'egressNetworkConnectors', 'idlePolicy', 'logging', 'runHookPayload', 'maximumDurationInSeconds',
                   'clientToken'}
        extra = sorted(set(body) - allowed)
        if extra:
            raise ApiError(400, 'ValidationException', 'unknown member(s): ' + ', '.join(extra))
        mdis = body.get('maximumDurationInSeconds', 28800)
        if not isinstance(mdis, int) or not 1 <= mdis <= 28800:
            raise ApiError(400, 'ValidationException', 'maximumDurationInSeconds must be in 1..28800')
        payload = body.get('runHookPayload')
        if payload is not None and (not isinstance(payload, str) or len(payload.encode()) > 16384):
            raise ApiError(400, 'ValidationException', 'runHookPayload must be a string of at most 16384 bytes')
        token = body.get('clientToken')
        if token is not None and (not isinstance(token, str) or not 1 <= len(token) <= 64):
            raise ApiError(400, 'ValidationException', 'clientToken must be 1..64 characters')
        role = body.get('executionRoleArn')
        if role is not None and not (isinstance(role, str) and role.startswith('arn:aws:iam::')):
            raise ApiError(400, 'ValidationException', 'executionRoleArn is not an IAM role ARN')
        with self.lock:
            if token and token in self.tokens:
                m = self.microvms[self.tokens[token]]
                if m['request'] != body:
                    raise ApiError(409, 'ConflictException', 'clientToken %s was used with other parameters' % token)
                return self.view(m)
            if not ident.startswith('arn:'):
                raise ApiError(400, 'ValidationException', 'imageIdentifier must be the ARN of a MicroVM image')
            img = self.images.get(ident)
            if not img:
                raise ApiError(404, 'ResourceNotFoundException', 'MicroVM image %s not found' % ident,
                               resourceType='MicrovmImage', resourceId=ident)
            if img['state'] != 'CREATED':
                raise ApiError(409, 'ConflictException', 'MicroVM image %s is %s' % (ident, img['state']))
            if body.get('imageVersion') not in (None, img['imageVersion']):
                raise ApiError(404, 'ResourceNotFoundException', 'image version %s not found' % body['imageVersion'])
            live = sum(1 for m in self.microvms.values() if m['state'] not in ('TERMINATED', 'TERMINATING'))
            if self.sw.get('max_live') and live >= self.sw['max_live']:
                raise ApiError(402, 'ServiceQuotaExceededException', 'Too many MicroVMs running',
                               quotaCode='L-MICROVMS', serviceCode='lambda')
            mid = 'mvm-' + secrets.token_hex(8)
            self.st['created'] += 1
        vm = self.start_vm_process(img, mid)
        now = time.time()
        m = {'id': mid, 'arn': self.arn('microvm', mid), 'imageArn': img['imageArn'], 'imageVersion': img['imageVersion'],
             'state': 'PENDING', 'startedAt': now, 'ready_at': now + float(self.sw.get('pending_seconds') or 0),
             'maximumDurationInSeconds': mdis, 'executionRoleArn': role, 'idlePolicy': body.get('idlePolicy'),
             'ingressNetworkConnectors': body.get('ingressNetworkConnectors'),
             'egressNetworkConnectors': body.get('egressNetworkConnectors'), 'tags': {}, 'request': body, 'vm': vm,
             'clientToken': token, 'image': img}
        proxy = ThreadingHTTPServer(('127.0.0.1', 0), make_proxy_handler(self, mid))
        proxy.daemon_threads = True
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        m['proxy'] = proxy
        m['endpoint'] = 'http://127.0.0.1:%d' % proxy.server_address[1]
        hooks = (img.get('hooks') or {}).get('microvmHooks') or {}
        if hooks.get('run') == 'ENABLED':
            st, out = self.call_hook(vm, 'run', (payload or '').encode())
            if st != 200:
                self.stop_vm_process(vm)
                proxy.shutdown()
                raise ApiError(500, 'InternalServerException', 'the /run hook answered %s: %s' % (st, out[:200]))
        with self.lock:
            self.microvms[mid] = m
            if token:
                self.tokens[token] = mid
        return self.view(m)

    def get_microvm(self, mid):
        with self.lock:
            m = self.microvms.get(mid)
            if not m:
                raise ApiError(404, 'ResourceNotFoundException', 'MicroVM %s not found' % mid,
                               resourceType='Microvm', resourceId=mid)
            return m

    def terminate(self, mid):
        with self.lock:
            m = self.get_microvm(mid)
            if m['state'] in ('TERMINATED', 'TERMINATING'):
                return {}
            m['state'] = 'TERMINATING'
        hooks = (m['image'].get('hooks') or {}).get('microvmHooks') or {}
        if hooks.get('terminate') == 'ENABLED' and m['vm']['proc'].poll() is None:
            try:
                self.call_hook(m['vm'], 'terminate', b'')
            except OSError:
                pass
        self.stop_vm_process(m['vm'])
        m['proxy'].shutdown()
        m['proxy'].server_close()
        with self.lock:
            m['state'], m['terminatedAt'], m['stateReason'] = 'TERMINATED', time.time(), 'Terminated by the user'
            self.st['terminated'] += 1
        return {}

    def auth_token(self, mid, body):
        m = self.get_microvm(mid)
        exp = body.get('expirationInMinutes')
        ports = body.get('allowedPorts')
        if not isinstance(exp, int) or not 1 <= exp <= 60:
            raise ApiError(400, 'ValidationException', 'expirationInMinutes must be in 1..60')
        if not isinstance(ports, list) or not ports:
            raise ApiError(400, 'ValidationException', 'allowedPorts needs at least one port specification')
        for p in ports:
            if not isinstance(p, dict) or len(p) != 1 or next(iter(p)) not in ('port', 'range', 'allPorts'):
                raise ApiError(400, 'ValidationException', 'a PortSpecification has exactly one of port, range, allPorts')
        self.view(m)
        if m['state'] != 'RUNNING':
            raise ApiError(409, 'ConflictException', 'MicroVM %s is %s' % (mid, m['state']), resourceId=mid,
                           resourceType='Microvm')
        tok = base64.b64encode(secrets.token_bytes(48)).decode()
        with self.lock:
            self.auth_tokens[tok] = {'microvm': mid, 'expires': time.time() + 60 * exp, 'ports': ports}
        return {'authToken': {'X-aws-proxy-auth': tok}}

    def list_microvms(self, q):
        with self.lock:
            items = [self.view(m) for m in sorted(self.microvms.values(), key=lambda m: (m['startedAt'], m['id']))]
        if q.get('imageIdentifier'):
            img = self.find_image(q['imageIdentifier'])
            items = [i for i in items if img and i['imageArn'] == img['imageArn']]
        if q.get('imageVersion'):
            items = [i for i in items if i['imageVersion'] == q['imageVersion']]
        size = min(int(q.get('maxResults') or 100), int(self.sw.get('page_size') or 100))
        start = 0
        if q.get('nextToken'):
            try:
                start = int(base64.b64decode(q['nextToken']).decode().split(':')[1])
            except (ValueError, IndexError) as e:
                raise ApiError(400, 'ValidationException', 'invalid nextToken') from e
        page = items[start:start + size]
        out = {'items': [{k: i[k] for k in ('microvmId', 'state', 'imageArn', 'imageVersion', 'startedAt')} for i in page]}
        if start + size < len(items):
            out['nextToken'] = base64.b64encode(('page:%d' % (start + size)).encode()).decode()
        return out

    def resource(self, arn):
        with self.lock:
            for m in self.microvms.values():
                if m['arn'] == arn:
                    return m
            if arn in self.images:
                return self.images[arn]
        raise ApiError(404, 'ResourceNotFoundException', 'resource %s not found' % arn, resourceId=arn)

    # ---- the endpoint proxy ---------------------------------------------------------------------

    def proxy(self, mid, h):
        m = self.microvms.get(mid)
        tok = h.headers.get('X-aws-proxy-auth')
        info = self.auth_tokens.get(tok) if tok else None
        port_h = h.headers.get('X-aws-proxy-port')
        try:
            port = int(port_h) if port_h is not None else DEFAULT_PORT
        except ValueError:
            port = -1
        if not m or m['state'] in ('TERMINATED', 'TERMINATING'):
            return 404, {}, b'{"message":"MicroVM not found"}'
        if not info or info['microvm'] != mid or info['expires'] < time.time() or not port_allowed(info['ports'], port):
            self.st['proxy_refused'] += 1
            return 403, {}, b'{"message":"Forbidden: missing, expired or invalid X-aws-proxy-auth for this port"}'
        self.view(m)
        if m['state'] != 'RUNNING' or time.time() < m['ready_at'] + float(self.sw.get('endpoint_lag') or 0):
            return 502, {}, b'{"message":"Bad Gateway: the MicroVM is not ready"}'
        if port != m['vm']['vm_port'] or m['vm']['proc'].poll() is not None:
            return 502, {}, b'{"message":"Bad Gateway: nothing listens on that port"}'
        hdrs = {k: v for k, v in h.headers.items() if k.lower() not in ('x-aws-proxy-auth', 'x-aws-proxy-port', 'host',
                                                                        'connection', 'content-length')}
        c = http.client.HTTPConnection('127.0.0.1', m['vm']['port'])  # no timeout: an exec lasts as long as it lasts
        try:
            c.request(h.command, h.path, body=h.body, headers=hdrs)
            r = c.getresponse()
            data = r.read()
            self.st['proxied'] += 1
            out = {k: v for k, v in r.getheaders() if k.lower() not in ('content-length', 'transfer-encoding',
                                                                       'connection', 'date', 'server')}
            return r.status, out, data
        except OSError as e:
            return 502, {}, json.dumps({'message': 'Bad Gateway: %s' % e}).encode()
        finally:
            c.close()

    def close(self):
        for m in list(self.microvms.values()):
            if m.get('vm'):
                self.stop_vm_process(m['vm'])
        for root in list(self.mounted):  # anything left (a microVM half started)
            subprocess.run(['umount', '-l', root], capture_output=True)
        self.mounted.clear()
        shutil.rmtree(self.work, ignore_errors=True)


def port_allowed(specs, port):
    for s in specs:
        if 'allPorts' in s:
            return True
        if s.get('port') == port:
            return True
        r = s.get('range')
        if isinstance(r, dict) and r.get('startPort', 1 << 20) <= port <= r.get('endPort', -1):
            return True
    return False


# ---- HTTP ---------------------------------------------------------------------------------------

ROUTES = [  # (method, template, op)
    ('POST', API + '/microvms', 'RunMicrovm'),
    ('GET', API + '/microvms', 'ListMicrovms'),
    ('GET', API + '/microvms/{microvmIdentifier}', 'GetMicrovm'),
    ('DELETE', API + '/microvms/{microvmIdentifier}', 'TerminateMicrovm'),
    ('POST', API + '/microvms/{microvmIdentifier}/auth-token', 'CreateMicrovmAuthToken'),
    ('POST', API + '/microvm-images', 'CreateMicrovmImage'),
    ('GET', API + '/microvm-images/{imageIdentifier}', 'GetMicrovmImage'),
    ('GET', API + '/microvm-images/{imageIdentifier}/versions/{imageVersion}', 'GetMicrovmImageVersion'),
    ('GET', API + '/managed-microvm-images', 'ListManagedMicrovmImages'),
    ('POST', '/2017-03-31/tags/{Resource}', 'TagResource'),
    ('GET', '/2017-03-31/tags/{Resource}', 'ListTags'),
    ('DELETE', '/2017-03-31/tags/{Resource}', 'UntagResource'),
]


def match(method, path):
    parts = path.split('/')
    for m, tpl, op in ROUTES:
        tparts = tpl.split('/')
        if m != method or len(tparts) != len(parts):
            continue
        params, ok = {}, True
        for t, p in zip(tparts, parts):
            if t.startswith('{'):
                if not p:
                    ok = False
                params[t[1:-1]] = urllib.parse.unquote(p)
            elif t != p:
                ok = False
        if ok:
            return op, tpl, params
    return None, None, None


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    fake = None
    kind = None  # 'lambda' | 's3' | 'control'

    def log_message(self, *a):
        pass

    def read_body(self):
        n = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(n) if n else b''

    def send(self, status, headers, body):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def json(self, status, value, headers=None):
        h = {'Content-Type': 'application/json'}
        h.update(headers or {})
        self.send(status, h, b'' if value is None else json.dumps(value).encode())

    def handle_any(self):
        f = self.fake
        self.body = self.read_body()
        if self.kind == 'control':
            return self.control()
        f.st['requests'] += 1
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        if self.kind == 'lambda':
            op, route, params = match(self.command, url.path)
        else:
            op, route, params = ('S3' + {'PUT': 'PutObject', 'GET': 'GetObject', 'HEAD': 'HeadObject'}
                                 .get(self.command, self.command)), '/{Bucket}/{Key+}', {}
        decoded = None
        if self.body and self.kind == 'lambda':
            try:
                decoded = json.loads(self.body)
            except ValueError:
                decoded = None
        ua = self.headers.get('User-Agent') or ''
        f.record({'op': op or 'Unknown', 'method': self.command, 'path': self.path, 'route': route or url.path,
                  'query': query, 'headers': {k.lower(): v for k, v in self.headers.items()}, 'body': decoded,
                  'client': f.sw.get('client') or ('sdk' if 'aws-sdk-js' in ua else 'adapter'),
                  'service': self.kind, 'time': time.time()})
        # SigV4 with botocore
        service = 'lambda' if self.kind == 'lambda' else 's3'
        keys = {k: {'secret_access_key': v['secret'], 'session_token': v.get('session_token')} for k, v in f.creds.items()}
        v = sigv4_verify.verify(self.command, url.path, url.query, self.headers.items(), self.body, keys,
                                region=f.region, service=service, now=datetime.datetime.utcnow(), max_skew=900)
        claimed = self.headers.get('x-amz-content-sha256')
        if v['ok'] and claimed and claimed != 'UNSIGNED-PAYLOAD' and claimed != hashlib.sha256(self.body).hexdigest():
            # botocore signs over the claimed hash; the service hashes the body it received
            v = {'ok': False, 'reason': 'the body does not match X-Amz-Content-Sha256'}
        if not v['ok']:
            why = v['reason']
            unknown = why.startswith('unknown access key')
            if unknown:
                f.st['unknown_keys'] += 1
            else:
                f.st['bad_signatures'] += 1
            if self.kind == 's3':
                return self.s3_error(403, 'InvalidAccessKeyId' if unknown else 'SignatureDoesNotMatch',
                                     'The request signature we calculated does not match the signature you provided '
                                     '(%s)' % why)
            if unknown:
                return self.error(ApiError(403, 'UnrecognizedClientException',
                                           'The security token included in the request is invalid.'))
            return self.error(ApiError(403, 'InvalidSignatureException', 'The request signature we calculated does not '
                                       'match the signature you provided (%s)' % why))
        if self.kind == 's3':
            return self.s3(url.path)
        if not op:
            return self.error(ApiError(404, 'UnknownOperationException', 'no operation at %s %s' % (self.command, url.path)))
        f.count(op)
        try:
            if f.take('throttle', op):
                f.st['throttled'] += 1
                ra = str(f.sw.get('retry_after', 1))
                raise ApiError(429, 'ThrottlingException', 'Rate exceeded', headers={'Retry-After': ra},
                               serviceCode='lambda', quotaCode='L-API')
            if f.take('fail', op):
                f.st['failed'] += 1
                raise ApiError(int(f.sw.get('fail_status') or 500), 'InternalServerException', 'forced failure')
            if self.body and decoded is None:
                raise ApiError(400, 'ValidationException', 'the body is not JSON')
            self.dispatch(op, params, query, decoded or {})
        except ApiError as e:
            if e.status == 400:
                f.st['validation_errors'] += 1
            self.error(e)

    def dispatch(self, op, p, q, body):
        f = self.fake
        if op == 'RunMicrovm':
            f.st['creates'] += 1
            out = f.run_microvm(body)
            if f.take_drop():
                f.st['dropped'] += 1
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # the response is lost
                return
            return self.json(200, out)
        if op == 'GetMicrovm':
            m = f.get_microvm(p['microvmIdentifier'])
            with f.lock:
                return self.json(200, f.view(m))
        if op == 'TerminateMicrovm':
            f.st['terminates'] += 1
            return self.json(200, f.terminate(p['microvmIdentifier']))
        if op == 'ListMicrovms':
            return self.json(200, f.list_microvms(q))
        if op == 'CreateMicrovmAuthToken':
            return self.json(200, f.auth_token(p['microvmIdentifier'], body))
        if op == 'TagResource':
            tags = body.get('Tags')
            if not isinstance(tags, dict) or not tags or not all(isinstance(v, str) for v in tags.values()):
                raise ApiError(400, 'InvalidParameterValueException', 'Tags must be a non-empty map of strings',
                               Type='User')
            r = f.resource(p['Resource'])
            with f.lock:
                r['tags'].update(tags)
            return self.send(204, {}, b'')
        if op == 'ListTags':
            r = f.resource(p['Resource'])
            with f.lock:
                return self.json(200, {'Tags': dict(r['tags'])})
        if op == 'UntagResource':
            r = f.resource(p['Resource'])
            keys = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get('tagKeys', [])
            with f.lock:
                for k in keys:
                    r['tags'].pop(k, None)
            return self.send(204, {}, b'')
        if op == 'CreateMicrovmImage':
            return self.json(201, self.create_image(body))
        if op == 'GetMicrovmImage':
            img = f.find_image(p['imageIdentifier'])
            if not img:
                raise ApiError(404, 'ResourceNotFoundException', 'MicroVM image %s not found' % p['imageIdentifier'],
                               resourceType='MicrovmImage', resourceId=p['imageIdentifier'])
            with f.lock:
                out = {k: img[k] for k in ('imageArn', 'name', 'state', 'createdAt', 'updatedAt', 'tags')}
                for k in ('latestActiveImageVersion', 'latestFailedImageVersion'):
                    if img.get(k):
                        out[k] = img[k]
            return self.json(200, out)
        if op == 'GetMicrovmImageVersion':
            img = f.find_image(p['imageIdentifier'])
            if not img or p['imageVersion'] != img['imageVersion']:
                raise ApiError(404, 'ResourceNotFoundException', 'MicroVM image version not found')
            with f.lock:
                out = image_view(img)
                out.pop('name', None)
                out['state'] = {'CREATED': 'SUCCESSFUL', 'CREATE_FAILED': 'FAILED'}.get(img['state'], 'IN_PROGRESS')
                out['status'] = 'ACTIVE'
                if img.get('stateReason'):
                    out['stateReason'] = img['stateReason']
            return self.json(200, out)
        if op == 'ListManagedMicrovmImages':
            return self.json(200, {'items': f.managed})
        raise ApiError(404, 'UnknownOperationException', op)

    def create_image(self, body):
        f = self.fake
        for k in ('baseImageArn', 'buildRoleArn', 'codeArtifact', 'name'):
            if not body.get(k):
                raise ApiError(400, 'ValidationException', '%s is required' % k)
        if body['baseImageArn'] not in [m['imageArn'] for m in f.managed]:
            raise ApiError(404, 'ResourceNotFoundException', 'base image %s not found' % body['baseImageArn'])
        if not str(body['buildRoleArn']).startswith('arn:aws:iam::'):
            raise ApiError(400, 'ValidationException', 'buildRoleArn is not an IAM role ARN')
        ca = body['codeArtifact']
        uri = ca.get('uri') if isinstance(ca, dict) and len(ca) == 1 else None
        if not isinstance(uri, str) or not uri.startswith('s3://'):
            raise ApiError(400, 'ValidationException', 'codeArtifact must be {"uri": "s3://bucket/key"}')
        for c in body.get('cpuConfigurations') or []:
            if c.get('architecture') != 'ARM_64':
                raise ApiError(400, 'ValidationException', 'the only CPU architecture is ARM_64')
        with f.lock:
            token = body.get('clientToken')
            for img in f.images.values():
                if token and img['body'].get('clientToken') == token:
                    return image_view(img)
                if img['name'] == body['name']:
                    raise ApiError(409, 'ConflictException', 'a MicroVM image named %s exists' % body['name'],
                                   resourceId=img['imageArn'], resourceType='MicrovmImage')
            img = f.add_image(body['name'], body.get('hooks') or {}, [], body=body)
            img['tags'] = dict(body.get('tags') or {})
        threading.Thread(target=f.build_image, args=(img, uri), daemon=True).start()
        return image_view(img)

    def s3(self, path):
        f = self.fake
        bucket, _, key = urllib.parse.unquote(path.lstrip('/')).partition('/')
        if bucket not in f.buckets:
            return self.s3_error(404, 'NoSuchBucket', 'The specified bucket does not exist')
        if not key:
            return self.s3_error(400, 'InvalidRequest', 'no key')
        if self.command == 'PUT':
            sha = self.headers.get('x-amz-content-sha256')
            if not sha:
                return self.s3_error(400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256')
            if sha != 'UNSIGNED-PAYLOAD' and sha != hashlib.sha256(self.body).hexdigest():
                return self.s3_error(400, 'XAmzContentSHA256Mismatch', 'The provided x-amz-content-sha256 header does '
                                     'not match what was computed.')
            with f.lock:
                f.objects[(bucket, key)] = self.body
            return self.send(200, {'ETag': '"%s"' % hashlib.md5(self.body).hexdigest()}, b'')  # noqa: S324 (S3's ETag)
        data = f.objects.get((bucket, key))
        if data is None:
            return self.s3_error(404, 'NoSuchKey', 'The specified key does not exist.')
        return self.send(200, {'Content-Type': 'application/octet-stream',
                               'ETag': '"%s"' % hashlib.md5(data).hexdigest()}, data)  # noqa: S324

    def s3_error(self, status, code, message):
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>'
                % (code, message.replace('&', '&amp;').replace('<', '&lt;'))).encode()
        self.send(status, {'Content-Type': 'application/xml'}, body)

    def error(self, e):
        h = {'x-amzn-errortype': e.type}
        h.update(e.headers)
        body = {'__type': e.type, 'message': e.message}
        body.update(e.members)
        if e.status == 429 and 'Retry-After' in e.headers:
            body['retryAfterSeconds'] = int(e.headers['Retry-After'])
        self.json(e.status, body, h)

    def control(self):
        f = self.fake
        path = urllib.parse.urlsplit(self.path).path
        if path == '/_fake/stats':
            with f.lock:
                live = sorted(m['id'] for m in f.microvms.values() if m['state'] not in ('TERMINATED', 'TERMINATING'))
                out = dict(f.st, counts=dict(f.counts), live=len(live), live_ids=live, images={
                    i['name']: {'state': i['state'], 'arn': i['imageArn'], 'stateReason': i['stateReason']}
                    for i in f.images.values()}, objects=['%s/%s' % k for k in f.objects],
                    switches={k: v for k, v in f.sw.items()})
            return self.json(200, out)
        if path == '/_fake/microvms':
            with f.lock:
                return self.json(200, [{'id': m['id'], 'state': m['state'], 'tags': m['tags'], 'arn': m['arn'],
                                        'clientToken': m['clientToken'], 'root': m['vm'].get('root'),
                                        'request': m['request']} for m in f.microvms.values()])
        if path == '/_fake/set' and self.command == 'POST':
            with f.lock:
                f.sw.update(json.loads(self.body or b'{}'))
            return self.json(200, {'ok': True})
        if path.startswith('/_fake/microvms/') and path.endswith('/kill') and self.command == 'POST':
            m = f.microvms.get(path.split('/')[3])
            if not m:
                return self.json(404, {'message': 'no such microVM'})
            f.stop_vm_process(m['vm'], remove=False)
            return self.json(200, {'ok': True})
        if path == '/_fake/shutdown' and self.command == 'POST':
            self.json(200, {'ok': True})
            threading.Thread(target=shutdown, daemon=True).start()
            return None
        return self.json(404, {'message': 'unknown control path ' + path})

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


def image_view(img):
    out = {k: img['body'].get(k) for k in ('baseImageArn', 'buildRoleArn', 'codeArtifact', 'baseImageVersion',
                                           'description', 'logging', 'egressNetworkConnectors', 'cpuConfigurations',
                                           'resources', 'additionalOsCapabilities', 'hooks', 'environmentVariables')
           if img['body'].get(k) is not None}
    out.update({'imageArn': img['imageArn'], 'name': img['name'], 'state': img['state'], 'createdAt': img['createdAt'],
                'imageVersion': img['imageVersion'], 'tags': img['tags']})
    return out


def make_proxy_handler(fake, mid):
    class Proxy(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *a):
            pass

        def handle_any(self):
            n = int(self.headers.get('Content-Length') or 0)
            self.body = self.rfile.read(n) if n else b''
            fake.record({'op': 'Endpoint', 'method': self.command, 'path': self.path, 'route': '/{proxy+}',
                         'query': dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query)),
                         'headers': {k.lower(): v for k, v in self.headers.items()}, 'body': None,
                         'client': fake.sw.get('client') or 'adapter', 'service': 'endpoint', 'microvm': mid,
                         'time': time.time()})
            status, headers, body = fake.proxy(mid, self)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            if self.command != 'HEAD':
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any
    return Proxy


# take_drop lives on Fake so the counter is consumed under the lock
def _take_drop(self):
    with self.lock:
        n = int(self.sw.get('drop_create') or 0)
        if n > 0:
            self.sw['drop_create'] = n - 1
            return True
    return False


Fake.take_drop = _take_drop

SERVERS = []
FAKE = None


def shutdown(*_):
    for s in SERVERS:
        s.shutdown()


def serve(fake, kind):
    cls = type('H_' + kind, (Handler,), {'fake': fake, 'kind': kind})
    srv = ThreadingHTTPServer(('127.0.0.1', 0), cls)
    srv.daemon_threads = True
    SERVERS.append(srv)
    return srv


def main():
    global FAKE
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--agent', required=True, help='the native build of the exec agent')
    ap.add_argument('--log', help='append the request log (JSON lines) to this file')
    ap.add_argument('--config', help='a JSON file: region, account, credentials, buckets, images, switches')
    ap.add_argument('--rootfs', default=os.environ.get('CSENG_LOCAL_ROOTFS'),
                    help='the Debian base root filesystem (`cseng images rootfs`) under every microVM\'s overlay root '
                         '(default $CSENG_LOCAL_ROOTFS)')
    ap.add_argument('--work', help='where microVM roots are mounted (default a new temporary directory)')
    args = ap.parse_args()
    err = rootfs_error(args.rootfs)
    if err:
        sys.exit('fake.py: ' + err)
    cfg = {}
    if args.config:
        with open(args.config) as fh:
            cfg = json.load(fh)
    if not os.access(args.agent, os.X_OK):
        sys.exit('fake.py: --agent %s is not an executable' % args.agent)
    FAKE = Fake(args, cfg)
    servers = {k: serve(FAKE, k) for k in ('lambda', 's3', 'control')}
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=shutdown, daemon=True).start())
    print(json.dumps({k: 'http://127.0.0.1:%d' % s.server_address[1] for k, s in servers.items()} |
                     {'pid': os.getpid()}), flush=True)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers.values()]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        FAKE.close()


if __name__ == '__main__':
    main()
