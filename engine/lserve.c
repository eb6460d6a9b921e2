/*
 * lserve.c: an HTTP/1.1 server on the loop (uv_tcp + Debian's http-parser).
 * Module cseng.serve.
 *   serve.listen{host=, port=, handler=, backlog=, max_body=, max_header=,
 *                max_connections=, idle_timeout=} -> server
 *   server:port(), :url(), :accept(), :stats(), :close()
 *   req.method/path/query/headers/body/remote/version, req.received (clock.now()
 *   nanoseconds when the request was complete: a handler that must time the
 *   request from its arrival, not from when its task first ran); req:respond(status, headers, body),
 *   req:start(status, headers), req:write(chunk), req:finish(), req:abort(), req:state()
 *
 * Loop callbacks only parse into C structs: a complete request is queued on
 * its server and wakes a task waiting in server:accept(). With a handler,
 * listen starts the dispatcher (lua/cseng/serve_dispatch.lua, loaded with
 * require on first use): a pool of worker tasks that accept and run the
 * handler, so handlers may yield.
 *
 * One request per connection is in flight: the parser pauses at the end of a
 * message until the response is finished, which keeps pipelined requests in
 * order; reading goes on meanwhile (no epoll change per request) and stops
 * only when LEFT_MAX pipelined bytes wait, which gives backpressure. Reads land in one static
 * buffer; only bytes that must outlive the read (url, headers, body, a paused
 * parser's leftovers) are copied. Responses go out with uv_try_write straight
 * from the Lua strings; only what the socket does not take at once is copied.
 *
 * Limits (a status endpoint must not be a way to stop a run): at most
 * max_connections open at once (default 128, and at most a quarter of the
 * descriptor limit; one more is answered 503 and closed at once), a
 * connection with no request in progress (idle, or one whose request line and
 * headers are still arriving) is closed after idle_timeout seconds (default
 * 60), and a request line plus headers over max_header bytes (default 64 KiB)
 * is answered 431; bodies are capped by max_body.
 */
#include "core.h"
#include "aux.h"

#include <ctype.h>
#include <http_parser.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define SERVER_MT "cseng.serve.server"
#define REQUEST_MT "cseng.serve.request"
#define DEFAULT_MAX_BODY ((size_t)64 << 20)
#define DEFAULT_MAX_HEADER ((size_t)64 << 10)
#define DEFAULT_MAX_CONNECTIONS 128
#define DEFAULT_IDLE_TIMEOUT 60.0

typedef struct server server;
typedef struct conn conn;
typedef struct request request;
typedef struct acceptop acceptop;

typedef struct {
  size_t no, nl, vo, vl; /* name and value: offsets and lengths in request.hdr */
} hent;

enum { R_PARSING, R_QUEUED, R_ACCEPTED, R_STREAMING, R_DONE };

struct request {
  conn *c;        /* NULL once the connection is gone */
  request *qnext; /* server queue */
  int state, counted, keep_alive, chunked_out, head;
  int method;
  unsigned short major, minor;
  cs_buf url, hdr, body;
  hent *h;
  size_t nh, hcap;
  int last_value;
  uint64_t received; /* uv_hrtime() when the message was complete: req.received */
};

struct conn {
  uv_tcp_t tcp;
  uv_timer_t idle; /* closes a connection with no request in progress */
  int handles;     /* tcp and idle: freed when both are closed */
  uv_shutdown_t shut;
  server *srv;
  conn *prev, *next;
  http_parser parser;
  request *parsing, *active;
  char *left; /* bytes read while the parser was paused */
  size_t leftlen;
  int closing, shutting, discard, read_eof, too_large, expect_continue, reading;
  char remote[64];
};

struct server {
  uv_tcp_t tcp;
  int closed, refs;
  conn *conns;
  request *qhead, *qtail;
  acceptop *waiters;
  size_t max_body, max_header;
  lua_Integer max_connections;
  uint64_t idle_ms;
  lua_Integer requests, in_flight, max_in_flight, connections, refused, timed_out;
};

struct acceptop {
  cs_op op;
  server *s;
  acceptop *prev, *next;
};

static char rbuf[65536]; /* every read lands here; see the header comment */
static http_parser_settings settings;

/* ---- small helpers -------------------------------------------------------- */

static void request_free(request *r) {
  cs_buf_free(&r->url);
  cs_buf_free(&r->hdr);
  cs_buf_free(&r->body);
  free(r->h);
  free(r);
}

static void server_unref(server *s) {
  if (--s->refs == 0) free(s);
}

/* The request no longer counts as in flight (response done or connection gone). */
static void request_end(request *r) {
  if (r->counted && r->c) {
    r->counted = 0;
    r->c->srv->in_flight--;
  }
}

/* ---- connections: closing and writing ------------------------------------- */

static void conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  server *s = c->srv;
  if (--c->handles > 0) return;
  free(c->left);
  free(c);
  server_unref(s);
}

