/*
 * lproc.c: subprocesses on the loop. Module cseng.proc.
 *   proc.run{argv=, cwd=, env=, env_add=, stdin=, timeout=, tail_bytes=, kill_group=, kill_grace=}
 *       -> {code, signal, stdout, stderr, elapsed, elapsed_ns, timed_out, stdout_dropped,
 *           stderr_dropped, pid} | nil, msg, CODE (spawn failure: "ENOENT", "EACCES", ...)
 *   proc.spawn{argv=, cwd=, env=, env_add=, stdin=, stdout=, stderr=, kill_group=, kill_grace=}
 *       -> process with :pid(), :kill(sig), :wait([timeout]), :read_line([timeout]), :close()
 *       (stdout = "pipe": the child's stdout is read by :read_line, a server that announces
 *       that it is ready on a line of its own; what it writes beyond LINE_MAX unread bytes is
 *       dropped)
 *   proc.which(name) -> absolute path | nil, msg, "ENOENT"
 *
 * Every child is started in its own session (UV_PROCESS_DETACHED, so setsid:
 * pgid == pid) so that the whole tree can be signalled as one group: on
 * timeout (TERM, then KILL after a grace), after the leader exits (KILL, so
 * background children neither hold our pipes nor survive the call), and on
 * cancellation (KILL). Output is kept as a tail of at most tail_bytes per
 * stream; reads go straight into the tail buffer while it has room.
 *
 * Children start by posix_spawn, not uv_spawn (see "starting a child" below for why), and
 * their end is seen on a pidfd.
 */
#include "core.h"
#include "aux.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

extern char **environ;

#define PROCESS_MT "cseng.proc.process"
#define DEFAULT_TAIL ((size_t)1 << 20)
#define DEFAULT_GRACE_MS 2000

/* Reads land here when the tail buffer has no contiguous room. libuv calls
 * alloc_cb and read_cb back to back on one thread, so one buffer serves all. */
static char scratch[65536];

/* ---- the output tail ---------------------------------------------------- */

/* Linear until cap bytes arrived (data = buf[0, len)), then a full ring whose
 * oldest byte is at w (data = buf[w, cap) + buf[0, w)). */
typedef struct {
  char *buf;
  size_t size, cap, len, w;
  int wrapped;
  uint64_t total;
} tail;

static int tail_grow(tail *t, size_t want) {
  char *nb;
  if (want > t->cap) want = t->cap;
  if (want <= t->size) return 1;
  nb = realloc(t->buf, want);
  if (!nb) return 0;
  t->buf = nb;
  t->size = want;
  return 1;
}

static void tail_alloc(tail *t, uv_buf_t *b) {
  if (!t->wrapped && t->len < t->cap) {
    if (t->len == t->size) tail_grow(t, t->size < 16384 ? 16384 : t->size * 2);
    if (t->len < t->size) {
      *b = uv_buf_init(t->buf + t->len, (unsigned)(t->size - t->len));
      return;
    }
  }
  *b = uv_buf_init(scratch, sizeof scratch);
}

/* Append n bytes that arrived outside the buffer, keeping the last cap. */
static void tail_append(tail *t, const char *p, size_t n) {
  size_t k;
  t->total += n;
  if (t->cap == 0 || n == 0) return;
  if (!tail_grow(t, t->cap) || t->size < t->cap) return; /* out of memory: drop */
  if (n >= t->cap) {
    memcpy(t->buf, p + n - t->cap, t->cap);
    t->len = t->cap;
    t->wrapped = 1;
    t->w = 0;
    return;
  }
  if (!t->wrapped) {
    if (t->len + n <= t->cap) {
      memcpy(t->buf + t->len, p, n);
      t->len += n;
      return;
    }
    k = t->cap - t->len;
    memcpy(t->buf + t->len, p, k);
    p += k;
    n -= k;
    t->len = t->cap;
    t->wrapped = 1;
    t->w = 0;
  }
  k = t->cap - t->w < n ? t->cap - t->w : n;
  memcpy(t->buf + t->w, p, k);
  memcpy(t->buf, p + k, n - k);
  t->w = (t->w + n) % t->cap;
}

static void tail_push(lua_State *L, tail *t) {
  if (!t->wrapped) {
    lua_pushlstring(L, t->buf ? t->buf : "", t->len);
  } else {
    luaL_Buffer b;
    luaL_buffinitsize(L, &b, t->cap);
    luaL_addlstring(&b, t->buf + t->w, t->cap - t->w);
    luaL_addlstring(&b, t->buf, t->w);
    luaL_pushresult(&b);
  }
}

static uint64_t tail_dropped(tail *t) { return t->total - (t->wrapped ? t->cap : t->len); }

/* ---- shared option handling --------------------------------------------- */

/* What a child's start needs (xproc_spawn reads these uv_process_options_t fields); every string
 * and array is anchored on the Lua stack. */
typedef struct {
  uv_process_options_t o;
  uv_stdio_container_t stdio[3];
  int kill_group;
  uint64_t grace_ms;
} spawnopts;

/* A NULL-terminated char* array of n entries, owned by Lua (pushed). */
static char **push_ptrs(lua_State *L, lua_Integer n) {
  char **v = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof(char *), 0);
  v[n] = NULL;
  return v;
}

/* Copy the string pairs of the table at tidx into the map at midx; a false
 * value removes the variable. */
