/*
 * Erases (pt_backend_ops.erase) on the embedded store.
 *
 * Every shard of the head is flushed first (pt_emb_flusher_sync), which also deletes the
 * logs that held the cells acknowledged before the call: so a restart replays none of
 * them, and what is to be erased is all in RocksDB (write-back: in the sink). Then, with
 * the flush thread kept out (rewrite_mu: a flush reads a row's stored chunks and writes
 * them back merged, which must not run across a rewrite), one RocksDB write batch per
 * erase deletes the covered entries:
 *
 * - points: a chunk wholly inside the erased offsets is deleted, one that the erase cuts
 *   through is rewritten with the cells outside it (a chunk holds one row's cells in
 *   order and chunks of a row never overlap, so what is left of one is a chunk again);
 * - index: the entries (one a cell) in the qualifier range: one point delete for one
 *   cell, else one range deletion.
 *
 * The head's notes on the row's last chunk are dropped (the next flush reads them again).
 * Cells written after the sync, erased range or not, are later writes and stay.
 */
#include <stdlib.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"

typedef struct eraser {
    embedded *e;
    rocksdb_writebatch_t *wb;
    rocks_iters its;
    pt_buf key, end, val, copy;
    pt_vcells cells, kept;
} eraser;

/* key = row || 0x00 || q (4 bytes BE), or with q < 0 row || 0x00, or with q > 2^32 - 1
 * row || 0x01: the bounds of a row's entries. */
static int bound(pt_buf *k, pt_slice row, int64_t q)
{
    uint8_t b[4];
    if (q > (int64_t)UINT32_MAX)
        return pt_emb_rocks_key(k, row.p, row.n, 1, NULL, 0);
    pt_put_be32(b, (uint32_t)(q < 0 ? 0 : q));
    return pt_emb_rocks_key(k, row.p, row.n, 0, b, q < 0 ? 0 : 4);
}

/* The range [lo, hi) of offsets an erase's bounds name; -1 for bounds that are neither
 * 4 bytes nor empty. */
static int offsets(const pt_erase *x, int64_t *lo, int64_t *hi)
{
    if ((x->qual_start.n && x->qual_start.n != 4) || (x->qual_end.n && x->qual_end.n != 4))
        return -1;
    *lo = x->qual_start.n ? (int64_t)pt_get_be32(x->qual_start.p) : 0;
    *hi = x->qual_end.n ? (int64_t)pt_get_be32(x->qual_end.p) : (int64_t)UINT32_MAX + 1;
    return 0;
}

/* The chunks of one points row that [lo, hi) touches, deleted or rewritten into wb. */
static int erase_points_row(eraser *z, pt_slice row, int64_t lo, int64_t hi)
{
    int rv;
    rocksdb_iterator_t *it = z->its.it[0];
    if ((rv = bound(&z->key, row, -1)) != 0)
        return rv;
    rocksdb_iter_seek(it, (const char *)z->key.p, z->key.len);
    for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        pt_slice r;
        uint32_t first, last;
        if (pt_emb_chunk_key_split(k, kn, &r, &first) != 0 || !pt_slice_eq(r, row) ||
            first >= hi)
            break;
        const char *v = rocksdb_iter_value(it, &vn);
        pt_cellchunk c;
        if (pt_cellchunk_parse((const uint8_t *)v, vn, &c) != 0 || pt_cellchunk_last(&c, &last))
            return PT_EINTERNAL;
        if (last < lo)
            continue;
        rocksdb_writebatch_delete_cf(z->wb, z->e->r.cf[CF_POINTS], k, kn);
        if (first >= lo && last < hi)
            continue;
        /* Cut through: the cells outside [lo, hi) make the chunk anew. */
        pt_vcells_reset(&z->cells);
        z->kept.n = 0;
        if ((rv = pt_cellchunk_cells(&c, &z->cells)) != 0)
            return rv;
        for (size_t i = 0; i < z->cells.n && rv == 0; i++) {
            const pt_vcell *x = &z->cells.c[i];
            if (x->q < lo || x->q >= hi)
                rv = pt_vcells_push(&z->kept, x->q, x->vlen, pt_vcell_val(x));
        }
        if (rv == 0 && z->kept.n &&
            (rv = pt_cellchunk_encode(&z->val, z->kept.c, z->kept.n)) == 0 &&
            (rv = bound(&z->copy, row, z->kept.c[0].q)) == 0)
            rocksdb_writebatch_put_cf(z->wb, z->e->r.cf[CF_POINTS], (const char *)z->copy.p,
                                      z->copy.len, (const char *)z->val.p, z->val.len);
        if (rv != 0)
            return rv;
    }
    return pt_emb_rocks_iter_error(it);
}

