/*
 * The index head: index cells acknowledged but not yet in RocksDB.
 *
 * A new series brings about a dozen index cells whose keys are spread over the whole index
 * (a reference is a hash). Put into RocksDB one request at a time, each cell is a search of
 * a large memtable skip list from its top: most of the cost of a new series. Here a
 * request's cells (sorted by the caller) are kept as one run; a drain merges every pending
 * run into key order and writes it in RocksDB batches of a few MiB, whose hundreds of
 * thousands of sorted keys go into the skip list a step or two from the previous key each.
 * Batches are bounded because one batch for the whole drain would hold a copy of every
 * pending cell, tens of MB when many series are new at once, in memory the allocator then
 * keeps. A drain that fails part way is retried whole: writing a cell again writes the
 * same value.
 *
 * Durability is the points log's (wal.c): a request's index cells are in its record
 * ('I' entries), written before they are added here, and replay adds them again. A drain
 * writes through RocksDB's own log (synced with storage.sync), so a points log may be
 * deleted once everything added before it was drained (embedded.c's flush does that).
 *
 * Visibility: a scan of the index table first drains what is pending (ihead_drain), so
 * it sees every cell acknowledged before it began; in steady state (no new series) there
 * is nothing to drain. Drains run one at a time; writers keep adding while one runs.
 *
 * Runs are chained oldest first and a drain keeps that order for equal keys, so the later
 * write of a cell wins, as in RocksDB.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "embedded_int.h"
#include "error.h"
#include "log.h"

/* A run: cells sorted by key, each u32 key length, u32 value length (host order), the
 * key (row || 0x00 || qualifier), the value. */
struct irun {
    irun *next;
    size_t cells, len;
    uint8_t data[];
};

enum { CELL_HDR = 8 };

static size_t run_size(size_t len) { return sizeof(irun) + len; }

int pt_emb_ihead_init(ihead *x, rocks *r, size_t soft, size_t hard)
{
    memset(x, 0, sizeof(*x));
    x->r = r;
    x->soft = soft;
    x->hard = hard > soft ? hard : soft;
    if (pthread_mutex_init(&x->mu, NULL) != 0)
        return PT_ENOMEM;
    pthread_condattr_t ca;
    int rv = PT_ENOMEM;
    if (pthread_condattr_init(&ca) == 0) {
        if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
            pthread_cond_init(&x->cv, &ca) == 0) {
            if (pthread_cond_init(&x->work, &ca) == 0)
                rv = 0;
            else
                pthread_cond_destroy(&x->cv);
        }
        pthread_condattr_destroy(&ca);
    }
    if (rv != 0) {
        pthread_mutex_destroy(&x->mu);
        return rv;
    }
    x->init = 1;
    return 0;
}

static void free_runs(irun *r)
{
    while (r) {
        irun *next = r->next;
        free(r);
        r = next;
    }
}

void pt_emb_ihead_free(ihead *x)
{
    if (!x->init)
        return;
    pt_emb_thread_stop(x->thread, &x->mu, &x->work, &x->stop, &x->thread_started);
    free_runs(x->first);
    pthread_cond_destroy(&x->cv);
    pthread_cond_destroy(&x->work);
    pthread_mutex_destroy(&x->mu);
    memset(x, 0, sizeof(*x));
}

void pt_emb_ihead_clear(ihead *x)
{
    pthread_mutex_lock(&x->mu);
    while (x->draining)
        pthread_cond_wait(&x->cv, &x->mu);
    free_runs(x->first);
    x->first = x->last = NULL;
    x->bytes = 0;
    x->drained = x->added;
    atomic_store(&x->pending, 0);
    pthread_mutex_unlock(&x->mu);
}

int pt_emb_ihead_cmp(const void *pa, const void *pb)
{
    const pt_mutation *a = *(const pt_mutation *const *)pa, *b = *(const pt_mutation *const *)pb;
    int c = pt_slice_cmp(a->row, b->row);
    if (c == 0)
        c = pt_slice_cmp(a->qual, b->qual);
    return c ? c : (a > b) - (a < b);
}

