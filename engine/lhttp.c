/*
 * lhttp.c: HTTP client on libcurl's multi-socket interface, driven by the
 * libuv loop (curl's multi-uv.c pattern). Module cseng.http. Requests libcurl would send with
 * nothing of its own (HTTP/1.1 or HTTP/2, plain or over TLS, no proxy, redirect, Unix socket or
 * connection limit) go through the native client instead (engine/h1.c, tls.c, h2.c;
 * native_start), with the same results: their outcome is written into the same req fields, in
 * libcurl's terms.
 *
 *   http.warm{url=, calls=, ...} -> {opened, ready, http_version, connections, streams, seconds}
 *   http.close_idle(url) -> n      http.handshakes() -> count, seconds
 *
 *   http.request{method=, url=, headers=, body=, timeout=, connect_timeout=,
 *                unix_socket=, stream=fn(chunk[, head]), follow=, insecure=, max_body=, ca_file=,
 *                http_version='1.1'|'2'|'2-prior-knowledge', omit_headers={names}}
 *     (a header whose value is "" is sent empty; omit_headers are not sent at all,
 *     not even curl's own, such as the Content-Type it gives a request body)
 *     -> {status=, headers=, trailers=, body=, http_version=, timings={dns, connect, tls,
 *         ttfb, total}}  (timings: seconds from the start, curl's *_TIME_T)
 *     |  nil, message, CODE  (ETIMEDOUT, ECONNREFUSED, ENOENT, EACCES, EHOSTUNREACH,
 *                             ENOTFOUND, ECONNRESET, ETLS, EBODY, EABORTED, EREDIRECT,
 *                             EURL, EHTTP2, ECURL)
 *     Options are all checked before anything is allocated; a bad one raises
 *     "http.request: opts.<name> must be ...".
 *   http.configure{max_connections=, max_host_connections=, max_total_connections=,
 *                  max_concurrent_streams=, pools=, native=, ca_file=}
 *   http.stats() -> {in_flight=, started=, completed=, pools=, max_concurrent_streams=, native={enabled=, requests=,
 *                    connects=, reused=, retried=, open=, idle=, tls_handshakes=, tls_resumed=,
 *                    h2_connections=, h2_streams=, unit_reads=}}
 *
 * Connections are reused across requests and tasks through libcurl's connection cache,
 * held by a few multi handles ("pools", http.configure{pools=}, default POOLS_DEFAULT). Each
 * new transfer makes libcurl walk every connection it holds to the same host, busy ones
 * included (libcurl 8.14's Curl_cpool_find / url_match_conn, which grows with the connections
 * held: at a thousand HTTP/1.1 requests in flight it dominates the client's CPU), so a transfer
 * that cannot multiplex (HTTP/1.1)
 * goes to the pool with the fewest transfers (another pool opened once that one holds POOL_SHARE,
 * up to npools), and each pool walks its share. Transfers that
 * may multiplex (HTTP/2 asked for, or https, where ALPN may pick it) all use pool 0, so they
 * share connections. A max_host_connections or max_total_connections limit makes it one pool
 * (the limit stays exact); max_connections (the cache size) applies to each pool. Curl callbacks only fill C buffers and mark
 * the request's op ready; Lua runs when the scheduler resumes the task.
 * The request body is referenced, not copied; the response body is copied
 * once, from the C buffer into a Lua string.
 */
#include "aux.h"
#include "core.h"
#include "h1.h"
#include "tls.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* The oldest libcurl this build runs on: 8.14.1 (Debian bookworm-backports, tools/apt-backports.sh).
 * 7.88 (bookworm) loses HTTP/2 stream ends and opens stray HTTP/1 connections under concurrency
 * A comparison build for the benchmarks may lower it: make CFLAGS+=-DCSENG_CURL_MIN=... */
#ifndef CSENG_CURL_MIN
#define CSENG_CURL_MIN 0x080e01
#endif
#if LIBCURL_VERSION_NUM < CSENG_CURL_MIN
#error "libcurl headers older than CSENG_CURL_MIN (8.14.1): run make deps (tools/apt-backports.sh)"
#endif

typedef struct {
  char *p;
  size_t len, cap;
} buf;

/* libcurl 7.88 (Debian 12) breaks a request that reuses an HTTP/2 connection opened with
 * prior knowledge when that request asks for prior knowledge too (curl issue #10634, fixed
 * in 8.0 by PR #10643: "Error in the HTTP2 framing layer"). So per origin (scheme, host,
 * port, unix socket) we count the prior-knowledge requests under way and the connections they
 * opened. The first request opens the connection with prior knowledge; requests made while it
 * has not yet started speaking HTTP/2 on it (its connection established, CURLOPT_PREREQFUNCTION)
 * wait here, outside curl (which would otherwise open HTTP/1.1 Upgrade connections of
 * their own); once it has, they and every later request ask for plain HTTP/2
 * (CURL_HTTP_VERSION_2_0) with CURLOPT_PIPEWAIT, which multiplexes them on that connection.
 * If the first request fails before that, the next waiter opens a connection with prior
 * knowledge. On libcurl >= 8.0 (the bug fixed; pk_reuse) they keep asking for prior knowledge:
 * with plain HTTP/2 a transfer that finds the connection full (max_concurrent_streams) or gone
 * opens a new one as an HTTP/1.1 Upgrade, which a gRPC server answers with bytes curl reads as
 * "HTTP/0.9" (a Modal burst of 100 against the fake lost 4 execs on the task router so). Once the origin has no such request and no such connection, the next request
 * starts over. */
struct req;
typedef struct h2origin {
  char *key;
  int pending;     /* prior-knowledge requests not finished */
  int conns;       /* sockets they opened, not yet closed */
  int established; /* the first request's connection is up and switched to HTTP/2 (on_prereq) */
  int live;        /* ... and curl has read from it (the server's SETTINGS): later requests multiplex on it */
  int kick;        /* waiters to start (origins_kick) */
  struct req *wait_head, *wait_tail;
  struct h2origin *next;
} h2origin;

struct pool;
typedef struct req {
  cs_op op;
  CURL *easy;
  struct pool *pool; /* the multi handle the transfer runs in */
  h2origin *origin;  /* a prior-knowledge request counted in origin->pending */
  h2origin *waiting; /* queued on this origin, not yet handed to curl */
  struct req *wnext;
  struct hset *hset; /* the header list it sends (shared, see hset) */
  int body_ref;
  buf body, head, trailers;
  int done, stream, cancelled;
  int head_given; /* the stream callback had the response's status and headers (its first call) */
  int head_done; /* the current response's header block ended: later header lines are trailers */
  size_t max_body;
  int want_h2; /* http_version '2' or '2-prior-knowledge' */
  CURLcode result;
  int os_errno;
  long status;
  long http_version;
  long new_conns; /* connections this transfer opened (CURLINFO_NUM_CONNECTS): 0 = reused one */
  curl_off_t t_dns, t_connect, t_tls, t_ttfb, t_total;
  uint64_t t_wait; /* ns it waited for a new connection (TCP, TLS, HTTP/2 settings) before it could go */
  uint64_t t_start, t_end; /* uv_hrtime: the request started; its response arrived (native: the kernel's
                            * stamp, h1.c) or libcurl reported it done */
  char errbuf[CURL_ERROR_SIZE];
  char *url;      /* urlb.p */
  buf urlb;
  struct req *free_next;
  /* the native HTTP/1.1 path (h1.c): */
  int native_live; /* h1 has the call (counted in in_flight) */
  h1_call call;
  buf out;         /* the request head it sends */
} req;

/* One poll handle per socket for the socket's whole life: curl opens and closes sockets
 * through our callbacks, so a kept-alive connection is polled again without a new handle
 * (no calloc, no uv_poll_init, no uv_close per request). Sockets curl did not open through
 * us (a resolver's wake-up pipe) get a handle for as long as they are watched. */
typedef struct {
  uv_poll_t poll;
  struct pool *pool; /* whose multi handle watches it */
  curl_socket_t fd;
  int ours;         /* opened by open_socket: lives until close_socket */
  int events;       /* what the handle polls now (UV_READABLE|UV_WRITABLE), 0 = stopped */
  int idle;         /* curl stopped watching it (kept alive in the cache): still polled for reading */
  h2origin *origin; /* opened by a prior-knowledge request: counted in origin->conns */
} sockctx;

#define EASY_POOL_MAX 1024
#define POOLS_MAX 64
#define POOLS_DEFAULT 64
#define POOL_SHARE 16 /* HTTP/1.1 transfers a pool takes before another pool is opened */

typedef struct pool {
  CURLM *multi;
  uv_timer_t timer;
  lua_Integer in_flight;
} pool;

static struct {
  CURLM *multi; /* pools[0].multi: set once the module is open */
  pool pools[POOLS_MAX];
  int npools;                /* pools new transfers may use */
  int pools_wanted, limited; /* http.configure{pools=}; a host or total connection limit is set */
  long maxconnects, max_streams;
  sockctx **socks; /* by fd */
  size_t nsocks;
  CURL *easy_pool[EASY_POOL_MAX]; /* finished handles, reset, reused */
  int neasy;
  lua_State *L; /* main state: registry refs are released through it */
  lua_Integer in_flight, started, completed;
  h2origin *origins;
  int kick_pending;
  int pk_reuse; /* libcurl >= 8.0: a prior-knowledge request reuses a prior-knowledge connection (see h2origin) */
  int no_proxy_env; /* no proxy variable in the environment at load: transfers skip curl's lookups */
  int native;       /* plain-HTTP/1.1 requests go through h1.c (CSENG_HTTP=curl or configure{native=false}: off) */
  char *ca_default; /* libcurl's built-in CA bundle (CURLINFO_CAINFO; NULL: none) */
  char *ca_path;    /* libcurl's built-in CA directory (CURLINFO_CAPATH; NULL: none) */
  char *ca_file;    /* http.configure{ca_file=}: the bundle for requests that name none (NULL: the default) */
} H;

static void origin_live(h2origin *o) {
  if (o->live) return;
  o->live = 1;
  if (o->wait_head) o->kick = H.kick_pending = 1;
}

static h2origin *origin_get(const char *key) {
  h2origin *o;
  for (o = H.origins; o; o = o->next)
    if (strcmp(o->key, key) == 0) return o;
  o = calloc(1, sizeof *o);
  if (!o || !(o->key = strdup(key))) {
    free(o);
    return NULL;
  }
  o->next = H.origins;
  H.origins = o;
  return o;
}

