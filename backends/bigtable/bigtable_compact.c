/*
 * Compaction of the points table (docs/bigtable.md, "Compaction"; contracts in
 * bigtable_int.h). A pass, under the lease row of the index table:
 *
 *   1. reads a page of rows with values stripped (qualifiers and versions only) and picks
 *      the rows worth compacting (pt_bt_compact_select);
 *   2. reads those rows in full, a batch at a time, builds each one's rewrite
 *      (pt_bt_compact_row: deletes of the folded cells, then the new chunks) and sends
 *      the batch in one MutateRows, one entry per row, which Bigtable applies atomically
 *      per row: a reader sees a row's cells before or after, never between;
 *   3. goes on after the page's last row until the table ends.
 *
 * With storage.retention_rules, step 1 also deletes the cells of a page's data rows that
 * are past their row's keep (a cell's version is its newest sample's time: a chunk goes
 * once all of it is past), one DeleteFromColumn of the versions below the cutoff per
 * such cell, sent before step 2 reads the candidates. Reads clip at the cutoff anyway,
 * so a chunk across it waits for a later pass.
 *
 * A pass can stop anywhere: rows done are no longer picked, the others are as they were.
 * Two compactors on one row (a lease that lapsed under a stalled holder) build the same
 * rewrite from the same cells, and from different reads rewrites that each keep the
 * merged view, so the lease saves work; correctness does not rest on it.
 *
 * Memory per pass: one page's candidate keys, one batch's rows and mutations.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bigtable_int.h"
#include "error.h"
#include "log.h"
#include "schema.h"

enum {
    PAGE_ROWS = 1000,       /* rows one qualifier scan looks at */
    BATCH_ROWS = 32,        /* candidate rows read and rewritten together */
    BATCH_BYTES = 16 << 20, /* ... and their mutations' bytes at most (one row may pass) */
    FIRST_PASS_MS = 60000,  /* the thread's first pass comes after this or the interval */
};

/* ============================================================================
 * the lease: one cell (PT_COMPACT_LEASE_ROW, "l") taken and renewed with
 * CheckAndMutateRow against the value read
 * ========================================================================== */

typedef struct lease {
    int present;  /* a cell was read */
    char val[64]; /* ... its value */
    size_t n;
    int64_t version_us; /* ... and version */
    int64_t expiry_ms;  /* what the value says */
    uint64_t holder;
} lease;

static const pt_slice lease_qual = {(const uint8_t *)"l", 1};

static int lease_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    lease *l = ud;
    (void)key;
    for (size_t i = 0; i < n; i++) {
        if (!pt_slice_eq(cells[i].qualifier, lease_qual) || cells[i].value.n >= sizeof(l->val))
            continue;
        l->present = 1;
        l->n = cells[i].value.n;
        memcpy(l->val, cells[i].value.p, l->n);
        l->val[l->n] = '\0';
        l->version_us = cells[i].ts;
        long long e;
        unsigned long long h;
        if (sscanf(l->val, "%lld %llx", &e, &h) == 2) {
            l->expiry_ms = e;
            l->holder = h;
        }
    }
    return 0;
}

static int lease_read(pt_bt *bt, lease *l)
{
    static const uint8_t row[] = PT_COMPACT_LEASE_ROW "\0";
    pt_row_range r = {{row, sizeof(row) - 2}, {row, sizeof(row) - 1}};
    pt_scan s = {.table = PT_TABLE_INDEX, .ranges = &r, .nranges = 1};
    *l = (lease){0};
    return pt_bt_data_read_raw(bt, &s, 0, lease_row, l);
}

/* Sets the lease to expiry_ms for this holder if it still holds what l says. 0 with
 * *won set or not, or a pt error code. On success l describes the new cell. */
