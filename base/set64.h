/*
 * A growable set of nonzero 64-bit keys (hashes), open addressing with linear probing,
 * kept at most half full. Heap memory; not thread-safe.
 */
#ifndef PT_SET64_H
#define PT_SET64_H

#include <stddef.h>
#include <stdint.h>

typedef struct pt_set64 {
    uint64_t *slot; /* 0 = empty; NULL until the first add */
    size_t mask;    /* slots - 1 */
    size_t n;
} pt_set64;

/* 1 when key (nonzero) is in s. */
int pt_set64_has(const pt_set64 *s, uint64_t key);
/* Adds key (nonzero): 1 when added, 0 when it was there, PT_ENOMEM (s unchanged). */
int pt_set64_add(pt_set64 *s, uint64_t key);
/* Empties s, keeping its memory. */
void pt_set64_clear(pt_set64 *s);
void pt_set64_free(pt_set64 *s);

#endif