static int buf_add(buf *b, const char *p, size_t n) {
  if (b->len + n + 1 > b->cap) {
    /* 256 to start, not a page: ~1,000 calls in flight each holding a few page-aligned 4 KiB
     * buffers all map to the same cache sets, and the copies into them (memmove) were 4.3% of the
     * client's CPU at 1,024 in flight; 2.0% from 256 (perf, docs/PERFORMANCE.md) */
    size_t cap = b->cap ? b->cap : 256;
    char *np;
    while (cap < b->len + n + 1) cap *= 2;
    np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

static void buf_free(buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* Header lists: one curl_slist per distinct set of request headers (the lines curl gets, in
 * order), built once and shared by every transfer that sends that set (a client sends the same
 * few sets again and again). Found by a hash of the lines; counted while transfers use it;
 * past HSET_SWEEP lists, the unused ones are freed. */
#define HSET_BUCKETS 1024
#define HSET_SWEEP 512
typedef struct hset {
  struct hset *next;
  unsigned hash;
  int refs;
  size_t len;
  struct curl_slist *list;
  char key[]; /* the lines, each NUL-terminated */
} hset;

static struct {
  hset *b[HSET_BUCKETS];
  int n;
  buf key; /* the request being read: its lines */
  int uncacheable; /* a name or value holds a NUL: its line would not be what the key says */
} HS;

static void hset_sweep(void) {
  for (int i = 0; i < HSET_BUCKETS; i++) {
    hset **pp = &HS.b[i];
    while (*pp) {
      hset *h = *pp;
      if (h->refs == 0) {
        *pp = h->next;
        curl_slist_free_all(h->list);
        free(h);
        HS.n--;
      } else pp = &h->next;
    }
  }
}

/* The list of the lines in HS.key (NULL: out of memory); counted as used by one more transfer. */
static hset *hset_get(void) {
  const char *k = HS.key.p;
  size_t len = HS.key.len;
  unsigned hash = 2166136261u; /* FNV-1a */
  hset *h;
  for (size_t i = 0; i < len; i++) hash = (hash ^ (unsigned char)k[i]) * 16777619u;
  if (!HS.uncacheable)
    for (h = HS.b[hash % HSET_BUCKETS]; h; h = h->next)
      if (h->hash == hash && h->len == len && memcmp(h->key, k, len) == 0) {
        h->refs++;
        return h;
      }
  if (HS.n >= HSET_SWEEP) hset_sweep();
  if (!(h = malloc(sizeof *h + len))) return NULL;
  memcpy(h->key, k, len);
  h->len = len;
  h->hash = hash;
  h->refs = 1;
  h->list = NULL;
  for (size_t at = 0; at < len; at += strlen(k + at) + 1) {
    struct curl_slist *l = curl_slist_append(h->list, k + at);
    if (!l) {
      curl_slist_free_all(h->list);
      free(h);
      return NULL;
    }
    h->list = l;
  }
  if (HS.uncacheable) h->hash = 0, h->refs = -1; /* not shared: freed when its transfer ends */
  else {
    h->next = HS.b[hash % HSET_BUCKETS];
    HS.b[hash % HSET_BUCKETS] = h;
    HS.n++;
  }
  return h;
}

static void hset_put(hset *h) {
  if (!h) return;
  if (h->refs < 0) { /* uncached */
    curl_slist_free_all(h->list);
    free(h);
  } else h->refs--;
}

/* One header line into HS.key: "Name: value", "Name;" (sent empty) or, omit, "Name:". */
static int key_line(const char *k, size_t kl, const char *v, size_t vl, int omit) {
  if (memchr(k, '\0', kl) || (vl && memchr(v, '\0', vl))) HS.uncacheable = 1;
  if (buf_add(&HS.key, k, kl) != 0) return -1;
  if (omit) return buf_add(&HS.key, ":", 2); /* with its NUL */
  if (vl == 0) return buf_add(&HS.key, ";", 2);
  if (buf_add(&HS.key, ": ", 2) != 0 || buf_add(&HS.key, v, vl) != 0) return -1;
  HS.key.len++; /* keep buf_add's NUL */
  return 0;
}

/* ---- curl callbacks: C only ------------------------------------------- */

/* Response body bytes, from either path: kept (under max_body), and a stream's task woken.
 * 0, or the failure (r->result set). */
static int body_take(req *r, const char *p, size_t len) {
  if (r->max_body && r->body.len + len > r->max_body) return r->result = CURLE_FILESIZE_EXCEEDED;
  if (buf_add(&r->body, p, len) != 0) return r->result = CURLE_OUT_OF_MEMORY;
  if (r->stream) cs_op_ready(&r->op);
  return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  return body_take(ud, p, size * n) == 0 ? size * n : 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  req *r = ud;
  size_t len = size * n;
  if (r->origin && len >= 7 && memcmp(p, "HTTP/2 ", 7) == 0) origin_live(r->origin);
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new response (100, redirect) */
    r->head.len = 0;
    r->trailers.len = 0;
    r->head_done = 0;
  } else if ((len == 2 && p[0] == '\r' && p[1] == '\n') || (len == 1 && p[0] == '\n')) {
    r->head_done = 1; /* end of the header block; what follows (HTTP/2, chunked) are trailers */
    return len;
  } else if (r->head_done) {
    return buf_add(&r->trailers, p, len) == 0 ? len : 0;
  }
  return buf_add(&r->head, p, len) == 0 ? len : 0;
}

static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a);
static int close_socket(void *clientp, curl_socket_t fd);

/* Finished easy handles are reused as they are, without curl_easy_reset (which frees and
 * re-initialises all of curl's settings: ~4k instructions per request): what is the same for
 * every transfer is set once here, and http_request sets every other option it uses on every
 * request, to its value or to curl's default. The pointers an idle handle keeps (error buffer,
 * header list, body) are replaced before its next transfer; curl reads them only during one. */
static CURL *easy_get(void) {
  CURL *e;
  if (H.neasy > 0) return H.easy_pool[--H.neasy];
  if (!(e = curl_easy_init())) return NULL;
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
  /* the smallest upload buffer curl takes (its default, 64 KiB, is allocated per transfer) */
  curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
  if (H.no_proxy_env) { /* "" = no proxy: curl reads no *_proxy variable per transfer */
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOPROXY, "");
  }
  return e;
}

static void easy_put(CURL *e) {
  if (H.neasy < EASY_POOL_MAX) H.easy_pool[H.neasy++] = e;
  else curl_easy_cleanup(e);
}

/* A request's buffers and the request itself (not kept for reuse). */
static void req_destroy(req *r) {
  buf_free(&r->body);
  buf_free(&r->head);
  buf_free(&r->trailers);
  buf_free(&r->urlb);
  buf_free(&r->out);
  free(r);
}

static void req_release(req *r) {
  if (r->waiting) { /* unlink from the origin's queue */
    h2origin *o = r->waiting;
    req **pp = &o->wait_head, *prev = NULL;
    while (*pp && *pp != r) {
      prev = *pp;
      pp = &(*pp)->wnext;
    }
    if (*pp) *pp = r->wnext;
    if (o->wait_tail == r) o->wait_tail = prev;
    r->waiting = NULL;
  }
  if (r->origin) {
    r->origin->pending--;
    if (!r->origin->live && r->origin->wait_head) r->origin->kick = H.kick_pending = 1; /* promote a waiter */
    r->origin = NULL;
  }
  if (r->native_live) { /* abandoned before h1 finished it (cancelled, or the callback raised) */
    h1_cancel(&r->call);
    r->native_live = 0;
    H.in_flight--;
  }
  if (r->easy) {
    curl_multi_remove_handle(r->pool->multi, r->easy);
    easy_put(r->easy);
    r->easy = NULL;
    H.in_flight--;
    r->pool->in_flight--;
  }
  hset_put(r->hset);
  r->hset = NULL;
  if (r->body_ref != LUA_NOREF) {
    luaL_unref(H.L, LUA_REGISTRYINDEX, r->body_ref);
    r->body_ref = LUA_NOREF;
  }
}

/* Finished requests are kept for reuse (REQ_FREE_MAX, their buffers up to BUF_KEEP). */
#define REQ_FREE_MAX 1024
#define BUF_KEEP (64 * 1024)
static struct {
  req *head;
  int n;
} RF;

static void buf_keep(buf *b) {
  if (b->cap > BUF_KEEP) buf_free(b);
  b->len = 0;
}

static void req_free(req *r) {
  req_release(r);
  if (RF.n >= REQ_FREE_MAX) {
    req_destroy(r);
    return;
  }
  buf_keep(&r->body);
  buf_keep(&r->head);
  buf_keep(&r->trailers);
  buf_keep(&r->urlb);
  buf_keep(&r->out);
  r->free_next = RF.head;
  RF.head = r;
  RF.n++;
}

/* A zeroed request (its buffers kept, emptied), its URL copied; NULL: out of memory. */
static req *req_new(const char *url, size_t url_len) {
  req *r = RF.head;
  if (r) {
    buf body = r->body, head = r->head, trailers = r->trailers, urlb = r->urlb, out = r->out;
    RF.head = r->free_next;
    RF.n--;
    memset(r, 0, sizeof *r);
    r->body = body, r->head = head, r->trailers = trailers, r->urlb = urlb, r->out = out;
  } else if (!(r = calloc(1, sizeof *r))) return NULL;
  if (buf_add(&r->urlb, url, url_len) != 0) {
    r->free_next = RF.head; /* back to the list, still valid */
    RF.head = r;
    RF.n++;
    return NULL;
  }
  r->url = r->urlb.p;
  return r;
}

/* A prior-knowledge request whose connection is established: within the same curl call it
 * switches the connection to HTTP/2 and sends its request. curl lets other transfers multiplex
 * on it once it has read the server's SETTINGS: on_poll marks the origin live after the next
 * read from that socket. */
static int on_prereq(void *ud, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
                     int conn_local_port) {
  req *r = ud;
  (void)conn_primary_ip;
  (void)conn_local_ip;
  (void)conn_primary_port;
  (void)conn_local_port;
  if (r->origin) r->origin->established = 1;
  return CURL_PREREQFUNC_OK;
}

