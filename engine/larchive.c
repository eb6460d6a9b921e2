/*
 * larchive.c: tar archives (libarchive). Module cseng.archive.
 *   archive.extract(bytes|path, dir, opts)  safe, limited extraction
 *   archive.list(bytes|path, opts)          entries without extracting
 *   archive.pack(entries, opts)             deterministic tar / tar.gz bytes
 *   archive.pack_dir(dir, opts)             the same, from a host directory
 *
 * Extraction is refused, with nil, "<entry>: <reason>", CODE, when an entry
 * is unsafe ("EUNSAFE": absolute, "..", through or replacing a symlink,
 * escaping symlink or hardlink, device or fifo), over a limit ("ELIMIT":
 * entries or uncompressed bytes) or corrupt ("EARCHIVE"). It runs in two
 * passes over the input: a check pass that reads every header (and counts the
 * data of entries whose size the header does not give) and writes nothing,
 * then the write pass, which repeats the per-entry checks, has libarchive's
 * SECURE_* flags on, and counts bytes as it writes. So an unsafe archive or a
 * gzip bomb leaves the target directory untouched.
 *
 * Everything here is synchronous and blocks the loop: fine for task-sized
 * archives (KiB..MiB). To offload big extractions with uv_queue_work, move
 * extract_write_pass (plain C, no Lua) to the work callback; but note that
 * libarchive's write-disk code and ours chdir(), which is process-wide, so the
 * offload must first become dirfd-based (openat) or hold every other
 * cwd-relative file operation off while it runs.
 */
#include "core.h"
#include "aux.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <locale.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_MAX_ENTRIES 100000
/* A caller that passes no limit gets one that refuses a 1 GiB bomb. */
#define DEFAULT_MAX_BYTES ((int64_t)512 << 20)
#define NAME_MAX_LEN 4096
#define IO_CHUNK (64 * 1024)

/*
 * Entry names are bytes, UTF-8 in practice. In the process's "C" locale
 * libarchive cannot convert non-ASCII names to or from pax headers (it warns
 * and marks them hdrcharset=BINARY), so archive calls run with a UTF-8
 * LC_CTYPE for this thread only (uselocale), leaving the process locale alone.
 */
static locale_t utf8_ctype;

static locale_t enter_utf8(void) { return utf8_ctype ? uselocale(utf8_ctype) : (locale_t)0; }
static void leave_utf8(locale_t old) {
  if (old) uselocale(old);
}

/* opts.<field> as an int >= 0, capped at INT32_MAX. */
static int opt_int(lua_State *L, int opts, const char *field, lua_Integer def) {
  lua_Integer v = cs_opt_integer(L, opts, field, def, 0);
  return (int)(v > INT32_MAX ? INT32_MAX : v);
}

/* A mode: an integer or a string of octal digits ("0755"). */
static mode_t check_mode(lua_State *L, int idx, const char *what) {
  lua_Integer m;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *s = lua_tostring(L, idx);
    char *end;
    m = strtol(s, &end, 8);
    if (*s == '\0' || *end != '\0') luaL_error(L, "%s: invalid octal mode '%s'", what, s);
  } else {
    int ok;
    m = lua_tointegerx(L, idx, &ok);
    if (!ok) luaL_error(L, "%s: mode must be an integer or an octal string", what);
  }
  if (m < 0 || m > 07777) luaL_error(L, "%s: mode out of range", what);
  return (mode_t)m;
}

/* ---- entry names ----------------------------------------------------------- */

/*
 * Normalize an archive entry name: drop empty and "." components (so "./a//b/"
 * is "a/b"), then drop the first `strip` components. Returns NULL when out
 * holds the result ("" for the root itself, or for an entry stripped away),
 * or the reason the name is unsafe.
 */
/* The next path component after *p that is neither empty nor ".": its start
 * and length (*n), or NULL at the end; *p moves past it and its slashes. */
static const char *next_component(const char **p, size_t *n) {
  while (**p) {
    const char *c = *p;
    while (**p && **p != '/') (*p)++;
    *n = (size_t)(*p - c);
    while (**p == '/') (*p)++;
    if (*n == 0 || (*n == 1 && c[0] == '.')) continue;
    return c;
  }
  return NULL;
}

static int is_dotdot(const char *c, size_t n) { return n == 2 && c[0] == '.' && c[1] == '.'; }

static const char *normalize_name(const char *in, int strip, char *out, size_t outlen) {
  size_t o = 0, n;
  const char *p = in, *c;
  if (in[0] == '/') return "absolute path";
  while ((c = next_component(&p, &n)) != NULL) {
    if (is_dotdot(c, n)) return "'..' in path";
    if (strip > 0) {
      strip--;
      continue;
    }
    if (o + n + 2 > outlen) return "name too long";
    if (o) out[o++] = '/';
    memcpy(out + o, c, n);
    o += n;
  }
  out[o] = '\0';
  return NULL;
}

/* A display name for listing: leading "./" and trailing "/" removed. */
static void display_name(const char *in, char *out, size_t outlen) {
  size_t n;
  while (in[0] == '.' && in[1] == '/') {
    in += 2;
    while (*in == '/') in++;
  }
  cs_fmt_into(out, outlen, "%s", *in ? in : ".");
  n = strlen(out);
  while (n > 1 && out[n - 1] == '/') out[--n] = '\0';
}

/*
 * A symlink target is safe when resolving it from the link's directory can
 * never leave the extraction root: relative, with its ".." components only
 * at the start and no more of them than the link's depth. (".." after a
 * name is refused because that name may itself be a symlink, which makes
 * lexical reasoning wrong.) Returns NULL if safe, else the reason.
 */
static const char *symlink_target_unsafe(const char *linkpath, const char *target) {
  int depth = 0, ups = 0, seen_name = 0;
  const char *p, *c;
  size_t n;
  if (target[0] == '\0') return "symlink with an empty target";
  if (target[0] == '/') return "symlink to an absolute path";
  for (p = linkpath; *p; p++)
    if (*p == '/') depth++;
  p = target;
  while ((c = next_component(&p, &n)) != NULL) {
    if (is_dotdot(c, n)) {
      if (seen_name) return "symlink target with '..' after a name";
      if (++ups > depth) return "symlink pointing outside the archive root";
    } else {
      seen_name = 1;
    }
  }
  return NULL;
}

