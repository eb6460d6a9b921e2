/* The benchmark's fake provider in C: the same loopback server as bench/fake_provider.lua (the
 * Lizard REST shape, injected latencies, a live set, /zero and /stats; see its header for the
 * routes), answering the same bytes but for the held times, at a fraction of its CPU. On a
 * 2-core machine the fake and the measured client share the cores: the Lua fake (cseng.serve
 * with a Lua handler) took ~30 us of CPU per request at 1,024 lifecycles in flight, as much as
 * the client it measures, so the bench measured the pair, not the client. bench/run.lua and
 * bench/probe.lua run this one (bench/lib.lua); spec/bench_fake_spec.lua holds it to the Lua
 * fake's answers.
 *
 *   build/bench/fake_provider [--port 0] [--port-file F] [--create-ms 50] [--exec-ms 20]
 *                             [--delete-ms 10] [--max-seconds 3600] [--hold-from received|parsed]
 *                             [--release exact|tick]
 *
 * One libuv loop, Debian's http-parser, jansson for the JSON it reads. A request is held from
 * the moment its last bytes arrived (the kernel's receive stamp of the read that completed it:
 * SO_TIMESTAMPNS, read with recvmsg; --hold-from parsed: from when this loop parsed them, as
 * before) until CLOCK_MONOTONIC (uv_hrtime, cseng's clock.now) has passed the nominal latency,
 * never less: a provider's latency includes its own queue, so a request that waited in this
 * process's socket while its loop was busy is not held longer for it; X-Fake-Held-Ns says how long it was held, and, to a
 * request that carries X-Fake-Stamp, X-Fake-Hold-From from when (CLOCK_MONOTONIC ns: the
 * client's clock.now on the same machine; the answer was made at Hold-From + Held-Ns, so
 * bench/client.lua can split its error into the way there, the way back and its own resume; on
 * request only, because one more header to parse is CPU taken from the client measured). It is
 * released at its own deadline (a timerfd armed at the earliest; see "the hold"), not on
 * libuv's millisecond ticks as the Lua fake's are (--release tick does that). A
 * connection's requests are answered one at a time, in order (pipelined bytes wait). */
#include <errno.h>
#include <http_parser.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <uv.h>

#include "rxstamp.h" /* engine/: one read with its kernel receive stamp */

#define MAX_HEAD (64 << 10)
#define MAX_BODY (1 << 20)
#define LEFT_MAX (256 << 10)

typedef struct {
  char *p;
  size_t len, cap;
} buf;

static int buf_add(buf *b, const char *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

enum { R_NONE, R_CREATE, R_EXEC, R_DELETE };

typedef struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  http_parser parser;
  buf url, body, field, left;
  size_t head_bytes;
  int handles, closing, active, pending, reading, has_key, in_key, read_eof, keep, stamp;
  int route;      /* what the held request is, once held */
  uint64_t seq;   /* the sandbox it names (exec, delete) or gets (create) */
  uint64_t t0;    /* the hold's start */
  uint64_t rx;    /* the kernel's receive stamp of the read being parsed (0: none) */
  uint64_t until; /* the hold's end */
  size_t hix;     /* its place in the release heap + 1 (0: not in it) */
  char *answer;   /* create: the template's JSON; exec: the stdout */
  struct conn *prev, *next;
} conn;

static struct {
  uint64_t create, exec, del;
} NOMINAL = {50000000, 20000000, 10000000};
static int hold_from_parsed;
static struct { /* what on_alloc read, for on_read */
  conn *c;
  ssize_t n;
  uint64_t at;
} got;
static http_parser_settings settings;
static char rbuf[65536];
static unsigned char *live;
static size_t live_cap;
static uint64_t seq_next, nlive, in_flight, peak;
static struct {
  uint64_t requests, connections, created, deleted, execs, zero, not_found, bad, unauthorized;
} st;

/* ---- responses --------------------------------------------------------------------------- */

static void write_done(uv_write_t *w, int status) {
  (void)status;
  free(w);
}

static void conn_close(conn *c);

