/* parquet.c — Apache Parquet reader: footer, Thrift compact metadata, pages, levels,
 * values and record assembly. Plain C; see parquet.h for what is supported.
 *
 * Two rules hold everywhere below:
 *  - a length read from the file is compared with the bytes actually left before
 *    it is used (helpers take (pointer, end) pairs and never step past end);
 *  - a count read from the file is bounded by the bytes that could hold it before
 *    anything is allocated, and every allocation is charged to max_memory.
 * Errors keep the first message; messages name the column, row group and offset. */
#include "parquet.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

/* ---- errors and names --------------------------------------------------- */

static int fail(pq_error *err, pq_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(pq_error *err, pq_status st, const char *fmt, ...) {
  if (err && err->status == PQ_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->status = st;
  }
  return -1;
}

const char *pq_status_code(pq_status s) {
  switch (s) {
    case PQ_OK: return "OK";
    case PQ_E_IO: return "EIO";
    case PQ_E_MAGIC: return "PARQUET_MAGIC";
    case PQ_E_TRUNCATED: return "PARQUET_TRUNCATED";
    case PQ_E_METADATA: return "PARQUET_METADATA";
    case PQ_E_PAGE: return "PARQUET_PAGE";
    case PQ_E_DICTIONARY: return "PARQUET_DICTIONARY";
    case PQ_E_CODEC: return "PARQUET_CODEC";
    case PQ_E_UNSUPPORTED: return "PARQUET_UNSUPPORTED";
    case PQ_E_LIMIT: return "PARQUET_LIMIT";
    case PQ_E_NOMEM: return "ENOMEM";
    case PQ_E_ABORTED: return "PARQUET_ABORTED";
  }
  return "PARQUET_ERROR";
}

static const char *name_or_number(const char *const *names, size_t n, int v) {
  static _Thread_local char buf[32];
  if (v >= 0 && (size_t)v < n && names[v]) return names[v];
  snprintf(buf, sizeof buf, "UNKNOWN(%d)", v);
  return buf;
}
#define NAME_OF(table, v) name_or_number(table, sizeof table / sizeof table[0], v)

static const char *const type_names[] = {
    "BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY",
};
static const char *const codec_names[] = {
    "UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW",
};
static const char *const encoding_names[] = {
    "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
    "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
    "RLE_DICTIONARY", "BYTE_STREAM_SPLIT",
};
static const char *const repetition_names[] = {"REQUIRED", "OPTIONAL", "REPEATED"};
static const char *const logical_names[] = {
    NULL,      "STRING",  "MAP",  "LIST", "ENUM", "DECIMAL", "DATE",    "TIME",     "TIMESTAMP", NULL,
    "INTEGER", "UNKNOWN", "JSON", "BSON", "UUID", "FLOAT16", "VARIANT", "GEOMETRY", "GEOGRAPHY",
};
static const char *const converted_names[] = {
    "STRING",
    "MAP",
    "MAP_KEY_VALUE",
    "LIST",
    "ENUM",
    "DECIMAL",
    "DATE",
    "TIME_MILLIS",
    "TIME_MICROS",
    "TIMESTAMP_MILLIS",
    "TIMESTAMP_MICROS",
    "UINT_8",
    "UINT_16",
    "UINT_32",
    "UINT_64",
    "INT_8",
    "INT_16",
    "INT_32",
    "INT_64",
    "JSON",
    "BSON",
    "INTERVAL",
};

const char *pq_type_name(int t) { return NAME_OF(type_names, t); }
const char *pq_codec_name(int c) { return NAME_OF(codec_names, c); }
const char *pq_encoding_name(int e) { return NAME_OF(encoding_names, e); }
const char *pq_repetition_name(int r) { return NAME_OF(repetition_names, r); }

const char *pq_logical_name(const pq_node *n) {
  size_t nl = sizeof logical_names / sizeof logical_names[0];
  size_t nc = sizeof converted_names / sizeof converted_names[0];
  if (n->logical_type > 0 && (size_t)n->logical_type < nl && logical_names[n->logical_type])
    return logical_names[n->logical_type];
  if (n->converted_type >= 0 && (size_t)n->converted_type < nc) return converted_names[n->converted_type];
  return NULL;
}

/* ---- memory: two arenas charged to one budget --------------------------- */

typedef struct pq_chunk {
  struct pq_chunk *next;
  size_t size;
  _Alignas(max_align_t) unsigned char data[];
} pq_chunk;

struct pq_private {
  pq_limits limits;
  size_t mem_used;
  pq_chunk *meta; /* lives with the file */
  pq_chunk *rg;   /* the row group being decoded */
  ZSTD_DCtx *zstd;
  char *line; /* pq_write_jsonl's line buffer */
  size_t line_len, line_cap;
};

static void *arena_alloc(struct pq_private *p, pq_chunk **arena, size_t n, pq_error *err) {
  if (n > p->limits.max_memory || p->mem_used > p->limits.max_memory - n) {
    fail(err, PQ_E_LIMIT, "decoding needs more than max_memory (%zu bytes)", p->limits.max_memory);
    return NULL;
  }
  pq_chunk *c = malloc(sizeof *c + n);
  if (!c) {
    fail(err, PQ_E_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
  }
  c->next = *arena;
  c->size = n;
  *arena = c;
  p->mem_used += n;
  return c->data;
}

static void *arena_array(struct pq_private *p, pq_chunk **arena, size_t count, size_t size, pq_error *err) {
  if (size && count > SIZE_MAX / size) {
    fail(err, PQ_E_LIMIT, "decoding needs more than max_memory (%zu bytes)", p->limits.max_memory);
    return NULL;
  }
  void *v = arena_alloc(p, arena, count * size, err);
  if (v) memset(v, 0, count * size);
  return v;
}

static void arena_free(struct pq_private *p, pq_chunk **arena) {
  while (*arena) {
    pq_chunk *c = *arena;
    *arena = c->next;
    p->mem_used -= c->size;
    free(c);
  }
}

static char *arena_strdup(struct pq_private *p, const uint8_t *s, size_t n, pq_error *err) {
  if (n == SIZE_MAX) {
    fail(err, PQ_E_LIMIT, "string too long");
    return NULL;
  }
  char *d = arena_alloc(p, &p->meta, n + 1, err);
  if (d) {
    if (n) memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

static uint32_t rd_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const uint8_t *p) { return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32; }

/* ---- Thrift compact protocol -------------------------------------------- */

enum {
  TC_STOP = 0,
  TC_TRUE = 1,
  TC_FALSE = 2,
  TC_BYTE = 3,
  TC_I16 = 4,
  TC_I32 = 5,
  TC_I64 = 6,
  TC_DOUBLE = 7,
  TC_BINARY = 8,
  TC_LIST = 9,
  TC_SET = 10,
  TC_MAP = 11,
  TC_STRUCT = 12
};

typedef struct tc {
  const uint8_t *p, *end;
  pq_error *err;
  pq_status status; /* what a decoding failure is reported as */
  const char *ctx;  /* prefix for messages: "footer", "column x, page at offset N" */
} tc;

static int tc_fail(tc *t, const char *what) { return fail(t->err, t->status, "%s: %s", t->ctx, what); }

static int tc_varint(tc *t, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a varint");
    uint8_t b = *t->p++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return 0;
    }
  }
  return tc_fail(t, "Thrift varint longer than 10 bytes");
}

static int tc_zigzag(tc *t, int64_t *out) {
  uint64_t v;
  if (tc_varint(t, &v)) return -1;
  *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
  return 0;
}

static int tc_skip(tc *t, int type, int depth);

static int tc_list(tc *t, int *etype, uint32_t *n) {
  if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a list header");
  uint8_t b = *t->p++;
  uint64_t size = b >> 4;
  *etype = b & 0x0f;
  if (size == 15 && tc_varint(t, &size)) return -1;
  /* every element takes at least one byte, so a larger count is a lie */
  if (size > (uint64_t)(t->end - t->p))
    return tc_fail(t, "Thrift list is longer than the bytes that hold it");
  *n = (uint32_t)size;
  return 0;
}

static int tc_skip_elem(tc *t, int type, int depth) {
  if (type == TC_TRUE || type == TC_FALSE) { /* a bool element is one byte */
    if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a list");
    t->p++;
    return 0;
  }
  return tc_skip(t, type, depth);
}

static int tc_skip(tc *t, int type, int depth) {
  uint64_t u;
  if (depth > 32) return tc_fail(t, "Thrift structure nested too deeply");
  switch (type) {
    case TC_TRUE:
    case TC_FALSE: return 0;
    case TC_BYTE:
      if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a byte");
      t->p++;
      return 0;
    case TC_I16:
    case TC_I32:
    case TC_I64: return tc_varint(t, &u);
    case TC_DOUBLE:
      if (t->end - t->p < 8) return tc_fail(t, "Thrift data ends inside a double");
      t->p += 8;
      return 0;
    case TC_BINARY:
      if (tc_varint(t, &u)) return -1;
      if (u > (uint64_t)(t->end - t->p)) return tc_fail(t, "Thrift string runs past the end of its buffer");
      t->p += u;
      return 0;
    case TC_LIST:
    case TC_SET: {
      int et;
      uint32_t n;
      if (tc_list(t, &et, &n)) return -1;
      for (uint32_t i = 0; i < n; i++)
        if (tc_skip_elem(t, et, depth + 1)) return -1;
      return 0;
    }
    case TC_MAP: {
      if (tc_varint(t, &u)) return -1;
      if (u == 0) return 0;
      if (u > (uint64_t)(t->end - t->p) / 2 || t->p >= t->end)
        return tc_fail(t, "Thrift map is longer than the bytes that hold it");
      uint8_t kv = *t->p++;
      for (uint64_t i = 0; i < u; i++)
        if (tc_skip_elem(t, kv >> 4, depth + 1) || tc_skip_elem(t, kv & 15, depth + 1)) return -1;
      return 0;
    }
    case TC_STRUCT:
      for (;;) {
        if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a struct");
        uint8_t b = *t->p++;
        if (b == 0) return 0;
        if (!(b >> 4)) { /* a long-form field id; its value does not matter here */
          int64_t id;
          if (tc_zigzag(t, &id)) return -1;
        }
        if (tc_skip(t, b & 15, depth + 1)) return -1;
      }
    default: return tc_fail(t, "unknown Thrift wire type");
  }
}

/* Reads a field header; *type is TC_STOP at the end of the struct. */
static int tc_field(tc *t, int *last, int *type, int *id) {
  if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a struct");
  uint8_t b = *t->p++;
  *type = b & 15;
  if (b == 0) return 0;
  if (b >> 4) {
    *id = *last + (b >> 4);
  } else {
    int64_t v = 0;
    if (tc_zigzag(t, &v)) return -1;
    if (v < INT16_MIN || v > INT16_MAX) return tc_fail(t, "Thrift field id out of range");
    *id = (int)v;
  }
  *last = *id;
  return 0;
}

static int tc_i64(tc *t, int type, int64_t *out) {
  if (type == TC_BYTE) {
    if (t->p >= t->end) return tc_fail(t, "Thrift data ends inside a byte");
    *out = (int8_t)*t->p++;
    return 0;
  }
  if (type != TC_I16 && type != TC_I32 && type != TC_I64)
    return tc_fail(t, "Thrift field has the wrong wire type (expected an integer)");
  return tc_zigzag(t, out);
}

static int tc_i32(tc *t, int type, int32_t *out) {
  int64_t v = 0;
  if (tc_i64(t, type, &v)) return -1;
  if (v < INT32_MIN || v > INT32_MAX) return tc_fail(t, "Thrift i32 out of range");
  *out = (int32_t)v;
  return 0;
}

static int tc_bool(tc *t, int type, bool *out) {
  if (type != TC_TRUE && type != TC_FALSE)
    return tc_fail(t, "Thrift field has the wrong wire type (expected a bool)");
  *out = type == TC_TRUE;
  return 0;
}

static int tc_binary(tc *t, int type, const uint8_t **s, size_t *len) {
  uint64_t n;
  if (type != TC_BINARY) return tc_fail(t, "Thrift field has the wrong wire type (expected a string)");
  if (tc_varint(t, &n)) return -1;
  if (n > (uint64_t)(t->end - t->p)) return tc_fail(t, "Thrift string runs past the end of its buffer");
  *s = t->p;
  *len = (size_t)n;
  t->p += n;
  return 0;
}

static int tc_expect(tc *t, int type, int want) {
  return type == want ? 0 : tc_fail(t, "Thrift field has the wrong wire type");
}

/* ---- file metadata ------------------------------------------------------ */

typedef struct schema_elem {
  const uint8_t *name;
  size_t name_len;
  int32_t type, type_length, repetition, num_children, converted, scale, precision;
  int logical;
  int int_signed; /* -1 unknown */
} schema_elem;

typedef struct meta_ctx {
  pq_file *f;
  struct pq_private *p;
  pq_error *err;
  schema_elem *elems;
  uint32_t num_elems;
  char ***chunk_paths; /* path_in_schema per (row group, column), joined with '.' */
  uint32_t *chunk_counts;
  bool encrypted;
} meta_ctx;

static int read_logical(tc *t, schema_elem *e) {
  int last = 0, type, id;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) return 0;
    e->logical = id;
    if (id == PQ_LT_INTEGER && type == TC_STRUCT) {
      int l2 = 0, t2, id2;
      for (;;) {
        if (tc_field(t, &l2, &t2, &id2)) return -1;
        if (t2 == TC_STOP) break;
        if (id2 == 2 && (t2 == TC_TRUE || t2 == TC_FALSE)) e->int_signed = t2 == TC_TRUE;
        else if (tc_skip(t, t2, 2)) return -1;
      }
    } else if (tc_skip(t, type, 1)) {
      return -1;
    }
  }
}

