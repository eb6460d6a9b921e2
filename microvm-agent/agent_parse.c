/* Parsers of untrusted bytes for microvm-agent (see agent_parse.h). */
#include "agent_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buf */

int buf_reserve(struct buf *b, size_t extra) {
  if (extra > SIZE_MAX / 2 - b->len) return -1;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

int buf_add(struct buf *b, const void *p, size_t n) {
  if (buf_reserve(b, n)) return -1;
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  b->p[b->len] = 0;
  return 0;
}

int buf_str(struct buf *b, const char *s) { return buf_add(b, s, strlen(s)); }

int buf_printf(struct buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || buf_reserve(b, (size_t)n)) return -1;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

void buf_free(struct buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---------------------------------------------------------------- HTTP head */

static int is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return 1;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
  return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int ieq(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n != m) return 0;
  for (size_t i = 0; i < n; i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (char)(x + 32);
    if (y >= 'A' && y <= 'Z') y = (char)(y + 32);
    if (x != y) return 0;
  }
  return 1;
}

/* does value (a comma-separated list) contain token (case-insensitive)? */
static int has_token(const char *v, size_t n, const char *token) {
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',') i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e > s && ieq(v + s, e - s, token)) return 1;
  }
  return 0;
}

long ap_parse_head(const char *buf, size_t len, struct ap_request *r) {
  memset(r, 0, sizeof *r);
  r->content_length = -1;
  /* find the end of the head first */
  size_t end = 0;
  for (size_t i = 0; i + 1 < len; i++) {
    if (buf[i] == '\n' && buf[i + 1] == '\n') {
      end = i + 2;
      break;
    }
    if (i + 3 < len && buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
      end = i + 4;
      break;
    }
  }
  if (!end) return 0;
  size_t p = 0;
  /* request line: METHOD SP target SP HTTP/1.x CRLF */
  size_t s = p;
  while (p < end && is_tchar((unsigned char)buf[p])) p++;
  if (p == s || p >= end || buf[p] != ' ') return AP_E_BAD;
  r->method = buf + s;
  r->method_len = p - s;
  p++;
  s = p;
  while (p < end && buf[p] != ' ' && (unsigned char)buf[p] > 0x20 && buf[p] != 0x7f) p++;
  if (p == s || p >= end || buf[p] != ' ') return AP_E_BAD;
  r->target = buf + s;
  r->target_len = p - s;
  if (r->target[0] != '/') return AP_E_BAD;
  p++;
  if (end - p < 9 || memcmp(buf + p, "HTTP/", 5) != 0 || buf[p + 5] < '0' || buf[p + 5] > '9' ||
      buf[p + 6] != '.' || buf[p + 7] < '0' || buf[p + 7] > '9')
    return AP_E_BAD;
  if (buf[p + 5] != '1' || (buf[p + 7] != '0' && buf[p + 7] != '1')) return AP_E_VERSION;
  r->minor = buf[p + 7] - '0';
  p += 8;
  if (buf[p] == '\r') p++;
  if (p >= end || buf[p] != '\n') return AP_E_BAD;
  p++;
  const char *q = memchr(r->target, '?', r->target_len);
  r->path = r->target;
  r->path_len = q ? (size_t)(q - r->target) : r->target_len;
  r->query = q ? q + 1 : r->target + r->target_len;
  r->query_len = q ? r->target_len - r->path_len - 1 : 0;
  /* headers */
  for (;;) {
    if (p >= end) return AP_E_BAD;
    if (buf[p] == '\n') {
      p++;
      break;
    }
    if (buf[p] == '\r' && p + 1 < end && buf[p + 1] == '\n') {
      p += 2;
      break;
    }
    if (buf[p] == ' ' || buf[p] == '\t') return AP_E_BAD; /* obsolete line folding: refused (RFC 9112 5.2) */
    s = p;
    while (p < end && is_tchar((unsigned char)buf[p])) p++;
    if (p == s || p >= end || buf[p] != ':') return AP_E_BAD;
    size_t name_end = p;
    p++;
    while (p < end && (buf[p] == ' ' || buf[p] == '\t')) p++;
    size_t vs = p;
    while (p < end && buf[p] != '\r' && buf[p] != '\n') {
      unsigned char c = (unsigned char)buf[p];
      if ((c < 0x20 && c != '\t') || c == 0x7f) return AP_E_BAD;
      p++;
    }
    size_t ve = p;
    while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
    if (p < end && buf[p] == '\r') p++;
    if (p >= end || buf[p] != '\n') return AP_E_BAD;
    p++;
    if (r->nheaders == AP_MAX_HEADERS) return AP_E_TOO_MANY;
    struct ap_header *h = &r->headers[r->nheaders++];
    h->name = buf + s;
    h->name_len = name_end - s;
    h->value = buf + vs;
    h->value_len = ve - vs;
    if (ieq(h->name, h->name_len, "content-length")) {
      if (h->value_len == 0 || h->value_len > 18) return AP_E_BAD;
      long long v = 0;
      for (size_t i = 0; i < h->value_len; i++) {
        if (h->value[i] < '0' || h->value[i] > '9') return AP_E_BAD;
        v = v * 10 + (h->value[i] - '0');
      }
      if (r->content_length >= 0 && r->content_length != v) return AP_E_BAD;
      r->content_length = v;
    } else if (ieq(h->name, h->name_len, "transfer-encoding")) {
      if (!has_token(h->value, h->value_len, "chunked")) return AP_E_BAD; /* only chunked is understood */
      r->chunked = 1;
    } else if (ieq(h->name, h->name_len, "expect")) {
      if (has_token(h->value, h->value_len, "100-continue")) r->expect_continue = 1;
    }
  }
  if (r->chunked && r->content_length >= 0) return AP_E_BAD; /* request smuggling shape */
  return (long)p;
}

