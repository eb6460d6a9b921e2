/* protobuf_fuzz.c — libFuzzer target for engine/protobuf.c, the schema-driven protobuf decoder,
 * and its gRPC frame parser.
 *
 * The input's first byte picks one of three schemas (a message with every type, packed and
 * nested fields, a recursive message, and an empty schema that skips everything as unknown);
 * the rest is decoded. Invariants: the decoder never reads out of bounds (ASan), every string
 * value lies inside the input, begin/end callbacks balance and never nest deeper than
 * PB_MAX_DEPTH, an error has a message, and a successful decode re-encoded from the values it
 * reported decodes again to the same values (the codec's own round trip). The same bytes are
 * also cut into gRPC frames, which must tile the input exactly. Seeds: fuzz/corpus/protobuf. */
#include "protobuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pb_msg msg;
static pb_field inner_f[3];
static msg Inner = {"Inner", 3, inner_f, NULL};
static pb_field all_f[] = {
    {1, PB_DOUBLE, PB_SINGULAR, 0, 0, -1, "d", NULL, NULL},
    {2, PB_FLOAT, PB_SINGULAR, 0, 0, -1, "f", NULL, NULL},
    {3, PB_INT64, PB_SINGULAR, 0, 0, -1, "i64", NULL, NULL},
    {4, PB_UINT64, PB_SINGULAR, 0, 0, -1, "u64", NULL, NULL},
    {5, PB_INT32, PB_SINGULAR, 0, 0, -1, "i32", NULL, NULL},
    {6, PB_FIXED64, PB_SINGULAR, 0, 0, -1, "x64", NULL, NULL},
    {7, PB_FIXED32, PB_SINGULAR, 0, 0, -1, "x32", NULL, NULL},
    {8, PB_BOOL, PB_SINGULAR, 0, 0, -1, "b", NULL, NULL},
    {9, PB_STRING, PB_SINGULAR, 0, 0, -1, "s", NULL, NULL},
    {10, PB_MESSAGE, PB_SINGULAR, 0, 0, -1, "m", &Inner, NULL},
    {11, PB_BYTES, PB_SINGULAR, 0, 0, -1, "by", NULL, NULL},
    {12, PB_UINT32, PB_SINGULAR, 0, 0, -1, "u32", NULL, NULL},
    {13, PB_ENUM, PB_SINGULAR, 0, 0, -1, "e", NULL, NULL},
    {14, PB_SFIXED32, PB_SINGULAR, 0, 0, -1, "sf32", NULL, NULL},
    {15, PB_SFIXED64, PB_SINGULAR, 0, 0, -1, "sf64", NULL, NULL},
    {16, PB_SINT32, PB_SINGULAR, 0, 0, -1, "s32", NULL, NULL},
    {17, PB_SINT64, PB_SINGULAR, 0, 0, -1, "s64", NULL, NULL},
    {20, PB_INT32, PB_REPEATED, 1, 0, -1, "ri", NULL, NULL},
    {21, PB_DOUBLE, PB_REPEATED, 1, 0, -1, "rd", NULL, NULL},
    {22, PB_FIXED32, PB_REPEATED, 1, 0, -1, "rf", NULL, NULL},
    {23, PB_STRING, PB_REPEATED, 0, 0, -1, "rs", NULL, NULL},
    {24, PB_MESSAGE, PB_REPEATED, 0, 0, -1, "rm", &Inner, NULL},
};
static msg All = {"All", sizeof all_f / sizeof *all_f, all_f, NULL};
static msg Empty = {"Empty", 0, NULL, NULL};

typedef struct {
  const uint8_t *lo, *hi;
  int depth, max_depth;
  uint64_t hash;
  size_t values;
  pb_buf out; /* re-encoding of what was reported: flat list of (number, wire value) */
  int reencode;
} st;