static const char *type_name(struct archive_entry *e) {
  if (archive_entry_hardlink(e)) return "hardlink";
  switch (archive_entry_filetype(e)) {
    case AE_IFREG: return "file";
    case AE_IFDIR: return "dir";
    case AE_IFLNK: return "symlink";
    case AE_IFIFO: return "fifo";
    case AE_IFCHR: return "char";
    case AE_IFBLK: return "block";
    case AE_IFSOCK: return "socket";
    default: return "unknown";
  }
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct {
  const char *data; /* from = "bytes" */
  size_t len;
  const char *path; /* from = "path" */
  int fd;           /* path opened once, so every pass reads the same file; else -1 */
} source;

/* Archives and descriptors that must be released even if Lua raises. */
typedef struct {
  struct archive *r, *w;
  int cwd_fd; /* the saved working directory while extracting, else -1 */
  int src_fd; /* the archive file, else -1 */
  int utf8;   /* in UTF-8 mode, old_locale to restore */
  locale_t old_locale;
} guard;

static void guard_enter(guard *g) {
  g->old_locale = enter_utf8();
  g->utf8 = 1;
}

static void guard_release(guard *g) {
  if (g->w) archive_write_free(g->w);
  if (g->r) archive_read_free(g->r);
  g->w = g->r = NULL;
  if (g->cwd_fd >= 0) {
    if (fchdir(g->cwd_fd) != 0) { /* nothing better to do; the next chdir fixes it */
    }
    close(g->cwd_fd);
    g->cwd_fd = -1;
  }
  if (g->src_fd >= 0) close(g->src_fd);
  g->src_fd = -1;
  if (g->utf8) leave_utf8(g->old_locale);
  g->utf8 = 0;
}

static int guard_gc(lua_State *L) {
  guard_release(luaL_checkudata(L, 1, "cseng.archive.guard"));
  return 0;
}

static guard *guard_new(lua_State *L) {
  guard *g = lua_newuserdatauv(L, sizeof *g, 0);
  g->r = g->w = NULL;
  g->cwd_fd = g->src_fd = -1;
  g->utf8 = 0;
  if (luaL_newmetatable(L, "cseng.archive.guard")) {
    lua_pushcfunction(L, guard_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return g;
}

/* Arg idx is archive bytes or a path: opts.from says which, else a string
 * holding a NUL byte is bytes (tar and gzip headers always do) and any other
 * is a path. */
static void check_source(lua_State *L, int idx, int opts, source *src) {
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  const char *from = cs_opt_string(L, opts, "from", NULL);
  int bytes;
  if (from && strcmp(from, "bytes") != 0 && strcmp(from, "path") != 0)
    luaL_error(L, "opts.from must be \"bytes\" or \"path\"");
  bytes = from ? from[0] == 'b' : memchr(s, '\0', n) != NULL;
  src->data = src->path = NULL;
  src->len = 0;
  src->fd = -1;
  if (bytes) {
    src->data = s;
    src->len = n;
  } else {
    if (memchr(s, '\0', n)) luaL_argerror(L, idx, "a path must not contain NUL bytes");
    src->path = s;
  }
}

static const char *source_name(const source *src) { return src->path ? src->path : "(archive bytes)"; }

/* Formats: tar (ustar, pax, GNU, v7) and zip; filters: none, gzip, bzip2,
 * xz/lzma, zstd, lz4, all built into Debian's libarchive (no external
 * programs). Nothing more: every enabled parser is attack surface. */
static struct archive *reader_open(void) {
  struct archive *a = archive_read_new();
  if (!a) return NULL;
  archive_read_support_format_tar(a);
  archive_read_support_format_zip(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_bzip2(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_lzma(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_lz4(a);
  return a;
}

static int reader_start(struct archive *a, const source *src) {
  if (src->fd >= 0) {
    if (lseek(src->fd, 0, SEEK_SET) != 0) {
      archive_set_error(a, errno, "%s: cannot rewind: %s", src->path, strerror(errno));
      return ARCHIVE_FATAL;
    }
    return archive_read_open_fd(a, src->fd, IO_CHUNK);
  }
  if (src->path) return archive_read_open_filename(a, src->path, IO_CHUNK);
  return archive_read_open_memory(a, src->data, src->len);
}

/* ---- extract ------------------------------------------------------------------ */

typedef struct {
  int max_entries, strip, owners, unsafe_symlinks;
  lua_Integer id_offset; /* >= 0: owners restored as entry id + id_offset (a user namespace's range) */
  int64_t max_bytes;
  /* results */
  int64_t entries, bytes;
  /* failure */
  const char *code;
  char msg[NAME_MAX_LEN + 512];
} xstate;

static void xfail(xstate *x, const char *code, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void xfail(xstate *x, const char *code, const char *name, const char *fmt, ...) {
  va_list ap;
  int n;
  x->code = code;
  n = snprintf(x->msg, sizeof x->msg, "%.*s: ", NAME_MAX_LEN, name);
  if (n < 0 || (size_t)n >= sizeof x->msg) n = 0;
  va_start(ap, fmt);
  vsnprintf(x->msg + n, sizeof x->msg - (size_t)n, fmt, ap);
  va_end(ap);
}

/* A header read failed: corrupt, truncated, or not an archive. */
static void xfail_read(xstate *x, struct archive *a, const char *name) {
  const char *why = archive_error_string(a);
  xfail(x, "EARCHIVE", name, "%s", why ? why : "cannot read the archive");
}

/* Per-entry checks that need no memory of earlier entries. On success fills
 * norm (and linknorm for hardlinks); *skip is set for the root and for
 * entries removed by strip_components. Returns 0, or -1 with x failed. */
static int check_entry(xstate *x, struct archive_entry *e, char *norm, char *linknorm, int *skip) {
  const char *name = archive_entry_pathname(e), *why;
  const char *hl = archive_entry_hardlink(e);
  int ft = archive_entry_filetype(e);
  *skip = 0;
  if (!name) name = "";
  if (++x->entries > x->max_entries) {
    xfail(x, "ELIMIT", name, "more than %d entries (opts.max_entries)", x->max_entries);
    return -1;
  }
  if ((why = normalize_name(name, x->strip, norm, NAME_MAX_LEN)) != NULL) {
    xfail(x, "EUNSAFE", name, "%s", why);
    return -1;
  }
  if (hl) {
    if ((why = normalize_name(hl, x->strip, linknorm, NAME_MAX_LEN)) != NULL) {
      xfail(x, "EUNSAFE", name, "hardlink to '%s': %s", hl, why);
      return -1;
    }
    if (norm[0] && !linknorm[0]) {
      xfail(x, "EUNSAFE", name, "hardlink to '%s', outside the extracted tree", hl);
      return -1;
    }
  } else if (ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK) {
    xfail(x, "EUNSAFE", name, "unsupported entry type (%s)", type_name(e));
    return -1;
  }
  if (norm[0] == '\0') {
    *skip = 1; /* "./" itself, or stripped away */
    return 0;
  }
  if (ft == AE_IFLNK && !x->unsafe_symlinks) {
    const char *target = archive_entry_symlink(e);
    if ((why = symlink_target_unsafe(norm, target ? target : "")) != NULL) {
      xfail(x, "EUNSAFE", name, "%s ('%s')", why, target ? target : "");
      return -1;
    }
  }
  return 0;
}

/* Budget check before writing size more bytes. */
static int charge_bytes(xstate *x, const char *name, int64_t size) {
  if (size > x->max_bytes - x->bytes) {
    xfail(x, "ELIMIT", name, "more than %lld bytes uncompressed (opts.max_bytes)", (long long)x->max_bytes);
    return -1;
  }
  x->bytes += size;
  return 0;
}

enum { SEEN_DIR = 1, SEEN_FILE = 2, SEEN_LINK = 3 };

/* Checks across entries, with the table at `seen` mapping normalized paths to
 * SEEN_*: no entry below a symlink, no symlink replacing a directory or a
 * symlink being replaced, hardlinks only to files extracted before. */
static int check_tree(lua_State *L, int seen, xstate *x, struct archive_entry *e, const char *norm,
                      const char *linknorm) {
  const char *name = archive_entry_pathname(e);
  size_t i, n = strlen(norm);
  int ft = archive_entry_filetype(e), kind, prev;
  for (i = 1; i < n; i++) {
    if (norm[i] != '/') continue;
    lua_pushlstring(L, norm, i);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, seen) == LUA_TNUMBER && lua_tointeger(L, -1) == SEEN_LINK) {
      lua_pop(L, 2);
      xfail(x, "EUNSAFE", name, "path goes through the symlink '%.*s'", (int)i, norm);
      return -1;
    }
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_pushinteger(L, SEEN_DIR);
      lua_rawset(L, seen);
    } else {
      lua_pop(L, 2);
    }
  }
  if (archive_entry_hardlink(e)) {
    lua_pushstring(L, linknorm);
    prev = lua_rawget(L, seen) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
    if (prev != SEEN_FILE) {
      xfail(x, "EUNSAFE", name, "hardlink to '%s', which is not a file extracted before it",
            archive_entry_hardlink(e));
      return -1;
    }
    kind = SEEN_FILE;
  } else {
    kind = ft == AE_IFDIR ? SEEN_DIR : ft == AE_IFLNK ? SEEN_LINK : SEEN_FILE;
  }
  lua_pushstring(L, norm);
  prev = lua_rawget(L, seen) == LUA_TNUMBER ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  if (prev == SEEN_LINK && kind != SEEN_LINK) {
    xfail(x, "EUNSAFE", name, "replaces a symlink extracted before it");
    return -1;
  }
  if (prev == SEEN_DIR && kind != SEEN_DIR) {
    xfail(x, "EUNSAFE", name, "replaces a directory extracted before it");
    return -1;
  }
  lua_pushstring(L, norm);
  lua_pushinteger(L, kind);
  lua_rawset(L, seen);
  return 0;
}

/* Pass 1: read every header, write nothing. */
static int extract_check_pass(lua_State *L, guard *g, const source *src, xstate *x) {
  struct archive_entry *e;
  char *norm = malloc(NAME_MAX_LEN), *linknorm = malloc(NAME_MAX_LEN);
  int seen, r, skip, rc = -1;
  lua_newtable(L);
  seen = lua_gettop(L);
  if (!norm || !linknorm) {
    xfail(x, "ENOMEM", source_name(src), "out of memory");
    goto out;
  }
  if (!(g->r = reader_open())) {
    xfail(x, "ENOMEM", source_name(src), "out of memory");
    goto out;
  }
  if (reader_start(g->r, src) != ARCHIVE_OK) {
    int en = archive_errno(g->r);
    xfail_read(x, g->r, source_name(src));
    if (src->path && en > 0 && en != EILSEQ && en != EINVAL) x->code = cs_errno_code(en); /* ENOENT... */
    goto out;
  }
  for (;;) {
    const char *name;
    r = archive_read_next_header(g->r, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      xfail_read(x, g->r, x->entries ? "(after the last good entry)" : source_name(src));
      goto out;
    }
    name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    if (check_entry(x, e, norm, linknorm, &skip) != 0) goto out;
    if (skip) continue;
    if (check_tree(L, seen, x, e, norm, linknorm) != 0) goto out;
    if (archive_entry_size_is_set(e)) {
      if (charge_bytes(x, name, archive_entry_size(e)) != 0) goto out;
    } else if (archive_entry_filetype(e) == AE_IFREG) {
      /* size only known at the end (zip data descriptors): count the data */
      const void *buf;
      size_t size;
      la_int64_t off;
      while ((r = archive_read_data_block(g->r, &buf, &size, &off)) == ARCHIVE_OK)
        if (charge_bytes(x, name, (int64_t)size) != 0) goto out;
      if (r != ARCHIVE_EOF) {
        xfail_read(x, g->r, name);
        goto out;
      }
    }
  }
  rc = 0;
out:
  free(norm);
  free(linknorm);
  if (g->r) archive_read_free(g->r);
  g->r = NULL;
  lua_settop(L, seen - 1);
  return rc;
}

/* Copy one entry's data, charging every block before it is written. */
static int copy_data(xstate *x, struct archive *r, struct archive *w, const char *name) {
  const void *buf;
  size_t size;
  la_int64_t off;
  int rr;
  while ((rr = archive_read_data_block(r, &buf, &size, &off)) == ARCHIVE_OK) {
    if (charge_bytes(x, name, (int64_t)size) != 0) return -1;
    if (archive_write_data_block(w, buf, size, off) < ARCHIVE_OK) {
      int en = archive_errno(w);
      xfail(x, en > 0 ? cs_errno_code(en) : "EARCHIVE", name, "%s", archive_error_string(w));
      return -1;
    }
  }
  if (rr != ARCHIVE_EOF) {
    xfail_read(x, r, name);
    return -1;
  }
  return 0;
}

/*
 * Pass 2: read from g->r (opened by the caller before it chdir()s, so a
 * relative archive path still works) and write into the current directory
 * (the target, so entry names stay relative and SECURE_NOABSOLUTEPATHS
 * applies). Plain C, no Lua: this is the part a uv_queue_work offload would run.
 */
static int extract_write_pass(guard *g, const source *src, xstate *x) {
  struct archive_entry *e;
  char *norm = malloc(NAME_MAX_LEN), *linknorm = malloc(NAME_MAX_LEN);
  int flags = ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
              ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM;
  int r, skip, rc = -1;
  x->entries = x->bytes = 0;
  if (x->owners || x->id_offset >= 0) flags |= ARCHIVE_EXTRACT_OWNER;
  if (!norm || !linknorm || !(g->w = archive_write_disk_new())) {
    xfail(x, "ENOMEM", source_name(src), "out of memory");
    goto out;
  }
  archive_write_disk_set_options(g->w, flags);
  if (x->owners && x->id_offset < 0) archive_write_disk_set_standard_lookup(g->w);
  for (;;) {
    char name[NAME_MAX_LEN];
    r = archive_read_next_header(g->r, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      xfail_read(x, g->r, "(after the last good entry)");
      goto out;
    }
    cs_fmt_into(name, sizeof name, "%s", archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
    if (check_entry(x, e, norm, linknorm, &skip) != 0) goto out;
    if (skip) continue;
    if (archive_entry_size_is_set(e) && archive_entry_size(e) > x->max_bytes - x->bytes) {
      charge_bytes(x, name, archive_entry_size(e));
      goto out;
    }
    archive_entry_set_pathname(e, norm);
    if (archive_entry_hardlink(e)) archive_entry_set_hardlink(e, linknorm);
    if (x->id_offset >= 0) {
      /* numeric ids inside the namespace's 65,536 (names would be looked up on the host);
       * an id past the range becomes nobody's, as the kernel shows unmapped ids */
      la_int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
      archive_entry_set_uname(e, NULL);
      archive_entry_set_gname(e, NULL);
      archive_entry_set_uid(e, (uid >= 0 && uid < 65536 ? uid : 65534) + x->id_offset);
      archive_entry_set_gid(e, (gid >= 0 && gid < 65536 ? gid : 65534) + x->id_offset);
    }
    /* no setuid/setgid/sticky bits unless owners are restored too */
    archive_entry_set_perm(e, archive_entry_perm(e) & (x->owners || x->id_offset >= 0 ? 07777 : 0777));
    r = archive_write_header(g->w, e);
    if (r < ARCHIVE_WARN) {
      int en = archive_errno(g->w);
      /* libarchive's own SECURE_* refusals carry no errno */
      xfail(x, en > 0 ? cs_errno_code(en) : "EUNSAFE", name, "%s", archive_error_string(g->w));
      goto out;
    }
    if (archive_entry_size(e) > 0 || !archive_entry_size_is_set(e)) {
      if (copy_data(x, g->r, g->w, name) != 0) goto out;
    }
    if (archive_write_finish_entry(g->w) < ARCHIVE_WARN) {
      int en = archive_errno(g->w);
      xfail(x, en > 0 ? cs_errno_code(en) : "EARCHIVE", name, "%s", archive_error_string(g->w));
      goto out;
    }
  }
  /* applies deferred directory modes and times */
  if (archive_write_close(g->w) < ARCHIVE_WARN) {
    int en = archive_errno(g->w);
    xfail(x, en > 0 ? cs_errno_code(en) : "EARCHIVE", source_name(src), "%s", archive_error_string(g->w));
    goto out;
  }
  rc = 0;
out:
  free(norm);
  free(linknorm);
  return rc;
}

/** archive.extract(bytes|path, dir, opts) -> {entries=, bytes=} | nil, "<entry>: <reason>", CODE
 * opts: from ("bytes"|"path"), max_entries (100000), max_bytes (512 MiB), strip_components (0),
 * owners (false), unsafe_symlinks (false: refuse symlinks whose target could leave dir),
 * id_offset (none: with an integer, each entry's owner and group are its ids plus id_offset, the
 * host's view of a user namespace's ids, whatever owners says). */
static int archive_extract(lua_State *L) {
  source src;
  xstate *x;
  guard *g;
  const char *dir = luaL_checkstring(L, 2);
  struct stat st;
  lua_settop(L, 3);
  check_source(L, 1, 3, &src);
  x = lua_newuserdatauv(L, sizeof *x, 0);
  memset(x, 0, sizeof *x);
  x->max_entries = opt_int(L, 3, "max_entries", DEFAULT_MAX_ENTRIES);
  x->max_bytes = (int64_t)cs_opt_integer(L, 3, "max_bytes", DEFAULT_MAX_BYTES, 0);
  x->strip = opt_int(L, 3, "strip_components", 0);
  x->owners = cs_opt_bool(L, 3, "owners", 0);
  x->unsafe_symlinks = cs_opt_bool(L, 3, "unsafe_symlinks", 0);
  {
    int t = cs_opt_field(L, 3, "id_offset");
    lua_pop(L, 1);
    x->id_offset = t == LUA_TNIL ? -1 : cs_opt_integer(L, 3, "id_offset", 0, 0);
  }
  g = guard_new(L);
  if (stat(dir, &st) != 0) return cs_fail(L, cs_errno_code(errno), "%s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return cs_fail(L, "ENOTDIR", "%s: %s", dir, strerror(ENOTDIR));
  if (src.path) {
    /* both passes read this one descriptor: the file checked is the file extracted */
    if ((g->src_fd = src.fd = open(src.path, O_RDONLY | O_CLOEXEC)) < 0)
      return cs_fail(L, cs_errno_code(errno), "%s: %s", src.path, strerror(errno));
  }
  guard_enter(g);
  if (extract_check_pass(L, g, &src, x) != 0) {
    guard_release(g);
    return cs_fail(L, x->code, "%s", x->msg);
  }
  if (!(g->r = reader_open())) {
    guard_release(g);
    return luaL_error(L, "out of memory");
  }
  if (reader_start(g->r, &src) != ARCHIVE_OK) {
    xfail_read(x, g->r, source_name(&src)); /* it was readable a moment ago */
    guard_release(g);
    return cs_fail(L, x->code, "%s", x->msg);
  }
  g->cwd_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g->cwd_fd < 0) {
    int en = errno;
    guard_release(g);
    return cs_fail(L, cs_errno_code(en), "cannot save the working directory: %s", strerror(en));
  }
  if (chdir(dir) != 0) {
    int en = errno;
    guard_release(g);
    return cs_fail(L, cs_errno_code(en), "%s: %s", dir, strerror(en));
  }
  if (extract_write_pass(g, &src, x) != 0) {
    guard_release(g);
    return cs_fail(L, x->code, "%s", x->msg);
  }
  guard_release(g);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)x->entries);
  lua_setfield(L, -2, "entries");
  lua_pushinteger(L, (lua_Integer)x->bytes);
  lua_setfield(L, -2, "bytes");
  return 1;
}

/** archive.list(bytes|path, opts) -> {{path, type, size, mode, linkname}...} | nil, msg, code
 * Paths as stored, minus a leading "./" and a trailing "/" (nothing else is
 * checked: list shows what extract would refuse). opts: from, max_entries. */
static int archive_list(lua_State *L) {
  source src;
  guard *g;
  struct archive_entry *e;
  lua_Integer n = 0;
  int max_entries, r, out;
  char name[NAME_MAX_LEN];
  lua_settop(L, 2);
  check_source(L, 1, 2, &src);
  max_entries = opt_int(L, 2, "max_entries", DEFAULT_MAX_ENTRIES);
  g = guard_new(L);
  lua_newtable(L);
  out = lua_gettop(L);
  guard_enter(g);
  if (!(g->r = reader_open())) return luaL_error(L, "out of memory");
  if (reader_start(g->r, &src) != ARCHIVE_OK) {
    int en = archive_errno(g->r);
    const char *code = src.path && en > 0 && en != EILSEQ && en != EINVAL ? cs_errno_code(en) : "EARCHIVE";
    lua_pushfstring(L, "%s: %s", source_name(&src), archive_error_string(g->r));
    guard_release(g);
    return cs_fail(L, code, "%s", lua_tostring(L, -1));
  }
  for (;;) {
    const char *link;
    r = archive_read_next_header(g->r, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      lua_pushfstring(L, "%s: %s", n ? "(after the last good entry)" : source_name(&src),
                      archive_error_string(g->r));
      guard_release(g);
      return cs_fail(L, "EARCHIVE", "%s", lua_tostring(L, -1));
    }
    if (n >= max_entries) {
      lua_pushfstring(L, "%s: more than %d entries (opts.max_entries)",
                      archive_entry_pathname(e) ? archive_entry_pathname(e) : "", max_entries);
      guard_release(g);
      return cs_fail(L, "ELIMIT", "%s", lua_tostring(L, -1));
    }
    display_name(archive_entry_pathname(e) ? archive_entry_pathname(e) : "", name, sizeof name);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, type_name(e));
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)archive_entry_size(e));
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, archive_entry_perm(e));
    lua_setfield(L, -2, "mode");
    link = archive_entry_hardlink(e) ? archive_entry_hardlink(e) : archive_entry_symlink(e);
    if (link) {
      lua_pushstring(L, link);
      lua_setfield(L, -2, "linkname");
    }
    lua_rawseti(L, out, ++n);
  }
  guard_release(g);
  lua_settop(L, out);
  return 1;
}

