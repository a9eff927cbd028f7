/*
 * The one growable buffer: bytes in p[off, len), room up to cap, never more than max.
 *
 * Every buffer a peer can grow has a ceiling (curl's dynbuf cannot be made without one):
 * growth past max fails with PT_ETOOLARGE and leaves the buffer as it was. Consumed bytes
 * at the front (off) are reclaimed by moving the rest down when room is needed, so one
 * buffer serves as an input or output queue too.
 *
 * A buffer may take its memory from an arena instead of the heap (pt_buf_init_arena): it
 * then grows by copying into a new arena block, and its memory goes with the arena.
 *
 * pt_array_reserve() is the same growth for heap arrays of fixed-size elements.
 */
#ifndef PT_BUF_H
#define PT_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"

typedef struct pt_buf {
    uint8_t *p;
    size_t off; /* bytes before this are consumed */
    size_t len; /* bytes up to here are held */
    size_t cap;
    size_t max;      /* ceiling on cap; 0 = SIZE_MAX */
    pt_arena *arena; /* NULL: heap memory */
} pt_buf;

#define PT_BUF_INIT(ceiling) ((pt_buf){NULL, 0, 0, 0, (ceiling), NULL})

static inline void pt_buf_init(pt_buf *b, size_t max)
{
    *b = PT_BUF_INIT(max);
}

/* A buffer whose memory comes from a (and is released with it); the arena's own ceiling
 * applies too (PT_ENOMEM when it is hit). */
static inline void pt_buf_init_arena(pt_buf *b, pt_arena *a, size_t max)
{
    *b = PT_BUF_INIT(max);
    b->arena = a;
}

/* Bytes held and not consumed. */
static inline size_t pt_buf_used(const pt_buf *b)
{
    return b->len - b->off;
}

static inline const uint8_t *pt_buf_data(const pt_buf *b)
{
    return b->p + b->off;
}

/* The slow path of pt_buf_reserve. */
int pt_buf_grow(pt_buf *b, size_t n);

/* Room for n more bytes at p + len: 0, PT_ETOOLARGE past max, PT_ENOMEM. The bytes held
 * may move (pointers into the buffer are invalid after a call that grows or compacts). */
static inline int pt_buf_reserve(pt_buf *b, size_t n)
{
    return b->cap - b->len >= n ? 0 : pt_buf_grow(b, n);
}

/* Reserves n bytes and returns where they go (commit with pt_buf_commit), or NULL. */
static inline uint8_t *pt_buf_room(pt_buf *b, size_t n)
{
    return pt_buf_reserve(b, n) == 0 ? b->p + b->len : NULL;
}

static inline void pt_buf_commit(pt_buf *b, size_t n)
{
    b->len += n;
}

int pt_buf_append(pt_buf *b, const void *p, size_t n);

/* Marks n held bytes consumed; an emptied buffer starts over at offset 0. */
void pt_buf_consume(pt_buf *b, size_t n);

/* Empties the buffer, keeping its memory. */
static inline void pt_buf_reset(pt_buf *b)
{
    b->off = b->len = 0;
}

/* Releases the memory (an arena buffer's stays with the arena); the buffer is empty and
 * usable again with the same ceiling. */
void pt_buf_free(pt_buf *b);

/* Grows an array of elem-byte elements to hold at least need of them (at most max_elems,
 * 0 = no ceiling but overflow): 0, PT_ETOOLARGE, PT_ENOMEM. *arr and *cap are updated
 * only on success. */
int pt_array_reserve(void *arr, size_t *cap, size_t need, size_t elem, size_t max_elems);

#endif
