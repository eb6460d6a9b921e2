/* microvm-agent: cseng's exec agent inside an AWS Lambda MicroVM (or anywhere else).
 *
 * A small HTTP/1.1 server (one forked child per connection, Connection: close) on the image's
 * hooks port. Static, libc only; built for the build machine and for aarch64 from this source
 * and agent_parse.c (the parsers of untrusted bytes, fuzzed by fuzz/agent_parse_fuzz.c).
 *
 *   microvm-agent [--port N] [--listen ADDR] [--token T] [--token-file PATH] [--port-file PATH]
 *                 [--hook NAME=PATH]... [--max-body BYTES] [--max-conns N]
 *                 [--header-timeout S] [--body-timeout S] [--quiet]
 *
 * Environment (flags win): CSENG_AGENT_PORT, CSENG_AGENT_LISTEN, CSENG_AGENT_TOKEN (preferred
 * over --token, which shows in ps; removed from the environment the commands get),
 * CSENG_AGENT_TOKEN_FILE, CSENG_AGENT_HOOK_<NAME> (RUN, RESUME, SUSPEND, TERMINATE, READY,
 * VALIDATE), CSENG_AGENT_MAX_BODY.
 *
 * Endpoints (docs/providers/aws_microvm.md, "SigV4 and the agent"):
 *   hooks  (any method; no token) /run /resume /suspend /terminate /ready /validate -> 200 JSON;
 *          /run's body (RunMicrovm's runHookPayload) may be {"token": "..."}: the token, when
 *          none is set yet (no --token / CSENG_AGENT_TOKEN, no token file), is stored in the
 *          token file and required from then on.
 *   every other request needs the header X-Cseng-Agent-Token: <token>, else 401 (logged):
 *   GET  /health                      -> {"ok":true,"version":...,"arch":...}
 *   POST /exec   JSON {argv|cmd, shell, cwd, env, timeout, stdin, tail_bytes, user}
 *                -> {code, signal, timed_out, stdout, stderr, stdout_bytes, stderr_bytes,
 *                    stdout_dropped, stderr_dropped, elapsed, pid[, exec_error]}
 *   PUT  /files?dir=/abs/dir   body: a tar archive, extracted below dir -> {ok, dir, entries, bytes}
 *   GET  /files?path=/abs/path -> the file (application/octet-stream), or a tar of the directory
 *                                 (application/x-tar); X-Cseng-File-Type: file|directory
 */
#include "agent_parse.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AGENT_VERSION "1"
#define TOKEN_HEADER "X-Cseng-Agent-Token"
#define MAX_HEAD (16 * 1024)
#define MAX_EXEC_BODY (16 * 1024 * 1024)
#define MAX_HOOK_BODY (64 * 1024)
#define DEFAULT_TAIL (1024 * 1024)
#define MAX_TAIL (64 * 1024 * 1024)

#if defined(__aarch64__)
#define ARCH "aarch64"
#elif defined(__x86_64__)
#define ARCH "x86_64"
#else
#define ARCH "unknown"
#endif

extern char **environ;

static struct {
  int port;
  const char *listen;
  char *token; /* from --token / CSENG_AGENT_TOKEN */
  char token_file[4096];
  const char *port_file;
  const char *hooks[6];
  unsigned long long max_body;
  int max_conns;
  int header_timeout_ms, body_timeout_ms;
  int quiet;
} cfg;

static const char *HOOK_NAMES[6] = {"run", "resume", "suspend", "terminate", "ready", "validate"};
static char peer[64] = "?";

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  if (cfg.quiet) return;
  char ts[32];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s microvm-agent[%d]: %s\n", ts, (int)getpid(), line);
}

/* an error message into err (truncated when long) */
static void errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ I/O */

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      if (poll(&pf, 1, cfg.body_timeout_ms) <= 0) return -1;
      continue;
    }
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static const char *reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

static void respond(int fd, int status, const char *ctype, const char *extra, const char *body, size_t n) {
  char head[512];
  int hl =
      snprintf(head, sizeof head,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
               status, reason(status), ctype, n, extra ? extra : "");
  write_all(fd, head, (size_t)hl);
  if (n) write_all(fd, body, n);
}

static void respond_json(int fd, int status, struct buf *b) {
  respond(fd, status, "application/json", NULL, b->p ? b->p : "", b->len);
}