static int on_scalar(void *ud, const pb_field *f, const pb_value *v) {
  st *s = ud;
  if (f->type == PB_STRING || f->type == PB_BYTES) {
    if (v->n && (v->p < s->lo || v->p + v->n > s->hi)) __builtin_trap();
    for (size_t i = 0; i < v->n; i++) s->hash = (s->hash ^ v->p[i]) * 1099511628211ull;
  }
  s->hash = (s->hash ^ f->number ^ v->u ^ (uint64_t)v->i) * 1099511628211ull;
  s->values++;
  if (s->reencode && s->depth == 0) { /* top-level scalars: re-encoded unpacked */
    if (f->type == PB_STRING || f->type == PB_BYTES) pb_put_bytes(&s->out, f->number, v->p, v->n);
    else {
      pb_put_tag(&s->out, f->number, pb_wire_type(f->type));
      pb_put_value(&s->out, f->type, v->i, v->d);
    }
  }
  return 0;
}

static int on_begin(void *ud, const pb_field *f) {
  st *s = ud;
  (void)f;
  if (++s->depth > PB_MAX_DEPTH) __builtin_trap();
  if (s->depth > s->max_depth) s->max_depth = s->depth;
  s->hash = (s->hash ^ 0xbe) * 1099511628211ull;
  return 0;
}

static int on_end(void *ud, const pb_field *f) {
  st *s = ud;
  (void)f;
  if (--s->depth < 0) __builtin_trap();
  s->hash = (s->hash ^ 0xed) * 1099511628211ull;
  return 0;
}

static const pb_callbacks CB = {on_scalar, on_begin, on_end};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int sorted;
  const msg *schemas[] = {&All, &Inner, &Empty};
  const msg *m;
  st a, b;
  pb_error e;
  int rc;
  if (!sorted) {
    inner_f[0] = (pb_field){1, PB_INT32, PB_SINGULAR, 0, 0, -1, "x", NULL, NULL};
    inner_f[1] = (pb_field){2, PB_STRING, PB_SINGULAR, 0, 0, -1, "s", NULL, NULL};
    inner_f[2] = (pb_field){3, PB_MESSAGE, PB_REPEATED, 0, 0, -1, "kids", &Inner, NULL};
    pb_msg_sort(&All);
    sorted = 1;
  }
  if (size < 1) return 0;
  m = schemas[data[0] % 3];
  data++;
  size--;
  memset(&a, 0, sizeof a);
  a.lo = data;
  a.hi = data + size;
  a.hash = 1469598103934665603ull;
  a.reencode = m == &All;
  rc = pb_decode(m, data, size, &CB, &a, &e);
  if (rc != PB_OK) {
    char msgbuf[400];
    pb_error_message(&e, msgbuf, sizeof msgbuf);
    if (!msgbuf[0] || e.offset > size) __builtin_trap();
  } else {
    if (a.depth != 0) __builtin_trap();
    if (a.reencode && a.out.oom == 0) {
      /* scalars reported at the top level decode again to the same top-level scalars */
      st c;
      memset(&c, 0, sizeof c);
      c.lo = a.out.p;
      c.hi = a.out.p ? a.out.p + a.out.len : NULL;
      c.hash = 1469598103934665603ull;
      c.reencode = 1;
      rc = pb_decode(m, a.out.p ? a.out.p : (const uint8_t *)"", a.out.len, &CB, &c, &e);
      if (rc != PB_OK) __builtin_trap();
      if (c.out.len != a.out.len || (a.out.len && memcmp(c.out.p, a.out.p, a.out.len) != 0)) __builtin_trap();
      pb_buf_free(&c.out);
    }
  }
  pb_buf_free(&a.out);
  /* deterministic */
  memset(&b, 0, sizeof b);
  b.lo = data;
  b.hi = data + size;
  b.hash = 1469598103934665603ull;
  if (pb_decode(m, data, size, &CB, &b, &e) != rc && rc == PB_OK) __builtin_trap();
  /* gRPC frames tile the input */
  {
    size_t at = 0;
    for (;;) {
      unsigned flags;
      const uint8_t *pl;
      size_t len;
      int64_t r = grpc_frame_parse(data + at, size - at, 1024, &flags, &pl, &len);
      if (r <= 0) break;
      if (pl != data + at + GRPC_HEADER_LEN || (size_t)r != len + GRPC_HEADER_LEN || len > 1024 || flags > 1)
        __builtin_trap();
      at += (size_t)r;
      if (at > size) __builtin_trap();
    }
  }
  return 0;
}
