/*
 * Scans of the points table: the rows of a range are the union of the head's rows and the
 * rows with chunks in RocksDB, in key order; a row's cells are its head cells merged with
 * its chunks' cells. Newest wins: the head's current generation, then its frozen one
 * (being flushed), then the chunks.
 *
 * A flush ends (frozen cells dropped, epoch moved) in one critical section: a row copied
 * under mu either still has its frozen cells, or the epoch has moved and the iterator is
 * renewed to see the chunks they became.
 *
 * The mutex is taken only to copy one row's head cells (or the keys of a range's head
 * rows) and to refresh a RocksDB iterator when a flush happened since it was made; the
 * callback runs without it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedded_int.h"
#include "error.h"

typedef struct pscan {
    embedded *e;
    const pt_scan *s;
    pt_cell_fn fn;
    void *ud;
    rocks_iters its;
    uint64_t epoch[2];
    pt_buf seek, row;
    pt_vcells hc; /* the current row's head cells (long values in hbytes) */
    pt_vcells cc; /* the current chunk's cells */
    pt_buf xs;    /* the current chunk as a stream, when stored otherwise */
    int no_chunks; /* the head knows the current row has no chunk in the window */
    int young;     /* the last row read began inside the window: seek its start first */
    uint32_t span; /* seek a row's chunks from this far before the window (pt_emb_seek_chunks) */
    int spans_seen; /* span is this scan's own: the chunks it found holding the start */
    uint64_t qlo, qhi; /* the scan's qualifier range as numbers: [qlo, qhi) */
    pt_buf hbytes;
    cell *fsort; /* a sorted copy of a row's frozen cells, and room to sort it */
    size_t fsort_cap;
    cell *cur; /* a row's current cells, when they had to be decoded */
    size_t cur_cap;
    size_t rows;
    int done;
    /* head rows of the current range, sorted: keys back to back in keys */
    pt_buf keys;
    pt_slice *hrows;
    size_t nh, hcap;
    hrow **found; /* scratch for collecting them */
    size_t found_cap;
} pscan;

static pt_slice buf_slice(const pt_buf *b)
{
    return (pt_slice){b->p, b->len};
}

static int iter_locked(pscan *sc, int one_row)
{
    if (sc->its.it[one_row] && sc->epoch[one_row] == sc->e->epoch)
        return 0;
    sc->epoch[one_row] = sc->e->epoch;
    return pt_emb_rocks_iter(&sc->e->r, &sc->its, CF_POINTS, one_row, NULL);
}

uint64_t pt_emb_qual_bound(pt_slice b)
{
    uint8_t q[4] = {0};
    if (b.n)
        memcpy(q, b.p, b.n < 4 ? b.n : 4);
    return (uint64_t)pt_get_be32(q) + (b.n > 4); /* a longer b is past its first four bytes */
}

/* Is the qualifier q inside the scan's [qual_start, qual_end)? */
static int in_quals(const pscan *sc, uint32_t q)
{
    return q >= sc->qlo && q < sc->qhi;
}

static int push_locked(pscan *sc, const cell *c)
{
    if (!in_quals(sc, c->q))
        return 0;
    const uint8_t *dst = sc->hbytes.p + sc->hbytes.len;
    int rv = pt_buf_append(&sc->hbytes, cell_val(c), c->vlen);
    return rv ? rv : pt_vcells_push(&sc->hc, c->q, c->vlen, dst);
}

/* Copies row's head cells in the qualifier range: both generations merged, the current
 * one winning. The frozen cells are only read: the flush thread reads them meanwhile. */
