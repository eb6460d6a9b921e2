/*
 * lfs.c: local files and directories. Module cseng.fs.
 *   read, write (atomic), append (one write(2)), mkdir_p, list, walk, stat,
 *   lstat, exists, remove, remove_tree, tempdir, copy_tree, symlink, readlink,
 *   chmod, lchown, shift_owner, rename, and the pure path helpers basename, dirname, join.
 *   fs.commit_stats() -> {records=, fsyncs=}: synced appends made inside tasks, and the
 *   fsyncs that covered them (group commit, see fs.append).
 *
 * Every call is synchronous: these are fast local-disk operations and they
 * block the loop (every task) while they run; fsync and large trees take
 * longer. Expected failures return nil, "<path>: <strerror>", "<ERRNO NAME>"
 * ("ENOENT", "EACCES", ...); misuse raises. Tree operations never follow
 * symlinks inside the tree: they work relative to directory descriptors
 * opened with O_NOFOLLOW, so a link cannot redirect them out of the tree.
 */
#include "core.h"
#include "aux.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_CHUNK (256 * 1024)

/* ---- errors and arguments ------------------------------------------------ */

/* A mode: an integer (tonumber('755', 8)) or a string of octal digits ("0755"). */
static mode_t check_mode_value(lua_State *L, int idx, const char *what) {
  lua_Integer m;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *s = lua_tostring(L, idx);
    char *end;
    long v = strtol(s, &end, 8);
    if (*s == '\0' || *end != '\0') return (mode_t)luaL_error(L, "%s: invalid octal mode '%s'", what, s);
    m = v;
  } else {
    m = luaL_checkinteger(L, idx);
  }
  if (m < 0 || m > 07777) return (mode_t)luaL_error(L, "%s: mode out of range", what);
  return (mode_t)m;
}

static mode_t opt_mode(lua_State *L, int idx, mode_t def) {
  if (lua_isnoneornil(L, idx)) return def;
  return check_mode_value(L, idx, "mode");
}

static const char *type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "link";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISCHR(m)) return "char";
  if (S_ISBLK(m)) return "block";
  return "other";
}

/* write(2) all of buf, looping only on short writes and EINTR. */
static int write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    buf += w;
    n -= (size_t)w;
  }
  return 0;
}

/* A path with its trailing slashes removed (except a lone "/"), so that a
 * symlink named "link/" is the link itself, not the directory it points to. */
static const char *strip_slashes(lua_State *L, int idx) {
  size_t n;
  const char *p = luaL_checklstring(L, idx, &n);
  if (n > 1 && p[n - 1] == '/') {
    while (n > 1 && p[n - 1] == '/') n--;
    lua_pushlstring(L, p, n);
    lua_replace(L, idx);
    p = lua_tostring(L, idx);
  }
  return p;
}

/* ---- whole files ------------------------------------------------------- */

/** fs.read(path) -> data | nil, msg, code */
static int fs_read(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  luaL_Buffer b;
  int fd = open(path, O_RDONLY | O_CLOEXEC), e;
  if (fd < 0) return cs_fail_errno(L, errno, "%s", path);
  luaL_buffinit(L, &b);
  for (;;) {
    char *p = luaL_prepbuffsize(&b, 64 * 1024);
    ssize_t r = read(fd, p, 64 * 1024);
    if (r < 0) {
      if (errno == EINTR) continue;
      e = errno;
      close(fd);
      lua_pop(L, 1); /* the buffer */
      return cs_fail_errno(L, e, "%s", path);
    }
    if (r == 0) break;
    luaL_addsize(&b, (size_t)r);
  }
  close(fd);
  luaL_pushresult(&b);
  return 1;
}