/* ---- pack ---------------------------------------------------------------------- */

enum { P_FILE, P_DIR, P_LINK };

typedef struct {
  const char *path; /* normalized; anchored in the call's anchor table */
  size_t plen;
  int type;
  mode_t mode;
  const char *data; /* P_FILE with data= */
  size_t dlen;
  const char *file;   /* P_FILE with file= (a host path) */
  int nofollow;       /* open file= with O_NOFOLLOW (pack_dir) */
  const char *target; /* P_LINK */
} pentry;

typedef struct {
  struct archive *a;
  char *out;
  size_t len, cap;
  pentry *ents;
  size_t n, cap_ents;
  int fd;
  char *buf;
  int utf8; /* see guard */
  locale_t old_locale;
} packer;

static void packer_release(packer *p) {
  if (p->utf8) leave_utf8(p->old_locale);
  p->utf8 = 0;
  if (p->a) archive_write_free(p->a);
  p->a = NULL;
  free(p->out);
  p->out = NULL;
  free(p->ents);
  p->ents = NULL;
  free(p->buf);
  p->buf = NULL;
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
}

static int packer_gc(lua_State *L) {
  packer_release(luaL_checkudata(L, 1, "cseng.archive.packer"));
  return 0;
}

static packer *packer_new(lua_State *L) {
  packer *p = lua_newuserdatauv(L, sizeof *p, 0);
  memset(p, 0, sizeof *p);
  p->fd = -1;
  if (luaL_newmetatable(L, "cseng.archive.packer")) {
    lua_pushcfunction(L, packer_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return p;
}

static pentry *packer_add(lua_State *L, packer *p) {
  if (p->n == p->cap_ents) {
    size_t nc = p->cap_ents ? p->cap_ents * 2 : 64;
    pentry *ne = realloc(p->ents, nc * sizeof *ne);
    if (!ne) luaL_error(L, "out of memory");
    p->ents = ne;
    p->cap_ents = nc;
  }
  memset(&p->ents[p->n], 0, sizeof p->ents[p->n]);
  return &p->ents[p->n++];
}

static la_ssize_t pack_write_cb(struct archive *a, void *ud, const void *buf, size_t n) {
  packer *p = ud;
  if (p->len + n > p->cap) {
    size_t nc = p->cap ? p->cap : 64 * 1024;
    char *no;
    while (nc < p->len + n) nc *= 2;
    if (!(no = realloc(p->out, nc))) {
      archive_set_error(a, ENOMEM, "out of memory");
      return -1;
    }
    p->out = no;
    p->cap = nc;
  }
  memcpy(p->out + p->len, buf, n);
  p->len += n;
  return (la_ssize_t)n;
}

static int pentry_cmp(const void *a, const void *b) {
  const pentry *x = a, *y = b;
  size_t m = x->plen < y->plen ? x->plen : y->plen;
  int c = memcmp(x->path, y->path, m);
  if (c) return c;
  return x->plen < y->plen ? -1 : x->plen > y->plen;
}

/* Normalize a path given to pack: "./a//b/" -> "a/b"; raise on "", "..",
 * absolute. Pushes the result and anchors it in the table at anchor. */
static const char *pack_path(lua_State *L, int anchor, const char *in, const char *what, size_t *len) {
  char buf[NAME_MAX_LEN];
  const char *why;
  if (in[0] == '/') luaL_error(L, "%s: absolute path '%s'", what, in);
  if ((why = normalize_name(in, 0, buf, sizeof buf)) != NULL) luaL_error(L, "%s: %s ('%s')", what, why, in);
  if (buf[0] == '\0') luaL_error(L, "%s: empty path '%s'", what, in);
  lua_pushstring(L, buf);
  lua_pushvalue(L, -1);
  lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);
  *len = strlen(buf);
  return lua_tostring(L, -1); /* still anchored after the pop below */
}

/* Index every entry's path in the table at set (path -> position), add the
 * parent directories nobody listed (0755), and sort by path bytes. */
static void pack_finish_entries(lua_State *L, packer *p, int anchor, int set) {
  size_t i, n0 = p->n;
  for (i = 0; i < n0; i++) {
    pentry *e = &p->ents[i];
    size_t j;
    for (j = 1; j < e->plen; j++) {
      if (e->path[j] != '/') continue;
      lua_pushlstring(L, e->path, j);
      lua_pushvalue(L, -1);
      if (lua_rawget(L, set) == LUA_TNIL) {
        pentry *d;
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, anchor, (lua_Integer)lua_rawlen(L, anchor) + 1);
        d = packer_add(L, p);
        e = &p->ents[i]; /* the array may have moved */
        d->path = lua_tolstring(L, -1, &d->plen);
        d->type = P_DIR;
        d->mode = 0755;
        lua_pushinteger(L, (lua_Integer)p->n);
        lua_rawset(L, set);
      } else {
        size_t k = (size_t)lua_tointeger(L, -1) - 1;
        lua_pop(L, 2);
        if (p->ents[k].type != P_DIR)
          luaL_error(L, "'%s' is not a directory, but '%s' is inside it", p->ents[k].path, e->path);
      }
    }
  }
  qsort(p->ents, p->n, sizeof *p->ents, pentry_cmp);
}

