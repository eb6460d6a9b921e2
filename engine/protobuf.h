/*
 * protobuf.h: the protocol buffers wire format (protobuf.dev/programming-guides/encoding),
 * schema-driven, in plain C with no Lua; plus gRPC's 5-byte message framing.
 *
 * A schema is a pb_msg: a list of pb_field (number, type, label, nested message). Types use
 * descriptor.proto's FieldDescriptorProto.Type numbers. Maps are repeated fields whose
 * message is the synthetic entry {1: key, 2: value} with is_map set.
 *
 * Decoding (pb_decode) walks a buffer against a schema and reports every known field through
 * callbacks, in wire order: scalars (packed or not) one value at a time, nested messages as
 * begin/end pairs. Unknown fields, and known fields on a wire type their type cannot have,
 * are skipped (groups too). Strict bounds: a varint longer than 10 bytes, a length past the
 * end, field number 0 or over 2^29-1, wire types 6 and 7, an end-group without its start, a
 * nesting deeper than PB_MAX_DEPTH, or a fixed32/fixed64 cut short are errors, reported with
 * the byte offset and the field path.
 *
 * Encoding: pb_buf with put_* primitives; length-delimited nested messages by
 * pb_begin_len/pb_end_len (the length is written in front once the content is known).
 */
#ifndef CSENG_PROTOBUF_H
#define CSENG_PROTOBUF_H

#include <stddef.h>
#include <stdint.h>

/* FieldDescriptorProto.Type */
enum {
  PB_DOUBLE = 1,
  PB_FLOAT = 2,
  PB_INT64 = 3,
  PB_UINT64 = 4,
  PB_INT32 = 5,
  PB_FIXED64 = 6,
  PB_FIXED32 = 7,
  PB_BOOL = 8,
  PB_STRING = 9,
  PB_GROUP = 10,
  PB_MESSAGE = 11,
  PB_BYTES = 12,
  PB_UINT32 = 13,
  PB_ENUM = 14,
  PB_SFIXED32 = 15,
  PB_SFIXED64 = 16,
  PB_SINT32 = 17,
  PB_SINT64 = 18
};

/* labels */
enum { PB_SINGULAR = 0, PB_OPTIONAL = 1, PB_REPEATED = 2 };

/* wire types */
enum { PB_WT_VARINT = 0, PB_WT_I64 = 1, PB_WT_LEN = 2, PB_WT_SGROUP = 3, PB_WT_EGROUP = 4, PB_WT_I32 = 5 };

#define PB_MAX_FIELD 536870911u /* 2^29 - 1 */
#define PB_MAX_DEPTH 64
#define GRPC_HEADER_LEN 5

enum {
  PB_OK = 0,
  PB_ETRUNCATED = -1, /* a value runs past the end of its buffer */
  PB_EVARINT = -2,    /* a varint longer than 10 bytes */
  PB_EFIELD = -3,     /* field number 0 or > 2^29-1 */
  PB_EWIRE = -4,      /* wire type 6 or 7, or an unmatched end-group */
  PB_EDEPTH = -5,     /* nesting deeper than PB_MAX_DEPTH */
  PB_ENOMEM = -6,
  PB_ESTOPPED = -7, /* a callback returned non-zero */
  PB_ERANGE = -8,   /* encoding: a value out of its type's range (set by callers) */
  PB_ETOOBIG = -9   /* a gRPC frame's declared length is over the limit */
};

typedef struct pb_msg pb_msg;

typedef struct {
  uint32_t number;
  uint8_t type;   /* PB_* type */
  uint8_t label;  /* PB_SINGULAR, PB_OPTIONAL, PB_REPEATED */
  uint8_t packed; /* repeated numeric: encode packed (decoding accepts both) */
  uint8_t is_map; /* repeated PB_MESSAGE whose msg is a map entry */
  int oneof;      /* index of its oneof within the message, -1 for none */
  const char *name;
  const pb_msg *msg; /* PB_MESSAGE (and map entries) */
  void *ud;          /* free for the caller (the Lua binding keeps its references here) */
} pb_field;

