/*
 * lsys.c: the process and its host. Module cseng.sys.
 *   sys.versions()   {cseng=, lua=, libcurl=, libuv=, libarchive=, openssl=}
 *   sys.root()       the directory holding lua/ (and plans/, data/ in a checkout)
 *   sys.getenv(name), sys.environ(), sys.hostname(), sys.pid(), sys.uid(),
 *   sys.isatty(fd), sys.cpu_count(), sys.usage() -> {maxrss_kb, user_s, sys_s},
 *   sys.realpath(p), sys.cwd(), sys.kill(pid, "INT"|"TERM"|"KILL"|n)
 */
#include "core.h"

#include <archive.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef CSENG_VERSION
#define CSENG_VERSION "0.0.0-dev"
#endif

extern char **environ;

static int sys_versions(lua_State *L) {
  lua_createtable(L, 0, 6);
  lua_pushstring(L, CSENG_VERSION);
  lua_setfield(L, -2, "cseng");
  lua_pushstring(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua");
  lua_pushstring(L, curl_version_info(CURLVERSION_NOW)->version);
  lua_setfield(L, -2, "libcurl");
  lua_pushstring(L, uv_version_string());
  lua_setfield(L, -2, "libuv");
  lua_pushstring(L, archive_version_string());
  lua_setfield(L, -2, "libarchive");
  lua_pushstring(L, OpenSSL_version(OPENSSL_VERSION));
  lua_setfield(L, -2, "openssl");
  return 1;
}

static int sys_root(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "cseng.root");
  return 1;
}

static int sys_getenv(lua_State *L) {
  lua_pushstring(L, getenv(luaL_checkstring(L, 1)));
  return 1;
}

static int sys_environ(lua_State *L) {
  char **e;
  lua_newtable(L);
  for (e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    lua_pushlstring(L, *e, (size_t)(eq - *e));
    lua_pushstring(L, eq + 1);
    lua_rawset(L, -3);
  }
  return 1;
}

static int sys_hostname(lua_State *L) {
  char buf[256];
  if (gethostname(buf, sizeof buf) != 0) return cs_fail(L, "EHOST", "gethostname: %s", strerror(errno));
  buf[sizeof buf - 1] = '\0';
  lua_pushstring(L, buf);
  return 1;
}

static int sys_pid(lua_State *L) {
  lua_pushinteger(L, getpid());
  return 1;
}

static int sys_uid(lua_State *L) {
  lua_pushinteger(L, getuid());
  return 1;
}

static int sys_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 1)));
  return 1;
}

static int sys_cpu_count(lua_State *L) {
  lua_pushinteger(L, sysconf(_SC_NPROCESSORS_ONLN));
  return 1;
}

static int sys_usage(lua_State *L) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, ru.ru_maxrss);
  lua_setfield(L, -2, "maxrss_kb");
  lua_pushnumber(L, (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6);
  lua_setfield(L, -2, "user_s");
  lua_pushnumber(L, (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
  lua_setfield(L, -2, "sys_s");
  return 1;
}

static int sys_realpath(lua_State *L) {
  char buf[PATH_MAX];
  const char *p = luaL_checkstring(L, 1);
  if (!realpath(p, buf)) {
    int e = errno;
    return cs_fail(L, uv_err_name(uv_translate_sys_error(e)), "%s: %s", p, strerror(e));
  }
  lua_pushstring(L, buf);
  return 1;
}

static int sys_cwd(lua_State *L) {
  char buf[PATH_MAX];
  if (!getcwd(buf, sizeof buf)) {
    int e = errno;
    return cs_fail(L, uv_err_name(uv_translate_sys_error(e)), "getcwd: %s", strerror(e));
  }
  lua_pushstring(L, buf);
  return 1;
}

static int sys_kill(lua_State *L) {
  pid_t pid = (pid_t)luaL_checkinteger(L, 1);
  int sig;
  if (lua_type(L, 2) == LUA_TSTRING) {
    static const char *const names[] = {"INT", "TERM", "KILL", "HUP", "USR1", "USR2", NULL};
    static const int sigs[] = {SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGUSR1, SIGUSR2};
    sig = sigs[luaL_checkoption(L, 2, NULL, names)];
  } else {
    sig = (int)luaL_optinteger(L, 2, SIGTERM);
  }
  if (kill(pid, sig) != 0) return cs_fail(L, errno == ESRCH ? "ESRCH" : "EPERM", "kill %d: %s", (int)pid, strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_cseng_sys(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"versions", sys_versions}, {"root", sys_root},       {"getenv", sys_getenv},
      {"environ", sys_environ},   {"hostname", sys_hostname}, {"pid", sys_pid},
      {"uid", sys_uid},           {"isatty", sys_isatty},   {"cpu_count", sys_cpu_count},
      {"usage", sys_usage},       {"realpath", sys_realpath}, {"cwd", sys_cwd},
      {"kill", sys_kill},         {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