static int read_schema_elem(tc *t, schema_elem *e) {
  int last = 0, type, id;
  bool have_name = false;
  *e = (schema_elem){.type = -1, .repetition = -1, .num_children = -1, .converted = -1, .int_signed = -1};
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int rc;
    switch (id) {
      case 1: rc = tc_i32(t, type, &e->type); break;
      case 2: rc = tc_i32(t, type, &e->type_length); break;
      case 3: rc = tc_i32(t, type, &e->repetition); break;
      case 4:
        rc = tc_binary(t, type, &e->name, &e->name_len);
        have_name = true;
        break;
      case 5: rc = tc_i32(t, type, &e->num_children); break;
      case 6: rc = tc_i32(t, type, &e->converted); break;
      case 7: rc = tc_i32(t, type, &e->scale); break;
      case 8: rc = tc_i32(t, type, &e->precision); break;
      case 10: rc = tc_expect(t, type, TC_STRUCT) || read_logical(t, e); break;
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!have_name) return tc_fail(t, "schema element without a name");
  return 0;
}

static int read_column_meta(meta_ctx *m, tc *t, pq_column_chunk *cc, char **path) {
  int last = 0, type, id;
  bool have_type = false, have_codec = false, have_nv = false, have_dpo = false, have_tcs = false;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int rc = 0;
    int32_t v32;
    switch (id) {
      case 1:
        rc = tc_i32(t, type, &v32);
        cc->type = v32;
        have_type = true;
        break;
      case 2: {
        int et;
        uint32_t n;
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n)) return -1;
        cc->encodings = arena_array(m->p, &m->p->meta, n, sizeof(int), m->err);
        if (!cc->encodings) return -1;
        cc->num_encodings = (int)n;
        for (uint32_t i = 0; i < n; i++) {
          if (tc_i32(t, et, &v32)) return -1;
          cc->encodings[i] = v32;
        }
        break;
      }
      case 3: {
        int et;
        uint32_t n;
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n)) return -1;
        const uint8_t *start = t->p;
        size_t total = 0;
        for (uint32_t i = 0; i < n; i++) { /* measure, then join with '.' */
          const uint8_t *s = NULL;
          size_t l = 0;
          if (tc_binary(t, et, &s, &l)) return -1;
          total += l + 1;
        }
        char *joined = arena_alloc(m->p, &m->p->meta, total + 1, m->err);
        if (!joined) return -1;
        tc again = *t;
        again.p = start;
        size_t o = 0;
        for (uint32_t i = 0; i < n; i++) {
          const uint8_t *s = NULL;
          size_t l = 0;
          tc_binary(&again, et, &s, &l);
          if (i) joined[o++] = '.';
          memcpy(joined + o, s, l);
          o += l;
        }
        joined[o] = 0;
        *path = joined;
        break;
      }
      case 4:
        rc = tc_i32(t, type, &v32);
        cc->codec = v32;
        have_codec = true;
        break;
      case 5:
        rc = tc_i64(t, type, &cc->num_values);
        have_nv = true;
        break;
      case 6: rc = tc_i64(t, type, &cc->total_uncompressed_size); break;
      case 7:
        rc = tc_i64(t, type, &cc->total_compressed_size);
        have_tcs = true;
        break;
      case 9:
        rc = tc_i64(t, type, &cc->data_page_offset);
        have_dpo = true;
        break;
      case 11: rc = tc_i64(t, type, &cc->dictionary_page_offset); break;
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!have_type || !have_codec || !have_nv || !have_dpo || !have_tcs)
    return tc_fail(t, "column metadata lacks a required field");
  return 0;
}

static int read_column_chunk(meta_ctx *m, tc *t, pq_column_chunk *cc, char **path) {
  int last = 0, type, id;
  bool have_meta = false;
  cc->dictionary_page_offset = -1;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int rc;
    switch (id) {
      case 1: {
        const uint8_t *s = NULL;
        size_t l = 0;
        if (tc_binary(t, type, &s, &l)) return -1;
        return fail(m->err, PQ_E_UNSUPPORTED,
                    "column chunk stored in another file (file_path \"%.*s\") is not supported",
                    (int)(l > 64 ? 64 : l), (const char *)s);
      }
      case 3:
        rc = tc_expect(t, type, TC_STRUCT) || read_column_meta(m, t, cc, path);
        have_meta = true;
        break;
      case 8:
      case 9:
        m->encrypted = true;
        rc = tc_skip(t, type, 1);
        break;
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!have_meta) {
    if (m->encrypted) return fail(m->err, PQ_E_UNSUPPORTED, "encrypted parquet columns are not supported");
    return tc_fail(t, "column chunk without metadata");
  }
  return 0;
}

static int read_row_group(meta_ctx *m, tc *t, uint32_t rg) {
  pq_row_group *g = &m->f->row_groups[rg];
  int last = 0, type, id;
  bool have_cols = false, have_rows = false;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int rc = 0;
    switch (id) {
      case 1: {
        int et;
        uint32_t n;
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n) || tc_expect(t, et, TC_STRUCT)) return -1;
        g->columns = arena_array(m->p, &m->p->meta, n, sizeof *g->columns, m->err);
        m->chunk_paths[rg] = NULL;
        char **paths = arena_array(m->p, &m->p->meta, n, sizeof(char *), m->err);
        if (!g->columns || !paths) return -1;
        for (uint32_t i = 0; i < n; i++)
          if (read_column_chunk(m, t, &g->columns[i], &paths[i])) return -1;
        m->chunk_paths[rg] = paths;
        m->chunk_counts[rg] = n;
        have_cols = true;
        break;
      }
      case 2: rc = tc_i64(t, type, &g->total_byte_size); break;
      case 3:
        rc = tc_i64(t, type, &g->num_rows);
        have_rows = true;
        break;
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!have_cols || !have_rows) return tc_fail(t, "row group lacks its columns or num_rows");
  if (g->num_rows < 0) return tc_fail(t, "row group has a negative num_rows");
  return 0;
}

