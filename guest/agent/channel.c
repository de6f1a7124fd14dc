/*
 * The channel to the host: a virtio-serial port in production (/dev/vportNpM), or for tests on
 * the host a Unix socket path, an inherited descriptor, or a pty.
 *
 * Input: frames are parsed in place from one static buffer. The agent starts "hunting": it
 * skips bytes until SYNC_MAGIC, so whatever a previous host connection left half-sent is never
 * parsed as a request. A malformed frame (bad magic, length over MAX_PAYLOAD, wrong end byte)
 * sends an E_PROTOCOL error on stream 0 and goes back to hunting; the host resyncs with its
 * 0xFF filler, SYNC_MAGIC and HELLO (docs/agent-protocol.md, "Resynchronization").
 *
 * Output: one growable queue of whole frames, written when the channel is writable. Producers
 * stop at OUT_HIGH_WATER and requests are not read past it, so the queue stays bounded.
 *
 * Disconnection: virtio-serial reports POLLHUP, level-triggered, for as long as no host has the
 * port open, and read() returns 0. The agent then stops polling the port (polling it would
 * return at once, forever) and turns on O_ASYNC: the driver sends SIGIO when the host opens the
 * port, and main.c receives it through its signalfd. A fallback timeout, doubling from 250 ms to
 * 5 s, re-checks the port in case no signal comes; it runs only while disconnected, never while
 * a host is connected and idle. A Unix socket channel is reconnected on the same backoff; an
 * inherited descriptor cannot be, so its end is the agent's end.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

enum { MODE_DEVICE, MODE_SOCKET, MODE_FD };
#define BACKOFF_FIRST_MS 250
#define BACKOFF_MAX_MS 5000
#define OUT_SHRINK_ABOVE (4u * MAX_PAYLOAD) /* an idle queue larger than this is given back */

static int mode;
static int fd = -1;
static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int connected;
static int backoff_ms = BACKOFF_FIRST_MS;

static uint8_t in[2 * FRAME_MAX];
static size_t in_len, in_pos;
static int hunting = 1;
static size_t magic_matched;

static uint8_t *out;
static size_t out_len, out_head, out_cap;
static size_t frame_at;
static uint8_t scratch[FRAME_MAX]; /* where a frame goes when the queue cannot grow: dropped */
static int frame_in_scratch;

static void set_async(int on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return;
  if (on) {
    fcntl(fd, F_SETOWN, getpid());
    fcntl(fd, F_SETFL, flags | O_ASYNC);
  } else {
    fcntl(fd, F_SETFL, flags & ~O_ASYNC);
  }
}

static void reset_input(void) {
  in_len = in_pos = 0;
  hunting = 1;
  magic_matched = 0;
}

static void drop_output(void) {
  out_len = out_head = 0;
  if (out_cap > OUT_SHRINK_ABOVE) {
    free(out);
    out = NULL;
    out_cap = 0;
  }
}

static void mark_connected(void) {
  connected = 1;
  backoff_ms = BACKOFF_FIRST_MS;
  reset_input();
  drop_output();
  if (mode == MODE_DEVICE) set_async(0);
}

/* The host went away: its session ends, processes go on. */
static void lost(const char *why) {
  if (!connected) return;
  fprintf(stderr, "vessel-agent: host disconnected (%s)\n", why);
  connected = 0;
  reset_input();
  drop_output();
  session_reset();
  if (mode == MODE_FD) exit(0); /* nothing to reconnect to */
  if (mode == MODE_SOCKET) {
    close(fd);
    fd = -1;
  } else {
    set_async(1);
  }
}

static int try_socket_connect(void) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path, socket_path, sizeof addr.sun_path);
  if (connect(s, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(s);
    return -1;
  }
  fd = s;
  return 0;
}

/* Device mode: a host is connected when the port does not report POLLHUP. */
static int device_host_present(void) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 0) < 0) return 0;
  return (p.revents & (POLLHUP | POLLERR | POLLNVAL)) == 0;
}

