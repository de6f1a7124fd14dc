/*
 * A fork's identity, applied in the agent itself (no process is spawned), with the semantics of
 * the former guest/vessel-identity.c:
 *
 * A fork starts as an exact copy of its checkpoint, kernel random state included: writing bytes
 * to /dev/urandom only mixes them into the input pool, and the kernel's CRNG would go on from its
 * copied key for up to a minute, so every fork of one checkpoint would draw the same "random"
 * bytes. So the entropy goes first, credited with RNDADDENTROPY and made to count at once with
 * RNDRESEEDCRNG; nothing after it draws on the CRNG. Then the clock (clock_settime, unless 0),
 * then the hostname (sethostname, unless empty) with /run/vessel/hosts rewritten whole under a
 * temporary name and renamed, so a reader never sees half of it (/etc/hosts links there). The
 * first step that fails stops the rest and is named in the ERROR.
 *
 * Also here: shutdown (every other process asked to stop, sync, root remounted read-only,
 * reboot(2)), the other thing that must not run in a test on the host.
 *
 * Built with -DVESSEL_AGENT_TEST_STUBS (test builds only, never the image), the system calls
 * become lines in $VESSEL_AGENT_STUB_DIR/calls.log and the hosts file goes to that directory,
 * so the host running the tests keeps its clock, hostname and power.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

#define IDENTITY_FIXED_BYTES 12
#define MAX_ENTROPY_BYTES 256 /* what one RNDADDENTROPY takes here, as before */
#define MAX_HOSTNAME 64       /* the kernel's HOST_NAME_MAX */
#define SHUTDOWN_GRACE_POLLS 20 /* 50 ms each: how long the other processes get to exit */
enum { SHUTDOWN_REBOOT = 1 };

#ifndef VESSEL_AGENT_TEST_STUBS

static const char *hosts_file(void) { return "/run/vessel/hosts"; }

static int sys_reseed(const uint8_t *bytes, size_t n) {
  struct {
    struct rand_pool_info info;
    uint8_t bytes[MAX_ENTROPY_BYTES];
  } req;
  memcpy(req.info.buf, bytes, n);
  req.info.buf_size = (int)n;
  req.info.entropy_count = (int)(n * 8);
  int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = ioctl(fd, RNDADDENTROPY, &req.info);
  if (rc == 0) rc = ioctl(fd, RNDRESEEDCRNG);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

static int sys_set_clock(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
  return clock_settime(CLOCK_REALTIME, &ts);
}

static int sys_set_hostname(const char *name, size_t len) { return sethostname(name, len); }

/* Processes other than init and this one that are still there (kernel threads have no cmdline). */
static int others_alive(void) {
  DIR *d = opendir("/proc");
  if (d == NULL) return 0;
  int alive = 0;
  struct dirent *e;
  while (!alive && (e = readdir(d)) != NULL) {
    long pid = atol(e->d_name);
    if (pid <= 1 || pid == (long)getpid()) continue;
    char path[64], c;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    alive = read(fd, &c, 1) == 1;
    close(fd);
  }
  closedir(d);
  return alive;
}

static void sys_power(int reboot_instead) {
  kill(-1, SIGTERM); /* everyone but init and the caller */
  for (int i = 0; i < SHUTDOWN_GRACE_POLLS && others_alive(); i++) usleep(50000);
  sync();
  mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL);
  reboot(reboot_instead ? RB_AUTOBOOT : RB_POWER_OFF);
}

#else

