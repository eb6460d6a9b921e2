/*
 * lredact.c: module cseng.redact, the Lua side's door to the C secret set (redact.h).
 * util.lua pushes every secret form here when its set changes; C diagnostics (cs_diag)
 * then hide what util.redact hides.
 *
 *   redact.add(s [, fragments])  a secret (and, with fragments, its 8-byte runs)
 *   redact.clear()               forget them all
 *   redact.apply(s) -> s         the C redactor's output (for specs: it matches util.redact)
 *   redact.diag(s)               write s to stderr as the engine's C diagnostics are written
 */
#include "core.h"
#include "redact.h"

#include <stdlib.h>

static int r_add(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  if (!cs_redact_add(s, n, lua_toboolean(L, 2))) return luaL_error(L, "out of memory");
  return 0;
}

static int r_clear(lua_State *L) {
  (void)L;
  cs_redact_clear();
  return 0;
}

static int r_apply(lua_State *L) {
  size_t n, outlen;
  const char *s = luaL_checklstring(L, 1, &n);
  char *out = cs_redact(s, n, &outlen);
  if (!out) return luaL_error(L, "out of memory");
  lua_pushlstring(L, out, outlen);
  free(out);
  return 1;
}

static int r_diag(lua_State *L) {
  cs_diag("%s", luaL_checkstring(L, 1));
  return 0;
}

int luaopen_cseng_redact(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"add", r_add}, {"clear", r_clear}, {"apply", r_apply}, {"diag", r_diag}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
