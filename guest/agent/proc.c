/*
 * Processes. Each one runs in a session of its own (setsid), so its process group is its tree
 * for signals and a PTY's Ctrl-C reaches its foreground group, and so stopping it can never
 * touch the agent's own group.
 *
 * Output goes into one ring per channel (stdout and stderr, or the PTY), read as it comes,
 * whatever the readers do: a process never blocks on a slow or absent host. The exception is
 * SPAWN_HOLD, which a buffered exec asks for: while its SPAWN stream is open, the agent reads
 * the pipe only as far as that stream has been sent, so no byte is lost before it reaches the
 * host and the process waits on a full pipe instead. When that stream goes (CANCEL, a new
 * session, a lost host) the process falls back to the ring and runs on.
 *
 * A process stays in the table after it exits, with its output, until the host forgets it, its
 * SPAWN stream delivered its exit with SPAWN_FORGET_ON_EXIT, or the table is full and it is the
 * oldest exited process that no stream is reading.
 */
#include "agent.h"
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

enum { PS_FREE = 0, PS_RUNNING = 1, PS_EXITED = 2, PS_SIGNALED = 3 };
enum { SPAWN_PTY = 1, SPAWN_STDIN = 2, SPAWN_HOLD = 4, SPAWN_FORGET_ON_EXIT = 8 };
enum { ATTACH_FOLLOW = 1, ATTACH_INPUT = 2, ATTACH_FROM_OLDEST = 4, ATTACH_FROM_END = 8 };
enum { SIGNAL_TREE = 1 };
#define ATTACH_BYTES 32
#define PROC_INFO_BYTES 68
#define OUTPUT_PREFIX_BYTES 12
#define DEFAULT_ROWS 24
#define DEFAULT_COLS 80
#define TREE_WALK_ROUNDS 8 /* walks of a frozen tree until it stops growing (forks in flight) */

struct proc {
  int state;
  uint32_t id;
  pid_t pid;
  int code; /* exit status, or the signal that ended it */
  int pty;
  uint64_t start_ns, end_ns;
  int out_fd[2]; /* stdout (or the PTY master) and stderr; -1 once at end of file */
  int in_fd;     /* stdin pipe, or the PTY master again; -1 once closed */
  struct ring ring[2];
  size_t ring_reserved;
  uint8_t *inbuf; /* stdin bytes not yet written, at most STDIN_BUFFER */
  size_t in_len;
  int in_eof; /* close stdin once inbuf is written */
  struct stream *hold;  /* SPAWN_HOLD: output waits for this stream */
  struct stream *input; /* the stream whose DATA is stdin */
  int forget_on_exit;
  char cmd[CMD_SUMMARY + 1];
};

static struct proc procs[MAX_PROCS];
static uint32_t next_id = 1;
static size_t rings_reserved;
static uint8_t readbuf[READ_CHUNK];

uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void proc_init(void) {
  for (int i = 0; i < MAX_PROCS; i++) procs[i].state = PS_FREE;
}

static struct proc *proc_by_id(uint32_t id) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].state != PS_FREE && procs[i].id == id) return &procs[i];
  return NULL;
}

static int proc_has_streams(const struct proc *p) {
  int cursor = 0;
  struct stream *s;
  while ((s = stream_each(&cursor)) != NULL)
    if (s->kind == SK_PROC && s->u.proc.p == p) return 1;
  return 0;
}

static void close_input(struct proc *p) {
  if (p->in_fd >= 0 && !p->pty) close(p->in_fd);
  p->in_fd = -1;
  free(p->inbuf);
  p->inbuf = NULL;
  p->in_len = 0;
}

static void close_output(struct proc *p, int c) {
  if (p->out_fd[c] < 0) return;
  close(p->out_fd[c]);
  p->out_fd[c] = -1;
  if (p->pty) p->in_fd = -1; /* the same descriptor */
}

static void proc_free(struct proc *p) {
  close_input(p);
  close_output(p, 0);
  close_output(p, 1);
  ring_free(&p->ring[0]);
  ring_free(&p->ring[1]);
  rings_reserved -= p->ring_reserved;
  memset(p, 0, sizeof *p);
  p->state = PS_FREE;
}

