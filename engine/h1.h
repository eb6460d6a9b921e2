/*
 * h1.h: the native HTTP client of cseng.http (engine/h1.c): keep-alive connections on libuv,
 * plain or over TLS (engine/tls.c: OpenSSL on a BIO of its own over the same stream), speaking
 * HTTP/1.1 (Debian's http_parser) or HTTP/2 (engine/h2.c, Debian's libnghttp2: by ALPN, or prior
 * knowledge on http://).
 *
 * cseng.http (lhttp.c) sends the requests libcurl would send the same way through here when
 * they are `http://` or `https://` to a host and port, without a proxy, redirects, a Unix socket
 * or a connection limit (lhttp.c's native_start); everything else stays on libcurl. Here a call
 * costs a fraction of libcurl's per-transfer work (URL parsing, request formatting, the
 * connection-cache walk), and ends at the kernel's receive stamp of the read that completed its
 * answer, not when libcurl reported it done.
 *
 * No Lua here: the owner (lhttp.c) fills an h1_call, calls h1_start, and gets its response through
 * the callbacks, from loop callbacks, never from inside h1_start. After on_done the call is the
 * owner's again (h1 keeps no pointer to it).
 */
#ifndef CSENG_H1_H
#define CSENG_H1_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* How a call ended (on_done's err). */
enum {
  H1_OK = 0,
  H1_ERESOLVE,  /* the host name did not resolve */
  H1_ECONNECT,  /* no connection (os_errno: why) */
  H1_ETIMEDOUT, /* the call's timeout or connect timeout passed */
  H1_ESEND,     /* the request could not be written (os_errno) */
  H1_ERECV,     /* reading the response failed (os_errno) */
  H1_EEMPTY,    /* the server closed the connection without a response byte */
  H1_EPARTIAL,  /* the server closed the connection inside the response */
  H1_EPARSE,    /* not an HTTP/1.x response (h1_call.parse_error says what) */
  H1_EABORT,    /* on_body or on_line returned nonzero */
  H1_ENOMEM,
  H1_ETLS,      /* the TLS handshake failed (tls_error says how) */
  H1_ECERT,     /* the server's certificate was refused (tls_error says why) */
  H1_ECAFILE,   /* the CA bundle could not be loaded (tls_error) */
  H1_EH2,       /* HTTP/2: the session failed (not an HTTP/2 server, a protocol error, a GOAWAY error) */
  H1_EH2STREAM, /* HTTP/2: the stream was reset, or ended without a response (parse_error says how) */
  H1_ERETRY     /* (internal) the stream was refused before the server processed it: sent again */
};

/* The protocol a call asks for (h1_call.version). */
enum {
  H1_V_ANY = 0, /* http://: HTTP/1.1; https://: HTTP/2 or HTTP/1.1 by ALPN (libcurl's default) */
  H1_V_1,       /* HTTP/1.1 only */
  H1_V_2        /* HTTP/2: by ALPN over TLS (HTTP/1.1 if that is all the server speaks), prior knowledge on http:// */
};

/* A URL the native path takes: http[s]://host[:port][/target], host a lower-case name, a dotted
 * IPv4 address or a bracketed IPv6 one, target printable ASCII without dot segments (libcurl
 * would rewrite those), no user info. Pointers are into the URL. */
typedef struct {
  int tls;          /* https:// */
  const char *host;
  size_t host_len; /* without IPv6 brackets */
  int ipv6;        /* host was [...] */
  int port;
  int default_port; /* the scheme's port (80, 443), given or not: the Host header has none (as libcurl's) */
  const char *target;
  size_t target_len; /* 0: "/" */
} h1_url;

/* 1 and *u filled when url is one the native path takes, else 0 (libcurl's job). */
int h1_url_split(const char *url, size_t len, h1_url *u);

typedef struct h1_call h1_call;
struct h1_conn;
struct tls_conf;
struct h2_sess;

