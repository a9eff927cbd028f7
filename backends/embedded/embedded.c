/*
 * The embedded backend: RocksDB in a local directory, the default store.
 *
 * Two column families, one per table:
 *
 * - "index": one RocksDB entry per cell, key = row || 0x00 || qualifier, value = the cell
 *   value. Row keys never contain 0x00 (backend.h), so the first 0x00 splits a key into row
 *   and qualifier, and RocksDB's bytewise order is Bigtable's (row, qualifier) order.
 *   Writes go through RocksDB's WAL (fsync'ed when cfg->sync).
 * - "points.v2": the points table, written through an in-memory head and its own log and
 *   stored as chunks of cells per row; see embedded_head.c for the layout. ("points", the
 *   one-entry-per-cell layout of the first version, is refused at open.)
 *
 * Both hold exactly the cells of DESIGN §3 as scans see them, so data can be copied cell
 * by cell between backends.
 *
 * Versions: pt_mutation.version_us is accepted but not stored; a write replaces the cell,
 * so only the latest write is kept. That is Bigtable's max-versions=1 for our writes,
 * which are idempotent (a retry rewrites the same value at the same version); the one
 * difference is that a late write with an *older* version still wins here, which the
 * write path never produces for a given cell except as a same-timestamp rewrite.
 *
 * Durability: write() returns after every cell is in a log (RocksDB's for the index, the
 * head's for points), fdatasync'ed when cfg->sync = 1; with sync = 0 it survives a process
 * crash but not a power loss.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <rocksdb/c.h>

#include "backend.h"
#include "embedded_int.h"
#include "error.h"

static const char *const cf_names[NCF] = {"default", "points.v2", "index"};

/* ---- errors ---- */

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Maps a RocksDB status string to a pt code and frees it. RocksDB's C API reports only
 * Status::ToString(), whose prefix names the status code. */
int pt_emb_rocks_error(char *msg)
{
    int rv = PT_EIO;
    if (starts_with(msg, "Operation timed out"))
        rv = PT_ETIMEOUT;
    else if (starts_with(msg, "Resource busy") || starts_with(msg, "Operation failed. Try again") ||
             starts_with(msg, "Result incomplete") || starts_with(msg, "Shutdown in progress"))
        rv = PT_EUNAVAIL;
    rocksdb_free(msg);
    return rv;
}

/* ---- the prefix extractor: a key's row part, row || 0x00 ----
 * It gives every SST file a bloom filter over rows, so reading one row (the common case:
 * one series in one time bucket) skips the files that do not hold it. */

static char *row_prefix(void *st, const char *key, size_t n, size_t *out_n)
{
    (void)st;
    const char *z = memchr(key, 0, n);
    *out_n = z ? (size_t)(z - key) + 1 : n;
    return (char *)key; /* RocksDB wants a pointer into the key; it is never written */
}

static unsigned char row_prefix_in_domain(void *st, const char *key, size_t n)
{
    (void)st;
    return memchr(key, 0, n) != NULL;
}

static unsigned char row_prefix_in_range(void *st, const char *key, size_t n)
{
    (void)st;
    (void)key;
    (void)n;
    return 0; /* deprecated by RocksDB, never consulted */
}

static const char *row_prefix_name(void *st)
{
    (void)st;
    return "promtable.RowPrefix.v1";
}

static void row_prefix_destroy(void *st)
{
    (void)st;
}

/* ---- open / close ---- */

/* mkdir -p: RocksDB creates only the last component itself. */
static int mkdir_p(const char *path, char *err, size_t errlen)
{
    char *dup = strdup(path);
    if (!dup)
        return PT_ENOMEM;
    int rv = 0;
    for (char *p = dup + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(dup, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "embedded: mkdir %s: %s", dup, strerror(errno));
            rv = PT_EIO;
            break;
        }
        *p = c;
        if (c == '\0')
            break;
    }
    free(dup);
    return rv;
}

/* Options tuned for ingest: large memtables written concurrently, LZ4 for the upper
 * levels and ZSTD for the bottom one (row keys repeat a lot), a row bloom filter, and a
 * shared block cache. The same options serve both column families. */