static int read_kv(meta_ctx *m, tc *t, pq_kv *kv) {
  int last = 0, type, id;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    const uint8_t *s = NULL;
    size_t l = 0;
    if (id == 1 || id == 2) {
      if (tc_binary(t, type, &s, &l)) return -1;
      char *d = arena_strdup(m->p, s, l, m->err);
      if (!d) return -1;
      if (id == 1) {
        kv->key = d;
        kv->key_len = l;
      } else {
        kv->value = d;
        kv->value_len = l;
      }
    } else if (tc_skip(t, type, 1)) {
      return -1;
    }
  }
  if (!kv->key) return tc_fail(t, "key-value metadata without a key");
  return 0;
}

static int read_file_meta(meta_ctx *m, tc *t) {
  pq_file *f = m->f;
  int last = 0, type, id;
  bool have_schema = false, have_rows = false, have_rgs = false;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int et, rc = 0;
    uint32_t n;
    switch (id) {
      case 1: rc = tc_i32(t, type, &f->version); break;
      case 2:
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n) || tc_expect(t, et, TC_STRUCT)) return -1;
        m->elems = arena_array(m->p, &m->p->meta, n, sizeof *m->elems, m->err);
        if (!m->elems && n) return -1;
        m->num_elems = n;
        for (uint32_t i = 0; i < n; i++)
          if (read_schema_elem(t, &m->elems[i])) return -1;
        have_schema = true;
        break;
      case 3:
        rc = tc_i64(t, type, &f->num_rows);
        have_rows = true;
        break;
      case 4:
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n) || tc_expect(t, et, TC_STRUCT)) return -1;
        f->row_groups = arena_array(m->p, &m->p->meta, n, sizeof *f->row_groups, m->err);
        m->chunk_paths = arena_array(m->p, &m->p->meta, n, sizeof(char **), m->err);
        m->chunk_counts = arena_array(m->p, &m->p->meta, n, sizeof(uint32_t), m->err);
        if (n && (!f->row_groups || !m->chunk_paths || !m->chunk_counts)) return -1;
        f->num_row_groups = (int)n;
        for (uint32_t i = 0; i < n; i++)
          if (read_row_group(m, t, i)) return -1;
        have_rgs = true;
        break;
      case 5:
        if (tc_expect(t, type, TC_LIST) || tc_list(t, &et, &n) || tc_expect(t, et, TC_STRUCT)) return -1;
        f->kv = arena_array(m->p, &m->p->meta, n, sizeof *f->kv, m->err);
        if (n && !f->kv) return -1;
        f->num_kv = (int)n;
        for (uint32_t i = 0; i < n; i++)
          if (read_kv(m, t, &f->kv[i])) return -1;
        break;
      case 6: {
        const uint8_t *s = NULL;
        size_t l = 0;
        if (tc_binary(t, type, &s, &l) || !(f->created_by = arena_strdup(m->p, s, l, m->err))) return -1;
        break;
      }
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!have_schema || !have_rows || !have_rgs)
    return tc_fail(t, "file metadata lacks its schema, num_rows or row_groups");
  return 0;
}

/* ---- schema tree -------------------------------------------------------- */

static bool name_is(const pq_node *n, const char *s, const char *suffix) {
  size_t a = strlen(s), b = suffix ? strlen(suffix) : 0;
  return n->name_len == a + b && !memcmp(n->name, s, a) && (!b || !memcmp(n->name + a, suffix, b));
}

static int build_node(meta_ctx *m, uint32_t *idx, pq_node *parent, int depth, pq_node **out) {
  pq_file *f = m->f;
  if (*idx >= m->num_elems)
    return fail(m->err, PQ_E_METADATA, "schema ends before all declared children are listed");
  if (depth > PQ_MAX_DEPTH)
    return fail(m->err, PQ_E_METADATA, "schema nests deeper than %d levels", PQ_MAX_DEPTH);
  schema_elem *e = &m->elems[*idx];
  pq_node *n = &f->root[*idx];
  (*idx)++;
  f->num_nodes++;
  n->parent = parent;
  n->name = arena_strdup(m->p, e->name, e->name_len, m->err);
  if (!n->name) return -1;
  n->name_len = e->name_len;
  n->type = -1;
  n->type_length = e->type_length;
  n->converted_type = e->converted;
  n->logical_type = e->logical;
  n->scale = e->scale;
  n->precision = e->precision;
  n->leaf_index = -1;
  n->is_unsigned = (e->converted >= PQ_CT_UINT_8 && e->converted <= PQ_CT_UINT_64) ||
                   (e->logical == PQ_LT_INTEGER && e->int_signed == 0);
  if (parent) {
    int32_t r = e->repetition < 0 ? PQ_REQUIRED : e->repetition;
    if (r > PQ_REPEATED)
      return fail(m->err, PQ_E_METADATA, "schema field \"%s\" has repetition %d", n->name, r);
    n->repetition = r;
    n->def_level = parent->def_level + (r != PQ_REQUIRED);
    n->rep_level = parent->rep_level + (r == PQ_REPEATED);
    size_t pl = parent->parent ? strlen(parent->path) + 1 : 0;
    char *path = arena_alloc(m->p, &m->p->meta, pl + n->name_len + 1, m->err);
    if (!path) return -1;
    if (pl) {
      memcpy(path, parent->path, pl - 1);
      path[pl - 1] = '.';
    }
    memcpy(path + pl, n->name, n->name_len + 1);
    n->path = path;
  } else {
    n->path = "";
  }

  if (e->num_children > 0) {
    if ((uint32_t)e->num_children > m->num_elems - *idx)
      return fail(m->err, PQ_E_METADATA,
                  "schema group \"%s\" declares %d children but only %u elements follow", n->path,
                  e->num_children, m->num_elems - *idx);
    n->kind = PQ_KIND_STRUCT;
    n->num_children = e->num_children;
    n->children = arena_array(m->p, &m->p->meta, (size_t)e->num_children, sizeof(pq_node *), m->err);
    if (!n->children) return -1;
    n->first_leaf = f->num_leaves;
    for (int i = 0; i < n->num_children; i++)
      if (build_node(m, idx, n, depth + 1, &n->children[i])) return -1;
    n->num_leaves = f->num_leaves - n->first_leaf;
    bool is_list = e->converted == PQ_CT_LIST || e->logical == PQ_LT_LIST;
    bool is_map = e->converted == PQ_CT_MAP || e->converted == PQ_CT_MAP_KEY_VALUE || e->logical == PQ_LT_MAP;
    if ((is_list || is_map) && parent && n->num_children == 1 && n->children[0]->repetition == PQ_REPEATED) {
      pq_node *r = n->children[0];
      n->kind = PQ_KIND_LIST;
      n->list_repeated = r;
      n->list_element = r;
      /* LogicalTypes.md backward-compatibility rules: a one-field repeated group
       * is a wrapper unless it is named "array" or "<list>_tuple". */
      if (is_list && r->kind != PQ_KIND_LEAF && r->num_children == 1 && !name_is(r, "array", NULL) &&
          !name_is(r, n->name, "_tuple"))
        n->list_element = r->children[0];
    }
  } else if (!parent) {
    return fail(m->err, PQ_E_METADATA, "schema has no columns");
  } else if (e->type >= 0) {
    if (e->type > PQ_FIXED_LEN_BYTE_ARRAY)
      return fail(m->err, PQ_E_UNSUPPORTED, "column %s has unknown physical type %d", n->path, e->type);
    if (e->type == PQ_FIXED_LEN_BYTE_ARRAY && (e->type_length <= 0 || e->type_length > (1 << 24)))
      return fail(m->err, PQ_E_METADATA, "column %s is FIXED_LEN_BYTE_ARRAY with type_length %d", n->path,
                  e->type_length);
    n->kind = PQ_KIND_LEAF;
    n->type = e->type;
    n->leaf_index = n->first_leaf = f->num_leaves;
    n->num_leaves = 1;
    f->leaves[f->num_leaves++] = n;
  } else {
    return fail(m->err, PQ_E_METADATA, "schema field \"%s\" has neither a type nor children", n->path);
  }
  *out = n;
  return 0;
}

static int build_schema(meta_ctx *m) {
  pq_file *f = m->f;
  if (m->num_elems == 0) return fail(m->err, PQ_E_METADATA, "schema is empty");
  f->root = arena_array(m->p, &m->p->meta, m->num_elems, sizeof *f->root, m->err);
  f->leaves = arena_array(m->p, &m->p->meta, m->num_elems, sizeof *f->leaves, m->err);
  if (!f->root || !f->leaves) return -1;
  uint32_t idx = 0;
  pq_node *root;
  if (build_node(m, &idx, NULL, 0, &root)) return -1;
  if (idx != m->num_elems)
    return fail(m->err, PQ_E_METADATA, "schema lists %u elements but its tree uses %u", m->num_elems, idx);
  for (int g = 0; g < f->num_row_groups; g++) {
    if (m->chunk_counts[g] != (uint32_t)f->num_leaves)
      return fail(m->err, PQ_E_METADATA, "row group %d has %u column chunks, schema has %d columns", g,
                  m->chunk_counts[g], f->num_leaves);
    char **paths = m->chunk_paths[g];
    for (int c = 0; c < f->num_leaves; c++) {
      const pq_node *leaf = f->leaves[c];
      if (paths[c] && strcmp(paths[c], leaf->path) != 0)
        return fail(m->err, PQ_E_METADATA, "row group %d column %d is \"%s\", schema says \"%s\"", g, c,
                    paths[c], leaf->path);
      if (f->row_groups[g].columns[c].type != leaf->type)
        return fail(m->err, PQ_E_METADATA, "column %s (row group %d) is %s, schema says %s", leaf->path, g,
                    pq_type_name(f->row_groups[g].columns[c].type), pq_type_name(leaf->type));
    }
  }
  return 0;
}

