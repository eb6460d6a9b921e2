/*
 * lnamespace.c: Linux namespaces, mounts and port relays for the local sandbox. Module
 * cseng.namespace. Everything here needs root (the local provider's base mode runs as root).
 *
 *   namespace.create{uid=, gid=, count=, owner=, net=} -> ns | nil, msg, code
 *       A user namespace whose ids 0..count-1 are the host's uid..uid+count-1 (gid..: the same
 *       by default), owned by the host uid `owner` (default uid): a process running as that uid
 *       may join it (bwrap --userns) with no privilege in the host's namespace, and root inside
 *       it is never root on the host. net=true adds a network namespace owned by it, with its
 *       loopback up and nothing else (no route anywhere). The namespaces live while ns is open;
 *       no process holds them, so nothing lingers when the engine dies.
 *   ns:path("user"|"net") -> "/proc/<pid>/fd/<n>": a path that opens the namespace (for
 *       `3<path` redirections and nsenter --net=path) while ns is open
 *   ns:close() (also __gc, __close)
 *   namespace.relay(ns, port, to_port [, to_host]) -> relay | nil, msg, code
 *       Listens on 127.0.0.1:port inside ns's network namespace and joins every connection made
 *       there to to_host:to_port (default 127.0.0.1) in the engine's own namespace: one host
 *       port made reachable from a sandbox that has no other route to the host's loopback.
 *       relay:stats() -> {connections=, bytes_in=, bytes_out=}; relay:close()
 *   namespace.mount_overlay(target, lowers, upper, work) -> true | nil, msg, code
 *       lowers: an array, top first
 *   namespace.bind_mount(source, target) -> true | nil, msg, code
 *   namespace.umount(target [, {lazy=true}]) -> true | nil, msg, code
 *
 * Why not fork a holder process (`unshare ... sleep`): a holder outlives a crashed engine and
 * must be found and killed; an open descriptor is released by the kernel. The child forked
 * here only unshares and waits on a pipe while the parent writes its id maps, then exits.
 * setns() changes the calling thread only: the loop thread enters a sandbox's network
 * namespace for the few system calls that create a socket there and returns at once.
 */
#include "core.h"
#include "aux.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#define NS_MT "cseng.namespace"
#define RELAY_MT "cseng.namespace.relay"

typedef struct {
  int user_fd, net_fd;
} ns_box;

static ns_box *check_ns(lua_State *L, int idx) {
  ns_box *n = luaL_checkudata(L, idx, NS_MT);
  if (n->user_fd < 0) luaL_error(L, "namespace is closed");
  return n;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC), e = 0;
  size_t n = strlen(text);
  if (fd < 0) return errno;
  if (write(fd, text, n) != (ssize_t)n) e = errno ? errno : EIO;
  close(fd);
  return e;
}

/* Bring "lo" up in the calling thread's network namespace. */
static int loopback_up(void) {
  struct ifreq ifr;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), e = 0;
  if (s < 0) return errno;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) e = errno;
  else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) e = errno;
  }
  close(s);
  return e;
}

/* Run fn inside the network namespace net_fd (this thread only), then come back. */
static int in_netns(int net_fd, int (*fn)(void *), void *arg, int *result) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), e;
  if (self < 0) return errno;
  if (setns(net_fd, CLONE_NEWNET) != 0) {
    e = errno;
    close(self);
    return e;
  }
  *result = fn(arg);
  e = setns(self, CLONE_NEWNET) != 0 ? errno : 0;
  close(self);
  if (e) abort(); /* a loop thread left in a sandbox's network would be a hole: never go on */
  return 0;
}

static int loopback_up_cb(void *arg) {
  (void)arg;
  return loopback_up();
}

/* Children that have been told to exit and are not reaped yet: reaped without waiting at the
 * next create (waiting for a child to be scheduled and exit would put a context switch or
 * two of a busy machine into every sandbox's creation). */
#define REAP_MAX 256
static pid_t to_reap[REAP_MAX];
static int n_reap;

static void reap_done(int block) {
  int i = 0, st;
  while (i < n_reap) {
    pid_t r = waitpid(to_reap[i], &st, block ? 0 : WNOHANG);
    if (r == to_reap[i] || (r < 0 && errno == ECHILD)) to_reap[i] = to_reap[--n_reap];
    else i++;
  }
}

