/*
 * h2.c: HTTP/2 sessions of the native HTTP client, on Debian's libnghttp2 (see h2.h).
 *
 * nghttp2 is driven in memory (nghttp2_session_mem_recv with what the connection read,
 * nghttp2_session_mem_send for what to write), so h1.c keeps reading the socket itself and
 * stamping each read; a stream ends at the stamp of the read whose plaintext held its
 * END_STREAM. The settings are libcurl's where they show: no server push, a 10 MiB stream
 * window and a 100 MiB connection window (a response is never held back by flow control: the
 * owner takes every byte as it comes), and 100 streams assumed open-able until the server's
 * SETTINGS say otherwise.
 */
#include "h2.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#define STREAM_WINDOW (10 * 1024 * 1024)
#define CONN_WINDOW (100 * 1024 * 1024)
#define DEFAULT_STREAMS 100 /* until the server's SETTINGS arrive (libcurl's assumption too) */
#define NV_MAX 128          /* header fields a request may have over HTTP/2 */

struct h2_sess {
  nghttp2_session *ng;
  const h2_ops *ops;
  void *conn;
  int tls;
  int settings_seen, goaway, broken;
  unsigned open;     /* streams with a call on them */
  h1_call *calls;    /* those calls (qnext/qprev), for expiry and h2_fail_all */
  uint64_t at;       /* the receive stamp of the read being handled */
  int in_recv;       /* inside nghttp2_session_mem_recv: nothing is sent until it returns */
  uint8_t *out;      /* frames gathered for one write (over TLS, one record instead of one per frame) */
  size_t out_len, out_cap;
};

static nghttp2_session_callbacks *CB;

static void link_call(h2_sess *s, h1_call *c) {
  c->qprev = NULL;
  c->qnext = s->calls;
  if (s->calls) s->calls->qprev = c;
  s->calls = c;
  s->open++;
}

static void unlink_call(h2_sess *s, h1_call *c) {
  if (c->qprev) c->qprev->qnext = c->qnext;
  else if (s->calls == c) s->calls = c->qnext;
  if (c->qnext) c->qnext->qprev = c->qprev;
  c->qnext = c->qprev = NULL;
  if (c->stream > 0) nghttp2_session_set_stream_user_data(s->ng, c->stream, NULL);
  c->sess = NULL;
  s->open--;
}

/* The stream's call ends: out of the session, then told to the connection. */
static void end_call(h2_sess *s, h1_call *c, int err, int os_errno) {
  unlink_call(s, c);
  s->ops->ended(s->conn, c, err, os_errno);
}

static h1_call *call_of(nghttp2_session *ng, int32_t id) { return nghttp2_session_get_stream_user_data(ng, id); }

static void first_byte(h2_sess *s, h1_call *c) {
  if (c->received == 0 && !c->t_ttfb) c->t_ttfb = s->at - c->t0;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud) {
  h2_sess *s = ud;
  h1_call *c = call_of(ng, f->hd.stream_id);
  if (!c || f->hd.type != NGHTTP2_HEADERS) return 0;
  first_byte(s, c);
  c->t_end = s->at;
  if (c->h2_final && c->phase < 2) c->phase = 2;
  return 0;
}

/* One response field: :status, or a "name: value" line for the owner (a trailer after the final
 * response's header block). */
