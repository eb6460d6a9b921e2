/*
 * h1.c: an HTTP/1.1 keep-alive client on libuv and Debian's http_parser (see h1.h), plain or
 * over TLS (tls.c).
 *
 * Connections are kept per origin (scheme, host and port as written in the URL, and for TLS the
 * verification asked for) in a list of idle ones, newest first; an idle connection stays
 * read-polled, and anything it reads (the server closing it, or junk; over TLS, anything but
 * the session tickets a TLS 1.3 server sends after the handshake) closes it. A request goes to
 * the newest idle connection, else to a new one. As in libcurl, a request on a reused connection
 * that fails before one response byte (the server had closed it in the meantime) is sent once
 * more on a new connection.
 *
 * Each connection owns its libuv handles (TCP stream, timer) and requests (connect, write,
 * getaddrinfo); a call borrows one connection at a time.
 *
 * A response's end is stamped when it arrived, not when this loop got to it: each socket has
 * SO_TIMESTAMPNS, and the connection reads its socket itself with recvmsg, taking the kernel's
 * receive time of the bytes read. It reads in libuv's alloc callback, which then hands libuv no
 * buffer: libuv documents that as "read nothing" and calls the read callback with UV_ENOBUFS,
 * where what was read is parsed (not in the alloc callback: closing the stream there would
 * leave libuv calling a read callback it had cleared). An answer that waited in the socket
 * while the loop was busy (with a thousand calls in flight, it can be milliseconds) is this client's wait, not
 * the server's, and does not count in t_total. Over TLS the connection hands OpenSSL what it
 * read (tls.h's tls_io: taken where it lies, no memory BIO) and parses the plaintext that comes
 * out, stamped with the read whose ciphertext completed it; what OpenSSL writes is gathered and
 * goes out through the same stream in one write. The handshake
 * is timed apart (t_tls), its session kept per origin and offered to the next connection.
 * Closing a connection closes both handles and frees it on the second close callback; a
 * getaddrinfo in flight is detached, not waited for.
 */
#include "h1.h"
#include "h2.h"
#include "rxstamp.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <stddef.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORIGIN_BUCKETS 256
#define ADDRS_MAX 8
#define DNS_TTL_NS (60ull * 1000000000ull) /* libcurl's DNS cache timeout */
#define READ_BUF (64 * 1024)

typedef struct h1_origin h1_origin;

typedef struct h1_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_connect_t connect;
  uv_write_t write;
  http_parser parser;
  h1_origin *origin;
  h1_call *call;                     /* the call on it; NULL when idle */
  struct h1_conn *prev, *next;       /* the origin's idle list */
  struct h1_conn *all_prev, *all_next; /* every open connection */
  struct gai *gai;                   /* a name lookup in flight */
  int closing, closes;               /* handles closed so far (2: free) */
  int connected, idle, msg_done, in_trailers, value_seen, next_addr;
  int writing;                       /* uv_writes still queued (the request's, or TLS records) */
  SSL *ssl;                          /* TLS (NULL: plain), on io: */
  tls_io io;                         /* the ciphertext read, for OpenSSL; what it writes goes to G.out */
  int hs_done;                       /* the TLS handshake is done */
  int offer_h2, pk;                  /* it may speak HTTP/2: offered by ALPN, or with prior knowledge (plain) */
  int proto;                         /* once ready: 0 HTTP/1.1, 2 HTTP/2 (h2: its session) */
  struct h2_sess *h2;
  h1_call *waiters;                  /* calls waiting for it to be ready (it may carry them as streams) */
  unsigned nwaiters;
  struct h1_conn *fnext;             /* the connections with requests gathered (G.flushq) */
  int fqueued;                       /* it is in G.flushq */
  struct h1_conn *lprev, *lnext;     /* the origin's list it is in (list): */
  int list;                          /* 0 none, L_H2 ready HTTP/2 connections, L_PENDING opening ones that may be */
  int bad_status;                    /* a status line http_parser took and libcurl would not (< 100) */
  uint64_t uses;                     /* calls it carried */
  int fail_err, fail_os;             /* a failure delivered from the timer (never from h1_start) */
  int fail_pending;                  /* the timer is armed at 0 to deliver fail_err */
  uint64_t deadline;                 /* the call's timeout (uv_hrtime ns; 0: none) */
  uint64_t armed;                    /* the deadline the timer was last started for */
  char *line;                        /* the header line being read: "Name: value" */
  size_t line_len, line_cap;
  rx_units units;                    /* the server's TLS records, or cleartext HTTP/2 frames (by_units) */
} h1_conn;

enum { L_H2 = 1, L_PENDING };

struct h1_origin {
  h1_origin *next;
  h1_conn *idle; /* newest first */
  long nidle;
  h1_conn *h2;      /* its HTTP/2 connections (each carries up to max_streams calls) */
  h1_conn *pending; /* its connections being opened that may speak HTTP/2 (calls wait for them) */
  int h1_known;     /* its last TLS handshake chose HTTP/1.1: calls do not wait for the next */
  struct tls_conf *tls; /* https (NULL: plain): the verification its connections do */
  tls_cache cache;      /* their newest TLS session, offered to the next connection */
  struct sockaddr_storage addrs[ADDRS_MAX];
  int naddrs;
  uint64_t addrs_at; /* when resolved (names only) */
  int numeric;       /* the host is an address: addrs never expire */
  int port;
  size_t host_len;
  char host[]; /* NUL-terminated */
};

struct gai {
  uv_getaddrinfo_t req;
  h1_conn *conn; /* NULL: the connection was closed meanwhile */
};

static struct {
  uv_loop_t *loop;
  h1_origin *b[ORIGIN_BUCKETS];
  h1_conn *all;
  long idle_max;
  unsigned max_streams; /* HTTP/2 streams per connection, at most */
  h1_stats st;
  char rbuf[READ_BUF]; /* every read lands here and is parsed at once */
  char pbuf[READ_BUF]; /* over TLS: the plaintext of what was read */
  char obuf[READ_BUF]; /* over TLS: records OpenSSL wrote, on their way to the socket (tls_flush) */
  size_t out_len;      /* bytes in obuf, */
  struct h1_conn *out_k; /* of this connection's (NULL: none) */
  struct h1_conn *flushq; /* HTTP/2 connections with requests gathered for one write (h1_flush) */
  void (*flush_notify)(void);
  char wbuf[16384];    /* over TLS: a request's head and body together, one record (each costs ~7k instructions) */
  struct {             /* what on_alloc read, for on_read */
    h1_conn *k;
    ssize_t n;
    size_t len; /* what it asked for (by_units) */
    uint64_t at;
  } got;
} G = {.idle_max = 1024, .max_streams = 100};

static http_parser_settings settings;
static int conn_write(h1_conn *k);
static void conn_connect(h1_conn *k);
static int dispatch(h1_origin *o, h1_call *c);
static void call_end(h1_call *c, int err, int os_errno);

/* ---- URLs ----------------------------------------------------------------------------- */

/* The last authority (host[:port]) taken, and what it split into: a client calls one origin
 * over and over, and the host's checks (inet_pton, the canonical form) were ~2% of its CPU */
static struct {
  char auth[96];
  size_t len;
  size_t host_off, host_len;
  int tls, ipv6, port, default_port;
} last_auth;

