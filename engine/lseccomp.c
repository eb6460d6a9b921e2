/*
 * lseccomp.c: seccomp filters compiled with libseccomp. Module cseng.seccomp.
 *   seccomp.compile{default_action=, default_errno=, arches={...}, syscalls={...}}
 *       -> bpf (a string of struct sock_filter, what `bwrap --seccomp FD` reads), skipped
 *       (the names this kernel's libseccomp does not know, an array) | nil, msg, code
 *     default_action / syscalls[i].action: "SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL",
 *       "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_TRAP", "SCMP_ACT_LOG" (the OCI names);
 *     default_errno / syscalls[i].errno: the errno of SCMP_ACT_ERRNO (default EPERM);
 *     arches: "SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", ...
 *       (the native one is always in);
 *     syscalls[i] = {names={...}, action=, errno=, args={{index=, value=, value_two=, op=}}}
 *       op: "SCMP_CMP_EQ", "SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_GT",
 *       "SCMP_CMP_GE", "SCMP_CMP_MASKED_EQ".
 * The profile itself (which rules apply to which capabilities and architectures) is policy and
 * lives in Lua; this file only turns resolved rules into a filter, as runc and crun do with the
 * same library. Names unknown to libseccomp are skipped, as runc skips them.
 */
#include "core.h"
#include "aux.h"

#include <errno.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const struct {
  const char *name;
  uint32_t arch;
} ARCHES[] = {
    {"SCMP_ARCH_X86_64", SCMP_ARCH_X86_64}, {"SCMP_ARCH_X86", SCMP_ARCH_X86},         {"SCMP_ARCH_X32", SCMP_ARCH_X32},
    {"SCMP_ARCH_AARCH64", SCMP_ARCH_AARCH64}, {"SCMP_ARCH_ARM", SCMP_ARCH_ARM},       {"SCMP_ARCH_PPC64LE", SCMP_ARCH_PPC64LE},
    {"SCMP_ARCH_S390X", SCMP_ARCH_S390X},   {"SCMP_ARCH_RISCV64", SCMP_ARCH_RISCV64},
};

