/*
 * The flush thread: it waits for a frozen shard (or freezes one when the head is older
 * than head_max_age allows), sweeps the head's stale rows into the flush, writes them into
 * RocksDB (flush.c), then drops the flushed cells and the logs no shard needs; it also
 * watches a full disk and reopens RocksDB once space is free again. Synchronous flushes
 * (pt_embedded_flush, close) and the flush of the replayed logs at open are here too.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/statvfs.h>

#include "embedded_int.h"
#include "error.h"
#include "log.h"

/* Shard k's current generation becomes its frozen one and goes to the flush thread; its
 * cells are in the logs up to the one the freeze closes. Called with mu held and nothing
 * frozen. */
static int freeze_shard_locked(embedded *e, unsigned k)
{
    int rv = pt_emb_wal_freeze(&e->w);
    if (rv != 0)
        return rv;
    pt_emb_head_freeze(&e->h, k);
    e->h.sh[k].flushing = 1;
    e->frozen = 1;
    e->frozen_shard = k;
    e->frozen_seq = e->w.seq - 1;
    e->freezes++;
    e->last_freeze_ns = pt_now_ns();
    pthread_cond_signal(&e->work);
    return 0;
}

/* A shard with no current cells and no flush running has all its cells in RocksDB, so the
 * logs closed so far hold none it lacks; logs_done becomes what every shard is done
 * with. */
static void logs_done_locked(embedded *e)
{
    uint64_t upto = UINT64_MAX;
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        const hshard *sh = &e->h.sh[k];
        if (!sh->flushing && sh->cells[sh->cur] == 0)
            e->done[k] = e->w.seq - 1;
        if (e->done[k] < upto)
            upto = e->done[k];
    }
    e->logs_done = upto;
}

/* Deletes the logs every shard is done with, without mu (file deletions can wait for the
 * file system's journal). A log left behind holds cells RocksDB has, older than the later
 * logs': replaying it is harmless, and the next call tries again. */
static void drop_logs(embedded *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t upto = e->logs_done;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->drop_mu);
    if (upto > e->w.dropped && pt_emb_wal_drop(&e->w, upto) != 0)
        pt_log(PT_LOG_WARN, "embedded: deleting flushed logs failed", "error=\"%s\"",
               strerror(errno));
    pthread_mutex_unlock(&e->drop_mu);
}

/* Makes the log the next freeze moves to, without mu (held on entry and return). */
static void prepare_log_locked(embedded *e)
{
    if (e->w.next_fd >= 0)
        return;
    uint64_t seq = e->w.seq + 1;
    pthread_mutex_unlock(&e->mu);
    int fd = pt_emb_wal_prepare_fd(&e->w, seq);
    pthread_mutex_lock(&e->mu);
    pt_emb_wal_prepared(&e->w, seq, fd);
}

/* Freezes the next shard, in turn, that holds cells in its current generation, or with
 * rows set, rows (frozen empty, its flush writes nothing and evicts them); nothing when
 * none does. Called with mu held and nothing frozen. */
int pt_emb_flusher_freeze_next_locked(embedded *e, int rows)
{
    for (unsigned i = 0; i < HEAD_SHARDS; i++) {
        unsigned k = (e->next_shard + i) % HEAD_SHARDS;
        const hshard *sh = &e->h.sh[k];
        if ((rows ? sh->nrows : sh->cells[sh->cur]) == 0)
            continue;
        e->next_shard = (k + 1) % HEAD_SHARDS;
        return freeze_shard_locked(e, k);
    }
    return 0;
}

enum { MU_STEP = 4096 }; /* rows walked per hold of mu */

/* Lets a waiting writer in between two steps of a walk under mu (unlock-lock alone would
 * not); *t, when the hold began, and *longest, the longest hold, are kept up to date. */
static void mu_pause(embedded *e, uint64_t *t, uint64_t *longest)
{
    uint64_t now = pt_now_ns();
    *longest = now - *t > *longest ? now - *t : *longest;
    pthread_mutex_unlock(&e->mu);
    sched_yield();
    pthread_mutex_lock(&e->mu);
    *t = pt_now_ns();
}

