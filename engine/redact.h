/*
 * redact.h: the one C entry point for redaction (plain C, no Lua).
 *
 * The Lua redactor (lua/cseng/lib/util.lua: util.redact) owns the secret set and pushes it
 * here (cseng.redact.add/clear) whenever it changes, so both sides hide the same strings:
 * every whole value (a secret and its base64 and percent-encoded forms), and, for a value
 * added with fragments, every run of CS_REDACT_FRAG of its bytes. Every C diagnostic that
 * can carry data is written with cs_diag.
 */
#ifndef CSENG_REDACT_H
#define CSENG_REDACT_H

#include <stddef.h>

#define CS_REDACT_FRAG 8 /* bytes: no run this long of a fragment secret survives */

/* Forget every secret. */
void cs_redact_clear(void);

/* Add a secret (copied); fragments: also hide every CS_REDACT_FRAG-byte run of it. Values of
 * fewer than 6 bytes are ignored. Returns 0 when out of memory. */
int cs_redact_add(const char *s, size_t n, int fragments);

/* s with every secret, and every fragment run, replaced by "[redacted]": a malloc'd string
 * (NUL-terminated, its length in *outlen), or NULL when out of memory. */
char *cs_redact(const char *s, size_t n, size_t *outlen);

/* A diagnostic on stderr: printf-formatted, redacted, control characters but newline and tab
 * escaped as \xNN (as util.console does), written with one write(2). */
void cs_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