static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nl, const uint8_t *value,
                     size_t vl, uint8_t flags, void *ud) {
  h1_call *c = call_of(ng, f->hd.stream_id);
  char line[256], *buf = line;
  int rc;
  (void)flags;
  (void)ud;
  if (!c || f->hd.type != NGHTTP2_HEADERS) return 0;
  if (nl == 7 && memcmp(name, ":status", 7) == 0) {
    unsigned st = 0;
    for (size_t i = 0; i < vl && i < 4; i++) st = st * 10 + (unsigned)(value[i] - '0');
    c->status = st;
    c->major = 2, c->minor = 0;
    if (c->phase == 0) c->phase = 1;
    return 0;
  }
  if (nl && name[0] == ':') return 0;
  if (nl + vl + 2 > sizeof line && !(buf = malloc(nl + vl + 2))) return NGHTTP2_ERR_CALLBACK_FAILURE;
  memcpy(buf, name, nl);
  buf[nl] = ':';
  buf[nl + 1] = ' ';
  memcpy(buf + nl + 2, value, vl);
  rc = c->on_line(c, buf, nl + vl + 2, c->h2_final);
  if (buf != line) free(buf);
  return rc == 0 ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset (EABORT) */
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *p, size_t n, void *ud) {
  h2_sess *s = ud;
  h1_call *c = call_of(ng, id);
  (void)flags;
  if (!c) return 0;
  first_byte(s, c);
  c->t_end = s->at;
  c->received += n;
  c->phase = 2;
  if (c->head_method) return 0; /* (a HEAD's response has no body: nothing of it is kept) */
  if (c->on_body(c, (const char *)p, n) != 0) {
    c->h2_abort = 1;
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  return 0;
}

static int on_frame(nghttp2_session *ng, const nghttp2_frame *f, void *ud) {
  h2_sess *s = ud;
  h1_call *c;
  if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK)) {
    s->settings_seen = 1;
    return 0;
  }
  if (f->hd.type == NGHTTP2_GOAWAY) { /* streams it did not take are closed REFUSED_STREAM: retried */
    s->goaway = 1;
    return 0;
  }
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  if (!(c = call_of(ng, f->hd.stream_id))) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && !c->h2_final && c->status) {
    if (c->status >= 100 && c->status < 200 && c->status != 101) { /* an interim response: the real one follows */
      c->on_line(c, NULL, 0, 0);
      c->status = 0;
      c->phase = 0;
    } else
      c->h2_final = 1; /* header blocks after this one are trailers */
  }
  if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && !c->h2_abort) {
    c->t_end = s->at;
    if (!c->h2_final) { /* the stream ended without a final response */
      c->parse_error = "the stream ended without a response";
      end_call(s, c, H1_EH2STREAM, 0);
    } else
      end_call(s, c, H1_OK, 0);
  }
  return 0;
}

static int on_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud) {
  h2_sess *s = ud;
  h1_call *c = call_of(ng, id);
  if (!c) return 0;
  if (code == NGHTTP2_REFUSED_STREAM) s->goaway = 1; /* as libcurl: no new stream on it (it closes it) */
  if (c->h2_abort) end_call(s, c, H1_EABORT, 0);
  else if (code == NGHTTP2_REFUSED_STREAM && c->received == 0) end_call(s, c, H1_ERETRY, 0);
  else {
    c->parse_error = code == NGHTTP2_NO_ERROR ? "the stream closed before its end" : nghttp2_http2_strerror(code);
    end_call(s, c, H1_EH2STREAM, 0);
  }
  return 0;
}

/* A request that could not be sent (the session went away first): sent again elsewhere. */
static int on_not_sent(nghttp2_session *ng, const nghttp2_frame *f, int lib_error, void *ud) {
  h2_sess *s = ud;
  h1_call *c;
  (void)lib_error;
  if (f->hd.type != NGHTTP2_HEADERS || !(c = call_of(ng, f->hd.stream_id))) return 0;
  end_call(s, c, H1_ERETRY, 0);
  return 0;
}

