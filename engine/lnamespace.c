/*
 * lnamespace.c: Linux namespaces, mounts and port relays for the local sandbox. Module
 * cseng.namespace. Everything here needs root (the local provider's base mode runs as root).
 *
 *   namespace.open(pid [, {net=true}]) -> ns | nil, msg, code
 *       A handle on the user namespace (and with net=true the network namespace) of process
 *       pid: a local sandbox's init (jail/cseng-jail.c), which made them. The handle names the
 *       namespaces for as long as it is open, whatever becomes of pid: the engine checks a
 *       command's target against it (a reused pid is refused) and runs slirp4netns and port
 *       relays in it.
 *   ns:path("user"|"net") -> "/proc/<pid>/fd/<n>": a path that opens the namespace while ns is
 *       open
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
 * setns() changes the calling thread only: the loop thread enters a sandbox's network
 * namespace for the few system calls that create a socket there and returns at once.
 */
#include "core.h"
#include "aux.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
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

/** namespace.open(pid [, {net=true}]) */
static int ns_open(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  int net = 0, e = 0;
  char path[64];
  ns_box *n;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    net = cs_opt_bool(L, 2, "net", 0);
  }
  luaL_argcheck(L, pid > 1, 1, "a pid > 1");
  n = lua_newuserdatauv(L, sizeof *n, 0);
  n->user_fd = n->net_fd = -1;
  luaL_setmetatable(L, NS_MT);
  cs_fmt_into(path, sizeof path, "/proc/%lld/ns/user", (long long)pid);
  if ((n->user_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) e = errno;
  if (!e && net) {
    cs_fmt_into(path, sizeof path, "/proc/%lld/ns/net", (long long)pid);
    if ((n->net_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) e = errno;
  }
  if (e) {
    if (n->user_fd >= 0) close(n->user_fd);
    n->user_fd = -1;
    return cs_fail_errno(L, e, "namespace.open: %s", path);
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
  cs_set_integer(L, "connections", r->connections);
  cs_set_integer(L, "open", r->open_pairs);
  cs_set_integer(L, "bytes_in", r->bytes_in);
  cs_set_integer(L, "bytes_out", r->bytes_out);
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

int luaopen_cseng_namespace(lua_State *L) {
  static const luaL_Reg funcs[] = {{"open", ns_open},
                                   {"relay", ns_relay},
                                   {"mount_overlay", ns_mount_overlay},
                                   {"bind_mount", ns_bind_mount},
                                   {"umount", ns_umount},
                                   {NULL, NULL}};
  static const luaL_Reg ns_methods[] = {{"path", ns_path}, {"close", ns_close}, {NULL, NULL}};
  static const luaL_Reg ns_meta[] = {{"__gc", ns_close}, {"__close", ns_close}, {"__tostring", ns_tostring}, {NULL, NULL}};
  static const luaL_Reg relay_methods[] = {{"stats", relay_stats}, {"close", relay_close}, {NULL, NULL}};
  static const luaL_Reg relay_meta[] = {{"__gc", relay_close}, {"__close", relay_close}, {NULL, NULL}};
  cs_new_class(L, NS_MT, ns_methods, ns_meta);
  cs_new_class(L, RELAY_MT, relay_methods, relay_meta);
  luaL_newlib(L, funcs);
  return 1;
}
