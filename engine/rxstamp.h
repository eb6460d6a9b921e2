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

/* The receive stamp a read's control data carries (CLOCK_MONOTONIC ns), or 0 when there is none
 * or it is not credible (after now: the wall clock was stepped between the two readings). */
static inline uint64_t rx_cmsg_stamp(struct msghdr *m) {
  struct cmsghdr *cm;
  for (cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
      struct timespec ts, r, mo;
      int64_t t, now;
      memcpy(&ts, CMSG_DATA(cm), sizeof ts);
      clock_gettime(CLOCK_REALTIME, &r);
      clock_gettime(CLOCK_MONOTONIC, &mo);
      now = (int64_t)mo.tv_sec * 1000000000 + mo.tv_nsec;
      t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec -
          (((int64_t)r.tv_sec - (int64_t)mo.tv_sec) * 1000000000 + (r.tv_nsec - mo.tv_nsec));
      return t > 0 && t <= now ? (uint64_t)t : 0;
    }
  return 0;
}

typedef union {
  char b[CMSG_SPACE(sizeof(struct timespec))];
  struct cmsghdr align;
} rx_ctl;

/* recvmsg(fd, buf, len, MSG_DONTWAIT), EINTR retried: the byte count, 0 at end of stream, or -1
 * with errno. *at: the arrival of the bytes read (CLOCK_MONOTONIC ns), or 0 (rx_cmsg_stamp). */
static inline ssize_t recv_stamped(int fd, void *buf, size_t len, uint64_t *at) {
  rx_ctl ctl;
  struct iovec v = {buf, len};
  struct msghdr m;
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
  *at = rx_cmsg_stamp(&m);
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
      u->left = hdr == 5 ? (unsigned)u->h[3] << 8 | u->h[4]
                         : (unsigned)u->h[0] << 16 | (unsigned)u->h[1] << 8 | u->h[2];
      u->have = 0;
    }
  }
}

/* The bytes up to the end of the unit being read (its header's, or its body's), at most max. */
static inline size_t rx_units_need(const rx_units *u, unsigned hdr, size_t max) {
  size_t need = u->left ? u->left : hdr - u->have;
  return need < max ? need : max;
}

/* One read that ends where the unit being read ends (rx_units_need), into buf (cap bytes), its
 * bytes followed (rx_units_follow): the byte count, 0 at end of stream, or -1 with errno; *asked:
 * what it asked for (fewer came: the socket had no more). Where the rest is a TLS record's body
 * (hdr 5), the next record's header is read with it in the same system call (recvmmsg, two
 * messages, each with its own stamp): *at is the body's stamp, the record's arrival, since a
 * header completes nothing; so a record read from a socket where records wait costs one call,
 * not two. (A frame's header can end a frame: HTTP/2 frames, hdr 9, are read one part a call.) */
static inline ssize_t recv_stamped_unit(int fd, rx_units *u, unsigned hdr, char *buf, size_t cap,
                                        uint64_t *at, size_t *asked) {
  rx_ctl ctl[2];
  struct iovec v[2];
  struct mmsghdr mm[2];
  size_t need = rx_units_need(u, hdr, cap), n0, n1 = 0;
  unsigned two = hdr == 5 && u->left && need + 5 <= cap;
  int k;
  *at = 0;
  *asked = need;
  if (!two) {
    ssize_t n = recv_stamped(fd, buf, need, at);
    if (n > 0) rx_units_follow(u, hdr, (const unsigned char *)buf, (size_t)n);
    return n;
  }
  memset(mm, 0, sizeof mm);
  v[0].iov_base = buf;
  v[0].iov_len = need;
  v[1].iov_base = buf + need;
  v[1].iov_len = 5;
  for (int i = 0; i < 2; i++) {
    mm[i].msg_hdr.msg_iov = &v[i];
    mm[i].msg_hdr.msg_iovlen = 1;
    mm[i].msg_hdr.msg_control = ctl[i].b;
    mm[i].msg_hdr.msg_controllen = sizeof ctl[i].b;
  }
  do k = recvmmsg(fd, mm, 2, MSG_DONTWAIT, NULL);
  while (k < 0 && errno == EINTR);
  if (k <= 0) return k < 0 ? -1 : 0;
  *asked = need + 5;
  n0 = mm[0].msg_len;
  if (n0 == 0) return 0;
  *at = rx_cmsg_stamp(&mm[0].msg_hdr);
  if (k == 2 && (n1 = mm[1].msg_len) > 0 && n0 < need) {
    /* more came between the two reads than the first found: the body's rest, read second, is
     * what completes the record, and its stamp the record's arrival */
    memmove(buf + n0, buf + need, n1);
    *at = rx_cmsg_stamp(&mm[1].msg_hdr);
  }
  rx_units_follow(u, hdr, (const unsigned char *)buf, n0 + n1);
  return (ssize_t)(n0 + n1);
}

#endif
