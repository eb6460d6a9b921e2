/* parquet_test.c — unit tests for engine/parquet.c.
 *
 * Files are built byte by byte here (a small Thrift compact writer and page builders), so
 * each test controls exactly what lies: sizes, levels, dictionary indices, schemas. The
 * fixtures in spec/fixtures/parquet are also cut at every length and corrupted at every
 * byte; run under ASan (as the Makefile builds it) a read out of bounds fails the run. */
#include "parquet.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"

/* ---- byte buffers and a Thrift compact writer ---- */

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *s, size_t n) {
  if (n == 0) return;
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void put8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put32(buf *b, uint32_t v) {
  uint8_t x[4] = {v, v >> 8, v >> 16, v >> 24};
  put(b, x, 4);
}
static void put64(buf *b, uint64_t v) {
  put32(b, (uint32_t)v);
  put32(b, (uint32_t)(v >> 32));
}
static void putvar(buf *b, uint64_t v) {
  while (v >= 0x80) {
    put8(b, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  put8(b, (uint8_t)v);
}
static void putzz(buf *b, int64_t v) { putvar(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)); }

typedef struct tw {
  buf *b;
  int last[32];
  int d;
} tw;

static void tw_field(tw *t, int id, int type) {
  int delta = id - t->last[t->d];
  if (delta > 0 && delta <= 15) {
    put8(t->b, (uint8_t)(delta << 4 | type));
  } else {
    put8(t->b, (uint8_t)type);
    putzz(t->b, id);
  }
  t->last[t->d] = id;
}
static void tw_i32(tw *t, int id, int64_t v) {
  tw_field(t, id, 5);
  putzz(t->b, v);
}
static void tw_i64(tw *t, int id, int64_t v) {
  tw_field(t, id, 6);
  putzz(t->b, v);
}
static void tw_bool(tw *t, int id, int v) { tw_field(t, id, v ? 1 : 2); }
static void tw_str(tw *t, int id, const char *s) {
  tw_field(t, id, 8);
  putvar(t->b, strlen(s));
  put(t->b, s, strlen(s));
}
static void tw_begin(tw *t) { t->last[++t->d] = 0; } /* a struct inside a list */
static void tw_end(tw *t) {
  put8(t->b, 0);
  t->d--;
}
static void tw_struct(tw *t, int id) {
  tw_field(t, id, 12);
  tw_begin(t);
}
static void tw_list(tw *t, int id, int etype, uint32_t n) {
  tw_field(t, id, 9);
  if (n < 15) {
    put8(t->b, (uint8_t)(n << 4 | etype));
  } else {
    put8(t->b, (uint8_t)(0xf0 | etype));
    putvar(t->b, n);
  }
}

/* ---- level and value encoders ---- */

/* RLE/bit-packed hybrid: alternating single-value RLE runs and bit-packed groups. */
static void hybrid(buf *b, const int *v, size_t n, int bw, int packed) {
  if (packed) {
    size_t groups = (n + 7) / 8;
    putvar(b, groups << 1 | 1);
    uint64_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < groups * 8; i++) {
      acc |= (uint64_t)(i < n ? v[i] : 0) << bits;
      bits += bw;
      while (bits >= 8) {
        put8(b, (uint8_t)acc);
        acc >>= 8;
        bits -= 8;
      }
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    putvar(b, 1 << 1);
    for (int k = 0; k < (bw + 7) / 8; k++) put8(b, (uint8_t)(v[i] >> (8 * k)));
  }
}

static void levels_v1(buf *b, const int *v, size_t n, int bw) {
  buf t = {0};
  hybrid(&t, v, n, bw, 0);
  put32(b, (uint32_t)t.n);
  put(b, t.p, t.n);
  free(t.p);
}

/* ---- pages ---- */

enum { DATA = 0, DICT = 2, DATA_V2 = 3 };
enum { PLAIN = 0, PLAIN_DICT = 2, RLE = 3, RLE_DICT = 8 };

static void page_v1(buf *out, int32_t usize, int32_t csize, int32_t nvals, int enc, const buf *body) {
  tw t = {.b = out};
  tw_i32(&t, 1, DATA);
  tw_i32(&t, 2, usize);
  tw_i32(&t, 3, csize);
  tw_struct(&t, 5);
  tw_i32(&t, 1, nvals);
  tw_i32(&t, 2, enc);
  tw_i32(&t, 3, RLE);
  tw_i32(&t, 4, RLE);
  tw_end(&t);
  put8(out, 0);
  put(out, body->p, body->n);
}

static void page_dict(buf *out, int32_t usize, int32_t csize, int32_t nvals, int enc, const buf *body) {
  tw t = {.b = out};
  tw_i32(&t, 1, DICT);
  tw_i32(&t, 2, usize);
  tw_i32(&t, 3, csize);
  tw_struct(&t, 7);
  tw_i32(&t, 1, nvals);
  tw_i32(&t, 2, enc);
  tw_end(&t);
  put8(out, 0);
  put(out, body->p, body->n);
}

static void page_v2(buf *out, int32_t usize, int32_t csize, int32_t nvals, int32_t nrows, int enc,
                    int32_t def_len, int32_t rep_len, int compressed, const buf *body) {
  tw t = {.b = out};
  tw_i32(&t, 1, DATA_V2);
  tw_i32(&t, 2, usize);
  tw_i32(&t, 3, csize);
  tw_struct(&t, 8);
  tw_i32(&t, 1, nvals);
  tw_i32(&t, 2, 0);
  tw_i32(&t, 3, nrows);
  tw_i32(&t, 4, enc);
  tw_i32(&t, 5, def_len);
  tw_i32(&t, 6, rep_len);
  if (compressed >= 0) tw_bool(&t, 7, compressed);
  tw_end(&t);
  put8(out, 0);
  put(out, body->p, body->n);
}

/* ---- files ---- */

typedef struct se {
  const char *name;
  int type, rep, children, converted;
} se;
#define GROUP -1
#define NONE -1
enum { REQ = 0, OPT = 1, REP = 2 };

typedef struct col {
  const char *path; /* dotted */
  int type, codec;
  int64_t num_values;
  buf pages;
  int64_t dict_len; /* > 0: the first dict_len bytes of pages are a dictionary page */
} col;

static void build_file(buf *out, const se *s, int ns, col *cols, int nc, int64_t rows) {
  int64_t off[16];
  put(out, "PAR1", 4);
  for (int c = 0; c < nc; c++) {
    off[c] = (int64_t)out->n;
    put(out, cols[c].pages.p, cols[c].pages.n);
  }
  size_t fstart = out->n;
  tw t = {.b = out};
  tw_i32(&t, 1, 1);
  tw_list(&t, 2, 12, (uint32_t)ns);
  for (int i = 0; i < ns; i++) {
    tw_begin(&t);
    if (s[i].type >= 0) tw_i32(&t, 1, s[i].type);
    if (s[i].type == 7) tw_i32(&t, 2, 4);
    if (s[i].rep >= 0) tw_i32(&t, 3, s[i].rep);
    tw_str(&t, 4, s[i].name);
    if (s[i].children >= 0) tw_i32(&t, 5, s[i].children);
    if (s[i].converted >= 0) tw_i32(&t, 6, s[i].converted);
    tw_end(&t);
  }
  tw_i64(&t, 3, rows);
  tw_list(&t, 4, 12, 1);
  tw_begin(&t);
  tw_list(&t, 1, 12, (uint32_t)nc);
  for (int c = 0; c < nc; c++) {
    tw_begin(&t);
    tw_i64(&t, 2, off[c]);
    tw_struct(&t, 3);
    tw_i32(&t, 1, cols[c].type);
    tw_list(&t, 2, 5, 2);
    putzz(out, PLAIN);
    putzz(out, RLE);
    int np = 1;
    for (const char *q = cols[c].path; *q; q++) np += *q == '.';
    tw_list(&t, 3, 8, (uint32_t)np);
    for (const char *q = cols[c].path;;) {
      const char *dot = strchr(q, '.');
      size_t l = dot ? (size_t)(dot - q) : strlen(q);
      putvar(out, l);
      put(out, q, l);
      if (!dot) break;
      q = dot + 1;
    }
    tw_i32(&t, 4, cols[c].codec);
    tw_i64(&t, 5, cols[c].num_values);
    tw_i64(&t, 6, (int64_t)cols[c].pages.n);
    tw_i64(&t, 7, (int64_t)cols[c].pages.n);
    tw_i64(&t, 9, off[c] + cols[c].dict_len);
    if (cols[c].dict_len > 0) tw_i64(&t, 11, off[c]);
    tw_end(&t);
    tw_end(&t);
  }
  tw_i64(&t, 2, 0);
  tw_i64(&t, 3, rows);
  tw_end(&t);
  put8(out, 0);
  put32(out, (uint32_t)(out->n - fstart));
  put(out, "PAR1", 4);
}

/* ---- reading helpers ---- */

static int collect(void *ud, const char *s, size_t n) {
  put(ud, s, n);
  return 0;
}

/* Reads bytes into JSON lines; returns the status, fills text (NUL-terminated) and msg. */
static pq_status read_json(const buf *file, char **text, char *msg, size_t max_memory) {
  pq_error err;
  pq_limits lim;
  pq_limits_default(&lim);
  if (max_memory) lim.max_memory = max_memory;
  buf out = {0};
  pq_file *f = pq_open(file->p, file->n, &lim, &err);
  if (f) {
    pq_write_jsonl(f, collect, &out, &err);
    pq_close(f);
  }
  put8(&out, 0);
  *text = (char *)out.p;
  if (msg) snprintf(msg, 320, "%s", err.msg);
  return err.status;
}

/* PARQUET_TEST_SEEDS=dir writes each valid synthetic file there (fuzz/corpus/parquet seeds). */
static void save_seed(const char *what, const buf *file) {
  const char *dir = getenv("PARQUET_TEST_SEEDS");
  if (!dir) return;
  char path[512];
  int n = snprintf(path, sizeof path, "%s/c_", dir);
  for (const char *q = what; *q && n < (int)sizeof path - 9; q++)
    path[n++] = (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ? *q
                : (*q >= 'A' && *q <= 'Z')                           ? (char)(*q - 'A' + 'a')
                                                                     : '_';
  snprintf(path + n, sizeof path - (size_t)n, ".parquet");
  FILE *fp = fopen(path, "wb");
  if (fp) {
    fwrite(file->p, 1, file->n, fp);
    fclose(fp);
  }
}

static void expect_json(const char *what, const buf *file, const char *want) {
  char *got, msg[320];
  save_seed(what, file);
  pq_status st = read_json(file, &got, msg, 0);
  CHECK(st == PQ_OK, "%s: %s: %s", what, pq_status_code(st), msg);
  CHECK(strcmp(got, want) == 0, "%s:\n got: %s\nwant: %s", what, got, want);
  free(got);
}

static void expect_error(const char *what, const buf *file, pq_status want, const char *needle) {
  char *got, msg[320];
  pq_status st = read_json(file, &got, msg, 0);
  CHECK(st == want, "%s: got %s (%s), want %s", what, pq_status_code(st), msg, pq_status_code(want));
  CHECK(!needle || strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", what, msg, needle);
  free(got);
}

static void freebuf(buf *b) {
  free(b->p);
  *b = (buf){0};
}

/* body of PLAIN INT32 values */
static buf plain_i32(const int *v, size_t n) {
  buf b = {0};
  for (size_t i = 0; i < n; i++) put32(&b, (uint32_t)v[i]);
  return b;
}

/* ---- tests ---- */

/* optional int32 a: rows 1, null, 3 — v1 page, uncompressed */
static buf file_optional_int(int codec, int lie_usize, int lie_csize) {
  static const se s[] = {{"schema", GROUP, NONE, 1, NONE}, {"a", 1, OPT, NONE, NONE}};
  int def[] = {1, 0, 1}, vals[] = {1, 3};
  buf body = {0};
  levels_v1(&body, def, 3, 1);
  buf v = plain_i32(vals, 2);
  put(&body, v.p, v.n);
  freebuf(&v);
  buf comp = {0};
  if (codec == 1) {
    size_t cl = snappy_max_compressed_length(body.n);
    comp.p = malloc(cl);
    snappy_compress((const char *)body.p, body.n, (char *)comp.p, &cl);
    comp.n = cl;
  } else if (codec == 2) {
    z_stream zs = {0};
    deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
    comp.cap = deflateBound(&zs, body.n) + 32;
    comp.p = malloc(comp.cap);
    zs.next_in = body.p;
    zs.avail_in = (uInt)body.n;
    zs.next_out = comp.p;
    zs.avail_out = (uInt)comp.cap;
    deflate(&zs, Z_FINISH);
    comp.n = zs.total_out;
    deflateEnd(&zs);
  } else if (codec == 6) {
    comp.cap = ZSTD_compressBound(body.n);
    comp.p = malloc(comp.cap);
    comp.n = ZSTD_compress(comp.p, comp.cap, body.p, body.n, 3);
  } else {
    put(&comp, body.p, body.n);
  }
  col c = {.path = "a", .type = 1, .codec = codec, .num_values = 3};
  page_v1(&c.pages, (int32_t)body.n + lie_usize, (int32_t)comp.n + lie_csize, 3, PLAIN, &comp);
  buf f = {0};
  build_file(&f, s, 2, &c, 1, 3);
  freebuf(&body);
  freebuf(&comp);
  freebuf(&c.pages);
  return f;
}

static void test_codecs(void) {
  const int codecs[] = {0, 1, 2, 6};
  for (int i = 0; i < 4; i++) {
    char what[64];
    snprintf(what, sizeof what, "optional int32, codec %s", pq_codec_name(codecs[i]));
    buf f = file_optional_int(codecs[i], 0, 0);
    expect_json(what, &f, "{\"a\":1}\n{\"a\":null}\n{\"a\":3}\n");
    freebuf(&f);
    /* the page declares more bytes than it inflates to */
    f = file_optional_int(codecs[i], 5, 0);
    snprintf(what, sizeof what, "%s, uncompressed size lies", pq_codec_name(codecs[i]));
    expect_error(what, &f, PQ_E_PAGE, "column a (row group 0)");
    freebuf(&f);
    /* the page claims more compressed bytes than the chunk holds */
    f = file_optional_int(codecs[i], 0, 1000);
    snprintf(what, sizeof what, "%s, compressed size lies", pq_codec_name(codecs[i]));
    expect_error(what, &f, PQ_E_PAGE, "compressed_page_size");
    freebuf(&f);
  }
  buf f = file_optional_int(1, 7, 0);
  expect_error("snappy size lie message", &f, PQ_E_PAGE, "SNAPPY page inflates to");
  freebuf(&f);
  /* codecs out of scope name themselves and the column */
  f = file_optional_int(0, 0, 0);
  for (size_t i = 0; i + 2 < f.n; i++) { /* patch ColumnMetaData.codec (field 4 after 3) */
    if (f.p[i] == 0x15 && f.p[i + 1] == 0x00 && f.p[i + 2] == 0x16) {
      f.p[i + 1] = 2 * 7; /* zigzag(7) = LZ4_RAW */
      break;
    }
  }
  expect_error("LZ4_RAW codec", &f, PQ_E_CODEC,
               "column a (row group 0): unsupported compression codec LZ4_RAW");
  freebuf(&f);
}

static void test_magic_and_footer(void) {
  buf good = file_optional_int(0, 0, 0);
  buf f = {0};
  put(&f, good.p, good.n);
  memcpy(f.p, "PAR2", 4);
  expect_error("bad leading magic", &f, PQ_E_MAGIC, "PAR1");
  memcpy(f.p, "PAR1", 4);
  memcpy(f.p + f.n - 4, "PARX", 4);
  expect_error("bad trailing magic", &f, PQ_E_TRUNCATED, "PAR1");
  memcpy(f.p + f.n - 4, "PARE", 4);
  expect_error("encrypted footer", &f, PQ_E_UNSUPPORTED, "encrypted");
  memcpy(f.p + f.n - 4, "PAR1", 4);
  uint32_t big = (uint32_t)f.n;
  memcpy(f.p + f.n - 8, &big, 4);
  expect_error("footer length past the end", &f, PQ_E_TRUNCATED, "footer length");
  big = 0xffffffffu;
  memcpy(f.p + f.n - 8, &big, 4);
  expect_error("footer length 4 GiB", &f, PQ_E_TRUNCATED, "footer length");
  big = 3;
  memcpy(f.p + f.n - 8, &big, 4);
  expect_error("footer length too short", &f, PQ_E_METADATA, "footer");
  freebuf(&f);
  buf empty = {0};
  put(&empty, "", 0);
  expect_error("empty file", &empty, PQ_E_TRUNCATED, NULL);
  put(&empty, "PAR1PAR1", 8);
  expect_error("8 bytes", &empty, PQ_E_TRUNCATED, NULL);
  freebuf(&empty);
  /* every prefix of a valid file fails cleanly */
  int all_ok = 1;
  for (size_t n = 0; n < good.n; n++) {
    buf p = {.p = good.p, .n = n};
    char *got;
    pq_status st = read_json(&p, &got, NULL, 0);
    free(got);
    if (st == PQ_OK) all_ok = 0;
  }
  CHECK(all_ok, "every truncation is an error");
  freebuf(&good);
}

static void test_dictionary(void) {
  static const se s[] = {{"schema", GROUP, NONE, 1, NONE}, {"s", 6, OPT, NONE, 0}};
  for (int legacy = 0; legacy < 2; legacy++) {
    for (int bad_index = 0; bad_index < 2; bad_index++) {
      buf dict = {0};
      const char *words[] = {"zero", "one", "two"};
      for (int i = 0; i < 3; i++) {
        put32(&dict, (uint32_t)strlen(words[i]));
        put(&dict, words[i], strlen(words[i]));
      }
      col c = {.path = "s", .type = 6, .codec = 0, .num_values = 5};
      page_dict(&c.pages, (int32_t)dict.n, (int32_t)dict.n, 3, legacy ? PLAIN_DICT : PLAIN, &dict);
      c.dict_len = (int64_t)c.pages.n;
      int def[] = {1, 1, 0, 1, 1}, idx[] = {2, 0, 1, bad_index ? 5 : 2};
      buf body = {0};
      levels_v1(&body, def, 5, 1);
      put8(&body, 3); /* bit width */
      hybrid(&body, idx, 4, 3, 1);
      page_v1(&c.pages, (int32_t)body.n, (int32_t)body.n, 5, legacy ? PLAIN_DICT : RLE_DICT, &body);
      buf f = {0};
      build_file(&f, s, 2, &c, 1, 5);
      if (bad_index)
        expect_error("dictionary index out of range", &f, PQ_E_DICTIONARY,
                     "column s (row group 0): dictionary index 5 out of range (dictionary has 3 entries)");
      else
        expect_json(legacy ? "PLAIN_DICTIONARY" : "RLE_DICTIONARY", &f,
                    "{\"s\":\"two\"}\n{\"s\":\"zero\"}\n{\"s\":null}\n{\"s\":\"one\"}\n{\"s\":\"two\"}\n");
      freebuf(&f);
      freebuf(&body);
      freebuf(&dict);
      freebuf(&c.pages);
    }
  }
  /* a dictionary-encoded page with no dictionary page */
  col c = {.path = "s", .type = 6, .codec = 0, .num_values = 1};
  int def[] = {1}, idx[] = {0};
  buf body = {0};
  levels_v1(&body, def, 1, 1);
  put8(&body, 1);
  hybrid(&body, idx, 1, 1, 0);
  page_v1(&c.pages, (int32_t)body.n, (int32_t)body.n, 1, RLE_DICT, &body);
  buf f = {0};
  build_file(&f, s, 2, &c, 1, 1);
  expect_error("no dictionary page", &f, PQ_E_DICTIONARY, "no dictionary page");
  freebuf(&f);
  freebuf(&body);
  freebuf(&c.pages);
}

/* repeated int32 r (a bare repeated field): [1,2], [], [3] */
static void test_bare_repeated(void) {
  static const se s[] = {{"schema", GROUP, NONE, 1, NONE}, {"r", 1, REP, NONE, NONE}};
  int rep[] = {0, 1, 0, 0}, def[] = {1, 1, 0, 1}, vals[] = {1, 2, 3};
  buf body = {0};
  levels_v1(&body, rep, 4, 1);
  levels_v1(&body, def, 4, 1);
  buf v = plain_i32(vals, 3);
  put(&body, v.p, v.n);
  col c = {.path = "r", .type = 1, .codec = 0, .num_values = 4};
  page_v1(&c.pages, (int32_t)body.n, (int32_t)body.n, 4, PLAIN, &body);
  buf f = {0};
  build_file(&f, s, 2, &c, 1, 3);
  expect_json("bare repeated int32", &f, "{\"r\":[1,2]}\n{\"r\":[]}\n{\"r\":[3]}\n");
  freebuf(&f);
  /* a first entry that continues a row (rep 1) is out of step */
  rep[0] = 1;
  freebuf(&body);
  freebuf(&c.pages);
  levels_v1(&body, rep, 4, 1);
  levels_v1(&body, def, 4, 1);
  put(&body, v.p, v.n);
  page_v1(&c.pages, (int32_t)body.n, (int32_t)body.n, 4, PLAIN, &body);
  build_file(&f, s, 2, &c, 1, 3);
  expect_error("row starting with rep 1", &f, PQ_E_PAGE, "inconsistent");
  freebuf(&f);
  /* the row group declares more rows than the levels hold */
  rep[0] = 0;
  freebuf(&body);
  freebuf(&c.pages);
  levels_v1(&body, rep, 4, 1);
  levels_v1(&body, def, 4, 1);
  put(&body, v.p, v.n);
  page_v1(&c.pages, (int32_t)body.n, (int32_t)body.n, 4, PLAIN, &body);
  build_file(&f, s, 2, &c, 1, 4);
  expect_error("more rows than levels", &f, PQ_E_PAGE, "row group declares 4");
  freebuf(&f);
  build_file(&f, s, 2, &c, 1, 2);
  expect_error("fewer rows than levels", &f, PQ_E_PAGE, "more values");
  freebuf(&f);
  freebuf(&v);
  freebuf(&body);
  freebuf(&c.pages);
}

/* repeated group g { required int32 x; optional binary s (UTF8) }, data page v2 */
static void test_repeated_group_v2(void) {
  static const se s[] = {
      {"schema", GROUP, NONE, 1, NONE},
      {"g", GROUP, REP, 2, NONE},
      {"x", 1, REQ, NONE, NONE},
      {"s", 6, OPT, NONE, 0},
  };
  /* rows: [{x=1,s="a"},{x=2,s=null}], [] */
  int rep[] = {0, 1, 0}, defx[] = {1, 1, 0}, defs[] = {2, 1, 0}, xs[] = {1, 2};
  col c[2] = {{.path = "g.x", .type = 1, .num_values = 3}, {.path = "g.s", .type = 6, .num_values = 3}};
  for (int k = 0; k < 2; k++) {
    buf lv = {0}, dl = {0};
    hybrid(&lv, rep, 3, 1, k);
    size_t rl = lv.n;
    hybrid(&dl, k ? defs : defx, 3, k ? 2 : 1, 1 - k);
    put(&lv, dl.p, dl.n);
    buf vals = {0};
    if (k == 0) {
      vals = plain_i32(xs, 2);
    } else {
      put32(&vals, 1);
      put(&vals, "a", 1);
    }
    put(&lv, vals.p, vals.n);
    page_v2(&c[k].pages, (int32_t)lv.n, (int32_t)lv.n, 3, 2, PLAIN, (int32_t)dl.n, (int32_t)rl, k ? 0 : -1,
            &lv);
    freebuf(&lv);
    freebuf(&dl);
    freebuf(&vals);
  }
  buf f = {0};
  build_file(&f, s, 4, c, 2, 2);
  expect_json("repeated group, v2 pages", &f,
              "{\"g\":[{\"x\":1,\"s\":\"a\"},{\"x\":2,\"s\":null}]}\n{\"g\":[]}\n");
  freebuf(&f);
  freebuf(&c[0].pages);
  freebuf(&c[1].pages);
}

/* optional group l (LIST) { repeated int32 element } (two-level), and MAP */
static void test_list_and_map(void) {
  static const se s[] = {
      {"schema", GROUP, NONE, 2, NONE},   {"l", GROUP, OPT, 1, 3},
      {"element", 1, REP, NONE, NONE},    {"m", GROUP, OPT, 1, 1},
      {"key_value", GROUP, REP, 2, NONE}, {"key", 6, REQ, NONE, 0},
      {"value", 1, OPT, NONE, NONE},
  };
  /* row 1: l=[5,6], m={a:1}; row 2: l=null, m={} */
  int lrep[] = {0, 1, 0}, ldef[] = {2, 2, 0}, lv[] = {5, 6};
  int krep[] = {0, 0}, kdef[] = {2, 1}, vdef[] = {3, 1}, vv[] = {1};
  col c[3] = {{.path = "l.element", .type = 1, .num_values = 3},
              {.path = "m.key_value.key", .type = 6, .num_values = 2},
              {.path = "m.key_value.value", .type = 1, .num_values = 2}};
  buf b = {0};
  levels_v1(&b, lrep, 3, 1);
  levels_v1(&b, ldef, 3, 2);
  buf v = plain_i32(lv, 2);
  put(&b, v.p, v.n);
  freebuf(&v);
  page_v1(&c[0].pages, (int32_t)b.n, (int32_t)b.n, 3, PLAIN, &b);
  freebuf(&b);
  levels_v1(&b, krep, 2, 1);
  levels_v1(&b, kdef, 2, 2);
  put32(&b, 1);
  put(&b, "a", 1);
  page_v1(&c[1].pages, (int32_t)b.n, (int32_t)b.n, 2, PLAIN, &b);
  freebuf(&b);
  levels_v1(&b, krep, 2, 1);
  levels_v1(&b, vdef, 2, 2);
  v = plain_i32(vv, 1);
  put(&b, v.p, v.n);
  freebuf(&v);
  page_v1(&c[2].pages, (int32_t)b.n, (int32_t)b.n, 2, PLAIN, &b);
  freebuf(&b);
  buf f = {0};
  build_file(&f, s, 7, c, 3, 2);
  expect_json("two-level LIST and MAP", &f,
              "{\"l\":[5,6],\"m\":[{\"key\":\"a\",\"value\":1}]}\n{\"l\":null,\"m\":[]}\n");
  freebuf(&f);
  for (int i = 0; i < 3; i++) freebuf(&c[i].pages);
}

static void test_bad_levels_and_values(void) {
  static const se s[] = {{"schema", GROUP, NONE, 1, NONE}, {"s", 6, OPT, NONE, 0}};
  struct {
    const char *what;
    int def0, nvals_page, strlen_lie, num_values;
    pq_status st;
    const char *needle;
  } cases[] = {
      {"definition level above max", 3, 2, 0, 2, PQ_E_PAGE, "definition level 3 exceeds the maximum 1"},
      {"byte array length lies", 1, 2, 100, 2, PQ_E_PAGE, "byte array 1 of 2 is 102 bytes"},
      {"page holds more values than the chunk", 1, 2, 0, 1, PQ_E_PAGE, "more than the 1"},
      {"chunk declares more values than pages", 1, 2, 0, 3, PQ_E_PAGE, "pages hold 2 values"},
      {"levels end early", 1, 9, 0, 9, PQ_E_PAGE, "definition levels end after 2 of 9"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int def[] = {cases[i].def0, 1};
    buf b = {0};
    levels_v1(&b, def, 2, 1); /* an RLE run value is a whole byte, so 3 fits */
    put32(&b, 1);
    put(&b, "x", 1);
    put32(&b, (uint32_t)(2 + cases[i].strlen_lie));
    put(&b, "yz", 2);
    col c = {.path = "s", .type = 6, .num_values = cases[i].num_values};
    page_v1(&c.pages, (int32_t)b.n, (int32_t)b.n, cases[i].nvals_page, PLAIN, &b);
    buf f = {0};
    build_file(&f, s, 2, &c, 1, 2);
    expect_error(cases[i].what, &f, cases[i].st, cases[i].needle);
    freebuf(&f);
    freebuf(&b);
    freebuf(&c.pages);
  }
}

/* required int32 a with values in an encoding given as raw bytes */
static buf file_encoded_int(int enc, const buf *values, int n) {
  static const se s[] = {{"schema", GROUP, NONE, 1, NONE}, {"a", 1, REQ, NONE, NONE}};
  col c = {.path = "a", .type = 1, .num_values = n};
  page_v1(&c.pages, (int32_t)values->n, (int32_t)values->n, n, enc, values);
  buf f = {0};
  build_file(&f, s, 2, &c, 1, n);
  freebuf(&c.pages);
  return f;
}

static void test_encodings(void) {
  /* DELTA_BINARY_PACKED by hand: block 128, 4 miniblocks, 3 values, first 7, deltas -2, +5 */
  buf d = {0};
  putvar(&d, 128);
  putvar(&d, 4);
  putvar(&d, 3);
  putzz(&d, 7);
  putzz(&d, -2);                  /* min delta */
  put(&d, "\x03\x00\x00\x00", 4); /* bit widths */
  int deltas[32] = {0, 7};        /* -2 + 0 = -2, -2 + 7 = +5 */
  buf packed = {0};
  hybrid(&packed, deltas, 32, 3, 1);
  put(&d, packed.p + 1, packed.n - 1); /* the miniblock: 32 values * 3 bits, no run header */
  buf f = file_encoded_int(5, &d, 3);
  expect_json("DELTA_BINARY_PACKED by hand", &f, "{\"a\":7}\n{\"a\":5}\n{\"a\":10}\n");
  freebuf(&f);
  d.p[6] = 65; /* first miniblock bit width */
  f = file_encoded_int(5, &d, 3);
  expect_error("DELTA_BINARY_PACKED bit width 65", &f, PQ_E_PAGE, "bit width 65");
  freebuf(&f);
  d.n -= 12; /* cut the miniblock */
  d.p[6] = 3;
  f = file_encoded_int(5, &d, 3);
  expect_error("DELTA_BINARY_PACKED truncated", &f, PQ_E_PAGE, "values end after 1 of 3");
  freebuf(&f);
  d.p[0] = 100; /* block size not a multiple of 128 */
  f = file_encoded_int(5, &d, 3);
  expect_error("DELTA_BINARY_PACKED block size", &f, PQ_E_PAGE, "block of 100 values");
  freebuf(&f);
  freebuf(&d);
  freebuf(&packed);
  /* BIT_PACKED values, and a made-up encoding, are refused by name */
  int one[] = {1};
  buf v = plain_i32(one, 1);
  f = file_encoded_int(4, &v, 1);
  expect_error("BIT_PACKED values", &f, PQ_E_UNSUPPORTED,
               "column a (row group 0): unsupported encoding BIT_PACKED for INT32 values");
  freebuf(&f);
  f = file_encoded_int(42, &v, 1);
  expect_error("encoding 42", &f, PQ_E_UNSUPPORTED, "unsupported encoding UNKNOWN(42)");
  freebuf(&f);
  f = file_encoded_int(6, &v, 1);
  expect_error("DELTA_LENGTH_BYTE_ARRAY on INT32", &f, PQ_E_UNSUPPORTED, "DELTA_LENGTH_BYTE_ARRAY for INT32");
  freebuf(&f);
  freebuf(&v);
}

static void test_schema_errors(void) {
  int dummy[] = {1};
  buf v = plain_i32(dummy, 1);
  col c = {.path = "a", .type = 1, .num_values = 1};
  page_v1(&c.pages, (int32_t)v.n, (int32_t)v.n, 1, PLAIN, &v);
  buf f = {0};
  static const se too_many[] = {{"schema", GROUP, NONE, 3, NONE}, {"a", 1, REQ, NONE, NONE}};
  build_file(&f, too_many, 2, &c, 1, 1);
  expect_error("num_children past the schema", &f, PQ_E_METADATA, "declares 3 children");
  freebuf(&f);
  static const se no_type[] = {{"schema", GROUP, NONE, 1, NONE}, {"a", GROUP, REQ, NONE, NONE}};
  build_file(&f, no_type, 2, &c, 1, 1);
  expect_error("element with neither type nor children", &f, PQ_E_METADATA, "neither a type nor children");
  freebuf(&f);
  static const se wrong_type[] = {{"schema", GROUP, NONE, 1, NONE}, {"a", 2, REQ, NONE, NONE}};
  build_file(&f, wrong_type, 2, &c, 1, 1);
  expect_error("chunk type differs from schema", &f, PQ_E_METADATA,
               "column a (row group 0) is INT32, schema says INT64");
  freebuf(&f);
  static const se other_name[] = {{"schema", GROUP, NONE, 1, NONE}, {"b", 1, REQ, NONE, NONE}};
  build_file(&f, other_name, 2, &c, 1, 1);
  expect_error("path_in_schema differs", &f, PQ_E_METADATA, "\"a\", schema says \"b\"");
  freebuf(&f);
  /* 70 nested groups */
  se deep[72];
  deep[0] = (se){"schema", GROUP, NONE, 1, NONE};
  for (int i = 1; i <= 70; i++) deep[i] = (se){"g", GROUP, REQ, 1, NONE};
  deep[71] = (se){"a", 1, REQ, NONE, NONE};
  build_file(&f, deep, 72, &c, 1, 1);
  expect_error("schema too deep", &f, PQ_E_METADATA, "deeper than 64");
  freebuf(&f);
  /* a valid file, then its thrift list count patched to lie */
  static const se ok[] = {{"schema", GROUP, NONE, 1, NONE}, {"a", 1, REQ, NONE, NONE}};
  build_file(&f, ok, 2, &c, 1, 1);
  expect_json("required int32", &f, "{\"a\":1}\n");
  size_t foot = f.n - 8 - (f.p[f.n - 8] | f.p[f.n - 7] << 8);
  CHECK(f.p[foot + 2] == 0x19 && f.p[foot + 3] == 0x2c, "schema list header where expected");
  f.p[foot + 3] = 0xfc; /* list of structs with a varint count follows */
  buf g = {0};
  put(&g, f.p, foot + 4);
  putvar(&g, 1u << 30);
  put(&g, f.p + foot + 4, f.n - foot - 4 - 8);
  put32(&g, (uint32_t)(g.n - foot));
  put(&g, "PAR1", 4);
  expect_error("schema list count lies", &g, PQ_E_METADATA, "longer than the bytes");
  freebuf(&g);
  freebuf(&f);
  freebuf(&v);
  freebuf(&c.pages);
}

static int abort_after_one(void *ud, int64_t row) {
  (void)ud;
  return row >= 1;
}

static void test_sink_abort_and_limits(void) {
  buf f = file_optional_int(0, 0, 0);
  pq_error err;
  pq_file *pf = pq_open(f.p, f.n, NULL, &err);
  CHECK(pf != NULL, "open: %s", err.msg);
  pq_sink s = {.row_begin = abort_after_one};
  CHECK(pq_read(pf, &s, &err) == -1 && err.status == PQ_E_ABORTED, "abort: %s", err.msg);
  /* the same file reads again after an abort */
  pq_sink none = {0};
  CHECK(pq_read(pf, &none, &err) == 0, "re-read: %s", err.msg);
  pq_close(pf);
  char *got, msg[320];
  pq_status st = read_json(&f, &got, msg, 64);
  CHECK(st == PQ_E_LIMIT, "max_memory 64: %s %s", pq_status_code(st), msg);
  free(got);
  freebuf(&f);
  CHECK(strcmp(pq_codec_name(99), "UNKNOWN(99)") == 0, "%s", pq_codec_name(99));
  CHECK(strcmp(pq_encoding_name(8), "RLE_DICTIONARY") == 0, "%s", pq_encoding_name(8));
  CHECK(strcmp(pq_status_code(PQ_E_DICTIONARY), "PARQUET_DICTIONARY") == 0, "status code");
}

/* float formatting and NaN in JSON lines */
static void test_json_numbers(void) {
  static const se s[] = {
      {"schema", GROUP, NONE, 2, NONE}, {"f", 4, REQ, NONE, NONE}, {"d", 5, REQ, NONE, NONE}};
  float fv[] = {0.1f, 3.0f, -0.0f, 1e30f};
  double dv[] = {0.1, 1.0 / 0.0, 0.0 / 0.0, 123456789012345678.0};
  col c[2] = {{.path = "f", .type = 4, .num_values = 4}, {.path = "d", .type = 5, .num_values = 4}};
  buf b = {0};
  for (int i = 0; i < 4; i++) {
    uint32_t u;
    memcpy(&u, &fv[i], 4);
    put32(&b, u);
  }
  page_v1(&c[0].pages, (int32_t)b.n, (int32_t)b.n, 4, PLAIN, &b);
  freebuf(&b);
  for (int i = 0; i < 4; i++) {
    uint64_t u;
    memcpy(&u, &dv[i], 8);
    put64(&b, u);
  }
  page_v1(&c[1].pages, (int32_t)b.n, (int32_t)b.n, 4, PLAIN, &b);
  freebuf(&b);
  buf f = {0};
  build_file(&f, s, 3, c, 2, 4);
  expect_json("floats", &f,
              "{\"f\":0.1,\"d\":0.1}\n{\"f\":3.0,\"d\":null}\n{\"f\":-0.0,\"d\":null}\n"
              "{\"f\":1e+30,\"d\":1.2345678901234568e+17}\n");
  freebuf(&f);
  freebuf(&c[0].pages);
  freebuf(&c[1].pages);
}

/* ---- the checked-in fixtures: every truncation, every corrupted byte ---- */

static int slurp(const char *path, buf *out) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return -1;
  char tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0) put(out, tmp, n);
  fclose(fp);
  return 0;
}

static int discard(void *ud, const char *s, size_t n) {
  (void)ud, (void)s, (void)n;
  return 0;
}

static pq_status try_read(const uint8_t *p, size_t n) {
  pq_error err;
  pq_limits lim = {.max_memory = 16 << 20};
  pq_file *f = pq_open(p, n, &lim, &err);
  if (!f) return err.status;
  pq_write_jsonl(f, discard, NULL, &err);
  pq_close(f);
  return err.status;
}

static void test_fixtures_damaged(void) {
  const char *names[] = {"hy_nested_snappy", "pw_zstd_v1", "pw_gzip_v2", "hy_types_dict_snappy",
                         "hy_types_delta_snappy"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    char path[256];
    snprintf(path, sizeof path, "spec/fixtures/parquet/%s.parquet", names[k]);
    buf f = {0};
    if (slurp(path, &f)) {
      CHECK(0, "cannot read %s (run from the repository root)", path);
      continue;
    }
    CHECK(try_read(f.p, f.n) == PQ_OK, "%s reads", path);
    int truncations_fail = 1;
    for (size_t n = 0; n < f.n; n++) {
      uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any overread */
      memcpy(copy, f.p, n);
      if (try_read(copy, n) == PQ_OK) truncations_fail = 0;
      free(copy);
    }
    CHECK(truncations_fail, "%s: every truncation is an error", path);
    size_t flips = 0;
    for (size_t i = 0; i < f.n; i++) {
      for (int m = 0; m < 3; m++) {
        static const uint8_t masks[] = {0x01, 0x80, 0xff};
        uint8_t *copy = malloc(f.n);
        memcpy(copy, f.p, f.n);
        copy[i] ^= masks[m];
        try_read(copy, f.n); /* any status; ASan/UBSan judge the rest */
        free(copy);
        flips++;
      }
    }
    CHECK(flips == 3 * f.n, "%s: %zu corrupted variants read without a crash", path, flips);
    freebuf(&f);
  }
}

int main(void) {
  test_codecs();
  test_magic_and_footer();
  test_dictionary();
  test_bare_repeated();
  test_repeated_group_v2();
  test_list_and_map();
  test_bad_levels_and_values();
  test_encodings();
  test_schema_errors();
  test_sink_abort_and_limits();
  test_json_numbers();
  test_fixtures_damaged();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
