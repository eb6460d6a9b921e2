/* lsqlite.c: the cseng.sqlite module, Debian's libsqlite3 bound for the history store.
 *
 *   sqlite.open(path [, opts])  -> db | nil, msg, code
 *       opts: readonly (false), create (true: make the file if missing), busy_timeout
 *       (seconds, default 5: how long a write waits for another connection's lock)
 *   sqlite.version()            -> "3.40.1"
 *   db:exec(sql)                -> true | nil, msg, code   SQL without parameters (schema, pragmas)
 *   db:prepare(sql)             -> stmt | nil, msg, code   one statement, ? or ?NNN parameters
 *   db:changes(), db:last_insert_rowid(), db:autocommit(), db:busy_timeout(seconds), db:close()
 *   stmt:run(...)               -> rows changed | nil, msg, code   (a row the statement yields is skipped)
 *   stmt:one(...)               -> the first row as a table, or nil | nil, msg, code
 *   stmt:all(...)               -> an array of rows | nil, msg, code
 *   stmt:each(fn, ...)          -> rows seen | nil, msg, code   fn(row) per row (it must not yield)
 *   stmt:arrays(null, ...)      -> {column = {values...}}, rows | nil, msg, code   a NULL is `null`
 *   stmt:columns(), stmt:close()
 *
 * Values only ever reach SQL as bound parameters: every statement method takes the values of
 * its parameters, exactly as many as the statement has (misuse raises), and binds them (nil ->
 * NULL, boolean -> 0/1, integer -> INTEGER, float -> REAL (NaN -> NULL), string -> TEXT with its
 * length, embedded NULs kept). A row is a table keyed by column name; NULL columns are absent.
 * exec takes no values, so text from a log can never be spliced into SQL through this module.
 *
 * Every call is synchronous and blocks the loop (every task) while SQLite works; a write that
 * meets another connection's lock waits up to busy_timeout in SQLite's own busy handler, then
 * fails with EBUSY. Keep transactions short. A database is opened with defensive settings: no
 * symbolic link as the file, an untrusted schema (no SQL functions with side effects in views
 * or triggers of a file that came from elsewhere), the defensive flag (no writes to the schema
 * or shadow tables through SQL), no extensions.
 *
 * Failures map SQLite's result to the engine's codes: EBUSY (BUSY, LOCKED), ECONSTRAINT,
 * ECORRUPT (CORRUPT, NOTADB), ENOSPC (FULL), EIO (IOERR), EROFS (READONLY), EACCES (PERM,
 * AUTH), ENOMEM, EFBIG (TOOBIG), the errno's name for CANTOPEN, ESQLITE for the rest (SQL errors:
 * syntax, no such table), the message from sqlite3_errmsg. Objects: one idempotent close for
 * __gc, __close and :close(); methods on a closed object raise. A statement keeps its database
 * alive; closing the database first leaves SQLite to release it with its last statement. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <sqlite3.h>

#include "aux.h"
#include "core.h"

#define DB_MT "cseng.sqlite.db"
#define STMT_MT "cseng.sqlite.stmt"

typedef struct {
  sqlite3 *db;
  char path[512];
} ldb;

typedef struct {
  sqlite3_stmt *st;
  ldb *owner; /* kept alive by the statement's user value */
} lstmt;

static const char *code_of(sqlite3 *db, int rc) {
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return "EBUSY";
  case SQLITE_CONSTRAINT: return "ECONSTRAINT";
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB: return "ECORRUPT";
  case SQLITE_FULL: return "ENOSPC";
  case SQLITE_IOERR: return "EIO";
  case SQLITE_READONLY: return "EROFS";
  case SQLITE_PERM:
  case SQLITE_AUTH: return "EACCES";
  case SQLITE_NOMEM: return "ENOMEM";
  case SQLITE_TOOBIG: return "EFBIG";
  case SQLITE_CANTOPEN: {
    int e = db ? sqlite3_system_errno(db) : 0;
    return e ? cs_errno_code(e) : "ENOENT";
  }
  default: return "ESQLITE";
  }
}

static int fail_db(lua_State *L, ldb *d, int rc) {
  const char *msg = d->db ? sqlite3_errmsg(d->db) : sqlite3_errstr(rc);
  return cs_fail(L, code_of(d->db, rc), "%s: %s", d->path, msg);
}

