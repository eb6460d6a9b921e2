/* connect_fuzz.c — libFuzzer target for engine/connect.c, the Connect envelope decoder.
 *
 * The input's first byte picks a frame limit (small limits reach the over-limit path);
 * the rest is one response body, fed twice: whole, and in chunks whose sizes come from a
 * simple generator seeded by the input. Both feedings must agree exactly (same frames,
 * same result, same finish code), every frame must respect the limit and carry only
 * known flags, and no frame may follow an end-of-stream frame. Seeds in
 * fuzz/corpus/connect are E2B envd Process.Start responses and hostile prefixes. */
#include "connect.h"

#include <stdint.h>
#include <string.h>

typedef struct {
  uint64_t hash;
  size_t frames, bytes, max_frame;
  int ended;
} summary;

static int on_frame(void *ud, unsigned flags, const uint8_t *data, size_t len) {
  summary *s = ud;
  if (len > s->max_frame) __builtin_trap();
  if (flags & ~CONNECT_FLAGS_KNOWN) __builtin_trap();
  if (s->ended) __builtin_trap(); /* nothing after the end-of-stream frame */
  if (flags & CONNECT_FLAG_END_STREAM) s->ended = 1;
  s->hash = (s->hash ^ flags ^ len) * 1099511628211ull;
  for (size_t i = 0; i < len; i++) s->hash = (s->hash ^ data[i]) * 1099511628211ull;
  s->frames++;
  s->bytes += len;
  return 0;
}

static int run(const uint8_t *p, size_t n, size_t max_frame, uint32_t seed, summary *s, int *finish_rc) {
  connect_decoder d;
  int rc = CONNECT_OK;
  memset(s, 0, sizeof *s);
  s->hash = 1469598103934665603ull;
  s->max_frame = max_frame;
  connect_decoder_init(&d, max_frame);
  if (seed == 0) {
    rc = connect_decoder_feed(&d, p, n, on_frame, s);
  } else {
    size_t at = 0;
    while (at < n && rc == CONNECT_OK) {
      size_t step;
      seed = seed * 1664525u + 1013904223u;
      step = 1 + (seed >> 16) % 37;
      if (step > n - at) step = n - at;
      rc = connect_decoder_feed(&d, p + at, step, on_frame, s);
      at += step;
    }
  }
  *finish_rc = connect_decoder_finish(&d);
  if (rc != CONNECT_OK && *finish_rc != rc) __builtin_trap(); /* errors are sticky */
  {
    char msg[200];
    connect_decoder_message(&d, msg, sizeof msg);
    if (msg[0] == '\0') __builtin_trap();
  }
  connect_decoder_free(&d);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t limits[] = {0, 1, 7, 64, 1024, 1u << 20};
  summary a, b;
  int fa, fb, ra, rb;
  size_t max_frame;
  if (size < 1) return 0;
  max_frame = limits[data[0] % (sizeof limits / sizeof *limits)];
  if (max_frame == 0) max_frame = CONNECT_MAX_FRAME_DEFAULT;
  ra = run(data + 1, size - 1, max_frame, 0, &a, &fa);
  rb = run(data + 1, size - 1, max_frame, (uint32_t)size * 2654435761u | 1u, &b, &fb);
  if (ra != rb || fa != fb || a.frames != b.frames || a.bytes != b.bytes || a.hash != b.hash ||
      a.ended != b.ended)
    __builtin_trap();
  return 0;
}