/** namespace.create{uid=, gid=, count=, owner=, net=} */
static int ns_create(lua_State *L) {
  lua_Integer uid, gid, count, owner;
  int net, p1[2], p2[2], e = 0, st = 0;
  char path[64], map[96], c = 0;
  pid_t pid;
  ns_box *n;
  luaL_checktype(L, 1, LUA_TTABLE);
  uid = cs_opt_integer(L, 1, "uid", -1, 1);
  if (uid < 1) return luaL_error(L, "opts.uid must be an integer >= 1");
  gid = cs_opt_integer(L, 1, "gid", uid, 1);
  count = cs_opt_integer(L, 1, "count", 65536, 1);
  owner = cs_opt_integer(L, 1, "owner", uid, 1);
  net = cs_opt_bool(L, 1, "net", 0);
  luaL_argcheck(L, uid + count <= 0xffffffffLL && gid + count <= 0xffffffffLL, 1, "opts.count too large");
  n = lua_newuserdatauv(L, sizeof *n, 0);
  n->user_fd = n->net_fd = -1;
  luaL_setmetatable(L, NS_MT);
  if (pipe2(p1, O_CLOEXEC) != 0) return cs_fail_errno(L, errno, "namespace: pipe");
  if (pipe2(p2, O_CLOEXEC) != 0) {
    e = errno;
    close(p1[0]);
    close(p1[1]);
    return cs_fail_errno(L, e, "namespace: pipe");
  }
  pid = fork();
  if (pid < 0) {
    e = errno;
    close(p1[0]), close(p1[1]), close(p2[0]), close(p2[1]);
    return cs_fail_errno(L, e, "namespace: fork");
  }
  if (pid == 0) {
    /* the child: raw system calls only (the parent may have other threads) */
    close(p1[0]);
    close(p2[1]);
    if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setresgid, (gid_t)owner, (gid_t)owner, (gid_t)owner) != 0 ||
        syscall(SYS_setresuid, (uid_t)owner, (uid_t)owner, (uid_t)owner) != 0)
      _exit(10);
    if (unshare(CLONE_NEWUSER | (net ? CLONE_NEWNET : 0)) != 0) _exit(11);
    if (write(p1[1], &c, 1) != 1) _exit(12);
    if (read(p2[0], &c, 1) < 0) _exit(13);
    _exit(0);
  }
  close(p1[1]);
  close(p2[0]);
  if (read(p1[0], &c, 1) != 1) e = ECHILD; /* the child could not unshare: its status says why */
  if (!e) {
    cs_fmt_into(map, sizeof map, "0 %lld %lld\n", (long long)uid, (long long)count);
    cs_fmt_into(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    e = write_file(path, map);
  }
  if (!e) {
    cs_fmt_into(map, sizeof map, "0 %lld %lld\n", (long long)gid, (long long)count);
    cs_fmt_into(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    e = write_file(path, map);
  }
  if (!e) {
    cs_fmt_into(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    if ((n->user_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) e = errno;
  }
  if (!e && net) {
    cs_fmt_into(path, sizeof path, "/proc/%d/ns/net", (int)pid);
    if ((n->net_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) e = errno;
  }
  close(p2[1]); /* the child exits */
  close(p1[0]);
  reap_done(0);
  if (e || n_reap == REAP_MAX) {
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  } else {
    to_reap[n_reap++] = pid;
  }
  if (e == ECHILD && WIFEXITED(st)) {
    const char *what = WEXITSTATUS(st) == 10 ? "becoming the namespace's owner" : "unshare(CLONE_NEWUSER)";
    if (n->user_fd >= 0) close(n->user_fd);
    n->user_fd = -1;
    return cs_fail(L, "EPERM", "namespace: %s failed in the child (exit %d): needs root and user namespaces", what,
                   WEXITSTATUS(st));
  }
  if (!e && net) {
    int r = 0;
    e = in_netns(n->net_fd, loopback_up_cb, NULL, &r);
    if (!e) e = r;
  }
  if (e) {
    if (n->user_fd >= 0) close(n->user_fd);
    if (n->net_fd >= 0) close(n->net_fd);
    n->user_fd = n->net_fd = -1;
    return cs_fail_errno(L, e, "namespace: setting up the namespaces of child %d", (int)pid);
  }
  return 1;
}

static int ns_path(lua_State *L) {
  ns_box *n = check_ns(L, 1);
  const char *which = luaL_checkstring(L, 2);
  int fd = strcmp(which, "user") == 0 ? n->user_fd : strcmp(which, "net") == 0 ? n->net_fd : -2;
  if (fd == -2) return luaL_error(L, "namespace: unknown kind '%s' (user or net)", which);
  if (fd < 0) return 0;
  lua_pushfstring(L, "/proc/%d/fd/%d", (int)getpid(), fd);
  return 1;
}

static int ns_close(lua_State *L) {
  ns_box *n = luaL_checkudata(L, 1, NS_MT);
  if (n->user_fd >= 0) close(n->user_fd);
  if (n->net_fd >= 0) close(n->net_fd);
  n->user_fd = n->net_fd = -1;
  return 0;
}

static int ns_tostring(lua_State *L) {
  ns_box *n = luaL_checkudata(L, 1, NS_MT);
  lua_pushfstring(L, "cseng.namespace (%s)", n->user_fd < 0 ? "closed" : n->net_fd < 0 ? "user" : "user+net");
  return 1;
}

/* ---- relays ---------------------------------------------------------------
 * A relay owns its listening socket and every connection pair. A pair is two
 * TCP handles (the sandbox's side, the host's side); each reads into a buffer
 * that is written to the other, reading stops while a write is in flight
 * (backpressure of one buffer). The first EOF or error closes both. */

typedef struct relay relay;
typedef struct pair pair;

struct relay {
  uv_tcp_t server;
  struct sockaddr_in to;
  int closed, open_pairs, handle_closed;
  lua_Integer connections, bytes_in, bytes_out;
  pair *pairs;
};

typedef struct side {
  uv_tcp_t tcp;
  pair *p;
  char buf[64 * 1024];
  uv_write_t wr;
  uv_shutdown_t sd;
  int writing, eof;
} side;

struct pair {
  side in, out; /* in: the sandbox's connection; out: to the host's port */
  relay *r;
  uv_connect_t conn;
  int connected, closing, closes;
  pair *next, **prevp;
};

static void relay_maybe_free(relay *r) {
  if (r->closed && r->handle_closed && r->open_pairs == 0) free(r);
}

static void pair_closed(uv_handle_t *h) {
  side *s = h->data;
  pair *p = s->p;
  if (++p->closes < 2) return;
  relay *r = p->r;
  if (p->next) p->next->prevp = p->prevp;
  *p->prevp = p->next;
  r->open_pairs--;
  free(p);
  relay_maybe_free(r);
}

static void pair_close(pair *p) {
  if (p->closing) return;
  p->closing = 1;
  uv_close((uv_handle_t *)&p->in.tcp, pair_closed);
  uv_close((uv_handle_t *)&p->out.tcp, pair_closed);
}

static void side_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  side *s = h->data;
  (void)hint;
  *buf = uv_buf_init(s->buf, sizeof s->buf);
}

static void side_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void side_written(uv_write_t *w, int status) {
  side *from = w->data;
  pair *p = from->p;
  from->writing = 0;
  if (status < 0 || p->closing) {
    pair_close(p);
    return;
  }
  uv_read_start((uv_stream_t *)&from->tcp, side_alloc, side_read);
}

static void side_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  side *from = st->data;
  pair *p = from->p;
  side *to = from == &p->in ? &p->out : &p->in;
  uv_buf_t b;
  if (n == 0) return;
  if (n == UV_EOF) {
    /* reads stop while a write is in flight, so everything read from here has been
     * written: pass the half-close on, and end when both directions have */
    from->eof = 1;
    uv_read_stop(st);
    if (to->eof || uv_shutdown(&from->sd, (uv_stream_t *)&to->tcp, NULL) != 0) pair_close(p);
    return;
  }
  if (n < 0) {
    pair_close(p);
    return;
  }
  if (from == &p->in) p->r->bytes_in += n;
  else p->r->bytes_out += n;
  uv_read_stop(st); /* until this buffer is written */
  b = uv_buf_init(buf->base, (unsigned)n);
  from->writing = 1;
  from->wr.data = from;
  if (uv_write(&from->wr, (uv_stream_t *)&to->tcp, &b, 1, side_written) != 0) {
    from->writing = 0;
    pair_close(p);
  }
}

static void out_connected(uv_connect_t *c, int status) {
  pair *p = c->data;
  if (status < 0 || p->closing) {
    pair_close(p);
    return;
  }
  p->connected = 1;
  uv_read_start((uv_stream_t *)&p->in.tcp, side_alloc, side_read);
  uv_read_start((uv_stream_t *)&p->out.tcp, side_alloc, side_read);
}

static void relay_accept(uv_stream_t *server, int status) {
  relay *r = server->data;
  pair *p;
  if (status < 0 || r->closed) return;
  p = calloc(1, sizeof *p);
  if (!p) return;
  p->r = r;
  p->in.p = p->out.p = p;
  uv_tcp_init(cs_loop(), &p->in.tcp);
  uv_tcp_init(cs_loop(), &p->out.tcp);
  p->in.tcp.data = &p->in;
  p->out.tcp.data = &p->out;
  p->next = r->pairs;
  if (r->pairs) r->pairs->prevp = &p->next;
  p->prevp = &r->pairs;
  r->pairs = p;
  r->open_pairs++;
  if (uv_accept(server, (uv_stream_t *)&p->in.tcp) != 0) {
    pair_close(p);
    return;
  }
  r->connections++;
  p->conn.data = p;
  /* the engine's thread is in its own namespace again: this connects on the host */
  if (uv_tcp_connect(&p->conn, &p->out.tcp, (const struct sockaddr *)&r->to, out_connected) != 0) pair_close(p);
}

typedef struct {
  int port, fd, err;
} listen_args;

static int listen_cb(void *arg) {
  listen_args *a = arg;
  struct sockaddr_in sa;
  int one = 1;
  a->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (a->fd < 0) return a->err = errno;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)a->port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(a->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(a->fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(a->fd, 128) != 0) {
    a->err = errno;
    close(a->fd);
    a->fd = -1;
  }
  return a->err;
}

static relay **check_relay(lua_State *L, int idx) { return luaL_checkudata(L, idx, RELAY_MT); }

static void relay_handle_closed(uv_handle_t *h) {
  relay *r = h->data;
  r->handle_closed = 1;
  relay_maybe_free(r);
}

static int relay_close(lua_State *L) {
  relay **box = check_relay(L, 1), *r = *box;
  pair *p, *next;
  if (!r) return 0;
  *box = NULL;
  r->closed = 1;
  for (p = r->pairs; p; p = next) {
    next = p->next;
    pair_close(p);
  }
  uv_close((uv_handle_t *)&r->server, relay_handle_closed);
  return 0;
}

static int relay_stats(lua_State *L) {
  relay *r = *check_relay(L, 1);
  if (!r) return luaL_error(L, "relay is closed");
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, r->connections);
  lua_setfield(L, -2, "connections");
  lua_pushinteger(L, r->open_pairs);
  lua_setfield(L, -2, "open");
  lua_pushinteger(L, r->bytes_in);
  lua_setfield(L, -2, "bytes_in");
  lua_pushinteger(L, r->bytes_out);
  lua_setfield(L, -2, "bytes_out");
  return 1;
}

/** namespace.relay(ns, port, to_port [, to_host]) */
static int ns_relay(lua_State *L) {
  ns_box *n = check_ns(L, 1);
  lua_Integer port = luaL_checkinteger(L, 2), to_port = luaL_checkinteger(L, 3);
  const char *to_host = luaL_optstring(L, 4, "127.0.0.1");
  listen_args a = {0, -1, 0};
  relay **box, *r;
  int e, rc;
  luaL_argcheck(L, port > 0 && port <= 65535, 2, "port must be 1..65535");
  luaL_argcheck(L, to_port > 0 && to_port <= 65535, 3, "to_port must be 1..65535");
  if (n->net_fd < 0) return cs_fail(L, "EINVAL", "namespace.relay: the namespace has no network of its own");
  box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, RELAY_MT);
  r = calloc(1, sizeof *r);
  if (!r) return cs_fail(L, "ENOMEM", "namespace.relay: out of memory");
  if (uv_ip4_addr(to_host, (int)to_port, &r->to) != 0) {
    free(r);
    return cs_fail(L, "EINVAL", "namespace.relay: to_host must be an IPv4 address, not '%s'", to_host);
  }
  a.port = (int)port;
  e = in_netns(n->net_fd, listen_cb, &a, &rc);
  if (!e) e = a.err;
  if (e) {
    free(r);
    return cs_fail_errno(L, e, "namespace.relay: listening on 127.0.0.1:%d in the sandbox's network", (int)port);
  }
  uv_tcp_init(cs_loop(), &r->server);
  r->server.data = r;
  if ((rc = uv_tcp_open(&r->server, a.fd)) != 0 || (rc = uv_listen((uv_stream_t *)&r->server, 128, relay_accept)) != 0) {
    r->closed = 1;
    uv_close((uv_handle_t *)&r->server, relay_handle_closed);
    return cs_fail(L, "EIO", "namespace.relay: %s", uv_strerror(rc));
  }
  *box = r;
  return 1;
}