static void respond_error(int fd, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void respond_error(int fd, int status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct buf b = {0};
  buf_str(&b, "{\"error\":");
  json_escape(&b, msg, strlen(msg));
  buf_printf(&b, ",\"status\":%d}", status);
  respond_json(fd, status, &b);
  buf_free(&b);
}

/* ------------------------------------------------------------------ token */

static char *read_token_file(void) {
  if (!cfg.token_file[0]) return NULL;
  int fd = open(cfg.token_file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return NULL;
  char t[1025];
  ssize_t n = read(fd, t, sizeof t - 1);
  close(fd);
  if (n <= 0) return NULL;
  t[n] = 0;
  while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r')) t[--n] = 0;
  return n > 0 ? strdup(t) : NULL;
}

static char *current_token(void) {
  if (cfg.token && cfg.token[0]) return strdup(cfg.token);
  return read_token_file();
}

static int token_equal(const char *a, size_t an, const char *b) {
  size_t bn = strlen(b);
  unsigned char d = an != bn;
  for (size_t i = 0; i < an; i++) d |= (unsigned char)(a[i] ^ b[i % (bn ? bn : 1)]);
  return d == 0;
}

/* ------------------------------------------------------------------ request body */

struct conn {
  int fd;
  char head[MAX_HEAD];
  size_t have; /* bytes in head */
  long head_len;
  struct ap_request req;
};

/* Read the body (Content-Length or chunked) into out, at most limit bytes. Returns 0, or an
 * HTTP status on failure (already answered). */
static int read_body(struct conn *c, struct buf *out, unsigned long long limit) {
  struct ap_request *r = &c->req;
  const char *extra = c->head + c->head_len;
  size_t extra_n = c->have - (size_t)c->head_len;
  if (!r->chunked && r->content_length < 0) {
    return 0; /* no body */
  }
  if (!r->chunked && (unsigned long long)r->content_length > limit) {
    respond_error(c->fd, 413, "body of %lld bytes is over the limit of %llu", r->content_length, limit);
    return 413;
  }
  if (r->expect_continue) write_all(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25);
  struct ap_chunked ch = {0};
  char tmp[65536];
  int done = 0;
  const char *in = extra;
  size_t in_n = extra_n;
  for (;;) {
    if (in_n) {
      if (r->chunked) {
        size_t used = 0;
        while (in_n) {
          size_t o = 0, k = 0;
          if (buf_reserve(out, in_n)) {
            respond_error(c->fd, 500, "out of memory");
            return 500;
          }
          int rc = ap_chunked_feed(&ch, in, in_n, out->p + out->len, &o, &k);
          out->len += o;
          in += k;
          in_n -= k;
          used += k;
          if (rc < 0) {
            respond_error(c->fd, 400, "malformed chunked body");
            return 400;
          }
          if (rc == 1) {
            done = 1;
            break;
          }
          if (k == 0) break;
        }
        (void)used;
      } else {
        size_t want = (size_t)r->content_length - out->len;
        if (in_n > want) in_n = want;
        if (buf_add(out, in, in_n)) {
          respond_error(c->fd, 500, "out of memory");
          return 500;
        }
        in_n = 0;
        if (out->len == (size_t)r->content_length) done = 1;
      }
      if (out->len > limit) {
        respond_error(c->fd, 413, "body is over the limit of %llu bytes", limit);
        return 413;
      }
    }
    if (done || (!r->chunked && out->len == (size_t)r->content_length)) break;
    struct pollfd pf = {c->fd, POLLIN, 0};
    int pr = poll(&pf, 1, cfg.body_timeout_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      respond_error(c->fd, 408, "body not received within %d ms of the last bytes", cfg.body_timeout_ms);
      return 408;
    }
    ssize_t n = read(c->fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      logf_("%s: connection closed in the middle of the body", peer);
      return 400;
    }
    in = tmp;
    in_n = (size_t)n;
  }
  if (buf_reserve(out, 0) == 0 && out->p) out->p[out->len] = 0;
  return 0;
}

/* ------------------------------------------------------------------ exec */

struct tail {
  char *p;
  size_t cap, start, len; /* ring buffer */
  unsigned long long total;
};

static void tail_add(struct tail *t, const char *s, size_t n) {
  t->total += n;
  if (!t->cap) return;
  if (n >= t->cap) {
    memcpy(t->p, s + n - t->cap, t->cap);
    t->start = 0;
    t->len = t->cap;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    size_t pos = (t->start + t->len) % t->cap;
    t->p[pos] = s[i];
    if (t->len < t->cap) t->len++;
    else t->start = (t->start + 1) % t->cap;
  }
}

static void tail_flat(struct tail *t, struct buf *out) {
  size_t first = t->cap - t->start;
  if (first > t->len) first = t->len;
  buf_add(out, t->p + t->start, first);
  buf_add(out, t->p, t->len - first);
}

static const char *signame(int sig) {
  static char other[16];
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: snprintf(other, sizeof other, "SIG%d", sig); return other;
  }
}

/* uid, gid, home of a user from /etc/passwd (no NSS in a static binary) */
static int lookup_user(const char *name, uid_t *uid, gid_t *gid, char *home, size_t homelen) {
  FILE *f = fopen("/etc/passwd", "re");
  if (!f) return -1;
  char line[1024];
  int found = -1;
  while (fgets(line, sizeof line, f)) {
    char *fields[7];
    int n = 0;
    char *s = line;
    fields[n++] = s;
    while (*s && n < 7) {
      if (*s == ':') {
        *s = 0;
        fields[n++] = s + 1;
      }
      s++;
    }
    if (n < 7 || strcmp(fields[0], name)) continue;
    fields[6][strcspn(fields[6], "\n")] = 0;
    *uid = (uid_t)strtoul(fields[2], NULL, 10);
    *gid = (gid_t)strtoul(fields[3], NULL, 10);
    snprintf(home, homelen, "%s", fields[5]);
    found = 0;
    break;
  }
  fclose(f);
  return found;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* SIGCHLD wakes the exec loop's poll through a self-pipe */
static int chld_pipe[2] = {-1, -1};
static void on_exec_chld(int s) {
  (void)s;
  int e = errno;
  if (write(chld_pipe[1], "c", 1) < 0) { /* full: a wake-up is pending anyway */
  }
  errno = e;
}

static void do_exec(int fd, const char *body, size_t n) {
  char err[256];
  struct jv *j = json_parse(body, n, err, sizeof err);
  if (!j) {
    respond_error(fd, 400, "exec: %s", err);
    return;
  }
  if (j->type != J_OBJ) {
    json_free(j);
    respond_error(fd, 400, "exec: the body must be a JSON object");
    return;
  }
  const struct jv *argv_v = json_get(j, "argv"), *cmd_v = json_get(j, "cmd"), *shell_v = json_get(j, "shell");
  const struct jv *cwd_v = json_get(j, "cwd"), *env_v = json_get(j, "env"),
                  *timeout_v = json_get(j, "timeout");
  const struct jv *stdin_v = json_get(j, "stdin"), *tail_v = json_get(j, "tail_bytes"),
                  *user_v = json_get(j, "user");
  char **argv = NULL;
  const char *bad = NULL;
  if ((argv_v != NULL) == (cmd_v != NULL)) bad = "give argv (a list of strings) or cmd (a string), not both";
  else if (argv_v && (argv_v->type != J_ARR || argv_v->len == 0))
    bad = "argv must be a non-empty list of strings";
  else if (cmd_v && cmd_v->type != J_STR) bad = "cmd must be a string";
  else if (shell_v && shell_v->type != J_STR) bad = "shell must be a string";
  else if (cwd_v && cwd_v->type != J_STR && cwd_v->type != J_NULL) bad = "cwd must be a string";
  else if (env_v && env_v->type != J_OBJ && env_v->type != J_NULL) bad = "env must be an object of strings";
  else if (timeout_v && timeout_v->type != J_NUM && timeout_v->type != J_NULL)
    bad = "timeout must be a number of seconds";
  else if (timeout_v && timeout_v->type == J_NUM && !(timeout_v->num > 0 && timeout_v->num < 1e7))
    bad = "timeout must be > 0";
  else if (stdin_v && stdin_v->type != J_STR && stdin_v->type != J_NULL) bad = "stdin must be a string";
  else if (tail_v && (tail_v->type != J_NUM || tail_v->num < 0 || tail_v->num > MAX_TAIL))
    bad = "tail_bytes must be 0 .. 67108864";
  else if (user_v && user_v->type != J_STR && user_v->type != J_NULL) bad = "user must be a string";
  if (!bad && argv_v) {
    for (size_t k = 0; k < argv_v->len; k++)
      if (argv_v->items[k].type != J_STR || memchr(argv_v->items[k].str, 0, argv_v->items[k].len))
        bad = "argv must be a list of strings without NULs";
  }
  if (!bad && env_v && env_v->type == J_OBJ) {
    for (size_t k = 0; k < env_v->len; k++)
      if (env_v->items[k].type != J_STR || !env_v->key_lens[k] || strchr(env_v->keys[k], '=') ||
          memchr(env_v->items[k].str, 0, env_v->items[k].len))
        bad = "env must map names (no '=') to strings";
  }
  if (bad) {
    json_free(j);
    respond_error(fd, 400, "exec: %s", bad);
    return;
  }
  const char *cwd = cwd_v && cwd_v->type == J_STR ? cwd_v->str : NULL;
  if (cwd) {
    struct stat st;
    if (stat(cwd, &st) != 0) {
      respond_error(fd, 400, "exec: cwd %s: %s", cwd, strerror(errno));
      json_free(j);
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      respond_error(fd, 400, "exec: cwd %s: not a directory", cwd);
      json_free(j);
      return;
    }
  }
  uid_t uid = 0;
  gid_t gid = 0;
  char home[512] = "";
  const char *user = user_v && user_v->type == J_STR ? user_v->str : NULL;
  if (user) {
    if (lookup_user(user, &uid, &gid, home, sizeof home) != 0) {
      respond_error(fd, 400, "exec: user %s is not in /etc/passwd", user);
      json_free(j);
      return;
    }
    if (geteuid() != 0 && uid != geteuid()) {
      respond_error(fd, 400, "exec: user %s: the agent does not run as root", user);
      json_free(j);
      return;
    }
  }
  if (argv_v) {
    argv = calloc(argv_v->len + 1, sizeof *argv);
    for (size_t k = 0; k < argv_v->len; k++) argv[k] = argv_v->items[k].str;
  } else {
    argv = calloc(4, sizeof *argv);
    const char *shell = shell_v ? shell_v->str : (access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh");
    argv[0] = (char *)shell;
    argv[1] = "-c";
    argv[2] = cmd_v->str;
  }
  size_t tail_cap = tail_v ? (size_t)tail_v->num : DEFAULT_TAIL;
  long long timeout_ms =
      timeout_v && timeout_v->type == J_NUM ? (long long)(timeout_v->num * 1000.0 + 0.5) : -1;
  if (timeout_ms == 0) timeout_ms = 1;
  const char *in_data = stdin_v && stdin_v->type == J_STR ? stdin_v->str : NULL;
  size_t in_len = in_data ? stdin_v->len : 0;

  int po[2], pe[2], pi[2] = {-1, -1}, px[2];
  if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(px, O_CLOEXEC) ||
      (in_data && pipe2(pi, O_CLOEXEC))) {
    respond_error(fd, 500, "exec: pipe: %s", strerror(errno));
    json_free(j);
    free(argv);
    return;
  }
  if (chld_pipe[0] < 0 && pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    respond_error(fd, 500, "exec: pipe: %s", strerror(errno));
    json_free(j);
    free(argv);
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_exec_chld;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &sa, NULL);
  long long t0 = now_ms();
  pid_t pid = fork();
  if (pid < 0) {
    respond_error(fd, 500, "exec: fork: %s", strerror(errno));
    json_free(j);
    free(argv);
    return;
  }
  if (pid == 0) {
    setsid();
    signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(in_data ? pi[0] : devnull, 0);
    dup2(po[1], 1);
    dup2(pe[1], 2);
    if (cwd && chdir(cwd) != 0) goto fail;
    if (env_v && env_v->type == J_OBJ)
      for (size_t k = 0; k < env_v->len; k++) setenv(env_v->keys[k], env_v->items[k].str, 1);
    if (user) {
      if (setgroups(1, &gid) != 0 && geteuid() == 0) goto fail;
      if (setgid(gid) != 0 || setuid(uid) != 0) goto fail;
      setenv("HOME", home, 1);
      setenv("USER", user, 1);
      setenv("LOGNAME", user, 1);
    }
    execvp(argv[0], argv);
  fail:;
    int e = errno;
    if (write(px[1], &e, sizeof e) < 0) _exit(127);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  close(px[1]);
  if (in_data) close(pi[0]);
  int child_errno = 0;
  ssize_t xr;
  do xr = read(px[0], &child_errno, sizeof child_errno);
  while (xr < 0 && errno == EINTR);
  close(px[0]);
  if (xr != (ssize_t)sizeof child_errno) child_errno = 0;

  struct tail to = {malloc(tail_cap ? tail_cap : 1), tail_cap, 0, 0, 0};
  struct tail te = {malloc(tail_cap ? tail_cap : 1), tail_cap, 0, 0, 0};
  set_nonblock(po[0]);
  set_nonblock(pe[0]);
  int in_fd = in_data ? pi[1] : -1;
  if (in_fd >= 0) set_nonblock(in_fd);
  size_t in_off = 0;
  if (in_fd >= 0 && in_len == 0) {
    close(in_fd);
    in_fd = -1;
  }
  int out_open = 1, err_open = 1, exited = 0, timed_out = 0, status = 0;
  long long linger_until = -1;
  char chunk[65536];
  for (;;) {
    if (!exited) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        exited = 1;
        linger_until = now_ms() + 200; /* background children may hold the pipes: read a little more */
      }
    }
    if (exited && ((!out_open && !err_open) || now_ms() >= linger_until)) break;
    long long now = now_ms();
    if (!exited && timeout_ms >= 0 && now - t0 >= timeout_ms && !timed_out) {
      timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    struct pollfd pf[4];
    int np = 0, io = -1, ie = -1, ii = -1;
    pf[np++] = (struct pollfd){chld_pipe[0], POLLIN, 0};
    if (out_open) {
      pf[np] = (struct pollfd){po[0], POLLIN, 0};
      io = np++;
    }
    if (err_open) {
      pf[np] = (struct pollfd){pe[0], POLLIN, 0};
      ie = np++;
    }
    if (in_fd >= 0) {
      pf[np] = (struct pollfd){in_fd, POLLOUT, 0};
      ii = np++;
    }
    int wait_ms = exited ? (int)(linger_until - now > 0 ? linger_until - now : 1) : 1000;
    if (!exited && timeout_ms >= 0 && !timed_out) {
      long long left = timeout_ms - (now - t0);
      if (left < wait_ms) wait_ms = (int)(left < 1 ? 1 : left);
    }
    int pr = poll(pf, (nfds_t)np, wait_ms);
    if (pr < 0 && errno != EINTR) break;
    if (pr <= 0) continue;
    if (pf[0].revents) {
      char drain[64];
      while (read(chld_pipe[0], drain, sizeof drain) > 0) {
      }
    }
    if (io >= 0 && pf[io].revents) {
      ssize_t r = read(po[0], chunk, sizeof chunk);
      if (r > 0) tail_add(&to, chunk, (size_t)r);
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) out_open = 0;
    }
    if (ie >= 0 && pf[ie].revents) {
      ssize_t r = read(pe[0], chunk, sizeof chunk);
      if (r > 0) tail_add(&te, chunk, (size_t)r);
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) err_open = 0;
    }
    if (ii >= 0 && pf[ii].revents) {
      ssize_t w = write(in_fd, in_data + in_off, in_len - in_off);
      if (w > 0) in_off += (size_t)w;
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == in_len) {
        close(in_fd);
        in_fd = -1;
      }
    }
  }
  if (!exited) waitpid(pid, &status, 0);
  if (in_fd >= 0) close(in_fd);
  close(po[0]);
  close(pe[0]);
  long long elapsed = now_ms() - t0;
  int code, sig = 0;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) {
    sig = WTERMSIG(status);
    code = 128 + sig;
  } else code = -1;
  struct buf b = {0}, s = {0};
  buf_printf(&b, "{\"code\":%d,\"signal\":", code);
  if (sig) {
    buf_str(&b, "\"");
    buf_str(&b, signame(sig));
    buf_str(&b, "\"");
  } else buf_str(&b, "null");
  buf_printf(&b, ",\"timed_out\":%s,\"stdout\":", timed_out ? "true" : "false");
  tail_flat(&to, &s);
  json_escape(&b, s.p ? s.p : "", s.len);
  s.len = 0;
  buf_str(&b, ",\"stderr\":");
  tail_flat(&te, &s);
  json_escape(&b, s.p ? s.p : "", s.len);
  buf_printf(&b,
             ",\"stdout_bytes\":%llu,\"stderr_bytes\":%llu,\"stdout_dropped\":%llu,\"stderr_dropped\":%llu",
             to.total, te.total, to.total - to.len, te.total - te.len);
  buf_printf(&b, ",\"elapsed\":%.3f,\"pid\":%d", (double)elapsed / 1000.0, (int)pid);
  if (child_errno) {
    char m[512];
    snprintf(m, sizeof m, "%s: %s", argv[0], strerror(child_errno));
    buf_str(&b, ",\"exec_error\":");
    json_escape(&b, m, strlen(m));
  }
  buf_str(&b, "}");
  logf_("%s: exec pid %d code %d%s%s elapsed %.3fs", peer, (int)pid, code, sig ? " " : "",
        sig ? signame(sig) : "", (double)elapsed / 1000.0);
  respond_json(fd, 200, &b);
  buf_free(&b);
  buf_free(&s);
  free(to.p);
  free(te.p);
  free(argv);
  json_free(j);
}

