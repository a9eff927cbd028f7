/*
 * Erases (pt_backend_ops.erase) on Bigtable, without the write-back buffer (with it, the
 * buffer flushes its head first and then calls this, bigtable.c).
 *
 * The erased rows are read whole (every column's newest version), a group at a time, and
 * each gets one MutateRows entry, which Bigtable applies atomically:
 *
 * - points: a cell wholly inside the erased offsets (a single-sample cell, or a chunk
 *   whose first..last is) is deleted; when a chunk is cut through, the row's rewrite of
 *   compaction (pt_bt_compact_row) folds every cell the erase touches, leaving the erased
 *   offsets out: their deletes and the new chunks, under the greatest writer id of those
 *   folded, so an offset outside the erase reads as it did;
 * - index: each cell in the qualifier range is deleted.
 *
 * Deletes take the versions up to the one read: a cell written after the read stays (a
 * later write). Rows of one group are distinct; an erase of a row already in the group
 * starts the next group, after the group's mutations are sent.
 */
#include <stdlib.h>
#include <string.h>

#include "bigtable_int.h"
#include "bytes.h"
#include "error.h"
#include "log.h"

enum { GROUP_ROWS = 64 };

typedef struct eraser {
    pt_bt *bt;
    const pt_erase *x; /* the group's erases, by row */
    size_t n, cur;
    pt_bt_compactor cp;
    uint8_t *fold;
    size_t fcap;
    pt_arena mem; /* the group's mutations' bytes */
    pt_mutation *m;
    size_t nm, mcap;
    const pt_mutation **ptrs;
    size_t pcap;
    int rv;
} eraser;

static int add(eraser *z, pt_mutation m)
{
    int rv = 0;
    if (z->nm == z->mcap)
        rv = pt_array_reserve(&z->m, &z->mcap, z->nm + 1, sizeof(*z->m), 0);
    if (rv == 0 && (rv = pt_bt_copy_in(&z->mem, &m.row)) == 0 && (rv = pt_bt_copy_in(&z->mem, &m.qual)) == 0 &&
        (rv = pt_bt_copy_in(&z->mem, &m.value)) == 0)
        z->m[z->nm++] = m;
    return rv;
}

/* The delete of cell c of row key: its versions up to the one read. */
static int add_delete(eraser *z, int table, pt_slice key, const pt_bt_cell *c)
{
    return add(z, (pt_mutation){.table = (uint8_t)table, .row = key, .qual = c->qualifier,
                                .version_us = -(c->ts + 1000)});
}

static int in_range(pt_slice q, const pt_erase *x)
{
    return (!x->qual_start.n || pt_slice_cmp(q, x->qual_start) >= 0) &&
           (!x->qual_end.n || pt_slice_cmp(q, x->qual_end) < 0);
}

/* A points row: deletes, or the rewrite when a chunk is cut through. */
static int erase_points(eraser *z, const pt_erase *x, pt_slice key, const pt_bt_cell *cells,
                        size_t n)
{
    uint64_t lo = x->qual_start.n == 4 ? pt_get_be32(x->qual_start.p) : 0;
    uint64_t hi = x->qual_end.n == 4 ? pt_get_be32(x->qual_end.p) : (uint64_t)UINT32_MAX + 1;
    int rv = n > z->fcap ? pt_array_reserve(&z->fold, &z->fcap, n, 1, 0) : 0;
    if (rv != 0)
        return rv;
    size_t nfold = 0;
    int cut = 0;
    for (size_t i = 0; i < n; i++) {
        pt_bt_chunkqual cq;
        uint64_t first, last;
        if (cells[i].qualifier.n == PT_QUAL_LEN) {
            first = last = pt_get_be32(cells[i].qualifier.p);
        } else if (pt_bt_chunk_qual_get(cells[i].qualifier, &cq) == 0) {
            first = cq.first;
            last = cq.last;
        } else {
            z->fold[i] = 0;
            continue;
        }
        z->fold[i] = last >= lo && first < hi;
        nfold += z->fold[i];
        cut |= z->fold[i] && (first < lo || last >= hi);
    }
    if (!cut) {
        for (size_t i = 0; i < n && rv == 0; i++)
            if (z->fold[i])
                rv = add_delete(z, PT_TABLE_POINTS, key, &cells[i]);
        return rv;
    }
    char why[160] = "";
    pt_mutation *m;
    size_t nchunks;
    z->cp.drop_lo = lo;
    z->cp.drop_hi = hi;
    long nm = pt_bt_compact_row(&z->cp, key, cells, n, z->fold, nfold, &m, &nchunks, why,
                                sizeof(why));
    if (nm < 0) {
        if (why[0]) {
            char q[96];
            pt_log(PT_LOG_ERROR, "bigtable erase cannot read a row", "row=%s why=\"%s\"",
                   pt_log_quote(q, sizeof(q), (const char *)key.p, key.n < 64 ? key.n : 64), why);
        }
        return (int)nm;
    }
    for (long i = 0; i < nm && rv == 0; i++)
        rv = add(z, m[i]);
    return rv;
}

