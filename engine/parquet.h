/* parquet.h — a small, bounds-checked Apache Parquet reader in plain C (no Lua).
 *
 * pq_open() parses the footer (Thrift compact protocol) of a file held in memory;
 * pq_read() decodes every row group and replays each record as events on a pq_sink
 * (struct/list begin and end, values, nulls), so a caller builds whatever tree it likes.
 * pq_write_jsonl() is one such sink: one JSON object per record.
 *
 * Supported: data pages v1 and v2, dictionary pages; PLAIN, PLAIN_DICTIONARY,
 * RLE_DICTIONARY, RLE (levels and booleans), and also DELTA_BINARY_PACKED,
 * DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT (common in v2 files);
 * codecs UNCOMPRESSED, SNAPPY, GZIP, ZSTD; nested optional/required groups, repeated
 * fields and LIST/MAP annotated groups. Anything else (LZ4, BROTLI, LZO, BIT_PACKED
 * levels, encryption, external column files) fails with a message that names the column
 * and what is unsupported.
 *
 * Safety: every read is checked against the buffer it comes from, and every
 * allocation is charged against pq_limits.max_memory, so a hostile file fails with
 * an error instead of reading out of bounds or exhausting memory. */
#ifndef CSENG_PARQUET_H
#define CSENG_PARQUET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PQ_MAX_DEPTH 64 /* nesting of the schema tree, root excluded */

typedef enum pq_status {
  PQ_OK = 0,
  PQ_E_IO,          /* "EIO" (set by callers that read files) */
  PQ_E_MAGIC,       /* "PARQUET_MAGIC": not a parquet file */
  PQ_E_TRUNCATED,   /* "PARQUET_TRUNCATED": file shorter than its structure says */
  PQ_E_METADATA,    /* "PARQUET_METADATA": footer or schema does not decode */
  PQ_E_PAGE,        /* "PARQUET_PAGE": a page, its sizes, levels or values are corrupt */
  PQ_E_DICTIONARY,  /* "PARQUET_DICTIONARY": missing dictionary or index out of range */
  PQ_E_CODEC,       /* "PARQUET_CODEC": compression codec not supported */
  PQ_E_UNSUPPORTED, /* "PARQUET_UNSUPPORTED": encoding, type or feature not supported */
  PQ_E_LIMIT,       /* "PARQUET_LIMIT": would need more than pq_limits.max_memory */
  PQ_E_NOMEM,       /* "ENOMEM" */
  PQ_E_ABORTED,     /* "PARQUET_ABORTED": a sink callback returned non-zero */
} pq_status;

typedef struct pq_error {
  pq_status status;
  char msg[320];
} pq_error;

enum pq_type {
  PQ_BOOLEAN = 0,
  PQ_INT32 = 1,
  PQ_INT64 = 2,
  PQ_INT96 = 3,
  PQ_FLOAT = 4,
  PQ_DOUBLE = 5,
  PQ_BYTE_ARRAY = 6,
  PQ_FIXED_LEN_BYTE_ARRAY = 7,
};
enum pq_repetition { PQ_REQUIRED = 0, PQ_OPTIONAL = 1, PQ_REPEATED = 2 };
enum pq_codec {
  PQ_UNCOMPRESSED = 0,
  PQ_SNAPPY = 1,
  PQ_GZIP = 2,
  PQ_LZO = 3,
  PQ_BROTLI = 4,
  PQ_LZ4 = 5,
  PQ_ZSTD = 6,
  PQ_LZ4_RAW = 7,
};
enum pq_encoding {
  PQ_PLAIN = 0,
  PQ_PLAIN_DICTIONARY = 2,
  PQ_RLE = 3,
  PQ_BIT_PACKED = 4,
  PQ_DELTA_BINARY_PACKED = 5,
  PQ_DELTA_LENGTH_BYTE_ARRAY = 6,
  PQ_DELTA_BYTE_ARRAY = 7,
  PQ_RLE_DICTIONARY = 8,
  PQ_BYTE_STREAM_SPLIT = 9,
};
/* Converted types (the legacy annotation), as numbered in parquet.thrift. */
enum pq_converted {
  PQ_CT_NONE = -1,
  PQ_CT_UTF8 = 0,
  PQ_CT_MAP = 1,
  PQ_CT_MAP_KEY_VALUE = 2,
  PQ_CT_LIST = 3,
  PQ_CT_ENUM = 4,
  PQ_CT_DECIMAL = 5,
  PQ_CT_UINT_8 = 11,
  PQ_CT_UINT_16 = 12,
  PQ_CT_UINT_32 = 13,
  PQ_CT_UINT_64 = 14,
  PQ_CT_JSON = 19,
  PQ_CT_BSON = 20,
};
/* LogicalType union members, as numbered in parquet.thrift (0: none). */
enum pq_logical {
  PQ_LT_NONE = 0,
  PQ_LT_STRING = 1,
  PQ_LT_MAP = 2,
  PQ_LT_LIST = 3,
  PQ_LT_ENUM = 4,
  PQ_LT_DECIMAL = 5,
  PQ_LT_DATE = 6,
  PQ_LT_TIME = 7,
  PQ_LT_TIMESTAMP = 8,
  PQ_LT_INTEGER = 10,
  PQ_LT_UNKNOWN = 11,
  PQ_LT_JSON = 12,
  PQ_LT_BSON = 13,
  PQ_LT_UUID = 14,
  PQ_LT_FLOAT16 = 15,
};