static int pack_fail(lua_State *L, packer *p, const char *code, const char *fmt, const char *a1,
                     const char *a2) {
  packer_release(p);
  lua_pushnil(L);
  lua_pushfstring(L, fmt, a1, a2);
  lua_pushstring(L, code);
  return 3;
}

/* Write the packer's sorted entries; push the bytes or nil, msg, code. */
static int pack_write(lua_State *L, packer *p, int gz) {
  struct archive_entry *ae;
  size_t i;
  p->old_locale = enter_utf8();
  p->utf8 = 1;
  if (!(p->buf = malloc(IO_CHUNK)) || !(p->a = archive_write_new())) return luaL_error(L, "out of memory");
  if (archive_write_set_format_pax_restricted(p->a) != ARCHIVE_OK)
    return pack_fail(L, p, "EARCHIVE", "pack: %s%s", archive_error_string(p->a), "");
  if (gz) {
    if (archive_write_add_filter_gzip(p->a) != ARCHIVE_OK ||
        /* NULL turns the option off: a zero mtime in the gzip header */
        archive_write_set_filter_option(p->a, "gzip", "timestamp", NULL) != ARCHIVE_OK)
      return pack_fail(L, p, "EARCHIVE", "pack: gzip: %s%s", archive_error_string(p->a), "");
    archive_write_set_bytes_in_last_block(p->a, 1);
  }
  if (archive_write_open2(p->a, p, NULL, pack_write_cb, NULL, NULL) != ARCHIVE_OK)
    return pack_fail(L, p, "EARCHIVE", "pack: %s%s", archive_error_string(p->a), "");
  if (!(ae = archive_entry_new())) return luaL_error(L, "out of memory");
  for (i = 0; i < p->n; i++) {
    pentry *e = &p->ents[i];
    int64_t size = 0;
    archive_entry_clear(ae);
    archive_entry_set_pathname(ae, e->path);
    archive_entry_set_mtime(ae, 0, 0);
    archive_entry_set_uid(ae, 0);
    archive_entry_set_gid(ae, 0);
    archive_entry_set_perm(ae, e->mode);
    if (e->type == P_DIR) {
      archive_entry_set_filetype(ae, AE_IFDIR);
    } else if (e->type == P_LINK) {
      archive_entry_set_filetype(ae, AE_IFLNK);
      archive_entry_set_symlink(ae, e->target);
    } else {
      archive_entry_set_filetype(ae, AE_IFREG);
      if (e->file) {
        struct stat st;
        p->fd = open(e->file, O_RDONLY | O_CLOEXEC | (e->nofollow ? O_NOFOLLOW : 0));
        if (p->fd < 0 || fstat(p->fd, &st) != 0) {
          int en = errno;
          archive_entry_free(ae);
          return pack_fail(L, p, cs_errno_code(en), "%s: %s", e->file, strerror(en));
        }
        if (!S_ISREG(st.st_mode)) {
          archive_entry_free(ae);
          return pack_fail(L, p, "EINVAL", "%s: %s", e->file, "not a regular file");
        }
        size = st.st_size;
      } else {
        size = (int64_t)e->dlen;
      }
    }
    archive_entry_set_size(ae, size);
    if (archive_write_header(p->a, ae) < ARCHIVE_WARN) {
      archive_entry_free(ae);
      return pack_fail(L, p, "EARCHIVE", "%s: %s", e->path, archive_error_string(p->a));
    }
    if (e->type == P_FILE && e->file) {
      int64_t left = size;
      for (;;) {
        ssize_t r = read(p->fd, p->buf, IO_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          int en = errno;
          archive_entry_free(ae);
          return pack_fail(L, p, cs_errno_code(en), "%s: %s", e->file, strerror(en));
        }
        if (r == 0) break;
        if ((int64_t)r > left) {
          archive_entry_free(ae);
          return pack_fail(L, p, "EAGAIN", "%s: %s", e->file, "file grew while being packed");
        }
        if (archive_write_data(p->a, p->buf, (size_t)r) < 0) {
          archive_entry_free(ae);
          return pack_fail(L, p, "EARCHIVE", "%s: %s", e->path, archive_error_string(p->a));
        }
        left -= r;
      }
      close(p->fd);
      p->fd = -1;
      if (left != 0) {
        archive_entry_free(ae);
        return pack_fail(L, p, "EAGAIN", "%s: %s", e->file, "file shrank while being packed");
      }
    } else if (e->type == P_FILE && e->dlen > 0) {
      if (archive_write_data(p->a, e->data, e->dlen) < 0) {
        archive_entry_free(ae);
        return pack_fail(L, p, "EARCHIVE", "%s: %s", e->path, archive_error_string(p->a));
      }
    }
  }
  archive_entry_free(ae);
  if (archive_write_close(p->a) != ARCHIVE_OK)
    return pack_fail(L, p, "EARCHIVE", "pack: %s%s", archive_error_string(p->a), "");
  lua_pushlstring(L, p->out ? p->out : "", p->len);
  packer_release(p);
  return 1;
}