/* ---- open / close ------------------------------------------------------- */

void pq_limits_default(pq_limits *l) { l->max_memory = (size_t)1 << 30; }

pq_file *pq_open(const uint8_t *data, size_t size, const pq_limits *limits, pq_error *err) {
  err->status = PQ_OK;
  err->msg[0] = 0;
  if (size < 4 || memcmp(data, "PAR1", 4) != 0) {
    if (size < 4 && (size == 0 || !memcmp(data, "PAR1", size)))
      fail(err, PQ_E_TRUNCATED, "file is %zu bytes, too short for parquet", size);
    else fail(err, PQ_E_MAGIC, "not a parquet file: it does not start with PAR1");
    return NULL;
  }
  if (size < 12) {
    fail(err, PQ_E_TRUNCATED, "file is %zu bytes, too short for parquet (truncated?)", size);
    return NULL;
  }
  if (!memcmp(data + size - 4, "PARE", 4)) {
    fail(err, PQ_E_UNSUPPORTED, "encrypted parquet files (PARE footer) are not supported");
    return NULL;
  }
  if (memcmp(data + size - 4, "PAR1", 4) != 0) {
    fail(err, PQ_E_TRUNCATED, "file does not end with the PAR1 footer magic (truncated?)");
    return NULL;
  }
  uint32_t flen = rd_u32(data + size - 8);
  if (flen > size - 12) {
    fail(err, PQ_E_TRUNCATED, "footer length %u runs past the start of the file (%zu bytes)", flen, size);
    return NULL;
  }

  pq_file *f = calloc(1, sizeof *f);
  struct pq_private *p = calloc(1, sizeof *p);
  if (!f || !p) {
    free(f);
    free(p);
    fail(err, PQ_E_NOMEM, "out of memory");
    return NULL;
  }
  f->priv = p;
  f->data = data;
  f->size = size;
  if (limits) p->limits = *limits;
  else pq_limits_default(&p->limits);
  if (p->limits.max_memory > SIZE_MAX / 4) p->limits.max_memory = SIZE_MAX / 4;

  meta_ctx m = {.f = f, .p = p, .err = err};
  tc t = {.p = data + size - 8 - flen,
          .end = data + size - 8,
          .err = err,
          .status = PQ_E_METADATA,
          .ctx = "footer"};
  if (read_file_meta(&m, &t) || build_schema(&m)) {
    pq_close(f);
    return NULL;
  }
  return f;
}

void pq_close(pq_file *f) {
  if (!f) return;
  struct pq_private *p = f->priv;
  arena_free(p, &p->rg);
  arena_free(p, &p->meta);
  ZSTD_freeDCtx(p->zstd);
  free(p->line);
  free(p);
  free(f);
}

/* ---- pages and values --------------------------------------------------- */

typedef struct slot {
  const uint8_t *p;
  union {
    int64_t i;
    double d;
    size_t len;
  } u;
} slot;

typedef struct colstate {
  const pq_node *leaf;
  const pq_column_chunk *cc;
  int rg;
  uint8_t *def, *rep; /* one level each per entry; levels are <= PQ_MAX_DEPTH */
  size_t cap, n, cur; /* entries: declared, decoded, consumed */
  slot *vals;
  size_t nv, vcur; /* non-null values: decoded, consumed */
  slot *dict;
  size_t ndict;
  bool has_dict;
} colstate;

static int col_fail(const colstate *c, pq_error *err, pq_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int col_fail(const colstate *c, pq_error *err, pq_status st, const char *fmt, ...) {
  char detail[224];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return fail(err, st, "column %s (row group %d): %s", c->leaf->path, c->rg, detail);
}

/* RLE / bit-packed hybrid reader (Encodings.md). Values are at most 32 bits wide. */
typedef struct rle {
  const uint8_t *p, *end;
  int bw;
  uint64_t left; /* values left in the current run */
  bool packed;
  uint32_t value;      /* repeated value of an RLE run */
  const uint8_t *base; /* bit-packed run data */
  size_t avail;        /* bytes of it present in the buffer */
  uint64_t bit;        /* next bit offset in the bit-packed run */
} rle;

static void rle_init(rle *r, const uint8_t *p, size_t len, int bw) {
  *r = (rle){.p = p, .end = p + len, .bw = bw};
}

static int rle_next(rle *r, uint32_t *out) {
  while (r->left == 0) {
    uint64_t h = 0;
    int shift = 0;
    for (;;) {
      if (r->p >= r->end || shift > 63) return -1;
      uint8_t b = *r->p++;
      h |= (uint64_t)(b & 0x7f) << shift;
      shift += 7;
      if (!(b & 0x80)) break;
    }
    if (h & 1) {
      uint64_t groups = h >> 1;
      size_t rem = (size_t)(r->end - r->p);
      uint64_t bytes = groups * (uint64_t)r->bw; /* groups < 2^63, bw <= 32: may wrap */
      if (groups > (UINT64_MAX / 8) || (r->bw && groups > UINT64_MAX / (uint64_t)r->bw)) return -1;
      r->packed = true;
      r->left = groups * 8;
      r->base = r->p;
      /* a final run may be cut short: keep what is there, fail only if a value is missing */
      r->avail = bytes < rem ? (size_t)bytes : rem;
      r->p += r->avail;
      r->bit = 0;
    } else {
      int nb = (r->bw + 7) / 8;
      if (r->end - r->p < nb) return -1;
      uint32_t v = 0;
      for (int i = 0; i < nb; i++) v |= (uint32_t)r->p[i] << (8 * i);
      r->p += nb;
      r->packed = false;
      r->value = v;
      r->left = h >> 1;
    }
  }
  r->left--;
  if (!r->packed) {
    *out = r->value;
    return 0;
  }
  if (r->bw == 0) {
    *out = 0;
    return 0;
  }
  uint64_t first = r->bit >> 3, last = (r->bit + (uint64_t)r->bw - 1) >> 3;
  if (last >= r->avail) return -1;
  uint64_t acc = 0;
  for (uint64_t i = first; i <= last; i++) acc |= (uint64_t)r->base[i] << (8 * (i - first));
  acc >>= r->bit & 7;
  *out = (uint32_t)(acc & (r->bw == 32 ? 0xffffffffu : ((1u << r->bw) - 1)));
  r->bit += (uint64_t)r->bw;
  return 0;
}

static int bit_width(int max) {
  int bw = 0;
  while (max >> bw) bw++;
  return bw;
}

static int decode_levels(colstate *c, pq_error *err, const char *what, const uint8_t *p, size_t len, int max,
                         size_t n, uint8_t *out) {
  rle r;
  rle_init(&r, p, len, bit_width(max));
  for (size_t k = 0; k < n; k++) {
    uint32_t v;
    if (rle_next(&r, &v))
      return col_fail(c, err, PQ_E_PAGE, "%s levels end after %zu of %zu values", what, k, n);
    if (v > (uint32_t)max)
      return col_fail(c, err, PQ_E_PAGE, "%s level %u exceeds the maximum %d", what, v, max);
    out[k] = (uint8_t)v;
  }
  return 0;
}

static int decode_plain(colstate *c, pq_error *err, const uint8_t *p, size_t len, size_t n, slot *out) {
  const pq_node *leaf = c->leaf;
  size_t w = 0;
  switch (leaf->type) {
    case PQ_BOOLEAN:
      if (n > len * 8) goto short_data;
      for (size_t k = 0; k < n; k++) out[k].u.i = (p[k >> 3] >> (k & 7)) & 1;
      return 0;
    case PQ_INT32:
      if (n > len / 4) goto short_data;
      for (size_t k = 0; k < n; k++) {
        uint32_t v = rd_u32(p + 4 * k);
        out[k].u.i = leaf->is_unsigned ? (int64_t)v : (int64_t)(int32_t)v;
      }
      return 0;
    case PQ_INT64:
      if (n > len / 8) goto short_data;
      for (size_t k = 0; k < n; k++) out[k].u.i = (int64_t)rd_u64(p + 8 * k);
      return 0;
    case PQ_FLOAT:
      if (n > len / 4) goto short_data;
      for (size_t k = 0; k < n; k++) {
        uint32_t v = rd_u32(p + 4 * k);
        float fl;
        memcpy(&fl, &v, 4);
        out[k].u.d = fl;
      }
      return 0;
    case PQ_DOUBLE:
      if (n > len / 8) goto short_data;
      for (size_t k = 0; k < n; k++) {
        uint64_t v = rd_u64(p + 8 * k);
        memcpy(&out[k].u.d, &v, 8);
      }
      return 0;
    case PQ_INT96:
      w = 12;
      /* fall through */
    case PQ_FIXED_LEN_BYTE_ARRAY:
      if (!w) w = (size_t)leaf->type_length;
      if (n > len / w) goto short_data;
      for (size_t k = 0; k < n; k++) {
        out[k].p = p + w * k;
        out[k].u.len = w;
      }
      return 0;
    case PQ_BYTE_ARRAY: {
      size_t o = 0;
      for (size_t k = 0; k < n; k++) {
        if (len - o < 4) goto short_data;
        uint32_t l = rd_u32(p + o);
        o += 4;
        if (l > len - o)
          return col_fail(c, err, PQ_E_PAGE, "byte array %zu of %zu is %u bytes, only %zu remain", k, n, l,
                          len - o);
        out[k].p = p + o;
        out[k].u.len = l;
        o += l;
      }
      return 0;
    }
  }
  return col_fail(c, err, PQ_E_UNSUPPORTED, "physical type %d", leaf->type);
short_data:
  return col_fail(c, err, PQ_E_PAGE, "%zu PLAIN %s values do not fit in %zu bytes", n,
                  pq_type_name(leaf->type), len);
}

static int uleb(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*p >= end) return -1;
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return 0;
    }
  }
  return -1;
}