static int fsync_dir_of(const char *path) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  int fd, r;
  if (!slash) cs_fmt_into(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else cs_fmt_into(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  r = fsync(fd);
  close(fd);
  return r;
}

/** fs.write(path, data, {mode=0644, sync=false}) -> true | nil, msg, code
 * Atomic: writes a temporary file in the same directory, then renames it over
 * path, so readers see the old or the new content, never a mix. With sync, the
 * file and its directory are fsynced before returning. */
static int fs_write(lua_State *L) {
  size_t n, plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  const char *data = luaL_checklstring(L, 2, &n);
  mode_t mode;
  int sync, fd, e;
  const char *slash, *base;
  char tmp[PATH_MAX];
  cs_opt_field(L, 3, "mode");
  mode = opt_mode(L, -1, 0644);
  lua_pop(L, 1);
  sync = cs_opt_bool(L, 3, "sync", 0);
  slash = strrchr(path, '/');
  base = slash ? slash + 1 : path;
  if (*base == '\0') return cs_fail_errno(L, EISDIR, "%s", path);
  if (snprintf(tmp, sizeof tmp, "%.*s.%s.tmp-XXXXXX", (int)(base - path), path, base) >= (int)sizeof tmp)
    return cs_fail_errno(L, ENAMETOOLONG, "%s", path);
  fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return cs_fail_errno(L, errno, "%s", path);
  if (fchmod(fd, mode) != 0 || write_all(fd, data, n) != 0 || (sync && fsync(fd) != 0)) {
    e = errno;
    close(fd);
    unlink(tmp);
    return cs_fail_errno(L, e, "%s", path);
  }
  if (close(fd) != 0) {
    e = errno;
    unlink(tmp);
    return cs_fail_errno(L, e, "%s", path);
  }
  if (rename(tmp, path) != 0) {
    e = errno;
    unlink(tmp);
    return cs_fail_errno(L, e, "%s", path);
  }
  if (sync && fsync_dir_of(path) != 0) return cs_fail_errno(L, errno, "%s (fsync of its directory)", path);
  lua_pushboolean(L, 1);
  return 1;
}

/** fs.append(path, data, {sync=false}) -> true | nil, msg, code
 * One write(2) of the whole data on an O_APPEND descriptor (looping only if the
 * kernel writes short), so concurrent appenders, in this process or others,
 * never interleave within a record. Creates the file (0644) if missing. */
/* A synced append inside a task runs on libuv's threadpool: fsync can take tens of
 * milliseconds, and on the loop thread it would stall every other task (and skew their
 * timings). The task yields meanwhile. The write completes even if the task is cancelled:
 * an allocation record must land.
 *
 * Group commit: per file, one batch is written and fsynced at a time; the synced appends made
 * while it is in flight (and those of the loop turn that started it, after the first) wait in
 * the next batch, which is written in order and fsynced once. So 1,024 tasks recording their
 * allocations at once cost a few fsyncs, not 1,024; each task still resumes only after the
 * fsync that covers its record (before any sandbox is used). */
typedef struct appendop {
  cs_op op;
  char *data;
  const char *path; /* its committer's (committers live as long as the process) */
  size_t n;
  int err, cancelled;
  struct appendop *next;
} appendop;

typedef struct committer {
  uv_work_t work;
  char *path;
  appendop *running, *pending, *pending_tail; /* the batch being written; the next one */
  int inflight;
  struct committer *next;
} committer;

static committer *committers;
static lua_Integer commit_records, commit_fsyncs;

static void appendop_free(appendop *a) {
  free(a->data);
  free(a);
}

/* threadpool: every record of the batch (one write(2) each, in order), then one fsync */
static void commit_work(uv_work_t *w) {
  committer *c = w->data;
  appendop *a;
  int e = 0, fd = open(c->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) e = errno;
  for (a = c->running; a && !e; a = a->next)
    if (write_all(fd, a->data, a->n) != 0) e = errno;
  if (fd >= 0) {
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
  }
  for (a = c->running; a; a = a->next) a->err = e;
}

static void commit_after(uv_work_t *w, int status);

static void commit_start(committer *c) {
  commit_fsyncs++;
  c->running = c->pending;
  c->pending = c->pending_tail = NULL;
  c->inflight = 1;
  if (uv_queue_work(cs_loop(), &c->work, commit_work, commit_after) == 0) return;
  /* the threadpool refused: written here; the caller completes it (commit_done) */
  commit_work(&c->work);
  c->inflight = 0;
}

static void commit_done(committer *c) {
  appendop *a = c->running, *next;
  c->running = NULL;
  c->inflight = 0;
  for (; a; a = next) {
    next = a->next;
    a->next = NULL;
    if (a->cancelled) appendop_free(a);
    else cs_op_ready(&a->op);
  }
  if (c->pending) {
    commit_start(c);
    if (!c->inflight) commit_done(c);
  }
}

static void commit_after(uv_work_t *w, int status) {
  (void)status;
  commit_done(w->data);
}

static int append_push(lua_State *L, cs_op *op) {
  appendop *a = (appendop *)op;
  int e = a->err;
  const char *path = a->path;
  appendop_free(a);
  if (e) return cs_fail_errno(L, e, "%s", path);
  lua_pushboolean(L, 1);
  return 1;
}

static void append_cancel(cs_op *op) {
  appendop *a = (appendop *)op;
  if (a->op.ready) appendop_free(a); /* the work is done: nothing else refers to it */
  else a->cancelled = 1;             /* commit_done frees it */
}

static committer *committer_get(const char *path) {
  committer *c;
  for (c = committers; c; c = c->next)
    if (strcmp(c->path, path) == 0) return c;
  if (!(c = calloc(1, sizeof *c)) || !(c->path = strdup(path))) {
    free(c);
    return NULL;
  }
  c->work.data = c;
  c->next = committers;
  committers = c;
  return c;
}

static int fs_commit_stats(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, commit_records);
  lua_setfield(L, -2, "records");
  lua_pushinteger(L, commit_fsyncs);
  lua_setfield(L, -2, "fsyncs");
  return 1;
}

