/*
 * cseng-jail: how a local sandbox's processes start (lua/providers/shared/local_jail.lua holds the
 * policy; this file carries it out). Two modes, both started as root by the engine:
 *
 *   cseng-jail init --root DIR --map UID:GID:COUNT [--net-host] [--cgroup DIR]... [--sys DIR:INSIDE]...
 *                   [--ro-bind SRC:DST]... [--bind SRC:DST]... [--tmpfs DST]... [--readonly PATH]...
 *                   [--mask PATH]... [--mask-dir PATH]... [--hostname NAME]
 *
 *     The sandbox's first process, made once at create (as a container runtime makes a container's
 *     init). It joins the sandbox's cgroups, then clones a child in a new user namespace (ids 0..COUNT-1
 *     inside are UID.. and GID.. outside) with its own mount, pid, ipc, uts, cgroup and (unless
 *     --net-host) network namespaces. The child, pid 1 inside, becomes root of that namespace, brings
 *     its loopback up, mounts the sandbox: DIR as "/", a new /proc with --readonly paths read-only and
 *     --mask paths hidden (/dev/null over files, an empty read-only tmpfs over directories), a /dev of
 *     its own (the harmless host nodes bound in, its own devpts and shm), --sys cgroup views read-only
 *     under an otherwise empty read-only /sys, then the binds in order, and pivots into it. It then
 *     drops every capability, makes itself undumpable (no process inside may ptrace it) and only reaps
 *     orphans until it is killed. The parent prints "ready PID" (the child's pid on the host) on its
 *     stdout, closes it, and waits: killing the parent's process group (the engine's destroy) or the
 *     engine dying (parent-death signals) ends the child, and with it every process of the sandbox.
 *
 *   cseng-jail enter --pid PID --userns PATH --seccomp PATH [--cgroup DIR]... [--user UID] [--cwd DIR]
 *                    -- ARGV...
 *
 *     One command in the sandbox whose init is PID (as `docker exec`): joins the cgroups, checks that
 *     PID's user namespace is the one at PATH (the engine's own handle on it: a reused pid is refused),
 *     enters all of PID's namespaces at once (a pidfd), forks (the pid namespace holds for children),
 *     and the child keeps only Docker's default capabilities (root) or none (UID), sets no_new_privs,
 *     loads the compiled seccomp filter and executes ARGV in DIR. The parent waits and exits as the
 *     command did (its signal re-raised). It stays in the engine's process group, so the engine's
 *     timeout and end-of-command kill reach the command and whatever it left in that group.
 *
 * One static executable, libc only: a container's start costs one exec() and one clone(), and each
 * command one exec() and one fork() before its own. Any failure before the command runs exits 125
 * with one line on stderr naming the step.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ITEMS 64
#define FAIL 125

static const char *mode_name = "cseng-jail";

static void die(const char *what, const char *arg) {
  fprintf(stderr, "%s: %s%s%s: %s\n", mode_name, what, arg ? " " : "", arg ? arg : "", strerror(errno));
  _exit(FAIL);
}

static void usage(const char *why) {
  fprintf(stderr,
          "%s: %s\nusage: cseng-jail init --root DIR --map UID:GID:COUNT [--net-host] [--cgroup DIR]... "
          "[--sys DIR:INSIDE]... [--ro-bind SRC:DST]... [--bind SRC:DST]... [--tmpfs DST]... [--readonly PATH]... "
          "[--mask PATH]... [--mask-dir PATH]... [--hostname NAME]\n"
          "       cseng-jail enter --pid PID --userns PATH --seccomp PATH [--cgroup DIR]... [--user UID] [--cwd DIR] "
          "-- ARGV...\n",
          mode_name, why);
  _exit(FAIL);
}

static long number(const char *s, const char *what) {
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || *s == '\0' || *end != '\0' || v < 0) usage(what);
  return v;
}

/* Write the calling process's pid into each cgroup's cgroup.procs (as root, before any namespace). */
static void join_cgroups(const char **cgroups, int n) {
  char pid[24], path[4096];
  size_t len;
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  len = strlen(pid);
  for (int i = 0; i < n; i++) {
    int fd;
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[i]);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, len) != (ssize_t)len) die("joining the cgroup", cgroups[i]);
    close(fd);
  }
}