/* bw (<= 64) bits at bit offset off of base; the caller has checked they are present. */
static uint64_t get_bits(const uint8_t *base, uint64_t off, int bw) {
  uint64_t v = 0, byte = off >> 3;
  int got = 0, shift = (int)(off & 7);
  while (got < bw) {
    v |= (uint64_t)(base[byte++] >> shift) << got;
    got += 8 - shift;
    shift = 0;
  }
  return bw < 64 ? v & (((uint64_t)1 << bw) - 1) : v;
}

/* DELTA_BINARY_PACKED (Encodings.md): n values into out, *used = bytes consumed. When
 * exact, the header must announce exactly n values (lengths for the byte-array encodings). */
static int delta_decode(colstate *c, pq_error *err, const uint8_t *p, size_t len, size_t n, bool exact,
                        int64_t *out, size_t *used) {
  const uint8_t *q = p, *end = p + len;
  uint64_t block, minis, total, first;
  if (uleb(&q, end, &block) || uleb(&q, end, &minis) || uleb(&q, end, &total) || uleb(&q, end, &first))
    return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED header is truncated");
  if (block == 0 || block % 128 || minis == 0 || block % minis || (block / minis) % 32)
    return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED block of %llu values in %llu miniblocks",
                    (unsigned long long)block, (unsigned long long)minis);
  if (total < n || (exact && total != n))
    return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED data holds %llu values, the page has %zu",
                    (unsigned long long)total, n);
  uint64_t per_mini = block / minis;
  uint64_t v = (first >> 1) ^ (~(first & 1) + 1);
  size_t k = 0;
  if (n > 0) out[k++] = (int64_t)v;
  while (k < n) {
    uint64_t md;
    if (uleb(&q, end, &md) || (uint64_t)(end - q) < minis)
      return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED block header is truncated");
    uint64_t min_delta = (md >> 1) ^ (~(md & 1) + 1);
    const uint8_t *widths = q;
    q += minis;
    for (uint64_t m = 0; m < minis && k < n; m++) {
      int bw = widths[m];
      if (bw > 64) return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED bit width %d", bw);
      uint64_t bytes = per_mini * (uint64_t)bw / 8;
      size_t avail = bytes < (uint64_t)(end - q) ? (size_t)bytes : (size_t)(end - q);
      for (uint64_t i = 0; i < per_mini && k < n; i++) {
        uint64_t off = i * (uint64_t)bw;
        if (bw && (off + (uint64_t)bw + 7) / 8 > avail)
          return col_fail(c, err, PQ_E_PAGE, "DELTA_BINARY_PACKED values end after %zu of %zu", k, n);
        v += min_delta + (bw ? get_bits(q, off, bw) : 0); /* wraps, as the format intends */
        out[k++] = (int64_t)v;
      }
      q += avail;
    }
  }
  *used = (size_t)(q - p);
  return 0;
}

/* DELTA_LENGTH_BYTE_ARRAY: lengths, then the bytes back to back. *used = bytes consumed. */
static int delta_length_decode(pq_file *f, colstate *c, pq_error *err, const uint8_t *p, size_t len, size_t n,
                               slot *out, size_t *used) {
  struct pq_private *pv = f->priv;
  int64_t *lens = arena_array(pv, &pv->rg, n, sizeof *lens, err);
  size_t o;
  if (!lens || delta_decode(c, err, p, len, n, true, lens, &o)) return -1;
  for (size_t k = 0; k < n; k++) {
    if (lens[k] < 0 || (uint64_t)lens[k] > len - o)
      return col_fail(c, err, PQ_E_PAGE, "byte array %zu of %zu is %lld bytes, only %zu remain", k, n,
                      (long long)lens[k], len - o);
    out[k].p = p + o;
    out[k].u.len = (size_t)lens[k];
    o += (size_t)lens[k];
  }
  *used = o;
  return 0;
}

/* DELTA_BYTE_ARRAY: prefix lengths shared with the previous value, then the suffixes. */
static int delta_byte_array_decode(pq_file *f, colstate *c, pq_error *err, const uint8_t *p, size_t len,
                                   size_t n, slot *out) {
  struct pq_private *pv = f->priv;
  int64_t *pre = arena_array(pv, &pv->rg, n, sizeof *pre, err);
  size_t o, o2;
  if (!pre || delta_decode(c, err, p, len, n, true, pre, &o) ||
      delta_length_decode(f, c, err, p + o, len - o, n, out, &o2))
    return -1;
  uint64_t total = 0, prev = 0;
  for (size_t k = 0; k < n; k++) {
    if (pre[k] < 0 || (uint64_t)pre[k] > prev)
      return col_fail(c, err, PQ_E_PAGE,
                      "DELTA_BYTE_ARRAY value %zu shares %lld bytes with a %llu-byte value", k,
                      (long long)pre[k], (unsigned long long)prev);
    prev = (uint64_t)pre[k] + out[k].u.len;
    total += prev;
    if (total > pv->limits.max_memory)
      return fail(err, PQ_E_LIMIT, "decoding needs more than max_memory (%zu bytes)", pv->limits.max_memory);
  }
  uint8_t *buf = arena_alloc(pv, &pv->rg, (size_t)total, err);
  if (!buf) return -1;
  size_t at = 0;
  for (size_t k = 0; k < n; k++) {
    size_t pl = (size_t)pre[k], sl = out[k].u.len;
    if (pl) memcpy(buf + at, out[k - 1].p, pl);
    if (sl) memcpy(buf + at + pl, out[k].p, sl);
    out[k].p = buf + at;
    out[k].u.len = pl + sl;
    at += pl + sl;
  }
  return 0;
}

static int decode_values(pq_file *f, colstate *c, pq_error *err, int enc, const uint8_t *p, size_t len,
                         size_t n, slot *out) {
  struct pq_private *pv = f->priv;
  int type = c->leaf->type;
  if (n == 0) return 0;
  switch (enc) {
    case PQ_DELTA_BINARY_PACKED: {
      if (type != PQ_INT32 && type != PQ_INT64) break;
      int64_t *v = arena_array(pv, &pv->rg, n, sizeof *v, err);
      size_t used;
      if (!v || delta_decode(c, err, p, len, n, false, v, &used)) return -1;
      for (size_t k = 0; k < n; k++)
        out[k].u.i = type == PQ_INT64       ? v[k]
                     : c->leaf->is_unsigned ? (int64_t)(uint32_t)v[k]
                                            : (int64_t)(int32_t)(uint32_t)v[k];
      return 0;
    }
    case PQ_DELTA_LENGTH_BYTE_ARRAY: {
      size_t used;
      if (type != PQ_BYTE_ARRAY) break;
      return delta_length_decode(f, c, err, p, len, n, out, &used);
    }
    case PQ_DELTA_BYTE_ARRAY:
      if (type != PQ_BYTE_ARRAY && type != PQ_FIXED_LEN_BYTE_ARRAY) break;
      return delta_byte_array_decode(f, c, err, p, len, n, out);
    case PQ_BYTE_STREAM_SPLIT: {
      size_t w = type == PQ_INT32 || type == PQ_FLOAT    ? 4
                 : type == PQ_INT64 || type == PQ_DOUBLE ? 8
                 : type == PQ_FIXED_LEN_BYTE_ARRAY       ? (size_t)c->leaf->type_length
                                                         : 0;
      if (!w) break;
      if (n > len / w)
        return col_fail(c, err, PQ_E_PAGE, "%zu BYTE_STREAM_SPLIT values do not fit in %zu bytes", n, len);
      /* put each value's bytes back together, then read them as PLAIN */
      uint8_t *t = arena_alloc(pv, &pv->rg, n * w, err);
      if (!t) return -1;
      for (size_t b = 0; b < w; b++)
        for (size_t k = 0; k < n; k++) t[k * w + b] = p[b * n + k];
      return decode_plain(c, err, t, n * w, n, out);
    }
    case PQ_PLAIN: return decode_plain(c, err, p, len, n, out);
    case PQ_PLAIN_DICTIONARY:
    case PQ_RLE_DICTIONARY: {
      if (!c->has_dict)
        return col_fail(c, err, PQ_E_DICTIONARY, "dictionary-encoded page but no dictionary page");
      if (len < 1) return col_fail(c, err, PQ_E_PAGE, "dictionary-encoded page without a bit width");
      if (p[0] > 32) return col_fail(c, err, PQ_E_PAGE, "dictionary index bit width %u exceeds 32", p[0]);
      rle r;
      rle_init(&r, p + 1, len - 1, p[0]);
      for (size_t k = 0; k < n; k++) {
        uint32_t ix;
        if (rle_next(&r, &ix))
          return col_fail(c, err, PQ_E_PAGE, "dictionary indices end after %zu of %zu values", k, n);
        if (ix >= c->ndict)
          return col_fail(c, err, PQ_E_DICTIONARY,
                          "dictionary index %u out of range (dictionary has %zu entries)", ix, c->ndict);
        out[k] = c->dict[ix];
      }
      return 0;
    }
    case PQ_RLE: {
      if (c->leaf->type != PQ_BOOLEAN) break;
      if (len < 4 || rd_u32(p) > len - 4)
        return col_fail(c, err, PQ_E_PAGE, "RLE boolean data length runs past the page");
      rle r;
      rle_init(&r, p + 4, rd_u32(p), 1);
      for (size_t k = 0; k < n; k++) {
        uint32_t v;
        if (rle_next(&r, &v))
          return col_fail(c, err, PQ_E_PAGE, "RLE booleans end after %zu of %zu values", k, n);
        out[k].u.i = v;
      }
      return 0;
    }
  }
  return col_fail(c, err, PQ_E_UNSUPPORTED, "unsupported encoding %s for %s values", pq_encoding_name(enc),
                  pq_type_name(c->leaf->type));
}

