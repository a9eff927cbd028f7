/*
 * The embedded backend: RocksDB in a local directory, the default store.
 *
 * Two column families, one per table:
 *
 * - "index": one RocksDB entry per cell (rocks.c). A write's index cells go into the
 *   points log's record and the index head (ihead.c), which drains them into RocksDB in
 *   large sorted batches through RocksDB's WAL (fsync'ed with storage.embedded.sync);
 *   an index scan drains first.
 * - "points.v2": the points table, written through an in-memory head (head.c) and its own
 *   log (wal.c) and stored as chunks of cells per row (chunk.c, flush.c). ("points", a
 *   one-entry-per-cell layout, is refused at open.)
 *
 * Both hold exactly the cells of docs/storage-format.md as scans see them, so data can be
 * copied cell by cell between backends.
 *
 * Versions: pt_mutation.version_us is accepted but not stored; a write replaces the cell,
 * so only the latest write is kept. That is Bigtable's max-versions=1 for our writes,
 * which are idempotent (a retry rewrites the same value at the same version); the one
 * difference is that a late write with an *older* version still wins here, which the
 * write path never produces for a given cell except as a same-timestamp rewrite.
 *
 * Durability: write() returns after every cell is in the points log, fdatasync'ed with
 * storage.embedded.sync; without it it survives a process crash but not a power loss. An
 * acknowledged cell is in a log (points.<n>.wal) and in the head (points) or the index
 * head (index cells) until it is durable in RocksDB; a log is deleted only after every
 * cell in it is.
 *
 * Flushes run on the backend's own thread (flusher.c): the head is double-buffered by
 * shard (see embedded_int.h), so a writer only freezes the next shard and goes on.
 *
 * Write-back (pt_backend_config.inner set, Bigtable's buffer_path): the same head, logs and
 * flush thread in front of that backend, the sink. RocksDB is not opened (a LOCK file
 * keeps one process per directory); flushes write the frozen rows into the sink, index
 * cells go straight to it, and scans merge the head with the sink's scan (scan.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embedded.h"
#include "embedded_int.h"
#include "error.h"
#include "log.h"

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

static void stop_thread(embedded *e)
{
    pt_emb_thread_stop(e->thread, &e->mu, &e->work, &e->stop, &e->thread_started);
}

/* After a flush of everything and the stop of the flush thread: whether RocksDB holds
 * every cell of the logs still on disk, the current one's included. The current log's
 * points cells are in the shards' current generations until a flush; its index cells
 * are in the index head until a drain (the caller drained it). */
static int logs_durable(const embedded *e)
{
    if (e->w.dropped != e->w.seq - 1)
        return 0; /* a closed log stayed behind */
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        const hshard *sh = &e->h.sh[k];
        if (sh->flushing || sh->cells[sh->cur] != 0)
            return 0;
    }
    return 1;
}

static void embedded_close(void *state)
{
    embedded *e = state;
    pt_emb_expire_stop(&e->x);
    /* Only a head that opened completely may flush: after a failed replay the log holds
     * cells the head does not, and a flush would truncate them away. */
    int flushed = 0;
    if (e->ready) {
        int rv = pt_emb_flusher_sync(e);
        /* Index cells no flush drained: a log whose records hold index cells only (a new
         * store's format row) has no shard to freeze, so no flush takes them. */
        if (rv == 0)
            rv = pt_emb_ihead_drain(&e->ix);
        if (rv != 0)
            fprintf(stderr,
                    "promtable: embedded: flush on close failed (%s); the logs in %s "
                    "keep the data for the next open\n",
                    pt_strerror(rv), e->w.dir);
        flushed = rv == 0;
    }
    e->ready = 0;
    stop_thread(e);
    /* Everything is in RocksDB: a clean stop leaves no log of ours, and the index's
     * memtable goes into a table file rather than stay in RocksDB's log. */
    if (flushed && logs_durable(e))
        pt_emb_wal_end(&e->w);
    if (flushed && !e->sink && pt_emb_rocks_flush_index(&e->r) != 0)
        fprintf(stderr, "promtable: embedded: writing the index memtable on close failed; "
                        "RocksDB's log keeps it for the next open\n");
    pt_emb_ihead_free(&e->ix);
    pt_emb_head_free(&e->h);
    free(e->flush_rows);
    e->flush_rows = NULL;
    pt_emb_wal_close(&e->w);
    if (e->cond_init) {
        pthread_cond_destroy(&e->work);
        pthread_cond_destroy(&e->flushed);
    }
    e->cond_init = 0;
    if (e->mu_init)
        pthread_mutex_destroy(&e->mu);
    e->mu_init = 0;
    if (e->drop_mu_init) {
        pthread_mutex_destroy(&e->drop_mu);
        pthread_mutex_destroy(&e->rewrite_mu);
    }
    e->drop_mu_init = 0;
    pt_emb_readahead_stop(&e->ra);
    pt_emb_rocks_close(&e->r);
    pt_emb_expire_free(&e->x);
    if (e->lock_fd > 0)
        close(e->lock_fd); /* releases the lock */
    e->lock_fd = 0;
}