static void req_start(req *r) {
  if (curl_multi_add_handle(r->pool->multi, r->easy) != CURLM_OK) {
    r->result = CURLE_FAILED_INIT;
    r->done = 1;
    cs_op_ready(&r->op);
  }
}

/* Hand the waiting requests of origins that changed to curl (outside curl's callbacks). */
static void origins_kick(void) {
  h2origin *o;
  if (!H.kick_pending) return;
  H.kick_pending = 0;
  for (o = H.origins; o; o = o->next) {
    if (!o->kick) continue;
    o->kick = 0;
    while (o->wait_head && (o->live || o->pending == 0)) {
      req *r = o->wait_head;
      o->wait_head = r->wnext;
      if (!o->wait_head) o->wait_tail = NULL;
      r->waiting = NULL;
      r->wnext = NULL;
      if (!o->live &&
          o->conns == 0) { /* the first request failed before HTTP/2: this one opens a connection */
        curl_easy_setopt(r->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
        curl_easy_setopt(r->easy, CURLOPT_PREREQFUNCTION, on_prereq);
        curl_easy_setopt(r->easy, CURLOPT_PREREQDATA, r);
        r->origin = o;
        o->pending++;
        req_start(r);
        break; /* the others wait for this one */
      }
      req_start(r);
    }
  }
}

static void check_done(pool *pl) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(pl->multi, &left)) != NULL) {
    req *r;
    long oserr = 0;
    if (m->msg != CURLMSG_DONE) continue;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    if (r->result == CURLE_OK) r->result = m->data.result;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(r->easy, CURLINFO_HTTP_VERSION, &r->http_version);
    curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &oserr);
    curl_easy_getinfo(r->easy, CURLINFO_NUM_CONNECTS, &r->new_conns);
    curl_easy_getinfo(r->easy, CURLINFO_NAMELOOKUP_TIME_T, &r->t_dns);
    curl_easy_getinfo(r->easy, CURLINFO_CONNECT_TIME_T, &r->t_connect);
    curl_easy_getinfo(r->easy, CURLINFO_APPCONNECT_TIME_T, &r->t_tls);
    curl_easy_getinfo(r->easy, CURLINFO_STARTTRANSFER_TIME_T, &r->t_ttfb);
    curl_easy_getinfo(r->easy, CURLINFO_TOTAL_TIME_T, &r->t_total);
    if (r->new_conns > 0) r->t_wait = (uint64_t)(r->t_tls > 0 ? r->t_tls : r->t_connect) * 1000;
    r->t_end = uv_hrtime();
    r->os_errno = (int)oserr;
    r->done = 1;
    H.completed++;
    req_release(r); /* the connection goes back to the cache now */
    cs_op_ready(&r->op);
  }
  origins_kick();
}

static sockctx *sock_lookup(curl_socket_t fd);

static void on_poll(uv_poll_t *h, int status, int events) {
  sockctx *c = h->data;
  curl_socket_t fd = c->fd;
  h2origin *o = c->origin;
  int running, flags = 0;
  if (c->idle) { /* a cached connection became readable: the server closed it (or sent junk). curl
                    finds out when it next picks the connection; stop polling it meanwhile */
    uv_poll_stop(&c->poll);
    c->events = 0;
    return;
  }
  if (status < 0) flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  curl_multi_socket_action(c->pool->multi, fd, flags, &running);
  /* a read on the first prior-knowledge connection after it switched to HTTP/2: the server's
   * SETTINGS are in, the connection multiplexes (see h2origin) */
  if (o && (flags & CURL_CSELECT_IN) && sock_lookup(fd) == c && c->origin == o && o->established)
    origin_live(o);
  check_done(c->pool);
}

static void on_timer(uv_timer_t *t) {
  pool *pl = t->data;
  int running;
  curl_multi_socket_action(pl->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(pl);
}

static void sock_free(uv_handle_t *h) { free(h->data); }

static sockctx *sock_lookup(curl_socket_t fd) {
  return (fd >= 0 && (size_t)fd < H.nsocks) ? H.socks[fd] : NULL;
}

static sockctx *sock_new(curl_socket_t fd, int ours, pool *pl) {
  sockctx *c;
  if (fd < 0) return NULL;
  if ((size_t)fd >= H.nsocks) {
    size_t n = H.nsocks ? H.nsocks : 256;
    sockctx **ns;
    while (n <= (size_t)fd) n *= 2;
    ns = realloc(H.socks, n * sizeof *ns);
    if (!ns) return NULL;
    memset(ns + H.nsocks, 0, (n - H.nsocks) * sizeof *ns);
    H.socks = ns;
    H.nsocks = n;
  }
  c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (uv_poll_init_socket(cs_loop(), &c->poll, fd) != 0) {
    free(c);
    return NULL;
  }
  c->fd = fd;
  c->ours = ours;
  c->pool = pl;
  c->poll.data = c;
  H.socks[fd] = c;
  return c;
}

static void sock_drop(sockctx *c) {
  H.socks[c->fd] = NULL;
  uv_close((uv_handle_t *)&c->poll, sock_free); /* stops polling now; frees later */
}

static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a) {
  curl_socket_t fd;
  sockctx *c;
  req *r = clientp;
  (void)purpose;
  fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd < 0) return CURL_SOCKET_BAD;
  if (!(c = sock_new(fd, 1, r ? r->pool : &H.pools[0]))) {
    close(fd);
    return CURL_SOCKET_BAD;
  }
  if (r && r->origin) {
    c->origin = r->origin;
    c->origin->conns++;
  }
  return fd;
}

static int close_socket(void *clientp, curl_socket_t fd) {
  sockctx *c = sock_lookup(fd);
  (void)clientp;
  if (c && c->origin) {
    if (--c->origin->conns == 0) c->origin->live = c->origin->established = 0;
    c->origin = NULL;
  }
  if (c) sock_drop(c);
  return close(fd);
}

/* A kept-alive socket (ours, only read-polled) stays polled when curl stops watching it at the
 * end of a transfer (idle): the next transfer on it asks for reading again, which costs nothing
 * (no epoll_ctl to remove and re-add it per request). */
static int on_socket(CURL *e, curl_socket_t s, int action, void *userp, void *socketp) {
  sockctx *c = sock_lookup(s);
  int events = 0;
  (void)e;
  (void)socketp;
  if (action == CURL_POLL_REMOVE) {
    if (c && c->ours) {
      if (c->events == UV_READABLE) c->idle = 1;
      else if (c->events) {
        uv_poll_stop(&c->poll); /* the socket may be reused: keep the handle */
        c->events = 0;
      }
    } else if (c) sock_drop(c);
    return 0;
  }
  if (!c && !(c = sock_new(s, 0, userp))) return -1;
  c->pool = userp; /* the multi handle that watches it now (a socket is in one pool) */
  c->idle = 0;
  if (action & CURL_POLL_IN) events |= UV_READABLE;
  if (action & CURL_POLL_OUT) events |= UV_WRITABLE;
  if (events != c->events) {
    if (events) uv_poll_start(&c->poll, events, on_poll);
    else uv_poll_stop(&c->poll);
    c->events = events;
  }
  return 0;
}

static int on_curl_timer(CURLM *m, long timeout_ms, void *userp) {
  pool *pl = userp;
  (void)m;
  if (timeout_ms < 0) uv_timer_stop(&pl->timer);
  else {
    uv_update_time(cs_loop());
    uv_timer_start(&pl->timer, on_timer, (uint64_t)timeout_ms, 0);
  }
  return 0;
}