/* Returns the page's uncompressed bytes: src itself when stored uncompressed. */
static int page_bytes(pq_file *f, colstate *c, pq_error *err, int codec, const uint8_t *src, size_t slen,
                      size_t ulen, const uint8_t **out) {
  struct pq_private *p = f->priv;
  if (codec == PQ_UNCOMPRESSED) {
    if (slen != ulen)
      return col_fail(c, err, PQ_E_PAGE, "uncompressed page holds %zu bytes but declares %zu", slen, ulen);
    *out = src;
    return 0;
  }
  uint8_t *dst = arena_alloc(p, &p->rg, ulen, err);
  if (!dst) return -1;
  const char *cname = pq_codec_name(codec);
  switch (codec) {
    case PQ_SNAPPY: {
      size_t n;
      if (snappy_uncompressed_length((const char *)src, slen, &n) != SNAPPY_OK)
        return col_fail(c, err, PQ_E_PAGE, "SNAPPY page data is corrupt");
      if (n != ulen)
        return col_fail(c, err, PQ_E_PAGE, "SNAPPY page inflates to %zu bytes, header declares %zu", n, ulen);
      if (snappy_uncompress((const char *)src, slen, (char *)dst, &n) != SNAPPY_OK || n != ulen)
        return col_fail(c, err, PQ_E_PAGE, "SNAPPY page data is corrupt");
      break;
    }
    case PQ_GZIP: {
      z_stream zs;
      memset(&zs, 0, sizeof zs);
      if (inflateInit2(&zs, 15 + 32) != Z_OK) return fail(err, PQ_E_NOMEM, "zlib: inflateInit2 failed");
      zs.next_in = (Bytef *)src;
      zs.avail_in = (uInt)(slen > UINT32_MAX ? UINT32_MAX : slen);
      zs.next_out = dst;
      zs.avail_out = (uInt)(ulen > UINT32_MAX ? UINT32_MAX : ulen);
      int rc;
      for (;;) {
        rc = inflate(&zs, Z_FINISH);
        /* concatenated gzip members continue the same page */
        if (rc == Z_STREAM_END && zs.avail_in > 0 && zs.avail_out > 0 && inflateReset(&zs) == Z_OK) continue;
        break;
      }
      size_t got = ulen - zs.avail_out;
      inflateEnd(&zs);
      if (rc != Z_STREAM_END)
        return col_fail(c, err, PQ_E_PAGE,
                        "GZIP page data is corrupt, truncated or larger than its declared %zu bytes", ulen);
      if (got != ulen || slen > UINT32_MAX || ulen > UINT32_MAX)
        return col_fail(c, err, PQ_E_PAGE, "GZIP page inflates to %zu bytes, header declares %zu", got, ulen);
      break;
    }
    case PQ_ZSTD: {
      if (!p->zstd && !(p->zstd = ZSTD_createDCtx()))
        return fail(err, PQ_E_NOMEM, "zstd: cannot create a context");
      size_t r = ZSTD_decompressDCtx(p->zstd, dst, ulen, src, slen);
      if (ZSTD_isError(r)) return col_fail(c, err, PQ_E_PAGE, "ZSTD page data: %s", ZSTD_getErrorName(r));
      if (r != ulen)
        return col_fail(c, err, PQ_E_PAGE, "ZSTD page inflates to %zu bytes, header declares %zu", r, ulen);
      break;
    }
    default: return col_fail(c, err, PQ_E_CODEC, "unsupported compression codec %s", cname);
  }
  *out = dst;
  return 0;
}

typedef struct page_header {
  int32_t type, usize, csize;
  bool has_type, has_usize, has_csize;
  bool has_v1, has_dict, has_v2;
  int32_t num_values, encoding, def_enc, rep_enc; /* v1, and num_values/encoding of the others */
  int32_t num_nulls, num_rows, def_len, rep_len;  /* v2 */
  bool v2_compressed;
} page_header;

static int read_sub_header(tc *t, page_header *h, int which) {
  int last = 0, type, id;
  int seen = 0;
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int32_t *dst = NULL;
    if (which == 1) { /* DataPageHeader */
      int32_t *m[] = {NULL, &h->num_values, &h->encoding, &h->def_enc, &h->rep_enc};
      if (id >= 1 && id <= 4) dst = m[id];
    } else if (which == 2) { /* DictionaryPageHeader */
      if (id == 1) dst = &h->num_values;
      else if (id == 2) dst = &h->encoding;
    } else { /* DataPageHeaderV2 */
      int32_t *m[] = {NULL,         &h->num_values, &h->num_nulls, &h->num_rows,
                      &h->encoding, &h->def_len,    &h->rep_len};
      if (id >= 1 && id <= 6) dst = m[id];
      if (id == 7) {
        if (tc_bool(t, type, &h->v2_compressed)) return -1;
        continue;
      }
    }
    if (dst) {
      if (tc_i32(t, type, dst)) return -1;
      seen |= 1 << id;
    } else if (tc_skip(t, type, 1)) {
      return -1;
    }
  }
  int need = which == 1 ? 0x1e : which == 2 ? 0x6 : 0x7e;
  if ((seen & need) != need) return tc_fail(t, "page header lacks a required field");
  return 0;
}

static int read_page_header(tc *t, page_header *h) {
  int last = 0, type, id;
  *h = (page_header){.v2_compressed = true};
  for (;;) {
    if (tc_field(t, &last, &type, &id)) return -1;
    if (type == TC_STOP) break;
    int rc;
    switch (id) {
      case 1:
        rc = tc_i32(t, type, &h->type);
        h->has_type = true;
        break;
      case 2:
        rc = tc_i32(t, type, &h->usize);
        h->has_usize = true;
        break;
      case 3:
        rc = tc_i32(t, type, &h->csize);
        h->has_csize = true;
        break;
      case 5:
        rc = tc_expect(t, type, TC_STRUCT) || read_sub_header(t, h, 1);
        h->has_v1 = true;
        break;
      case 7:
        rc = tc_expect(t, type, TC_STRUCT) || read_sub_header(t, h, 2);
        h->has_dict = true;
        break;
      case 8:
        rc = tc_expect(t, type, TC_STRUCT) || read_sub_header(t, h, 3);
        h->has_v2 = true;
        break;
      default: rc = tc_skip(t, type, 1);
    }
    if (rc) return -1;
  }
  if (!h->has_type || !h->has_usize || !h->has_csize)
    return tc_fail(t, "page header lacks its type or sizes");
  if (h->usize < 0 || h->csize < 0) return tc_fail(t, "page header declares a negative size");
  return 0;
}

enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICTIONARY = 2, PAGE_DATA_V2 = 3 };

static size_t count_defined(const colstate *c, size_t from, size_t n) {
  size_t nv = 0;
  uint8_t max = (uint8_t)c->leaf->def_level;
  for (size_t k = from; k < from + n; k++) nv += c->def[k] == max;
  return nv;
}

static int read_dictionary(pq_file *f, colstate *c, pq_error *err, const page_header *h,
                           const uint8_t *body) {
  struct pq_private *p = f->priv;
  if (c->has_dict) return col_fail(c, err, PQ_E_DICTIONARY, "a second dictionary page");
  if (c->n > 0) return col_fail(c, err, PQ_E_DICTIONARY, "dictionary page after data pages");
  if (h->encoding != PQ_PLAIN && h->encoding != PQ_PLAIN_DICTIONARY)
    return col_fail(c, err, PQ_E_UNSUPPORTED, "dictionary page encoding %s", pq_encoding_name(h->encoding));
  if (h->num_values < 0)
    return col_fail(c, err, PQ_E_PAGE, "dictionary page declares %d values", h->num_values);
  const uint8_t *buf;
  if (page_bytes(f, c, err, c->cc->codec, body, (size_t)h->csize, (size_t)h->usize, &buf)) return -1;
  size_t n = (size_t)h->num_values;
  if (n > (size_t)h->usize * 8) /* no value takes less than a bit */
    return col_fail(c, err, PQ_E_PAGE, "dictionary page declares %zu values in %d bytes", n, h->usize);
  c->dict = arena_array(p, &p->rg, n, sizeof(slot), err);
  if (!c->dict && n) return -1;
  if (decode_plain(c, err, buf, (size_t)h->usize, n, c->dict)) return -1;
  c->ndict = n;
  c->has_dict = true;
  return 0;
}