/* Abort: close now, detach every request. */
static void conn_close(conn *c) {
  server *s = c->srv;
  if (c->closing) return;
  c->closing = 1;
  if (c->parsing) {
    request_free(c->parsing);
    c->parsing = NULL;
  }
  if (c->active) {
    request *r = c->active;
    request_end(r);
    r->c = NULL; /* queued ones are dropped by accept; accepted ones belong to Lua */
    c->active = NULL;
  }
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  s->connections--;
  uv_close((uv_handle_t *)&c->idle, conn_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void conn_idle_fired(uv_timer_t *t) {
  conn *c = t->data;
  if (c->closing || c->active) return; /* a handler at work is not idle */
  c->srv->timed_out++;
  conn_close(c);
}

/* (Re)start the idle clock: no request in progress from now on. */
static void conn_idle_start(conn *c) {
  if (c->closing || c->srv->idle_ms == 0) return;
  uv_timer_start(&c->idle, conn_idle_fired, c->srv->idle_ms, 0);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void conn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b);

#define LEFT_MAX ((size_t)256 << 10) /* pipelined bytes held before reading pauses */

static int conn_read_on(conn *c) {
  if (c->reading) return 0;
  if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) != 0) return -1;
  c->reading = 1;
  return 0;
}

static void conn_read_off(conn *c) {
  if (!c->reading) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
}

static void conn_shut_done(uv_shutdown_t *req, int status) {
  conn *c = req->data;
  (void)status;
  if (!c->discard) conn_close(c);
}

/* Close after what is queued has been written; with discard, keep reading
 * (and dropping) until the client closes, so it sees our answer, not a reset. */
static void conn_finish(conn *c, int discard) {
  if (c->closing || c->shutting) return;
  c->shutting = 1;
  c->discard = discard;
  c->shut.data = c;
  if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, conn_shut_done) != 0) {
    conn_close(c);
    return;
  }
  if (discard) {
    conn_idle_start(c); /* a client that never closes is dropped after idle_timeout */
    conn_read_on(c);
  } else {
    conn_read_off(c);
  }
}

typedef struct {
  uv_write_t w;
  conn *c;
  char data[];
} sendreq;

static void send_done(uv_write_t *w, int status) {
  sendreq *s = (sendreq *)w;
  if (status < 0 && status != UV_ECANCELED) conn_close(s->c);
  free(s);
}

static size_t bufs_total(const uv_buf_t *b, int n) {
  size_t t = 0;
  int i;
  for (i = 0; i < n; i++) t += b[i].len;
  return t;
}

/* Write bufs now if the socket takes them; copy and queue what it does not.
 * Returns 0, or a libuv error after which the connection is closed. */
static int conn_send(conn *c, const uv_buf_t *b, int n) {
  size_t total = bufs_total(b, n), done, off = 0;
  sendreq *s;
  uv_buf_t one;
  int w, i;
  if (c->closing || c->shutting) return UV_EPIPE;
  w = uv_try_write((uv_stream_t *)&c->tcp, b, (unsigned)n);
  if (w == UV_EAGAIN) w = 0;
  if (w < 0) {
    conn_close(c);
    return w;
  }
  done = (size_t)w;
  if (done == total) return 0;
  s = malloc(sizeof *s + (total - done));
  if (!s) {
    conn_close(c);
    return UV_ENOMEM;
  }
  s->c = c;
  for (i = 0; i < n; i++) {
    size_t skip = done > b[i].len ? b[i].len : done;
    done -= skip;
    memcpy(s->data + off, b[i].base + skip, b[i].len - skip);
    off += b[i].len - skip;
  }
  one = uv_buf_init(s->data, (unsigned)off);
  w = uv_write(&s->w, (uv_stream_t *)&c->tcp, &one, 1, send_done);
  if (w != 0) {
    free(s);
    conn_close(c);
    return w;
  }
  return 0;
}

static int conn_send_str(conn *c, const char *str) {
  uv_buf_t b = uv_buf_init((char *)str, (unsigned)strlen(str));
  return conn_send(c, &b, 1);
}

/* ---- parsing ---------------------------------------------------------------- */

static void server_wake(server *s) {
  acceptop *a = s->waiters;
  if (!a) return;
  s->waiters = a->next;
  if (a->next) a->next->prev = NULL;
  a->prev = a->next = NULL;
  cs_op_ready(&a->op);
}

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  request *r;
  if (c->closing) return -1;
  r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->c = c;
  c->parsing = r;
  c->expect_continue = 0;
  return 0;
}

/* The request line and headers stay under max_header (else 431). */
static int head_fits(conn *c, size_t n) {
  request *r = c->parsing;
  if (r && r->url.len + r->hdr.len + n > c->srv->max_header) {
    c->too_large = 2;
    return 0;
  }
  return 1;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  if (!head_fits(c, n)) return -1;
  return c->parsing && cs_buf_add(&c->parsing->url, at, n) ? 0 : -1;
}

