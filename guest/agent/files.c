/*
 * Files. Paths are absolute. A read streams the file's raw bytes as DATA within the host's
 * credit; a write takes the host's DATA as it comes, writes it at once (a regular file never
 * makes write(2) wait on anyone but the disk), grants the credit back, and on the final DATA
 * (FLAG_EOF) makes the file durable before it answers: fsync of the file, close (whose error
 * counts, ENOSPC included), then fsync of every directory from its parent up to /.
 *
 * A write replaces the file's contents in place (O_TRUNC), as `cat > file` does: an aborted
 * write leaves a partial file, but an acknowledged one is whole and on disk.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { WRITE_MKDIRS = 1 };
enum { STAT_NOFOLLOW = 1 };
enum { MKDIR_PARENTS = 1 };
enum { REMOVE_RECURSIVE = 1 };
#define STAT_BYTES 32
#define DIRENT_FIXED 24
#define DIRENT_MAX (DIRENT_FIXED + NAME_MAX) /* a frame is sent once this much credit is there */
#define NFTW_OPEN_DIRS 16                    /* descriptors a recursive remove keeps open */

enum { FT_OTHER = 0, FT_FILE, FT_DIR, FT_SYMLINK, FT_CHAR, FT_BLOCK, FT_FIFO, FT_SOCKET };

static uint8_t file_type(mode_t m) {
  if (S_ISREG(m)) return FT_FILE;
  if (S_ISDIR(m)) return FT_DIR;
  if (S_ISLNK(m)) return FT_SYMLINK;
  if (S_ISCHR(m)) return FT_CHAR;
  if (S_ISBLK(m)) return FT_BLOCK;
  if (S_ISFIFO(m)) return FT_FIFO;
  if (S_ISSOCK(m)) return FT_SOCKET;
  return FT_OTHER;
}

static uint64_t mtime_ns(const struct stat *st) {
  return (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
}

static void send_stat(uint32_t sid, const struct stat *st) {
  uint8_t b[STAT_BYTES] = {0};
  b[0] = file_type(st->st_mode);
  put_u32(b + 4, (uint32_t)(st->st_mode & 07777));
  put_u32(b + 8, (uint32_t)st->st_uid);
  put_u32(b + 12, (uint32_t)st->st_gid);
  put_u64(b + 16, (uint64_t)st->st_size);
  put_u64(b + 24, mtime_ns(st));
  send_frame(R_STAT, 0, sid, b, sizeof b);
}

char *request_path(uint32_t sid, const char *what, const uint8_t *p, size_t n, size_t fixed) {
  static char path[PATH_MAX];
  if (!payload_size_ok(sid, what, n, fixed + 1, fixed + sizeof path - 1)) return NULL;
  p += fixed;
  n -= fixed;
  if (memchr(p, 0, n) != NULL || p[0] != '/') {
    send_error(sid, E_BAD_REQUEST, 0, "%s: the path must be absolute, without NUL", what);
    return NULL;
  }
  memcpy(path, p, n);
  path[n] = '\0';
  return path;
}

/* mkdir -p: every missing directory on the way, each made with `mode`. */
static int mkdir_parents(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, len + 1);
  for (char *at = buf + 1;; at++) {
    if (*at != '/' && *at != '\0') continue;
    char saved = *at;
    *at = '\0';
    if (mkdir(buf, mode) != 0 && errno != EEXIST) return -1;
    *at = saved;
    if (saved == '\0') break;
  }
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* fsync of each directory from the file's parent up to the root. */
static int fsync_ancestors(const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (;;) {
    char *slash = strrchr(buf, '/');
    if (slash == NULL) return 0;
    if (slash == buf) slash[1] = '\0';
    else *slash = '\0';
    int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) {
      errno = e;
      return -1;
    }
    if (slash == buf) return 0;
  }
}

/* Opens a regular file; O_NONBLOCK so that a FIFO cannot make the open wait for a peer. */
static int open_regular(uint32_t sid, const char *path, int flags, mode_t mode) {
  int fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
  if (fd < 0) {
    send_error(sid, E_ERRNO, errno, "open '%s'", path);
    return -1;
  }
  struct stat st;
  int e = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  if (e != 0) {
    close(fd);
    send_error(sid, E_ERRNO, e, "'%s' is not a regular file", path);
    return -1;
  }
  fcntl(fd, F_SETFL, 0); /* O_NONBLOCK off again */
  return fd;
}