static rocksdb_options_t *make_options(rocksdb_cache_t *cache)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_create_missing_column_families(o, 1);
    rocksdb_options_set_max_background_jobs(o, 2);
    rocksdb_options_set_bytes_per_sync(o, 1 << 20);
    rocksdb_options_set_keep_log_file_num(o, 4);
    rocksdb_options_set_max_log_file_size(o, 16 << 20);
    /* The index family is written rarely; without a cap its memtable would pin old WAL
     * files until it fills. */
    rocksdb_options_set_max_total_wal_size(o, 256u << 20);

    rocksdb_options_set_write_buffer_size(o, 64u << 20);
    rocksdb_options_set_max_write_buffer_number(o, 3);
    rocksdb_options_set_target_file_size_base(o, 64u << 20);
    rocksdb_options_set_max_bytes_for_level_base(o, 256u << 20);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(o, 1);
    rocksdb_options_set_compression(o, rocksdb_lz4_compression);
    rocksdb_options_set_bottommost_compression(o, rocksdb_zstd_compression);

    rocksdb_options_set_prefix_extractor(
        o, rocksdb_slicetransform_create(NULL, row_prefix_destroy, row_prefix,
                                         row_prefix_in_domain, row_prefix_in_range,
                                         row_prefix_name));
    /* No memtable prefix bloom: it costs a hash on every insert and only saves reads. */

    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_size(t, 16 << 10);
    rocksdb_block_based_options_set_block_cache(t, cache);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(t, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(t, 1);
    rocksdb_block_based_options_set_format_version(t, 5);
    /* Only scans read this store, never point lookups, so whole-key filters are waste. */
    rocksdb_block_based_options_set_whole_key_filtering(t, 0);
    rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_options_set_block_based_table_factory(o, t);
    rocksdb_block_based_options_destroy(t);
    return o;
}

static void embedded_close(void *state)
{
    embedded *e = state;
    pt_emb_head_close(e);
    for (int i = 0; i < NCF; i++) {
        if (e->cf[i])
            rocksdb_column_family_handle_destroy(e->cf[i]);
        e->cf[i] = NULL;
    }
    if (e->db)
        rocksdb_close(e->db);
    e->db = NULL;
    if (e->wopts)
        rocksdb_writeoptions_destroy(e->wopts);
    e->wopts = NULL;
    if (e->flush_wopts)
        rocksdb_writeoptions_destroy(e->flush_wopts);
    e->flush_wopts = NULL;
}

/* A store written by the first version kept points one entry per cell in "points". Its
 * data would be misread as chunks, so it is refused with a clear message. */
static int old_layout(const char *path)
{
    rocksdb_options_t *o = rocksdb_options_create();
    size_t n = 0;
    char *msg = NULL;
    char **names = rocksdb_list_column_families(o, path, &n, &msg);
    rocksdb_options_destroy(o);
    int old = 0;
    if (msg) {
        rocksdb_free(msg); /* no store yet */
        n = 0;
    }
    for (size_t i = 0; i < n; i++)
        old |= strcmp(names[i], "points") == 0;
    if (names) /* allocated even when listing fails */
        rocksdb_list_column_families_destroy(names, n);
    return old;
}

static int embedded_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    embedded *e = state;
    const pt_embedded_conf *ec = cfg->own;
    e->h.wal_fd = -1;
    if (!ec || !ec->path || !*ec->path) {
        snprintf(err, errlen, "embedded: no data directory configured");
        return PT_EINTERNAL;
    }
    int rv = mkdir_p(ec->path, err, errlen);
    if (rv != 0)
        return rv;
    if (old_layout(ec->path)) {
        snprintf(err, errlen, "embedded: %s holds the old one-key-per-sample layout (column "
                              "family \"points\"); copy its data out with the old version",
                 ec->path);
        return PT_EINTERNAL;
    }

    /* Options and the cache are reference-counted inside RocksDB once the DB holds
     * them, so our handles are released right after open. */
    rocksdb_cache_t *cache = rocksdb_cache_create_lru(64u << 20);
    rocksdb_options_t *opts = make_options(cache);
    const rocksdb_options_t *cfopts[NCF] = {opts, opts, opts};
    char *msg = NULL;
    e->db = rocksdb_open_column_families(opts, ec->path, NCF, cf_names, cfopts, e->cf, &msg);
    rocksdb_options_destroy(opts);
    rocksdb_cache_destroy(cache);
    if (msg) {
        snprintf(err, errlen, "embedded: open %s: %s", ec->path, msg);
        rv = pt_emb_rocks_error(msg);
        goto fail;
    }
    e->wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(e->wopts, ec->sync ? 1 : 0);
    rocksdb_writeoptions_set_memtable_insert_hint_per_batch(e->wopts, 1);
    e->flush_wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(e->flush_wopts, 1);
    if ((rv = pt_emb_head_open(e, ec, err, errlen)) != 0)
        goto fail;
    return 0;