static int header_piece(request *r, const char *at, size_t n, int value) {
  hent *e;
  if (!r) return -1;                             /* the connection closed under the parser */
  if (!value && (r->last_value || r->nh == 0)) { /* a new field */
    if (r->nh == r->hcap) {
      size_t cap = r->hcap ? r->hcap * 2 : 16;
      hent *nh = realloc(r->h, cap * sizeof *nh);
      if (!nh) return -1;
      r->h = nh;
      r->hcap = cap;
    }
    e = &r->h[r->nh++];
    memset(e, 0, sizeof *e);
    e->no = r->hdr.len;
  }
  e = &r->h[r->nh - 1];
  if (value && !r->last_value) e->vo = r->hdr.len;
  r->last_value = value;
  if (!cs_buf_add(&r->hdr, at, n)) return -1;
  if (value) e->vl += n;
  else e->nl += n;
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  if (!head_fits(p->data, n)) return -1;
  return header_piece(((conn *)p->data)->parsing, at, n, 0);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  if (!head_fits(p->data, n)) return -1;
  return header_piece(((conn *)p->data)->parsing, at, n, 1);
}

static int header_is(request *r, hent *e, const char *name, const char *value) {
  return e->nl == strlen(name) && strncasecmp(r->hdr.p + e->no, name, e->nl) == 0 &&
         (!value || (e->vl == strlen(value) && strncasecmp(r->hdr.p + e->vo, value, e->vl) == 0));
}

static int on_headers_complete(http_parser *p) {
  conn *c = p->data;
  request *r = c->parsing;
  size_t i;
  if (!r) return -1;
  r->method = p->method;
  r->major = p->http_major;
  r->minor = p->http_minor;
  r->keep_alive = http_should_keep_alive(p) && !p->upgrade;
  r->head = p->method == HTTP_HEAD;
  for (i = 0; i < r->nh; i++)
    if (header_is(r, &r->h[i], "expect", "100-continue")) c->expect_continue = 1;
  if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->srv->max_body) {
    c->too_large = 1;
    return -1;
  }
  if ((p->flags & F_CONTENTLENGTH) && p->content_length > 0) {
    r->body.p = malloc((size_t)p->content_length);
    if (!r->body.p) return -1;
    r->body.cap = (size_t)p->content_length;
  }
  if (c->expect_continue && r->major == 1 && r->minor >= 1) conn_send_str(c, "HTTP/1.1 100 Continue\r\n\r\n");
  return c->closing ? -1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
  conn *c = p->data;
  request *r = c->parsing;
  if (!r) return -1;
  if (r->body.len + n > c->srv->max_body) {
    c->too_large = 1;
    return -1;
  }
  return cs_buf_add(&r->body, at, n) ? 0 : -1;
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  server *s = c->srv;
  request *r = c->parsing;
  if (!r) return -1;
  c->parsing = NULL;
  c->active = r;
  r->received = uv_hrtime();
  uv_timer_stop(&c->idle);
  r->state = R_QUEUED;
  r->counted = 1;
  s->requests++;
  if (++s->in_flight > s->max_in_flight) s->max_in_flight = s->in_flight;
  if (s->qtail) s->qtail->qnext = r;
  else s->qhead = r;
  s->qtail = r;
  server_wake(s);
  http_parser_pause(p, 1); /* one request at a time: resume once it is answered */
  return 0;
}

/* Parse data (rbuf, or the connection's own leftovers). */
static void conn_feed(conn *c, const char *data, size_t n) {
  size_t done = http_parser_execute(&c->parser, &settings, data, n);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
  if (c->closing) return;
  if (e == HPE_PAUSED) {
    /* One request at a time: what arrives meanwhile (a pipelined request) waits in c->left.
     * Reading stays on (no epoll change per request) until LEFT_MAX bytes wait. */
    size_t rest = n - done;
    if (data == c->left) {
      if (rest) memmove(c->left, data + done, rest);
      c->leftlen = rest;
    } else if (rest) {
      char *l = realloc(c->left, c->leftlen + rest);
      if (!l) {
        conn_close(c);
        return;
      }
      memcpy(l + c->leftlen, data + done, rest);
      c->left = l;
      c->leftlen += rest;
    }
    if (c->leftlen >= LEFT_MAX) conn_read_off(c);
    return;
  }
  if (data == c->left) c->leftlen = 0;
  if (e == HPE_OK && done == n) return;
  if (c->parsing) {
    request_free(c->parsing);
    c->parsing = NULL;
  }
  if (c->too_large == 2)
    conn_send_str(c,
                  "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
                  "Content-Length: 26\r\nConnection: close\r\n\r\nrequest headers too large\n");
  else if (c->too_large)
    conn_send_str(c,
                  "HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain\r\n"
                  "Content-Length: 25\r\nConnection: close\r\n\r\nrequest body is too large");
  else
    conn_send_str(c,
                  "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
                  "Content-Length: 19\r\nConnection: close\r\n\r\nmalformed request\r\n");
  conn_finish(c, 1);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)h;
  (void)suggested;
  *b = uv_buf_init(rbuf, sizeof rbuf);
}

