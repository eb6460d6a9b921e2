/*
 * lclock.c: time. Module cseng.clock.
 *   clock.now()   monotonic nanoseconds (integer; uv_hrtime, CLOCK_MONOTONIC)
 *   clock.answered([since])  where a timing of a call ends: when the answer that last woke the
 *                 running task arrived (an HTTP response's last bytes; on the native HTTP/1.1
 *                 path the kernel's receive stamp), if the task has not waited for anything
 *                 since and it is not before `since`; otherwise clock.now(). The time the
 *                 answer then waited for this process's loop, and the decoding after it, are
 *                 the tool's own, not the provider's.
 *   clock.wall()  ISO-8601 UTC wall time with microseconds, e.g. 2026-11-29T07:35:04.123456Z
 *   clock.epoch() wall time as float seconds since 1970
 */
#include "core.h"

#include <stdio.h>
#include <time.h>

static int clock_now(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)uv_hrtime());
  return 1;
}

static int clock_answered(lua_State *L) {
  uint64_t at = cs_task_answered_at(), now = uv_hrtime();
  lua_Integer since = luaL_optinteger(L, 1, 0);
  lua_pushinteger(L, (lua_Integer)(at && at <= now && (lua_Integer)at >= since ? at : now));
  return 1;
}

static int clock_wall(lua_State *L) {
  struct timespec ts;
  struct tm tm;
  char buf[64];
  clock_gettime(CLOCK_REALTIME, &ts);
  if (lua_isnumber(L, 1)) { /* format a given epoch-seconds value */
    double e = lua_tonumber(L, 1);
    ts.tv_sec = (time_t)e;
    ts.tv_nsec = (long)((e - (double)ts.tv_sec) * 1e9);
  }
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
  lua_pushstring(L, buf);
  return 1;
}

static int clock_epoch(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
  return 1;
}

int luaopen_cseng_clock(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"now", clock_now}, {"answered", clock_answered}, {"wall", clock_wall}, {"epoch", clock_epoch}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