/* A free slot, or the oldest exited process that no stream is reading. */
static struct proc *proc_alloc(void) {
  struct proc *oldest = NULL;
  for (int i = 0; i < MAX_PROCS; i++) {
    struct proc *p = &procs[i];
    if (p->state == PS_FREE) return p;
    if (p->state != PS_RUNNING && !proc_has_streams(p) && (oldest == NULL || p->end_ns < oldest->end_ns)) oldest = p;
  }
  if (oldest != NULL) proc_free(oldest);
  return oldest;
}

static void send_proc_info(uint8_t type, uint32_t stream, const struct proc *p) {
  size_t cmd_len = strlen(p->cmd);
  uint8_t *b = frame_begin(type, 0, stream, PROC_INFO_BYTES + cmd_len);
  put_u32(b, p->id);
  put_u32(b + 4, (uint32_t)p->pid);
  b[8] = (uint8_t)p->state;
  b[9] = (uint8_t)((p->pty ? 1 : 0) | (p->in_fd >= 0 ? 2 : 0));
  put_u16(b + 10, 0);
  put_u32(b + 12, (uint32_t)p->code);
  put_u32(b + 16, 0);
  put_u64(b + 20, p->start_ns);
  put_u64(b + 28, p->end_ns);
  put_u64(b + 36, p->ring[0].start);
  put_u64(b + 44, p->ring[0].end);
  put_u64(b + 52, p->ring[1].start);
  put_u64(b + 60, p->ring[1].end);
  memcpy(b + PROC_INFO_BYTES, p->cmd, cmd_len);
  frame_commit(PROC_INFO_BYTES + cmd_len);
}

/* `count` NUL-terminated strings packed back to back from `at`; returns what follows, or NULL. */
static const uint8_t *split_strings(const uint8_t *at, const uint8_t *end, const char **out, size_t count) {
  for (size_t i = 0; i < count && at != NULL; i++) {
    const uint8_t *nul = memchr(at, 0, (size_t)(end - at));
    out[i] = (const char *)at;
    at = nul == NULL ? NULL : nul + 1;
  }
  return at;
}

static int open_pty(int *master, int *slave, uint16_t rows, uint16_t cols) {
  int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (m < 0) return -1;
  int unlock = 0;
  int s = -1;
  if (ioctl(m, TIOCSPTLCK, &unlock) == 0) {
#ifdef TIOCGPTPEER
    s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
#endif
    if (s < 0) {
      unsigned n;
      char path[32];
      if (ioctl(m, TIOCGPTN, &n) == 0) {
        snprintf(path, sizeof path, "/dev/pts/%u", n);
        s = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
      }
    }
  }
  if (s < 0) {
    int e = errno;
    close(m);
    errno = e;
    return -1;
  }
  struct winsize ws = {.ws_row = rows ? rows : DEFAULT_ROWS, .ws_col = cols ? cols : DEFAULT_COLS};
  ioctl(m, TIOCSWINSZ, &ws);
  *master = m;
  *slave = s;
  return 0;
}

/* In the child: reports which step failed and how, then exits. */
static void child_fail(int report, uint32_t stage) {
  uint8_t msg[8];
  put_u32(msg, stage);
  put_u32(msg + 4, (uint32_t)errno);
  ssize_t ignored = write(report, msg, sizeof msg);
  (void)ignored;
  _exit(127);
}

static void close_pair(int fds[2]) {
  for (int i = 0; i < 2; i++)
    if (fds[i] >= 0) close(fds[i]);
}

