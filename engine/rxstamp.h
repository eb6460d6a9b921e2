/*
 * rxstamp.h: one read of a stream socket with the kernel's receive time of what it read.
 *
 * The socket has SO_TIMESTAMPNS (rx_stamp_enable); recv_stamped reads with recvmsg and returns
 * the kernel's stamp of the last bytes read (for TCP, the newest segment the read took), moved
 * from CLOCK_REALTIME to CLOCK_MONOTONIC (uv_hrtime's clock, cseng's clock.now()). Used by the
 * native HTTP/1.1 client (engine/h1.c: a response ends when it arrived, not when the loop read
 * it) and by the bench's fake provider (bench/fake_provider.c: a hold starts when the request
 * arrived), each of which reads in libuv's alloc callback (see h1.c).
 */
#ifndef CSENG_RXSTAMP_H
#define CSENG_RXSTAMP_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* Ask the kernel to stamp what arrives on fd; 0, or -1 (then reads are not stamped). */
static inline int rx_stamp_enable(int fd) {
  int one = 1;
  return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

/* recvmsg(fd, buf, len, MSG_DONTWAIT), EINTR retried: the byte count, 0 at end of stream, or -1
 * with errno. *at: the arrival of the bytes read (CLOCK_MONOTONIC ns), or 0 when there is no
 * stamp or it is not credible (after now: the wall clock was stepped between the two readings). */
static inline ssize_t recv_stamped(int fd, void *buf, size_t len, uint64_t *at) {
  union {
    char b[CMSG_SPACE(sizeof(struct timespec))];
    struct cmsghdr align;
  } ctl;
  struct iovec v = {buf, len};
  struct msghdr m;
  struct cmsghdr *cm;
  ssize_t n;
  *at = 0;
  memset(&m, 0, sizeof m);
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = ctl.b;
  m.msg_controllen = sizeof ctl.b;
  do n = recvmsg(fd, &m, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return n;
  for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
      struct timespec ts, r, mo;
      int64_t t, now;
      memcpy(&ts, CMSG_DATA(cm), sizeof ts);
      clock_gettime(CLOCK_REALTIME, &r);
      clock_gettime(CLOCK_MONOTONIC, &mo);
      now = (int64_t)mo.tv_sec * 1000000000 + mo.tv_nsec;
      t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec -
          (((int64_t)r.tv_sec - (int64_t)mo.tv_sec) * 1000000000 + (r.tv_nsec - mo.tv_nsec));
      if (t > 0 && t <= now) *at = (uint64_t)t;
      break;
    }
  return n;
}

/* What the other end sends, followed as units: each a header that gives its length, then that
 * many bytes. TLS records (a 5-byte header, the length in its last two bytes) or HTTP/2 frames (a
 * 9-byte header, the length in its first three); hdr is the header's length, 5 or 9. A read is
 * stamped with the newest segment it took, so where several answers (or requests) may wait in a
 * socket together, a read that ends where a unit ends (rx_units_need) keeps each unit's arrival
 * its own, wherever the kernel kept the segments apart. Start zeroed; left may start at the bytes
 * to pass over before the first unit (a cleartext HTTP/2 client's 24-byte preface). */
typedef struct {
  unsigned char h[9]; /* the header being read */
  unsigned have;      /* its bytes so far */
  unsigned left;      /* what is left of the unit's body */
} rx_units;

/* Follow n bytes read. */
static inline void rx_units_follow(rx_units *u, unsigned hdr, const unsigned char *p, size_t n) {
  while (n > 0) {
    if (u->left) {
      size_t t = n < u->left ? n : u->left;
      u->left -= (unsigned)t;
      p += t;
      n -= t;
      continue;
    }
    u->h[u->have++] = *p++;
    n--;
    if (u->have == hdr) {
      u->left = hdr == 5 ? (unsigned)u->h[3] << 8 | u->h[4] : (unsigned)u->h[0] << 16 | (unsigned)u->h[1] << 8 | u->h[2];
      u->have = 0;
    }
  }
}

/* The bytes up to the end of the unit being read (its header's, or its body's), at most max. */
static inline size_t rx_units_need(const rx_units *u, unsigned hdr, size_t max) {
  size_t need = u->left ? u->left : hdr - u->have;
  return need < max ? need : max;
}

#endif