/* ------------------------------------------------------------------ put files */

/* open (creating) every directory of rel's parent below root, never through a symlink;
 * returns the parent's fd and the last component in *last */
static int open_parent(int root, char *rel, char **last, char *err, size_t errlen) {
  int dfd = dup(root);
  char *p = rel;
  for (;;) {
    char *slash = strchr(p, '/');
    if (!slash) break;
    *slash = 0;
    if (mkdirat(dfd, p, 0755) != 0 && errno != EEXIST) {
      errf(err, errlen, "mkdir %s: %s", rel, strerror(errno));
      close(dfd);
      *slash = '/';
      return -1;
    }
    int nfd = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0) {
      errf(err, errlen, "%s: %s", rel,
           errno == ELOOP || errno == ENOTDIR ? "a parent is not a directory (or is a symlink)"
                                              : strerror(errno));
      close(dfd);
      *slash = '/';
      return -1;
    }
    close(dfd);
    dfd = nfd;
    *slash = '/';
    p = slash + 1;
  }
  *last = p;
  return dfd;
}

/* Is rel (a clean relative name) at or below one of the symlink names seen so far? */
static int below_symlink(char **links, size_t nl, const char *rel) {
  for (size_t k = 0; k < nl; k++) {
    size_t l = strlen(links[k]);
    if (!strncmp(rel, links[k], l) && rel[l] == '/') return 1;
  }
  return 0;
}