static int copy_head_locked(pscan *sc, pt_slice row)
{
    head *h = &sc->e->h;
    sc->hc.n = 0;
    sc->no_chunks = 0;
    pt_buf_reset(&sc->hbytes);
    hrow *r = pt_emb_head_find(h, row.p, row.n, pt_emb_head_hash(row.p, row.n));
    if (!r)
        return 0;
    /* What the last flush of the row's shard learnt of its chunks holds until the shard's
     * next flush starts (the flush thread writes it): no chunk at all, or the last one
     * ending before the window. Only deletions (retention) change RocksDB meanwhile. */
    unsigned k = pt_emb_shard_of(r->hash), cur = h->sh[k].cur;
    sc->no_chunks = !h->sh[k].flushing && r->known &&
                    (!r->has_last || r->last_max < sc->qlo);
    int rv = pt_emb_head_normalize(h, r);
    if (rv != 0)
        return rv;
    const hcells *fz = &r->s[cur ^ 1];
    const cell *cc, *fc;
    uint32_t cn, fn;
    if ((rv = pt_emb_hcells_get(&r->s[cur], &sc->cur, &sc->cur_cap, &cc, &cn)) != 0 ||
        (rv = pt_emb_hcells_get(fz, &sc->fsort, &sc->fsort_cap, &fc, &fn)) != 0)
        return rv;
    if (!fz->sorted) {
        int decoded = fc == sc->fsort; /* the reserve may move them */
        if ((rv = pt_array_reserve(&sc->fsort, &sc->fsort_cap, 2 * (size_t)fn, sizeof(cell), 0)))
            return rv;
        if (!decoded)
            memcpy(sc->fsort, fc, (size_t)fn * sizeof(cell));
        fn = pt_emb_cells_sort(sc->fsort, sc->fsort + fn, fn);
        fc = sc->fsort;
    }
    size_t vb = 0;
    for (uint32_t i = 0; i < cn; i++)
        vb += cc[i].vlen;
    for (uint32_t i = 0; i < fn; i++)
        vb += fc[i].vlen;
    /* Reserved once: the cells point into hbytes, which must not move. */
    if ((rv = pt_buf_reserve(&sc->hbytes, vb ? vb : 1)) != 0)
        return rv;
    uint32_t i = 0, j = 0;
    while (rv == 0 && (i < fn || j < cn)) {
        if (j == cn || (i < fn && fc[i].q < cc[j].q)) {
            rv = push_locked(sc, &fc[i++]);
        } else {
            if (i < fn && fc[i].q == cc[j].q)
                i++; /* overwritten since the freeze */
            rv = push_locked(sc, &cc[j++]);
        }
    }
    return rv;
}

/* Counts the row when its first cell goes out; 0 when the row limit was reached. */
static int row_starts(pscan *sc, int *row_started)
{
    if (!*row_started) {
        if (sc->s->row_limit && sc->rows == sc->s->row_limit) {
            sc->done = 1;
            return 0;
        }
        sc->rows++;
        *row_started = 1;
    }
    return 1;
}

/* A callback's answer: stop (1), go on (0) or fail (< 0). */
static int answered(pscan *sc, int rv)
{
    if (rv > 0)
        sc->done = 1;
    return rv < 0 ? rv : 0;
}

static int emit(pscan *sc, pt_slice row, int *row_started, uint32_t q, uint32_t vlen,
                const uint8_t *v)
{
    if (!row_starts(sc, row_started))
        return 0;
    uint8_t qb[4];
    pt_put_be32(qb, q);
    return answered(sc, sc->fn(sc->ud, row, (pt_slice){qb, 4}, (pt_slice){v ? v : qb, vlen}));
}

/* Hands over chunk c (qualifiers first to last) as its stream when the scan takes streams
 * and the chunk can go as one: a chunk of 8-byte values inside the window whose cells no
 * head cell shadows (an XOR chunk, fmt 3, as it is; fmt 1 and 4 encoded as one). *last is
 * set whenever it is known (for the walk's end check); *sent says whether the chunk went. */
static int emit_stream(pscan *sc, pt_slice row, int *row_started, const pt_cellchunk *c,
                       uint32_t first, size_t hi, uint32_t *last, int *sent)
{
    *sent = 0;
    if (!sc->s->stream || !pt_cellchunk_floats(c) || first < sc->qlo ||
        c->count > PT_STREAM_MAX_SAMPLES)
        return 0;
    int rv = pt_cellchunk_last(c, last);
    if (rv != 0)
        return rv;
    if (*last >= sc->qhi || (hi < sc->hc.n && sc->hc.c[hi].q <= *last))
        return 0;
    *sent = 1;
    if (!row_starts(sc, row_started))
        return 0;
    pt_slice stream;
    if ((rv = pt_cellchunk_to_stream(c, &sc->cc, &sc->xs, &stream)) != 0)
        return rv;
    const pt_stream_to *to = sc->s->stream;
    return answered(sc, to->fn(to->ud, row, first, *last, c->count, stream));
}

