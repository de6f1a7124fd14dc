/*
 * System calls the VM driver needs and Node does not offer. With them QEMU is given every file it
 * uses as a descriptor, so it never has to reach a path on the host (it runs chrooted into an
 * empty directory, in a network namespace of its own), and the agent process (which may open no
 * path of a runtime's either) is given each VM's agent connection:
 * - sendWithFds(socketFd, data, fds) -> bytes sent: sendmsg with SCM_RIGHTS, for QMP `getfd` and
 *   `add-fd`, which take the descriptors attached to the command that names them, and for the
 *   agent connections handed to the agent process. It never blocks (MSG_DONTWAIT): a receiver
 *   that does not read gets EAGAIN, not the service's event loop;
 * - recvWithFds(socketFd, maxBytes) -> { data, fds }: the receiving side, at most one descriptor
 *   kept per message (any more are closed at once), never blocking either;
 * - connectUnix(path) -> fd: a connected AF_UNIX stream socket, not blocking (EAGAIN when the
 *   listener's backlog is full), for a descriptor to hand on;
 * - openTap(name) -> fd: attaches to an existing TAP device (TUNSETIFF with IFF_VNET_HDR, as
 *   QEMU does when it opens a TAP by name), for `-netdev tap,fd=`;
 * - socketPair() -> [fd, fd]: a connected AF_UNIX stream pair, one end for QEMU's migration
 *   stream (`migrate fd:`), the other read by the service.
 * Every descriptor made here is close-on-exec; spawn's stdio mapping hands chosen ones to QEMU.
 */
#include <node_api.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* QMP takes one descriptor per command; a few leave room without inviting abuse. */
#define MAX_FDS 4
/* What recvWithFds reads in one message: an id and its descriptor, not a stream. */
#define MAX_RECV_BYTES 4096

static napi_value throw_errno(napi_env env, const char *code, int err) {
  napi_throw_error(env, code, strerror(err));
  return NULL;
}

static napi_value send_with_fds(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  int32_t sock;
  void *data;
  size_t len;
  uint32_t count;
  bool is_array;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      napi_get_value_int32(env, argv[0], &sock) != napi_ok || napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok ||
      napi_is_array(env, argv[2], &is_array) != napi_ok || !is_array || napi_get_array_length(env, argv[2], &count) != napi_ok ||
      len == 0 || count == 0 || count > MAX_FDS) {
    napi_throw_type_error(env, NULL, "sendWithFds(socketFd, data: Buffer, fds: number[1..4])");
    return NULL;
  }
  int fds[MAX_FDS];
  for (uint32_t i = 0; i < count; i++) {
    napi_value v;
    if (napi_get_element(env, argv[2], i, &v) != napi_ok || napi_get_value_int32(env, v, &fds[i]) != napi_ok || fds[i] < 0) {
      napi_throw_type_error(env, NULL, "sendWithFds: fds must be descriptors");
      return NULL;
    }
  }
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  memset(control, 0, sizeof(control));
  struct iovec iov = {.iov_base = data, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = CMSG_SPACE(sizeof(int) * count)};
  struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * count);
  memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * count);
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, "ESENDFDS", errno);
  napi_value result;
  napi_create_int64(env, n, &result);
  return result;
}

static napi_value recv_with_fds(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  int32_t sock, max_bytes;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || napi_get_value_int32(env, argv[0], &sock) != napi_ok ||
      napi_get_value_int32(env, argv[1], &max_bytes) != napi_ok || sock < 0 || max_bytes <= 0 || max_bytes > MAX_RECV_BYTES) {
    napi_throw_type_error(env, NULL, "recvWithFds(socketFd, maxBytes: 1..4096)");
    return NULL;
  }
  char data[MAX_RECV_BYTES];
  /* Room for more than one descriptor, so that extra ones arrive here (and are closed) rather than truncate the message. */
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  memset(control, 0, sizeof(control));
  struct iovec iov = {.iov_base = data, .iov_len = (size_t)max_bytes};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, errno == EAGAIN || errno == EWOULDBLOCK ? "EAGAIN" : "ERECVFDS", errno);
  int kept = -1;
  for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      if (kept < 0) kept = fd;
      else close(fd);
    }
  }
  napi_value result, buffer, fds, fd_value;
  void *copy;
  napi_create_object(env, &result);
  napi_create_buffer_copy(env, (size_t)n, data, &copy, &buffer);
  napi_create_array_with_length(env, kept < 0 ? 0 : 1, &fds);
  if (kept >= 0) {
    napi_create_int32(env, kept, &fd_value);
    napi_set_element(env, fds, 0, fd_value);
  }
  napi_set_named_property(env, result, "data", buffer);
  napi_set_named_property(env, result, "fds", fds);
  napi_value truncated;
  napi_get_boolean(env, (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0, &truncated);
  napi_set_named_property(env, result, "truncated", truncated);
  return result;
}

static napi_value connect_unix(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  struct sockaddr_un addr;
  size_t len;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_string_utf8(env, argv[0], addr.sun_path, sizeof(addr.sun_path), &len) != napi_ok || len == 0 || len >= sizeof(addr.sun_path) - 1) {
    napi_throw_type_error(env, NULL, "connectUnix(path): a socket path shorter than sun_path");
    return NULL;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return throw_errno(env, "ESOCKET", errno);
  int rc;
  do {
    rc = connect(fd, (struct sockaddr *)&addr, sizeof(addr));
  } while (rc < 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, err == EAGAIN ? "EAGAIN" : err == ENOENT ? "ENOENT" : err == ECONNREFUSED ? "ECONNREFUSED" : "ECONNECT", err);
  }
  napi_value result;
  napi_create_int32(env, fd, &result);
  return result;
}

static napi_value open_tap(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  char name[IFNAMSIZ];
  size_t len;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_string_utf8(env, argv[0], name, sizeof(name), &len) != napi_ok || len == 0 || len >= IFNAMSIZ - 1) {
    napi_throw_type_error(env, NULL, "openTap(name): a device name shorter than IFNAMSIZ");
    return NULL;
  }
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, "EOPENTUN", errno);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  memcpy(ifr.ifr_name, name, len);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "ETUNSETIFF", err);
  }
  napi_value result;
  napi_create_int32(env, fd, &result);
  return result;
}

static napi_value socket_pair(napi_env env, napi_callback_info info) {
  (void)info;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return throw_errno(env, "ESOCKETPAIR", errno);
  napi_value result, a, b;
  napi_create_array_with_length(env, 2, &result);
  napi_create_int32(env, sv[0], &a);
  napi_create_int32(env, sv[1], &b);
  napi_set_element(env, result, 0, a);
  napi_set_element(env, result, 1, b);
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "sendWithFds", NAPI_AUTO_LENGTH, send_with_fds, NULL, &fn);
  napi_set_named_property(env, exports, "sendWithFds", fn);
  napi_create_function(env, "openTap", NAPI_AUTO_LENGTH, open_tap, NULL, &fn);
  napi_set_named_property(env, exports, "openTap", fn);
  napi_create_function(env, "socketPair", NAPI_AUTO_LENGTH, socket_pair, NULL, &fn);
  napi_set_named_property(env, exports, "socketPair", fn);
  napi_create_function(env, "recvWithFds", NAPI_AUTO_LENGTH, recv_with_fds, NULL, &fn);
  napi_set_named_property(env, exports, "recvWithFds", fn);
  napi_create_function(env, "connectUnix", NAPI_AUTO_LENGTH, connect_unix, NULL, &fn);
  napi_set_named_property(env, exports, "connectUnix", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