static int pool_open(pool *pl) {
  if (pl->multi) return 0;
  if (!(pl->multi = curl_multi_init())) return -1;
  curl_multi_setopt(pl->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(pl->multi, CURLMOPT_SOCKETDATA, pl);
  curl_multi_setopt(pl->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(pl->multi, CURLMOPT_TIMERDATA, pl);
  curl_multi_setopt(pl->multi, CURLMOPT_MAXCONNECTS, 1024L);
  curl_multi_setopt(pl->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX); /* HTTP/2 streams share a connection */
  uv_timer_init(cs_loop(), &pl->timer);
  pl->timer.data = pl;
  if (pl != &H.pools[0]) { /* the settings http.configure gave pool 0 */
    curl_multi_setopt(pl->multi, CURLMOPT_MAXCONNECTS, H.maxconnects);
    curl_multi_setopt(pl->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, H.max_streams);
  }
  return 0;
}

/* The pool of a new transfer: pool 0 when it may multiplex, else the least loaded of those
 * open; another one is opened (up to npools) once that one has POOL_SHARE transfers, so each
 * pool's walk over its connections stays short (about POOL_SHARE connections). */
static pool *pool_pick(int may_multiplex) {
  pool *best = &H.pools[0];
  int i;
  if (may_multiplex || H.npools <= 1) return best;
  for (i = 1; i < H.npools && H.pools[i].multi; i++)
    if (H.pools[i].in_flight < best->in_flight) best = &H.pools[i];
  if (best->in_flight >= POOL_SHARE && i < H.npools && pool_open(&H.pools[i]) == 0) return &H.pools[i];
  return best;
}

/* ---- results ------------------------------------------------------------ */

static const char *error_code(req *r) {
  switch (r->result) {
    case CURLE_OPERATION_TIMEDOUT: return "ETIMEDOUT";
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return "ENOTFOUND";
    case CURLE_COULDNT_CONNECT:
      if (r->os_errno == ENOENT) return "ENOENT";
      if (r->os_errno == EACCES) return "EACCES";
      if (r->os_errno == ETIMEDOUT) return "ETIMEDOUT";
      if (r->os_errno == EHOSTUNREACH || r->os_errno == ENETUNREACH) return "EHOSTUNREACH";
      return "ECONNREFUSED";
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return "ECONNRESET";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return "ETLS";
    case CURLE_FILESIZE_EXCEEDED: return "EBODY";
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK: return "EABORTED";
    case CURLE_TOO_MANY_REDIRECTS: return "EREDIRECT";
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL: return "EURL";
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY: return "EHTTP2";
    default: return "ECURL";
  }
}

static void push_headers(lua_State *L, buf *b) {
  char *line = b->p, *end = b->p ? b->p + b->len : NULL;
  int lines = 0;
  for (char *q = line; q && q < end && (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++) lines++;
  int last = 0; /* stack index of the last header's name: a folded line (obs-fold) continues it */
  /* libcurl's lines start with the status line; the native path's are the headers alone (sized
   * one short, the table was rehashed at its last header) */
  if (lines > 0 && b->len >= 5 && memcmp(b->p, "HTTP/", 5) == 0) lines--;
  lua_createtable(L, 0, lines);
  while (line && line < end) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    char *colon, *v, *ve, *k;
    if (!nl) nl = end;
    if (last && (*line == ' ' || *line == '\t')) { /* RFC 9112 5.2: replaced by one space */
      v = line;
      while (v < nl && (*v == ' ' || *v == '\t')) v++;
      ve = nl;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      if (ve > v) {
        lua_pushvalue(L, last);
        lua_pushvalue(L, last);
        lua_rawget(L, -3);
        lua_pushliteral(L, " ");
        lua_pushlstring(L, v, (size_t)(ve - v));
        lua_concat(L, 3);
        lua_rawset(L, -3);
      }
      line = nl + 1;
      continue;
    }
    colon = memchr(line, ':', (size_t)(nl - line));
    if (colon && !(nl - line >= 5 && memcmp(line, "HTTP/", 5) == 0)) {
      for (k = line; k < colon; k++) *k = (char)((*k >= 'A' && *k <= 'Z') ? *k + 32 : *k);
      v = colon + 1;
      while (v < nl && (*v == ' ' || *v == '\t')) v++;
      ve = nl;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ')) ve--;
      if (last) lua_remove(L, last); /* the table moves down to last's slot */
      lua_pushlstring(L, line, (size_t)(colon - line));
      lua_insert(L, -2); /* name below the table */
      last = lua_gettop(L) - 1;
      lua_pushvalue(L, last);
      lua_pushvalue(L, -1);
      if (lua_rawget(L, -3) == LUA_TSTRING) { /* repeated header: join with ", " */
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, v, (size_t)(ve - v));
        lua_concat(L, 3);
      } else {
        lua_pop(L, 1);
        lua_pushlstring(L, v, (size_t)(ve - v));
      }
      lua_rawset(L, -3);
    }
    line = nl + 1;
  }
  if (last) lua_remove(L, last); /* the table on top */
}

static void set_time(lua_State *L, const char *k, curl_off_t us) {
  lua_pushnumber(L, (double)us / 1e6);
  lua_setfield(L, -2, k);
}

static int push_done(lua_State *L, req *r) {
  if (r->t_wait) cs_task_handshake(r->t_wait); /* http.handshakes(): what the task's calls waited for connections */
  if (r->result != CURLE_OK) {
    const char *code = error_code(r);
    const char *msg = r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->result);
    if (r->result == CURLE_FILESIZE_EXCEEDED) msg = "response body larger than max_body";
    /* HTTP/2 required and not one response byte: an HTTP/1.1-only server answers the preface
     * with a 400 or closes, and which of the two curl sees (a reply it cannot read, nothing,
     * or a reset while it still sends its SETTINGS) is a race; a reset of a reused connection
     * is left as ECONNRESET */
    if (r->want_h2 && r->status == 0 && !r->head_done &&
        (strcmp(code, "EHTTP2") == 0 || r->result == CURLE_GOT_NOTHING ||
         r->result == CURLE_UNSUPPORTED_PROTOCOL ||
         (r->new_conns > 0 && (r->result == CURLE_RECV_ERROR || r->result == CURLE_SEND_ERROR)))) {
      code = "EHTTP2"; /* no HTTP/2 response at all */
      lua_pushnil(L);
      lua_pushfstring(L, "%s: no HTTP/2 response (is the server HTTP/1.1 only?): %s", r->url, msg);
      lua_pushstring(L, code);
      req_free(r);
      return 3;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", r->url, msg);
    lua_pushstring(L, code);
    req_free(r);
    return 3;
  }
  if (r->want_h2 && r->http_version != CURL_HTTP_VERSION_2_0) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: the server answered with HTTP/%s where HTTP/2 was required (opts.http_version)",
                    r->url, r->http_version == CURL_HTTP_VERSION_1_0 ? "1.0" : "1.1");
    lua_pushliteral(L, "EHTTP2");
    req_free(r);
    return 3;
  }
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, r->status);
  lua_setfield(L, -2, "status");
  push_headers(L, &r->head);
  lua_setfield(L, -2, "headers");
  push_headers(L, &r->trailers);
  lua_setfield(L, -2, "trailers");
  if (r->stream) lua_pushliteral(L, "");
  else lua_pushlstring(L, r->body.p ? r->body.p : "", r->body.len);
  lua_setfield(L, -2, "body");
  lua_pushstring(L, r->http_version == CURL_HTTP_VERSION_2_0   ? "2"
                    : r->http_version == CURL_HTTP_VERSION_1_0 ? "1.0"
                                                               : "1.1");
  lua_setfield(L, -2, "http_version");
  lua_createtable(L, 0, 7);
  set_time(L, "dns", r->t_dns);
  set_time(L, "connect", r->t_connect);
  set_time(L, "tls", r->t_tls);
  set_time(L, "ttfb", r->t_ttfb);
  set_time(L, "total", r->t_total);
  if (r->t_start && r->t_end >= r->t_start) {
    lua_pushinteger(L, (lua_Integer)r->t_start);
    lua_setfield(L, -2, "started_at");
    lua_pushinteger(L, (lua_Integer)r->t_end);
    lua_setfield(L, -2, "answered_at");
    cs_task_answered(r->t_end); /* clock.answered(): this task was woken by this answer */
  }
  lua_setfield(L, -2, "timings");
  req_free(r);
  return 1;
}

static int req_push(lua_State *L, cs_op *op);

/* After the stream callback returned (or raised). */
static int stream_k(lua_State *L, int status, lua_KContext ctx) {
  req *r = (req *)ctx;
  if (status != LUA_OK && status != LUA_YIELD) {
    req_free(r); /* the callback raised: abandon the transfer, re-raise */
    return lua_error(L);
  }
  if (lua_toboolean(L, -1) == 0 && !lua_isnil(L, -1)) { /* callback returned false: stop */
    lua_pop(L, 1);
    cs_fail(L, "EABORTED", "%s: the stream callback stopped the transfer", r->url);
    req_free(r); /* after the message: it quotes r->url */
    return 3;
  }
  lua_pop(L, 1);
  return req_push(L, &r->op);
}

/* The status of the response whose body is arriving: curl's (the last response's code) or the
 * native path's (set when its header block ended, before any body byte). */
static long live_status(req *r) {
  long code = r->status;
  if (code == 0 && r->easy) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
  if (code == 0) code = (long)r->call.status;
  return code;
}

static int req_push(lua_State *L, cs_op *op) {
  req *r = (req *)op;
  if (r->stream && r->body.len > 0) {
    int nargs = 1;
    lua_getfield(L, 1, "stream");
    lua_pushlstring(L, r->body.p, r->body.len);
    r->body.len = 0;
    if (!r->head_given) { /* the first chunk comes with {status, headers}, so a proxy can answer before the end */
      r->head_given = 1;
      lua_createtable(L, 0, 2);
      lua_pushinteger(L, live_status(r));
      lua_setfield(L, -2, "status");
      push_headers(L, &r->head);
      lua_setfield(L, -2, "headers");
      nargs = 2;
    }
    return stream_k(L, lua_pcallk(L, nargs, 1, 0, (lua_KContext)r, stream_k), (lua_KContext)r);
  }
  if (r->done) return push_done(L, r);
  return cs_yield(L, op); /* more chunks to come */
}

static void req_cancel(cs_op *op) {
  req_free((req *)op);
  origins_kick(); /* a cancelled first request lets a waiter go */
}

/* Option checks: every option is read and checked before anything is allocated, so a bad
 * call raises without leaking; the message names the option. */
static int opt_error(lua_State *L, const char *k, const char *what) {
  return luaL_error(L, "http.request: opts.%s must be %s, got %s", k, what, luaL_typename(L, -1));
}

static double opt_number(lua_State *L, const char *k, double def) {
  double v = def;
  lua_getfield(L, 1, k);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER) opt_error(L, k, "a number");
    v = lua_tonumber(L, -1);
    if (!(v >= 0)) luaL_error(L, "http.request: opts.%s must be >= 0", k);
  }
  lua_pop(L, 1);
  return v;
}

static int opt_bool(lua_State *L, const char *k) {
  int v;
  lua_getfield(L, 1, k);
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) opt_error(L, k, "a boolean");
  v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* A string option (kept on the stack at a fixed slot by the caller). */
static const char *opt_string(lua_State *L, const char *k, size_t *len, int required) {
  lua_getfield(L, 1, k);
  if (lua_isnil(L, -1) && !required) return NULL;
  if (lua_type(L, -1) != LUA_TSTRING) opt_error(L, k, "a string");
  return lua_tolstring(L, -1, len);
}

/* "scheme://host:port|unix_socket" of a URL (the URL itself if curl cannot parse it). */
static void origin_key(const char *url, const char *unix_socket, char *out, size_t cap) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL;
  if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
    snprintf(out, cap, "%s://%s:%s|%s", scheme, host, port, unix_socket ? unix_socket : "");
  else snprintf(out, cap, "%s|%s", url, unix_socket ? unix_socket : "");
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
}

/* ---- the native HTTP/1.1 path (h1.c) ------------------------------------------------------ */

static void lastopt_note(const h1_url *u, long http_version, int insecure, const char *ca_file);

#define REQ_OF(c) ((req *)((char *)(c) - offsetof(req, call)))

static int native_line(h1_call *c, const char *p, size_t n, int trailer) {
  req *r = REQ_OF(c);
  buf *b = trailer ? &r->trailers : &r->head;
  if (!p) { /* after a 1xx: the final response's lines only */
    r->head.len = r->trailers.len = 0;
    return 0;
  }
  if (!trailer && n > 18 && strncasecmp(p, "transfer-encoding:", 18) == 0) {
    /* a coding other than chunked (gzip, ...): libcurl refuses what it was not asked to decode */
    const char *v = p + 18, *end = p + n;
    while (v < end) {
      const char *e;
      while (v < end && (*v == ' ' || *v == '\t' || *v == ',')) v++;
      e = v;
      while (e < end && *e != ',' && *e != ' ' && *e != '\t') e++;
      if (e > v && !((e - v == 7 && strncasecmp(v, "chunked", 7) == 0) || (e - v == 8 && strncasecmp(v, "identity", 8) == 0))) {
        r->result = CURLE_BAD_CONTENT_ENCODING;
        snprintf(r->errbuf, sizeof r->errbuf, "Unsolicited Transfer-Encoding (%.*s) found", (int)(e - v), v);
        return -1;
      }
      v = e;
    }
  }
  return buf_add(b, p, n) == 0 && buf_add(b, "\r\n", 2) == 0 ? 0 : -1;
}

