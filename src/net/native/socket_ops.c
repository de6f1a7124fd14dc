/*
 * Two socket calls Node does not offer, for the egress gateway (DESIGN.md, network gateway):
 * - originalDst(fd) -> { address, port }: the destination a TCP connection had before an
 *   nftables `redirect` rewrote it, from getsockopt(SOL_IP, SO_ORIGINAL_DST);
 * - peek(fd, max) -> Buffer | null: the bytes waiting on a socket without consuming them
 *   (recv with MSG_PEEK | MSG_DONTWAIT; null when none yet, empty at end of stream), so the
 *   gateway can read a ClientHello or request head and still hand the untouched socket to
 *   Node's native TLS or HTTP machinery;
 * - whenReadable(fd, held, callback) -> waiter, cancelReadable(waiter): callback(ended) once the
 *   socket holds more than `held` bytes (ended false) or its peer closed or it failed (ended
 *   true), so that a connection still being sniffed costs a wakeup per arrival instead of a peek
 *   every few milliseconds (see below);
 * - relay(fdA, fdB, tag), closeRelays(tag), relayEvents(callback): see relay_thread.c.
 */
#include <node_api.h>
#include <uv.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

static napi_value original_dst(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok) {
    napi_throw_type_error(env, NULL, "originalDst(fd): fd must be a number");
    return NULL;
  }
  struct sockaddr_in addr;
  socklen_t len = sizeof(addr);
  memset(&addr, 0, sizeof(addr));
  if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &addr, &len) != 0) {
    napi_throw_error(env, "ENOORIGDST", strerror(errno));
    return NULL;
  }
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  napi_value result, address, port;
  napi_create_object(env, &result);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &address);
  napi_create_uint32(env, ntohs(addr.sin_port), &port);
  napi_set_named_property(env, result, "address", address);
  napi_set_named_property(env, result, "port", port);
  return result;
}