static int check_format(lua_State *L, int opts) {
  const char *f = cs_opt_string(L, opts, "format", "tar.gz");
  if (strcmp(f, "tar.gz") == 0 || strcmp(f, "tgz") == 0) return 1;
  if (strcmp(f, "tar") == 0) return 0;
  return luaL_error(L, "opts.format must be \"tar.gz\" or \"tar\", not \"%s\"", f);
}

/** archive.pack(entries, opts) -> bytes | nil, msg, code
 * entries: {path=, data=} | {path=, file=hostpath} | {path=, type="dir"} |
 * {path=, type="symlink", target=}, each with an optional mode (default 0644
 * files, 0755 dirs); a later entry with the same path replaces an earlier one.
 * opts.format: "tar.gz" (default) or "tar". Deterministic:
 * sorted by path bytes, missing parent dirs added, mtime 0, uid/gid 0, no
 * user/group names, pax (restricted) headers, gzip header without time or name. */
static int archive_pack(lua_State *L) {
  packer *p;
  int gz, anchor, set;
  lua_Integer i, n;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  gz = check_format(L, 2);
  p = packer_new(L);
  lua_newtable(L);
  anchor = lua_gettop(L);
  lua_newtable(L);
  set = lua_gettop(L);
  n = (lua_Integer)lua_rawlen(L, 1);
  for (i = 1; i <= n; i++) {
    char what[64];
    pentry *e;
    const char *type = "file";
    int t = lua_rawgeti(L, 1, i), ent = lua_gettop(L);
    cs_fmt_into(what, sizeof what, "entries[%d]", (int)i);
    if (t != LUA_TTABLE) return luaL_error(L, "%s must be a table", what);
    if (lua_getfield(L, ent, "path") != LUA_TSTRING) return luaL_error(L, "%s.path must be a string", what);
    {
      size_t plen;
      const char *path = pack_path(L, anchor, lua_tostring(L, -1), what, &plen);
      lua_pushvalue(L, -1);
      if (lua_rawget(L, set) == LUA_TNUMBER) {
        /* the same path again: the later entry replaces the earlier one, as
         * a later Dockerfile COPY or tar member does */
        e = &p->ents[lua_tointeger(L, -1) - 1];
        memset(e, 0, sizeof *e);
        lua_pop(L, 2);
      } else {
        lua_pop(L, 1);
        e = packer_add(L, p);
        lua_pushinteger(L, (lua_Integer)p->n);
        lua_rawset(L, set); /* pops the path */
      }
      e->path = path;
      e->plen = plen;
    }
    lua_pop(L, 1); /* the raw path */
    if (lua_getfield(L, ent, "type") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "%s.type must be a string", what);
      type = lua_tostring(L, -1);
    }
    if (strcmp(type, "file") == 0) {
      int hd = lua_getfield(L, ent, "data"), hf = lua_getfield(L, ent, "file");
      e->type = P_FILE;
      e->mode = 0644;
      if ((hd == LUA_TNIL) == (hf == LUA_TNIL))
        return luaL_error(L, "%s: give exactly one of data and file", what);
      if (hd != LUA_TNIL) {
        if (hd != LUA_TSTRING) return luaL_error(L, "%s.data must be a string", what);
        e->data = lua_tolstring(L, -2, &e->dlen); /* anchored by entries */
      } else {
        if (hf != LUA_TSTRING) return luaL_error(L, "%s.file must be a string", what);
        e->file = lua_tostring(L, -1);
      }
      lua_pop(L, 2);
    } else if (strcmp(type, "dir") == 0) {
      e->type = P_DIR;
      e->mode = 0755;
    } else if (strcmp(type, "symlink") == 0 || strcmp(type, "link") == 0) {
      e->type = P_LINK;
      e->mode = 0777;
      if (lua_getfield(L, ent, "target") != LUA_TSTRING || lua_rawlen(L, -1) == 0)
        return luaL_error(L, "%s: a symlink needs a non-empty target", what);
      e->target = lua_tostring(L, -1);
      lua_pop(L, 1);
    } else {
      return luaL_error(L, "%s.type must be \"file\", \"dir\" or \"symlink\", not \"%s\"", what, type);
    }
    lua_pop(L, 1); /* type */
    if (lua_getfield(L, ent, "mode") != LUA_TNIL && e->type != P_LINK) e->mode = check_mode(L, -1, what);
    lua_settop(L, set);
  }
  pack_finish_entries(L, p, anchor, set);
  return pack_write(L, p, gz);
}

