/*
 * Chunk cells of the points table (contracts in bigtable_int.h; the format in
 * docs/storage-format.md, "Chunk cells on Bigtable"). No I/O: the write path hands it a
 * row's mutations, the scan a row's cells.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigtable_int.h"
#include "bytes.h"
#include "error.h"
#include "schema.h"

void pt_bt_chunk_qual_put(uint8_t *q, const pt_bt_chunkqual *c)
{
    pt_put_be32(q, c->first);
    pt_put_be32(q + 4, c->last);
    pt_put_be64(q + 8, c->writer);
}

int pt_bt_chunk_qual_get(pt_slice q, pt_bt_chunkqual *c)
{
    if (q.n != PT_BT_CHUNK_QUAL_LEN)
        return PT_EINTERNAL;
    c->first = pt_get_be32(q.p);
    c->last = pt_get_be32(q.p + 4);
    c->writer = pt_get_be64(q.p + 8);
    return c->first <= c->last ? 0 : PT_EINTERNAL;
}

int pt_bt_chunkable(const pt_mutation *m)
{
    size_t end;
    return m->table == PT_TABLE_POINTS && m->qual.n == PT_QUAL_LEN &&
           pt_key_time(m->row.p, m->row.n, "#", &end) < 0;
}

uint64_t pt_bt_qual_floor(pt_slice q)
{
    if (q.n == 0)
        return 0;
    uint8_t b[4] = {0};
    memcpy(b, q.p, q.n < 4 ? q.n : 4);
    /* A longer string sorts after its 4-byte prefix, so the next offset is the first. */
    return (uint64_t)pt_get_be32(b) + (q.n > 4);
}

/* ---- write ---- */

void pt_bt_chunker_free(pt_bt_chunker *ck)
{
    free(ck->cells);
    free(ck->ver);
    pt_buf_free(&ck->enc);
    if (ck->mem_ready)
        pt_arena_free(&ck->mem);
    *ck = (pt_bt_chunker){0};
}

/* By offset, then batch position (the address in the batch's array). */
static int by_offset(const void *pa, const void *pb)
{
    const pt_mutation *a = *(const pt_mutation *const *)pa, *b = *(const pt_mutation *const *)pb;
    uint32_t qa = pt_get_be32(a->qual.p), qb = pt_get_be32(b->qual.p);
    if (qa != qb)
        return qa < qb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* One chunk cell of c[0..n), whose greatest version is version, into *out. */
static int put_chunk(pt_bt_chunker *ck, const pt_mutation *row, const pt_vcell *c, size_t n,
                     uint64_t writer, int64_t version, pt_mutation *out)
{
    int rv = pt_cellchunk_encode(&ck->enc, c, n);
    if (rv != 0)
        return rv;
    size_t vn = pt_buf_used(&ck->enc);
    uint8_t *q = pt_arena_alloc(&ck->mem, PT_BT_CHUNK_QUAL_LEN + vn);
    if (!q)
        return PT_ENOMEM;
    pt_bt_chunkqual cq = {c[0].q, c[n - 1].q, writer};
    pt_bt_chunk_qual_put(q, &cq);
    memcpy(q + PT_BT_CHUNK_QUAL_LEN, pt_buf_data(&ck->enc), vn);
    *out = (pt_mutation){.table = row->table,
                         .row = row->row,
                         .qual = {q, PT_BT_CHUNK_QUAL_LEN},
                         .value = {q + PT_BT_CHUNK_QUAL_LEN, vn},
                         .version_us = version};
    return 0;
}

/* Cuts c[0..n) (increasing offsets; ver[i] the version of c[i]) into chunk cells of at
 * most PT_BT_CHUNK_MAX_CELLS cells spanning at most PT_BT_CHUNK_SPAN_MS, each a mutation
 * of row's row and table appended to out. Returns how many, or a negative pt error code. */
static long cut(pt_bt_chunker *ck, const pt_mutation *row, const pt_vcell *c, const int64_t *ver,
                size_t n, uint64_t writer, pt_mutation *out)
{
    long nout = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        int64_t newest = ver[i];
        while (j < n && j - i < PT_BT_CHUNK_MAX_CELLS && c[j].q - c[i].q <= PT_BT_CHUNK_SPAN_MS) {
            if (ver[j] > newest)
                newest = ver[j];
            j++;
        }
        int rv = put_chunk(ck, row, c + i, j - i, writer, newest, &out[nout]);
        if (rv != 0)
            return rv;
        nout++;
        i = j;
    }
    return nout;
}