int h1_url_split(const char *url, size_t len, h1_url *u) {
  const char *p = url, *end = url + len, *h, *he, *ae, *auth;
  int tls;
  memset(u, 0, sizeof *u);
  if (len >= 8 && memcmp(p, "http://", 7) == 0) tls = 0, p += 7;
  else if (len >= 9 && memcmp(p, "https://", 8) == 0) tls = 1, p += 8;
  else return 0;
  auth = p;
  u->tls = tls;
  for (ae = p; ae < end && *ae != '/' && *ae != '?' && *ae != '#'; ae++) {}
  if (last_auth.len && last_auth.tls == tls && (size_t)(ae - p) == last_auth.len &&
      memcmp(p, last_auth.auth, last_auth.len) == 0) {
    u->host = p + last_auth.host_off, u->host_len = last_auth.host_len;
    u->ipv6 = last_auth.ipv6, u->port = last_auth.port, u->default_port = last_auth.default_port;
    p = ae;
    goto target;
  }
  if (p < end && *p == '[') { /* [IPv6] */
    const char *q = memchr(p, ']', (size_t)(end - p));
    char tmp[64];
    struct in6_addr a6;
    if (!q || (size_t)(q - p - 1) >= sizeof tmp || q == p + 1) return 0;
    memcpy(tmp, p + 1, (size_t)(q - p - 1));
    tmp[q - p - 1] = '\0';
    if (inet_pton(AF_INET6, tmp, &a6) != 1) return 0;
    { /* only the canonical form (libcurl rewrites [::0] as [::], so its Host header differs) */
      char canon[64];
      if (!inet_ntop(AF_INET6, &a6, canon, sizeof canon) || strcmp(canon, tmp) != 0) return 0;
    }
    h = p + 1, he = q, u->ipv6 = 1;
    p = q + 1;
  } else {
    h = p;
    while (p < end && ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
      p++;
    he = p;
    if (he == h || h[0] == '.' || h[0] == '-' || he[-1] == '.' || memmem(h, (size_t)(he - h), "..", 2)) return 0;
    { /* a name of numeric labels is an IPv4 address to libcurl (127.1, 0x7f.1, 010.0.0.1, which it
         rewrites): only a plain dotted quad is taken here */
      int numeric = 1;
      for (const char *q = h; q < he; q++)
        if ((q == h || q[-1] == '.') && !(*q >= '0' && *q <= '9')) numeric = 0;
      if (numeric) {
        char tmp[16];
        struct in_addr a4;
        if ((size_t)(he - h) >= sizeof tmp) return 0;
        memcpy(tmp, h, (size_t)(he - h));
        tmp[he - h] = '\0';
        if (inet_pton(AF_INET, tmp, &a4) != 1) return 0;
      }
    }
  }
  u->host = h, u->host_len = (size_t)(he - h);
  u->port = tls ? 443 : 80, u->default_port = 1;
  if (p < end && *p == ':') {
    long port = 0;
    const char *d = ++p;
    while (p < end && *p >= '0' && *p <= '9' && p - d < 6) port = port * 10 + (*p++ - '0');
    if (p == d || port < 1 || port > 65535 || (p < end && *p != '/' && *p != '?' && *p != '#')) return 0;
    u->port = (int)port, u->default_port = port == (tls ? 443 : 80); /* libcurl leaves it out of Host too */
  }
  if (p < end && *p != '/' && *p != '?' && *p != '#') return 0; /* user info, odd characters */
  if ((size_t)(p - auth) < sizeof last_auth.auth) { /* p == ae here */
    last_auth.len = (size_t)(p - auth);
    memcpy(last_auth.auth, auth, last_auth.len);
    last_auth.host_off = (size_t)(u->host - auth), last_auth.host_len = u->host_len;
    last_auth.tls = tls, last_auth.ipv6 = u->ipv6, last_auth.port = u->port, last_auth.default_port = u->default_port;
  }
target:
  u->target = p;
  for (const char *q = p; q < end; q++) { /* the fragment too: libcurl refuses the whole URL */
    unsigned char ch = (unsigned char)*q;
    if (ch <= 0x20 || ch >= 0x7f || ch == '\\') return 0;
  }
  for (const char *q = p; q < end; q++)
    if (*q == '#') { /* a fragment is not sent */
      end = q;
      break;
    }
  u->target_len = (size_t)(end - p);
  if (u->target_len && p[u->target_len - 1] == '?' && !memchr(p, '?', u->target_len - 1))
    return 0; /* an empty query: libcurl may drop the "?" */
  if (u->target_len && *p == '?') return 0; /* libcurl inserts the "/": leave it to it */
  /* dot segments (libcurl removes them: RFC 3986 5.2.4, "%2e" counted as a dot): leave such URLs
   * to libcurl */
  for (const char *q = p; q + 2 < end; q++)
    if (q[0] == '%' && q[1] == '2' && (q[2] == 'e' || q[2] == 'E')) return 0;
  for (const char *q = p; q < end; q++) {
    const char *s = q;
    if (*q != '/') continue;
    s++;
    if (s < end && *s == '.') {
      s++;
      if (s < end && *s == '.') s++;
      if (s == end || *s == '/' || *s == '?') return 0;
    }
  }
  return 1;
}

/* ---- origins ---------------------------------------------------------------------------- */

static h1_origin *origin_get(const char *host, size_t n, int ipv6, int port, struct tls_conf *tls) {
  unsigned hash = 2166136261u;
  h1_origin *o;
  for (size_t i = 0; i < n; i++) hash = (hash ^ (unsigned char)host[i]) * 16777619u;
  hash = (hash ^ (unsigned)port) * 16777619u;
  hash = (hash ^ (unsigned)((uintptr_t)tls >> 4)) * 16777619u;
  for (o = G.b[hash % ORIGIN_BUCKETS]; o; o = o->next)
    if (o->port == port && o->tls == tls && o->host_len == n && memcmp(o->host, host, n) == 0) return o;
  if (!(o = calloc(1, sizeof *o + n + 1))) return NULL;
  memcpy(o->host, host, n);
  o->host_len = n;
  o->port = port;
  o->tls = tls;
  if (ipv6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&o->addrs[0];
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, o->host, &a->sin6_addr) == 1) o->naddrs = 1, o->numeric = 1;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&o->addrs[0];
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, o->host, &a->sin_addr) == 1) o->naddrs = 1, o->numeric = 1;
  }
  o->next = G.b[hash % ORIGIN_BUCKETS];
  G.b[hash % ORIGIN_BUCKETS] = o;
  return o;
}

static void idle_unlink(h1_conn *k) {
  h1_origin *o = k->origin;
  if (!k->idle) return;
  if (k->prev) k->prev->next = k->next;
  else o->idle = k->next;
  if (k->next) k->next->prev = k->prev;
  k->prev = k->next = NULL;
  k->idle = 0;
  o->nidle--;
  G.st.idle--;
}

static void list_del(h1_conn *k) {
  h1_conn **head;
  if (!k->list) return;
  head = k->list == L_H2 ? &k->origin->h2 : &k->origin->pending;
  if (k->lprev) k->lprev->lnext = k->lnext;
  else *head = k->lnext;
  if (k->lnext) k->lnext->lprev = k->lprev;
  k->lprev = k->lnext = NULL;
  k->list = 0;
}

static void list_add(h1_conn *k, int which) {
  h1_conn **head = which == L_H2 ? &k->origin->h2 : &k->origin->pending;
  list_del(k);
  k->lprev = NULL;
  k->lnext = *head;
  if (*head) (*head)->lprev = k;
  *head = k;
  k->list = which;
}

/* ---- connections -------------------------------------------------------------------------- */

static void conn_freed(uv_handle_t *h) {
  h1_conn *k = h->data;
  if (++k->closes < 2) return;
  h2_free(k->h2); /* its streams' calls were told before the close (or forgotten at shutdown) */
  if (k->ssl) SSL_free(k->ssl); /* and its BIOs */
  free(k->line);
  free(k);
}

/* Calls that waited for k go elsewhere (k failed, or turned out to speak HTTP/1.1 only). */
static void redispatch_waiters(h1_conn *k) {
  while (k->waiters) {
    h1_call *c = k->waiters;
    k->waiters = c->qnext;
    if (k->waiters) k->waiters->qprev = NULL;
    c->qnext = c->qprev = NULL;
    c->conn = NULL;
    k->nwaiters--;
    c->t_ready = uv_hrtime() - c->t0; /* (a new connection it then opens sets it again) */
    if (dispatch(k->origin, c) != 0) call_end(c, H1_ENOMEM, ENOMEM);
  }
}