/* ---- pack_dir -------------------------------------------------------------------- */

typedef struct {
  lua_State *L;
  packer *p;
  int anchor, set;
  const char **excl;
  int *excl_dir;
  int nexcl, normalize;
  const char *prefix;
  char host[PATH_MAX]; /* the host path being walked */
  char rel[PATH_MAX];  /* its path relative to the packed dir */
  int err;
  char errpath[PATH_MAX];
} dwalk;

static int excluded(dwalk *w, const char *rel, int isdir) {
  int i;
  for (i = 0; i < w->nexcl; i++) {
    if (w->excl_dir[i] && !isdir) continue;
    if (fnmatch(w->excl[i], rel, FNM_PATHNAME) == 0) return 1;
  }
  return 0;
}

static const char *dwalk_anchor(dwalk *w, const char *s, size_t *len) {
  lua_State *L = w->L;
  lua_pushstring(L, s);
  lua_pushvalue(L, -1);
  lua_rawseti(L, w->anchor, (lua_Integer)lua_rawlen(L, w->anchor) + 1);
  s = lua_tolstring(L, -1, len);
  lua_pop(L, 1);
  return s;
}

static int dwalk_dir(dwalk *w, int fd) {
  DIR *d = fdopendir(fd);
  struct dirent *de;
  size_t hlen = strlen(w->host), rlen = strlen(w->rel);
  if (!d) {
    w->err = errno;
    cs_fmt_into(w->errpath, sizeof w->errpath, "%s", w->host);
    close(fd);
    return -1;
  }
  while ((errno = 0, de = readdir(d)) != NULL) {
    const char *name = de->d_name;
    struct stat st;
    char full[PATH_MAX];
    pentry *e;
    size_t plen;
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
    if (hlen + strlen(name) + 2 > sizeof w->host || rlen + strlen(name) + 2 > sizeof w->rel) {
      w->err = ENAMETOOLONG;
      cs_fmt_into(w->errpath, sizeof w->errpath, "%s/%s", w->host, name);
      closedir(d);
      return -1;
    }
    cs_fmt_into(w->host + hlen, sizeof w->host - hlen, "/%s", name);
    if (rlen) cs_fmt_into(w->rel + rlen, sizeof w->rel - rlen, "/%s", name);
    else cs_fmt_into(w->rel, sizeof w->rel, "%s", name);
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) goto fail;
    if (excluded(w, w->rel, S_ISDIR(st.st_mode))) goto next;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
      errno = ENOTSUP; /* sockets, fifos, devices: exclude them */
      goto fail;
    }
    if ((w->prefix ? strlen(w->prefix) + 1 : 0) + strlen(w->rel) >= sizeof full) {
      errno = ENAMETOOLONG;
      goto fail;
    }
    if (w->prefix) cs_fmt_into(full, sizeof full, "%s/%s", w->prefix, w->rel);
    else cs_fmt_into(full, sizeof full, "%s", w->rel);
    e = packer_add(w->L, w->p);
    e->path = dwalk_anchor(w, full, &plen);
    e->plen = plen;
    lua_pushlstring(w->L, e->path, e->plen);
    lua_pushinteger(w->L, (lua_Integer)w->p->n);
    lua_rawset(w->L, w->set);
    if (S_ISDIR(st.st_mode)) {
      int sub;
      e->type = P_DIR;
      e->mode = w->normalize ? 0755 : (st.st_mode & 0777);
      sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) goto fail;
      if (dwalk_dir(w, sub) != 0) {
        closedir(d);
        return -1;
      }
    } else if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlinkat(dirfd(d), name, target, sizeof target - 1);
      if (n < 0) goto fail;
      target[n] = '\0';
      e->type = P_LINK;
      e->mode = 0777;
      e->target = dwalk_anchor(w, target, &plen);
    } else {
      e->type = P_FILE;
      e->mode = w->normalize ? ((st.st_mode & 0111) ? 0755 : 0644) : (st.st_mode & 0777);
      e->file = dwalk_anchor(w, w->host, &plen);
      e->nofollow = 1;
    }
  next:
    w->host[hlen] = '\0';
    w->rel[rlen] = '\0';
  }
  if (errno != 0) goto fail;
  closedir(d);
  return 0;