void proc_spawn(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "SPAWN", n, SPAWN_FIXED_BYTES, MAX_PAYLOAD)) return;
  uint32_t flags = get_u32(p), ring_bytes = get_u32(p + 4), window = get_u32(p + 8);
  uint16_t rows = get_u16(p + 12), cols = get_u16(p + 14), argc = get_u16(p + 16), envc = get_u16(p + 18);
  if (argc == 0) {
    send_error(sid, E_BAD_REQUEST, 0, "SPAWN needs at least argv[0]");
    return;
  }
  const char **strs = calloc((size_t)1 + argc + 1 + envc + 1, sizeof *strs);
  if (strs == NULL) {
    send_error(sid, E_ERRNO, ENOMEM, "SPAWN");
    return;
  }
  /* strs: cwd, argv..., NULL, env..., NULL */
  const char **argv = strs + 1, **envp = strs + 1 + argc + 1;
  const uint8_t *rest = split_strings(p + SPAWN_FIXED_BYTES, p + n, strs, 1 + (size_t)argc);
  if (rest != NULL) rest = split_strings(rest, p + n, envp, envc);
  /* SPAWN_AS_USER: the ids the child takes before it enters cwd, as runc's user does. */
  int as_user = (flags & SPAWN_AS_USER) != 0;
  uint32_t uid = 0, gid = 0;
  uint16_t ngroups = 0;
  gid_t groups[SPAWN_MAX_GROUPS];
  if (rest != NULL && as_user) {
    if ((size_t)(p + n - rest) < 10 || (ngroups = get_u16(rest + 8)) > SPAWN_MAX_GROUPS || (size_t)(p + n - rest) != 10 + 4 * (size_t)ngroups) {
      free(strs);
      send_error(sid, E_BAD_REQUEST, 0, "SPAWN's user does not match its group count (at most %d groups)", SPAWN_MAX_GROUPS);
      return;
    }
    uid = get_u32(rest);
    gid = get_u32(rest + 4);
    for (uint16_t i = 0; i < ngroups; i++) groups[i] = (gid_t)get_u32(rest + 10 + 4 * (size_t)i);
    rest = p + n;
  }
  if (rest != p + n) {
    free(strs);
    send_error(sid, E_BAD_REQUEST, 0, "SPAWN strings do not match argc/envc");
    return;
  }
  argv[argc] = NULL;
  envp[envc] = NULL;
  const char *cwd = strs[0];

  struct stream *s = stream_open(sid, SK_PROC, window);
  if (s == NULL) {
    free(strs);
    return;
  }
  struct proc *pr = proc_alloc();
  if (pr == NULL) {
    free(strs);
    stream_close(s);
    send_error(sid, E_LIMIT, 0, "%d processes are running or being read", MAX_PROCS);
    return;
  }
  int pty = (flags & SPAWN_PTY) != 0;
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, report[2] = {-1, -1};
  int master = -1, slave = -1;
  int ok = pipe2(report, O_CLOEXEC) == 0;
  if (ok && pty) ok = open_pty(&master, &slave, rows, cols) == 0;
  if (ok && !pty) {
    ok = pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0;
    if (ok && (flags & SPAWN_STDIN)) ok = pipe2(in_pipe, O_CLOEXEC) == 0;
  }
  pid_t pid = ok ? fork() : -1;
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    setsid();
    if (pty) {
      if (ioctl(slave, TIOCSCTTY, 0) != 0) child_fail(report[1], E_EXEC);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
    } else {
      int in = in_pipe[0] >= 0 ? in_pipe[0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
      dup2(in, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
    }
    if (as_user && (setgroups(ngroups, groups) != 0 || setgid((gid_t)gid) != 0 || setuid((uid_t)uid) != 0)) child_fail(report[1], E_USER);
    if (cwd[0] != '\0' && chdir(cwd) != 0) child_fail(report[1], E_CWD);
    environ = (char **)envp;
    execvp(argv[0], (char *const *)argv);
    child_fail(report[1], E_EXEC);
  }
  int saved = errno;
  if (slave >= 0) close(slave);
  if (in_pipe[0] >= 0) close(in_pipe[0]);
  if (out_pipe[1] >= 0) close(out_pipe[1]);
  if (err_pipe[1] >= 0) close(err_pipe[1]);
  in_pipe[0] = out_pipe[1] = err_pipe[1] = -1;
  uint8_t failure[8];
  ssize_t got = 0;
  if (report[1] >= 0) close(report[1]);
  report[1] = -1;
  if (pid > 0) {
    /* Blocks until the child has exec'd (the pipe closes) or failed (it writes): the spawn
       equivalent of posix_spawn's own wait. */
    do got = read(report[0], failure, sizeof failure);
    while (got < 0 && errno == EINTR);
  }
  close_pair(report);
  if (pid <= 0 || got == (ssize_t)sizeof failure) {
    if (pid > 0) waitpid(pid, NULL, 0);
    close_pair(in_pipe);
    close_pair(out_pipe);
    close_pair(err_pipe);
    if (master >= 0) close(master);
    stream_close(s);
    if (pid <= 0) send_error(sid, E_ERRNO, saved, "cannot start the process (pipe, pty or fork)");
    else {
      uint32_t stage = get_u32(failure);
      int e = (int)get_u32(failure + 4);
      if (stage == E_USER) send_error(sid, E_USER, e, "cannot become user %u (group %u): %s", uid, gid, strerror(e));
      else send_error(sid, (int)stage, e, stage == E_CWD ? "cannot enter '%s': %s" : "cannot execute '%s': %s", stage == E_CWD ? cwd : argv[0], strerror(e));
    }
    free(strs);
    return;
  }

  memset(pr, 0, sizeof *pr);
  pr->state = PS_RUNNING;
  pr->id = next_id++;
  if (next_id == 0) next_id = 1;
  pr->pid = pid;
  pr->pty = pty;
  pr->start_ns = now_ns();
  if (pty) {
    pr->out_fd[0] = master;
    pr->out_fd[1] = -1;
    pr->in_fd = master;
  } else {
    pr->out_fd[0] = out_pipe[0];
    pr->out_fd[1] = err_pipe[0];
    pr->in_fd = in_pipe[1];
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    if (in_pipe[1] >= 0) fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  }
  size_t cap = ring_bytes == 0 ? RING_DEFAULT : ring_bytes;
  if (cap < RING_MIN) cap = RING_MIN;
  if (cap > RING_MAX) cap = RING_MAX;
  size_t channels = pty ? 1 : 2;
  size_t left = rings_reserved < RINGS_TOTAL_MAX ? RINGS_TOTAL_MAX - rings_reserved : 0;
  if (cap * channels > left) cap = left / channels < RING_MIN ? RING_MIN : left / channels;
  pr->ring[0].cap = cap;
  pr->ring[1].cap = pty ? 0 : cap;
  pr->ring_reserved = cap * channels;
  rings_reserved += pr->ring_reserved;
  size_t used = 0;
  for (int i = 0; i < argc && used < CMD_SUMMARY; i++) {
    int w = snprintf(pr->cmd + used, CMD_SUMMARY + 1 - used, i ? " %s" : "%s", argv[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used > CMD_SUMMARY) pr->cmd[CMD_SUMMARY] = '\0';
  free(strs);

  s->u.proc.p = pr;
  s->u.proc.until[0] = s->u.proc.until[1] = UINT64_MAX;
  s->u.proc.spawned = 1;
  if (flags & SPAWN_HOLD) pr->hold = s;
  pr->forget_on_exit = (flags & SPAWN_FORGET_ON_EXIT) != 0;
  send_proc_info(R_PROC, sid, pr);
  if (pr->in_fd >= 0) {
    pr->input = s;
    send_window(sid, STDIN_BUFFER);
  }
}

void proc_attach(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "ATTACH", n, ATTACH_BYTES, ATTACH_BYTES)) return;
  uint32_t id = get_u32(p), flags = get_u32(p + 4), window = get_u32(p + 8);
  uint64_t want[2] = {get_u64(p + 16), get_u64(p + 24)};
  struct proc *pr = proc_by_id(id);
  if (pr == NULL) {
    send_error(sid, E_NO_PROCESS, 0, "no process %u", id);
    return;
  }
  struct stream *s = stream_open(sid, SK_PROC, window);
  if (s == NULL) return;
  send_proc_info(R_PROC, sid, pr);
  for (int c = 0; c < 2; c++) {
    const struct ring *r = &pr->ring[c];
    uint64_t at = flags & ATTACH_FROM_OLDEST ? r->start : flags & ATTACH_FROM_END ? r->end : want[c];
    if (at < r->start || at > r->end) {
      stream_close(s);
      send_error(sid, E_OUT_OF_RANGE, 0, "%s offset %llu is outside the retained [%llu, %llu)", c ? "stderr" : "stdout", (unsigned long long)at,
                 (unsigned long long)r->start, (unsigned long long)r->end);
      return;
    }
    s->u.proc.pos[c] = at;
    s->u.proc.until[c] = flags & ATTACH_FOLLOW ? UINT64_MAX : r->end;
  }
  s->u.proc.p = pr;
  if ((flags & ATTACH_INPUT) && pr->in_fd >= 0) {
    pr->input = s;
    send_window(sid, (uint32_t)(STDIN_BUFFER - pr->in_len));
  }
}

