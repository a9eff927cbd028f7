/*
 * Flush: the rows of the head's frozen generation, sorted, go into RocksDB as chunks
 * (chunk.c) with RocksDB's own WAL off; the points column family is flushed to table files
 * (synced), and only then does the caller drop the frozen cells and their log
 * (points.frozen.wal). A crash anywhere in between replays that log into the head;
 * flushing it again rewrites the same cells with the same values.
 *
 * It runs without the mutex, on the flush thread (or in open, alone): writers append to
 * the other generation meanwhile. So it only reads the frozen cells, which nothing writes
 * until the caller drops them under the mutex; an unsorted row is sorted in a copy, since
 * scans read the frozen cells too.
 *
 * A row's chunks must not overlap, so a flush whose cells fall inside or before the row's
 * existing chunks reads those chunks, merges (the head wins), deletes them and writes the
 * merged cells back. In-order ingest only appends new chunks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"

typedef struct flusher {
    embedded *e;
    unsigned fz; /* the frozen generation */
    const cell *hc; /* the current row's frozen cells, sorted, hn of them */
    uint32_t hn;
    cell *sorted, *tmp; /* copies for sorting a row's cells */
    size_t sorted_cap, tmp_cap;
    rocksdb_writebatch_t *wb;
    rocks_iters its; /* its.it[0]: the flush's reads */
    hrow **rows; /* the head's list of the frozen generation's rows */
    size_t nrows;
    pt_buf key, val;
    vcells old, merged;
    pt_buf oldbytes; /* copies of the chunks read back */
} flusher;

static int row_key_cmp(const void *x, const void *y)
{
    const hrow *a = *(const hrow *const *)x, *b = *(const hrow *const *)y;
    return pt_slice_cmp((pt_slice){a->key, a->keylen}, (pt_slice){b->key, b->keylen});
}

/* f->key = the key of r's chunk starting at q. */
static int chunk_key(flusher *f, const hrow *r, uint32_t q)
{
    uint8_t qb[4];
    pt_put_be32(qb, q);
    return pt_emb_rocks_key(&f->key, r->key, r->keylen, 0, qb, 4);
}

/* The flush's reads need an iterator that sees what the flush wrote so far: an older one
 * would step over every newer entry of the memtable, invisible to it, on each backward
 * seek, which made a flush quadratic. */
static int fl_iter(flusher *f)
{
    return pt_emb_rocks_iter(&f->e->r, &f->its, CF_POINTS, 0, NULL);
}

static int fl_commit(flusher *f)
{
    if (rocksdb_writebatch_count(f->wb) == 0)
        return 0;
    char *msg = NULL;
    rocksdb_write(f->e->r.db, f->e->r.flush_wopts, f->wb, &msg);
    rocksdb_writebatch_clear(f->wb);
    return msg ? pt_emb_rocks_error(msg) : fl_iter(f);
}

static int fl_put(flusher *f, const hrow *r, const vcell *c, size_t n)
{
    int rv;
    if ((rv = chunk_key(f, r, c[0].q)) != 0 || (rv = pt_emb_chunk_encode(&f->val, c, n)) != 0)
        return rv;
    rocksdb_writebatch_put_cf(f->wb, f->e->r.cf[CF_POINTS], (const char *)f->key.p, f->key.len,
                              (const char *)f->val.p, f->val.len);
    return 0;
}

/* Writes cells as chunks of at most CHUNK_MAX cells of about equal size and records the
 * last one as the row's last chunk. */
static int fl_put_all(flusher *f, hrow *r, const vcell *c, size_t n)
{
    size_t pieces = (n + CHUNK_MAX - 1) / CHUNK_MAX, done = 0;
    for (size_t i = 0; i < pieces; i++) {
        size_t take = (n - done) / (pieces - i);
        int rv = fl_put(f, r, c + done, take);
        if (rv != 0)
            return rv;
        r->has_last = 1;
        r->last_first = c[done].q;
        r->last_max = c[done + take - 1].q;
        r->last_n = (uint32_t)take;
        done += take;
    }
    return 0;
}

static int it_row_is(rocksdb_iterator_t *it, const hrow *r, uint32_t *first, const char **v,
                     size_t *vn)
{
    if (!rocksdb_iter_valid(it))
        return 0;
    size_t kn;
    const char *k = rocksdb_iter_key(it, &kn);
    pt_slice row;
    if (pt_emb_chunk_key_split(k, kn, &row, first) != 0)
        return 0;
    if (!pt_slice_eq(row, (pt_slice){r->key, r->keylen}))
        return 0;
    *v = rocksdb_iter_value(it, vn);
    return 1;
}