static int erase_one(eraser *z, const pt_erase *x)
{
    int rv;
    if (x->table == PT_TABLE_POINTS) {
        int64_t lo, hi;
        if (offsets(x, &lo, &hi) != 0)
            return PT_EBADREQ;
        if (lo >= hi)
            return 0;
        return erase_points_row(z, x->row, lo, hi);
    }
    if (x->qual_start.n)
        rv = pt_emb_rocks_key(&z->key, x->row.p, x->row.n, 0, x->qual_start.p, x->qual_start.n);
    else
        rv = bound(&z->key, x->row, -1);
    /* One cell ([q, q || 0x00)): a point delete; a range deletion would stay in the way of
     * every later read of the table until compactions drop it. */
    if (rv == 0 && x->qual_start.n && x->qual_end.n == x->qual_start.n + 1 &&
        x->qual_end.p[x->qual_start.n] == 0 &&
        memcmp(x->qual_end.p, x->qual_start.p, x->qual_start.n) == 0) {
        rocksdb_writebatch_delete_cf(z->wb, z->e->r.cf[CF_INDEX], (const char *)z->key.p,
                                     z->key.len);
        return 0;
    }
    if (rv == 0 && x->qual_end.n)
        rv = pt_emb_rocks_key(&z->end, x->row.p, x->row.n, 0, x->qual_end.p, x->qual_end.n);
    else if (rv == 0)
        rv = bound(&z->end, x->row, (int64_t)UINT32_MAX + 1);
    if (rv == 0 && pt_slice_cmp((pt_slice){z->key.p, z->key.len},
                                (pt_slice){z->end.p, z->end.len}) < 0)
        rocksdb_writebatch_delete_range_cf(z->wb, z->e->r.cf[CF_INDEX], (const char *)z->key.p,
                                           z->key.len, (const char *)z->end.p, z->end.len);
    return rv;
}

static int write_batch(eraser *z)
{
    char *msg = NULL;
    rocksdb_write(z->e->r.db, z->e->r.wopts, z->wb, &msg);
    rocksdb_writebatch_clear(z->wb);
    return msg ? pt_emb_rocks_note(&z->e->r, pt_emb_rocks_error(msg)) : 0;
}

/* The head's notes on the chunks of the erased points rows: forgotten. */
static void forget_rows_locked(embedded *e, const pt_erase *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (x[i].table != PT_TABLE_POINTS)
            continue;
        hrow *r = pt_emb_head_find(&e->h, x[i].row.p, x[i].row.n,
                                   pt_emb_head_hash(x[i].row.p, x[i].row.n));
        if (r)
            r->known = 0;
    }
}

int pt_emb_erase(void *state, const pt_erase *x, size_t n)
{
    embedded *e = state;
    for (size_t i = 0; i < n; i++)
        if (x[i].table >= PT_TABLE_COUNT || memchr(x[i].row.p, 0, x[i].row.n))
            return PT_EBADREQ;
    int rv = pt_emb_flusher_sync(e);
    if (rv != 0)
        return rv;
    if (e->sink)
        return pt_backend_erase(e->sink, x, n);
    pthread_mutex_lock(&e->rewrite_mu);
    eraser z = {.e = e, .wb = rocksdb_writebatch_create()};
    pt_buf_init(&z.key, 0);
    pt_buf_init(&z.end, 0);
    pt_buf_init(&z.val, 0);
    pt_buf_init(&z.copy, 0);
    if (!z.wb)
        rv = PT_ENOMEM;
    if (rv == 0)
        rv = pt_emb_ihead_drain(&e->ix);
    if (rv == 0 && (rv = pt_emb_rocks_enter_write(&e->r)) == 0) {
        for (size_t i = 0; i < n && rv == 0; i++) {
            /* The reads see the store without the batch: a second erase of one row reads
             * what the first left, so the batch is written and the view renewed first. */
            int again = i && x[i].table == x[i - 1].table && pt_slice_eq(x[i].row, x[i - 1].row);
            if (again || !z.its.it[0]) {
                if (again)
                    rv = write_batch(&z);
                if (rv == 0)
                    rv = pt_emb_rocks_iter(&e->r, &z.its, CF_POINTS, 0, NULL);
            }
            if (rv == 0)
                rv = erase_one(&z, &x[i]);
        }
        pt_emb_rocks_iters_free(&z.its);
        if (rv == 0)
            rv = write_batch(&z);
        pt_emb_rocks_leave(&e->r);
    }
    if (rv == 0) {
        pthread_mutex_lock(&e->mu);
        forget_rows_locked(e, x, n);
        e->epoch++; /* scans take new iterators */
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_unlock(&e->rewrite_mu);
    if (z.wb)
        rocksdb_writebatch_destroy(z.wb);
    pt_buf_free(&z.key);
    pt_buf_free(&z.end);
    pt_buf_free(&z.val);
    pt_buf_free(&z.copy);
    pt_vcells_free(&z.cells);
    pt_vcells_free(&z.kept);
    return rv;
}
