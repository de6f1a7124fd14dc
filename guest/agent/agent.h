/*
 * vessel-agent: the guest side of the Vessel agent protocol (docs/agent-protocol.md).
 *
 * One thread, one poll(2) loop, non-blocking descriptors, every buffer bounded. The host drives
 * the agent (the guest trusts its host); what the agent sends is hostile to the host, which
 * checks every frame. The files split the work:
 *   channel.c  the virtio-serial (or test) channel: framing, resync, the output queue
 *   ring.c     bounded output rings addressed by absolute byte offsets
 *   proc.c     processes: spawn (pipes or a PTY), output, stdin, signals, exit, listing
 *   files.c    file read/write streams, stat, directory listing, mkdir -p, remove
 *   identity.c fork identity (entropy + CRNG reseed, clock, hostname) and shutdown
 *   main.c     arguments, the stream table, request dispatch and the main loop
 */
#ifndef VESSEL_AGENT_H
#define VESSEL_AGENT_H

#define _GNU_SOURCE
#include <dirent.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- Wire format: the constants shared with the host are generated from src/vm/agent/protocol.ts
   into protocol.h (`npm run generate:agent-protocol`). ---- */
#include "protocol.h"
#define FRAME_MAX (HEADER_BYTES + MAX_PAYLOAD + 1)

/* ---- Limits: each one says what it protects. ---- */
#define MAX_STREAMS 256                 /* concurrent streams: the stream table is fixed */
#define MAX_PROCS 128                   /* processes kept (running or exited, until forgotten) */
#define RING_DEFAULT (64u * 1024)       /* per output channel when SPAWN asks for 0 */
#define RING_MIN (4u * 1024)            /* the least a ring gets, even past RINGS_TOTAL_MAX */
#define RING_MAX (4u * 1024 * 1024)     /* the most one output channel retains */
#define RINGS_TOTAL_MAX (64u * 1024 * 1024) /* all rings' capacities together: the guest's memory */
#define STDIN_BUFFER (64u * 1024)       /* stdin bytes held per process; the host's stdin credit */
#define FILE_WINDOW (1024u * 1024)      /* credit for a file being written (written synchronously) */
#define OUT_HIGH_WATER (256u * 1024)    /* output queue above which the agent stops producing
                                           frames and stops reading requests */
#define MAX_CREDIT (64ull * 1024 * 1024) /* credit the host may have outstanding on one stream */
#define CMD_SUMMARY 256                 /* bytes of command line kept for the process list */
#define MAX_ERROR_TEXT 200              /* bytes of message in an ERROR frame */
#define READ_CHUNK 65536u               /* one read from a process pipe or a file */

static inline void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* ---- Frames as received: valid until the next channel_next_frame(). ---- */
struct frame {
  uint8_t type, flags;
  uint32_t stream;
  uint32_t len;
  const uint8_t *payload;
};

/* ---- Streams (main.c owns the table). ---- */
enum stream_kind { SK_FREE = 0, SK_PROC, SK_READ_FILE, SK_WRITE_FILE, SK_LIST_DIR };

struct proc;
struct stream {
  uint32_t id;
  int kind;
  uint64_t credit; /* payload bytes the host still accepts on this stream */
  union {
    struct {
      struct proc *p;
      uint64_t pos[2];   /* next offset to send, per channel (stdout, stderr) */
      uint64_t until[2]; /* without FOLLOW: where this stream ends; UINT64_MAX with it */
      int spawned;       /* the SPAWN stream itself (FORGET_ON_EXIT applies to it) */
    } proc;
    struct {
      int fd;
    } rf;
    struct {
      int fd;
      uint64_t size;
      uint32_t ungranted;
      char *path;
    } wf;
    struct {
      DIR *dir;
    } ld;
  } u;
};

struct stream *stream_find(uint32_t id);
void stream_close(struct stream *s); /* frees what it holds; sends nothing */
struct stream *stream_each(int *cursor); /* iterates live streams */

/* ---- channel.c ---- */
int channel_open_path(const char *path);
int channel_open_fd(int fd);
void channel_prepare_poll(int *fd, short *events, int *timeout_ms);
void channel_handle(short revents);
void channel_on_sigio(void);
int channel_next_frame(struct frame *f);
void channel_flush(void);
void channel_flush_blocking(int timeout_ms);
int out_has_room(void);
uint8_t *frame_begin(uint8_t type, uint8_t flags, uint32_t stream, size_t max_payload);
void frame_commit(size_t payload_len);
void send_frame(uint8_t type, uint8_t flags, uint32_t stream, const void *payload, size_t len);
void send_end(uint32_t stream, const void *payload, size_t len);
void send_window(uint32_t stream, uint32_t increment);
void send_error(uint32_t stream, int kind, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* 1 if a `what` payload of n bytes is within [min, max]; otherwise sends E_BAD_REQUEST, 0. */
int payload_size_ok(uint32_t stream, const char *what, size_t n, size_t min, size_t max);
/* Ends a stream that produced data: END, or ERROR naming `what` when err is set. Returns 1. */
int stream_finish(struct stream *s, int err, const char *what);

/* main.c: the channel reports a new session (HELLO) or a lost host. */
void session_reset(void);

/* ---- proc.c ---- */
void proc_init(void);
void proc_spawn(uint32_t stream, const uint8_t *p, size_t n);
void proc_attach(uint32_t stream, const uint8_t *p, size_t n);
void proc_signal(uint32_t stream, const uint8_t *p, size_t n);
void proc_resize(uint32_t stream, const uint8_t *p, size_t n);
void proc_list(uint32_t stream);
void proc_forget(uint32_t stream, const uint8_t *p, size_t n);
void proc_input(struct stream *s, const struct frame *f);
int proc_stream_pump(struct stream *s); /* returns 1 if it sent anything */
void proc_stream_detached(struct stream *s);
void proc_reap(void);
/* poll integration: proc_poll_fds fills up to max entries and returns how many */
int proc_poll_fds(struct pollfd *pfd, int max, void **tags);
void proc_handle_fd(void *tag, short revents);
uint64_t now_ns(void);

/* ---- files.c ---- */
void file_read_open(uint32_t stream, const uint8_t *p, size_t n);
int file_read_pump(struct stream *s);
void file_write_open(uint32_t stream, const uint8_t *p, size_t n);
void file_write_data(struct stream *s, const struct frame *f);
void file_stat(uint32_t stream, const uint8_t *p, size_t n);
void dir_list_open(uint32_t stream, const uint8_t *p, size_t n);
int dir_list_pump(struct stream *s);
void file_mkdir(uint32_t stream, const uint8_t *p, size_t n);
void file_remove(uint32_t stream, const uint8_t *p, size_t n);
/* The path after `fixed` bytes of a `what` request: absolute, no NUL inside. NULL (and an
   E_BAD_REQUEST sent) if the payload is shorter or the path is not one. */
char *request_path(uint32_t stream, const char *what, const uint8_t *p, size_t n, size_t fixed);

/* ---- identity.c ---- */
void identity_apply(uint32_t stream, const uint8_t *p, size_t n);
void shutdown_guest(uint32_t stream, const uint8_t *p, size_t n);

/* main.c: a new stream of a kind with the host's initial credit (capped at MAX_CREDIT), or NULL
   (and an ERROR sent) when the table is full or the id is already in use. */
struct stream *stream_open(uint32_t id, int kind, uint32_t window);

#endif