static int lease_put(pt_bt *bt, lease *l, int64_t expiry_ms, int64_t version_us, int *won)
{
    char v[64];
    int n = snprintf(v, sizeof(v), "%lld %016llx", (long long)expiry_ms,
                     (unsigned long long)bt->compact.holder);
    pt_mutation m = {.table = PT_TABLE_INDEX,
                     .row = PT_SLICE_LIT(PT_COMPACT_LEASE_ROW),
                     .qual = lease_qual,
                     .value = {(const uint8_t *)v, (size_t)n},
                     .version_us = version_us};
    pt_slice expect = l->present ? (pt_slice){(const uint8_t *)l->val, l->n} : (pt_slice){0};
    int rv = pt_bt_data_check_and_set(bt, &m, expect, won);
    if (rv == 0 && *won) {
        *l = (lease){.present = 1,
                     .n = (size_t)n,
                     .version_us = version_us,
                     .expiry_ms = expiry_ms,
                     .holder = bt->compact.holder};
        memcpy(l->val, v, (size_t)n + 1);
    }
    return rv;
}

/* Takes (or renews) the lease at now_ms: 0 held, 1 another holder's is live or the race
 * was lost, or a pt error code. The new cell's version is above the one read, so it is
 * the newest. */
static int lease_take(pt_bt *bt, lease *l, int64_t now_ms)
{
    int rv = lease_read(bt, l);
    if (rv != 0)
        return rv;
    if (l->present && l->holder != bt->compact.holder && l->expiry_ms > now_ms)
        return 1;
    int64_t expiry = now_ms + PT_BT_COMPACT_LEASE_MS, version = expiry * 1000;
    if (l->present && version <= l->version_us)
        version = l->version_us + 1000;
    int won = 0;
    rv = lease_put(bt, l, expiry, version, &won);
    return rv != 0 ? rv : !won;
}

/* Gives the lease up (expiry 0, same version: the cell is replaced). Best effort. */
static void lease_release(pt_bt *bt, lease *l)
{
    int won = 0;
    if (l->present && l->holder == bt->compact.holder)
        lease_put(bt, l, 0, l->version_us, &won);
}

/* ============================================================================
 * a pass
 * ========================================================================== */

typedef struct pass {
    pt_bt *bt;
    int64_t now_ms, mono0_ms, guard_ms;
    lease l;
    int rv; /* a failure inside a callback */
    /* Step 1: the page's candidate keys, each followed by a 0 byte (its range's end). */
    pt_buf keys;
    size_t *koff, nk, kcap;
    pt_buf last; /* the page's last row key, with a 0 byte after it: the next page's start */
    size_t page_rows;
    uint8_t *fold;
    size_t fcap;
    /* Step 2: one batch's mutations, copied into mem. */
    pt_bt_compactor cp;
    pt_arena mem;
    pt_mutation *muts;
    size_t nm, mcap;
    const pt_mutation **ptrs;
    size_t pcap;
    size_t batch_rows, batch_cells, batch_chunks, batch_bytes;
    size_t batch_expired; /* retention deletes among the mutations */
    size_t seen;    /* rows of the batch's read looked at; it stops at BATCH_BYTES */
    long done_rows; /* rows this pass compacted */
} pass;

static int stopping(const pass *p)
{
    return atomic_load(&p->bt->compact.stop) != 0;
}

static int64_t pass_now(const pass *p)
{
    return p->now_ms + (pt_mono_ms() - p->mono0_ms);
}

static int reserve_fold(pass *p, size_t n)
{
    return n <= p->fcap ? 0 : pt_array_reserve(&p->fold, &p->fcap, n, 1, 0);
}