static void conn_close(h1_conn *k) {
  if (k->closing) return;
  k->closing = 1;
  if (G.out_k == k) G.out_k = NULL, G.out_len = 0; /* (its records go nowhere now) */
  if (k->fqueued) { /* (its gathered requests fail with it) */
    h1_conn **pp = &G.flushq;
    while (*pp != k) pp = &(*pp)->fnext;
    *pp = k->fnext;
    k->fqueued = 0;
  }
  idle_unlink(k);
  list_del(k);
  redispatch_waiters(k);
  if (k->gai) {
    k->gai->conn = NULL; /* its callback frees it */
    uv_cancel((uv_req_t *)&k->gai->req);
    k->gai = NULL;
  }
  if (k->all_prev) k->all_prev->all_next = k->all_next;
  else G.all = k->all_next;
  if (k->all_next) k->all_next->all_prev = k->all_prev;
  G.st.open--;
  uv_close((uv_handle_t *)&k->tcp, conn_freed); /* a pending connect or write ends with ECANCELED */
  uv_close((uv_handle_t *)&k->timer, conn_freed);
}

static h1_conn *conn_new(h1_origin *o) {
  h1_conn *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  if (uv_tcp_init(G.loop, &k->tcp) != 0) {
    free(k);
    return NULL;
  }
  uv_timer_init(G.loop, &k->timer);
  k->tcp.data = k->timer.data = k;
  k->origin = o;
  k->all_next = G.all;
  if (G.all) G.all->all_prev = k;
  G.all = k;
  G.st.open++;
  return k;
}

static uint64_t since(h1_call *c) { return uv_hrtime() - c->t0; }

/* The call on k ends: k is kept (idle) when keep says so, else closed; then the owner hears. */
static void finish(h1_conn *k, int err, int os_errno, int keep) {
  h1_call *c = k->call;
  if (!c) return;
  k->call = NULL;
  c->conn = NULL;
  /* the timer is left running: when it fires with no deadline it does nothing (see arm_timer) */
  k->deadline = 0;
  k->fail_pending = 0;
  /* a response ends when its last bytes arrived (see got); anything else now */
  if (err != H1_OK || !c->t_end) c->t_end = uv_hrtime();
  c->t_total = c->t_end - c->t0;
  /* a request still being written (the server answered before it read the body) cannot be
   * followed by another on this connection: it is closed, which cancels the write */
  if (keep && !k->closing && !k->writing) {
    h1_origin *o = k->origin;
    if (o->nidle >= G.idle_max) conn_close(k);
    else {
      k->idle = 1;
      k->next = o->idle;
      if (o->idle) o->idle->prev = k;
      o->idle = k;
      o->nidle++;
      G.st.idle++;
    }
  } else conn_close(k);
  c->on_done(c, err, os_errno);
}

/* A call that is not its connection's HTTP/1.1 call ends (an HTTP/2 stream, a waiting call, a
 * warming call whose connection is ready): the owner hears. */
static void call_end(h1_call *c, int err, int os_errno) {
  c->conn = NULL;
  if (err != H1_OK || !c->t_end) c->t_end = uv_hrtime();
  c->t_total = c->t_end - c->t0;
  c->on_done(c, err, os_errno);
}

static void attach(h1_conn *k, h1_call *c);

/* A failure before any response byte on a reused connection: the server closed it while it
 * was idle. Send the request once more on a new connection (as libcurl does). */
static int retry_fresh(h1_conn *k) {
  h1_call *c = k->call;
  h1_conn *n;
  if (!c || c->received > 0 || k->uses < 2 || c->retried) return 0; /* uses: this call's included */
  if (!(n = conn_new(k->origin))) return 0;
  c->retried = 1;
  G.st.retried++;
  k->call = NULL;
  conn_close(k);
  attach(n, c);
  return 1;
}

static void fail(h1_conn *k, int err, int os_errno) {
  if ((err == H1_ESEND || err == H1_ERECV || err == H1_EEMPTY) && retry_fresh(k)) return;
  finish(k, err, os_errno, 0);
}

static void arm_at(h1_conn *k, uint64_t deadline, uint64_t now);

/* The connection's one timer: a failure to deliver, the call's deadline, or a stale firing (the
 * call ended, or a later deadline replaced the one it was started for: started again for the
 * rest). Within a millisecond of the deadline counts as past it (libuv's timers count whole
 * milliseconds). */
static void conn_fail_h2(h1_conn *k, int err, int os_errno);
static uint64_t expire_waiters(h1_conn *k, uint64_t now);

static void on_timer(uv_timer_t *t) {
  h1_conn *k = t->data;
  uint64_t now, next;
  if (k->fail_pending) {
    k->fail_pending = 0;
    if (k->h2) conn_fail_h2(k, k->fail_err, k->fail_os);
    else fail(k, k->fail_err, k->fail_os);
    return;
  }
  k->armed = 0;
  now = uv_hrtime();
  next = expire_waiters(k, now);
  if (k->h2) { /* its streams' deadlines */
    uint64_t n2 = h2_expire(k->h2, now);
    if (k->closing) return;
    if (n2 && (!next || n2 < next)) next = n2;
  }
  if (k->call && k->deadline) {
    if (now + 1000000 > k->deadline) {
      if (k->h2) { /* a warming call on a ready HTTP/2 connection: it ends, the connection stays */
        h1_call *c = k->call;
        k->call = NULL;
        call_end(c, H1_ETIMEDOUT, ETIMEDOUT);
      } else {
        fail(k, H1_ETIMEDOUT, ETIMEDOUT);
        return;
      }
    } else if (!next || k->deadline < next)
      next = k->deadline;
  }
  if (next && !k->closing) arm_at(k, next, now);
}

static void arm_at(h1_conn *k, uint64_t deadline, uint64_t now) {
  uint64_t ms = deadline > now ? (deadline - now + 999999) / 1000000 : 0;
  k->armed = deadline;
  uv_timer_start(&k->timer, on_timer, ms, 0);
}

/* The timer runs for deadline d at the latest (a call that joined the connection). */
static void arm_for(h1_conn *k, uint64_t d) {
  if (!d || k->fail_pending) return;
  if (k->armed && k->armed <= d && uv_is_active((uv_handle_t *)&k->timer)) return;
  arm_at(k, d, uv_hrtime());
}

/* A failure found while starting (inside h1_start or a callback that must not finish): delivered
 * from the loop, so on_done never runs inside h1_start. */
static void fail_later(h1_conn *k, int err, int os_errno) {
  k->fail_err = err, k->fail_os = os_errno;
  k->fail_pending = 1;
  k->armed = 0;
  uv_timer_start(&k->timer, on_timer, 0, 0);
}

/* The call's deadline: the connect timeout while connecting, then the call's own. The timer is
 * started only when it is not running already for an earlier time: a connection carries one call
 * after another, each with a deadline some seconds ahead, and restarting libuv's timer for each
 * (a heap removal and insertion among every connection's timers) was ~3% of the client's CPU at
 * 1,024 in flight; a timer that fires before the deadline starts itself again for the rest. */
static void arm_timer(h1_conn *k) {
  h1_call *c = k->call;
  uint64_t due = UINT64_MAX;
  if (c->timeout_ms) due = c->timeout_ms;
  if ((!k->connected || (k->origin->tls && !k->hs_done)) && c->connect_timeout_ms && c->connect_timeout_ms < due)
    due = c->connect_timeout_ms; /* libcurl's connect phase: TCP and the TLS handshake */
  k->deadline = due == UINT64_MAX ? 0 : c->t0 + due * 1000000;
  if (!k->deadline || k->fail_pending) return;
  if (k->armed && k->armed <= k->deadline && uv_is_active((uv_handle_t *)&k->timer)) return;
  arm_at(k, k->deadline, uv_hrtime());
}

static void got(h1_conn *k, ssize_t nread, const char *p, uint64_t at);
static void got_raw(h1_conn *k, ssize_t nread, const char *p, uint64_t at);
static int tls_step(h1_conn *k);
static int tls_flush(h1_conn *k);