static void conn_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b) {
  conn *c = st->data;
  if (n > 0) {
    if (c->discard) return;
    conn_feed(c, b->base, (size_t)n);
    return;
  }
  if (n == 0) return;
  if (n == UV_EOF && !c->discard) {
    c->read_eof = 1;
    conn_read_off(c);
    if (c->active) return; /* a half-closed client still gets its answer */
  }
  conn_close(c);
}

/* The response to the active request is complete: next request, or close. */
static void conn_next(conn *c, request *r) {
  int keep = r->keep_alive && !r->c->read_eof;
  request_end(r);
  r->state = R_DONE;
  r->c = NULL;
  c->active = NULL;
  if (c->closing) return;
  if (!keep) {
    conn_finish(c, 0);
    return;
  }
  http_parser_pause(&c->parser, 0);
  conn_idle_start(c);
  if (c->leftlen > 0) {
    conn_feed(c, c->left, c->leftlen);
    if (c->closing || c->active || c->shutting) return;
  }
  if (conn_read_on(c) != 0) conn_close(c);
}

static void on_connection(uv_stream_t *ls, int status) {
  server *s = ls->data;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  conn *c;
  if (status < 0 || s->closed) return;
  c = calloc(1, sizeof *c);
  if (!c) return;
  uv_tcp_init(cs_loop(), &c->tcp);
  c->tcp.data = c;
  c->handles = 1;
  c->srv = s;
  s->refs++;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0 || s->connections >= s->max_connections) {
    if (!c->closing && s->connections >= s->max_connections) { /* over the cap: say so, close now */
      static char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                           "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n";
      uv_buf_t b = uv_buf_init(busy, sizeof busy - 1);
      uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
      s->refused++;
    }
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    return;
  }
  uv_timer_init(cs_loop(), &c->idle);
  c->idle.data = c;
  c->handles = 2;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  s->connections++;
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      uv_ip6_name(a, ip, sizeof ip);
      snprintf(c->remote, sizeof c->remote, "[%s]:%d", ip, ntohs(a->sin6_port));
    } else {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      uv_ip4_name(a, ip, sizeof ip);
      snprintf(c->remote, sizeof c->remote, "%s:%d", ip, ntohs(a->sin_port));
    }
  }
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  conn_idle_start(c);
  if (conn_read_on(c) != 0) conn_close(c);
}

/* ---- server --------------------------------------------------------------- */

static void server_listen_closed(uv_handle_t *h) { server_unref(h->data); }

/* Drop a queued request whose connection is gone. */
static request *server_pop(server *s) {
  request *r;
  while ((r = s->qhead) != NULL) {
    s->qhead = r->qnext;
    if (!s->qhead) s->qtail = NULL;
    r->qnext = NULL;
    if (r->c) return r;
    request_free(r);
  }
  return NULL;
}

/* The one close: stop listening, drop connections and queued requests, and
 * wake every accept (they return nil). In-flight handlers see EPIPE. */
static void server_close(server *s) {
  request *r;
  if (s->closed) return;
  s->closed = 1;
  uv_close((uv_handle_t *)&s->tcp, server_listen_closed);
  while (s->conns) conn_close(s->conns);
  while ((r = s->qhead) != NULL) {
    s->qhead = r->qnext;
    if (r->c == NULL && r->state == R_QUEUED) request_free(r);
  }
  s->qtail = NULL;
  while (s->waiters) server_wake(s);
}

static server *check_server(lua_State *L) { return *(server **)luaL_checkudata(L, 1, SERVER_MT); }

static server *check_open_server(lua_State *L) {
  server *s = check_server(L);
  if (s->closed) luaL_error(L, "attempt to use a closed server");
  return s;
}

static int srv_close(lua_State *L) {
  server_close(check_server(L));
  return 0;
}

static int srv_gc(lua_State *L) {
  server **box = luaL_checkudata(L, 1, SERVER_MT);
  if (*box) {
    server_close(*box);
    server_unref(*box);
    *box = NULL;
  }
  return 0;
}

static int sock_port(server *s) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len) != 0) return 0;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

/** srv:port() -> the bound port */
static int srv_port(lua_State *L) {
  lua_pushinteger(L, sock_port(check_open_server(L)));
  return 1;
}

/** srv:url() -> "http://host:port" */
static int srv_url(lua_State *L) {
  server *s = check_open_server(L);
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char ip[INET6_ADDRSTRLEN] = "127.0.0.1";
  uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len);
  if (ss.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof ip);
    lua_pushfstring(L, "http://[%s]:%d", ip, sock_port(s));
  } else {
    uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof ip);
    if (strcmp(ip, "0.0.0.0") == 0) strcpy(ip, "127.0.0.1");
    lua_pushfstring(L, "http://%s:%d", ip, sock_port(s));
  }
  return 1;
}

/** srv:stats() -> {requests, in_flight, max_in_flight, connections, refused, timed_out} */
static int srv_stats(lua_State *L) {
  server *s = check_server(L);
  lua_createtable(L, 0, 6);
  cs_set_integer(L, "refused", s->refused);
  cs_set_integer(L, "timed_out", s->timed_out);
  cs_set_integer(L, "requests", s->requests);
  cs_set_integer(L, "in_flight", s->in_flight);
  cs_set_integer(L, "max_in_flight", s->max_in_flight);
  cs_set_integer(L, "connections", s->connections);
  return 1;
}