/* The check pass: every header parses, every name is safe, every type supported, no member
 * goes through a symlink of the archive; nothing is written. */
static int check_archive(const char *data, size_t n, char *err, size_t errlen) {
  struct tar_reader t = {data, n, 0};
  static struct tar_entry e;
  char rel[TAR_NAME_MAX + 1];
  char **links = NULL;
  size_t nl = 0, cap = 0;
  int rc = 0;
  for (;;) {
    int r = tar_next(&t, &e, err, errlen);
    if (r == 0) break;
    if (r < 0) {
      rc = -1;
      break;
    }
    if (ap_safe_relpath(e.name, rel, sizeof rel) != 0) {
      errf(err, errlen, "refused archive member %s: absolute or with '..'", e.name);
      rc = -1;
      break;
    }
    if (e.type != '0' && e.type != '5' && e.type != '2') {
      errf(err, errlen,
           "refused archive member %s: entry type '%c' is not supported (files, directories, symlinks only)",
           e.name, e.type);
      rc = -1;
      break;
    }
    if (below_symlink(links, nl, rel)) {
      errf(err, errlen, "refused archive member %s: it goes through a symlink of the archive", e.name);
      rc = -1;
      break;
    }
    if (e.type == '2' && rel[0]) {
      if (nl == cap) {
        size_t nc = cap ? cap * 2 : 16;
        char **nlinks = realloc(links, nc * sizeof *links);
        if (!nlinks) {
          errf(err, errlen, "out of memory");
          rc = -1;
          break;
        }
        links = nlinks;
        cap = nc;
      }
      if (!(links[nl] = strdup(rel))) {
        errf(err, errlen, "out of memory");
        rc = -1;
        break;
      }
      nl++;
    }
  }
  for (size_t k = 0; k < nl; k++) free(links[k]);
  free(links);
  return rc;
}