/* Into the batch: a delete of the cells of data row key that are past its keep. */
static int expire_row(pass *p, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    if (!p->bt->keep_row || pt_points_row_base(key.p, key.n) < 0)
        return 0;
    int64_t keep_ms = p->bt->keep_row(p->bt->keep_ud, key);
    if (keep_ms <= 0)
        return 0;
    int64_t cut_us = (p->now_ms - keep_ms) * 1000;
    pt_slice row = key;
    int rv = 0, copied = 0;
    for (size_t i = 0; i < n && rv == 0; i++) {
        if (cells[i].ts >= cut_us || (i && pt_slice_eq(cells[i].qualifier, cells[i - 1].qualifier)))
            continue;
        if (!copied++ && (rv = pt_bt_copy_in(&p->mem, &row)) != 0)
            break;
        if (p->nm == p->mcap)
            rv = pt_array_reserve(&p->muts, &p->mcap, p->nm + 1, sizeof(*p->muts), 0);
        pt_mutation m = {.table = PT_TABLE_POINTS, .row = row, .qual = cells[i].qualifier,
                         .version_us = -cut_us};
        if (rv == 0 && (rv = pt_bt_copy_in(&p->mem, &m.qual)) == 0) {
            p->muts[p->nm++] = m;
            p->batch_expired++;
            p->batch_bytes += m.qual.n;
        }
    }
    return rv;
}

/* Step 1's row callback: remembers the row as the resume point, and as a candidate when
 * it is worth compacting; deletes what is past its retention rule. */
static int plan_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    pass *p = ud;
    int rv = reserve_fold(p, n);
    if (rv == 0)
        rv = expire_row(p, key, cells, n);
    p->page_rows++;
    pt_buf_reset(&p->last);
    if (rv == 0 &&
        (pt_buf_append(&p->last, key.p, key.n) != 0 || pt_buf_append(&p->last, "", 1) != 0))
        rv = PT_ENOMEM;
    if (rv == 0 && pt_bt_compact_select(key, cells, n, p->guard_ms, p->fold) > 0) {
        if (p->nk == p->kcap)
            rv = pt_array_reserve(&p->koff, &p->kcap, p->nk + 1, sizeof(*p->koff), 0);
        if (rv == 0) {
            p->koff[p->nk++] = pt_buf_used(&p->keys);
            if (pt_buf_append(&p->keys, key.p, key.n) != 0 || pt_buf_append(&p->keys, "", 1) != 0)
                rv = PT_ENOMEM;
        }
    }
    if (rv != 0)
        return p->rv = rv;
    return stopping(p);
}

/* Step 2's row callback: the row's rewrite, if it is still worth one, into the batch. */
static int build_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    pass *p = ud;
    char why[160] = "";
    if (p->batch_bytes >= BATCH_BYTES)
        return 1; /* the rest of the batch goes in the next read */
    p->seen++;
    int rv = reserve_fold(p, n);
    if (rv != 0)
        return p->rv = rv;
    size_t nfold = pt_bt_compact_select(key, cells, n, p->guard_ms, p->fold);
    if (nfold == 0)
        return 0; /* compacted meanwhile, or by another pass */
    if (p->bt->compact.fail_after &&
        p->done_rows + (long)p->batch_rows >= p->bt->compact.fail_after)
        return 0;
    pt_mutation *m;
    size_t nchunks;
    long nm =
        pt_bt_compact_row(&p->cp, key, cells, n, p->fold, nfold, &m, &nchunks, why, sizeof(why));
    if (nm == PT_EINTERNAL && why[0]) {
        /* A corrupt chunk stays as it is (scans report it); the pass goes on. */
        char q[96];
        pt_log(PT_LOG_ERROR, "bigtable compaction skips a row", "row=%s why=\"%s\"",
               pt_log_quote(q, sizeof(q), (const char *)key.p, key.n < 64 ? key.n : 64), why);
        return 0;
    }
    if (nm <= 0)
        return nm < 0 ? (p->rv = (int)nm) : 0;
    if (p->nm + (size_t)nm > p->mcap &&
        (rv = pt_array_reserve(&p->muts, &p->mcap, p->nm + (size_t)nm, sizeof(*p->muts), 0)))
        return p->rv = rv;
    pt_slice row = key;
    if ((rv = pt_bt_copy_in(&p->mem, &row)) != 0)
        return p->rv = rv;
    for (long i = 0; i < nm; i++) {
        pt_mutation c = m[i];
        c.row = row;
        if ((rv = pt_bt_copy_in(&p->mem, &c.qual)) != 0 || (rv = pt_bt_copy_in(&p->mem, &c.value)) != 0)
            return p->rv = rv;
        p->muts[p->nm++] = c;
        p->batch_bytes += c.qual.n + c.value.n;
    }
    p->batch_rows++;
    p->batch_cells += nfold;
    p->batch_chunks += nchunks;
    return 0;
}

