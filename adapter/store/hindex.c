/* A hash index over an array its owner keeps, open addressing with linear probing
 * (read_int.h). */
#include <string.h>

#include "read_int.h"

static void hindex_link(hindex *x, size_t i)
{
    size_t mask = x->cap * 2 - 1, j = x->h[i] & mask;
    while (x->slots[j])
        j = (j + 1) & mask;
    x->slots[j] = (uint32_t)(i + 1);
}

/* Makes room for item x->n: when full, doubles *items (isz bytes each, copied) and the
 * index. */
static int reserve(hindex *x, pt_arena *a, void **items, size_t isz)
{
    if (x->n < x->cap)
        return 0; /* *items unchanged */
    size_t ncap = x->cap ? x->cap * 2 : 256;
    void *ni = pt_arena_alloc(a, ncap * isz);
    uint64_t *nh = pt_arena_alloc(a, ncap * sizeof(*nh));
    uint32_t *ns = pt_arena_calloc(a, ncap * 2 * sizeof(*ns));
    if (!ni || !nh || !ns)
        return PT_ENOMEM;
    if (x->n) {
        memcpy(ni, *items, x->n * isz);
        memcpy(nh, x->h, x->n * sizeof(*nh));
    }
    *items = ni;
    x->h = nh;
    x->slots = ns;
    x->cap = ncap;
    for (size_t i = 0; i < x->n; i++)
        hindex_link(x, i);
    return 0;
}

/* The item with hash h for which eq(items, i, key) holds, or -1. */
static long find(const hindex *x, uint64_t h, int (*eq)(const void *, size_t, const void *),
                 const void *items, const void *key)
{
    if (!x->cap)
        return -1;
    size_t mask = x->cap * 2 - 1;
    for (size_t j = h & mask; x->slots[j]; j = (j + 1) & mask) {
        size_t i = x->slots[j] - 1;
        if (x->h[i] == h && eq(items, i, key))
            return (long)i;
    }
    return -1;
}

int pt_hindex_claim(hindex *x, pt_arena *a, void **items, size_t isz, uint64_t h,
                    int (*eq)(const void *, size_t, const void *), const void *key, size_t max,
                    size_t *found)
{
    long at = find(x, h, eq, *items, key);
    if (at >= 0) {
        if (found)
            *found = (size_t)at;
        return 0;
    }
    if (max && x->n >= max)
        return PT_ELIMIT;
    int rv = reserve(x, a, items, isz);
    return rv ? rv : 1;
}

void pt_hindex_add(hindex *x, uint64_t h)
{
    x->h[x->n] = h;
    hindex_link(x, x->n++);
}
