/* connect_test.c — unit tests for engine/connect.c (the Connect envelope codec).
 *
 * Streams are built here frame by frame and fed to the decoder cut at every possible
 * boundary (every split point, one byte at a time, random cuts); each way must give the
 * same frames. Hostile prefixes (a 4 GiB length, reserved flags, bytes after the
 * end-of-stream frame, a stream cut mid-header or mid-payload) must fail with their own
 * code and a message, without allocating for the declared length. Built with ASan/UBSan
 * by the Makefile. Prints "N passed, N failed". */
#include "connect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef struct {
  uint8_t p[1 << 16];
  size_t n;
} stream;

static void add_frame(stream *s, unsigned flags, const char *data, size_t len) {
  uint8_t hdr[CONNECT_HEADER_LEN];
  if (connect_header(hdr, flags, len) != 0) abort();
  memcpy(s->p + s->n, hdr, sizeof hdr);
  s->n += sizeof hdr;
  memcpy(s->p + s->n, data, len);
  s->n += len;
}

/* What the callback saw: frames concatenated as "flags:payload|". */
typedef struct {
  char text[1 << 17];
  size_t n;
  int frames;
  int stop_after; /* stop (return 1) after this many frames; 0 = never */
} seen;

static int on_frame(void *ud, unsigned flags, const uint8_t *data, size_t len) {
  seen *s = ud;
  s->n += (size_t)snprintf(s->text + s->n, sizeof s->text - s->n, "%u:", flags);
  memcpy(s->text + s->n, data, len);
  s->n += len;
  s->text[s->n++] = '|';
  s->text[s->n] = '\0';
  s->frames++;
  return s->stop_after && s->frames >= s->stop_after;
}

/* Feed st in pieces given by cuts[] (ascending offsets), then finish. */
static int feed_cut(const stream *st, const size_t *cuts, int ncuts, seen *out, size_t max_frame,
                    int *finish_rc) {
  connect_decoder d;
  size_t at = 0;
  int rc = CONNECT_OK;
  connect_decoder_init(&d, max_frame);
  memset(out, 0, sizeof *out);
  for (int i = 0; i <= ncuts && rc == CONNECT_OK; i++) {
    size_t end = i < ncuts ? cuts[i] : st->n;
    rc = connect_decoder_feed(&d, st->p + at, end - at, on_frame, out);
    at = end;
  }
  *finish_rc = connect_decoder_finish(&d);
  connect_decoder_free(&d);
  return rc;
}

static const char *E2B_FRAMES[] = {
    "{\"event\":{\"start\":{\"pid\":42}}}",
    "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8K\"}}}",
    "{\"event\":{\"keepalive\":{}}}",
    "",
    "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\"}}}",
};

static void build_e2b(stream *st) {
  memset(st, 0, sizeof *st);
  for (size_t i = 0; i < sizeof E2B_FRAMES / sizeof *E2B_FRAMES; i++)
    add_frame(st, 0, E2B_FRAMES[i], strlen(E2B_FRAMES[i]));
  add_frame(st, CONNECT_FLAG_END_STREAM, "{}", 2);
}

static void test_whole_and_every_split(void) {
  stream st;
  seen whole, part;
  int frc;
  build_e2b(&st);
  CHECK(feed_cut(&st, NULL, 0, &whole, 0, &frc) == CONNECT_OK, "whole stream");
  CHECK(frc == CONNECT_OK, "finish rc %d", frc);
  CHECK(whole.frames == 6, "frames %d", whole.frames);
  CHECK(strstr(whole.text, "0:|") != NULL, "empty frame delivered: %s", whole.text);
  CHECK(strcmp(whole.text + whole.n - 5, "2:{}|") == 0, "last frame is end-of-stream: %s", whole.text);
  int bad = 0;
  for (size_t c = 0; c <= st.n; c++) { /* one cut at every offset */
    size_t cuts[1] = {c};
    if (feed_cut(&st, cuts, 1, &part, 0, &frc) != CONNECT_OK || frc != CONNECT_OK ||
        strcmp(part.text, whole.text) != 0)
      bad++;
  }
  CHECK(bad == 0, "%d single splits differ", bad);
  bad = 0;
  for (size_t a = 0; a <= st.n; a += 3) /* two cuts */
    for (size_t b = a; b <= st.n; b += 7) {
      size_t cuts[2] = {a, b};
      if (feed_cut(&st, cuts, 2, &part, 0, &frc) != CONNECT_OK || frc != CONNECT_OK ||
          strcmp(part.text, whole.text) != 0)
        bad++;
    }
  CHECK(bad == 0, "%d double splits differ", bad);
}

