/*
 * lcrypto.c: hashing, MACs, encodings and randomness. Module cseng.crypto.
 *   crypto.sha256(s)            raw 32-byte digest
 *   crypto.sha256_hex(s)        lowercase hex digest
 *   crypto.hmac_sha256(key, m)  raw 32-byte MAC
 *   crypto.hex(s) / crypto.unhex(s)
 *   crypto.base64(s) / crypto.unbase64(s)
 *   crypto.random_bytes(n)      n bytes from OpenSSL's CSPRNG
 *
 * Only OpenSSL 3 EVP interfaces (EVP_Digest, EVP_Q_mac, RAND_bytes); nothing
 * deprecated. Decoders are strict: bad input returns nil, message, "EINVAL".
 * Everything is synchronous and CPU-bound; hashing a large string blocks the
 * loop for as long as it takes (about 2 ms per MiB).
 */
#include "core.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>

#define SHA256_LEN 32
#define RANDOM_MAX (64 * 1024 * 1024)

static const char hexdigits[] = "0123456789abcdef";
static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* OpenSSL failures here mean a broken library or out of memory: raise. */
static int openssl_error(lua_State *L, const char *what) {
  char buf[256];
  unsigned long e = ERR_get_error();
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return luaL_error(L, "%s failed: %s", what, e ? buf : "unknown OpenSSL error");
}

static void push_hex(lua_State *L, const unsigned char *s, size_t n) {
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, n * 2);
  size_t i;
  for (i = 0; i < n; i++) {
    out[2 * i] = hexdigits[s[i] >> 4];
    out[2 * i + 1] = hexdigits[s[i] & 15];
  }
  luaL_pushresultsize(&b, n * 2);
}

static void sha256_raw(lua_State *L, int idx, unsigned char out[SHA256_LEN]) {
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  unsigned int len = 0;
  if (!EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) || len != SHA256_LEN) openssl_error(L, "sha256");
}

/** crypto.sha256(s) -> 32 raw bytes */
static int crypto_sha256(lua_State *L) {
  unsigned char md[SHA256_LEN];
  sha256_raw(L, 1, md);
  lua_pushlstring(L, (const char *)md, sizeof md);
  return 1;
}

/** crypto.sha256_hex(s) -> 64 lowercase hex digits */
static int crypto_sha256_hex(lua_State *L) {
  unsigned char md[SHA256_LEN];
  sha256_raw(L, 1, md);
  push_hex(L, md, sizeof md);
  return 1;
}

/** crypto.hmac_sha256(key, msg) -> 32 raw bytes */
static int crypto_hmac_sha256(lua_State *L) {
  size_t klen, mlen, outlen = 0;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *msg = luaL_checklstring(L, 2, &mlen);
  unsigned char mac[SHA256_LEN];
  /* EVP_Q_mac rejects a NULL key even when its length is 0; "" is a valid HMAC key. */
  static const unsigned char nokey[1] = {0};
  if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, klen ? (const void *)key : nokey, klen,
                 (const unsigned char *)msg, mlen, mac, sizeof mac, &outlen) ||
      outlen != SHA256_LEN)
    return openssl_error(L, "hmac_sha256");
  lua_pushlstring(L, (const char *)mac, sizeof mac);
  return 1;
}