static int read_data_page(pq_file *f, colstate *c, pq_error *err, const page_header *h, const uint8_t *body,
                          size_t page_off) {
  const pq_node *leaf = c->leaf;
  bool v2 = h->type == PAGE_DATA_V2;
  if ((v2 && !h->has_v2) || (!v2 && !h->has_v1))
    return col_fail(c, err, PQ_E_PAGE, "page at offset %zu lacks its data page header", page_off);
  if (h->num_values < 0 || (size_t)h->num_values > c->cap - c->n)
    return col_fail(c, err, PQ_E_PAGE,
                    "page at offset %zu holds %d values, more than the %zu the column chunk has left",
                    page_off, h->num_values, c->cap - c->n);
  size_t n = (size_t)h->num_values;
  uint8_t *rep = c->rep + c->n, *def = c->def + c->n;
  const uint8_t *vals;
  size_t vlen;

  if (v2) {
    if (h->rep_len < 0 || h->def_len < 0 || (int64_t)h->rep_len + h->def_len > h->csize ||
        (int64_t)h->rep_len + h->def_len > h->usize)
      return col_fail(c, err, PQ_E_PAGE, "page at offset %zu declares level lengths (%d, %d) past its size",
                      page_off, h->rep_len, h->def_len);
    if (leaf->rep_level > 0 &&
        decode_levels(c, err, "repetition", body, (size_t)h->rep_len, leaf->rep_level, n, rep))
      return -1;
    if (leaf->def_level > 0 &&
        decode_levels(c, err, "definition", body + h->rep_len, (size_t)h->def_len, leaf->def_level, n, def))
      return -1;
    size_t lv = (size_t)h->rep_len + (size_t)h->def_len;
    int codec = h->v2_compressed ? c->cc->codec : PQ_UNCOMPRESSED;
    if (page_bytes(f, c, err, codec, body + lv, (size_t)h->csize - lv, (size_t)h->usize - lv, &vals))
      return -1;
    vlen = (size_t)h->usize - lv;
  } else {
    const uint8_t *buf;
    if (page_bytes(f, c, err, c->cc->codec, body, (size_t)h->csize, (size_t)h->usize, &buf)) return -1;
    size_t len = (size_t)h->usize, o = 0;
    for (int pass = 0; pass < 2; pass++) {
      int max = pass ? leaf->def_level : leaf->rep_level;
      int enc = pass ? h->def_enc : h->rep_enc;
      const char *what = pass ? "definition" : "repetition";
      if (max == 0) continue;
      if (enc != PQ_RLE)
        return col_fail(c, err, PQ_E_UNSUPPORTED, "%s level encoding %s", what, pq_encoding_name(enc));
      if (len - o < 4 || rd_u32(buf + o) > len - o - 4)
        return col_fail(c, err, PQ_E_PAGE, "page at offset %zu: %s levels run past the page", page_off, what);
      size_t l = rd_u32(buf + o);
      if (decode_levels(c, err, what, buf + o + 4, l, max, n, pass ? def : rep)) return -1;
      o += 4 + l;
    }
    vals = buf + o;
    vlen = len - o;
  }
  if (leaf->rep_level == 0) memset(rep, 0, n);
  if (leaf->def_level == 0) memset(def, 0, n);
  size_t nv = count_defined(c, c->n, n);
  if (decode_values(f, c, err, h->encoding, vals, vlen, nv, c->vals + c->nv)) return -1;
  c->n += n;
  c->nv += nv;
  return 0;
}

static int decode_chunk(pq_file *f, colstate *c, pq_error *err) {
  struct pq_private *p = f->priv;
  const pq_column_chunk *cc = c->cc;
  if (cc->codec != PQ_UNCOMPRESSED && cc->codec != PQ_SNAPPY && cc->codec != PQ_GZIP && cc->codec != PQ_ZSTD)
    return col_fail(c, err, PQ_E_CODEC, "unsupported compression codec %s", pq_codec_name(cc->codec));
  int64_t start = cc->data_page_offset;
  if (cc->dictionary_page_offset > 0 && cc->dictionary_page_offset < start)
    start = cc->dictionary_page_offset;
  size_t data_end = f->size - 8 - rd_u32(f->data + f->size - 8);
  if (start < 4 || cc->total_compressed_size < 0 || (uint64_t)start > data_end ||
      (uint64_t)cc->total_compressed_size > data_end - (uint64_t)start)
    return col_fail(c, err, PQ_E_METADATA,
                    "column chunk at offset %lld (%lld bytes) lies outside the file's data", (long long)start,
                    (long long)cc->total_compressed_size);
  if (cc->num_values < 0)
    return col_fail(c, err, PQ_E_METADATA, "column chunk declares %lld values", (long long)cc->num_values);
  c->cap = (size_t)cc->num_values;
  if ((uint64_t)cc->num_values > SIZE_MAX / 32)
    return col_fail(c, err, PQ_E_LIMIT, "column chunk declares %lld values", (long long)cc->num_values);
  c->def = arena_alloc(p, &p->rg, c->cap, err);
  c->rep = c->def ? arena_alloc(p, &p->rg, c->cap, err) : NULL;
  c->vals = c->rep ? arena_array(p, &p->rg, c->cap, sizeof(slot), err) : NULL;
  if (!c->vals) return -1;

  size_t pos = (size_t)start, end = pos + (size_t)cc->total_compressed_size;
  char ctx[160];
  while (pos < end) {
    snprintf(ctx, sizeof ctx, "column %s (row group %d): page header at offset %zu", c->leaf->path, c->rg,
             pos);
    tc t = {.p = f->data + pos, .end = f->data + end, .err = err, .status = PQ_E_PAGE, .ctx = ctx};
    page_header h;
    if (read_page_header(&t, &h)) return -1;
    const uint8_t *body = t.p;
    size_t left = (size_t)(f->data + end - body);
    if ((size_t)h.csize > left)
      return col_fail(
          c, err, PQ_E_PAGE,
          "page at offset %zu declares compressed_page_size %d but the column chunk has %zu bytes left", pos,
          h.csize, left);
    int rc = 0;
    switch (h.type) {
      case PAGE_DICTIONARY:
        if (!h.has_dict)
          return col_fail(c, err, PQ_E_PAGE, "dictionary page at offset %zu lacks its header", pos);
        rc = read_dictionary(f, c, err, &h, body);
        break;
      case PAGE_DATA:
      case PAGE_DATA_V2: rc = read_data_page(f, c, err, &h, body, pos); break;
      default: /* index pages and future page types carry nothing we need */ break;
    }
    if (rc) return -1;
    pos = (size_t)(body - f->data) + (size_t)h.csize;
  }
  if (c->n != c->cap)
    return col_fail(c, err, PQ_E_PAGE, "pages hold %zu values but the column chunk declares %zu", c->n,
                    c->cap);
  return 0;
}

/* ---- record assembly ---------------------------------------------------- */

typedef struct assembler {
  pq_file *f;
  const pq_sink *s;
  colstate *cols;
  pq_error *err;
  int64_t row;
} assembler;