/* The sweep of a new freeze (pt_emb_head_sweep_step), in steps, mu held on entry and
 * return: every shard's rows, the frozen one's marked, the others' stale ones moved to
 * be flushed with it. Returns the longest hold of mu, ns. */
static uint64_t sweep_locked(embedded *e)
{
    uint64_t t = pt_now_ns(), longest = 0;
    e->h.tick = pt_emb_head_tick();
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        int frozen = k == e->frozen_shard;
        const hshard *sh = &e->h.sh[k];
        if (!frozen && sh->ndirty[sh->cur ^ 1] != 0)
            continue; /* never: only the frozen shard has cells in its other generation */
        size_t i = 0, j = 0;
        while (!pt_emb_head_sweep_step(&e->h, k, frozen, &i, &j, MU_STEP))
            mu_pause(e, &t, &longest);
    }
    e->h.newest = 0;
    e->swept_at = e->freezes;
    uint64_t now = pt_now_ns();
    return now - t > longest ? now - t : longest;
}

/* After a flush wrote the frozen shard (and the sweep's rows) into RocksDB: their cells
 * go, a few thousand rows per hold of mu so that writers do not wait for a walk of the
 * whole shard. The epoch moves first: a scan from then on renews its iterator, which sees
 * the chunks, and the frozen cells it may still merge hold the same values. Returns the
 * longest hold of mu, ns. */
static uint64_t drop_frozen_locked(embedded *e)
{
    unsigned k = e->frozen_shard;
    e->epoch++;
    e->h.tick = pt_emb_head_tick();
    size_t b = 0;
    uint64_t t = pt_now_ns(), longest = 0;
    /* Before the frozen cells go: a row flushed now holds cells. */
    while (k < HEAD_SHARDS && !pt_emb_head_evict_step(&e->h, k, &b, MU_STEP))
        mu_pause(e, &t, &longest);
    for (unsigned j = 0; j < HEAD_SHARDS; j++) {
        hshard *sh = &e->h.sh[j];
        size_t i = 0;
        if (!sh->flushing)
            continue;
        while (!pt_emb_head_clear_step(&e->h, j, &i, MU_STEP, e->w.gen))
            mu_pause(e, &t, &longest);
        sh->flushing = 0;
    }
    uint64_t now = pt_now_ns();
    longest = now - t > longest ? now - t : longest;
    e->frozen = 0;
    e->sweep_rows = e->h.nrows;
    if (k < HEAD_SHARDS) {
        e->flushes++;
        e->done[k] = e->frozen_seq;
    }
    logs_done_locked(e);
    return longest;
}

/* A sweep on its own, with no shard frozen (frozen_shard HEAD_SHARDS), when the head's
 * rows grew by a quarter (16,384 at least) since the last sweep: under series churn the
 * freezes, which the samples' budget paces, come too seldom for the rows of series that
 * stopped. Returns 1 when it took rows (to be flushed), else it is over. */
static int sweep_alone_locked(embedded *e)
{
    size_t grow = e->sweep_rows / 4 > 16384 ? e->sweep_rows / 4 : 16384;
    if (e->h.nrows <= e->sweep_rows + grow || e->h.cur_bytes > e->budget)
        return 0;
    e->frozen = 1;
    e->frozen_shard = HEAD_SHARDS;
    sweep_locked(e);
    e->sweep_rows = e->h.nrows;
    for (unsigned k = 0; k < HEAD_SHARDS; k++)
        if (e->h.sh[k].flushing)
            return 1;
    e->frozen = 0;
    pthread_cond_broadcast(&e->flushed);
    return 0;
}

/* Bytes free on the disk holding dir for an unprivileged writer; UINT64_MAX when the
 * file system does not say. */
uint64_t pt_emb_disk_free(const char *dir)
{
    struct statvfs v;
    if (statvfs(dir, &v) != 0)
        return UINT64_MAX;
    return (uint64_t)v.f_bavail * v.f_frsize;
}