static int native_body(h1_call *c, const char *p, size_t n) { return body_take(REQ_OF(c), p, n) ? -1 : 0; }

/* The outcome in libcurl's terms (CURLcode, errno, message), so that push_done and error_code
 * answer a native request exactly as they answer a libcurl one. */
static void native_done(h1_call *c, int err, int os_errno) {
  req *r = REQ_OF(c);
  unsigned long ms = (unsigned long)(c->t_total / 1000000);
  r->native_live = 0;
  H.in_flight--;
  H.completed++;
  r->os_errno = os_errno;
  r->status = (long)c->status;
  r->http_version = c->major == 2                    ? CURL_HTTP_VERSION_2_0
                    : c->major == 1 && c->minor == 0 ? CURL_HTTP_VERSION_1_0
                                                     : CURL_HTTP_VERSION_1_1;
  r->new_conns = c->new_conn;
  r->t_dns = (curl_off_t)(c->t_dns / 1000);
  r->t_connect = (curl_off_t)(c->t_connect / 1000);
  r->t_tls = (curl_off_t)(c->t_tls / 1000);
  r->t_ttfb = (curl_off_t)(c->t_ttfb / 1000);
  r->t_total = (curl_off_t)(c->t_total / 1000);
  r->t_start = c->t0;
  r->t_end = c->t_end;
  r->t_wait = c->t_ready;
  r->head_done = c->status != 0;
  switch (err) {
    case H1_OK: break;
    case H1_ERESOLVE:
      r->result = CURLE_COULDNT_RESOLVE_HOST;
      snprintf(r->errbuf, sizeof r->errbuf, "Could not resolve host: %.*s", (int)c->host_len, c->host);
      break;
    case H1_ECONNECT:
      r->result = CURLE_COULDNT_CONNECT;
      snprintf(r->errbuf, sizeof r->errbuf, "Failed to connect to %.*s port %d after %lu ms: %s", (int)c->host_len,
               c->host, c->port, ms, strerror(os_errno));
      break;
    case H1_ETIMEDOUT:
      r->result = CURLE_OPERATION_TIMEDOUT;
      snprintf(r->errbuf, sizeof r->errbuf, "Operation timed out after %lu milliseconds with %zu bytes received", ms,
               c->received);
      break;
    case H1_ESEND:
      r->result = CURLE_SEND_ERROR;
      snprintf(r->errbuf, sizeof r->errbuf, "Send failure: %s", strerror(os_errno));
      break;
    case H1_ERECV:
      r->result = CURLE_RECV_ERROR;
      if (c->tls_error[0]) snprintf(r->errbuf, sizeof r->errbuf, "%s", c->tls_error);
      else snprintf(r->errbuf, sizeof r->errbuf, "Recv failure: %s", strerror(os_errno));
      break;
    case H1_EEMPTY: r->result = CURLE_GOT_NOTHING; break;
    case H1_EPARTIAL: r->result = CURLE_PARTIAL_FILE; break;
    case H1_EPARSE: /* libcurl's codes for the same faults: no HTTP/1.x status line (it reads
                       HTTP/0.9, which it refuses), a bad header block, a bad body (chunk sizes) */
      r->result = c->phase == 0 ? CURLE_UNSUPPORTED_PROTOCOL
                  : c->phase == 1 ? CURLE_WEIRD_SERVER_REPLY
                                  : CURLE_RECV_ERROR;
      snprintf(r->errbuf, sizeof r->errbuf, "%s: %s",
               c->phase == 0 ? "not an HTTP/1.x status line" : c->phase == 1 ? "malformed response header" : "malformed response body",
               c->parse_error ? c->parse_error : "?");
      break;
    case H1_EABORT:
      if (r->result == CURLE_OK) r->result = CURLE_WRITE_ERROR;
      break;
    case H1_EH2: /* libcurl's: the session failed (CURLE_HTTP2), a stream did (CURLE_HTTP2_STREAM) */
      r->result = CURLE_HTTP2;
      snprintf(r->errbuf, sizeof r->errbuf, "Error in the HTTP2 framing layer");
      break;
    case H1_EH2STREAM:
      r->result = CURLE_HTTP2_STREAM;
      if (c->parse_error)
        snprintf(r->errbuf, sizeof r->errbuf, "HTTP/2 stream %d was not closed cleanly: %s", (int)c->stream,
                 c->parse_error);
      else
        snprintf(r->errbuf, sizeof r->errbuf,
                 "HTTP/2 stream %d was not closed cleanly before end of the underlying connection", (int)c->stream);
      break;
    case H1_ETLS: /* libcurl's codes for the same failures (all ETLS to the caller) */
    case H1_ECERT:
    case H1_ECAFILE:
      r->result = err == H1_ECERT ? CURLE_PEER_FAILED_VERIFICATION
                  : err == H1_ECAFILE ? CURLE_SSL_CACERT_BADFILE
                                      : CURLE_SSL_CONNECT_ERROR;
      snprintf(r->errbuf, sizeof r->errbuf, "%s", c->tls_error);
      break;
    default: r->result = CURLE_OUT_OF_MEMORY; break;
  }
  r->done = 1;
  req_release(r); /* the body string's reference */
  cs_op_ready(&r->op);
}

static int is_name(const char *line, size_t ll, const char *name) {
  size_t n;
  if ((line[0] | 0x20) != name[0]) return 0; /* name is lower case */
  n = strlen(name);
  return ll > n && strncasecmp(line, name, n) == 0 && (line[n] == ':' || line[n] == ';');
}

static int buf_str(buf *b, const char *p) { return buf_add(b, p, strlen(p)); }

/* The request head libcurl would send for these options (Host, Accept: *\/\*, the headers, and for
 * a request with a body Content-Length and, unless given, curl's form Content-Type) into
 * r->out, from the header lines in HS.key. 0, 1: not for the native path (a header curl
 * treats specially, a line break in a value), -1: out of memory. */
static int native_head(req *r, const char *method, const h1_url *u, int has_body, size_t body_len, int h2) {
  buf *o = &r->out;
  int host = 1, accept = 1, ctype = has_body;
  char num[32];
  const char *k = HS.key.p, *end = HS.key.p + HS.key.len;
  o->len = 0;
  for (const char *l = k; l < end; l += strlen(l) + 1) { /* first pass: what the user set or omitted */
    size_t ll = strlen(l);
    if (strpbrk(l, "\r\n")) return 1;
    if (l == k) continue; /* "Expect:" (cseng's own: no 100-continue) */
    if (is_name(l, ll, "host")) host = 0;
    else if (is_name(l, ll, "accept")) accept = 0;
    else if (is_name(l, ll, "content-type")) ctype = 0;
    else if (is_name(l, ll, "content-length") || is_name(l, ll, "transfer-encoding") ||
             is_name(l, ll, "connection") || is_name(l, ll, "expect") || is_name(l, ll, "upgrade") ||
             (!h2 && is_name(l, ll, "te"))) /* (HTTP/2 asked for: gRPC's "te: trailers" goes as it is) */
      return 1;
  }
  if (buf_str(o, method) || buf_add(o, " ", 1) ||
      (u->target_len ? buf_add(o, u->target, u->target_len) : buf_add(o, "/", 1)) ||
      buf_str(o, " HTTP/1.1\r\n"))
    return -1;
  if (host) {
    if (buf_str(o, "Host: ") || (u->ipv6 && buf_add(o, "[", 1)) || buf_add(o, u->host, u->host_len) ||
        (u->ipv6 && buf_add(o, "]", 1)))
      return -1;
    if (!u->default_port) {
      num[0] = ':';
      if (buf_add(o, num, 1 + cs_utoa(num + 1, (uint64_t)u->port))) return -1;
    }
    if (buf_add(o, "\r\n", 2)) return -1;
  }
  if (accept && buf_str(o, "Accept: */*\r\n")) return -1;
  for (const char *l = k; l < end; l += strlen(l) + 1) {
    size_t ll = strlen(l);
    if (l == k || (ll > 0 && l[ll - 1] == ':')) continue; /* omitted: nothing is sent */
    if (l[ll - 1] == ';') { /* sent empty */
      if (buf_add(o, l, ll - 1) || buf_str(o, ":\r\n")) return -1;
    } else if (buf_add(o, l, ll) || buf_add(o, "\r\n", 2))
      return -1;
  }
  if (has_body) {
    if (buf_str(o, "Content-Length: ") || buf_add(o, num, cs_utoa(num, (uint64_t)body_len)) ||
        buf_add(o, "\r\n", 2))
      return -1;
    if (ctype && buf_str(o, "Content-Type: application/x-www-form-urlencoded\r\n")) return -1;
  }
  return buf_add(o, "\r\n", 2) ? -1 : 0;
}

/* Whether a method can go as it is on the request line. */
static int method_ok(const char *m) {
  if (!*m) return 0;
  for (; *m; m++)
    if (*m <= ' ' || *m >= 0x7f) return 0;
  return 1;
}

/* The request through h1.c, when it is one libcurl would send as plain HTTP/1.1 with nothing
 * of its own to add: 1 (r is running; the caller yields), 0 (libcurl's job; r untouched but
 * its out buffer), -1 (out of memory). The options were checked; the header lines are in HS.key. */