fail:
    embedded_close(e);
    return rv;
}

/* ---- write ---- */

static rocksdb_column_family_handle_t *table_cf(embedded *e, unsigned table)
{
    switch (table) {
    case PT_TABLE_POINTS: return e->cf[CF_POINTS];
    case PT_TABLE_INDEX: return e->cf[CF_INDEX];
    default: return NULL;
    }
}

static int row_ok(pt_slice row)
{
    return row.n > 0 && memchr(row.p, 0, row.n) == NULL;
}

/* RocksDB copies slices with memcpy; never hand it a NULL pointer, even for 0 bytes. */
static const char *bytes(pt_slice s)
{
    return s.n ? (const char *)s.p : "";
}

static int embedded_write(void *state, const pt_mutation *m, size_t n)
{
    embedded *e = state;
    /* Validate everything first so that a bad batch changes nothing. */
    size_t nindex = 0;
    for (size_t i = 0; i < n; i++) {
        if (!table_cf(e, m[i].table))
            return PT_EINTERNAL;
        if (!row_ok(m[i].row))
            return PT_EBADREQ;
        /* The points schema has 4-byte qualifiers (DESIGN §3); chunks rely on it. */
        if (m[i].table == PT_TABLE_POINTS && m[i].qual.n != 4)
            return PT_EBADREQ;
        if (m[i].value.n > UINT32_MAX / 2)
            return PT_EBADREQ;
        nindex += m[i].table == PT_TABLE_INDEX;
    }
    if (n == 0)
        return 0;

    /* Index first: a points cell whose series is not indexed yet is harmless, and the
     * caller retries the whole batch on any error. */
    if (nindex) {
        static const char sep = '\0';
        rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
        for (size_t i = 0; i < n; i++) {
            if (m[i].table != PT_TABLE_INDEX)
                continue;
            const char *kp[3] = {bytes(m[i].row), &sep, bytes(m[i].qual)};
            size_t kn[3] = {m[i].row.n, 1, m[i].qual.n};
            const char *vp = bytes(m[i].value);
            size_t vn = m[i].value.n;
            rocksdb_writebatch_putv_cf(wb, e->cf[CF_INDEX], 3, kp, kn, 1, &vp, &vn);
        }
        char *msg = NULL;
        rocksdb_write(e->db, e->wopts, wb, &msg);
        rocksdb_writebatch_destroy(wb);
        if (msg)
            return pt_emb_rocks_error(msg);
    }
    return pt_emb_head_write(e, m, n);
}

/* ---- scan ---- */

int pt_emb_reserve(void **p, size_t *cap, size_t n, size_t first)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : first;
    while (c < n)
        c *= 2;
    void *q = realloc(*p, c);
    if (!q)
        return PT_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int kb_reserve(keybuf *kb, size_t n)
{
    void *p = kb->p;
    int rv = pt_emb_reserve(&p, &kb->cap, n, 256);
    kb->p = p;
    return rv;
}

/* kb = a || sep || b, where sep < 0 means no separator byte. */
int pt_emb_kb_set(keybuf *kb, const void *a, size_t an, int sep, const void *b, size_t bn)
{
    size_t n = an + (sep >= 0) + bn;
    if (kb_reserve(kb, n) != 0)
        return PT_ENOMEM;
    if (an)
        memcpy(kb->p, a, an);
    if (sep >= 0)
        kb->p[an] = (char)sep;
    if (bn)
        memcpy(kb->p + an + (sep >= 0), b, bn);
    kb->n = n;
    return 0;
}

