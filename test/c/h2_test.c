/* h2_test.c: unit tests for engine/h2.c, the native client's HTTP/2 sessions, against a server
 * session of the same library in this process (what the client writes is fed to the server and
 * back, in memory, no socket): the request as libcurl sends it over HTTP/2 (the pseudo-headers,
 * :authority from Host, lower-case names, the body), a response's status, fields, body and
 * trailers as the owner's lines, the end stamped with the read that carried it, an interim 103, a
 * reset stream, a refused one (sent again: H1_ERETRY), a GOAWAY, expiry, and the session's room.
 * Built with ASan/UBSan by the Makefile. Prints "N passed, N failed". */
#include "../../engine/h2.h"

#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"

/* ---- the client's side: what the calls' owner sees ---- */

typedef struct {
  h1_call c;
  char lines[4096], trailers[1024], body[8192];
  size_t nlines, ntrailers, nbody;
  int resets, ended, err;
} call_t;

static int on_line(h1_call *c, const char *p, size_t n, int trailer) {
  call_t *t = (call_t *)c;
  if (!p) {
    t->resets++;
    t->nlines = 0;
    return 0;
  }
  if (trailer) {
    memcpy(t->trailers + t->ntrailers, p, n);
    t->ntrailers += n;
    t->trailers[t->ntrailers++] = '\n';
  } else {
    memcpy(t->lines + t->nlines, p, n);
    t->nlines += n;
    t->lines[t->nlines++] = '\n';
  }
  return 0;
}

static int on_body(h1_call *c, const char *p, size_t n) {
  call_t *t = (call_t *)c;
  memcpy(t->body + t->nbody, p, n);
  t->nbody += n;
  return 0;
}

/* the client's output, for the server */
static uint8_t wire[1 << 20];
static size_t nwire;

static int c_write(void *conn, const uint8_t *p, size_t n) {
  (void)conn;
  memcpy(wire + nwire, p, n);
  nwire += n;
  return 0;
}

static void c_ended(void *conn, h1_call *c, int err, int os_errno) {
  call_t *t = (call_t *)c;
  (void)conn;
  (void)os_errno;
  t->ended++;
  t->err = err;
}

static const h2_ops OPS = {c_write, c_ended};

static void call_init(call_t *t, const char *head, const char *body) {
  memset(t, 0, sizeof *t);
  t->c.send[0] = uv_buf_init((char *)head, (unsigned)strlen(head));
  t->c.nsend = 1;
  if (body) {
    t->c.send[1] = uv_buf_init((char *)body, (unsigned)strlen(body));
    t->c.nsend = 2;
  }
  t->c.on_line = on_line;
  t->c.on_body = on_body;
  t->c.t0 = 1000;
}

/* ---- the server's side: a plain nghttp2 server session ---- */

static struct {
  nghttp2_session *s;
  char seen[4096]; /* the last request's fields, "name: value\n" */
  size_t nseen;
  char body[1024];
  size_t nbody;
  int32_t last_stream;
  uint8_t out[1 << 20];
  size_t nout;
} S;

static int s_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl, const uint8_t *value,
                    size_t vl, uint8_t flags, void *ud) {
  (void)s, (void)f, (void)flags, (void)ud;
  memcpy(S.seen + S.nseen, name, nl);
  S.nseen += nl;
  S.seen[S.nseen++] = ':';
  S.seen[S.nseen++] = ' ';
  memcpy(S.seen + S.nseen, value, vl);
  S.nseen += vl;
  S.seen[S.nseen++] = '\n';
  S.seen[S.nseen] = 0;
  return 0;
}

static int s_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *p, size_t n, void *ud) {
  (void)s, (void)flags, (void)id, (void)ud;
  memcpy(S.body + S.nbody, p, n);
  S.nbody += n;
  S.body[S.nbody] = 0;
  return 0;
}

static int s_begin(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  (void)s, (void)ud;
  S.nseen = 0;
  S.nbody = 0;
  S.last_stream = f->hd.stream_id;
  return 0;
}

static void server_new(void) {
  nghttp2_session_callbacks *cb;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, s_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, s_data);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, s_begin);
  if (S.s) nghttp2_session_del(S.s);
  nghttp2_session_server_new(&S.s, cb, NULL);
  nghttp2_session_callbacks_del(cb);
  nghttp2_submit_settings(S.s, NGHTTP2_FLAG_NONE, NULL, 0);
}