/* A write-back store's lock on its directory, the way RocksDB locks its own (a write lock
 * on the file LOCK), so one process at a time uses the logs. */
static int lock_dir(embedded *e, const char *path, char *err, size_t errlen)
{
    char name[4096];
    snprintf(name, sizeof(name), "%s/LOCK", path);
    int fd = open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "embedded: %s: %s", name, strerror(errno));
        return PT_EIO;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) { /* also against this process's other opens */
        snprintf(err, errlen, "embedded: %s is in use: another open store holds its LOCK", path);
        close(fd);
        return PT_EBUSY;
    }
    e->lock_fd = fd;
    return 0;
}

static int init_sync(embedded *e)
{
    if (pthread_mutex_init(&e->mu, NULL) != 0)
        return PT_ENOMEM;
    e->mu_init = 1;
    if (pthread_mutex_init(&e->drop_mu, NULL) != 0)
        return PT_ENOMEM;
    if (pthread_mutex_init(&e->rewrite_mu, NULL) != 0) {
        pthread_mutex_destroy(&e->drop_mu);
        return PT_ENOMEM;
    }
    e->drop_mu_init = 1;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return PT_ENOMEM;
    int rv = PT_ENOMEM;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
        pthread_cond_init(&e->work, &ca) == 0) {
        if (pthread_cond_init(&e->flushed, &ca) == 0) {
            e->cond_init = 1;
            rv = 0;
        } else {
            pthread_cond_destroy(&e->work);
        }
    }
    pthread_condattr_destroy(&ca);
    return rv;
}

/* A new head, the logs of path opened and replayed into it, the replayed cells flushed
 * into RocksDB and the logs emptied. */
