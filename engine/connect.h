/*
 * connect.h: the Connect protocol's streaming envelope (connectrpc.com/docs/protocol,
 * "Streaming-Request" / "Streaming-Response"), in plain C with no Lua.
 *
 *   envelope = flags (1 byte) | length (4 bytes, big-endian) | payload (length bytes)
 *   flags: 0x01 compressed payload, 0x02 end-of-stream (the trailing JSON message);
 *   every other bit is reserved and refused.
 *
 * The decoder is incremental: feed it the bytes as they arrive, cut anywhere (one byte
 * at a time, half a header, three frames at once); it calls back once per complete frame
 * and buffers at most one partial frame, whose length is checked against a limit before
 * a byte of its payload is stored. After a failure, or after an end-of-stream frame
 * followed by more bytes, the decoder stays failed.
 */
#ifndef CSENG_CONNECT_H
#define CSENG_CONNECT_H

#include <stddef.h>
#include <stdint.h>

#define CONNECT_HEADER_LEN 5
#define CONNECT_FLAG_COMPRESSED 0x01u
#define CONNECT_FLAG_END_STREAM 0x02u
#define CONNECT_FLAGS_KNOWN (CONNECT_FLAG_COMPRESSED | CONNECT_FLAG_END_STREAM)
#define CONNECT_MAX_FRAME_DEFAULT (16u << 20)

enum {
  CONNECT_OK = 0,
  CONNECT_ETOOBIG = -1,    /* a frame's declared length is over the limit */
  CONNECT_EFLAGS = -2,     /* reserved flag bits set */
  CONNECT_EAFTEREND = -3,  /* bytes after the end-of-stream frame */
  CONNECT_ETRUNCATED = -4, /* the stream ended inside a frame (finish) */
  CONNECT_ENOMEM = -5,
  CONNECT_ESTOPPED = -6 /* the frame callback asked to stop */
};

/* Called once per complete frame; data is valid only during the call. Return 0 to go
 * on, anything else to stop (feed then returns CONNECT_ESTOPPED). */
typedef int (*connect_frame_fn)(void *ud, unsigned flags, const uint8_t *data, size_t len);

typedef struct {
  uint8_t hdr[CONNECT_HEADER_LEN];
  size_t hdr_len; /* header bytes of the current frame seen so far */
  uint8_t *buf;   /* payload of the current frame, when it came in pieces */
  size_t buf_len, buf_cap;
  size_t need; /* payload length of the current frame (once its header is complete) */
  size_t max_frame;
  size_t frames;      /* frames delivered */
  uint64_t offset;    /* bytes consumed, for error messages */
  int ended;          /* an end-of-stream frame was delivered */
  int error;          /* sticky CONNECT_E* code, 0 while healthy */
  unsigned bad_flags; /* for the EFLAGS message */
  uint64_t bad_len;   /* for the ETOOBIG message */
} connect_decoder;

/* max_frame 0 means CONNECT_MAX_FRAME_DEFAULT. */
void connect_decoder_init(connect_decoder *d, size_t max_frame);
void connect_decoder_free(connect_decoder *d);

/* Consume n bytes. Returns CONNECT_OK or a negative CONNECT_E* code (sticky). */
int connect_decoder_feed(connect_decoder *d, const uint8_t *p, size_t n, connect_frame_fn fn, void *ud);

/* At the end of the stream: CONNECT_OK at a frame boundary, else CONNECT_ETRUNCATED
 * (or the sticky error). */
int connect_decoder_finish(connect_decoder *d);

/* A one-line description of d's current error into out (always NUL-terminated). */
void connect_decoder_message(const connect_decoder *d, char *out, size_t outlen);

/* Write the 5-byte header for a payload of len bytes. Returns 0, or -1 when len does not
 * fit in 32 bits or flags has bits outside 0..255. */
int connect_header(uint8_t out[CONNECT_HEADER_LEN], unsigned flags, uint64_t len);

const char *connect_strerror(int code);

#endif
