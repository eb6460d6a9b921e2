/*
 * connect.c: the Connect protocol's envelope codec (see connect.h). Plain C, no Lua, no
 * I/O: the E2B adapter feeds it the envd response body chunk by chunk as libcurl hands
 * it over, and test/c/connect_test.c and fuzz/connect_fuzz.c drive it directly.
 *
 * Frames that arrive whole inside one chunk are delivered from the caller's bytes (no
 * copy); a frame cut across chunks is gathered in one buffer that grows with the bytes
 * actually received, never beyond the frame's declared length (itself checked against
 * max_frame first), so a hostile length prefix costs no memory.
 */
#include "connect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void connect_decoder_init(connect_decoder *d, size_t max_frame) {
  memset(d, 0, sizeof *d);
  d->max_frame = max_frame ? max_frame : CONNECT_MAX_FRAME_DEFAULT;
}

void connect_decoder_free(connect_decoder *d) {
  free(d->buf);
  d->buf = NULL;
  d->buf_len = d->buf_cap = 0;
}

static int fail(connect_decoder *d, int code) {
  d->error = code;
  return code;
}

static void next_frame(connect_decoder *d) {
  d->hdr_len = 0;
  d->buf_len = 0;
  d->need = 0;
}

static int deliver(connect_decoder *d, const uint8_t *data, size_t len, connect_frame_fn fn, void *ud) {
  unsigned flags = d->hdr[0];
  d->frames++;
  if (flags & CONNECT_FLAG_END_STREAM) d->ended = 1;
  next_frame(d);
  if (fn && fn(ud, flags, data, len) != 0) return fail(d, CONNECT_ESTOPPED);
  return CONNECT_OK;
}

/* Room for at least want bytes of the current payload (want <= d->need <= max_frame). */
static int reserve(connect_decoder *d, size_t want) {
  size_t cap;
  uint8_t *p;
  if (want <= d->buf_cap) return 0;
  cap = d->buf_cap ? d->buf_cap : 256;
  while (cap < want) cap = cap > d->need / 2 ? d->need : cap * 2;
  p = realloc(d->buf, cap);
  if (!p) return -1;
  d->buf = p;
  d->buf_cap = cap;
  return 0;
}

int connect_decoder_feed(connect_decoder *d, const uint8_t *p, size_t n, connect_frame_fn fn, void *ud) {
  if (d->error) return d->error;
  while (n > 0) {
    size_t take;
    if (d->ended) return fail(d, CONNECT_EAFTEREND);
    if (d->hdr_len < CONNECT_HEADER_LEN) {
      uint32_t len;
      take = CONNECT_HEADER_LEN - d->hdr_len;
      if (take > n) take = n;
      memcpy(d->hdr + d->hdr_len, p, take);
      d->hdr_len += take;
      p += take;
      n -= take;
      d->offset += take;
      if (d->hdr_len < CONNECT_HEADER_LEN) break;
      if (d->hdr[0] & ~CONNECT_FLAGS_KNOWN & 0xffu) {
        d->bad_flags = d->hdr[0];
        return fail(d, CONNECT_EFLAGS);
      }
      len = (uint32_t)d->hdr[1] << 24 | (uint32_t)d->hdr[2] << 16 | (uint32_t)d->hdr[3] << 8 | d->hdr[4];
      if (len > d->max_frame) {
        d->bad_len = len;
        return fail(d, CONNECT_ETOOBIG);
      }
      d->need = len;
      d->buf_len = 0;
      if (n >= len) { /* the whole payload is in this chunk: no copy */
        int rc;
        d->offset += len;
        rc = deliver(d, p, len, fn, ud);
        if (rc) return rc;
        p += len;
        n -= len;
        continue;
      }
      if (n == 0) break;
    }
    take = d->need - d->buf_len;
    if (take > n) take = n;
    if (reserve(d, d->buf_len + take) != 0) return fail(d, CONNECT_ENOMEM);
    memcpy(d->buf + d->buf_len, p, take);
    d->buf_len += take;
    p += take;
    n -= take;
    d->offset += take;
    if (d->buf_len == d->need) {
      int rc = deliver(d, d->buf, d->need, fn, ud);
      if (rc) return rc;
    }
  }
  return CONNECT_OK;
}

int connect_decoder_finish(connect_decoder *d) {
  if (d->error) return d->error;
  if (d->hdr_len > 0) return fail(d, CONNECT_ETRUNCATED);
  return CONNECT_OK;
}

const char *connect_strerror(int code) {
  switch (code) {
    case CONNECT_OK: return "no error";
    case CONNECT_ETOOBIG: return "frame length over the limit";
    case CONNECT_EFLAGS: return "reserved flag bits set";
    case CONNECT_EAFTEREND: return "data after the end-of-stream frame";
    case CONNECT_ETRUNCATED: return "stream ended inside a frame";
    case CONNECT_ENOMEM: return "out of memory";
    case CONNECT_ESTOPPED: return "stopped by the frame callback";
    default: return "unknown error";
  }
}

void connect_decoder_message(const connect_decoder *d, char *out, size_t outlen) {
  size_t frame = d->frames + 1; /* the frame being read when it failed */
  if (!out || outlen == 0) return;
  switch (d->error) {
    case CONNECT_ETOOBIG:
      snprintf(out, outlen, "connect: frame %zu declares %llu bytes, over the limit of %zu", frame,
               (unsigned long long)d->bad_len, d->max_frame);
      break;
    case CONNECT_EFLAGS:
      snprintf(out, outlen, "connect: frame %zu has reserved flag bits set (flags 0x%02x)", frame,
               d->bad_flags);
      break;
    case CONNECT_EAFTEREND:
      snprintf(out, outlen, "connect: data after the end-of-stream frame (byte %llu)",
               (unsigned long long)d->offset);
      break;
    case CONNECT_ETRUNCATED:
      if (d->hdr_len < CONNECT_HEADER_LEN)
        snprintf(out, outlen, "connect: stream ended inside the header of frame %zu (%zu of %d bytes)", frame,
                 d->hdr_len, CONNECT_HEADER_LEN);
      else
        snprintf(out, outlen, "connect: stream ended inside frame %zu (%zu of %zu payload bytes)", frame,
                 d->buf_len, d->need);
      break;
    default: snprintf(out, outlen, "connect: %s", connect_strerror(d->error));
  }
}

int connect_header(uint8_t out[CONNECT_HEADER_LEN], unsigned flags, uint64_t len) {
  if (flags > 0xffu || len > 0xffffffffull) return -1;
  out[0] = (uint8_t)flags;
  out[1] = (uint8_t)(len >> 24);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
  return 0;
}