/* Every process whose parent chain leads to root, from /proc. */
static size_t descendants(pid_t root, pid_t **out) {
  size_t n = 0, cap = 0, found = 0;
  pid_t *pids = NULL, *parents = NULL;
  DIR *d = opendir("/proc");
  if (d == NULL) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    char *paren = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    long ppid;
    if (paren == NULL || sscanf(paren + 1, " %*c %ld", &ppid) != 1) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      pid_t *a = realloc(pids, cap * sizeof *a), *b = a ? realloc(parents, cap * sizeof *b) : NULL;
      if (a) pids = a;
      if (b == NULL) break;
      parents = b;
    }
    pids[n] = (pid_t)pid;
    parents[n] = (pid_t)ppid;
    n++;
  }
  closedir(d);
  /* Breadth-first: the found prefix of pids[] holds the tree, moved there by swaps. */
  pid_t *tree = malloc((n + 1) * sizeof *tree);
  if (tree != NULL) {
    size_t head = 0;
    tree[found++] = root;
    while (head < found) {
      pid_t parent = tree[head++];
      for (size_t i = 0; i < n; i++)
        if (parents[i] == parent && pids[i] != root) {
          tree[found++] = pids[i];
          parents[i] = -1; /* visited */
        }
    }
  }
  free(pids);
  free(parents);
  *out = tree;
  return tree ? found - 1 : 0;
}