/* Sends the batch, counts it, renews the lease when half of it is gone. */
static int flush_batch(pass *p)
{
    pt_bt_compaction *c = &p->bt->compact;
    int rv = 0;
    if (p->nm) {
        if (p->nm > p->pcap &&
            (rv = pt_array_reserve(&p->ptrs, &p->pcap, p->nm, sizeof(*p->ptrs), 0)) != 0)
            return rv;
        for (size_t i = 0; i < p->nm; i++)
            p->ptrs[i] = &p->muts[i];
        if ((rv = pt_bt_data_mutate(p->bt, PT_TABLE_POINTS, p->ptrs, p->nm)) != 0)
            return rv;
        atomic_fetch_add(&c->rows, p->batch_rows);
        atomic_fetch_add(&c->cells, p->batch_cells);
        atomic_fetch_add(&c->chunks, p->batch_chunks);
        if (p->bt->retention_dropped)
            atomic_fetch_add(p->bt->retention_dropped, p->batch_expired);
        p->done_rows += (long)p->batch_rows;
    }
    p->nm = p->batch_rows = p->batch_cells = p->batch_chunks = p->batch_bytes = 0;
    p->batch_expired = 0;
    pt_arena_reset(&p->mem);
    if (c->fail_after && p->done_rows >= c->fail_after)
        return PT_EUNAVAIL;
    int64_t now = pass_now(p);
    if (p->l.expiry_ms - now < PT_BT_COMPACT_LEASE_MS / 2)
        rv = lease_take(p->bt, &p->l, now);
    return rv;
}

/* Step 2 for the page's candidates, BATCH_ROWS at a time. */
static int compact_candidates(pass *p)
{
    const uint8_t *base = pt_buf_data(&p->keys);
    size_t total = pt_buf_used(&p->keys);
    pt_row_range r[BATCH_ROWS];
    for (size_t i = 0; i < p->nk && !stopping(p);) {
        size_t k = 0;
        for (; k < BATCH_ROWS && i < p->nk; k++, i++) {
            size_t end = i + 1 < p->nk ? p->koff[i + 1] : total; /* past the 0 byte */
            r[k] = (pt_row_range){{base + p->koff[i], end - p->koff[i] - 1},
                                  {base + p->koff[i], end - p->koff[i]}};
        }
        pt_scan s = {.table = PT_TABLE_POINTS, .ranges = r, .nranges = k};
        p->seen = 0;
        int rv = pt_bt_data_read_raw(p->bt, &s, 0, build_row, p);
        if (p->batch_bytes >= BATCH_BYTES)
            i = i - k + p->seen; /* candidates gone meanwhile are not counted: re-read */
        if (rv == 0 && p->rv)
            rv = p->rv;
        if (rv == 0)
            rv = flush_batch(p);
        if (rv != 0)
            return rv;
    }
    return 0;
}

/* The whole table, a page at a time. */
static int run_pass(pass *p)
{
    for (int first = 1; !stopping(p); first = 0) {
        pt_row_range r = {{0}, {0}};
        if (!first)
            r.start = (pt_slice){pt_buf_data(&p->last), pt_buf_used(&p->last)};
        pt_scan s = {.table = PT_TABLE_POINTS, .ranges = &r, .nranges = 1, .row_limit = PAGE_ROWS};
        p->page_rows = p->nk = 0;
        pt_buf_reset(&p->keys);
        int rv = pt_bt_data_read_raw(p->bt, &s, 1, plan_row, p);
        if (rv == 0 && p->rv)
            rv = p->rv;
        if (rv == 0 && p->nm)
            rv = flush_batch(p); /* the retention deletes */
        if (rv == 0)
            rv = compact_candidates(p);
        if (rv != 0 || p->page_rows < PAGE_ROWS)
            return rv;
    }
    return 0;
}

