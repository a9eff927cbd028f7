#include "arena.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The process-wide pool (pt_arena_pool_init): blocks a freed arena gives back and the
 * next arena of that block size takes, up to pool.max bytes of them. Class k holds blocks
 * of block_size << k: class 0 the standard ones, the others a request's large pieces (a
 * decoded body, its series array), rounded up to a class so the next request's fit. Given
 * back to the allocator, a piece that size is a fresh mapping each time (glibc's mmap
 * threshold, adapter/daemon/main.c), whose first touch of every page faulted: a fifth of the
 * core at a million series. */
enum { POOL_CLASSES = 11 }; /* up to 1024 standard blocks: 64 MiB of 64 KiB */

static struct {
    pthread_mutex_t lock;
    pt_arena_block *free[POOL_CLASSES];
    _Atomic size_t block_size; /* 0: no pool; read without the lock to skip it */
    /* held: the blocks' sizes, which max bounds, large: those of classes past 0, which
     * max / 4 bounds (a request or two per worker in flight need them); bytes: with
     * their headers */
    size_t bytes, held, large, max;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

void pt_arena_pool_init(size_t block_size, size_t max_bytes)
{
    pt_arena_pool_drain();
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.block_size, block_size, memory_order_relaxed);
    pool.max = block_size ? max_bytes : 0;
    pthread_mutex_unlock(&pool.lock);
}

void pt_arena_pool_drain(void)
{
    pt_arena_block *lists[POOL_CLASSES];
    pthread_mutex_lock(&pool.lock);
    memcpy(lists, pool.free, sizeof(lists));
    memset(pool.free, 0, sizeof(pool.free));
    pool.bytes = pool.held = pool.large = 0;
    pthread_mutex_unlock(&pool.lock);
    for (int k = 0; k < POOL_CLASSES; k++) {
        for (pt_arena_block *b = lists[k], *next; b; b = next) {
            next = b->next;
            free(b);
        }
    }
}

size_t pt_arena_pool_bytes(void)
{
    pthread_mutex_lock(&pool.lock);
    size_t n = pool.bytes;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

/* The class of a block of size bytes given the pool's block size std, or -1. */
static int class_of(size_t size, size_t std)
{
    for (int k = 0; std && k < POOL_CLASSES; k++)
        if (size == std << k)
            return k;
    return -1;
}

/* A pooled block of size bytes, or NULL. The unlocked read of block_size only skips the
 * lock for sizes the pool does not hold; under the lock the block's own size decides. */
static pt_arena_block *pool_take(size_t size)
{
    if (class_of(size, atomic_load_explicit(&pool.block_size, memory_order_relaxed)) < 0)
        return NULL;
    pthread_mutex_lock(&pool.lock);
    int k = class_of(size, pool.block_size);
    pt_arena_block *b = k < 0 ? NULL : pool.free[k];
    if (b) {
        pool.free[k] = b->next;
        pool.bytes -= sizeof(*b) + b->size;
        pool.held -= b->size;
        pool.large -= k > 0 ? b->size : 0;
    }
    pthread_mutex_unlock(&pool.lock);
    return b;
}

static void release(pt_arena_block *b)
{
    if (class_of(b->size, atomic_load_explicit(&pool.block_size, memory_order_relaxed)) >= 0) {
        pthread_mutex_lock(&pool.lock);
        int k = class_of(b->size, pool.block_size);
        if (k >= 0 && pool.held + b->size <= pool.max &&
            (k == 0 || pool.large + b->size <= pool.max / 4)) {
            b->next = pool.free[k];
            pool.free[k] = b;
            pool.bytes += sizeof(*b) + b->size;
            pool.held += b->size;
            pool.large += k > 0 ? b->size : 0;
            b = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    free(b);
}

/* The size of a block for a request of need bytes past the arena's standard block: the
 * pool's next class when the arena's blocks are the pool's, else need. */
static size_t large_size(const pt_arena *a, size_t need)
{
    size_t std = atomic_load_explicit(&pool.block_size, memory_order_relaxed);
    if (std != a->block_size)
        return need;
    for (int k = 1; k < POOL_CLASSES; k++)
        if ((std << k) >= need)
            return std << k;
    return need;
}

void pt_arena_init(pt_arena *a, size_t block_size, size_t max)
{
    a->head = NULL;
    a->used_total = 0;
    a->max = max;
    a->block_size = block_size ? block_size : 16384;
    a->exhausted = 0;
}

static pt_arena_block *new_block(pt_arena *a, size_t need)
{
    size_t size = a->block_size;
    if (need > size)
        size = large_size(a, need);
    if (a->max && a->used_total + size > a->max) {
        if (a->used_total + need > a->max)
            return NULL;
        size = a->max - a->used_total;
    }
    pt_arena_block *b = pool_take(size);
    if (!b && !(b = malloc(sizeof(*b) + size)))
        return NULL;
    b->size = size;
    b->off = 0;
    b->next = a->head;
    a->head = b;
    a->used_total += size;
    return b;
}

void *pt_arena_alloc_slow(pt_arena *a, size_t n)
{
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX - 15)
        return NULL;
    n = (n + 15) & ~(size_t)15;
    pt_arena_block *b = a->head;
    if (!b || b->size - b->off < n) {
        /* A large request gets its own block so the current one keeps its slack. */
        b = new_block(a, n);
        if (!b) {
            a->exhausted = 1;
            return NULL;
        }
    }
    void *p = b->data + b->off;
    b->off += n;
    return p;
}

void *pt_arena_calloc(pt_arena *a, size_t n)
{
    void *p = pt_arena_alloc(a, n);
    if (p)
        memset(p, 0, n);
    return p;
}

int pt_arena_charge(pt_arena *a, size_t n)
{
    if (a->max && (n > a->max || a->used_total > a->max - n)) {
        a->exhausted = 1;
        return -1;
    }
    a->used_total += n;
    return 0;
}

char *pt_arena_strndup(pt_arena *a, const char *s, size_t n)
{
    char *p = pt_arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *pt_arena_grow(pt_arena *a, void *v, size_t n, size_t *cap, size_t isz, size_t first)
{
    if (n < *cap)
        return v;
    size_t ncap = *cap ? *cap * 2 : first;
    void *nv = pt_arena_alloc(a, ncap * isz);
    if (!nv)
        return NULL;
    if (n)
        memcpy(nv, v, n * isz);
    *cap = ncap;
    return nv;
}

void pt_arena_reset(pt_arena *a)
{
    pt_arena_block *b = a->head;
    pt_arena_block *keep = NULL;
    while (b) {
        pt_arena_block *next = b->next;
        if (!next && b->size == a->block_size) {
            keep = b; /* the oldest, standard-sized block survives for reuse */
        } else {
            release(b);
        }
        b = next;
    }
    a->head = keep;
    a->used_total = keep ? keep->size : 0;
    a->exhausted = 0;
    if (keep)
        keep->off = 0;
}

void pt_arena_free(pt_arena *a)
{
    pt_arena_block *b = a->head;
    while (b) {
        pt_arena_block *next = b->next;
        release(b);
        b = next;
    }
    a->head = NULL;
    a->used_total = 0;
}