static int fs_append(lua_State *L) {
  size_t n;
  const char *path = luaL_checkstring(L, 1);
  const char *data = luaL_checklstring(L, 2, &n);
  int sync = cs_opt_bool(L, 3, "sync", 0), e;
  int fd;
  if (sync && cs_task_running(L)) {
    appendop *a;
    committer *c;
    cs_task_current(L); /* delivers a pending cancellation before anything starts */
    a = calloc(1, sizeof *a);
    if (!a || !(a->data = malloc(n ? n : 1)) || !(c = committer_get(path))) {
      if (a) appendop_free(a);
      return luaL_error(L, "out of memory");
    }
    memcpy(a->data, data, n);
    a->n = n;
    a->path = c->path;
    commit_records++;
    a->op.push = append_push;
    a->op.cancel = append_cancel;
    if (c->pending_tail) c->pending_tail->next = a;
    else c->pending = a;
    c->pending_tail = a;
    if (!c->inflight) {
      commit_start(c);
      if (!c->inflight) commit_done(c); /* written here: the task resumes at once */
    }
    return cs_yield(L, &a->op);
  }
  fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return cs_fail_errno(L, errno, "%s", path);
  if (write_all(fd, data, n) != 0 || (sync && fsync(fd) != 0)) {
    e = errno;
    close(fd);
    return cs_fail_errno(L, e, "%s", path);
  }
  if (close(fd) != 0) return cs_fail_errno(L, errno, "%s", path);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- directories ------------------------------------------------------- */

/** fs.mkdir_p(path, mode=0755) -> true | nil, msg, code (existing directories are fine) */
static int fs_mkdir_p(lua_State *L) {
  size_t n, i;
  const char *path = luaL_checklstring(L, 1, &n);
  mode_t mode = opt_mode(L, 2, 0755);
  char buf[PATH_MAX];
  struct stat st;
  if (n == 0) return cs_fail_errno(L, ENOENT, "%s", path);
  if (n >= sizeof buf) return cs_fail_errno(L, ENAMETOOLONG, "%s", path);
  memcpy(buf, path, n + 1);
  for (i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    if (buf[i - 1] == '/') continue; /* "a//b" */
    buf[i] = '\0';
    if (mkdir(buf, mode) != 0) {
      int e = errno;
      if (e != EEXIST) return cs_fail_errno(L, e, "%s", buf);
      if (stat(buf, &st) != 0) return cs_fail_errno(L, errno, "%s", buf);
      if (!S_ISDIR(st.st_mode)) return cs_fail_errno(L, i == n ? EEXIST : ENOTDIR, "%s", buf);
    }
    buf[i] = path[i];
  }
  lua_pushboolean(L, 1);
  return 1;
}

typedef struct {
  const char *s;
  size_t len;
  int idx;
} sortkey;

static int sortkey_cmp(const void *a, const void *b) {
  const sortkey *x = a, *y = b;
  size_t m = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->s, y->s, m);
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len;
}

/* Sort the array at idx (1..n) in place by byte order of each element's
 * string, or of its field `field` when the elements are tables. */
static void sort_array(lua_State *L, int idx, lua_Integer n, const char *field) {
  lua_Integer i;
  sortkey *k;
  idx = lua_absindex(L, idx);
  if (n < 2) return;
  k = lua_newuserdatauv(L, (size_t)n * sizeof *k, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, idx, i + 1);
    if (field) {
      lua_getfield(L, -1, field);
      lua_remove(L, -2);
    }
    k[i].s = lua_tolstring(L, -1, &k[i].len); /* anchored by the element itself */
    k[i].idx = (int)i + 1;
    lua_pop(L, 1);
  }
  qsort(k, (size_t)n, sizeof *k, sortkey_cmp);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, idx, k[i].idx);
    lua_rawseti(L, -2, i + 1);
  }
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, -1, i + 1);
    lua_rawseti(L, idx, i + 1);
  }
  lua_pop(L, 2);
}

