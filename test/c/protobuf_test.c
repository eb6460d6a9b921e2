/* protobuf_test.c — unit tests for engine/protobuf.c (the protobuf wire codec, plain C).
 *
 * Known encodings from the protobuf encoding guide (150 -> 08 96 01, "testing", zigzag,
 * negative int32 as 10 bytes), encode/decode round trips of every type through a C schema,
 * packed and unpacked repeated, nested messages, unknown fields of every wire type (groups
 * too), and every malformed input the decoder must refuse with its own code and offset.
 * Built with ASan/UBSan by the Makefile. Prints "N passed, N failed". */
#include "protobuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char *hex(const uint8_t *p, size_t n) {
  static char out[4096];
  size_t i;
  out[0] = '\0';
  for (i = 0; i < n && i * 2 + 3 < sizeof out; i++) sprintf(out + i * 2, "%02x", p[i]);
  return out;
}

/* A recorder: every callback as text "name=value;" */
typedef struct {
  char text[8192];
  size_t n;
  int stop_at; /* stop (return 1) at this callback number; 0 = never */
  int calls;
} rec;

static int add(rec *r, const char *s) {
  size_t l = strlen(s);
  if (r->n + l < sizeof r->text) {
    memcpy(r->text + r->n, s, l + 1);
    r->n += l;
  }
  return r->stop_at && ++r->calls >= r->stop_at;
}

static int on_scalar(void *ud, const pb_field *f, const pb_value *v) {
  char b[600];
  switch (f->type) {
    case PB_STRING:
    case PB_BYTES: snprintf(b, sizeof b, "%s=%.*s;", f->name, (int)v->n, (const char *)v->p); break;
    case PB_FLOAT:
    case PB_DOUBLE: snprintf(b, sizeof b, "%s=%g;", f->name, v->d); break;
    default: snprintf(b, sizeof b, "%s=%lld;", f->name, (long long)v->i); break;
  }
  return add(ud, b);
}
static int on_begin(void *ud, const pb_field *f) {
  char b[100];
  snprintf(b, sizeof b, "%s{", f->name);
  return add(ud, b);
}
static int on_end(void *ud, const pb_field *f) {
  (void)f;
  return add(ud, "}");
}
static const pb_callbacks CB = {on_scalar, on_begin, on_end};

static pb_field inner_fields[] = {
    {1, PB_INT32, PB_SINGULAR, 0, 0, -1, "x", NULL, NULL},
    {2, PB_STRING, PB_SINGULAR, 0, 0, -1, "s", NULL, NULL},
};
static pb_msg Inner = {"t.Inner", 2, inner_fields, NULL};
static pb_field all_fields[] = {
    {1, PB_DOUBLE, PB_SINGULAR, 0, 0, -1, "d", NULL, NULL},
    {2, PB_FLOAT, PB_SINGULAR, 0, 0, -1, "f", NULL, NULL},
    {3, PB_INT64, PB_SINGULAR, 0, 0, -1, "i64", NULL, NULL},
    {4, PB_UINT64, PB_SINGULAR, 0, 0, -1, "u64", NULL, NULL},
    {5, PB_INT32, PB_SINGULAR, 0, 0, -1, "i32", NULL, NULL},
    {6, PB_FIXED64, PB_SINGULAR, 0, 0, -1, "fx64", NULL, NULL},
    {7, PB_FIXED32, PB_SINGULAR, 0, 0, -1, "fx32", NULL, NULL},
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
    {21, PB_MESSAGE, PB_REPEATED, 0, 0, -1, "rm", &Inner, NULL},
};
static pb_msg All = {"t.All", sizeof all_fields / sizeof *all_fields, all_fields, NULL};

static int decode(const pb_msg *m, const uint8_t *p, size_t n, rec *r, pb_error *e) {
  memset(r, 0, sizeof *r);
  return pb_decode(m, p, n, &CB, r, e);
}

