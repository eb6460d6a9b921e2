/*
 * h2.h: the HTTP/2 side of the native HTTP client (engine/h2.c, on Debian's libnghttp2): one
 * session per connection, each call a stream. engine/h1.c owns the connection (TCP, TLS, the
 * receive stamps, timers, pools) and hands a session what it read; the session hands back what
 * to send, and tells the connection when a stream's call has ended (h1.c then finishes it:
 * statistics, a retry on another connection, the owner's on_done).
 *
 * A call's request arrives as the HTTP/1.1 head engine/lhttp.c built for it (h1_call.send[0],
 * its body in send[1]) and goes out as libcurl sends it over HTTP/2 (Curl_http_req_to_h2): the
 * pseudo-headers (:method, :path, :scheme, :authority from Host) and the other fields with
 * lower-case names. The response's fields reach the owner as "name: value" lines (on_line), its
 * body as it comes (on_body), its trailers as trailer lines; a stream ends (t_end) at the receive
 * stamp of the read that carried its last frame.
 */
#ifndef CSENG_H2_H
#define CSENG_H2_H

#include <stddef.h>
#include <stdint.h>

#include "h1.h"

typedef struct h2_sess h2_sess;

/* What a session needs of its connection. */
typedef struct {
  /* bytes onto the connection (encrypted first over TLS): 0, or a libuv error */
  int (*write)(void *conn, const uint8_t *p, size_t n);
  /* a stream's call ended (err H1_OK, or how it failed; H1_ERETRY: the server refused the stream
   * before processing it: send it again elsewhere) */
  void (*ended)(void *conn, h1_call *c, int err, int os_errno);
} h2_ops;

/* A client session for conn (tls: the :scheme is https), its preface and SETTINGS queued
 * (sent by h2_flush); NULL when out of memory. */
h2_sess *h2_new(const h2_ops *ops, void *conn, int tls);

/* Free the session; its streams' calls are forgotten (not told). */
void h2_free(h2_sess *s);

/* Start c as a stream (its request queued; h2_flush sends it). 0, or H1_ENOMEM. */
int h2_submit(h2_sess *s, h1_call *c);

/* What the connection read (plaintext), received at `at`: frames handled, streams ended
 * (ops->ended). 0, or -1: the session is broken (the caller fails what is left: h2_fail_all). */
int h2_input(h2_sess *s, const char *p, size_t n, uint64_t at);

/* Send what the session has queued (ops->write). 0, or the write's error. */
int h2_flush(h2_sess *s);

/* Forget c (cancelled): its stream is reset (RST_STREAM CANCEL); ops->ended is not called. */
void h2_cancel(h2_sess *s, h1_call *c);

/* Every open stream's call ends with err (the connection failed or closed). */
void h2_fail_all(h2_sess *s, int err, int os_errno);

/* Calls whose deadline passed end with H1_ETIMEDOUT; returns the earliest deadline left (0: none). */
uint64_t h2_expire(h2_sess *s, uint64_t now);

/* Streams open now, and how many may be: the server's SETTINGS_MAX_CONCURRENT_STREAMS (100
 * until they arrive, as libcurl assumes) and the local limit, whichever is lower. */
unsigned h2_open(const h2_sess *s);
unsigned h2_room(const h2_sess *s, unsigned local_max);

/* The session may start streams (no GOAWAY either way, not broken). */
int h2_usable(h2_sess *s);

/* The server's SETTINGS arrived (the connection is warm for a burst). */
int h2_settings_seen(const h2_sess *s);

/* Nothing more will be read or written: the connection may close. */
int h2_finished(h2_sess *s);

#endif
