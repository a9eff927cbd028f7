/*
 * Metric metadata (type, help, unit per metric family) kept in the index table, on every
 * backend, under keys no series or index row can have (docs/storage-format.md, "Metadata rows"):
 *
 *   "==meta," <family part> "," hash16     qualifier "m"
 *   value: pt_labels_encode of two pairs, (family, type name) and (help, unit)
 *
 * <family part> is the family escaped as an index part (pt_index_part: escaped, or a
 * digest when long); hash16 is 16 hex digits of a hash of the value, so each distinct
 * (type, help, unit) of a family is its own row (tall rows, never a wide one). Cells are
 * versioned at the time of writing; the index cache remembers what was written today, so
 * steady-state writes of unchanged metadata write no cells, and a family still sent is
 * rewritten once a day (a max-age GC rule keeps it).
 */
#ifndef PT_META_H
#define PT_META_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "buf.h"
#include "store.h"

/* What every metadata row key starts with ("==" + a non-hex letter: no series row). */
#define PT_META_ROW_PREFIX "==meta,"

/* Metric types, numbered as remote write 1.0's MetricMetadata.MetricType and 2.0's
 * Metadata.MetricType (0 = unknown / unspecified). */
enum { PT_META_TYPES = 8 };

/* "counter", "gauge", ...; "unknown" for 0 and for a number out of range. */
const char *pt_meta_type_name(int type);

/* Metadata to store, collected from one request and written as one batch. */
typedef struct pt_meta_batch {
    pt_store *st;
    pt_arena *a;
    pt_buf muts;    /* pt_mutation */
    pt_buf keys;    /* pt_index_key of each mutation, for the cache after the write */
    size_t skipped; /* entries refused (empty family, invalid UTF-8, over the size limit) */
} pt_meta_batch;

/* The longest help text kept (bytes); longer entries are skipped. */
#define PT_META_HELP_MAX 16384

void pt_meta_begin(pt_meta_batch *b, pt_store *st, pt_arena *a);
/* Queues one family's metadata unless the index cache knows it was written today. Slices
 * are read during the call only. 0 (queued or known), PT_EBADREQ (skipped: empty or
 * invalid UTF-8 family, help or unit, or help over PT_META_HELP_MAX), PT_ENOMEM. */
int pt_meta_put(pt_meta_batch *b, pt_slice family, int type, pt_slice help, pt_slice unit);
/* Writes what was queued (one backend write) and then tells the cache: 0 or a backend
 * error (retryable). */
int pt_meta_commit(pt_meta_batch *b);

/* One stored entry; slices valid during the callback only. */
typedef struct pt_meta_entry {
    pt_slice family, type, help, unit;
} pt_meta_entry;

/* Return 0 to go on, 1 to stop, or an error. */
typedef int (*pt_meta_fn)(void *ud, const pt_meta_entry *e);

/* Every stored entry, in key order (by escaped family), or those of one family when
 * family.n > 0. 0, or a storage error. */
int pt_meta_scan(pt_store *st, pt_slice family, pt_meta_fn fn, void *ud);

#endif