static void test_known_encodings(void) {
  pb_buf b = {0};
  pb_put_tag(&b, 1, PB_WT_VARINT);
  pb_put_varint(&b, 150);
  CHECK(b.len == 3 && memcmp(b.p, "\x08\x96\x01", 3) == 0, "150: %s", hex(b.p, b.len));
  b.len = 0;
  pb_put_bytes(&b, 2, "testing", 7);
  CHECK(b.len == 9 && memcmp(b.p, "\x12\x07testing", 9) == 0, "testing: %s", hex(b.p, b.len));
  b.len = 0;
  pb_put_value(&b, PB_INT32, -1, 0);
  CHECK(b.len == 10 && strcmp(hex(b.p, b.len), "ffffffffffffffffff01") == 0, "int32 -1: %s", hex(b.p, b.len));
  b.len = 0;
  pb_put_value(&b, PB_SINT32, -1, 0);
  pb_put_value(&b, PB_SINT32, 1, 0);
  pb_put_value(&b, PB_SINT32, -2, 0);
  pb_put_value(&b, PB_SINT64, INT64_MIN, 0);
  CHECK(strcmp(hex(b.p, b.len), "010203ffffffffffffffffff01") == 0, "zigzag: %s", hex(b.p, b.len));
  b.len = 0;
  pb_put_value(&b, PB_FIXED32, 1, 0);
  pb_put_value(&b, PB_DOUBLE, 0, 1.0);
  pb_put_value(&b, PB_FLOAT, 0, 1.0);
  CHECK(strcmp(hex(b.p, b.len), "01000000000000000000f03f0000803f") == 0, "fixed: %s", hex(b.p, b.len));
  CHECK(pb_zigzag64(-1) == 1 && pb_unzigzag64(1) == -1 && pb_unzigzag64(pb_zigzag64(INT64_MIN)) == INT64_MIN,
        "zz64");
  CHECK(pb_unzigzag32(pb_zigzag32(INT32_MIN)) == INT32_MIN && pb_zigzag32(INT32_MAX) == 0xfffffffeu, "zz32");
  pb_buf_free(&b);
}