static int load_logs(embedded *e, const char *path, int sync, char *err, size_t errlen)
{
    int rv;
    if ((rv = pt_emb_head_init(&e->h)) != 0 ||
        (rv = pt_emb_wal_open(&e->w, path, sync, err, errlen)) != 0 ||
        (rv = pt_emb_wal_replay(&e->w, &e->h, &e->ix, err, errlen)) != 0)
        return rv;
    pt_emb_flush_clean(path);
    /* Start from empty logs: replayed cells go to RocksDB now. */
    if ((rv = pt_emb_flusher_replayed(e)) != 0)
        snprintf(err, errlen, "embedded: flushing the replayed logs of %s failed (%s)", path,
                 pt_strerror(rv));
    return rv;
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
    e->age_step_ns = ec->head_max_age_ms > 0
                         ? (uint64_t)ec->head_max_age_ms * 1000000u / HEAD_SHARDS : 0;
    e->last_freeze_ns = pt_now_ns();

    int rv = mkdir_p(path, err, errlen);
    if (rv != 0)
        return rv;
    /* Write-back: the sink keeps the points and the index, and applies the retention. */
    e->sink = cfg->inner;
    if (e->sink) {
        if ((rv = lock_dir(e, path, err, errlen)) != 0)
            goto fail;
    } else if ((rv = pt_emb_expire_init(&e->x, &e->r, cfg)) != 0 ||
               (rv = pt_emb_rocks_open(&e->r, path, sync,
                                        ec->block_cache ? ec->block_cache
                                                        : EMB_DEFAULT_BLOCK_CACHE,
                                        ec->table_index_memory, err, errlen)) != 0) {
        goto fail;
    }
    if (!e->sink && ec->index_preload > 0)
        e->index_preloaded = pt_emb_rocks_preload_index(&e->r, ec->index_preload);
    if (!e->sink && (rv = pt_emb_readahead_start(&e->ra, &e->r, (unsigned)ec->read_threads)) != 0) {
        snprintf(err, errlen, "embedded: cannot start the read-ahead threads");
        goto fail;
    }
    if ((rv = init_sync(e)) != 0)
        goto fail;
    /* Index cells drain past a sixteenth of the head's budget (at least 4 MiB): pending
     * cells are held twice, here and in RocksDB's memtable, and larger drains are no
     * faster under churn or a million new series. Writers wait past the whole budget. */
    size_t soft = e->budget / 16 > ((size_t)4 << 20) ? e->budget / 16 : (size_t)4 << 20;
    if ((rv = pt_emb_ihead_init(&e->ix, &e->r, soft, e->budget)) != 0)
        goto fail;
    if ((rv = load_logs(e, path, sync, err, errlen)) != 0)
        goto fail;
    if ((rv = pt_emb_ihead_start(&e->ix)) != 0) {
        snprintf(err, errlen, "embedded: cannot start the index thread");
        goto fail;
    }
    if (pthread_create(&e->thread, NULL, pt_emb_flusher_main, e) != 0) {
        snprintf(err, errlen, "embedded: cannot start the flush thread");
        rv = PT_ENOMEM;
        goto fail;
    }
    e->thread_started = 1;
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

/* A full current generation is frozen and handed to the flush thread. When the previous
 * one is still being flushed, the writer waits for that flush (back-pressure: a flush
 * takes about as long as the writes that filled the generation); when it failed, the
 * writer gets PT_EBUSY (503: Prometheus backs off and retries) rather than wait for an
 * outage. The budget counts samples, not the rows that stay between flushes: with more
 * series than fit in it, counting rows would flush on every write. */
static int make_room_locked(embedded *e)
{
    /* Sweeps take samples out of the head but not out of the log, which only a freeze
     * moves on: the budget counts the samples swept since the last freeze too (so a log
     * holds what it held without sweeps), and a writer waits only for the head's own. */
    while (e->h.cur_bytes + e->h.swept_bytes > e->budget) {
        if (!e->frozen) {
            int rv = pt_emb_flusher_freeze_next_locked(e, 0);
            /* A failed freeze keeps the generation; accept writes up to twice the
             * budget, then make the client back off and retry. */
            if (rv != 0 && e->h.cur_bytes > 2 * e->budget)
                return rv;
            return 0;
        }
        if (e->h.cur_bytes <= e->budget)
            return 0;
        if (e->flush_err != 0)
            return e->flush_err == PT_ENOSPACE ? PT_ENOSPACE : PT_EBUSY;
        e->waits++;
        pthread_cond_wait(&e->flushed, &e->mu);
    }
    return 0;
}

/* Logs the batch (its points cells and the index cells iv[0..ni), sorted) as one
 * record, then puts the points into the head and the index cells into the index head. */
static int write_logged(embedded *e, const pt_mutation *m, size_t n,
                        const pt_mutation *const *iv, size_t ni)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += m[i].table == PT_TABLE_POINTS;
    /* Row hashes outside the lock; a batch sorted by row hashes each row once. */
    uint64_t *hashes = malloc((k ? k : 1) * sizeof(*hashes));
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

    uint8_t tick = pt_emb_head_tick();
    pthread_mutex_lock(&e->mu);
    e->h.tick = tick;
    /* Out of memory in apply leaves cells logged but not in the head; the error makes
     * the client retry the batch, which logs and applies it again. */
    int rv = make_room_locked(e);
    if (rv == 0 && (rv = pt_emb_wal_log(&e->w, &e->h, m, n, hashes, k, iv, ni)) == 0 &&
        (rv = pt_emb_head_apply(&e->h, e->w.rows, m, n, k)) == 0)
        rv = pt_emb_ihead_add(&e->ix, iv, ni);
    if (rv == PT_ENOSPACE && !atomic_exchange(&e->r.full, 1))
        pthread_cond_signal(&e->work); /* the flush thread logs it and watches for space */
    pthread_mutex_unlock(&e->mu);
    free(hashes);
    return rv;
}