const struct ap_header *ap_header(const struct ap_request *r, const char *name) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (ieq(r->headers[i].name, r->headers[i].name_len, name)) return &r->headers[i];
  return NULL;
}

/* ---------------------------------------------------------------- chunked */

enum {
  CH_SIZE,
  CH_EXT,
  CH_SIZE_LF,
  CH_DATA,
  CH_DATA_CR,
  CH_DATA_LF,
  CH_TRAILER_START,
  CH_TRAILER,
  CH_END_LF,
  CH_DONE
};

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c |= 0x20;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int ap_chunked_feed(struct ap_chunked *c, const char *in, size_t len, char *out, size_t *out_len,
                    size_t *consumed) {
  size_t i = 0, o = 0;
  while (i < len && c->state != CH_DONE) {
    unsigned char ch = (unsigned char)in[i];
    switch (c->state) {
      case CH_SIZE: {
        int h = hexval(ch);
        if (h >= 0) {
          if (c->digits >= 15) return -1;
          c->remaining = c->remaining * 16 + (uint64_t)h;
          c->digits++;
          i++;
        } else if (c->digits && (ch == ';' || ch == ' ' || ch == '\t')) {
          c->state = CH_EXT;
          i++;
        } else if (c->digits && ch == '\r') {
          c->state = CH_SIZE_LF;
          i++;
        } else if (c->digits && ch == '\n') {
          i++;
          c->state = c->remaining ? CH_DATA : CH_TRAILER_START;
        } else {
          return -1;
        }
        break;
      }
      case CH_EXT:
        if (ch == '\r') c->state = CH_SIZE_LF;
        else if (ch == '\n') c->state = c->remaining ? CH_DATA : CH_TRAILER_START;
        else if (ch < 0x20 && ch != '\t') return -1;
        i++;
        break;
      case CH_SIZE_LF:
        if (ch != '\n') return -1;
        i++;
        c->state = c->remaining ? CH_DATA : CH_TRAILER_START;
        break;
      case CH_DATA: {
        size_t n = len - i;
        if (n > c->remaining) n = (size_t)c->remaining;
        memcpy(out + o, in + i, n);
        o += n;
        i += n;
        c->remaining -= n;
        if (!c->remaining) c->state = CH_DATA_CR;
        break;
      }
      case CH_DATA_CR:
        if (ch == '\r') {
          c->state = CH_DATA_LF;
          i++;
        } else if (ch == '\n') {
          c->state = CH_SIZE;
          c->digits = 0;
          i++;
        } else return -1;
        break;
      case CH_DATA_LF:
        if (ch != '\n') return -1;
        i++;
        c->state = CH_SIZE;
        c->digits = 0;
        c->remaining = 0;
        break;
      case CH_TRAILER_START:
        if (ch == '\r') {
          c->state = CH_END_LF;
          i++;
        } else if (ch == '\n') {
          c->state = CH_DONE;
          i++;
        } else {
          c->state = CH_TRAILER;
        }
        break;
      case CH_TRAILER:
        if (ch == '\n') c->state = CH_TRAILER_START;
        else if (ch < 0x20 && ch != '\t' && ch != '\r') return -1;
        i++;
        break;
      case CH_END_LF:
        if (ch != '\n') return -1;
        i++;
        c->state = CH_DONE;
        break;
    }
  }
  *out_len = o;
  *consumed = i;
  return c->state == CH_DONE;
}

