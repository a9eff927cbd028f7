/*
 * The in-process index cache: which (series, index bucket) pairs are known to have their
 * index rows stored, so steady-state ingest writes no index cells.
 *
 * Memory is bounded: two generations of hash sets of 128-bit keys, each growing with its
 * entries up to half the capacity. Lookups check both; inserts go to the current one; when it is
 * full the old generation is dropped and the current one becomes old. A dropped entry only costs a
 * rewrite of index rows that are already there (index writes are idempotent).
 */
#ifndef PT_INDEX_H
#define PT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
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
/* Forgets keys (their index rows were erased): the next write of such a pair indexes it
 * again. */
void pt_index_cache_remove(pt_index_cache *c, const pt_index_key *keys, size_t n);
size_t pt_index_cache_size(pt_index_cache *c);
size_t pt_index_cache_capacity(pt_index_cache *c);
/* Memory of the hash tables (they grow with the entries, up to the capacity's size). */
size_t pt_index_cache_bytes(pt_index_cache *c);

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

/*
 * The series-row cache (refcache.c): the series rows of a (series reference, index
 * bucket) as a read found them, so the next read resolving that reference needs no
 * storage seek. Exact only while this process is the store's one writer (the embedded
 * store): every series row the write path stores drops its entry, and a fill raced by such
 * a write is not kept. Bounded to max_bytes (clock eviction).
 *
 * An entry's bytes are the rows back to back, each: u32 BE length, the row's key after
 * its prefix (PT_INDEX_SERIES_PREFIX_LEN), u32 BE length, the cell's value.
 */
typedef struct pt_ref_cache pt_ref_cache;

pt_ref_cache *pt_ref_cache_new(size_t max_bytes);
void pt_ref_cache_free(pt_ref_cache *c);
/* Appends the entry's bytes to out: 1 (maybe none: no rows), 0 when not cached, PT_ENOMEM. */
int pt_ref_cache_get(pt_ref_cache *c, uint64_t ref, int64_t bucket, pt_buf *out);
/* Taken before the read that will fill the entry; the fill passes it back. */
uint32_t pt_ref_cache_epoch(pt_ref_cache *c, uint64_t ref, int64_t bucket);
/* Keeps the entry unless a series row of its stripe was written since epoch was taken. */
void pt_ref_cache_put(pt_ref_cache *c, uint64_t ref, int64_t bucket, uint32_t epoch,
                      const uint8_t *data, size_t len);
/* The largest entry put keeps. */
size_t pt_ref_cache_max_entry(const pt_ref_cache *c);
/* After a series row of (ref, bucket) is stored. */
void pt_ref_cache_invalidate(pt_ref_cache *c, uint64_t ref, int64_t bucket);
size_t pt_ref_cache_bytes(pt_ref_cache *c);

/*
 * The list cache: a second pt_ref_cache whose entries are index lists (a metric's list or
 * a posting list) of one bucket as a read found them, so a repeated query lists its
 * candidates without scanning the rows again. Keyed by pt_list_cache_key and the bucket;
 * an entry starts with the list's prefix (checked on a hit: two lists may share a key),
 * then one record per cell. Every list row the write path stores invalidates its entry.
 */
/* The key of the list whose row prefix in one bucket is prefix[0, n), day tail included
 * (left out of the key: the bucket is the entry's other half). */
uint64_t pt_list_cache_key(const uint8_t *prefix, size_t n, uint64_t salt);

/* A set of 128-bit keys (open addressing; the zero key marks an empty slot), either of a
 * fixed size whose slots the caller gives (a request's, in its arena: pt_keyset_add), or
 * growing on the heap (pt_keyset_put, pt_keyset_free). A zeroed one is empty. */
typedef struct pt_keyset {
    pt_index_key *slots;
    size_t mask;
    size_t n;
} pt_keyset;

/* Into fixed slots: a power of two >= 2 * max entries, zeroed. Returns 1 if newly added. */
int pt_keyset_add(pt_keyset *s, pt_index_key k);
/* Into heap slots, doubled (from 1,024) before they pass half full: 1 if newly added, 0 if
 * there, PT_ENOMEM (s unchanged). */
int pt_keyset_put(pt_keyset *s, pt_index_key k);
/* 1 when k is in s. */
int pt_keyset_has(const pt_keyset *s, pt_index_key k);
/* Frees heap slots (pt_keyset_put's); s is empty again. */
void pt_keyset_free(pt_keyset *s);

#endif
