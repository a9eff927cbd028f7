/*
 * Flush: the rows of a head shard's frozen generation, sorted, are written as chunks
 * (chunk.c) into table files of their own (flush.N.sst in the store's directory, a new one
 * every 64 MiB), which RocksDB then ingests in one step: it moves them into the store and
 * records them durably. Only then does the caller drop the frozen cells, and the logs that
 * hold them once no other shard needs them. A crash anywhere in between replays the logs
 * into the head (open deletes table files left unfinished or not ingested); flushing them
 * again rewrites the same cells with the same values.
 *
 * Why files rather than writes: a flush writes tens of megabytes at once. Through
 * the memtables, those bytes would be held a second time in memory (up to three 64 MiB
 * memtables) and inserted one key at a time into a skip list, only to be written out as
 * the same table file; a sorted flush can write that file directly.
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
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embedded_int.h"
#include "error.h"
#include "schema.h"

typedef struct flusher {
    embedded *e;
    const head *h; /* a row's frozen generation: the other of its shard's cur */
    const cell *hc; /* the current row's frozen cells, sorted, hn of them */
    uint32_t hn;
    cell *sorted, *tmp; /* copies for sorting a row's cells */
    size_t sorted_cap, tmp_cap;
    /* The flush's reads, of the store before the flush (only the flush writes points):
     * it[0] in total order, it[1] one row's, which the row bloom filters can skip. */
    rocks_iters its;
    /* The current row's deletes and puts, written to the file in key order once the row
     * is done (a merge deletes old chunks a put may replace). */
    struct fl_op {
        uint32_t q;   /* the chunk's first qualifier: its key within the row */
        uint32_t del; /* 1: delete the chunk, 0: put the value */
        size_t off, len; /* the value in ops_val */
    } *ops;
    size_t nops, ops_cap;
    pt_buf ops_val;
    rocksdb_sstfilewriter_t *sst; /* the table file being written, NULL: none open */
    uint64_t sst_entries;
    unsigned nfiles; /* table files started: flush.0.sst ... */
    char **files;    /* their names */
    size_t files_cap;
    emb_hook hook;
    void *ud;
    hrow **rows; /* the head's list of the frozen generation's rows */
    size_t nrows;
    pt_buf key, val;
    pt_vcells old, merged;
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

static int fl_op(flusher *f, uint32_t q, int del, const pt_buf *val)
{
    int rv = pt_array_reserve(&f->ops, &f->ops_cap, f->nops + 1, sizeof(*f->ops), 0);
    if (rv != 0)
        return rv;
    struct fl_op *o = &f->ops[f->nops];
    *o = (struct fl_op){.q = q, .del = (uint32_t)del, .off = f->ops_val.len};
    if (val) {
        if (pt_buf_append(&f->ops_val, val->p, val->len) != 0)
            return PT_ENOMEM;
        o->len = val->len;
    }
    f->nops++;
    return 0;
}

static int fl_put(flusher *f, const pt_vcell *c, size_t n)
{
    int rv = pt_cellchunk_encode(&f->val, c, n);
    return rv != 0 ? rv : fl_op(f, c[0].q, 0, &f->val);
}

/* By key; a put of a key sorts after its delete (insertion sort: a row has few ops, in
 * nearly sorted order). */
static void fl_ops_sort(struct fl_op *o, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct fl_op x = o[i];
        size_t j = i;
        while (j > 0 && (o[j - 1].q > x.q || (o[j - 1].q == x.q && o[j - 1].del < x.del))) {
            o[j] = o[j - 1];
            j--;
        }
        o[j] = x;
    }
}

/* The name of table file i of this flush, in f->key. */
static int fl_file_name(flusher *f, unsigned i)
{
    char name[32];
    int n = snprintf(name, sizeof(name), "/flush.%u.sst", i);
    pt_buf_reset(&f->key);
    if (pt_buf_append(&f->key, f->e->w.dir, strlen(f->e->w.dir)) != 0 ||
        pt_buf_append(&f->key, name, (size_t)n + 1) != 0)
        return PT_ENOMEM;
    return 0;
}

/* Ends the open table file (one with no entry is removed instead); the first one ended
 * is where a test's hook sees chunks written. */
static int fl_file_end(flusher *f)
{
    if (!f->sst)
        return 0;
    char *msg = NULL;
    if (f->sst_entries)
        rocksdb_sstfilewriter_finish(f->sst, &msg);
    rocksdb_sstfilewriter_destroy(f->sst);
    f->sst = NULL;
    if (msg)
        return pt_emb_rocks_error(msg);
    char *name = f->files[f->nfiles - 1];
    if (!f->sst_entries) {
        unlink(name);
        free(name);
        f->nfiles--;
        return 0;
    }
    return f->nfiles == 1 && f->hook ? f->hook(f->ud, EMB_HOOK_WRITTEN) : 0;
}

