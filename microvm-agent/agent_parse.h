/* The microvm-agent's parsers of untrusted bytes (HTTP/1.1 request heads, chunked bodies,
 * query strings, JSON, tar archives, archive member names), kept apart from the server so
 * fuzz/agent_parse_fuzz.c can drive them. Plain C11 + libc; no allocation except in
 * json_parse / ap_query_get / buf_*. */
#ifndef AGENT_PARSE_H
#define AGENT_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* ---- growable byte buffer ---- */
struct buf {
  char *p;
  size_t len, cap;
};
int buf_reserve(struct buf *b, size_t extra); /* 0, or -1 when out of memory */
int buf_add(struct buf *b, const void *p, size_t n);
int buf_str(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(struct buf *b);

/* ---- HTTP/1.1 request head ---- */
#define AP_MAX_HEADERS 64
#define AP_E_BAD (-1)      /* malformed: 400 */
#define AP_E_TOO_MANY (-2) /* more than AP_MAX_HEADERS headers: 431 */
#define AP_E_VERSION (-3)  /* not HTTP/1.0 or 1.1: 505 */

struct ap_header {
  const char *name, *value;
  size_t name_len, value_len;
};

struct ap_request {
  const char *method, *target, *path, *query;
  size_t method_len, target_len, path_len, query_len;
  int minor; /* HTTP/1.<minor> */
  size_t nheaders;
  struct ap_header headers[AP_MAX_HEADERS];
  long long content_length; /* -1: none */
  int chunked;              /* Transfer-Encoding: chunked */
  int expect_continue;      /* Expect: 100-continue */
};

/* Parse the head in buf[0..len). Returns the head's length (through the blank line) when
 * complete, 0 when more bytes are needed, or AP_E_*. The request's pointers point into buf. */
long ap_parse_head(const char *buf, size_t len, struct ap_request *r);
/* The first header named name (case-insensitive), or NULL. */
const struct ap_header *ap_header(const struct ap_request *r, const char *name);

/* ---- chunked transfer coding (incremental) ---- */
struct ap_chunked {
  int state;
  uint64_t remaining;
  int digits;
};
/* Decode in[0..len) into out (capacity >= len). *out_len gets the decoded bytes,
 * *consumed the input bytes used. Returns 1 when the last chunk and trailers are done, 0 when
 * more input is needed, -1 on a malformed stream. */
int ap_chunked_feed(struct ap_chunked *c, const char *in, size_t len, char *out, size_t *out_len,
                    size_t *consumed);

/* ---- query strings ---- */
/* Percent-decode (and '+' as space) into a new NUL-terminated string. Returns 1 and sets *out
 * (free it) when name is present, 0 when absent, -1 on a bad %-escape or out of memory. */
int ap_query_get(const char *q, size_t qlen, const char *name, char **out, size_t *out_len);

/* ---- JSON ---- */
enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
struct jv {
  int type;
  int b;
  double num;
  char *str;        /* J_STR: decoded bytes, NUL-terminated (may hold NULs: use len) */
  size_t len;       /* J_STR length; J_ARR / J_OBJ: number of items */
  struct jv *items; /* J_ARR / J_OBJ values */
  char **keys;      /* J_OBJ keys (NUL-terminated) */
  size_t *key_lens;
};
#define JSON_MAX_DEPTH 32
/* Parse one JSON value (RFC 8259; surrounding whitespace allowed, nothing else after).
 * Returns a tree to json_free, or NULL with a message in err. */
struct jv *json_parse(const char *s, size_t len, char *err, size_t errlen);
void json_free(struct jv *v);
const struct jv *json_get(const struct jv *obj, const char *key); /* NULL unless obj is an object with key */
/* Append s[0..n) as a JSON string literal; invalid UTF-8 bytes become U+FFFD. */
int json_escape(struct buf *b, const char *s, size_t n);

/* ---- tar (ustar, GNU long names, pax path/linkpath/size) ---- */
#define TAR_NAME_MAX 4096
struct tar_entry {
  char name[TAR_NAME_MAX + 1];
  char linkname[TAR_NAME_MAX + 1];
  char type; /* '0' file, '5' directory, '2' symlink, '1' hard link, others as in the header */
  unsigned mode;
  long long mtime;
  const char *data; /* file contents (type '0') */
  uint64_t size;
};
struct tar_reader {
  const char *buf;
  size_t len, off;
};
/* The next member. Returns 1 with *e set, 0 at the end of the archive, -1 with a message in
 * err on a malformed archive (bad checksum, truncated, bad number, name too long). */
int tar_next(struct tar_reader *t, struct tar_entry *e, char *err, size_t errlen);

/* Make an archive member name safe to create below a directory: "./" prefixes, "." and empty
 * components dropped; absolute names and any ".." component refused. Returns 0 with the clean
 * relative name in out ("" for the directory itself), -1 when refused or too long. */
int ap_safe_relpath(const char *name, char *out, size_t outlen);

/* Write a tar header block (plus a pax header before it when name/linkname does not fit)
 * for a member of the given type/size/mode/mtime. */
int tar_header(struct buf *b, const char *name, char type, uint64_t size, unsigned mode, long long mtime,
               const char *linkname);

#endif
