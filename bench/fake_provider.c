/* The benchmark's fake provider in C: the same loopback server as bench/fake_provider.lua (the
 * Lizard REST shape, injected latencies, a live set, /zero and /stats; see its header for the
 * routes), answering the same bytes but for the held times, at a fraction of its CPU. On a
 * 2-core machine the fake and the measured client share the cores: the Lua fake (cseng.serve
 * with a Lua handler) took ~30 us of CPU per request at 1,024 lifecycles in flight, as much as
 * the client it measures, so the bench measured the pair, not the client. bench/run.lua and
 * bench/probe.lua run this one (bench/lib.lua); spec/bench/fake_provider_spec.lua holds it to the Lua
 * fake's answers, over plain HTTP/1.1, TLS with HTTP/1.1 and TLS with HTTP/2.
 *
 *   build/bench/fake_provider [--port 0] [--port-file F] [--create-ms 50] [--exec-ms 20]
 *                             [--delete-ms 10] [--max-seconds 3600] [--hold-from received|parsed]
 *                             [--release exact|tick] [--tls-cert F --tls-key F [--alpn h2,http/1.1]]
 *
 * One libuv loop, Debian's http-parser, jansson for the JSON it reads, and with --tls-cert and
 * --tls-key OpenSSL (TLS 1.2 or 1.3, the protocol chosen by ALPN among --alpn's: h2, http/1.1 or
 * both, h2 first) and Debian's libnghttp2 for HTTP/2. A plain connection that opens with the
 * HTTP/2 preface speaks HTTP/2 too (prior knowledge). Every protocol answers the same routes
 * with the same holds: a request is held from the moment its last bytes arrived (the kernel's
 * receive stamp of the read that completed it: SO_TIMESTAMPNS, read with recvmsg; over TLS the
 * read whose bytes completed the record that completed the request, its decryption counted in
 * the hold like a provider's own work, and an HTTP/2 connection that carries several streams read
 * a record at a time (by_units), and read before an answer is written on it (drain_before_write),
 * so that requests waiting in its socket together keep their own arrivals; --hold-from parsed:
 * from when this loop parsed them)
 * until CLOCK_MONOTONIC (uv_hrtime, cseng's clock.now) has passed the nominal latency, never
 * less: a provider's latency includes its own queue, so a request that waited in this process's
 * socket while its loop was busy is not held longer for it; X-Fake-Held-Ns says how long it was
 * held, and, to a request that carries X-Fake-Stamp, X-Fake-Hold-From from when (CLOCK_MONOTONIC
 * ns: the client's clock.now on the same machine; the answer was made at Hold-From + Held-Ns, so
 * bench/client.lua can split its error into the way there, the way back and its own resume; on
 * request only, because one more header to parse is CPU taken from the client measured). It is
 * released at its own deadline (a timerfd armed at the earliest; see "the hold"), not on
 * libuv's millisecond ticks as the Lua fake's are (--release tick does that). An HTTP/1.1
 * connection's requests are answered one at a time, in order (pipelined bytes wait); an HTTP/2
 * connection's streams are held and answered each on its own. */
#include <errno.h>
#include <http_parser.h>
#include <inttypes.h>
#include <jansson.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
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
#define H2_STREAMS 1000 /* SETTINGS_MAX_CONCURRENT_STREAMS: above what a client asks (libcurl: 100) */
/* The longest run of releases (or of routing) between two looks at the sockets. 100 us had
 * started the holds of an HTTP/2 connection's requests late: those that came during a run queued
 * unread, were merged by the kernel and stamped with the newest arrival (PERFORMANCE item 24). */
#define RELEASE_SLICE_NS 20000
/* A write on a connection read a record at a time reads its socket first (drain_before_write)
 * unless the socket was looked at this recently: under load each connection is read every few
 * slices anyway, and reading it before every answer too cost a fifth more CPU a request. */
#define DRAIN_AFTER_NS 50000

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

typedef struct conn conn;

/* One request: parsed, routed, held, answered. An HTTP/1.1 connection has one (c->one), an
 * HTTP/2 one has one per stream. */
typedef struct rq {
  conn *c;
  int32_t stream; /* HTTP/2 stream id; 0: HTTP/1.1 */
  buf url, body, field, out;
  size_t head_bytes, out_off;
  int method, has_key, in_key, stamp, keep;
  int route;       /* what the held request is, once held */
  uint64_t seq;    /* the sandbox it names (exec, delete) or gets (create) */
  uint64_t t0;     /* the hold's start */
  uint64_t until;  /* the hold's end */
  size_t hix;      /* its place in the release heap + 1 (0: not in it) */
  char *answer;    /* create: the template's JSON; exec: the stdout */
  uv_timer_t *tick; /* --release tick: its millisecond timer (HTTP/1.1: the connection's) */
  struct rq *snext, *sprev; /* the connection's streams (HTTP/2) */
  struct rq *pnext, *pprev; /* HTTP/2: whole, stamped, waiting to be routed (see route_later) */
  int queued;
} rq;

enum { P_H1, P_H2 };

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  http_parser parser;
  int proto;      /* P_H1 or P_H2 (ALPN, or the prior-knowledge preface) */
  int sniffed;    /* plain: the first bytes were looked at for the HTTP/2 preface */
  rq one;         /* HTTP/1.1's request */
  buf left;       /* HTTP/1.1: bytes after a request, parsed once it is answered */
  int handles, closing, active, pending, reading, read_eof;
  uint64_t rx;    /* the kernel's receive stamp of the read being parsed (0: none) */
  SSL *ssl;       /* TLS (NULL: plain), on its own BIO (io_bio): */
  const char *in; /* the ciphertext read, where it lies, not yet taken by OpenSSL */
  size_t in_len;
  int hs_done;
  nghttp2_session *h2;
  int in_h2, doomed; /* inside nghttp2_session_mem_recv; closed meanwhile (closed once it returns) */
  rq *streams;    /* HTTP/2's requests */
  int nstreams, many; /* how many; many: it has carried two at once (then reads follow records) */
  int draining;       /* reading what waits before a write (h2_flush) */
  uint64_t looked;    /* when its socket was last read, or found empty (read_once) */
  rx_units units; /* over TLS: the client's records, followed from the first byte (by_units) */
  buf obuf;       /* HTTP/2 output gathered before it is encrypted and sent */
  conn *prev, *next;
};