/* The length of the header of the units the server sends (rxstamp.h) on a connection that may
 * carry HTTP/2 (by_units): TLS records where ALPN offered h2, frames with prior knowledge; 0 on an
 * HTTP/1.1-only connection, whose reads need not follow them (one answer at a time). */
static unsigned unit_hdr_len(const h1_conn *k) { return k->offer_h2 ? 5 : k->pk ? 9 : 0; }

/* Whether k's reads end where a unit ends. A read is stamped with the arrival of the newest
 * segment it took (rxstamp.h), so on a connection carrying several HTTP/2 streams, where answers
 * queue in the socket while the loop is busy, one read of them all would date every answer by
 * the last one's arrival. There a read ends where the unit it is in ends, and each unit is
 * stamped when its own last byte arrived (recv_stamped_unit: over TLS a record's body and the
 * next header in one call, a frame's header and body in two). Elsewhere, or with one stream
 * open, as much as the buffer holds. */
static int by_units(const h1_conn *k) { return k->h2 && h2_open(k->h2) >= 2 && unit_hdr_len(k); }

/* One read of k's socket into G.rbuf, kept in G.got with its receive time (rxstamp.h); 0 if
 * there was nothing to read. */
static int read_once(h1_conn *k) {
  uv_os_fd_t fd;
  uint64_t at;
  ssize_t n;
  size_t len = sizeof G.rbuf;
  if (k->closing || uv_fileno((uv_handle_t *)&k->tcp, &fd) != 0) return 0;
  if (by_units(k)) {
    n = recv_stamped_unit(fd, &k->units, unit_hdr_len(k), G.rbuf, sizeof G.rbuf, &at, &len);
    if (n > 0) G.st.unit_reads++;
  } else {
    n = recv_stamped(fd, G.rbuf, len, &at);
    if (n > 0 && unit_hdr_len(k))
      rx_units_follow(&k->units, unit_hdr_len(k), (const unsigned char *)G.rbuf, (size_t)n);
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  G.got.k = k;
  G.got.len = len;
  G.got.n = n < 0 ? -errno : n == 0 ? UV_EOF : n;
  G.got.at = k->call && at < k->call->t0 ? 0 : at; /* bytes that arrived before the call: not its answer's time */
  return 1;
}

/* libuv asks for a buffer because the socket is readable: the connection reads it here (with its
 * receive time) and gives libuv none, so libuv reads nothing and calls on_read with UV_ENOBUFS,
 * which parses it. */
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  b->base = NULL;
  b->len = 0;
  read_once(h->data);
}

/* UV_ENOBUFS, always: on_alloc read the socket (or found nothing to read). A read that took all
 * it asked for is followed by more while the call lasts: up to 32 buffers full, as libuv's own
 * reading does, or 128 reads in all (reads that end where a unit ends: by_units). */
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  (void)b;
  (void)nread;
  for (int i = 0; i < 128; i++) {
    h1_conn *k = G.got.k;
    ssize_t n = G.got.n;
    size_t len = G.got.len;
    if (!k || k != s->data) return;
    G.got.k = NULL;
    got_raw(k, n, G.rbuf, G.got.at);
    /* (not after the last: what it read would wait in G.got for another connection's read) */
    if (i == 127 || (len == sizeof G.rbuf && i >= 31) || n < (ssize_t)len || k->closing || (!k->call && !k->h2) || !read_once(k)) return;
  }
}

/* What one read of k's socket gave: nread bytes at p (received at `at`, 0 if unknown), UV_EOF,
 * or a negative errno. */
static void h2_got(h1_conn *k, ssize_t nread, const char *p, uint64_t at);

static void got(h1_conn *k, ssize_t nread, const char *p, uint64_t at) {
  h1_call *c = k->call;
  size_t used;
  if (k->closing) return;
  if (k->h2) {
    h2_got(k, nread, p, at);
    return;
  }
  if (!c) { /* idle: the server closed it, or sent what nobody asked for */
    conn_close(k);
    return;
  }
  if (nread < 0) {
    if (nread != UV_EOF) {
      fail(k, H1_ERECV, (int)-nread);
      return;
    }
    http_parser_execute(&k->parser, &settings, NULL, 0); /* the end of a body read to the close */
    if (k->msg_done) finish(k, H1_OK, 0, 0);
    else if (c->phase == 1 && k->parser.status_code >= 100 &&
             (HTTP_PARSER_ERRNO(&k->parser) == HPE_OK || HTTP_PARSER_ERRNO(&k->parser) == HPE_INVALID_EOF_STATE)) {
      /* a status line and then the close, before the header block ended: libcurl returns the
       * response as far as it got (a status, no body), and so does this path */
      c->status = k->parser.status_code;
      c->major = k->parser.http_major;
      c->minor = k->parser.http_minor;
      finish(k, H1_OK, 0, 0);
    } else fail(k, c->received ? H1_EPARTIAL : H1_EEMPTY, 0);
    return;
  }
  if (!at) at = uv_hrtime();
  if (c->received == 0) c->t_ttfb = at - c->t0;
  c->t_end = at;
  c->received += (size_t)nread;
  used = http_parser_execute(&k->parser, &settings, p, (size_t)nread);
  if (k->msg_done) {
    /* bytes after the response nobody asked for: the connection is not reused */
    int keep = used == (size_t)nread && http_should_keep_alive(&k->parser);
    finish(k, H1_OK, 0, keep);
    return;
  }
  if (HTTP_PARSER_ERRNO(&k->parser) != HPE_OK) {
    enum http_errno e = HTTP_PARSER_ERRNO(&k->parser);
    if (k->bad_status) {
      c->phase = 0;
      c->parse_error = "invalid status code";
      finish(k, H1_EPARSE, 0, 0);
    } else if (e == HPE_CB_body || e == HPE_CB_header_field || e == HPE_CB_header_value ||
               e == HPE_CB_headers_complete || e == HPE_CB_status || e == HPE_CB_message_complete)
      finish(k, H1_EABORT, 0, 0);
    else {
      c->parse_error = http_errno_description(e);
      finish(k, H1_EPARSE, 0, 0);
    }
  }
}

/* What one read of k's socket gave, before HTTP. Plain: the response's bytes. TLS: ciphertext
 * for OpenSSL, which it uses to go on with the handshake, and whose plaintext goes on to got()
 * with this read's stamp (the read that completed a record is when its bytes arrived). */
static void got_raw(h1_conn *k, ssize_t nread, const char *p, uint64_t at) {
  int n, e;
  if (!k->ssl) {
    got(k, nread, p, at);
    return;
  }
  if (k->closing) return;
  if (nread < 0) {
    if (!k->hs_done) { /* closed or reset during the handshake */
      if (k->call) {
        snprintf(k->call->tls_error, sizeof k->call->tls_error,
                 "TLS connect error: the connection %s during the handshake", nread == UV_EOF ? "closed" : "failed");
        finish(k, H1_ETLS, nread == UV_EOF ? 0 : (int)-nread, 0);
      } else
        conn_close(k);
      return;
    }
    if (nread == UV_EOF && k->h2) { /* (see below: HTTP/2's streams fail so too) */
      conn_fail_h2(k, H1_ERECV, 0);
      return;
    }
    if (nread == UV_EOF && k->call) {
      /* the TCP stream ended without close_notify: a truncation attack looks the same, so it is
       * a failed read, even where a plain connection's close would end a body (libcurl with
       * OpenSSL 3: "unexpected eof while reading") */
      snprintf(k->call->tls_error, sizeof k->call->tls_error,
               "TLS: the connection closed without close_notify (unexpected eof while reading)");
      fail(k, H1_ERECV, 0);
      return;
    }
    got(k, nread, NULL, at);
    return;
  }
  k->io.in = p; /* OpenSSL takes it from where it lies (tls_io): all of it, before this returns */
  k->io.in_len = (size_t)nread;
  if (!k->hs_done && !tls_step(k)) {
    k->io.in_len = 0;
    return;
  }
  for (;;) {
    n = SSL_read(k->ssl, G.pbuf, sizeof G.pbuf);
    if (n > 0) { /* an idle connection's plaintext closes it there, as on a plain one */
      got(k, n, G.pbuf, at);
      if (k->closing) {
        k->io.in_len = 0;
        return;
      }
      /* another read only when there is something to read: the rest of a record, or more
       * ciphertext (a read that finds nothing fails, and failing costs more than asking) */
      if (!SSL_has_pending(k->ssl) && k->io.in_len == 0) break;
      continue;
    }
    e = SSL_get_error(k->ssl, n);
    if (e == SSL_ERROR_WANT_READ) break; /* a whole record consumed: a session ticket, or nothing yet */
    ERR_clear_error();
    k->io.in_len = 0;
    /* close_notify: the end of the stream; anything else (a bad record, an alert): a failed read */
    got(k, e == SSL_ERROR_ZERO_RETURN ? UV_EOF : -ECONNRESET, NULL, at);
    return;
  }
  k->io.in_len = 0; /* (all taken: OpenSSL keeps a partial record itself) */
  if (G.out_k == k && tls_flush(k) != 0 && !k->closing) { /* what reading wrote (a key update's answer) */
    if (k->call) fail(k, H1_ESEND, EPIPE);
    else conn_close(k);
  }
}

