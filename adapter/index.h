/*
 * The in-process index cache: which (series, index bucket) pairs are known to have their
 * index rows stored, so steady-state ingest writes no index cells.
 *
 * Memory is bounded: two generations of fixed-size hash sets of 128-bit keys. Lookups
 * check both; inserts go to the current one; when it is full the old generation is dropped
 * and the current one becomes old. A dropped entry only costs a rewrite of index rows that
 * are already there (index writes are idempotent).
 */
#ifndef PT_INDEX_H
#define PT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "slice.h"

typedef struct pt_index_key {
    uint64_t lo, hi;
} pt_index_key;

typedef struct pt_index_cache pt_index_cache;

/* capacity: total entries kept (both generations). NULL on allocation failure. */
pt_index_cache *pt_index_cache_new(size_t capacity);
void pt_index_cache_free(pt_index_cache *c);

pt_index_key pt_index_key_of(pt_slice sid, int64_t bucket);
/* found[i] = 1 when keys[i] is known as indexed, for the whole batch under one lock; a key
 * found in the old generation moves to the current one. */
void pt_index_cache_lookup(pt_index_cache *c, const pt_index_key *keys, size_t n,
                           uint8_t *found);
/* Adds keys after the backend acknowledged their index rows. */
void pt_index_cache_add(pt_index_cache *c, const pt_index_key *keys, size_t n);
size_t pt_index_cache_size(pt_index_cache *c);
size_t pt_index_cache_capacity(pt_index_cache *c);

/*
 * Hints for reads: how many index rows a way of listing candidates (one matcher's lists
 * over a range of days) took the last time a read counted or scanned it. A read with a
 * hint for each of its matchers goes straight to the shortest instead of counting them
 * all in lock-step. Only cost depends on a hint, never an answer, so a stale or lost one
 * (lists grow; another process writes the same store; two keys share a slot) is harmless:
 * the next read that scans the list corrects it.
 *
 * A fixed direct-mapped table of 64-bit words, tag | complete | rows, read and written
 * with relaxed atomics: no lock, 32 KiB.
 */
typedef struct pt_list_hints pt_list_hints;

pt_list_hints *pt_list_hints_new(void);
void pt_list_hints_free(pt_list_hints *h);
/* 1 with *rows set when key has a hint; *complete = 0 makes *rows a lower bound (the
 * list was not read to its end). */
int pt_list_hints_get(pt_list_hints *h, uint64_t key, size_t *rows, int *complete);
void pt_list_hints_put(pt_list_hints *h, uint64_t key, size_t rows, int complete);

/* A small set for deduplicating keys inside one request (arena-free: caller gives slots). */
typedef struct pt_keyset {
    pt_index_key *slots;
    size_t mask;
    size_t n;
} pt_keyset;

/* slots must hold a power of two >= 2 * max entries, zeroed. Returns 1 if newly added. */
int pt_keyset_add(pt_keyset *s, pt_index_key k);

#endif