fail:
  w->err = errno;
  cs_fmt_into(w->errpath, sizeof w->errpath, "%s", w->host);
  closedir(d);
  return -1;
}

/** archive.pack_dir(dir, opts) -> bytes | nil, msg, code
 * opts: format, exclude (fnmatch patterns on paths relative to dir, '*' not
 * crossing '/'; an excluded directory drops its subtree; a trailing "/"
 * matches directories only), prefix (a path to put every entry under),
 * modes ("preserve", default: permission bits as on disk; "normalize": 0755
 * for directories and executables, 0644 for other files). Symlinks are
 * stored as symlinks; sockets, fifos and devices fail with ENOTSUP. */
static int archive_pack_dir(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  const char *modes;
  dwalk *w;
  int gz, fd;
  lua_Integer i, n = 0;
  gz = check_format(L, 2);
  modes = cs_opt_string(L, 2, "modes", "preserve");
  if (strcmp(modes, "preserve") != 0 && strcmp(modes, "normalize") != 0)
    return luaL_error(L, "opts.modes must be \"preserve\" or \"normalize\"");
  lua_settop(L, 2);
  w = lua_newuserdatauv(L, sizeof *w, 0); /* 3 */
  memset(w, 0, sizeof *w);
  w->L = L;
  w->normalize = modes[0] == 'n';
  w->p = packer_new(L); /* 4 */
  lua_newtable(L);
  w->anchor = lua_gettop(L); /* 5 */
  lua_newtable(L);
  w->set = lua_gettop(L); /* 6 */
  if (!lua_isnoneornil(L, 2) && lua_getfield(L, 2, "exclude") != LUA_TNIL) {
    luaL_argcheck(L, lua_istable(L, -1), 2, "opts.exclude must be an array of patterns");
    n = (lua_Integer)lua_rawlen(L, -1);
  }
  {
    int ex = lua_gettop(L);
    w->excl = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *w->excl, 0);
    w->excl_dir = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *w->excl_dir, 0);
    lua_rawseti(L, w->anchor, (lua_Integer)lua_rawlen(L, w->anchor) + 1);
    lua_rawseti(L, w->anchor, (lua_Integer)lua_rawlen(L, w->anchor) + 1);
    for (i = 1; i <= n; i++) {
      size_t len;
      const char *pat;
      char buf[PATH_MAX];
      if (lua_rawgeti(L, ex, i) != LUA_TSTRING)
        return luaL_error(L, "opts.exclude[%d] must be a string", (int)i);
      pat = lua_tolstring(L, -1, &len);
      while (pat[0] == '/' || (pat[0] == '.' && pat[1] == '/')) pat += pat[0] == '/' ? 1 : 2;
      cs_fmt_into(buf, sizeof buf, "%s", pat);
      len = strlen(buf);
      w->excl_dir[i - 1] = len > 0 && buf[len - 1] == '/';
      while (len > 0 && buf[len - 1] == '/') buf[--len] = '\0';
      w->excl[i - 1] = dwalk_anchor(w, buf, &len);
      lua_pop(L, 1);
    }
    w->nexcl = (int)n;
  }
  {
    const char *prefix = cs_opt_string(L, 2, "prefix", NULL);
    if (prefix) {
      size_t plen;
      char what[] = "opts.prefix";
      w->prefix = pack_path(L, w->anchor, prefix, what, &plen);
      lua_pop(L, 1);
    }
  }
  lua_settop(L, 6);
  cs_fmt_into(w->host, sizeof w->host, "%s", dir);
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return cs_fail(L, cs_errno_code(errno), "%s: %s", dir, strerror(errno));
  if (dwalk_dir(w, fd) != 0) return cs_fail(L, cs_errno_code(w->err), "%s: %s", w->errpath, strerror(w->err));
  pack_finish_entries(L, w->p, w->anchor, w->set);
  return pack_write(L, w->p, gz);
}

int luaopen_cseng_archive(lua_State *L) {
  if (!utf8_ctype) utf8_ctype = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  static const luaL_Reg funcs[] = {{"extract", archive_extract},
                                   {"list", archive_list},
                                   {"pack", archive_pack},
                                   {"pack_dir", archive_pack_dir},
                                   {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