static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n, len = (ssize_t)strlen(text);
  if (fd < 0) return -1;
  n = write(fd, text, (size_t)len);
  close(fd);
  return n == len ? 0 : -1;
}

/* ---- init ------------------------------------------------------------------------------------ */

typedef struct {
  char kind; /* 'r' ro-bind, 'b' bind, 't' tmpfs */
  const char *src, *dst;
} bind_item;

typedef struct {
  const char *root, *hostname;
  long uid, gid, count;
  int net_host;
  const char *cgroups[MAX_ITEMS];
  int ncg;
  const char *sys_src[MAX_ITEMS], *sys_dst[MAX_ITEMS];
  int nsys;
  bind_item binds[MAX_ITEMS];
  int nbinds;
  const char *readonly[MAX_ITEMS];
  int nro;
  const char *masks[MAX_ITEMS];
  char mask_dir[MAX_ITEMS];
  int nmasks;
  int go[2], ready[2]; /* parent -> child: the maps are written; child -> parent: mounted */
  char *args;           /* the command line's bytes, blanked once mounted (nothing of the host's */
  size_t args_len;      /* paths stays in the sandbox's /proc/1/cmdline) */
} init_opts;

/* SRC:DST split at the first ':' (paths given by the engine never hold one). */
static void split_pair(char *s, const char **a, const char **b) {
  char *c = strchr(s, ':');
  if (!c || c == s || c[1] == '\0') usage("SRC:DST expected");
  *c = '\0';
  *a = s;
  *b = c + 1;
}

/* dir + "/" + rel into out (rel absolute inside the sandbox). */
static const char *inside(char *out, size_t n, const char *dir, const char *rel) {
  if ((size_t)snprintf(out, n, "%s%s", dir, rel) >= n) {
    errno = ENAMETOOLONG;
    die("path", rel);
  }
  return out;
}

/* mkdir -p, as the namespace's root (a missing mount point becomes part of the sandbox's layer, as
 * with bubblewrap). */
static void mkdirs(const char *path, mode_t mode) {
  char buf[4096];
  size_t n = strlen(path);
  if (n >= sizeof buf) {
    errno = ENAMETOOLONG;
    die("mkdir", path);
  }
  memcpy(buf, path, n + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, mode) != 0 && errno != EEXIST) die("mkdir", buf);
    *p = '/';
  }
  if (mkdir(buf, mode) != 0 && errno != EEXIST) die("mkdir", buf);
}

/* A mount point for a bind of src at dst: a directory, or an empty file for a file. */
static void mount_point_for(const char *src, const char *dst) {
  struct stat st;
  if (stat(src, &st) != 0) die("bind source", src);
  if (S_ISDIR(st.st_mode)) {
    mkdirs(dst, 0755);
  } else {
    char parent[4096];
    char *slash;
    snprintf(parent, sizeof parent, "%s", dst);
    slash = strrchr(parent, '/');
    if (slash && slash != parent) {
      *slash = '\0';
      mkdirs(parent, 0755);
    }
    if (access(dst, F_OK) != 0) {
      int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) die("creating the mount point", dst);
      close(fd);
    }
  }
}

/* The flags a remount must keep: a mount made in a user namespace may not drop the locked ones. */
static unsigned long kept_flags(const char *path) {
  struct statvfs sv;
  unsigned long f = 0;
  if (statvfs(path, &sv) != 0) return 0;
  if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

static void bind_at(const char *src, const char *dst, int readonly) {
  if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0) die("bind mount of", src);
  if (readonly && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | kept_flags(dst), NULL) != 0)
    die("read-only remount of", dst);
}

