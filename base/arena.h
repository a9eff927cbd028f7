/*
 * Per-request arena: bump allocation out of chained blocks, everything freed at once.
 * Not thread-safe; a request's arena is used by one thread at a time.
 * Every arena has a ceiling: an allocation that would take the arena past `max` bytes
 * fails (NULL) instead of growing without bound.
 */
#ifndef PT_ARENA_H
#define PT_ARENA_H

#include <stddef.h>

typedef struct pt_arena_block {
    struct pt_arena_block *next;
    size_t size;
    size_t off;
    _Alignas(16) unsigned char data[];
} pt_arena_block;

typedef struct pt_arena {
    pt_arena_block *head;
    size_t used_total; /* bytes handed out by blocks, including slack */
    size_t max;        /* ceiling on used_total; 0 = no ceiling */
    size_t block_size;
    int exhausted;     /* set once an allocation failed */
} pt_arena;

void pt_arena_init(pt_arena *a, size_t block_size, size_t max);
/* 16-byte aligned; NULL when the ceiling is hit or malloc fails. */
void *pt_arena_alloc_slow(pt_arena *a, size_t n);
static inline void *pt_arena_alloc(pt_arena *a, size_t n)
{
    /* The common case inline: the request fits the current block. */
    pt_arena_block *b = a->head;
    size_t r = (n + 15) & ~(size_t)15;
    if (b && n - 1 < (size_t)-16 && b->size - b->off >= r) {
        void *p = b->data + b->off;
        b->off += r;
        return p;
    }
    return pt_arena_alloc_slow(a, n);
}
void *pt_arena_calloc(pt_arena *a, size_t n);
/* Counts n bytes that are held outside the arena on behalf of its owner (a library's own
 * allocations made for the request) against the ceiling, until the arena is reset or
 * freed. 0, or -1 (exhausted set) when they do not fit. */
int pt_arena_charge(pt_arena *a, size_t n);
char *pt_arena_strndup(pt_arena *a, const char *s, size_t n);
/* The array v of n items of isz bytes with room for one more: v itself while *cap > n,
 * else a copy in twice the room (first items when *cap is 0), *cap updated; NULL when a
 * has no room (v and *cap as they were). */
void *pt_arena_grow(pt_arena *a, void *v, size_t n, size_t *cap, size_t isz, size_t first);
/* Frees every block; the arena can be reused afterwards (keeps its first block). */
void pt_arena_reset(pt_arena *a);
void pt_arena_free(pt_arena *a);

/* A process-wide pool of blocks of block_size bytes and of its multiples by 2, 4 ... 1024
 * (the classes an arena of that block size rounds a large request's block up to), at most
 * max_bytes of them: an arena that frees such a block gives it to the pool, and an arena
 * that needs one takes it from there before asking malloc. A large read's blocks, handed
 * back to malloc, would leave its heap fragmented and later small reads slower in malloc;
 * a request's large pieces would be fresh mappings each time; pooled ones are reused warm.
 * Called once at start-up, before any arena is used; without it there is no pool. */
void pt_arena_pool_init(size_t block_size, size_t max_bytes);
/* Frees the pooled blocks (at exit; tests). */
void pt_arena_pool_drain(void);
/* Bytes the pool holds. */
size_t pt_arena_pool_bytes(void);

#endif