int pt_emb_ihead_add(ihead *x, const pt_mutation *const *v, size_t n)
{
    if (n == 0)
        return 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += CELL_HDR + v[i]->row.n + 1 + v[i]->qual.n + v[i]->value.n;
    irun *run = malloc(run_size(len));
    if (!run)
        return PT_ENOMEM;
    run->next = NULL;
    run->cells = n;
    run->len = len;
    uint8_t *p = run->data;
    for (size_t i = 0; i < n; i++) {
        const pt_mutation *m = v[i];
        uint32_t kn = (uint32_t)(m->row.n + 1 + m->qual.n), vn = (uint32_t)m->value.n;
        memcpy(p, &kn, 4);
        memcpy(p + 4, &vn, 4);
        p += CELL_HDR;
        memcpy(p, m->row.p, m->row.n);
        p[m->row.n] = 0;
        if (m->qual.n)
            memcpy(p + m->row.n + 1, m->qual.p, m->qual.n);
        p += kn;
        if (vn)
            memcpy(p, m->value.p, vn);
        p += vn;
    }

    pthread_mutex_lock(&x->mu);
    if (x->last)
        x->last->next = run;
    else
        x->first = run;
    x->last = run;
    x->bytes += run_size(len);
    x->added++;
    atomic_store(&x->pending, 1);
    if (x->bytes >= x->soft)
        pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
    return 0;
}