/** crypto.hex(s) -> lowercase hex */
static int crypto_hex(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  push_hex(L, (const unsigned char *)s, n);
  return 1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/** crypto.unhex(s) -> bytes | nil, msg, "EINVAL" (either case; no separators) */
static int crypto_unhex(lua_State *L) {
  size_t n, i;
  const char *s = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  char *out;
  if (n % 2) return cs_fail(L, "EINVAL", "unhex: odd length %d", (int)n);
  out = luaL_buffinitsize(L, &b, n / 2);
  for (i = 0; i < n; i += 2) {
    int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
    if (hi < 0 || lo < 0) {
      lua_pop(L, 1); /* the buffer's box, if any; cs_fail pushes fresh values */
      return cs_fail(L, "EINVAL", "unhex: invalid hex digit at offset %d", (int)(hi < 0 ? i : i + 1));
    }
    out[i / 2] = (char)(hi << 4 | lo);
  }
  luaL_pushresultsize(&b, n / 2);
  return 1;
}

/** crypto.base64(s) -> standard alphabet, padded, no line breaks (RFC 4648 section 4) */
static int crypto_base64(lua_State *L) {
  size_t n, i, o = 0;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  size_t outlen = (n + 2) / 3 * 4;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, outlen);
  for (i = 0; i + 2 < n; i += 3) {
    unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
    out[o++] = b64chars[v >> 18];
    out[o++] = b64chars[(v >> 12) & 63];
    out[o++] = b64chars[(v >> 6) & 63];
    out[o++] = b64chars[v & 63];
  }
  if (n - i == 1) {
    unsigned v = (unsigned)s[i] << 16;
    out[o++] = b64chars[v >> 18];
    out[o++] = b64chars[(v >> 12) & 63];
    out[o++] = '=';
    out[o++] = '=';
  } else if (n - i == 2) {
    unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8;
    out[o++] = b64chars[v >> 18];
    out[o++] = b64chars[(v >> 12) & 63];
    out[o++] = b64chars[(v >> 6) & 63];
    out[o++] = '=';
  }
  luaL_pushresultsize(&b, o);
  return 1;
}

static int b64val(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/*
 * Strict RFC 4648 decoding: standard alphabet, padding required, '=' only at
 * the end, the unused bits of the last group zero (so every input has one
 * canonical encoding). Line breaks (\n, \r\n) are skipped anywhere, as wrapped
 * base64 (PEM, MIME, `base64` without -w0) has them; other whitespace is an error.
 */
static int crypto_unbase64(lua_State *L) {
  size_t n, i, o = 0, ngroup = 0, npad = 0;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned v = 0;
  const char *why = NULL;
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, n / 4 * 3 + 3);
  for (i = 0; i < n; i++) {
    int c = (unsigned char)s[i], d;
    if (c == '\n' || c == '\r') continue;
    if (c == '=') {
      if (ngroup < 2) {
        why = "misplaced padding";
        break;
      }
      npad++;
      ngroup++;
      v <<= 6;
    } else {
      if (npad) {
        why = "data after padding";
        break;
      }
      if ((d = b64val(c)) < 0) {
        why = "invalid character";
        break;
      }
      v = v << 6 | (unsigned)d;
      ngroup++;
    }
    if (ngroup == 4) {
      out[o++] = (char)(v >> 16);
      if (npad < 2) out[o++] = (char)(v >> 8);
      if (npad < 1) out[o++] = (char)v;
      if (npad && (v & (npad == 1 ? 0xff : 0xffff))) {
        why = "non-zero padding bits";
        break;
      }
      if (npad) {
        i++;
        break;
      } /* only line breaks may follow */
      ngroup = 0;
      v = 0;
    }
  }
  if (!why) {
    for (; i < n; i++)
      if (s[i] != '\n' && s[i] != '\r') {
        why = npad ? "data after padding" : "invalid character";
        break;
      }
  }
  if (!why && ngroup != 0 && !(npad && ngroup == 4)) why = "truncated input (length is not a multiple of 4)";
  if (why) {
    lua_pop(L, 1);
    return cs_fail(L, "EINVAL", "unbase64: %s at offset %d", why, (int)(i < n ? i : n));
  }
  luaL_pushresultsize(&b, o);
  return 1;
}

/** crypto.random_bytes(n) -> n bytes from the CSPRNG (n <= 64 MiB) */
static int crypto_random_bytes(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_Buffer b;
  unsigned char *out;
  luaL_argcheck(L, n >= 0 && n <= RANDOM_MAX, 1, "must be between 0 and 64 MiB");
  out = (unsigned char *)luaL_buffinitsize(L, &b, (size_t)n);
  if (n > 0 && RAND_bytes(out, (int)n) != 1) return openssl_error(L, "random_bytes");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

int luaopen_cseng_crypto(lua_State *L) {
  static const luaL_Reg funcs[] = {{"sha256", crypto_sha256},
                                   {"sha256_hex", crypto_sha256_hex},
                                   {"hmac_sha256", crypto_hmac_sha256},
                                   {"hex", crypto_hex},
                                   {"unhex", crypto_unhex},
                                   {"base64", crypto_base64},
                                   {"unbase64", crypto_unbase64},
                                   {"random_bytes", crypto_random_bytes},
                                   {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