static void env_merge(lua_State *L, int midx, int tidx, const char *what) {
  lua_pushnil(L);
  while (lua_next(L, tidx)) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "opts.%s keys must be strings", what);
    if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_pushnil(L);
      lua_rawset(L, midx);
      continue;
    }
    if (!lua_isstring(L, -1)) luaL_error(L, "opts.%s.%s must be a string", what, lua_tostring(L, -2));
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, midx);
  }
}

/* Pushes the environment array (a userdata) and its anchor, or two nils to
 * inherit ours. */
static char **push_env(lua_State *L, int oidx) {
  int has_env, has_add, map, n = 0, i;
  char **envp;
  lua_getfield(L, oidx, "env");
  lua_getfield(L, oidx, "env_add");
  has_env = !lua_isnil(L, -2);
  has_add = !lua_isnil(L, -1);
  if (has_env && !lua_istable(L, -2)) luaL_error(L, "opts.env must be a table");
  if (has_add && !lua_istable(L, -1)) luaL_error(L, "opts.env_add must be a table");
  if (!has_env && !has_add) return NULL; /* the two nils */
  lua_newtable(L);
  map = lua_gettop(L);
  if (has_env) {
    env_merge(L, map, map - 2, "env");
  } else {
    cs_environ_into(L, map);
  }
  if (has_add) env_merge(L, map, map - 1, "env_add");
  lua_newtable(L); /* the anchor: "K=V" strings */
  lua_pushnil(L);
  while (lua_next(L, map)) {
    lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
    lua_rawseti(L, map + 1, ++n);
    lua_pop(L, 1);
  }
  envp = push_ptrs(L, n);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, map + 1, i);
    envp[i - 1] = (char *)lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  lua_replace(L, map - 2); /* envp, anchor in the env/env_add slots */
  lua_replace(L, map - 1);
  lua_settop(L, map - 1);
  return envp;
}

/* Reads the options common to run and spawn; pushes 4 anchors. */
static void read_spawnopts(lua_State *L, int oidx, spawnopts *so) {
  lua_Integer n = 0, i;
  double grace;
  char **argv;
  int anchor;
  memset(so, 0, sizeof *so);
  luaL_checktype(L, oidx, LUA_TTABLE);
  lua_getfield(L, oidx, "argv");
  if (!lua_istable(L, -1) || (n = luaL_len(L, -1)) < 1)
    luaL_error(L, "opts.argv must be a non-empty table of strings");
  lua_createtable(L, (int)n, 0); /* argv strings, numbers converted */
  anchor = lua_gettop(L);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, anchor - 1, i);
    if (!lua_isstring(L, -1)) luaL_error(L, "opts.argv[%d] must be a string", (int)i);
    lua_tostring(L, -1);
    lua_rawseti(L, anchor, i);
  }
  lua_replace(L, anchor - 1);
  argv = push_ptrs(L, n);
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, anchor - 1, i);
    argv[i - 1] = (char *)lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  so->o.env = push_env(L, oidx);
  lua_getfield(L, oidx, "cwd");
  if (!lua_isnil(L, -1)) so->o.cwd = luaL_checkstring(L, -1); /* anchored by opts */
  lua_pop(L, 1);
  so->kill_group = cs_opt_bool(L, oidx, "kill_group", 1);
  grace = cs_opt_number(L, oidx, "kill_grace", DEFAULT_GRACE_MS / 1000.0);
  so->grace_ms = grace <= 0 ? 0 : grace > 1e9 ? (uint64_t)1e12 : (uint64_t)(grace * 1000.0 + 0.5);
  so->o.file = argv[0];
  so->o.args = argv;
  so->o.flags = UV_PROCESS_DETACHED;
  so->o.stdio = so->stdio;
  so->o.stdio_count = 3;
  so->stdio[0].flags = so->stdio[1].flags = so->stdio[2].flags = UV_IGNORE;
}

static void signal_group(pid_t pid, int group, int sig) {
  if (pid <= 0) return;
  if (group) kill(-pid, sig);
  else kill(pid, sig);
}

/* code, signal, elapsed, elapsed_ns into the table on top. */
static void push_exit_fields(lua_State *L, int64_t status, int sig, uint64_t ns) {
  lua_pushinteger(L, sig ? 128 + sig : status);
  lua_setfield(L, -2, "code");
  if (sig) {
    cs_push_signal_name(L, sig);
    lua_setfield(L, -2, "signal");
  }
  lua_pushnumber(L, (double)ns / 1e9);
  lua_setfield(L, -2, "elapsed");
  lua_pushinteger(L, (lua_Integer)ns);
  lua_setfield(L, -2, "elapsed_ns");
}

static int spawn_fail(lua_State *L, const char *file, int r) {
  return cs_fail(L, uv_err_name(r), "spawn %s: %s", file, uv_strerror(r));
}

/* ---- starting a child ------------------------------------------------------ */

/* uv_spawn (libuv 1.44) fork()s: the kernel copies this whole process's page tables, and each
 * page either side then writes before the child's exec costs a copy-on-write fault, so a spawn
 * costs more the bigger the engine's heap, with the loop stopped meanwhile (/bin/true through
 * proc.run: 6 ms from a fresh engine, 13 ms from one holding 78 MB, on this project's 2-core VM).
 * glibc's posix_spawn clones with CLONE_VM | CLONE_VFORK: the child borrows our memory until
 * its exec, whatever the heap. Its end is seen on a pidfd (readable once it has exited) and
 * reaped by waitid(P_PIDFD), so libuv's SIGCHLD handling, which waits only for its own
 * children, never meets it. The child's set-up is uv_spawn's: stdio (a socketpair per pipe,
 * /dev/null for an ignored stream), its own session, every signal at its default and none
 * blocked, the working directory, the program looked up in the child's own PATH. */