static ldb *check_db(lua_State *L, int idx) {
  ldb *d = luaL_checkudata(L, idx, DB_MT);
  if (!d->db) luaL_error(L, "sqlite: the database is closed");
  return d;
}

static lstmt *check_stmt(lua_State *L, int idx) {
  lstmt *s = luaL_checkudata(L, idx, STMT_MT);
  if (!s->st) luaL_error(L, "sqlite: the statement is closed");
  if (!s->owner->db) luaL_error(L, "sqlite: the statement's database is closed");
  return s;
}

/* ---- the database ------------------------------------------------------------------------ */

static int l_open(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  int readonly = cs_opt_bool(L, 2, "readonly", 0);
  int create = cs_opt_bool(L, 2, "create", 1);
  double busy = cs_opt_number(L, 2, "busy_timeout", 5.0);
  if (strlen(path) != plen) return luaL_argerror(L, 1, "the path holds a NUL byte");
  if (plen >= sizeof(((ldb *)0)->path)) return luaL_argerror(L, 1, "the path is too long");
  if (!(busy >= 0 && busy <= 3600)) return luaL_error(L, "opts.busy_timeout must be seconds in [0, 3600]");
  ldb *d = lua_newuserdatauv(L, sizeof *d, 0);
  d->db = NULL;
  memcpy(d->path, path, plen + 1);
  luaL_setmetatable(L, DB_MT);
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE;
  flags |= readonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0));
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, flags, NULL);
  if (rc != SQLITE_OK) {
    const char *code = code_of(db, rc);
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    lua_pushstring(L, code);
    sqlite3_close_v2(db);
    return 3;
  }
  d->db = db;
  sqlite3_busy_timeout(db, (int)(busy * 1000));
  /* a database file may come from another machine: its schema is not trusted */
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0);
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
  sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)0);
  return 1;
}

static int db_close(lua_State *L) {
  ldb *d = luaL_checkudata(L, 1, DB_MT);
  if (d->db) {
    sqlite3_close_v2(d->db); /* a zombie until its last statement is finalized */
    d->db = NULL;
  }
  return 0;
}