int channel_open_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (S_ISSOCK(st.st_mode)) {
    if (strlen(path) >= sizeof socket_path) {
      errno = ENAMETOOLONG;
      return -1;
    }
    mode = MODE_SOCKET;
    strcpy(socket_path, path);
    if (try_socket_connect() == 0) mark_connected();
    return 0;
  }
  fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  mode = MODE_DEVICE;
  if (isatty(fd)) {
    struct termios t;
    if (tcgetattr(fd, &t) == 0) {
      cfmakeraw(&t);
      tcsetattr(fd, TCSANOW, &t);
    }
  }
  if (device_host_present()) mark_connected();
  else set_async(1);
  return 0;
}

int channel_open_fd(int inherited) {
  int flags = fcntl(inherited, F_GETFL);
  if (flags < 0) return -1;
  fcntl(inherited, F_SETFL, flags | O_NONBLOCK);
  fcntl(inherited, F_SETFD, FD_CLOEXEC);
  fd = inherited;
  mode = MODE_FD;
  mark_connected();
  return 0;
}

void channel_on_sigio(void) { backoff_ms = BACKOFF_FIRST_MS; }

void channel_prepare_poll(int *pfd, short *events, int *timeout_ms) {
  *pfd = -1;
  *events = 0;
  if (!connected) {
    if (mode == MODE_SOCKET ? try_socket_connect() == 0 : device_host_present()) {
      mark_connected();
    } else {
      *timeout_ms = backoff_ms;
      backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
      return;
    }
  }
  *pfd = fd;
  if (in_len < sizeof in && out_has_room()) *events |= POLLIN;
  if (out_head < out_len) *events |= POLLOUT;
}

/* After a read or write that moved nothing: 1 to try again (EINTR), 0 to stop: the channel is
   not ready (EAGAIN), or the host is lost. */
static int retry_io(ssize_t n, const char *zero) {
  if (n < 0 && errno == EINTR) return 1;
  if (n < 0 && errno == EAGAIN) return 0;
  lost(n == 0 ? zero : strerror(errno));
  return 0;
}

static void read_input(void) {
  while (in_len < sizeof in) {
    ssize_t n = read(fd, in + in_len, sizeof in - in_len);
    if (n > 0) in_len += (size_t)n;
    else if (!retry_io(n, "end of file")) return;
  }
}

void channel_handle(short revents) {
  if (!connected) return;
  if (revents & POLLIN) read_input();
  if (!connected) return;
  if ((revents & (POLLHUP | POLLERR | POLLNVAL)) && !(revents & POLLIN)) {
    lost("hang-up");
    return;
  }
  if (revents & POLLOUT) channel_flush();
}

static void protocol_error(const char *what) {
  fprintf(stderr, "vessel-agent: malformed frame from the host (%s); resynchronizing\n", what);
  send_error(0, E_PROTOCOL, 0, "malformed frame (%s); waiting for SYNC_MAGIC", what);
  hunting = 1;
  magic_matched = 0;
  in_pos += 1;
}

static void compact_input(void) {
  if (in_pos == 0) return;
  memmove(in, in + in_pos, in_len - in_pos);
  in_len -= in_pos;
  in_pos = 0;
}

int channel_next_frame(struct frame *f) {
  if (!connected) return 0;
  for (;;) {
    if (hunting) {
      while (in_pos < in_len && magic_matched < SYNC_MAGIC_BYTES) {
        uint8_t b = in[in_pos++];
        if (b == (uint8_t)SYNC_MAGIC[magic_matched]) magic_matched++;
        else magic_matched = b == (uint8_t)SYNC_MAGIC[0];
      }
      if (magic_matched < SYNC_MAGIC_BYTES) {
        compact_input();
        return 0;
      }
      hunting = 0;
      magic_matched = 0;
    }
    size_t avail = in_len - in_pos;
    if (avail < HEADER_BYTES) {
      compact_input();
      return 0;
    }
    const uint8_t *h = in + in_pos;
    uint32_t len = get_u32(h + 8);
    if (h[0] != FRAME_MAGIC || h[3] != 0 || len > MAX_PAYLOAD) {
      protocol_error("bad header");
      continue;
    }
    if (avail < HEADER_BYTES + (size_t)len + 1) {
      compact_input();
      return 0;
    }
    if (h[HEADER_BYTES + len] != FRAME_END) {
      protocol_error("bad end byte");
      continue;
    }
    f->type = h[1];
    f->flags = h[2];
    f->stream = get_u32(h + 4);
    f->len = len;
    f->payload = h + HEADER_BYTES;
    in_pos += HEADER_BYTES + (size_t)len + 1;
    return 1;
  }
}