static void stub_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void stub_log(const char *fmt, ...) {
  char path[512];
  const char *dir = getenv("VESSEL_AGENT_STUB_DIR");
  snprintf(path, sizeof path, "%s/calls.log", dir ? dir : "/tmp");
  FILE *f = fopen(path, "a");
  if (f == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static const char *hosts_file(void) {
  static char path[512];
  const char *dir = getenv("VESSEL_AGENT_STUB_DIR");
  snprintf(path, sizeof path, "%s/hosts", dir ? dir : "/tmp");
  return path;
}

static int stub_fails(const char *step) {
  const char *fail = getenv("VESSEL_AGENT_STUB_FAIL");
  if (fail == NULL || strcmp(fail, step) != 0) return 0;
  errno = EPERM;
  return 1;
}

static int sys_reseed(const uint8_t *bytes, size_t n) {
  char hex[2 * MAX_ENTROPY_BYTES + 1];
  for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
  stub_log("reseed %zu %s", n, hex);
  return stub_fails("reseed") ? -1 : 0;
}

static int sys_set_clock(uint64_t ns) {
  stub_log("clock %llu", (unsigned long long)ns);
  return stub_fails("clock") ? -1 : 0;
}

static int sys_set_hostname(const char *name, size_t len) {
  stub_log("hostname %.*s", (int)len, name);
  return stub_fails("hostname") ? -1 : 0;
}

static void sys_power(int reboot_instead) { stub_log("power %s", reboot_instead ? "reboot" : "off"); }

#endif

static int valid_hostname(const uint8_t *name, size_t len) {
  if (len == 0 || len > MAX_HOSTNAME) return 0;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_')) return 0;
  }
  return 1;
}

static int replace_file(const char *path, const char *text) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  ssize_t n = write(fd, text, len);
  int e = errno;
  if (close(fd) != 0 || n != (ssize_t)len) {
    errno = n < 0 ? e : EIO;
    return -1;
  }
  return rename(tmp, path);
}

void identity_apply(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "IDENTITY", n, IDENTITY_FIXED_BYTES, MAX_PAYLOAD)) return;
  uint64_t clock_ns = get_u64(p);
  size_t name_len = get_u16(p + 8), entropy_len = get_u16(p + 10);
  const uint8_t *name = p + IDENTITY_FIXED_BYTES, *entropy = name + name_len;
  if (n != IDENTITY_FIXED_BYTES + name_len + entropy_len) {
    send_error(sid, E_BAD_REQUEST, 0, "IDENTITY lengths do not match its payload");
    return;
  }
  if (entropy_len == 0 || entropy_len > MAX_ENTROPY_BYTES) {
    send_error(sid, E_BAD_REQUEST, 0, "IDENTITY needs 1 to %d bytes of entropy", MAX_ENTROPY_BYTES);
    return;
  }
  if (clock_ns > (uint64_t)INT64_MAX) {
    send_error(sid, E_BAD_REQUEST, 0, "IDENTITY clock out of range");
    return;
  }
  if (name_len > 0 && !valid_hostname(name, name_len)) {
    send_error(sid, E_BAD_REQUEST, 0, "IDENTITY hostname must be 1 to %d of [A-Za-z0-9._-]", MAX_HOSTNAME);
    return;
  }
  if (sys_reseed(entropy, entropy_len) != 0) {
    send_error(sid, E_ERRNO, errno, "entropy (RNDADDENTROPY, RNDRESEEDCRNG)");
    return;
  }
  if (clock_ns > 0 && sys_set_clock(clock_ns) != 0) {
    send_error(sid, E_ERRNO, errno, "clock_settime");
    return;
  }
  if (name_len > 0) {
    char hostname[MAX_HOSTNAME + 1], hosts[256];
    memcpy(hostname, name, name_len);
    hostname[name_len] = '\0';
    if (sys_set_hostname(hostname, name_len) != 0) {
      send_error(sid, E_ERRNO, errno, "sethostname");
      return;
    }
    snprintf(hosts, sizeof hosts, "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n", hostname);
    if (replace_file(hosts_file(), hosts) != 0) {
      send_error(sid, E_ERRNO, errno, "rewrite %s", hosts_file());
      return;
    }
  }
  send_end(sid, NULL, 0);
}

void shutdown_guest(uint32_t sid, const uint8_t *p, size_t n) {
  if (!payload_size_ok(sid, "SHUTDOWN", n, 4, 4)) return;
  send_end(sid, NULL, 0);
  channel_flush_blocking(500);
  sys_power((get_u32(p) & SHUTDOWN_REBOOT) != 0);
}