/* ---------------------------------------------------------------- query */

static int pct_decode(const char *s, size_t n, int plus_space, char **out, size_t *out_len) {
  char *d = malloc(n + 1);
  if (!d) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (n - i < 3) {
        free(d);
        return -1;
      }
      int a = hexval((unsigned char)s[i + 1]), b = hexval((unsigned char)s[i + 2]);
      if (a < 0 || b < 0) {
        free(d);
        return -1;
      }
      d[o++] = (char)(a * 16 + b);
      i += 2;
    } else if (s[i] == '+' && plus_space) {
      d[o++] = ' ';
    } else {
      d[o++] = s[i];
    }
  }
  d[o] = 0;
  *out = d;
  if (out_len) *out_len = o;
  return 1;
}

int ap_query_get(const char *q, size_t qlen, const char *name, char **out, size_t *out_len) {
  size_t nlen = strlen(name);
  size_t i = 0;
  while (i <= qlen) {
    size_t s = i;
    while (i < qlen && q[i] != '&') i++;
    const char *eq = memchr(q + s, '=', i - s);
    size_t klen = eq ? (size_t)(eq - (q + s)) : i - s;
    char *k;
    size_t kl;
    if (klen) {
      if (pct_decode(q + s, klen, 1, &k, &kl) < 0) return -1;
      int match = kl == nlen && memcmp(k, name, nlen) == 0;
      free(k);
      if (match) {
        if (!eq) return pct_decode("", 0, 1, out, out_len);
        return pct_decode(eq + 1, (size_t)(q + i - (eq + 1)), 1, out, out_len);
      }
    }
    i++;
  }
  return 0;
}

/* ---------------------------------------------------------------- JSON */

struct jp {
  const char *s;
  size_t n, i;
  char *err;
  size_t errlen;
  int failed;
};

static void jerr(struct jp *p, const char *msg) {
  if (!p->failed) snprintf(p->err, p->errlen, "JSON: %s at offset %zu", msg, p->i);
  p->failed = 1;
}

static void jws(struct jp *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
    p->i++;
}