/*
 * Signals the process's group and every descendant, including those that left the group
 * (setsid). The tree is walked while its root still lives: once a process dies its children
 * belong to init and can no longer be told apart. For SIGKILL the tree is frozen first (SIGSTOP:
 * a stopped process neither forks nor exits), walked again until it stops growing, then killed.
 */
static void kill_tree(struct proc *pr, int sig) {
  if (pr->state != PS_RUNNING) { /* reaped: its pid may name someone else now; its group is all we know */
    kill(-pr->pid, sig);
    return;
  }
  int freeze = sig == SIGKILL;
  if (freeze) kill(-pr->pid, SIGSTOP);
  pid_t *tree = NULL;
  size_t count = 0, before;
  for (int round = 0; round < TREE_WALK_ROUNDS; round++) {
    before = count;
    free(tree);
    count = descendants(pr->pid, &tree);
    if (!freeze || tree == NULL) break;
    for (size_t i = 1; i <= count; i++) kill(tree[i], SIGSTOP);
    if (round > 0 && count == before) break;
  }
  kill(-pr->pid, sig);
  if (tree != NULL)
    for (size_t i = 0; i <= count; i++) kill(tree[i], sig);
  free(tree);
}

void proc_signal(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "SIGNAL", n, 12, 12)) return;
  uint32_t id = get_u32(p), sig = get_u32(p + 4), flags = get_u32(p + 8);
  struct proc *pr = proc_by_id(id);
  if (pr == NULL) {
    send_error(sid, E_NO_PROCESS, 0, "no process %u", id);
    return;
  }
  if (sig == 0 || sig > 64) {
    send_error(sid, E_BAD_REQUEST, 0, "no signal %u", sig);
    return;
  }
  if (flags & SIGNAL_TREE) kill_tree(pr, (int)sig);
  else if (pr->state != PS_RUNNING) {
    send_error(sid, E_ERRNO, ESRCH, "process %u has exited", id);
    return;
  } else if (kill(pr->pid, (int)sig) != 0) {
    send_error(sid, E_ERRNO, errno, "kill");
    return;
  }
  send_end(sid, NULL, 0);
}