typedef struct xproc xproc;
typedef void (*xproc_exit_cb)(xproc *p, int64_t status, int sig);
struct xproc {
  uv_poll_t poll; /* on the pidfd; poll.data is the owner's */
  int pidfd;
  pid_t pid;
  xproc_exit_cb exit_cb;
};

static void xproc_ready(uv_poll_t *h, int status, int events) {
  xproc *p = (xproc *)h;
  siginfo_t si;
  int rc;
  (void)status;
  (void)events;
  memset(&si, 0, sizeof si);
  do rc = waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, &si, WEXITED | WNOHANG);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 && si.si_pid == 0) return; /* not ended yet */
  uv_poll_stop(h);
  if (rc < 0) p->exit_cb(p, 127, 0); /* reaped by someone else: its status is lost */
  else if (si.si_code == CLD_EXITED) p->exit_cb(p, si.si_status, 0);
  else p->exit_cb(p, 0, si.si_status);
}

static void xproc_close(xproc *p, uv_close_cb cb) {
  if (uv_is_closing((uv_handle_t *)&p->poll)) return;
  uv_close((uv_handle_t *)&p->poll, cb); /* out of epoll now: the pidfd may go */
  close(p->pidfd);
  p->pidfd = -1;
}

/* A regular file this process may execute. */
static int executable(const char *p) {
  struct stat st;
  return access(p, X_OK) == 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The first file named name in path's directories (':'-separated; an empty one is ".") that may be
 * executed, into out: 0, or -ENOENT, or -EACCES when one was there but may not be executed. */
static int find_in_path(const char *name, const char *path, char *out, size_t n) {
  int err = -ENOENT;
  for (const char *p = path;; p++) {
    const char *e = strchr(p, ':');
    int len = e ? (int)(e - p) : (int)strlen(p);
    if ((size_t)snprintf(out, n, "%.*s/%s", len ? len : 1, len ? p : ".", name) < n) {
      struct stat st;
      if (executable(out)) return 0;
      if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) err = -EACCES;
    }
    if (!e) return err;
    p = e;
  }
}

/* The program execvp would run for file under the child's PATH (its env's, else ours);
 * 0 or a negative errno. */
static int xproc_resolve(const char *file, char *const *env, char *out, size_t n) {
  const char *path = NULL;
  if (strchr(file, '/')) {
    if ((size_t)snprintf(out, n, "%s", file) >= n) return -ENAMETOOLONG;
    return 0;
  }
  if (env) {
    for (char *const *e = env; *e; e++)
      if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  } else {
    path = getenv("PATH");
  }
  return find_in_path(file, path ? path : "/bin:/usr/bin" /* execvp's default */, out, n);
}

/* Starts o's program with o's stdio, cwd, env and flags (UV_PROCESS_DETACHED: its own session);
 * 0, with p->pid and p->poll watching for its end (p->exit_cb then), or a negative errno
 * (libuv's error codes), nothing started and p->poll untouched. */
static int xproc_spawn(uv_loop_t *loop, xproc *p, const uv_process_options_t *o, xproc_exit_cb cb) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, all;
  int parent_end[3] = {-1, -1, -1}, child_end[3] = {-1, -1, -1}, rc = 0, i, pidfd;
  char path[PATH_MAX];
  char *const *envp = o->env ? o->env : environ;
  pid_t pid = 0;
  rc = xproc_resolve(o->file, o->env, path, sizeof path);
  if (rc) return rc;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  for (i = 0; i < 3 && rc == 0; i++) {
    const uv_stdio_container_t *sc = i < o->stdio_count ? &o->stdio[i] : NULL;
    int f = sc ? (int)sc->flags : UV_IGNORE;
    if (f & UV_CREATE_PIPE) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        rc = -errno;
        break;
      }
      parent_end[i] = sv[0];
      child_end[i] = sv[1];
      if (sv[1] <= 2) { /* above the stdio numbers, so no dup2 overwrites another's source */
        child_end[i] = fcntl(sv[1], F_DUPFD_CLOEXEC, 3);
        rc = child_end[i] < 0 ? -errno : 0; /* (before close, which may set errno) */
        close(sv[1]);
        if (rc) break;
      }
      rc = -posix_spawn_file_actions_adddup2(&fa, child_end[i], i);
    } else if (f & UV_INHERIT_FD) {
      if (sc->data.fd == i) { /* ours as it is: blocking, as uv_spawn leaves a child's stdio */
        int fl = fcntl(i, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(i, F_SETFL, fl & ~O_NONBLOCK);
      } else {
        rc = -posix_spawn_file_actions_adddup2(&fa, sc->data.fd, i);
      }
    } else {
      rc = -posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_RDWR, 0);
    }
  }
  if (rc == 0 && o->cwd) rc = -posix_spawn_file_actions_addchdir_np(&fa, o->cwd);
  if (rc == 0) {
    sigemptyset(&none);
    sigfillset(&all);
    /* glibc's sigfillset leaves out its two internal signals (32 and 33), which posix_spawn then
       sets to SIG_IGN in the child, and an ignored signal stays ignored across exec; uv_spawn's
       children had them at their default. Their bits are set by hand (signal n is bit n - 1). */
    for (int sig = 32; sig <= 33; sig++)
      ((unsigned long *)&all)[(sig - 1) / (8 * sizeof(unsigned long))] |= 1UL << ((sig - 1) % (8 * sizeof(unsigned long)));
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    rc = -posix_spawnattr_setflags(&attr, (short)(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                  ((o->flags & UV_PROCESS_DETACHED) ? POSIX_SPAWN_SETSID : 0)));
  }
  if (rc == 0) {
    rc = -posix_spawn(&pid, path, &fa, &attr, o->args, envp);
    if (rc == -ENOEXEC) { /* no #! line: the shell runs it, as execvp does */
      int n = 0;
      while (o->args[n]) n++;
      {
        char *sh[n + 2];
        sh[0] = "/bin/sh";
        sh[1] = path;
        for (int k = 1; k <= n; k++) sh[k + 1] = o->args[k];
        rc = -posix_spawn(&pid, "/bin/sh", &fa, &attr, sh, envp);
      }
    }
  }
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  for (i = 0; i < 3; i++)
    if (child_end[i] >= 0) close(child_end[i]);
  if (rc == 0) {
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0 || uv_poll_init(loop, &p->poll, pidfd) != 0) {
      rc = pidfd < 0 ? -errno : -EINVAL;
      if (pidfd >= 0) close(pidfd);
      kill(pid, SIGKILL);
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
    } else {
      p->pidfd = pidfd;
      p->pid = pid;
      p->exit_cb = cb;
      uv_poll_start(&p->poll, UV_READABLE, xproc_ready);
      for (i = 0; i < 3; i++)
        if (parent_end[i] >= 0) {
          if (uv_pipe_open((uv_pipe_t *)o->stdio[i].data.stream, parent_end[i]) != 0) close(parent_end[i]);
          parent_end[i] = -1;
        }
    }
  }
  for (i = 0; i < 3; i++)
    if (parent_end[i] >= 0) close(parent_end[i]);
  return rc;
}

