/*
 * protobuf.c: the protocol buffers wire format, schema-driven, plain C (protobuf.h).
 */
#include "protobuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schemas ------------------------------------------------------------ */

static int cmp_field(const void *a, const void *b) {
  uint32_t x = ((const pb_field *)a)->number, y = ((const pb_field *)b)->number;
  return x < y ? -1 : x > y;
}

uint32_t pb_msg_sort(pb_msg *m) {
  size_t i;
  if (m->nfields > 1) qsort(m->fields, m->nfields, sizeof *m->fields, cmp_field);
  for (i = 1; i < m->nfields; i++)
    if (m->fields[i].number == m->fields[i - 1].number) return m->fields[i].number;
  return 0;
}

const pb_field *pb_msg_field(const pb_msg *m, uint32_t number) {
  size_t lo = 0, hi = m->nfields;
  if (hi <= 16) { /* short messages: linear */
    for (lo = 0; lo < hi; lo++)
      if (m->fields[lo].number == number) return &m->fields[lo];
    return NULL;
  }
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    uint32_t k = m->fields[mid].number;
    if (k == number) return &m->fields[mid];
    if (k < number) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

int pb_wire_type(int type) {
  switch (type) {
    case PB_DOUBLE:
    case PB_FIXED64:
    case PB_SFIXED64: return PB_WT_I64;
    case PB_FLOAT:
    case PB_FIXED32:
    case PB_SFIXED32: return PB_WT_I32;
    case PB_STRING:
    case PB_BYTES:
    case PB_MESSAGE: return PB_WT_LEN;
    case PB_GROUP: return PB_WT_SGROUP;
    default: return PB_WT_VARINT;
  }
}

int pb_packable(int type) {
  return type != PB_STRING && type != PB_BYTES && type != PB_MESSAGE && type != PB_GROUP &&
         type >= PB_DOUBLE && type <= PB_SINT64;
}

static const char *const type_names[] = {
    NULL,    "double",  "float", "int64",  "uint64", "int32",    "fixed64",  "fixed32", "bool",  "string",
    "group", "message", "bytes", "uint32", "enum",   "sfixed32", "sfixed64", "sint32",  "sint64"};

const char *pb_type_name(int type) {
  return (type >= PB_DOUBLE && type <= PB_SINT64) ? type_names[type] : "?";
}

int pb_type_from_name(const char *name) {
  int t;
  for (t = PB_DOUBLE; t <= PB_SINT64; t++)
    if (t != PB_GROUP && strcmp(type_names[t], name) == 0) return t;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

int pb_read_varint(const uint8_t *p, size_t n, uint64_t *out) {
  uint64_t v = 0;
  size_t i;
  for (i = 0; i < 10; i++) {
    if (i >= n) return PB_ETRUNCATED;
    v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) {
      *out = v;
      return (int)i + 1;
    }
  }
  return PB_EVARINT;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

int64_t pb_skip(const uint8_t *p, size_t n, uint32_t number, int wt, int depth) {
  uint64_t v;
  int k;
  switch (wt) {
    case PB_WT_VARINT: return pb_read_varint(p, n, &v);
    case PB_WT_I64: return n < 8 ? PB_ETRUNCATED : 8;
    case PB_WT_I32: return n < 4 ? PB_ETRUNCATED : 4;
    case PB_WT_LEN:
      k = pb_read_varint(p, n, &v);
      if (k < 0) return k;
      if (v > n - (size_t)k) return PB_ETRUNCATED;
      return (int64_t)k + (int64_t)v;
    case PB_WT_SGROUP: {
      size_t i = 0;
      if (depth >= PB_MAX_DEPTH) return PB_EDEPTH;
      for (;;) {
        uint64_t key;
        int64_t s;
        if (i >= n) return PB_ETRUNCATED;
        k = pb_read_varint(p + i, n - i, &key);
        if (k < 0) return k;
        i += (size_t)k;
        if ((key >> 3) == 0 || (key >> 3) > PB_MAX_FIELD) return PB_EFIELD;
        if ((key & 7) == PB_WT_EGROUP) {
          if ((key >> 3) != number) return PB_EWIRE;
          return (int64_t)i;
        }
        s = pb_skip(p + i, n - i, (uint32_t)(key >> 3), (int)(key & 7), depth + 1);
        if (s < 0) return s;
        i += (size_t)s;
      }
    }
    default: return PB_EWIRE;
  }
}

typedef struct {
  const pb_callbacks *cb;
  void *ud;
  pb_error *err;
  const uint8_t *base;
  const pb_msg *root;
  const pb_field *stack[PB_MAX_DEPTH + 1];
  int depth;
} dctx;

static int fail(dctx *c, int code, const uint8_t *at, const pb_field *f) {
  pb_error *e = c->err;
  size_t len;
  int i;
  e->code = code;
  e->offset = (size_t)(at - c->base);
  snprintf(e->path, sizeof e->path, "%s", c->root->name ? c->root->name : "message");
  for (i = 0; i < c->depth; i++) {
    len = strlen(e->path);
    snprintf(e->path + len, sizeof e->path - len, ".%s", c->stack[i]->name ? c->stack[i]->name : "?");
  }
  if (f) {
    len = strlen(e->path);
    snprintf(e->path + len, sizeof e->path - len, ".%s", f->name ? f->name : "?");
  }
  return code;
}

/* One scalar value of f's type at p (wire type already matched); returns bytes used. */
static int read_scalar(const pb_field *f, const uint8_t *p, size_t n, pb_value *v) {
  int k;
  memset(v, 0, sizeof *v);
  switch (pb_wire_type(f->type)) {
    case PB_WT_VARINT:
      k = pb_read_varint(p, n, &v->u);
      if (k < 0) return k;
      switch (f->type) {
        case PB_INT32:
        case PB_ENUM: v->i = (int32_t)(uint32_t)v->u; break;
        case PB_UINT32: v->i = (uint32_t)v->u; break;
        case PB_BOOL: v->i = v->u != 0; break;
        case PB_SINT32: v->i = pb_unzigzag32((uint32_t)v->u); break;
        case PB_SINT64: v->i = pb_unzigzag64(v->u); break;
        default: v->i = (int64_t)v->u; break; /* int64, uint64 */
      }
      return k;
    case PB_WT_I32: {
      uint32_t w;
      float fl;
      if (n < 4) return PB_ETRUNCATED;
      w = rd32(p);
      v->u = w;
      if (f->type == PB_FLOAT) {
        memcpy(&fl, &w, 4);
        v->d = fl;
      } else {
        v->i = f->type == PB_SFIXED32 ? (int64_t)(int32_t)w : (int64_t)w;
      }
      return 4;
    }
    case PB_WT_I64:
      if (n < 8) return PB_ETRUNCATED;
      v->u = rd64(p);
      if (f->type == PB_DOUBLE) memcpy(&v->d, &v->u, 8);
      else v->i = (int64_t)v->u;
      return 8;
    default: return PB_EWIRE;
  }
}

static int decode_msg(dctx *c, const pb_msg *m, const uint8_t *p, size_t n);

static int decode_field(dctx *c, const pb_field *f, int wt, const uint8_t *p, size_t n, size_t *used) {
  pb_value v;
  int k;
  if (wt == PB_WT_LEN && (f->type == PB_MESSAGE || f->type == PB_STRING || f->type == PB_BYTES ||
                          (f->label == PB_REPEATED && pb_packable(f->type)))) {
    uint64_t len;
    const uint8_t *q;
    k = pb_read_varint(p, n, &len);
    if (k < 0) return fail(c, k, p, f);
    if (len > n - (size_t)k) return fail(c, PB_ETRUNCATED, p, f);
    q = p + k;
    *used = (size_t)k + (size_t)len;
    if (f->type == PB_MESSAGE) {
      int rc;
      if (c->depth >= PB_MAX_DEPTH) return fail(c, PB_EDEPTH, p, f);
      if (c->cb->begin && c->cb->begin(c->ud, f)) return fail(c, PB_ESTOPPED, p, f);
      c->stack[c->depth++] = f;
      rc = decode_msg(c, f->msg, q, (size_t)len);
      c->depth--;
      if (rc != PB_OK) return rc;
      if (c->cb->end && c->cb->end(c->ud, f)) return fail(c, PB_ESTOPPED, p, f);
      return PB_OK;
    }
    if (f->type == PB_STRING || f->type == PB_BYTES) {
      memset(&v, 0, sizeof v);
      v.p = q;
      v.n = (size_t)len;
      if (c->cb->scalar && c->cb->scalar(c->ud, f, &v)) return fail(c, PB_ESTOPPED, p, f);
      return PB_OK;
    }
    { /* packed */
      size_t i = 0;
      while (i < len) {
        k = read_scalar(f, q + i, (size_t)len - i, &v);
        if (k < 0) return fail(c, k, q + i, f);
        i += (size_t)k;
        if (c->cb->scalar && c->cb->scalar(c->ud, f, &v)) return fail(c, PB_ESTOPPED, q + i, f);
      }
    }
    return PB_OK;
  }
  k = read_scalar(f, p, n, &v);
  if (k < 0) return fail(c, k, p, f);
  *used = (size_t)k;
  if (c->cb->scalar && c->cb->scalar(c->ud, f, &v)) return fail(c, PB_ESTOPPED, p, f);
  return PB_OK;
}

static int decode_msg(dctx *c, const pb_msg *m, const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint64_t key;
    uint32_t number;
    int wt, k;
    const pb_field *f;
    const uint8_t *at = p + i;
    k = pb_read_varint(p + i, n - i, &key);
    if (k < 0) return fail(c, k, at, NULL);
    if ((key >> 3) == 0 || (key >> 3) > PB_MAX_FIELD) return fail(c, PB_EFIELD, at, NULL);
    number = (uint32_t)(key >> 3);
    wt = (int)(key & 7);
    if (wt == PB_WT_EGROUP || wt > PB_WT_I32) return fail(c, PB_EWIRE, at, NULL);
    i += (size_t)k;
    f = pb_msg_field(m, number);
    if (f && f->type != PB_GROUP &&
        (wt == pb_wire_type(f->type) ||
         (wt == PB_WT_LEN && f->label == PB_REPEATED && pb_packable(f->type)))) {
      size_t used = 0;
      int rc = decode_field(c, f, wt, p + i, n - i, &used);
      if (rc != PB_OK) return rc;
      i += used;
    } else { /* unknown, or a wire type this field cannot have: skipped */
      int64_t s = pb_skip(p + i, n - i, number, wt, c->depth);
      if (s < 0) return fail(c, (int)s, at, f);
      i += (size_t)s;
    }
  }
  return PB_OK;
}

int pb_decode(const pb_msg *m, const uint8_t *p, size_t n, const pb_callbacks *cb, void *ud, pb_error *err) {
  dctx c;
  memset(&c, 0, sizeof c);
  memset(err, 0, sizeof *err);
  c.cb = cb;
  c.ud = ud;
  c.err = err;
  c.base = p;
  c.root = m;
  return decode_msg(&c, m, p, n);
}

void pb_error_message(const pb_error *err, char *out, size_t cap) {
  const char *why;
  switch (err->code) {
    case PB_OK: why = "no error"; break;
    case PB_ETRUNCATED: why = "truncated (a value runs past the end of its message)"; break;
    case PB_EVARINT: why = "varint longer than 10 bytes"; break;
    case PB_EFIELD: why = "invalid field number (0 or over 2^29-1)"; break;
    case PB_EWIRE: why = "invalid wire type (6, 7, or an unmatched end-group)"; break;
    case PB_EDEPTH: why = "nesting deeper than 64"; break;
    case PB_ENOMEM: why = "out of memory"; break;
    case PB_ESTOPPED: why = "stopped by the reader"; break;
    case PB_ERANGE: why = "value out of range"; break;
    case PB_ETOOBIG: why = "frame over the size limit"; break;
    default: why = "error"; break;
  }
  snprintf(out, cap, "%s: %s at byte %zu", err->path[0] ? err->path : "message", why, err->offset);
}

/* ---- writing ------------------------------------------------------------ */

void pb_buf_free(pb_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

static int reserve(pb_buf *b, size_t n) {
  if (b->oom) return PB_ENOMEM;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    uint8_t *np;
    while (cap < b->len + n) cap *= 2;
    np = realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return PB_ENOMEM;
    }
    b->p = np;
    b->cap = cap;
  }
  return PB_OK;
}