/** fs.list(dir) -> {names...} sorted by byte order, without . and .. */
static int fs_list(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  struct dirent *de;
  lua_Integer n = 0;
  if (!d) return cs_fail_errno(L, errno, "%s", path);
  lua_newtable(L);
  errno = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || (de->d_name[1] == '.' && de->d_name[2] == '\0')))
      continue;
    lua_pushstring(L, de->d_name);
    lua_rawseti(L, -2, ++n);
  }
  if (errno != 0) {
    int e = errno;
    closedir(d);
    return cs_fail_errno(L, e, "%s", path);
  }
  closedir(d);
  sort_array(L, -1, n, NULL);
  return 1;
}

/* Walk state: the output array at index out, a path buffer for names. */
typedef struct {
  lua_State *L;
  int out;
  lua_Integer n;
  char rel[PATH_MAX];
  int err;
  char errpath[PATH_MAX];
} walker;

/* type, size and mode (permission bits) of st into the table on top of the stack */
static void set_type_size_mode(lua_State *L, const struct stat *st) {
  lua_pushstring(L, type_name(st->st_mode));
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st->st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, st->st_mode & 07777);
  lua_setfield(L, -2, "mode");
}

static void walk_add(walker *w, const char *rel, const struct stat *st) {
  lua_State *L = w->L;
  lua_createtable(L, 0, 4);
  lua_pushstring(L, rel);
  lua_setfield(L, -2, "path");
  set_type_size_mode(L, st);
  lua_rawseti(L, w->out, ++w->n);
}

/* Walk the directory open at fd (consumed), whose relative path is w->rel. */
static int walk_dir(walker *w, int fd, const char *abs) {
  DIR *d = fdopendir(fd);
  struct dirent *de;
  size_t len = strlen(w->rel);
  if (!d) {
    w->err = errno;
    cs_fmt_into(w->errpath, sizeof w->errpath, "%s", abs);
    close(fd);
    return -1;
  }
  while ((errno = 0, de = readdir(d)) != NULL) {
    struct stat st;
    const char *name = de->d_name;
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
    if (len + strlen(name) + 2 > sizeof w->rel) {
      w->err = ENAMETOOLONG;
      cs_fmt_into(w->errpath, sizeof w->errpath, "%s/%s/%s", abs, w->rel, name);
      closedir(d);
      return -1;
    }
    if (len) cs_fmt_into(w->rel + len, sizeof w->rel - len, "/%s", name);
    else cs_fmt_into(w->rel, sizeof w->rel, "%s", name);
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      w->err = errno;
      cs_fmt_into(w->errpath, sizeof w->errpath, "%s/%s", abs, w->rel);
      closedir(d);
      return -1;
    }
    walk_add(w, w->rel, &st);
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 || walk_dir(w, sub, abs) != 0) {
        if (sub < 0) {
          w->err = errno;
          cs_fmt_into(w->errpath, sizeof w->errpath, "%s/%s", abs, w->rel);
        }
        closedir(d);
        return -1;
      }
    }
    w->rel[len] = '\0';
  }
  if (errno != 0) {
    w->err = errno;
    cs_fmt_into(w->errpath, sizeof w->errpath, "%s/%s", abs, w->rel);
    closedir(d);
    return -1;
  }
  closedir(d);
  return 0;
}

/** fs.walk(dir) -> {{path=, type=, size=, mode=}...}: every entry below dir,
 * paths relative to dir, sorted by byte order (so a directory precedes its
 * contents); symlinks are reported as "link" and never followed. */
static int fs_walk(lua_State *L) {
  const char *path = strip_slashes(L, 1);
  walker *w;
  int fd;
  lua_settop(L, 1);
  w = lua_newuserdatauv(L, sizeof *w, 0); /* index 2, collected with the call */
  memset(w, 0, sizeof *w);
  w->L = L;
  lua_newtable(L);
  w->out = lua_gettop(L);
  fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return cs_fail_errno(L, errno, "%s", path);
  if (walk_dir(w, fd, path) != 0) return cs_fail_errno(L, w->err, "%s", w->errpath);
  sort_array(L, w->out, w->n, "path");
  return 1;
}

/* ---- metadata ------------------------------------------------------------ */