/* ---- requests as Lua objects --------------------------------------------------- */

static void push_request(lua_State *L, request *r) {
  request **box;
  size_t i;
  const char *url = r->url.p ? r->url.p : "", *q;
  box = lua_newuserdatauv(L, sizeof *box, 1);
  *box = r;
  r->state = R_ACCEPTED;
  luaL_setmetatable(L, REQUEST_MT);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, http_method_str(r->method));
  lua_setfield(L, -2, "method");
  q = memchr(url, '?', r->url.len);
  lua_pushlstring(L, url, q ? (size_t)(q - url) : r->url.len);
  lua_setfield(L, -2, "path");
  if (q) lua_pushlstring(L, q + 1, r->url.len - (size_t)(q + 1 - url));
  else lua_pushliteral(L, "");
  lua_setfield(L, -2, "query");
  lua_createtable(L, 0, (int)r->nh);
  for (i = 0; i < r->nh; i++) {
    hent *e = &r->h[i];
    luaL_Buffer b;
    size_t k;
    char *p = luaL_buffinitsize(L, &b, e->nl);
    for (k = 0; k < e->nl; k++) p[k] = (char)tolower((unsigned char)r->hdr.p[e->no + k]);
    luaL_pushresultsize(&b, e->nl);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, -3) == LUA_TSTRING) { /* a repeated field: join with ", " */
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, r->hdr.p + e->vo, e->vl);
      lua_concat(L, 3);
    } else {
      lua_pop(L, 1);
      lua_pushlstring(L, r->hdr.p + e->vo, e->vl);
    }
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "headers");
  lua_pushlstring(L, r->body.p ? r->body.p : "", r->body.len);
  lua_setfield(L, -2, "body");
  lua_pushstring(L, r->c ? r->c->remote : "");
  lua_setfield(L, -2, "remote");
  lua_pushfstring(L, "%d.%d", (int)r->major, (int)r->minor);
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, (lua_Integer)r->received);
  lua_setfield(L, -2, "received");
  lua_setiuservalue(L, -2, 1);
  /* what Lua now holds need not stay in C */
  cs_buf_free(&r->body);
  cs_buf_free(&r->hdr);
  cs_buf_free(&r->url);
  free(r->h);
  r->h = NULL;
  r->nh = r->hcap = 0;
}

static int accept_push(lua_State *L, cs_op *op) {
  acceptop *a = (acceptop *)op;
  server *s = a->s;
  request *r;
  if (s->closed) {
    free(a);
    return cs_fail(L, "ECLOSED", "server closed");
  }
  r = server_pop(s);
  if (!r) { /* its connection went away meanwhile: wait again */
    a->next = s->waiters;
    if (s->waiters) s->waiters->prev = a;
    s->waiters = a;
    return cs_yield(L, op);
  }
  free(a);
  push_request(L, r);
  return 1;
}

static void accept_cancel(cs_op *op) {
  acceptop *a = (acceptop *)op;
  server *s = a->s;
  if (a->prev) a->prev->next = a->next;
  else if (s->waiters == a) s->waiters = a->next;
  if (a->next) a->next->prev = a->prev;
  free(a);
}

/** srv:accept() -> req | nil, msg, "ECLOSED" (yields until a request arrives) */
static int srv_accept(lua_State *L) {
  server *s = check_server(L);
  request *r;
  acceptop *a;
  cs_task_current(L);
  if (s->closed) return cs_fail(L, "ECLOSED", "server closed");
  r = server_pop(s);
  if (r) {
    push_request(L, r);
    return 1;
  }
  a = calloc(1, sizeof *a);
  if (!a) return luaL_error(L, "out of memory");
  a->s = s;
  a->next = s->waiters;
  if (s->waiters) s->waiters->prev = a;
  s->waiters = a;
  a->op.push = accept_push;
  a->op.cancel = accept_cancel;
  return cs_yield(L, &a->op);
}

static request *check_request(lua_State *L) {
  request *r = *(request **)luaL_checkudata(L, 1, REQUEST_MT);
  if (!r) luaL_error(L, "attempt to use a released request");
  return r;
}

/* __index: methods first, then the request's fields. */
static int req_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  lua_getiuservalue(L, 1, 1);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