static void on_written(uv_write_t *w, int status) {
  h1_conn *k = w->data;
  k->writing--;
  if (status == UV_ECANCELED || k->closing || !k->call) return;
  if (status < 0) fail(k, H1_ESEND, -status);
}

static void written_failed(h1_conn *k, int status) {
  if (k->h2) conn_fail_h2(k, H1_ESEND, -status);
  else if (k->call) fail(k, H1_ESEND, -status);
  else conn_close(k);
}

/* TLS records queued behind the socket's buffer: a copy, freed when written. */
typedef struct {
  uv_write_t w;
  h1_conn *k;
  char data[];
} tls_wr;

static void written_failed(h1_conn *k, int status);

static void tls_written(uv_write_t *w, int status) {
  h1_conn *k = ((tls_wr *)w)->k;
  free(w);
  k->writing--;
  if (status == UV_ECANCELED || k->closing || status >= 0) return;
  written_failed(k, status);
}

/* What OpenSSL wrote (handshake messages, records, alerts) onto the socket: at once when the
 * socket takes it, the rest queued (libuv keeps the order: uv_try_write refuses while anything
 * is queued). 0, or a libuv error. */
/* Bytes of ours onto the socket (records, HTTP/2 frames): at once when the socket takes them, the
 * rest copied and queued (libuv keeps the order: uv_try_write refuses while anything is queued).
 * 0, or a libuv error. */
static int raw_send(h1_conn *k, const char *p, size_t n) {
  uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
  int w = uv_try_write((uv_stream_t *)&k->tcp, &b, 1), rc;
  tls_wr *t;
  if (w == (int)n) return 0;
  if (w < 0 && w != UV_EAGAIN) return w;
  if (w < 0) w = 0;
  if (!(t = malloc(sizeof *t + (n - (size_t)w)))) return UV_ENOMEM;
  memcpy(t->data, p + w, n - (size_t)w);
  t->k = k;
  b = uv_buf_init(t->data, (unsigned)(n - (size_t)w));
  if ((rc = uv_write(&t->w, (uv_stream_t *)&k->tcp, &b, 1, tls_written)) != 0) {
    free(t);
    return rc;
  }
  k->writing++;
  return 0;
}

/* What OpenSSL wrote for k (G.obuf) onto its socket, in one write: a request's record, or a
 * handshake flight with the request behind it. 0, or a libuv error. */
static int tls_flush(h1_conn *k) {
  size_t n = G.out_len;
  if (G.out_k != k) return 0;
  G.out_k = NULL;
  G.out_len = 0;
  return k->closing || n == 0 ? 0 : raw_send(k, G.obuf, n);
}

/* OpenSSL writes a record of k's (tls_io's out): gathered in G.obuf for the next tls_flush. Each
 * SSL call that writes is followed by k's flush before the loop goes on; should another
 * connection's come first, or the buffer fill, what is there goes out to its own first. */
static int tls_out(tls_io *io, const char *p, size_t n) {
  h1_conn *k = (h1_conn *)((char *)io - offsetof(h1_conn, io));
  int rc;
  if (G.out_k && (G.out_k != k || G.out_len + n > sizeof G.obuf)) {
    h1_conn *o = G.out_k;
    if ((rc = tls_flush(o)) != 0) {
      if (o == k) return -1; /* (shows in k's SSL call's result) */
      if (o->call || o->h2) fail_later(o, H1_ESEND, -rc); /* (not from inside k's SSL call) */
      else conn_close(o);
    }
  }
  if (n > sizeof G.obuf) return raw_send(k, p, n) == 0 ? 0 : -1; /* (a record is never this large) */
  memcpy(G.obuf + G.out_len, p, n);
  G.out_len += n;
  G.out_k = k;
  return 0;
}

/* The request onto the socket: written at once when the socket takes it all (the common case),
 * the rest queued. Nonzero: it could not be (the caller fails the call). Over TLS the request is
 * encrypted into records first (gathered in G.obuf), then sent as they are, in one write. */
static int conn_write(h1_conn *k) {
  h1_call *c = k->call;
  uv_buf_t bufs[2];
  unsigned n = 0;
  size_t total = 0;
  int w;
  if (k->ssl) {
    for (unsigned i = 0; i < c->nsend; i++) total += c->send[i].len;
    if (c->nsend > 1 && total <= sizeof G.wbuf) { /* one record rather than one per part */
      for (unsigned i = 0; i < c->nsend; i++) {
        memcpy(G.wbuf + n, c->send[i].base, c->send[i].len);
        n += (unsigned)c->send[i].len;
      }
      if (SSL_write(k->ssl, G.wbuf, (int)total) <= 0) {
        ERR_clear_error();
        return UV_EPROTO;
      }
      return tls_flush(k);
    }
    for (unsigned i = 0; i < c->nsend; i++)
      if (c->send[i].len && SSL_write(k->ssl, c->send[i].base, (int)c->send[i].len) <= 0) {
        ERR_clear_error();
        return UV_EPROTO;
      }
    return tls_flush(k);
  }
  for (unsigned i = 0; i < c->nsend; i++)
    if (c->send[i].len) bufs[n++] = c->send[i], total += c->send[i].len;
  w = uv_try_write((uv_stream_t *)&k->tcp, bufs, n);
  if (w == (int)total) return 0;
  if (w < 0 && w != UV_EAGAIN) return w;
  if (w > 0) { /* skip what went */
    size_t off = (size_t)w;
    unsigned i = 0;
    while (off >= bufs[i].len) off -= bufs[i++].len;
    bufs[i].base += off;
    bufs[i].len -= off;
    memmove(bufs, bufs + i, (n - i) * sizeof *bufs);
    n -= i;
  }
  k->write.data = k;
  if ((w = uv_write(&k->write, (uv_stream_t *)&k->tcp, bufs, n, on_written)) == 0) k->writing++;
  return w;
}

static void send_request(h1_conn *k) {
  int rc;
  http_parser_init(&k->parser, HTTP_RESPONSE);
  k->parser.data = k;
  /* as libcurl reads them: Transfer-Encoding with a Content-Length, repeated lengths, any byte in a
   * header value (http_parser refuses these when strict) */
  k->parser.lenient_http_headers = 1;
  k->msg_done = k->in_trailers = k->value_seen = k->bad_status = 0;
  k->line_len = 0;
  k->uses++;
  if ((rc = conn_write(k)) != 0) fail_later(k, H1_ESEND, -rc);
}

static void conn_ready(h1_conn *k);

/* ---- TLS ---------------------------------------------------------------------------------- */

/* The handshake failed: the call fails with libcurl's kind of failure (a refused certificate, or
 * any other handshake error); a connection without a call just closes. */