/* Room for n cells and their versions in ck. */
static int reserve_cells(pt_bt_chunker *ck, size_t n)
{
    if (!ck->mem_ready) {
        pt_arena_init(&ck->mem, 64 << 10, 0);
        ck->mem_ready = 1;
    }
    int rv = n <= ck->cap ? 0 : pt_array_reserve(&ck->cells, &ck->cap, n, sizeof(*ck->cells), 0);
    if (rv == 0 && n > ck->vcap)
        rv = pt_array_reserve(&ck->ver, &ck->vcap, n, sizeof(*ck->ver), 0);
    return rv;
}

long pt_bt_chunk_row(pt_bt_chunker *ck, const pt_mutation **v, size_t n, uint64_t writer,
                     pt_mutation *out)
{
    int rv = reserve_cells(ck, n);
    if (rv != 0)
        return rv;
    qsort(v, n, sizeof(*v), by_offset);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && pt_get_be32(v[i + 1]->qual.p) == pt_get_be32(v[i]->qual.p))
            continue; /* a later write of the offset in the batch wins */
        pt_vcell *c = &ck->cells[k];
        c->q = pt_get_be32(v[i]->qual.p);
        c->vlen = (uint32_t)v[i]->value.n;
        if (c->vlen <= 8) {
            if (c->vlen)
                memcpy(c->v.in, v[i]->value.p, c->vlen);
        } else
            c->v.p = v[i]->value.p;
        ck->ver[k++] = v[i]->version_us;
    }
    return cut(ck, v[0], ck->cells, ck->ver, k, writer, out);
}

/* ---- read ---- */

/* One cell of a merged row: from a chunk (index into dec) or the row's own cells. */
struct pt_bt_rowmerge_item {
    uint32_t q;     /* the offset (not for PASS) */
    uint8_t kind;   /* PASS (any other qualifier length), SINGLE, CHUNK */
    pt_slice pass;  /* PASS: the qualifier */
    uint64_t order; /* CHUNK: the writer id; otherwise 0 */
    size_t idx;     /* CHUNK: in dec; otherwise in the row's cells */
    size_t seq;     /* position of its source: the tie-break that keeps sorting stable */
};
enum { PASS = 0, SINGLE = 1, CHUNK = 2 };

void pt_bt_rowmerge_free(pt_bt_rowmerge *rm)
{
    pt_vcells_free(&rm->dec);
    free(rm->items);
    *rm = (pt_bt_rowmerge){0};
}

int pt_bt_row_has_chunks(const pt_bt_cell *cells, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cells[i].qualifier.n == PT_BT_CHUNK_QUAL_LEN)
            return 1;
    return 0;
}

static int push_item(pt_bt_rowmerge *rm, pt_bt_rowmerge_item it)
{
    if (rm->n == rm->cap) {
        int rv = pt_array_reserve(&rm->items, &rm->cap, rm->n + 1, sizeof(*rm->items), 0);
        if (rv != 0)
            return rv;
    }
    rm->items[rm->n++] = it;
    return 0;
}

/* The bytes an item sorts by: its qualifier. */
static pt_slice item_qual(const pt_bt_rowmerge_item *it, uint8_t *buf)
{
    if (it->kind == PASS)
        return it->pass;
    pt_put_be32(buf, it->q);
    return (pt_slice){buf, 4};
}

/* Qualifier order; on an equal one the winner first: a chunk before a single cell, the
 * greater writer id first, then the source's order (newest version of a column first). */