static void conn_send(conn *c, const char *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
  int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (k == (int)n) return;
  if (k < 0 && k != UV_EAGAIN) {
    conn_close(c);
    return;
  }
  if (k < 0) k = 0;
  uv_write_t *w = malloc(sizeof *w + n - (size_t)k);
  if (!w) {
    conn_close(c);
    return;
  }
  memcpy(w + 1, p + k, n - (size_t)k);
  b = uv_buf_init((char *)(w + 1), (unsigned)(n - (size_t)k));
  if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, write_done) != 0) {
    free(w);
    conn_close(c);
  }
}

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 201: return "Created";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 404: return "Not Found";
  default: return "Error";
  }
}

static void conn_next(conn *c);

/* held: the X-Fake-* headers (a held answer) or not (401, 400, the unheld routes) */
static void respond(conn *c, int status, const char *body, int held) {
  char head[512], len[48] = "";
  size_t blen = strlen(body);
  int n;
  if (status != 204) snprintf(len, sizeof len, "Content-Length: %zu\r\n", blen);
  if (held) {
    char stamp[48] = "";
    if (c->stamp) snprintf(stamp, sizeof stamp, "X-Fake-Hold-From: %" PRIu64 "\r\n", c->t0);
    n = snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Fake-Held-Ns: %" PRIu64
                 "\r\nX-Fake-Wait-Ns: 0\r\n%s%s%s\r\n",
                 status, reason(status), uv_hrtime() - c->t0, stamp, c->keep ? "" : "Connection: close\r\n", len);
  } else
    n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%s%s\r\n", status,
                 reason(status), c->keep ? "" : "Connection: close\r\n", len);
  if (blen) {
    buf out = {0};
    if (buf_add(&out, head, (size_t)n) || buf_add(&out, body, blen)) {
      free(out.p);
      conn_close(c);
      return;
    }
    conn_send(c, out.p, out.len);
    free(out.p);
  } else {
    conn_send(c, head, (size_t)n);
  }
  if (c->closing) return;
  conn_next(c);
}

/* ---- the live set ------------------------------------------------------------------------ */

static int live_get(uint64_t s) { return s < live_cap && live[s]; }

static int live_set(uint64_t s, int v) {
  if (s >= live_cap) {
    size_t cap = live_cap ? live_cap : 4096;
    while (cap <= s) cap *= 2;
    unsigned char *n = realloc(live, cap);
    if (!n) return -1;
    memset(n + live_cap, 0, cap - live_cap);
    live = n;
    live_cap = cap;
  }
  live[s] = (unsigned char)v;
  return 0;
}

/* "lz-00000042" -> 42; 0 for anything else (sequence numbers start at 1) */
static uint64_t parse_id(const char *p, size_t n) {
  uint64_t v = 0;
  if (n != 11 || memcmp(p, "lz-", 3) != 0) return 0;
  for (size_t i = 3; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    v = v * 10 + (uint64_t)(p[i] - '0');
  }
  return v;
}

/* Lua's cmd:match("print%('([^']*)'%)") or the same with double quotes: the first quoted
 * argument of print(...) with nothing after its closing quote but ")" */
static char *printed(const char *cmd) {
  for (int q = 0; q < 2; q++) {
    const char *open = q ? "print(\"" : "print('";
    char quote = q ? '"' : '\'';
    for (const char *s = strstr(cmd, open); s; s = strstr(s + 1, open)) {
      const char *a = s + 7, *e = strchr(a, quote);
      if (e && e[1] == ')') {
        char *out = malloc((size_t)(e - a) + 2);
        if (!out) return NULL;
        memcpy(out, a, (size_t)(e - a));
        out[e - a] = '\n';
        out[e - a + 1] = 0;
        return out;
      }
    }
  }
  return NULL;
}

/* ---- the hold ---------------------------------------------------------------------------- */