/* A full disk, from the flush thread, mu held on entry and return (released during a
 * reopen). Writes that find no space get PT_ENOSPACE (503) and nothing is acknowledged;
 * the logs keep every acknowledged cell. Once EMB_FREE_MIN bytes are free again: a
 * RocksDB that refused a write (its background error stops every later write until a
 * resume, and its own resume is off, rocks.c) is reopened here, where no flush runs and
 * the other users wait at the lock; then the store counts as ready again and the flush
 * in retry (or the next one) writes what the head holds. Called at least once a second
 * while anything is wrong. */
static void disk_check_locked(embedded *e)
{
    int full = atomic_load(&e->r.full), broken = atomic_load(&e->r.broken);
    if (!full && !broken)
        return;
    if (full && !e->full_logged) {
        e->full_logged = 1;
        e->full_events++;
        pt_log(PT_LOG_ERROR, "embedded: the disk is full, writes are refused with 503 until "
               "space is freed", "path=\"%s\" free_bytes=%llu", e->w.dir,
               (unsigned long long)pt_emb_disk_free(e->w.dir));
    }
    uint64_t now = pt_now_ns();
    if (now < e->recover_at)
        return;
    uint64_t avail = pt_emb_disk_free(e->w.dir);
    if (avail < EMB_FREE_MIN) {
        e->recover_at = now + 1000000000u;
        return;
    }
    if (broken) {
        char err[512] = "";
        pthread_mutex_unlock(&e->mu);
        int rv = pt_emb_rocks_reopen(&e->r, 0, err, sizeof(err));
        pthread_mutex_lock(&e->mu);
        if (rv != 0) {
            e->recover_ms = pt_emb_backoff_next(e->recover_ms);
            e->recover_at = pt_now_ns() + e->recover_ms * 1000000u;
            pt_log(PT_LOG_ERROR, "embedded: reopening RocksDB after a disk error failed, "
                   "retrying", "error=\"%s\" retry_ms=%llu", err,
                   (unsigned long long)e->recover_ms);
            return;
        }
        e->recover_ms = 0;
        e->reopens++;
        pt_log(PT_LOG_WARN, "embedded: RocksDB reopened after a disk error",
               "path=\"%s\" free_bytes=%llu", e->w.dir, (unsigned long long)avail);
    }
    if (full) {
        atomic_store(&e->r.full, 0);
        e->full_logged = 0;
        pt_log(PT_LOG_WARN, "embedded: space is free again, writes are accepted",
               "path=\"%s\" free_bytes=%llu", e->w.dir, (unsigned long long)avail);
    }
    /* A flush waiting for its retry goes now. */
    e->retry_now = 1;
    pthread_cond_signal(&e->work);
}

/* Once a second, from the flush thread, mu held on entry and return: when the table
 * files' pinned index and filter blocks have outgrown storage.embedded.table_index_memory
 * (the store grew since the start), RocksDB is reopened with them loaded on demand, as
 * after a disk error; a failed reopen is retried by disk_check_locked. */
static void pin_check_locked(embedded *e)
{
    uint64_t now = pt_now_ns();
    if (now < e->pin_check_at)
        return;
    e->pin_check_at = now + 1000000000u;
    if (!pt_emb_rocks_pin_check(&e->r))
        return;
    atomic_store(&e->r.pinned, 0);
    char err[512] = "";
    pthread_mutex_unlock(&e->mu);
    int rv = pt_emb_rocks_reopen(&e->r, 1, err, sizeof(err));
    pthread_mutex_lock(&e->mu);
    if (rv != 0) {
        atomic_store(&e->r.broken, 1);
        pt_log(PT_LOG_ERROR, "embedded: reopening RocksDB failed, retrying", "error=\"%s\"",
               err);
        return;
    }
    pt_log(PT_LOG_WARN, "embedded: the table files' index blocks outgrew "
           "storage.embedded.table_index_memory; RocksDB reopened, they are now read when "
           "needed", "limit_bytes=%zu", e->r.pin_max);
}