static void mount_dev(const char *root) {
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  static const char *const links[][2] = {{"/proc/self/fd", "fd"},     {"/proc/self/fd/0", "stdin"},
                                         {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
                                         {"/proc/kcore", "core"},      {"pts/ptmx", "ptmx"}};
  char dev[3968], p[4096];
  inside(dev, sizeof dev, root, "/dev");
  mkdirs(dev, 0755);
  if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_STRICTATIME, "mode=0755,size=65536k") != 0) die("mounting", "/dev");
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    char host[64];
    int fd;
    snprintf(host, sizeof host, "/dev/%s", nodes[i]);
    snprintf(p, sizeof p, "%s/%s", dev, nodes[i]);
    fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) die("creating", p);
    close(fd);
    if (mount(host, p, NULL, MS_BIND, NULL) != 0) die("bind mount of", host);
  }
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    snprintf(p, sizeof p, "%s/%s", dev, links[i][1]);
    if (symlink(links[i][0], p) != 0) die("symlink", p);
  }
  snprintf(p, sizeof p, "%s/pts", dev);
  mkdirs(p, 0755);
  if (mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620") != 0)
    die("mounting", "/dev/pts");
  snprintf(p, sizeof p, "%s/shm", dev);
  mkdirs(p, 01777);
  if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k") != 0) die("mounting", "/dev/shm");
}

static void loopback_up(void) {
  struct ifreq ifr;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket", NULL);
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) die("reading the loopback's flags", NULL);
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) die("bringing the loopback up", NULL);
  close(s);
}

static void drop_all_caps(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  for (int c = 0; c <= 63; c++)
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
  memset(d, 0, sizeof d);
  if (syscall(SYS_capset, &h, d) != 0) die("dropping the capabilities", NULL);
}

static volatile sig_atomic_t got_child;
static void on_child(int sig) {
  (void)sig;
  got_child = 1;
}

/* pid 1 of the sandbox. */
static int init_child(void *arg) {
  init_opts *o = arg;
  char c, p[4096];
  sigset_t none;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  close(o->go[1]);
  close(o->ready[0]);
  if (read(o->go[0], &c, 1) != 1) _exit(FAIL); /* the parent failed to write the maps: it says why */
  close(o->go[0]);
  if (setgroups(0, NULL) != 0) die("setgroups", NULL);
  if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) die("becoming the namespace's root", NULL);
  if (!o->net_host) loopback_up();
  if (sethostname(o->hostname, strlen(o->hostname)) != 0) die("sethostname", o->hostname);
  /* nothing mounted here reaches the host, nothing the host mounts later reaches here */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("making the mounts private", NULL);
  bind_at(o->root, o->root, 0);
  inside(p, sizeof p, o->root, "/proc");
  mkdirs(p, 0555);
  if (mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) die("mounting", "/proc");
  mount_dev(o->root);
  for (int i = 0; i < o->nbinds; i++) {
    bind_item *b = &o->binds[i];
    inside(p, sizeof p, o->root, b->dst);
    if (b->kind == 't') {
      mkdirs(p, 0755);
      if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) die("mounting a tmpfs on", b->dst);
    } else {
      mount_point_for(b->src, p);
      bind_at(b->src, p, b->kind == 'r');
    }
  }
  for (int i = 0; i < o->nro; i++) {
    inside(p, sizeof p, o->root, o->readonly[i]);
    if (access(p, F_OK) == 0) bind_at(p, p, 1);
  }
  for (int i = 0; i < o->nmasks; i++) {
    inside(p, sizeof p, o->root, o->masks[i]);
    if (access(p, F_OK) != 0) continue;
    if (o->mask_dir[i]) {
      if (mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555") != 0)
        die("masking", o->masks[i]);
    } else {
      bind_at("/dev/null", p, 1);
    }
  }
  if (o->nsys > 0) {
    inside(p, sizeof p, o->root, "/sys");
    mkdirs(p, 0555);
    if (mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0) die("mounting", "/sys");
    for (int i = 0; i < o->nsys; i++) {
      char q[4096];
      inside(q, sizeof q, o->root, o->sys_dst[i]);
      mkdirs(q, 0755);
      bind_at(o->sys_src[i], q, 1);
    }
    if (mount(NULL, p, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
      die("read-only remount of", "/sys");
  }
  if (chdir(o->root) != 0) die("chdir", o->root);
  if (syscall(SYS_pivot_root, ".", ".") != 0) die("pivot_root", o->root);
  if (umount2(".", MNT_DETACH) != 0) die("detaching the host's root", NULL);
  if (chdir("/") != 0) die("chdir", "/");
  prctl(PR_SET_NAME, "init");
  if (prctl(PR_SET_DUMPABLE, 0) != 0) die("PR_SET_DUMPABLE", NULL);
  drop_all_caps();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs", NULL);
  memset(o->args, 0, o->args_len);
  memcpy(o->args, "init", 5);
  if (write(o->ready[1], "r", 1) != 1) _exit(FAIL);
  close(o->ready[1]);
  for (int fd = 0; fd < 3; fd++) {
    int n = open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) {
      dup2(n, fd);
      close(n);
    }
  }
  /* reap what is orphaned inside; signals from inside reach pid 1 only through a handler, and
   * SIGCHLD is the only one it has */
  signal(SIGCHLD, on_child);
  sigemptyset(&none);
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    got_child = 0;
    sigsuspend(&none);
  }
  return 0;
}

