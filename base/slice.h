/* Byte slices: a pointer and a length, never owning. */
#ifndef PT_SLICE_H
#define PT_SLICE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct pt_slice {
    const uint8_t *p;
    size_t n;
} pt_slice;

#define PT_SLICE_LIT(s) ((pt_slice){(const uint8_t *)(s), sizeof(s) - 1})

static inline pt_slice pt_slice_str(const char *s)
{
    return (pt_slice){(const uint8_t *)s, s ? strlen(s) : 0};
}

/* Byte-wise comparison; a proper prefix sorts first. */
static inline int pt_slice_cmp(pt_slice a, pt_slice b)
{
    size_t n = a.n < b.n ? a.n : b.n;
    /* Keys that differ mostly do so in the first byte: answer that without a call. */
    if (n && a.p[0] != b.p[0])
        return a.p[0] < b.p[0] ? -1 : 1;
    int c = n ? memcmp(a.p, b.p, n) : 0;
    if (c != 0)
        return c;
    return (a.n > b.n) - (a.n < b.n);
}

static inline int pt_slice_eq(pt_slice a, pt_slice b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

#endif