static void push_stat(lua_State *L, const struct stat *st) {
  lua_createtable(L, 0, 7);
  set_type_size_mode(L, st);
  lua_pushnumber(L, (double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec / 1e9);
  lua_setfield(L, -2, "mtime");
  lua_pushinteger(L, (lua_Integer)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec);
  lua_setfield(L, -2, "mtime_ns");
  lua_pushinteger(L, st->st_uid);
  lua_setfield(L, -2, "uid");
  lua_pushinteger(L, st->st_gid);
  lua_setfield(L, -2, "gid");
}

/* statfn (stat or lstat) of path pushed as push_stat's table, or nil, msg, code */
static int stat_with(lua_State *L, const char *path, int (*statfn)(const char *, struct stat *)) {
  struct stat st;
  if (statfn(path, &st) != 0) return cs_fail_errno(L, errno, "%s", path);
  push_stat(L, &st);
  return 1;
}

/** fs.stat(path) -> {type, size, mode, mtime, mtime_ns, uid, gid} | nil, msg, code (follows symlinks) */
static int fs_stat(lua_State *L) { return stat_with(L, luaL_checkstring(L, 1), stat); }

/** fs.lstat(path): as stat, but a symlink is reported itself (type "link") */
static int fs_lstat(lua_State *L) { return stat_with(L, strip_slashes(L, 1), lstat); }

/** fs.exists(path) -> boolean: whether the name exists (a dangling symlink exists) */
static int fs_exists(lua_State *L) {
  const char *path = strip_slashes(L, 1);
  struct stat st;
  lua_pushboolean(L, lstat(path, &st) == 0);
  return 1;
}

/** fs.remove(path) -> true | nil, msg, code: a file, a symlink, or an empty directory */
static int fs_remove(lua_State *L) {
  const char *path = strip_slashes(L, 1);
  if (unlink(path) != 0) {
    if (errno != EISDIR || rmdir(path) != 0) return cs_fail_errno(L, errno, "%s", path);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- remove_tree ------------------------------------------------------- */

typedef struct {
  int err;
  char path[PATH_MAX]; /* the entry being worked on, for messages */
} treectx;

/* Append "/name" to the message path buf (of PATH_MAX bytes) at len; returns the new length. */
static size_t path_push(char *buf, size_t len, const char *name) {
  int w = snprintf(buf + len, PATH_MAX - len, "/%s", name);
  return (w < 0 || (size_t)w >= PATH_MAX - len) ? PATH_MAX - 1 : len + (size_t)w;
}

/* Remove name (relative to dfd) and everything below it, never following a
 * symlink: directories are opened with O_NOFOLLOW and emptied through their
 * own descriptor. A directory without owner rwx is chmodded first, as
 * extracted trees (module caches, read-only checkouts) often have 0555 dirs. */
static int rm_at(treectx *c, int dfd, const char *name, size_t len) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return 0; /* raced with another remover: gone is what we want */
    c->err = errno;
    return -1;
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d;
    struct dirent *de;
    if (fd < 0) {
      c->err = errno;
      return -1;
    }
    if ((st.st_mode & S_IRWXU) != S_IRWXU) (void)fchmod(fd, (st.st_mode & 07777) | S_IRWXU);
    if (!(d = fdopendir(fd))) {
      c->err = errno;
      close(fd);
      return -1;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
      const char *n = de->d_name;
      size_t sub;
      if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
      sub = path_push(c->path, len, n);
      if (rm_at(c, dirfd(d), n, sub) != 0) {
        closedir(d);
        return -1;
      }
      c->path[len] = '\0';
    }
    if (errno != 0) {
      c->err = errno;
      closedir(d);
      return -1;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
      c->err = errno;
      return -1;
    }
    return 0;
  }
  if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT) {
    c->err = errno;
    return -1;
  }
  return 0;
}

/** fs.remove_tree(path) -> true | nil, msg, code
 * Removes path and everything below it. A symlink (at the top or inside) is
 * removed, never followed. A missing path is an error with code "ENOENT". */
static int fs_remove_tree(lua_State *L) {
  const char *path = strip_slashes(L, 1);
  treectx *c;
  struct stat st;
  if (lstat(path, &st) != 0) return cs_fail_errno(L, errno, "%s", path);
  c = lua_newuserdatauv(L, sizeof *c, 0);
  c->err = 0;
  cs_fmt_into(c->path, sizeof c->path, "%s", path);
  if (rm_at(c, AT_FDCWD, path, strlen(c->path)) != 0) return cs_fail_errno(L, c->err, "%s", c->path);
  lua_pushboolean(L, 1);
  return 1;
}

/** fs.tempdir(prefix="cseng-") -> path of a new private (0700) directory under $TMPDIR or /tmp */
static int fs_tempdir(lua_State *L) {
  const char *prefix = luaL_optstring(L, 1, "cseng-");
  const char *base = getenv("TMPDIR");
  char tmpl[PATH_MAX];
  luaL_argcheck(L, strchr(prefix, '/') == NULL, 1, "prefix must not contain '/'");
  if (!base || !*base) base = "/tmp";
  if (snprintf(tmpl, sizeof tmpl, "%s/%sXXXXXX", base, prefix) >= (int)sizeof tmpl)
    return cs_fail_errno(L, ENAMETOOLONG, "%s", base);
  if (!mkdtemp(tmpl)) return cs_fail_errno(L, errno, "%s/%sXXXXXX", base, prefix);
  lua_pushstring(L, tmpl);
  return 1;
}

