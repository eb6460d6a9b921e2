/* h2_fuzz.c: libFuzzer target for engine/h2.c, the native client's HTTP/2 sessions: whatever a
 * server sends (the input, after the server's SETTINGS, fed in pieces as reads) must never crash
 * the session or its callbacks (the response's fields turned into the owner's lines, interim
 * responses, trailers, bodies, resets, GOAWAYs), and every call must end exactly once: by the
 * server's frames, by the session failing, or at its deadline. The frames' parsing is
 * nghttp2's; what is checked is the code around it. Seeds in fuzz/corpus/h2. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "h2.h"

#define CALLS 3

typedef struct {
  h1_call c;
  int ended, lines, chunks, abort_after;
} call_t;

static int on_line(h1_call *c, const char *p, size_t n, int trailer) {
  (void)p, (void)n, (void)trailer;
  ((call_t *)c)->lines++;
  return 0;
}

static int on_body(h1_call *c, const char *p, size_t n) {
  call_t *t = (call_t *)c;
  (void)p, (void)n;
  return ++t->chunks == t->abort_after; /* the owner refuses a chunk now and then: the stream is reset */
}

static int w(void *conn, const uint8_t *p, size_t n) {
  (void)conn, (void)p, (void)n;
  return 0;
}

static void ended(void *conn, h1_call *c, int err, int os_errno) {
  call_t *t = (call_t *)c;
  (void)conn, (void)err, (void)os_errno;
  if (t->ended++) {
    fprintf(stderr, "a call ended twice\n");
    abort();
  }
}

static const h2_ops OPS = {w, ended};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *heads[CALLS] = {"GET /a HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n",
                                     "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nX-A: 1\r\n\r\n",
                                     "HEAD /c HTTP/1.1\r\nHost: h:8443\r\n\r\n"};
  static const uint8_t settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0}; /* an empty SETTINGS frame */
  call_t calls[CALLS];
  h2_sess *s;
  size_t cut;
  int broken = 0;
  if (size < 2) return 0;
  s = h2_new(&OPS, NULL, data[0] & 1);
  if (!s) return 0;
  memset(calls, 0, sizeof calls);
  for (int i = 0; i < CALLS; i++) {
    calls[i].c.send[0] = uv_buf_init((char *)heads[i], (unsigned)strlen(heads[i]));
    calls[i].c.nsend = 1;
    if (i == 1) {
      calls[i].c.send[1] = uv_buf_init("abc", 3);
      calls[i].c.nsend = 2;
    }
    calls[i].c.head_method = i == 2;
    calls[i].c.on_line = on_line;
    calls[i].c.on_body = on_body;
    calls[i].c.deadline = 1000000000ull * (uint64_t)(i + 1);
    calls[i].abort_after = (data[0] >> 1) & 3;
    if (h2_submit(s, &calls[i].c) != 0) abort();
  }
  h2_flush(s);
  cut = 1 + data[1] % (size - 1); /* the input in two reads */
  if (h2_input(s, (const char *)settings, sizeof settings, 1) != 0) abort();
  if (h2_input(s, (const char *)data + 2, cut > 2 ? cut - 2 : 0, 2) != 0) broken = 1;
  if (!broken && h2_input(s, (const char *)data + (cut > 2 ? cut : 2), size - (cut > 2 ? cut : 2), 3) != 0) broken = 1;
  h2_flush(s);
  if (broken) h2_fail_all(s, H1_EH2, 0);
  h2_expire(s, 10000000000ull); /* whatever is left ends at its deadline */
  for (int i = 0; i < CALLS; i++)
    if (calls[i].ended != 1) {
      fprintf(stderr, "call %d ended %d times\n", i, calls[i].ended);
      abort();
    }
  if (h2_open(s) != 0) abort();
  h2_free(s);
  return 0;
}
