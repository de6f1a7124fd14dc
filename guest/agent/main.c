/*
 * vessel-agent [--channel PATH | --channel-fd N]
 *
 * The main loop: one poll(2) over the channel, a signalfd (SIGCHLD, SIGIO) and the processes'
 * pipes, with no timeout while a host is connected: an idle agent sleeps until something
 * happens. Each turn reads what is ready, handles the requests that arrived (while the output
 * queue has room), then lets every stream with credit produce frames, round robin.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define MAX_PING_BYTES 256
#define POLL_SLOTS (2 + 3 * MAX_PROCS)
/* Large buffers (the output queue, rings, stdin) come from mmap and go back whole when freed,
   and a free heap top is returned past 128 KiB: fixed, so glibc does not raise them itself
   after the first large free and keep a transfer's buffers for good. */
#define MALLOC_MMAP_AT (64 * 1024)
#define MALLOC_TRIM_AT (128 * 1024)

static struct stream streams[MAX_STREAMS];
static int pump_start; /* where the next round robin begins */

struct stream *stream_each(int *cursor) {
  while (*cursor < MAX_STREAMS) {
    struct stream *s = &streams[(*cursor)++];
    if (s->kind != SK_FREE) return s;
  }
  return NULL;
}

struct stream *stream_find(uint32_t id) {
  if (id == 0) return NULL;
  for (int i = 0; i < MAX_STREAMS; i++)
    if (streams[i].kind != SK_FREE && streams[i].id == id) return &streams[i];
  return NULL;
}

void stream_close(struct stream *s) {
  switch (s->kind) {
  case SK_PROC: proc_stream_detached(s); break;
  case SK_READ_FILE: close(s->u.rf.fd); break;
  case SK_WRITE_FILE:
    if (s->u.wf.fd >= 0) close(s->u.wf.fd);
    free(s->u.wf.path);
    break;
  case SK_LIST_DIR: closedir(s->u.ld.dir); break;
  default: break;
  }
  memset(s, 0, sizeof *s);
  s->kind = SK_FREE;
}

int stream_finish(struct stream *s, int err, const char *what) {
  if (err) send_error(s->id, E_ERRNO, err, "%s", what);
  else send_end(s->id, NULL, 0);
  stream_close(s);
  return 1;
}

struct stream *stream_open(uint32_t id, int kind, uint32_t window) {
  struct stream *old = stream_find(id);
  if (id == 0 || old != NULL) {
    /* The host reused a live id: both are ended, so neither side keeps a stream the other lost. */
    if (old != NULL) stream_close(old);
    send_error(id, E_BAD_REQUEST, 0, "stream id %u is 0 or already open", id);
    return NULL;
  }
  for (int i = 0; i < MAX_STREAMS; i++) {
    if (streams[i].kind != SK_FREE) continue;
    memset(&streams[i], 0, sizeof streams[i]);
    streams[i].id = id;
    streams[i].kind = kind;
    streams[i].credit = window > MAX_CREDIT ? MAX_CREDIT : window;
    return &streams[i];
  }
  send_error(id, E_LIMIT, 0, "%d streams are open", MAX_STREAMS);
  return NULL;
}

/* A new session (HELLO) or a lost host: every stream ends, quietly; processes run on. */
void session_reset(void) {
  for (int i = 0; i < MAX_STREAMS; i++)
    if (streams[i].kind != SK_FREE) stream_close(&streams[i]);
}

static void hello(const struct frame *f) {
  if (f->stream != 0 || f->len < HELLO_BYTES) return;
  session_reset();
  uint8_t ack[HELLO_ACK_BYTES] = {0};
  memcpy(ack, f->payload + 4, NONCE_BYTES);
  put_u16(ack + 16, PROTOCOL_VERSION);
  put_u32(ack + 20, MAX_PAYLOAD);
  put_u32(ack + 24, MAX_STREAMS);
  put_u32(ack + 28, MAX_PROCS);
  put_u32(ack + 32, RING_DEFAULT);
  put_u32(ack + 36, RING_MAX);
  send_frame(R_HELLO_ACK, 0, 0, ack, sizeof ack);
}