/* ---- proc.run ------------------------------------------------------------ */

enum { PHASE_TIMEOUT, PHASE_GRACE, PHASE_DRAIN };

/* How a process ended, for runop and child alike: filled by note_exit from the exit callback. */
typedef struct {
  int exited;
  int64_t status;
  int sig;
  uint64_t t1; /* uv_hrtime() at the exit */
} proc_exit;

static void note_exit(proc_exit *x, int64_t status, int sig) {
  x->t1 = uv_hrtime();
  x->exited = 1;
  x->status = status;
  x->sig = sig;
}

typedef struct {
  cs_op op;
  xproc proc;
  uv_pipe_t pin, pout, perr;
  uv_timer_t timer;
  uv_write_t wreq;
  tail out, err;
  pid_t pid;
  int nopen;    /* handles not yet closed */
  int lua_done; /* pushed or cancelled: free once nopen is 0 */
  int timed_out, kill_group, phase, finished;
  proc_exit x;
  uint64_t t0, grace_ms;
} runop;

static void run_free(runop *r) {
  free(r->out.buf);
  free(r->err.buf);
  free(r);
}

static void run_closed(uv_handle_t *h) {
  runop *r = h->data;
  if (--r->nopen == 0 && r->lua_done) run_free(r);
}

static void run_close(void *h) {
  if (!uv_is_closing(h)) uv_close(h, run_closed);
}

static int pipe_open(uv_pipe_t *p) { return !uv_is_closing((uv_handle_t *)p); }

static void run_check_done(runop *r) {
  if (r->finished || r->lua_done || !r->x.exited) return;
  if (pipe_open(&r->pout) || pipe_open(&r->perr)) return;
  r->finished = 1;
  run_close(&r->pin); /* a child that never read its stdin */
  run_close(&r->timer);
  cs_op_ready(&r->op);
}

static void run_arm(runop *r, int phase, uint64_t ms);

static void run_timer(uv_timer_t *h) {
  runop *r = h->data;
  switch (r->phase) {
    case PHASE_TIMEOUT:
      r->timed_out = 1;
      if (!r->x.exited) {
        signal_group(r->pid, 1, SIGTERM);
        run_arm(r, PHASE_GRACE, r->grace_ms);
        return;
      }
      signal_group(r->pid, 1, SIGKILL); /* exited, but strays hold the pipes */
      break;
    case PHASE_GRACE:
      signal_group(r->pid, 1, SIGKILL);
      if (!r->x.exited) {
        run_arm(r, PHASE_DRAIN, r->grace_ms);
        return;
      }
      break;
    default: break;
  }
  /* Whoever still holds the pipes escaped the group: stop waiting for them. */
  if (r->x.exited) {
    run_close(&r->pout);
    run_close(&r->perr);
    run_check_done(r);
  } else {
    run_arm(r, PHASE_DRAIN, r->grace_ms); /* KILLed but not reaped yet (D state) */
  }
}

/* Draining waits at least a moment, so a zero grace still reads what the
 * group wrote before it died. */
static void run_arm(runop *r, int phase, uint64_t ms) {
  r->phase = phase;
  if (phase == PHASE_DRAIN && ms < 100) ms = 100;
  uv_timer_start(&r->timer, run_timer, ms, 0);
}