static ssize_t body_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  h1_call *c = src->ptr;
  size_t left = c->send[1].len - c->body_off, n = left < len ? left : len;
  (void)ng;
  (void)id;
  (void)ud;
  memcpy(buf, c->send[1].base + c->body_off, n);
  c->body_off += n;
  if (c->body_off == c->send[1].len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int callbacks(void) {
  if (CB) return 0;
  if (nghttp2_session_callbacks_new(&CB) != 0) return -1;
  nghttp2_session_callbacks_set_on_begin_headers_callback(CB, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(CB, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(CB, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(CB, on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(CB, on_close);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(CB, on_not_sent);
  return 0;
}

h2_sess *h2_new(const h2_ops *ops, void *conn, int tls) {
  h2_sess *s;
  nghttp2_option *opt = NULL;
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW}};
  if (callbacks() != 0 || !(s = calloc(1, sizeof *s))) return NULL;
  s->ops = ops, s->conn = conn, s->tls = tls;
  if (nghttp2_option_new(&opt) != 0) goto fail;
  nghttp2_option_set_peer_max_concurrent_streams(opt, DEFAULT_STREAMS);
  if (nghttp2_session_client_new2(&s->ng, CB, s, opt) != 0) {
    s->ng = NULL;
    goto fail;
  }
  nghttp2_option_del(opt);
  opt = NULL;
  if (nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
      nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
    goto fail;
  return s;
fail:
  if (opt) nghttp2_option_del(opt);
  if (s->ng) nghttp2_session_del(s->ng);
  free(s);
  return NULL;
}

void h2_free(h2_sess *s) {
  if (!s) return;
  while (s->calls) {
    h1_call *c = s->calls;
    unlink_call(s, c);
  }
  nghttp2_session_del(s->ng);
  free(s->out);
  free(s);
}

static int lower_into(char *out, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
  return 0;
}

int h2_submit(h2_sess *s, h1_call *c) {
  /* the HTTP/1.1 head lhttp.c wrote: "METHOD target HTTP/1.1\r\n", "Name: value\r\n"..., "\r\n" */
  const char *p = c->send[0].base, *end = p + c->send[0].len, *sp, *sp2, *eol;
  nghttp2_nv nv[NV_MAX];
  char names[4096], *np = names;
  size_t n = 0, authority = 0;
  int32_t id;
  nghttp2_data_provider prd;
  if (!(eol = memchr(p, '\n', (size_t)(end - p))) || !(sp = memchr(p, ' ', (size_t)(eol - p))) ||
      !(sp2 = memchr(sp + 1, ' ', (size_t)(eol - sp - 1))))
    return H1_ENOMEM; /* (never: lhttp.c wrote it) */
#define NVSET(nm, nml, vv, vvl) \
  nv[n].name = (uint8_t *)(nm), nv[n].namelen = (nml), nv[n].value = (uint8_t *)(vv), nv[n].valuelen = (vvl), \
  nv[n].flags = NGHTTP2_NV_FLAG_NONE, n++
  NVSET(":method", 7, p, (size_t)(sp - p));
  NVSET(":path", 5, sp + 1, (size_t)(sp2 - sp - 1));
  NVSET(":scheme", 7, s->tls ? "https" : "http", s->tls ? 5u : 4u);
  authority = n;
  NVSET(":authority", 10, "", 0);
  for (p = eol + 1; p < end && n < NV_MAX; p = eol + 1) {
    const char *colon, *v, *ve;
    size_t nl;
    if (!(eol = memchr(p, '\n', (size_t)(end - p)))) break;
    ve = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
    if (ve == p) break; /* the blank line */
    if (!(colon = memchr(p, ':', (size_t)(ve - p)))) continue;
    nl = (size_t)(colon - p);
    for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++) {}
    if (nl == 4 && strncasecmp(p, "host", 4) == 0) { /* :authority, as libcurl makes it */
      nv[authority].value = (uint8_t *)v, nv[authority].valuelen = (size_t)(ve - v);
      continue;
    }
    if (np + nl > names + sizeof names) return H1_ENOMEM;
    lower_into(np, p, nl);
    NVSET(np, nl, v, (size_t)(ve - v));
    np += nl;
  }
#undef NVSET
  c->status = 0, c->phase = 0, c->h2_final = 0, c->h2_abort = 0, c->body_off = 0;
  prd.source.ptr = c;
  prd.read_callback = body_read;
  id = nghttp2_submit_request(s->ng, NULL, nv, n, c->nsend > 1 && c->send[1].len ? &prd : NULL, c);
  if (id < 0) return H1_ENOMEM;
  c->stream = id;
  c->sess = s;
  link_call(s, c);
  return 0;
}

int h2_input(h2_sess *s, const char *p, size_t n, uint64_t at) {
  ssize_t used;
  s->at = at ? at : uv_hrtime();
  s->in_recv = 1;
  used = nghttp2_session_mem_recv(s->ng, (const uint8_t *)p, n);
  s->in_recv = 0;
  if (used < 0 || (size_t)used != n) {
    s->broken = 1;
    return -1;
  }
  return 0;
}

int h2_flush(h2_sess *s) {
  const uint8_t *d;
  ssize_t n;
  int rc;
  if (s->in_recv) return 0; /* not inside nghttp2's callbacks: h2_input's caller flushes after */
  s->out_len = 0;
  while ((n = nghttp2_session_mem_send(s->ng, &d)) > 0) {
    if (s->out_len + (size_t)n > s->out_cap) {
      size_t cap = s->out_cap ? s->out_cap : 4096;
      uint8_t *np;
      while (cap < s->out_len + (size_t)n) cap *= 2;
      if (!(np = realloc(s->out, cap))) {
        s->broken = 1;
        return UV_ENOMEM;
      }
      s->out = np, s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, d, (size_t)n);
    s->out_len += (size_t)n;
  }
  if (n < 0) {
    s->broken = 1;
    return -1;
  }
  if (!s->out_len) return 0;
  if ((rc = s->ops->write(s->conn, s->out, s->out_len)) != 0) s->broken = 1;
  if (s->out_cap > 65536) { /* a large body went out: the buffer is not kept at that size */
    free(s->out);
    s->out = NULL, s->out_cap = 0;
  }
  return rc;
}

void h2_cancel(h2_sess *s, h1_call *c) {
  int32_t id = c->stream;
  if (c->sess != s) return;
  unlink_call(s, c);
  if (id > 0 && !s->broken) {
    nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    (void)h2_flush(s); /* (a failure shows at the next read or write) */
  }
}

void h2_fail_all(h2_sess *s, int err, int os_errno) {
  s->broken = 1;
  while (s->calls) end_call(s, s->calls, err, os_errno);
}

uint64_t h2_expire(h2_sess *s, uint64_t now) {
  uint64_t next = 0;
  h1_call *c = s->calls, *nx;
  for (; c; c = nx) {
    nx = c->qnext;
    if (c->deadline && now + 1000000 > c->deadline) { /* within libuv's millisecond: past it */
      int32_t id = c->stream;
      unlink_call(s, c);
      if (id > 0 && !s->broken) nghttp2_submit_rst_stream(s->ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      s->ops->ended(s->conn, c, H1_ETIMEDOUT, ETIMEDOUT);
      nx = s->calls; /* (ended may have changed the list: start over) */
      next = 0;
    } else if (c->deadline && (!next || c->deadline < next))
      next = c->deadline;
  }
  if (!s->broken) (void)h2_flush(s);
  return next;
}

unsigned h2_open(const h2_sess *s) { return s->open; }

unsigned h2_room(const h2_sess *s, unsigned local_max) {
  uint32_t remote = nghttp2_session_get_remote_settings(s->ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  unsigned max = remote < local_max ? remote : local_max;
  if (s->broken || s->goaway || !nghttp2_session_check_request_allowed(s->ng)) return 0;
  return s->open < max ? max - s->open : 0;
}

int h2_usable(h2_sess *s) { return !s->broken && !s->goaway && nghttp2_session_check_request_allowed(s->ng); }

int h2_settings_seen(const h2_sess *s) { return s->settings_seen; }

int h2_finished(h2_sess *s) {
  return s->broken || (!nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng));
}