static void test_round_trip(void) {
  pb_buf b = {0};
  rec r;
  pb_error e;
  size_t mark, inner;
  int rc;
  pb_put_tag(&b, 1, PB_WT_I64);
  pb_put_value(&b, PB_DOUBLE, 0, 2.5);
  pb_put_tag(&b, 2, PB_WT_I32);
  pb_put_value(&b, PB_FLOAT, 0, -0.5);
  pb_put_tag(&b, 3, PB_WT_VARINT);
  pb_put_value(&b, PB_INT64, INT64_MIN, 0);
  pb_put_tag(&b, 4, PB_WT_VARINT);
  pb_put_value(&b, PB_UINT64, -1, 0);
  pb_put_tag(&b, 5, PB_WT_VARINT);
  pb_put_value(&b, PB_INT32, -5, 0);
  pb_put_tag(&b, 6, PB_WT_I64);
  pb_put_value(&b, PB_FIXED64, 42, 0);
  pb_put_tag(&b, 7, PB_WT_I32);
  pb_put_value(&b, PB_FIXED32, 4000000000, 0);
  pb_put_tag(&b, 8, PB_WT_VARINT);
  pb_put_value(&b, PB_BOOL, 7, 0);
  pb_put_bytes(&b, 9, "str", 3);
  pb_put_tag(&b, 10, PB_WT_LEN);
  mark = pb_begin_len(&b);
  pb_put_tag(&b, 1, PB_WT_VARINT);
  pb_put_value(&b, PB_INT32, 9, 0);
  pb_put_bytes(&b, 2, "in", 2);
  CHECK(pb_end_len(&b, mark) == PB_OK, "end_len");
  pb_put_bytes(&b, 11, "xb", 2);
  pb_put_tag(&b, 12, PB_WT_VARINT);
  pb_put_value(&b, PB_UINT32, 4294967295, 0);
  pb_put_tag(&b, 13, PB_WT_VARINT);
  pb_put_value(&b, PB_ENUM, -1, 0);
  pb_put_tag(&b, 14, PB_WT_I32);
  pb_put_value(&b, PB_SFIXED32, -3, 0);
  pb_put_tag(&b, 15, PB_WT_I64);
  pb_put_value(&b, PB_SFIXED64, -4, 0);
  pb_put_tag(&b, 16, PB_WT_VARINT);
  pb_put_value(&b, PB_SINT32, INT32_MIN, 0);
  pb_put_tag(&b, 17, PB_WT_VARINT);
  pb_put_value(&b, PB_SINT64, INT64_MAX, 0);
  pb_put_tag(&b, 20, PB_WT_LEN); /* packed */
  mark = pb_begin_len(&b);
  pb_put_value(&b, PB_INT32, 1, 0);
  pb_put_value(&b, PB_INT32, 300, 0);
  pb_put_value(&b, PB_INT32, -1, 0);
  pb_end_len(&b, mark);
  pb_put_tag(&b, 20, PB_WT_VARINT);
  pb_put_value(&b, PB_INT32, 4, 0); /* and unpacked */
  pb_put_tag(&b, 21, PB_WT_LEN);
  mark = pb_begin_len(&b);
  pb_end_len(&b, mark); /* an empty message */
  /* unknown fields of each wire type, then a group holding a nested group */
  pb_put_tag(&b, 99, PB_WT_VARINT);
  pb_put_varint(&b, 1);
  pb_put_tag(&b, 98, PB_WT_I64);
  pb_put_fixed64(&b, 1);
  pb_put_tag(&b, 97, PB_WT_I32);
  pb_put_fixed32(&b, 1);
  pb_put_bytes(&b, 96, "zz", 2);
  pb_put_tag(&b, 95, PB_WT_SGROUP);
  pb_put_tag(&b, 1, PB_WT_VARINT);
  pb_put_varint(&b, 5);
  pb_put_tag(&b, 94, PB_WT_SGROUP);
  pb_put_tag(&b, 94, PB_WT_EGROUP);
  pb_put_tag(&b, 95, PB_WT_EGROUP);
  pb_put_tag(&b, 5, PB_WT_LEN);
  pb_put_varint(&b, 0); /* a known field on a wrong wire type: skipped */
  rc = decode(&All, b.p, b.len, &r, &e);
  CHECK(rc == PB_OK, "rc %d", rc);
  CHECK(strcmp(r.text,
               "d=2.5;f=-0.5;i64=-9223372036854775808;u64=-1;i32=-5;fx64=42;fx32=4000000000;b=1;s=str;"
               "m{x=9;s=in;}by=xb;u32=4294967295;e=-1;sf32=-3;sf64=-4;s32=-2147483648;"
               "s64=9223372036854775807;ri=1;ri=300;ri=-1;ri=4;rm{}") == 0,
        "got %s", r.text);
  /* a long nested message: the length prefix takes several bytes */
  b.len = 0;
  pb_put_tag(&b, 10, PB_WT_LEN);
  mark = pb_begin_len(&b);
  inner = b.len;
  {
    char big[300];
    memset(big, 'a', sizeof big);
    pb_put_bytes(&b, 2, big, sizeof big);
  }
  pb_end_len(&b, mark);
  CHECK(b.len == 1 + 2 + (b.len - 3) && b.p[1] == (uint8_t)(0x80 | ((b.len - 3) & 0x7f)), "len prefix %s",
        hex(b.p, 4));
  (void)inner;
  rc = decode(&All, b.p, b.len, &r, &e);
  CHECK(rc == PB_OK && strlen(r.text) == strlen("m{s=;}") + 300, "big nested %d %zu", rc, strlen(r.text));
  pb_buf_free(&b);
}

static void expect_fail(const char *what, const char *bytes, size_t n, int code, size_t offset,
                        const char *path) {
  rec r;
  pb_error e;
  char msg[400];
  int rc = decode(&All, (const uint8_t *)bytes, n, &r, &e);
  pb_error_message(&e, msg, sizeof msg);
  CHECK(rc == code, "%s: rc %d, want %d (%s)", what, rc, code, msg);
  CHECK(e.offset == offset, "%s: offset %zu, want %zu (%s)", what, e.offset, offset, msg);
  CHECK(strcmp(e.path, path) == 0, "%s: path %s, want %s", what, e.path, path);
}

