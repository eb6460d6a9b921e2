/*
 * main.c: the cseng process. Creates the Lua state, registers every engine
 * module (cseng.<name>, from the generated modules.h), points package.path at
 * the Lua tree, and runs lua/cseng/cli/main.lua's main(...) as the first task.
 * Policy (commands, flags, help) lives in Lua; this file only boots.
 */
#include "core.h"
#include "redact.h"

#include <lualib.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define X(name) int luaopen_cseng_##name(lua_State *L);
#include "modules.h"
#undef X

#ifndef CSENG_DATADIR
#define CSENG_DATADIR "/usr/local/share/cseng"
#endif

static int has_cli(const char *root) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/lua/cseng/cli/main.lua", root);
  return access(p, R_OK) == 0;
}

/* The directory holding lua/: $CSENG_ROOT, else the binary's own directory,
 * else the install data directory. */
static void find_root(char *out, size_t n) {
  const char *env = getenv("CSENG_ROOT");
  char exe[PATH_MAX];
  ssize_t len;
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return;
  }
  len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    snprintf(out, n, "%s", dirname(exe));
    if (has_cli(out)) return;
  }
  snprintf(out, n, "%s", CSENG_DATADIR);
}

/* Many concurrent sandboxes, connections and test clients need many descriptors: lift the
 * soft limit to the hard one, once, before anything opens a file. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  char root[PATH_MAX];
  int i, code;
  lua_State *L;
  raise_nofile();
  L = luaL_newstate();
  if (!L) {
    cs_diag("cseng: cannot create the Lua state (out of memory)\n");
    return 1;
  }
  luaL_openlibs(L);
  cs_sched_init(L);
#define X(name)                                              \
  luaL_requiref(L, "cseng." #name, luaopen_cseng_##name, 0); \
  lua_pop(L, 1);
#include "modules.h"
#undef X

  find_root(root, sizeof root);
  lua_pushstring(L, root);
  lua_setfield(L, LUA_REGISTRYINDEX, "cseng.root");
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s", root, root, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);

  lua_createtable(L, argc, 1); /* arg, as lua.c makes it */
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "arg");

  if (luaL_loadstring(L, "return require('cseng.cli.main').main(...)") != LUA_OK) {
    cs_diag("cseng: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  for (i = 1; i < argc; i++) lua_pushstring(L, argv[i]);
  code = cs_sched_run_main(L, argc - 1);
  fflush(stdout);
  lua_close(L);
  cs_sched_shutdown();
  return code;
}