/* ---- copy_tree ------------------------------------------------------------ */

typedef struct {
  int err;
  char path[PATH_MAX]; /* the source entry being copied, for messages */
  char buf[COPY_CHUNK];
} copyctx;

static int copy_file_data(copyctx *c, int in, int out) {
  for (;;) {
    ssize_t r = read(in, c->buf, sizeof c->buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) return 0;
    if (write_all(out, c->buf, (size_t)r) != 0) return -1;
  }
}

/* Make room for a new non-directory entry at dname: remove what is there
 * unless it is a directory. */
static int clear_slot(int dfd, const char *dname) {
  struct stat st;
  if (fstatat(dfd, dname, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return -1;
  }
  return unlinkat(dfd, dname, 0);
}

static int copy_at(copyctx *c, int sfd, const char *sname, int dfd, const char *dname, size_t len) {
  struct stat st;
  if (fstatat(sfd, sname, &st, AT_SYMLINK_NOFOLLOW) != 0) goto fail;
  if (S_ISDIR(st.st_mode)) {
    int in, out;
    DIR *d;
    struct dirent *de;
    struct stat dst;
    if (mkdirat(dfd, dname, 0700) != 0) {
      if (errno != EEXIST) goto fail;
      if (fstatat(dfd, dname, &dst, AT_SYMLINK_NOFOLLOW) != 0) goto fail;
      if (!S_ISDIR(dst.st_mode)) {
        errno = EEXIST;
        goto fail;
      }
    }
    in = openat(sfd, sname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) goto fail;
    out = openat(dfd, dname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (out < 0 || !(d = fdopendir(in))) {
      c->err = errno;
      close(in);
      if (out >= 0) close(out);
      return -1;
    }
    /* the copy stays writable while it is filled; its mode is set last */
    (void)fchmod(out, 0700);
    while ((errno = 0, de = readdir(d)) != NULL) {
      const char *n = de->d_name;
      size_t sub;
      if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
      sub = path_push(c->path, len, n);
      if (copy_at(c, dirfd(d), n, out, n, sub) != 0) {
        closedir(d);
        close(out);
        return -1;
      }
      c->path[len] = '\0';
    }
    if (errno != 0 || fchmod(out, st.st_mode & 07777) != 0) {
      c->err = errno;
      closedir(d);
      close(out);
      return -1;
    }
    closedir(d);
    close(out);
    return 0;
  }
  if (S_ISREG(st.st_mode)) {
    int in = openat(sfd, sname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), out;
    if (in < 0) goto fail;
    if (clear_slot(dfd, dname) != 0 ||
        (out = openat(dfd, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0) {
      c->err = errno;
      close(in);
      return -1;
    }
    if (copy_file_data(c, in, out) != 0 || fchmod(out, st.st_mode & 07777) != 0) {
      c->err = errno;
      close(in);
      close(out);
      return -1;
    }
    close(in);
    if (close(out) != 0) goto fail;
    return 0;
  }
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(sfd, sname, target, sizeof target - 1);
    if (n < 0) goto fail;
    target[n] = '\0';
    if (clear_slot(dfd, dname) != 0 || symlinkat(target, dfd, dname) != 0) goto fail;
    return 0;
  }
  errno = ENOTSUP; /* fifos, sockets, devices are not copied */
fail:
  c->err = errno;
  return -1;
}

/** fs.copy_tree(src, dst) -> true | nil, msg, code
 * Copies files, directories and symlinks (as symlinks) with their permission
 * bits; not owners, times or special files (ENOTSUP). dst becomes the copy of
 * src: created if missing, merged into if it is an existing directory (files
 * there are replaced, never written through). */
static int fs_copy_tree(lua_State *L) {
  const char *src = strip_slashes(L, 1);
  const char *dst = strip_slashes(L, 2);
  copyctx *c = lua_newuserdatauv(L, sizeof *c, 0);
  c->err = 0;
  cs_fmt_into(c->path, sizeof c->path, "%s", src);
  if (copy_at(c, AT_FDCWD, src, AT_FDCWD, dst, strlen(c->path)) != 0)
    return cs_fail_errno(L, c->err, "copy %s -> %s", c->path, dst);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- single entries ------------------------------------------------------ */

/** fs.symlink(target, path) -> true | nil, msg, code */
static int fs_symlink(lua_State *L) {
  const char *target = luaL_checkstring(L, 1);
  const char *path = luaL_checkstring(L, 2);
  if (symlink(target, path) != 0) return cs_fail_errno(L, errno, "%s", path);
  lua_pushboolean(L, 1);
  return 1;
}

/** fs.readlink(path) -> target | nil, msg, code */
static int fs_readlink(lua_State *L) {
  const char *path = strip_slashes(L, 1);
  char buf[PATH_MAX];
  ssize_t n = readlink(path, buf, sizeof buf);
  if (n < 0) return cs_fail_errno(L, errno, "%s", path);
  if ((size_t)n >= sizeof buf) return cs_fail_errno(L, ENAMETOOLONG, "%s", path);
  lua_pushlstring(L, buf, (size_t)n);
  return 1;
}

/** fs.chmod(path, mode) -> true | nil, msg, code (mode: integer or octal string "0755") */
static int fs_chmod(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  mode_t mode = check_mode_value(L, 2, "chmod");
  if (chmod(path, mode) != 0) return cs_fail_errno(L, errno, "%s", path);
  lua_pushboolean(L, 1);
  return 1;
}

/** fs.lchown(path, uid, gid) -> true | nil, msg, code (the link itself, never its target) */
static int fs_lchown(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer uid = luaL_checkinteger(L, 2), gid = luaL_checkinteger(L, 3);
  luaL_argcheck(L, uid >= 0 && uid < 0xffffffffLL, 2, "uid out of range");
  luaL_argcheck(L, gid >= 0 && gid < 0xffffffffLL, 3, "gid out of range");
  if (lchown(path, (uid_t)uid, (gid_t)gid) != 0) return cs_fail_errno(L, errno, "%s", path);
  lua_pushboolean(L, 1);
  return 1;
}

/* fs.shift_owner's walk: nftw's callback has no user argument */
static unsigned long shift_by;
static long shift_count;
static int shift_errno;
static char shift_path[PATH_MAX];

static int shift_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)flag, (void)ftw;
  if (lchown(path, (uid_t)(st->st_uid + shift_by), (gid_t)(st->st_gid + shift_by)) != 0) goto fail;
  /* chown clears setuid/setgid bits: put them back (a link has no mode of its own) */
  if (!S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)) && chmod(path, st->st_mode & 07777) != 0) goto fail;
  shift_count++;
  return 0;
fail:
  shift_errno = errno;
  cs_fmt_into(shift_path, sizeof shift_path, "%s", path);
  return 1;
}

