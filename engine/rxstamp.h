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

#endif