static struct {
  uint64_t create, exec, del;
} NOMINAL = {50000000, 20000000, 10000000};
static int hold_from_parsed;
static struct { /* what on_alloc read, for on_read */
  conn *c;
  ssize_t n;
  size_t len; /* what it asked for (by_units) */
  uint64_t at;
} got;
static http_parser_settings settings;
static char rbuf[65536], pbuf[65536];
static int taking; /* a read's bytes in rbuf are being handled (took): OpenSSL may still point into them */
static char tls_out[65536]; /* over TLS: the records OpenSSL wrote, gathered for one write (tls_drain) */
static size_t out_len;      /* bytes in tls_out, */
static conn *out_c;         /* of this connection's */
static BIO_METHOD *io_method;
static unsigned char *live;
static size_t live_cap;
static uint64_t seq_next, nlive, in_flight, peak;
static struct {
  uint64_t requests, connections, created, deleted, execs, zero, not_found, bad, unauthorized;
  uint64_t tls_handshakes, tls_resumed, h2_connections;
  uint64_t unit_reads; /* reads that ended where a TLS record (or its header) ends (by_units) */
  uint64_t drained;    /* readings before a write (drain_before_write) that found bytes */
} st;
static SSL_CTX *tls_ctx;
static unsigned char alpn_wire[32]; /* the protocols --alpn allows, in ALPN's wire form */
static size_t alpn_wire_len;
static nghttp2_session_callbacks *h2_callbacks;

static void conn_close(conn *c);
static void conn_next(conn *c);
static void h2_flush(conn *c);
static void drain_before_write(conn *c);

/* ---- output ------------------------------------------------------------------------------- */

static void write_done(uv_write_t *w, int status) {
  (void)status;
  free(w);
}

