/*
 * Output rings. Each output channel of a process keeps its most recent bytes, at most `cap`, and
 * numbers every byte it was ever given by an absolute offset: [start, end) is what is retained,
 * and `end` is how much the process has written in all. When the ring is full the oldest bytes
 * go and `start` moves on; offsets keep counting, so a reader asking for an offset below `start`
 * is told its bytes are gone (E_OUT_OF_RANGE), and a following reader sees the jump.
 *
 * The buffer grows as output arrives (doubling, from 4 KiB) up to `cap`, so a process that
 * prints a line costs a few KiB, not its whole ring.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#define RING_FIRST_ALLOC 4096u

static void grow(struct ring *r, size_t want) {
  size_t used = (size_t)(r->end - r->start);
  size_t size = r->alloc ? r->alloc : RING_FIRST_ALLOC;
  while (size < want) size *= 2;
  if (size > r->cap) size = r->cap;
  if (size <= r->alloc) return;
  uint8_t *buf = malloc(size);
  if (buf == NULL) return; /* keep what we have; ring_write drops to fit */
  if (used > 0) {
    size_t first = r->alloc - r->head < used ? r->alloc - r->head : used;
    memcpy(buf, r->buf + r->head, first);
    memcpy(buf + first, r->buf, used - first);
  }
  free(r->buf);
  r->buf = buf;
  r->alloc = size;
  r->head = 0;
}

void ring_write(struct ring *r, const uint8_t *p, size_t n) {
  if (n > r->cap) { /* only the last cap bytes can be kept */
    r->end += n - r->cap;
    r->start = r->end;
    r->head = 0;
    p += n - r->cap;
    n = r->cap;
  }
  size_t used = (size_t)(r->end - r->start);
  if (used + n > r->alloc) grow(r, used + n);
  if (n > r->alloc) { /* could not grow: keep what fits */
    r->end += n - r->alloc;
    r->start = r->end;
    r->head = 0;
    used = 0;
    p += n - r->alloc;
    n = r->alloc;
  }
  if (n == 0) return;
  if (used + n > r->alloc) {
    size_t drop = used + n - r->alloc;
    r->start += drop;
    r->head = (r->head + drop) % r->alloc;
    used -= drop;
  }
  size_t tail = (r->head + used) % r->alloc;
  size_t first = r->alloc - tail < n ? r->alloc - tail : n;
  memcpy(r->buf + tail, p, first);
  memcpy(r->buf, p + first, n - first);
  r->end += n;
}

size_t ring_read(const struct ring *r, uint64_t offset, uint8_t *dst, size_t n) {
  if (offset < r->start || offset >= r->end) return 0;
  if (n > r->end - offset) n = (size_t)(r->end - offset);
  size_t at = (r->head + (size_t)(offset - r->start)) % r->alloc;
  size_t first = r->alloc - at < n ? r->alloc - at : n;
  memcpy(dst, r->buf + at, first);
  memcpy(dst + first, r->buf, n - first);
  return n;
}

void ring_free(struct ring *r) {
  free(r->buf);
  memset(r, 0, sizeof *r);
}