/* Emits the row's head cells, from *hi on, whose qualifiers are below bound. */
static int emit_head_below(pscan *sc, pt_slice row, int *started, size_t *hi, uint64_t bound)
{
    int rv = 0;
    while (rv == 0 && *hi < sc->hc.n && sc->hc.c[*hi].q < bound && !sc->done) {
        const pt_vcell *x = &sc->hc.c[(*hi)++];
        rv = emit(sc, row, started, x->q, x->vlen, pt_vcell_val(x));
    }
    return rv;
}

/* Is the iterator on a chunk of row? Its first qualifier goes to *first. */
static int on_row(rocksdb_iterator_t *it, pt_slice row, uint32_t *first)
{
    if (!rocksdb_iter_valid(it))
        return 0;
    size_t kn;
    pt_slice kr;
    const char *k = rocksdb_iter_key(it, &kn);
    return pt_emb_chunk_key_split(k, kn, &kr, first) == 0 && pt_slice_eq(kr, row);
}

/* Puts it on key = row || 0x00 || q (q: 4 bytes, or none for the row's start). */
static int seek_key(rocksdb_iterator_t *it, pt_buf *key, pt_slice row, const uint8_t *q,
                    size_t qn, int for_prev)
{
    int rv = pt_emb_rocks_key(key, row.p, row.n, 0, q, qn);
    if (rv != 0)
        return rv;
    if (for_prev)
        rocksdb_iter_seek_for_prev(it, (const char *)key->p, key->len);
    else
        rocksdb_iter_seek(it, (const char *)key->p, key->len);
    return 0;
}

/*
 * The chunk holding the window's start is the row's last one beginning at or before it.
 * SeekForPrev finds it, but RocksDB then steps to the key before to make sure it has the
 * newest version of the one it landed on: when that chunk begins its data block (every
 * time, where a chunk fills a block), the block before is read too, and a walk onward
 * turns the iterator around (another seek of every level). Chunks of a row do not
 * overlap, so when a chunk began at most span before the window, a forward seek from
 * there lands on it, or on one wholly before the window that the walk steps over. When
 * nothing of the row begins between there and the window's start, an older chunk may
 * still hold it (one longer than span): then SeekForPrev. A row that begins inside the
 * window needs its start sought; one read's rows are alike, so the scan remembers
 * (*young) which way its last row went and tries that first.
 */
int pt_emb_seek_chunks(rocksdb_iterator_t *it, pt_buf *key, pt_slice row, pt_slice qual_start,
                       uint32_t span, int *young)
{
    if (!qual_start.n)
        return seek_key(it, key, row, NULL, 0, 0);
    uint64_t qlo = pt_emb_qual_bound(qual_start);
    uint32_t first;
    int rv;
    if (*young) {
        if ((rv = seek_key(it, key, row, NULL, 0, 0)) != 0)
            return rv;
        if (!on_row(it, row, &first) || first >= qlo)
            return 0; /* no chunk at all, or nothing before the window */
        *young = 0;
    }
    if (span && qlo <= UINT32_MAX) {
        uint8_t q[4];
        pt_put_be32(q, qlo > span ? (uint32_t)(qlo - span) : 0);
        if ((rv = seek_key(it, key, row, q, 4, 0)) != 0)
            return rv;
        /* From the row's first chunk (the seek began at 0) or one at or before the start. */
        if (qlo <= span || (on_row(it, row, &first) && first <= qlo))
            return 0;
    }
    if ((rv = seek_key(it, key, row, qual_start.p, qual_start.n, 1)) != 0)
        return rv;
    if (on_row(it, row, &first))
        return 0;
    *young = 1;
    return seek_key(it, key, row, NULL, 0, 0);
}