static int by_qual_winner_first(const void *pa, const void *pb)
{
    const pt_bt_rowmerge_item *a = pa, *b = pb;
    if (a->kind != PASS && b->kind != PASS) {
        if (a->q != b->q)
            return a->q < b->q ? -1 : 1;
    } else {
        uint8_t ba[4], bb[4];
        int c = pt_slice_cmp(item_qual(a, ba), item_qual(b, bb));
        if (c != 0)
            return c;
    }
    if (a->kind != b->kind)
        return a->kind > b->kind ? -1 : 1;
    if (a->order != b->order)
        return a->order > b->order ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Whether items[0..n) are in by_qual_winner_first's order already: the common row, chunks
 * that do not overlap, read in qualifier order, needs no sort. */
static int in_order(const pt_bt_rowmerge_item *items, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (by_qual_winner_first(&items[i - 1], &items[i]) > 0)
            return 0;
    return 1;
}

static int in_window(pt_slice q, pt_slice qs, pt_slice qe)
{
    return (qs.n == 0 || pt_slice_cmp(q, qs) >= 0) && (qe.n == 0 || pt_slice_cmp(q, qe) < 0);
}

/* Decodes the chunk cell c (qualifier cq) onto the end of rm->dec, checking that every
 * offset lies in first..last. */
static int decode_chunk(pt_bt_rowmerge *rm, const pt_bt_cell *c, const pt_bt_chunkqual *cq,
                        char *err, size_t errlen)
{
    pt_cellchunk ch;
    size_t from = rm->dec.n;
    int rv = pt_cellchunk_parse(c->value.p, c->value.n, &ch);
    if (rv == 0)
        rv = pt_cellchunk_cells(&ch, &rm->dec);
    if (rv == PT_ENOMEM)
        return rv;
    if (rv != 0) {
        snprintf(err, errlen, "chunk cell %08x..%08x of writer %016llx does not decode",
                 (unsigned)cq->first, (unsigned)cq->last, (unsigned long long)cq->writer);
        return PT_EINTERNAL;
    }
    for (size_t i = from; i < rm->dec.n; i++) {
        uint32_t q = rm->dec.c[i].q;
        if (q < cq->first || q > cq->last) {
            snprintf(err, errlen, "chunk cell %08x..%08x of writer %016llx holds offset %08x",
                     (unsigned)cq->first, (unsigned)cq->last, (unsigned long long)cq->writer,
                     (unsigned)q);
            return PT_EINTERNAL;
        }
    }
    return 0;
}

static int bad_qual(char *err, size_t errlen)
{
    snprintf(err, errlen, "a chunk cell's qualifier has first offset > last");
    return PT_EINTERNAL;
}

/* Decodes the chunk cell c into rm->dec and adds its cells in [lo, hi) as items. */
static int add_chunk(pt_bt_rowmerge *rm, const pt_bt_cell *c, size_t seq, uint64_t lo, uint64_t hi,
                     char *err, size_t errlen)
{
    pt_bt_chunkqual cq;
    size_t from = rm->dec.n;
    if (pt_bt_chunk_qual_get(c->qualifier, &cq) != 0)
        return bad_qual(err, errlen);
    int rv = decode_chunk(rm, c, &cq, err, errlen);
    for (size_t i = from; i < rm->dec.n && rv == 0; i++) {
        uint32_t q = rm->dec.c[i].q;
        if (q < lo || q >= hi)
            continue;
        pt_bt_rowmerge_item it = {.q = q, .kind = CHUNK, .order = cq.writer, .idx = i, .seq = seq};
        rv = push_item(rm, it);
    }
    return rv;
}

/* The offsets a points cell holds, as a chunk qualifier (a single cell: first = last, writer
 * 0): 0, or PT_EINTERNAL for a qualifier of neither length or a chunk's first > last. */
static int cell_span(const pt_bt_cell *c, pt_bt_chunkqual *cq)
{
    if (c->qualifier.n != PT_QUAL_LEN)
        return pt_bt_chunk_qual_get(c->qualifier, cq);
    cq->first = cq->last = pt_get_be32(c->qualifier.p);
    cq->writer = 0;
    return 0;
}

/* Whether the row is the common one: points cells of single samples and chunks only,
 * each one's offsets after the previous one's (so no offset is held twice and no column
 * has a second version). Its merge is its cells in order. */
static int disjoint(const pt_bt_cell *cells, size_t n)
{
    uint64_t next = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_bt_cell *c = &cells[i];
        pt_bt_chunkqual cq;
        if (!pt_slice_eq(c->family, PT_SLICE_LIT(PT_BT_FAMILY)))
            continue;
        if (cell_span(c, &cq) != 0 || cq.first < next)
            return 0;
        next = (uint64_t)cq.last + 1;
    }
    return 1;
}

/* pt_bt_merge_row of a disjoint row: each cell's samples in [lo, hi) as they come, and
 * chunks wholly outside the window not decoded. */
