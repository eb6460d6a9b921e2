/* aux_test: cs_utoa against snprintf's %llu, at the edges and on a pseudo-random sweep. */
#include "../../engine/aux.h"
#include "check.h"

#include <inttypes.h>
#include <string.h>

static int same(uint64_t v) {
  char want[32], got[32];
  size_t n = cs_utoa(got, v);
  int wn = snprintf(want, sizeof want, "%" PRIu64, v);
  got[n] = 0;
  if ((int)n == wn && strcmp(got, want) == 0) return 1;
  printf("%" PRIu64 ": got '%s' (%zu), want '%s'\n", v, got, n, want);
  return 0;
}

int main(void) {
  uint64_t x = 88172645463325252u, p = 1;
  int bad = 0;
  CHECK(same(0) && same(UINT64_MAX), "the ends");
  for (int i = 0; i < 20; i++, p *= 10) bad += !same(p - 1) + !same(p) + !same(p + 1);
  CHECK(bad == 0, "%d powers of ten (and their neighbours) differ", bad);
  bad = 0;
  for (int i = 0; i < 100000; i++) { /* xorshift64, every magnitude */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    bad += !same(x >> (i % 64));
  }
  CHECK(bad == 0, "%d of 100,000 pseudo-random values differ", bad);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