static int run_init(int argc, char **argv) {
  static init_opts o;
  static char stack[256 * 1024] __attribute__((aligned(16)));
  char path[64], map[96], c;
  pid_t child;
  int flags, st;
  const char *map_arg = NULL;
  mode_name = "cseng-jail init";
  o.hostname = "sandbox";
  o.args = argv[0];
  o.args_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--net-host") == 0) {
      o.net_host = 1;
      continue;
    }
    if (i + 1 >= argc) usage("an option lacks its value");
    char *v = argv[++i];
    if (strcmp(a, "--root") == 0) o.root = v;
    else if (strcmp(a, "--map") == 0) map_arg = v;
    else if (strcmp(a, "--hostname") == 0) o.hostname = v;
    else if (strcmp(a, "--cgroup") == 0 && o.ncg < MAX_ITEMS) o.cgroups[o.ncg++] = v;
    else if (strcmp(a, "--sys") == 0 && o.nsys < MAX_ITEMS) {
      split_pair(v, &o.sys_src[o.nsys], &o.sys_dst[o.nsys]);
      o.nsys++;
    } else if ((strcmp(a, "--ro-bind") == 0 || strcmp(a, "--bind") == 0) && o.nbinds < MAX_ITEMS) {
      bind_item *b = &o.binds[o.nbinds++];
      b->kind = a[2] == 'r' ? 'r' : 'b';
      split_pair(v, &b->src, &b->dst);
    } else if (strcmp(a, "--tmpfs") == 0 && o.nbinds < MAX_ITEMS) {
      bind_item *b = &o.binds[o.nbinds++];
      b->kind = 't';
      b->dst = v;
    } else if (strcmp(a, "--readonly") == 0 && o.nro < MAX_ITEMS) o.readonly[o.nro++] = v;
    else if ((strcmp(a, "--mask") == 0 || strcmp(a, "--mask-dir") == 0) && o.nmasks < MAX_ITEMS) {
      o.mask_dir[o.nmasks] = a[6] == '-';
      o.masks[o.nmasks++] = v;
    } else usage("unknown option, or too many of one");
  }
  if (!o.root || !map_arg) usage("--root and --map are required");
  if (sscanf(map_arg, "%ld:%ld:%ld%c", &o.uid, &o.gid, &o.count, &c) != 3 || o.uid < 1 || o.gid < 1 || o.count < 1)
    usage("--map takes UID:GID:COUNT");
  join_cgroups(o.cgroups, o.ncg);
  /* what holds the sandbox is not the sandbox's own out-of-memory victim (where the engine may
   * say so: it needs CAP_SYS_RESOURCE; else the killer's choice by size spares a process this
   * small while the sandbox's own processes are alive) */
  (void)write_text("/proc/self/oom_score_adj", "-1000");
  if (pipe2(o.go, O_CLOEXEC) != 0 || pipe2(o.ready, O_CLOEXEC) != 0) die("pipe", NULL);
  flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD;
  if (!o.net_host) flags |= CLONE_NEWNET;
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* the engine's end is the sandbox's end */
  child = clone(init_child, stack + sizeof stack, flags, &o);
  if (child < 0) die("clone", NULL);
  close(o.go[0]);
  close(o.ready[1]);
  snprintf(map, sizeof map, "0 %ld %ld\n", o.uid, o.count);
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
  if (write_text(path, map) != 0) die("writing", path);
  snprintf(map, sizeof map, "0 %ld %ld\n", o.gid, o.count);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
  if (write_text(path, map) != 0) die("writing", path);
  if (write(o.go[1], "g", 1) != 1) die("starting the sandbox's init", NULL);
  close(o.go[1]);
  if (read(o.ready[0], &c, 1) != 1) {
    /* the child said why on stderr; its status ends this process */
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(FAIL);
  }
  close(o.ready[0]);
  printf("ready %d\n", (int)child);
  fflush(stdout);
  {
    int n = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (n >= 0) dup2(n, 1);
  }
  for (;;) {
    pid_t r = waitpid(child, &st, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) _exit(FAIL);
  }
  if (WIFSIGNALED(st)) _exit(128 + WTERMSIG(st));
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : FAIL);
}

