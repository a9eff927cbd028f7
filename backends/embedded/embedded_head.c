/*
 * The points table of the embedded backend: an in-memory head in front of RocksDB.
 *
 * Why: Prometheus sends one sample per series per request, 2000 random series at a time.
 * One RocksDB key per sample meant a skiplist insert of a ~150-byte key per sample plus its
 * WAL bytes, and that cost was most of the server's CPU. Here a sample costs a hash lookup
 * of its row, 21 bytes appended to our own log, and 16 bytes appended to the row's cells.
 *
 * Write: under the head mutex, the batch's points cells are encoded into ONE log record
 * (rows by a per-generation id, defined once per generation), the record is written (and
 * fdatasync'ed when cfg->sync), then the cells are appended to their rows' cell arrays.
 * write() returns after that, so an acknowledged cell is in the log and in memory. (With
 * cfg->sync the fdatasync runs under the mutex: concurrent writers wait for each other's
 * sync; group commit would be the next step if sync = 1 matters for throughput.)
 *
 * Flush (when the head's samples pass the budget, on pt_embedded_flush and on close): the
 * rows are sorted and written into RocksDB as chunks (layout below) with RocksDB's own WAL
 * off, the points column family is flushed to table files (synced), and only then the log
 * is truncated and its generation bumped. A crash anywhere in between replays the log into
 * the head; flushing it again rewrites the same cells with the same values.
 *
 * RocksDB layout of the points column family ("points.v2"):
 *
 *     key   = row || 0x00 || first qualifier of the chunk (4 bytes)
 *     value = fmt (1 byte) || count (4 bytes BE) || count qualifiers (4 bytes BE each,
 *             strictly increasing) || values
 *             fmt 1: count values of exactly 8 bytes
 *             fmt 2: count value lengths (4 bytes BE each), then the values back to back
 *
 * The chunks of one row never overlap: every qualifier of a row is in at most one chunk,
 * so "last write wins" needs no versions: a flush whose cells fall inside or before the
 * row's existing chunks reads those chunks, merges (the head wins), deletes them and
 * writes the merged cells back. In-order ingest only appends new chunks. Logically the
 * table still holds the cells (row, qualifier, value) of DESIGN §3; scans return exactly
 * those, so data copies cell by cell between backends.
 *
 * Log file (<path>/points.wal), a sequence of records:
 *
 *     magic "PTW1" | generation (4 LE) | payload length (4 LE) | XXH3-64 of the payload
 *     seeded with the generation (8 LE) | payload
 *     payload entries: 'R' id (4 LE) keylen (4 LE) key     defines row id for this gen
 *                      'C' id (4 LE) qualifier (4 BE) vlen (4 LE) value
 *
 * Replay keeps the records of the first record's generation and stops at the first record
 * that is torn, corrupt or of another generation (truncation is fdatasync'ed, so older
 * records cannot show up behind newer ones).
 *
 * Reads take the mutex only to copy one row's head cells and to refresh their RocksDB
 * iterator when a flush happened since it was made; cells then merge with the row's chunks
 * (the head wins).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "embedded.h"
#include "bytes.h"
#include "embedded_int.h"
#include "error.h"

/* A head cell: 16 bytes, the value inline when it has at most 8 bytes. */
typedef struct cell {
    uint32_t q;
    uint32_t vlen;
    union {
        uint8_t in[8];
        uint8_t *p;
    } v;
} cell;

struct hrow {
    hrow *next;          /* hash chain */
    uint64_t hash;
    cell *cells;
    uint32_t n, cap;
    uint32_t wal_gen, wal_id;
    /* The row's last RocksDB chunk, valid when known: has_last = 0 means no chunk. */
    uint32_t last_first, last_max, last_n;
    uint8_t sorted;      /* cells strictly increasing by qualifier */
    uint8_t known, has_last;
    uint8_t idle;        /* had no cells at the previous flush */
    uint32_t keylen;
    uint8_t key[];
};

/* A view of a cell, for merges and chunk encoding. */
typedef struct vcell {
    uint32_t q;
    uint32_t vlen;
    const uint8_t *v;
} vcell;

typedef struct vcells {
    vcell *c;
    size_t n, cap;
} vcells;

static const uint8_t wal_magic[4] = {'P', 'T', 'W', '1'};
enum { WAL_HDR = 20 };

static const uint8_t *cell_val(const cell *c)
{
    return c->vlen <= 8 ? c->v.in : c->v.p;
}

static int vc_push(vcells *vc, uint32_t q, uint32_t vlen, const uint8_t *v)
{
    if (vc->n == vc->cap) {
        size_t cap = vc->cap ? vc->cap * 2 : 256;
        vcell *p = realloc(vc->c, cap * sizeof(*p));
        if (!p)
            return PT_ENOMEM;
        vc->c = p;
        vc->cap = cap;
    }
    vc->c[vc->n++] = (vcell){q, vlen, v};
    return 0;
}

/* ---- chunks ---- */

typedef struct chunk {
    uint32_t count;
    int fixed;
    const uint8_t *quals, *lens, *vals;
} chunk;

/* Parses a chunk value; 0 or PT_EINTERNAL when it is not one this backend wrote. */
static int chunk_parse(const uint8_t *p, size_t n, chunk *c)
{
    if (n < 5 || (p[0] != 1 && p[0] != 2))
        return PT_EINTERNAL;
    c->count = pt_get_be32(p + 1);
    c->fixed = p[0] == 1;
    if (c->count == 0)
        return PT_EINTERNAL;
    size_t need = 5 + (size_t)c->count * (c->fixed ? 12 : 8);
    if (need > n)
        return PT_EINTERNAL;
    c->quals = p + 5;
    c->lens = c->fixed ? NULL : c->quals + 4 * (size_t)c->count;
    c->vals = c->quals + (size_t)c->count * (c->fixed ? 4 : 8);
    if (!c->fixed) {
        size_t total = need;
        for (uint32_t i = 0; i < c->count; i++)
            total += pt_get_be32(c->lens + 4 * (size_t)i);
        if (total != n)
            return PT_EINTERNAL;
    } else if (need != n) {
        return PT_EINTERNAL;
    }
    return 0;
}

/* Appends a chunk's cells to vc; values point into the chunk's bytes. */
static int chunk_cells(const chunk *c, vcells *vc)
{
    const uint8_t *v = c->vals;
    for (uint32_t i = 0; i < c->count; i++) {
        uint32_t len = c->fixed ? 8 : pt_get_be32(c->lens + 4 * (size_t)i);
        if (vc_push(vc, pt_get_be32(c->quals + 4 * (size_t)i), len, v) != 0)
            return PT_ENOMEM;
        v += len;
    }
    return 0;
}

