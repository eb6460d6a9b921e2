/* rxstamp_test.c: engine/rxstamp.h's unit reads over real loopback TCP. recv_stamped_unit reads
 * up to the end of the TLS record (or its header) being read, a record's body with the next
 * header in one recvmmsg; what it returns must be the stream as sent, no byte lost, doubled or
 * moved, and a read that took all it asked for must end where a header or a body ends. Two
 * cases: records sent apart and read afterwards (the calls a record takes), and a writer thread
 * sending records in random pieces while the reader reads as they come (the second message of a
 * call finding bytes the first did not: the body's rest moved up). Prints "N passed, N failed". */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../engine/rxstamp.h"
#include "check.h"

static void tcp_pair(int *w, int *r) {
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
      getsockname(l, (struct sockaddr *)&a, &al)) {
    perror("listen");
    exit(2);
  }
  *w = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*w, (struct sockaddr *)&a, sizeof a) || (*r = accept(l, NULL, NULL)) < 0) {
    perror("connect");
    exit(2);
  }
  close(l);
  setsockopt(*w, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (rx_stamp_enable(*r)) {
    perror("SO_TIMESTAMPNS");
    exit(2);
  }
}

/* A stream of records: a 5-byte header (type, version, the length), then the body's bytes. */
static size_t make_records(unsigned char *out, size_t cap, int count, unsigned seed, size_t maxbody) {
  size_t n = 0;
  for (int i = 0; i < count; i++) {
    size_t len = (size_t)(rand_r(&seed) % (maxbody + 1));
    if (i % 7 == 3) len = 0; /* an empty body now and then */
    if (n + 5 + len > cap) break;
    out[n++] = 23;
    out[n++] = 3;
    out[n++] = 3;
    out[n++] = (unsigned char)(len >> 8);
    out[n++] = (unsigned char)len;
    for (size_t j = 0; j < len; j++) out[n++] = (unsigned char)rand_r(&seed);
  }
  return n;
}

/* What reading a stream showed: the calls it took, reads that took all they asked for yet ended
 * inside a header, reads of more than they asked for, reads without a stamp, and a failed read. */
struct seen {
  int calls, bad_ends, over, unstamped;
  char failed[160];
};

/* Read from r until want bytes came, appending every call's bytes to got. */
static struct seen read_all(int r, unsigned char *got, size_t want) {
  static char buf[70000];
  struct seen s;
  rx_units u;
  size_t have = 0;
  memset(&s, 0, sizeof s);
  memset(&u, 0, sizeof u);
  while (have < want) {
    uint64_t at;
    size_t asked;
    ssize_t n = recv_stamped_unit(r, &u, 5, buf, sizeof buf, &at, &asked);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0 || have + (size_t)n > want) {
      snprintf(s.failed, sizeof s.failed, "read: %zd at %zu of %zu (%s)", n, have, want,
               n < 0 ? strerror(errno) : "end or too much");
      return s;
    }
    s.calls++;
    if ((size_t)n > asked) s.over++;
    if (at == 0) s.unstamped++;
    if ((size_t)n == asked && u.have != 0)
      s.bad_ends++; /* all it asked for: it ends where a unit part ends */
    memcpy(got + have, buf, (size_t)n);
    have += (size_t)n;
  }
  return s;
}

static void check_seen(const char *what, struct seen s, const unsigned char *sent, const unsigned char *got,
                       size_t n) {
  CHECK(!s.failed[0], "%s: %s", what, s.failed);
  CHECK(!s.failed[0] && memcmp(sent, got, n) == 0, "%s: the bytes read differ from those sent", what);
  CHECK(s.bad_ends == 0 && s.over == 0, "%s: %d reads ended inside a header, %d took more than asked", what,
        s.bad_ends, s.over);
  CHECK(s.unstamped == 0, "%s: %d reads without a receive stamp", what, s.unstamped);
}

struct writer {
  int fd;
  const unsigned char *p;
  size_t n;
  unsigned seed;
};

static void *write_pieces(void *arg) {
  struct writer *w = arg;
  size_t off = 0;
  while (off < w->n) {
    size_t k = 1 + (size_t)(rand_r(&w->seed) % 64);
    if (k > w->n - off) k = w->n - off;
    ssize_t m = write(w->fd, w->p + off, k);
    if (m <= 0) break;
    off += (size_t)m;
    if (rand_r(&w->seed) % 4 == 0) usleep(rand_r(&w->seed) % 50);
  }
  return NULL;
}

int main(void) {
  static unsigned char sent[1 << 20], got[1 << 20];
  int w, r;

  /* records written apart, read once all are there: the first read is a header, then each read
   * is a body and the next header, the last body with nothing behind it */
  {
    size_t lens[3] = {10, 300, 7}, n = 0;
    tcp_pair(&w, &r);
    for (int i = 0; i < 3; i++) {
      unsigned char rec[512];
      rec[0] = 23, rec[1] = 3, rec[2] = 3, rec[3] = (unsigned char)(lens[i] >> 8),
      rec[4] = (unsigned char)lens[i];
      for (size_t j = 0; j < lens[i]; j++) rec[5 + j] = (unsigned char)(i * 31 + j);
      CHECK(write(w, rec, 5 + lens[i]) == (ssize_t)(5 + lens[i]), "write");
      memcpy(sent + n, rec, 5 + lens[i]);
      n += 5 + lens[i];
      usleep(2000);
    }
    struct seen s = read_all(r, got, n);
    check_seen("apart", s, sent, got, n);
    CHECK(s.calls == 4, "%d calls for three records waiting (a header, then a body and the next header each)",
          s.calls);
    close(w);
    close(r);
  }

  /* a writer sending records in random pieces while the reader reads as they come */
  for (unsigned seed = 1; seed <= 4; seed++) {
    struct writer wr;
    pthread_t t;
    size_t n = make_records(sent, sizeof sent, 3000, seed, seed == 4 ? 20000 : 200);
    tcp_pair(&w, &r);
    wr.fd = w, wr.p = sent, wr.n = n, wr.seed = seed * 7919;
    pthread_create(&t, NULL, write_pieces, &wr);
    struct seen s = read_all(r, got, n);
    char what[32];
    pthread_join(t, NULL);
    snprintf(what, sizeof what, "pieces, seed %u", seed);
    check_seen(what, s, sent, got, n);
    close(w);
    close(r);
  }

  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