static int row_ok(pt_slice row)
{
    return row.n > 0 && memchr(row.p, 0, row.n) == NULL;
}

/* A write-back store's batch with index cells: they go to the sink now, before the points
 * are logged (a series the index lists without points yet is harmless; the other order
 * could acknowledge points no read finds). */
static int write_index_to_sink(embedded *e, const pt_mutation *m, size_t n, size_t nindex)
{
    pt_mutation *iv = malloc(nindex * sizeof(*iv));
    if (!iv)
        return PT_ENOMEM;
    for (size_t i = 0, j = 0; i < n; i++)
        if (m[i].table == PT_TABLE_INDEX)
            iv[j++] = m[i];
    int rv = pt_backend_write(e->sink, iv, nindex);
    free(iv);
    if (rv != 0 || nindex == n)
        return rv;
    return write_logged(e, m, n, NULL, 0);
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
        /* The points schema has 4-byte qualifiers (docs/storage-format.md); chunks rely on it. */
        if (m[i].table == PT_TABLE_POINTS && m[i].qual.n != 4)
            return PT_EBADREQ;
        if (m[i].row.n > UINT32_MAX / 2 || m[i].qual.n > UINT32_MAX / 2 ||
            m[i].value.n > UINT32_MAX / 2)
            return PT_EBADREQ;
        nindex += m[i].table == PT_TABLE_INDEX;
    }
    if (n == 0)
        return 0;

    /* Back-pressure: the index head holds at most its hard limit (plus what the writers
     * waiting here bring). */
    int rv;
    if (nindex && !e->sink && (rv = pt_emb_ihead_wait_room(&e->ix)) != 0)
        return rv;
    if (nindex == 0) /* steady state: samples only */
        return write_logged(e, m, n, NULL, 0);
    if (e->sink)
        return write_index_to_sink(e, m, n, nindex);
    /* The index cells in key order: the log keeps that order for replay, and runs of
     * sorted cells are what the index head merges. */
    const pt_mutation **iv = malloc(nindex * sizeof(*iv));
    if (!iv)
        return PT_ENOMEM;
    for (size_t i = 0, j = 0; i < n; i++)
        if (m[i].table == PT_TABLE_INDEX)
            iv[j++] = &m[i];
    qsort(iv, nindex, sizeof(*iv), pt_emb_ihead_cmp);
    rv = write_logged(e, m, n, iv, nindex);
    free(iv);
    return rv;
}

/* ---- position ---- */

static int embedded_position(void *state, pt_table t, pt_slice key, uint64_t *before,
                             uint64_t *total)
{
    embedded *e = state;
    if (t >= PT_TABLE_COUNT)
        return PT_EINTERNAL;
    if (e->sink)
        return pt_backend_position(e->sink, t, key, before, total);
    pt_buf k;
    pt_buf_init(&k, 0);
    int rv = pt_emb_rocks_row_bound(&k, key);
    if (rv != 0 || (rv = pt_emb_rocks_enter(&e->r)) != 0) {
        pt_buf_free(&k);
        return rv;
    }
    /* Keys are row || 0x00 || qualifier: every one sorts before 0xff... and after "". */
    static const char first[] = "", last[] = "\xff\xff\xff\xff\xff\xff\xff\xff";
    const char *starts[2] = {first, first}, *limits[2] = {(const char *)k.p, last};
    size_t start_n[2] = {0, 0}, limit_n[2] = {k.len, sizeof(last) - 1};
    uint64_t sizes[2] = {0, 0};
    char *err = NULL;
    rocksdb_approximate_sizes_cf(e->r.db, e->r.cf[t == PT_TABLE_POINTS ? CF_POINTS : CF_INDEX], 2,
                                 starts, start_n, limits, limit_n, sizes, &err);
    pt_emb_rocks_leave(&e->r);
    pt_buf_free(&k);
    if (err) {
        rocksdb_free(err);
        return PT_EINTERNAL;
    }
    *before = sizes[0];
    *total = sizes[1];
    return 0;
}

/* ---- scan ---- */