/* ---- enter ----------------------------------------------------------------------------------- */

/* moby's default capabilities for a container's root */
static const int DOCKER_CAPS[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FSETID,           CAP_FOWNER,     CAP_MKNOD,
                                  CAP_NET_RAW, CAP_SETGID,      CAP_SETUID,           CAP_SETFCAP,    CAP_SETPCAP,
                                  CAP_NET_BIND_SERVICE,         CAP_SYS_CHROOT,       CAP_KILL,       CAP_AUDIT_WRITE};

static int docker_cap(int c) {
  for (size_t i = 0; i < sizeof DOCKER_CAPS / sizeof *DOCKER_CAPS; i++)
    if (DOCKER_CAPS[i] == c) return 1;
  return 0;
}

static char *read_all(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  char *buf;
  size_t got = 0;
  if (fd < 0 || fstat(fd, &st) != 0) die("opening", path);
  if (st.st_size <= 0 || st.st_size > (1 << 20) || st.st_size % sizeof(struct sock_filter)) {
    errno = EINVAL;
    die("not a compiled seccomp filter:", path);
  }
  buf = malloc((size_t)st.st_size);
  if (!buf) die("malloc", NULL);
  while (got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n <= 0) die("reading", path);
    got += (size_t)n;
  }
  close(fd);
  *len = got;
  return buf;
}