static int merge_disjoint(pt_bt_rowmerge *rm, const pt_bt_cell *cells, size_t n, uint64_t lo,
                          uint64_t hi, pt_bt_merged_fn fn, void *ud, char *err, size_t errlen)
{
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0; i++) {
        const pt_bt_cell *c = &cells[i];
        if (!pt_slice_eq(c->family, PT_SLICE_LIT(PT_BT_FAMILY)))
            continue;
        rm->src = i;
        if (c->qualifier.n == PT_QUAL_LEN) {
            uint32_t q = pt_get_be32(c->qualifier.p);
            if (q >= lo && q < hi)
                rv = fn(ud, c->qualifier, c->value);
            continue;
        }
        pt_bt_chunkqual cq;
        pt_bt_chunk_qual_get(c->qualifier, &cq); /* disjoint() checked it */
        if (cq.last < lo || cq.first >= hi)
            continue;
        pt_vcells_reset(&rm->dec);
        if ((rv = decode_chunk(rm, c, &cq, err, errlen)) != 0)
            break;
        for (size_t k = 0; k < rm->dec.n && rv == 0; k++) {
            const pt_vcell *vc = &rm->dec.c[k];
            if (vc->q < lo || vc->q >= hi)
                continue;
            uint8_t b[4];
            pt_put_be32(b, vc->q);
            rv = fn(ud, (pt_slice){b, 4}, (pt_slice){pt_vcell_val(vc), vc->vlen});
        }
    }
    return rv;
}

int pt_bt_merge_row(pt_bt_rowmerge *rm, const pt_bt_cell *cells, size_t n, pt_slice qs, pt_slice qe,
                    pt_bt_merged_fn fn, void *ud, char *err, size_t errlen)
{
    uint64_t lo = pt_bt_qual_floor(qs), hi = qe.n ? pt_bt_qual_floor(qe) : (uint64_t)1 << 32;
    pt_vcells_reset(&rm->dec);
    rm->n = 0;
    if (disjoint(cells, n))
        return merge_disjoint(rm, cells, n, lo, hi, fn, ud, err, errlen);
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0; i++) {
        const pt_bt_cell *c = &cells[i];
        if (!pt_slice_eq(c->family, PT_SLICE_LIT(PT_BT_FAMILY)))
            continue;
        if (c->qualifier.n == PT_BT_CHUNK_QUAL_LEN) {
            rv = add_chunk(rm, c, i, lo, hi, err, errlen);
        } else if (c->qualifier.n == PT_QUAL_LEN) {
            uint32_t q = pt_get_be32(c->qualifier.p);
            if (q >= lo && q < hi)
                rv = push_item(rm,
                               (pt_bt_rowmerge_item){.q = q, .kind = SINGLE, .idx = i, .seq = i});
        } else if (in_window(c->qualifier, qs, qe)) {
            rv = push_item(
                rm, (pt_bt_rowmerge_item){.kind = PASS, .pass = c->qualifier, .idx = i, .seq = i});
        }
    }
    if (rv != 0)
        return rv;
    if (!in_order(rm->items, rm->n))
        qsort(rm->items, rm->n, sizeof(*rm->items), by_qual_winner_first);
    for (size_t i = 0; i < rm->n && rv == 0; i++) {
        const pt_bt_rowmerge_item *it = &rm->items[i], *prev = i ? it - 1 : NULL;
        uint8_t b[4], pb[4];
        pt_slice q = item_qual(it, b);
        if (prev && pt_slice_eq(q, item_qual(prev, pb)))
            continue; /* the winner came first */
        rm->src = it->seq;
        pt_slice v;
        if (it->kind == CHUNK) {
            const pt_vcell *vc = &rm->dec.c[it->idx];
            v = (pt_slice){pt_vcell_val(vc), vc->vlen};
        } else {
            v = cells[it->idx].value;
        }
        rv = fn(ud, q, v);
    }
    return rv;
}

/* ---- compaction ---- */

/* When the newest sample of a points cell of the data row with base was taken; -1 for a
 * cell compaction leaves as it is (another family or qualifier length). */
static int64_t cell_time(int64_t base, const pt_bt_cell *c)
{
    pt_bt_chunkqual cq;
    if (!pt_slice_eq(c->family, PT_SLICE_LIT(PT_BT_FAMILY)) || cell_span(c, &cq) != 0)
        return -1;
    return base + cq.last;
}

