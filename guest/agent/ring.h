#ifndef VESSEL_AGENT_RING_H
#define VESSEL_AGENT_RING_H
#include <stddef.h>
#include <stdint.h>

struct ring {
  uint8_t *buf;
  size_t alloc; /* bytes allocated, grows up to cap */
  size_t cap;   /* the most this ring retains */
  size_t head;  /* index in buf of the byte at offset start */
  uint64_t start, end;
};

/* Appends, dropping the oldest bytes when the ring is full. */
void ring_write(struct ring *r, const uint8_t *p, size_t n);
/* Copies up to n bytes from offset (which must lie in [start, end)); returns how many. */
size_t ring_read(const struct ring *r, uint64_t offset, uint8_t *dst, size_t n);
void ring_free(struct ring *r);

#endif