static int db_exec(lua_State *L) {
  ldb *d = check_db(L, 1);
  const char *sql = luaL_checkstring(L, 2);
  if (lua_gettop(L) > 2) return luaL_error(L, "sqlite: exec takes no values (prepare a statement and bind them)");
  int rc = sqlite3_exec(d->db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK) return fail_db(L, d, rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int db_prepare(lua_State *L) {
  ldb *d = check_db(L, 1);
  size_t len;
  const char *sql = luaL_checklstring(L, 2, &len);
  const char *tail = NULL;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(d->db, sql, (int)len, &st, &tail);
  if (rc != SQLITE_OK) return fail_db(L, d, rc);
  if (!st) return luaL_error(L, "sqlite: prepare needs a statement (the text is empty or a comment)");
  if (tail) {
    while (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == '\r' || *tail == ';') tail++;
    if (*tail) {
      char more[48];
      cs_fmt_into(more, sizeof more, "%.40s", tail); /* lua_pushfstring has no precision */
      sqlite3_finalize(st);
      return luaL_error(L, "sqlite: prepare takes one statement (more follows: %s)", more);
    }
  }
  lstmt *s = lua_newuserdatauv(L, sizeof *s, 1);
  s->st = st;
  s->owner = d;
  luaL_setmetatable(L, STMT_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static int db_changes(lua_State *L) {
  lua_pushinteger(L, sqlite3_changes64(check_db(L, 1)->db));
  return 1;
}

static int db_last_insert_rowid(lua_State *L) {
  lua_pushinteger(L, sqlite3_last_insert_rowid(check_db(L, 1)->db));
  return 1;
}

static int db_autocommit(lua_State *L) {
  lua_pushboolean(L, sqlite3_get_autocommit(check_db(L, 1)->db));
  return 1;
}

static int db_busy_timeout(lua_State *L) {
  ldb *d = check_db(L, 1);
  double s = luaL_checknumber(L, 2);
  if (!(s >= 0 && s <= 3600)) return luaL_argerror(L, 2, "seconds in [0, 3600]");
  sqlite3_busy_timeout(d->db, (int)(s * 1000));
  return 0;
}

static int db_tostring(lua_State *L) {
  ldb *d = luaL_checkudata(L, 1, DB_MT);
  lua_pushfstring(L, "sqlite db %s%s", d->path, d->db ? "" : " (closed)");
  return 1;
}

/* ---- statements -------------------------------------------------------------------------- */

/* Bind the values at first..top to s (the statement is reset first). Raises on misuse. */
static void bind_all(lua_State *L, lstmt *s, int first) {
  int n = lua_gettop(L) - first + 1;
  int want = sqlite3_bind_parameter_count(s->st);
  sqlite3_reset(s->st);
  sqlite3_clear_bindings(s->st);
  if (n != want) luaL_error(L, "sqlite: the statement takes %d value(s), got %d", want, n);
  for (int i = 1; i <= n; i++) {
    int idx = first + i - 1, rc;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: rc = sqlite3_bind_null(s->st, i); break;
    case LUA_TBOOLEAN: rc = sqlite3_bind_int(s->st, i, lua_toboolean(L, idx)); break;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) rc = sqlite3_bind_int64(s->st, i, (sqlite3_int64)lua_tointeger(L, idx));
      else {
        double v = lua_tonumber(L, idx);
        rc = isnan(v) ? sqlite3_bind_null(s->st, i) : sqlite3_bind_double(s->st, i, v);
      }
      break;
    case LUA_TSTRING: {
      size_t len;
      const char *p = lua_tolstring(L, idx, &len);
      rc = sqlite3_bind_text64(s->st, i, p, (sqlite3_uint64)len, SQLITE_TRANSIENT, SQLITE_UTF8);
      break;
    }
    default:
      luaL_error(L, "sqlite: value %d is a %s (nil, boolean, number or string)", i, luaL_typename(L, idx));
      return;
    }
    if (rc != SQLITE_OK) luaL_error(L, "sqlite: binding value %d: %s", i, sqlite3_errstr(rc));
  }
}

static void push_row(lua_State *L, sqlite3_stmt *st) {
  int n = sqlite3_column_count(st);
  lua_createtable(L, 0, n);
  for (int c = 0; c < n; c++) {
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_INTEGER: lua_pushinteger(L, (lua_Integer)sqlite3_column_int64(st, c)); break;
    case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(st, c)); break;
    case SQLITE_TEXT: lua_pushlstring(L, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c)); break;
    case SQLITE_BLOB: {
      const void *b = sqlite3_column_blob(st, c);
      lua_pushlstring(L, b ? b : "", (size_t)sqlite3_column_bytes(st, c));
      break;
    }
    default: continue; /* NULL: absent */
    }
    const char *name = sqlite3_column_name(st, c);
    if (!name) luaL_error(L, "sqlite: out of memory");
    lua_setfield(L, -2, name);
  }
}

/* Step to the end after an error or the last row; the statement is left reset. */
static int step_fail(lua_State *L, lstmt *s, int rc) {
  int n = fail_db(L, s->owner, rc);
  sqlite3_reset(s->st);
  return n;
}

static int st_run(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  bind_all(L, s, 2);
  int rc;
  while ((rc = sqlite3_step(s->st)) == SQLITE_ROW) {}
  if (rc != SQLITE_DONE) return step_fail(L, s, rc);
  sqlite3_reset(s->st);
  lua_pushinteger(L, sqlite3_changes64(s->owner->db));
  return 1;
}

static int st_one(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  bind_all(L, s, 2);
  int rc = sqlite3_step(s->st);
  if (rc == SQLITE_ROW) {
    push_row(L, s->st);
    sqlite3_reset(s->st);
    return 1;
  }
  if (rc != SQLITE_DONE) return step_fail(L, s, rc);
  sqlite3_reset(s->st);
  lua_pushnil(L);
  return 1;
}

static int st_all(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  bind_all(L, s, 2);
  lua_newtable(L);
  lua_Integer i = 0;
  int rc;
  while ((rc = sqlite3_step(s->st)) == SQLITE_ROW) {
    push_row(L, s->st);
    lua_rawseti(L, -2, ++i);
  }
  if (rc != SQLITE_DONE) return step_fail(L, s, rc);
  sqlite3_reset(s->st);
  return 1;
}

/* fn(row) per row; a raise in fn resets the statement (its read ends) and goes on up. */
static int st_each(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  bind_all(L, s, 3);
  lua_Integer i = 0;
  int rc;
  while ((rc = sqlite3_step(s->st)) == SQLITE_ROW) {
    lua_pushvalue(L, 2);
    push_row(L, s->st);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
      if (s->st) sqlite3_reset(s->st);
      return lua_error(L);
    }
    i++;
    if (!s->st || !s->owner->db) return luaL_error(L, "sqlite: the statement was closed inside each");
  }
  if (rc != SQLITE_DONE) return step_fail(L, s, rc);
  sqlite3_reset(s->st);
  lua_pushinteger(L, i);
  return 1;
}

