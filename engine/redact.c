/*
 * redact.c: the secret set the Lua redactor feeds, and redacted diagnostics (see redact.h).
 */
#include "redact.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char *s;
  size_t n;
  int frag;
} secret;

static secret *secrets;
static size_t nsecrets, capsecrets;

static const char MARK[] = "[redacted]";

void cs_redact_clear(void) {
  for (size_t i = 0; i < nsecrets; i++) free(secrets[i].s);
  free(secrets);
  secrets = NULL;
  nsecrets = capsecrets = 0;
}

int cs_redact_add(const char *s, size_t n, int fragments) {
  char *copy;
  if (n < 6) return 1;
  for (size_t i = 0; i < nsecrets; i++)
    if (secrets[i].n == n && memcmp(secrets[i].s, s, n) == 0) {
      secrets[i].frag |= fragments;
      return 1;
    }
  if (nsecrets == capsecrets) {
    size_t cap = capsecrets ? capsecrets * 2 : 16;
    secret *p = realloc(secrets, cap * sizeof *p);
    if (!p) return 0;
    secrets = p;
    capsecrets = cap;
  }
  copy = malloc(n);
  if (!copy) return 0;
  memcpy(copy, s, n);
  secrets[nsecrets].s = copy;
  secrets[nsecrets].n = n;
  secrets[nsecrets].frag = fragments;
  nsecrets++;
  return 1;
}

/* Marks every byte of s that belongs to a secret or to a fragment run of one. */
static void mark(const char *s, size_t n, unsigned char *m) {
  for (size_t k = 0; k < nsecrets; k++) {
    const secret *e = &secrets[k];
    const char *p = s, *end = s + n;
    while ((size_t)(end - p) >= e->n) {
      const char *hit = memmem(p, (size_t)(end - p), e->s, e->n);
      if (!hit) break;
      memset(m + (hit - s), 1, e->n);
      p = hit + 1;
    }
    if (!e->frag || n < CS_REDACT_FRAG || e->n < CS_REDACT_FRAG) continue;
    for (size_t i = 0; i + CS_REDACT_FRAG <= n; i++) {
      if (!memchr(m + i, 0, CS_REDACT_FRAG)) continue; /* already hidden */
      if (memmem(e->s, e->n, s + i, CS_REDACT_FRAG)) memset(m + i, 1, CS_REDACT_FRAG);
    }
  }
}

char *cs_redact(const char *s, size_t n, size_t *outlen) {
  unsigned char *m = NULL;
  char *out;
  size_t o = 0, runs = 0;
  if (nsecrets && n >= 6) {
    m = calloc(n, 1);
    if (!m) return NULL;
    mark(s, n, m);
    for (size_t i = 0; i < n; i++)
      if (m[i] && (i == 0 || !m[i - 1])) runs++;
  }
  out = malloc(n + runs * (sizeof MARK - 1) + 1);
  if (!out) {
    free(m);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (m && m[i]) {
      if (i == 0 || !m[i - 1]) {
        memcpy(out + o, MARK, sizeof MARK - 1);
        o += sizeof MARK - 1;
      }
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  free(m);
  if (outlen) *outlen = o;
  return out;
}

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(2, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

void cs_diag(const char *fmt, ...) {
  va_list ap;
  char *raw, *red, *esc;
  size_t n, o = 0;
  int len;
  va_start(ap, fmt);
  len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (len < 0) return;
  raw = malloc((size_t)len + 1);
  if (!raw) return;
  va_start(ap, fmt);
  vsnprintf(raw, (size_t)len + 1, fmt, ap);
  va_end(ap);
  red = cs_redact(raw, (size_t)len, &n);
  free(raw);
  if (!red) { /* out of memory: say that much, never the unredacted text */
    static const char oom[] = "cseng: (a diagnostic was dropped: out of memory)\n";
    write_all(oom, sizeof oom - 1);
    return;
  }
  esc = malloc(n * 4 + 1);
  if (esc) {
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)red[i];
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) o += (size_t)sprintf(esc + o, "\\x%02x", c);
      else esc[o++] = (char)c;
    }
    write_all(esc, o);
    free(esc);
  }
  free(red);
}
