/*
 * relay(fdA, fdB, tag) -> id: joins two connected TCP sockets off the JavaScript event loop. Both
 * descriptors are duplicated, so the caller closes its own copies at once; from then on one
 * background thread moves the bytes with recv/send through a buffer per direction. (splice(2)
 * through a pipe was tried: for the small messages of API traffic it was slower.) End of stream
 * is passed on as a half-close (shutdown SHUT_WR) once the buffer is drained; an error on either
 * side, or both directions finished, closes everything.
 *
 * closeRelays(tag): resets every relay carrying `tag` (the gateway tags each runtime's relays, and
 * closes them when the runtime is detached, so nothing of it outlives its slot).
 *
 * relayEvents(callback): callback(0, id) when a relay has closed, callback(1, tag) once a
 * closeRelays(tag) has been carried out. The gateway counts open connections by these.
 *
 * The relay thread alone owns the relays and their descriptors: relay() and closeRelays() only
 * queue a command and wake the thread through an eventfd, so no relay is ever touched by two
 * threads. Commands run in the order they were queued, so a closeRelays(tag) reaches every relay
 * of that tag made before it.
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
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK (64 * 1024)

enum { EVENT_RELAY_CLOSED = 0, EVENT_TAG_CLOSED = 1 };

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
  uint32_t id;
  uint32_t tag;
  int closed;
  struct relay *prev, *next; /* the live relays, or the ones finished in this round */
};

/* A command from the JavaScript thread: add `relay`, or close every relay of `tag`. */
struct command {
  struct relay *relay; /* NULL for a close */
  uint32_t tag;
  struct command *next;
};

struct event {
  int kind;
  uint32_t value;
};

static int epfd = -1;
static int wakefd = -1;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct command *queue_head, *queue_tail;
static napi_threadsafe_function events_fn;
static uint32_t last_id;

/* Owned by the relay thread. */
static struct relay *live;
static struct relay *graveyard;

static void notify(int kind, uint32_t value) {
  if (events_fn == NULL) return;
  struct event *e = malloc(sizeof(*e));
  if (e == NULL) return;
  *e = (struct event){.kind = kind, .value = value};
  if (napi_call_threadsafe_function(events_fn, e, napi_tsfn_nonblocking) != napi_ok) free(e);
}

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

static void unlink_live(struct relay *r) {
  if (r->prev != NULL) r->prev->next = r->next;
  else live = r->next;
  if (r->next != NULL) r->next->prev = r->prev;
}

/*
 * Closes both sides; after a failure with a reset, so that the other peer learns of it too. The
 * relay is freed at the end of the round: an event for it may still be in this round's batch.
 */
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
  unlink_live(r);
  r->prev = NULL;
  r->next = graveyard;
  graveyard = r;
  notify(EVENT_RELAY_CLOSED, r->id);
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

static void start_relay(struct relay *r) {
  r->prev = NULL;
  r->next = live;
  if (live != NULL) live->prev = r;
  live = r;
  for (int i = 0; i < 2; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->end[i]};
    epoll_ctl(epfd, EPOLL_CTL_ADD, r->end[i].fd, &ev);
  }
}

static void close_tag(uint32_t tag) {
  struct relay *r = live;
  while (r != NULL) {
    struct relay *next = r->next;
    if (r->tag == tag) finish(r, 1);
    r = next;
  }
  notify(EVENT_TAG_CLOSED, tag);
}

/* Carries out every queued command, in order. */
static void run_commands(void) {
  uint64_t count;
  while (read(wakefd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  pthread_mutex_lock(&queue_lock);
  struct command *c = queue_head;
  queue_head = queue_tail = NULL;
  pthread_mutex_unlock(&queue_lock);
  while (c != NULL) {
    struct command *next = c->next;
    if (c->relay != NULL) start_relay(c->relay);
    else close_tag(c->tag);
    free(c);
    c = next;
  }
}

static void *loop(void *unused) {
  (void)unused;
  struct epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epfd, events, 64, -1);
    if (n < 0) continue;
    for (int k = 0; k < n; k++) {
      struct endpoint *e = events[k].data.ptr;
      if (e == NULL) {
        run_commands();
        continue;
      }
      struct relay *r = e->relay;
      if (r->closed) continue;
      int i = e->index;
      int failed = 0;
      if (events[k].events & EPOLLOUT) failed |= drain(r, 1 - i) < 0;
      if (!failed && (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) failed |= fill(r, i) < 0;
      if (failed || (r->dir[0].done && r->dir[1].done)) {
        finish(r, failed);
        continue;
      }
      watch(r, 0);
      watch(r, 1);
    }
    while (graveyard != NULL) {
      struct relay *next = graveyard->next;
      free(graveyard);
      graveyard = next;
    }
  }
  return NULL;
}

static void start_thread(void) {
  epfd = epoll_create1(EPOLL_CLOEXEC);
  wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &attr, loop, NULL);
  pthread_attr_destroy(&attr);
}

