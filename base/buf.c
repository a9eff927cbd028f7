#include "buf.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Capacity for need units: doubling from a minimum, clamped to max. 0 when need > max. */
static size_t grown(size_t cap, size_t need, size_t min, size_t max)
{
    if (need > max)
        return 0;
    size_t c = cap > min ? cap : min;
    while (c < need)
        c = c > max / 2 ? max : c * 2;
    return c < max ? c : max;
}

int pt_buf_grow(pt_buf *b, size_t n)
{
    size_t max = b->max ? b->max : SIZE_MAX;
    if (b->cap - b->len >= n)
        return 0;
    if (b->off) {
        /* Reclaim what was consumed before growing. */
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= n)
            return 0;
    }
    if (n > SIZE_MAX - b->len)
        return PT_ETOOLARGE;
    size_t cap = grown(b->cap, b->len + n, 256, max);
    if (!cap)
        return PT_ETOOLARGE;
    uint8_t *p;
    if (b->arena) {
        p = pt_arena_alloc(b->arena, cap);
        if (p && b->len)
            memcpy(p, b->p, b->len);
    } else {
        p = realloc(b->p, cap);
    }
    if (!p)
        return PT_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int pt_buf_append(pt_buf *b, const void *p, size_t n)
{
    int rv = pt_buf_reserve(b, n);
    if (rv != 0)
        return rv;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

void pt_buf_consume(pt_buf *b, size_t n)
{
    b->off += n < b->len - b->off ? n : b->len - b->off;
    if (b->off == b->len)
        b->off = b->len = 0;
}

void pt_buf_free(pt_buf *b)
{
    if (!b->arena)
        free(b->p);
    b->p = NULL;
    b->off = b->len = b->cap = 0;
}

int pt_array_reserve(void *arr, size_t *cap, size_t need, size_t elem, size_t max_elems)
{
    if (need <= *cap)
        return 0;
    size_t max = SIZE_MAX / elem;
    if (max_elems && max_elems < max)
        max = max_elems;
    size_t c = grown(*cap, need, 8, max);
    if (!c)
        return PT_ETOOLARGE;
    void **pp = arr;
    void *p = realloc(*pp, c * elem);
    if (!p)
        return PT_ENOMEM;
    *pp = p;
    *cap = c;
    return 0;
}
