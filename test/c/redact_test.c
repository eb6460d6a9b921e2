/* redact_test.c: unit tests for engine/redact.c (the C secret set and cs_redact).
 *
 * Whole secrets (several hits, overlapping and adjacent ones merged into one marker), every
 * 8-byte run of a fragment secret at every offset, secrets of 6-7 bytes (whole only), texts
 * without a secret left byte for byte (NULs included), and clear. Built with ASan/UBSan by the
 * Makefile. Prints "N passed, N failed". */
#include "redact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* cs_redact(in) == want */
static void expect(const char *in, const char *want) {
  size_t n;
  char *out = cs_redact(in, strlen(in), &n);
  CHECK(out && n == strlen(want) && strcmp(out, want) == 0, "'%s' -> '%s', want '%s'", in,
        out ? out : "(null)", want);
  free(out);
}

int main(void) {
  const char *key = "sk-ABCDEFGHIJKLMNOP";
  char buf[256];
  expect("nothing to hide", "nothing to hide");
  CHECK(cs_redact_add(key, strlen(key), 1), "add");
  CHECK(cs_redact_add("b64form==", 9, 0), "add");
  CHECK(cs_redact_add("tiny6!", 6, 1), "add"); /* below 8 bytes: whole only */
  CHECK(cs_redact_add("short", 5, 1), "add");  /* below 6 bytes: ignored */
  expect("key=sk-ABCDEFGHIJKLMNOP end", "key=[redacted] end");
  expect("sk-ABCDEFGHIJKLMNOPsk-ABCDEFGHIJKLMNOP", "[redacted]"); /* adjacent: one marker */
  expect("a sk-ABCDEFGHIJKLMNOP b sk-ABCDEFGHIJKLMNOP", "a [redacted] b [redacted]"); /* every hit */
  expect("x b64form== y b64form", "x [redacted] y b64form"); /* an encoded form: whole only */
  expect("b64form== and b64form==", "[redacted] and [redacted]");
  expect("tiny6! tiny6 short", "[redacted] tiny6 short");
  /* every 8-byte run of the fragment secret, at every offset of the secret and of the text */
  for (size_t off = 0; off + 8 <= strlen(key); off++) {
    snprintf(buf, sizeof buf, "pre %.8s post", key + off);
    expect(buf, "pre [redacted] post");
  }
  snprintf(buf, sizeof buf, "cut %.7s", key + 3); /* 7 bytes: below the fragment size */
  expect(buf, buf);
  {
    const char in[] = "nul\0sk-ABCDEFGH\0end"; /* binary text: NULs kept, the run hidden */
    const char want[] = "nul\0[redacted]\0end";
    size_t n;
    char *out = cs_redact(in, sizeof in - 1, &n);
    CHECK(out && n == sizeof want - 1 && memcmp(out, want, n) == 0, "binary text");
    free(out);
  }
  cs_redact_clear();
  expect("key=sk-ABCDEFGHIJKLMNOP", "key=sk-ABCDEFGHIJKLMNOP");
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