/* Every row as one array per column, {name = {v1, v2, ...}} (a NULL is the value `null`): a chart's
 * thousands of rows without a table per row. */
static int st_arrays(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  luaL_checkany(L, 2);
  bind_all(L, s, 3);
  int n = sqlite3_column_count(s->st);
  int base = lua_gettop(L);
  for (int c = 0; c < n; c++) lua_newtable(L); /* the columns at base+1 .. base+n */
  lua_Integer i = 0;
  int rc;
  while ((rc = sqlite3_step(s->st)) == SQLITE_ROW) {
    i++;
    for (int c = 0; c < n; c++) {
      switch (sqlite3_column_type(s->st, c)) {
      case SQLITE_INTEGER: lua_pushinteger(L, (lua_Integer)sqlite3_column_int64(s->st, c)); break;
      case SQLITE_FLOAT: lua_pushnumber(L, sqlite3_column_double(s->st, c)); break;
      case SQLITE_TEXT:
      case SQLITE_BLOB: {
        const void *b = sqlite3_column_blob(s->st, c);
        lua_pushlstring(L, b ? b : "", (size_t)sqlite3_column_bytes(s->st, c));
        break;
      }
      default: lua_pushvalue(L, 2); break;
      }
      lua_rawseti(L, base + 1 + c, i);
    }
  }
  if (rc != SQLITE_DONE) return step_fail(L, s, rc);
  sqlite3_reset(s->st);
  lua_createtable(L, 0, n);
  for (int c = 0; c < n; c++) {
    const char *name = sqlite3_column_name(s->st, c);
    if (!name) return luaL_error(L, "sqlite: out of memory");
    lua_pushvalue(L, base + 1 + c);
    lua_setfield(L, -2, name);
  }
  lua_pushinteger(L, i);
  return 2;
}

static int st_columns(lua_State *L) {
  lstmt *s = check_stmt(L, 1);
  int n = sqlite3_column_count(s->st);
  lua_createtable(L, n, 0);
  for (int c = 0; c < n; c++) {
    lua_pushstring(L, sqlite3_column_name(s->st, c));
    lua_rawseti(L, -2, c + 1);
  }
  return 1;
}

static int st_close(lua_State *L) {
  lstmt *s = luaL_checkudata(L, 1, STMT_MT);
  if (s->st) {
    sqlite3_finalize(s->st);
    s->st = NULL;
  }
  return 0;
}

static int st_tostring(lua_State *L) {
  lstmt *s = luaL_checkudata(L, 1, STMT_MT);
  lua_pushfstring(L, "sqlite statement%s", s->st ? "" : " (closed)");
  return 1;
}

static int l_version(lua_State *L) {
  lua_pushstring(L, sqlite3_libversion());
  return 1;
}

int luaopen_cseng_sqlite(lua_State *L) {
  static const luaL_Reg db_methods[] = {{"exec", db_exec},
                                        {"prepare", db_prepare},
                                        {"changes", db_changes},
                                        {"last_insert_rowid", db_last_insert_rowid},
                                        {"autocommit", db_autocommit},
                                        {"busy_timeout", db_busy_timeout},
                                        {"close", db_close},
                                        {NULL, NULL}};
  static const luaL_Reg db_meta[] = {{"__gc", db_close}, {"__close", db_close}, {"__tostring", db_tostring}, {NULL, NULL}};
  static const luaL_Reg st_methods[] = {{"run", st_run},       {"one", st_one},         {"all", st_all},
                                        {"each", st_each},     {"arrays", st_arrays},   {"columns", st_columns},
                                        {"close", st_close},   {NULL, NULL}};
  static const luaL_Reg st_meta[] = {{"__gc", st_close}, {"__close", st_close}, {"__tostring", st_tostring}, {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"open", l_open}, {"version", l_version}, {NULL, NULL}};
  cs_new_class(L, DB_MT, db_methods, db_meta);
  cs_new_class(L, STMT_MT, st_methods, st_meta);
  luaL_newlib(L, funcs);
  return 1;
}