/* Emits one row: its head cells merged with its chunks. */
static int scan_row(pscan *sc, pt_slice row_in, int one_row)
{
    int rv;
    /* row_in may point into iterator memory that the refresh below frees. */
    if ((rv = pt_emb_rocks_key(&sc->row, row_in.p, row_in.n, -1, NULL, 0)) != 0)
        return rv;
    pt_slice row = buf_slice(&sc->row);
    /* The cells are handed out with the caller's own bytes when the range is this one row:
     * a reader can tell its rows apart by address (read.c). */
    pt_slice out = one_row ? row_in : row;
    /* The one-row iterator stops at the row's end by itself: when the window reaches past
     * the row's last chunk, RocksDB does not read the block after it to find that out. */
    if (one_row && (rv = pt_emb_rocks_iters_row(&sc->its, row)) != 0)
        return rv;

    pthread_mutex_lock(&sc->e->mu);
    rv = copy_head_locked(sc, row);
    if (rv == 0 && !sc->no_chunks)
        rv = iter_locked(sc, one_row);
    pthread_mutex_unlock(&sc->e->mu);
    if (rv != 0)
        return rv;
    int started = 0;
    size_t hi = 0;
    if (sc->no_chunks)
        goto head_only;
    rocksdb_iterator_t *it = sc->its.it[one_row];

    pt_slice kr = {0};
    uint32_t first = 0;
    if ((rv = pt_emb_seek_chunks(it, &sc->seek, row, sc->s->qual_start, sc->span,
                                 &sc->young)) != 0)
        return rv;
    while (!sc->done && rocksdb_iter_valid(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (pt_emb_chunk_key_split(k, kn, &kr, &first) != 0)
            return PT_EINTERNAL;
        if (!pt_slice_eq(kr, row))
            break;
        if (first >= sc->qhi)
            break;
        const char *v = rocksdb_iter_value(it, &vn);
        pt_cellchunk c;
        if (pt_cellchunk_parse((const uint8_t *)v, vn, &c) != 0)
            return PT_EINTERNAL;
        /* The head cells before the chunk go first, whichever way the chunk goes. */
        if ((rv = emit_head_below(sc, out, &started, &hi, first)) != 0)
            return rv;
        uint32_t last = 0;
        int sent;
        if (!sc->done && (rv = emit_stream(sc, out, &started, &c, first, hi, &last, &sent)) != 0)
            return rv;
        if (sc->done)
            break;
        if (!sent) {
            /* Only the window's cells: a chunk holds up to 1,024 samples, and a short
             * window of an old row needs a few of them. */
            pt_vcells_reset(&sc->cc);
            if ((rv = pt_cellchunk_cells_in(&c, sc->qlo, sc->qhi, &sc->cc, &last)) != 0)
                return rv;
            for (size_t i = 0; i < sc->cc.n && !sc->done; i++) {
                uint32_t q = sc->cc.c[i].q, len = sc->cc.c[i].vlen;
                if ((rv = emit_head_below(sc, out, &started, &hi, q)) != 0)
                    return rv;
                if (sc->done)
                    break;
                if (hi < sc->hc.n && sc->hc.c[hi].q == q)
                    continue; /* the head's newer value comes next */
                if ((rv = emit(sc, out, &started, q, len, pt_vcell_val(&sc->cc.c[i]))) != 0)
                    return rv;
            }
        }
        if (first <= sc->qlo && last >= sc->qlo && sc->s->qual_start.n) {
            /* It holds the window's start: the next rows are sought from this far back. */
            if (!sc->spans_seen || last - first > sc->span)
                sc->span = last - first;
            sc->spans_seen = 1;
        }
        /* A row's chunks do not overlap (flush.c): when this one reaches the window's end,
         * the next starts after it. Not stepping there also spares the iterator turning
         * around after SeekForPrev, which costs another seek. */
        if ((uint64_t)last + 1 >= sc->qhi)
            break;
        rocksdb_iter_next(it);
    }
    if ((rv = pt_emb_rocks_iter_error(it)) != 0)
        return rv;
head_only:
    return emit_head_below(sc, out, &started, &hi, UINT64_MAX);
}

static int slice_ptr_cmp(const void *x, const void *y)
{
    return pt_slice_cmp(*(const pt_slice *)x, *(const pt_slice *)y);
}

/* Copies the keys of the head rows with cells in range r, sorted: the rows themselves may
 * be evicted once mu is released. */
static int head_rows_locked(pscan *sc, const pt_row_range *r)
{
    head *h = &sc->e->h;
    size_t n = 0, bytes = 0;
    int rv;
    sc->nh = 0;
    pt_buf_reset(&sc->keys);
    if ((rv = pt_emb_head_collect(h, r, &sc->found, &sc->found_cap, &n)) != 0)
        return rv;
    if (sc->s->visited)
        *sc->s->visited += h->nrows; /* a range is found by walking the whole head */
    hrow **found = sc->found;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        bytes += found[i]->keylen;
    /* Reserved once: the slices point into keys, which must not move. */
    if ((rv = pt_buf_reserve(&sc->keys, bytes)) != 0 ||
        (rv = pt_array_reserve(&sc->hrows, &sc->hcap, n, sizeof(*sc->hrows), 0)) != 0)
        return rv;
    for (size_t i = 0; i < n; i++) {
        sc->hrows[sc->nh++] = (pt_slice){sc->keys.p + sc->keys.len, found[i]->keylen};
        memcpy(sc->keys.p + sc->keys.len, found[i]->key, found[i]->keylen);
        pt_buf_commit(&sc->keys, found[i]->keylen);
    }
    qsort(sc->hrows, sc->nh, sizeof(*sc->hrows), slice_ptr_cmp);
    return 0;
}

static int scan_range(pscan *sc, const pt_row_range *r)
{
    int bounded = r->end.n > 0;
    int rv;
    if (pt_emb_rocks_one_row(r)) {
        /* One row: scan_row finds its head cells and its chunks itself. */
        size_t before = sc->rows;
        rv = scan_row(sc, r->start, 1);
        if (sc->s->visited)
            *sc->s->visited += sc->rows > before;
        return rv;
    }
    pt_buf upper = PT_BUF_INIT(0), cur = PT_BUF_INIT(0);

    pthread_mutex_lock(&sc->e->mu);
    rv = iter_locked(sc, 0);
    if (rv == 0)
        rv = head_rows_locked(sc, r);
    pthread_mutex_unlock(&sc->e->mu);
    if (rv != 0)
        goto out;
    if (bounded && (rv = pt_emb_rocks_row_bound(&upper, r->end)) != 0)
        goto out;
    if ((rv = pt_emb_rocks_row_bound(&sc->seek, r->start)) != 0)
        goto out;
    if (bounded && pt_slice_cmp(buf_slice(&sc->seek), buf_slice(&upper)) >= 0)
        goto out;
    rocksdb_iter_seek(sc->its.it[0], (const char *)sc->seek.p, sc->seek.len);

    size_t hi = 0;
    while (!sc->done) {
        rocksdb_iterator_t *it = sc->its.it[0];
        pt_slice rrow = {0};
        int have_r = 0;
        if (rocksdb_iter_valid(it)) {
            size_t kn;
            uint32_t first;
            const char *k = rocksdb_iter_key(it, &kn);
            if (!bounded ||
                pt_slice_cmp((pt_slice){(const uint8_t *)k, kn}, buf_slice(&upper)) < 0) {
                if (pt_emb_chunk_key_split(k, kn, &rrow, &first) != 0) {
                    rv = PT_EINTERNAL;
                    goto out;
                }
                have_r = 1;
            }
        } else if ((rv = pt_emb_rocks_iter_error(it)) != 0) {
            goto out;
        }
        int have_h = hi < sc->nh;
        if (!have_r && !have_h)
            break;
        pt_slice row;
        if (have_r && have_h) {
            int c = pt_slice_cmp(rrow, sc->hrows[hi]);
            row = c <= 0 ? rrow : sc->hrows[hi];
            if (c >= 0)
                hi++;
        } else if (have_r) {
            row = rrow;
        } else {
            row = sc->hrows[hi++];
        }
        if ((rv = pt_emb_rocks_key(&cur, row.p, row.n, -1, NULL, 0)) != 0)
            goto out;
        if (sc->s->visited)
            (*sc->s->visited)++;
        if ((rv = scan_row(sc, row, 0)) != 0)
            goto out;
        /* Next row: the first key after every chunk of this one. */
        if ((rv = pt_emb_rocks_key(&sc->seek, cur.p, cur.len, 1, NULL, 0)) != 0)
            goto out;
        rocksdb_iter_seek(sc->its.it[0], (const char *)sc->seek.p, sc->seek.len);
    }
out:
    pt_buf_free(&upper);
    pt_buf_free(&cur);
    return rv;
}

/* ---- a write-back store: the head merged with the sink's scan ---- */

/* A head row copied for the scan: its key and its cells in the window, cells[first ..
 * first + n) of the snapshot. */
typedef struct hsnap_row {
    pt_slice key;
    size_t first, n;
} hsnap_row;

typedef struct sinkscan {
    pscan *sc;
    pt_arena a;     /* the rows' keys and long values */
    pt_vcell *c;    /* every row's cells, row after row */
    size_t nc, ccap;
    hsnap_row *rows;
    size_t nrows, rcap;
    size_t next;      /* the first head row not yet reached */
    size_t ci, cend;  /* the current row's head cells left: c[ci .. cend) */
    pt_buf row;       /* the current row, the sink's (its slices last one call only) */
    int in_row, started;
} sinkscan;

/* Adds the head cells sc->hc copied for key to the snapshot. */
static int snap_add(sinkscan *ss, pt_slice key)
{
    pscan *sc = ss->sc;
    if (sc->hc.n == 0)
        return 0;
    int rv = pt_array_reserve(&ss->rows, &ss->rcap, ss->nrows + 1, sizeof(*ss->rows), 0);
    if (rv == 0)
        rv = pt_array_reserve(&ss->c, &ss->ccap, ss->nc + sc->hc.n, sizeof(*ss->c), 0);
    uint8_t *k = rv == 0 ? pt_arena_alloc(&ss->a, key.n) : NULL;
    if (!k)
        return rv ? rv : PT_ENOMEM;
    memcpy(k, key.p, key.n);
    ss->rows[ss->nrows++] = (hsnap_row){{k, key.n}, ss->nc, sc->hc.n};
    for (size_t i = 0; i < sc->hc.n; i++) {
        pt_vcell x = sc->hc.c[i];
        if (x.vlen > 8) { /* hc's bytes are reused for the next row */
            uint8_t *v = pt_arena_alloc(&ss->a, x.vlen);
            if (!v)
                return PT_ENOMEM;
            x.v.p = memcpy(v, x.v.p, x.vlen);
        }
        ss->c[ss->nc++] = x;
    }
    return 0;
}

/* Adds the head's cells of range r to the snapshot (mu held). */
static int snap_range_locked(sinkscan *ss, const pt_row_range *r)
{
    pscan *sc = ss->sc;
    int rv;
    if (pt_emb_rocks_one_row(r)) {
        if ((rv = copy_head_locked(sc, r->start)) == 0)
            rv = snap_add(ss, r->start);
        return rv;
    }
    if ((rv = head_rows_locked(sc, r)) != 0)
        return rv;
    for (size_t i = 0; i < sc->nh && rv == 0; i++)
        if ((rv = copy_head_locked(sc, sc->hrows[i])) == 0)
            rv = snap_add(ss, sc->hrows[i]);
    return rv;
}

static pt_slice cur_row(const sinkscan *ss)
{
    return (pt_slice){ss->row.p, ss->row.len};
}

/* Emits the current row's head cells left below bound. */
static int head_below(sinkscan *ss, uint64_t bound)
{
    int rv = 0;
    while (rv == 0 && ss->ci < ss->cend && ss->c[ss->ci].q < bound && !ss->sc->done) {
        const pt_vcell *x = &ss->c[ss->ci++];
        rv = emit(ss->sc, cur_row(ss), &ss->started, x->q, x->vlen, pt_vcell_val(x));
    }
    return rv;
}

/* Makes key the current row, with the head cells of snapshot row i (none: i = SIZE_MAX). */
static int row_enter(sinkscan *ss, pt_slice key, size_t i)
{
    pt_buf_reset(&ss->row);
    if (pt_buf_append(&ss->row, key.p, key.n) != 0)
        return PT_ENOMEM;
    ss->in_row = 1;
    ss->started = 0;
    ss->ci = ss->cend = 0;
    if (i != SIZE_MAX) {
        ss->ci = ss->rows[i].first;
        ss->cend = ss->ci + ss->rows[i].n;
    }
    return 0;
}

/* Ends the current row (its head cells left go out), then emits the head rows before
 * key (every one left for an empty key). */
static int rows_before(sinkscan *ss, pt_slice key)
{
    int rv = ss->in_row ? head_below(ss, UINT64_MAX) : 0;
    ss->in_row = 0;
    while (rv == 0 && !ss->sc->done && ss->next < ss->nrows &&
           (!key.n || pt_slice_cmp(ss->rows[ss->next].key, key) < 0)) {
        size_t i = ss->next++;
        if ((rv = row_enter(ss, ss->rows[i].key, i)) == 0)
            rv = head_below(ss, UINT64_MAX);
        ss->in_row = 0;
    }
    return rv;
}

/* pt_cell_fn over the sink's cells: merges them with the snapshot's. */
static int sink_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    sinkscan *ss = ud;
    pscan *sc = ss->sc;
    if (qual.n != 4)
        return PT_EINTERNAL; /* the points schema's qualifiers are 4 bytes */
    int rv = 0;
    if (!ss->in_row || !pt_slice_eq(row, cur_row(ss))) {
        if ((rv = rows_before(ss, row)) != 0 || sc->done)
            return rv ? rv : 1;
        int same = ss->next < ss->nrows && pt_slice_eq(ss->rows[ss->next].key, row);
        if ((rv = row_enter(ss, row, same ? ss->next++ : SIZE_MAX)) != 0)
            return rv;
    }
    uint32_t q = pt_get_be32(qual.p);
    if ((rv = head_below(ss, q)) != 0 || sc->done)
        return rv ? rv : 1;
    if (ss->ci < ss->cend && ss->c[ss->ci].q == q) {
        const pt_vcell *x = &ss->c[ss->ci++]; /* the head's is as new or newer */
        rv = emit(sc, row, &ss->started, q, x->vlen, pt_vcell_val(x));
    } else {
        rv = emit(sc, row, &ss->started, q, (uint32_t)value.n, value.p);
    }
    return rv ? rv : sc->done;
}