static void run_exit(xproc *p, int64_t status, int sig) {
  runop *r = p->poll.data;
  note_exit(&r->x, status, sig);
  if (r->kill_group || r->lua_done) signal_group(r->pid, 1, SIGKILL);
  xproc_close(&r->proc, run_closed);
  if (r->lua_done) return;
  if (pipe_open(&r->pout) || pipe_open(&r->perr)) {
    /* Output still draining, or strays hold the pipes. With kill_group they are
     * dead or about to be; without it, the timeout (if any) bounds the wait. */
    if (r->kill_group) {
      uv_timer_stop(&r->timer);
      run_arm(r, PHASE_DRAIN, r->grace_ms);
    }
  }
  run_check_done(r);
}

static tail *run_tail(runop *r, uv_handle_t *h) { return h == (uv_handle_t *)&r->pout ? &r->out : &r->err; }

static void run_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  tail_alloc(run_tail(h->data, h), b);
}

static void run_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  runop *r = s->data;
  tail *t = run_tail(r, (uv_handle_t *)s);
  if (n > 0) {
    if (b->base == scratch) tail_append(t, b->base, (size_t)n);
    else {
      t->len += (size_t)n;
      t->total += (uint64_t)n;
    }
    return;
  }
  if (n < 0) {
    run_close(s);
    run_check_done(r);
  }
}

static void run_written(uv_write_t *w, int status) {
  runop *r = w->data;
  (void)status; /* EPIPE: the child did not read it all, which is its business */
  run_close(&r->pin);
}

static int run_push(lua_State *L, cs_op *op) {
  runop *r = (runop *)op;
  lua_createtable(L, 0, 11);
  push_exit_fields(L, r->x.status, r->x.sig, r->x.t1 - r->t0);
  tail_push(L, &r->out);
  lua_setfield(L, -2, "stdout");
  tail_push(L, &r->err);
  lua_setfield(L, -2, "stderr");
  lua_pushboolean(L, r->timed_out);
  lua_setfield(L, -2, "timed_out");
  lua_pushinteger(L, (lua_Integer)tail_dropped(&r->out));
  lua_setfield(L, -2, "stdout_dropped");
  lua_pushinteger(L, (lua_Integer)tail_dropped(&r->err));
  lua_setfield(L, -2, "stderr_dropped");
  lua_pushinteger(L, r->pid);
  lua_setfield(L, -2, "pid");
  r->lua_done = 1;
  if (r->nopen == 0) run_free(r);
  return 1;
}

static void run_cancel(cs_op *op) {
  runop *r = (runop *)op;
  r->lua_done = 1;
  if (!r->x.exited) signal_group(r->pid, 1, SIGKILL); /* the exit callback reaps and closes */
  run_close(&r->pin);
  run_close(&r->pout);
  run_close(&r->perr);
  run_close(&r->timer);
  if (r->nopen == 0) run_free(r); /* it was ready and every handle had closed already */
}

/** proc.run(opts) -> result | nil, msg, code */
static int proc_run(lua_State *L) {
  spawnopts so;
  runop *r;
  size_t inlen = 0, tb;
  const char *in = NULL;
  double timeout, tbn;
  int rc;
  cs_task_current(L);
  lua_settop(L, 1);
  read_spawnopts(L, 1, &so);
  timeout = cs_opt_number(L, 1, "timeout", 0);
  tbn = cs_opt_number(L, 1, "tail_bytes", (double)DEFAULT_TAIL);
  tb = tbn < 0 ? 0 : tbn > 1e12 ? (size_t)1e12 : (size_t)tbn;
  lua_getfield(L, 1, "stdin"); /* stays on the stack: anchors the bytes uv_write sends */
  if (!lua_isnil(L, -1)) {
    if (!lua_isstring(L, -1)) return luaL_error(L, "opts.stdin must be a string");
    in = lua_tolstring(L, -1, &inlen);
  }
  r = calloc(1, sizeof *r);
  if (!r) return luaL_error(L, "out of memory");
  r->out.cap = r->err.cap = tb;
  r->kill_group = so.kill_group;
  r->grace_ms = so.grace_ms;
  r->proc.poll.data = r->pin.data = r->pout.data = r->perr.data = r->timer.data = r->wreq.data = r;
  uv_pipe_init(cs_loop(), &r->pin, 0);
  uv_pipe_init(cs_loop(), &r->pout, 0);
  uv_pipe_init(cs_loop(), &r->perr, 0);
  uv_timer_init(cs_loop(), &r->timer);
  r->nopen = 5;
  if (in) {
    so.stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    so.stdio[0].data.stream = (uv_stream_t *)&r->pin;
  }
  so.stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  so.stdio[1].data.stream = (uv_stream_t *)&r->pout;
  so.stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  so.stdio[2].data.stream = (uv_stream_t *)&r->perr;
  r->t0 = uv_hrtime();
  rc = xproc_spawn(cs_loop(), &r->proc, &so.o, run_exit);
  if (rc != 0) {
    r->lua_done = 1;
    r->nopen--; /* no process handle was made */
    run_close(&r->pin);
    run_close(&r->pout);
    run_close(&r->perr);
    run_close(&r->timer);
    return spawn_fail(L, so.o.file, rc);
  }
  r->pid = r->proc.pid;
  r->op.push = run_push;
  r->op.cancel = run_cancel;
  uv_read_start((uv_stream_t *)&r->pout, run_alloc, run_read);
  uv_read_start((uv_stream_t *)&r->perr, run_alloc, run_read);
  if (in) {
    uv_buf_t b = uv_buf_init((char *)in, (unsigned)inlen);
    if (inlen == 0 || inlen > UINT32_MAX ||
        uv_write(&r->wreq, (uv_stream_t *)&r->pin, &b, 1, run_written) != 0)
      run_close(&r->pin);
  } else {
    run_close(&r->pin);
  }
  if (timeout > 0) {
    uv_update_time(cs_loop());
    run_arm(r, PHASE_TIMEOUT, timeout > 1e9 ? (uint64_t)1e12 : (uint64_t)(timeout * 1000.0 + 0.5));
  }
  return cs_yield(L, &r->op);
}