static int erase_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    eraser *z = ud;
    while (z->cur < z->n && pt_slice_cmp(z->x[z->cur].row, key) < 0)
        z->cur++;
    if (z->cur == z->n || !pt_slice_eq(z->x[z->cur].row, key))
        return 0; /* not asked for */
    const pt_erase *x = &z->x[z->cur];
    int rv = 0;
    if (x->table == PT_TABLE_POINTS) {
        rv = erase_points(z, x, key, cells, n);
    } else {
        for (size_t i = 0; i < n && rv == 0; i++)
            if (in_range(cells[i].qualifier, x))
                rv = add_delete(z, x->table, key, &cells[i]);
    }
    return rv ? (z->rv = rv) : 0;
}

/* Reads the rows of x[0, n) (one table, distinct rows, sorted) and sends their deletes. */
static int erase_group(eraser *z, const pt_erase *x, size_t n)
{
    pt_row_range *r = malloc(n * sizeof(*r));
    uint8_t *ends = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += x[i].row.n + 1;
    ends = malloc(total ? total : 1);
    if (!r || !ends) {
        free(r);
        free(ends);
        return PT_ENOMEM;
    }
    for (size_t i = 0, off = 0; i < n; i++) {
        memcpy(ends + off, x[i].row.p, x[i].row.n);
        ends[off + x[i].row.n] = 0;
        r[i] = (pt_row_range){x[i].row, {ends + off, x[i].row.n + 1}};
        off += x[i].row.n + 1;
    }
    z->x = x;
    z->n = n;
    z->cur = 0;
    z->nm = 0;
    z->rv = 0;
    pt_arena_reset(&z->mem);
    pt_scan s = {.table = (pt_table)x[0].table, .ranges = r, .nranges = n};
    int rv = pt_bt_data_read_raw(z->bt, &s, 0, erase_row, z);
    if (rv == 0)
        rv = z->rv;
    if (rv == 0 && z->nm) {
        if (z->nm > z->pcap)
            rv = pt_array_reserve(&z->ptrs, &z->pcap, z->nm, sizeof(*z->ptrs), 0);
        for (size_t i = 0; rv == 0 && i < z->nm; i++)
            z->ptrs[i] = &z->m[i];
        if (rv == 0)
            rv = pt_bt_data_mutate(z->bt, x[0].table, z->ptrs, z->nm);
    }
    free(r);
    free(ends);
    return rv;
}

int pt_bt_erase(void *state, const pt_erase *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i].table >= PT_TABLE_COUNT || memchr(x[i].row.p, 0, x[i].row.n) ||
            (x[i].table == PT_TABLE_POINTS &&
             ((x[i].qual_start.n && x[i].qual_start.n != PT_QUAL_LEN) ||
              (x[i].qual_end.n && x[i].qual_end.n != PT_QUAL_LEN))))
            return PT_EBADREQ;
    eraser z = {.bt = state};
    pt_arena_init(&z.mem, 1 << 16, 0);
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0;) {
        size_t k = 1;
        while (i + k < n && k < GROUP_ROWS && x[i + k].table == x[i].table &&
               pt_slice_cmp(x[i + k - 1].row, x[i + k].row) < 0)
            k++;
        rv = erase_group(&z, x + i, k);
        i += k;
    }
    pt_bt_compactor_free(&z.cp);
    pt_arena_free(&z.mem);
    free(z.fold);
    free(z.m);
    free(z.ptrs);
    return rv;
}