static const struct {
  const char *name;
  enum scmp_compare op;
} OPS[] = {{"SCMP_CMP_NE", SCMP_CMP_NE}, {"SCMP_CMP_LT", SCMP_CMP_LT}, {"SCMP_CMP_LE", SCMP_CMP_LE},
           {"SCMP_CMP_EQ", SCMP_CMP_EQ}, {"SCMP_CMP_GE", SCMP_CMP_GE}, {"SCMP_CMP_GT", SCMP_CMP_GT},
           {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};

/* The action named at the top of the stack (errno_ret for SCMP_ACT_ERRNO); raises on an unknown name. */
static uint32_t check_action(lua_State *L, const char *what, int errno_ret) {
  const char *a = lua_tostring(L, -1);
  if (!a) luaL_error(L, "%s must be a string (SCMP_ACT_...)", what);
  if (strcmp(a, "SCMP_ACT_ALLOW") == 0) return SCMP_ACT_ALLOW;
  if (strcmp(a, "SCMP_ACT_ERRNO") == 0) return SCMP_ACT_ERRNO((uint16_t)errno_ret);
  if (strcmp(a, "SCMP_ACT_KILL") == 0 || strcmp(a, "SCMP_ACT_KILL_THREAD") == 0) return SCMP_ACT_KILL;
  if (strcmp(a, "SCMP_ACT_KILL_PROCESS") == 0) return SCMP_ACT_KILL_PROCESS;
  if (strcmp(a, "SCMP_ACT_TRAP") == 0) return SCMP_ACT_TRAP;
  if (strcmp(a, "SCMP_ACT_LOG") == 0) return SCMP_ACT_LOG;
  luaL_error(L, "%s: unknown action '%s'", what, a);
  return 0;
}

static int field_int(lua_State *L, int idx, const char *f, lua_Integer def) {
  lua_Integer v = def;
  if (lua_getfield(L, idx, f) != LUA_TNIL) {
    if (!lua_isinteger(L, -1)) luaL_error(L, "seccomp: %s must be an integer", f);
    v = lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  return (int)v;
}

typedef struct {
  scmp_filter_ctx ctx;
  int fd;
} guard;

static int guard_gc(lua_State *L) {
  guard *g = lua_touserdata(L, 1);
  if (g->ctx) seccomp_release(g->ctx);
  if (g->fd >= 0) close(g->fd);
  g->ctx = NULL;
  g->fd = -1;
  return 0;
}

/* One rule: its args at the top of the stack (a table or nil). */
static int add_rule(lua_State *L, scmp_filter_ctx ctx, uint32_t action, int nr, int args_idx) {
  struct scmp_arg_cmp cmp[6];
  unsigned n = 0;
  if (lua_istable(L, args_idx)) {
    lua_Integer i, len = (lua_Integer)lua_rawlen(L, args_idx);
    if (len > 6) luaL_error(L, "seccomp: a rule has at most 6 argument checks");
    for (i = 1; i <= len; i++) {
      const char *op;
      size_t k;
      int found = 0;
      lua_rawgeti(L, args_idx, i);
      if (!lua_istable(L, -1)) luaL_error(L, "seccomp: args[%d] must be a table", (int)i);
      cmp[n].arg = (unsigned)field_int(L, -1, "index", -1);
      if (cmp[n].arg > 5) luaL_error(L, "seccomp: args[%d].index must be 0..5", (int)i);
      lua_getfield(L, -1, "value");
      cmp[n].datum_a = (scmp_datum_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
      lua_getfield(L, -1, "value_two");
      cmp[n].datum_b = (scmp_datum_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
      lua_getfield(L, -1, "op");
      op = lua_tostring(L, -1);
      for (k = 0; op && k < sizeof OPS / sizeof OPS[0]; k++)
        if (strcmp(op, OPS[k].name) == 0) cmp[n].op = OPS[k].op, found = 1;
      if (!found) luaL_error(L, "seccomp: args[%d].op: unknown comparison '%s'", (int)i, op ? op : "(none)");
      lua_pop(L, 2);
      n++;
    }
  }
  return seccomp_rule_add_array(ctx, action, nr, n, n ? cmp : NULL);
}

/** seccomp.compile(profile) */
static int sc_compile(lua_State *L) {
  guard *g;
  int def_errno, r, skipped = 0;
  uint32_t def;
  lua_Integer i, n;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  g = lua_newuserdatauv(L, sizeof *g, 0); /* 2: released on every path */
  g->ctx = NULL;
  g->fd = -1;
  lua_newtable(L); /* 3: gc metatable */
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, 2);
  lua_newtable(L); /* 3: skipped names */
  def_errno = field_int(L, 1, "default_errno", EPERM);
  lua_getfield(L, 1, "default_action");
  def = check_action(L, "seccomp: default_action", def_errno);
  lua_pop(L, 1);
  if (!(g->ctx = seccomp_init(def))) return cs_fail(L, "EINVAL", "seccomp: cannot initialise a filter");
  /* a rule whose action equals the default is refused by libseccomp (EACCES): ignore those */
  seccomp_attr_set(g->ctx, SCMP_FLTATR_CTL_NNP, 0);
  if (lua_getfield(L, 1, "arches") == LUA_TTABLE) {
    n = (lua_Integer)lua_rawlen(L, -1);
    for (i = 1; i <= n; i++) {
      const char *a;
      size_t k;
      int found = 0;
      lua_rawgeti(L, -1, i);
      a = lua_tostring(L, -1);
      for (k = 0; a && k < sizeof ARCHES / sizeof ARCHES[0]; k++)
        if (strcmp(a, ARCHES[k].name) == 0) {
          found = 1;
          r = seccomp_arch_add(g->ctx, ARCHES[k].arch);
          if (r != 0 && r != -EEXIST) return cs_fail(L, "EINVAL", "seccomp: cannot add architecture %s", a);
        }
      if (!found) return luaL_error(L, "seccomp: arches[%d]: unknown architecture '%s'", (int)i, a ? a : "(none)");
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  if (lua_getfield(L, 1, "syscalls") != LUA_TTABLE) return luaL_error(L, "seccomp: syscalls must be an array of rules");
  n = (lua_Integer)lua_rawlen(L, -1);
  for (i = 1; i <= n; i++) {
    uint32_t action;
    lua_Integer j, nn;
    int rule = lua_gettop(L) + 1;
    lua_rawgeti(L, -1, i);
    if (!lua_istable(L, rule)) return luaL_error(L, "seccomp: syscalls[%d] must be a table", (int)i);
    lua_getfield(L, rule, "action");
    action = check_action(L, "seccomp: a rule's action", field_int(L, rule, "errno", EPERM));
    lua_pop(L, 1);
    lua_getfield(L, rule, "args"); /* rule + 1 */
    if (lua_getfield(L, rule, "names") != LUA_TTABLE) return luaL_error(L, "seccomp: syscalls[%d].names must be an array", (int)i);
    nn = (lua_Integer)lua_rawlen(L, -1);
    for (j = 1; j <= nn; j++) {
      const char *name;
      int nr;
      lua_rawgeti(L, -1, j);
      name = lua_tostring(L, -1);
      if (!name) return luaL_error(L, "seccomp: syscalls[%d].names[%d] must be a string", (int)i, (int)j);
      nr = seccomp_syscall_resolve_name(name);
      if (nr == __NR_SCMP_ERROR) {
        lua_pushvalue(L, -1);
        lua_rawseti(L, 3, ++skipped);
      } else if (action != def) {
        r = add_rule(L, g->ctx, action, nr, rule + 1);
        if (r != 0 && r != -EEXIST)
          return cs_fail(L, "EINVAL", "seccomp: syscalls[%d]: cannot add a rule for %s (%s)", (int)i, name, strerror(-r));
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 3); /* names, args, the rule */
  }
  lua_pop(L, 1);
  g->fd = memfd_create("cseng-seccomp", MFD_CLOEXEC);
  if (g->fd < 0) return cs_fail_errno(L, errno, "seccomp: memfd_create");
  if ((r = seccomp_export_bpf(g->ctx, g->fd)) != 0) return cs_fail(L, "EIO", "seccomp: exporting the filter (%s)", strerror(-r));
  {
    off_t len = lseek(g->fd, 0, SEEK_END);
    char *buf;
    if (len <= 0 || lseek(g->fd, 0, SEEK_SET) != 0) return cs_fail_errno(L, errno, "seccomp: reading the filter");
    buf = lua_newuserdatauv(L, (size_t)len, 0);
    if (read(g->fd, buf, (size_t)len) != len) return cs_fail_errno(L, errno, "seccomp: reading the filter");
    lua_pushlstring(L, buf, (size_t)len);
  }
  lua_pushvalue(L, 3);
  /* release now, not at the next collection */
  seccomp_release(g->ctx);
  close(g->fd);
  g->ctx = NULL;
  g->fd = -1;
  return 2;
}

int luaopen_cseng_seccomp(lua_State *L) {
  static const luaL_Reg funcs[] = {{"compile", sc_compile}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