struct h1_call {
  /* set by the owner before h1_start */
  const char *host;
  size_t host_len;
  int ipv6, port;
  uv_buf_t send[2]; /* the request: its head and its body (referenced until on_done) */
  unsigned nsend;
  int head_method;                         /* a HEAD request: its response has no body */
  uint64_t timeout_ms, connect_timeout_ms; /* 0: none; connect_timeout covers TCP and TLS, as libcurl's */
  struct tls_conf *tls;                    /* https: the verification it asks for (tls_conf_get); NULL: plain */
  int version;                             /* H1_V_ANY, H1_V_1, H1_V_2 */
  int fresh;                               /* a connection of its own, new (h1_warm's calls) */
  int no_request;                          /* nothing to send: the call ends when its connection is ready (h1_warm) */
  /* A header line as received, "Name: value" without CRLF (trailer: after a chunked body);
   * p == NULL: a new response starts (after a 1xx), forget the lines so far. */
  int (*on_line)(h1_call *c, const char *p, size_t n, int trailer);
  int (*on_body)(h1_call *c, const char *p, size_t n);
  void (*on_done)(h1_call *c, int err, int os_errno);
  /* set by h1 */
  unsigned status, major, minor;
  int new_conn;                                /* this call opened its connection */
  int tls_resumed;                             /* ... and its TLS handshake resumed a session */
  uint64_t t0, t_dns, t_connect, t_tls, t_ttfb, t_total; /* uv_hrtime at start; the rest ns after it (0: not reached) */
  uint64_t t_ready;  /* ns after t0 when a connection it had to wait for was ready (0: one was) */
  uint64_t t_end;  /* uv_hrtime when the response's last bytes arrived (the kernel's stamp), or the call ended */
  size_t received;                             /* response bytes read */
  const char *parse_error;
  char tls_error[256];                         /* H1_ETLS, H1_ECERT, H1_ECAFILE: libcurl's kind of message */
  int phase;                                   /* how far the response got: 0 the status line, 1 headers, 2 body */
  /* private */
  struct h1_conn *conn;
  int retried;
  uint64_t deadline;             /* HTTP/2 streams, calls waiting for a connection: t0 + timeout (0: none) */
  struct h1_call *qnext, *qprev; /* a connection's waiting calls, or a session's streams */
  struct h2_sess *sess;          /* the HTTP/2 session it is a stream of */
  int32_t stream;
  size_t body_off;
  int h2_final, h2_abort;        /* the final response's header block is in; the owner refused a chunk */
};

/* The loop every connection runs on (once, before the first call). */
void h1_init(uv_loop_t *loop);

/* Start a call. 0, or H1_ENOMEM (then nothing was started and on_done is not called). */
int h1_start(h1_call *c);

/* Abandon a call before its on_done: its connection is closed (it cannot be reused mid-response);
 * on_done is not called. */
void h1_cancel(h1_call *c);

/* Idle connections kept per host and port (default 1024; at least 1). */
void h1_set_idle_max(long n);

typedef struct {
  uint64_t calls, connects, reused, retried, open, idle;
  uint64_t tls_handshakes, tls_resumed; /* TLS handshakes done, and of them those that resumed a session */
  uint64_t h2_connections, h2_streams;  /* HTTP/2 connections opened, streams started */
  uint64_t unit_reads; /* reads that ended where a TLS record, an HTTP/2 frame or its header ends
                          (several streams open) */
} h1_stats;

/* HTTP/2 streams a connection carries at most (default 100, libcurl's; the server's SETTINGS may
 * lower it). */
void h1_set_max_streams(long n);

/* HTTP/2 requests gathered per connection and sent together: notify is told when one waits
 * (the scheduler's cs_sched_flush_wanted), and h1_flush sends every waiting one (the scheduler's
 * hook, before it polls I/O). Without a notify each request goes at once. */
void h1_set_flush_notify(void (*notify)(void));
void h1_flush(void);
h1_stats h1_get_stats(void);

/* The origin c names (host, port, TLS; the call is not started): how many calls would start
 * there now without a new connection (idle HTTP/1.1 connections, and the free streams of HTTP/2
 * ones), its ready HTTP/2 connections, and the streams the newest of them may carry at most. */
void h1_origin_state(const h1_call *c, unsigned long *ready, unsigned *h2_conns, unsigned *h2_max);

/* Close the idle connections to host and port (tls: https; any verification), HTTP/1.1 ones and
 * HTTP/2 ones without a stream; returns how many. */
unsigned h1_close_idle(const char *host, size_t host_len, int port, int tls);

/* Close every connection (at shutdown; calls still running are abandoned). */
void h1_shutdown(void);

#endif
