#include <string.h>
#include "minicodec.h"

static int space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

long mc_kv_get(const char *text, const char *key, char *out, size_t cap) {
  long found = -1;
  size_t klen = strlen(key);
  const char *line = text;
  while (*line) {
    const char *end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    const char *p = line;
    while (p < end && space(*p)) p++;
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (p < end && *p != '#' && eq) {
      const char *ke = eq;
      while (ke > p && space(ke[-1])) ke--;
      if ((size_t)(ke - p) == klen && memcmp(p, key, klen) == 0) {
        const char *v = eq + 1, *ve = end;
        while (v < ve && space(*v)) v++;
        while (ve > v && space(ve[-1])) ve--;
        size_t vlen = (size_t)(ve - v);
        if (vlen + 1 > cap) {
          found = -2;
        } else {
          memcpy(out, v, vlen);
          out[vlen] = '\0';
          found = (long)vlen;
        }
      }
    }
    line = *end ? end + 1 : end;
  }
  return found;
}