static void test_byte_at_a_time(void) {
  stream st;
  seen whole, part;
  int frc;
  size_t cuts[4096];
  build_e2b(&st);
  feed_cut(&st, NULL, 0, &whole, 0, &frc);
  for (size_t i = 0; i < st.n; i++) cuts[i] = i + 1;
  CHECK(feed_cut(&st, cuts, (int)st.n, &part, 0, &frc) == CONNECT_OK, "byte at a time");
  CHECK(frc == CONNECT_OK && strcmp(part.text, whole.text) == 0, "same frames: %s", part.text);
}

static void test_random_cuts(void) {
  stream st;
  seen whole, part;
  int frc, bad = 0;
  unsigned seed = 12345;
  build_e2b(&st);
  /* a big frame too, so the gathering buffer grows several times */
  static char big[40000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
  st.n -= CONNECT_HEADER_LEN + 2; /* drop the end frame, add big, re-add the end */
  add_frame(&st, 0, big, sizeof big);
  add_frame(&st, CONNECT_FLAG_END_STREAM, "{}", 2);
  feed_cut(&st, NULL, 0, &whole, 0, &frc);
  CHECK(whole.frames == 7, "frames %d", whole.frames);
  for (int round = 0; round < 300; round++) {
    size_t cuts[64];
    int n = 0;
    size_t at = 0;
    while (n < 64) {
      seed = seed * 1103515245u + 12345u;
      at += (seed >> 8) % 3000;
      if (at >= st.n) break;
      cuts[n++] = at;
    }
    if (feed_cut(&st, cuts, n, &part, 0, &frc) != CONNECT_OK || frc != CONNECT_OK || part.n != whole.n ||
        memcmp(part.text, whole.text, whole.n) != 0)
      bad++;
  }
  CHECK(bad == 0, "%d random cuttings differ", bad);
}

static void test_too_big(void) {
  stream st = {0};
  seen s;
  int frc;
  char msg[200];
  /* a 4 GiB - 1 declared length: refused at the header, nothing allocated for it */
  uint8_t hdr[5] = {0, 0xff, 0xff, 0xff, 0xff};
  memcpy(st.p, hdr, 5);
  st.n = 5;
  connect_decoder d;
  connect_decoder_init(&d, 0);
  CHECK(connect_decoder_feed(&d, st.p, st.n, on_frame, &s) == CONNECT_ETOOBIG, "4 GiB length refused");
  CHECK(d.buf == NULL, "no buffer allocated");
  connect_decoder_message(&d, msg, sizeof msg);
  CHECK(strstr(msg, "4294967295") && strstr(msg, "limit"), "message: %s", msg);
  CHECK(connect_decoder_feed(&d, (const uint8_t *)"x", 1, on_frame, &s) == CONNECT_ETOOBIG, "sticky");
  CHECK(connect_decoder_finish(&d) == CONNECT_ETOOBIG, "finish reports it too");
  connect_decoder_free(&d);

  /* the limit is exact: max_frame bytes pass, max_frame + 1 do not */
  memset(&st, 0, sizeof st);
  add_frame(&st, 0, "0123456789", 10);
  CHECK(feed_cut(&st, NULL, 0, &s, 10, &frc) == CONNECT_OK && s.frames == 1, "10 bytes with a limit of 10");
  CHECK(feed_cut(&st, NULL, 0, &s, 9, &frc) == CONNECT_ETOOBIG && s.frames == 0,
        "10 bytes with a limit of 9");
}

static void test_flags(void) {
  stream st = {0};
  seen s;
  int frc;
  char msg[200];
  add_frame(&st, 0, "a", 1);
  add_frame(&st, 0x80, "b", 1);
  connect_decoder d;
  connect_decoder_init(&d, 0);
  memset(&s, 0, sizeof s);
  CHECK(connect_decoder_feed(&d, st.p, st.n, on_frame, &s) == CONNECT_EFLAGS, "reserved bit refused");
  CHECK(s.frames == 1, "the frame before it was delivered (%d)", s.frames);
  connect_decoder_message(&d, msg, sizeof msg);
  CHECK(strstr(msg, "0x80") && strstr(msg, "frame 2"), "message: %s", msg);
  connect_decoder_free(&d);
  /* compressed (0x01) is a known flag: delivered, the caller decides */
  memset(&st, 0, sizeof st);
  add_frame(&st, CONNECT_FLAG_COMPRESSED, "z", 1);
  CHECK(feed_cut(&st, NULL, 0, &s, 0, &frc) == CONNECT_OK && strcmp(s.text, "1:z|") == 0, "compressed: %s",
        s.text);
}

static void test_after_end(void) {
  stream st = {0};
  seen s;
  int frc;
  add_frame(&st, CONNECT_FLAG_END_STREAM, "{}", 2);
  add_frame(&st, 0, "late", 4);
  CHECK(feed_cut(&st, NULL, 0, &s, 0, &frc) == CONNECT_EAFTEREND, "bytes after the end frame");
  CHECK(s.frames == 1, "end frame delivered first");
  size_t cuts[1] = {7}; /* the late frame in a second chunk */
  CHECK(feed_cut(&st, cuts, 1, &s, 0, &frc) == CONNECT_EAFTEREND, "in a later chunk too");
  /* an end frame alone, then finish: fine */
  memset(&st, 0, sizeof st);
  add_frame(&st, CONNECT_FLAG_END_STREAM, "{\"error\":{\"code\":\"unavailable\"}}", 32);
  CHECK(feed_cut(&st, NULL, 0, &s, 0, &frc) == CONNECT_OK && frc == CONNECT_OK, "error end frame");
}

static void test_truncated(void) {
  stream st;
  seen s;
  char msg[200];
  build_e2b(&st);
  int bad = 0;
  for (size_t cut = 1; cut < st.n; cut++) { /* every proper prefix that is not a frame boundary */
    connect_decoder d;
    connect_decoder_init(&d, 0);
    memset(&s, 0, sizeof s);
    int rc = connect_decoder_feed(&d, st.p, cut, on_frame, &s);
    int frc = connect_decoder_finish(&d);
    int boundary = d.hdr_len == 0;
    if (rc != CONNECT_OK || (boundary ? frc != CONNECT_OK : frc != CONNECT_ETRUNCATED)) bad++;
    connect_decoder_free(&d);
  }
  CHECK(bad == 0, "%d prefixes misjudged", bad);
  connect_decoder d;
  connect_decoder_init(&d, 0);
  connect_decoder_feed(&d, st.p, 3, NULL, NULL);
  CHECK(connect_decoder_finish(&d) == CONNECT_ETRUNCATED, "mid-header");
  connect_decoder_message(&d, msg, sizeof msg);
  CHECK(strstr(msg, "header") && strstr(msg, "3 of 5"), "message: %s", msg);
  connect_decoder_free(&d);
  connect_decoder_init(&d, 0);
  connect_decoder_feed(&d, st.p, 9, NULL, NULL);
  CHECK(connect_decoder_finish(&d) == CONNECT_ETRUNCATED, "mid-payload");
  connect_decoder_message(&d, msg, sizeof msg);
  CHECK(strstr(msg, "4 of 30 payload bytes"), "message: %s", msg);
  connect_decoder_free(&d);
  /* an empty stream is a clean boundary */
  connect_decoder_init(&d, 0);
  CHECK(connect_decoder_finish(&d) == CONNECT_OK && !d.ended, "empty stream");
  connect_decoder_free(&d);
}

static void test_stop(void) {
  stream st;
  seen s;
  build_e2b(&st);
  connect_decoder d;
  connect_decoder_init(&d, 0);
  memset(&s, 0, sizeof s);
  s.stop_after = 2;
  CHECK(connect_decoder_feed(&d, st.p, st.n, on_frame, &s) == CONNECT_ESTOPPED, "callback stops");
  CHECK(s.frames == 2, "two frames (%d)", s.frames);
  CHECK(connect_decoder_feed(&d, st.p, 1, on_frame, &s) == CONNECT_ESTOPPED && s.frames == 2,
        "stays stopped");
  connect_decoder_free(&d);
}

static void test_header(void) {
  uint8_t h[5];
  CHECK(connect_header(h, 2, 258) == 0 && h[0] == 2 && h[1] == 0 && h[2] == 0 && h[3] == 1 && h[4] == 2,
        "bytes");
  CHECK(connect_header(h, 0, 0xffffffffull) == 0 && h[1] == 0xff && h[4] == 0xff, "max length");
  CHECK(connect_header(h, 0, 0x100000000ull) == -1, "length over 32 bits");
  CHECK(connect_header(h, 256, 1) == -1, "flags over a byte");
  for (int c = CONNECT_ESTOPPED; c <= CONNECT_OK; c++)
    CHECK(connect_strerror(c)[0] != '\0', "strerror %d", c);
}

int main(void) {
  test_whole_and_every_split();
  test_byte_at_a_time();
  test_random_cuts();
  test_too_big();
  test_flags();
  test_after_end();
  test_truncated();
  test_stop();
  test_header();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