/* The RocksDB key that bounds the rows >= b (as a start) or < b (as an end). If b holds
 * no 0x00, that is b || 0x00. If its first 0x00 is at i, every row that compares below b
 * is <= b[0..i), so the bound is b[0..i) || 0x01: it sorts after all cells of that row
 * (including qualifiers that start with 0x00) and before the rows extending it. The
 * single-row end r || 0x00 thus becomes r || 0x01. */
int pt_emb_kb_row_bound(keybuf *kb, pt_slice b)
{
    const uint8_t *z = b.n ? memchr(b.p, 0, b.n) : NULL;
    if (z)
        return pt_emb_kb_set(kb, b.p, (size_t)(z - b.p), 1, NULL, 0);
    return pt_emb_kb_set(kb, b.p, b.n, 0, NULL, 0);
}

/* A range covers exactly one row when it is [r, r || 0x00 ...) with r free of 0x00;
 * such a range can use the bloom filter. */
int pt_emb_single_row(const pt_row_range *r)
{
    pt_slice s = r->start, e = r->end;
    return s.n > 0 && e.n > s.n && e.p[s.n] == 0 && memcmp(s.p, e.p, s.n) == 0 &&
           memchr(s.p, 0, s.n) == NULL;
}

static int key_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    return pt_slice_cmp((pt_slice){(const uint8_t *)a, an}, (pt_slice){(const uint8_t *)b, bn});
}

typedef struct scanner {
    embedded *e;
    const pt_scan *s;
    pt_cell_fn fn;
    void *ud;
    rocksdb_column_family_handle_t *cf;
    const rocksdb_snapshot_t *snap;
    rocksdb_readoptions_t *ro[2];  /* [0] total order, [1] one row (prefix mode) */
    rocksdb_iterator_t *it[2];
    keybuf seek, upper, last_row;
    int have_row;
    size_t rows;
    int done;  /* row_limit reached or the callback asked to stop */
} scanner;

static rocksdb_iterator_t *scanner_iter(scanner *sc, int one_row)
{
    if (sc->it[one_row])
        return sc->it[one_row];
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    if (sc->snap)
        rocksdb_readoptions_set_snapshot(ro, sc->snap);
    /* With a prefix extractor, RocksDB's default seek may skip keys of other prefixes;
     * range scans must ask for total order, one-row scans may stop at the prefix end. */
    if (one_row)
        rocksdb_readoptions_set_prefix_same_as_start(ro, 1);
    else
        rocksdb_readoptions_set_total_order_seek(ro, 1);
    sc->ro[one_row] = ro;
    sc->it[one_row] = rocksdb_create_iterator_cf(sc->e->db, ro, sc->cf);
    return sc->it[one_row];
}

static void seek_to(rocksdb_iterator_t *it, const keybuf *kb)
{
    rocksdb_iter_seek(it, kb->p, kb->n);
}

