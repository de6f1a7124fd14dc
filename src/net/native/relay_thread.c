/*
 * relay(fdA, fdB): joins two connected TCP sockets off the JavaScript event loop. Both
 * descriptors are duplicated, so the caller closes its own copies at once; from then on one
 * background thread moves the bytes with recv/send through a buffer per direction. (splice(2)
 * through a pipe was tried: for the small messages of API traffic it was slower.) End of stream
 * is passed on as a half-close (shutdown SHUT_WR) once the buffer is drained; an error on either
 * side, or both directions finished, closes everything.
 *
 * Epoll is level-triggered and each socket is watched for what it can do next: readable when
 * its outgoing buffer is empty and open, writable when its incoming buffer holds bytes.
 */
#include <node_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

struct relay;

struct direction {
  char *buf;
  size_t off;     /* bytes of buf already written to the destination */
  size_t pending; /* bytes of buf from off on, not yet written */
  int eof;        /* the source reached end of stream */
  int done;       /* eof seen and everything written: the destination was shut for writing */
};

struct endpoint {
  struct relay *relay;
  int fd;
  int index; /* 0 or 1: this endpoint is the source of dir[index] */
  uint32_t watching; /* the epoll events registered now, so unchanged interest costs no syscall */
};

struct relay {
  struct endpoint end[2];
  struct direction dir[2]; /* dir[i]: end[i] -> end[1 - i] */
  int closed;
};

static int epfd = -1;
static pthread_once_t started = PTHREAD_ONCE_INIT;

static void watch(struct relay *r, int i) {
  struct endpoint *e = &r->end[i];
  struct epoll_event ev = {0};
  if (!r->dir[i].eof && r->dir[i].pending == 0) ev.events |= EPOLLIN;
  if (r->dir[1 - i].pending > 0) ev.events |= EPOLLOUT;
  if (ev.events == e->watching) return;
  ev.data.ptr = e;
  /* A socket with nothing to wait for leaves the set: epoll reports a hang-up whatever the mask,
     and one that still holds unread bytes must not be read before its buffer has drained. */
  int op = ev.events == 0 ? EPOLL_CTL_DEL : e->watching == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  e->watching = ev.events;
  epoll_ctl(epfd, op, e->fd, &ev);
}

/* Closes both sides; after a failure with a reset, so that the other peer learns of it too. */
static void finish(struct relay *r, int failed) {
  for (int i = 0; i < 2; i++) {
    if (failed) {
      struct linger abort = {.l_onoff = 1, .l_linger = 0};
      setsockopt(r->end[i].fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
    }
    epoll_ctl(epfd, EPOLL_CTL_DEL, r->end[i].fd, NULL);
    close(r->end[i].fd);
    free(r->dir[i].buf);
  }
  r->closed = 1;
}

/* Writes what the buffer of dir[i] holds to its destination; returns -1 on a fatal error. */
static int drain(struct relay *r, int i) {
  struct direction *d = &r->dir[i];
  int dst = r->end[1 - i].fd;
  while (d->pending > 0) {
    ssize_t n = send(dst, d->buf + d->off, d->pending, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      d->off += (size_t)n;
      d->pending -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    return -1;
  }
  if (d->eof && !d->done) {
    d->done = 1;
    shutdown(dst, SHUT_WR);
  }
  return 0;
}

/* Reads from the source of dir[i] into its buffer, then drains; returns -1 on a fatal error. */
static int fill(struct relay *r, int i) {
  struct direction *d = &r->dir[i];
  if (d->pending > 0 || d->eof) return 0; /* the buffer is still in use, or nothing more will come */
  for (;;) {
    ssize_t n = recv(r->end[i].fd, d->buf, CHUNK, MSG_DONTWAIT);
    if (n > 0) {
      d->off = 0;
      d->pending = (size_t)n;
      return drain(r, i);
    }
    if (n == 0) {
      d->eof = 1;
      return drain(r, i);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return 0;
    return -1;
  }
}

static void *loop(void *unused) {
  (void)unused;
  struct epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epfd, events, 64, -1);
    if (n < 0) continue;
    /* A relay finished while handling this batch may still appear later in it. */
    struct relay *finished[64];
    int nfinished = 0;
    for (int k = 0; k < n; k++) {
      struct endpoint *e = events[k].data.ptr;
      struct relay *r = e->relay;
      if (r->closed) continue;
      int i = e->index;
      int failed = 0;
      if (events[k].events & EPOLLOUT) failed |= drain(r, 1 - i) < 0;
      if (!failed && (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) failed |= fill(r, i) < 0;
      if (failed || (r->dir[0].done && r->dir[1].done)) {
        finish(r, failed);
        finished[nfinished++] = r;
        continue;
      }
      watch(r, 0);
      watch(r, 1);
    }
    for (int k = 0; k < nfinished; k++) free(finished[k]);
  }
  return NULL;
}

static void start_thread(void) {
  epfd = epoll_create1(EPOLL_CLOEXEC);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &attr, loop, NULL);
  pthread_attr_destroy(&attr);
}

static napi_value relay(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t a, b;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &a) != napi_ok || napi_get_value_int32(env, argv[1], &b) != napi_ok) {
    napi_throw_type_error(env, NULL, "relay(fdA, fdB): two file descriptors");
    return NULL;
  }
  pthread_once(&started, start_thread);
  struct relay *r = calloc(1, sizeof(*r));
  int fds[2] = {fcntl(a, F_DUPFD_CLOEXEC, 0), fcntl(b, F_DUPFD_CLOEXEC, 0)};
  char *bufs[2] = {malloc(CHUNK), malloc(CHUNK)};
  int ok = r != NULL && fds[0] >= 0 && fds[1] >= 0 && bufs[0] != NULL && bufs[1] != NULL;
  if (!ok) {
    int err = errno;
    for (int i = 0; i < 2; i++) {
      if (fds[i] >= 0) close(fds[i]);
      free(bufs[i]);
    }
    free(r);
    napi_throw_error(env, "ERELAY", strerror(err));
    return NULL;
  }
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    r->end[i] = (struct endpoint){.relay = r, .fd = fds[i], .index = i, .watching = EPOLLIN};
    r->dir[i] = (struct direction){.buf = bufs[i]};
  }
  for (int i = 0; i < 2; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->end[i]};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev);
  }
  return NULL;
}

void register_relay(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "relay", NAPI_AUTO_LENGTH, relay, NULL, &fn);
  napi_set_named_property(env, exports, "relay", fn);
}