static void dispatch(const struct frame *f) {
  const uint8_t *p = f->payload;
  size_t n = f->len;
  uint32_t id = f->stream;
  if (f->type == T_HELLO) {
    hello(f);
    return;
  }
  if (id == 0) return; /* nothing else lives on stream 0 */
  struct stream *s = stream_find(id);
  switch (f->type) {
  case T_PING:
    if (n > MAX_PING_BYTES) send_error(id, E_BAD_REQUEST, 0, "PING payload over %d bytes", MAX_PING_BYTES);
    else send_end(id, p, n);
    break;
  case T_WINDOW:
    if (s != NULL && n == 4) {
      s->credit += get_u32(p);
      if (s->credit > MAX_CREDIT) s->credit = MAX_CREDIT;
    }
    break;
  case T_DATA:
    if (s != NULL && s->kind == SK_PROC) proc_input(s, f);
    else if (s != NULL && s->kind == SK_WRITE_FILE) file_write_data(s, f);
    break; /* DATA for a stream that ended (an error crossed it) is dropped */
  case T_CANCEL:
    if (s != NULL) stream_close(s);
    break;
  case T_SPAWN: proc_spawn(id, p, n); break;
  case T_ATTACH: proc_attach(id, p, n); break;
  case T_SIGNAL: proc_signal(id, p, n); break;
  case T_RESIZE: proc_resize(id, p, n); break;
  case T_LIST_PROCS: proc_list(id); break;
  case T_FORGET: proc_forget(id, p, n); break;
  case T_READ_FILE: file_read_open(id, p, n); break;
  case T_WRITE_FILE: file_write_open(id, p, n); break;
  case T_STAT: file_stat(id, p, n); break;
  case T_LIST_DIR: dir_list_open(id, p, n); break;
  case T_MKDIR: file_mkdir(id, p, n); break;
  case T_REMOVE: file_remove(id, p, n); break;
  case T_IDENTITY: identity_apply(id, p, n); break;
  case T_SHUTDOWN: shutdown_guest(id, p, n); break;
  default: send_error(id, E_BAD_REQUEST, 0, "unknown request type 0x%02x", f->type); break;
  }
}

static void pump(void) {
  int start = pump_start;
  pump_start = (pump_start + 1) % MAX_STREAMS;
  for (int k = 0; k < MAX_STREAMS && out_has_room(); k++) {
    struct stream *s = &streams[(start + k) % MAX_STREAMS];
    switch (s->kind) {
    case SK_PROC: proc_stream_pump(s); break;
    case SK_READ_FILE: file_read_pump(s); break;
    case SK_LIST_DIR: dir_list_pump(s); break;
    default: break;
    }
  }
}

/* Requests, then output, then the write; again while the queue filled up and then drained. */
static void work(void) {
  for (;;) {
    struct frame f;
    while (out_has_room() && channel_next_frame(&f)) dispatch(&f);
    pump();
    int was_full = !out_has_room();
    channel_flush();
    if (!was_full || !out_has_room()) return;
  }
}

static void usage(void) {
  fprintf(stderr, "usage: vessel-agent --channel PATH | --channel-fd N\n"
                  "  PATH: the virtio-serial port (/dev/vportNpM), a character device or a Unix socket\n"
                  "  N:    an inherited descriptor (a socket pair in tests); its end is the agent's end\n");
  exit(2);
}

/* Descriptors 0-2 exist, so no pipe or file of ours is ever taken for a child's stdio. */
static void hold_stdio(void) {
  for (int fd = 0; fd < 3; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd) exit(1);
}

int main(int argc, char **argv) {
  const char *path = NULL;
  int inherited = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--channel") == 0 && i + 1 < argc) path = argv[++i];
    else if (strcmp(argv[i], "--channel-fd") == 0 && i + 1 < argc) inherited = atoi(argv[++i]);
    else usage();
  }
  if ((path == NULL) == (inherited < 0)) usage();
  hold_stdio();
  mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_AT);
  mallopt(M_TRIM_THRESHOLD, MALLOC_TRIM_AT);
  signal(SIGPIPE, SIG_IGN);
  sigset_t caught;
  sigemptyset(&caught);
  sigaddset(&caught, SIGCHLD);
  sigaddset(&caught, SIGIO);
  sigprocmask(SIG_BLOCK, &caught, NULL);
  int sfd = signalfd(-1, &caught, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) {
    perror("vessel-agent: signalfd");
    return 1;
  }
  proc_init();
  if ((path ? channel_open_path(path) : channel_open_fd(inherited)) != 0) {
    fprintf(stderr, "vessel-agent: cannot open the channel %s: %s\n", path ? path : "(fd)", strerror(errno));
    return 1;
  }

  static struct pollfd pfd[POLL_SLOTS];
  static void *tags[POLL_SLOTS];
  for (;;) {
    int timeout = -1;
    pfd[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = -1};
    channel_prepare_poll(&pfd[1].fd, &pfd[1].events, &timeout);
    int n = 2 + proc_poll_fds(pfd + 2, POLL_SLOTS - 2, tags + 2);
    if (poll(pfd, (nfds_t)n, timeout) < 0 && errno != EINTR) {
      perror("vessel-agent: poll");
      return 1;
    }
    if (pfd[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      int reap = 0;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) reap = 1;
        else if (si.ssi_signo == SIGIO) channel_on_sigio();
      }
      if (reap) proc_reap();
    }
    if (pfd[1].fd >= 0 && pfd[1].revents) channel_handle(pfd[1].revents);
    for (int i = 2; i < n; i++)
      if (pfd[i].revents) proc_handle_fd(tags[i], pfd[i].revents);
    work();
  }
}