static int embedded_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    embedded *e = state;
    if (s->table >= PT_TABLE_COUNT)
        return PT_EINTERNAL;
    if (e->sink)
        return s->table == PT_TABLE_POINTS ? pt_emb_scan_points(e, s, fn, ud)
                                           : pt_backend_scan(e->sink, s, fn, ud);
    /* RocksDB stays open for the whole scan (a reopen after a disk error waits). */
    int rv = pt_emb_rocks_enter(&e->r);
    if (rv != 0)
        return rv;
    if (s->table == PT_TABLE_POINTS) {
        rv = pt_emb_scan_points(e, s, fn, ud);
    } else {
        /* Every index cell acknowledged before the scan began, in RocksDB. On a full
         * disk that write fails, and the read with it (503): without those cells it
         * would miss the newest series. */
        rv = pt_emb_ihead_drain(&e->ix);
        if (rv == 0)
            rv = pt_emb_rocks_scan_index(&e->r, &e->ra, s, fn, ud);
    }
    pt_emb_rocks_leave(&e->r);
    return rv;
}

/* pt_backend_ops.health: whether a write can be stored now. */
static int embedded_health(void *state, char *msg, size_t msglen)
{
    embedded *e = state;
    if (!atomic_load(&e->r.full))
        return 0;
    snprintf(msg, msglen,
             "no space left on the disk holding %s (%llu bytes free); writes are accepted "
             "again once space is freed",
             e->w.dir ? e->w.dir : "the store", (unsigned long long)pt_emb_disk_free(e->w.dir));
    return PT_ENOSPACE;
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
    const hshard *fsh = &e->h.sh[e->frozen_shard % HEAD_SHARDS];
    size_t cells = 0;
    for (unsigned k = 0; k < HEAD_SHARDS; k++)
        cells += e->h.sh[k].cells[0] + e->h.sh[k].cells[1];
    *out = (pt_embedded_stats){.flushes = e->flushes,
                               .flush_failures = e->flush_failures,
                               .flush_seconds = (double)e->flush_ns / 1e9,
                               .last_flush_seconds = (double)e->last_flush_ns / 1e9,
                               .write_waits = e->waits,
                               .head_rows = e->h.nrows,
                               .rows_evicted = e->h.evicted,
                               .rows_swept = e->h.swept,
                               .head_cells = cells,
                               .head_bytes = e->h.bytes,
                               .frozen_cell_bytes =
                                   e->frozen && e->frozen_shard < HEAD_SHARDS
                                       ? fsh->cell_bytes[fsh->cur ^ 1]
                                       : 0,
                               .wal_bytes = e->w.size,
                               .disk_full = atomic_load(&e->r.full),
                               .disk_full_events = e->full_events,
                               .reopens = e->reopens,
                               .table_index_pinned = atomic_load(&e->r.pinned),
                               .index_preloaded = e->index_preloaded,
                               .wal_damaged_bytes = e->w.damaged_bytes,
                               .expired_chunks = atomic_load(&e->x.dropped[0]),
                               .expired_index = atomic_load(&e->x.dropped[1]),
                               .compactions = atomic_load(&e->x.compactions)};
    pthread_mutex_unlock(&e->mu);
    if (!e->sink)
        pt_emb_rocks_memory(&e->r, &out->memtable_bytes, &out->table_reader_bytes,
                            &out->block_cache_bytes, &out->block_cache_pinned_bytes);
    pt_emb_readahead_stats(&e->ra, &out->readahead_scans, &out->readahead_rows);
    pt_emb_ihead_stat ix;
    pt_emb_ihead_stats(&e->ix, &ix);
    out->index_pending_bytes = ix.pending_bytes;
    out->index_drains = ix.drains;
    out->index_drained_cells = ix.drained_cells;
    out->index_drain_failures = ix.drain_failures;
    out->index_drain_seconds = ix.drain_seconds;
    out->index_waits = ix.waits;
}