void file_read_open(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "READ_FILE", p, n, 16);
  if (path == NULL) return;
  uint32_t window = get_u32(p);
  uint64_t offset = get_u64(p + 8);
  int fd = open_regular(sid, path, O_RDONLY, 0);
  if (fd < 0) return;
  struct stat st;
  fstat(fd, &st);
  if (offset > 0 && lseek(fd, (off_t)offset, SEEK_SET) < 0) {
    send_error(sid, E_ERRNO, errno, "seek");
    close(fd);
    return;
  }
  struct stream *s = stream_open(sid, SK_READ_FILE, window);
  if (s == NULL) {
    close(fd);
    return;
  }
  s->u.rf.fd = fd;
  send_stat(sid, &st);
}

int file_read_pump(struct stream *s) {
  int sent = 0;
  while (s->credit > 0 && out_has_room()) {
    size_t want = s->credit < MAX_PAYLOAD ? (size_t)s->credit : MAX_PAYLOAD;
    uint8_t *b = frame_begin(T_DATA, 0, s->id, want);
    ssize_t got = read(s->u.rf.fd, b, want);
    if (got < 0 && errno == EINTR) continue; /* the frame begun is simply not committed */
    if (got > 0) {
      frame_commit((size_t)got);
      s->credit -= (uint64_t)got;
      sent = 1;
      continue;
    }
    return stream_finish(s, got == 0 ? 0 : errno, "read");
  }
  return sent;
}

void file_write_open(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "WRITE_FILE", p, n, 8);
  if (path == NULL) return;
  uint32_t flags = get_u32(p), mode = get_u32(p + 4);
  if (flags & WRITE_MKDIRS) {
    char *slash = strrchr(path, '/');
    if (slash != path) {
      *slash = '\0';
      int rc = mkdir_parents(path, 0755);
      int e = errno;
      *slash = '/';
      if (rc != 0) {
        send_error(sid, E_ERRNO, e, "cannot create the parents of '%s'", path);
        return;
      }
    }
  }
  int fd = open_regular(sid, path, O_WRONLY | O_CREAT | O_TRUNC, mode ? (mode_t)(mode & 07777) : 0644);
  if (fd < 0) return;
  char *copy = strdup(path);
  struct stream *s = copy ? stream_open(sid, SK_WRITE_FILE, 0) : NULL;
  if (s == NULL) {
    if (copy == NULL) send_error(sid, E_ERRNO, ENOMEM, "WRITE_FILE");
    free(copy);
    close(fd);
    return;
  }
  s->u.wf.fd = fd;
  s->u.wf.path = copy;
  send_window(sid, FILE_WINDOW);
}

void file_write_data(struct stream *s, const struct frame *f) {
  size_t done = 0;
  while (done < f->len) {
    ssize_t put = write(s->u.wf.fd, f->payload + done, f->len - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      send_error(s->id, E_ERRNO, put < 0 ? errno : EIO, "write '%s'", s->u.wf.path);
      stream_close(s);
      return;
    }
    done += (size_t)put;
  }
  s->u.wf.size += f->len;
  s->u.wf.ungranted += f->len;
  if (!(f->flags & FLAG_EOF)) {
    if (s->u.wf.ungranted >= FILE_WINDOW / 4) {
      send_window(s->id, s->u.wf.ungranted);
      s->u.wf.ungranted = 0;
    }
    return;
  }
  const char *step = "fsync";
  int rc = fsync(s->u.wf.fd);
  int fd = s->u.wf.fd;
  s->u.wf.fd = -1;
  if (close(fd) != 0 && rc == 0) {
    rc = -1;
    step = "close";
  }
  if (rc == 0 && fsync_ancestors(s->u.wf.path) != 0) {
    rc = -1;
    step = "fsync of a parent directory";
  }
  if (rc != 0) {
    send_error(s->id, E_ERRNO, errno, "%s of '%s'", step, s->u.wf.path);
  } else {
    uint8_t size[8];
    put_u64(size, s->u.wf.size);
    send_end(s->id, size, sizeof size);
  }
  stream_close(s);
}

void file_stat(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "STAT", p, n, 4);
  if (path == NULL) return;
  uint32_t flags = get_u32(p);
  struct stat st;
  if ((flags & STAT_NOFOLLOW ? lstat(path, &st) : stat(path, &st)) != 0) {
    send_error(sid, E_ERRNO, errno, "stat '%s'", path);
    return;
  }
  send_stat(sid, &st);
  send_end(sid, NULL, 0);
}