static int req_newindex(lua_State *L) {
  lua_getiuservalue(L, 1, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  lua_rawset(L, -3);
  return 0;
}

static int req_pairs(lua_State *L) {
  lua_getglobal(L, "next");
  lua_getiuservalue(L, 1, 1);
  lua_pushnil(L);
  return 3;
}

static int req_gc(lua_State *L) {
  request **box = luaL_checkudata(L, 1, REQUEST_MT);
  request *r = *box;
  if (!r) return 0;
  *box = NULL;
  if (r->c) {
    conn *c = r->c;
    if (r->state == R_STREAMING || r->state == R_ACCEPTED) conn_close(c); /* never answered */
  }
  request_free(r);
  return 0;
}

static int valid_token(const char *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0') return 0;
  return 1;
}

/* The head of the response being built. Built in C, not as Lua strings joined in a table (a
 * string, a hash and an allocation per line, about a tenth of the fake provider's CPU per
 * request): conn_send writes it at once or copies what the socket does not take, so one buffer
 * serves every response. */
static cs_buf head;

static void head_add(lua_State *L, const char *p, size_t n) {
  if (!cs_buf_add(&head, p, n)) luaL_error(L, "out of memory");
}

#define HEAD_LIT(L, s) head_add(L, s, sizeof s - 1)

/* Appends "Name: value\r\n" lines from the table at idx to the head;
 * notes which framing headers the handler set itself. */
static void add_headers(lua_State *L, int idx, int *has_len, int *has_conn_close) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    size_t nl, vl;
    const char *name, *v;
    int many = lua_istable(L, -1), i, count = many ? (int)luaL_len(L, -1) : 1;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "header names must be strings");
    name = lua_tolstring(L, -2, &nl);
    if (nl == 0 || !valid_token(name, nl) || memchr(name, ':', nl) || memchr(name, ' ', nl))
      luaL_error(L, "invalid header name '%s'", name);
    for (i = 1; i <= count; i++) {
      if (many) lua_rawgeti(L, -1, i);
      else lua_pushvalue(L, -1);
      if (!lua_isstring(L, -1)) luaL_error(L, "header '%s' must be a string or a list of strings", name);
      v = lua_tolstring(L, -1, &vl);
      if (!valid_token(v, vl)) luaL_error(L, "header '%s' contains a line break", name);
      if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0) *has_len = 1;
      if (strcasecmp(name, "connection") == 0 && vl == 5 && strncasecmp(v, "close", 5) == 0)
        *has_conn_close = 1;
      head_add(L, name, nl);
      head_add(L, ": ", 2);
      head_add(L, v, vl);
      head_add(L, "\r\n", 2);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

static const char *reason(int status) {
  const char *s = http_status_str((enum http_status)status);
  return s && s[0] != '<' ? s : "Unknown";
}

static int check_status(lua_State *L, int idx) {
  lua_Integer st = luaL_checkinteger(L, idx);
  luaL_argcheck(L, st >= 200 && st <= 999, idx, "status must be 200..999");
  return (int)st;
}

/* The status line and headers, into head. */
static void build_head(lua_State *L, request *r, int status, int hidx, int chunked, lua_Integer len) {
  char line[64];
  const char *why = reason(status);
  int has_len = 0, close = 0;
  size_t n;
  head.len = 0;
  HEAD_LIT(L, "HTTP/1.1 ");
  n = cs_utoa(line, (uint64_t)status); /* 200..999 (check_status) */
  line[n++] = ' ';
  head_add(L, line, n);
  head_add(L, why, strlen(why));
  HEAD_LIT(L, "\r\n");
  add_headers(L, hidx, &has_len, &close);
  if (close) r->keep_alive = 0;
  if (chunked && r->minor == 0) r->keep_alive = 0; /* HTTP/1.0: the body ends with the connection */
  if (chunked && r->minor >= 1 && !has_len) {
    HEAD_LIT(L, "Transfer-Encoding: chunked\r\n");
    r->chunked_out = 1;
  } else if (!chunked && !has_len && status != 204 && status != 304) {
    HEAD_LIT(L, "Content-Length: ");
    n = cs_utoa(line, (uint64_t)(len < 0 ? 0 : len));
    line[n++] = '\r';
    line[n++] = '\n';
    head_add(L, line, n);
  }
  if (!r->keep_alive && !close) HEAD_LIT(L, "Connection: close\r\n\r\n");
  else if (r->keep_alive && r->minor == 0) HEAD_LIT(L, "Connection: keep-alive\r\n\r\n");
  else HEAD_LIT(L, "\r\n");
}

static int closed_fail(lua_State *L) { return cs_fail(L, "EPIPE", "the client connection is closed"); }

/** req:respond(status, headers, body) -> true | nil, msg, "EPIPE" */
static int req_respond(lua_State *L) {
  request *r = check_request(L);
  int status = check_status(L, 2), rc;
  size_t blen = 0;
  const char *body = luaL_optlstring(L, 4, "", &blen);
  uv_buf_t bufs[2];
  conn *c;
  if (r->state != R_ACCEPTED) return luaL_error(L, "the response was already started");
  if (!r->c) {
    r->state = R_DONE;
    return closed_fail(L);
  }
  build_head(L, r, status, 3, 0, (lua_Integer)blen);
  bufs[0] = uv_buf_init(head.p, (unsigned)head.len);
  bufs[1] = uv_buf_init((char *)body, (unsigned)blen);
  c = r->c;
  rc = conn_send(c, bufs, r->head || status == 204 || status == 304 ? 1 : 2);
  if (rc != 0) {
    r->state = R_DONE;
    return closed_fail(L);
  }
  conn_next(c, r);
  lua_pushboolean(L, 1);
  return 1;
}