static void test_malformed(void) {
  char deep[200];
  size_t i, n = 0;
  expect_fail("length past the end",
              "\x4a\x05"
              "ab",
              4, PB_ETRUNCATED, 1, "t.All.s");
  expect_fail("11-byte varint", "\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, PB_EVARINT, 1,
              "t.All.i32");
  expect_fail("varint cut", "\x28\xff", 2, PB_ETRUNCATED, 1, "t.All.i32");
  expect_fail("tag cut", "\xff", 1, PB_ETRUNCATED, 0, "t.All");
  expect_fail("field 0", "\x00\x01", 2, PB_EFIELD, 0, "t.All");
  expect_fail("field 2^29", "\x80\x80\x80\x80\x10", 5, PB_EFIELD, 0, "t.All");
  expect_fail("wire type 6", "\x0e", 1, PB_EWIRE, 0, "t.All");
  expect_fail("wire type 7", "\x0f", 1, PB_EWIRE, 0, "t.All");
  expect_fail("stray end group", "\x0c", 1, PB_EWIRE, 0, "t.All");
  expect_fail("mismatched end group", "\x0b\x14", 2, PB_EWIRE, 0, "t.All.d");
  expect_fail("fixed64 cut", "\x31\x01\x02", 3, PB_ETRUNCATED, 1, "t.All.fx64");
  expect_fail("fixed32 cut", "\x3d\x01", 2, PB_ETRUNCATED, 1, "t.All.fx32");
  expect_fail("packed run cut", "\xa2\x01\x02\x01\xff", 5, PB_ETRUNCATED, 4, "t.All.ri");
  expect_fail("nested bad", "\x52\x02\x08\xff", 4, PB_ETRUNCATED, 3, "t.All.m.x");
  expect_fail("unknown LEN past end", "\xba\x06\x09", 3, PB_ETRUNCATED, 0, "t.All");
  /* groups nested too deep */
  for (i = 0; i < 70; i++) deep[n++] = '\x0b'; /* field 1 start-group, nested */
  expect_fail("deep groups", deep, n, PB_EDEPTH, 0, "t.All.d");
  {
    rec r;
    pb_error e;
    uint8_t ok[] = {0x28, 0x01, 0x28, 0x02, 0x28, 0x03};
    memset(&r, 0, sizeof r);
    r.stop_at = 2;
    CHECK(pb_decode(&All, ok, sizeof ok, &CB, &r, &e) == PB_ESTOPPED && e.offset == 3, "stop %d at %zu",
          e.code, e.offset);
  }
}

static void test_grpc_frames(void) {
  uint8_t h[GRPC_HEADER_LEN], buf[32];
  unsigned flags;
  const uint8_t *pl;
  size_t len;
  CHECK(grpc_frame_header(h, 0, 3) == 0 && memcmp(h, "\0\0\0\0\3", 5) == 0, "hdr");
  CHECK(grpc_frame_header(h, 1, 0x01020304) == 0 && memcmp(h, "\1\1\2\3\4", 5) == 0, "hdr2");
  CHECK(grpc_frame_header(h, 0, 1ull << 32) == -1, "too long");
  memcpy(buf, "\0\0\0\0\3abc\0", 9);
  CHECK(grpc_frame_parse(buf, 9, 100, &flags, &pl, &len) == 8 && len == 3 && memcmp(pl, "abc", 3) == 0,
        "parse");
  CHECK(grpc_frame_parse(buf, 7, 100, &flags, &pl, &len) == 0, "partial");
  CHECK(grpc_frame_parse(buf, 3, 100, &flags, &pl, &len) == 0, "partial header");
  CHECK(grpc_frame_parse(buf, 9, 2, &flags, &pl, &len) == PB_ETOOBIG, "limit");
  buf[0] = 2;
  CHECK(grpc_frame_parse(buf, 1, 100, &flags, &pl, &len) == PB_EWIRE, "flags");
}

static void test_schema_helpers(void) {
  pb_field f[] = {{5, PB_INT32, 0, 0, 0, -1, "a", NULL, NULL},
                  {1, PB_INT32, 0, 0, 0, -1, "b", NULL, NULL},
                  {3, PB_INT32, 0, 0, 0, -1, "c", NULL, NULL}};
  pb_msg m = {"m", 3, f, NULL};
  CHECK(pb_msg_sort(&m) == 0 && f[0].number == 1 && f[2].number == 5, "sort");
  CHECK(pb_msg_field(&m, 3) == &f[1] && pb_msg_field(&m, 4) == NULL, "lookup");
  f[1].number = 5;
  CHECK(pb_msg_sort(&m) == 5, "duplicate");
  CHECK(pb_type_from_name("sfixed64") == PB_SFIXED64 && pb_type_from_name("group") == 0 &&
            pb_type_from_name("x") == 0,
        "names");
  CHECK(strcmp(pb_type_name(PB_SINT32), "sint32") == 0 && pb_packable(PB_ENUM) && !pb_packable(PB_BYTES),
        "types");
}

int main(void) {
  test_known_encodings();
  test_round_trip();
  test_malformed();
  test_grpc_frames();
  test_schema_helpers();
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
