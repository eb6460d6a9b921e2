/*
 * aux.c: the helpers every binding shares (see aux.h).
 */
#include "aux.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* ---- option tables -------------------------------------------------------- */

int cs_opt_field(lua_State *L, int idx, const char *field) {
  if (lua_isnoneornil(L, idx)) {
    lua_pushnil(L);
    return LUA_TNIL;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  return lua_getfield(L, idx, field);
}

int cs_opt_bool(lua_State *L, int idx, const char *field, int def) {
  int v = def;
  if (cs_opt_field(L, idx, field) != LUA_TNIL) v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

double cs_opt_number(lua_State *L, int idx, const char *field, double def) {
  double v = def;
  if (cs_opt_field(L, idx, field) != LUA_TNIL) {
    int ok;
    v = lua_tonumberx(L, -1, &ok);
    if (!ok) return luaL_error(L, "opts.%s must be a number", field);
  }
  lua_pop(L, 1);
  return v;
}

lua_Integer cs_opt_integer(lua_State *L, int idx, const char *field, lua_Integer def, lua_Integer min) {
  lua_Integer v = def;
  if (cs_opt_field(L, idx, field) != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok || v < min) {
      if (min == 0) return luaL_error(L, "opts.%s must be a non-negative integer", field);
      return luaL_error(L, "opts.%s must be an integer >= %I", field, (LUAI_UACINT)min);
    }
  }
  lua_pop(L, 1);
  return v;
}

const char *cs_opt_string(lua_State *L, int idx, const char *field, const char *def) {
  const char *v = def;
  if (cs_opt_field(L, idx, field) != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "opts.%s must be a string", field);
    v = lua_tostring(L, -1); /* anchored by the options table */
  }
  lua_pop(L, 1);
  return v;
}

/* ---- errors ------------------------------------------------------------------ */

const char *cs_errno_code(int e) {
  const char *name = e > 0 ? strerrorname_np(e) : NULL;
  if (e == ENOTSUP) return "ENOTSUP"; /* glibc names this value EOPNOTSUPP */
  return name ? name : "EIO";
}

int cs_fail_errno(lua_State *L, int e, const char *fmt, ...) {
  va_list ap;
  lua_pushnil(L);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_pushfstring(L, "%s: %s", lua_tostring(L, -1), strerror(e));
  lua_remove(L, -2);
  lua_pushstring(L, cs_errno_code(e));
  return 3;
}

/* ---- formatting and buffers ------------------------------------------------ */

void cs_fmt_into(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

size_t cs_utoa(char *out, uint64_t v) {
  char t[20];
  size_t n = 0, i;
  do {
    t[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (i = 0; i < n; i++) out[i] = t[n - 1 - i];
  return n;
}

int cs_buf_add(cs_buf *b, const char *p, size_t n) {
  if (n > SIZE_MAX - b->len) return 0;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *np;
    while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
    np = realloc(b->p, cap);
    if (!np) return 0;
    b->p = np;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  return 1;
}

void cs_buf_free(cs_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- the environment and signals ------------------------------------------- */

void cs_environ_into(lua_State *L, int idx) {
  char **e;
  idx = lua_absindex(L, idx);
  for (e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    lua_pushlstring(L, *e, (size_t)(eq - *e));
    lua_pushstring(L, eq + 1);
    lua_rawset(L, idx);
  }
}

int cs_signal_number(const char *name) {
  int sig;
  if (strncmp(name, "SIG", 3) == 0) name += 3;
  if (*name == '\0') return 0;
  for (sig = 1; sig < NSIG; sig++) {
    const char *abbr = sigabbrev_np(sig);
    if (abbr && strcmp(abbr, name) == 0) return sig;
  }
  return 0;
}

int cs_check_signal(lua_State *L, int idx, int def) {
  int sig;
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    lua_Integer n = luaL_checkinteger(L, idx);
    luaL_argcheck(L, n >= 0 && n < NSIG, idx, "signal number out of range");
    return (int)n;
  }
  sig = cs_signal_number(luaL_checkstring(L, idx));
  if (sig == 0) return luaL_argerror(L, idx, lua_pushfstring(L, "unknown signal '%s'", lua_tostring(L, idx)));
  return sig;
}

void cs_push_signal_name(lua_State *L, int sig) {
  const char *abbr = sigabbrev_np(sig);
  if (abbr) lua_pushfstring(L, "SIG%s", abbr);
  else lua_pushfstring(L, "SIG%d", sig);
}

void cs_set_integer(lua_State *L, const char *field, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, field);
}

void cs_new_class(lua_State *L, const char *tname, const luaL_Reg *methods, const luaL_Reg *meta) {
  if (luaL_newmetatable(L, tname)) {
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
}