/** fs.shift_owner(dir, by) -> entries | nil, msg, code
 * Adds `by` to the owner and group of dir and everything under it (links themselves, never
 * followed; one filesystem): a tree made for the host's ids becomes the same tree for a user
 * namespace whose ids start at `by`. Entries whose ids are already >= by are refused (a tree
 * shifted twice would leave the namespace's range). */
static int fs_shift_owner(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  lua_Integer by = luaL_checkinteger(L, 2);
  struct stat st;
  luaL_argcheck(L, by > 0 && by < 0xffff0000LL, 2, "by out of range");
  if (lstat(dir, &st) != 0) return cs_fail_errno(L, errno, "%s", dir);
  if ((lua_Integer)st.st_uid >= by) return cs_fail(L, "EINVAL", "%s: already owned by uid %u (shifted?)", dir, (unsigned)st.st_uid);
  shift_by = (unsigned long)by;
  shift_count = 0;
  shift_errno = 0;
  if (nftw(dir, shift_one, 64, FTW_PHYS | FTW_MOUNT) != 0)
    return cs_fail_errno(L, shift_errno ? shift_errno : errno, "%s", shift_errno ? shift_path : dir);
  lua_pushinteger(L, shift_count);
  return 1;
}

/** fs.rename(from, to) -> true | nil, msg, code (rename(2): atomic, same filesystem only) */
static int fs_rename(lua_State *L) {
  const char *from = luaL_checkstring(L, 1);
  const char *to = luaL_checkstring(L, 2);
  if (rename(from, to) != 0) return cs_fail_errno(L, errno, "rename %s -> %s", from, to);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- path strings (no system calls) -------------------------------------- */

/** fs.basename(p): last component, trailing slashes ignored ("a/b/" -> "b", "/" -> "/", "" -> ".") */
static int fs_basename(lua_State *L) {
  size_t n, end, start;
  const char *p = luaL_checklstring(L, 1, &n);
  if (n == 0) {
    lua_pushliteral(L, ".");
    return 1;
  }
  end = n;
  while (end > 1 && p[end - 1] == '/') end--;
  if (end == 1 && p[0] == '/') {
    lua_pushliteral(L, "/");
    return 1;
  }
  start = end;
  while (start > 0 && p[start - 1] != '/') start--;
  lua_pushlstring(L, p + start, end - start);
  return 1;
}

/** fs.dirname(p): all but the last component ("a/b" -> "a", "a" -> ".", "/a" -> "/") */
static int fs_dirname(lua_State *L) {
  size_t n, end;
  const char *p = luaL_checklstring(L, 1, &n);
  end = n;
  while (end > 1 && p[end - 1] == '/') end--; /* trailing slashes */
  while (end > 0 && p[end - 1] != '/') end--; /* the last component */
  if (end == 0) {
    lua_pushliteral(L, ".");
    return 1;
  }
  while (end > 1 && p[end - 1] == '/') end--; /* the separator(s) */
  lua_pushlstring(L, p, end);
  return 1;
}

/** fs.join(a, b, ...): components joined by exactly one "/". Unlike Python's
 * os.path.join, an absolute later component does not discard the earlier
 * ones: join(dir, "/etc") is dir .. "/etc", so user input cannot escape dir
 * by being absolute (it still can with ".."). */
static int fs_join(lua_State *L) {
  int i, top = lua_gettop(L), have = 0;
  luaL_Buffer b;
  char last = 0;
  for (i = 1; i <= top; i++) luaL_checkstring(L, i);
  luaL_buffinit(L, &b);
  for (i = 1; i <= top; i++) {
    size_t n;
    const char *s = lua_tolstring(L, i, &n);
    if (n == 0) continue;
    if (have) {
      while (n > 0 && *s == '/') s++, n--;
      if (last != '/') luaL_addchar(&b, '/');
      if (n == 0) {
        last = '/';
        continue;
      }
    }
    luaL_addlstring(&b, s, n);
    last = s[n - 1];
    have = 1;
  }
  luaL_pushresult(&b);
  return 1;
}

/* ---- run-log locks and truncation (results/log.lua) ----------------------
 * fs.lock(path) -> lock | nil, msg, code: an exclusive flock(2) on path
 * (created 0644 if missing), not waiting: a file another process holds is
 * nil, msg, "EAGAIN". The lock lives until lock:close() (or its collection);
 * the descriptor is close-on-exec, so a child never keeps it.
 * fs.truncate(path, size) -> true | nil, msg, code. */
#include <sys/file.h>

#define LOCK_MT "cseng.fs.lock"

static int lock_close(lua_State *L) {
  int *fd = luaL_checkudata(L, 1, LOCK_MT);
  if (*fd >= 0) {
    close(*fd); /* releases the flock */
    *fd = -1;
  }
  return 0;
}

static int fs_lock(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int *box = lua_newuserdatauv(L, sizeof(int), 0), fd, e;
  *box = -1;
  if (luaL_newmetatable(L, LOCK_MT)) {
    static const luaL_Reg m[] = {{"close", lock_close}, {"__gc", lock_close}, {"__close", lock_close}, {NULL, NULL}};
    luaL_setfuncs(L, m, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
  }
  lua_setmetatable(L, -2);
  fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return cs_fail_errno(L, errno, "%s", path);
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    e = errno;
    close(fd);
    return cs_fail_errno(L, e == EWOULDBLOCK ? EAGAIN : e, "%s", path);
  }
  *box = fd;
  return 1;
}

static int fs_truncate(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer size = luaL_checkinteger(L, 2);
  luaL_argcheck(L, size >= 0, 2, "size must be >= 0");
  while (truncate(path, (off_t)size) != 0) {
    if (errno != EINTR) return cs_fail_errno(L, errno, "%s", path);
  }
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_cseng_fs(lua_State *L) {
  static const luaL_Reg funcs[] = {{"read", fs_read},
                                   {"write", fs_write},
                                   {"append", fs_append},
                                   {"commit_stats", fs_commit_stats},
                                   {"mkdir_p", fs_mkdir_p},
                                   {"list", fs_list},
                                   {"walk", fs_walk},
                                   {"stat", fs_stat},
                                   {"lstat", fs_lstat},
                                   {"exists", fs_exists},
                                   {"remove", fs_remove},
                                   {"remove_tree", fs_remove_tree},
                                   {"tempdir", fs_tempdir},
                                   {"copy_tree", fs_copy_tree},
                                   {"symlink", fs_symlink},
                                   {"readlink", fs_readlink},
                                   {"chmod", fs_chmod},
                                   {"lchown", fs_lchown},
                                   {"shift_owner", fs_shift_owner},
                                   {"rename", fs_rename},
                                   {"basename", fs_basename},
                                   {"dirname", fs_dirname},
                                   {"join", fs_join},
                                   {"lock", fs_lock},
                                   {"truncate", fs_truncate},
                                   {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