static int same_ns(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static volatile pid_t forward_to;

/* the launcher's signal, passed to the command's process group (and the command itself,
   in case it has not made its group yet) */
static void forward_signal(int sig) {
  pid_t c = forward_to;
  if (c <= 0) _exit(128 + sig);
  kill(-c, sig);
  kill(c, sig);
}

static int run_enter(int argc, char **argv) {
  const char *cgroups[MAX_ITEMS], *userns = NULL, *seccomp = NULL, *cwd = "/";
  long pid = 0, uid = 0;
  int ncg = 0, i, pidfd, ufd, tfd, flags, st;
  char path[64], *filter;
  size_t flen;
  struct sock_fprog prog;
  pid_t child;
  mode_name = "cseng-jail enter";
  for (i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (i + 1 >= argc) usage("an option lacks its value");
    if (strcmp(argv[i], "--cgroup") == 0) {
      if (ncg == MAX_ITEMS) usage("too many --cgroup");
      cgroups[ncg++] = argv[++i];
    } else if (strcmp(argv[i], "--pid") == 0) pid = number(argv[++i], "--pid takes a pid");
    else if (strcmp(argv[i], "--userns") == 0) userns = argv[++i];
    else if (strcmp(argv[i], "--seccomp") == 0) seccomp = argv[++i];
    else if (strcmp(argv[i], "--user") == 0) uid = number(argv[++i], "--user takes a uid");
    else if (strcmp(argv[i], "--cwd") == 0) cwd = argv[++i];
    else usage("unknown option");
  }
  if (i >= argc) usage("no command after --");
  if (pid < 2 || !userns || !seccomp) usage("--pid, --userns and --seccomp are required");
  filter = read_all(seccomp, &flen);
  join_cgroups(cgroups, ncg);
  pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (pidfd < 0) die("the sandbox's init is gone: pidfd_open", NULL);
  ufd = open(userns, O_RDONLY | O_CLOEXEC);
  if (ufd < 0) die("opening", userns);
  snprintf(path, sizeof path, "/proc/%ld/ns/user", pid);
  tfd = open(path, O_RDONLY | O_CLOEXEC);
  if (tfd < 0 || !same_ns(ufd, tfd)) {
    errno = ESRCH;
    die("the sandbox's init is gone (its pid names another process)", path);
  }
  close(tfd);
  close(ufd);
  flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  {
    /* a sandbox on the host's network (test harnesses) shares ours: nothing to enter */
    int mine = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
    tfd = open(path, O_RDONLY | O_CLOEXEC);
    if (mine < 0 || tfd < 0) die("opening", path);
    if (!same_ns(mine, tfd)) flags |= CLONE_NEWNET;
    close(mine);
    close(tfd);
  }
  if (setns(pidfd, flags) != 0) die("entering the sandbox's namespaces", NULL);
  close(pidfd);
  /* Signals that end the launcher end the command's process group, not what the command
     left running in the background: a daemon outlives its exec, as with docker exec. */
  {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
  }
  child = fork();
  if (child < 0) die("fork", NULL);
  if (child == 0) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    sigset_t none;
    /* its own session inside the sandbox: the engine's kill of the launcher's group (at the
       command's end) never reaches what the command started in the background */
    if (setsid() < 0) die("setsid", NULL);
    if (isatty(0)) (void)ioctl(0, TIOCSCTTY, 0); /* a terminal's ^C reaches the command */
    for (int c = 0; c <= 63; c++) {
      if (docker_cap(c)) continue;
      if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
        if (errno == EINVAL) break;
        die("dropping a capability from the bounding set", NULL);
      }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) die("clearing ambient capabilities", NULL);
    if (setgroups(0, NULL) != 0) die("setgroups", NULL);
    if (setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) != 0) die("setresgid", NULL);
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) die("setresuid", NULL);
    if (uid == 0) {
      /* root keeps the bounding set (Docker's) as its permitted and effective set, none inheritable */
      memset(d, 0, sizeof d);
      for (size_t k = 0; k < sizeof DOCKER_CAPS / sizeof *DOCKER_CAPS; k++) {
        int c = DOCKER_CAPS[k];
        d[c / 32].permitted |= 1u << (c % 32);
        d[c / 32].effective |= 1u << (c % 32);
      }
      if (syscall(SYS_capset, &h, d) != 0) die("capset", NULL);
    } else {
      memset(d, 0, sizeof d); /* nothing permitted, effective or inheritable */
      if (syscall(SYS_capset, &h, d) != 0) die("capset", NULL);
    }
    if (chdir(cwd) != 0) die("chdir", cwd);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs", NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* after the credentials change, which clears it */
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prog.len = (unsigned short)(flen / sizeof(struct sock_filter));
    prog.filter = (struct sock_filter *)filter;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) die("loading the seccomp filter", seccomp);
    execvp(argv[i], argv + i);
    fprintf(stderr, "%s: executing %s: %s\n", mode_name, argv[i], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  free(filter);
  forward_to = child;
  for (;;) {
    pid_t r = waitpid(child, &st, 0);
    if (r == child) break;
    if (r < 0 && errno != EINTR) _exit(FAIL);
  }
  if (WIFSIGNALED(st)) {
    signal(WTERMSIG(st), SIG_DFL);
    prctl(PR_SET_DUMPABLE, 0); /* no core of the launcher for the command's crash */
    kill(getpid(), WTERMSIG(st));
    _exit(128 + WTERMSIG(st));
  }
  _exit(WIFEXITED(st) ? WEXITSTATUS(st) : FAIL);
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "init") == 0) return run_init(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "enter") == 0) return run_enter(argc, argv);
  usage("the first argument is init or enter");
  return FAIL;
}