void proc_resize(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "RESIZE", n, 8, 8)) return;
  struct proc *pr = proc_by_id(get_u32(p));
  if (pr == NULL || !pr->pty || pr->out_fd[0] < 0) {
    send_error(sid, E_NO_PROCESS, 0, "no process with an open terminal");
    return;
  }
  struct winsize ws = {.ws_row = get_u16(p + 4), .ws_col = get_u16(p + 6)};
  if (ioctl(pr->out_fd[0], TIOCSWINSZ, &ws) != 0) send_error(sid, E_ERRNO, errno, "TIOCSWINSZ");
  else send_end(sid, NULL, 0);
}

void proc_list(uint32_t sid) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].state != PS_FREE) send_proc_info(R_PROC, sid, &procs[i]);
  send_end(sid, NULL, 0);
}

void proc_forget(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "FORGET", n, 4, 4)) return;
  struct proc *pr = proc_by_id(get_u32(p));
  if (pr == NULL) {
    send_error(sid, E_NO_PROCESS, 0, "no process %u", get_u32(p));
    return;
  }
  if (pr->state == PS_RUNNING) {
    send_error(sid, E_ERRNO, EBUSY, "process %u is running", pr->id);
    return;
  }
  int cursor = 0;
  struct stream *s;
  while ((s = stream_each(&cursor)) != NULL)
    if (s->kind == SK_PROC && s->u.proc.p == pr) {
      send_error(s->id, E_NO_PROCESS, 0, "process %u was forgotten", pr->id);
      stream_close(s);
    }
  proc_free(pr);
  send_end(sid, NULL, 0);
}

void proc_input(struct stream *s, const struct frame *f) {
  struct proc *p = s->u.proc.p;
  if (p->input != s || p->in_fd < 0) return; /* not (or no longer) this stream's stdin */
  size_t n = f->len;
  if (n > STDIN_BUFFER - p->in_len) {
    fprintf(stderr, "vessel-agent: stdin beyond its credit dropped (%zu bytes)\n", n - (STDIN_BUFFER - p->in_len));
    n = STDIN_BUFFER - p->in_len;
  }
  if (n > 0 && p->inbuf == NULL && (p->inbuf = malloc(STDIN_BUFFER)) == NULL) n = 0;
  if (n > 0) memcpy(p->inbuf + p->in_len, f->payload, n);
  p->in_len += n;
  /* A terminal has no end of input; the host sends ^D (0x04) if it wants one. */
  if ((f->flags & FLAG_EOF) && !p->pty) {
    p->in_eof = 1;
    if (p->in_len == 0) close_input(p);
  }
}

static size_t output_room(const struct proc *p, int c) {
  if (p->hold == NULL) return READ_CHUNK;
  const struct ring *r = &p->ring[c];
  uint64_t unsent = r->end - p->hold->u.proc.pos[c];
  size_t room = unsent >= r->cap ? 0 : r->cap - (size_t)unsent;
  return room < READ_CHUNK ? room : READ_CHUNK;
}

#define TAG(i, role) ((void *)(uintptr_t)((i) * 4 + (role) + 1))

int proc_poll_fds(struct pollfd *pfd, int max, void **tags) {
  int n = 0;
  for (int i = 0; i < MAX_PROCS && n + 3 <= max; i++) {
    struct proc *p = &procs[i];
    if (p->state == PS_FREE) continue;
    for (int c = 0; c < 2; c++) {
      /* Not polled at all when full: a hung-up pipe would report POLLHUP on every call. */
      if (p->out_fd[c] < 0 || output_room(p, c) == 0) continue;
      pfd[n] = (struct pollfd){.fd = p->out_fd[c], .events = POLLIN};
      tags[n++] = TAG(i, c);
    }
    if (p->in_fd >= 0 && p->in_len > 0) {
      pfd[n] = (struct pollfd){.fd = p->in_fd, .events = POLLOUT};
      tags[n++] = TAG(i, 2);
    }
  }
  return n;
}

