/*
 * Three system calls the VM driver needs and Node does not offer. With them QEMU is given every
 * file it uses as a descriptor, so it never has to reach a path on the host (it runs chrooted
 * into an empty directory, in a network namespace of its own):
 * - sendWithFds(socketFd, data, fds) -> bytes sent: sendmsg with SCM_RIGHTS, for QMP `getfd` and
 *   `add-fd`, which take the descriptors attached to the command that names them;
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
#include <unistd.h>

/* QMP takes one descriptor per command; a few leave room without inviting abuse. */
#define MAX_FDS 4

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
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, "ESENDFDS", errno);
  napi_value result;
  napi_create_int64(env, n, &result);
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
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