/* The head's cells of every range are copied under mu before the sink is read: a flush
 * that ends meanwhile has put them into the sink before it drops them, so every cell is
 * in the copy, the sink's scan, or both (the head's copy wins then: the same value or a
 * newer one). The ranges are sorted and apart, so the copy is in row order; the sink gets
 * them all in one scan (one round trip on Bigtable, not one a range). */
static int scan_sink(pscan *sc)
{
    sinkscan ss = {.sc = sc, .row = PT_BUF_INIT(0)};
    pt_arena_init(&ss.a, 64 * 1024, 0);
    int rv = 0;
    pthread_mutex_lock(&sc->e->mu);
    for (size_t i = 0; i < sc->s->nranges && rv == 0; i++)
        rv = snap_range_locked(&ss, &sc->s->ranges[i]);
    pthread_mutex_unlock(&sc->e->mu);
    if (rv == 0 && ss.nrows == 0 && !sc->s->row_limit) {
        /* Nothing in the head: the sink's cells are the answer as they come. */
        rv = pt_backend_scan(sc->e->sink, sc->s, sc->fn, sc->ud);
    } else if (rv == 0) {
        pt_scan sub = *sc->s;
        sub.stream = NULL;
        rv = pt_backend_scan(sc->e->sink, &sub, sink_cell, &ss);
    }
    if (rv >= 0)
        rv = rows_before(&ss, (pt_slice){0});
    pt_arena_free(&ss.a);
    free(ss.c);
    free(ss.rows);
    pt_buf_free(&ss.row);
    return rv;
}

