/*
 * The embedded backend: RocksDB in a local directory, the default store.
 *
 * Two column families, one per table:
 *
 * - "index": one RocksDB entry per cell (rocks.c). Writes go through RocksDB's WAL
 *   (fsync'ed with storage.embedded.sync).
 * - "points.v2": the points table, written through an in-memory head (head.c) and its own
 *   log (wal.c) and stored as chunks of cells per row (chunk.c, flush.c). ("points", the
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
 * head's for points), fdatasync'ed with storage.embedded.sync; without it it survives a process
 * crash but not a power loss. An acknowledged points cell is in the log and in the head.
 */
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "embedded.h"
#include "embedded_int.h"
#include "error.h"

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

static int flush_now(embedded *e)
{
    pthread_mutex_lock(&e->mu);
    int rv = pt_emb_flush_locked(e);
    pthread_mutex_unlock(&e->mu);
    return rv;
}

static void embedded_close(void *state)
{
    embedded *e = state;
    pt_emb_expire_stop(&e->x);
    /* Only a head that opened completely may flush: after a failed replay the log holds
     * cells the head does not, and a flush would truncate them away. */
    if (e->ready) {
        int rv = flush_now(e);
        if (rv != 0)
            fprintf(stderr,
                    "promtable: embedded: flush on close failed (%d); the log %s "
                    "keeps the data for the next open\n",
                    rv, e->w.path);
    }
    e->ready = 0;
    pt_emb_head_free(&e->h);
    pt_emb_wal_close(&e->w);
    if (e->mu_init)
        pthread_mutex_destroy(&e->mu);
    e->mu_init = 0;
    pt_emb_rocks_close(&e->r);
    pt_emb_expire_free(&e->x);
}

/* Every setting this backend uses is read here. */
static int embedded_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    embedded *e = state;
    const pt_embedded_conf *ec = cfg->own;
    e->w.fd = -1;
    if (!ec || !ec->path || !*ec->path) {
        snprintf(err, errlen, "embedded: no data directory configured");
        return PT_EINTERNAL;
    }
    const char *path = ec->path;
    int sync = ec->sync;
    e->budget = ec->head_memory ? ec->head_memory : EMB_DEFAULT_BUDGET;

    int rv = mkdir_p(path, err, errlen);
    if (rv != 0)
        return rv;
    if ((rv = pt_emb_expire_init(&e->x, &e->r, (int64_t)cfg->retention_seconds * 1000,
                                  cfg->index_span_ms, cfg->retention_dropped)) != 0 ||
        (rv = pt_emb_rocks_open(&e->r, path, sync,
                                 ec->block_cache ? ec->block_cache : EMB_DEFAULT_BLOCK_CACHE, err,
                                 errlen)) != 0)
        goto fail;
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        rv = PT_ENOMEM;
        goto fail;
    }
    e->mu_init = 1;
    if ((rv = pt_emb_head_init(&e->h)) != 0 ||
        (rv = pt_emb_wal_open(&e->w, path, sync, err, errlen)) != 0 ||
        (rv = pt_emb_wal_replay(&e->w, &e->h, err, errlen)) != 0)
        goto fail;
    /* Start from an empty log: replayed cells go to RocksDB now. */
    if ((rv = flush_now(e)) != 0) {
        snprintf(err, errlen, "embedded: flushing the replayed log of %s failed", path);
        goto fail;
    }
    if ((rv = pt_emb_expire_start(&e->x, &e->r)) != 0) {
        snprintf(err, errlen, "embedded: cannot start the retention thread");
        goto fail;
    }
    e->ready = 1;
    return 0;

fail:
    embedded_close(e);
    return rv;
}

/* ---- write ---- */