/* ---- proc.spawn ------------------------------------------------------------ */

typedef struct waitop waitop;
typedef struct lineop lineop;
#define LINE_MAX_BYTES 4096
typedef struct {
  xproc proc;
  uv_timer_t timer; /* the grace between TERM and KILL after close */
  uv_pipe_t out;    /* stdout = "pipe" */
  pid_t pid;
  int nopen, lua_closed, kill_group, has_out, out_eof;
  proc_exit x;
  uint64_t t0, grace_ms;
  waitop *waiters;
  char line[LINE_MAX_BYTES]; /* what stdout said and :read_line has not taken */
  size_t line_len;
  lineop *reader; /* the one :read_line waiting */
} child;

struct lineop {
  cs_op op;
  child *c;
  uv_timer_t timer;
  int has_timer, timed_out;
};

struct waitop {
  cs_op op;
  child *c;
  uv_timer_t timer;
  int has_timer, timed_out;
  int64_t status;
  int sig;
  uint64_t ns;
  waitop *prev, *next;
};

static void child_closed(uv_handle_t *h) {
  child *c = h->data;
  if (--c->nopen == 0) free(c);
}

static void out_close(child *c) {
  if (c->has_out && !uv_is_closing((uv_handle_t *)&c->out)) uv_close((uv_handle_t *)&c->out, child_closed);
}

static void line_freed(uv_handle_t *h) { free(h->data); }

static void line_release(lineop *l) {
  if (l->has_timer) uv_close((uv_handle_t *)&l->timer, line_freed);
  else free(l);
}

/* A waiting :read_line is answered when a whole line arrived, at EOF, or at its timeout. */
static void line_check(child *c) {
  lineop *l = c->reader;
  if (!l || (!memchr(c->line, '\n', c->line_len) && !c->out_eof && c->line_len < sizeof c->line)) return;
  c->reader = NULL;
  if (l->has_timer) uv_timer_stop(&l->timer);
  cs_op_ready(&l->op);
}

static void out_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)h;
  (void)hint;
  b->base = scratch;
  b->len = sizeof scratch;
}

static void out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  child *c = s->data;
  if (n > 0) {
    size_t room = sizeof c->line - c->line_len, k = (size_t)n < room ? (size_t)n : room;
    memcpy(c->line + c->line_len, b->base, k);
    c->line_len += k;
  } else if (n < 0) {
    c->out_eof = 1;
    out_close(c);
  }
  line_check(c);
}

static void wait_unlink(waitop *w) {
  child *c = w->c;
  if (!c) return;
  if (w->prev) w->prev->next = w->next;
  else c->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  w->prev = w->next = NULL;
  w->c = NULL;
  if (!c->waiters && !c->lua_closed && !c->x.exited) uv_unref((uv_handle_t *)&c->proc.poll);
}

static void child_exit(xproc *p, int64_t status, int sig) {
  child *c = p->poll.data;
  note_exit(&c->x, status, sig);
  if (c->kill_group) signal_group(c->pid, 1, SIGKILL);
  while (c->waiters) {
    waitop *w = c->waiters;
    wait_unlink(w);
    w->status = status;
    w->sig = sig;
    w->ns = c->x.t1 - c->t0;
    if (w->has_timer) uv_timer_stop(&w->timer);
    cs_op_ready(&w->op);
  }
  xproc_close(&c->proc, child_closed);
  if (c->lua_closed) uv_close((uv_handle_t *)&c->timer, child_closed);
}

static void child_grace(uv_timer_t *h) {
  child *c = h->data;
  if (!c->x.exited) signal_group(c->pid, 1, SIGKILL);
}

/* The one close for __gc, __close and :close(): TERM the group, KILL it after the
 * grace; the C side lives on until the exit is reaped. */
static void child_release(child *c) {
  c->lua_closed = 1;
  out_close(c);
  if (c->reader) { /* a task still waits for a line: it gets EOF, never the freed process */
    lineop *l = c->reader;
    c->reader = NULL;
    l->c = NULL;
    if (l->has_timer) uv_timer_stop(&l->timer);
    cs_op_ready(&l->op);
  }
  if (c->x.exited) {
    uv_close((uv_handle_t *)&c->timer, child_closed);
    return;
  }
  uv_ref((uv_handle_t *)&c->proc.poll); /* the loop reaps it even at shutdown */
  signal_group(c->pid, 1, SIGTERM);
  uv_update_time(cs_loop());
  uv_timer_start(&c->timer, child_grace, c->grace_ms, 0);
}

static child **check_box(lua_State *L) { return luaL_checkudata(L, 1, PROCESS_MT); }

static child *check_child(lua_State *L) {
  child *c = *check_box(L);
  if (!c) luaL_error(L, "attempt to use a closed process");
  return c;
}