void proc_handle_fd(void *tag, short revents) {
  uintptr_t t = (uintptr_t)tag - 1;
  struct proc *p = &procs[t / 4];
  int role = (int)(t % 4);
  if (p->state == PS_FREE) return;
  if (role < 2) {
    size_t room = output_room(p, role);
    if (p->out_fd[role] < 0 || room == 0) return;
    ssize_t got = read(p->out_fd[role], readbuf, room);
    if (got > 0) ring_write(&p->ring[role], readbuf, (size_t)got);
    else if (got == 0 || (errno != EAGAIN && errno != EINTR)) close_output(p, role); /* EIO: a PTY with no slave left */
    return;
  }
  if (p->in_fd < 0) return;
  if (revents & POLLOUT) {
    ssize_t put = write(p->in_fd, p->inbuf, p->in_len);
    if (put > 0) {
      memmove(p->inbuf, p->inbuf + put, p->in_len - (size_t)put);
      p->in_len -= (size_t)put;
      if (p->input != NULL) send_window(p->input->id, (uint32_t)put);
      if (p->in_len == 0) {
        free(p->inbuf);
        p->inbuf = NULL;
        if (p->in_eof) close_input(p);
      }
    } else if (put < 0 && errno != EAGAIN && errno != EINTR) {
      close_input(p); /* EPIPE: nobody reads stdin any more */
    }
  } else if (revents & (POLLHUP | POLLERR | POLLNVAL)) {
    close_input(p);
  }
}

void proc_reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < MAX_PROCS; i++) {
      struct proc *p = &procs[i];
      if (p->state != PS_RUNNING || p->pid != pid) continue;
      p->state = WIFSIGNALED(status) ? PS_SIGNALED : PS_EXITED;
      p->code = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
      p->end_ns = now_ns();
      close_input(p);
      break;
    }
  }
}

void proc_stream_detached(struct stream *s) {
  struct proc *p = s->u.proc.p;
  if (p == NULL) return;
  if (p->hold == s) p->hold = NULL;
  if (p->input == s) p->input = NULL;
}

static void finish(struct stream *s, int exited) {
  struct proc *p = s->u.proc.p;
  int forget = exited && s->u.proc.spawned && p->forget_on_exit;
  if (exited) send_proc_info(R_EXIT, s->id, p);
  else send_end(s->id, NULL, 0);
  stream_close(s);
  if (forget && !proc_has_streams(p)) proc_free(p);
}

int proc_stream_pump(struct stream *s) {
  struct proc *p = s->u.proc.p;
  int sent = 0, caught_up = 1;
  for (int c = 0; c < 2; c++) {
    const struct ring *r = &p->ring[c];
    uint64_t pos = s->u.proc.pos[c] < r->start ? r->start : s->u.proc.pos[c]; /* a gap: dropped */
    uint64_t limit = r->end < s->u.proc.until[c] ? r->end : s->u.proc.until[c];
    while (pos < limit && s->credit > 0 && out_has_room()) {
      size_t n = (size_t)(limit - pos);
      if (n > s->credit) n = (size_t)s->credit;
      if (n > MAX_PAYLOAD - OUTPUT_PREFIX_BYTES) n = MAX_PAYLOAD - OUTPUT_PREFIX_BYTES;
      uint8_t *b = frame_begin(R_OUTPUT, 0, s->id, OUTPUT_PREFIX_BYTES + n);
      b[0] = (uint8_t)(c + 1);
      b[1] = b[2] = b[3] = 0;
      put_u64(b + 4, pos);
      size_t got = ring_read(r, pos, b + OUTPUT_PREFIX_BYTES, n);
      frame_commit(OUTPUT_PREFIX_BYTES + got);
      pos += got;
      s->credit -= got;
      sent = 1;
    }
    s->u.proc.pos[c] = pos;
    if (pos < limit) caught_up = 0;
  }
  if (!caught_up) return sent;
  if (s->u.proc.until[0] != UINT64_MAX) finish(s, 0);
  else if (p->state != PS_RUNNING && p->out_fd[0] < 0 && p->out_fd[1] < 0) finish(s, 1);
  else return sent;
  return 1;
}