static void put_utf8(struct buf *b, unsigned long cp, int *oom) {
  char t[4];
  size_t n;
  if (cp < 0x80) {
    t[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    t[0] = (char)(0xc0 | (cp >> 6));
    t[1] = (char)(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    t[0] = (char)(0xe0 | (cp >> 12));
    t[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    t[2] = (char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    t[0] = (char)(0xf0 | (cp >> 18));
    t[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    t[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    t[3] = (char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  if (buf_add(b, t, n)) *oom = 1;
}

static int hex4(struct jp *p, unsigned long *v) {
  if (p->n - p->i < 4) return -1;
  unsigned long x = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval((unsigned char)p->s[p->i + (size_t)k]);
    if (h < 0) return -1;
    x = x * 16 + (unsigned long)h;
  }
  p->i += 4;
  *v = x;
  return 0;
}

/* parse a string at p->i (the opening quote); returns a malloc'd string */
static char *jstring(struct jp *p, size_t *len) {
  struct buf b = {0};
  int oom = 0;
  p->i++; /* quote */
  for (;;) {
    if (p->i >= p->n) {
      jerr(p, "unterminated string");
      break;
    }
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') {
      p->i++;
      if (buf_reserve(&b, 0)) {
        oom = 1;
        break;
      }
      b.p[b.len] = 0;
      *len = b.len;
      return b.p;
    }
    if (c < 0x20) {
      jerr(p, "control character in string");
      break;
    }
    if (c == '\\') {
      p->i++;
      if (p->i >= p->n) {
        jerr(p, "unterminated escape");
        break;
      }
      char e = p->s[p->i++];
      const char *map = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
      const char *m = strchr(map, e);
      if (e && m) {
        if (buf_add(&b, to + (m - map), 1)) oom = 1;
      } else if (e == 'u') {
        unsigned long cp;
        if (hex4(p, &cp)) {
          jerr(p, "bad \\u escape");
          break;
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
          unsigned long lo;
          if (p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
            p->i += 2;
            if (hex4(p, &lo) || lo < 0xdc00 || lo > 0xdfff) {
              jerr(p, "bad surrogate pair");
              break;
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else {
            cp = 0xfffd;
          }
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          cp = 0xfffd;
        }
        put_utf8(&b, cp, &oom);
      } else {
        jerr(p, "bad escape");
        break;
      }
    } else {
      if (buf_add(&b, &p->s[p->i], 1)) oom = 1;
      p->i++;
    }
    if (oom) break;
  }
  if (oom) jerr(p, "out of memory");
  buf_free(&b);
  return NULL;
}

static int jvalue(struct jp *p, struct jv *v, int depth);

static int jitems(struct jp *p, struct jv *v, int depth, int obj) {
  size_t cap = 0;
  p->i++; /* [ or { */
  jws(p);
  char close = obj ? '}' : ']';
  if (p->i < p->n && p->s[p->i] == close) {
    p->i++;
    return 0;
  }
  for (;;) {
    if (v->len == cap) {
      size_t nc = cap ? cap * 2 : 4;
      struct jv *ni = realloc(v->items, nc * sizeof *ni);
      if (!ni) {
        jerr(p, "out of memory");
        return -1;
      }
      v->items = ni;
      if (obj) {
        char **nk = realloc(v->keys, nc * sizeof *nk);
        if (!nk) {
          jerr(p, "out of memory");
          return -1;
        }
        v->keys = nk;
        size_t *nl = realloc(v->key_lens, nc * sizeof *nl);
        if (!nl) {
          jerr(p, "out of memory");
          return -1;
        }
        v->key_lens = nl;
      }
      cap = nc;
    }
    jws(p);
    if (obj) {
      if (p->i >= p->n || p->s[p->i] != '"') {
        jerr(p, "expected a member name");
        return -1;
      }
      size_t kl;
      char *k = jstring(p, &kl);
      if (!k) return -1;
      v->keys[v->len] = k;
      v->key_lens[v->len] = kl;
      jws(p);
      if (p->i >= p->n || p->s[p->i] != ':') {
        memset(&v->items[v->len], 0, sizeof v->items[0]);
        v->len++;
        jerr(p, "expected ':'");
        return -1;
      }
      p->i++;
    }
    memset(&v->items[v->len], 0, sizeof v->items[0]);
    v->len++;
    if (jvalue(p, &v->items[v->len - 1], depth + 1)) return -1;
    jws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == close) {
      p->i++;
      return 0;
    }
    jerr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    return -1;
  }
}

static int jvalue(struct jp *p, struct jv *v, int depth) {
  if (depth > JSON_MAX_DEPTH) {
    jerr(p, "nested too deeply");
    return -1;
  }
  jws(p);
  if (p->i >= p->n) {
    jerr(p, "unexpected end");
    return -1;
  }
  char c = p->s[p->i];
  if (c == '{') {
    v->type = J_OBJ;
    return jitems(p, v, depth, 1);
  }
  if (c == '[') {
    v->type = J_ARR;
    return jitems(p, v, depth, 0);
  }
  if (c == '"') {
    v->type = J_STR;
    v->str = jstring(p, &v->len);
    return v->str ? 0 : -1;
  }
  static const struct {
    const char *w;
    int type, b;
  } words[] = {{"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
  for (size_t k = 0; k < 3; k++) {
    size_t wl = strlen(words[k].w);
    if (p->n - p->i >= wl && memcmp(p->s + p->i, words[k].w, wl) == 0) {
      v->type = words[k].type;
      v->b = words[k].b;
      p->i += wl;
      return 0;
    }
  }
  /* number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
  size_t s = p->i;
  if (p->i < p->n && p->s[p->i] == '-') p->i++;
  if (p->i >= p->n) {
    jerr(p, "bad number");
    return -1;
  }
  if (p->s[p->i] == '0') p->i++;
  else if (p->s[p->i] >= '1' && p->s[p->i] <= '9')
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  else {
    jerr(p, "unexpected character");
    return -1;
  }
  if (p->i < p->n && p->s[p->i] == '.') {
    p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) {
      jerr(p, "bad number");
      return -1;
    }
  }
  if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
    p->i++;
    if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) {
      jerr(p, "bad number");
      return -1;
    }
  }
  char tmp[64];
  size_t nl = p->i - s;
  if (nl >= sizeof tmp) {
    jerr(p, "number too long");
    return -1;
  }
  memcpy(tmp, p->s + s, nl);
  tmp[nl] = 0;
  v->type = J_NUM;
  v->num = strtod(tmp, NULL);
  return 0;
}

static void jfree_inner(struct jv *v) {
  if (v->type == J_STR) free(v->str);
  if (v->type == J_ARR || v->type == J_OBJ) {
    for (size_t k = 0; k < v->len; k++) {
      jfree_inner(&v->items[k]);
      if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
  }
}

void json_free(struct jv *v) {
  if (!v) return;
  jfree_inner(v);
  free(v);
}

struct jv *json_parse(const char *s, size_t len, char *err, size_t errlen) {
  struct jp p = {s, len, 0, err, errlen, 0};
  struct jv *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "JSON: out of memory");
    return NULL;
  }
  if (jvalue(&p, v, 0) == 0) {
    jws(&p);
    if (p.i != p.n) jerr(&p, "trailing characters");
  }
  if (p.failed) {
    json_free(v);
    return NULL;
  }
  return v;
}

const struct jv *json_get(const struct jv *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  size_t kl = strlen(key);
  for (size_t k = 0; k < obj->len; k++)
    if (obj->key_lens[k] == kl && memcmp(obj->keys[k], key, kl) == 0) return &obj->items[k];
  return NULL;
}

/* length of a valid UTF-8 sequence at s (n bytes left), or 0 */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t need;
  unsigned long cp;
  if (c >= 0xc2 && c <= 0xdf) {
    need = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 4;
    cp = c & 0x07;
  } else return 0;
  if (n < need) return 0;
  for (size_t k = 1; k < need; k++) {
    if ((s[k] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[k] & 0x3f);
  }
  if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return need;
}

int json_escape(struct buf *b, const char *s, size_t n) {
  if (buf_reserve(b, n + n / 8 + 2)) return -1;
  if (buf_add(b, "\"", 1)) return -1;
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t run = i;
    while (run < n && (unsigned char)s[run] >= 0x20 && (unsigned char)s[run] < 0x80 && s[run] != '"' &&
           s[run] != '\\')
      run++;
    if (run > i) {
      if (buf_add(b, s + i, run - i)) return -1;
      i = run;
      continue;
    }
    if (c == '"' || c == '\\') {
      char t[2] = {'\\', (char)c};
      if (buf_add(b, t, 2)) return -1;
      i++;
    } else if (c < 0x20) {
      const char *e = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
      if (e) {
        if (buf_add(b, e, 2)) return -1;
      } else if (buf_printf(b, "\\u%04x", c)) {
        return -1;
      }
      i++;
    } else {
      size_t l = utf8_len((const unsigned char *)s + i, n - i);
      if (l) {
        if (buf_add(b, s + i, l)) return -1;
        i += l;
      } else {
        if (buf_add(b, "\xef\xbf\xbd", 3)) return -1;
        i++;
      }
    }
  }
  return buf_add(b, "\"", 1);
}

/* ---------------------------------------------------------------- tar */

static int tar_num(const char *f, size_t n, uint64_t *out) {
  const unsigned char *u = (const unsigned char *)f;
  if (u[0] & 0x80) { /* GNU base-256 (positive only) */
    if (u[0] != 0x80) return -1;
    uint64_t v = 0;
    for (size_t k = 1; k < n; k++) {
      if (v >> 56) return -1;
      v = (v << 8) | u[k];
    }
    *out = v;
    return 0;
  }
  size_t k = 0;
  while (k < n && (f[k] == ' ' || f[k] == 0)) k++;
  uint64_t v = 0;
  size_t digits = 0;
  while (k < n && f[k] >= '0' && f[k] <= '7') {
    if (v >> 60) return -1;
    v = v * 8 + (uint64_t)(f[k] - '0');
    k++;
    digits++;
  }
  while (k < n && (f[k] == ' ' || f[k] == 0)) k++;
  if (k != n) return -1;
  *out = v;
  (void)digits;
  return 0;
}

static void field_str(char *dst, size_t dstlen, const char *f, size_t n) {
  size_t l = strnlen(f, n);
  if (l >= dstlen) l = dstlen - 1;
  memcpy(dst, f, l);
  dst[l] = 0;
}

static int is_zero_block(const char *b) {
  for (int k = 0; k < 512; k++)
    if (b[k]) return 0;
  return 1;
}

/* pax records "LEN key=value\n" */
static int pax_parse(const char *d, size_t n, char *path, char *link, uint64_t *size, int *have_size,
                     char *err, size_t errlen) {
  size_t i = 0;
  while (i < n) {
    size_t s = i, len = 0;
    while (i < n && d[i] >= '0' && d[i] <= '9') {
      if (len > n) break;
      len = len * 10 + (size_t)(d[i] - '0');
      i++;
    }
    if (i >= n || d[i] != ' ' || len == 0 || len > n - s || d[s + len - 1] != '\n') {
      snprintf(err, errlen, "tar: malformed pax header");
      return -1;
    }
    i++;
    const char *kv = d + i, *rec_end = d + s + len - 1;
    const char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
    if (!eq) {
      snprintf(err, errlen, "tar: malformed pax record");
      return -1;
    }
    size_t kl = (size_t)(eq - kv), vl = (size_t)(rec_end - eq - 1);
    if ((kl == 4 && !memcmp(kv, "path", 4)) || (kl == 8 && !memcmp(kv, "linkpath", 8))) {
      if (vl > TAR_NAME_MAX) {
        snprintf(err, errlen, "tar: pax name too long");
        return -1;
      }
      char *dst = kl == 4 ? path : link;
      memcpy(dst, eq + 1, vl);
      dst[vl] = 0;
      if (memchr(dst, 0, vl)) {
        snprintf(err, errlen, "tar: NUL in pax name");
        return -1;
      }
    } else if (kl == 4 && !memcmp(kv, "size", 4)) {
      uint64_t v = 0;
      if (vl == 0 || vl > 19) {
        snprintf(err, errlen, "tar: bad pax size");
        return -1;
      }
      for (size_t k = 0; k < vl; k++) {
        if (eq[1 + k] < '0' || eq[1 + k] > '9') {
          snprintf(err, errlen, "tar: bad pax size");
          return -1;
        }
        v = v * 10 + (uint64_t)(eq[1 + k] - '0');
      }
      *size = v;
      *have_size = 1;
    }
    i = s + len;
  }
  return 0;
}

int tar_next(struct tar_reader *t, struct tar_entry *e, char *err, size_t errlen) {
  char long_name[TAR_NAME_MAX + 1] = "", long_link[TAR_NAME_MAX + 1] = "";
  char pax_path[TAR_NAME_MAX + 1] = "", pax_link[TAR_NAME_MAX + 1] = "";
  uint64_t pax_size = 0;
  int have_pax_size = 0;
  for (int guard = 0; guard < 64; guard++) {
    if (t->off >= t->len) return 0; /* EOF without end blocks: accepted */
    if (t->len - t->off < 512) {
      snprintf(err, errlen, "tar: truncated header at offset %zu", t->off);
      return -1;
    }
    const char *h = t->buf + t->off;
    if (is_zero_block(h)) return 0;
    uint64_t sum;
    if (tar_num(h + 148, 8, &sum)) {
      snprintf(err, errlen, "tar: bad checksum field at offset %zu", t->off);
      return -1;
    }
    uint64_t calc = 0;
    for (int k = 0; k < 512; k++) calc += (k >= 148 && k < 156) ? ' ' : (unsigned char)h[k];
    if (calc != sum) {
      snprintf(err, errlen, "tar: checksum mismatch at offset %zu", t->off);
      return -1;
    }
    uint64_t size, mode, mtime;
    if (tar_num(h + 124, 12, &size) || tar_num(h + 100, 8, &mode) || tar_num(h + 136, 12, &mtime)) {
      snprintf(err, errlen, "tar: bad number in header at offset %zu", t->off);
      return -1;
    }
    char type = h[156];
    if (have_pax_size && type != 'x' && type != 'g') size = pax_size;
    size_t data_off = t->off + 512;
    uint64_t padded = (size + 511) & ~(uint64_t)511;
    if (size > (uint64_t)(t->len - data_off) || padded < size) {
      snprintf(err, errlen, "tar: member data truncated at offset %zu", t->off);
      return -1;
    }
    const char *data = t->buf + data_off;
    t->off = data_off + (padded > t->len - data_off ? t->len - data_off : (size_t)padded);
    if (type == 'L' || type == 'K') {
      if (size > TAR_NAME_MAX) {
        snprintf(err, errlen, "tar: long name too long");
        return -1;
      }
      char *dst = type == 'L' ? long_name : long_link;
      memcpy(dst, data, (size_t)size);
      dst[size] = 0;
      continue;
    }
    if (type == 'x') {
      if (pax_parse(data, (size_t)size, pax_path, pax_link, &pax_size, &have_pax_size, err, errlen))
        return -1;
      continue;
    }
    if (type == 'g') continue;
    memset(e, 0, sizeof *e);
    if (pax_path[0]) snprintf(e->name, sizeof e->name, "%s", pax_path);
    else if (long_name[0]) snprintf(e->name, sizeof e->name, "%s", long_name);
    else {
      char name[101], prefix[156];
      field_str(name, sizeof name, h, 100);
      field_str(prefix, sizeof prefix, h + 345, 155);
      if (memcmp(h + 257, "ustar", 5) == 0 && prefix[0])
        snprintf(e->name, sizeof e->name, "%s/%s", prefix, name);
      else snprintf(e->name, sizeof e->name, "%s", name);
    }
    if (pax_link[0]) snprintf(e->linkname, sizeof e->linkname, "%s", pax_link);
    else if (long_link[0]) snprintf(e->linkname, sizeof e->linkname, "%s", long_link);
    else field_str(e->linkname, sizeof e->linkname, h + 157, 100);
    e->type = type ? type : '0';
    if (e->type == '7') e->type = '0';
    e->mode = (unsigned)(mode & 07777);
    e->mtime = (long long)mtime;
    e->size = size;
    e->data = data;
    if (!e->name[0]) {
      snprintf(err, errlen, "tar: member with an empty name");
      return -1;
    }
    return 1;
  }
  snprintf(err, errlen, "tar: too many extension headers in a row");
  return -1;
}

int ap_safe_relpath(const char *name, char *out, size_t outlen) {
  if (!outlen) return -1;
  if (name[0] == '/') return -1;
  size_t o = 0;
  const char *p = name;
  while (*p) {
    const char *s = p;
    while (*p && *p != '/') p++;
    size_t n = (size_t)(p - s);
    if (*p == '/') p++;
    if (n == 0 || (n == 1 && s[0] == '.')) continue;
    if (n == 2 && s[0] == '.' && s[1] == '.') return -1;
    if (o + n + 2 > outlen) return -1;
    if (o) out[o++] = '/';
    memcpy(out + o, s, n);
    o += n;
  }
  out[o] = 0;
  return 0;
}

static void octal(char *f, size_t n, uint64_t v) {
  /* n-1 octal digits (the value must fit) and a NUL */
  f[n - 1] = 0;
  for (size_t k = n - 1; k > 0; k--) {
    f[k - 1] = (char)('0' + (v & 7));
    v >>= 3;
  }
}

static int raw_header(struct buf *b, const char *name, const char *prefix, char type, uint64_t size,
                      unsigned mode, long long mtime, const char *linkname) {
  char h[512];
  memset(h, 0, sizeof h);
  memcpy(h, name, strnlen(name, 100));
  octal(h + 100, 8, mode & 07777);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  if (size > 077777777777ULL) { /* base-256 */
    h[124] = (char)0x80;
    for (int k = 11; k >= 1; k--) {
      h[124 + k] = (char)(size & 0xff);
      size >>= 8;
    }
  } else {
    octal(h + 124, 12, size);
  }
  octal(h + 136, 12, mtime > 0 ? (uint64_t)mtime : 0);
  memset(h + 148, ' ', 8);
  h[156] = type;
  if (linkname) memcpy(h + 157, linkname, strnlen(linkname, 100));
  memcpy(h + 257,
         "ustar\0"
         "00",
         8);
  if (prefix) memcpy(h + 345, prefix, strnlen(prefix, 155));
  unsigned sum = 0;
  for (int k = 0; k < 512; k++) sum += (unsigned char)h[k];
  snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return buf_add(b, h, 512);
}

static int pax_record(struct buf *b, const char *key, const char *val) {
  size_t body = 1 + strlen(key) + 1 + strlen(val) + 1; /* " key=val\n" */
  size_t len = body;
  for (;;) {
    char digits[24];
    int d = snprintf(digits, sizeof digits, "%zu", len);
    if (body + (size_t)d == len) break;
    len = body + (size_t)d;
  }
  return buf_printf(b, "%zu %s=%s\n", len, key, val);
}

int tar_header(struct buf *b, const char *name, char type, uint64_t size, unsigned mode, long long mtime,
               const char *linkname) {
  size_t nl = strlen(name), ll = linkname ? strlen(linkname) : 0;
  const char *prefix = NULL;
  const char *short_name = name;
  char pre[156];
  int need_pax = ll > 100;
  if (nl > 100) {
    /* try the ustar prefix split at a '/' */
    const char *split = NULL;
    for (const char *s = name + nl - 1; s > name; s--) {
      if (*s == '/' && (size_t)(s - name) <= 155 && nl - (size_t)(s - name) - 1 <= 100 &&
          nl - (size_t)(s - name) - 1 > 0) {
        split = s;
        break;
      }
    }
    if (split) {
      memcpy(pre, name, (size_t)(split - name));
      pre[split - name] = 0;
      prefix = pre;
      short_name = split + 1;
    } else {
      need_pax = 1;
    }
  }
  if (need_pax) {
    struct buf rec = {0};
    int rc = 0;
    if (nl > 100 && !prefix) rc |= pax_record(&rec, "path", name);
    if (ll > 100) rc |= pax_record(&rec, "linkpath", linkname);
    rc |= raw_header(b, "././@PaxHeader", NULL, 'x', rec.len, 0644, mtime, NULL);
    rc |= buf_add(b, rec.p, rec.len);
    static const char zeros[512];
    if (rec.len % 512) rc |= buf_add(b, zeros, 512 - rec.len % 512);
    buf_free(&rec);
    if (rc) return -1;
  }
  return raw_header(b, short_name, prefix, type, size, mode, mtime, linkname);
}