static size_t embedded_stats(void *state, pt_backend_stat *out, size_t max)
{
    pt_embedded_stats st;
    pt_backend b = {.ops = &pt_backend_embedded, .state = state};
    pt_embedded_get_stats(&b, &st);
    const pt_backend_stat all[] = {
        {"promtable_embedded_flushes_total", "Head flushes into RocksDB.", 1,
         (double)st.flushes},
        {"promtable_embedded_flush_failures_total",
         "Head flushes that failed (the frozen head is kept and the flush retried).", 1,
         (double)st.flush_failures},
        {"promtable_embedded_flush_seconds_total", "Time spent flushing the head.", 1,
         st.flush_seconds},
        {"promtable_embedded_last_flush_seconds", "Duration of the last flush attempt.", 0,
         st.last_flush_seconds},
        {"promtable_embedded_write_waits_total",
         "Writes that waited for a flush because both head generations were full.", 1,
         (double)st.write_waits},
        {"promtable_embedded_head_rows", "Rows the head tracks.", 0, (double)st.head_rows},
        {"promtable_embedded_head_rows_evicted_total",
         "Head rows dropped after their series stopped getting samples.", 1,
         (double)st.rows_evicted},
        {"promtable_embedded_head_rows_swept_total",
         "Head rows of stopped series a sweep flushed before their shard's turn.", 1,
         (double)st.rows_swept},
        {"promtable_embedded_head_cells", "Samples in the head, both generations.", 0,
         (double)st.head_cells},
        {"promtable_embedded_head_bytes", "Memory the head holds.", 0, (double)st.head_bytes},
        {"promtable_embedded_frozen_bytes",
         "Samples (bytes) of the frozen head shard being flushed.", 0,
         (double)st.frozen_cell_bytes},
        {"promtable_embedded_wal_bytes", "Size of the current points log.", 0,
         (double)st.wal_bytes},
        {"promtable_embedded_wal_damaged_bytes",
         "Bytes of damaged records the start skipped in the points logs it replayed.", 0,
         (double)st.wal_damaged_bytes},
        {"promtable_embedded_disk_full",
         "1 while the disk holding the store is full and writes are refused (503).", 0,
         (double)st.disk_full},
        {"promtable_embedded_disk_full_total", "Times the disk holding the store filled up.",
         1, (double)st.disk_full_events},
        {"promtable_embedded_reopens_total",
         "RocksDB reopened after a disk error once space was free again.", 1,
         (double)st.reopens},
        {"promtable_embedded_memtable_bytes", "Memory of RocksDB's memtables, both tables.", 0,
         (double)st.memtable_bytes},
        {"promtable_embedded_table_reader_bytes",
         "Memory of RocksDB's index and filter blocks held outside the block cache.", 0,
         (double)st.table_reader_bytes},
        {"promtable_embedded_block_cache_bytes", "Memory the RocksDB block cache holds.", 0,
         (double)st.block_cache_bytes},
        {"promtable_embedded_block_cache_pinned_bytes",
         "Of it, pinned: the table files' index and filter blocks while they fit "
         "storage.embedded.table_index_memory, and blocks reads are using.", 0,
         (double)st.block_cache_pinned_bytes},
        {"promtable_embedded_table_index_pinned",
         "1 while the table files' index and filter blocks are kept loaded "
         "(storage.embedded.table_index_memory).", 0, (double)st.table_index_pinned},
        {"promtable_embedded_index_preloaded_bytes",
         "Bytes of the index's table files read into the page cache when the store opened "
         "(storage.embedded.index_preload).", 0, (double)st.index_preloaded},
        {"promtable_embedded_readahead_scans_total",
         "Reads of many rows that waited for the disk and were read ahead of.", 1,
         (double)st.readahead_scans},
        {"promtable_embedded_readahead_rows_total",
         "Rows the read-ahead threads read into the block cache ahead of those reads.", 1,
         (double)st.readahead_rows},
        {"promtable_embedded_index_pending_bytes",
         "Memory of index cells acknowledged and logged but not yet written into RocksDB.", 0,
         (double)st.index_pending_bytes},
        {"promtable_embedded_index_drains_total",
         "Sorted batches of pending index cells written into RocksDB.", 1,
         (double)st.index_drains},
        {"promtable_embedded_index_drained_cells_total",
         "Index cells written into RocksDB by those batches.", 1,
         (double)st.index_drained_cells},
        {"promtable_embedded_index_drain_failures_total",
         "Batches of index cells RocksDB refused (the cells stay pending and are retried).", 1,
         (double)st.index_drain_failures},
        {"promtable_embedded_index_drain_seconds_total",
         "Time spent writing pending index cells into RocksDB.", 1, st.index_drain_seconds},
        {"promtable_embedded_index_waits_total",
         "Writes that waited for a drain because the pending index cells passed their limit.", 1,
         (double)st.index_waits},
    };
    size_t n = sizeof(all) / sizeof(all[0]);
    if (n > max)
        n = max;
    memcpy(out, all, n * sizeof(*out));
    return n;
}