/* ---- mounts ------------------------------------------------------------------ */

/** namespace.mount_overlay(target, lowers, upper, work) */
static int ns_mount_overlay(lua_State *L) {
  const char *target = luaL_checkstring(L, 1), *upper, *work;
  luaL_Buffer b;
  lua_Integer i, n;
  luaL_checktype(L, 2, LUA_TTABLE);
  upper = luaL_checkstring(L, 3);
  work = luaL_checkstring(L, 4);
  n = (lua_Integer)lua_rawlen(L, 2);
  luaL_argcheck(L, n > 0, 2, "lowers must name at least one directory");
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "lowerdir=");
  for (i = 1; i <= n; i++) {
    size_t len;
    const char *s;
    lua_rawgeti(L, 2, i);
    s = lua_tolstring(L, -1, &len);
    if (!s || len == 0 || strpbrk(s, ":,\n")) return luaL_error(L, "lowers[%d] must be a path without ':' or ','", (int)i);
    lua_pop(L, 1);
    if (i > 1) luaL_addchar(&b, ':');
    luaL_addlstring(&b, s, len);
  }
  if (strpbrk(upper, ":,\n") || strpbrk(work, ":,\n")) return luaL_error(L, "upper and work must be paths without ':' or ','");
  luaL_addstring(&b, ",upperdir=");
  luaL_addstring(&b, upper);
  luaL_addstring(&b, ",workdir=");
  luaL_addstring(&b, work);
  luaL_pushresult(&b);
  if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, lua_tostring(L, -1)) != 0)
    return cs_fail_errno(L, errno, "mounting the overlay at %s", target);
  lua_pushboolean(L, 1);
  return 1;
}

