/*
 * Exemplars in the points table (docs/storage-format.md, "Exemplars"): one row per series
 * and bucket, row key = the data row's key with ",#" in place of ",@"; one cell per
 * PT_EXEMPLAR_SLOT_MS window of the bucket (qualifier = the window's first offset), so a
 * series keeps at most one exemplar per window: the cap.
 */
#ifndef PT_EXEMPLAR_H
#define PT_EXEMPLAR_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "rowkey.h"
#include "slice.h"

/* The window one exemplar cell covers: 2^14 ms = 16.384 s. */
#define PT_EXEMPLAR_SLOT_MS ((int64_t)1 << 14)
/* OpenMetrics: an exemplar's label names and values hold at most 128 UTF-8 runes together. */
#define PT_EXEMPLAR_MAX_RUNES 128

/* Writes the exemplar row key of sid at base (PT_ROW_KEY_LEN(sid.n) bytes). */
void pt_exemplar_row_key(uint8_t *dst, pt_slice sid, int64_t base);

/* The window qualifier of an exemplar at offset off of its bucket. */
static inline uint32_t pt_exemplar_slot(uint32_t off)
{
    return off & ~(uint32_t)(PT_EXEMPLAR_SLOT_MS - 1);
}

/* Checks labels (UTF-8, non-empty unique names, the rune limit); 0, or -1 with why set. */
int pt_exemplar_labels_check(const pt_label *ls, size_t n, char *why, size_t whylen);

/* Cell value: 4-byte big-endian offset, the value's 8 IEEE-754 bytes big-endian, then
 * pt_labels_encode of the labels. Never 8 bytes long. */
size_t pt_exemplar_cell_size(const pt_label *ls, size_t n);
void pt_exemplar_cell_encode(uint8_t *dst, uint32_t off, double v, const pt_label *ls, size_t n);
/* Labels point into val; 0 or PT_EINTERNAL for a malformed cell. */
int pt_exemplar_cell_decode(pt_arena *a, int64_t base, pt_slice val, int64_t *t, double *v,
                            pt_label **ls, size_t *n);

/* ---- out-of-order exemplars ----
 * The newest exemplar time stored per series, as Prometheus' exemplar storage knows it: an
 * exemplar older than that is out of order (2.0: refused with a 400; 1.0: dropped, as
 * Prometheus' receiver does). Bounded: a direct-mapped table of PT_EXEMPLAR_NEWEST_SLOTS
 * series (16 bytes each) keyed by a 64-bit hash of the series id; a series whose slot
 * another series took is no longer known, and its next exemplar is taken as in order.
 * Thread-safe (striped locks). Only what the backend acknowledged is recorded. */
#define PT_EXEMPLAR_NEWEST_SLOTS ((size_t)1 << 17)

typedef struct pt_exemplar_newest pt_exemplar_newest;

/* A table of slots entries (a power of two); NULL when out of memory. */
pt_exemplar_newest *pt_exemplar_newest_new(size_t slots);
void pt_exemplar_newest_free(pt_exemplar_newest *t);
/* The newest exemplar time recorded for the series of hash h, or -1 when none is. */
int64_t pt_exemplar_newest_get(pt_exemplar_newest *t, uint64_t h);
/* Records ts for h unless a newer time is recorded for it. */
void pt_exemplar_newest_put(pt_exemplar_newest *t, uint64_t h, int64_t ts);
/* The hash the table is keyed by: of the series id with seed (whatever else tells series
 * with one id apart, 0 if nothing), never 0. */
uint64_t pt_exemplar_series_hash(pt_slice sid, uint64_t seed);

/* ---- which buckets hold exemplars ----
 * Looking for a series' exemplar row costs a row lookup as dear as its data row's, and
 * most stores have no exemplars at all. So the index table's row PT_EXEMPLAR_MARK_ROW (in
 * each tenant's row space) holds one cell per bucket that exemplars were written into
 * (qualifier: pt_exemplar_mark_qual of its base), written in the same request as the
 * bucket's first exemplar cells, and a read looks for exemplar rows only in marked
 * buckets. A store's marker row also holds the cell PT_EXEMPLAR_MARK_SINCE from its
 * creation on: a store without it was created before the marks, and every bucket of it
 * counts as marked ("legacy").
 *
 * pt_exemplar_marks remembers the marks this process wrote or read (a bounded table keyed
 * by tenant salt and base: an entry it lost is read again), so a marked bucket costs
 * nothing more. An unmarked one costs a read of the marker row per query and bucket when
 * another process may mark it meanwhile (Bigtable); on a store only this process writes,
 * the answer "unmarked" is remembered too, unless a mark was added while it was read (it
 * may be the one). Thread-safe. */
#define PT_EXEMPLAR_MARK_ROW "==xmarks"
#define PT_EXEMPLAR_MARK_SINCE "since"
#define PT_EXEMPLAR_MARK_QUAL_LEN 8

typedef struct pt_exemplar_marks pt_exemplar_marks;

pt_exemplar_marks *pt_exemplar_marks_new(void);
void pt_exemplar_marks_free(pt_exemplar_marks *m);
/* 1 when this process knows the bucket at base of the tenant with salt to be marked, or
 * the store is legacy. */
int pt_exemplar_marks_known(pt_exemplar_marks *m, uint64_t salt, int64_t base);
/* What this process knows of the bucket: 1 marked (or a legacy store), 0 unmarked, -1
 * not known; *when (if not NULL) is for pt_exemplar_marks_add_unmarked. */
int pt_exemplar_marks_lookup(pt_exemplar_marks *m, uint64_t salt, int64_t base, uint64_t *when);
/* Records a mark that is stored. */
void pt_exemplar_marks_add(pt_exemplar_marks *m, uint64_t salt, int64_t base);
/* Records that the store held no mark for the bucket when read after the lookup that
 * returned when; nothing if a mark was added since. Only for a store no other process
 * writes. */
void pt_exemplar_marks_add_unmarked(pt_exemplar_marks *m, uint64_t salt, int64_t base,
                                    uint64_t when);
/* The store predates the marks: every bucket counts as marked. */
void pt_exemplar_marks_set_legacy(pt_exemplar_marks *m);
/* The mark's qualifier: base as 8 bytes big-endian (bases are never negative). */
void pt_exemplar_mark_qual(uint8_t *dst, int64_t base);
/* Reads whether the marker row of be (a tenant's view, or the shared store for the since
 * cell) holds the cell qual: *found. 0 or a storage error. */
struct pt_backend;
int pt_exemplar_marks_read(struct pt_backend *be, pt_slice qual, int *found);

#endif
