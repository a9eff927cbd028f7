#include "arena.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The process-wide pool of standard blocks (pt_arena_pool_init): blocks a freed arena
 * gives back and the next arena of that block size takes, up to pool.max of them. */
static struct {
    pthread_mutex_t lock;
    pt_arena_block *free;
    _Atomic size_t block_size; /* 0: no pool; read without the lock to skip it */
    size_t n, max;
} pool = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0};

void pt_arena_pool_init(size_t block_size, size_t max_bytes)
{
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.block_size, block_size, memory_order_relaxed);
    pool.max = block_size ? max_bytes / block_size : 0;
    pthread_mutex_unlock(&pool.lock);
    pt_arena_pool_drain();
}

void pt_arena_pool_drain(void)
{
    pthread_mutex_lock(&pool.lock);
    pt_arena_block *b = pool.free;
    pool.free = NULL;
    pool.n = 0;
    pthread_mutex_unlock(&pool.lock);
    while (b) {
        pt_arena_block *next = b->next;
        free(b);
        b = next;
    }
}

size_t pt_arena_pool_bytes(void)
{
    pthread_mutex_lock(&pool.lock);
    size_t n = pool.n * (sizeof(pt_arena_block) + pool.block_size);
    pthread_mutex_unlock(&pool.lock);
    return n;
}

/* A pooled block of size bytes, or NULL. The unlocked read of block_size only skips the
 * lock for sizes the pool does not hold; under the lock the block's own size decides. */
static pt_arena_block *pool_take(size_t size)
{
    if (size != atomic_load_explicit(&pool.block_size, memory_order_relaxed))
        return NULL;
    pthread_mutex_lock(&pool.lock);
    pt_arena_block *b = pool.free;
    if (b && b->size == size) {
        pool.free = b->next;
        pool.n--;
    } else {
        b = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    return b;
}

static void release(pt_arena_block *b)
{
    if (b->size == atomic_load_explicit(&pool.block_size, memory_order_relaxed)) {
        pthread_mutex_lock(&pool.lock);
        if (b->size == pool.block_size && pool.n < pool.max) {
            b->next = pool.free;
            pool.free = b;
            pool.n++;
            b = NULL;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    free(b);
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
        size = need;
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

char *pt_arena_strndup(pt_arena *a, const char *s, size_t n)
{
    char *p = pt_arena_alloc(a, n + 1);
    if (!p)
        return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
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