static void tls_failed(h1_conn *k, int rc) {
  h1_call *c = k->call;
  h1_origin *o = k->origin;
  char msg[sizeof c->tls_error];
  int cert = tls_failure(k->ssl, rc, o->host, o->numeric, msg, sizeof msg);
  (void)tls_flush(k); /* the alert, as OpenSSL wrote it */
  if (!c) {
    conn_close(k);
    return;
  }
  memcpy(c->tls_error, msg, sizeof msg);
  finish(k, cert ? H1_ECERT : H1_ETLS, 0, 0);
}

/* One step of the handshake, after something was read (or to start it). 1: done, the request
 * went out; 0: not yet, or it failed (the call has been told). */
static int tls_step(h1_conn *k) {
  int rc = SSL_do_handshake(k->ssl), e;
  h1_call *c = k->call;
  if (rc == 1) {
    k->hs_done = 1;
    G.st.tls_handshakes++;
    if (SSL_session_reused(k->ssl)) G.st.tls_resumed++;
    tls_handshake_done(k->ssl);
    if (!c) { /* nobody waits for it */
      conn_close(k);
      return 0;
    }
    c->t_tls = since(c);
    c->tls_resumed = SSL_session_reused(k->ssl);
    arm_timer(k); /* the connect timeout no longer applies */
    conn_ready(k); /* the request goes with the handshake's last flight, in one write (tls_flush) */
    return !k->closing;
  }
  e = SSL_get_error(k->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    int w = tls_flush(k);
    if (w != 0 && c) {
      ERR_clear_error();
      finish(k, H1_ESEND, -w, 0);
    }
    return 0;
  }
  tls_failed(k, rc);
  return 0;
}

/* TCP is up: a TLS client on the connection's tls_io (tls.c) for the origin's host, offering HTTP/1.1 by
 * ALPN, resuming the origin's last session; its ClientHello goes out now. */
static void tls_start(h1_conn *k) {
  h1_origin *o = k->origin;
  h1_call *c = k->call;
  static const unsigned char alpn_h1[] = "\x08http/1.1", alpn_h2[] = "\x02h2\x08http/1.1";
  const char *why = tls_conf_error(o->tls);
  if (why) { /* the CA bundle did not load: libcurl's CURLE_SSL_CACERT_BADFILE */
    snprintf(c->tls_error, sizeof c->tls_error, "%s", why);
    finish(k, H1_ECAFILE, 0, 0);
    return;
  }
  k->io.out = tls_out;
  if (!(k->ssl = tls_new(o->tls, o->host, o->numeric, k->offer_h2 ? alpn_h2 : alpn_h1,
                         k->offer_h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h1 - 1, &o->cache, &k->io))) {
    finish(k, H1_ENOMEM, ENOMEM, 0);
    return;
  }
  arm_timer(k);
  (void)tls_step(k);
}

static void on_connect(uv_connect_t *r, int status) {
  h1_conn *k = r->data;
  h1_call *c = k->call;
  if (status == UV_ECANCELED || k->closing) return;
  if (!c) { /* the call went away (cannot happen: cancel closes the connection) */
    conn_close(k);
    return;
  }
  if (status < 0) {
    if (k->next_addr < k->origin->naddrs && status != UV_ETIMEDOUT) { /* the next address */
      h1_conn *n = conn_new(k->origin);
      if (n) {
        n->next_addr = k->next_addr;
        k->call = NULL;
        conn_close(k);
        n->call = c;
        c->conn = n;
        arm_timer(n);
        conn_connect(n);
        return;
      }
    }
    finish(k, H1_ECONNECT, -status, 0);
    return;
  }
  k->connected = 1;
  c->t_connect = since(c);
  G.st.connects++;
  uv_tcp_nodelay(&k->tcp, 1);
  { /* the kernel stamps what arrives (see got); without it, reads are stamped when read */
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&k->tcp, &fd) == 0) (void)rx_stamp_enable(fd);
  }
  uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read);
  if (k->origin->tls) {
    tls_start(k);
    return;
  }
  arm_timer(k); /* the connect timeout no longer applies */
  conn_ready(k);
}

static void conn_connect(h1_conn *k) {
  h1_origin *o = k->origin;
  int rc;
  if (k->next_addr >= o->naddrs) {
    fail_later(k, H1_ECONNECT, ECONNREFUSED);
    return;
  }
  k->connect.data = k;
  rc = uv_tcp_connect(&k->connect, &k->tcp, (const struct sockaddr *)&o->addrs[k->next_addr++], on_connect);
  if (rc != 0) fail_later(k, H1_ECONNECT, -rc);
}

static void on_resolved(uv_getaddrinfo_t *r, int status, struct addrinfo *res) {
  struct gai *g = (struct gai *)r;
  h1_conn *k = g->conn;
  free(g);
  if (!k) { /* closed meanwhile */
    uv_freeaddrinfo(res);
    return;
  }
  k->gai = NULL;
  if (status == 0) {
    h1_origin *o = k->origin;
    int n = 0;
    for (struct addrinfo *a = res; a && n < ADDRS_MAX; a = a->ai_next)
      if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) && a->ai_addrlen <= sizeof o->addrs[0])
        memcpy(&o->addrs[n++], a->ai_addr, a->ai_addrlen);
    o->naddrs = n;
    o->addrs_at = uv_hrtime();
  }
  uv_freeaddrinfo(res);
  if (!k->call) return;
  k->call->t_dns = since(k->call);
  if (status != 0 || k->origin->naddrs == 0) {
    finish(k, H1_ERESOLVE, 0, 0);
    return;
  }
  conn_connect(k);
}