static int scan_range(scanner *sc, const pt_row_range *r)
{
    const pt_scan *s = sc->s;
    int one_row = pt_emb_single_row(r);
    int bounded = r->end.n > 0;
    int rv;

    if (bounded && (rv = pt_emb_kb_row_bound(&sc->upper, r->end)) != 0)
        return rv;
    if ((rv = pt_emb_kb_row_bound(&sc->seek, r->start)) != 0)
        return rv;
    if (bounded && key_cmp(sc->seek.p, sc->seek.n, sc->upper.p, sc->upper.n) >= 0)
        return 0;

    rocksdb_iterator_t *it = scanner_iter(sc, one_row);
    seek_to(it, &sc->seek);
    while (rocksdb_iter_valid(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (bounded && key_cmp(k, kn, sc->upper.p, sc->upper.n) >= 0)
            break;
        const char *z = memchr(k, 0, kn);
        if (!z)
            return PT_EINTERNAL; /* not a key this backend wrote */
        pt_slice row = {(const uint8_t *)k, (size_t)(z - k)};
        pt_slice qual = {(const uint8_t *)z + 1, kn - row.n - 1};

        /* Skip to the qualifier range rather than step through cells outside it. */
        if (s->qual_start.n && pt_slice_cmp(qual, s->qual_start) < 0) {
            if ((rv = pt_emb_kb_set(&sc->seek, row.p, row.n, 0, s->qual_start.p, s->qual_start.n)))
                return rv;
            seek_to(it, &sc->seek);
            continue;
        }
        if (s->qual_end.n && pt_slice_cmp(qual, s->qual_end) >= 0) {
            if (one_row)
                break;
            if ((rv = pt_emb_kb_set(&sc->seek, row.p, row.n, 1, NULL, 0)))
                return rv;
            seek_to(it, &sc->seek);
            continue;
        }

        if (!sc->have_row || !pt_slice_eq(row, (pt_slice){(const uint8_t *)sc->last_row.p,
                                                          sc->last_row.n})) {
            if (s->row_limit && sc->rows == s->row_limit) {
                sc->done = 1;
                return 0;
            }
            if ((rv = pt_emb_kb_set(&sc->last_row, row.p, row.n, -1, NULL, 0)))
                return rv;
            sc->have_row = 1;
            sc->rows++;
        }
        const char *v = rocksdb_iter_value(it, &vn);
        rv = sc->fn(sc->ud, row, qual, (pt_slice){(const uint8_t *)v, vn});
        if (rv < 0)
            return rv;
        if (rv > 0) {
            sc->done = 1;
            return 0;
        }
        rocksdb_iter_next(it);
    }
    char *msg = NULL;
    rocksdb_iter_get_error(it, &msg);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

static int embedded_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    embedded *e = state;
    if (s->table == PT_TABLE_POINTS)
        return pt_emb_points_scan(e, s, fn, ud);
    scanner sc = {.e = e, .s = s, .fn = fn, .ud = ud, .cf = table_cf(e, s->table)};
    if (!sc.cf)
        return PT_EINTERNAL;

    /* Ranges of both kinds need two iterators; a snapshot keeps them consistent. */
    size_t ones = 0;
    for (size_t i = 0; i < s->nranges; i++)
        ones += pt_emb_single_row(&s->ranges[i]);
    if (ones > 0 && ones < s->nranges)
        sc.snap = rocksdb_create_snapshot(e->db);

    int rv = 0;
    for (size_t i = 0; i < s->nranges && !sc.done && rv == 0; i++)
        rv = scan_range(&sc, &s->ranges[i]);

    for (int i = 0; i < 2; i++) {
        if (sc.it[i])
            rocksdb_iter_destroy(sc.it[i]);
        if (sc.ro[i])
            rocksdb_readoptions_destroy(sc.ro[i]);
    }
    if (sc.snap)
        rocksdb_release_snapshot(e->db, sc.snap);
    free(sc.seek.p);
    free(sc.upper.p);
    free(sc.last_row.p);
    return rv;
}

#define C(field) offsetof(pt_embedded_conf, field)
static const pt_conf_key conf_keys[] = {
    {"path", "storage.path", PT_CONF_STR, "./data", 0, 0, C(path),
     "Data directory of the embedded store."},
    {"sync", "storage.sync", PT_CONF_BOOL, "false", 0, 1, C(sync),
     "fsync the embedded store's logs before acknowledging each write."},
    {"head_memory", "storage.head_memory", PT_CONF_BYTES, "256MiB", 1LL << 20, 1LL << 40,
     C(head_memory), "Samples held in memory (16 B each) before a flush into RocksDB."},
};
#undef C

const pt_backend_ops pt_backend_embedded = {
    .name = "embedded",
    .caps = 0,
    .state_size = sizeof(embedded),
    .conf = conf_keys,
    .nconf = sizeof(conf_keys) / sizeof(conf_keys[0]),
    .conf_size = sizeof(pt_embedded_conf),
    .open = embedded_open,
    .close = embedded_close,
    .write = embedded_write,
    .scan = embedded_scan,
    .init = NULL,
};
