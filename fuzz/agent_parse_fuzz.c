/* agent_parse_fuzz.c — libFuzzer target for microvm-agent/agent_parse.c, the microvm-agent's parsers
 * of untrusted bytes. The input's first byte picks the parser (the rest is its input):
 *   0 HTTP request head (the head's pointers must stay inside the input, lengths consistent);
 *   1 chunked body, fed whole and then in chunks from a generator seeded by the input: both
 *     feedings must agree (same result, same decoded bytes);
 *   2 query string lookup of "dir" and "path";
 *   3 JSON: parse; the escaped form of the input must itself parse back to the same bytes
 *     when the input is valid UTF-8 without U+FFFD replacements needed;
 *   4 tar members (sizes within the input), and ap_safe_relpath on every member name
 *     (never absolute, never a ".." component);
 *   5 tar_header round trip: a header written for a name taken from the input reads back
 *     with the same name, type and size.
 * Seeds: fuzz/corpus/agent_parse. */
#include "agent_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_safe(const char *name) {
  char out[TAR_NAME_MAX + 1];
  if (ap_safe_relpath(name, out, sizeof out) != 0) return;
  if (out[0] == '/') __builtin_trap();
  const char *p = out;
  while (*p) {
    const char *s = p;
    while (*p && *p != '/') p++;
    size_t n = (size_t)(p - s);
    if (n == 0) __builtin_trap(); /* no empty component */
    if (n == 2 && s[0] == '.' && s[1] == '.') __builtin_trap();
    if (n == 1 && s[0] == '.') __builtin_trap();
    if (*p) p++;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int mode = data[0] % 6;
  const char *in = (const char *)data + 1;
  size_t n = size - 1;
  switch (mode) {
    case 0: {
      struct ap_request r;
      long hl = ap_parse_head(in, n, &r);
      if (hl > 0) {
        if ((size_t)hl > n) __builtin_trap();
        if (r.method < in || r.method + r.method_len > in + hl) __builtin_trap();
        if (r.target < in || r.target + r.target_len > in + hl) __builtin_trap();
        if (r.path_len + (r.query_len ? r.query_len + 1 : 0) > r.target_len) __builtin_trap();
        if (r.nheaders > AP_MAX_HEADERS) __builtin_trap();
        for (size_t k = 0; k < r.nheaders; k++)
          if (r.headers[k].value + r.headers[k].value_len > in + hl) __builtin_trap();
        ap_header(&r, "x-cseng-agent-token");
      }
      break;
    }
    case 1: {
      char *a = malloc(n + 1), *b = malloc(n + 1);
      struct ap_chunked c1 = {0}, c2 = {0};
      size_t ao = 0, used = 0;
      int r1 = ap_chunked_feed(&c1, in, n, a, &ao, &used);
      size_t bo = 0, off = 0;
      int r2 = 0;
      uint32_t seed = (uint32_t)n * 2654435761u;
      while (off < n) {
        seed = seed * 1103515245u + 12345u;
        size_t step = 1 + (seed >> 16) % 7;
        if (step > n - off) step = n - off;
        size_t o = 0, k = 0;
        r2 = ap_chunked_feed(&c2, in + off, step, b + bo, &o, &k);
        bo += o;
        off += k;
        if (r2 != 0) break;
        if (k != step) __builtin_trap(); /* a 0 result consumes everything it was given */
      }
      if (r1 != r2) __builtin_trap();
      if (r1 >= 0 && (ao != bo || memcmp(a, b, ao))) __builtin_trap();
      free(a);
      free(b);
      break;
    }
    case 2: {
      char *v = NULL;
      size_t vl = 0;
      if (ap_query_get(in, n, "dir", &v, &vl) == 1) {
        if (strlen(v) > vl) __builtin_trap();
        free(v);
      }
      if (ap_query_get(in, n, "path", &v, &vl) == 1) free(v);
      break;
    }
    case 3: {
      char err[128];
      struct jv *v = json_parse(in, n, err, sizeof err);
      if (v) {
        json_get(v, "argv");
        json_free(v);
      }
      struct buf b = {0};
      if (json_escape(&b, in, n) == 0) {
        struct jv *s = json_parse(b.p, b.len, err, sizeof err);
        if (!s || s->type != J_STR) __builtin_trap(); /* our own output always parses */
        if (s->len == n && memcmp(s->str, in, n) != 0) __builtin_trap();
        json_free(s);
      }
      buf_free(&b);
      break;
    }
    case 4: {
      struct tar_reader t = {in, n, 0};
      static struct tar_entry e;
      char err[256];
      for (int k = 0; k < 1000; k++) {
        int r = tar_next(&t, &e, err, sizeof err);
        if (r <= 0) break;
        if (e.data < in || e.size > n || e.data + e.size > in + n) __builtin_trap();
        if (t.off > n) __builtin_trap();
        check_safe(e.name);
      }
      break;
    }
    case 5: {
      char name[300];
      size_t l = n < sizeof name - 1 ? n : sizeof name - 1;
      memcpy(name, in, l);
      name[l] = 0;
      for (size_t k = 0; k < l; k++)
        if (name[k] == '\n') name[k] = '_';
      l = strlen(name);
      if (!l) break;
      struct buf b = {0};
      if (tar_header(&b, name, '0', 3, 0644, 0, NULL) == 0 && buf_add(&b, "abc", 3) == 0) {
        static const char zeros[1024 + 509];
        buf_add(&b, zeros, sizeof zeros);
        struct tar_reader t = {b.p, b.len, 0};
        static struct tar_entry e;
        char err[256];
        if (tar_next(&t, &e, err, sizeof err) != 1) __builtin_trap();
        if (strcmp(e.name, name) || e.type != '0' || e.size != 3 || memcmp(e.data, "abc", 3))
          __builtin_trap();
      }
      check_safe(name);
      buf_free(&b);
      break;
    }
  }
  return 0;
}