/** req:start(status, headers): begin a streamed (chunked) response. */
static int req_start(lua_State *L) {
  request *r = check_request(L);
  int status = check_status(L, 2);
  uv_buf_t b;
  if (r->state != R_ACCEPTED) return luaL_error(L, "the response was already started");
  r->state = R_STREAMING;
  if (!r->c) return closed_fail(L);
  build_head(L, r, status, 3, 1, 0);
  b = uv_buf_init(head.p, (unsigned)head.len);
  if (r->head) r->chunked_out = 0;
  if (conn_send(r->c, &b, 1) != 0) return closed_fail(L);
  lua_pushboolean(L, 1);
  return 1;
}

typedef struct {
  cs_op op;
  uv_write_t w;
  conn *c;
  int status, done, cancelled;
  char line[24];
} writeop;

static void write_done(uv_write_t *w, int status) {
  writeop *o = w->data;
  if (o->cancelled) {
    free(o);
    return;
  }
  o->done = 1;
  o->status = status;
  cs_op_ready(&o->op);
}

static int write_push(lua_State *L, cs_op *op) {
  writeop *o = (writeop *)op;
  int status = o->status;
  free(o);
  if (status < 0) return closed_fail(L);
  lua_pushboolean(L, 1);
  return 1;
}

/* The chunk lives on the cancelled task's stack: the write must die with it. */
static void write_cancel(cs_op *op) {
  writeop *o = (writeop *)op;
  if (o->done) {
    free(o);
    return;
  }
  o->cancelled = 1;
  conn_close(o->c); /* the write callback runs (ECANCELED) and frees o */
}

/** req:write(chunk) -> true | nil, msg, "EPIPE" (yields until written) */
static int req_write(lua_State *L) {
  request *r = check_request(L);
  size_t n, total, done;
  const char *data = luaL_checklstring(L, 2, &n);
  uv_buf_t bufs[3];
  int nb = 0, w, i;
  writeop *o;
  conn *c = r->c;
  cs_task_current(L);
  if (r->state != R_STREAMING) return luaL_error(L, "req:write needs req:start first");
  if (!c || c->closing || c->shutting) return closed_fail(L);
  if (n == 0 || r->head) {
    lua_pushboolean(L, 1);
    return 1;
  }
  o = calloc(1, sizeof *o);
  if (!o) return luaL_error(L, "out of memory");
  if (r->chunked_out) {
    snprintf(o->line, sizeof o->line, "%zx\r\n", n);
    bufs[nb++] = uv_buf_init(o->line, (unsigned)strlen(o->line));
  }
  bufs[nb++] = uv_buf_init((char *)data, (unsigned)n);
  if (r->chunked_out) bufs[nb++] = uv_buf_init("\r\n", 2);
  total = bufs_total(bufs, nb);
  w = uv_try_write((uv_stream_t *)&c->tcp, bufs, (unsigned)nb);
  if (w == UV_EAGAIN) w = 0;
  if (w < 0) {
    free(o);
    conn_close(c);
    return closed_fail(L);
  }
  if ((size_t)w == total) {
    free(o);
    lua_pushboolean(L, 1);
    return 1;
  }
  done = (size_t)w; /* queue the rest without copying: the chunk is anchored by this frame */
  for (i = 0; i < nb; i++) {
    size_t skip = done > bufs[i].len ? bufs[i].len : done;
    done -= skip;
    bufs[i].base += skip;
    bufs[i].len -= skip;
  }
  o->c = c;
  o->w.data = o;
  o->op.push = write_push;
  o->op.cancel = write_cancel;
  if (uv_write(&o->w, (uv_stream_t *)&c->tcp, bufs, (unsigned)nb, write_done) != 0) {
    free(o);
    conn_close(c);
    return closed_fail(L);
  }
  return cs_yield(L, &o->op);
}

/** req:finish() -> true | nil, msg, "EPIPE": end a streamed response. */
static int req_finish(lua_State *L) {
  request *r = check_request(L);
  conn *c = r->c;
  if (r->state != R_STREAMING) return luaL_error(L, "req:finish needs req:start first");
  r->state = R_DONE;
  if (!c) return closed_fail(L);
  if (r->chunked_out && conn_send_str(c, "0\r\n\r\n") != 0) return closed_fail(L);
  conn_next(c, r);
  lua_pushboolean(L, 1);
  return 1;
}

/** req:abort(): drop the connection (a streamed response that failed midway). */
static int req_abort(lua_State *L) {
  request *r = check_request(L);
  conn *c = r->c;
  r->state = R_DONE;
  if (c) conn_close(c);
  return 0;
}

/** req:state() -> "pending" | "streaming" | "done" */
static int req_state(lua_State *L) {
  request *r = check_request(L);
  lua_pushstring(L, r->state == R_STREAMING ? "streaming" : r->state == R_DONE ? "done" : "pending");
  return 1;
}

/* ---- listen and the dispatcher --------------------------------------------------- */

