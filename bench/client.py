"""The Python client the cseng client is compared with, written the way the seed arena is
(shared/seeds/002_*): httpx, a thread pool, one shared httpx.Client; each lifecycle is
create -> exec (check the marker) -> delete, timed with time.perf_counter_ns() around each
call and its JSON decoding. Run with Debian's python3 and python3-httpx:

  /usr/bin/python3 bench/client.py --url http://127.0.0.1:PORT --concurrency 64 --out F
        [--mode lifecycle|raw] [--warmup 1] [--duration 3] [--create-ms 50 --exec-ms 20 --delete-ms 10]

Same protocol and output as bench/client.lua (see there). The one departure from the seed: the
client's connection pool is sized to the concurrency (httpx's default keeps 100 connections and
20 idle ones, which would measure pool waits, not the client).
"""
import argparse
import concurrent.futures as cf
import json
import resource
import threading
import time

import httpx

MARKER = 'arena-startup-ready-20261001'
COMMAND = 'python3 -c "print(\'arena-startup-ready-20261001\')"'


def peak_rss_kb(final):
    """This process's own peak resident set (VmHWM): ru_maxrss also holds the resident set of
    the process that spawned it, as it was then (the kernel folds the replaced address space in
    at exec)."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return final.ru_maxrss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--url', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--mode', default='lifecycle')
    ap.add_argument('--concurrency', type=int, default=64)
    ap.add_argument('--warmup', type=float, default=1)
    ap.add_argument('--duration', type=float, default=3)
    ap.add_argument('--create-ms', type=float, default=50)
    ap.add_argument('--exec-ms', type=float, default=20)
    ap.add_argument('--delete-ms', type=float, default=10)
    ap.add_argument('--no-stagger', action='store_true')
    a = ap.parse_args()

    c = a.concurrency
    nominal = {'create': int(a.create_ms * 1e6), 'exec': int(a.exec_ms * 1e6), 'delete': int(a.delete_ms * 1e6)}
    period = sum(nominal.values())
    client = httpx.Client(base_url=a.url.rstrip('/'), headers={'X-API-Key': 'bench-key'}, timeout=90,
                          limits=httpx.Limits(max_connections=c, max_keepalive_connections=c))
    lock = threading.Lock()
    samples = {k: [] for k in ('create', 'create_held', 'exec', 'exec_held', 'delete', 'delete_held')}
    st = {'completed': 0, 'requests': 0, 'failures': 0, 'first_error': None}
    t_start = time.perf_counter_ns()
    t_warm = t_start + int(a.warmup * 1e9)
    t_end = t_warm + int(a.duration * 1e9)

    def fail(msg):
        with lock:
            st['failures'] += 1
            if st['first_error'] is None:
                st['first_error'] = msg

    def counted(t1):
        if t_warm <= t1 <= t_end:
            with lock:
                st['requests'] += 1

    def held(r):
        return int(r.headers.get('x-fake-held-ns', '0'))

    def create():
        r = client.post('/api/sandboxes', json={
            'template': 'base', 'size': 'small', 'projectId': 'bench', 'region': 'us-east-1', 'timeoutMs': 300000})
        r.raise_for_status()
        return r.json(), r

    def execute(sb, cmd):
        r = client.post('/api/sandboxes/' + sb['sandboxId'] + '/exec', json={'cmd': cmd, 'timeoutMs': 30000}, timeout=45)
        r.raise_for_status()
        d = r.json()
        return d['exitCode'], d.get('stdout', ''), d.get('stderr', ''), r

    def destroy(sb):
        r = client.delete('/api/sandboxes/' + sb['sandboxId'])
        if r.status_code != 404:
            r.raise_for_status()
        return r

    def trial(sampled):
        rec = {}
        sb = None
        ok = False
        try:
            t0 = time.perf_counter_ns()
            sb, r = create()
            t1 = time.perf_counter_ns()
            counted(t1)
            rec['create'] = (t1 - t0, held(r))
            code, stdout, stderr, r = execute(sb, COMMAND)
            t2 = time.perf_counter_ns()
            counted(t2)
            if code != 0 or stdout.strip() != MARKER:
                raise RuntimeError(f'Invalid readiness response: exit={code}, stdout={stdout[:200]!r}')
            rec['exec'] = (t2 - t1, held(r))
            ok = True
        except Exception as e:  # noqa: BLE001 - the seed records every failure
            fail(f'{type(e).__name__}: {e}')
        finally:
            if sb is not None:
                try:
                    t3 = time.perf_counter_ns()
                    r = destroy(sb)
                    t4 = time.perf_counter_ns()
                    counted(t4)
                    rec['delete'] = (t4 - t3, held(r))
                except Exception as e:  # noqa: BLE001
                    fail(f'{type(e).__name__}: {e}')
                    ok = False
        if sampled:
            with lock:
                for k, (d, h) in rec.items():
                    samples[k].append(d)
                    samples[k + '_held'].append(h)
        return ok

    def lifecycle_worker(i):
        if not a.no_stagger:
            time.sleep(i * period / c / 1e9)
        while time.perf_counter_ns() < t_end:
            sampled = time.perf_counter_ns() >= t_warm
            ok = trial(sampled)
            now = time.perf_counter_ns()
            if ok and t_warm <= now <= t_end:
                with lock:
                    st['completed'] += 1

    def raw_worker(i):
        while time.perf_counter_ns() < t_end:
            try:
                r = client.get('/zero')
                r.raise_for_status()
                counted(time.perf_counter_ns())
            except Exception as e:  # noqa: BLE001
                fail(f'{type(e).__name__}: {e}')

    usage = {}

    def sample_usage(key, at):
        time.sleep(max(0, (at - time.perf_counter_ns()) / 1e9))
        usage[key] = resource.getrusage(resource.RUSAGE_SELF)

    samplers = [threading.Thread(target=sample_usage, args=('warm', t_warm)),
                threading.Thread(target=sample_usage, args=('end', t_end))]
    for s in samplers:
        s.start()
    worker = raw_worker if a.mode == 'raw' else lifecycle_worker
    with cf.ThreadPoolExecutor(max_workers=c) as pool:
        futures = [pool.submit(worker, i) for i in range(c)]
        for f in futures:
            try:
                f.result()
            except Exception as e:  # noqa: BLE001
                fail(f'{type(e).__name__}: {e}')
    for s in samplers:
        s.join()
    final = resource.getrusage(resource.RUSAGE_SELF)
    client.close()

    uw, ue = usage['warm'], usage['end']
    cpu_user = ue.ru_utime - uw.ru_utime
    cpu_sys = ue.ru_stime - uw.ru_stime
    window = a.duration
    n = st['requests'] if a.mode == 'raw' else st['completed']
    out = {
        'client': 'python', 'mode': a.mode, 'concurrency': c, 'warmup_s': a.warmup, 'window_s': window,
        'nominal_ns': nominal, 'stagger': not a.no_stagger,
        'completed': st['completed'], 'requests': st['requests'], 'failures': st['failures'],
        'first_error': st['first_error'], 'rate': n / window,
        'cpu_user_s': cpu_user, 'cpu_sys_s': cpu_sys, 'cpu_s': cpu_user + cpu_sys,
        'cpu_per_request_us': (cpu_user + cpu_sys) / st['requests'] * 1e6 if st['requests'] else None,
        'maxrss_kb': peak_rss_kb(final), 'samples': samples,
        'versions': {'httpx': httpx.__version__},
    }
    with open(a.out, 'w') as f:
        json.dump(out, f)


if __name__ == '__main__':
    main()