/* client -> server: what the client wrote */
static void to_server(void) {
  nghttp2_session_mem_recv(S.s, wire, nwire);
  nwire = 0;
}

/* server -> client: what the server has to send, as one read stamped `at` */
static int to_client(h2_sess *c, uint64_t at) {
  const uint8_t *d;
  ssize_t n;
  S.nout = 0;
  while ((n = nghttp2_session_mem_send(S.s, &d)) > 0) {
    memcpy(S.out + S.nout, d, (size_t)n);
    S.nout += (size_t)n;
  }
  return h2_input(c, (const char *)S.out, S.nout, at);
}

static ssize_t s_body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                           nghttp2_data_source *src, void *ud) {
  const char *b = src->ptr;
  size_t n = strlen(b);
  (void)s, (void)id, (void)ud;
  if (n > len) n = len;
  memcpy(buf, b, n);
  *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
  return (ssize_t)n;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

int main(void) {
  h2_sess *c;
  call_t a, b;
  /* a session, its preface and SETTINGS, a POST: the request as libcurl sends it */
  server_new();
  c = h2_new(&OPS, NULL, 1);
  CHECK(c != NULL, "h2_new");
  call_init(&a, "POST /api/sandboxes?x=1 HTTP/1.1\r\nHost: api.example:8443\r\nAccept: */*\r\nX-Api-Key: k\r\n"
                "X-Empty:\r\nContent-Length: 7\r\nContent-Type: application/json\r\n\r\n",
            "{\"a\":1}");
  a.c.deadline = 5000;
  CHECK(h2_submit(c, &a.c) == 0, "submit");
  CHECK(h2_flush(c) == 0 && nwire > 24 && memcmp(wire, "PRI * HTTP/2.0", 14) == 0, "the preface first");
  CHECK(h2_open(c) == 1, "one stream open");
  to_server();
  CHECK(strstr(S.seen, ":method: POST\n") && strstr(S.seen, ":path: /api/sandboxes?x=1\n") &&
            strstr(S.seen, ":scheme: https\n") && strstr(S.seen, ":authority: api.example:8443\n"),
        "pseudo-headers: %s", S.seen);
  CHECK(!strstr(S.seen, "host:") && strstr(S.seen, "accept: */*\n") && strstr(S.seen, "x-api-key: k\n") &&
            strstr(S.seen, "x-empty: \n") && strstr(S.seen, "content-length: 7\n") &&
            strstr(S.seen, "content-type: application/json\n"),
        "fields lower-case, Host gone: %s", S.seen);
  CHECK(strcmp(S.body, "{\"a\":1}") == 0, "the body: %s", S.body);
  CHECK(!h2_settings_seen(c), "no SETTINGS from the server yet");

  /* the response: a 103, then 201 with fields, a body in two reads, trailers; ended at the second
   * read's stamp */
  {
    nghttp2_nv early[] = {NV(":status", "103"), NV("link", "</a.css>")};
    nghttp2_nv head[] = {NV(":status", "201"), NV("content-type", "application/json"), NV("x-multi", "a")};
    nghttp2_nv tr[] = {NV("grpc-status", "0"), NV("x-t", "done")};
    nghttp2_data_provider prd = {.source.ptr = "{\"id\":\"lz-1\"}", .read_callback = s_body_read};
    nghttp2_submit_headers(S.s, NGHTTP2_FLAG_NONE, S.last_stream, NULL, early, 2, NULL);
    CHECK(to_client(c, 2000) == 0, "the 103");
    CHECK(h2_settings_seen(c), "the server's SETTINGS are in");
    CHECK(a.resets == 1 && a.ended == 0 && a.nlines == 0, "a 103 is not the answer: its lines forgotten");
    nghttp2_submit_response(S.s, S.last_stream, head, 3, &prd);
    CHECK(to_client(c, 3000) == 0, "headers and body");
    CHECK(a.resets == 1, "one interim response (%d)", a.resets);
    CHECK(a.ended == 0 && a.c.status == 201 && a.c.major == 2, "status %u", a.c.status);
    CHECK(strcmp(a.lines, "content-type: application/json\nx-multi: a\n") == 0, "lines: %s", a.lines);
    CHECK(a.nbody == 13 && memcmp(a.body, "{\"id\":\"lz-1\"}", 13) == 0, "body: %.*s", (int)a.nbody, a.body);
    CHECK(a.c.t_ttfb == 2000 - 1000, "first byte at the first read's stamp: %llu", (unsigned long long)a.c.t_ttfb);
    nghttp2_submit_trailer(S.s, S.last_stream, tr, 2);
    CHECK(to_client(c, 4000) == 0, "trailers");
    CHECK(a.ended == 1 && a.err == H1_OK, "ended OK (%d, %d)", a.ended, a.err);
    CHECK(a.c.t_end == 4000, "ended at the stamp of the read with END_STREAM: %llu", (unsigned long long)a.c.t_end);
    CHECK(strcmp(a.trailers, "grpc-status: 0\nx-t: done\n") == 0, "trailers: %s", a.trailers);
    CHECK(h2_open(c) == 0, "no stream open");
  }

  /* room: the server's SETTINGS_MAX_CONCURRENT_STREAMS, capped by the local limit */
  {
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 3}};
    nghttp2_submit_settings(S.s, NGHTTP2_FLAG_NONE, iv, 1);
    CHECK(to_client(c, 5000) == 0, "settings");
    CHECK(h2_room(c, 100) == 3 && h2_room(c, 2) == 2, "room %u / %u", h2_room(c, 100), h2_room(c, 2));
  }

  /* a GET (no body: the stream ends with its headers), reset by the server: H1_EH2STREAM */
  call_init(&b, "GET /x HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n", NULL);
  CHECK(h2_submit(c, &b.c) == 0 && h2_flush(c) == 0, "a second stream");
  to_server();
  CHECK(strstr(S.seen, ":method: GET\n") && strstr(S.seen, ":authority: h\n"), "GET: %s", S.seen);
  nghttp2_submit_rst_stream(S.s, NGHTTP2_FLAG_NONE, S.last_stream, NGHTTP2_INTERNAL_ERROR);
  CHECK(to_client(c, 6000) == 0, "reset");
  CHECK(b.ended == 1 && b.err == H1_EH2STREAM, "reset: %d, %d", b.ended, b.err);

  /* refused before it was processed: sent again elsewhere, and the session takes no new stream */
  call_init(&b, "GET /y HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
  CHECK(h2_submit(c, &b.c) == 0 && h2_flush(c) == 0, "a third stream");
  to_server();
  nghttp2_submit_rst_stream(S.s, NGHTTP2_FLAG_NONE, S.last_stream, NGHTTP2_REFUSED_STREAM);
  CHECK(to_client(c, 7000) == 0, "refused");
  CHECK(b.ended == 1 && b.err == H1_ERETRY, "refused: %d, %d", b.ended, b.err);
  CHECK(!h2_usable(c) && h2_room(c, 100) == 0, "a session that refused a stream takes no more");
  h2_free(c);

  /* a GOAWAY before a stream was processed: it is sent again; expiry ends the calls left */
  server_new();
  nwire = 0;
  c = h2_new(&OPS, NULL, 0);
  call_init(&a, "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
  call_init(&b, "GET /b HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
  b.c.deadline = 9000000000ull;
  h2_submit(c, &a.c);
  h2_submit(c, &b.c);
  h2_flush(c);
  to_server();
  nghttp2_submit_goaway(S.s, NGHTTP2_FLAG_NONE, 1, NGHTTP2_NO_ERROR, NULL, 0); /* stream 1 taken, 3 not */
  CHECK(to_client(c, 8000) == 0, "goaway");
  CHECK(b.ended == 1 && b.err == H1_ERETRY && a.ended == 0, "past the GOAWAY's last stream: %d %d, %d", b.ended,
        b.err, a.ended);
  CHECK(!h2_usable(c), "no new stream after a GOAWAY");
  a.c.deadline = 9500000000ull; /* (ns: within a millisecond of it counts as past it) */
  CHECK(h2_expire(c, 8000000000ull) == 9500000000ull && a.ended == 0, "not yet past its deadline");
  CHECK(h2_expire(c, 9499500000ull) == 0 && a.ended == 1 && a.err == H1_ETIMEDOUT, "expired: %d %d", a.ended, a.err);

  /* the connection failed: every open stream ends with the error given */
  call_init(&a, "GET /c HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
  h2_free(c);
  c = h2_new(&OPS, NULL, 0);
  h2_submit(c, &a.c);
  h2_fail_all(c, H1_ERECV, 104);
  CHECK(a.ended == 1 && a.err == H1_ERECV && h2_open(c) == 0, "failed with the connection");
  h2_free(c);
  nghttp2_session_del(S.s);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
