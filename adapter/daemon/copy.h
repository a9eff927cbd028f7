/*
 * `promtable copy`: every row of one store's tables written into another store through the
 * backend interface (docs/operations.md, "Copying a store"), so any pair of backends works:
 * embedded to Bigtable, back, one Bigtable table to another.
 *
 * The copy reads each table of the source in row-key order (points, then index) and writes
 * its cells to the destination in batches of bounded size; with a checkpoint file it notes
 * the last row fully written after every batch, and a rerun continues after it. --verify
 * compares the two stores row by row afterwards (cell count and an XXH3 checksum).
 */
#ifndef PT_COPY_H
#define PT_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "schema.h"

#define PT_COPY_MAX_MATCH 64 /* --match flags */

typedef struct pt_copy_opts {
    const char *from, *to;  /* config files */
    const char *checkpoint; /* NULL: none */
    const char *match[PT_COPY_MAX_MATCH];
    size_t nmatch;
    int64_t start_ms, end_ms; /* the points window, both ends included */
    int window;               /* --start or --end given */
    int verify;               /* compare after copying */
    int verify_only;          /* compare, copy nothing */
} pt_copy_opts;

/* The arguments after `copy` (argv[0] is "copy"): fills o (pointers into argv). 0, or -1
 * with err saying what was wrong. */
int pt_copy_parse_args(int argc, char **argv, pt_copy_opts *o, char *err, size_t errlen);

/* Where a copy stands: every row of tables before `table`, and of `table` every row up to
 * and including row (when has_row), is in the destination. table == PT_TABLE_COUNT: done.
 * job identifies the copy (its stores, window, matchers), so a checkpoint of another copy
 * is refused. */
typedef struct pt_copy_ckpt {
    uint64_t job;
    int table; /* copy order: PT_TABLE_POINTS, PT_TABLE_INDEX, then PT_TABLE_COUNT */
    int has_row;
    size_t row_n;
    uint8_t row[PT_MAX_ROW_KEY];
} pt_copy_ckpt;

/* The job id of o: XXH3 over its stores, window and matchers. */
uint64_t pt_copy_job(const pt_copy_opts *o);

/* Writes ck to path durably: a temporary file beside it, fsync, rename, fsync of the
 * folder. 0, or PT_EIO with err set. */
int pt_copy_ckpt_write(const char *path, const pt_copy_ckpt *ck, char *err, size_t errlen);

/* Reads path into ck: 0, 1 when there is no such file (ck is then the start: points, no
 * row), or PT_EBADREQ with err set when it is not a checkpoint. */
int pt_copy_ckpt_read(const char *path, pt_copy_ckpt *ck, char *err, size_t errlen);

/* The cell version (µs) the copy writes: the one the write path gives such a cell when it
 * follows from the cell (a sample or exemplar: its time; an index cell: its bucket's last
 * millisecond, bucket_ms wide; the format marker and the exemplar marks' `since`: the
 * largest time), else now_us (metadata rows, rows of no known kind). */
int64_t pt_copy_version(pt_table t, pt_slice row, pt_slice qual, pt_slice value, int64_t bucket_ms,
                        int64_t now_us);

/* Runs `promtable copy` with argv after the program name (argv[0] = "copy"); progress
 * and reports go to stderr / out. Returns the exit status: 0 done (and verified, with
 * --verify), 1 failed or mismatches found. */
int pt_copy_main(int argc, char **argv, FILE *out);

#endif