/* Waits for a frozen shard or the stop. Past head_max_age / HEAD_SHARDS without a freeze
 * (a head that fills slowly), the next shard with cells (or rows) is frozen here, so that
 * a round of the shards takes head_max_age at most: the logs replayed at a start, and the
 * rows of series that stopped (gone after two rounds at most), are bounded in time as
 * well as by the budget. */
static void wait_work_locked(embedded *e)
{
    while (!e->stop && !e->frozen) {
        disk_check_locked(e);
        pin_check_locked(e);
        if (sweep_alone_locked(e))
            break;
        if (e->age_step_ns == 0) {
            struct timespec until = pt_mono_after_ms(1000);
            pthread_cond_timedwait(&e->work, &e->mu, &until);
            continue;
        }
        uint64_t due = e->last_freeze_ns + e->age_step_ns, now = pt_now_ns();
        if (now < due) {
            uint64_t ms = (due - now + 999999) / 1000000;
            struct timespec until = pt_mono_after_ms(ms < 1000 ? ms : 1000);
            pthread_cond_timedwait(&e->work, &e->mu, &until);
            continue;
        }
        e->last_freeze_ns = now; /* when nothing is frozen: the next step */
        /* With no cells anywhere, a shard with rows: a row goes at the flush after the
         * one that took its last cells. */
        int rv = pt_emb_flusher_freeze_next_locked(e, 0);
        if (rv == 0 && !e->frozen)
            rv = pt_emb_flusher_freeze_next_locked(e, 1);
        if (rv != 0)
            pt_log(PT_LOG_WARN, "embedded: freezing a shard for age failed", "code=\"%s\"",
                   pt_strerror(rv));
    }
}