struct pb_msg {
  const char *name;
  size_t nfields;
  pb_field *fields; /* sorted by number (pb_msg_sort) */
  void *ud;
};

/* Sort fields by number; returns the first duplicated number, or 0. */
uint32_t pb_msg_sort(pb_msg *m);
const pb_field *pb_msg_field(const pb_msg *m, uint32_t number);

/* Which wire type a type uses unpacked. */
int pb_wire_type(int type);
/* Packable: a numeric scalar (varint, i32, i64 types). */
int pb_packable(int type);
const char *pb_type_name(int type);
int pb_type_from_name(const char *name); /* 0 when unknown */

typedef struct {
  uint64_t u;       /* varint and fixed values, raw (signed types: two's complement) */
  int64_t i;        /* the value interpreted per type (int32 sign-extended, zigzag decoded) */
  double d;         /* float and double */
  const uint8_t *p; /* string and bytes */
  size_t n;
} pb_value;

typedef struct {
  /* a scalar (one element of a repeated field, packed or not) */
  int (*scalar)(void *ud, const pb_field *f, const pb_value *v);
  /* a nested message (or map entry): begin, its fields, end */
  int (*begin)(void *ud, const pb_field *f);
  int (*end)(void *ud, const pb_field *f);
} pb_callbacks;

typedef struct {
  int code;
  size_t offset;  /* absolute byte offset of the failure */
  char path[256]; /* "Outer.field.inner" as far as known */
} pb_error;

/* Decode p[0..n) as message m. Returns PB_OK or a negative code, with err filled. */
int pb_decode(const pb_msg *m, const uint8_t *p, size_t n, const pb_callbacks *cb, void *ud, pb_error *err);
/* A readable message for err ("<path>: <reason> at byte <offset>"). */
void pb_error_message(const pb_error *err, char *out, size_t cap);

/* Wire primitives for readers: return bytes consumed (> 0) or a negative code. */
int pb_read_varint(const uint8_t *p, size_t n, uint64_t *out);
/* Skip a field's value of wire type wt (groups included: nested up to PB_MAX_DEPTH). */
int64_t pb_skip(const uint8_t *p, size_t n, uint32_t number, int wt, int depth);

static inline uint64_t pb_zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t pb_unzigzag64(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }
static inline uint32_t pb_zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline int32_t pb_unzigzag32(uint32_t v) { return (int32_t)(v >> 1) ^ -(int32_t)(v & 1); }

/* ---- encoding ---------------------------------------------------------- */

typedef struct {
  uint8_t *p;
  size_t len, cap;
  int oom;
} pb_buf;

void pb_buf_free(pb_buf *b);
int pb_put_raw(pb_buf *b, const void *p, size_t n);
int pb_put_varint(pb_buf *b, uint64_t v);
int pb_put_tag(pb_buf *b, uint32_t number, int wt);
int pb_put_fixed32(pb_buf *b, uint32_t v);
int pb_put_fixed64(pb_buf *b, uint64_t v);
int pb_put_bytes(pb_buf *b, uint32_t number, const void *p, size_t n); /* tag + length + bytes */
/* A scalar of type t (not string/bytes/message) as its wire value (no tag): from the
 * integer i (integer types, bool, enum) or the double d (float, double). */
int pb_put_value(pb_buf *b, int type, int64_t i, double d);
/* Nested length-delimited content: mark = pb_begin_len(b); ...; pb_end_len(b, mark). */
size_t pb_begin_len(pb_buf *b);
int pb_end_len(pb_buf *b, size_t mark);

/* ---- gRPC framing: compressed flag (1 byte) + big-endian length (4 bytes) ---- */
int grpc_frame_header(uint8_t out[GRPC_HEADER_LEN], int compressed, uint64_t len); /* -1 if len >= 2^32 */
/* Parse one frame at p[0..n): 0 = need more bytes; > 0 = frame size (header + payload),
 * with *flags, *payload, *len set; < 0 = PB_EWIRE (flags other than 0/1) or PB_ETOOBIG
 * (declared length over max). */
int64_t grpc_frame_parse(const uint8_t *p, size_t n, size_t max, unsigned *flags, const uint8_t **payload,
                         size_t *len);

#endif
