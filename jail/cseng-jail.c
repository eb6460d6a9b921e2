/*
 * cseng-jail: the first process of every exec in a local sandbox (lua/providers/shared/local_jail.lua).
 * Started as root by the engine, it does what must happen before bubblewrap runs and that no
 * unprivileged process may do, then becomes bubblewrap as the sandbox's user namespace owner:
 *
 *   cseng-jail [--cgroup DIR]... [--netns PATH] --userns PATH --seccomp PATH --uid N --gid N -- ARGV...
 *
 *   1. joins each cgroup DIR (writes its own pid to DIR/cgroup.procs), so nothing the command forks
 *      is outside the sandbox's limits;
 *   2. enters the network namespace at PATH (a sandbox with a network of its own);
 *   3. opens the user namespace at --userns as descriptor 3 and the compiled seccomp filter at
 *      --seccomp as descriptor 4 (what `bwrap --userns 3 --seccomp 4` reads);
 *   4. drops every supplementary group and becomes uid/gid N (the namespace's owner, which may
 *      join it with no privilege on the host);
 *   5. executes ARGV (bwrap).
 * One static executable instead of a shell, nsenter and setpriv: three fewer exec()s on the path
 * from create to a sandbox's first command. Any failure exits 125 with a line on stderr, before
 * the command runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CGROUPS 16

static void die(const char *what, const char *arg) {
  fprintf(stderr, "cseng-jail: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
  _exit(125);
}

static void usage(const char *why) {
  fprintf(stderr, "cseng-jail: %s\nusage: cseng-jail [--cgroup DIR]... [--netns PATH] --userns PATH --seccomp PATH "
                  "--uid N --gid N -- ARGV...\n", why);
  _exit(125);
}

static long number(const char *s) {
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || *s == '\0' || *end != '\0' || v < 1) usage("--uid and --gid take a positive number");
  return v;
}

/* Open path as descriptor want (close-on-exec off). */
static void open_as(const char *path, int want) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("opening", path);
  if (fd != want) {
    if (dup2(fd, want) < 0) die("dup2 of", path);
    close(fd);
  }
}

int main(int argc, char **argv) {
  const char *cgroups[MAX_CGROUPS], *netns = NULL, *userns = NULL, *seccomp = NULL;
  long uid = 0, gid = 0;
  int ncg = 0, i;
  char pid[24];
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    }
    if (i + 1 >= argc) usage("an option lacks its value");
    if (strcmp(argv[i], "--cgroup") == 0) {
      if (ncg == MAX_CGROUPS) usage("too many --cgroup");
      cgroups[ncg++] = argv[++i];
    } else if (strcmp(argv[i], "--netns") == 0) netns = argv[++i];
    else if (strcmp(argv[i], "--userns") == 0) userns = argv[++i];
    else if (strcmp(argv[i], "--seccomp") == 0) seccomp = argv[++i];
    else if (strcmp(argv[i], "--uid") == 0) uid = number(argv[++i]);
    else if (strcmp(argv[i], "--gid") == 0) gid = number(argv[++i]);
    else usage("unknown option");
  }
  if (i >= argc) usage("no command after --");
  if (!userns || !seccomp || !uid || !gid) usage("--userns, --seccomp, --uid and --gid are required");
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  for (int c = 0; c < ncg; c++) {
    char path[4096];
    int fd;
    size_t n = strlen(pid);
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[c]);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, n) != (ssize_t)n) die("joining the cgroup", cgroups[c]);
    close(fd);
  }
  if (netns) {
    int fd = open(netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) die("entering the network namespace", netns);
    close(fd);
  }
  open_as(userns, 3);
  open_as(seccomp, 4);
  if (setgroups(0, NULL) != 0) die("dropping the supplementary groups", NULL);
  if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) die("setresgid", NULL);
  if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) die("setresuid", NULL);
  execv(argv[i], argv + i);
  die("executing", argv[i]);
  return 125;
}