static int native_start(lua_State *L, req *r, const char *url, size_t url_len, const char *method,
                        const char *body, size_t body_len, int body_idx, double timeout,
                        double connect_timeout, int insecure, const char *ca_file, long http_version) {
  h1_url u;
  int has_body = body != NULL || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                 strcmp(method, "PATCH") == 0;
  int rc;
  if (!h1_url_split(url, url_len, &u) || !method_ok(method)) return 0;
  if (u.tls ? http_version == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE : http_version == CURL_HTTP_VERSION_2TLS)
    return 0; /* (never: "2" is ALPN over TLS, prior knowledge on http://) */
  if (u.tls && !(r->call.tls = tls_conf_get(!insecure, ca_file))) return -1;
  lastopt_note(&u, http_version, insecure, ca_file);
  if (body && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)) return 0; /* curl makes it a POST */
  if ((rc = native_head(r, method, &u, has_body, body ? body_len : 0, r->want_h2)) != 0) return rc < 0 ? -1 : 0;
  {
    struct tls_conf *tls = r->call.tls;
    memset(&r->call, 0, sizeof r->call);
    r->call.tls = tls;
  }
  r->call.version = http_version == CURL_HTTP_VERSION_1_1 ? H1_V_1 : r->want_h2 ? H1_V_2 : H1_V_ANY;
  r->call.host = r->url + (u.host - url); /* the request's own copy of the URL: messages quote it */
  r->call.host_len = u.host_len;
  r->call.ipv6 = u.ipv6;
  r->call.port = u.port;
  r->call.send[0] = uv_buf_init(r->out.p, (unsigned)r->out.len);
  r->call.nsend = 1;
  if (body && body_len) {
    r->call.send[1] = uv_buf_init((char *)body, (unsigned)body_len);
    r->call.nsend = 2;
  }
  r->call.head_method = strcmp(method, "HEAD") == 0;
  r->call.timeout_ms = (uint64_t)(timeout * 1000);
  r->call.connect_timeout_ms = (uint64_t)(connect_timeout * 1000);
  r->call.on_line = native_line;
  r->call.on_body = native_body;
  r->call.on_done = native_done;
  if (h1_start(&r->call) != 0) return -1;
  /* h1 copied the host into its origin; the URL stays in r->urlb for messages */
  r->native_live = 1;
  if (body) {
    lua_pushvalue(L, body_idx);
    r->body_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* keeps the string alive, no copy */
  }
  H.in_flight++;
  H.started++;
  return 1;
}

static int http_request(lua_State *L) {
  const char *method, *url, *unix_socket, *body, *version, *ca_file;
  size_t body_len = 0, url_len = 0;
  req *r;
  CURL *e = NULL;
  double timeout, connect_timeout, max_body;
  int follow, insecure, stream, body_idx;
  long http_version = 0;
  h2origin *wait_on = NULL;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  cs_task_current(L);
  /* 1. read and check every option (stack slots 2..: url, method, unix_socket, body, version, ca_file) */
  url = opt_string(L, "url", &url_len, 1);
  method = opt_string(L, "method", NULL, 0);
  if (!method) method = "GET";
  unix_socket = opt_string(L, "unix_socket", NULL, 0);
  if (!unix_socket) lua_pushnil(L);
  body = opt_string(L, "body", &body_len, 0);
  body_idx = lua_gettop(L);
  version = opt_string(L, "http_version", NULL, 0);
  if (version) {
    int tls = strncasecmp(url, "https:", 6) == 0;
    if (strcmp(version, "1.1") == 0) http_version = CURL_HTTP_VERSION_1_1;
    else if (strcmp(version, "2") == 0)
      http_version = tls ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
    else if (strcmp(version, "2-prior-knowledge") == 0) http_version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
    else
      luaL_error(L, "http.request: opts.http_version must be '1.1', '2' or '2-prior-knowledge', got '%s'",
                 version);
  }
  ca_file = opt_string(L, "ca_file", NULL, 0);
  if (!ca_file) ca_file = H.ca_file; /* http.configure's, or NULL: the system store */
  timeout = opt_number(L, "timeout", 60);
  connect_timeout = opt_number(L, "connect_timeout", 0);
  max_body = opt_number(L, "max_body", 0);
  follow = opt_bool(L, "follow");
  insecure = opt_bool(L, "insecure");
  lua_getfield(L, 1, "stream");
  if (!lua_isnil(L, -1) && !lua_isfunction(L, -1)) opt_error(L, "stream", "a function");
  stream = !lua_isnil(L, -1);
  lua_pop(L, 1);
  /* the header lines, checked and written into HS.key: "Expect:" (no Expect: 100-continue),
   * the headers, then the omitted ones as "Name:" (nothing after the colon stops curl sending
   * its own header of that name, e.g. the Content-Type it gives every request body) */
  HS.key.len = 0;
  HS.uncacheable = 0;
  if (key_line("Expect", 6, NULL, 0, 1) != 0) return luaL_error(L, "out of memory");
  lua_getfield(L, 1, "headers");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) opt_error(L, "headers", "a table");
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      int t = lua_type(L, -1);
      if (lua_type(L, -2) == LUA_TSTRING) {
        size_t kl, vl;
        const char *k = lua_tolstring(L, -2, &kl), *v;
        if (t == LUA_TBOOLEAN) {
          v = lua_toboolean(L, -1) ? "true" : "false";
          vl = strlen(v);
        } else if (t == LUA_TSTRING) {
          v = lua_tolstring(L, -1, &vl);
        } else if (t == LUA_TNUMBER) {
          lua_pushvalue(L, -1); /* converted on a copy: lua_next's value slot stays as it was */
          v = lua_tolstring(L, -1, &vl);
          lua_replace(L, -2);
        } else {
          return luaL_error(L, "http.request: opts.headers['%s'] must be a string or a number, got %s", k,
                            luaL_typename(L, -1));
        }
        if (key_line(k, kl, v, vl, 0) != 0) return luaL_error(L, "out of memory");
      }
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "omit_headers");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) opt_error(L, "omit_headers", "a list of header names");
    for (lua_Integer i = 1, n = (lua_Integer)lua_rawlen(L, -1); i <= n; i++) {
      size_t nl;
      lua_rawgeti(L, -1, i);
      const char *name = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &nl) : NULL;
      if (!name || nl == 0 || strpbrk(name, ":;\r\n ") != NULL)
        luaL_error(L, "http.request: opts.omit_headers[%d] must be a header name", (int)i);
      if (key_line(name, nl, NULL, 0, 1) != 0) return luaL_error(L, "out of memory");
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);

  /* 2. allocate and configure (nothing below raises) */
  if (!(r = req_new(url, url_len))) return luaL_error(L, "out of memory");
  r->body_ref = LUA_NOREF;
  r->op.push = req_push;
  r->op.cancel = req_cancel;
  r->max_body = (size_t)max_body;
  r->stream = stream;
  /* a request libcurl would send with nothing of its own (no socket path, redirect, proxy or
   * connection limit): the native path, HTTP/1.1 or HTTP/2 (engine/h1.c, engine/h2.c) */
  r->want_h2 = http_version == CURL_HTTP_VERSION_2TLS || http_version == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
  if (H.native && !unix_socket && !follow && !H.limited && H.no_proxy_env && !HS.uncacheable) {
    int rc = native_start(L, r, url, url_len, method, body, body_len, body_idx, timeout, connect_timeout, insecure,
                          ca_file, http_version);
    if (rc < 0) {
      req_free(r);
      return luaL_error(L, "out of memory");
    }
    if (rc > 0) {
      lua_settop(L, 1);
      return cs_yield(L, &r->op);
    }
  }
  if (!(e = easy_get()) || !(r->hset = hset_get())) {
    if (e) easy_put(e);
    req_free(r);
    return luaL_error(L, "out of memory");
  }
  r->easy = e;
  /* every per-request option, set on every request (the handle may be reused: easy_get) */
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
  curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, NULL);
  curl_easy_setopt(e, CURLOPT_PREREQDATA, NULL);
  /* HTTP/1.1 only (plain http without HTTP/2 asked for, or 1.1 asked for): any pool */
  r->pool = pool_pick(!(http_version == CURL_HTTP_VERSION_1_1 ||
                        (!r->want_h2 && strncasecmp(url, "https:", 6) != 0)));
  if (http_version == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE && strncasecmp(url, "https:", 6) != 0) {
    char key[1024];
    h2origin *o;
    origin_key(url, unix_socket, key, sizeof key);
    o = origin_get(key);
    if (o && o->live && o->conns > 0) {
      if (!H.pk_reuse) http_version = CURL_HTTP_VERSION_2_0; /* multiplexed on the origin's connection (see h2origin) */
    } else if (o && o->pending > 0) {
      if (!H.pk_reuse) http_version = CURL_HTTP_VERSION_2_0; /* waits for the first request's connection */
      wait_on = o;
    } else if (o) {
      r->origin = o;
      o->pending++;
      o->live = o->established = 0;
      curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
      curl_easy_setopt(e, CURLOPT_PREREQDATA, r);
    }
  }
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, http_version ? http_version : (long)CURL_HTTP_VERSION_NONE);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, r);
  /* HTTP/2: wait for a connection that may multiplex rather than open another one */
  curl_easy_setopt(e, CURLOPT_PIPEWAIT, r->want_h2 ? 1L : 0L);
  /* libcurl 7.88 stalls an HTTP/2 stream when one socket read carries more DATA for it than its
   * receive buffer holds and the stream ends in the part left over (curl issue #10525, fixed
   * after 7.88.1 by PR #10530): the rest is never delivered. curl reads HTTP/2 in 32 KiB
   * pieces, so a 128 KiB buffer never overflows. HTTPS included: ALPN picks HTTP/2 by default. */
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (r->want_h2 || strncasecmp(url, "https:", 6) == 0) ? 128L * 1024
                                                                                               : (long)CURL_MAX_WRITE_SIZE);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(connect_timeout * 1000)); /* 0: curl's default */
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, insecure ? 0L : 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, insecure ? 0L : 2L);
  /* the CA bundle: the one asked for, else libcurl's built-in one (set again: the handle is reused) */
  curl_easy_setopt(e, CURLOPT_CAINFO, ca_file ? ca_file : H.ca_default);
  curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, unix_socket); /* NULL: none */
  /* the method as after curl_easy_reset (a GET, no body, no custom method), then this one's */
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
  curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
  if (strcmp(method, "GET") == 0) curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  else if (strcmp(method, "HEAD") == 0) curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  else curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  if (body) { /* binary-safe: the length is given */
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    lua_pushvalue(L, body_idx);
    r->body_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* keeps the string alive, no copy */
  } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
  }

  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hset->list);
  lua_settop(L, 1);
  r->t_start = uv_hrtime();

  if (wait_on) { /* queued until the origin's first connection speaks HTTP/2 (h2origin) */
    r->waiting = wait_on;
    if (wait_on->wait_tail) wait_on->wait_tail->wnext = r;
    else wait_on->wait_head = r;
    wait_on->wait_tail = r;
  } else if (curl_multi_add_handle(r->pool->multi, e) != CURLM_OK) {
    r->pool->in_flight++; /* req_free counts it out */
    H.in_flight++;
    req_free(r);
    return cs_fail(L, "ECURL", "%s: cannot start the request", url);
  }
  r->pool->in_flight++;
  H.in_flight++;
  H.started++;
  return cs_yield(L, &r->op);
}

