/*
 * Two socket calls Node does not offer, for the egress gateway (DESIGN.md, network gateway):
 * - originalDst(fd) -> { address, port }: the destination a TCP connection had before an
 *   nftables `redirect` rewrote it, from getsockopt(SOL_IP, SO_ORIGINAL_DST);
 * - peek(fd, max) -> Buffer | null: the bytes waiting on a socket without consuming them
 *   (recv with MSG_PEEK | MSG_DONTWAIT; null when none yet, empty at end of stream), so the
 *   gateway can read a ClientHello or request head and still hand the untouched socket to
 *   Node's native TLS or HTTP machinery;
 * - relay(fdA, fdB, tag), closeRelays(tag), relayEvents(callback): see relay_thread.c.
 */
#include <node_api.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
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

void register_relay(napi_env env, napi_value exports);

static napi_value init(napi_env env, napi_value exports) {
  register_relay(env, exports);
  napi_value fn;
  napi_create_function(env, "originalDst", NAPI_AUTO_LENGTH, original_dst, NULL, &fn);
  napi_set_named_property(env, exports, "originalDst", fn);
  napi_create_function(env, "peek", NAPI_AUTO_LENGTH, peek, NULL, &fn);
  napi_set_named_property(env, exports, "peek", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