/* Bytes onto the socket as they are (ciphertext, or plain). */
static void raw_send(conn *c, const char *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
  if (c->closing || n == 0) return;
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

/* What TLS wrote for c (tls_out), onto the socket in one write. */
static void tls_drain(conn *c) {
  size_t n = out_len;
  if (out_c != c) return;
  out_c = NULL;
  out_len = 0;
  raw_send(c, tls_out, n);
}

/* The connections' BIO, instead of a pair of memory BIOs (a copy, a zeroed grow and a buffer per
 * connection on every record, as the client, engine/tls.c): OpenSSL reads the ciphertext from
 * where the read left it (c->in), and its records are gathered in tls_out until tls_drain (every
 * SSL call that writes is followed by its connection's drain; another's first drains that one). */
static int io_read(BIO *b, char *out, int len) {
  conn *c = BIO_get_data(b);
  size_t n;
  BIO_clear_retry_flags(b);
  if (!c || !c->in_len) {
    BIO_set_retry_read(b); /* nothing yet: not the end */
    return -1;
  }
  n = c->in_len < (size_t)len ? c->in_len : (size_t)len;
  memcpy(out, c->in, n);
  c->in += n;
  c->in_len -= n;
  return (int)n;
}

static int io_write(BIO *b, const char *p, int len) {
  conn *c = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (!c || len <= 0) return len < 0 ? -1 : 0;
  if (out_c && (out_c != c || out_len + (size_t)len > sizeof tls_out)) tls_drain(out_c);
  if ((size_t)len > sizeof tls_out) {
    raw_send(c, p, (size_t)len);
    return len;
  }
  memcpy(tls_out + out_len, p, (size_t)len);
  out_len += (size_t)len;
  out_c = c;
  return len;
}

static long io_ctrl(BIO *b, int cmd, long num, void *ptr) {
  conn *c = BIO_get_data(b);
  (void)num;
  (void)ptr;
  if (cmd == BIO_CTRL_FLUSH) return 1;
  if (cmd == BIO_CTRL_PENDING) return c ? (long)c->in_len : 0;
  return 0;
}

static int io_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static BIO *io_bio(conn *c) {
  BIO *b;
  if (!io_method) {
    int type = BIO_get_new_index();
    if (type < 0 || !(io_method = BIO_meth_new(type | BIO_TYPE_SOURCE_SINK, "fake connection"))) return NULL;
    BIO_meth_set_read(io_method, io_read);
    BIO_meth_set_write(io_method, io_write);
    BIO_meth_set_ctrl(io_method, io_ctrl);
    BIO_meth_set_create(io_method, io_create);
  }
  if (!(b = BIO_new(io_method))) return NULL;
  BIO_set_data(b, c);
  return b;
}

/* Application bytes out: encrypted first over TLS. */
static void conn_send(conn *c, const char *p, size_t n) {
  if (c->closing || n == 0) return;
  if (!c->ssl) {
    raw_send(c, p, n);
    return;
  }
  if (SSL_write(c->ssl, p, (int)n) <= 0) { /* a memory BIO takes everything: only a broken session fails */
    conn_close(c);
    return;
  }
  tls_drain(c);
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

static ssize_t h2_body_read(nghttp2_session *s, int32_t sid, uint8_t *b, size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
  rq *r = src->ptr;
  size_t n = r->out.len - r->out_off;
  (void)s;
  (void)sid;
  (void)ud;
  if (n > len) n = len;
  memcpy(b, r->out.p + r->out_off, n);
  r->out_off += n;
  if (r->out_off == r->out.len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

#define NV(n, v, vl) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE}

/* held: the X-Fake-* headers (a held answer) or not (401, 400, the unheld routes) */
static void respond(rq *r, int status, const char *body, int held) {
  conn *c = r->c;
  size_t blen = strlen(body);
  char heldv[24], fromv[24];
  snprintf(heldv, sizeof heldv, "%" PRIu64, held ? uv_hrtime() - r->t0 : 0);
  snprintf(fromv, sizeof fromv, "%" PRIu64, r->t0);
  if (r->stream) { /* HTTP/2: the same header fields, lower case */
    char sv[8], lv[24];
    nghttp2_nv nv[8];
    size_t n = 0;
    nghttp2_data_provider prd = {.source.ptr = r, .read_callback = h2_body_read};
    snprintf(sv, sizeof sv, "%d", status);
    snprintf(lv, sizeof lv, "%zu", blen);
    nv[n++] = (nghttp2_nv)NV(":status", sv, strlen(sv));
    nv[n++] = (nghttp2_nv)NV("content-type", "application/json", 16);
    if (held) {
      nv[n++] = (nghttp2_nv)NV("x-fake-held-ns", heldv, strlen(heldv));
      nv[n++] = (nghttp2_nv)NV("x-fake-wait-ns", "0", 1);
      if (r->stamp) nv[n++] = (nghttp2_nv)NV("x-fake-hold-from", fromv, strlen(fromv));
    }
    if (status != 204) nv[n++] = (nghttp2_nv)NV("content-length", lv, strlen(lv));
    r->out.len = r->out_off = 0;
    if (blen && buf_add(&r->out, body, blen) != 0) {
      conn_close(c);
      return;
    }
    if (nghttp2_submit_response(c->h2, r->stream, nv, n, blen ? &prd : NULL) != 0) {
      conn_close(c);
      return;
    }
    h2_flush(c);
    return;
  }
  char head[512], len[48] = "";
  int n;
  if (status != 204) snprintf(len, sizeof len, "Content-Length: %zu\r\n", blen);
  if (held) {
    char stamp[48] = "";
    if (r->stamp) snprintf(stamp, sizeof stamp, "X-Fake-Hold-From: %s\r\n", fromv);
    n = snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Fake-Held-Ns: %s"
                 "\r\nX-Fake-Wait-Ns: 0\r\n%s%s%s\r\n",
                 status, reason(status), heldv, stamp, r->keep ? "" : "Connection: close\r\n", len);
  } else
    n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%s%s\r\n", status,
                 reason(status), r->keep ? "" : "Connection: close\r\n", len);
  char whole[sizeof head * 2];
  if (blen && (size_t)n < sizeof head && (size_t)n + blen <= sizeof whole) { /* a small answer: no allocation */
    memcpy(whole, head, (size_t)n);
    memcpy(whole + n, body, blen);
    conn_send(c, whole, (size_t)n + blen);
  } else if (blen) {
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

static void hold_done(rq *r) {
  int route = r->route;
  char body[256];
  r->route = R_NONE;
  in_flight--;
  if (route == R_CREATE) {
    uint64_t s = ++seq_next;
    if (live_set(s, 1) != 0) {
      conn_close(r->c);
      return;
    }
    nlive++;
    st.created++;
    snprintf(body, sizeof body,
             "{\"sandboxId\":\"lz-%08" PRIu64 "\",\"cpus\":2,\"memoryMb\":2048,\"region\":\"us-east-1\",\"template\":%s,"
             "\"size\":\"small\",\"status\":\"running\"}",
             s, r->answer ? r->answer : "\"base\"");
    free(r->answer);
    r->answer = NULL;
    respond(r, 201, body, 1);
    return;
  }
  if (!live_get(r->seq)) {
    free(r->answer);
    r->answer = NULL;
    st.not_found++;
    respond(r, 404, "{\"error\":\"sandbox not found\"}", 1);
    return;
  }
  if (route == R_EXEC) {
    json_t *o = json_pack("{s:i,s:s,s:s}", "exitCode", 0, "stdout", r->answer ? r->answer : "", "stderr", "");
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    free(r->answer);
    r->answer = NULL;
    json_decref(o);
    st.execs++;
    if (!js) {
      conn_close(r->c);
      return;
    }
    respond(r, 200, js, 1);
    free(js);
    return;
  }
  live_set(r->seq, 0);
  nlive--;
  st.deleted++;
  respond(r, 204, "", 1);
}

/* Release at the deadline. libuv's timers count whole milliseconds from a loop time cached once
 * per turn, so holds released by them go out in bursts on the loop's millisecond ticks, and
 * the measured client queued behind each burst: that queueing is the fake's artefact, not the
 * client's error (docs/PERFORMANCE.md, "The fake provider", has the before and after).
 * --release exact (the default) keeps the held requests in a min-heap by deadline and arms one
 * timerfd (CLOCK_MONOTONIC, the clock of uv_hrtime, absolute ns) at the earliest, so each is
 * released when its own deadline passes; --release tick is a per-request uv_timer (the Lua
 * fake's behaviour), for comparison. */
static int release_tick;
static rq **heap;
static size_t heap_n, heap_cap;
static int tfd = -1;
static uv_poll_t tfd_poll;
static uint64_t armed; /* the deadline the timerfd is set to (0: disarmed) */

static void heap_swap(size_t a, size_t b) {
  rq *t = heap[a];
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

static void heap_remove(rq *r) {
  size_t i = r->hix - 1;
  r->hix = 0;
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
  uint64_t now = uv_hrtime(), start = now;
  while (heap_n && heap[0]->until <= now) {
    rq *r = heap[0];
    /* what waits on its connection is read before the answer is made, so that reading is the
     * fake's own work inside the hold, not in the answer's way back; a stream reset meanwhile
     * takes its request out of the heap (reading adds none to it) */
    drain_before_write(r->c);
    if (!heap_n || heap[0] != r) continue;
    heap_remove(r);
    hold_done(r);
    if (!heap_n || heap[0]->until > now) now = uv_hrtime(); /* writes took time: catch up */
    /* back to the loop after a while, the rest released at once when it comes back: requests that
     * arrive meanwhile are read (and stamped) then, not after the whole batch. A socket left
     * unread merges what queues there and the kernel stamps it with the newest arrival, which
     * would start the holds of an HTTP/2 connection's earlier requests late */
    if (uv_hrtime() - start > RELEASE_SLICE_NS) break;
  }
  tfd_arm();
}

static void hold_tick(uv_timer_t *t) {
  rq *r = t->data;
  uint64_t now = uv_hrtime();
  if (now >= r->until) {
    hold_done(r);
    return;
  }
  uv_timer_start(t, hold_tick, (r->until - now + 999999) / 1000000, 0); /* whole ms, rounded up */
}

static void tick_freed(uv_handle_t *h) { free(h); }

/* --release tick: the request's timer (HTTP/1.1: the connection's; HTTP/2: its own) */
static uv_timer_t *tick_timer(rq *r) {
  if (!r->tick) {
    if (!(r->tick = malloc(sizeof *r->tick))) return NULL;
    uv_timer_init(uv_default_loop(), r->tick);
  }
  r->tick->data = r;
  return r->tick;
}

static void hold(rq *r, int route, uint64_t ns) {
  r->route = route;
  r->until = r->t0 + ns;
  if (++in_flight > peak) peak = in_flight;
  if (release_tick || r->until <= uv_hrtime()) {
    uv_timer_t *t = tick_timer(r);
    if (t) hold_tick(t);
    else conn_close(r->c);
    return;
  }
  if (heap_n == heap_cap) {
    size_t cap = heap_cap ? heap_cap * 2 : 1024;
    rq **n = realloc(heap, cap * sizeof *n);
    if (!n) {
      conn_close(r->c);
      return;
    }
    heap = n;
    heap_cap = cap;
  }
  heap[heap_n] = r;
  r->hix = ++heap_n;
  heap_up(heap_n - 1);
  tfd_arm();
}

/* ---- routing ----------------------------------------------------------------------------- */

static void stats(rq *r, int reset) {
  struct rusage u;
  char body[1280];
  getrusage(RUSAGE_SELF, &u);
  snprintf(body, sizeof body,
           "{\"requests\":%" PRIu64 ",\"connections\":%" PRIu64 ",\"peak_in_flight\":%" PRIu64 ",\"live\":%" PRIu64
           ",\"created\":%" PRIu64 ",\"deleted\":%" PRIu64 ",\"execs\":%" PRIu64 ",\"zero\":%" PRIu64
           ",\"not_found\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"unauthorized\":%" PRIu64
           ",\"user_s\":%.6f,\"sys_s\":%.6f,\"maxrss_kb\":%ld,\"now_ns\":%" PRIu64
           ",\"nominal_ns\":{\"create\":%" PRIu64 ",\"exec\":%" PRIu64 ",\"delete\":%" PRIu64 "},\"pid\":%d,\"impl\":\"c\""
           ",\"tls_handshakes\":%" PRIu64 ",\"tls_resumed\":%" PRIu64 ",\"h2_connections\":%" PRIu64
           ",\"unit_reads\":%" PRIu64 ",\"drained\":%" PRIu64 "}",
           st.requests, st.connections, peak, nlive, st.created, st.deleted, st.execs, st.zero, st.not_found, st.bad,
           st.unauthorized, (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6,
           (double)u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6, u.ru_maxrss, uv_hrtime(), NOMINAL.create, NOMINAL.exec,
           NOMINAL.del, (int)getpid(), st.tls_handshakes, st.tls_resumed, st.h2_connections, st.unit_reads,
           st.drained);
  if (reset) peak = in_flight;
  respond(r, 200, body, 0);
}

static void route(rq *r) {
  conn *c = r->c;
  const char *u = r->url.p;
  size_t n = r->url.len, plen;
  const char *q = memchr(u, '?', n);
  int method = r->method;
  plen = q ? (size_t)(q - u) : n;
  if (!r->stream) { /* (an HTTP/2 request's start was stamped when it was whole: route_later) */
    r->t0 = c->rx && !hold_from_parsed ? c->rx : uv_hrtime();
    c->rx = 0; /* a pipelined request parsed later is held from then */
  }
  if (plen == 5 && memcmp(u, "/zero", 5) == 0) {
    st.zero++;
    respond(r, 200, "{\"ok\":true}", 0);
    return;
  }
  if (plen == 6 && memcmp(u, "/stats", 6) == 0) {
    stats(r, q && memmem(q, n - plen, "reset=1", 7) != NULL);
    return;
  }
  if (!r->has_key) {
    st.unauthorized++;
    respond(r, 401, "{\"error\":\"missing X-API-Key\"}", 0);
    return;
  }
  static const char pre[] = "/api/sandboxes";
  if (plen >= sizeof pre - 1 && memcmp(u, pre, sizeof pre - 1) == 0) {
    const char *rest = u + sizeof pre - 1;
    size_t rn = plen - (sizeof pre - 1);
    if (rn == 0 && method == HTTP_POST) {
      json_t *b = json_loadb(r->body.p ? r->body.p : "", r->body.len, JSON_DECODE_ANY, NULL);
      json_t *pid = json_is_object(b) ? json_object_get(b, "projectId") : NULL;
      if (!json_is_string(pid)) {
        json_decref(b);
        st.bad++;
        respond(r, 400, "{\"error\":\"projectId is required\"}", 0);
        return;
      }
      json_t *tpl = json_object_get(b, "template");
      r->answer = tpl && !json_is_null(tpl) ? json_dumps(tpl, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
      json_decref(b);
      hold(r, R_CREATE, NOMINAL.create);
      return;
    }
    if (rn > 1 && rest[0] == '/') {
      const char *id = rest + 1, *slash = memchr(id, '/', rn - 1);
      size_t idn = slash ? (size_t)(slash - id) : rn - 1;
      size_t tail = rn - 1 - idn;
      if (idn > 0 && tail == 5 && memcmp(id + idn, "/exec", 5) == 0 && method == HTTP_POST) {
        json_t *b = json_loadb(r->body.p ? r->body.p : "", r->body.len, JSON_DECODE_ANY, NULL);
        json_t *cmd = json_is_object(b) ? json_object_get(b, "cmd") : NULL;
        if (!json_is_string(cmd)) {
          json_decref(b);
          st.bad++;
          respond(r, 400, "{\"error\":\"cmd is required\"}", 0);
          return;
        }
        r->answer = printed(json_string_value(cmd));
        json_decref(b);
        r->seq = parse_id(id, idn);
        hold(r, R_EXEC, NOMINAL.exec);
        return;
      }
      if (idn > 0 && tail == 0 && method == HTTP_DELETE) {
        r->seq = parse_id(id, idn);
        hold(r, R_DELETE, NOMINAL.del);
        return;
      }
    }
  }
  respond(r, 404, "{\"error\":\"no route\"}", 0);
}

/* ---- requests ------------------------------------------------------------------------------ */

/* A request is gone (answered, reset, or its connection closed): out of the heap, its buffers
 * freed (the HTTP/1.1 one is the connection's and is reused). */
static void rq_clear(rq *r) {
  if (r->route != R_NONE) in_flight--;
  r->route = R_NONE;
  if (r->hix) {
    heap_remove(r);
    tfd_arm();
  }
  if (r->tick && r->tick != &r->c->timer) {
    uv_timer_stop(r->tick);
    uv_close((uv_handle_t *)r->tick, tick_freed);
  }
  r->tick = NULL;
  free(r->url.p);
  free(r->body.p);
  free(r->field.p);
  free(r->out.p);
  free(r->answer);
  r->url = r->body = r->field = r->out = (buf){0};
  r->answer = NULL;
}

static void unqueue(rq *r);

static void rq_free(rq *r) {
  conn *c = r->c;
  unqueue(r);
  if (r->sprev) r->sprev->snext = r->snext;
  else if (c->streams == r) c->streams = r->snext;
  if (r->snext) r->snext->sprev = r->sprev;
  if (r->stream) c->nstreams--;
  rq_clear(r);
  free(r);
}

/* ---- connections ------------------------------------------------------------------------- */

static void conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->handles > 0) return;
  free(c->left.p);
  free(c->obuf.p);
  free(c);
}

static conn *conns;

static void conn_close(conn *c) {
  if (c->closing || c->doomed) return;
  if (c->in_h2) { /* nghttp2's callbacks are running: the session is deleted once they are done */
    c->doomed = 1;
    return;
  }
  c->closing = 1;
  c->one.tick = NULL; /* the connection's own timer, closed below */
  c->timer.data = c;  /* (--release tick pointed it at the request) */
  rq_clear(&c->one);
  while (c->streams) rq_free(c->streams);
  if (c->h2) nghttp2_session_del(c->h2); /* its stream data pointed at the requests freed above */
  c->h2 = NULL;
  if (c->ssl) SSL_free(c->ssl); /* and its BIO */
  c->ssl = NULL;
  if (out_c == c) out_c = NULL, out_len = 0; /* (its records go nowhere now) */
  if (c->prev) c->prev->next = c->next;
  else conns = c->next;
  if (c->next) c->next->prev = c->prev;
  st.connections--;
  uv_close((uv_handle_t *)&c->timer, conn_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

/* Whether c's reads end where a TLS record ends. A read is stamped with the arrival of the newest
 * segment it took (engine/rxstamp.h), so where a client's requests queue in the socket while this
 * loop is busy (an HTTP/2 connection that has carried two streams at once), one read of them all
 * would start every hold at the last one's arrival. There a read ends where the record it is in
 * ends, and each request is stamped when the record that completed it arrived, as the client
 * reads its answers (engine/h1.c by_units; recv_stamped_unit: a record's body and the next
 * header in one call). Elsewhere, as much as the buffer holds. */
static int by_units(const conn *c) { return c->ssl && c->many; }

/* One read of c's socket into rbuf, kept in got with its receive stamp; 0 if there was nothing
 * to read. */
static int read_once(conn *c) {
  uv_os_fd_t fd;
  uint64_t at;
  ssize_t n;
  size_t len = sizeof rbuf;
  if (c->closing || uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) return 0;
  c->looked = uv_hrtime();
  if (by_units(c)) {
    n = recv_stamped_unit(fd, &c->units, 5, rbuf, sizeof rbuf, &at, &len);
    if (n > 0) st.unit_reads++;
  } else {
    n = recv_stamped(fd, rbuf, len, &at);
    if (n > 0 && c->ssl) rx_units_follow(&c->units, 5, (const unsigned char *)rbuf, (size_t)n);
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  got.c = c;
  got.len = len;
  got.n = n < 0 ? -errno : n == 0 ? UV_EOF : n;
  got.at = at;
  return 1;
}

/* The socket is readable: read it here with recvmsg (for the receive stamp) and give libuv no
 * buffer, so libuv reads nothing and calls on_read with UV_ENOBUFS, which handles what was read
 * (not here: closing the stream inside this callback would leave libuv calling a read callback
 * it had cleared). The same as engine/h1.c. */
static void on_alloc(uv_handle_t *h, size_t s, uv_buf_t *b) {
  (void)s;
  b->base = NULL;
  b->len = 0;
  read_once(h->data);
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
      route(&c->one);
    }
    return;
  }
  if (data == c->left.p) c->left.len = 0;
  if (e != HPE_OK || done != n) bad_request(c);
}

static void h2_start(conn *c);

/* Plaintext that arrived (the receive stamp of its read is in c->rx). */
static void plain_in(conn *c, const char *p, size_t n) {
  if (!c->ssl && !c->sniffed) { /* the HTTP/2 prior-knowledge preface, or HTTP/1.1 */
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t k = n < sizeof preface - 1 ? n : sizeof preface - 1;
    if (k == 0) return;
    c->sniffed = 1;
    if (memcmp(p, preface, k) == 0) h2_start(c); /* a preface split across reads is nghttp2's to check */
  }
  if (c->proto == P_H2) {
    ssize_t used;
    c->in_h2 = 1;
    used = nghttp2_session_mem_recv(c->h2, (const uint8_t *)p, n);
    c->in_h2 = 0;
    if (c->doomed) {
      c->doomed = 0;
      conn_close(c);
      return;
    }
    if (used < 0) {
      h2_flush(c); /* its GOAWAY */
      conn_close(c);
      return;
    }
    h2_flush(c);
    return;
  }
  feed(c, p, n);
}

/* Ciphertext that arrived: the handshake, then the records' plaintext. */
static void tls_in(conn *c, const char *p, size_t n) {
  int k;
  c->in = p; /* OpenSSL takes it all before this returns (it keeps a partial record itself) */
  c->in_len = n;
  if (!c->hs_done) {
    k = SSL_do_handshake(c->ssl);
    tls_drain(c);
    if (k != 1) {
      int e = SSL_get_error(c->ssl, k);
      c->in_len = 0;
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) conn_close(c); /* a failed handshake */
      ERR_clear_error();
      return;
    }
    c->hs_done = 1;
    st.tls_handshakes++;
    if (SSL_session_reused(c->ssl)) st.tls_resumed++;
    {
      const unsigned char *proto = NULL;
      unsigned plen = 0;
      SSL_get0_alpn_selected(c->ssl, &proto, &plen);
      if (plen == 2 && memcmp(proto, "h2", 2) == 0) h2_start(c);
    }
    if (c->closing) return;
  }
  /* read while there is something to read: the rest of a record, or more ciphertext (a read
   * that finds nothing fails, and failing costs more than asking) */
  k = 1;
  while (!c->closing && (c->in_len || SSL_has_pending(c->ssl)) && (k = SSL_read(c->ssl, pbuf, sizeof pbuf)) > 0)
    plain_in(c, pbuf, (size_t)k);
  c->in_len = 0;
  if (c->closing) return;
  tls_drain(c); /* what reading wrote (a key update, an alert) */
  if (k <= 0) {
    int e = SSL_get_error(c->ssl, k);
    ERR_clear_error();
    if (e == SSL_ERROR_ZERO_RETURN) { /* close_notify: as the end of the stream */
      if (c->proto == P_H1 && c->one.c && c->active) {
        c->read_eof = 1;
        read_off(c);
      } else conn_close(c);
    } else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
      conn_close(c);
  }
}

/* What one read gave (got). */
static void took(conn *c, ssize_t n) {
  if (n > 0) {
    c->rx = got.at;
    taking = 1;
    if (c->ssl) tls_in(c, rbuf, (size_t)n);
    else plain_in(c, rbuf, (size_t)n);
    taking = 0;
    if (!c->closing) c->rx = 0;
    return;
  }
  if (n == 0) return;
  if (n == UV_EOF && c->active && c->proto == P_H1) { /* a half-closed client still gets its answer */
    c->read_eof = 1;
    read_off(c);
    return;
  }
  conn_close(c);
}

/* What read_once read of c (got), handled; and while reads end where a record ends and take all
 * they ask for, the next at once, up to 128 reads (by_units), as a buffer-sized read takes as
 * much. */
static void take_reads(conn *c) {
  for (int i = 0; i < 128; i++) {
    ssize_t k = got.n;
    size_t len = got.len;
    got.c = NULL;
    took(c, k);
    if (i == 127 || len == sizeof rbuf || k < (ssize_t)len || c->closing || !c->reading || !read_once(c))
      return;
  }
}

/* UV_ENOBUFS, always: on_alloc read the socket (or found nothing). */
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  (void)b;
  (void)n;
  if (got.c && got.c == s->data) take_reads(got.c); /* (none: UV_ENOBUFS with nothing read) */
}

static void shut_done(uv_shutdown_t *sh, int status) {
  (void)status;
  free(sh);
}

/* The answer is out: the next request (pipelined, or to come), or close. */
static void conn_next(conn *c) {
  c->active = 0;
  if (!c->one.keep || c->read_eof) {
    uv_shutdown_t *sh = malloc(sizeof *sh);
    read_off(c);
    if (c->ssl) {
      SSL_shutdown(c->ssl); /* close_notify */
      tls_drain(c);
      if (c->closing) {
        free(sh);
        return;
      }
    }
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
  rq *r = &c->one;
  r->url.len = r->body.len = r->field.len = 0;
  r->head_bytes = 0;
  r->has_key = r->in_key = r->stamp = 0;
  return 0;
}

/* A header field of a request (either protocol): the two the fake reads. */
static void header_seen(rq *r, const char *name, size_t nl) {
  if (nl == 9 && strncasecmp(name, "x-api-key", 9) == 0) r->has_key = 1;
  if (nl == 12 && strncasecmp(name, "x-fake-stamp", 12) == 0) r->stamp = 1;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  rq *r = &((conn *)p->data)->one;
  if ((r->head_bytes += n) > MAX_HEAD) return -1;
  return buf_add(&r->url, at, n);
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  rq *r = &((conn *)p->data)->one;
  if ((r->head_bytes += n) > MAX_HEAD) return -1;
  if (!r->in_key) r->field.len = 0;
  r->in_key = 1;
  return buf_add(&r->field, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  rq *r = &((conn *)p->data)->one;
  (void)at;
  if ((r->head_bytes += n) > MAX_HEAD) return -1;
  if (r->in_key) header_seen(r, r->field.p, r->field.len);
  r->in_key = 0;
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  rq *r = &((conn *)p->data)->one;
  if (r->body.len + n > MAX_BODY) return -1;
  return buf_add(&r->body, at, n);
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  rq *r = &c->one;
  st.requests++;
  c->active = 1;
  r->keep = http_should_keep_alive(p);
  r->method = p->method;
  http_parser_pause(p, 1);
  if (r->url.len == 0 && buf_add(&r->url, "/", 1) != 0) return -1;
  c->pending = 1; /* feed routes it once http_parser_execute has returned */
  return 0;
}

/* ---- HTTP/2 ------------------------------------------------------------------------------- */

/* HTTP/2 requests are routed (their JSON read, their hold begun) after every readable socket has
 * been read, a slice at a time, not inside the read that completed them: an HTTP/2 connection
 * carries many requests, and while this loop worked through one socket's the others' sat unread,
 * where the kernel merges what queues and stamps it with the newest arrival, starting their
 * holds late. Each request keeps the stamp of the read that completed it. */
static rq *pend_head, *pend_tail;
static uv_idle_t route_idle;

static void unqueue(rq *r) {
  if (!r->queued) return;
  if (r->pprev) r->pprev->pnext = r->pnext;
  else pend_head = r->pnext;
  if (r->pnext) r->pnext->pprev = r->pprev;
  else pend_tail = r->pprev;
  r->pnext = r->pprev = NULL;
  r->queued = 0;
}

static void on_route_idle(uv_idle_t *h) {
  uint64_t start = uv_hrtime();
  while (pend_head) {
    rq *r = pend_head;
    conn *c = r->c;
    unqueue(r);
    route(r);
    if (!c->closing) h2_flush(c); /* an answer made at once (/zero, a refusal) */
    if (uv_hrtime() - start > RELEASE_SLICE_NS) return; /* the sockets first, the rest next turn */
  }
  uv_idle_stop(h);
}

static void route_later(rq *r) {
  r->t0 = r->c->rx && !hold_from_parsed ? r->c->rx : uv_hrtime();
  r->queued = 1;
  r->pnext = NULL;
  r->pprev = pend_tail;
  if (pend_tail) pend_tail->pnext = r;
  else pend_head = r;
  pend_tail = r;
  uv_idle_start(&route_idle, on_route_idle);
}

/* Before a write on a connection read a record at a time, and before a held answer on it is made
 * (on_tfd: the reading is then the fake's own work inside the hold): what waits in its socket is
 * read now.
 * A write carries the acknowledgement of every byte received, read or not, and the kernel appends a
 * segment that arrives behind an acknowledged, unread one to it, with the newer stamp (it merges
 * no segment whose sender still holds it): requests left unread across this write could no longer
 * be told apart. */
static void drain_before_write(conn *c) {
  /* (not while a read is handled: its bytes are still being taken from rbuf, and the reading goes
   * on once they are) */
  if (!by_units(c) || c->draining || taking || !c->reading || uv_hrtime() - c->looked < DRAIN_AFTER_NS)
    return;
  c->draining = 1;
  if (read_once(c)) {
    if (got.n > 0) st.drained++;
    take_reads(c);
  }
  c->draining = 0;
}

/* Everything nghttp2 has to send, encrypted over TLS as one write. */
static void h2_flush(conn *c) {
  const uint8_t *d;
  ssize_t n;
  if (c->closing || c->doomed || !c->h2 || c->in_h2) return; /* (inside nghttp2: sent once it returns) */
  drain_before_write(c);
  if (c->closing || c->doomed || !c->h2) return;
  c->obuf.len = 0;
  while ((n = nghttp2_session_mem_send(c->h2, &d)) > 0)
    if (buf_add(&c->obuf, (const char *)d, (size_t)n) != 0) {
      conn_close(c);
      return;
    }
  if (n < 0) {
    conn_close(c);
    return;
  }
  conn_send(c, c->obuf.p, c->obuf.len);
  if (!c->closing && !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) conn_close(c);
}

static int h2_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  conn *c = ud;
  rq *r;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  if (!(r = calloc(1, sizeof *r))) return NGHTTP2_ERR_CALLBACK_FAILURE;
  r->c = c;
  r->stream = f->hd.stream_id;
  r->keep = 1;
  r->snext = c->streams;
  if (c->streams) c->streams->sprev = r;
  c->streams = r;
  if (++c->nstreams > 1) c->many = 1;
  nghttp2_session_set_stream_user_data(s, f->hd.stream_id, r);
  return 0;
}

static int h2_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl, const uint8_t *value,
                     size_t vl, uint8_t flags, void *ud) {
  rq *r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  (void)flags;
  if (((conn *)ud)->doomed) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (!r) return 0;
  if ((r->head_bytes += nl + vl) > MAX_HEAD) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (nl == 5 && memcmp(name, ":path", 5) == 0) {
    r->url.len = 0;
    if (buf_add(&r->url, (const char *)value, vl) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  } else if (nl == 7 && memcmp(name, ":method", 7) == 0) {
    static const struct {
      const char *m;
      int id;
    } ms[] = {{"GET", HTTP_GET}, {"POST", HTTP_POST}, {"DELETE", HTTP_DELETE}, {"PUT", HTTP_PUT}, {"HEAD", HTTP_HEAD}};
    r->method = -1;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
      if (vl == strlen(ms[i].m) && memcmp(value, ms[i].m, vl) == 0) r->method = ms[i].id;
  } else
    header_seen(r, (const char *)name, nl);
  return 0;
}

static int h2_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *d, size_t n, void *ud) {
  rq *r = nghttp2_session_get_stream_user_data(s, sid);
  (void)flags;
  (void)ud;
  if (!r) return 0;
  if (r->body.len + n > MAX_BODY) return nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, sid, NGHTTP2_REFUSED_STREAM);
  return buf_add(&r->body, (const char *)d, n) == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* A request stream's last frame: the request is whole; it is routed (and held) now. */
static int h2_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  rq *r;
  (void)ud;
  if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return 0;
  if (!(r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id)) || r->route != R_NONE || r->queued) return 0;
  st.requests++;
  if (r->url.len == 0 && buf_add(&r->url, "/", 1) != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
  route_later(r);
  return 0;
}

static int h2_stream_close(nghttp2_session *s, int32_t sid, uint32_t err, void *ud) {
  rq *r = nghttp2_session_get_stream_user_data(s, sid);
  (void)err;
  (void)ud;
  if (r) {
    nghttp2_session_set_stream_user_data(s, sid, NULL);
    rq_free(r);
  }
  return 0;
}

static void h2_start(conn *c) {
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_STREAMS},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
  if (nghttp2_session_server_new(&c->h2, h2_callbacks, c) != 0) {
    c->h2 = NULL;
    conn_close(c);
    return;
  }
  c->proto = P_H2;
  st.h2_connections++;
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  /* the connection's window as large as a stream's, so many streams' bodies never stall it */
  nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 16 << 20);
  h2_flush(c);
}

/* ---- accepting ------------------------------------------------------------------------------ */

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
  c->one.c = c;
  c->one.tick = &c->timer;
  uv_tcp_nodelay(&c->tcp, 1);
  { /* the kernel stamps what arrives: the hold starts there (see on_alloc) */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0) (void)rx_stamp_enable(fd);
  }
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  if (tls_ctx) {
    BIO *b = NULL;
    if (!(c->ssl = SSL_new(tls_ctx)) || !(b = io_bio(c))) {
      conn_close(c);
      return;
    }
    SSL_set_bio(c->ssl, b, b); /* (one reference, both ways) */
    SSL_set_accept_state(c->ssl);
  }
  read_on(c);
}