/* How a node shows up in a record. */
enum pq_kind {
  PQ_KIND_LEAF = 0,   /* a primitive column */
  PQ_KIND_STRUCT = 1, /* a group: a table keyed by child names */
  PQ_KIND_LIST = 2,   /* a LIST- or MAP-annotated group: an array of elements */
};

typedef struct pq_node pq_node;
struct pq_node {
  const char *name; /* NUL-terminated; name_len excludes the NUL */
  size_t name_len;
  const char *path; /* dotted path below the root, e.g. "metadata.instance.task_id" */
  int kind;         /* enum pq_kind */
  int repetition;   /* enum pq_repetition; a PQ_REPEATED node is itself an array */
  int type;         /* enum pq_type for leaves, -1 for groups */
  int32_t type_length;
  int converted_type; /* enum pq_converted */
  int logical_type;   /* enum pq_logical */
  int32_t scale, precision;
  bool is_unsigned;         /* UINT_* or INTEGER(isSigned=false) */
  int def_level, rep_level; /* definition/repetition level of this node (max levels for a leaf) */
  pq_node *parent;
  pq_node **children;
  int num_children;
  int leaf_index;             /* index into pq_file.leaves for leaves, -1 for groups */
  int first_leaf, num_leaves; /* leaves below (or at) this node */
  /* PQ_KIND_LIST only: the repeated child, and what each element is (that child,
   * or its only child under the LIST backward-compatibility rules). */
  pq_node *list_repeated;
  pq_node *list_element;
};

typedef struct pq_column_chunk {
  int type;  /* physical type as declared by the chunk */
  int codec; /* enum pq_codec (any value; unsupported ones fail when read) */
  int num_encodings;
  int *encodings;
  int64_t num_values;
  int64_t total_compressed_size, total_uncompressed_size;
  int64_t data_page_offset;
  int64_t dictionary_page_offset; /* -1 when absent */
} pq_column_chunk;

typedef struct pq_row_group {
  int64_t num_rows;
  int64_t total_byte_size;
  pq_column_chunk *columns; /* one per leaf, in leaf order */
} pq_row_group;

typedef struct pq_kv {
  const char *key, *value; /* value is NULL when absent */
  size_t key_len, value_len;
} pq_kv;

typedef struct pq_limits {
  size_t max_memory; /* bytes of metadata plus one decoded row group; default 1 GiB */
} pq_limits;

typedef struct pq_file {
  const uint8_t *data; /* the whole file, owned by the caller */
  size_t size;
  int32_t version;
  int64_t num_rows;
  const char *created_by; /* NULL when absent */
  pq_node *root;
  int num_nodes;
  pq_node **leaves;
  int num_leaves;
  pq_row_group *row_groups;
  int num_row_groups;
  pq_kv *kv;
  int num_kv;
  struct pq_private *priv;
} pq_file;

/* A decoded value. bytes/len are set for BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY and INT96
 * and point into memory that lives until the sink callback returns. */
typedef struct pq_value {
  int type; /* enum pq_type */
  bool b;
  int64_t i; /* INT32 (zero-extended when unsigned) and INT64 */
  double d;  /* FLOAT and DOUBLE */
  const uint8_t *bytes;
  size_t len;
} pq_value;

/* Record events. Any callback may be NULL; a non-zero return stops pq_read with
 * PQ_E_ABORTED. A node that is an element of a list or a row field arrives through
 * the same calls; the sink tracks which container it is filling. */
typedef struct pq_sink {
  void *ud;
  int (*row_begin)(void *ud, int64_t row);
  int (*row_end)(void *ud);
  int (*struct_begin)(void *ud, const pq_node *n);
  int (*struct_end)(void *ud, const pq_node *n);
  int (*list_begin)(void *ud, const pq_node *n);
  int (*list_end)(void *ud, const pq_node *n);
  int (*value)(void *ud, const pq_node *n, const pq_value *v);
  int (*null)(void *ud, const pq_node *n);
} pq_sink;

void pq_limits_default(pq_limits *l);

/* Parses magic, footer and schema. data must outlive the returned file.
 * Returns NULL with err filled on failure. limits may be NULL for the defaults. */
pq_file *pq_open(const uint8_t *data, size_t size, const pq_limits *limits, pq_error *err);

/* Frees everything pq_open and pq_read allocated. Safe on NULL, and safe to call
 * after a sink callback escaped with longjmp (a Lua error). */
void pq_close(pq_file *f);

/* Decodes every row group in order and emits each record. Returns 0 or -1 (err set). */
int pq_read(pq_file *f, const pq_sink *sink, pq_error *err);

/* Writes each record as one JSON object (fields in schema order, nulls as null,
 * lists as arrays, NaN and infinities as null, FLOAT and DOUBLE in their shortest
 * round-tripping form). Strings are written as UTF-8; a byte that is not part of a
 * valid UTF-8 sequence is written as \u00XX. line() receives each line including
 * its '\n' and returns non-zero to stop. Returns the number of rows written, or -1. */
int64_t pq_write_jsonl(pq_file *f, int (*line)(void *ud, const char *s, size_t len), void *ud, pq_error *err);

/* Stable names. Unknown values give "UNKNOWN(n)"-style strings from a static buffer
 * for the *_name functions, so use them before the next call. */
const char *pq_status_code(pq_status s);
const char *pq_type_name(int type);
const char *pq_codec_name(int codec);
const char *pq_encoding_name(int encoding);
const char *pq_repetition_name(int repetition);
const char *pq_logical_name(const pq_node *n); /* "STRING", "JSON", "LIST", ... or NULL */

#endif