int pt_bt_compact_pass(void *state, int64_t now_ms)
{
    pt_bt *bt = state;
    pass p = {.bt = bt,
              .now_ms = now_ms,
              .mono0_ms = pt_mono_ms(),
              .guard_ms = now_ms - PT_BT_COMPACT_GUARD_MS};
    int rv = lease_take(bt, &p.l, now_ms);
    if (rv != 0) {
        if (rv < 0)
            atomic_fetch_add(&bt->compact.failures, 1);
        return rv;
    }
    atomic_fetch_add(&bt->compact.passes, 1);
    pt_buf_init(&p.keys, (size_t)PAGE_ROWS * (PT_BT_MAX_ROW_KEY + 1));
    pt_buf_init(&p.last, PT_BT_MAX_ROW_KEY + 1);
    pt_arena_init(&p.mem, 1 << 20, 0);
    rv = run_pass(&p);
    if (rv > 0) {
        rv = 0; /* stopped, or the lease was lost to another holder */
    } else if (rv < 0) {
        atomic_fetch_add(&bt->compact.failures, 1);
        pt_log(PT_LOG_WARN, "bigtable compaction pass failed", "rows=%ld error=%d", p.done_rows,
               rv);
    }
    if (rv == 0)
        lease_release(bt, &p.l);
    pt_arena_free(&p.mem);
    pt_buf_free(&p.keys);
    pt_buf_free(&p.last);
    pt_bt_compactor_free(&p.cp);
    free(p.koff);
    free(p.fold);
    free(p.muts);
    free(p.ptrs);
    return rv;
}

void pt_bt_set_compact_fail_after(void *state, long rows)
{
    pt_bt *bt = state;
    bt->compact.fail_after = rows;
}

/* ============================================================================
 * the thread
 * ========================================================================== */

void pt_bt_compact_init(pt_bt *bt)
{
    pt_bt_compaction *c = &bt->compact;
    if (getrandom(&c->holder, sizeof(c->holder), GRND_NONBLOCK) != sizeof(c->holder))
        c->holder = (uint64_t)getpid() << 32 ^ (uint64_t)pt_mono_ms();
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        return;
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        return;
    }
    c->sync_ready = 1;
}

/* Waits ms or until stop; 1 when stopping. */
static int nap(pt_bt_compaction *c, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!atomic_load(&c->stop) && pthread_cond_timedwait(&c->cv, &c->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&c->mu);
    return atomic_load(&c->stop) != 0;
}

static void *compact_thread(void *arg)
{
    pt_bt *bt = arg;
    pt_bt_compaction *c = &bt->compact;
    long wait = c->interval_ms < FIRST_PASS_MS ? c->interval_ms : FIRST_PASS_MS;
    while (!nap(c, wait)) {
        int64_t t0 = pt_mono_ms();
        int rv = pt_bt_compact_pass(bt, pt_wall_ms());
        if (rv == 0)
            pt_log(PT_LOG_INFO, "bigtable compaction pass",
                   "rows_total=%lu cells_total=%lu pass_ms=%lld", atomic_load(&c->rows),
                   atomic_load(&c->cells), (long long)(pt_mono_ms() - t0));
        wait = c->interval_ms;
    }
    return NULL;
}

int pt_bt_compact_start(pt_bt *bt, long interval_ms)
{
    pt_bt_compaction *c = &bt->compact;
    if (!c->sync_ready)
        return PT_ENOMEM;
    c->interval_ms = interval_ms;
    if (pthread_create(&c->thread, NULL, compact_thread, bt) != 0)
        return PT_EINTERNAL;
    c->started = 1;
    return 0;
}

void pt_bt_compact_free(pt_bt *bt)
{
    pt_bt_compaction *c = &bt->compact;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        atomic_store(&c->stop, 1);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
        c->started = 0;
    }
    if (c->sync_ready) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        c->sync_ready = 0;
    }
}