int pb_put_raw(pb_buf *b, const void *p, size_t n) {
  if (reserve(b, n)) return PB_ENOMEM;
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  return PB_OK;
}

static int varint_into(uint8_t *out, uint64_t v) {
  int i = 0;
  while (v >= 0x80) {
    out[i++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[i++] = (uint8_t)v;
  return i;
}

int pb_put_varint(pb_buf *b, uint64_t v) {
  if (reserve(b, 10)) return PB_ENOMEM;
  b->len += (size_t)varint_into(b->p + b->len, v);
  return PB_OK;
}

int pb_put_tag(pb_buf *b, uint32_t number, int wt) {
  return pb_put_varint(b, (uint64_t)number << 3 | (unsigned)wt);
}

int pb_put_fixed32(pb_buf *b, uint32_t v) {
  uint8_t q[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return pb_put_raw(b, q, 4);
}

int pb_put_fixed64(pb_buf *b, uint64_t v) {
  if (pb_put_fixed32(b, (uint32_t)v)) return PB_ENOMEM;
  return pb_put_fixed32(b, (uint32_t)(v >> 32));
}

int pb_put_bytes(pb_buf *b, uint32_t number, const void *p, size_t n) {
  if (pb_put_tag(b, number, PB_WT_LEN) || pb_put_varint(b, n)) return PB_ENOMEM;
  return pb_put_raw(b, p, n);
}

int pb_put_value(pb_buf *b, int type, int64_t i, double d) {
  switch (type) {
    case PB_DOUBLE: {
      uint64_t w;
      memcpy(&w, &d, 8);
      return pb_put_fixed64(b, w);
    }
    case PB_FLOAT: {
      float f = (float)d;
      uint32_t w;
      memcpy(&w, &f, 4);
      return pb_put_fixed32(b, w);
    }
    case PB_FIXED64:
    case PB_SFIXED64: return pb_put_fixed64(b, (uint64_t)i);
    case PB_FIXED32:
    case PB_SFIXED32: return pb_put_fixed32(b, (uint32_t)i);
    case PB_BOOL: return pb_put_varint(b, i != 0);
    case PB_UINT32: return pb_put_varint(b, (uint32_t)i);
    case PB_SINT32: return pb_put_varint(b, pb_zigzag32((int32_t)i));
    case PB_SINT64: return pb_put_varint(b, pb_zigzag64(i));
    case PB_INT32:
    case PB_ENUM: return pb_put_varint(b, (uint64_t)(int64_t)(int32_t)i);
    default: return pb_put_varint(b, (uint64_t)i); /* int64, uint64 */
  }
}

#define LEN_RESERVE 5 /* a length below 2^35 fits 5 varint bytes */

size_t pb_begin_len(pb_buf *b) {
  size_t mark = b->len;
  if (reserve(b, LEN_RESERVE) == PB_OK) b->len += LEN_RESERVE;
  return mark;
}

int pb_end_len(pb_buf *b, size_t mark) {
  uint8_t q[10];
  size_t content;
  int k;
  if (b->oom) return PB_ENOMEM;
  content = b->len - mark - LEN_RESERVE;
  if ((uint64_t)content >= (1ull << 32)) return PB_ERANGE;
  k = varint_into(q, content);
  memmove(b->p + mark + k, b->p + mark + LEN_RESERVE, content);
  memcpy(b->p + mark, q, (size_t)k);
  b->len = mark + (size_t)k + content;
  return PB_OK;
}

/* ---- gRPC framing ------------------------------------------------------- */

int grpc_frame_header(uint8_t out[GRPC_HEADER_LEN], int compressed, uint64_t len) {
  if (len > 0xffffffffu) return -1;
  out[0] = compressed ? 1 : 0;
  out[1] = (uint8_t)(len >> 24);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
  return 0;
}

int64_t grpc_frame_parse(const uint8_t *p, size_t n, size_t max, unsigned *flags, const uint8_t **payload,
                         size_t *len) {
  uint32_t l;
  if (n < 1) return 0;
  if (p[0] > 1) return PB_EWIRE;
  if (n < GRPC_HEADER_LEN) return 0;
  l = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
  if (l > max) return PB_ETOOBIG;
  if (n - GRPC_HEADER_LEN < l) return 0;
  *flags = p[0];
  *payload = p + GRPC_HEADER_LEN;
  *len = l;
  return (int64_t)GRPC_HEADER_LEN + l;
}