int pt_embedded_flush(pt_backend *b)
{
    return pt_emb_flusher_sync(b->state);
}

void pt_emb_set_hook(embedded *e, emb_hook hook, void *ud)
{
    pthread_mutex_lock(&e->mu);
    e->hook = hook;
    e->hook_ud = ud;
    pthread_mutex_unlock(&e->mu);
}

int pt_emb_reload_logs(embedded *e, char *err, size_t errlen)
{
    pthread_mutex_lock(&e->mu);
    int rv = PT_EBUSY;
    if (!e->frozen && e->w.dir) {
        char *dir = e->w.dir;
        int sync = e->w.sync;
        e->w.dir = NULL; /* kept across the close */
        e->ready = 0;
        pt_emb_head_free(&e->h);
        pt_emb_ihead_clear(&e->ix);
        pt_emb_wal_close(&e->w);
        rv = load_logs(e, dir, sync, err, errlen);
        e->ready = rv == 0;
        free(dir);
    }
    pthread_mutex_unlock(&e->mu);
    return rv;
}

void pt_embedded_compact(pt_backend *b, int64_t now_ms)
{
    embedded *e = b->state;
    if (e->sink)
        return;
    atomic_store(&e->x.now_ms, now_ms);
    pt_emb_expire_compact(&e->x, &e->r);
}

#define C(field) offsetof(pt_embedded_conf, field)
static const pt_conf_key conf_keys[] = {
    {"path", "storage.path", PT_CONF_STR, "./data", 0, 0, C(path),
     "Data directory of the embedded store."},
    {"sync", "storage.sync", PT_CONF_BOOL, "false", 0, 1, C(sync),
     "fsync the embedded store's logs before acknowledging each write."},
    {"head_memory", "storage.head_memory", PT_CONF_BYTES, "128MiB", 64LL << 10, 1LL << 40,
     C(head_memory),
     "Bytes of samples held in memory (in-order ones XOR-compressed, others 16 B each); "
     "past it an eighth of the series is flushed into RocksDB in the background, so "
     "about 1.25 times this is held at most."},
    {"head_max_age", NULL, PT_CONF_DURATION, "2h", 0, 366LL * 86400000LL, C(head_max_age_ms),
     "Longest a sample stays in the head (and its logs) before it is flushed into RocksDB, "
     "and so about the longest it keeps the row of a series that stopped; 0: only "
     "head_memory decides."},
    {"block_cache", NULL, PT_CONF_BYTES, "64MiB", 8LL << 20, 1LL << 40, C(block_cache),
     "RocksDB block cache (uncompressed table blocks of the index and the points)."},
    {"table_index_memory", NULL, PT_CONF_BYTES, "128MiB", 0, 1LL << 40, C(table_index_memory),
     "Memory for the RocksDB table files' own index and filter blocks (0.2 % of a "
     "store of months, about 1 % of a small one), loaded when a file is opened and kept, on top of block_cache, "
     "so that a seek reads only its data block, also on a cold start; a store whose "
     "blocks need more reads them when needed instead. 0: always read when needed."},
    {"index_preload", NULL, PT_CONF_BYTES, "256MiB", 0, 1LL << 40, C(index_preload),
     "The index's table files (50 to 270 bytes a series and day, by its labels) are read "
     "into the page cache when the store opens if they total at most this, so that the "
     "first reads after a start resolve their selectors without waiting for the disk; 0: "
     "never."},
    {"read_threads", NULL, PT_CONF_LONG, "8", 0, 64, C(read_threads),
     "Threads that read ahead of a read of many series once it has had to wait for the "
     "disk, so that its disk reads overlap (a cold store); 0: every read reads alone."},
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
    .stats = embedded_stats,
    .verify = pt_emb_verify,
    .health = embedded_health,
    .position = embedded_position,
    .snapshot = pt_emb_snapshot,
    .erase = pt_emb_erase,
};