typedef struct bytebuf {
    uint8_t *p;
    size_t n, cap;
} bytebuf;

static int bb_reserve(bytebuf *b, size_t n)
{
    void *p = b->p;
    int rv = pt_emb_reserve(&p, &b->cap, n, 4096);
    b->p = p;
    return rv;
}

static int chunk_encode(bytebuf *b, const vcell *c, size_t n)
{
    int fixed = 1;
    size_t vbytes = 0;
    for (size_t i = 0; i < n; i++) {
        fixed &= c[i].vlen == 8;
        vbytes += c[i].vlen;
    }
    size_t need = 5 + n * (fixed ? 4 : 8) + vbytes;
    if (bb_reserve(b, need) != 0)
        return PT_ENOMEM;
    uint8_t *p = b->p;
    *p++ = fixed ? 1 : 2;
    pt_put_be32(p, (uint32_t)n);
    p += 4;
    for (size_t i = 0; i < n; i++, p += 4)
        pt_put_be32(p, c[i].q);
    if (!fixed)
        for (size_t i = 0; i < n; i++, p += 4)
            pt_put_be32(p, c[i].vlen);
    for (size_t i = 0; i < n; i++) {
        if (c[i].vlen)
            memcpy(p, c[i].v, c[i].vlen);
        p += c[i].vlen;
    }
    b->n = need;
    return 0;
}

/* A RocksDB key of the points family split into row and first qualifier. */
static int split_key(const char *k, size_t kn, pt_slice *row, uint32_t *first)
{
    const char *z = memchr(k, 0, kn);
    if (!z || kn - (size_t)(z - k) != 5)
        return PT_EINTERNAL;
    *row = (pt_slice){(const uint8_t *)k, (size_t)(z - k)};
    *first = pt_get_be32((const uint8_t *)z + 1);
    return 0;
}

/* ---- the hash table ---- */

static hrow *row_find(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    for (hrow *r = h->tab[hash & h->mask]; r; r = r->next)
        if (r->hash == hash && r->keylen == n && memcmp(r->key, key, n) == 0)
            return r;
    return NULL;
}

static int tab_grow(head *h)
{
    size_t nb = (h->mask + 1) * 2;
    hrow **t = calloc(nb, sizeof(*t));
    if (!t)
        return PT_ENOMEM;
    for (size_t i = 0; i <= h->mask; i++) {
        hrow *r = h->tab[i];
        while (r) {
            hrow *next = r->next;
            r->next = t[r->hash & (nb - 1)];
            t[r->hash & (nb - 1)] = r;
            r = next;
        }
    }
    h->bytes += (nb - (h->mask + 1)) * sizeof(*t);
    free(h->tab);
    h->tab = t;
    h->mask = nb - 1;
    return 0;
}

static hrow *row_get_hashed(head *h, const uint8_t *key, size_t n, uint64_t hash)
{
    hrow *r = row_find(h, key, n, hash);
    if (r)
        return r;
    if (h->nrows >= h->mask + 1 && tab_grow(h) != 0)
        return NULL;
    r = calloc(1, sizeof(*r) + n);
    if (!r)
        return NULL;
    r->hash = hash;
    r->keylen = (uint32_t)n;
    r->sorted = 1;
    memcpy(r->key, key, n);
    r->next = h->tab[hash & h->mask];
    h->tab[hash & h->mask] = r;
    h->nrows++;
    h->bytes += sizeof(*r) + n;
    return r;
}

static hrow *row_get(head *h, const uint8_t *key, size_t n)
{
    return row_get_hashed(h, key, n, XXH3_64bits(key, n));
}

/* Empties a flushed row. Its cell array stays for the next samples (no heap call per row
 * and flush in steady state); one that was far too big this time is halved. */
static void row_clear(head *h, hrow *r)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (r->cells[i].vlen > 8) {
            free(r->cells[i].v.p);
            h->bytes -= r->cells[i].vlen;
            h->cell_bytes -= r->cells[i].vlen;
        }
    h->cells -= r->n;
    h->cell_bytes -= (size_t)r->n * sizeof(cell);
    if (r->cap > 16 && r->n < r->cap / 4) {
        cell *c = realloc(r->cells, (size_t)(r->cap / 2) * sizeof(*c));
        if (c) {
            h->bytes -= (size_t)(r->cap - r->cap / 2) * sizeof(cell);
            r->cells = c;
            r->cap /= 2;
        }
    }
    r->n = 0;
    r->sorted = 1;
}

/* Gives an idle row's cell array back. */
static void row_release(head *h, hrow *r)
{
    h->bytes -= (size_t)r->cap * sizeof(cell);
    free(r->cells);
    r->cells = NULL;
    r->cap = 0;
}

static int row_append(head *h, hrow *r, uint32_t q, pt_slice v)
{
    if (r->n == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 8;
        cell *c = realloc(r->cells, (size_t)cap * sizeof(*c));
        if (!c)
            return PT_ENOMEM;
        h->bytes += (size_t)(cap - r->cap) * sizeof(*c);
        r->cells = c;
        r->cap = cap;
    }
    cell *c = &r->cells[r->n];
    c->q = q;
    c->vlen = (uint32_t)v.n;
    if (v.n <= 8) {
        if (v.n)
            memcpy(c->v.in, v.p, v.n);
    } else {
        c->v.p = malloc(v.n);
        if (!c->v.p)
            return PT_ENOMEM;
        memcpy(c->v.p, v.p, v.n);
        h->bytes += v.n;
        h->cell_bytes += v.n;
    }
    h->cell_bytes += sizeof(cell);
    if (r->n && r->cells[r->n - 1].q >= q)
        r->sorted = 0;
    r->n++;
    h->cells++;
    return 0;
}

/* Stable merge sort by qualifier: equal qualifiers keep their write order. */
static void msort(cell *a, cell *tmp, size_t n)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = a[j].q < a[i].q ? a[j++] : a[i++];
            while (i < mid)
                tmp[k++] = a[i++];
            while (j < hi)
                tmp[k++] = a[j++];
        }
        memcpy(a, tmp, n * sizeof(*a));
    }
}

