#include "minicodec.h"

static const char ALPHABET[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t mc_b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

size_t mc_b64_encode(const unsigned char *in, size_t n, char *out) {
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    out[o++] = ALPHABET[v >> 18 & 63];
    out[o++] = ALPHABET[v >> 12 & 63];
    out[o++] = ALPHABET[v >> 6 & 63];
    out[o++] = ALPHABET[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
    out[o++] = ALPHABET[v >> 18 & 63];
    out[o++] = ALPHABET[v >> 12 & 63];
    out[o++] = i + 1 < n ? ALPHABET[v >> 6 & 63] : '=';
    out[o++] = '=';
  }
  out[o] = '\0';
  return o;
}

static int value_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long mc_b64_decode(const char *in, size_t n, unsigned char *out) {
  if (n % 4 != 0) return -1;
  long o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int pad = 0, v[4];
    for (int k = 0; k < 4; k++) {
      if (in[i + k] == '=') {
        if (i + 4 != n || k < 2) return -1;
        v[k] = 0;
        pad++;
      } else {
        if (pad) return -1; /* data after padding */
        v[k] = value_of(in[i + k]);
        if (v[k] < 0) return -1;
      }
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    out[o++] = (unsigned char)(w >> 16);
    if (pad < 2) out[o++] = (unsigned char)(w >> 8);
    if (pad < 1) out[o++] = (unsigned char)w;
  }
  return o;
}