int pt_emb_ihead_wait_room(ihead *x)
{
    pthread_mutex_lock(&x->mu);
    int rv = 0;
    while (x->bytes >= x->hard) {
        if (x->last_err) {
            /* RocksDB refuses the drains: come back later */
            rv = x->last_err == PT_ENOSPACE ? PT_ENOSPACE : PT_EBUSY;
            break;
        }
        if (!x->thread_started) {
            pthread_mutex_unlock(&x->mu);
            rv = pt_emb_ihead_drain(x);
            pthread_mutex_lock(&x->mu);
            if (rv != 0)
                break;
            continue;
        }
        /* The drain thread takes the runs as soon as the drain in progress ends (add
         * woke it); waiters only wait, or they would wake each other in a loop. */
        x->waits++;
        pthread_cond_wait(&x->cv, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return rv;
}

/* ---- drains ---- */

/* A run being merged: where it stands and its current cell. */
typedef struct cursor {
    const uint8_t *p, *end;
    const uint8_t *k, *v;
    uint32_t kn, vn;
    size_t age; /* the run's place in the chain: lower is older */
} cursor;

static void cursor_load(cursor *c)
{
    memcpy(&c->kn, c->p, 4);
    memcpy(&c->vn, c->p + 4, 4);
    c->k = c->p + CELL_HDR;
    c->v = c->k + c->kn;
}

/* a before b: the smaller key, and for equal keys the older run. */
static int cursor_before(const cursor *a, const cursor *b)
{
    size_t n = a->kn < b->kn ? a->kn : b->kn;
    int c = memcmp(a->k, b->k, n);
    if (c == 0)
        c = (a->kn > b->kn) - (a->kn < b->kn);
    return c < 0 || (c == 0 && a->age < b->age);
}

static void sift_down(cursor *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && cursor_before(&h[l], &h[m]))
            m = l;
        if (l + 1 < n && cursor_before(&h[l + 1], &h[m]))
            m = l + 1;
        if (m == i)
            return;
        cursor t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* A drain's RocksDB batch is written and reused when it passes this size. */
#define DRAIN_BATCH ((size_t)4 << 20)

static int write_batch(rocks *r, rocksdb_writebatch_t *wb)
{
    char *msg = NULL;
    rocksdb_write(r->db, r->wopts, wb, &msg);
    rocksdb_writebatch_clear(wb);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

/* Writes the runs' cells, merged into key order, through RocksDB's log. */
static int write_runs(rocks *r, const irun *runs, size_t *cells)
{
    size_t k = 0;
    for (const irun *u = runs; u; u = u->next)
        k++;
    cursor *h = malloc(k * sizeof(*h));
    if (!h)
        return PT_ENOMEM;
    size_t n = 0, age = 0;
    for (const irun *u = runs; u; u = u->next, age++) {
        if (u->len == 0)
            continue;
        h[n] = (cursor){.p = u->data, .end = u->data + u->len, .age = age};
        cursor_load(&h[n++]);
    }
    for (size_t i = n / 2; i-- > 0;)
        sift_down(h, n, i);

    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    size_t batched = 0;
    int rv = 0;
    *cells = 0;
    while (n > 0 && rv == 0) {
        cursor *c = &h[0];
        rocksdb_writebatch_put_cf(wb, r->cf[CF_INDEX], (const char *)c->k, c->kn,
                                  (const char *)c->v, c->vn);
        ++*cells;
        batched += CELL_HDR + c->kn + c->vn;
        c->p = c->v + c->vn;
        if (c->p < c->end)
            cursor_load(c);
        else
            h[0] = h[--n];
        sift_down(h, n, 0);
        if (batched >= DRAIN_BATCH || n == 0) {
            rv = write_batch(r, wb);
            batched = 0;
        }
    }
    free(h);
    rocksdb_writebatch_destroy(wb);
    return rv;
}

int pt_emb_ihead_drain(ihead *x)
{
    if (!atomic_load(&x->pending))
        return 0;
    pthread_mutex_lock(&x->mu);
    uint64_t target = x->added;
    int rv = 0;
    while (x->drained < target) {
        if (x->draining) {
            pthread_cond_wait(&x->cv, &x->mu);
            continue;
        }
        irun *list = x->first, *last = x->last;
        uint64_t upto = x->added;
        size_t bytes = x->bytes;
        x->first = x->last = NULL;
        x->bytes = 0;
        x->draining = 1;
        pthread_cond_broadcast(&x->cv); /* writers waiting for room have it */
        pthread_mutex_unlock(&x->mu);

        size_t cells = 0;
        uint64_t t0 = pt_now_ns();
        if ((rv = pt_emb_rocks_enter_write(x->r)) == 0) {
            rv = pt_emb_rocks_note(x->r, write_runs(x->r, list, &cells));
            pt_emb_rocks_leave(x->r);
        }
        uint64_t t1 = pt_now_ns();

        pthread_mutex_lock(&x->mu);
        x->draining = 0;
        x->drain_ns += t1 - t0;
        x->last_err = rv;
        if (rv == 0) {
            x->drained = upto;
            x->drains++;
            x->drained_cells += cells;
            if (x->drained == x->added)
                atomic_store(&x->pending, 0);
        } else {
            /* Back in front, older than what came meanwhile. */
            last->next = x->first;
            if (!x->first)
                x->last = last;
            x->first = list;
            x->bytes += bytes;
            x->drain_failures++;
            list = NULL;
        }
        pthread_cond_broadcast(&x->cv);
        pthread_cond_signal(&x->work); /* the thread looks again: more may be pending */
        if (list) {
            pthread_mutex_unlock(&x->mu);
            free_runs(list);
            pthread_mutex_lock(&x->mu);
        }
        if (rv != 0)
            break;
    }
    pthread_mutex_unlock(&x->mu);
    return rv;
}

/* The drain thread: drains whenever the pending runs pass the soft limit, backing off
 * after a failure (meanwhile a writer finding the runs past the hard limit gets
 * PT_EBUSY). */
static void *drain_main(void *arg)
{
    ihead *x = arg;
    uint64_t backoff_ms = 0;
    pthread_mutex_lock(&x->mu);
    while (!x->stop) {
        if (x->bytes < x->soft || x->draining) {
            pthread_cond_wait(&x->work, &x->mu);
            continue;
        }
        pthread_mutex_unlock(&x->mu);
        int rv = pt_emb_ihead_drain(x);
        pthread_mutex_lock(&x->mu);
        if (rv == 0) {
            backoff_ms = 0;
            continue;
        }
        backoff_ms = pt_emb_backoff_next(backoff_ms);
        pt_log(PT_LOG_ERROR, "embedded: writing index cells failed, retrying",
               "code=\"%s\" pending_bytes=%zu retry_ms=%llu", pt_strerror(rv), x->bytes,
               (unsigned long long)backoff_ms);
        struct timespec until = pt_mono_after_ms(backoff_ms);
        while (!x->stop && pthread_cond_timedwait(&x->work, &x->mu, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int pt_emb_ihead_start(ihead *x)
{
    if (pthread_create(&x->thread, NULL, drain_main, x) != 0)
        return PT_ENOMEM;
    x->thread_started = 1;
    return 0;
}


void pt_emb_ihead_stats(ihead *x, pt_emb_ihead_stat *st)
{
    pthread_mutex_lock(&x->mu);
    *st = (pt_emb_ihead_stat){.pending_bytes = x->bytes,
                              .drains = x->drains,
                              .drained_cells = x->drained_cells,
                              .drain_failures = x->drain_failures,
                              .waits = x->waits,
                              .drain_seconds = (double)x->drain_ns / 1e9};
    pthread_mutex_unlock(&x->mu);
}