static void pools_setopt(CURLMoption opt, long v) {
  for (int i = 0; i < POOLS_MAX; i++)
    if (H.pools[i].multi) curl_multi_setopt(H.pools[i].multi, opt, v);
}

static long opt_long(lua_State *L, const char *k, long min) {
  lua_Integer v = luaL_checkinteger(L, -1);
  if (v < min) luaL_error(L, "http.configure: %s must be >= %d", k, (int)min);
  return (long)v;
}

/* ---- warm connections (http.warm, http.close_idle, http.handshakes) ----------------------- */

/* How each origin's latest native request went (its scheme, host and port): what http.warm uses
 * when it is not told, so the connections it opens are the ones those requests will find. */
#define LASTOPT_MAX 64
static struct lastopt {
  int tls, ipv6, port; /* the origin: scheme, host and port as the URL wrote them */
  size_t host_len;
  char host[256];
  long http_version;
  int insecure;
  char *ca_file;
} LASTOPT[LASTOPT_MAX];
static int nlastopt, lastopt_hit; /* (the one found last: a client calls one origin over and over) */

static int lastopt_is(const struct lastopt *l, const h1_url *u) {
  return l->tls == u->tls && l->port == u->port && l->ipv6 == u->ipv6 && l->host_len == u->host_len &&
         memcmp(l->host, u->host, u->host_len) == 0;
}

/* (compared field by field: formatting a key for every request was ~5% of a request's instructions) */
static struct lastopt *lastopt_find(const h1_url *u) {
  if (lastopt_hit < nlastopt && lastopt_is(&LASTOPT[lastopt_hit], u)) return &LASTOPT[lastopt_hit];
  for (int i = 0; i < nlastopt; i++)
    if (lastopt_is(&LASTOPT[i], u)) return &LASTOPT[lastopt_hit = i];
  return NULL;
}

static void lastopt_note(const h1_url *u, long http_version, int insecure, const char *ca_file) {
  struct lastopt *l = lastopt_find(u);
  if (!l) {
    /* (a process speaks to a handful of origins; a host name is at most 253 bytes) */
    if (nlastopt == LASTOPT_MAX || u->host_len >= sizeof l->host) return;
    l = &LASTOPT[nlastopt++];
    l->tls = u->tls, l->ipv6 = u->ipv6, l->port = u->port;
    l->host_len = u->host_len;
    memcpy(l->host, u->host, u->host_len);
    l->ca_file = NULL;
  }
  l->http_version = http_version;
  l->insecure = insecure;
  if (!(l->ca_file == ca_file || (l->ca_file && ca_file && strcmp(l->ca_file, ca_file) == 0))) {
    free(l->ca_file);
    l->ca_file = ca_file ? strdup(ca_file) : NULL;
  }
}

typedef struct warm warm;
typedef struct {
  h1_call c;
  warm *w;
} wcall;

struct warm {
  cs_op op;
  buf url;                 /* the calls' host points into it */
  h1_url u;
  struct tls_conf *tls;
  int version;
  uint64_t timeout_ms, connect_timeout_ms;
  unsigned long want;      /* calls that should find a ready connection */
  int phase;               /* 0: the first connection; 1: the others */
  int n, live, opened, failed;
  const char *code;        /* the first failure's */
  char msg[300];
  uint64_t t0;
  wcall *calls;
};

static const char *warm_code(int err, int os) {
  switch (err) {
    case H1_ERESOLVE: return "ENOTFOUND";
    case H1_ECONNECT:
      return os == EHOSTUNREACH || os == ENETUNREACH ? "EHOSTUNREACH" : os == EACCES ? "EACCES" : "ECONNREFUSED";
    case H1_ETIMEDOUT: return "ETIMEDOUT";
    case H1_ETLS:
    case H1_ECERT:
    case H1_ECAFILE: return "ETLS";
    case H1_EH2:
    case H1_EH2STREAM: return "EHTTP2";
    case H1_ENOMEM: return "ECURL";
    default: return "ECONNRESET";
  }
}

static void warm_done(h1_call *c, int err, int os_errno) {
  warm *w = ((wcall *)c)->w;
  w->live--;
  if (err == H1_OK) w->opened++;
  else if (!w->failed++) {
    w->code = warm_code(err, os_errno);
    snprintf(w->msg, sizeof w->msg, "%s: %s", w->url.p,
             c->tls_error[0] ? c->tls_error : os_errno ? strerror(os_errno) : "the connection could not be opened");
  }
  if (w->live == 0) cs_op_ready(&w->op);
}

static void warm_free(warm *w) {
  for (int i = 0; i < w->n; i++) h1_cancel(&w->calls[i].c); /* (ended ones: nothing) */
  free(w->calls);
  buf_free(&w->url);
  free(w);
}

static void warm_cancel(cs_op *op) { warm_free((warm *)op); }

/* Start count more connections (fresh calls that send nothing). 0, or -1: out of memory. */
static int warm_start(warm *w, int count) {
  wcall *nc = realloc(w->calls, (size_t)(w->n + count) * sizeof *nc);
  if (!nc) return -1;
  w->calls = nc;
  for (int i = 0; i < count; i++) {
    wcall *x = &w->calls[w->n];
    memset(x, 0, sizeof *x);
    x->w = w;
    x->c.host = w->u.host; /* (split from w->url: it lives as long as the call) */
    x->c.host_len = w->u.host_len;
    x->c.ipv6 = w->u.ipv6;
    x->c.port = w->u.port;
    x->c.tls = w->tls;
    x->c.version = w->version;
    x->c.timeout_ms = w->timeout_ms;
    x->c.connect_timeout_ms = w->connect_timeout_ms;
    x->c.fresh = x->c.no_request = 1;
    x->c.on_done = warm_done;
    if (h1_start(&x->c) != 0) return -1;
    w->n++;
    w->live++;
  }
  return 0;
}

static int warm_push(lua_State *L, cs_op *op) {
  warm *w = (warm *)op;
  unsigned long ready;
  unsigned conns, per;
  h1_call *first = &w->calls[0].c;
  if (w->failed) {
    lua_pushnil(L);
    lua_pushstring(L, w->msg);
    lua_pushstring(L, w->code);
    warm_free(w);
    return 3;
  }
  h1_origin_state(first, &ready, &conns, &per);
  if (w->phase == 0) { /* the first connection told what the origin speaks: the rest at once */
    unsigned long need = w->want > ready ? w->want - ready : 0;
    int more = first->major == 2 ? (int)((need + (per ? per : 1) - 1) / (per ? per : 1)) : (int)need;
    w->phase = 1;
    if (more > 0) {
      if (warm_start(w, more) != 0) {
        warm_free(w);
        return luaL_error(L, "out of memory");
      }
      return cs_yield(L, op);
    }
  }
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, w->opened);
  lua_setfield(L, -2, "opened");
  lua_pushinteger(L, (lua_Integer)ready);
  lua_setfield(L, -2, "ready");
  lua_pushstring(L, first->major == 2 ? "2" : "1.1");
  lua_setfield(L, -2, "http_version");
  if (first->major == 2) {
    lua_pushinteger(L, conns);
    lua_setfield(L, -2, "connections");
    lua_pushinteger(L, per);
    lua_setfield(L, -2, "streams");
  }
  lua_pushnumber(L, (double)(uv_hrtime() - w->t0) / 1e9);
  lua_setfield(L, -2, "seconds");
  warm_free(w);
  return 1;
}

/* http.warm{url=, calls=, http_version=, ca_file=, insecure=, timeout=, connect_timeout=}: opens
 * the connections `calls` requests to the origin would start on at once (HTTP/1.1: one each;
 * HTTP/2: each carrying as many streams as the server allows, up to max_concurrent_streams),
 * each ready: TCP, TLS, and for HTTP/2 the server's SETTINGS in. Connections already idle count.
 * Options not given are those of the origin's latest native request. */
static int http_warm(lua_State *L) {
  const char *url, *version, *ca_file;
  size_t url_len;
  double calls, timeout, connect_timeout;
  int insecure, has_insecure;
  long http_version = 0;
  warm *w;
  struct lastopt *l;
  h1_url u;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  cs_task_current(L);
  url = opt_string(L, "url", &url_len, 1);
  version = opt_string(L, "http_version", NULL, 0);
  ca_file = opt_string(L, "ca_file", NULL, 0);
  calls = opt_number(L, "calls", 1);
  timeout = opt_number(L, "timeout", 60);
  connect_timeout = opt_number(L, "connect_timeout", 0);
  lua_getfield(L, 1, "insecure");
  has_insecure = !lua_isnil(L, -1);
  lua_pop(L, 1);
  insecure = opt_bool(L, "insecure");
  if (!h1_url_split(url, url_len, &u) || !H.native || !H.no_proxy_env || H.limited)
    return cs_fail(L, "EURL", "%s: http.warm opens only the native path's connections (http:// or https://, no proxy, "
                              "no connection limit)", url);
  l = lastopt_find(&u);
  if (version) {
    if (strcmp(version, "1.1") == 0) http_version = CURL_HTTP_VERSION_1_1;
    else if (strcmp(version, "2") == 0) http_version = u.tls ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
    else luaL_error(L, "http.warm: opts.http_version must be '1.1' or '2', got '%s'", version);
  } else if (l)
    http_version = l->http_version;
  if (!has_insecure && l) insecure = l->insecure;
  if (!ca_file) ca_file = l ? l->ca_file : H.ca_file;
  if (!ca_file) ca_file = H.ca_file;
  if (!(w = calloc(1, sizeof *w))) return luaL_error(L, "out of memory");
  if (buf_add(&w->url, url, url_len) != 0 || !h1_url_split(w->url.p, url_len, &w->u) ||
      (w->u.tls && !(w->tls = tls_conf_get(!insecure, ca_file)))) {
    buf_free(&w->url);
    free(w);
    return luaL_error(L, "out of memory");
  }
  w->op.push = warm_push;
  w->op.cancel = warm_cancel;
  w->version = http_version == CURL_HTTP_VERSION_1_1 ? H1_V_1
               : (http_version == CURL_HTTP_VERSION_2TLS || http_version == CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE) ? H1_V_2
                                                                                                                  : H1_V_ANY;
  w->want = calls < 1 ? 1 : (unsigned long)calls;
  w->timeout_ms = (uint64_t)(timeout * 1000);
  w->connect_timeout_ms = (uint64_t)(connect_timeout * 1000);
  w->t0 = uv_hrtime();
  if (warm_start(w, 1) != 0) {
    warm_free(w);
    return luaL_error(L, "out of memory");
  }
  lua_settop(L, 1);
  return cs_yield(L, &w->op);
}

