/*
 * Internals of `promtable copy`, shared by copy.c (the copy) and copy_verify.c (the
 * comparison after it).
 */
#ifndef PT_COPY_INT_H
#define PT_COPY_INT_H

#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "backend.h"
#include "config.h"
#include "copy.h"
#include "read_int.h"

#define VERIFY_ROWS 2000 /* source rows compared per slice */
#define SHOW_MAX 20      /* mismatches printed; all are counted */

/* Each table's name in messages, in copy order ("done" after the last). */
extern const char *const pt_copy_table_name[PT_TABLE_COUNT + 1];

typedef struct side {
    const char *path;
    pt_config cfg;
    int cfg_ok;
    pt_backend be;
} side;

/* The selected series, sorted by series id. */
typedef struct picked {
    series *v;
    size_t n;
} picked;

typedef struct progress {
    int tty;
    const char *what; /* "copy" or "verify" */
    uint64_t rows, cells;
    /* Points table: series seen (a series' rows are adjacent: a new one starts where the
     * series id before ",@" / ",#" changes; its hash in sid) and samples (cells of data
     * rows). */
    uint64_t series, samples, sid;
    int64_t t0, last; /* monotonic ms */
    /* How far: with series_total, series done of it (--match); else, with be, where the
     * scan of table is (at: the last row done) in the bytes the store holds. The ETA comes
     * from the pace since the part began (part_t0, part_f0: the fraction then, < 0 unknown). */
    uint64_t series_total;
    pt_backend *be;
    pt_table table;
    pt_slice at;
    int64_t part_t0;
    double part_f0;
    int shown_pct; /* the whole percent the terminal line shows; -1 none yet */
} progress;

/* Whether the copy takes this cell: not an HA lease row (each store elects its own),
 * and inside the window when there is one (index rows: those of the days that overlap
 * it; rows without a day whole). */
int pt_copy_wanted(const pt_copy_opts *o, pt_table t, int64_t bucket_ms, pt_slice row,
                   pt_slice qual, pt_slice value);

/* A new part of the work (a table, or the selected series): the ETA is of it. */
void pt_copy_progress_part(progress *p, pt_table t);
/* Counts the points row (its first cell) and its cells, for the series and samples. */
void pt_copy_progress_row(progress *p, pt_slice row);
void pt_copy_progress_show(progress *p, const char *table, int final);

/* Scans the ranges of table t; with a window, points rows are read with the window's
 * qualifier range when it lies in one bucket. */
int pt_copy_scan_ranges(side *s, const pt_copy_opts *o, pt_table t, const pt_row_range *r,
                        size_t nr, size_t row_limit, pt_cell_fn fn, void *ud);

/* The scan of table t after row (has_row) or from its start. */
int pt_copy_scan_from(side *s, const pt_copy_opts *o, pt_table t, const uint8_t *row, size_t row_n,
                      int has_row, size_t row_limit, pt_cell_fn fn, void *ud);

/* The points rows of the series sid: its exemplar rows [sid,# sid,$) and its data rows
 * [sid,@ sid,A), in key order. keys: 4 × (sid.n + 2) bytes. */
void pt_copy_series_ranges(pt_slice sid, uint8_t *keys, pt_row_range r[2]);

/* Compares the copied rows of both stores (docs/operations.md, "Copying a store"): 0 when
 * they agree, 1 with the mismatches written to out, or an error. */
int pt_copy_verify(const pt_copy_opts *o, side *src, side *dst, const picked *ps, pt_arena *tmp,
                   FILE *out);

#endif