static int fl_file_start(flusher *f)
{
    int rv = pt_array_reserve(&f->files, &f->files_cap, f->nfiles + 1, sizeof(*f->files), 0);
    if (rv != 0 || (rv = fl_file_name(f, f->nfiles)) != 0)
        return rv;
    char *name = strdup((const char *)f->key.p);
    if (!name)
        return PT_ENOMEM;
    f->files[f->nfiles++] = name;
    f->sst = rocksdb_sstfilewriter_create(f->e->r.envopts, f->e->r.points_opts);
    f->sst_entries = 0;
    char *msg = NULL;
    rocksdb_sstfilewriter_open(f->sst, name, &msg);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

/* Writes the row's ops to the table file in key order: a delete of a key that is also put
 * is left out (the put replaces the value). A file past 64 MiB ends after the row. */
static int fl_row_out(flusher *f, const hrow *r)
{
    int rv;
    fl_ops_sort(f->ops, f->nops);
    for (size_t i = 0; i < f->nops; i++) {
        const struct fl_op *o = &f->ops[i];
        if (o->del && i + 1 < f->nops && f->ops[i + 1].q == o->q)
            continue;
        if (!f->sst && (rv = fl_file_start(f)) != 0)
            return rv;
        if ((rv = chunk_key(f, r, o->q)) != 0)
            return rv;
        char *msg = NULL;
        if (o->del)
            rocksdb_sstfilewriter_delete(f->sst, (const char *)f->key.p, f->key.len, &msg);
        else
            rocksdb_sstfilewriter_put(f->sst, (const char *)f->key.p, f->key.len,
                                      (const char *)f->ops_val.p + o->off, o->len, &msg);
        if (msg)
            return pt_emb_rocks_error(msg);
        f->sst_entries++;
    }
    f->nops = 0;
    pt_buf_reset(&f->ops_val);
    uint64_t size = 0;
    if (f->sst)
        rocksdb_sstfilewriter_file_size(f->sst, &size);
    return size >= ((uint64_t)64 << 20) ? fl_file_end(f) : 0;
}

/* Writes cells as chunks of at most CHUNK_MAX cells of about equal size and records the
 * last one as the row's last chunk. */
static int fl_put_all(flusher *f, hrow *r, const pt_vcell *c, size_t n)
{
    size_t pieces = (n + CHUNK_MAX - 1) / CHUNK_MAX, done = 0;
    for (size_t i = 0; i < pieces; i++) {
        size_t take = (n - done) / (pieces - i);
        int rv = fl_put(f, c + done, take);
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
    /* Mostly a new series, with no chunk: a seek of the row's first chunk, which the row
     * bloom filters answer without a block read, says so (a seek backwards, in total
     * order, read a data block of every table file in the way and left it in the block
     * cache). */
    rocksdb_iterator_t *it = f->its.it[1];
    int rv = pt_emb_rocks_key(&f->key, r->key, r->keylen, 0, NULL, 0);
    if (rv != 0)
        return rv;
    rocksdb_iter_seek(it, (const char *)f->key.p, f->key.len);
    uint32_t first;
    const char *v;
    size_t vn;
    r->known = 1;
    r->has_last = 0;
    if (!it_row_is(it, r, &first, &v, &vn))
        return pt_emb_rocks_iter_error(it);
    it = f->its.it[0];
    if ((rv = chunk_key(f, r, UINT32_MAX)) != 0)
        return rv;
    rocksdb_iter_seek_for_prev(it, (const char *)f->key.p, f->key.len);
    if (it_row_is(it, r, &first, &v, &vn)) {
        pt_cellchunk c;
        if (pt_cellchunk_parse((const uint8_t *)v, vn, &c) != 0 ||
            pt_cellchunk_last(&c, &r->last_max) != 0)
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

    pt_vcells_reset(&f->old);
    for (size_t off = 0, i = 0; i < nchunks; i++) {
        const uint8_t *at = f->oldbytes.p + off;
        uint32_t len = pt_get_le32(at);
        pt_cellchunk c;
        if (pt_cellchunk_parse(at + 8, len, &c) != 0)
            return PT_EINTERNAL;
        if ((rv = pt_cellchunk_cells(&c, &f->old)) != 0)
            return rv;
        if ((rv = fl_op(f, pt_get_le32(at + 4), 1, NULL)) != 0)
            return rv;
        off += 8 + len;
    }

    f->merged.n = 0;
    size_t i = 0, j = 0;
    while (i < f->old.n || j < f->hn) {
        const pt_vcell *o = i < f->old.n ? &f->old.c[i] : NULL;
        const cell *hc = j < f->hn ? &f->hc[j] : NULL;
        if (hc && (!o || hc->q <= o->q)) {
            if (o && o->q == hc->q)
                i++; /* the head wins */
            rv = pt_vcells_push(&f->merged, hc->q, hc->vlen, cell_val(hc));
            j++;
        } else {
            rv = pt_vcells_push(&f->merged, o->q, o->vlen, pt_vcell_val(o));
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
    const hcells *s = &r->s[pt_emb_row_cur(f->h, r) ^ 1];
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
    if (r->has_last && (f->hc[0].q <= r->last_max || r->last_n < CHUNK_SMALL)) {
        rv = fl_merge_row(f, r);
    } else {
        /* In-order ingest into a row whose last chunk is big enough: a new chunk. */
        f->merged.n = 0;
        for (uint32_t i = 0; i < f->hn && rv == 0; i++)
            rv = pt_vcells_push(&f->merged, f->hc[i].q, f->hc[i].vlen, cell_val(&f->hc[i]));
        if (rv == 0)
            rv = fl_put_all(f, r, f->merged.c, f->merged.n);
    }
    return rv != 0 ? rv : fl_row_out(f, r);
}

/* RocksDB takes the table files in one step, moving them into the store. */
static int fl_ingest(flusher *f)
{
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    if (!io)
        return PT_ENOMEM;
    rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
    /* Nothing else writes the points family, so its memtable is empty; were it not, it
     * is flushed first rather than the ingestion refused. */
    rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(io, 1);
    char *msg = NULL;
    rocksdb_ingest_external_file_cf(f->e->r.db, f->e->r.cf[CF_POINTS],
                                    (const char *const *)f->files, f->nfiles, io, &msg);
    rocksdb_ingestexternalfileoptions_destroy(io);
    return msg ? pt_emb_rocks_note(&f->e->r, pt_emb_rocks_error(msg)) : 0;
}

/* Writes the sorted rows into table files and has RocksDB ingest them. */
static int fl_write(flusher *f)
{
    int rv = pt_emb_rocks_iter(&f->e->r, &f->its, CF_POINTS, 0, NULL);
    if (rv == 0)
        rv = pt_emb_rocks_iter(&f->e->r, &f->its, CF_POINTS, 1, NULL);
    for (size_t i = 0; i < f->nrows && rv == 0; i++)
        rv = fl_row(f, f->rows[i]);
    if (rv == 0)
        rv = fl_file_end(f);
    if (rv == 0 && f->nfiles == 0 && f->hook)
        rv = f->hook(f->ud, EMB_HOOK_WRITTEN); /* nothing to write: written already */
    if (rv == 0 && f->nfiles > 0)
        rv = fl_ingest(f);
    if (rv == 0 && f->hook)
        rv = f->hook(f->ud, EMB_HOOK_DURABLE);
    return rv;
}

void pt_emb_flush_clean(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned n;
        char tail[8];
        if (sscanf(de->d_name, "flush.%u.ss%7s", &n, tail) == 2 && strcmp(tail, "t") == 0)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* ---- write-back: the frozen rows go to the sink backend ---- */

enum { SINK_BATCH_CELLS = 16384 }; /* cells a sink write takes, unless one row has more */

typedef struct sinkfl {
    pt_mutation *m;
    size_t n, cap;
    pt_arena a; /* the batch's qualifiers and short values */
    cell *dec, *sorted;
    size_t dec_cap, sorted_cap;
} sinkfl;

/* Adds row r's frozen cells (generation gen), sorted, to the batch. Each cell's version is
 * its sample's time (the row key's base plus the offset, docs/storage-format.md), as a
 * direct write would give it; fallback_us for a row whose key holds no base. */
static int sink_row(sinkfl *b, const hrow *r, unsigned gen, int64_t fallback_us)
{
    int64_t base = pt_points_row_base(r->key, r->keylen);
    const cell *c;
    uint32_t cn;
    int rv = pt_emb_hcells_get(&r->s[gen], &b->dec, &b->dec_cap, &c, &cn);
    if (rv != 0 || cn == 0)
        return rv;
    if (!r->s[gen].sorted) {
        /* In a copy: scans read the frozen cells meanwhile. */
        if ((rv = pt_array_reserve(&b->sorted, &b->sorted_cap, 2 * (size_t)cn, sizeof(cell), 0)))
            return rv;
        memcpy(b->sorted, c, (size_t)cn * sizeof(cell));
        cn = pt_emb_cells_sort(b->sorted, b->sorted + cn, cn);
        c = b->sorted;
    }
    if ((rv = pt_array_reserve(&b->m, &b->cap, b->n + cn, sizeof(*b->m), 0)) != 0)
        return rv;
    /* Each cell's qualifier and short value: c may be a scratch copy the next row reuses. */
    uint8_t *bytes = pt_arena_alloc(&b->a, (size_t)cn * 12);
    if (!bytes)
        return PT_ENOMEM;
    for (uint32_t i = 0; i < cn; i++, bytes += 12) {
        pt_put_be32(bytes, c[i].q);
        const uint8_t *v = cell_val(&c[i]);
        if (c[i].vlen <= 8)
            v = memcpy(bytes + 4, c[i].v.in, c[i].vlen);
        b->m[b->n++] = (pt_mutation){.table = PT_TABLE_POINTS,
                                     .row = {r->key, r->keylen},
                                     .qual = {bytes, 4},
                                     .value = {v, c[i].vlen},
                                     .version_us = base >= 0 ? (base + c[i].q) * 1000
                                                             : fallback_us};
    }
    return 0;
}

static int sink_write(embedded *e, sinkfl *b)
{
    int rv = b->n ? pt_backend_write(e->sink, b->m, b->n) : 0;
    b->n = 0;
    pt_arena_reset(&b->a);
    return rv;
}

int pt_emb_sink_flush(embedded *e, hrow **rows, size_t n)
{
    sinkfl b = {0};
    pt_arena_init(&b.a, 64 * 1024, 0);
    /* For a row without a base in its key: the flush's time, in whole milliseconds
     * (Bigtable's granularity). */
    int64_t version_us = pt_wall_ms() * 1000;
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0; i++) {
        unsigned gen = pt_emb_row_cur(&e->h, rows[i]) ^ 1;
        if (b.n >= SINK_BATCH_CELLS)
            rv = sink_write(e, &b);
        if (rv == 0)
            rv = sink_row(&b, rows[i], gen, version_us);
    }
    if (rv == 0)
        rv = sink_write(e, &b);
    free(b.m);
    free(b.dec);
    free(b.sorted);
    pt_arena_free(&b.a);
    return rv;
}

/* Writes rows[0..n) (sorted here) of the shards flushing. */
static int flush_rows(embedded *e, hrow **rows, size_t n, emb_hook hook, void *ud)
{
    flusher f = {.e = e, .h = &e->h, .rows = rows, .nrows = n, .hook = hook, .ud = ud};
    int rv = 0;
    if (e->sink) {
        if (n > 0)
            qsort(rows, n, sizeof(*rows), row_key_cmp);
        rv = pt_emb_sink_flush(e, rows, n);
        if (rv == 0 && hook && (rv = hook(ud, EMB_HOOK_WRITTEN)) == 0)
            rv = hook(ud, EMB_HOOK_DURABLE);
        return rv;
    }
    if (f.nrows > 0) {
        qsort(f.rows, f.nrows, sizeof(*f.rows), row_key_cmp);
        if ((rv = fl_write(&f)) != 0) {
            /* What we believed about the rows' last chunks may be wrong now. */
            for (size_t i = 0; i < f.nrows; i++)
                f.rows[i]->known = 0;
        }
    }
    pt_emb_rocks_iters_free(&f.its);
    if (f.sst)
        rocksdb_sstfilewriter_destroy(f.sst);
    /* Ingested files were moved; the others (a failed flush's) go. */
    for (unsigned i = 0; i < f.nfiles; i++) {
        unlink(f.files[i]);
        free(f.files[i]);
    }
    free(f.files);
    free(f.ops);
    pt_buf_free(&f.ops_val);
    pt_buf_free(&f.key);
    pt_buf_free(&f.val);
    pt_vcells_free(&f.old);
    pt_vcells_free(&f.merged);
    free(f.sorted);
    free(f.tmp);
    pt_buf_free(&f.oldbytes);
    return rv;
}

int pt_emb_flush_frozen(embedded *e, unsigned k, emb_hook hook, void *ud)
{
    hshard *sh = &e->h.sh[k];
    unsigned fz = sh->cur ^ 1;
    return flush_rows(e, sh->dirty[fz], sh->ndirty[fz], hook, ud);
}

int pt_emb_flush_flushing(embedded *e, emb_hook hook, void *ud)
{
    size_t n = 0;
    unsigned only = 0, shards = 0;
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        const hshard *sh = &e->h.sh[k];
        if (sh->flushing) {
            n += sh->ndirty[sh->cur ^ 1];
            only = k;
            shards++;
        }
    }
    if (shards <= 1) /* no sweep: the frozen shard's list, sorted in place */
        return pt_emb_flush_frozen(e, only, hook, ud);
    int rv = pt_array_reserve(&e->flush_rows, &e->flush_rows_cap, n, sizeof(*e->flush_rows), 0);
    if (rv != 0)
        return rv;
    n = 0;
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        const hshard *sh = &e->h.sh[k];
        if (!sh->flushing)
            continue;
        memcpy(e->flush_rows + n, sh->dirty[sh->cur ^ 1],
               sh->ndirty[sh->cur ^ 1] * sizeof(*e->flush_rows));
        n += sh->ndirty[sh->cur ^ 1];
    }
    return flush_rows(e, e->flush_rows, n, hook, ud);
}