int out_has_room(void) { return out_len - out_head < OUT_HIGH_WATER; }

uint8_t *frame_begin(uint8_t type, uint8_t flags, uint32_t stream, size_t max_payload) {
  size_t need = HEADER_BYTES + max_payload + 1;
  if (out_head > 0 && (out_head == out_len || out_head > out_cap / 2)) {
    memmove(out, out + out_head, out_len - out_head);
    out_len -= out_head;
    out_head = 0;
  }
  uint8_t *h;
  if (out_len + need > out_cap) {
    size_t cap = out_cap ? out_cap * 2 : 2 * FRAME_MAX;
    while (cap < out_len + need) cap *= 2;
    uint8_t *grown = realloc(out, cap);
    if (grown != NULL) {
      out = grown;
      out_cap = cap;
    }
  }
  frame_in_scratch = out_len + need > out_cap;
  if (frame_in_scratch) {
    fprintf(stderr, "vessel-agent: out of memory, frame dropped\n");
    h = scratch;
  } else {
    frame_at = out_len;
    h = out + out_len;
  }
  h[0] = FRAME_MAGIC;
  h[1] = type;
  h[2] = flags;
  h[3] = 0;
  put_u32(h + 4, stream);
  return h + HEADER_BYTES;
}

void frame_commit(size_t payload_len) {
  if (frame_in_scratch) return;
  uint8_t *h = out + frame_at;
  put_u32(h + 8, (uint32_t)payload_len);
  h[HEADER_BYTES + payload_len] = FRAME_END;
  out_len = frame_at + HEADER_BYTES + payload_len + 1;
}

void send_frame(uint8_t type, uint8_t flags, uint32_t stream, const void *payload, size_t len) {
  uint8_t *p = frame_begin(type, flags, stream, len);
  if (len > 0) memcpy(p, payload, len);
  frame_commit(len);
}

void send_end(uint32_t stream, const void *payload, size_t len) { send_frame(R_END, 0, stream, payload, len); }

void send_window(uint32_t stream, uint32_t increment) {
  uint8_t p[4];
  put_u32(p, increment);
  send_frame(T_WINDOW, 0, stream, p, sizeof p);
}

void send_error(uint32_t stream, int kind, int err, const char *fmt, ...) {
  uint8_t *p = frame_begin(R_ERROR, 0, stream, 8 + MAX_ERROR_TEXT + 1);
  put_u16(p, (uint16_t)kind);
  put_u16(p + 2, 0);
  put_u32(p + 4, (uint32_t)err);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf((char *)p + 8, MAX_ERROR_TEXT + 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n > (int)MAX_ERROR_TEXT) n = MAX_ERROR_TEXT;
  frame_commit(8 + (size_t)n);
}

int payload_size_ok(uint32_t stream, const char *what, size_t n, size_t min, size_t max) {
  if (n >= min && n <= max) return 1;
  if (min == max) send_error(stream, E_BAD_REQUEST, 0, "%s payload must be %zu bytes, not %zu", what, min, n);
  else send_error(stream, E_BAD_REQUEST, 0, "%s payload of %zu bytes is outside [%zu, %zu]", what, n, min, max);
  return 0;
}

void channel_flush(void) {
  if (!connected) {
    drop_output();
    return;
  }
  while (out_head < out_len) {
    ssize_t n = write(fd, out + out_head, out_len - out_head);
    if (n > 0) out_head += (size_t)n;
    else if (!retry_io(n, "write returned 0")) return;
  }
  out_len = out_head = 0;
  if (out_cap > OUT_SHRINK_ABOVE) drop_output();
}

/* Before a power-off: give what is queued (the reply) a moment to reach the host. */
void channel_flush_blocking(int timeout_ms) {
  while (connected && out_head < out_len) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, timeout_ms) <= 0) return;
    channel_flush();
  }
}