void *pt_emb_flusher_main(void *arg)
{
    embedded *e = arg;
    uint64_t backoff_ms = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        wait_work_locked(e);
        if (!e->frozen)
            break;
        disk_check_locked(e);
        pin_check_locked(e);
        /* The log the next freeze moves to, while nothing waits for it. */
        prepare_log_locked(e);
        unsigned k = e->frozen_shard;
        uint64_t swept_hold = 0;
        if (e->swept_at != e->freezes) /* not for a retry */
            swept_hold = sweep_locked(e);
        emb_hook hook = e->hook;
        void *ud = e->hook_ud;
        pthread_mutex_unlock(&e->mu);
        uint64_t t0 = pt_now_ns();
        /* Not into a RocksDB that refused a write (or is not open after a failed
         * reopen): the disk check reopens it first. */
        pthread_mutex_lock(&e->rewrite_mu);
        int rv = e->sink ? pt_emb_flush_flushing(e, hook, ud)
                 : !e->r.db ? PT_EUNAVAIL
                 : atomic_load(&e->r.broken)
                     ? (atomic_load(&e->r.full) ? PT_ENOSPACE : PT_EUNAVAIL)
                     : pt_emb_flush_flushing(e, hook, ud);
        /* The logs' index cells too, before any log is deleted. */
        if (rv == 0)
            rv = pt_emb_ihead_drain(&e->ix);
        pthread_mutex_unlock(&e->rewrite_mu);
        if (rv == PT_ENOSPACE) /* the table files of the flush, before RocksDB saw them */
            atomic_store(&e->r.full, 1);
        uint64_t took = pt_now_ns() - t0;
        pthread_mutex_lock(&e->mu);
        e->flush_err = rv;
        e->flush_ns += took;
        e->last_flush_ns = took;
        size_t cells = 0, bytes = 0; /* what the flush holds, its shard's and the sweep's */
        for (unsigned j = 0; j < HEAD_SHARDS; j++) {
            const hshard *sh = &e->h.sh[j];
            cells += sh->flushing ? sh->cells[sh->cur ^ 1] : 0;
            bytes += sh->flushing ? sh->cell_bytes[sh->cur ^ 1] : 0;
        }
        if (rv == 0) {
            uint64_t held = drop_frozen_locked(e);
            pt_log(PT_LOG_DEBUG, "embedded: flushed",
                   "shard=%u cells=%zu seconds=%.3f max_hold_ms=%.3f sweep_hold_ms=%.3f", k,
                   cells, (double)took / 1e9, (double)held / 1e6, (double)swept_hold / 1e6);
            backoff_ms = 0;
        } else {
            e->flush_failures++;
            backoff_ms = pt_emb_backoff_next(backoff_ms);
            /* A full disk: the disk check before the retry looks for space each second. */
            if ((rv == PT_ENOSPACE || atomic_load(&e->r.broken)) && backoff_ms > 1000)
                backoff_ms = 1000;
            pt_log(PT_LOG_ERROR, "embedded: flush failed, retrying",
                   "code=\"%s\" frozen_bytes=%zu retry_ms=%llu", pt_strerror(rv),
                   bytes, (unsigned long long)backoff_ms);
        }
        pthread_cond_broadcast(&e->flushed);
        if (rv == 0) {
            pthread_mutex_unlock(&e->mu);
            drop_logs(e);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        /* Back off; a synchronous flush or close cuts the wait short. */
        struct timespec until = pt_mono_after_ms(backoff_ms);
        while (!e->stop && !e->retry_now &&
               pthread_cond_timedwait(&e->work, &e->mu, &until) != ETIMEDOUT)
            ;
        e->retry_now = 0;
        if (e->stop)
            break; /* the logs keep the frozen cells for the next open */
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Waits until every cell written before the call is in RocksDB: the flush in progress,
 * then every shard with cells in turn. A failed flush ends the wait with its error; its
 * frozen generation stays with the flush thread's retries. */
int pt_emb_flusher_sync(embedded *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t failures = e->flush_failures;
    int rv = 0;
    if (e->frozen) {
        e->retry_now = 1;
        pthread_cond_signal(&e->work);
    }
    while (e->frozen && e->flush_failures == failures)
        pthread_cond_wait(&e->flushed, &e->mu);
    if (e->frozen)
        rv = e->flush_err;
    /* Each turn freezes the next shard with cells, so HEAD_SHARDS turns pass every shard
     * (those without cells have nothing to flush). */
    for (unsigned i = 0; i < HEAD_SHARDS && rv == 0; i++) {
        while (e->frozen && e->flush_failures == failures) /* a writer froze one */
            pthread_cond_wait(&e->flushed, &e->mu);
        if (e->frozen) {
            rv = e->flush_err;
            break;
        }
        if ((rv = pt_emb_flusher_freeze_next_locked(e, 0)) != 0 || !e->frozen)
            break;
        uint64_t target = e->freezes;
        while (e->flushes < target && e->flush_failures == failures)
            pthread_cond_wait(&e->flushed, &e->mu);
        rv = e->flushes < target ? e->flush_err : 0;
    }
    if (rv == 0)
        logs_done_locked(e);
    pthread_mutex_unlock(&e->mu);
    if (rv == 0)
        drop_logs(e);
    return rv;
}

/* At open, alone: the replayed cells (every log) go into RocksDB, shard by shard, and the
 * logs are emptied. */
int pt_emb_flusher_replayed(embedded *e)
{
    int rv;
    for (unsigned k = 0; k < HEAD_SHARDS; k++) {
        pt_emb_head_freeze(&e->h, k);
        if ((rv = pt_emb_flush_frozen(e, k, NULL, NULL)) != 0)
            return rv;
        pt_emb_head_drop_frozen(&e->h, k);
    }
    /* Every log replayed goes; the records go to a new one, and the next is made. */
    if ((rv = pt_emb_ihead_drain(&e->ix)) != 0 ||
        (rv = pt_emb_wal_drop(&e->w, e->w.seq - 1)) != 0 || (rv = pt_emb_wal_start(&e->w)) != 0)
        return rv;
    pt_emb_wal_prepared(&e->w, e->w.seq + 1, pt_emb_wal_prepare_fd(&e->w, e->w.seq + 1));
    for (unsigned k = 0; k < HEAD_SHARDS; k++)
        e->done[k] = e->w.dropped;
    e->logs_done = e->w.dropped;
    e->epoch++;
    e->freezes++;
    e->flushes++;
    return 0;
}