/* Learns the row's last chunk from RocksDB. */
static int fl_learn_last(flusher *f, hrow *r)
{
    rocksdb_iterator_t *it = f->its.it[0];
    int rv = chunk_key(f, r, UINT32_MAX);
    if (rv != 0)
        return rv;
    rocksdb_iter_seek_for_prev(it, (const char *)f->key.p, f->key.len);
    uint32_t first;
    const char *v;
    size_t vn;
    r->known = 1;
    r->has_last = 0;
    if (it_row_is(it, r, &first, &v, &vn)) {
        chunk c;
        if (pt_emb_chunk_parse((const uint8_t *)v, vn, &c) != 0 ||
            pt_emb_chunk_last(&c, &r->last_max) != 0)
            return PT_EINTERNAL;
        r->has_last = 1;
        r->last_first = first;
        r->last_n = c.count;
    }
    return pt_emb_rocks_iter_error(it);
}

/* Reads the chunks the head cells [h_min, h_max] touch (from the one holding or preceding
 * h_min), deletes them, and writes them back merged with the head cells. */
static int fl_merge_row(flusher *f, hrow *r)
{
    rocksdb_iterator_t *it = f->its.it[0];
    uint32_t h_min = f->hc[0].q, h_max = f->hc[f->hn - 1].q;
    int rv = chunk_key(f, r, h_min);
    if (rv != 0)
        return rv;
    uint32_t first;
    const char *v;
    size_t vn;
    rocksdb_iter_seek_for_prev(it, (const char *)f->key.p, f->key.len);
    if (!it_row_is(it, r, &first, &v, &vn)) {
        if ((rv = pt_emb_rocks_key(&f->key, r->key, r->keylen, 0, NULL, 0)) != 0)
            return rv;
        rocksdb_iter_seek(it, (const char *)f->key.p, f->key.len);
    }
    /* Copy the chunks first: iterator memory does not outlive next(). */
    pt_buf_reset(&f->oldbytes);
    size_t nchunks = 0;
    while (it_row_is(it, r, &first, &v, &vn) && first <= h_max) {
        uint8_t *dst = pt_buf_room(&f->oldbytes, vn + 8);
        if (!dst)
            return PT_ENOMEM;
        pt_put_le32(dst, (uint32_t)vn);
        pt_put_le32(dst + 4, first);
        memcpy(dst + 8, v, vn);
        pt_buf_commit(&f->oldbytes, vn + 8);
        nchunks++;
        rocksdb_iter_next(it);
    }
    int reached_end = !it_row_is(it, r, &first, &v, &vn);
    if ((rv = pt_emb_rocks_iter_error(it)) != 0)
        return rv;

    vcells_reset(&f->old);
    for (size_t off = 0, i = 0; i < nchunks; i++) {
        const uint8_t *at = f->oldbytes.p + off;
        uint32_t len = pt_get_le32(at);
        chunk c;
        if (pt_emb_chunk_parse(at + 8, len, &c) != 0)
            return PT_EINTERNAL;
        if ((rv = pt_emb_chunk_cells(&c, &f->old)) != 0 ||
            (rv = chunk_key(f, r, pt_get_le32(at + 4))) != 0)
            return rv;
        rocksdb_writebatch_delete_cf(f->wb, f->e->r.cf[CF_POINTS], (const char *)f->key.p,
                                     f->key.len);
        off += 8 + len;
    }

    f->merged.n = 0;
    size_t i = 0, j = 0;
    while (i < f->old.n || j < f->hn) {
        const vcell *o = i < f->old.n ? &f->old.c[i] : NULL;
        const cell *hc = j < f->hn ? &f->hc[j] : NULL;
        if (hc && (!o || hc->q <= o->q)) {
            if (o && o->q == hc->q)
                i++; /* the head wins */
            rv = vcells_push(&f->merged, hc->q, hc->vlen, cell_val(hc));
            j++;
        } else {
            rv = vcells_push(&f->merged, o->q, o->vlen, vcell_val(o));
            i++;
        }
        if (rv != 0)
            return rv;
    }
    uint32_t lf = r->last_first, lm = r->last_max, ln = r->last_n;
    int had = r->has_last;
    if ((rv = fl_put_all(f, r, f->merged.c, f->merged.n)) != 0)
        return rv;
    if (!reached_end && had) {
        /* A later chunk of the row was left alone: it is still the last one. */
        r->last_first = lf;
        r->last_max = lm;
        r->last_n = ln;
    }
    return 0;
}

