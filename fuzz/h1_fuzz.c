/* h1_fuzz.c: libFuzzer target for engine/h1.c's URL split (h1_url_split), the one part of the
 * native HTTP/1.1 path that is hand-written parsing (responses are Debian's http_parser). Every
 * URL it takes must be read the same way by libcurl's own parser (fuzz/h1_check.h): the same
 * host, port, path and query, so a request never goes somewhere libcurl would not send it.
 * Seeds in fuzz/corpus/h1. */
#include <stdint.h>
#include <stdlib.h>

#include "../fuzz/h1_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char url[2048];
  const char *why = NULL;
  if (size >= sizeof url) return 0;
  memcpy(url, data, size);
  url[size] = '\0';
  if (strlen(url) != size) return 0; /* a NUL inside: not a Lua string the engine would pass on */
  if (h1_check(url, &why) < 0) {
    fprintf(stderr, "h1_url_split took %s: %s\n", url, why);
    abort();
  }
  return 0;
}