static void hold_done(conn *c) {
  int route = c->route;
  char body[256];
  c->route = R_NONE;
  in_flight--;
  if (route == R_CREATE) {
    uint64_t s = ++seq_next;
    if (live_set(s, 1) != 0) {
      conn_close(c);
      return;
    }
    nlive++;
    st.created++;
    snprintf(body, sizeof body,
             "{\"sandboxId\":\"lz-%08" PRIu64 "\",\"cpus\":2,\"memoryMb\":2048,\"region\":\"us-east-1\",\"template\":%s,"
             "\"size\":\"small\",\"status\":\"running\"}",
             s, c->answer ? c->answer : "\"base\"");
    free(c->answer);
    c->answer = NULL;
    respond(c, 201, body, 1);
    return;
  }
  if (!live_get(c->seq)) {
    free(c->answer);
    c->answer = NULL;
    st.not_found++;
    respond(c, 404, "{\"error\":\"sandbox not found\"}", 1);
    return;
  }
  if (route == R_EXEC) {
    json_t *o = json_pack("{s:i,s:s,s:s}", "exitCode", 0, "stdout", c->answer ? c->answer : "", "stderr", "");
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    free(c->answer);
    c->answer = NULL;
    json_decref(o);
    st.execs++;
    if (!js) {
      conn_close(c);
      return;
    }
    respond(c, 200, js, 1);
    free(js);
    return;
  }
  live_set(c->seq, 0);
  nlive--;
  st.deleted++;
  respond(c, 204, "", 1);
}

/* Release at the deadline. libuv's timers count whole milliseconds from a loop time cached once
 * per turn, so holds released by them go out in bursts on the loop's millisecond ticks, and
 * the measured client queued behind each burst: that queueing is the fake's artefact, not the
 * client's error (docs/PERFORMANCE.md, "The fake provider", has the before and after).
 * --release exact (the default) keeps the held requests in a min-heap by deadline and arms one
 * timerfd (CLOCK_MONOTONIC, the clock of uv_hrtime, absolute ns) at the earliest, so each is
 * released when its own deadline passes; --release tick is the per-request uv_timer (the Lua
 * fake's behaviour), for comparison. */
static int release_tick;
static conn **heap;
static size_t heap_n, heap_cap;
static int tfd = -1;
static uv_poll_t tfd_poll;
static uint64_t armed; /* the deadline the timerfd is set to (0: disarmed) */

static void heap_swap(size_t a, size_t b) {
  conn *t = heap[a];
  heap[a] = heap[b];
  heap[b] = t;
  heap[a]->hix = a + 1;
  heap[b]->hix = b + 1;
}

static void heap_up(size_t i) {
  while (i > 0 && heap[(i - 1) / 2]->until > heap[i]->until) {
    heap_swap(i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_down(size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < heap_n && heap[l]->until < heap[m]->until) m = l;
    if (r < heap_n && heap[r]->until < heap[m]->until) m = r;
    if (m == i) return;
    heap_swap(i, m);
    i = m;
  }
}

static void heap_remove(conn *c) {
  size_t i = c->hix - 1;
  c->hix = 0;
  heap_n--;
  if (i == heap_n) return;
  heap[i] = heap[heap_n];
  heap[i]->hix = i + 1;
  heap_up(i);
  heap_down(heap[i]->hix - 1);
}

static void tfd_arm(void) {
  uint64_t next = heap_n ? heap[0]->until : 0;
  if (next == armed) return;
  struct itimerspec its = {{0, 0}, {(time_t)(next / 1000000000u), (long)(next % 1000000000u)}}; /* 0: disarm */
  armed = next;
  if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
    fprintf(stderr, "fake_provider: timerfd_settime: %s\n", strerror(errno));
    exit(1);
  }
}

static void on_tfd(uv_poll_t *h, int status, int events) {
  (void)h;
  (void)status;
  (void)events;
  uint64_t n;
  if (read(tfd, &n, sizeof n) < 0 && errno != EAGAIN) {
    fprintf(stderr, "fake_provider: timerfd read: %s\n", strerror(errno));
    exit(1);
  }
  armed = 0;
  uint64_t now = uv_hrtime();
  while (heap_n && heap[0]->until <= now) {
    conn *c = heap[0];
    heap_remove(c);
    hold_done(c);
    if (!heap_n || heap[0]->until > now) now = uv_hrtime(); /* writes took time: catch up */
  }
  tfd_arm();
}