/* http.close_idle(url) -> n: the idle connections to its scheme, host and port closed (the next
 * requests there open new ones: a burst with cold connections). */
static int http_close_idle(lua_State *L) {
  size_t len;
  const char *url = luaL_checklstring(L, 1, &len);
  h1_url u;
  if (!h1_url_split(url, len, &u)) return luaL_error(L, "http.close_idle: not a URL of the native path: %s", url);
  lua_pushinteger(L, (lua_Integer)h1_close_idle(u.host, u.host_len, u.port, u.tls));
  return 1;
}

/* http.handshakes() -> count, seconds: how many of the running task's calls waited for a new
 * connection (TCP, TLS, HTTP/2 settings), and for how long in all. */
static int http_handshakes(lua_State *L) {
  uint64_t n, ns;
  cs_task_handshakes(&n, &ns);
  lua_pushinteger(L, (lua_Integer)n);
  lua_pushnumber(L, (double)ns / 1e9);
  return 2;
}

static int http_configure(lua_State *L) {
  long host = -1, total = -1;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_getfield(L, 1, "pools");
  if (!lua_isnil(L, -1)) {
    long n = opt_long(L, "pools", 1);
    if (n > POOLS_MAX) luaL_error(L, "http.configure: pools must be <= %d", POOLS_MAX);
    H.pools_wanted = (int)n;
  }
  lua_getfield(L, 1, "native");
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1)) luaL_error(L, "http.configure: native must be a boolean");
    H.native = lua_toboolean(L, -1);
  }
  lua_getfield(L, 1, "ca_file");
  if (!lua_isnil(L, -1)) {
    char *v = NULL;
    if (lua_isstring(L, -1) && lua_type(L, -1) == LUA_TSTRING) {
      if (!(v = strdup(lua_tostring(L, -1)))) return luaL_error(L, "out of memory");
    } else if (!(lua_isboolean(L, -1) && !lua_toboolean(L, -1)))
      luaL_error(L, "http.configure: ca_file must be a path or false (the system store)");
    free(H.ca_file);
    H.ca_file = v;
  }
  lua_getfield(L, 1, "max_connections");
  if (!lua_isnil(L, -1)) {
    pools_setopt(CURLMOPT_MAXCONNECTS, H.maxconnects = opt_long(L, "max_connections", 0));
    h1_set_idle_max(H.maxconnects); /* the native path's idle connections per host */
  }
  lua_getfield(L, 1, "max_host_connections");
  if (!lua_isnil(L, -1)) pools_setopt(CURLMOPT_MAX_HOST_CONNECTIONS, host = opt_long(L, "max_host_connections", 0));
  lua_getfield(L, 1, "max_total_connections");
  if (!lua_isnil(L, -1)) pools_setopt(CURLMOPT_MAX_TOTAL_CONNECTIONS, total = opt_long(L, "max_total_connections", 0));
  lua_getfield(L, 1, "max_concurrent_streams");
  if (!lua_isnil(L, -1)) {
    pools_setopt(CURLMOPT_MAX_CONCURRENT_STREAMS, H.max_streams = opt_long(L, "max_concurrent_streams", 1));
    h1_set_max_streams(H.max_streams); /* the native path's streams per HTTP/2 connection */
  }
  if (host >= 0 || total >= 0) H.limited = host > 0 || total > 0;
  H.npools = H.limited ? 1 : H.pools_wanted; /* a connection limit stays exact: one pool */
  return 0;
}

static int http_stats(lua_State *L) {
  lua_createtable(L, 0, 6);
  cs_set_integer(L, "pools", H.npools);
  cs_set_integer(L, "max_concurrent_streams", (lua_Integer)H.max_streams);
  cs_set_integer(L, "in_flight", H.in_flight);
  cs_set_integer(L, "started", H.started);
  cs_set_integer(L, "completed", H.completed);
  {
    h1_stats st = h1_get_stats();
    lua_createtable(L, 0, 6);
    lua_pushboolean(L, H.native);
    lua_setfield(L, -2, "enabled");
    cs_set_integer(L, "requests", (lua_Integer)st.calls);
    cs_set_integer(L, "connects", (lua_Integer)st.connects);
    cs_set_integer(L, "reused", (lua_Integer)st.reused);
    cs_set_integer(L, "retried", (lua_Integer)st.retried);
    cs_set_integer(L, "open", (lua_Integer)st.open);
    cs_set_integer(L, "idle", (lua_Integer)st.idle);
    cs_set_integer(L, "tls_handshakes", (lua_Integer)st.tls_handshakes);
    cs_set_integer(L, "tls_resumed", (lua_Integer)st.tls_resumed);
    cs_set_integer(L, "h2_connections", (lua_Integer)st.h2_connections);
    cs_set_integer(L, "h2_streams", (lua_Integer)st.h2_streams);
    cs_set_integer(L, "unit_reads", (lua_Integer)st.unit_reads);
    lua_setfield(L, -2, "native");
  }
  return 1;
}

static void http_shutdown(void) {
  if (!H.multi) return;
  h1_shutdown();
  tls_shutdown();
  for (int i = 0; i < POOLS_MAX; i++) {
    pool *pl = &H.pools[i];
    if (!pl->multi) continue;
    curl_multi_cleanup(pl->multi); /* closes cached connections (close_socket drops their polls) */
    pl->multi = NULL;
    uv_close((uv_handle_t *)&pl->timer, NULL);
  }
  H.multi = NULL;
  while (H.neasy > 0) curl_easy_cleanup(H.easy_pool[--H.neasy]);
  while (H.origins) {
    h2origin *o = H.origins;
    H.origins = o->next;
    free(o->key);
    free(o);
  }
  for (int i = 0; i < HSET_BUCKETS; i++) /* transfers are gone: every list is unused */
    while (HS.b[i]) {
      hset *h = HS.b[i];
      HS.b[i] = h->next;
      curl_slist_free_all(h->list);
      free(h);
    }
  HS.n = 0;
  buf_free(&HS.key);
  while (RF.head) {
    req *r = RF.head;
    RF.head = r->free_next;
    req_destroy(r);
  }
  RF.n = 0;
  free(H.socks);
  H.socks = NULL;
  H.nsocks = 0;
  free(H.ca_default);
  free(H.ca_path);
  free(H.ca_file);
  for (int i = 0; i < nlastopt; i++) free(LASTOPT[i].ca_file);
  nlastopt = 0;
  H.ca_default = H.ca_path = H.ca_file = NULL;
  curl_global_cleanup();
}

int luaopen_cseng_http(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"request", http_request}, {"configure", http_configure}, {"stats", http_stats}, {"warm", http_warm},
      {"close_idle", http_close_idle}, {"handshakes", http_handshakes}, {NULL, NULL}};
  if (!H.multi) {
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    /* one line, and exit: this runs from main() (luaL_requiref of every module) before any Lua
     * or task does, so refusing to start is all there is to do (an error here would be an
     * unprotected panic), not the exit() inside a callback that STYLE.md warns against */
    if (v->version_num < CSENG_CURL_MIN) {
      fprintf(stderr, "cseng: libcurl %s is older than the %d.%d.%d this build needs (built with %s); run make deps\n",
              v->version, CSENG_CURL_MIN >> 16, (CSENG_CURL_MIN >> 8) & 0xff, CSENG_CURL_MIN & 0xff,
              LIBCURL_VERSION);
      exit(1);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* the variables curl consults (lower case first; HTTP_PROXY upper case is ignored by curl,
     * checked anyway); one set keeps curl's own lookup per transfer */
    H.pk_reuse = v->version_num >= 0x080000;
    H.no_proxy_env = 1;
    for (const char *const *n = (const char *const[]){"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY",
                                                       "all_proxy", "ALL_PROXY", NULL};
         *n; n++)
      if (getenv(*n)) H.no_proxy_env = 0;
    {
      const char *e = getenv("CSENG_HTTP"); /* "curl": every request through libcurl */
      H.native = !(e && strcmp(e, "curl") == 0);
    }
    h1_init(cs_loop());
    h1_set_flush_notify(cs_sched_flush_wanted); /* a pass's HTTP/2 requests on a connection go in one write */
    cs_sched_set_flush(h1_flush);
    H.maxconnects = 1024;
    H.max_streams = 100; /* libcurl's default */
    H.npools = H.pools_wanted = POOLS_DEFAULT;
    if (pool_open(&H.pools[0]) != 0) {
      fprintf(stderr, "cseng: libcurl: cannot create a multi handle\n");
      exit(1);
    }
    H.multi = H.pools[0].multi;
    { /* libcurl's built-in trust store: requests without a ca_file get it back (easy handles are
         reused), and the native path loads the same one */
      CURL *probe = curl_easy_init();
      char *ca = NULL, *cap = NULL;
      if (probe) {
        curl_easy_getinfo(probe, CURLINFO_CAINFO, &ca);
        curl_easy_getinfo(probe, CURLINFO_CAPATH, &cap);
        H.ca_default = ca ? strdup(ca) : NULL;
        H.ca_path = cap ? strdup(cap) : NULL;
        curl_easy_cleanup(probe);
      }
    }
    tls_set_defaults(H.ca_default, H.ca_path); /* the native path trusts what libcurl trusts */
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    H.L = lua_tothread(L, -1);
    lua_pop(L, 1);
    cs_at_shutdown(http_shutdown);
  }
  luaL_newlib(L, funcs);
  return 1;
}
