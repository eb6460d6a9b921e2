/* minicodec: small codecs with a test suite (the arena's standard workload). */
#ifndef MINICODEC_H
#define MINICODEC_H

#include <stddef.h>
#include <stdint.h>

/* base64 (RFC 4648, with padding). out must hold mc_b64_encoded_len(n) + 1 bytes. */
size_t mc_b64_encoded_len(size_t n);
size_t mc_b64_encode(const unsigned char *in, size_t n, char *out);
/* Decodes n chars into out (at least n / 4 * 3 bytes); returns the length, or -1 on bad input. */
long mc_b64_decode(const char *in, size_t n, unsigned char *out);

/* CRC-32 (IEEE 802.3, as zlib's crc32): crc is 0 for a new sum, else the previous result. */
uint32_t mc_crc32(uint32_t crc, const unsigned char *p, size_t n);

/* UTF-8: the number of code points in a well-formed string, or -1 (overlong forms, surrogates,
 * values past U+10FFFF and cut sequences are refused). */
long mc_utf8_count(const unsigned char *s, size_t n);

/* key=value lines: finds key in text (lines "k=v", '#' comments, blanks ignored, spaces around
 * k and v trimmed) and copies its value into out (cap bytes with the NUL). Returns the value's
 * length, -1 when the key is absent, -2 when the value does not fit. The last line for a key wins. */
long mc_kv_get(const char *text, const char *key, char *out, size_t cap);

#endif
