/*
 * lvolume.c: btrfs subvolumes with a size limit, the local sandbox's writable layers. Module
 * cseng.volume. Needs root.
 *   volume.supported(path) -> true | nil, msg, code   path is on a btrfs filesystem
 *   volume.create(path [, limit_bytes]) -> true | nil, msg, code
 *       a new subvolume at path (its parent must exist); with limit_bytes, its quota group
 *       refuses writes past that many bytes (EDQUOT), as docker's --storage-opt size does
 *       on a filesystem with project quotas. The filesystem must have quotas enabled
 *       (`btrfs quota enable`) for the limit to hold.
 *   volume.limit(path, limit_bytes) -> true | nil, msg, code   change (0: no limit)
 *   volume.delete(path) -> true | nil, msg, code   the subvolume and everything in it
 *   volume.snapshot(src, dst [, {readonly=}]) -> true | nil, msg, code
 *       a snapshot of the subvolume src at dst (same filesystem): copy-on-write, so it costs
 *       nothing until one of them is written; a build's steps are kept this way
 * Why btrfs: ext4's and xfs's project quotas need kernel options that the machines this runs
 * on may lack; a loop-mounted btrfs image needs only btrfs itself, and a subvolume with its
 * quota group is made and removed in microseconds by ioctl.
 */
#include "core.h"
#include "aux.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

/* The parent directory and the last component of path, in buffers of PATH_MAX. */
static int split_path(const char *path, char *parent, char *name) {
  const char *slash = strrchr(path, '/');
  size_t plen;
  if (!slash) {
    strcpy(parent, ".");
    slash = path - 1;
  } else {
    plen = (size_t)(slash - path);
    if (plen == 0) plen = 1;
    if (plen >= PATH_MAX) return ENAMETOOLONG;
    memcpy(parent, path, plen);
    parent[plen] = '\0';
  }
  if (strlen(slash + 1) == 0 || strlen(slash + 1) >= BTRFS_PATH_NAME_MAX) return EINVAL;
  if (strcmp(slash + 1, ".") == 0 || strcmp(slash + 1, "..") == 0) return EINVAL;
  strcpy(name, slash + 1);
  return 0;
}

static int set_limit(const char *path, lua_Integer bytes) {
  struct btrfs_ioctl_qgroup_limit_args a;
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW), e = 0;
  if (fd < 0) return errno;
  memset(&a, 0, sizeof a);
  a.qgroupid = 0; /* the subvolume fd names */
  a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  a.lim.max_rfer = bytes > 0 ? (__u64)bytes : (__u64)-1;
  if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) != 0) e = errno;
  close(fd);
  return e;
}

static int vol_supported(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct statfs sf;
  if (statfs(path, &sf) != 0) return cs_fail_errno(L, errno, "%s", path);
  if (sf.f_type != BTRFS_SUPER_MAGIC) return cs_fail(L, "ENOTSUP", "%s is not on a btrfs filesystem", path);
  lua_pushboolean(L, 1);
  return 1;
}

/* A subvolume ioctl that names its subvolume in btrfs_ioctl_vol_args (BTRFS_IOC_SUBVOL_CREATE,
   BTRFS_IOC_SNAP_DESTROY), made on `path`'s parent directory: 0, or the values of a failure pushed
   (nil, message, code) and their count. `verb` names the call ("create"), `doing` the act. */
static int subvol_ioctl(lua_State *L, const char *path, unsigned long req, const char *verb, const char *doing) {
  char parent[PATH_MAX], name[PATH_MAX];
  struct btrfs_ioctl_vol_args a;
  int fd, e;
  if ((e = split_path(path, parent, name)) != 0) return cs_fail_errno(L, e, "volume.%s %s", verb, path);
  if ((fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) return cs_fail_errno(L, errno, "%s", parent);
  memset(&a, 0, sizeof a);
  strcpy(a.name, name);
  e = ioctl(fd, req, &a) != 0 ? errno : 0;
  close(fd);
  if (e) return cs_fail_errno(L, e, "%s the subvolume %s", doing, path);
  return 0;
}

static int vol_create(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer limit = luaL_optinteger(L, 2, 0);
  int n, e;
  luaL_argcheck(L, limit >= 0, 2, "limit_bytes must be >= 0");
  if ((n = subvol_ioctl(L, path, BTRFS_IOC_SUBVOL_CREATE, "create", "creating")) != 0) return n;
  if (limit > 0 && (e = set_limit(path, limit)) != 0) return cs_fail_errno(L, e, "limiting the subvolume %s", path);
  lua_pushboolean(L, 1);
  return 1;
}

static int vol_limit(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer limit = luaL_checkinteger(L, 2);
  int e;
  luaL_argcheck(L, limit >= 0, 2, "limit_bytes must be >= 0");
  if ((e = set_limit(path, limit)) != 0) return cs_fail_errno(L, e, "limiting the subvolume %s", path);
  lua_pushboolean(L, 1);
  return 1;
}

static int vol_delete(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int n = subvol_ioctl(L, path, BTRFS_IOC_SNAP_DESTROY, "delete", "deleting");
  if (n) return n;
  lua_pushboolean(L, 1);
  return 1;
}

static int vol_snapshot(lua_State *L) {
  const char *src = luaL_checkstring(L, 1), *dst = luaL_checkstring(L, 2);
  int ro = cs_opt_bool(L, 3, "readonly", 0);
  char parent[PATH_MAX], name[PATH_MAX];
  struct btrfs_ioctl_vol_args_v2 a;
  int fd, sfd, e;
  if ((e = split_path(dst, parent, name)) != 0) return cs_fail_errno(L, e, "volume.snapshot %s", dst);
  if ((sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0) return cs_fail_errno(L, errno, "%s", src);
  if ((fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    e = errno;
    close(sfd);
    return cs_fail_errno(L, e, "%s", parent);
  }
  memset(&a, 0, sizeof a);
  a.fd = sfd;
  a.flags = ro ? BTRFS_SUBVOL_RDONLY : 0;
  strcpy(a.name, name);
  e = ioctl(fd, BTRFS_IOC_SNAP_CREATE_V2, &a) != 0 ? errno : 0;
  close(fd);
  close(sfd);
  if (e) return cs_fail_errno(L, e, "snapshotting %s at %s", src, dst);
  lua_pushboolean(L, 1);
  return 1;
}

int luaopen_cseng_volume(lua_State *L) {
  static const luaL_Reg funcs[] = {{"supported", vol_supported},
                                   {"create", vol_create},
                                   {"limit", vol_limit},
                                   {"delete", vol_delete},
                                   {"snapshot", vol_snapshot},
                                   {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