int pt_emb_scan_points(embedded *e, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    pscan sc = {.e = e, .s = s, .fn = fn, .ud = ud};
    sc.qlo = s->qual_start.n ? pt_emb_qual_bound(s->qual_start) : 0;
    sc.qhi = s->qual_end.n ? pt_emb_qual_bound(s->qual_end) : (uint64_t)1 << 32;
    int rv = 0;
    /* Reads of one dashboard are alike too: a one-row read starts with the last guess. */
    sc.young = atomic_load_explicit(&e->young_rows, memory_order_relaxed);
    sc.span = atomic_load_explicit(&e->chunk_span, memory_order_relaxed);
    if (e->sink)
        rv = scan_sink(&sc);
    ra_job j;
    pt_emb_readahead_begin(&e->ra, &j, CF_POINTS, s, sc.span); /* none for a write-back store */
    for (size_t i = 0; i < s->nranges && !sc.done && rv == 0 && !e->sink; i++) {
        rv = scan_range(&sc, &s->ranges[i]);
        atomic_store_explicit(&j.span, sc.span, memory_order_relaxed);
        pt_emb_readahead_at(&j, i + 1);
    }
    pt_emb_readahead_end(&j);
    atomic_store_explicit(&e->young_rows, sc.young, memory_order_relaxed);
    if (sc.spans_seen)
        atomic_store_explicit(&e->chunk_span, sc.span, memory_order_relaxed);
    pt_emb_rocks_iters_free(&sc.its);
    pt_buf_free(&sc.seek);
    pt_buf_free(&sc.row);
    free(sc.hc.c);
    free(sc.fsort);
    free(sc.cur);
    pt_vcells_free(&sc.cc);
    pt_buf_free(&sc.xs);
    pt_buf_free(&sc.hbytes);
    pt_buf_free(&sc.keys);
    free(sc.hrows);
    free(sc.found);
    return rv;
}
