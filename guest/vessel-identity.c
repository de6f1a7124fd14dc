/*
 * vessel-identity: gives a forked VM its own identity.
 *
 * A fork starts as an exact copy of its checkpoint, kernel random state included: writing bytes
 * to /dev/urandom only mixes them into the input pool, and the kernel's CRNG would go on from its
 * copied key for up to a minute, so every fork of one checkpoint would draw the same "random"
 * bytes. Only RNDRESEEDCRNG makes the new entropy count at once, and that is an ioctl, which the
 * guest agent cannot issue; setting the clock through the agent (guest-set-time) forks and runs
 * hwclock, which costs ~90 ms in a fork whose translation cache is cold.
 *
 * So vessel-init starts this small static program at boot, and it waits on a FIFO, using no CPU,
 * in every checkpoint and every fork. The host writes one line to it through the guest agent:
 *
 *     <request id> <unix time in ns, or 0 to leave the clock> <hostname, or - to leave it> <entropy in hex>
 *
 * and it credits the entropy, reseeds the CRNG, sets the clock and the hostname, rewrites
 * /run/vessel/hosts (/etc/hosts links there), then writes "<request id> ok" (or "failed") to
 * /run/vessel/identity.done, which the host reads back before the VM counts as running. After a
 * pause, which stops the guest's clock, the host sends the time alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define FIFO "/run/vessel/identity"
#define DONE "/run/vessel/identity.done"
#define HOSTS "/run/vessel/hosts"
#define MAX_ENTROPY_BYTES 256
#define MAX_LINE 1024

/* Written whole under a temporary name and renamed, so a reader never sees half of it. */
static int replace_file(const char *path, const char *text) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  ssize_t n = write(fd, text, len);
  close(fd);
  if (n != (ssize_t)len) return -1;
  return rename(tmp, path);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

static int reseed(const char *hex) {
  struct {
    struct rand_pool_info info;
    unsigned char bytes[MAX_ENTROPY_BYTES];
  } req;
  size_t len = strlen(hex);
  if (len == 0 || len % 2 != 0 || len / 2 > MAX_ENTROPY_BYTES) return -1;
  unsigned char *out = (unsigned char *)req.info.buf;
  for (size_t i = 0; i < len / 2; i++) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  req.info.buf_size = (int)(len / 2);
  req.info.entropy_count = (int)(len / 2 * 8);
  int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = ioctl(fd, RNDADDENTROPY, &req.info);
  if (rc == 0) rc = ioctl(fd, RNDRESEEDCRNG);
  close(fd);
  return rc;
}

static int valid_hostname(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len > 64) return 0;
  for (const char *c = name; *c; c++) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.' || *c == '_')) return 0;
  }
  return 1;
}

static void apply(char *line) {
  char *save = NULL;
  char *id = strtok_r(line, " ", &save);
  char *ns = strtok_r(NULL, " ", &save);
  char *name = strtok_r(NULL, " ", &save);
  char *entropy = strtok_r(NULL, " ", &save);
  if (id == NULL || ns == NULL || name == NULL || entropy == NULL || strlen(id) > 64) return;
  /* The entropy goes first: nothing else this does draws on the CRNG. */
  int ok = reseed(entropy) == 0;
  char *end = NULL;
  long long when = strtoll(ns, &end, 10);
  if (*end != '\0' || when < 0) ok = 0;
  if (ok && when > 0) {
    struct timespec ts = {.tv_sec = when / 1000000000LL, .tv_nsec = when % 1000000000LL};
    ok = clock_settime(CLOCK_REALTIME, &ts) == 0;
  }
  int rename_host = strcmp(name, "-") != 0;
  if (ok && rename_host) ok = valid_hostname(name) && sethostname(name, strlen(name)) == 0;
  if (ok && rename_host) {
    char hosts[256];
    snprintf(hosts, sizeof hosts, "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n", name);
    ok = replace_file(HOSTS, hosts) == 0;
  }
  char done[96];
  snprintf(done, sizeof done, "%s %s\n", id, ok ? "ok" : "failed");
  replace_file(DONE, done);
}

int main(void) {
  /* Read-write: the FIFO then always has a writer, so reads block between requests instead of
     returning end-of-file each time the agent closes its end. vessel-init made the FIFO. */
  int fd = open(FIFO, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    perror("vessel-identity: " FIFO);
    return 1;
  }
  char buf[MAX_LINE];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 1;
    have += (size_t)n;
    char *nl;
    while ((nl = memchr(buf, '\n', have)) != NULL) {
      *nl = '\0';
      size_t used = (size_t)(nl - buf) + 1;
      apply(buf);
      memmove(buf, buf + used, have - used);
      have -= used;
    }
    if (have == sizeof buf - 1) have = 0; /* a line this long is no request: dropped */
  }
}