static void hold_tick(uv_timer_t *t) {
  conn *c = t->data;
  uint64_t now = uv_hrtime();
  if (now >= c->until) {
    hold_done(c);
    return;
  }
  uv_timer_start(&c->timer, hold_tick, (c->until - now + 999999) / 1000000, 0); /* whole ms, rounded up */
}

static void hold(conn *c, int route, uint64_t ns) {
  c->route = route;
  c->until = c->t0 + ns;
  if (++in_flight > peak) peak = in_flight;
  if (release_tick || c->until <= uv_hrtime()) {
    hold_tick(&c->timer);
    return;
  }
  if (heap_n == heap_cap) {
    size_t cap = heap_cap ? heap_cap * 2 : 1024;
    conn **n = realloc(heap, cap * sizeof *n);
    if (!n) {
      hold_tick(&c->timer); /* no memory for the heap: the millisecond timer still holds it */
      return;
    }
    heap = n;
    heap_cap = cap;
  }
  heap[heap_n] = c;
  c->hix = ++heap_n;
  heap_up(heap_n - 1);
  tfd_arm();
}

/* ---- routing ----------------------------------------------------------------------------- */

static void stats(conn *c, int reset) {
  struct rusage u;
  char body[1024];
  getrusage(RUSAGE_SELF, &u);
  snprintf(body, sizeof body,
           "{\"requests\":%" PRIu64 ",\"connections\":%" PRIu64 ",\"peak_in_flight\":%" PRIu64 ",\"live\":%" PRIu64
           ",\"created\":%" PRIu64 ",\"deleted\":%" PRIu64 ",\"execs\":%" PRIu64 ",\"zero\":%" PRIu64
           ",\"not_found\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"unauthorized\":%" PRIu64
           ",\"user_s\":%.6f,\"sys_s\":%.6f,\"maxrss_kb\":%ld,\"now_ns\":%" PRIu64
           ",\"nominal_ns\":{\"create\":%" PRIu64 ",\"exec\":%" PRIu64 ",\"delete\":%" PRIu64 "},\"pid\":%d,\"impl\":\"c\"}",
           st.requests, st.connections, peak, nlive, st.created, st.deleted, st.execs, st.zero, st.not_found, st.bad,
           st.unauthorized, (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6,
           (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6, u.ru_maxrss, uv_hrtime(), NOMINAL.create, NOMINAL.exec,
           NOMINAL.del, (int)getpid());
  if (reset) peak = in_flight;
  respond(c, 200, body, 0);
}

static void route(conn *c) {
  const char *u = c->url.p;
  size_t n = c->url.len, plen;
  const char *q = memchr(u, '?', n);
  int method = c->parser.method;
  plen = q ? (size_t)(q - u) : n;
  c->t0 = c->rx && !hold_from_parsed ? c->rx : uv_hrtime();
  c->rx = 0; /* a pipelined request parsed later is held from then */
  if (plen == 5 && memcmp(u, "/zero", 5) == 0) {
    st.zero++;
    respond(c, 200, "{\"ok\":true}", 0);
    return;
  }
  if (plen == 6 && memcmp(u, "/stats", 6) == 0) {
    stats(c, q && memmem(q, n - plen, "reset=1", 7) != NULL);
    return;
  }
  if (!c->has_key) {
    st.unauthorized++;
    respond(c, 401, "{\"error\":\"missing X-API-Key\"}", 0);
    return;
  }
  static const char pre[] = "/api/sandboxes";
  if (plen >= sizeof pre - 1 && memcmp(u, pre, sizeof pre - 1) == 0) {
    const char *rest = u + sizeof pre - 1;
    size_t rn = plen - (sizeof pre - 1);
    if (rn == 0 && method == HTTP_POST) {
      json_t *b = json_loadb(c->body.p ? c->body.p : "", c->body.len, JSON_DECODE_ANY, NULL);
      json_t *pid = json_is_object(b) ? json_object_get(b, "projectId") : NULL;
      if (!json_is_string(pid)) {
        json_decref(b);
        st.bad++;
        respond(c, 400, "{\"error\":\"projectId is required\"}", 0);
        return;
      }
      json_t *tpl = json_object_get(b, "template");
      c->answer = tpl && !json_is_null(tpl) ? json_dumps(tpl, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
      json_decref(b);
      hold(c, R_CREATE, NOMINAL.create);
      return;
    }
    if (rn > 1 && rest[0] == '/') {
      const char *id = rest + 1, *slash = memchr(id, '/', rn - 1);
      size_t idn = slash ? (size_t)(slash - id) : rn - 1;
      size_t tail = rn - 1 - idn;
      if (idn > 0 && tail == 5 && memcmp(id + idn, "/exec", 5) == 0 && method == HTTP_POST) {
        json_t *b = json_loadb(c->body.p ? c->body.p : "", c->body.len, JSON_DECODE_ANY, NULL);
        json_t *cmd = json_is_object(b) ? json_object_get(b, "cmd") : NULL;
        if (!json_is_string(cmd)) {
          json_decref(b);
          st.bad++;
          respond(c, 400, "{\"error\":\"cmd is required\"}", 0);
          return;
        }
        c->answer = printed(json_string_value(cmd));
        json_decref(b);
        c->seq = parse_id(id, idn);
        hold(c, R_EXEC, NOMINAL.exec);
        return;
      }
      if (idn > 0 && tail == 0 && method == HTTP_DELETE) {
        c->seq = parse_id(id, idn);
        hold(c, R_DELETE, NOMINAL.del);
        return;
      }
    }
  }
  respond(c, 404, "{\"error\":\"no route\"}", 0);
}

/* ---- connections ------------------------------------------------------------------------- */

static void conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles > 0) return;
  free(c->url.p);
  free(c->body.p);
  free(c->field.p);
  free(c->left.p);
  free(c->answer);
  free(c);
}

static conn *conns;

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  if (c->route != R_NONE) in_flight--;
  c->route = R_NONE;
  if (c->hix) {
    heap_remove(c);
    tfd_arm();
  }
  if (c->prev) c->prev->next = c->next;
  else conns = c->next;
  if (c->next) c->next->prev = c->prev;
  st.connections--;
  uv_close((uv_handle_t *)&c->timer, conn_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

/* The socket is readable: read it here with recvmsg (for the receive stamp) and give libuv no
 * buffer, so libuv reads nothing and calls on_read with UV_ENOBUFS, which handles what was read
 * (not here: closing the stream inside this callback would leave libuv calling a read callback
 * it had cleared). The same as engine/h1.c. */
static void on_alloc(uv_handle_t *h, size_t s, uv_buf_t *b) {
  conn *c = h->data;
  uv_os_fd_t fd;
  uint64_t at;
  ssize_t n;
  (void)s;
  b->base = NULL;
  b->len = 0;
  if (c->closing || uv_fileno(h, &fd) != 0) return;
  n = recv_stamped(fd, rbuf, sizeof rbuf, &at);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  got.c = c;
  got.n = n < 0 ? -errno : n == 0 ? UV_EOF : n;
  got.at = at;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void read_on(conn *c) {
  if (c->reading || c->closing) return;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = 1;
  else conn_close(c);
}

static void read_off(conn *c) {
  if (!c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

static void bad_request(conn *c) {
  static const char r[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 19\r\n"
                          "Connection: close\r\n\r\nmalformed request\r\n";
  conn_send(c, r, sizeof r - 1);
  conn_close(c);
}

/* Parse data; what a paused parser (one request answered at a time) leaves waits in c->left. */
static void feed(conn *c, const char *data, size_t n) {
  size_t done = http_parser_execute(&c->parser, &settings, data, n);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
  if (c->closing) return;
  if (e == HPE_PAUSED) {
    size_t rest = n - done;
    if (data == c->left.p) {
      memmove(c->left.p, data + done, rest);
      c->left.len = rest;
    } else if (rest && buf_add(&c->left, data + done, rest) != 0) {
      conn_close(c);
      return;
    }
    if (c->left.len >= LEFT_MAX) read_off(c);
    if (c->pending) { /* answered out here, not inside the parser's callback: the answer may parse the next */
      c->pending = 0;
      route(c);
    }
    return;
  }
  if (data == c->left.p) c->left.len = 0;
  if (e != HPE_OK || done != n) bad_request(c);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  conn *c = got.c;
  (void)b;
  if (!c || c != s->data) return; /* UV_ENOBUFS with nothing read (see on_alloc) */
  got.c = NULL;
  n = got.n;
  if (n > 0) {
    c->rx = got.at;
    feed(c, rbuf, (size_t)n);
    c->rx = 0;
    return;
  }
  if (n == 0) return;
  if (n == UV_EOF && c->active) { /* a half-closed client still gets its answer */
    c->read_eof = 1;
    read_off(c);
    return;
  }
  conn_close(c);
}

static void shut_done(uv_shutdown_t *sh, int status) {
  (void)status;
  free(sh);
}

/* The answer is out: the next request (pipelined, or to come), or close. */
static void conn_next(conn *c) {
  c->active = 0;
  if (!c->keep || c->read_eof) {
    uv_shutdown_t *sh = malloc(sizeof *sh);
    read_off(c);
    if (!sh || uv_shutdown(sh, (uv_stream_t *)&c->tcp, shut_done) != 0) {
      free(sh);
      conn_close(c);
      return;
    }
    c->read_eof = 1;
    read_on(c); /* until the client closes: EOF then closes it */
    return;
  }
  http_parser_pause(&c->parser, 0);
  if (c->left.len > 0) {
    feed(c, c->left.p, c->left.len);
    if (c->closing || c->active) return;
  }
  read_on(c);
}

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  c->url.len = c->body.len = c->field.len = 0;
  c->head_bytes = 0;
  c->has_key = c->in_key = c->stamp = 0;
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  if ((c->head_bytes += n) > MAX_HEAD) return -1;
  return buf_add(&c->url, at, n);
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  if ((c->head_bytes += n) > MAX_HEAD) return -1;
  if (!c->in_key) c->field.len = 0;
  c->in_key = 1;
  return buf_add(&c->field, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  (void)at;
  if ((c->head_bytes += n) > MAX_HEAD) return -1;
  if (c->in_key && c->field.len == 9 && strncasecmp(c->field.p, "x-api-key", 9) == 0) c->has_key = 1;
  if (c->in_key && c->field.len == 12 && strncasecmp(c->field.p, "x-fake-stamp", 12) == 0) c->stamp = 1;
  c->in_key = 0;
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  if (c->body.len + n > MAX_BODY) return -1;
  return buf_add(&c->body, at, n);
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  st.requests++;
  c->active = 1;
  c->keep = http_should_keep_alive(p);
  http_parser_pause(p, 1);
  if (c->url.len == 0 && buf_add(&c->url, "/", 1) != 0) return -1;
  c->pending = 1; /* feed routes it once http_parser_execute has returned */
  return 0;
}

static void on_connection(uv_stream_t *ls, int status) {
  conn *c;
  if (status < 0 || !(c = calloc(1, sizeof *c))) return;
  uv_tcp_init(uv_default_loop(), &c->tcp);
  c->tcp.data = c;
  c->handles = 1;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    return;
  }
  uv_timer_init(uv_default_loop(), &c->timer);
  c->timer.data = c;
  c->handles = 2;
  c->next = conns;
  if (conns) conns->prev = c;
  conns = c;
  st.connections++;
  uv_tcp_nodelay(&c->tcp, 1);
  { /* the kernel stamps what arrives: the hold starts there (see on_alloc) */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) (void)rx_stamp_enable(fd);
  }
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  read_on(c);
}

/* ---- main -------------------------------------------------------------------------------- */

static void on_stop(uv_signal_t *s, int sig) {
  (void)sig;
  uv_stop(s->loop);
}

static void on_deadline(uv_timer_t *t) { uv_stop(t->loop); }

static int usage(const char *msg) {
  fprintf(stderr, "fake_provider: %s\nusage: fake_provider [--port 0] [--port-file F] [--create-ms 50] [--exec-ms 20] "
                  "[--delete-ms 10] [--max-seconds 3600] [--hold-from received|parsed|handler] [--release exact|tick]\n", msg);
  return 2;
}

static int number(const char *flag, const char *v, double *out) {
  char *e;
  if (!v) return -1;
  errno = 0;
  *out = strtod(v, &e);
  if (errno || e == v || *e || *out < 0) {
    fprintf(stderr, "fake_provider: %s: expected a number >= 0, got '%s'\n", flag, v);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  double port = 0, ms, max_s = 3600;
  const char *port_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(f, "--port")) {
      if (number(f, v, &port)) return 2;
    } else if (!strcmp(f, "--port-file")) {
      if (!v) return usage("--port-file needs a value");
      port_file = v;
    } else if (!strcmp(f, "--create-ms") || !strcmp(f, "--exec-ms") || !strcmp(f, "--delete-ms")) {
      if (number(f, v, &ms)) return 2;
      uint64_t ns = (uint64_t)(ms * 1e6);
      if (f[2] == 'c') NOMINAL.create = ns;
      else if (f[2] == 'e') NOMINAL.exec = ns;
      else NOMINAL.del = ns;
    } else if (!strcmp(f, "--max-seconds")) {
      if (number(f, v, &max_s)) return 2;
    } else if (!strcmp(f, "--hold-from")) {
      if (!v || (strcmp(v, "received") && strcmp(v, "parsed") && strcmp(v, "handler")))
        return usage("--hold-from: received, parsed or handler");
      /* handler: the Lua fake's flag; here the handler runs as the request is parsed */
      hold_from_parsed = !strcmp(v, "parsed") || !strcmp(v, "handler");
    } else if (!strcmp(f, "--release")) {
      if (!v || (strcmp(v, "exact") && strcmp(v, "tick"))) return usage("--release: exact or tick");
      release_tick = !strcmp(v, "tick");
    } else {
      char m[256];
      snprintf(m, sizeof m, "unknown flag '%s'", f);
      return usage(m);
    }
    i++;
  }
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;

  uv_loop_t *loop = uv_default_loop();
  if (!release_tick) {
    prctl(PR_SET_TIMERSLACK, 1UL); /* the kernel's default 50 us slack would batch the releases again */
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (tfd < 0 || uv_poll_init(loop, &tfd_poll, tfd) != 0 || uv_poll_start(&tfd_poll, UV_READABLE, on_tfd) != 0) {
      fprintf(stderr, "fake_provider: timerfd: %s\n", strerror(errno));
      return 1;
    }
    uv_unref((uv_handle_t *)&tfd_poll);
  }
  uv_tcp_t ls;
  struct sockaddr_in addr;
  uv_tcp_init(loop, &ls);
  uv_ip4_addr("127.0.0.1", (int)port, &addr);
  int rc = uv_tcp_bind(&ls, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&ls, 4096, on_connection);
  if (rc != 0) {
    fprintf(stderr, "fake_provider: listen on 127.0.0.1:%d: %s\n", (int)port, uv_strerror(rc));
    return 1;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  uv_tcp_getsockname(&ls, (struct sockaddr *)&ss, &len);
  int bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (port_file) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", bound) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0) {
      fprintf(stderr, "fake_provider: %s: %s\n", port_file, strerror(errno));
      return 1;
    }
  } else {
    printf("%d\n", bound);
    fflush(stdout);
  }
  uv_signal_t sterm, sint;
  uv_timer_t deadline;
  uv_signal_init(loop, &sterm);
  uv_signal_start(&sterm, on_stop, SIGTERM);
  uv_signal_init(loop, &sint);
  uv_signal_start(&sint, on_stop, SIGINT);
  uv_unref((uv_handle_t *)&sterm);
  uv_unref((uv_handle_t *)&sint);
  uv_timer_init(loop, &deadline);
  uv_timer_start(&deadline, on_deadline, (uint64_t)(max_s * 1000), 0);
  uv_run(loop, UV_RUN_DEFAULT);
  return 0;
}