/* f->hc = the row's frozen cells in qualifier order, the last write of each. */
static int fl_cells(flusher *f, const hrow *r)
{
    const hcells *s = &r->s[f->fz];
    const cell *c;
    uint32_t n;
    int rv = pt_emb_hcells_get(s, &f->sorted, &f->sorted_cap, &c, &n);
    if (rv != 0)
        return rv;
    f->hc = c;
    f->hn = n;
    if (s->sorted)
        return 0;
    if ((rv = pt_array_reserve(&f->sorted, &f->sorted_cap, n, sizeof(cell), 0)) != 0 ||
        (rv = pt_array_reserve(&f->tmp, &f->tmp_cap, n, sizeof(cell), 0)) != 0)
        return rv;
    if (c != f->sorted)
        memcpy(f->sorted, c, (size_t)n * sizeof(cell));
    f->hc = f->sorted;
    f->hn = pt_emb_cells_sort(f->sorted, f->tmp, n);
    return 0;
}

static int fl_row(flusher *f, hrow *r)
{
    int rv = fl_cells(f, r);
    if (rv != 0)
        return rv;
    if (!r->known && (rv = fl_learn_last(f, r)) != 0)
        return rv;
    if (r->has_last && (f->hc[0].q <= r->last_max || r->last_n < CHUNK_SMALL))
        return fl_merge_row(f, r);
    /* In-order ingest into a row whose last chunk is big enough: a new chunk. */
    f->merged.n = 0;
    for (uint32_t i = 0; i < f->hn; i++)
        if ((rv = vcells_push(&f->merged, f->hc[i].q, f->hc[i].vlen, cell_val(&f->hc[i]))) != 0)
            return rv;
    return fl_put_all(f, r, f->merged.c, f->merged.n);
}

/* Writes the sorted rows and makes them durable in RocksDB. */
static int fl_write(flusher *f, emb_hook hook, void *ud)
{
    f->wb = rocksdb_writebatch_create();
    if (!f->wb)
        return PT_ENOMEM;
    int rv = fl_iter(f), committed = 0;
    for (size_t i = 0; i < f->nrows && rv == 0; i++) {
        rv = fl_row(f, f->rows[i]);
        size_t sz = 0;
        rocksdb_writebatch_data(f->wb, &sz);
        if (rv == 0 && sz >= (8u << 20)) {
            rv = fl_commit(f);
            if (rv == 0 && !committed++ && hook)
                rv = hook(ud, EMB_HOOK_WRITTEN);
        }
    }
    if (rv == 0)
        rv = fl_commit(f);
    if (rv == 0 && !committed && hook)
        rv = hook(ud, EMB_HOOK_WRITTEN);
    if (rv == 0) {
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        char *msg = NULL;
        rocksdb_flush_cf(f->e->r.db, fo, f->e->r.cf[CF_POINTS], &msg);
        rocksdb_flushoptions_destroy(fo);
        if (msg)
            rv = pt_emb_rocks_error(msg);
    }
    if (rv == 0 && hook)
        rv = hook(ud, EMB_HOOK_DURABLE);
    return rv;
}

int pt_emb_flush_frozen(embedded *e, unsigned fz, emb_hook hook, void *ud)
{
    head *h = &e->h;
    flusher f = {.e = e, .fz = fz, .rows = h->dirty[fz], .nrows = h->ndirty[fz]};
    int rv = 0;
    if (f.nrows > 0) {
        qsort(f.rows, f.nrows, sizeof(*f.rows), row_key_cmp);
        if ((rv = fl_write(&f, hook, ud)) != 0) {
            /* What we believed about the rows' last chunks may be wrong now. */
            for (size_t i = 0; i < f.nrows; i++)
                f.rows[i]->known = 0;
        }
    }
    pt_emb_rocks_iters_free(&f.its);
    if (f.wb)
        rocksdb_writebatch_destroy(f.wb);
    pt_buf_free(&f.key);
    pt_buf_free(&f.val);
    vcells_free(&f.old);
    vcells_free(&f.merged);
    free(f.sorted);
    free(f.tmp);
    pt_buf_free(&f.oldbytes);
    return rv;
}