static int extract(const char *dir, const char *data, size_t n, int *entries, char *err, size_t errlen) {
  if (check_archive(data, n, err, errlen) != 0) return -1;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *s = tmp + 1; *s; s++) {
    if (*s == '/') {
      *s = 0;
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        errf(err, errlen, "mkdir %s: %s", tmp, strerror(errno));
        return -1;
      }
      *s = '/';
    }
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
    errf(err, errlen, "mkdir %s: %s", tmp, strerror(errno));
    return -1;
  }
  int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    errf(err, errlen, "%s: %s", dir, strerror(errno));
    return -1;
  }
  struct tar_reader t = {data, n, 0};
  static struct tar_entry e;
  char rel[TAR_NAME_MAX + 1];
  int rc = 0;
  for (;;) {
    int r = tar_next(&t, &e, err, errlen);
    if (r == 0) break;
    if (r < 0) {
      rc = -1;
      break;
    }
    if (ap_safe_relpath(e.name, rel, sizeof rel) != 0) {
      errf(err, errlen, "refused archive member %s: absolute or with '..'", e.name);
      rc = -1;
      break;
    }
    if (!rel[0]) continue; /* the directory itself */
    char *last;
    int dfd = open_parent(root, rel, &last, err, errlen);
    if (dfd < 0) {
      rc = -1;
      break;
    }
    if (e.type == '5') {
      if (mkdirat(dfd, last, 0755) != 0 && errno != EEXIST) {
        errf(err, errlen, "mkdir %s: %s", rel, strerror(errno));
        rc = -1;
      } else {
        int sfd = openat(dfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) {
          errf(err, errlen, "%s: not a directory (or a symlink)", rel);
          rc = -1;
        } else {
          fchmod(sfd, e.mode ? e.mode : 0755);
          close(sfd);
        }
      }
    } else if (e.type == '0') {
      int ffd = openat(dfd, last, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (ffd < 0 && errno == ELOOP) { /* an existing symlink: replace it, never write through it */
        unlinkat(dfd, last, 0);
        ffd = openat(dfd, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      }
      if (ffd < 0) {
        errf(err, errlen, "create %s: %s", rel, strerror(errno));
        rc = -1;
      } else {
        if (write_all(ffd, e.data, (size_t)e.size) != 0) {
          errf(err, errlen, "write %s: %s", rel, strerror(errno));
          rc = -1;
        }
        fchmod(ffd, e.mode);
        struct timespec ts[2] = {{e.mtime, 0}, {e.mtime, 0}};
        futimens(ffd, ts);
        close(ffd);
      }
    } else if (e.type == '2') {
      unlinkat(dfd, last, 0);
      if (symlinkat(e.linkname, dfd, last) != 0) {
        errf(err, errlen, "symlink %s: %s", rel, strerror(errno));
        rc = -1;
      }
    } else {
      errf(err, errlen,
           "archive member %s: entry type '%c' is not supported (files, directories, symlinks only)", rel,
           e.type);
      rc = -1;
    }
    close(dfd);
    if (rc) break;
    (*entries)++;
  }
  close(root);
  return rc;
}

/* ------------------------------------------------------------------ get files */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int tar_dir(int dfd, const char *prefix, struct buf *out, unsigned long long limit, char *err,
                   size_t errlen) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    errf(err, errlen, "%s: %s", prefix, strerror(errno));
    close(dfd);
    return -1;
  }
  char **names = NULL;
  size_t nn = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (nn == cap) {
      size_t nc = cap ? cap * 2 : 32;
      char **nn_ = realloc(names, nc * sizeof *names);
      if (!nn_) break;
      names = nn_;
      cap = nc;
    }
    if (!(names[nn] = strdup(de->d_name))) break;
    nn++;
  }
  int rc = 0;
  if (de) { /* stopped early: out of memory */
    errf(err, errlen, "out of memory listing %s", prefix[0] ? prefix : ".");
    rc = -1;
  }
  if (nn) qsort(names, nn, sizeof *names, cmp_str);
  for (size_t k = 0; k < nn && !rc; k++) {
    char rel[TAR_NAME_MAX + 1];
    if ((size_t)snprintf(rel, sizeof rel, "%s%s%s", prefix, prefix[0] ? "/" : "", names[k]) >= sizeof rel) {
      errf(err, errlen, "path too long below %s", prefix);
      rc = -1;
      break;
    }
    struct stat st;
    if (fstatat(dirfd(d), names[k], &st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* vanished */
    if (S_ISDIR(st.st_mode)) {
      char dn[TAR_NAME_MAX + 2];
      snprintf(dn, sizeof dn, "%s/", rel);
      rc = tar_header(out, dn, '5', 0, st.st_mode & 07777, st.st_mtime, NULL);
      int sfd = openat(dirfd(d), names[k], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (!rc && sfd >= 0) rc = tar_dir(sfd, rel, out, limit, err, errlen);
    } else if (S_ISLNK(st.st_mode)) {
      char target[TAR_NAME_MAX + 1];
      ssize_t l = readlinkat(dirfd(d), names[k], target, sizeof target - 1);
      if (l < 0) continue;
      target[l] = 0;
      rc = tar_header(out, rel, '2', 0, 0777, st.st_mtime, target);
    } else if (S_ISREG(st.st_mode)) {
      int ffd = openat(dirfd(d), names[k], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (ffd < 0) {
        errf(err, errlen, "%s: %s", rel, strerror(errno));
        rc = -1;
        break;
      }
      if (out->len + (unsigned long long)st.st_size + 1024 > limit) {
        errf(err, errlen, "the archive would be over the limit of %llu bytes", limit);
        close(ffd);
        rc = -2;
        break;
      }
      rc = tar_header(out, rel, '0', (uint64_t)st.st_size, st.st_mode & 07777, st.st_mtime, NULL);
      size_t got = 0;
      if (!rc && buf_reserve(out, (size_t)st.st_size + 512) == 0) {
        while (got < (size_t)st.st_size) {
          ssize_t r = read(ffd, out->p + out->len + got, (size_t)st.st_size - got);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) break;
          got += (size_t)r;
        }
        memset(out->p + out->len + got, 0, (size_t)st.st_size - got); /* shrank while read: zero-fill */
        out->len += (size_t)st.st_size;
        static const char zeros[512];
        if (st.st_size % 512) buf_add(out, zeros, 512 - (size_t)(st.st_size % 512));
      } else if (!rc) {
        rc = -1;
        errf(err, errlen, "out of memory");
      }
      close(ffd);
    } /* sockets, fifos, devices: skipped */
  }
  for (size_t k = 0; k < nn; k++) free(names[k]);
  free(names);
  closedir(d);
  return rc;
}

static void do_get_files(int fd, const char *path) {
  struct stat st;
  if (path[0] != '/') {
    respond_error(fd, 400, "files: path must be absolute: %s", path);
    return;
  }
  if (stat(path, &st) != 0) {
    respond_error(fd, errno == ENOENT || errno == ENOTDIR ? 404 : 400, "files: %s: %s", path,
                  strerror(errno));
    return;
  }
  char err[512] = "";
  struct buf b = {0};
  if (S_ISREG(st.st_mode)) {
    if ((unsigned long long)st.st_size > cfg.max_body) {
      respond_error(fd, 413, "files: %s is %lld bytes, over the limit of %llu", path, (long long)st.st_size,
                    cfg.max_body);
      return;
    }
    int ffd = open(path, O_RDONLY | O_CLOEXEC);
    if (ffd < 0) {
      respond_error(fd, 400, "files: %s: %s", path, strerror(errno));
      return;
    }
    char chunk[65536];
    ssize_t r;
    while ((r = read(ffd, chunk, sizeof chunk)) > 0) {
      if (buf_add(&b, chunk, (size_t)r) || b.len > cfg.max_body) {
        close(ffd);
        buf_free(&b);
        respond_error(fd, 413, "files: %s grew over the limit", path);
        return;
      }
    }
    close(ffd);
    respond(fd, 200, "application/octet-stream", "X-Cseng-File-Type: file\r\n", b.p ? b.p : "", b.len);
    logf_("%s: get file %s (%zu bytes)", peer, path, b.len);
  } else if (S_ISDIR(st.st_mode)) {
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      respond_error(fd, 400, "files: %s: %s", path, strerror(errno));
      return;
    }
    int rc = tar_dir(dfd, "", &b, cfg.max_body, err, sizeof err);
    if (rc) {
      buf_free(&b);
      respond_error(fd, rc == -2 ? 413 : 400, "files: %s", err);
      return;
    }
    static const char zeros[1024];
    buf_add(&b, zeros, sizeof zeros);
    respond(fd, 200, "application/x-tar", "X-Cseng-File-Type: directory\r\n", b.p, b.len);
    logf_("%s: get directory %s (%zu bytes of tar)", peer, path, b.len);
  } else {
    respond_error(fd, 400, "files: %s is neither a regular file nor a directory", path);
  }
  buf_free(&b);
}

/* ------------------------------------------------------------------ hooks */

static int hook_index(const char *path, size_t n) {
  for (int k = 0; k < 6; k++)
    if (cfg.hooks[k] && strlen(cfg.hooks[k]) == n && memcmp(cfg.hooks[k], path, n) == 0) return k;
  return -1;
}

static void do_hook(struct conn *c, int k) {
  struct buf body = {0};
  if (read_body(c, &body, MAX_HOOK_BODY)) {
    buf_free(&body);
    return;
  }
  int token_set = 0;
  if (k == 0 && body.len) {
    char err[128];
    struct jv *j = json_parse(body.p, body.len, err, sizeof err);
    const struct jv *t = j ? json_get(j, "token") : NULL;
    if (t && t->type == J_STR && t->len > 0 && !memchr(t->str, 0, t->len)) {
      char *cur = current_token();
      if (cur) {
        logf_("%s: run hook: a token is already set; the payload's token is ignored", peer);
        free(cur);
      } else if (cfg.token_file[0]) {
        int tfd = open(cfg.token_file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (tfd >= 0) {
          token_set = write_all(tfd, t->str, t->len) == 0;
          close(tfd);
          logf_("%s: run hook: token stored in %s", peer, cfg.token_file);
        } else {
          logf_("%s: run hook: cannot store the token in %s: %s", peer, cfg.token_file, strerror(errno));
        }
      }
    } else {
      logf_("%s: run hook: payload of %zu bytes without a token", peer, body.len);
    }
    json_free(j);
  }
  struct buf b = {0};
  buf_printf(&b, "{\"ok\":true,\"hook\":\"%s\",\"token_set\":%s}", HOOK_NAMES[k],
             token_set ? "true" : "false");
  respond_json(c->fd, 200, &b);
  logf_("%s: hook %s (%zu bytes)", peer, HOOK_NAMES[k], body.len);
  buf_free(&b);
  buf_free(&body);
}

/* ------------------------------------------------------------------ connection */

static int path_is(const struct ap_request *r, const char *p) {
  return r->path_len == strlen(p) && memcmp(r->path, p, r->path_len) == 0;
}
static int method_is(const struct ap_request *r, const char *m) {
  return r->method_len == strlen(m) && memcmp(r->method, m, r->method_len) == 0;
}

static void handle(int fd) {
  static struct conn c;
  memset(&c, 0, sizeof c);
  c.fd = fd;
  long long deadline = now_ms() + cfg.header_timeout_ms;
  for (;;) {
    long hl = ap_parse_head(c.head, c.have, &c.req);
    if (hl > 0) {
      c.head_len = hl;
      break;
    }
    if (hl == AP_E_TOO_MANY) {
      respond_error(fd, 431, "too many header fields");
      return;
    }
    if (hl == AP_E_VERSION) {
      respond_error(fd, 505, "HTTP/1.0 or HTTP/1.1 only");
      return;
    }
    if (hl < 0) {
      logf_("%s: malformed request head", peer);
      respond_error(fd, 400, "malformed request head");
      return;
    }
    if (c.have == sizeof c.head) {
      respond_error(fd, 431, "request head over %d bytes", MAX_HEAD);
      return;
    }
    long long left = deadline - now_ms();
    if (left <= 0) {
      logf_("%s: request head not received in time", peer);
      respond_error(fd, 408, "request head not received within %d ms", cfg.header_timeout_ms);
      return;
    }
    struct pollfd pf = {fd, POLLIN, 0};
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;
    ssize_t n = read(fd, c.head + c.have, sizeof c.head - c.have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    c.have += (size_t)n;
  }
  struct ap_request *r = &c.req;
  logf_("%s: %.*s %.*s", peer, (int)r->method_len, r->method, (int)(r->path_len > 200 ? 200 : r->path_len),
        r->path);
  int hk = hook_index(r->path, r->path_len);
  if (hk >= 0) {
    do_hook(&c, hk);
    return;
  }

  char *tok = current_token();
  const struct ap_header *h = ap_header(r, TOKEN_HEADER);
  if (!tok || !h || !token_equal(h->value, h->value_len, tok)) {
    const char *why = !tok ? "no token configured yet" : !h ? "no " TOKEN_HEADER " header" : "wrong token";
    logf_("%s: 401 %.*s %.*s: %s", peer, (int)r->method_len, r->method,
          (int)(r->path_len > 200 ? 200 : r->path_len), r->path, why);
    free(tok);
    if (!h || !tok)
      respond_error(
          fd, 401, "%s%s", why,
          !tok ? " (start the agent with CSENG_AGENT_TOKEN or send {\"token\":...} to the run hook)" : "");
    else respond_error(fd, 401, "%s", why);
    return;
  }
  free(tok);

  if (path_is(r, "/health")) {
    if (!method_is(r, "GET")) {
      respond_error(fd, 405, "/health: GET only");
      return;
    }
    struct buf b = {0};
    buf_printf(&b, "{\"ok\":true,\"version\":\"%s\",\"arch\":\"%s\",\"pid\":%d}", AGENT_VERSION, ARCH,
               (int)getppid());
    respond_json(fd, 200, &b);
    buf_free(&b);
  } else if (path_is(r, "/exec")) {
    if (!method_is(r, "POST")) {
      respond_error(fd, 405, "/exec: POST only");
      return;
    }
    struct buf body = {0};
    if (read_body(&c, &body, MAX_EXEC_BODY) == 0) do_exec(fd, body.p ? body.p : "", body.len);
    buf_free(&body);
  } else if (path_is(r, "/files")) {
    int put = method_is(r, "PUT"), get = method_is(r, "GET");
    if (!put && !get) {
      respond_error(fd, 405, "/files: GET or PUT");
      return;
    }
    char *val = NULL;
    size_t vlen = 0;
    int q = ap_query_get(r->query, r->query_len, put ? "dir" : "path", &val, &vlen);
    if (q < 0) {
      respond_error(fd, 400, "files: bad %%-escape in the query");
      return;
    }
    if (q == 0 || !vlen) {
      respond_error(fd, 400, "files: give ?%s=/absolute/path", put ? "dir" : "path");
      free(val);
      return;
    }
    if (memchr(val, 0, vlen)) {
      respond_error(fd, 400, "files: NUL in the path");
      free(val);
      return;
    }
    if (get) {
      do_get_files(fd, val);
    } else {
      if (val[0] != '/') {
        respond_error(fd, 400, "files: dir must be absolute: %s", val);
        free(val);
        return;
      }
      if (!r->chunked && r->content_length < 0) {
        respond_error(fd, 411, "files: PUT needs a body (Content-Length or chunked)");
        free(val);
        return;
      }
      struct buf body = {0};
      if (read_body(&c, &body, cfg.max_body) == 0) {
        char err[512] = "";
        int entries = 0;
        if (extract(val, body.p ? body.p : "", body.len, &entries, err, sizeof err) != 0) {
          logf_("%s: put %s refused: %s", peer, val, err);
          respond_error(fd, 400, "files: %s", err);
        } else {
          struct buf b = {0};
          buf_str(&b, "{\"ok\":true,\"dir\":");
          json_escape(&b, val, vlen);
          buf_printf(&b, ",\"entries\":%d,\"bytes\":%zu}", entries, body.len);
          respond_json(fd, 200, &b);
          logf_("%s: put %s: %d entries, %zu bytes", peer, val, entries, body.len);
          buf_free(&b);
        }
      }
      buf_free(&body);
    }
    free(val);
  } else {
    respond_error(fd, 404, "no such endpoint: %.*s", (int)(r->path_len > 200 ? 200 : r->path_len), r->path);
  }
}

/* ------------------------------------------------------------------ main */

static volatile sig_atomic_t stop;
static void on_term(int s) {
  (void)s;
  stop = 1;
}
static void on_chld(int s) { (void)s; }

static void usage(FILE *f) {
  fprintf(f,
          "usage: microvm-agent [options]\n"
          "  --port N            listen port (CSENG_AGENT_PORT; default 8080; 0 = any free port)\n"
          "  --listen ADDR       listen address (CSENG_AGENT_LISTEN; default 0.0.0.0)\n"
          "  --token T           required X-Cseng-Agent-Token (prefer CSENG_AGENT_TOKEN: flags show in ps)\n"
          "  --token-file PATH   where the run hook stores a token (CSENG_AGENT_TOKEN_FILE;\n"
          "                      default /tmp/microvm-agent-PORT.token; read at start)\n"
          "  --port-file PATH    write the bound port there once listening\n"
          "  --hook NAME=PATH    hook path (NAME: run resume suspend terminate ready validate;\n"
          "                      CSENG_AGENT_HOOK_<NAME>; default /NAME)\n"
          "  --max-body BYTES    largest PUT body and GET answer (CSENG_AGENT_MAX_BODY; default 268435456)\n"
          "  --max-conns N       connections handled at once (default 64; more get 503)\n"
          "  --header-timeout S  seconds to receive a request head (default 10)\n"
          "  --body-timeout S    seconds of silence allowed inside a body (default 60)\n"
          "  --quiet             no request log on stderr\n"
          "  --version, --help\n");
}

static const char *envor(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && v[0] ? v : dflt;
}

int main(int argc, char **argv) {
  cfg.port = atoi(envor("CSENG_AGENT_PORT", "8080"));
  cfg.listen = envor("CSENG_AGENT_LISTEN", "0.0.0.0");
  const char *tenv = getenv("CSENG_AGENT_TOKEN");
  if (tenv && tenv[0]) cfg.token = strdup(tenv);
  const char *token_file = envor("CSENG_AGENT_TOKEN_FILE", NULL);
  cfg.max_body = strtoull(envor("CSENG_AGENT_MAX_BODY", "268435456"), NULL, 10);
  cfg.max_conns = 64;
  cfg.header_timeout_ms = 10000;
  cfg.body_timeout_ms = 60000;
  static char hookbuf[6][512];
  for (int k = 0; k < 6; k++) {
    char en[64];
    snprintf(en, sizeof en, "CSENG_AGENT_HOOK_%s", HOOK_NAMES[k]);
    for (char *s = en; *s; s++)
      if (*s >= 'a' && *s <= 'z') *s = (char)(*s - 32);
    snprintf(hookbuf[k], sizeof hookbuf[k], "%s", envor(en, ""));
    if (!hookbuf[k][0]) snprintf(hookbuf[k], sizeof hookbuf[k], "/%s", HOOK_NAMES[k]);
    cfg.hooks[k] = hookbuf[k];
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG()                                             \
  do {                                                         \
    if (!v) {                                                  \
      fprintf(stderr, "microvm-agent: %s needs a value\n", a); \
      return 2;                                                \
    }                                                          \
    i++;                                                       \
  } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("microvm-agent %s (%s)\n", AGENT_VERSION, ARCH);
      return 0;
    } else if (!strcmp(a, "--quiet")) cfg.quiet = 1;
    else if (!strcmp(a, "--port")) {
      NEED_ARG();
      cfg.port = atoi(v);
    } else if (!strcmp(a, "--listen")) {
      NEED_ARG();
      cfg.listen = v;
    } else if (!strcmp(a, "--token")) {
      NEED_ARG();
      free(cfg.token);
      cfg.token = strdup(v);
    } else if (!strcmp(a, "--token-file")) {
      NEED_ARG();
      token_file = v;
    } else if (!strcmp(a, "--port-file")) {
      NEED_ARG();
      cfg.port_file = v;
    } else if (!strcmp(a, "--max-body")) {
      NEED_ARG();
      cfg.max_body = strtoull(v, NULL, 10);
    } else if (!strcmp(a, "--max-conns")) {
      NEED_ARG();
      cfg.max_conns = atoi(v);
    } else if (!strcmp(a, "--header-timeout")) {
      NEED_ARG();
      cfg.header_timeout_ms = (int)(atof(v) * 1000);
    } else if (!strcmp(a, "--body-timeout")) {
      NEED_ARG();
      cfg.body_timeout_ms = (int)(atof(v) * 1000);
    } else if (!strcmp(a, "--hook")) {
      NEED_ARG();
      const char *eq = strchr(v, '=');
      int found = 0;
      for (int k = 0; eq && k < 6; k++)
        if ((size_t)(eq - v) == strlen(HOOK_NAMES[k]) && !memcmp(v, HOOK_NAMES[k], (size_t)(eq - v))) {
          if (eq[1] != '/') {
            fprintf(stderr, "microvm-agent: --hook %s: the path must start with '/'\n", v);
            return 2;
          }
          snprintf(hookbuf[k], sizeof hookbuf[k], "%s", eq + 1);
          found = 1;
        }
      if (!found) {
        fprintf(stderr,
                "microvm-agent: --hook %s: expected NAME=PATH, NAME one of run resume suspend terminate "
                "ready validate\n",
                v);
        return 2;
      }
    } else {
      fprintf(stderr, "microvm-agent: unknown option %s (see --help)\n", a);
      return 2;
    }
  }
  if (cfg.port < 0 || cfg.port > 65535) {
    fprintf(stderr, "microvm-agent: --port must be 0..65535\n");
    return 2;
  }
  if (cfg.max_conns < 1 || cfg.header_timeout_ms < 1 || cfg.body_timeout_ms < 1 || cfg.max_body < 1) {
    fprintf(stderr,
            "microvm-agent: --max-conns, --header-timeout, --body-timeout and --max-body must be positive\n");
    return 2;
  }
  unsetenv("CSENG_AGENT_TOKEN"); /* the commands run never see it */

  int ls = socket(strchr(cfg.listen, ':') ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) {
    perror("microvm-agent: socket");
    return 1;
  }
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (strchr(cfg.listen, ':')) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)cfg.port);
    if (inet_pton(AF_INET6, cfg.listen, &s6->sin6_addr) != 1) {
      fprintf(stderr, "microvm-agent: bad --listen %s\n", cfg.listen);
      return 2;
    }
    sl = sizeof *s6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)cfg.port);
    if (inet_pton(AF_INET, cfg.listen, &s4->sin_addr) != 1) {
      fprintf(stderr, "microvm-agent: bad --listen %s\n", cfg.listen);
      return 2;
    }
    sl = sizeof *s4;
  }
  if (bind(ls, (struct sockaddr *)&ss, sl) != 0) {
    fprintf(stderr, "microvm-agent: bind %s:%d: %s\n", cfg.listen, cfg.port, strerror(errno));
    return 1;
  }
  if (listen(ls, 128) != 0) {
    perror("microvm-agent: listen");
    return 1;
  }
  getsockname(ls, (struct sockaddr *)&ss, &sl);
  int port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
  if (token_file) snprintf(cfg.token_file, sizeof cfg.token_file, "%s", token_file);
  else snprintf(cfg.token_file, sizeof cfg.token_file, "/tmp/microvm-agent-%d.token", port);
  if (cfg.port_file) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", cfg.port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, cfg.port_file) != 0) {
      fprintf(stderr, "microvm-agent: cannot write --port-file %s\n", cfg.port_file);
      return 1;
    }
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = on_chld;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  logf_("listening on %s:%d (%s), hooks %s %s %s %s %s %s, token %s", cfg.listen, port, ARCH, cfg.hooks[0],
        cfg.hooks[1], cfg.hooks[2], cfg.hooks[3], cfg.hooks[4], cfg.hooks[5],
        cfg.token ? "from the environment/flags" : "from the run hook or token file");
  int active = 0;
  while (!stop) {
    while (waitpid(-1, NULL, WNOHANG) > 0) active--;
    if (active >= cfg.max_conns + 16) { /* even the 503 answers are saturated: leave them in the backlog */
      poll(NULL, 0, 100);
      continue;
    }
    struct pollfd pf = {ls, POLLIN, 0};
    int pr = poll(&pf, 1, 1000);
    if (pr <= 0) continue;
    struct sockaddr_storage ps;
    socklen_t psl = sizeof ps;
    int fd = accept4(ls, (struct sockaddr *)&ps, &psl, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (ps.ss_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)&ps)->sin_addr, peer, sizeof peer);
    else if (ps.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ps)->sin6_addr, peer, sizeof peer);
    int busy = active >= cfg.max_conns;
    pid_t pid = fork();
    if (pid == 0) {
      close(ls);
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      signal(SIGCHLD, SIG_DFL);
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (busy) {
        logf_("%s: 503, %d connections already", peer, active);
        static const char msg[] = "{\"error\":\"too many clients\",\"status\":503}";
        respond(fd, 503, "application/json", "Retry-After: 1\r\n", msg, sizeof msg - 1);
      } else {
        handle(fd);
      }
      shutdown(fd, SHUT_WR);
      /* let the client read the answer before the close resets it */
      char sink[4096];
      struct pollfd cp = {fd, POLLIN, 0};
      for (int k = 0; k < 20 && poll(&cp, 1, 100) > 0; k++)
        if (read(fd, sink, sizeof sink) <= 0) break;
      close(fd);
      _exit(0);
    }
    if (pid > 0) active++;
    else logf_("fork: %s", strerror(errno));
    close(fd);
  }
  logf_("stopping");
  return 0;
}