/** namespace.bind_mount(source, target) */
static int ns_bind_mount(lua_State *L) {
  const char *source = luaL_checkstring(L, 1), *target = luaL_checkstring(L, 2);
  if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) != 0) return cs_fail_errno(L, errno, "bind-mounting %s at %s", source, target);
  lua_pushboolean(L, 1);
  return 1;
}

/** namespace.umount(target [, {lazy=}]) */
static int ns_umount(lua_State *L) {
  const char *target = luaL_checkstring(L, 1);
  int lazy = cs_opt_bool(L, 2, "lazy", 0);
  if (umount2(target, (lazy ? MNT_DETACH : 0) | UMOUNT_NOFOLLOW) != 0) return cs_fail_errno(L, errno, "unmounting %s", target);
  lua_pushboolean(L, 1);
  return 1;
}

static void reap_at_exit(void) { reap_done(1); }

int luaopen_cseng_namespace(lua_State *L) {
  static const luaL_Reg funcs[] = {{"create", ns_create},
                                   {"relay", ns_relay},
                                   {"mount_overlay", ns_mount_overlay},
                                   {"bind_mount", ns_bind_mount},
                                   {"umount", ns_umount},
                                   {NULL, NULL}};
  static const luaL_Reg ns_methods[] = {{"path", ns_path}, {"close", ns_close}, {NULL, NULL}};
  static const luaL_Reg ns_meta[] = {{"__gc", ns_close}, {"__close", ns_close}, {"__tostring", ns_tostring}, {NULL, NULL}};
  static const luaL_Reg relay_methods[] = {{"stats", relay_stats}, {"close", relay_close}, {NULL, NULL}};
  static const luaL_Reg relay_meta[] = {{"__gc", relay_close}, {"__close", relay_close}, {NULL, NULL}};
  static int hooked;
  if (!hooked) cs_at_shutdown(reap_at_exit), hooked = 1;
  cs_new_class(L, NS_MT, ns_methods, ns_meta);
  cs_new_class(L, RELAY_MT, relay_methods, relay_meta);
  luaL_newlib(L, funcs);
  return 1;
}