size_t pt_bt_compact_select(pt_slice key, const pt_bt_cell *cells, size_t n, int64_t guard_ms,
                            uint8_t *fold)
{
    size_t end;
    int64_t base = pt_points_row_base(key.p, key.n); /* data and roll-up rows */
    memset(fold, 0, n);
    if (base < 0 || pt_key_time(key.p, key.n, "#", &end) >= 0)
        return 0;
    size_t nfold = 0, est = 0;
    uint64_t start = 0;  /* first offset of the chunk the estimate is filling */
    uint64_t writer = 0; /* writer id of the last chunk cell seen */
    int chunks = 0;      /* ... when one was seen */
    for (size_t i = 0; i < n && nfold < PT_BT_COMPACT_MAX_FOLD; i++) {
        int64_t t = cell_time(base, &cells[i]);
        if (t < 0 || t >= guard_ms)
            continue;
        fold[i] = 1;
        nfold++;
        /* Cells come in qualifier order, which is first-offset order; a chunk's inner
         * offsets are unknown, so its last one starts a chunk only if it must. */
        pt_bt_chunkqual cq = {0, 0, 0};
        cell_span(&cells[i], &cq); /* cell_time() took only cells it can read */
        /* Chunks of one writer id come from one write or one rewrite, which cut them where
         * the limits say (a full chunk tells no other way): a rewrite would cut them
         * there again. */
        int chunk = cells[i].qualifier.n != PT_QUAL_LEN;
        int cut_before = chunk && chunks && cq.writer == writer;
        if (chunk) {
            writer = cq.writer;
            chunks = 1;
        }
        if (!est || cut_before || cq.first - start > PT_BT_CHUNK_SPAN_MS) {
            est++;
            start = cq.first;
        }
        if (cq.last - start > PT_BT_CHUNK_SPAN_MS) {
            est++;
            start = cq.last;
        }
    }
    if (est >= nfold) {
        memset(fold, 0, n);
        return 0;
    }
    return nfold;
}

void pt_bt_compactor_free(pt_bt_compactor *cp)
{
    pt_bt_chunker_free(&cp->ck);
    pt_bt_rowmerge_free(&cp->rm);
    free(cp->out);
    *cp = (pt_bt_compactor){0};
}

/* pt_bt_merged_fn of the rewrite: keeps the offsets whose winner is a folded cell. */
typedef struct gather_ctx {
    pt_bt_compactor *cp;
    const pt_bt_cell *cells;
} gather_ctx;

static int gather(void *ud, pt_slice qual, pt_slice value)
{
    gather_ctx *g = ud;
    pt_bt_compactor *cp = g->cp;
    size_t src = cp->rm.src;
    if (qual.n != PT_QUAL_LEN || !cp->fold[src])
        return 0;
    uint32_t q = pt_get_be32(qual.p);
    if (q >= cp->drop_lo && q < cp->drop_hi)
        return 0; /* erased */
    int rv = reserve_cells(&cp->ck, cp->nkeep + 1);
    if (rv != 0)
        return rv;
    pt_vcell *c = &cp->ck.cells[cp->nkeep];
    c->q = q;
    c->vlen = (uint32_t)value.n;
    if (c->vlen <= 8) {
        if (c->vlen)
            memcpy(c->v.in, value.p, c->vlen);
    } else
        c->v.p = value.p; /* in the row's cells or rm's decoded chunks: both outlive the build */
    cp->ck.ver[cp->nkeep++] = g->cells[src].ts;
    return 0;
}

long pt_bt_compact_row(pt_bt_compactor *cp, pt_slice key, const pt_bt_cell *cells, size_t n,
                       const uint8_t *fold, size_t nfold, pt_mutation **out, size_t *nchunks,
                       char *err, size_t errlen)
{
    gather_ctx g = {cp, cells};
    *nchunks = 0;
    cp->fold = fold;
    cp->nkeep = 0;
    int rv = reserve_cells(&cp->ck, 1);
    if (rv != 0)
        return rv;
    pt_arena_reset(&cp->ck.mem);
    rv = pt_bt_merge_row(&cp->rm, cells, n, (pt_slice){0}, (pt_slice){0}, gather, &g, err, errlen);
    if (rv != 0)
        return rv < 0 ? rv : PT_EINTERNAL;
    if (nfold + cp->nkeep > cp->outcap &&
        (rv = pt_array_reserve(&cp->out, &cp->outcap, nfold + cp->nkeep, sizeof(*cp->out), 0)))
        return rv;
    uint64_t writer = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        pt_bt_chunkqual cq;
        if (!fold[i])
            continue;
        if (pt_bt_chunk_qual_get(cells[i].qualifier, &cq) == 0 && cq.writer > writer)
            writer = cq.writer;
        cp->out[k++] = (pt_mutation){.table = PT_TABLE_POINTS,
                                     .row = key,
                                     .qual = cells[i].qualifier,
                                     .version_us = -(cells[i].ts + 1000)};
    }
    pt_mutation row = {.table = PT_TABLE_POINTS, .row = key};
    long made = cut(&cp->ck, &row, cp->ck.cells, cp->ck.ver, cp->nkeep, writer, cp->out + k);
    if (made < 0)
        return made;
    if ((size_t)made >= k && cp->drop_hi <= cp->drop_lo)
        return 0; /* the row would hold as many cells as before */
    *nchunks = (size_t)made;
    *out = cp->out;
    return (long)k + made;
}
