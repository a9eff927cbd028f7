#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    pt_arena_block *b = malloc(sizeof(*b) + size);
    if (!b)
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
            free(b);
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
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used_total = 0;
}