/* ALPN: the client's first protocol that --alpn allows, h2 before http/1.1; none in common: the
 * handshake goes on without ALPN (HTTP/1.1), as servers do. */
static int alpn_select(SSL *s, const unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned inlen,
                       void *arg) {
  (void)s;
  (void)arg;
  if (SSL_select_next_proto((unsigned char **)out, outlen, alpn_wire, (unsigned)alpn_wire_len, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_OK;
  return SSL_TLSEXT_ERR_NOACK;
}

static int tls_setup(const char *cert, const char *key, const char *alpn) {
  char list[64];
  if (strlen(alpn) >= sizeof list) return -1;
  strcpy(list, alpn);
  for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
    size_t n = strlen(t);
    if ((n != 2 || strcmp(t, "h2")) && strcmp(t, "http/1.1")) {
      fprintf(stderr, "fake_provider: --alpn: h2 and/or http/1.1, comma-separated, got '%s'\n", t);
      return -1;
    }
    alpn_wire[alpn_wire_len++] = (unsigned char)n;
    memcpy(alpn_wire + alpn_wire_len, t, n);
    alpn_wire_len += n;
  }
  if (!alpn_wire_len) return -1;
  if (!(tls_ctx = SSL_CTX_new(TLS_server_method())) || !SSL_CTX_set_min_proto_version(tls_ctx, TLS1_2_VERSION) ||
      SSL_CTX_use_certificate_chain_file(tls_ctx, cert) != 1 ||
      SSL_CTX_use_PrivateKey_file(tls_ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(tls_ctx) != 1) {
    char e[256];
    ERR_error_string_n(ERR_get_error(), e, sizeof e);
    fprintf(stderr, "fake_provider: TLS with %s and %s: %s\n", cert, key, e);
    return -1;
  }
  SSL_CTX_set_alpn_select_cb(tls_ctx, alpn_select, NULL);
  return 0;
}

/* ---- main -------------------------------------------------------------------------------- */

static void on_stop(uv_signal_t *s, int sig) {
  (void)sig;
  uv_stop(s->loop);
}

static void on_deadline(uv_timer_t *t) { uv_stop(t->loop); }

static int usage(const char *msg) {
  fprintf(stderr, "fake_provider: %s\nusage: fake_provider [--port 0] [--port-file F] [--create-ms 50] [--exec-ms 20] "
                  "[--delete-ms 10] [--max-seconds 3600] [--hold-from received|parsed|handler] [--release exact|tick] "
                  "[--tls-cert F --tls-key F [--alpn h2,http/1.1]]\n", msg);
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
  const char *port_file = NULL, *cert = NULL, *key = NULL, *alpn = "h2,http/1.1";
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
    } else if (!strcmp(f, "--tls-cert") || !strcmp(f, "--tls-key") || !strcmp(f, "--alpn")) {
      if (!v) {
        char m[64];
        snprintf(m, sizeof m, "%s needs a value", f);
        return usage(m);
      }
      if (f[2] == 'a') alpn = v;
      else if (f[6] == 'c') cert = v;
      else key = v;
    } else {
      char m[256];
      snprintf(m, sizeof m, "unknown flag '%s'", f);
      return usage(m);
    }
    i++;
  }
  if (!cert != !key) return usage("--tls-cert and --tls-key go together");
  if (cert && tls_setup(cert, key, alpn) != 0) return 2;
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
  if (nghttp2_session_callbacks_new(&h2_callbacks) != 0) return 1;
  nghttp2_session_callbacks_set_on_begin_headers_callback(h2_callbacks, h2_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(h2_callbacks, h2_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h2_callbacks, h2_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(h2_callbacks, h2_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks, h2_stream_close);

  uv_loop_t *loop = uv_default_loop();
  uv_idle_init(loop, &route_idle);
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