static int write_points(embedded *e, const pt_mutation *m, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += m[i].table == PT_TABLE_POINTS;
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
            hashes[j] = pt_emb_head_hash(m[i].row.p, m[i].row.n);
        last = i;
        j++;
    }

    pthread_mutex_lock(&e->mu);
    int rv = 0;
    /* The budget counts samples, not the rows that stay between flushes: with more series
     * than fit in it, counting rows would flush on every write. */
    if (e->h.cell_bytes > e->budget) {
        rv = pt_emb_flush_locked(e);
        /* A failed flush keeps the head; accept writes up to twice the budget, then make
         * the client back off and retry. */
        if (rv != 0 && e->h.cell_bytes > 2 * e->budget)
            goto out;
        rv = 0;
    }
    /* Out of memory in apply leaves cells logged but not in the head; the error makes
     * the client retry the batch, which logs and applies it again. */
    if ((rv = pt_emb_wal_log(&e->w, &e->h, m, n, hashes, k)) == 0)
        rv = pt_emb_head_apply(&e->h, e->w.rows, m, n, k);
out:
    pthread_mutex_unlock(&e->mu);
    free(hashes);
    return rv;
}

static int row_ok(pt_slice row)
{
    return row.n > 0 && memchr(row.p, 0, row.n) == NULL;
}

static int embedded_write(void *state, const pt_mutation *m, size_t n)
{
    embedded *e = state;
    /* Validate everything first so that a bad batch changes nothing. */
    size_t nindex = 0;
    for (size_t i = 0; i < n; i++) {
        if (m[i].table >= PT_TABLE_COUNT)
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
    int rv;
    if (nindex && (rv = pt_emb_rocks_write_index(&e->r, m, n)) != 0)
        return rv;
    return write_points(e, m, n);
}

/* ---- scan ---- */

static int embedded_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    embedded *e = state;
    switch (s->table) {
    case PT_TABLE_POINTS: return pt_emb_scan_points(e, s, fn, ud);
    case PT_TABLE_INDEX: return pt_emb_rocks_scan_index(&e->r, s, fn, ud);
    default: return PT_EINTERNAL;
    }
}

/* ---- public knobs ---- */

void pt_embedded_set_budget(pt_backend *b, size_t bytes)
{
    embedded *e = b->state;
    pthread_mutex_lock(&e->mu);
    e->budget = bytes ? bytes : EMB_DEFAULT_BUDGET;
    pthread_mutex_unlock(&e->mu);
}

void pt_embedded_get_stats(pt_backend *b, pt_embedded_stats *out)
{
    embedded *e = b->state;
    pthread_mutex_lock(&e->mu);
    *out = (pt_embedded_stats){.flushes = e->flushes,
                               .head_rows = e->h.nrows,
                               .head_cells = e->h.cells,
                               .head_bytes = e->h.bytes,
                               .wal_bytes = e->w.size,
                               .expired_chunks = atomic_load(&e->x.dropped[0]),
                               .expired_index = atomic_load(&e->x.dropped[1]),
                               .compactions = atomic_load(&e->x.compactions)};
    pthread_mutex_unlock(&e->mu);
}

int pt_embedded_flush(pt_backend *b)
{
    return flush_now(b->state);
}

void pt_embedded_compact(pt_backend *b, int64_t now_ms)
{
    embedded *e = b->state;
    atomic_store(&e->x.now_ms, now_ms);
    pt_emb_expire_compact(&e->x, &e->r);
}

#define C(field) offsetof(pt_embedded_conf, field)
static const pt_conf_key conf_keys[] = {
    {"path", "storage.path", PT_CONF_STR, "./data", 0, 0, C(path),
     "Data directory of the embedded store."},
    {"sync", "storage.sync", PT_CONF_BOOL, "false", 0, 1, C(sync),
     "fsync the embedded store's logs before acknowledging each write."},
    {"head_memory", "storage.head_memory", PT_CONF_BYTES, "256MiB", 1LL << 20, 1LL << 40,
     C(head_memory), "Samples held in memory (16 B each) before a flush into RocksDB."},
    {"block_cache", NULL, PT_CONF_BYTES, "64MiB", 8LL << 20, 1LL << 40, C(block_cache),
     "RocksDB block cache (uncompressed table blocks of the index and the points)."},
};
#undef C

const pt_backend_ops pt_backend_embedded = {
    .name = "embedded",
    .caps = PT_BACKEND_CAP_EXCLUSIVE, /* RocksDB's lock file */
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