static int p_close(lua_State *L) {
  child **box = check_box(L);
  if (*box) {
    child_release(*box);
    *box = NULL;
  }
  return 0;
}

static int p_pid(lua_State *L) {
  lua_pushinteger(L, check_child(L)->pid);
  return 1;
}

/** p:kill([sig="TERM"]) signals the child's whole process group. */
static int p_kill(lua_State *L) {
  child *c = check_child(L);
  int sig = cs_check_signal(L, 2, SIGTERM);
  if (c->x.exited && !c->kill_group) return cs_fail(L, "ESRCH", "process %d has exited", (int)c->pid);
  if (kill(-c->pid, sig) != 0)
    return cs_fail(L, errno == ESRCH ? "ESRCH" : "EPERM", "kill %d: %s", (int)c->pid, strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

static void wait_freed(uv_handle_t *h) { free(h->data); }

static void wait_release(waitop *w) {
  if (w->has_timer) uv_close((uv_handle_t *)&w->timer, wait_freed);
  else free(w);
}

static int wait_push(lua_State *L, cs_op *op) {
  waitop *w = (waitop *)op;
  int timed_out = w->timed_out;
  if (!timed_out) {
    lua_createtable(L, 0, 5);
    push_exit_fields(L, w->status, w->sig, w->ns);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "timed_out");
  }
  wait_release(w);
  if (timed_out) return cs_fail(L, "ETIMEDOUT", "process still running after the wait timeout");
  return 1;
}

static void wait_cancel(cs_op *op) {
  waitop *w = (waitop *)op;
  wait_unlink(w);
  wait_release(w);
}

static void wait_timer(uv_timer_t *h) {
  waitop *w = h->data;
  wait_unlink(w);
  w->timed_out = 1;
  cs_op_ready(&w->op);
}

/** p:wait([timeout]) -> result | nil, msg, "ETIMEDOUT" */
static int p_wait(lua_State *L) {
  child *c = check_child(L);
  double timeout = luaL_optnumber(L, 2, 0);
  waitop *w;
  cs_task_current(L);
  if (c->x.exited) {
    lua_createtable(L, 0, 5);
    push_exit_fields(L, c->x.status, c->x.sig, c->x.t1 - c->t0);
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "timed_out");
    return 1;
  }
  w = calloc(1, sizeof *w);
  if (!w) return luaL_error(L, "out of memory");
  w->c = c;
  w->next = c->waiters;
  if (c->waiters) c->waiters->prev = w;
  c->waiters = w;
  uv_ref((uv_handle_t *)&c->proc.poll);
  w->op.push = wait_push;
  w->op.cancel = wait_cancel;
  if (timeout > 0) {
    w->has_timer = 1;
    uv_timer_init(cs_loop(), &w->timer);
    w->timer.data = w;
    uv_update_time(cs_loop());
    uv_timer_start(&w->timer, wait_timer, (uint64_t)(timeout * 1000.0 + 0.5), 0);
  }
  return cs_yield(L, &w->op);
}

/* Take one line (without its newline) off the buffer: pushes it, or nil, msg, "EOF". */
static int take_line(lua_State *L, child *c) {
  char *nl = memchr(c->line, '\n', c->line_len);
  size_t n;
  if (!nl) {
    if (c->line_len == sizeof c->line) {
      c->line_len = 0;
      return cs_fail(L, "EPROTO", "a line longer than %d bytes on the process's stdout", LINE_MAX_BYTES);
    }
    return cs_fail(L, "EOF", "the process closed its stdout without a line");
  }
  n = (size_t)(nl - c->line);
  lua_pushlstring(L, c->line, n);
  memmove(c->line, nl + 1, c->line_len - n - 1);
  c->line_len -= n + 1;
  return 1;
}

static int line_push(lua_State *L, cs_op *op) {
  lineop *l = (lineop *)op;
  child *c = l->c;
  int timed_out = l->timed_out;
  line_release(l);
  if (timed_out) return cs_fail(L, "ETIMEDOUT", "no line on the process's stdout before the timeout");
  if (!c) return cs_fail(L, "EOF", "the process was closed while a line was awaited");
  return take_line(L, c);
}

static void line_cancel(cs_op *op) {
  lineop *l = (lineop *)op;
  if (l->c && l->c->reader == l) l->c->reader = NULL;
  line_release(l);
}

static void line_timer(uv_timer_t *h) {
  lineop *l = h->data;
  if (l->c && l->c->reader == l) l->c->reader = NULL;
  l->timed_out = 1;
  cs_op_ready(&l->op);
}

/** p:read_line([timeout]) -> line | nil, msg, "EOF" | "ETIMEDOUT" (stdout = "pipe" only) */
static int p_read_line(lua_State *L) {
  child *c = check_child(L);
  double timeout = luaL_optnumber(L, 2, 0);
  lineop *l;
  if (!c->has_out) return luaL_error(L, "read_line needs proc.spawn{stdout = 'pipe'}");
  if (c->reader) return luaL_error(L, "another task is reading this process's stdout");
  if (memchr(c->line, '\n', c->line_len) || c->out_eof || c->line_len == sizeof c->line) return take_line(L, c);
  cs_task_current(L);
  l = calloc(1, sizeof *l);
  if (!l) return luaL_error(L, "out of memory");
  l->c = c;
  l->op.push = line_push;
  l->op.cancel = line_cancel;
  c->reader = l;
  if (timeout > 0) {
    l->has_timer = 1;
    uv_timer_init(cs_loop(), &l->timer);
    l->timer.data = l;
    uv_update_time(cs_loop());
    uv_timer_start(&l->timer, line_timer, (uint64_t)(timeout * 1000.0 + 0.5), 0);
  }
  return cs_yield(L, &l->op);
}