/* Sorts a row's cells and keeps the last write of every qualifier. */
static int row_normalize(head *h, hrow *r)
{
    if (r->sorted)
        return 0;
    cell *tmp = malloc((size_t)r->n * sizeof(*tmp));
    if (!tmp)
        return PT_ENOMEM;
    msort(r->cells, tmp, r->n);
    free(tmp);
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        if (i + 1 < r->n && r->cells[i + 1].q == r->cells[i].q) {
            if (r->cells[i].vlen > 8) {
                free(r->cells[i].v.p);
                h->bytes -= r->cells[i].vlen;
                h->cell_bytes -= r->cells[i].vlen;
            }
            continue;
        }
        r->cells[k++] = r->cells[i];
    }
    h->cells -= r->n - k;
    h->cell_bytes -= (size_t)(r->n - k) * sizeof(cell);
    r->n = k;
    r->sorted = 1;
    return 0;
}

/* ---- the log ---- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return PT_EIO;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int wbuf_reserve(head *h, size_t n)
{
    if (n <= h->wbuf_cap)
        return 0;
    size_t cap = h->wbuf_cap ? h->wbuf_cap : 64 << 10;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(h->wbuf, cap);
    if (!p)
        return PT_ENOMEM;
    h->wbuf = p;
    h->wbuf_cap = cap;
    return 0;
}

static int wal_truncate(head *h)
{
    if (ftruncate(h->wal_fd, 0) != 0 || fdatasync(h->wal_fd) != 0)
        return PT_EIO;
    h->wal_size = 0;
    h->wal_gen++;
    if (h->wal_gen == 0)
        h->wal_gen = 1;
    h->wal_next_id = 0;
    return 0;
}

/* ---- flush ---- */

static int row_key_cmp(const void *x, const void *y)
{
    const hrow *a = *(const hrow *const *)x, *b = *(const hrow *const *)y;
    return pt_slice_cmp((pt_slice){a->key, a->keylen}, (pt_slice){b->key, b->keylen});
}

typedef struct flusher {
    embedded *e;
    rocksdb_writebatch_t *wb;
    rocksdb_readoptions_t *ro;
    rocksdb_iterator_t *it;
    keybuf key;
    bytebuf val;
    vcells old, merged;
    bytebuf oldbytes;   /* copies of the chunks read back */
} flusher;

/* The flush's reads need an iterator that sees what the flush wrote so far: an older one
 * would step over every newer entry of the memtable, invisible to it, on each backward
 * seek, which made a flush quadratic. */
static int fl_iter(flusher *f)
{
    if (f->it)
        rocksdb_iter_destroy(f->it);
    f->it = rocksdb_create_iterator_cf(f->e->db, f->ro, f->e->cf[CF_POINTS]);
    return f->it ? 0 : PT_ENOMEM;
}

static int fl_commit(flusher *f)
{
    if (rocksdb_writebatch_count(f->wb) == 0)
        return 0;
    char *msg = NULL;
    rocksdb_write(f->e->db, f->e->flush_wopts, f->wb, &msg);
    rocksdb_writebatch_clear(f->wb);
    return msg ? pt_emb_rocks_error(msg) : fl_iter(f);
}

static int fl_put(flusher *f, const hrow *r, const vcell *c, size_t n)
{
    uint8_t q[4];
    pt_put_be32(q, c[0].q);
    int rv;
    if ((rv = pt_emb_kb_set(&f->key, r->key, r->keylen, 0, q, 4)) != 0 ||
        (rv = chunk_encode(&f->val, c, n)) != 0)
        return rv;
    rocksdb_writebatch_put_cf(f->wb, f->e->cf[CF_POINTS], f->key.p, f->key.n,
                              (const char *)f->val.p, f->val.n);
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
    if (split_key(k, kn, &row, first) != 0)
        return 0;
    if (!pt_slice_eq(row, (pt_slice){r->key, r->keylen}))
        return 0;
    *v = rocksdb_iter_value(it, vn);
    return 1;
}