/* The default connection cap: DEFAULT_MAX_CONNECTIONS, and at most a quarter of
 * the descriptor limit, so idle clients cannot take the descriptors a run needs. */
static lua_Integer default_max_connections(void) {
  struct rlimit rl;
  lua_Integer n = DEFAULT_MAX_CONNECTIONS;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (lua_Integer)(rl.rlim_cur / 4) < n)
    n = (lua_Integer)(rl.rlim_cur / 4);
  return n < 4 ? 4 : n;
}

/** serve.listen{host=, port=, handler=, backlog=, max_body=, max_header=, max_connections=,
 *  idle_timeout=} -> server | nil, msg, code */
static int serve_listen(lua_State *L) {
  const char *host;
  lua_Integer port, backlog, max_conns, max_header;
  double max_body, idle;
  struct sockaddr_storage addr;
  server *s, **box;
  int rc;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "host");
  host = luaL_optstring(L, -1, "127.0.0.1");
  lua_getfield(L, 1, "port");
  port = luaL_optinteger(L, -1, 0);
  lua_getfield(L, 1, "backlog");
  backlog = luaL_optinteger(L, -1, 1024);
  lua_getfield(L, 1, "max_body");
  max_body = luaL_optnumber(L, -1, (double)DEFAULT_MAX_BODY);
  lua_getfield(L, 1, "max_header");
  max_header = luaL_optinteger(L, -1, (lua_Integer)DEFAULT_MAX_HEADER);
  lua_getfield(L, 1, "max_connections");
  max_conns = lua_isnil(L, -1) ? default_max_connections() : luaL_checkinteger(L, -1);
  lua_getfield(L, 1, "idle_timeout");
  idle = luaL_optnumber(L, -1, DEFAULT_IDLE_TIMEOUT);
  luaL_argcheck(L, max_header >= 256, 1, "max_header must be >= 256");
  luaL_argcheck(L, max_conns >= 1, 1, "max_connections must be >= 1");
  luaL_argcheck(L, idle >= 0 && idle <= 1e7, 1, "idle_timeout must be 0 (none) .. 1e7 seconds");
  lua_pop(L, 3);
  lua_getfield(L, 1, "handler");
  if (!lua_isnil(L, -1)) luaL_checktype(L, -1, LUA_TFUNCTION);
  luaL_argcheck(L, port >= 0 && port <= 65535, 1, "port must be 0..65535");
  if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)&addr) != 0)
    return luaL_error(L, "host must be a numeric IPv4 or IPv6 address, got '%s'", host);
  s = calloc(1, sizeof *s);
  if (!s) return luaL_error(L, "out of memory");
  s->max_body = max_body < 0 ? 0 : max_body > 1e15 ? (size_t)1e15 : (size_t)max_body;
  s->max_header = (size_t)max_header;
  s->max_connections = max_conns;
  s->idle_ms = idle > 0 && idle * 1000 < 1 ? 1 : (uint64_t)(idle * 1000);
  s->refs = 2; /* the listening handle and the Lua box */
  uv_tcp_init(cs_loop(), &s->tcp);
  s->tcp.data = s;
  box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = s;
  luaL_setmetatable(L, SERVER_MT);
  rc = uv_tcp_bind(&s->tcp, (struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->tcp, (int)backlog, on_connection);
  if (rc != 0) {
    server_close(s);
    return cs_fail(L, uv_err_name(rc), "listen on %s:%d: %s", host, (int)port, uv_strerror(rc));
  }
  if (lua_isfunction(L, -2)) {
    int srv = lua_gettop(L);
    lua_getglobal(L, "require"); /* lua/cseng/serve_dispatch.lua: function(srv, handler) */
    lua_pushliteral(L, "cseng.serve_dispatch");
    lua_call(L, 1, 1);
    lua_pushvalue(L, srv);
    lua_pushvalue(L, srv - 1);
    lua_call(L, 2, 0);
    lua_settop(L, srv);
  }
  return 1;
}

int luaopen_cseng_serve(lua_State *L) {
  static const luaL_Reg funcs[] = {{"listen", serve_listen}, {NULL, NULL}};
  static const luaL_Reg smeth[] = {{"port", srv_port},   {"url", srv_url},     {"accept", srv_accept},
                                   {"stats", srv_stats}, {"close", srv_close}, {NULL, NULL}};
  static const luaL_Reg smeta[] = {{"__gc", srv_gc}, {"__close", srv_close}, {NULL, NULL}};
  static const luaL_Reg rmeth[] = {
      {"respond", req_respond}, {"start", req_start}, {"write", req_write}, {"finish", req_finish},
      {"abort", req_abort},     {"state", req_state}, {NULL, NULL}};
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
  cs_new_class(L, SERVER_MT, smeth, smeta);
  if (luaL_newmetatable(L, REQUEST_MT)) {
    luaL_newlib(L, rmeth);
    lua_pushcclosure(L, req_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, req_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, req_pairs);
    lua_setfield(L, -2, "__pairs");
    lua_pushcfunction(L, req_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, funcs);
  return 1;
}