static int p_tostring(lua_State *L) {
  child *c = *check_box(L);
  if (!c) lua_pushliteral(L, "process (closed)");
  else lua_pushfstring(L, "process %d (%s)", (int)c->pid, c->x.exited ? "exited" : "running");
  return 1;
}

/* 'inherit' | 'null' | a path (truncated, created 0644). */
static int stdio_target(lua_State *L, int oidx, const char *key, int fd, uv_stdio_container_t *sc,
                        int *opened) {
  const char *v;
  int out = fd != 0;
  lua_getfield(L, oidx, key);
  v = luaL_optstring(L, -1, "null");
  lua_pop(L, 1);
  if (strcmp(v, "null") == 0) {
    sc->flags = UV_IGNORE;
  } else if (strcmp(v, "inherit") == 0) {
    sc->flags = UV_INHERIT_FD;
    sc->data.fd = fd;
  } else {
    int f = open(v, out ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
    if (f < 0) return -errno;
    sc->flags = UV_INHERIT_FD;
    sc->data.fd = f;
    *opened = f;
  }
  return 0;
}

/** proc.spawn(opts) -> process | nil, msg, code */
static int proc_spawn(lua_State *L) {
  spawnopts so;
  child *c, **box;
  int fds[3] = {-1, -1, -1}, i, rc = 0;
  static const char *const keys[] = {"stdin", "stdout", "stderr"};
  int out_pipe;
  lua_settop(L, 1);
  read_spawnopts(L, 1, &so);
  lua_getfield(L, 1, "stdout");
  out_pipe = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "pipe") == 0;
  lua_pop(L, 1);
  for (i = 0; i < 3 && rc == 0; i++) {
    if (i == 1 && out_pipe) continue; /* below, once the child's struct exists */
    rc = stdio_target(L, 1, keys[i], i, &so.stdio[i], &fds[i]);
    if (rc) {
      const char *path;
      lua_getfield(L, 1, keys[i]);
      path = lua_tostring(L, -1);
      for (i = 0; i < 3; i++)
        if (fds[i] >= 0) close(fds[i]);
      return cs_fail(L, uv_err_name(rc), "%s: %s", path, uv_strerror(rc));
    }
  }
  c = calloc(1, sizeof *c);
  if (!c) {
    for (i = 0; i < 3; i++)
      if (fds[i] >= 0) close(fds[i]);
    return luaL_error(L, "out of memory");
  }
  c->kill_group = so.kill_group;
  c->grace_ms = so.grace_ms;
  c->proc.poll.data = c->timer.data = c->out.data = c;
  uv_timer_init(cs_loop(), &c->timer);
  if (out_pipe) {
    uv_pipe_init(cs_loop(), &c->out, 0);
    c->has_out = 1;
    so.stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    so.stdio[1].data.stream = (uv_stream_t *)&c->out;
  }
  c->t0 = uv_hrtime();
  rc = xproc_spawn(cs_loop(), &c->proc, &so.o, child_exit);
  for (i = 0; i < 3; i++)
    if (fds[i] >= 0) close(fds[i]);
  c->nopen = 2 + c->has_out;
  if (rc != 0) {
    c->nopen--; /* no process handle was made */
    uv_close((uv_handle_t *)&c->timer, child_closed);
    out_close(c);
    return spawn_fail(L, so.o.file, rc);
  }
  if (c->has_out && uv_read_start((uv_stream_t *)&c->out, out_alloc, out_read) != 0) {
    c->out_eof = 1;
    out_close(c);
  }
  c->pid = c->proc.pid;
  uv_unref((uv_handle_t *)&c->proc.poll); /* a server child alone does not keep tasks waiting */
  box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = c;
  luaL_setmetatable(L, PROCESS_MT);
  return 1;
}

/* ---- proc.which ------------------------------------------------------------ */

/** proc.which(name) -> path | nil, msg, "ENOENT" */
static int proc_which(lua_State *L) {
  const char *name = luaL_checkstring(L, 1), *path = getenv("PATH");
  char out[PATH_MAX];
  if (strchr(name, '/')) {
    if (executable(name)) {
      lua_pushvalue(L, 1);
      return 1;
    }
    return cs_fail(L, "ENOENT", "%s: not an executable file", name);
  }
  if (find_in_path(name, path ? path : "/usr/local/bin:/usr/bin:/bin", out, sizeof out) != 0)
    return cs_fail(L, "ENOENT", "%s: not found in PATH", name);
  lua_pushstring(L, out);
  return 1;
}

int luaopen_cseng_proc(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"run", proc_run}, {"spawn", proc_spawn}, {"which", proc_which}, {NULL, NULL}};
  static const luaL_Reg meth[] = {
      {"pid", p_pid}, {"kill", p_kill}, {"wait", p_wait}, {"read_line", p_read_line}, {"close", p_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
      {"__gc", p_close}, {"__close", p_close}, {"__tostring", p_tostring}, {NULL, NULL}};
  cs_new_class(L, PROCESS_MT, meth, meta);
  luaL_newlib(L, funcs);
  return 1;
}