/* k is new: resolve (unless known), connect, send. */
static void conn_open(h1_conn *k) {
  h1_origin *o = k->origin;
  h1_call *c = k->call;
  c->new_conn = 1;
  if (o->numeric || (o->naddrs > 0 && uv_hrtime() - o->addrs_at < DNS_TTL_NS)) {
    conn_connect(k);
    return;
  }
  {
    struct gai *g = calloc(1, sizeof *g);
    struct addrinfo hints;
    char port[8];
    int rc;
    if (!g) {
      fail_later(k, H1_ENOMEM, ENOMEM);
      return;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", o->port);
    g->conn = k;
    k->gai = g;
    rc = uv_getaddrinfo(G.loop, &g->req, on_resolved, o->host, port, &hints);
    if (rc != 0) {
      k->gai = NULL;
      free(g);
      fail_later(k, H1_ERESOLVE, -rc);
    }
  }
}

/* ---- HTTP/2 and calls waiting for a connection ------------------------------------------- */

static int h2_write(void *conn, const uint8_t *p, size_t n) {
  h1_conn *k = conn;
  if (k->closing) return UV_ECANCELED;
  if (k->ssl) {
    if (SSL_write(k->ssl, p, (int)n) <= 0) {
      ERR_clear_error();
      return UV_EPROTO;
    }
    return tls_flush(k);
  }
  return raw_send(k, (const char *)p, n);
}

/* A stream's call ended. Refused by the server before it processed it (REFUSED_STREAM, or past a
 * GOAWAY's last stream), or lost with its connection before a response byte on a connection it
 * reused: sent once more elsewhere, as libcurl does. */
static void h2_ended(void *conn, h1_call *c, int err, int os_errno) {
  h1_conn *k = conn;
  int lost = k->closing || (k->h2 && !h2_usable(k->h2));
  if (!c->retried && c->received == 0 &&
      (err == H1_ERETRY || (lost && !c->new_conn && (err == H1_EH2STREAM || err == H1_ERECV || err == H1_ESEND)))) {
    c->retried = 1;
    G.st.retried++;
    c->conn = NULL;
    c->sess = NULL;
    if (dispatch(k->origin, c) == 0) return;
    err = H1_ENOMEM;
  }
  if (err == H1_ERETRY) err = H1_EH2STREAM;
  call_end(c, err, os_errno);
}

static const h2_ops H2_OPS = {h2_write, h2_ended};

/* c becomes a stream of k's session; with flush, its request goes out now. 0, or H1_ENOMEM. */
static int stream_start(h1_conn *k, h1_call *c, int flush) {
  int rc;
  c->conn = k;
  c->deadline = c->timeout_ms ? c->t0 + c->timeout_ms * 1000000 : 0;
  if ((rc = h2_submit(k->h2, c)) != 0) {
    c->conn = NULL;
    return rc;
  }
  G.st.h2_streams++;
  arm_for(k, c->deadline);
  /* with the other requests this pass makes on k (h1_flush); when k can take no other call now,
   * no other can join them: they go at once, without the gathering wait (CS_FLUSH_NS) */
  if (flush && G.flush_notify && h2_room(k->h2, G.max_streams) > 0) {
    if (!k->fqueued) {
      k->fqueued = 1;
      k->fnext = G.flushq;
      G.flushq = k;
    }
    G.flush_notify();
  } else if (flush && h2_flush(k->h2) != 0) /* (a queued k finds nothing left in h1_flush) */
    fail_later(k, H1_ESEND, EPIPE); /* (never fails a call from h1_start) */
  return 0;
}

void h1_set_flush_notify(void (*notify)(void)) { G.flush_notify = notify; }

void h1_flush(void) {
  while (G.flushq) {
    h1_conn *k = G.flushq;
    G.flushq = k->fnext;
    k->fqueued = 0;
    if (!k->closing && k->h2 && h2_flush(k->h2) != 0) fail_later(k, H1_ESEND, EPIPE);
  }
}

/* A call's deadline while it waits for a connection: its connect timeout applies too. */
static uint64_t wait_deadline(h1_call *c) {
  uint64_t due = c->timeout_ms;
  if (c->connect_timeout_ms && (!due || c->connect_timeout_ms < due)) due = c->connect_timeout_ms;
  return due ? c->t0 + due * 1000000 : 0;
}

static void wait_on(h1_conn *k, h1_call *c) {
  c->conn = k;
  c->qprev = NULL;
  c->qnext = k->waiters;
  if (k->waiters) k->waiters->qprev = c;
  k->waiters = c;
  k->nwaiters++;
  c->deadline = wait_deadline(c);
  arm_for(k, c->deadline);
}

static void unwait(h1_conn *k, h1_call *c) {
  if (c->qprev) c->qprev->qnext = c->qnext;
  else k->waiters = c->qnext;
  if (c->qnext) c->qnext->qprev = c->qprev;
  c->qnext = c->qprev = NULL;
  k->nwaiters--;
}

/* Waiting calls past their deadline end (ETIMEDOUT); returns the earliest deadline left. */
static uint64_t expire_waiters(h1_conn *k, uint64_t now) {
  uint64_t next = 0;
  h1_call *c, *nx;
  for (c = k->waiters; c; c = nx) {
    nx = c->qnext;
    if (c->deadline && now + 1000000 > c->deadline) {
      unwait(k, c);
      call_end(c, H1_ETIMEDOUT, ETIMEDOUT);
    } else if (c->deadline && (!next || c->deadline < next))
      next = c->deadline;
  }
  return next;
}

/* The HTTP/2 connection failed or ended: its streams' calls end with err (or go elsewhere,
 * h2_ended), a warming call with it, and it closes. */
static void conn_fail_h2(h1_conn *k, int err, int os_errno) {
  h1_call *c = k->call;
  if (k->closing) return;
  list_del(k); /* nothing new lands on it meanwhile */
  h2_fail_all(k->h2, err, os_errno);
  if (c && k->call == c) {
    k->call = NULL;
    call_end(c, err, os_errno);
  }
  conn_close(k);
}

/* What an HTTP/2 connection read (plaintext), or its end. */
static void h2_got(h1_conn *k, ssize_t nread, const char *p, uint64_t at) {
  h1_call *c;
  if (nread < 0) {
    conn_fail_h2(k, nread == UV_EOF ? H1_EH2STREAM : H1_ERECV, nread == UV_EOF ? 0 : (int)-nread);
    return;
  }
  if (h2_input(k->h2, p, (size_t)nread, at) != 0) {
    (void)h2_flush(k->h2); /* its GOAWAY, if it can still go */
    conn_fail_h2(k, H1_EH2, 0);
    return;
  }
  if (k->closing) return;
  if ((c = k->call) != NULL && c->no_request && h2_settings_seen(k->h2)) {
    k->call = NULL; /* warm: the server's SETTINGS are in */
    call_end(c, H1_OK, 0);
  }
  if (h2_flush(k->h2) != 0) {
    conn_fail_h2(k, H1_ESEND, EPIPE);
    return;
  }
  /* the session is over (a GOAWAY it sent or got, its streams done): what is left of it fails */
  if (h2_finished(k->h2)) conn_fail_h2(k, H1_EH2, 0);
  else if (!h2_usable(k->h2) && h2_open(k->h2) == 0 && !k->call) conn_close(k);
}

/* k is connected (and its TLS handshake done): it speaks HTTP/2 (ALPN chose h2, or prior
 * knowledge) or HTTP/1.1. Its call goes (a warming call ends: an HTTP/2 one once the server's
 * SETTINGS are in); the calls that waited for it become streams, or go elsewhere. */
static void conn_ready(h1_conn *k) {
  h1_origin *o = k->origin;
  h1_call *c = k->call;
  int h2 = k->pk;
  if (k->ssl && k->offer_h2) {
    const unsigned char *a = NULL;
    unsigned al = 0;
    SSL_get0_alpn_selected(k->ssl, &a, &al);
    h2 = al == 2 && memcmp(a, "h2", 2) == 0;
    o->h1_known = !h2;
  }
  list_del(k);
  if (c) {
    c->t_ready = since(c);
    c->major = h2 ? 2 : 1; /* (what a warming call found) */
  }
  if (!h2) {
    if (c && c->no_request) finish(k, H1_OK, 0, 1); /* warm: idle now */
    else if (c) send_request(k);
    if (!k->closing) redispatch_waiters(k); /* they take it if it is idle, else connections of their own */
    return;
  }
  if (!(k->h2 = h2_new(&H2_OPS, k, k->ssl != NULL))) {
    if (c) finish(k, H1_ENOMEM, ENOMEM, 0);
    else conn_close(k);
    return;
  }
  k->proto = 2;
  G.st.h2_connections++;
  list_add(k, L_H2);
  if (c && !c->no_request) {
    k->call = NULL;
    if (stream_start(k, c, 0) != 0) call_end(c, H1_ENOMEM, ENOMEM);
  }
  while (k->waiters && h2_room(k->h2, G.max_streams) > 0) {
    h1_call *w = k->waiters;
    unwait(k, w);
    w->t_ready = since(w);
    if (stream_start(k, w, 0) != 0) call_end(w, H1_ENOMEM, ENOMEM);
  }
  redispatch_waiters(k); /* more than it may carry */
  if (h2_flush(k->h2) != 0) conn_fail_h2(k, H1_ESEND, EPIPE);
}

/* Whether c may go over HTTP/2: https unless HTTP/1.1 was asked for; http:// when HTTP/2 was
 * (prior knowledge). */
static int wants_h2(const h1_call *c) { return c->tls ? c->version != H1_V_1 : c->version == H1_V_2; }

/* c goes to a connection: a stream of an HTTP/2 one with room, else (HTTP/2 possible) a wait for
 * one being opened that may speak it (as libcurl's CURLOPT_PIPEWAIT), else an idle HTTP/1.1 one,
 * else a new one. 0, or H1_ENOMEM (nothing started). */
static int dispatch(h1_origin *o, h1_call *c) {
  h1_conn *k;
  int h2 = wants_h2(c);
  if (h2 && !c->fresh) {
    for (k = o->h2; k; k = k->lnext)
      if (h2_room(k->h2, G.max_streams) > 0) return stream_start(k, c, 1);
    if (!c->tls || !o->h1_known)
      for (k = o->pending; k; k = k->lnext)
        if (k->nwaiters + 1 < G.max_streams) {
          wait_on(k, c);
          return 0;
        }
  }
  if (!c->fresh && (!h2 || c->version == H1_V_ANY) && (k = o->idle) != NULL) {
    idle_unlink(k);
    G.st.reused++;
    attach(k, c);
    return 0;
  }
  if (!(k = conn_new(o))) return H1_ENOMEM;
  k->offer_h2 = h2 && c->tls;
  k->pk = h2 && !c->tls;
  if (h2) list_add(k, L_PENDING);
  attach(k, c);
  return 0;
}

static void attach(h1_conn *k, h1_call *c) {
  k->call = c;
  c->conn = k;
  arm_timer(k);
  if (k->connected) send_request(k);
  else conn_open(k);
}

int h1_start(h1_call *c) {
  h1_origin *o;
  c->t0 = uv_hrtime();
  c->t_dns = c->t_connect = c->t_tls = c->t_ttfb = c->t_total = c->t_end = 0;
  c->status = c->major = c->minor = 0;
  c->new_conn = c->retried = c->tls_resumed = 0;
  c->tls_error[0] = '\0';
  c->received = 0;
  c->parse_error = NULL;
  c->conn = NULL;
  c->sess = NULL;
  c->qnext = c->qprev = NULL;
  c->stream = 0;
  c->deadline = 0;
  c->t_ready = 0;
  c->h2_final = c->h2_abort = 0;
  if (!(o = origin_get(c->host, c->host_len, c->ipv6, c->port, c->tls))) return H1_ENOMEM;
  G.st.calls++;
  return dispatch(o, c);
}

void h1_cancel(h1_call *c) {
  h1_conn *k = c->conn;
  if (!k) return;
  c->conn = NULL;
  if (c->sess) { /* a stream: reset, the connection stays */
    h2_cancel(c->sess, c);
    return;
  }
  if (k->call != c) { /* waiting for k */
    unwait(k, c);
    return;
  }
  k->call = NULL;
  if (k->h2) return; /* a warming call on a ready HTTP/2 connection */
  if (k->waiters && !k->connected) { /* the first waiting call takes over the opening connection */
    h1_call *w = k->waiters;
    unwait(k, w);
    k->call = w;
    w->conn = k;
    w->new_conn = 1;
    arm_timer(k);
    return;
  }
  conn_close(k); /* an HTTP/1.1 call cannot be abandoned halfway on a connection that is kept */
}

void h1_init(uv_loop_t *loop) {
  G.loop = loop;
  /* libcurl takes up to 300 KiB of response headers (MAX_HTTP_RESP_HEADER_SIZE); http_parser's
   * default is 80 KiB. The limit is the library's, for every parser: cseng.serve keeps its own
   * smaller one (max_header, checked before the parser's). */
  http_parser_set_max_header_size(300 * 1024);
}

void h1_set_idle_max(long n) { G.idle_max = n < 1 ? 1 : n; }

h1_stats h1_get_stats(void) { return G.st; }

void h1_set_max_streams(long n) { G.max_streams = n < 1 ? 1 : (unsigned)n; }

void h1_origin_state(const h1_call *c, unsigned long *ready, unsigned *h2_conns, unsigned *h2_max) {
  h1_origin *o = origin_get(c->host, c->host_len, c->ipv6, c->port, c->tls);
  *ready = 0, *h2_conns = 0, *h2_max = 0;
  if (!o) return;
  *ready = (unsigned long)o->nidle;
  for (h1_conn *k = o->h2; k; k = k->lnext)
    if (h2_usable(k->h2)) {
      unsigned room = h2_room(k->h2, G.max_streams);
      *ready += room;
      (*h2_conns)++;
      if (!*h2_max) *h2_max = room + h2_open(k->h2);
    }
}

unsigned h1_close_idle(const char *host, size_t host_len, int port, int tls) {
  unsigned n = 0;
  for (int i = 0; i < ORIGIN_BUCKETS; i++)
    for (h1_origin *o = G.b[i]; o; o = o->next) {
      h1_conn *k, *nx;
      if (o->port != port || (o->tls != NULL) != (tls != 0) || o->host_len != host_len ||
          memcmp(o->host, host, host_len) != 0)
        continue;
      while (o->idle) {
        conn_close(o->idle); /* unlinks it */
        n++;
      }
      for (k = o->h2; k; k = nx) {
        nx = k->lnext;
        if (h2_open(k->h2) == 0 && !k->call) {
          conn_close(k);
          n++;
        }
      }
    }
  return n;
}

void h1_shutdown(void) {
  while (G.all) {
    h1_conn *k = G.all;
    k->call = NULL;
    k->waiters = NULL; /* abandoned, not told (as the calls of HTTP/2 sessions, h2_free) */
    k->nwaiters = 0;
    conn_close(k); /* unlinks it */
  }
  for (int i = 0; i < ORIGIN_BUCKETS; i++)
    while (G.b[i]) {
      h1_origin *o = G.b[i];
      G.b[i] = o->next;
      if (o->cache.session) SSL_SESSION_free(o->cache.session);
      free(o);
    }
}

/* ---- the response ------------------------------------------------------------------------------ */

static int line_add(h1_conn *k, const char *p, size_t n) {
  if (k->line_len + n > k->line_cap) {
    size_t cap = k->line_cap ? k->line_cap : 256;
    char *np;
    while (cap < k->line_len + n) cap *= 2;
    if (!(np = realloc(k->line, cap))) return -1;
    k->line = np;
    k->line_cap = cap;
  }
  memcpy(k->line + k->line_len, p, n);
  k->line_len += n;
  return 0;
}

/* The header line read so far to the owner. */
static int line_flush(h1_conn *k) {
  int rc = 0;
  if (k->value_seen && k->line_len) rc = k->call->on_line(k->call, k->line, k->line_len, k->in_trailers);
  k->line_len = 0;
  k->value_seen = 0;
  return rc;
}

static int on_message_begin(http_parser *p) {
  h1_conn *k = p->data;
  k->line_len = 0;
  k->value_seen = k->in_trailers = 0;
  k->call->phase = 0;
  return 0;
}

static int on_status(http_parser *p, const char *at, size_t n) {
  h1_conn *k = p->data;
  (void)at;
  (void)n;
  if (k->call->phase == 0) k->call->phase = 1;
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  h1_conn *k = p->data;
  if (k->call->phase == 0) k->call->phase = 1;
  if (k->value_seen && line_flush(k) != 0) return -1;
  return line_add(k, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  h1_conn *k = p->data;
  if (!k->value_seen) {
    k->value_seen = 1;
    if (line_add(k, ": ", 2) != 0) return -1;
  }
  return line_add(k, at, n);
}

static int on_headers_complete(http_parser *p) {
  h1_conn *k = p->data;
  h1_call *c = k->call;
  if (line_flush(k) != 0) return -1;
  if (p->status_code < 100) { /* libcurl: "Unsupported HTTP/1 subversion in response" */
    k->bad_status = 1;
    return -1;
  }
  c->phase = 2;
  k->in_trailers = 1; /* header lines after the body (chunked) are trailers */
  c->status = p->status_code;
  c->major = p->http_major;
  c->minor = p->http_minor;
  /* 1: no body, whatever the headers say (a HEAD's response, 1xx, 204, 304: RFC 9110 6.4.1;
   * http_parser would read a 304's Content-Length worth of the next response as its body) */
  return c->head_method || p->status_code / 100 == 1 || p->status_code == 204 || p->status_code == 304 ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  h1_conn *k = p->data;
  return k->call->on_body(k->call, at, n) != 0 ? -1 : 0;
}

static int on_message_complete(http_parser *p) {
  h1_conn *k = p->data;
  if (line_flush(k) != 0) return -1; /* the last trailer */
  if (p->status_code >= 100 && p->status_code < 200 && p->status_code != 101) {
    k->call->on_line(k->call, NULL, 0, 0); /* an interim response: the real one follows */
    return 0;
  }
  k->msg_done = 1;
  http_parser_pause(p, 1); /* nothing after it is parsed */
  return 0;
}

static http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_status = on_status,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};