void dir_list_open(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "LIST_DIR", p, n, 4);
  if (path == NULL) return;
  uint32_t window = get_u32(p);
  DIR *d = opendir(path);
  if (d == NULL) {
    send_error(sid, E_ERRNO, errno, "opendir '%s'", path);
    return;
  }
  struct stream *s = stream_open(sid, SK_LIST_DIR, window);
  if (s == NULL) {
    closedir(d);
    return;
  }
  s->u.ld.dir = d;
}

static uint8_t dirent_type(unsigned char d_type) {
  switch (d_type) {
  case DT_REG: return FT_FILE;
  case DT_DIR: return FT_DIR;
  case DT_LNK: return FT_SYMLINK;
  case DT_CHR: return FT_CHAR;
  case DT_BLK: return FT_BLOCK;
  case DT_FIFO: return FT_FIFO;
  case DT_SOCK: return FT_SOCKET;
  default: return FT_OTHER;
  }
}

int dir_list_pump(struct stream *s) {
  int sent = 0;
  while (s->credit >= DIRENT_MAX && out_has_room()) {
    size_t cap = s->credit < MAX_PAYLOAD ? (size_t)s->credit : MAX_PAYLOAD;
    uint8_t *b = frame_begin(R_DIR, 0, s->id, cap);
    size_t used = 0;
    int done = 0, err = 0;
    while (used + DIRENT_MAX <= cap) {
      errno = 0;
      struct dirent *e = readdir(s->u.ld.dir);
      if (e == NULL) {
        done = 1;
        err = errno;
        break;
      }
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      size_t name_len = strlen(e->d_name);
      struct stat st;
      uint8_t *at = b + used;
      memset(at, 0, DIRENT_FIXED);
      if (fstatat(dirfd(s->u.ld.dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        at[0] = file_type(st.st_mode);
        put_u32(at + 4, (uint32_t)(st.st_mode & 07777));
        put_u64(at + 8, (uint64_t)st.st_size);
        put_u64(at + 16, mtime_ns(&st));
      } else {
        at[0] = dirent_type(e->d_type); /* gone since readdir: what readdir said */
      }
      put_u16(at + 2, (uint16_t)name_len);
      memcpy(at + DIRENT_FIXED, e->d_name, name_len);
      used += DIRENT_FIXED + name_len;
    }
    if (used > 0) {
      frame_commit(used);
      s->credit -= used;
      sent = 1;
    }
    if (done) return stream_finish(s, err, "readdir");
  }
  return sent;
}

void file_mkdir(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "MKDIR", p, n, 8);
  if (path == NULL) return;
  uint32_t flags = get_u32(p), mode = get_u32(p + 4);
  mode_t m = mode ? (mode_t)(mode & 07777) : 0755;
  if ((flags & MKDIR_PARENTS ? mkdir_parents(path, m) : mkdir(path, m)) != 0) send_error(sid, E_ERRNO, errno, "mkdir '%s'", path);
  else send_end(sid, NULL, 0);
}

static int remove_errno;
static char remove_failed[PATH_MAX];

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (type == FTW_DNR || type == FTW_NS || remove(path) != 0) {
    remove_errno = type == FTW_DNR || type == FTW_NS ? EACCES : errno;
    snprintf(remove_failed, sizeof remove_failed, "%s", path);
    return 1;
  }
  return 0;
}

void file_remove(uint32_t sid, const uint8_t *p, size_t n) {
  char *path = request_path(sid, "REMOVE", p, n, 4);
  if (path == NULL) return;
  uint32_t flags = get_u32(p);
  if (strcmp(path, "/") == 0) {
    send_error(sid, E_BAD_REQUEST, 0, "refusing to remove /");
    return;
  }
  struct stat st;
  if (lstat(path, &st) != 0) {
    send_error(sid, E_ERRNO, errno, "remove '%s'", path);
    return;
  }
  int rc;
  if ((flags & REMOVE_RECURSIVE) && S_ISDIR(st.st_mode)) {
    /* Depth first, not following symbolic links, not crossing into other file systems. */
    remove_errno = 0;
    rc = nftw(path, remove_one, NFTW_OPEN_DIRS, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (rc != 0 && remove_errno != 0) {
      send_error(sid, E_ERRNO, remove_errno, "remove '%s'", remove_failed);
      return;
    }
  } else {
    rc = remove(path);
  }
  if (rc != 0) send_error(sid, E_ERRNO, errno, "remove '%s'", path);
  else send_end(sid, NULL, 0);
}