/* Queues a command for the relay thread and wakes it. Returns 0, or -1 when out of memory. */
static int enqueue(struct relay *r, uint32_t tag) {
  struct command *c = malloc(sizeof(*c));
  if (c == NULL) return -1;
  *c = (struct command){.relay = r, .tag = tag};
  pthread_mutex_lock(&queue_lock);
  if (queue_tail != NULL) queue_tail->next = c;
  else queue_head = c;
  queue_tail = c;
  pthread_mutex_unlock(&queue_lock);
  uint64_t one = 1;
  while (write(wakefd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  return 0;
}

static napi_value relay(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t a, b;
  uint32_t tag;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, argv[0], &a) != napi_ok || napi_get_value_int32(env, argv[1], &b) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &tag) != napi_ok) {
    napi_throw_type_error(env, NULL, "relay(fdA, fdB, tag): two file descriptors and a tag");
    return NULL;
  }
  pthread_once(&started, start_thread);
  struct relay *r = calloc(1, sizeof(*r));
  int fds[2] = {fcntl(a, F_DUPFD_CLOEXEC, 0), fcntl(b, F_DUPFD_CLOEXEC, 0)};
  char *bufs[2] = {malloc(CHUNK), malloc(CHUNK)};
  int ok = r != NULL && fds[0] >= 0 && fds[1] >= 0 && bufs[0] != NULL && bufs[1] != NULL;
  if (ok) {
    r->id = ++last_id;
    r->tag = tag;
    for (int i = 0; i < 2; i++) {
      fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
      r->end[i] = (struct endpoint){.relay = r, .fd = fds[i], .index = i, .watching = EPOLLIN};
      r->dir[i] = (struct direction){.buf = bufs[i]};
    }
    ok = enqueue(r, tag) == 0;
  }
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
  napi_value id;
  napi_create_uint32(env, r->id, &id);
  return id;
}

static napi_value close_relays(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  uint32_t tag;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_uint32(env, argv[0], &tag) != napi_ok) {
    napi_throw_type_error(env, NULL, "closeRelays(tag): a tag");
    return NULL;
  }
  pthread_once(&started, start_thread);
  if (enqueue(NULL, tag) != 0) {
    napi_throw_error(env, "ERELAY", strerror(ENOMEM));
    return NULL;
  }
  return NULL;
}

static void call_js(napi_env env, napi_value callback, void *context, void *data) {
  (void)context;
  struct event *e = data;
  if (env != NULL && callback != NULL) {
    napi_value undefined, argv[2];
    napi_get_undefined(env, &undefined);
    napi_create_int32(env, e->kind, &argv[0]);
    napi_create_uint32(env, e->value, &argv[1]);
    napi_call_function(env, undefined, callback, 2, argv, NULL);
  }
  free(e);
}

static napi_value relay_events(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], name;
  napi_valuetype type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_typeof(env, argv[0], &type) != napi_ok || type != napi_function || events_fn != NULL) {
    napi_throw_type_error(env, NULL, "relayEvents(callback): one callback, set once");
    return NULL;
  }
  napi_create_string_utf8(env, "relay events", NAPI_AUTO_LENGTH, &name);
  if (napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, NULL, NULL, NULL, call_js, &events_fn) != napi_ok) {
    napi_throw_error(env, "ERELAY", "could not create the relay event channel");
    return NULL;
  }
  /* Relays must not keep the process alive. */
  napi_unref_threadsafe_function(env, events_fn);
  return NULL;
}

void register_relay(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "relay", NAPI_AUTO_LENGTH, relay, NULL, &fn);
  napi_set_named_property(env, exports, "relay", fn);
  napi_create_function(env, "closeRelays", NAPI_AUTO_LENGTH, close_relays, NULL, &fn);
  napi_set_named_property(env, exports, "closeRelays", fn);
  napi_create_function(env, "relayEvents", NAPI_AUTO_LENGTH, relay_events, NULL, &fn);
  napi_set_named_property(env, exports, "relayEvents", fn);
}
