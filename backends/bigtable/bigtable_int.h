/*
 * Internals of the Bigtable backend (bigtable.c) shared with its tests: the ReadRows
 * chunk merger, and knobs that let a test shorten deadlines.
 *
 * The merger turns the CellChunk stream of a ReadRows call back into rows, following the
 * rules of shared/reference/bigtable.md §5 (Google's conformance state machine). It does
 * no I/O: feed it responses or single chunks, and it calls back once per committed row.
 */
#ifndef PT_BIGTABLE_INT_H
#define PT_BIGTABLE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "bigtable.pb-c.h"
#include "slice.h"

typedef struct pt_bt_cell {
    pt_slice family;
    pt_slice qualifier;
    int64_t ts;
    pt_slice label; /* the first label, or empty */
    pt_slice value;
} pt_bt_cell;

/* One committed row, its cells in the order the server sent them. Everything it points
 * to is valid only during the call. Return 0 to go on, 1 to stop (the merger then
 * returns 1), or a negative pt error code (the merger returns it). */
typedef int (*pt_bt_row_fn)(void *ud, pt_slice key, const pt_bt_cell *cells, size_t ncells);

/* Where a cell's parts sit in the row buffer: offsets, because the buffer may move. */
typedef struct pt_bt_cellpos {
    size_t fam, fam_n, qual, qual_n, label, label_n, val, val_n;
    int64_t ts;
} pt_bt_cellpos;

typedef struct pt_bt_merger {
    int state; /* NEW_ROW, NEW_CELL or CELL_VALUE (bigtable.c) */
    pt_bt_row_fn fn;
    void *ud;
    size_t max_row_bytes; /* ceiling on one buffered row; over it the merge fails */

    uint8_t *last; /* key of the last committed row or last_scanned_row_key */
    size_t last_n, last_cap;
    int have_last;

    uint8_t *buf;          /* current row: its key, then each cell's family, qualifier, */
    size_t buf_n, buf_cap; /* label and value */
    size_t key_n;
    pt_bt_cellpos *cells;
    size_t ncells, cells_cap;
    pt_bt_cell *out; /* the cells resolved to slices at commit */
    size_t out_cap;

    int32_t value_size; /* announced size of the split cell being assembled */
    int64_t remaining;  /* bytes of it still to come */

    size_t rows;   /* rows committed (and delivered) so far */
    char err[160]; /* why the last call failed */
} pt_bt_merger;

void pt_bt_merger_init(pt_bt_merger *m, pt_bt_row_fn fn, void *ud, size_t max_row_bytes);
void pt_bt_merger_free(pt_bt_merger *m);

/* Feeds one response: its last_scanned_row_key, then its chunks. Returns 0, 1 when the
 * row callback asked to stop, the callback's negative code, or PT_EINTERNAL for a stream
 * that breaks the protocol / PT_ELIMIT for a row over the ceiling (err says which). */
int pt_bt_merger_response(pt_bt_merger *m, const Bigtable__ReadRowsResponse *r);
int pt_bt_merger_chunk(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c);
/* The stream ended with status OK: fails unless the last row was committed. */
int pt_bt_merger_end(pt_bt_merger *m);
/* The stream broke: drops the partial row, keeps the resume point (last key). */
void pt_bt_merger_abandon(pt_bt_merger *m);

/* A row range as sent: [start, end) or (start, end) when start_open; end.n == 0 is +inf. */
typedef struct pt_bt_range {
    pt_slice start;
    int start_open;
    pt_slice end;
} pt_bt_range;

/* The ranges a ReadRows must still cover: in[0..n) without empty ones and, when last is
 * given, without every row key <= *last (the resume point after a broken stream).
 * Writes at most n ranges to out and returns how many; 0 means nothing is left to read
 * (never send that: an empty row set reads the whole table). */
size_t pt_bt_clip_ranges(const pt_row_range *in, size_t n, const pt_slice *last, pt_bt_range *out);

/* Test knobs for an open bigtable backend: per-call deadline and the total time spent
 * retrying one write or scan. 0 keeps the current value. */
void pt_bt_set_timeouts(void *state, int call_ms, int retry_budget_ms);

/* How often writes retried entries and scans resumed a broken stream. */
void pt_bt_get_stats(void *state, unsigned long *write_retries, unsigned long *scan_resumes);

/* Renders a table's schema as the server reports it (GetTable), e.g.
 * "p: versions>1 || age>86400s". For tests and diagnostics. 0 or a pt error code. */
int pt_bt_describe_table(void *state, int table, char *out, size_t outlen);

#endif