/* Learns the row's last chunk from RocksDB. */
static int fl_learn_last(flusher *f, hrow *r)
{
    static const uint8_t top[4] = {0xff, 0xff, 0xff, 0xff};
    int rv = pt_emb_kb_set(&f->key, r->key, r->keylen, 0, top, 4);
    if (rv != 0)
        return rv;
    rocksdb_iter_seek_for_prev(f->it, f->key.p, f->key.n);
    uint32_t first;
    const char *v;
    size_t vn;
    r->known = 1;
    r->has_last = 0;
    if (it_row_is(f->it, r, &first, &v, &vn)) {
        chunk c;
        if (chunk_parse((const uint8_t *)v, vn, &c) != 0)
            return PT_EINTERNAL;
        r->has_last = 1;
        r->last_first = first;
        r->last_n = c.count;
        r->last_max = pt_get_be32(c.quals + 4 * ((size_t)c.count - 1));
    }
    char *msg = NULL;
    rocksdb_iter_get_error(f->it, &msg);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

/* Reads the chunks the head cells [h_min, h_max] touch (from the one holding or preceding
 * h_min), deletes them, and writes them back merged with the head cells. */
static int fl_merge_row(flusher *f, hrow *r)
{
    uint32_t h_min = r->cells[0].q, h_max = r->cells[r->n - 1].q;
    uint8_t q[4];
    pt_put_be32(q, h_min);
    int rv = pt_emb_kb_set(&f->key, r->key, r->keylen, 0, q, 4);
    if (rv != 0)
        return rv;
    uint32_t first;
    const char *v;
    size_t vn;
    rocksdb_iter_seek_for_prev(f->it, f->key.p, f->key.n);
    if (!it_row_is(f->it, r, &first, &v, &vn)) {
        if ((rv = pt_emb_kb_set(&f->key, r->key, r->keylen, 0, NULL, 0)) != 0)
            return rv;
        rocksdb_iter_seek(f->it, f->key.p, f->key.n);
    }
    /* Copy the chunks first: iterator memory does not outlive next(). */
    f->oldbytes.n = 0;
    size_t nchunks = 0;
    while (it_row_is(f->it, r, &first, &v, &vn) && first <= h_max) {
        if ((rv = bb_reserve(&f->oldbytes, f->oldbytes.n + vn + 8)) != 0)
            return rv;
        uint8_t *dst = f->oldbytes.p + f->oldbytes.n;
        pt_put_le32(dst, (uint32_t)vn);
        pt_put_le32(dst + 4, first);
        memcpy(dst + 8, v, vn);
        f->oldbytes.n += vn + 8;
        nchunks++;
        rocksdb_iter_next(f->it);
    }
    int reached_end = !it_row_is(f->it, r, &first, &v, &vn);
    char *msg = NULL;
    rocksdb_iter_get_error(f->it, &msg);
    if (msg)
        return pt_emb_rocks_error(msg);

    f->old.n = 0;
    for (size_t off = 0, i = 0; i < nchunks; i++) {
        uint32_t len = pt_get_le32(f->oldbytes.p + off);
        uint32_t cfirst = pt_get_le32(f->oldbytes.p + off + 4);
        chunk c;
        if (chunk_parse(f->oldbytes.p + off + 8, len, &c) != 0)
            return PT_EINTERNAL;
        if ((rv = chunk_cells(&c, &f->old)) != 0)
            return rv;
        pt_put_be32(q, cfirst);
        if ((rv = pt_emb_kb_set(&f->key, r->key, r->keylen, 0, q, 4)) != 0)
            return rv;
        rocksdb_writebatch_delete_cf(f->wb, f->e->cf[CF_POINTS], f->key.p, f->key.n);
        off += 8 + len;
    }

    f->merged.n = 0;
    size_t i = 0, j = 0;
    while (i < f->old.n || j < r->n) {
        const vcell *o = i < f->old.n ? &f->old.c[i] : NULL;
        const cell *hc = j < r->n ? &r->cells[j] : NULL;
        if (hc && (!o || hc->q <= o->q)) {
            if (o && o->q == hc->q)
                i++; /* the head wins */
            rv = vc_push(&f->merged, hc->q, hc->vlen, cell_val(hc));
            j++;
        } else {
            rv = vc_push(&f->merged, o->q, o->vlen, o->v);
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

static int fl_row(flusher *f, hrow *r)
{
    int rv = row_normalize(&f->e->h, r);
    if (rv != 0)
        return rv;
    if (!r->known && (rv = fl_learn_last(f, r)) != 0)
        return rv;
    if (r->has_last && (r->cells[0].q <= r->last_max || r->last_n < CHUNK_SMALL))
        return fl_merge_row(f, r);
    /* In-order ingest into a row whose last chunk is big enough: a new chunk. */
    f->merged.n = 0;
    for (uint32_t i = 0; i < r->n; i++)
        if ((rv = vc_push(&f->merged, r->cells[i].q, r->cells[i].vlen,
                          cell_val(&r->cells[i]))) != 0)
            return rv;
    return fl_put_all(f, r, f->merged.c, f->merged.n);
}

/* Drops rows that had no cells for two flushes in a row, so series churn does not grow
 * the head forever. */
static void evict_idle(head *h)
{
    for (size_t b = 0; b <= h->mask; b++) {
        hrow **pp = &h->tab[b];
        while (*pp) {
            hrow *r = *pp;
            if (r->n == 0 && r->idle) {
                *pp = r->next;
                row_release(h, r);
                h->bytes -= sizeof(*r) + r->keylen;
                h->nrows--;
                free(r);
                continue;
            }
            r->idle = r->n == 0;
            if (r->idle)
                row_release(h, r);
            pp = &r->next;
        }
    }
}

/* Writes the head into RocksDB, makes it durable there, then empties the head and the
 * log. Called with mu held. On failure the head and the log are left as they were (some
 * chunks may be in RocksDB already; flushing them again is harmless). */
static int flush_locked(embedded *e)
{
    head *h = &e->h;
    size_t n = 0;
    for (size_t b = 0; b <= h->mask; b++)
        for (hrow *r = h->tab[b]; r; r = r->next)
            n += r->n > 0;
    int rv = 0;
    hrow **rows = NULL;
    flusher f = {.e = e};
    if (n == 0)
        goto done;
    rows = malloc(n * sizeof(*rows));
    f.wb = rocksdb_writebatch_create();
    f.ro = rocksdb_readoptions_create();
    if (!rows || !f.wb || !f.ro) {
        rv = PT_ENOMEM;
        goto out;
    }
    rocksdb_readoptions_set_total_order_seek(f.ro, 1);
    if ((rv = fl_iter(&f)) != 0)
        goto out;
    size_t k = 0;
    for (size_t b = 0; b <= h->mask; b++)
        for (hrow *r = h->tab[b]; r; r = r->next)
            if (r->n > 0)
                rows[k++] = r;
    qsort(rows, n, sizeof(*rows), row_key_cmp);
    for (size_t i = 0; i < n && rv == 0; i++) {
        rv = fl_row(&f, rows[i]);
        size_t sz = 0;
        rocksdb_writebatch_data(f.wb, &sz);
        if (rv == 0 && sz >= (8u << 20))
            rv = fl_commit(&f);
    }
    if (rv == 0)
        rv = fl_commit(&f);
    if (rv == 0) {
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        char *msg = NULL;
        rocksdb_flush_cf(e->db, fo, e->cf[CF_POINTS], &msg);
        rocksdb_flushoptions_destroy(fo);
        if (msg)
            rv = pt_emb_rocks_error(msg);
    }
    if (rv != 0) {
        /* What we believed about the rows' last chunks may be wrong now. */
        for (size_t i = 0; i < n; i++)
            rows[i]->known = 0;
        goto out;
    }
done:
    /* Before the rows are emptied: a row flushed now is not idle. */
    evict_idle(h);
    for (size_t i = 0; i < n; i++)
        row_clear(h, rows[i]);
    if ((rv = wal_truncate(h)) != 0)
        goto out;
    h->epoch++;
    h->flushes++;
out:
    if (f.it)
        rocksdb_iter_destroy(f.it);
    if (f.ro)
        rocksdb_readoptions_destroy(f.ro);
    if (f.wb)
        rocksdb_writebatch_destroy(f.wb);
    free(rows);
    free(f.key.p);
    free(f.val.p);
    free(f.old.c);
    free(f.merged.c);
    free(f.oldbytes.p);
    return rv;
}

/* ---- write ---- */

static size_t wal_entry_max(const pt_mutation *m)
{
    return 1 + 8 + m->row.n + 1 + 12 + m->value.n;
}

int pt_emb_head_write(embedded *e, const pt_mutation *m, size_t n)
{
    head *h = &e->h;
    size_t need = WAL_HDR, k = 0;
    for (size_t i = 0; i < n; i++)
        if (m[i].table == PT_TABLE_POINTS) {
            need += wal_entry_max(&m[i]);
            k++;
        }
    if (k == 0)
        return 0;
    /* Row hashes outside the lock; a batch sorted by row hashes each row once. */
    uint64_t *hashes = malloc(k * sizeof(*hashes));
    if (!hashes)
        return PT_ENOMEM;
    for (size_t i = 0, j = 0, last = SIZE_MAX; i < n; i++) {
        if (m[i].table != PT_TABLE_POINTS)
            continue;
        if (last != SIZE_MAX && pt_slice_eq(m[last].row, m[i].row))
            hashes[j] = hashes[j - 1];
        else
            hashes[j] = XXH3_64bits(m[i].row.p, m[i].row.n);
        last = i;
        j++;
    }

    pthread_mutex_lock(&h->mu);
    int rv = 0;
    /* The budget counts samples, not the rows that stay between flushes: with more series
     * than fit in it, counting rows would flush on every write. */
    if (h->cell_bytes > h->budget) {
        rv = flush_locked(e);
        /* A failed flush keeps the head; accept writes up to twice the budget, then make
         * the client back off and retry. */
        if (rv != 0 && h->cell_bytes > 2 * h->budget)
            goto out;
        rv = 0;
    }
    if ((rv = wbuf_reserve(h, need)) != 0)
        goto out;
    if (k > h->wrows_cap) {
        hrow **p = realloc(h->wrows, k * sizeof(*p));
        if (!p) {
            rv = PT_ENOMEM;
            goto out;
        }
        h->wrows = p;
        h->wrows_cap = k;
    }

    /* The rows are scattered over memory: load buckets 16 cells ahead and the rows they
     * lead to (header and key) 8 ahead, so the cache misses overlap instead of queueing. */
    enum { BUCKET_AHEAD = 16, ROW_AHEAD = 8 };
    for (size_t i = 0; i < k && i < BUCKET_AHEAD; i++)
        __builtin_prefetch(&h->tab[hashes[i] & h->mask]);

    /* Encode the record; rows defined by it get an id of this generation. */
    uint8_t *p = h->wbuf + WAL_HDR;
    uint32_t first_new_id = h->wal_next_id;
    hrow *prev = NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_mutation *mu = &m[i];
        if (mu->table != PT_TABLE_POINTS)
            continue;
        if (j + BUCKET_AHEAD < k)
            __builtin_prefetch(&h->tab[hashes[j + BUCKET_AHEAD] & h->mask]);
        if (j + ROW_AHEAD < k) {
            const hrow *ahead = h->tab[hashes[j + ROW_AHEAD] & h->mask];
            if (ahead) {
                __builtin_prefetch(ahead);
                __builtin_prefetch((const char *)ahead + 64);
                __builtin_prefetch((const char *)ahead + 128);
            }
        }
        hrow *r = prev;
        /* Batches come sorted by row: most cells share the previous cell's row. */
        if (!r || r->keylen != mu->row.n || memcmp(r->key, mu->row.p, mu->row.n) != 0) {
            r = row_get_hashed(h, mu->row.p, mu->row.n, hashes[j]);
            if (!r) {
                rv = PT_ENOMEM;
                goto undo;
            }
            prev = r;
        }
        if (r->wal_gen != h->wal_gen || r->wal_id >= h->wal_next_id) {
            r->wal_gen = h->wal_gen;
            r->wal_id = h->wal_next_id++;
            *p++ = 'R';
            pt_put_le32(p, r->wal_id);
            pt_put_le32(p + 4, r->keylen);
            memcpy(p + 8, r->key, r->keylen);
            p += 8 + r->keylen;
        }
        *p++ = 'C';
        pt_put_le32(p, r->wal_id);
        memcpy(p + 4, mu->qual.p, 4);
        pt_put_le32(p + 8, (uint32_t)mu->value.n);
        if (mu->value.n)
            memcpy(p + 12, mu->value.p, mu->value.n);
        p += 12 + mu->value.n;
        h->wrows[j++] = r;
    }
    size_t len = (size_t)(p - h->wbuf) - WAL_HDR;
    memcpy(h->wbuf, wal_magic, 4);
    pt_put_le32(h->wbuf + 4, h->wal_gen);
    pt_put_le32(h->wbuf + 8, (uint32_t)len);
    uint64_t sum = XXH3_64bits_withSeed(h->wbuf + WAL_HDR, len, h->wal_gen);
    pt_put_le32(h->wbuf + 12, (uint32_t)sum);
    pt_put_le32(h->wbuf + 16, (uint32_t)(sum >> 32));
    rv = write_all(h->wal_fd, h->wbuf, WAL_HDR + len);
    if (rv == 0 && h->sync && fdatasync(h->wal_fd) != 0)
        rv = PT_EIO;
    if (rv != 0) {
        /* Cut the torn record off so the next record is not hidden behind it. */
        if (ftruncate(h->wal_fd, (off_t)h->wal_size) != 0)
            rv = PT_EIO;
        goto undo;
    }
    h->wal_size += WAL_HDR + len;

    j = 0;
    for (size_t i = 0; i < n; i++) {
        if (m[i].table != PT_TABLE_POINTS)
            continue;
        /* Where the cell goes: the end of the row's cell array, another cold line. */
        if (j + ROW_AHEAD < k && h->wrows[j + ROW_AHEAD]->cells) {
            const hrow *ahead = h->wrows[j + ROW_AHEAD];
            __builtin_prefetch(&ahead->cells[ahead->n], 1);
        }
        /* Out of memory here leaves cells logged but not in the head; the error makes
         * the client retry the batch, which logs and applies it again. */
        if ((rv = row_append(h, h->wrows[j++], pt_get_be32(m[i].qual.p), m[i].value)) != 0)
            goto out;
    }
    goto out;

undo:
    /* Ids handed out by a record that was not written must not be referenced later. */
    for (size_t b = 0; b <= h->mask; b++)
        for (hrow *r = h->tab[b]; r; r = r->next)
            if (r->wal_gen == h->wal_gen && r->wal_id >= first_new_id)
                r->wal_gen = 0;
    h->wal_next_id = first_new_id;
out:
    pthread_mutex_unlock(&h->mu);
    free(hashes);
    return rv;
}

/* ---- open / replay / close ---- */

static int replay(embedded *e, const uint8_t *buf, size_t size, size_t *good)
{
    head *h = &e->h;
    hrow **ids = NULL;
    size_t nids = 0, cap = 0;
    uint32_t gen = 0;
    size_t off = 0;
    int rv = 0;
    while (size - off >= WAL_HDR) {
        const uint8_t *r = buf + off;
        uint32_t g = pt_get_le32(r + 4), len = pt_get_le32(r + 8);
        if (memcmp(r, wal_magic, 4) != 0 || (off > 0 && g != gen) || len > size - off - WAL_HDR)
            break;
        uint64_t sum = (uint64_t)pt_get_le32(r + 12) | (uint64_t)pt_get_le32(r + 16) << 32;
        if (XXH3_64bits_withSeed(r + WAL_HDR, len, g) != sum)
            break;
        gen = g;
        const uint8_t *p = r + WAL_HDR, *end = p + len;
        while (p < end) {
            if (*p == 'R' && end - p >= 9) {
                uint32_t id = pt_get_le32(p + 1), kl = pt_get_le32(p + 5);
                if (id != nids || kl == 0 || (size_t)(end - p - 9) < kl ||
                    memchr(p + 9, 0, kl)) {
                    rv = PT_EINTERNAL;
                    goto out;
                }
                if (nids == cap) {
                    cap = cap ? cap * 2 : 1024;
                    hrow **ni = realloc(ids, cap * sizeof(*ni));
                    if (!ni) {
                        rv = PT_ENOMEM;
                        goto out;
                    }
                    ids = ni;
                }
                if (!(ids[nids++] = row_get(h, p + 9, kl))) {
                    rv = PT_ENOMEM;
                    goto out;
                }
                p += 9 + kl;
            } else if (*p == 'C' && end - p >= 13) {
                uint32_t id = pt_get_le32(p + 1), vl = pt_get_le32(p + 9);
                if (id >= nids || (size_t)(end - p - 13) < vl) {
                    rv = PT_EINTERNAL;
                    goto out;
                }
                rv = row_append(h, ids[id], pt_get_be32(p + 5), (pt_slice){p + 13, vl});
                if (rv != 0)
                    goto out;
                p += 13 + vl;
            } else {
                rv = PT_EINTERNAL;
                goto out;
            }
        }
        off += WAL_HDR + len;
    }
    h->wal_gen = gen + 1 ? gen + 1 : 1;
out:
    *good = off;
    free(ids);
    return rv;
}

static int read_file(int fd, uint8_t **out, size_t *n)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return PT_EIO;
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return PT_ENOMEM;
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    *out = buf;
    *n = got;
    return 0;
}

int pt_emb_head_open(embedded *e, const pt_embedded_conf *cfg, char *err, size_t errlen)
{
    head *h = &e->h;
    h->wal_fd = -1;
    if (pthread_mutex_init(&h->mu, NULL) != 0)
        return PT_ENOMEM;
    h->mu_init = 1;
    h->budget = cfg->head_memory ? cfg->head_memory : EMB_DEFAULT_BUDGET;
    h->sync = cfg->sync;
    h->wal_gen = 1;
    h->mask = 1023;
    h->tab = calloc(h->mask + 1, sizeof(*h->tab));
    size_t pl = strlen(cfg->path) + sizeof("/points.wal");
    h->wal_path = malloc(pl);
    if (!h->tab || !h->wal_path)
        return PT_ENOMEM;
    h->bytes = (h->mask + 1) * sizeof(*h->tab);
    snprintf(h->wal_path, pl, "%s/points.wal", cfg->path);
    h->wal_fd = open(h->wal_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (h->wal_fd < 0) {
        snprintf(err, errlen, "embedded: open %s: %s", h->wal_path, strerror(errno));
        return PT_EIO;
    }
    uint8_t *buf = NULL;
    size_t size = 0, good = 0;
    int rv = read_file(h->wal_fd, &buf, &size);
    if (rv == 0)
        rv = replay(e, buf, size, &good);
    free(buf);
    if (rv != 0) {
        snprintf(err, errlen, "embedded: replay %s failed at byte %zu (%s)", h->wal_path, good,
                 rv == PT_ENOMEM ? "out of memory" : "corrupt record");
        return rv;
    }
    if (good < size)
        fprintf(stderr, "promtable: embedded: %s: dropped %zu bytes of a torn or stale tail\n",
                h->wal_path, size - good);
    h->wal_size = good;
    if (ftruncate(h->wal_fd, (off_t)good) != 0) {
        snprintf(err, errlen, "embedded: truncate %s: %s", h->wal_path, strerror(errno));
        return PT_EIO;
    }
    /* Start from an empty log: replayed cells go to RocksDB now. */
    pthread_mutex_lock(&h->mu);
    rv = flush_locked(e);
    pthread_mutex_unlock(&h->mu);
    if (rv != 0)
        snprintf(err, errlen, "embedded: flushing the replayed log of %s failed", cfg->path);
    else
        h->ready = 1;
    return rv;
}

int pt_emb_head_close(embedded *e)
{
    head *h = &e->h;
    int rv = 0;
    /* Only a head that opened completely may flush: after a failed replay the log holds
     * cells the head does not, and a flush would truncate them away. */
    if (h->ready && e->db && h->wal_fd >= 0) {
        pthread_mutex_lock(&h->mu);
        rv = flush_locked(e);
        pthread_mutex_unlock(&h->mu);
        if (rv != 0)
            fprintf(stderr, "promtable: embedded: flush on close failed (%d); the log %s "
                            "keeps the data for the next open\n", rv, h->wal_path);
    }
    if (h->tab) {
        for (size_t b = 0; b <= h->mask; b++) {
            hrow *r = h->tab[b];
            while (r) {
                hrow *next = r->next;
                row_clear(h, r);
                row_release(h, r);
                free(r);
                r = next;
            }
        }
    }
    if (h->wal_fd >= 0)
        close(h->wal_fd);
    free(h->tab);
    free(h->wal_path);
    free(h->wbuf);
    free(h->wrows);
    if (h->mu_init)
        pthread_mutex_destroy(&h->mu);
    memset(h, 0, sizeof(*h));
    h->wal_fd = -1;
    return rv;
}

/* ---- public knobs ---- */

void pt_embedded_set_budget(pt_backend *b, size_t bytes)
{
    embedded *e = b->state;
    pthread_mutex_lock(&e->h.mu);
    e->h.budget = bytes ? bytes : EMB_DEFAULT_BUDGET;
    pthread_mutex_unlock(&e->h.mu);
}

void pt_embedded_get_stats(pt_backend *b, pt_embedded_stats *out)
{
    embedded *e = b->state;
    pthread_mutex_lock(&e->h.mu);
    *out = (pt_embedded_stats){.flushes = e->h.flushes, .head_rows = e->h.nrows,
                               .head_cells = e->h.cells, .head_bytes = e->h.bytes,
                               .wal_bytes = e->h.wal_size};
    pthread_mutex_unlock(&e->h.mu);
}

int pt_embedded_flush(pt_backend *b)
{
    embedded *e = b->state;
    pthread_mutex_lock(&e->h.mu);
    int rv = flush_locked(e);
    pthread_mutex_unlock(&e->h.mu);
    return rv;
}

/* ---- scan ---- */

typedef struct pscan {
    embedded *e;
    const pt_scan *s;
    pt_cell_fn fn;
    void *ud;
    rocksdb_readoptions_t *ro[2]; /* [0] total order, [1] one row (prefix mode) */
    rocksdb_iterator_t *it[2];
    uint64_t epoch[2];
    keybuf seek, upper;
    vcells hc;           /* the current row's head cells (values in hbytes) */
    bytebuf hbytes;
    size_t rows;
    int done;
    /* head rows of the current range, sorted: keys back to back in keys */
    bytebuf keys;
    pt_slice *hrows;
    size_t nh, hcap;
} pscan;

static int ps_iter_locked(pscan *sc, int one_row)
{
    if (sc->it[one_row] && sc->epoch[one_row] == sc->e->h.epoch)
        return 0;
    if (sc->it[one_row])
        rocksdb_iter_destroy(sc->it[one_row]);
    sc->it[one_row] = NULL;
    if (!sc->ro[one_row]) {
        rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
        if (!ro)
            return PT_ENOMEM;
        if (one_row)
            rocksdb_readoptions_set_prefix_same_as_start(ro, 1);
        else
            rocksdb_readoptions_set_total_order_seek(ro, 1);
        sc->ro[one_row] = ro;
    }
    sc->it[one_row] = rocksdb_create_iterator_cf(sc->e->db, sc->ro[one_row], sc->e->cf[CF_POINTS]);
    sc->epoch[one_row] = sc->e->h.epoch;
    return sc->it[one_row] ? 0 : PT_ENOMEM;
}

static int in_quals(const pt_scan *s, uint32_t q)
{
    uint8_t b[4];
    pt_put_be32(b, q);
    pt_slice qs = {b, 4};
    if (s->qual_start.n && pt_slice_cmp(qs, s->qual_start) < 0)
        return 0;
    if (s->qual_end.n && pt_slice_cmp(qs, s->qual_end) >= 0)
        return 0;
    return 1;
}

/* Copies row's head cells in the qualifier range. Called with mu held. */
static int ps_copy_head_locked(pscan *sc, pt_slice row)
{
    head *h = &sc->e->h;
    sc->hc.n = 0;
    sc->hbytes.n = 0;
    hrow *r = row_find(h, row.p, row.n, XXH3_64bits(row.p, row.n));
    if (!r || r->n == 0)
        return 0;
    int rv = row_normalize(h, r);
    if (rv != 0)
        return rv;
    size_t vb = 0;
    for (uint32_t i = 0; i < r->n; i++)
        vb += r->cells[i].vlen;
    if ((rv = bb_reserve(&sc->hbytes, vb ? vb : 1)) != 0)
        return rv;
    for (uint32_t i = 0; i < r->n; i++) {
        const cell *c = &r->cells[i];
        if (!in_quals(sc->s, c->q))
            continue;
        uint8_t *dst = sc->hbytes.p + sc->hbytes.n;
        if (c->vlen)
            memcpy(dst, cell_val(c), c->vlen);
        sc->hbytes.n += c->vlen;
        /* Offsets for now: hbytes is not reallocated after this point. */
        if ((rv = vc_push(&sc->hc, c->q, c->vlen, dst)) != 0)
            return rv;
    }
    return 0;
}

static int ps_emit(pscan *sc, pt_slice row, int *row_started, uint32_t q, uint32_t vlen,
                   const uint8_t *v)
{
    if (!*row_started) {
        if (sc->s->row_limit && sc->rows == sc->s->row_limit) {
            sc->done = 1;
            return 0;
        }
        sc->rows++;
        *row_started = 1;
    }
    uint8_t qb[4];
    pt_put_be32(qb, q);
    int rv = sc->fn(sc->ud, row, (pt_slice){qb, 4}, (pt_slice){v ? v : qb, vlen});
    if (rv < 0)
        return rv;
    if (rv > 0)
        sc->done = 1;
    return 0;
}

/* Emits one row: its head cells merged with its chunks. */
static int ps_row(pscan *sc, pt_slice row_in, int one_row)
{
    const pt_scan *s = sc->s;
    head *h = &sc->e->h;
    int rv;
    /* row_in may point into iterator memory that the refresh below frees. */
    if ((rv = pt_emb_kb_set(&sc->upper, row_in.p, row_in.n, -1, NULL, 0)) != 0)
        return rv;
    pt_slice row = {(const uint8_t *)sc->upper.p, sc->upper.n};

    pthread_mutex_lock(&h->mu);
    rv = ps_iter_locked(sc, one_row);
    if (rv == 0)
        rv = ps_copy_head_locked(sc, row);
    pthread_mutex_unlock(&h->mu);
    if (rv != 0)
        return rv;
    rocksdb_iterator_t *it = sc->it[one_row];

    if (s->qual_start.n) {
        if ((rv = pt_emb_kb_set(&sc->seek, row.p, row.n, 0, s->qual_start.p, s->qual_start.n)))
            return rv;
        rocksdb_iter_seek_for_prev(it, sc->seek.p, sc->seek.n);
    }
    pt_slice kr = {0};
    uint32_t first = 0;
    int ok = 0;
    if (s->qual_start.n && rocksdb_iter_valid(it)) {
        size_t kn;
        const char *k = rocksdb_iter_key(it, &kn);
        ok = split_key(k, kn, &kr, &first) == 0 && pt_slice_eq(kr, row);
    }
    if (!ok) {
        if ((rv = pt_emb_kb_set(&sc->seek, row.p, row.n, 0, NULL, 0)))
            return rv;
        rocksdb_iter_seek(it, sc->seek.p, sc->seek.n);
    }

    int started = 0;
    size_t hi = 0;
    while (!sc->done && rocksdb_iter_valid(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (split_key(k, kn, &kr, &first) != 0)
            return PT_EINTERNAL;
        if (!pt_slice_eq(kr, row))
            break;
        uint8_t fb[4];
        pt_put_be32(fb, first);
        if (s->qual_end.n && pt_slice_cmp((pt_slice){fb, 4}, s->qual_end) >= 0)
            break;
        const char *v = rocksdb_iter_value(it, &vn);
        chunk c;
        if (chunk_parse((const uint8_t *)v, vn, &c) != 0)
            return PT_EINTERNAL;
        const uint8_t *vp = c.vals;
        for (uint32_t i = 0; i < c.count && !sc->done; i++) {
            uint32_t q = pt_get_be32(c.quals + 4 * (size_t)i);
            uint32_t len = c.fixed ? 8 : pt_get_be32(c.lens + 4 * (size_t)i);
            const uint8_t *val = vp;
            vp += len;
            if (!in_quals(s, q))
                continue;
            while (hi < sc->hc.n && sc->hc.c[hi].q < q && !sc->done) {
                const vcell *x = &sc->hc.c[hi++];
                if ((rv = ps_emit(sc, row, &started, x->q, x->vlen, x->v)) != 0)
                    return rv;
            }
            if (sc->done)
                break;
            if (hi < sc->hc.n && sc->hc.c[hi].q == q)
                continue; /* the head's newer value comes next */
            if ((rv = ps_emit(sc, row, &started, q, len, val)) != 0)
                return rv;
        }
        rocksdb_iter_next(it);
    }
    while (hi < sc->hc.n && !sc->done) {
        const vcell *x = &sc->hc.c[hi++];
        if ((rv = ps_emit(sc, row, &started, x->q, x->vlen, x->v)) != 0)
            return rv;
    }
    char *msg = NULL;
    rocksdb_iter_get_error(it, &msg);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

static int slice_ptr_cmp(const void *x, const void *y)
{
    return pt_slice_cmp(*(const pt_slice *)x, *(const pt_slice *)y);
}

static int in_range(pt_slice row, const pt_row_range *r)
{
    return pt_slice_cmp(row, r->start) >= 0 && (r->end.n == 0 || pt_slice_cmp(row, r->end) < 0);
}

/* Collects the head rows with cells in range r, sorted. Called with mu held. */
static int ps_head_rows_locked(pscan *sc, const pt_row_range *r, int one_row)
{
    head *h = &sc->e->h;
    sc->nh = 0;
    sc->keys.n = 0;
    size_t bytes = 0, n = 0;
    if (one_row) {
        hrow *x = row_find(h, r->start.p, r->start.n, XXH3_64bits(r->start.p, r->start.n));
        if (x && x->n > 0) {
            bytes = x->keylen;
            n = 1;
        }
    } else {
        for (size_t b = 0; b <= h->mask; b++)
            for (hrow *x = h->tab[b]; x; x = x->next)
                if (x->n > 0 && in_range((pt_slice){x->key, x->keylen}, r)) {
                    bytes += x->keylen;
                    n++;
                }
    }
    if (n == 0)
        return 0;
    if (bb_reserve(&sc->keys, bytes) != 0)
        return PT_ENOMEM;
    if (n > sc->hcap) {
        pt_slice *p = realloc(sc->hrows, n * sizeof(*p));
        if (!p)
            return PT_ENOMEM;
        sc->hrows = p;
        sc->hcap = n;
    }
    for (size_t b = 0; b <= h->mask; b++)
        for (hrow *x = h->tab[b]; x; x = x->next) {
            if (x->n == 0)
                continue;
            pt_slice key = {x->key, x->keylen};
            if (one_row ? !pt_slice_eq(key, r->start) : !in_range(key, r))
                continue;
            memcpy(sc->keys.p + sc->keys.n, x->key, x->keylen);
            sc->hrows[sc->nh++] = (pt_slice){sc->keys.p + sc->keys.n, x->keylen};
            sc->keys.n += x->keylen;
            if (one_row)
                break;
        }
    qsort(sc->hrows, sc->nh, sizeof(*sc->hrows), slice_ptr_cmp);
    return 0;
}

static int ps_range(pscan *sc, const pt_row_range *r)
{
    head *h = &sc->e->h;
    int one_row = pt_emb_single_row(r);
    int bounded = r->end.n > 0;
    int rv;
    keybuf upper = {0}, cur = {0};

    pthread_mutex_lock(&h->mu);
    rv = ps_iter_locked(sc, one_row);
    if (rv == 0)
        rv = ps_head_rows_locked(sc, r, one_row);
    pthread_mutex_unlock(&h->mu);
    if (rv != 0)
        goto out;
    if (bounded && (rv = pt_emb_kb_row_bound(&upper, r->end)) != 0)
        goto out;
    if ((rv = pt_emb_kb_row_bound(&sc->seek, r->start)) != 0)
        goto out;
    if (bounded && pt_slice_cmp((pt_slice){(const uint8_t *)sc->seek.p, sc->seek.n},
                                (pt_slice){(const uint8_t *)upper.p, upper.n}) >= 0)
        goto out;
    rocksdb_iter_seek(sc->it[one_row], sc->seek.p, sc->seek.n);

    size_t hi = 0;
    while (!sc->done) {
        rocksdb_iterator_t *it = sc->it[one_row];
        pt_slice rrow = {0};
        int have_r = 0;
        if (rocksdb_iter_valid(it)) {
            size_t kn;
            uint32_t first;
            const char *k = rocksdb_iter_key(it, &kn);
            if (!bounded || pt_slice_cmp((pt_slice){(const uint8_t *)k, kn},
                                         (pt_slice){(const uint8_t *)upper.p, upper.n}) < 0) {
                if (split_key(k, kn, &rrow, &first) != 0) {
                    rv = PT_EINTERNAL;
                    goto out;
                }
                have_r = 1;
            }
        } else {
            char *msg = NULL;
            rocksdb_iter_get_error(it, &msg);
            if (msg) {
                rv = pt_emb_rocks_error(msg);
                goto out;
            }
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
        if ((rv = pt_emb_kb_set(&cur, row.p, row.n, -1, NULL, 0)) != 0)
            goto out;
        if ((rv = ps_row(sc, row, one_row)) != 0)
            goto out;
        if (one_row)
            break;
        /* Next row: the first key after every chunk of this one. */
        if ((rv = pt_emb_kb_set(&sc->seek, cur.p, cur.n, 1, NULL, 0)) != 0)
            goto out;
        rocksdb_iter_seek(sc->it[one_row], sc->seek.p, sc->seek.n);
    }
out:
    free(upper.p);
    free(cur.p);
    return rv;
}

int pt_emb_points_scan(embedded *e, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    pscan sc = {.e = e, .s = s, .fn = fn, .ud = ud};
    int rv = 0;
    for (size_t i = 0; i < s->nranges && !sc.done && rv == 0; i++)
        rv = ps_range(&sc, &s->ranges[i]);
    for (int i = 0; i < 2; i++) {
        if (sc.it[i])
            rocksdb_iter_destroy(sc.it[i]);
        if (sc.ro[i])
            rocksdb_readoptions_destroy(sc.ro[i]);
    }
    free(sc.seek.p);
    free(sc.upper.p);
    free(sc.hc.c);
    free(sc.hbytes.p);
    free(sc.keys.p);
    free(sc.hrows);
    return rv;
}