#define SINK(a, fn, ...)                                                                                \
  ((a)->s->fn && (a)->s->fn((a)->s->ud, ##__VA_ARGS__)                                                  \
       ? fail((a)->err, PQ_E_ABORTED, "reading stopped by the caller at row %lld", (long long)(a)->row) \
       : 0)

static int out_of_step(assembler *a, const colstate *c) {
  return col_fail(c, a->err, PQ_E_PAGE, "levels are inconsistent with the other columns at row %lld",
                  (long long)a->row);
}

static int peek_def(assembler *a, const pq_node *n, unsigned *def) {
  colstate *c = &a->cols[n->first_leaf];
  if (c->cur >= c->n) return col_fail(c, a->err, PQ_E_PAGE, "levels end inside row %lld", (long long)a->row);
  *def = c->def[c->cur];
  return 0;
}

/* n is absent (null, or an empty list) here: each leaf below holds one entry saying so. */
static int skip_absent(assembler *a, const pq_node *n, int present_level) {
  for (int i = n->first_leaf; i < n->first_leaf + n->num_leaves; i++) {
    colstate *c = &a->cols[i];
    if (c->cur >= c->n)
      return col_fail(c, a->err, PQ_E_PAGE, "levels end inside row %lld", (long long)a->row);
    if (c->def[c->cur] >= present_level) return out_of_step(a, c);
    c->cur++;
  }
  return 0;
}

static int emit_field(assembler *a, const pq_node *n);

static int emit_list(assembler *a, const pq_node *owner, const pq_node *r, const pq_node *elem);

static int emit_present(assembler *a, const pq_node *n) {
  if (n->kind == PQ_KIND_LEAF) {
    colstate *c = &a->cols[n->leaf_index];
    if (c->cur >= c->n)
      return col_fail(c, a->err, PQ_E_PAGE, "levels end inside row %lld", (long long)a->row);
    if (c->def[c->cur] != n->def_level) return out_of_step(a, c);
    if (c->vcur >= c->nv)
      return col_fail(c, a->err, PQ_E_PAGE, "values end inside row %lld", (long long)a->row);
    const slot *s = &c->vals[c->vcur];
    pq_value v = {.type = n->type};
    switch (n->type) {
      case PQ_BOOLEAN: v.b = s->u.i != 0; break;
      case PQ_INT32:
      case PQ_INT64: v.i = s->u.i; break;
      case PQ_FLOAT:
      case PQ_DOUBLE: v.d = s->u.d; break;
      default:
        v.bytes = s->p;
        v.len = s->u.len;
        break;
    }
    c->cur++;
    c->vcur++;
    return SINK(a, value, n, &v);
  }
  if (n->kind == PQ_KIND_LIST) return emit_list(a, n, n->list_repeated, n->list_element);
  if (SINK(a, struct_begin, n)) return -1;
  for (int i = 0; i < n->num_children; i++)
    if (emit_field(a, n->children[i])) return -1;
  return SINK(a, struct_end, n);
}

/* owner is what the caller sees (a LIST group, or a bare repeated field), r the repeated
 * node whose repetition level separates elements, elem what each element is. */
static int emit_list(assembler *a, const pq_node *owner, const pq_node *r, const pq_node *elem) {
  unsigned def = 0;
  if (SINK(a, list_begin, owner) || peek_def(a, r, &def)) return -1;
  if (def < (unsigned)r->def_level) {
    if (skip_absent(a, r, r->def_level)) return -1;
    return SINK(a, list_end, owner);
  }
  colstate *c = &a->cols[r->first_leaf];
  for (;;) {
    if (elem == r ? emit_present(a, r) : emit_field(a, elem)) return -1;
    if (c->cur >= c->n || c->rep[c->cur] < r->rep_level) break;
    if (c->rep[c->cur] > r->rep_level) return out_of_step(a, c);
  }
  return SINK(a, list_end, owner);
}

static int emit_field(assembler *a, const pq_node *n) {
  if (n->repetition == PQ_REPEATED) return emit_list(a, n, n, n);
  if (n->repetition == PQ_OPTIONAL) {
    unsigned def = 0;
    if (peek_def(a, n, &def)) return -1;
    if (def < (unsigned)n->def_level) {
      if (skip_absent(a, n, n->def_level)) return -1;
      return SINK(a, null, n);
    }
  }
  return emit_present(a, n);
}

static int read_row_group_rows(pq_file *f, int g, const pq_sink *sink, pq_error *err, int64_t *row) {
  struct pq_private *p = f->priv;
  const pq_row_group *rg = &f->row_groups[g];
  arena_free(p, &p->rg);
  colstate *cols = arena_array(p, &p->rg, (size_t)f->num_leaves, sizeof *cols, err);
  if (!cols) return -1;
  for (int i = 0; i < f->num_leaves; i++) {
    cols[i].leaf = f->leaves[i];
    cols[i].cc = &rg->columns[i];
    cols[i].rg = g;
    if (decode_chunk(f, &cols[i], err)) return -1;
  }
  assembler a = {.f = f, .s = sink, .cols = cols, .err = err, .row = *row};
  for (int64_t k = 0; k < rg->num_rows; k++, a.row++) {
    for (int i = 0; i < f->num_leaves; i++) {
      colstate *c = &cols[i];
      if (c->cur >= c->n)
        return col_fail(c, err, PQ_E_PAGE, "holds %lld rows, the row group declares %lld", (long long)k,
                        (long long)rg->num_rows);
      if (c->rep[c->cur] != 0) return out_of_step(&a, c);
    }
    if (SINK(&a, row_begin, a.row)) return -1;
    for (int i = 0; i < f->root->num_children; i++)
      if (emit_field(&a, f->root->children[i])) return -1;
    if (SINK(&a, row_end)) return -1;
  }
  for (int i = 0; i < f->num_leaves; i++)
    if (cols[i].cur != cols[i].n || cols[i].vcur != cols[i].nv)
      return col_fail(&cols[i], err, PQ_E_PAGE, "holds more values than the row group's %lld rows",
                      (long long)rg->num_rows);
  *row = a.row;
  arena_free(p, &p->rg);
  return 0;
}

int pq_read(pq_file *f, const pq_sink *sink, pq_error *err) {
  err->status = PQ_OK;
  err->msg[0] = 0;
  int64_t row = 0;
  for (int g = 0; g < f->num_row_groups; g++)
    if (read_row_group_rows(f, g, sink, err, &row)) {
      arena_free(f->priv, &f->priv->rg);
      return -1;
    }
  return 0;
}

/* ---- JSON lines --------------------------------------------------------- */

typedef struct jsonw {
  pq_file *f;
  pq_error *err;
  int (*line)(void *ud, const char *s, size_t len);
  void *ud;
  int depth;
  int64_t rows;
  bool in_list[2 * PQ_MAX_DEPTH + 4];
  bool first[2 * PQ_MAX_DEPTH + 4];
} jsonw;

static int jw_put(jsonw *j, const void *s, size_t n) {
  struct pq_private *p = j->f->priv;
  if (n > p->line_cap - p->line_len) {
    size_t cap = p->line_cap ? p->line_cap : 4096;
    while (cap - p->line_len < n) {
      if (cap > p->limits.max_memory / 2)
        return fail(j->err, PQ_E_LIMIT, "a JSON line exceeds max_memory (%zu bytes)", p->limits.max_memory);
      cap *= 2;
    }
    char *nb = realloc(p->line, cap);
    if (!nb) return fail(j->err, PQ_E_NOMEM, "out of memory for a JSON line");
    p->line = nb;
    p->line_cap = cap;
  }
  memcpy(p->line + p->line_len, s, n);
  p->line_len += n;
  return 0;
}

#define JW_LIT(j, s) jw_put(j, s, sizeof s - 1)

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_seq(const uint8_t *s, size_t n) {
  uint8_t b = s[0];
  size_t len;
  uint8_t lo = 0x80, hi = 0xbf;
  if (b >= 0xc2 && b <= 0xdf) len = 2;
  else if (b >= 0xe0 && b <= 0xef) {
    len = 3;
    if (b == 0xe0) lo = 0xa0;
    if (b == 0xed) hi = 0x9f;
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;
  } else return 0;
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

static int jw_string(jsonw *j, const uint8_t *s, size_t n) {
  if (JW_LIT(j, "\"")) return -1;
  size_t run = 0; /* bytes copied verbatim, flushed in one put */
  for (size_t i = 0; i < n;) {
    uint8_t b = s[i];
    char esc[8];
    const char *e = NULL;
    size_t el = 2, adv = 1;
    if (b >= 0x80) {
      adv = utf8_seq(s + i, n - i);
      if (!adv) {
        snprintf(esc, sizeof esc, "\\u%04x", b);
        e = esc;
        el = 6;
        adv = 1;
      }
    } else if (b == '"') {
      e = "\\\"";
    } else if (b == '\\') {
      e = "\\\\";
    } else if (b == '\n') {
      e = "\\n";
    } else if (b == '\r') {
      e = "\\r";
    } else if (b == '\t') {
      e = "\\t";
    } else if (b < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", b);
      e = esc;
      el = 6;
    }
    if (e) {
      if (jw_put(j, s + i - run, run) || jw_put(j, e, el)) return -1;
      run = 0;
    } else {
      run += adv;
    }
    i += adv;
  }
  return jw_put(j, s + n - run, run) || JW_LIT(j, "\"");
}

static int jw_number(jsonw *j, double d, bool single) {
  char buf[40];
  if (!isfinite(d)) return JW_LIT(j, "null");
  for (int prec = single ? 6 : 15; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, d);
    for (char *q = buf; *q; q++) /* a locale may have set ',' as the decimal point */
      if (*q == ',') *q = '.';
    if (single ? strtof(buf, NULL) == (float)d : strtod(buf, NULL) == d) break;
  }
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  return jw_put(j, buf, strlen(buf));
}

/* Writes the separator and, inside an object, the key for node n. */
static int jw_key(jsonw *j, const pq_node *n) {
  int d = j->depth;
  if (!j->first[d] && JW_LIT(j, ",")) return -1;
  j->first[d] = false;
  if (j->in_list[d]) return 0;
  return jw_string(j, (const uint8_t *)n->name, n->name_len) || JW_LIT(j, ":");
}

static int jw_open(jsonw *j, bool list) {
  if (j->depth + 1 >= (int)(sizeof j->first / sizeof j->first[0]))
    return fail(j->err, PQ_E_LIMIT, "JSON nesting too deep");
  j->depth++;
  j->in_list[j->depth] = list;
  j->first[j->depth] = true;
  return list ? JW_LIT(j, "[") : JW_LIT(j, "{");
}

static int jw_row_begin(void *ud, int64_t row) {
  jsonw *j = ud;
  (void)row;
  j->f->priv->line_len = 0;
  j->depth = -1;
  return jw_open(j, false);
}

static int jw_row_end(void *ud) {
  jsonw *j = ud;
  struct pq_private *p = j->f->priv;
  if (JW_LIT(j, "}\n")) return -1;
  if (j->line(j->ud, p->line, p->line_len)) return fail(j->err, PQ_E_ABORTED, "writing a JSON line failed");
  j->rows++;
  return 0;
}

static int jw_struct_begin(void *ud, const pq_node *n) {
  jsonw *j = ud;
  return jw_key(j, n) || jw_open(j, false);
}

static int jw_list_begin(void *ud, const pq_node *n) {
  jsonw *j = ud;
  return jw_key(j, n) || jw_open(j, true);
}

static int jw_close(void *ud, const pq_node *n) {
  jsonw *j = ud;
  (void)n;
  bool list = j->in_list[j->depth];
  j->depth--;
  return list ? JW_LIT(j, "]") : JW_LIT(j, "}");
}

static int jw_null(void *ud, const pq_node *n) {
  jsonw *j = ud;
  return jw_key(j, n) || JW_LIT(j, "null");
}

static int jw_value(void *ud, const pq_node *n, const pq_value *v) {
  jsonw *j = ud;
  char buf[32];
  if (jw_key(j, n)) return -1;
  switch (v->type) {
    case PQ_BOOLEAN: return v->b ? JW_LIT(j, "true") : JW_LIT(j, "false");
    case PQ_INT32:
    case PQ_INT64: snprintf(buf, sizeof buf, "%lld", (long long)v->i); return jw_put(j, buf, strlen(buf));
    case PQ_FLOAT: return jw_number(j, v->d, true);
    case PQ_DOUBLE: return jw_number(j, v->d, false);
    default: return jw_string(j, v->bytes, v->len);
  }
}

int64_t pq_write_jsonl(pq_file *f, int (*line)(void *ud, const char *s, size_t len), void *ud,
                       pq_error *err) {
  jsonw j = {.f = f, .err = err, .line = line, .ud = ud};
  pq_sink s = {
      .ud = &j,
      .row_begin = jw_row_begin,
      .row_end = jw_row_end,
      .struct_begin = jw_struct_begin,
      .struct_end = jw_close,
      .list_begin = jw_list_begin,
      .list_end = jw_close,
      .value = jw_value,
      .null = jw_null,
  };
  if (pq_read(f, &s, err)) return -1;
  return j.rows;
}