static napi_value peek(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t fd, max;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &max) != napi_ok ||
      max <= 0 || max > 65536) {
    napi_throw_type_error(env, NULL, "peek(fd, max): fd and max (1..65536) must be numbers");
    return NULL;
  }
  char *buf = malloc((size_t)max);
  if (buf == NULL) {
    napi_throw_error(env, "ENOMEM", "out of memory");
    return NULL;
  }
  ssize_t n;
  do {
    n = recv(fd, buf, (size_t)max, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  napi_value result;
  if (n < 0) {
    int err = errno;
    free(buf);
    if (err == EAGAIN || err == EWOULDBLOCK) {
      napi_get_null(env, &result);
      return result;
    }
    napi_throw_error(env, "EPEEK", strerror(err));
    return NULL;
  }
  void *data;
  napi_create_buffer_copy(env, (size_t)n, buf, &data, &result);
  free(buf);
  return result;
}

/*
 * A wait for bytes on a socket that Node holds paused: the gateway peeks, and must not read, until
 * it has decided who takes the socket (the native relay reads it from the kernel). Node offers no
 * readiness without reading, so the wait is a libuv poll handle of the JavaScript thread's own
 * loop, on a duplicate of the descriptor (libuv keys its watchers by descriptor, and Node's handle
 * has the original). Epoll is level-triggered: SO_RCVLOWAT at held + 1 makes the socket readable
 * only once something beyond what was already peeked has arrived (or at end of stream or an error,
 * which are readable whatever the mark), and the mark is set back to 1 as soon as the wait ends.
 * A waiter fires at most once; its descriptor is closed once libuv has let go of the handle.
 */
struct waiter {
  uv_poll_t poll;
  napi_env env;
  napi_ref callback;
  napi_async_context context;
  int fd;    /* the duplicate */
  int armed; /* neither fired nor cancelled */
  int refs;  /* the JavaScript value and the libuv handle: freed when both have let go */
};

static void release_waiter(struct waiter *w) {
  if (--w->refs == 0) free(w);
}

static void waiter_closed(uv_handle_t *handle) {
  struct waiter *w = handle->data;
  close(w->fd);
  napi_delete_reference(w->env, w->callback);
  napi_async_destroy(w->env, w->context);
  release_waiter(w);
}

static void disarm(struct waiter *w) {
  w->armed = 0;
  uv_poll_stop(&w->poll);
  int one = 1;
  setsockopt(w->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
  uv_close((uv_handle_t *)&w->poll, waiter_closed);
}

static void waiter_ready(uv_poll_t *handle, int status, int events) {
  struct waiter *w = handle->data;
  if (!w->armed) return;
  disarm(w);
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value callback, recv, ended;
  napi_get_reference_value(env, w->callback, &callback);
  napi_get_global(env, &recv); /* make_callback needs an object for `this` */
  napi_get_boolean(env, status < 0 || (events & UV_DISCONNECT) != 0, &ended);
  /* make_callback, not call_function: this is a turn of the loop, so the callback's promise
     reactions run now, as after any I/O callback. */
  if (napi_make_callback(env, w->context, recv, callback, 1, &ended, NULL) == napi_pending_exception) {
    napi_value err;
    napi_get_and_clear_last_exception(env, &err);
    napi_fatal_exception(env, err);
  }
  napi_close_handle_scope(env, scope);
}

static void waiter_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  release_waiter(data);
}

static napi_value when_readable(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t fd, held;
  napi_valuetype type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &held) != napi_ok ||
      held < 0 || held > 65536 || napi_typeof(env, argv[2], &type) != napi_ok || type != napi_function) {
    napi_throw_type_error(env, NULL, "whenReadable(fd, held, callback): fd, held (0..65536) and a callback");
    return NULL;
  }
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
    napi_throw_error(env, "EREADABLE", "no event loop");
    return NULL;
  }
  struct waiter *w = calloc(1, sizeof(*w));
  int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  int err = w == NULL ? ENOMEM : dup < 0 ? errno : 0;
  if (err == 0) {
    int mark = held + 1;
    if (setsockopt(dup, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof(mark)) != 0) err = errno;
  }
  if (err == 0) {
    int rc = uv_poll_init_socket(loop, &w->poll, dup);
    if (rc != 0) err = -rc;
  }
  if (err != 0) {
    if (dup >= 0) {
      int one = 1;
      setsockopt(dup, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
      close(dup);
    }
    free(w);
    napi_throw_error(env, "EREADABLE", strerror(err));
    return NULL;
  }
  napi_value name, result;
  napi_create_string_utf8(env, "vessel:whenReadable", NAPI_AUTO_LENGTH, &name);
  w->poll.data = w;
  w->env = env;
  w->fd = dup;
  w->armed = 1;
  w->refs = 2;
  napi_create_reference(env, argv[2], 1, &w->callback);
  napi_async_init(env, NULL, name, &w->context);
  /* The caller's timer bounds every wait and keeps the process alive meanwhile; this does not. */
  uv_unref((uv_handle_t *)&w->poll);
  int rc = uv_poll_start(&w->poll, UV_READABLE | UV_DISCONNECT, waiter_ready);
  if (rc != 0 || napi_create_external(env, w, waiter_finalize, NULL, &result) != napi_ok) {
    disarm(w);
    release_waiter(w); /* no JavaScript value holds it */
    napi_throw_error(env, "EREADABLE", rc != 0 ? uv_strerror(rc) : "could not make the waiter");
    return NULL;
  }
  return result;
}

static napi_value cancel_readable(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  void *data;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_external(env, argv[0], &data) != napi_ok) {
    napi_throw_type_error(env, NULL, "cancelReadable(waiter): a waiter from whenReadable");
    return NULL;
  }
  struct waiter *w = data;
  if (w->armed) disarm(w);
  return NULL;
}

void register_relay(napi_env env, napi_value exports);

static napi_value init(napi_env env, napi_value exports) {
  register_relay(env, exports);
  napi_value fn;
  napi_create_function(env, "originalDst", NAPI_AUTO_LENGTH, original_dst, NULL, &fn);
  napi_set_named_property(env, exports, "originalDst", fn);
  napi_create_function(env, "peek", NAPI_AUTO_LENGTH, peek, NULL, &fn);
  napi_set_named_property(env, exports, "peek", fn);
  napi_create_function(env, "whenReadable", NAPI_AUTO_LENGTH, when_readable, NULL, &fn);
  napi_set_named_property(env, exports, "whenReadable", fn);
  napi_create_function(env, "cancelReadable", NAPI_AUTO_LENGTH, cancel_readable, NULL, &fn);
  napi_set_named_property(env, exports, "cancelReadable", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
